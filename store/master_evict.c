/*
 * master_evict.c - eviction, abandoned puts and reserved ("parked") space.
 * See master.h (mc_master_tick).
 *
 * Eviction runs for two reasons only: use above the high watermark (the
 * tick: an LRU pass, below) and a put that eviction can make room for
 * (evict_for, further down: it evicts only when the put then fits).
 *
 * The tick's eviction is approximate LRU on last access (put end or get). One pass:
 *   1. visit every shard and sample the access times of the eligible objects
 *      (complete, with a replica, lease expired) into two reservoirs, unpinned
 *      and soft-pinned, of at most evict_sample_max entries each (reservoir
 *      sampling keeps it uniform without knowing the count in advance);
 *   2. target = ceil(eligible * ratio); a quickselect on the sample gives the
 *      access time below which that share of the objects lies (no sort);
 *   3. visit every shard again, from a random one, and evict eligible objects
 *      at or below the threshold until the target is met, re-checking each
 *      under its lock (a get may have leased it since step 1).
 * Soft-pinned objects are ranked only when the unpinned ones are not enough
 * and allow_evict_soft_pinned is set; then every unpinned object goes first.
 * Leased and unfinished objects are never candidates.
 *
 * Upstream ranks by lease deadline (last get + lease ttl, or put end), which
 * orders the same way except that a lease never shrinks; last access is the
 * quantity meant. Exist-checks do not count as accesses (master.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/master_int.h"
#include "util/log.h"
#include "util/mem.h"

/* A reservoir of access times. */
typedef struct sample {
    uint64_t *v;
    size_t n, cap, max; /* used, allocated, most kept */
    uint64_t seen;      /* candidates offered */
} sample_t;

static void sample_add(sample_t *s, uint64_t x)
{
    s->seen++;
    if (s->n < s->max) {
        if (s->n == s->cap) {
            size_t ncap = s->cap ? s->cap * 2 : 1024;
            if (ncap > s->max)
                ncap = s->max;
            uint64_t *nv = mc_realloc(s->v, ncap * sizeof(*nv));
            if (nv == NULL) {
                s->max = s->n; /* keep going with a smaller sample */
                goto replace;
            }
            s->v = nv;
            s->cap = ncap;
        }
        s->v[s->n++] = x;
        return;
    }
replace:
    if (s->n == 0)
        return;
    /* Algorithm R: keep the new one with probability n / seen */
    uint64_t r = rng_next() % s->seen;
    if (r < s->n)
        s->v[r] = x;
}

/* The k-th smallest (0-based) of v[0..n), reordering v. Quickselect with a
 * median-of-three pivot and a three-way partition (equal keys are common:
 * many objects share a put-end microsecond): O(n) on average, no sort. */
static uint64_t select_kth(uint64_t *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n; /* the answer is in v[lo..hi) */
    while (hi - lo > 1) {
        uint64_t a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi - 1];
        uint64_t pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        /* [lo, lt) < pivot, [lt, i) == pivot, [gt, hi) > pivot */
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            uint64_t x = v[i];
            if (x < pivot) {
                v[i++] = v[lt];
                v[lt++] = x;
            } else if (x > pivot) {
                v[i] = v[--gt];
                v[gt] = x;
            } else {
                i++;
            }
        }
        if (k < lt)
            hi = lt;
        else if (k >= gt)
            lo = gt;
        else
            return pivot;
    }
    return v[lo];
}

/* Access time at or below which `want` of `total` candidates lie, estimated on
 * the sample. */
static uint64_t threshold(sample_t *s, uint64_t want, uint64_t total)
{
    if (want >= total || s->n == 0)
        return UINT64_MAX;
    size_t k = (size_t)ceil((double)want * (double)s->n / (double)total);
    if (k == 0)
        k = 1;
    return select_kth(s->v, s->n, k - 1);
}

/* strict (the tick): a lease every reader released still protects the
 * object until its deadline; else (a put that finds no room) it does not. */
