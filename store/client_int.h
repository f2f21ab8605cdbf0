/*
 * client_int.h - internals of the store client (mooncake/store.h), shared by
 * client.c (open/close, segments this client contributes, ping/remount,
 * registered buffers), client_op.c (what every operation shares: the
 * operation count, the staging buffer, the cache of peer segments, key
 * checks, waiters, the small RPC-only calls), client_put.c (put),
 * client_put_batch.c (batch put; client_put_int.h: what the two share) and
 * client_get.c (get, batch get, query).
 *
 * Threads. The client runs on its transfer engine's reactors. Reactor 0
 * (s->r0) owns the master RPC client, every operation's state machine, the
 * staging wait queue and the peer cache: all of them are touched only there.
 * Transfer completions arrive on any engine reactor and are posted to r0.
 * User threads submit operations by posting them to r0; sync calls post and
 * wait. The staging allocator (stage_mu) and the list of mounted segments
 * (seg_mu) are shared with user threads.
 *
 * Closing (client.c) cancels in this order: r0 stops taking new work (closing)
 * and fails queued operations, the master client is destroyed (operations
 * waiting for the master complete with MC_ERR_CANCELED), then the engine
 * (transfers and segment opens complete with MC_ERR_CANCELED, possibly on a
 * stopping reactor's thread: op_finish is safe from any thread once
 * s->closing is set, because nothing else touches an operation then).
 */
#ifndef MC_STORE_CLIENT_INT_H
#define MC_STORE_CLIENT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/store.h"
#include "mooncake/transfer.h"
#include "rpc/rpc.h"
#include "store/ha_redis.h"
#include "store/master.h"
#include "store/offset_alloc.h"
#include "transport/te.h"
#include "util/list.h"
#include "util/prom.h"

#define STORE_MAX_KEY 4096
#define STORE_MAX_REPLICAS MC_MASTER_MAX_REPLICAS
/* Segments remembered as failing (a dead node until the master expires it):
 * gets try their replicas last for STORE_SUSPECT_US. */
#define STORE_SUSPECTS 16
#define STORE_SUSPECT_US 10000000ull

/* A segment this client contributes (mounted at the master). seg_mu. */
typedef struct store_seg {
    mc_list_t node;
    mc_uuid_t id;
    uint8_t *base;
    uint64_t size;
    uint64_t map_len; /* owned: mmap'd by us (munmap at unmount), else 0 */
    int shared;       /* owned, from mc_te_alloc_shared (freed with the engine at the latest) */
} store_seg_t;

/*
 * The client's registration at the master (its segments, or, for a pure
 * client, its id), one machine (reactor/fsm.h) on r0:
 *
 *   UNREGISTERED --ReMount sent--> MOUNTING --answered OK--> REGISTERED
 *        ^  ^                         | failed: retried at the next ping
 *        |  +-------------------------+
 *        +--- a ping says NEED_REMOUNT (the master expired us), or a new
 *             master's view (not HA: it knows nothing) --- REGISTERED
 *
 * A client starts UNREGISTERED (its mount waits for the first ping: pure
 * clients, attach mode, a master away at open) or REGISTERED (mounted
 * synchronously at open). While MOUNTING, a NEED_REMOUNT changes nothing:
 * the ReMount in flight registers us. Whether the master answers at all is
 * master_down, orthogonal: a client stays REGISTERED while its master is
 * away and is mounted again only if the master says it forgot it.
 */
typedef enum store_reg {
    STORE_UNREGISTERED, /* the master does not know our segments: mount at the next ping */
    STORE_MOUNTING,     /* a ReMount call is in flight (woken by remount_cb) */
    STORE_REGISTERED,   /* the master has our segments; pings answer OK */
    STORE_NREG
} store_reg_t;

/* A get of an object only on a node's disk (the master had the node load
 * it: its answer said HELD_US), timed by stage on the reader
 * (mooncake_store_get_load_stage_seconds; client_get.c): where the time
 * outside the node's own load goes. */
enum {
    STORE_GLS_SUBMIT,   /* the get submitted -> the call that got the load left */
    STORE_GLS_CALL,     /* that call's round trip less the master's hold: the reader's
                           send and receive, the master's handling of the call */
    STORE_GLS_HELD,     /* the master held it (HELD_US): asked the node, which loaded
                           the object, answered (the node's stages are inside) */
    STORE_GLS_PREPARE,  /* answered -> the transfer submitted (segment, staging) */
    STORE_GLS_TRANSFER, /* the copy out of the node's segment into the reader's memory */
    STORE_GLS_FINISH,   /* the bytes in -> the caller's callback */
    STORE_GLS_N
};
extern const char *const store_gls_names[STORE_GLS_N];

