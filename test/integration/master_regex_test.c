/*
 * Regexes cannot hurt the master (issue 13, findings 1 and 2), against a real
 * mooncake-master with one reactor (the default on a one-node machine):
 *  - the regex of death `(.*){1,32767}` (glibc's regcomp overflowed its
 *    stack: SIGSEGV) is refused with the reason over RPC and HTTP, and the
 *    master keeps serving;
 *  - a backtracking pattern over thousands of keys (glibc's regexec froze the
 *    only reactor for as long as the walk took) runs off the reactor: a ping
 *    sent on the same connection after it is answered before it, HTTP is
 *    answered meanwhile, and the scan stops at server.regex_timeout with
 *    INVALID_PARAMS naming the budget; a remove by that regex removes nothing.
 * Responsiveness is asserted by order (the ping's answer comes first), not by
 * timing thresholds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>

#include "cluster.h"
#include "reactor/reactor.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/master_client.h"
#include "util/mem.h"
#include "util/time.h"

#define NKEYS 8000
#define NAS 13 /* a's per key: ~1 ms of backtracking each, under the match limit */
#define CALL_TIMEOUT_US 30000000

static const mc_uuid_t CLIENT = {0x5ca7, 1};
static const mc_master_segment_t SEG = {.id = {0x5e6, 1},
                                        .name = "node-r:17001",
                                        .te_endpoint = "127.0.0.1:17001",
                                        .base = 0x100000000ull,
                                        .size = 1ull << 30};

typedef struct env {
    tc_master_t master;
    tc_rpc_t rpc; /* a client of the master */
} env_t;

/* ---------------------------------------------------------- the master */

static const char *const master_sets[] = {"server.regex_timeout=1s", "master.client_ttl=60s",
                                          "master.regex_max_len=200", "log.level=warn", NULL};

static int master_alive(env_t *e)
{
    return tc_alive(&e->master.proc, NULL);
}

/* GET path over HTTP/1.0; the status code, the body in *body (free it). */
static int http_get(unsigned port, const char *path, char **body)
{
    return tc_http_get(port, path, body, 10000);
}

static int64_t metric(env_t *e, const char *name)
{
    char *text = NULL;
    assert_int_equal(http_get(e->master.http_port, "/metrics", &text), 200);
    size_t nl = strlen(name);
    int64_t v = -1;
    for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (strncmp(p, name, nl) == 0 && p[nl] == ' ') {
            v = strtoll(p + nl + 1, NULL, 10);
            break;
        }
    free(text);
    return v;
}

/* ----------------------------------------------------------- RPC calls */

/* A blocking call; MC_F_ERROR (if any) NUL-terminated in why. */
static mc_status_t call(env_t *e, uint16_t method, const mc_buf_t *body, mc_buf_t *resp, char *why,
                        size_t room)
{
    mc_buf_reset(resp);
    mc_status_t st = tc_rpc_call(&e->rpc, method, body, CALL_TIMEOUT_US, resp);
    const void *p = NULL;
    size_t len = 0;
    if (why != NULL) {
        why[0] = '\0';
        if (mc_mcli_dec_bytes(mc_buf_head(resp), mc_buf_used(resp), MC_F_ERROR, &p, &len) ==
                MC_OK &&
            len < room) {
            memcpy(why, p, len);
            why[len] = '\0';
        }
    }
    return st;
}

static mc_status_t regex_call(env_t *e, uint16_t method, const char *re, char *why, size_t room)
{
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_regex(&w, re, 1);
    mc_status_t st = call(e, method, &body, &resp, why, room);
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return st;
}

static mc_status_t ping(env_t *e)
{
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_ping(&w, CLIENT);
    mc_status_t st = call(e, MC_RPC_PING, &body, &resp, NULL, 0);
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return st;
}

