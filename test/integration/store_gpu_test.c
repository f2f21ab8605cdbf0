/*
 * The store with values in GPU memory, against the FAKE CUDA driver
 * (test/fake/fake_libcuda.c through MC_CUDA_LIBRARY: its device memory is
 * mapped PROT_NONE where the CPU sees it, so any path of the store that
 * touched it with memcpy, send or pread would crash this test). A real
 * mooncake-master and one mooncake-store-server node; this process is the
 * client, over tcp and over rdma (2 emulated NICs), contributing a segment
 * of its own too (its replicas are copied in-process).
 *
 * Covered: register_buffer of a device pointer registers it as GPU memory
 * (cuda:N, asked of the driver: on rdma the NICs register it from a dma-buf
 * export), put_from / get_into between GPU buffers, plain put / get of GPU
 * memory not registered, batch put / batch get with GPU values, values
 * larger than the staging buffer, a replica on the client's own segment,
 * an object too big for a GPU buffer (BUFFER_OVERFLOW, nothing written).
 *
 * No GPU was used: this proves the store never touches GPU memory with the
 * CPU and that the bytes arrive, not GPUDirect performance.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <limits.h>

#include "cluster.h"
#include "mooncake/store.h"
#include "test/rdma_env.h"
#include "util/log.h"
#include "util/mem.h"

#define MIB (1ull << 20)
#define STAGING (2 * MIB)

static char lib_path[PATH_MAX];
static void *lib;

typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*retain_fn)(void **, int);
typedef int (*set_fn)(void *);
typedef void *(*view_fn)(unsigned long long, size_t);
typedef unsigned long (*count_fn)(const char *);

static uint8_t *dev_alloc(int gpu, size_t n)
{
    void *ctx = NULL;
    unsigned long long p = 0;
    assert_int_equal(((retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain"))(&ctx, gpu), 0);
    assert_int_equal(((set_fn)dlsym(lib, "cuCtxSetCurrent"))(ctx), 0);
    assert_int_equal(((alloc_fn)dlsym(lib, "cuMemAlloc_v2"))(&p, n), 0);
    assert_int_equal(((set_fn)dlsym(lib, "cuCtxSetCurrent"))(NULL), 0);
    return (uint8_t *)(uintptr_t)p;
}

static uint8_t *view(const void *d, size_t n)
{
    uint8_t *h = ((view_fn)dlsym(lib, "mcFakeCudaHostView"))((unsigned long long)(uintptr_t)d, n);
    assert_non_null(h);
    return h;
}

static unsigned long count(const char *what)
{
    return ((count_fn)dlsym(lib, "mcFakeCudaCount"))(what);
}

static void fill(uint8_t *d, size_t n, unsigned seed)
{
    uint8_t *h = view(d, n);
    for (size_t i = 0; i < n; i++)
        h[i] = (uint8_t)(i * 31 + seed + (i >> 12));
}

typedef struct env {
    tc_cluster_t c;
    mc_store_t *s;
    const char *protocol;
} env_t;

static env_t *env_for(const char *protocol)
{
    static env_t e;
    memset(&e, 0, sizeof(e));
    e.protocol = protocol;
    const char *const ms[] = {"master.client_ttl=3s", NULL};
    char proto[64];
    snprintf(proto, sizeof(proto), "store.protocol=%s", protocol);
    const char *const ns[] = {proto, "store.global_segment_size=64MiB", NULL};
    assert_int_equal(tc_cluster_start(&e.c, 1, ms, ns), 0);
    char master[64];
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = tc_master_addr(&e.c.master, master, sizeof(master));
    c.protocol = protocol;
    c.local_buffer_size = STAGING;
    c.global_segment_size = 16 * MIB;
    c.reactors = 2;
    c.rpc_timeout_us = 2000000 * TC_SLOW;
    assert_int_equal(mc_store_open(&c, &e.s), MC_OK);
    return &e;
}

static int setup_tcp(void **state)
{
    *state = env_for("tcp");
    return 0;
}

static int setup_rdma(void **state)
{
    setenv("MC_RDMA_EMULATED", "2", 1); /* the node and this client */
    *state = env_for("rdma");
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

static void key_of(char *k, size_t room, const env_t *e, const char *what)
{
    snprintf(k, room, "gpu-%s-%s", e->protocol, what);
}

/* A replica on the node, or on the client's own segment. */
static void cfg_on(mc_replicate_config_t *cfg, const char *const *seg)
{
    mc_replicate_config_init(cfg);
    cfg->preferred_segments = seg;
    cfg->n_preferred = 1;
}

