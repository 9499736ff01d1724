/* A context's error callback hears of a lost node: the program runs a task, says
 * "ready", waits for a line on stdin (the test cuts its connection meanwhile), then
 * tries more tasks, which must fail without killing the program, and reports what the
 * callback received. */
#include "common.h"

static volatile int called;
static char message[512];

static void CL_CALLBACK notify(const char *errinfo, const void *priv, size_t cb, void *user) {
    (void)priv;
    (void)cb;
    if (user == (void *)&called) {
        snprintf(message, sizeof message, "%s", errinfo);
        called++;
    }
}

int main(void) {
    cl_platform_id platform;
    cl_device_id device;
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    /* A callback without user data is fine; user data without a callback is not. */
    cl_int rc;
    clCreateContext(NULL, 1, &device, NULL, (void *)&called, &rc);
    printf("user data without callback: %s\n", rc == CL_INVALID_VALUE ? "CL_INVALID_VALUE" : "accepted");
    cl_context ctx = CHECKED(clCreateContext(NULL, 1, &device, notify, (void *)&called, &err_));
    cl_command_queue q = CHECKED(clCreateCommandQueue(ctx, device, 0, &err_));
    cl_mem buf = CHECKED(clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &err_));
    char data[64] = {1};
    CHECK(clEnqueueWriteBuffer(q, buf, CL_TRUE, 0, sizeof data, data, 0, NULL, NULL));
    CHECK(clFinish(q));
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    rc = clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof data, data, 0, NULL, NULL);
    cl_int rc2 = clFinish(q);
    printf("after the loss: read %s, finish %s\n", rc == CL_SUCCESS ? "ok" : "failed",
           rc2 == CL_SUCCESS ? "ok" : "failed");
    /* More tasks go to the closed socket: each must fail (its event too), and none may
     * raise SIGPIPE, whose default action would end this program. */
    int failed = 0;
    for (int i = 0; i < 20; i++) {
        cl_event ev;
        if (clEnqueueWriteBuffer(q, buf, CL_FALSE, 0, sizeof data, data, 0, NULL, &ev) != CL_SUCCESS) {
            failed++;
            continue;
        }
        clFlush(q);
        if (clWaitForEvents(1, &ev) != CL_SUCCESS) failed++;
        CHECK(clReleaseEvent(ev));
    }
    printf("writes after the loss: %d of 20 failed\n", failed);
    printf("callback called %d time(s): %s\n", called, message);
    return 0;
}
