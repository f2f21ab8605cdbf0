/*
 * The store client end to end: a real mooncake-master, two real
 * mooncake-store-server processes (storage nodes, 128 MiB each) and this
 * process as a pure client (no segment, a 32 MiB staging buffer, so values
 * larger than that travel in pieces).
 *
 * Bad keys fail before any RPC; values of many sizes (1 B .. 16 MiB, and
 * 64 MiB once) round-trip byte for byte, through staging and zero-copy;
 * misuse gets upstream's statuses; two replicas land on the two nodes; batch,
 * async and four-thread calls work; closing a busy client calls every
 * callback once; a segment mounted at run time serves local replicas (memcpy
 * both ways) until unmounted; a put abandoned between PutStart and PutEnd
 * (its client killed) is discarded by the master and leaves nothing behind;
 * a put whose write timed out on a hung node is not revoked (the write may
 * still land) but left to the master; filling the pool evicts old objects
 * and keeps serving; with the master hung or down calls fail within the RPC
 * timeout and work again once a new master is up and the nodes re-mounted;
 * a SIGKILLed node's two-replica objects stay readable (gets fail over) and
 * later puts land on the survivor.
 *
 * One master and two nodes serve every test, in order (the last tests
 * restart the master and kill a node). master.client_ttl is 3 s so that a
 * dead node is noticed quickly; put_start_discard_timeout is 1 s; leases
 * last 1 s (unmounting waits for them).
 *
 * The cases every transport must pass are in store_cases.h (run here over
 * tcp, and by store_rdma_test over rdma); the rest are the client's own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <assert.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "mooncake/store.h"
#include "store_cases.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/master_client.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MIB (1ull << 20)
#define NODE_SEGMENT "128MiB"
#define NODE_SEGMENT_BYTES (128 * MIB)
#define STAGING (32 * MIB)
/* ThreadSanitizer slows everything ~5-10x: stretch the master's clocks
 * (puts must finish within the discard timeout, reads within the lease) and
 * the waits with it. */
#define SLOW TC_SLOW
#define RPC_TIMEOUT_US (2000000 * SLOW)
#define NNODES 2

typedef store_env_t env_t;

static char g_self[256]; /* path of this test binary (for the zombie helper) */

/* The master's settings (kept for its restart): clients expire after 3 s
 * (a dead node is noticed quickly), abandoned puts are discarded after 1 s,
 * leases last 1 s (unmounting waits for them). */
static char g_ms_buf[4][64];
static const char *g_ms[5];

static void master_sets_init(void)
{
    snprintf(g_ms_buf[0], sizeof(g_ms_buf[0]), "master.client_ttl=%ds", 3 * SLOW);
    snprintf(g_ms_buf[1], sizeof(g_ms_buf[1]), "master.put_start_discard_timeout=%ds", 1 * SLOW);
    snprintf(g_ms_buf[2], sizeof(g_ms_buf[2]), "master.put_start_release_timeout=%ds", 2 * SLOW);
    snprintf(g_ms_buf[3], sizeof(g_ms_buf[3]), "master.lease_ttl=%ds", 1 * SLOW);
    for (int i = 0; i < 4; i++)
        g_ms[i] = g_ms_buf[i];
    g_ms[4] = NULL;
}

/* --------------------------------------------------------------- helpers */

static mc_status_t open_client(unsigned master_port, uint64_t rpc_timeout, mc_store_t **out)
{
    char master[64];
    snprintf(master, sizeof(master), "127.0.0.1:%u", master_port);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.shm = "off"; /* over tcp (store_shm_test runs the cases over shm) */
    c.global_segment_size = 0;
    c.local_buffer_size = STAGING;
    c.reactors = 2;
    c.rpc_timeout_us = rpc_timeout;
    c.transfer_timeout_us = 5000000;
    return mc_store_open(&c, out);
}

static int setup(void **state)
{
    static env_t e = {.protocol = "tcp",
                      .staging = STAGING,
                      .big = 64 * MIB, /* twice the staging buffer */
                      .batch_big = 20 * MIB};
    signal(SIGPIPE, SIG_IGN);
    ssize_t sl = readlink("/proc/self/exe", g_self, sizeof(g_self) - 1);
    assert_true(sl > 0);
    g_self[sl] = '\0';
    master_sets_init();
    const char *const ns[] = {"store.global_segment_size=" NODE_SEGMENT, NULL};
    assert_int_equal(tc_cluster_start(&e.c, NNODES, g_ms, ns), 0);
    assert_int_equal(open_client(e.c.master.rpc_port, RPC_TIMEOUT_US, &e.s), MC_OK);
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    mc_store_close(e->s);
    tc_cluster_stop(&e->c, SIGTERM);
    return 0;
}

static void key_of(char *k, size_t room, const char *prefix, unsigned long i)
{
    snprintf(k, room, "%s-%lu", prefix, i);
}

/* ------------------------------------------------------------------ tests */

/* For async calls refused at submission: their callback never runs. */
static void nop_cb(void *arg, mc_status_t st)
{
    (void)arg;
    (void)st;
}

