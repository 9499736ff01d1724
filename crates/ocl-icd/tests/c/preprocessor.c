/* Kernels compile for the device's version, as the CTS's kernel_preprocessor_macros
 * checks: __OPENCL_VERSION__ is no higher than CL_DEVICE_VERSION, __OPENCL_C_VERSION__ is
 * an OpenCL C version the device supports (CL_DEVICE_OPENCL_C_ALL_VERSIONS from 3.0,
 * CL_DEVICE_OPENCL_C_VERSION before), built with and without options and compiled and
 * linked; __LINE__ counts the program's own lines; CL_PROGRAM_BUILD_OPTIONS answers the
 * options given; a build without options keeps kernel argument information. */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include "common.h"

static const char *SRC =
    "__kernel void versions(__global int *out) {\n"
    "    out[0] = __OPENCL_VERSION__;\n"
    "    out[1] = __OPENCL_C_VERSION__;\n"
    "    out[2] = __LINE__;\n"
    "}\n";

/* major * 100 + minor * 10 of "<prefix><major>.<minor>..." */
static int version_of(const char *text, const char *prefix) {
    int major = 0, minor = 0;
    if (strncmp(text, prefix, strlen(prefix)) != 0 ||
        sscanf(text + strlen(prefix), "%d.%d", &major, &minor) != 2)
        return 0;
    return major * 100 + minor * 10;
}

static int device_version(env_t *e) {
    char text[256];
    CHECK(clGetDeviceInfo(e->device, CL_DEVICE_VERSION, sizeof text, text, NULL));
    return version_of(text, "OpenCL ");
}

/* Whether the device supports OpenCL C `c` (major * 100 + minor * 10). */
static int supports_c(env_t *e, int c) {
    if (device_version(e) >= 300) {
        cl_name_version all[16];
        size_t size;
        CHECK(clGetDeviceInfo(e->device, CL_DEVICE_OPENCL_C_ALL_VERSIONS, sizeof all, all,
                              &size));
        for (size_t i = 0; i < size / sizeof all[0]; i++) {
            cl_version v = all[i].version;
            if ((int)(CL_VERSION_MAJOR(v) * 100 + CL_VERSION_MINOR(v) * 10) == c) return 1;
        }
        return 0;
    }
    char text[256];
    CHECK(clGetDeviceInfo(e->device, CL_DEVICE_OPENCL_C_VERSION, sizeof text, text, NULL));
    return c >= 100 && c <= version_of(text, "OpenCL C ");
}

/* Runs `versions` of program `p` and says what it found. */
static void report(env_t *e, cl_program p, const char *how) {
    cl_kernel k = CHECKED(clCreateKernel(p, "versions", &err_));
    cl_mem out = CHECKED(clCreateBuffer(e->context, CL_MEM_WRITE_ONLY, 3 * sizeof(int), NULL, &err_));
    CHECK(clSetKernelArg(k, 0, sizeof out, &out));
    size_t one = 1;
    CHECK(clEnqueueNDRangeKernel(e->queue, k, 1, NULL, &one, NULL, 0, NULL, NULL));
    int v[3];
    CHECK(clEnqueueReadBuffer(e->queue, out, CL_TRUE, 0, sizeof v, v, 0, NULL, NULL));
    int device = device_version(e);
    printf("%s: __OPENCL_VERSION__ ", how);
    if (v[0] >= 100 && v[0] <= device) printf("within the device's");
    else printf("%d, device %d", v[0], device);
    printf(", __OPENCL_C_VERSION__ %s, __LINE__ %d", supports_c(e, v[1]) ? "supported" : "NOT supported", v[2]);
    char type[64];
    if (clGetKernelArgInfo(k, 0, CL_KERNEL_ARG_TYPE_NAME, sizeof type, type, NULL) == CL_SUCCESS)
        printf(", argument 0 is %s", type);
    printf("\n");
    CHECK(clReleaseMemObject(out));
    CHECK(clReleaseKernel(k));
}

int main(void) {
    env_t e = setup(0);
    /* "" and " " (the CTS's options for a 1.x device) are left out: the ICD cannot tell
     * "" from NULL, and a runtime keeps argument information for one and not the other;
     * PoCL answers " " as its build options "". */
    const char *options[] = {NULL, "-DUNUSED=1", "-cl-std=CL1.2"};
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
        cl_program p = CHECKED(clCreateProgramWithSource(e.context, 1, &SRC, NULL, &err_));
        CHECK(clBuildProgram(p, 1, &e.device, options[i], NULL, NULL));
        char given[64], how[128];
        CHECK(clGetProgramBuildInfo(p, e.device, CL_PROGRAM_BUILD_OPTIONS, sizeof given, given, NULL));
        snprintf(how, sizeof how, "built with %s (build options \"%s\")",
                 options[i] ? options[i] : "NULL", given);
        report(&e, p, how);
        CHECK(clReleaseProgram(p));
    }
    cl_program object = CHECKED(clCreateProgramWithSource(e.context, 1, &SRC, NULL, &err_));
    CHECK(clCompileProgram(object, 1, &e.device, NULL, 0, NULL, NULL, NULL, NULL));
    cl_program linked = CHECKED(clLinkProgram(e.context, 1, &e.device, NULL, 1, &object, NULL, NULL, &err_));
    report(&e, linked, "compiled and linked");
    CHECK(clReleaseProgram(linked));
    CHECK(clReleaseProgram(object));
    teardown(&e);
    return 0;
}
