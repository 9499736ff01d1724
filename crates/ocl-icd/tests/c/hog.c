/* A client that holds 16 MiB on the device and keeps it busy until it is killed; the
 * tests kill it mid-task to check that the node frees everything and stays healthy. */
#include "common.h"

static const char *SRC =
    "__kernel void spin(__global float *v, int rounds) {\n"
    "    size_t i = get_global_id(0); float x = v[i];\n"
    "    for (int r = 0; r < rounds; r++) x = x * 0.999f + 0.5f;\n"
    "    v[i] = x;\n"
    "}\n";

int main(void) {
    env_t e = setup(0);
    const size_t n = 4 << 20;
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, n * sizeof(float), NULL, &err_));
    float zero = 0;
    CHECK(clEnqueueFillBuffer(e.queue, buf, &zero, sizeof zero, 0, n * sizeof(float), 0, NULL, NULL));
    cl_kernel k = build(&e, SRC, "spin", NULL);
    int rounds = 50;
    CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &buf));
    CHECK(clSetKernelArg(k, 1, sizeof(int), &rounds));
    size_t global = n;
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clFinish(e.queue));
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
        CHECK(clFlush(e.queue));
        CHECK(clFinish(e.queue));
    }
}
