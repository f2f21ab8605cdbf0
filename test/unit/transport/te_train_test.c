/*
 * Trains of the TCP transport (transport/tcp.c): runs of small reads of one
 * segment submitted together travel as one TE_READV call, answered with
 * their bytes back to back and scattered into each request's memory.
 *
 * Covered: many small reads arrive byte for byte in a few calls (counted on
 * the target's RPC server), mixed with large reads and writes; a train the
 * target refuses as a whole (one of its ranges was unregistered after the
 * initiator cached the descriptor) is sent again read by read, so only the
 * bad requests fail; malformed TE_READV calls are refused with the right
 * status and the target keeps serving.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "rpc/fields.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "transport/te_int.h"
#include "util/mem.h"

#include "test/unit/transport/te_test_util.h"

static uint64_t requests_served(mc_te_t *te)
{
    mc_rpc_server_stats_t st;
    mc_rpc_server_stats(te->srv, &st);
    return st.requests;
}

static void many_small_reads_travel_in_a_few_calls_byte_for_byte(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 0, 2, 2), *b = engine_new(0, 0, 0, 0);
    const size_t region = 8 * MIB;
    uint8_t *rb = mc_malloc(region), *la = mc_calloc(1, region);
    fill_random(rb, region, 5);
    assert_int_equal(mc_te_register(b, rb, region, NULL, 1), MC_OK);
    assert_int_equal(mc_te_register(a, la, region, NULL, 0), MC_OK);
    fill_random(la + region - 200, 100, 6); /* the write's source: no read lands there */
    mc_te_segment_t seg = open_port(a, mc_te_port(b));

    /* 300 small reads (1 B .. 32 KiB, odd offsets), then a large one and a
     * write in the middle of the run, then 20 more small reads */
    enum { NSMALL = 320 };
    mc_te_request_t reqs[NSMALL + 2];
    size_t n = 0, off = 1, remote = 3;
    for (size_t i = 0; i < NSMALL; i++) {
        size_t len = i % 7 == 0 ? 32 * KIB : 1 + (i * 977) % (8 * KIB);
        if (i == 300) {
            reqs[n++] = req(MC_TE_READ, la + off, seg, rb + remote, 1 * MIB + 3);
            off += 1 * MIB + 5;
            remote += 1 * MIB + 7;
            reqs[n++] = req(MC_TE_WRITE, la + region - 200, seg, rb + region - 4096, 100);
        }
        reqs[n++] = req(MC_TE_READ, la + off, seg, rb + remote, len);
        off += len + 1;
        remote += len + 3;
    }
    uint64_t before = requests_served(b);
    transfer_ok(a, reqs, n);
    uint64_t calls = requests_served(b) - before;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].opcode == MC_TE_READ)
            assert_memory_equal(reqs[i].local, (void *)(uintptr_t)reqs[i].remote, reqs[i].length);
    assert_memory_equal(rb + region - 4096, la + region - 200, 100);
    /* 320 small reads of ~1.9 MiB in trains of at most 1 MiB / 256 reads,
     * the large read in 64 KiB slices (17), the write: far fewer than the
     * 338 calls of one read per call */
    print_message("%zu requests -> %llu calls\n", n, (unsigned long long)calls);
    assert_true(calls >= 1 + 17 + 3);
    assert_true(calls <= 1 + 17 + 8);
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(rb);
    mc_free(la);
}

static void a_train_the_target_refuses_is_sent_again_read_by_read(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 0, 0, 0), *b = engine_new(0, 0, 0, 0);
    uint8_t *r1 = mc_malloc(64 * KIB), *r2 = mc_malloc(64 * KIB), *la = mc_calloc(1, 64 * KIB);
    fill_random(r1, 64 * KIB, 7);
    fill_random(r2, 64 * KIB, 8);
    assert_int_equal(mc_te_register(b, r1, 64 * KIB, NULL, 1), MC_OK);
    assert_int_equal(mc_te_register(b, r2, 64 * KIB, NULL, 1), MC_OK);
    assert_int_equal(mc_te_register(a, la, 64 * KIB, NULL, 0), MC_OK);
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    /* the initiator's copy of the descriptor still lists r2 */
    assert_int_equal(mc_te_unregister(b, r2), MC_OK);

    mc_te_request_t reqs[6];
    for (size_t i = 0; i < 6; i++)
        reqs[i] = req(MC_TE_READ, la + i * 4 * KIB, seg, (i % 2 ? r2 : r1) + i * 100, 1000 + i);
    mc_status_t st;
    mc_te_batch_t *bt = run_batch(a, reqs, 6, &st);
    assert_int_not_equal(st, MC_OK);
    for (size_t i = 0; i < 6; i++) {
        mc_te_status_t ts;
        assert_int_equal(mc_te_task_status(bt, i, &ts), MC_OK);
        if (i % 2) {
            assert_int_equal(ts.state, MC_TE_FAILED);
            assert_int_equal(ts.error, MC_ERR_ADDRESS_NOT_REGISTERED);
        } else {
            assert_int_equal(ts.state, MC_TE_COMPLETED);
            assert_memory_equal(la + i * 4 * KIB, r1 + i * 100, 1000 + i);
        }
    }
    assert_int_equal(mc_te_batch_free(bt), MC_OK);
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(r1);
    mc_free(r2);
    mc_free(la);
}

