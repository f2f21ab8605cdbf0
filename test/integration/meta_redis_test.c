/*
 * The redis:// metadata backend against a real redis-server, started by the
 * test on a free port (--save "" --appendonly no, a temporary --dir) and
 * killed at the end. Without /usr/bin/redis-server (`make deps` installs it;
 * TEST_REDIS_SERVER overrides the path) every test fails, loudly.
 *
 * Covered: round trip with binary values; missing keys; list by prefix with
 * glob characters matched literally; database selection; expiry of entries
 * whose owner stopped refreshing; re-publishing after redis-server restarts;
 * calls while Redis is unreachable; pending calls failing or being canceled
 * exactly once; bad connection strings.
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
#include <sys/stat.h>

#include "proc.h"
#include "reactor/reactor.h"
#include "transport/metadata.h"
#include "util/log.h"
#include "util/time.h"

typedef struct env {
    mc_reactor_group_t *g;
    mc_reactor_t *r;
    const char *redis_bin;
    char dir[64];
    test_proc_t redis;
    unsigned port;
} env_t;

/* ------------------------------------------------------------ helpers */

static void start_redis(env_t *e)
{
    char port[16], log[128];
    snprintf(port, sizeof(port), "%u", e->port);
    snprintf(log, sizeof(log), "%s/redis-%u.log", e->dir, e->port);
    char *argv[] = {(char *)e->redis_bin,
                    "--port",
                    port,
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    e->dir,
                    "--logfile",
                    log,
                    "--daemonize",
                    "no",
                    NULL};
    assert_int_equal(test_proc_start(&e->redis, argv), 0);
    for (int waited = 0; !test_port_open(e->port); waited += 10) {
        if (waited > 5000)
            fail_msg("redis-server did not listen on port %u within 5 s (log: %s)", e->port, log);
        usleep(10000);
    }
}

static void stop_redis(env_t *e, int sig)
{
    if (e->redis.pid > 0)
        test_proc_stop(&e->redis, sig, 5000);
}

static void conn_str(const env_t *e, char *buf, size_t len, int db)
{
    if (db >= 0)
        snprintf(buf, len, "redis://127.0.0.1:%u/%d", e->port, db);
    else
        snprintf(buf, len, "redis://127.0.0.1:%u", e->port);
}

static mc_meta_t *open_meta(env_t *e, int db, uint64_t owner, uint64_t ttl_us, uint64_t timeout_us)
{
    char conn[64];
    conn_str(e, conn, sizeof(conn), db);
    mc_meta_opts_t o;
    mc_meta_opts_init(&o);
    o.owner_hi = 7;
    o.owner_lo = owner;
    if (ttl_us)
        o.ttl_us = ttl_us;
    if (timeout_us)
        o.call_timeout_us = timeout_us;
    mc_meta_t *m = NULL;
    assert_int_equal(mc_meta_open(conn, e->r, &o, &m), MC_OK);
    assert_non_null(m);
    return m;
}

/* get key and compare with want (NULL: expect MC_ERR_NOT_FOUND). */
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

/* Retry get until it answers st (with the value, for MC_OK) or timeout_ms. */
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

