/* Session set-up latency: what a program waits for before its first result.
 *
 *   setup
 *
 * One run is one session (through the netaccel ICD, one connection to the node).
 * Prints, in microseconds: "connect" (clGetPlatformIDs, which loads the ICD and, for
 * the netaccel platform, connects and greets the node), "context" (device, context and
 * queue), "build" (a one-line program built and its kernel made) and "first" (one
 * 64-byte write + kernel + read + finish), and "total". Native PoCL for comparison: the
 * same binary with the machine's vendors. */
#define CL_TARGET_OPENCL_VERSION 120
#include "cl_bench.h"
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char *SRC = "__kernel void inc(__global int *v) { v[get_global_id(0)] += 1; }";

int main(void) {
    cl_platform_id platform;
    cl_device_id device;
    cl_int err;
    double t0 = now_us();
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    double t1 = now_us();
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
    CHECK(err);
    double t2 = now_us();
    cl_program p = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &device, NULL, NULL, NULL));
    cl_kernel k = clCreateKernel(p, "inc", &err);
    CHECK(err);
    double t3 = now_us();
    int data[16] = {0};
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof data, NULL, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t global = 16;
    CHECK(clEnqueueWriteBuffer(q, buf, CL_FALSE, 0, sizeof data, data, 0, NULL, NULL));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, buf, CL_FALSE, 0, sizeof data, data, 0, NULL, NULL));
    CHECK(clFinish(q));
    double t4 = now_us();
    if (data[3] != 1) {
        fprintf(stderr, "wrong result %d\n", data[3]);
        return 1;
    }
    printf("connect %.0f context %.0f build %.0f first %.0f total %.0f\n", t1 - t0, t2 - t1,
           t3 - t2, t4 - t3, t4 - t0);
    return 0;
}
