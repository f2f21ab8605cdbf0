/*
 * The store end to end over the rdma transport on the EMULATED verbs
 * provider: a real mooncake-master, two real mooncake-store-server nodes
 * with store.protocol=rdma on 2 emulated NICs each (MC_RDMA_EMULATED=2 in
 * their environment), and this process as a pure client with protocol rdma
 * (2 emulated NICs, a 4 MiB staging buffer: with rdma installed every
 * unregistered caller buffer goes through it, and values larger than it
 * travel in pieces).
 *
 * Covered: the cases every transport passes (store_cases.h, also run over
 * tcp by store_client_test), here with the check that every value moved
 * over the client's NICs (the per-NIC byte counters grow by at least the
 * bytes of the values, both ways): values of 1 B .. 16 MiB and more round
 * trip byte for byte; put_from/get_into with registered buffers (no
 * staging: zero copy); batch put / batch get (one value bad, values that do
 * not fit the staging buffer together); two replicas land on the two rdma
 * nodes; a SIGKILLed node leaves two-replica objects readable (gets fail
 * over to the other node's replica over rdma). Then what only rdma has: the
 * client runs on emulated NICs; a node with protocol tcp (no NICs in its descriptor) is served
 * over tcp by the same rdma client (its counters do not move), and a tcp
 * client reads and writes the rdma nodes over tcp.
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
#include "store_cases.h"
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
#define SLOW TC_SLOW
#define RPC_TIMEOUT_US (2000000 * SLOW)
#define NRDMA 2 /* nodes 0 and 1: rdma; node 2: tcp */
#define NNODES 3

typedef store_env_t env_t;

/* --------------------------------------------------------------- helpers */

/* Start node i (its retries: cluster.h) with protocol proto. */
static int start_node(env_t *e, int i, const char *proto)
{
    char master[64], protocol[64];
    snprintf(protocol, sizeof(protocol), "store.protocol=%s", proto);
    const char *const ns[] = {protocol, "store.global_segment_size=" NODE_SEGMENT, NULL};
    return tc_node_start(&e->c.node[i], tc_master_addr(&e->c.master, master, sizeof(master)), ns);
}

static uint64_t rdma_bytes(env_t *e);

static int setup(void **state)
{
    static env_t e = {.protocol = "rdma",
                      .staging = STAGING,
                      .big = 4 * STAGING + 3,
                      .batch_big = 3 * MIB,
                      .moved = rdma_bytes};
    signal(SIGPIPE, SIG_IGN);
    /* every process of this test (nodes inherit it) gets 2 emulated NICs */
    setenv("MC_RDMA_EMULATED", "2", 1);
    const char *const ms[] = {"master.client_ttl=3s", "master.lease_ttl=1s", NULL};
    assert_int_equal(tc_master_start(&e.c.master, ms), 0);
    /* the tcp node comes later (a_node_without_rdma_is_served_over_tcp):
     * until then every object lands on an rdma node */
    for (int i = 0; i < NRDMA; i++)
        assert_int_equal(start_node(&e, i, "rdma"), 0);
    e.c.nnodes = NRDMA;
    char master[64];
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = tc_master_addr(&e.c.master, master, sizeof(master));
    c.protocol = "rdma";
    c.shm = "off"; /* the nodes are on this host: shm would come first */
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
    tc_cluster_stop(&e->c, SIGTERM);
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

/* ------------------------------------------------------------------ tests */

static void the_client_runs_rdma_on_emulated_nics(void **state)
{
    env_t *e = *state;
    assert_true(te_needs_local_reg(e->s->te));
    assert_int_equal(rdma_bytes(e), 0);
}

static void a_node_without_rdma_is_served_over_tcp(void **state)
{
    env_t *e = *state;
    static const size_t sizes[] = {1, 65537, 3 * MIB, 6 * MIB + 3};
    char key[64], seg[256];
    assert_int_equal(start_node(e, NRDMA, "tcp"), 0);
    e->c.nnodes = NNODES;
    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        snprintf(key, sizeof(key), "tcp-%zu", sizes[i]);
        uint64_t before = rdma_bytes(e);
        sc_round_trip(e->s, key, sizes[i], 1, e->c.node[2].name);
        sc_replica_of(e->s, key, seg, sizeof(seg));
        assert_string_equal(seg, e->c.node[2].name);
        assert_int_equal(rdma_bytes(e), before); /* no byte over the NICs */
    }
    /* one object with a replica on an rdma node and one on the tcp node */
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = 2;
    const char *pref[2] = {e->c.node[0].name, e->c.node[2].name};
    rc.preferred_segments = pref;
    rc.n_preferred = 2;
    uint8_t v[100000], back[100000];
    sc_fill(v, sizeof(v), 3);
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
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = tc_master_addr(&e->c.master, master, sizeof(master));
    c.protocol = "tcp";
    c.shm = "off";
    c.local_buffer_size = STAGING;
    c.reactors = 1;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    mc_store_t *t;
    assert_int_equal(mc_store_open(&c, &t), MC_OK);
    for (int i = 0; i < NRDMA; i++) {
        snprintf(key, sizeof(key), "from-tcp-%d", i);
        sc_round_trip(t, key, 5 * MIB + 1, 1, e->c.node[i].name);
        sc_replica_of(t, key, seg, sizeof(seg));
        assert_string_equal(seg, e->c.node[i].name);
        /* what the tcp client wrote, the rdma client reads over rdma */
        uint8_t *back2 = malloc(5 * MIB + 1);
        uint64_t before = rdma_bytes(e);
        assert_int_equal(mc_store_get(e->s, key, strlen(key), back2, 5 * MIB + 1, NULL),
                         (int64_t)(5 * MIB + 1));
        assert_true(rdma_bytes(e) - before >= 5 * MIB + 1);
        uint8_t *v2 = malloc(5 * MIB + 1);
        sc_fill(v2, 5 * MIB + 1, (5 * MIB + 1) ^ strlen(key));
        assert_memory_equal(back2, v2, 5 * MIB + 1);
        free(v2);
        free(back2);
    }
    assert_int_equal(mc_store_remove_by_regex(t, "^from-tcp-", 1), NRDMA);
    mc_store_close(t);
}

int main(void)
{
    test_rdma_env_clear();
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_client_runs_rdma_on_emulated_nics),
        /* store_cases.h, over rdma */
        cmocka_unit_test(values_of_many_sizes_round_trip_byte_for_byte),
        cmocka_unit_test(registered_buffers_and_parts_round_trip_without_staging),
        cmocka_unit_test(batch_calls_report_each_key),
        cmocka_unit_test(two_replicas_land_on_the_two_nodes),
        /* rdma only */
        cmocka_unit_test(a_node_without_rdma_is_served_over_tcp),
        /* store_cases.h: kills node 0 */
        cmocka_unit_test(a_killed_node_leaves_two_replica_objects_readable_and_puts_go_on),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
