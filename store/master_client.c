/* master_client.c - see master_client.h. */
#include "store/master_client.h"

#include <string.h>

/* ------------------------------------------------------------ requests */

static void field_key(mc_mp_writer_t *w, unsigned id, const void *key, size_t klen)
{
    mc_mp_write_uint(w, id);
    mc_mp_write_bin(w, key, klen);
}

static void field_keys(mc_mp_writer_t *w, const mc_master_key_t *keys, size_t n)
{
    mc_mp_write_uint(w, MC_F_KEYS);
    mc_mp_write_array(w, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        mc_mp_write_bin(w, keys[i].data, keys[i].len);
}

static void field_client(mc_mp_writer_t *w, mc_uuid_t client)
{
    mc_mp_write_uint(w, MC_F_CLIENT_ID);
    mc_proto_write_uuid(w, client);
}

void mc_mcli_put_start(mc_mp_writer_t *w, mc_uuid_t client, const void *key, size_t klen,
                       uint64_t size, const mc_master_put_cfg_t *cfg)
{
    mc_mp_write_map(w, cfg ? 4 : 3);
    field_client(w, client);
    field_key(w, MC_F_KEY, key, klen);
    mc_mp_write_uint(w, MC_F_SIZE);
    mc_mp_write_uint(w, size);
    if (cfg != NULL) {
        mc_mp_write_uint(w, MC_F_CONFIG);
        mc_proto_write_put_cfg(w, cfg);
    }
}

void mc_mcli_client_key(mc_mp_writer_t *w, mc_uuid_t client, const void *key, size_t klen)
{
    mc_mp_write_map(w, 2);
    field_client(w, client);
    field_key(w, MC_F_KEY, key, klen);
}

void mc_mcli_batch_put_start(mc_mp_writer_t *w, mc_uuid_t client, const mc_master_key_t *keys,
                             const uint64_t *sizes, size_t n, const mc_master_put_cfg_t *cfg)
{
    mc_mp_write_map(w, cfg ? 4 : 3);
    field_client(w, client);
    field_keys(w, keys, n);
    mc_mp_write_uint(w, MC_F_SIZES);
    mc_mp_write_array(w, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        mc_mp_write_uint(w, sizes[i]);
    if (cfg != NULL) {
        mc_mp_write_uint(w, MC_F_CONFIG);
        mc_proto_write_put_cfg(w, cfg);
    }
}

void mc_mcli_client_keys(mc_mp_writer_t *w, mc_uuid_t client, const mc_master_key_t *keys, size_t n)
{
    mc_mp_write_map(w, 2);
    field_client(w, client);
    field_keys(w, keys, n);
}

void mc_mcli_key(mc_mp_writer_t *w, const void *key, size_t klen)
{
    mc_mp_write_map(w, 1);
    field_key(w, MC_F_KEY, key, klen);
}

void mc_mcli_keys(mc_mp_writer_t *w, const mc_master_key_t *keys, size_t n)
{
    mc_mp_write_map(w, 1);
    field_keys(w, keys, n);
}

void mc_mcli_keys_release(mc_mp_writer_t *w, const mc_master_key_t *keys, size_t n)
{
    mc_mp_write_map(w, 2);
    field_keys(w, keys, n);
    mc_mp_write_uint(w, MC_F_RELEASE);
    mc_mp_write_bool(w, 1);
}

void mc_mcli_lease_release(mc_mp_writer_t *w, const mc_master_key_t *keys, const mc_status_t *st,
                           size_t n, uint64_t grant_us, int64_t view_version)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += st == NULL || st[i] == MC_OK;
    mc_mp_write_map(w, 3);
    mc_mp_write_uint(w, MC_F_KEYS);
    mc_mp_write_array(w, (uint32_t)k);
    for (size_t i = 0; i < n; i++)
        if (st == NULL || st[i] == MC_OK)
            mc_mp_write_bin(w, keys[i].data, keys[i].len);
    mc_mp_write_uint(w, MC_F_GRANT_US);
    mc_mp_write_uint(w, grant_us);
    mc_mp_write_uint(w, MC_F_VIEW_VERSION);
    mc_mp_write_int(w, view_version);
}

void mc_mcli_remove(mc_mp_writer_t *w, const void *key, size_t klen, int force)
{
    mc_mp_write_map(w, 2);
    field_key(w, MC_F_KEY, key, klen);
    mc_mp_write_uint(w, MC_F_FORCE);
    mc_mp_write_bool(w, force);
}

void mc_mcli_batch_remove(mc_mp_writer_t *w, const mc_master_key_t *keys, size_t n, int force)
{
    mc_mp_write_map(w, 2);
    field_keys(w, keys, n);
    mc_mp_write_uint(w, MC_F_FORCE);
    mc_mp_write_bool(w, force);
}

void mc_mcli_regex(mc_mp_writer_t *w, const char *regex, int force)
{
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, MC_F_REGEX);
    mc_mp_write_cstr(w, regex);
    mc_mp_write_uint(w, MC_F_FORCE);
    mc_mp_write_bool(w, force);
}

