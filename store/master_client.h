/*
 * master_client.h - the client side of the master protocol (store/proto.h):
 * typed encoders of request bodies and decoders of response bodies.
 *
 * Encoders write one complete body with a msgpack writer, typically the one
 * mc_rpc_call_begin() returns (zero-copy into the connection), or one over a
 * caller's mc_buf_t for mc_rpc_call_sync(). Decoders read a response body
 * (valid during the RPC callback) into caller-provided memory; they return
 * MC_OK, or MC_ERR_PROTOCOL for a body that does not have the expected shape.
 * Pure functions: any thread.
 */
#ifndef MC_STORE_MASTER_CLIENT_H
#define MC_STORE_MASTER_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "rpc/msgpack.h"
#include "store/master.h"
#include "store/proto.h"

/* ------------------------------------------------------------ requests */

void mc_mcli_put_start(mc_mp_writer_t *w, mc_uuid_t client, const void *key, size_t klen,
                       uint64_t size, const mc_master_put_cfg_t *cfg);
/* PUT_END, PUT_REVOKE */
void mc_mcli_client_key(mc_mp_writer_t *w, mc_uuid_t client, const void *key, size_t klen);
void mc_mcli_batch_put_start(mc_mp_writer_t *w, mc_uuid_t client, const mc_master_key_t *keys,
                             const uint64_t *sizes, size_t n, const mc_master_put_cfg_t *cfg);
/* BATCH_PUT_END, BATCH_PUT_REVOKE */
void mc_mcli_client_keys(mc_mp_writer_t *w, mc_uuid_t client, const mc_master_key_t *keys,
                         size_t n);
/* GET_REPLICA_LIST, EXIST_KEY, META_GET, META_DEL */
void mc_mcli_key(mc_mp_writer_t *w, const void *key, size_t klen);
/* BATCH_GET_REPLICA_LIST, BATCH_EXIST_KEY */
void mc_mcli_keys(mc_mp_writer_t *w, const mc_master_key_t *keys, size_t n);
/* BATCH_GET_REPLICA_LIST of a reader that will release the leases (RELEASE) */
void mc_mcli_keys_release(mc_mp_writer_t *w, const mc_master_key_t *keys, size_t n);
/* LEASE_RELEASE of the keys a BATCH_GET_REPLICA_LIST {RELEASE} granted at
 * grant_us (its reply's GRANT_US) by the master of view_version: those of
 * keys[0..n) whose st[i] is MC_OK (every one when st is NULL) */
void mc_mcli_lease_release(mc_mp_writer_t *w, const mc_master_key_t *keys, const mc_status_t *st,
                           size_t n, uint64_t grant_us, int64_t view_version);
void mc_mcli_remove(mc_mp_writer_t *w, const void *key, size_t klen, int force);
void mc_mcli_batch_remove(mc_mp_writer_t *w, const mc_master_key_t *keys, size_t n, int force);
/* GET_REPLICA_LIST_BY_REGEX (force ignored), REMOVE_BY_REGEX */
void mc_mcli_regex(mc_mp_writer_t *w, const char *regex, int force);
void mc_mcli_remove_all(mc_mp_writer_t *w, int force);
void mc_mcli_mount(mc_mp_writer_t *w, mc_uuid_t client, const mc_master_segment_t *seg);
void mc_mcli_remount(mc_mp_writer_t *w, mc_uuid_t client, const mc_master_segment_t *segs,
                     size_t n);
void mc_mcli_unmount(mc_mp_writer_t *w, mc_uuid_t client, mc_uuid_t segment_id);
void mc_mcli_ping(mc_mp_writer_t *w, mc_uuid_t client);
/* LIST_SEGMENTS of one client's segments */
void mc_mcli_list_segments(mc_mp_writer_t *w, mc_uuid_t client);
void mc_mcli_meta_put(mc_mp_writer_t *w, const void *key, size_t klen, const void *val, size_t vlen,
                      mc_uuid_t owner);
void mc_mcli_meta_list(mc_mp_writer_t *w, const void *prefix, size_t plen);
/* The next page of a listing: the keys after `after` (the previous page's
 * last key; NULL = the first page). */
void mc_mcli_meta_list_after(mc_mp_writer_t *w, const void *prefix, size_t plen, const void *after,
                             size_t alen);
/* SERVICE_READY, GET_FSDIR */
void mc_mcli_empty(mc_mp_writer_t *w);

/* ----------------------------------------------------------- responses */

/* PUT_START, GET_REPLICA_LIST: replicas (at most room) and, when present,
 * the lease (lease_us may be NULL). */
mc_status_t mc_mcli_dec_replicas(const uint8_t *body, size_t len, mc_master_replica_desc_t *d,
                                 uint32_t room, uint32_t *n, uint64_t *lease_us);

/* BATCH_PUT_START, BATCH_GET_REPLICA_LIST: per item status and replicas;
 * item i's replicas go to d[i * per_key ...], their count to nrep[i].
 * At most room items (more is a protocol error); *n gets the count;
 * *lease_us (may be NULL) the shortest lease of the items, 0 if none. */
mc_status_t mc_mcli_dec_items(const uint8_t *body, size_t len, mc_status_t *st,
                              mc_master_replica_desc_t *d, uint32_t per_key, uint32_t *nrep,
                              size_t room, size_t *n, uint64_t *lease_us);

/* BATCH_PUT_END/REVOKE, BATCH_REMOVE, BATCH_EXIST_KEY: statuses (and, for
 * exist, the booleans into exists, which may be NULL). */
mc_status_t mc_mcli_dec_statuses(const uint8_t *body, size_t len, mc_status_t *st, int *exists,
                                 size_t room, size_t *n);

/* One unsigned or signed integer / bool field (COUNT, VIEW_VERSION,
 * CLIENT_STATUS, EXISTS, DRAIN_UNTIL_US, ...). MC_ERR_NOT_FOUND if absent. */
mc_status_t mc_mcli_dec_int(const uint8_t *body, size_t len, unsigned field, int64_t *out);

/* One str/bin field (TEXT, VALUE, ERROR): pointer into body. */
mc_status_t mc_mcli_dec_bytes(const uint8_t *body, size_t len, unsigned field, const void **p,
                              size_t *plen);

#endif /* MC_STORE_MASTER_CLIENT_H */
