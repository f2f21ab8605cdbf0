/*
 * RPC payloads, end to end against the echo server: requests carry bulk data
 * sent zero-copy and land through a payload sink straight in the server's
 * memory; responses carry bulk data read straight into the caller's buffer.
 * Bad ranges are refused without touching memory; oversized responses fail
 * the one call.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>

#include "cluster.h"
#include "reactor/reactor.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "util/mem.h"

#define REGION_SIZE (64u << 20) /* as in echo_server */

typedef struct env {
    test_proc_t server;
    tc_rpc_t rpc;    /* a client of the server */
    mc_reactor_t *r; /* its reactor */
    mc_rpc_client_t *cli;
} env_t;

static int setup(void **state)
{
    static env_t e;
    char bin[256];
    char *argv[] = {(char *)test_bin("echo_server", bin, sizeof(bin)), "-r", "1", NULL};
    memset(&e, 0, sizeof(e));
    assert_int_equal(tc_spawn(&e.server, argv), 0);
    long port = test_proc_expect_num(&e.server, "port ", 5000);
    assert_true(port > 0);
    assert_int_equal(tc_rpc_open(&e.rpc, (unsigned)port), 0);
    e.r = mc_reactor_group_get(e.rpc.g, 0);
    e.cli = e.rpc.c;
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    tc_rpc_close(&e->rpc);
    tc_stop_ms(&e->server, SIGTERM, 5000);
    return 0;
}

/* One call in flight, issued on the reactor, waited for here. */
typedef struct xfer {
    mc_rpc_client_t *c;
    uint16_t method;
    uint64_t off, len;
    const void *payload;
    size_t plen;
    void *recv;
    size_t recv_room;
    mc_status_t issue_st;
    atomic_int done;
    mc_status_t st;
    size_t got; /* response payload length */
    atomic_int *all_done;
} xfer_t;

static void xfer_cb(void *arg, const mc_rpc_resp_t *resp)
{
    xfer_t *x = arg;
    x->st = resp->status;
    x->got = resp->payload_len;
    if (resp->payload_len > 0 && resp->payload != x->recv)
        x->st = MC_ERR_INTERNAL_ERROR; /* must have landed in place */
    atomic_int *all = x->all_done;     /* x may be gone once done is set */
    atomic_store(&x->done, 1);
    if (all != NULL)
        atomic_fetch_add(all, 1);
}

static void xfer_issue(void *arg)
{
    xfer_t *x = arg;
    mc_mp_writer_t *w = mc_rpc_call_begin(x->c);
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, 1);
    mc_mp_write_uint(w, x->off);
    mc_mp_write_uint(w, 2);
    mc_mp_write_uint(w, x->len);
    x->issue_st = mc_rpc_call_end_xfer(x->c, x->method, 20000000, x->payload, x->plen, x->recv,
                                       x->recv_room, xfer_cb, x);
}

static void wait_done(atomic_int *v, int want)
{
    for (int i = 0; i < 20000 && atomic_load(v) < want; i++)
        usleep(1000);
    assert_true(atomic_load(v) >= want);
}

static mc_status_t put_sync(env_t *e, uint64_t off, const void *p, size_t len)
{
    xfer_t x = {.c = e->cli, .method = MC_RPC_TEST_PUT, .off = off, .payload = p, .plen = len};
    mc_rpc_run_on(e->r, xfer_issue, &x);
    assert_int_equal(x.issue_st, MC_INPROGRESS);
    wait_done(&x.done, 1);
    return x.st;
}

static mc_status_t get_sync(env_t *e, uint64_t off, void *dst, size_t len, size_t room, size_t *got)
{
    xfer_t x = {.c = e->cli,
                .method = MC_RPC_TEST_GET,
                .off = off,
                .len = len,
                .recv = dst,
                .recv_room = room};
    mc_rpc_run_on(e->r, xfer_issue, &x);
    assert_int_equal(x.issue_st, MC_INPROGRESS);
    wait_done(&x.done, 1);
    if (got != NULL)
        *got = x.got;
    return x.st;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (uint8_t)(seed >> 16);
    }
}

static void payloads_of_many_sizes_round_trip_byte_for_byte(void **state)
{
    env_t *e = *state;
    static const size_t sizes[] = {1, 7, 4095, 4096, 65537, (1u << 20) + 3, 16u << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        uint64_t off = 4096 * i + i; /* unaligned */
        uint8_t *src = mc_malloc(n), *dst = mc_malloc(n);
        fill(src, n, (unsigned)i + 1);
        memset(dst, 0xEE, n);
        assert_int_equal(put_sync(e, off, src, n), MC_OK);
        size_t got = 0;
        assert_int_equal(get_sync(e, off, dst, n, n, &got), MC_OK);
        assert_int_equal(got, n);
        assert_memory_equal(src, dst, n);
        mc_free(src);
        mc_free(dst);
    }
}

