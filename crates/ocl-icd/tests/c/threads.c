/* Several application threads share one context: each has its own queue and buffer and
 * runs blocking write/kernel/read rounds, one also waits on events and callbacks, while
 * the main thread polls event status. Checks the ICD's concurrent waiting and reading. */
#include <pthread.h>
#include <unistd.h>
#include "common.h"

#define THREADS 4
#define ROUNDS 150
#define N 1024

static env_t e;
static cl_kernel kernels[THREADS];
static const char *SRC = "__kernel void addk(__global int *v, int k) { v[get_global_id(0)] += k; }\n";
static int bad[THREADS];
static volatile int callbacks;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void CL_CALLBACK on_done(cl_event ev, cl_int status, void *user) {
    (void)ev;
    (void)user;
    pthread_mutex_lock(&mu);
    if (status == CL_COMPLETE) callbacks++;
    pthread_mutex_unlock(&mu);
}

static void *worker(void *arg) {
    int t = (int)(long)arg;
    cl_command_queue q = CHECKED(clCreateCommandQueue(e.context, e.device, 0, &err_));
    int host[N], out[N];
    for (int i = 0; i < N; i++) host[i] = i * (t + 1);
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, sizeof host, NULL, &err_));
    cl_kernel k = kernels[t];
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    for (int r = 0; r < ROUNDS; r++) {
        int add = r + t;
        CHECK(clSetKernelArg(k, 1, sizeof add, &add));
        CHECK(clEnqueueWriteBuffer(q, buf, CL_FALSE, 0, sizeof host, host, 0, NULL, NULL));
        size_t global = N;
        cl_event ev;
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, &ev));
        if (t == 0) {
            CHECK(clSetEventCallback(ev, CL_COMPLETE, on_done, NULL));
            CHECK(clFlush(q));
            CHECK(clWaitForEvents(1, &ev));
        }
        CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
        CHECK(clReleaseEvent(ev));
        for (int i = 0; i < N; i++)
            if (out[i] != host[i] + add) bad[t]++;
    }
    CHECK(clFinish(q));
    CHECK(clReleaseMemObject(buf));
    CHECK(clReleaseCommandQueue(q));
    return NULL;
}

int main(void) {
    e = setup(0);
    for (int t = 0; t < THREADS; t++) kernels[t] = build(&e, SRC, "addk", NULL);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)(long)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    for (int i = 0; i < 500 && callbacks < ROUNDS; i++) usleep(2000);
    for (int t = 0; t < THREADS; t++) printf("thread %d mismatches: %d\n", t, bad[t]);
    printf("callbacks: %d of %d\n", callbacks, ROUNDS);
    for (int t = 0; t < THREADS; t++) CHECK(clReleaseKernel(kernels[t]));
    teardown(&e);
    return 0;
}
