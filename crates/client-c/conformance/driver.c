/* The conformance driver of the C client (netaccel.h): runs one case, given on stdin
 * as clients/conformance/flatten.py prints it, and prints one JSON line of what it
 * observed (clients/conformance/README.md). The connection flags are the suite's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netaccel.h"

#define CALLS_MAX 64
#define LINE_MAX_BYTES (64u << 20)

struct call {
    char accelerator[64];
    int by_id;
    unsigned id;
    unsigned deadline_us;
    char params[256];
    uint8_t *payload;
    size_t len;
};

static struct call calls[CALLS_MAX];
static int ncalls;
static char mode[16] = "sync", function[128];
static char *outputs[CALLS_MAX];
static netaccel_error errors[CALLS_MAX];
static int failed[CALLS_MAX], order[CALLS_MAX], norder;

static uint8_t *unhex(const char *s, size_t *len) {
    size_t n = strlen(s) / 2;
    uint8_t *b = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) sscanf(s + 2 * i, "%2hhx", &b[i]);
    *len = n;
    return b;
}

static char *tohex(const uint8_t *b, size_t n) {
    char *s = malloc(2 * n + 1);
    for (size_t i = 0; i < n; i++) sprintf(s + 2 * i, "%02x", b[i]);
    s[2 * n] = 0;
    return s;
}

static void read_case(void) {
    char *line = malloc(LINE_MAX_BYTES);
    while (fgets(line, LINE_MAX_BYTES, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "mode ", 5)) snprintf(mode, sizeof mode, "%s", line + 5);
        else if (!strncmp(line, "function ", 9)) snprintf(function, sizeof function, "%s", line + 9);
        else if (!strncmp(line, "call ", 5) && ncalls < CALLS_MAX) {
            struct call *c = &calls[ncalls++];
            char *payload = malloc(strlen(line));
            sscanf(line + 5, "%63s %u %255s %s", c->accelerator, &c->deadline_us, c->params, payload);
            if (c->accelerator[0] == '#') { c->by_id = 1; c->id = (unsigned)atoi(c->accelerator + 1); }
            if (!strcmp(c->params, "-")) c->params[0] = 0;
            c->payload = strcmp(payload, "-") ? unhex(payload, &c->len) : unhex("", &c->len);
            free(payload);
        }
    }
    free(line);
}

static void take(int i, int kind, netaccel_buffer *out, const netaccel_error *err) {
    order[norder++] = i;
    if (kind == NETACCEL_OK) {
        outputs[i] = tohex(out->data, out->len);
        netaccel_buffer_free(out);
    } else {
        failed[i] = 1;
        errors[i] = *err;
    }
}

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static void print_report(void) {
    int first = -1;
    for (int i = 0; i < ncalls && first < 0; i++) if (failed[i]) first = i;
    printf("{\"ok\":%s,\"outputs\":[", first < 0 ? "true" : "false");
    for (int i = 0; i < ncalls; i++) {
        if (i) putchar(',');
        if (outputs[i]) printf("\"%s\"", outputs[i]); else printf("null");
    }
    printf("],\"order\":[");
    for (int i = 0; i < norder; i++) printf(i ? ",%d" : "%d", order[i]);
    putchar(']');
    if (first >= 0) {
        netaccel_error *e = &errors[first];
        printf(",\"error\":{\"kind\":\"%s\",\"call\":%d,\"retryable\":%s", netaccel_kind_name(e->kind), first,
               e->retry_after_ms ? "true" : "false");
        if (e->status != 0xFFFF) {
            static const char *names[] = {"OK", "BAD_REQUEST", "UNKNOWN_ACCELERATOR", "BUSY", "TOO_LARGE",
                                          "DEADLINE_EXCEEDED", "UNAVAILABLE", "UNAUTHORIZED", "INTERNAL",
                                          "PROTOCOL_ERROR"};
            if (e->status < 10) printf(",\"status\":\"%s\"", names[e->status]);
        }
        if (e->retry_after_ms) printf(",\"retry_after_ms\":%u", e->retry_after_ms);
        printf(",\"message\":");
        json_string(e->message);
        putchar('}');
    }
    printf("}\n");
}

static void run_node(const char *node, const netaccel_options *opts) {
    netaccel_error err;
    netaccel_client *c = netaccel_connect(node, opts, &err);
    if (!c) { failed[0] = 1; errors[0] = err; return; }
    int pipelined = !strcmp(mode, "pipelined");
    uint64_t tickets[CALLS_MAX] = {0};
    for (int i = 0; i < ncalls; i++) {
        struct call *k = &calls[i];
        netaccel_buffer out = {0};
        int kind;
        if (pipelined) {
            kind = k->by_id ? netaccel_submit_id(c, (uint16_t)k->id, NULL, k->payload, k->len, k->deadline_us, &tickets[i], &err)
                            : netaccel_submit(c, k->accelerator, k->params, k->payload, k->len, k->deadline_us, &tickets[i], &err);
            if (kind != NETACCEL_OK) { failed[i] = 1; errors[i] = err; }
            continue;
        }
        kind = k->by_id ? netaccel_call_id(c, (uint16_t)k->id, NULL, k->payload, k->len, k->deadline_us, &out, &err)
                        : netaccel_call(c, k->accelerator, k->params, k->payload, k->len, k->deadline_us, &out, &err);
        take(i, kind, &out, &err);
    }
    while (netaccel_in_flight(c) > 0) {
        uint64_t ticket = 0;
        netaccel_buffer out = {0};
        int kind = netaccel_poll(c, -1, &ticket, &out, &err);
        int i = 0;
        while (i < ncalls && tickets[i] != ticket) i++;
        if (kind == NETACCEL_NONE || i == ncalls) break;
        take(i, kind, &out, &err);
    }
    netaccel_close(c);
}

static void run_registry(const char *registry, const char *token) {
    netaccel_error err;
    netaccel_bound *b = netaccel_bind(registry, function, token, 10000, &err);
    if (!b) { failed[0] = 1; errors[0] = err; return; }
    for (int i = 0; i < ncalls; i++) {
        netaccel_buffer out = {0};
        int kind = netaccel_bound_call(b, calls[i].params, calls[i].payload, calls[i].len, calls[i].deadline_us, &out, &err);
        take(i, kind, &out, &err);
    }
    netaccel_bound_release(b, NULL);
}

int main(int argc, char **argv) {
    const char *node = NULL, *registry = NULL;
    netaccel_options opts = {0};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *f = argv[i], *v = argv[i + 1];
        if (!strcmp(f, "--node")) node = v;
        else if (!strcmp(f, "--registry")) registry = v;
        else if (!strcmp(f, "--tls-ca")) opts.tls_ca = v;
        else if (!strcmp(f, "--cert")) opts.cert = v;
        else if (!strcmp(f, "--key")) opts.key = v;
        else if (!strcmp(f, "--tenant")) opts.tenant = v;
        else if (!strcmp(f, "--token")) opts.token = v;
    }
    read_case();
    if (registry) run_registry(registry, opts.token);
    else if (node) run_node(node, &opts);
    else { fprintf(stderr, "give --node or --registry\n"); return 2; }
    print_report();
    return 0;
}
