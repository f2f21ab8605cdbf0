/*
 * RPC end to end: an echo server process with 2 reactors, 4 client
 * connections on 2 client reactors doing pipelined calls; a garbage-sending
 * client is disconnected while the others continue; killing the server
 * mid-call completes every pending call with an error exactly once; a
 * restarted server is reached again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "cluster.h"
#include "rpc_util.h"
#include "reactor/reactor.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "util/log.h"
#include "util/time.h"

#define NCLIENTS 4
#define CALLS_PER_CLIENT 5000
#define DEPTH 32
#define SLOW_CALLS 50

typedef struct env {
    test_proc_t server;
    unsigned port;
    mc_reactor_group_t *g;
    mc_rpc_client_t *cli[NCLIENTS];
} env_t;

static void start_server(env_t *e, unsigned port)
{
    char bin[256], pbuf[16];
    snprintf(pbuf, sizeof(pbuf), "%u", port);
    char *argv[] = {(char *)test_bin("echo_server", bin, sizeof(bin)), "-r", "2", "-p", pbuf, NULL};
    assert_int_equal(tc_spawn(&e->server, argv), 0);
    long p = test_proc_expect_num(&e->server, "port ", 5000);
    assert_true(p > 0);
    e->port = (unsigned)p;
}

static int setup(void **state)
{
    static env_t e;
    memset(&e, 0, sizeof(e));
    signal(SIGPIPE, SIG_IGN);
    start_server(&e, 0);
    rt_clients_create(&e.g, e.cli, NCLIENTS, e.port);
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    rt_clients_destroy(e->g, e->cli, NCLIENTS);
    if (e->server.pid > 0)
        tc_stop_ms(&e->server, SIGTERM, 5000);
    return 0;
}

/* ------------------------------------------------- pipelined echo driver */

#define SLOTS DEPTH

typedef struct driver driver_t;

typedef struct slot {
    driver_t *d;
    int busy;
    size_t len;
    uint8_t sent[256]; /* the body this slot's call carried */
} slot_t;

struct driver {
    mc_reactor_msg_t msg;
    mc_rpc_client_t *c;
    unsigned seed;
    int issued, completed, bad;
    slot_t slots[SLOTS];
    atomic_int *done;
};

static void driver_issue(driver_t *d);

static void driver_cb(void *arg, const mc_rpc_resp_t *resp)
{
    slot_t *s = arg;
    driver_t *d = s->d;
    if (resp->status != MC_OK || resp->body_len != s->len ||
        memcmp(resp->body, s->sent, s->len) != 0)
        d->bad++;
    s->busy = 0;
    d->completed++;
    if (d->completed == CALLS_PER_CLIENT)
        atomic_fetch_add(d->done, 1);
    else
        driver_issue(d);
}

/* Keep DEPTH calls in flight until CALLS_PER_CLIENT were issued. Each body
 * is {1: seq, 2: random bytes of random length}. */
static void driver_issue(driver_t *d)
{
    while (d->issued < CALLS_PER_CLIENT && d->issued - d->completed < DEPTH) {
        slot_t *s = d->slots;
        while (s->busy)
            s++;
        uint8_t bin[200];
        size_t blen = (size_t)(rand_r(&d->seed) % sizeof(bin));
        for (size_t i = 0; i < blen; i++)
            bin[i] = (uint8_t)rand_r(&d->seed);
        mc_mp_writer_t *w = mc_rpc_call_begin(d->c);
        size_t mark = mc_buf_used(w->buf);
        mc_mp_write_map(w, 2);
        mc_mp_write_uint(w, 1);
        mc_mp_write_uint(w, (uint64_t)d->issued);
        mc_mp_write_uint(w, 2);
        mc_mp_write_bin(w, bin, blen);
        s->len = mc_buf_used(w->buf) - mark;
        memcpy(s->sent, mc_buf_head(w->buf) + mark, s->len);
        s->busy = 1;
        if (mc_rpc_call_end(d->c, MC_RPC_ECHO, 10000000, driver_cb, s) != MC_INPROGRESS) {
            d->bad++;
            s->busy = 0;
        }
        d->issued++;
    }
}

