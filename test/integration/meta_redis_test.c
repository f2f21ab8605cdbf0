/*
 * The redis:// metadata backend against a real redis-server, started by
 * the test (cluster.h: a free port for each case, --save "" --appendonly
 * no, a temporary --dir) and killed at the end: the conformance suite of
 * every metadata backend (meta_cases.h). Here an owner proves it lives by
 * refreshing its entries' TTL (1 s when fast), a restarted redis-server is
 * empty (no persistence) and the backends put their entries again after
 * reconnecting, and listing is SCAN with the glob characters of the prefix
 * escaped. Without /usr/bin/redis-server (`make deps` installs it;
 * TEST_REDIS_SERVER overrides the path) every test fails, loudly.
 *
 * Redis only: a database index in the URL selects its own keyspace. With
 * Redis Sentinel (redis-sentinel://; a primary, a replica and three
 * Sentinels from sentinel.h): the primary found through the Sentinels, a
 * killed primary replaced by the promoted replica, a switchover (the old
 * primary lives on as a replica), an unknown primary name failing calls
 * cleanly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "meta_cases.h"
#include "sentinel.h"

static int redis_start(meta_env_t *e, int fast_expiry)
{
    (void)fast_expiry; /* expiry is the owner's TTL (fast_liveness) */
    return tc_redis_start(&e->redis);
}

static void redis_stop(meta_env_t *e, int sig)
{
    tc_redis_stop(&e->redis, sig);
}

static pid_t redis_pid(meta_env_t *e)
{
    return e->redis.proc.pid;
}

static unsigned redis_port(meta_env_t *e)
{
    return e->redis.port;
}

static void redis_conn(meta_env_t *e, int db, char *buf, size_t len)
{
    if (db >= 0)
        snprintf(buf, len, "redis://127.0.0.1:%u/%d", e->redis.port, db);
    else
        snprintf(buf, len, "redis://127.0.0.1:%u", e->redis.port);
}

static void redis_fast_liveness(mc_meta_opts_t *o)
{
    o->ttl_us = 1000000; /* refreshed every ttl/3 */
}

static const char *const redis_bad[] = {
    "redis://",
    "redis://host:notaport",
    "ftp://x",
    "",
    "redis://:6379",
    "redis://h:0",
    "redis://h:65536",
    "redis://h:1/x",
    "redis://h:1/",
    "redis://h:1x",
    "redis://h h:1",
    "redis://[::1:1",
    "master://",
    "master://h:1/0",
    "redis:/h:1",
    "REDIS://h:1",
    "redis-sentinel://h",
    "redis-sentinel://h/",
    "redis-sentinel://h:0/n",
    "redis-sentinel://h/n/x",
    "redis-sentinel://h/n?cluster=c",
    NULL,
};

static const char *const redis_good[] = {"redis://127.0.0.1", "redis://[::1]:1/0", NULL};

static const meta_backend_t redis_backend = {
    .name = "redis",
    .start = redis_start,
    .stop = redis_stop,
    .pid = redis_pid,
    .port = redis_port,
    .conn = redis_conn,
    .fast_liveness = redis_fast_liveness,
    .owner_hi = 7,
    .has_spaces = 1,
    .bad_conns = redis_bad,
    .good_conns = redis_good,
};

static void a_database_index_selects_its_own_keyspace(void **state)
{
    meta_env_t *e = *state;
    mc_meta_t *m3 = meta_open(e, 3, 1, 0, 0);
    mc_meta_t *m4 = meta_open(e, 4, 2, 0, 0);
    mc_meta_t *m3b = meta_open(e, 3, 3, 0, 0);
    assert_int_equal(mc_meta_put_sync(m3, "k", "three", 5), MC_OK);
    meta_check_value(m4, "k", NULL, 0);
    meta_check_value(m3b, "k", "three", 5);
    mc_meta_close(m3);
    mc_meta_close(m4);
    mc_meta_close(m3b);
}

/* Issue 13 finding 7: a second process with the same name took the key, and
 * the first one's delete (at its stop) removed the second's entry. The
 * delete is a compare-and-delete script: only the value this process put
 * goes. */
