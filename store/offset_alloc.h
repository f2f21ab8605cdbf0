/*
 * offset_alloc.h - O(1) offset allocator for one segment.
 *
 * Hands out [offset, offset + size) ranges of an abstract space of `capacity`
 * bytes; it never touches the memory it describes (the master allocates
 * inside segments that live in other processes). Free ranges are kept in bins
 * whose sizes form a floating-point-like sequence (a few mantissa bits per
 * power of two), indexed by two levels of bitmaps, so alloc and free are O(1);
 * a freed range merges with free neighbours.
 *
 * Sizes are rounded up to MC_OALLOC_ALIGN bytes (not to bin sizes) and the
 * capacity down to it. Allocation succeeds exactly when a free range of at
 * least the aligned size exists and fewer than max_allocs are live: when the
 * bins above the request's size are empty, the request's own bin is searched
 * first-fit. So largest_free() >= size is an exact admission test. That
 * fallback, and keeping largest_free() exact, cost O(ranges in the highest
 * bin) in the worst case; O(1) otherwise.
 *
 * Freeing a handle that is not live is logged and ignored; handles carry no
 * generation, so a stale handle whose slot and offset were both reused would
 * free the new allocation: owners must free each handle once.
 *
 * Not thread-safe: the owner (the master's segment) serialises access.
 */
#ifndef MC_STORE_OFFSET_ALLOC_H
#define MC_STORE_OFFSET_ALLOC_H

#include <stdint.h>

#include "mooncake/status.h"

#define MC_OALLOC_ALIGN 8u
#define MC_OALLOC_NO_NODE UINT32_MAX

typedef struct mc_oalloc mc_oalloc_t;

/* What an allocation returns and what free takes back. */
typedef struct mc_oalloc_handle {
    uint64_t offset; /* from the start of the space */
    uint32_t node;   /* internal; MC_OALLOC_NO_NODE for an invalid handle */
} mc_oalloc_handle_t;

/* capacity: bytes in the space (> 0). max_allocs: most live allocations at
 * once (node table size; allocation fails with NO_AVAILABLE_HANDLE when they
 * are all used). */
mc_status_t mc_oalloc_create(uint64_t capacity, uint32_t max_allocs, mc_oalloc_t **out);
void mc_oalloc_destroy(mc_oalloc_t *a);

/* MC_OK, MC_ERR_INVALID_PARAMS (size 0 or > capacity), MC_ERR_NO_AVAILABLE_HANDLE. */
mc_status_t mc_oalloc_alloc(mc_oalloc_t *a, uint64_t size, mc_oalloc_handle_t *out);

/* Take exactly [offset, offset + size) (size rounded up to MC_OALLOC_ALIGN),
 * as an earlier alloc placed it: replaying another master's journal must
 * rebuild the same ranges. offset must be aligned. The search for the free
 * range holding it starts at the nearer of the range the previous reserve
 * left and the last range reserved in the same part of the space (one part
 * per 16 allocations max_allocs allows; a table made at the first reserve)
 * and walks neighbours: reserving in the order a replay sees them (a
 * segment fills front to back) is O(1) each, in any order (a snapshot's hash
 * order) about 16 ranges each; O(ranges) at worst.
 * MC_OK, MC_ERR_INVALID_PARAMS (size 0, misaligned, beyond the capacity),
 * MC_ERR_EXISTS (some byte of the range is allocated already),
 * MC_ERR_NO_AVAILABLE_HANDLE (max_allocs live). */
mc_status_t mc_oalloc_reserve(mc_oalloc_t *a, uint64_t offset, uint64_t size,
                              mc_oalloc_handle_t *out);

/* Free a handle returned by alloc and not yet freed. */
void mc_oalloc_free(mc_oalloc_t *a, mc_oalloc_handle_t h);

/* Size (rounded) of a live allocation. */
uint64_t mc_oalloc_size(const mc_oalloc_t *a, mc_oalloc_handle_t h);

uint64_t mc_oalloc_capacity(const mc_oalloc_t *a);
uint64_t mc_oalloc_used(const mc_oalloc_t *a);         /* bytes in live allocations */
uint64_t mc_oalloc_largest_free(const mc_oalloc_t *a); /* exact */
double mc_oalloc_free_ratio(const mc_oalloc_t *a);     /* free bytes / capacity */
uint32_t mc_oalloc_live(const mc_oalloc_t *a);         /* live allocations */

#endif /* MC_STORE_OFFSET_ALLOC_H */
