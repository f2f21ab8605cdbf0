/*
 * master_meta.c - the embedded transfer-metadata KV store (`metadata =
 * master`): segment descriptors and rpc addresses that transfer engines
 * publish for their peers. A plain in-memory map behind its own mutex; values
 * are opaque bytes. An entry may name an owner client: it is deleted when that
 * client expires, so a crashed node's descriptors do not linger (upstream
 * #1078, stale entries after client crashes).
 *
 * Identities and bounds (issue 13): every entry put over RPC has an owner (a
 * put without one is refused: it could never be cleaned up; only upstream's
 * HTTP metadata protocol, which has no notion of owner, stores unowned
 * entries, which live until deleted); only its owner replaces or deletes an
 * entry (an unowned one: only an unowned put or delete), so a second process that takes the same
 * name cannot overwrite or delete the first one's descriptors while the first is alive (its entries
 * go when it expires). The store holds at most meta_max_entries entries and meta_max_bytes of keys
 * and values. Listings are paged: keys in byte order, after a cursor, up to a byte budget (the
 * whole list could exceed a frame: 32 x 16 MiB did).
 *
 * Lock order: client_lock -> meta_lock (a put with an owner registers the
 * owner and inserts in one step, so a concurrent expiry cannot miss it).
 */
#include <stdlib.h>
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

/* What a put checks: nothing (a journal replay: the leader decided), or
 * another owner's entry and the bounds, and (CHECK_OWNED) that it has an
 * owner. */
enum { CHECK_NONE = 0, CHECK_OWNED, CHECK_UNOWNED };

static mc_status_t meta_put(mc_master_t *m, const char *key, size_t key_len, const void *val,
                            size_t val_len, mc_uuid_t owner, uint64_t now_us, int check)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    if (val_len > m->o.meta_max_value_len || (val_len > 0 && val == NULL))
        return MC_ERR_INVALID_PARAMS;
    int owned = !mc_uuid_is_zero(owner);
    if (check == CHECK_OWNED && !owned)
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
    mc_status_t st = MC_OK;
    pthread_mutex_lock(&m->meta_lock);
    meta_entry_t *old = meta_find(m, h, key, key_len);
    size_t old_bytes = old != NULL ? old->key_len + old->val_len : 0;
    if (check && old != NULL && !mc_uuid_eq(old->owner, owner)) {
        /* its owner is alive: an expired one's entries are gone */
        st = MC_ERR_ILLEGAL_CLIENT;
    } else if (check && old == NULL && m->meta_count >= m->o.meta_max_entries) {
        st = MC_ERR_LIMIT;
    } else if (check && m->meta_bytes - old_bytes + key_len + val_len > m->o.meta_max_bytes) {
        st = MC_ERR_LIMIT;
    }
    if (st != MC_OK) {
        pthread_mutex_unlock(&m->meta_lock);
        if (owned)
            pthread_mutex_unlock(&m->client_lock);
        mc_free(e);
        return st;
    }
    if (old != NULL) {
        mc_hmap_remove(&m->meta, &old->node);
        m->meta_count--;
        m->meta_bytes -= old_bytes;
    }
    mc_hmap_insert(&m->meta, &e->node, h);
    m->meta_count++;
    m->meta_bytes += key_len + val_len;
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

mc_status_t mc_master_meta_put(mc_master_t *m, const char *key, size_t key_len, const void *val,
                               size_t val_len, mc_uuid_t owner, uint64_t now_us)
{
    return meta_put(m, key, key_len, val, val_len, owner, now_us, CHECK_OWNED);
}

mc_status_t mc_master_meta_put_unowned(mc_master_t *m, const char *key, size_t key_len,
                                       const void *val, size_t val_len, uint64_t now_us)
{
    return meta_put(m, key, key_len, val, val_len, (mc_uuid_t){0, 0}, now_us, CHECK_UNOWNED);
}

