/*
 * The rdma transport between processes, on the EMULATED verbs provider:
 * this test's engine against te_target processes ($TEST_BIN_DIR/te_target
 * --rdma N) on 127.0.0.1 (p2p metadata). Data moves through the emulated
 * NICs' unix sockets, checked against MR keys, ranges and rights by the
 * target's provider threads.
 *
 * Covered: byte-exact writes and reads of many sizes (1 B .. 8 MiB,
 * unaligned) with 2 and 4 NICs on both sides; striping that uses every
 * preferred NIC (per-NIC counters); a NIC going down in the middle of a
 * transfer (its slices retried on another NIC, the transfer completes);
 * an endpoint cap of 2 with 4 peers (SIEVE evictions, endpoints made again
 * on demand); error completions failing the task with the cause after the
 * retry budget, and the path working again afterwards. The targets check
 * at exit that no guarded byte changed.
 *
 * Independent of the rdma transport's environment (MC_RDMA_EMULATED and
 * the other variables of transport/README.md are cleared at start, before
 * the targets inherit it: they would override the NIC counts set here).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>

#include "test/rdma_env.h"
#include "mooncake/transfer.h"
#include "cluster.h"
#include "te_util.h"
#include "transport/rdma/verbs.h"
#include "transport/te.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MIB (1024u * 1024u)
#define LOCAL_SIZE (16u * MIB + 8192u)
#define TARGET_SIZE (16u * MIB)
#define WAIT_US 20000000u

/* te_target on emulated NICs (--rdma N), TARGET_SIZE bytes. */
static void target_start(target_t *t, unsigned nics, const char *matrix, unsigned seed)
{
    char nb[16], sb[32];
    snprintf(nb, sizeof(nb), "%u", nics);
    snprintf(sb, sizeof(sb), "%u", TARGET_SIZE);
    const char *args[] = {"--rdma", nb, "--size", sb, matrix ? "--matrix" : NULL, matrix, NULL};
    tt_start(t, seed, args);
    assert_true(t->addr != 0 && t->size == TARGET_SIZE);
}

typedef struct env {
    mc_te_t *te;
    uint8_t *src, *dst;
} env_t;

static void env_make(env_t *e, unsigned nics, unsigned max_eps)
{
    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.reactors = 2;
    o.timeout_us = 3000000;
    o.rdma_emulated = nics;
    o.rdma_max_eps = max_eps;
    assert_int_equal(mc_te_create(&o, &e->te), MC_OK);
    assert_int_equal(mc_te_install_transport(e->te, "rdma"), MC_OK);
    e->src = mc_malloc(LOCAL_SIZE);
    e->dst = mc_malloc(LOCAL_SIZE);
    assert_non_null(e->src);
    assert_non_null(e->dst);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < LOCAL_SIZE; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        e->src[i] = (uint8_t)x;
    }
    mc_te_buffer_t b[2] = {{e->src, LOCAL_SIZE}, {e->dst, LOCAL_SIZE}};
    assert_int_equal(mc_te_register_batch(e->te, b, 2, "cpu:0", 0), MC_OK);
}

static void env_free(env_t *e)
{
    mc_te_destroy(e->te);
    mc_free(e->src);
    mc_free(e->dst);
    rv_emu_opts_t o = {.ndevices = 2, .mtu = 4096};
    rv_emu_configure(&o); /* no delay, no bandwidth cap for the next test */
}

static mc_status_t run(env_t *e, int op, uint8_t *local, mc_te_segment_t seg, uint64_t remote,
                       uint64_t len)
{
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(e->te, 1, &b), MC_OK);
    mc_te_request_t r = {
        .opcode = op, .local = local, .segment = seg, .remote = remote, .length = len};
    assert_int_equal(mc_te_submit(b, &r, 1), MC_OK);
    mc_status_t st = mc_te_batch_wait(b, WAIT_US);
    if (st == MC_ERR_TIMEOUT)
        fail_msg("transfer of %llu bytes did not finish in %u us", (unsigned long long)len,
                 WAIT_US);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    return st;
}

