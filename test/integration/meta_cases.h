/*
 * meta_cases.h - the conformance suite of the transfer metadata backends
 * (transport/metadata.h): one set of cases run against every backend, each
 * against a real service the test starts (cluster.h). A backend's test
 * program fills a meta_backend_t (how to start, stop and reach its service)
 * and runs META_CASES plus what only that backend has:
 *
 *   static const meta_backend_t backend = {.name = "redis", ...};
 *   const struct CMUnitTest extra[] = {cmocka_unit_test_setup_teardown(
 *       a_database_index_selects_its_own_keyspace, meta_setup, meta_teardown)};
 *   return meta_run(&backend, extra, 1);
 *
 * (meta_run does that: the group state is a meta_env_t whose `b` is the
 * backend). Each case gets a fresh service (meta_setup) on a
 * fresh port; the fast-expiry cases start it with expiry in about a second.
 *
 * Covered: round trips with binary values; missing keys; listing by prefix,
 * exactly the matching keys, glob characters matched literally, many keys;
 * entries re-published after the service restarts empty; entries of an
 * owner that stopped refreshing go away by themselves (or stay, where the
 * protocol keeps them until deleted: keeps_entries); calls while the
 * service is unreachable fail within their timeout and the failed put is
 * published once it is back; calls pending when the service dies, or when
 * the backend closes, complete exactly once, never inside their submit;
 * malformed connection strings are refused at open.
 */
#ifndef MC_TEST_META_CASES_H
#define MC_TEST_META_CASES_H

#include <stdatomic.h>

#include "cluster.h"
#include "reactor/reactor.h"
#include "transport/metadata.h"
#include "util/log.h"
#include "util/time.h"

typedef struct meta_env meta_env_t;

typedef struct meta_backend {
    const char *name; /* for messages */
    /* Start the service on its port (chosen at the first start, kept after);
     * fast_expiry: an owner silent for ~1 s loses its entries. A restart is
     * an empty service. 0 or -1. */
    int (*start)(meta_env_t *e, int fast_expiry);
    void (*stop)(meta_env_t *e, int sig);
    pid_t (*pid)(meta_env_t *e);
    unsigned (*port)(meta_env_t *e);
    /* Connection string of keyspace `space` (< 0: the default one; >= 0
     * only when has_spaces). */
    void (*conn)(meta_env_t *e, int space, char *buf, size_t len);
    /* An owner that proves it lives often enough for the fast-expiry
     * service and for quick re-publication (master: pings; redis: TTL). */
    void (*fast_liveness)(mc_meta_opts_t *o);
    uint64_t owner_hi;
    int has_spaces;     /* keyspaces a connection string selects (redis DBs) */
    int owner_required; /* owner 0 is refused at open */
    /* The protocol has no owners or TTLs (upstream's HTTP): entries stay
     * until deleted, and the expiry case checks that they do. */
    int keeps_entries;
    const char *const *bad_conns; /* NULL-terminated */
    /* accepted connection strings; "%u" (if any) is the service's port */
    const char *const *good_conns;
} meta_backend_t;

struct meta_env {
    const meta_backend_t *b;
    mc_reactor_group_t *g;
    mc_reactor_t *r;
    tc_master_t master; /* the service, whichever the backend uses */
    tc_redis_t redis;
    test_proc_t own; /* a service of the backend's own (the standalone HTTP server) */
    unsigned own_port;
};

/* ------------------------------------------------------------ helpers */

/* mode: 0 default liveness, 1 fast (see meta_backend_t.fast_liveness). */
static inline mc_meta_t *meta_open(meta_env_t *e, int space, uint64_t owner, int fast,
                                   uint64_t timeout_us)
{
    char conn[96];
    e->b->conn(e, space, conn, sizeof(conn));
    mc_meta_opts_t o;
    mc_meta_opts_init(&o);
    o.owner_hi = e->b->owner_hi;
    o.owner_lo = owner;
    if (fast)
        e->b->fast_liveness(&o);
    if (timeout_us)
        o.call_timeout_us = timeout_us;
    mc_meta_t *m = NULL;
    assert_int_equal(mc_meta_open(conn, e->r, &o, &m), MC_OK);
    assert_non_null(m);
    return m;
}

