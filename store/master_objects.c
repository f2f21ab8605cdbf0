/*
 * master_objects.c - objects: put (start/end/revoke), get, exist, remove and
 * their batch forms. See master.h. The regex forms and key listing are in
 * master_scan.c.
 *
 * Every per-key operation is a *_locked() function run with the key's shard
 * lock held; the single-key API locks around one call, the batch API sorts
 * its keys by shard and locks each shard once for all of its keys.
 */
#include <string.h>

#include "store/master_int.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

/* ---- object helpers ---- */

int obj_held(const obj_t *o, uint64_t now_us)
{
    /* upstream IsLeaseExpired is now >= lease_timeout */
    return o->state == OBJ_COMPLETE && now_us < o->lease_us;
}

int obj_leased(const obj_t *o, uint64_t now_us)
{
    /* every reader of the lease period released it: nobody reads it */
    return obj_held(o, now_us) && !(o->pin_ttl_ms == 0 && o->readers == 0);
}

int obj_pinned(const obj_t *o, uint64_t now_us)
{
    return o->state == OBJ_COMPLETE && o->pin_ttl_ms != 0 && now_us < o->pin_us;
}

static obj_t *obj_find(shard_t *sh, uint64_t h, const char *key, size_t len)
{
    return otab_find(&sh->tab, h, key, len);
}

uint64_t obj_hash(obj_t *o)
{
    return mc_hash64(obj_key(o), o->key_len);
}

/* Room to append one entry to the shard's proc ring: MC_OK or MC_ERR_NOMEM. A
 * full ring is repacked (live entries in order, holes dropped) into one at
 * least half free, so this runs once per (cap / 2) appends at most. */
static mc_status_t proc_reserve(shard_t *sh)
{
    if (sh->proc_len < sh->proc_cap)
        return MC_OK;
    uint32_t ncap = 8;
    while (ncap < 2 * (sh->nproc + 1))
        ncap *= 2;
    obj_t **np = mc_malloc(ncap * sizeof(*np));
    if (np == NULL)
        return MC_ERR_NOMEM;
    uint32_t n = 0;
    for (uint32_t k = 0; k < sh->proc_len; k++) {
        obj_t *o = sh->proc[(sh->proc_head + k) & (sh->proc_cap - 1)];
        if (o != NULL) {
            o->proc_idx = n;
            np[n++] = o;
        }
    }
    mc_free(sh->proc);
    sh->proc = np;
    sh->proc_cap = ncap;
    sh->proc_head = 0;
    sh->proc_len = n;
    return MC_OK;
}

static void proc_append(mc_master_t *m, shard_t *sh, obj_t *o)
{
    uint32_t idx = (sh->proc_head + sh->proc_len++) & (sh->proc_cap - 1);
    o->proc_idx = idx;
    sh->proc[idx] = o;
    sh->nproc++;
    atomic_fetch_add_explicit(&m->nproc_total, 1, memory_order_relaxed);
}

static void proc_remove(mc_master_t *m, shard_t *sh, obj_t *o)
{
    uint32_t mask = sh->proc_cap - 1;
    sh->proc[o->proc_idx] = NULL;
    sh->nproc--;
    while (sh->proc_len > 0 && sh->proc[sh->proc_head] == NULL) {
        sh->proc_head = (sh->proc_head + 1) & mask;
        sh->proc_len--;
    }
    atomic_fetch_sub_explicit(&m->nproc_total, 1, memory_order_relaxed);
}

void obj_unlink(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h)
{
    obj_unlink_j(m, sh, o, h, o->state == OBJ_PROCESSING);
}

void obj_unlink_j(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h, int park)
{
    if (m->jfn != NULL) {
        mc_master_jrec_t r = {
            .type = MC_JREC_DROP, .key = obj_key(o), .key_len = o->key_len, .park = park};
        journal(m, &r);
    }
    otab_remove(&sh->tab, h, o);
    if (o->disk)
        tier_dropped(m, o); /* its file goes with it */
    if (o->ldisk != 0)
        ldisk_dropped(m, o); /* its node deletes its file */
    if (o->state == OBJ_PROCESSING)
        proc_remove(m, sh, o);
    if (o->pin_ttl_ms != 0)
        sh->npinned--;
}

void obj_park(mc_master_t *m, shard_t *sh, obj_t *o, int state, uint64_t until)
{
    o->state = (uint8_t)state;
    o->lease_us = until;
    o->next_parked = sh->parked;
    sh->parked = o;
    sh->nparked++;
    atomic_fetch_add_explicit(&m->nparked_total, 1, memory_order_relaxed);
    if (state == OBJ_PARKED_WRITER)
        atomic_fetch_add_explicit(&m->discards, 1, memory_order_relaxed);
}

void obj_free_replicas(mc_master_t *m, obj_t *o)
{
    if (o->nrep == 0)
        return;
    pthread_rwlock_rdlock(&m->seg_lock);
    for (uint32_t i = 0; i < o->nrep; i++)
        replica_free(m, &o->rep[i], o->size);
    pthread_rwlock_unlock(&m->seg_lock);
    o->nrep = 0;
}

void obj_destroy(mc_master_t *m, obj_t *o)
{
    obj_free_replicas(m, o);
    mc_free(o);
}

/* Take a discarded or forcibly removed unfinished put out of sight; its space
 * stays reserved until put start + release timeout, because its writer may
 * still be writing into it and a new allocation must never overlap it. */
void discard_put(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h)
{
    uint64_t start = o->access_us;
    obj_unlink(m, sh, o, h);
    obj_park(m, sh, o, OBJ_PARKED_WRITER, start + m->o.put_start_release_timeout_us);
}

static void observe_size(shard_t *sh, uint64_t size)
{
    unsigned b = 0;
    while (b + 1 < MC_MASTER_VALUE_BUCKETS && size > mc_master_value_bucket_bound(b))
        b++;
    sh->vbuckets[b]++;
    sh->vsum += size;
}

static int pin_enabled(const mc_master_put_cfg_t *cfg)
{
    return cfg->with_soft_pin || cfg->pin_action == MC_MASTER_PIN_ENABLE;
}

