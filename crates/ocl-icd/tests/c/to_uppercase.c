/* to_uppercase over 256 KiB of text, the Strega example accelerator, as an OpenCL kernel. */
#include "common.h"

static const char *SRC =
    "__kernel void upper(__global const uchar *in, __global uchar *out) {\n"
    "    size_t i = get_global_id(0);\n"
    "    uchar c = in[i];\n"
    "    out[i] = (c >= 'a' && c <= 'z') ? (uchar)(c - 32) : c;\n"
    "}\n";

int main(void) {
    env_t e = setup(0);
    const size_t n = 256 << 10;
    char *text = malloc(n), *out = malloc(n + 1);
    const char *words = "the quick brown fox jumps over the lazy dog; Hello, OpenCL! 0123456789\n";
    size_t wl = strlen(words);
    for (size_t i = 0; i < n; i++) text[i] = words[(i * 7 + i / wl) % wl];
    cl_mem in = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, n, text, &err_));
    cl_mem o = CHECKED(clCreateBuffer(e.context, CL_MEM_WRITE_ONLY, n, NULL, &err_));
    cl_kernel k = build(&e, SRC, "upper", NULL);
    CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &in));
    CHECK(clSetKernelArg(k, 1, sizeof(cl_mem), &o));
    size_t global = n;
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, o, CL_TRUE, 0, n, out, 0, NULL, NULL));
    out[80] = 0;
    printf("head: %s\n", out);
    printf("digest: %016llx\n", fnv1a(out, n));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(in));
    CHECK(clReleaseMemObject(o));
    teardown(&e);
    free(text);
    free(out);
    return 0;
}