/* get key and compare with want (NULL: expect MC_ERR_NOT_FOUND). */
static inline void meta_check_value(mc_meta_t *m, const char *key, const void *want, size_t len)
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

/* Retry get until it answers want_st (with the value, for MC_OK) or
 * timeout_ms: 1 or 0. */
static inline int meta_wait_get(mc_meta_t *m, const char *key, mc_status_t want_st,
                                const void *want, size_t len, int timeout_ms)
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

#define META_MAX_KEYS 32

typedef struct meta_keys {
    int n;
    char key[META_MAX_KEYS][128];
    size_t len[META_MAX_KEYS];
    uint8_t val[META_MAX_KEYS][64];
} meta_keys_t;

static inline void meta_collect(void *arg, const char *key, const void *val, size_t len)
{
    meta_keys_t *k = arg;
    if (k->n == META_MAX_KEYS)
        return;
    snprintf(k->key[k->n], sizeof(k->key[0]), "%s", key);
    k->len[k->n] = len;
    memcpy(k->val[k->n], val, len < sizeof(k->val[0]) ? len : sizeof(k->val[0]));
    k->n++;
}

static inline int meta_keys_has(const meta_keys_t *k, const char *key)
{
    for (int i = 0; i < k->n; i++)
        if (strcmp(k->key[i], key) == 0)
            return i;
    return -1;
}

/* list prefix and check that exactly the n keys in want come back. */
static inline void meta_check_list(mc_meta_t *m, const char *prefix, const char *const *want, int n)
{
    meta_keys_t k;
    memset(&k, 0, sizeof(k));
    assert_int_equal(mc_meta_list_sync(m, prefix, meta_collect, &k), MC_OK);
    if (k.n != n) {
        for (int i = 0; i < k.n; i++)
            print_message("  listed '%s'\n", k.key[i]);
        fail_msg("list '%s': %d keys, want %d", prefix, k.n, n);
    }
    for (int i = 0; i < n; i++)
        if (meta_keys_has(&k, want[i]) < 0)
            fail_msg("list '%s': '%s' missing", prefix, want[i]);
}

/* ------------------------------------------------------- setup/teardown */

static meta_env_t meta_g_env; /* the group state; meta_run sets its backend */

static inline int meta_group_setup(void **state)
{
    meta_env_t *e = &meta_g_env;
    *state = e;
    signal(SIGPIPE, SIG_IGN);
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "meta";
    if (mc_reactor_group_create(&go, &e->g) != MC_OK)
        return -1;
    e->r = mc_reactor_group_get(e->g, 0);
    return 0;
}

static inline int meta_group_teardown(void **state)
{
    meta_env_t *e = *state;
    mc_reactor_group_destroy(e->g);
    return 0;
}

/* Each case gets its own service on a fresh port. */
static inline int meta_setup_mode(void **state, int fast_expiry)
{
    meta_env_t *e = *state;
    e->master.rpc_port = e->master.http_port = 0;
    e->redis.port = 0;
    e->own_port = 0;
    return e->b->start(e, fast_expiry);
}

static inline int meta_setup(void **state)
{
    return meta_setup_mode(state, 0);
}

static inline int meta_setup_fast_expiry(void **state)
{
    return meta_setup_mode(state, 1);
}

static inline int meta_teardown(void **state)
{
    meta_env_t *e = *state;
    e->b->stop(e, SIGKILL);
    return 0;
}

/* ---------------------------------------------------------------- cases */

static const uint8_t meta_bin1[] = {0x00, 0x01, 0x00, 0xff, 'a', 0x00};
static const uint8_t meta_bin2[] = {0xde, 0xad, 0x00, 0xbe, 0xef};

