/*
 * The transfer engine across processes: this test's engine against te_target
 * processes ($TEST_BIN_DIR/te_target) on 127.0.0.1, in p2p mode and with the
 * descriptors published through a real mooncake-master ($TEST_BUILD_DIR) or
 * a real redis-server (/usr/bin/redis-server or $TEST_REDIS_SERVER), both
 * started by the test on free ports.
 *
 * Covered: random data of many sizes (1 B .. 64 MiB, unaligned) written and
 * read back byte for byte; out-of-range writes refused by the initiator and,
 * sent anyway over raw RPC, by the target, with its memory unchanged (the
 * target checks its guard bytes at exit); a stale descriptor; malformed
 * frames on the data port (that connection closes, the engine keeps serving);
 * a killed target (in-flight requests fail at once, a restart on the same
 * port is reached again); a frozen target (requests time out within the
 * timeout, then it serves again); reads larger than one frame refused;
 * master:// and redis:// end to end, and under master:// a target restarted
 * on another port (same or other addresses) reached through the old handle.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "mooncake/transfer.h"
#include "cluster.h"
#include "te_util.h"
#include "reactor/reactor.h"
#include "rpc/fields.h"
#include "rpc/frame.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MIB (1024u * 1024u)
#define LOCAL_SIZE (64u * MIB + 8192u)
#define TIMEOUT_US 2000000u /* the engine's per-slice timeout */
#define WAIT_US 10000000u

typedef struct env {
    mc_te_t *te;        /* p2p */
    uint8_t *src, *dst; /* LOCAL_SIZE each, registered */
    target_t t;
    tc_master_t master;    /* the metadata service of the master:// tests */
    tc_redis_t redis;      /* and of the redis:// test */
    mc_reactor_group_t *g; /* for raw RPC clients */
} env_t;

/* ------------------------------------------------------------ helpers */

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++)
        p[i] = (uint8_t)(x >> (8 * (i % 8)));
}

/* Start te_target (metadata NULL: p2p; name, extra: NULL for none). */
static void target_start_opt(target_t *t, const char *metadata, const char *name, unsigned port,
                             uint64_t size, unsigned seed, const char *extra)
{
    char portb[16], sizeb[32];
    snprintf(portb, sizeof(portb), "%u", port);
    snprintf(sizeb, sizeof(sizeb), "%llu", (unsigned long long)size);
    const char *args[12] = {"--metadata", metadata ? metadata : "p2p", "--port", portb, "--size",
                            sizeb};
    int n = 6;
    if (name != NULL) {
        args[n++] = "--name";
        args[n++] = name;
    }
    if (extra != NULL)
        args[n++] = extra;
    args[n] = NULL;
    tt_start(t, seed, args);
    assert_true(t->port != 0 && t->addr != 0 && t->size == size && t->addr2 != 0 && t->guard != 0);
}

static void target_start(target_t *t, const char *metadata, const char *name, unsigned port,
                         uint64_t size, unsigned seed)
{
    target_start_opt(t, metadata, name, port, size, seed, NULL);
}

static void target_kill(target_t *t)
{
    tc_stop(&t->p, SIGKILL);
}

static mc_te_t *engine_new(const char *metadata, const char *name)
{
    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.metadata = metadata;
    o.local_hostname = name;
    o.reactors = 2;
    o.timeout_us = TIMEOUT_US;
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    return te;
}

static mc_status_t run(mc_te_t *te, const mc_te_request_t *reqs, size_t n)
{
    return tt_run(te, reqs, n, WAIT_US);
}

/* Write len random bytes at remote offset roff (from local offset loff),
 * read them back elsewhere and compare. */
static void round_trip(env_t *e, mc_te_t *te, mc_te_segment_t seg, uint64_t base, size_t loff,
                       uint64_t roff, size_t len, uint64_t seed)
{
    fill_random(e->src + loff, len, seed);
    memset(e->dst + loff, 0, len);
    mc_te_request_t w = tt_req(MC_TE_WRITE, e->src + loff, seg, base + roff, len);
    mc_status_t st = run(te, &w, 1);
    if (st != MC_OK)
        fail_msg("write of %zu bytes at +%llu: %s", len, (unsigned long long)roff,
                 mc_status_str(st));
    mc_te_request_t r = tt_req(MC_TE_READ, e->dst + loff, seg, base + roff, len);
    st = run(te, &r, 1);
    if (st != MC_OK)
        fail_msg("read of %zu bytes at +%llu: %s", len, (unsigned long long)roff,
                 mc_status_str(st));
    if (memcmp(e->src + loff, e->dst + loff, len) != 0)
        fail_msg("%zu bytes at +%llu did not round-trip", len, (unsigned long long)roff);
}

