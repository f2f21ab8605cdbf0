/*
 * master_segments.c - segments: mount, remount, two-phase unmount with drain,
 * placement of replicas, and the per-replica allocator calls. See master.h.
 *
 * Locking. m->seg_lock (rwlock) guards the segment table; its read side is
 * taken by allocation, free and description (many threads at once), so each
 * segment's allocator has its own lock (seg->lock). Allocating under the
 * write lock instead would serialise every put of every shard on one lock.
 * State changes (mount, unmount phases) take the write lock. Shard locks come
 * before seg_lock, so the unmount never holds the write lock while it visits
 * shards: phase 1 marks the segment UNMOUNTING under the write lock (no
 * allocation can pick it from then on), releases it, then sweeps every shard
 * under that shard's lock, dropping the segment's replicas.
 *
 * Why the sweep sees every replica: a put allocates and inserts its object in
 * one critical section of the key's shard lock; if it allocated on the segment
 * it did so before phase 1, and the sweep reaches that shard after the put has
 * released it. Every other path touches replicas only under their shard lock.
 *
 * Drain. The sweep also records the latest read lease among the objects that
 * had a replica on the segment (and forcibly removed leased objects parked on
 * it). Readers given those addresses may still be transferring until then;
 * the segment record stays, UNMOUNTING, until that instant, and a re-mount of
 * its id (or of an overlapping range by the same owner) is refused meanwhile,
 * so the memory cannot be handed to a new writer under a reader's feet.
 */
#include <stdio.h>
#include <string.h>

#include "store/master_int.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

#define MAX_ALLOCS_MIN 1024u
#define MAX_ALLOCS_MAX (16u << 20)

seg_t *seg_find(mc_master_t *m, mc_uuid_t id)
{
    uint64_t h = uuid_hash(id);
    mc_hnode_t *n;
    MC_HMAP_FOREACH_HASH(&m->seg_by_id, n, h)
    {
        seg_t *s = MC_CONTAINER_OF(n, seg_t, node);
        if (mc_uuid_eq(s->id, id))
            return s;
    }
    return NULL;
}

static int seg_same(const seg_t *s, mc_uuid_t owner, const mc_master_segment_t *d)
{
    const char *ep = d->te_endpoint ? d->te_endpoint : "";
    return mc_uuid_eq(s->owner, owner) && s->base == d->base && s->size == d->size &&
           strcmp(s->name, d->name) == 0 && strcmp(s->endpoint, ep) == 0;
}

static mc_status_t seg_check(const mc_master_segment_t *d)
{
    if (d == NULL || mc_uuid_is_zero(d->id) || d->name == NULL || d->base == 0 ||
        d->size < MC_OALLOC_ALIGN || d->base + d->size < d->base)
        return MC_ERR_INVALID_PARAMS;
    size_t nl = strnlen(d->name, MC_MASTER_NAME_MAX);
    size_t el = d->te_endpoint ? strnlen(d->te_endpoint, MC_MASTER_NAME_MAX) : 0;
    if (nl == 0 || nl == MC_MASTER_NAME_MAX || el == MC_MASTER_NAME_MAX)
        return MC_ERR_INVALID_PARAMS;
    return MC_OK;
}

static uint32_t max_allocs_for(const mc_master_t *m, uint64_t size)
{
    if (m->o.max_allocs_per_segment != 0)
        return m->o.max_allocs_per_segment;
    /* about one allocation per 4 KiB (the small end of KV-cache chunks); the
     * node table is reserved, not touched, until used */
    uint64_t n = size / 4096;
    if (n < MAX_ALLOCS_MIN)
        n = MAX_ALLOCS_MIN;
    if (n > MAX_ALLOCS_MAX)
        n = MAX_ALLOCS_MAX;
    return (uint32_t)n;
}

static void seg_free(seg_t *s)
{
    mc_oalloc_destroy(s->alloc);
    pthread_spin_destroy(&s->lock);
    mc_free(s->name);
    mc_free(s);
}

