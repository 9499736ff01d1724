/* Separate compilation: a program compiled with an embedded header (clCompileProgram
 * with input headers), a second compiled program holding a helper function, both linked
 * into an executable (clLinkProgram) whose kernel calls across them; then a link that
 * must fail (a missing function) and its log, and program info of the linked program. */
#include "common.h"

static const char *HEADER = "inline int twice(int x) { return 2 * x; }\n";
static const char *MAIN_SRC =
    "#include \"helper/twice.h\"\n"
    "int offset(int x);\n"
    "__kernel void apply(__global int *v) {\n"
    "    size_t i = get_global_id(0); v[i] = twice(v[i]) + offset(OFFSET_BASE);\n"
    "}\n";
static const char *LIB_SRC = "int offset(int x) { return x + 40; }\n";
static const char *ORPHAN_SRC =
    "int missing(int x);\n"
    "__kernel void orphan(__global int *v) { v[0] = missing(v[0]); }\n";

int main(void) {
    env_t e = setup(0);
    cl_program header = CHECKED(clCreateProgramWithSource(e.context, 1, &HEADER, NULL, &err_));
    cl_program main_p = CHECKED(clCreateProgramWithSource(e.context, 1, &MAIN_SRC, NULL, &err_));
    cl_program lib_p = CHECKED(clCreateProgramWithSource(e.context, 1, &LIB_SRC, NULL, &err_));
    const char *names[1] = {"helper/twice.h"};
    CHECK(clCompileProgram(main_p, 1, &e.device, "-DOFFSET_BASE=2", 1, &header, names, NULL, NULL));
    CHECK(clCompileProgram(lib_p, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL));
    cl_build_status status;
    CHECK(clGetProgramBuildInfo(main_p, e.device, CL_PROGRAM_BUILD_STATUS, sizeof status, &status, NULL));
    printf("compile status %d\n", status);

    cl_program inputs[2] = {main_p, lib_p};
    cl_program linked = CHECKED(clLinkProgram(e.context, 1, &e.device, NULL, 2, inputs, NULL, NULL, &err_));
    cl_kernel k = CHECKED(clCreateKernel(linked, "apply", &err_));
    char names_out[64];
    CHECK(clGetProgramInfo(linked, CL_PROGRAM_KERNEL_NAMES, sizeof names_out, names_out, NULL));
    printf("linked kernels: %s\n", names_out);

    int v[64];
    for (int i = 0; i < 64; i++) v[i] = i;
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_COPY_HOST_PTR, sizeof v, v, &err_));
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t global = 64;
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, buf, CL_TRUE, 0, sizeof v, v, 0, NULL, NULL));
    printf("v[0]=%d v[1]=%d v[63]=%d\n", v[0], v[1], v[63]);

    cl_program orphan = CHECKED(clCreateProgramWithSource(e.context, 1, &ORPHAN_SRC, NULL, &err_));
    CHECK(clCompileProgram(orphan, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL));
    cl_int rc = CL_SUCCESS;
    cl_program bad = clLinkProgram(e.context, 1, &e.device, NULL, 1, &orphan, NULL, NULL, &rc);
    printf("link of an unresolved call fails: %s\n", rc != CL_SUCCESS ? "yes" : "no");
    if (bad) clReleaseProgram(bad);
    printf("link with no inputs: %d\n", (clLinkProgram(e.context, 1, &e.device, NULL, 0, NULL, NULL, NULL, &rc), rc));

    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(linked));
    CHECK(clReleaseProgram(orphan));
    CHECK(clReleaseProgram(lib_p));
    CHECK(clReleaseProgram(main_p));
    CHECK(clReleaseProgram(header));
    CHECK(clReleaseMemObject(buf));
    CHECK(clReleaseCommandQueue(e.queue));
    CHECK(clReleaseContext(e.context));
    printf("done\n");
    return 0;
}
