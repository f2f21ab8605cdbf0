/*
 * master.h - the master's metadata service as a library.
 *
 * What it is: clients, the segments they mount, the objects stored in those
 * segments (key -> replicas -> buffer handles), leases, soft pins, eviction,
 * client liveness and the embedded transfer-metadata KV store
 * (`metadata = master`). Semantics follow upstream Mooncake's documented behaviour; error
 * codes keep upstream's names and numbers (mooncake/status.h).
 *
 * What it is not: no RPC, no sockets, no threads and no clock of its own. Every
 * call takes the current monotonic time in microseconds (now_us, from
 * mc_now_us()) so that tests control time; the background work (eviction,
 * abandoned puts, client expiry, segment drain) runs when the owner calls
 * mc_master_tick() from a timer, every 10-100 ms.
 *
 * Threads: every function may be called from any thread, concurrently. Object
 * metadata lives in MC_MASTER_NUM_SHARDS shards by mc_hash64(key), each behind
 * its own mutex; segments behind one rwlock (read to allocate and to build
 * descriptors, write to mount/unmount) plus a mutex per segment allocator;
 * clients behind one mutex; the metadata KV behind its own mutex. Lock order:
 * clients -> (segments | metadata KV); eviction -> shard -> segments ->
 * segment allocator. Batch calls group their keys by shard and take each
 * shard's lock once.
 *
 * Callbacks (foreach_*, *_by_regex, meta_list) run on the calling thread, inside
 * the call, with an internal lock held: they must be short and must not call
 * into the same master. Pointers they receive are borrowed for that callback.
 *
 * Ownership: inputs (keys, names, segment descriptions, configs) are borrowed
 * for the call; the master copies what it keeps. Outputs are written into
 * caller-provided memory, and only when the call (or the item) succeeds,
 * except mc_master_meta_get's value, which is transferred to the caller.
 *
 * Decisions that differ from upstream (each is explained where implemented):
 *  - ExistKey neither grants nor renews a lease and does not count as an
 *    access (upstream grants one; #2187: exist-polling starved eviction). Only
 *    calls that hand out replica addresses (get_replica_list*) grant leases.
 *  - Unmount is two-phase with a drain: replicas on the segment vanish at once
 *    (no new reader can see them), but the segment's memory is reported busy
 *    until the leases of the readers that could still be reading it expire;
 *    see mc_master_unmount_segment.
 *  - Space a writer or reader may still be using is never handed out again
 *    early: a discarded put's space waits for put_start_release_timeout, and a
 *    forced remove of a leased object waits for the lease ("parked" space).
 *  - Replicas of one object are placed on segments with distinct names (a name
 *    is a host), which implies distinct segments.
 *  - A bad key (empty, too long, NUL inside) is INVALID_KEY everywhere.
 *  - A reader may end its read lease before the TTL (batch gets that say so:
 *    mc_master_batch_get_leased, mc_master_batch_lease_release); upstream's
 *    leases always run to it, as ours do for every other reader.
 */
#ifndef MC_STORE_MASTER_H
#define MC_STORE_MASTER_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "util/regex.h"

#define MC_MASTER_NUM_SHARDS 1024
/* Most replicas one object can have; descriptors arrays are sized by it. */
#define MC_MASTER_MAX_REPLICAS 8
/* Segment names and transfer-engine endpoints, including the NUL. */
#define MC_MASTER_NAME_MAX 256
/* Value-size histogram: upper bounds 4K 64K 256K 1M 4M 16M 64M, then +Inf. */
#define MC_MASTER_VALUE_BUCKETS 8

/* Client and segment ids (upstream UUID = pair<uint64,uint64>). {0,0} is "none". */
typedef struct mc_uuid {
    uint64_t hi, lo;
} mc_uuid_t;

