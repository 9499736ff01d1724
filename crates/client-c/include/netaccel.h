/**
 * @file netaccel.h
 * @brief The netaccel RAC v1 client for C and C++: call accelerators on a netaccel
 *        node (plain TCP, TLS, mutual TLS), synchronously or pipelined, directly or
 *        through the registry's binding.
 *
 * Link with `pkg-config --cflags --libs netaccel` (the shared library) or
 * `pkg-config --static --cflags --libs netaccel` (libnetaccel.a).
 *
 * @code
 * netaccel_error err;
 * netaccel_client *c = netaccel_connect("127.0.0.1:9400", NULL, &err);
 * if (!c) { fprintf(stderr, "%s\n", err.message); return 1; }
 * netaccel_buffer out;
 * if (netaccel_call(c, "to_uppercase", NULL, (const uint8_t *)"hi", 2, 0, &out, &err) == NETACCEL_OK) {
 *     fwrite(out.data, 1, out.len, stdout);   // HI
 *     netaccel_buffer_free(&out);
 * }
 * netaccel_close(c);
 * @endcode
 *
 * Conventions:
 * - Functions that can fail return an ::netaccel_kind (::NETACCEL_OK on success) and
 *   fill `err` when it is not NULL; a function returning a pointer returns NULL on
 *   failure.
 * - Strings are NUL-terminated UTF-8. Parameters by name are one string,
 *   `"name=value,name=value"` (e.g. `"width=640,height=480"`), checked against the
 *   built-in accelerators' catalog before anything is sent; NULL or "" for none.
 * - A handle is used by one thread at a time (like a `FILE *`); different handles are
 *   independent. Calls block; pipelined calls progress while the caller is inside a
 *   netaccel function (submit, poll or call).
 * - Outputs are allocated by the library: free each with netaccel_buffer_free().
 */
#ifndef NETACCEL_H
#define NETACCEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** What went wrong; also the return value of the functions that can fail. */
enum netaccel_kind {
    NETACCEL_OK = 0,                  /**< success */
    NETACCEL_BAD_REQUEST = 1,         /**< BAD_REQUEST, or params/payload refused by the client */
    NETACCEL_UNKNOWN_ACCELERATOR = 2, /**< UNKNOWN_ACCELERATOR, or a name the catalog lacks */
    NETACCEL_BUSY = 3,                /**< BUSY: retry after `retry_after_ms` */
    NETACCEL_TOO_LARGE = 4,           /**< TOO_LARGE: the node closed the connection */
    NETACCEL_DEADLINE = 5,            /**< DEADLINE_EXCEEDED: the call did not start in time and never ran */
    NETACCEL_UNAVAILABLE = 6,         /**< UNAVAILABLE (reconfiguring, failed, draining): retry */
    NETACCEL_UNAUTHORIZED = 7,        /**< UNAUTHORIZED (a wrong tenant token, a load without the admin token) */
    NETACCEL_INTERNAL = 8,            /**< INTERNAL: the accelerator failed */
    NETACCEL_PROTOCOL = 9,            /**< PROTOCOL_ERROR, or a reply the client refused to decode */
    NETACCEL_CLOSED = 10,             /**< the connection closed before the result; open a new one */
    NETACCEL_CONNECT = 11,            /**< no connection: refused, unreachable, TLS handshake failed */
    NETACCEL_REGISTRY = 12,           /**< the registry refused or could not be reached */
    NETACCEL_FULL = 13,               /**< netaccel_submit() at the bound on calls in flight: poll first */
    NETACCEL_NONE = 14,               /**< netaccel_poll(): no result within the wait, or none in flight */
    NETACCEL_INVALID = 15,            /**< a NULL or non-UTF-8 argument, or inconsistent options */
};

/** The retry hint of BUSY and UNAVAILABLE, in ms (RAC v1 carries none; the node's HTTP
 *  front end says `Retry-After: 1` for the same refusals). */
#define NETACCEL_RETRY_AFTER_MS 1000

/** A failure: its kind, the node's status and a sentence. The node's answer to the
 *  whole connection (request id 0: BUSY at its bound on connections, PROTOCOL_ERROR for
 *  a frame it could not read) fails every call on the connection, with that status and
 *  its kind; the connection is closed after it. */
typedef struct netaccel_error {
    int kind;                /**< an ::netaccel_kind */
    uint16_t status;         /**< the node's RAC status code when it answered one, else 0xFFFF */
    uint32_t retry_after_ms; /**< for BUSY/UNAVAILABLE: wait this long before retrying; else 0 */
    char message[256];       /**< NUL-terminated, truncated to fit */
} netaccel_error;

/** Bytes the library allocated (a call's output). Free with netaccel_buffer_free(). */
typedef struct netaccel_buffer {
    uint8_t *data;
    size_t len;
} netaccel_buffer;

/** How to connect; every field may be NULL/0. Zero-initialise it (`= {0}`). */
typedef struct netaccel_options {
    const char *tls_ca; /**< PEM file of the CA to trust: speak TLS (the node's `--rac-tls` listener) */
    const char *cert;   /**< with `key`: a client certificate (PEM) for a node that wants mutual TLS */
    const char *key;    /**< the client certificate's private key (PEM) */
    const char *tenant; /**< say `hello` as this tenant after connecting */
    const char *token;  /**< the tenant's token */
    uint32_t in_flight_max; /**< bound on pipelined calls in flight; 0: 32 (the node's per-connection bound) */
} netaccel_options;

