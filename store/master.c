/*
 * master.c - the master's lifetime, options, clients and liveness, the tick
 * that runs background work, and statistics. See master.h.
 *
 * Files: master_objects.c (put/get/exist/remove), master_segments.c (mount,
 * unmount, placement), master_evict.c (eviction, abandoned puts, reserved
 * space), master_meta.c (metadata KV); master_int.h holds what they share.
 */
#include "store/master.h"

#include <string.h>

#include "store/master_int.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define SEC 1000000ull

void mc_master_opts_init(mc_master_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->lease_ttl_us = 5 * SEC;
    o->lease_release = 1;
    o->soft_pin_ttl_us = 30 * 60 * SEC;
    o->max_soft_pin_ttl_us = 24 * 3600 * SEC;
    o->allow_evict_soft_pinned = 1;
    o->eviction_ratio = 0.05;
    /* upstream's flag says 0.90 now; 0.95 keeps 5% more of the pool in use and
     * the allocation-failure path still evicts on demand */
    o->eviction_high_watermark = 0.95;
    o->client_ttl_us = 10 * SEC;
    o->put_start_discard_timeout_us = 30 * SEC;
    o->put_start_release_timeout_us = 600 * SEC;
    o->max_key_len = 4096;
    /* an object is one contiguous range in one segment, and the largest segment
     * the seed quotes is 64 GB; the cap mostly rejects nonsense sizes */
    o->max_object_size = 64ull << 30;
    o->max_replicas = MC_MASTER_MAX_REPLICAS;
    o->max_allocs_per_segment = 0;
    o->placement_max_tries = 100; /* upstream kMaxRetryLimit */
    o->regex_max_results = 10000;
    mc_regex_limits_init(&o->regex);
    o->evict_sample_max = 1u << 20;
    o->meta_max_value_len = 16u << 20;
    o->meta_max_entries = 65536;
    o->meta_max_bytes = 256u << 20;
    o->offloading_queue_limit = 50000; /* upstream's default */
    o->offload_cap_ratio = 0.5;
    o->offload_timeout_us = 30 * SEC;
    o->promotion_admission_threshold = 2;
}

void mc_master_put_cfg_init(mc_master_put_cfg_t *c)
{
    memset(c, 0, sizeof(*c));
    c->replica_num = 1;
}

static mc_status_t check_opts(const mc_master_opts_t *o)
{
    if (o->lease_ttl_us == 0 || o->client_ttl_us == 0)
        return MC_ERR_INVALID_PARAMS;
    if (o->soft_pin_ttl_us > o->max_soft_pin_ttl_us ||
        o->max_soft_pin_ttl_us / 1000 >= MC_MASTER_PIN_HARD) /* pin_ttl_ms is 32 bits */
        return MC_ERR_INVALID_PARAMS;
    if (!(o->eviction_ratio >= 0.0 && o->eviction_ratio <= 1.0) ||
        !(o->eviction_high_watermark >= 0.0 && o->eviction_high_watermark <= 1.0))
        return MC_ERR_INVALID_PARAMS;
    /* the release must come after the discard: the point of the gap is that a
     * slow writer is never overlapped by a new allocation */
    if (o->put_start_release_timeout_us <= o->put_start_discard_timeout_us)
        return MC_ERR_INVALID_PARAMS;
    if (o->max_key_len == 0 || o->max_key_len > UINT16_MAX)
        return MC_ERR_INVALID_PARAMS;
    if (o->max_object_size == 0 || o->max_object_size > (UINT64_MAX >> 4))
        return MC_ERR_INVALID_PARAMS;
    if (o->max_replicas == 0 || o->max_replicas > MC_MASTER_MAX_REPLICAS)
        return MC_ERR_INVALID_PARAMS;
    if (o->placement_max_tries == 0 || o->evict_sample_max == 0)
        return MC_ERR_INVALID_PARAMS;
    if (o->regex.max_len == 0 || o->regex.match_limit == 0 || o->regex.depth_limit == 0 ||
        o->regex.heap_limit_kib == 0 || o->regex.compile_mem == 0)
        return MC_ERR_INVALID_PARAMS;
    return MC_OK;
}

