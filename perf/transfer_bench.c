/*
 * transfer_bench - transfer engine throughput and latency, in the spirit of
 * upstream's transfer_engine_bench / tebench.
 *
 *   transfer_bench [--mode target|initiator] [--protocol tcp|local|rdma]
 *                  [--operation read|write[,..]] [--block_size 64K[,..]]
 *                  [--batch_size 128[,..]] [--threads 1[,..]] [--duration 5]
 *                  [--warmup 1] [--reps 3] [--buffer_size 1G] [--segment HOST:PORT]
 *                  [--port 0] [--host 127.0.0.1] [--reactors 0] [--tcp_lanes N]
 *                  [--slice_size N] [--secret_file FILE] [--check] [--csv FILE] [--sweep]
 *                  [--device LIST] [--nic_priority_matrix JSON] [--emulated N]
 *                  [--nics N[,..]] [--emu_bandwidth BYTES/S] [--emu_delay_us N]
 *                  [--gpu N]
 *
 * Modes:
 *  - target: an engine (p2p metadata) with --buffer_size registered; prints
 *    "segment HOST:PORT" on stdout, then serves until SIGTERM/SIGINT.
 *  - initiator (the default when --segment is given): opens the segment and
 *    measures.
 *  - neither given: both. A target child process is forked first (before any
 *    thread exists), its segment line is read from a pipe, then this process
 *    runs the initiator: one command measures cross-process TCP.
 *  - --protocol local: the target is this process's own segment
 *    (MC_TE_LOCAL_SEGMENT, memcpy transport) between two registered buffers;
 *    plain memcpy over the same buffers, regions and pattern is measured in the
 *    same run for comparison.
 *  - --protocol rdma: both sides install the rdma transport (real NICs, or
 *    --emulated N emulated NICs: for tests and demos only, data moves over
 *    unix sockets, optionally capped at --emu_bandwidth bytes/s per NIC and
 *    delayed by --emu_delay_us per WR). --device keeps only the named NICs,
 *    --nic_priority_matrix replaces the discovered matrix. --nics 1,2,4 runs
 *    every point once per initiator NIC count (the first N NICs; the target
 *    keeps all of them): a column of the table and of the CSV.
 *  - --gpu N: this process's buffers (the target's, the initiator's, or
 *    both when it runs both) are memory of GPU N, allocated through the CUDA
 *    driver (cuMemAlloc) and registered as cuda:N; with --protocol rdma only:
 *    GPUDirect (dma-buf or nvidia-peermem, the log says which). Not with
 *    --check or --cold (the CPU cannot touch it).
 *
 * Every point (operation x threads x block x batch) runs --reps times; the
 * median run (by GB/s) is reported. Each run: all threads warm up (--warmup
 * seconds before the first run of a point, 0.2 s before the others), meet at
 * a barrier, then loop for --duration seconds: allocate a batch, submit batch
 * requests of block bytes, wait, free. Thread t works on its own disjoint
 * region of the local and of the target buffer.
 *
 * Figures (as upstream's transfer_engine_bench): GB/s is decimal (1e9) bytes moved over the mean
 * per-thread wall time of the timed loop; requests/s likewise; latency is per
 * batch, submit to completion, in µs (p50/p99/p999 interpolated over every
 * sample of every thread). Output: a table, "csv,transfer_bench,..." lines,
 * and with --csv FILE the same rows appended to FILE (header when new).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mooncake/transfer.h"
#include "transport/cuda.h"       /* --gpu: GPU memory through the CUDA driver */
#include "transport/rdma/verbs.h" /* --emulated, --nics: the provider's device list */
#include "transport/te.h"
#include "perf/bench_opt.h"
#include "perf/bench_proc.h"
#include "util/conf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MAX_THREADS 64
#define MAX_LIST 16
#define MAX_BATCH 4096
#define WAIT_TIMEOUT_US 120000000ull /* a batch that takes longer is a failure */
#define SHORT_WARMUP_S 0.2           /* before the second and later runs of a point */

enum { MODE_BOTH, MODE_TARGET, MODE_INITIATOR };
enum { PROTO_TCP, PROTO_LOCAL, PROTO_RDMA, PROTO_SHM };

typedef struct cfg {
    int mode, mode_set;
    int proto;
    int ops[2];
    unsigned nops;
    uint64_t blocks[MAX_LIST];
    unsigned nblocks;
    uint64_t batches[MAX_LIST];
    unsigned nbatches;
    uint64_t threads[MAX_LIST];
    unsigned nthreads;
    double duration, warmup;
    int duration_set;
    unsigned reps;
    uint64_t buffer_size;
    const char *segment;
    unsigned port;
    const char *host;
    unsigned reactors, tcp_lanes;
    uint64_t slice_size;
    const char *secret_file; /* authenticate every connection (both processes) */
    int check, sweep, cold;
    const char *csv;
    /* rdma */
    const char *device, *matrix;
    unsigned emulated;
    uint64_t nics[MAX_LIST];
    unsigned nnics;
    unsigned nic_cur; /* the initiator's NIC count for this pass; 0 = all */
    uint64_t emu_bw, emu_delay_us;
    int gpu; /* --gpu N: buffers in GPU N's memory; -1 host */
} cfg_t;

/* ------------------------------------------------------------- parsing */

static const char *human(uint64_t v, char *buf, size_t len)
{
    if (v >= (1ull << 30) && v % (1ull << 30) == 0)
        snprintf(buf, len, "%" PRIu64 "GiB", v >> 30);
    else if (v >= (1ull << 20) && v % (1ull << 20) == 0)
        snprintf(buf, len, "%" PRIu64 "MiB", v >> 20);
    else if (v >= (1ull << 10) && v % (1ull << 10) == 0)
        snprintf(buf, len, "%" PRIu64 "KiB", v >> 10);
    else
        snprintf(buf, len, "%" PRIu64 "B", v);
    return buf;
}

/* The command line (perf/bench_opt.h); cfg_t is built from it. */
typedef struct opts {
    int mode, proto;
    char *operation, *block_size, *batch_size, *threads, *nics; /* comma lists */
    double duration, warmup;
    uint64_t reps, buffer_size, port, reactors, tcp_lanes, slice_size;
    char *segment, *host, *secret_file, *csv, *device, *matrix;
    bool check, sweep, cold;
    uint64_t emulated, emu_bw, emu_delay_us;
    int64_t gpu;
} opts_t;

static const char *const mode_names[] = {"auto", "target", "initiator", NULL};
static const char *const proto_names[] = {"tcp", "local", "rdma", "shm", NULL};

