/* A remote OpenCL client that lists the devices of its first platform and runs an
 * increment kernel on each. Prints "devices: N", then "device I: ok" per device (or
 * where it failed, and exits 1). Usage: devices. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                 \
    do {                                                                         \
        cl_int rc_ = (x);                                                        \
        if (rc_ != CL_SUCCESS) {                                                 \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, rc_);   \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

enum { DEVICES_MAX = 8, N = 256 };

static const char *SRC = "__kernel void k(__global int *v) { v[get_global_id(0)] += 1; }\n";

/* Runs the kernel on `device`, in a context of its own, and checks the data. */
static int run_on(cl_device_id device) {
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
    CHECK(err);
    static int data[N];
    for (int i = 0; i < N; i++) data[i] = i;
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof data, data, &err);
    CHECK(err);
    cl_program p = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &device, NULL, NULL, NULL));
    cl_kernel k = clCreateKernel(p, "k", &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t global = N;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    static int out[N];
    CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    for (int i = 0; i < N; i++)
        if (out[i] != i + 1) return 0;
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseMemObject(buf);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 1;
}

int main(void) {
    cl_platform_id platform;
    cl_device_id devices[DEVICES_MAX];
    cl_uint n = 0;
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, DEVICES_MAX, devices, &n));
    printf("devices: %u\n", n);
    for (cl_uint i = 0; i < n && i < DEVICES_MAX; i++) {
        if (!run_on(devices[i])) {
            printf("device %u: wrong data\n", i);
            return 1;
        }
        printf("device %u: ok\n", i);
    }
    return 0;
}