/* Peer segment cache entry: name -> transfer-engine handle. r0 only. */
typedef enum { PEER_OPENING, PEER_OPEN } peer_state_t;

typedef struct peer {
    mc_list_t node;
    mc_store_t *s;
    peer_state_t state;
    mc_te_segment_t handle;
    mc_list_t waiters; /* store_op_t.node of operations waiting for the open */
    char name[MC_MASTER_NAME_MAX];
} peer_t;

typedef struct store_op store_op_t;
typedef void (*store_step_fn_t)(store_op_t *op);
/* Finish with st: free the operation's resources and call the user. */
typedef void (*store_fail_fn_t)(store_op_t *op, mc_status_t st);

/* What every operation starts with. */
struct store_op {
    mc_list_t node;       /* staging queue or a peer's waiters (one at a time) */
    mc_reactor_msg_t msg; /* runs step on r0 */
    mc_store_t *s;
    store_step_fn_t step; /* the operation's step function (loops over its states) */
    store_fail_fn_t fail; /* cancel from outside (close) */
    void (*decode)(store_op_t *op, const mc_rpc_resp_t *resp); /* of the rpc in flight */
    /* results of the asynchronous waits, read by step */
    mc_status_t wait_st;    /* rpc / open / refresh / transfer outcome */
    mc_te_segment_t opened; /* peer open: the handle */
    uint64_t stage_want;    /* staging bytes wanted while queued */
    mc_oalloc_handle_t stage_h;
    uint8_t *stage; /* staging window, NULL when none */
    /* transfer batch in flight: store_xfer_cb collects it (harvest, if set,
     * reads per-task statuses) and frees it from inside its callback, so
     * the batch is never touched after it reported */
    mc_te_batch_t *batch;
    void (*harvest)(store_op_t *op, mc_te_batch_t *b);
    /* a master call that may be sent again to a new leader (client_op.c):
     * its body, while the call is in flight or waiting on s->retry */
    uint16_t rpc_method; /* 0: not resendable */
    uint64_t rpc_deadline_us;
    mc_buf_t rpc_body;
};

typedef struct store_tier store_tier_t;       /* client_tier.c */
typedef struct store_offload store_offload_t; /* client_offload.c */
typedef struct svc_client svc_client_t;       /* dummy.c */

/* The memory of mc_store_alloc_from_mem_pool (mem_pool.c): an offset
 * allocator over registered memory (a normal client) or over the pool part
 * of the memory a co-located client shares with its service. */
typedef struct store_pool {
    pthread_mutex_t mu;
    uint8_t *base;
    uint64_t len;
    mc_oalloc_t *a; /* NULL: no pool */
} store_pool_t;

void store_pool_init(store_pool_t *p);
mc_status_t store_pool_setup(store_pool_t *p, void *base, uint64_t len);
void store_pool_fini(store_pool_t *p);
void *store_pool_alloc(store_pool_t *p, size_t size);
mc_status_t store_pool_free(store_pool_t *p, void *ptr);

/* The mc_store_shared_alloc allocation holding [p, p+len): its base, length
 * and a duplicate of its memfd (the caller closes it). 1, or 0 when none. */
int store_shared_find(const void *p, size_t len, void **base, uint64_t *blen, int *fd);

/* Upstream's switch for huge pages in a client's memory: MC_SHM_HUGETLB when
 * $MC_STORE_USE_HUGEPAGE is set (and not 0/false/no/off), else
 * MC_SHM_NORMAL. A value that is neither, or a $MC_STORE_HUGEPAGE_SIZE other
 * than 2 MiB, is warned about (naming it, once per process) and taken as on,
 * in 2 MiB pages. Read where the memory is made (mc_store_open,
 * mc_store_shared_alloc). */
int store_env_hugepages(void);

/* Working memory of a call that would otherwise allocate per call (batch
 * get's per-key arrays): taken from the client's free list and given back,
 * so a steady load allocates nothing (store_scratch_take). */
typedef struct store_scratch {
    struct store_scratch *next;
    size_t cap; /* bytes at mem */
    max_align_t mem[];
} store_scratch_t;

