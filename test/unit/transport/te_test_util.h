/*
 * te_test_util.h - helpers of the transfer-engine unit tests (te_test.c,
 * te_train_test.c): engines on 127.0.0.1, requests, batches run to the end.
 * Include after cmocka.h.
 */
#ifndef MC_TEST_TE_TEST_UTIL_H
#define MC_TEST_TE_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "mooncake/transfer.h"

#define WAIT_US 5000000 /* bound on every batch_wait that should succeed */
#define KIB 1024u
#define MIB (1024u * 1024u)

static inline void fill_random(uint8_t *p, size_t n, unsigned seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static inline mc_te_t *engine_new(uint64_t slice, uint64_t timeout_us, unsigned reactors,
                                  unsigned lanes)
{
    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.reactors = reactors ? reactors : 1;
    if (slice)
        o.slice_size = slice;
    if (timeout_us)
        o.timeout_us = timeout_us;
    if (lanes)
        o.tcp_lanes = lanes;
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    assert_non_null(te);
    return te;
}

static inline mc_te_segment_t open_port(mc_te_t *te, uint16_t port)
{
    char name[32];
    mc_te_segment_t seg = 0;
    snprintf(name, sizeof(name), "127.0.0.1:%u", port);
    assert_int_equal(mc_te_open_segment(te, name, &seg), MC_OK);
    assert_int_not_equal(seg, MC_TE_LOCAL_SEGMENT);
    return seg;
}

static inline mc_te_request_t req(mc_te_opcode_t op, void *local, mc_te_segment_t seg,
                                  const void *remote, uint64_t len)
{
    mc_te_request_t r = {.opcode = op,
                         .local = local,
                         .segment = seg,
                         .remote = (uint64_t)(uintptr_t)remote,
                         .length = len};
    return r;
}

/* Submit reqs as a new batch and wait for it; returns the batch (to inspect
 * and free) and the wait status in *st. */
static inline mc_te_batch_t *run_batch(mc_te_t *te, const mc_te_request_t *reqs, size_t n,
                                       mc_status_t *st)
{
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(te, n, &b), MC_OK);
    assert_int_equal(mc_te_submit(b, reqs, n), MC_OK);
    *st = mc_te_batch_wait(b, WAIT_US);
    return b;
}

static inline void transfer_ok(mc_te_t *te, const mc_te_request_t *reqs, size_t n)
{
    mc_status_t st;
    mc_te_batch_t *b = run_batch(te, reqs, n, &st);
    assert_int_equal(st, MC_OK);
    for (size_t i = 0; i < n; i++) {
        mc_te_status_t ts;
        assert_int_equal(mc_te_task_status(b, i, &ts), MC_OK);
        assert_int_equal(ts.state, MC_TE_COMPLETED);
        assert_int_equal(ts.transferred, reqs[i].length);
    }
    assert_int_equal(mc_te_batch_free(b), MC_OK);
}

#endif /* MC_TEST_TE_TEST_UTIL_H */
