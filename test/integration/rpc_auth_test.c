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

#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "rpc_util.h"

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
    static const rt_method_t m[] = {{MC_RPC_ECHO, h_echo}};
    return rt_server_start(mc_reactor_group_get(e->g, 0), 0, key, m, 1);
}

static int setup(void **state)
{
    static env_t e;
    signal(SIGPIPE, SIG_IGN);
    e.g = rt_group_create(2, "auth");
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
    mc_rpc_client_t *c =
        rt_client_create(mc_reactor_group_get(e->g, 1), mc_rpc_server_port(s), key, 0);
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mp_write_map(&w, 1);
    mc_mp_write_uint(&w, 1);
    mc_mp_write_cstr(&w, "hello");
    mc_status_t st =
        mc_rpc_call_sync(c, MC_RPC_ECHO, mc_buf_head(&body), mc_buf_used(&body), CALL_US, &resp);
    rt_reason(&resp, why, room);
    if (st == MC_OK)
        assert_memory_equal(mc_buf_head(&resp), mc_buf_head(&body), mc_buf_used(&body));
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    mc_rpc_client_destroy(c);
    return st;
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
    uint8_t nc[MC_AUTH_NONCE_LEN], ns[MC_AUTH_NONCE_LEN];
    uint8_t cproof[MC_AUTH_PROOF_LEN], body[512];
    mc_frame_hdr_t h;
    mc_auth_nonce(nc);
    /* a legitimate handshake (the server's proof checked), recorded */
    int fd = rt_connect(mc_rpc_server_port(e->with_key));
    rt_handshake(fd, &e->k, nc, ns, cproof, 3000);
    int before = atomic_load(&handled);
    rt_bin(fd, MC_RPC_ECHO, MC_FRAME_REQUEST, 3, 0, NULL, 0);
    assert_int_equal(rt_recv(fd, &h, body, sizeof(body), 3000), 0);
    assert_int_equal(h.status, MC_OK);
    assert_int_equal(atomic_load(&handled), before + 1);
    close(fd);

    /* the same frames on a new connection: the server's nonce is new, so the
     * recorded proof is worthless */
    fd = rt_connect(mc_rpc_server_port(e->with_key));
    rt_bin(fd, MC_RPC_AUTH_HELLO, MC_FRAME_REQUEST, 1, MC_F_NONCE, nc, sizeof(nc));
    assert_int_equal(rt_recv(fd, &h, body, sizeof(body), 3000), 0);
    uint8_t ns2[MC_AUTH_NONCE_LEN];
    assert_int_equal(rt_body_bin(body, h.body_len, MC_F_NONCE, ns2, sizeof(ns2)), 0);
    assert_memory_not_equal(ns, ns2, sizeof(ns));
    rt_bin(fd, MC_RPC_AUTH_PROOF, MC_FRAME_NOTIFY, 2, MC_F_PROOF, cproof, sizeof(cproof));
    rt_bin(fd, MC_RPC_ECHO, MC_FRAME_REQUEST, 3, 0, NULL, 0);
    assert_true(rt_closed_within(fd, 3000));
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
    int fd = rt_connect(mc_rpc_server_port(e->with_key));
    rt_bin(fd, MC_RPC_ECHO, MC_FRAME_REQUEST, 5, 0, NULL, 0);
    rt_bin(fd, MC_RPC_ECHO, MC_FRAME_REQUEST, 6, 0, NULL, 0);
    assert_int_equal(rt_recv(fd, &h, body, sizeof(body), 3000), 0);
    assert_int_equal(h.req_id, 5);
    assert_int_equal(h.status, MC_ERR_REJECT_HANDSHAKE);
    assert_true(rt_closed_within(fd, 3000));
    close(fd);
    /* a large frame first: closed before it is buffered */
    fd = rt_connect(mc_rpc_server_port(e->with_key));
    static uint8_t big[1 << 16];
    mc_frame_hdr_t bh = {.version = MC_FRAME_VERSION,
                         .kind = MC_FRAME_REQUEST,
                         .method = MC_RPC_ECHO,
                         .req_id = 7,
                         .body_len = 1 << 20};
    mc_frame_encode_hdr(big, &bh);
    (void)send(fd, big, sizeof(big), MSG_NOSIGNAL);
    assert_true(rt_closed_within(fd, 3000));
    close(fd);
    /* a hello with a wrong-size nonce */
    fd = rt_connect(mc_rpc_server_port(e->with_key));
    rt_bin(fd, MC_RPC_AUTH_HELLO, MC_FRAME_REQUEST, 8, MC_F_NONCE, body, 5);
    assert_int_equal(rt_recv(fd, &h, body, sizeof(body), 3000), 0);
    assert_int_equal(h.status, MC_ERR_REJECT_HANDSHAKE);
    assert_true(rt_closed_within(fd, 3000));
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
