/*
 * fixed_rate: an open-loop HTTP/1.1 load generator with a fixed request rate.
 *
 * wrk is closed-loop: each connection sends its next request as soon as the
 * previous answer arrives, so a faster server is offered more load, and the
 * CPU it spends per request is measured at a different operating point than
 * a slower server's. To compare CPU per request "at the same offered load",
 * this program sends requests on a fixed schedule (one every 1/RATE seconds,
 * from a periodic timerfd) over CONNS keep-alive connections, at most one
 * request outstanding per connection (no pipelining). If every connection
 * is busy when a request is due, the request is owed and sent as soon as a
 * connection frees up; the largest backlog is reported so a run where the
 * server could not keep up is visible (and flagged by the caller).
 *
 * Responses are parsed (status line, headers up to "\r\n\r\n",
 * Content-Length body) and counted; non-200 answers count as errors.
 *
 * Output, one line, machine-readable:
 *   FIXED rate=R conns=C duration_s=D sent=N completed=N errors=N
 *         achieved_rps=X max_backlog=N p50_us=X p99_us=X
 * (latency from send to complete response, 1 µs buckets)
 *
 * Usage: fixed_rate -p PORT [-a ADDR] [-r RATE] [-c CONNS] [-d SECONDS]
 *                   [-P PATH] [-b BODY_BYTES (POST)]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define IN_CAP 65536
#define HIST_US 100000 /* latency histogram: 1 µs buckets up to 100 ms */

struct conn {
    int fd;
    int busy;
    uint64_t sent_ns;
    size_t in_len;
    char in[IN_CAP];
};

static struct conn *conns;
static int nconns;
static int *idle; /* stack of idle connection indexes */
static int nidle;
static char *req;
static size_t req_len;
static uint64_t sent, completed, errors, owed, max_backlog;
static uint64_t hist[HIST_US + 1];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void send_on(struct conn *c)
{
    size_t off = 0;
    c->sent_ns = now_ns();
    while (off < req_len) {
        ssize_t w = write(c->fd, req + off, req_len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) /* tiny request on an idle socket: should not happen */
                continue;
            die("write");
        }
        off += (size_t)w;
    }
    c->busy = 1;
    sent++;
}

static void send_owed(void)
{
    while (owed > 0 && nidle > 0) {
        send_on(&conns[idle[--nidle]]);
        owed--;
    }
}

/* Length of one complete response at the start of buf, 0 if incomplete. */
static size_t response_len(const char *buf, size_t len, int *status)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end)
        return 0;
    size_t head = (size_t)(end - buf) + 4;
    *status = (len >= 12 && memcmp(buf, "HTTP/1.", 7) == 0) ? atoi(buf + 9) : 0;
    size_t body = 0;
    for (const char *p = buf; p < end;) {
        const char *eol = memmem(p, (size_t)(end - p) + 2, "\r\n", 2);
        if (!eol)
            break;
        if ((size_t)(eol - p) > 15 && strncasecmp(p, "content-length:", 15) == 0)
            body = strtoul(p + 15, NULL, 10);
        p = eol + 2;
    }
    return len >= head + body ? head + body : 0;
}

static void on_readable(int i)
{
    struct conn *c = &conns[i];
    ssize_t r;
    do {
        r = read(c->fd, c->in + c->in_len, IN_CAP - c->in_len);
    } while (r < 0 && errno == EINTR);
    if (r < 0 && errno == EAGAIN)
        return;
    if (r <= 0) {
        fprintf(stderr, "fixed_rate: connection %d closed by server\n", i);
        exit(1);
    }
    c->in_len += (size_t)r;
    int status;
    size_t n;
    while ((n = response_len(c->in, c->in_len, &status)) > 0) {
        uint64_t us = (now_ns() - c->sent_ns) / 1000;
        hist[us > HIST_US ? HIST_US : us]++;
        completed++;
        if (status != 200)
            errors++;
        memmove(c->in, c->in + n, c->in_len - n);
        c->in_len -= n;
        c->busy = 0;
        idle[nidle++] = i;
    }
    if (c->in_len == IN_CAP) {
        fprintf(stderr, "fixed_rate: response too large\n");
        exit(1);
    }
}