/* tcp_lanes and slice_size default to the engine's (set in parse_args). */
static mc_conf_key_t opt_rows[] = {
    MC_CONF_ENUM_ROW(opts_t, mode, "mode", mode_names, "auto",
                     "auto: initiator with --segment, else a forked target and the initiator"),
    MC_CONF_ENUM_ROW(opts_t, proto, "protocol", proto_names, "tcp", "the transport measured"),
    MC_CONF_ROW(opts_t, operation, "operation", MC_CONF_STRING, "read", 0, 0,
                "read, write or read,write"),
    MC_CONF_ROW(opts_t, block_size, "block_size", MC_CONF_STRING, "64K", 0, 0,
                "bytes per request, a comma list of sizes (1..4GiB)"),
    MC_CONF_ROW(opts_t, batch_size, "batch_size", MC_CONF_STRING, "128", 0, 0,
                "requests per batch, a comma list (1..4096)"),
    MC_CONF_ROW(opts_t, threads, "threads", MC_CONF_STRING, "1", 0, 0,
                "initiator threads, a comma list (1..64)"),
    MC_CONF_ROW(opts_t, duration, "duration", MC_CONF_DOUBLE, "5", 0.05, 3600,
                "seconds per run (2 with --sweep unless given)"),
    MC_CONF_ROW(opts_t, warmup, "warmup", MC_CONF_DOUBLE, "1", 0, 600,
                "seconds of warm-up before a point's first run"),
    MC_CONF_ROW(opts_t, reps, "reps", MC_CONF_UINT, "3", 1, 99,
                "runs per point (the median counts)"),
    MC_CONF_ROW(opts_t, buffer_size, "buffer_size", MC_CONF_SIZE, "1G", 4096, 1099511627776.0,
                "bytes of each side's buffer"),
    MC_CONF_ROW(opts_t, segment, "segment", MC_CONF_STRING, "", 0, 0,
                "HOST:PORT of a target (what --mode target printed)"),
    MC_CONF_ROW(opts_t, port, "port", MC_CONF_UINT, "0", 0, 65535, "the target's port (0: any)"),
    MC_CONF_ROW(opts_t, host, "host", MC_CONF_STRING, "127.0.0.1", 0, 0,
                "the address this engine announces"),
    MC_CONF_ROW(opts_t, reactors, "reactors", MC_CONF_UINT, "0", 0, 64,
                "the engine's reactors (0: its default)"),
    MC_CONF_ROW(opts_t, tcp_lanes, "tcp_lanes", MC_CONF_UINT, NULL, 1, TE_MAX_LANES,
                "TCP connections per peer"),
    MC_CONF_ROW(opts_t, slice_size, "slice_size", MC_CONF_SIZE, NULL, 4096, 1073741824.0,
                "bytes per slice of a request"),
    MC_CONF_ROW(opts_t, secret_file, "secret_file", MC_CONF_STRING, "", 0, 0,
                "authenticate every connection with this secret (both processes)"),
    MC_CONF_ROW(opts_t, check, "check", MC_CONF_BOOL, "false", 0, 0,
                "verify the bytes moved (a pattern per run)"),
    MC_CONF_ROW(opts_t, csv, "csv", MC_CONF_STRING, "", 0, 0,
                "append the rows to this CSV file (header when new)"),
    MC_CONF_ROW(opts_t, sweep, "sweep", MC_CONF_BOOL, "false", 0, 0,
                "blocks 4KiB..64MiB (x4) by batches 1,16,128 unless given, 2 s each; "
                "rdma: also over NIC counts 1,2,4.."),
    MC_CONF_ROW(opts_t, cold, "cold", MC_CONF_BOOL, "false", 0, 0,
                "every batch moves to fresh memory of the thread's share (no cache-hot repeats)"),
    MC_CONF_ROW(opts_t, device, "device", MC_CONF_STRING, "", 0, 0,
                "rdma: keep only these NICs (comma list)"),
    MC_CONF_ROW(opts_t, matrix, "nic_priority_matrix", MC_CONF_STRING, "", 0, 0,
                "rdma: JSON that replaces the discovered topology matrix"),
    MC_CONF_ROW(opts_t, emulated, "emulated", MC_CONF_UINT, "0", 0, RV_MAX_DEVICES,
                "rdma: N emulated NICs (tests and demos only; 0: real NICs)"),
    MC_CONF_ROW(opts_t, nics, "nics", MC_CONF_STRING, "", 0, 0,
                "rdma: run every point per initiator NIC count, a comma list"),
    MC_CONF_ROW(opts_t, emu_bw, "emu_bandwidth", MC_CONF_SIZE, "0", 0, 1099511627776.0,
                "rdma --emulated: bytes/s per NIC (0: uncapped)"),
    MC_CONF_ROW(opts_t, emu_delay_us, "emu_delay_us", MC_CONF_UINT, "0", 0, 10000000,
                "rdma --emulated: microseconds of delay per WR"),
    MC_CONF_ROW(opts_t, gpu, "gpu", MC_CONF_INT, "-1", -1, TE_CUDA_MAX_GPUS - 1,
                "the buffers are GPU N's memory (CUDA driver; rdma: GPUDirect; -1: host)"),
};

static const char usage_text[] =
    "usage: transfer_bench [options]\n"
    "transfer engine GB/s, requests/s and batch latency. With no --mode and no --segment a\n"
    "target process is forked and measured against. --protocol shm: the target's buffer is\n"
    "shared memory (mc_te_alloc_shared) reached over the shm transport, and each point also\n"
    "runs plain memcpy of the same sizes between two local buffers (interleaved, as\n"
    "--protocol local does). Sizes take units (64K, 1MiB).";

/* --operation: read, write or both, in the order given. */
static int parse_ops(const char *s, cfg_t *c)
{
    c->nops = 0;
    for (const char *p = s; *p != '\0' || c->nops == 0;) {
        size_t len = strcspn(p, ",");
        int op = len == 4 && strncmp(p, "read", 4) == 0    ? MC_TE_READ
                 : len == 5 && strncmp(p, "write", 5) == 0 ? MC_TE_WRITE
                                                           : -1;
        if (op < 0 || c->nops == 2) {
            fprintf(stderr, "transfer_bench: --operation is read, write or read,write, got '%s'\n",
                    s);
            return -1;
        }
        c->ops[c->nops++] = op;
        p += len + (p[len] == ',');
    }
    return 0;
}

