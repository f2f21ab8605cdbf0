/*
 * ha_cluster.h - the HA tests' shared setup on cluster.h (ha_failover_test:
 * the masters' HA backend is one Redis; ha_sentinel_test: Redis behind
 * Sentinels). Masters that elect a leader through the backend, storage
 * nodes and this process's store client, all given one master URL
 * (redis://...?cluster=ID or redis-sentinel://...?cluster=ID) and one
 * metadata URL; which master leads; a load of puts, each followed by a
 * read-back of an earlier acknowledged key; the check that every
 * acknowledged put reads back byte for byte.
 *
 *   static ha_cluster_t h;               // in the test's env
 *   ha_init(&h, "ha", nmasters, nnodes);  // its directory
 *   ...start its backend, set h.master_url and h.meta_url...
 *   ha_start(&h, start_master, env, 5000, rpc_timeout_us);
 *   ...                      // masters (the test's settings), leader,
 *                            // nodes, client
 *   ha_stop(&h);  ...stop the backend...;  ha_dir_remove(&h);
 *
 * Header-only, for cmocka tests (the helpers assert what must not fail).
 */
#ifndef MC_TEST_HA_CLUSTER_H
#define MC_TEST_HA_CLUSTER_H

#include <stdatomic.h>

#include "cluster.h"
#include "mooncake/store.h"
#include "store/ha_redis.h"
#include "util/mem.h"
#include "util/time.h"

#define HA_MAX_MASTERS 3
#define HA_MAX_NODES 2
#define HA_MAX_KEYS 100000

typedef struct ha_cluster {
    char dir[64]; /* the masters' logs (TEST_KEEP_LOGS=1 keeps them) */
    char master_url[512], meta_url[512];
    int nmasters, nnodes;
    tc_master_t m[HA_MAX_MASTERS];
    tc_node_t node[HA_MAX_NODES];
    mc_store_t *s; /* this process's client */
} ha_cluster_t;

/* The start of a test group's setup: SIGPIPE ignored (the tests kill
 * peers), how many masters and nodes, h->dir a new directory
 * /tmp/mc-NAME-XXXXXX. 0 or -1. */
static inline int ha_init(ha_cluster_t *h, const char *name, int nmasters, int nnodes)
{
    signal(SIGPIPE, SIG_IGN);
    h->nmasters = nmasters;
    h->nnodes = nnodes;
    snprintf(h->dir, sizeof(h->dir), "/tmp/mc-%s-XXXXXX", name);
    return mkdtemp(h->dir) != NULL ? 0 : -1;
}

/* The index of the master that leads per the backend, or -1 (none, or not
 * one of ours); its view into *view (may be NULL). */
static inline int ha_leader(ha_cluster_t *h, int64_t *view)
{
    mc_ha_url_t u;
    const char *why;
    assert_int_equal(mc_ha_url_parse(h->master_url, &u, &why), MC_OK);
    char addr[MC_HA_ADDR_MAX];
    if (mc_ha_resolve_leader(&u, 500000, addr, sizeof(addr), view) != MC_OK)
        return -1;
    for (int i = 0; i < h->nmasters; i++) {
        char want[64];
        snprintf(want, sizeof(want), "127.0.0.1:%u", h->m[i].rpc_port);
        if (strcmp(addr, want) == 0)
            return i;
    }
    return -1;
}

/* Wait until a master other than `not` leads: its index, or -1 after
 * timeout_ms. */
static inline int ha_wait_leader(ha_cluster_t *h, int not, int timeout_ms, int64_t *view)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    do {
        int l = ha_leader(h, view);
        if (l >= 0 && l != not )
            return l;
        usleep(10000);
    } while (mc_now_ms() < deadline);
    return -1;
}

/* (Re)start node i: a storage node of the master URL whose transfer
 * metadata is at the metadata URL. 0 once it is ready. */
static inline int ha_start_node(ha_cluster_t *h, int i)
{
    char meta[560];
    snprintf(meta, sizeof(meta), "store.metadata=%s", h->meta_url);
    const char *const sets[] = {meta, NULL};
    return tc_node_start(&h->node[i], h->master_url, sets);
}

static inline void ha_start_nodes(ha_cluster_t *h)
{
    for (int i = 0; i < h->nnodes; i++)
        assert_int_equal(ha_start_node(h, i), 0);
}

