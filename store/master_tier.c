/*
 * master_tier.c - DISK replicas in the master core: an object's file in the
 * persistent tier (store/tier.h), reported by the client that wrote it or
 * found by the startup scan. See master.h, "persistent tier".
 *
 * A DISK replica is one bit of the object (obj_t.disk), not an entry of its
 * replica array: it holds no segment space and needs no allocator handle,
 * and its file's place follows from the key.
 */
#include <stdlib.h>
#include <string.h>

#include "store/master_int.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

/* o gets its DISK replica: count it and journal it (a standby that takes
 * over must keep the object on eviction, list the replica and delete the
 * file on remove). Shard lock held. */
static void disk_set(mc_master_t *m, obj_t *o)
{
    if (o->disk)
        return;
    o->disk = 1;
    atomic_fetch_add(&m->disk_objects, 1);
    atomic_fetch_add(&m->disk_bytes, o->size);
    if (m->jfn != NULL) {
        mc_master_jrec_t r = {
            .type = MC_JREC_DISK, .key = obj_key(o), .key_len = o->key_len, .size = o->size};
        journal(m, &r);
    }
}

void obj_spill(mc_master_t *m, obj_t *o)
{
    if (o->nrep == 0)
        return;
    if (m->jfn != NULL) {
        /* before the space is freed: a later PUT_START placed in it must
         * follow this record in the journal */
        mc_master_jrec_t r = {.type = MC_JREC_SPILL, .key = obj_key(o), .key_len = o->key_len};
        journal(m, &r);
    }
    obj_free_replicas(m, o);
}

void tier_dropped(mc_master_t *m, obj_t *o)
{
    atomic_fetch_sub(&m->disk_objects, 1);
    atomic_fetch_sub(&m->disk_bytes, o->size);
    if (m->o.disk_drop != NULL)
        m->o.disk_drop(m->o.disk_drop_arg, obj_key(o), o->key_len);
}

void tier_describe(const obj_t *o, mc_master_replica_desc_t *d)
{
    memset(d, 0, offsetof(mc_master_replica_desc_t, segment_name));
    d->size = o->size;
    d->status = MC_MASTER_REPLICA_COMPLETE;
    d->kind = MC_MASTER_REPLICA_DISK;
    d->segment_name[0] = '\0';
    d->te_endpoint[0] = '\0';
}

mc_status_t mc_master_tier_add(mc_master_t *m, const char *key, size_t key_len, uint64_t size,
                               uint64_t now_us)
{
    (void)now_us;
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    mc_status_t st = MC_OK;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, key, key_len, &sh, NULL);
    if (o == NULL)
        st = MC_ERR_OBJECT_NOT_FOUND;
    else if (o->size != size)
        st = MC_ERR_INVALID_PARAMS; /* a file of an older put of the key */
    else
        disk_set(m, o);
    shard_unlock(sh);
    return st;
}

/* Which existing objects disk_restore may give a DISK replica. */
enum restore_mode {
    RESTORE_ANY,      /* replay: the leader did */
    RESTORE_FINISHED, /* a scan: not an unfinished put (the file is of an older put) */
    RESTORE_ABSENT,   /* a new HA leader's scan: none (the journal has theirs) */
};

/* The DISK replica of key: set on its object, or a disk-only object made.
 * MC_OK, MC_ERR_INVALID_KEY, MC_ERR_INVALID_PARAMS (size 0 or too large),
 * MC_ERR_EXISTS (another size than the object's), MC_ERR_OBJECT_ALREADY_EXISTS
 * (an object the mode leaves alone), MC_ERR_NOMEM. */
static mc_status_t disk_restore(mc_master_t *m, const char *key, size_t key_len, uint64_t size,
                                uint64_t now_us, enum restore_mode mode)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    if (size == 0 || size > m->o.max_object_size)
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = MC_OK;
    uint64_t h;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, key, key_len, &sh, &h);
    if (o != NULL) {
        if (mode == RESTORE_ABSENT)
            st = MC_ERR_OBJECT_ALREADY_EXISTS;
        else if (o->size != size)
            st = MC_ERR_EXISTS;
        else if (mode == RESTORE_FINISHED && o->state != OBJ_COMPLETE)
            st = MC_ERR_OBJECT_ALREADY_EXISTS;
        else
            disk_set(m, o);
        goto out;
    }
    if (otab_reserve(&sh->tab) != MC_OK || (o = mc_malloc(sizeof(*o) + key_len)) == NULL) {
        st = MC_ERR_NOMEM;
        goto out;
    }
    memset(o, 0, sizeof(*o));
    o->size = size;
    o->access_us = now_us;
    o->key_len = (uint16_t)key_len;
    o->state = OBJ_COMPLETE;
    memcpy(obj_key(o), key, key_len);
    otab_insert(&sh->tab, h, o);
    disk_set(m, o);
out:
    shard_unlock(sh);
    return st;
}

mc_status_t mc_master_tier_restore(mc_master_t *m, const char *key, size_t key_len, uint64_t size,
                                   uint64_t now_us)
{
    mc_status_t st = disk_restore(m, key, key_len, size, now_us, RESTORE_FINISHED);
    return st == MC_ERR_EXISTS ? MC_ERR_INVALID_PARAMS : st;
}

