/*
 * The master:// metadata backend against a real mooncake-master
 * ($TEST_BUILD_DIR/mooncake-master), started by each test on a free port.
 *
 * Covered: round trip with binary values; missing keys; list by prefix;
 * re-publishing after the master restarts (new view version); deletion of the
 * entries of an owner that stopped pinging (the master's client expiry);
 * calls while the master is unreachable; pending calls failing or being
 * canceled exactly once; bad connection strings and a zero owner id.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "proc.h"
#include "reactor/reactor.h"
#include "transport/metadata.h"
#include "util/log.h"
#include "util/time.h"

typedef struct env {
    mc_reactor_group_t *g;
    mc_reactor_t *r;
    test_proc_t master;
    unsigned port;
} env_t;

/* ------------------------------------------------------------ helpers */

/* Start mooncake-master on e->port; fast_expiry: clients expire after 1 s
 * of silence, checked every 20 ms. */
static void start_master(env_t *e, int fast_expiry)
{
    char bin[256], port[48];
    snprintf(port, sizeof(port), "server.rpc_port=%u", e->port);
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)test_prog("mooncake-master", bin, sizeof(bin));
    argv[n++] = "--set";
    argv[n++] = port;
    argv[n++] = "--set";
    argv[n++] = "server.http_enabled=false";
    argv[n++] = "--set";
    argv[n++] = "server.reactors=1";
    argv[n++] = "--set";
    argv[n++] = "log.level=warn";
    if (fast_expiry) {
        argv[n++] = "--set";
        argv[n++] = "master.client_ttl=1s";
        argv[n++] = "--set";
        argv[n++] = "server.tick_interval=20ms";
    }
    argv[n] = NULL;
    assert_int_equal(test_proc_start(&e->master, argv), 0);
    for (int waited = 0; !test_port_open(e->port); waited += 10) {
        if (waited > 5000)
            fail_msg("mooncake-master did not listen on port %u within 5 s", e->port);
        usleep(10000);
    }
}

static void stop_master(env_t *e, int sig)
{
    if (e->master.pid > 0)
        test_proc_stop(&e->master, sig, 5000);
}

static mc_meta_t *open_meta(env_t *e, uint64_t owner, uint64_t ping_us, uint64_t timeout_us)
{
    char conn[64];
    snprintf(conn, sizeof(conn), "master://127.0.0.1:%u", e->port);
    mc_meta_opts_t o;
    mc_meta_opts_init(&o);
    o.owner_hi = 9;
    o.owner_lo = owner;
    if (ping_us)
        o.ping_interval_us = ping_us;
    if (timeout_us)
        o.call_timeout_us = timeout_us;
    mc_meta_t *m = NULL;
    assert_int_equal(mc_meta_open(conn, e->r, &o, &m), MC_OK);
    assert_non_null(m);
    return m;
}

static void check_value(mc_meta_t *m, const char *key, const void *want, size_t len)
{
    mc_buf_t v = MC_BUF_INIT;
    mc_status_t st = mc_meta_get_sync(m, key, &v);
    if (want == NULL) {
        assert_int_equal(st, MC_ERR_NOT_FOUND);
    } else {
        assert_int_equal(st, MC_OK);
        assert_int_equal(mc_buf_used(&v), len);
        if (len > 0)
            assert_memory_equal(mc_buf_head(&v), want, len);
    }
    mc_buf_fini(&v);
}

static int wait_get(mc_meta_t *m, const char *key, mc_status_t want_st, const void *want,
                    size_t len, int timeout_ms)
{
    uint64_t end = mc_now_ms() + (uint64_t)timeout_ms;
    do {
        mc_buf_t v = MC_BUF_INIT;
        mc_status_t st = mc_meta_get_sync(m, key, &v);
        int ok = st == want_st &&
                 (st != MC_OK || (mc_buf_used(&v) == len &&
                                  (len == 0 || memcmp(mc_buf_head(&v), want, len) == 0)));
        mc_buf_fini(&v);
        if (ok)
            return 1;
        usleep(20000);
    } while (mc_now_ms() < end);
    return 0;
}

#define MAX_KEYS 32

