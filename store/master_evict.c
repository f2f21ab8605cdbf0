/*
 * master_evict.c - eviction, abandoned puts and reserved ("parked") space.
 * See master.h (mc_master_tick) and seed-store-spec.md §6.
 *
 * Eviction is approximate LRU on last access (put end or get). One pass:
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

static int eligible(const obj_t *o, uint64_t now_us)
{
    return o->state == OBJ_COMPLETE && o->nrep > 0 && !obj_leased(o, now_us) &&
           o->pin_ttl_ms != MC_MASTER_PIN_HARD;
}

/* Evict from every shard, starting at a random one, the eligible objects of
 * the given kind (pinned or not) accessed at or before thr, until *left is 0. */
static void evict_walk(mc_master_t *m, uint64_t now_us, int pinned, uint64_t thr, uint64_t *left,
                       uint64_t *keys, uint64_t *bytes)
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
            if (o == NULL || !eligible(o, now_us) || obj_pinned(o, now_us) != pinned ||
                o->access_us > thr)
                continue;
            *bytes += o->size * o->nrep;
            (*keys)++;
            (*left)--;
            if (o->disk) {
                obj_spill(m, o); /* stays readable from its file */
                continue;
            }
            obj_unlink(m, sh, o, sh->tab.slots[j].hash);
            obj_destroy(m, o);
        }
        otab_shrink(&sh->tab);
        shard_unlock(sh);
    }
}

/* A pass visits every object, so it must not run once per failing put: when
 * nothing is evictable (everything leased or in progress) every PutStart would
 * scan the whole table. A pass that evicted nothing holds further passes off
 * for IDLE_BACKOFF_US; an on-demand pass (PutStart) reuses one that ended
 * less than FRESH_US ago or is running right now. */
#define IDLE_BACKOFF_US 100000u
#define FRESH_US 10000u

uint64_t evict_pass(mc_master_t *m, uint64_t now_us, double ratio, int on_demand)
{
    if (now_us < atomic_load(&m->evict_idle_until_us))
        return 0;
    if (on_demand) {
        uint64_t last = atomic_load(&m->evict_last_us);
        if (last != 0 && now_us >= last && now_us - last < FRESH_US)
            return 0;
        if (pthread_mutex_trylock(&m->evict_lock) != 0) {
            /* someone is evicting: wait for that pass rather than run another */
            pthread_mutex_lock(&m->evict_lock);
            pthread_mutex_unlock(&m->evict_lock);
            return 0;
        }
    } else {
        pthread_mutex_lock(&m->evict_lock);
    }

    int allow_pinned = m->o.allow_evict_soft_pinned;
    sample_t su = {.max = m->o.evict_sample_max}, sp = {.max = m->o.evict_sample_max};
    uint64_t keys = 0, bytes = 0;
    atomic_fetch_add(&m->evict_attempts, 1);
    for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++) {
        shard_t *sh = &m->shards[s];
        shard_lock(sh);
        OTAB_WALK(&sh->tab, i, k)
        {
            otab_walk_prefetch(&sh->tab, i);
            obj_t *o = sh->tab.slots[i].obj;
            if (o == NULL || !eligible(o, now_us))
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
    if (target > 0) {
        uint64_t left = target;
        uint64_t thr_u = threshold(&su, target, su.seen);
        evict_walk(m, now_us, 0, thr_u, &left, &keys, &bytes);
        /* soft-pinned ones only once every unpinned candidate is gone */
        if (left > 0 && target > su.seen && sp.seen > 0) {
            uint64_t thr_p = threshold(&sp, target - su.seen, sp.seen);
            evict_walk(m, now_us, 1, thr_p, &left, &keys, &bytes);
        }
    }
    atomic_store(&m->evict_last_us, now_us);
    atomic_store(&m->evict_idle_until_us, keys > 0 ? 0 : now_us + IDLE_BACKOFF_US);
    pthread_mutex_unlock(&m->evict_lock);
    mc_free(su.v);
    mc_free(sp.v);

    if (keys > 0) {
        atomic_fetch_add(&m->evict_successes, 1);
        atomic_fetch_add(&m->evicted_keys, keys);
        atomic_fetch_add(&m->evicted_bytes, bytes);
        MC_DEBUG(MASTER, "eviction: %llu of %llu eligible objects, %llu bytes",
                 (unsigned long long)keys, (unsigned long long)total, (unsigned long long)bytes);
    } else if (total > 0) {
        MC_DEBUG(MASTER, "eviction: nothing evicted of %llu eligible objects",
                 (unsigned long long)total);
    }
    return keys;
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
