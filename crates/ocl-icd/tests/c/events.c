/* Events: non-blocking write -> kernel -> read chained by wait lists, a completion
 * callback, clWaitForEvents, event info, profiling order, markers and user-visible
 * reference counts. */
#include <pthread.h>
#include <unistd.h>
#include "common.h"

static const char *SRC =
    "__kernel void scale(__global int *v, int f) { size_t i = get_global_id(0); v[i] = v[i] * f + (int)i; }\n";

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int callbacks_run = 0;
static cl_int callback_status = 99;

static void CL_CALLBACK on_done(cl_event ev, cl_int status, void *user) {
    (void)ev;
    pthread_mutex_lock(&mu);
    callbacks_run += *(int *)user;
    callback_status = status;
    pthread_mutex_unlock(&mu);
}

int main(void) {
    env_t e = setup(CL_QUEUE_PROFILING_ENABLE);
    const size_t n = 4096;
    int *host = malloc(n * sizeof(int)), *out = malloc(n * sizeof(int));
    for (size_t i = 0; i < n; i++) host[i] = (int)(i * 3);
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, n * sizeof(int), NULL, &err_));
    cl_kernel k = build(&e, SRC, "scale", NULL);
    int f = 5;
    CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &buf));
    CHECK(clSetKernelArg(k, 1, sizeof(int), &f));

    cl_event ew, ek, er, em;
    CHECK(clEnqueueWriteBuffer(e.queue, buf, CL_FALSE, 0, n * sizeof(int), host, 0, NULL, &ew));
    size_t global = n;
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 1, &ew, &ek));
    f = 1000; /* must not affect the kernel already enqueued */
    CHECK(clSetKernelArg(k, 1, sizeof(int), &f));
    CHECK(clEnqueueReadBuffer(e.queue, buf, CL_FALSE, 0, n * sizeof(int), out, 1, &ek, &er));
    CHECK(clEnqueueMarkerWithWaitList(e.queue, 0, NULL, &em));
    int weight = 1;
    CHECK(clSetEventCallback(er, CL_COMPLETE, on_done, &weight));

    cl_command_type type;
    CHECK(clGetEventInfo(ek, CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL));
    printf("kernel event type is NDRANGE: %s\n", type == CL_COMMAND_NDRANGE_KERNEL ? "yes" : "no");
    cl_command_queue q;
    CHECK(clGetEventInfo(er, CL_EVENT_COMMAND_QUEUE, sizeof q, &q, NULL));
    printf("read event queue matches: %s\n", q == e.queue ? "yes" : "no");

    cl_event all[3] = {ew, ek, er};
    CHECK(clWaitForEvents(3, all));
    for (int i = 0; i < 3; i++) {
        cl_int st;
        CHECK(clGetEventInfo(all[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
        printf("event %d status %d\n", i, st);
    }
    /* Callbacks may run on another thread shortly after the wait returns. */
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&mu);
        int done = callbacks_run;
        pthread_mutex_unlock(&mu);
        if (done) break;
        usleep(2000);
    }
    printf("callback ran %d time(s) with status %d\n", callbacks_run, callback_status);
    /* A callback registered after completion runs too. */
    weight = 10;
    CHECK(clSetEventCallback(ek, CL_COMPLETE, on_done, &weight));
    for (int i = 0; i < 500 && callbacks_run < 11; i++) usleep(2000);
    printf("late callback ran: %s\n", callbacks_run == 11 ? "yes" : "no");

    cl_ulong t[4];
    CHECK(clGetEventProfilingInfo(ek, CL_PROFILING_COMMAND_QUEUED, sizeof(cl_ulong), &t[0], NULL));
    CHECK(clGetEventProfilingInfo(ek, CL_PROFILING_COMMAND_SUBMIT, sizeof(cl_ulong), &t[1], NULL));
    CHECK(clGetEventProfilingInfo(ek, CL_PROFILING_COMMAND_START, sizeof(cl_ulong), &t[2], NULL));
    CHECK(clGetEventProfilingInfo(ek, CL_PROFILING_COMMAND_END, sizeof(cl_ulong), &t[3], NULL));
    printf("profiling ordered: %s\n", (t[0] <= t[1] && t[1] <= t[2] && t[2] <= t[3] && t[3] > 0) ? "yes" : "no");

    CHECK(clWaitForEvents(1, &em));
    cl_uint refs;
    CHECK(clRetainEvent(em));
    CHECK(clGetEventInfo(em, CL_EVENT_REFERENCE_COUNT, sizeof refs, &refs, NULL));
    printf("marker retained: %s\n", refs >= 2 ? "yes" : "no");
    CHECK(clReleaseEvent(em));

    unsigned bad = 0;
    for (size_t i = 0; i < n; i++)
        if (out[i] != host[i] * 5 + (int)i) bad++;
    printf("mismatches: %u\n", bad);
    cl_event none = NULL;
    printf("invalid event wait: %d\n", clWaitForEvents(1, &none));

    CHECK(clReleaseEvent(ew));
    CHECK(clReleaseEvent(ek));
    CHECK(clReleaseEvent(er));
    CHECK(clReleaseEvent(em));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(buf));
    teardown(&e);
    free(host);
    free(out);
    return bad != 0;
}