static int eligible(const obj_t *o, uint64_t now_us, int strict)
{
    return o->state == OBJ_COMPLETE && o->nrep > 0 &&
           !(strict ? obj_held(o, now_us) : obj_leased(o, now_us)) &&
           o->pin_ttl_ms != MC_MASTER_PIN_HARD && !(o->ldisk & LDISK_PENDING);
}

/* Evict o, chosen by a walk of its shard (locked; h: its slot's hash), and
 * count it in *keys and *bytes: removed, or spilled when it has a file
 * (it stays readable from there); unless the offload policy keeps it
 * while its node persists it. The walk may go on: only o left its slot. */
static void evict_obj(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h, uint64_t now_us,
                      uint64_t *keys, uint64_t *bytes)
{
    if (!o->disk && !obj_ldisk(o) && offload_instead_of_evict(m, o, now_us))
        return; /* its node persists it first (or it stays) */
    *bytes += o->size * o->nrep;
    (*keys)++;
    if (o->disk || obj_ldisk(o)) {
        obj_spill(m, o); /* stays readable from its file */
        return;
    }
    obj_unlink(m, sh, o, h);
    obj_destroy(m, o);
}

/* Evict from every shard, starting at a random one, the eligible objects of
 * the given kind (pinned or not) accessed at or before thr, until *left is 0. */
static void evict_walk(mc_master_t *m, uint64_t now_us, int strict, int pinned, uint64_t thr,
                       uint64_t *left, uint64_t *keys, uint64_t *bytes)
{
    unsigned start = (unsigned)(rng_next() % MC_MASTER_NUM_SHARDS);
    for (unsigned i = 0; i<MC_MASTER_NUM_SHARDS && * left> 0; i++) {
        shard_t *sh = &m->shards[(start + i) % MC_MASTER_NUM_SHARDS];
        shard_lock(sh);
        OTAB_WALK(&sh->tab, j, k)
        {
            if (*left == 0)
                break;
            otab_walk_prefetch(&sh->tab, j);
            obj_t *o = sh->tab.slots[j].obj;
            if (o == NULL || !eligible(o, now_us, strict) || obj_pinned(o, now_us) != pinned ||
                o->access_us > thr)
                continue;
            (*left)--;
            evict_obj(m, sh, o, sh->tab.slots[j].hash, now_us, keys, bytes);
        }
        otab_shrink(&sh->tab);
        shard_unlock(sh);
    }
}

/* A pass visits every object: one that evicted nothing (everything leased or
 * in progress) holds further passes off for IDLE_BACKOFF_US, so a full pool
 * of leased objects does not cost a walk every tick. */
#define IDLE_BACKOFF_US 100000u

/* One LRU round: ceil(eligible * ratio) objects less `done` (evicted
 * already for the same reason), least recently accessed first (steps 1-3
 * above), added to *keys and *bytes; the caller counts the round in the
 * statistics. evict_lock held. */
