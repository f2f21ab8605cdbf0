/*
 * rpc_util.h - the RPC tests' shared client side (rpc_echo_test,
 * master_rpc_test, rpc_auth_test, auth_ports_test, rpc_bconn_test):
 *
 *  - a group of reactors, one client, a pool of RPC clients on a group of
 *    two client reactors;
 *  - an in-process server on one reactor with the test's handlers;
 *  - raw sockets that send what the client library never would: bytes
 *    (and whether the server hangs up), frames with any header, the client
 *    side of the authentication handshake done by hand; one response frame
 *    read back, a bin field of its body;
 *  - the reason (MC_F_ERROR) of a response, and a wait on a counter.
 *
 * Header-only, for cmocka tests (the helpers assert what must not fail).
 */
#ifndef MC_TEST_RPC_UTIL_H
#define MC_TEST_RPC_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "reactor/reactor.h"
#include "rpc/fields.h"
#include "rpc/frame.h"
#include "rpc/methods.h"
#include "rpc/msgpack.h"
#include "rpc/rpc.h"
#include "util/auth.h"
#include "util/buf.h"
#include "util/time.h"

/* ---------------------------------------------------------- client pool */

/* A group called name of count reactors (it must start). */
static inline mc_reactor_group_t *rt_group_create(unsigned count, const char *name)
{
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = count;
    go.name = name;
    mc_reactor_group_t *g = NULL;
    assert_int_equal(mc_reactor_group_create(&go, &g), MC_OK);
    return g;
}

/* A client of 127.0.0.1:port on reactor r with key (NULL: none) and
 * call_timeout_us (0: the default); it must be created. */
static inline mc_rpc_client_t *rt_client_create(mc_reactor_t *r, unsigned port,
                                                const mc_auth_key_t *key, uint64_t call_timeout_us)
{
    mc_rpc_client_opts_t o;
    mc_rpc_client_opts_init(&o);
    o.host = "127.0.0.1";
    o.port = (uint16_t)port;
    o.auth_key = key;
    if (call_timeout_us != 0)
        o.call_timeout_us = call_timeout_us;
    mc_rpc_client_t *c = NULL;
    assert_int_equal(mc_rpc_client_create(r, &o, &c), MC_OK);
    return c;
}

/* A group "cli" of two reactors into *g and n clients of 127.0.0.1:port
 * (client i on reactor i % 2, reconnecting after 20-200 ms) into cli. */
static inline void rt_clients_create(mc_reactor_group_t **g, mc_rpc_client_t **cli, int n,
                                     unsigned port)
{
    *g = rt_group_create(2, "cli");
    for (int i = 0; i < n; i++) {
        mc_rpc_client_opts_t o;
        mc_rpc_client_opts_init(&o);
        o.host = "127.0.0.1";
        o.port = (uint16_t)port;
        o.backoff_min_us = 20000;
        o.backoff_max_us = 200000;
        assert_int_equal(
            mc_rpc_client_create(mc_reactor_group_get(*g, (unsigned)i % 2), &o, &cli[i]), MC_OK);
    }
}

static inline void rt_clients_destroy(mc_reactor_group_t *g, mc_rpc_client_t **cli, int n)
{
    for (int i = 0; i < n; i++)
        mc_rpc_client_destroy(cli[i]);
    mc_reactor_group_destroy(g);
}

/* ------------------------------------------------------ in-process server */

typedef struct rt_method {
    uint16_t method;
    mc_rpc_handler_t fn;
} rt_method_t;

/* A server on reactor r at 127.0.0.1:port (0: a free one; mc_rpc_server_port
 * says which) with key (NULL: none) serving the n methods m (ctx NULL),
 * started. A port given again (a restart) may still be held by the old
 * socket for a moment: the start is retried for up to a second. */
