/*
 * High availability end to end: a real redis-server, three mooncake-master
 * processes (ha.backend = that redis, ha.lease_ttl = 1 s, ha.sync = strict),
 * two mooncake-store-server storage nodes and this process as a client, all
 * finding the leader through master = redis://...?cluster=ID.
 *
 *  - exactly one master leads; the others answer NOT_LEADER and say where
 *    the leader is; /role and /ha_status tell the same;
 *  - the leader SIGKILLed during a stream of puts and gets: a standby leads
 *    within 2 x the lease TTL; every put acknowledged (strict) before, during
 *    or after is readable afterwards with its bytes; no call takes longer
 *    than its time budget; puts work again on the new leader without any
 *    node re-mounting by hand; the old leader restarted becomes a standby;
 *  - a leader frozen (SIGSTOP) past its lease is deposed: on waking up it
 *    refuses calls, and its late journal appends are refused by the fencing
 *    check (the stream keeps one history: every acknowledged put survives);
 *  - with metadata = master (the masters' embedded transfer-metadata
 *    service), segment descriptors survive the failover and clients' metadata
 *    backends follow the leader;
 *  - a leader whose lease is taken by someone else cannot append one record:
 *    the call it was about to acknowledge fails with NOT_LEADER;
 *  - Redis frozen for 400 ms under strict puts: unanswered appends are sent
 *    again and stored once (no standby applies a record twice);
 *  - a journal that lost its tail (a Redis failover to a replica without the
 *    last records) makes the leader step down and every master rebuild: they
 *    all agree with the journal again;
 *  - a malformed journal record stops the standbys (role failed, logged),
 *    crashes nothing, and the leader keeps serving.
 *
 * Timing: the lease is 1 s, standbys poll every 250 ms, so a failover takes
 * about 1-1.3 s after the kill.
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
#include "rpc/fields.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/ha_redis.h"
#include "store/master_client.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define NMASTERS 3
#define NNODES 2
#define LEASE_MS 1000
#define RPC_TIMEOUT_US 2000000ull
#define CLUSTER "hatest"
#define MAXVAL 65536

typedef struct env {
    ha_cluster_t h; /* masters, nodes, this process's client */
    tc_redis_t redis;
} env_t;

/* ------------------------------------------------------------ helpers */

static void start_redis(env_t *e)
{
    assert_int_equal(tc_redis_start(&e->redis), 0);
    snprintf(e->h.master_url, sizeof(e->h.master_url), "redis://127.0.0.1:%u/0?cluster=" CLUSTER,
             e->redis.port);
    snprintf(e->h.meta_url, sizeof(e->h.meta_url), "redis://127.0.0.1:%u/1", e->redis.port);
}

/* One more --set word for the next start_master (NULL: none). */
static const char *master_extra;

/* Start master i (its ports are kept by restarts). 0 once it listens. */
static int start_master(void *env, int i)
{
    env_t *e = env;
    char backend[128], log[160];
    snprintf(backend, sizeof(backend), "ha.backend=redis://127.0.0.1:%u/0", e->redis.port);
    snprintf(log, sizeof(log), "log.file=%s/master-%d.log", e->h.dir, i);
    const char *const sets[] = {"master.client_ttl=10s",
                                backend,
                                "ha.cluster_id=" CLUSTER,
                                "ha.lease_ttl=1s",
                                "ha.sync=strict",
                                "ha.snapshot_records=300",
                                log,
                                "log.level=info",
                                master_extra,
                                NULL};
    return tc_master_start(&e->h.m[i], sets);
}

/* GET http://127.0.0.1:port/path within 5 s: the status code (-1: no
 * answer), the body into buf. */
static int http_get(unsigned port, const char *path, char *buf, size_t len)
{
    char *body = NULL;
    int code = tc_http_get(port, path, &body, 5000 * TC_SLOW);
    snprintf(buf, len, "%s", body != NULL ? body : "");
    free(body);
    return code;
}

