/* A user event set to an error: the commands that wait for it, and those that wait for
 * them, fail without running; the others run (through the node they all used to run). */
#include "common.h"

static const char *SRC = "__kernel void add(__global int *v, int x) { v[get_global_id(0)] += x; }\n";

int main(void) {
    env_t e = setup(0);
    int host[16] = {0};
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host, host, &err_));
    cl_mem other = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host, host, &err_));
    cl_kernel k = build(&e, SRC, "add", NULL);
    cl_kernel k2 = build(&e, SRC, "add", NULL);
    int x = 5;
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    CHECK(clSetKernelArg(k, 1, sizeof x, &x));
    CHECK(clSetKernelArg(k2, 0, sizeof other, &other));
    CHECK(clSetKernelArg(k2, 1, sizeof x, &x));
    cl_event gate = CHECKED(clCreateUserEvent(e.context, &err_));
    size_t global = 16;
    cl_event ran[4], after;
    for (int i = 0; i < 4; i++) CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 1, &gate, &ran[i]));
    CHECK(clEnqueueMarkerWithWaitList(e.queue, 1, &ran[3], &after));
    CHECK(clFlush(e.queue));
    CHECK(clSetUserEventStatus(gate, -1));
    cl_int rc = clWaitForEvents(4, ran);
    printf("waiting for the commands: %s\n", rc == CL_SUCCESS ? "success" : "an error");
    for (int i = 0; i < 4; i++) {
        cl_int st;
        CHECK(clGetEventInfo(ran[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
        printf("command %d: %s\n", i, st < 0 ? "failed" : st == CL_COMPLETE ? "complete" : "pending");
    }
    cl_int st;
    clWaitForEvents(1, &after);
    CHECK(clGetEventInfo(after, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
    printf("a marker waiting for one of them: %s\n", st < 0 ? "failed" : "complete");
    /* Commands that wait for nothing run. */
    CHECK(clEnqueueNDRangeKernel(e.queue, k2, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, other, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
    printf("an independent kernel ran: %d\n", host[3]);
    CHECK(clEnqueueReadBuffer(e.queue, buf, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
    printf("the failed kernels left the buffer: %d\n", host[3]);
    for (int i = 0; i < 4; i++) CHECK(clReleaseEvent(ran[i]));
    CHECK(clReleaseEvent(after));
    CHECK(clReleaseEvent(gate));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseKernel(k2));
    CHECK(clReleaseMemObject(buf));
    CHECK(clReleaseMemObject(other));
    teardown(&e);
    return 0;
}
