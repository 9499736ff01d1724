/* Ordering that only event wait lists, markers and barriers give: an out-of-order
 * queue, two queues of one context, and operations the ICD sends
 * as several commands (a large write, a rectangle of rows). Each first command is slow
 * (one work item looping) and the one that depends on it fast, so a dependency that is
 * lost shows as a wrong value. */
#include "common.h"

static const char *SRC =
    "__kernel void slow_set(__global int *v, int n, int value) {\n"
    "    float a = 0.0f;\n"
    "    for (int i = 0; i < n; i++) a = a * 0.999f + 1.0f;\n"
    "    v[0] = value + (a < 0.0f);\n"
    "}\n"
    "__kernel void twice_plus_one(__global int *v) { v[0] = v[0] * 2 + 1; }\n"
    "__kernel void sum_ends(__global int *v, int last) { v[0] = v[0] + v[last]; }\n";

static cl_kernel slow, twice, sum_ends;

static void set_slow(cl_mem buf, int value) {
    int rounds = 4000000;
    CHECK(clSetKernelArg(slow, 0, sizeof buf, &buf));
    CHECK(clSetKernelArg(slow, 1, sizeof rounds, &rounds));
    CHECK(clSetKernelArg(slow, 2, sizeof value, &value));
}

static size_t one = 1;