static mc_status_t check_cfg(const mc_master_t *m, const mc_master_put_cfg_t *cfg)
{
    if (cfg == NULL || cfg->replica_num == 0 || cfg->replica_num > m->o.max_replicas)
        return MC_ERR_INVALID_PARAMS;
    if (cfg->n_preferred > 0 && cfg->preferred_segments == NULL)
        return MC_ERR_INVALID_PARAMS;
    /* upstream's checks: a known action, a TTL only with ENABLE */
    if (cfg->pin_action > MC_MASTER_PIN_DISABLE ||
        (cfg->with_soft_pin && cfg->pin_action == MC_MASTER_PIN_DISABLE) ||
        (cfg->soft_pin_ttl_us != 0 && !pin_enabled(cfg)))
        return MC_ERR_INVALID_PARAMS;
    return MC_OK;
}

static uint32_t pin_ttl_ms(const mc_master_t *m, const mc_master_put_cfg_t *cfg)
{
    if (!pin_enabled(cfg))
        return 0;
    uint64_t ttl = cfg->soft_pin_ttl_us ? cfg->soft_pin_ttl_us : m->o.soft_pin_ttl_us;
    if (ttl > m->o.max_soft_pin_ttl_us)
        ttl = m->o.max_soft_pin_ttl_us; /* clamp: a long pin is still a pin */
    ttl /= 1000;
    return ttl ? (uint32_t)ttl : 1; /* checked at create: fits in 32 bits */
}

static mc_status_t remove_obj(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h, int force,
                              uint64_t now_us);

/* ---- put ---- */

static mc_status_t put_start_locked(mc_master_t *m, shard_t *sh, uint64_t h, mc_uuid_t client,
                                    const char *key, size_t len, uint64_t size,
                                    const mc_master_put_cfg_t *cfg, uint64_t now_us,
                                    mc_master_replica_desc_t *out, uint32_t *nrep)
{
    obj_t *o = obj_find(sh, h, key, len);
    if (o != NULL && o->state == OBJ_PROCESSING && cfg->put_id != 0 && o->lease_us == cfg->put_id &&
        mc_uuid_eq(o->owner, client) && o->size == size) {
        /* the same put asked again (its answer was lost): the same replicas */
        pthread_rwlock_rdlock(&m->seg_lock);
        for (uint32_t i = 0; i < o->nrep; i++)
            replica_describe(m, &o->rep[i], size, MC_MASTER_REPLICA_PROCESSING, &out[i]);
        pthread_rwlock_unlock(&m->seg_lock);
        *nrep = o->nrep;
        return MC_OK;
    }
    uint32_t pin = cfg->hard_pin ? MC_MASTER_PIN_HARD : pin_ttl_ms(m, cfg);
    if (o != NULL && cfg->upsert) {
        /* replace: the old object goes as by a forced remove (a leased one
         * keeps its space until the lease ends), a put in progress is
         * pre-empted now; a hard pin stays, PRESERVE keeps a running soft pin */
        if (o->state == OBJ_COMPLETE && o->pin_ttl_ms == MC_MASTER_PIN_HARD)
            pin = MC_MASTER_PIN_HARD;
        else if (o->state == OBJ_COMPLETE && pin == 0 &&
                 cfg->pin_action == MC_MASTER_PIN_PRESERVE && obj_pinned(o, now_us))
            pin = o->pin_ttl_ms;
        remove_obj(m, sh, o, h, 1, now_us);
    } else if (o != NULL) {
        /* a finished object is never overwritten (remove it first); neither is
         * a put in progress, unless its writer has gone quiet for longer than
         * the discard timeout */
        if (o->state == OBJ_COMPLETE || now_us <= o->access_us + m->o.put_start_discard_timeout_us)
            return MC_ERR_OBJECT_ALREADY_EXISTS;
        MC_INFO(MASTER, "put of '%.*s' pre-empted: unfinished for %llu ms", (int)len, key,
                (unsigned long long)((now_us - o->access_us) / 1000));
        discard_put(m, sh, o, h);
    }

    if (otab_reserve(&sh->tab) != MC_OK)
        goto err_nomem;
    uint32_t want = cfg->replica_num;
    o = mc_malloc(sizeof(*o) + want * sizeof(replica_t) + len);
    if (o == NULL)
        goto err_nomem;
    if (proc_reserve(sh) != MC_OK)
        goto err_free_obj;

    pthread_rwlock_rdlock(&m->seg_lock);
    uint32_t n = place_replicas(m, size, cfg, want, o->rep);
    for (uint32_t i = 0; i < n; i++)
        replica_describe(m, &o->rep[i], size, MC_MASTER_REPLICA_PROCESSING, &out[i]);
    pthread_rwlock_unlock(&m->seg_lock);
    if (n == 0) {
        mc_free(o);
        return MC_ERR_NO_AVAILABLE_HANDLE;
    }

    o->size = size;
    o->owner = client;
    o->access_us = now_us; /* put start, while PROCESSING */
    o->lease_us = cfg->put_id;
    o->pin_us = 0;
    o->pin_ttl_ms = pin;
    o->key_len = (uint16_t)len;
    o->nrep = (uint8_t)n;
    o->rep_cap = (uint8_t)want;
    o->state = OBJ_PROCESSING;
    o->disk = 0;
    o->ldisk = 0;
    memcpy(obj_key(o), key, len);
    otab_insert(&sh->tab, h, o);
    proc_append(m, sh, o);
    if (o->pin_ttl_ms != 0)
        sh->npinned++;
    observe_size(sh, size);
    if (m->jfn != NULL) {
        mc_master_jrec_t r = {.type = MC_JREC_PUT_START,
                              .client = client,
                              .key = key,
                              .key_len = len,
                              .size = size,
                              .pin_ttl_ms = o->pin_ttl_ms,
                              .put_id = cfg->put_id,
                              .nrep = n};
        for (uint32_t i = 0; i < n; i++) {
            r.rep[i].segment_id = out[i].segment_id;
            r.rep[i].offset = o->rep[i].offset;
        }
        journal(m, &r);
    }
    *nrep = n;
    return MC_OK;

err_free_obj:
    mc_free(o);
err_nomem:
    MC_ERROR(MASTER, "out of memory while starting the put of '%.*s'", (int)len, key);
    return MC_ERR_NOMEM;
}