typedef struct keys {
    int n;
    char key[MAX_KEYS][128];
    size_t len[MAX_KEYS];
    uint8_t val[MAX_KEYS][64];
} keys_t;

static void collect(void *arg, const char *key, const void *val, size_t len)
{
    keys_t *k = arg;
    if (k->n == MAX_KEYS)
        return;
    snprintf(k->key[k->n], sizeof(k->key[0]), "%s", key);
    k->len[k->n] = len;
    memcpy(k->val[k->n], val, len < sizeof(k->val[0]) ? len : sizeof(k->val[0]));
    k->n++;
}

static int keys_has(const keys_t *k, const char *key)
{
    for (int i = 0; i < k->n; i++)
        if (strcmp(k->key[i], key) == 0)
            return i;
    return -1;
}

static void check_list(mc_meta_t *m, const char *prefix, const char *const *want, int n)
{
    keys_t k;
    memset(&k, 0, sizeof(k));
    assert_int_equal(mc_meta_list_sync(m, prefix, collect, &k), MC_OK);
    if (k.n != n) {
        for (int i = 0; i < k.n; i++)
            print_message("  listed '%s'\n", k.key[i]);
        fail_msg("list '%s': %d keys, want %d", prefix, k.n, n);
    }
    for (int i = 0; i < n; i++)
        if (keys_has(&k, want[i]) < 0)
            fail_msg("list '%s': '%s' missing", prefix, want[i]);
}

/* ------------------------------------------------------- setup/teardown */

static int group_setup(void **state)
{
    static env_t e;
    memset(&e, 0, sizeof(e));
    signal(SIGPIPE, SIG_IGN);
    char bin[256];
    if (access(test_prog("mooncake-master", bin, sizeof(bin)), X_OK) != 0) {
        fprintf(stderr, "FATAL: %s not found: build it first (make)\n", bin);
        return -1;
    }
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "meta";
    if (mc_reactor_group_create(&go, &e.g) != MC_OK)
        return -1;
    e.r = mc_reactor_group_get(e.g, 0);
    *state = &e;
    return 0;
}

static int group_teardown(void **state)
{
    env_t *e = *state;
    if (e == NULL)
        return 0; /* group_setup failed */
    mc_reactor_group_destroy(e->g);
    return 0;
}

static int setup(void **state)
{
    env_t *e = *state;
    e->port = test_free_port();
    start_master(e, 0);
    return 0;
}

static int setup_fast_expiry(void **state)
{
    env_t *e = *state;
    e->port = test_free_port();
    start_master(e, 1);
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    stop_master(e, SIGKILL);
    return 0;
}

/* ---------------------------------------------------------------- tests */

static const uint8_t bin1[] = {0x00, 0x01, 0x00, 0xff, 'a', 0x00};
static const uint8_t bin2[] = {0xde, 0xad, 0x00, 0xbe, 0xef};

static void put_get_del_list_round_trip_keeps_binary_values(void **state)
{
    env_t *e = *state;
    mc_meta_t *m = open_meta(e, 1, 0, 0);
    assert_int_equal(mc_meta_put_sync(m, "mc/c1/seg/a", bin1, sizeof(bin1)), MC_OK);
    assert_int_equal(mc_meta_put_sync(m, "mc/c1/seg/b", bin2, sizeof(bin2)), MC_OK);
    assert_int_equal(mc_meta_put_sync(m, "mc/c1/rpc/a", "", 0), MC_OK);
    check_value(m, "mc/c1/seg/a", bin1, sizeof(bin1));
    check_value(m, "mc/c1/seg/b", bin2, sizeof(bin2));
    check_value(m, "mc/c1/rpc/a", "", 0);

    keys_t k;
    memset(&k, 0, sizeof(k));
    assert_int_equal(mc_meta_list_sync(m, "mc/c1/seg/", collect, &k), MC_OK);
    assert_int_equal(k.n, 2);
    int i = keys_has(&k, "mc/c1/seg/a");
    assert_true(i >= 0);
    assert_int_equal(k.len[i], sizeof(bin1));
    assert_memory_equal(k.val[i], bin1, sizeof(bin1));

    assert_int_equal(mc_meta_put_sync(m, "mc/c1/seg/a", bin2, sizeof(bin2)), MC_OK);
    check_value(m, "mc/c1/seg/a", bin2, sizeof(bin2));
    assert_int_equal(mc_meta_del_sync(m, "mc/c1/seg/a"), MC_OK);
    assert_int_equal(mc_meta_del_sync(m, "mc/c1/seg/a"), MC_OK); /* missing: still OK */
    check_value(m, "mc/c1/seg/a", NULL, 0);
    const char *left[] = {"mc/c1/seg/b"};
    check_list(m, "mc/c1/seg/", left, 1);

    mc_meta_t *m2 = open_meta(e, 2, 0, 0);
    check_value(m2, "mc/c1/seg/b", bin2, sizeof(bin2));
    mc_meta_close(m2);
    mc_meta_close(m);
}

