/* Map/unmap (write-invalidate, read, read+write), a CL_MEM_USE_HOST_PTR buffer whose
 * mapping is the host pointer, fill and copy. */
#include "common.h"

static const char *SRC =
    "__kernel void twice(__global uint *v) { size_t i = get_global_id(0); v[i] = v[i] * 2u + 1u; }\n";

int main(void) {
    env_t e = setup(0);
    const size_t n = 1 << 16;
    const size_t bytes = n * sizeof(cl_uint);
    cl_mem a = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err_));
    cl_uint *p = CHECKED(clEnqueueMapBuffer(e.queue, a, CL_TRUE, CL_MAP_WRITE_INVALIDATE_REGION, 0, bytes, 0, NULL, NULL, &err_));
    for (size_t i = 0; i < n; i++) p[i] = (cl_uint)(i ^ 0x5a5a);
    cl_uint count;
    CHECK(clGetMemObjectInfo(a, CL_MEM_MAP_COUNT, sizeof count, &count, NULL));
    printf("map count while mapped: %u\n", count);
    CHECK(clEnqueueUnmapMemObject(e.queue, a, p, 0, NULL, NULL));

    cl_kernel k = build(&e, SRC, "twice", NULL);
    CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &a));
    size_t global = n;
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));

    cl_event ev;
    cl_uint *r = CHECKED(clEnqueueMapBuffer(e.queue, a, CL_FALSE, CL_MAP_READ, 1024, 4096, 0, NULL, &ev, &err_));
    CHECK(clWaitForEvents(1, &ev));
    CHECK(clReleaseEvent(ev));
    printf("mapped read [256..260): %u %u %u %u\n", r[0], r[1], r[2], r[3]);
    CHECK(clEnqueueUnmapMemObject(e.queue, a, r, 0, NULL, NULL));

    /* Read-write mapping of the middle, modified in place. */
    cl_uint *m = CHECKED(clEnqueueMapBuffer(e.queue, a, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, bytes / 2, 64, 0, NULL, NULL, &err_));
    for (int i = 0; i < 16; i++) m[i] += 7;
    CHECK(clEnqueueUnmapMemObject(e.queue, a, m, 0, NULL, NULL));

    /* Fill and copy. */
    cl_mem b = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, bytes, NULL, &err_));
    cl_uint pattern = 0xdeadbeef;
    CHECK(clEnqueueFillBuffer(e.queue, b, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL));
    CHECK(clEnqueueCopyBuffer(e.queue, a, b, 0, bytes / 4, bytes / 4, 0, NULL, NULL));

    /* USE_HOST_PTR: the mapping is the application's own memory. */
    cl_uint *host = malloc(bytes);
    memset(host, 0, bytes);
    cl_mem u = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, host, &err_));
    CHECK(clEnqueueCopyBuffer(e.queue, b, u, 0, 0, bytes, 0, NULL, NULL));
    cl_uint *hp = CHECKED(clEnqueueMapBuffer(e.queue, u, CL_TRUE, CL_MAP_READ, 0, bytes, 0, NULL, NULL, &err_));
    printf("use-host-ptr mapping is the host pointer: %s\n", hp == host ? "yes" : "no");
    printf("u[0]=%08x u[n/4]=%08x u[n/2+3]=%08x u[n-1]=%08x\n", hp[0], hp[n / 4], hp[n / 2 + 3], hp[n - 1]);
    printf("digest: %016llx\n", fnv1a(hp, bytes));
    CHECK(clEnqueueUnmapMemObject(e.queue, u, hp, 0, NULL, NULL));
    CHECK(clFinish(e.queue));

    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(a));
    CHECK(clReleaseMemObject(b));
    CHECK(clReleaseMemObject(u));
    teardown(&e);
    free(host);
    return 0;
}