/* Write lock held. Room for one more slot and one more mounted entry. */
static mc_status_t table_reserve(mc_master_t *m, uint32_t *slot)
{
    for (uint32_t i = 0; i < m->nslots; i++) {
        if (m->slots[i] == NULL) {
            *slot = i;
            goto mounted;
        }
    }
    seg_t **ns = mc_realloc(m->slots, (m->nslots + 1) * sizeof(*ns));
    if (ns == NULL)
        return MC_ERR_NOMEM;
    m->slots = ns;
    m->slots[m->nslots] = NULL;
    *slot = m->nslots++;
mounted:
    if (m->nmounted == m->mounted_cap) {
        uint32_t ncap = m->mounted_cap ? m->mounted_cap * 2 : 16;
        uint32_t *nm = mc_realloc(m->mounted, ncap * sizeof(*nm));
        if (nm == NULL)
            return MC_ERR_NOMEM;
        m->mounted = nm;
        m->mounted_cap = ncap;
    }
    return MC_OK;
}

/* client_lock held (so the owner cannot expire half-way); takes the write lock. */
static mc_status_t mount_locked(mc_master_t *m, mc_uuid_t client, const mc_master_segment_t *d)
{
    mc_status_t st;
    const char *ep = d->te_endpoint ? d->te_endpoint : "";
    pthread_rwlock_wrlock(&m->seg_lock);
    seg_t *s = seg_find(m, d->id);
    if (s != NULL) {
        if (s->state == SEG_UNMOUNTING)
            st = MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
        else
            st = seg_same(s, client, d) ? MC_OK : MC_ERR_SEGMENT_ALREADY_EXISTS;
        goto out_unlock;
    }
    /* a name is a host: another live client's mounted segment of the same
     * name means two processes claim one identity (the same local_hostname
     * or port): refused, so the second one stops instead of sharing it
     * (mounted segments of an expired client are gone: its owner is alive) */
    uint64_t nh = mc_hash64(d->name, strlen(d->name));
    for (uint32_t k = 0; k < m->nmounted; k++) {
        seg_t *o = m->slots[m->mounted[k]];
        if (o->name_hash == nh && strcmp(o->name, d->name) == 0 && !mc_uuid_eq(o->owner, client)) {
            MC_WARN(MASTER,
                    "segment '%s' refused: client %016llx-%016llx already has a segment of that "
                    "name (endpoint '%s')",
                    d->name, (unsigned long long)o->owner.hi, (unsigned long long)o->owner.lo,
                    o->endpoint);
            st = MC_ERR_SEGMENT_ALREADY_EXISTS;
            goto out_unlock;
        }
    }
    /* the owner's memory under a draining segment may still be read */
    for (uint32_t i = 0; i < m->nslots; i++) {
        seg_t *o = m->slots[i];
        if (o != NULL && o->state == SEG_UNMOUNTING && mc_uuid_eq(o->owner, client) &&
            d->base < o->base + o->size && o->base < d->base + d->size) {
            st = MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
            goto out_unlock;
        }
    }

    uint32_t slot;
    st = table_reserve(m, &slot);
    if (st != MC_OK)
        goto err_unlock;
    st = MC_ERR_NOMEM;
    s = MC_NEW(seg_t);
    if (s == NULL)
        goto err_unlock;
    size_t nl = strlen(d->name), el = strlen(ep);
    s->name = mc_malloc(nl + el + 2);
    if (s->name == NULL)
        goto err_free_seg;
    memcpy(s->name, d->name, nl + 1);
    s->endpoint = s->name + nl + 1;
    memcpy(s->endpoint, ep, el + 1);
    /* INVALID_PARAMS when max_allocs_per_segment is beyond the allocator */
    st = mc_oalloc_create(d->size, max_allocs_for(m, d->size), &s->alloc);
    if (st != MC_OK)
        goto err_free_name;
    pthread_spin_init(&s->lock, PTHREAD_PROCESS_PRIVATE);
    s->id = d->id;
    s->owner = client;
    s->name_hash = mc_hash64(s->name, nl);
    s->base = d->base;
    s->size = d->size;
    s->slot = slot;
    s->state = SEG_MOUNTED;
    m->slots[slot] = s;
    offload_seg_mounted(m, s); /* its name's DELETEs from before */
    s->mounted_idx = m->nmounted;
    m->mounted[m->nmounted++] = slot;
    mc_hmap_insert(&m->seg_by_id, &s->node, uuid_hash(s->id));
    atomic_fetch_add(&m->capacity, s->size);
    if (m->jfn != NULL) {
        /* under the write lock: before any put can be placed in it */
        mc_master_jrec_t r = {.type = MC_JREC_MOUNT, .client = client, .seg = *d};
        journal(m, &r);
    }
    pthread_rwlock_unlock(&m->seg_lock);
    MC_INFO(MASTER, "segment '%s' (%016llx-%016llx) mounted: %llu bytes at 0x%llx, endpoint '%s'",
            s->name, (unsigned long long)s->id.hi, (unsigned long long)s->id.lo,
            (unsigned long long)s->size, (unsigned long long)s->base, s->endpoint);
    return MC_OK;

err_free_name:
    mc_free(s->name);
err_free_seg:
    mc_free(s);
err_unlock:
    pthread_rwlock_unlock(&m->seg_lock);
    MC_ERROR(MASTER, "mounting segment '%s' failed: %s", d->name, mc_status_str(st));
    return st;
out_unlock:
    pthread_rwlock_unlock(&m->seg_lock);
    return st;
}

