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
#include "ha_cluster.h"
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

typedef struct env {
    ha_cluster_t h; /* masters, nodes, this process's client */
    test_sentinels_t ts;
    unsigned dead_sentinel; /* a port nothing listens on */
    unsigned wait_replicas;
} env_t;

/* ------------------------------------------------------------ mooncake */

static int start_master(void *env, int i)
{
    env_t *e = env;
    char backend[400], log[160], wait[64];
    /* the list starts with a Sentinel that does not run: the others are asked */
    snprintf(backend, sizeof(backend),
             "ha.backend=redis-sentinel://127.0.0.1:%u,%s/" PRIMARY_NAME "/0", e->dead_sentinel,
             e->ts.list);
    snprintf(log, sizeof(log), "log.file=%s/master-%d.log", e->h.dir, i);
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
    return tc_master_start(&e->h.m[i], sets);
}

static int setup(void **state)
{
    static env_t e;
    memset(&e, 0, sizeof(e));
    const char *w = getenv("MC_TEST_WAIT_REPLICAS");
    e.wait_replicas = w != NULL ? (unsigned)atoi(w) : 1;
    if (ha_init(&e.h, "sent", NMASTERS, NNODES) != 0 || ts_start(&e.ts, e.h.dir) != 0)
        return -1;
    e.dead_sentinel = test_free_port();
    snprintf(e.h.master_url, sizeof(e.h.master_url),
             "redis-sentinel://%s/" PRIMARY_NAME "/0?cluster=" CLUSTER, e.ts.list);
    snprintf(e.h.meta_url, sizeof(e.h.meta_url), "redis-sentinel://%s/" PRIMARY_NAME "/1",
             e.ts.list);
    ha_start(&e.h, start_master, &e, 8000, RPC_TIMEOUT_US);
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    ha_stop(&e->h);
    ts_stop(&e->ts);
    ha_dir_remove(&e->h);
    return 0;
}

/* ------------------------------------------------------------ the load */

static void load_init(ha_load_t *l, env_t *e)
{
    ha_load_init(l, e->h.s, "sen-", 256, MAXVAL, 777);
    l->fail_pause_us = 20000;
}

static void wait_acks_in(ha_load_t *l, int phase, unsigned n, int timeout_ms, const char *what)
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
    static ha_load_t l;
    load_init(&l, e);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, ha_load_main, &l), 0);
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
    int lead = ha_wait_leader(&e->h, -1, 15000, NULL);
    assert_true(lead >= 0);
    wait_acks_in(&l, PH_PROMOTED, 100, 20000, "after the promotion");
    uint64_t t_acks = mc_now_us();

    /* The master leader dies too: its successor knows only what the
     * promoted replica's journal holds. */
    atomic_store(&l.phase, PH_NEW_LEADER);
    print_message("killing master %d (pid %d), the leader\n", lead, (int)e->h.m[lead].proc.pid);
    kill(e->h.m[lead].proc.pid, SIGKILL);
    int nl = ha_wait_leader(&e->h, lead, 15000, NULL);
    assert_true(nl >= 0);
    wait_acks_in(&l, PH_NEW_LEADER, 100, 20000, "after the master failover");
    atomic_store(&l.stop, 1);
    pthread_join(t, NULL);
    tc_master_stop(&e->h.m[lead], SIGKILL); /* reaps the killed one */
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
    unsigned lost = ha_check_acked(&l, &checked);
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
    tc_fill(v, sizeof(v), 4242);
    assert_int_equal(ha_wait_leader(&e->h, -1, 15000, NULL) >= 0, 1);
    assert_int_equal(ha_put_retry(e->h.s, "alone-0", v, sizeof(v), 20, 200000), MC_OK);
    ts_kill_redis(&e->ts, ri);
    uint64_t t0 = mc_now_us();
    mc_status_t st = mc_store_put(e->h.s, "alone-1", 7, v, sizeof(v), NULL);
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
