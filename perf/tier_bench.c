/*
 * tier_bench - read bandwidth of the persistent tier (store/tier.h), for
 * perf/compare_tier.sh, which runs it against dd on the same files.
 *
 *   tier_bench put  --master HOST:PORT [-n 64] [--size 4M] [--prefix tb] [--retry 20000]
 *                   [--warm --between CMD]
 *       eager puts of keys "PREFIX/<i>" (each put returns once its file is
 *       written): the files exist afterwards, whatever memory keeps. A put
 *       the full pool refuses is tried again --retry µs later (for up to 4 s);
 *       the refusals are counted. --warm: a pass of keys "PREFIX-warm/<i>"
 *       first, then CMD, then the timed pass (the same process: its first
 *       touch of each page of the node's segment is not in the time).
 *   tier_bench get  --master HOST:PORT [-n 64] [--size 4M] [--rounds 3] [--depth 1]
 *                   [--between CMD] [--service HOST:PORT] [--sync]
 *       gets of the same keys through the store client (--depth D: D
 *       async gets kept in flight, as fio's iodepth), verifying the
 *       bytes; run it when the objects are only on disk (after a master
 *       restart): every get is GetReplicaList + a worker's file read with
 *       the key and checksum checks + the copy into the caller's buffer.
 *       --service: a co-located client of that store service (its node's
 *       disk-only objects are read by the node straight into this
 *       process's buffers: mc_store_shared_alloc memory, registered, as
 *       SGLang's host KV pages are). --sync: D threads doing sync gets
 *       instead of D async gets from one thread. Each get is checked as it
 *       ends: every byte (XXH3) in round 0, sampled bytes after; in the
 *       round's time except for the async reader at depth 1 (check_get).
 *   tier_bench read --dir TIERDIR [-n 64] [--size 4M] [--rounds 3]
 *       the file path alone: mc_tier_read of the same keys' files (header,
 *       key, pread of the data, XXH3 of the data), no master, no client.
 *   tier_bench files --dir TIERDIR [-n 64]
 *       prints the files' paths (for dd).
 *   tier_bench write --dir TIERDIR [-n 64] [--size 4M] [--prefix tb]
 *       writes the keys' files straight into TIERDIR (a node's offload
 *       directory while the node is down: perf/offload_report.sh), in the
 *       node's format (header padded to 4096), then syncs the file system.
 *   tier_bench scan --dir TIERDIR [--rounds 3] [--threads 8] [--cold]
 *       times mc_tier_scan_n of TIERDIR (every file's header, as a node's
 *       start scan of its offload directory) with --threads leaf
 *       directories read at once; --cold: the page cache dropped first
 *       (root): the headers come from the device (perf/offload_scan.sh).
 *
 * Every timed round reads each object once, one at a time (one thread;
 * get: D at a time);
 * prints GB/s per round (1 GB = 1e9 B of object data) and a csv line:
 *   csv,tier_bench,MODE,size,n,round,gb_s   (get: and the gets read again
 *   because their lease expired first: counted in the time)
 * --between CMD runs CMD (sh -c, MC_BENCH_ROUND=r) after every round, outside
 * its time: a peer measured in the same minute as each round.
 */
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mooncake/store.h"
#include "perf/bench_opt.h"
#include "store/node_http.h"
#include "store/tier.h"
#include "util/buf.h"
#include "util/conf.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

/* A size in the configuration's syntax (4096, 4M, 4MiB); 0 when it is not one. */
/* The command line after the mode (perf/bench_opt.h). */
typedef struct cli {
    char *master, *dir, *prefix, *stages, *between, *service;
    uint64_t n, size, rounds, depth, retry, threads;
    bool sync, reg, warm, cold;
} cli_t;