int mc_master_segment_holder(mc_master_t *m, const char *name, mc_uuid_t client, mc_uuid_t *holder,
                             char *endpoint, size_t room)
{
    int found = 0;
    uint64_t nh = mc_hash64(name, strlen(name));
    pthread_rwlock_rdlock(&m->seg_lock);
    for (uint32_t k = 0; k < m->nmounted && !found; k++) {
        seg_t *o = m->slots[m->mounted[k]];
        if (o->name_hash == nh && strcmp(o->name, name) == 0 && !mc_uuid_eq(o->owner, client)) {
            *holder = o->owner;
            snprintf(endpoint, room, "%s", o->endpoint);
            found = 1;
        }
    }
    pthread_rwlock_unlock(&m->seg_lock);
    return found;
}

mc_status_t mc_master_mount_segment(mc_master_t *m, mc_uuid_t client,
                                    const mc_master_segment_t *seg, uint64_t now_us)
{
    if (mc_uuid_is_zero(client) || seg_check(seg) != MC_OK)
        return MC_ERR_INVALID_PARAMS;
    pthread_mutex_lock(&m->client_lock);
    /* a client that mounts is alive and talking to this master: OK at once
     * (upstream answers its first ping with NEED_REMOUNT and a no-op remount) */
    client_t *c = client_get_or_add(m, client, now_us, MC_MASTER_CLIENT_OK);
    mc_status_t st = c != NULL ? mount_locked(m, client, seg) : MC_ERR_NOMEM;
    if (st == MC_OK && c->status != MC_MASTER_CLIENT_OK) {
        /* registered before by its metadata backend's first put (or, on a
         * standby, by that record's replay): a client with a mounted
         * segment is known. A NEED_REMOUNT now would tell it that we forgot
         * its segments (after every HA failover, too), and it would close
         * its connections before mounting again (store/client.c) */
        c->status = MC_MASTER_CLIENT_OK;
        m->active_clients++;
    }
    pthread_mutex_unlock(&m->client_lock);
    return st;
}

