/* Through the node, run with NETACCEL_OPENCL_HELD_BYTES_MAX=1048576: the ICD holds
 * back at most 1 MiB of commands for a user event not set. A write past that fails
 * with CL_OUT_OF_HOST_MEMORY and enqueues nothing (its event is not created); the
 * writes held before it, and a small one after it, run once the event is set. */
#include "common.h"

#define HALF (512 * 1024)

int main(void) {
    env_t e = setup(0);
    unsigned char *zero = calloc(2 * HALF, 1), *ones = malloc(HALF), *twos = malloc(HALF);
    memset(ones, 1, HALF);
    memset(twos, 2, HALF);
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                        2 * HALF, zero, &err_));
    cl_event gate = CHECKED(clCreateUserEvent(e.context, &err_));
    cl_int held = clEnqueueWriteBuffer(e.queue, buf, CL_FALSE, 0, HALF, ones, 1, &gate, NULL);
    cl_event past = NULL;
    cl_int refused = clEnqueueWriteBuffer(e.queue, buf, CL_FALSE, HALF, HALF, twos, 1, &gate, &past);
    cl_int small = clEnqueueWriteBuffer(e.queue, buf, CL_FALSE, HALF, 1000, twos, 0, NULL, NULL);
    printf("held write: %d\nwrite past the bound: %s, event %s\nsmall write behind: %d\n", held,
           refused == CL_OUT_OF_HOST_MEMORY ? "CL_OUT_OF_HOST_MEMORY" : "accepted",
           past == NULL ? "none" : "created", small);
    CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
    CHECK(clFinish(e.queue));
    unsigned char *got = malloc(2 * HALF);
    CHECK(clEnqueueReadBuffer(e.queue, buf, CL_TRUE, 0, 2 * HALF, got, 0, NULL, NULL));
    size_t ones_n = 0, twos_n = 0, zeros_n = 0;
    for (size_t i = 0; i < 2 * HALF; i++) {
        ones_n += got[i] == 1;
        twos_n += got[i] == 2;
        zeros_n += got[i] == 0;
    }
    printf("after the event: %zu ones, %zu twos, %zu zeros\n", ones_n, twos_n, zeros_n);
    CHECK(clReleaseEvent(gate));
    CHECK(clReleaseMemObject(buf));
    free(zero);
    free(ones);
    free(twos);
    free(got);
    return 0;
}
