/* The remote OpenCL program of share.sh: an unmodified OpenCL host program that keeps
 * the device busy with long tasks, the way a tenant's program would next to a node's
 * slot calls.
 *
 *   remote WARMUP_S SECONDS
 *
 * On the first device of the first platform (point OCL_ICD_VENDORS at a directory
 * holding only netaccel's ICD, and NETACCEL_OPENCL_NODES at the node), in a closed loop:
 * the kernel `work` over 65536 integers (100 rounds of arithmetic each), then a
 * blocking read of the first 16 — one remote task per iteration. Runs WARMUP_S seconds
 * unmeasured, then SECONDS measured, and prints tasks per second; exits 1 if a read
 * shows a wrong value. */
#define CL_TARGET_OPENCL_VERSION 120
#include "cl_bench.h"
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ITEMS 65536

static const char *SOURCE =
    "__kernel void work(__global int *v, int rounds) {\n"
    "    size_t i = get_global_id(0);\n"
    "    int x = v[i];\n"
    "    for (int r = 0; r < rounds; r++) x = x * 1103515245 + 12345;\n"
    "    v[i] = v[i] + 1 + (x == 0x7fffffff && rounds < 0);\n"
    "}\n";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: remote WARMUP_S SECONDS\n");
        return 2;
    }
    double warmup = atof(argv[1]), seconds = atof(argv[2]);
    cl_platform_id platform;
    cl_device_id device;
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
    CHECK(err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &SOURCE, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &device, "", NULL, NULL));
    cl_kernel k = clCreateKernel(prog, "work", &err);
    CHECK(err);
    static cl_int zeros[ITEMS];
    cl_mem v = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zeros,
                              zeros, &err);
    CHECK(err);
    cl_int rounds = 100;
    CHECK(clSetKernelArg(k, 0, sizeof v, &v));
    CHECK(clSetKernelArg(k, 1, sizeof rounds, &rounds));
    size_t global = ITEMS, local = 64;
    cl_int seen[16];
    long done = 0, measured = 0;
    double start = now_s(), measure_from = start + warmup, end = measure_from + seconds;
    for (double t = start; t < end; t = now_s()) {
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(q, v, CL_TRUE, 0, sizeof seen, seen, 0, NULL, NULL));
        done++;
        for (int i = 0; i < 16; i++) {
            if (seen[i] != done) {
                fprintf(stderr, "task %ld: v[%d] = %d\n", done, i, seen[i]);
                return 1;
            }
        }
        if (t >= measure_from) measured++;
    }
    printf("%.1f\n", measured / seconds);
    return 0;
}
