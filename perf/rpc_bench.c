/*
 * rpc_bench - echo RPC throughput and latency.
 *
 *   rpc_bench [--connections 1,2,4] [--depth 1,16,128] [--body 16] [--duration 3]
 *             [--reps 3] [--warmup 0.5] [--server-reactors 1] [--client-reactors 1]
 *             [--connect HOST:PORT]
 *
 * Unless --connect is given, an echo server runs in a forked child process
 * (so client and server are separate processes, as in production). For every
 * (connections, depth) point: warm-up, then --reps timed runs; prints the
 * median calls/s and the p50/p99 latency of the median run, as a table and as
 * "csv," lines.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf/bench_opt.h"
#include "perf/bench_proc.h"
#include "reactor/reactor.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MAX_CONNS 64
#define MAX_DEPTH 4096
#define HIST_US 100000 /* latency histogram: 1 us buckets up to 100 ms */

typedef struct bconn bconn_t;

typedef struct bslot {
    bconn_t *bc;
    uint64_t t0;
} bslot_t;

struct bconn {
    mc_reactor_msg_t msg;
    mc_rpc_client_t *c;
    unsigned depth;
    uint8_t body[4096];
    size_t body_len;
    bslot_t *slots;
    unsigned free_top;
    unsigned *free_idx;
    uint64_t done;
    uint64_t errors;
    uint32_t *hist;       /* per-connection: no sharing between reactors */
    atomic_int *running;  /* 0: stop issuing */
    atomic_int *idle;     /* connections that drained */
    atomic_int recording; /* set by main around the timed run */
};

static void bconn_issue(bconn_t *bc);

static void on_reply(void *arg, const mc_rpc_resp_t *resp)
{
    bslot_t *s = arg;
    bconn_t *bc = s->bc;
    uint64_t lat = mc_now_us() - s->t0;
    if (resp->status != MC_OK)
        bc->errors++;
    if (atomic_load_explicit(&bc->recording, memory_order_relaxed)) {
        bc->done++;
        bc->hist[lat < HIST_US ? lat : HIST_US - 1]++;
    }
    bc->free_idx[bc->free_top++] = (unsigned)(s - bc->slots);
    if (atomic_load_explicit(bc->running, memory_order_relaxed))
        bconn_issue(bc);
    else if (bc->free_top == bc->depth)
        atomic_fetch_add(bc->idle, 1);
}

static void bconn_issue(bconn_t *bc)
{
    while (bc->free_top > 0) {
        bslot_t *s = &bc->slots[bc->free_idx[--bc->free_top]];
        s->t0 = mc_now_us();
        if (mc_rpc_call(bc->c, MC_RPC_ECHO, bc->body, bc->body_len, 10000000, on_reply, s) !=
            MC_INPROGRESS) {
            bc->errors++;
            bc->free_idx[bc->free_top++] = (unsigned)(s - bc->slots);
            break;
        }
    }
}

static void bconn_start(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    (void)r;
    if (st == MC_OK)
        bconn_issue(MC_CONTAINER_OF(msg, bconn_t, msg));
}

typedef struct result {
    double calls_per_s;
    double p50_us, p99_us;
    uint64_t errors;
} result_t;

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

static void sleep_s(double s)
{
    usleep((useconds_t)(s * 1e6));
}

/* One timed run: all connections busy at depth, record for `secs`. */
static result_t run_point(mc_reactor_group_t *g, mc_rpc_client_t **clients, unsigned nconn,
                          unsigned depth, size_t body, double warmup, double secs)
{
    static bconn_t bcs[MAX_CONNS];
    atomic_int running = 1, idle = 0;
    for (unsigned i = 0; i < nconn; i++) {
        bconn_t *bc = &bcs[i];
        memset(bc, 0, sizeof(*bc));
        bc->c = clients[i];
        bc->depth = depth;
        bc->body_len = body;
        /* body: a msgpack map {1: bin} padded to the requested size */
        bc->body[0] = 0x81;
        bc->body[1] = 0x01;
        bc->body[2] = 0xc5; /* bin16 */
        size_t blen = body > 5 ? body - 5 : 0;
        bc->body[3] = (uint8_t)(blen >> 8);
        bc->body[4] = (uint8_t)blen;
        bc->body_len = blen + 5;
        bc->slots = mc_calloc(depth, sizeof(*bc->slots));
        bc->free_idx = mc_calloc(depth, sizeof(*bc->free_idx));
        bc->hist = mc_calloc(HIST_US, sizeof(*bc->hist));
        for (unsigned k = 0; k < depth; k++) {
            bc->slots[k].bc = bc;
            bc->free_idx[k] = k;
        }
        bc->free_top = depth;
        bc->running = &running;
        bc->idle = &idle;
        bc->msg.fn = bconn_start;
        mc_reactor_post(mc_reactor_group_get(g, i % mc_reactor_group_count(g)), &bc->msg);
    }
    sleep_s(warmup);
    for (unsigned i = 0; i < nconn; i++)
        atomic_store_explicit(&bcs[i].recording, 1, memory_order_relaxed); /* a few more or less */
    uint64_t t0 = mc_now_us();
    sleep_s(secs);
    for (unsigned i = 0; i < nconn; i++)
        atomic_store_explicit(&bcs[i].recording, 0, memory_order_relaxed);
    uint64_t t1 = mc_now_us();
    atomic_store(&running, 0);
    for (int w = 0; w < 2000 && atomic_load(&idle) < (int)nconn; w++)
        usleep(1000);

    static uint64_t hist[HIST_US];
    memset(hist, 0, sizeof(hist));
    uint64_t total = 0;
    result_t res = {0};
    for (unsigned i = 0; i < nconn; i++) {
        total += bcs[i].done;
        res.errors += bcs[i].errors;
        for (unsigned k = 0; k < HIST_US; k++)
            hist[k] += bcs[i].hist[k];
        mc_free(bcs[i].slots);
        mc_free(bcs[i].free_idx);
        mc_free(bcs[i].hist);
    }
    res.calls_per_s = (double)total / ((double)(t1 - t0) / 1e6);
    res.p50_us = hist_pct(hist, total, 0.50);
    res.p99_us = hist_pct(hist, total, 0.99);
    return res;
}