mc_status_t mc_master_create(const mc_master_opts_t *opts, int64_t view_version, mc_master_t **out)
{
    mc_status_t st = check_opts(opts);
    if (st != MC_OK) {
        MC_ERROR(MASTER, "invalid master options");
        return st;
    }
    mc_master_t *m = MC_NEW(mc_master_t);
    if (m == NULL)
        goto err_nomem;
    m->o = *opts;
    m->view_version = view_version;
    /* shard_t is cache-line aligned; malloc promises 16 bytes */
    m->shards_mem = mc_calloc(1, MC_MASTER_NUM_SHARDS * sizeof(shard_t) + _Alignof(shard_t) - 1);
    if (m->shards_mem == NULL)
        goto err_free_m;
    m->shards = (shard_t *)(((uintptr_t)m->shards_mem + _Alignof(shard_t) - 1) &
                            ~(uintptr_t)(_Alignof(shard_t) - 1));
    unsigned i;
    for (i = 0; i < MC_MASTER_NUM_SHARDS; i++) {
        if (otab_init(&m->shards[i].tab) != MC_OK)
            goto err_fini_shards;
        pthread_mutex_init(&m->shards[i].lock, NULL);
    }
    if (mc_hmap_init(&m->seg_by_id, 16) != MC_OK)
        goto err_fini_shards;
    if (mc_hmap_init(&m->clients, 16) != MC_OK)
        goto err_fini_segs;
    if (mc_hmap_init(&m->meta, 16) != MC_OK)
        goto err_fini_clients;
    /* writer-preferring: under constant put traffic the read side is never
     * idle, and a mount or unmount must not starve. No path takes the read
     * side recursively (that would deadlock behind a waiting writer). */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&m->seg_lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&m->client_lock, NULL);
    pthread_mutex_init(&m->meta_lock, NULL);
    pthread_mutex_init(&m->evict_lock, NULL);
    pthread_mutex_init(&m->offload_lock, NULL);
    MC_INFO(MASTER, "master created: view version %lld, %u shards", (long long)view_version,
            MC_MASTER_NUM_SHARDS);
    *out = m;
    return MC_OK;

err_fini_clients:
    mc_hmap_fini(&m->clients);
err_fini_segs:
    mc_hmap_fini(&m->seg_by_id);
err_fini_shards:
    while (i-- > 0) {
        pthread_mutex_destroy(&m->shards[i].lock);
        otab_fini(&m->shards[i].tab);
    }
    mc_free(m->shards_mem);
err_free_m:
    mc_free(m);
err_nomem:
    MC_ERROR(MASTER, "out of memory while creating the master");
    return MC_ERR_NOMEM;
}

static void shard_fini(shard_t *sh)
{
    /* allocators go with their segments: objects are just freed */
    for (uint32_t i = 0; i <= sh->tab.mask; i++)
        mc_free(sh->tab.slots[i].obj);
    for (obj_t *o = sh->parked, *next; o != NULL; o = next) {
        next = o->next_parked;
        mc_free(o);
    }
    otab_fini(&sh->tab);
    mc_free(sh->proc);
    pthread_mutex_destroy(&sh->lock);
}

void mc_master_destroy(mc_master_t *m)
{
    if (m == NULL)
        return;
    for (unsigned i = 0; i < MC_MASTER_NUM_SHARDS; i++)
        shard_fini(&m->shards[i]);
    mc_free(m->shards_mem);
    offload_fini(m);
    segs_fini(m);
    size_t i;
    mc_hnode_t *n, *next;
    for (i = 0; i <= m->clients.mask; i++) {
        for (n = m->clients.buckets[i]; n != NULL; n = next) {
            next = n->next;
            mc_free(MC_CONTAINER_OF(n, client_t, node));
        }
    }
    mc_hmap_fini(&m->clients);
    meta_fini(m);
    pthread_rwlock_destroy(&m->seg_lock);
    pthread_mutex_destroy(&m->client_lock);
    pthread_mutex_destroy(&m->meta_lock);
    pthread_mutex_destroy(&m->evict_lock);
    pthread_mutex_destroy(&m->offload_lock);
    mc_free(m);
}

/* ---- small shared helpers ---- */

int key_valid(const mc_master_t *m, const char *key, size_t len)
{
    return key != NULL && len > 0 && len <= m->o.max_key_len && memchr(key, '\0', len) == NULL;
}

uint64_t uuid_hash(mc_uuid_t id)
{
    return mc_hash_u64(id.hi ^ mc_hash_u64(id.lo));
}

