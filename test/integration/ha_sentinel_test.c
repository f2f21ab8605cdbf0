/*
 * High availability with Redis Sentinel: a Redis primary, one replica and
 * three Sentinels (down-after 1 s), two mooncake-master processes with
 * ha.backend = redis-sentinel://S1,S2,S3/NAME, ha.sync = strict and the
 * default ha.wait_replicas = 1, two storage nodes and this process as a
 * client, all finding the Redis primary through the Sentinels and the
 * master leader through it; the transfer metadata is in the same Redis
 * (metadata = redis-sentinel://S1,S2,S3/NAME/1), so the nodes' and the
 * client's metadata backends follow the failover too.
 *
 *  - the Redis primary SIGKILLed under a stream of puts right after its
 *    replication link was cut (so it held journal records its replica never
 *    got): the Sentinels promote the replica, the masters follow it, no put
 *    was acknowledged while the replica could not confirm it, and every
 *    acknowledged put is readable byte for byte - also through a new master
 *    leader that rebuilt its state from the promoted replica's journal alone
 *    (the old leader SIGKILLed afterwards). Run with
 *    MC_TEST_WAIT_REPLICAS=0 the same test loses acknowledged puts: that is
 *    what WAIT buys.
 *  - a lone Redis behind Sentinels cannot acknowledge anything: with the
 *    replica gone, puts fail cleanly within their timeout instead of being
 *    acknowledged on the primary alone.
 *
 * Timing: Sentinel down-after 1 s, failover within a few seconds; master
 * lease 2 s. The whole test takes about 20-30 s.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include <hiredis/hiredis.h>

#include "mooncake/store.h"
#include "proc.h"
#include "sentinel.h"
#include "store/ha_redis.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define NMASTERS 2
#define NNODES 2
#define RPC_TIMEOUT_US 2000000ull
#define CLUSTER "sentest"
#define PRIMARY_NAME TEST_SENTINEL_NAME
#define MAXVAL 16384
#define MAXKEYS 50000

typedef struct env {
    char dir[64];
    test_sentinels_t ts;
    unsigned dead_sentinel; /* a port nothing listens on */
    char master_url[512], meta_url[512];
    tc_master_t m[NMASTERS];
    tc_node_t node[NNODES];
    mc_store_t *s;
    unsigned wait_replicas;
} env_t;

/* ------------------------------------------------------------ mooncake */

static int start_master(env_t *e, int i)
{
    char backend[400], log[160], wait[64];
    /* the list starts with a Sentinel that does not run: the others are asked */
    snprintf(backend, sizeof(backend),
             "ha.backend=redis-sentinel://127.0.0.1:%u,%s/" PRIMARY_NAME "/0", e->dead_sentinel,
             e->ts.list);
    snprintf(log, sizeof(log), "log.file=%s/master-%d.log", e->dir, i);
    snprintf(wait, sizeof(wait), "ha.wait_replicas=%u", e->wait_replicas);
    const char *const sets[] = {"master.client_ttl=20s",
                                backend,
                                "ha.cluster_id=" CLUSTER,
                                "ha.lease_ttl=2s",
                                "ha.sync=strict",
                                wait,
                                log,
                                "log.level=info",
                                NULL};
    return tc_master_start(&e->m[i], sets);
}

/* The leading master per Redis (through the Sentinels), or -1. */
static int leader(env_t *e)
{
    mc_ha_url_t u;
    const char *why;
    assert_int_equal(mc_ha_url_parse(e->master_url, &u, &why), MC_OK);
    char addr[MC_HA_ADDR_MAX];
    if (mc_ha_resolve_leader(&u, 500000, addr, sizeof(addr), NULL) != MC_OK)
        return -1;
    for (int i = 0; i < NMASTERS; i++) {
        char want[64];
        snprintf(want, sizeof(want), "127.0.0.1:%u", e->m[i].rpc_port);
        if (strcmp(addr, want) == 0)
            return i;
    }
    return -1;
}

static int wait_leader(env_t *e, int not, int timeout_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    do {
        int l = leader(e);
        if (l >= 0 && l != not )
            return l;
        usleep(20000);
    } while (mc_now_ms() < deadline);
    return -1;
}