mc_status_t mc_master_tier_restore_absent(mc_master_t *m, const char *key, size_t key_len,
                                          uint64_t size, uint64_t now_us)
{
    return disk_restore(m, key, key_len, size, now_us, RESTORE_ABSENT);
}

/* ---- journal replay (standby) ---- */

mc_status_t apply_disk(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us)
{
    mc_status_t st = disk_restore(m, r->key, r->key_len, r->size, now_us, RESTORE_ANY);
    return st == MC_ERR_INVALID_KEY ? MC_ERR_INVALID_PARAMS : st;
}

mc_status_t apply_spill(mc_master_t *m, const mc_master_jrec_t *r)
{
    if (!key_valid(m, r->key, r->key_len))
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = MC_OK;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, r->key, r->key_len, &sh, NULL);
    /* the leader spills only complete objects with a file: anything else
     * means a record is missing, and freeing would be a guess */
    if (o == NULL || o->state != OBJ_COMPLETE || (!o->disk && !obj_ldisk(o)))
        st = MC_ERR_EXISTS;
    else
        obj_spill(m, o);
    shard_unlock(sh);
    return st;
}

mc_status_t mc_master_tier_if_absent(mc_master_t *m, const char *key, size_t key_len,
                                     void (*fn)(void *arg), void *arg)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, key, key_len, &sh, NULL);
    if (o == NULL)
        fn(arg);
    shard_unlock(sh);
    return o == NULL ? MC_OK : MC_ERR_OBJECT_ALREADY_EXISTS;
}

void mc_master_tier_stats(mc_master_t *m, mc_master_tier_stats_t *out)
{
    out->disk_objects = atomic_load(&m->disk_objects);
    out->disk_bytes = atomic_load(&m->disk_bytes);
    out->disk_evicted = atomic_load(&m->disk_evicted);
}

/* ---- quota: removing disk-only objects, least recently used first ---- */

typedef struct cand {
    uint64_t access_us, size;
} cand_t;

static int cand_cmp(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    return x->access_us < y->access_us ? -1 : x->access_us > y->access_us;
}

/* An object the quota may take: complete, only on disk, no reader's lease. */
static int quota_candidate(const obj_t *o, uint64_t now_us)
{
    return o != NULL && o->state == OBJ_COMPLETE && o->disk && o->nrep == 0 &&
           !obj_leased(o, now_us);
}

uint64_t mc_master_tier_enforce_quota(mc_master_t *m, uint64_t quota_bytes, uint64_t now_us)
{
    uint64_t used = atomic_load(&m->disk_bytes);
    if (quota_bytes == 0 || used <= quota_bytes)
        return 0;
    /* down to 95% of the quota, so that the next puts do not trigger it again */
    uint64_t excess = used - quota_bytes + quota_bytes / 20;

    /* 1: every candidate's access time and size (a background thread's
     * work: the shard locks are held one at a time, briefly) */
    size_t n = 0, cap = 1024;
    cand_t *c = mc_malloc(cap * sizeof(*c));
    if (c == NULL)
        return 0;
    for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++) {
        shard_t *sh = &m->shards[s];
        shard_lock(sh);
        OTAB_WALK(&sh->tab, i, k)
        {
            obj_t *o = sh->tab.slots[i].obj;
            if (!quota_candidate(o, now_us))
                continue;
            if (n == cap) {
                cand_t *nc = mc_realloc(c, 2 * cap * sizeof(*c));
                if (nc == NULL)
                    break; /* go on with the ones we have */
                c = nc;
                cap *= 2;
            }
            c[n++] = (cand_t){o->access_us, o->size};
        }
        shard_unlock(sh);
    }
    /* 2: the access time up to which the oldest ones free enough */
    qsort(c, n, sizeof(*c), cand_cmp);
    uint64_t sum = 0, thr = 0;
    for (size_t i = 0; i < n && sum < excess; i++) {
        sum += c[i].size;
        thr = c[i].access_us;
    }
    mc_free(c);
    if (n == 0) {
        MC_WARN(TIER,
                "tier over its quota (%llu > %llu bytes) but no object is only on disk "
                "(files of objects still in memory are kept)",
                (unsigned long long)used, (unsigned long long)quota_bytes);
        return 0;
    }
    /* 3: remove them (re-checked under the lock: a get may have read one) */
    uint64_t freed = 0, cnt = 0;
    for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS && freed < excess; s++) {
        shard_t *sh = &m->shards[s];
        shard_lock(sh);
        OTAB_WALK(&sh->tab, i, k)
        {
            obj_t *o = sh->tab.slots[i].obj;
            if (freed >= excess)
                break;
            if (!quota_candidate(o, now_us) || o->access_us > thr)
                continue;
            freed += o->size;
            cnt++;
            obj_unlink(m, sh, o, sh->tab.slots[i].hash); /* its file is queued for deletion */
            obj_destroy(m, o);
        }
        otab_shrink(&sh->tab);
        shard_unlock(sh);
    }
    atomic_fetch_add(&m->disk_evicted, cnt);
    MC_INFO(TIER,
            "tier quota: removed %llu disk-only objects (%llu bytes; %llu were in use, quota %llu)",
            (unsigned long long)cnt, (unsigned long long)freed, (unsigned long long)used,
            (unsigned long long)quota_bytes);
    return cnt;
}