void mc_mcli_remove_all(mc_mp_writer_t *w, int force)
{
    mc_mp_write_map(w, 1);
    mc_mp_write_uint(w, MC_F_FORCE);
    mc_mp_write_bool(w, force);
}

void mc_mcli_mount(mc_mp_writer_t *w, mc_uuid_t client, const mc_master_segment_t *seg)
{
    mc_mp_write_map(w, 2);
    field_client(w, client);
    mc_mp_write_uint(w, MC_F_SEGMENT);
    mc_proto_write_segment(w, seg);
}

void mc_mcli_remount(mc_mp_writer_t *w, mc_uuid_t client, const mc_master_segment_t *segs, size_t n)
{
    mc_mp_write_map(w, 2);
    field_client(w, client);
    mc_mp_write_uint(w, MC_F_SEGMENTS);
    mc_mp_write_array(w, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        mc_proto_write_segment(w, &segs[i]);
}

void mc_mcli_unmount(mc_mp_writer_t *w, mc_uuid_t client, mc_uuid_t segment_id)
{
    mc_mp_write_map(w, 2);
    field_client(w, client);
    mc_mp_write_uint(w, MC_F_SEGMENT_ID);
    mc_proto_write_uuid(w, segment_id);
}

void mc_mcli_ping(mc_mp_writer_t *w, mc_uuid_t client)
{
    mc_mp_write_map(w, 1);
    field_client(w, client);
}

void mc_mcli_list_segments(mc_mp_writer_t *w, mc_uuid_t client)
{
    mc_mp_write_map(w, 1);
    field_client(w, client);
}

void mc_mcli_meta_put(mc_mp_writer_t *w, const void *key, size_t klen, const void *val, size_t vlen,
                      mc_uuid_t owner)
{
    mc_mp_write_map(w, 3);
    field_key(w, MC_F_KEY, key, klen);
    mc_mp_write_uint(w, MC_F_VALUE);
    mc_mp_write_bin(w, val, vlen);
    field_client(w, owner);
}

void mc_mcli_meta_list(mc_mp_writer_t *w, const void *prefix, size_t plen)
{
    mc_mcli_meta_list_after(w, prefix, plen, NULL, 0);
}

void mc_mcli_meta_list_after(mc_mp_writer_t *w, const void *prefix, size_t plen, const void *after,
                             size_t alen)
{
    mc_mp_write_map(w, after != NULL ? 2 : 1);
    field_key(w, MC_F_PREFIX, prefix, plen);
    if (after != NULL)
        field_key(w, MC_F_AFTER, after, alen);
}

void mc_mcli_empty(mc_mp_writer_t *w)
{
    mc_mp_write_map(w, 0);
}

/* ----------------------------------------------------------- responses */

mc_status_t mc_mcli_dec_replicas(const uint8_t *body, size_t len, mc_master_replica_desc_t *d,
                                 uint32_t room, uint32_t *n, uint64_t *lease_us)
{
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, body, len);
    *n = 0;
    uint32_t nf = len ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < nf && r.err == MC_OK; i++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_REPLICAS:
            mc_proto_read_replicas(&r, d, room, n);
            break;
        case MC_F_LEASE_TTL_US: {
            uint64_t v = mc_mp_read_uint(&r);
            if (lease_us != NULL)
                *lease_us = v;
            break;
        }
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    return r.err == MC_OK ? MC_OK : MC_ERR_PROTOCOL;
}