static void get_of_a_missing_key_is_not_found(void **state)
{
    env_t *e = *state;
    mc_meta_t *m = open_meta(e, 1, 0, 0);
    check_value(m, "mc/c1/seg/nobody", NULL, 0);
    const char *none[] = {NULL};
    check_list(m, "mc/c1/", none, 0);
    mc_meta_close(m);
}

static void list_by_prefix_returns_exactly_the_matching_keys(void **state)
{
    env_t *e = *state;
    mc_meta_t *m = open_meta(e, 1, 0, 0);
    const char *all[] = {"mc/c1/seg/a", "mc/c1/seg/b", "mc/c1/rpc/a", "mc/c2/seg/a",
                         "mc/c1/seg",   "p*x/1",       "pax/1"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        assert_int_equal(mc_meta_put_sync(m, all[i], all[i], strlen(all[i])), MC_OK);
    const char *seg[] = {"mc/c1/seg/a", "mc/c1/seg/b"};
    check_list(m, "mc/c1/seg/", seg, 2);
    const char *c1[] = {"mc/c1/seg/a", "mc/c1/seg/b", "mc/c1/rpc/a", "mc/c1/seg"};
    check_list(m, "mc/c1/", c1, 4);
    const char *star[] = {"p*x/1"};
    check_list(m, "p*x/", star, 1);
    check_list(m, "", all, 7);
    mc_meta_close(m);
}

static void entries_are_republished_after_the_master_restarts(void **state)
{
    env_t *e = *state;
    mc_meta_t *a = open_meta(e, 1, 100000, 1000000);
    mc_meta_t *b = open_meta(e, 2, 100000, 1000000);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/a", bin1, sizeof(bin1)), MC_OK);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/rpc/a", bin2, sizeof(bin2)), MC_OK);
    check_value(b, "mc/c1/seg/a", bin1, sizeof(bin1));

    stop_master(e, SIGKILL);
    start_master(e, 0); /* a new master: new view version, empty KV */

    uint64_t t0 = mc_now_ms();
    assert_true(wait_get(b, "mc/c1/seg/a", MC_OK, bin1, sizeof(bin1), 10000));
    assert_true(wait_get(b, "mc/c1/rpc/a", MC_OK, bin2, sizeof(bin2), 2000));
    print_message("entries back %llu ms after the master restarted\n",
                  (unsigned long long)(mc_now_ms() - t0));
    mc_meta_close(a);
    mc_meta_close(b);
}

static void entries_of_an_owner_that_stopped_pinging_are_deleted(void **state)
{
    env_t *e = *state;
    mc_meta_t *a = open_meta(e, 1, 200000, 0);
    mc_meta_t *b = open_meta(e, 2, 200000, 0);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/a", bin1, sizeof(bin1)), MC_OK);
    /* pinging owner: outlives client_ttl (1 s) */
    usleep(1600000);
    check_value(b, "mc/c1/seg/a", bin1, sizeof(bin1));

    uint64_t t0 = mc_now_ms();
    mc_meta_close(a); /* no delete: the master expires the owner */
    assert_true(wait_get(b, "mc/c1/seg/a", MC_ERR_NOT_FOUND, NULL, 0, 5000));
    print_message("entry gone %llu ms after its owner closed\n",
                  (unsigned long long)(mc_now_ms() - t0));
    mc_meta_close(b);
}

