/* Blocking calls made from inside an event callback: a blocking read, clWaitForEvents
 * on a marker enqueued there and clFinish, on the queue of the event whose callback
 * runs.
 * (Through the node the callback runs on the thread that read the completion, which
 * once held the connection's read half and the task while it ran: every such call
 * waited for itself.) The main thread waits for a user event the callback sets last. */
#include "common.h"

#define N 4096

typedef struct {
    cl_command_queue queue;
    cl_mem buf;
    cl_event done;
    int read_ok, wait_ok, finish_ok;
    unsigned char got[N];
} state_t;

static void CL_CALLBACK on_write(cl_event ev, cl_int status, void *user) {
    (void)ev;
    (void)status;
    state_t *s = user;
    s->read_ok = clEnqueueReadBuffer(s->queue, s->buf, CL_TRUE, 0, N, s->got, 0, NULL, NULL) == CL_SUCCESS;
    cl_event marker;
    CHECK(clEnqueueMarkerWithWaitList(s->queue, 0, NULL, &marker));
    s->wait_ok = clWaitForEvents(1, &marker) == CL_SUCCESS;
    CHECK(clReleaseEvent(marker));
    s->finish_ok = clFinish(s->queue) == CL_SUCCESS;
    CHECK(clSetUserEventStatus(s->done, CL_COMPLETE));
}

int main(void) {
    env_t e = setup(0);
    static state_t s;
    static unsigned char data[N];
    memset(data, 7, N);
    s.queue = e.queue;
    s.buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, N, NULL, &err_));
    s.done = CHECKED(clCreateUserEvent(e.context, &err_));
    cl_event written;
    CHECK(clEnqueueWriteBuffer(e.queue, s.buf, CL_FALSE, 0, N, data, 0, NULL, &written));
    CHECK(clSetEventCallback(written, CL_COMPLETE, on_write, &s));
    CHECK(clFlush(e.queue));
    CHECK(clWaitForEvents(1, &s.done));
    int same = 1;
    for (int i = 0; i < N; i++) same &= s.got[i] == 7;
    printf("from the callback: read %s (%s), wait %s, finish %s\n", s.read_ok ? "ok" : "failed",
           same ? "data right" : "data wrong", s.wait_ok ? "ok" : "failed",
           s.finish_ok ? "ok" : "failed");
    CHECK(clReleaseEvent(written));
    CHECK(clReleaseEvent(s.done));
    CHECK(clReleaseMemObject(s.buf));
    return 0;
}