struct mc_store {
    mc_store_config_t cfg;
    store_tier_t *tier;       /* persistent tier: settings and worker threads */
    store_offload_t *offload; /* node-local offload (offload_dir): NULL = none */
    char *local_hostname, *metadata, *protocol, *master, *advertise_host; /* cfg strings */
    char *rdma_devices;                                                   /* or NULL */
    mc_te_t *te;
    int shm;           /* shared memory with same-host peers (cfg.shm): our segments from it */
    svc_client_t *svc; /* a co-located client (cfg.service): every call goes to the service */
    store_pool_t pool; /* mc_store_alloc_from_mem_pool */
    void *pool_map;    /* a normal client's pool memory (mmap'd, registered) */
    uint64_t pool_map_len;
    mc_reactor_t *r0;
    mc_uuid_t client_id;
    mc_rpc_client_t *mcli; /* r0; NULL once closing destroyed it */
    _Atomic int closing;

    /* operations alive (submitted, callback not yet returned) */
    pthread_mutex_t live_mu;
    pthread_cond_t live_cv;
    long live;

    /* staging buffer */
    uint8_t *stage_base;
    uint64_t stage_size;
    pthread_mutex_t stage_mu;
    mc_oalloc_t *stage_alloc;
    mc_list_t stage_queue;      /* r0: operations waiting for room, FIFO */
    _Atomic long stage_waiting; /* length of stage_queue, read by submitters */
    mc_reactor_msg_t kick_msg;  /* r0: retry the queue after a free */
    int always_stage;           /* MC_STORE_STAGING=always: no direct unregistered memory */
    int kick_posted;

    /* batch gets' working memory, kept between calls (store_scratch_*) */
    pthread_mutex_t scratch_mu;
    store_scratch_t *scratch_free; /* scratch_mu */
    size_t scratch_kept;           /* bytes on scratch_free */

    /* peers */
    mc_list_t peers; /* r0 */
    struct {
        char name[MC_MASTER_NAME_MAX];
        uint64_t at_us;
    } suspects[STORE_SUSPECTS]; /* r0: segments a transfer recently failed with */
    unsigned next_suspect;

    /* contributed segments */
    pthread_mutex_t seg_mu;
    mc_list_t segs;

    /* liveness (r0): the registration machine, and whether the master
     * answers at all beside it (see store_reg_t) */
    mc_timer_t ping_timer;
    store_reg_t reg;         /* STORE_* (client.c's set_reg is the only writer) */
    int ping_inflight;       /* one ping at a time */
    int64_t view;            /* the master's view version; 0 until a ping answered */
    int ping_ok_seen;        /* a ping answered OK: a later NEED_REMOUNT is news */
    int mount_loud;          /* the pending (re-)mount is worth an INFO line */
    _Atomic int master_down; /* the last ping failed (read at close too) */

    /* master discovery (master = redis://HOST:PORT/DB?cluster=ID): a
     * resolver thread reads the leader's address from Redis when asked
     * (a failed or refused master call) and every few seconds, and points
     * mcli at it (on r0) when it changed */
    int ha;
    mc_ha_url_t ha_url;
    pthread_t resolver;
    int resolver_started;
    pthread_mutex_t res_mu;
    pthread_cond_t res_cv;
    int res_kick, res_stop;        /* res_mu */
    char res_addr[MC_HA_ADDR_MAX]; /* resolver thread: the last address posted */
    /* where mcli calls now (res_mu): set at open and by each retarget, read
     * by threads with a master connection of their own (store_mconn_t),
     * which follow it when mc_gen moves */
    char mc_host[MC_HA_ADDR_MAX];
    uint16_t mc_port;
    uint64_t mc_gen;
    mc_list_t retry;        /* r0: store_op_t.node of calls waiting to be resent */
    mc_timer_t retry_timer; /* r0 */
    int retry_timer_ok;

    mc_prom_hist_t get_load_stage[STORE_GLS_N]; /* STORE_GLS_*: gets of disk-only objects */
    _Atomic uint64_t get_load_partial_bytes;    /* copied from loads in flight (client_get.c) */
};

/* ------------------------------------------------------------ client_op.c */

/* Key rules of store.h: 1..4096 bytes, no NUL. MC_OK or MC_ERR_INVALID_KEY. */
/* *c as this library's mc_store_config_t: the bytes c->struct_size says the
 * caller has, defaults for the rest. MC_ERR_INVALID_ARGUMENT (logged) for a
 * size that is not one of a mc_store_config_t. */
mc_status_t store_config_full(const mc_store_config_t *c, mc_store_config_t *out);