static void sizes_round_trip(unsigned nics)
{
    env_t e;
    target_t t;
    env_make(&e, nics, 0);
    target_start(&t, nics, NULL, 5);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(e.te, t.name, &seg), MC_OK);
    /* the peer's fresh contents read first: its pattern, byte for byte */
    assert_int_equal(run(&e, MC_TE_READ, e.dst + 1, seg, t.addr + 3, 3 * MIB + 5), MC_OK);
    for (size_t i = 0; i < 3 * MIB + 5; i++)
        if (e.dst[1 + i] != te_target_pattern(5, 3 + i))
            fail_msg("read byte %zu differs from the target's pattern", i);
    static const uint64_t sizes[] = {1,     7,     4096,   65535, 65536,        65537,
                                     81920, 81921, 300001, MIB,   3 * MIB + 11, 8 * MIB};
    uint64_t off = 0;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint64_t len = sizes[k], loff = (k * 4099) % 8192 + 1, roff = (k * 131) % 4096;
        if (roff + len > t.size)
            roff = 0;
        memset(e.dst + loff, 0, len);
        assert_int_equal(run(&e, MC_TE_WRITE, e.src + off % MIB + loff, seg, t.addr + roff, len),
                         MC_OK);
        assert_int_equal(run(&e, MC_TE_READ, e.dst + loff, seg, t.addr + roff, len), MC_OK);
        if (memcmp(e.src + off % MIB + loff, e.dst + loff, len) != 0)
            fail_msg("%llu bytes did not come back identical", (unsigned long long)len);
        off += len;
    }
    /* striping: every preferred NIC (all of them here) carried slices */
    te_rdma_nic_stats_t st[8];
    assert_int_equal(te_rdma_stats(e.te, st, 8), nics);
    for (unsigned i = 0; i < nics; i++) {
        if (st[i].slices < 10)
            fail_msg("NIC %s carried only %llu slices", st[i].name,
                     (unsigned long long)st[i].slices);
        assert_int_equal(st[i].retries, 0);
    }
    tt_stop_intact(&t);
    env_free(&e);
}

static void many_sizes_are_byte_exact_and_striped_over_2_nics(void **state)
{
    (void)state;
    sizes_round_trip(2);
}

static void many_sizes_are_byte_exact_and_striped_over_4_nics(void **state)
{
    (void)state;
    sizes_round_trip(4);
}

typedef struct downer {
    uint64_t after_us;
    const char *dev;
} downer_t;

static void *take_down(void *arg)
{
    downer_t *d = arg;
    usleep((useconds_t)d->after_us);
    rv_emu_set_down(d->dev, 1);
    return NULL;
}

static void a_nic_going_down_mid_transfer_is_routed_around(void **state)
{
    (void)state;
    /* 2 local NICs at 100 MB/s each: 16 MiB take ~80 ms; emu_0 dies at 20 ms */
    rv_emu_opts_t o = {.ndevices = 2, .mtu = 4096, .bandwidth = 100000000};
    rv_emu_configure(&o);
    env_t e;
    target_t t;
    env_make(&e, 2, 0);
    target_start(&t, 2, NULL, 6);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(e.te, t.name, &seg), MC_OK);
    /* connect first, so the failure hits established endpoints */
    assert_int_equal(run(&e, MC_TE_WRITE, e.src, seg, t.addr, 256 * 1024), MC_OK);
    pthread_t th;
    downer_t d = {20000, "emu_0"};
    assert_int_equal(pthread_create(&th, NULL, take_down, &d), 0);
    uint64_t len = 16 * MIB;
    mc_status_t st = run(&e, MC_TE_WRITE, e.src + 5, seg, t.addr, len);
    pthread_join(th, NULL);
    assert_int_equal(st, MC_OK);
    assert_int_equal(run(&e, MC_TE_READ, e.dst, seg, t.addr, len), MC_OK);
    assert_memory_equal(e.src + 5, e.dst, len);
    te_rdma_nic_stats_t ns[2];
    te_rdma_stats(e.te, ns, 2);
    print_message("emu_0: %llu slices %llu retries %llu errors; emu_1: %llu slices\n",
                  (unsigned long long)ns[0].slices, (unsigned long long)ns[0].retries,
                  (unsigned long long)ns[0].errors, (unsigned long long)ns[1].slices);
    assert_true(ns[0].errors > 0);                  /* emu_0 failed WRs ... */
    assert_true(ns[0].retries + ns[1].retries > 0); /* ... that were retried */
    assert_true(ns[1].slices > ns[0].slices);       /* and emu_1 carried the rest */
    rv_emu_set_down("emu_0", 0);
    tt_stop_intact(&t);
    env_free(&e);
}

