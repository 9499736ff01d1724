/* User events: commands wait for a user event set by another thread; clFlush does not
 * run them early; the event's status and callbacks; a marker waiting on it. */
#include <pthread.h>
#include <unistd.h>
#include "common.h"

static const char *SRC = "__kernel void add(__global int *v, int x) { v[get_global_id(0)] += x; }\n";

static cl_event gate;
static int flag_seen_before_set = -1;
static int *probe;

static void *setter(void *arg) {
    (void)arg;
    usleep(100000);
    flag_seen_before_set = probe[0];
    CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
    return NULL;
}

static int callback_status = 99;
static void CL_CALLBACK on_gate(cl_event e, cl_int status, void *user) {
    (void)e;
    (void)user;
    callback_status = status;
}

int main(void) {
    env_t e = setup(0);
    const size_t n = 64;
    int host[64] = {0};
    probe = host;
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host, host, &err_));
    cl_kernel k = build(&e, SRC, "add", NULL);
    int x = 5;
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    CHECK(clSetKernelArg(k, 1, sizeof x, &x));
    gate = CHECKED(clCreateUserEvent(e.context, &err_));
    cl_int st;
    CHECK(clGetEventInfo(gate, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
    cl_command_type type;
    CHECK(clGetEventInfo(gate, CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL));
    printf("user event status %d, type is USER: %s\n", st, type == CL_COMMAND_USER ? "yes" : "no");
    CHECK(clSetEventCallback(gate, CL_COMPLETE, on_gate, NULL));

    size_t global = n;
    cl_event done, read;
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 1, &gate, &done));
    CHECK(clEnqueueReadBuffer(e.queue, buf, CL_FALSE, 0, sizeof host, host, 1, &done, &read));
    CHECK(clFlush(e.queue));
    pthread_t t;
    pthread_create(&t, NULL, setter, NULL);
    CHECK(clWaitForEvents(1, &read));
    pthread_join(t, NULL);
    printf("result before the user event was set: %d\n", flag_seen_before_set);
    printf("result after: %d %d\n", host[0], host[63]);
    printf("callback status %d\n", callback_status);
    printf("setting twice: %d\n", clSetUserEventStatus(gate, CL_COMPLETE));
    CHECK(clReleaseEvent(done));
    CHECK(clReleaseEvent(read));
    CHECK(clReleaseEvent(gate));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(buf));
    teardown(&e);
    return 0;
}
