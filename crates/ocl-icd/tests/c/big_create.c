/* Buffers and an image created with more initial data than one frame to the node may
 * carry (64 MiB): their contents must read back whole, and a kernel must see them. */
#include "common.h"

static const char *SRC =
    "__kernel void sum(__global const uint *v, uint n, __global uint *out) {\n"
    "    uint s = 0;\n"
    "    for (uint i = get_global_id(0); i < n; i += get_global_size(0)) s += v[i];\n"
    "    out[get_global_id(0)] = s;\n"
    "}\n";

static void fill(cl_uint *v, size_t n, cl_uint seed) {
    for (size_t i = 0; i < n; i++) v[i] = (cl_uint)i * 2654435761u + seed;
}

/* Prints the digest of `buf` (read back, or copied to a buffer the host may read) and
 * the sum a kernel computes over it. */
static void check(env_t *e, cl_kernel k, const char *what, cl_mem buf, size_t bytes) {
    unsigned char *back = malloc(bytes);
    cl_mem_flags flags;
    CHECK(clGetMemObjectInfo(buf, CL_MEM_FLAGS, sizeof flags, &flags, NULL));
    if (flags & CL_MEM_HOST_NO_ACCESS) {
        cl_mem plain = CHECKED(clCreateBuffer(e->context, CL_MEM_READ_WRITE, bytes, NULL, &err_));
        CHECK(clEnqueueCopyBuffer(e->queue, buf, plain, 0, 0, bytes, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(e->queue, plain, CL_TRUE, 0, bytes, back, 0, NULL, NULL));
        CHECK(clReleaseMemObject(plain));
    } else {
        CHECK(clEnqueueReadBuffer(e->queue, buf, CL_TRUE, 0, bytes, back, 0, NULL, NULL));
    }
    cl_uint n = (cl_uint)(bytes / sizeof(cl_uint));
    size_t global = 64;
    cl_uint partial[64];
    cl_mem out = CHECKED(clCreateBuffer(e->context, CL_MEM_WRITE_ONLY, sizeof partial, NULL, &err_));
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    CHECK(clSetKernelArg(k, 1, sizeof n, &n));
    CHECK(clSetKernelArg(k, 2, sizeof out, &out));
    CHECK(clEnqueueNDRangeKernel(e->queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e->queue, out, CL_TRUE, 0, sizeof partial, partial, 0, NULL, NULL));
    cl_uint sum = 0;
    for (int i = 0; i < 64; i++) sum += partial[i];
    printf("%s: %zu bytes, digest %016llx, kernel sum %u\n", what, bytes, fnv1a(back, bytes), sum);
    CHECK(clReleaseMemObject(out));
    free(back);
}

int main(void) {
    env_t e = setup(0);
    cl_kernel k = build(&e, SRC, "sum", NULL);

    /* 100 MB: in the range that made one frame too large for the node. */
    size_t copied = 100u * 1000 * 1000;
    cl_uint *data = malloc(copied);
    fill(data, copied / sizeof(cl_uint), 1);
    cl_mem a = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, copied, data, &err_));
    /* The host memory is the program's again at once. */
    memset(data, 0, copied);
    check(&e, k, "copied", a, copied);
    CHECK(clReleaseMemObject(a));
    free(data);

    /* The host may not write this one: its data cannot travel as writes. */
    size_t closed = 20u << 20;
    cl_uint *secret = malloc(closed);
    fill(secret, closed / sizeof(cl_uint), 4);
    cl_mem c = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR | CL_MEM_HOST_NO_ACCESS, closed, secret, &err_));
    check(&e, k, "no host access", c, closed);
    CHECK(clReleaseMemObject(c));
    free(secret);

    size_t used = 72u << 20;
    cl_uint *host = malloc(used);
    fill(host, used / sizeof(cl_uint), 2);
    cl_mem b = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, used, host, &err_));
    check(&e, k, "host pointer", b, used);
    CHECK(clReleaseMemObject(b));
    free(host);

    /* A 2D image of 75 MB from host memory with padded rows. */
    cl_image_format format = {CL_RGBA, CL_UNSIGNED_INT8};
    size_t w = 4352, h = 4352, pitch = w * 4 + 64;
    unsigned char *pixels = malloc(pitch * h);
    fill((cl_uint *)pixels, pitch * h / sizeof(cl_uint), 3);
    cl_image_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.image_type = CL_MEM_OBJECT_IMAGE2D;
    desc.image_width = w;
    desc.image_height = h;
    desc.image_row_pitch = pitch;
    cl_mem img = CHECKED(clCreateImage(e.context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, &format, &desc, pixels, &err_));
    unsigned char *back = malloc(w * 4 * h);
    size_t origin[3] = {0, 0, 0}, region[3] = {w, h, 1};
    CHECK(clEnqueueReadImage(e.queue, img, CL_TRUE, origin, region, 0, 0, back, 0, NULL, NULL));
    int same = 1;
    for (size_t y = 0; y < h && same; y++) same = memcmp(back + y * w * 4, pixels + y * pitch, w * 4) == 0;
    printf("image: %zux%zu, digest %016llx, same as the host rows: %s\n", w, h, fnv1a(back, w * 4 * h), same ? "yes" : "no");
    CHECK(clReleaseMemObject(img));
    /* The same pixels into an image the host may only read. */
    img = CHECKED(clCreateImage(e.context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR | CL_MEM_HOST_READ_ONLY, &format, &desc, pixels, &err_));
    memset(back, 0, w * 4 * h);
    CHECK(clEnqueueReadImage(e.queue, img, CL_TRUE, origin, region, 0, 0, back, 0, NULL, NULL));
    printf("read-only image: digest %016llx\n", fnv1a(back, w * 4 * h));
    CHECK(clReleaseMemObject(img));
    free(back);
    free(pixels);

    CHECK(clReleaseKernel(k));
    teardown(&e);
    return 0;
}
