#define _POSIX_C_SOURCE 199309L
/* The C client's bench program (netaccel.h): 64-byte echo calls on one connection,
 * one at a time (p50), then --inflight at a time with submit/poll (calls/s); one JSON
 * line, as bench/clients/run.sh reads it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <netaccel.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *node = NULL;
    double seconds = 2;
    size_t size = 64;
    unsigned inflight = 32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--node")) node = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--size")) size = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--inflight")) inflight = (unsigned)atoi(argv[i + 1]);
    }
    netaccel_error err;
    netaccel_options opts = {0};
    opts.in_flight_max = inflight;
    netaccel_client *c = node ? netaccel_connect(node, &opts, &err) : NULL;
    if (!c) return fprintf(stderr, "connect: %s\n", node ? err.message : "give --node"), 1;
    uint8_t *payload = malloc(size);
    memset(payload, 'x', size);
    size_t cap = 1 << 20, n = 0;
    double *lat = malloc(cap * sizeof *lat);
    double start = now_s();
    while (now_s() - start < seconds && n < cap) {
        netaccel_buffer out;
        double t = now_s();
        if (netaccel_call(c, "echo", NULL, payload, size, 0, &out, &err)) return fprintf(stderr, "%s\n", err.message), 1;
        lat[n++] = now_s() - t;
        netaccel_buffer_free(&out);
    }
    qsort(lat, n, sizeof *lat, cmp);
    double p50_us = lat[n / 2] * 1e6;
    unsigned long done = 0;
    uint64_t ticket;
    start = now_s();
    for (;;) {
        while (netaccel_in_flight(c) < inflight && now_s() - start < seconds)
            if (netaccel_submit(c, "echo", NULL, payload, size, 0, &ticket, &err)) return fprintf(stderr, "%s\n", err.message), 1;
        netaccel_buffer out;
        int kind = netaccel_poll(c, -1, &ticket, &out, &err);
        if (kind == NETACCEL_NONE) break;
        if (kind != NETACCEL_OK) return fprintf(stderr, "%s\n", err.message), 1;
        netaccel_buffer_free(&out);
        done++;
    }
    double rate = done / (now_s() - start);
    printf("{\"client\":\"c\",\"sync_p50_us\":%.2f,\"sync_calls\":%zu,\"pipelined_calls_per_s\":%.0f}\n", p50_us, n, rate);
    netaccel_close(c);
    return 0;
}