typedef enum {
    BODY_EMPTY,
    BODY_ODD,
    BODY_TOO_MANY,
    BODY_ZERO_LEN,
    BODY_OUTSIDE,
    BODY_STRING,
    BODY_TOO_BIG,
    BODY_NOT_A_MAP,
    BODY_COUNT
} bad_body_t;

static void bad_body(mc_buf_t *buf, bad_body_t kind, uint64_t region)
{
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, buf);
    if (kind == BODY_NOT_A_MAP) {
        mc_mp_write_array(&w, 0);
        return;
    }
    mc_mp_write_map(&w, kind == BODY_EMPTY ? 0 : 1);
    if (kind == BODY_EMPTY)
        return;
    mc_mp_write_uint(&w, MC_F_RANGES);
    switch (kind) {
    case BODY_ODD:
        mc_mp_write_array(&w, 3);
        for (int i = 0; i < 3; i++)
            mc_mp_write_uint(&w, region);
        break;
    case BODY_TOO_MANY:
        mc_mp_write_array(&w, 2 * 257);
        for (int i = 0; i < 257; i++) {
            mc_mp_write_uint(&w, region);
            mc_mp_write_uint(&w, 1);
        }
        break;
    case BODY_ZERO_LEN:
        mc_mp_write_array(&w, 2);
        mc_mp_write_uint(&w, region);
        mc_mp_write_uint(&w, 0);
        break;
    case BODY_OUTSIDE:
        mc_mp_write_array(&w, 2);
        mc_mp_write_uint(&w, region + 64 * KIB - 10);
        mc_mp_write_uint(&w, 11);
        break;
    case BODY_STRING:
        mc_mp_write_array(&w, 2);
        mc_mp_write_str(&w, "x", 1);
        mc_mp_write_uint(&w, 1);
        break;
    case BODY_TOO_BIG:
        mc_mp_write_array(&w, 4);
        mc_mp_write_uint(&w, region);
        mc_mp_write_uint(&w, 32 * KIB);
        mc_mp_write_uint(&w, region);
        mc_mp_write_uint(&w, 1 * MIB);
        break;
    default:
        break;
    }
}

static void malformed_vectored_reads_are_refused_and_the_target_keeps_serving(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 0, 0, 0), *b = engine_new(0, 0, 0, 0);
    uint8_t *rb = mc_malloc(64 * KIB), *la = mc_calloc(1, 64 * KIB);
    fill_random(rb, 64 * KIB, 9);
    assert_int_equal(mc_te_register(b, rb, 64 * KIB, NULL, 1), MC_OK);
    assert_int_equal(mc_te_register(a, la, 64 * KIB, NULL, 0), MC_OK);
    mc_rpc_client_opts_t o;
    mc_rpc_client_opts_init(&o);
    o.host = "127.0.0.1";
    o.port = mc_te_port(b);
    mc_rpc_client_t *c = NULL;
    assert_int_equal(mc_rpc_client_create(a->rs[0], &o, &c), MC_OK);
    static const mc_status_t want[BODY_COUNT] = {
        [BODY_EMPTY] = MC_ERR_INVALID_PARAMS,
        [BODY_ODD] = MC_ERR_INVALID_PARAMS,
        [BODY_TOO_MANY] = MC_ERR_INVALID_PARAMS,
        [BODY_ZERO_LEN] = MC_ERR_INVALID_PARAMS,
        [BODY_OUTSIDE] = MC_ERR_ADDRESS_NOT_REGISTERED,
        [BODY_STRING] = MC_ERR_INVALID_PARAMS,
        [BODY_TOO_BIG] = MC_ERR_LIMIT,
        /* the RPC layer's own check: that connection is closed (last) */
        [BODY_NOT_A_MAP] = MC_ERR_CONN_CLOSED,
    };
    for (int k = 0; k < BODY_COUNT; k++) {
        mc_buf_t body = MC_BUF_INIT;
        bad_body(&body, (bad_body_t)k, (uint64_t)(uintptr_t)rb);
        mc_status_t st =
            mc_rpc_call_sync(c, MC_RPC_TE_READV, mc_buf_head(&body), mc_buf_used(&body), 0, NULL);
        print_message("bad body %d -> %s\n", k, mc_status_str(st));
        assert_int_equal(st, want[k]);
        mc_buf_fini(&body);
    }
    mc_rpc_client_destroy(c);
    /* and it still serves trains */
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    mc_te_request_t reqs[3] = {req(MC_TE_READ, la, seg, rb + 5, 100),
                               req(MC_TE_READ, la + 200, seg, rb + 1000, 3000),
                               req(MC_TE_READ, la + 4000, seg, rb + 60000, 5536)};
    transfer_ok(a, reqs, 3);
    for (int i = 0; i < 3; i++)
        assert_memory_equal(reqs[i].local, (void *)(uintptr_t)reqs[i].remote, reqs[i].length);
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(rb);
    mc_free(la);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(many_small_reads_travel_in_a_few_calls_byte_for_byte),
        cmocka_unit_test(a_train_the_target_refuses_is_sent_again_read_by_read),
        cmocka_unit_test(malformed_vectored_reads_are_refused_and_the_target_keeps_serving),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