static void put_get_del_list_round_trip_keeps_binary_values(void **state)
{
    meta_env_t *e = *state;
    mc_meta_t *m = meta_open(e, -1, 1, 0, 0);
    assert_int_equal(mc_meta_put_sync(m, "mc/c1/seg/a", meta_bin1, sizeof(meta_bin1)), MC_OK);
    assert_int_equal(mc_meta_put_sync(m, "mc/c1/seg/b", meta_bin2, sizeof(meta_bin2)), MC_OK);
    assert_int_equal(mc_meta_put_sync(m, "mc/c1/rpc/a", "", 0), MC_OK);
    meta_check_value(m, "mc/c1/seg/a", meta_bin1, sizeof(meta_bin1));
    meta_check_value(m, "mc/c1/seg/b", meta_bin2, sizeof(meta_bin2));
    meta_check_value(m, "mc/c1/rpc/a", "", 0);

    meta_keys_t k;
    memset(&k, 0, sizeof(k));
    assert_int_equal(mc_meta_list_sync(m, "mc/c1/seg/", meta_collect, &k), MC_OK);
    assert_int_equal(k.n, 2);
    int i = meta_keys_has(&k, "mc/c1/seg/a");
    assert_true(i >= 0);
    assert_int_equal(k.len[i], sizeof(meta_bin1));
    assert_memory_equal(k.val[i], meta_bin1, sizeof(meta_bin1));

    /* overwrite, then delete (twice: deleting a missing key is fine) */
    assert_int_equal(mc_meta_put_sync(m, "mc/c1/seg/a", meta_bin2, sizeof(meta_bin2)), MC_OK);
    meta_check_value(m, "mc/c1/seg/a", meta_bin2, sizeof(meta_bin2));
    assert_int_equal(mc_meta_del_sync(m, "mc/c1/seg/a"), MC_OK);
    assert_int_equal(mc_meta_del_sync(m, "mc/c1/seg/a"), MC_OK);
    meta_check_value(m, "mc/c1/seg/a", NULL, 0);
    const char *left[] = {"mc/c1/seg/b"};
    meta_check_list(m, "mc/c1/seg/", left, 1);

    /* another instance sees the same */
    mc_meta_t *m2 = meta_open(e, -1, 2, 0, 0);
    meta_check_value(m2, "mc/c1/seg/b", meta_bin2, sizeof(meta_bin2));
    mc_meta_close(m2);
    mc_meta_close(m);
}

static void get_of_a_missing_key_is_not_found(void **state)
{
    meta_env_t *e = *state;
    mc_meta_t *m = meta_open(e, -1, 1, 0, 0);
    meta_check_value(m, "mc/c1/seg/nobody", NULL, 0);
    const char *none[] = {NULL};
    meta_check_list(m, "mc/c1/", none, 0);
    mc_meta_close(m);
}

static void list_by_prefix_returns_exactly_the_matching_keys(void **state)
{
    meta_env_t *e = *state;
    mc_meta_t *m = meta_open(e, -1, 1, 0, 0);
    const char *all[] = {"mc/c1/seg/a", "mc/c1/seg/b", "mc/c1/rpc/a", "mc/c2/seg/a",
                         "mc/c1/seg",   "p*x/1",       "pax/1"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        assert_int_equal(mc_meta_put_sync(m, all[i], all[i], strlen(all[i])), MC_OK);
    const char *seg[] = {"mc/c1/seg/a", "mc/c1/seg/b"};
    meta_check_list(m, "mc/c1/seg/", seg, 2);
    const char *c1[] = {"mc/c1/seg/a", "mc/c1/seg/b", "mc/c1/rpc/a", "mc/c1/seg"};
    meta_check_list(m, "mc/c1/", c1, 4);
    const char *star[] = {"p*x/1"};
    meta_check_list(m, "p*x/", star, 1);
    meta_check_list(m, "", all, 7);
    mc_meta_close(m);
}

static void list_by_prefix_matches_glob_characters_literally(void **state)
{
    meta_env_t *e = *state;
    mc_meta_t *m = meta_open(e, -1, 1, 0, 0);
    const char *all[] = {"p*x/1", "p*x/2", "pax/1", "p?x/1", "p[a]x/1", "p\\x/1", "q*x/1", "p*x"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        assert_int_equal(mc_meta_put_sync(m, all[i], "v", 1), MC_OK);
    /* many more keys, so that a backend listing in rounds needs several */
    char key[64];
    for (int i = 0; i < 3000; i++) {
        snprintf(key, sizeof(key), "other/%d", i);
        assert_int_equal(mc_meta_put_sync(m, key, "x", 1), MC_OK);
    }

    const char *star[] = {"p*x/1", "p*x/2"};
    meta_check_list(m, "p*x/", star, 2);
    const char *q[] = {"p?x/1"};
    meta_check_list(m, "p?x/", q, 1);
    const char *br[] = {"p[a]x/1"}; /* as a glob, [a] would match "pax/1" */
    meta_check_list(m, "p[a]x/", br, 1);
    const char *bs[] = {"p\\x/1"};
    meta_check_list(m, "p\\x/", bs, 1);
    const char *p[] = {"p*x/1", "p*x/2", "pax/1", "p?x/1", "p[a]x/1", "p\\x/1", "p*x"};
    meta_check_list(m, "p", p, 7);

    meta_keys_t k;
    memset(&k, 0, sizeof(k));
    assert_int_equal(mc_meta_list_sync(m, "other/2999", meta_collect, &k), MC_OK);
    assert_int_equal(k.n, 1);
    mc_meta_close(m);
}

static void entries_are_republished_after_the_service_restarts(void **state)
{
    meta_env_t *e = *state;
    mc_meta_t *a = meta_open(e, -1, 1, 1, 1000000);
    mc_meta_t *b = meta_open(e, -1, 2, 1, 1000000);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/a", meta_bin1, sizeof(meta_bin1)), MC_OK);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/rpc/a", meta_bin2, sizeof(meta_bin2)), MC_OK);
    meta_check_value(b, "mc/c1/seg/a", meta_bin1, sizeof(meta_bin1));

    e->b->stop(e, SIGKILL);
    mc_buf_t v = MC_BUF_INIT;
    mc_status_t st = mc_meta_get_sync(b, "mc/c1/seg/a", &v);
    mc_buf_fini(&v);
    assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
    assert_int_equal(e->b->start(e, 0), 0); /* empty: a new master, or no persistence */

    uint64_t t0 = mc_now_ms();
    assert_true(meta_wait_get(b, "mc/c1/seg/a", MC_OK, meta_bin1, sizeof(meta_bin1), 10000));
    assert_true(meta_wait_get(b, "mc/c1/rpc/a", MC_OK, meta_bin2, sizeof(meta_bin2), 2000));
    print_message("%s: entries back %llu ms after the service restarted\n", e->b->name,
                  (unsigned long long)(mc_now_ms() - t0));
    mc_meta_close(a);
    mc_meta_close(b);
}