void shard_lock(shard_t *sh)
{
    pthread_mutex_lock(&sh->lock);
    sh->locks++;
}

void shard_unlock(shard_t *sh)
{
    pthread_mutex_unlock(&sh->lock);
}

shard_t *shard_lock_key(mc_master_t *m, const char *key, size_t len, uint64_t *h)
{
    uint64_t hv = mc_hash64(key, len);
    shard_t *sh = &m->shards[shard_of(hv)];
    shard_lock(sh);
    if (h != NULL)
        *h = hv;
    return sh;
}

obj_t *obj_lock_find(mc_master_t *m, const char *key, size_t len, shard_t **sh, uint64_t *h)
{
    uint64_t hv;
    *sh = shard_lock_key(m, key, len, &hv);
    if (h != NULL)
        *h = hv;
    return otab_find(&(*sh)->tab, hv, key, len);
}

/* xorshift64*, one stream per thread: placement and eviction start points only
 * need to be spread, not unpredictable. */
uint64_t rng_next(void)
{
    static _Thread_local uint64_t s;
    if (s == 0)
        s = mc_hash_u64(mc_now_ns() ^ (uint64_t)(uintptr_t)&s) | 1;
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
}

/* ---- clients ---- */

static client_t *client_find(mc_master_t *m, mc_uuid_t id)
{
    uint64_t h = uuid_hash(id);
    mc_hnode_t *n;
    MC_HMAP_FOREACH_HASH(&m->clients, n, h)
    {
        client_t *c = MC_CONTAINER_OF(n, client_t, node);
        if (mc_uuid_eq(c->id, id))
            return c;
    }
    return NULL;
}

/* client_lock held. Returns the client (existing ones keep their status), or
 * NULL when out of memory. Any contact counts as a sign of life. */
client_t *client_get_or_add(mc_master_t *m, mc_uuid_t id, uint64_t now_us, int status)
{
    client_t *c = client_find(m, id);
    if (c == NULL) {
        c = MC_NEW(client_t);
        if (c == NULL)
            return NULL;
        c->id = id;
        c->status = status;
        if (status == MC_MASTER_CLIENT_OK)
            m->active_clients++;
        mc_hmap_insert(&m->clients, &c->node, uuid_hash(id));
        MC_INFO(MASTER, "client %016llx-%016llx registered (%s)", (unsigned long long)id.hi,
                (unsigned long long)id.lo, status == MC_MASTER_CLIENT_OK ? "ok" : "need remount");
    }
    if (now_us > c->last_ping_us)
        c->last_ping_us = now_us;
    return c;
}

void mc_master_ping(mc_master_t *m, mc_uuid_t client, uint64_t now_us, int64_t *view_version,
                    mc_master_client_status_t *status)
{
    mc_master_client_status_t s = MC_MASTER_CLIENT_NEED_REMOUNT;
    pthread_mutex_lock(&m->client_lock);
    /* an unknown client is tracked from its first ping, as NEED_REMOUNT, so
     * that what it owns (metadata KV entries) expires if it falls silent */
    client_t *c = client_get_or_add(m, client, now_us, MC_MASTER_CLIENT_NEED_REMOUNT);
    if (c != NULL)
        s = (mc_master_client_status_t)c->status;
    pthread_mutex_unlock(&m->client_lock);
    if (view_version != NULL)
        *view_version = __atomic_load_n(&m->view_version, __ATOMIC_ACQUIRE);
    if (status != NULL)
        *status = s;
}

/* Expire clients silent for client_ttl: forget them (their next ping says
 * NEED_REMOUNT), unmount their segments, delete their metadata KV entries.
 * Phase 1 of the unmounts and the KV deletion happen under client_lock, so a
 * mount or meta_put racing with the expiry either lands before it (and is
 * undone) or re-registers the client after it; the long part, dropping
 * replicas from every shard, runs after the lock is released. */
