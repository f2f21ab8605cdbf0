/*
 * bconn.c - a blocking RPC connection owned by one thread (bconn.h).
 *
 * The socket stays non-blocking; every wait is a poll(2) bounded by the
 * call's deadline, so a server that stops answering costs the caller its
 * timeout and no more.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "rpc/bconn.h"
#include "rpc/fields.h"
#include "rpc/frame.h"
#include "rpc/handshake.h"
#include "rpc/methods.h"
#include "rpc/net.h"
#include "util/log.h"
#include "util/time.h"

/* ------------------------------------------------- the reader's callbacks */

/* Every frame is read whole (none streams); what it means is on_frame's. */
static int rd_on_header(void *owner, const mc_frame_hdr_t *h, const char **why)
{
    (void)owner, (void)h, (void)why;
    return 0;
}

static void rd_stream_begin(void *owner, const mc_frame_hdr_t *h, const uint8_t *body,
                            mc_rpc_rx_dst_t *d)
{
    (void)owner, (void)h, (void)body, (void)d; /* (never: nothing streams) */
}

/* The frame the wait is for: a call's answer (its body into w.resp) or the
 * answer to our hello (checked, our proof made); w.st says what it means.
 * Another in its place (w.wrong) or after it (w.extra) breaks the protocol. */
static void rd_on_frame(void *owner, const mc_frame_t *f, int streamed)
{
    mc_rpc_bconn_t *c = owner;
    (void)streamed;
    if (c->w.done) {
        c->w.extra = 1;
        return;
    }
    c->w.done = 1;
    if (c->w.id == 0)
        c->w.st = mc_rpc_hs_answer(f, &c->key, c->w.nonce, c->w.mine, c->w.why, sizeof(c->w.why));
    else if (f->hdr.kind != MC_FRAME_RESPONSE || f->hdr.req_id != c->w.id)
        c->w.wrong = 1;
    else if (c->w.resp != NULL && f->hdr.body_len > 0 &&
             mc_buf_append(c->w.resp, f->body, f->hdr.body_len) != MC_OK)
        c->w.st = MC_ERR_NOMEM;
    else
        c->w.st = (mc_status_t)f->hdr.status;
}

static int rd_open(void *owner)
{
    const mc_rpc_bconn_t *c = owner;
    return c->fd >= 0;
}

static const mc_rpc_reader_ops_t rd_ops = {
    .on_header = rd_on_header,
    .stream_begin = rd_stream_begin,
    .on_frame = rd_on_frame,
    .open = rd_open,
};

void mc_rpc_bconn_init(mc_rpc_bconn_t *c, const mc_auth_key_t *key)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    mc_frame_limits_init(&c->limits);
    mc_rpc_reader_init(&c->rd, &rd_ops, c, &c->limits);
    if (key != NULL) {
        c->key = *key;
        c->has_key = 1;
    }
}

void mc_rpc_bconn_close(mc_rpc_bconn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    mc_rpc_reader_reset(&c->rd);
}

void mc_rpc_bconn_fini(mc_rpc_bconn_t *c)
{
    mc_rpc_bconn_close(c);
    mc_rpc_reader_fini(&c->rd);
}

void mc_rpc_bconn_target(mc_rpc_bconn_t *c, const char *host, uint16_t port)
{
    if (c->port == port && strcmp(c->host, host) == 0)
        return;
    mc_rpc_bconn_close(c);
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->port = port;
}

/* Wait for events on fd until deadline: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
    for (;;) {
        uint64_t now = mc_now_us();
        if (now >= deadline)
            return 0;
        uint64_t left_ms = (deadline - now + 999) / 1000;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left_ms > 60000 ? 60000 : (int)left_ms);
        if (n > 0)
            return (p.revents & (POLLERR | POLLNVAL)) && !(p.revents & POLLIN) ? -1 : 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* Write iov[0..n) whole. MC_OK, MC_ERR_RPC_TIMEOUT, MC_ERR_CONN_CLOSED. */
static mc_status_t write_all(int fd, struct iovec *iov, int n, uint64_t deadline)
{
    while (n > 0) {
        /* (MSG_NOSIGNAL: a server that went away is a status, not a SIGPIPE
         * for a host process that did not ignore it) */
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int r = wait_fd(fd, POLLOUT, deadline);
            if (r == 0)
                return MC_ERR_RPC_TIMEOUT;
            if (r < 0)
                return MC_ERR_CONN_CLOSED;
            continue;
        }
        if (w < 0)
            return MC_ERR_CONN_CLOSED;
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return MC_OK;
}

/* Read until the frame the wait is for (id 0: the hello's answer; else
 * the call's) is in and handled (rd_on_frame: c->w.st). MC_OK,
 * MC_ERR_RPC_TIMEOUT, MC_ERR_CONN_CLOSED, MC_ERR_PROTOCOL, MC_ERR_NOMEM. */
