/* Maps of images created with CL_MEM_USE_HOST_PTR are the application's memory, as
 * natively: the pointer lies in the host memory at the region's origin, with its row
 * and slice pitches, and shows (and writes back) the image's contents. */
#include "common.h"

int main(void) {
    env_t e = setup(0);
    const size_t w = 16, h = 8, d = 3, pitch = w * 4 + 32, slice = pitch * (h + 1);
    unsigned char *host = calloc(slice * d, 1);
    cl_image_format format = {CL_RGBA, CL_UNSIGNED_INT8};
    cl_image_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.image_type = CL_MEM_OBJECT_IMAGE3D;
    desc.image_width = w;
    desc.image_height = h;
    desc.image_depth = d;
    desc.image_row_pitch = pitch;
    desc.image_slice_pitch = slice;
    cl_mem img = CHECKED(clCreateImage(e.context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, &format, &desc, host, &err_));
    cl_uint colour[4] = {10, 20, 30, 40};
    size_t all[3] = {w, h, d}, zero[3] = {0, 0, 0};
    CHECK(clEnqueueFillImage(e.queue, img, colour, zero, all, 0, NULL, NULL));
    size_t origin[3] = {2, 1, 1}, region[3] = {4, 3, 2}, row_pitch, slice_pitch;
    unsigned char *p = CHECKED(clEnqueueMapImage(e.queue, img, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, origin, region,
                                                 &row_pitch, &slice_pitch, 0, NULL, NULL, &err_));
    printf("mapped at the origin in host memory: %s\n", p == host + 1 * slice + 1 * pitch + 2 * 4 ? "yes" : "no");
    printf("pitches are the host's: %s\n", row_pitch == pitch && slice_pitch == slice ? "yes" : "no");
    printf("contents: %d %d %d %d\n", p[0], p[1], p[2], p[row_pitch * 2 + slice_pitch + 3 * 4 + 3]);
    for (size_t z = 0; z < region[2]; z++)
        for (size_t y = 0; y < region[1]; y++)
            for (size_t x = 0; x < region[0] * 4; x++) p[z * slice_pitch + y * row_pitch + x] = (unsigned char)(x + y + z);
    CHECK(clEnqueueUnmapMemObject(e.queue, img, p, 0, NULL, NULL));
    unsigned char back[4 * 3 * 2 * 4];
    CHECK(clEnqueueReadImage(e.queue, img, CL_TRUE, origin, region, 0, 0, back, 0, NULL, NULL));
    printf("written through the map: %d %d %d\n", back[0], back[5], back[sizeof back - 1]);
    unsigned char corner[4];
    size_t one[3] = {1, 1, 1};
    CHECK(clEnqueueReadImage(e.queue, img, CL_TRUE, zero, one, 0, 0, corner, 0, NULL, NULL));
    printf("outside the region: %d %d %d %d\n", corner[0], corner[1], corner[2], corner[3]);
    CHECK(clReleaseMemObject(img));
    free(host);
    teardown(&e);
    return 0;
}
