/*
 * master_tier.c - DISK replicas in the master core: an object's file in the
 * persistent tier (store/tier.h), reported by the client that wrote it or
 * found by the startup scan. See master.h, "persistent tier".
 *
 * A DISK replica is one bit of the object (obj_t.disk), not an entry of its
 * replica array: it holds no segment space and needs no allocator handle,
 * and its file's place follows from the key.
 */
#include <string.h>

#include "store/master_int.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

void tier_dropped(mc_master_t *m, obj_t *o)
{
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
    uint64_t h = mc_hash64(key, key_len);
    shard_t *sh = &m->shards[shard_of(h)];
    mc_status_t st = MC_OK;
    shard_lock(sh);
    obj_t *o = otab_find(&sh->tab, h, key, key_len);
    if (o == NULL)
        st = MC_ERR_OBJECT_NOT_FOUND;
    else if (o->size != size)
        st = MC_ERR_INVALID_PARAMS; /* a file of an older put of the key */
    else
        o->disk = 1;
    shard_unlock(sh);
    return st;
}

mc_status_t mc_master_tier_restore(mc_master_t *m, const char *key, size_t key_len, uint64_t size,
                                   uint64_t now_us)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    if (size == 0 || size > m->o.max_object_size)
        return MC_ERR_INVALID_PARAMS;
    uint64_t h = mc_hash64(key, key_len);
    shard_t *sh = &m->shards[shard_of(h)];
    mc_status_t st = MC_OK;
    shard_lock(sh);
    obj_t *o = otab_find(&sh->tab, h, key, key_len);
    if (o != NULL) {
        if (o->size == size)
            o->disk = 1;
        else
            st = MC_ERR_INVALID_PARAMS;
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
    o->disk = 1;
    memcpy(obj_key(o), key, key_len);
    otab_insert(&sh->tab, h, o);
out:
    shard_unlock(sh);
    return st;
}

mc_status_t mc_master_tier_if_absent(mc_master_t *m, const char *key, size_t key_len,
                                     void (*fn)(void *arg), void *arg)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    uint64_t h = mc_hash64(key, key_len);
    shard_t *sh = &m->shards[shard_of(h)];
    shard_lock(sh);
    obj_t *o = otab_find(&sh->tab, h, key, key_len);
    if (o == NULL)
        fn(arg);
    shard_unlock(sh);
    return o == NULL ? MC_OK : MC_ERR_OBJECT_ALREADY_EXISTS;
}
