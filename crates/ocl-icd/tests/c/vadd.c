/* Vector add: c = a + b over 1 Mi floats, plus the device name and a few info answers. */
#include "common.h"

static const char *SRC =
    "__kernel void vadd(__global const float *a, __global const float *b,\n"
    "                   __global float *c, const unsigned n) {\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n) c[i] = a[i] + b[i];\n"
    "}\n";

int main(void) {
    env_t e = setup(0);
    char name[256];
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_NAME, sizeof name, name, NULL));
    cl_uint units;
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL));
    printf("device: %s (%u compute units)\n", name, units);

    const unsigned n = 1 << 20;
    size_t bytes = n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    for (unsigned i = 0; i < n; i++) {
        a[i] = (float)i * 0.5f;
        b[i] = (float)(n - i) * 0.25f;
    }
    cl_mem da = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, a, &err_));
    cl_mem db = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_ONLY, bytes, NULL, &err_));
    cl_mem dc = CHECKED(clCreateBuffer(e.context, CL_MEM_WRITE_ONLY, bytes, NULL, &err_));
    CHECK(clEnqueueWriteBuffer(e.queue, db, CL_FALSE, 0, bytes, b, 0, NULL, NULL));

    cl_kernel k = build(&e, SRC, "vadd", "-cl-std=CL1.2");
    CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &da));
    CHECK(clSetKernelArg(k, 1, sizeof(cl_mem), &db));
    CHECK(clSetKernelArg(k, 2, sizeof(cl_mem), &dc));
    CHECK(clSetKernelArg(k, 3, sizeof(unsigned), &n));
    size_t global = n, local = 64;
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, &local, 0, NULL, NULL));
    CHECK(clFlush(e.queue));
    CHECK(clEnqueueReadBuffer(e.queue, dc, CL_TRUE, 0, bytes, c, 0, NULL, NULL));
    CHECK(clFinish(e.queue));

    unsigned bad = 0;
    for (unsigned i = 0; i < n; i++)
        if (c[i] != a[i] + b[i]) bad++;
    printf("mismatches: %u\n", bad);
    printf("c[0]=%.3f c[12345]=%.3f c[n-1]=%.3f\n", c[0], c[12345], c[n - 1]);
    printf("digest: %016llx\n", fnv1a(c, bytes));

    char fname[64];
    cl_uint nargs;
    CHECK(clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof fname, fname, NULL));
    CHECK(clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL));
    printf("kernel %s with %u args\n", fname, nargs);

    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(da));
    CHECK(clReleaseMemObject(db));
    CHECK(clReleaseMemObject(dc));
    teardown(&e);
    free(a);
    free(b);
    free(c);
    return bad != 0;
}
