/*
 * master_bench - metadata operations per second of mooncake-master, in the
 * spirit of upstream's mooncake-store/benchmarks/master_bench.cpp.
 *
 *   master_bench [--master HOST:PORT] [--operation Put|Get|BatchPut|BatchGet|Exist|Remove|all]
 *                [--clients 4] [--threads 1] [--depth 32] [--batch_size 128]
 *                [--value_size 4096] [--num_keys 100000] [--prefill] [--duration 5]
 *                [--reps 3] [--warmup 1] [--num_segments 128] [--segment_size 64GiB]
 *                [--replica_num 1] [--master_bin PATH] [--master_reactors N]
 *                [--master_set SECTION.KEY=VALUE]... [--master_pid PID]
 *   master_bench --rss_objects N [--value_size 4096] [--clients 4] [--depth 32] ...
 *
 * Unless --master is given, a mooncake-master runs as a child process on free
 * ports (log.level=warn, master.client_ttl=120s: see start_master) and is
 * stopped at the end; its VmRSS is printed.
 *
 * The bench is the only client: each of --clients connections has its own
 * client id and is driven from its reactor (--threads reactors) with --depth
 * operations in flight, each started from the completion of the previous one
 * (no timer, no lock). Segments are fake address ranges, mounted (and kept
 * alive with pings) under those client ids; nothing ever touches them.
 *
 * Operations (one "op" = what the latency is measured over):
 *   Put       PutStart + PutEnd of one fresh key (two RPCs)
 *   Get       GetReplicaList of one key
 *   BatchPut  BatchPutStart + BatchPutEnd of --batch_size fresh keys
 *   BatchGet  BatchGetReplicaList of --batch_size keys
 *   Exist     ExistKey of one key
 *   Remove    Remove(force) of one existing key
 * Batch rates are counted in keys. Keys are "key-<client>-<n>", n zero-padded
 * to 40 bytes. Put/BatchPut use fresh keys and the store is emptied with
 * RemoveAll(force) before each repetition (not timed). Get/BatchGet/Exist
 * cycle over each client's num_keys/clients keys, put there first with
 * --prefill (otherwise they measure misses, counted as errors). Remove
 * prefills num_keys keys before each repetition and removes them in order; a
 * repetition that runs out of keys ends early (the rate uses the time taken).
 *
 * For every operation: warm-up, --reps timed runs; prints the median rate and
 * the p50/p99 latency of the median run, as a table and as "csv," lines:
 *   csv,master_bench,<op>,<clients>,<batch>,<value_size>,<depth>,<ops_or_keys_per_s>,<p50>,<p99>,<errors>
 *
 * --rss_objects N: one segment, N one-replica objects put with BatchPut; prints
 * the master's VmRSS before and after and the bytes per object.
 */
#include <assert.h>
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf/bench_opt.h"
#include "perf/bench_proc.h"
#include "test/integration/proc.h"
#include "reactor/reactor.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/master_client.h"
#include "store/proto.h"
#include "util/buf.h"
#include "util/conf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MAX_CONNS 256
#define MAX_DEPTH 4096
#define MAX_BATCH 65536
#define MAX_MASTER_SETS 16
#define KEY_LEN 40                    /* bytes of every key, as upstream's benchmarks use */
#define HIST_US 1000000               /* latency histogram: 1 us buckets up to 1 s */
#define CALL_TIMEOUT_US 30000000ull   /* per RPC; a bench call never legitimately waits this */
#define ADMIN_TIMEOUT_US 600000000ull /* RemoveAll of millions of objects */
#define PING_EVERY_US 2000000ull      /* well inside the master's client_ttl (10 s) */
#define SEG_BASE (1ull << 44)         /* fake addresses: 16 TiB up, 8 TiB by default */

typedef enum op { OP_PUT, OP_GET, OP_BATCH_PUT, OP_BATCH_GET, OP_EXIST, OP_REMOVE, OP_COUNT } op_t;

static const char *const op_names[OP_COUNT] = {"Put",      "Get",   "BatchPut",
                                               "BatchGet", "Exist", "Remove"};

static int op_is_batch(op_t op)
{
    return op == OP_BATCH_PUT || op == OP_BATCH_GET;
}

/* How a connection picks the keys of its next op. */
typedef enum keymode {
    KEYS_FRESH, /* n = 0, 1, 2, ... without end (the store was emptied first) */
    KEYS_CYCLE, /* n = 0 .. limit-1, then again */
    KEYS_LIMIT, /* n = 0 .. limit-1, then this connection is done */
} keymode_t;

typedef struct opts {
    char host[128];
    unsigned port; /* 0: start a master */
    pid_t master_pid;
    const char *master_bin;
    unsigned master_reactors;
    const char *master_sets[MAX_MASTER_SETS];
    unsigned n_master_sets;
    unsigned num_segments;
    uint64_t segment_size;
    unsigned clients, threads, depth;
    unsigned batch;
    uint64_t value_size;
    uint64_t num_keys;
    unsigned replica_num;
    int prefill;
    int ops[OP_COUNT];
    double duration, warmup;
    unsigned reps;
    uint64_t rss_objects;
} opts_t;

/* ------------------------------------------------------------ connections */

typedef struct bconn bconn_t;

/* One operation in flight. */
typedef struct slot {
    bconn_t *bc;
    uint64_t t0;
    uint32_t nkeys;
    int phase;    /* Put/BatchPut: 0 = start in flight, 1 = end in flight */
    uint32_t bad; /* keys of this op that failed */
    char *kbuf;   /* nkeys x KEY_LEN */
    mc_master_key_t *keys;
} slot_t;

/* What one run (a repetition, a warm-up or a fill) shares with the reactors. */
typedef struct run {
    op_t op;
    keymode_t mode;
    atomic_int running;   /* 0: start no new op */
    atomic_int recording; /* count completions */
    atomic_int idle;      /* connections with nothing in flight and nothing more to do */
} run_t;