/* Mount a segment and put NKEYS keys that make `(a*)*\1z` backtrack. */
static void fill(env_t *e)
{
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_mount(&w, CLIENT, &SEG);
    assert_int_equal(call(e, MC_RPC_MOUNT_SEGMENT, &body, &resp, NULL, 0), MC_OK);

    static char keybuf[NKEYS][32];
    static mc_master_key_t keys[NKEYS];
    static uint64_t sizes[NKEYS];
    for (unsigned i = 0; i < NKEYS; i++) {
        memset(keybuf[i], 'a', NAS);
        snprintf(keybuf[i] + NAS, sizeof(keybuf[i]) - NAS, "b z/%05u", i);
        keys[i].data = keybuf[i];
        keys[i].len = strlen(keybuf[i]);
        sizes[i] = 64;
    }
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    mc_buf_reset(&body);
    mc_mp_writer_init(&w, &body);
    mc_mcli_batch_put_start(&w, CLIENT, keys, sizes, NKEYS, &cfg);
    assert_int_equal(call(e, MC_RPC_BATCH_PUT_START, &body, &resp, NULL, 0), MC_OK);
    mc_buf_reset(&body);
    mc_mp_writer_init(&w, &body);
    mc_mcli_client_keys(&w, CLIENT, keys, NKEYS);
    assert_int_equal(call(e, MC_RPC_BATCH_PUT_END, &body, &resp, NULL, 0), MC_OK);
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    assert_int_equal(metric(e, "master_key_count"), NKEYS);
}

/* Two calls pipelined on one connection from its reactor: a regex call,
 * then a ping. Completion order is recorded. */
typedef struct race {
    env_t *e;
    uint16_t method;
    const char *re;
    atomic_int seq;
    atomic_int regex_at, ping_at; /* completion order, 0 = not yet */
    mc_status_t regex_st, ping_st;
    char why[512];
} race_t;

static void regex_done(void *arg, const mc_rpc_resp_t *resp)
{
    race_t *r = arg;
    const void *p = NULL;
    size_t len = 0;
    r->regex_st = resp->status;
    if (resp->body != NULL &&
        mc_mcli_dec_bytes(resp->body, resp->body_len, MC_F_ERROR, &p, &len) == MC_OK &&
        len < sizeof(r->why)) {
        memcpy(r->why, p, len);
        r->why[len] = '\0';
    }
    atomic_store(&r->regex_at, atomic_fetch_add(&r->seq, 1) + 1);
}

static void ping_done(void *arg, const mc_rpc_resp_t *resp)
{
    race_t *r = arg;
    r->ping_st = resp->status;
    atomic_store(&r->ping_at, atomic_fetch_add(&r->seq, 1) + 1);
}

static void race_send(void *arg)
{
    race_t *r = arg;
    mc_mcli_regex(mc_rpc_call_begin(r->e->rpc.c), r->re, 1);
    assert_int_equal(mc_rpc_call_end(r->e->rpc.c, r->method, CALL_TIMEOUT_US, regex_done, r),
                     MC_INPROGRESS);
    mc_mcli_ping(mc_rpc_call_begin(r->e->rpc.c), CLIENT);
    assert_int_equal(mc_rpc_call_end(r->e->rpc.c, MC_RPC_PING, CALL_TIMEOUT_US, ping_done, r),
                     MC_INPROGRESS);
}

/* Wait (bounded) until *flag is set. */
static void wait_set(atomic_int *flag, uint64_t ms)
{
    uint64_t deadline = mc_now_ms() + ms;
    while (atomic_load(flag) == 0 && mc_now_ms() < deadline)
        usleep(2000);
    assert_int_not_equal(atomic_load(flag), 0);
}

/* ---------------------------------------------------------- fixtures */

static int setup(void **state)
{
    static env_t e;
    memset(&e, 0, sizeof(e));
    signal(SIGPIPE, SIG_IGN);
    assert_int_equal(tc_master_start(&e.master, master_sets), 0);
    assert_int_equal(tc_rpc_open(&e.rpc, e.master.rpc_port), 0);
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    tc_rpc_close(&e->rpc);
    if (e->master.proc.pid > 0)
        assert_int_equal(tc_stop_ms(&e->master.proc, SIGTERM, 10000), 0);
    return 0;
}