/* ---------------------------------------------------------- raw RPC */

typedef struct raw {
    mc_rpc_client_t *c;
    uint16_t method;
    int has_addr, has_len;
    uint64_t addr, len;
    const void *payload;
    size_t plen;
    void *recv;
    size_t room;
    mc_status_t issue_st, st;
    size_t got;
    atomic_int done;
} raw_t;

static void raw_cb(void *arg, const mc_rpc_resp_t *resp)
{
    raw_t *x = arg;
    x->st = resp->status;
    x->got = resp->payload_len;
    atomic_store(&x->done, 1);
}

static void raw_issue(void *arg)
{
    raw_t *x = arg;
    mc_mp_writer_t *w = mc_rpc_call_begin(x->c);
    mc_mp_write_map(w, (uint32_t)(x->has_addr + x->has_len));
    if (x->has_addr) {
        mc_mp_write_uint(w, MC_F_ADDR);
        mc_mp_write_uint(w, x->addr);
    }
    if (x->has_len) {
        mc_mp_write_uint(w, MC_F_LENGTH);
        mc_mp_write_uint(w, x->len);
    }
    x->issue_st = mc_rpc_call_end_xfer(x->c, x->method, WAIT_US, x->payload, x->plen, x->recv,
                                       x->room, raw_cb, x);
}

/* One TE_WRITE/TE_READ sent straight to the target, bypassing the checks of
 * the initiator's engine. */
static mc_status_t raw_call(env_t *e, mc_rpc_client_t *c, raw_t *x)
{
    x->c = c;
    atomic_store(&x->done, 0);
    mc_rpc_run_on(mc_reactor_group_get(e->g, 0), raw_issue, x);
    assert_int_equal(x->issue_st, MC_INPROGRESS);
    for (int i = 0; i < 10000 && !atomic_load(&x->done); i++)
        usleep(1000);
    assert_true(atomic_load(&x->done));
    return x->st;
}

static mc_rpc_client_t *raw_client(env_t *e, uint16_t port)
{
    mc_rpc_client_opts_t o;
    mc_rpc_client_opts_init(&o);
    o.port = port;
    mc_rpc_client_t *c = NULL;
    assert_int_equal(mc_rpc_client_create(mc_reactor_group_get(e->g, 0), &o, &c), MC_OK);
    return c;
}

static mc_status_t raw_write(env_t *e, mc_rpc_client_t *c, uint64_t addr, const void *p, size_t len)
{
    raw_t x = {.method = MC_RPC_TE_WRITE, .has_addr = 1, .addr = addr, .payload = p, .plen = len};
    return raw_call(e, c, &x);
}

static mc_status_t raw_read(env_t *e, mc_rpc_client_t *c, uint64_t addr, uint64_t len, void *dst,
                            size_t room)
{
    raw_t x = {.method = MC_RPC_TE_READ,
               .has_addr = 1,
               .has_len = 1,
               .addr = addr,
               .len = len,
               .recv = dst,
               .room = room};
    mc_status_t st = raw_call(e, c, &x);
    if (st == MC_OK && x.got != len)
        return MC_ERR_TRANSFER_FAIL;
    return st;
}

/* ------------------------------------------------------- raw sockets */

static int raw_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static void send_all(int fd, const void *p, size_t len)
{
    const uint8_t *q = p;
    while (len > 0) {
        ssize_t n = send(fd, q, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* the peer may already have closed: that is what we test */
        q += n;
        len -= (size_t)n;
    }
}

/* 1 if the peer closes the connection within timeout_ms (any bytes it sends
 * before are skipped). */
static int closed_by_peer(int fd, int timeout_ms)
{
    uint64_t end = mc_now_ms() + (uint64_t)timeout_ms;
    while (mc_now_ms() < end) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 50) <= 0)
            continue;
        uint8_t buf[4096];
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return 1;
    }
    return 0;
}

/* Read exactly len bytes within timeout_ms; 0 on success. */
static int recv_exact(int fd, void *p, size_t len, int timeout_ms)
{
    uint8_t *q = p;
    uint64_t end = mc_now_ms() + (uint64_t)timeout_ms;
    while (len > 0 && mc_now_ms() < end) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 50) <= 0)
            continue;
        ssize_t n = recv(fd, q, len, 0);
        if (n <= 0)
            return -1;
        q += n;
        len -= (size_t)n;
    }
    return len == 0 ? 0 : -1;
}

static size_t frame(uint8_t *out, uint8_t kind, uint16_t method, uint64_t id, const void *body,
                    uint32_t blen, uint32_t plen)
{
    mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                        .kind = kind,
                        .method = method,
                        .req_id = id,
                        .body_len = blen,
                        .payload_len = plen};
    mc_frame_encode_hdr(out, &h);
    if (blen > 0)
        memcpy(out + MC_FRAME_HDR_LEN, body, blen);
    return MC_FRAME_HDR_LEN + blen;
}