mc_status_t mc_mcli_dec_items(const uint8_t *body, size_t len, mc_status_t *st,
                              mc_master_replica_desc_t *d, uint32_t per_key, uint32_t *nrep,
                              size_t room, size_t *n, uint64_t *lease_us)
{
    if (lease_us != NULL)
        *lease_us = 0;
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, body, len);
    *n = 0;
    uint32_t nf = len ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < nf && r.err == MC_OK; i++) {
        if (mc_mp_read_uint(&r) != MC_F_ITEMS) {
            mc_mp_skip(&r);
            continue;
        }
        uint32_t cnt = mc_mp_read_array(&r);
        if (cnt > room)
            return MC_ERR_PROTOCOL;
        for (uint32_t k = 0; k < cnt && r.err == MC_OK; k++) {
            st[k] = MC_ERR_INTERNAL_ERROR;
            nrep[k] = 0;
            uint32_t inf = mc_mp_read_map(&r);
            for (uint32_t j = 0; j < inf && r.err == MC_OK; j++) {
                switch (mc_mp_read_uint(&r)) {
                case MC_F_STATUS:
                    st[k] = (mc_status_t)mc_mp_read_int(&r);
                    break;
                case MC_F_REPLICAS:
                    mc_proto_read_replicas(&r, &d[(size_t)k * per_key], per_key, &nrep[k]);
                    break;
                case MC_F_LEASE_TTL_US: {
                    uint64_t l = mc_mp_read_uint(&r);
                    if (lease_us != NULL && (*lease_us == 0 || l < *lease_us))
                        *lease_us = l;
                    break;
                }
                default:
                    mc_mp_skip(&r);
                    break;
                }
            }
        }
        *n = cnt;
    }
    return r.err == MC_OK ? MC_OK : MC_ERR_PROTOCOL;
}

mc_status_t mc_mcli_dec_statuses(const uint8_t *body, size_t len, mc_status_t *st, int *exists,
                                 size_t room, size_t *n)
{
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, body, len);
    *n = 0;
    uint32_t nf = len ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < nf && r.err == MC_OK; i++) {
        uint64_t id = mc_mp_read_uint(&r);
        if (id != MC_F_STATUSES && id != MC_F_EXISTS) {
            mc_mp_skip(&r);
            continue;
        }
        uint32_t cnt = mc_mp_read_array(&r);
        if (cnt > room)
            return MC_ERR_PROTOCOL;
        for (uint32_t k = 0; k < cnt && r.err == MC_OK; k++) {
            if (id == MC_F_STATUSES) {
                st[k] = (mc_status_t)mc_mp_read_int(&r);
            } else {
                int b = mc_mp_read_bool(&r);
                if (exists != NULL)
                    exists[k] = b;
            }
        }
        if (id == MC_F_STATUSES)
            *n = cnt;
    }
    return r.err == MC_OK ? MC_OK : MC_ERR_PROTOCOL;
}

mc_status_t mc_mcli_dec_int(const uint8_t *body, size_t len, unsigned field, int64_t *out)
{
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, body, len);
    uint32_t nf = len ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < nf && r.err == MC_OK; i++) {
        if (mc_mp_read_uint(&r) != field) {
            mc_mp_skip(&r);
            continue;
        }
        if (mc_mp_peek(&r) == MC_MP_BOOL)
            *out = mc_mp_read_bool(&r);
        else
            *out = mc_mp_read_int(&r);
        return r.err == MC_OK ? MC_OK : MC_ERR_PROTOCOL;
    }
    return r.err == MC_OK ? MC_ERR_NOT_FOUND : MC_ERR_PROTOCOL;
}

mc_status_t mc_mcli_dec_bytes(const uint8_t *body, size_t len, unsigned field, const void **p,
                              size_t *plen)
{
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, body, len);
    uint32_t nf = len ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < nf && r.err == MC_OK; i++) {
        if (mc_mp_read_uint(&r) != field) {
            mc_mp_skip(&r);
            continue;
        }
        uint32_t l = 0;
        *p = mc_mp_read_bin(&r, &l);
        *plen = l;
        return r.err == MC_OK ? MC_OK : MC_ERR_PROTOCOL;
    }
    return r.err == MC_OK ? MC_ERR_NOT_FOUND : MC_ERR_PROTOCOL;
}
