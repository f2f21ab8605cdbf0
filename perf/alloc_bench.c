/*
 * alloc_bench.c - speed and utilisation of the offset allocator.
 *
 * For random request sizes in 4 KiB..4 MiB (uniform, and uniform over the
 * powers of two), on a 64 GiB space:
 *   fill   - allocate until the first failure: ns per alloc, utilisation;
 *   churn  - free a random live allocation, allocate a new one, N times:
 *            ns per free+alloc pair, share of allocs that failed;
 *   refill - after the churn, allocate until the first failure: utilisation
 *            (this is the figure fragmentation costs);
 *   query  - ns per largest_free() on the fragmented space.
 *
 *   make && build/alloc_bench [--pairs N (default 2000000)]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "perf/bench_opt.h"
#include "store/offset_alloc.h"
#include "util/mem.h"
#include "util/time.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

#define CAPACITY (64 * GiB)
#define MAX_ALLOCS (1u << 20)
#define MIN_SIZE (4 * KiB)
#define MAX_SIZE (4 * MiB)

static uint64_t rng_state = 12345;

static uint64_t rng_next(void)
{
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t size_uniform(void)
{
    return MIN_SIZE + rng_next() % (MAX_SIZE - MIN_SIZE + 1);
}

/* 4 KiB..4 MiB with each power of two equally likely */
static uint64_t size_log_uniform(void)
{
    uint64_t lo = MIN_SIZE << (rng_next() % 10);
    return lo + rng_next() % lo;
}

typedef struct live {
    mc_oalloc_handle_t *h;
    uint32_t n;
} live_t;

/* Allocate until the first failure; returns how many succeeded. */
static uint64_t fill(mc_oalloc_t *a, live_t *l, uint64_t (*size)(void))
{
    uint64_t count = 0;
    while (l->n < MAX_ALLOCS && mc_oalloc_alloc(a, size(), &l->h[l->n]) == MC_OK) {
        l->n++;
        count++;
    }
    return count;
}

static void run(const char *name, uint64_t (*size)(void), uint64_t pairs)
{
    mc_oalloc_t *a;
    if (mc_oalloc_create(CAPACITY, MAX_ALLOCS, &a) != MC_OK) {
        fprintf(stderr, "alloc_bench: cannot create the allocator\n");
        exit(1);
    }
    live_t l = {mc_malloc(MAX_ALLOCS * sizeof(mc_oalloc_handle_t)), 0};
    if (l.h == NULL) {
        fprintf(stderr, "alloc_bench: out of memory\n");
        exit(1);
    }

    uint64_t t0 = mc_now_ns();
    uint64_t filled = fill(a, &l, size);
    uint64_t t1 = mc_now_ns();
    double fill_util = 1.0 - mc_oalloc_free_ratio(a);

    uint64_t failed = 0;
    uint64_t t2 = mc_now_ns();
    for (uint64_t i = 0; i < pairs; i++) {
        uint32_t k = (uint32_t)(rng_next() % l.n);
        mc_oalloc_free(a, l.h[k]);
        l.h[k] = l.h[--l.n];
        if (mc_oalloc_alloc(a, size(), &l.h[l.n]) == MC_OK)
            l.n++;
        else
            failed++;
    }
    uint64_t t3 = mc_now_ns();
    double churn_util = 1.0 - mc_oalloc_free_ratio(a);

    fill(a, &l, size);
    double refill_util = 1.0 - mc_oalloc_free_ratio(a);
    uint64_t largest = mc_oalloc_largest_free(a);

    enum { QUERIES = 1000000 };
    uint64_t sink = 0;
    uint64_t t4 = mc_now_ns();
    for (int i = 0; i < QUERIES; i++)
        sink += mc_oalloc_largest_free(a);
    uint64_t t5 = mc_now_ns();

    printf("%-12s fill: %7.1f ns/alloc, %.4f used at first failure (%llu allocs)\n", name,
           (double)(t1 - t0) / (double)filled, fill_util, (unsigned long long)filled);
    printf("%-12s churn: %6.1f ns per free+alloc pair over %llu pairs, %.2f%% allocs failed,"
           " %.4f used\n",
           name, (double)(t3 - t2) / (double)pairs, (unsigned long long)pairs,
           100.0 * (double)failed / (double)pairs, churn_util);
    printf("%-12s refill: %.4f used at first failure, largest free %llu KiB,"
           " %llu live; largest_free() %.1f ns (%llu)\n",
           name, refill_util, (unsigned long long)(largest / KiB), (unsigned long long)l.n,
           (double)(t5 - t4) / QUERIES, (unsigned long long)(sink != 0));

    mc_free(l.h);
    mc_oalloc_destroy(a);
}

/* The command line (perf/bench_opt.h). */
typedef struct cli {
    uint64_t pairs;
} cli_t;

static const mc_conf_key_t cli_rows[] = {
    MC_CONF_ROW(cli_t, pairs, "pairs", MC_CONF_UINT, "2000000", 1, 1e10,
                "free+alloc pairs of the churn phase"),
};

int main(int argc, char **argv)
{
    static cli_t o;
    char pairs_arg[64];
    if (argc == 2 && argv[1][0] != '-') { /* the old form: alloc_bench PAIRS */
        snprintf(pairs_arg, sizeof(pairs_arg), "--pairs=%s", argv[1]);
        argv[1] = pairs_arg;
    }
    int rc = bench_opts_parse("usage: alloc_bench [--pairs N]\n"
                              "offset allocator: fill, churn, refill and query speed and use",
                              cli_rows, MC_ARRAY_SIZE(cli_rows), &o, argc, argv);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    uint64_t pairs = o.pairs;
    if (pairs == 0)
        pairs = 1;
    printf("offset allocator: %llu GiB space, %u max allocations, sizes %llu KiB..%llu MiB\n",
           (unsigned long long)(CAPACITY / GiB), MAX_ALLOCS, (unsigned long long)(MIN_SIZE / KiB),
           (unsigned long long)(MAX_SIZE / MiB));
    run("uniform", size_uniform, pairs);
    run("log-uniform", size_log_uniform, pairs);
    return 0;
}