mc_status_t mc_master_remount_segments(mc_master_t *m, mc_uuid_t client,
                                       const mc_master_segment_t *segs, size_t n, uint64_t now_us)
{
    if (mc_uuid_is_zero(client) || (n > 0 && segs == NULL))
        return MC_ERR_INVALID_PARAMS;
    mc_status_t rc = MC_OK;
    pthread_mutex_lock(&m->client_lock);
    client_t *c = client_get_or_add(m, client, now_us, MC_MASTER_CLIENT_NEED_REMOUNT);
    if (c == NULL) {
        rc = MC_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        mc_status_t st = seg_check(&segs[i]);
        if (st == MC_OK)
            st = mount_locked(m, client, &segs[i]);
        if (st == MC_ERR_NOMEM) {
            rc = st;
            goto out;
        }
        if (st == MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS) {
            rc = st; /* still draining: the client retries the whole remount */
        } else if (st != MC_OK) {
            MC_WARN(MASTER, "remount: segment '%s' skipped: %s",
                    segs[i].name ? segs[i].name : "(null)", mc_status_str(st));
        }
    }
    if (rc == MC_OK && c->status != MC_MASTER_CLIENT_OK) {
        c->status = MC_MASTER_CLIENT_OK;
        m->active_clients++;
    }
out:
    pthread_mutex_unlock(&m->client_lock);
    return rc;
}

/* ---- unmount ---- */

/* Write lock held: phase 1. */
static void prepare(mc_master_t *m, seg_t *s)
{
    if (m->jfn != NULL) {
        mc_master_jrec_t r = {.type = MC_JREC_UNMOUNT, .client = s->owner, .segment_id = s->id};
        journal(m, &r);
    }
    s->state = SEG_UNMOUNTING;
    /* its node's DELETEs wait for its node's next segment (that may mount
     * as soon as this one leaves `mounted`, while this one drains) */
    offload_seg_going(m, s);
    s->swept = 0;
    s->drain_until_us = 0;
    uint32_t last = m->mounted[--m->nmounted];
    m->mounted[s->mounted_idx] = last;
    m->slots[last]->mounted_idx = s->mounted_idx;
    /* take its bytes out of the pool totals now, so the watermark does not
     * see this segment's allocations against the rest's capacity (a spurious
     * eviction). Frees on an UNMOUNTING segment skip the global counter. */
    atomic_fetch_sub(&m->capacity, s->size);
    atomic_fetch_sub(&m->allocated, s->used);
    atomic_fetch_add(&m->ndraining, 1);
    MC_INFO(MASTER, "segment '%s' (%016llx-%016llx) unmounting", s->name,
            (unsigned long long)s->id.hi, (unsigned long long)s->id.lo);
}

/* Write lock held: the segment leaves the table. */
static void commit(mc_master_t *m, seg_t *s)
{
    MC_INFO(MASTER, "segment '%s' (%016llx-%016llx) unmounted", s->name,
            (unsigned long long)s->id.hi, (unsigned long long)s->id.lo);
    mc_hmap_remove(&m->seg_by_id, &s->node);
    offload_seg_going(m, s); /* DELETEs queued while it drained */
    offload_seg_free(m, s);
    m->slots[s->slot] = NULL;
    atomic_fetch_sub(&m->ndraining, 1);
    seg_free(s);
}

static int slot_index(const uint32_t *slots, size_t n, uint32_t slot)
{
    for (size_t i = 0; i < n; i++)
        if (slots[i] == slot)
            return (int)i;
    return -1;
}

/* Drop o's replicas on the given slots (read lock held); raise drain[] by the
 * instant until which a reader may still use them. Returns replicas left. */
static uint32_t drop_replicas(mc_master_t *m, obj_t *o, const uint32_t *slots, size_t n,
                              uint64_t *drain)
{
    uint32_t k = 0;
    for (uint32_t r = 0; r < o->nrep; r++) {
        int j = slot_index(slots, n, o->rep[r].slot);
        if (j < 0) {
            o->rep[k++] = o->rep[r];
            continue;
        }
        /* a complete object's lease covers its readers; a forcibly removed
         * one keeps its lease as the release time. Writers get no grace. */
        uint64_t busy = o->state == OBJ_COMPLETE || o->state == OBJ_PARKED_LEASE ? o->lease_us : 0;
        if (busy > drain[j])
            drain[j] = busy;
        replica_free(m, &o->rep[r], o->size);
    }
    o->nrep = (uint8_t)k;
    return k;
}