/* A counter of /metrics, or -1. */
static long long metric(unsigned http_port, const char *name)
{
    static char body[1 << 17];
    if (http_get(http_port, "/metrics", body, sizeof(body)) != 200)
        return -1;
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = strstr(body, pat);
    return p != NULL ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* Until masters a and b count the same keys (within ms): their
 * /metrics/summary lines into asum and bsum (cap bytes each), their counts
 * into *ak and *bk. */
static void wait_same_keys(env_t *e, int a, int b, int ms, char *asum, char *bsum, size_t cap,
                           unsigned long long *ak, unsigned long long *bk)
{
    *ak = 0;
    *bk = 1;
    for (int waited = 0; waited < ms && *ak != *bk; waited += 100) {
        assert_int_equal(http_get(e->h.m[a].http_port, "/metrics/summary", asum, cap), 200);
        assert_int_equal(http_get(e->h.m[b].http_port, "/metrics/summary", bsum, cap), 200);
        sscanf(asum, "keys=%llu", ak);
        sscanf(bsum, "keys=%llu", bk);
        if (*ak != *bk)
            usleep(100000);
    }
}

static int setup(void **state)
{
    static env_t e;
    memset(&e, 0, sizeof(e));
    if (ha_init(&e.h, "ha", NMASTERS, NNODES) != 0)
        return -1;
    start_redis(&e);
    ha_start(&e.h, start_master, &e, 5000, RPC_TIMEOUT_US);
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    ha_stop(&e->h);
    tc_redis_stop(&e->redis, SIGTERM);
    ha_dir_remove(&e->h);
    return 0;
}

/* ------------------------------------------------------------ the load */

enum { PH_OLD_LEADER, PH_NEW_LEADER }; /* the phases of the load */

static void load_init(ha_load_t *l, env_t *e)
{
    ha_load_init(l, e->h.s, "ha-", 512, MAXVAL, 12345);
}

/* Every acknowledged put reads back with its bytes. */
static void check_all_acked(ha_load_t *l)
{
    unsigned checked = 0;
    unsigned lost = ha_check_acked(l, &checked);
    print_message("%u acknowledged puts read back byte for byte\n", checked);
    if (lost > 0)
        fail_msg("%u acknowledged puts are not readable", lost);
}

/* ------------------------------------------------------------ tests */

static void one_master_leads_and_the_others_say_where_it_is(void **state)
{
    env_t *e = *state;
    int64_t view = 0;
    int l = ha_wait_leader(&e->h, -1, 3000, &view);
    assert_true(l >= 0);
    assert_true(view > 0);
    char body[4096];
    for (int i = 0; i < NMASTERS; i++) {
        int code = http_get(e->h.m[i].http_port, "/role", body, sizeof(body));
        if (i == l) {
            assert_int_equal(code, 200);
            assert_string_equal(body, "leader\n");
        } else {
            assert_int_equal(code, 503);
            assert_string_equal(body, "standby\n");
        }
        assert_int_equal(http_get(e->h.m[i].http_port, "/ha_status", body, sizeof(body)), 200);
        assert_non_null(strstr(body, i == l ? "\"role\":\"leader\"" : "\"role\":\"standby\""));
    }
    /* a standby refuses a store call with NOT_LEADER and the leader's address */
    int sb = (l + 1) % NMASTERS;
    tc_rpc_t c;
    assert_int_equal(tc_rpc_open(&c, e->h.m[sb].rpc_port), 0);
    mc_buf_t body_buf = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body_buf);
    mc_mcli_key(&w, "k", 1);
    assert_int_equal(tc_rpc_call(&c, MC_RPC_EXIST_KEY, &body_buf, 2000000, &resp),
                     MC_ERR_NOT_LEADER);
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%u", e->h.m[l].rpc_port);
    assert_non_null(memmem(mc_buf_head(&resp), mc_buf_used(&resp), want, strlen(want)));
    mc_buf_fini(&body_buf);
    mc_buf_fini(&resp);
    tc_rpc_close(&c);
}

