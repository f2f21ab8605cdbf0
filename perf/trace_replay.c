/*
 * trace_replay - replay a prefix KV-cache trace (the FAST'25 Mooncake
 * traces, perf/traces/) against a running store and print its hit rate
 * beside exact LRU baselines, the bytes it moved, latencies, evictions,
 * and whether every byte read back was right.
 *
 *   trace_replay --trace FILE --master HOST:PORT [--workers 4]
 *                [--capacity 2000] [--block-size 64K] [--afap | --speedup X]
 *                [--limit N] [--soft-pin none|prefix:K|reused]
 *                [--master-http HOST:PORT] [--master-pid PID]
 *                [--node-pids P,P,...] [--nodes S] [--label TEXT]
 *                [--key-prefix P] [--baseline-only] [--csv-header]
 *
 * N simulated prefill workers (--workers), each a thread with its own
 * store client, take the trace's requests in order, each the next one
 * when it is free (so at most N are in flight, the N oldest not yet done):
 * with --speedup X a request starts no earlier than its timestamp / X
 * after the start (a late one is counted as lag); --afap (the default)
 * starts each as soon as a worker is free. For one request of n blocks
 * (keys "<prefix><hash id>"):
 *   1. batch_exist of the n keys, in order; the leading run of existing
 *      ones is the reusable prefix;
 *   2. batch_get of that run into the worker's buffer; every value is
 *      verified (header: magic, the key's hash id, the size; XXH3 of the
 *      payload equal to the header's checksum); a value evicted between
 *      the exist and the get ends the run there (a race, not an error);
 *   3. batch_put of every block after the run that did not exist (what
 *      prefill computes), block-size bytes each, one replica, soft-pinned
 *      as --soft-pin says. OBJECT_ALREADY_EXISTS (another worker put it
 *      meanwhile) and NO_AVAILABLE_HANDLE (no space, even after eviction)
 *      are counted apart; any other failure is an error.
 * The hit rate is hit blocks / all blocks of the trace.
 *
 * Baselines (trace_sim.h), computed exactly from the same trace: per-worker
 * local LRU caches of --capacity blocks each with requests dealt
 * round-robin, one ideal global LRU of workers x capacity blocks, and an
 * unbounded cache. The store is expected to hold workers x capacity blocks
 * (perf/trace_replay.sh starts it so); --capacity only labels the store run.
 *
 * Output: a block of human-readable lines and one line
 *   csv,trace_replay,<the fields of CSV_HEADER>
 * (--csv-header prints the header line alone and exits). Exit status 1
 * when a request failed (errors) or a value read back was wrong.
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "mooncake/store.h"
#include "perf/bench_opt.h"
#include "perf/bench_proc.h"
#include "perf/trace_sim.h"
#include "store/master.h"
#include "util/conf.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MAX_WORKERS 256
#define MAX_NODE_PIDS 64
#define KEY_MAX 96
#define HDR_LEN 32
#define VALUE_MAGIC 0x3145434152544d4dull /* "MMTRACE1" */
/* Payload bytes come from this pool at a per-id offset (no per-put RNG). */
#define POOL_LEN (1u << 20)

#define CSV_HEADER                                                                                 \
    "trace,workers,capacity_blocks,block_size,nodes,mode,soft_pin,requests,blocks,input_tokens,"   \
    "hit_local,hit_local_affinity,hit_global,hit_unbounded,hit_store,store_vs_ideal,"              \
    "pooled_vs_local,pooled_vs_affinity,store_vs_local,"                                           \
    "tokens_saved_local,tokens_saved_global,tokens_saved_store,gb_get,gb_put,exist_p50_us,"        \
    "exist_p99_us,get_p50_us,get_p99_us,put_p50_us,put_p99_us,req_p50_us,req_p99_us,lag_p99_ms,"   \
    "evictions,fill_mean,errors,checksum_mismatches,put_exists,put_no_space,get_raced,wall_s,req_" \
    "s,"                                                                                           \
    "blocks_s,gb_s,replay_cpu_s,master_cpu_s,nodes_cpu_s,label"

enum { PIN_NONE, PIN_PREFIX, PIN_REUSED };

typedef struct opts {
    const char *trace, *master, *master_http, *label, *key_prefix, *log;
    const char *transport; /* "tcp" (same-host peers too) or "shm" */
    unsigned workers, nodes;
    unsigned inflight;    /* requests in flight at most (workers that take them) */
    unsigned put_retries; /* resends of a put refused for want of space */
    int lease_release;    /* batch gets release their leases when done (store.h) */
    int core;             /* --core: the master's core in-process, simulated clock */
    int afap_given;
    mc_master_opts_t core_opts;
    uint64_t core_tick_us;
    uint32_t capacity;
    uint64_t block_size;
    double speedup; /* 0 = as fast as possible */
    size_t limit;
    int pin_mode;
    uint32_t pin_prefix;
    int baseline_only;
    long master_pid;
    long node_pids[MAX_NODE_PIDS];
    unsigned nnode_pids;
} opts_t;

typedef struct replay replay_t;

/* Latencies of one kind, microseconds, one per call. */
typedef struct lat {
    uint32_t *v;
    size_t n;
} lat_t;

typedef struct worker {
    pthread_t thread;
    replay_t *r;
    unsigned id;
    mc_store_t *s;
    uint8_t *buf; /* max_blocks * block_size */
    mc_slice_t *keys, *vals, *pkeys, *pvals;
    char *keybuf; /* max_blocks * KEY_MAX */
    int *ex;
    int64_t *gres;
    mc_status_t *pst;
    uint32_t *pidx;
    lat_t exist, get, put, req, lag;
    uint64_t hit_blocks, tokens_saved, get_blocks, put_blocks;
    uint64_t errors, mismatches, put_exists, put_nospace, get_raced, put_retries;
    mc_status_t first_err;
    const char *first_err_op;
} worker_t;

struct replay {
    opts_t *o;
    trace_t t;
    uint8_t *pool;
    _Atomic uint8_t *seen;  /* dense id was requested before (soft pin "reused") */
    atomic_size_t next;     /* next request index to take */
    _Atomic uint64_t t0_us; /* 0 until the workers may go */
    atomic_int done;        /* the workers are done (the sampler stops) */
    double fill_sum, fill_min;
    uint64_t fill_n;
    worker_t w[MAX_WORKERS];
};

/* ------------------------------------------------------------ values */

static uint64_t pool_off(uint64_t id)
{
    return mc_hash_u64(id) % (POOL_LEN - 64) & ~7ull;
}

static void value_fill(const replay_t *r, uint8_t *p, uint64_t id)
{
    size_t plen = (size_t)r->o->block_size - HDR_LEN;
    memcpy(p + HDR_LEN, r->pool + pool_off(id), plen);
    uint64_t h[4] = {VALUE_MAGIC, id, r->o->block_size, mc_hash64(p + HDR_LEN, plen)};
    memcpy(p, h, sizeof(h));
}