static void calls_fail_within_the_timeout_while_the_master_is_unreachable_then_succeed(void **state)
{
    env_t *e = *state;
    stop_master(e, SIGKILL);
    mc_meta_t *a = open_meta(e, 1, 100000, 500000);
    for (int i = 0; i < 3; i++) {
        uint64_t t0 = mc_now_us();
        mc_buf_t v = MC_BUF_INIT;
        mc_status_t st = mc_meta_get_sync(a, "k", &v);
        uint64_t took = mc_now_us() - t0;
        assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
        assert_true(took < 1500000);
        st = mc_meta_put_sync(a, "mc/c1/seg/a", bin2, sizeof(bin2));
        assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
        usleep(200000);
    }
    start_master(e, 0);
    mc_meta_t *b = open_meta(e, 2, 0, 0);
    /* the failed put was remembered: the first ping (NEED_REMOUNT) re-puts it */
    assert_true(wait_get(b, "mc/c1/seg/a", MC_OK, bin2, sizeof(bin2), 10000));
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/x", bin1, sizeof(bin1)), MC_OK);
    check_value(b, "mc/c1/seg/x", bin1, sizeof(bin1));
    mc_meta_close(a);
    mc_meta_close(b);
}

/* Async driver: issue N gets and puts on the reactor, count callbacks. */
#define NCALLS 50

typedef struct driver {
    mc_meta_t *m;
    atomic_int in_submit;
    atomic_int calls[NCALLS];
    atomic_int status[NCALLS];
    atomic_int refused;
    atomic_int done;
    atomic_int early;
} driver_t;

typedef struct slot {
    driver_t *d;
    int i;
} slot_t;

static slot_t slots[NCALLS];

static void drv_get_cb(void *arg, mc_status_t st, const void *val, size_t len)
{
    slot_t *s = arg;
    (void)val;
    (void)len;
    if (atomic_load(&s->d->in_submit))
        atomic_fetch_add(&s->d->early, 1);
    atomic_fetch_add(&s->d->calls[s->i], 1);
    atomic_store(&s->d->status[s->i], st);
    atomic_fetch_add(&s->d->done, 1);
}

static void drv_done_cb(void *arg, mc_status_t st)
{
    drv_get_cb(arg, st, NULL, 0);
}

static void drv_list_cb(void *arg, mc_status_t st, const mc_meta_entry_t *e, size_t n)
{
    (void)e;
    (void)n;
    drv_get_cb(arg, st, NULL, 0);
}

static void drv_issue(mc_reactor_t *r, void *arg, mc_status_t st)
{
    driver_t *d = arg;
    (void)r;
    assert_int_equal(st, MC_OK);
    for (int i = 0; i < NCALLS; i++) {
        slot_t *s = &slots[i];
        mc_status_t rc;
        atomic_store(&d->in_submit, 1);
        switch (i % 4) {
        case 0:
            rc = d->m->ops->put(d->m, "mc/c1/seg/p", "v", 1, drv_done_cb, s);
            break;
        case 1:
            rc = d->m->ops->get(d->m, "mc/c1/seg/p", drv_get_cb, s);
            break;
        case 2:
            rc = d->m->ops->del(d->m, "mc/c1/seg/q", drv_done_cb, s);
            break;
        default:
            rc = d->m->ops->list(d->m, "mc/", drv_list_cb, s);
            break;
        }
        atomic_store(&d->in_submit, 0);
        if (rc != MC_INPROGRESS)
            atomic_fetch_add(&d->refused, 1);
    }
}

static void drv_init(driver_t *d, mc_meta_t *m)
{
    memset(d, 0, sizeof(*d));
    d->m = m;
    for (int i = 0; i < NCALLS; i++) {
        slots[i].d = d;
        slots[i].i = i;
    }
}

static int wait_done(driver_t *d, int n, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 5) {
        if (atomic_load(&d->done) >= n)
            return 1;
        usleep(5000);
    }
    return atomic_load(&d->done) >= n;
}