static const mc_conf_key_t cli_rows[] = {
    MC_CONF_ROW(cli_t, master, "master", MC_CONF_STRING, "127.0.0.1:50051", 0, 0,
                "HOST:PORT of the master"),
    MC_CONF_ROW(cli_t, dir, "dir", MC_CONF_STRING, "", 0, 0, "the tier's directory (read, files)"),
    MC_CONF_ROW(cli_t, n, "n", MC_CONF_UINT, "64", 1, 1e9, "objects"),
    MC_CONF_ROW(cli_t, size, "size", MC_CONF_SIZE, "4MiB", 1, 0x1p40, "bytes per object"),
    MC_CONF_ROW(cli_t, rounds, "rounds", MC_CONF_UINT, "3", 1, 1000, "rounds of reads"),
    MC_CONF_ROW(cli_t, depth, "depth", MC_CONF_UINT, "1", 1, 64,
                "get: gets kept in flight (queue depth)"),
    MC_CONF_ROW(cli_t, sync, "sync", MC_CONF_BOOL, "false", 0, 0,
                "get: --depth threads each doing sync gets (mc_store_get), not async gets "
                "from one thread: how serving engines call a co-located client; each get "
                "checked in its thread: every byte in round 0, sampled bytes after"),
    MC_CONF_ROW(cli_t, reg, "register", MC_CONF_BOOL, "false", 0, 0,
                "get: the buffers registered with the client (mc_store_register_buffer), as "
                "serving engines register their KV buffers: the transfer lands in them, no "
                "staging copy (--service: always)"),
    MC_CONF_ROW(cli_t, warm, "warm", MC_CONF_BOOL, "false", 0, 0,
                "put: first a warm-up pass of keys PREFIX-warm/<i>, then --between, then "
                "the timed pass (its seconds printed: put pass: S s), in one process as a "
                "serving engine's client lives on"),
    MC_CONF_ROW(cli_t, retry, "retry", MC_CONF_UINT, "20000", 0, 1e7,
                "put: µs to wait before a put the full pool refused is tried again"),
    MC_CONF_ROW(cli_t, prefix, "prefix", MC_CONF_STRING, "tb", 0, 0,
                "keys are PREFIX/<i> (perf/compare_offload.sh uses two sets)"),
    MC_CONF_ROW(cli_t, stages, "stages", MC_CONF_STRING, "", 0, 0,
                "get: write the reader's stages of disk-only gets to this file at the end "
                "(mooncake_store_get_load_stage_seconds, Prometheus text)"),
    MC_CONF_ROW(cli_t, service, "service", MC_CONF_STRING, "", 0, 0,
                "get: HOST:PORT of a store service: read as its co-located client, into "
                "shared memory registered with it"),
    MC_CONF_ROW(cli_t, threads, "threads", MC_CONF_UINT, "8", 1, MC_TIER_SCAN_THREADS_MAX,
                "scan: leaf directories read at once (1: one after another)"),
    MC_CONF_ROW(cli_t, cold, "cold", MC_CONF_BOOL, "false", 0, 0,
                "scan: drop the page cache before each round (sync; echo 3 > "
                "/proc/sys/vm/drop_caches: root): the headers come from the device"),
    MC_CONF_ROW(cli_t, between, "between", MC_CONF_STRING, "", 0, 0,
                "get, read: run this shell command after each round, outside the time (a "
                "peer's run paired with each round, as perf/compare_offload.sh does); put "
                "--warm: after the warm-up pass"),
};

/* --between: run cmd after round r (MC_BENCH_ROUND=r in its environment);
 * 0, or -1 when it failed (said on stderr). */
static int run_between(const char *cmd, unsigned r)
{
    if (cmd[0] == '\0')
        return 0;
    char v[16];
    snprintf(v, sizeof(v), "%u", r);
    setenv("MC_BENCH_ROUND", v, 1);
    fflush(stdout);
    int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "tier_bench: --between command failed after round %u (status %d)\n", r, rc);
        return -1;
    }
    return 0;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}