/* The same for a put's mc_replicate_config_t: MC_ERR_INVALID_PARAMS (logged)
 * for a size that is not one of a mc_replicate_config_t. */
mc_status_t store_replicate_config_full(const mc_replicate_config_t *c, mc_replicate_config_t *out);

/* This process's segments' use as the master last accounted it
 * (client_metrics.c asks at most once a second). Zeroed: never asked. */
typedef struct store_seg_use {
    uint64_t count, bytes, used, replicas;
    mc_status_t st; /* of that call */
    uint64_t at_us; /* when it was answered (mc_now_us); 0: never */
} store_seg_use_t;

/* Append this process's Prometheus families (client_metrics.c; node_http.c
 * serves them); seg_use: the caller's, kept between calls. Any thread, one
 * at a time per seg_use. */
void store_node_metrics(mc_store_t *s, store_seg_use_t *seg_use, mc_buf_t *b);

/* The reader's family of it alone: mooncake_store_get_load_stage_seconds
 * (STORE_GLS_*). Any thread. */
void store_get_load_metrics(mc_store_t *s, mc_buf_t *b);

mc_status_t store_check_key(const void *key, size_t klen);

/* Scratch memory of at least size bytes (aligned for any type): a kept one
 * when one is free (grown if too small), else a new one. NULL when out of
 * memory. Any thread. */
store_scratch_t *store_scratch_take(mc_store_t *s, size_t size);
/* Give sc back (NULL: nothing): kept for the next call while the client
 * keeps at most STORE_SCRATCH_KEEP bytes, else freed. */
void store_scratch_give(mc_store_t *s, store_scratch_t *sc);
void store_scratch_free_all(mc_store_t *s); /* store_free */
#define STORE_SCRATCH_KEEP (64u << 20)

/* Counting live operations (close waits for zero). */
void store_live_inc(mc_store_t *s);
void store_live_dec(mc_store_t *s);

/* Set up op for s: stepped by step, ended from outside (close) by fail,
 * its transfers' per-task statuses read by harvest (NULL: not read). The
 * rest of op is the caller's, zeroed. */
static inline void store_op_init(store_op_t *op, mc_store_t *s, store_step_fn_t step,
                                 store_fail_fn_t fail,
                                 void (*harvest)(store_op_t *op, mc_te_batch_t *b))
{
    op->s = s;
    op->step = step;
    op->fail = fail;
    op->harvest = harvest;
}

/* Start an operation: count it and post op->step to r0. MC_INPROGRESS, or
 * MC_ERR_CANCELED (closing; nothing counted, the caller frees op). */
mc_status_t store_op_submit(store_op_t *op);

/* The first part of an operation's end (its fail function), on r0: its
 * staging window back, its transfer batch freed; one still busy is leaked
 * and logged as what's ("put", "batch put"). */
void store_op_release(store_op_t *op, const char *what);

/* Continue op on r0 (from any thread: transfer callbacks). If r0 refuses
 * (the engine is stopping), op->fail(op, MC_ERR_CANCELED) runs here. */
void store_op_post(store_op_t *op);

/* 1 when the step must give up: the client is closing. */
static inline int store_op_closing(const store_op_t *op)
{
    return atomic_load_explicit(&op->s->closing, memory_order_acquire);
}

/* Staging. store_stage_try: take `want` bytes now (any thread) if nobody is
 * queued; 1 on success, 0 not now. store_stage_get (r0): take them or queue
 * op, which is stepped again when room appears: MC_OK (taken),
 * MC_INPROGRESS (queued), MC_ERR_INVALID_PARAMS (more than the whole
 * buffer), MC_ERR_STATE (no staging buffer). store_stage_put: give op's
 * window back (any thread). */
int store_stage_try(mc_store_t *s, store_op_t *op, uint64_t want);
mc_status_t store_stage_get(mc_store_t *s, store_op_t *op, uint64_t want);
void store_stage_put(mc_store_t *s, store_op_t *op);
/* Largest window an operation may take. */
uint64_t store_stage_window(const mc_store_t *s, uint64_t len);
/* Fail every queued operation (close, on r0). */
void store_stage_cancel_all(mc_store_t *s);

/* Peer segments (r0). Resolve name to a handle: MC_OK with *h set when
 * known (our own name, or open), MC_INPROGRESS when op now waits (op->step
 * runs again with op->wait_st / op->opened set), or an error. */
