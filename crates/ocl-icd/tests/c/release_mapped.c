/* A memory object released while its map is still on the way: the ICD keeps the memory
 * the map's data goes to until the data has arrived (it used to free it at once and
 * receive the data into freed memory: heap corruption, or a crash). */
#include "common.h"

int main(void) {
    env_t e = setup(0);
    const size_t w = 1024, h = 1024;
    for (int round = 0; round < 4; round++) {
        cl_image_format format = {CL_RGBA, CL_UNSIGNED_INT8};
        cl_image_desc desc;
        memset(&desc, 0, sizeof desc);
        desc.image_type = CL_MEM_OBJECT_IMAGE2D;
        desc.image_width = w;
        desc.image_height = h;
        cl_mem img = CHECKED(clCreateImage(e.context, CL_MEM_READ_WRITE, &format, &desc, NULL, &err_));
        cl_uint colour[4] = {1, 2, 3, 4};
        size_t origin[3] = {0, 0, 0}, region[3] = {w, h, 1};
        CHECK(clEnqueueFillImage(e.queue, img, colour, origin, region, 0, NULL, NULL));
        size_t row_pitch;
        cl_event mapped;
        void *p = CHECKED(clEnqueueMapImage(e.queue, img, CL_FALSE, CL_MAP_READ, origin, region,
                                            &row_pitch, NULL, 0, NULL, &mapped, &err_));
        (void)p;
        CHECK(clReleaseMemObject(img));
        cl_int rc = clWaitForEvents(1, &mapped);
        CHECK(clReleaseEvent(mapped));

        cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, w * h * 4, NULL, &err_));
        cl_uint pattern = 0x01020304;
        CHECK(clEnqueueFillBuffer(e.queue, buf, &pattern, sizeof pattern, 0, w * h * 4, 0, NULL, NULL));
        void *q = CHECKED(clEnqueueMapBuffer(e.queue, buf, CL_FALSE, CL_MAP_READ, 0, w * h * 4, 0, NULL,
                                             &mapped, &err_));
        (void)q;
        CHECK(clReleaseMemObject(buf));
        cl_int rc2 = clWaitForEvents(1, &mapped);
        CHECK(clReleaseEvent(mapped));
        /* Allocations after the maps' data arrived: a corrupted heap shows here. */
        void *blocks[64];
        for (int i = 0; i < 64; i++) blocks[i] = malloc(4096 + i * 64);
        for (int i = 0; i < 64; i++) free(blocks[i]);
        printf("round %d: image map %s, buffer map %s\n", round, rc == CL_SUCCESS ? "ok" : "failed",
               rc2 == CL_SUCCESS ? "ok" : "failed");
    }
    CHECK(clFinish(e.queue));
    teardown(&e);
    return 0;
}
