/* The device's memory as a program sizes its work by it (hashcat reads the global memory
 * and the largest allocation, then allocates several large buffers): without a quota set
 * on the node, a client is offered the device's own sizes (the largest allocation in
 * whole MiB) and can hold more than one large buffer at once. Under the node's former
 * default quota of 1 GiB the sizes shrank (hashcat: "Not enough allocatable device
 * memory") and a second 512 MiB buffer was refused. */
#include "common.h"

#define MIB ((cl_ulong)1 << 20)

int main(void) {
    env_t e = setup(0);
    cl_ulong max_alloc, global;
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc,
                          NULL));
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL));
    printf("global memory: %llu MiB\n", (unsigned long long)(global / MIB));
    printf("largest allocation: %llu MiB\n", (unsigned long long)(max_alloc / MIB));

    /* Three buffers of 512 MiB (1.5 GiB together), each written at its end, when the
     * device has room for them. */
    cl_ulong size = 512 * MIB;
    if (max_alloc < size || global < 4 * size) {
        printf("device too small for three 512 MiB buffers\n");
        teardown(&e);
        return 0;
    }
    cl_mem bufs[3];
    for (int i = 0; i < 3; i++) {
        cl_int rc;
        bufs[i] = clCreateBuffer(e.context, CL_MEM_READ_WRITE, size, NULL, &rc);
        printf("buffer %d of 512 MiB: %s\n", i, rc == CL_SUCCESS ? "made" : "refused");
        if (rc != CL_SUCCESS) {
            teardown(&e);
            return 0;
        }
        int in[4] = {i, i + 1, i + 2, i + 3}, out[4] = {0};
        size_t end = size - sizeof in;
        CHECK(clEnqueueWriteBuffer(e.queue, bufs[i], CL_FALSE, end, sizeof in, in, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(e.queue, bufs[i], CL_TRUE, end, sizeof out, out, 0, NULL, NULL));
        printf("its last bytes: %d %d %d %d\n", out[0], out[1], out[2], out[3]);
    }
    for (int i = 0; i < 3; i++) CHECK(clReleaseMemObject(bufs[i]));
    teardown(&e);
    return 0;
}
