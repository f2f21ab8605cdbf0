/*
 * offset_alloc.c - see offset_alloc.h.
 *
 * Sebastian Aaltonen's offset-allocator scheme, with 64-bit sizes.
 *
 * Units. Internally every offset and size is in units of MC_OALLOC_ALIGN bytes.
 * The usable capacity is the given one rounded down to the alignment, so a
 * size in units is below 2^61 and every bin floor (at most 2^61 units, below)
 * fits in 64 bits; offset + size never exceeds the capacity in units, so no sum
 * can overflow. Bytes appear only at the API boundary (<< 3, >> 3).
 *
 * Bins. A size maps to a bin by a small float: 3 mantissa bits and an
 * exponent, so 8 bins per power of two and a bin spans at most 12.5%. Sizes
 * 0..7 are "denormal" (bin = size). Otherwise, with m = index of the highest
 * set bit, bin = (m - 2) << 3 | (the 3 bits below bit m); the smallest size of
 * bin (e << 3 | f), its floor, is (8 | f) << (e - 1). The largest size,
 * 2^61 - 1 units, is in bin 471; the round-up of any size is at most bin 472
 * (floor 2^61). 64 top bins x 8 leaf bins = 512 bins cover that with room to
 * spare; a 64-bit top bitmap says which top bins have a non-empty leaf, and an
 * 8-bit leaf bitmap per top bin says which of its bins are non-empty.
 *
 * A free range sits in the bin of its size rounded DOWN, so every range in bin
 * b is >= the floor of b. Allocation looks for the first non-empty bin >= the
 * request rounded UP: any range there fits (O(1): two ctz). If there is none,
 * the only ranges that can still fit are in the request's round-down bin, and
 * that bin is then the highest non-empty one; it is searched first-fit
 * ("fallback"). So allocation succeeds exactly when a free range >= the
 * request exists (and a node is available): largest_free() >= size is an
 * exact admission test, and a whole-capacity request always fits an empty
 * allocator, whatever the capacity.
 *
 * Largest range. Each bin keeps bin_max, an upper bound of its ranges' sizes,
 * and bin_at_max, how many of its ranges have exactly that size: the bound is
 * exact while that count is > 0. Insert raises the bound; removing a range of
 * the bound's size lowers the count; a walk of the bin ("rescan") makes it
 * exact again. Invariant, restored at the end of every alloc and free: the
 * highest non-empty bin's bound is exact. So largest_free() is O(1), and the
 * fallback knows in O(1) whether it can succeed, and then walks to the first
 * fitting range. Ranges at the bound are put at the head of their list and
 * the fast path takes the tail, so the largest tends to stay put and be found
 * first. The cost moves into the rescan: O(ranges in the highest bin), paid
 * when the last range of the largest size stops being free and others of a
 * size within 12.5% of it remain; perf/alloc_bench.c measures it in practice.
 *
 * Nodes. One node per live allocation and per free range, in a preallocated
 * table of 2 * max_allocs + 1 (free ranges are at most live + 1, as no two
 * free ranges are adjacent), so a split never runs out of nodes while
 * live < max_allocs. Neighbour links (by address) let free merge in O(1).
 * Unused slots below `hwm` wait on a stack of indices in an array of their
 * own; slots above `hwm` have never been used, so creating a big table
 * touches no memory (the stack array too is only touched as deep as it gets).
 *
 * Memory traffic. The master allocates from a random one of many segments per
 * put, so an allocator is cold every time it is called. A split keeps the free
 * range in its node (the one the allocator found, and the next allocation will
 * find again) and gives the allocation a node from the stack, which is only
 * written: popping an index reads the stack array, not the node. A stack
 * linked through the nodes themselves made every allocation after a mass free
 * a chain of dependent cache (and TLB) misses across the node table.
 */
#include "store/offset_alloc.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "util/log.h"
#include "util/mem.h"

#define ALIGN_SHIFT 3 /* log2(MC_OALLOC_ALIGN) */
#define MANTISSA_BITS 3
#define MANTISSA_VALUE (1u << MANTISSA_BITS)
#define MANTISSA_MASK (MANTISSA_VALUE - 1)
#define TOP_BINS 64
#define LEAF_BINS MANTISSA_VALUE /* 8: one leaf bitmap is a uint8_t */
#define NUM_BINS (TOP_BINS * LEAF_BINS)
#define NO_BIN UINT32_MAX
#define NONE MC_OALLOC_NO_NODE