static void many_payload_calls_in_flight_all_land_in_place(void **state)
{
    env_t *e = *state;
    enum { N = 64, SZ = 256 * 1024 + 11 };
    static xfer_t x[N];
    uint8_t *src = mc_malloc((size_t)N * SZ), *dst = mc_malloc((size_t)N * SZ);
    fill(src, (size_t)N * SZ, 99);
    memset(dst, 0, (size_t)N * SZ);
    atomic_int all = 0;
    for (int i = 0; i < N; i++) {
        x[i] = (xfer_t){.c = e->cli,
                        .method = MC_RPC_TEST_PUT,
                        .off = (uint64_t)i * SZ,
                        .payload = src + (size_t)i * SZ,
                        .plen = SZ,
                        .all_done = &all};
        mc_rpc_run_on(e->r, xfer_issue, &x[i]);
        assert_int_equal(x[i].issue_st, MC_INPROGRESS);
    }
    wait_done(&all, N);
    atomic_store(&all, 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(x[i].st, MC_OK);
        x[i] = (xfer_t){.c = e->cli,
                        .method = MC_RPC_TEST_GET,
                        .off = (uint64_t)i * SZ,
                        .len = SZ,
                        .recv = dst + (size_t)i * SZ,
                        .recv_room = SZ,
                        .all_done = &all};
        mc_rpc_run_on(e->r, xfer_issue, &x[i]);
    }
    wait_done(&all, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(x[i].st, MC_OK);
    assert_memory_equal(src, dst, (size_t)N * SZ);
    mc_free(src);
    mc_free(dst);
}

/* Many calls of mixed sizes in flight: one read(2) brings in several whole
 * frames with their payloads (each taken out of the input buffer in place),
 * and sizes on both sides of the streaming threshold (16 KiB in server.c and
 * client.c) switch the readers between large reads and header-sized ones. */
static void mixed_payload_sizes_in_flight_all_land_in_place(void **state)
{
    env_t *e = *state;
    enum { N = 600 };
    static xfer_t x[N];
    static const size_t sizes[] = {1, 100, 4096, 16383, 16384, 16385, 3000, 65536 + 5, 40000, 7};
    size_t off[N + 1];
    off[0] = 0;
    for (int i = 0; i < N; i++)
        off[i + 1] = off[i] + sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
    size_t total = off[N];
    assert_true(total < REGION_SIZE);
    uint8_t *src = mc_malloc(total), *dst = mc_malloc(total);
    fill(src, total, 7);
    memset(dst, 0, total);
    atomic_int all = 0;
    for (int i = 0; i < N; i++) {
        x[i] = (xfer_t){.c = e->cli,
                        .method = MC_RPC_TEST_PUT,
                        .off = off[i],
                        .payload = src + off[i],
                        .plen = off[i + 1] - off[i],
                        .all_done = &all};
        mc_rpc_run_on(e->r, xfer_issue, &x[i]);
        assert_int_equal(x[i].issue_st, MC_INPROGRESS);
    }
    wait_done(&all, N);
    atomic_store(&all, 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(x[i].st, MC_OK);
        size_t len = off[i + 1] - off[i];
        x[i] = (xfer_t){.c = e->cli,
                        .method = MC_RPC_TEST_GET,
                        .off = off[i],
                        .len = len,
                        .recv = dst + off[i],
                        .recv_room = len,
                        .all_done = &all};
        mc_rpc_run_on(e->r, xfer_issue, &x[i]);
    }
    wait_done(&all, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(x[i].st, MC_OK);
        assert_int_equal(x[i].got, off[i + 1] - off[i]);
    }
    assert_memory_equal(src, dst, total);
    mc_free(src);
    mc_free(dst);
}

static void out_of_range_put_is_refused_and_touches_nothing(void **state)
{
    env_t *e = *state;
    uint8_t known[64], junk[100], back[64];
    fill(known, sizeof(known), 7);
    memset(junk, 0xAB, sizeof(junk));
    uint64_t tail = REGION_SIZE - sizeof(known);
    assert_int_equal(put_sync(e, tail, known, sizeof(known)), MC_OK);
    /* overlaps the end of the region */
    assert_int_equal(put_sync(e, REGION_SIZE - 10, junk, sizeof(junk)),
                     MC_ERR_ADDRESS_NOT_REGISTERED);
    /* offset + length overflows 64 bits */
    assert_int_equal(put_sync(e, UINT64_MAX - 5, junk, sizeof(junk)),
                     MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(get_sync(e, tail, back, sizeof(back), sizeof(back), NULL), MC_OK);
    assert_memory_equal(known, back, sizeof(known));
}

static void a_response_larger_than_the_buffer_fails_only_that_call(void **state)
{
    env_t *e = *state;
    uint8_t small[4096];
    assert_int_equal(get_sync(e, 0, small, 1u << 20, sizeof(small), NULL), MC_ERR_BUFFER_OVERFLOW);
    size_t got = 0;
    assert_int_equal(get_sync(e, 0, small, sizeof(small), sizeof(small), &got), MC_OK);
    assert_int_equal(got, sizeof(small));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(payloads_of_many_sizes_round_trip_byte_for_byte),
        cmocka_unit_test(many_payload_calls_in_flight_all_land_in_place),
        cmocka_unit_test(mixed_payload_sizes_in_flight_all_land_in_place),
        cmocka_unit_test(out_of_range_put_is_refused_and_touches_nothing),
        cmocka_unit_test(a_response_larger_than_the_buffer_fails_only_that_call),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