static void an_endpoint_cap_of_2_serves_4_peers_through_sieve_evictions(void **state)
{
    (void)state;
    env_t e;
    target_t t[4];
    env_make(&e, 1, 2);
    mc_te_segment_t seg[4];
    for (unsigned i = 0; i < 4; i++) {
        target_start(&t[i], 1, NULL, 10 + i);
        assert_int_equal(mc_te_open_segment(e.te, t[i].name, &seg[i]), MC_OK);
    }
    for (unsigned round = 0; round < 3; round++) {
        for (unsigned i = 0; i < 4; i++) {
            uint64_t len = 200000 + round * 1000 + i;
            uint8_t *src = e.src + i * 1000 + round;
            assert_int_equal(run(&e, MC_TE_WRITE, src, seg[i], t[i].addr + 100, len), MC_OK);
            memset(e.dst, 0, len);
            assert_int_equal(run(&e, MC_TE_READ, e.dst, seg[i], t[i].addr + 100, len), MC_OK);
            assert_memory_equal(src, e.dst, len);
            te_rdma_nic_stats_t ns;
            te_rdma_stats(e.te, &ns, 1);
            assert_true(ns.eps <= 2); /* never over the cap (all were idle) */
        }
    }
    te_rdma_nic_stats_t ns;
    te_rdma_stats(e.te, &ns, 1);
    print_message("endpoints made %llu, evicted %llu\n", (unsigned long long)ns.eps_created,
                  (unsigned long long)ns.evictions);
    assert_true(ns.evictions >= 10); /* every peer change after the first two */
    assert_int_equal(ns.eps_created, ns.evictions + ns.eps);
    assert_int_equal(ns.retries, 0);
    for (unsigned i = 0; i < 4; i++)
        tt_stop_intact(&t[i]);
    env_free(&e);
}

static void error_completions_fail_the_task_with_the_cause_after_the_retry_budget(void **state)
{
    (void)state;
    env_t e;
    target_t t;
    env_make(&e, 2, 0);
    target_start(&t, 2, NULL, 7);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_open_segment(e.te, t.name, &seg), MC_OK);
    assert_int_equal(run(&e, MC_TE_WRITE, e.src, seg, t.addr, 100000), MC_OK);
    rv_emu_fail_next("emu_0", 100000, RV_WC_REM_ACCESS_ERR);
    rv_emu_fail_next("emu_1", 100000, RV_WC_REM_ACCESS_ERR);
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(e.te, 1, &b), MC_OK);
    mc_te_request_t r = {
        .opcode = MC_TE_WRITE, .local = e.src, .segment = seg, .remote = t.addr, .length = 65536};
    assert_int_equal(mc_te_submit(b, &r, 1), MC_OK);
    assert_int_equal(mc_te_batch_wait(b, WAIT_US), MC_ERR_ADDRESS_NOT_REGISTERED);
    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(b, 0, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_FAILED);
    assert_int_equal(ts.error, MC_ERR_ADDRESS_NOT_REGISTERED); /* REM_ACCESS_ERR */
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    te_rdma_nic_stats_t ns[2];
    te_rdma_stats(e.te, ns, 2);
    /* one slice: its first attempt and 9 retries (the default budget), all
     * failed: on error completions, or skipped while a failed path backs off */
    assert_int_equal(ns[0].retries + ns[1].retries, 9);
    assert_true(ns[0].errors + ns[1].errors >= 1);
    /* the faults end: after the back-off the paths are made again and work */
    rv_emu_fail_next("emu_0", 0, RV_WC_SUCCESS);
    rv_emu_fail_next("emu_1", 0, RV_WC_SUCCESS);
    mc_status_t st = MC_ERR_ENDPOINT;
    for (int i = 0; i < 100 && st != MC_OK; i++) {
        st = run(&e, MC_TE_WRITE, e.src + 1, seg, t.addr, 100000);
        if (st != MC_OK)
            usleep(20000);
    }
    assert_int_equal(st, MC_OK);
    assert_int_equal(run(&e, MC_TE_READ, e.dst, seg, t.addr, 100000), MC_OK);
    assert_memory_equal(e.src + 1, e.dst, 100000);
    tt_stop_intact(&t);
    env_free(&e);
}

int main(void)
{
    test_rdma_env_clear();
    mc_log_set_spec(getenv("TEST_LOG") ? getenv("TEST_LOG") : "error", NULL, 0);
    signal(SIGPIPE, SIG_IGN);
    rv_emu_opts_t o = {.ndevices = 2, .mtu = 4096};
    rv_emu_configure(&o);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(many_sizes_are_byte_exact_and_striped_over_2_nics),
        cmocka_unit_test(many_sizes_are_byte_exact_and_striped_over_4_nics),
        cmocka_unit_test(a_nic_going_down_mid_transfer_is_routed_around),
        cmocka_unit_test(an_endpoint_cap_of_2_serves_4_peers_through_sieve_evictions),
        cmocka_unit_test(error_completions_fail_the_task_with_the_cause_after_the_retry_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