/* In the batch forms, key i's access (for LRU) is recorded BATCH_RANK(i)
 * microseconds before now: within one batch the later keys rank as less
 * recently used, so eviction takes a batch's tail before its head. A KV
 * cache writes and reads a prompt's blocks in prefix order, and a block is
 * of use only while every block before it is there: evicting a prefix's
 * head first (what equal times ranked at random, or in order, amount to)
 * leaves its tail stored and useless. Leases and soft pins still run from
 * now. perf/trace_replay --core: 0.95x -> 0.999x the hit rate of an ideal
 * LRU on the FAST'25 conversation trace at small capacities. */
#define BATCH_RANK(now_us, i) ((uint64_t)(i) < (now_us) ? (now_us) - (uint64_t)(i) : 0)

/* replay: a standby's (apply_put_end): no PERSIST queued. */
static mc_status_t put_end_locked(mc_master_t *m, shard_t *sh, uint64_t h, mc_uuid_t client,
                                  const char *key, size_t len, uint64_t now_us, uint64_t access_us,
                                  int replay)
{
    obj_t *o = obj_find(sh, h, key, len);
    if (o == NULL)
        return MC_ERR_OBJECT_NOT_FOUND;
    if (!mc_uuid_eq(o->owner, client)) {
        MC_WARN(MASTER, "put end of '%.*s' by a client that did not start it", (int)len, key);
        return MC_ERR_ILLEGAL_CLIENT;
    }
    if (o->state == OBJ_COMPLETE)
        return MC_OK; /* upstream: PutEnd is idempotent */
    proc_remove(m, sh, o);
    o->state = OBJ_COMPLETE;
    o->access_us = access_us;
    o->lease_us = 0; /* upstream GrantLease(0): expired, evictable at once */
    o->pin_us = o->pin_ttl_ms ? now_us + (uint64_t)o->pin_ttl_ms * 1000 : 0;
    if (m->jfn != NULL) {
        mc_master_jrec_t r = {
            .type = MC_JREC_PUT_END, .client = client, .key = key, .key_len = len};
        journal(m, &r);
    }
    if (m->o.enable_offload && !m->o.offload_on_evict && !replay)
        offload_after_put(m, o); /* eager offload */
    return MC_OK;
}

static mc_status_t put_revoke_locked(mc_master_t *m, shard_t *sh, uint64_t h, mc_uuid_t client,
                                     const char *key, size_t len)
{
    obj_t *o = obj_find(sh, h, key, len);
    if (o == NULL)
        return MC_ERR_OBJECT_NOT_FOUND;
    if (!mc_uuid_eq(o->owner, client)) {
        MC_WARN(MASTER, "put revoke of '%.*s' by a client that did not start it", (int)len, key);
        return MC_ERR_ILLEGAL_CLIENT;
    }
    if (o->state == OBJ_COMPLETE)
        return MC_ERR_INVALID_WRITE;
    /* the writer tells us it stopped: nothing can still write the space */
    obj_unlink_j(m, sh, o, h, 0);
    obj_destroy(m, o);
    return MC_OK;
}

/* ---- journal replay (standby) ---- */

mc_status_t apply_put_start(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us)
{
    if (!key_valid(m, r->key, r->key_len) || r->nrep == 0 || r->nrep > MC_MASTER_MAX_REPLICAS ||
        r->size == 0)
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = MC_ERR_NOMEM;
    uint64_t h;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, r->key, r->key_len, &sh, &h);
    if (o != NULL) {
        if (o->state == OBJ_COMPLETE) {
            /* the leader never overwrites a complete object: a DROP is missing */
            shard_unlock(sh);
            return MC_ERR_EXISTS;
        }
        discard_put(m, sh, o, h); /* pre-empted on the leader too */
    }
    if (otab_reserve(&sh->tab) != MC_OK || proc_reserve(sh) != MC_OK)
        goto out;
    o = mc_malloc(sizeof(*o) + r->nrep * sizeof(replica_t) + r->key_len);
    if (o == NULL)
        goto out;
    o->nrep = 0;
    o->size = r->size; /* obj_destroy frees by it */
    pthread_rwlock_rdlock(&m->seg_lock);
    for (uint32_t i = 0; i < r->nrep; i++) {
        st = replica_reserve(m, r->rep[i].segment_id, r->rep[i].offset, r->size, &o->rep[i]);
        if (st != MC_OK)
            break;
        o->nrep++;
    }
    pthread_rwlock_unlock(&m->seg_lock);
    if (st != MC_OK) {
        obj_destroy(m, o);
        goto out;
    }
    o->size = r->size;
    o->owner = r->client;
    o->access_us = now_us;
    o->lease_us = r->put_id;
    o->pin_us = 0;
    o->pin_ttl_ms = r->pin_ttl_ms;
    o->key_len = (uint16_t)r->key_len;
    o->rep_cap = (uint8_t)r->nrep;
    o->state = OBJ_PROCESSING;
    o->disk = 0; /* a DISK record follows when the object gets its file */
    o->ldisk = 0;
    memcpy(obj_key(o), r->key, r->key_len);
    otab_insert(&sh->tab, h, o);
    proc_append(m, sh, o);
    if (o->pin_ttl_ms != 0)
        sh->npinned++;
    observe_size(sh, r->size);
out:
    shard_unlock(sh);
    return st;
}

mc_status_t apply_release(mc_master_t *m, const mc_master_jrec_t *r)
{
    if (!key_valid(m, r->key, r->key_len) || r->nrep != 1)
        return MC_ERR_INVALID_PARAMS;
    shard_t *sh = shard_lock_key(m, r->key, r->key_len, NULL);
    pthread_rwlock_rdlock(&m->seg_lock);
    obj_t **pp = &sh->parked, *o = NULL;
    for (; *pp != NULL; pp = &(*pp)->next_parked) {
        obj_t *p = *pp;
        if (p->nrep > 0 && p->key_len == r->key_len &&
            memcmp(obj_key(p), r->key, r->key_len) == 0 && p->rep[0].offset == r->rep[0].offset &&
            m->slots[p->rep[0].slot] != NULL &&
            mc_uuid_eq(m->slots[p->rep[0].slot]->id, r->rep[0].segment_id)) {
            o = p;
            *pp = p->next_parked;
            break;
        }
    }
    pthread_rwlock_unlock(&m->seg_lock);
    if (o != NULL) {
        sh->nparked--;
        atomic_fetch_sub(&m->nparked_total, 1);
        atomic_fetch_add(&m->releases, 1);
        obj_destroy(m, o);
    }
    shard_unlock(sh);
    return MC_OK;
}