static void killing_the_leader_under_load_loses_no_acknowledged_put(void **state)
{
    env_t *e = *state;
    static ha_load_t l;
    load_init(&l, e);
    int64_t v0 = 0;
    int old = ha_wait_leader(&e->h, -1, 3000, &v0);
    assert_true(old >= 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, ha_load_main, &l), 0);
    /* let some puts through, then kill the leader mid-stream */
    for (int waited = 0; atomic_load(&l.nacked) < 200 && waited < 10000; waited += 10)
        usleep(10000);
    assert_true(atomic_load(&l.nacked) >= 200);
    uint64_t t_kill = mc_now_us();
    kill(e->h.m[old].proc.pid, SIGKILL);
    int64_t v1 = 0;
    int nl = ha_wait_leader(&e->h, old, 2 * LEASE_MS + 500, &v1);
    uint64_t t_new = mc_now_us();
    assert_true(nl >= 0);
    assert_true(v1 > v0);
    print_message("leader %d killed; %d leads (view %lld -> %lld) %llu ms later\n", old, nl,
                  (long long)v0, (long long)v1, (unsigned long long)((t_new - t_kill) / 1000));
    assert_true(t_new - t_kill <= 2ull * LEASE_MS * 1000);
    /* keep the stream going on the new leader */
    atomic_store(&l.phase, PH_NEW_LEADER);
    for (int waited = 0; atomic_load(&l.acked_in[PH_NEW_LEADER]) < 200 && waited < 10000;
         waited += 10)
        usleep(10000);
    atomic_store(&l.stop, 1);
    pthread_join(t, NULL);
    print_message("puts: %u acknowledged (%u after the new leader), %u failed; gets: %u ok; "
                  "slowest call %llu ms\n",
                  atomic_load(&l.nacked), atomic_load(&l.acked_in[PH_NEW_LEADER]),
                  atomic_load(&l.nfailed), atomic_load(&l.gets_ok),
                  (unsigned long long)(atomic_load(&l.worst_call_us) / 1000));
    assert_true(atomic_load(&l.acked_in[PH_NEW_LEADER]) >= 200);
    /* the new leader knew the nodes' segments from the journal: nobody
     * mounted again (only the pure client, which has no segment and so no
     * record, registers with an empty ReMount when asked) */
    assert_int_equal(metric(e->h.m[nl].http_port, "master_mount_segment_requests_total"), 0);
    long long remounts = metric(e->h.m[nl].http_port, "master_remount_segment_requests_total");
    print_message("re-mounts at the new leader: %lld\n", remounts);
    assert_true(remounts >= 0 && remounts <= 1);
    assert_int_equal(atomic_load(&l.gets_bad_bytes), 0);
    /* a put is PutStart (<= rpc timeout) + transfer + PutEnd (<= rpc timeout,
     * resent within it): nothing may take longer */
    assert_true(atomic_load(&l.worst_call_us) < 2 * RPC_TIMEOUT_US + 2000000);
    tc_master_stop(&e->h.m[old], SIGKILL); /* reaps the killed one */
    check_all_acked(&l);

    /* remove every other key: journal records pile up beyond twice the
     * state, so the remaining standby snapshots and trims the journal */
    unsigned removed = 0;
    for (unsigned i = 0; i < atomic_load(&l.next) && i < HA_MAX_KEYS; i += 2) {
        if (!l.acked[i])
            continue;
        char key[32];
        int kl = ha_key(&l, i, key, sizeof(key));
        assert_int_equal(mc_store_remove(e->h.s, key, (size_t)kl, 1), MC_OK); /* read: leased */
        removed++;
    }
    int third = 3 - old - nl;
    char body[4096];
    int snapped = 0;
    for (int waited = 0; waited < 5000 && !snapped; waited += 50) {
        assert_int_equal(http_get(e->h.m[third].http_port, "/ha_status", body, sizeof(body)), 200);
        snapped = strstr(body, "\"snapshots_taken\":0,") == NULL;
        if (!snapped)
            usleep(50000);
    }
    print_message("%u keys removed; standby %d snapshotted: %d\n", removed, third, snapped);
    assert_true(snapped);

    /* the old leader comes back as a standby and follows */
    assert_int_equal(start_master(e, old), 0);
    int code = -1;
    for (int waited = 0; waited < 5000; waited += 50) {
        code = http_get(e->h.m[old].http_port, "/role", body, sizeof(body));
        if (code == 503 && strcmp(body, "standby\n") == 0)
            break;
        usleep(50000);
    }
    assert_int_equal(code, 503);
    assert_string_equal(body, "standby\n");
    int64_t v2 = 0;
    assert_int_equal(ha_leader(&e->h, &v2), nl);
    assert_int_equal(v2, v1);
    /* the journal was trimmed behind snapshots (ha.snapshot_records = 300):
     * the restarted master rebuilt from the snapshot plus the tail, and
     * holds exactly the leader's objects */
    char lsum[512], ssum[512];
    unsigned long long lk, sk;
    wait_same_keys(e, nl, old, 3000, lsum, ssum, sizeof(lsum), &lk, &sk);
    print_message("leader: %sstandby: %s", lsum, ssum);
    assert_true(lk >= atomic_load(&l.nacked) - removed);
    assert_int_equal(sk, lk);
    assert_int_equal(http_get(e->h.m[old].http_port, "/ha_status", body, sizeof(body)), 200);
    assert_null(strstr(body, "\"snapshots_loaded\":0,"));
}