/* Run with meta_setup_fast_expiry. */
static void entries_of_an_owner_that_stopped_refreshing_are_deleted(void **state)
{
    meta_env_t *e = *state;
    mc_meta_t *a = meta_open(e, -1, 1, 1, 0);
    mc_meta_t *b = meta_open(e, -1, 2, 1, 0);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/a", meta_bin1, sizeof(meta_bin1)), MC_OK);
    /* a live owner: it outlives the expiry (~1 s) */
    usleep(1600000);
    meta_check_value(b, "mc/c1/seg/a", meta_bin1, sizeof(meta_bin1));

    uint64_t t0 = mc_now_ms();
    mc_meta_close(a); /* no delete: the entry must go by itself */
    if (e->b->keeps_entries) {
        /* ...except where the protocol keeps it until deleted */
        usleep(1600000);
        meta_check_value(b, "mc/c1/seg/a", meta_bin1, sizeof(meta_bin1));
        mc_meta_close(b);
        return;
    }
    assert_true(meta_wait_get(b, "mc/c1/seg/a", MC_ERR_NOT_FOUND, NULL, 0, 5000));
    print_message("%s: entry gone %llu ms after its owner closed\n", e->b->name,
                  (unsigned long long)(mc_now_ms() - t0));
    mc_meta_close(b);
}

static void
calls_fail_within_the_timeout_while_the_service_is_unreachable_then_succeed(void **state)
{
    meta_env_t *e = *state;
    e->b->stop(e, SIGKILL); /* nobody listens on its port now */
    mc_meta_t *a = meta_open(e, -1, 1, 1, 500000);
    for (int i = 0; i < 3; i++) {
        uint64_t t0 = mc_now_us();
        mc_buf_t v = MC_BUF_INIT;
        mc_status_t st = mc_meta_get_sync(a, "k", &v);
        uint64_t took = mc_now_us() - t0;
        mc_buf_fini(&v);
        assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
        assert_true(took < 1500000);
        st = mc_meta_put_sync(a, "mc/c1/seg/a", meta_bin2, sizeof(meta_bin2));
        assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
        usleep(200000);
    }
    assert_int_equal(e->b->start(e, 0), 0);
    mc_meta_t *b = meta_open(e, -1, 2, 0, 0);
    /* the failed put was remembered: it is published once the service is back */
    assert_true(meta_wait_get(b, "mc/c1/seg/a", MC_OK, meta_bin2, sizeof(meta_bin2), 10000));
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/x", meta_bin1, sizeof(meta_bin1)), MC_OK);
    meta_check_value(b, "mc/c1/seg/x", meta_bin1, sizeof(meta_bin1));
    mc_meta_close(a);
    mc_meta_close(b);
}

