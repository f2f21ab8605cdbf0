/*
 * store_bench - Mooncake Store client throughput and latency: Put, Get,
 * BatchPut, BatchGet (mooncake/store.h) for a sweep of value sizes,
 * concurrencies and replica counts.
 *
 *   store_bench [--ops put,get,batch_put,batch_get] [--sizes 4K,64K,1M,4M,64M]
 *               [--concurrency 1,4] [--replicas 1,2] [--mode remote,local]
 *               [--batch 64] [--duration 2] [--warmup 0.5] [--reps 3]
 *               [--segment-size 2G] [--client-reactors 0] [--registered]
 *               [--verify] [--master HOST:PORT] [--lease-wait S]
 *               [--protocol tcp|rdma] [--emulated N] [--shm on|off]
 *
 * Where the data is (--mode):
 *  - remote: on separate storage-node processes (mooncake-store-server),
 *    reached over --protocol; the bench's client contributes no memory. There are
 *    as many nodes as the largest --replicas (replicas go to distinct
 *    segments).
 *  - local: on the bench client's own segment (put with that segment
 *    preferred, one replica): gets are a master round trip plus a memcpy.
 *  - service: the bench client is a co-located client (mc_store_config_t.
 *    service) of storage node 0, started with service.enabled: the node
 *    runs the puts and gets straight on the threads' buffers, which come
 *    from mc_store_alloc_from_mem_pool (memory shared with the node), and
 *    keeps the data in its own segment (one replica).
 *
 * Shared memory (--shm, default on as the library's): clients and nodes of
 * this host reach each other's segments over the shm transport; --shm off
 * keeps them on --protocol (what compare_redis.sh measures).
 *
 * Transport (--protocol, for the client and the nodes it starts): tcp (the
 * default) or rdma: RDMA NICs, or with --emulated N (= MC_RDMA_EMULATED=N
 * in the environment, which the nodes inherit) N EMULATED NICs per process,
 * for tests and demos: data then moves over unix sockets, not a NIC. With
 * rdma the client copies unregistered buffers through its staging buffer
 * (the transport needs registered memory); --registered avoids that.
 *
 * Unless --master is given, a mooncake-master and the storage nodes run as
 * child processes (next to this program, on free ports, --segment-size
 * each); with --master the running cluster is used (its nodes are assumed to
 * have --segment-size each; local mode still works).
 *
 * Concurrency N = N threads sharing one client, each doing sync calls one
 * after the other (N requests in flight, like redis-benchmark -c N -P 1).
 * The plain API: over TCP the threads' (unregistered) buffers are used in
 * place; --registered registers them anyway. MC_STORE_STAGING=always in the
 * environment makes the client copy through its staging buffer instead, as
 * with a transport that needs registered memory.
 *
 * A timed run lasts --duration seconds or until the puts have used about
 * half of the capacity, whichever comes first; stored objects are removed
 * between runs. For every point: warm-up, then --reps runs; prints the
 * median run's ops/s, keys/s, GB/s (value bytes, 1 GB = 1e9 B, counted once
 * whatever the replica count) and its p50/p99 latency per call (a batch is
 * one call), as a table and as "csv," lines:
 *   csv,store_bench,mode,op,size,replicas,concurrency,batch,ops_s,keys_s,gb_s,p50_us,p99_us,errors,
 *   protocol
 * (protocol: tcp, rdma, or rdma-emulated).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mooncake/store.h"
#include "perf/bench_opt.h"
#include "test/integration/proc.h"
#include "util/conf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MAX_LIST 16
#define MAX_CONC 64
#define MAX_NODES 8
#define MAX_BATCH 1024
#define KEY_LEN 48
/* Share of the capacity one timed put run may fill: below the master's
 * eviction watermark (0.95), with room for what is still held by leases. */
#define FILL_RATIO 0.5
/* Keys read by get runs (fewer when the capacity cannot hold them). */
#define GET_KEYS 64
#define BATCH_GET_SETS 16

enum { OP_PUT, OP_GET, OP_BATCH_PUT, OP_BATCH_GET, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"put", "get", "batch_put", "batch_get"};
enum { MODE_REMOTE, MODE_LOCAL, MODE_SERVICE, MODE_COUNT };
static const char *const mode_names[MODE_COUNT] = {"remote", "local", "service"};

typedef struct opts {
    int ops[OP_COUNT];
    int modes[MODE_COUNT];
    uint64_t sizes[MAX_LIST];
    unsigned nsizes;
    unsigned conc[MAX_LIST], nconc;
    unsigned repl[MAX_LIST], nrepl;
    unsigned batch;
    double duration, warmup;
    unsigned reps;
    uint64_t segment_size;
    unsigned client_reactors;
    int registered, verify;
    const char *master; /* external cluster, or NULL */
    double lease_wait;
    const char *protocol; /* "tcp" or "rdma" */
    unsigned emulated;    /* rdma: N emulated NICs per process (MC_RDMA_EMULATED) */
    const char *shm;      /* "on" or "off": the client's and the nodes' store.shm */
} opts_t;