struct bconn {
    mc_reactor_msg_t msg;
    mc_rpc_client_t *c;
    mc_uuid_t id;
    char prefix[24];
    size_t plen;
    const opts_t *o;
    run_t *run;
    slot_t *slots;
    unsigned *free_idx;
    unsigned free_top;
    uint64_t *sizes; /* batch x value_size */
    mc_status_t *st; /* batch: BatchPutEnd statuses */
    mc_master_put_cfg_t cfg;
    uint64_t next, limit;
    int exhausted, reported_idle;
    /* results of the run; read by main after every connection went idle */
    uint64_t ops, keys, errors;
    mc_status_t first_err;
    uint64_t t_last; /* completion time of the last recorded op */
    uint32_t *hist;  /* ops by latency in us; per connection, no sharing */
};

static void conn_issue(bconn_t *bc);

static void fmt_key(const bconn_t *bc, char *dst, uint64_t n)
{
    memcpy(dst, bc->prefix, bc->plen);
    char *p = dst + KEY_LEN;
    for (size_t i = bc->plen; i < KEY_LEN; i++) {
        *--p = (char)('0' + n % 10);
        n /= 10;
    }
}

/* Pick the keys of the next op into s; 0 when this connection has no more. */
static uint32_t take_keys(bconn_t *bc, slot_t *s)
{
    uint32_t want = op_is_batch(bc->run->op) ? bc->o->batch : 1;
    uint64_t first = bc->next;
    switch (bc->run->mode) {
    case KEYS_FRESH:
        bc->next += want;
        break;
    case KEYS_CYCLE:
        bc->next = (bc->next + want) % bc->limit;
        break;
    case KEYS_LIMIT:
        if (bc->next >= bc->limit)
            return 0;
        if (want > bc->limit - bc->next)
            want = (uint32_t)(bc->limit - bc->next);
        bc->next += want;
        break;
    }
    for (uint32_t i = 0; i < want; i++) {
        uint64_t n = first + i;
        if (bc->run->mode == KEYS_CYCLE)
            n %= bc->limit;
        fmt_key(bc, s->kbuf + (size_t)i * KEY_LEN, n);
    }
    s->nkeys = want;
    return want;
}

static void on_reply(void *arg, const mc_rpc_resp_t *resp);

/* Encode and send the RPC of the slot's current phase. */
static mc_status_t slot_send(bconn_t *bc, slot_t *s)
{
    mc_mp_writer_t *w = mc_rpc_call_begin(bc->c);
    uint16_t method = 0;
    switch (bc->run->op) {
    case OP_PUT:
        if (s->phase == 0) {
            mc_mcli_put_start(w, bc->id, s->kbuf, KEY_LEN, bc->o->value_size, &bc->cfg);
            method = MC_RPC_PUT_START;
        } else {
            mc_mcli_client_key(w, bc->id, s->kbuf, KEY_LEN);
            method = MC_RPC_PUT_END;
        }
        break;
    case OP_BATCH_PUT:
        if (s->phase == 0) {
            mc_mcli_batch_put_start(w, bc->id, s->keys, bc->sizes, s->nkeys, &bc->cfg);
            method = MC_RPC_BATCH_PUT_START;
        } else {
            mc_mcli_client_keys(w, bc->id, s->keys, s->nkeys);
            method = MC_RPC_BATCH_PUT_END;
        }
        break;
    case OP_GET:
        mc_mcli_key(w, s->kbuf, KEY_LEN);
        method = MC_RPC_GET_REPLICA_LIST;
        break;
    case OP_BATCH_GET:
        mc_mcli_keys(w, s->keys, s->nkeys);
        method = MC_RPC_BATCH_GET_REPLICA_LIST;
        break;
    case OP_EXIST:
        mc_mcli_key(w, s->kbuf, KEY_LEN);
        method = MC_RPC_EXIST_KEY;
        break;
    case OP_REMOVE:
        mc_mcli_remove(w, s->kbuf, KEY_LEN, 1);
        method = MC_RPC_REMOVE;
        break;
    default:
        assert(0);
    }
    return mc_rpc_call_end(bc->c, method, CALL_TIMEOUT_US, on_reply, s);
}

/*
 * Items of a BATCH_PUT_START / BATCH_GET_REPLICA_LIST reply that failed (not
 * OK, or OK without a replica). Only the statuses and replica counts are read:
 * the bench shares the CPUs with the master, and mc_mcli_dec_items() would copy
 * every descriptor's names. A malformed or short reply fails every item.
 */
static uint32_t scan_items(const mc_rpc_resp_t *resp, uint32_t expect, mc_status_t *first)
{
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, resp->body, resp->body_len);
    uint32_t bad = 0, seen = 0;
    uint32_t nf = resp->body_len ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < nf && r.err == MC_OK; i++) {
        if (mc_mp_read_uint(&r) != MC_F_ITEMS) {
            mc_mp_skip(&r);
            continue;
        }
        seen = mc_mp_read_array(&r);
        for (uint32_t k = 0; k < seen && r.err == MC_OK; k++) {
            mc_status_t st = MC_ERR_INTERNAL_ERROR;
            uint32_t nrep = 0;
            uint32_t inf = mc_mp_read_map(&r);
            for (uint32_t j = 0; j < inf && r.err == MC_OK; j++) {
                switch (mc_mp_read_uint(&r)) {
                case MC_F_STATUS:
                    st = (mc_status_t)mc_mp_read_int(&r);
                    break;
                case MC_F_REPLICAS:
                    nrep = mc_mp_read_array(&r);
                    for (uint32_t q = 0; q < nrep; q++)
                        mc_mp_skip(&r);
                    break;
                default:
                    mc_mp_skip(&r);
                    break;
                }
            }
            if (st == MC_OK && nrep == 0)
                st = MC_ERR_INTERNAL_ERROR;
            if (st != MC_OK) {
                bad++;
                if (*first == MC_OK)
                    *first = st;
            }
        }
    }
    if (r.err != MC_OK || seen != expect) {
        if (*first == MC_OK)
            *first = MC_ERR_PROTOCOL;
        return expect;
    }
    return bad;
}

/* Keys of the slot's op that this reply failed. */
static uint32_t check_reply(bconn_t *bc, slot_t *s, const mc_rpc_resp_t *resp, mc_status_t *first)
{
    if (resp->status != MC_OK) {
        *first = resp->status;
        return s->nkeys;
    }
    switch (bc->run->op) {
    case OP_BATCH_PUT: /* the end's statuses are read by on_reply */
    case OP_BATCH_GET:
        return scan_items(resp, s->nkeys, first);
    case OP_EXIST: {
        int64_t ex = 0;
        mc_status_t st = mc_mcli_dec_int(resp->body, resp->body_len, MC_F_EXISTS, &ex);
        if (st != MC_OK || ex == 0) {
            *first = st != MC_OK ? st : MC_ERR_OBJECT_NOT_FOUND;
            return 1;
        }
        return 0;
    }
    default:
        return 0;
    }
}

