/* Sub-buffers: a kernel writes through a sub-buffer, the parent sees it; reads, writes
 * and maps through the sub-buffer; the sub-buffer outlives the released parent. */
#include "common.h"

static const char *SRC =
    "__kernel void mark(__global int *v, int base) { size_t i = get_global_id(0); v[i] = base + (int)i; }\n";

int main(void) {
    env_t e = setup(0);
    cl_uint align_bits;
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL));
    size_t align = align_bits / 8;
    const size_t n = 4096;
    int *host = calloc(n, sizeof(int));
    cl_mem parent = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof(int), host, &err_));
    cl_buffer_region region = {4 * align, 256 * sizeof(int)};
    cl_mem sub = CHECKED(clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &region, &err_));
    cl_mem assoc;
    size_t off, size;
    CHECK(clGetMemObjectInfo(sub, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof assoc, &assoc, NULL));
    CHECK(clGetMemObjectInfo(sub, CL_MEM_OFFSET, sizeof off, &off, NULL));
    CHECK(clGetMemObjectInfo(sub, CL_MEM_SIZE, sizeof size, &size, NULL));
    printf("associated is parent: %s, offset is origin: %s, size %zu\n", assoc == parent ? "yes" : "no",
           off == region.origin ? "yes" : "no", size);
    cl_buffer_region bad = {n * sizeof(int), 16};
    clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &bad, &err_);
    printf("out-of-range sub-buffer: %d\n", err_);

    cl_kernel k = build(&e, SRC, "mark", NULL);
    int base = 1000;
    CHECK(clSetKernelArg(k, 0, sizeof sub, &sub));
    CHECK(clSetKernelArg(k, 1, sizeof base, &base));
    size_t global = 256;
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, parent, CL_TRUE, 0, n * sizeof(int), host, 0, NULL, NULL));
    size_t first = region.origin / sizeof(int);
    printf("parent before/at/end of sub: %d %d %d %d\n", host[first - 1], host[first], host[first + 255], host[first + 256]);

    int patch[4] = {-1, -2, -3, -4};
    CHECK(clEnqueueWriteBuffer(e.queue, sub, CL_TRUE, 8 * sizeof(int), sizeof patch, patch, 0, NULL, NULL));
    int *m = CHECKED(clEnqueueMapBuffer(e.queue, sub, CL_TRUE, CL_MAP_READ, 0, 16 * sizeof(int), 0, NULL, NULL, &err_));
    printf("mapped sub:");
    for (int i = 6; i < 14; i++) printf(" %d", m[i]);
    printf("\n");
    CHECK(clEnqueueUnmapMemObject(e.queue, sub, m, 0, NULL, NULL));

    CHECK(clReleaseMemObject(parent));
    int tail[2];
    CHECK(clEnqueueReadBuffer(e.queue, sub, CL_TRUE, 254 * sizeof(int), sizeof tail, tail, 0, NULL, NULL));
    printf("sub after parent release: %d %d\n", tail[0], tail[1]);
    CHECK(clReleaseMemObject(sub));
    CHECK(clReleaseKernel(k));
    teardown(&e);
    free(host);
    return 0;
}