/* "tcp", "rdma" or "rdma-emulated" (what the table and the CSV say). */
static const char *proto_label(const opts_t *o)
{
    if (strcmp(o->protocol, "rdma") != 0)
        return o->protocol;
    return o->emulated > 0 ? "rdma-emulated" : "rdma";
}

typedef struct bench bench_t;

typedef struct worker {
    pthread_t thread;
    bench_t *b;
    unsigned id;
    uint8_t *buf; /* batch * size bytes (one value for put/get) */
    size_t buf_len;
    mc_slice_t keys[MAX_BATCH], vals[MAX_BATCH];
    char keybuf[MAX_BATCH][KEY_LEN];
    int64_t res[MAX_BATCH];
    mc_status_t st[MAX_BATCH];
    uint32_t *lat; /* per call, microseconds */
    size_t nlat, cap;
    uint64_t calls, keys_ok, errors, bad_data;
    mc_status_t first_err;
    uint64_t t_end;
} worker_t;

struct bench {
    opts_t *o;
    mc_store_t *s;
    mc_replicate_config_t rc;
    const char *pref[1];
    /* the run in progress */
    int op, mode;
    uint64_t size;
    unsigned conc, batch;
    unsigned run_id;
    unsigned nget; /* get: keys preloaded; batch_get: sets of batch keys */
    uint64_t deadline_us;
    _Atomic int64_t budget; /* calls left in this run */
    int recording;
    worker_t w[MAX_CONC];
    /* cluster */
    test_proc_t master, node[MAX_NODES]; /* test/integration/proc.h */
    unsigned nnodes;
    char service[64]; /* node 0's service "127.0.0.1:PORT" (mode service) */
    char master_addr[128];
    char tmpdir[64];
};

typedef struct result {
    double calls_s, keys_s, gb_s, p50, p99;
    uint64_t errors, bad_data;
    mc_status_t first_err;
} result_t;

/* ------------------------------------------------------------ values */

/* Value bytes for key index i: a pattern that differs per key and offset. */
static void fill(uint8_t *p, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < len; i++)
        p[i] = (uint8_t)(seed + i);
}

static int check(const uint8_t *p, size_t len, uint64_t seed)
{
    static _Thread_local uint8_t *ref;
    static _Thread_local size_t ref_len;
    if (ref_len < len) {
        free(ref);
        ref = malloc(len);
        ref_len = ref ? len : 0;
        if (ref == NULL)
            return 0;
    }
    fill(ref, len, seed);
    return memcmp(ref, p, len) == 0;
}

/* Keys are made on the timed path: digits by hand, not snprintf (which
 * would cost the bench more than some of the calls it measures). */
