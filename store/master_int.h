/*
 * master_int.h - internals shared by store/master*.c. Not a contract: only the
 * master's own files include it.
 *
 * Memory per object (the dominant cost: millions of small objects): one
 * allocation per object holding the header, the replica array and the key
 * bytes; the shard's table (otab_t) holds a {hash, pointer} slot for it. With
 * one replica and a 40-byte key that is 64 + 16 + 40 = 120 bytes (a 128-byte
 * malloc chunk), plus 21-43 bytes of table and the offset allocator's 32-byte
 * node. Fields whose meaning depends on the state share storage instead of
 * adding bytes.
 */
#ifndef MC_STORE_MASTER_INT_H
#define MC_STORE_MASTER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "store/master.h"
#include "store/offset_alloc.h"
#include "util/hmap.h" /* segments, clients, metadata KV */
#include "util/list.h" /* MC_CONTAINER_OF */

/*
 * Object states.
 *   PROCESSING    put started, replicas allocated and being written; invisible
 *                 to gets; in its shard's map and proc[] array.
 *   COMPLETE      put ended; readable; in the map.
 *   PARKED_WRITER removed from the map (discarded or forcibly removed put) but
 *                 its space is reserved until lease_us = put start +
 *                 put_start_release_timeout: a slow writer may still write it.
 *   PARKED_LEASE  forcibly removed while leased; space reserved until the
 *                 lease deadline (lease_us): a reader may still read it.
 * Parked objects sit on their shard's `parked` list (linked through node.next)
 * so that unmount sweeps find their replicas under the same shard lock.
 */
enum obj_state {
    OBJ_PROCESSING = 0,
    OBJ_COMPLETE,
    OBJ_PARKED_WRITER,
    OBJ_PARKED_LEASE,
};

/* One memory replica: a range of a segment's allocator. The segment is named by
 * its slot in the segment table; a replica never outlives its segment's slot
 * because unmount drops replicas before the slot is released. */
typedef struct replica {
    uint32_t slot;   /* m->slots[] index */
    uint32_t node;   /* mc_oalloc handle node */
    uint64_t offset; /* mc_oalloc handle offset; address = base + offset */
} replica_t;

typedef struct obj obj_t;
struct obj {
    union {
        mc_uuid_t owner;    /* in the table: the PutStart caller, the only one that
                             * may PutEnd/PutRevoke */
        obj_t *next_parked; /* PARKED_*: the shard's parked list (owner is moot) */
    };
    uint64_t size;
    uint64_t access_us; /* PROCESSING: put start time; else last access (LRU) */
    uint64_t lease_us;  /* COMPLETE: read lease deadline; PARKED_*: release time;
                         * PROCESSING: the client's put id (0: none) */
    union {
        uint64_t pin_us;    /* COMPLETE, pin_ttl_ms != 0: soft pin deadline */
        uint64_t period_us; /* COMPLETE, pin_ttl_ms == 0: when the current lease period
                             * began (its first grant; 0 = none yet): readers release
                             * only grants of this period (lease_release_locked) */
    };
    union {
        uint32_t proc_idx; /* PROCESSING: its slot in shard->proc[] */
        uint32_t readers;  /* COMPLETE, while leased: READERS_* (the lease period's
                            * readers that will release; stale once the lease ended) */
    };
    uint32_t pin_ttl_ms; /* soft pin window; 0 = not soft-pinned */
    uint16_t key_len;
    uint8_t nrep;    /* live replicas: rep[0 .. nrep) */
    uint8_t rep_cap; /* replica slots allocated; the key follows them */
    uint8_t state;   /* enum obj_state */
    uint8_t disk;    /* 1: has a DISK replica (master_tier.c); fits in the padding */
    uint16_t ldisk;  /* LOCAL_DISK replica and offload state (LDISK_*, master_offload.c);
                      * fits in the padding */
    replica_t rep[];
};

/* obj_t.readers: how many grants of the current lease period will be
 * released by their readers (mc_master_batch_lease_release), and whether a
 * grant that will not be (an upstream client, a regex get, a soft-pinned
 * object) holds the lease: then it runs to its deadline. When the count
 * falls to 0 without READERS_TTL every reader is done: the object may be
 * removed, and a put that finds no room may evict it (obj_leased is 0),
 * but the tick's eviction spares it until lease_us as before (obj_held):
 * at full speed that keeps the blocks read lately over those only written,
 * which served the trace replay's hit rate. */
