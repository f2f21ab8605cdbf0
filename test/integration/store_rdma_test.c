/*
 * The store end to end over the rdma transport on the EMULATED verbs
 * provider: a real mooncake-master, two real mooncake-store-server nodes
 * with store.protocol=rdma on 2 emulated NICs each (MC_RDMA_EMULATED=2 in
 * their environment), and this process as a pure client with protocol rdma
 * (2 emulated NICs, a 4 MiB staging buffer: with rdma installed every
 * unregistered caller buffer goes through it, and values larger than it
 * travel in pieces).
 *
 * Covered: values of 1 B .. 16 MiB round-trip byte for byte and move over
 * the client's NICs (the per-NIC byte counters grow by at least the bytes
 * of the values, both ways); put_from/get_into with registered buffers (no
 * staging: zero copy); batch put / batch get (one value bad, values that do
 * not fit the staging buffer together); two replicas land on the two rdma
 * nodes; a node with protocol tcp (no NICs in its descriptor) is served
 * over tcp by the same rdma client (its counters do not move), and a tcp
 * client reads and writes the rdma nodes over tcp; a SIGKILLed
 * node leaves two-replica objects readable (gets fail over to the other
 * node's replica over rdma).
 *
 * The tcp node is started by its test: before it, every object lands on an
 * rdma node, so the byte counters account for every value.
 *
 * One master and the nodes serve every test, in order (the last one kills
 * a node). master.client_ttl is 3 s; leases last 1 s.
 *
 * The rdma transport's environment is cleared at start (transport/README.md:
 * those variables override the options), then MC_RDMA_EMULATED=2 is set.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>

#include "mooncake/store.h"
#include "proc.h"
#include "test/rdma_env.h"
#include "store/client_int.h"
#include "transport/te.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MIB (1ull << 20)
#define NODE_SEGMENT "64MiB"
#define STAGING (4 * MIB)
#define NICS 2
#if defined(__SANITIZE_THREAD__)
#define SLOW 5
#else
#define SLOW 1
#endif
#define RPC_TIMEOUT_US (2000000 * SLOW)
#define START_TIMEOUT_MS (15000 * SLOW)
#define NRDMA 2 /* nodes 0 and 1: rdma; node 2: tcp */
#define NNODES 3

typedef struct env {
    test_proc_t master;
    unsigned rpc_port, http_port;
    test_proc_t node[NNODES];
    char node_name[NNODES][256];
    mc_store_t *s;
} env_t;

/* --------------------------------------------------------------- helpers */

static int start_master(env_t *e)
{
    char bin[256], rpc[64], http[64];
    e->rpc_port = test_free_port();
    do
        e->http_port = test_free_port();
    while (e->http_port == e->rpc_port);
    snprintf(rpc, sizeof(rpc), "server.rpc_port=%u", e->rpc_port);
    snprintf(http, sizeof(http), "server.http_port=%u", e->http_port);
    char *argv[] = {(char *)test_prog("mooncake-master", bin, sizeof(bin)),
                    "--set",
                    "server.bind_address=127.0.0.1",
                    "--set",
                    rpc,
                    "--set",
                    http,
                    "--set",
                    "server.reactors=1",
                    "--set",
                    "server.tick_interval=20ms",
                    "--set",
                    "master.client_ttl=3s",
                    "--set",
                    "master.lease_ttl=1s",
                    "--set",
                    "log.level=error",
                    NULL};
    if (test_proc_start(&e->master, argv) != 0)
        return -1;
    uint64_t deadline = mc_now_ms() + START_TIMEOUT_MS;
    while (mc_now_ms() < deadline) {
        int status;
        if (waitpid(e->master.pid, &status, WNOHANG) == e->master.pid) {
            close(e->master.out_fd);
            e->master.pid = 0;
            return -1;
        }
        if (test_port_open(e->rpc_port))
            return 0;
        usleep(10000);
    }
    test_proc_stop(&e->master, SIGKILL, 1000);
    return -1;
}

