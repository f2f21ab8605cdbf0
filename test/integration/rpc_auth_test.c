/*
 * RPC authentication (issue 13, finding 6: anyone who reached a port was
 * trusted), in one process: a server with the cluster key on 127.0.0.1 and
 * clients with the right key, a wrong one, none; a server without a key; raw
 * sockets that replay a recorded handshake or send frames before it. A
 * handler counts what it processes: a refused connection's frames never
 * reach it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
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
#include "util/time.h"

#define CALL_US 3000000

static atomic_int handled; /* echo requests the handler processed */

static void h_echo(void *ctx, mc_rpc_req_t *req)
{
    (void)ctx;
    atomic_fetch_add(&handled, 1);
    size_t len;
    const uint8_t *body = mc_rpc_req_body(req, &len);
    mc_rpc_reply(req, MC_OK, body, len);
}

typedef struct env {
    mc_reactor_group_t *g;
    mc_rpc_server_t *with_key, *without_key;
    mc_auth_key_t k, other;
} env_t;

static mc_rpc_server_t *server(env_t *e, const mc_auth_key_t *key)
{
    mc_reactor_t *rs[1] = {mc_reactor_group_get(e->g, 0)};
    mc_rpc_server_opts_t so;
    mc_rpc_server_opts_init(&so);
    so.bind_addr = "127.0.0.1";
    so.auth_key = key;
    mc_rpc_server_t *s = NULL;
    assert_int_equal(mc_rpc_server_create(rs, 1, &so, &s), MC_OK);
    assert_int_equal(mc_rpc_server_register(s, MC_RPC_ECHO, h_echo, NULL), MC_OK);
    assert_int_equal(mc_rpc_server_start(s), MC_OK);
    return s;
}

static int setup(void **state)
{
    static env_t e;
    signal(SIGPIPE, SIG_IGN);
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 2;
    go.name = "auth";
    assert_int_equal(mc_reactor_group_create(&go, &e.g), MC_OK);
    assert_int_equal(mc_auth_key_from("the cluster's secret, 32 bytes..", 32, &e.k), MC_OK);
    assert_int_equal(mc_auth_key_from("another secret of the same size.", 32, &e.other), MC_OK);
    e.with_key = server(&e, &e.k);
    e.without_key = server(&e, NULL);
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    mc_rpc_server_destroy(e->with_key);
    mc_rpc_server_destroy(e->without_key);
    mc_reactor_group_destroy(e->g);
    return 0;
}

/* An echo call through a fresh client with key (NULL = none); its status and
 * the server's reason (MC_F_ERROR) in why. */
static mc_status_t echo(env_t *e, mc_rpc_server_t *s, const mc_auth_key_t *key, char *why,
                        size_t room)
{
    mc_rpc_client_opts_t o;
    mc_rpc_client_opts_init(&o);
    o.host = "127.0.0.1";
    o.port = mc_rpc_server_port(s);
    o.auth_key = key;
    mc_rpc_client_t *c = NULL;
    assert_int_equal(mc_rpc_client_create(mc_reactor_group_get(e->g, 1), &o, &c), MC_OK);
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mp_write_map(&w, 1);
    mc_mp_write_uint(&w, 1);
    mc_mp_write_cstr(&w, "hello");
    mc_status_t st =
        mc_rpc_call_sync(c, MC_RPC_ECHO, mc_buf_head(&body), mc_buf_used(&body), CALL_US, &resp);
    why[0] = '\0';
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, mc_buf_head(&resp), mc_buf_used(&resp));
    uint32_t n = mc_buf_used(&resp) ? mc_mp_read_map(&r) : 0;
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
    if (st == MC_OK)
        assert_memory_equal(mc_buf_head(&resp), mc_buf_head(&body), mc_buf_used(&body));
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    mc_rpc_client_destroy(c);
    return st;
}

/* ------------------------------------------------------- raw frames */

static int raw_connect(mc_rpc_server_t *s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(mc_rpc_server_port(s))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* Send a frame whose body is {field: bin}, or an empty map (field 0). */
static void raw_send(int fd, uint16_t method, uint8_t kind, uint64_t req_id, unsigned field,
                     const uint8_t *bin, uint32_t len)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_buf_reserve(&b, MC_FRAME_HDR_LEN);
    mc_buf_produce(&b, MC_FRAME_HDR_LEN);
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_map(&w, field ? 1 : 0);
    if (field) {
        mc_mp_write_uint(&w, field);
        mc_mp_write_bin(&w, bin, len);
    }
    mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                        .kind = kind,
                        .method = method,
                        .req_id = req_id,
                        .body_len = (uint32_t)(mc_buf_used(&b) - MC_FRAME_HDR_LEN)};
    mc_frame_encode_hdr(mc_buf_head(&b), &h);
    assert_int_equal(send(fd, mc_buf_head(&b), mc_buf_used(&b), MSG_NOSIGNAL),
                     (ssize_t)mc_buf_used(&b));
    mc_buf_fini(&b);
}