_Static_assert(MC_OALLOC_ALIGN == 1u << ALIGN_SHIFT, "ALIGN_SHIFT must match MC_OALLOC_ALIGN");

/*
 * A node is in one of three states:
 *   spare - size == 0; its index is on the spare stack (or >= hwm).
 *   used  - a live allocation: size > 0, bin_prev == NONE.
 *   free  - a free range: size > 0, on the circular list of its bin.
 * nbr_prev/nbr_next link used and free nodes in address order (NONE at the
 * ends); the ranges of consecutive nodes are contiguous and cover the space.
 */
typedef struct node {
    uint64_t offset; /* units */
    uint64_t size;   /* units */
    uint32_t bin_prev, bin_next;
    uint32_t nbr_prev, nbr_next;
} node_t;

struct mc_oalloc {
    uint64_t capacity; /* units */
    uint64_t used;     /* units in live allocations */
    uint32_t live;
    uint32_t max_allocs;
    uint32_t node_count; /* slots in nodes[] */
    uint32_t hwm;        /* slots [hwm, node_count) were never used */
    uint32_t nspare;     /* unused slots below hwm: spare[0 .. nspare) */
    uint32_t *spare;     /* node_count entries, a stack */
    uint64_t top_bits;   /* bit t: leaf_bits[t] != 0 */
    uint8_t leaf_bits[TOP_BINS];
    uint32_t bin_head[NUM_BINS];
    uint64_t bin_max[NUM_BINS];    /* upper bound of sizes in the bin (see top) */
    uint32_t bin_at_max[NUM_BINS]; /* ranges of size bin_max; 0: bound not exact */
    node_t *nodes;
    uint32_t hint; /* a node near the last reserve (reserve's search start) */
    /* reserve's other search starts (made at its first call): fingers[b] is
     * 1 + the node of the last reserve in the b-th 2^finger_shift units of
     * the space (0: none yet), or a stale index (its node since merged: size 0, or reused
     * elsewhere: a farther start, still a correct one). Reserves in any
     * order (a snapshot's objects come in hash order) then walk about
     * nodes / FINGER_NODES nodes each instead of up to all of them. */
    uint32_t *fingers;
    unsigned finger_shift;
};

/* ---- small float ---- */

static unsigned msb64(uint64_t v)
{
    return 63u - (unsigned)__builtin_clzll(v);
}

static uint32_t bin_round_down(uint64_t size)
{
    if (size < MANTISSA_VALUE)
        return (uint32_t)size;
    unsigned shift = msb64(size) - MANTISSA_BITS;
    return ((shift + 1) << MANTISSA_BITS) | (uint32_t)((size >> shift) & MANTISSA_MASK);
}

static uint32_t bin_round_up(uint64_t size)
{
    uint32_t bin = bin_round_down(size);
    if (size >= MANTISSA_VALUE) {
        unsigned shift = msb64(size) - MANTISSA_BITS;
        /* a carry out of the mantissa moves to the next exponent by itself */
        if (size & ((UINT64_C(1) << shift) - 1))
            bin++;
    }
    return bin;
}

/* ---- bins ---- */

static void bin_mark(mc_oalloc_t *a, uint32_t bin)
{
    a->leaf_bits[bin / LEAF_BINS] |= (uint8_t)(1u << (bin % LEAF_BINS));
    a->top_bits |= UINT64_C(1) << (bin / LEAF_BINS);
}

static void bin_unmark(mc_oalloc_t *a, uint32_t bin)
{
    uint32_t top = bin / LEAF_BINS;
    a->leaf_bits[top] &= (uint8_t) ~(1u << (bin % LEAF_BINS));
    if (a->leaf_bits[top] == 0)
        a->top_bits &= ~(UINT64_C(1) << top);
}

/* The first non-empty bin >= bin, or NO_BIN. */
static uint32_t bin_find_at_least(const mc_oalloc_t *a, uint32_t bin)
{
    uint32_t top = bin / LEAF_BINS;
    if (top >= TOP_BINS)
        return NO_BIN;
    unsigned leaves = a->leaf_bits[top] & (0xffu << (bin % LEAF_BINS)) & 0xffu;
    if (leaves != 0)
        return top * LEAF_BINS + (uint32_t)__builtin_ctz(leaves);
    if (top + 1 >= TOP_BINS)
        return NO_BIN;
    uint64_t tops = a->top_bits >> (top + 1) << (top + 1);
    if (tops == 0)
        return NO_BIN;
    top = (uint32_t)__builtin_ctzll(tops);
    return top * LEAF_BINS + (uint32_t)__builtin_ctz(a->leaf_bits[top]);
}