static void expire_clients(mc_master_t *m, uint64_t now_us)
{
    uint32_t *slots = NULL;
    size_t nslots = 0, slots_cap = 0;

    pthread_mutex_lock(&m->client_lock);
    for (size_t i = 0; i <= m->clients.mask; i++) {
        mc_hnode_t *n = m->clients.buckets[i], *next;
        for (; n != NULL; n = next) {
            next = n->next;
            client_t *c = MC_CONTAINER_OF(n, client_t, node);
            if (now_us <= c->last_ping_us + m->o.client_ttl_us)
                continue;
            if (segs_prepare_owner(m, c->id, &slots, &nslots, &slots_cap) != MC_OK)
                continue; /* out of memory: try again at the next tick */
            MC_WARN(MASTER, "client %016llx-%016llx expired: silent for %llu ms",
                    (unsigned long long)c->id.hi, (unsigned long long)c->id.lo,
                    (unsigned long long)((now_us - c->last_ping_us) / 1000));
            mc_master_jrec_t r = {.type = MC_JREC_CLIENT_EXPIRE, .client = c->id};
            journal(m, &r);
            meta_drop_owner(m, c->id);
            if (c->status == MC_MASTER_CLIENT_OK)
                m->active_clients--;
            mc_hmap_remove(&m->clients, n);
            mc_free(c);
        }
    }
    pthread_mutex_unlock(&m->client_lock);
    if (nslots > 0)
        segs_sweep_finish(m, slots, nslots, now_us);
    mc_free(slots);
}

/* ---- journal ---- */

void mc_master_set_journal(mc_master_t *m, mc_master_journal_fn_t fn, void *arg)
{
    m->jarg = arg;
    m->jfn = fn;
}

int64_t mc_master_view_version(mc_master_t *m)
{
    return __atomic_load_n(&m->view_version, __ATOMIC_ACQUIRE);
}

void mc_master_set_view_version(mc_master_t *m, int64_t v)
{
    __atomic_store_n(&m->view_version, v, __ATOMIC_RELEASE);
}

void mc_master_touch_clients(mc_master_t *m, uint64_t now_us)
{
    pthread_mutex_lock(&m->client_lock);
    for (size_t i = 0; i <= m->clients.mask; i++)
        for (mc_hnode_t *n = m->clients.buckets[i]; n != NULL; n = n->next) {
            client_t *c = MC_CONTAINER_OF(n, client_t, node);
            if (c->last_ping_us < now_us)
                c->last_ping_us = now_us;
        }
    pthread_mutex_unlock(&m->client_lock);
}

/* A client the leader expired: as expire_clients does for one client (its
 * segments' UNMOUNT records came first, so they are mostly gone already). */
static mc_status_t apply_expire(mc_master_t *m, mc_uuid_t id, uint64_t now_us)
{
    uint32_t *slots = NULL;
    size_t nslots = 0, cap = 0;
    mc_status_t st = MC_OK;
    pthread_mutex_lock(&m->client_lock);
    client_t *c = client_find(m, id);
    st = segs_prepare_owner(m, id, &slots, &nslots, &cap);
    if (st == MC_OK) {
        meta_drop_owner(m, id);
        if (c != NULL) {
            if (c->status == MC_MASTER_CLIENT_OK)
                m->active_clients--;
            mc_hmap_remove(&m->clients, &c->node);
            mc_free(c);
        }
    }
    pthread_mutex_unlock(&m->client_lock);
    if (nslots > 0)
        segs_sweep_finish(m, slots, nslots, now_us);
    mc_free(slots);
    return st;
}

mc_status_t mc_master_apply(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us)
{
    mc_status_t st;
    switch (r->type) {
    case MC_JREC_MOUNT:
        st = mc_master_mount_segment(m, r->client, &r->seg, now_us);
        return st == MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS ? MC_ERR_EXISTS : st;
    case MC_JREC_UNMOUNT:
        st = mc_master_unmount_segment(m, r->client, r->segment_id, now_us, NULL);
        /* a replay never waits for readers: it has none */
        segs_commit_drained(m, UINT64_MAX);
        return st == MC_ERR_SEGMENT_NOT_FOUND ? MC_OK : st;
    case MC_JREC_PUT_START:
        return apply_put_start(m, r, now_us);
    case MC_JREC_PUT_END:
        st = apply_put_end(m, r, now_us);
        return st == MC_ERR_OBJECT_NOT_FOUND ? MC_OK : st; /* lost to an unmount */
    case MC_JREC_DROP:
        return apply_drop(m, r);
    case MC_JREC_RELEASE:
        return apply_release(m, r);
    case MC_JREC_CLIENT_EXPIRE:
        return apply_expire(m, r->client, now_us);
    case MC_JREC_META_PUT:
        return meta_apply_put(m, r, now_us);
    case MC_JREC_META_DEL:
        st = meta_apply_del(m, r);
        return st == MC_ERR_NOT_FOUND ? MC_OK : st;
    case MC_JREC_DISK:
        return apply_disk(m, r, now_us);
    case MC_JREC_SPILL:
        return apply_spill(m, r);
    case MC_JREC_LDISK:
        return apply_ldisk(m, r, now_us);
    case MC_JREC_LDISK_DROP:
        return apply_ldisk_drop(m, r);
    case MC_JREC_LOAD:
        return apply_load(m, r);
    case MC_JREC_SEG_DISK:
        return apply_seg_disk(m, r);
    case MC_JREC_OFFDEL:
        return apply_offdel(m, r);
    case MC_JREC_OFFLOST:
        return apply_offlost(m, r);
    }
    return MC_ERR_INVALID_PARAMS;
}

