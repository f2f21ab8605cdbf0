/*
 * master_meta.c - the embedded transfer-metadata KV store (`metadata =
 * master`): segment descriptors and rpc addresses that transfer engines
 * publish for their peers. A plain in-memory map behind its own mutex; values
 * are opaque bytes. An entry may name an owner client: it is deleted when that
 * client expires, so a crashed node's descriptors do not linger (upstream
 * #1078, stale entries after client crashes).
 *
 * Lock order: client_lock -> meta_lock (a put with an owner registers the
 * owner and inserts in one step, so a concurrent expiry cannot miss it).
 */
#include <string.h>

#include "store/master_int.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

typedef struct meta_entry {
    mc_hnode_t node;
    mc_uuid_t owner;
    size_t key_len, val_len;
    char data[]; /* key bytes, then value bytes */
} meta_entry_t;

static meta_entry_t *meta_find(mc_master_t *m, uint64_t h, const char *key, size_t len)
{
    mc_hnode_t *n;
    MC_HMAP_FOREACH_HASH(&m->meta, n, h)
    {
        meta_entry_t *e = MC_CONTAINER_OF(n, meta_entry_t, node);
        if (e->key_len == len && memcmp(e->data, key, len) == 0)
            return e;
    }
    return NULL;
}

mc_status_t mc_master_meta_put(mc_master_t *m, const char *key, size_t key_len, const void *val,
                               size_t val_len, mc_uuid_t owner, uint64_t now_us)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    if (val_len > m->o.meta_max_value_len || (val_len > 0 && val == NULL))
        return MC_ERR_INVALID_PARAMS;
    meta_entry_t *e = mc_malloc(sizeof(*e) + key_len + val_len);
    if (e == NULL)
        goto err_nomem;
    e->owner = owner;
    e->key_len = key_len;
    e->val_len = val_len;
    memcpy(e->data, key, key_len);
    if (val_len > 0)
        memcpy(e->data + key_len, val, val_len);
    uint64_t h = mc_hash64(key, key_len);

    int owned = !uuid_is_zero(owner);
    if (owned) {
        pthread_mutex_lock(&m->client_lock);
        /* an owner we do not know yet is tracked like a first ping, so the
         * entry expires with it if it falls silent */
        if (client_get_or_add(m, owner, now_us, MC_MASTER_CLIENT_NEED_REMOUNT) == NULL) {
            pthread_mutex_unlock(&m->client_lock);
            mc_free(e);
            goto err_nomem;
        }
    }
    pthread_mutex_lock(&m->meta_lock);
    meta_entry_t *old = meta_find(m, h, key, key_len);
    if (old != NULL)
        mc_hmap_remove(&m->meta, &old->node);
    mc_hmap_insert(&m->meta, &e->node, h);
    if (m->jfn != NULL) {
        mc_master_jrec_t r = {.type = MC_JREC_META_PUT,
                              .client = owner,
                              .key = key,
                              .key_len = key_len,
                              .val = val,
                              .val_len = val_len};
        journal(m, &r);
    }
    pthread_mutex_unlock(&m->meta_lock);
    if (owned)
        pthread_mutex_unlock(&m->client_lock);
    mc_free(old);
    return MC_OK;

err_nomem:
    MC_ERROR(MASTER, "out of memory while storing metadata '%.*s'", (int)key_len, key);
    return MC_ERR_NOMEM;
}

mc_status_t mc_master_meta_get(mc_master_t *m, const char *key, size_t key_len, void **val,
                               size_t *val_len)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    if (val == NULL || val_len == NULL)
        return MC_ERR_INVALID_PARAMS;
    uint64_t h = mc_hash64(key, key_len);
    mc_status_t st = MC_OK;
    pthread_mutex_lock(&m->meta_lock);
    meta_entry_t *e = meta_find(m, h, key, key_len);
    if (e == NULL) {
        st = MC_ERR_NOT_FOUND;
    } else if (e->val_len == 0) {
        *val = NULL;
        *val_len = 0;
    } else {
        void *copy = mc_malloc(e->val_len);
        if (copy == NULL) {
            st = MC_ERR_NOMEM;
        } else {
            memcpy(copy, e->data + e->key_len, e->val_len);
            *val = copy;
            *val_len = e->val_len;
        }
    }
    pthread_mutex_unlock(&m->meta_lock);
    return st;
}

