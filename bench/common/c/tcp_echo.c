/*
 * tcp_echo: the transport floor for request/response benchmarks.
 *
 * Single thread, non-blocking sockets, level-triggered epoll. Whatever a
 * client sends is written back unchanged. While a write is incomplete the
 * connection stops reading (EPOLLOUT only) so memory stays bounded.
 *
 * Usage: tcp_echo [-a ADDR] [-p PORT]   (default 127.0.0.1:18083)
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

#define BUF_CAP 65536
#define MAX_EVENTS 256

struct conn {
    int fd;
    size_t len, off; /* pending bytes buf[off..len) still to be written */
    char buf[BUF_CAP];
};

static int ep;

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void conn_close(struct conn *c)
{
    close(c->fd);
    free(c);
}

static int set_events(struct conn *c, unsigned events)
{
    struct epoll_event ev = { .events = events, .data.ptr = c };
    return epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Returns 1 when everything was written, 0 when it would block, -1 on error. */
static int flush(struct conn *c)
{
    while (c->off < c->len) {
        ssize_t w = write(c->fd, c->buf + c->off, c->len - c->off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 0;
            return -1;
        }
        c->off += (size_t)w;
    }
    c->off = c->len = 0;
    return 1;
}

static void on_readable(struct conn *c)
{
    ssize_t r;
    do {
        r = read(c->fd, c->buf, BUF_CAP);
    } while (r < 0 && errno == EINTR);
    if (r == 0 || (r < 0 && errno != EAGAIN)) {
        conn_close(c);
        return;
    }
    if (r < 0)
        return;
    c->len = (size_t)r;
    c->off = 0;
    int f = flush(c);
    if (f < 0)
        conn_close(c);
    else if (f == 0 && set_events(c, EPOLLOUT) < 0)
        conn_close(c);
}

static void on_writable(struct conn *c)
{
    int f = flush(c);
    if (f < 0)
        conn_close(c);
    else if (f == 1 && set_events(c, EPOLLIN) < 0)
        conn_close(c);
}

static void on_accept(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = malloc(sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->len = c->off = 0;
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
    int port = 18083, opt;
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

    fprintf(stderr, "tcp_echo listening on %s:%d\n", addr, port);
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
            if (!c)
                on_accept(lfd);
            else if (evs[i].events & EPOLLOUT)
                on_writable(c);
            else
                on_readable(c);
        }
    }
}