/* h->s: a store client of the master and metadata URLs (8 MiB buffer, one
 * reactor, transfers within 2 s). */
static inline mc_status_t ha_open_client(ha_cluster_t *h, uint64_t rpc_timeout_us)
{
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = h->master_url;
    c.metadata = h->meta_url;
    c.local_buffer_size = 8 << 20;
    c.reactors = 1;
    c.rpc_timeout_us = rpc_timeout_us;
    c.transfer_timeout_us = 2000000;
    return mc_store_open(&c, &h->s);
}

/* Once the test's backend runs: the masters (start_master(env, i) for
 * each, with the test's settings: 0 once it listens), a leader within
 * leader_ms, the nodes, the client. */
static inline void ha_start(ha_cluster_t *h, int (*start_master)(void *env, int i), void *env,
                            int leader_ms, uint64_t rpc_timeout_us)
{
    for (int i = 0; i < h->nmasters; i++)
        assert_int_equal(start_master(env, i), 0);
    assert_true(ha_wait_leader(h, -1, leader_ms, NULL) >= 0);
    ha_start_nodes(h);
    assert_int_equal(ha_open_client(h, rpc_timeout_us), MC_OK);
}

/* Close the client, stop the nodes, then the masters (SIGTERM). */
static inline void ha_stop(ha_cluster_t *h)
{
    mc_store_close(h->s);
    h->s = NULL;
    for (int i = 0; i < h->nnodes; i++)
        tc_node_stop(&h->node[i], SIGTERM);
    for (int i = 0; i < h->nmasters; i++)
        tc_master_stop(&h->m[i], SIGTERM);
}

/* Remove h->dir, or say where it is kept (TEST_KEEP_LOGS set). */
static inline void ha_dir_remove(ha_cluster_t *h)
{
    if (getenv("TEST_KEEP_LOGS") != NULL) {
        fprintf(stderr, "logs kept in %s\n", h->dir);
        return;
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", h->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", h->dir);
}

/* A put the cluster may refuse for a while (a leader or a Redis primary
 * changing): tried up to `tries` times, pause_us apart. The last status. */
static inline mc_status_t ha_put_retry(mc_store_t *s, const char *key, const void *v, size_t n,
                                       int tries, unsigned pause_us)
{
    mc_status_t st = MC_ERR_RPC_TIMEOUT;
    for (int attempt = 0; attempt < tries && st != MC_OK; attempt++) {
        st = mc_store_put(s, key, strlen(key), v, n, NULL);
        if (st != MC_OK)
            usleep(pause_us);
    }
    return st;
}

/* ------------------------------------------------------------ the load */

/* Puts of keys PREFIX000000, PREFIX000001, ... (values of tc_fill(seed =
 * the key's number), their lengths spread over [min_len, max_len)), each
 * followed by a get of an earlier acknowledged key, checked byte for byte.
 * A put counts for the test's phase at the time the call began. */
typedef struct ha_load {
    /* set by the test */
    mc_store_t *s;
    const char *prefix;
    size_t min_len, max_len;
    uint64_t seed;          /* which earlier keys are read back */
    unsigned fail_pause_us; /* pause after a failed put (0: none) */
    /* the test's controls */
    _Atomic int stop;
    _Atomic int phase; /* 0..7, the test's meaning */
    /* what happened */
    _Atomic unsigned next; /* the next key's number */
    _Atomic unsigned char acked[HA_MAX_KEYS];
    _Atomic unsigned nacked, nfailed, gets_ok, gets_bad_bytes;
    _Atomic unsigned acked_in[8]; /* puts acknowledged per phase */
    _Atomic uint64_t worst_call_us;
} ha_load_t;

/* l zeroed, then the test's settings (fail_pause_us stays 0). */
static inline void ha_load_init(ha_load_t *l, mc_store_t *s, const char *prefix, size_t min_len,
                                size_t max_len, uint64_t seed)
{
    memset(l, 0, sizeof(*l));
    l->s = s;
    l->prefix = prefix;
    l->min_len = min_len;
    l->max_len = max_len;
    l->seed = seed;
}

static inline size_t ha_val_len(const ha_load_t *l, unsigned i)
{
    return l->min_len + (i * 7919u) % (l->max_len - l->min_len);
}

