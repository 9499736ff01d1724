/* Calls of OpenCL 2.x and 3.0 that return objects: each either works (sampler with
 * properties, kernel clone, buffer and image with properties) or returns NULL with an
 * error code (it used to leave the error code untouched, so programs carried on with a
 * NULL object). */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include "common.h"

#define UNTOUCHED 12345

static const char *SRC = "__kernel void add(__global int *v, int x) { v[get_global_id(0)] += x; }\n";

/* "ok" when the call returned an object with CL_SUCCESS or NULL with an error code. */
static const char *outcome(void *obj, cl_int rc) {
    if (obj != NULL && rc == CL_SUCCESS) return "ok";
    if (obj == NULL && rc != CL_SUCCESS && rc != UNTOUCHED) return "ok";
    return "NULL without an error code";
}

int main(void) {
    env_t e = setup(0);
    cl_int rc = UNTOUCHED;

    cl_sampler_properties sp[] = {CL_SAMPLER_ADDRESSING_MODE, CL_ADDRESS_REPEAT, CL_SAMPLER_FILTER_MODE,
                                  CL_FILTER_LINEAR, 0};
    cl_sampler s = clCreateSamplerWithProperties(e.context, sp, &rc);
    printf("sampler with properties: %s\n", outcome(s, rc));
    if (s) {
        cl_addressing_mode am;
        cl_filter_mode fm;
        cl_bool norm;
        CHECK(clGetSamplerInfo(s, CL_SAMPLER_ADDRESSING_MODE, sizeof am, &am, NULL));
        CHECK(clGetSamplerInfo(s, CL_SAMPLER_FILTER_MODE, sizeof fm, &fm, NULL));
        CHECK(clGetSamplerInfo(s, CL_SAMPLER_NORMALIZED_COORDS, sizeof norm, &norm, NULL));
        printf("  repeat %d, linear %d, normalized %d\n", am == CL_ADDRESS_REPEAT, fm == CL_FILTER_LINEAR, norm);
        CHECK(clReleaseSampler(s));
    }
    cl_sampler_properties twice[] = {CL_SAMPLER_FILTER_MODE, CL_FILTER_LINEAR, CL_SAMPLER_FILTER_MODE,
                                     CL_FILTER_NEAREST, 0};
    rc = UNTOUCHED;
    s = clCreateSamplerWithProperties(e.context, twice, &rc);
    printf("sampler with a property twice: %s, %s\n", s ? "object" : "NULL", rc == CL_INVALID_VALUE ? "CL_INVALID_VALUE" : "other");

    int host[16] = {0};
    rc = UNTOUCHED;
    cl_mem buf = clCreateBufferWithProperties(e.context, NULL, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host, host, &rc);
    printf("buffer with properties: %s\n", outcome(buf, rc));

    cl_kernel k = build(&e, SRC, "add", NULL);
    int x = 3;
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    CHECK(clSetKernelArg(k, 1, sizeof x, &x));
    rc = UNTOUCHED;
    cl_kernel clone = clCloneKernel(k, &rc);
    printf("clone kernel: %s\n", outcome(clone, rc));
    if (clone) {
        /* The clone has the arguments; changing the original's later does not touch it. */
        x = 100;
        CHECK(clSetKernelArg(k, 1, sizeof x, &x));
        size_t global = 16;
        CHECK(clEnqueueNDRangeKernel(e.queue, clone, 1, NULL, &global, NULL, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(e.queue, buf, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
        printf("  clone ran with x = %d\n", host[5]);
        CHECK(clReleaseKernel(clone));
    }

    cl_image_format format = {CL_RGBA, CL_UNSIGNED_INT8};
    cl_image_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.image_type = CL_MEM_OBJECT_IMAGE2D;
    desc.image_width = 8;
    desc.image_height = 8;
    rc = UNTOUCHED;
    cl_mem img = clCreateImageWithProperties(e.context, NULL, CL_MEM_READ_WRITE, &format, &desc, NULL, &rc);
    printf("image with properties: %s\n", outcome(img, rc));
    if (img) CHECK(clReleaseMemObject(img));

    rc = UNTOUCHED;
    cl_mem pipe = clCreatePipe(e.context, CL_MEM_READ_WRITE, 4, 16, NULL, &rc);
    printf("pipe: %s\n", outcome(pipe, rc));
    if (pipe) CHECK(clReleaseMemObject(pipe));

    static const unsigned char il[] = {0x03, 0x02, 0x23, 0x07, 0, 0, 1, 0};
    rc = UNTOUCHED;
    cl_program p = clCreateProgramWithIL(e.context, il, sizeof il, &rc);
    printf("program from IL: %s\n", outcome(p, rc));
    if (p) CHECK(clReleaseProgram(p));

    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(buf));
    teardown(&e);
    return 0;
}