int main(void) {
    env_t e = setup(CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
    cl_command_queue ooo = e.queue;
    cl_command_queue q1 = CHECKED(clCreateCommandQueue(e.context, e.device, 0, &err_));
    cl_command_queue q2 = CHECKED(clCreateCommandQueue(e.context, e.device, 0, &err_));
    slow = build(&e, SRC, "slow_set", "");
    cl_program program;
    CHECK(clGetKernelInfo(slow, CL_KERNEL_PROGRAM, sizeof program, &program, NULL));
    twice = CHECKED(clCreateKernel(program, "twice_plus_one", &err_));
    sum_ends = CHECKED(clCreateKernel(program, "sum_ends", &err_));
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, sizeof(int), NULL, &err_));
    CHECK(clSetKernelArg(twice, 0, sizeof buf, &buf));
    int value = 0;

    /* A kernel, a second kernel waiting for it, a read waiting for the second. */
    for (int round = 0; round < 5; round++) {
        cl_event first, second;
        set_slow(buf, round);
        CHECK(clEnqueueNDRangeKernel(ooo, slow, 1, NULL, &one, NULL, 0, NULL, &first));
        CHECK(clEnqueueNDRangeKernel(ooo, twice, 1, NULL, &one, NULL, 1, &first, &second));
        CHECK(clEnqueueReadBuffer(ooo, buf, CL_TRUE, 0, sizeof value, &value, 1, &second, NULL));
        printf("out-of-order wait list %d: %d\n", round, value);
        clReleaseEvent(first);
        clReleaseEvent(second);
    }

    /* Markers and barriers without wait lists on the out-of-order queue. */
    {
        cl_event marker;
        set_slow(buf, 3);
        CHECK(clEnqueueNDRangeKernel(ooo, slow, 1, NULL, &one, NULL, 0, NULL, NULL));
        CHECK(clEnqueueMarkerWithWaitList(ooo, 0, NULL, &marker));
        CHECK(clEnqueueNDRangeKernel(ooo, twice, 1, NULL, &one, NULL, 1, &marker, NULL));
        CHECK(clEnqueueBarrierWithWaitList(ooo, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(ooo, buf, CL_TRUE, 0, sizeof value, &value, 0, NULL, NULL));
        printf("marker then barrier: %d\n", value);
        clReleaseEvent(marker);
    }

    /* Two in-order queues: the second waits for the first's kernel, by a wait list
     * and by a barrier with a wait list. */
    {
        cl_event done;
        set_slow(buf, 4);
        CHECK(clEnqueueNDRangeKernel(q1, slow, 1, NULL, &one, NULL, 0, NULL, &done));
        CHECK(clEnqueueNDRangeKernel(q2, twice, 1, NULL, &one, NULL, 1, &done, NULL));
        CHECK(clEnqueueReadBuffer(q2, buf, CL_TRUE, 0, sizeof value, &value, 0, NULL, NULL));
        printf("across queues, wait list: %d\n", value);
        clReleaseEvent(done);
        set_slow(buf, 5);
        CHECK(clEnqueueNDRangeKernel(q1, slow, 1, NULL, &one, NULL, 0, NULL, &done));
        CHECK(clEnqueueBarrierWithWaitList(q2, 1, &done, NULL));
        CHECK(clEnqueueNDRangeKernel(q2, twice, 1, NULL, &one, NULL, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(q2, buf, CL_TRUE, 0, sizeof value, &value, 0, NULL, NULL));
        printf("across queues, barrier: %d\n", value);
        clReleaseEvent(done);
    }

    /* Operations sent as several commands: a 24 MiB write (pieces of 8 MiB on the
     * network path) and a rectangle of rows; the kernel waits for their events only. */
    {
        const int n = 6 << 20;
        int *big = malloc((size_t)n * sizeof(int));
        for (int i = 0; i < n; i++) big[i] = 1;
        big[n - 1] = 40;
        cl_mem large = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, (size_t)n * sizeof(int), NULL, &err_));
        int zero = 0;
        CHECK(clEnqueueFillBuffer(ooo, large, &zero, sizeof zero, 0, (size_t)n * sizeof(int), 0, NULL, NULL));
        CHECK(clFinish(ooo));
        cl_event written, summed;
        CHECK(clEnqueueWriteBuffer(ooo, large, CL_FALSE, 0, (size_t)n * sizeof(int), big, 0, NULL, &written));
        int last = n - 1;
        CHECK(clSetKernelArg(sum_ends, 0, sizeof large, &large));
        CHECK(clSetKernelArg(sum_ends, 1, sizeof last, &last));
        CHECK(clEnqueueNDRangeKernel(ooo, sum_ends, 1, NULL, &one, NULL, 1, &written, &summed));
        CHECK(clEnqueueReadBuffer(ooo, large, CL_TRUE, 0, sizeof value, &value, 1, &summed, NULL));
        printf("large write then kernel: %d\n", value);
        clReleaseEvent(written);
        clReleaseEvent(summed);

        int rows[4][4];
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 4; x++) rows[y][x] = 10 * y + x;
        size_t origin[3] = {0, 0, 0}, region[3] = {4 * sizeof(int), 4, 1};
        CHECK(clEnqueueWriteBufferRect(ooo, large, CL_FALSE, origin, origin, region, 64 * sizeof(int), 0,
                                       4 * sizeof(int), 0, rows, 0, NULL, &written));
        last = 3 * 64 + 3;
        CHECK(clSetKernelArg(sum_ends, 1, sizeof last, &last));
        CHECK(clEnqueueNDRangeKernel(ooo, sum_ends, 1, NULL, &one, NULL, 1, &written, &summed));
        CHECK(clEnqueueReadBuffer(ooo, large, CL_TRUE, 0, sizeof value, &value, 1, &summed, NULL));
        printf("rectangle then kernel: %d\n", value);
        clReleaseEvent(written);
        clReleaseEvent(summed);
        clReleaseMemObject(large);
        free(big);
    }

    /* A read returns the buffer as it was when the read ran, not as a later command of
     * the same flush leaves it. */
    {
        int before[4] = {1, 1, 1, 1}, after[4] = {2, 2, 2, 2}, seen[4] = {0};
        cl_mem small = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                              sizeof before, before, &err_));
        CHECK(clEnqueueReadBuffer(q1, small, CL_FALSE, 0, sizeof seen, seen, 0, NULL, NULL));
        CHECK(clEnqueueWriteBuffer(q1, small, CL_FALSE, 0, sizeof after, after, 0, NULL, NULL));
        CHECK(clFinish(q1));
        printf("read before a write: %d\n", seen[0]);
        clReleaseMemObject(small);
    }

    clReleaseMemObject(buf);
    clReleaseKernel(sum_ends);
    clReleaseKernel(twice);
    clReleaseKernel(slow);
    clReleaseCommandQueue(q2);
    clReleaseCommandQueue(q1);
    teardown(&e);
    return 0;
}