static void a_frozen_leader_is_deposed_and_its_late_writes_are_refused(void **state)
{
    env_t *e = *state;
    int64_t v0 = 0;
    int old = ha_wait_leader(&e->h, -1, 3000, &v0);
    assert_true(old >= 0);
    /* something to keep: acknowledged before the freeze */
    uint8_t buf[4096], got[4096];
    tc_fill(buf, sizeof(buf), 777);
    assert_int_equal(mc_store_put(e->h.s, "frozen-before", 13, buf, sizeof(buf), NULL), MC_OK);
    assert_int_equal(test_proc_freeze(e->h.m[old].proc.pid), 0);
    int64_t v1 = 0;
    int nl = ha_wait_leader(&e->h, old, 2 * LEASE_MS + 500, &v1);
    assert_true(nl >= 0);
    assert_true(v1 > v0);
    /* the client follows; puts work on the new leader */
    tc_fill(buf, sizeof(buf), 778);
    mc_status_t st = MC_ERR_NOT_LEADER;
    for (int attempt = 0; attempt < 20 && st != MC_OK; attempt++) {
        st = mc_store_put(e->h.s, "frozen-after", 12, buf, sizeof(buf), NULL);
        /* an attempt whose answer was lost (a timeout under load) may have
         * stored it: the retry finds it; its bytes are checked below */
        if (st == MC_ERR_OBJECT_ALREADY_EXISTS && attempt > 0)
            st = MC_OK;
        if (st != MC_OK)
            usleep(100000);
    }
    assert_int_equal(st, MC_OK);
    /* wake the old leader: it must notice it lost the lease and refuse */
    kill(e->h.m[old].proc.pid, SIGCONT);
    char body[4096];
    int code = -1;
    for (int waited = 0; waited < 3000; waited += 50) {
        code = http_get(e->h.m[old].http_port, "/role", body, sizeof(body));
        if (code == 503)
            break;
        usleep(50000);
    }
    assert_int_equal(code, 503);
    assert_int_equal(http_get(e->h.m[old].http_port, "/ha_status", body, sizeof(body)), 200);
    print_message("deposed leader: %s", body);
    int64_t v2 = 0;
    assert_int_equal(ha_leader(&e->h, &v2), nl);
    assert_int_equal(v2, v1);
    /* one history: both puts are there with their bytes */
    assert_int_equal(mc_store_get(e->h.s, "frozen-after", 12, got, sizeof(got), NULL), 4096);
    assert_memory_equal(got, buf, sizeof(buf));
    tc_fill(buf, sizeof(buf), 777);
    assert_int_equal(mc_store_get(e->h.s, "frozen-before", 13, got, sizeof(got), NULL), 4096);
    assert_memory_equal(got, buf, sizeof(buf));
}

static mc_store_t *open_embedded_meta_client(env_t *e, uint64_t segment)
{
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = e->h.master_url;
    c.metadata = "master"; /* the masters' embedded service, following the leader */
    c.global_segment_size = segment;
    c.local_buffer_size = 4 << 20;
    c.reactors = 1;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    c.transfer_timeout_us = 2000000;
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_open(&c, &s), MC_OK);
    return s;
}

/* metadata = master with HA masters: the transfer-engine descriptors live in
 * the leader's embedded KV, are journaled like everything else, and the
 * clients' metadata backend follows the leader. A client that starts after
 * the failover finds a segment published before it. */
static void the_embedded_metadata_service_follows_the_leader(void **state)
{
    env_t *e = *state;
    int64_t v0 = 0;
    int old = ha_wait_leader(&e->h, -1, 3000, &v0);
    assert_true(old >= 0);
    mc_store_t *b = open_embedded_meta_client(e, 16 << 20);
    mc_store_t *a = open_embedded_meta_client(e, 0);
    const char *bname = mc_store_name(b);
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.preferred_segments = &bname;
    rc.n_preferred = 1;
    uint8_t v[8192], got[8192];
    tc_fill(v, sizeof(v), 99);
    mc_status_t st = MC_ERR_NOT_LEADER;
    for (int attempt = 0; attempt < 30 && st != MC_OK; attempt++) {
        st = mc_store_put(a, "on-b", 4, v, sizeof(v), &rc);
        if (st != MC_OK)
            usleep(100000);
    }
    assert_int_equal(st, MC_OK);
    mc_store_replica_t r[2];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(a, "on-b", 4, r, 2, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment, bname);

    kill(e->h.m[old].proc.pid, SIGKILL);
    int64_t v1 = 0;
    int nl = ha_wait_leader(&e->h, old, 2 * LEASE_MS + 500, &v1);
    assert_true(nl >= 0);
    tc_master_stop(&e->h.m[old], SIGKILL); /* reaps the killed one */
    /* a newcomer reads b's object: b's descriptor comes from the new leader */
    mc_store_t *c = open_embedded_meta_client(e, 0);
    int64_t got_n = -1;
    for (int attempt = 0; attempt < 30 && got_n < 0; attempt++) {
        got_n = mc_store_get(c, "on-b", 4, got, sizeof(got), NULL);
        if (got_n < 0)
            usleep(100000);
    }
    assert_int_equal(got_n, sizeof(v));
    assert_memory_equal(got, v, sizeof(v));
    /* and the old clients go on with the new leader */
    assert_int_equal(mc_store_get(a, "on-b", 4, got, sizeof(got), NULL), sizeof(v));
    mc_store_close(c);
    mc_store_close(a);
    mc_store_close(b);
    assert_int_equal(start_master(e, old), 0);
}

