/*
 * The blocking connection of one thread (rpc/bconn.h) against a real RPC
 * server in this process: calls and the server's statuses; a server that
 * restarted between calls (the connection is reopened, the call does not
 * fail); a server that is down (CONN_CLOSED at once); a handler that never
 * answers in time (RPC_TIMEOUT within the timeout, and the late answer is
 * never taken for the next call's); a new target; the authentication
 * handshake with the right key, a wrong one and none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "cluster.h"
#include "rpc/bconn.h"
#include "rpc_util.h"

#define SLOW TC_SLOW
#define CALL_US (3000000ull * SLOW)

static atomic_int handled;

/* echo; a body of "fail" is answered OBJECT_NOT_FOUND */
static void h_echo(void *ctx, mc_rpc_req_t *req)
{
    (void)ctx;
    atomic_fetch_add(&handled, 1);
    size_t len;
    const uint8_t *body = mc_rpc_req_body(req, &len);
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, body, len);
    uint32_t n = len ? mc_mp_read_map(&r) : 0;
    uint32_t sl = 0;
    const char *str = n == 1 && mc_mp_read_uint(&r) == 1 ? mc_mp_read_str(&r, &sl) : NULL;
    if (str != NULL && sl == 4 && memcmp(str, "fail", 4) == 0)
        mc_rpc_reply(req, MC_ERR_OBJECT_NOT_FOUND, NULL, 0);
    else
        mc_rpc_reply(req, MC_OK, body, len);
}

/* a request held until the test lets it go (held_req) */
static mc_rpc_req_t *_Atomic held_req;

static void h_hold(void *ctx, mc_rpc_req_t *req)
{
    (void)ctx;
    atomic_store(&held_req, req);
}

static void release_held(void *arg)
{
    (void)arg;
    mc_rpc_req_t *req = atomic_exchange(&held_req, NULL);
    if (req != NULL)
        mc_rpc_reply(req, MC_OK, NULL, 0); /* (late: its caller gave up) */
}

typedef struct env {
    mc_reactor_group_t *g;
    mc_rpc_server_t *srv;
    unsigned port;
} env_t;

/* The server on port (0: a free one; a restart gives the old one). */
static void start_server(env_t *e, unsigned port, const mc_auth_key_t *key)
{
    static const rt_method_t m[] = {{MC_RPC_ECHO, h_echo}, {MC_RPC_ECHO_SLOW, h_hold}};
    e->srv = rt_server_start(mc_reactor_group_get(e->g, 0), port, key, m, 2);
    e->port = mc_rpc_server_port(e->srv);
}

/* c: a connection (key: NULL = none) to the server of e. */
static void conn_open(env_t *e, mc_rpc_bconn_t *c, const mc_auth_key_t *key)
{
    mc_rpc_bconn_init(c, key);
    mc_rpc_bconn_target(c, "127.0.0.1", (uint16_t)e->port);
}

/* A server without a key and c, a connection to it: its port. */
static unsigned serve_one(env_t *e, mc_rpc_bconn_t *c)
{
    start_server(e, 0, NULL);
    conn_open(e, c, NULL);
    return e->port;
}

static void stop_server(env_t *e)
{
    mc_rpc_server_destroy(e->srv);
    e->srv = NULL;
}

static int setup(void **state)
{
    static env_t e;
    signal(SIGPIPE, SIG_IGN);
    e.g = rt_group_create(1, "srv");
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    mc_reactor_group_destroy(e->g);
    return 0;
}

/* {1: s} */
static void body_str(mc_buf_t *b, const char *s)
{
    mc_buf_reset(b);
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, b);
    mc_mp_write_map(&w, 1);
    mc_mp_write_uint(&w, 1);
    mc_mp_write_cstr(&w, s);
    assert_int_equal(w.err, MC_OK);
}

static mc_status_t call(mc_rpc_bconn_t *c, uint16_t method, const char *s, mc_buf_t *resp,
                        uint64_t timeout_us)
{
    mc_buf_t b = MC_BUF_INIT;
    body_str(&b, s);
    if (resp != NULL)
        mc_buf_reset(resp);
    mc_status_t st =
        mc_rpc_bconn_call(c, method, mc_buf_head(&b), mc_buf_used(&b), timeout_us, resp);
    mc_buf_fini(&b);
    return st;
}

/* resp is the echo of s. */
static void assert_echo(const mc_buf_t *resp, const char *s)
{
    mc_buf_t want = MC_BUF_INIT;
    body_str(&want, s);
    assert_int_equal(mc_buf_used(resp), mc_buf_used(&want));
    assert_memory_equal(mc_buf_head(resp), mc_buf_head(&want), mc_buf_used(&want));
    mc_buf_fini(&want);
}

