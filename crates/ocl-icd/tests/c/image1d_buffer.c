/* 1D images on a buffer (CL_MEM_OBJECT_IMAGE1D_BUFFER): the image's storage is the
 * buffer's, so what is written through one is read through the other; a kernel reads
 * the image as image1d_buffer_t; the image names its buffer and holds it after the
 * application released it; wrong descriptions are refused. */
#include "common.h"

static const char *SRC =
    "__kernel void plus_one(read_only image1d_buffer_t img, __global int *out) {\n"
    "    int i = get_global_id(0);\n"
    "    out[i] = read_imagei(img, i).x + 1;\n"
    "}\n";

#define N 16

static cl_mem image_on(env_t *e, cl_mem buffer, size_t width, cl_int *rc) {
    cl_image_format fmt = {CL_R, CL_SIGNED_INT32};
    cl_image_desc desc = {0};
    desc.image_type = CL_MEM_OBJECT_IMAGE1D_BUFFER;
    desc.image_width = width;
    desc.buffer = buffer;
    return clCreateImage(e->context, CL_MEM_READ_WRITE, &fmt, &desc, NULL, rc);
}

static void print(const char *what, const int *v) {
    printf("%s:", what);
    for (int i = 0; i < N; i++) printf(" %d", v[i]);
    printf("\n");
}

int main(void) {
    env_t e = setup(0);
    int host[N], out[N];
    for (int i = 0; i < N; i++) host[i] = 3 * i;
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host,
                                        host, &err_));
    cl_mem img = CHECKED(image_on(&e, buf, N, &err_));

    cl_mem named;
    cl_mem_object_type type;
    size_t width;
    CHECK(clGetImageInfo(img, CL_IMAGE_BUFFER, sizeof named, &named, NULL));
    printf("CL_IMAGE_BUFFER is the buffer: %s\n", named == buf ? "yes" : "no");
    CHECK(clGetMemObjectInfo(img, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof named, &named, NULL));
    printf("CL_MEM_ASSOCIATED_MEMOBJECT is the buffer: %s\n", named == buf ? "yes" : "no");
    CHECK(clGetMemObjectInfo(img, CL_MEM_TYPE, sizeof type, &type, NULL));
    CHECK(clGetImageInfo(img, CL_IMAGE_WIDTH, sizeof width, &width, NULL));
    printf("type %#x, width %zu\n", type, width);

    size_t origin[3] = {0, 0, 0}, region[3] = {N, 1, 1};
    CHECK(clEnqueueReadImage(e.queue, img, CL_TRUE, origin, region, 0, 0, out, 0, NULL, NULL));
    print("the buffer's data read through the image", out);

    cl_kernel k = build(&e, SRC, "plus_one", NULL);
    cl_mem result = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, sizeof out, NULL, &err_));
    CHECK(clSetKernelArg(k, 0, sizeof img, &img));
    CHECK(clSetKernelArg(k, 1, sizeof result, &result));
    size_t global = N;
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, result, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    print("a kernel reading the image", out);

    for (int i = 0; i < N; i++) host[i] = 100 + i;
    CHECK(clEnqueueWriteBuffer(e.queue, buf, CL_FALSE, 0, sizeof host, host, 0, NULL, NULL));
    CHECK(clEnqueueReadImage(e.queue, img, CL_TRUE, origin, region, 0, 0, out, 0, NULL, NULL));
    print("written to the buffer, read through the image", out);

    for (int i = 0; i < N; i++) host[i] = -i;
    CHECK(clEnqueueWriteImage(e.queue, img, CL_FALSE, origin, region, 0, 0, host, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    print("written to the image, read from the buffer", out);

    /* The image holds the buffer's storage after the buffer is released. */
    CHECK(clReleaseMemObject(buf));
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, result, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    print("a kernel reading the image of a released buffer", out);

    cl_int rc;
    cl_mem small = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, 4 * sizeof(int), NULL, &err_));
    cl_mem bad = image_on(&e, small, 5, &rc);
    printf("an image wider than its buffer: %s, %d\n", bad ? "created" : "refused", rc);
    bad = image_on(&e, NULL, 4, &rc);
    printf("an image on no buffer: %s, %d\n", bad ? "created" : "refused", rc);
    bad = image_on(&e, img, 4, &rc);
    printf("an image on an image: %s, %d\n", bad ? "created" : "refused", rc);

    CHECK(clReleaseMemObject(small));
    CHECK(clReleaseMemObject(result));
    CHECK(clReleaseMemObject(img));
    CHECK(clReleaseKernel(k));
    teardown(&e);
    return 0;
}