/* The comma lists into c; 0 or -1 (said). */
static int parse_lists(const opts_t *o, cfg_t *c)
{
    if (parse_ops(o->operation, c) != 0 ||
        (c->nblocks =
             bench_list("block_size", o->block_size, 1, 1, 1ull << 32, c->blocks, MAX_LIST)) == 0 ||
        (c->nbatches =
             bench_list("batch_size", o->batch_size, 0, 1, MAX_BATCH, c->batches, MAX_LIST)) == 0 ||
        (c->nthreads =
             bench_list("threads", o->threads, 0, 1, MAX_THREADS, c->threads, MAX_LIST)) == 0)
        return -1;
    c->nnics = 0;
    if (o->nics[0] != '\0' &&
        (c->nnics = bench_list("nics", o->nics, 0, 1, RV_MAX_DEVICES, c->nics, MAX_LIST)) == 0)
        return -1;
    return 0;
}

static const char *opt_str(const char *s)
{
    return s[0] != '\0' ? s : NULL;
}

/* cfg_t from the rows, before the checks across flags. */
static int opts_to_cfg(const opts_t *o, cfg_t *c)
{
    *c = (cfg_t){.mode = o->mode == 1 ? MODE_TARGET : MODE_INITIATOR,
                 .mode_set = o->mode != 0,
                 .proto = o->proto,
                 .duration = o->duration,
                 .warmup = o->warmup,
                 .duration_set = bench_opt_given("duration"),
                 .reps = (unsigned)o->reps,
                 .buffer_size = o->buffer_size,
                 .segment = opt_str(o->segment),
                 .port = (unsigned)o->port,
                 .host = o->host,
                 .reactors = (unsigned)o->reactors,
                 .tcp_lanes = (unsigned)o->tcp_lanes,
                 .slice_size = o->slice_size,
                 .secret_file = opt_str(o->secret_file),
                 .check = o->check,
                 .sweep = o->sweep,
                 .cold = o->cold,
                 .csv = opt_str(o->csv),
                 .device = opt_str(o->device),
                 .matrix = opt_str(o->matrix),
                 .emulated = (unsigned)o->emulated,
                 .emu_bw = o->emu_bw,
                 .emu_delay_us = o->emu_delay_us,
                 .gpu = (int)o->gpu};
    return parse_lists(o, c);
}

/* The checks across flags; 0, or -1 (said). */
static int check_cfg(cfg_t *c)
{
    if (!c->mode_set)
        c->mode = c->segment != NULL ? MODE_INITIATOR : MODE_BOTH;
    if (c->mode == MODE_TARGET && c->segment != NULL) {
        fprintf(stderr, "transfer_bench: --segment names the target to measure against; a "
                        "target (--mode target) takes none\n");
        return -1;
    }
    if (c->proto != PROTO_RDMA &&
        (c->device || c->matrix || c->emulated || c->nnics || c->emu_bw || c->emu_delay_us)) {
        fprintf(stderr, "transfer_bench: --device, --nic_priority_matrix, --emulated, --nics and "
                        "--emu_* go with --protocol rdma\n");
        return -1;
    }
    if (c->gpu >= 0 && c->proto != PROTO_RDMA) {
        fprintf(stderr, "transfer_bench: --gpu goes with --protocol rdma (GPUDirect): tcp and "
                        "shm do not move GPU memory, local compares with a CPU memcpy\n");
        return -1;
    }
    if (c->gpu >= 0 && (c->check || c->cold)) {
        fprintf(stderr, "transfer_bench: --gpu: not with --check or --cold (the CPU cannot "
                        "touch GPU memory)\n");
        return -1;
    }
    if ((c->emu_bw || c->emu_delay_us) && c->emulated == 0) {
        fprintf(stderr, "transfer_bench: --emu_bandwidth and --emu_delay_us need --emulated N\n");
        return -1;
    }
    for (unsigned i = 0; i < c->nnics; i++) {
        if (c->emulated && c->nics[i] > c->emulated) {
            fprintf(stderr, "transfer_bench: --nics %" PRIu64 " is more than --emulated %u\n",
                    c->nics[i], c->emulated);
            return -1;
        }
    }
    if (c->nnics > 0 && (c->device != NULL || c->matrix != NULL)) {
        fprintf(stderr, "transfer_bench: --nics picks the first N NICs itself: not with --device "
                        "or --nic_priority_matrix\n");
        return -1;
    }
    if (c->mode == MODE_INITIATOR && c->proto != PROTO_LOCAL && c->segment == NULL) {
        fprintf(stderr, "transfer_bench: --mode initiator needs --segment HOST:PORT (what the "
                        "target printed)\n");
        return -1;
    }
    if (c->proto == PROTO_LOCAL && (c->segment != NULL || c->mode == MODE_TARGET)) {
        fprintf(stderr, "transfer_bench: --protocol local runs in one process: no --segment, "
                        "no --mode target\n");
        return -1;
    }
    if (c->proto == PROTO_LOCAL)
        c->mode = MODE_INITIATOR;
    if (c->cold && c->check) {
        fprintf(stderr, "transfer_bench: --check verifies fixed places: not with --cold\n");
        return -1;
    }
    return 0;
}