mc_status_t apply_drop(mc_master_t *m, const mc_master_jrec_t *r)
{
    if (!key_valid(m, r->key, r->key_len))
        return MC_ERR_INVALID_PARAMS;
    uint64_t h;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, r->key, r->key_len, &sh, &h);
    if (o != NULL) {
        if (o->state == OBJ_PROCESSING && r->park) {
            discard_put(m, sh, o, h);
        } else {
            obj_unlink(m, sh, o, h);
            obj_destroy(m, o);
        }
    }
    shard_unlock(sh);
    return MC_OK;
}

/* cfg with the one segment evict_for made room on as the only preference
 * (the caller's preferences had no room). */
static void prefer(const mc_master_put_cfg_t *cfg, mc_master_put_cfg_t *out, const char **name)
{
    *out = *cfg;
    out->preferred_segments = name;
    out->n_preferred = 1;
}

mc_status_t mc_master_put_start(mc_master_t *m, mc_uuid_t client, const char *key, size_t key_len,
                                uint64_t size, const mc_master_put_cfg_t *cfg, uint64_t now_us,
                                mc_master_replica_desc_t *out, uint32_t *nrep)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    mc_status_t st = check_cfg(m, cfg);
    if (st != MC_OK || size == 0 || size > m->o.max_object_size || out == NULL || nrep == NULL)
        return MC_ERR_INVALID_PARAMS;
    uint64_t h;
    shard_t *sh = shard_lock_key(m, key, key_len, &h);
    st = put_start_locked(m, sh, h, client, key, key_len, size, cfg, now_us, out, nrep);
    shard_unlock(sh);
    if (st == MC_ERR_NO_AVAILABLE_HANDLE && m->o.eviction_ratio > 0.0) {
        /* upstream only flags the eviction thread and fails; here the put
         * evicts what makes room for it, if anything can, and is retried on
         * the segment that has the room */
        char seg[MC_MASTER_NAME_MAX];
        if (evict_for(m, size, now_us, seg)) {
            mc_master_put_cfg_t there;
            const char *pref[1] = {seg};
            prefer(cfg, &there, pref);
            shard_lock(sh);
            st = put_start_locked(m, sh, h, client, key, key_len, size, &there, now_us, out, nrep);
            shard_unlock(sh);
        }
    }
    return st;
}

mc_status_t mc_master_put_end(mc_master_t *m, mc_uuid_t client, const char *key, size_t key_len,
                              uint64_t now_us)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    uint64_t h;
    shard_t *sh = shard_lock_key(m, key, key_len, &h);
    mc_status_t st = put_end_locked(m, sh, h, client, key, key_len, now_us, now_us, 0);
    shard_unlock(sh);
    return st;
}

mc_status_t apply_put_end(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us)
{
    if (!key_valid(m, r->key, r->key_len))
        return MC_ERR_INVALID_KEY;
    uint64_t h;
    shard_t *sh = shard_lock_key(m, r->key, r->key_len, &h);
    /* no eager PERSIST: the leader's is answered in the journal (LDISK) or
     * dies with it, and one queued here would be handed out as the new
     * leader long after, its bytes' place in the segment reused since */
    mc_status_t st = put_end_locked(m, sh, h, r->client, r->key, r->key_len, now_us, now_us, 1);
    shard_unlock(sh);
    return st;
}

mc_status_t mc_master_put_revoke(mc_master_t *m, mc_uuid_t client, const char *key, size_t key_len,
                                 uint64_t now_us)
{
    (void)now_us;
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    uint64_t h;
    shard_t *sh = shard_lock_key(m, key, key_len, &h);
    mc_status_t st = put_revoke_locked(m, sh, h, client, key, key_len);
    shard_unlock(sh);
    return st;
}

/* ---- get, exist, remove ---- */

/* The lease of a read: a lease period begins with the first grant on an
 * object whose lease has ended (its readers count starts over) and lasts
 * until the deadline (the latest grant + lease_ttl), or until every grant of
 * it was released, if all of them will be (see mc_master_batch_lease_release).
 * A soft-pinned object keeps the whole TTL (its pin_us is the pin's, so it
 * has no period start to check releases against). */
static void lease_grant(mc_master_t *m, obj_t *o, uint64_t now_us, int release)
{
    if (!obj_leased(o, now_us) || (o->pin_ttl_ms == 0 && (o->readers & READERS_LOADED))) {
        o->readers = 0;
        if (o->pin_ttl_ms == 0)
            o->period_us = now_us;
    }
    /* a lease never shrinks: another reader may hold the longer one */
    if (now_us + m->o.lease_ttl_us > o->lease_us)
        o->lease_us = now_us + m->o.lease_ttl_us;
    if (release && m->o.lease_release && o->pin_ttl_ms == 0 &&
        (o->readers & READERS_COUNT) < READERS_COUNT)
        o->readers++;
    else
        o->readers |= READERS_TTL;
}

/* Describe the readable replicas of a complete object and grant the read
 * lease; 0 replicas when all of them are on segments being unmounted. */
