/* Programs re-created from the binaries of a compiled object and of a library link
 * and run, and report their binary types (through the node such a link used to be
 * refused with CL_INVALID_OPERATION: the program had never been compiled there). */
#include "common.h"

static const char *SRC =
    "__kernel void twice(__global int *v) { v[get_global_id(0)] *= 2; }\n";

/* A program of `e`'s context from the binary of `p`. */
static cl_program from_binary(env_t *e, cl_program p) {
    size_t size;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
    unsigned char *bin = malloc(size);
    unsigned char *bins[1] = {bin};
    CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
    cl_int status;
    cl_program q = CHECKED(clCreateProgramWithBinary(e->context, 1, &e->device, &size,
                                                     (const unsigned char **)bins, &status, &err_));
    free(bin);
    return q;
}

static const char *type_name(cl_program p, cl_device_id d) {
    cl_program_binary_type t;
    CHECK(clGetProgramBuildInfo(p, d, CL_PROGRAM_BINARY_TYPE, sizeof t, &t, NULL));
    switch (t) {
    case CL_PROGRAM_BINARY_TYPE_NONE: return "none";
    case CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT: return "compiled object";
    case CL_PROGRAM_BINARY_TYPE_LIBRARY: return "library";
    case CL_PROGRAM_BINARY_TYPE_EXECUTABLE: return "executable";
    default: return "other";
    }
}

static void run(env_t *e, cl_program exe, const char *what) {
    cl_kernel k = CHECKED(clCreateKernel(exe, "twice", &err_));
    int host[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cl_mem buf = CHECKED(clCreateBuffer(e->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host, host, &err_));
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t global = 8;
    CHECK(clEnqueueNDRangeKernel(e->queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e->queue, buf, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
    printf("%s: %d %d\n", what, host[0], host[7]);
    CHECK(clReleaseMemObject(buf));
    CHECK(clReleaseKernel(k));
}

int main(void) {
    env_t e = setup(0);
    cl_program p = CHECKED(clCreateProgramWithSource(e.context, 1, &SRC, NULL, &err_));
    CHECK(clCompileProgram(p, 1, &e.device, NULL, 0, NULL, NULL, NULL, NULL));
    cl_program object = from_binary(&e, p);
    printf("from a compiled object's binary: %s\n", type_name(object, e.device));
    cl_program exe = CHECKED(clLinkProgram(e.context, 1, &e.device, NULL, 1, &object, NULL, NULL, &err_));
    run(&e, exe, "linked");
    cl_program lib = CHECKED(clLinkProgram(e.context, 1, &e.device, "-create-library", 1, &object, NULL, NULL, &err_));
    cl_program lib_again = from_binary(&e, lib);
    printf("from a library's binary: %s\n", type_name(lib_again, e.device));
    cl_program exe2 = CHECKED(clLinkProgram(e.context, 1, &e.device, NULL, 1, &lib_again, NULL, NULL, &err_));
    run(&e, exe2, "linked from the library");
    cl_program all[5] = {p, object, exe, lib, lib_again};
    for (int i = 0; i < 5; i++) CHECK(clReleaseProgram(all[i]));
    CHECK(clReleaseProgram(exe2));
    teardown(&e);
    return 0;
}