/* The highest non-empty bin, or NO_BIN. */
static uint32_t bin_highest(const mc_oalloc_t *a)
{
    if (a->top_bits == 0)
        return NO_BIN;
    uint32_t top = msb64(a->top_bits);
    return top * LEAF_BINS + (31u - (uint32_t)__builtin_clz(a->leaf_bits[top]));
}

static void bin_insert(mc_oalloc_t *a, uint32_t idx)
{
    node_t *n = &a->nodes[idx];
    uint32_t bin = bin_round_down(n->size);
    uint32_t head = a->bin_head[bin];

    if (head == NONE) {
        n->bin_prev = n->bin_next = idx;
        a->bin_head[bin] = idx;
        a->bin_max[bin] = n->size;
        a->bin_at_max[bin] = 1;
        bin_mark(a, bin);
        return;
    }
    /* before the head = at the tail of the circular list */
    node_t *h = &a->nodes[head];
    n->bin_next = head;
    n->bin_prev = h->bin_prev;
    a->nodes[h->bin_prev].bin_next = idx;
    h->bin_prev = idx;
    if (n->size >= a->bin_max[bin]) {
        if (n->size > a->bin_max[bin]) {
            a->bin_max[bin] = n->size;
            a->bin_at_max[bin] = 0;
        }
        a->bin_at_max[bin]++;
        a->bin_head[bin] = idx; /* the largest lead */
    }
}

static void bin_remove(mc_oalloc_t *a, uint32_t idx)
{
    node_t *n = &a->nodes[idx];
    uint32_t bin = bin_round_down(n->size);

    if (n->size == a->bin_max[bin]) {
        assert(a->bin_at_max[bin] > 0);
        a->bin_at_max[bin]--;
    }
    if (n->bin_next == idx) {
        a->bin_head[bin] = NONE;
        bin_unmark(a, bin);
    } else {
        a->nodes[n->bin_prev].bin_next = n->bin_next;
        a->nodes[n->bin_next].bin_prev = n->bin_prev;
        if (a->bin_head[bin] == idx)
            a->bin_head[bin] = n->bin_next;
    }
    n->bin_prev = n->bin_next = NONE; /* now "used" unless the caller frees it */
}

/* Make a bin's bound exact by walking its list. */
static void bin_rescan(mc_oalloc_t *a, uint32_t bin)
{
    uint32_t head = a->bin_head[bin];
    uint64_t max = 0;
    uint32_t count = 0, idx = head;
    do {
        const node_t *n = &a->nodes[idx];
        if (n->size > max) {
            max = n->size;
            count = 0;
        }
        if (n->size == max)
            count++;
        idx = n->bin_next;
    } while (idx != head);
    a->bin_max[bin] = max;
    a->bin_at_max[bin] = count;
}

/* Restore the invariant: the highest non-empty bin's bound is exact. */
static void bin_fix_highest(mc_oalloc_t *a)
{
    uint32_t bin = bin_highest(a);
    if (bin != NO_BIN && a->bin_at_max[bin] == 0)
        bin_rescan(a, bin);
}

/* First-fit walk of a bin for a range >= size. */
static uint32_t bin_search(const mc_oalloc_t *a, uint32_t bin, uint64_t size)
{
    uint32_t head = a->bin_head[bin];
    if (head == NONE || a->bin_max[bin] < size)
        return NONE;
    uint32_t idx = head;
    do {
        if (a->nodes[idx].size >= size)
            return idx;
        idx = a->nodes[idx].bin_next;
    } while (idx != head);
    return NONE;
}

/* ---- node slots ---- */

static uint32_t node_take(mc_oalloc_t *a)
{
    uint32_t idx;
    if (a->nspare > 0) {
        idx = a->spare[--a->nspare];
    } else {
        /* cannot run out: see "Nodes" at the top */
        assert(a->hwm < a->node_count);
        idx = a->hwm++;
    }
    /* the next take writes this one: start fetching it (the next call on this
     * allocator comes after much other work) */
    uint32_t next = a->nspare > 0 ? a->spare[a->nspare - 1] : a->hwm;
    if (next < a->node_count)
        __builtin_prefetch(&a->nodes[next], 1);
    return idx;
}