static int cmp_res(const void *a, const void *b)
{
    double x = ((const result_t *)a)->calls_per_s, y = ((const result_t *)b)->calls_per_s;
    return x < y ? -1 : x > y;
}

static void rpc_bench_echo(void *ctx, mc_rpc_req_t *req)
{
    size_t len;
    const uint8_t *body = mc_rpc_req_body(req, &len);
    (void)ctx;
    mc_rpc_reply(req, MC_OK, body, len);
}

/* The forked echo server (bench_proc.h): announces "port N", serves until
 * SIGTERM. */
static int echo_child(void *arg, int fd)
{
    unsigned reactors = *(const unsigned *)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = reactors;
    go.name = "echo";
    mc_reactor_group_t *g;
    if (mc_reactor_group_create(&go, &g) != MC_OK)
        return 1;
    mc_reactor_t *rs[64];
    unsigned n = mc_reactor_group_count(g);
    for (unsigned i = 0; i < n; i++)
        rs[i] = mc_reactor_group_get(g, i);
    mc_rpc_server_opts_t so;
    mc_rpc_server_opts_init(&so);
    so.bind_addr = "127.0.0.1";
    mc_rpc_server_t *srv;
    if (mc_rpc_server_create(rs, n, &so, &srv) != MC_OK ||
        mc_rpc_server_register(srv, MC_RPC_ECHO, rpc_bench_echo, NULL) != MC_OK ||
        mc_rpc_server_start(srv) != MC_OK)
        return 1;
    if (dprintf(fd, "port %u\n", (unsigned)mc_rpc_server_port(srv)) < 0)
        return 1;
    int sig;
    sigwait(&set, &sig);
    mc_rpc_server_destroy(srv);
    mc_reactor_group_destroy(g);
    return 0;
}

/* Fork the echo server; its port into *port. The child's pid, or -1. */
static pid_t start_server(unsigned reactors, uint16_t *port)
{
    char line[64];
    unsigned p = 0;
    pid_t pid = bench_fork("rpc_bench", echo_child, &reactors, line, sizeof(line), 30000);
    if (pid > 0 && (sscanf(line, "port %u", &p) != 1 || p == 0 || p > 65535)) {
        bench_reap(pid);
        return -1;
    }
    *port = (uint16_t)p;
    return pid;
}

/* The command line (perf/bench_opt.h). */
typedef struct opts {
    char *connections, *depth; /* comma lists */
    uint64_t body, reps, server_reactors, client_reactors;
    double duration, warmup;
    char *connect; /* HOST:PORT, or "" for a forked echo server */
} opts_t;

