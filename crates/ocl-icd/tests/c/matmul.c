/* Tiled matrix multiply (256x256 floats) with __local tiles passed as NULL kernel
 * arguments, plus work-group info queries. */
#include "common.h"

#define TILE 16
static const char *SRC =
    "#define TILE 16\n"
    "__kernel void matmul(__global const float *A, __global const float *B, __global float *C,\n"
    "                     int n, __local float *As, __local float *Bs) {\n"
    "    int col = get_global_id(0), row = get_global_id(1);\n"
    "    int lx = get_local_id(0), ly = get_local_id(1);\n"
    "    float acc = 0.0f;\n"
    "    for (int t = 0; t < n / TILE; t++) {\n"
    "        As[ly * TILE + lx] = A[row * n + t * TILE + lx];\n"
    "        Bs[ly * TILE + lx] = B[(t * TILE + ly) * n + col];\n"
    "        barrier(CLK_LOCAL_MEM_FENCE);\n"
    "        for (int k = 0; k < TILE; k++) acc += As[ly * TILE + k] * Bs[k * TILE + lx];\n"
    "        barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    }\n"
    "    C[row * n + col] = acc;\n"
    "}\n";

int main(void) {
    env_t e = setup(0);
    const int n = 256;
    size_t bytes = (size_t)n * n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    for (int i = 0; i < n * n; i++) {
        a[i] = (float)((i * 13) % 17) / 8.0f;
        b[i] = (float)((i * 7) % 11) / 4.0f;
    }
    cl_mem da = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, a, &err_));
    cl_mem db = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, b, &err_));
    cl_mem dc = CHECKED(clCreateBuffer(e.context, CL_MEM_WRITE_ONLY, bytes, NULL, &err_));
    cl_kernel k = build(&e, SRC, "matmul", "-cl-fast-relaxed-math");
    size_t wg_max, pref;
    CHECK(clGetKernelWorkGroupInfo(k, e.device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg_max, &wg_max, NULL));
    CHECK(clGetKernelWorkGroupInfo(k, e.device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, sizeof pref, &pref, NULL));
    printf("work-group size max %zu, preferred multiple %zu\n", wg_max, pref);
    CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &da));
    CHECK(clSetKernelArg(k, 1, sizeof(cl_mem), &db));
    CHECK(clSetKernelArg(k, 2, sizeof(cl_mem), &dc));
    CHECK(clSetKernelArg(k, 3, sizeof(int), &n));
    CHECK(clSetKernelArg(k, 4, TILE * TILE * sizeof(float), NULL));
    CHECK(clSetKernelArg(k, 5, TILE * TILE * sizeof(float), NULL));
    size_t global[2] = {n, n}, local[2] = {TILE, TILE};
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 2, NULL, global, local, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, dc, CL_TRUE, 0, bytes, c, 0, NULL, NULL));
    double max_err = 0;
    for (int r = 0; r < n; r += 37)
        for (int col = 0; col < n; col += 41) {
            double ref = 0;
            for (int i = 0; i < n; i++) ref += (double)a[r * n + i] * b[i * n + col];
            double d = ref - c[r * n + col];
            if (d < 0) d = -d;
            if (d > max_err) max_err = d;
        }
    printf("max error vs host reference below 1e-2: %s\n", max_err < 1e-2 ? "yes" : "no");
    printf("C[0]=%.4f C[n*n-1]=%.4f\n", c[0], c[n * n - 1]);
    printf("digest: %016llx\n", fnv1a(c, bytes));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(da));
    CHECK(clReleaseMemObject(db));
    CHECK(clReleaseMemObject(dc));
    teardown(&e);
    free(a);
    free(b);
    free(c);
    return max_err >= 1e-2;
}