static void lru_round(mc_master_t *m, uint64_t now_us, int strict, double ratio, uint64_t done,
                      uint64_t *keys, uint64_t *bytes)
{
    int allow_pinned = m->o.allow_evict_soft_pinned;
    sample_t su = {.max = m->o.evict_sample_max}, sp = {.max = m->o.evict_sample_max};
    uint64_t k0 = *keys, b0 = *bytes;
    for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++) {
        shard_t *sh = &m->shards[s];
        shard_lock(sh);
        OTAB_WALK(&sh->tab, i, k)
        {
            otab_walk_prefetch(&sh->tab, i);
            obj_t *o = sh->tab.slots[i].obj;
            if (o == NULL || !eligible(o, now_us, strict))
                continue;
            if (!obj_pinned(o, now_us))
                sample_add(&su, o->access_us);
            else if (allow_pinned)
                sample_add(&sp, o->access_us);
        }
        shard_unlock(sh);
    }

    uint64_t total = su.seen + sp.seen;
    /* the epsilon keeps 60 * 0.7 = 42.000000000000007 at 42 */
    uint64_t target = (uint64_t)ceil((double)total * ratio - 1e-9);
    if (target > total)
        target = total;
    target = target > done ? target - done : 0;
    if (target > 0) {
        uint64_t left = target;
        uint64_t thr_u = threshold(&su, target, su.seen);
        evict_walk(m, now_us, strict, 0, thr_u, &left, keys, bytes);
        /* soft-pinned ones only once every unpinned candidate is gone */
        if (left > 0 && target > su.seen && sp.seen > 0) {
            uint64_t thr_p = threshold(&sp, target - su.seen, sp.seen);
            evict_walk(m, now_us, strict, 1, thr_p, &left, keys, bytes);
        }
    }
    mc_free(su.v);
    mc_free(sp.v);
    if (*keys > k0)
        MC_DEBUG(MASTER, "eviction: %llu of %llu eligible objects, %llu bytes",
                 (unsigned long long)(*keys - k0), (unsigned long long)total,
                 (unsigned long long)(*bytes - b0));
    else if (total > 0)
        MC_DEBUG(MASTER, "eviction: nothing evicted of %llu eligible objects",
                 (unsigned long long)total);
}

/* One eviction round in the statistics (attempt, success, keys, bytes). */
static void count_round(mc_master_t *m, uint64_t keys, uint64_t bytes)
{
    atomic_fetch_add(&m->evict_attempts, 1);
    if (keys > 0) {
        atomic_fetch_add(&m->evict_successes, 1);
        atomic_fetch_add(&m->evicted_keys, keys);
        atomic_fetch_add(&m->evicted_bytes, bytes);
    }
}

void evict_backoff_end(mc_master_t *m, uint64_t now_us)
{
    atomic_fetch_add(&m->evict_gen, 1);
    if (atomic_load_explicit(&m->evict_idle_until_us, memory_order_relaxed) > now_us)
        atomic_store_explicit(&m->evict_idle_until_us, 0, memory_order_relaxed);
    if (atomic_load_explicit(&m->evict_nofit_until_us, memory_order_relaxed) > now_us)
        atomic_store_explicit(&m->evict_nofit_until_us, 0, memory_order_relaxed);
}

uint64_t evict_pass(mc_master_t *m, uint64_t now_us, double ratio)
{
    if (now_us < atomic_load(&m->evict_idle_until_us))
        return 0;
    pthread_mutex_lock(&m->evict_lock);
    offload_cycle_start(m);
    uint64_t gen = atomic_load(&m->evict_gen);
    uint64_t keys = 0, bytes = 0;
    lru_round(m, now_us, 1, ratio, 0, &keys, &bytes);
    count_round(m, keys, bytes);
    /* no backoff when what the walk saw changed meanwhile (evict_backoff_end) */
    atomic_store(&m->evict_idle_until_us,
                 keys > 0 || atomic_load(&m->evict_gen) != gen ? 0 : now_us + IDLE_BACKOFF_US);
    pthread_mutex_unlock(&m->evict_lock);
    return keys;
}

