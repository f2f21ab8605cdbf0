/*
 * The store client end to end: a real mooncake-master, two real
 * mooncake-store-server processes (storage nodes, 128 MiB each) and this
 * process as a pure client (no segment, a 32 MiB staging buffer, so values
 * larger than that travel in pieces).
 *
 * Bad keys fail before any RPC; values of many sizes (1 B .. 16 MiB, and
 * 64 MiB once) round-trip byte for byte, through staging and zero-copy;
 * misuse gets upstream's statuses; two replicas land on the two nodes; batch,
 * async and four-thread calls work; closing a busy client calls every
 * callback once; a segment mounted at run time serves local replicas (memcpy
 * both ways) until unmounted; a put abandoned between PutStart and PutEnd
 * (its client killed) is discarded by the master and leaves nothing behind;
 * a put whose write timed out on a hung node is not revoked (the write may
 * still land) but left to the master; filling the pool evicts old objects
 * and keeps serving; with the master hung or down calls fail within the RPC
 * timeout and work again once a new master is up and the nodes re-mounted;
 * a SIGKILLed node's two-replica objects stay readable (gets fail over) and
 * later puts land on the survivor.
 *
 * One master and two nodes serve every test, in order (the last tests
 * restart the master and kill a node). master.client_ttl is 3 s so that a
 * dead node is noticed quickly; put_start_discard_timeout is 1 s; leases
 * last 1 s (unmounting waits for them).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <assert.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "mooncake/store.h"
#include "proc.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/master_client.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MIB (1ull << 20)
#define NODE_SEGMENT "128MiB"
#define NODE_SEGMENT_BYTES (128 * MIB)
#define STAGING (32 * MIB)
/* ThreadSanitizer slows everything ~5-10x: stretch the master's clocks
 * (puts must finish within the discard timeout, reads within the lease) and
 * the waits with it. */
#if defined(__SANITIZE_THREAD__)
#define SLOW 5
#else
#define SLOW 1
#endif
#define RPC_TIMEOUT_US (2000000 * SLOW)
#define START_TIMEOUT_MS (15000 * SLOW)
#define NNODES 2

typedef struct env {
    test_proc_t master;
    unsigned rpc_port, http_port;
    test_proc_t node[NNODES];
    char node_name[NNODES][256];
    mc_store_t *s;
    char self[256]; /* path of this test binary (for the zombie helper) */
} env_t;

/* --------------------------------------------------------------- helpers */

static unsigned free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t alen = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static int port_open(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* Start the master on e->rpc_port (chosen here when 0). 0 once it accepts. */
static int start_master(env_t *e)
{
    char bin[256], rpc[64], http[64], ttl[64], discard[64], release[64], lease[64];
    snprintf(ttl, sizeof(ttl), "master.client_ttl=%ds", 3 * SLOW);
    snprintf(discard, sizeof(discard), "master.put_start_discard_timeout=%ds", 1 * SLOW);
    snprintf(release, sizeof(release), "master.put_start_release_timeout=%ds", 2 * SLOW);
    snprintf(lease, sizeof(lease), "master.lease_ttl=%ds", 1 * SLOW);
    if (e->rpc_port == 0)
        e->rpc_port = free_port();
    do
        e->http_port = free_port();
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
                    ttl,
                    "--set",
                    discard,
                    "--set",
                    release,
                    "--set",
                    lease,
                    "--set",
                    getenv("TEST_MASTER_LOG") ? getenv("TEST_MASTER_LOG") : "log.level=error",
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
        if (port_open(e->rpc_port))
            return 0;
        usleep(10000);
    }
    test_proc_stop(&e->master, SIGKILL, 1000);
    return -1;
}