static const mc_conf_key_t opt_rows[] = {
    MC_CONF_ROW(opts_t, connections, "connections", MC_CONF_STRING, "1,2,4", 0, 0,
                "connections per point, a comma list (1..64)"),
    MC_CONF_ROW(opts_t, depth, "depth", MC_CONF_STRING, "1,16,128", 0, 0,
                "calls in flight per connection, a comma list (1..4096)"),
    MC_CONF_ROW(opts_t, body, "body", MC_CONF_UINT, "16", 5, 4096, "request body bytes"),
    MC_CONF_ROW(opts_t, duration, "duration", MC_CONF_DOUBLE, "3", 0.001, 3600, "seconds per run"),
    MC_CONF_ROW(opts_t, reps, "reps", MC_CONF_UINT, "3", 1, 99,
                "runs per point (the median counts)"),
    MC_CONF_ROW(opts_t, warmup, "warmup", MC_CONF_DOUBLE, "0.5", 0, 3600,
                "seconds of warm-up before a point's first run"),
    MC_CONF_ROW(opts_t, server_reactors, "server-reactors", MC_CONF_UINT, "1", 1, 64,
                "reactors of the forked echo server"),
    MC_CONF_ROW(opts_t, client_reactors, "client-reactors", MC_CONF_UINT, "1", 1, 64,
                "reactors of the clients"),
    MC_CONF_ROW(opts_t, connect, "connect", MC_CONF_STRING, "", 0, 0,
                "HOST:PORT of a running echo server instead of a forked one"),
};

int main(int argc, char **argv)
{
    opts_t o;
    int rc = bench_opts_parse("usage: rpc_bench [options]\n"
                              "echo RPC calls/s and p50/p99 latency per connections x depth",
                              opt_rows, MC_ARRAY_SIZE(opt_rows), &o, argc, argv);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    uint64_t conns[16], depths[16];
    unsigned nconns = bench_list("connections", o.connections, 0, 1, MAX_CONNS, conns, 16);
    unsigned ndepths = bench_list("depth", o.depth, 0, 1, MAX_DEPTH, depths, 16);
    if (nconns == 0 || ndepths == 0)
        return 2;
    unsigned body = (unsigned)o.body, reps = (unsigned)o.reps;
    unsigned sreactors = (unsigned)o.server_reactors, creactors = (unsigned)o.client_reactors;
    double secs = o.duration, warmup = o.warmup;
    char host[128] = "127.0.0.1";
    unsigned port = 0;
    if (o.connect[0] != '\0' &&
        (sscanf(o.connect, "%127[^:]:%u", host, &port) != 2 || port == 0 || port > 65535)) {
        fprintf(stderr, "rpc_bench: --connect wants HOST:PORT, got '%s'\n", o.connect);
        return 2;
    }
    mc_log_set_all(MC_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);

    pid_t server = 0;
    if (port == 0) {
        uint16_t p;
        server = start_server(sreactors, &p);
        if (server < 0) {
            fprintf(stderr, "rpc_bench: cannot start the echo server\n");
            return 1;
        }
        port = p;
    }

    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = creactors;
    go.name = "bench";
    mc_reactor_group_t *g;
    if (mc_reactor_group_create(&go, &g) != MC_OK)
        return 1;
    mc_rpc_client_t *clients[MAX_CONNS];
    for (unsigned i = 0; i < MAX_CONNS; i++) {
        mc_rpc_client_opts_t co;
        mc_rpc_client_opts_init(&co);
        co.host = host;
        co.port = (uint16_t)port;
        if (mc_rpc_client_create(mc_reactor_group_get(g, i % mc_reactor_group_count(g)), &co,
                                 &clients[i]) != MC_OK)
            return 1;
    }

    printf("rpc_bench: echo, %u-byte bodies, server %s:%u (%u reactor(s)), client %u "
           "reactor(s), %u x %.1f s per point, median of runs\n",
           body, host, port, sreactors, creactors, reps, secs);
    printf("%6s %6s %14s %10s %10s %8s\n", "conns", "depth", "calls/s", "p50(us)", "p99(us)",
           "errors");
    for (unsigned ci = 0; ci < nconns; ci++) {
        for (unsigned di = 0; di < ndepths; di++) {
            result_t rs[99];
            for (unsigned r = 0; r < reps; r++)
                rs[r] = run_point(g, clients, (unsigned)conns[ci], (unsigned)depths[di], body,
                                  r == 0 ? warmup : 0.1, secs);
            qsort(rs, reps, sizeof(rs[0]), cmp_res);
            result_t m = rs[reps / 2];
            uint64_t errs = 0;
            for (unsigned r = 0; r < reps; r++)
                errs += rs[r].errors;
            printf("%6u %6u %14.0f %10.1f %10.1f %8llu\n", (unsigned)conns[ci],
                   (unsigned)depths[di], m.calls_per_s, m.p50_us, m.p99_us,
                   (unsigned long long)errs);
            printf("csv,rpc_bench,%u,%u,%u,%.0f,%.1f,%.1f,%llu\n", (unsigned)conns[ci],
                   (unsigned)depths[di], body, m.calls_per_s, m.p50_us, m.p99_us,
                   (unsigned long long)errs);
            fflush(stdout);
        }
    }
    for (unsigned i = 0; i < MAX_CONNS; i++)
        mc_rpc_client_destroy(clients[i]);
    mc_reactor_group_destroy(g);
    bench_reap(server);
    return 0;
}