#define READERS_COUNT 0x3fffffffu
#define READERS_TTL 0x80000000u
/* A node's loaded copy of a disk-only object, until its reader's answer
 * grants the lease (master_offload.c): held like a lease nobody released
 * (obj_leased), so neither a put's nor another load's eviction takes it in
 * the moment before its reader's grant; that grant starts a fresh period
 * (lease_grant), and the copy goes as soon as the reader releases it. It
 * lasts at most the grace (lease_us): a reader that never comes does not
 * keep it. */
#define READERS_LOADED 0x40000000u

static inline char *obj_key(obj_t *o)
{
    return (char *)(o->rep + o->rep_cap);
}

/* obj_t.ldisk: the LOCAL_DISK replica's segment slot + 1 (0: none) and two
 * flags. Slots over LDISK_SLOT_MAX cannot hold LOCAL_DISK replicas. */
#define LDISK_SLOT_MASK 0x3fffu
#define LDISK_SLOT_MAX (LDISK_SLOT_MASK - 1u)
#define LDISK_PENDING 0x4000u /* a PERSIST request is queued or in flight */
#define LDISK_REFUSED 0x8000u /* its node could not persist it: evicted as before */

static inline int obj_ldisk(const obj_t *o)
{
    return (o->ldisk & LDISK_SLOT_MASK) != 0;
}

/* Shard of a key hash: its low bits (the shard's table uses the top ones). */
static inline uint32_t shard_of(uint64_t h)
{
    return (uint32_t)(h % MC_MASTER_NUM_SHARDS);
}

/* ---- master_table.c: a shard's object table (see the file for the scheme) ---- */
typedef struct otab_slot {
    uint64_t hash; /* mc_hash64 of the key */
    obj_t *obj;    /* NULL: empty */
} otab_slot_t;

typedef struct otab {
    otab_slot_t *slots;
    uint32_t mask;  /* slots - 1; slots = 2^b */
    uint32_t shift; /* 64 - b */
    uint32_t count;
} otab_t;

/* Home slot of hash h: its top b bits. */
static inline uint32_t otab_home(uint64_t h, uint32_t shift)
{
    return (uint32_t)(h >> shift);
}

mc_status_t otab_init(otab_t *t);
void otab_fini(otab_t *t);
/* Room for one more object (grows the table): MC_OK or MC_ERR_NOMEM. */
mc_status_t otab_reserve(otab_t *t);
/* Insert an absent object after otab_reserve(); h = mc_hash64 of its key. */
void otab_insert(otab_t *t, uint64_t h, obj_t *o);
obj_t *otab_find(const otab_t *t, uint64_t h, const char *key, size_t len);
void otab_remove(otab_t *t, uint64_t h, obj_t *o);
/* After a bulk removal pass (never during a walk): halve a table whose load
 * fell under 1/8. */
void otab_shrink(otab_t *t);
uint32_t otab_walk_start(const otab_t *t);

/* In a walk at slot i: start loading the object a few slots further on, so
 * that a walk touching its objects has several misses in flight. */
static inline void otab_walk_prefetch(const otab_t *t, uint32_t i)
{
    const obj_t *o = t->slots[(i - 4) & t->mask].obj;
    if (o != NULL)
        __builtin_prefetch(o);
}

/* Walk every slot: OTAB_WALK(t, i, k) { o = (t)->slots[i].obj; ... }. The body
 * may remove the current object (only it); no insert during a walk. The walk
 * goes backwards from an empty slot: a removal shifts only the entries after
 * slot i in its cluster, all visited already, one slot back (a forward walk
 * would have to revisit slot i, and emptying a cluster front to back moves
 * its tail once per removal: quadratic), and no shift crosses the empty slot
 * the walk started from, so every entry is visited once. */
#define OTAB_WALK(t, i, k)                                                                         \
    for (uint32_t k = 0, i = otab_walk_start(t); k <= (t)->mask; k++, i = (i - 1) & (t)->mask)

/* Start loading the home slot of hash h, without the shard lock: slots and
 * mask are read atomically and may be stale (a prefetch never faults). */