/* Async driver: NCALLS puts, gets, dels and lists issued on the reactor;
 * counts callbacks, and those run inside their submit. */
#define META_NCALLS 48

typedef struct meta_driver {
    mc_meta_t *m;
    int row; /* its callbacks' args: meta_slots[row] */
    atomic_int in_submit;
    atomic_int calls[META_NCALLS];
    atomic_int status[META_NCALLS];
    atomic_int refused;
    atomic_int done;
    atomic_int early;
} meta_driver_t;

typedef struct meta_slot {
    meta_driver_t *d;
    int i;
} meta_slot_t;

static meta_slot_t meta_slots[2][META_NCALLS];

static void meta_drv_get_cb(void *arg, mc_status_t st, const void *val, size_t len)
{
    meta_slot_t *s = arg;
    (void)val;
    (void)len;
    if (atomic_load(&s->d->in_submit))
        atomic_fetch_add(&s->d->early, 1);
    atomic_fetch_add(&s->d->calls[s->i], 1);
    atomic_store(&s->d->status[s->i], st);
    atomic_fetch_add(&s->d->done, 1);
}

static void meta_drv_done_cb(void *arg, mc_status_t st)
{
    meta_drv_get_cb(arg, st, NULL, 0);
}

static void meta_drv_list_cb(void *arg, mc_status_t st, const mc_meta_entry_t *ent, size_t n)
{
    (void)ent;
    (void)n;
    meta_drv_get_cb(arg, st, NULL, 0);
}

static void meta_drv_issue(mc_reactor_t *r, void *arg, mc_status_t st)
{
    meta_driver_t *d = arg;
    (void)r;
    assert_int_equal(st, MC_OK);
    for (int i = 0; i < META_NCALLS; i++) {
        meta_slot_t *s = &meta_slots[d->row][i];
        mc_status_t rc;
        atomic_store(&d->in_submit, 1);
        switch (i % 4) {
        case 0:
            rc = d->m->ops->put(d->m, "mc/c1/seg/p", "v", 1, meta_drv_done_cb, s);
            break;
        case 1:
            rc = d->m->ops->get(d->m, "mc/c1/seg/p", meta_drv_get_cb, s);
            break;
        case 2:
            rc = d->m->ops->del(d->m, "mc/c1/seg/q", meta_drv_done_cb, s);
            break;
        default:
            rc = d->m->ops->list(d->m, "mc/", meta_drv_list_cb, s);
            break;
        }
        atomic_store(&d->in_submit, 0);
        if (rc != MC_INPROGRESS)
            atomic_fetch_add(&d->refused, 1);
    }
}

static inline void meta_drv_init(meta_driver_t *d, int row, mc_meta_t *m)
{
    memset(d, 0, sizeof(*d));
    d->m = m;
    d->row = row;
    for (int i = 0; i < META_NCALLS; i++) {
        meta_slots[row][i].d = d;
        meta_slots[row][i].i = i;
    }
}

static inline int meta_drv_wait(meta_driver_t *d, int n, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 5) {
        if (atomic_load(&d->done) >= n)
            return 1;
        usleep(5000);
    }
    return atomic_load(&d->done) >= n;
}

static inline void meta_drv_check_all_once(meta_driver_t *d, mc_status_t want)
{
    assert_int_equal(atomic_load(&d->refused), 0);
    assert_int_equal(atomic_load(&d->early), 0);
    for (int i = 0; i < META_NCALLS; i++) {
        assert_int_equal(atomic_load(&d->calls[i]), 1);
        assert_int_equal(atomic_load(&d->status[i]), want);
    }
}