static void calls_are_answered_with_the_servers_status_and_body(void **state)
{
    env_t *e = *state;
    mc_rpc_bconn_t c;
    serve_one(e, &c);
    mc_buf_t resp = MC_BUF_INIT;
    for (int i = 0; i < 100; i++) {
        assert_int_equal(call(&c, MC_RPC_ECHO, "hello", &resp, CALL_US), MC_OK);
        assert_echo(&resp, "hello");
    }
    assert_int_equal(call(&c, MC_RPC_ECHO, "fail", &resp, CALL_US), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(call(&c, MC_RPC_ECHO, "again", NULL, CALL_US), MC_OK);
    /* a method nobody serves */
    assert_int_equal(call(&c, 60000, "x", NULL, CALL_US), MC_ERR_NO_METHOD);
    mc_rpc_bconn_fini(&c);
    mc_buf_fini(&resp);
    stop_server(e);
}

static void
a_server_restarted_between_calls_is_called_again_and_one_down_fails_at_once(void **state)
{
    env_t *e = *state;
    mc_rpc_bconn_t c;
    unsigned port = serve_one(e, &c);
    assert_int_equal(call(&c, MC_RPC_ECHO, "one", NULL, CALL_US), MC_OK);
    /* down: the call says so at once (nobody listens) */
    stop_server(e);
    uint64_t t0 = mc_now_us();
    assert_int_equal(call(&c, MC_RPC_ECHO, "down", NULL, CALL_US), MC_ERR_CONN_CLOSED);
    assert_true(mc_now_us() - t0 < CALL_US);
    assert_int_equal(call(&c, MC_RPC_ECHO, "down", NULL, CALL_US), MC_ERR_CONN_CLOSED);
    /* back on the same port: the next call connects again */
    start_server(e, port, NULL);
    assert_int_equal(call(&c, MC_RPC_ECHO, "two", NULL, CALL_US), MC_OK);
    /* restarted while we were connected and idle: the closed connection is
     * noticed before the call, which goes to the new server (no failure) */
    stop_server(e);
    start_server(e, port, NULL);
    usleep(20000); /* (the close reaches our socket) */
    int before = atomic_load(&handled);
    assert_int_equal(call(&c, MC_RPC_ECHO, "three", NULL, CALL_US), MC_OK);
    assert_int_equal(atomic_load(&handled), before + 1);
    mc_rpc_bconn_fini(&c);
    stop_server(e);
}

static void a_late_answer_is_never_taken_for_the_next_calls(void **state)
{
    env_t *e = *state;
    mc_rpc_bconn_t c;
    serve_one(e, &c);
    uint64_t t0 = mc_now_us();
    assert_int_equal(call(&c, MC_RPC_ECHO_SLOW, "held", NULL, 200000), MC_ERR_RPC_TIMEOUT);
    uint64_t dt = mc_now_us() - t0;
    assert_true(dt >= 200000 && dt < 200000 + 1000000 * SLOW);
    /* the server answers now, late; the next call gets its own answer */
    mc_rpc_run_on(mc_reactor_group_get(e->g, 0), release_held, NULL);
    mc_buf_t resp = MC_BUF_INIT;
    assert_int_equal(call(&c, MC_RPC_ECHO, "fresh", &resp, CALL_US), MC_OK);
    assert_echo(&resp, "fresh");
    mc_buf_fini(&resp);
    mc_rpc_bconn_fini(&c);
    stop_server(e);
}

static void a_new_target_is_called_from_the_next_call_on(void **state)
{
    env_t *e = *state;
    mc_rpc_bconn_t c;
    unsigned first = serve_one(e, &c);
    assert_int_equal(call(&c, MC_RPC_ECHO, "a", NULL, CALL_US), MC_OK);
    /* a port nobody listens on */
    unsigned other = test_free_port();
    mc_rpc_bconn_target(&c, "127.0.0.1", (uint16_t)other);
    assert_int_equal(call(&c, MC_RPC_ECHO, "b", NULL, CALL_US), MC_ERR_CONN_CLOSED);
    mc_rpc_bconn_target(&c, "127.0.0.1", (uint16_t)first);
    assert_int_equal(call(&c, MC_RPC_ECHO, "c", NULL, CALL_US), MC_OK);
    mc_rpc_bconn_target(&c, "no-such-host.invalid", 1);
    assert_int_equal(call(&c, MC_RPC_ECHO, "d", NULL, CALL_US), MC_ERR_DNS);
    mc_rpc_bconn_fini(&c);
    stop_server(e);
}

static void the_handshake_admits_the_right_key_only(void **state)
{
    env_t *e = *state;
    mc_auth_key_t k, other;
    assert_int_equal(mc_auth_key_from("the cluster secret, 32 bytes....", 32, &k), MC_OK);
    assert_int_equal(mc_auth_key_from("another secret of 32 bytes......", 32, &other), MC_OK);
    start_server(e, 0, &k);
    mc_rpc_bconn_t right, wrong, none;
    conn_open(e, &right, &k);
    conn_open(e, &wrong, &other);
    conn_open(e, &none, NULL);
    int before = atomic_load(&handled);
    assert_int_equal(call(&right, MC_RPC_ECHO, "in", NULL, CALL_US), MC_OK);
    assert_int_equal(call(&right, MC_RPC_ECHO, "in again", NULL, CALL_US), MC_OK);
    assert_int_equal(call(&wrong, MC_RPC_ECHO, "out", NULL, CALL_US), MC_ERR_REJECT_HANDSHAKE);
    /* no key: the server refuses the frame (and never runs it) */
    mc_status_t st = call(&none, MC_RPC_ECHO, "out", NULL, CALL_US);
    assert_true(st == MC_ERR_REJECT_HANDSHAKE || st == MC_ERR_CONN_CLOSED);
    assert_int_equal(atomic_load(&handled), before + 2);
    mc_rpc_bconn_fini(&right);
    mc_rpc_bconn_fini(&wrong);
    mc_rpc_bconn_fini(&none);
    stop_server(e);
    /* a key, and a server without one */
    start_server(e, 0, NULL);
    conn_open(e, &right, &k);
    assert_int_equal(call(&right, MC_RPC_ECHO, "x", NULL, CALL_US), MC_ERR_REJECT_HANDSHAKE);
    mc_rpc_bconn_fini(&right);
    stop_server(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(calls_are_answered_with_the_servers_status_and_body),
        cmocka_unit_test(
            a_server_restarted_between_calls_is_called_again_and_one_down_fails_at_once),
        cmocka_unit_test(a_late_answer_is_never_taken_for_the_next_calls),
        cmocka_unit_test(a_new_target_is_called_from_the_next_call_on),
        cmocka_unit_test(the_handshake_admits_the_right_key_only),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