/* Start node i with protocol proto; 0 once it printed "ready <name>". */
static int start_node(env_t *e, int i, const char *proto)
{
    char bin[256], master[64], port[64], name[64], protocol[64];
    unsigned p = test_free_port();
    snprintf(master, sizeof(master), "store.master=127.0.0.1:%u", e->rpc_port);
    snprintf(port, sizeof(port), "store.port=%u", p);
    snprintf(name, sizeof(name), "store.local_hostname=127.0.0.1:%u", p);
    snprintf(protocol, sizeof(protocol), "store.protocol=%s", proto);
    char *argv[] = {(char *)test_prog("mooncake-store-server", bin, sizeof(bin)),
                    "--set",
                    master,
                    "--set",
                    port,
                    "--set",
                    name,
                    "--set",
                    protocol,
                    "--set",
                    "store.global_segment_size=" NODE_SEGMENT,
                    "--set",
                    "store.reactors=1",
                    "--set",
                    "store.rpc_timeout=2s",
                    "--set",
                    "log.level=error",
                    NULL};
    if (test_proc_start(&e->node[i], argv) != 0)
        return -1;
    char line[256];
    if (test_proc_readline(&e->node[i], line, sizeof(line), START_TIMEOUT_MS) != 0 ||
        strncmp(line, "ready ", 6) != 0) {
        test_proc_stop(&e->node[i], SIGKILL, 1000);
        return -1;
    }
    snprintf(e->node_name[i], sizeof(e->node_name[i]), "%s", line + 6);
    return 0;
}

static int start_node_retry(env_t *e, int i, const char *proto)
{
    int ok = -1;
    for (int attempt = 0; attempt < 3 && ok != 0; attempt++)
        ok = start_node(e, i, proto);
    return ok;
}

static int setup(void **state)
{
    static env_t e;
    signal(SIGPIPE, SIG_IGN);
    /* every process of this test (nodes inherit it) gets 2 emulated NICs */
    setenv("MC_RDMA_EMULATED", "2", 1);
    int ok = -1;
    for (int attempt = 0; attempt < 5 && ok != 0; attempt++)
        ok = start_master(&e);
    assert_int_equal(ok, 0);
    /* the tcp node comes later (a_node_without_rdma_is_served_over_tcp):
     * until then every object lands on an rdma node */
    for (int i = 0; i < NRDMA; i++)
        assert_int_equal(start_node_retry(&e, i, "rdma"), 0);
    char master[64];
    snprintf(master, sizeof(master), "127.0.0.1:%u", e.rpc_port);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.protocol = "rdma";
    c.local_buffer_size = STAGING;
    c.reactors = 2;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    c.transfer_timeout_us = 5000000;
    assert_int_equal(mc_store_open(&c, &e.s), MC_OK);
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    mc_store_close(e->s);
    for (int i = 0; i < NNODES; i++)
        if (e->node[i].pid > 0)
            test_proc_stop(&e->node[i], SIGTERM, 5000);
    if (e->master.pid > 0)
        test_proc_stop(&e->master, SIGTERM, 5000);
    unsetenv("MC_RDMA_EMULATED");
    return 0;
}

