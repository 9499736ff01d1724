/*
 * uppercase_backend: a small HTTP/1.1 application server that does what the node's
 * to_uppercase accelerator does, for the "hybrid" deployment of bench/compare/run.sh
 * (nginx as reverse proxy in front of a separate backend process, Strega's
 * nginx + backend baseline).
 *
 *   POST /v1/fn/to_uppercase   body (Content-Length) -> 200, the body upper-cased
 *                              (ASCII a-z; every other byte unchanged)
 *   GET  /health               -> 200 {"status":"ok"}
 *   anything else              -> 404; a bad request -> 400 and close;
 *   chunked request bodies     -> 411; bodies above MAX_BODY -> 413 and close
 *
 * Single thread, non-blocking sockets, level-triggered epoll. Connections are kept
 * alive (HTTP/1.1 default; "Connection: close" and HTTP/1.0 without keep-alive are
 * honoured) and pipelined requests are answered in order. Each connection has an
 * input buffer that grows up to MAX_BODY + head, and an output buffer that holds what
 * a short write left; while output is pending the connection is not read (so a
 * client that does not read its answers cannot make the server buffer without
 * bound).
 *
 * Usage: uppercase_backend [-a ADDR] [-p PORT]   (default 127.0.0.1:18085)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_HEAD (16 * 1024)
#define MAX_BODY (8 * 1024 * 1024)
#define MAX_EVENTS 256
#define READ_CHUNK (64 * 1024)

struct buf {
    char *data;
    size_t len, cap;
};

struct conn {
    int fd;
    struct buf in;    /* received, not yet answered */
    struct buf out;   /* answers not yet written */
    size_t out_off;
    int close_after;  /* close once `out` is written */
};

static int ep;

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static int reserve(struct buf *b, size_t extra)
{
    if (b->len + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p)
        return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

static int append(struct buf *b, const void *p, size_t n)
{
    if (reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static void conn_free(struct conn *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in.data);
    free(c->out.data);
    free(c);
}

static void watch(struct conn *c, unsigned events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static int respond(struct conn *c, int status, const char *reason, const char *type,
                   const char *body, size_t body_len, int upper)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n",
                     status, reason, type, body_len, c->close_after ? "Connection: close\r\n" : "");
    if (append(&c->out, head, (size_t)n) < 0 || reserve(&c->out, body_len) < 0)
        return -1;
    char *dst = c->out.data + c->out.len;
    if (upper) {
        for (size_t i = 0; i < body_len; i++) {
            unsigned char ch = (unsigned char)body[i];
            dst[i] = (ch >= 'a' && ch <= 'z') ? (char)(ch - 32) : (char)ch;
        }
    } else {
        memcpy(dst, body, body_len);
    }
    c->out.len += body_len;
    return 0;
}

/* Value of header `name` in the head [p, end), or NULL; *len set to its length. */
static const char *header(const char *p, const char *end, const char *name, size_t *len)
{
    size_t nlen = strlen(name);
    while (p < end) {
        const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (!eol)
            eol = end;
        if ((size_t)(eol - p) > nlen && p[nlen] == ':' && strncasecmp(p, name, nlen) == 0) {
            const char *v = p + nlen + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            const char *ve = eol;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *len = (size_t)(ve - v);
            return v;
        }
        p = eol + 2;
    }
    return NULL;
}

static int value_is(const char *v, size_t len, const char *want)
{
    return v && len == strlen(want) && strncasecmp(v, want, len) == 0;
}

/*
 * Answers every complete request at the start of c->in. Returns -1 when the
 * connection must be closed now, 0 otherwise.
 */
static int handle_requests(struct conn *c)
{
    size_t off = 0;
    while (!c->close_after) {
        char *start = c->in.data + off;
        size_t avail = c->in.len - off;
        char *head_end = memmem(start, avail, "\r\n\r\n", 4);
        if (!head_end) {
            if (avail > MAX_HEAD) {
                c->close_after = 1;
                respond(c, 431, "Request Header Fields Too Large", "text/plain", "head too large\n", 15, 0);
            }
            break;
        }
        size_t head_len = (size_t)(head_end - start) + 4;
        char *line_end = memmem(start, head_len, "\r\n", 2);
        char *sp1 = memchr(start, ' ', (size_t)(line_end - start));
        char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(line_end - sp1 - 1)) : NULL;
        if (!sp1 || !sp2 || line_end - sp2 != 9 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
            c->close_after = 1;
            respond(c, 400, "Bad Request", "text/plain", "bad request line\n", 17, 0);
            break;
        }
        int http10 = sp2[8] == '0';
        const char *hs = line_end + 2, *he = head_end + 2;
        size_t vlen = 0;
        const char *v = header(hs, he, "Connection", &vlen);
        if (value_is(v, vlen, "close") || (http10 && !value_is(v, vlen, "keep-alive")))
            c->close_after = 1;
        if (header(hs, he, "Transfer-Encoding", &vlen)) {
            c->close_after = 1;
            respond(c, 411, "Length Required", "text/plain", "send Content-Length\n", 20, 0);
            break;
        }
        size_t body_len = 0;
        v = header(hs, he, "Content-Length", &vlen);
        if (v) {
            char digits[24];
            if (vlen == 0 || vlen >= sizeof digits) {
                c->close_after = 1;
                respond(c, 400, "Bad Request", "text/plain", "bad Content-Length\n", 19, 0);
                break;
            }
            memcpy(digits, v, vlen);
            digits[vlen] = 0;
            char *endp;
            unsigned long long n = strtoull(digits, &endp, 10);
            if (*endp || !isdigit((unsigned char)digits[0])) {
                c->close_after = 1;
                respond(c, 400, "Bad Request", "text/plain", "bad Content-Length\n", 19, 0);
                break;
            }
            if (n > MAX_BODY) {
                c->close_after = 1;
                respond(c, 413, "Content Too Large", "text/plain", "body too large\n", 15, 0);
                break;
            }
            body_len = (size_t)n;
        }
        if (avail < head_len + body_len)
            break; /* the body is still arriving */
        const char *body = start + head_len;
        size_t mlen = (size_t)(sp1 - start), plen = (size_t)(sp2 - sp1 - 1);
        int rc;
        if (mlen == 4 && !memcmp(start, "POST", 4) && plen == 19 && !memcmp(sp1 + 1, "/v1/fn/to_uppercase", 19))
            rc = respond(c, 200, "OK", "application/octet-stream", body, body_len, 1);
        else if (mlen == 3 && !memcmp(start, "GET", 3) && plen == 7 && !memcmp(sp1 + 1, "/health", 7))
            rc = respond(c, 200, "OK", "application/json", "{\"status\":\"ok\"}", 15, 0);
        else
            rc = respond(c, 404, "Not Found", "text/plain", "not found\n", 10, 0);
        if (rc < 0)
            return -1;
        off += head_len + body_len;
    }
    memmove(c->in.data, c->in.data + off, c->in.len - off);
    c->in.len -= off;
    return 0;
}