static inline mc_rpc_server_t *rt_server_start(mc_reactor_t *r, unsigned port,
                                               const mc_auth_key_t *key, const rt_method_t *m,
                                               size_t n)
{
    mc_reactor_t *rs[1] = {r};
    mc_rpc_server_opts_t so;
    mc_rpc_server_opts_init(&so);
    so.bind_addr = "127.0.0.1";
    so.port = (uint16_t)port;
    so.auth_key = key;
    mc_rpc_server_t *s = NULL;
    assert_int_equal(mc_rpc_server_create(rs, 1, &so, &s), MC_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(mc_rpc_server_register(s, m[i].method, m[i].fn, NULL), MC_OK);
    mc_status_t st = MC_ERR_SOCKET;
    for (int i = 0; i < 50 && st != MC_OK; i++)
        if ((st = mc_rpc_server_start(s)) != MC_OK)
            usleep(20000);
    assert_int_equal(st, MC_OK);
    return s;
}

/* ------------------------------------------------------------- waiting */

/* 1 once *v reaches want, 0 when it has not after timeout_ms of 5 ms sleeps
 * (longer on a loaded machine: the sleeps are counted, not the clock). */
static inline int rt_wait_count(atomic_int *v, int want, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 5) {
        if (atomic_load(v) >= want)
            return 1;
        usleep(5000);
    }
    return atomic_load(v) >= want;
}

/* The server's reason (MC_F_ERROR of the response body resp) into why
 * (room bytes; "" when there is none or it does not fit). */
static inline void rt_reason(const mc_buf_t *resp, char *why, size_t room)
{
    why[0] = '\0';
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, mc_buf_head(resp), mc_buf_used(resp));
    uint32_t n = mc_buf_used(resp) ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
        if (mc_mp_read_uint(&r) == MC_F_ERROR) {
            uint32_t l = 0;
            const char *p = mc_mp_read_str(&r, &l);
            if (r.err == MC_OK && l < room) {
                memcpy(why, p, l);
                why[l] = '\0';
            }
        } else {
            mc_mp_skip(&r);
        }
    }
}

/* ---------------------------------------------------------- raw sockets */

/* A TCP connection to 127.0.0.1:port (it must connect): the fd. */
static inline int rt_connect(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* 1 when the peer closes fd within ms (whatever it sends first). */
static inline int rt_closed_within(int fd, int ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)ms;
    char b[256];
    while (mc_now_ms() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) == 1 && recv(fd, b, sizeof(b), 0) <= 0)
            return 1;
    }
    return 0;
}

/* Connect, send bytes, and report whether the server closed the connection
 * (read returns 0 or ECONNRESET) within 3 s. */
static inline int rt_sent_is_disconnected(unsigned port, const void *bytes, size_t len)
{
    int fd = rt_connect(port);
    assert_int_equal(write(fd, bytes, len), (ssize_t)len);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int closed = 0;
    if (poll(&pfd, 1, 3000) == 1) {
        char buf[64];
        ssize_t n = read(fd, buf, sizeof(buf));
        closed = n == 0 || (n < 0 && errno == ECONNRESET);
    }
    close(fd);
    return closed;
}

/* Send a frame: its header and body (msgpack, already encoded) in one
 * send, then the payload (which may be cut short by the peer's close). */
static inline void rt_frame(int fd, uint16_t method, uint8_t kind, uint64_t req_id,
                            const mc_buf_t *body, const uint8_t *payload, uint32_t plen)
{
    mc_buf_t b = MC_BUF_INIT;
    assert_int_equal(mc_buf_reserve(&b, MC_FRAME_HDR_LEN + mc_buf_used(body)), MC_OK);
    mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                        .kind = kind,
                        .method = method,
                        .req_id = req_id,
                        .body_len = (uint32_t)mc_buf_used(body),
                        .payload_len = plen};
    mc_frame_encode_hdr(mc_buf_tail(&b), &h);
    mc_buf_produce(&b, MC_FRAME_HDR_LEN);
    assert_int_equal(mc_buf_append(&b, mc_buf_head(body), mc_buf_used(body)), MC_OK);
    assert_int_equal(send(fd, mc_buf_head(&b), mc_buf_used(&b), MSG_NOSIGNAL),
                     (ssize_t)mc_buf_used(&b));
    mc_buf_fini(&b);
    if (plen > 0)
        (void)send(fd, payload, plen, MSG_NOSIGNAL);
}