/* list prefix and check that exactly the n keys in want come back. */
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
    e.redis_bin = getenv("TEST_REDIS_SERVER");
    if (e.redis_bin == NULL)
        e.redis_bin = "/usr/bin/redis-server";
    if (access(e.redis_bin, X_OK) != 0) {
        fprintf(stderr,
                "FATAL: %s not found or not executable: these tests need a real redis-server "
                "(run `make deps`, or set TEST_REDIS_SERVER)\n",
                e.redis_bin);
        return -1;
    }
    snprintf(e.dir, sizeof(e.dir), "/tmp/mc-meta-redis-XXXXXX");
    if (mkdtemp(e.dir) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
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
    DIR *d = opendir(e->dir);
    if (d != NULL) {
        struct dirent *de;
        char path[384];
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", e->dir, de->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(e->dir);
    return 0;
}

/* Each test gets its own redis-server on a fresh port. */
static int setup(void **state)
{
    env_t *e = *state;
    e->port = test_free_port();
    start_redis(e);
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    stop_redis(e, SIGKILL);
    return 0;
}

/* ---------------------------------------------------------------- tests */

static const uint8_t bin1[] = {0x00, 0x01, 0x00, 0xff, 'a', 0x00};
static const uint8_t bin2[] = {0xde, 0xad, 0x00, 0xbe, 0xef};

static void put_get_del_list_round_trip_keeps_binary_values(void **state)
{
    env_t *e = *state;
    mc_meta_t *m = open_meta(e, -1, 1, 0, 0);
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

    /* overwrite, then delete (twice: deleting a missing key is fine) */
    assert_int_equal(mc_meta_put_sync(m, "mc/c1/seg/a", bin2, sizeof(bin2)), MC_OK);
    check_value(m, "mc/c1/seg/a", bin2, sizeof(bin2));
    assert_int_equal(mc_meta_del_sync(m, "mc/c1/seg/a"), MC_OK);
    assert_int_equal(mc_meta_del_sync(m, "mc/c1/seg/a"), MC_OK);
    check_value(m, "mc/c1/seg/a", NULL, 0);
    const char *left[] = {"mc/c1/seg/b"};
    check_list(m, "mc/c1/seg/", left, 1);

    /* another instance sees the same */
    mc_meta_t *m2 = open_meta(e, -1, 2, 0, 0);
    check_value(m2, "mc/c1/seg/b", bin2, sizeof(bin2));
    mc_meta_close(m2);
    mc_meta_close(m);
}

/* Issue 13 finding 7: a second process with the same name took the key, and
 * the first one's delete (at its stop) removed the second's entry. The
 * delete is a compare-and-delete script: only the value we put goes. */
static void a_delete_removes_only_the_value_this_process_put(void **state)
{
    env_t *e = *state;
    mc_meta_t *a = open_meta(e, -1, 1, 0, 0);
    mc_meta_t *b = open_meta(e, -1, 2, 0, 0);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/n", bin1, sizeof(bin1)), MC_OK);
    assert_int_equal(mc_meta_put_sync(b, "mc/c1/seg/n", bin2, sizeof(bin2)), MC_OK);
    /* a's delete finds b's value: left alone */
    assert_int_equal(mc_meta_del_sync(a, "mc/c1/seg/n"), MC_OK);
    check_value(a, "mc/c1/seg/n", bin2, sizeof(bin2));
    /* a key a never put: left alone too */
    assert_int_equal(mc_meta_put_sync(b, "mc/c1/seg/m", bin1, sizeof(bin1)), MC_OK);
    assert_int_equal(mc_meta_del_sync(a, "mc/c1/seg/m"), MC_OK);
    check_value(a, "mc/c1/seg/m", bin1, sizeof(bin1));
    /* the owner's delete works */
    assert_int_equal(mc_meta_del_sync(b, "mc/c1/seg/n"), MC_OK);
    check_value(a, "mc/c1/seg/n", NULL, 0);
    mc_meta_close(a);
    mc_meta_close(b);
}

static void get_of_a_missing_key_is_not_found(void **state)
{
    env_t *e = *state;
    mc_meta_t *m = open_meta(e, -1, 1, 0, 0);
    check_value(m, "mc/c1/seg/nobody", NULL, 0);
    const char *none[] = {NULL};
    check_list(m, "mc/c1/", none, 0);
    mc_meta_close(m);
}

static void list_by_prefix_matches_glob_characters_literally(void **state)
{
    env_t *e = *state;
    mc_meta_t *m = open_meta(e, -1, 1, 0, 0);
    const char *all[] = {"p*x/1", "p*x/2", "pax/1", "p?x/1", "p[a]x/1", "p\\x/1", "q*x/1", "p*x"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        assert_int_equal(mc_meta_put_sync(m, all[i], "v", 1), MC_OK);
    /* many more keys so that SCAN needs several rounds */
    char key[64];
    for (int i = 0; i < 3000; i++) {
        snprintf(key, sizeof(key), "other/%d", i);
        assert_int_equal(mc_meta_put_sync(m, key, "x", 1), MC_OK);
    }

    const char *star[] = {"p*x/1", "p*x/2"};
    check_list(m, "p*x/", star, 2);
    const char *q[] = {"p?x/1"};
    check_list(m, "p?x/", q, 1);
    const char *br[] = {"p[a]x/1"}; /* unescaped, [a] would match "pax/1" */
    check_list(m, "p[a]x/", br, 1);
    const char *bs[] = {"p\\x/1"};
    check_list(m, "p\\x/", bs, 1);
    const char *p[] = {"p*x/1", "p*x/2", "pax/1", "p?x/1", "p[a]x/1", "p\\x/1", "p*x"};
    check_list(m, "p", p, 7);

    keys_t k;
    memset(&k, 0, sizeof(k));
    assert_int_equal(mc_meta_list_sync(m, "other/2999", collect, &k), MC_OK);
    assert_int_equal(k.n, 1);
    mc_meta_close(m);
}

static void a_database_index_selects_its_own_keyspace(void **state)
{
    env_t *e = *state;
    mc_meta_t *m3 = open_meta(e, 3, 1, 0, 0);
    mc_meta_t *m4 = open_meta(e, 4, 2, 0, 0);
    mc_meta_t *m3b = open_meta(e, 3, 3, 0, 0);
    assert_int_equal(mc_meta_put_sync(m3, "k", "three", 5), MC_OK);
    check_value(m4, "k", NULL, 0);
    check_value(m3b, "k", "three", 5);
    mc_meta_close(m3);
    mc_meta_close(m4);
    mc_meta_close(m3b);
}

static void entries_expire_when_their_owner_stops_refreshing(void **state)
{
    env_t *e = *state;
    mc_meta_t *a = open_meta(e, -1, 1, 1000000, 0); /* ttl 1 s */
    mc_meta_t *b = open_meta(e, -1, 2, 0, 0);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/a", bin1, sizeof(bin1)), MC_OK);
    /* alive owner: refreshed every ttl/3, so it outlives its ttl */
    usleep(1600000);
    check_value(b, "mc/c1/seg/a", bin1, sizeof(bin1));

    uint64_t t0 = mc_now_ms();
    mc_meta_close(a); /* no delete: the entry must go by itself */
    assert_true(wait_get(b, "mc/c1/seg/a", MC_ERR_NOT_FOUND, NULL, 0, 3000));
    print_message("entry gone %llu ms after its owner closed\n",
                  (unsigned long long)(mc_now_ms() - t0));
    mc_meta_close(b);
}

static void entries_are_republished_after_redis_server_restarts(void **state)
{
    env_t *e = *state;
    mc_meta_t *a = open_meta(e, -1, 1, 0, 1000000);
    mc_meta_t *b = open_meta(e, -1, 2, 0, 1000000);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/a", bin1, sizeof(bin1)), MC_OK);
    check_value(b, "mc/c1/seg/a", bin1, sizeof(bin1));

    stop_redis(e, SIGKILL);
    mc_buf_t v = MC_BUF_INIT;
    mc_status_t st = mc_meta_get_sync(b, "mc/c1/seg/a", &v);
    mc_buf_fini(&v);
    assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
    start_redis(e); /* empty: --save "" */

    uint64_t t0 = mc_now_ms();
    assert_true(wait_get(b, "mc/c1/seg/a", MC_OK, bin1, sizeof(bin1), 10000));
    print_message("entry back %llu ms after redis-server restarted\n",
                  (unsigned long long)(mc_now_ms() - t0));
    mc_meta_close(a);
    mc_meta_close(b);
}

static void calls_fail_within_the_timeout_while_redis_is_unreachable_then_succeed(void **state)
{
    env_t *e = *state;
    stop_redis(e, SIGKILL); /* nobody listens on e->port now */
    mc_meta_t *a = open_meta(e, -1, 1, 0, 500000);

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

    start_redis(e);
    mc_meta_t *b = open_meta(e, -1, 2, 0, 0);
    /* the failed put was remembered: it is published once connected */
    assert_true(wait_get(b, "mc/c1/seg/a", MC_OK, bin2, sizeof(bin2), 10000));
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/x", bin1, sizeof(bin1)), MC_OK);
    check_value(b, "mc/c1/seg/x", bin1, sizeof(bin1));
    mc_meta_close(a);
    mc_meta_close(b);
}

/* Async driver: issue N gets (and puts) on the reactor, count callbacks. */
#define NCALLS 50

typedef struct driver {
    mc_meta_t *m;
    int row; /* its callbacks' args: slots[row] */
    atomic_int in_submit;
    atomic_int calls[NCALLS];
    atomic_int status[NCALLS];
    atomic_int refused;
    atomic_int done;
    atomic_int early; /* callbacks run inside a submit */
} driver_t;

typedef struct slot {
    driver_t *d;
    int i;
} slot_t;

static slot_t slots[2][NCALLS];

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

static void drv_issue(mc_reactor_t *r, void *arg, mc_status_t st)
{
    driver_t *d = arg;
    (void)r;
    assert_int_equal(st, MC_OK);
    for (int i = 0; i < NCALLS; i++) {
        slot_t *s = &slots[d->row][i];
        atomic_store(&d->in_submit, 1);
        mc_status_t rc = i % 2 ? d->m->ops->get(d->m, "mc/c1/seg/a", drv_get_cb, s)
                               : d->m->ops->put(d->m, "mc/c1/seg/p", "v", 1, drv_done_cb, s);
        atomic_store(&d->in_submit, 0);
        if (rc != MC_INPROGRESS)
            atomic_fetch_add(&d->refused, 1);
    }
}

static void drv_init(driver_t *d, int row, mc_meta_t *m)
{
    memset(d, 0, sizeof(*d));
    d->m = m;
    d->row = row;
    for (int i = 0; i < NCALLS; i++) {
        slots[row][i].d = d;
        slots[row][i].i = i;
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

static void pending_calls_fail_exactly_once_when_redis_dies(void **state)
{
    env_t *e = *state;
    static driver_t d;
    mc_meta_t *a = open_meta(e, -1, 1, 0, 10000000);
    assert_int_equal(mc_meta_put_sync(a, "warm", "up", 2), MC_OK); /* connected */

    assert_int_equal(test_proc_freeze(e->redis.pid), 0); /* calls are sent and stay unanswered */
    drv_init(&d, 0, a);
    assert_int_equal(mc_reactor_call(e->r, drv_issue, &d), MC_OK);
    usleep(100000);
    assert_int_equal(atomic_load(&d.done), 0);
    stop_redis(e, SIGKILL);
    assert_true(wait_done(&d, NCALLS, 5000));
    usleep(100000); /* a second callback, if any, would show up here */
    check_all_once(&d, MC_ERR_CONN_CLOSED);

    /* and the backend recovers with the server */
    start_redis(e);
    mc_meta_t *b = open_meta(e, -1, 2, 0, 0);
    assert_true(wait_get(b, "warm", MC_OK, "up", 2, 10000));
    mc_meta_close(a);
    mc_meta_close(b);
}

static void close_cancels_sent_and_queued_calls_exactly_once(void **state)
{
    env_t *e = *state;
    static driver_t sent, queued;
    mc_meta_t *a = open_meta(e, -1, 1, 0, 10000000);
    assert_int_equal(mc_meta_put_sync(a, "warm", "up", 2), MC_OK); /* READY */
    assert_int_equal(test_proc_freeze(e->redis.pid), 0);
    /* connects (the kernel accepts) but its SELECT is never answered, so its
     * calls wait in the queue */
    mc_meta_t *c = open_meta(e, 5, 2, 0, 10000000);

    drv_init(&sent, 0, a);
    drv_init(&queued, 1, c);
    assert_int_equal(mc_reactor_call(e->r, drv_issue, &sent), MC_OK);
    assert_int_equal(mc_reactor_call(e->r, drv_issue, &queued), MC_OK);
    usleep(100000);
    assert_int_equal(atomic_load(&sent.done), 0);
    assert_int_equal(atomic_load(&queued.done), 0);

    mc_meta_close(a);
    mc_meta_close(c);
    assert_int_equal(atomic_load(&sent.done), NCALLS);
    assert_int_equal(atomic_load(&queued.done), NCALLS);
    usleep(50000);
    check_all_once(&sent, MC_ERR_CANCELED);
    check_all_once(&queued, MC_ERR_CANCELED);
    kill(e->redis.pid, SIGCONT);
}

static void malformed_connection_strings_are_rejected_at_open(void **state)
{
    env_t *e = *state;
    static const char *const bad[] = {
        "redis://",      "redis://host:notaport", "ftp://x",         "",
        "redis://:6379", "redis://h:0",           "redis://h:65536", "redis://h:1/x",
        "redis://h:1/",  "redis://h:1x",          "redis://h h:1",   "redis://[::1:1",
        "master://",     "master://h:1/0",        "redis:/h:1",      "REDIS://h:1",
    };
    mc_meta_opts_t o;
    mc_meta_opts_init(&o);
    o.owner_lo = 1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mc_meta_t *m = (mc_meta_t *)&o; /* must stay untouched */
        mc_status_t st = mc_meta_open(bad[i], e->r, &o, &m);
        if (st != MC_ERR_INVALID_ARGUMENT)
            fail_msg("'%s' gave %s", bad[i], mc_status_str(st));
        assert_ptr_equal(m, (mc_meta_t *)&o);
    }
    mc_meta_t *m = NULL;
    assert_int_equal(mc_meta_open(NULL, e->r, &o, &m), MC_ERR_INVALID_ARGUMENT);
    /* and the accepted forms */
    assert_int_equal(mc_meta_open("redis://127.0.0.1", e->r, &o, &m), MC_OK);
    mc_meta_close(m);
    assert_int_equal(mc_meta_open("redis://[::1]:1/0", e->r, &o, &m), MC_OK);
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
        cmocka_unit_test_setup_teardown(a_delete_removes_only_the_value_this_process_put, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(list_by_prefix_matches_glob_characters_literally, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_database_index_selects_its_own_keyspace, setup, teardown),
        cmocka_unit_test_setup_teardown(entries_expire_when_their_owner_stops_refreshing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(entries_are_republished_after_redis_server_restarts, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            calls_fail_within_the_timeout_while_redis_is_unreachable_then_succeed, setup, teardown),
        cmocka_unit_test_setup_teardown(pending_calls_fail_exactly_once_when_redis_dies, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(close_cancels_sent_and_queued_calls_exactly_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(malformed_connection_strings_are_rejected_at_open, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
