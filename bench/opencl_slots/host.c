/* The minimal C host program the OpenCL-slot benchmark compares a node against: the
 * same kernel (the node's built-in OpenCL C source, builtins.cl) on the same OpenCL
 * device, driven the way an OpenCL slot drives it, with nothing else in between.
 *
 *   host SOURCE upper SIZE ITER      to_uppercase of SIZE bytes
 *   host SOURCE sobel W H ITER       sobel of a W x H image
 *
 * Per call, closed loop: write the payload, set the arguments, enqueue the kernel
 * with the node's work sizes (global rounded up to the work-group, local 64 or 8x8),
 * blocking read of the output, finish. Buffers, queue and kernel are made once.
 * Prints one line: p50 p90 p99 (microseconds) and calls per second. Uses the first
 * platform whose name contains $PLATFORM (default "Portable Computing Language"). */
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

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(*len + 1);
    if (fread(buf, 1, *len, f) != *len) exit(1);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: host SOURCE upper SIZE ITER | host SOURCE sobel W H ITER\n");
        return 2;
    }
    int sobel = strcmp(argv[2], "sobel") == 0;
    cl_uint w = (cl_uint)atoi(argv[3]);
    cl_uint h = sobel ? (cl_uint)atoi(argv[4]) : 1;
    int iters = atoi(argv[sobel ? 5 : 4]);
    size_t n = (size_t)w * h;
    const char *want = getenv("PLATFORM") ? getenv("PLATFORM") : "Portable Computing Language";

    cl_platform_id platforms[16];
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(16, platforms, &np));
    cl_platform_id platform = 0;
    for (cl_uint i = 0; i < np; i++) {
        char name[256] = {0};
        clGetPlatformInfo(platforms[i], CL_PLATFORM_NAME, sizeof name - 1, name, NULL);
        if (strstr(name, want)) {
            platform = platforms[i];
            break;
        }
    }
    if (!platform) {
        fprintf(stderr, "no platform matches %s\n", want);
        return 1;
    }
    cl_device_id device;
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
    CHECK(err);
    size_t src_len;
    const char *src = read_file(argv[1], &src_len);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, &src_len, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &device, "", NULL, NULL));
    cl_kernel k = clCreateKernel(prog, sobel ? "sobel" : "to_uppercase", &err);
    CHECK(err);
    size_t cap = n < 4096 ? 4096 : n;
    cl_mem in = clCreateBuffer(ctx, CL_MEM_READ_ONLY, cap, NULL, &err);
    CHECK(err);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, cap, NULL, &err);
    CHECK(err);
    unsigned char *host_in = malloc(n), *host_out = malloc(n);
    for (size_t i = 0; i < n; i++) host_in[i] = (unsigned char)('a' + i % 26);
    size_t global[2], local[2];
    cl_uint dims;
    if (sobel) {
        dims = 2;
        global[0] = round_up(w, 8);
        global[1] = round_up(h, 8);
        local[0] = local[1] = 8;
    } else {
        dims = 1;
        global[0] = round_up(n, 64);
        local[0] = 64;
    }
    double *lat = malloc(sizeof(double) * (size_t)iters);
    int warm = iters / 10 + 10;
    double started = 0;
    for (int i = -warm; i < iters; i++) {
        if (i == 0) started = now_us();
        double t0 = now_us();
        CHECK(clEnqueueWriteBuffer(q, in, CL_FALSE, 0, n, host_in, 0, NULL, NULL));
        CHECK(clSetKernelArg(k, 0, sizeof in, &in));
        CHECK(clSetKernelArg(k, 1, sizeof out, &out));
        CHECK(clSetKernelArg(k, 2, sizeof w, sobel ? (void *)&w : (void *)&(cl_uint){(cl_uint)n}));
        if (sobel) CHECK(clSetKernelArg(k, 3, sizeof h, &h));
        CHECK(clEnqueueNDRangeKernel(q, k, dims, NULL, global, local, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(q, out, CL_TRUE, 0, n, host_out, 0, NULL, NULL));
        CHECK(clFinish(q));
        if (i >= 0) lat[i] = now_us() - t0;
    }
    double total = now_us() - started;
    qsort(lat, (size_t)iters, sizeof(double), cmp);
    printf("%.1f %.1f %.1f %.1f\n", lat[iters / 2], lat[iters * 9 / 10], lat[iters * 99 / 100],
           iters / (total / 1e6));
    return 0;
}
