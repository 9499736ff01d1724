/* Images and samplers: formats, creation from padded host memory, a kernel reading
 * through a sampler argument and writing an image, reads with padded pitches, writes,
 * copies between images and buffers, fills, a 3D image, and the info queries. */
#include "common.h"

static const char *SRC =
    "__kernel void blur(__read_only image2d_t in, __write_only image2d_t out, sampler_t s) {\n"
    "    int2 p = (int2)(get_global_id(0), get_global_id(1));\n"
    "    float4 acc = (float4)(0.0f);\n"
    "    for (int dy = -1; dy <= 1; dy++)\n"
    "        for (int dx = -1; dx <= 1; dx++) acc += read_imagef(in, s, p + (int2)(dx, dy));\n"
    "    write_imagef(out, p, acc / 9.0f);\n"
    "}\n";

enum { W = 37, H = 23 };

static unsigned long long hash_rows(const unsigned char *p, size_t row_len, size_t rows, size_t pitch) {
    unsigned long long h = 0;
    for (size_t y = 0; y < rows; y++) h = h * 31 + fnv1a(p + y * pitch, row_len);
    return h;
}

int main(void) {
    env_t e = setup(0);
    cl_bool images = CL_FALSE;
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_IMAGE_SUPPORT, sizeof images, &images, NULL));
    printf("image support: %d\n", images);
    if (!images) return 0;
    cl_uint n = 0;
    CHECK(clGetSupportedImageFormats(e.context, CL_MEM_READ_WRITE, CL_MEM_OBJECT_IMAGE2D, 0, NULL, &n));
    cl_image_format *formats = malloc(n * sizeof *formats);
    CHECK(clGetSupportedImageFormats(e.context, CL_MEM_READ_WRITE, CL_MEM_OBJECT_IMAGE2D, n, formats, NULL));
    int rgba8 = 0;
    for (cl_uint i = 0; i < n; i++)
        rgba8 |= formats[i].image_channel_order == CL_RGBA && formats[i].image_channel_data_type == CL_UNORM_INT8;
    printf("2D formats: %u, RGBA/UNORM_INT8: %d\n", n, rgba8);

    /* Source image from host memory with a padded row pitch. */
    const size_t pitch = W * 4 + 12;
    unsigned char *host = calloc(H, pitch);
    for (size_t y = 0; y < H; y++)
        for (size_t x = 0; x < W * 4; x++) host[y * pitch + x] = (unsigned char)(x * 7 + y * 13);
    cl_image_format fmt = {CL_RGBA, CL_UNORM_INT8};
    cl_image_desc desc = {0};
    desc.image_type = CL_MEM_OBJECT_IMAGE2D;
    desc.image_width = W;
    desc.image_height = H;
    desc.image_row_pitch = pitch;
    cl_mem in = CHECKED(clCreateImage(e.context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, &fmt, &desc, host, &err_));
    desc.image_row_pitch = 0;
    cl_mem out = CHECKED(clCreateImage(e.context, CL_MEM_READ_WRITE, &fmt, &desc, NULL, &err_));
    cl_sampler s = CHECKED(clCreateSampler(e.context, CL_FALSE, CL_ADDRESS_CLAMP_TO_EDGE, CL_FILTER_NEAREST, &err_));
    cl_kernel k = build(&e, SRC, "blur", NULL);
    CHECK(clSetKernelArg(k, 0, sizeof in, &in));
    CHECK(clSetKernelArg(k, 1, sizeof out, &out));
    CHECK(clSetKernelArg(k, 2, sizeof s, &s));
    size_t global[2] = {W, H};
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 2, NULL, global, NULL, 0, NULL, NULL));
    /* Read back with a padded pitch: only the pixels count. */
    const size_t rp = W * 4 + 20;
    unsigned char *back = calloc(H, rp);
    size_t origin[3] = {0, 0, 0}, region[3] = {W, H, 1};
    CHECK(clEnqueueReadImage(e.queue, out, CL_TRUE, origin, region, rp, 0, back, 0, NULL, NULL));
    printf("blur: %016llx\n", hash_rows(back, W * 4, H, rp));

    /* Write a sub-region, then read the whole image tightly. */
    unsigned char patch[5 * 4 * 3];
    for (size_t i = 0; i < sizeof patch; i++) patch[i] = (unsigned char)(200 + i);
    size_t po[3] = {3, 2, 0}, pr[3] = {5, 3, 1};
    CHECK(clEnqueueWriteImage(e.queue, out, CL_TRUE, po, pr, 0, 0, patch, 0, NULL, NULL));
    unsigned char *tight = malloc(W * H * 4);
    CHECK(clEnqueueReadImage(e.queue, out, CL_TRUE, origin, region, 0, 0, tight, 0, NULL, NULL));
    printf("after write: %016llx\n", fnv1a(tight, W * H * 4));

    /* Image to image, image to buffer, buffer to image. */
    cl_mem copy = CHECKED(clCreateImage(e.context, CL_MEM_READ_WRITE, &fmt, &desc, NULL, &err_));
    float zero[4] = {0, 0, 0, 0};
    CHECK(clEnqueueFillImage(e.queue, copy, zero, origin, region, 0, NULL, NULL));
    size_t so[3] = {1, 1, 0}, dof[3] = {10, 4, 0}, cr[3] = {20, 15, 1};
    CHECK(clEnqueueCopyImage(e.queue, in, copy, so, dof, cr, 0, NULL, NULL));
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, W * H * 4 + 64, NULL, &err_));
    CHECK(clEnqueueCopyImageToBuffer(e.queue, copy, buf, origin, region, 64, 0, NULL, NULL));
    unsigned char *bytes = malloc(W * H * 4);
    CHECK(clEnqueueReadBuffer(e.queue, buf, CL_TRUE, 64, W * H * 4, bytes, 0, NULL, NULL));
    printf("copy via buffer: %016llx\n", fnv1a(bytes, W * H * 4));
    float red[4] = {1.0f, 0.0f, 0.0f, 1.0f};
    size_t fo[3] = {30, 20, 0}, fr[3] = {7, 3, 1};
    CHECK(clEnqueueFillImage(e.queue, copy, red, fo, fr, 0, NULL, NULL));
    CHECK(clEnqueueCopyBufferToImage(e.queue, buf, out, 64, origin, region, 0, NULL, NULL));
    cl_event done;
    CHECK(clEnqueueReadImage(e.queue, copy, CL_FALSE, origin, region, 0, 0, tight, 0, NULL, &done));
    CHECK(clWaitForEvents(1, &done));
    printf("fill: %016llx\n", fnv1a(tight, W * H * 4));
    CHECK(clEnqueueReadImage(e.queue, out, CL_TRUE, origin, region, 0, 0, tight, 0, NULL, NULL));
    printf("buffer to image: %d\n", memcmp(tight, bytes, W * H * 4) == 0);

    /* A 3D image of floats, read back as a box with padded row and slice pitches. */
    cl_image_format ffmt = {CL_R, CL_FLOAT};
    cl_image_desc d3 = {0};
    d3.image_type = CL_MEM_OBJECT_IMAGE3D;
    d3.image_width = 8;
    d3.image_height = 6;
    d3.image_depth = 4;
    float vol[4][6][8];
    for (int z = 0; z < 4; z++)
        for (int y = 0; y < 6; y++)
            for (int x = 0; x < 8; x++) vol[z][y][x] = z * 100 + y * 10 + x;
    cl_mem v = CHECKED(clCreateImage(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, &ffmt, &d3, vol, &err_));
    float box[3][4][6];
    memset(box, 0, sizeof box);
    size_t bo[3] = {2, 1, 1}, br[3] = {5, 3, 2};
    CHECK(clEnqueueReadImage(e.queue, v, CL_TRUE, bo, br, 6 * sizeof(float), 4 * 6 * sizeof(float), box, 0, NULL, NULL));
    printf("3D box:");
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 3; y++) printf(" %g..%g", box[z][y][0], box[z][y][4]);
    printf("\n");

    /* Map a region for reading, then one for writing (whole region replaced). The
     * pitches the runtime returns may differ; the program must use them. */
    size_t mo[3] = {4, 3, 0}, mr[3] = {6, 5, 1}, mrow = 0;
    unsigned char *mp = clEnqueueMapImage(e.queue, copy, CL_TRUE, CL_MAP_READ, mo, mr, &mrow, NULL, 0, NULL, NULL, &err_);
    CHECK(err_);
    printf("mapped for reading: %016llx\n", hash_rows(mp, 6 * 4, 5, mrow));
    CHECK(clEnqueueUnmapMemObject(e.queue, copy, mp, 0, NULL, NULL));
    mp = clEnqueueMapImage(e.queue, copy, CL_TRUE, CL_MAP_WRITE_INVALIDATE_REGION, mo, mr, &mrow, NULL, 0, NULL, NULL, &err_);
    CHECK(err_);
    for (size_t y = 0; y < 5; y++)
        for (size_t x = 0; x < 6 * 4; x++) mp[y * mrow + x] = (unsigned char)(x + 40 * y);
    CHECK(clEnqueueUnmapMemObject(e.queue, copy, mp, 0, NULL, NULL));
    CHECK(clEnqueueReadImage(e.queue, copy, CL_TRUE, origin, region, 0, 0, tight, 0, NULL, NULL));
    printf("after a mapped write: %016llx\n", fnv1a(tight, W * H * 4));

    /* Info. */
    size_t w = 0, h = 0, dep = 0, es = 0;
    cl_image_format got;
    CHECK(clGetImageInfo(v, CL_IMAGE_WIDTH, sizeof w, &w, NULL));
    CHECK(clGetImageInfo(v, CL_IMAGE_HEIGHT, sizeof h, &h, NULL));
    CHECK(clGetImageInfo(v, CL_IMAGE_DEPTH, sizeof dep, &dep, NULL));
    CHECK(clGetImageInfo(v, CL_IMAGE_ELEMENT_SIZE, sizeof es, &es, NULL));
    CHECK(clGetImageInfo(v, CL_IMAGE_FORMAT, sizeof got, &got, NULL));
    cl_mem_object_type t;
    CHECK(clGetMemObjectInfo(v, CL_MEM_TYPE, sizeof t, &t, NULL));
    printf("3D info: %zux%zux%zu, element %zu, format %x/%x, type %x\n", w, h, dep, es,
           got.image_channel_order, got.image_channel_data_type, t);
    cl_uint addressing, filter, refs;
    cl_bool normalized;
    CHECK(clGetSamplerInfo(s, CL_SAMPLER_ADDRESSING_MODE, sizeof addressing, &addressing, NULL));
    CHECK(clGetSamplerInfo(s, CL_SAMPLER_FILTER_MODE, sizeof filter, &filter, NULL));
    CHECK(clGetSamplerInfo(s, CL_SAMPLER_NORMALIZED_COORDS, sizeof normalized, &normalized, NULL));
    CHECK(clGetSamplerInfo(s, CL_SAMPLER_REFERENCE_COUNT, sizeof refs, &refs, NULL));
    printf("sampler: addressing %x, filter %x, normalized %d, references %u\n", addressing, filter, normalized, refs);
    /* A read outside the image is refused. */
    size_t bad[3] = {W, 1, 1};
    printf("read past the edge: %d\n", clEnqueueReadImage(e.queue, out, CL_TRUE, so, bad, 0, 0, tight, 0, NULL, NULL));

    CHECK(clReleaseEvent(done));
    CHECK(clReleaseSampler(s));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(in));
    CHECK(clReleaseMemObject(out));
    CHECK(clReleaseMemObject(copy));
    CHECK(clReleaseMemObject(buf));
    CHECK(clReleaseMemObject(v));
    teardown(&e);
    free(formats);
    free(host);
    free(back);
    free(tight);
    free(bytes);
    return 0;
}