/* --sweep's points, where the flags did not name them. */
static void sweep_points(cfg_t *c)
{
    static const uint64_t sb[] = {4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
    static const uint64_t sn[] = {1, 16, 128};
    if (!bench_opt_given("block_size")) {
        memcpy(c->blocks, sb, sizeof(sb));
        c->nblocks = MC_ARRAY_SIZE(sb);
    }
    if (!bench_opt_given("batch_size")) {
        memcpy(c->batches, sn, sizeof(sn));
        c->nbatches = MC_ARRAY_SIZE(sn);
    }
    if (!c->duration_set)
        c->duration = 2;
    if (c->proto == PROTO_RDMA && c->nnics == 0 && c->emulated > 0) {
        for (unsigned k = 1; k <= c->emulated && c->nnics < MAX_LIST; k *= 2)
            c->nics[c->nnics++] = k;
    }
}

/* 0: run; 1: --help or --dump-config answered; 2: a bad command line (said). */
static int parse_args(int argc, char **argv, cfg_t *c)
{
    mc_te_opts_t d;
    mc_te_opts_init(&d);
    static char lanes[24], slice[24]; /* the rows point at them */
    snprintf(lanes, sizeof(lanes), "%u", d.tcp_lanes);
    snprintf(slice, sizeof(slice), "%" PRIu64, (uint64_t)d.slice_size);
    for (size_t i = 0; i < MC_ARRAY_SIZE(opt_rows); i++) {
        if (strcmp(opt_rows[i].name, "tcp_lanes") == 0)
            opt_rows[i].def = lanes;
        else if (strcmp(opt_rows[i].name, "slice_size") == 0)
            opt_rows[i].def = slice;
    }
    static opts_t o; /* its strings live as long as the program */
    int rc = bench_opts_parse(usage_text, opt_rows, MC_ARRAY_SIZE(opt_rows), &o, argc, argv);
    if (rc != 0)
        return rc;
    if (opts_to_cfg(&o, c) != 0 || check_cfg(c) != 0)
        return 2;
    if (c->sweep)
        sweep_points(c);
    return 0;
}

/* -------------------------------------------------------------- engine */

/* The process's buffers: GPU memory with --gpu, else anonymous memory. */
static int g_gpu = -1;

static void *alloc_buffer(uint64_t len)
{
    if (g_gpu >= 0) {
        void *d = NULL;
        if (te_cuda_alloc(g_gpu, len, &d) != MC_OK) {
            fprintf(stderr, "transfer_bench: cannot allocate %" PRIu64 " bytes on GPU %d (%s)\n",
                    len, g_gpu, te_cuda_gpus(NULL) ? "see the log" : "no CUDA driver or GPU");
            return NULL;
        }
        return d;
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "transfer_bench: cannot map %" PRIu64 " bytes: %s\n", len, strerror(errno));
        return NULL;
    }
    /* Huge pages when THP is in madvise mode: fewer TLB misses for memcpy and
     * for the kernel's copies alike (both sides of the comparison share it). */
    madvise(p, len, MADV_HUGEPAGE);
    return p;
}

static void free_buffer(void *p, uint64_t len)
{
    if (p == NULL)
        return;
    if (g_gpu >= 0)
        te_cuda_free(p);
    else
        munmap(p, len);
}

/* Where the buffers are, for registration. */
static const char *buffer_location(char *buf, size_t len)
{
    if (g_gpu < 0)
        return "cpu:0";
    snprintf(buf, len, "cuda:%d", g_gpu);
    return buf;
}

static mc_te_t *make_engine(const cfg_t *c, uint16_t port, const char *listen)
{
    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.metadata = "p2p";
    o.listen_host = listen;
    o.listen_port = port;
    o.advertise_host = c->host;
    o.reactors = c->reactors;
    o.tcp_lanes = c->tcp_lanes;
    o.slice_size = c->slice_size;
    o.secret_file = c->secret_file;
    char devs[RV_MAX_DEVICES * RV_NAME_MAX] = "";
    if (c->proto == PROTO_RDMA) {
        o.rdma_emulated = c->emulated;
        o.rdma_matrix = c->matrix;
        o.rdma_devices = c->device;
        if (c->nic_cur > 0) { /* the first nic_cur NICs the provider lists */
            rv_dev_info_t d[RV_MAX_DEVICES];
            const mc_rdma_verbs_ops_t *v = c->emulated ? &rv_emu_ops : &rv_real_ops;
            rv_port_opts_t po;
            rv_port_opts_init(&po);
            int n = v->get_devices(&po, d, RV_MAX_DEVICES);
            for (int i = 0; i < n && (unsigned)i < c->nic_cur; i++) {
                if (i > 0)
                    strcat(devs, ",");
                strcat(devs, d[i].name);
            }
            o.rdma_devices = devs;
        }
    }
    mc_te_t *te = NULL;
    mc_status_t st = mc_te_create(&o, &te);
    if (st != MC_OK) {
        fprintf(stderr, "transfer_bench: cannot start the transfer engine: %s\n",
                mc_status_str(st));
        return NULL;
    }
    if (c->proto == PROTO_RDMA && (st = mc_te_install_transport(te, "rdma")) != MC_OK) {
        fprintf(stderr,
                "transfer_bench: cannot install the rdma transport: %s (the log above "
                "says why; --emulated N runs on emulated NICs)\n",
                mc_status_str(st));
        mc_te_destroy(te);
        return NULL;
    }
    return te;
}

/*
 * The target's largest buffer. transfer.h has no descriptor accessor yet
 * (upstream has getSegmentDescByID); transport/te.h lists a segment's
 * buffers as last described.
 */
static int remote_buffer(mc_te_t *te, mc_te_segment_t id, uint64_t *addr, uint64_t *len)
{
    te_range_t bufs[64];
    size_t n = te_segment_buffers(te, id, bufs, 64);
    *addr = *len = 0;
    for (size_t i = 0; i < n && i < 64; i++)
        if (bufs[i].len > *len) {
            *addr = bufs[i].addr;
            *len = bufs[i].len;
        }
    return *len > 0 ? 0 : -1;
}

/* Serve a segment of --buffer_size until SIGTERM/SIGINT; announce its name
 * as "segment HOST:PORT\n" on fd. Exit status. */
static int run_target(const cfg_t *c, int fd, const char *listen)
{
    int rc = 1;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before the engine's threads inherit it */
    mc_te_t *te = make_engine(c, (uint16_t)c->port, listen);
    if (te == NULL)
        return 1;
    void *buf = NULL;
    char hb[32];
    mc_status_t st;
    if (c->proto == PROTO_SHM) {
        /* shared memory: peers on this host map it (freed with the engine) */
        if ((st = mc_te_alloc_shared(te, c->buffer_size, 0, &buf)) != MC_OK) {
            fprintf(stderr, "transfer_bench: cannot allocate %s of shared memory: %s\n",
                    human(c->buffer_size, hb, sizeof(hb)), mc_status_str(st));
            goto out_destroy;
        }
        madvise(buf, c->buffer_size, MADV_HUGEPAGE); /* as alloc_buffer's */
    } else if ((buf = alloc_buffer(c->buffer_size)) == NULL) {
        goto out_destroy;
    }
    char loc[24];
    st = mc_te_register(te, buf, c->buffer_size, buffer_location(loc, sizeof(loc)), 1);
    if (st != MC_OK) {
        fprintf(stderr, "transfer_bench: cannot register the target buffer: %s\n",
                mc_status_str(st));
        goto out_unmap;
    }
    char line[320];
    int n = snprintf(line, sizeof(line), "segment %s\n", mc_te_local_name(te));
    if (write(fd, line, (size_t)n) != n)
        goto out_unmap;
    if (c->mode == MODE_TARGET) {
        char b[32];
        fprintf(stderr,
                "transfer_bench: target serving %s at %s; run initiators with "
                "`transfer_bench --segment %s ...`; SIGTERM or ^C stops\n",
                human(c->buffer_size, b, sizeof(b)), mc_te_local_name(te), mc_te_local_name(te));
    }
    int sig;
    sigwait(&set, &sig);
    rc = 0;
out_unmap:
    mc_te_destroy(te); /* before the memory it serves goes (shared memory with it) */
    te = NULL;
    if (c->proto != PROTO_SHM)
        free_buffer(buf, c->buffer_size);
out_destroy:
    mc_te_destroy(te);
    return rc;
}

