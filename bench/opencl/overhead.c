/* Remote OpenCL overhead benchmark.
 *
 *   overhead small ITER   write 64 B + kernel + read 64 B + finish, closed loop
 *   overhead large ITER   the same with 1 MiB buffers
 *   overhead bw ITER      256 MiB host-to-device writes (blocking), MiB/s
 *
 * Uses the first OpenCL platform, so the same binary measures native PoCL or the
 * netaccel ICD depending on OCL_ICD_VENDORS. Prints median, p90, p99 in microseconds
 * (or bandwidth) on one line. */
#define CL_TARGET_OPENCL_VERSION 120
#include "cl_bench.h"
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "small";
    int iters = argc > 2 ? atoi(argv[2]) : 1000;
    cl_platform_id platform;
    cl_device_id device;
    cl_int err;
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
    CHECK(err);

    if (strcmp(mode, "bw") == 0) {
        size_t bytes = 256u << 20;
        char *host = malloc(bytes);
        memset(host, 1, bytes);
        cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
        CHECK(err);
        CHECK(clEnqueueWriteBuffer(q, buf, CL_TRUE, 0, bytes, host, 0, NULL, NULL));
        CHECK(clFinish(q));
        double best = 0;
        for (int i = 0; i < iters; i++) {
            double t0 = now_us();
            CHECK(clEnqueueWriteBuffer(q, buf, CL_TRUE, 0, bytes, host, 0, NULL, NULL));
            CHECK(clFinish(q));
            double mibs = (bytes / 1048576.0) / ((now_us() - t0) / 1e6);
            if (mibs > best) best = mibs;
        }
        printf("bw 256MiB best_MiB_per_s %.0f\n", best);
        return 0;
    }

    size_t bytes = strcmp(mode, "large") == 0 ? (1u << 20) : 64;
    const char *src = "__kernel void inc(__global uint *v) { v[get_global_id(0)] += 1u; }";
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &device, NULL, NULL, NULL));
    cl_kernel k = clCreateKernel(p, "inc", &err);
    CHECK(err);
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    unsigned *in = calloc(1, bytes), *out = calloc(1, bytes);
    size_t global = bytes / sizeof(unsigned);
    double *lat = malloc(sizeof(double) * iters);
    for (int i = -iters / 10 - 1; i < iters; i++) {
        double t0 = now_us();
        CHECK(clEnqueueWriteBuffer(q, buf, CL_FALSE, 0, bytes, in, 0, NULL, NULL));
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, bytes, out, 0, NULL, NULL));
        CHECK(clFinish(q));
        double dt = now_us() - t0;
        if (out[0] != in[0] + 1) {
            fprintf(stderr, "wrong result\n");
            return 1;
        }
        in[0]++;
        if (i >= 0) lat[i] = dt; /* the first iterations warm up */
    }
    qsort(lat, iters, sizeof(double), cmp);
    printf("%s %zuB median_us %.1f p90_us %.1f p99_us %.1f\n", mode, bytes, lat[iters / 2], lat[iters * 9 / 10],
           lat[iters * 99 / 100]);
    return 0;
}