static inline int mc_uuid_eq(mc_uuid_t a, mc_uuid_t b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

static inline int mc_uuid_is_zero(mc_uuid_t a)
{
    return a.hi == 0 && a.lo == 0;
}

typedef struct mc_master mc_master_t;

typedef struct mc_master_opts {
    uint64_t lease_ttl_us;                 /* read lease granted by a get (5 s) */
    int lease_release;                     /* readers that say they will may end their
                                            * lease before its TTL (1; 0: every lease
                                            * runs to its TTL, as upstream's) */
    uint64_t soft_pin_ttl_us;              /* default soft pin window (30 min) */
    uint64_t max_soft_pin_ttl_us;          /* cap of a per-put soft pin window (24 h) */
    int allow_evict_soft_pinned;           /* pinned objects may go, after all others (1) */
    double eviction_ratio;                 /* fraction of eligible objects per round (0.05) */
    double eviction_high_watermark;        /* allocated/capacity that triggers eviction (0.95) */
    uint64_t client_ttl_us;                /* silence after which a client expires (10 s) */
    uint64_t put_start_discard_timeout_us; /* unfinished put becomes invisible (30 s) */
    uint64_t put_start_release_timeout_us; /* ...and its space reusable (600 s); > discard */
    uint32_t max_key_len;                  /* bytes (4096); at most 65535 */
    uint64_t max_object_size;              /* bytes (64 GiB) */
    uint32_t max_replicas;                 /* per object (MC_MASTER_MAX_REPLICAS) */
    uint32_t max_allocs_per_segment;       /* 0 = clamp(size / 4096, 1024, 16 Mi) */
    uint32_t placement_max_tries;          /* segments tried at random per put (100) */
    uint32_t regex_max_results;            /* cap of get_replica_list_by_regex (10000) */
    mc_regex_limits_t regex;               /* what one regex may cost (util/regex.h) */
    uint32_t evict_sample_max;             /* eviction ranks at most this many (1 Mi) */
    uint64_t meta_max_value_len;           /* metadata KV value cap (16 MiB) */
    uint64_t meta_max_entries;             /* metadata KV entries at most (65536) */
    uint64_t meta_max_bytes;               /* metadata KV keys + values at most (256 MiB) */
    /* Persistent tier (master_tier.c): called, with the key's shard lock
     * held, whenever an object that has a DISK replica leaves the table
     * (remove, revoke, discarded put): its file is to be deleted. It must be
     * short (queue the key); the key is borrowed for the call. NULL = none. */
    void (*disk_drop)(void *arg, const char *key, size_t key_len);
    void *disk_drop_arg;
    /* Node-local offload (master_offload.c; upstream's names). Nodes that
     * poll (mc_master_offload_poll) get requests to persist objects of
     * their segments to their own disk: LOCAL_DISK replicas. */
    int enable_offload;              /* nodes may offload at all (0) */
    int offload_on_evict;            /* 1: ask at eviction; 0: after PutEnd (eager) (0) */
    int offload_force_evict;         /* queue full: 1 evicts without persisting; 0 keeps
                                      * the object in memory (0) */
    uint32_t offloading_queue_limit; /* requests queued per node at most (50000) */
    double offload_cap_ratio;        /* per eviction cycle: this fraction of the limit (0.5) */
    uint64_t offload_timeout_us;     /* a sent request unanswered this long is void (30 s) */
    int promotion_on_hit;            /* a key loaded from disk this often stays in DRAM (0) */
    uint32_t promotion_admission_threshold; /* loads (count-min sketch) to promote (2) */
} mc_master_opts_t;

/* Fills the defaults above. */
void mc_master_opts_init(mc_master_opts_t *o);

/* view_version: returned by every ping; the owner passes a value that grows on
 * every master start (e.g. persisted counter + 1, or wall-clock seconds), so
 * clients notice a restart. opts is copied.
 * MC_OK, MC_ERR_INVALID_PARAMS (an option out of range), MC_ERR_NOMEM. */
mc_status_t mc_master_create(const mc_master_opts_t *opts, int64_t view_version, mc_master_t **out);

/* Frees everything. Accepts NULL. No other call may be running. */
void mc_master_destroy(mc_master_t *m);

/* ---- segments and clients ---- */

/* A segment as a client describes it. Strings are NUL-terminated, shorter than
 * MC_MASTER_NAME_MAX, borrowed for the call. */
typedef struct mc_master_segment {
    mc_uuid_t id;            /* chosen by the client; not {0,0} */
    const char *name;        /* logical name, e.g. "ip:port" of the host; not empty */
    const char *te_endpoint; /* where the transfer engine reaches it; may be empty */
    uint64_t base;           /* address in the owner's space; not 0 */
    uint64_t size;           /* bytes; >= 8 */
} mc_master_segment_t;

/* Upstream ClientStatus numbering. */
typedef enum mc_master_client_status {
    MC_MASTER_CLIENT_UNDEFINED = 0,
    MC_MASTER_CLIENT_OK = 1,
    MC_MASTER_CLIENT_NEED_REMOUNT = 2, /* unknown or expired: call remount_segments */
} mc_master_client_status_t;

/* Mount one segment owned by client. Registers the client (status OK) if it is
 * unknown; an existing NEED_REMOUNT client stays so until remount_segments.
 * Counts as a sign of life of the client.
 * MC_OK (also for an identical re-mount by the same client),
 * MC_ERR_INVALID_PARAMS (zero id or client, base 0, size < 8, bad name, overflow),
 * MC_ERR_SEGMENT_ALREADY_EXISTS (same id, other owner or other parameters; or
 *   another live client has a segment of this name: two processes claim one
 *   host identity, see mc_master_segment_holder),
 * MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS (that id, or an overlapping range of the
 *   same owner, is still draining after an unmount: retry after drain_until),
 * MC_ERR_NOMEM. */
mc_status_t mc_master_mount_segment(mc_master_t *m, mc_uuid_t client,
                                    const mc_master_segment_t *seg, uint64_t now_us);

/* Another client that has a mounted segment named name: 1 with its id and
 * its segment's endpoint (NUL-terminated, truncated to room), else 0. */
int mc_master_segment_holder(mc_master_t *m, const char *name, mc_uuid_t client, mc_uuid_t *holder,
                             char *endpoint, size_t room);

/* After a ping said NEED_REMOUNT: mount every segment the client still has
 * (identical ones already mounted are kept) and mark the client OK. Segments
 * rejected as INVALID_PARAMS or SEGMENT_ALREADY_EXISTS are logged and skipped,
 * as upstream. n may be 0 (a client that only reads).
 * MC_OK, MC_ERR_INVALID_PARAMS (client {0,0}), MC_ERR_NOMEM,
 * MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS (some segment is still draining; the
 *   others are mounted; the client stays NEED_REMOUNT and retries). */
mc_status_t mc_master_remount_segments(mc_master_t *m, mc_uuid_t client,
                                       const mc_master_segment_t *segs, size_t n, uint64_t now_us);

/* Unmount, two-phase. Phase 1 (inside this call): the segment stops taking
 * allocations and every replica on it is dropped from its object (objects left
 * with no replica are removed, in-progress puts included: their PutEnd then
 * gets OBJECT_NOT_FOUND, or completes the replicas they still have). Phase 2:
 * the segment record (and its capacity) goes away once no reader that was
 * granted a lease before phase 1 can still be reading it: at the latest lease
 * deadline among the objects that had a replica there. *drain_until_us (may be
 * NULL) receives that instant; if it is <= now_us the segment is gone when the
 * call returns, otherwise mc_master_tick() finishes it. The owner must keep the
 * memory registered until then (readers get a transfer failure afterwards and
 * fail over to another replica). Writers get no such grace: a put into the
 * segment simply loses that replica. Calling again while draining returns
 * MC_OK with the same drain_until.
 * MC_OK, MC_ERR_SEGMENT_NOT_FOUND (unknown id; the RPC layer may map it to OK
 * for idempotence, as upstream), MC_ERR_ILLEGAL_CLIENT (owned by another
 * client), MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS (another unmount of it is in
 * phase 1 right now; retry). */
mc_status_t mc_master_unmount_segment(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                      uint64_t now_us, uint64_t *drain_until_us);

/* Heartbeat. Unknown or expired clients get NEED_REMOUNT (and are tracked from
 * then on, so their metadata KV entries expire if they fall silent).
 * Never fails; outputs may be NULL. */
void mc_master_ping(mc_master_t *m, mc_uuid_t client, uint64_t now_us, int64_t *view_version,
                    mc_master_client_status_t *status);

/* ---- objects ---- */

/* Upstream ReplicaStatus numbering. */
typedef enum mc_master_replica_status {
    MC_MASTER_REPLICA_PROCESSING = 2, /* allocated, being written */
    MC_MASTER_REPLICA_COMPLETE = 3,   /* written, readable */
} mc_master_replica_status_t;

/* Upstream ReplicaType numbering. */
typedef enum mc_master_replica_kind {
    MC_MASTER_REPLICA_MEMORY = 0,
    MC_MASTER_REPLICA_DISK = 1,       /* a file of the persistent tier (store/tier.h) */
    MC_MASTER_REPLICA_LOCAL_DISK = 2, /* a file on one node's own disk (master_offload.c):
                                       * segment_id/name/te_endpoint name the node's
                                       * segment; address is 0 */
} mc_master_replica_kind_t;

/* Where one replica lives (upstream Replica::Descriptor). A DISK replica has
 * only size and status: its file's place follows from the key (tier.h). */
typedef struct mc_master_replica_desc {
    uint64_t address; /* remote address = segment base + offset */
    uint64_t size;    /* object size (the range is at least this long) */
    mc_uuid_t segment_id;
    mc_master_replica_status_t status;
    mc_master_replica_kind_t kind;
    char segment_name[MC_MASTER_NAME_MAX];
    char te_endpoint[MC_MASTER_NAME_MAX];
} mc_master_replica_desc_t;

/* A key: bytes, 1..max_key_len long, no NUL. */
typedef struct mc_master_key {
    const char *data;
    size_t len;
} mc_master_key_t;

/* What a put does to the object's soft pin (upstream SoftPinAction). */
typedef enum mc_master_pin_action {
    MC_MASTER_PIN_PRESERVE = 0, /* a new object: not pinned; an upsert keeps the pin the
                                   replaced object had (if it was still running) */
    MC_MASTER_PIN_ENABLE = 1,   /* pinned for soft_pin_ttl_us (0: opts default) */
    MC_MASTER_PIN_DISABLE = 2,  /* not pinned; an upsert drops the replaced object's pin */
} mc_master_pin_action_t;

/* pin_ttl_ms of a hard-pinned object (never evicted; upstream with_hard_pin):
 * above every soft pin window (max_soft_pin_ttl is checked to stay below). */
#define MC_MASTER_PIN_HARD UINT32_MAX

typedef struct mc_master_put_cfg {
    uint32_t replica_num; /* wanted; 1..max_replicas */
    int with_soft_pin;    /* = pin_action ENABLE (the older spelling) */
    uint8_t pin_action;   /* mc_master_pin_action_t */
    int hard_pin;         /* never evicted (an upsert keeps a hard pin too) */
    /* replace an existing object of the key (upstream Upsert): a complete one
     * is removed as by a forced remove (readers holding a lease keep its
     * space until the lease ends), an unfinished put is pre-empted at once;
     * then the put starts as a new one. Readers see REPLICA_IS_NOT_READY
     * until its PutEnd; a revoked upsert leaves no object (as upstream). */
    int upsert;
    /* 0 = opts default; clamped to the max. Only with ENABLE (else
     * INVALID_PARAMS, as upstream). */
    uint64_t soft_pin_ttl_us;
    const char *const *preferred_segments; /* segment names tried first, in order */
    size_t n_preferred;
    /* 0, or an id the client chose for this put: a PutStart of the same key,
     * client, size and put_id while that put is unfinished is a resend (the
     * first answer was lost, e.g. in a failover) and gets the same replicas
     * instead of OBJECT_ALREADY_EXISTS */
    uint64_t put_id;
} mc_master_put_cfg_t;

/* replica_num 1, PRESERVE (no soft pin), no preference, no upsert. */
void mc_master_put_cfg_init(mc_master_put_cfg_t *c);

/* Start a put: allocate up to cfg->replica_num replicas of `size` bytes on
 * distinct segments (preferred names first, then random MOUNTED segments with
 * room). Best effort: *nrep (1..replica_num) says how many were placed; out[]
 * (room for cfg->replica_num) receives them, status PROCESSING. If nothing can
 * be placed, objects are evicted only if that makes room for one replica: a
 * window of `size` bytes on one segment holding only free space and objects
 * eviction may take (least recently used first; a bit more than size, up to
 * eviction_ratio of the segment, so the next puts fit too); the put is then
 * placed there. A value larger than what eviction could free on any segment
 * is refused without evicting anything (master_evict.c, evict_for).
 * The object is invisible to gets until mc_master_put_end.
 * A put left unfinished for put_start_discard_timeout is discarded (tick, or a
 * new put_start of the same key pre-empts it); its space is reused only after
 * put_start_release_timeout from its start, because the slow writer may still
 * be writing into it.
 * A resend of an unfinished put (cfg->put_id, see there) gets its replicas.
 * With cfg->upsert an existing object of the key is replaced (see there).
 * MC_OK, MC_ERR_INVALID_KEY, MC_ERR_INVALID_PARAMS (size 0 or > max_object_size,
 * replica_num 0 or > max_replicas, a bad pin_action, a soft_pin_ttl without
 * ENABLE), MC_ERR_OBJECT_ALREADY_EXISTS (without upsert: a complete
 * object, or an unfinished put younger than the discard timeout),
 * MC_ERR_NO_AVAILABLE_HANDLE, MC_ERR_NOMEM. */
mc_status_t mc_master_put_start(mc_master_t *m, mc_uuid_t client, const char *key, size_t key_len,
                                uint64_t size, const mc_master_put_cfg_t *cfg, uint64_t now_us,
                                mc_master_replica_desc_t *out, uint32_t *nrep);

/* Finish a put: its replicas become COMPLETE and readable; the soft pin window
 * (if any) starts now. Idempotent on a complete object of the same client.
 * MC_OK, MC_ERR_INVALID_KEY, MC_ERR_OBJECT_NOT_FOUND (never started, revoked,
 * discarded, or every replica lost to unmounts), MC_ERR_ILLEGAL_CLIENT (started
 * by another client). */
mc_status_t mc_master_put_end(mc_master_t *m, mc_uuid_t client, const char *key, size_t key_len,
                              uint64_t now_us);

/* Abandon a put whose transfer failed; its space is freed at once (the caller
 * must have no write to it in flight).
 * MC_OK, MC_ERR_INVALID_KEY, MC_ERR_OBJECT_NOT_FOUND, MC_ERR_ILLEGAL_CLIENT,
 * MC_ERR_INVALID_WRITE (already complete: use remove). */
mc_status_t mc_master_put_revoke(mc_master_t *m, mc_uuid_t client, const char *key, size_t key_len,
                                 uint64_t now_us);

/* Batch variants. They return MC_OK when the call was well formed and then
 * report each item in st[i]; MC_ERR_INVALID_PARAMS (bad cfg, n and arrays) or
 * MC_ERR_NOMEM otherwise (st[] untouched). Items are processed grouped by shard,
 * in key order within a shard, so a key repeated in one batch_put_start gets
 * OBJECT_ALREADY_EXISTS the second time. batch_put_end and
 * batch_get_replica_list record key i's access (for LRU) i microseconds
 * before now: a batch's later keys rank as less recently used, and eviction
 * takes a batch's tail first (a KV cache's blocks come in prefix order;
 * master_objects.c, BATCH_RANK). Leases and soft pins run from now.
 * batch_put_start: descs[] has room for n * cfg->replica_num; item i's replicas
 * are descs[i * replica_num ...], nrep[i] of them. */
mc_status_t mc_master_batch_put_start(mc_master_t *m, mc_uuid_t client, const mc_master_key_t *keys,
                                      const uint64_t *sizes, size_t n,
                                      const mc_master_put_cfg_t *cfg, uint64_t now_us,
                                      mc_master_replica_desc_t *descs, uint32_t *nrep,
                                      mc_status_t *st);
mc_status_t mc_master_batch_put_end(mc_master_t *m, mc_uuid_t client, const mc_master_key_t *keys,
                                    size_t n, uint64_t now_us, mc_status_t *st);
mc_status_t mc_master_batch_put_revoke(mc_master_t *m, mc_uuid_t client,
                                       const mc_master_key_t *keys, size_t n, uint64_t now_us,
                                       mc_status_t *st);

/* Replicas to read: the COMPLETE replicas on mounted segments, at most `room`
 * of them into out[], *nrep of them. Grants a read lease until now +
 * lease_ttl (never shortening a longer one; *lease_ttl_us, may be NULL,
 * receives lease_ttl), renews the soft pin, and records the access for LRU.
 * MC_OK, MC_ERR_INVALID_KEY, MC_ERR_INVALID_PARAMS (room 0),
 * MC_ERR_OBJECT_NOT_FOUND (also when every replica is on a segment being
 * unmounted), MC_ERR_REPLICA_IS_NOT_READY (put not finished). */
mc_status_t mc_master_get_replica_list(mc_master_t *m, const char *key, size_t key_len,
                                       uint64_t now_us, mc_master_replica_desc_t *out,
                                       uint32_t room, uint32_t *nrep, uint64_t *lease_ttl_us);

/* descs[] has room for n * room; item i's replicas are descs[i * room ...]. */
mc_status_t mc_master_batch_get_replica_list(mc_master_t *m, const mc_master_key_t *keys, size_t n,
                                             uint64_t now_us, mc_master_replica_desc_t *descs,
                                             uint32_t room, uint32_t *nrep, mc_status_t *st);

/* Early lease release (our extension; upstream's leases always run to their
 * TTL). mc_master_batch_get_replica_list with release = 1: the caller (one
 * reader) promises to call mc_master_batch_lease_release for these keys,
 * with this master's view_version and grant_us = now_us, once its reads are
 * done. Once every reader that holds an object's lease has released it,
 * instead of lease_ttl after the last grant, remove and a put that finds no
 * room may take it (the tick's eviction above the high watermark still
 * spares it until the deadline: lately read blocks before those only
 * written); the TTL stays
 * the bound when a release is lost or its reader dies (the master does not
 * track which client holds which lease: a dead reader's leases end by their
 * TTL, which by default is shorter than client_ttl). A grant with
 * release = 0 (upstream clients, regex gets, offload loads) keeps the lease
 * to its deadline, as do soft-pinned objects. release is ignored when
 * opts.lease_release is 0. Otherwise as mc_master_batch_get_replica_list. */
mc_status_t mc_master_batch_get_leased(mc_master_t *m, const mc_master_key_t *keys, size_t n,
                                       uint64_t now_us, int release,
                                       mc_master_replica_desc_t *descs, uint32_t room,
                                       uint32_t *nrep, mc_status_t *st);

/* A reader is done with the objects of keys, granted by
 * mc_master_batch_get_leased(release = 1) at grant_us on the master of
 * view_version. A release counts only for the lease period it was granted
 * in: not after the lease ended (by its TTL, or released), not for another
 * object of the key (removed and put again), not for a grant of another
 * master (view_version differs: a restart or a failover) or older than
 * lease_ttl; those release nothing, which is safe (the lease runs to its
 * TTL). Invalid keys and absent objects are skipped. *released (may be NULL)
 * receives how many releases counted.
 * MC_OK, MC_ERR_INVALID_PARAMS (keys NULL with n > 0, grant_us after
 * now_us), MC_ERR_NOMEM. */
mc_status_t mc_master_batch_lease_release(mc_master_t *m, const mc_master_key_t *keys, size_t n,
                                          int64_t view_version, uint64_t grant_us, uint64_t now_us,
                                          size_t *released);

/* Return non-zero to stop. */
typedef int (*mc_master_replicas_cb_t)(void *arg, const char *key, size_t key_len,
                                       const mc_master_replica_desc_t *reps, uint32_t nrep);

/* Every readable object whose key matches regex (the PCRE2 dialect of
 * util/regex.h: a search, unanchored unless the pattern says so, like
 * upstream's std::regex_search), as get_replica_list does for one key (leases
 * included), at most opts.regex_max_results of them. *count (may be NULL)
 * receives how many were reported; *truncated (may be NULL) whether the cap
 * cut the list short. Order is unspecified. The whole walk in one call (see
 * mc_master_scan_* for the stepwise form a service runs off its reactors).
 * MC_OK, MC_ERR_INVALID_PARAMS (a regex refused or over its budget; the
 * reason is logged at debug), MC_ERR_NOMEM. */
mc_status_t mc_master_get_replica_list_by_regex(mc_master_t *m, const char *regex, uint64_t now_us,
                                                mc_master_replicas_cb_t cb, void *arg,
                                                size_t *count, int *truncated);

/* Whether a readable (complete) object exists. A pure query: no lease, no
 * access recorded, so polling it can never keep an object from eviction
 * (upstream #2187).
 * MC_OK (*exists set), MC_ERR_INVALID_KEY. */
mc_status_t mc_master_exist_key(mc_master_t *m, const char *key, size_t key_len, uint64_t now_us,
                                int *exists);

struct mc_master_key_info;
/* Look at one object without touching it (no lease, no access): up to room
 * replicas (memory ones in their current state, then the DISK one) into out,
 * *nrep of them, and *info (its key field NULL: the caller has the key).
 * MC_OK, MC_ERR_OBJECT_NOT_FOUND, MC_ERR_INVALID_KEY, MC_ERR_INVALID_PARAMS. */
mc_status_t mc_master_query_key(mc_master_t *m, const char *key, size_t key_len,
                                mc_master_replica_desc_t *out, uint32_t room, uint32_t *nrep,
                                struct mc_master_key_info *info);
mc_status_t mc_master_batch_exist_key(mc_master_t *m, const mc_master_key_t *keys, size_t n,
                                      uint64_t now_us, int *exists, mc_status_t *st);

/* Remove an object.
 * Without force: MC_ERR_OBJECT_HAS_LEASE while a reader's lease runs,
 * MC_ERR_REPLICA_IS_NOT_READY while its put is unfinished.
 * With force: removed anyway, but the space is not reused while it may still be
 * read or written: a leased object's space waits for its lease, an unfinished
 * put's space for put_start_release_timeout (as a discarded put).
 * MC_OK, MC_ERR_INVALID_KEY, MC_ERR_OBJECT_NOT_FOUND, and the two above. */
mc_status_t mc_master_remove(mc_master_t *m, const char *key, size_t key_len, int force,
                             uint64_t now_us);
mc_status_t mc_master_batch_remove(mc_master_t *m, const mc_master_key_t *keys, size_t n, int force,
                                   uint64_t now_us, mc_status_t *st);

/* Remove every matching (every, for remove_all) object that mc_master_remove
 * would remove with the same force; the others stay. *count (may be NULL)
 * receives how many went. Every key is matched first: a regex refused or
 * over its budget removes nothing.
 * MC_OK, MC_ERR_INVALID_PARAMS (bad regex, or over its budget). */
mc_status_t mc_master_remove_by_regex(mc_master_t *m, const char *regex, int force, uint64_t now_us,
                                      long *count);
mc_status_t mc_master_remove_all(mc_master_t *m, int force, uint64_t now_us, long *count);

/* ---- persistent tier (master_tier.c) ----
 *
 * An object may have, besides its memory replicas, one DISK replica: a file
 * under the tier directory written by a client (store/tier.h). It is listed
 * after the memory replicas by get_replica_list (kind DISK), counts for
 * exist, and takes no segment space. Eviction frees an object's memory
 * replicas but keeps an object that has a DISK replica (readable from its
 * file); an unmount likewise. When the object leaves the table otherwise
 * (remove, revoke, discard) opts.disk_drop is told to delete the file. */

/* When clients write an object's file (store/tier.h), announced by the
 * master service with the tier directory: never, after the put returned (a
 * background copy), or before the put returns. */
typedef enum mc_master_persist {
    MC_MASTER_PERSIST_OFF = 0,
    MC_MASTER_PERSIST_ASYNC = 1,
    MC_MASTER_PERSIST_EAGER = 2,
} mc_master_persist_t;

/* A client wrote key's file (size bytes). The object (complete, or a put in
 * progress: eager persistence) gets its DISK replica (journaled: DISK).
 * MC_OK, MC_ERR_INVALID_KEY, MC_ERR_OBJECT_NOT_FOUND (removed or evicted
 * meanwhile: the file is an orphan, the caller deletes it),
 * MC_ERR_INVALID_PARAMS (size differs from the object's). */
mc_status_t mc_master_tier_add(mc_master_t *m, const char *key, size_t key_len, uint64_t size,
                               uint64_t now_us);

/* At start (without HA), from a scan of the tier directory: a complete
 * object with only a DISK replica (or, if a complete object of the key
 * exists with that size, a DISK replica more). Journaled (DISK) like
 * mc_master_tier_add. MC_OK, MC_ERR_INVALID_KEY,
 * MC_ERR_INVALID_PARAMS (size 0 or too large, or another size than the
 * existing object's), MC_ERR_OBJECT_ALREADY_EXISTS (an unfinished put of the
 * key: the file is of an older put, its writer reports its own),
 * MC_ERR_NOMEM. */
mc_status_t mc_master_tier_restore(mc_master_t *m, const char *key, size_t key_len, uint64_t size,
                                   uint64_t now_us);

/* The same for a scan on a master that already has objects (a new HA
 * leader): only keys without an object become disk-only objects. The
 * journal is authoritative for the others: their DISK replicas are in it,
 * and a file of a key that exists may be of an older put of it. MC_OK,
 * MC_ERR_INVALID_KEY, MC_ERR_INVALID_PARAMS (size 0 or too large),
 * MC_ERR_OBJECT_ALREADY_EXISTS (the key has an object), MC_ERR_NOMEM. */
mc_status_t mc_master_tier_restore_absent(mc_master_t *m, const char *key, size_t key_len,
                                          uint64_t size, uint64_t now_us);

/* Run fn(arg) with key's shard lock held, if no object of that key exists
 * (so that a file deletion cannot race with a new put of the key, which
 * creates the object before writing its file). MC_OK (fn ran),
 * MC_ERR_OBJECT_ALREADY_EXISTS (fn did not run), MC_ERR_INVALID_KEY. */
mc_status_t mc_master_tier_if_absent(mc_master_t *m, const char *key, size_t key_len,
                                     void (*fn)(void *arg), void *arg);

typedef struct mc_master_tier_stats {
    uint64_t disk_objects; /* objects with a DISK replica */
    uint64_t disk_bytes;   /* their sizes (file headers not counted) */
    uint64_t disk_evicted; /* disk-only objects removed by enforce_quota so far */
} mc_master_tier_stats_t;

void mc_master_tier_stats(mc_master_t *m, mc_master_tier_stats_t *out);

/* When the objects with a DISK replica add up to more than quota_bytes:
 * remove objects that are only on disk (no memory replica, no lease), least
 * recently accessed first, until the total is 95% of the quota; their files
 * go through opts.disk_drop. Files of objects still in memory are not
 * touched (the quota can stay exceeded: logged). Walks every shard: for a
 * background thread, not a reactor. Returns how many objects went. */
uint64_t mc_master_tier_enforce_quota(mc_master_t *m, uint64_t quota_bytes, uint64_t now_us);

/* ---- background work ---- */

/* Run from a timer (10-100 ms). In order: (1) expire clients silent for
 * client_ttl: their segments are unmounted as by unmount_segment, their
 * metadata KV entries deleted, and their next ping says NEED_REMOUNT;
 * (2) finish drained unmounts; (3) discard puts unfinished for
 * put_start_discard_timeout (the key becomes free; the space stays reserved);
 * (4) free reserved space whose time has come; (5) evict when allocated /
 * capacity > eviction_high_watermark (and only then: a failed put evicts for
 * itself, see put_start): about max(eviction_ratio, excess + eviction_ratio)
 * of the eligible objects (complete, no lease), least recently accessed
 * first, soft-pinned ones only after all others and only if
 * allow_evict_soft_pinned. */
void mc_master_tick(mc_master_t *m, uint64_t now_us);

/* ---- metadata KV (transfer-engine metadata in `metadata = master` mode) ---- */

/* Insert, or replace an entry of the same owner. Every entry has an owner
 * (not {0,0}); it is deleted when that client expires (an unknown owner is
 * tracked from now on, as a ping). Another owner's entry is neither replaced
 * nor deleted: that owner is alive (expiry removes its entries), and a
 * second process with the same name must not take the first's place.
 * MC_OK, MC_ERR_INVALID_KEY, MC_ERR_INVALID_PARAMS (no owner, value too long),
 * MC_ERR_ILLEGAL_CLIENT (the key is another owner's), MC_ERR_LIMIT
 * (meta_max_entries or meta_max_bytes reached), MC_ERR_NOMEM. */
mc_status_t mc_master_meta_put(mc_master_t *m, const char *key, size_t key_len, const void *val,
                               size_t val_len, mc_uuid_t owner, uint64_t now_us);

/* The same for upstream's HTTP metadata protocol, which has no owners: the
 * entry has none and stays until deleted (with owner {0,0}); an owned
 * entry is not replaced (MC_ERR_ILLEGAL_CLIENT); bounds as above. */
mc_status_t mc_master_meta_put_unowned(mc_master_t *m, const char *key, size_t key_len,
                                       const void *val, size_t val_len, uint64_t now_us);

/* *val receives a copy (mc_malloc; the caller mc_free()s it; NULL when
 * val_len is 0). MC_OK, MC_ERR_INVALID_KEY, MC_ERR_NOT_FOUND, MC_ERR_NOMEM. */
mc_status_t mc_master_meta_get(mc_master_t *m, const char *key, size_t key_len, void **val,
                               size_t *val_len);

/* Delete an entry of owner ({0,0}: an unowned entry). MC_OK,
 * MC_ERR_INVALID_KEY, MC_ERR_NOT_FOUND, MC_ERR_ILLEGAL_CLIENT (another
 * owner's). */
mc_status_t mc_master_meta_del(mc_master_t *m, const char *key, size_t key_len, mc_uuid_t owner);

/* Return non-zero to stop. */
typedef int (*mc_master_meta_cb_t)(void *arg, const char *key, size_t key_len, const void *val,
                                   size_t val_len);

/* Every entry whose key starts with prefix (prefix_len 0 = all), unordered.
 * *count (may be NULL) receives how many were reported. MC_OK. */
mc_status_t mc_master_meta_list(mc_master_t *m, const char *prefix, size_t prefix_len,
                                mc_master_meta_cb_t cb, void *arg, size_t *count);

/* One page of the listing: the entries with prefix whose keys come after
 * `after` (byte order; NULL = from the first), in key order, as many as fit
 * in max_bytes of keys and values (at least one). *more: entries remain
 * (ask again with the last key as `after`). MC_OK, MC_ERR_INVALID_PARAMS,
 * MC_ERR_NOMEM. */
mc_status_t mc_master_meta_list_page(mc_master_t *m, const char *prefix, size_t prefix_len,
                                     const char *after, size_t after_len, size_t max_bytes,
                                     mc_master_meta_cb_t cb, void *arg, size_t *count, int *more);

/* ---- observation ---- */

typedef struct mc_master_stats {
    int64_t view_version;
    uint64_t key_count;         /* objects visible to put/remove (complete + in progress) */
    uint64_t processing_count;  /* of which puts not finished */
    uint64_t soft_pinned_count; /* of which put with_soft_pin */
    uint64_t parked_count;      /* removed objects whose space is still reserved */
    uint64_t allocated_bytes;   /* requested bytes of all replicas on mounted segments */
    uint64_t capacity_bytes;    /* of mounted segments */
    uint64_t segment_count;     /* mounted */
    uint64_t unmounting_count;  /* draining */
    uint64_t active_clients;    /* status OK */
    uint64_t eviction_attempts, eviction_successes, evicted_keys, evicted_bytes;
    uint64_t put_start_discards; /* puts discarded (timeout, pre-emption, forced remove) */
    uint64_t put_start_releases; /* reserved spaces freed */
    /* observations at put_start, per bucket (not cumulative); last is +Inf */
    uint64_t value_size_buckets[MC_MASTER_VALUE_BUCKETS];
    uint64_t value_size_count, value_size_sum;
    uint64_t shard_locks; /* shard lock acquisitions so far (diagnostics, tests) */
} mc_master_stats_t;

void mc_master_get_stats(mc_master_t *m, mc_master_stats_t *out);

/* Upper bound of value-size bucket i (UINT64_MAX for the last). */
uint64_t mc_master_value_bucket_bound(unsigned i);

typedef struct mc_master_segment_info {
    mc_uuid_t id, owner;
    const char *name, *te_endpoint;
    uint64_t base, size;
    uint64_t used;   /* requested bytes of live allocations */
    uint32_t allocs; /* live allocations */
    int unmounting;
    uint64_t drain_until_us; /* when unmounting */
} mc_master_segment_info_t;

/* Return non-zero to stop. */
typedef int (*mc_master_segment_cb_t)(void *arg, const mc_master_segment_info_t *info);

/* Every segment, mounted and draining (for /segments). Segment lock held. */
void mc_master_foreach_segment(mc_master_t *m, mc_master_segment_cb_t cb, void *arg);

typedef struct mc_master_key_info {
    const char *key;
    size_t key_len;
    uint64_t size;
    uint32_t nrep;  /* memory replicas */
    int disk;       /* has a DISK replica */
    int local_disk; /* has a LOCAL_DISK replica */
    int complete;
    uint64_t lease_until_us;    /* 0 while in progress */
    uint64_t soft_pin_until_us; /* 0 = none */
    uint64_t last_access_us;    /* put start while in progress */
} mc_master_key_info_t;

/* Return non-zero to stop. */
typedef int (*mc_master_key_cb_t)(void *arg, const mc_master_key_info_t *info);

/* Objects whose key matches regex (NULL = all), at most max of them (for
 * /keys). No lease, no access recorded. One shard lock held per callback.
 * MC_OK, MC_ERR_INVALID_PARAMS (bad regex, or over its budget). */
mc_status_t mc_master_foreach_key(mc_master_t *m, const char *regex, size_t max,
                                  mc_master_key_cb_t cb, void *arg, size_t *count);

/* ---- regex scans, step by step (master_scan.c) ----
 *
 * What the *_by_regex calls and foreach_key do, cut into steps so that a
 * service can run them on a worker thread, check a deadline between steps,
 * and give up (the master has no clock of its own). Two phases:
 *   1. matching: each step copies the keys of the next shard (under its lock,
 *      briefly), then runs the regex on up to `keys` of them with no lock
 *      held, so a costly pattern never holds a shard lock;
 *   2. acting (one call): every matched key is looked up again under its
 *      shard lock and reported (leases granted), listed, or removed; an
 *      object that changed meanwhile is judged as it is now.
 * A step that finds the regex over one of its limits ends the scan with
 * MC_ERR_INVALID_PARAMS and nothing was acted on. Each key of the store is
 * copied once, so phase 1 holds at most one shard's keys plus the matches.
 * A scan is used by one thread at a time. */
typedef struct mc_master_scan mc_master_scan_t;

typedef enum mc_master_scan_kind {
    MC_MASTER_SCAN_REPLICAS = 0, /* get_replica_list_by_regex: complete objects, capped */
    MC_MASTER_SCAN_REMOVE = 1,   /* remove_by_regex */
    MC_MASTER_SCAN_KEYS = 2,     /* foreach_key: every object, at most max */
} mc_master_scan_kind_t;

/* regex[0..len) (NULL: every key, KEYS only); force for REMOVE; max for KEYS
 * (REPLICAS uses opts.regex_max_results). MC_OK, MC_ERR_INVALID_PARAMS (a
 * refused pattern: the sentence in why[0..whylen)), MC_ERR_NOMEM. */
mc_status_t mc_master_scan_create(mc_master_t *m, mc_master_scan_kind_t kind, const char *regex,
                                  size_t len, int force, size_t max, mc_master_scan_t **out,
                                  char *why, size_t whylen);

/* Phase 1, at most `keys` regex runs (0 = no limit). MC_INPROGRESS (call
 * again), MC_OK (matching is over: act), MC_ERR_INVALID_PARAMS (over budget:
 * why), MC_ERR_NOMEM. */
mc_status_t mc_master_scan_step(mc_master_t *m, mc_master_scan_t *sc, size_t keys, char *why,
                                size_t whylen);

/* Phase 2, once step returned MC_OK; the call that fits the kind.
 * replicas: cb per object (shard lock held), *count, *truncated (may be NULL).
 * remove: *count removed. keys: cb per object, *count. MC_OK (or
 * MC_ERR_STATE when called before matching ended or for another kind). */
mc_status_t mc_master_scan_replicas(mc_master_t *m, mc_master_scan_t *sc, uint64_t now_us,
                                    mc_master_replicas_cb_t cb, void *arg, size_t *count,
                                    int *truncated);
mc_status_t mc_master_scan_remove(mc_master_t *m, mc_master_scan_t *sc, uint64_t now_us,
                                  long *count);
mc_status_t mc_master_scan_keys(mc_master_t *m, mc_master_scan_t *sc, mc_master_key_cb_t cb,
                                void *arg, size_t *count);

/* Keys matched so far. */
size_t mc_master_scan_matched(const mc_master_scan_t *sc);

/* Accepts NULL. */
void mc_master_scan_destroy(mc_master_scan_t *sc);

/* ---- journal: replication to standby masters (store/master_ha.c) ---- */

/* What changed, as the master core reports it to its journal hook and as a
 * standby applies it. Records describe results (where a put's replicas went,
 * which object went away), never requests, so that replay needs no
 * randomness, clock or placement decision of its own. */
typedef enum mc_master_jrec_type {
    MC_JREC_MOUNT = 1,         /* client, seg: a segment was mounted */
    MC_JREC_UNMOUNT = 2,       /* client, segment_id: phase 1 of an unmount began */
    MC_JREC_PUT_START = 3,     /* client, key, size, pin_ttl_ms, rep[nrep] */
    MC_JREC_PUT_END = 4,       /* client, key: the put became readable */
    MC_JREC_DROP = 5,          /* key, park: the object left the table (remove,
                                * eviction, revoke, discard, lost replicas) */
    MC_JREC_CLIENT_EXPIRE = 6, /* client: expired with its KV entries */
    MC_JREC_META_PUT = 7,      /* key, val, client (owner) */
    MC_JREC_META_DEL = 8,      /* key */
    MC_JREC_RELEASE = 9,       /* key, rep[0]: a parked object's space was freed */
    MC_JREC_DISK = 10,         /* key, size: the object has its tier file (TierAdd, the
                                * startup scan); creates a disk-only object when absent */
    MC_JREC_SPILL = 11,        /* key: its memory replicas were freed (evicted down to
                                * its file); it stays, readable from the file */
    MC_JREC_LDISK = 12,        /* key, size, segment_id: the object has a LOCAL_DISK
                                * replica on that segment's node; creates a disk-only
                                * object when absent */
    MC_JREC_LDISK_DROP = 13,   /* key: its LOCAL_DISK replica is gone (the object stays) */
    MC_JREC_LOAD = 14,         /* key, rep[0]: a memory replica loaded from its LOCAL_DISK copy */
    MC_JREC_SEG_DISK = 15,     /* segment_id, disk_hash: the segment's node said its offload
                                * directory's identity (mc_master_offload_disk) */
    MC_JREC_OFFDEL = 16,       /* key, segment_id (zero: parked), disk_hash (the hash it is
                                * parked by), park (1: by directory, 0: by name): a
                                * pending DELETE of a node's file; snapshots only (the
                                * journal's DROP records make them as they replay) */
    MC_JREC_OFFLOST = 17,      /* disk_hash, park (1: by directory, 0: by name): a node
                                * whose DELETEs the master could not all keep (over
                                * its limit): its next start report's files of keys
                                * it does not know are refused; snapshots only (a
                                * standby's replay loses the same ones itself) */
} mc_master_jrec_type_t;

#define MC_JREC_TYPE_MAX 17

typedef struct mc_master_jrep {
    mc_uuid_t segment_id;
    uint64_t offset; /* from the segment's base */
} mc_master_jrep_t;

/* Pointers are borrowed for the call (the hook's, or mc_master_apply's). */
typedef struct mc_master_jrec {
    mc_master_jrec_type_t type;
    mc_uuid_t client;
    const char *key;
    size_t key_len;
    uint64_t size; /* PUT_START, DISK, LDISK */
    uint32_t pin_ttl_ms;
    uint64_t put_id; /* PUT_START: the client's put id (0: none) */
    uint32_t nrep;
    mc_master_jrep_t rep[MC_MASTER_MAX_REPLICAS];
    mc_master_segment_t seg; /* MOUNT */
    mc_uuid_t segment_id;    /* UNMOUNT, LDISK, SEG_DISK, OFFDEL */
    uint64_t disk_hash;      /* SEG_DISK, OFFDEL (not 0), OFFLOST (not 0) */
    const void *val;         /* META_PUT */
    size_t val_len;
    int park; /* DROP: its space stays reserved (a discarded unfinished put); a
               * RELEASE record frees it later. OFFDEL, OFFLOST: by directory */
} mc_master_jrec_t;

/* Called for every mutation, on the mutating thread, with the lock that
 * orders mutations of the same object/segment/KV entry held: records of one
 * key (or segment) reach the hook in the order they happened, and a segment's
 * MOUNT precedes any PUT_START placed in it. It must be short and must not
 * call into the master. */
typedef void (*mc_master_journal_fn_t)(void *arg, const mc_master_jrec_t *r);

/* Install (fn non-NULL) or remove the hook. Not while other calls run. */
void mc_master_set_journal(mc_master_t *m, mc_master_journal_fn_t fn, void *arg);

/* Apply one record to a master that has no journal hook (a standby), in
 * journal order. Records that find nothing to act on (a DROP of an absent
 * key, an UNMOUNT of an unknown segment) are no-ops: MC_OK. A PUT_START
 * reserves exactly the recorded ranges; a SPILL frees exactly the object's
 * memory replicas, as the leader's eviction did.
 * MC_OK; MC_ERR_INVALID_PARAMS (a record that cannot be valid: bad key,
 * unknown type, zero ids, a DISK size of 0 or over max_object_size);
 * MC_ERR_SEGMENT_NOT_FOUND (a replica on a segment this master does not
 * have) or MC_ERR_EXISTS (its range is taken; a DISK record whose size
 * differs from the object's; a SPILL of an absent or unfinished object, or
 * of one without a DISK replica): the journal and this master's state
 * disagree; MC_ERR_NOMEM. */
mc_status_t mc_master_apply(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us);

/* The whole state as journal records, in an order mc_master_apply accepts
 * on an empty master: MOUNT of every mounted segment, PUT_START (+ PUT_END
 * when complete, + DISK when it has a file) of every object with memory
 * replicas, DISK of every disk-only object, PUT_START + DROP(park) of every
 * parked object whose space is still reserved, META_PUT of every metadata
 * entry.
 * Applying them rebuilds the same objects at the same addresses (a
 * snapshot). For a master no other thread mutates (a standby): the records
 * of a master being changed meanwhile may not be one consistent state. */
void mc_master_snapshot(mc_master_t *m, mc_master_journal_fn_t fn, void *arg);

/* The version pings report now. */
int64_t mc_master_view_version(mc_master_t *m);

/* The version pings report from now on (a new leader's view). */
void mc_master_set_view_version(mc_master_t *m, int64_t v);

/* Count every known client as alive now (a standby that became the leader:
 * clients get a full client_ttl to find it). */
void mc_master_touch_clients(mc_master_t *m, uint64_t now_us);

/* ---- node-local offload: LOCAL_DISK replicas (master_offload.c) ----
 *
 * A node (the owner of a mounted segment) with an offload directory polls
 * for requests about its segment. PERSIST: write the object whose bytes are
 * at segment base + offset to its own disk, then answer offload_done; the
 * object then has a LOCAL_DISK replica on that node (journaled: LDISK),
 * listed after the memory replicas by get/query. DELETE: the object is gone,
 * delete its file (not answered: done once the node polls again; those a
 * segment's node had not done when the segment went wait for its node's
 * next segment: the same offload directory, mc_master_offload_disk, or
 * the same name). Eviction (offload_on_evict)
 * asks instead of dropping an object that has no disk copy, at most
 * offload_cap_ratio * offloading_queue_limit objects per cycle and
 * offloading_queue_limit queued per node; the object is kept (not evictable,
 * not removable without force) until the node answers or offload_timeout_us
 * passes; once persisted, its memory replicas go (SPILL) and it stays
 * readable from the node. Without offload_on_evict, every PutEnd on an
 * offloading node's segment asks (eager). An object with a LOCAL_DISK
 * replica is evicted down to it like one with a DISK replica. Unmount and
 * client expiry drop the node's LOCAL_DISK replicas (objects left without a
 * replica go): a node that is down makes them unavailable; restarted, it
 * reports its files again (mc_master_ldisk_report). One LOCAL_DISK replica
 * per object; at most 16383 segment slots can hold them. */
typedef enum mc_master_offload_op {
    MC_MASTER_OFFLOAD_PERSIST = 0, /* write the bytes at base + offset to the file */
    MC_MASTER_OFFLOAD_DELETE = 1,  /* delete the file */
    MC_MASTER_OFFLOAD_LOAD = 2,    /* read the file into base + offset, answer offload_done */
} mc_master_offload_op_t;

typedef struct mc_master_offload_req {
    mc_master_offload_op_t op;
    int evict;       /* PERSIST asked by eviction */
    const char *key; /* borrowed for the callback */
    size_t key_len;
    uint64_t size;
    uint64_t offset;  /* PERSIST: from the segment's base */
    uint64_t load_id; /* LOAD: this load's id (never 0; unique within the master's run): the
                         node names it in its progress and answer (load ids, below) */
} mc_master_offload_req_t;

/* Return non-zero to stop early (the rest stay queued). */
typedef int (*mc_master_offload_cb_t)(void *arg, const mc_master_offload_req_t *req);

/* The node that owns segment_id (client) offloads from now on (and keeps
 * doing so while it polls): up to max queued requests are handed to cb (in
 * queue order; PERSIST ones wait for offload_done). MC_OK,
 * MC_ERR_UNAVAILABLE_IN_CURRENT_MODE (enable_offload off), MC_ERR_SEGMENT_NOT_FOUND,
 * MC_ERR_ILLEGAL_CLIENT (not the owner), MC_ERR_INVALID_PARAMS. */
mc_status_t mc_master_offload_poll(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                   uint64_t now_us, uint32_t max, mc_master_offload_cb_t cb,
                                   void *arg);
/* The same, with the node's word on its last answer's DELETEs. A poll's
 * DELETEs count as done when the node polls again; a node that says which
 * answer it did last (says_done: done_answer, 0 = none) has those of any
 * other answer handed out again (that answer was lost: the connection
 * broke while it was on its way). *answer (if not NULL): this answer's
 * number when it hands out DELETEs (unique, and unlike an earlier run's),
 * else 0. mc_master_offload_poll: a node that says nothing (all done). */
mc_status_t mc_master_offload_poll_ack(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                       uint64_t now_us, uint32_t max, int says_done,
                                       uint64_t done_answer, uint64_t *answer,
                                       mc_master_offload_cb_t cb, void *arg);

/* The node's answer to a PERSIST request: result MC_OK (its file is
 * written: LOCAL_DISK replica, and the memory replicas go if eviction asked
 * and no reader holds a lease) or the failure (disk full: the object is not
 * asked again and is evicted as without offload; counted). MC_OK (accepted),
 * MC_ERR_OBJECT_NOT_FOUND (no such object of that size with a request
 * pending from this node: the node deletes its file), MC_ERR_SEGMENT_NOT_FOUND,
 * MC_ERR_ILLEGAL_CLIENT, MC_ERR_INVALID_KEY. */
mc_status_t mc_master_offload_done(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                   const char *key, size_t key_len, uint64_t size,
                                   mc_status_t result, uint64_t now_us);
/* The same, for the LOAD load_id (load ids, below; 0: any of key). */
mc_status_t mc_master_offload_done_id(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                      const char *key, size_t key_len, uint64_t size,
                                      mc_status_t result, uint64_t now_us, uint64_t load_id);

/* A reader found only a LOCAL_DISK replica: its node is asked to read the
 * file into a range of its segment allocated now (LOAD); once it answered,
 * the object has that memory replica (journaled: LOAD), listed by
 * mc_master_offload_list (mc_master_offload_loading says when to).
 * With promotion_on_hit, a key loaded promotion_admission_threshold times
 * (count-min sketch) keeps it as any object (LRU); other loads are the
 * first to go at the next eviction (eviction sees them an hour older than
 * their load). MC_OK (asked, or already in progress, or the object has a
 * memory replica again: list again),
 * MC_ERR_OBJECT_NOT_FOUND (absent, or no LOCAL_DISK replica),
 * MC_ERR_REPLICA_IS_NOT_READY, MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS (its
 * node does not poll), MC_ERR_NO_AVAILABLE_HANDLE (no room on the node's
 * segment), MC_ERR_LIMIT (its queue is full), MC_ERR_INVALID_KEY. */
mc_status_t mc_master_offload_load(mc_master_t *m, const char *key, size_t key_len,
                                   uint64_t now_us);

/* A node's file found at its start (its scan): an object with only this
 * LOCAL_DISK replica is created when the key is absent (journaled: LDISK);
 * a file for an existing object is refused (it may be of an older put), and
 * so is one whose key was removed while its DELETE waits for the node (the
 * DELETE is taken back).
 * MC_OK, MC_ERR_OBJECT_ALREADY_EXISTS and MC_ERR_OBJECT_NOT_FOUND (the
 * node deletes its file),
 * MC_ERR_UNAVAILABLE_IN_CURRENT_MODE (enable_offload off),
 * MC_ERR_INVALID_PARAMS (size 0 or over max_object_size),
 * MC_ERR_SEGMENT_NOT_FOUND, MC_ERR_ILLEGAL_CLIENT, MC_ERR_INVALID_KEY,
 * MC_ERR_NO_AVAILABLE_HANDLE (segment slot over 16382), MC_ERR_NOMEM. */
mc_status_t mc_master_ldisk_report(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                   const char *key, size_t key_len, uint64_t size, uint64_t now_us);

/* The node lost the file (corrupt on read, its quota): the LOCAL_DISK
 * replica goes (journaled: LDISK_DROP), and the object with it when it had
 * no other replica (DROP). MC_OK (also when it had none there),
 * MC_ERR_SEGMENT_NOT_FOUND, MC_ERR_ILLEGAL_CLIENT, MC_ERR_INVALID_KEY. */
mc_status_t mc_master_ldisk_drop(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                 const char *key, size_t key_len, uint64_t now_us);

/* get_replica_list for the reader of a LOAD (mc_master_offload_load): the
 * same list and lease, but no access is recorded, so a loaded copy keeps
 * the access time its load gave it (the oldest: the first to go at the next
 * eviction; or the load's time when promotion_on_hit admitted it). release:
 * the reader will release this grant (mc_master_batch_lease_release, as
 * mc_master_batch_get_leased's readers do) once it copied the object: a
 * loaded copy is its node's staging area, read once, and may go as soon as
 * it was read instead of lease_ttl later (ignored with opts.lease_release
 * off). */
mc_status_t mc_master_offload_list(mc_master_t *m, const char *key, size_t key_len, uint64_t now_us,
                                   int release, mc_master_replica_desc_t *out, uint32_t room,
                                   uint32_t *nrep, uint64_t *lease_ttl_us);

/* 1 when key's object is complete and only on a node's disk (no memory
 * replica, no DISK one): nothing granted, nothing recorded. A reader that
 * waits for a load is listed after it (mc_master_offload_list), so the
 * loaded copy's only lease is the one its reader may release. */
int mc_master_offload_disk_only(mc_master_t *m, const char *key, size_t key_len);

/* 1 when key's object is complete and only on the disk of segment seg_id
 * (no memory replica, no DISK one, no LOAD in flight), and that segment's
 * owner, which asks, reads it from its own disk itself: no LOAD; *d is its
 * LOCAL_DISK replica. Nothing is granted (no lease: the reader reads a
 * file, and a remove meanwhile leaves its open file whole) and no access
 * recorded. The read counts as one for promotion on hit; the one that
 * reaches promotion_admission_threshold returns 0 (the reader asks for the
 * load, and the loaded copy stays as a promoted object). Counted in
 * master_offload_own_reads_total. */
int mc_master_offload_own_disk(mc_master_t *m, const char *key, size_t key_len, mc_uuid_t seg_id,
                               mc_master_replica_desc_t *d);

/* 1 when key's object is only on a node's disk and a LOAD of it is queued
 * or in flight (a reader waits for its answer), 0 otherwise (list it now). */
int mc_master_offload_loading(mc_master_t *m, const char *key, size_t key_len);

/* Progressive loads. A node reading a LOAD may say how many bytes from the
 * start of the object are in its segment already (ready; its checksum is
 * not verified yet): a reader waiting for the load may copy them while the
 * rest is read, and returns nothing before the load's answer (offload_done
 * MC_OK; a failed one fails the reader's get). MC_OK (noted),
 * MC_ERR_OBJECT_NOT_FOUND (no such LOAD in flight from this node: nothing
 * to do), MC_ERR_SEGMENT_NOT_FOUND, MC_ERR_ILLEGAL_CLIENT,
 * MC_ERR_INVALID_KEY, MC_ERR_INVALID_PARAMS (ready over size). */
mc_status_t mc_master_offload_progress(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                       const char *key, size_t key_len, uint64_t size,
                                       uint64_t ready, uint64_t load_id);

/* For a reader that copied have bytes of key's load have_id in flight (0:
 * of the load in flight, an older reader): 1 when its node said more are
 * in (of another load than have_id: any) (*d: the range being loaded,
 * status PROCESSING; *ready: how many bytes from its start; *load_id: that
 * load's id), 0 otherwise (no load in flight, or nothing new). */
int mc_master_offload_partial(mc_master_t *m, const char *key, size_t key_len, uint64_t have,
                              uint64_t have_id, mc_master_replica_desc_t *d, uint64_t *ready,
                              uint64_t *load_id);

/* Load ids. Each LOAD has an id (mc_master_offload_req_t.load_id); a node
 * that names it in its progress and answer (load_id != 0) is matched on it
 * (0: on key and size, as nodes without ids are), so a late word about a
 * load that timed out is never taken for a later load of the same key,
 * possibly into the same range. A reader that copied bytes of load_id
 * early (mc_master_offload_partial) may keep them only if the copy it is
 * then listed is that very load's: 1 when key's object has the memory
 * replica load_id made (answered MC_OK, still in place), 0 otherwise (read
 * it whole). */
int mc_master_offload_loaded_by(mc_master_t *m, const char *key, size_t key_len, uint64_t load_id);

/* The node that owns segment_id offloads to the directory disk_id (its
 * identity, 1..MC_MASTER_DISK_ID_MAX bytes, made at the directory's first
 * use and kept in it; a node sends it in its polls, the first one before
 * its start report). A node's segment names its host and port, and a port
 * is any free one by default: the directory says which node is back.
 * DELETEs kept when a segment of this directory's node went are this
 * segment's now (those kept by segment name wait for a segment of that
 * name: nodes that do not send it), and so are those queued for a segment
 * of the same directory not expired yet (mounted or draining: the node
 * back before its last segment expired), now and later (its report and
 * its PERSIST answers take them back); its report of a file that such a
 * segment still holds as a LOCAL_DISK replica moves the replica to this
 * segment (journaled; counted in taken_over_total; a LOAD asked of the
 * old segment's node is asked of this one next) instead of refusing the
 * file. MC_OK, MC_ERR_INVALID_PARAMS (length),
 * MC_ERR_SEGMENT_NOT_FOUND, MC_ERR_ILLEGAL_CLIENT,
 * MC_ERR_UNAVAILABLE_IN_CURRENT_MODE. */
#define MC_MASTER_DISK_ID_MAX 64
mc_status_t mc_master_offload_disk(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                   const void *disk_id, size_t len);

/* DELETEs on a standby. Replaying a DROP queues its object's DELETE as the
 * leader did, so a new leader hands out those its old one's nodes had not
 * done (a replayed LDISK record takes back a DELETE of the same key and
 * segment: that node wrote the key's file again). A standby cannot see
 * nodes poll: it forgets, from time to time, the DELETEs queued before a
 * mark it took a while ago (their nodes did them long since; one handed
 * out again deletes no file). mark: the number of DELETEs queued so far.
 * forget: drops those queued before mark that wait for a mounted segment
 * (parked ones, for a node that is down, stay): how many. */
uint64_t mc_master_offload_deletion_mark(mc_master_t *m);
size_t mc_master_offload_forget_deletions(mc_master_t *m, uint64_t mark);

/* fn(arg) is called whenever offload work is queued for a node (PERSIST,
 * LOAD, DELETE) or a node answered one (offload_done), so a service holding
 * nodes' polls and readers' loads can answer them at once instead of being
 * polled. Called with master locks held, from any thread that calls into the
 * master: it must only note the event (no call into the master). Set before
 * the master is used; NULL = none. */
void mc_master_set_offload_notify(mc_master_t *m, void (*fn)(void *arg), void *arg);

typedef struct mc_master_offload_stats {
    uint64_t ldisk_objects;         /* objects with a LOCAL_DISK replica */
    uint64_t ldisk_bytes;           /* their sizes */
    uint64_t queued;                /* requests waiting to be polled */
    uint64_t in_flight;             /* PERSIST requests sent, unanswered */
    uint64_t requested_total;       /* PERSIST requests queued */
    uint64_t persisted_total;       /* answered MC_OK */
    uint64_t failed_total;          /* answered with a failure (disk full...) */
    uint64_t timeouts_total;        /* unanswered within offload_timeout_us */
    uint64_t refused_total;         /* not queued: queue or cycle cap full */
    uint64_t spilled_total;         /* memory replicas freed for a LOCAL_DISK one */
    uint64_t loads_total;           /* LOAD answered OK */
    uint64_t load_failed_total;     /* LOAD answered with a failure (corrupt file...) */
    uint64_t promoted_total;        /* loads kept in DRAM by promotion_on_hit */
    uint64_t own_reads_total;       /* disk-only gets its node read itself (no LOAD) */
    uint64_t deletions;             /* DELETEs of removed objects' files not known done */
    uint64_t taken_over_total;      /* LOCAL_DISK replicas a node back took over (its report) */
    uint64_t deletions_again_total; /* DELETEs handed out again: their answer was lost */
    uint64_t deletions_lost_total;  /* DELETEs not kept (over the limit, or no memory) */
    uint64_t lost_refused_total;    /* files refused in a report for deletions lost */
} mc_master_offload_stats_t;

void mc_master_offload_stats(mc_master_t *m, mc_master_offload_stats_t *out);

#endif /* MC_STORE_MASTER_H */