/* ---- eviction for one put (evict_for) ----
 *
 * A put that finds no room evicts only if that makes room for it: below the
 * high watermark nothing else justifies removing an object (issue 13: puts
 * that could never fit evicted objects in bulk, and a sticky flag made the
 * next tick evict again whatever the fill). The offset allocator admits an
 * allocation exactly when a free range of its size exists (offset_alloc.h),
 * so the question is exact: is there, on some mounted segment, a window of
 * `size` bytes that holds only free space and objects eviction may take
 * (complete, unleased, soft-pinned only if allowed)? Three walks, under
 * evict_lock:
 *   1. every range eviction may not take (unfinished puts, leased objects,
 *      parked space, protected soft pins): the gaps between them, per
 *      segment; the segment with the largest gap that fits is chosen (none:
 *      nothing is evicted, and puts of this size or larger skip the walk
 *      for IDLE_BACKOFF_US);
 *   2. an LRU round (eviction_ratio of the eligible objects, least recently
 *      used first, on every segment), as the tick's above the watermark:
 *      room for the next puts, so that a full pool does not walk per put,
 *      and usually for this one (values of one size, as KV-cache blocks
 *      are); when some segment now has a free range for it, that is all;
 *   3. otherwise (fragmentation, a large value) the evictable replicas on
 *      the chosen segment, sorted by offset: among the windows of `size`
 *      bytes inside a gap, the one whose most recently accessed object is
 *      oldest (soft-pinned ones last; then the fewest bytes) is evicted
 *      (each object checked again under its lock) and the put is placed on
 *      that segment.
 * Why the LRU round first, and not (as before) one window of eviction_ratio
 * of the chosen segment: with placement at random any wide window holds
 * recent objects as well as old ones, and the segment with the largest gap
 * is not where the oldest objects are (new puts went where room was made,
 * the other segments kept their old objects for ever). On the FAST'25
 * traces (perf/trace_replay --core) that made the store reach 0.79x the
 * hit rate of an ideal LRU of the same capacity; the LRU round, 0.96x-1.0x
 * (perf/README.md, "Trace replay").
 * Single-threaded (the property test) the put then always succeeds. With
 * several reactors, a concurrent put may take the room first; that put then
 * needed it as much. A value larger than any segment is refused without a
 * walk.
 */

typedef struct fixed_rng {
    uint32_t slot;
    uint64_t off, end;
} fixed_rng_t;

typedef struct ev_rng {
    uint64_t off, end;
    uint64_t access_us;
    uint64_t pinned; /* 0 or 1; a uint64_t for the prefix sums */
} ev_rng_t;

typedef struct vec {
    void *v;
    size_t n, cap, elem;
} vec_t;

static void *vec_push(vec_t *a)
{
    if (a->n == a->cap) {
        size_t ncap = a->cap ? a->cap * 2 : 256;
        void *nv = mc_realloc(a->v, ncap * a->elem);
        if (nv == NULL)
            return NULL;
        a->v = nv;
        a->cap = ncap;
    }
    return (char *)a->v + a->n++ * a->elem;
}

static int evictable(const mc_master_t *m, const obj_t *o, uint64_t now_us)
{
    return eligible(o, now_us, 0) && (m->o.allow_evict_soft_pinned || !obj_pinned(o, now_us));
}

static uint64_t round_up8(uint64_t x)
{
    return (x + MC_OALLOC_ALIGN - 1) & ~(uint64_t)(MC_OALLOC_ALIGN - 1);
}