static char *put_u64(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

static char *put_str(char *p, const char *s)
{
    while (*s != '\0')
        *p++ = *s++;
    return p;
}

/* prefix-a-b-c[-d] (KEY_LEN is room for the longest) */
static size_t key_make(char *out, const char *prefix, uint64_t a, uint64_t b, uint64_t c,
                       int have_d, uint64_t d)
{
    char *p = put_str(out, prefix);
    p = put_u64(p, a);
    *p++ = '-';
    p = put_u64(p, b);
    *p++ = '-';
    p = put_u64(p, c);
    if (have_d) {
        *p++ = '-';
        p = put_u64(p, d);
    }
    *p = '\0';
    return (size_t)(p - out);
}

static size_t key_get(char *out, unsigned mode, uint64_t size, unsigned repl, unsigned i)
{
    return key_make(out, "sb-g-", mode, size, repl, 1, i);
}

/* ------------------------------------------------------------ workers */

static void record(worker_t *w, uint64_t t0)
{
    uint64_t us = mc_now_us() - t0;
    if (!w->b->recording)
        return;
    if (w->nlat == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 65536;
        uint32_t *p = realloc(w->lat, cap * sizeof(*p));
        if (p == NULL)
            return;
        w->lat = p;
        w->cap = cap;
    }
    w->lat[w->nlat++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void note_err(worker_t *w, mc_status_t st)
{
    if (w->errors++ == 0)
        w->first_err = st;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    bench_t *b = w->b;
    size_t size = (size_t)b->size;
    const mc_replicate_config_t *rc = &b->rc;
    for (uint64_t seq = 0;; seq++) {
        if (mc_now_us() >= b->deadline_us || atomic_fetch_sub(&b->budget, 1) <= 0)
            break;
        uint64_t t0 = mc_now_us();
        switch (b->op) {
        case OP_PUT: {
            size_t kl = key_make(w->keybuf[0], "sb-p-", b->run_id, w->id, seq, 0, 0);
            mc_status_t st = mc_store_put(b->s, w->keybuf[0], kl, w->buf, size, rc);
            record(w, t0);
            w->calls++;
            if (st == MC_OK)
                w->keys_ok++;
            else
                note_err(w, st);
            break;
        }
        case OP_GET: {
            unsigned k = (unsigned)((seq * b->conc + w->id) % b->nget);
            size_t kl = key_get(w->keybuf[0], (unsigned)b->mode, b->size, b->rc.replica_num, k);
            int64_t got = mc_store_get(b->s, w->keybuf[0], kl, w->buf, size, NULL);
            record(w, t0);
            w->calls++;
            if (got == (int64_t)size) {
                w->keys_ok++;
                if (b->o->verify && !check(w->buf, size, k))
                    w->bad_data++;
            } else {
                note_err(w, got < 0 ? (mc_status_t)got : MC_ERR_INTERNAL_ERROR);
            }
            break;
        }
        case OP_BATCH_PUT: {
            for (unsigned i = 0; i < b->batch; i++) {
                w->keys[i].len = key_make(w->keybuf[i], "sb-bp-", b->run_id, w->id, seq, 1, i);
            }
            mc_status_t st = mc_store_batch_put(b->s, w->keys, w->vals, b->batch, rc, w->st);
            record(w, t0);
            w->calls++;
            if (st != MC_OK) {
                note_err(w, st);
                break;
            }
            for (unsigned i = 0; i < b->batch; i++) {
                if (w->st[i] == MC_OK)
                    w->keys_ok++;
                else
                    note_err(w, w->st[i]);
            }
            break;
        }
        case OP_BATCH_GET: {
            unsigned set = (unsigned)((seq * b->conc + w->id) % b->nget);
            for (unsigned i = 0; i < b->batch; i++)
                w->keys[i].len = key_get(w->keybuf[i], (unsigned)b->mode, b->size,
                                         b->rc.replica_num, set * b->batch + i);
            mc_status_t st = mc_store_batch_get(b->s, w->keys, w->vals, b->batch, w->res);
            record(w, t0);
            w->calls++;
            if (st != MC_OK) {
                note_err(w, st);
                break;
            }
            for (unsigned i = 0; i < b->batch; i++) {
                if (w->res[i] == (int64_t)size) {
                    w->keys_ok++;
                    if (b->o->verify && !check(w->vals[i].ptr, size, set * b->batch + i))
                        w->bad_data++;
                } else {
                    note_err(w, w->res[i] < 0 ? (mc_status_t)w->res[i] : MC_ERR_INTERNAL_ERROR);
                }
            }
            break;
        }
        }
    }
    w->t_end = mc_now_us();
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* One run of the current point: conc threads for `secs` (or the budget). */
static result_t run_once(bench_t *b, double secs, int64_t budget, int recording)
{
    result_t r = {0};
    b->run_id++;
    b->recording = recording;
    atomic_store(&b->budget, budget);
    uint64_t t0 = mc_now_us();
    b->deadline_us = t0 + (uint64_t)(secs * 1e6);
    for (unsigned i = 0; i < b->conc; i++) {
        worker_t *w = &b->w[i];
        w->nlat = 0;
        w->calls = w->keys_ok = w->errors = w->bad_data = 0;
        w->first_err = MC_OK;
        pthread_create(&w->thread, NULL, worker_main, w);
    }
    uint64_t t1 = t0, calls = 0, keys = 0, nlat = 0;
    for (unsigned i = 0; i < b->conc; i++) {
        worker_t *w = &b->w[i];
        pthread_join(w->thread, NULL);
        t1 = w->t_end > t1 ? w->t_end : t1;
        calls += w->calls;
        keys += w->keys_ok;
        r.errors += w->errors;
        r.bad_data += w->bad_data;
        if (r.first_err == MC_OK)
            r.first_err = w->first_err;
        nlat += w->nlat;
    }
    double s = (double)(t1 - t0) / 1e6;
    r.calls_s = (double)calls / s;
    r.keys_s = (double)keys / s;
    r.gb_s = r.keys_s * (double)b->size / 1e9;
    uint32_t *all = malloc((nlat ? nlat : 1) * sizeof(*all));
    if (all != NULL && nlat > 0) {
        size_t at = 0;
        for (unsigned i = 0; i < b->conc; i++) {
            memcpy(all + at, b->w[i].lat, b->w[i].nlat * sizeof(*all));
            at += b->w[i].nlat;
        }
        qsort(all, nlat, sizeof(*all), cmp_u32);
        r.p50 = all[(size_t)(0.50 * (double)(nlat - 1))];
        r.p99 = all[(size_t)(0.99 * (double)(nlat - 1))];
    }
    free(all);
    return r;
}

static int cmp_res(const void *a, const void *b)
{
    double x = ((const result_t *)a)->keys_s, y = ((const result_t *)b)->keys_s;
    return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------ buffers */

/* Give every worker room for its values (batch * size), registered with the
 * client under --registered, and point the batch slices into it. */
static int workers_setup(bench_t *b, uint64_t size, unsigned batch, unsigned conc)
{
    size_t need = (size_t)size * batch;
    for (unsigned i = 0; i < conc; i++) {
        worker_t *w = &b->w[i];
        if (w->buf_len < need) {
            if (w->buf != NULL && b->o->registered)
                mc_store_unregister_buffer(b->s, w->buf);
            if (b->mode == MODE_SERVICE)
                mc_store_free_to_mem_pool(b->s, w->buf);
            else
                free(w->buf);
            w->buf = NULL;
            w->buf_len = 0;
            if (b->mode == MODE_SERVICE) {
                /* memory shared with the service: in place, no copy */
                if ((w->buf = mc_store_alloc_from_mem_pool(b->s, need)) == NULL)
                    return -1;
            } else if (posix_memalign((void **)&w->buf, 4096, need) != 0) {
                return -1;
            }
            w->buf_len = need;
            memset(w->buf, 0, need);
            if (b->o->registered) {
                mc_status_t st = mc_store_register_buffer(b->s, w->buf, need);
                if (st != MC_OK) {
                    fprintf(stderr, "store_bench: register_buffer: %s\n", mc_status_str(st));
                    return -1;
                }
            }
        }
        w->b = b;
        w->id = i;
        for (unsigned k = 0; k < batch; k++) {
            w->keys[k].ptr = w->keybuf[k];
            w->vals[k].ptr = w->buf + (size_t)k * size;
            w->vals[k].len = (size_t)size;
        }
        /* put values: distinct per worker, the same for each of its puts */
        if (b->op == OP_PUT || b->op == OP_BATCH_PUT)
            for (unsigned k = 0; k < batch; k++)
                fill(w->buf + (size_t)k * size, (size_t)size, 1000000 + i * MAX_BATCH + k);
    }
    return 0;
}

static void workers_free(bench_t *b)
{
    for (unsigned i = 0; i < MAX_CONC; i++) {
        worker_t *w = &b->w[i];
        if (w->buf != NULL && b->o->registered && b->s != NULL)
            mc_store_unregister_buffer(b->s, w->buf);
        if (b->mode == MODE_SERVICE && b->s != NULL)
            mc_store_free_to_mem_pool(b->s, w->buf);
        else
            free(w->buf);
        free(w->lat);
        memset(w, 0, sizeof(*w));
    }
}

/* ------------------------------------------------------------ cluster */

static void sleep_s(double s)
{
    if (s > 0)
        usleep((useconds_t)(s * 1e6));
}

/* Wait (timeout_ms) for a line of fd starting with prefix; copy the rest. */
static int read_prefixed_line(int fd, const char *prefix, char *rest, size_t room, int timeout_ms)
{
    char line[512];
    size_t n = 0;
    uint64_t end = mc_now_ms() + (uint64_t)timeout_ms;
    while (mc_now_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        char ch;
        if (read(fd, &ch, 1) != 1)
            return -1;
        if (ch != '\n') {
            if (n + 1 < sizeof(line))
                line[n++] = ch;
            continue;
        }
        line[n] = '\0';
        n = 0;
        size_t pl = strlen(prefix);
        if (strncmp(line, prefix, pl) == 0) {
            size_t rl = strlen(line + pl);
            rl = rl < room ? rl : room - 1;
            memcpy(rest, line + pl, rl);
            rest[rl] = '\0';
            return 0;
        }
    }
    return -1;
}

/* Poll a log file for "ready: rpc HOST:PORT". */
static int wait_master(bench_t *b, const char *log)
{
    uint64_t end = mc_now_ms() + 10000;
    while (mc_now_ms() < end) {
        FILE *f = fopen(log, "r");
        char line[1024];
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            char *p = strstr(line, "ready: rpc ");
            if (p != NULL && sscanf(p + 11, "%127[^,]", b->master_addr) == 1) {
                fclose(f);
                return 0;
            }
        }
        if (f != NULL)
            fclose(f);
        if (waitpid(b->master.pid, NULL, WNOHANG) == b->master.pid) {
            b->master.pid = 0;
            break;
        }
        usleep(20000);
    }
    fprintf(stderr, "store_bench: mooncake-master did not start (log: %s)\n", log);
    return -1;
}

static void cluster_stop(bench_t *b)
{
    for (unsigned i = 0; i < b->nnodes; i++)
        if (b->node[i].pid > 0)
            kill(b->node[i].pid, SIGTERM); /* all at once, then reap */
    for (unsigned i = 0; i < b->nnodes; i++)
        test_proc_stop(&b->node[i], SIGTERM, 30000);
    test_proc_stop(&b->master, SIGTERM, 30000);
    b->nnodes = 0;
}

static int cluster_start(bench_t *b, const char *argv0, unsigned nodes)
{
    char dir[4096];
    const char *slash = strrchr(argv0, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - argv0) : 1, slash ? argv0 : ".");
    snprintf(b->tmpdir, sizeof(b->tmpdir), "/tmp/store_bench.XXXXXX");
    if (mkdtemp(b->tmpdir) == NULL) {
        fprintf(stderr, "store_bench: mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    char bin[4200], log[256];
    snprintf(bin, sizeof(bin), "%s/mooncake-master", dir);
    snprintf(log, sizeof(log), "%s/master.log", b->tmpdir);
    /* lease_ttl 1s: space of removed-while-leased objects comes back soon */
    char *margs[] = {bin,
                     "--set",
                     "server.bind_address=127.0.0.1",
                     "--set",
                     "server.rpc_port=0",
                     "--set",
                     "server.http_enabled=false",
                     "--set",
                     "master.lease_ttl=1s",
                     "--set",
                     "log.level=info",
                     NULL};
    if (test_proc_start_log(&b->master, margs, log, 0) != 0 || wait_master(b, log) != 0)
        return -1;
    snprintf(bin, sizeof(bin), "%s/mooncake-store-server", dir);
    char a_master[200], a_size[64];
    snprintf(a_master, sizeof(a_master), "store.master=%s", b->master_addr);
    snprintf(a_size, sizeof(a_size), "store.global_segment_size=%" PRIu64, b->o->segment_size);
    char a_proto[64], a_shm[32], a_port[64] = "service.port=50052";
    snprintf(a_proto, sizeof(a_proto), "store.protocol=%s", b->o->protocol);
    snprintf(a_shm, sizeof(a_shm), "store.shm=%s", b->o->shm);
    for (unsigned i = 0; i < nodes; i++) {
        int svc = i == 0 && b->o->modes[MODE_SERVICE];
        if (svc) {
            /* node 0 serves the co-located bench client */
            unsigned port = 30000 + (unsigned)(getpid() % 20000);
            snprintf(a_port, sizeof(a_port), "service.port=%u", port);
            snprintf(b->service, sizeof(b->service), "127.0.0.1:%u", port);
        }
        char *nargs[] = {bin,
                         "--set",
                         a_master,
                         "--set",
                         a_size,
                         "--set",
                         "store.reactors=1",
                         "--set",
                         a_proto,
                         "--set",
                         a_shm,
                         "--set",
                         "log.level=warn",
                         "--set",
                         a_port,
                         "--set",
                         svc ? "service.enabled=true" : "service.enabled=false",
                         NULL};
        snprintf(log, sizeof(log), "%s/node%u.log", b->tmpdir, i);
        int started = test_proc_start_log(&b->node[i], nargs, log, 1) == 0;
        b->nnodes = i + 1;
        char name[256];
        if (!started ||
            read_prefixed_line(b->node[i].out_fd, "ready ", name, sizeof(name), 30000) != 0) {
            fprintf(stderr, "store_bench: storage node %u did not start (log: %s)\n", i, log);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ points */

static void clear_all(bench_t *b)
{
    int64_t n = mc_store_remove_all(b->s, 1);
    if (n < 0)
        fprintf(stderr, "store_bench: remove_all: %s\n", mc_status_str((mc_status_t)n));
}

static const char *fmt_size(uint64_t v, char *buf, size_t len)
{
    if (v >= (1ull << 30) && v % (1ull << 30) == 0)
        snprintf(buf, len, "%" PRIu64 "GiB", v >> 30);
    else if (v >= (1ull << 20) && v % (1ull << 20) == 0)
        snprintf(buf, len, "%" PRIu64 "MiB", v >> 20);
    else if (v >= 1024 && v % 1024 == 0)
        snprintf(buf, len, "%" PRIu64 "KiB", v >> 10);
    else
        snprintf(buf, len, "%" PRIu64 "B", v);
    return buf;
}

/* Capacity the current mode's puts land in. */
static uint64_t capacity(const bench_t *b)
{
    unsigned nodes = b->o->master ? b->o->nrepl : b->nnodes;
    return b->mode != MODE_REMOTE ? b->o->segment_size : b->o->segment_size * (nodes ? nodes : 1);
}

/* Preload the keys gets read: GET_KEYS objects (get) or BATCH_GET_SETS sets
 * of batch objects (batch_get), as many as half the capacity holds. */
static int preload(bench_t *b)
{
    uint64_t per = b->size * b->rc.replica_num;
    uint64_t fit = (uint64_t)((double)capacity(b) * FILL_RATIO) / per;
    unsigned unit = b->op == OP_GET ? 1 : b->batch;
    uint64_t sets = fit / unit;
    unsigned want = b->op == OP_GET ? GET_KEYS : BATCH_GET_SETS;
    b->nget = (unsigned)(sets < want ? sets : want);
    if (b->nget == 0) {
        fprintf(stderr,
                "store_bench: %s of %" PRIu64 " bytes: no room for one %s (segment "
                "too small)\n",
                op_names[b->op], b->size, b->op == OP_GET ? "value" : "batch");
        return -1;
    }
    uint8_t *v = malloc((size_t)b->size);
    if (v == NULL)
        return -1;
    int rc = 0;
    for (unsigned k = 0; k < b->nget * unit && rc == 0; k++) {
        char key[KEY_LEN];
        size_t kl = key_get(key, (unsigned)b->mode, b->size, b->rc.replica_num, k);
        fill(v, (size_t)b->size, k);
        mc_status_t st = mc_store_put(b->s, key, kl, v, (size_t)b->size, &b->rc);
        if (st != MC_OK && st != MC_ERR_OBJECT_ALREADY_EXISTS) {
            fprintf(stderr, "store_bench: preload of %s: %s\n", key, mc_status_str(st));
            rc = -1;
        }
    }
    free(v);
    return rc;
}

static int point(bench_t *b, int op, uint64_t size, unsigned conc)
{
    opts_t *o = b->o;
    b->op = op;
    b->size = size;
    b->conc = conc;
    b->batch = op == OP_BATCH_PUT || op == OP_BATCH_GET ? o->batch : 1;
    if (workers_setup(b, size, b->batch, conc) != 0) {
        fprintf(stderr, "store_bench: out of memory for %u x %u x %" PRIu64 " bytes\n", conc,
                b->batch, size);
        return -1;
    }
    int is_put = op == OP_PUT || op == OP_BATCH_PUT;
    int64_t budget = INT64_MAX;
    if (is_put) {
        uint64_t per_call = size * b->batch * b->rc.replica_num;
        budget = (int64_t)((double)capacity(b) * FILL_RATIO / (double)per_call);
        if (budget < (int64_t)conc) {
            fprintf(stderr, "store_bench: %s %" PRIu64 " x %u: segment too small\n", op_names[op],
                    size, b->batch);
            return -1;
        }
    } else if (preload(b) != 0) {
        return -1;
    }
    result_t rs[99];
    run_once(b, o->warmup, budget, 0);
    if (is_put)
        clear_all(b);
    for (unsigned r = 0; r < o->reps; r++) {
        rs[r] = run_once(b, o->duration, budget, 1);
        if (is_put)
            clear_all(b);
    }
    if (!is_put) {
        clear_all(b);
        /* forced removal of leased objects frees their space when the
         * leases end: wait so the next point finds the capacity empty */
        sleep_s(o->lease_wait);
    }
    uint64_t errs = 0, bad = 0;
    mc_status_t first = MC_OK;
    for (unsigned r = 0; r < o->reps; r++) {
        errs += rs[r].errors;
        bad += rs[r].bad_data;
        if (first == MC_OK)
            first = rs[r].first_err;
    }
    qsort(rs, o->reps, sizeof(rs[0]), cmp_res);
    result_t m = rs[o->reps / 2];
    char sz[32];
    fmt_size(size, sz, sizeof(sz));
    printf("%-7s %-10s %7s %5u %5u %6u %11.0f %11.0f %8.3f %10.0f %10.0f %7" PRIu64 "%s%s\n",
           mode_names[b->mode], op_names[op], sz, b->rc.replica_num, conc, b->batch, m.calls_s,
           m.keys_s, m.gb_s, m.p50, m.p99, errs, errs ? " first: " : "",
           errs ? mc_status_str(first) : "");
    if (bad)
        printf("        ^ %" PRIu64 " value(s) read back with wrong bytes\n", bad);
    printf("csv,store_bench,%s,%s,%" PRIu64 ",%u,%u,%u,%.0f,%.0f,%.4f,%.0f,%.0f,%" PRIu64 ",%s\n",
           mode_names[b->mode], op_names[op], size, b->rc.replica_num, conc, b->batch, m.calls_s,
           m.keys_s, m.gb_s, m.p50, m.p99, errs + bad, proto_label(b->o));
    fflush(stdout);
    return 0;
}

/* ------------------------------------------------------------ main */

static int parse_names(const char *s, const char *const *names, int count, int *on)
{
    char *dup = strdup(s), *save = NULL;
    int rc = 0;
    memset(on, 0, (size_t)count * sizeof(*on));
    for (char *t = strtok_r(dup, ",", &save); t && rc == 0; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < count; i++)
            if (strcasecmp(t, names[i]) == 0 || strcasecmp(t, "all") == 0)
                on[i] = found = 1;
        rc = found ? 0 : -1;
    }
    free(dup);
    return rc;
}

/* The command line (perf/bench_opt.h). */
typedef struct cli {
    char *ops, *sizes, *concurrency, *replicas, *mode, *master, *protocol, *shm;
    uint64_t batch, reps, segment_size, client_reactors, emulated;
    double duration, warmup, lease_wait;
    bool registered, verify;
} cli_t;

static const mc_conf_key_t cli_rows[] = {
    MC_CONF_ROW(cli_t, ops, "ops", MC_CONF_STRING, "put,get,batch_put,batch_get", 0, 0,
                "operations, a comma list (or all)"),
    MC_CONF_ROW(cli_t, sizes, "sizes", MC_CONF_STRING, "4K,64K,1M,4M,64M", 0, 0,
                "value sizes, a comma list"),
    MC_CONF_ROW(cli_t, concurrency, "concurrency", MC_CONF_STRING, "1,4", 0, 0,
                "threads doing sync calls on one client, a comma list"),
    MC_CONF_ROW(cli_t, replicas, "replicas", MC_CONF_STRING, "1,2", 0, 0,
                "replicas per object, a comma list"),
    MC_CONF_ROW(cli_t, mode, "mode", MC_CONF_STRING, "remote,local", 0, 0,
                "remote: data on separate mooncake-store-server processes; local: on the "
                "client's own segment; service: the client is a co-located client of node 0's "
                "store service (values in mc_store_alloc_from_mem_pool memory, data in node 0's "
                "segment)"),
    MC_CONF_ROW(cli_t, batch, "batch", MC_CONF_UINT, "64", 1, MAX_BATCH, "keys per batch call"),
    MC_CONF_ROW(cli_t, duration, "duration", MC_CONF_DOUBLE, "2", 0.001, 3600, "seconds per run"),
    MC_CONF_ROW(cli_t, warmup, "warmup", MC_CONF_DOUBLE, "0.5", 0, 3600,
                "seconds of warm-up before a point's first run"),
    MC_CONF_ROW(cli_t, reps, "reps", MC_CONF_UINT, "3", 1, 99,
                "runs per point (the median counts)"),
    MC_CONF_ROW(cli_t, segment_size, "segment-size", MC_CONF_SIZE, "2GiB", 1, 0x1p50,
                "segment of each node (and of the client in local mode)"),
    MC_CONF_ROW(cli_t, client_reactors, "client-reactors", MC_CONF_UINT, "0", 0, 64,
                "reactors of the client (0: one per NUMA node)"),
    MC_CONF_ROW(cli_t, registered, "registered", MC_CONF_BOOL, "false", 0, 0,
                "register the threads' buffers (over TCP unregistered ones are used in place too)"),
    MC_CONF_ROW(cli_t, verify, "verify", MC_CONF_BOOL, "false", 0, 0,
                "check every value read back"),
    MC_CONF_ROW(cli_t, master, "master", MC_CONF_STRING, "", 0, 0,
                "HOST:PORT of a running cluster instead of starting one"),
    MC_CONF_ROW(cli_t, lease_wait, "lease-wait", MC_CONF_DOUBLE, "-1", -1, 3600,
                "seconds to wait for leases before removing (-1: the master's lease_ttl)"),
    MC_CONF_ROW(cli_t, protocol, "protocol", MC_CONF_STRING, "tcp", 0, 0,
                "transport of the client and the nodes it starts: tcp or rdma"),
    MC_CONF_ROW(cli_t, emulated, "emulated", MC_CONF_UINT, "0", 0, 16,
                "with rdma, N EMULATED NICs per process (MC_RDMA_EMULATED=N; tests and demos "
                "only: no NIC, data over unix sockets)"),
    MC_CONF_ROW(cli_t, shm, "shm", MC_CONF_STRING, "on", 0, 0,
                "on: clients and nodes of this host share memory (the shm transport); off: they "
                "use --protocol"),
};

/* The command line into o: 0, or the exit code (help: 0, error: 2) + 1. */
static int parse_cli(int argc, char **argv, opts_t *o)
{
    static cli_t c;
    int rc = bench_opts_parse("usage: store_bench [options]\n"
                              "store client Put/Get/BatchPut/BatchGet: calls/s, keys/s, GB/s, "
                              "p50/p99 per call",
                              cli_rows, MC_ARRAY_SIZE(cli_rows), &c, argc, argv);
    if (rc != 0)
        return rc == 1 ? 1 : 3;
    uint64_t v[MAX_LIST];
    if (parse_names(c.ops, op_names, OP_COUNT, o->ops) != 0 ||
        parse_names(c.mode, mode_names, MODE_COUNT, o->modes) != 0) {
        fprintf(stderr, "store_bench: --ops or --mode names an unknown entry ('%s', '%s')\n", c.ops,
                c.mode);
        return 3;
    }
    if ((o->nsizes = bench_list("sizes", c.sizes, 1, 1, 1ull << 40, o->sizes, MAX_LIST)) == 0)
        return 3;
    if ((o->nconc = bench_list("concurrency", c.concurrency, 0, 1, MAX_CONC, v, MAX_LIST)) == 0)
        return 3;
    for (unsigned i = 0; i < o->nconc; i++)
        o->conc[i] = (unsigned)v[i];
    if ((o->nrepl = bench_list("replicas", c.replicas, 0, 1, MAX_NODES, v, MAX_LIST)) == 0)
        return 3;
    for (unsigned i = 0; i < o->nrepl; i++)
        o->repl[i] = (unsigned)v[i];
    if (strcmp(c.protocol, "tcp") != 0 && strcmp(c.protocol, "rdma") != 0) {
        fprintf(stderr, "store_bench: --protocol: '%s' is not tcp or rdma\n", c.protocol);
        return 3;
    }
    if (strcmp(c.shm, "on") != 0 && strcmp(c.shm, "off") != 0) {
        fprintf(stderr, "store_bench: --shm: '%s' is not on or off\n", c.shm);
        return 3;
    }
    o->shm = c.shm;
    o->batch = (unsigned)c.batch;
    o->duration = c.duration;
    o->warmup = c.warmup;
    o->reps = (unsigned)c.reps;
    o->segment_size = c.segment_size;
    o->client_reactors = (unsigned)c.client_reactors;
    o->registered = c.registered;
    o->verify = c.verify;
    o->master = c.master[0] != '\0' ? c.master : NULL;
    o->lease_wait = c.lease_wait;
    o->protocol = c.protocol;
    o->emulated = (unsigned)c.emulated;
    return 0;
}

int main(int argc, char **argv)
{
    static opts_t o;
    int cli_rc = parse_cli(argc, argv, &o);
    if (cli_rc != 0)
        return cli_rc - 1;
    if (o.lease_wait < 0)
        o.lease_wait = o.master ? 5.1 : 1.1; /* the master's lease_ttl (ours: 1 s) */
    if (o.emulated > 0) {
        if (strcmp(o.protocol, "rdma") != 0) {
            fprintf(stderr, "store_bench: --emulated needs --protocol rdma\n");
            return 2;
        }
        char v[16];
        snprintf(v, sizeof(v), "%u", o.emulated);
        setenv("MC_RDMA_EMULATED", v, 1); /* the client, and the nodes inherit it */
    } else if (strcmp(o.protocol, "rdma") == 0) {
        o.emulated = (unsigned)mc_conf_env_uint("MC_RDMA_EMULATED", 0, 0, 16);
    }
    mc_log_set_all(MC_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);

    static bench_t b;
    b.o = &o;
    unsigned max_repl = 1, max_conc = 1;
    uint64_t max_size = 0;
    for (unsigned i = 0; i < o.nrepl; i++)
        max_repl = o.repl[i] > max_repl ? o.repl[i] : max_repl;
    for (unsigned i = 0; i < o.nconc; i++)
        max_conc = o.conc[i] > max_conc ? o.conc[i] : max_conc;
    for (unsigned i = 0; i < o.nsizes; i++)
        max_size = o.sizes[i] > max_size ? o.sizes[i] : max_size;
    int rc = 0;
    if (o.master == NULL) {
        unsigned nodes = o.modes[MODE_REMOTE] ? max_repl : 0;
        if (o.modes[MODE_SERVICE] && nodes == 0)
            nodes = 1;
        if (cluster_start(&b, argv[0], nodes) != 0) {
            cluster_stop(&b);
            return 1;
        }
    } else {
        snprintf(b.master_addr, sizeof(b.master_addr), "%s", o.master);
    }

    printf("store_bench: master %s%s, %u storage node(s) of %" PRIu64 " MiB, protocol %s%s, "
           "%s buffers, concurrency = threads doing sync calls on one client, batch %u, %u x "
           "%.1f s per point (median run)\n",
           b.master_addr, o.master ? "" : " (child process)", o.master ? 0 : b.nnodes,
           o.segment_size >> 20, o.protocol,
           o.emulated > 0 ? " (EMULATED NICs: tests and demos only, not hardware)" : "",
           o.registered                         ? "registered"
           : getenv("MC_STORE_STAGING") != NULL ? "MC_STORE_STAGING, unregistered"
                                                : "unregistered",
           o.batch, o.reps, o.duration);
    printf("%-7s %-10s %7s %5s %5s %6s %11s %11s %8s %10s %10s %7s\n", "mode", "op", "size", "repl",
           "conc", "batch", "calls/s", "keys/s", "GB/s", "p50(us)", "p99(us)", "errors");

    for (int mode = 0; mode < MODE_COUNT && rc == 0; mode++) {
        if (!o.modes[mode])
            continue;
        b.mode = mode;
        mc_store_config_t sc;
        mc_store_config_init(&sc);
        sc.master = b.master_addr;
        sc.protocol = o.protocol;
        sc.shm = o.shm;
        sc.reactors = o.client_reactors;
        sc.global_segment_size = mode == MODE_LOCAL ? o.segment_size : 0;
        uint64_t per_thread = max_size;
        if ((o.ops[OP_BATCH_PUT] || o.ops[OP_BATCH_GET]) && o.batch * 65536ull > per_thread)
            per_thread = o.batch * 65536ull; /* batches of small values stage at once */
        sc.local_buffer_size = o.registered ? (1u << 20) : per_thread * max_conc + (1u << 20);
        if (mode == MODE_SERVICE) {
            if (b.service[0] == '\0') {
                fprintf(stderr, "store_bench: --mode service starts its own node (no --master)\n");
                rc = 1;
                break;
            }
            /* the threads' buffers from the shared pool (staging only for
             * the preload's buffer) */
            sc.service = b.service;
            sc.mem_pool_size = (per_thread + 4096) * max_conc * 2 + (1u << 20);
        }
        mc_status_t st = mc_store_open(&sc, &b.s);
        if (st != MC_OK) {
            fprintf(stderr, "store_bench: mc_store_open: %s\n", mc_status_str(st));
            rc = 1;
            break;
        }
        b.pref[0] = mc_store_name(b.s);
        for (unsigned ri = 0; ri < o.nrepl && rc == 0; ri++) {
            mc_replicate_config_init(&b.rc);
            b.rc.replica_num = o.repl[ri];
            if (mode == MODE_LOCAL || mode == MODE_SERVICE) {
                if (o.repl[ri] > 1)
                    continue; /* one own segment: one replica */
                b.rc.preferred_segments = b.pref;
                b.rc.n_preferred = 1;
            }
            if (mode == MODE_REMOTE && !o.master && o.repl[ri] > b.nnodes)
                continue;
            for (unsigned si = 0; si < o.nsizes; si++)
                for (int op = 0; op < OP_COUNT; op++) {
                    if (!o.ops[op])
                        continue;
                    /* batches are for small values: skip sizes whose batch
                     * would not fit half the capacity */
                    if ((op == OP_BATCH_PUT || op == OP_BATCH_GET) && o.sizes[si] > 65536)
                        continue;
                    for (unsigned ci = 0; ci < o.nconc; ci++)
                        if (point(&b, op, o.sizes[si], o.conc[ci]) != 0)
                            rc = 1;
                }
        }
        workers_free(&b);
        mc_store_close(b.s);
        b.s = NULL;
    }
    cluster_stop(&b);
    if (b.tmpdir[0] != '\0' && rc == 0) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", b.tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "store_bench: cannot remove %s\n", b.tmpdir);
    } else if (b.tmpdir[0] != '\0') {
        fprintf(stderr, "store_bench: logs kept in %s\n", b.tmpdir);
    }
    return rc;
}