/* Start storage node i; 0 once it printed "ready <name>". */
static int start_node(env_t *e, int i)
{
    char bin[256], master[64], port[64], name[64], rpc_to[64];
    unsigned p = free_port();
    snprintf(rpc_to, sizeof(rpc_to), "store.rpc_timeout=%ds", 2 * SLOW);
    snprintf(master, sizeof(master), "store.master=127.0.0.1:%u", e->rpc_port);
    snprintf(port, sizeof(port), "store.port=%u", p);
    snprintf(name, sizeof(name), "store.local_hostname=127.0.0.1:%u", p);
    char *argv[] = {(char *)test_prog("mooncake-store-server", bin, sizeof(bin)),
                    "--set",
                    master,
                    "--set",
                    port,
                    "--set",
                    name,
                    "--set",
                    "store.global_segment_size=" NODE_SEGMENT,
                    "--set",
                    "store.reactors=1",
                    "--set",
                    rpc_to,
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

static mc_status_t open_client(unsigned master_port, uint64_t rpc_timeout, mc_store_t **out)
{
    char master[64];
    snprintf(master, sizeof(master), "127.0.0.1:%u", master_port);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.global_segment_size = 0;
    c.local_buffer_size = STAGING;
    c.reactors = 2;
    c.rpc_timeout_us = rpc_timeout;
    c.transfer_timeout_us = 5000000;
    return mc_store_open(&c, out);
}

static int setup(void **state)
{
    static env_t e;
    signal(SIGPIPE, SIG_IGN);
    ssize_t sl = readlink("/proc/self/exe", e.self, sizeof(e.self) - 1);
    assert_true(sl > 0);
    e.self[sl] = '\0';
    int ok = -1;
    for (int attempt = 0; attempt < 5 && ok != 0; attempt++) {
        e.rpc_port = 0;
        ok = start_master(&e);
    }
    assert_int_equal(ok, 0);
    for (int i = 0; i < NNODES; i++) {
        ok = -1;
        for (int attempt = 0; attempt < 3 && ok != 0; attempt++)
            ok = start_node(&e, i);
        assert_int_equal(ok, 0);
    }
    assert_int_equal(open_client(e.rpc_port, RPC_TIMEOUT_US, &e.s), MC_OK);
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
    return 0;
}

/* Deterministic bytes for (seed, offset). */
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

static void key_of(char *k, size_t room, const char *prefix, unsigned long i)
{
    snprintf(k, room, "%s-%lu", prefix, i);
}

/* Put then get back, byte for byte. */
static void round_trip(mc_store_t *s, const char *key, size_t len, uint32_t replicas)
{
    uint8_t *v = malloc(len), *back = malloc(len + 16);
    assert_non_null(v);
    assert_non_null(back);
    fill(v, len, len ^ strlen(key));
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = replicas;
    assert_int_equal(mc_store_put(s, key, strlen(key), v, len, &rc), MC_OK);
    memset(back, 0xee, len + 16);
    int64_t got = mc_store_get(s, key, strlen(key), back, len + 16, NULL);
    assert_int_equal(got, (int64_t)len);
    assert_memory_equal(back, v, len);
    assert_int_equal(back[len], 0xee); /* nothing written past the object */
    free(v);
    free(back);
}

/* ------------------------------------------------------------------ tests */

static void bad_keys_and_values_fail_at_once_without_asking_the_master(void **state)
{
    env_t *e = *state;
    /* A client whose master does not exist: any RPC would fail with a
     * connection status, so these statuses prove none was sent. Opening
     * works anyway (the master may come later). */
    mc_store_t *lost;
    unsigned dead = free_port();
    assert_int_equal(open_client(dead, RPC_TIMEOUT_US, &lost), MC_OK);
    char big[4097];
    memset(big, 'k', sizeof(big));
    uint8_t v[16] = {1};
    uint8_t out[16];
    mc_store_t *both[2] = {e->s, lost};
    for (int i = 0; i < 2; i++) {
        mc_store_t *s = both[i];
        uint64_t t0 = mc_now_ms();
        assert_int_equal(mc_store_put(s, "", 0, v, sizeof(v), NULL), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_put(s, big, sizeof(big), v, sizeof(v), NULL), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_put(s, "a\0b", 3, v, sizeof(v), NULL), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_put(s, "k", 1, v, 0, NULL), MC_ERR_INVALID_PARAMS);
        mc_replicate_config_t rc;
        mc_replicate_config_init(&rc);
        rc.replica_num = 0;
        assert_int_equal(mc_store_put(s, "k", 1, v, sizeof(v), &rc), MC_ERR_INVALID_PARAMS);
        assert_int_equal(mc_store_get(s, "", 0, out, sizeof(out), NULL), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_get(s, big, sizeof(big), out, sizeof(out), NULL),
                         MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_exist(s, "", 0), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_remove(s, big, sizeof(big), 0), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_store_get_size(s, "", 0), MC_ERR_INVALID_KEY);
        assert_true(mc_now_ms() - t0 < 200 * SLOW);
    }
    /* the longest legal key is fine */
    round_trip(e->s, "x", 1, 1);
    char *k4096 = malloc(4097);
    memset(k4096, 'q', 4096);
    k4096[4096] = '\0';
    round_trip(e->s, k4096, 100, 1);
    assert_int_equal(mc_store_remove(e->s, k4096, 4096, 1), MC_OK);
    assert_int_equal(mc_store_remove(e->s, "x", 1, 1), MC_OK);
    free(k4096);
    /* with no master, real calls fail with a connection status in time */
    uint64_t t0 = mc_now_ms();
    mc_status_t st = mc_store_put(lost, "k", 1, v, sizeof(v), NULL);
    assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
    assert_true(mc_now_ms() - t0 < RPC_TIMEOUT_US / 1000 + 1000);
    mc_store_close(lost);
}

static void values_of_many_sizes_round_trip_byte_for_byte(void **state)
{
    env_t *e = *state;
    static const size_t sizes[] = {
        1,     2,     7,     8,     9,           100,     4095,         4096,    4097,
        65535, 65536, 65537, 81920, 1 * MIB + 3, 4 * MIB, 16 * MIB - 1, 16 * MIB};
    char key[64];
    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        key_of(key, sizeof(key), "size", sizes[i]);
        round_trip(e->s, key, sizes[i], 1);
        assert_int_equal(mc_store_get_size(e->s, key, strlen(key)), (int64_t)sizes[i]);
    }
    /* 64 MiB: twice the staging buffer, so it travels in pieces both ways */
    round_trip(e->s, "size-64MiB", 64 * MIB, 1);
    assert_int_equal(mc_store_remove(e->s, "size-64MiB", 10, 1), MC_OK);
    assert_true(mc_store_remove_by_regex(e->s, "^size-", 1) >= (int64_t)MC_ARRAY_SIZE(sizes));
}

/* Over tcp, unregistered buffers are used in place; a transport that needs
 * registered memory copies through the staging buffer instead, in windows
 * of its size: MC_STORE_STAGING=always makes this client do the same. */
static void values_round_trip_through_the_staging_buffer(void **state)
{
    env_t *e = *state;
    mc_store_t *s;
    char master[64];
    snprintf(master, sizeof(master), "127.0.0.1:%u", e->rpc_port);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.local_buffer_size = 2 * MIB; /* small: the space these tests use stays parked a while */
    c.reactors = 2;
    setenv("MC_STORE_STAGING", "always", 1);
    mc_status_t st = mc_store_open(&c, &s);
    unsetenv("MC_STORE_STAGING");
    assert_int_equal(st, MC_OK);
    static const size_t sizes[] = {1, 4097, 65537, 1 * MIB + 3, 2 * MIB};
    char key[64];
    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        key_of(key, sizeof(key), "staged", sizes[i]);
        round_trip(s, key, sizes[i], 1);
    }
    /* 5 MiB + 3: over twice the staging buffer, so it travels in pieces both ways */
    round_trip(s, "staged-5MiB", 5 * MIB + 3, 1);
    /* a batch that does not fit the staging buffer at once */
    enum { NB = 3 };
    mc_slice_t keys[NB], vals[NB], outs[NB];
    mc_status_t sts[NB];
    int64_t res[NB];
    char names[NB][24];
    for (int i = 0; i < NB; i++) {
        snprintf(names[i], sizeof(names[i]), "staged-b%d", i);
        keys[i] = (mc_slice_t){names[i], strlen(names[i])};
        vals[i] = (mc_slice_t){malloc(1 * MIB), 1 * MIB};
        outs[i] = (mc_slice_t){malloc(1 * MIB), 1 * MIB};
        fill(vals[i].ptr, vals[i].len, (uint64_t)i * 77);
    }
    assert_int_equal(mc_store_batch_put(s, keys, vals, NB, NULL, sts), MC_OK);
    assert_int_equal(mc_store_batch_get(s, keys, outs, NB, res), MC_OK);
    for (int i = 0; i < NB; i++) {
        assert_int_equal(sts[i], MC_OK);
        assert_int_equal(res[i], (int64_t)(1 * MIB));
        assert_memory_equal(outs[i].ptr, vals[i].ptr, 1 * MIB);
        free(vals[i].ptr);
        free(outs[i].ptr);
    }
    assert_true(mc_store_remove_by_regex(s, "^staged-", 1) >= (int64_t)MC_ARRAY_SIZE(sizes) + NB);
    mc_store_close(s);
}

