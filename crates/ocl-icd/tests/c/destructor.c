/* clSetMemObjectDestructorCallback: the callbacks run once the object is released and
 * what was enqueued on it is done, in the reverse order of their registration, so a
 * callback may free the host memory of a CL_MEM_USE_HOST_PTR buffer (here: only after
 * the map that reads into that memory has its data). */
#include "common.h"

static int order[4], calls;
static cl_event mapped;
static cl_int map_status_at_callback = 99;

static void CL_CALLBACK first(cl_mem m, void *user) {
    (void)m;
    order[calls++] = 1;
    free(user);
}

static void CL_CALLBACK second(cl_mem m, void *user) {
    (void)m;
    (void)user;
    order[calls++] = 2;
    clGetEventInfo(mapped, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof map_status_at_callback,
                   &map_status_at_callback, NULL);
}

int main(void) {
    env_t e = setup(0);
    printf("NULL callback: %s\n",
           clSetMemObjectDestructorCallback((cl_mem)NULL, first, NULL) == CL_INVALID_MEM_OBJECT ? "CL_INVALID_MEM_OBJECT" : "other");
    size_t size = 1 << 20;
    unsigned char *host = malloc(size);
    memset(host, 7, size);
    cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, size, host, &err_));
    printf("no function: %s\n",
           clSetMemObjectDestructorCallback(buf, NULL, NULL) == CL_INVALID_VALUE ? "CL_INVALID_VALUE" : "other");
    CHECK(clSetMemObjectDestructorCallback(buf, first, host));
    CHECK(clSetMemObjectDestructorCallback(buf, second, NULL));
    unsigned char pattern = 9;
    CHECK(clEnqueueFillBuffer(e.queue, buf, &pattern, 1, 0, size, 0, NULL, NULL));
    unsigned char *p = CHECKED(clEnqueueMapBuffer(e.queue, buf, CL_FALSE, CL_MAP_READ, 0, size, 0, NULL, &mapped, &err_));
    CHECK(clEnqueueUnmapMemObject(e.queue, buf, p, 0, NULL, NULL));
    CHECK(clReleaseMemObject(buf));
    CHECK(clFinish(e.queue));
    printf("callbacks after release and finish: %d, order %d %d\n", calls, order[0], order[1]);
    printf("the map was complete when they ran: %s\n", map_status_at_callback == CL_COMPLETE ? "yes" : "no");
    CHECK(clReleaseEvent(mapped));
    teardown(&e);
    return 0;
}
