/*
 * http_responder: the bare-transport limit for an HTTP/1.1 health endpoint.
 *
 * Single thread, non-blocking sockets, level-triggered epoll. Every request
 * (boundary = "\r\n\r\n"; bodies are not read, which is fine for GET) gets the
 * same fixed answer:
 *
 *   HTTP/1.1 200 OK
 *   Content-Type: application/json
 *   Content-Length: 15
 *
 *   {"status":"ok"}
 *
 * Connections are kept alive; all complete requests found in one read
 * (pipelining) are answered with one write. Per request on an idle keep-alive
 * connection this costs one epoll_wait, one read and one write: nothing an
 * HTTP server can do is cheaper, which is what makes it a useful floor.
 *
 * Usage: http_responder [-a ADDR] [-p PORT]   (default 127.0.0.1:18082)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_health.h"

#define IN_CAP 16384
#define MAX_EVENTS 256

struct conn {
    int fd;
    size_t in_len;   /* bytes buffered in `in` (an incomplete request) */
    size_t scanned;  /* prefix of `in` already known to hold no boundary */
    char *out;       /* pending output (only after a short write) */
    size_t out_len, out_off, out_cap;
    char in[IN_CAP];
};

static int ep;

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void conn_close(struct conn *c)
{
    close(c->fd); /* also removes it from the epoll set */
    free(c->out);
    free(c);
}

static int set_events(struct conn *c, unsigned events)
{
    struct epoll_event ev = { .events = events, .data.ptr = c };
    return epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Append n responses to the pending output buffer. */
static int queue_responses(struct conn *c, size_t n)
{
    size_t need = c->out_len + n * RESPONSE_LEN;
    if (need > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < need)
            cap *= 2;
        char *p = realloc(c->out, cap);
        if (!p)
            return -1;
        c->out = p;
        c->out_cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(c->out + c->out_len, RESPONSE, RESPONSE_LEN);
        c->out_len += RESPONSE_LEN;
    }
    return 0;
}

/* Write pending output. Returns 1 when flushed, 0 when it would block, -1 on error. */
static int flush_out(struct conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 0;
            return -1;
        }
        c->out_off += (size_t)w;
    }
    c->out_len = c->out_off = 0;
    return 1;
}

static void on_readable(struct conn *c)
{
    ssize_t r;
    do {
        r = read(c->fd, c->in + c->in_len, IN_CAP - c->in_len);
    } while (r < 0 && errno == EINTR);
    if (r == 0 || (r < 0 && errno != EAGAIN)) {
        conn_close(c);
        return;
    }
    if (r < 0)
        return;
    c->in_len += (size_t)r;

    size_t n = take_requests(c->in, &c->in_len, &c->scanned);
    if (n == 0) {
        if (c->in_len == IN_CAP) /* header block larger than we accept */
            conn_close(c);
        return;
    }
    if (n == 1 && c->out_len == 0) {
        /* Common case: one request, nothing pending: write straight from the constant. */
        ssize_t w;
        do {
            w = write(c->fd, RESPONSE, RESPONSE_LEN);
        } while (w < 0 && errno == EINTR);
        if (w == (ssize_t)RESPONSE_LEN)
            return;
        if (w < 0 && errno != EAGAIN) {
            conn_close(c);
            return;
        }
        /* Short write: keep the rest and wait for EPOLLOUT. */
        size_t done = w > 0 ? (size_t)w : 0;
        if (queue_responses(c, 1) < 0) {
            conn_close(c);
            return;
        }
        c->out_off = done;
    } else if (queue_responses(c, n) < 0) {
        conn_close(c);
        return;
    }
    int f = flush_out(c);
    if (f < 0)
        conn_close(c);
    else if (f == 0 && set_events(c, EPOLLOUT) < 0)
        conn_close(c);
}

static void on_writable(struct conn *c)
{
    int f = flush_out(c);
    if (f < 0)
        conn_close(c);
    else if (f == 1 && set_events(c, EPOLLIN) < 0) /* resume reading */
        conn_close(c);
}

static void on_accept(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return; /* EAGAIN or a transient error (EMFILE...) */
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            free(c);
        }
    }
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1";
    int port = 18082, opt;
    /* -w: the timeout of each epoll_wait, in ms (default -1: none). A server with
     * pending timers (the node's idle deadlines) sleeps with a finite timeout, which
     * has the kernel arm and cancel a timer around every sleep: -w 60000 gives the
     * floor the same, to see what that costs (docs/benchmarks.md, issue 28). */
    int wait_ms = -1;
    while ((opt = getopt(argc, argv, "a:p:w:h")) != -1) {
        switch (opt) {
        case 'a': addr = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'w': wait_ms = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-a ADDR] [-p PORT] [-w WAIT_MS]\n", argv[0]);
            return opt == 'h' ? 0 : 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", addr);
        return 2;
    }
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        /* Say which address: the scripts show this line when a server does not start. */
        fprintf(stderr, "bind %s:%d: %s\n", addr, port, strerror(errno));
        return 1;
    }
    if (listen(lfd, 4096) < 0)
        die("listen");

    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create1");
    struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) < 0)
        die("epoll_ctl");

    fprintf(stderr, "http_responder listening on %s:%d\n", addr, port);
    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(ep, evs, MAX_EVENTS, wait_ms);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c) {
                on_accept(lfd);
            } else if (evs[i].events & EPOLLOUT) {
                on_writable(c);
            } else if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                on_readable(c);
            }
        }
    }
}