mc_status_t store_peer_resolve(mc_store_t *s, store_op_t *op, const char *name, mc_te_segment_t *h);
void store_peer_cancel_all(mc_store_t *s); /* close, on r0: fail the waiters */
void store_peer_free_all(mc_store_t *s);   /* after the engine is gone */
/* A transfer with segment name failed (suspect = 1) or worked (0). r0. */
void store_peer_note(mc_store_t *s, const char *name, int suspect);
/* 1 when a transfer with name failed within STORE_SUSPECT_US. r0. */
int store_peer_suspect(const mc_store_t *s, const char *name);

/* Ask the engine for a fresh descriptor of h; op->step runs again with
 * op->wait_st. MC_INPROGRESS or an error. */
mc_status_t store_seg_refresh(store_op_t *op, mc_te_segment_t h);

/* Whether [remote, remote+len) lies in what we know of segment h. */
int store_range_ok(mc_store_t *s, mc_te_segment_t h, uint64_t remote, uint64_t len);

/* Transfer-batch callback (arg is the op): records the outcome in
 * op->wait_st, runs op->harvest, frees the batch (op->batch = NULL) and posts
 * op->step. */
void store_xfer_cb(void *arg, mc_te_batch_t *b, const mc_te_status_t *st);

/* Submit reqs as one transfer batch for op (op->batch), reported through
 * store_xfer_cb. Local ranges need not be registered when the engine's
 * transports do not need it (store_direct_ok): the caller's memory is
 * borrowed until op finishes. MC_OK or the error (no batch is left). */
mc_status_t store_xfer_submit(store_op_t *op, const mc_te_request_t *reqs, size_t n);

/* Whether caller memory [p, p+len) can be a transfer's local side as it is:
 * registered, or any memory when the transports do not need registration
 * (tcp, local). Otherwise it goes through the staging buffer. */
int store_direct_ok(const mc_store_t *s, const void *p, uint64_t len);
/* The transport part of it: any caller memory can be used in place. */
int store_inplace_ok(const mc_store_t *s);

/* Receipt of a master RPC for an operation: op->wait_st = the status and the
 * decode hook (run during the callback, body valid) fills the rest. */
typedef void (*store_decode_fn_t)(store_op_t *op, const mc_rpc_resp_t *resp);
/* Send a call whose body the encoder wrote with mc_rpc_call_begin(s->mcli)
 * (r0). On reply: decode(op, resp) if non-NULL, op->wait_st, then op->step.
 * MC_INPROGRESS, or the error (nothing will run). */
mc_status_t store_rpc_end(store_op_t *op, uint16_t method, store_decode_fn_t decode);
/* The same with a prepared body. */
mc_status_t store_rpc_call(store_op_t *op, uint16_t method, const void *body, size_t len,
                           store_decode_fn_t decode);

/* Sync plumbing: a waiter the callback of an async call completes. */
typedef struct store_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int64_t result;
} store_waiter_t;

void store_waiter_init(store_waiter_t *w);
int64_t store_waiter_wait(store_waiter_t *w); /* waits, destroys, returns result */
void store_waiter_status_cb(void *arg, mc_status_t st);
void store_waiter_get_cb(void *arg, int64_t result);

/* Fan-out: a user thread starts many async operations and waits for all.
 * Each item's callback stores its result through `out` and counts down. */
typedef struct store_fanout {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t left;
} store_fanout_t;

typedef struct store_fanout_item {
    store_fanout_t *f;
    int64_t *out;
} store_fanout_item_t;

void store_fanout_init(store_fanout_t *f);
/* Count an item before submitting it; store_fanout_cancel if the submit
 * failed (its callback will not run). */
void store_fanout_add(store_fanout_t *f);
void store_fanout_cancel(store_fanout_t *f);
void store_fanout_get_cb(void *arg, int64_t result); /* arg: store_fanout_item_t */
void store_fanout_wait(store_fanout_t *f);           /* every item done; destroys f */

/* 1 when the caller is one of the client's reactor threads (sync calls are
 * refused there with MC_ERR_STATE). */
int store_on_reactor(const mc_store_t *s);

/* Blocking master call from a user thread: body by the encoder into a
 * buffer, response body appended to *resp (may be NULL). */
mc_status_t store_call_sync(mc_store_t *s, uint16_t method, const mc_buf_t *body, mc_buf_t *resp);
/* The same within timeout_us instead of rpc_timeout. */
mc_status_t store_call_sync_timeout(mc_store_t *s, uint16_t method, const mc_buf_t *body,
                                    mc_buf_t *resp, uint64_t timeout_us);

