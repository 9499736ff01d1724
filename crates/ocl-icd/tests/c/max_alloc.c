/* The largest allocation a device advertises (CL_DEVICE_MAX_MEM_ALLOC_SIZE) can be made
 * and used, and nothing larger is made: a buffer one byte larger fails with
 * CL_INVALID_BUFFER_SIZE, as OpenCL specifies, and so does an image larger than it.
 * Through the node the figure is the device's own (in whole MiB), or with a quota set the
 * client's share of it. */
#include "common.h"

/* A 3D image of CL_RGBA, CL_FLOAT, 1024 x 1024 pixels (16 MiB) a slice. */
static cl_mem image(env_t *e, size_t slices, cl_int *rc) {
    cl_image_format fmt = {CL_RGBA, CL_FLOAT};
    cl_image_desc desc = {0};
    desc.image_type = CL_MEM_OBJECT_IMAGE3D;
    desc.image_width = 1024;
    desc.image_height = 1024;
    desc.image_depth = slices;
    return clCreateImage(e->context, CL_MEM_READ_WRITE, &fmt, &desc, NULL, rc);
}

int main(void) {
    env_t e = setup(0);
    cl_ulong max_alloc, global;
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc,
                          NULL));
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL));
    printf("largest allocation within global memory: %s\n", max_alloc <= global ? "yes" : "no");

    cl_int rc;
    cl_mem over = clCreateBuffer(e.context, CL_MEM_READ_WRITE, max_alloc + 1, NULL, &rc);
    printf("buffer one byte above the largest allocation: %d%s\n", rc,
           over == NULL ? "" : " (created)");
    if (over) CHECK(clReleaseMemObject(over));

    cl_mem largest = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, max_alloc, NULL, &err_));
    int in[4] = {1, 2, 3, 4}, out[4] = {0};
    size_t end = max_alloc - sizeof in;
    CHECK(clEnqueueWriteBuffer(e.queue, largest, CL_FALSE, end, sizeof in, in, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, largest, CL_TRUE, end, sizeof out, out, 0, NULL, NULL));
    printf("buffer of the largest allocation, its last bytes: %d %d %d %d\n", out[0], out[1],
           out[2], out[3]);
    CHECK(clReleaseMemObject(largest));

    size_t slices = max_alloc / (16 << 20);
    cl_mem img = image(&e, slices + 1, &rc);
    printf("image above the largest allocation: %s\n", img == NULL ? "refused" : "created");
    if (img) CHECK(clReleaseMemObject(img));
    img = image(&e, slices, &rc);
    printf("image within it: %s\n", rc == CL_SUCCESS ? "created" : "refused");
    if (img) CHECK(clReleaseMemObject(img));
    teardown(&e);
    return 0;
}