static void sweep_shard(mc_master_t *m, shard_t *sh, const uint32_t *slots, size_t n,
                        uint64_t *drain)
{
    shard_lock(sh);
    pthread_rwlock_rdlock(&m->seg_lock);
    OTAB_WALK(&sh->tab, i, k)
    {
        otab_walk_prefetch(&sh->tab, i);
        obj_t *o = sh->tab.slots[i].obj;
        if (o != NULL && o->ldisk != 0)
            ldisk_drop_slots(m, o, slots, n); /* its node is going */
        if (o != NULL && drop_replicas(m, o, slots, n, drain) == 0 && !o->disk && !obj_ldisk(o)) {
            /* nothing left to read: the object is lost with its segment
             * (an unfinished put's PutEnd will get OBJECT_NOT_FOUND) */
            obj_unlink(m, sh, o, sh->tab.slots[i].hash);
            mc_free(o);
        }
    }
    otab_shrink(&sh->tab);
    for (obj_t **pp = &sh->parked; *pp != NULL;) {
        obj_t *o = *pp;
        if (drop_replicas(m, o, slots, n, drain) == 0) {
            *pp = o->next_parked;
            sh->nparked--;
            atomic_fetch_sub(&m->nparked_total, 1);
            atomic_fetch_add(&m->releases, 1);
            mc_free(o);
        } else {
            pp = &o->next_parked;
        }
    }
    pthread_rwlock_unlock(&m->seg_lock);
    shard_unlock(sh);
}

void segs_sweep_finish(mc_master_t *m, const uint32_t *slots, size_t n, uint64_t now_us)
{
    uint64_t drain_small[4] = {0};
    uint64_t *drain = n <= 4 ? drain_small : mc_calloc(n, sizeof(*drain));
    if (drain == NULL) {
        /* cannot track per segment: assume the longest possible lease */
        for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++) {
            uint64_t d = 0;
            for (size_t i = 0; i < n; i++)
                sweep_shard(m, &m->shards[s], &slots[i], 1, &d);
        }
    } else {
        for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++)
            sweep_shard(m, &m->shards[s], slots, n, drain);
    }

    pthread_rwlock_wrlock(&m->seg_lock);
    for (size_t i = 0; i < n; i++) {
        seg_t *s = m->slots[slots[i]];
        s->drain_until_us = drain ? drain[i] : now_us + m->o.lease_ttl_us;
        s->swept = 1;
        if (s->drain_until_us <= now_us)
            commit(m, s);
        else
            MC_INFO(MASTER, "segment '%s' draining for %llu ms: readers hold leases", s->name,
                    (unsigned long long)((s->drain_until_us - now_us) / 1000));
    }
    pthread_rwlock_unlock(&m->seg_lock);
    if (drain != drain_small)
        mc_free(drain);
}

mc_status_t mc_master_unmount_segment(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                      uint64_t now_us, uint64_t *drain_until_us)
{
    pthread_rwlock_wrlock(&m->seg_lock);
    seg_t *s = seg_find(m, segment_id);
    mc_status_t st = MC_OK;
    if (s == NULL) {
        st = MC_ERR_SEGMENT_NOT_FOUND;
    } else if (!mc_uuid_eq(s->owner, client)) {
        st = MC_ERR_ILLEGAL_CLIENT;
    } else if (s->state == SEG_UNMOUNTING) {
        if (s->swept) {
            if (drain_until_us != NULL)
                *drain_until_us = s->drain_until_us;
        } else {
            st = MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
        }
    } else {
        uint32_t slot = s->slot;
        prepare(m, s);
        pthread_rwlock_unlock(&m->seg_lock);
        segs_sweep_finish(m, &slot, 1, now_us);
        /* the record may be gone (committed) or draining */
        pthread_rwlock_rdlock(&m->seg_lock);
        s = seg_find(m, segment_id);
        if (drain_until_us != NULL)
            *drain_until_us = s != NULL ? s->drain_until_us : now_us;
    }
    pthread_rwlock_unlock(&m->seg_lock);
    return st;
}