/* A frame whose body is {field: bin} ({} when field is 0). */
static inline void rt_bin(int fd, uint16_t method, uint8_t kind, uint64_t req_id, unsigned field,
                          const uint8_t *bin, uint32_t len)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_map(&w, field ? 1 : 0);
    if (field) {
        mc_mp_write_uint(&w, field);
        mc_mp_write_bin(&w, bin, len);
    }
    rt_frame(fd, method, kind, req_id, &b, NULL, 0);
    mc_buf_fini(&b);
}

/* Read one response frame: its header into h, its body into body (room
 * bytes). 0, or -1 when the connection closed or nothing came within
 * timeout_ms. */
static inline int rt_recv(int fd, mc_frame_hdr_t *h, uint8_t *body, size_t room, int timeout_ms)
{
    uint8_t buf[MC_FRAME_HDR_LEN + 1024];
    size_t got = 0, need = MC_FRAME_HDR_LEN;
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    while (got < need) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (mc_now_ms() >= deadline || poll(&p, 1, 100) < 0)
            return -1;
        if (!(p.revents & (POLLIN | POLLHUP)))
            continue;
        ssize_t n = recv(fd, buf + got, need - got, 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
        if (got == MC_FRAME_HDR_LEN && need == MC_FRAME_HDR_LEN) {
            const char *why = NULL;
            mc_frame_limits_t lim;
            mc_frame_limits_init(&lim);
            assert_int_equal(mc_frame_decode_hdr(buf, got, &lim, h, &why), MC_OK);
            need = MC_FRAME_HDR_LEN + h->body_len + h->payload_len;
            assert_true(need <= sizeof(buf) && h->body_len <= room);
        }
    }
    memcpy(body, buf + MC_FRAME_HDR_LEN, h->body_len);
    return 0;
}

/* The bin field id (len bytes exactly) of a response body into out: 0, or
 * -1 when there is no such field. */
static inline int rt_body_bin(const uint8_t *body, size_t blen, unsigned id, uint8_t *out,
                              uint32_t len)
{
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, body, blen);
    uint32_t n = mc_mp_read_map(&r);
    for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
        if (mc_mp_read_uint(&r) == id) {
            uint32_t l = 0;
            const void *p = mc_mp_read_bin(&r, &l);
            if (r.err == MC_OK && l == len) {
                memcpy(out, p, len);
                return 0;
            }
        } else {
            mc_mp_skip(&r);
        }
    }
    return -1;
}

/* The client side of the handshake by hand on fd, with key k and our nonce
 * nc (the server's answer read within timeout_ms and its proof checked):
 * the server's nonce into ns, our proof into cproof (to replay them). */
static inline void rt_handshake(int fd, const mc_auth_key_t *k, const uint8_t *nc, uint8_t *ns,
                                uint8_t *cproof, int timeout_ms)
{
    uint8_t body[512], sproof[MC_AUTH_PROOF_LEN];
    mc_frame_hdr_t h;
    rt_bin(fd, MC_RPC_AUTH_HELLO, MC_FRAME_REQUEST, 1, MC_F_NONCE, nc, MC_AUTH_NONCE_LEN);
    assert_int_equal(rt_recv(fd, &h, body, sizeof(body), timeout_ms), 0);
    assert_int_equal(h.status, MC_OK);
    assert_int_equal(rt_body_bin(body, h.body_len, MC_F_NONCE, ns, MC_AUTH_NONCE_LEN), 0);
    assert_int_equal(rt_body_bin(body, h.body_len, MC_F_PROOF, sproof, sizeof(sproof)), 0);
    assert_true(mc_auth_check(k, MC_AUTH_SERVER, nc, ns, sproof, sizeof(sproof)));
    mc_auth_proof(k, MC_AUTH_CLIENT, ns, nc, cproof);
    rt_bin(fd, MC_RPC_AUTH_PROOF, MC_FRAME_NOTIFY, 2, MC_F_PROOF, cproof, MC_AUTH_PROOF_LEN);
}

#endif /* MC_TEST_RPC_UTIL_H */