uint32_t read_grant(mc_master_t *m, obj_t *o, uint64_t now_us, mc_master_replica_desc_t *out,
                    uint32_t room, int release)
{
    uint32_t n = 0;
    pthread_rwlock_rdlock(&m->seg_lock);
    for (uint32_t i = 0; i < o->nrep && n < room; i++)
        if (replica_readable(m, &o->rep[i]))
            replica_describe(m, &o->rep[i], o->size, MC_MASTER_REPLICA_COMPLETE, &out[n++]);
    if (obj_ldisk(o) && n < room && ldisk_describe(m, o, &out[n]))
        n++; /* its node reads it from its disk */
    pthread_rwlock_unlock(&m->seg_lock);
    if (o->disk && n < room)
        tier_describe(o, &out[n++]); /* after the memory ones: the slowest to read */
    if (n == 0)
        return 0;
    lease_grant(m, o, now_us, release);
    if (o->pin_ttl_ms != 0 && now_us + (uint64_t)o->pin_ttl_ms * 1000 > o->pin_us)
        o->pin_us = now_us + (uint64_t)o->pin_ttl_ms * 1000;
    if (now_us > o->access_us)
        o->access_us = now_us;
    return n;
}

/* access_us: the access recorded for LRU (now, or BATCH_RANK of now). */
static mc_status_t get_locked(mc_master_t *m, shard_t *sh, uint64_t h, const char *key, size_t len,
                              uint64_t now_us, uint64_t access_us, mc_master_replica_desc_t *out,
                              uint32_t room, uint32_t *nrep, int release)
{
    obj_t *o = obj_find(sh, h, key, len);
    if (o == NULL)
        return MC_ERR_OBJECT_NOT_FOUND;
    if (o->state != OBJ_COMPLETE)
        return MC_ERR_REPLICA_IS_NOT_READY;
    uint64_t before = o->access_us;
    uint32_t n = read_grant(m, o, now_us, out, room, release);
    if (n == 0)
        return MC_ERR_OBJECT_NOT_FOUND; /* its last segments are being unmounted */
    if (access_us < now_us)             /* a batch's later key: never older than it was */
        o->access_us = access_us > before ? access_us : before;
    *nrep = n;
    return MC_OK;
}

static mc_status_t remove_obj(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h, int force,
                              uint64_t now_us)
{
    if (o->state == OBJ_PROCESSING) {
        if (!force)
            return MC_ERR_REPLICA_IS_NOT_READY;
        discard_put(m, sh, o, h);
        return MC_OK;
    }
    if (obj_leased(o, now_us) || (o->ldisk & LDISK_PENDING)) {
        if (!force)
            return MC_ERR_OBJECT_HAS_LEASE;
        /* gone for everyone now, but a reader may be mid-transfer: the space
         * is reused only after its lease (or, while its node may be reading
         * it to persist it, after the offload timeout) */
        uint64_t until = o->lease_us;
        if ((o->ldisk & LDISK_PENDING) && now_us + m->o.offload_timeout_us > until)
            until = now_us + m->o.offload_timeout_us;
        obj_unlink(m, sh, o, h);
        obj_park(m, sh, o, OBJ_PARKED_LEASE, until);
        return MC_OK;
    }
    obj_unlink(m, sh, o, h);
    obj_destroy(m, o);
    return MC_OK;
}

mc_status_t remove_locked(mc_master_t *m, shard_t *sh, uint64_t h, const char *key, size_t len,
                          int force, uint64_t now_us)
{
    obj_t *o = obj_find(sh, h, key, len);
    if (o == NULL)
        return MC_ERR_OBJECT_NOT_FOUND;
    return remove_obj(m, sh, o, h, force, now_us);
}

mc_status_t mc_master_get_replica_list(mc_master_t *m, const char *key, size_t key_len,
                                       uint64_t now_us, mc_master_replica_desc_t *out,
                                       uint32_t room, uint32_t *nrep, uint64_t *lease_ttl_us)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    if (room == 0 || out == NULL || nrep == NULL)
        return MC_ERR_INVALID_PARAMS;
    uint64_t h;
    shard_t *sh = shard_lock_key(m, key, key_len, &h);
    mc_status_t st = get_locked(m, sh, h, key, key_len, now_us, now_us, out, room, nrep, 0);
    shard_unlock(sh);
    if (st == MC_OK && lease_ttl_us != NULL)
        *lease_ttl_us = m->o.lease_ttl_us;
    return st;
}

mc_status_t mc_master_offload_list(mc_master_t *m, const char *key, size_t key_len, uint64_t now_us,
                                   int release, mc_master_replica_desc_t *out, uint32_t room,
                                   uint32_t *nrep, uint64_t *lease_ttl_us)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    if (room == 0 || out == NULL || nrep == NULL)
        return MC_ERR_INVALID_PARAMS;
    uint64_t h;
    shard_t *sh = shard_lock_key(m, key, key_len, &h);
    /* access 0: never newer than it was (get_locked) */
    mc_status_t st = get_locked(m, sh, h, key, key_len, now_us, 0, out, room, nrep, release);
    shard_unlock(sh);
    if (st == MC_OK && lease_ttl_us != NULL)
        *lease_ttl_us = m->o.lease_ttl_us;
    return st;
}

mc_status_t mc_master_query_key(mc_master_t *m, const char *key, size_t key_len,
                                mc_master_replica_desc_t *out, uint32_t room, uint32_t *nrep,
                                mc_master_key_info_t *info)
{
    /* For operators and tools (stat, /query_key): what a get would see, and
     * no more. No lease and no access: looking must not keep an object from
     * being removed or evicted, nor reorder the LRU. */
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    if ((room > 0 && out == NULL) || nrep == NULL || info == NULL)
        return MC_ERR_INVALID_PARAMS;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, key, key_len, &sh, NULL);
    if (o == NULL) {
        shard_unlock(sh);
        return MC_ERR_OBJECT_NOT_FOUND;
    }
    int complete = o->state == OBJ_COMPLETE;
    mc_master_replica_status_t rs =
        complete ? MC_MASTER_REPLICA_COMPLETE : MC_MASTER_REPLICA_PROCESSING;
    uint32_t n = 0;
    pthread_rwlock_rdlock(&m->seg_lock);
    for (uint32_t i = 0; i < o->nrep && n < room; i++)
        replica_describe(m, &o->rep[i], o->size, rs, &out[n++]);
    if (obj_ldisk(o) && n < room && ldisk_describe(m, o, &out[n]))
        n++;
    pthread_rwlock_unlock(&m->seg_lock);
    if (o->disk && n < room)
        tier_describe(o, &out[n++]);
    *nrep = n;
    info->key = NULL; /* the key lives under the shard lock: the caller has it */
    info->key_len = key_len;
    info->size = o->size;
    info->nrep = o->nrep;
    info->disk = o->disk;
    info->local_disk = obj_ldisk(o);
    info->complete = complete;
    info->lease_until_us = complete ? o->lease_us : 0;
    info->soft_pin_until_us = complete && o->pin_ttl_ms != 0 ? o->pin_us : 0;
    info->last_access_us = o->access_us;
    shard_unlock(sh);
    return MC_OK;
}