/* The forked target (bench_proc.h): announces "segment NAME". */
static int target_child(void *arg, int fd)
{
    return run_target(arg, fd, "127.0.0.1");
}

/* Fork the target; its segment name into name. The child's pid, or -1. */
static pid_t fork_target(const cfg_t *c, char *name, size_t len)
{
    char line[320];
    pid_t pid = bench_fork("transfer_bench", target_child, (void *)c, line, sizeof(line), 60000);
    if (pid < 0)
        return -1;
    if (strncmp(line, "segment ", 8) != 0) {
        fprintf(stderr, "transfer_bench: the target process said '%s', not its segment\n", line);
        bench_reap(pid);
        return -1;
    }
    snprintf(name, len, "%s", line + 8);
    return pid;
}

/* ------------------------------------------------------------- a run */

typedef struct point {
    int op;
    uint64_t block;
    unsigned batch, threads;
    int use_memcpy; /* the plain-memcpy comparison (local and shm protocols) */
} point_t;

typedef struct result {
    double gbps, reqs_per_s;
    double p50, p99, p999; /* µs per batch */
    double avg_lat;        /* µs: wall time x threads / batches */
} result_t;

typedef struct run run_t;

typedef struct worker {
    pthread_t th;
    run_t *run;
    unsigned tid;
    uint8_t *local;  /* this thread's region, local side */
    uint64_t remote; /* and target side (an address in the target) */
    uint64_t region; /* bytes of each */
    uint64_t off;    /* --cold: where the next batch goes in the region */
    mc_te_request_t *reqs;
    uint64_t *lat_ns;
    size_t nlat, cap;
    uint64_t t_start, t_end;
} worker_t;

struct run {
    mc_te_t *te;
    mc_te_segment_t seg;
    point_t pt;
    uint64_t salt; /* makes each run's check pattern different */
    int check, cold;
    uint64_t warm_end_ns;
    uint64_t dur_ns;
    _Atomic uint64_t stop_ns;
    pthread_barrier_t bar;
    _Atomic int failed;
    pthread_mutex_t err_mu;
    char err[256];
};

