/* Reads and writes around a user event that is not set yet, on an in-order queue: each
 * returns or changes the buffer as it is at its place in the queue. Through the node a
 * read of a shared-memory buffer used to be copied when its whole task had run, and a
 * task held back by a user event went on collecting later commands: the read returned
 * what a later write left. */
#include "common.h"

static const char *SRC = "__kernel void add(__global int *v, int x) { v[get_global_id(0)] += x; }\n";

int main(void) {
    env_t e = setup(0);
    cl_kernel k = build(&e, SRC, "add", NULL);
    size_t global = 4;
    int ten = 10;

    /* A kernel held by the gate, a read, then a write: the read sees the kernel's
     * result, not the write's data. */
    {
        int start[4] = {1, 1, 1, 1}, later[4] = {2, 2, 2, 2}, seen[4] = {0}, end[4] = {0};
        cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                            sizeof start, start, &err_));
        CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
        CHECK(clSetKernelArg(k, 1, sizeof ten, &ten));
        cl_event gate = CHECKED(clCreateUserEvent(e.context, &err_));
        cl_event read;
        CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 1, &gate, NULL));
        CHECK(clEnqueueReadBuffer(e.queue, buf, CL_FALSE, 0, sizeof seen, seen, 0, NULL, &read));
        CHECK(clEnqueueWriteBuffer(e.queue, buf, CL_FALSE, 0, sizeof later, later, 0, NULL, NULL));
        CHECK(clFlush(e.queue));
        CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
        CHECK(clWaitForEvents(1, &read));
        CHECK(clEnqueueReadBuffer(e.queue, buf, CL_TRUE, 0, sizeof end, end, 0, NULL, NULL));
        printf("read behind a gated kernel, before a write: %d %d (buffer after: %d)\n", seen[0],
               seen[3], end[0]);
        CHECK(clReleaseEvent(read));
        CHECK(clReleaseEvent(gate));
        CHECK(clReleaseMemObject(buf));
    }

    /* The read itself waits for the gate; a kernel after it changes the buffer. */
    {
        int start[4] = {3, 3, 3, 3}, seen[4] = {0}, end[4] = {0};
        cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                            sizeof start, start, &err_));
        CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
        cl_event gate = CHECKED(clCreateUserEvent(e.context, &err_));
        CHECK(clEnqueueReadBuffer(e.queue, buf, CL_FALSE, 0, sizeof seen, seen, 1, &gate, NULL));
        CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
        CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
        CHECK(clFinish(e.queue));
        CHECK(clEnqueueReadBuffer(e.queue, buf, CL_TRUE, 0, sizeof end, end, 0, NULL, NULL));
        printf("read waiting for the gate, before a kernel: %d (buffer after: %d)\n", seen[0], end[0]);
        CHECK(clReleaseEvent(gate));
        CHECK(clReleaseMemObject(buf));
    }

    /* A rectangular read behind a gated kernel, before a write. */
    {
        int start[4] = {5, 5, 5, 5}, later[4] = {6, 6, 6, 6}, seen[4] = {0};
        cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                            sizeof start, start, &err_));
        CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
        cl_event gate = CHECKED(clCreateUserEvent(e.context, &err_));
        size_t origin[3] = {0, 0, 0}, region[3] = {2 * sizeof(int), 2, 1};
        CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 1, &gate, NULL));
        CHECK(clEnqueueReadBufferRect(e.queue, buf, CL_FALSE, origin, origin, region,
                                      2 * sizeof(int), 0, 2 * sizeof(int), 0, seen, 0, NULL, NULL));
        CHECK(clEnqueueWriteBuffer(e.queue, buf, CL_FALSE, 0, sizeof later, later, 0, NULL, NULL));
        CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
        CHECK(clFinish(e.queue));
        printf("rectangular read behind a gated kernel, before a write: %d %d\n", seen[0], seen[3]);
        CHECK(clReleaseEvent(gate));
        CHECK(clReleaseMemObject(buf));
    }

    CHECK(clReleaseKernel(k));
    teardown(&e);
    return 0;
}