static mc_status_t await_frame(mc_rpc_bconn_t *c, uint64_t id, mc_buf_t *resp, uint64_t deadline)
{
    c->w.done = c->w.wrong = c->w.extra = 0;
    c->w.st = MC_OK;
    c->w.id = id;
    c->w.resp = resp;
    for (;;) {
        const char *why = NULL;
        mc_status_t st = mc_rpc_reader_read(&c->rd, c->fd, &why);
        if (st != MC_OK && c->w.done && !c->w.wrong) {
            /* the answer is in: what broke after it costs the connection only */
            if (st == MC_ERR_PROTOCOL || st == MC_ERR_LIMIT)
                MC_WARN(RPC, "answer from %s:%u: %s", c->host, (unsigned)c->port,
                        why ? why : "malformed frame");
            mc_rpc_bconn_close(c);
            return MC_OK;
        }
        if (st == MC_OK && c->w.wrong) {
            st = MC_ERR_PROTOCOL;
            why = "not the answer to our call";
        }
        if (st == MC_ERR_PROTOCOL || st == MC_ERR_LIMIT) {
            MC_WARN(RPC, "answer from %s:%u: %s", c->host, (unsigned)c->port,
                    why ? why : "malformed frame");
            return MC_ERR_PROTOCOL;
        }
        if (st != MC_OK)
            return st == MC_ERR_NOMEM ? st : MC_ERR_CONN_CLOSED;
        if (c->w.done)
            return MC_OK;
        int w = wait_fd(c->fd, POLLIN, deadline);
        if (w == 0)
            return MC_ERR_RPC_TIMEOUT;
        if (w < 0)
            return MC_ERR_CONN_CLOSED;
    }
}

/* A frame of the handshake, whole. */
static mc_status_t send_hs(mc_rpc_bconn_t *c, uint16_t method, uint8_t kind, unsigned field,
                           const uint8_t *bin, uint32_t len, uint64_t deadline)
{
    uint8_t frame[MC_RPC_HS_FRAME_MAX];
    size_t n = mc_rpc_hs_frame(frame, method, kind, ++c->next_id, field, bin, len);
    if (n == 0)
        return MC_ERR_INTERNAL_ERROR;
    struct iovec iov = {frame, n};
    return write_all(c->fd, &iov, 1, deadline);
}

/* The handshake of rpc/README.md, client side. */
static mc_status_t handshake(mc_rpc_bconn_t *c, uint64_t deadline)
{
    uint8_t nonce[MC_AUTH_NONCE_LEN];
    mc_auth_nonce(nonce);
    c->w.nonce = nonce;
    mc_status_t st =
        send_hs(c, MC_RPC_AUTH_HELLO, MC_FRAME_REQUEST, MC_F_NONCE, nonce, sizeof(nonce), deadline);
    if (st == MC_OK)
        st = await_frame(c, 0, NULL, deadline);
    c->w.nonce = NULL;
    if (st != MC_OK)
        return st;
    if (c->w.st != MC_OK) {
        MC_WARN(RPC, "authentication with %s:%u failed: %s", c->host, (unsigned)c->port, c->w.why);
        return c->w.st;
    }
    return send_hs(c, MC_RPC_AUTH_PROOF, MC_FRAME_NOTIFY, MC_F_PROOF, c->w.mine, MC_AUTH_PROOF_LEN,
                   deadline);
}

static mc_status_t connect_to(mc_rpc_bconn_t *c, uint64_t deadline)
{
    mc_sockaddr_t a;
    if (c->host[0] == '\0')
        return MC_ERR_CONN_CLOSED;
    mc_status_t st = mc_net_resolve(c->host, c->port, &a);
    if (st != MC_OK)
        return st;
    int fd = -1;
    st = mc_net_connect(&a, &fd);
    if (st == MC_INPROGRESS) {
        int err = 0;
        int w = wait_fd(fd, POLLOUT, deadline);
        st = w == 0                                              ? MC_ERR_RPC_TIMEOUT
             : w < 0 || mc_net_connect_result(fd, &err) != MC_OK ? MC_ERR_CONN_CLOSED
                                                                 : MC_OK;
    } else if (st != MC_OK) {
        return MC_ERR_CONN_CLOSED; /* (refused at once: the server is down) */
    }
    if (st != MC_OK) {
        close(fd);
        return st;
    }
    c->fd = fd;
    mc_rpc_reader_reset(&c->rd);
    if (c->has_key && (st = handshake(c, deadline)) != MC_OK) {
        mc_rpc_bconn_close(c);
        return st;
    }
    return MC_OK;
}

/* A connection that is idle between calls has nothing to read: readable
 * means the server closed it (or broke the protocol). */
static int stale(const mc_rpc_bconn_t *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    return poll(&p, 1, 0) != 0;
}

mc_status_t mc_rpc_bconn_call(mc_rpc_bconn_t *c, uint16_t method, const void *body, size_t len,
                              uint64_t timeout_us, mc_buf_t *resp)
{
    uint64_t deadline = mc_now_us() + timeout_us;
    if (len > UINT32_MAX)
        return MC_ERR_INVALID_PARAMS;
    if (c->fd >= 0 && stale(c))
        mc_rpc_bconn_close(c);
    mc_status_t st = MC_OK;
    if (c->fd < 0 && (st = connect_to(c, deadline)) != MC_OK)
        return st;
    uint8_t hdr[MC_FRAME_HDR_LEN];
    uint64_t id = ++c->next_id;
    mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                        .kind = MC_FRAME_REQUEST,
                        .method = method,
                        .req_id = id,
                        .body_len = (uint32_t)len};
    mc_frame_encode_hdr(hdr, &h);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)(uintptr_t)body, len}};
    st = write_all(c->fd, iov, len > 0 ? 2 : 1, deadline);
    if (st == MC_OK)
        st = await_frame(c, id, resp, deadline);
    if (st != MC_OK) {
        /* its answer may still come: never read it as the next call's */
        mc_rpc_bconn_close(c);
        return st;
    }
    if (c->w.extra) { /* more than the answer came: the server broke the protocol */
        MC_WARN(RPC, "answer from %s:%u: a frame nobody called for", c->host, (unsigned)c->port);
        mc_rpc_bconn_close(c);
    }
    return c->w.st;
}
