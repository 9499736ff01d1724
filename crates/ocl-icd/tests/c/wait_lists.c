/* Wait lists: an event of another context is refused with CL_INVALID_CONTEXT by every
 * call that takes a wait list (it used to be accepted, and clFinish then waited forever
 * for a user event nobody would set), and a call refused for another reason leaves no
 * trace: later commands do not wait for the user events of its wait list. */
#include "common.h"

static const char *SRC = "__kernel void inc(__global int *v) { v[get_global_id(0)] += 1; }\n";

static const char *code(cl_int rc) {
    switch (rc) {
    case CL_SUCCESS: return "CL_SUCCESS";
    case CL_INVALID_CONTEXT: return "CL_INVALID_CONTEXT";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_EVENT_WAIT_LIST: return "CL_INVALID_EVENT_WAIT_LIST";
    default: return "other";
    }
}

int main(void) {
    env_t e = setup(0);
    cl_context other = CHECKED(clCreateContext(NULL, 1, &e.device, NULL, NULL, &err_));
    cl_event foreign = CHECKED(clCreateUserEvent(other, &err_));
    cl_event own = CHECKED(clCreateUserEvent(e.context, &err_));
    int host[64] = {0};
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host, host, &err_));
    cl_mem buf2 = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, sizeof host, NULL, &err_));
    cl_kernel k = build(&e, SRC, "inc", NULL);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t global = 64, origin[3] = {0, 0, 0}, region[3] = {16, 1, 1};
    int pattern = 7;
    cl_int rc;

    printf("write: %s\n", code(clEnqueueWriteBuffer(e.queue, buf, CL_FALSE, 0, sizeof host, host, 1, &foreign, NULL)));
    printf("read: %s\n", code(clEnqueueReadBuffer(e.queue, buf, CL_FALSE, 0, sizeof host, host, 1, &foreign, NULL)));
    printf("copy: %s\n", code(clEnqueueCopyBuffer(e.queue, buf, buf2, 0, 0, sizeof host, 1, &foreign, NULL)));
    printf("fill: %s\n", code(clEnqueueFillBuffer(e.queue, buf, &pattern, sizeof pattern, 0, sizeof host, 1, &foreign, NULL)));
    printf("write rect: %s\n", code(clEnqueueWriteBufferRect(e.queue, buf, CL_FALSE, origin, origin, region, 0, 0, 0, 0, host, 1, &foreign, NULL)));
    /* (Not clEnqueueNDRangeKernel: PoCL 3.1 accepts it natively, and then hangs.) */
    printf("marker: %s\n", code(clEnqueueMarkerWithWaitList(e.queue, 1, &foreign, NULL)));
    printf("barrier: %s\n", code(clEnqueueBarrierWithWaitList(e.queue, 1, &foreign, NULL)));
    clEnqueueMapBuffer(e.queue, buf, CL_FALSE, CL_MAP_READ, 0, sizeof host, 1, &foreign, NULL, &rc);
    printf("map: %s\n", code(rc));
    cl_event both[2] = {own, foreign};
    printf("wait for events of two contexts: %s\n", code(clWaitForEvents(2, both)));

    /* Accepted up to its wait list, then refused (offset out of range): the queue must
     * not wait for `own`, which is never set. */
    rc = clEnqueueReadBuffer(e.queue, buf, CL_FALSE, sizeof host, sizeof host, host, 1, &own, NULL);
    printf("read past the end, waiting for a user event: %s\n", code(rc));
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, buf, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
    CHECK(clFinish(e.queue));
    printf("after: %d %d\n", host[0], host[63]);

    CHECK(clReleaseEvent(own));
    CHECK(clReleaseEvent(foreign));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(buf));
    CHECK(clReleaseMemObject(buf2));
    CHECK(clReleaseContext(other));
    teardown(&e);
    return 0;
}
