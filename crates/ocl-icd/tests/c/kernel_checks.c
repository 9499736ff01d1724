/* clSetKernelArg checks each value against the argument's declaration, and
 * clEnqueueNDRangeKernel the work-group shape against the kernel and the device: the
 * errors come back from those calls (through the node they used to be accepted, and a
 * wrong work-group shape surfaced only later, as the status of the command's event).
 * Not compared: a pointer-sized value that is no buffer, and a local size of 0, which
 * PoCL 3.1 accepts natively (the ICD refuses them, as OpenCL says). */
#include "common.h"

static const char *SRC =
    "__kernel void k(__global int *out, int x, float4 v, __local int *tmp) {\n"
    "    tmp[get_local_id(0)] = x + (int)v.x;\n"
    "    out[get_global_id(0)] = tmp[get_local_id(0)];\n"
    "}\n"
    "__kernel __attribute__((reqd_work_group_size(4, 1, 1)))\n"
    "void fixed(__global int *out) { out[get_global_id(0)] = (int)get_local_size(0); }\n";

static const char *code(cl_int rc) {
    switch (rc) {
    case CL_SUCCESS: return "CL_SUCCESS";
    case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_ARG_VALUE: return "CL_INVALID_ARG_VALUE";
    case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_WORK_ITEM_SIZE: return "CL_INVALID_WORK_ITEM_SIZE";
    default: return "other";
    }
}

int main(void) {
    env_t e = setup(0);
    cl_program p = CHECKED(clCreateProgramWithSource(e.context, 1, &SRC, NULL, &err_));
    CHECK(clBuildProgram(p, 1, &e.device, NULL, NULL, NULL));
    cl_kernel k = CHECKED(clCreateKernel(p, "k", &err_));
    cl_kernel fixed = CHECKED(clCreateKernel(p, "fixed", &err_));
    cl_mem out = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, 64 * sizeof(int), NULL, &err_));
    long long wide = 5;
    int x = 5;
    cl_float4 v = {{1, 2, 3, 4}};

    printf("int given 8 bytes: %s\n", code(clSetKernelArg(k, 1, sizeof wide, &wide)));
    printf("int given no value: %s\n", code(clSetKernelArg(k, 1, sizeof x, NULL)));
    printf("float4 given 8 bytes: %s\n", code(clSetKernelArg(k, 2, 8, &v)));
    printf("buffer given 4 bytes: %s\n", code(clSetKernelArg(k, 0, 4, &out)));
    printf("local given a value: %s\n", code(clSetKernelArg(k, 3, 16, &x)));
    printf("local given no size: %s\n", code(clSetKernelArg(k, 3, 0, NULL)));
    CHECK(clSetKernelArg(k, 0, sizeof out, &out));
    CHECK(clSetKernelArg(k, 1, sizeof x, &x));
    CHECK(clSetKernelArg(k, 2, sizeof v, &v));
    CHECK(clSetKernelArg(k, 3, 64 * sizeof(int), NULL));
    CHECK(clSetKernelArg(fixed, 0, sizeof out, &out));

    size_t kernel_max;
    CHECK(clGetKernelWorkGroupInfo(k, e.device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kernel_max, &kernel_max, NULL));
    size_t g3 = 3, l2 = 2, g16 = 16, l4 = 4, l8 = 8;
    printf("global 3, local 2: %s\n", code(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &g3, &l2, 0, NULL, NULL)));
    size_t g2[2] = {kernel_max * 2, 2}, l2d[2] = {kernel_max, 2};
    printf("more work-items than the kernel allows: %s\n",
           code(clEnqueueNDRangeKernel(e.queue, k, 2, NULL, g2, l2d, 0, NULL, NULL)));
    printf("required size, none given: %s\n", code(clEnqueueNDRangeKernel(e.queue, fixed, 1, NULL, &g16, NULL, 0, NULL, NULL)));
    printf("required size 4, given 8: %s\n", code(clEnqueueNDRangeKernel(e.queue, fixed, 1, NULL, &g16, &l8, 0, NULL, NULL)));
    printf("required size 4, given 4: %s\n", code(clEnqueueNDRangeKernel(e.queue, fixed, 1, NULL, &g16, &l4, 0, NULL, NULL)));
    printf("global 16, local 4: %s\n", code(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &g16, &l4, 0, NULL, NULL)));
    CHECK(clFinish(e.queue));
    int host[16];
    CHECK(clEnqueueReadBuffer(e.queue, out, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
    printf("result: %d %d\n", host[0], host[15]);

    CHECK(clReleaseMemObject(out));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseKernel(fixed));
    CHECK(clReleaseProgram(p));
    teardown(&e);
    return 0;
}