static void check_all_once(driver_t *d, mc_status_t want)
{
    assert_int_equal(atomic_load(&d->refused), 0);
    assert_int_equal(atomic_load(&d->early), 0);
    for (int i = 0; i < NCALLS; i++) {
        assert_int_equal(atomic_load(&d->calls[i]), 1);
        assert_int_equal(atomic_load(&d->status[i]), want);
    }
}

static void pending_calls_fail_exactly_once_when_the_master_dies(void **state)
{
    env_t *e = *state;
    static driver_t d;
    mc_meta_t *a = open_meta(e, 1, 0, 10000000);
    assert_int_equal(mc_meta_put_sync(a, "warm", "up", 2), MC_OK);
    assert_int_equal(test_proc_freeze(e->master.pid), 0);
    drv_init(&d, a);
    assert_int_equal(mc_reactor_call(e->r, drv_issue, &d), MC_OK);
    usleep(100000);
    assert_int_equal(atomic_load(&d.done), 0);
    stop_master(e, SIGKILL);
    assert_true(wait_done(&d, NCALLS, 5000));
    usleep(100000);
    check_all_once(&d, MC_ERR_CONN_CLOSED);
    mc_meta_close(a);
}

static void close_cancels_pending_calls_exactly_once(void **state)
{
    env_t *e = *state;
    static driver_t d;
    mc_meta_t *a = open_meta(e, 1, 0, 10000000);
    assert_int_equal(mc_meta_put_sync(a, "warm", "up", 2), MC_OK);
    assert_int_equal(test_proc_freeze(e->master.pid), 0);
    drv_init(&d, a);
    assert_int_equal(mc_reactor_call(e->r, drv_issue, &d), MC_OK);
    usleep(100000);
    assert_int_equal(atomic_load(&d.done), 0);
    mc_meta_close(a);
    assert_int_equal(atomic_load(&d.done), NCALLS);
    usleep(50000);
    check_all_once(&d, MC_ERR_CANCELED);
    kill(e->master.pid, SIGCONT);
}

static void malformed_connection_strings_and_a_zero_owner_are_rejected_at_open(void **state)
{
    env_t *e = *state;
    static const char *const bad[] = {
        "master://",   "master://host:notaport", "master://h:1/0", "master://h:0", "ftp://x", "",
        "master:/h:1", "master://h:99999",
    };
    mc_meta_opts_t o;
    mc_meta_opts_init(&o);
    o.owner_lo = 1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mc_meta_t *m = (mc_meta_t *)&o;
        mc_status_t st = mc_meta_open(bad[i], e->r, &o, &m);
        if (st != MC_ERR_INVALID_ARGUMENT)
            fail_msg("'%s' gave %s", bad[i], mc_status_str(st));
        assert_ptr_equal(m, (mc_meta_t *)&o);
    }
    char conn[64];
    snprintf(conn, sizeof(conn), "master://127.0.0.1:%u", e->port);
    mc_meta_t *m = NULL;
    o.owner_lo = 0;
    assert_int_equal(mc_meta_open(conn, e->r, &o, &m), MC_ERR_INVALID_ARGUMENT);
    assert_null(m);
    o.owner_lo = 1;
    assert_int_equal(mc_meta_open(conn, e->r, &o, &m), MC_OK);
    mc_meta_close(m);
}

int main(void)
{
    /* TEST_LOG=debug (or "warn,metadata=debug,rpc=debug") to see more */
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "warn", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(put_get_del_list_round_trip_keeps_binary_values, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(get_of_a_missing_key_is_not_found, setup, teardown),
        cmocka_unit_test_setup_teardown(list_by_prefix_returns_exactly_the_matching_keys, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(entries_are_republished_after_the_master_restarts, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(entries_of_an_owner_that_stopped_pinging_are_deleted,
                                        setup_fast_expiry, teardown),
        cmocka_unit_test_setup_teardown(
            calls_fail_within_the_timeout_while_the_master_is_unreachable_then_succeed, setup,
            teardown),
        cmocka_unit_test_setup_teardown(pending_calls_fail_exactly_once_when_the_master_dies, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(close_cancels_pending_calls_exactly_once, setup, teardown),
        cmocka_unit_test_setup_teardown(
            malformed_connection_strings_and_a_zero_owner_are_rejected_at_open, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