/* 1 when p holds the value of id, block_size bytes, intact. */
static int value_ok(const replay_t *r, const uint8_t *p, uint64_t id)
{
    uint64_t h[4];
    memcpy(h, p, sizeof(h));
    size_t plen = (size_t)r->o->block_size - HDR_LEN;
    return h[0] == VALUE_MAGIC && h[1] == id && h[2] == r->o->block_size &&
           h[3] == mc_hash64(p + HDR_LEN, plen);
}

/* ------------------------------------------------------------ worker */

static void note_error(worker_t *w, const char *op, mc_status_t st)
{
    w->errors++;
    if (w->first_err == MC_OK) {
        w->first_err = st;
        w->first_err_op = op;
    }
}

static void lat_add(lat_t *l, uint64_t us)
{
    l->v[l->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static size_t make_key(const replay_t *r, char *k, uint64_t id)
{
    return (size_t)snprintf(k, KEY_MAX, "%s%" PRIu64, r->o->key_prefix, id);
}

/* batch_put of the blocks pidx[0..n) with one replicate config; the ones
 * refused for want of space are sent again up to --put-retries times,
 * after 1, 2, 4, ... ms (pidx is reordered). */
static void put_blocks(worker_t *w, uint32_t *pidx, uint32_t n, int pin)
{
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.with_soft_pin = pin;
    for (unsigned attempt = 0; n > 0; attempt++) {
        for (uint32_t j = 0; j < n; j++) {
            w->pkeys[j] = w->keys[pidx[j]];
            w->pvals[j] = w->vals[pidx[j]];
        }
        mc_status_t st = mc_store_batch_put(w->s, w->pkeys, w->pvals, n, &rc, w->pst);
        if (st != MC_OK) {
            note_error(w, "batch_put", st);
            return;
        }
        int last = attempt == w->r->o->put_retries;
        uint32_t again = 0;
        for (uint32_t j = 0; j < n; j++) {
            if (w->pst[j] == MC_OK) {
                w->put_blocks++;
            } else if (w->pst[j] == MC_ERR_OBJECT_ALREADY_EXISTS) {
                w->put_exists++;
            } else if (w->pst[j] == MC_ERR_NO_AVAILABLE_HANDLE) {
                if (last)
                    w->put_nospace++;
                else
                    pidx[again++] = pidx[j];
            } else {
                note_error(w, "put", w->pst[j]);
            }
        }
        n = again;
        if (n > 0) {
            w->put_retries++;
            usleep(1000u << (attempt < 6 ? attempt : 6));
        }
    }
}

static void one_request(worker_t *w, size_t i)
{
    replay_t *r = w->r;
    const opts_t *o = r->o;
    const trace_req_t *q = &r->t.req[i];
    const uint32_t *b = r->t.blocks + q->first;
    uint32_t n = q->n;
    for (uint32_t j = 0; j < n; j++) {
        char *k = w->keybuf + (size_t)j * KEY_MAX;
        w->keys[j].ptr = k;
        w->keys[j].len = make_key(r, k, r->t.ids[b[j]]);
        w->vals[j].ptr = w->buf + (size_t)j * o->block_size;
        w->vals[j].len = (size_t)o->block_size;
    }

    uint64_t ta = mc_now_us();
    mc_status_t st = mc_store_batch_exist(w->s, w->keys, n, w->ex);
    uint64_t tb = mc_now_us();
    lat_add(&w->exist, tb - ta);
    if (st != MC_OK) {
        note_error(w, "batch_exist", st);
        for (uint32_t j = 0; j < n; j++)
            w->ex[j] = 0;
    }
    uint32_t run = 0;
    for (uint32_t j = 0; j < n; j++) {
        if (w->ex[j] < 0) {
            note_error(w, "exist", (mc_status_t)w->ex[j]);
            w->ex[j] = 0;
        }
    }
    while (run < n && w->ex[run] == 1)
        run++;

    /* the run that reads back intact is the hit */
    uint32_t hit = 0;
    if (run > 0) {
        st = mc_store_batch_get(w->s, w->keys, w->vals, run, w->gres);
        uint64_t tc = mc_now_us();
        lat_add(&w->get, tc - tb);
        if (st != MC_OK) {
            note_error(w, "batch_get", st);
        } else {
            int broken = 0;
            for (uint32_t j = 0; j < run; j++) {
                int ok = 0;
                if (w->gres[j] == (int64_t)o->block_size) {
                    ok = value_ok(r, w->vals[j].ptr, r->t.ids[b[j]]);
                    if (!ok)
                        w->mismatches++;
                } else if (w->gres[j] >= 0) {
                    w->mismatches++; /* a value of the wrong size is wrong bytes */
                } else if (w->gres[j] == MC_ERR_OBJECT_NOT_FOUND) {
                    w->get_raced++; /* evicted since the exist check */
                    w->ex[j] = 0;   /* so it is written again below */
                } else {
                    note_error(w, "get", (mc_status_t)w->gres[j]);
                }
                if (ok) {
                    w->get_blocks++;
                    if (!broken)
                        hit++;
                } else {
                    broken = 1;
                }
            }
        }
    }
    uint64_t tc = mc_now_us();

    /* what prefill computes: every block after the hit; written are those
     * the store lacks (a block that exists beyond a gap, or that read back
     * wrong, is there already: its put could only fail) */
    uint32_t np = 0, npin = 0;
    uint32_t *pin = w->pidx + n; /* second half: pinned ones */
    for (uint32_t j = hit; j < n; j++) {
        if (w->ex[j] == 1)
            continue;
        value_fill(r, w->vals[j].ptr, r->t.ids[b[j]]);
        int p = (o->pin_mode == PIN_PREFIX && j < o->pin_prefix) ||
                (o->pin_mode == PIN_REUSED && atomic_load(&r->seen[b[j]]));
        if (p)
            pin[npin++] = j;
        else
            w->pidx[np++] = j;
    }
    put_blocks(w, w->pidx, np, 0);
    put_blocks(w, pin, npin, 1);
    uint64_t td = mc_now_us();
    if (np + npin > 0)
        lat_add(&w->put, td - tc);
    lat_add(&w->req, td - ta);
    if (o->pin_mode == PIN_REUSED)
        for (uint32_t j = 0; j < n; j++)
            atomic_store(&r->seen[b[j]], 1);

    w->hit_blocks += hit;
    w->tokens_saved += trace_tokens_saved(q, hit);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    replay_t *r = w->r;
    while (atomic_load(&r->t0_us) == 0)
        usleep(100); /* every client is open before the clock starts */
    for (; w->id < r->o->inflight;) {
        size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->t.nreq)
            break;
        if (r->o->speedup > 0) {
            uint64_t due = r->t0_us + (uint64_t)((double)r->t.req[i].ts_us / r->o->speedup);
            uint64_t now = mc_now_us();
            if (now < due) {
                struct timespec ts = {.tv_sec = (time_t)((due - now) / 1000000),
                                      .tv_nsec = (long)((due - now) % 1000000) * 1000};
                nanosleep(&ts, NULL);
                now = due;
            }
            lat_add(&w->lag, (now - due) / 1000); /* ms behind schedule */
        }
        one_request(w, i);
    }
    return NULL;
}

static int worker_setup(replay_t *r, worker_t *w, unsigned id)
{
    const opts_t *o = r->o;
    uint32_t mb = r->t.max_blocks;
    w->r = r;
    w->id = id;
    w->buf = malloc((size_t)mb * o->block_size);
    w->keys = calloc(mb, sizeof(*w->keys));
    w->vals = calloc(mb, sizeof(*w->vals));
    w->pkeys = calloc(mb, sizeof(*w->pkeys));
    w->pvals = calloc(mb, sizeof(*w->pvals));
    w->keybuf = malloc((size_t)mb * KEY_MAX);
    w->ex = calloc(mb, sizeof(*w->ex));
    w->gres = calloc(mb, sizeof(*w->gres));
    w->pst = calloc(mb, sizeof(*w->pst));
    w->pidx = calloc(2 * (size_t)mb, sizeof(*w->pidx));
    lat_t *ls[] = {&w->exist, &w->get, &w->put, &w->req, &w->lag};
    int bad = w->buf == NULL || w->keys == NULL || w->vals == NULL || w->pkeys == NULL ||
              w->pvals == NULL || w->keybuf == NULL || w->ex == NULL || w->gres == NULL ||
              w->pst == NULL || w->pidx == NULL;
    for (unsigned k = 0; k < 5; k++)
        bad |= (ls[k]->v = malloc(r->t.nreq * sizeof(uint32_t))) == NULL;
    if (bad) {
        fprintf(stderr, "trace_replay: out of memory for worker %u\n", id);
        return -1;
    }
    memset(w->buf, 0, (size_t)mb * o->block_size); /* fault it in before the clock runs */
    if (o->baseline_only || o->core)
        return 0;
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = o->master;
    c.reactors = 1;
    c.local_buffer_size = 8u << 20; /* TCP uses the worker's buffer in place */
    c.shm = strcmp(o->transport, "shm") == 0 ? "on" : "off";
    c.lease_release = o->lease_release;
    mc_status_t st = mc_store_open(&c, &w->s);
    if (st != MC_OK) {
        fprintf(stderr, "trace_replay: worker %u: cannot open a client of %s: %s\n", id, o->master,
                mc_status_str(st));
        return -1;
    }
    /* A client opens without its master (it mounts when the master is
     * back): one call before the clock starts, so that a master that does
     * not answer (a wrong address) is said now, not as a timeout per call
     * for the length of the replay. */
    int e = id == 0 ? mc_store_exist(w->s, "trace_replay/probe", 18) : 0;
    if (e < 0) {
        fprintf(stderr, "trace_replay: the master %s does not answer: %s\n", o->master,
                mc_status_str((mc_status_t)e));
        return -1;
    }
    return 0;
}

static void worker_free(worker_t *w)
{
    mc_store_close(w->s);
    free(w->buf);
    free(w->keys);
    free(w->vals);
    free(w->pkeys);
    free(w->pvals);
    free(w->keybuf);
    free(w->ex);
    free(w->gres);
    free(w->pst);
    free(w->pidx);
    free(w->exist.v);
    free(w->get.v);
    free(w->put.v);
    free(w->req.v);
    free(w->lag.v);
}

/* ------------------------------------------------------------ figures */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* p50 and p99 of one kind over every worker (NAN when none). */
static void percentiles(replay_t *r, size_t off, double *p50, double *p99)
{
    size_t n = 0;
    for (unsigned i = 0; i < r->o->workers; i++)
        n += ((lat_t *)((char *)&r->w[i] + off))->n;
    *p50 = *p99 = 0.0 / 0.0;
    if (n == 0)
        return;
    uint32_t *all = malloc(n * sizeof(*all));
    if (all == NULL)
        return;
    size_t k = 0;
    for (unsigned i = 0; i < r->o->workers; i++) {
        lat_t *l = (lat_t *)((char *)&r->w[i] + off);
        memcpy(all + k, l->v, l->n * sizeof(*all));
        k += l->n;
    }
    qsort(all, n, sizeof(*all), cmp_u32);
    *p50 = all[(n - 1) / 2];
    *p99 = all[(size_t)((double)(n - 1) * 0.99)];
    free(all);
}

/* CPU seconds (user + system) of a process, from /proc; -1 when unknown. */
static double proc_cpu_s(long pid)
{
    long long us = bench_cpu_us((pid_t)pid);
    return us < 0 ? -1 : (double)us / 1e6;
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* Values of n lines of the master's /metrics (HOST:PORT) into v[] (-1
 * for a line not found); -1 when the page cannot be had. */
static int http_metrics(const char *hostport, const char *const *names, double *v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        v[i] = -1;
    char host[256], *colon;
    snprintf(host, sizeof(host), "%s", hostport);
    if ((colon = strrchr(host, ':')) == NULL)
        return -1;
    *colon = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || ai == NULL)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {.tv_sec = 5};
    int rc = -1;
    size_t cap = 1u << 20, got = 0;
    char *page = malloc(cap + 1);
    if (fd < 0 || page == NULL)
        goto out;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
        goto out;
    char req[512];
    int rl = snprintf(req, sizeof(req), "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", hostport);
    if (write(fd, req, (size_t)rl) != rl)
        goto out;
    ssize_t r;
    while (got < cap && (r = read(fd, page + got, cap - got)) > 0)
        got += (size_t)r;
    page[got] = '\0';
    for (unsigned i = 0; i < n; i++) {
        size_t nl = strlen(names[i]);
        for (char *p = page; (p = strstr(p, names[i])) != NULL; p += nl) {
            if ((p == page || p[-1] == '\n') && (p[nl] == ' ' || p[nl] == '{')) {
                char *sp = strchr(p, ' ');
                if (sp != NULL)
                    v[i] = strtod(sp + 1, NULL);
                break;
            }
        }
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    free(page);
    freeaddrinfo(ai);
    return rc;
}

static double http_metric(const char *hostport, const char *name)
{
    double v;
    http_metrics(hostport, &name, &v, 1);
    return v;
}

/* While the replay runs: the store's fill (allocated / capacity) every
 * SAMPLE_MS, counted once the first eviction happened (the pool full). */
#define SAMPLE_MS 100
static void *sampler_main(void *arg)
{
    replay_t *r = arg;
    static const char *const names[] = {"master_allocated_bytes", "master_total_capacity_bytes",
                                        "master_evicted_key_count"};
    double ev0 = -1;
    while (!atomic_load(&r->done)) {
        double v[3];
        if (http_metrics(r->o->master_http, names, v, 3) == 0 && v[1] > 0 && v[2] >= 0) {
            if (ev0 < 0)
                ev0 = v[2];
            else if (v[2] > ev0) {
                double f = v[0] / v[1];
                r->fill_sum += f;
                r->fill_n++;
                if (r->fill_n == 1 || f < r->fill_min)
                    r->fill_min = f;
            }
        }
        usleep(SAMPLE_MS * 1000);
    }
    return NULL;
}

static double nodes_cpu_s(const opts_t *o)
{
    double s = 0;
    for (unsigned i = 0; i < o->nnode_pids; i++) {
        double c = proc_cpu_s(o->node_pids[i]);
        if (c < 0)
            return -1;
        s += c;
    }
    return o->nnode_pids ? s : -1;
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : 0.0 / 0.0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* What one replay of the trace measured besides the workers' counters. */
typedef struct run {
    double wall, replay_cpu, master_cpu, nodes_cpu; /* seconds; < 0 unknown */
    double evictions;                               /* < 0 unknown */
    double fill_mean, fill_min;                     /* NAN unknown */
    const char *fill_every;                         /* the fill's sampling period */
} run_t;

/* The replay against the live store: the workers' threads, the sampler. */
static int run_live(replay_t *r, run_t *out)
{
    const opts_t *o = r->o;
    double ev0 = o->master_http ? http_metric(o->master_http, "master_evicted_key_count") : -1;
    double mc0 = o->master_pid ? proc_cpu_s(o->master_pid) : -1;
    double nc0 = nodes_cpu_s(o);
    double sc0 = self_cpu_s();
    unsigned started = 0;
    for (; started < o->workers; started++)
        if (pthread_create(&r->w[started].thread, NULL, worker_main, &r->w[started]) != 0)
            break;
    if (started < o->workers) {
        fprintf(stderr, "trace_replay: cannot start worker thread %u: %s\n", started,
                strerror(errno));
        atomic_store(&r->next, r->t.nreq); /* the ones started find nothing to do */
    }
    pthread_t sampler;
    int sampling = o->master_http != NULL && started == o->workers &&
                   pthread_create(&sampler, NULL, sampler_main, r) == 0;
    atomic_store(&r->t0_us, mc_now_us());
    for (unsigned k = 0; k < started; k++)
        pthread_join(r->w[k].thread, NULL);
    atomic_store(&r->done, 1);
    if (sampling)
        pthread_join(sampler, NULL);
    out->wall = (double)(mc_now_us() - r->t0_us) / 1e6;
    out->replay_cpu = self_cpu_s() - sc0;
    out->master_cpu = mc0 >= 0 ? proc_cpu_s(o->master_pid) - mc0 : -1;
    out->nodes_cpu = nc0 >= 0 ? nodes_cpu_s(o) - nc0 : -1;
    double ev1 = o->master_http ? http_metric(o->master_http, "master_evicted_key_count") : -1;
    out->evictions = ev0 >= 0 && ev1 >= 0 ? ev1 - ev0 : -1;
    out->fill_mean = r->fill_n ? r->fill_sum / (double)r->fill_n : 0.0 / 0.0;
    out->fill_min = r->fill_n ? r->fill_min : 0.0 / 0.0;
    out->fill_every = "100 ms";
    return started < o->workers ? -1 : 0;
}

/* --core: the master's core (store/master.h) in this process, with fake
 * segments of N x C blocks and a simulated clock: request i at
 * ts_i / --speedup, in trace order, one at a time; mc_master_tick every
 * tick_interval of that clock. The same calls a client makes (batch exist,
 * batch get replica list, batch put start + end), no data: the eviction
 * policy alone, deterministic, at trace time (leases and ticks keep their
 * meaning, unlike in a replay compressed 100x). */
#define CORE_T0 (1000ull * 1000000) /* clock origin: far from 0 */
static int run_core(replay_t *r, run_t *out)
{
    const opts_t *o = r->o;
    worker_t *w = &r->w[0];
    const trace_t *t = &r->t;
    mc_master_t *m = NULL;
    mc_status_t st = mc_master_create(&o->core_opts, 1, &m);
    if (st != MC_OK) {
        fprintf(stderr, "trace_replay: --core: the master refused its options: %s\n",
                mc_status_str(st));
        return -1;
    }
    const mc_uuid_t client = {0x7ace, 1};
    unsigned nodes = o->nodes ? o->nodes : 1;
    uint64_t total = (uint64_t)o->workers * o->capacity * o->block_size;
    for (unsigned i = 0; i < nodes; i++) {
        char name[32];
        snprintf(name, sizeof(name), "node%u", i);
        mc_master_segment_t seg = {.id = {0x5e6, i + 1},
                                   .name = name,
                                   .te_endpoint = "",
                                   .base = (uint64_t)(i + 1) << 40,
                                   .size = total / nodes};
        if ((st = mc_master_mount_segment(m, client, &seg, CORE_T0)) != MC_OK) {
            fprintf(stderr, "trace_replay: --core: mount of %s: %s\n", name, mc_status_str(st));
            mc_master_destroy(m);
            return -1;
        }
    }
    uint32_t mb = t->max_blocks;
    mc_master_key_t *keys = calloc(mb, sizeof(*keys)), *pk = calloc(mb, sizeof(*pk));
    uint64_t *sizes = calloc(mb, sizeof(*sizes));
    mc_master_replica_desc_t *descs = calloc(mb, sizeof(*descs));
    uint32_t *nrep = calloc(mb, sizeof(*nrep));
    mc_status_t *sts = calloc(mb, sizeof(*sts));
    int rc = -1;
    if (keys == NULL || pk == NULL || sizes == NULL || descs == NULL || nrep == NULL ||
        sts == NULL) {
        fprintf(stderr, "trace_replay: out of memory\n");
        goto out;
    }
    mc_master_put_cfg_t plain, pinned;
    mc_master_put_cfg_init(&plain);
    mc_master_put_cfg_init(&pinned);
    pinned.with_soft_pin = 1;
    double sc0 = self_cpu_s();
    uint64_t t0 = mc_now_us(), next_tick = CORE_T0, ticks = 0;
    double speed = o->speedup > 0 ? o->speedup : 1.0;
    for (size_t i = 0; i < t->nreq; i++) {
        const trace_req_t *q = &t->req[i];
        const uint32_t *b = t->blocks + q->first;
        uint32_t n = q->n;
        uint64_t now = CORE_T0 + (uint64_t)((double)q->ts_us / speed);
        for (; next_tick <= now; next_tick += o->core_tick_us) {
            mc_master_tick(m, next_tick);
            mc_master_stats_t ms;
            mc_master_get_stats(m, &ms);
            if (ms.evicted_keys > 0 && ms.capacity_bytes > 0) {
                double f = (double)ms.allocated_bytes / (double)ms.capacity_bytes;
                r->fill_sum += f;
                if (r->fill_n++ == 0 || f < r->fill_min)
                    r->fill_min = f;
            }
            ticks++;
        }
        for (uint32_t j = 0; j < n; j++) {
            char *k = w->keybuf + (size_t)j * KEY_MAX;
            keys[j].data = k;
            keys[j].len = make_key(r, k, t->ids[b[j]]);
        }
        if (mc_master_batch_exist_key(m, keys, n, now, w->ex, sts) != MC_OK) {
            fprintf(stderr, "trace_replay: --core: batch exist refused\n");
            goto out;
        }
        uint32_t run = 0;
        while (run < n && sts[run] == MC_OK && w->ex[run] == 1)
            run++;
        uint32_t hit = 0;
        if (run > 0) {
            /* as the store client's batch get: leases it releases once
             * its reads are done (here at once: no data moves) */
            if (mc_master_batch_get_leased(m, keys, run, now, o->lease_release, descs, 1, nrep,
                                           sts) != MC_OK) {
                fprintf(stderr, "trace_replay: --core: batch get refused\n");
                goto out;
            }
            while (hit < run && sts[hit] == MC_OK)
                hit++;
            w->get_blocks += hit;
            uint32_t nrel = 0; /* every key granted, as the client's batch get */
            for (uint32_t j = 0; j < run && o->lease_release; j++)
                if (sts[j] == MC_OK)
                    pk[nrel++] = keys[j];
            if (nrel > 0 && mc_master_batch_lease_release(m, pk, nrel, mc_master_view_version(m),
                                                          now, now, NULL) != MC_OK) {
                fprintf(stderr, "trace_replay: --core: lease release refused\n");
                goto out;
            }
        }
        /* the blocks to write, plain then pinned, as the live workers do */
        for (int pass = 0; pass < 2; pass++) {
            uint32_t np = 0;
            for (uint32_t j = hit; j < n; j++) {
                if (w->ex[j] == 1)
                    continue;
                int p = (o->pin_mode == PIN_PREFIX && j < o->pin_prefix) ||
                        (o->pin_mode == PIN_REUSED && atomic_load(&r->seen[b[j]]));
                if (p != pass)
                    continue;
                pk[np] = keys[j];
                sizes[np++] = o->block_size;
            }
            if (np == 0)
                continue;
            if (mc_master_batch_put_start(m, client, pk, sizes, np, pass ? &pinned : &plain, now,
                                          descs, nrep, sts) != MC_OK) {
                fprintf(stderr, "trace_replay: --core: batch put start refused\n");
                goto out;
            }
            uint32_t ok = 0;
            for (uint32_t j = 0; j < np; j++) {
                if (sts[j] == MC_OK)
                    pk[ok++] = pk[j];
                else if (sts[j] == MC_ERR_OBJECT_ALREADY_EXISTS)
                    w->put_exists++;
                else if (sts[j] == MC_ERR_NO_AVAILABLE_HANDLE)
                    w->put_nospace++;
                else
                    note_error(w, "put start", sts[j]);
            }
            if (ok > 0 && mc_master_batch_put_end(m, client, pk, ok, now, sts) != MC_OK) {
                fprintf(stderr, "trace_replay: --core: batch put end refused\n");
                goto out;
            }
            w->put_blocks += ok;
        }
        if (o->pin_mode == PIN_REUSED)
            for (uint32_t j = 0; j < n; j++)
                atomic_store(&r->seen[b[j]], 1);
        w->hit_blocks += hit;
        w->tokens_saved += trace_tokens_saved(q, hit);
    }
    mc_master_stats_t ms;
    mc_master_get_stats(m, &ms);
    out->wall = (double)(mc_now_us() - t0) / 1e6;
    out->replay_cpu = self_cpu_s() - sc0;
    out->master_cpu = out->nodes_cpu = -1;
    out->evictions = (double)ms.evicted_keys;
    out->fill_mean = r->fill_n ? r->fill_sum / (double)r->fill_n : 0.0 / 0.0;
    out->fill_min = r->fill_n ? r->fill_min : 0.0 / 0.0;
    out->fill_every = "tick";
    (void)ticks;
    rc = 0;
out:
    free(keys);
    free(pk);
    free(sizes);
    free(descs);
    free(nrep);
    free(sts);
    mc_master_destroy(m);
    return rc;
}

/* One CSV row after its first seven fields (CSV_HEADER): values with their
 * decimals; NAN (or a negative CPU time or count: unknown) prints empty. */
typedef struct cell {
    double v;
    int prec;
} cell_t;

static void print_row(const opts_t *o, const char *mode, const char *pin, const cell_t *c, size_t n)
{
    printf("csv,trace_replay,%s,%u,%u,%" PRIu64 ",%u,%s,%s", base_name(o->trace), o->workers,
           o->capacity, o->block_size, o->nodes, mode, pin);
    for (size_t i = 0; i < n; i++) {
        if (c[i].v != c[i].v || c[i].v < 0)
            printf(",");
        else
            printf(",%.*f", c[i].prec, c[i].v);
    }
    printf(",%s\n", o->label);
}

/* ------------------------------------------------------------ main */

/* One --core-set KEY=VALUE; NULL, or what was wrong. */
static const char *core_set(opts_t *o, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (eq == NULL)
        return "--core-set: expected KEY=VALUE";
    size_t kl = (size_t)(eq - kv);
    const char *v = eq + 1;
    char *e;
    uint64_t us;
    bool b;
    mc_master_opts_t *c = &o->core_opts;
#define KEY(s) (kl == sizeof(s) - 1 && memcmp(kv, s, kl) == 0)
    if (KEY("master.lease_ttl") || KEY("master.soft_pin_ttl") || KEY("server.tick_interval")) {
        if (mc_conf_parse_duration(v, &us) != MC_OK || us == 0)
            return "--core-set: expected a duration > 0 (e.g. 500ms, 5s)";
        if (KEY("master.lease_ttl"))
            c->lease_ttl_us = us;
        else if (KEY("master.soft_pin_ttl"))
            c->soft_pin_ttl_us = us;
        else
            o->core_tick_us = us;
    } else if (KEY("master.eviction_ratio") || KEY("master.eviction_high_watermark_ratio")) {
        double d = strtod(v, &e);
        if (*v == '\0' || *e != '\0' || !(d >= 0 && d <= 1))
            return "--core-set: expected a ratio in [0, 1]";
        if (KEY("master.eviction_ratio"))
            c->eviction_ratio = d;
        else
            c->eviction_high_watermark = d;
    } else if (KEY("master.allow_evict_soft_pinned_objects") || KEY("master.lease_release")) {
        if (mc_conf_parse_bool(v, &b) != MC_OK)
            return "--core-set: expected true or false";
        if (KEY("master.lease_release"))
            c->lease_release = b;
        else
            c->allow_evict_soft_pinned = b;
    } else if (KEY("master.evict_sample_max")) {
        unsigned long long n = strtoull(v, &e, 10);
        if (*v == '\0' || *e != '\0' || n < 1 || n > UINT32_MAX)
            return "--core-set: expected a count >= 1";
        c->evict_sample_max = (uint32_t)n;
    } else {
        return "--core-set: unknown key (see --help)";
    }
#undef KEY
    return NULL;
}

/* The command line (perf/bench_opt.h); opts_t is built from it. */
typedef struct cli {
    char *trace, *master, *master_http, *label, *key_prefix, *log, *soft_pin, *node_pids;
    char *core_set; /* --core-set lines, '\n'-joined */
    int transport;
    uint64_t workers, capacity, block_size, limit, inflight, put_retries, nodes;
    int64_t master_pid;
    double speedup;
    bool afap, core, baseline_only, csv_header, lease_release;
} cli_t;

static const char *const transport_names[] = {"tcp", "shm", NULL};

static const mc_conf_key_t cli_rows[] = {
    MC_CONF_ROW(cli_t, trace, "trace", MC_CONF_STRING, "", 0, 0,
                "the trace, JSON lines (required)"),
    MC_CONF_ROW(cli_t, master, "master", MC_CONF_STRING, "", 0, 0,
                "HOST:PORT of the master (required unless --baseline-only or --core)"),
    MC_CONF_ROW(cli_t, workers, "workers", MC_CONF_UINT, "4", 1, MAX_WORKERS,
                "simulated prefill workers, each its own client"),
    MC_CONF_ROW(cli_t, capacity, "capacity", MC_CONF_UINT, "2000", 1, 100000000,
                "blocks per worker: local LRU C each, global LRU N x C; the store is to hold "
                "N x C blocks"),
    MC_CONF_ROW(cli_t, block_size, "block-size", MC_CONF_SIZE, "64K", 64, 67108864,
                "bytes per block of 512 tokens"),
    MC_CONF_ROW(cli_t, afap, "afap", MC_CONF_BOOL, "false", 0, 0,
                "start each request as soon as a worker is free (the default)"),
    MC_CONF_ROW(cli_t, speedup, "speedup", MC_CONF_DOUBLE, "0", 0, 1e9,
                "start request i at its timestamp / X (0: as fast as possible; --core: 1)"),
    MC_CONF_ROW(cli_t, limit, "limit", MC_CONF_UINT, "0", 0, 0,
                "the first N requests only (0: all)"),
    MC_CONF_ROW(cli_t, inflight, "max-inflight", MC_CONF_UINT, "0", 0, MAX_WORKERS,
                "only K workers take requests (diagnostic: the store's hit rate without the "
                "concurrency of N; 0: all)"),
    MC_CONF_ROW(cli_t, lease_release, "lease-release", MC_CONF_BOOL, "true", 0, 0,
                "batch gets end their read leases when their reads are done (the store "
                "client's lease_release; the master's master.lease_release must be on); "
                "false: every lease runs to master.lease_ttl, as upstream's"),
    MC_CONF_ROW(cli_t, put_retries, "put-retries", MC_CONF_UINT, "0", 0, 20,
                "resend a put refused for want of space up to K times, after 1, 2, 4, ... ms"),
    MC_CONF_ROW(cli_t, soft_pin, "soft-pin", MC_CONF_STRING, "none", 0, 0,
                "none, prefix:K (the first K blocks of each request) or reused (blocks some "
                "earlier request asked for)"),
    MC_CONF_ROW(cli_t, master_http, "master-http", MC_CONF_STRING, "", 0, 0,
                "HOST:PORT of the master's HTTP port, for the eviction count"),
    MC_CONF_ROW(cli_t, master_pid, "master-pid", MC_CONF_INT, "0", 0, 2147483647,
                "the master's process id: its CPU time is reported"),
    MC_CONF_ROW(cli_t, node_pids, "node-pids", MC_CONF_STRING, "", 0, 0,
                "P,P,...: the nodes' process ids, likewise"),
    MC_CONF_ROW(cli_t, nodes, "nodes", MC_CONF_UINT, "0", 0, 4096,
                "storage nodes (labels the CSV)"),
    MC_CONF_ROW(cli_t, label, "label", MC_CONF_STRING, "", 0, 0,
                "free text for the CSV's last column"),
    MC_CONF_ROW(cli_t, key_prefix, "key-prefix", MC_CONF_STRING, "tr/", 0, 0, "key = P<hash id>"),
    MC_CONF_ROW(cli_t, log, "log", MC_CONF_STRING, "warn", 0, 0,
                "the library's log levels, as [log] level"),
    MC_CONF_ENUM_ROW(cli_t, transport, "transport", transport_names, "tcp",
                     "tcp: the nodes are reached over TCP as if on other hosts; shm: same-host "
                     "shared memory (store.shm)"),
    MC_CONF_ROW(cli_t, baseline_only, "baseline-only", MC_CONF_BOOL, "false", 0, 0,
                "the LRU baselines alone, no store"),
    MC_CONF_ROW(cli_t, core, "core", MC_CONF_BOOL, "false", 0, 0,
                "no cluster: the master's core in this process, a simulated clock at trace "
                "time / --speedup, one request at a time"),
    MC_CONF_ROW(cli_t, core_set, "core-set", MC_CONF_STRING, "", 0, 0,
                "K=V, a master option for --core, named as mooncake-master's (repeatable): "
                "master.lease_ttl, master.soft_pin_ttl, master.allow_evict_soft_pinned_objects, "
                "master.lease_release, master.eviction_ratio, "
                "master.eviction_high_watermark_ratio, "
                "master.evict_sample_max, server.tick_interval"),
    MC_CONF_ROW(cli_t, csv_header, "csv-header", MC_CONF_BOOL, "false", 0, 0,
                "print the CSV header line and exit"),
};

/* --soft-pin MODE into o; NULL, or what was wrong. */
static const char *parse_pin(opts_t *o, const char *s)
{
    char *e = NULL;
    if (strcmp(s, "none") == 0) {
        o->pin_mode = PIN_NONE;
    } else if (strcmp(s, "reused") == 0) {
        o->pin_mode = PIN_REUSED;
    } else if (strncmp(s, "prefix:", 7) == 0) {
        unsigned long long v = strtoull(s + 7, &e, 10);
        if (s[7] == '\0' || *e != '\0' || v < 1 || v > TRACE_MAX_BLOCKS)
            return "--soft-pin prefix:K: expected K in 1..65536";
        o->pin_mode = PIN_PREFIX;
        o->pin_prefix = (uint32_t)v;
    } else {
        return "--soft-pin: expected none, prefix:K or reused";
    }
    return NULL;
}

/* --node-pids P,P,... into o; NULL, or what was wrong. */
static const char *parse_pids(opts_t *o, const char *s)
{
    char *e = NULL;
    o->nnode_pids = 0;
    while (*s != '\0') {
        long p = strtol(s, &e, 10);
        if (e == s || p <= 0 || (*e != ',' && *e != '\0') || o->nnode_pids == MAX_NODE_PIDS)
            return "--node-pids: expected up to 64 process ids, comma separated";
        o->node_pids[o->nnode_pids++] = p;
        s = *e == ',' ? e + 1 : e;
    }
    return NULL;
}

/* Every --core-set line of s; NULL, or what was wrong (*bad: the line). */
static const char *parse_core_sets(opts_t *o, char *s, const char **bad)
{
    for (char *line = s; line != NULL && *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        const char *why = core_set(o, line);
        if (why != NULL) {
            *bad = line;
            return why;
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    return NULL;
}

static const char *opt_str(const char *s)
{
    return s[0] != '\0' ? s : NULL;
}

/* The checks across flags; 0, or -1 (said). */
static int check_opts(const opts_t *o)
{
    if (o->trace == NULL) {
        fprintf(stderr, "trace_replay: --trace FILE is required\n");
        return -1;
    }
    if (o->core && o->afap_given) {
        fprintf(stderr, "trace_replay: --core replays at trace time / --speedup, not --afap\n");
        return -1;
    }
    if (o->afap_given && o->speedup > 0) {
        fprintf(stderr, "trace_replay: --afap or --speedup X, not both\n");
        return -1;
    }
    if (o->master == NULL && !o->baseline_only && !o->core) {
        fprintf(stderr, "trace_replay: --master HOST:PORT is required (or --baseline-only)\n");
        return -1;
    }
    return 0;
}

/* 0: run; 1: answered (--help, --dump-config, --csv-header); 2: a bad
 * command line (said). */
static int parse_opts(int argc, char **argv, opts_t *o)
{
    static cli_t c; /* its strings live as long as the program */
    static const char *const repeatable[] = {"core-set", NULL};
    int rc = bench_opts_parse_ex("usage: trace_replay --trace FILE --master HOST:PORT [options]\n"
                                 "replay a prefix KV-cache trace against a running store",
                                 cli_rows, MC_ARRAY_SIZE(cli_rows), &c, repeatable, argc, argv);
    if (rc != 0)
        return rc;
    if (c.csv_header) {
        printf("%s\n", CSV_HEADER);
        return 1;
    }
    *o = (opts_t){.trace = opt_str(c.trace),
                  .master = opt_str(c.master),
                  .master_http = opt_str(c.master_http),
                  .label = c.label,
                  .key_prefix = c.key_prefix,
                  .log = c.log,
                  .transport = transport_names[c.transport],
                  .workers = (unsigned)c.workers,
                  .nodes = (unsigned)c.nodes,
                  .inflight = (unsigned)c.inflight,
                  .put_retries = (unsigned)c.put_retries,
                  .lease_release = c.lease_release,
                  .core = c.core,
                  .afap_given = c.afap,
                  .capacity = (uint32_t)c.capacity,
                  .block_size = c.block_size,
                  .speedup = c.speedup,
                  .limit = (size_t)c.limit,
                  .baseline_only = c.baseline_only,
                  .master_pid = (long)c.master_pid};
    mc_master_opts_init(&o->core_opts);
    o->core_opts.client_ttl_us = UINT64_MAX / 4; /* the simulated client never pings */
    o->core_tick_us = 100000;                    /* mooncake-master's server.tick_interval */
    const char *bad = NULL, *what = NULL;
    if (strpbrk(c.label, ",\n\"") != NULL)
        what = c.label, bad = "--label: no commas, quotes or newlines (it is a CSV field)";
    else if (strlen(c.key_prefix) > 64)
        what = c.key_prefix, bad = "--key-prefix: at most 64 bytes";
    else if ((bad = parse_pin(o, c.soft_pin)) != NULL)
        what = c.soft_pin;
    else if ((bad = parse_pids(o, c.node_pids)) != NULL)
        what = c.node_pids;
    else
        bad = parse_core_sets(o, c.core_set, &what);
    if (bad != NULL) {
        fprintf(stderr, "trace_replay: %s (got '%s')\n", bad, what);
        return 2;
    }
    if (o->inflight == 0 || o->inflight > o->workers)
        o->inflight = o->workers;
    return check_opts(o) != 0 ? 2 : 0;
}

int main(int argc, char **argv)
{
    static opts_t o;
    static replay_t r;
    int prc = parse_opts(argc, argv, &o);
    if (prc != 0)
        return prc == 1 ? 0 : 2;
    r.o = &o;
    char err[512];
    if (mc_log_set_spec(o.log, err, sizeof(err)) != MC_OK) {
        fprintf(stderr, "trace_replay: --log: %s\n", err);
        return 2;
    }
    if (trace_load(o.trace, &r.t, err, sizeof(err)) != 0) {
        fprintf(stderr, "trace_replay: %s\n", err);
        return 2;
    }
    if (o.limit > 0 && o.limit < r.t.nreq) {
        const trace_req_t *last = &r.t.req[o.limit - 1];
        r.t.nreq = o.limit;
        r.t.nblocks = last->first + last->n;
        r.t.input_tokens = 0;
        r.t.max_blocks = 0;
        for (size_t i = 0; i < r.t.nreq; i++) {
            r.t.input_tokens += r.t.req[i].input_len;
            if (r.t.req[i].n > r.t.max_blocks)
                r.t.max_blocks = r.t.req[i].n;
        }
    }
    const trace_t *t = &r.t;
    int rc = 2;
    trace_baseline_t bl;
    if (trace_baselines(t, o.workers, o.capacity, &bl) != 0) {
        fprintf(stderr, "trace_replay: out of memory for the baselines\n");
        goto out;
    }
    char mode[32];
    if (o.core)
        snprintf(mode, sizeof(mode), "core-x%g", o.speedup > 0 ? o.speedup : 1.0);
    else if (o.speedup > 0)
        snprintf(mode, sizeof(mode), "x%g", o.speedup);
    else
        snprintf(mode, sizeof(mode), "afap");
    char pin[32];
    if (o.pin_mode == PIN_PREFIX)
        snprintf(pin, sizeof(pin), "prefix:%u", o.pin_prefix);
    else
        snprintf(pin, sizeof(pin), "%s", o.pin_mode == PIN_REUSED ? "reused" : "none");
    double blocks = (double)bl.blocks, tokens = (double)t->input_tokens;
    uint64_t store_blocks = (uint64_t)o.workers * o.capacity;
    printf("trace %s: %zu requests, %zu blocks (%u distinct), %" PRIu64 " input tokens\n",
           base_name(o.trace), t->nreq, t->nblocks, t->nuniq, t->input_tokens);
    printf("config: %u workers x %u blocks of %" PRIu64 " B; store %" PRIu64
           " blocks = %.1f MiB on %u node(s); %s; soft pin %s\n",
           o.workers, o.capacity, o.block_size, store_blocks,
           (double)store_blocks * (double)o.block_size / 1048576.0, o.nodes, mode, pin);
    printf("baselines: local LRU %.4f (prefix-affinity routing %.4f), global LRU %.4f, "
           "unbounded %.4f; pooled/local %.2fx (affinity %.2fx)\n",
           bl.local_hits / blocks, bl.affinity_hits / blocks, bl.global_hits / blocks,
           bl.inf_hits / blocks, ratio((double)bl.global_hits, (double)bl.local_hits),
           ratio((double)bl.global_hits, (double)bl.affinity_hits));
    fflush(stdout);
    if (o.baseline_only) {
        double nan = 0.0 / 0.0;
        cell_t c[] = {{(double)t->nreq, 0},
                      {blocks, 0},
                      {tokens, 0},
                      {bl.local_hits / blocks, 4},
                      {bl.affinity_hits / blocks, 4},
                      {bl.global_hits / blocks, 4},
                      {bl.inf_hits / blocks, 4},
                      {nan, 4},
                      {nan, 4},
                      {ratio((double)bl.global_hits, (double)bl.local_hits), 3},
                      {ratio((double)bl.global_hits, (double)bl.affinity_hits), 3},
                      {nan, 3},
                      {bl.local_tokens / tokens, 4},
                      {bl.global_tokens / tokens, 4}};
        cell_t row[44];
        size_t nc = sizeof(c) / sizeof(c[0]);
        memcpy(row, c, sizeof(c));
        for (; nc < 40; nc++)
            row[nc] = (cell_t){nan, 0};
        print_row(&o, mode, pin, row, nc);
        rc = 0;
        goto out;
    }

    /* payload pool; the seen flags of soft pin "reused" */
    r.pool = malloc(POOL_LEN + o.block_size);
    r.seen = calloc(t->nuniq, 1);
    if (r.pool == NULL || r.seen == NULL) {
        fprintf(stderr, "trace_replay: out of memory\n");
        goto out;
    }
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i + 8 <= POOL_LEN + o.block_size; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(r.pool + i, &x, 8);
    }
    unsigned nw = 0;
    for (; nw < o.workers; nw++) {
        if (worker_setup(&r, &r.w[nw], nw) != 0) {
            worker_free(&r.w[nw]);
            goto out_workers;
        }
    }
    run_t run = {0}; /* (gcc -O1 cannot tell run_core/run_live always set it) */
    if ((o.core ? run_core(&r, &run) : run_live(&r, &run)) != 0)
        goto out_workers;
    double wall = run.wall, sc = run.replay_cpu, mc = run.master_cpu, nc = run.nodes_cpu;
    double evictions = run.evictions, fill = run.fill_mean;

    uint64_t hit = 0, tok = 0, gblk = 0, pblk = 0, errs = 0, bad = 0, pex = 0, pns = 0, race = 0;
    uint64_t retries = 0;
    mc_status_t first = MC_OK;
    const char *first_op = "";
    for (unsigned k = 0; k < o.workers; k++) {
        worker_t *w = &r.w[k];
        hit += w->hit_blocks;
        tok += w->tokens_saved;
        gblk += w->get_blocks;
        pblk += w->put_blocks;
        errs += w->errors;
        bad += w->mismatches;
        pex += w->put_exists;
        pns += w->put_nospace;
        race += w->get_raced;
        retries += w->put_retries;
        if (first == MC_OK && w->first_err != MC_OK) {
            first = w->first_err;
            first_op = w->first_err_op;
        }
    }
    double pe50, pe99, pg50, pg99, pp50, pp99, pr50, pr99, pl50, pl99;
    percentiles(&r, offsetof(worker_t, exist), &pe50, &pe99);
    percentiles(&r, offsetof(worker_t, get), &pg50, &pg99);
    percentiles(&r, offsetof(worker_t, put), &pp50, &pp99);
    percentiles(&r, offsetof(worker_t, req), &pr50, &pr99);
    percentiles(&r, offsetof(worker_t, lag), &pl50, &pl99);
    double hs = hit / blocks, hg = bl.global_hits / blocks, hl = bl.local_hits / blocks;
    double ha = bl.affinity_hits / blocks;
    double gbg = (double)gblk * (double)o.block_size / 1e9;
    double gbp = (double)pblk * (double)o.block_size / 1e9;
    printf("hit rate: local LRU %.4f, global LRU %.4f, store %.4f = %.3fx ideal; unbounded "
           "%.4f\n",
           hl, hg, hs, ratio(hs, hg), bl.inf_hits / blocks);
    printf("pooled vs local: ideal %.2fx, store %.2fx (paper: 2.36x); with prefix-affinity "
           "routing: ideal %.2fx, store %.2fx\n",
           ratio(hg, hl), ratio(hs, hl), ratio(hg, ha), ratio(hs, ha));
    printf("prefill tokens saved: local %.1f%%, global %.1f%%, store %.1f%%\n",
           100.0 * bl.local_tokens / tokens, 100.0 * bl.global_tokens / tokens,
           100.0 * tok / tokens);
    printf("moved: gets %.3f GB (%" PRIu64 " blocks), puts %.3f GB (%" PRIu64 " blocks)\n", gbg,
           gblk, gbp, pblk);
    printf("latency us (p50/p99 per call): exist %.0f/%.0f, get %.0f/%.0f, put %.0f/%.0f, "
           "request %.0f/%.0f",
           pe50, pe99, pg50, pg99, pp50, pp99, pr50, pr99);
    if (o.speedup > 0)
        printf("; start lag ms p50/p99 %.0f/%.0f", pl50, pl99);
    printf("\nstore fill once full (every %s): mean %.3f, min %.3f of capacity", run.fill_every,
           fill, run.fill_min);
    printf("\nevictions: %.0f; put of an existing key %" PRIu64 ", put without space %" PRIu64
           " (batches resent %" PRIu64 "), get raced an eviction %" PRIu64 "\n",
           evictions, pex, pns, retries, race);
    if (errs)
        printf("errors: %" PRIu64 " (first: %s %s), checksum mismatches: %" PRIu64 "\n", errs,
               first_op, mc_status_str(first), bad);
    else
        printf("errors: 0, checksum mismatches: %" PRIu64 "\n", bad);
    printf("rate: %.1f s wall, %.0f requests/s, %.0f blocks/s, %.3f GB/s; CPU s: replay %.1f, "
           "master %.1f, nodes %.1f = %.2f cores busy of %ld\n",
           wall, t->nreq / wall, blocks / wall, (gbg + gbp) / wall, sc, mc, nc,
           (sc + (mc > 0 ? mc : 0) + (nc > 0 ? nc : 0)) / wall, sysconf(_SC_NPROCESSORS_ONLN));
    cell_t row[] = {{(double)t->nreq, 0},
                    {blocks, 0},
                    {tokens, 0},
                    {hl, 4},
                    {ha, 4},
                    {hg, 4},
                    {bl.inf_hits / blocks, 4},
                    {hs, 4},
                    {ratio(hs, hg), 4},
                    {ratio(hg, hl), 3},
                    {ratio(hg, ha), 3},
                    {ratio(hs, hl), 3},
                    {bl.local_tokens / tokens, 4},
                    {bl.global_tokens / tokens, 4},
                    {tok / tokens, 4},
                    {gbg, 3},
                    {gbp, 3},
                    {pe50, 0},
                    {pe99, 0},
                    {pg50, 0},
                    {pg99, 0},
                    {pp50, 0},
                    {pp99, 0},
                    {pr50, 0},
                    {pr99, 0},
                    {o.speedup > 0 ? pl99 : 0.0 / 0.0, 0},
                    {evictions, 0},
                    {fill, 3},
                    {(double)errs, 0},
                    {(double)bad, 0},
                    {(double)pex, 0},
                    {(double)pns, 0},
                    {(double)race, 0},
                    {wall, 2},
                    {t->nreq / wall, 1},
                    {blocks / wall, 0},
                    {(gbg + gbp) / wall, 4},
                    {sc, 2},
                    {mc, 2},
                    {nc, 2}};
    print_row(&o, mode, pin, row, sizeof(row) / sizeof(row[0]));
    rc = errs || bad ? 1 : 0;

out_workers:
    for (unsigned k = 0; k < nw; k++)
        worker_free(&r.w[k]);
out:
    free(r.pool);
    free((void *)r.seen);
    trace_free(&r.t);
    return rc;
}