/* Read one response frame within 3 s: its header, body in body (room);
 * 0, or -1 when the connection closed first. */
static int raw_recv(int fd, mc_frame_hdr_t *h, uint8_t *body, size_t room)
{
    uint8_t buf[MC_FRAME_HDR_LEN + 512];
    size_t got = 0, need = MC_FRAME_HDR_LEN;
    uint64_t deadline = mc_now_ms() + 3000;
    while (got < need) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (mc_now_ms() >= deadline || poll(&p, 1, 100) < 0)
            return -1;
        if (!(p.revents & (POLLIN | POLLHUP)))
            continue;
        ssize_t n = recv(fd, buf + got, sizeof(buf) - got, 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
        if (got >= MC_FRAME_HDR_LEN && need == MC_FRAME_HDR_LEN) {
            const char *why = NULL;
            mc_frame_limits_t lim;
            mc_frame_limits_init(&lim);
            assert_int_equal(mc_frame_decode_hdr(buf, got, &lim, h, &why), MC_OK);
            need = MC_FRAME_HDR_LEN + h->body_len;
            assert_true(need <= sizeof(buf) && h->body_len <= room);
        }
    }
    memcpy(body, buf + MC_FRAME_HDR_LEN, h->body_len);
    return 0;
}

/* The bin field id of a response body, len bytes, into out. */
static int body_bin(const uint8_t *body, size_t blen, unsigned id, uint8_t *out, uint32_t len)
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

