/*
 * The store client over shared memory: a real mooncake-master and two real
 * mooncake-store-server processes on this host (store.shm = on, the
 * default: their segments are shared memory), and this process as a pure
 * client with shm on. Every value crosses the shm transport (its byte
 * counter says so) and the cases every transport must pass (store_cases.h)
 * pass; a client with shm off reaches the same nodes over tcp and reads
 * what the shm client wrote.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mooncake/store.h"
#include "store/client_int.h"
#include "store_cases.h"
#include "transport/te.h"
#include "util/log.h"
#include "util/mem.h"

#define MIB (1ull << 20)
#define NODE_SEGMENT "64MiB"
#define STAGING (4 * MIB)
#define SLOW TC_SLOW
#define RPC_TIMEOUT_US (2000000 * SLOW)

typedef store_env_t env_t;

static uint64_t shm_bytes(env_t *e)
{
    return te_shm_bytes(e->s->te);
}

static int setup(void **state)
{
    static env_t e = {.protocol = "shm",
                      .staging = STAGING,
                      .big = 4 * STAGING + 3,
                      .batch_big = 3 * MIB,
                      .moved = shm_bytes};
    signal(SIGPIPE, SIG_IGN);
    const char *const ms[] = {"master.client_ttl=3s", "master.lease_ttl=1s", NULL};
    const char *const ns[] = {"store.global_segment_size=" NODE_SEGMENT, NULL};
    assert_int_equal(tc_cluster_start(&e.c, 2, ms, ns), 0);
    char master[64];
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = tc_master_addr(&e.c.master, master, sizeof(master));
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
    return 0;
}

static void a_client_with_shm_off_reads_over_tcp_what_the_shm_client_wrote(void **state)
{
    env_t *e = *state;
    char master[64];
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = tc_master_addr(&e->c.master, master, sizeof(master));
    c.shm = "off";
    c.local_buffer_size = STAGING;
    c.reactors = 1;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    mc_store_t *t = NULL;
    assert_int_equal(mc_store_open(&c, &t), MC_OK);
    size_t len = 3 * MIB + 5;
    uint8_t *v = malloc(len), *back = malloc(len);
    assert_non_null(v);
    assert_non_null(back);
    sc_fill(v, len, 99);
    uint64_t before = shm_bytes(e);
    assert_int_equal(mc_store_put(e->s, "shm-then-tcp", 12, v, len, NULL), MC_OK);
    sc_check_moved(e, before, len);
    assert_int_equal(mc_store_get(t, "shm-then-tcp", 12, back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    assert_int_equal(te_shm_bytes(t->te), 0); /* it moved nothing over shm */
    /* and a bad shm value is refused, naming it */
    c.shm = "sometimes";
    mc_store_t *bad = NULL;
    assert_int_equal(mc_store_open(&c, &bad), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_store_remove(e->s, "shm-then-tcp", 12, 1), MC_OK);
    mc_store_close(t);
    free(v);
    free(back);
}

int main(void)
{
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        /* store_cases.h, over shared memory */
        cmocka_unit_test(values_of_many_sizes_round_trip_byte_for_byte),
        cmocka_unit_test(registered_buffers_and_parts_round_trip_without_staging),
        cmocka_unit_test(batch_calls_report_each_key),
        cmocka_unit_test(two_replicas_land_on_the_two_nodes),
        /* shm only */
        cmocka_unit_test(a_client_with_shm_off_reads_over_tcp_what_the_shm_client_wrote),
        /* store_cases.h: kills node 0 */
        cmocka_unit_test(a_killed_node_leaves_two_replica_objects_readable_and_puts_go_on),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
