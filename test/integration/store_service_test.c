/*
 * The store service and its co-located clients: a real mooncake-master and
 * a mooncake-store-server with service.enabled, this process and
 * store_dummy processes ($TEST_BIN_DIR/store_dummy) as co-located clients
 * (mc_store_config_t.service).
 *
 * Covered: four client processes put and get concurrently with
 * verification; the whole C API through the service in this process (pool
 * and plain memory, a value too large for staging refused clearly, buffer
 * overflow with the needed size, batch calls, exist/size/query/remove/regex,
 * async calls, the pool's alloc/free); offsets outside a session's memory,
 * a wrong token and malformed bodies refused with nothing touched and the
 * service still serving; clients killed in the middle of puts leave no
 * session, descriptor or memory behind (a short loop here; 1,000 cycles in
 * perf/fault_service.sh); sync calls from several threads of one client at
 * once on call channels (byte for byte; the channels end with their
 * client); a raw call channel: its session and token checked at open and at
 * every call, offsets outside the session refused, junk closes it; a hung
 * service times calls out and serves again when it wakes; a service killed
 * while callers wait on their channels fails them at once; a killed service
 * fails calls within the timeout and its clients share their memory again
 * when it is back; a second
 * service on the same port is refused at start; a user the service does
 * not admit is refused; a pool larger than the host has fails at open; the
 * workers' own master connections: a master that is down fails their calls
 * at once, a restarted one is called again, and with HA they follow a new
 * leader (puts and gets at their first try, every acknowledged put read
 * back).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <sys/mman.h>
#include <stdatomic.h>

#include "cluster.h"
#include "mooncake/store.h"
#include "reactor/reactor.h"
#include "rpc/fields.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/ha_redis.h"
#include "store/svc_proto.h"
/* the store client's cases (only those a co-located client can run: no
 * segment of its own, one node) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "store_cases.h"
#include "test/thp.h"
#pragma GCC diagnostic pop
#include "util/buf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/shm.h"
#include "util/time.h"

#define MIB (1ull << 20)
#define SLOW TC_SLOW
#define RPC_TIMEOUT_US (2000000 * SLOW)
#define STAGING (8 * MIB)
#define POOL (16 * MIB)

typedef struct env {
    tc_cluster_t c;
    unsigned svc_port;
    char svc[64]; /* "127.0.0.1:PORT" */
    mc_store_t *s;
} env_t;

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        p[i] = (uint8_t)(x >> ((i & 7) * 8));
    }
}

static int start_node(env_t *e)
{
    char master[64], port[64];
    snprintf(port, sizeof(port), "service.port=%u", e->svc_port);
    const char *const ns[] = {"service.enabled=true", port, "store.global_segment_size=256MiB",
                              NULL};
    return tc_node_start(&e->c.node[0], tc_master_addr(&e->c.master, master, sizeof(master)), ns);
}

static mc_status_t open_dummy(env_t *e, mc_store_t **out)
{
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.service = e->svc;
    c.local_buffer_size = STAGING;
    c.mem_pool_size = POOL;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    return mc_store_open(&c, out);
}

