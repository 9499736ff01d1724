/* Maps for writing of objects the host may not read (CL_MEM_HOST_WRITE_ONLY) on an
 * out-of-order queue. The mapping must show the contents left by the command it waits
 * for. Through the node (when the mapping is not the shared memory itself) such a map
 * is a copy into a scratch buffer and reads of that: only the copy waiting for the map's
 * wait list, and the reads for the copy, order them on an out-of-order queue. The
 * command waited for is slow (one work item looping), so a lost dependency shows as a
 * wrong value. */
#include "common.h"

static const char *SRC =
    "__kernel void slow_set(__global int *v, int n, int value) {\n"
    "    float a = 0.0f;\n"
    "    for (int i = 0; i < n; i++) a = a * 0.999f + 1.0f;\n"
    "    v[0] = value + (a < 0.0f);\n"
    "    v[1] = value + 1;\n"
    "}\n";

int main(void) {
    env_t e = setup(CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
    cl_kernel slow = build(&e, SRC, "slow_set", "");
    size_t one = 1;
    int rounds = 4000000;
    CHECK(clSetKernelArg(slow, 1, sizeof rounds, &rounds));
    int image_ok = 1;
    cl_image_format fmt = {CL_R, CL_SIGNED_INT32};
    for (int round = 0; round < 3; round++) {
        /* A blocking map with an event of the application's, then a non-blocking one
         * without (the copy then has an id of its own), both waiting for the kernel. */
        for (int with_event = 1; with_event >= 0; with_event--) {
            int value = 100 * round + 10 * with_event + 1;
            cl_mem w = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_HOST_WRITE_ONLY,
                                              4 * sizeof(int), NULL, &err_));
            CHECK(clSetKernelArg(slow, 0, sizeof w, &w));
            CHECK(clSetKernelArg(slow, 2, sizeof value, &value));
            cl_event set, mapped;
            CHECK(clEnqueueNDRangeKernel(e.queue, slow, 1, NULL, &one, &one, 0, NULL, &set));
            int *p;
            if (with_event) {
                p = CHECKED(clEnqueueMapBuffer(e.queue, w, CL_TRUE, CL_MAP_WRITE, 0, 4 * sizeof(int), 1,
                                               &set, &mapped, &err_));
                CHECK(clReleaseEvent(mapped));
            } else {
                p = CHECKED(clEnqueueMapBuffer(e.queue, w, CL_FALSE, CL_MAP_WRITE, 0, 4 * sizeof(int), 1,
                                               &set, NULL, &err_));
                CHECK(clFinish(e.queue));
            }
            printf("round %d, map %s an event: %d %d (expected %d %d)\n", round,
                   with_event ? "with" : "without", p[0], p[1], value, value + 1);
            CHECK(clEnqueueUnmapMemObject(e.queue, w, p, 0, NULL, NULL));
            CHECK(clFinish(e.queue));
            CHECK(clReleaseEvent(set));
            CHECK(clReleaseMemObject(w));
        }
        /* The same for an image the kernel's result is copied into. */
        {
            int value = 100 * round + 50;
            cl_mem w = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, 4 * sizeof(int), NULL, &err_));
            cl_image_desc desc = {0};
            desc.image_type = CL_MEM_OBJECT_IMAGE2D;
            desc.image_width = 2;
            desc.image_height = 1;
            cl_mem img = CHECKED(clCreateImage(e.context, CL_MEM_READ_WRITE | CL_MEM_HOST_WRITE_ONLY, &fmt,
                                               &desc, NULL, &err_));
            CHECK(clSetKernelArg(slow, 0, sizeof w, &w));
            CHECK(clSetKernelArg(slow, 2, sizeof value, &value));
            cl_event set, copied;
            size_t origin[3] = {0, 0, 0}, region[3] = {2, 1, 1}, pitch = 0;
            CHECK(clEnqueueNDRangeKernel(e.queue, slow, 1, NULL, &one, &one, 0, NULL, &set));
            CHECK(clEnqueueCopyBufferToImage(e.queue, w, img, 0, origin, region, 1, &set, &copied));
            int *p = CHECKED(clEnqueueMapImage(e.queue, img, CL_TRUE, CL_MAP_WRITE, origin, region, &pitch,
                                               NULL, 1, &copied, NULL, &err_));
            if (p[0] != value || p[1] != value + 1) image_ok = 0;
            CHECK(clEnqueueUnmapMemObject(e.queue, img, p, 0, NULL, NULL));
            CHECK(clFinish(e.queue));
            CHECK(clReleaseEvent(set));
            CHECK(clReleaseEvent(copied));
            CHECK(clReleaseMemObject(img));
            CHECK(clReleaseMemObject(w));
        }
    }
    printf("image maps show the copied values: %s\n", image_ok ? "yes" : "no");
    CHECK(clReleaseKernel(slow));
    teardown(&e);
    return 0;
}