/* The response header to request id on fd. */
static void expect_response(int fd, uint64_t id, mc_status_t st, uint32_t plen)
{
    uint8_t hb[MC_FRAME_HDR_LEN];
    mc_frame_hdr_t h;
    const char *reason = NULL;
    assert_int_equal(recv_exact(fd, hb, sizeof(hb), 5000), 0);
    assert_int_equal(mc_frame_decode_hdr(hb, sizeof(hb), NULL, &h, &reason), MC_OK);
    assert_int_equal(h.kind, MC_FRAME_RESPONSE);
    assert_int_equal(h.req_id, id);
    assert_int_equal(h.status, st);
    assert_int_equal(h.payload_len, plen);
}

/* ------------------------------------------------------ setup/teardown */

static int group_setup(void **state)
{
    static env_t e;
    memset(&e, 0, sizeof(e));
    signal(SIGPIPE, SIG_IGN);
    char bin[256];
    if (access(test_bin("te_target", bin, sizeof(bin)), X_OK) != 0) {
        fprintf(stderr, "FATAL: %s not found: build the tests first (make tests)\n", bin);
        return -1;
    }
    e.te = engine_new("p2p", NULL);
    e.src = mc_malloc(LOCAL_SIZE);
    e.dst = mc_malloc(LOCAL_SIZE);
    mc_te_buffer_t bufs[2] = {{e.src, LOCAL_SIZE}, {e.dst, LOCAL_SIZE}};
    if (e.src == NULL || e.dst == NULL || mc_te_register_batch(e.te, bufs, 2, "cpu:0", 0) != MC_OK)
        return -1;
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "raw";
    if (mc_reactor_group_create(&go, &e.g) != MC_OK)
        return -1;
    *state = &e;
    return 0;
}

static int group_teardown(void **state)
{
    env_t *e = *state;
    mc_te_destroy(e->te);
    mc_reactor_group_destroy(e->g);
    mc_free(e->src);
    mc_free(e->dst);
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    target_kill(&e->t);
    tc_master_stop(&e->master, SIGKILL);
    e->master.rpc_port = 0; /* the next test's master: fresh ports */
    tc_redis_stop(&e->redis, SIGKILL);
    e->redis.port = 0;
    return 0;
}

/* --------------------------------------------------------------- tests */

static void random_data_of_many_sizes_round_trips_byte_for_byte(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    target_start(t, NULL, NULL, 0, 64 * MIB + 64, 5);
    mc_te_segment_t seg = tt_open(e->te, t);

    /* what the target holds from the start, read from another process */
    mc_te_request_t r[3] = {tt_req(MC_TE_READ, e->dst, seg, t->addr, 100000),
                            tt_req(MC_TE_READ, e->dst + 200000, seg, t->addr + t->size - 77, 77),
                            tt_req(MC_TE_READ, e->dst + 300000, seg, t->addr2 + 3, t->size2 - 3)};
    assert_int_equal(run(e->te, r, 3), MC_OK);
    tt_check_pattern(e->dst, 100000, t->seed, 0);
    tt_check_pattern(e->dst + 200000, 77, t->seed, t->size - 77);
    tt_check_pattern(e->dst + 300000, t->size2 - 3, t->seed + 1, 3);

    /* one read answer is one frame: a peer asking for more than a frame may
     * carry is refused, and its connection stays usable */
    mc_rpc_client_t *c = raw_client(e, t->port);
    assert_int_equal(raw_read(e, c, t->addr, t->size, e->dst, LOCAL_SIZE), MC_ERR_LIMIT);
    assert_int_equal(raw_read(e, c, t->addr + 1, 1000, e->dst, LOCAL_SIZE), MC_OK);
    tt_check_pattern(e->dst, 1000, t->seed, 1);
    mc_rpc_client_destroy(c);

    static const size_t sizes[] = {1,     2,       3,       7,           100,     4095,
                                   4096,  4097,    65535,   65536,       65537,   81920,
                                   81921, MIB - 1, MIB + 3, 7 * MIB + 5, 64 * MIB};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t len = sizes[i];
        size_t loff = (i * 131) % 4096 + 1;
        uint64_t roff = ((uint64_t)i * 7919 + 3) % (t->size - len + 1);
        round_trip(e, e->te, seg, t->addr, loff, roff, len, 100 + i);
    }

    /* many small requests in one batch, at scattered unaligned places */
    enum { N = 300 };
    static mc_te_request_t w[N], rb[N];
    fill_random(e->src, 4 * MIB, 77);
    memset(e->dst, 0, 4 * MIB);
    for (size_t i = 0; i < N; i++) {
        size_t len = 1 + (i * 2654435761u) % 9000;
        size_t loff = i * 10000 + i % 7;
        uint64_t roff = (uint64_t)i * 200003 + 11;
        w[i] = tt_req(MC_TE_WRITE, e->src + loff, seg, t->addr + roff, len);
        rb[i] = tt_req(MC_TE_READ, e->dst + loff, seg, t->addr + roff, len);
    }
    assert_int_equal(run(e->te, w, N), MC_OK);
    assert_int_equal(run(e->te, rb, N), MC_OK);
    for (size_t i = 0; i < N; i++)
        if (memcmp(w[i].local, rb[i].local, w[i].length) != 0)
            fail_msg("request %zu of the batch did not round-trip", i);
    tt_stop_intact(t);
}

