/*
 * uring_responder: the io_uring counterpart of http_responder, the floor of what
 * serving an HTTP/1.1 health endpoint costs through io_uring on this kernel.
 *
 * Single thread, one ring set up as the node's io_uring path sets up its own
 * (IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, falling back to a
 * plain ring where the kernel refuses them), and the same mechanisms: one
 * multishot accept for the listener, one multishot receive per connection into
 * a ring of provided buffers, one send per answer, and the thread asleep in the
 * io_uring_enter that submits the turn's sends. Every request (boundary =
 * "\r\n\r\n"; bodies are not read) gets http_responder's fixed answer. Per
 * request on an idle keep-alive connection that is two io_uring_enter: the one
 * that submits the answer (its completion ends the wait at once) and the one
 * that sleeps until the next request arrives. Nothing else runs: what this costs
 * over http_responder is what io_uring itself costs over epoll, read and write.
 *
 * Usage: uring_responder [-a ADDR] [-p PORT]   (default 127.0.0.1:18083)
 * Build: make uring_responder (needs liburing, Debian package liburing-dev)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_health.h"

#define IN_CAP 16384
#define MAX_FD 65536
#define BUF_COUNT 1024 /* provided receive buffers (a power of two) */
#define BUF_SIZE 4096
#define BUF_GROUP 0

enum { OP_ACCEPT = 1, OP_RECV = 2, OP_SEND = 3 };

struct conn {
    int fd;
    unsigned gen;   /* names this connection in user data (fd numbers are reused) */
    int recv_armed; /* its multishot receive is in the ring */
    int sending;    /* a send is in the ring */
    int closing;    /* close once the send in the ring completes */
    size_t pending; /* answers owed once that send completes */
    size_t in_len, scanned;
    char *out;      /* the answers of the send in the ring, when more than one */
    size_t out_cap;
    char in[IN_CAP];
};

static struct io_uring ring;
static struct io_uring_buf_ring *bufs;
static char *buf_memory;
static struct conn *conns[MAX_FD];
static int listen_fd;
static unsigned generation;

/* User data: the operation, the connection's generation (24 bits) and its fd. */
static __u64 tag(int op, const struct conn *c)
{
    return (__u64)op << 56 | (__u64)(c->gen & 0xffffff) << 32 | (__u32)c->fd;
}

static void die(const char *what, int err)
{
    fprintf(stderr, "%s: %s\n", what, strerror(err));
    exit(1);
}

static struct io_uring_sqe *sqe(void)
{
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    if (!s) {
        io_uring_submit(&ring);
        s = io_uring_get_sqe(&ring);
        if (!s)
            die("io_uring_get_sqe", EBUSY);
    }
    return s;
}