static inline void otab_prefetch(const otab_t *t, uint64_t h)
{
    const otab_slot_t *s = __atomic_load_n(&t->slots, __ATOMIC_RELAXED);
    uint32_t shift = __atomic_load_n(&t->shift, __ATOMIC_RELAXED);
    uint32_t mask = __atomic_load_n(&t->mask, __ATOMIC_RELAXED);
    /* a stale shift or mask only makes a useless prefetch */
    __builtin_prefetch(
        (const void *)((uintptr_t)s + (otab_home(h, shift & 63) & mask) * sizeof(otab_slot_t)));
}

/* Aligned so that the lock and the table header share one cache line: a batch
 * prefetches it for each key ahead of use. */
typedef struct shard {
    _Alignas(64) pthread_mutex_t lock;
    otab_t tab; /* PROCESSING and COMPLETE objects */
    /* PROCESSING objects in start order, for the timeout sweep: a ring of
     * proc_cap (a power of two) slots, the used ones [proc_head, proc_head +
     * proc_len) wrapping, holes NULL. An ended put leaves a hole instead of
     * moving another entry (whose object, most likely cold, would need its
     * proc_idx rewritten); the head skips holes, as puts mostly end in the
     * order they started, and a full ring is repacked. */
    obj_t **proc;
    uint32_t proc_head, proc_len, proc_cap;
    uint32_t nproc; /* live entries */
    obj_t *parked;  /* PARKED_* objects, linked through next_parked */
    /* counters, under lock; summed by mc_master_get_stats */
    uint64_t nparked, npinned;
    uint64_t locks;
    uint64_t vbuckets[MC_MASTER_VALUE_BUCKETS];
    uint64_t vsum;
} shard_t;

enum seg_state {
    SEG_MOUNTED = 0,
    SEG_UNMOUNTING, /* no allocation; replicas being dropped, then draining */
};

typedef struct seg {
    mc_hnode_t node; /* m->seg_by_id */
    mc_uuid_t id, owner;
    char *name, *endpoint; /* one allocation: name NUL endpoint NUL */
    uint64_t name_hash;
    uint64_t base, size;
    uint32_t slot;
    uint32_t mounted_idx; /* in m->mounted[] while SEG_MOUNTED */
    int state;            /* enum seg_state; written under the write lock */
    int swept;            /* UNMOUNTING: replicas dropped, drain_until final */
    uint64_t drain_until_us;
    /* alloc and used, under the read lock. A spinlock: it is held for one
     * allocator call (O(1) but for rare bin rescans), and its release is a
     * plain store, where a mutex's is an atomic that waits for every earlier
     * store (the allocator's node writes, often cache misses) to complete:
     * that wait was 5% of the master's CPU under BatchPut. */
    pthread_spinlock_t lock;
    mc_oalloc_t *alloc;
    uint64_t used; /* requested bytes of live allocations */
    /* node-local offload (master_offload.c), under m->offload_lock */
    int offload;        /* its owner polls for offload requests */
    struct offq *offq;  /* requests for its owner (NULL: none yet) */
    uint64_t disk_hash; /* its owner's offload directory's identity, hashed (0: not told) */
    /* DELETEs for its node's directory were lost (over OFFDEL_MAX): its
     * report's files of keys the master does not know are refused */
    int del_lost;
} seg_t;

typedef struct client {
    mc_hnode_t node;
    mc_uuid_t id;
    uint64_t last_ping_us;
    int status; /* mc_master_client_status_t */
} client_t;

struct mc_master {
    mc_master_opts_t o;
    int64_t view_version;
    shard_t *shards; /* MC_MASTER_NUM_SHARDS, inside shards_mem */
    void *shards_mem;

    /* segments: read lock to allocate/free/describe, write lock to change */
    pthread_rwlock_t seg_lock;
    mc_hmap_t seg_by_id;
    seg_t **slots; /* by slot; NULL = free */
    uint32_t nslots;
    uint32_t *mounted; /* slots of SEG_MOUNTED segments, for random choice */
    uint32_t nmounted, mounted_cap;
    _Atomic uint64_t allocated; /* requested bytes on mounted segments */
    _Atomic uint64_t capacity;  /* bytes of mounted segments */

    pthread_mutex_t client_lock;
    mc_hmap_t clients;
    uint64_t active_clients; /* under client_lock */

    pthread_mutex_t meta_lock;
    mc_hmap_t meta;
    size_t meta_count, meta_bytes; /* entries, key + value bytes (meta_lock) */