static int start_node(env_t *e, int i)
{
    char meta[560];
    snprintf(meta, sizeof(meta), "store.metadata=%s", e->meta_url);
    const char *const sets[] = {meta, NULL};
    return tc_node_start(&e->node[i], e->master_url, sets);
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        p[i] = (uint8_t)(x >> ((i & 7) * 8));
    }
}

static size_t val_len(unsigned i)
{
    return 256 + (i * 7919u) % (MAXVAL - 256);
}

static int setup(void **state)
{
    static env_t e;
    memset(&e, 0, sizeof(e));
    signal(SIGPIPE, SIG_IGN);
    const char *w = getenv("MC_TEST_WAIT_REPLICAS");
    e.wait_replicas = w != NULL ? (unsigned)atoi(w) : 1;
    snprintf(e.dir, sizeof(e.dir), "/tmp/mc-sent-XXXXXX");
    if (mkdtemp(e.dir) == NULL)
        return -1;
    if (ts_start(&e.ts, e.dir) != 0)
        return -1;
    e.dead_sentinel = test_free_port();
    snprintf(e.master_url, sizeof(e.master_url),
             "redis-sentinel://%s/" PRIMARY_NAME "/0?cluster=" CLUSTER, e.ts.list);
    snprintf(e.meta_url, sizeof(e.meta_url), "redis-sentinel://%s/" PRIMARY_NAME "/1", e.ts.list);
    for (int i = 0; i < NMASTERS; i++)
        assert_int_equal(start_master(&e, i), 0);
    assert_true(wait_leader(&e, -1, 8000) >= 0);
    for (int i = 0; i < NNODES; i++)
        assert_int_equal(start_node(&e, i), 0);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = e.master_url;
    c.metadata = e.meta_url;
    c.local_buffer_size = 8 << 20;
    c.reactors = 1;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    c.transfer_timeout_us = 2000000;
    assert_int_equal(mc_store_open(&c, &e.s), MC_OK);
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    mc_store_close(e->s);
    for (int i = 0; i < NNODES; i++)
        tc_node_stop(&e->node[i], SIGTERM);
    for (int i = 0; i < NMASTERS; i++)
        tc_master_stop(&e->m[i], SIGTERM);
    ts_stop(&e->ts);
    if (getenv("TEST_KEEP_LOGS") == NULL) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", e->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", e->dir);
    } else {
        fprintf(stderr, "logs kept in %s\n", e->dir);
    }
    return 0;
}

/* ------------------------------------------------------------ the load */

typedef struct load {
    env_t *e;
    _Atomic int stop;
    _Atomic unsigned next;
    _Atomic unsigned char acked[MAXKEYS];
    _Atomic unsigned nacked, nfailed, gets_bad_bytes;
    _Atomic uint64_t worst_call_us;
    _Atomic int phase;            /* what the test is doing (see the test) */
    _Atomic unsigned acked_in[8]; /* puts acknowledged per phase */
} load_t;

static void note_time(load_t *l, uint64_t t0)
{
    uint64_t dt = mc_now_us() - t0;
    uint64_t w = atomic_load(&l->worst_call_us);
    while (dt > w && !atomic_compare_exchange_weak(&l->worst_call_us, &w, dt))
        ;
}

