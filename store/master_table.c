/*
 * master_table.c - a shard's object table (see otab_t in master_int.h).
 *
 * Open addressing with linear probing, Robin Hood ordering and backward-shift
 * deletion (no tombstones). Each slot holds the key's 64-bit hash next to the
 * object pointer, so probes compare hashes inside the table's own cache lines
 * and an object is read only on a full-hash match: looking up an absent key
 * (every put start) costs about one cache line, and resizing never touches an
 * object. Robin Hood ordering keeps every entry within a short distance of its
 * home slot and lets a miss stop at the first entry that is closer to its own
 * home than the probe is to the key's: about 2.5 slots at the maximum load.
 *
 * Loads. The table grows (doubles) before an insert would pass 3/4, and
 * otab_shrink() (after a bulk removal pass over the shard) halves it once if
 * the load is under 1/8, never below OTAB_MIN_SLOTS: one step per pass, so a
 * store emptied and refilled (RemoveAll, a flush) does not pay for the whole
 * regrowth, while repeated passes still give the memory back. 16 bytes per slot at loads between
 * 3/8 and 3/4 is 21-43 bytes per object; the chained map this replaced cost 16 bytes in every
 * object plus 8-16 of bucket array, and a miss walked every chained object of the bucket.
 *
 * Home slot: the top bits of the hash (the shard takes the low ones). Entries
 * then sit in hash order, and doubling maps slot i to 2i or 2i + 1, so a
 * rebuild streams through both arrays instead of scattering writes over a
 * table far bigger than the caches.
 */
#include <assert.h>
#include <string.h>

#include "store/master_int.h"
#include "util/mem.h"

#define OTAB_MIN_SLOTS 8u

/* A slot array and its geometry: the table's, or one being built. */
typedef struct geom {
    otab_slot_t *slots;
    uint32_t mask, shift;
} geom_t;

static geom_t geom_of(const otab_t *t)
{
    return (geom_t){t->slots, t->mask, t->shift};
}

/* How far slot i is from the home of the hash it holds. */
static inline uint32_t dist(geom_t g, uint32_t i)
{
    return (i - otab_home(g.slots[i].hash, g.shift)) & g.mask;
}

/* slots, mask and shift are also read without the shard lock by
 * otab_prefetch(), so they are written with atomic stores (plain moves on
 * every target we build for). */
static void set_geom(otab_t *t, otab_slot_t *slots, uint32_t nslots)
{
    __atomic_store_n(&t->slots, slots, __ATOMIC_RELAXED);
    __atomic_store_n(&t->mask, nslots - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&t->shift, (uint32_t)__builtin_clzll((unsigned long long)nslots) + 1,
                     __ATOMIC_RELAXED);
}

mc_status_t otab_init(otab_t *t)
{
    otab_slot_t *s = mc_calloc(OTAB_MIN_SLOTS, sizeof(*s));
    if (s == NULL)
        return MC_ERR_NOMEM;
    set_geom(t, s, OTAB_MIN_SLOTS);
    t->count = 0;
    return MC_OK;
}

void otab_fini(otab_t *t)
{
    mc_free(t->slots);
    t->slots = NULL;
    t->count = 0;
}

/* Robin Hood insert of an absent entry into an array with a free slot. */
static void place(geom_t g, uint64_t h, obj_t *o)
{
    uint32_t i = otab_home(h, g.shift), d = 0;
    for (;; i = (i + 1) & g.mask, d++) {
        otab_slot_t *s = &g.slots[i];
        if (s->obj == NULL) {
            s->hash = h;
            s->obj = o;
            return;
        }
        uint32_t sd = dist(g, i);
        if (sd < d) {
            /* the resident is richer (nearer its home): the newcomer takes its
             * slot and the resident moves on */
            otab_slot_t tmp = *s;
            s->hash = h;
            s->obj = o;
            h = tmp.hash;
            o = tmp.obj;
            d = sd;
        }
    }
}

static mc_status_t rebuild(otab_t *t, uint32_t nslots)
{
    otab_slot_t *ns = mc_calloc(nslots, sizeof(*ns));
    if (ns == NULL)
        return MC_ERR_NOMEM;
    otab_t nt;
    set_geom(&nt, ns, nslots);
    /* in slot order = hash order (but for a cluster wrapping past the end):
     * the writes advance through the new array too */
    for (uint32_t i = 0; i <= t->mask; i++)
        if (t->slots[i].obj != NULL)
            place(geom_of(&nt), t->slots[i].hash, t->slots[i].obj);
    mc_free(t->slots);
    set_geom(t, ns, nslots);
    return MC_OK;
}

mc_status_t otab_reserve(otab_t *t)
{
    uint64_t cap = (uint64_t)t->mask + 1;
    if (((uint64_t)t->count + 1) * 4 <= cap * 3)
        return MC_OK;
    if (cap > UINT32_MAX / 2)
        return MC_ERR_NOMEM; /* 2^31 slots in one shard: not a real workload */
    return rebuild(t, (uint32_t)cap * 2);
}

void otab_shrink(otab_t *t)
{
    uint32_t cap = t->mask + 1;
    if (cap > OTAB_MIN_SLOTS && (uint64_t)t->count * 8 < cap)
        rebuild(t, cap / 2); /* out of memory: keep the bigger table */
}

obj_t *otab_find(const otab_t *t, uint64_t h, const char *key, size_t len)
{
    geom_t g = geom_of(t);
    uint32_t i = otab_home(h, g.shift);
    for (uint32_t d = 0;; d++, i = (i + 1) & g.mask) {
        const otab_slot_t *s = &g.slots[i];
        /* an empty slot, or an entry nearer its home than we are to ours:
         * the key would have taken that slot */
        if (s->obj == NULL || dist(g, i) < d)
            return NULL;
        if (s->hash == h && s->obj->key_len == len && memcmp(obj_key(s->obj), key, len) == 0)
            return s->obj;
    }
}

void otab_insert(otab_t *t, uint64_t h, obj_t *o)
{
    assert(((uint64_t)t->count + 1) * 4 <= ((uint64_t)t->mask + 1) * 3); /* otab_reserve */
    place(geom_of(t), h, o);
    t->count++;
}

void otab_remove(otab_t *t, uint64_t h, obj_t *o)
{
    geom_t g = geom_of(t);
    uint32_t i = otab_home(h, g.shift);
    while (g.slots[i].obj != o) {
        if (g.slots[i].obj == NULL) {
            assert(0 && "otab_remove: object not in the table");
            return;
        }
        i = (i + 1) & g.mask;
    }
    /* backward shift: pull the rest of the cluster one slot nearer home, up
     * to an empty slot or an entry already at its home */
    for (;;) {
        uint32_t n = (i + 1) & g.mask;
        if (g.slots[n].obj == NULL || dist(g, n) == 0)
            break;
        g.slots[i] = g.slots[n];
        i = n;
    }
    g.slots[i].obj = NULL;
    t->count--;
}

uint32_t otab_walk_start(const otab_t *t)
{
    uint32_t i = 0;
    while (t->slots[i].obj != NULL)
        i++; /* the load is at most 3/4: there is an empty slot */
    return i;
}