static void bad_keys_and_values_fail_at_once_without_asking_the_master(void **state)
{
    env_t *e = *state;
    /* A client whose master does not exist: any RPC would fail with a
     * connection status, so these statuses prove none was sent. Opening
     * works anyway (the master may come later). */
    mc_store_t *lost;
    unsigned dead = test_free_port();
    assert_int_equal(open_client(dead, RPC_TIMEOUT_US, &lost), MC_OK);
    char big[4097];
    memset(big, 'k', sizeof(big));
    uint8_t v[16] = {1};
    uint8_t out[16];
    mc_store_t *both[2] = {e->s, lost};
    for (int i = 0; i < 2; i++) {
        mc_store_t *s = both[i];
        uint64_t t0 = mc_now_ms();
        assert_int_equal(mc_store_put(s, "", 0, v, sizeof(v), NULL), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_put(s, big, sizeof(big), v, sizeof(v), NULL), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_put(s, "a\0b", 3, v, sizeof(v), NULL), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_put(s, "k", 1, v, 0, NULL), MC_ERR_INVALID_PARAMS);
        mc_replicate_config_t rc;
        mc_replicate_config_init(&rc);
        rc.replica_num = 0;
        assert_int_equal(mc_store_put(s, "k", 1, v, sizeof(v), &rc), MC_ERR_INVALID_PARAMS);
        /* a config size the library does not know (include/README.md) */
        mc_replicate_config_init(&rc);
        rc.struct_size = 0; /* not set by mc_replicate_config_init */
        assert_int_equal(mc_store_put(s, "k", 1, v, sizeof(v), &rc), MC_ERR_INVALID_PARAMS);
        rc.struct_size = sizeof(rc) + 8; /* a newer header than the library */
        assert_int_equal(mc_store_upsert(s, "k", 1, v, sizeof(v), &rc), MC_ERR_INVALID_PARAMS);
        mc_slice_t kv[2] = {{"k", 1}, {v, sizeof(v)}};
        mc_status_t kst = MC_OK;
        assert_int_equal(mc_store_batch_put(s, &kv[0], &kv[1], 1, &rc, &kst),
                         MC_ERR_INVALID_PARAMS);
        assert_int_equal(mc_store_put_async(s, "k", 1, v, sizeof(v), &rc, nop_cb, NULL),
                         MC_ERR_INVALID_PARAMS);
        assert_int_equal(mc_store_get(s, "", 0, out, sizeof(out), NULL), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_get(s, big, sizeof(big), out, sizeof(out), NULL),
                         MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_exist(s, "", 0), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_remove(s, big, sizeof(big), 0), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_get_size(s, "", 0), MC_ERR_INVALID_KEY);
        assert_true(mc_now_ms() - t0 < 200 * SLOW);
    }
    /* a program built when mc_replicate_config_t ended before soft_pin_action:
     * the bytes after its struct are not its own (garbage here, which as a
     * soft_pin_action would fail the put) */
    unsigned char old_cfg[sizeof(mc_replicate_config_t)];
    memset(old_cfg, 0xAB, sizeof(old_cfg));
    mc_replicate_config_t *oc = (mc_replicate_config_t *)(void *)old_cfg;
    mc_replicate_config_init_size(oc, offsetof(mc_replicate_config_t, soft_pin_action));
    assert_int_equal(mc_store_put(e->s, "old-cfg", 7, v, sizeof(v), oc), MC_OK);
    assert_int_equal(mc_store_get(e->s, "old-cfg", 7, out, sizeof(out), NULL), (int64_t)sizeof(v));
    assert_memory_equal(out, v, sizeof(v));
    assert_int_equal(mc_store_remove(e->s, "old-cfg", 7, 1), MC_OK);
    /* the longest legal key is fine */
    sc_round_trip(e->s, "x", 1, 1, NULL);
    char *k4096 = malloc(4097);
    memset(k4096, 'q', 4096);
    k4096[4096] = '\0';
    sc_round_trip(e->s, k4096, 100, 1, NULL);
    assert_int_equal(mc_store_remove(e->s, k4096, 4096, 1), MC_OK);
    assert_int_equal(mc_store_remove(e->s, "x", 1, 1), MC_OK);
    free(k4096);
    /* with no master, real calls fail with a connection status in time */
    uint64_t t0 = mc_now_ms();
    mc_status_t st = mc_store_put(lost, "k", 1, v, sizeof(v), NULL);
    assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
    assert_true(mc_now_ms() - t0 < RPC_TIMEOUT_US / 1000 + 1000);
    mc_store_close(lost);
}

/* Over tcp, unregistered buffers are used in place; a transport that needs
 * registered memory copies through the staging buffer instead, in windows
 * of its size: MC_STORE_STAGING=always makes this client do the same. */
static void values_round_trip_through_the_staging_buffer(void **state)
{
    env_t *e = *state;
    mc_store_t *s;
    char master[64];
    snprintf(master, sizeof(master), "127.0.0.1:%u", e->c.master.rpc_port);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.shm = "off";                 /* over tcp (store_shm_test runs the cases over shm) */
    c.local_buffer_size = 2 * MIB; /* small: the space these tests use stays parked a while */
    c.reactors = 2;
    setenv("MC_STORE_STAGING", "always", 1);
    mc_status_t st = mc_store_open(&c, &s);
    unsetenv("MC_STORE_STAGING");
    assert_int_equal(st, MC_OK);
    static const size_t sizes[] = {1, 4097, 65537, 1 * MIB + 3, 2 * MIB};
    char key[64];
    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        key_of(key, sizeof(key), "staged", sizes[i]);
        sc_round_trip(s, key, sizes[i], 1, NULL);
    }
    /* 5 MiB + 3: over twice the staging buffer, so it travels in pieces both ways */
    sc_round_trip(s, "staged-5MiB", 5 * MIB + 3, 1, NULL);
    /* a batch that does not fit the staging buffer at once */
    enum { NB = 3 };
    mc_slice_t keys[NB], vals[NB], outs[NB];
    mc_status_t sts[NB];
    int64_t res[NB];
    char names[NB][24];
    for (int i = 0; i < NB; i++) {
        snprintf(names[i], sizeof(names[i]), "staged-b%d", i);
        keys[i] = (mc_slice_t){names[i], strlen(names[i])};
        vals[i] = (mc_slice_t){malloc(1 * MIB), 1 * MIB};
        outs[i] = (mc_slice_t){malloc(1 * MIB), 1 * MIB};
        tc_fill(vals[i].ptr, vals[i].len, (uint64_t)i * 77);
    }
    assert_int_equal(mc_store_batch_put(s, keys, vals, NB, NULL, sts), MC_OK);
    assert_int_equal(mc_store_batch_get(s, keys, outs, NB, res), MC_OK);
    for (int i = 0; i < NB; i++) {
        assert_int_equal(sts[i], MC_OK);
        assert_int_equal(res[i], (int64_t)(1 * MIB));
        assert_memory_equal(outs[i].ptr, vals[i].ptr, 1 * MIB);
        free(vals[i].ptr);
        free(outs[i].ptr);
    }
    assert_true(mc_store_remove_by_regex(s, "^staged-", 1) >= (int64_t)MC_ARRAY_SIZE(sizes) + NB);
    mc_store_close(s);
}