static void conn_note_idle(bconn_t *bc)
{
    if (bc->reported_idle || bc->free_top != bc->o->depth)
        return;
    if (atomic_load_explicit(&bc->run->running, memory_order_relaxed) && !bc->exhausted)
        return;
    bc->reported_idle = 1;
    atomic_fetch_add(&bc->run->idle, 1);
}

static void slot_finish(bconn_t *bc, slot_t *s)
{
    if (atomic_load_explicit(&bc->run->recording, memory_order_relaxed)) {
        uint64_t now = mc_now_us(), lat = now - s->t0;
        bc->ops++;
        bc->keys += s->nkeys;
        bc->errors += s->bad;
        bc->hist[lat < HIST_US ? lat : HIST_US - 1]++;
        bc->t_last = now;
    }
    bc->free_idx[bc->free_top++] = (unsigned)(s - bc->slots);
    conn_issue(bc);
}

static void on_reply(void *arg, const mc_rpc_resp_t *resp)
{
    slot_t *s = arg;
    bconn_t *bc = s->bc;
    mc_status_t first = MC_OK;
    uint32_t bad;
    if (bc->run->op == OP_BATCH_PUT && s->phase == 1 && resp->status == MC_OK) {
        /* BatchPutEnd: {STATUSES}; a key that failed to start fails here too */
        mc_status_t *st = bc->st;
        size_t n = 0;
        bad = 0;
        if (mc_mcli_dec_statuses(resp->body, resp->body_len, st, NULL, bc->o->batch, &n) != MC_OK ||
            n != s->nkeys) {
            first = MC_ERR_PROTOCOL;
            bad = s->nkeys;
        } else {
            for (size_t i = 0; i < n; i++)
                if (st[i] != MC_OK) {
                    if (first == MC_OK)
                        first = st[i];
                    bad++;
                }
        }
    } else {
        bad = check_reply(bc, s, resp, &first);
    }
    if (first != MC_OK && bc->first_err == MC_OK)
        bc->first_err = first;

    int two_phase = bc->run->op == OP_PUT || bc->run->op == OP_BATCH_PUT;
    /* Put: end only a started key; BatchPut: end the batch unless every key failed */
    if (two_phase && s->phase == 0 && bad < s->nkeys) {
        s->phase = 1;
        if (slot_send(bc, s) == MC_INPROGRESS)
            return;
        bad = s->nkeys;
    }
    s->bad = bad > s->bad ? bad : s->bad;
    slot_finish(bc, s);
}

static void conn_issue(bconn_t *bc)
{
    while (bc->free_top > 0 && atomic_load_explicit(&bc->run->running, memory_order_relaxed)) {
        slot_t *s = &bc->slots[bc->free_idx[bc->free_top - 1]];
        if (take_keys(bc, s) == 0) {
            bc->exhausted = 1;
            break;
        }
        bc->free_top--;
        s->t0 = mc_now_us();
        s->phase = 0;
        s->bad = 0;
        mc_status_t st = slot_send(bc, s);
        if (st != MC_INPROGRESS) {
            /* nothing was sent; give up on this connection for the run rather
             * than spin: the error is reported */
            bc->errors += s->nkeys;
            if (bc->first_err == MC_OK)
                bc->first_err = st;
            bc->free_idx[bc->free_top++] = (unsigned)(s - bc->slots);
            bc->exhausted = 1;
            break;
        }
    }
    conn_note_idle(bc);
}

static void conn_start(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    (void)r;
    bconn_t *bc = MC_CONTAINER_OF(msg, bconn_t, msg);
    if (st == MC_OK) {
        conn_issue(bc);
    } else {
        bc->reported_idle = 1;
        atomic_fetch_add(&bc->run->idle, 1);
    }
}

static mc_status_t conn_init(bconn_t *bc, const opts_t *o, unsigned index, mc_reactor_t *r)
{
    memset(bc, 0, sizeof(*bc));
    bc->o = o;
    bc->id = (mc_uuid_t){0xbe7c, index + 1};
    bc->plen = (size_t)snprintf(bc->prefix, sizeof(bc->prefix), "key-%u-", index);
    mc_master_put_cfg_init(&bc->cfg);
    bc->cfg.replica_num = o->replica_num;
    bc->slots = mc_calloc(o->depth, sizeof(*bc->slots));
    bc->free_idx = mc_calloc(o->depth, sizeof(*bc->free_idx));
    bc->sizes = mc_calloc(o->batch, sizeof(*bc->sizes));
    bc->st = mc_calloc(o->batch, sizeof(*bc->st));
    bc->hist = mc_calloc(HIST_US, sizeof(*bc->hist));
    if (bc->slots == NULL || bc->free_idx == NULL || bc->sizes == NULL || bc->st == NULL ||
        bc->hist == NULL)
        return MC_ERR_NOMEM;
    for (unsigned i = 0; i < o->batch; i++)
        bc->sizes[i] = o->value_size;
    for (unsigned k = 0; k < o->depth; k++) {
        slot_t *s = &bc->slots[k];
        s->bc = bc;
        s->kbuf = mc_malloc((size_t)o->batch * KEY_LEN);
        s->keys = mc_calloc(o->batch, sizeof(*s->keys));
        if (s->kbuf == NULL || s->keys == NULL)
            return MC_ERR_NOMEM;
        for (unsigned i = 0; i < o->batch; i++)
            s->keys[i] = (mc_master_key_t){s->kbuf + (size_t)i * KEY_LEN, KEY_LEN};
    }
    mc_rpc_client_opts_t co;
    mc_rpc_client_opts_init(&co);
    co.host = o->host;
    co.port = (uint16_t)o->port;
    co.call_timeout_us = CALL_TIMEOUT_US;
    return mc_rpc_client_create(r, &co, &bc->c);
}