static void a_delete_removes_only_the_value_this_process_put(void **state)
{
    static const uint8_t v1[] = {0x00, 0x01, 'a'}, v2[] = {0xde, 0xad, 0x00};
    meta_env_t *e = *state;
    mc_meta_t *a = meta_open(e, -1, 1, 0, 0);
    mc_meta_t *b = meta_open(e, -1, 2, 0, 0);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/n", v1, sizeof(v1)), MC_OK);
    assert_int_equal(mc_meta_put_sync(b, "mc/c1/seg/n", v2, sizeof(v2)), MC_OK);
    /* a's delete finds b's value: left alone */
    assert_int_equal(mc_meta_del_sync(a, "mc/c1/seg/n"), MC_OK);
    meta_check_value(a, "mc/c1/seg/n", v2, sizeof(v2));
    /* a key a never put: left alone too */
    assert_int_equal(mc_meta_put_sync(b, "mc/c1/seg/m", v1, sizeof(v1)), MC_OK);
    assert_int_equal(mc_meta_del_sync(a, "mc/c1/seg/m"), MC_OK);
    meta_check_value(a, "mc/c1/seg/m", v1, sizeof(v1));
    /* the owner's delete works */
    assert_int_equal(mc_meta_del_sync(b, "mc/c1/seg/n"), MC_OK);
    meta_check_value(a, "mc/c1/seg/n", NULL, 0);
    mc_meta_close(a);
    mc_meta_close(b);
}

/* ------------------------------------------------------------ sentinels */

static test_sentinels_t TS;

static int sentinel_setup(void **state)
{
    (void)state;
    return ts_start(&TS, NULL) == 0 ? 0 : -1;
}

static int sentinel_teardown(void **state)
{
    (void)state;
    ts_stop(&TS);
    return 0;
}

/* dead_first: the list starts with a Sentinel that is not running (the
 * next ones are asked). */
static mc_meta_t *open_sentinel_meta(meta_env_t *e, const char *name, int db, uint64_t timeout_us,
                                     int dead_first)
{
    char conn[400], dead[64] = "";
    if (dead_first)
        snprintf(dead, sizeof(dead), "127.0.0.1:%u,", test_free_port());
    snprintf(conn, sizeof(conn), "redis-sentinel://%s%s/%s/%d", dead, TS.list, name, db);
    mc_meta_opts_t o;
    mc_meta_opts_init(&o);
    o.owner_hi = 7;
    o.owner_lo = 1;
    o.ttl_us = 30000000;
    o.call_timeout_us = timeout_us;
    mc_meta_t *m = NULL;
    assert_int_equal(mc_meta_open(conn, e->r, &o, &m), MC_OK);
    return m;
}

/* The value of key in db on the redis-server at port, straight from it. */
static int redis_has(unsigned port, int db, const char *key, const char *want)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", (int)port, tv);
    if (c == NULL || c->err) {
        if (c != NULL)
            redisFree(c);
        return 0;
    }
    int ok = 0;
    redisReply *r = redisCommand(c, "SELECT %d", db);
    if (r != NULL)
        freeReplyObject(r);
    r = redisCommand(c, "GET %s", key);
    if (r != NULL && r->type == REDIS_REPLY_STRING && strcmp(r->str, want) == 0)
        ok = 1;
    if (r != NULL)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* put key = val until it answers OK, within ms. */
static int put_within(mc_meta_t *m, const char *key, const char *val, int ms)
{
    uint64_t end = mc_now_ms() + (uint64_t)ms;
    do {
        if (mc_meta_put_sync(m, key, val, strlen(val)) == MC_OK)
            return 1;
        usleep(50000);
    } while (mc_now_ms() < end);
    return 0;
}