static double percentile(double p)
{
    uint64_t want = (uint64_t)((double)completed * p / 100.0);
    uint64_t acc = 0;
    for (int us = 0; us <= HIST_US; us++) {
        acc += hist[us];
        if (acc > want)
            return us;
    }
    return HIST_US;
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1", *path = "/health";
    int port = 0, opt, body = -1;
    double rate = 20000, seconds = 8;
    nconns = 16;
    while ((opt = getopt(argc, argv, "a:p:r:c:d:P:b:h")) != -1) {
        switch (opt) {
        case 'a': addr = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'r': rate = atof(optarg); break;
        case 'c': nconns = atoi(optarg); break;
        case 'd': seconds = atof(optarg); break;
        case 'P': path = optarg; break;
        case 'b': body = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s -p PORT [-a ADDR] [-r RATE] [-c CONNS] [-d SECONDS] "
                            "[-P PATH] [-b BODY_BYTES]\n", argv[0]);
            return opt == 'h' ? 0 : 2;
        }
    }
    if (port <= 0 || rate <= 0 || nconns <= 0 || seconds <= 0) {
        fprintf(stderr, "fixed_rate: -p PORT is required; rate, conns, seconds must be > 0\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    /* The request. */
    size_t cap = strlen(path) + 256 + (body > 0 ? (size_t)body : 0);
    req = malloc(cap);
    if (!req)
        die("malloc");
    if (body >= 0) {
        int h = snprintf(req, cap,
                         "POST %s HTTP/1.1\r\nHost: %s:%d\r\n"
                         "Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n",
                         path, addr, port, body);
        for (int k = 0; k < body; k++)
            req[h + k] = (char)('a' + k % 26);
        req_len = (size_t)h + (size_t)body;
    } else {
        req_len = (size_t)snprintf(req, cap, "GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n",
                                   path, addr, port);
    }

    /* Connections. */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create1");
    conns = calloc((size_t)nconns, sizeof *conns);
    idle = calloc((size_t)nconns, sizeof *idle);
    if (!conns || !idle)
        die("calloc");
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", addr);
        return 2;
    }
    for (int i = 0; i < nconns; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            die("socket");
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            die("connect");
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
            die("fcntl");
        conns[i].fd = fd;
        idle[nidle++] = i;
        struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
            die("epoll_ctl");
    }

    /* The schedule. */
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (tfd < 0)
        die("timerfd_create");
    uint64_t period = (uint64_t)(1e9 / rate);
    if (period == 0)
        period = 1;
    struct itimerspec its = {
        .it_interval = { .tv_sec = (time_t)(period / 1000000000u), .tv_nsec = (long)(period % 1000000000u) },
        .it_value = { .tv_sec = (time_t)(period / 1000000000u), .tv_nsec = (long)(period % 1000000000u) },
    };
    struct epoll_event tev = { .events = EPOLLIN, .data.u32 = UINT32_MAX };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev) < 0)
        die("epoll_ctl");

    uint64_t start = now_ns();
    uint64_t stop_send = start + (uint64_t)(seconds * 1e9);
    uint64_t give_up = stop_send + 1000000000u; /* drain outstanding answers for up to 1 s */
    if (timerfd_settime(tfd, 0, &its, NULL) < 0)
        die("timerfd_settime");

    int sending = 1;
    struct epoll_event evs[256];
    for (;;) {
        uint64_t t = now_ns();
        if (sending && t >= stop_send) {
            sending = 0;
            owed = 0;
            close(tfd);
        }
        if (!sending && (nidle == nconns || t >= give_up))
            break;
        int n = epoll_wait(ep, evs, 256, sending ? 10 : 1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int k = 0; k < n; k++) {
            uint32_t id = evs[k].data.u32;
            if (id == UINT32_MAX) {
                uint64_t exp;
                if (sending && read(tfd, &exp, sizeof exp) == sizeof exp)
                    owed += exp;
            } else {
                on_readable((int)id);
            }
        }
        if (sending) {
            send_owed();
            if (owed > max_backlog)
                max_backlog = owed;
        }
    }
    double elapsed = (double)(stop_send - start) / 1e9;
    printf("FIXED rate=%.0f conns=%d duration_s=%.3f sent=%llu completed=%llu errors=%llu "
           "achieved_rps=%.1f max_backlog=%llu p50_us=%.0f p99_us=%.0f\n",
           rate, nconns, elapsed, (unsigned long long)sent, (unsigned long long)completed,
           (unsigned long long)errors, (double)completed / elapsed,
           (unsigned long long)max_backlog, percentile(50), percentile(99));
    return 0;
}