mc_status_t mc_master_exist_key(mc_master_t *m, const char *key, size_t key_len, uint64_t now_us,
                                int *exists)
{
    /* A pure query by design: upstream grants a lease here, and clients that
     * poll exist kept every object leased, so eviction found nothing to evict
     * (#2187). A lease protects a reader holding addresses; exist hands out
     * none. It is not counted as an access either, so polling does not reorder
     * the LRU. */
    (void)now_us;
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    if (exists == NULL)
        return MC_ERR_INVALID_PARAMS;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, key, key_len, &sh, NULL);
    *exists = o != NULL && o->state == OBJ_COMPLETE;
    shard_unlock(sh);
    return MC_OK;
}

mc_status_t mc_master_remove(mc_master_t *m, const char *key, size_t key_len, int force,
                             uint64_t now_us)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    uint64_t h;
    shard_t *sh = shard_lock_key(m, key, key_len, &h);
    mc_status_t st = remove_locked(m, sh, h, key, key_len, force, now_us);
    shard_unlock(sh);
    return st;
}

/* ---- batches ---- */

/* Hash the valid keys and order their indices by shard (counting sort), so a
 * batch takes each shard lock once. st[i] becomes MC_OK for a valid key (to be
 * overwritten by the operation) and INVALID_KEY otherwise; invalid keys are
 * left out of *order. *hash (n entries) and *order (*nvalid entries) share one
 * allocation, freed with mc_free(*hash). */
static mc_status_t batch_order(const mc_master_t *m, const mc_master_key_t *keys, size_t n,
                               mc_status_t *st, uint64_t **hash, uint32_t **order, size_t *nvalid)
{
    if (n > UINT32_MAX)
        return MC_ERR_INVALID_PARAMS;
    uint64_t *hs = mc_malloc(n * (sizeof(uint64_t) + sizeof(uint32_t)));
    if (hs == NULL)
        return MC_ERR_NOMEM;
    uint32_t *ord = (uint32_t *)(hs + n);
    uint32_t start[MC_MASTER_NUM_SHARDS + 1] = {0};
    size_t nv = 0;
    for (size_t i = 0; i < n; i++) {
        if (!key_valid(m, keys[i].data, keys[i].len)) {
            st[i] = MC_ERR_INVALID_KEY;
            continue;
        }
        st[i] = MC_OK;
        hs[i] = mc_hash64(keys[i].data, keys[i].len);
        start[shard_of(hs[i]) + 1]++;
        nv++;
    }
    for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++)
        start[s + 1] += start[s];
    for (size_t i = 0; i < n; i++)
        if (st[i] == MC_OK)
            ord[start[shard_of(hs[i])]++] = (uint32_t)i;
    *hash = hs;
    *order = ord;
    *nvalid = nv;
    return MC_OK;
}

/* How many keys ahead a batch loop starts loading a key's home slot (and, twice
 * as far ahead, its shard, whose line holds the table's address): enough to
 * cover a DRAM miss with the work of the keys in between. A batch's keys sit
 * in random shards and slots: without this nearly each one is a cache miss. */
#define BATCH_AHEAD 8

static inline void batch_prefetch(mc_master_t *m, const uint64_t *hs, const uint32_t *ord,
                                  size_t nv, size_t j)
{
    if (j + 2 * BATCH_AHEAD < nv)
        __builtin_prefetch(&m->shards[shard_of(hs[ord[j + 2 * BATCH_AHEAD]])], 1);
    if (j + BATCH_AHEAD < nv) {
        uint64_t h = hs[ord[j + BATCH_AHEAD]];
        otab_prefetch(&m->shards[shard_of(h)].tab, h);
    }
}

static inline void batch_prefetch_first(mc_master_t *m, const uint64_t *hs, const uint32_t *ord,
                                        size_t nv)
{
    for (size_t j = 0; j < nv && j < 2 * BATCH_AHEAD; j++)
        __builtin_prefetch(&m->shards[shard_of(hs[ord[j]])], 1);
    for (size_t j = 0; j < nv && j < BATCH_AHEAD; j++)
        otab_prefetch(&m->shards[shard_of(hs[ord[j]])].tab, hs[ord[j]]);
}

/* Iterate a batch in shard order: BATCH_LOOP_BEGIN(...) body BATCH_LOOP_END,
 * the body using i (item index), h (key hash) and sh (its locked shard).
 * The shard lock is taken when the shard changes and held across its keys. */
#define BATCH_LOOP_BEGIN(m, hs, ord, nv)                                                           \
    batch_prefetch_first((m), (hs), (ord), (nv));                                                  \
    for (size_t j_ = 0; j_ < (nv);) {                                                              \
        uint32_t s_ = shard_of((hs)[(ord)[j_]]);                                                   \
        shard_t *sh = &(m)->shards[s_];                                                            \
        shard_lock(sh);                                                                            \
        for (; j_ < (nv) && shard_of((hs)[(ord)[j_]]) == s_; j_++) {                               \
            batch_prefetch((m), (hs), (ord), (nv), j_);                                            \
            size_t i = (ord)[j_];                                                                  \
            uint64_t h = (hs)[i];
#define BATCH_LOOP_END                                                                             \
    }                                                                                              \
    shard_unlock(sh);                                                                              \
    }

/* The keys a batch put start has started so far (open addressing on the key
 * hash; a slot holds the item's index + 1). Only with a put id: there a key
 * given twice in one batch would find its own first start and be taken for a
 * resend of it (same put id, owner and size), and both items would get the
 * same replicas. */
typedef struct batch_seen {
    uint32_t *slot;
    size_t mask;
} batch_seen_t;