static void *load_main(void *arg)
{
    load_t *l = arg;
    uint8_t *buf = mc_malloc(MAXVAL), *got = mc_malloc(MAXVAL);
    uint64_t x = 777;
    while (!atomic_load(&l->stop)) {
        unsigned i = atomic_fetch_add(&l->next, 1);
        if (i >= MAXKEYS)
            break;
        char key[32];
        int kl = snprintf(key, sizeof(key), "sen-%06u", i);
        size_t n = val_len(i);
        fill(buf, n, i);
        int phase = atomic_load(&l->phase);
        uint64_t t0 = mc_now_us();
        mc_status_t st = mc_store_put(l->e->s, key, (size_t)kl, buf, n, NULL);
        note_time(l, t0);
        if (st == MC_OK) {
            atomic_store(&l->acked[i], 1);
            atomic_fetch_add(&l->nacked, 1);
            /* the phase at the start of the call: an acknowledgement of a
             * put begun during the cut counts for the cut */
            atomic_fetch_add(&l->acked_in[phase], 1);
        } else {
            atomic_fetch_add(&l->nfailed, 1);
            usleep(20000); /* the cluster is changing: do not spin */
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned j = (unsigned)(x % (i + 1));
        if (!atomic_load(&l->acked[j]))
            continue;
        kl = snprintf(key, sizeof(key), "sen-%06u", j);
        t0 = mc_now_us();
        int64_t r = mc_store_get(l->e->s, key, (size_t)kl, got, MAXVAL, NULL);
        note_time(l, t0);
        if (r >= 0) {
            fill(buf, val_len(j), j);
            if ((size_t)r != val_len(j) || memcmp(got, buf, (size_t)r) != 0)
                atomic_fetch_add(&l->gets_bad_bytes, 1);
        }
    }
    mc_free(buf);
    mc_free(got);
    return NULL;
}

/* Every acknowledged put reads back with its bytes; returns how many were
 * missing (each named on stderr). */
static unsigned check_all_acked(load_t *l, unsigned *checked)
{
    uint8_t *want = mc_malloc(MAXVAL), *got = mc_malloc(MAXVAL);
    unsigned n = atomic_load(&l->next), lost = 0;
    *checked = 0;
    for (unsigned i = 0; i < n && i < MAXKEYS; i++) {
        if (!atomic_load(&l->acked[i]))
            continue;
        char key[32];
        int kl = snprintf(key, sizeof(key), "sen-%06u", i);
        int64_t r = -1;
        for (int attempt = 0; attempt < 5 && r < 0; attempt++) {
            r = mc_store_get(l->e->s, key, (size_t)kl, got, MAXVAL, NULL);
            if (r < 0 && r != MC_ERR_OBJECT_NOT_FOUND)
                usleep(200000);
            else if (r < 0)
                break;
        }
        if (r < 0) {
            if (lost < 10)
                fprintf(stderr, "acknowledged put %s is not readable: %s\n", key,
                        mc_status_str((int)r));
            lost++;
            continue;
        }
        fill(want, val_len(i), i);
        assert_int_equal(r, val_len(i));
        assert_memory_equal(got, want, (size_t)r);
        (*checked)++;
    }
    mc_free(want);
    mc_free(got);
    return lost;
}

static void wait_acks_in(load_t *l, int phase, unsigned n, int timeout_ms, const char *what)
{
    for (int waited = 0; atomic_load(&l->acked_in[phase]) < n; waited += 10) {
        if (waited > timeout_ms)
            fail_msg("%s: only %u puts acknowledged within %d ms", what,
                     atomic_load(&l->acked_in[phase]), timeout_ms);
        usleep(10000);
    }
}

/* ------------------------------------------------------------ tests */

enum { PH_BEFORE, PH_CUT, PH_FAILOVER, PH_PROMOTED, PH_NEW_LEADER };

static void killing_the_redis_primary_loses_no_acknowledged_put(void **state)
{
    env_t *e = *state;
    static load_t l;
    memset(&l, 0, sizeof(l));
    l.e = e;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, load_main, &l), 0);
    wait_acks_in(&l, PH_BEFORE, 200, 15000, "before the cut");

    /* Cut the replication link: the replica may not sync any more (ACL),
     * its connection is dropped. From here on the primary holds journal
     * records the replica never sees. */
    unsigned p1 = e->ts.redis[1].port;
    atomic_store(&l.phase, PH_CUT);
    assert_int_equal(ts_cut_replication(e->ts.redis[0].port), 0);
    usleep(1500000);
    unsigned during_cut = atomic_load(&l.acked_in[PH_CUT]);

    /* The primary dies with what only it had. */
    atomic_store(&l.phase, PH_FAILOVER);
    uint64_t t_kill = mc_now_us();
    ts_kill_redis(&e->ts, 0);
    assert_int_equal(ts_wait_primary(&e->ts, p1, 15000), 0);
    uint64_t t_promoted = mc_now_us();
    /* The old primary comes back (empty: no persistence) as the new
     * primary's replica, so that writes can be confirmed again. */
    assert_int_equal(ts_start_redis(&e->ts, 0, p1), 0);
    atomic_store(&l.phase, PH_PROMOTED);
    int lead = wait_leader(e, -1, 15000);
    assert_true(lead >= 0);
    wait_acks_in(&l, PH_PROMOTED, 100, 20000, "after the promotion");
    uint64_t t_acks = mc_now_us();

    /* The master leader dies too: its successor knows only what the
     * promoted replica's journal holds. */
    atomic_store(&l.phase, PH_NEW_LEADER);
    print_message("killing master %d (pid %d), the leader\n", lead, (int)e->m[lead].proc.pid);
    kill(e->m[lead].proc.pid, SIGKILL);
    int nl = wait_leader(e, lead, 15000);
    assert_true(nl >= 0);
    wait_acks_in(&l, PH_NEW_LEADER, 100, 20000, "after the master failover");
    atomic_store(&l.stop, 1);
    pthread_join(t, NULL);
    tc_master_stop(&e->m[lead], SIGKILL); /* reaps the killed one */
    print_message("puts acknowledged: %u before the cut, %u during it, %u during the failover, "
                  "%u after the promotion, %u after the master failover; %u failed cleanly\n",
                  atomic_load(&l.acked_in[PH_BEFORE]), during_cut,
                  atomic_load(&l.acked_in[PH_FAILOVER]), atomic_load(&l.acked_in[PH_PROMOTED]),
                  atomic_load(&l.acked_in[PH_NEW_LEADER]), atomic_load(&l.nfailed));
    print_message("redis primary killed; replica promoted %llu ms later; puts acknowledged "
                  "again %llu ms after the kill; slowest call %llu ms\n",
                  (unsigned long long)((t_promoted - t_kill) / 1000),
                  (unsigned long long)((t_acks - t_kill) / 1000),
                  (unsigned long long)(atomic_load(&l.worst_call_us) / 1000));
    unsigned checked = 0;
    unsigned lost = check_all_acked(&l, &checked);
    print_message("%u acknowledged puts read back byte for byte, %u lost\n", checked, lost);
    assert_int_equal(atomic_load(&l.gets_bad_bytes), 0);
    assert_int_equal(lost, 0);
    if (e->wait_replicas > 0)
        assert_int_equal(during_cut, 0); /* nothing the replica did not confirm */
    /* a put is at most PutStart + transfer + PutEnd, each within its timeout */
    assert_true(atomic_load(&l.worst_call_us) < 2 * RPC_TIMEOUT_US + 2000000);
}