mc_status_t segs_prepare_owner(mc_master_t *m, mc_uuid_t owner, uint32_t **slots, size_t *n,
                               size_t *cap)
{
    pthread_rwlock_wrlock(&m->seg_lock);
    size_t cnt = 0;
    for (uint32_t i = 0; i < m->nslots; i++)
        if (m->slots[i] != NULL && m->slots[i]->state == SEG_MOUNTED &&
            mc_uuid_eq(m->slots[i]->owner, owner))
            cnt++;
    if (*n + cnt > *cap) {
        uint32_t *ns = mc_realloc(*slots, (*n + cnt) * sizeof(*ns));
        if (ns == NULL) {
            pthread_rwlock_unlock(&m->seg_lock);
            MC_ERROR(MASTER, "out of memory while unmounting the segments of an expired client");
            return MC_ERR_NOMEM;
        }
        *slots = ns;
        *cap = *n + cnt;
    }
    for (uint32_t i = 0; i < m->nslots; i++) {
        seg_t *s = m->slots[i];
        if (s != NULL && s->state == SEG_MOUNTED && mc_uuid_eq(s->owner, owner)) {
            prepare(m, s);
            (*slots)[(*n)++] = i;
        }
    }
    pthread_rwlock_unlock(&m->seg_lock);
    return MC_OK;
}

void segs_commit_drained(mc_master_t *m, uint64_t now_us)
{
    if (atomic_load_explicit(&m->ndraining, memory_order_relaxed) == 0)
        return;
    pthread_rwlock_wrlock(&m->seg_lock);
    for (uint32_t i = 0; i < m->nslots; i++) {
        seg_t *s = m->slots[i];
        if (s != NULL && s->state == SEG_UNMOUNTING && s->swept && s->drain_until_us <= now_us)
            commit(m, s);
    }
    pthread_rwlock_unlock(&m->seg_lock);
}

void segs_fini(mc_master_t *m)
{
    for (uint32_t i = 0; i < m->nslots; i++)
        if (m->slots[i] != NULL)
            seg_free(m->slots[i]);
    mc_free(m->slots);
    mc_free(m->mounted);
    mc_hmap_fini(&m->seg_by_id);
}

/* ---- placement and replicas (read lock held) ---- */

int try_alloc(mc_master_t *m, seg_t *s, uint64_t size, replica_t *r)
{
    mc_oalloc_handle_t h;
    pthread_spin_lock(&s->lock);
    mc_status_t st = mc_oalloc_alloc(s->alloc, size, &h);
    if (st == MC_OK)
        s->used += size;
    pthread_spin_unlock(&s->lock);
    if (st != MC_OK)
        return 0;
    r->slot = s->slot;
    r->node = h.node;
    r->offset = h.offset;
    atomic_fetch_add_explicit(&m->allocated, size, memory_order_relaxed);
    return 1;
}

mc_status_t replica_reserve(mc_master_t *m, mc_uuid_t id, uint64_t offset, uint64_t size,
                            replica_t *r)
{
    seg_t *s = seg_find(m, id);
    if (s == NULL || s->state != SEG_MOUNTED)
        return MC_ERR_SEGMENT_NOT_FOUND;
    mc_oalloc_handle_t h;
    pthread_spin_lock(&s->lock);
    mc_status_t st = mc_oalloc_reserve(s->alloc, offset, size, &h);
    if (st == MC_OK)
        s->used += size;
    pthread_spin_unlock(&s->lock);
    if (st != MC_OK)
        return st;
    r->slot = s->slot;
    r->node = h.node;
    r->offset = h.offset;
    atomic_fetch_add_explicit(&m->allocated, size, memory_order_relaxed);
    return MC_OK;
}

/* One replica per segment name: a name is a host (upstream: ip:port), and two
 * replicas on one host protect against nothing. */