static int batch_seen_has(const batch_seen_t *bs, const mc_master_key_t *keys, const uint64_t *hs,
                          size_t i)
{
    for (size_t p = hs[i] & bs->mask; bs->slot[p] != 0; p = (p + 1) & bs->mask) {
        size_t j = bs->slot[p] - 1;
        if (hs[j] == hs[i] && keys[j].len == keys[i].len &&
            memcmp(keys[j].data, keys[i].data, keys[i].len) == 0)
            return 1;
    }
    return 0;
}

static void batch_seen_add(batch_seen_t *bs, const uint64_t *hs, size_t i)
{
    size_t p = hs[i] & bs->mask;
    while (bs->slot[p] != 0)
        p = (p + 1) & bs->mask;
    bs->slot[p] = (uint32_t)i + 1;
}

/* Items of one batch put start that may evict to make room for themselves. */
#define BATCH_EVICTIONS 8

mc_status_t mc_master_batch_put_start(mc_master_t *m, mc_uuid_t client, const mc_master_key_t *keys,
                                      const uint64_t *sizes, size_t n,
                                      const mc_master_put_cfg_t *cfg, uint64_t now_us,
                                      mc_master_replica_desc_t *descs, uint32_t *nrep,
                                      mc_status_t *st)
{
    if (check_cfg(m, cfg) != MC_OK ||
        (n > 0 && (keys == NULL || sizes == NULL || descs == NULL || nrep == NULL || st == NULL)))
        return MC_ERR_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    batch_seen_t seen = {NULL, 0};
    if (cfg->put_id != 0) {
        size_t cap = 16;
        while (cap < 2 * n)
            cap <<= 1;
        if ((seen.slot = mc_calloc(cap, sizeof(*seen.slot))) == NULL)
            return MC_ERR_NOMEM;
        seen.mask = cap - 1;
    }
    uint64_t *hs;
    uint32_t *ord;
    size_t nv;
    mc_status_t rc = batch_order(m, keys, n, st, &hs, &ord, &nv);
    if (rc != MC_OK) {
        mc_free(seen.slot);
        return rc;
    }
    uint32_t rn = cfg->replica_num;
    size_t nfail = 0;
    for (size_t i = 0; i < n; i++)
        nrep[i] = 0;

    BATCH_LOOP_BEGIN(m, hs, ord, nv)
    if (sizes[i] == 0 || sizes[i] > m->o.max_object_size) {
        st[i] = MC_ERR_INVALID_PARAMS;
        continue;
    }
    if (seen.slot != NULL && batch_seen_has(&seen, keys, hs, i)) {
        st[i] = MC_ERR_OBJECT_ALREADY_EXISTS; /* as without a put id */
        continue;
    }
    st[i] = put_start_locked(m, sh, h, client, keys[i].data, keys[i].len, sizes[i], cfg, now_us,
                             &descs[i * rn], &nrep[i]);
    if (st[i] == MC_ERR_NO_AVAILABLE_HANDLE)
        nfail++;
    else if (st[i] == MC_OK && seen.slot != NULL)
        batch_seen_add(&seen, hs, i);
    BATCH_LOOP_END

    if (nfail > 0 && m->o.eviction_ratio > 0.0) {
        /* the items that found no room, in shard order: each is retried
         * (an eviction for an earlier one may have made room for it too), and
         * one that still finds none evicts what makes room for it, if
         * anything can (at most BATCH_EVICTIONS of those per call: each walks
         * the table; the tick and later puts do the rest) */
        unsigned evictions = 0;
        for (size_t j = 0; j < nv; j++) {
            size_t i = ord[j];
            if (st[i] != MC_ERR_NO_AVAILABLE_HANDLE)
                continue;
            uint64_t h = hs[i];
            shard_t *sh = &m->shards[shard_of(h)];
            if (seen.slot != NULL && batch_seen_has(&seen, keys, hs, i)) {
                st[i] = MC_ERR_OBJECT_ALREADY_EXISTS;
                continue;
            }
            shard_lock(sh);
            st[i] = put_start_locked(m, sh, h, client, keys[i].data, keys[i].len, sizes[i], cfg,
                                     now_us, &descs[i * rn], &nrep[i]);
            shard_unlock(sh);
            char seg[MC_MASTER_NAME_MAX];
            if (st[i] == MC_ERR_NO_AVAILABLE_HANDLE && evictions < BATCH_EVICTIONS &&
                evict_for(m, sizes[i], now_us, seg)) {
                evictions++;
                mc_master_put_cfg_t there;
                const char *pref[1] = {seg};
                prefer(cfg, &there, pref);
                shard_lock(sh);
                st[i] = put_start_locked(m, sh, h, client, keys[i].data, keys[i].len, sizes[i],
                                         &there, now_us, &descs[i * rn], &nrep[i]);
                shard_unlock(sh);
            }
            if (st[i] == MC_OK && seen.slot != NULL)
                batch_seen_add(&seen, hs, i);
        }
    }
    mc_free(hs);
    mc_free(seen.slot);
    return MC_OK;
}

mc_status_t mc_master_batch_put_end(mc_master_t *m, mc_uuid_t client, const mc_master_key_t *keys,
                                    size_t n, uint64_t now_us, mc_status_t *st)
{
    if (n > 0 && (keys == NULL || st == NULL))
        return MC_ERR_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    uint64_t *hs;
    uint32_t *ord;
    size_t nv;
    mc_status_t rc = batch_order(m, keys, n, st, &hs, &ord, &nv);
    if (rc != MC_OK)
        return rc;
    BATCH_LOOP_BEGIN(m, hs, ord, nv)
    st[i] = put_end_locked(m, sh, h, client, keys[i].data, keys[i].len, now_us,
                           BATCH_RANK(now_us, i), 0);
    BATCH_LOOP_END
    mc_free(hs);
    return MC_OK;
}

