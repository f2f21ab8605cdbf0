/*
 * offdel_bench.c - the master's list of DELETEs waiting for nodes
 * (store/master_offload.c): what a report, a take-back and a poll cost
 * while many DELETEs wait. They pile up when nodes are down (parked for
 * their return) and on a standby, which replays every removal of an
 * offloaded object (it cannot see nodes poll) and takes one back for each
 * replayed LDISK record.
 *
 * In-process master core (no network). Per repetition, a fresh master:
 * --segments nodes, --deletions disk-only objects spread over them and
 * removed (their DELETEs wait: no node polls), then timed:
 *   report new  - --ops reports of files of keys the master does not know
 *                 (the DELETE list is searched, nothing found, the object
 *                 made);
 *   report gone - --ops reports of files of removed keys (found, taken
 *                 back, refused);
 *   poll other  - --ops polls of a node none of the DELETEs are for.
 * Prints the median over --reps of each, in microseconds per call.
 *
 *   make build/offdel_bench && build/offdel_bench [--deletions 100000]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf/bench_opt.h"
#include "store/master.h"
#include "util/log.h"
#include "util/time.h"

typedef struct cli {
    uint64_t deletions, segments, ops, reps;
} cli_t;

static const mc_conf_key_t cli_rows[] = {
    MC_CONF_ROW(cli_t, deletions, "deletions", MC_CONF_UINT, "100000", 1, 1000000,
                "DELETEs waiting (removed disk-only objects)"),
    MC_CONF_ROW(cli_t, segments, "segments", MC_CONF_UINT, "8", 1, 1000,
                "nodes the objects are spread over"),
    MC_CONF_ROW(cli_t, ops, "ops", MC_CONF_UINT, "10000", 1, 1000000, "calls timed per phase"),
    MC_CONF_ROW(cli_t, reps, "reps", MC_CONF_UINT, "5", 1, 100, "repetitions (medians printed)"),
};

#define SIZE 4096
#define T0 (1000ull * 1000000)

static mc_uuid_t client(uint64_t n)
{
    return (mc_uuid_t){0xc1, n + 1};
}

static mc_uuid_t segment(uint64_t n)
{
    return (mc_uuid_t){0x5e6, n + 1};
}

static void must(mc_status_t st, mc_status_t want, const char *what)
{
    if (st != want) {
        fprintf(stderr, "offdel_bench: %s: %s (wanted %s)\n", what, mc_status_str(st),
                mc_status_str(want));
        exit(1);
    }
}

static int no_req(void *arg, const mc_master_offload_req_t *r)
{
    (void)r;
    (*(uint64_t *)arg)++;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, uint64_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One repetition: out[0..2] = us per call of each phase. */
static void rep(const cli_t *c, double out[3])
{
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 1000000ull * 1000000;
    o.enable_offload = 1;
    o.offload_on_evict = 1;
    mc_master_t *m = NULL;
    must(mc_master_create(&o, 7, &m), MC_OK, "create");
    uint64_t ns = c->segments + 1; /* the last: the other node */
    for (uint64_t i = 0; i < ns; i++) {
        char name[32], ep[48];
        snprintf(name, sizeof(name), "n%llu", (unsigned long long)i);
        snprintf(ep, sizeof(ep), "%s:9000", name);
        mc_master_segment_t s = {.id = segment(i),
                                 .name = name,
                                 .te_endpoint = ep,
                                 .base = (i + 1) << 40,
                                 .size = 1ull << 30};
        must(mc_master_mount_segment(m, client(i), &s, T0), MC_OK, "mount");
        uint64_t given = 0;
        must(mc_master_offload_poll(m, client(i), segment(i), T0, 0, no_req, &given), MC_OK,
             "poll");
    }
    char k[32];
    for (uint64_t i = 0; i < c->deletions; i++) {
        uint64_t n = i % c->segments;
        int kl = snprintf(k, sizeof(k), "gone-%llu", (unsigned long long)i);
        must(mc_master_ldisk_report(m, client(n), segment(n), k, (size_t)kl, SIZE, T0), MC_OK,
             "report");
    }
    for (uint64_t i = 0; i < c->deletions; i++) {
        int kl = snprintf(k, sizeof(k), "gone-%llu", (unsigned long long)i);
        must(mc_master_remove(m, k, (size_t)kl, 0, T0), MC_OK, "remove");
    }
    uint64_t t0 = mc_now_ns();
    for (uint64_t i = 0; i < c->ops; i++) {
        int kl = snprintf(k, sizeof(k), "new-%llu", (unsigned long long)i);
        must(mc_master_ldisk_report(m, client(0), segment(0), k, (size_t)kl, SIZE, T0), MC_OK,
             "report new");
    }
    uint64_t t1 = mc_now_ns();
    uint64_t ops_gone = c->ops < c->deletions / c->segments ? c->ops : c->deletions / c->segments;
    for (uint64_t i = 0; i < ops_gone; i++) {
        int kl = snprintf(k, sizeof(k), "gone-%llu", (unsigned long long)(i * c->segments));
        must(mc_master_ldisk_report(m, client(0), segment(0), k, (size_t)kl, SIZE, T0),
             MC_ERR_OBJECT_NOT_FOUND, "report gone");
    }
    uint64_t t2 = mc_now_ns();
    uint64_t given = 0;
    for (uint64_t i = 0; i < c->ops; i++)
        must(mc_master_offload_poll(m, client(ns - 1), segment(ns - 1), T0, 64, no_req, &given),
             MC_OK, "poll other");
    uint64_t t3 = mc_now_ns();
    if (given != 0) {
        fprintf(stderr, "offdel_bench: the other node was handed %llu requests\n",
                (unsigned long long)given);
        exit(1);
    }
    out[0] = (double)(t1 - t0) / 1e3 / (double)c->ops;
    out[1] = (double)(t2 - t1) / 1e3 / (double)(ops_gone ? ops_gone : 1);
    out[2] = (double)(t3 - t2) / 1e3 / (double)c->ops;
    mc_master_destroy(m);
}

int main(int argc, char **argv)
{
    cli_t c;
    int r = bench_opts_parse("offdel_bench [--deletions N] [--segments N] [--ops N] [--reps N]",
                             cli_rows, sizeof(cli_rows) / sizeof(cli_rows[0]), &c, argc, argv);
    if (r != 0)
        return r == 1 ? 0 : 2;
    mc_log_set_all(MC_LOG_WARN);
    double v[3][100];
    double warm[3];
    rep(&c, warm); /* warm-up */
    for (uint64_t i = 0; i < c.reps; i++) {
        double out[3];
        rep(&c, out);
        for (int p = 0; p < 3; p++)
            v[p][i] = out[p];
    }
    printf("offdel_bench: %llu DELETEs waiting over %llu nodes, medians of %llu reps (us per "
           "call)\n",
           (unsigned long long)c.deletions, (unsigned long long)c.segments,
           (unsigned long long)c.reps);
    printf("  report new   %10.3f\n", median(v[0], c.reps));
    printf("  report gone  %10.3f\n", median(v[1], c.reps));
    printf("  poll other   %10.3f\n", median(v[2], c.reps));
    return 0;
}