/* (the first Sentinel of the list is not running: the others are asked) */
static void the_sentinels_lead_to_the_primary_and_a_killed_one_is_replaced(void **state)
{
    meta_env_t *e = *state;
    mc_meta_t *m = open_sentinel_meta(e, TEST_SENTINEL_NAME, 2, 2000000, 1);
    unsigned p0 = TS.redis[0].port, p1 = TS.redis[1].port;
    assert_int_equal(mc_meta_put_sync(m, "mc/s/seg/a", "one", 3), MC_OK);
    meta_check_value(m, "mc/s/seg/a", "one", 3);
    assert_true(redis_has(p0, 2, "mc/s/seg/a", "one")); /* on the primary, in db 2 */
    uint64_t t0 = mc_now_ms();
    ts_kill_redis(&TS, 0);
    assert_int_equal(ts_wait_primary(&TS, p1, 15000 * TC_SLOW), 0);
    uint64_t t1 = mc_now_ms();
    /* the next connection goes to the promoted replica: the entry is there
     * (replicated, and re-published at the reconnection anyway) */
    assert_true(meta_wait_get(m, "mc/s/seg/a", MC_OK, "one", 3, 10000 * TC_SLOW));
    assert_true(put_within(m, "mc/s/seg/b", "two", 10000 * TC_SLOW));
    print_message("primary killed; promoted after %llu ms; the backend used the new one %llu ms "
                  "later\n",
                  (unsigned long long)(t1 - t0), (unsigned long long)(mc_now_ms() - t1));
    assert_true(redis_has(p1, 2, "mc/s/seg/b", "two"));
    mc_meta_close(m);
}

static void a_switchover_moves_the_backend_to_the_new_primary(void **state)
{
    meta_env_t *e = *state;
    mc_meta_t *m = open_sentinel_meta(e, TEST_SENTINEL_NAME, 3, 2000000, 0);
    unsigned p0 = TS.redis[0].port, p1 = TS.redis[1].port;
    assert_int_equal(mc_meta_put_sync(m, "mc/s/seg/c", "three", 5), MC_OK);
    assert_int_equal(ts_wait_replicas(p0, 1, 5000 * TC_SLOW), 0);
    /* a switchover: the primary lives on as a replica (Sentinel drops its
     * clients; one that kept its connection would meet READONLY) */
    redisReply *r = ts_cmd(TS.sent_port[0], "SENTINEL FAILOVER %s", TEST_SENTINEL_NAME);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    assert_int_equal(ts_wait_primary(&TS, p1, 15000 * TC_SLOW), 0);
    for (int waited = 0; waited < 10000 * TC_SLOW; waited += 50) {
        r = ts_cmd(p0, "ROLE");
        int replica = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                      strcmp(r->element[0]->str, "slave") == 0;
        if (r != NULL)
            freeReplyObject(r);
        if (replica)
            break;
        usleep(50000);
    }
    assert_true(put_within(m, "mc/s/seg/d", "four", 10000 * TC_SLOW));
    assert_true(redis_has(p1, 3, "mc/s/seg/d", "four"));
    meta_check_value(m, "mc/s/seg/c", "three", 5);
    mc_meta_close(m);
}

static void an_unknown_primary_name_fails_calls_within_their_timeout(void **state)
{
    meta_env_t *e = *state;
    mc_meta_t *m = open_sentinel_meta(e, "nosuchprimary", 0, 500000, 0);
    uint64_t t0 = mc_now_us();
    mc_status_t st = mc_meta_put_sync(m, "mc/s/seg/x", "x", 1);
    uint64_t dt = mc_now_us() - t0;
    assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
    assert_true(dt < 1500000);
    mc_meta_close(m);
}

int main(void)
{
    const struct CMUnitTest extra[] = {
        cmocka_unit_test_setup_teardown(a_database_index_selects_its_own_keyspace, meta_setup,
                                        meta_teardown),
        cmocka_unit_test_setup_teardown(a_delete_removes_only_the_value_this_process_put,
                                        meta_setup, meta_teardown),
        cmocka_unit_test_setup_teardown(
            the_sentinels_lead_to_the_primary_and_a_killed_one_is_replaced, sentinel_setup,
            sentinel_teardown),
        cmocka_unit_test_setup_teardown(a_switchover_moves_the_backend_to_the_new_primary,
                                        sentinel_setup, sentinel_teardown),
        cmocka_unit_test_setup_teardown(an_unknown_primary_name_fails_calls_within_their_timeout,
                                        sentinel_setup, sentinel_teardown),
    };
    return meta_run(&redis_backend, extra, sizeof(extra) / sizeof(extra[0]));
}