static long long redis_int(env_t *e, const char *fmt, ...)
{
    redisContext *c = redisConnect("127.0.0.1", (int)e->redis.port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : (r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(c);
    return v;
}

/* The fencing check: a leader whose lease another holder took (here written
 * by hand, as a new leader's would be) cannot add a single record to the
 * journal; the call it was acknowledging fails with NOT_LEADER; it steps
 * down. Once that lease expires a master is elected and work goes on. */
static void a_leader_whose_lease_was_taken_cannot_append(void **state)
{
    env_t *e = *state;
    int64_t v0 = 0;
    int l = ha_wait_leader(&e->h, -1, 3000, &v0);
    assert_true(l >= 0);
    tc_rpc_t c;
    assert_int_equal(tc_rpc_open(&c, e->h.m[l].rpc_port), 0);
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_meta_put(&w, "fenced-key", 10, "v", 1, (mc_uuid_t){0xfe, 1});
    /* warm the connection: the leader takes it */
    assert_int_equal(tc_rpc_call(&c, MC_RPC_META_PUT, &body, 2000000, &resp), MC_OK);
    long long len0 = redis_int(e, "XLEN mc/%s/ha/journal", CLUSTER);
    assert_true(len0 > 0);
    redis_int(e, "SET mc/%s/ha/lease %s PX %d", CLUSTER, "127.0.0.1:1 999999 intruder", 1500);
    mc_buf_reset(&resp);
    mc_status_t st = tc_rpc_call(&c, MC_RPC_META_PUT, &body, 2000000, &resp);
    assert_int_equal(st, MC_ERR_NOT_LEADER);
    /* nothing entered the journal after the lease changed hands */
    assert_int_equal(redis_int(e, "XLEN mc/%s/ha/journal", CLUSTER), len0);
    char sbody[4096];
    assert_int_equal(http_get(e->h.m[l].http_port, "/role", sbody, sizeof(sbody)), 503);
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    tc_rpc_close(&c);
    /* the intruder's lease runs out; a real master takes over */
    int64_t v1 = 0;
    int nl = -1;
    for (int waited = 0; waited < 4000 && nl < 0; waited += 20) {
        nl = ha_leader(&e->h, &v1);
        if (nl < 0)
            usleep(20000);
    }
    assert_true(nl >= 0);
    assert_true(v1 > v0);
    uint8_t buf[1000], got[1000];
    tc_fill(buf, sizeof(buf), 4242);
    assert_int_equal(ha_put_retry(e->h.s, "after-fencing", buf, sizeof(buf), 20, 100000), MC_OK);
    assert_int_equal(mc_store_get(e->h.s, "after-fencing", 13, got, sizeof(got), NULL), 1000);
    assert_memory_equal(got, buf, sizeof(buf));
}

/* Redis stalls (frozen 400 ms) under a stream of strict puts: appends get no
 * answer in time and are sent again; the script skips what is already
 * stored, so no record is applied twice (a duplicate PUT_START of a complete
 * object would be an apply error on the standbys) and every acknowledged put
 * is readable. */
static void an_append_retried_after_a_redis_stall_is_stored_once(void **state)
{
    env_t *e = *state;
    static ha_load_t l;
    load_init(&l, e);
    atomic_store(&l.next, 50000); /* keys of their own */
    int64_t v0 = 0;
    int ld = ha_wait_leader(&e->h, -1, 3000, &v0);
    assert_true(ld >= 0);
    long long fails0 =
        metric(e->h.m[ld].http_port, "master_ha_journal_appends_total{result=\"failed\"}");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, ha_load_main, &l), 0);
    for (int waited = 0; atomic_load(&l.nacked) < 100 && waited < 10000; waited += 10)
        usleep(10000);
    assert_int_equal(test_proc_freeze(e->redis.proc.pid), 0);
    usleep(400000);
    kill(e->redis.proc.pid, SIGCONT);
    unsigned at_resume = atomic_load(&l.nacked);
    for (int waited = 0; atomic_load(&l.nacked) < at_resume + 100 && waited < 10000; waited += 10)
        usleep(10000);
    atomic_store(&l.stop, 1);
    pthread_join(t, NULL);
    int64_t v1 = 0;
    int now_leader = ha_wait_leader(&e->h, -1, 3000, &v1);
    long long fails1 = now_leader >= 0
                           ? metric(e->h.m[now_leader].http_port,
                                    "master_ha_journal_appends_total{result=\"failed\"}")
                           : -1;
    print_message("puts: %u acknowledged, %u failed; leader %d (view %lld) -> %d (view %lld); "
                  "append retries %lld\n",
                  atomic_load(&l.nacked), atomic_load(&l.nfailed), ld, (long long)v0, now_leader,
                  (long long)v1, now_leader == ld ? fails1 - fails0 : -1);
    check_all_acked(&l);
    /* no standby met a record twice */
    char body[4096];
    for (int i = 0; i < NMASTERS; i++) {
        if (e->h.m[i].proc.pid <= 0)
            continue;
        assert_int_equal(http_get(e->h.m[i].http_port, "/ha_status", body, sizeof(body)), 200);
        assert_non_null(strstr(body, "\"apply_errors\":0,"));
    }
}