static void node_release(mc_oalloc_t *a, uint32_t idx)
{
    node_t *n = &a->nodes[idx];
    n->size = 0;
    n->bin_prev = n->bin_next = NONE;
    a->spare[a->nspare++] = idx;
}

static int node_is_free(const node_t *n)
{
    return n->size != 0 && n->bin_prev != NONE;
}

/* The node of a live allocation, or NONE if h is not one. */
static uint32_t handle_node(const mc_oalloc_t *a, mc_oalloc_handle_t h)
{
    if (h.node >= a->hwm)
        return NONE;
    const node_t *n = &a->nodes[h.node];
    if (n->size == 0 || n->bin_prev != NONE || h.offset != n->offset << ALIGN_SHIFT)
        return NONE;
    return h.node;
}

/* ---- API ---- */

mc_status_t mc_oalloc_create(uint64_t capacity, uint32_t max_allocs, mc_oalloc_t **out)
{
    uint64_t units = capacity >> ALIGN_SHIFT;
    /* 2 * max_allocs + 1 slots, all indexable below NONE */
    if (out == NULL || units == 0 || max_allocs == 0 || max_allocs > (NONE - 2) / 2)
        return MC_ERR_INVALID_PARAMS;
    uint32_t node_count = 2 * max_allocs + 1;
#if SIZE_MAX <= UINT32_MAX
    if (node_count > SIZE_MAX / sizeof(node_t))
        return MC_ERR_INVALID_PARAMS;
#endif

    mc_oalloc_t *a = mc_malloc(sizeof(*a));
    if (a == NULL)
        goto err_nomem;
    a->nodes = mc_malloc((size_t)node_count * sizeof(node_t));
    if (a->nodes == NULL)
        goto err_free_alloc;
    a->spare = mc_malloc((size_t)node_count * sizeof(*a->spare));
    if (a->spare == NULL)
        goto err_free_nodes;

    a->capacity = units;
    a->used = 0;
    a->live = 0;
    a->max_allocs = max_allocs;
    a->node_count = node_count;
    a->hwm = 0;
    a->nspare = 0;
    a->hint = 0;
    a->fingers = NULL;
    a->finger_shift = 0;
    a->top_bits = 0;
    for (uint32_t i = 0; i < TOP_BINS; i++)
        a->leaf_bits[i] = 0;
    for (uint32_t i = 0; i < NUM_BINS; i++) {
        a->bin_head[i] = NONE;
        a->bin_max[i] = 0;
        a->bin_at_max[i] = 0;
    }

    uint32_t idx = node_take(a);
    node_t *n = &a->nodes[idx];
    n->offset = 0;
    n->size = units;
    n->nbr_prev = n->nbr_next = NONE;
    bin_insert(a, idx);

    *out = a;
    return MC_OK;

err_free_nodes:
    mc_free(a->nodes);
err_free_alloc:
    mc_free(a);
err_nomem:
    MC_ERROR(MASTER, "out of memory while creating an offset allocator for %u allocations",
             max_allocs);
    return MC_ERR_NOMEM;
}

void mc_oalloc_destroy(mc_oalloc_t *a)
{
    if (a == NULL)
        return;
    mc_free(a->fingers);
    mc_free(a->spare);
    mc_free(a->nodes);
    mc_free(a);
}

mc_status_t mc_oalloc_alloc(mc_oalloc_t *a, uint64_t size, mc_oalloc_handle_t *out)
{
    if (size == 0 || out == NULL || size > a->capacity << ALIGN_SHIFT)
        return MC_ERR_INVALID_PARAMS;
    if (a->live == a->max_allocs)
        return MC_ERR_NO_AVAILABLE_HANDLE;

    /* rounded up without computing size + 7, which wraps near UINT64_MAX */
    uint64_t units = (size >> ALIGN_SHIFT) + ((size & (MC_OALLOC_ALIGN - 1)) != 0);
    uint32_t idx;
    uint32_t bin = bin_find_at_least(a, bin_round_up(units));
    if (bin != NO_BIN) {
        idx = a->nodes[a->bin_head[bin]].bin_prev; /* the tail: spare the largest */
    } else {
        /* Only the round-down bin can still hold a fitting range, and then it
         * is the highest bin, whose bound is exact: the walk succeeds if it
         * starts. If units is a bin floor, that bin was searched already. */
        uint32_t down = bin_round_down(units);
        if (down == bin_round_up(units))
            return MC_ERR_NO_AVAILABLE_HANDLE;
        idx = bin_search(a, down, units);
        if (idx == NONE)
            return MC_ERR_NO_AVAILABLE_HANDLE;
    }

    bin_remove(a, idx);
    node_t *n = &a->nodes[idx];
    uint32_t uidx = idx;
    if (n->size > units) {
        /* split: the allocation takes the front in a node of its own, the
         * free range keeps its node (see "Memory traffic" at the top) */
        uidx = node_take(a);
        node_t *u = &a->nodes[uidx];
        u->offset = n->offset;
        u->size = units;
        u->bin_prev = u->bin_next = NONE; /* used */
        u->nbr_prev = n->nbr_prev;
        u->nbr_next = idx;
        if (n->nbr_prev != NONE)
            a->nodes[n->nbr_prev].nbr_next = uidx;
        n->nbr_prev = uidx;
        n->offset += units;
        n->size -= units;
        bin_insert(a, idx);
    }
    bin_fix_highest(a);

    a->used += units;
    a->live++;
    out->offset = a->nodes[uidx].offset << ALIGN_SHIFT;
    out->node = uidx;
    return MC_OK;
}