static int closed_within(int fd, int ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)ms;
    char b[256];
    while (mc_now_ms() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) == 1) {
            ssize_t n = recv(fd, b, sizeof(b), 0);
            if (n <= 0)
                return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------- tests */

static void the_right_secret_gets_in(void **state)
{
    env_t *e = *state;
    char why[256];
    int before = atomic_load(&handled);
    assert_int_equal(echo(e, e->with_key, &e->k, why, sizeof(why)), MC_OK);
    assert_int_equal(atomic_load(&handled), before + 1);
    mc_rpc_server_stats_t st;
    mc_rpc_server_stats(e->with_key, &st);
    assert_true(st.auth_ok >= 1);
    /* no key on either side: today's behaviour */
    assert_int_equal(echo(e, e->without_key, NULL, why, sizeof(why)), MC_OK);
}

static void a_wrong_secret_is_refused_and_nothing_is_processed(void **state)
{
    env_t *e = *state;
    char why[256];
    int before = atomic_load(&handled);
    mc_rpc_server_stats_t st;
    mc_rpc_server_stats(e->with_key, &st);
    uint64_t failed0 = st.auth_failed;
    /* the client finds the server's proof wrong and hangs up: the server
     * counts a handshake that was never completed */
    assert_int_equal(echo(e, e->with_key, &e->other, why, sizeof(why)), MC_ERR_REJECT_HANDSHAKE);
    assert_int_equal(atomic_load(&handled), before);
    uint64_t deadline = mc_now_ms() + 3000;
    do
        mc_rpc_server_stats(e->with_key, &st);
    while (st.auth_failed == failed0 && mc_now_ms() < deadline && usleep(5000) == 0);
    assert_true(st.auth_failed > failed0);
}

static void a_secret_on_one_side_only_is_refused_both_ways(void **state)
{
    env_t *e = *state;
    char why[256];
    int before = atomic_load(&handled);
    /* a client without the secret: the server says why and closes */
    assert_int_equal(echo(e, e->with_key, NULL, why, sizeof(why)), MC_ERR_REJECT_HANDSHAKE);
    assert_non_null(strstr(why, "authentication required"));
    /* a client with a secret will not talk to a server that cannot prove one */
    assert_int_equal(echo(e, e->without_key, &e->k, why, sizeof(why)), MC_ERR_REJECT_HANDSHAKE);
    assert_int_equal(atomic_load(&handled), before);
}

static void a_replayed_handshake_is_refused(void **state)
{
    env_t *e = *state;
    uint8_t nc[MC_AUTH_NONCE_LEN], ns[MC_AUTH_NONCE_LEN], sproof[MC_AUTH_PROOF_LEN];
    uint8_t cproof[MC_AUTH_PROOF_LEN], body[512];
    mc_frame_hdr_t h;
    mc_auth_nonce(nc);
    /* a legitimate handshake, recorded */
    int fd = raw_connect(e->with_key);
    raw_send(fd, MC_RPC_AUTH_HELLO, MC_FRAME_REQUEST, 1, MC_F_NONCE, nc, sizeof(nc));
    assert_int_equal(raw_recv(fd, &h, body, sizeof(body)), 0);
    assert_int_equal(h.status, MC_OK);
    assert_int_equal(body_bin(body, h.body_len, MC_F_NONCE, ns, sizeof(ns)), 0);
    assert_int_equal(body_bin(body, h.body_len, MC_F_PROOF, sproof, sizeof(sproof)), 0);
    assert_true(mc_auth_check(&e->k, MC_AUTH_SERVER, nc, ns, sproof, sizeof(sproof)));
    mc_auth_proof(&e->k, MC_AUTH_CLIENT, ns, nc, cproof);
    raw_send(fd, MC_RPC_AUTH_PROOF, MC_FRAME_NOTIFY, 2, MC_F_PROOF, cproof, sizeof(cproof));
    int before = atomic_load(&handled);
    raw_send(fd, MC_RPC_ECHO, MC_FRAME_REQUEST, 3, 0, NULL, 0);
    assert_int_equal(raw_recv(fd, &h, body, sizeof(body)), 0);
    assert_int_equal(h.status, MC_OK);
    assert_int_equal(atomic_load(&handled), before + 1);
    close(fd);

    /* the same frames on a new connection: the server's nonce is new, so the
     * recorded proof is worthless */
    fd = raw_connect(e->with_key);
    raw_send(fd, MC_RPC_AUTH_HELLO, MC_FRAME_REQUEST, 1, MC_F_NONCE, nc, sizeof(nc));
    assert_int_equal(raw_recv(fd, &h, body, sizeof(body)), 0);
    uint8_t ns2[MC_AUTH_NONCE_LEN];
    assert_int_equal(body_bin(body, h.body_len, MC_F_NONCE, ns2, sizeof(ns2)), 0);
    assert_memory_not_equal(ns, ns2, sizeof(ns));
    raw_send(fd, MC_RPC_AUTH_PROOF, MC_FRAME_NOTIFY, 2, MC_F_PROOF, cproof, sizeof(cproof));
    raw_send(fd, MC_RPC_ECHO, MC_FRAME_REQUEST, 3, 0, NULL, 0);
    assert_true(closed_within(fd, 3000));
    assert_int_equal(atomic_load(&handled), before + 1);
    close(fd);
}

static void frames_before_the_handshake_are_never_processed(void **state)
{
    env_t *e = *state;
    uint8_t body[512];
    mc_frame_hdr_t h;
    int before = atomic_load(&handled);
    /* a request first: refused with the reason, then closed */
    int fd = raw_connect(e->with_key);
    raw_send(fd, MC_RPC_ECHO, MC_FRAME_REQUEST, 5, 0, NULL, 0);
    raw_send(fd, MC_RPC_ECHO, MC_FRAME_REQUEST, 6, 0, NULL, 0);
    assert_int_equal(raw_recv(fd, &h, body, sizeof(body)), 0);
    assert_int_equal(h.req_id, 5);
    assert_int_equal(h.status, MC_ERR_REJECT_HANDSHAKE);
    assert_true(closed_within(fd, 3000));
    close(fd);
    /* a large frame first: closed before it is buffered */
    fd = raw_connect(e->with_key);
    static uint8_t big[1 << 16];
    mc_frame_hdr_t bh = {.version = MC_FRAME_VERSION,
                         .kind = MC_FRAME_REQUEST,
                         .method = MC_RPC_ECHO,
                         .req_id = 7,
                         .body_len = 1 << 20};
    mc_frame_encode_hdr(big, &bh);
    (void)send(fd, big, sizeof(big), MSG_NOSIGNAL);
    assert_true(closed_within(fd, 3000));
    close(fd);
    /* a hello with a wrong-size nonce */
    fd = raw_connect(e->with_key);
    raw_send(fd, MC_RPC_AUTH_HELLO, MC_FRAME_REQUEST, 8, MC_F_NONCE, body, 5);
    assert_int_equal(raw_recv(fd, &h, body, sizeof(body)), 0);
    assert_int_equal(h.status, MC_ERR_REJECT_HANDSHAKE);
    assert_true(closed_within(fd, 3000));
    close(fd);
    assert_int_equal(atomic_load(&handled), before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_right_secret_gets_in),
        cmocka_unit_test(a_wrong_secret_is_refused_and_nothing_is_processed),
        cmocka_unit_test(a_secret_on_one_side_only_is_refused_both_ways),
        cmocka_unit_test(a_replayed_handshake_is_refused),
        cmocka_unit_test(frames_before_the_handshake_are_never_processed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