/* The journal loses its tail, as it does when Redis fails over to a replica
 * that never got the last records (a Sentinel setup with ha.wait_replicas =
 * 0): simulated here by deleting the entries after a point and moving the
 * head back. Every master must then agree with the journal again: the
 * leader's next append finds the head behind what it stored (GAP) and it
 * steps down and rebuilds; standbys see the head behind what they applied and
 * rebuild. The lost put is gone everywhere (not served by one master and
 * unknown to another); what the journal still holds, and what comes after,
 * is readable. */
static void a_journal_that_lost_its_tail_makes_every_master_rebuild_from_it(void **state)
{
    env_t *e = *state;
    int64_t v0 = 0;
    int l = ha_wait_leader(&e->h, -1, 3000, &v0);
    assert_true(l >= 0);
    uint8_t a[2000], b[2000], c[2000], got[2000];
    tc_fill(a, sizeof(a), 9001);
    tc_fill(b, sizeof(b), 9002);
    tc_fill(c, sizeof(c), 9003);
    assert_int_equal(ha_put_retry(e->h.s, "tail-a", a, sizeof(a), 20, 100000), MC_OK);
    redisContext *rc = redisConnect("127.0.0.1", (int)e->redis.port);
    assert_non_null(rc);
    assert_int_equal(rc->err, 0);
    redisReply *r = redisCommand(rc, "XREVRANGE mc/%s/ha/journal + - COUNT 1", CLUSTER);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    char id_a[64];
    snprintf(id_a, sizeof(id_a), "%s", r->element[0]->element[0]->str);
    freeReplyObject(r);
    r = redisCommand(rc, "GET mc/%s/ha/head", CLUSTER);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char head_a[32];
    snprintf(head_a, sizeof(head_a), "%s", r->str);
    freeReplyObject(r);
    assert_int_equal(mc_store_put(e->h.s, "tail-b", 6, b, sizeof(b), NULL), MC_OK);
    usleep(600000); /* the standbys apply it */
    r = redisCommand(rc, "EVAL %s 2 mc/%s/ha/journal mc/%s/ha/head %s %s",
                     "local ids = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+') "
                     "for _, x in ipairs(ids) do redis.call('XDEL', KEYS[1], x[1]) end "
                     "redis.call('SET', KEYS[2], ARGV[2]) return #ids",
                     CLUSTER, CLUSTER, id_a, head_a);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    print_message("journal entries after %s (record %s) deleted: %lld\n", id_a, head_a, r->integer);
    assert_true(r->integer >= 1);
    freeReplyObject(r);
    redisFree(rc);
    usleep(700000); /* the standbys' polls see the head behind them */
    assert_int_equal(ha_put_retry(e->h.s, "tail-c", c, sizeof(c), 50, 100000), MC_OK);
    int64_t v1 = 0;
    int nl = ha_wait_leader(&e->h, -1, 5000, &v1);
    assert_true(nl >= 0);
    print_message("leader %d (view %lld) -> %d (view %lld)\n", l, (long long)v0, nl, (long long)v1);
    assert_true(v1 > v0); /* the old leader stepped down */
    assert_int_equal(mc_store_get(e->h.s, "tail-a", 6, got, sizeof(got), NULL), sizeof(a));
    assert_memory_equal(got, a, sizeof(a));
    assert_int_equal(mc_store_get(e->h.s, "tail-c", 6, got, sizeof(got), NULL), sizeof(c));
    assert_memory_equal(got, c, sizeof(c));
    assert_int_equal(mc_store_get(e->h.s, "tail-b", 6, got, sizeof(got), NULL),
                     MC_ERR_OBJECT_NOT_FOUND);
    /* every master holds what the leader holds */
    char lsum[512], sum[512];
    long long rewinds = 0;
    for (int i = 0; i < NMASTERS; i++) {
        if (e->h.m[i].proc.pid <= 0 || i == nl)
            continue;
        unsigned long long lk, k;
        wait_same_keys(e, nl, i, 3000, lsum, sum, sizeof(lsum), &lk, &k);
        assert_int_equal(k, lk);
        long long rw = metric(e->h.m[i].http_port, "master_ha_journal_rewinds_total");
        assert_true(rw >= 0);
        rewinds += rw;
    }
    print_message("standbys' journal rewinds: %lld\n", rewinds);
    assert_true(rewinds >= 1);
}