void mc_oalloc_free(mc_oalloc_t *a, mc_oalloc_handle_t h)
{
    uint32_t idx = handle_node(a, h);
    if (idx == NONE) {
        MC_ERROR(MASTER,
                 "offset allocator %p: free of a handle that is not live"
                 " (offset %llu, node %u); ignored",
                 (void *)a, (unsigned long long)h.offset, h.node);
        return;
    }
    node_t *n = &a->nodes[idx];
    a->used -= n->size;
    a->live--;

    uint32_t left = n->nbr_prev;
    if (left != NONE && node_is_free(&a->nodes[left])) {
        node_t *l = &a->nodes[left];
        bin_remove(a, left);
        n->offset = l->offset;
        n->size += l->size;
        n->nbr_prev = l->nbr_prev;
        if (l->nbr_prev != NONE)
            a->nodes[l->nbr_prev].nbr_next = idx;
        node_release(a, left);
    }
    uint32_t right = n->nbr_next;
    if (right != NONE && node_is_free(&a->nodes[right])) {
        node_t *r = &a->nodes[right];
        bin_remove(a, right);
        n->size += r->size;
        n->nbr_next = r->nbr_next;
        if (r->nbr_next != NONE)
            a->nodes[r->nbr_next].nbr_prev = idx;
        node_release(a, right);
    }
    bin_insert(a, idx);
    bin_fix_highest(a);
}

/* A node in use (free or live) to start a neighbour walk from. */
/* The units between unit off and node n's range (0: inside it). */
static uint64_t node_dist(const node_t *n, uint64_t off)
{
    return off < n->offset              ? n->offset - off
           : off >= n->offset + n->size ? off - (n->offset + n->size - 1)
                                        : 0;
}

/* One finger per FINGER_NODES allocations the allocator may hold (at least
 * 64, at most 2^20 of them), the space cut into as many equal parts. Made at
 * the first reserve: 0 without memory (the hint alone then). */
#define FINGER_NODES 16u

static int fingers_make(mc_oalloc_t *a)
{
    if (a->fingers != NULL)
        return 1;
    uint32_t want = a->max_allocs / FINGER_NODES;
    want = want < 64 ? 64 : want > (1u << 20) ? 1u << 20 : want;
    unsigned shift = 0;
    while ((a->capacity - 1) >> shift >= want)
        shift++;
    uint32_t n = (uint32_t)((a->capacity - 1) >> shift) + 1;
    /* zeroed (none), and only the pages of parts reserved in get touched:
     * at most 1/128 of what the nodes of as many allocations take */
    a->fingers = mc_calloc(n, sizeof(*a->fingers));
    if (a->fingers == NULL)
        return 0;
    a->finger_shift = shift;
    return 1;
}

/* Where reserve's walk to unit off starts: the nearer of the hint and off's
 * finger (either may be stale: a node in use is a correct start anywhere). */
static uint32_t walk_start(mc_oalloc_t *a, uint64_t off)
{
    uint32_t best = NONE;
    uint64_t best_d = UINT64_MAX;
    if (a->hint < a->hwm && a->nodes[a->hint].size != 0) {
        best = a->hint;
        best_d = node_dist(&a->nodes[best], off);
    }
    if (best_d != 0 && fingers_make(a)) {
        uint32_t f = a->fingers[off >> a->finger_shift] - 1; /* 0: none (NONE) */
        if (f < a->hwm && a->nodes[f].size != 0 && node_dist(&a->nodes[f], off) < best_d)
            best = f;
    }
    if (best != NONE)
        return best;
    for (uint32_t i = 0; i < a->hwm; i++)
        if (a->nodes[i].size != 0)
            return i;
    return NONE; /* cannot happen: the nodes always cover the space */
}

