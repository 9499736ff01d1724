/* Two threads share one in-order profiling queue: one writes 1, 2, 3, ... into a buffer,
 * the other reads it. Every read must return the value of the last write ahead of it in
 * the queue, so the write whose value a read returned cannot have started after the read
 * started. Through the node a read of a shared-memory buffer is copied when its task has
 * run: a write the other thread enqueued between the read and the read's flush landed in
 * the same task and the read returned it (and a write copied straight into shared memory
 * could be seen by a read enqueued before the write's own event). Bounded in rounds and
 * in time. */
#include <pthread.h>
#include <time.h>
#include "common.h"

#define ROUNDS_MAX 1000
#define WRITES_MAX 60000
#define WRITERS 3

static env_t e;
static cl_mem buf;
static volatile int reading_done;
static cl_event writes[WRITES_MAX + 1];
static int writes_count;
/* A non-blocking write may read its host memory when it runs: one value each. */
static int values[WRITES_MAX + 1];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static pthread_mutex_t next_lock = PTHREAD_MUTEX_INITIALIZER;

/* Takes the next value to write (0: none left). */
static int next_value(void) {
    pthread_mutex_lock(&next_lock);
    int n = writes_count < WRITES_MAX && !reading_done ? writes_count + 1 : 0;
    if (n) writes_count = n;
    pthread_mutex_unlock(&next_lock);
    return n;
}

static void *writer(void *arg) {
    (void)arg;
    for (int n; (n = next_value()) != 0;) {
        values[n] = n;
        CHECK(clEnqueueWriteBuffer(e.queue, buf, CL_FALSE, 0, sizeof values[n], &values[n], 0, NULL,
                                   &writes[n]));
        if (n % 16 == 0) CHECK(clFlush(e.queue));
    }
    return NULL;
}

static cl_ulong when(cl_event ev, cl_profiling_info what) {
    cl_ulong t = 0;
    CHECK(clGetEventProfilingInfo(ev, what, sizeof t, &t, NULL));
    return t;
}

int main(void) {
    e = setup(CL_QUEUE_PROFILING_ENABLE);
    int zero = 0;
    buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero,
                                 &zero, &err_));
    static int seen[ROUNDS_MAX];
    static cl_event reads[ROUNDS_MAX];
    pthread_t t[WRITERS];
    for (int i = 0; i < WRITERS; i++) pthread_create(&t[i], NULL, writer, NULL);
    int rounds = 0;
    double deadline = now_s() + 3.0;
    while (rounds < ROUNDS_MAX && now_s() < deadline && writes_count < WRITES_MAX) {
        CHECK(clEnqueueReadBuffer(e.queue, buf, CL_FALSE, 0, sizeof seen[0], &seen[rounds], 0, NULL,
                                  &reads[rounds]));
        rounds++;
    }
    reading_done = 1;
    for (int i = 0; i < WRITERS; i++) pthread_join(t[i], NULL);
    CHECK(clFinish(e.queue));
    int wrong = 0;
    for (int i = 0; i < rounds; i++) {
        int v = seen[i];
        if (v < 0 || v > writes_count) {
            wrong++;
            continue;
        }
        if (v > 0 && when(writes[v], CL_PROFILING_COMMAND_START) > when(reads[i], CL_PROFILING_COMMAND_START)) {
            if (wrong++ < 5) fprintf(stderr, "read %d returned %d, written by a command that started after it\n", i, v);
        }
    }
    printf("reads consistent with the queue's order: %s\n", wrong == 0 ? "yes" : "no");
    fprintf(stderr, "%d reads, %d writes, %d inconsistent\n", rounds, writes_count, wrong);
    for (int i = 0; i < rounds; i++) CHECK(clReleaseEvent(reads[i]));
    for (int n = 1; n <= writes_count; n++) CHECK(clReleaseEvent(writes[n]));
    CHECK(clReleaseMemObject(buf));
    teardown(&e);
    return 0;
}