/* get: a window of gets in flight (--depth). */
typedef struct slot slot_t;
typedef struct win {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned n, inflight, nfinished;
    slot_t *finished[64];
} win_t;

struct slot {
    win_t *w;
    uint8_t *buf;
    char key[64];
    int idx; /* the object read into buf, -1 = free */
    int64_t res;
};

static void got_one(void *arg, int64_t result)
{
    slot_t *sl = arg;
    win_t *w = sl->w;
    pthread_mutex_lock(&w->mu);
    sl->res = result;
    w->inflight--;
    w->finished[w->nfinished++] = sl;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Did a get of object i read its bytes? full: every byte (XXH3 against
 * sums[i]: the warm-up round, not counted); else samples against wants (n x
 * size, every object's bytes): 64 bytes at each end and 64 words spread
 * between, ~1 us). A check's time is taken out of its round only at depth
 * 1 in the async reader, when no get runs meanwhile: at depth > 1 the
 * other gets go on during it, and a round less its checks overstated the
 * bandwidth (by ~40% at depth 4 with 4 MiB objects, every byte checked in
 * every round, as this reader did up to 2026-11-27). */
static int check_get(const uint8_t *buf, uint64_t size, unsigned i, const uint64_t *sums,
                     const uint8_t *wants, int full)
{
    if (full)
        return mc_hash64(buf, size) == sums[i];
    const uint8_t *w = wants + (size_t)i * size;
    uint64_t tail = size > 64 ? size - 64 : 0;
    int ok = memcmp(buf, w, size < 64 ? size : 64) == 0 &&
             memcmp(buf + tail, w + tail, size - tail) == 0;
    for (uint64_t k = 1; ok && k <= 64 && size >= 8; k++) {
        uint64_t at = (size - 8) / 65 * k + (i * 8191u + k * 977u) % 64;
        ok = memcmp(buf + at, w + at, 8) == 0;
    }
    return ok;
}

/* --sync: a reader thread's gets of a round (the next object index shared). */
typedef struct sync_rd {
    mc_store_t *s;
    const char *prefix;
    uint8_t *buf;
    uint64_t size;
    const uint64_t *sums;
    const uint8_t *wants; /* every object's bytes (n x size) */
    int full;             /* check every byte (the warm-up round), else samples */
    unsigned n;
    _Atomic unsigned *next;
    int bad; /* a get failed or read other bytes (said on stderr) */
    unsigned lease_retries;
} sync_rd_t;

static void *sync_reader(void *arg)
{
    sync_rd_t *t = arg;
    char key[64];
    for (unsigned i; !t->bad && (i = atomic_fetch_add(t->next, 1)) < t->n;) {
        snprintf(key, sizeof(key), "%.40s/%u", t->prefix, i);
        int64_t r = mc_store_get(t->s, key, strlen(key), t->buf, t->size, NULL);
        if (r == MC_ERR_LEASE_EXPIRED && t->lease_retries < t->n) {
            t->lease_retries++; /* as the async reader: read again, counted */
            r = mc_store_get(t->s, key, strlen(key), t->buf, t->size, NULL);
        }
        int ok = r == (int64_t)t->size && check_get(t->buf, t->size, i, t->sums, t->wants, t->full);
        if (!ok) {
            fprintf(stderr, "tier_bench: get %s: %s\n", key,
                    r < 0 ? mc_status_str((mc_status_t)r) : "short or wrong bytes");
            t->bad = 1;
        }
    }
    return NULL;
}

/* One round of --sync gets from depth threads: GB/s, or -1. Each get is
 * checked in the get's thread, in the time: every byte (XXH3) in round 0
 * (the warm-up, not counted), sampled bytes (~1 µs) after. */
static double sync_round(mc_store_t *s, const char *prefix, uint8_t *buf, uint64_t size,
                         const uint64_t *sums, const uint8_t *wants, int full, unsigned n,
                         unsigned depth, unsigned *retries)
{
    _Atomic unsigned next = 0;
    sync_rd_t t[64];
    pthread_t th[64];
    uint64_t t0 = mc_now_us();
    for (unsigned j = 0; j < depth; j++) {
        t[j] = (sync_rd_t){.s = s,
                           .prefix = prefix,
                           .buf = buf + (size_t)j * size,
                           .size = size,
                           .sums = sums,
                           .wants = wants,
                           .full = full,
                           .n = n,
                           .next = &next};
        if (pthread_create(&th[j], NULL, sync_reader, &t[j]) != 0)
            return -1;
    }
    int bad = 0;
    for (unsigned j = 0; j < depth; j++) {
        pthread_join(th[j], NULL);
        bad |= t[j].bad;
        *retries += t[j].lease_retries;
    }
    if (bad)
        return -1;
    double sec = (double)(mc_now_us() - t0) / 1e6;
    return (double)size * n / sec / 1e9;
}

static mc_store_t *open_store(const char *master, const char *service)
{
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.service = service;
    c.reactors = 1;
    c.persist = "eager";
    c.local_buffer_size = 16ull << 20;
    mc_store_t *s = NULL;
    mc_status_t st = mc_store_open(&c, &s);
    if (st != MC_OK) {
        fprintf(stderr, "tier_bench: cannot open the store client: %s\n", mc_status_str(st));
        exit(1);
    }
    return s;
}

static int count_file(void *arg, const void *key, size_t klen, const mc_tier_known_t *k)
{
    (void)key;
    (void)klen;
    (void)k;
    (*(uint64_t *)arg)++;
    return 0;
}

/* scan: --rounds scans of --dir with --threads (mc_tier_scan_n, the
 * directory not owned: nothing deleted), each after dropping the page
 * cache with --cold. */
static int scan_rounds(const cli_t *o)
{
    if (o->dir[0] == '\0') {
        fprintf(stderr, "tier_bench: scan needs --dir\n");
        return 2;
    }
    for (unsigned r = 0; r < o->rounds; r++) {
        if (o->cold) {
            sync();
            FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
            if (f == NULL || fputs("3\n", f) == EOF || fclose(f) != 0) {
                fprintf(stderr, "tier_bench: --cold: cannot drop the page cache (root?)\n");
                return 1;
            }
        }
        uint64_t files = 0, t0 = mc_now_us();
        mc_tier_scan_stats_t ss;
        mc_status_t st =
            mc_tier_scan_n(o->dir, UINT64_MAX, (unsigned)o->threads, 0, count_file, &files, &ss);
        double s = (double)(mc_now_us() - t0) / 1e6;
        if (st != MC_OK || files != ss.files) {
            fprintf(stderr, "tier_bench: scan %s: %s\n", o->dir, mc_status_str(st));
            return 1;
        }
        printf("scan  %llu files  threads %llu  %s  round %u  %.3f s  %.0f files/s\n",
               (unsigned long long)files, (unsigned long long)o->threads, o->cold ? "cold" : "warm",
               r, s, (double)files / s);
        printf("csv,tier_bench,scan,%s,%llu,%llu,%u,%.4f\n", o->cold ? "cold" : "warm",
               (unsigned long long)files, (unsigned long long)o->threads, r, s);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char usage[] = "usage: tier_bench put|get|read|files|write|scan [options]\n"
                                "persistent tier: eager puts, store gets, raw file reads";
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
            bench_opts_parse(usage, cli_rows, MC_ARRAY_SIZE(cli_rows), &(cli_t){0}, argc, argv);
            return 0;
        }
        fprintf(stderr, "%s\n(--help lists the options)\n", usage);
        return 2;
    }
    const char *mode = argv[1];
    static cli_t o;
    argv[1] = argv[0]; /* the options follow the mode */
    int rc = bench_opts_parse(usage, cli_rows, MC_ARRAY_SIZE(cli_rows), &o, argc - 1, argv + 1);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    const char *master = o.master, *dir = o.dir[0] != '\0' ? o.dir : NULL;
    unsigned n = (unsigned)o.n, rounds = (unsigned)o.rounds;
    uint64_t size = o.size;
    mc_log_set_all(MC_LOG_WARN);
    unsigned depth = (unsigned)o.depth;
    /* a co-located reader's buffers: memory its service writes into in place */
    int colocated = o.service[0] != '\0' && strcmp(mode, "get") == 0;
    uint8_t *buf = colocated ? mc_store_shared_alloc(size * depth) : malloc(size * depth);
    uint8_t *want = malloc(size);
    if (buf == NULL || want == NULL)
        return 1;
    char key[64];

    if (strcmp(mode, "scan") == 0)
        return scan_rounds(&o);
    if (strcmp(mode, "files") == 0 || strcmp(mode, "read") == 0 || strcmp(mode, "write") == 0) {
        if (dir == NULL) {
            fprintf(stderr, "tier_bench: %s needs --dir\n", mode);
            return 2;
        }
        if (mode[0] == 'w') {
            static mc_tier_wfile_t w;
            for (unsigned i = 0; i < n; i++) {
                snprintf(key, sizeof(key), "%.40s/%u", o.prefix, i);
                memset(buf, (int)(i & 0xff), size);
                struct iovec v = {buf, size};
                mc_status_t st =
                    mc_tier_wopen(dir, key, strlen(key), &v, 1, size, MC_TIER_F_ALIGNED, &w);
                if (st == MC_OK)
                    st = mc_tier_wcommit(&w, 0, 0); /* synced at the end, all at once */
                if (st != MC_OK) {
                    fprintf(stderr, "tier_bench: write %s: %s\n", key, mc_status_str(st));
                    return 1;
                }
            }
            sync();
            return 0;
        }
        if (mode[0] == 'f') {
            for (unsigned i = 0; i < n; i++) {
                char rel[MC_TIER_REL_MAX];
                snprintf(key, sizeof(key), "%.40s/%u", o.prefix, i);
                mc_tier_rel_path(key, strlen(key), 0, rel);
                printf("%s/%s\n", dir, rel);
            }
            return 0;
        }
        for (unsigned r = 0; r < rounds; r++) {
            uint64_t t0 = mc_now_us();
            for (unsigned i = 0; i < n; i++) {
                snprintf(key, sizeof(key), "%.40s/%u", o.prefix, i);
                uint64_t got = 0;
                mc_status_t st = mc_tier_read(dir, key, strlen(key), buf, size, size, &got);
                if (st != MC_OK || got != size) {
                    fprintf(stderr, "tier_bench: read %s: %s\n", key, mc_status_str(st));
                    return 1;
                }
            }
            double s = (double)(mc_now_us() - t0) / 1e6;
            double gbs = (double)size * n / s / 1e9;
            printf("read  %u x %llu B  round %u  %.3f GB/s\n", n, (unsigned long long)size, r, gbs);
            printf("csv,tier_bench,read,%llu,%u,%u,%.4f\n", (unsigned long long)size, n, r, gbs);
            if (run_between(o.between, r) != 0)
                return 1;
        }
        return 0;
    }

    mc_store_t *s = open_store(master, colocated ? o.service : NULL);
    if (colocated && mc_store_register_buffer(s, buf, size * depth) != MC_OK) {
        fprintf(stderr, "tier_bench: cannot register the shared buffers with the service\n");
        return 1;
    }
    if (!colocated && o.reg && strcmp(mode, "get") == 0 &&
        mc_store_register_buffer(s, buf, size * depth) != MC_OK) {
        fprintf(stderr, "tier_bench: cannot register the buffers with the client\n");
        return 1;
    }
    if (strcmp(mode, "put") == 0) {
        uint64_t refused = 0, t_pass = 0;
        for (unsigned pass = o.warm ? 0 : 1; pass <= 1; pass++) {
            if (pass == 1 && o.warm && run_between(o.between, 0) != 0)
                return 1;
            t_pass = mc_now_us();
            refused = 0;
            for (unsigned i = 0; i < n; i++) {
                snprintf(key, sizeof(key), pass == 0 ? "%.40s-warm/%u" : "%.40s/%u", o.prefix, i);
                fill(buf, size, i);
                mc_status_t st = MC_ERR_NO_AVAILABLE_HANDLE;
                uint64_t give_up = mc_now_us() + 4000000; /* as 200 tries 20 ms apart did */
                while (st == MC_ERR_NO_AVAILABLE_HANDLE) {
                    st = mc_store_put(s, key, strlen(key), buf, size, NULL);
                    if (st != MC_ERR_NO_AVAILABLE_HANDLE || mc_now_us() > give_up)
                        break;
                    refused++;
                    usleep((useconds_t)o.retry); /* the pool is full until eviction runs */
                }
                if (st != MC_OK) {
                    fprintf(stderr, "tier_bench: put %s: %s\n", key, mc_status_str(st));
                    return 1;
                }
            }
        }
        double secs = (double)(mc_now_us() - t_pass) / 1e6;
        printf("put %u x %llu B (eager); %llu refused for a full pool, tried again after %llu us\n",
               n, (unsigned long long)size, (unsigned long long)refused,
               (unsigned long long)o.retry);
        printf("put pass: %.6f s\n", secs);
    } else if (strcmp(mode, "get") == 0) {
        mc_store_replica_t rep[8];
        uint32_t nr = 0;
        snprintf(key, sizeof(key), "%.40s/0", o.prefix);
        if (mc_store_query(s, key, strlen(key), rep, 8, &nr) == MC_OK)
            printf("%s: %u replica(s), first is %s\n", key, nr,
                   nr > 0 && rep[0].disk ? "DISK" : "MEMORY");
        /* the XXH3 of every value, so a read is checked without filling it again */
        uint64_t *sums = malloc(n * sizeof(*sums));
        if (sums == NULL)
            return 1;
        for (unsigned i = 0; i < n; i++) {
            fill(want, size, i);
            sums[i] = mc_hash64(want, size);
        }
        win_t w = {.n = depth};
        pthread_mutex_init(&w.mu, NULL);
        pthread_cond_init(&w.cv, NULL);
        slot_t slots[64];
        for (unsigned j = 0; j < depth; j++)
            slots[j] = (slot_t){.w = &w, .buf = buf + (size_t)j * size, .idx = -1};
        uint8_t *wants = malloc((size_t)n * size); /* the samples' bytes (check_get) */
        if (wants == NULL) {
            fprintf(stderr, "tier_bench: no memory for %u x %llu B of expected bytes\n", n,
                    (unsigned long long)size);
            return 1;
        }
        for (unsigned i = 0; i < n; i++)
            fill(wants + (size_t)i * size, size, i);
        for (unsigned r = 0; r < rounds && o.sync; r++) {
            unsigned lease_retries = 0;
            double gbs =
                sync_round(s, o.prefix, buf, size, sums, wants, r == 0, n, depth, &lease_retries);
            if (gbs < 0)
                return 1;
            printf("get   %u x %llu B  round %u  %.3f GB/s  (%u read again: lease expired; "
                   "sync, %u threads)\n",
                   n, (unsigned long long)size, r, gbs, lease_retries, depth);
            printf("csv,tier_bench,get,%llu,%u,%u,%.4f,%u\n", (unsigned long long)size, n, r, gbs,
                   lease_retries);
            if (run_between(o.between, r) != 0)
                return 1;
        }
        for (unsigned r = 0; r < rounds && !o.sync; r++) {
            uint64_t t0 = mc_now_us(), tcheck = 0;
            unsigned lease_retries = 0;
            /* keep depth gets in flight: a finished slot is checked and reused */
            for (unsigned i = 0, done = 0; done < n;) {
                slot_t *sl = NULL;
                pthread_mutex_lock(&w.mu);
                while (w.inflight == depth || (i == n && w.nfinished == 0))
                    pthread_cond_wait(&w.cv, &w.mu);
                if (w.nfinished > 0)
                    sl = w.finished[--w.nfinished];
                pthread_mutex_unlock(&w.mu);
                if (sl != NULL && sl->res == MC_ERR_LEASE_EXPIRED && lease_retries < n) {
                    /* the read outlived its lease (a busy machine): its
                     * bytes are not used; read it again, counted */
                    lease_retries++;
                    pthread_mutex_lock(&w.mu);
                    w.inflight++;
                    pthread_mutex_unlock(&w.mu);
                    int64_t st =
                        mc_store_get_async(s, sl->key, strlen(sl->key), sl->buf, size, got_one, sl);
                    if (st != MC_OK && st != MC_INPROGRESS)
                        got_one(sl, st);
                    continue;
                }
                if (sl != NULL) {
                    uint64_t c0 = mc_now_us();
                    if (sl->res != (int64_t)size) {
                        fprintf(stderr, "tier_bench: get %.40s/%d: %s\n", o.prefix, sl->idx,
                                sl->res < 0 ? mc_status_str((mc_status_t)sl->res) : "short");
                        return 1;
                    }
                    if (!check_get(sl->buf, size, (unsigned)sl->idx, sums, wants, r == 0)) {
                        fprintf(stderr, "tier_bench: get %.40s/%d: wrong bytes\n", o.prefix,
                                sl->idx);
                        return 1;
                    }
                    if (depth == 1) /* nothing ran meanwhile (check_get) */
                        tcheck += mc_now_us() - c0;
                    sl->idx = -1;
                    done++;
                }
                for (unsigned j = 0; j < depth && i < n; j++) {
                    if (slots[j].idx >= 0)
                        continue;
                    slots[j].idx = (int)i;
                    snprintf(slots[j].key, sizeof(slots[j].key), "%.40s/%u", o.prefix, i++);
                    pthread_mutex_lock(&w.mu);
                    w.inflight++;
                    pthread_mutex_unlock(&w.mu);
                    int64_t st = mc_store_get_async(s, slots[j].key, strlen(slots[j].key),
                                                    slots[j].buf, size, got_one, &slots[j]);
                    if (st != MC_OK && st != MC_INPROGRESS)
                        got_one(&slots[j], st);
                }
            }
            double sec = (double)(mc_now_us() - t0 - tcheck) / 1e6;
            double gbs = (double)size * n / sec / 1e9;
            printf("get   %u x %llu B  round %u  %.3f GB/s  (%u read again: lease expired)\n", n,
                   (unsigned long long)size, r, gbs, lease_retries);
            printf("csv,tier_bench,get,%llu,%u,%u,%.4f,%u\n", (unsigned long long)size, n, r, gbs,
                   lease_retries);
            if (run_between(o.between, r) != 0)
                return 1;
        }
        free(wants);
        if (o.stages[0] != '\0') {
            mc_buf_t b = MC_BUF_INIT;
            mc_node_get_load_stages(s, &b);
            FILE *f = fopen(o.stages, "w");
            int bad =
                f == NULL || fwrite(mc_buf_head(&b), 1, mc_buf_used(&b), f) != mc_buf_used(&b);
            if ((f != NULL && fclose(f) != 0) || bad) {
                fprintf(stderr, "tier_bench: cannot write %s\n", o.stages);
                return 1;
            }
            mc_buf_fini(&b);
        }
    } else {
        fprintf(stderr, "tier_bench: unknown mode '%s'\n", mode);
        return 2;
    }
    mc_store_close(s);
    if (colocated)
        mc_store_shared_free(buf);
    else
        free(buf);
    free(want);
    return 0;
}