static int setup(void **state)
{
    static env_t e;
    signal(SIGPIPE, SIG_IGN);
    const char *const ms[] = {"master.client_ttl=3s", "master.lease_ttl=2s", NULL};
    assert_int_equal(tc_master_start(&e.c.master, ms), 0);
    e.svc_port = test_free_port();
    snprintf(e.svc, sizeof(e.svc), "127.0.0.1:%u", e.svc_port);
    assert_int_equal(start_node(&e), 0);
    e.c.nnodes = 1;
    assert_int_equal(open_dummy(&e, &e.s), MC_OK);
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

/* Run store_dummy with args (NULL-terminated); its last line and status. */
static int run_dummy(env_t *e, const char *const *args, char *last, size_t len)
{
    char bin[256];
    tc_args_t a;
    tc_args_init(&a, test_bin("store_dummy", bin, sizeof(bin)));
    tc_args_add(&a, "--service");
    tc_args_add(&a, "%s", e->svc);
    for (size_t i = 0; args[i] != NULL; i++)
        tc_args_add(&a, "%s", args[i]);
    test_proc_t p = {0};
    assert_int_equal(tc_spawn(&p, a.argv), 0);
    last[0] = '\0';
    char line[256];
    while (test_proc_readline(&p, line, sizeof(line), 60000 * SLOW) == 0)
        snprintf(last, len, "%s", line);
    int st = tc_stop_ms(&p, 0, 10000 * SLOW);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---------------------------------------------------------------- tests */

static void four_client_processes_put_and_get_concurrently_byte_for_byte(void **state)
{
    env_t *e = *state;
    char bin[256];
    test_proc_t p[4];
    for (int i = 0; i < 4; i++) {
        tc_args_t a;
        tc_args_init(&a, test_bin("store_dummy", bin, sizeof(bin)));
        tc_args_add(&a, "--service");
        tc_args_add(&a, "%s", e->svc);
        tc_args_add(&a, "--id");
        tc_args_add(&a, "%d", i + 1);
        tc_args_add(&a, "--count");
        tc_args_add(&a, "12");
        tc_args_add(&a, "--size");
        tc_args_add(&a, "%llu", (unsigned long long)(2 * MIB + 77));
        memset(&p[i], 0, sizeof(p[i]));
        assert_int_equal(tc_spawn(&p[i], a.argv), 0);
    }
    for (int i = 0; i < 4; i++) {
        char line[256] = "", last[256] = "";
        while (test_proc_readline(&p[i], line, sizeof(line), 60000 * SLOW) == 0)
            snprintf(last, sizeof(last), "%s", line);
        int st = tc_stop_ms(&p[i], 0, 10000 * SLOW);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("client %d: %s", i + 1, last);
        assert_string_equal(last, "ok 12");
    }
}

typedef struct acb {
    atomic_int done;
    int64_t result;
} acb_t;

static void put_cb(void *arg, mc_status_t st)
{
    acb_t *a = arg;
    a->result = st;
    atomic_store(&a->done, 1);
}

static void get_cb(void *arg, int64_t res)
{
    acb_t *a = arg;
    a->result = res;
    atomic_store(&a->done, 1);
}

static int64_t wait_cb(acb_t *a)
{
    uint64_t end = mc_now_ms() + 10000 * SLOW;
    while (!atomic_load(&a->done) && mc_now_ms() < end)
        usleep(1000);
    assert_true(atomic_load(&a->done));
    return a->result;
}

typedef struct alloc {
    void *p;
} alloc_t;

static void *alloc_cb(void *arg, uint64_t size)
{
    alloc_t *a = arg;
    a->p = malloc(size);
    return a->p;
}

static void the_c_api_works_through_the_service(void **state)
{
    env_t *e = *state;
    mc_store_t *s = e->s;
    assert_string_equal(mc_store_name(s), e->c.node[0].name); /* where our data lives */
    /* pool memory: in place, no copy on our side */
    size_t len = 3 * MIB + 5;
    uint8_t *pv = mc_store_alloc_from_mem_pool(s, len), *pb = mc_store_alloc_from_mem_pool(s, len);
    assert_non_null(pv);
    assert_non_null(pb);
    assert_int_equal((uintptr_t)pv % 64, 0);
    fill(pv, len, 1);
    assert_int_equal(mc_store_put(s, "pool", 4, pv, len, NULL), MC_OK);
    assert_int_equal(mc_store_get(s, "pool", 4, pb, len, NULL), (int64_t)len);
    assert_memory_equal(pb, pv, len);
    assert_int_equal(mc_store_put(s, "pool", 4, pv, len, NULL), MC_ERR_OBJECT_ALREADY_EXISTS);
    /* plain memory, through staging; a buffer too small says how much */
    uint8_t *v = malloc(len), *b = malloc(len);
    assert_non_null(v);
    assert_non_null(b);
    fill(v, len, 2);
    assert_int_equal(mc_store_put(s, "plain", 5, v, len, NULL), MC_OK);
    uint64_t need = 0;
    assert_int_equal(mc_store_get(s, "plain", 5, b, 100, &need), MC_ERR_BUFFER_OVERFLOW);
    assert_int_equal(need, len);
    assert_int_equal(mc_store_get(s, "plain", 5, b, len, NULL), (int64_t)len);
    assert_memory_equal(b, v, len);
    assert_int_equal(mc_store_get_size(s, "plain", 5), (int64_t)len);
    /* the forms that size the buffer first (the Python get() and
     * get_batch() use them) */
    alloc_t al = {0};
    assert_int_equal(mc_store_get_alloc(s, "plain", 5, alloc_cb, &al), (int64_t)len);
    assert_memory_equal(al.p, v, len);
    free(al.p);
    assert_int_equal(mc_store_get_alloc(s, "nothing", 7, alloc_cb, &al), MC_ERR_OBJECT_NOT_FOUND);
    mc_slice_t sk[3] = {{"plain", 5}, {"nothing", 7}, {"pool", 4}};
    int64_t sizes[3];
    assert_int_equal(mc_store_batch_get_size(s, sk, 3, sizes), MC_OK);
    assert_int_equal(sizes[0], (int64_t)len);
    assert_int_equal(sizes[1], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(sizes[2], (int64_t)len);
    assert_int_equal(mc_store_exist(s, "plain", 5), 1);
    assert_int_equal(mc_store_exist(s, "nothing", 7), 0);
    assert_int_equal(mc_store_get(s, "nothing", 7, b, len, NULL), MC_ERR_OBJECT_NOT_FOUND);
    mc_store_replica_t r[4];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(s, "plain", 5, r, 4, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment, e->c.node[0].name); /* the service's own (prefer_local) */
    assert_int_equal(r[0].size, len);
    /* parts */
    mc_slice_t parts[3] = {{v, 100}, {pv, 1000}, {v + 100, 7}};
    assert_int_equal(mc_store_put_parts(s, "parts", 5, parts, 3, NULL), MC_OK);
    assert_int_equal(mc_store_get(s, "parts", 5, b, len, NULL), 1107);
    assert_memory_equal(b, v, 100);
    assert_memory_equal(b + 100, pv, 1000);
    assert_memory_equal(b + 1100, v + 100, 7);
    /* larger than staging, from and into plain memory: through pool memory
     * while the pool has room; larger than both: refused, naming the way out */
    uint8_t *big = malloc(POOL + 1), *bigb = malloc(STAGING + 1);
    assert_non_null(big);
    assert_non_null(bigb);
    fill(big, STAGING + 1, 5);
    assert_int_equal(mc_store_put(s, "big", 3, big, STAGING + 1, NULL), MC_OK);
    assert_int_equal(mc_store_get(s, "big", 3, bigb, STAGING + 1, NULL), STAGING + 1);
    assert_memory_equal(bigb, big, STAGING + 1);
    assert_int_equal(mc_store_remove(s, "big", 3, 1), MC_OK);
    assert_int_equal(mc_store_put(s, "big", 3, big, POOL + 1, NULL), MC_ERR_INVALID_PARAMS);
    free(big);
    free(bigb);
    /* batch */
    char kb[5][16];
    mc_slice_t keys[5], vals[5], outs[5];
    uint8_t vb[5][300], ob[5][300];
    mc_status_t sts[5];
    int64_t res[5];
    int ex[5];
    for (int i = 0; i < 5; i++) {
        snprintf(kb[i], sizeof(kb[i]), "b%d", i);
        keys[i] = (mc_slice_t){kb[i], strlen(kb[i])};
        fill(vb[i], 300, 10 + (uint64_t)i);
        vals[i] = (mc_slice_t){vb[i], 300};
        outs[i] = (mc_slice_t){ob[i], 300};
    }
    assert_int_equal(mc_store_batch_put(s, keys, vals, 5, NULL, sts), MC_OK);
    for (int i = 0; i < 5; i++)
        assert_int_equal(sts[i], MC_OK);
    assert_int_equal(mc_store_batch_get(s, keys, outs, 5, res), MC_OK);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(res[i], 300);
        assert_memory_equal(ob[i], vb[i], 300);
    }
    assert_int_equal(mc_store_batch_exist(s, keys, 5, ex), MC_OK);
    assert_int_equal(ex[4], 1);
    assert_int_equal(mc_store_batch_remove(s, keys, 2, 1, sts), MC_OK);
    assert_int_equal(mc_store_exist(s, "b0", 2), 0);
    /* async */
    acb_t a = {0}, g = {0};
    assert_int_equal(mc_store_put_async(s, "async", 5, v, 1000, NULL, put_cb, &a), MC_INPROGRESS);
    assert_int_equal(wait_cb(&a), MC_OK);
    memset(b, 0, 1000);
    assert_int_equal(mc_store_get_async(s, "async", 5, b, 1000, get_cb, &g), MC_INPROGRESS);
    assert_int_equal(wait_cb(&g), 1000);
    assert_memory_equal(b, v, 1000);
    /* remove, by regex, all */
    assert_int_equal(mc_store_remove(s, "async", 5, 1), MC_OK);
    assert_int_equal(mc_store_remove_by_regex(s, "^b[2-3]$", 1), 2);
    assert_int_equal(mc_store_remove_all(s, 1), 4); /* pool, plain, parts, b4 */
    assert_int_equal(mc_store_remove(s, "x\0y", 3, 1), MC_ERR_INVALID_KEY);
    /* a co-located client mounts nothing */
    assert_int_equal(mc_store_mount_segment(s, NULL, MIB), MC_ERR_NOT_SUPPORTED);
    /* pool frees: once */
    assert_int_equal(mc_store_free_to_mem_pool(s, pv), MC_OK);
    assert_int_equal(mc_store_free_to_mem_pool(s, pv), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_store_free_to_mem_pool(s, v), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_store_free_to_mem_pool(s, pb), MC_OK);
    assert_null(mc_store_alloc_from_mem_pool(s, POOL + 1));
    free(v);
    free(b);
}

/* SGLang's order: shared memory first (mc_store_shared_alloc, upstream's
 * MooncakeHostMemAllocator), then the co-located client, then
 * register_buffer: values there travel without staging (a value larger
 * than the staging buffer goes through), single and batch calls; after
 * unregister_buffer the memory is the caller's own again (through staging:
 * a large value is refused). Ranges of a value (mc_store_get_ranges) read
 * into the shared memory as on a normal client. */
static void shared_memory_registered_later_travels_in_place(void **state)
{
    env_t *e = *state;
    const size_t big = STAGING + 4 * MIB + 3;
    uint8_t *sh = mc_store_shared_alloc(2 * big + 8192);
    assert_non_null(sh);
    fill(sh, big, 31);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.service = e->svc;
    c.local_buffer_size = MIB;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    mc_store_t *d = NULL;
    assert_int_equal(mc_store_open(&c, &d), MC_OK);
    /* not yet registered: through the 1 MiB staging buffer, which it does not fit */
    assert_int_equal(mc_store_put(d, "sh", 2, sh, big, NULL), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_register_buffer(d, sh, 2 * big + 8192), MC_OK);
    assert_int_equal(mc_store_register_buffer(d, sh + 10, 100), MC_OK); /* again: fine */
    assert_int_equal(mc_store_put(d, "sh", 2, sh, big, NULL), MC_OK);
    memset(sh + big, 0, big);
    assert_int_equal(mc_store_get(d, "sh", 2, sh + big, big, NULL), (int64_t)big);
    assert_memory_equal(sh + big, sh, big);
    /* another client reads it the ordinary way */
    uint8_t *b = malloc(big);
    assert_non_null(b);
    assert_int_equal(mc_store_get(e->s, "sh", 2, b, 1000, NULL), MC_ERR_BUFFER_OVERFLOW);
    assert_int_equal(mc_store_remove(e->s, "sh", 2, 1), MC_OK);
    /* batch: two values of the shared memory and one of plain memory */
    uint8_t plain[3000];
    fill(plain, sizeof(plain), 32);
    mc_slice_t k[3] = {{"x0", 2}, {"x1", 2}, {"x2", 2}};
    mc_slice_t v[3] = {{sh, 5 * MIB}, {sh + 5 * MIB, 5 * MIB}, {plain, sizeof(plain)}};
    mc_status_t st[3];
    assert_int_equal(mc_store_batch_put(d, k, v, 3, NULL, st), MC_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(st[i], MC_OK);
    uint8_t pb[3000];
    mc_slice_t o[3] = {{sh + big, 5 * MIB}, {sh + big + 5 * MIB, 5 * MIB}, {pb, sizeof(pb)}};
    int64_t res[3];
    memset(sh + big, 0, 10 * MIB);
    assert_int_equal(mc_store_batch_get(d, k, o, 3, res), MC_OK);
    assert_int_equal(res[0], 5 * MIB);
    assert_int_equal(res[2], sizeof(plain));
    assert_memory_equal(sh + big, sh, 10 * MIB);
    assert_memory_equal(pb, plain, sizeof(plain));
    /* ranges of x0 into the shared memory (mc_store_get_ranges through the
     * service): unaligned, the last bytes, an empty one; past the end and
     * plain memory fail alone; a missing key fails them all; more ranges
     * than one call carries go in several */
    uint8_t *rd = sh + big;
    sc_ranges_check(d, "x0", sh, 5 * MIB, rd, pb);
    enum { MANY = 4100 }; /* over SVC_MAX_PARTS */
    uint64_t *msrc = calloc(MANY, sizeof(*msrc)), *mlen = calloc(MANY, sizeof(*mlen));
    void **mdst = calloc(MANY, sizeof(*mdst));
    int64_t *mres = calloc(MANY, sizeof(*mres));
    assert_true(msrc != NULL && mlen != NULL && mdst != NULL && mres != NULL);
    memset(rd, 0, MANY);
    for (size_t i = 0; i < MANY; i++) {
        msrc[i] = MANY - 1 - i; /* reversed, a byte each */
        mlen[i] = 1;
        mdst[i] = rd + i;
    }
    assert_int_equal(mc_store_get_ranges(d, "x0", 2, MANY, msrc, mdst, mlen, mres), MC_OK);
    for (size_t i = 0; i < MANY; i++) {
        assert_int_equal(mres[i], 1);
        assert_int_equal(rd[i], sh[MANY - 1 - i]);
    }
    free(msrc);
    free(mlen);
    free(mdst);
    free(mres);
    assert_int_equal(mc_store_remove_by_regex(d, "^x", 1), 3);
    /* unregistered: its own memory again */
    assert_int_equal(mc_store_unregister_buffer(d, sh), MC_OK);
    assert_int_equal(mc_store_put(d, "sh", 2, sh, big, NULL), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_put(d, "sh", 2, sh, 1000, NULL), MC_OK);
    assert_int_equal(mc_store_remove(d, "sh", 2, 1), MC_OK);
    mc_store_close(d);
    assert_int_equal(mc_store_shared_free(sh), MC_OK);
    assert_int_equal(mc_store_shared_free(sh), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_store_shared_free(b), MC_ERR_INVALID_ARGUMENT);
    assert_null(mc_store_shared_alloc(0));
    free(b);
}

/* Upstream's switch MC_STORE_USE_HUGEPAGE (MooncakeHostMemAllocator's
 * use_hugepage): shared memory in 2 MiB pages (hugetlb when the pool has
 * them free, else transparent huge pages), and a co-located client opened
 * with it set has its shared staging and pool memory in them too (a
 * service's offload load reads a file straight into it: one large request);
 * values travel in place as in normal pages. An unknown kind of page is
 * refused; a page size other than 2 MiB is warned about and 2 MiB used;
 * "0" turns the variable off. */
static void huge_page_shared_memory_travels_in_place(void **state)
{
    env_t *e = *state;
    const size_t len = 8 * MIB, half = len / 2;
    int thp = test_thp_possible();
    assert_null(mc_store_shared_alloc_huge(len, 7));
    assert_null(mc_store_shared_alloc_huge(len, -1));
    uint8_t *t = mc_store_shared_alloc_huge(len, MC_STORE_HUGE_THP);
    assert_non_null(t);
    long size = 0, huge = test_smaps_huge_kb(0, t, NULL, &size);
    setenv("MC_STORE_USE_HUGEPAGE", "1", 1);
    setenv("MC_STORE_HUGEPAGE_SIZE", "1GB", 1); /* not here: 2 MiB pages, a warning */
    uint8_t *h = mc_store_shared_alloc(len);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.service = e->svc;
    c.local_buffer_size = MIB;
    c.mem_pool_size = len;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    mc_store_t *d = NULL;
    mc_status_t opened = mc_store_open(&c, &d);
    setenv("MC_STORE_USE_HUGEPAGE", "0", 1);
    uint8_t *n = mc_store_shared_alloc(len);
    unsetenv("MC_STORE_USE_HUGEPAGE");
    unsetenv("MC_STORE_HUGEPAGE_SIZE");
    assert_int_equal(opened, MC_OK);
    assert_non_null(h);
    assert_non_null(n);
    long hsize = 0, hhuge = test_smaps_huge_kb(0, h, NULL, &hsize);
    long psize = 0, phuge = test_smaps_huge_kb(0, NULL, "mooncake-client", &psize);
    long nhuge = test_smaps_huge_kb(0, n, NULL, NULL);
    if (thp) {
        assert_int_equal(size, len / 1024);
        assert_int_equal(huge, size);
        assert_int_equal(hsize, len / 1024);
        assert_int_equal(hhuge, hsize);
        assert_true(psize >= (long)(len + MIB) / 1024);
        assert_int_equal(phuge, psize);
    }
    if (test_shmem_thp_off())
        assert_int_equal(nhuge, 0);
    /* in place, registered, as normal pages */
    assert_int_equal(mc_store_register_buffer(d, h, len), MC_OK);
    fill(h, half, 41);
    assert_int_equal(mc_store_put(d, "hp", 2, h, half, NULL), MC_OK);
    memset(h + half, 0, half);
    assert_int_equal(mc_store_get(d, "hp", 2, h + half, half, NULL), (int64_t)half);
    assert_memory_equal(h + half, h, half);
    uint8_t *p = mc_store_alloc_from_mem_pool(d, half);
    assert_non_null(p);
    memset(p, 0, half);
    assert_int_equal(mc_store_get(d, "hp", 2, p, half, NULL), (int64_t)half);
    assert_memory_equal(p, h, half);
    assert_int_equal(mc_store_free_to_mem_pool(d, p), MC_OK);
    assert_int_equal(mc_store_remove(d, "hp", 2, 1), MC_OK);
    assert_int_equal(mc_store_unregister_buffer(d, h), MC_OK);
    mc_store_close(d);
    assert_int_equal(mc_store_shared_free(t), MC_OK);
    assert_int_equal(mc_store_shared_free(h), MC_OK);
    assert_int_equal(mc_store_shared_free(n), MC_OK);
}

/* The master's count of pinned objects (its /metrics). */
static long pinned_count(env_t *e)
{
    char *body = NULL;
    assert_int_equal(tc_http_get(e->c.master.http_port, "/metrics", &body, 5000 * SLOW), 200);
    const char *at = strstr(body, "\nmaster_soft_pin_key_count ");
    assert_non_null(at);
    long n = strtol(at + strlen("\nmaster_soft_pin_key_count "), NULL, 10);
    free(body);
    return n;
}

/* Pins reach the master through the service (CONFIG fields 5-7): a soft
 * pin, a hard pin, an upsert (field 4) of a pinned object keeping its pin;
 * a plain put pins nothing. */
static void pins_and_upserts_reach_the_master_through_the_service(void **state)
{
    env_t *e = *state;
    uint8_t v[4096], b[4096];
    fill(v, sizeof(v), 77);
    long p0 = pinned_count(e);
    assert_int_equal(mc_store_put(e->s, "plain", 5, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(pinned_count(e), p0);
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.soft_pin_action = MC_SOFT_PIN_ENABLE;
    rc.has_soft_pin_ttl = 1;
    rc.soft_pin_ttl_ms = 600000;
    assert_int_equal(mc_store_put(e->s, "soft", 4, v, sizeof(v), &rc), MC_OK);
    assert_int_equal(pinned_count(e), p0 + 1);
    mc_replicate_config_init(&rc);
    rc.with_hard_pin = 1;
    assert_int_equal(mc_store_put(e->s, "hard", 4, v, sizeof(v), &rc), MC_OK);
    assert_int_equal(pinned_count(e), p0 + 2);
    /* an upsert in pieces replaces the value; DISABLE keeps a hard pin */
    mc_replicate_config_init(&rc);
    rc.soft_pin_action = MC_SOFT_PIN_DISABLE;
    mc_slice_t two[2] = {{v + 100, 1000}, {v, 10}};
    assert_int_equal(mc_store_put_parts(e->s, "hard", 4, two, 2, &rc),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_store_upsert_parts(e->s, "hard", 4, two, 2, &rc), MC_OK);
    assert_int_equal(mc_store_get(e->s, "hard", 4, b, sizeof(b), NULL), 1010);
    assert_memory_equal(b, v + 100, 1000);
    assert_memory_equal(b + 1000, v, 10);
    assert_int_equal(pinned_count(e), p0 + 2);
    /* DISABLE drops a soft pin (batch upsert: one call) */
    mc_slice_t k[1] = {{"soft", 4}}, val[1] = {{v, 99}};
    mc_status_t st[1];
    assert_int_equal(mc_store_batch_upsert(e->s, k, val, 1, &rc, st), MC_OK);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(mc_store_get_size(e->s, "soft", 4), 99);
    assert_int_equal(pinned_count(e), p0 + 1);
    assert_int_equal(mc_store_remove_all(e->s, 1), 3);
    assert_int_equal(pinned_count(e), p0);
}

/* The cases every client passes, through the service: upserts (CONFIG
 * field 4), pins (5-7), values in pieces one by one and in batches, batch
 * sizes and get_alloc; batch calls of values larger than staging together. */
static void the_store_cases_pass_through_the_service(void **state)
{
    env_t *e = *state;
    store_env_t se = {.s = e->s, .protocol = "service", .staging = STAGING, .batch_big = 3 * MIB};
    void *st = &se;
    upserts_pieces_allocs_and_sizes(&st);
    batch_calls_report_each_key(&st);
    sc_wait_parked_space();
}

/* ------------------------------------------------------ call channels */

/* Connections the service holds on its unix socket (its listener, one per
 * session, one per call channel): the lines of /proc/net/unix with its name
 * (accepted sockets carry the listener's name; clients' have none). */
static int svc_sockets(env_t *e)
{
    char name[80], line[512];
    snprintf(name, sizeof(name), " @" SVC_SOCK_FMT "\n", e->svc_port);
    FILE *f = fopen("/proc/net/unix", "r");
    int n = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        size_t l = strlen(line), nl = strlen(name);
        n += l >= nl && strcmp(line + l - nl, name) == 0;
    }
    if (f != NULL)
        fclose(f);
    return n;
}

typedef struct caller {
    mc_store_t *s;
    int id;
    int errors;
    char why[160];
} caller_t;

enum { CALLERS = 8, CALLS = 12 };

/* One thread's calls: values in pool memory (in place) and in plain memory
 * (through staging), read back into both, each checked byte for byte. */
static void *caller_main(void *arg)
{
    caller_t *c = arg;
    size_t len = 256 * 1024 + (size_t)c->id * 4099;
    uint8_t *pv = mc_store_alloc_from_mem_pool(c->s, len);
    uint8_t *pb = mc_store_alloc_from_mem_pool(c->s, len);
    uint8_t *v = malloc(len), *b = malloc(len);
    for (int i = 0; i < CALLS && c->errors == 0; i++) {
        if (pv == NULL || pb == NULL || v == NULL || b == NULL) {
            snprintf(c->why, sizeof(c->why), "no memory");
            c->errors++;
            break;
        }
        char key[64];
        int kl = snprintf(key, sizeof(key), "chan-%d-%d", c->id, i);
        uint8_t *src = i % 2 ? pv : v, *dst = i % 3 ? b : pb;
        fill(src, len, (uint64_t)(c->id * 1000 + i));
        memset(dst, 0, len);
        mc_status_t st = mc_store_put(c->s, key, (size_t)kl, src, len, NULL);
        int64_t got = st == MC_OK ? mc_store_get(c->s, key, (size_t)kl, dst, len, NULL) : st;
        int ex = mc_store_exist(c->s, key, (size_t)kl);
        mc_status_t rm = mc_store_remove(c->s, key, (size_t)kl, 1);
        if (st != MC_OK || got != (int64_t)len || memcmp(dst, src, len) != 0 || ex != 1 ||
            rm != MC_OK) {
            snprintf(c->why, sizeof(c->why), "%s: put %s, get %lld, exist %d, remove %s", key,
                     mc_status_str(st), (long long)got, ex, mc_status_str(rm));
            c->errors++;
        }
    }
    if (pv != NULL)
        mc_store_free_to_mem_pool(c->s, pv);
    if (pb != NULL)
        mc_store_free_to_mem_pool(c->s, pb);
    free(v);
    free(b);
    return NULL;
}

static void callers_on_several_threads_share_call_channels_byte_for_byte(void **state)
{
    env_t *e = *state;
    int before = svc_sockets(e);
    mc_store_t *s = NULL;
    assert_int_equal(open_dummy(e, &s), MC_OK); /* its own session and channels */
    pthread_t th[CALLERS];
    caller_t c[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        c[i] = (caller_t){.s = s, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, caller_main, &c[i]), 0);
    }
    for (int i = 0; i < CALLERS; i++) {
        pthread_join(th[i], NULL);
        if (c[i].errors != 0)
            fail_msg("caller %d: %s", i, c[i].why);
    }
    /* the calls ran on channels: at least one, at most one per caller (its
     * session besides) */
    int chans = svc_sockets(e) - before - 1;
    print_message("%d call channel(s) for %d threads\n", chans, CALLERS);
    assert_true(chans >= 1 && chans <= CALLERS);
    /* they end with their client */
    mc_store_close(s);
    uint64_t end = mc_now_ms() + 5000 * SLOW;
    while (svc_sockets(e) > before && mc_now_ms() < end)
        usleep(20000);
    assert_int_equal(svc_sockets(e), before);
}

/* ------------------------------------------------------ raw sessions */

typedef struct raw_session {
    int conn;
    mc_shm_t mem;
    uint64_t id, token;
    mc_reactor_group_t *g;
    mc_rpc_client_t *rpc;
} raw_session_t;

static void raw_open(env_t *e, raw_session_t *r, uint64_t len)
{
    char sock[64];
    snprintf(sock, sizeof(sock), SVC_SOCK_FMT, e->svc_port);
    assert_int_equal(mc_shm_create("test", len, 0, &r->mem), MC_OK);
    assert_int_equal(mc_unix_connect(sock, 2000000, &r->conn), MC_OK);
    svc_hello_t h = {.magic = SVC_MAGIC, .version = SVC_VERSION, .len = r->mem.len};
    assert_int_equal(mc_unix_send(r->conn, &h, sizeof(h), r->mem.fd), MC_OK);
    svc_welcome_t w;
    size_t got = 0;
    int fd = -1;
    assert_int_equal(mc_unix_recv(r->conn, &w, sizeof(w), &got, &fd), MC_OK);
    assert_int_equal(w.status, MC_OK);
    r->id = w.session;
    r->token = w.token;
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    assert_int_equal(mc_reactor_group_create(&go, &r->g), MC_OK);
    mc_rpc_client_opts_t ro;
    mc_rpc_client_opts_init(&ro);
    ro.host = "127.0.0.1";
    ro.port = (uint16_t)e->svc_port;
    assert_int_equal(mc_rpc_client_create(mc_reactor_group_get(r->g, 0), &ro, &r->rpc), MC_OK);
}

/* Share memfd m at offset off on r's connection: the service's status. */
static mc_status_t raw_share(raw_session_t *r, uint64_t off, uint64_t len, int fd)
{
    svc_share_t m = {.magic = SVC_MAGIC, .op = SVC_OP_SHARE, .off = off, .len = len};
    assert_int_equal(mc_unix_send(r->conn, &m, sizeof(m), fd), MC_OK);
    svc_welcome_t w;
    size_t got = 0;
    int nofd = -1;
    assert_int_equal(mc_unix_recv(r->conn, &w, sizeof(w), &got, &nofd), MC_OK);
    assert_int_equal(got, sizeof(w));
    return (mc_status_t)w.status;
}

static void raw_close(raw_session_t *r)
{
    mc_rpc_client_destroy(r->rpc);
    mc_reactor_group_destroy(r->g);
    if (r->conn >= 0)
        close(r->conn);
    mc_shm_destroy(&r->mem);
}

/* A call with SESSION, TOKEN, KEY and PARTS (2*np numbers). */
static mc_status_t raw_call(raw_session_t *r, uint16_t method, uint64_t token, const char *key,
                            const uint64_t *parts, unsigned np)
{
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mp_write_map(&w, 4);
    mc_mp_write_uint(&w, MC_F_SVC_SESSION);
    mc_mp_write_uint(&w, r->id);
    mc_mp_write_uint(&w, MC_F_SVC_TOKEN);
    mc_mp_write_uint(&w, token);
    mc_mp_write_uint(&w, MC_F_KEY);
    mc_mp_write_bin(&w, key, strlen(key));
    mc_mp_write_uint(&w, MC_F_SVC_PARTS);
    mc_mp_write_array(&w, 2 * np);
    for (unsigned i = 0; i < 2 * np; i++)
        mc_mp_write_uint(&w, parts[i]);
    mc_status_t st =
        mc_rpc_call_sync(r->rpc, method, mc_buf_head(&body), mc_buf_used(&body), 5000000, &resp);
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return st;
}

static void offsets_outside_a_session_and_bad_calls_are_refused_and_nothing_is_touched(void **state)
{
    env_t *e = *state;
    raw_session_t r = {0};
    raw_open(e, &r, 1 * MIB);
    uint8_t *mem = r.mem.base;
    fill(mem, r.mem.len, 42);
    /* a value to read */
    uint8_t v[2000];
    fill(v, sizeof(v), 5);
    assert_int_equal(mc_store_put(e->s, "raw", 3, v, sizeof(v), NULL), MC_OK);
    uint64_t L = r.mem.len;
    const uint64_t bad[][2] = {{L - 10, 11}, {L, 1}, {UINT64_MAX - 5, 10}, {0, 0}, {5, L}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(raw_call(&r, MC_RPC_SVC_GET, r.token, "raw", bad[i], 1),
                         MC_ERR_INVALID_PARAMS);
        assert_int_equal(raw_call(&r, MC_RPC_SVC_PUT, r.token, "rawput", bad[i], 1),
                         MC_ERR_INVALID_PARAMS);
    }
    /* one bad part among good ones refuses the call */
    const uint64_t mixed[4] = {0, 100, L - 1, 2};
    assert_int_equal(raw_call(&r, MC_RPC_SVC_PUT, r.token, "rawput", mixed, 2),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_exist(e->s, "rawput", 6), 0);
    /* a wrong token: no such session */
    const uint64_t ok[2] = {0, 4096};
    assert_int_equal(raw_call(&r, MC_RPC_SVC_GET, r.token ^ 1, "raw", ok, 1),
                     MC_ERR_CLIENT_NOT_FOUND);
    /* nothing in our memory moved */
    uint8_t *want = malloc(r.mem.len);
    assert_non_null(want);
    fill(want, r.mem.len, 42);
    assert_memory_equal(mem, want, r.mem.len);
    free(want);
    /* a malformed body: refused, the service goes on */
    const uint8_t junk[] = {0x81, 0xcc};
    mc_buf_t resp = MC_BUF_INIT;
    assert_int_not_equal(
        mc_rpc_call_sync(r.rpc, MC_RPC_SVC_GET, junk, sizeof(junk), 5000000, &resp), MC_OK);
    mc_buf_fini(&resp);
    /* and a good call works */
    assert_int_equal(raw_call(&r, MC_RPC_SVC_GET, r.token, "raw", ok, 1), MC_OK);
    assert_memory_equal(mem, v, sizeof(v));
    /* more memory: over region 0, without a memfd, empty: refused, the
     * session goes on; past it: taken */
    mc_shm_t more;
    assert_int_equal(mc_shm_create("test-more", MIB, 0, &more), MC_OK);
    fill(more.base, more.len, 43);
    assert_int_equal(raw_share(&r, L - 4096, more.len, more.fd), MC_ERR_INVALID_PARAMS);
    assert_int_equal(raw_share(&r, 4 * L, more.len, -1), MC_ERR_INVALID_PARAMS);
    assert_int_equal(raw_share(&r, 4 * L, 0, more.fd), MC_ERR_INVALID_PARAMS);
    /* a memfd its sender could shrink under the service (not sealed): refused */
    int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
    assert_true(unsealed >= 0);
    assert_int_equal(ftruncate(unsealed, (off_t)more.len), 0);
    assert_int_equal(raw_share(&r, 4 * L, more.len, unsealed), MC_ERR_INVALID_ARGUMENT);
    /* nor as a session's first memory */
    char sock[64];
    snprintf(sock, sizeof(sock), SVC_SOCK_FMT, e->svc_port);
    int c2 = -1;
    assert_int_equal(mc_unix_connect(sock, 2000000, &c2), MC_OK);
    svc_hello_t h = {.magic = SVC_MAGIC, .version = SVC_VERSION, .len = more.len};
    assert_int_equal(mc_unix_send(c2, &h, sizeof(h), unsealed), MC_OK);
    svc_welcome_t w;
    size_t got = 0;
    int nofd = -1;
    assert_int_equal(mc_unix_recv(c2, &w, sizeof(w), &got, &nofd), MC_OK);
    assert_int_equal(w.status, MC_ERR_INVALID_ARGUMENT);
    close(c2);
    close(unsealed);
    assert_int_equal(raw_share(&r, 4 * L, more.len, more.fd), MC_OK);
    const uint64_t in_more[2] = {4 * L + 100, sizeof(v)};
    assert_int_equal(raw_call(&r, MC_RPC_SVC_GET, r.token, "raw", in_more, 1), MC_OK);
    assert_memory_equal((uint8_t *)more.base + 100, v, sizeof(v));
    /* a part across the gap, or past the new region: refused */
    const uint64_t across[][2] = {{L - 10, 4 * L}, {4 * L + more.len - 5, 10}, {2 * L, 10}};
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(raw_call(&r, MC_RPC_SVC_PUT, r.token, "rawput", across[i], 1),
                         MC_ERR_INVALID_PARAMS);
    /* a region must come after the last one */
    assert_int_equal(raw_share(&r, 2 * L, more.len, more.fd), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_exist(e->s, "rawput", 6), 0);
    mc_shm_destroy(&more); /* the service keeps its mapping */
    assert_int_equal(raw_call(&r, MC_RPC_SVC_GET, r.token, "raw", in_more, 1), MC_OK);
    assert_int_equal(mc_store_remove(e->s, "raw", 3, 1), MC_OK);
    raw_close(&r);
}

/* A call channel of r's session (token given): the welcome's status; *fd
 * the channel when MC_OK. */
static mc_status_t raw_chan(env_t *e, raw_session_t *r, uint64_t token, int *fd)
{
    char sock[64];
    snprintf(sock, sizeof(sock), SVC_SOCK_FMT, e->svc_port);
    assert_int_equal(mc_unix_connect(sock, 5000000, fd), MC_OK);
    svc_channel_t m = {.magic = SVC_MAGIC, .op = SVC_OP_CHANNEL, .session = r->id, .token = token};
    assert_int_equal(mc_unix_send(*fd, &m, sizeof(m), -1), MC_OK);
    svc_welcome_t w;
    size_t got = 0;
    int nofd = -1;
    assert_int_equal(mc_unix_recv(*fd, &w, sizeof(w), &got, &nofd), MC_OK);
    assert_int_equal(got, sizeof(w));
    if (w.status != MC_OK) {
        close(*fd);
        *fd = -1;
    }
    return (mc_status_t)w.status;
}

/* A call on channel fd (KEY and PARTS as raw_call): the answer's status, or
 * the channel's failure (CONN_CLOSED: the service closed it). */
static mc_status_t raw_chan_call(int fd, raw_session_t *r, uint32_t method, uint64_t token,
                                 const char *key, const uint64_t *parts, unsigned np)
{
    mc_buf_t msg = MC_BUF_INIT;
    svc_call_t hd = {.magic = SVC_MAGIC, .method = method};
    assert_int_equal(mc_buf_append(&msg, &hd, sizeof(hd)), MC_OK);
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &msg);
    mc_mp_write_map(&w, 4);
    mc_mp_write_uint(&w, MC_F_SVC_SESSION);
    mc_mp_write_uint(&w, r->id);
    mc_mp_write_uint(&w, MC_F_SVC_TOKEN);
    mc_mp_write_uint(&w, token);
    mc_mp_write_uint(&w, MC_F_KEY);
    mc_mp_write_bin(&w, key, strlen(key));
    mc_mp_write_uint(&w, MC_F_SVC_PARTS);
    mc_mp_write_array(&w, 2 * np);
    for (unsigned i = 0; i < 2 * np; i++)
        mc_mp_write_uint(&w, parts[i]);
    mc_status_t st = mc_unix_send(fd, mc_buf_head(&msg), mc_buf_used(&msg), -1);
    mc_buf_fini(&msg);
    static uint8_t in[SVC_CHAN_MAX];
    size_t got = 0;
    int nofd = -1;
    if (st == MC_OK)
        st = mc_unix_recv(fd, in, sizeof(in), &got, &nofd);
    if (st != MC_OK)
        return st;
    svc_answer_t ans;
    assert_true(got >= sizeof(ans));
    memcpy(&ans, in, sizeof(ans));
    assert_int_equal(ans.magic, SVC_MAGIC);
    return (mc_status_t)ans.status;
}

static void a_call_channel_checks_its_session_its_token_and_every_offset(void **state)
{
    env_t *e = *state;
    raw_session_t r = {0};
    raw_open(e, &r, 1 * MIB);
    uint8_t *mem = r.mem.base;
    uint64_t L = r.mem.len;
    int ch = -1;
    /* a wrong token, an unknown session: no channel */
    assert_int_equal(raw_chan(e, &r, r.token ^ 1, &ch), MC_ERR_CLIENT_NOT_FOUND);
    assert_int_equal(raw_chan(e, &r, r.token, &ch), MC_OK);
    /* a put and a get through it, on our memory */
    fill(mem, 5000, 77);
    const uint64_t ok[2] = {0, 5000}, back[2] = {L - 5000, 5000};
    assert_int_equal(raw_chan_call(ch, &r, MC_RPC_SVC_PUT, r.token, "rawchan", ok, 1), MC_OK);
    assert_int_equal(raw_chan_call(ch, &r, MC_RPC_SVC_GET, r.token, "rawchan", back, 1), MC_OK);
    assert_memory_equal(mem + L - 5000, mem, 5000);
    /* offsets outside the session's memory: refused, the channel serves on */
    fill(mem, L, 42);
    const uint64_t bad[][2] = {{L - 10, 11}, {L, 1}, {UINT64_MAX - 5, 10}, {0, 0}, {5, L}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(raw_chan_call(ch, &r, MC_RPC_SVC_GET, r.token, "rawchan", bad[i], 1),
                         MC_ERR_INVALID_PARAMS);
        assert_int_equal(raw_chan_call(ch, &r, MC_RPC_SVC_PUT, r.token, "rawchan2", bad[i], 1),
                         MC_ERR_INVALID_PARAMS);
    }
    assert_int_equal(mc_store_exist(e->s, "rawchan2", 8), 0);
    uint8_t *want = malloc(L);
    assert_non_null(want);
    fill(want, L, 42);
    assert_memory_equal(mem, want, L);
    free(want);
    /* a call with a wrong token, a method that is no call: refused */
    assert_int_equal(raw_chan_call(ch, &r, MC_RPC_SVC_GET, r.token ^ 1, "rawchan", ok, 1),
                     MC_ERR_CLIENT_NOT_FOUND);
    assert_int_equal(raw_chan_call(ch, &r, 9999, r.token, "rawchan", ok, 1), MC_ERR_NO_METHOD);
    assert_int_equal(raw_chan_call(ch, &r, MC_RPC_SVC_GET, r.token, "rawchan", ok, 1), MC_OK);
    /* junk closes the channel (and only it) */
    assert_int_equal(mc_unix_send(ch, "xyz", 3, -1), MC_OK);
    uint8_t x[16];
    size_t got = 0;
    int nofd = -1;
    assert_int_equal(mc_unix_recv(ch, x, sizeof(x), &got, &nofd), MC_ERR_CONN_CLOSED);
    close(ch);
    assert_int_equal(raw_chan(e, &r, r.token, &ch), MC_OK);
    assert_int_equal(raw_chan_call(ch, &r, MC_RPC_SVC_EXIST, r.token, "rawchan", ok, 1), MC_OK);
    /* the session's end: its channels' calls find no session */
    close(r.conn);
    r.conn = -1;
    mc_status_t st = MC_OK;
    uint64_t end = mc_now_ms() + 5000 * SLOW;
    while ((st = raw_chan_call(ch, &r, MC_RPC_SVC_GET, r.token, "rawchan", ok, 1)) == MC_OK &&
           mc_now_ms() < end)
        usleep(20000);
    assert_int_equal(st, MC_ERR_CLIENT_NOT_FOUND);
    close(ch);
    assert_int_equal(mc_store_remove(e->s, "rawchan", 7, 1), MC_OK);
    raw_close(&r);
}

/* /proc/PID: open descriptors and resident bytes */
static void proc_usage(pid_t pid, unsigned *fds, uint64_t *rss)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    *fds = 0;
    for (struct dirent *x; d != NULL && (x = readdir(d)) != NULL;)
        *fds += x->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    char line[256];
    *rss = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss = strtoull(line + 6, NULL, 10) * 1024;
    if (f != NULL)
        fclose(f);
}

static void killed_clients_leave_no_session_descriptor_or_memory_behind(void **state)
{
    env_t *e = *state;
    pid_t svc = e->c.node[0].proc.pid;
    char bin[256];
    unsigned fd0 = 0, fd1 = 0;
    uint64_t rss0 = 0, rss1 = 0;
    enum { CYCLES = 30 };
    srand(7);
    for (int i = 0; i < CYCLES; i++) {
        tc_args_t a;
        tc_args_init(&a, test_bin("store_dummy", bin, sizeof(bin)));
        tc_args_add(&a, "--service");
        tc_args_add(&a, "%s", e->svc);
        tc_args_add(&a, "--mode");
        tc_args_add(&a, "churn");
        tc_args_add(&a, "--id");
        tc_args_add(&a, "%d", i);
        tc_args_add(&a, "--size");
        tc_args_add(&a, "%llu", (unsigned long long)MIB);
        tc_args_add(&a, "--pool");
        tc_args_add(&a, "%llu", (unsigned long long)(4 * MIB));
        tc_args_add(&a, "--staging");
        tc_args_add(&a, "%llu", (unsigned long long)MIB);
        test_proc_t p = {0};
        assert_int_equal(tc_spawn(&p, a.argv), 0);
        char line[128];
        assert_int_equal(test_proc_readline(&p, line, sizeof(line), 10000 * SLOW), 0);
        assert_string_equal(line, "running");
        usleep((useconds_t)(rand() % 20000)); /* in the middle of puts */
        tc_stop_ms(&p, SIGKILL, 5000);
        if (i == 4) /* after the first sessions: the service's steady state */
            proc_usage(svc, &fd0, &rss0);
    }
    /* every session ended (the service noticed each client's end) */
    uint64_t end = mc_now_ms() + 5000 * SLOW;
    do {
        proc_usage(svc, &fd1, &rss1);
        if (fd1 <= fd0)
            break;
        usleep(20000);
    } while (mc_now_ms() < end);
    print_message("service: %u fds, %llu KiB RSS after 5 cycles; %u fds, %llu KiB after %d\n", fd0,
                  (unsigned long long)(rss0 >> 10), fd1, (unsigned long long)(rss1 >> 10), CYCLES);
    assert_true(fd1 <= fd0);
#if !defined(__SANITIZE_THREAD__)
    /* (ThreadSanitizer keeps shadow memory for every address range mapped
     * once: its RSS grows with each session's new mapping, ours does not) */
    assert_true(rss1 < rss0 + 32 * MIB);
#endif
    /* and it still serves */
    uint8_t v[100] = {1};
    assert_int_equal(mc_store_put(e->s, "after-kills", 11, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(mc_store_remove(e->s, "after-kills", 11, 1), MC_OK);
    mc_store_remove_by_regex(e->s, "^churn-", 1);
}

static void a_second_service_on_the_port_is_refused_at_start(void **state)
{
    env_t *e = *state;
    char bin[256], master[64];
    tc_args_t a;
    tc_args_init(&a, test_prog("mooncake-store-server", bin, sizeof(bin)));
    tc_args_add(&a, "--set");
    tc_args_add(&a, "store.master=%s", tc_master_addr(&e->c.master, master, sizeof(master)));
    tc_args_add(&a, "--set");
    tc_args_add(&a, "store.global_segment_size=16MiB");
    tc_args_add(&a, "--set");
    tc_args_add(&a, "service.enabled=true");
    tc_args_add(&a, "--set");
    tc_args_add(&a, "service.port=%u", e->svc_port);
    tc_args_add(&a, "--set");
    tc_args_add(&a, "log.level=error");
    test_proc_t p = {0};
    assert_int_equal(tc_spawn(&p, a.argv), 0);
    char line[256];
    int ready = 0;
    while (test_proc_readline(&p, line, sizeof(line), 10000 * SLOW) == 0)
        ready |= strncmp(line, "ready", 5) == 0;
    int st = tc_stop_ms(&p, 0, 10000 * SLOW);
    assert_false(ready);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    /* the first one serves on */
    assert_int_equal(mc_store_exist(e->s, "x", 1), 0);
}

static void a_user_the_service_does_not_admit_is_refused(void **state)
{
    env_t *e = *state;
    if (geteuid() != 0) {
        fprintf(stderr, "(skipped: needs root to run a client as another user)\n");
        skip();
    }
    char last[256];
    const char *const args[] = {"--uid", "65534", "--count", "1", NULL};
    assert_int_equal(run_dummy(e, args, last, sizeof(last)), 1);
    print_message("%s\n", last);
    assert_true(strstr(last, "fail open") != NULL);
    assert_true(strstr(last, "ILLEGAL_CLIENT") != NULL);
}

static void a_pool_larger_than_the_host_has_fails_at_open(void **state)
{
    env_t *e = *state;
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.service = e->svc;
    c.mem_pool_size = 1ull << 50;
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_open(&c, &s), MC_ERR_NOMEM);
    c.mem_pool_size = 0;
    c.local_buffer_size = 0;
    assert_int_equal(mc_store_open(&c, &s), MC_ERR_INVALID_ARGUMENT);
    c.local_buffer_size = MIB;
    c.service = "no-port";
    assert_int_equal(mc_store_open(&c, &s), MC_ERR_INVALID_ARGUMENT);
    /* nobody serves that port: a clear error at open */
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", test_free_port());
    c.service = addr;
    assert_int_equal(mc_store_open(&c, &s), MC_ERR_CONN_CLOSED);
}

static void a_hung_service_times_calls_out_and_serves_again_when_it_wakes(void **state)
{
    env_t *e = *state;
    uint8_t v[1000];
    fill(v, sizeof(v), 3);
    pid_t pid = e->c.node[0].proc.pid;
    assert_int_equal(test_proc_freeze(pid), 0);
    uint64_t t0 = mc_now_us();
    mc_status_t st = mc_store_put(e->s, "hung", 4, v, sizeof(v), NULL);
    uint64_t dt = mc_now_us() - t0;
    kill(pid, SIGCONT);
    print_message("a put to a hung service: %s after %llu ms\n", mc_status_str(st),
                  (unsigned long long)(dt / 1000));
    assert_int_equal(st, MC_ERR_RPC_TIMEOUT);
    assert_true(dt >= RPC_TIMEOUT_US / 2 && dt <= RPC_TIMEOUT_US + 1500000);
    /* awake: calls work again (the timed-out put may or may not have landed) */
    mc_store_remove(e->s, "hung", 4, 1);
    st = MC_ERR_RPC_TIMEOUT;
    for (int i = 0; i < 20 && st != MC_OK; i++)
        if ((st = mc_store_put(e->s, "awake", 5, v, sizeof(v), NULL)) != MC_OK)
            usleep(100000);
    assert_int_equal(st, MC_OK);
    assert_int_equal(mc_store_remove(e->s, "awake", 5, 1), MC_OK);
}

typedef struct waiter {
    mc_store_t *s;
    uint8_t *v;
    int id;
    mc_status_t st;
    uint64_t done_us;
} waiter_t;

static void *waiter_main(void *arg)
{
    waiter_t *w = arg;
    char key[32];
    int kl = snprintf(key, sizeof(key), "waiting-%d", w->id);
    w->st = mc_store_put(w->s, key, (size_t)kl, w->v, 4096, NULL);
    w->done_us = mc_now_us();
    return NULL;
}

static void a_service_killed_while_callers_wait_fails_them_at_once(void **state)
{
    env_t *e = *state;
    enum { N = 3 };
    uint8_t *v = mc_store_alloc_from_mem_pool(e->s, 4096);
    assert_non_null(v);
    fill(v, 4096, 12);
    assert_int_equal(mc_store_put(e->s, "warm", 4, v, 4096, NULL), MC_OK); /* a channel */
    assert_int_equal(mc_store_remove(e->s, "warm", 4, 1), MC_OK);
    /* callers wait on their channels (or for a new channel's answer) */
    assert_int_equal(test_proc_freeze(e->c.node[0].proc.pid), 0);
    pthread_t th[N];
    waiter_t w[N];
    for (int i = 0; i < N; i++) {
        w[i] = (waiter_t){.s = e->s, .v = v, .id = i, .st = MC_OK};
        assert_int_equal(pthread_create(&th[i], NULL, waiter_main, &w[i]), 0);
    }
    usleep(300000); /* (well inside RPC_TIMEOUT_US) */
    uint64_t t0 = mc_now_us();
    tc_node_stop(&e->c.node[0], SIGKILL);
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        uint64_t dt = w[i].done_us > t0 ? w[i].done_us - t0 : 0;
        print_message("caller %d: %s %llu ms after the kill\n", i, mc_status_str(w[i].st),
                      (unsigned long long)(dt / 1000));
        /* its end, not its timeout, fails the call */
        assert_int_equal(w[i].st, MC_ERR_CONN_CLOSED);
        assert_true(dt < RPC_TIMEOUT_US / 2);
    }
    /* back: the client shares again, on new channels */
    assert_int_equal(start_node(e), 0);
    mc_status_t st = MC_ERR_CONN_CLOSED;
    for (int i = 0; i < 50 && st != MC_OK; i++)
        if ((st = mc_store_put(e->s, "back", 4, v, 4096, NULL)) != MC_OK)
            usleep(100000);
    assert_int_equal(st, MC_OK);
    uint8_t b[4096];
    assert_int_equal(mc_store_get(e->s, "back", 4, b, sizeof(b), NULL), 4096);
    assert_memory_equal(b, v, 4096);
    assert_int_equal(mc_store_remove(e->s, "back", 4, 1), MC_OK);
    assert_int_equal(mc_store_free_to_mem_pool(e->s, v), MC_OK);
}

static void a_killed_service_fails_calls_in_time_and_clients_share_again(void **state)
{
    env_t *e = *state;
    uint8_t *pv = mc_store_alloc_from_mem_pool(e->s, 1000);
    assert_non_null(pv);
    fill(pv, 1000, 9);
    assert_int_equal(mc_store_put(e->s, "before", 6, pv, 1000, NULL), MC_OK);
    /* registered shared memory (a value larger than staging needs it) */
    const size_t big = STAGING + MIB;
    uint8_t *sh = mc_store_shared_alloc(big);
    assert_non_null(sh);
    fill(sh, big, 10);
    assert_int_equal(mc_store_register_buffer(e->s, sh, big), MC_OK);
    tc_node_stop(&e->c.node[0], SIGKILL);
    /* memory registered while the service is gone: shared with the next one */
    uint8_t *sh2 = mc_store_shared_alloc(big);
    assert_non_null(sh2);
    fill(sh2, big, 11);
    assert_int_equal(mc_store_register_buffer(e->s, sh2, big), MC_OK);
    uint64_t t0 = mc_now_us();
    mc_status_t st = mc_store_put(e->s, "during", 6, pv, 1000, NULL);
    uint64_t dt = mc_now_us() - t0;
    print_message("a put with the service gone: %s after %llu ms\n", mc_status_str(st),
                  (unsigned long long)(dt / 1000));
    assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
    assert_true(dt <= RPC_TIMEOUT_US + 1000000);
    uint8_t b[1000];
    assert_true(mc_store_get(e->s, "before", 6, b, sizeof(b), NULL) < 0);
    /* back (a new segment: what it held is gone); the next calls share
     * our memory with it again */
    assert_int_equal(start_node(e), 0);
    st = MC_ERR_CONN_CLOSED;
    for (int i = 0; i < 50 && st != MC_OK; i++) {
        st = mc_store_put(e->s, "after", 5, pv, 1000, NULL);
        if (st != MC_OK)
            usleep(100000);
    }
    assert_int_equal(st, MC_OK);
    memset(b, 0, sizeof(b));
    assert_int_equal(mc_store_get(e->s, "after", 5, b, sizeof(b), NULL), 1000);
    assert_memory_equal(b, pv, 1000);
    assert_int_equal(mc_store_remove(e->s, "after", 5, 1), MC_OK);
    /* the shared memory was shared again with the new service */
    assert_int_equal(mc_store_put(e->s, "after-sh", 8, sh, big, NULL), MC_OK);
    assert_int_equal(mc_store_get_size(e->s, "after-sh", 8), (int64_t)big);
    assert_int_equal(mc_store_remove(e->s, "after-sh", 8, 1), MC_OK);
    assert_int_equal(mc_store_put(e->s, "after-sh2", 9, sh2, big, NULL), MC_OK);
    memset(sh, 0, big);
    assert_int_equal(mc_store_get(e->s, "after-sh2", 9, sh, big, NULL), (int64_t)big);
    assert_memory_equal(sh, sh2, big);
    assert_int_equal(mc_store_remove(e->s, "after-sh2", 9, 1), MC_OK);
    assert_int_equal(mc_store_unregister_buffer(e->s, sh2), MC_OK);
    assert_int_equal(mc_store_shared_free(sh2), MC_OK);
    assert_int_equal(mc_store_unregister_buffer(e->s, sh), MC_OK);
    assert_int_equal(mc_store_shared_free(sh), MC_OK);
    assert_int_equal(mc_store_free_to_mem_pool(e->s, pv), MC_OK);
}

/* A put the master places on another node (preferred there) starts on the
 * worker and goes on through the node's client from PutStart's answer; a
 * get of it reads there through the node's client from GetReplicaList's
 * answer; two replicas take the node's client all the way; a batch put's
 * copies into the node's own segment (on the worker) byte for byte, a key
 * that exists refused alone. */
static void puts_placed_elsewhere_and_batches_go_through_the_nodes_client(void **state)
{
    env_t *e = *state;
    mc_store_t *s = e->s;
    tc_node_t other;
    memset(&other, 0, sizeof(other));
    char master[64];
    const char *const ns[] = {"store.global_segment_size=64MiB", NULL};
    assert_int_equal(
        tc_node_start(&other, tc_master_addr(&e->c.master, master, sizeof(master)), ns), 0);
    const size_t len = 2 * MIB + 3;
    uint8_t *v = mc_store_alloc_from_mem_pool(s, len), *b = mc_store_alloc_from_mem_pool(s, len);
    assert_non_null(v);
    assert_non_null(b);
    fill(v, len, 41);
    mc_replicate_config_t cfg;
    mc_replicate_config_init(&cfg);
    const char *pref[1] = {other.name};
    cfg.preferred_segments = pref;
    cfg.n_preferred = 1;
    assert_int_equal(mc_store_put(s, "elsewhere", 9, v, len, &cfg), MC_OK);
    mc_store_replica_t r[4];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(s, "elsewhere", 9, r, 4, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment, other.name);
    assert_int_equal(mc_store_get(s, "elsewhere", 9, b, len, NULL), (int64_t)len);
    assert_memory_equal(b, v, len);
    /* two replicas: ours and the other node's (named: a node an earlier
     * case killed may still be listed until the master expires it) */
    mc_replicate_config_init(&cfg);
    cfg.replica_num = 2;
    const char *both[2] = {e->c.node[0].name, other.name};
    cfg.preferred_segments = both;
    cfg.n_preferred = 2;
    fill(v, len, 42);
    assert_int_equal(mc_store_put(s, "twice", 5, v, len, &cfg), MC_OK);
    assert_int_equal(mc_store_query(s, "twice", 5, r, 4, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_true((strcmp(r[0].segment, other.name) == 0) != (strcmp(r[1].segment, other.name) == 0));
    memset(b, 0, len);
    assert_int_equal(mc_store_get(s, "twice", 5, b, len, NULL), (int64_t)len);
    assert_memory_equal(b, v, len);
    assert_int_equal(mc_store_remove(s, "elsewhere", 9, 1), MC_OK);
    assert_int_equal(mc_store_remove(s, "twice", 5, 1), MC_OK);
    tc_node_stop(&other, SIGTERM);
    /* a batch of 16 x 256 KiB + 1 from pool memory; one key exists */
    enum { NB = 16 };
    const size_t bl = 256 * 1024 + 1;
    uint8_t *bv = mc_store_alloc_from_mem_pool(s, NB * bl),
            *bo = mc_store_alloc_from_mem_pool(s, NB * bl);
    assert_non_null(bv);
    assert_non_null(bo);
    char kb[NB][16];
    mc_slice_t keys[NB], vals[NB], outs[NB];
    mc_status_t sts[NB];
    int64_t res[NB];
    for (int i = 0; i < NB; i++) {
        snprintf(kb[i], sizeof(kb[i]), "bp%d", i);
        keys[i] = (mc_slice_t){kb[i], strlen(kb[i])};
        fill(bv + i * bl, bl, 500 + (uint64_t)i);
        vals[i] = (mc_slice_t){bv + i * bl, bl};
        outs[i] = (mc_slice_t){bo + i * bl, bl};
    }
    assert_int_equal(mc_store_put(s, "bp7", 3, v, 100, NULL), MC_OK);
    assert_int_equal(mc_store_batch_put(s, keys, vals, NB, NULL, sts), MC_OK);
    for (int i = 0; i < NB; i++)
        assert_int_equal(sts[i], i == 7 ? MC_ERR_OBJECT_ALREADY_EXISTS : MC_OK);
    memset(bo, 0, NB * bl);
    assert_int_equal(mc_store_batch_get(s, keys, outs, NB, res), MC_OK);
    for (int i = 0; i < NB; i++) {
        if (i == 7) {
            assert_int_equal(res[i], 100);
            assert_memory_equal(bo + i * bl, v, 100);
            continue;
        }
        assert_int_equal(res[i], (int64_t)bl);
        assert_memory_equal(bo + i * bl, bv + i * bl, bl);
    }
    mc_status_t rs[NB];
    assert_int_equal(mc_store_batch_remove(s, keys, NB, 1, rs), MC_OK);
    assert_int_equal(mc_store_free_to_mem_pool(s, bv), MC_OK);
    assert_int_equal(mc_store_free_to_mem_pool(s, bo), MC_OK);
    assert_int_equal(mc_store_free_to_mem_pool(s, v), MC_OK);
    assert_int_equal(mc_store_free_to_mem_pool(s, b), MC_OK);
}

/* The service's workers call the master on connections of their own
 * (store_mconn_t): a master that is down fails their puts and gets at once
 * with a clear status; one restarted (on the same port, knowing nothing) is
 * called again, and puts and gets through the service work once the node
 * mounted again. */
static void a_master_down_fails_calls_at_once_and_a_restarted_one_serves_them(void **state)
{
    env_t *e = *state;
    uint8_t *pv = mc_store_alloc_from_mem_pool(e->s, MIB);
    uint8_t *pb = mc_store_alloc_from_mem_pool(e->s, MIB);
    assert_non_null(pv);
    assert_non_null(pb);
    fill(pv, MIB, 21);
    assert_int_equal(mc_store_put(e->s, "m-before", 8, pv, MIB, NULL), MC_OK);
    assert_int_equal(mc_store_get(e->s, "m-before", 8, pb, MIB, NULL), (int64_t)MIB);
    assert_memory_equal(pb, pv, MIB);
    tc_master_stop(&e->c.master, SIGKILL);
    for (int i = 0; i < 3; i++) { /* (several workers: each finds it down) */
        uint64_t t0 = mc_now_us();
        mc_status_t st = mc_store_put(e->s, "m-during", 8, pv, MIB, NULL);
        int64_t g = mc_store_get(e->s, "m-before", 8, pb, MIB, NULL);
        uint64_t dt = mc_now_us() - t0;
        print_message("master down: put %s, get %s, %llu ms\n", mc_status_str(st),
                      mc_status_str((mc_status_t)g), (unsigned long long)(dt / 1000));
        assert_int_equal(st, MC_ERR_CONN_CLOSED);
        assert_int_equal(g, MC_ERR_CONN_CLOSED);
        assert_true(dt < RPC_TIMEOUT_US);
    }
    const char *const ms[] = {"master.client_ttl=3s", "master.lease_ttl=2s", NULL};
    assert_int_equal(tc_master_start(&e->c.master, ms), 0);
    mc_status_t st = MC_ERR_CONN_CLOSED;
    for (int i = 0; i < 100 * SLOW && st != MC_OK; i++) { /* (the node mounts at its next ping) */
        st = mc_store_put(e->s, "m-after", 7, pv, MIB, NULL);
        if (st != MC_OK)
            usleep(100000);
    }
    assert_int_equal(st, MC_OK);
    memset(pb, 0, MIB);
    assert_int_equal(mc_store_get(e->s, "m-after", 7, pb, MIB, NULL), (int64_t)MIB);
    assert_memory_equal(pb, pv, MIB);
    /* every worker is connected again (one call each at least, in parallel) */
    for (int i = 0; i < 16; i++) {
        char k[16];
        snprintf(k, sizeof(k), "m-%d", i);
        assert_int_equal(mc_store_put(e->s, k, strlen(k), pv, 4096, NULL), MC_OK);
        assert_int_equal(mc_store_get(e->s, k, strlen(k), pb, MIB, NULL), 4096);
    }
    assert_int_equal(mc_store_free_to_mem_pool(e->s, pv), MC_OK);
    assert_int_equal(mc_store_free_to_mem_pool(e->s, pb), MC_OK);
}

/* ------------------------------------------------- HA: a new leader */

#define HA_CLUSTER_ID "svcha"

typedef struct ha_svc {
    tc_redis_t redis;
    tc_master_t m[2];
    tc_node_t node;
    char url[128], svc[64];
} ha_svc_t;

static int ha_svc_master(ha_svc_t *h, int i)
{
    char backend[96];
    snprintf(backend, sizeof(backend), "ha.backend=redis://127.0.0.1:%u/0", h->redis.port);
    const char *const sets[] = {
        "master.client_ttl=10s", "master.lease_ttl=2s", backend, "ha.cluster_id=" HA_CLUSTER_ID,
        "ha.lease_ttl=1s",       "ha.sync=strict",      NULL};
    return tc_master_start(&h->m[i], sets);
}

/* Which of the two masters leads per Redis, or -1. */
static int ha_svc_leader(const ha_svc_t *h)
{
    mc_ha_url_t u;
    const char *why;
    char addr[MC_HA_ADDR_MAX];
    if (mc_ha_url_parse(h->url, &u, &why) != MC_OK ||
        mc_ha_resolve_leader(&u, 500000, addr, sizeof(addr), NULL) != MC_OK)
        return -1;
    for (int i = 0; i < 2; i++) {
        char want[64];
        snprintf(want, sizeof(want), "127.0.0.1:%u", h->m[i].rpc_port);
        if (strcmp(addr, want) == 0)
            return i;
    }
    return -1;
}

static int ha_svc_wait_leader(const ha_svc_t *h, int want)
{
    uint64_t deadline = mc_now_ms() + 5000ull * SLOW;
    while (mc_now_ms() < deadline) {
        if (ha_svc_leader(h) == want)
            return 1;
        usleep(20000);
    }
    return 0;
}

static void ha_svc_check(mc_store_t *d, int from, int to, uint8_t *v, uint8_t *b, size_t len)
{
    for (int i = from; i < to; i++) {
        char k[32];
        snprintf(k, sizeof(k), "ha-svc-%d", i);
        fill(v, len, 300 + (uint64_t)i);
        memset(b, 0, len);
        assert_int_equal(mc_store_get(d, k, strlen(k), b, len, NULL), (int64_t)len);
        assert_memory_equal(b, v, len);
    }
}

/* The workers' master connections follow the leader exactly as the node's
 * own connection does: the leader killed, puts and gets through the service
 * work on the new one at their first try, and every acknowledged put reads
 * back byte for byte. */
static void the_workers_master_connections_follow_a_new_leader(void **state)
{
    (void)state;
    if (access(tc_redis_bin(), X_OK) != 0) {
        print_message("skipped: %s not found\n", tc_redis_bin());
        skip();
    }
    static ha_svc_t h;
    memset(&h, 0, sizeof(h));
    assert_int_equal(tc_redis_start(&h.redis), 0);
    snprintf(h.url, sizeof(h.url), "redis://127.0.0.1:%u/0?cluster=" HA_CLUSTER_ID, h.redis.port);
    assert_int_equal(ha_svc_master(&h, 0), 0);
    assert_true(ha_svc_wait_leader(&h, 0));
    assert_int_equal(ha_svc_master(&h, 1), 0);
    unsigned port = test_free_port();
    char ps[64];
    snprintf(ps, sizeof(ps), "service.port=%u", port);
    snprintf(h.svc, sizeof(h.svc), "127.0.0.1:%u", port);
    const char *const ns[] = {"service.enabled=true", ps, "store.global_segment_size=64MiB", NULL};
    assert_int_equal(tc_node_start(&h.node, h.url, ns), 0);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.service = h.svc;
    c.local_buffer_size = STAGING;
    c.mem_pool_size = POOL;
    c.rpc_timeout_us = 3 * RPC_TIMEOUT_US;
    mc_store_t *d = NULL;
    assert_int_equal(mc_store_open(&c, &d), MC_OK);
    const size_t len = MIB + 13;
    uint8_t *v = mc_store_alloc_from_mem_pool(d, len), *b = mc_store_alloc_from_mem_pool(d, len);
    assert_non_null(v);
    assert_non_null(b);
    char k[32];
    for (int i = 0; i < 8; i++) {
        snprintf(k, sizeof(k), "ha-svc-%d", i);
        fill(v, len, 300 + (uint64_t)i);
        assert_int_equal(mc_store_put(d, k, strlen(k), v, len, NULL), MC_OK);
    }
    ha_svc_check(d, 0, 8, v, b, len);
    /* the leader dies; master 1 takes over */
    tc_stop_ms(&h.m[0].proc, SIGKILL, 1000);
    assert_true(ha_svc_wait_leader(&h, 1));
    for (int i = 8; i < 24; i++) {
        snprintf(k, sizeof(k), "ha-svc-%d", i);
        fill(v, len, 300 + (uint64_t)i);
        uint64_t t0 = mc_now_us();
        mc_status_t st = mc_store_put(d, k, strlen(k), v, len, NULL);
        if (st != MC_OK || i == 8)
            print_message("put %d on the new leader: %s after %llu ms\n", i, mc_status_str(st),
                          (unsigned long long)((mc_now_us() - t0) / 1000));
        assert_int_equal(st, MC_OK);
    }
    ha_svc_check(d, 0, 24, v, b, len); /* the old puts too: strict sync */
    assert_int_equal(mc_store_free_to_mem_pool(d, v), MC_OK);
    assert_int_equal(mc_store_free_to_mem_pool(d, b), MC_OK);
    mc_store_close(d);
    tc_node_stop(&h.node, SIGTERM);
    tc_master_stop(&h.m[1], SIGTERM);
    tc_master_stop(&h.m[0], SIGKILL);
    tc_redis_stop(&h.redis, SIGTERM);
}

int main(void)
{
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(four_client_processes_put_and_get_concurrently_byte_for_byte),
        cmocka_unit_test(the_c_api_works_through_the_service),
        cmocka_unit_test(callers_on_several_threads_share_call_channels_byte_for_byte),
        cmocka_unit_test(the_store_cases_pass_through_the_service),
        cmocka_unit_test(pins_and_upserts_reach_the_master_through_the_service),
        cmocka_unit_test(shared_memory_registered_later_travels_in_place),
        cmocka_unit_test(huge_page_shared_memory_travels_in_place),
        cmocka_unit_test(
            offsets_outside_a_session_and_bad_calls_are_refused_and_nothing_is_touched),
        cmocka_unit_test(a_call_channel_checks_its_session_its_token_and_every_offset),
        cmocka_unit_test(killed_clients_leave_no_session_descriptor_or_memory_behind),
        cmocka_unit_test(a_second_service_on_the_port_is_refused_at_start),
        cmocka_unit_test(a_user_the_service_does_not_admit_is_refused),
        cmocka_unit_test(a_pool_larger_than_the_host_has_fails_at_open),
        cmocka_unit_test(a_hung_service_times_calls_out_and_serves_again_when_it_wakes),
        /* last: restart the service */
        cmocka_unit_test(a_service_killed_while_callers_wait_fails_them_at_once),
        cmocka_unit_test(a_killed_service_fails_calls_in_time_and_clients_share_again),
        cmocka_unit_test(puts_placed_elsewhere_and_batches_go_through_the_nodes_client),
        cmocka_unit_test(the_workers_master_connections_follow_a_new_leader),
        cmocka_unit_test(a_master_down_fails_calls_at_once_and_a_restarted_one_serves_them),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