static int fixed_cmp(const void *a, const void *b)
{
    const fixed_rng_t *x = a, *y = b;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int ev_cmp(const void *a, const void *b)
{
    const ev_rng_t *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Walk 1: the ranges eviction may not free, on mounted segments. */
static mc_status_t collect_fixed(mc_master_t *m, uint64_t now_us, vec_t *out)
{
    for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++) {
        shard_t *sh = &m->shards[s];
        shard_lock(sh);
        pthread_rwlock_rdlock(&m->seg_lock);
        mc_status_t st = MC_OK;
        OTAB_WALK(&sh->tab, i, k)
        {
            otab_walk_prefetch(&sh->tab, i);
            obj_t *o = sh->tab.slots[i].obj;
            if (o == NULL || evictable(m, o, now_us))
                continue;
            for (uint32_t r = 0; r < o->nrep && st == MC_OK; r++) {
                fixed_rng_t *f = vec_push(out);
                if (f == NULL)
                    st = MC_ERR_NOMEM;
                else
                    *f = (fixed_rng_t){o->rep[r].slot, o->rep[r].offset,
                                       o->rep[r].offset + round_up8(o->size)};
            }
        }
        for (obj_t *o = sh->parked; o != NULL && st == MC_OK; o = o->next_parked)
            for (uint32_t r = 0; r < o->nrep && st == MC_OK; r++) {
                fixed_rng_t *f = vec_push(out);
                if (f == NULL)
                    st = MC_ERR_NOMEM;
                else
                    *f = (fixed_rng_t){o->rep[r].slot, o->rep[r].offset,
                                       o->rep[r].offset + round_up8(o->size)};
            }
        pthread_rwlock_unlock(&m->seg_lock);
        shard_unlock(sh);
        if (st != MC_OK)
            return st;
    }
    return MC_OK;
}

/* Walk 2: the evictable replicas on segment slot `slot`. */
static mc_status_t collect_evictable(mc_master_t *m, uint32_t slot, uint64_t now_us, vec_t *out)
{
    for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++) {
        shard_t *sh = &m->shards[s];
        mc_status_t st = MC_OK;
        shard_lock(sh);
        OTAB_WALK(&sh->tab, i, k)
        {
            otab_walk_prefetch(&sh->tab, i);
            obj_t *o = sh->tab.slots[i].obj;
            if (o == NULL || !evictable(m, o, now_us))
                continue;
            for (uint32_t r = 0; r < o->nrep; r++) {
                if (o->rep[r].slot != slot)
                    continue;
                ev_rng_t *e = vec_push(out);
                if (e == NULL) {
                    st = MC_ERR_NOMEM;
                    break;
                }
                *e = (ev_rng_t){o->rep[r].offset, o->rep[r].offset + round_up8(o->size),
                                o->access_us, (uint64_t)obj_pinned(o, now_us)};
            }
            if (st != MC_OK)
                break;
        }
        shard_unlock(sh);
        if (st != MC_OK)
            return st;
    }
    return MC_OK;
}

/* The cost of evicting a window: protected pins last, then the newest
 * access in it (older is better), then bytes. */
typedef struct wcost {
    uint64_t pinned, newest, bytes;
} wcost_t;

static int wcost_less(const wcost_t *a, const wcost_t *b)
{
    if ((a->pinned > 0) != (b->pinned > 0))
        return a->pinned == 0;
    if (a->newest != b->newest)
        return a->newest < b->newest;
    return a->bytes < b->bytes;
}

/* The best window of w bytes inside [g0, g1) over the evictable ranges
 * e[0..n) (sorted, all inside the gap); updates *best / *best_at. Windows
 * worth trying start at g0 or at a range's start, or end at g1 or at a
 * range's end; their overlapped ranges [lo, hi) only move forward as the
 * start grows, so a monotone deque gives the newest access of each. */
static mc_status_t best_window(const ev_rng_t *e, size_t n, uint64_t g0, uint64_t g1, uint64_t w,
                               wcost_t *best, uint64_t *best_at, uint64_t *best_w, int *found)
{
    uint64_t *cand = mc_malloc((2 * n + 2) * sizeof(*cand));
    size_t *dq = mc_malloc((n + 1) * sizeof(*dq));
    uint64_t *pin = mc_malloc((n + 1) * sizeof(*pin)), *byt = mc_malloc((n + 1) * sizeof(*byt));
    if (cand == NULL || dq == NULL || pin == NULL || byt == NULL) {
        mc_free(cand), mc_free(dq), mc_free(pin), mc_free(byt);
        return MC_ERR_NOMEM;
    }
    size_t nc = 0;
    cand[nc++] = g0;
    cand[nc++] = g1 - w;
    pin[0] = byt[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i].off + w <= g1)
            cand[nc++] = e[i].off;
        if (e[i].end >= g0 + w)
            cand[nc++] = e[i].end - w;
        pin[i + 1] = pin[i] + e[i].pinned;
        byt[i + 1] = byt[i] + (e[i].end - e[i].off);
    }
    qsort(cand, nc, sizeof(*cand), u64_cmp);
    size_t lo = 0, hi = 0, qh = 0, qt = 0; /* deque dq[qh..qt) of indices */
    for (size_t c = 0; c < nc; c++) {
        uint64_t at = cand[c];
        if (c > 0 && at == cand[c - 1])
            continue;
        while (hi < n && e[hi].off < at + w) {
            while (qt > qh && e[dq[qt - 1]].access_us <= e[hi].access_us)
                qt--;
            dq[qt++] = hi++;
        }
        while (lo < hi && e[lo].end <= at)
            lo++;
        while (qt > qh && dq[qh] < lo)
            qh++;
        wcost_t wc = {pin[hi] - pin[lo], qt > qh ? e[dq[qh]].access_us : 0, byt[hi] - byt[lo]};
        if (!*found || wcost_less(&wc, best)) {
            *best = wc;
            *best_at = at;
            *best_w = w;
            *found = 1;
        }
    }
    mc_free(cand), mc_free(dq), mc_free(pin), mc_free(byt);
    return MC_OK;
}