mc_status_t mc_master_meta_del(mc_master_t *m, const char *key, size_t key_len)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    uint64_t h = mc_hash64(key, key_len);
    pthread_mutex_lock(&m->meta_lock);
    meta_entry_t *e = meta_find(m, h, key, key_len);
    if (e != NULL) {
        mc_hmap_remove(&m->meta, &e->node);
        mc_master_jrec_t r = {.type = MC_JREC_META_DEL, .key = key, .key_len = key_len};
        journal(m, &r);
    }
    pthread_mutex_unlock(&m->meta_lock);
    mc_free(e);
    return e != NULL ? MC_OK : MC_ERR_NOT_FOUND;
}

void meta_snapshot(mc_master_t *m, mc_master_journal_fn_t fn, void *arg)
{
    size_t b;
    mc_hnode_t *n;
    pthread_mutex_lock(&m->meta_lock);
    MC_HMAP_FOREACH(&m->meta, b, n)
    {
        meta_entry_t *e = MC_CONTAINER_OF(n, meta_entry_t, node);
        mc_master_jrec_t r = {.type = MC_JREC_META_PUT,
                              .client = e->owner,
                              .key = e->data,
                              .key_len = e->key_len,
                              .val = e->data + e->key_len,
                              .val_len = e->val_len};
        fn(arg, &r);
    }
    pthread_mutex_unlock(&m->meta_lock);
}

mc_status_t mc_master_meta_list(mc_master_t *m, const char *prefix, size_t prefix_len,
                                mc_master_meta_cb_t cb, void *arg, size_t *count)
{
    if (cb == NULL || (prefix_len > 0 && prefix == NULL))
        return MC_ERR_INVALID_PARAMS;
    size_t cnt = 0, b;
    int stop = 0;
    mc_hnode_t *n;
    pthread_mutex_lock(&m->meta_lock);
    MC_HMAP_FOREACH(&m->meta, b, n)
    {
        meta_entry_t *e = MC_CONTAINER_OF(n, meta_entry_t, node);
        if (stop || e->key_len < prefix_len ||
            (prefix_len > 0 && memcmp(e->data, prefix, prefix_len) != 0))
            continue;
        cnt++;
        if (cb(arg, e->data, e->key_len, e->data + e->key_len, e->val_len) != 0)
            stop = 1;
    }
    pthread_mutex_unlock(&m->meta_lock);
    if (count != NULL)
        *count = cnt;
    return MC_OK;
}

void meta_drop_owner(mc_master_t *m, mc_uuid_t owner)
{
    size_t dropped = 0;
    pthread_mutex_lock(&m->meta_lock);
    for (size_t b = 0; b <= m->meta.mask; b++) {
        mc_hnode_t *n = m->meta.buckets[b], *next;
        for (; n != NULL; n = next) {
            next = n->next;
            meta_entry_t *e = MC_CONTAINER_OF(n, meta_entry_t, node);
            if (!uuid_eq(e->owner, owner))
                continue;
            mc_hmap_remove(&m->meta, n);
            mc_free(e);
            dropped++;
        }
    }
    pthread_mutex_unlock(&m->meta_lock);
    if (dropped > 0)
        MC_INFO(MASTER, "deleted %zu metadata entries of an expired client", dropped);
}

void meta_fini(mc_master_t *m)
{
    for (size_t b = 0; b <= m->meta.mask; b++) {
        mc_hnode_t *n = m->meta.buckets[b], *next;
        for (; n != NULL; n = next) {
            next = n->next;
            mc_free(MC_CONTAINER_OF(n, meta_entry_t, node));
        }
    }
    mc_hmap_fini(&m->meta);
}