/* ---- tick ---- */

void mc_master_tick(mc_master_t *m, uint64_t now_us)
{
    expire_clients(m, now_us);
    segs_commit_drained(m, now_us);
    if (atomic_load_explicit(&m->nproc_total, memory_order_relaxed) != 0)
        sweep_processing(m, now_us);
    if (atomic_load_explicit(&m->nparked_total, memory_order_relaxed) != 0)
        release_parked(m, now_us);
    offload_tick(m, now_us);

    uint64_t cap = atomic_load_explicit(&m->capacity, memory_order_relaxed);
    uint64_t used = atomic_load_explicit(&m->allocated, memory_order_relaxed);
    double ratio = cap ? (double)used / (double)cap : 0.0;
    double er = m->o.eviction_ratio, hw = m->o.eviction_high_watermark;
    /* only above the watermark: a put that found no room made its own room
     * already if any eviction could (evict_for); nothing is remembered */
    if (er <= 0.0 || ratio <= hw)
        return;
    /* upstream: evict more the further past the watermark we are */
    double target = er;
    if (ratio > hw && ratio - hw + er > target)
        target = ratio - hw + er;
    if (target > 1.0)
        target = 1.0;
    evict_pass(m, now_us, target);
}

/* ---- statistics ---- */

static const uint64_t value_bounds[MC_MASTER_VALUE_BUCKETS] = {
    4ull << 10, 64ull << 10, 256ull << 10, 1ull << 20,
    4ull << 20, 16ull << 20, 64ull << 20,  UINT64_MAX,
};

uint64_t mc_master_value_bucket_bound(unsigned i)
{
    return i < MC_MASTER_VALUE_BUCKETS ? value_bounds[i] : UINT64_MAX;
}

void mc_master_get_stats(mc_master_t *m, mc_master_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    out->view_version = __atomic_load_n(&m->view_version, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < MC_MASTER_NUM_SHARDS; i++) {
        shard_t *sh = &m->shards[i];
        pthread_mutex_lock(&sh->lock); /* not shard_lock: do not count ourselves */
        out->key_count += sh->tab.count;
        out->processing_count += sh->nproc;
        out->soft_pinned_count += sh->npinned;
        out->parked_count += sh->nparked;
        out->shard_locks += sh->locks;
        for (unsigned b = 0; b < MC_MASTER_VALUE_BUCKETS; b++) {
            out->value_size_buckets[b] += sh->vbuckets[b];
            out->value_size_count += sh->vbuckets[b];
        }
        out->value_size_sum += sh->vsum;
        pthread_mutex_unlock(&sh->lock);
    }
    pthread_rwlock_rdlock(&m->seg_lock);
    out->segment_count = m->nmounted;
    for (uint32_t s = 0; s < m->nslots; s++)
        if (m->slots[s] != NULL && m->slots[s]->state == SEG_UNMOUNTING)
            out->unmounting_count++;
    out->allocated_bytes = atomic_load(&m->allocated);
    out->capacity_bytes = atomic_load(&m->capacity);
    pthread_rwlock_unlock(&m->seg_lock);
    pthread_mutex_lock(&m->client_lock);
    out->active_clients = m->active_clients;
    pthread_mutex_unlock(&m->client_lock);
    out->eviction_attempts = atomic_load(&m->evict_attempts);
    out->eviction_successes = atomic_load(&m->evict_successes);
    out->evicted_keys = atomic_load(&m->evicted_keys);
    out->evicted_bytes = atomic_load(&m->evicted_bytes);
    out->put_start_discards = atomic_load(&m->discards);
    out->put_start_releases = atomic_load(&m->releases);
}