static void out_of_range_writes_are_refused_and_the_target_memory_is_unchanged(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    target_start(t, NULL, NULL, 0, 1 * MIB, 7);
    mc_te_segment_t seg = tt_open(e->te, t);
    uint64_t end = t->addr + t->size;
    uint8_t *junk = e->src;
    memset(junk, 0xEE, 8192);

    /* refused by the initiator before anything is sent */
    const mc_te_request_t bad[] = {
        tt_req(MC_TE_WRITE, junk, seg, end - 10, 100),       /* across the end */
        tt_req(MC_TE_WRITE, junk, seg, end, 1),              /* just past it */
        tt_req(MC_TE_WRITE, junk, seg, t->addr - 1, 2),      /* across the start */
        tt_req(MC_TE_WRITE, junk, seg, t->guard, 10),        /* registered, not remote */
        tt_req(MC_TE_WRITE, junk, seg, UINT64_MAX - 5, 100), /* address + length overflows */
        tt_req(MC_TE_WRITE, junk, seg, t->addr2 + t->size2 - 1, 2),
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mc_status_t st = run(e->te, &bad[i], 1);
        if (st != MC_ERR_ADDRESS_NOT_REGISTERED)
            fail_msg("bad write %zu: %s", i, mc_status_str(st));
    }
    mc_te_request_t unknown = tt_req(MC_TE_WRITE, junk, 4242, t->addr, 10);
    assert_int_equal(run(e->te, &unknown, 1), MC_ERR_INVALID_ARGUMENT);

    /* sent anyway, straight to the target: refused there, memory untouched */
    mc_rpc_client_t *c = raw_client(e, t->port);
    assert_int_equal(raw_write(e, c, end - 10, junk, 100), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(raw_write(e, c, end, junk, 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(raw_write(e, c, t->addr - 7, junk, 8), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(raw_write(e, c, t->guard, junk, 4096), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(raw_write(e, c, UINT64_MAX - 5, junk, 100), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(raw_write(e, c, t->addr2 + t->size2, junk, 4096), /* past B */
                     MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(raw_write(e, c, t->addr2 - 100, junk, 200), /* into B from guard1 */
                     MC_ERR_ADDRESS_NOT_REGISTERED);
    raw_t noaddr = {.method = MC_RPC_TE_WRITE, .payload = junk, .plen = 10};
    assert_int_equal(raw_call(e, c, &noaddr), MC_ERR_INVALID_PARAMS);
    uint8_t back[4096];
    /* reads are checked the same way; one whose end wraps to inside A is
     * over the frame limit anyway */
    assert_int_equal(raw_read(e, c, t->guard, 16, back, sizeof(back)),
                     MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(raw_read(e, c, end - 8, 16, back, sizeof(back)),
                     MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(raw_read(e, c, UINT64_MAX - 5, 100, back, sizeof(back)),
                     MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(raw_read(e, c, UINT64_MAX - 5, t->addr + 16, back, sizeof(back)),
                     MC_ERR_LIMIT);
    raw_t zero = {.method = MC_RPC_TE_READ,
                  .has_addr = 1,
                  .has_len = 1,
                  .addr = t->addr,
                  .recv = back,
                  .room = sizeof(back)};
    assert_int_equal(raw_call(e, c, &zero), MC_ERR_INVALID_PARAMS);
    /* the edges of A still hold their first contents */
    assert_int_equal(raw_read(e, c, end - sizeof(back), sizeof(back), back, sizeof(back)), MC_OK);
    tt_check_pattern(back, sizeof(back), t->seed, t->size - sizeof(back));
    assert_int_equal(raw_read(e, c, t->addr, sizeof(back), back, sizeof(back)), MC_OK);
    tt_check_pattern(back, sizeof(back), t->seed, 0);
    mc_rpc_client_destroy(c);

    /* a stale descriptor: B unregistered after we cached it; the write is
     * sent and the target refuses it */
    kill(t->p.pid, SIGUSR1);
    char line[64];
    assert_int_equal(test_proc_readline(&t->p, line, sizeof(line), 5000), 0);
    assert_string_equal(line, "unregistered");
    mc_te_request_t stale = tt_req(MC_TE_WRITE, junk, seg, t->addr2, 1000);
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(e->te, 1, &b), MC_OK);
    assert_int_equal(mc_te_submit(b, &stale, 1), MC_OK);
    assert_int_equal(mc_te_batch_wait(b, WAIT_US), MC_ERR_ADDRESS_NOT_REGISTERED);
    mc_te_status_t ts;
    assert_int_equal(mc_te_task_status(b, 0, &ts), MC_OK);
    assert_int_equal(ts.state, MC_TE_FAILED);
    assert_int_equal(ts.transferred, 0);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    tt_stop_intact(t); /* guards and B unchanged */
}

static void malformed_frames_are_disconnected_and_the_engine_keeps_serving(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    target_start(t, NULL, NULL, 0, 1 * MIB, 9);
    uint8_t f[512];
    size_t n;
    int fd;

    /* garbage */
    fd = raw_connect(t->port);
    memset(f, 0xAB, 64);
    send_all(fd, f, 64);
    assert_true(closed_by_peer(fd, 3000));
    close(fd);

    /* a response where requests are expected */
    fd = raw_connect(t->port);
    n = frame(f, MC_FRAME_RESPONSE, MC_RPC_TE_READ, 1, NULL, 0, 0);
    send_all(fd, f, n);
    assert_true(closed_by_peer(fd, 3000));
    close(fd);

    /* a body over the limit */
    fd = raw_connect(t->port);
    n = frame(f, MC_FRAME_REQUEST, MC_RPC_TE_WRITE, 1, NULL, 0, 0);
    f[20] = 0xff, f[21] = 0xff, f[22] = 0xff, f[23] = 0x7f; /* body_len */
    send_all(fd, f, n);
    assert_true(closed_by_peer(fd, 3000));
    close(fd);

    /* a payload over the limit */
    fd = raw_connect(t->port);
    n = frame(f, MC_FRAME_REQUEST, MC_RPC_TE_WRITE, 1, NULL, 0, 0xffffffffu);
    send_all(fd, f, n);
    assert_true(closed_by_peer(fd, 3000));
    close(fd);

    /* reserved header bits set */
    fd = raw_connect(t->port);
    n = frame(f, MC_FRAME_REQUEST, MC_RPC_TE_READ, 1, NULL, 0, 0);
    f[28] = 1;
    send_all(fd, f, n);
    assert_true(closed_by_peer(fd, 3000));
    close(fd);

    /* a write whose body is not msgpack, with a payload (the sink path) */
    fd = raw_connect(t->port);
    static const uint8_t notmp[3] = {0xc1, 0xc1, 0xc1};
    n = frame(f, MC_FRAME_REQUEST, MC_RPC_TE_WRITE, 1, notmp, 3, 16);
    memset(f + n, 0xEE, 16);
    send_all(fd, f, n + 16);
    assert_true(closed_by_peer(fd, 3000));
    close(fd);

    /* a read whose body is an array, not a map */
    fd = raw_connect(t->port);
    static const uint8_t arr[4] = {0x93, 1, 2, 3};
    n = frame(f, MC_FRAME_REQUEST, MC_RPC_TE_READ, 1, arr, 4, 0);
    send_all(fd, f, n);
    assert_true(closed_by_peer(fd, 3000));
    close(fd);

    /* a write cut off in its payload, then gone: the target just drops it */
    fd = raw_connect(t->port);
    uint8_t body[16];
    body[0] = 0x81; /* {ADDR: uint64} */
    body[1] = MC_F_ADDR;
    body[2] = 0xcf;
    uint64_t a = t->addr + t->size - 1000;
    for (int i = 0; i < 8; i++)
        body[3 + i] = (uint8_t)(a >> (56 - 8 * i));
    n = frame(f, MC_FRAME_REQUEST, MC_RPC_TE_WRITE, 1, body, 11, 1000);
    memset(f + n, 0xEE, 10);
    send_all(fd, f, n + 10);
    close(fd);

    /* well-formed frames with bad contents are answered, not disconnected */
    fd = raw_connect(t->port);
    static const uint8_t empty_map[1] = {0x80};
    n = frame(f, MC_FRAME_REQUEST, MC_RPC_TE_WRITE, 7, empty_map, 1, 16); /* no ADDR */
    memset(f + n, 0xEE, 16);
    send_all(fd, f, n + 16);
    expect_response(fd, 7, MC_ERR_INVALID_PARAMS, 0);
    n = frame(f, MC_FRAME_REQUEST, 4000, 8, NULL, 0, 0); /* no such method */
    send_all(fd, f, n);
    expect_response(fd, 8, MC_ERR_NO_METHOD, 0);
    n = frame(f, MC_FRAME_REQUEST, 0xffff, 9, NULL, 0, 0); /* beyond every method table */
    send_all(fd, f, n);
    expect_response(fd, 9, MC_ERR_NO_METHOD, 0);
    body[0] = 0x82; /* {ADDR: t->addr, LENGTH: 16} */
    a = t->addr;
    for (int i = 0; i < 8; i++)
        body[3 + i] = (uint8_t)(a >> (56 - 8 * i));
    body[11] = MC_F_LENGTH;
    body[12] = 16;
    n = frame(f, MC_FRAME_REQUEST, MC_RPC_TE_READ, 10, body, 13, 0);
    send_all(fd, f, n);
    expect_response(fd, 10, MC_OK, 16);
    uint8_t got[16];
    assert_int_equal(recv_exact(fd, got, sizeof(got), 5000), 0);
    tt_check_pattern(got, sizeof(got), t->seed, 0);
    close(fd);

    /* the engine still serves */
    mc_te_segment_t seg = tt_open(e->te, t);
    round_trip(e, e->te, seg, t->addr, 3, 5, 300000, 1);
    tt_stop_intact(t);
}

static void killing_the_target_fails_in_flight_requests_and_a_restart_is_reached_again(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    target_start(t, NULL, NULL, 0, 64 * MIB, 11);
    uint16_t port = t->port;
    mc_te_segment_t seg = tt_open(e->te, t);

    /* far more than can move before the kill, plus one local request */
    enum { N = 33 };
    mc_te_request_t r[N];
    for (int i = 0; i < N - 1; i++)
        r[i] = tt_req(i % 2 ? MC_TE_READ : MC_TE_WRITE, i % 2 ? e->dst : e->src, seg, t->addr,
                      t->size);
    r[N - 1] = tt_req(MC_TE_WRITE, e->src, MC_TE_LOCAL_SEGMENT, (uint64_t)(uintptr_t)e->dst, 4096);
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(e->te, N, &b), MC_OK);
    assert_int_equal(mc_te_submit(b, r, N), MC_OK);
    mc_te_status_t bs;
    for (int i = 0; i < 5000; i++) {
        assert_int_equal(mc_te_batch_status(b, &bs), MC_OK);
        if (bs.transferred > 4096) /* data is moving */
            break;
        usleep(1000);
    }
    assert_int_equal(bs.state, MC_TE_WAITING);
    uint64_t t0 = mc_now_us();
    target_kill(t);
    mc_status_t st = mc_te_batch_wait(b, TIMEOUT_US + 3000000);
    uint64_t took = mc_now_us() - t0;
    assert_int_not_equal(st, MC_ERR_TIMEOUT);
    assert_int_not_equal(st, MC_OK);
    if (took > TIMEOUT_US + 500000)
        fail_msg("in-flight requests took %llu ms to fail (timeout %u ms)",
                 (unsigned long long)took / 1000, TIMEOUT_US / 1000);
    int failed = 0;
    for (int i = 0; i < N; i++) {
        mc_te_status_t ts;
        assert_int_equal(mc_te_task_status(b, (size_t)i, &ts), MC_OK);
        assert_true(ts.state == MC_TE_COMPLETED || ts.state == MC_TE_FAILED ||
                    ts.state == MC_TE_TIMEOUT);
        if (i == N - 1)
            assert_int_equal(ts.state, MC_TE_COMPLETED);
        failed += ts.state != MC_TE_COMPLETED;
    }
    assert_true(failed > 0);
    print_message("killed target: %d of %d tasks failed, within %llu ms\n", failed, N,
                  (unsigned long long)took / 1000);
    assert_int_equal(mc_te_batch_free(b), MC_OK);

    /* while it is down, new requests fail fast */
    t0 = mc_now_us();
    mc_te_request_t w = tt_req(MC_TE_WRITE, e->src, seg, t->addr, 1000);
    assert_int_not_equal(run(e->te, &w, 1), MC_OK);
    assert_true(mc_now_us() - t0 < TIMEOUT_US);

    /* restarted on the same port (new memory, maybe new addresses) */
    target_start(t, NULL, NULL, port, 2 * MIB, 12);
    uint64_t deadline = mc_now_ms() + 5000;
    mc_te_request_t rd = tt_req(MC_TE_READ, e->dst, seg, t->addr, t->size);
    while ((st = run(e->te, &rd, 1)) != MC_OK && mc_now_ms() < deadline)
        usleep(20000); /* the lanes reconnect with backoff */
    assert_int_equal(st, MC_OK);
    tt_check_pattern(e->dst, t->size, t->seed, 0);
    round_trip(e, e->te, seg, t->addr, 1, 1, t->size - 1, 3);
    tt_stop_intact(t);
}

static void a_frozen_target_times_out_requests_and_serves_again_when_thawed(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    target_start(t, NULL, NULL, 0, 8 * MIB, 13);
    mc_te_segment_t seg = tt_open(e->te, t);
    round_trip(e, e->te, seg, t->addr, 0, 0, 4096, 1); /* lanes up */
    assert_int_equal(test_proc_freeze(t->p.pid), 0);
    mc_te_request_t r[2] = {tt_req(MC_TE_READ, e->dst, seg, t->addr, MIB),
                            tt_req(MC_TE_WRITE, e->src, seg, t->addr + MIB, 4 * MIB)};
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(e->te, 2, &b), MC_OK);
    uint64_t t0 = mc_now_us();
    assert_int_equal(mc_te_submit(b, r, 2), MC_OK);
    assert_int_equal(mc_te_batch_wait(b, WAIT_US), MC_ERR_RPC_TIMEOUT);
    uint64_t took = mc_now_us() - t0;
    if (took < TIMEOUT_US * 9 / 10 || took > TIMEOUT_US + 1000000)
        fail_msg("requests to a frozen target failed after %llu ms (timeout %u ms)",
                 (unsigned long long)took / 1000, TIMEOUT_US / 1000);
    for (size_t i = 0; i < 2; i++) {
        mc_te_status_t ts;
        assert_int_equal(mc_te_task_status(b, i, &ts), MC_OK);
        assert_int_equal(ts.state, MC_TE_TIMEOUT);
    }
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    kill(t->p.pid, SIGCONT);
    /* its late answers are dropped; new requests go through */
    uint64_t deadline = mc_now_ms() + 5000;
    mc_status_t st;
    mc_te_request_t rd = tt_req(MC_TE_READ, e->dst, seg, t->addr + 5 * MIB, 3 * MIB);
    while ((st = run(e->te, &rd, 1)) != MC_OK && mc_now_ms() < deadline)
        usleep(20000);
    assert_int_equal(st, MC_OK);
    tt_check_pattern(e->dst, 3 * MIB, t->seed, 5 * MIB);
    round_trip(e, e->te, seg, t->addr, 7, 9, 2 * MIB + 1, 4);
    tt_stop_intact(t);
}

/* Engines that find each other through a metadata service: the target
 * publishes under its name, a second engine in this process opens it by
 * name; once the target stops, its name is gone. */
static void transfer_through_metadata(env_t *e, const char *conn, const char *tag)
{
    target_t *t = &e->t;
    char tname[64], iname[64], iname2[64];
    snprintf(tname, sizeof(tname), "te-target-%s-%d", tag, (int)getpid());
    snprintf(iname, sizeof(iname), "te-init-%s-%d", tag, (int)getpid());
    snprintf(iname2, sizeof(iname2), "te-late-%s-%d", tag, (int)getpid());
    target_start(t, conn, tname, 0, 4 * MIB, 17);
    assert_string_equal(t->name, tname);
    mc_te_t *te = engine_new(conn, iname);
    uint8_t *buf = mc_malloc(4 * MIB);
    assert_int_equal(mc_te_register(te, buf, 4 * MIB, NULL, 0), MC_OK);
    mc_te_segment_t seg = tt_open(te, t);
    mc_te_segment_t again = 0;
    assert_int_equal(mc_te_open_segment(te, tname, &again), MC_OK);
    assert_int_equal(again, seg);
    mc_te_segment_t none = 0;
    assert_int_equal(mc_te_open_segment(te, "no-such-segment", &none), MC_ERR_NOT_FOUND);

    mc_te_request_t rd = tt_req(MC_TE_READ, buf, seg, t->addr, 4 * MIB);
    assert_int_equal(run(te, &rd, 1), MC_OK);
    tt_check_pattern(buf, 4 * MIB, t->seed, 0);
    fill_random(buf, 4 * MIB, 5);
    mc_te_request_t w = tt_req(MC_TE_WRITE, buf + 1, seg, t->addr + 3, 4 * MIB - 7);
    assert_int_equal(run(te, &w, 1), MC_OK);
    memcpy(e->src, buf, 4 * MIB);
    memset(buf, 0, 4 * MIB);
    rd = tt_req(MC_TE_READ, buf + 1, seg, t->addr + 3, 4 * MIB - 7);
    assert_int_equal(run(te, &rd, 1), MC_OK);
    assert_memory_equal(buf + 1, e->src + 1, 4 * MIB - 7);

    tt_stop_intact(t); /* unpublishes */
    mc_te_t *late = engine_new(conn, iname2);
    assert_int_equal(mc_te_open_segment(late, tname, &none), MC_ERR_NOT_FOUND);
    mc_te_destroy(late);
    mc_te_destroy(te);
    mc_free(buf);
}

static void start_master(env_t *e, char *conn, size_t len)
{
    /* a killed target's entries are its own until it expires: client_ttl
     * short, so the restarted one (another owner) takes its name soon */
    const char *const ms[] = {"server.http_enabled=false", "server.tick_interval=100ms",
                              "master.client_ttl=1s", "log.level=warn", NULL};
    assert_int_equal(tc_master_start(&e->master, ms), 0);
    snprintf(conn, len, "master://127.0.0.1:%u", e->master.rpc_port);
}

static void master_mode_end_to_end(void **state)
{
    env_t *e = *state;
    char conn[64];
    start_master(e, conn, sizeof(conn));
    transfer_through_metadata(e, conn, "master");
}

/* With a metadata service a segment is a name, not a port: a target that
 * restarts on another port under the same name is reached again through the
 * handle opened before, whether its buffers come back at the same addresses
 * (no sign but the dead connection that it moved) or elsewhere. */
static void master_mode_a_target_restarted_elsewhere_is_reached_again(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    char conn[64], tname[64];
    start_master(e, conn, sizeof(conn));
    snprintf(tname, sizeof(tname), "te-moving-%d", (int)getpid());
    mc_te_t *te = engine_new(conn, NULL);
    uint8_t *buf = mc_malloc(4 * MIB);
    assert_int_equal(mc_te_register(te, buf, 4 * MIB, NULL, 0), MC_OK);
    mc_te_segment_t seg = 0;
    uint16_t old_port = 0;
    uint64_t old_addr = 0;
    static const uint64_t sizes[] = {4 * MIB, 4 * MIB, 2 * MIB};
    for (unsigned k = 0; k < 3; k++) {
        target_start_opt(t, conn, tname, 0, sizes[k], 21 + k, "--no-aslr");
        for (int again = 0; t->port == old_port && again < 5; again++) {
            /* the kernel handed out the old port again: that is no move */
            target_kill(t);
            target_start_opt(t, conn, tname, 0, sizes[k], 21 + k, "--no-aslr");
        }
        assert_int_not_equal(t->port, old_port);
        if (k == 0) {
            seg = tt_open(te, t);
        } else {
            print_message("restart %u: buffer %s\n", k,
                          t->addr == old_addr ? "at the same address" : "elsewhere");
        }
        mc_te_request_t rd = tt_req(MC_TE_READ, buf, seg, t->addr, t->size);
        /* generous: a loaded CI machine is slow to re-publish and reconnect */
        uint64_t deadline = mc_now_ms() + 15000;
        mc_status_t st;
        while ((st = run(te, &rd, 1)) != MC_OK && mc_now_ms() < deadline)
            usleep(50000);
        if (st != MC_OK)
            fail_msg("start %u of the target (port %u) not reached: %s", k, t->port,
                     mc_status_str(st));
        tt_check_pattern(buf, t->size, t->seed, 0);
        old_port = t->port;
        old_addr = t->addr;
        target_kill(t);
    }
    mc_te_destroy(te);
    mc_free(buf);
}

static void redis_mode_end_to_end(void **state)
{
    env_t *e = *state;
    char conn[64];
    assert_int_equal(tc_redis_start(&e->redis), 0);
    snprintf(conn, sizeof(conn), "redis://127.0.0.1:%u", e->redis.port);
    transfer_through_metadata(e, conn, "redis");
}

int main(void)
{
    /* TEST_LOG=debug (or "warn,transport=debug,tcp=debug") to see more;
     * TE_LOG does the same for the targets */
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "err", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(random_data_of_many_sizes_round_trips_byte_for_byte, teardown),
        cmocka_unit_test_teardown(
            out_of_range_writes_are_refused_and_the_target_memory_is_unchanged, teardown),
        cmocka_unit_test_teardown(malformed_frames_are_disconnected_and_the_engine_keeps_serving,
                                  teardown),
        cmocka_unit_test_teardown(
            killing_the_target_fails_in_flight_requests_and_a_restart_is_reached_again, teardown),
        cmocka_unit_test_teardown(a_frozen_target_times_out_requests_and_serves_again_when_thawed,
                                  teardown),
        cmocka_unit_test_teardown(master_mode_end_to_end, teardown),
        cmocka_unit_test_teardown(master_mode_a_target_restarted_elsewhere_is_reached_again,
                                  teardown),
        cmocka_unit_test_teardown(redis_mode_end_to_end, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