    pthread_mutex_t evict_lock;           /* one eviction pass at a time */
    _Atomic uint64_t evict_idle_until_us; /* no pass before: the last found nothing */
    _Atomic uint64_t evict_gen;           /* evict_backoff_end calls: a backoff armed
                                           * on what a walk saw before one is void */
    /* evict_for found no window for a put of this size or larger: it does
     * not walk again for those before nofit_until_us (evict_lock) */
    uint64_t evict_nofit_size;
    _Atomic uint64_t evict_nofit_until_us;       /* both backoffs end early when a lease is
                                                  * released (lease_release_locked) */
    _Atomic uint64_t nproc_total, nparked_total; /* tick skips sweeps at 0 */
    _Atomic uint64_t ndraining;                  /* tick skips the commit at 0 */

    _Atomic uint64_t evict_attempts, evict_successes, evicted_keys, evicted_bytes;
    _Atomic uint64_t disk_objects, disk_bytes; /* objects with a DISK replica (master_tier.c) */
    _Atomic uint64_t disk_evicted;             /* disk-only objects removed for the quota */
    _Atomic uint64_t discards, releases;

    /* node-local offload (master_offload.c): the segments' request queues;
     * taken after a shard lock and the segment lock */
    pthread_mutex_t offload_lock;
    struct offdel *offdel;       /* DELETE requests by segment slot (offload_lock) */
    uint64_t offload_cycle_left; /* PERSIST requests this eviction cycle may queue (evict_lock) */
    _Atomic uint64_t ldisk_objects, ldisk_bytes;
    _Atomic uint64_t off_requested, off_persisted, off_failed, off_timeouts, off_refused,
        off_spilled, off_queued, off_in_flight, off_loads, off_load_failed, off_promoted,
        off_own_reads, off_taken_over, off_del_again, off_del_lost, off_lost_refused;
    /* promotion on hit: a count-min sketch of LOAD requests per key
     * (offload_lock); halved every CMS_AGE hits so old heat fades */
    uint8_t cms[4][1024];
    uint32_t cms_hits;
    /* told when offload work is queued or answered (mc_master_set_offload_notify) */
    void (*off_notify)(void *arg);
    void *off_notify_arg;

    mc_master_journal_fn_t jfn; /* NULL: no journal (standby, single master) */
    void *jarg;
};

/* Report a mutation to the journal hook, if any. */
static inline void journal(mc_master_t *m, const mc_master_jrec_t *r)
{
    if (m->jfn != NULL)
        m->jfn(m->jarg, r);
}

/* ---- master.c ---- */
int key_valid(const mc_master_t *m, const char *key, size_t len);
uint64_t uuid_hash(mc_uuid_t id);
void shard_lock(shard_t *sh);
void shard_unlock(shard_t *sh);
/* The one way to a key's object: hash the key (*h, which the shard's table
 * and the *_locked functions take), pick its shard and lock it; release
 * with shard_unlock (h may be NULL). obj_lock_find also finds the key's
 * object in the shard's table: NULL when it has none. */
shard_t *shard_lock_key(mc_master_t *m, const char *key, size_t len, uint64_t *h);
obj_t *obj_lock_find(mc_master_t *m, const char *key, size_t len, shard_t **sh, uint64_t *h);
uint64_t rng_next(void);

/* ---- master_objects.c ---- */
/* Free an object's replicas in their allocators (takes the segment read lock). */
void obj_free_replicas(mc_master_t *m, obj_t *o);
/* mc_hash64 of the object's key (the tables keep it; objects do not). */
uint64_t obj_hash(obj_t *o);

/* An object's replicas are only touched (freed, dropped, described) under its
 * shard lock: that is what lets an unmount sweep, which visits every shard,
 * know that no replica of the segment survives it. */

/* Take o out of the table (and proc[]); the caller frees or parks it. h is
 * its key's hash: the caller's, a walk's slot's, or obj_hash(o). The journal
 * records a DROP whose park flag says whether the space stays reserved:
 * obj_unlink assumes an unfinished put is parked (discarded), a complete
 * object freed; obj_unlink_j says it explicitly (a revoke frees at once). */
void obj_unlink(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h);
void obj_unlink_j(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h, int park);
/* Move an unlinked object to the parked list until `until`. */
void obj_park(mc_master_t *m, shard_t *sh, obj_t *o, int state, uint64_t until);
/* Unlink an unfinished put and park it until put start + release timeout. */
void discard_put(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h);
/* Free an unlinked object and its replicas. */
void obj_destroy(mc_master_t *m, obj_t *o);
/* A reader's lease runs (upstream's IsLeaseExpired is false): held until
 * lease_us even when every reader released it. */