/* Walk 3: evict the evictable objects with a replica on slot overlapping
 * [w0, w1). */
static void evict_window(mc_master_t *m, uint32_t slot, uint64_t w0, uint64_t w1, uint64_t now_us,
                         uint64_t *keys, uint64_t *bytes)
{
    for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++) {
        shard_t *sh = &m->shards[s];
        shard_lock(sh);
        OTAB_WALK(&sh->tab, i, k)
        {
            otab_walk_prefetch(&sh->tab, i);
            obj_t *o = sh->tab.slots[i].obj;
            if (o == NULL || !evictable(m, o, now_us))
                continue;
            int hit = 0;
            for (uint32_t r = 0; r < o->nrep && !hit; r++)
                hit = o->rep[r].slot == slot && o->rep[r].offset < w1 &&
                      o->rep[r].offset + round_up8(o->size) > w0;
            if (hit)
                evict_obj(m, sh, o, sh->tab.slots[i].hash, now_us, keys, bytes);
        }
        otab_shrink(&sh->tab);
        shard_unlock(sh);
    }
}

/* Walk 1 and the choice of a segment: its slot, id and capacity, and its
 * non-evictable ranges (sorted) in fixed[*f0 .. *f1). 0: no gap fits. */
static int choose_segment(mc_master_t *m, const vec_t *fixedv, uint64_t need, uint32_t *slot,
                          mc_uuid_t *id, uint64_t *cap, size_t *f0, size_t *f1)
{
    const fixed_rng_t *f = fixedv->v;
    size_t nf = fixedv->n;
    uint64_t best_gap = 0;
    int found = 0;
    pthread_rwlock_rdlock(&m->seg_lock);
    for (uint32_t k = 0; k < m->nmounted; k++) {
        uint32_t sl = m->mounted[k];
        seg_t *sg = m->slots[sl];
        uint64_t c = mc_oalloc_capacity(sg->alloc);
        /* this slot's run of fixed ranges (binary search on the sorted array) */
        size_t a = 0, b = nf;
        while (a < b) {
            size_t mid = (a + b) / 2;
            if (f[mid].slot < sl)
                a = mid + 1;
            else
                b = mid;
        }
        size_t z = a;
        while (z < nf && f[z].slot == sl)
            z++;
        uint64_t prev = 0, gap = 0;
        for (size_t i = a; i < z; i++) {
            if (f[i].off > prev && f[i].off - prev > gap)
                gap = f[i].off - prev;
            if (f[i].end > prev)
                prev = f[i].end;
        }
        if (c > prev && c - prev > gap)
            gap = c - prev;
        if (gap >= need && gap > best_gap) {
            best_gap = gap;
            *slot = sl;
            *id = sg->id;
            *cap = c;
            *f0 = a;
            *f1 = z;
            found = 1;
        }
    }
    pthread_rwlock_unlock(&m->seg_lock);
    return found;
}

/* Whether a mounted segment has a free range of `need` bytes; its name
 * (the one with the largest such range) into seg_name. */
