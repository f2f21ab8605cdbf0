/*
 * trace_sim.h - request traces of prefix KV-cache reuse and the exact LRU
 * baselines trace_replay prints beside the live store.
 *
 * A trace is the FAST'25 Mooncake format: one JSON object per line with
 * `timestamp` (ms from the start), `input_length` and `output_length`
 * (tokens) and `hash_ids` (the request's prefix blocks, TRACE_BLOCK_TOKENS
 * tokens each; equal ids at the start of two requests are a reusable
 * prefix). Other keys are ignored. Block ids are remapped to dense indices
 * 0..nuniq-1 in order of first appearance, so caches are plain arrays.
 *
 * One request against a cache (the live store or a simulated LRU) is the
 * same three steps everywhere:
 *   1. the hit run: the longest leading run of the request's blocks that
 *      the cache holds (only a prefix whose every block is there is usable);
 *   2. the hit blocks are read, which counts as an access (LRU: moved to
 *      most recent, in request order);
 *   3. every later block the cache does not hold is written (inserted as
 *      most recent, in request order, evicting the least recent when full);
 *      a later block the cache already holds is left alone (the store's put
 *      of an existing key changes nothing, and an exist check is no access).
 *
 * Not thread-safe; every function is pure computation (no I/O but
 * trace_load's read of the file).
 */
#ifndef MC_PERF_TRACE_SIM_H
#define MC_PERF_TRACE_SIM_H

#include <stddef.h>
#include <stdint.h>

/* Tokens per block (the traces' unit of hash_ids). */
#define TRACE_BLOCK_TOKENS 512u
/* Most blocks one request may have, and most requests a trace may hold. */
#define TRACE_MAX_BLOCKS 65536u
#define TRACE_MAX_REQUESTS 16000000u

typedef struct trace_req {
    uint64_t ts_us;      /* arrival, from the trace's start */
    uint32_t input_len;  /* tokens */
    uint32_t output_len; /* tokens */
    size_t first;        /* index of its first block in trace_t.blocks */
    uint32_t n;          /* blocks (>= 1) */
} trace_req_t;

typedef struct trace {
    trace_req_t *req;
    size_t nreq;
    uint32_t *blocks; /* dense ids, request after request */
    size_t nblocks;
    uint64_t *ids; /* dense id -> the trace's hash id; nuniq of them */
    uint32_t nuniq;
    uint32_t max_blocks;   /* most blocks of one request */
    uint64_t input_tokens; /* sum of input_length */
} trace_t;

/* Parse a whole trace from memory. name labels errors ("FILE:LINE: what").
 * 0, or -1 with the reason in err (a line that is not one JSON object,
 * a missing or malformed field, a timestamp that goes backwards, an empty
 * hash_ids, too many blocks or requests, out of memory); t is then empty. */
int trace_parse(const char *text, size_t len, const char *name, trace_t *t, char *err,
                size_t errlen);
/* trace_parse of a file's contents. */
int trace_load(const char *path, trace_t *t, char *err, size_t errlen);
void trace_free(trace_t *t);

/* Tokens of r that a hit run of `hit` blocks spares prefill: hit * 512,
 * at most the request's input_length (its last block is partial). */
uint64_t trace_tokens_saved(const trace_req_t *r, uint32_t hit);

/* An exact LRU cache of `capacity` blocks over ids 0..nuniq-1. */
typedef struct lru lru_t;

lru_t *lru_create(uint32_t capacity, uint32_t nuniq); /* NULL: out of memory */
void lru_destroy(lru_t *c);                           /* NULL ok */
/* One request (the three steps above); returns its hit run. */
uint32_t lru_request(lru_t *c, const uint32_t *blocks, uint32_t n);
/* The hit run the request would have, changing nothing. */
uint32_t lru_run(const lru_t *c, const uint32_t *blocks, uint32_t n);
int lru_contains(const lru_t *c, uint32_t id);
uint32_t lru_size(const lru_t *c);
/* Blocks from most to least recent into out (room entries); how many. */
uint32_t lru_order(const lru_t *c, uint32_t *out, uint32_t room);

/* The baselines of one configuration, every one an exact LRU:
 *  - local: `workers` prefill workers, each with a local LRU of `capacity`
 *    blocks, requests dealt round-robin (request i to worker i mod
 *    workers: no cache-aware routing);
 *  - affinity: the same caches, each request routed to the worker whose
 *    cache holds the longest run of its prefix when that run is longer
 *    than AFFINITY_MIN_RUN blocks (the lowest-numbered such worker),
 *    round-robin otherwise: cache-aware routing with no regard for load,
 *    the best a local cache can get from the router;
 *  - global: one LRU of workers * capacity blocks seeing every request in
 *    trace order (what a pooled store should reach);
 *  - unbounded: a cache that never evicts (the trace's own reuse, the
 *    ceiling of any policy).
 * Hits are blocks; tokens per trace_tokens_saved. */
#define AFFINITY_MIN_RUN 1u
typedef struct trace_baseline {
    uint64_t blocks;
    uint64_t local_hits, affinity_hits, global_hits, inf_hits;
    uint64_t local_tokens, affinity_tokens, global_tokens, inf_tokens;
} trace_baseline_t;

/* 0, or -1 when out of memory or workers/capacity is 0. */
int trace_baselines(const trace_t *t, unsigned workers, uint32_t capacity, trace_baseline_t *out);

#endif /* MC_PERF_TRACE_SIM_H */