/* Writes pending output; -1 on error, 1 if some is still pending, 0 when done. */
static int flush(struct conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = write(c->fd, c->out.data + c->out_off, c->out.len - c->out_off);
        if (n < 0) {
            if (errno == EAGAIN)
                return 1;
            if (errno == EINTR)
                continue;
            return -1;
        }
        c->out_off += (size_t)n;
    }
    c->out.len = c->out_off = 0;
    return 0;
}

static void on_readable(struct conn *c)
{
    for (;;) {
        if (reserve(&c->in, READ_CHUNK) < 0) {
            conn_free(c);
            return;
        }
        ssize_t n = read(c->fd, c->in.data + c->in.len, READ_CHUNK);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            conn_free(c);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        c->in.len += (size_t)n;
        if ((size_t)n < READ_CHUNK)
            break;
    }
    if (handle_requests(c) < 0) {
        conn_free(c);
        return;
    }
    int f = flush(c);
    if (f < 0 || (f == 0 && c->close_after)) {
        conn_free(c);
        return;
    }
    if (f == 1)
        watch(c, EPOLLOUT); /* stop reading until the answers are out */
}

static void on_writable(struct conn *c)
{
    int f = flush(c);
    if (f < 0 || (f == 0 && c->close_after)) {
        conn_free(c);
        return;
    }
    if (f == 0) {
        watch(c, EPOLLIN);
        /* Requests that arrived while we were writing may be buffered already. */
        if (c->in.len) {
            if (handle_requests(c) < 0) {
                conn_free(c);
                return;
            }
            f = flush(c);
            if (f < 0 || (f == 0 && c->close_after))
                conn_free(c);
            else if (f == 1)
                watch(c, EPOLLOUT);
        }
    }
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1";
    int port = 18085, opt;
    while ((opt = getopt(argc, argv, "a:p:")) != -1) {
        if (opt == 'a')
            addr = optarg;
        else if (opt == 'p')
            port = atoi(optarg);
        else {
            fprintf(stderr, "usage: %s [-a ADDR] [-p PORT]\n", argv[0]);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (lfd < 0)
        die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", addr);
        return 2;
    }
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        /* Say which address: the scripts show this line when a server does not start. */
        fprintf(stderr, "bind %s:%d: %s\n", addr, port, strerror(errno));
        return 1;
    }
    if (listen(lfd, 1024) < 0)
        die("listen");
    ep = epoll_create1(0);
    if (ep < 0)
        die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    fprintf(stderr, "uppercase_backend listening on %s:%d\n", addr, port);

    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(ep, events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct conn *nc = calloc(1, sizeof *nc);
                    if (!nc) {
                        close(fd);
                        continue;
                    }
                    nc->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            if (events[i].events & EPOLLOUT)
                on_writable(c);
            else if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                on_readable(c);
        }
    }
}
