/*
 * te_int.h - internals of the transfer engine shared by engine.c (engine,
 * registration, segments, descriptors), batch.c (batches, slicing,
 * completion, the local transport), te_async.c and the transports
 * (transport.h: the ops table each of them fills in; tcp.c, rdma/). Private
 * to transport/: the rest of the tree uses transport/te.h, which this
 * includes.
 *
 * Locking: te->buf_lock (rwlock) guards the local buffer table: readers are
 * submitters and the TCP server's range checks, writers (un)registration.
 * te->seg_lock (mutex) guards the segment table and each segment's cached
 * ranges. Segments live until the engine is destroyed (slices in flight point
 * at them); closing one only drops a reference.
 */
#ifndef MC_TRANSPORT_TE_INT_H
#define MC_TRANSPORT_TE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "mooncake/transfer.h"
#include "reactor/reactor.h"
#include "rpc/rpc.h"
#include "transport/metadata.h"
#include "transport/transport.h"
#include "transport/te.h"
#include "util/prom.h"

#define TE_LOCATION_MAX 24

typedef struct te_buf {
    uint64_t addr, len;
    char location[TE_LOCATION_MAX];
    int remote;
    /* the one transport with TE_TP_BUF_PRIV keeps its state here (rdma: a
     * local buffer's MRs and keys, a peer's rkeys); zeroed when the buffer
     * is registered or decoded */
    _Alignas(8) unsigned char priv[TE_BUF_PRIV];
} te_buf_t;

/* Replaced views of a segment kept until it goes (transport.h). */
typedef struct te_retired {
    struct te_retired *next;
    unsigned tp;
    void *peer;
} te_retired_t;

typedef struct te_seg {
    mc_te_segment_t id;
    char *name;
    char host[64];
    uint16_t port;
    te_buf_t *bufs; /* its remote buffers, as last described; seg_lock */
    size_t nbufs;
    mc_rpc_client_t *lanes[TE_MAX_LANES];
    unsigned nlanes;
    _Atomic unsigned next_lane;
    int refs;
    /* Metadata modes, where a name may move to another host:port (its engine
     * restarted): gen counts changes of host/port (bumped under seg_lock);
     * lane_gen[i] is the gen lane i was made for (lane i's reactor only): a
     * lane is re-made before its next use when they differ (tcp.c). stale: a
     * lane could not reach the segment; the next submit looks it up again. */
    _Atomic unsigned gen;
    unsigned lane_gen[TE_MAX_LANES];
    _Atomic int stale;
    /* each transport's view of the segment as last described (what its
     * desc_decode made of its descriptor field; NULL: none, so it cannot
     * reach the segment), replaced under seg_lock; replaced ones are kept
     * on `retired` until the segment goes (reactors may still read them) */
    void *tp[TE_TP_COUNT];
    te_retired_t *retired;
    void *tp_state[TE_TP_COUNT]; /* what a transport keeps for it across descriptions */
    _Atomic unsigned desc_gen;   /* bumped at every descriptor decode */
} te_seg_t;

/* Requests the TCP server answers, counted for /metrics. */
enum { TE_SERVED_READ, TE_SERVED_WRITE, TE_SERVED_READV, TE_SERVED_OPS };

struct mc_te {
    mc_te_opts_t o;
    int has_key; /* o.secret_file given: key authenticates every connection */
    mc_auth_key_t key;
    char *name, *cluster, *metadata, *listen_host, *advertise_host;
    mc_reactor_group_t *g; /* NULL in attach mode */
    mc_reactor_t *attached;
    mc_reactor_t **rs;
    unsigned nr;
    mc_rpc_server_t *srv;
    uint16_t port;
    mc_meta_t *meta; /* NULL in p2p mode */
    pthread_rwlock_t buf_lock;
    te_buf_t *bufs; /* sorted by addr, non-overlapping */
    size_t nbufs, cap_bufs;
    pthread_mutex_t seg_lock;
    te_seg_t **segs; /* segs[id - 1] */
    size_t nsegs, cap_segs;
    /* installed transports: bit (1 << id) in tp_on, each one's state in tp[id] */
    unsigned tp_on;
    void *tp[TE_TP_COUNT];
    _Atomic unsigned buf_gen; /* bumped at every (un)registration */
    _Atomic int has_cuda;     /* a cuda:N buffer was registered (local copies check) */
    _Atomic int stopping;
    /* /metrics (te_metrics): transfers this engine issued, per transport,
     * counted when their last slice finishes; what its TCP server served */
    _Atomic uint64_t xfer_ok[TE_TP_COUNT], xfer_failed[TE_TP_COUNT], xfer_bytes[TE_TP_COUNT];
    mc_prom_hist_t xfer_lat[TE_TP_COUNT];
    _Atomic uint64_t served_reqs[TE_SERVED_OPS], served_bytes[TE_SERVED_OPS];
    /* unique over the process's life (engines may reuse a freed one's
     * address): keys per-thread caches such as rdma_data.c's path cache */
    uint64_t uid;
};

