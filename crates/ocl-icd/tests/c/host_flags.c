/* Host access flags (CL_MEM_HOST_READ_ONLY, _WRITE_ONLY, _NO_ACCESS) on buffers,
 * sub-buffers (which inherit them) and images: the reads, writes, rectangular
 * transfers and maps they forbid fail with CL_INVALID_OPERATION (through the node they
 * all used to succeed), fills and copies stay allowed, and a map for writing of a
 * write-only object shows its contents. */
#include "common.h"

static const char *code(cl_int rc) {
    switch (rc) {
    case CL_SUCCESS: return "ok";
    case CL_INVALID_OPERATION: return "CL_INVALID_OPERATION";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    default: return "other";
    }
}

static const char *name(cl_mem_flags host) {
    return host == CL_MEM_HOST_READ_ONLY ? "read-only" : host == CL_MEM_HOST_WRITE_ONLY ? "write-only" : "no-access";
}

static void buffer_calls(env_t *e, cl_mem b, const char *what) {
    unsigned char host[64] = {0};
    size_t origin[3] = {0, 0, 0}, region[3] = {8, 2, 1};
    cl_int rc;
    printf("%s: read %s, write %s", what, code(clEnqueueReadBuffer(e->queue, b, CL_TRUE, 0, 16, host, 0, NULL, NULL)),
           code(clEnqueueWriteBuffer(e->queue, b, CL_TRUE, 0, 16, host, 0, NULL, NULL)));
    printf(", read rect %s", code(clEnqueueReadBufferRect(e->queue, b, CL_TRUE, origin, origin, region, 0, 0, 0, 0, host, 0, NULL, NULL)));
    printf(", write rect %s", code(clEnqueueWriteBufferRect(e->queue, b, CL_TRUE, origin, origin, region, 0, 0, 0, 0, host, 0, NULL, NULL)));
    const cl_map_flags maps[3] = {CL_MAP_READ, CL_MAP_WRITE, CL_MAP_WRITE_INVALIDATE_REGION};
    for (int i = 0; i < 3; i++) {
        void *p = clEnqueueMapBuffer(e->queue, b, CL_TRUE, maps[i], 0, 16, 0, NULL, NULL, &rc);
        printf(", map %d %s", (int)maps[i], code(rc));
        if (p) CHECK(clEnqueueUnmapMemObject(e->queue, b, p, 0, NULL, NULL));
    }
    unsigned char pattern = 3;
    printf(", fill %s", code(clEnqueueFillBuffer(e->queue, b, &pattern, 1, 0, 16, 0, NULL, NULL)));
    CHECK(clFinish(e->queue));
    printf("\n");
}

int main(void) {
    env_t e = setup(0);
    cl_int rc;
    clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_WRITE_ONLY, 64, NULL, &rc);
    printf("two host flags: %s\n", code(rc));
    const cl_mem_flags hosts[3] = {CL_MEM_HOST_READ_ONLY, CL_MEM_HOST_WRITE_ONLY, CL_MEM_HOST_NO_ACCESS};
    for (int h = 0; h < 3; h++) {
        cl_mem b = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | hosts[h], 64, NULL, &err_));
        buffer_calls(&e, b, name(hosts[h]));
        cl_buffer_region r = {0, 32};
        cl_mem s = CHECKED(clCreateSubBuffer(b, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err_));
        cl_mem_flags f;
        CHECK(clGetMemObjectInfo(s, CL_MEM_FLAGS, sizeof f, &f, NULL));
        printf("  sub-buffer inherits %s: %s\n", name(hosts[h]), (f & hosts[h]) ? "yes" : "no");
        buffer_calls(&e, s, "  sub-buffer");
        const cl_mem_flags wider = hosts[h] == CL_MEM_HOST_READ_ONLY ? CL_MEM_HOST_WRITE_ONLY : CL_MEM_HOST_READ_ONLY;
        clCreateSubBuffer(b, wider, CL_BUFFER_CREATE_TYPE_REGION, &r, &rc);
        printf("  sub-buffer with more host access: %s\n", code(rc));
        CHECK(clReleaseMemObject(s));
        CHECK(clReleaseMemObject(b));
    }

    /* A write-only buffer and image mapped for writing show what the device holds. */
    cl_mem w = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_HOST_WRITE_ONLY, 64, NULL, &err_));
    unsigned char seven = 7;
    CHECK(clEnqueueFillBuffer(e.queue, w, &seven, 1, 0, 64, 0, NULL, NULL));
    unsigned char *p = CHECKED(clEnqueueMapBuffer(e.queue, w, CL_TRUE, CL_MAP_WRITE, 8, 16, 0, NULL, NULL, &err_));
    printf("write-only buffer mapped for writing shows %d %d\n", p[0], p[15]);
    CHECK(clEnqueueUnmapMemObject(e.queue, w, p, 0, NULL, NULL));
    CHECK(clReleaseMemObject(w));

    cl_image_format format = {CL_RGBA, CL_UNSIGNED_INT8};
    cl_image_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.image_type = CL_MEM_OBJECT_IMAGE2D;
    desc.image_width = 8;
    desc.image_height = 4;
    size_t origin[3] = {0, 0, 0}, region[3] = {8, 4, 1}, row_pitch;
    unsigned char pixels[8 * 4 * 4];
    for (int h = 0; h < 3; h++) {
        cl_mem img = CHECKED(clCreateImage(e.context, CL_MEM_READ_WRITE | hosts[h], &format, &desc, NULL, &err_));
        printf("image %s: read %s", name(hosts[h]), code(clEnqueueReadImage(e.queue, img, CL_TRUE, origin, region, 0, 0, pixels, 0, NULL, NULL)));
        printf(", write %s", code(clEnqueueWriteImage(e.queue, img, CL_TRUE, origin, region, 0, 0, pixels, 0, NULL, NULL)));
        /* (Not CL_MAP_WRITE_INVALIDATE_REGION: PoCL 3.1 maps read-only images so.) */
        const cl_map_flags maps[2] = {CL_MAP_READ, CL_MAP_WRITE};
        for (int i = 0; i < 2; i++) {
            void *m = clEnqueueMapImage(e.queue, img, CL_TRUE, maps[i], origin, region, &row_pitch, NULL, 0, NULL, NULL, &rc);
            printf(", map %d %s", (int)maps[i], code(rc));
            if (m) CHECK(clEnqueueUnmapMemObject(e.queue, img, m, 0, NULL, NULL));
        }
        printf("\n");
        if (hosts[h] == CL_MEM_HOST_WRITE_ONLY) {
            cl_uint colour[4] = {1, 2, 3, 4};
            CHECK(clEnqueueFillImage(e.queue, img, colour, origin, region, 0, NULL, NULL));
            unsigned char *m = CHECKED(clEnqueueMapImage(e.queue, img, CL_TRUE, CL_MAP_WRITE, origin, region, &row_pitch, NULL, 0, NULL, NULL, &err_));
            printf("write-only image mapped for writing shows %d %d %d %d\n", m[0], m[1], m[2], m[3 * 4 + row_pitch * 3 + 3]);
            CHECK(clEnqueueUnmapMemObject(e.queue, img, m, 0, NULL, NULL));
        }
        CHECK(clFinish(e.queue));
        CHECK(clReleaseMemObject(img));
    }
    teardown(&e);
    return 0;
}