static void conn_fini(bconn_t *bc)
{
    mc_rpc_client_destroy(bc->c);
    if (bc->slots != NULL)
        for (unsigned k = 0; k < bc->o->depth; k++) {
            mc_free(bc->slots[k].kbuf);
            mc_free(bc->slots[k].keys);
        }
    mc_free(bc->slots);
    mc_free(bc->free_idx);
    mc_free(bc->sizes);
    mc_free(bc->st);
    mc_free(bc->hist);
}

/* ------------------------------------------------------------ the bench */

typedef struct bench {
    opts_t *o;
    mc_reactor_group_t *g;
    bconn_t *conns;
    unsigned nconns;
    mc_rpc_client_t *admin; /* sync calls from the main thread */
    uint64_t last_ping_us;
    pid_t child;
    pid_t rss_pid;
} bench_t;

typedef struct result {
    double ops_per_s, keys_per_s;
    double p50_us, p99_us;
    double cpu_us_per_key; /* master CPU (user + system) per key; 0 when unknown */
    uint64_t errors;
    mc_status_t first_err;
} result_t;

/* A sync call from the main thread; the reply body (if any) lands in resp. */
static mc_status_t admin_call(bench_t *b, uint16_t method, const mc_buf_t *body, mc_buf_t *resp,
                              uint64_t timeout_us)
{
    mc_buf_t scratch = MC_BUF_INIT;
    if (resp == NULL)
        resp = &scratch;
    mc_buf_reset(resp);
    mc_status_t st =
        mc_rpc_call_sync(b->admin, method, mc_buf_head(body), mc_buf_used(body), timeout_us, resp);
    mc_buf_fini(&scratch);
    return st;
}

/* Ping the clients that own segments (the others are unknown to the master,
 * which is fine: puts and gets do not need a registered client). */
static void ping_all(bench_t *b)
{
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    unsigned owners = b->nconns < b->o->num_segments ? b->nconns : b->o->num_segments;
    for (unsigned i = 0; i < owners; i++) {
        mc_mp_writer_t w;
        mc_buf_reset(&body);
        mc_mp_writer_init(&w, &body);
        mc_mcli_ping(&w, b->conns[i].id);
        int64_t cs = 0;
        mc_status_t st = admin_call(b, MC_RPC_PING, &body, &resp, CALL_TIMEOUT_US);
        if (st == MC_OK)
            mc_mcli_dec_int(mc_buf_head(&resp), mc_buf_used(&resp), MC_F_CLIENT_STATUS, &cs);
        if (st != MC_OK || cs != MC_MASTER_CLIENT_OK)
            fprintf(stderr, "master_bench: ping of client %u: %s, status %lld (segments lost?)\n",
                    i, mc_status_str(st), (long long)cs);
    }
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    b->last_ping_us = mc_now_us();
}

/* Sleep, keeping the segment owners alive; return early once `idle` reaches
 * n (when idle is not NULL). */
static void bench_sleep(bench_t *b, double secs, atomic_int *idle, int n)
{
    uint64_t end = mc_now_us() + (uint64_t)(secs * 1e6);
    for (;;) {
        uint64_t now = mc_now_us();
        if (now >= end || (idle != NULL && atomic_load(idle) >= n))
            return;
        if (now - b->last_ping_us >= PING_EVERY_US)
            ping_all(b);
        uint64_t left = end - now;
        usleep((useconds_t)(left < 10000 ? left : 10000));
    }
}