/** An open connection to a node's RAC listener. */
typedef struct netaccel_client netaccel_client;

/** An instance of a function bound through the registry. */
typedef struct netaccel_bound netaccel_bound;

/**
 * Connects to a node's RAC listener at `addr` ("HOST:PORT"); over TLS when
 * `opts->tls_ca` is set (the certificate must name HOST), then says `hello` when
 * `opts->tenant` is set.
 * @return the connection, or NULL with `err` filled (::NETACCEL_CONNECT, ::NETACCEL_UNAUTHORIZED, …).
 */
netaccel_client *netaccel_connect(const char *addr, const netaccel_options *opts, netaccel_error *err);

/** Closes the connection; calls still in flight are abandoned. NULL is allowed. */
void netaccel_close(netaccel_client *client);

/**
 * Calls a built-in accelerator by name and waits for its output.
 * @param params "name=value,…" or NULL
 * @param deadline_us the call must start within this many µs of reaching the node; 0: none
 * @param out receives the output on ::NETACCEL_OK (free it with netaccel_buffer_free())
 */
int netaccel_call(netaccel_client *client, const char *accelerator, const char *params,
                  const uint8_t *payload, size_t len, uint32_t deadline_us,
                  netaccel_buffer *out, netaccel_error *err);

/** As netaccel_call(), by accelerator id (user accelerators, models) with a raw
 *  44-byte parameter block (NULL: zeros). */
int netaccel_call_id(netaccel_client *client, uint16_t accel_id, const uint8_t *params,
                     const uint8_t *payload, size_t len, uint32_t deadline_us,
                     netaccel_buffer *out, netaccel_error *err);

/**
 * Sends a call without waiting (pipelining); its result comes from netaccel_poll()
 * under `*ticket`. Results come in completion order, not submission order.
 * @return ::NETACCEL_FULL at `in_flight_max` calls in flight (poll, then submit again)
 */
int netaccel_submit(netaccel_client *client, const char *accelerator, const char *params,
                    const uint8_t *payload, size_t len, uint32_t deadline_us,
                    uint64_t *ticket, netaccel_error *err);

/** As netaccel_submit(), by accelerator id with a raw parameter block (NULL: zeros). */
int netaccel_submit_id(netaccel_client *client, uint16_t accel_id, const uint8_t *params,
                       const uint8_t *payload, size_t len, uint32_t deadline_us,
                       uint64_t *ticket, netaccel_error *err);

/**
 * The next completed submitted call: sets `*ticket`, and `out` on ::NETACCEL_OK;
 * another kind is that call's failure. Waits at most `wait_ms` (negative: until one
 * completes).
 * @return ::NETACCEL_NONE when nothing is in flight or nothing completed in the wait
 */
int netaccel_poll(netaccel_client *client, int64_t wait_ms, uint64_t *ticket,
                  netaccel_buffer *out, netaccel_error *err);

/** Submitted calls whose result has not been polled yet. */
uint32_t netaccel_in_flight(const netaccel_client *client);

/** Frees an output and sets it to {NULL, 0}. */
void netaccel_buffer_free(netaccel_buffer *buf);

/** "ok", "busy", "deadline", … for a kind (a static string). */
const char *netaccel_kind_name(int kind);

/**
 * Binds an instance of `function` through the registry at `registry` (replica URLs,
 * comma-separated: a follower's NOT_LEADER is followed to the leader) and calls its
 * node over RAC. Migrations are followed (long poll); a call that finds its node lost
 * waits up to `rebind_wait_ms` (0: 10 s) for a new binding and is retried once.
 * @param token the registry's token, or NULL
 */
netaccel_bound *netaccel_bind(const char *registry, const char *function, const char *token,
                              uint32_t rebind_wait_ms, netaccel_error *err);

/** Calls the bound function's accelerator ("name=value,…" params or NULL). */
int netaccel_bound_call(netaccel_bound *bound, const char *params, const uint8_t *payload,
                        size_t len, uint32_t deadline_us, netaccel_buffer *out, netaccel_error *err);

/**
 * A bound call that has had no answer for `after_ms` (0: never, the default) is
 * abandoned as if its node could not be reached: reported to the registry, which moves
 * the instance to another node, and retried once on the new binding. For a node cut
 * off from its clients while the registry still reaches it. Set it above the longest
 * call the function makes (the call may run twice).
 * @return ::NETACCEL_OK, or ::NETACCEL_INVALID for a NULL `bound`
 */
int netaccel_bound_set_unreachable_after(netaccel_bound *bound, uint32_t after_ms,
                                         netaccel_error *err);

/** Deletes the instance from the registry and frees `bound` (also on failure). */
int netaccel_bound_release(netaccel_bound *bound, netaccel_error *err);

/** Frees `bound` without deleting its instance (it stays bound for a later bind). */
void netaccel_bound_free(netaccel_bound *bound);

#ifdef __cplusplus
}
#endif

#endif /* NETACCEL_H */