int obj_held(const obj_t *o, uint64_t now_us);
/* Held, and by a reader that has not released it (see obj_t.readers). */
int obj_leased(const obj_t *o, uint64_t now_us);
int obj_pinned(const obj_t *o, uint64_t now_us);

/* Describe a complete object's readable replicas into out[0..room) and grant
 * the read lease (release: the reader will release it when done, see
 * mc_master_batch_lease_release); 0 when none is readable. Shard lock held. */
uint32_t read_grant(mc_master_t *m, obj_t *o, uint64_t now_us, mc_master_replica_desc_t *out,
                    uint32_t room, int release);
/* mc_master_remove of one key, shard lock held; h = mc_hash64 of the key. */
mc_status_t remove_locked(mc_master_t *m, shard_t *sh, uint64_t h, const char *key, size_t len,
                          int force, uint64_t now_us);

/* Journal replay (master.c dispatches mc_master_apply). */
mc_status_t apply_put_start(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us);
mc_status_t apply_put_end(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us);
mc_status_t apply_drop(mc_master_t *m, const mc_master_jrec_t *r);
mc_status_t apply_release(mc_master_t *m, const mc_master_jrec_t *r);

/* ---- master_segments.c ---- */
/* Allocate size bytes on segment s into r: 1, or 0 when it has no room.
 * Read lock held. */
int try_alloc(mc_master_t *m, seg_t *s, uint64_t size, replica_t *r);
/* The segment of id, mounted or draining; NULL. Segment lock held. */
seg_t *seg_find(mc_master_t *m, mc_uuid_t id);
/* Take exactly [offset, offset + size) of segment id for a replayed replica;
 * read lock held. MC_OK, MC_ERR_SEGMENT_NOT_FOUND, MC_ERR_EXISTS (taken),
 * MC_ERR_INVALID_PARAMS, MC_ERR_NO_AVAILABLE_HANDLE. */
mc_status_t replica_reserve(mc_master_t *m, mc_uuid_t id, uint64_t offset, uint64_t size,
                            replica_t *r);
void segs_fini(mc_master_t *m);
/* Place up to want replicas of size bytes; read lock held. Returns how many. */
uint32_t place_replicas(mc_master_t *m, uint64_t size, const mc_master_put_cfg_t *cfg,
                        uint32_t want, replica_t *out);
/* Free one replica's range; read lock held. */
void replica_free(mc_master_t *m, const replica_t *r, uint64_t size);
/* Describe a replica; read lock held. */
void replica_describe(const mc_master_t *m, const replica_t *r, uint64_t size, int status,
                      mc_master_replica_desc_t *d);
/* Whether the replica's segment takes reads (is not unmounting); read lock held. */
int replica_readable(const mc_master_t *m, const replica_t *r);
/* Phase 1 of unmounting every segment of owner (an expired client): their
 * slots are appended to *slots (mc_realloc'd; *n used, *cap allocated). */
mc_status_t segs_prepare_owner(mc_master_t *m, mc_uuid_t owner, uint32_t **slots, size_t *n,
                               size_t *cap);
/* The rest of unmounting slots: drop their replicas, then drain or commit. */
void segs_sweep_finish(mc_master_t *m, const uint32_t *slots, size_t n, uint64_t now_us);
/* Finish unmounts whose drain is over (tick). */
void segs_commit_drained(mc_master_t *m, uint64_t now_us);
/* Client registration, under client_lock (master.c). */
client_t *client_get_or_add(mc_master_t *m, mc_uuid_t id, uint64_t now_us, int status);

/* ---- master_evict.c ---- */
/* One eviction pass removing about ratio of the eligible objects (the tick,
 * above the high watermark). Returns how many objects went. Takes shard
 * locks: the caller holds none. */
uint64_t evict_pass(mc_master_t *m, uint64_t now_us, double ratio);
/* What eviction found is stale (an object became evictable, memory was
 * freed): its backoffs end, the next pass or put's eviction looks again. */
void evict_backoff_end(mc_master_t *m, uint64_t now_us);
/* A put of size bytes found no room: evict, if and only if that makes room
 * for one replica of it (see master_evict.c). Returns 1 with the name of the
 * segment that has room now in seg_name (MC_MASTER_NAME_MAX bytes), 0 when
 * nothing was evicted (no eviction can make room). Takes shard locks: the
 * caller holds none. */
