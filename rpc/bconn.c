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
#include "rpc/methods.h"
#include "rpc/msgpack.h"
#include "rpc/net.h"
#include "util/log.h"
#include "util/time.h"

void mc_rpc_bconn_init(mc_rpc_bconn_t *c, const mc_auth_key_t *key)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->in = (mc_buf_t)MC_BUF_INIT;
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
    mc_buf_reset(&c->in);
}

void mc_rpc_bconn_fini(mc_rpc_bconn_t *c)
{
    mc_rpc_bconn_close(c);
    mc_buf_fini(&c->in);
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

/* Read the next whole frame into c->in (decoded into *f). MC_OK,
 * MC_ERR_RPC_TIMEOUT, MC_ERR_CONN_CLOSED, MC_ERR_PROTOCOL. */
static mc_status_t read_frame(mc_rpc_bconn_t *c, mc_frame_t *f, uint64_t deadline)
{
    mc_frame_limits_t lim;
    mc_frame_limits_init(&lim);
    for (;;) {
        size_t need = 0;
        const char *why = NULL;
        mc_status_t st =
            mc_frame_decode(mc_buf_head(&c->in), mc_buf_used(&c->in), &lim, f, &need, &why);
        if (st == MC_OK)
            return MC_OK;
        if (st != MC_AGAIN) {
            MC_WARN(RPC, "answer from %s:%u: %s", c->host, (unsigned)c->port,
                    why ? why : "malformed frame");
            return MC_ERR_PROTOCOL;
        }
        size_t want = need > mc_buf_used(&c->in) ? need - mc_buf_used(&c->in) : 1;
        if (want < 65536)
            want = 65536;
        if (mc_buf_reserve(&c->in, want) != MC_OK)
            return MC_ERR_NOMEM;
        ssize_t r = read(c->fd, mc_buf_tail(&c->in), mc_buf_room(&c->in));
        if (r > 0) {
            mc_buf_produce(&c->in, (size_t)r);
            continue;
        }
        if (r == 0)
            return MC_ERR_CONN_CLOSED;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return MC_ERR_CONN_CLOSED;
        int w = wait_fd(c->fd, POLLIN, deadline);
        if (w == 0)
            return MC_ERR_RPC_TIMEOUT;
        if (w < 0)
            return MC_ERR_CONN_CLOSED;
    }
}

/* One frame whose body is {field: bin[len]}. */
static mc_status_t send_bin(mc_rpc_bconn_t *c, uint16_t method, uint8_t kind, unsigned field,
                            const uint8_t *bin, size_t len, uint64_t deadline)
{
    uint8_t frame[MC_FRAME_HDR_LEN + 64];
    mc_buf_t b = {frame, 0, MC_FRAME_HDR_LEN, sizeof(frame)};
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_map(&w, 1);
    mc_mp_write_uint(&w, field);
    mc_mp_write_bin(&w, bin, (uint32_t)len);
    if (w.err != MC_OK || b.data != frame)
        return MC_ERR_INTERNAL_ERROR;
    mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                        .kind = kind,
                        .method = method,
                        .req_id = ++c->next_id,
                        .body_len = (uint32_t)(b.len - MC_FRAME_HDR_LEN)};
    mc_frame_encode_hdr(frame, &h);
    struct iovec iov = {frame, b.len};
    return write_all(c->fd, &iov, 1, deadline);
}

/* The handshake of rpc/README.md, client side. */
static mc_status_t handshake(mc_rpc_bconn_t *c, uint64_t deadline)
{
    uint8_t nonce[MC_AUTH_NONCE_LEN];
    mc_auth_nonce(nonce);
    mc_status_t st = send_bin(c, MC_RPC_AUTH_HELLO, MC_FRAME_REQUEST, MC_F_NONCE, nonce,
                              sizeof(nonce), deadline);
    mc_frame_t f;
    if (st == MC_OK)
        st = read_frame(c, &f, deadline);
    if (st != MC_OK)
        return st;
    const uint8_t *ns = NULL, *proof = NULL;
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, f.body, f.hdr.body_len);
    uint32_t n = f.hdr.body_len ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
        uint64_t id = mc_mp_read_uint(&r);
        if (id == MC_F_NONCE || id == MC_F_PROOF) {
            uint32_t l = 0;
            const uint8_t *p = mc_mp_read_bin(&r, &l);
            if (id == MC_F_NONCE && l == MC_AUTH_NONCE_LEN)
                ns = p;
            else if (id == MC_F_PROOF && l == MC_AUTH_PROOF_LEN)
                proof = p;
        } else {
            mc_mp_skip(&r);
        }
    }
    const char *why = NULL;
    if (f.hdr.kind != MC_FRAME_RESPONSE || f.hdr.method != MC_RPC_AUTH_HELLO)
        why = "unexpected frame during the authentication handshake";
    else if (f.hdr.status == MC_ERR_NO_METHOD)
        why = "the server does not authenticate (no secret there?)";
    else if (f.hdr.status != MC_OK)
        why = "refused";
    else if (r.err != MC_OK || ns == NULL || proof == NULL)
        why = "malformed answer to the authentication hello";
    else if (!mc_auth_check(&c->key, MC_AUTH_SERVER, nonce, ns, proof, MC_AUTH_PROOF_LEN))
        why = "the server's proof is wrong (another secret?)";
    if (why != NULL) {
        MC_WARN(RPC, "authentication with %s:%u failed: %s", c->host, (unsigned)c->port, why);
        return MC_ERR_REJECT_HANDSHAKE;
    }
    uint8_t mine[MC_AUTH_PROOF_LEN];
    mc_auth_proof(&c->key, MC_AUTH_CLIENT, ns, nonce, mine);
    mc_buf_consume(&c->in, f.frame_len);
    return send_bin(c, MC_RPC_AUTH_PROOF, MC_FRAME_NOTIFY, MC_F_PROOF, mine, sizeof(mine),
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
    mc_buf_reset(&c->in);
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
    mc_frame_t f;
    if (st == MC_OK)
        st = read_frame(c, &f, deadline);
    if (st == MC_OK && (f.hdr.kind != MC_FRAME_RESPONSE || f.hdr.req_id != id)) {
        MC_WARN(RPC, "answer from %s:%u: not the answer to our call", c->host, (unsigned)c->port);
        st = MC_ERR_PROTOCOL;
    }
    if (st != MC_OK) {
        /* its answer may still come: never read it as the next call's */
        mc_rpc_bconn_close(c);
        return st;
    }
    if (resp != NULL && f.hdr.body_len > 0 && mc_buf_append(resp, f.body, f.hdr.body_len) != MC_OK)
        st = MC_ERR_NOMEM;
    else
        st = (mc_status_t)f.hdr.status;
    mc_buf_consume(&c->in, f.frame_len);
    if (mc_buf_used(&c->in) == 0)
        mc_buf_reset(&c->in);
    return st;
}
