/* A thread waiting for a user event wakes when another thread sets it, also when
 * nothing else is going on (it used to sleep until some unrelated answer came from the
 * node, which here is never: the program hung). */
#include <pthread.h>
#include <unistd.h>
#include "common.h"

static cl_event gate;

static void *setter(void *arg) {
    (void)arg;
    /* Give the main thread time to start waiting; it must wake either way. */
    usleep(50000);
    CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
    return NULL;
}

int main(void) {
    env_t e = setup(0);
    for (int round = 0; round < 3; round++) {
        gate = CHECKED(clCreateUserEvent(e.context, &err_));
        pthread_t t;
        pthread_create(&t, NULL, setter, NULL);
        cl_int rc = clWaitForEvents(1, &gate);
        pthread_join(t, NULL);
        cl_int st;
        CHECK(clGetEventInfo(gate, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
        printf("round %d: wait %s, status %d\n", round, rc == CL_SUCCESS ? "ok" : "failed", st);
        CHECK(clReleaseEvent(gate));
    }
    teardown(&e);
    return 0;
}