/* One try of a blocking master call (store_call_resend): send body within
 * timeout_us, append the answer's body to *resp (may be NULL); the status. */
typedef mc_status_t (*store_send_fn_t)(void *ctx, uint16_t method, const mc_buf_t *body,
                                       uint64_t timeout_us, mc_buf_t *resp);
/* The loop of store_call_sync and store_mconn_call, with the try as the
 * parameter: send(ctx, ...) until the call is answered; one that meets "not
 * this master" (store_leader_trouble) kicks the resolver and, with
 * discovery, is sent again (to the new leader) every RETRY_TICK_US while
 * timeout_us lasts, if it may be (store_resend_worthy). What a failed try
 * appended to *resp is dropped. MC_ERR_CANCELED while the client closes. */
mc_status_t store_call_resend(mc_store_t *s, uint16_t method, const mc_buf_t *body, mc_buf_t *resp,
                              uint64_t timeout_us, store_send_fn_t send, void *ctx);

/* Master calls a new leader may be asked again after this outcome (HA);
 * outcomes that say "not this master" rather than anything about the call. */
int store_resend_worthy(uint16_t method, mc_status_t st);
int store_leader_trouble(mc_status_t st);
#define RETRY_TICK_US 50000 /* resend parked calls this often until a leader answers */
/* A PutStart's put id (never 0): a new leader recognises a resent PutStart. */
uint64_t store_put_id(void);

/* --------------------------------------------------------- client_direct.c */

/* A master connection of one thread (a store service worker): its calls go
 * out and come back on that thread (rpc/bconn.h), with no hop to r0 and
 * back. It calls where mcli calls: the address r0's client was given at
 * open and by every retarget (s->mc_host/mc_port), checked before each call,
 * so it follows HA leader changes exactly as mcli does; calls are resent
 * to a new leader as store_call_sync does. Owned by its thread; freed
 * before the client closes. */
typedef struct store_mconn store_mconn_t;
store_mconn_t *store_mconn_new(mc_store_t *s); /* NULL: out of memory */
void store_mconn_free(store_mconn_t *m);       /* NULL is fine */
mc_store_t *store_mconn_store(const store_mconn_t *m);
/* m's buffers for a call's body and its answer, emptied (kept between
 * calls: a steady load allocates nothing). */
mc_buf_t *store_mconn_body(store_mconn_t *m);
mc_buf_t *store_mconn_ans(store_mconn_t *m);
/* store_call_sync on m (body: a prepared body; the answer's appended to
 * *resp, which may be NULL). */
mc_status_t store_mconn_call(store_mconn_t *m, uint16_t method, const mc_buf_t *body,
                             mc_buf_t *resp);
/* The master's current address for mcli (res_mu; client.c). */
void store_master_addr_set(mc_store_t *s, const char *host, uint16_t port);

/* ------------------------------------------------------------ client_put.c */

/* A sync put run whole on the calling thread with its master connection m:
 * PutStart, the copy into our own segment, PutEnd (PutRevoke on failure),
 * no reactor involved. *done = 1 and the put's status; or *done = 0 and
 * nothing sent when this put is not one for it (replica_num > 1, a
 * persistent tier to write, GPU memory, no mounted segment): then use
 * mc_store_put*. When the master places a replica elsewhere than in our own
 * segment, the put goes on on r0 from the replicas it got. */
mc_status_t store_put_direct(store_mconn_t *m, const void *key, size_t klen,
                             const mc_slice_t *parts, size_t nparts,
                             const mc_replicate_config_t *cfg, int upsert, int *done);

/* flags: PUT_ZERO_COPY (put_from: require a registered source, no
 * staging), PUT_UPSERT (replace an existing object). */
#define PUT_ZERO_COPY 1u
#define PUT_UPSERT 2u
mc_status_t store_put_submit(mc_store_t *s, const void *key, size_t klen, const mc_slice_t *parts,
                             size_t nparts, const mc_replicate_config_t *cfg, unsigned flags,
                             mc_store_cb_t cb, void *arg);

/* ------------------------------------------------------------ client_get.c */

/* get_into: require a registered destination. *need (may be NULL) receives
 * the object size when it does not fit (before cb runs). */
mc_status_t store_get_submit(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                             int zero_copy, uint64_t *need, mc_store_get_cb_t cb, void *arg);