int evict_for(mc_master_t *m, uint64_t size, uint64_t now_us, char *seg_name);
void sweep_processing(mc_master_t *m, uint64_t now_us);
void release_parked(mc_master_t *m, uint64_t now_us);

/* ---- master_tier.c ---- */
/* o (with a DISK replica) leaves the table: tell opts.disk_drop. Shard lock held. */
void tier_dropped(mc_master_t *m, obj_t *o);
/* Evict o down to its file: journal SPILL, free its memory replicas; o stays
 * (it has a DISK replica). Shard lock held. */
void obj_spill(mc_master_t *m, obj_t *o);
/* Replay of DISK and SPILL records (master_tier.c). */
mc_status_t apply_disk(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us);
mc_status_t apply_spill(mc_master_t *m, const mc_master_jrec_t *r);
/* Describe o's DISK replica into d. */
void tier_describe(const obj_t *o, mc_master_replica_desc_t *d);

/* ---- master_offload.c ---- */
/* Whether eviction keeps o for its node to persist it (queued now, or
 * already pending, or the queue is full and offload_force_evict is off):
 * 1 = keep o in memory, 0 = evict it. Shard lock held; evict_lock held. */
int offload_instead_of_evict(mc_master_t *m, obj_t *o, uint64_t now_us);
/* A new eviction cycle: reset its budget of PERSIST requests. evict_lock held. */
void offload_cycle_start(mc_master_t *m);
/* Eager policy: after PutEnd, ask o's offloading node to persist it. Shard lock held. */
void offload_after_put(mc_master_t *m, obj_t *o);
/* o leaves the table: its node deletes the file, the counters drop. Shard lock held. */
void ldisk_dropped(mc_master_t *m, obj_t *o);
/* Drop o's LOCAL_DISK replica when it is on one of slots (unmount). Shard
 * and segment read lock held. */
void ldisk_drop_slots(mc_master_t *m, obj_t *o, const uint32_t *slots, size_t n);
/* Describe o's LOCAL_DISK replica; 0 when its segment is not readable.
 * Segment read lock held. */
int ldisk_describe(const mc_master_t *m, const obj_t *o, mc_master_replica_desc_t *d);
/* Free a segment's request queue (the segment leaves the table; segment
 * write lock held). */
void offload_seg_free(mc_master_t *m, seg_t *s);
/* s goes (its unmount starts, or ends): the DELETEs its node had not done
 * go to the mounted segment of its name (the node back already), or are
 * parked for the next one. Segment write lock held. */
void offload_seg_going(mc_master_t *m, seg_t *s);
/* s was mounted: DELETEs parked for its name (its node's last segment went
 * before it polled them) are its own. Segment write lock held. */
void offload_seg_mounted(mc_master_t *m, seg_t *s);
void offload_fini(mc_master_t *m);
/* Tick: void the requests unanswered for offload_timeout_us. */
void offload_tick(mc_master_t *m, uint64_t now_us);
/* Replay of LDISK and LDISK_DROP. */
mc_status_t apply_ldisk(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us);
mc_status_t apply_ldisk_drop(mc_master_t *m, const mc_master_jrec_t *r);
mc_status_t apply_seg_disk(mc_master_t *m, const mc_master_jrec_t *r);
mc_status_t apply_offdel(mc_master_t *m, const mc_master_jrec_t *r);
mc_status_t apply_offlost(mc_master_t *m, const mc_master_jrec_t *r);
/* The pending DELETEs as OFFDEL records, in queue order (after the
 * segments and objects: a replayed LDISK record takes none of them back). */
void offload_snapshot(mc_master_t *m, mc_master_journal_fn_t fn, void *arg);
mc_status_t apply_load(mc_master_t *m, const mc_master_jrec_t *r);

/* ---- master_meta.c ---- */
/* Journal replay of META_PUT / META_DEL: what the leader decided, unchecked. */
mc_status_t meta_apply_put(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us);
mc_status_t meta_apply_del(mc_master_t *m, const mc_master_jrec_t *r);
void meta_drop_owner(mc_master_t *m, mc_uuid_t owner);
/* Every entry as a META_PUT record (master_snapshot.c). */
void meta_snapshot(mc_master_t *m, mc_master_journal_fn_t fn, void *arg);
void meta_fini(mc_master_t *m);

#endif /* MC_STORE_MASTER_INT_H */
