/* Shared helpers of the C test programs: they use the first OpenCL platform and its
 * first device, so the same binary runs against local PoCL or through the netaccel ICD
 * depending only on which ICD the loader sees. Output is deterministic text so that the
 * two runs can be compared byte for byte. */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                 \
    do {                                                                         \
        cl_int err_ = (x);                                                       \
        if (err_ != CL_SUCCESS) {                                                \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, err_);  \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

static cl_int err_;
#define CHECKED(expr)                                                            \
    (expr);                                                                      \
    if (err_ != CL_SUCCESS) {                                                    \
        fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #expr, err_);   \
        exit(1);                                                                 \
    }

typedef struct {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
} env_t;

static inline env_t setup(cl_command_queue_properties props) {
    env_t e;
    cl_uint n = 0;
    CHECK(clGetPlatformIDs(1, &e.platform, &n));
    CHECK(clGetDeviceIDs(e.platform, CL_DEVICE_TYPE_ALL, 1, &e.device, NULL));
    e.context = CHECKED(clCreateContext(NULL, 1, &e.device, NULL, NULL, &err_));
    e.queue = CHECKED(clCreateCommandQueue(e.context, e.device, props, &err_));
    return e;
}

static inline cl_kernel build(env_t *e, const char *src, const char *name, const char *options) {
    cl_program p = CHECKED(clCreateProgramWithSource(e->context, 1, &src, NULL, &err_));
    cl_int rc = clBuildProgram(p, 1, &e->device, options, NULL, NULL);
    if (rc != CL_SUCCESS) {
        char log[16384];
        clGetProgramBuildInfo(p, e->device, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        fprintf(stderr, "build failed (%d): %s\n", rc, log);
        exit(1);
    }
    cl_kernel k = CHECKED(clCreateKernel(p, name, &err_));
    CHECK(clReleaseProgram(p));
    return k;
}

static inline void teardown(env_t *e) {
    CHECK(clReleaseCommandQueue(e->queue));
    CHECK(clReleaseContext(e->context));
}

/* FNV-1a over bytes: a compact, deterministic digest for large outputs. */
static inline unsigned long long fnv1a(const void *data, size_t len) {
    const unsigned char *p = data;
    unsigned long long h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}