static int room_for(mc_master_t *m, uint64_t need, char *seg_name)
{
    uint64_t best = 0;
    pthread_rwlock_rdlock(&m->seg_lock);
    for (uint32_t k = 0; k < m->nmounted; k++) {
        seg_t *sg = m->slots[m->mounted[k]];
        pthread_spin_lock(&sg->lock);
        uint64_t f = mc_oalloc_largest_free(sg->alloc);
        pthread_spin_unlock(&sg->lock);
        if (f >= need && f > best) {
            best = f;
            snprintf(seg_name, MC_MASTER_NAME_MAX, "%s", sg->name);
        }
    }
    pthread_rwlock_unlock(&m->seg_lock);
    return best > 0;
}

int evict_for(mc_master_t *m, uint64_t size, uint64_t now_us, char *seg_name)
{
    uint64_t need = round_up8(size);
    int made = 0;
    /* larger than every segment: no eviction can help, and no walk either */
    uint64_t largest = 0;
    pthread_rwlock_rdlock(&m->seg_lock);
    for (uint32_t k = 0; k < m->nmounted; k++) {
        uint64_t c = mc_oalloc_capacity(m->slots[m->mounted[k]]->alloc);
        largest = c > largest ? c : largest;
    }
    pthread_rwlock_unlock(&m->seg_lock);
    if (need > largest)
        return 0;

    pthread_mutex_lock(&m->evict_lock);
    offload_cycle_start(m);
    vec_t fixedv = {.elem = sizeof(fixed_rng_t)}, evv = {.elem = sizeof(ev_rng_t)};
    if (now_us < atomic_load(&m->evict_nofit_until_us) && need >= m->evict_nofit_size)
        goto out;
    uint64_t gen = atomic_load(&m->evict_gen);
    if (collect_fixed(m, now_us, &fixedv) != MC_OK)
        goto out;
    qsort(fixedv.v, fixedv.n, sizeof(fixed_rng_t), fixed_cmp);
    uint32_t slot = 0;
    mc_uuid_t id = {0, 0};
    uint64_t cap = 0;
    size_t f0 = 0, f1 = 0;
    if (!choose_segment(m, &fixedv, need, &slot, &id, &cap, &f0, &f1)) {
        MC_DEBUG(MASTER, "no eviction can make room for %llu bytes", (unsigned long long)size);
        if (now_us >= atomic_load(&m->evict_nofit_until_us) || need < m->evict_nofit_size)
            m->evict_nofit_size = need;
        /* not when what the walk saw changed meanwhile (evict_backoff_end) */
        if (atomic_load(&m->evict_gen) == gen)
            atomic_store(&m->evict_nofit_until_us, now_us + IDLE_BACKOFF_US);
        goto out;
    }
    /* an eviction can make room: first the LRU round, which usually does
     * (values of one size, as KV-cache blocks are) */
    uint64_t keys = 0, bytes = 0;
    lru_round(m, now_us, 0, m->o.eviction_ratio, 0, &keys, &bytes);
    if (room_for(m, need, seg_name)) {
        MC_DEBUG(MASTER, "room for %llu bytes on '%s': an LRU round evicted %llu objects",
                 (unsigned long long)size, seg_name, (unsigned long long)keys);
        made = 1;
        goto out_count;
    }
    if (collect_evictable(m, slot, now_us, &evv) != MC_OK)
        goto out_count;
    ev_rng_t *e = evv.v;
    qsort(e, evv.n, sizeof(ev_rng_t), ev_cmp);
    /* the gaps of this segment, each with the evictable ranges inside it */
    const fixed_rng_t *f = fixedv.v;
    wcost_t best = {0};
    uint64_t best_at = 0, best_w = 0;
    int found = 0;
    uint64_t prev = 0;
    size_t ei = 0;
    for (size_t i = f0; i <= f1; i++) {
        uint64_t g0 = prev, g1 = i < f1 ? f[i].off : cap;
        if (i < f1 && f[i].end > prev)
            prev = f[i].end;
        if (g1 <= g0 || g1 - g0 < need)
            continue;
        while (ei < evv.n && e[ei].off < g0)
            ei++;
        size_t ej = ei;
        while (ej < evv.n && e[ej].end <= g1)
            ej++;
        if (best_window(e + ei, ej - ei, g0, g1, need, &best, &best_at, &best_w, &found) != MC_OK)
            goto out_count;
        ei = ej;
    }
    if (!found)
        goto out_count;

    pthread_rwlock_rdlock(&m->seg_lock);
    seg_t *sg = m->slots[slot];
    int same = sg != NULL && sg->state == SEG_MOUNTED && mc_uuid_eq(sg->id, id);
    if (same)
        snprintf(seg_name, MC_MASTER_NAME_MAX, "%s", sg->name);
    pthread_rwlock_unlock(&m->seg_lock);
    if (!same)
        goto out_count; /* unmounted meanwhile */
    if (best.bytes > 0)
        evict_window(m, slot, best_at, best_at + best_w, now_us, &keys, &bytes);
    MC_DEBUG(MASTER,
             "room for %llu bytes on '%s': the window [%llu, %llu) after an LRU round, %llu "
             "objects (%llu bytes) in all",
             (unsigned long long)size, seg_name, (unsigned long long)best_at,
             (unsigned long long)(best_at + best_w), (unsigned long long)keys,
             (unsigned long long)bytes);
    made = 1;
out_count:
    count_round(m, keys, bytes);
out:
    pthread_mutex_unlock(&m->evict_lock);
    mc_free(fixedv.v);
    mc_free(evv.v);
    return made;
}

