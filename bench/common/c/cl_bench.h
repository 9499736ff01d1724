/* What the OpenCL host programs of the benchmarks share: a check that ends the program
 * on an OpenCL error (naming the call), and a monotonic clock in microseconds.
 * Header-only; build with -I bench/common/c. */
#ifndef NETACCEL_CL_BENCH_H
#define NETACCEL_CL_BENCH_H

#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(x)                                                              \
    do {                                                                      \
        cl_int e_ = (x);                                                      \
        if (e_ != CL_SUCCESS) {                                               \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_); \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static inline double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

#endif
