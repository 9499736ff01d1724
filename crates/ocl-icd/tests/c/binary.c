/* Programs from binary: build from source, fetch the binary, create a new program from
 * it and run; a failing build reports CL_BUILD_PROGRAM_FAILURE with a log; program info. */
#include "common.h"

static const char *SRC =
    "__kernel void square(__global const int *in, __global int *out) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] * in[i];\n"
    "}\n";

int main(void) {
    env_t e = setup(0);
    cl_program p = CHECKED(clCreateProgramWithSource(e.context, 1, &SRC, NULL, &err_));
    CHECK(clBuildProgram(p, 1, &e.device, "-DUNUSED=1", NULL, NULL));
    cl_build_status status;
    CHECK(clGetProgramBuildInfo(p, e.device, CL_PROGRAM_BUILD_STATUS, sizeof status, &status, NULL));
    printf("build status %d\n", status);
    char opts[64];
    CHECK(clGetProgramBuildInfo(p, e.device, CL_PROGRAM_BUILD_OPTIONS, sizeof opts, opts, NULL));
    printf("build options: %s\n", opts);
    size_t src_len;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_SOURCE, 0, NULL, &src_len));
    printf("source length %zu\n", src_len);
    cl_uint ndev;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_NUM_DEVICES, sizeof ndev, &ndev, NULL));
    size_t bin_size;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bin_size, &bin_size, NULL));
    unsigned char *bin = malloc(bin_size);
    CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL));
    printf("devices %u, binary non-empty: %s\n", ndev, bin_size > 0 ? "yes" : "no");
    char names[64];
    CHECK(clGetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, sizeof names, names, NULL));
    printf("kernel names: %s\n", names);

    const unsigned char *bins[1] = {bin};
    cl_int bin_status;
    cl_program pb = CHECKED(clCreateProgramWithBinary(e.context, 1, &e.device, &bin_size, bins, &bin_status, &err_));
    CHECK(clBuildProgram(pb, 1, &e.device, NULL, NULL, NULL));
    printf("binary status %d\n", bin_status);
    cl_kernel k;
    cl_uint nk;
    CHECK(clCreateKernelsInProgram(pb, 1, &k, &nk));
    printf("kernels in binary program: %u\n", nk);

    int in[256], out[256];
    for (int i = 0; i < 256; i++) in[i] = i - 100;
    cl_mem a = CHECKED(clCreateBuffer(e.context, CL_MEM_COPY_HOST_PTR, sizeof in, in, &err_));
    cl_mem b = CHECKED(clCreateBuffer(e.context, CL_MEM_WRITE_ONLY, sizeof out, NULL, &err_));
    CHECK(clSetKernelArg(k, 0, sizeof a, &a));
    CHECK(clSetKernelArg(k, 1, sizeof b, &b));
    size_t global = 256;
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, b, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    printf("out[0]=%d out[100]=%d out[255]=%d\n", out[0], out[100], out[255]);

    const char *bad = "__kernel void broken(__global int *x) { x[0] = undefined_symbol; }";
    cl_program pbad = CHECKED(clCreateProgramWithSource(e.context, 1, &bad, NULL, &err_));
    cl_int rc = clBuildProgram(pbad, 1, &e.device, NULL, NULL, NULL);
    size_t log_len = 0;
    CHECK(clGetProgramBuildInfo(pbad, e.device, CL_PROGRAM_BUILD_LOG, 0, NULL, &log_len));
    char *log = malloc(log_len + 1);
    CHECK(clGetProgramBuildInfo(pbad, e.device, CL_PROGRAM_BUILD_LOG, log_len, log, NULL));
    printf("bad build: %d, log mentions the symbol: %s\n", rc, strstr(log, "undefined_symbol") ? "yes" : "no");
    printf("unknown kernel: %d\n", (clCreateKernel(pb, "nope", &err_), err_));

    CHECK(clReleaseProgram(pbad));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(pb));
    CHECK(clReleaseProgram(p));
    CHECK(clReleaseMemObject(a));
    CHECK(clReleaseMemObject(b));
    teardown(&e);
    free(bin);
    free(log);
    return 0;
}
