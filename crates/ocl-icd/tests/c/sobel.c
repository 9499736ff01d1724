/* Sobel edge magnitude on a 640x480 8-bit image, 2-D NDRange with 16x16 work-groups. */
#include "common.h"

static const char *SRC =
    "__kernel void sobel(__global const uchar *in, __global uchar *out, int w, int h) {\n"
    "    int x = get_global_id(0), y = get_global_id(1);\n"
    "    if (x >= w || y >= h) return;\n"
    "    if (x == 0 || y == 0 || x == w - 1 || y == h - 1) { out[y * w + x] = 0; return; }\n"
    "    #define P(dx, dy) (int)in[(y + (dy)) * w + (x + (dx))]\n"
    "    int gx = -P(-1,-1) - 2*P(-1,0) - P(-1,1) + P(1,-1) + 2*P(1,0) + P(1,1);\n"
    "    int gy = -P(-1,-1) - 2*P(0,-1) - P(1,-1) + P(-1,1) + 2*P(0,1) + P(1,1);\n"
    "    int m = abs(gx) + abs(gy);\n"
    "    out[y * w + x] = (uchar)(m > 255 ? 255 : m);\n"
    "}\n";

int main(void) {
    env_t e = setup(0);
    const int w = 640, h = 480;
    size_t n = (size_t)w * h;
    unsigned char *img = malloc(n), *out = malloc(n);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            img[y * w + x] = (unsigned char)(((x / 40 + y / 30) % 2) * 160 + (x * y) % 61);
    cl_mem in = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_ONLY, n, NULL, &err_));
    cl_mem o = CHECKED(clCreateBuffer(e.context, CL_MEM_WRITE_ONLY, n, NULL, &err_));
    CHECK(clEnqueueWriteBuffer(e.queue, in, CL_TRUE, 0, n, img, 0, NULL, NULL));
    cl_kernel k = build(&e, SRC, "sobel", NULL);
    CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &in));
    CHECK(clSetKernelArg(k, 1, sizeof(cl_mem), &o));
    CHECK(clSetKernelArg(k, 2, sizeof(int), &w));
    CHECK(clSetKernelArg(k, 3, sizeof(int), &h));
    size_t global[2] = {w, h}, local[2] = {16, 16};
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 2, NULL, global, local, 0, NULL, NULL));
    CHECK(clFinish(e.queue));
    CHECK(clEnqueueReadBuffer(e.queue, o, CL_TRUE, 0, n, out, 0, NULL, NULL));
    unsigned long sum = 0;
    for (size_t i = 0; i < n; i++) sum += out[i];
    printf("sum: %lu\n", sum);
    printf("row 100: ");
    for (int x = 0; x < 16; x++) printf("%u ", out[100 * w + 38 + x]);
    printf("\ndigest: %016llx\n", fnv1a(out, n));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(in));
    CHECK(clReleaseMemObject(o));
    teardown(&e);
    free(img);
    free(out);
    return 0;
}