static inline int ha_key(const ha_load_t *l, unsigned i, char *key, size_t room)
{
    return snprintf(key, room, "%s%06u", l->prefix, i);
}

static inline void ha_note_time(ha_load_t *l, uint64_t t0)
{
    uint64_t dt = mc_now_us() - t0;
    uint64_t w = atomic_load(&l->worst_call_us);
    while (dt > w && !atomic_compare_exchange_weak(&l->worst_call_us, &w, dt))
        ;
}

/* The load's thread (pthread_create(&t, NULL, ha_load_main, &l)), until
 * l->stop is set or the keys run out. */
static inline void *ha_load_main(void *arg)
{
    ha_load_t *l = arg;
    uint8_t *buf = mc_malloc(l->max_len), *got = mc_malloc(l->max_len);
    uint64_t x = l->seed;
    while (!atomic_load(&l->stop)) {
        unsigned i = atomic_fetch_add(&l->next, 1);
        if (i >= HA_MAX_KEYS)
            break;
        char key[48];
        int kl = ha_key(l, i, key, sizeof(key));
        size_t n = ha_val_len(l, i);
        tc_fill(buf, n, i);
        int phase = atomic_load(&l->phase);
        uint64_t t0 = mc_now_us();
        mc_status_t st = mc_store_put(l->s, key, (size_t)kl, buf, n, NULL);
        ha_note_time(l, t0);
        if (st == MC_OK) {
            atomic_store(&l->acked[i], 1);
            atomic_fetch_add(&l->nacked, 1);
            atomic_fetch_add(&l->acked_in[phase], 1);
        } else {
            atomic_fetch_add(&l->nfailed, 1);
            if (l->fail_pause_us > 0)
                usleep(l->fail_pause_us); /* the cluster is changing: do not spin */
        }
        /* read back an earlier acknowledged one */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned j = (unsigned)(x % (i + 1));
        if (!atomic_load(&l->acked[j]))
            continue;
        kl = ha_key(l, j, key, sizeof(key));
        t0 = mc_now_us();
        int64_t r = mc_store_get(l->s, key, (size_t)kl, got, l->max_len, NULL);
        ha_note_time(l, t0);
        if (r >= 0) {
            tc_fill(buf, ha_val_len(l, j), j);
            if ((size_t)r == ha_val_len(l, j) && memcmp(got, buf, (size_t)r) == 0)
                atomic_fetch_add(&l->gets_ok, 1);
            else
                atomic_fetch_add(&l->gets_bad_bytes, 1);
        }
    }
    mc_free(buf);
    mc_free(got);
    return NULL;
}

/* Every acknowledged put reads back with its bytes (a get that fails
 * otherwise than NOT_FOUND may meet the tail of a failover: tried five
 * times, 200 ms apart). Returns how many were not readable (the first ten
 * named on stderr); *checked: how many read back. */
static inline unsigned ha_check_acked(ha_load_t *l, unsigned *checked)
{
    uint8_t *want = mc_malloc(l->max_len), *got = mc_malloc(l->max_len);
    unsigned n = atomic_load(&l->next), lost = 0;
    *checked = 0;
    for (unsigned i = 0; i < n && i < HA_MAX_KEYS; i++) {
        if (!atomic_load(&l->acked[i]))
            continue;
        char key[48];
        int kl = ha_key(l, i, key, sizeof(key));
        int64_t r = -1;
        for (int attempt = 0; attempt < 5 && r < 0; attempt++) {
            r = mc_store_get(l->s, key, (size_t)kl, got, l->max_len, NULL);
            if (r == MC_ERR_OBJECT_NOT_FOUND)
                break;
            if (r < 0)
                usleep(200000);
        }
        if (r < 0) {
            if (lost < 10)
                fprintf(stderr, "acknowledged put %s is not readable: %s\n", key,
                        mc_status_str((int)r));
            lost++;
            continue;
        }
        tc_fill(want, ha_val_len(l, i), i);
        assert_int_equal(r, ha_val_len(l, i));
        assert_memory_equal(got, want, (size_t)r);
        (*checked)++;
    }
    mc_free(want);
    mc_free(got);
    return lost;
}

#endif /* MC_TEST_HA_CLUSTER_H */