static long proc_status_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, fl) == 0 && line[fl] == ':') {
            v = strtol(line + fl + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static double hist_pct(const uint64_t *h, uint64_t total, double pct)
{
    uint64_t want = (uint64_t)(pct * (double)total), seen = 0;
    for (unsigned i = 0; i < HIST_US; i++) {
        seen += h[i];
        if (seen > want)
            return (double)i + 0.5;
    }
    return HIST_US;
}

/*
 * One run of op over every connection. limit: keys per connection for CYCLE
 * and LIMIT (connection i gets limit[i]). warmup then secs of recording; with
 * secs < 0 the run records until every connection ran out of keys (fills).
 */
static result_t bench_run(bench_t *b, op_t op, keymode_t mode, const uint64_t *limit, double warmup,
                          double secs)
{
    static run_t run;
    atomic_store(&run.running, 1);
    atomic_store(&run.recording, secs < 0);
    atomic_store(&run.idle, 0);
    run.op = op;
    run.mode = mode;
    int n = (int)b->nconns;
    for (unsigned i = 0; i < b->nconns; i++) {
        bconn_t *bc = &b->conns[i];
        bc->run = &run;
        bc->next = 0;
        bc->limit = limit != NULL ? limit[i] : 0;
        bc->exhausted = 0;
        bc->reported_idle = 0;
        bc->ops = bc->keys = bc->errors = 0;
        bc->first_err = MC_OK;
        bc->t_last = 0;
        memset(bc->hist, 0, HIST_US * sizeof(*bc->hist));
        bc->free_top = b->o->depth;
        for (unsigned k = 0; k < b->o->depth; k++)
            bc->free_idx[k] = k;
        if (mode == KEYS_CYCLE && bc->limit == 0)
            bc->limit = 1;
        bc->msg.fn = conn_start;
        mc_reactor_post(mc_reactor_group_get(b->g, i % mc_reactor_group_count(b->g)), &bc->msg);
    }
    uint64_t t0 = mc_now_us(), t1;
    /* the master's CPU time around the timed run: unlike the rate, it hardly
     * moves when other programs compete for the two cores, so it is the
     * figure to compare builds with */
    long long cpu0 = -1, cpu1 = -1;
    if (secs < 0) {
        bench_sleep(b, 1e9, &run.idle, n);
        t1 = mc_now_us();
    } else {
        bench_sleep(b, warmup, &run.idle, n);
        atomic_store(&run.recording, 1); /* a few completions more or less: benign */
        t0 = mc_now_us();
        cpu0 = b->rss_pid > 0 ? bench_cpu_us(b->rss_pid) : -1;
        bench_sleep(b, secs, &run.idle, n);
        atomic_store(&run.recording, 0);
        t1 = mc_now_us();
        cpu1 = b->rss_pid > 0 ? bench_cpu_us(b->rss_pid) : -1;
    }
    atomic_store(&run.running, 0);
    bench_sleep(b, 60, &run.idle, n);
    if (atomic_load(&run.idle) < n)
        fprintf(stderr, "master_bench: %d connection(s) did not drain\n",
                n - atomic_load(&run.idle));

    static uint64_t hist[HIST_US];
    memset(hist, 0, sizeof(hist));
    uint64_t ops = 0, keys = 0, t_last = 0;
    int all_exhausted = 1;
    result_t res = {0};
    for (unsigned i = 0; i < b->nconns; i++) {
        bconn_t *bc = &b->conns[i];
        ops += bc->ops;
        keys += bc->keys;
        res.errors += bc->errors;
        if (res.first_err == MC_OK)
            res.first_err = bc->first_err;
        if (bc->t_last > t_last)
            t_last = bc->t_last;
        all_exhausted &= bc->exhausted;
        for (unsigned k = 0; k < HIST_US; k++)
            hist[k] += bc->hist[k];
    }
    /* a LIMIT run that ran out of keys early is timed to its last completion */
    if (mode == KEYS_LIMIT && all_exhausted && t_last > t0 && t_last < t1)
        t1 = t_last;
    double el = (double)(t1 - t0) / 1e6;
    res.ops_per_s = el > 0 ? (double)ops / el : 0;
    res.keys_per_s = el > 0 ? (double)keys / el : 0;
    res.p50_us = ops ? hist_pct(hist, ops, 0.50) : 0;
    res.p99_us = ops ? hist_pct(hist, ops, 0.99) : 0;
    if (cpu0 >= 0 && cpu1 >= cpu0 && keys > 0)
        res.cpu_us_per_key = (double)(cpu1 - cpu0) / (double)keys;
    return res;
}

static mc_status_t remove_all(bench_t *b, long *count)
{
    /* this thread cannot ping during the call, and emptying millions of
     * objects keeps the master busy for seconds: start from a fresh ping */
    ping_all(b);
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_remove_all(&w, 1);
    mc_status_t st = admin_call(b, MC_RPC_REMOVE_ALL, &body, &resp, ADMIN_TIMEOUT_US);
    int64_t c = 0;
    if (st == MC_OK)
        mc_mcli_dec_int(mc_buf_head(&resp), mc_buf_used(&resp), MC_F_COUNT, &c);
    *count = (long)c;
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    if (st != MC_OK)
        fprintf(stderr, "master_bench: RemoveAll: %s\n", mc_status_str(st));
    ping_all(b);
    return st;
}

/* Split total keys over the connections. */
static void split_keys(const bench_t *b, uint64_t total, uint64_t *limit)
{
    for (unsigned i = 0; i < b->nconns; i++)
        limit[i] = total / b->nconns + (i < total % b->nconns);
}

/* Empty the store and put every connection's keys 0..limit[i]-1 with BatchPut. */
static int fill(bench_t *b, const uint64_t *limit, uint64_t total, int verbose)
{
    long removed;
    if (remove_all(b, &removed) != MC_OK)
        return -1;
    uint64_t t0 = mc_now_us();
    result_t r = bench_run(b, OP_BATCH_PUT, KEYS_LIMIT, limit, 0, -1);
    if (verbose)
        printf("  (prefilled %llu keys in %.2f s, %llu errors)\n", (unsigned long long)total,
               (double)(mc_now_us() - t0) / 1e6, (unsigned long long)r.errors);
    if (r.errors != 0) {
        fprintf(stderr, "master_bench: prefill: %llu errors, first %s\n",
                (unsigned long long)r.errors, mc_status_str(r.first_err));
        return -1;
    }
    return 0;
}

static int cmp_res(const void *a, const void *b)
{
    double x = ((const result_t *)a)->keys_per_s, y = ((const result_t *)b)->keys_per_s;
    return x < y ? -1 : x > y;
}

static void print_rss(const bench_t *b)
{
    if (b->rss_pid <= 0)
        return;
    long rss = proc_status_kib(b->rss_pid, "VmRSS"), hwm = proc_status_kib(b->rss_pid, "VmHWM");
    printf("  (master VmRSS %.1f MiB, VmHWM %.1f MiB)\n", (double)rss / 1024.0,
           (double)hwm / 1024.0);
}

static int bench_op(bench_t *b, op_t op)
{
    const opts_t *o = b->o;
    uint64_t limit[MAX_CONNS];
    split_keys(b, o->num_keys, limit);
    keymode_t mode = KEYS_CYCLE;
    if (op == OP_PUT || op == OP_BATCH_PUT)
        mode = KEYS_FRESH;
    else if (op == OP_REMOVE)
        mode = KEYS_LIMIT;
    else if (o->prefill && fill(b, limit, o->num_keys, 1) != 0)
        return -1;

    result_t rs[99];
    for (unsigned r = 0; r < o->reps; r++) {
        long removed;
        if (mode == KEYS_FRESH && remove_all(b, &removed) != MC_OK)
            return -1;
        if (mode == KEYS_LIMIT && fill(b, limit, o->num_keys, 0) != 0)
            return -1;
        double warm = r == 0 ? o->warmup : (o->warmup < 0.1 ? o->warmup : 0.1);
        if (mode == KEYS_LIMIT)
            warm = 0; /* a warm-up would eat the keys; the fill warmed everything */
        rs[r] = bench_run(b, op, mode, limit, warm, o->duration);
    }
    uint64_t errs = 0;
    mc_status_t first = MC_OK;
    for (unsigned r = 0; r < o->reps; r++) {
        errs += rs[r].errors;
        if (first == MC_OK)
            first = rs[r].first_err;
    }
    result_t in_order[99];
    memcpy(in_order, rs, o->reps * sizeof(rs[0]));
    qsort(rs, o->reps, sizeof(rs[0]), cmp_res);
    result_t m = rs[o->reps / 2];
    unsigned batch = op_is_batch(op) ? o->batch : 1;
    printf("%-9s %7u %5u %5u %12.0f %12.0f %9.1f %9.1f %8llu%s%s\n", op_names[op], o->clients,
           batch, o->depth, m.ops_per_s, m.keys_per_s, m.p50_us, m.p99_us, (unsigned long long)errs,
           errs ? "  first: " : "", errs ? mc_status_str(first) : "");
    printf("csv,master_bench,%s,%u,%u,%llu,%u,%.0f,%.1f,%.1f,%llu\n", op_names[op], o->clients,
           batch, (unsigned long long)o->value_size, o->depth, m.keys_per_s, m.p50_us, m.p99_us,
           (unsigned long long)errs);
    /* every repetition, in run order: the spread next to the median */
    printf("  (keys/s by rep:");
    for (unsigned r = 0; r < o->reps; r++)
        printf(" %.0f", in_order[r].keys_per_s);
    printf(")\n");
    if (in_order[0].cpu_us_per_key > 0) {
        printf("  (master CPU us/key by rep:");
        for (unsigned r = 0; r < o->reps; r++)
            printf(" %.3f", in_order[r].cpu_us_per_key);
        printf(")\n");
    }
    print_rss(b);
    fflush(stdout);
    return 0;
}

/* ------------------------------------------------------------ master process */

static int free_ports(uint16_t *a, uint16_t *b)
{
    int fd[2] = {-1, -1}, rc = -1;
    uint16_t p[2];
    for (int i = 0; i < 2; i++) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
        socklen_t sl = sizeof(sa);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fd[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fd[i] < 0 || bind(fd[i], (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
            getsockname(fd[i], (struct sockaddr *)&sa, &sl) != 0)
            goto out;
        p[i] = ntohs(sa.sin_port);
    }
    *a = p[0];
    *b = p[1];
    rc = 0;
out:
    for (int i = 0; i < 2; i++)
        if (fd[i] >= 0)
            close(fd[i]);
    return rc;
}

static pid_t start_master(opts_t *o, const char *argv0)
{
    char bin[4096];
    if (o->master_bin != NULL) {
        snprintf(bin, sizeof(bin), "%s", o->master_bin);
    } else {
        /* next to this program: build/master_bench -> build/mooncake-master */
        const char *slash = strrchr(argv0, '/');
        int dl = slash ? (int)(slash - argv0) : 1;
        snprintf(bin, sizeof(bin), "%.*s/mooncake-master", dl, slash ? argv0 : ".");
    }
    uint16_t rpc, http;
    if (free_ports(&rpc, &http) != 0) {
        fprintf(stderr, "master_bench: cannot find free ports: %s\n", strerror(errno));
        return -1;
    }
    char a_rpc[64], a_http[64], a_reactors[64];
    snprintf(a_rpc, sizeof(a_rpc), "server.rpc_port=%u", rpc);
    snprintf(a_http, sizeof(a_http), "server.http_port=%u", http);
    snprintf(a_reactors, sizeof(a_reactors), "server.reactors=%u", o->master_reactors);
    const char *args[16 + 2 * MAX_MASTER_SETS];
    int na = 0;
    args[na++] = bin;
    args[na++] = "--set";
    args[na++] = "server.bind_address=127.0.0.1";
    args[na++] = "--set";
    args[na++] = a_rpc;
    args[na++] = "--set";
    args[na++] = a_http;
    args[na++] = "--set";
    args[na++] = "log.level=warn";
    /* RemoveAll of millions of objects occupies the master's reactor (and
     * this program's pinging thread) for seconds: with the default 10 s the
     * segment owners could expire meanwhile and the next run would fail */
    args[na++] = "--set";
    args[na++] = "master.client_ttl=120s";
    if (o->master_reactors != 0) {
        args[na++] = "--set";
        args[na++] = a_reactors;
    }
    for (unsigned i = 0; i < o->n_master_sets; i++) {
        args[na++] = "--set";
        args[na++] = o->master_sets[i];
    }
    args[na] = NULL;
    /* stdout and stderr are ours; it dies with us (test/integration/proc.h) */
    static test_proc_t p;
    if (test_proc_start_log(&p, (char *const *)args, NULL, 0) != 0) {
        fprintf(stderr, "master_bench: cannot start %s: %s\n", bin, strerror(errno));
        return -1;
    }
    snprintf(o->host, sizeof(o->host), "127.0.0.1");
    o->port = rpc;
    return p.pid;
}

/* Wait until the master answers SERVICE_READY (10 s). */
static int wait_ready(bench_t *b)
{
    mc_buf_t body = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_empty(&w);
    uint64_t end = mc_now_us() + 10000000;
    mc_status_t st = MC_ERR_CONN_CLOSED;
    mc_log_set_all(MC_LOG_ERR); /* "connection refused" until it listens is expected */
    while (mc_now_us() < end) {
        st = admin_call(b, MC_RPC_SERVICE_READY, &body, NULL, 1000000);
        if (st == MC_OK)
            break;
        if (b->child > 0 && waitpid(b->child, NULL, WNOHANG) == b->child) {
            b->child = 0;
            break;
        }
        usleep(20000);
    }
    mc_buf_fini(&body);
    mc_log_set_all(MC_LOG_WARN);
    if (st != MC_OK)
        fprintf(stderr, "master_bench: master %s:%u not ready: %s\n", b->o->host, b->o->port,
                mc_status_str(st));
    return st == MC_OK ? 0 : -1;
}

/* Segment i: owned by client i % clients, name "bench-seg-<i>" (names are
 * hosts: one replica per name), a fake range at SEG_BASE + i * size. */
static int mount_segments(bench_t *b, unsigned nseg, uint64_t size)
{
    mc_buf_t body = MC_BUF_INIT;
    int rc = 0;
    for (unsigned i = 0; i < nseg && rc == 0; i++) {
        char name[64];
        snprintf(name, sizeof(name), "bench-seg-%u", i);
        mc_master_segment_t seg = {.id = {0x5e6, i + 1},
                                   .name = name,
                                   .te_endpoint = "127.0.0.1:1",
                                   .base = SEG_BASE + (uint64_t)i * size,
                                   .size = size};
        mc_mp_writer_t w;
        mc_buf_reset(&body);
        mc_mp_writer_init(&w, &body);
        mc_mcli_mount(&w, b->conns[i % b->nconns].id, &seg);
        mc_status_t st = admin_call(b, MC_RPC_MOUNT_SEGMENT, &body, NULL, CALL_TIMEOUT_US);
        if (st != MC_OK) {
            fprintf(stderr, "master_bench: mount of segment %u: %s\n", i, mc_status_str(st));
            rc = -1;
        }
    }
    mc_buf_fini(&body);
    b->last_ping_us = mc_now_us();
    return rc;
}

/* ------------------------------------------------------------ main */

static int parse_ops(const char *s, int *ops)
{
    memset(ops, 0, OP_COUNT * sizeof(*ops));
    if (strcasecmp(s, "all") == 0) {
        for (int i = 0; i < OP_COUNT; i++)
            ops[i] = 1;
        return 0;
    }
    char *dup = strdup(s), *save = NULL;
    int rc = 0;
    for (char *t = strtok_r(dup, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < OP_COUNT; i++)
            if (strcasecmp(t, op_names[i]) == 0) {
                ops[i] = found = 1;
            }
        if (!found)
            rc = -1;
    }
    free(dup);
    return rc;
}

/* The command line (perf/bench_opt.h). */
typedef struct cli {
    char *master, *master_bin, *master_set, *operation;
    uint64_t master_reactors, master_pid, clients, threads, depth, batch_size, value_size;
    uint64_t replica_num, num_keys, num_segments, segment_size, reps, rss_objects;
    bool prefill;
    double duration, warmup;
} cli_t;

static const mc_conf_key_t cli_rows[] = {
    MC_CONF_ROW(cli_t, master, "master", MC_CONF_STRING, "", 0, 0,
                "HOST:PORT of a running master (default: start build/mooncake-master)"),
    MC_CONF_ROW(cli_t, master_bin, "master_bin", MC_CONF_STRING, "", 0, 0,
                "master program to start (default: next to master_bench)"),
    MC_CONF_ROW(cli_t, master_reactors, "master_reactors", MC_CONF_UINT, "0", 0, 64,
                "server.reactors of the started master (0: its own default)"),
    MC_CONF_ROW(cli_t, master_set, "master_set", MC_CONF_STRING, "", 0, 0,
                "extra S.K=V --set for the started master (repeatable)"),
    MC_CONF_ROW(cli_t, master_pid, "master_pid", MC_CONF_UINT, "0", 0, 4194304,
                "read VmRSS of this pid (with --master)"),
    MC_CONF_ROW(cli_t, operation, "operation", MC_CONF_STRING, "BatchPut", 0, 0,
                "Put|Get|BatchPut|BatchGet|Exist|Remove, a comma list, or all"),
    MC_CONF_ROW(cli_t, clients, "clients", MC_CONF_UINT, "4", 1, MAX_CONNS,
                "connections, each its own client id"),
    MC_CONF_ROW(cli_t, threads, "threads", MC_CONF_UINT, "1", 1, 64, "client reactors"),
    MC_CONF_ROW(cli_t, depth, "depth", MC_CONF_UINT, "32", 1, MAX_DEPTH,
                "operations in flight per connection"),
    MC_CONF_ROW(cli_t, batch_size, "batch_size", MC_CONF_UINT, "128", 1, MAX_BATCH,
                "keys per batch operation"),
    MC_CONF_ROW(cli_t, value_size, "value_size", MC_CONF_SIZE, "4096", 1, 0x1p40, "object size"),
    MC_CONF_ROW(cli_t, replica_num, "replica_num", MC_CONF_UINT, "1", 1, MC_MASTER_MAX_REPLICAS,
                "replicas per object"),
    MC_CONF_ROW(cli_t, num_keys, "num_keys", MC_CONF_UINT, "100000", 1, 1e12,
                "key space for Get/BatchGet/Exist/Remove"),
    MC_CONF_ROW(cli_t, prefill, "prefill", MC_CONF_BOOL, "false", 0, 0,
                "put the key space before Get/BatchGet/Exist"),
    MC_CONF_ROW(cli_t, num_segments, "num_segments", MC_CONF_UINT, "128", 1, 1e6,
                "fake segments mounted"),
    MC_CONF_ROW(cli_t, segment_size, "segment_size", MC_CONF_SIZE, "64GiB", 4096, 0x1p60,
                "size of each fake segment"),
    MC_CONF_ROW(cli_t, duration, "duration", MC_CONF_DOUBLE, "5", 0.001, 3600,
                "seconds per repetition"),
    MC_CONF_ROW(cli_t, reps, "reps", MC_CONF_UINT, "3", 1, 99,
                "repetitions; the median is reported"),
    MC_CONF_ROW(cli_t, warmup, "warmup", MC_CONF_DOUBLE, "1", 0, 3600,
                "seconds of warm-up before the first repetition"),
    MC_CONF_ROW(cli_t, rss_objects, "rss_objects", MC_CONF_UINT, "0", 0, 1e12,
                "instead: RSS of the master holding this many objects"),
};

/* The command line into o: 0, or the exit code (help: 0, error: 2) + 1. */
static int parse_cli(int argc, char **argv, opts_t *o)
{
    static cli_t c;
    static const char *const repeatable[] = {"master_set", NULL};
    int rc = bench_opts_parse_ex("usage: master_bench [options]\n"
                                 "mooncake-master metadata ops/s and p50/p99 latency",
                                 cli_rows, MC_ARRAY_SIZE(cli_rows), &c, repeatable, argc, argv);
    if (rc != 0)
        return rc == 1 ? 1 : 3;
    if (c.master[0] != '\0' && (sscanf(c.master, "%127[^:]:%u", o->host, &o->port) != 2 ||
                                o->port == 0 || o->port > 65535)) {
        fprintf(stderr, "master_bench: --master wants HOST:PORT, got '%s'\n", c.master);
        return 3;
    }
    o->master_bin = c.master_bin[0] != '\0' ? c.master_bin : NULL;
    o->master_reactors = (unsigned)c.master_reactors;
    for (char *p = c.master_set; *p != '\0';) { /* repeated values joined with '\n' */
        char *nl = strchr(p, '\n');
        if (o->n_master_sets == MAX_MASTER_SETS) {
            fprintf(stderr, "master_bench: at most %d --master_set\n", MAX_MASTER_SETS);
            return 3;
        }
        o->master_sets[o->n_master_sets++] = p;
        if (nl == NULL)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    o->master_pid = (pid_t)c.master_pid;
    if (parse_ops(c.operation, o->ops) != 0) {
        fprintf(stderr, "master_bench: --operation: '%s' names no operation\n", c.operation);
        return 3;
    }
    o->clients = (unsigned)c.clients;
    o->threads = (unsigned)c.threads;
    o->depth = (unsigned)c.depth;
    o->batch = (unsigned)c.batch_size;
    o->value_size = c.value_size;
    o->replica_num = (unsigned)c.replica_num;
    o->num_keys = c.num_keys;
    o->prefill = c.prefill;
    o->num_segments = (unsigned)c.num_segments;
    o->segment_size = c.segment_size;
    o->duration = c.duration;
    o->reps = (unsigned)c.reps;
    o->warmup = c.warmup;
    o->rss_objects = c.rss_objects;
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {.host = "127.0.0.1"};
    int cli_rc = parse_cli(argc, argv, &o);
    if (cli_rc != 0)
        return cli_rc - 1;
    if (o.num_keys < o.clients)
        o.num_keys = o.clients;
    if (o.rss_objects != 0) {
        /* one segment big enough for every object, and ~1 allocation per 4 KiB
         * of it so the allocator's handle table is not the limit */
        uint64_t need = o.rss_objects * (o.value_size > 4096 ? o.value_size : 4096);
        need += need / 4;
        if (o.segment_size < need)
            o.segment_size = need;
        o.num_segments = 1;
        o.replica_num = 1;
    }
    mc_log_set_all(MC_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    bench_t b = {.o = &o};
    if (o.port == 0) {
        b.child = start_master(&o, argv[0]);
        if (b.child < 0)
            return 1;
        b.rss_pid = b.child;
    } else {
        b.rss_pid = o.master_pid;
        if (o.rss_objects != 0 && o.master_pid == 0) {
            fprintf(stderr, "master_bench: --rss_objects with --master needs --master_pid\n");
            return 2;
        }
    }

    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = o.threads;
    go.name = "bench";
    if (mc_reactor_group_create(&go, &b.g) != MC_OK)
        goto out_master;
    mc_rpc_client_opts_t co;
    mc_rpc_client_opts_init(&co);
    co.host = o.host;
    co.port = (uint16_t)o.port;
    co.backoff_min_us = 10000;
    co.backoff_max_us = 100000;
    if (mc_rpc_client_create(mc_reactor_group_get(b.g, 0), &co, &b.admin) != MC_OK)
        goto out_group;
    b.conns = mc_calloc(o.clients, sizeof(*b.conns));
    if (b.conns == NULL)
        goto out_admin;
    b.nconns = o.clients;
    for (unsigned i = 0; i < o.clients; i++)
        if (conn_init(&b.conns[i], &o, i, mc_reactor_group_get(b.g, i % o.threads)) != MC_OK) {
            fprintf(stderr, "master_bench: cannot set up connection %u\n", i);
            goto out_conns;
        }
    if (wait_ready(&b) != 0 || mount_segments(&b, o.num_segments, o.segment_size) != 0)
        goto out_conns;

    if (o.rss_objects != 0) {
        uint64_t limit[MAX_CONNS];
        split_keys(&b, o.rss_objects, limit);
        /* the bench's connections open during the put: their buffers (well
         * under 1 MiB each) count in "after" */
        long before = proc_status_kib(b.rss_pid, "VmRSS");
        uint64_t t0 = mc_now_us();
        result_t r = bench_run(&b, OP_BATCH_PUT, KEYS_LIMIT, limit, 0, -1);
        double secs = (double)(mc_now_us() - t0) / 1e6;
        usleep(200000);
        long after = proc_status_kib(b.rss_pid, "VmRSS");
        printf("master_bench: rss, %llu objects of %llu B under %d-byte keys, 1 replica, one "
               "%.0f GiB segment, BatchPut of %u keys, %u clients x depth %u\n",
               (unsigned long long)o.rss_objects, (unsigned long long)o.value_size, KEY_LEN,
               (double)o.segment_size / (double)(1ull << 30), o.batch, o.clients, o.depth);
        printf("  put in %.2f s (%.0f keys/s), %llu errors%s%s\n", secs,
               (double)o.rss_objects / secs, (unsigned long long)r.errors,
               r.errors ? ", first " : "", r.errors ? mc_status_str(r.first_err) : "");
        printf("  master VmRSS before %.1f MiB, after %.1f MiB (VmHWM %.1f MiB): %.0f bytes per "
               "object\n",
               (double)before / 1024.0, (double)after / 1024.0,
               (double)proc_status_kib(b.rss_pid, "VmHWM") / 1024.0,
               (double)(after - before) * 1024.0 / (double)o.rss_objects);
        printf("csv,master_bench,rss,%llu,%llu,%ld,%ld,%.0f\n", (unsigned long long)o.rss_objects,
               (unsigned long long)o.value_size, before, after,
               (double)(after - before) * 1024.0 / (double)o.rss_objects);
        rc = r.errors == 0 ? 0 : 1;
        goto out_conns;
    }

    printf("master_bench: master %s:%u%s, %u segments x %.0f GiB, %u clients on %u reactor(s), "
           "depth %u, batch %u, value %llu B, %u replica(s), %llu keys%s, %u x %.1f s "
           "(warm-up %.1f s), median rep; latency per op (Put = PutStart+PutEnd, batch = one "
           "batch)\n",
           o.host, o.port, b.child > 0 ? " (child)" : "", o.num_segments,
           (double)o.segment_size / (double)(1ull << 30), o.clients, o.threads, o.depth, o.batch,
           (unsigned long long)o.value_size, o.replica_num, (unsigned long long)o.num_keys,
           o.prefill ? " prefilled" : "", o.reps, o.duration, o.warmup);
    printf("%-9s %7s %5s %5s %12s %12s %9s %9s %8s\n", "op", "clients", "batch", "depth", "ops/s",
           "keys/s", "p50(us)", "p99(us)", "errors");
    fflush(stdout);
    rc = 0;
    for (int op = 0; op < OP_COUNT; op++)
        if (o.ops[op] && bench_op(&b, (op_t)op) != 0)
            rc = 1;
    long removed;
    remove_all(&b, &removed);

out_conns:
    for (unsigned i = 0; i < b.nconns; i++)
        conn_fini(&b.conns[i]);
    mc_free(b.conns);
out_admin:
    mc_rpc_client_destroy(b.admin);
out_group:
    mc_reactor_group_destroy(b.g);
out_master:
    if (b.child > 0) {
        kill(b.child, SIGTERM);
        waitpid(b.child, NULL, 0);
    }
    return rc;
}
