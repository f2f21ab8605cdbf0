/*
 * The transfer engine in one process (transport/engine.c, batch.c, tcp.c):
 * two engines talking p2p over TCP on 127.0.0.1, the local segment, and a
 * fake peer (an RPC server speaking the engine's TE_DESC/TE_WRITE/TE_READ
 * methods) that records every slice it receives and can fail, hold back or
 * shorten chosen ones, or serve a hand-made descriptor.
 *
 * Covered: options; registration overlap/adjacency/unregister rules; the
 * descriptor an engine serves and the ones it accepts or refuses; slicing
 * (what goes on the wire, many slices queued on one connection, slice sizes
 * over the frame limit); task and batch status with partial failure, short
 * reads and timeouts; batch_wait timeouts and BATCH_BUSY; the callback
 * contract (exactly once per idle batch, never inside submit, may submit and
 * free, may not block, keeps its batch busy until it returned); bad requests
 * (unregistered or out-of-range memory, overflow, unknown segment, full
 * batch); engines and peers going away.
 *
 * Independent of the rdma transport's environment (MC_RDMA_EMULATED and
 * the other variables of transport/README.md are cleared at start: some
 * tests rely on there being no RDMA device).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test/rdma_env.h"
#include "mooncake/transfer.h"
#include "reactor/reactor.h"
#include "rpc/fields.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#include "test/unit/transport/te_test_util.h"

/* ------------------------------------------------------------ helpers */

static int wait_int(atomic_int *v, int want, int timeout_ms)
{
    for (int i = 0; i < timeout_ms && atomic_load(v) < want; i++)
        usleep(1000);
    return atomic_load(v) >= want;
}

static unsigned free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* ---------------------------------------------------------- fake peer */

#define FAKE_REGION (1u * MIB)
#define MAX_RECS 4096
#define MAX_HELD 64

typedef struct rec {
    uint16_t method;
    uint64_t addr, len;
} rec_t;

typedef struct held {
    mc_rpc_req_t *req;
    uint16_t method;
    uint64_t addr, len;
} held_t;

typedef struct fake {
    mc_reactor_group_t *g;
    mc_reactor_t *r;
    mc_rpc_server_t *srv;
    uint16_t port;
    uint8_t *region;    /* its one remote buffer */
    pthread_mutex_t mu; /* everything below */
    rec_t recs[MAX_RECS];
    size_t nrecs;
    uint64_t fail_addr; /* a slice starting here is answered with fail_st */
    mc_status_t fail_st;
    uint64_t hold_addr;  /* a slice starting here is answered only by fake_release */
    uint64_t short_addr; /* a read starting here is answered one byte short */
    held_t held[MAX_HELD];
    size_t nheld;
    mc_buf_t desc; /* when not empty: served as the descriptor */
} fake_t;

static int fake_addr_len(mc_rpc_req_t *req, uint64_t *addr, uint64_t *len)
{
    size_t blen;
    const uint8_t *body = mc_rpc_req_body(req, &blen);
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, body, blen);
    uint32_t n = blen ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_ADDR:
            *addr = mc_mp_read_uint(&r);
            break;
        case MC_F_LENGTH:
            *len = mc_mp_read_uint(&r);
            break;
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    return r.err == MC_OK ? 0 : -1;
}

static int fake_in_region(const fake_t *f, uint64_t addr, uint64_t len)
{
    uint64_t base = (uint64_t)(uintptr_t)f->region;
    return addr >= base && len <= FAKE_REGION && addr - base <= FAKE_REGION - len;
}

static void fake_record(fake_t *f, uint16_t method, uint64_t addr, uint64_t len)
{
    if (f->nrecs < MAX_RECS)
        f->recs[f->nrecs++] = (rec_t){method, addr, len};
}

static int fake_hold(fake_t *f, mc_rpc_req_t *req, uint16_t method, uint64_t addr, uint64_t len)
{
    if (addr != f->hold_addr || f->nheld == MAX_HELD)
        return 0;
    f->held[f->nheld++] = (held_t){req, method, addr, len};
    return 1;
}

static mc_status_t fake_write_sink(void *ctx, mc_rpc_req_t *req, uint64_t plen, void **dst)
{
    fake_t *f = ctx;
    uint64_t addr = 0, len = 0;
    if (fake_addr_len(req, &addr, &len) != 0)
        return MC_ERR_INVALID_PARAMS;
    pthread_mutex_lock(&f->mu);
    fake_record(f, MC_RPC_TE_WRITE, addr, plen);
    mc_status_t st = addr == f->fail_addr ? f->fail_st : MC_OK;
    pthread_mutex_unlock(&f->mu);
    if (!fake_in_region(f, addr, plen))
        return MC_ERR_ADDRESS_NOT_REGISTERED;
    if (st != MC_OK)
        return st;
    *dst = (void *)(uintptr_t)addr;
    return MC_OK;
}

static void fake_h_write(void *ctx, mc_rpc_req_t *req)
{
    fake_t *f = ctx;
    uint64_t addr = 0, len = 0;
    fake_addr_len(req, &addr, &len);
    pthread_mutex_lock(&f->mu);
    int held = fake_hold(f, req, MC_RPC_TE_WRITE, addr, 0);
    pthread_mutex_unlock(&f->mu);
    if (!held)
        mc_rpc_reply(req, MC_OK, NULL, 0);
}

static void fake_h_read(void *ctx, mc_rpc_req_t *req)
{
    fake_t *f = ctx;
    uint64_t addr = 0, len = 0;
    if (fake_addr_len(req, &addr, &len) != 0 || !fake_in_region(f, addr, len)) {
        mc_rpc_reply(req, MC_ERR_ADDRESS_NOT_REGISTERED, NULL, 0);
        return;
    }
    pthread_mutex_lock(&f->mu);
    fake_record(f, MC_RPC_TE_READ, addr, len);
    mc_status_t st = addr == f->fail_addr ? f->fail_st : MC_OK;
    int shorten = addr == f->short_addr;
    int held = st == MC_OK && fake_hold(f, req, MC_RPC_TE_READ, addr, len);
    pthread_mutex_unlock(&f->mu);
    if (held)
        return;
    if (st != MC_OK) {
        mc_rpc_reply(req, st, NULL, 0);
        return;
    }
    mc_rpc_reply_begin(req);
    mc_rpc_reply_end_payload(req, MC_OK, (const void *)(uintptr_t)addr, len - (shorten ? 1 : 0));
}

static void fake_h_desc(void *ctx, mc_rpc_req_t *req)
{
    fake_t *f = ctx;
    pthread_mutex_lock(&f->mu);
    if (mc_buf_used(&f->desc) > 0) {
        mc_rpc_reply(req, MC_OK, mc_buf_head(&f->desc), mc_buf_used(&f->desc));
        pthread_mutex_unlock(&f->mu);
        return;
    }
    pthread_mutex_unlock(&f->mu);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 5);
    mc_mp_write_uint(w, MC_F_NAME);
    mc_mp_write_cstr(w, "fake");
    mc_mp_write_uint(w, MC_F_HOST);
    mc_mp_write_cstr(w, "127.0.0.1");
    mc_mp_write_uint(w, MC_F_PORT);
    mc_mp_write_uint(w, f->port);
    mc_mp_write_uint(w, MC_F_PROTOCOLS);
    mc_mp_write_array(w, 1);
    mc_mp_write_cstr(w, "tcp");
    mc_mp_write_uint(w, MC_F_BUFFERS);
    mc_mp_write_array(w, 1);
    mc_mp_write_map(w, 3);
    mc_mp_write_uint(w, MC_F_ADDR);
    mc_mp_write_uint(w, (uint64_t)(uintptr_t)f->region);
    mc_mp_write_uint(w, MC_F_LENGTH);
    mc_mp_write_uint(w, FAKE_REGION);
    mc_mp_write_uint(w, MC_F_LOCATION);
    mc_mp_write_cstr(w, "cpu:0");
    mc_rpc_reply_end(req, MC_OK);
}

static fake_t *fake_new(void)
{
    fake_t *f = MC_NEW(fake_t);
    assert_non_null(f);
    pthread_mutex_init(&f->mu, NULL);
    f->desc = (mc_buf_t)MC_BUF_INIT;
    f->region = mc_calloc(1, FAKE_REGION);
    assert_non_null(f->region);
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "fake";
    assert_int_equal(mc_reactor_group_create(&go, &f->g), MC_OK);
    f->r = mc_reactor_group_get(f->g, 0);
    mc_rpc_server_opts_t so;
    mc_rpc_server_opts_init(&so);
    so.bind_addr = "127.0.0.1";
    assert_int_equal(mc_rpc_server_create(&f->r, 1, &so, &f->srv), MC_OK);
    assert_int_equal(mc_rpc_server_register(f->srv, MC_RPC_TE_DESC, fake_h_desc, f), MC_OK);
    assert_int_equal(
        mc_rpc_server_register_sink(f->srv, MC_RPC_TE_WRITE, fake_write_sink, fake_h_write, f),
        MC_OK);
    assert_int_equal(mc_rpc_server_register(f->srv, MC_RPC_TE_READ, fake_h_read, f), MC_OK);
    assert_int_equal(mc_rpc_server_start(f->srv), MC_OK);
    f->port = mc_rpc_server_port(f->srv);
    return f;
}