static void registered_buffers_and_parts_round_trip_without_staging(void **state)
{
    env_t *e = *state;
    size_t len = 3 * MIB + 5;
    uint8_t *reg = aligned_alloc(4096, 8 * MIB);
    assert_non_null(reg);
    assert_int_equal(mc_store_register_buffer(e->s, reg, 8 * MIB), MC_OK);
    fill(reg, len, 42);
    assert_int_equal(mc_store_put_from(e->s, "zc", 2, reg, len, NULL), MC_OK);
    uint8_t *dst = reg + 4 * MIB;
    memset(dst, 0, len);
    assert_int_equal(mc_store_get_into(e->s, "zc", 2, dst, 4 * MIB), (int64_t)len);
    assert_memory_equal(dst, reg, len);
    /* the zero-copy forms insist on registered memory */
    uint8_t plain[64];
    assert_int_equal(mc_store_put_from(e->s, "zc2", 3, plain, sizeof(plain), NULL),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_get_into(e->s, "zc", 2, plain, sizeof(plain)), MC_ERR_INVALID_PARAMS);
    /* a plain get into too small a registered buffer reports the size */
    uint64_t need = 0;
    assert_int_equal(mc_store_get(e->s, "zc", 2, dst, 100, &need), MC_ERR_BUFFER_OVERFLOW);
    assert_int_equal(need, len);
    assert_int_equal(mc_store_unregister_buffer(e->s, reg), MC_OK);
    assert_int_equal(mc_store_unregister_buffer(e->s, reg), MC_ERR_ADDRESS_NOT_REGISTERED);

    /* gather: the value is the concatenation of the parts */
    uint8_t *whole = malloc(len), *back = malloc(len);
    fill(whole, len, 7);
    mc_slice_t parts[3] = {{whole, 1}, {whole + 1, MIB}, {whole + 1 + MIB, len - 1 - MIB}};
    assert_int_equal(mc_store_put_parts(e->s, "parts", 5, parts, 3, NULL), MC_OK);
    assert_int_equal(mc_store_get(e->s, "parts", 5, back, len, NULL), (int64_t)len);
    assert_memory_equal(back, whole, len);
    free(whole);
    free(back);
    free(reg);
    assert_int_equal(mc_store_remove(e->s, "zc", 2, 1), MC_OK);
    assert_int_equal(mc_store_remove(e->s, "parts", 5, 1), MC_OK);
}