static int name_taken(const mc_master_t *m, const replica_t *reps, uint32_t n, const seg_t *s)
{
    for (uint32_t i = 0; i < n; i++) {
        const seg_t *o = m->slots[reps[i].slot];
        if (o->name_hash == s->name_hash && strcmp(o->name, s->name) == 0)
            return 1;
    }
    return 0;
}

uint32_t place_replicas(mc_master_t *m, uint64_t size, const mc_master_put_cfg_t *cfg,
                        uint32_t want, replica_t *out)
{
    uint32_t n = 0;
    /* preferred names first, in the caller's order */
    for (size_t p = 0; p < cfg->n_preferred && n < want; p++) {
        const char *name = cfg->preferred_segments[p];
        if (name == NULL)
            continue;
        uint64_t h = mc_hash64(name, strlen(name));
        for (uint32_t k = 0; k < m->nmounted; k++) {
            seg_t *s = m->slots[m->mounted[k]];
            if (s->name_hash != h || strcmp(s->name, name) != 0)
                continue;
            if (name_taken(m, out, n, s))
                break;
            if (try_alloc(m, s, size, &out[n])) {
                n++;
                break;
            }
        }
    }
    if (n == want || m->nmounted == 0)
        return n;
    /* then a bounded circular walk from a random mounted segment */
    uint32_t tries =
        m->nmounted < m->o.placement_max_tries ? m->nmounted : m->o.placement_max_tries;
    uint32_t start = (uint32_t)(rng_next() % m->nmounted);
    for (uint32_t i = 0; i < tries && n < want; i++) {
        seg_t *s = m->slots[m->mounted[(start + i) % m->nmounted]];
        if (!name_taken(m, out, n, s) && try_alloc(m, s, size, &out[n]))
            n++;
    }
    return n;
}

void replica_free(mc_master_t *m, const replica_t *r, uint64_t size)
{
    seg_t *s = m->slots[r->slot];
    mc_oalloc_handle_t h = {.offset = r->offset, .node = r->node};
    pthread_spin_lock(&s->lock);
    mc_oalloc_free(s->alloc, h);
    s->used -= size;
    pthread_spin_unlock(&s->lock);
    /* an UNMOUNTING segment's bytes already left the total at phase 1 */
    if (s->state == SEG_MOUNTED)
        atomic_fetch_sub_explicit(&m->allocated, size, memory_order_relaxed);
}

int replica_readable(const mc_master_t *m, const replica_t *r)
{
    return m->slots[r->slot]->state == SEG_MOUNTED;
}

void replica_describe(const mc_master_t *m, const replica_t *r, uint64_t size, int status,
                      mc_master_replica_desc_t *d)
{
    const seg_t *s = m->slots[r->slot];
    d->address = s->base + r->offset;
    d->size = size;
    d->segment_id = s->id;
    d->status = (mc_master_replica_status_t)status;
    d->kind = MC_MASTER_REPLICA_MEMORY;
    /* lengths checked at mount: < MC_MASTER_NAME_MAX */
    memcpy(d->segment_name, s->name, strlen(s->name) + 1);
    memcpy(d->te_endpoint, s->endpoint, strlen(s->endpoint) + 1);
}

void mc_master_foreach_segment(mc_master_t *m, mc_master_segment_cb_t cb, void *arg)
{
    pthread_rwlock_rdlock(&m->seg_lock);
    for (uint32_t i = 0; i < m->nslots; i++) {
        seg_t *s = m->slots[i];
        if (s == NULL)
            continue;
        mc_master_segment_info_t info = {
            .id = s->id,
            .owner = s->owner,
            .name = s->name,
            .te_endpoint = s->endpoint,
            .base = s->base,
            .size = s->size,
            .unmounting = s->state == SEG_UNMOUNTING,
            .drain_until_us = s->drain_until_us,
        };
        pthread_spin_lock(&s->lock);
        info.used = s->used;
        info.allocs = mc_oalloc_live(s->alloc);
        pthread_spin_unlock(&s->lock);
        if (cb(arg, &info) != 0)
            break;
    }
    pthread_rwlock_unlock(&m->seg_lock);
}
