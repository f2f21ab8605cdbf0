/*
 * proto.h - message bodies of the store protocol (rpc/methods.h ids 100-399).
 *
 * Every body is a msgpack map keyed by the field ids below; unknown ids are
 * skipped, so fields can be added. Keys travel as bin (str accepted).
 * A failed call carries its status in the frame header and, when it helps,
 * a human sentence in MC_F_ERROR.
 *
 * Requests (fields) -> response fields:
 *   SERVICE_READY      {}                                   -> {TEXT: version}
 *   PUT_START          {CLIENT_ID, KEY, SIZE, CONFIG}        -> {REPLICAS}
 *   PUT_END/REVOKE     {CLIENT_ID, KEY}                      -> {}
 *   BATCH_PUT_START    {CLIENT_ID, KEYS, SIZES, CONFIG}      -> {ITEMS: [{STATUS, REPLICAS}]}
 *   BATCH_PUT_END/REVOKE {CLIENT_ID, KEYS}                   -> {STATUSES}
 *   GET_REPLICA_LIST   {KEY}                                 -> {REPLICAS, LEASE_TTL_US}
 *   BATCH_GET_REPLICA_LIST {KEYS}                            -> {ITEMS: [{STATUS, REPLICAS,
 *                                                               LEASE_TTL_US}]}
 *   BATCH_GET_REPLICA_LIST {KEYS, RELEASE: true}             -> {ITEMS: [...], GRANT_US,
 *                                                               VIEW_VERSION} (the reader
 *                                 will release the leases: LEASE_RELEASE; without RELEASE,
 *                                 or from a master with lease_release off, no GRANT_US)
 *   LEASE_RELEASE      {KEYS, GRANT_US, VIEW_VERSION}        -> {COUNT: releases that counted}
 *   GET_REPLICA_LIST_BY_REGEX {REGEX}                        -> {ENTRIES: [{KEY, REPLICAS}],
 *                                                               TRUNCATED}
 *   EXIST_KEY          {KEY}                                 -> {EXISTS}
 *   BATCH_EXIST_KEY    {KEYS}                                -> {STATUSES, EXISTS: [bool]}
 *   REMOVE             {KEY, FORCE}                          -> {}
 *   REMOVE_BY_REGEX    {REGEX, FORCE} / REMOVE_ALL {FORCE}   -> {COUNT}
 *   BATCH_REMOVE       {KEYS, FORCE}                         -> {STATUSES}
 *   MOUNT_SEGMENT      {CLIENT_ID, SEGMENT}                  -> {}
 *   REMOUNT_SEGMENT    {CLIENT_ID, SEGMENTS}                 -> {}
 *   UNMOUNT_SEGMENT    {CLIENT_ID, SEGMENT_ID}               -> {DRAIN_UNTIL_US}
 *   PING               {CLIENT_ID}                           -> {VIEW_VERSION, CLIENT_STATUS}
 *   GET_FSDIR          {}                                    -> {TEXT: tier dir or "", CLUSTER_ID,
 *                                                               PERSIST: 0 off, 1 async, 2 eager}
 *   TIER_ADD           {CLIENT_ID, KEY, SIZE}                -> {}   (the key's file is written)
 *   META_GET {KEY} -> {VALUE}; META_PUT {KEY, VALUE, CLIENT_ID} -> {};
 *   META_DEL {KEY} -> {}; META_LIST {PREFIX} -> {ENTRIES: [{KEY, VALUE}]}
 *   QUERY_KEY          {KEY}          -> {SIZE, COMPLETE, DISK, REPLICAS, LEASE_LEFT_US,
 *                                         PIN_LEFT_US, IDLE_US}   (no lease, no access)
 *   LIST_SEGMENTS      {[CLIENT_ID]}  -> {SEGMENTS: [{SEGMENT_ID, NAME, ENDPOINT, ADDR: base,
 *                                         SIZE: capacity, USED, ALLOCS, STATE, CLIENT_ID}]}
 *                                     (with CLIENT_ID: only that client's segments)
 *   LIST_KEYS          {[REGEX], [COUNT: limit 1..100000, 1000]}
 *                                     -> {ENTRIES: [{KEY, SIZE, NREP, DISK, COMPLETE,
 *                                         LEASE_LEFT_US}], TRUNCATED}   (no lease)
 */
#ifndef MC_STORE_PROTO_H
#define MC_STORE_PROTO_H

#include "rpc/fields.h"
#include "rpc/msgpack.h"
#include "store/master.h"

/* Most preferred segments a put may name. */
#define MC_PROTO_MAX_PREFERRED 16

void mc_proto_write_uuid(mc_mp_writer_t *w, mc_uuid_t id);
mc_uuid_t mc_proto_read_uuid(mc_mp_reader_t *r);

void mc_proto_write_replicas(mc_mp_writer_t *w, const mc_master_replica_desc_t *d, uint32_t n);
/* Reads at most `room` descriptors; more is a protocol error. */
void mc_proto_read_replicas(mc_mp_reader_t *r, mc_master_replica_desc_t *d, uint32_t room,
                            uint32_t *n);

/* A segment with its strings copied out of the body (NUL-terminated). */
typedef struct mc_proto_segment {
    mc_master_segment_t seg;
    char name[MC_MASTER_NAME_MAX];
    char te_endpoint[MC_MASTER_NAME_MAX];
} mc_proto_segment_t;

void mc_proto_write_segment(mc_mp_writer_t *w, const mc_master_segment_t *s);
/* On a malformed segment sets r->err and, when it can tell, *why. */
void mc_proto_read_segment(mc_mp_reader_t *r, mc_proto_segment_t *out, const char **why);

/* A put config with its preferred names copied out of the body. */
typedef struct mc_proto_put_cfg {
    mc_master_put_cfg_t cfg;
    const char *pref[MC_PROTO_MAX_PREFERRED];
    char names[MC_PROTO_MAX_PREFERRED][MC_MASTER_NAME_MAX];
} mc_proto_put_cfg_t;

/* Defaults of mc_master_put_cfg_init, no preferred segments. */
void mc_proto_put_cfg_init(mc_proto_put_cfg_t *out);
void mc_proto_write_put_cfg(mc_mp_writer_t *w, const mc_master_put_cfg_t *c);
void mc_proto_read_put_cfg(mc_mp_reader_t *r, mc_proto_put_cfg_t *out, const char **why);

#endif /* MC_STORE_PROTO_H */