mc_status_t mc_oalloc_reserve(mc_oalloc_t *a, uint64_t offset, uint64_t size,
                              mc_oalloc_handle_t *out)
{
    if (size == 0 || out == NULL || (offset & (MC_OALLOC_ALIGN - 1)) != 0 ||
        size > a->capacity << ALIGN_SHIFT)
        return MC_ERR_INVALID_PARAMS;
    uint64_t off = offset >> ALIGN_SHIFT;
    uint64_t units = (size >> ALIGN_SHIFT) + ((size & (MC_OALLOC_ALIGN - 1)) != 0);
    if (off >= a->capacity || units > a->capacity - off)
        return MC_ERR_INVALID_PARAMS;
    if (a->live == a->max_allocs)
        return MC_ERR_NO_AVAILABLE_HANDLE;

    /* the range (free or live) holding off: nodes are address-ordered */
    uint32_t idx = walk_start(a, off);
    while (idx != NONE) {
        const node_t *n = &a->nodes[idx];
        if (off < n->offset)
            idx = n->nbr_prev;
        else if (off >= n->offset + n->size)
            idx = n->nbr_next;
        else
            break;
    }
    if (idx == NONE)
        return MC_ERR_INVALID_PARAMS;
    node_t *n = &a->nodes[idx];
    if (!node_is_free(n) || off + units > n->offset + n->size) {
        a->hint = idx;
        return MC_ERR_EXISTS;
    }

    bin_remove(a, idx);
    if (off > n->offset) {
        /* the free part in front gets a node of its own */
        uint32_t lidx = node_take(a);
        node_t *l = &a->nodes[lidx];
        l->offset = n->offset;
        l->size = off - n->offset;
        l->nbr_prev = n->nbr_prev;
        l->nbr_next = idx;
        if (n->nbr_prev != NONE)
            a->nodes[n->nbr_prev].nbr_next = lidx;
        n->nbr_prev = lidx;
        n->offset = off;
        n->size -= l->size;
        bin_insert(a, lidx);
    }
    uint32_t uidx = idx;
    if (n->size > units) {
        /* as in alloc: the allocation takes the front, the rest stays free */
        uidx = node_take(a);
        node_t *u = &a->nodes[uidx];
        u->offset = n->offset;
        u->size = units;
        u->bin_prev = u->bin_next = NONE;
        u->nbr_prev = n->nbr_prev;
        u->nbr_next = idx;
        if (n->nbr_prev != NONE)
            a->nodes[n->nbr_prev].nbr_next = uidx;
        n->nbr_prev = uidx;
        n->offset += units;
        n->size -= units;
        bin_insert(a, idx);
        a->hint = idx; /* the next reserve is most likely right after this one */
    } else {
        a->hint = uidx;
    }
    bin_fix_highest(a);

    a->used += units;
    a->live++;
    if (a->fingers != NULL)
        a->fingers[off >> a->finger_shift] = uidx + 1;
    out->offset = a->nodes[uidx].offset << ALIGN_SHIFT;
    out->node = uidx;
    return MC_OK;
}

uint64_t mc_oalloc_size(const mc_oalloc_t *a, mc_oalloc_handle_t h)
{
    uint32_t idx = handle_node(a, h);
    return idx == NONE ? 0 : a->nodes[idx].size << ALIGN_SHIFT;
}

uint64_t mc_oalloc_capacity(const mc_oalloc_t *a)
{
    return a->capacity << ALIGN_SHIFT;
}

uint64_t mc_oalloc_used(const mc_oalloc_t *a)
{
    return a->used << ALIGN_SHIFT;
}

uint64_t mc_oalloc_largest_free(const mc_oalloc_t *a)
{
    uint32_t bin = bin_highest(a);
    return bin == NO_BIN ? 0 : a->bin_max[bin] << ALIGN_SHIFT; /* exact: see top */
}

double mc_oalloc_free_ratio(const mc_oalloc_t *a)
{
    return (double)(a->capacity - a->used) / (double)a->capacity;
}

uint32_t mc_oalloc_live(const mc_oalloc_t *a)
{
    return a->live;
}
