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
 * Redis only: a database index in the URL selects its own keyspace.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "meta_cases.h"

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

int main(void)
{
    const struct CMUnitTest extra[] = {
        cmocka_unit_test_setup_teardown(a_database_index_selects_its_own_keyspace, meta_setup,
                                        meta_teardown),
    };
    return meta_run(&redis_backend, extra, sizeof(extra) / sizeof(extra[0]));
}