static void misuse_gets_upstream_statuses(void **state)
{
    env_t *e = *state;
    uint8_t buf[256], v[200];
    fill(v, sizeof(v), 1);
    assert_int_equal(mc_store_get(e->s, "missing", 7, buf, sizeof(buf), NULL),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_exist(e->s, "missing", 7), 0);
    assert_int_equal(mc_store_get_size(e->s, "missing", 7), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_remove(e->s, "missing", 7, 0), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_store_put(e->s, "m", 1, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(mc_store_exist(e->s, "m", 1), 1);
    assert_int_equal(mc_store_put(e->s, "m", 1, v, sizeof(v), NULL), MC_ERR_OBJECT_ALREADY_EXISTS);
    uint64_t need = 0;
    assert_int_equal(mc_store_get(e->s, "m", 1, buf, 199, &need), MC_ERR_BUFFER_OVERFLOW);
    assert_int_equal(need, 200);
    /* a get leaves a lease: a plain remove is refused, a forced one is not */
    assert_int_equal(mc_store_get(e->s, "m", 1, buf, sizeof(buf), NULL), 200);
    assert_int_equal(mc_store_remove(e->s, "m", 1, 0), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(mc_store_remove(e->s, "m", 1, 1), MC_OK);
    assert_int_equal(mc_store_get(e->s, "m", 1, buf, sizeof(buf), NULL), MC_ERR_OBJECT_NOT_FOUND);
    /* exist does not lease: remove right after works */
    assert_int_equal(mc_store_put(e->s, "m2", 2, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(mc_store_exist(e->s, "m2", 2), 1);
    assert_int_equal(mc_store_remove(e->s, "m2", 2, 0), MC_OK);
    assert_int_equal(mc_store_remove_by_regex(e->s, "(", 0), MC_ERR_INVALID_PARAMS);
}

/* Space of objects force-removed while leased (by the tests before) is
 * reused only when their lease (1 s) ends: wait for it before tests that
 * need most of the pool, or they fail for space when the machine is fast. */
static void wait_parked_space(void)
{
    usleep(1100000 * SLOW);
}

static void two_replicas_land_on_the_two_nodes(void **state)
{
    env_t *e = *state;
    wait_parked_space();
    round_trip(e->s, "two", 5 * MIB, 2);
    mc_store_replica_t r[4];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(e->s, "two", 3, r, 4, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_string_not_equal(r[0].segment, r[1].segment);
    for (uint32_t i = 0; i < n; i++) {
        assert_true(r[i].complete);
        assert_int_equal(r[i].size, 5 * MIB);
        assert_true(strcmp(r[i].segment, e->node_name[0]) == 0 ||
                    strcmp(r[i].segment, e->node_name[1]) == 0);
    }
    /* more replicas than nodes: best effort */
    round_trip(e->s, "three", 1000, 3);
    assert_int_equal(mc_store_query(e->s, "three", 5, r, 4, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(mc_store_remove_all(e->s, 1), 2);
}

static void batch_calls_report_each_key(void **state)
{
    env_t *e = *state;
    enum { N = 6 };
    char kbuf[N][16];
    mc_slice_t keys[N], vals[N], bufs[N];
    uint8_t *data[N], *back[N];
    for (int i = 0; i < N; i++) {
        snprintf(kbuf[i], sizeof(kbuf[i]), "b%d", i);
        keys[i] = (mc_slice_t){kbuf[i], strlen(kbuf[i])};
        size_t len = (size_t)(i + 1) * 100000;
        data[i] = malloc(len);
        back[i] = malloc(len);
        fill(data[i], len, (uint64_t)i);
        vals[i] = (mc_slice_t){data[i], len};
        bufs[i] = (mc_slice_t){back[i], len};
    }
    keys[3] = (mc_slice_t){"", 0}; /* one bad key */
    mc_status_t st[N];
    assert_int_equal(mc_store_batch_put(e->s, keys, vals, N, NULL, st), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], i == 3 ? MC_ERR_INVALID_KEY : MC_OK);
    /* again: they exist now */
    assert_int_equal(mc_store_batch_put(e->s, keys, vals, 2, NULL, st), MC_OK);
    assert_int_equal(st[0], MC_ERR_OBJECT_ALREADY_EXISTS);
    int ex[N];
    assert_int_equal(mc_store_batch_exist(e->s, keys, N, ex), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(ex[i], i == 3 ? MC_ERR_INVALID_KEY : 1);
    int64_t res[N];
    assert_int_equal(mc_store_batch_get(e->s, keys, bufs, N, res), MC_OK);
    for (int i = 0; i < N; i++) {
        if (i == 3) {
            assert_int_equal(res[i], MC_ERR_INVALID_KEY);
            continue;
        }
        assert_int_equal(res[i], (int64_t)vals[i].len);
        assert_memory_equal(back[i], data[i], vals[i].len);
    }
    assert_int_equal(mc_store_batch_remove(e->s, keys, N, 1, st), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], i == 3 ? MC_ERR_INVALID_KEY : MC_OK);
    assert_int_equal(mc_store_batch_exist(e->s, keys, N, ex), MC_OK);
    assert_int_equal(ex[0], 0);

    /* values that do not fit the staging buffer together: still one call */
    wait_parked_space();
    mc_slice_t bk[3], bv[3];
    uint8_t *big = malloc(20 * MIB);
    fill(big, 20 * MIB, 99);
    for (int i = 0; i < 3; i++) {
        snprintf(kbuf[i], sizeof(kbuf[i]), "big%d", i);
        bk[i] = (mc_slice_t){kbuf[i], strlen(kbuf[i])};
        bv[i] = (mc_slice_t){big, 20 * MIB};
    }
    assert_int_equal(mc_store_batch_put(e->s, bk, bv, 3, NULL, st), MC_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(st[i], MC_OK);
    uint8_t *bb = malloc(20 * MIB);
    assert_int_equal(mc_store_get(e->s, "big2", 4, bb, 20 * MIB, NULL), (int64_t)(20 * MIB));
    assert_memory_equal(bb, big, 20 * MIB);
    free(bb);
    free(big);
    assert_int_equal(mc_store_remove_by_regex(e->s, "^big", 1), 3);
    for (int i = 0; i < N; i++) {
        free(data[i]);
        free(back[i]);
    }
}

/* mc_store_get_alloc's allocator: records the size it was asked for. */
typedef struct alloc_rec {
    uint64_t size;
    int calls;
    void *p;
} alloc_rec_t;

static void *rec_alloc(void *arg, uint64_t size)
{
    alloc_rec_t *r = arg;
    r->size = size;
    r->calls++;
    r->p = malloc(size);
    return r->p;
}

static void upserts_pieces_allocs_and_sizes(void **state)
{
    env_t *e = *state;
    uint8_t a[1000], b[3000], out[4000];
    fill(a, sizeof(a), 1);
    fill(b, sizeof(b), 2);
    /* upsert replaces what put keeps */
    assert_int_equal(mc_store_put(e->s, "u", 1, a, sizeof(a), NULL), MC_OK);
    assert_int_equal(mc_store_put(e->s, "u", 1, b, sizeof(b), NULL), MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_store_upsert(e->s, "u", 1, b, sizeof(b), NULL), MC_OK);
    assert_int_equal(mc_store_get(e->s, "u", 1, out, sizeof(out), NULL), (int64_t)sizeof(b));
    assert_memory_equal(out, b, sizeof(b));
    mc_slice_t two[2] = {{a, 10}, {b, 20}};
    assert_int_equal(mc_store_upsert_parts(e->s, "u", 1, two, 2, NULL), MC_OK);
    assert_int_equal(mc_store_get(e->s, "u", 1, out, sizeof(out), NULL), 30);
    assert_memory_equal(out, a, 10);
    assert_memory_equal(out + 10, b, 20);

    /* upstream's soft pin rules, checked before any RPC */
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.has_soft_pin_ttl = 1;
    rc.soft_pin_ttl_ms = 1000;
    assert_int_equal(mc_store_put(e->s, "p", 1, a, 10, &rc), MC_ERR_INVALID_PARAMS);
    rc.soft_pin_action = 7;
    assert_int_equal(mc_store_put(e->s, "p", 1, a, 10, &rc), MC_ERR_INVALID_PARAMS);
    rc.soft_pin_action = MC_SOFT_PIN_ENABLE;
    rc.with_hard_pin = 1;
    assert_int_equal(mc_store_put(e->s, "p", 1, a, 10, &rc), MC_OK);

    /* values in pieces: key i in i + 1 pieces, read back into other layouts */
    enum { N = 3 };
    mc_slice_t keys[N] = {{"pa", 2}, {"pb", 2}, {"pc", 2}};
    mc_slice_t parts[6];
    size_t np[N] = {1, 2, 3};
    uint8_t *src = malloc(600000), *dst = malloc(600000);
    fill(src, 600000, 3);
    size_t at = 0, off = 0;
    for (int i = 0; i < N; i++)
        for (size_t q = 0; q < np[i]; q++) {
            size_t len = 1000 * (at + 1) + 7;
            parts[at++] = (mc_slice_t){src + off, len};
            off += len;
        }
    mc_status_t st[N];
    assert_int_equal(mc_store_batch_put_parts(e->s, keys, parts, np, N, NULL, st), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], MC_OK);
    /* back as one piece each: the concatenations */
    int64_t sizes[N + 1];
    mc_slice_t sk[N + 1] = {keys[0], keys[1], keys[2], {"nosuch", 6}};
    assert_int_equal(mc_store_batch_get_size(e->s, sk, N + 1, sizes), MC_OK);
    assert_int_equal(sizes[0], 1007);
    assert_int_equal(sizes[1], 2007 + 3007);
    assert_int_equal(sizes[2], 4007 + 5007 + 6007);
    assert_int_equal(sizes[3], MC_ERR_OBJECT_NOT_FOUND);
    mc_slice_t one[N];
    for (int i = 0, o = 0; i < N; i++) {
        one[i] = (mc_slice_t){dst + o, (size_t)sizes[i]};
        o += (int)sizes[i];
    }
    int64_t res[N];
    memset(dst, 0, 600000);
    assert_int_equal(mc_store_batch_get_parts(e->s, keys, one, (size_t[]){1, 1, 1}, N, res),
                     MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(res[i], sizes[i]);
    assert_memory_equal(dst, src, off);
    /* scattered over pieces of other sizes (key pc: 3 pieces -> 2, the
     * second one larger than needed) */
    mc_slice_t sc[2] = {{dst, 100}, {dst + 100, 20000}};
    memset(dst, 0, 600000);
    assert_int_equal(mc_store_batch_get_parts(e->s, &keys[2], sc, (size_t[]){2}, 1, res), MC_OK);
    assert_int_equal(res[0], sizes[2]);
    assert_memory_equal(dst, src + 1007 + 2007 + 3007, (size_t)sizes[2]);
    /* too little room: BUFFER_OVERFLOW */
    mc_slice_t small[1] = {{dst, 10}};
    assert_int_equal(mc_store_batch_get_parts(e->s, &keys[1], small, (size_t[]){1}, 1, res),
                     MC_OK);
    assert_int_equal(res[0], MC_ERR_BUFFER_OVERFLOW);
    /* a batch upsert of pieces replaces them */
    assert_int_equal(mc_store_batch_upsert_parts(e->s, keys, parts + 3, (size_t[]){1, 1, 1}, N,
                                                 NULL, st),
                     MC_OK);
    assert_int_equal(mc_store_batch_get_size(e->s, keys, N, sizes), MC_OK);
    assert_int_equal(sizes[0], 4007);
    assert_int_equal(sizes[2], 6007);

    /* get into memory allocated once the size is known */
    alloc_rec_t r = {0};
    assert_int_equal(mc_store_get_alloc(e->s, "pb", 2, rec_alloc, &r), 5007);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.size, 5007);
    assert_memory_equal(r.p, parts[4].ptr, 5007);
    free(r.p);
    alloc_rec_t none = {0};
    assert_int_equal(mc_store_get_alloc(e->s, "nosuch", 6, rec_alloc, &none),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(none.calls, 0);
    assert_int_equal(mc_store_get_alloc(e->s, "", 0, rec_alloc, &none), MC_ERR_INVALID_KEY);

    free(src);
    free(dst);
    assert_true(mc_store_remove_all(e->s, 1) >= 5);
}

/* ------------------------------------------------------------------ async */

typedef struct async_ctx {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    int64_t last;
    int in_submit; /* set while the submitting call runs */
    int ran_inside;
} async_ctx_t;

static void async_done(async_ctx_t *a, int64_t v)
{
    pthread_mutex_lock(&a->mu);
    if (a->in_submit)
        a->ran_inside = 1;
    a->calls++;
    a->last = v;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static void async_st_cb(void *arg, mc_status_t st)
{
    async_done(arg, st);
}

static void async_get_cb(void *arg, int64_t r)
{
    async_done(arg, r);
}

static int64_t async_wait(async_ctx_t *a, int calls)
{
    pthread_mutex_lock(&a->mu);
    while (a->calls < calls)
        pthread_cond_wait(&a->cv, &a->mu);
    int64_t v = a->last;
    pthread_mutex_unlock(&a->mu);
    return v;
}

static void async_calls_call_back_once_and_never_inside_the_call(void **state)
{
    env_t *e = *state;
    async_ctx_t a = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    uint8_t v[5000], back[5000];
    fill(v, sizeof(v), 5);
    int calls = 0;
#define SUBMIT(expr)                                                                               \
    do {                                                                                           \
        pthread_mutex_lock(&a.mu);                                                                 \
        a.in_submit = 1;                                                                           \
        mc_status_t r_ = (expr);                                                                   \
        a.in_submit = 0;                                                                           \
        pthread_mutex_unlock(&a.mu);                                                               \
        assert_int_equal(r_, MC_INPROGRESS);                                                       \
        calls++;                                                                                   \
    } while (0)
    SUBMIT(mc_store_put_async(e->s, "as", 2, v, sizeof(v), NULL, async_st_cb, &a));
    assert_int_equal(async_wait(&a, calls), MC_OK);
    SUBMIT(mc_store_exist_async(e->s, "as", 2, async_st_cb, &a));
    assert_int_equal(async_wait(&a, calls), 1);
    SUBMIT(mc_store_get_async(e->s, "as", 2, back, sizeof(back), async_get_cb, &a));
    assert_int_equal(async_wait(&a, calls), (int64_t)sizeof(v));
    assert_memory_equal(back, v, sizeof(v));
    SUBMIT(mc_store_get_async(e->s, "as", 2, back, 10, async_get_cb, &a));
    assert_int_equal(async_wait(&a, calls), MC_ERR_BUFFER_OVERFLOW);
    SUBMIT(mc_store_remove_async(e->s, "as", 2, 1, async_st_cb, &a));
    assert_int_equal(async_wait(&a, calls), MC_OK);
    SUBMIT(mc_store_get_async(e->s, "as", 2, back, sizeof(back), async_get_cb, &a));
    assert_int_equal(async_wait(&a, calls), MC_ERR_OBJECT_NOT_FOUND);
    /* an error at submission: no callback */
    assert_int_equal(mc_store_put_async(e->s, "", 0, v, 1, NULL, async_st_cb, &a),
                     MC_ERR_INVALID_KEY);
    usleep(50000);
    pthread_mutex_lock(&a.mu);
    assert_int_equal(a.calls, calls);
    assert_int_equal(a.ran_inside, 0);
    pthread_mutex_unlock(&a.mu);
#undef SUBMIT
}

/* ----------------------------------------------------- close while busy */

typedef struct inflight {
    atomic_int calls[16];
    atomic_int ok, canceled, other;
} inflight_t;

typedef struct inflight_arg {
    inflight_t *f;
    int i;
} inflight_arg_t;

static void inflight_cb(void *arg, mc_status_t st)
{
    inflight_arg_t *a = arg;
    atomic_fetch_add(&a->f->calls[a->i], 1);
    if (st == MC_OK)
        atomic_fetch_add(&a->f->ok, 1);
    else if (st == MC_ERR_CANCELED)
        atomic_fetch_add(&a->f->canceled, 1);
    else
        atomic_fetch_add(&a->f->other, 1);
}

static void closing_a_busy_client_completes_every_call_once(void **state)
{
    env_t *e = *state;
    wait_parked_space();
    mc_store_t *c;
    assert_int_equal(open_client(e->rpc_port, RPC_TIMEOUT_US, &c), MC_OK);
    size_t len = 6 * MIB;
    uint8_t *v = malloc(len);
    fill(v, len, 77);
    static inflight_t f;
    memset(&f, 0, sizeof(f));
    inflight_arg_t args[16];
    char key[32];
    for (int i = 0; i < 16; i++) {
        args[i] = (inflight_arg_t){&f, i};
        key_of(key, sizeof(key), "busy", (unsigned long)i);
        assert_int_equal(
            mc_store_put_async(c, key, strlen(key), v, len, NULL, inflight_cb, &args[i]),
            MC_INPROGRESS);
    }
    /* at once: some are transferring, some wait for staging or the master */
    mc_store_close(c);
    for (int i = 0; i < 16; i++)
        assert_int_equal(atomic_load(&f.calls[i]), 1);
    print_message("close: %d put(s) done, %d canceled\n", atomic_load(&f.ok),
                  atomic_load(&f.canceled));
    assert_int_equal(atomic_load(&f.other), 0);
    assert_int_equal(atomic_load(&f.ok) + atomic_load(&f.canceled), 16);
    free(v);
    mc_store_remove_by_regex(e->s, "^busy-", 1);
}

/* ------------------------------------------------------- runtime segment */

static void a_segment_mounted_at_run_time_serves_local_replicas_until_unmounted(void **state)
{
    env_t *e = *state;
    size_t seg = 32 * MIB, len = 3 * MIB;
    assert_int_equal(mc_store_mount_segment(e->s, NULL, seg), MC_OK);
    uint8_t *own = aligned_alloc(4096, 16 * MIB);
    assert_int_equal(mc_store_mount_segment(e->s, own, 16 * MIB), MC_OK);
    const char *self = mc_store_name(e->s);
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.preferred_segments = &self;
    rc.n_preferred = 1;
    uint8_t *v = malloc(len), *back = malloc(len);
    fill(v, len, 31);
    /* written by the local transport (memcpy), read back by memcpy */
    assert_int_equal(mc_store_put(e->s, "local", 5, v, len, &rc), MC_OK);
    mc_store_replica_t r[2];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(e->s, "local", 5, r, 2, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment, self);
    assert_int_equal(mc_store_get(e->s, "local", 5, back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    /* a second replica elsewhere: both written in one batch */
    rc.replica_num = 2;
    assert_int_equal(mc_store_put(e->s, "local2", 6, v, len, &rc), MC_OK);
    assert_int_equal(mc_store_query(e->s, "local2", 6, r, 2, &n), MC_OK);
    assert_int_equal(n, 2);
    /* withdraw both: the local replicas vanish with them (after the drain
     * of our get's lease); the remote one of local2 stays readable */
    assert_int_equal(mc_store_unmount_segment(e->s, own), MC_OK);
    assert_int_equal(mc_store_unmount_segment(e->s, own), MC_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(mc_store_unmount_segment(e->s, NULL), MC_OK);
    assert_int_equal(mc_store_unmount_segment(e->s, NULL), MC_ERR_SEGMENT_NOT_FOUND);
    free(own);
    assert_int_equal(mc_store_get(e->s, "local", 5, back, len, NULL), MC_ERR_OBJECT_NOT_FOUND);
    memset(back, 0, len);
    assert_int_equal(mc_store_get(e->s, "local2", 6, back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    assert_int_equal(mc_store_query(e->s, "local2", 6, r, 2, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_not_equal(r[0].segment, self);
    assert_int_equal(mc_store_remove(e->s, "local2", 6, 1), MC_OK);
    free(v);
    free(back);
}

/* ------------------------------------------------------------- 4 threads */

typedef struct worker {
    mc_store_t *s;
    int id;
    int failures;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    size_t cap = 1 * MIB + 1000;
    uint8_t *v = malloc(cap), *back = malloc(cap);
    char key[64];
    for (int i = 0; i < 40; i++) {
        size_t len = 1000 + (size_t)((i * 7919 + w->id * 104729) % (int)(1 * MIB));
        snprintf(key, sizeof(key), "t%d-%d", w->id, i);
        fill(v, len, (uint64_t)(w->id * 1000 + i));
        if (mc_store_put(w->s, key, strlen(key), v, len, NULL) != MC_OK) {
            w->failures++;
            continue;
        }
        int64_t got = mc_store_get(w->s, key, strlen(key), back, cap, NULL);
        if (got != (int64_t)len || memcmp(back, v, len) != 0)
            w->failures++;
    }
    free(v);
    free(back);
    return NULL;
}

static void four_threads_put_and_get_concurrently(void **state)
{
    env_t *e = *state;
    pthread_t th[4];
    worker_t w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker_t){.s = e->s, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    assert_int_equal(mc_store_remove_by_regex(e->s, "^t[0-9]-", 1), 160);
}

/* -------------------------------------------------------------- zombie put */

/* Helper mode of this binary (a fresh process): PutStart for key, print
 * "started <status>", then hang until killed, never finishing the put. */
static int zombie_main(unsigned port, const char *key)
{
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    mc_reactor_group_t *g;
    if (mc_reactor_group_create(&go, &g) != MC_OK)
        return 1;
    mc_rpc_client_opts_t o;
    mc_rpc_client_opts_init(&o);
    o.port = (uint16_t)port;
    mc_rpc_client_t *c;
    if (mc_rpc_client_create(mc_reactor_group_get(g, 0), &o, &c) != MC_OK)
        return 1;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    mc_uuid_t id = {0x2b2b2b2b, (uint64_t)getpid()};
    mc_mcli_put_start(&w, id, key, strlen(key), 4 * MIB, &cfg);
    mc_status_t st = mc_rpc_call_sync(c, MC_RPC_PUT_START, mc_buf_head(&body), mc_buf_used(&body),
                                      3000000, &resp);
    printf("started %d\n", (int)st);
    fflush(stdout);
    for (;;)
        pause();
}

static void a_put_whose_client_died_before_put_end_is_discarded(void **state)
{
    env_t *e = *state;
    char port[16];
    snprintf(port, sizeof(port), "%u", e->rpc_port);
    char *argv[] = {e->self, "--zombie-put", port, "zombie", NULL};
    test_proc_t z = {0};
    assert_int_equal(test_proc_start(&z, argv), 0);
    assert_int_equal(test_proc_expect_num(&z, "started ", 5000 * SLOW), MC_OK);
    test_proc_stop(&z, SIGKILL, 1000);
    uint8_t v[1000], back[1000];
    fill(v, sizeof(v), 3);
    /* in progress: not readable, not overwritable */
    assert_int_equal(mc_store_exist(e->s, "zombie", 6), 0);
    int64_t g = mc_store_get(e->s, "zombie", 6, back, sizeof(back), NULL);
    assert_true(g == MC_ERR_REPLICA_IS_NOT_READY || g == MC_ERR_OBJECT_NOT_FOUND);
    /* after put_start_discard_timeout (1 s) the key is free again */
    uint64_t deadline = mc_now_ms() + 5000 * SLOW;
    mc_status_t st;
    while ((st = mc_store_put(e->s, "zombie", 6, v, sizeof(v), NULL)) ==
               MC_ERR_OBJECT_ALREADY_EXISTS &&
           mc_now_ms() < deadline)
        usleep(100000);
    assert_int_equal(st, MC_OK);
    assert_int_equal(mc_store_get(e->s, "zombie", 6, back, sizeof(back), NULL), sizeof(v));
    assert_memory_equal(back, v, sizeof(v));
    assert_int_equal(mc_store_remove(e->s, "zombie", 6, 1), MC_OK);
}

/* ------------------------------------------------------------ slow target */

static void a_put_whose_write_timed_out_is_left_to_the_master_not_revoked(void **state)
{
    env_t *e = *state;
    char master[64];
    snprintf(master, sizeof(master), "127.0.0.1:%u", e->rpc_port);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.local_buffer_size = 4 * MIB;
    c.reactors = 1;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    c.transfer_timeout_us = 300000 * SLOW;
    mc_store_t *s;
    assert_int_equal(mc_store_open(&c, &s), MC_OK);
    const char *target = e->node_name[0];
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.preferred_segments = &target;
    rc.n_preferred = 1;
    size_t len = 2 * MIB;
    uint8_t *v = malloc(len), *back = malloc(len);
    fill(v, len, 4242);
    /* a node that hangs (not dead): the write times out */
    kill(e->node[0].pid, SIGSTOP);
    int ws;
    assert_int_equal(waitpid(e->node[0].pid, &ws, WUNTRACED), e->node[0].pid);
    assert_int_equal(mc_store_put(s, "slow", 4, v, len, &rc), MC_ERR_TRANSFER_FAIL);
    /* not revoked: the write may still land, so the key stays taken (and
     * unreadable) until the master discards the put */
    assert_int_equal(mc_store_put(s, "slow", 4, v, len, &rc), MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_store_exist(s, "slow", 4), 0);
    kill(e->node[0].pid, SIGCONT);
    uint64_t deadline = mc_now_ms() + 5000 * SLOW;
    mc_status_t st;
    while ((st = mc_store_put(e->s, "slow", 4, v, len, &rc)) == MC_ERR_OBJECT_ALREADY_EXISTS &&
           mc_now_ms() < deadline)
        usleep(100000);
    assert_int_equal(st, MC_OK);
    assert_int_equal(mc_store_get(e->s, "slow", 4, back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    assert_int_equal(mc_store_remove(e->s, "slow", 4, 1), MC_OK);
    mc_store_close(s);
    free(v);
    free(back);
}

/* ---------------------------------------------------------------- eviction */

static void a_full_pool_evicts_old_objects_and_keeps_serving(void **state)
{
    env_t *e = *state;
    size_t len = 1 * MIB;
    uint8_t *v = malloc(len), *back = malloc(len);
    int n = (int)(3 * NNODES * NODE_SEGMENT_BYTES / len);
    int ok = 0, full = 0, last_ok = -1;
    char key[32];
    for (int i = 0; i < n; i++) {
        key_of(key, sizeof(key), "ev", (unsigned long)i);
        fill(v, len, (uint64_t)i);
        mc_status_t st = mc_store_put(e->s, key, strlen(key), v, len, NULL);
        if (st == MC_OK) {
            ok++;
            last_ok = i;
        } else if (st == MC_ERR_NO_AVAILABLE_HANDLE) {
            full++;
        } else {
            fail_msg("put %d: %s", i, mc_status_str(st));
        }
    }
    assert_true(ok > n * 3 / 4);
    /* the oldest went, the newest is there */
    int gone = 0;
    for (int i = 0; i < 20; i++) {
        key_of(key, sizeof(key), "ev", (unsigned long)i);
        gone += mc_store_exist(e->s, key, strlen(key)) == 0;
    }
    assert_true(gone > 10);
    key_of(key, sizeof(key), "ev", (unsigned long)last_ok);
    fill(v, len, (uint64_t)last_ok);
    assert_int_equal(mc_store_get(e->s, key, strlen(key), back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    mc_store_remove_all(e->s, 1);
    free(v);
    free(back);
    print_message("eviction: %d of %d puts stored, %d found no room\n", ok, n, full);
}

/* ---------------------------------------------------------- master restart */

static void with_the_master_down_calls_fail_in_time_and_work_after_it_returns(void **state)
{
    env_t *e = *state;
    uint8_t v[4096], back[4096];
    fill(v, sizeof(v), 11);
    assert_int_equal(mc_store_put(e->s, "before", 6, v, sizeof(v), NULL), MC_OK);

    /* a master that hangs: calls give up after rpc_timeout */
    kill(e->master.pid, SIGSTOP);
    int ws;
    assert_int_equal(waitpid(e->master.pid, &ws, WUNTRACED), e->master.pid); /* stopped now */
    assert_true(WIFSTOPPED(ws));
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_store_exist(e->s, "before", 6), MC_ERR_RPC_TIMEOUT);
    uint64_t took = mc_now_ms() - t0;
    kill(e->master.pid, SIGCONT);
    assert_true(took + 100 >= RPC_TIMEOUT_US / 1000 && took < RPC_TIMEOUT_US / 1000 + 1000);
    assert_int_equal(mc_store_exist(e->s, "before", 6), 1);

    /* a master that is gone: calls fail at once (connection refused) */
    test_proc_stop(&e->master, SIGKILL, 2000);
    t0 = mc_now_ms();
    mc_status_t st = mc_store_put(e->s, "during", 6, v, sizeof(v), NULL);
    assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
    int64_t g = mc_store_get(e->s, "before", 6, back, sizeof(back), NULL);
    assert_true(g == MC_ERR_CONN_CLOSED || g == MC_ERR_RPC_TIMEOUT);
    int x = mc_store_exist(e->s, "before", 6);
    assert_true(x == MC_ERR_CONN_CLOSED || x == MC_ERR_RPC_TIMEOUT);
    assert_true(mc_now_ms() - t0 < 3 * (RPC_TIMEOUT_US / 1000) + 1000);

    /* a new master on the same port: it knows nothing; the nodes re-mount
     * when their ping says NEED_REMOUNT, then puts land again */
    int ok = -1;
    for (int attempt = 0; attempt < 5 && ok != 0; attempt++)
        ok = start_master(e);
    assert_int_equal(ok, 0);
    uint64_t deadline = mc_now_ms() + 15000 * SLOW;
    while ((st = mc_store_put(e->s, "after", 5, v, sizeof(v), NULL)) != MC_OK &&
           mc_now_ms() < deadline)
        usleep(100000);
    assert_int_equal(st, MC_OK);
    assert_int_equal(mc_store_get(e->s, "after", 5, back, sizeof(back), NULL), sizeof(v));
    assert_memory_equal(back, v, sizeof(v));
    assert_int_equal(mc_store_get(e->s, "before", 6, back, sizeof(back), NULL),
                     MC_ERR_OBJECT_NOT_FOUND);
    /* both nodes are back: two replicas again */
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = 2;
    mc_store_replica_t r[2];
    uint32_t n = 0;
    char key[32];
    for (int i = 0; n < 2 && mc_now_ms() < deadline; i++) {
        key_of(key, sizeof(key), "after2", (unsigned long)i);
        assert_int_equal(mc_store_put(e->s, key, strlen(key), v, sizeof(v), &rc), MC_OK);
        assert_int_equal(mc_store_query(e->s, key, strlen(key), r, 2, &n), MC_OK);
        if (n < 2)
            usleep(100000);
    }
    assert_int_equal(n, 2);
    mc_store_remove_all(e->s, 1);
}

/* -------------------------------------------------------------- node death */

static void a_killed_node_leaves_two_replica_objects_readable_and_puts_go_on(void **state)
{
    env_t *e = *state;
    size_t len = 2 * MIB;
    uint8_t *v = malloc(len), *back = malloc(len);
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = 2;
    char key[32];
    for (int i = 0; i < 8; i++) {
        key_of(key, sizeof(key), "dual", (unsigned long)i);
        fill(v, len, (uint64_t)i + 500);
        assert_int_equal(mc_store_put(e->s, key, strlen(key), v, len, &rc), MC_OK);
    }
    test_proc_stop(&e->node[0], SIGKILL, 2000);
    /* every object has a replica on the dead node: gets fail over */
    for (int i = 0; i < 8; i++) {
        key_of(key, sizeof(key), "dual", (unsigned long)i);
        fill(v, len, (uint64_t)i + 500);
        memset(back, 0, len);
        assert_int_equal(mc_store_get(e->s, key, strlen(key), back, len, NULL), (int64_t)len);
        assert_memory_equal(back, v, len);
    }
    /* once the master expired the node (client_ttl 3 s), puts place one
     * replica on the survivor */
    uint64_t deadline = mc_now_ms() + 15000 * SLOW;
    mc_store_replica_t r[2];
    uint32_t n = 2;
    while (mc_now_ms() < deadline) {
        assert_int_equal(mc_store_query(e->s, "dual-0", 6, r, 2, &n), MC_OK);
        if (n == 1)
            break;
        usleep(200000);
    }
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment, e->node_name[1]);
    for (int i = 0; i < 8; i++) {
        key_of(key, sizeof(key), "after-kill", (unsigned long)i);
        fill(v, len, (uint64_t)i + 900);
        assert_int_equal(mc_store_put(e->s, key, strlen(key), v, len, &rc), MC_OK);
        assert_int_equal(mc_store_query(e->s, key, strlen(key), r, 2, &n), MC_OK);
        assert_int_equal(n, 1);
        assert_int_equal(mc_store_get(e->s, key, strlen(key), back, len, NULL), (int64_t)len);
        assert_memory_equal(back, v, len);
    }
    free(v);
    free(back);
}

static void a_node_exits_zero_on_sigterm(void **state)
{
    env_t *e = *state;
    int status = test_proc_stop(&e->node[1], SIGTERM, 5000 * SLOW);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--zombie-put") == 0)
        return zombie_main((unsigned)atoi(argv[2]), argv[3]);
    /* TEST_LOG=debug (or "warn,client=debug") to see more */
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_keys_and_values_fail_at_once_without_asking_the_master),
        cmocka_unit_test(values_of_many_sizes_round_trip_byte_for_byte),
        cmocka_unit_test(values_round_trip_through_the_staging_buffer),
        cmocka_unit_test(registered_buffers_and_parts_round_trip_without_staging),
        cmocka_unit_test(misuse_gets_upstream_statuses),
        cmocka_unit_test(two_replicas_land_on_the_two_nodes),
        cmocka_unit_test(batch_calls_report_each_key),
        cmocka_unit_test(upserts_pieces_allocs_and_sizes),
        cmocka_unit_test(async_calls_call_back_once_and_never_inside_the_call),
        cmocka_unit_test(closing_a_busy_client_completes_every_call_once),
        cmocka_unit_test(a_segment_mounted_at_run_time_serves_local_replicas_until_unmounted),
        cmocka_unit_test(four_threads_put_and_get_concurrently),
        cmocka_unit_test(a_put_whose_client_died_before_put_end_is_discarded),
        cmocka_unit_test(a_put_whose_write_timed_out_is_left_to_the_master_not_revoked),
        cmocka_unit_test(a_full_pool_evicts_old_objects_and_keeps_serving),
        cmocka_unit_test(with_the_master_down_calls_fail_in_time_and_work_after_it_returns),
        cmocka_unit_test(a_killed_node_leaves_two_replica_objects_readable_and_puts_go_on),
        cmocka_unit_test(a_node_exits_zero_on_sigterm),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