static void arm_accept(void)
{
    struct io_uring_sqe *s = sqe();
    io_uring_prep_multishot_accept(s, listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(s, (__u64)OP_ACCEPT << 56);
}

static void arm_recv(struct conn *c)
{
    struct io_uring_sqe *s = sqe();
    io_uring_prep_recv_multishot(s, c->fd, NULL, 0, 0);
    s->flags |= IOSQE_BUFFER_SELECT;
    s->buf_group = BUF_GROUP;
    io_uring_sqe_set_data64(s, tag(OP_RECV, c));
    c->recv_armed = 1;
}

static void give_buffer(int bid)
{
    io_uring_buf_ring_add(bufs, buf_memory + (size_t)bid * BUF_SIZE, BUF_SIZE, bid,
                          io_uring_buf_ring_mask(BUF_COUNT), 0);
    io_uring_buf_ring_advance(bufs, 1);
}

static void conn_free(struct conn *c)
{
    if (c->recv_armed) {
        /* The receive holds the socket open: cancel it (its last completion, for a
         * generation no connection has any more, is dropped). */
        struct io_uring_sqe *s = sqe();
        io_uring_prep_cancel64(s, tag(OP_RECV, c), 0);
        io_uring_sqe_set_data64(s, 0);
    }
    conns[c->fd] = NULL;
    close(c->fd);
    free(c->out);
    free(c);
}

/* Ends a connection: now, or once its send is out of the ring. */
static void conn_end(struct conn *c)
{
    if (c->sending)
        c->closing = 1;
    else
        conn_free(c);
}

/* Sends n answers: from the constant for one, else from the connection's buffer. */
static void send_answers(struct conn *c, size_t n)
{
    const char *data = RESPONSE;
    if (n > 1) {
        size_t need = n * RESPONSE_LEN;
        if (need > c->out_cap) {
            char *p = realloc(c->out, need);
            if (!p) {
                conn_end(c);
                return;
            }
            c->out = p;
            c->out_cap = need;
        }
        for (size_t i = 0; i < n; i++)
            memcpy(c->out + i * RESPONSE_LEN, RESPONSE, RESPONSE_LEN);
        data = c->out;
    }
    struct io_uring_sqe *s = sqe();
    /* MSG_WAITALL: the kernel sends all of it before completing, as the node asks. */
    io_uring_prep_send(s, c->fd, data, n * RESPONSE_LEN, MSG_NOSIGNAL | MSG_WAITALL);
    io_uring_sqe_set_data64(s, tag(OP_SEND, c));
    c->sending = 1;
}

static void on_accept(struct io_uring_cqe *cqe)
{
    if (!(cqe->flags & IORING_CQE_F_MORE))
        arm_accept();
    int fd = cqe->res;
    if (fd < 0)
        return;
    if (fd >= MAX_FD) {
        close(fd);
        return;
    }
    struct conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->gen = ++generation;
    conns[fd] = c;
    arm_recv(c);
}

static void on_recv(struct conn *c, struct io_uring_cqe *cqe)
{
    int more = cqe->flags & IORING_CQE_F_MORE;
    if (!more)
        c->recv_armed = 0;
    if (cqe->flags & IORING_CQE_F_BUFFER) {
        int bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
        size_t n = cqe->res > 0 ? (size_t)cqe->res : 0;
        if (c->closing || n > IN_CAP - c->in_len) {
            give_buffer(bid);
            if (!c->closing)
                conn_end(c); /* a header block larger than we accept */
            return;
        }
        memcpy(c->in + c->in_len, buf_memory + (size_t)bid * BUF_SIZE, n);
        c->in_len += n;
        give_buffer(bid);
    }
    if (cqe->res == -ENOBUFS) {
        if (!more)
            arm_recv(c);
        return;
    }
    if (cqe->res <= 0) {
        conn_end(c);
        return;
    }
    size_t n = take_requests(c->in, &c->in_len, &c->scanned);
    if (n > 0) {
        if (c->sending)
            c->pending += n;
        else
            send_answers(c, n);
    }
    if (!more && !c->closing)
        arm_recv(c);
}

static void on_send(struct conn *c, struct io_uring_cqe *cqe)
{
    c->sending = 0;
    if (cqe->res < 0 || c->closing) {
        conn_free(c);
        return;
    }
    if (c->pending > 0) {
        size_t n = c->pending;
        c->pending = 0;
        send_answers(c, n);
    }
}

static void setup(void)
{
    struct io_uring_params p = { 0 };
    p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    p.cq_entries = 8192;
    int r = io_uring_queue_init_params(1024, &ring, &p);
    if (r < 0) {
        memset(&p, 0, sizeof p);
        p.flags = IORING_SETUP_CQSIZE;
        p.cq_entries = 8192;
        r = io_uring_queue_init_params(1024, &ring, &p);
    }
    if (r < 0)
        die("io_uring_queue_init_params", -r);
    if (posix_memalign((void **)&bufs, 4096, BUF_COUNT * sizeof(struct io_uring_buf)))
        die("posix_memalign", ENOMEM);
    buf_memory = malloc((size_t)BUF_COUNT * BUF_SIZE);
    if (!buf_memory)
        die("malloc", ENOMEM);
    struct io_uring_buf_reg reg = {
        .ring_addr = (unsigned long)bufs, .ring_entries = BUF_COUNT, .bgid = BUF_GROUP
    };
    r = io_uring_register_buf_ring(&ring, &reg, 0);
    if (r < 0)
        die("io_uring_register_buf_ring", -r);
    io_uring_buf_ring_init(bufs);
    for (int i = 0; i < BUF_COUNT; i++)
        io_uring_buf_ring_add(bufs, buf_memory + (size_t)i * BUF_SIZE, BUF_SIZE, i,
                              io_uring_buf_ring_mask(BUF_COUNT), i);
    io_uring_buf_ring_advance(bufs, BUF_COUNT);
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1";
    int port = 18083, opt;
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
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd < 0)
        die("socket", errno);
    int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        die("inet_pton", EINVAL);
    if (bind(listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        die("bind", errno);
    if (listen(listen_fd, 4096) < 0)
        die("listen", errno);
    setup();
    arm_accept();
    fprintf(stderr, "uring_responder listening on %s:%d\n", addr, port);
    for (;;) {
        int r = io_uring_submit_and_wait(&ring, 1);
        if (r < 0 && r != -EINTR && r != -EBUSY)
            die("io_uring_submit_and_wait", -r);
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe)
        {
            seen++;
            __u64 data = io_uring_cqe_get_data64(cqe);
            int op = (int)(data >> 56), fd = (int)(__u32)data;
            unsigned gen = (unsigned)(data >> 32) & 0xffffff;
            if (op == OP_ACCEPT) {
                on_accept(cqe);
                continue;
            }
            struct conn *c = op && fd < MAX_FD ? conns[fd] : NULL;
            if (c && (c->gen & 0xffffff) != gen)
                c = NULL; /* a completion for an earlier connection on this fd */
            if (!c) {
                if (op == OP_RECV && (cqe->flags & IORING_CQE_F_BUFFER))
                    give_buffer(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
                continue;
            }
            if (op == OP_RECV)
                on_recv(c, cqe);
            else if (op == OP_SEND)
                on_send(c, cqe);
        }
        io_uring_cq_advance(&ring, seen);
    }
}