/* On the fake's reactor: answer every held request. */
static void fake_release_on_reactor(void *arg)
{
    fake_t *f = arg;
    pthread_mutex_lock(&f->mu);
    held_t held[MAX_HELD];
    size_t n = f->nheld;
    memcpy(held, f->held, n * sizeof(held[0]));
    f->nheld = 0;
    f->hold_addr = 0;
    pthread_mutex_unlock(&f->mu);
    for (size_t i = 0; i < n; i++) {
        if (held[i].method == MC_RPC_TE_READ) {
            mc_rpc_reply_begin(held[i].req);
            mc_rpc_reply_end_payload(held[i].req, MC_OK, (const void *)(uintptr_t)held[i].addr,
                                     held[i].len);
        } else {
            mc_rpc_reply(held[i].req, MC_OK, NULL, 0);
        }
    }
}

static void fake_release(fake_t *f)
{
    mc_rpc_run_on(f->r, fake_release_on_reactor, f);
}

static size_t fake_nheld(fake_t *f)
{
    pthread_mutex_lock(&f->mu);
    size_t n = f->nheld;
    pthread_mutex_unlock(&f->mu);
    return n;
}

static int wait_held(fake_t *f, size_t want)
{
    for (int i = 0; i < 5000 && fake_nheld(f) < want; i++)
        usleep(1000);
    return fake_nheld(f) >= want;
}

/* Stop serving (connections close); held requests stay held. */
static void fake_stop(fake_t *f)
{
    mc_rpc_server_destroy(f->srv);
    f->srv = NULL;
}

static void fake_free(fake_t *f)
{
    if (f == NULL)
        return;
    fake_release(f);
    mc_rpc_server_destroy(f->srv);
    mc_reactor_group_destroy(f->g);
    mc_buf_fini(&f->desc);
    mc_free(f->region);
    pthread_mutex_destroy(&f->mu);
    mc_free(f);
}

static void fake_set_desc(fake_t *f, const mc_buf_t *desc)
{
    pthread_mutex_lock(&f->mu);
    mc_buf_reset(&f->desc);
    if (desc != NULL)
        assert_int_equal(mc_buf_append(&f->desc, mc_buf_head(desc), mc_buf_used(desc)), MC_OK);
    pthread_mutex_unlock(&f->mu);
}