/* A counter of master i's /ha_status ("name":N), or -1. */
static long long ha_counter(env_t *e, int i, const char *name)
{
    char body[4096], pat[64];
    if (http_get(e->h.m[i].http_port, "/ha_status", body, sizeof(body)) != 200)
        return -1;
    snprintf(pat, sizeof(pat), "\"%s\":", name);
    const char *p = strstr(body, pat);
    return p != NULL ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* Until master i says /role is role (bounded): 1 once it does. */
static int wait_role(env_t *e, int i, const char *role)
{
    char body[256], want[32];
    snprintf(want, sizeof(want), "%s\n", role);
    for (int waited = 0; waited < 5000 * TC_SLOW; waited += 50) {
        if (http_get(e->h.m[i].http_port, "/role", body, sizeof(body)) >= 0 &&
            strcmp(body, want) == 0)
            return 1;
        usleep(50000);
    }
    return 0;
}

/* The snapshot key's Redis type and (a list) its length in *len; no
 * snapshot list left behind half built. */
static void snap_type(env_t *e, char *type, size_t cap, long long *len)
{
    redisContext *rc = redisConnect("127.0.0.1", (int)e->redis.port);
    assert_non_null(rc);
    assert_int_equal(rc->err, 0);
    redisReply *r = redisCommand(rc, "TYPE mc/%s/ha/snap", CLUSTER);
    assert_non_null(r);
    snprintf(type, cap, "%s", r->str != NULL ? r->str : "");
    freeReplyObject(r);
    r = redisCommand(rc, "LLEN mc/%s/ha/snap", CLUSTER);
    assert_non_null(r);
    *len = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    r = redisCommand(rc, "KEYS mc/%s/ha/snap:*", CLUSTER); /* the lists being built */
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 0); /* renamed in place: none left behind */
    freeReplyObject(r);
    redisFree(rc);
}

/* A state larger than ha.snapshot_chunk is snapshotted as a list of chunks
 * of whole records (one Redis string holds at most 512 MB: a larger state
 * was never snapshotted before, and the journal grew without bound); a
 * master that starts loads the list, chunk by chunk, and holds exactly the
 * leader's objects. Here chunks of 4 KiB and a state of 300 objects. */