/* Puts unfinished for put_start_discard_timeout are taken out of sight: the
 * key becomes free for a new put and a late PutEnd gets OBJECT_NOT_FOUND. The
 * space stays reserved until put start + put_start_release_timeout (see
 * discard_put): freeing it now would let a new put be placed where the slow
 * writer may still be writing, and two writers would overlap. */
void sweep_processing(mc_master_t *m, uint64_t now_us)
{
    uint64_t timeout = m->o.put_start_discard_timeout_us;
    for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++) {
        shard_t *sh = &m->shards[s];
        shard_lock(sh);
        /* a discard only turns its entry into a hole (and may move the head
         * past it): the slots of the snapshot [head, head + len) stay put */
        uint32_t head = sh->proc_head, len = sh->proc_len, mask = sh->proc_cap - 1;
        for (uint32_t k = 0; k < len; k++) {
            obj_t *o = sh->proc[(head + k) & mask];
            if (o != NULL && now_us > o->access_us + timeout) {
                MC_INFO(MASTER, "put of '%.*s' discarded: unfinished for %llu ms", (int)o->key_len,
                        obj_key(o), (unsigned long long)((now_us - o->access_us) / 1000));
                discard_put(m, sh, o, obj_hash(o));
            }
        }
        shard_unlock(sh);
    }
}

void release_parked(mc_master_t *m, uint64_t now_us)
{
    for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++) {
        shard_t *sh = &m->shards[s];
        shard_lock(sh);
        for (obj_t **pp = &sh->parked; *pp != NULL;) {
            obj_t *o = *pp;
            if (o->lease_us > now_us) {
                pp = &o->next_parked;
                continue;
            }
            *pp = o->next_parked;
            sh->nparked--;
            atomic_fetch_sub(&m->nparked_total, 1);
            atomic_fetch_add(&m->releases, 1);
            if (m->jfn != NULL && o->nrep > 0) {
                /* a standby parked it too (DROP park): free it there as well,
                 * before this space can be placed again */
                mc_master_jrec_t r = {
                    .type = MC_JREC_RELEASE, .key = obj_key(o), .key_len = o->key_len, .nrep = 1};
                pthread_rwlock_rdlock(&m->seg_lock);
                seg_t *sg = m->slots[o->rep[0].slot];
                pthread_rwlock_unlock(&m->seg_lock);
                if (sg != NULL) {
                    r.rep[0].segment_id = sg->id;
                    r.rep[0].offset = o->rep[0].offset;
                    journal(m, &r);
                }
            }
            obj_destroy(m, o);
        }
        shard_unlock(sh);
    }
}