mc_status_t meta_apply_put(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us)
{
    return meta_put(m, r->key, r->key_len, r->val, r->val_len, r->client, now_us, CHECK_NONE);
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

static mc_status_t meta_del(mc_master_t *m, const char *key, size_t key_len, mc_uuid_t owner,
                            int check)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    uint64_t h = mc_hash64(key, key_len);
    mc_status_t st = MC_OK;
    pthread_mutex_lock(&m->meta_lock);
    meta_entry_t *e = meta_find(m, h, key, key_len);
    if (e == NULL) {
        st = MC_ERR_NOT_FOUND;
    } else if (check && !mc_uuid_eq(e->owner, owner)) {
        st = MC_ERR_ILLEGAL_CLIENT;
        e = NULL;
    } else {
        mc_hmap_remove(&m->meta, &e->node);
        m->meta_count--;
        m->meta_bytes -= e->key_len + e->val_len;
        mc_master_jrec_t r = {.type = MC_JREC_META_DEL, .key = key, .key_len = key_len};
        journal(m, &r);
    }
    pthread_mutex_unlock(&m->meta_lock);
    mc_free(e);
    return st;
}

mc_status_t mc_master_meta_del(mc_master_t *m, const char *key, size_t key_len, mc_uuid_t owner)
{
    return meta_del(m, key, key_len, owner, 1);
}

mc_status_t meta_apply_del(mc_master_t *m, const mc_master_jrec_t *r)
{
    return meta_del(m, r->key, r->key_len, (mc_uuid_t){0, 0}, 0);
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

static int prefixed(const meta_entry_t *e, const char *prefix, size_t prefix_len)
{
    return e->key_len >= prefix_len &&
           (prefix_len == 0 || memcmp(e->data, prefix, prefix_len) == 0);
}

/* Byte order of keys; a key that is a prefix of another sorts first. */
static int key_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c != 0 ? c : (al > bl) - (al < bl);
}

static int entry_cmp(const void *x, const void *y)
{
    const meta_entry_t *a = *(meta_entry_t *const *)x, *b = *(meta_entry_t *const *)y;
    return key_cmp(a->data, a->key_len, b->data, b->key_len);
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
        if (stop || !prefixed(e, prefix, prefix_len))
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

mc_status_t mc_master_meta_list_page(mc_master_t *m, const char *prefix, size_t prefix_len,
                                     const char *after, size_t after_len, size_t max_bytes,
                                     mc_master_meta_cb_t cb, void *arg, size_t *count, int *more)
{
    if (cb == NULL || (prefix_len > 0 && prefix == NULL) || (after_len > 0 && after == NULL))
        return MC_ERR_INVALID_PARAMS;
    size_t b, nsel = 0, cap = 0;
    meta_entry_t **sel = NULL;
    mc_hnode_t *n;
    mc_status_t st = MC_OK;
    pthread_mutex_lock(&m->meta_lock);
    /* the entries after the cursor, sorted: O(n log n) per page, with n at
     * most meta_max_entries */
    MC_HMAP_FOREACH(&m->meta, b, n)
    {
        meta_entry_t *e = MC_CONTAINER_OF(n, meta_entry_t, node);
        if (!prefixed(e, prefix, prefix_len) ||
            (after != NULL && key_cmp(e->data, e->key_len, after, after_len) <= 0))
            continue;
        if (nsel == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            meta_entry_t **ns = mc_realloc(sel, ncap * sizeof(*ns));
            if (ns == NULL) {
                st = MC_ERR_NOMEM;
                break;
            }
            sel = ns;
            cap = ncap;
        }
        sel[nsel++] = e;
    }
    size_t cnt = 0, used = 0;
    if (st == MC_OK) {
        qsort(sel, nsel, sizeof(*sel), entry_cmp);
        /* at least one entry per page, whatever its size (it fits a frame:
         * meta_max_value_len is checked at put) */
        while (cnt < nsel) {
            const meta_entry_t *e = sel[cnt];
            size_t sz = e->key_len + e->val_len + 16;
            if (cnt > 0 && used + sz > max_bytes)
                break;
            used += sz;
            cnt++;
            if (cb(arg, e->data, e->key_len, e->data + e->key_len, e->val_len) != 0)
                break;
        }
    }
    pthread_mutex_unlock(&m->meta_lock);
    mc_free(sel);
    if (st != MC_OK)
        return st;
    if (count != NULL)
        *count = cnt;
    if (more != NULL)
        *more = cnt < nsel;
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
            if (!mc_uuid_eq(e->owner, owner))
                continue;
            mc_hmap_remove(&m->meta, n);
            m->meta_count--;
            m->meta_bytes -= e->key_len + e->val_len;
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
