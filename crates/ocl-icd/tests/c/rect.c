/* Rectangular reads, writes and copies (2-D and 3-D regions, explicit and default
 * pitches), checked against a host model of the same operations. */
#include "common.h"

#define W 80
#define H 48
#define D 3

static unsigned char model[D][H][W];

int main(void) {
    env_t e = setup(0);
    unsigned char init[D * H * W];
    for (size_t i = 0; i < sizeof init; i++) init[i] = (unsigned char)(i * 7 + 3);
    memcpy(model, init, sizeof init);
    cl_mem a = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof init, init, &err_));
    cl_mem b = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, sizeof init, NULL, &err_));
    unsigned char zero = 0;
    CHECK(clEnqueueFillBuffer(e.queue, b, &zero, 1, 0, sizeof init, 0, NULL, NULL));

    /* Read a 16x8 rectangle at (5, 3) of slice 1 into a host array with pitch 20. */
    unsigned char host[8][20];
    memset(host, 0xee, sizeof host);
    size_t bo[3] = {5, 3, 1}, ho[3] = {2, 0, 0}, r[3] = {16, 8, 1};
    CHECK(clEnqueueReadBufferRect(e.queue, a, CL_TRUE, bo, ho, r, W, W * H, 20, 0, host, 0, NULL, NULL));
    int bad = 0;
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 16; x++)
            if (host[y][x + 2] != model[1][3 + y][5 + x]) bad++;
    printf("read rect mismatches: %d, untouched byte: %02x\n", bad, host[0][0]);

    /* Write a 10x4x2 block with default host pitches at (60, 40, 1). */
    unsigned char block[2][4][10];
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 10; x++) {
                block[z][y][x] = (unsigned char)(200 + z * 40 + y * 10 + x);
                model[1 + z][40 + y][60 + x] = block[z][y][x];
            }
    size_t wo[3] = {60, 40, 1}, zo[3] = {0, 0, 0}, wr[3] = {10, 4, 2};
    CHECK(clEnqueueWriteBufferRect(e.queue, a, CL_FALSE, wo, zo, wr, W, W * H, 0, 0, block, 0, NULL, NULL));

    /* Copy a 30x20 rectangle of slice 2 of a to (0, 0) of slice 0 of b. */
    size_t so[3] = {50, 28, 2}, dd[3] = {0, 0, 0}, cr[3] = {30, 20, 1};
    cl_event ev;
    CHECK(clEnqueueCopyBufferRect(e.queue, a, b, so, dd, cr, W, W * H, W, W * H, 0, NULL, &ev));
    CHECK(clWaitForEvents(1, &ev));
    cl_command_type type;
    CHECK(clGetEventInfo(ev, CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL));
    printf("copy event type is COPY_BUFFER_RECT: %s\n", type == CL_COMMAND_COPY_BUFFER_RECT ? "yes" : "no");
    CHECK(clReleaseEvent(ev));

    unsigned char out_a[D * H * W], out_b[D * H * W];
    CHECK(clEnqueueReadBuffer(e.queue, a, CL_TRUE, 0, sizeof out_a, out_a, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(e.queue, b, CL_TRUE, 0, sizeof out_b, out_b, 0, NULL, NULL));
    printf("buffer a matches the model: %s\n", memcmp(out_a, model, sizeof out_a) == 0 ? "yes" : "no");
    bad = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            unsigned char want = (x < 30 && y < 20) ? model[2][28 + y][50 + x] : 0;
            if (out_b[y * W + x] != want) bad++;
        }
    printf("copy rect mismatches: %d\n", bad);
    printf("out-of-range rect: %d\n",
           clEnqueueReadBufferRect(e.queue, a, CL_TRUE, (size_t[3]){60, 40, 2}, zo, (size_t[3]){W, 10, 1}, W, W * H, 0, 0,
                                   out_b, 0, NULL, NULL));
    printf("digest: %016llx %016llx\n", fnv1a(out_a, sizeof out_a), fnv1a(out_b, sizeof out_b));
    CHECK(clReleaseMemObject(a));
    CHECK(clReleaseMemObject(b));
    teardown(&e);
    return 0;
}