static int rec_cmp(const void *a, const void *b)
{
    const rec_t *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The fake's records, sorted by address, moved into out (at most max). */
static size_t fake_take_recs(fake_t *f, rec_t *out, size_t max)
{
    pthread_mutex_lock(&f->mu);
    size_t n = f->nrecs < max ? f->nrecs : max;
    memcpy(out, f->recs, n * sizeof(*out));
    f->nrecs = 0;
    pthread_mutex_unlock(&f->mu);
    qsort(out, n, sizeof(*out), rec_cmp);
    return n;
}

/* ------------------------------------------------------------- options */

static void options_out_of_range_are_refused_at_create(void **state)
{
    (void)state;
    mc_te_opts_t o;
    mc_te_t *te = NULL;
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.slice_size = 4095;
    assert_int_equal(mc_te_create(&o, &te), MC_ERR_INVALID_ARGUMENT);
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.tcp_lanes = 0;
    assert_int_equal(mc_te_create(&o, &te), MC_ERR_INVALID_ARGUMENT);
    o.tcp_lanes = 17;
    assert_int_equal(mc_te_create(&o, &te), MC_ERR_INVALID_ARGUMENT);
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.metadata = "etcd://127.0.0.1:2379";
    assert_int_equal(mc_te_create(&o, &te), MC_ERR_INVALID_ARGUMENT);
    assert_null(te);
    mc_te_destroy(NULL);
}

static void tcp_and_local_install_and_rdma_needs_a_device(void **state)
{
    (void)state;
    mc_te_t *te = engine_new(0, 0, 0, 0);
    assert_int_equal(mc_te_install_transport(te, "tcp"), MC_OK);
    assert_int_equal(mc_te_install_transport(te, "tcp"), MC_OK);
    assert_int_equal(mc_te_install_transport(te, "local"), MC_OK);
    /* the real provider finds no NIC here (tests run without MC_RDMA_EMULATED) */
    assert_int_equal(mc_te_install_transport(te, "rdma"), MC_ERR_DEVICE_NOT_FOUND);
    assert_int_equal(mc_te_install_transport(te, "nvlink"), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_install_transport(te, NULL), MC_ERR_INVALID_ARGUMENT);
    char want[32];
    snprintf(want, sizeof(want), "127.0.0.1:%u", mc_te_port(te));
    assert_string_equal(mc_te_local_name(te), want);
    mc_te_destroy(te);
}

/* -------------------------------------------------------- registration */

static void overlapping_registrations_are_refused_and_adjacent_ones_accepted(void **state)
{
    (void)state;
    mc_te_t *te = engine_new(0, 0, 0, 0);
    uint8_t *m = mc_malloc(64 * KIB);
    assert_int_equal(mc_te_register(te, m + 4096, 4096, NULL, 1), MC_OK);
    /* the same range, inside, over the start, over the end, around it */
    assert_int_equal(mc_te_register(te, m + 4096, 4096, NULL, 1), MC_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(mc_te_register(te, m + 4196, 10, NULL, 0), MC_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(mc_te_register(te, m + 4000, 200, NULL, 1), MC_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(mc_te_register(te, m + 8000, 500, NULL, 1), MC_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(mc_te_register(te, m + 2048, 8192, NULL, 1), MC_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(mc_te_register(te, m + 8191, 1, NULL, 1), MC_ERR_ADDRESS_OVERLAPPED);
    /* touching either end is fine */
    assert_int_equal(mc_te_register(te, m + 2048, 2048, NULL, 1), MC_OK);
    assert_int_equal(mc_te_register(te, m + 8192, 4096, NULL, 1), MC_OK);
    assert_int_equal(mc_te_register(te, m + 4095, 1, NULL, 1), MC_ERR_ADDRESS_OVERLAPPED);

    /* a range must sit inside one buffer: across two adjacent ones it does not */
    mc_te_request_t r = req(MC_TE_WRITE, m + 8192 - 100, MC_TE_LOCAL_SEGMENT, m + 2048, 200);
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(te, 4, &b), MC_OK);
    assert_int_equal(mc_te_submit(b, &r, 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    r = req(MC_TE_WRITE, m + 2048, MC_TE_LOCAL_SEGMENT, m + 8192 - 100, 200);
    assert_int_equal(mc_te_submit(b, &r, 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    mc_te_destroy(te);
    mc_free(m);
}

static void register_batch_is_all_or_nothing(void **state)
{
    (void)state;
    mc_te_t *te = engine_new(0, 0, 0, 0);
    uint8_t *m = mc_malloc(64 * KIB);
    assert_int_equal(mc_te_register(te, m + 32 * KIB, 4096, NULL, 1), MC_OK);
    /* the third overlaps the first of the same call */
    mc_te_buffer_t v1[3] = {{m, 100}, {m + 1000, 100}, {m + 50, 100}};
    assert_int_equal(mc_te_register_batch(te, v1, 3, NULL, 1), MC_ERR_ADDRESS_OVERLAPPED);
    /* the second overlaps a registered buffer */
    mc_te_buffer_t v2[2] = {{m, 100}, {m + 32 * KIB + 4000, 200}};
    assert_int_equal(mc_te_register_batch(te, v2, 2, NULL, 1), MC_ERR_ADDRESS_OVERLAPPED);
    /* the third is invalid */
    mc_te_buffer_t v3[3] = {{m, 100}, {m + 1000, 100}, {m + 2000, 0}};
    assert_int_equal(mc_te_register_batch(te, v3, 3, NULL, 1), MC_ERR_INVALID_ARGUMENT);
    /* nothing of the refused calls was registered */
    assert_int_equal(mc_te_unregister(te, m), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(mc_te_unregister(te, m + 1000), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(mc_te_register_batch(te, v3, 2, NULL, 1), MC_OK);
    assert_int_equal(mc_te_unregister(te, m), MC_OK);
    assert_int_equal(mc_te_unregister(te, m + 1000), MC_OK);
    assert_int_equal(mc_te_register_batch(te, NULL, 0, NULL, 1), MC_OK);
    assert_int_equal(mc_te_register_batch(te, NULL, 1, NULL, 1), MC_ERR_INVALID_ARGUMENT);
    mc_te_destroy(te);
    mc_free(m);
}

static void bad_registrations_are_refused(void **state)
{
    (void)state;
    mc_te_t *te = engine_new(0, 0, 0, 0);
    uint8_t m[256];
    assert_int_equal(mc_te_register(te, NULL, 100, NULL, 1), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_register(te, m, 0, NULL, 1), MC_ERR_INVALID_ARGUMENT);
    /* addr + len wraps around: refused before anything touches the memory */
    assert_int_equal(mc_te_register(te, (void *)(UINTPTR_MAX - 10), 100, NULL, 1),
                     MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_register(te, m, sizeof(m), "cuda:0", 1), MC_ERR_DEVICE_NOT_FOUND);
    assert_int_equal(mc_te_register(te, m, sizeof(m), "gpu0", 1), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_register(te, m, sizeof(m), "*", 1), MC_OK);
    assert_int_equal(mc_te_unregister(te, m), MC_OK);
    mc_te_destroy(te);
}

/* Registering faults large regions in first; memory that refuses it (not
 * writable) is registered as it is, never written (a write would kill the
 * process). */
static void read_only_memory_registers_without_a_write(void **state)
{
    (void)state;
    mc_te_t *te = engine_new(0, 0, 0, 0);
    size_t len = 64u << 20; /* as large as the regions faulted in first */
    uint8_t *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(mc_te_register(te, m, len, NULL, 1), MC_OK);
    assert_int_equal(m[len - 1], 0);
    assert_int_equal(mc_te_unregister(te, m), MC_OK);
    munmap(m, len);
    mc_te_destroy(te);
}

static void unregister_takes_the_start_of_a_buffer_and_frees_its_range(void **state)
{
    (void)state;
    mc_te_t *te = engine_new(0, 0, 0, 0);
    uint8_t *m = mc_malloc(16 * KIB);
    mc_te_request_t r = req(MC_TE_WRITE, m, MC_TE_LOCAL_SEGMENT, m + 8 * KIB, 100);
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(te, 8, &b), MC_OK);
    assert_int_equal(mc_te_register(te, m, 16 * KIB, NULL, 1), MC_OK);
    assert_int_equal(mc_te_unregister(te, m + 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(mc_te_unregister(te, m + 16 * KIB), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(mc_te_submit(b, &r, 1), MC_OK);
    assert_int_equal(mc_te_batch_wait(b, WAIT_US), MC_OK);
    assert_int_equal(mc_te_unregister(te, m), MC_OK);
    assert_int_equal(mc_te_unregister(te, m), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(mc_te_submit(b, &r, 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    /* the range is free again: pieces of it register without overlap */
    assert_int_equal(mc_te_register(te, m, 8 * KIB, NULL, 1), MC_OK);
    assert_int_equal(mc_te_register(te, m + 8 * KIB, 8 * KIB, NULL, 1), MC_OK);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    mc_te_destroy(te);
    mc_free(m);
}

/* --------------------------------------------------------- descriptors */

typedef struct desc {
    char name[64], host[64];
    uint64_t port;
    int has_tcp;
    size_t n;
    uint64_t addr[8], len[8];
    char loc[8][32];
} desc_t;

static void read_str(mc_mp_reader_t *r, char *out, size_t room)
{
    uint32_t len = 0;
    const char *s = mc_mp_read_str(r, &len);
    assert_int_equal(r->err, MC_OK);
    assert_true(len < room);
    memcpy(out, s, len);
    out[len] = '\0';
}

/* Ask an engine for its descriptor over a plain RPC client and decode it. */
static void fetch_desc(uint16_t port, desc_t *d)
{
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    mc_reactor_group_t *g = NULL;
    assert_int_equal(mc_reactor_group_create(&go, &g), MC_OK);
    mc_rpc_client_opts_t co;
    mc_rpc_client_opts_init(&co);
    co.port = port;
    mc_rpc_client_t *c = NULL;
    assert_int_equal(mc_rpc_client_create(mc_reactor_group_get(g, 0), &co, &c), MC_OK);
    mc_buf_t body = MC_BUF_INIT;
    assert_int_equal(mc_rpc_call_sync(c, MC_RPC_TE_DESC, NULL, 0, WAIT_US, &body), MC_OK);
    mc_rpc_client_destroy(c);
    mc_reactor_group_destroy(g);

    memset(d, 0, sizeof(*d));
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, mc_buf_head(&body), mc_buf_used(&body));
    uint32_t nf = mc_mp_read_map(&r);
    for (uint32_t i = 0; i < nf; i++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_NAME:
            read_str(&r, d->name, sizeof(d->name));
            break;
        case MC_F_HOST:
            read_str(&r, d->host, sizeof(d->host));
            break;
        case MC_F_PORT:
            d->port = mc_mp_read_uint(&r);
            break;
        case MC_F_PROTOCOLS: {
            uint32_t np = mc_mp_read_array(&r);
            for (uint32_t k = 0; k < np; k++) {
                char p[16];
                read_str(&r, p, sizeof(p));
                d->has_tcp |= strcmp(p, "tcp") == 0;
            }
            break;
        }
        case MC_F_BUFFERS: {
            d->n = mc_mp_read_array(&r);
            assert_true(d->n <= 8);
            for (size_t k = 0; k < d->n; k++) {
                uint32_t bf = mc_mp_read_map(&r);
                for (uint32_t j = 0; j < bf; j++) {
                    switch (mc_mp_read_uint(&r)) {
                    case MC_F_ADDR:
                        d->addr[k] = mc_mp_read_uint(&r);
                        break;
                    case MC_F_LENGTH:
                        d->len[k] = mc_mp_read_uint(&r);
                        break;
                    case MC_F_LOCATION:
                        read_str(&r, d->loc[k], sizeof(d->loc[k]));
                        break;
                    default:
                        mc_mp_skip(&r);
                        break;
                    }
                }
            }
            break;
        }
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    assert_int_equal(r.err, MC_OK);
    assert_true(mc_mp_at_end(&r));
    mc_buf_fini(&body);
}

static void the_descriptor_lists_the_remote_buffers_in_address_order(void **state)
{
    (void)state;
    mc_te_t *te = engine_new(0, 0, 0, 0);
    uint8_t *m = mc_malloc(64 * KIB);
    /* registered out of order, one of them local-only */
    assert_int_equal(mc_te_register(te, m + 40 * KIB, 100, "cpu:1", 1), MC_OK);
    assert_int_equal(mc_te_register(te, m + 20 * KIB, 4096, "cpu:0", 0), MC_OK);
    assert_int_equal(mc_te_register(te, m, 7, NULL, 1), MC_OK);
    assert_int_equal(mc_te_register(te, m + 30 * KIB, 333, "*", 1), MC_OK);

    desc_t d;
    fetch_desc(mc_te_port(te), &d);
    assert_string_equal(d.name, mc_te_local_name(te));
    assert_string_equal(d.host, "127.0.0.1");
    assert_int_equal(d.port, mc_te_port(te));
    assert_true(d.has_tcp);
    assert_int_equal(d.n, 3);
    assert_int_equal(d.addr[0], (uintptr_t)m);
    assert_int_equal(d.len[0], 7);
    /* no location (NULL, or upstream's "*"): the memory's own, cpu:<its NUMA node> */
    assert_int_equal(strncmp(d.loc[0], "cpu:", 4), 0);
    assert_int_equal(d.addr[1], (uintptr_t)(m + 30 * KIB));
    assert_int_equal(d.len[1], 333);
    assert_int_equal(strncmp(d.loc[1], "cpu:", 4), 0);
    assert_int_equal(d.addr[2], (uintptr_t)(m + 40 * KIB));
    assert_int_equal(d.len[2], 100);
    assert_string_equal(d.loc[2], "cpu:1");

    assert_int_equal(mc_te_unregister(te, m + 30 * KIB), MC_OK);
    fetch_desc(mc_te_port(te), &d);
    assert_int_equal(d.n, 2);
    assert_int_equal(d.addr[1], (uintptr_t)(m + 40 * KIB));
    mc_te_destroy(te);
    mc_free(m);
}

static void a_buffer_registered_after_open_is_found_by_refreshing(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 0, 0, 0), *b = engine_new(0, 0, 0, 0);
    uint8_t *la = mc_malloc(64 * KIB), *r1 = mc_calloc(1, 4096), *r2 = mc_calloc(1, 8192);
    fill_random(la, 64 * KIB, 1);
    assert_int_equal(mc_te_register(a, la, 64 * KIB, NULL, 0), MC_OK);
    assert_int_equal(mc_te_register(b, r1, 4096, NULL, 1), MC_OK);
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    /* registered after a cached b's descriptor */
    assert_int_equal(mc_te_register(b, r2, 8192, NULL, 1), MC_OK);
    mc_te_request_t r = req(MC_TE_WRITE, la, seg, r2 + 1, 8191);
    transfer_ok(a, &r, 1);
    assert_memory_equal(r2 + 1, la, 8191);
    /* and one unregistered since is refused by the target itself */
    assert_int_equal(mc_te_unregister(b, r1), MC_OK);
    r = req(MC_TE_WRITE, la, seg, r1, 4096);
    mc_status_t st;
    mc_te_batch_t *bt = run_batch(a, &r, 1, &st);
    assert_int_equal(st, MC_ERR_ADDRESS_NOT_REGISTERED);
    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(bt, 0, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_FAILED);
    assert_int_equal(ts.error, MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(ts.transferred, 0);
    assert_int_equal(mc_te_batch_free(bt), MC_OK);
    for (size_t i = 0; i < 4096; i++)
        assert_int_equal(r1[i], 0);
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(la);
    mc_free(r1);
    mc_free(r2);
}

static void descriptor_fields_it_does_not_know_are_skipped(void **state)
{
    (void)state;
    fake_t *f = fake_new();
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_map(&w, 5);
    mc_mp_write_uint(&w, 99); /* unknown, nested */
    mc_mp_write_array(&w, 2);
    mc_mp_write_map(&w, 1);
    mc_mp_write_uint(&w, 1);
    mc_mp_write_cstr(&w, "x");
    mc_mp_write_nil(&w);
    mc_mp_write_uint(&w, MC_F_BUFFERS);
    mc_mp_write_array(&w, 1);
    mc_mp_write_map(&w, 4);
    mc_mp_write_uint(&w, 77); /* unknown, inside a buffer */
    mc_mp_write_bin(&w, "zz", 2);
    mc_mp_write_uint(&w, MC_F_ADDR);
    mc_mp_write_uint(&w, (uint64_t)(uintptr_t)f->region);
    mc_mp_write_uint(&w, MC_F_LENGTH);
    mc_mp_write_uint(&w, FAKE_REGION);
    mc_mp_write_uint(&w, MC_F_LOCATION);
    mc_mp_write_cstr(&w, "cpu:0");
    mc_mp_write_uint(&w, MC_F_HOST);
    mc_mp_write_cstr(&w, "127.0.0.1");
    mc_mp_write_uint(&w, MC_F_PORT);
    mc_mp_write_uint(&w, f->port);
    mc_mp_write_uint(&w, 1000);
    mc_mp_write_cstr(&w, "future");
    assert_int_equal(w.err, MC_OK);
    fake_set_desc(f, &b);
    mc_buf_fini(&b);

    mc_te_t *te = engine_new(0, 0, 0, 0);
    uint8_t *l = mc_malloc(4096);
    fill_random(l, 4096, 3);
    assert_int_equal(mc_te_register(te, l, 4096, NULL, 0), MC_OK);
    mc_te_segment_t seg = open_port(te, f->port);
    mc_te_request_t r = req(MC_TE_WRITE, l, seg, f->region + 10, 4096);
    transfer_ok(te, &r, 1);
    assert_memory_equal(f->region + 10, l, 4096);
    mc_te_destroy(te);
    fake_free(f);
    mc_free(l);
}

/* A descriptor map with host, port and buffers, one of them spoiled by
 * `spoil` (0 = a good one). */
static void bad_desc(mc_buf_t *b, uint16_t port, uint64_t region, int spoil)
{
    mc_mp_writer_t w;
    mc_buf_reset(b);
    mc_mp_writer_init(&w, b);
    mc_mp_write_map(&w, spoil == 1 ? 2 : 3);
    mc_mp_write_uint(&w, MC_F_HOST);
    mc_mp_write_cstr(&w, spoil == 2
                             ? "h234567890123456789012345678901234567890123456789012345678901234"
                             : "127.0.0.1");
    if (spoil != 1) { /* 1: no port */
        mc_mp_write_uint(&w, MC_F_PORT);
        if (spoil == 3)
            mc_mp_write_cstr(&w, "80"); /* 3: port of the wrong type */
        else
            mc_mp_write_uint(&w, port);
    }
    mc_mp_write_uint(&w, MC_F_BUFFERS);
    if (spoil == 4) { /* 4: buffers not an array */
        mc_mp_write_uint(&w, 5);
    } else if (spoil == 5) { /* 5: a buffer that is not a map */
        mc_mp_write_array(&w, 1);
        mc_mp_write_array(&w, 2);
        mc_mp_write_uint(&w, region);
        mc_mp_write_uint(&w, 10);
    } else if (spoil == 7) { /* 7: more buffers than a descriptor may list */
        mc_mp_write_array(&w, 65537);
        for (uint32_t i = 0; i < 65537; i++) {
            mc_mp_write_map(&w, 1);
            mc_mp_write_uint(&w, MC_F_LENGTH);
            mc_mp_write_uint(&w, 1);
        }
    } else {
        mc_mp_write_array(&w, 1);
        mc_mp_write_map(&w, 3);
        mc_mp_write_uint(&w, MC_F_ADDR);
        mc_mp_write_uint(&w, region);
        mc_mp_write_uint(&w, MC_F_LENGTH);
        mc_mp_write_uint(&w, FAKE_REGION);
        mc_mp_write_uint(&w, MC_F_LOCATION);
        /* 6: a location longer than any the engine keeps */
        mc_mp_write_cstr(&w, spoil == 6 ? "cpu:0123456789012345678901234567" : "cpu:0");
    }
    assert_int_equal(w.err, MC_OK);
}

static void malformed_descriptors_fail_the_open_and_leave_nothing_behind(void **state)
{
    (void)state;
    fake_t *f = fake_new();
    mc_te_t *te = engine_new(0, 0, 0, 0);
    char name[32];
    snprintf(name, sizeof(name), "127.0.0.1:%u", f->port);
    mc_buf_t b = MC_BUF_INIT;
    for (int spoil = 1; spoil <= 7; spoil++) {
        bad_desc(&b, f->port, (uint64_t)(uintptr_t)f->region, spoil);
        fake_set_desc(f, &b);
        mc_te_segment_t seg = 12345;
        mc_status_t st = mc_te_open_segment(te, name, &seg);
        if (st != MC_ERR_MALFORMED)
            fail_msg("descriptor spoiled with %d: open gave %s", spoil, mc_status_str(st));
        assert_int_equal(seg, 12345);
    }
    bad_desc(&b, f->port, (uint64_t)(uintptr_t)f->region, 0);
    fake_set_desc(f, &b);
    mc_buf_fini(&b);
    mc_te_segment_t seg = open_port(te, f->port);
    assert_int_equal(seg, 1); /* the failed opens took no handle */
    uint8_t *l = mc_malloc(100);
    fill_random(l, 100, 5);
    assert_int_equal(mc_te_register(te, l, 100, NULL, 0), MC_OK);
    mc_te_request_t r = req(MC_TE_WRITE, l, seg, f->region, 100);
    transfer_ok(te, &r, 1);
    assert_memory_equal(f->region, l, 100);
    mc_te_destroy(te);
    fake_free(f);
    mc_free(l);
}

/* ------------------------------------------------------------- slicing */

/* The slice lengths a request of len bytes must become with slice size s:
 * s each, with a tail of up to s/4 riding on the last slice. */
static size_t model_slices(uint64_t len, uint64_t s, uint64_t *out)
{
    size_t n = 0;
    while (len > s + s / 4) {
        out[n++] = s;
        len -= s;
    }
    out[n++] = len;
    return n;
}

static void check_slices(const rec_t *recs, size_t nrecs, uint16_t method,
                         const mc_te_request_t *reqs, size_t nreq, uint64_t s)
{
    size_t k = 0;
    for (size_t i = 0; i < nreq; i++) {
        uint64_t want[64];
        size_t n = model_slices(reqs[i].length, s, want);
        uint64_t at = reqs[i].remote;
        for (size_t j = 0; j < n; j++, k++) {
            assert_true(k < nrecs);
            if (recs[k].method != method || recs[k].addr != at || recs[k].len != want[j])
                fail_msg("request %zu slice %zu: got method %u +%llu len %llu, want +%llu len "
                         "%llu",
                         i, j, recs[k].method, (unsigned long long)(recs[k].addr - reqs[0].remote),
                         (unsigned long long)recs[k].len, (unsigned long long)(at - reqs[0].remote),
                         (unsigned long long)want[j]);
            at += want[j];
        }
    }
    assert_int_equal(k, nrecs);
}

static void requests_are_cut_into_slices_and_a_short_tail_rides_along(void **state)
{
    (void)state;
    enum { S = 4096 };
    fake_t *f = fake_new();
    mc_te_t *te = engine_new(S, 0, 2, 3);
    uint8_t *l = mc_malloc(256 * KIB), *back = mc_malloc(256 * KIB);
    fill_random(l, 256 * KIB, 7);
    assert_int_equal(mc_te_register(te, l, 256 * KIB, NULL, 0), MC_OK);
    assert_int_equal(mc_te_register(te, back, 256 * KIB, NULL, 0), MC_OK);
    mc_te_segment_t seg = open_port(te, f->port);
    /* below, at, at 1.25x, just over 1.25x, many slices plus a long tail */
    static const uint64_t lens[] = {1, S, S + S / 4, S + S / 4 + 1, 10 * S + 3, 2 * S + S / 2};
    enum { N = sizeof(lens) / sizeof(lens[0]) };
    mc_te_request_t reqs[N];
    uint64_t off = 5;
    for (size_t i = 0; i < N; i++) {
        reqs[i] = req(MC_TE_WRITE, l + off, seg, f->region + 3 * off, lens[i]);
        off += lens[i] + 1;
    }
    transfer_ok(te, reqs, N);
    rec_t recs[64];
    size_t n = fake_take_recs(f, recs, 64);
    check_slices(recs, n, MC_RPC_TE_WRITE, reqs, N, S);
    for (size_t i = 0; i < N; i++)
        assert_memory_equal((void *)(uintptr_t)reqs[i].remote, reqs[i].local, lens[i]);

    /* reads are cut the same way and land in place */
    for (size_t i = 0; i < N; i++) {
        reqs[i].opcode = MC_TE_READ;
        reqs[i].local = back + ((uint8_t *)reqs[i].local - l);
    }
    transfer_ok(te, reqs, N);
    n = fake_take_recs(f, recs, 64);
    check_slices(recs, n, MC_RPC_TE_READ, reqs, N, S);
    for (size_t i = 0; i < N; i++)
        assert_memory_equal(reqs[i].local, l + ((uint8_t *)reqs[i].local - back), lens[i]);
    mc_te_destroy(te);
    fake_free(f);
    mc_free(l);
    mc_free(back);
}

/* 32 write slices (framing + payload: two iovec entries each) and a read
 * queued behind them on one connection before it is up: the first writev
 * gets a full iovec and must not run past it (rpc/outq.c). */
static void many_slices_queued_on_one_lane_go_out_intact(void **state)
{
    (void)state;
    enum { N = 32, LEN = 100 };
    mc_te_t *a = engine_new(0, 0, 0, 1), *b = engine_new(0, 0, 0, 0);
    uint8_t *la = mc_malloc(N * LEN + LEN), *rb = mc_calloc(1, N * LEN + LEN);
    fill_random(la, N * LEN, 37);
    fill_random(rb + N * LEN, LEN, 38);
    assert_int_equal(mc_te_register(a, la, N * LEN + LEN, NULL, 0), MC_OK);
    assert_int_equal(mc_te_register(b, rb, N * LEN + LEN, NULL, 1), MC_OK);
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    for (int round = 0; round < 3; round++) {
        /* all of a submit is queued before the lane's next flush */
        mc_te_request_t r[N + 1];
        for (int i = 0; i < N; i++)
            r[i] = req(MC_TE_WRITE, la + i * LEN, seg, rb + i * LEN, LEN);
        r[N] = req(MC_TE_READ, la + N * LEN, seg, rb + N * LEN, LEN);
        transfer_ok(a, r, N + 1);
        assert_memory_equal(rb, la, N * LEN + LEN);
    }
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(la);
    mc_free(rb);
}

/* Slices must fit in one frame payload (64 MiB) whatever slice size is asked. */
static void a_slice_size_beyond_the_frame_limit_still_transfers(void **state)
{
    (void)state;
    const size_t len = 64 * MIB + 1;
    mc_te_t *a = engine_new(64 * MIB, 0, 0, 0), *b = engine_new(0, 0, 0, 0);
    uint8_t *src = mc_malloc(len), *dst = mc_calloc(1, len);
    fill_random(src, len, 11);
    assert_int_equal(mc_te_register(a, src, len, NULL, 0), MC_OK);
    assert_int_equal(mc_te_register(b, dst, len, NULL, 1), MC_OK);
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    mc_te_request_t r = req(MC_TE_WRITE, src, seg, dst, len);
    transfer_ok(a, &r, 1);
    assert_true(memcmp(src, dst, len) == 0);
    memset(src, 0, len);
    r.opcode = MC_TE_READ;
    transfer_ok(a, &r, 1);
    assert_true(memcmp(src, dst, len) == 0);
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(src);
    mc_free(dst);
}

/* -------------------------------------------------- status accounting */

typedef struct cb_rec {
    atomic_int calls;
    atomic_int inside_submit; /* a call came while the test was inside mc_te_submit */
    mc_te_status_t last;
    mc_status_t wait_st, open_st;
    mc_te_t *te;
    const char *open_name;
    atomic_int freed;
    int submit_more; /* submit `more` from the first call, free from the second */
    mc_te_request_t more;
    mc_status_t more_st, free_st;
    int sleep_ms;    /* then look at the batch again */
    atomic_int done; /* the callback returned */
} cb_rec_t;

static _Thread_local int tl_in_submit;

static void record_cb(void *arg, mc_te_batch_t *b, const mc_te_status_t *st)
{
    cb_rec_t *c = arg;
    if (tl_in_submit)
        atomic_store(&c->inside_submit, 1);
    c->last = *st;
    int n = atomic_fetch_add(&c->calls, 1) + 1;
    if (c->te != NULL) {
        c->wait_st = mc_te_batch_wait(b, 1000);
        mc_te_segment_t seg;
        c->open_st = mc_te_open_segment(c->te, c->open_name, &seg);
    }
    if (c->submit_more && n == 1)
        c->more_st = mc_te_submit(b, &c->more, 1);
    if (c->submit_more && n == 2) {
        c->free_st = mc_te_batch_free(b);
        atomic_store(&c->freed, 1);
        return; /* b is gone */
    }
    if (c->sleep_ms) {
        usleep((useconds_t)c->sleep_ms * 1000);
        mc_te_status_t again;
        mc_te_batch_status(b, &again); /* the batch must still be there */
        c->last = again;
    }
    atomic_store(&c->done, 1);
}

static mc_status_t submit_marked(mc_te_batch_t *b, const mc_te_request_t *r, size_t n)
{
    tl_in_submit = 1;
    mc_status_t st = mc_te_submit(b, r, n);
    tl_in_submit = 0;
    return st;
}

static void a_failed_slice_fails_only_its_task_and_the_rest_is_counted(void **state)
{
    (void)state;
    enum { S = 4096 };
    fake_t *f = fake_new();
    mc_te_t *te = engine_new(S, 0, 2, 2);
    uint8_t *l = mc_malloc(128 * KIB);
    fill_random(l, 128 * KIB, 13);
    assert_int_equal(mc_te_register(te, l, 128 * KIB, NULL, 0), MC_OK);
    mc_te_segment_t seg = open_port(te, f->port);
    mc_te_request_t reqs[3] = {
        req(MC_TE_WRITE, l, seg, f->region, 2 * S),
        req(MC_TE_WRITE, l + 2 * S, seg, f->region + 2 * S, 10 * S + 3),
        req(MC_TE_READ, l + 100 * KIB, seg, f->region + 500 * KIB, 100),
    };
    pthread_mutex_lock(&f->mu);
    f->fail_addr = reqs[1].remote + 3 * S; /* the fourth slice of the second request */
    f->fail_st = MC_ERR_WRITE_FAIL;
    pthread_mutex_unlock(&f->mu);

    static cb_rec_t c;
    memset(&c, 0, sizeof(c));
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(te, 3, &b), MC_OK);
    mc_te_batch_set_callback(b, record_cb, &c);
    assert_int_equal(submit_marked(b, reqs, 3), MC_OK);
    assert_int_equal(mc_te_batch_wait(b, WAIT_US), MC_ERR_WRITE_FAIL);

    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(b, 0, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_COMPLETED);
    assert_int_equal(ts.transferred, 2 * S);
    assert_int_equal(ts.error, MC_OK);
    assert_int_equal(mc_te_task_status(b, 1, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_FAILED);
    assert_int_equal(ts.error, MC_ERR_WRITE_FAIL);
    assert_int_equal(ts.transferred, 10 * S + 3 - S); /* every slice but the failed one */
    assert_int_equal(mc_te_task_status(b, 2, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_COMPLETED);
    assert_int_equal(ts.transferred, 100);
    assert_int_equal(mc_te_task_status(b, 3, &ts), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(ts.state, MC_TE_INVALID);

    assert_int_equal(mc_te_batch_status(b, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_FAILED);
    assert_int_equal(ts.error, MC_ERR_WRITE_FAIL);
    assert_int_equal(ts.transferred, 2 * S + 10 * S + 3 - S + 100);

    assert_true(wait_int(&c.done, 1, 5000));
    usleep(20000);
    assert_int_equal(atomic_load(&c.calls), 1);
    assert_int_equal(atomic_load(&c.inside_submit), 0);
    assert_int_equal(c.last.state, MC_TE_FAILED);
    assert_int_equal(c.last.error, MC_ERR_WRITE_FAIL);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    mc_te_destroy(te);
    fake_free(f);
    mc_free(l);
}

static void a_short_read_answer_fails_the_task(void **state)
{
    (void)state;
    fake_t *f = fake_new();
    mc_te_t *te = engine_new(0, 0, 0, 0);
    uint8_t *l = mc_malloc(8192);
    assert_int_equal(mc_te_register(te, l, 8192, NULL, 0), MC_OK);
    mc_te_segment_t seg = open_port(te, f->port);
    pthread_mutex_lock(&f->mu);
    f->short_addr = (uint64_t)(uintptr_t)(f->region + 64);
    pthread_mutex_unlock(&f->mu);
    mc_te_request_t r[2] = {req(MC_TE_READ, l, seg, f->region + 64, 1000),
                            req(MC_TE_READ, l + 4096, seg, f->region + 4096, 1000)};
    mc_status_t st;
    mc_te_batch_t *b = run_batch(te, r, 2, &st);
    assert_int_equal(st, MC_ERR_TRANSFER_FAIL);
    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(b, 0, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_FAILED);
    assert_int_equal(ts.transferred, 0);
    assert_int_equal(mc_te_task_status(b, 1, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_COMPLETED);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    mc_te_destroy(te);
    fake_free(f);
    mc_free(l);
}

static void an_unanswered_slice_times_out_its_task_within_the_timeout(void **state)
{
    (void)state;
    enum { S = 4096 };
    fake_t *f = fake_new();
    mc_te_t *te = engine_new(S, 300000, 0, 0);
    uint8_t *l = mc_malloc(64 * KIB);
    assert_int_equal(mc_te_register(te, l, 64 * KIB, NULL, 0), MC_OK);
    mc_te_segment_t seg = open_port(te, f->port);
    pthread_mutex_lock(&f->mu);
    f->hold_addr = (uint64_t)(uintptr_t)(f->region + S); /* the second slice */
    pthread_mutex_unlock(&f->mu);
    mc_te_request_t r[2] = {req(MC_TE_READ, l, seg, f->region, 3 * S),
                            req(MC_TE_READ, l + 32 * KIB, seg, f->region + 32 * KIB, 10)};
    uint64_t t0 = mc_now_ms();
    mc_status_t st;
    mc_te_batch_t *b = run_batch(te, r, 2, &st);
    uint64_t took = mc_now_ms() - t0;
    assert_int_equal(st, MC_ERR_RPC_TIMEOUT);
    assert_true(took >= 250 && took < 3000);
    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(b, 0, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_TIMEOUT);
    assert_int_equal(ts.error, MC_ERR_RPC_TIMEOUT);
    assert_int_equal(ts.transferred, 2 * S);
    assert_int_equal(mc_te_batch_status(b, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_TIMEOUT);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    /* the late answer is dropped; the lane keeps working */
    fake_release(f);
    mc_te_request_t ok = req(MC_TE_READ, l, seg, f->region + S, S);
    transfer_ok(te, &ok, 1);
    mc_te_destroy(te);
    fake_free(f);
    mc_free(l);
}

static void batch_wait_times_out_and_free_is_refused_while_a_task_is_pending(void **state)
{
    (void)state;
    fake_t *f = fake_new();
    mc_te_t *te = engine_new(0, 0, 0, 0);
    uint8_t *l = mc_malloc(4096);
    assert_int_equal(mc_te_register(te, l, 4096, NULL, 0), MC_OK);
    mc_te_segment_t seg = open_port(te, f->port);
    pthread_mutex_lock(&f->mu);
    f->hold_addr = (uint64_t)(uintptr_t)f->region;
    pthread_mutex_unlock(&f->mu);
    mc_te_request_t r = req(MC_TE_WRITE, l, seg, f->region, 4096);
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(te, 1, &b), MC_OK);
    assert_int_equal(mc_te_submit(b, &r, 1), MC_OK);
    assert_true(wait_held(f, 1));
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_te_batch_wait(b, 100000), MC_ERR_TIMEOUT);
    uint64_t took = mc_now_ms() - t0;
    assert_true(took >= 90 && took < 2000);
    mc_te_status_t ts;
    assert_int_equal(mc_te_batch_status(b, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_WAITING);
    assert_int_equal(mc_te_task_status(b, 0, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_WAITING);
    assert_int_equal(mc_te_batch_free(b), MC_ERR_BATCH_BUSY);
    fake_release(f);
    assert_int_equal(mc_te_batch_wait(b, WAIT_US), MC_OK);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    mc_te_destroy(te);
    fake_free(f);
    mc_free(l);
}

/* ------------------------------------------------------------ callbacks */

static void the_callback_runs_once_per_idle_batch_and_never_inside_submit(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 0, 0, 0), *b = engine_new(0, 0, 0, 0);
    uint8_t *la = mc_malloc(64 * KIB), *rb = mc_malloc(64 * KIB);
    fill_random(la, 64 * KIB, 17);
    assert_int_equal(mc_te_register(a, la, 64 * KIB, NULL, 1), MC_OK);
    assert_int_equal(mc_te_register(b, rb, 64 * KIB, NULL, 1), MC_OK);
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    static cb_rec_t c;
    memset(&c, 0, sizeof(c));
    mc_te_batch_t *bt = NULL;
    assert_int_equal(mc_te_batch_alloc(a, 16, &bt), MC_OK);
    mc_te_batch_set_callback(bt, record_cb, &c);

    /* local only: every task finishes inside submit, the callback later */
    mc_te_request_t loc[2] = {req(MC_TE_WRITE, la, MC_TE_LOCAL_SEGMENT, la + 32 * KIB, 100),
                              req(MC_TE_READ, la + 1000, MC_TE_LOCAL_SEGMENT, la, 100)};
    assert_int_equal(submit_marked(bt, loc, 2), MC_OK);
    assert_int_equal(mc_te_batch_wait(bt, WAIT_US), MC_OK);
    assert_true(wait_int(&c.calls, 1, 5000));
    assert_memory_equal(la + 32 * KIB, la, 100);

    /* over TCP, into the same batch: a second idle, a second call */
    mc_te_request_t tcp[2] = {req(MC_TE_WRITE, la, seg, rb, 40000),
                              req(MC_TE_READ, la + 40000, seg, rb + 50000, 1000)};
    assert_int_equal(submit_marked(bt, tcp, 2), MC_OK);
    assert_int_equal(mc_te_batch_wait(bt, WAIT_US), MC_OK);
    assert_true(wait_int(&c.calls, 2, 5000));
    /* a mix of both */
    mc_te_request_t mix[2] = {tcp[0], loc[0]};
    assert_int_equal(submit_marked(bt, mix, 2), MC_OK);
    assert_int_equal(mc_te_batch_wait(bt, WAIT_US), MC_OK);
    assert_true(wait_int(&c.calls, 3, 5000));
    usleep(50000);
    assert_int_equal(atomic_load(&c.calls), 3);
    assert_int_equal(atomic_load(&c.inside_submit), 0);
    assert_int_equal(c.last.state, MC_TE_COMPLETED);
    assert_int_equal(c.last.transferred, 100 + 100 + 40000 + 1000 + 40000 + 100);
    assert_memory_equal(rb, la, 40000);
    /* the callback may still be returning: free succeeds once it has */
    mc_status_t st;
    for (int i = 0; i < 1000 && (st = mc_te_batch_free(bt)) == MC_ERR_BATCH_BUSY; i++)
        usleep(1000);
    assert_int_equal(st, MC_OK);
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(la);
    mc_free(rb);
}

static void a_callback_may_submit_and_free_its_batch_but_not_block(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 0, 0, 0), *b = engine_new(0, 0, 0, 0);
    uint8_t *la = mc_malloc(64 * KIB), *rb = mc_malloc(64 * KIB);
    fill_random(la, 64 * KIB, 19);
    assert_int_equal(mc_te_register(a, la, 64 * KIB, NULL, 0), MC_OK);
    assert_int_equal(mc_te_register(b, rb, 64 * KIB, NULL, 1), MC_OK);
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    char bname[32];
    snprintf(bname, sizeof(bname), "%s", mc_te_local_name(b));

    static cb_rec_t c;
    memset(&c, 0, sizeof(c));
    c.te = a;
    c.open_name = bname;
    c.submit_more = 1;
    c.more = req(MC_TE_WRITE, la + 100, seg, rb + 100, 30000);
    mc_te_batch_t *bt = NULL;
    assert_int_equal(mc_te_batch_alloc(a, 2, &bt), MC_OK);
    mc_te_batch_set_callback(bt, record_cb, &c);
    mc_te_request_t r = req(MC_TE_WRITE, la, seg, rb, 100);
    assert_int_equal(mc_te_submit(bt, &r, 1), MC_OK);
    assert_true(wait_int(&c.freed, 1, 5000));
    assert_int_equal(atomic_load(&c.calls), 2);
    assert_int_equal(c.more_st, MC_OK);
    assert_int_equal(c.free_st, MC_OK);
    assert_int_equal(c.wait_st, MC_ERR_STATE);
    assert_int_equal(c.open_st, MC_ERR_STATE);
    assert_int_equal(c.last.state, MC_TE_COMPLETED);
    assert_memory_equal(rb, la, 30100);
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(la);
    mc_free(rb);
}

/* batch_wait returns as the last task finishes, while the callback may still
 * be running: freeing the batch then must not pull it from under it. */
static void a_batch_is_busy_until_its_callback_has_returned(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 0, 0, 0), *b = engine_new(0, 0, 0, 0);
    uint8_t *la = mc_malloc(4096), *rb = mc_malloc(4096);
    assert_int_equal(mc_te_register(a, la, 4096, NULL, 0), MC_OK);
    assert_int_equal(mc_te_register(b, rb, 4096, NULL, 1), MC_OK);
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    for (int round = 0; round < 2; round++) {
        /* round 0: over TCP (callback on the completing reactor); round 1:
         * local (callback posted) */
        static cb_rec_t c;
        memset(&c, 0, sizeof(c));
        c.sleep_ms = 200;
        mc_te_batch_t *bt = NULL;
        assert_int_equal(mc_te_batch_alloc(a, 1, &bt), MC_OK);
        mc_te_batch_set_callback(bt, record_cb, &c);
        mc_te_request_t r = round == 0 ? req(MC_TE_WRITE, la, seg, rb, 4096)
                                       : req(MC_TE_WRITE, la, MC_TE_LOCAL_SEGMENT, la + 10, 10);
        assert_int_equal(mc_te_submit(bt, &r, 1), MC_OK);
        assert_int_equal(mc_te_batch_wait(bt, WAIT_US), MC_OK);
        mc_status_t st;
        for (int i = 0; i < 3000 && (st = mc_te_batch_free(bt)) == MC_ERR_BATCH_BUSY; i++)
            usleep(1000);
        assert_int_equal(st, MC_OK);
        assert_int_equal(atomic_load(&c.done), 1);
        assert_int_equal(atomic_load(&c.calls), 1);
    }
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(la);
    mc_free(rb);
}

/* ------------------------------------------------------------ bad input */

static void requests_outside_registered_memory_are_refused_and_nothing_is_submitted(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 0, 0, 0), *b = engine_new(0, 0, 0, 0);
    uint8_t *la = mc_malloc(64 * KIB), *rb = mc_calloc(1, 64 * KIB), *priv = mc_calloc(1, 4096);
    uint8_t stack[64];
    fill_random(la, 64 * KIB, 23);
    assert_int_equal(mc_te_register(a, la, 64 * KIB, NULL, 0), MC_OK);
    assert_int_equal(mc_te_register(b, rb, 64 * KIB, NULL, 1), MC_OK);
    assert_int_equal(mc_te_register(b, priv, 4096, NULL, 0), MC_OK); /* not remote-accessible */
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    mc_te_batch_t *bt = NULL;
    assert_int_equal(mc_te_batch_alloc(a, 8, &bt), MC_OK);
    const mc_te_request_t good = req(MC_TE_WRITE, la, seg, rb, 100);
    const mc_te_request_t bad[] = {
        req(MC_TE_WRITE, stack, seg, rb, sizeof(stack)),      /* local unregistered */
        req(MC_TE_WRITE, la + 64 * KIB - 10, seg, rb, 20),    /* local past the end */
        req(MC_TE_READ, la - 1, seg, rb, 20),                 /* local before the start */
        req(MC_TE_WRITE, la, seg, rb + 64 * KIB, 1),          /* remote past the end */
        req(MC_TE_WRITE, la, seg, rb + 64 * KIB - 10, 20),    /* remote across the end */
        req(MC_TE_READ, la, seg, rb - 1, 2),                  /* remote across the start */
        req(MC_TE_WRITE, la, seg, priv, 100),                 /* remote not accessible */
        req(MC_TE_WRITE, la, MC_TE_LOCAL_SEGMENT, stack, 10), /* local target outside */
        req(MC_TE_WRITE, la, MC_TE_LOCAL_SEGMENT, (void *)UINTPTR_MAX, 2), /* wraps */
    };
    for (size_t i = 0; i < MC_ARRAY_SIZE(bad); i++) {
        mc_te_request_t two[2] = {good, bad[i]};
        mc_status_t st = mc_te_submit(bt, two, 2);
        if (st != MC_ERR_ADDRESS_NOT_REGISTERED)
            fail_msg("bad request %zu: %s", i, mc_status_str(st));
    }
    /* remote address + length overflows 64 bits (the local range is fine) */
    mc_te_request_t wrap = req(MC_TE_WRITE, la, seg, NULL, 100);
    wrap.remote = UINT64_MAX - 10;
    assert_int_equal(mc_te_submit(bt, &wrap, 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    wrap = req(MC_TE_WRITE, la, MC_TE_LOCAL_SEGMENT, NULL, 100);
    wrap.remote = UINT64_MAX - 10;
    assert_int_equal(mc_te_submit(bt, &wrap, 1), MC_ERR_ADDRESS_NOT_REGISTERED);

    /* nothing was submitted: no task, no byte moved */
    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(bt, 0, &ts), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(ts.state, MC_TE_INVALID);
    assert_int_equal(mc_te_batch_wait(bt, 1000), MC_OK);
    for (size_t i = 0; i < 64 * KIB; i++)
        if (rb[i] != 0)
            fail_msg("target byte %zu changed", i);
    assert_int_equal(mc_te_batch_free(bt), MC_OK);
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(la);
    mc_free(rb);
    mc_free(priv);
}

static void bad_opcodes_zero_lengths_and_unknown_segments_are_invalid(void **state)
{
    (void)state;
    mc_te_t *te = engine_new(0, 0, 0, 0);
    uint8_t *m = mc_malloc(8192);
    assert_int_equal(mc_te_register(te, m, 8192, NULL, 1), MC_OK);
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(te, 4, &b), MC_OK);
    mc_te_request_t r = req(MC_TE_WRITE, m, MC_TE_LOCAL_SEGMENT, m + 4096, 10);
    r.opcode = (mc_te_opcode_t)7;
    assert_int_equal(mc_te_submit(b, &r, 1), MC_ERR_INVALID_ARGUMENT);
    r = req(MC_TE_WRITE, m, MC_TE_LOCAL_SEGMENT, m + 4096, 0);
    assert_int_equal(mc_te_submit(b, &r, 1), MC_ERR_INVALID_ARGUMENT);
    r = req(MC_TE_WRITE, m, 42, m + 4096, 10);
    assert_int_equal(mc_te_submit(b, &r, 1), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_submit(b, NULL, 1), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_submit(b, NULL, 0), MC_OK);
    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(b, 0, &ts), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    assert_int_equal(mc_te_batch_alloc(te, 0, &b), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_batch_alloc(te, (1u << 24) + 1, &b), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_batch_free(NULL), MC_OK);
    mc_te_destroy(te);
    mc_free(m);
}

/* Requests are checked in order: the first bad one decides the status,
 * whichever of its checks (local range, opcode, segment, remote range)
 * fails; a request to a known segment with the same buffers many times
 * over is checked each time. */
static void the_first_bad_request_of_a_submit_decides_the_status(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 0, 0, 0), *b = engine_new(0, 0, 0, 0);
    uint8_t *la = mc_malloc(64 * KIB), *rb = mc_calloc(1, 64 * KIB);
    assert_int_equal(mc_te_register(a, la, 64 * KIB, NULL, 0), MC_OK);
    assert_int_equal(mc_te_register(b, rb, 64 * KIB, NULL, 1), MC_OK);
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    mc_te_batch_t *bt = NULL;
    assert_int_equal(mc_te_batch_alloc(a, 64, &bt), MC_OK);
    const mc_te_request_t good = req(MC_TE_WRITE, la, seg, rb, 100);
    mc_te_request_t bad_remote = req(MC_TE_WRITE, la, seg, rb + 64 * KIB, 1);
    mc_te_request_t bad_op = good;
    bad_op.opcode = (mc_te_opcode_t)9;
    mc_te_request_t bad_seg = req(MC_TE_WRITE, la, 4242, rb, 10);
    mc_te_request_t bad_local = req(MC_TE_WRITE, la + 64 * KIB, seg, rb, 1);
    struct {
        mc_te_request_t r[4];
        mc_status_t want;
    } cases[] = {
        {{good, bad_remote, bad_op, good}, MC_ERR_ADDRESS_NOT_REGISTERED},
        {{good, bad_op, bad_remote, good}, MC_ERR_INVALID_ARGUMENT},
        {{good, good, bad_seg, bad_local}, MC_ERR_INVALID_ARGUMENT},
        {{good, bad_local, bad_seg, good}, MC_ERR_ADDRESS_NOT_REGISTERED},
        {{good, good, good, bad_remote}, MC_ERR_ADDRESS_NOT_REGISTERED},
    };
    for (size_t i = 0; i < MC_ARRAY_SIZE(cases); i++) {
        mc_status_t st = mc_te_submit(bt, cases[i].r, 4);
        if (st != cases[i].want)
            fail_msg("case %zu: %s, want %s", i, mc_status_str(st), mc_status_str(cases[i].want));
    }
    /* nothing was submitted; 40 good ones to the same buffers go through */
    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(bt, 0, &ts), MC_ERR_INVALID_ARGUMENT);
    mc_te_request_t many[40];
    fill_random(la, 64 * KIB, 5);
    for (int i = 0; i < 40; i++)
        many[i] = req(MC_TE_WRITE, la + i * 1000, seg, rb + i * 1000, 1000);
    assert_int_equal(mc_te_submit(bt, many, 40), MC_OK);
    assert_int_equal(mc_te_batch_wait(bt, WAIT_US), MC_OK);
    assert_memory_equal(rb, la, 40000);
    assert_int_equal(mc_te_batch_free(bt), MC_OK);
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(la);
    mc_free(rb);
}

static void a_full_batch_refuses_more_requests(void **state)
{
    (void)state;
    mc_te_t *te = engine_new(0, 0, 0, 0);
    uint8_t *m = mc_malloc(8192);
    assert_int_equal(mc_te_register(te, m, 8192, NULL, 1), MC_OK);
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(te, 4, &b), MC_OK);
    mc_te_request_t r[3];
    for (int i = 0; i < 3; i++)
        r[i] = req(MC_TE_WRITE, m + i, MC_TE_LOCAL_SEGMENT, m + 4096 + i, 1);
    assert_int_equal(mc_te_submit(b, r, 3), MC_OK);
    assert_int_equal(mc_te_submit(b, r, 2), MC_ERR_TOO_MANY_REQUESTS);
    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(b, 3, &ts), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_submit(b, r, 1), MC_OK);
    assert_int_equal(mc_te_submit(b, r, 1), MC_ERR_TOO_MANY_REQUESTS);
    assert_int_equal(mc_te_batch_wait(b, WAIT_US), MC_OK);
    assert_int_equal(mc_te_task_status(b, 3, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_COMPLETED);
    /* a finished batch is still full: capacity counts over its life */
    assert_int_equal(mc_te_submit(b, r, 1), MC_ERR_TOO_MANY_REQUESTS);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    mc_te_destroy(te);
    mc_free(m);
}

static void segment_names_are_checked_and_reopening_gives_the_same_handle(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 1000000, 0, 0), *b = engine_new(0, 0, 0, 0);
    mc_te_segment_t seg = 99, s2 = 0;
    char longname[300];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    static const char *const bad[] = {
        "", "nohostport", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", ":80", "127.0.0.1:80x"};
    assert_int_equal(mc_te_open_segment(a, NULL, &seg), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_open_segment(a, longname, &seg), MC_ERR_INVALID_ARGUMENT);
    for (size_t i = 0; i < MC_ARRAY_SIZE(bad); i++)
        if (mc_te_open_segment(a, bad[i], &seg) != MC_ERR_INVALID_ARGUMENT)
            fail_msg("'%s' accepted", bad[i]);
    assert_int_equal(seg, 99);
    assert_int_equal(mc_te_open_segment(a, mc_te_local_name(a), &seg), MC_OK);
    assert_int_equal(seg, MC_TE_LOCAL_SEGMENT);

    /* nobody listens there: fails within the timeout */
    char name[32];
    snprintf(name, sizeof(name), "127.0.0.1:%u", free_port());
    uint64_t t0 = mc_now_ms();
    assert_int_not_equal(mc_te_open_segment(a, name, &seg), MC_OK);
    assert_true(mc_now_ms() - t0 < 2000);

    seg = open_port(a, mc_te_port(b));
    s2 = open_port(a, mc_te_port(b));
    assert_int_equal(seg, s2);
    assert_int_equal(mc_te_close_segment(a, seg), MC_OK);
    assert_int_equal(mc_te_close_segment(a, seg), MC_OK);
    assert_int_equal(mc_te_close_segment(a, seg), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_close_segment(a, 999), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_close_segment(a, MC_TE_LOCAL_SEGMENT), MC_OK);
    mc_te_destroy(a);
    mc_te_destroy(b);
}

/* ---------------------------------------------------- engines end to end */

static void two_engines_move_bytes_both_ways_to_absolute_addresses(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 0, 2, 3), *b = engine_new(0, 0, 0, 0);
    const size_t n = 4 * MIB;
    uint8_t *la = mc_malloc(n), *back = mc_malloc(n), *rb = mc_calloc(1, n + 64);
    fill_random(la, n, 29);
    assert_int_equal(mc_te_register(a, la, n, NULL, 0), MC_OK);
    assert_int_equal(mc_te_register(a, back, n, NULL, 0), MC_OK);
    assert_int_equal(mc_te_register(b, rb + 3, n, NULL, 1), MC_OK);
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    static const size_t sizes[] = {1, 2, 4095, 65536, 65537, 81920, 81921, 3 * MIB + 5};
    size_t off = 1;
    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        size_t len = sizes[i];
        if (off + len > n)
            off = 7;
        mc_te_request_t w = req(MC_TE_WRITE, la + off, seg, rb + 3 + (n - len - off / 2), len);
        transfer_ok(a, &w, 1);
        assert_memory_equal(rb + 3 + (n - len - off / 2), la + off, len);
        mc_te_request_t r = req(MC_TE_READ, back + off, seg, (void *)(uintptr_t)w.remote, len);
        memset(back + off, 0, len);
        transfer_ok(a, &r, 1);
        assert_memory_equal(back + off, la + off, len);
        off += len + 3;
    }
    /* the local segment, both ways */
    mc_te_request_t lw = req(MC_TE_WRITE, la, MC_TE_LOCAL_SEGMENT, back + 100, 5000);
    mc_te_request_t lr = req(MC_TE_READ, la + 20000, MC_TE_LOCAL_SEGMENT, back + 100, 5000);
    transfer_ok(a, &lw, 1);
    transfer_ok(a, &lr, 1);
    assert_memory_equal(la + 20000, la, 5000);
    mc_te_destroy(a);
    mc_te_destroy(b);
    mc_free(la);
    mc_free(back);
    mc_free(rb);
}

static void a_peer_that_goes_away_fails_its_in_flight_tasks_at_once(void **state)
{
    (void)state;
    fake_t *f = fake_new();
    mc_te_t *te = engine_new(0, 10000000, 0, 0);
    uint8_t *l = mc_malloc(8192);
    assert_int_equal(mc_te_register(te, l, 8192, NULL, 0), MC_OK);
    mc_te_segment_t seg = open_port(te, f->port);
    pthread_mutex_lock(&f->mu);
    f->hold_addr = (uint64_t)(uintptr_t)f->region;
    pthread_mutex_unlock(&f->mu);
    mc_te_request_t r[2] = {req(MC_TE_READ, l, seg, f->region, 100),
                            req(MC_TE_WRITE, l + 4096, MC_TE_LOCAL_SEGMENT, l + 5000, 100)};
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(te, 2, &b), MC_OK);
    assert_int_equal(mc_te_submit(b, r, 2), MC_OK);
    assert_true(wait_held(f, 1));
    uint64_t t0 = mc_now_ms();
    fake_stop(f);
    assert_int_equal(mc_te_batch_wait(b, WAIT_US), MC_ERR_CONN_CLOSED);
    assert_true(mc_now_ms() - t0 < 2000); /* not the 10 s timeout */
    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(b, 0, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_FAILED);
    assert_int_equal(mc_te_task_status(b, 1, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_COMPLETED);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    mc_te_destroy(te);
    fake_free(f);
    mc_free(l);
}

static void destroying_the_engine_cancels_its_in_flight_tasks(void **state)
{
    (void)state;
    fake_t *f = fake_new();
    mc_te_t *te = engine_new(0, 10000000, 0, 0);
    uint8_t *l = mc_malloc(8192);
    assert_int_equal(mc_te_register(te, l, 8192, NULL, 0), MC_OK);
    mc_te_segment_t seg = open_port(te, f->port);
    pthread_mutex_lock(&f->mu);
    f->hold_addr = (uint64_t)(uintptr_t)f->region;
    pthread_mutex_unlock(&f->mu);
    static cb_rec_t c;
    memset(&c, 0, sizeof(c));
    mc_te_request_t r = req(MC_TE_WRITE, l, seg, f->region, 100);
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(te, 2, &b), MC_OK);
    mc_te_batch_set_callback(b, record_cb, &c);
    assert_int_equal(mc_te_submit(b, &r, 1), MC_OK);
    assert_true(wait_held(f, 1));
    mc_te_destroy(te);
    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(b, 0, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_CANCELED);
    assert_int_equal(ts.error, MC_ERR_CANCELED);
    assert_int_equal(atomic_load(&c.calls), 1);
    assert_int_equal(c.last.state, MC_TE_CANCELED);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    fake_free(f);
    mc_free(l);
}

static void destroying_the_peer_engine_leaves_no_task_waiting(void **state)
{
    (void)state;
    mc_te_t *a = engine_new(0, 2000000, 0, 0), *b = engine_new(0, 0, 0, 0);
    const size_t n = 8 * MIB;
    uint8_t *la = mc_malloc(n), *rb = mc_malloc(n);
    fill_random(la, n, 31);
    assert_int_equal(mc_te_register(a, la, n, NULL, 0), MC_OK);
    assert_int_equal(mc_te_register(b, rb, n, NULL, 1), MC_OK);
    mc_te_segment_t seg = open_port(a, mc_te_port(b));
    enum { N = 32 };
    mc_te_request_t r[N];
    for (int i = 0; i < N; i++)
        r[i] = req(i % 2 ? MC_TE_READ : MC_TE_WRITE, la + (size_t)(i / 2) * (n / 16), seg,
                   rb + (size_t)(i / 2) * (n / 16), n / 16);
    mc_te_batch_t *bt = NULL;
    assert_int_equal(mc_te_batch_alloc(a, N, &bt), MC_OK);
    assert_int_equal(mc_te_submit(bt, r, N), MC_OK);
    mc_te_destroy(b);
    mc_status_t st = mc_te_batch_wait(bt, 4000000);
    assert_int_not_equal(st, MC_ERR_TIMEOUT);
    mc_te_status_t ts;
    int failed = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(mc_te_task_status(bt, (size_t)i, &ts), MC_OK);
        assert_true(ts.state == MC_TE_COMPLETED || ts.state == MC_TE_FAILED);
        failed += ts.state == MC_TE_FAILED;
    }
    print_message("%d of %d tasks failed when the peer went away\n", failed, N);
    assert_int_equal(mc_te_batch_free(bt), MC_OK);
    mc_te_destroy(a);
    mc_free(la);
    mc_free(rb);
}

int main(void)
{
    test_rdma_env_clear();
    /* TEST_LOG=debug (or "warn,transport=debug,tcp=debug") to see more */
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "err", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(options_out_of_range_are_refused_at_create),
        cmocka_unit_test(tcp_and_local_install_and_rdma_needs_a_device),
        cmocka_unit_test(overlapping_registrations_are_refused_and_adjacent_ones_accepted),
        cmocka_unit_test(register_batch_is_all_or_nothing),
        cmocka_unit_test(bad_registrations_are_refused),
        cmocka_unit_test(read_only_memory_registers_without_a_write),
        cmocka_unit_test(unregister_takes_the_start_of_a_buffer_and_frees_its_range),
        cmocka_unit_test(the_descriptor_lists_the_remote_buffers_in_address_order),
        cmocka_unit_test(a_buffer_registered_after_open_is_found_by_refreshing),
        cmocka_unit_test(descriptor_fields_it_does_not_know_are_skipped),
        cmocka_unit_test(malformed_descriptors_fail_the_open_and_leave_nothing_behind),
        cmocka_unit_test(requests_are_cut_into_slices_and_a_short_tail_rides_along),
        cmocka_unit_test(many_slices_queued_on_one_lane_go_out_intact),
        cmocka_unit_test(a_slice_size_beyond_the_frame_limit_still_transfers),
        cmocka_unit_test(a_failed_slice_fails_only_its_task_and_the_rest_is_counted),
        cmocka_unit_test(a_short_read_answer_fails_the_task),
        cmocka_unit_test(an_unanswered_slice_times_out_its_task_within_the_timeout),
        cmocka_unit_test(batch_wait_times_out_and_free_is_refused_while_a_task_is_pending),
        cmocka_unit_test(the_callback_runs_once_per_idle_batch_and_never_inside_submit),
        cmocka_unit_test(a_callback_may_submit_and_free_its_batch_but_not_block),
        cmocka_unit_test(a_batch_is_busy_until_its_callback_has_returned),
        cmocka_unit_test(requests_outside_registered_memory_are_refused_and_nothing_is_submitted),
        cmocka_unit_test(bad_opcodes_zero_lengths_and_unknown_segments_are_invalid),
        cmocka_unit_test(the_first_bad_request_of_a_submit_decides_the_status),
        cmocka_unit_test(a_full_batch_refuses_more_requests),
        cmocka_unit_test(segment_names_are_checked_and_reopening_gives_the_same_handle),
        cmocka_unit_test(two_engines_move_bytes_both_ways_to_absolute_addresses),
        cmocka_unit_test(a_peer_that_goes_away_fails_its_in_flight_tasks_at_once),
        cmocka_unit_test(destroying_the_engine_cancels_its_in_flight_tasks),
        cmocka_unit_test(destroying_the_peer_engine_leaves_no_task_waiting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