static void every_call_completes_once_and_never_inside_its_submit(void **state)
{
    meta_env_t *e = *state;
    static meta_driver_t d;
    mc_meta_t *a = meta_open(e, -1, 1, 0, 0);
    meta_drv_init(&d, 0, a);
    assert_int_equal(mc_reactor_call(e->r, meta_drv_issue, &d), MC_OK);
    assert_true(meta_drv_wait(&d, META_NCALLS, 10000));
    usleep(50000); /* a second callback, if any, would show up here */
    assert_int_equal(atomic_load(&d.refused), 0);
    assert_int_equal(atomic_load(&d.early), 0);
    for (int i = 0; i < META_NCALLS; i++) {
        assert_int_equal(atomic_load(&d.calls[i]), 1);
        mc_status_t st = atomic_load(&d.status[i]);
        if (i % 4 == 1 && st == MC_ERR_NOT_FOUND)
            continue; /* a get may run before the first put */
        assert_int_equal(st, MC_OK);
    }
    mc_meta_close(a);
}

static void pending_calls_fail_exactly_once_when_the_service_dies(void **state)
{
    meta_env_t *e = *state;
    static meta_driver_t d;
    mc_meta_t *a = meta_open(e, -1, 1, 0, 10000000);
    assert_int_equal(mc_meta_put_sync(a, "warm", "up", 2), MC_OK); /* connected */

    /* calls are sent and stay unanswered */
    assert_int_equal(test_proc_freeze(e->b->pid(e)), 0);
    meta_drv_init(&d, 0, a);
    assert_int_equal(mc_reactor_call(e->r, meta_drv_issue, &d), MC_OK);
    usleep(100000);
    assert_int_equal(atomic_load(&d.done), 0);
    e->b->stop(e, SIGKILL);
    assert_true(meta_drv_wait(&d, META_NCALLS, 5000));
    usleep(100000); /* a second callback, if any, would show up here */
    meta_drv_check_all_once(&d, MC_ERR_CONN_CLOSED);

    /* and the backend recovers with the service: its entry is back */
    assert_int_equal(e->b->start(e, 0), 0);
    mc_meta_t *b = meta_open(e, -1, 2, 0, 0);
    assert_true(meta_wait_get(b, "warm", MC_OK, "up", 2, 10000));
    mc_meta_close(a);
    mc_meta_close(b);
}

static void close_cancels_pending_calls_exactly_once(void **state)
{
    meta_env_t *e = *state;
    static meta_driver_t sent, queued;
    mc_meta_t *a = meta_open(e, -1, 1, 0, 10000000);
    assert_int_equal(mc_meta_put_sync(a, "warm", "up", 2), MC_OK); /* connected */
    assert_int_equal(test_proc_freeze(e->b->pid(e)), 0);
    meta_drv_init(&sent, 0, a);
    assert_int_equal(mc_reactor_call(e->r, meta_drv_issue, &sent), MC_OK);
    /* a backend with keyspaces: one that connects (the kernel accepts) but
     * whose selection is never answered, so its calls wait in its queue */
    mc_meta_t *c = NULL;
    if (e->b->has_spaces) {
        c = meta_open(e, 5, 2, 0, 10000000);
        meta_drv_init(&queued, 1, c);
        assert_int_equal(mc_reactor_call(e->r, meta_drv_issue, &queued), MC_OK);
    }
    usleep(100000);
    assert_int_equal(atomic_load(&sent.done), 0);
    mc_meta_close(a);
    assert_int_equal(atomic_load(&sent.done), META_NCALLS);
    if (c != NULL) {
        assert_int_equal(atomic_load(&queued.done), 0);
        mc_meta_close(c);
        assert_int_equal(atomic_load(&queued.done), META_NCALLS);
    }
    usleep(50000);
    meta_drv_check_all_once(&sent, MC_ERR_CANCELED);
    if (c != NULL)
        meta_drv_check_all_once(&queued, MC_ERR_CANCELED);
    kill(e->b->pid(e), SIGCONT);
}