static void driver_start(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    (void)r;
    (void)st;
    driver_issue(MC_CONTAINER_OF(msg, driver_t, msg));
}

static void pipelined_calls_on_four_connections_all_return_their_bodies(void **state)
{
    env_t *e = *state;
    static driver_t d[NCLIENTS];
    atomic_int done = 0;
    for (int i = 0; i < NCLIENTS; i++) {
        memset(&d[i], 0, sizeof(d[i]));
        d[i].c = e->cli[i];
        d[i].seed = (unsigned)i + 1;
        d[i].done = &done;
        d[i].msg.fn = driver_start;
        for (int s = 0; s < SLOTS; s++)
            d[i].slots[s].d = &d[i];
    }
    for (int i = 0; i < NCLIENTS; i++)
        assert_int_equal(mc_reactor_post(mc_reactor_group_get(e->g, (unsigned)i % 2), &d[i].msg),
                         MC_OK);
    assert_true(rt_wait_count(&done, NCLIENTS, 60000));
    for (int i = 0; i < NCLIENTS; i++) {
        assert_int_equal(d[i].completed, CALLS_PER_CLIENT);
        assert_int_equal(d[i].bad, 0);
    }
}

static mc_status_t echo_sync(mc_rpc_client_t *c, const char *text)
{
    uint8_t body[128];
    mc_buf_t req = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &req);
    mc_mp_write_map(&w, 1);
    mc_mp_write_uint(&w, 1);
    mc_mp_write_cstr(&w, text);
    assert_true(mc_buf_used(&req) < sizeof(body));
    mc_status_t st =
        mc_rpc_call_sync(c, MC_RPC_ECHO, mc_buf_head(&req), mc_buf_used(&req), 2000000, &resp);
    if (st == MC_OK && (mc_buf_used(&resp) != mc_buf_used(&req) ||
                        memcmp(mc_buf_head(&resp), mc_buf_head(&req), mc_buf_used(&req)) != 0))
        st = MC_ERR_INTERNAL_ERROR;
    mc_buf_fini(&req);
    mc_buf_fini(&resp);
    return st;
}

static void garbage_senders_are_disconnected_while_others_continue(void **state)
{
    env_t *e = *state;
    assert_int_equal(echo_sync(e->cli[0], "before"), MC_OK);

    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n and more garbage to fill a header";
    assert_true(rt_sent_is_disconnected(e->port, junk, sizeof(junk)));

    /* A valid header announcing a body over the 64 MiB limit. */
    uint8_t hdr[MC_FRAME_HDR_LEN];
    mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                        .kind = MC_FRAME_REQUEST,
                        .method = MC_RPC_ECHO,
                        .req_id = 1,
                        .body_len = 0xFFFFFFF0u};
    mc_frame_encode_hdr(hdr, &h);
    assert_true(rt_sent_is_disconnected(e->port, hdr, sizeof(hdr)));

    /* A complete frame whose body is not a map. */
    uint8_t frame[MC_FRAME_HDR_LEN + 1];
    h.body_len = 1;
    mc_frame_encode_hdr(frame, &h);
    frame[MC_FRAME_HDR_LEN] = 0x91; /* fixarray of one: missing element */
    assert_true(rt_sent_is_disconnected(e->port, frame, sizeof(frame)));

    for (int i = 0; i < NCLIENTS; i++)
        assert_int_equal(echo_sync(e->cli[i], "after"), MC_OK);
}

static void unknown_methods_get_a_clear_status(void **state)
{
    env_t *e = *state;
    mc_buf_t resp = MC_BUF_INIT;
    assert_int_equal(mc_rpc_call_sync(e->cli[1], 999, NULL, 0, 2000000, &resp), MC_ERR_NO_METHOD);
    mc_buf_fini(&resp);
}

/* ----------------------------------------------------- server killed */

typedef struct slow_batch slow_batch_t;

typedef struct slow_call {
    slow_batch_t *b;
    atomic_int seen; /* callbacks run for this call */
    atomic_int status;
} slow_call_t;