static void register_buffer_registers_gpu_memory_as_gpu_memory(void **state)
{
    env_t *e = *state;
    const size_t n = 4 * MIB;
    uint8_t *src = dev_alloc(0, n), *dst = dev_alloc(1, n);
    unsigned long exports = count("export");
    assert_int_equal(mc_store_register_buffer(e->s, src, n), MC_OK);
    assert_int_equal(mc_store_register_buffer(e->s, dst, n), MC_OK);
    if (strcmp(e->protocol, "rdma") == 0) /* on the NICs from a dma-buf export */
        assert_true(count("export") >= exports + 2);
    const char *node[] = {e->c.node[0].name};
    const char *own[] = {mc_store_name(e->s)};
    const char *const *where[] = {node, own};
    for (int w = 0; w < 2; w++) {
        mc_replicate_config_t cfg;
        cfg_on(&cfg, where[w]);
        char k[64];
        key_of(k, sizeof(k), e, w ? "reg-own" : "reg-node");
        fill(src, n, (unsigned)w + 1);
        memset(view(dst, n), 0, n);
        assert_int_equal(mc_store_put_from(e->s, k, strlen(k), src, n, &cfg), MC_OK);
        assert_int_equal(mc_store_get_into(e->s, k, strlen(k), dst, n), (int64_t)n);
        assert_memory_equal(view(dst, n), view(src, n), n);
        /* a part of a registered buffer */
        memset(view(dst, n), 0, n);
        assert_int_equal(mc_store_get(e->s, k, strlen(k), dst + 4096, n - 4096, NULL),
                         MC_ERR_BUFFER_OVERFLOW);
        assert_int_equal(view(dst, n)[4096], 0); /* nothing written */
    }
    assert_int_equal(mc_store_unregister_buffer(e->s, src), MC_OK);
    assert_int_equal(mc_store_unregister_buffer(e->s, dst), MC_OK);
}

static void unregistered_gpu_memory_puts_and_gets_through_host_memory(void **state)
{
    env_t *e = *state;
    /* larger than the staging buffer: it travels in pieces */
    const size_t n = 3 * STAGING + 123;
    uint8_t *src = dev_alloc(0, n), *dst = dev_alloc(0, n);
    fill(src, n, 9);
    char k[64];
    key_of(k, sizeof(k), e, "plain");
    unsigned long copies = count("memcpy");
    assert_int_equal(mc_store_put(e->s, k, strlen(k), src, n, NULL), MC_OK);
    assert_int_equal(mc_store_get(e->s, k, strlen(k), dst, n, NULL), (int64_t)n);
    assert_memory_equal(view(dst, n), view(src, n), n);
    assert_true(count("memcpy") >= copies + 2); /* one cuMemcpy each way */
    assert_int_equal(count("no_ctx"), 0);
    /* parts mixing host and GPU memory */
    static uint8_t head[100];
    memset(head, 0x42, sizeof(head));
    mc_slice_t parts[2] = {{head, sizeof(head)}, {src, 5000}};
    key_of(k, sizeof(k), e, "parts");
    assert_int_equal(mc_store_put_parts(e->s, k, strlen(k), parts, 2, NULL), MC_OK);
    uint8_t back[5100];
    assert_int_equal(mc_store_get(e->s, k, strlen(k), back, sizeof(back), NULL), 5100);
    assert_memory_equal(back, head, sizeof(head));
    assert_memory_equal(back + 100, view(src, 5000), 5000);
}

static void batches_with_gpu_values_round_trip(void **state)
{
    env_t *e = *state;
    enum { N = 6 };
    const size_t n = 64 << 10;
    uint8_t *src = dev_alloc(1, N * n), *dst = dev_alloc(0, N * n);
    fill(src, N * n, 3);
    memset(view(dst, N * n), 0, N * n);
    char names[N][64];
    mc_slice_t keys[N], vals[N], bufs[N];
    static uint8_t host[64 << 10];
    memset(host, 7, sizeof(host));
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "gpu-%s-batch-%d", e->protocol, i);
        keys[i] = (mc_slice_t){names[i], strlen(names[i])};
        /* one host value among the GPU ones */
        vals[i] = (mc_slice_t){i == 2 ? host : src + i * n, n};
        bufs[i] = (mc_slice_t){dst + i * n, n};
    }
    mc_status_t st[N];
    assert_int_equal(mc_store_batch_put(e->s, keys, vals, N, NULL, st), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], MC_OK);
    int64_t res[N];
    assert_int_equal(mc_store_batch_get(e->s, keys, bufs, N, res), MC_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(res[i], (int64_t)n);
        assert_memory_equal(view(dst + i * n, n), i == 2 ? host : view(src + i * n, n), n);
    }
}

int main(void)
{
    test_rdma_env_clear();
    const char *dir = getenv("TEST_BUILD_DIR") ? getenv("TEST_BUILD_DIR") : "build";
    char rel[PATH_MAX];
    snprintf(rel, sizeof(rel), "%s/test/lib/libfakecuda.so", dir);
    if (realpath(rel, lib_path) == NULL) {
        fprintf(stderr, "store_gpu_test: %s not found (make tests builds it)\n", rel);
        return 1;
    }
    setenv("MC_CUDA_LIBRARY", lib_path, 1);
    unsetenv("MC_GPU_REG");
    unsetenv("FAKE_CUDA_OVERSIZE");
    unsetenv("FAKE_CUDA_NO_DMABUF");
    lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);
    typedef int (*init_fn)(unsigned);
    assert_int_equal(((init_fn)dlsym(lib, "cuInit"))(0), 0); /* as the application would */
    signal(SIGPIPE, SIG_IGN);
    mc_log_set_spec(getenv("TEST_LOG") ? getenv("TEST_LOG") : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(register_buffer_registers_gpu_memory_as_gpu_memory),
        cmocka_unit_test(unregistered_gpu_memory_puts_and_gets_through_host_memory),
        cmocka_unit_test(batches_with_gpu_values_round_trip),
    };
    int rc = cmocka_run_group_tests_name("tcp", tests, setup_tcp, teardown);
    rc |= cmocka_run_group_tests_name("rdma", tests, setup_rdma, teardown);
    return rc;
}