/* Bytes the client's NICs moved so far (both directions, all NICs). */
static uint64_t rdma_bytes(env_t *e)
{
    te_rdma_nic_stats_t ns[NICS];
    assert_int_equal(te_rdma_stats(e->s->te, ns, NICS), NICS);
    uint64_t b = 0;
    for (int i = 0; i < NICS; i++)
        b += ns[i].bytes;
    return b;
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

/* Put (replicas on segment `where` when not NULL) then get back, byte for
 * byte; nothing is written past the object. */
static void round_trip(mc_store_t *s, const char *key, size_t len, uint32_t replicas,
                       const char *where)
{
    uint8_t *v = malloc(len), *back = malloc(len + 16);
    assert_non_null(v);
    assert_non_null(back);
    fill(v, len, len ^ strlen(key));
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = replicas;
    const char *pref[1] = {where};
    if (where != NULL) {
        rc.preferred_segments = pref;
        rc.n_preferred = 1;
    }
    assert_int_equal(mc_store_put(s, key, strlen(key), v, len, &rc), MC_OK);
    memset(back, 0xee, len + 16);
    assert_int_equal(mc_store_get(s, key, strlen(key), back, len + 16, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    assert_int_equal(back[len], 0xee);
    free(v);
    free(back);
}

/* The segment holding key's only replica. */
static void replica_of(mc_store_t *s, const char *key, char *seg, size_t room)
{
    mc_store_replica_t r[2];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(s, key, strlen(key), r, 2, &n), MC_OK);
    assert_int_equal(n, 1);
    snprintf(seg, room, "%s", r[0].segment);
}

/* ------------------------------------------------------------------ tests */

static void the_client_runs_rdma_on_emulated_nics(void **state)
{
    env_t *e = *state;
    assert_true(te_needs_local_reg(e->s->te));
    assert_int_equal(rdma_bytes(e), 0);
}

static void values_of_many_sizes_round_trip_over_rdma(void **state)
{
    env_t *e = *state;
    static const size_t sizes[] = {1,       2,           7,           8,       9,
                                   100,     4095,        4096,        4097,    65535,
                                   65536,   65537,       81920,       MIB + 3, 4 * MIB - 1,
                                   4 * MIB, 4 * MIB + 1, 9 * MIB + 7, 16 * MIB};
    char key[64];
    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        /* alternate the nodes so both rdma peers serve */
        const char *where = e->node_name[i % NRDMA];
        snprintf(key, sizeof(key), "size-%zu", sizes[i]);
        uint64_t before = rdma_bytes(e);
        round_trip(e->s, key, sizes[i], 1, where);
        /* written and read back over the NICs */
        assert_true(rdma_bytes(e) - before >= 2 * sizes[i]);
        char seg[256];
        replica_of(e->s, key, seg, sizeof(seg));
        assert_string_equal(seg, where);
        assert_int_equal(mc_store_get_size(e->s, key, strlen(key)), (int64_t)sizes[i]);
    }
    assert_int_equal(mc_store_remove_by_regex(e->s, "^size-", 1), (int64_t)MC_ARRAY_SIZE(sizes));
}

static void registered_buffers_travel_without_staging(void **state)
{
    env_t *e = *state;
    size_t len = 9 * MIB + 5; /* over twice the staging buffer: it could not stage at once */
    uint8_t *reg = aligned_alloc(4096, 20 * MIB);
    assert_non_null(reg);
    assert_int_equal(mc_store_register_buffer(e->s, reg, 20 * MIB), MC_OK);
    fill(reg, len, 42);
    uint64_t before = rdma_bytes(e);
    assert_int_equal(mc_store_put_from(e->s, "zc", 2, reg, len, NULL), MC_OK);
    uint8_t *dst = reg + 10 * MIB;
    memset(dst, 0, len);
    assert_int_equal(mc_store_get_into(e->s, "zc", 2, dst, 10 * MIB), (int64_t)len);
    assert_memory_equal(dst, reg, len);
    assert_true(rdma_bytes(e) - before >= 2 * len);
    /* the zero-copy forms insist on registered memory */
    uint8_t plain[64];
    assert_int_equal(mc_store_put_from(e->s, "zc2", 3, plain, sizeof(plain), NULL),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_get_into(e->s, "zc", 2, plain, sizeof(plain)), MC_ERR_INVALID_PARAMS);
    /* a plain get into registered memory works in place too */
    memset(dst, 0, len);
    assert_int_equal(mc_store_get(e->s, "zc", 2, dst, len, NULL), (int64_t)len);
    assert_memory_equal(dst, reg, len);
    assert_int_equal(mc_store_unregister_buffer(e->s, reg), MC_OK);
    /* unregistered now: the same memory goes through the staging buffer */
    memset(dst, 0, len);
    assert_int_equal(mc_store_get(e->s, "zc", 2, dst, len, NULL), (int64_t)len);
    assert_memory_equal(dst, reg, len);
    assert_int_equal(mc_store_remove(e->s, "zc", 2, 1), MC_OK);
    free(reg);
}

static void batch_put_and_batch_get_report_each_key(void **state)
{
    env_t *e = *state;
    enum { N = 6 };
    char kbuf[N][16];
    mc_slice_t keys[N], vals[N], bufs[N];
    uint8_t *data[N], *back[N];
    for (int i = 0; i < N; i++) {
        snprintf(kbuf[i], sizeof(kbuf[i]), "b%d", i);
        keys[i] = (mc_slice_t){kbuf[i], strlen(kbuf[i])};
        size_t len = (size_t)(i + 1) * 100003;
        data[i] = malloc(len);
        back[i] = malloc(len);
        fill(data[i], len, (uint64_t)i);
        vals[i] = (mc_slice_t){data[i], len};
        bufs[i] = (mc_slice_t){back[i], len};
    }
    keys[3] = (mc_slice_t){"", 0}; /* one bad key */
    mc_status_t st[N];
    uint64_t before = rdma_bytes(e);
    assert_int_equal(mc_store_batch_put(e->s, keys, vals, N, NULL, st), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], i == 3 ? MC_ERR_INVALID_KEY : MC_OK);
    int64_t res[N];
    assert_int_equal(mc_store_batch_get(e->s, keys, bufs, N, res), MC_OK);
    uint64_t total = 0;
    for (int i = 0; i < N; i++) {
        if (i == 3) {
            assert_int_equal(res[i], MC_ERR_INVALID_KEY);
            continue;
        }
        assert_int_equal(res[i], (int64_t)vals[i].len);
        assert_memory_equal(back[i], data[i], vals[i].len);
        total += vals[i].len;
    }
    assert_true(rdma_bytes(e) - before >= 2 * total);
    assert_int_equal(mc_store_batch_remove(e->s, keys, N, 1, st), MC_OK);
    for (int i = 0; i < N; i++) {
        free(data[i]);
        free(back[i]);
    }

    /* three values of 3 MiB: they do not fit the staging buffer together */
    mc_slice_t bk[3], bv[3], bo[3];
    for (int i = 0; i < 3; i++) {
        snprintf(kbuf[i], sizeof(kbuf[i]), "big%d", i);
        bk[i] = (mc_slice_t){kbuf[i], strlen(kbuf[i])};
        bv[i] = (mc_slice_t){malloc(3 * MIB), 3 * MIB};
        bo[i] = (mc_slice_t){malloc(3 * MIB), 3 * MIB};
        fill(bv[i].ptr, 3 * MIB, (uint64_t)i + 99);
    }
    assert_int_equal(mc_store_batch_put(e->s, bk, bv, 3, NULL, st), MC_OK);
    assert_int_equal(mc_store_batch_get(e->s, bk, bo, 3, res), MC_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(st[i], MC_OK);
        assert_int_equal(res[i], (int64_t)(3 * MIB));
        assert_memory_equal(bo[i].ptr, bv[i].ptr, 3 * MIB);
        free(bv[i].ptr);
        free(bo[i].ptr);
    }
    assert_int_equal(mc_store_remove_by_regex(e->s, "^big", 1), 3);
}