static void without_a_replica_puts_fail_cleanly_instead_of_being_acknowledged(void **state)
{
    env_t *e = *state;
    /* the current primary per the Sentinels; stop its replica */
    unsigned prim = ts_primary(&e->ts, 0);
    int ri = 1 - ts_index(&e->ts, prim);
    assert_true(ri >= 0 && ri <= 1 && e->ts.redis[ri].proc.pid > 0);
    /* a put works now */
    uint8_t v[1000];
    fill(v, sizeof(v), 4242);
    assert_int_equal(wait_leader(e, -1, 15000) >= 0, 1);
    mc_status_t st = MC_ERR_RPC_TIMEOUT;
    for (int attempt = 0; attempt < 20 && st != MC_OK; attempt++) {
        st = mc_store_put(e->s, "alone-0", 7, v, sizeof(v), NULL);
        if (st != MC_OK)
            usleep(200000);
    }
    assert_int_equal(st, MC_OK);
    ts_kill_redis(&e->ts, ri);
    uint64_t t0 = mc_now_us();
    st = mc_store_put(e->s, "alone-1", 7, v, sizeof(v), NULL);
    uint64_t dt = mc_now_us() - t0;
    print_message("a put with the replica gone: %s after %llu ms\n", mc_status_str(st),
                  (unsigned long long)(dt / 1000));
    if (e->wait_replicas > 0)
        assert_int_not_equal(st, MC_OK);
    assert_true(dt < 2 * RPC_TIMEOUT_US + 2000000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(killing_the_redis_primary_loses_no_acknowledged_put),
        cmocka_unit_test(without_a_replica_puts_fail_cleanly_instead_of_being_acknowledged),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