static void malformed_connection_strings_are_rejected_at_open(void **state)
{
    meta_env_t *e = *state;
    mc_meta_opts_t o;
    mc_meta_opts_init(&o);
    o.owner_lo = 1;
    for (size_t i = 0; e->b->bad_conns[i] != NULL; i++) {
        mc_meta_t *m = (mc_meta_t *)&o; /* must stay untouched */
        mc_status_t st = mc_meta_open(e->b->bad_conns[i], e->r, &o, &m);
        if (st != MC_ERR_INVALID_ARGUMENT)
            fail_msg("'%s' gave %s", e->b->bad_conns[i], mc_status_str(st));
        assert_ptr_equal(m, (mc_meta_t *)&o);
    }
    mc_meta_t *m = NULL;
    assert_int_equal(mc_meta_open(NULL, e->r, &o, &m), MC_ERR_INVALID_ARGUMENT);
    char conn[96];
    e->b->conn(e, -1, conn, sizeof(conn));
    if (e->b->owner_required) {
        o.owner_lo = 0;
        assert_int_equal(mc_meta_open(conn, e->r, &o, &m), MC_ERR_INVALID_ARGUMENT);
        assert_null(m);
        o.owner_lo = 1;
    }
    /* and the accepted forms */
    assert_int_equal(mc_meta_open(conn, e->r, &o, &m), MC_OK);
    mc_meta_close(m);
    for (size_t i = 0; e->b->good_conns != NULL && e->b->good_conns[i] != NULL; i++) {
        char good[96];
        if (strstr(e->b->good_conns[i], "%u") != NULL)
            snprintf(good, sizeof(good), e->b->good_conns[i], e->b->port(e));
        else
            snprintf(good, sizeof(good), "%s", e->b->good_conns[i]);
        m = NULL;
        if (mc_meta_open(good, e->r, &o, &m) != MC_OK)
            fail_msg("'%s' was refused", good);
        mc_meta_close(m);
    }
}

/* The cases, for a test's list (each with its own service). */
#define META_CASES                                                                                 \
    cmocka_unit_test_setup_teardown(put_get_del_list_round_trip_keeps_binary_values, meta_setup,   \
                                    meta_teardown),                                                \
        cmocka_unit_test_setup_teardown(get_of_a_missing_key_is_not_found, meta_setup,             \
                                        meta_teardown),                                            \
        cmocka_unit_test_setup_teardown(list_by_prefix_returns_exactly_the_matching_keys,          \
                                        meta_setup, meta_teardown),                                \
        cmocka_unit_test_setup_teardown(list_by_prefix_matches_glob_characters_literally,          \
                                        meta_setup, meta_teardown),                                \
        cmocka_unit_test_setup_teardown(entries_are_republished_after_the_service_restarts,        \
                                        meta_setup, meta_teardown),                                \
        cmocka_unit_test_setup_teardown(entries_of_an_owner_that_stopped_refreshing_are_deleted,   \
                                        meta_setup_fast_expiry, meta_teardown),                    \
        cmocka_unit_test_setup_teardown(                                                           \
            calls_fail_within_the_timeout_while_the_service_is_unreachable_then_succeed,           \
            meta_setup, meta_teardown),                                                            \
        cmocka_unit_test_setup_teardown(every_call_completes_once_and_never_inside_its_submit,     \
                                        meta_setup, meta_teardown),                                \
        cmocka_unit_test_setup_teardown(pending_calls_fail_exactly_once_when_the_service_dies,     \
                                        meta_setup, meta_teardown),                                \
        cmocka_unit_test_setup_teardown(close_cancels_pending_calls_exactly_once, meta_setup,      \
                                        meta_teardown),                                            \
        cmocka_unit_test_setup_teardown(malformed_connection_strings_are_rejected_at_open,         \
                                        meta_setup, meta_teardown)

/* Run the cases (and extra, n_extra more) against backend b; main's
 * return value. */
static inline int meta_run(const meta_backend_t *b, const struct CMUnitTest *extra, size_t n_extra)
{
    meta_g_env.b = b;
    /* TEST_LOG=debug (or "warn,metadata=debug,rpc=debug") to see more */
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "warn", NULL, 0);
    const struct CMUnitTest cases[] = {META_CASES};
    struct CMUnitTest all[sizeof(cases) / sizeof(cases[0]) + 16];
    size_t n = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        all[n++] = cases[i];
    for (size_t i = 0; i < n_extra && n < sizeof(all) / sizeof(all[0]); i++)
        all[n++] = extra[i];
    return _cmocka_run_group_tests(b->name, all, n, meta_group_setup, meta_group_teardown);
}

#endif /* MC_TEST_META_CASES_H */