/* mc_store_get run on the calling thread with its master connection m:
 * GetReplicaList there, and a replica in our own segment copied there (the
 * lease checked after the copy); other replicas are read on r0 from the
 * list it got. The copy is mc_copy_cold's (buf is for another process: the
 * store service's co-located client). */
int64_t store_get_direct(store_mconn_t *m, const void *key, size_t klen, void *buf, size_t len,
                         uint64_t *need);

/* Master discovery: ask the resolver to look up the leader now (any thread;
 * no-op without discovery). */
void store_master_trouble(mc_store_t *s);
/* r0: resend every call waiting on s->retry (now, e.g. a new leader). */
void store_retry_run(mc_store_t *s);
/* r0, at close: fail them with MC_ERR_CANCELED. */
void store_retry_cancel_all(mc_store_t *s);
/* -------------------------------------------------------- client_offload.c */

/* Node-local offload into dir (NULL or "": none) with a quota (bytes, 0 =
 * none): lock the directory, start the worker (once the segment is mounted
 * it reports the files found and serves the master's requests). Before
 * the segment is mounted; segment_size: the one to come (0 is refused).
 * buffered: loads and writes never use O_DIRECT (offload_buffered_io). */
mc_status_t store_offload_open(mc_store_t *s, const char *dir, uint64_t quota,
                               uint64_t segment_size, int buffered, int direct_writes);
/* The segment was just mounted (the opening thread, not a reactor): tell
 * the master at once that it offloads, as the worker's report does first,
 * so objects evicted from it from the first put on are written, not
 * dropped (the worker notices the segment up to 10 ms later). Best effort:
 * the worker tells it again. */
void store_offload_announce(mc_store_t *s);
/* Stop the worker and the poller (own reads queued or in flight are
 * answered CANCELED, later ones refused); s->offload stays for the
 * operations still running. */
void store_offload_close(mc_store_t *s);
/* Then, once no operation is left (store_free): release the directory and
 * free it. */
void store_offload_free(mc_store_t *s);

typedef struct store_offload_stats {
    uint64_t written, write_failed, loaded, load_failed, deleted, quota_dropped;
    uint64_t bytes_written, bytes_read;
    uint64_t loaded_direct;   /* loads read with O_DIRECT */
    uint64_t written_direct;  /* of written, those written with O_DIRECT */
    uint64_t own_read;        /* own reads done (store_offload_read_op) */
    uint64_t own_read_direct; /* of those, read with O_DIRECT */
    uint64_t own_read_failed; /* failed (the get asked for a LOAD then) */
    uint64_t poll_pauses;     /* polls answered early and empty: paused before the next */
    uint64_t reported;        /* start reports: files the master took */
    uint64_t report_refused;  /* files it refused (deleted) */
    uint64_t report_calls;    /* calls the start reports took */
} store_offload_stats_t;
void store_offload_stats(mc_store_t *s, store_offload_stats_t *out);
/* Own reads: 1 (*seg_id set) when gets of objects only on this node's
 * disk are read here (store_offload_read_op; the master is told with
 * GET_REPLICA_LIST's OWN_DISK): offload on and serving, MC_OFFLOAD_OWN_READS
 * not 0. Any thread. */
int store_offload_own_segment(mc_store_t *s, mc_uuid_t *seg_id);
/* Read key's file (size bytes, verified) into buf on the offload worker;
 * op is continued (store_op_post) with op->wait_st: MC_OK, or why not (a
 * missing or corrupt file: deleted; MC_ERR_STATE: not serving now;
 * MC_ERR_CANCELED: closing). MC_OK (queued), MC_ERR_STATE,
 * MC_ERR_NOT_SUPPORTED (no offload, or a key a file cannot have),
 * MC_ERR_NOMEM. r0. */
mc_status_t store_offload_read_op(store_op_t *op, const void *key, size_t klen, void *buf,
                                  uint64_t size);
/* The same, waited for by the calling thread (a store service's worker,
 * never a reactor): its status (MC_OK: size bytes in buf, verified). */
mc_status_t store_offload_read_sync(mc_store_t *s, const void *key, size_t klen, void *buf,
                                    uint64_t size);

/* The histogram family mooncake_store_offload_load_stage_seconds{stage} (none
 * without offload). */
void store_offload_metrics(mc_store_t *s, mc_buf_t *b);

/* ----------------------------------------------------------- client_tier.c */

/* Start the tier workers and ask the master for the tier settings (persist:
 * the config's override, NULL/"" = the master's). MC_OK,
 * MC_ERR_INVALID_ARGUMENT (bad persist, logged), MC_ERR_NOMEM. */