/* ------------------------------------------------------------- tests */

static void the_regex_of_death_is_refused_with_a_reason_and_the_master_lives(void **state)
{
    env_t *e = *state;
    char why[512];
    const char *death = "(.*){1,32767}";
    assert_int_equal(regex_call(e, MC_RPC_GET_REPLICA_LIST_BY_REGEX, death, why, sizeof(why)),
                     MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "too large"));
    assert_int_equal(regex_call(e, MC_RPC_REMOVE_BY_REGEX, death, why, sizeof(why)),
                     MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "too large"));

    char *body = NULL;
    assert_int_equal(http_get(e->master.http_port, "/keys?regex=%28.%2A%29%7B1%2C32767%7D", &body),
                     400);
    assert_non_null(strstr(body, "too large"));
    free(body);

    /* longer than master.regex_max_len (200 here) */
    char longre[300];
    memset(longre, 'x', 250);
    longre[250] = '\0';
    assert_int_equal(regex_call(e, MC_RPC_GET_REPLICA_LIST_BY_REGEX, longre, why, sizeof(why)),
                     MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "limit (200 bytes)"));

    assert_true(master_alive(e));
    assert_int_equal(ping(e), MC_OK);
}

static void a_backtracking_scan_runs_off_the_reactor_and_stops_at_its_deadline(void **state)
{
    env_t *e = *state;
    fill(e);
    static const uint16_t methods[] = {MC_RPC_GET_REPLICA_LIST_BY_REGEX, MC_RPC_REMOVE_BY_REGEX};
    for (size_t i = 0; i < MC_ARRAY_SIZE(methods); i++) {
        static race_t r;
        memset(&r, 0, sizeof(r));
        r.e = e;
        r.method = methods[i];
        r.re = "(a*)*\\1z";
        mc_rpc_run_on(mc_reactor_group_get(e->rpc.g, 0), race_send, &r);
        /* the ping was sent after the scan request, on the same connection:
         * it is answered first, while the scan runs */
        wait_set(&r.ping_at, 20000);
        assert_int_equal(r.ping_st, MC_OK);
        assert_int_equal(atomic_load(&r.regex_at), 0);
        /* so is HTTP, on the same (only) reactor */
        char *body = NULL;
        assert_int_equal(http_get(e->master.http_port, "/health", &body), 200);
        free(body);
        assert_int_equal(atomic_load(&r.regex_at), 0);
        /* ~8 s of backtracking: the 1 s budget ends it */
        wait_set(&r.regex_at, 20000);
        assert_int_equal(r.regex_st, MC_ERR_INVALID_PARAMS);
        assert_non_null(strstr(r.why, "time budget"));
        assert_true(atomic_load(&r.ping_at) < atomic_load(&r.regex_at));
    }
    /* the remove that went over its budget removed nothing */
    assert_int_equal(metric(e, "master_key_count"), NKEYS);
    assert_true(metric(e, "master_regex_scans_over_budget_total") >= 2);

    /* /keys with the same pattern: 400 naming the budget. Every key matches
     * (at its "z", after ~1 ms of backtracking), so the limit must exceed
     * NKEYS: the default (1000) would end the scan, full, near the budget. */
    char *body = NULL;
    assert_int_equal(
        http_get(e->master.http_port, "/keys?regex=%28a%2A%29%2A%5C1z&limit=100000", &body), 400);
    assert_non_null(strstr(body, "time budget"));
    free(body);

    /* a cheap pattern over the same keys is answered whole */
    char why[512];
    assert_int_equal(regex_call(e, MC_RPC_REMOVE_BY_REGEX, "/0000[0-9]$", why, sizeof(why)), MC_OK);
    assert_int_equal(metric(e, "master_key_count"), NKEYS - 10);
    assert_true(master_alive(e));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_regex_of_death_is_refused_with_a_reason_and_the_master_lives),
        cmocka_unit_test(a_backtracking_scan_runs_off_the_reactor_and_stops_at_its_deadline),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