static void two_replicas_land_on_the_two_rdma_nodes(void **state)
{
    env_t *e = *state;
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = 2;
    const char *pref[2] = {e->node_name[0], e->node_name[1]};
    rc.preferred_segments = pref;
    rc.n_preferred = 2;
    size_t len = 5 * MIB + 1;
    uint8_t *v = malloc(len), *back = malloc(len);
    fill(v, len, 5);
    uint64_t before = rdma_bytes(e);
    assert_int_equal(mc_store_put(e->s, "two", 3, v, len, &rc), MC_OK);
    assert_true(rdma_bytes(e) - before >= 2 * len); /* each replica written over rdma */
    mc_store_replica_t r[4];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(e->s, "two", 3, r, 4, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_string_not_equal(r[0].segment, r[1].segment);
    for (uint32_t i = 0; i < n; i++) {
        assert_true(r[i].complete);
        assert_true(strcmp(r[i].segment, e->node_name[0]) == 0 ||
                    strcmp(r[i].segment, e->node_name[1]) == 0);
    }
    assert_int_equal(mc_store_get(e->s, "two", 3, back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    assert_int_equal(mc_store_remove(e->s, "two", 3, 1), MC_OK);
    free(v);
    free(back);
}

static void a_node_without_rdma_is_served_over_tcp(void **state)
{
    env_t *e = *state;
    static const size_t sizes[] = {1, 65537, 3 * MIB, 6 * MIB + 3};
    char key[64], seg[256];
    assert_int_equal(start_node_retry(e, NRDMA, "tcp"), 0);
    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        snprintf(key, sizeof(key), "tcp-%zu", sizes[i]);
        uint64_t before = rdma_bytes(e);
        round_trip(e->s, key, sizes[i], 1, e->node_name[2]);
        replica_of(e->s, key, seg, sizeof(seg));
        assert_string_equal(seg, e->node_name[2]);
        assert_int_equal(rdma_bytes(e), before); /* no byte over the NICs */
    }
    /* one object with a replica on an rdma node and one on the tcp node */
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = 2;
    const char *pref[2] = {e->node_name[0], e->node_name[2]};
    rc.preferred_segments = pref;
    rc.n_preferred = 2;
    uint8_t v[100000], back[100000];
    fill(v, sizeof(v), 3);
    assert_int_equal(mc_store_put(e->s, "mixed", 5, v, sizeof(v), &rc), MC_OK);
    mc_store_replica_t r[2];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(e->s, "mixed", 5, r, 2, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(mc_store_get(e->s, "mixed", 5, back, sizeof(back), NULL), (int64_t)sizeof(v));
    assert_memory_equal(back, v, sizeof(v));
    assert_true(mc_store_remove_by_regex(e->s, "^(tcp-|mixed)", 1) == 5);

    /* and a client without rdma reads and writes the rdma nodes over tcp */
    char master[64];
    snprintf(master, sizeof(master), "127.0.0.1:%u", e->rpc_port);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.protocol = "tcp";
    c.local_buffer_size = STAGING;
    c.reactors = 1;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    mc_store_t *t;
    assert_int_equal(mc_store_open(&c, &t), MC_OK);
    for (int i = 0; i < NRDMA; i++) {
        snprintf(key, sizeof(key), "from-tcp-%d", i);
        round_trip(t, key, 5 * MIB + 1, 1, e->node_name[i]);
        replica_of(t, key, seg, sizeof(seg));
        assert_string_equal(seg, e->node_name[i]);
        /* what the tcp client wrote, the rdma client reads over rdma */
        uint8_t *back2 = malloc(5 * MIB + 1);
        uint64_t before = rdma_bytes(e);
        assert_int_equal(mc_store_get(e->s, key, strlen(key), back2, 5 * MIB + 1, NULL),
                         (int64_t)(5 * MIB + 1));
        assert_true(rdma_bytes(e) - before >= 5 * MIB + 1);
        uint8_t *v2 = malloc(5 * MIB + 1);
        fill(v2, 5 * MIB + 1, (5 * MIB + 1) ^ strlen(key));
        assert_memory_equal(back2, v2, 5 * MIB + 1);
        free(v2);
        free(back2);
    }
    assert_int_equal(mc_store_remove_by_regex(t, "^from-tcp-", 1), NRDMA);
    mc_store_close(t);
}

static void a_killed_node_leaves_two_replica_objects_readable(void **state)
{
    env_t *e = *state;
    size_t len = 2 * MIB + 11;
    uint8_t *v = malloc(len), *back = malloc(len);
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = 2;
    const char *pref[2] = {e->node_name[0], e->node_name[1]};
    rc.preferred_segments = pref;
    rc.n_preferred = 2;
    char key[32];
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "dual-%d", i);
        fill(v, len, (uint64_t)i + 500);
        assert_int_equal(mc_store_put(e->s, key, strlen(key), v, len, &rc), MC_OK);
        mc_store_replica_t r[2];
        uint32_t n = 0;
        assert_int_equal(mc_store_query(e->s, key, strlen(key), r, 2, &n), MC_OK);
        assert_int_equal(n, 2);
    }
    test_proc_stop(&e->node[0], SIGKILL, 2000);
    /* every object has a replica on the dead node: gets fail over to node 1 */
    uint64_t before = rdma_bytes(e);
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "dual-%d", i);
        fill(v, len, (uint64_t)i + 500);
        memset(back, 0, len);
        assert_int_equal(mc_store_get(e->s, key, strlen(key), back, len, NULL), (int64_t)len);
        assert_memory_equal(back, v, len);
    }
    assert_true(rdma_bytes(e) - before >= 6 * len);
    /* and new puts land on the survivors */
    uint8_t small[1000], sback[1000];
    fill(small, sizeof(small), 77);
    uint64_t deadline = mc_now_ms() + 15000 * SLOW;
    mc_status_t st;
    while ((st = mc_store_put(e->s, "after", 5, small, sizeof(small), NULL)) != MC_OK &&
           mc_now_ms() < deadline)
        usleep(100000);
    assert_int_equal(st, MC_OK);
    assert_int_equal(mc_store_get(e->s, "after", 5, sback, sizeof(sback), NULL),
                     (int64_t)sizeof(small));
    assert_memory_equal(sback, small, sizeof(small));
    free(v);
    free(back);
}

int main(void)
{
    test_rdma_env_clear();
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_client_runs_rdma_on_emulated_nics),
        cmocka_unit_test(values_of_many_sizes_round_trip_over_rdma),
        cmocka_unit_test(registered_buffers_travel_without_staging),
        cmocka_unit_test(batch_put_and_batch_get_report_each_key),
        cmocka_unit_test(two_replicas_land_on_the_two_rdma_nodes),
        cmocka_unit_test(a_node_without_rdma_is_served_over_tcp),
        cmocka_unit_test(a_killed_node_leaves_two_replica_objects_readable),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