struct slow_batch {
    mc_reactor_msg_t msg;
    mc_rpc_client_t *c;
    slow_call_t calls[SLOW_CALLS];
    atomic_int refused;
    atomic_int *completed;
};

static void slow_cb(void *arg, const mc_rpc_resp_t *resp)
{
    slow_call_t *k = arg;
    atomic_store(&k->status, resp->status);
    atomic_fetch_add(&k->seen, 1);
    atomic_fetch_add(k->b->completed, 1);
}

static void slow_start(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    slow_batch_t *b = MC_CONTAINER_OF(msg, slow_batch_t, msg);
    (void)r;
    (void)st;
    for (int i = 0; i < SLOW_CALLS; i++) {
        mc_mp_writer_t *w = mc_rpc_call_begin(b->c);
        mc_mp_write_map(w, 1);
        mc_mp_write_uint(w, 1);
        mc_mp_write_uint(w, 30000000); /* 30 s: longer than the test */
        if (mc_rpc_call_end(b->c, MC_RPC_ECHO_SLOW, 60000000, slow_cb, &b->calls[i]) !=
            MC_INPROGRESS)
            atomic_fetch_add(&b->refused, 1);
    }
}

static void killing_the_server_fails_every_pending_call_exactly_once(void **state)
{
    env_t *e = *state;
    static slow_batch_t b[NCLIENTS];
    atomic_int completed = 0;
    for (int i = 0; i < NCLIENTS; i++) {
        memset(&b[i], 0, sizeof(b[i]));
        b[i].c = e->cli[i];
        b[i].completed = &completed;
        b[i].msg.fn = slow_start;
        for (int k = 0; k < SLOW_CALLS; k++)
            b[i].calls[k].b = &b[i];
        assert_int_equal(mc_reactor_post(mc_reactor_group_get(e->g, (unsigned)i % 2), &b[i].msg),
                         MC_OK);
    }
    /* An echo behind the slow calls on each connection returns only after the
     * server has read (and parked) every slow call before it. */
    for (int i = 0; i < NCLIENTS; i++)
        assert_int_equal(echo_sync(e->cli[i], "behind the slow calls"), MC_OK);
    assert_int_equal(atomic_load(&completed), 0);

    tc_stop_ms(&e->server, SIGKILL, 5000);
    uint64_t t0 = mc_now_us();
    assert_true(rt_wait_count(&completed, NCLIENTS * SLOW_CALLS, 5000));
    uint64_t took = mc_now_us() - t0;
    print_message("all %d pending calls failed %llu ms after the kill\n", NCLIENTS * SLOW_CALLS,
                  (unsigned long long)(took / 1000));
    usleep(100000); /* a second callback, if any, would show up here */
    for (int i = 0; i < NCLIENTS; i++) {
        assert_int_equal(atomic_load(&b[i].refused), 0);
        for (int k = 0; k < SLOW_CALLS; k++) {
            assert_int_equal(atomic_load(&b[i].calls[k].seen), 1);
            assert_int_equal(atomic_load(&b[i].calls[k].status), MC_ERR_CONN_CLOSED);
        }
    }

    /* While the server is down calls fail promptly and clearly... */
    mc_status_t st = echo_sync(e->cli[0], "nobody home");
    assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);

    /* ...and a server restarted on the same port is reached again. */
    start_server(e, e->port);
    for (int i = 0; i < NCLIENTS; i++) {
        mc_status_t s2 = MC_ERR_CONN_CLOSED;
        for (int attempt = 0; attempt < 50 && s2 != MC_OK; attempt++) {
            s2 = echo_sync(e->cli[i], "back again");
            if (s2 != MC_OK)
                usleep(20000);
        }
        assert_int_equal(s2, MC_OK);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pipelined_calls_on_four_connections_all_return_their_bodies),
        cmocka_unit_test(garbage_senders_are_disconnected_while_others_continue),
        cmocka_unit_test(unknown_methods_get_a_clear_status),
        cmocka_unit_test(killing_the_server_fails_every_pending_call_exactly_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
