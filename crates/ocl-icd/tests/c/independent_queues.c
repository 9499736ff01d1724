/* A command waiting for a user event that is not set holds back only what depends on it.
 * Queue A has a kernel waiting for the event; meanwhile a write, a kernel and a blocking
 * read on queue B (same context), and clFinish(B), complete, on the same thread that sets
 * the event only afterwards. Through the node the event used to hold back every command
 * of the connection, so the blocking read waited forever for an event that only this
 * thread could set. Then the same with the event set to an error, and on one
 * out-of-order queue. Bounded by an alarm, so a hang fails fast. */
#include "common.h"
#include <unistd.h>

static const char *SRC = "__kernel void add(__global int *v, int x) { v[get_global_id(0)] += x; }\n";

enum { N = 16 };

static cl_mem make_buffer(env_t *e, int value) {
    int host[N];
    for (int i = 0; i < N; i++) host[i] = value + i;
    return CHECKED(clCreateBuffer(e->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host,
                                  host, &err_));
}

static void enqueue_add(cl_command_queue q, cl_kernel k, cl_mem buf, int x, cl_uint n_wait,
                        const cl_event *wait, cl_event *event) {
    size_t global = N;
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    CHECK(clSetKernelArg(k, 1, sizeof x, &x));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, n_wait, wait, event));
}

static const char *state(cl_event e) {
    cl_int st;
    CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
    return st < 0 ? "failed" : st == CL_COMPLETE ? "complete" : "not complete";
}

/* Write + kernel + read on `q`, which do not depend on the held commands (each waits for
 * the one before, for out-of-order queues). The read blocks, or with `wait_for_event`, is
 * waited for with clWaitForEvents: PoCL's blocking read waits for the whole queue (as a
 * clFinish), also on an out-of-order queue, where the specification asks only for the
 * read. */
static void independent_work(env_t *e, cl_command_queue q, cl_kernel k, const char *what,
                             int wait_for_event) {
    int in[N], out[N] = {0};
    for (int i = 0; i < N; i++) in[i] = 100 * i;
    cl_mem b = CHECKED(clCreateBuffer(e->context, CL_MEM_READ_WRITE, sizeof in, NULL, &err_));
    cl_event written, added;
    CHECK(clEnqueueWriteBuffer(q, b, CL_FALSE, 0, sizeof in, in, 0, NULL, &written));
    enqueue_add(q, k, b, 7, 1, &written, &added);
    cl_event read;
    CHECK(clEnqueueReadBuffer(q, b, wait_for_event ? CL_FALSE : CL_TRUE, 0, sizeof out, out, 1,
                              &added, &read));
    if (wait_for_event) CHECK(clWaitForEvents(1, &read));
    CHECK(clReleaseEvent(read));
    printf("%s: read returned %d %d %d\n", what, out[0], out[1], out[N - 1]);
    CHECK(clReleaseEvent(written));
    CHECK(clReleaseEvent(added));
    CHECK(clReleaseMemObject(b));
}

