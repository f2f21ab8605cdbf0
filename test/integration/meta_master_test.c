/*
 * The master:// metadata backend against a real mooncake-master, started
 * by the test (cluster.h) on a free port for each case: the conformance
 * suite of every metadata backend (meta_cases.h). Here an owner proves it
 * lives by pinging the master (every 100 ms when fast), and the master
 * deletes the entries of an owner it expired (client_ttl: 1 s for the
 * fast-expiry case); a restarted master is empty (a new view version) and
 * the backends put their entries again; an owner id 0 is refused at open.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "meta_cases.h"

static int master_start(meta_env_t *e, int fast_expiry)
{
    const char *const normal[] = {"server.http_enabled=false", "server.tick_interval=100ms",
                                  "log.level=warn", NULL};
    const char *const fast[] = {"server.http_enabled=false", "master.client_ttl=1s",
                                "log.level=warn", NULL};
    return tc_master_start(&e->master, fast_expiry ? fast : normal);
}

static void master_stop(meta_env_t *e, int sig)
{
    tc_master_stop(&e->master, sig);
}

static pid_t master_pid(meta_env_t *e)
{
    return e->master.proc.pid;
}

static unsigned master_port(meta_env_t *e)
{
    return e->master.rpc_port;
}

static void master_conn(meta_env_t *e, int space, char *buf, size_t len)
{
    (void)space;
    snprintf(buf, len, "master://127.0.0.1:%u", e->master.rpc_port);
}

static void master_fast_liveness(mc_meta_opts_t *o)
{
    o->ping_interval_us = 100000;
}

static const char *const master_bad[] = {
    "master://",
    "master://host:notaport",
    "master://h:1/0",
    "master://h:0",
    "ftp://x",
    "",
    "master:/h:1",
    "master://h:99999",
    NULL,
};

static const meta_backend_t master_backend = {
    .name = "master",
    .start = master_start,
    .stop = master_stop,
    .pid = master_pid,
    .port = master_port,
    .conn = master_conn,
    .fast_liveness = master_fast_liveness,
    .owner_hi = 9,
    .owner_required = 1,
    .bad_conns = master_bad,
};

/* Issue 13 finding 7: only an entry's owner replaces or deletes it; a
 * second process (another owner id) with the same key is refused. */
static void only_the_owner_replaces_or_deletes_an_entry(void **state)
{
    meta_env_t *e = *state;
    mc_meta_t *a = meta_open(e, -1, 1, 0, 0);
    mc_meta_t *b = meta_open(e, -1, 2, 0, 0);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/n", "first", 5), MC_OK);
    assert_int_equal(mc_meta_put_sync(b, "mc/c1/seg/n", "second", 6), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_meta_del_sync(b, "mc/c1/seg/n"), MC_ERR_ILLEGAL_CLIENT);
    meta_check_value(b, "mc/c1/seg/n", "first", 5);
    assert_int_equal(mc_meta_del_sync(a, "mc/c1/seg/n"), MC_OK);
    meta_check_value(b, "mc/c1/seg/n", NULL, 0);
    mc_meta_close(a);
    mc_meta_close(b);
}

int main(void)
{
    const struct CMUnitTest extra[] = {
        cmocka_unit_test_setup_teardown(only_the_owner_replaces_or_deletes_an_entry, meta_setup,
                                        meta_teardown),
    };
    char bin[256];
    if (access(test_prog("mooncake-master", bin, sizeof(bin)), X_OK) != 0) {
        fprintf(stderr, "FATAL: %s not found: build it first (make)\n", bin);
        return 1;
    }
    return meta_run(&master_backend, extra, sizeof(extra) / sizeof(extra[0]));
}