mc_status_t mc_master_batch_put_revoke(mc_master_t *m, mc_uuid_t client,
                                       const mc_master_key_t *keys, size_t n, uint64_t now_us,
                                       mc_status_t *st)
{
    (void)now_us;
    if (n > 0 && (keys == NULL || st == NULL))
        return MC_ERR_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    uint64_t *hs;
    uint32_t *ord;
    size_t nv;
    mc_status_t rc = batch_order(m, keys, n, st, &hs, &ord, &nv);
    if (rc != MC_OK)
        return rc;
    BATCH_LOOP_BEGIN(m, hs, ord, nv)
    st[i] = put_revoke_locked(m, sh, h, client, keys[i].data, keys[i].len);
    BATCH_LOOP_END
    mc_free(hs);
    return MC_OK;
}

mc_status_t mc_master_batch_get_replica_list(mc_master_t *m, const mc_master_key_t *keys, size_t n,
                                             uint64_t now_us, mc_master_replica_desc_t *descs,
                                             uint32_t room, uint32_t *nrep, mc_status_t *st)
{
    return mc_master_batch_get_leased(m, keys, n, now_us, 0, descs, room, nrep, st);
}

mc_status_t mc_master_batch_get_leased(mc_master_t *m, const mc_master_key_t *keys, size_t n,
                                       uint64_t now_us, int release,
                                       mc_master_replica_desc_t *descs, uint32_t room,
                                       uint32_t *nrep, mc_status_t *st)
{
    if (room == 0 || (n > 0 && (keys == NULL || descs == NULL || nrep == NULL || st == NULL)))
        return MC_ERR_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    uint64_t *hs;
    uint32_t *ord;
    size_t nv;
    mc_status_t rc = batch_order(m, keys, n, st, &hs, &ord, &nv);
    if (rc != MC_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        nrep[i] = 0;
    BATCH_LOOP_BEGIN(m, hs, ord, nv)
    st[i] = get_locked(m, sh, h, keys[i].data, keys[i].len, now_us, BATCH_RANK(now_us, i),
                       &descs[i * room], room, &nrep[i], release);
    BATCH_LOOP_END
    mc_free(hs);
    return MC_OK;
}

/* One reader is done with key's object: 1 when that counted (its grant was
 * of the object's current lease period), 0 when it was stale. A grant at
 * grant_us belongs to the current period when grant_us >= period_us: the
 * grants of an earlier period (or of an earlier object of the key, removed
 * while leased) came before it began; and a period ends early only once
 * every grant of it was released, so no release of it is still to come. */
static int lease_release_locked(mc_master_t *m, shard_t *sh, uint64_t h, const char *key,
                                size_t len, uint64_t grant_us, uint64_t now_us)
{
    obj_t *o = obj_find(sh, h, key, len);
    if (o == NULL || !obj_leased(o, now_us) || o->pin_ttl_ms != 0)
        return 0;
    if ((o->readers & READERS_COUNT) == 0 || grant_us < o->period_us)
        return 0;
    o->readers--;
    if (o->readers == 0) {
        /* nobody reads it any more: removable, and a put's eviction may
         * take it (obj_leased); the tick's eviction still spares it until
         * lease_us (obj_held, master_evict.c) */
        evict_backoff_end(m, now_us);
    }
    return 1;
}

mc_status_t mc_master_batch_lease_release(mc_master_t *m, const mc_master_key_t *keys, size_t n,
                                          int64_t view_version, uint64_t grant_us, uint64_t now_us,
                                          size_t *released)
{
    if (n > 0 && keys == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (grant_us > now_us)
        return MC_ERR_INVALID_PARAMS; /* a time this master has not reached: not its grant */
    size_t cnt = 0;
    /* grants of another master (a restart, a failover: other clocks), or
     * whose lease has run out anyway, release nothing */
    if (n > 0 && m->o.lease_release &&
        view_version == __atomic_load_n(&m->view_version, __ATOMIC_ACQUIRE) &&
        now_us - grant_us < m->o.lease_ttl_us) {
        uint64_t *hs;
        uint32_t *ord;
        size_t nv;
        mc_status_t *st = mc_malloc(n * sizeof(*st));
        if (st == NULL)
            return MC_ERR_NOMEM;
        mc_status_t rc = batch_order(m, keys, n, st, &hs, &ord, &nv);
        if (rc != MC_OK) {
            mc_free(st);
            return rc;
        }
        BATCH_LOOP_BEGIN(m, hs, ord, nv)
        cnt += (size_t)lease_release_locked(m, sh, h, keys[i].data, keys[i].len, grant_us, now_us);
        BATCH_LOOP_END
        mc_free(hs);
        mc_free(st);
    }
    if (released != NULL)
        *released = cnt;
    return MC_OK;
}

mc_status_t mc_master_batch_exist_key(mc_master_t *m, const mc_master_key_t *keys, size_t n,
                                      uint64_t now_us, int *exists, mc_status_t *st)
{
    (void)now_us; /* a pure query: see mc_master_exist_key */
    if (n > 0 && (keys == NULL || exists == NULL || st == NULL))
        return MC_ERR_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    uint64_t *hs;
    uint32_t *ord;
    size_t nv;
    mc_status_t rc = batch_order(m, keys, n, st, &hs, &ord, &nv);
    if (rc != MC_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        exists[i] = 0;
    BATCH_LOOP_BEGIN(m, hs, ord, nv)
    obj_t *o = obj_find(sh, h, keys[i].data, keys[i].len);
    exists[i] = o != NULL && o->state == OBJ_COMPLETE;
    st[i] = MC_OK;
    BATCH_LOOP_END
    mc_free(hs);
    return MC_OK;
}

mc_status_t mc_master_batch_remove(mc_master_t *m, const mc_master_key_t *keys, size_t n, int force,
                                   uint64_t now_us, mc_status_t *st)
{
    if (n > 0 && (keys == NULL || st == NULL))
        return MC_ERR_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    uint64_t *hs;
    uint32_t *ord;
    size_t nv;
    mc_status_t rc = batch_order(m, keys, n, st, &hs, &ord, &nv);
    if (rc != MC_OK)
        return rc;
    BATCH_LOOP_BEGIN(m, hs, ord, nv)
    st[i] = remove_locked(m, sh, h, keys[i].data, keys[i].len, force, now_us);
    BATCH_LOOP_END
    mc_free(hs);
    return MC_OK;
}