mc_status_t store_tier_open(mc_store_t *s, const char *persist, uint64_t queue_bytes);
/* -1 (NULL or "": the master's), MC_MASTER_PERSIST_*, or -2 (invalid: logged). */
int store_tier_parse_persist(const char *persist);
/* Drain (bounded) and join the workers; later submissions are CANCELED.
 * From a user thread, before the master client goes. */
void store_tier_close(mc_store_t *s);
void store_tier_free(mc_store_t *s);
/* The persistence mode in effect (MC_MASTER_PERSIST_*; OFF until known). */
int store_tier_mode(const mc_store_t *s);
/* Whether tier files can be read (the settings name a directory). */
int store_tier_on(const mc_store_t *s);
/* Jobs (see client_tier.c). The *_op forms post op with op->wait_st when
 * done; all return MC_OK (queued) or an error (nothing will run). */
mc_status_t store_tier_write_op(store_op_t *op, const void *key, size_t klen,
                                const mc_slice_t *parts, size_t nparts, uint64_t len);
/* Async write from a copy: MC_OK, MC_ERR_LIMIT (queue full: write it with
 * store_tier_write_op instead), MC_ERR_NOMEM, MC_ERR_CANCELED. */
mc_status_t store_tier_write_async(mc_store_t *s, const void *key, size_t klen,
                                   const mc_slice_t *parts, size_t nparts, uint64_t len);
/* Read into buf; *got receives the file's data size (set before the post). */
mc_status_t store_tier_read_op(store_op_t *op, const void *key, size_t klen, void *buf,
                               uint64_t room, uint64_t expect, uint64_t *got);

/* ---------------------------------------------------------------- client.c */

/* Remount every contributed segment (r0), after NEED_REMOUNT or a new view. */
void store_remount(mc_store_t *s);

/* dummy.c: the co-located client; each public call of a client opened with
 * cfg.service goes to these (store_dummy_async: kind 0 put, 1 get, 2
 * remove, 3 exist, as the async API). */
mc_status_t store_dummy_open(mc_store_t *s, const mc_store_config_t *c);
void store_dummy_close(mc_store_t *s);
/* register_buffer: mc_store_shared_alloc memory is shared with the service */
mc_status_t store_dummy_register(mc_store_t *s, void *buf, size_t len);
mc_status_t store_dummy_unregister(mc_store_t *s, void *buf);
const char *store_dummy_name(const mc_store_t *s);
mc_status_t store_dummy_put(mc_store_t *s, const void *key, size_t klen, const mc_slice_t *parts,
                            size_t nparts, const mc_replicate_config_t *cfg, int upsert);
int64_t store_dummy_get(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                        uint64_t *need);
mc_status_t store_dummy_get_ranges(mc_store_t *s, const void *key, size_t klen, size_t n,
                                   const uint64_t *src, void *const *dst, const uint64_t *len,
                                   int64_t *result);
int store_dummy_exist(mc_store_t *s, const void *key, size_t klen);
int64_t store_dummy_get_size(mc_store_t *s, const void *key, size_t klen);
mc_status_t store_dummy_remove(mc_store_t *s, const void *key, size_t klen, int force);
/* regex NULL: remove all */
int64_t store_dummy_remove_by_regex(mc_store_t *s, const char *regex, int force);
mc_status_t store_dummy_batch_put(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *values,
                                  size_t n, const mc_replicate_config_t *cfg, int upsert,
                                  mc_status_t *sts);
mc_status_t store_dummy_batch_get(mc_store_t *s, const mc_slice_t *keys, mc_slice_t *bufs, size_t n,
                                  int64_t *result);
mc_status_t store_dummy_batch_exist(mc_store_t *s, const mc_slice_t *keys, size_t n, int *result);
mc_status_t store_dummy_batch_remove(mc_store_t *s, const mc_slice_t *keys, size_t n, int force,
                                     mc_status_t *sts);
mc_status_t store_dummy_query(mc_store_t *s, const void *key, size_t klen, mc_store_replica_t *out,
                              uint32_t room, uint32_t *n);
mc_status_t store_dummy_async(mc_store_t *s, int kind, const void *key, size_t klen,
                              const void *cbuf, void *buf, size_t len, int force,
                              const mc_replicate_config_t *cfg, mc_store_cb_t cb,
                              mc_store_get_cb_t gcb, void *arg);

#endif /* MC_STORE_CLIENT_INT_H */