static void two_queues(env_t *e, cl_kernel k, cl_int gate_status) {
    const char *how = gate_status == CL_COMPLETE ? "set" : "set to an error";
    cl_command_queue b = CHECKED(clCreateCommandQueue(e->context, e->device, 0, &err_));
    cl_command_queue c = CHECKED(clCreateCommandQueue(e->context, e->device, 0, &err_));
    cl_mem held_buf = make_buffer(e, 1), follower_buf = make_buffer(e, 1);
    cl_event gate = CHECKED(clCreateUserEvent(e->context, &err_));
    cl_event held, follower;
    /* Queue A: a kernel waiting for the gate; queue C: a copy waiting for that kernel
     * (held through the other queue). */
    enqueue_add(e->queue, k, held_buf, 1000, 1, &gate, &held);
    CHECK(clEnqueueCopyBuffer(c, held_buf, follower_buf, 0, 0, N * sizeof(int), 1, &held, &follower));
    CHECK(clFlush(e->queue));
    CHECK(clFlush(c));
    independent_work(e, b, k, "queue B while A waits", 0);
    CHECK(clFinish(b));
    printf("clFinish(B) returned; A's kernel: %s, C's copy: %s\n", state(held), state(follower));
    CHECK(clSetUserEventStatus(gate, gate_status));
    cl_int rc = clWaitForEvents(1, &follower);
    printf("gate %s: waiting for C's copy: %s\n", how, rc == CL_SUCCESS ? "success" : "an error");
    CHECK(clFinish(e->queue));
    CHECK(clFinish(c));
    printf("gate %s: A's kernel %s, C's copy %s\n", how, state(held), state(follower));
    int out[N];
    CHECK(clEnqueueReadBuffer(b, follower_buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    printf("gate %s: C's copy holds %d %d\n", how, out[0], out[N - 1]);
    CHECK(clEnqueueReadBuffer(b, held_buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    printf("gate %s: A's buffer holds %d %d\n", how, out[0], out[N - 1]);
    CHECK(clReleaseEvent(held));
    CHECK(clReleaseEvent(follower));
    CHECK(clReleaseEvent(gate));
    CHECK(clReleaseMemObject(held_buf));
    CHECK(clReleaseMemObject(follower_buf));
    CHECK(clReleaseCommandQueue(b));
    CHECK(clReleaseCommandQueue(c));
}

/* One out-of-order queue: a kernel waits for the gate, a barrier after it waits for it
 * too, and work enqueued before the barrier that waits for nothing runs at once. */
static void out_of_order(env_t *e, cl_kernel k) {
    cl_command_queue q = CHECKED(
        clCreateCommandQueue(e->context, e->device, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err_));
    cl_mem held_buf = make_buffer(e, 1);
    cl_event gate = CHECKED(clCreateUserEvent(e->context, &err_));
    cl_event held, barrier;
    enqueue_add(q, k, held_buf, 1000, 1, &gate, &held);
    independent_work(e, q, k, "out-of-order queue while a kernel on it waits", 1);
    CHECK(clEnqueueBarrierWithWaitList(q, 0, NULL, &barrier));
    /* After the barrier: runs after the held kernel. */
    enqueue_add(q, k, held_buf, 1, 0, NULL, NULL);
    CHECK(clFlush(q));
    printf("out-of-order: held kernel %s, barrier %s\n", state(held), state(barrier));
    CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
    CHECK(clFinish(q));
    int out[N];
    CHECK(clEnqueueReadBuffer(q, held_buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    printf("out-of-order: held kernel %s, barrier %s, buffer %d %d\n", state(held), state(barrier),
           out[0], out[N - 1]);
    CHECK(clReleaseEvent(held));
    CHECK(clReleaseEvent(barrier));
    CHECK(clReleaseEvent(gate));
    CHECK(clReleaseMemObject(held_buf));
    CHECK(clReleaseCommandQueue(q));
}

static void CL_CALLBACK open_gate(cl_event done, cl_int status, void *gate) {
    (void)done;
    (void)status;
    CHECK(clSetUserEventStatus((cl_event)gate, CL_COMPLETE));
}

/* The user event is set by the completion callback of a read on another queue: the
 * held kernel runs once the callback has run. (Through the node the callback of a
 * shared-memory read, a task no later one may overtake, once waited for that very task
 * to end before it could send the released kernel.) */
static void set_from_a_callback(env_t *e, cl_kernel k) {
    cl_command_queue b = CHECKED(clCreateCommandQueue(e->context, e->device, 0, &err_));
    cl_mem held_buf = make_buffer(e, 1), other = make_buffer(e, 5);
    cl_event gate = CHECKED(clCreateUserEvent(e->context, &err_));
    cl_event held, read;
    int seen[N], out[N];
    enqueue_add(e->queue, k, held_buf, 1000, 1, &gate, &held);
    CHECK(clEnqueueReadBuffer(b, other, CL_FALSE, 0, sizeof seen, seen, 0, NULL, &read));
    CHECK(clSetEventCallback(read, CL_COMPLETE, open_gate, gate));
    CHECK(clFlush(b));
    CHECK(clWaitForEvents(1, &held));
    CHECK(clEnqueueReadBuffer(e->queue, held_buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    printf("gate set by a read's callback: read %d %d, held kernel %s, buffer %d %d\n", seen[0],
           seen[N - 1], state(held), out[0], out[N - 1]);
    CHECK(clReleaseEvent(held));
    CHECK(clReleaseEvent(read));
    CHECK(clReleaseEvent(gate));
    CHECK(clReleaseMemObject(held_buf));
    CHECK(clReleaseMemObject(other));
    CHECK(clReleaseCommandQueue(b));
}

int main(void) {
    alarm(60);
    env_t e = setup(0);
    cl_kernel k = build(&e, SRC, "add", NULL);
    two_queues(&e, k, CL_COMPLETE);
    two_queues(&e, k, -1);
    out_of_order(&e, k);
    set_from_a_callback(&e, k);
    CHECK(clReleaseKernel(k));
    teardown(&e);
    return 0;
}