typedef struct te_task {
    _Atomic uint32_t remaining; /* slices not finished */
    uint64_t start_us;          /* submitted (mc_now_us), for the latency histogram */
    uint8_t tp;                 /* its transport (te_tp_id_t) */
    _Atomic uint64_t bytes;
    _Atomic int error; /* first failure, 0 = none */
} te_task_t;

/* One request of the TCP server answered: op, bytes moved. */
static inline void te_count_served(mc_te_t *te, unsigned op, uint64_t bytes)
{
    atomic_fetch_add_explicit(&te->served_reqs[op], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&te->served_bytes[op], bytes, memory_order_relaxed);
}

typedef struct te_slice {
    mc_reactor_msg_t msg; /* posts the slice to its lane's reactor */
    struct mc_te_batch *b;
    te_task_t *task;
    te_seg_t *seg;
    uint8_t *local;
    uint64_t remote;
    uint64_t len;
    int opcode;
    unsigned lane;
    unsigned tp; /* the transport it is posted on (te_tp_id_t) */
    /* that transport's state for it (tcp: the train; rdma: the path) */
    _Alignas(8) unsigned char priv[TE_SLICE_PRIV];
} te_slice_t;

/* Slices of one submit, allocated together and kept until the batch is
 * freed (messages and RPC callbacks point into them). */
typedef struct te_chunk {
    struct te_chunk *next;
    size_t n;
    te_slice_t slices[];
} te_chunk_t;

struct mc_te_batch {
    mc_te_t *te;
    size_t cap;
    _Atomic size_t ntasks;
    _Atomic size_t tasks_done;
    te_task_t *tasks;
    te_chunk_t *chunks;
    mc_te_batch_cb_t cb;
    void *cb_arg;
    mc_reactor_msg_t cb_msg; /* fires cb from a reactor after a local submit */
    _Atomic int cb_posted;   /* CB_* (batch.c): posted, running or idle; under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int local_unreg_ok; /* te_batch_allow_unregistered */
};

/* engine.c (and te.h's te_on_reactor, te_local_range_ok, te_needs_local_reg) */
long te_buf_index(mc_te_t *te, uint64_t addr); /* buffer holding addr, -1; buf_lock held */
int te_seg_range_ok(mc_te_t *te, te_seg_t *seg, uint64_t addr, uint64_t len);
te_seg_t *te_seg_get(mc_te_t *te, mc_te_segment_t id);
mc_status_t te_seg_refresh(mc_te_t *te, te_seg_t *seg);
/* Is transport id installed on te? */
static inline int te_tp_on(const mc_te_t *te, unsigned id)
{
    return (te->tp_on >> id) & 1u;
}
/* Free a segment record that is not (or no longer) in the engine's table:
 * lanes, buffers, the transports' views. */
void te_seg_free(mc_te_t *te, te_seg_t *seg);

/* batch.c (and te.h's te_batch_allow_unregistered) */
void te_slice_done(te_slice_t *s, mc_status_t st);

/* tcp.c: the segment's lanes (its RPC connections: tcp data, and the
 * descriptor in p2p mode) */
mc_status_t te_tcp_lanes_open(mc_te_t *te, te_seg_t *seg);

/* te_async.c: te.h's te_open_segment_async, te_seg_refresh_async,
 * te_publish_async */

/* engine.c, for te_async.c */
/* The metadata key of name's kind ("seg": its descriptor, "rpc": its RPC
 * address) into out: mc/<cluster>/<kind>/<name>. */
void te_meta_key(const mc_te_t *te, const char *kind, const char *name, char *out, size_t len);
/* A p2p name "host:port" into its parts: 0, or -1 when it is not one. */
int te_split_host_port(const char *name, char *host, size_t hl, uint16_t *port);
mc_status_t te_desc_decode(mc_te_t *te, te_seg_t *seg, const uint8_t *p, size_t len);
void te_desc_encode(mc_te_t *te, mc_mp_writer_t *w);
mc_status_t te_publish_encode(mc_te_t *te, mc_buf_t *seg_val, mc_buf_t *rpc_val);

#endif /* MC_TRANSPORT_TE_INT_H */