static void misuse_gets_upstream_statuses(void **state)
{
    env_t *e = *state;
    uint8_t buf[256], v[200];
    tc_fill(v, sizeof(v), 1);
    assert_int_equal(mc_store_get(e->s, "missing", 7, buf, sizeof(buf), NULL),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_exist(e->s, "missing", 7), 0);
    assert_int_equal(mc_store_get_size(e->s, "missing", 7), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_remove(e->s, "missing", 7, 0), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_put(e->s, "m", 1, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(mc_store_exist(e->s, "m", 1), 1);
    assert_int_equal(mc_store_put(e->s, "m", 1, v, sizeof(v), NULL), MC_ERR_OBJECT_ALREADY_EXISTS);
    uint64_t need = 0;
    assert_int_equal(mc_store_get(e->s, "m", 1, buf, 199, &need), MC_ERR_BUFFER_OVERFLOW);
    assert_int_equal(need, 200);
    /* a get leaves a lease: a plain remove is refused, a forced one is not */
    assert_int_equal(mc_store_get(e->s, "m", 1, buf, sizeof(buf), NULL), 200);
    assert_int_equal(mc_store_remove(e->s, "m", 1, 0), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(mc_store_remove(e->s, "m", 1, 1), MC_OK);
    assert_int_equal(mc_store_get(e->s, "m", 1, buf, sizeof(buf), NULL), MC_ERR_OBJECT_NOT_FOUND);
    /* exist does not lease: remove right after works */
    assert_int_equal(mc_store_put(e->s, "m2", 2, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(mc_store_exist(e->s, "m2", 2), 1);
    assert_int_equal(mc_store_remove(e->s, "m2", 2, 0), MC_OK);
    assert_int_equal(mc_store_remove_by_regex(e->s, "(", 0), MC_ERR_INVALID_PARAMS);
}

/* ------------------------------------------------------------------ async */

typedef struct async_ctx {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    int64_t last;
    int in_submit; /* set while the submitting call runs */
    int ran_inside;
} async_ctx_t;

static void async_done(async_ctx_t *a, int64_t v)
{
    pthread_mutex_lock(&a->mu);
    if (a->in_submit)
        a->ran_inside = 1;
    a->calls++;
    a->last = v;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static void async_st_cb(void *arg, mc_status_t st)
{
    async_done(arg, st);
}

static void async_get_cb(void *arg, int64_t r)
{
    async_done(arg, r);
}

static int64_t async_wait(async_ctx_t *a, int calls)
{
    pthread_mutex_lock(&a->mu);
    while (a->calls < calls)
        pthread_cond_wait(&a->cv, &a->mu);
    int64_t v = a->last;
    pthread_mutex_unlock(&a->mu);
    return v;
}

/* lease_release: a batch get tells the master when its reads are done, and
 * the lease ends then (not lease_ttl later): a plain remove goes through at
 * once. Without it (the default) the lease holds, as upstream's. */
static void a_batch_get_with_lease_release_ends_its_leases_when_done(void **state)
{
    env_t *e = *state;
    const uint64_t ttl_us = 1000000ull * SLOW; /* master.lease_ttl */
    char master[64];
    snprintf(master, sizeof(master), "127.0.0.1:%u", e->c.master.rpc_port);
    mc_store_config_t c;
    mc_store_config_init(&c);
    assert_int_equal(c.lease_release, 0);
    c.master = master;
    c.shm = "off";
    c.local_buffer_size = STAGING;
    c.reactors = 1;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    c.lease_release = 1;
    mc_store_t *r;
    assert_int_equal(mc_store_open(&c, &r), MC_OK);

    enum { N = 3 };
    uint8_t v[N][4096], back[N][4096];
    char kb[N][16];
    mc_slice_t keys[N], vals[N], bufs[N];
    for (int i = 0; i < N; i++) {
        snprintf(kb[i], sizeof(kb[i]), "rel%d", i);
        keys[i] = (mc_slice_t){kb[i], strlen(kb[i])};
        tc_fill(v[i], sizeof(v[i]), (uint64_t)i + 77);
        vals[i] = (mc_slice_t){v[i], sizeof(v[i])};
        bufs[i] = (mc_slice_t){back[i], sizeof(back[i])};
    }
    mc_status_t st[N];
    assert_int_equal(mc_store_batch_put(e->s, keys, vals, N, NULL, st), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], MC_OK);

    int64_t res[N];
    uint64_t t0 = mc_now_us();
    assert_int_equal(mc_store_batch_get(r, keys, bufs, N, res), MC_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(res[i], (int64_t)sizeof(v[i]));
        assert_memory_equal(back[i], v[i], sizeof(v[i]));
    }
    /* the release went out before the batch get returned, on the same
     * connection as this remove; a lease that had not been released would
     * refuse every remove until t0 + ttl at the earliest */
    mc_status_t rs = MC_ERR_OBJECT_HAS_LEASE;
    while (rs == MC_ERR_OBJECT_HAS_LEASE && mc_now_us() < t0 + ttl_us) {
        rs = mc_store_remove(r, kb[0], strlen(kb[0]), 0);
        if (rs == MC_ERR_OBJECT_HAS_LEASE)
            usleep(10000);
    }
    uint64_t t1 = mc_now_us();
    assert_int_equal(rs, MC_OK);
    assert_true(t1 < t0 + ttl_us);

    /* the default client keeps the lease to its TTL */
    t0 = mc_now_us();
    assert_int_equal(mc_store_batch_get(e->s, &keys[1], &bufs[1], 1, res), MC_OK);
    assert_int_equal(res[0], (int64_t)sizeof(v[1]));
    rs = mc_store_remove(e->s, kb[1], strlen(kb[1]), 0);
    if (mc_now_us() < t0 + ttl_us) /* else the lease may have run out: no verdict */
        assert_int_equal(rs, MC_ERR_OBJECT_HAS_LEASE);
    for (int i = 1; i < N; i++)
        mc_store_remove(e->s, kb[i], strlen(kb[i]), 1);
    mc_store_close(r);
}

static void async_calls_call_back_once_and_never_inside_the_call(void **state)
{
    env_t *e = *state;
    async_ctx_t a = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    uint8_t v[5000], back[5000];
    tc_fill(v, sizeof(v), 5);
    int calls = 0;
#define SUBMIT(expr)                                                                               \
    do {                                                                                           \
        pthread_mutex_lock(&a.mu);                                                                 \
        a.in_submit = 1;                                                                           \
        mc_status_t r_ = (expr);                                                                   \
        a.in_submit = 0;                                                                           \
        pthread_mutex_unlock(&a.mu);                                                               \
        assert_int_equal(r_, MC_INPROGRESS);                                                       \
        calls++;                                                                                   \
    } while (0)
    SUBMIT(mc_store_put_async(e->s, "as", 2, v, sizeof(v), NULL, async_st_cb, &a));
    assert_int_equal(async_wait(&a, calls), MC_OK);
    SUBMIT(mc_store_exist_async(e->s, "as", 2, async_st_cb, &a));
    assert_int_equal(async_wait(&a, calls), 1);
    SUBMIT(mc_store_get_async(e->s, "as", 2, back, sizeof(back), async_get_cb, &a));
    assert_int_equal(async_wait(&a, calls), (int64_t)sizeof(v));
    assert_memory_equal(back, v, sizeof(v));
    SUBMIT(mc_store_get_async(e->s, "as", 2, back, 10, async_get_cb, &a));
    assert_int_equal(async_wait(&a, calls), MC_ERR_BUFFER_OVERFLOW);
    SUBMIT(mc_store_remove_async(e->s, "as", 2, 1, async_st_cb, &a));
    assert_int_equal(async_wait(&a, calls), MC_OK);
    SUBMIT(mc_store_get_async(e->s, "as", 2, back, sizeof(back), async_get_cb, &a));
    assert_int_equal(async_wait(&a, calls), MC_ERR_OBJECT_NOT_FOUND);
    /* an error at submission: no callback */
    assert_int_equal(mc_store_put_async(e->s, "", 0, v, 1, NULL, async_st_cb, &a),
                     MC_ERR_INVALID_KEY);
    usleep(50000);
    pthread_mutex_lock(&a.mu);
    assert_int_equal(a.calls, calls);
    assert_int_equal(a.ran_inside, 0);
    pthread_mutex_unlock(&a.mu);
#undef SUBMIT
}

/* ----------------------------------------------------- close while busy */

typedef struct inflight {
    atomic_int calls[16];
    atomic_int ok, canceled, other;
} inflight_t;

typedef struct inflight_arg {
    inflight_t *f;
    int i;
} inflight_arg_t;

static void inflight_cb(void *arg, mc_status_t st)
{
    inflight_arg_t *a = arg;
    atomic_fetch_add(&a->f->calls[a->i], 1);
    if (st == MC_OK)
        atomic_fetch_add(&a->f->ok, 1);
    else if (st == MC_ERR_CANCELED)
        atomic_fetch_add(&a->f->canceled, 1);
    else
        atomic_fetch_add(&a->f->other, 1);
}

static void closing_a_busy_client_completes_every_call_once(void **state)
{
    env_t *e = *state;
    sc_wait_parked_space();
    mc_store_t *c;
    assert_int_equal(open_client(e->c.master.rpc_port, RPC_TIMEOUT_US, &c), MC_OK);
    size_t len = 6 * MIB;
    uint8_t *v = malloc(len);
    tc_fill(v, len, 77);
    static inflight_t f;
    memset(&f, 0, sizeof(f));
    inflight_arg_t args[16];
    char key[32];
    for (int i = 0; i < 16; i++) {
        args[i] = (inflight_arg_t){&f, i};
        key_of(key, sizeof(key), "busy", (unsigned long)i);
        assert_int_equal(
            mc_store_put_async(c, key, strlen(key), v, len, NULL, inflight_cb, &args[i]),
            MC_INPROGRESS);
    }
    /* at once: some are transferring, some wait for staging or the master */
    mc_store_close(c);
    for (int i = 0; i < 16; i++)
        assert_int_equal(atomic_load(&f.calls[i]), 1);
    print_message("close: %d put(s) done, %d canceled\n", atomic_load(&f.ok),
                  atomic_load(&f.canceled));
    assert_int_equal(atomic_load(&f.other), 0);
    assert_int_equal(atomic_load(&f.ok) + atomic_load(&f.canceled), 16);
    free(v);
    mc_store_remove_by_regex(e->s, "^busy-", 1);
}

/* ------------------------------------------------------- runtime segment */

static void a_segment_mounted_at_run_time_serves_local_replicas_until_unmounted(void **state)
{
    env_t *e = *state;
    size_t seg = 32 * MIB, len = 3 * MIB;
    assert_int_equal(mc_store_mount_segment(e->s, NULL, seg), MC_OK);
    uint8_t *own = aligned_alloc(4096, 16 * MIB);
    assert_int_equal(mc_store_mount_segment(e->s, own, 16 * MIB), MC_OK);
    const char *self = mc_store_name(e->s);
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.preferred_segments = &self;
    rc.n_preferred = 1;
    uint8_t *v = malloc(len), *back = malloc(len);
    tc_fill(v, len, 31);
    /* written by the local transport (memcpy), read back by memcpy */
    assert_int_equal(mc_store_put(e->s, "local", 5, v, len, &rc), MC_OK);
    mc_store_replica_t r[2];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(e->s, "local", 5, r, 2, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment, self);
    assert_int_equal(mc_store_get(e->s, "local", 5, back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    /* a second replica elsewhere: both written in one batch */
    rc.replica_num = 2;
    assert_int_equal(mc_store_put(e->s, "local2", 6, v, len, &rc), MC_OK);
    assert_int_equal(mc_store_query(e->s, "local2", 6, r, 2, &n), MC_OK);
    assert_int_equal(n, 2);
    /* withdraw both: the local replicas vanish with them (after the drain
     * of our get's lease); the remote one of local2 stays readable */
    assert_int_equal(mc_store_unmount_segment(e->s, own), MC_OK);
    assert_int_equal(mc_store_unmount_segment(e->s, own), MC_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(mc_store_unmount_segment(e->s, NULL), MC_OK);
    assert_int_equal(mc_store_unmount_segment(e->s, NULL), MC_ERR_SEGMENT_NOT_FOUND);
    free(own);
    assert_int_equal(mc_store_get(e->s, "local", 5, back, len, NULL), MC_ERR_OBJECT_NOT_FOUND);
    memset(back, 0, len);
    assert_int_equal(mc_store_get(e->s, "local2", 6, back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    assert_int_equal(mc_store_query(e->s, "local2", 6, r, 2, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_not_equal(r[0].segment, self);
    assert_int_equal(mc_store_remove(e->s, "local2", 6, 1), MC_OK);
    free(v);
    free(back);
}

/* Put key into our own segment (preferred, one replica) and check where it
 * landed and its bytes (a sync get of our own segment: a memcpy). */
static void own_check(env_t *e, const char *key, const uint8_t *v, size_t len, uint8_t *back)
{
    mc_store_replica_t r[2];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(e->s, key, strlen(key), r, 2, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment, mc_store_name(e->s));
    memset(back, 0, len);
    assert_int_equal(mc_store_get(e->s, key, strlen(key), back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
}

typedef struct own_worker {
    mc_store_t *s;
    const mc_replicate_config_t *rc;
    int id;
    int failures;
} own_worker_t;

static void *own_worker_main(void *arg)
{
    own_worker_t *w = arg;
    size_t cap = MIB + 4096;
    uint8_t *v = malloc(cap), *back = malloc(cap);
    char key[64];
    for (int i = 0; i < 8; i++) {
        size_t len = MIB + (size_t)(w->id * 997 + i * 131);
        snprintf(key, sizeof(key), "own-t%d-%d", w->id, i);
        tc_fill(v, len, (uint64_t)(w->id * 100 + i));
        if (mc_store_put(w->s, key, strlen(key), v, len, w->rc) != MC_OK ||
            mc_store_get(w->s, key, strlen(key), back, cap, NULL) != (int64_t)len ||
            memcmp(back, v, len) != 0)
            w->failures++;
    }
    free(v);
    free(back);
    return NULL;
}

/* A sync put whose replicas are all in our own segment is copied by the
 * calling thread (client_put.c, P_WAIT_COPY); async ones by the local
 * transport on the reactor. Every form lands byte for byte: single values
 * of odd sizes (one larger than the staging buffer), parts (which go
 * through staging otherwise), an upsert over an own-segment object, four
 * threads at once. */
static void own_segment_puts_land_byte_for_byte_from_the_callers_thread(void **state)
{
    env_t *e = *state;
    assert_int_equal(mc_store_mount_segment(e->s, NULL, 128 * MIB), MC_OK);
    const char *self = mc_store_name(e->s);
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.preferred_segments = &self;
    rc.n_preferred = 1;
    size_t big = STAGING + 8 * MIB + 3;
    uint8_t *v = malloc(big), *back = malloc(big);
    const size_t sizes[] = {1, 4095, 3 * MIB + 7, big};
    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        tc_fill(v, sizes[i], 700 + i);
        assert_int_equal(mc_store_put(e->s, "own-v", 5, v, sizes[i], &rc), MC_OK);
        own_check(e, "own-v", v, sizes[i], back);
        assert_int_equal(mc_store_remove(e->s, "own-v", 5, 1), MC_OK);
    }
    /* three unaligned parts, together larger than the staging buffer */
    tc_fill(v, big, 710);
    mc_slice_t parts[3] = {{v, 5 * MIB + 1}, {v + 5 * MIB + 1, 17}, {v + 5 * MIB + 18, 0}};
    parts[2].len = big - 5 * MIB - 18;
    assert_int_equal(mc_store_put_parts(e->s, "own-p", 5, parts, 3, &rc), MC_OK);
    own_check(e, "own-p", v, big, back);
    /* an upsert replaces it with other bytes */
    tc_fill(v, 2 * MIB, 711);
    assert_int_equal(mc_store_upsert(e->s, "own-p", 5, v, 2 * MIB, &rc), MC_OK);
    own_check(e, "own-p", v, 2 * MIB, back);
    assert_int_equal(mc_store_remove(e->s, "own-p", 5, 1), MC_OK);
    /* async: the reactor copies */
    async_ctx_t a = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    tc_fill(v, 3 * MIB, 712);
    assert_int_equal(mc_store_put_async(e->s, "own-a", 5, v, 3 * MIB, &rc, async_st_cb, &a),
                     MC_INPROGRESS);
    assert_int_equal(async_wait(&a, 1), MC_OK);
    own_check(e, "own-a", v, 3 * MIB, back);
    assert_int_equal(mc_store_remove(e->s, "own-a", 5, 1), MC_OK);
    /* four callers at once, each copying its own */
    pthread_t th[4];
    own_worker_t ow[4];
    for (int i = 0; i < 4; i++) {
        ow[i] = (own_worker_t){.s = e->s, .rc = &rc, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, own_worker_main, &ow[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(ow[i].failures, 0);
    }
    assert_int_equal(mc_store_remove_by_regex(e->s, "^own-t", 1), 32);
    assert_int_equal(mc_store_unmount_segment(e->s, NULL), MC_OK);
    free(v);
    free(back);
}

/* A put placed in our own segment at a range we do not expose (here: the
 * segment's memory unregistered behind the master's back) fails before a
 * byte is copied, is revoked, and leaves nothing: not readable, the key free
 * for the next put. */
static void an_own_segment_put_outside_our_buffers_is_revoked_and_leaves_nothing(void **state)
{
    env_t *e = *state;
    size_t seg = 16 * MIB, len = MIB + 5;
    uint8_t *own = aligned_alloc(4096, seg);
    memset(own, 0xee, seg);
    assert_int_equal(mc_store_mount_segment(e->s, own, seg), MC_OK);
    assert_int_equal(mc_store_unregister_buffer(e->s, own), MC_OK);
    const char *self = mc_store_name(e->s);
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.preferred_segments = &self;
    rc.n_preferred = 1;
    uint8_t *v = malloc(len), *back = malloc(len);
    tc_fill(v, len, 720);
    assert_int_equal(mc_store_put(e->s, "own-x", 5, v, len, &rc), MC_ERR_TRANSFER_FAIL);
    for (size_t i = 0; i < seg; i++) /* nothing was copied */
        if (own[i] != 0xee)
            fail_msg("byte %zu of the unexposed segment was written", i);
    assert_int_equal(mc_store_exist(e->s, "own-x", 5), 0);
    assert_int_equal(mc_store_get(e->s, "own-x", 5, back, len, NULL), MC_ERR_OBJECT_NOT_FOUND);
    /* revoked, not left pending: the key takes a new put at once (on a node) */
    const char *node = e->c.node[0].name;
    rc.preferred_segments = &node;
    assert_int_equal(mc_store_put(e->s, "own-x", 5, v, len, &rc), MC_OK);
    assert_int_equal(mc_store_get(e->s, "own-x", 5, back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    assert_int_equal(mc_store_remove(e->s, "own-x", 5, 1), MC_OK);
    assert_int_equal(mc_store_unmount_segment(e->s, own), MC_OK);
    free(own);
    free(v);
    free(back);
}

/* ------------------------------------------------------------- 4 threads */

typedef struct worker {
    mc_store_t *s;
    int id;
    int failures;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    size_t cap = 1 * MIB + 1000;
    uint8_t *v = malloc(cap), *back = malloc(cap);
    char key[64];
    for (int i = 0; i < 40; i++) {
        size_t len = 1000 + (size_t)((i * 7919 + w->id * 104729) % (int)(1 * MIB));
        snprintf(key, sizeof(key), "t%d-%d", w->id, i);
        tc_fill(v, len, (uint64_t)(w->id * 1000 + i));
        if (mc_store_put(w->s, key, strlen(key), v, len, NULL) != MC_OK) {
            w->failures++;
            continue;
        }
        int64_t got = mc_store_get(w->s, key, strlen(key), back, cap, NULL);
        if (got != (int64_t)len || memcmp(back, v, len) != 0)
            w->failures++;
    }
    free(v);
    free(back);
    return NULL;
}

static void four_threads_put_and_get_concurrently(void **state)
{
    env_t *e = *state;
    pthread_t th[4];
    worker_t w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker_t){.s = e->s, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    assert_int_equal(mc_store_remove_by_regex(e->s, "^t[0-9]-", 1), 160);
}

/* -------------------------------------------------------------- zombie put */

/* Helper mode of this binary (a fresh process): PutStart for key, print
 * "started <status>", then hang until killed, never finishing the put. */
static int zombie_main(unsigned port, const char *key)
{
    tc_rpc_t c;
    if (tc_rpc_open(&c, port) != 0)
        return 1;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    mc_uuid_t id = {0x2b2b2b2b, (uint64_t)getpid()};
    mc_mcli_put_start(&w, id, key, strlen(key), 4 * MIB, &cfg);
    mc_status_t st = tc_rpc_call(&c, MC_RPC_PUT_START, &body, 3000000, &resp);
    printf("started %d\n", (int)st);
    fflush(stdout);
    for (;;)
        pause();
}

static void a_put_whose_client_died_before_put_end_is_discarded(void **state)
{
    env_t *e = *state;
    char port[16];
    snprintf(port, sizeof(port), "%u", e->c.master.rpc_port);
    char *argv[] = {g_self, "--zombie-put", port, "zombie", NULL};
    test_proc_t z = {0};
    assert_int_equal(tc_spawn(&z, argv), 0);
    assert_int_equal(test_proc_expect_num(&z, "started ", 5000 * SLOW), MC_OK);
    tc_stop_ms(&z, SIGKILL, 1000);
    uint8_t v[1000], back[1000];
    tc_fill(v, sizeof(v), 3);
    /* in progress: not readable, not overwritable */
    assert_int_equal(mc_store_exist(e->s, "zombie", 6), 0);
    int64_t g = mc_store_get(e->s, "zombie", 6, back, sizeof(back), NULL);
    assert_true(g == MC_ERR_REPLICA_IS_NOT_READY || g == MC_ERR_OBJECT_NOT_FOUND);
    /* after put_start_discard_timeout (1 s) the key is free again */
    uint64_t deadline = mc_now_ms() + 5000 * SLOW;
    mc_status_t st;
    while ((st = mc_store_put(e->s, "zombie", 6, v, sizeof(v), NULL)) ==
               MC_ERR_OBJECT_ALREADY_EXISTS &&
           mc_now_ms() < deadline)
        usleep(100000);
    assert_int_equal(st, MC_OK);
    assert_int_equal(mc_store_get(e->s, "zombie", 6, back, sizeof(back), NULL), sizeof(v));
    assert_memory_equal(back, v, sizeof(v));
    assert_int_equal(mc_store_remove(e->s, "zombie", 6, 1), MC_OK);
}

/* ------------------------------------------------------------ slow target */

static void a_put_whose_write_timed_out_is_left_to_the_master_not_revoked(void **state)
{
    env_t *e = *state;
    char master[64];
    snprintf(master, sizeof(master), "127.0.0.1:%u", e->c.master.rpc_port);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.shm = "off"; /* over tcp (store_shm_test runs the cases over shm) */
    c.local_buffer_size = 4 * MIB;
    c.reactors = 1;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    c.transfer_timeout_us = 300000 * SLOW;
    mc_store_t *s;
    assert_int_equal(mc_store_open(&c, &s), MC_OK);
    const char *target = e->c.node[0].name;
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.preferred_segments = &target;
    rc.n_preferred = 1;
    size_t len = 2 * MIB;
    uint8_t *v = malloc(len), *back = malloc(len);
    tc_fill(v, len, 4242);
    /* a node that hangs (not dead): the write times out */
    kill(e->c.node[0].proc.pid, SIGSTOP);
    int ws;
    assert_int_equal(waitpid(e->c.node[0].proc.pid, &ws, WUNTRACED), e->c.node[0].proc.pid);
    assert_int_equal(mc_store_put(s, "slow", 4, v, len, &rc), MC_ERR_TRANSFER_FAIL);
    /* not revoked: the write may still land, so the key stays taken (and
     * unreadable) until the master discards the put */
    assert_int_equal(mc_store_put(s, "slow", 4, v, len, &rc), MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_store_exist(s, "slow", 4), 0);
    kill(e->c.node[0].proc.pid, SIGCONT);
    uint64_t deadline = mc_now_ms() + 5000 * SLOW;
    mc_status_t st;
    while ((st = mc_store_put(e->s, "slow", 4, v, len, &rc)) == MC_ERR_OBJECT_ALREADY_EXISTS &&
           mc_now_ms() < deadline)
        usleep(100000);
    assert_int_equal(st, MC_OK);
    assert_int_equal(mc_store_get(e->s, "slow", 4, back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    assert_int_equal(mc_store_remove(e->s, "slow", 4, 1), MC_OK);
    mc_store_close(s);
    free(v);
    free(back);
}

/* ---------------------------------------------------------------- eviction */

static void a_full_pool_evicts_old_objects_and_keeps_serving(void **state)
{
    env_t *e = *state;
    size_t len = 1 * MIB;
    uint8_t *v = malloc(len), *back = malloc(len);
    int n = (int)(3 * NNODES * NODE_SEGMENT_BYTES / len);
    int ok = 0, full = 0, last_ok = -1;
    char key[32];
    for (int i = 0; i < n; i++) {
        key_of(key, sizeof(key), "ev", (unsigned long)i);
        tc_fill(v, len, (uint64_t)i);
        mc_status_t st = mc_store_put(e->s, key, strlen(key), v, len, NULL);
        if (st == MC_OK) {
            ok++;
            last_ok = i;
        } else if (st == MC_ERR_NO_AVAILABLE_HANDLE) {
            full++;
        } else {
            fail_msg("put %d: %s", i, mc_status_str(st));
        }
    }
    assert_true(ok > n * 3 / 4);
    /* the oldest went, the newest is there */
    int gone = 0;
    for (int i = 0; i < 20; i++) {
        key_of(key, sizeof(key), "ev", (unsigned long)i);
        gone += mc_store_exist(e->s, key, strlen(key)) == 0;
    }
    assert_true(gone > 10);
    key_of(key, sizeof(key), "ev", (unsigned long)last_ok);
    tc_fill(v, len, (uint64_t)last_ok);
    assert_int_equal(mc_store_get(e->s, key, strlen(key), back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    mc_store_remove_all(e->s, 1);
    free(v);
    free(back);
    print_message("eviction: %d of %d puts stored, %d found no room\n", ok, n, full);
}

/* ---------------------------------------------------------- master restart */

static void with_the_master_down_calls_fail_in_time_and_work_after_it_returns(void **state)
{
    env_t *e = *state;
    uint8_t v[4096], back[4096];
    tc_fill(v, sizeof(v), 11);
    assert_int_equal(mc_store_put(e->s, "before", 6, v, sizeof(v), NULL), MC_OK);

    /* a master that hangs: calls give up after rpc_timeout */
    kill(e->c.master.proc.pid, SIGSTOP);
    int ws;
    assert_int_equal(waitpid(e->c.master.proc.pid, &ws, WUNTRACED),
                     e->c.master.proc.pid); /* stopped now */
    assert_true(WIFSTOPPED(ws));
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_store_exist(e->s, "before", 6), MC_ERR_RPC_TIMEOUT);
    uint64_t took = mc_now_ms() - t0;
    kill(e->c.master.proc.pid, SIGCONT);
    assert_true(took + 100 >= RPC_TIMEOUT_US / 1000 && took < RPC_TIMEOUT_US / 1000 + 1000);
    assert_int_equal(mc_store_exist(e->s, "before", 6), 1);

    /* a master that is gone: calls fail at once (connection refused) */
    tc_stop_ms(&e->c.master.proc, SIGKILL, 2000);
    t0 = mc_now_ms();
    mc_status_t st = mc_store_put(e->s, "during", 6, v, sizeof(v), NULL);
    assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
    int64_t g = mc_store_get(e->s, "before", 6, back, sizeof(back), NULL);
    assert_true(g == MC_ERR_CONN_CLOSED || g == MC_ERR_RPC_TIMEOUT);
    int x = mc_store_exist(e->s, "before", 6);
    assert_true(x == MC_ERR_CONN_CLOSED || x == MC_ERR_RPC_TIMEOUT);
    assert_true(mc_now_ms() - t0 < 3 * (RPC_TIMEOUT_US / 1000) + 1000);

    /* a new master on the same port: it knows nothing; the nodes re-mount
     * when their ping says NEED_REMOUNT, then puts land again */
    assert_int_equal(tc_master_start(&e->c.master, g_ms), 0);
    uint64_t deadline = mc_now_ms() + 15000 * SLOW;
    while ((st = mc_store_put(e->s, "after", 5, v, sizeof(v), NULL)) != MC_OK &&
           mc_now_ms() < deadline)
        usleep(100000);
    assert_int_equal(st, MC_OK);
    assert_int_equal(mc_store_get(e->s, "after", 5, back, sizeof(back), NULL), sizeof(v));
    assert_memory_equal(back, v, sizeof(v));
    assert_int_equal(mc_store_get(e->s, "before", 6, back, sizeof(back), NULL),
                     MC_ERR_OBJECT_NOT_FOUND);
    /* both nodes are back: two replicas again */
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = 2;
    mc_store_replica_t r[2];
    uint32_t n = 0;
    char key[32];
    for (int i = 0; n < 2 && mc_now_ms() < deadline; i++) {
        key_of(key, sizeof(key), "after2", (unsigned long)i);
        assert_int_equal(mc_store_put(e->s, key, strlen(key), v, sizeof(v), &rc), MC_OK);
        assert_int_equal(mc_store_query(e->s, key, strlen(key), r, 2, &n), MC_OK);
        if (n < 2)
            usleep(100000);
    }
    assert_int_equal(n, 2);
    mc_store_remove_all(e->s, 1);
}

/* -------------------------------------------------------------- node death */

static void a_node_exits_zero_on_sigterm(void **state)
{
    env_t *e = *state;
    int status = tc_stop(&e->c.node[1].proc, SIGTERM);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--zombie-put") == 0)
        return zombie_main((unsigned)atoi(argv[2]), argv[3]);
    /* TEST_LOG=debug (or "warn,client=debug") to see more */
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_keys_and_values_fail_at_once_without_asking_the_master),
        cmocka_unit_test(values_of_many_sizes_round_trip_byte_for_byte),
        cmocka_unit_test(values_round_trip_through_the_staging_buffer),
        cmocka_unit_test(registered_buffers_and_parts_round_trip_without_staging),
        cmocka_unit_test(misuse_gets_upstream_statuses),
        cmocka_unit_test(two_replicas_land_on_the_two_nodes),
        cmocka_unit_test(batch_calls_report_each_key),
        cmocka_unit_test(upserts_pieces_allocs_and_sizes),
        cmocka_unit_test(a_batch_get_with_lease_release_ends_its_leases_when_done),
        cmocka_unit_test(async_calls_call_back_once_and_never_inside_the_call),
        cmocka_unit_test(closing_a_busy_client_completes_every_call_once),
        cmocka_unit_test(a_segment_mounted_at_run_time_serves_local_replicas_until_unmounted),
        cmocka_unit_test(own_segment_puts_land_byte_for_byte_from_the_callers_thread),
        cmocka_unit_test(an_own_segment_put_outside_our_buffers_is_revoked_and_leaves_nothing),
        cmocka_unit_test(four_threads_put_and_get_concurrently),
        cmocka_unit_test(a_put_whose_client_died_before_put_end_is_discarded),
        cmocka_unit_test(a_put_whose_write_timed_out_is_left_to_the_master_not_revoked),
        cmocka_unit_test(a_full_pool_evicts_old_objects_and_keeps_serving),
        cmocka_unit_test(with_the_master_down_calls_fail_in_time_and_work_after_it_returns),
        cmocka_unit_test(a_killed_node_leaves_two_replica_objects_readable_and_puts_go_on),
        cmocka_unit_test(a_node_exits_zero_on_sigterm),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