static void a_snapshot_larger_than_a_chunk_goes_in_chunks_and_loads(void **state)
{
    env_t *e = *state;
    int64_t v = 0;
    int l = ha_wait_leader(&e->h, -1, 3000, &v);
    assert_true(l >= 0);
    int a = (l + 1) % NMASTERS, b = (l + 2) % NMASTERS;
    tc_master_stop(&e->h.m[a], SIGTERM);
    tc_master_stop(&e->h.m[b], SIGTERM); /* a alone snapshots */
    master_extra = "ha.snapshot_chunk=4KiB";
    int started = start_master(e, a);
    master_extra = NULL;
    assert_int_equal(started, 0);
    assert_true(wait_role(e, a, "standby"));
    long long taken0 = ha_counter(e, a, "snapshots_taken");
    assert_true(taken0 >= 0);
    /* a state of 300 objects, and a journal since of well over twice it */
    assert_true(mc_store_remove_all(e->h.s, 1) >= 0);
    uint8_t val[300];
    char key[32];
    for (int i = 0; i < 900; i++) {
        int keep = i < 300;
        int kl = snprintf(key, sizeof(key), keep ? "snap-keep-%d" : "snap-churn-%d", i);
        tc_fill(val, sizeof(val), 5000 + (uint64_t)i);
        assert_int_equal(ha_put_retry(e->h.s, key, val, sizeof(val), 20, 100000), MC_OK);
        if (!keep)
            assert_int_equal(mc_store_remove(e->h.s, key, (size_t)kl, 1), MC_OK);
    }
    long long taken = taken0;
    for (int waited = 0; waited < 10000 * TC_SLOW && taken <= taken0; waited += 100) {
        usleep(100000);
        taken = ha_counter(e, a, "snapshots_taken");
    }
    assert_true(taken > taken0);
    char type[32];
    long long chunks = 0;
    snap_type(e, type, sizeof(type), &chunks);
    print_message("snapshot: %s of %lld chunks, %lld bytes\n", type, chunks,
                  metric(e->h.m[a].http_port, "master_ha_snapshot_bytes"));
    assert_string_equal(type, "list");
    assert_true(chunks >= 3);
    /* b starts on the trimmed journal: the chunks, then the tail */
    assert_int_equal(start_master(e, b), 0);
    assert_true(wait_role(e, b, "standby"));
    char lsum[512], sum[512];
    unsigned long long lk, k;
    wait_same_keys(e, l, b, 5000 * TC_SLOW, lsum, sum, sizeof(lsum), &lk, &k);
    print_message("leader: %sstarted standby: %s", lsum, sum);
    assert_int_equal(lk, 300);
    assert_int_equal(k, lk);
    assert_true(ha_counter(e, b, "snapshots_loaded") >= 1);
    /* and it leads with them: every kept object readable, byte for byte */
    tc_master_stop(&e->h.m[l], SIGKILL);
    uint8_t got[300];
    for (int i = 0; i < 300; i += 37) {
        int kl = snprintf(key, sizeof(key), "snap-keep-%d", i);
        tc_fill(val, sizeof(val), 5000 + (uint64_t)i);
        int64_t n = -1;
        for (int t = 0; t < 100 && n < 0; t++) {
            n = mc_store_get(e->h.s, key, (size_t)kl, got, sizeof(got), NULL);
            if (n < 0)
                usleep(100000);
        }
        assert_int_equal(n, sizeof(val));
        assert_memory_equal(got, val, sizeof(val));
    }
    assert_int_equal(start_master(e, l), 0);
}

/* Garbage in the journal (a broken writer, a hand edit): standbys stop
 * following with a clear log and role `failed` (they never lead with a state
 * they could not rebuild), nothing crashes, and the leader keeps serving.
 * Also a lease key holding something else than "ADDR VIEW NONCE". Last test:
 * it leaves the standbys failed. */
static void garbage_in_the_journal_stops_the_standbys_without_a_crash(void **state)
{
    env_t *e = *state;
    int64_t v0 = 0;
    int l = ha_wait_leader(&e->h, -1, 3000, &v0);
    assert_true(l >= 0);
    redisContext *c = redisConnect("127.0.0.1", (int)e->redis.port);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "XADD mc/%s/ha/journal * r %b s 999999", CLUSTER,
                                 "\x93\x05\x07\xc3", (size_t)4); /* DROP with a numeric key */
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    freeReplyObject(r);
    redisFree(c);
    char body[4096];
    for (int i = 0; i < NMASTERS; i++) {
        if (i == l || e->h.m[i].proc.pid <= 0)
            continue;
        int failed = 0;
        for (int waited = 0; waited < 3000 && !failed; waited += 50) {
            if (http_get(e->h.m[i].http_port, "/role", body, sizeof(body)) == 503 &&
                strcmp(body, "failed\n") == 0)
                failed = 1;
            else
                usleep(50000);
        }
        assert_true(failed);
        assert_int_equal(kill(e->h.m[i].proc.pid, 0), 0); /* alive */
    }
    /* the leader does not read the journal: it goes on */
    uint8_t v[512], got[512];
    tc_fill(v, sizeof(v), 31337);
    assert_int_equal(mc_store_put(e->h.s, "after-garbage", 13, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(mc_store_get(e->h.s, "after-garbage", 13, got, sizeof(got), NULL), 512);
    assert_int_equal(http_get(e->h.m[l].http_port, "/role", body, sizeof(body)), 200);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_master_leads_and_the_others_say_where_it_is),
        cmocka_unit_test(killing_the_leader_under_load_loses_no_acknowledged_put),
        cmocka_unit_test(the_embedded_metadata_service_follows_the_leader),
        cmocka_unit_test(a_frozen_leader_is_deposed_and_its_late_writes_are_refused),
        cmocka_unit_test(a_leader_whose_lease_was_taken_cannot_append),
        cmocka_unit_test(an_append_retried_after_a_redis_stall_is_stored_once),
        cmocka_unit_test(a_journal_that_lost_its_tail_makes_every_master_rebuild_from_it),
        cmocka_unit_test(a_snapshot_larger_than_a_chunk_goes_in_chunks_and_loads),
        cmocka_unit_test(garbage_in_the_journal_stops_the_standbys_without_a_crash),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