static void run_fail(run_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void run_fail(run_t *r, const char *fmt, ...)
{
    pthread_mutex_lock(&r->err_mu);
    if (!atomic_exchange(&r->failed, 1)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, sizeof(r->err), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&r->err_mu);
}

/* One batch: the requests in w->reqs (with opcode op). Latency in ns, or 0
 * after a failure (recorded in the run). */
static uint64_t one_batch(worker_t *w, int op)
{
    run_t *r = w->run;
    const point_t *pt = &r->pt;
    uint64_t off = 0;
    if (r->cold) {
        uint64_t span = pt->block * pt->batch;
        w->off = w->off + 2 * span <= w->region ? w->off + span : 0;
        off = w->off;
        for (unsigned i = 0; i < pt->batch && !pt->use_memcpy; i++) {
            w->reqs[i].local = w->local + off + i * pt->block;
            w->reqs[i].remote = w->remote + off + i * pt->block;
        }
    }
    if (pt->use_memcpy) {
        uint64_t t0 = mc_now_ns();
        for (unsigned i = 0; i < pt->batch; i++) {
            uint8_t *l = w->local + off + i * pt->block;
            uint8_t *t = (uint8_t *)(uintptr_t)(w->remote + off + i * pt->block);
            if (op == MC_TE_WRITE)
                memcpy(t, l, pt->block);
            else
                memcpy(l, t, pt->block);
        }
        uint64_t d = mc_now_ns() - t0;
        return d ? d : 1;
    }
    for (unsigned i = 0; i < pt->batch; i++)
        w->reqs[i].opcode = op;
    mc_te_batch_t *b = NULL;
    mc_status_t st = mc_te_batch_alloc(r->te, pt->batch, &b);
    if (st != MC_OK) {
        run_fail(r, "thread %u: batch alloc: %s", w->tid, mc_status_str(st));
        return 0;
    }
    uint64_t t0 = mc_now_ns();
    st = mc_te_submit(b, w->reqs, pt->batch);
    if (st == MC_OK)
        st = mc_te_batch_wait(b, WAIT_TIMEOUT_US);
    uint64_t d = mc_now_ns() - t0;
    if (st != MC_OK) {
        run_fail(r, "thread %u: %s of %u x %" PRIu64 " bytes failed: %s", w->tid,
                 op == MC_TE_READ ? "read" : "write", pt->batch, pt->block, mc_status_str(st));
        mc_te_batch_free(b); /* BATCH_BUSY after a wait timeout: then it leaks, and we stop */
        return 0;
    }
    mc_te_batch_free(b);
    return d ? d : 1;
}

/* --check pattern: 64-bit words that depend on the run, thread and offset. */
static uint64_t pattern_word(uint64_t salt, unsigned tid, uint64_t off)
{
    uint64_t x = salt ^ ((uint64_t)tid << 48) ^ off;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static void pattern_fill(uint8_t *p, uint64_t len, uint64_t salt, unsigned tid)
{
    for (uint64_t off = 0; off < len; off += 8) {
        uint64_t wv = pattern_word(salt, tid, off);
        memcpy(p + off, &wv, len - off < 8 ? len - off : 8);
    }
}

/* Offset of the first byte that differs from the pattern, or -1. */
static int64_t pattern_check(const uint8_t *p, uint64_t len, uint64_t salt, unsigned tid)
{
    for (uint64_t off = 0; off < len; off += 8) {
        uint64_t wv = pattern_word(salt, tid, off);
        size_t n = len - off < 8 ? (size_t)(len - off) : 8;
        if (memcmp(p + off, &wv, n) != 0)
            return (int64_t)off;
    }
    return -1;
}

static void record(worker_t *w, uint64_t ns)
{
    if (w->nlat == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 4096;
        uint64_t *n = realloc(w->lat_ns, cap * sizeof(*n));
        if (n == NULL) {
            run_fail(w->run, "out of memory for latency samples");
            return;
        }
        w->lat_ns = n;
        w->cap = cap;
    }
    w->lat_ns[w->nlat++] = ns;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    run_t *r = w->run;
    const point_t *pt = &r->pt;
    uint64_t span = pt->block * pt->batch;
    for (unsigned i = 0; i < pt->batch; i++)
        w->reqs[i] = (mc_te_request_t){.opcode = pt->op,
                                       .local = w->local + i * pt->block,
                                       .segment = r->seg,
                                       .remote = w->remote + i * pt->block,
                                       .length = pt->block};
    /* --check: the target region starts as the pattern (and so does the
     * local one, which writes keep sending); what the timed loop moved is
     * verified after it. */
    if (r->check) {
        pattern_fill(w->local, span, r->salt, w->tid);
        one_batch(w, MC_TE_WRITE);
    }
    while (!atomic_load(&r->failed) && mc_now_ns() < r->warm_end_ns)
        one_batch(w, pt->op);
    if (r->check && pt->op == MC_TE_READ)
        memset(w->local, 0, span); /* the reads must bring the pattern back */

    /* Everyone warmed up: one clock reading sets the common end. */
    if (pthread_barrier_wait(&r->bar) == PTHREAD_BARRIER_SERIAL_THREAD)
        atomic_store(&r->stop_ns, mc_now_ns() + r->dur_ns);
    pthread_barrier_wait(&r->bar);
    uint64_t stop = atomic_load(&r->stop_ns);
    w->t_start = mc_now_ns();
    while (!atomic_load_explicit(&r->failed, memory_order_relaxed) && mc_now_ns() < stop) {
        uint64_t d = one_batch(w, pt->op);
        if (d != 0)
            record(w, d);
    }
    w->t_end = mc_now_ns();

    if (r->check && !atomic_load(&r->failed)) {
        if (pt->op == MC_TE_WRITE) {
            memset(w->local, 0, span); /* read back what the writes left */
            one_batch(w, MC_TE_READ);
        }
        int64_t bad = pattern_check(w->local, span, r->salt, w->tid);
        if (!atomic_load(&r->failed) && bad >= 0)
            run_fail(r,
                     "--check: thread %u: data differs at byte %" PRId64 " of %" PRIu64
                     " (request %" PRIu64 ", offset %" PRIu64 ")",
                     w->tid, bad, span, (uint64_t)bad / pt->block, (uint64_t)bad % pt->block);
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Percentiles: linear interpolation between the closest ranks. */
static double percentile(const uint64_t *sorted, size_t n, double p)
{
    if (n == 0)
        return 0;
    double rank = p / 100.0 * (double)(n - 1);
    size_t idx = (size_t)rank;
    double frac = rank - (double)idx;
    double v = (double)sorted[idx];
    if (idx + 1 < n)
        v = v * (1 - frac) + (double)sorted[idx + 1] * frac;
    return v;
}

/* ---------------------------------------------------------- initiator */

typedef struct bench {
    const cfg_t *c;
    mc_te_t *te;
    mc_te_segment_t seg;
    uint8_t *local; /* registered here */
    uint64_t local_len;
    uint64_t remote; /* the target buffer (own second buffer for local) */
    uint64_t remote_len;
    uint8_t *twin; /* the memcpy comparison's "remote" buffer (local, shm) */
    FILE *csv;
    uint64_t runs; /* counter for check patterns */
    unsigned nics; /* rdma: NICs of the initiator's engine */
} bench_t;

/* Bytes each of n threads gets of both buffers (page multiple). */
static uint64_t region_of(const bench_t *B, unsigned n)
{
    uint64_t m = B->local_len < B->remote_len ? B->local_len : B->remote_len;
    return m / n & ~(uint64_t)4095;
}

/* One timed run of a point. 0, or -1 after a failure (printed). */
static int run_once(bench_t *B, const point_t *pt, double warmup, result_t *out)
{
    static worker_t ws[MAX_THREADS];
    run_t r = {.te = B->te,
               .seg = B->seg,
               .pt = *pt,
               .salt = ++B->runs * 0x9e3779b97f4a7c15ull,
               .check = B->c->check && !pt->use_memcpy,
               .cold = B->c->cold,
               .dur_ns = (uint64_t)(B->c->duration * 1e9)};
    uint64_t region = region_of(B, pt->threads);
    pthread_mutex_init(&r.err_mu, NULL);
    pthread_barrier_init(&r.bar, NULL, pt->threads);
    r.warm_end_ns = mc_now_ns() + (uint64_t)(warmup * 1e9);
    for (unsigned t = 0; t < pt->threads; t++) {
        worker_t *w = &ws[t];
        uint64_t rbase = pt->use_memcpy ? (uint64_t)(uintptr_t)B->twin : B->remote;
        *w = (worker_t){.run = &r,
                        .tid = t,
                        .local = B->local + t * region,
                        .remote = rbase + t * region,
                        .region = region};
        w->reqs = calloc(pt->batch, sizeof(*w->reqs));
        if (w->reqs == NULL) {
            fprintf(stderr, "transfer_bench: out of memory\n");
            exit(1);
        }
    }
    for (unsigned t = 0; t < pt->threads; t++) {
        int e = pthread_create(&ws[t].th, NULL, worker_main, &ws[t]);
        if (e != 0) {
            /* the others wait at the barrier for it: nothing to unwind */
            fprintf(stderr, "transfer_bench: cannot start thread %u: %s\n", t, strerror(e));
            exit(1);
        }
    }
    for (unsigned t = 0; t < pt->threads; t++)
        pthread_join(ws[t].th, NULL);
    pthread_barrier_destroy(&r.bar);
    pthread_mutex_destroy(&r.err_mu);

    size_t n = 0;
    double wall_ns = 0;
    for (unsigned t = 0; t < pt->threads; t++) {
        n += ws[t].nlat;
        wall_ns += (double)(ws[t].t_end - ws[t].t_start);
    }
    wall_ns /= pt->threads;
    uint64_t *all = n ? malloc(n * sizeof(*all)) : NULL;
    size_t k = 0;
    for (unsigned t = 0; t < pt->threads; t++) {
        if (all != NULL)
            memcpy(all + k, ws[t].lat_ns, ws[t].nlat * sizeof(*all));
        k += ws[t].nlat;
        free(ws[t].lat_ns);
        free(ws[t].reqs);
    }
    if (atomic_load(&r.failed)) {
        fprintf(stderr, "transfer_bench: %s\n", r.err);
        free(all);
        return -1;
    }
    if (n == 0 || all == NULL) {
        fprintf(stderr,
                "transfer_bench: no batch finished within --duration %.2f s (block %" PRIu64
                ", batch %u): raise --duration\n",
                B->c->duration, pt->block, pt->batch);
        free(all);
        return -1;
    }
    qsort(all, n, sizeof(*all), cmp_u64);
    double secs = wall_ns / 1e9;
    *out = (result_t){
        .gbps = (double)pt->block * pt->batch * (double)n / 1e9 / secs,
        .reqs_per_s = (double)pt->batch * (double)n / secs,
        .p50 = percentile(all, n, 50) / 1e3,
        .p99 = percentile(all, n, 99) / 1e3,
        .p999 = percentile(all, n, 99.9) / 1e3,
        .avg_lat = wall_ns / 1e3 * pt->threads / (double)n,
    };
    free(all);
    return 0;
}

static int cmp_res(const void *a, const void *b)
{
    double x = ((const result_t *)a)->gbps, y = ((const result_t *)b)->gbps;
    return x < y ? -1 : x > y;
}

/* --reps runs of a point (and of its memcpy twin, interleaved, for local);
 * the median runs by GB/s. */
static int run_point(bench_t *B, const point_t *pt, result_t *res, result_t *mres)
{
    result_t rs[99], ms[99];
    unsigned reps = B->c->reps;
    point_t mp = *pt;
    mp.use_memcpy = 1;
    for (unsigned i = 0; i < reps; i++) {
        double warm =
            i == 0 ? B->c->warmup : (B->c->warmup < SHORT_WARMUP_S ? B->c->warmup : SHORT_WARMUP_S);
        if (run_once(B, pt, warm, &rs[i]) != 0)
            return -1;
        if (mres != NULL && run_once(B, &mp, warm, &ms[i]) != 0)
            return -1;
    }
    qsort(rs, reps, sizeof(rs[0]), cmp_res);
    *res = rs[reps / 2];
    if (mres != NULL) {
        qsort(ms, reps, sizeof(ms[0]), cmp_res);
        *mres = ms[reps / 2];
    }
    return 0;
}

#define CSV_HEADER                                                                                 \
    "protocol,operation,threads,block_size,batch_size,gbps,requests_per_s,p50_us,p99_us,"          \
    "p999_us,avg_lat_us,slice_size,tcp_lanes,reactors,memcpy_gbps,nics"

static void print_row(bench_t *B, const point_t *pt, const result_t *r, const result_t *m)
{
    const cfg_t *c = B->c;
    const char *op = pt->op == MC_TE_READ ? "read" : "write";
    const char *proto = c->proto == PROTO_TCP    ? "tcp"
                        : c->proto == PROTO_RDMA ? "rdma"
                        : c->proto == PROTO_SHM  ? "shm"
                                                 : "local";
    char hb[32], row[512], mc[32] = "";
    if (c->proto == PROTO_RDMA)
        printf("%4u ", B->nics);
    printf("%-5s %3u %9s %6u %10.3f %12.0f %10.1f %10.1f %10.1f", op, pt->threads,
           human(pt->block, hb, sizeof(hb)), pt->batch, r->gbps, r->reqs_per_s, r->p50, r->p99,
           r->p999);
    if (m != NULL) {
        printf(" %12.3f %7.2f", m->gbps, r->gbps / m->gbps);
        snprintf(mc, sizeof(mc), "%.3f", m->gbps);
    }
    printf("\n");
    snprintf(row, sizeof(row),
             "%s,%s,%u,%" PRIu64 ",%u,%.4f,%.0f,%.1f,%.1f,%.1f,%.1f,%" PRIu64 ",%u,%u,%s,%u", proto,
             op, pt->threads, pt->block, pt->batch, r->gbps, r->reqs_per_s, r->p50, r->p99, r->p999,
             r->avg_lat, c->slice_size, c->tcp_lanes, te_nreactors(B->te), mc, B->nics);
    printf("csv,transfer_bench,%s\n", row);
    if (B->csv != NULL) {
        fprintf(B->csv, "%s\n", row);
        fflush(B->csv);
    }
    fflush(stdout);
}

static int run_initiator(const cfg_t *c, pid_t target)
{
    bench_t B = {.c = c};
    int rc = 1;
    char b1[32], b2[32];
    void *mem2 = NULL;

    /* Every point must fit before anything is measured (sweeps skip). */
    B.te = make_engine(c, 0, "127.0.0.1");
    if (B.te == NULL)
        return 1;
    if (c->proto == PROTO_RDMA) {
        te_rdma_nic_stats_t ns[RV_MAX_DEVICES];
        B.nics = te_rdma_stats(B.te, ns, RV_MAX_DEVICES);
    }
    if (c->proto != PROTO_LOCAL) {
        mc_status_t st = mc_te_open_segment(B.te, c->segment, &B.seg);
        if (st != MC_OK) {
            fprintf(stderr, "transfer_bench: cannot open segment '%s': %s\n", c->segment,
                    mc_status_str(st));
            goto out;
        }
        if (remote_buffer(B.te, B.seg, &B.remote, &B.remote_len) != 0) {
            fprintf(stderr, "transfer_bench: segment '%s' has no registered buffer\n", c->segment);
            goto out;
        }
        if (c->proto == PROTO_SHM && !te_shm_ready(B.te, B.seg)) {
            fprintf(stderr,
                    "transfer_bench: segment '%s' is not reached over shared memory (another "
                    "host, or shm off there: the log says why)\n",
                    c->segment);
            goto out;
        }
        if (c->proto == PROTO_SHM) {
            if ((mem2 = alloc_buffer(c->buffer_size)) == NULL)
                goto out;
            memset(mem2, 1, c->buffer_size); /* faulted in, as the registered buffers are */
            B.twin = mem2;
        }
    } else {
        B.seg = MC_TE_LOCAL_SEGMENT;
        if ((mem2 = alloc_buffer(c->buffer_size)) == NULL)
            goto out;
        char loc2[24];
        mc_status_t st =
            mc_te_register(B.te, mem2, c->buffer_size, buffer_location(loc2, sizeof(loc2)), 1);
        if (st != MC_OK) {
            fprintf(stderr, "transfer_bench: cannot register the target buffer: %s\n",
                    mc_status_str(st));
            goto out;
        }
        B.remote = (uint64_t)(uintptr_t)mem2;
        B.remote_len = c->buffer_size;
        B.twin = mem2;
    }
    B.local_len = c->buffer_size;
    if ((B.local = alloc_buffer(B.local_len)) == NULL)
        goto out;
    char loc[24];
    mc_status_t st =
        mc_te_register(B.te, B.local, B.local_len, buffer_location(loc, sizeof(loc)), 0);
    if (st != MC_OK) {
        fprintf(stderr, "transfer_bench: cannot register the local buffer: %s\n",
                mc_status_str(st));
        goto out;
    }
    if (!c->sweep) {
        for (unsigned ti = 0; ti < c->nthreads; ti++)
            for (unsigned bi = 0; bi < c->nblocks; bi++)
                for (unsigned ni = 0; ni < c->nbatches; ni++) {
                    uint64_t need = c->blocks[bi] * c->batches[ni];
                    uint64_t have = region_of(&B, (unsigned)c->threads[ti]);
                    if (need > have) {
                        char b3[32];
                        fprintf(stderr,
                                "transfer_bench: batch %" PRIu64 " x block %s needs %s per "
                                "thread, but with %" PRIu64 " thread(s) each gets %s of the "
                                "buffers: lower --batch_size/--block_size/--threads or raise "
                                "--buffer_size\n",
                                c->batches[ni], human(c->blocks[bi], b1, sizeof(b1)),
                                human(need, b2, sizeof(b2)), c->threads[ti],
                                human(have, b3, sizeof(b3)));
                        rc = 2;
                        goto out;
                    }
                }
    }
    if (c->csv != NULL) {
        B.csv = fopen(c->csv, "a");
        if (B.csv == NULL) {
            fprintf(stderr, "transfer_bench: cannot open --csv %s: %s\n", c->csv, strerror(errno));
            goto out;
        }
        if (ftell(B.csv) == 0)
            fprintf(B.csv, "%s\n", CSV_HEADER);
    }

    if (c->proto == PROTO_RDMA)
        printf("transfer_bench: rdma to segment %s%s over %u %sNIC(s), slice %s, %u reactor(s), "
               "buffer %s",
               c->segment, target > 0 ? " (forked target process)" : "", B.nics,
               c->emulated ? "EMULATED " : "", human(c->slice_size, b1, sizeof(b1)),
               te_nreactors(B.te), human(c->buffer_size, b2, sizeof(b2)));
    else if (c->proto == PROTO_TCP)
        printf("transfer_bench: tcp to segment %s%s, slice %s, %u lane(s), %u reactor(s), "
               "buffer %s",
               c->segment, target > 0 ? " (forked target process)" : "",
               human(c->slice_size, b1, sizeof(b1)), c->tcp_lanes, te_nreactors(B.te),
               human(c->buffer_size, b2, sizeof(b2)));
    else if (c->proto == PROTO_SHM)
        printf("transfer_bench: shm to segment %s%s (its shared memory, mapped here), "
               "buffer %s",
               c->segment, target > 0 ? " (forked target process)" : "",
               human(c->buffer_size, b2, sizeof(b2)));
    else
        printf("transfer_bench: local (memcpy transport, own segment), %u reactor(s), 2 "
               "buffers of %s",
               te_nreactors(B.te), human(c->buffer_size, b2, sizeof(b2)));
    printf(", %u x %.1f s per point after %.1f s warm-up, medians%s%s\n", c->reps, c->duration,
           c->warmup, c->check ? "; --check on" : "", c->cold ? "; cold buffers" : "");
    if (c->proto == PROTO_RDMA)
        printf("%4s ", "nics");
    printf("%-5s %3s %9s %6s %10s %12s %10s %10s %10s", "op", "thr", "block", "batch", "GB/s",
           "req/s", "p50(us)", "p99(us)", "p999(us)");
    int twin = c->proto == PROTO_LOCAL || c->proto == PROTO_SHM;
    if (twin)
        printf(" %12s %7s", "memcpy GB/s", "ratio");
    printf("\n");
    fflush(stdout);

    unsigned skipped = 0;
    for (unsigned oi = 0; oi < c->nops; oi++)
        for (unsigned ti = 0; ti < c->nthreads; ti++)
            for (unsigned bi = 0; bi < c->nblocks; bi++)
                for (unsigned ni = 0; ni < c->nbatches; ni++) {
                    point_t pt = {.op = c->ops[oi],
                                  .block = c->blocks[bi],
                                  .batch = (unsigned)c->batches[ni],
                                  .threads = (unsigned)c->threads[ti]};
                    if (pt.block * pt.batch > region_of(&B, pt.threads)) {
                        skipped++;
                        continue;
                    }
                    result_t r, m;
                    if (run_point(&B, &pt, &r, twin ? &m : NULL) != 0)
                        goto out;
                    print_row(&B, &pt, &r, twin ? &m : NULL);
                }
    if (skipped > 0)
        printf("(%u point(s) skipped: batch x block larger than %s / threads)\n", skipped,
               human(c->buffer_size, b1, sizeof(b1)));
    rc = 0;
out:
    if (B.csv != NULL)
        fclose(B.csv);
    mc_te_destroy(B.te);
    free_buffer(B.local, B.local_len);
    if (mem2 != NULL && c->proto == PROTO_SHM)
        munmap(mem2, c->buffer_size);
    else
        free_buffer(mem2, c->buffer_size);
    return rc;
}

int main(int argc, char **argv)
{
    cfg_t c;
    int prc = parse_args(argc, argv, &c);
    if (prc != 0)
        return prc == 1 ? 0 : 2;
    g_gpu = c.gpu; /* the driver loads later, in each process (never across a fork) */
    if (mc_conf_env_str("MC_LOG_LEVEL") == NULL) /* e.g. "warn,rdma=info" on hardware */
        mc_log_set_all(MC_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    if (c.emulated > 0) {
        rv_emu_opts_t eo;
        rv_emu_opts_get(&eo);
        eo.ndevices = c.emulated;
        eo.bandwidth = c.emu_bw;
        eo.delay_us = c.emu_delay_us;
        rv_emu_configure(&eo);
    }
    if (c.mode == MODE_TARGET)
        return run_target(&c, STDOUT_FILENO, "0.0.0.0");
    pid_t target = 0;
    char name[320];
    if (c.mode == MODE_BOTH) {
        target = fork_target(&c, name, sizeof(name));
        if (target < 0)
            return 1;
        c.segment = name;
    }
    int rc = 0;
    if (c.proto == PROTO_RDMA && c.nnics > 0) {
        for (unsigned i = 0; i < c.nnics && rc == 0; i++) {
            c.nic_cur = (unsigned)c.nics[i];
            rc = run_initiator(&c, target);
        }
    } else {
        rc = run_initiator(&c, target);
    }
    bench_reap(target);
    return rc;
}
