/*
 * te_int.h - internals of the transfer engine shared by engine.c (engine,
 * registration, segments, descriptors, server side of TCP), batch.c
 * (batches, slicing, completion, the local transport), tcp.c (the
 * initiator side of the TCP transport), te_async.c and rdma/. Private to
 * transport/: the rest of the tree uses transport/te.h, which this includes.
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
#include "transport/te.h"

#define TE_LOCATION_MAX 24
#define TE_MAX_NICS 16 /* = RD_MAX_NICS (transport/rdma/topo.h) */

struct rv_mr;
struct rd_transport;
struct rd_peer;

typedef struct te_buf {
    uint64_t addr, len;
    char location[TE_LOCATION_MAX];
    int remote;
    /* rdma: local buffers: one MR per NIC (mr[nnics], lkey/rkey copies);
     * a peer's: its rkey on each of its NICs (nkeys of them) */
    struct rv_mr *mr;
    unsigned nkeys;
    int rd_ent; /* 1 + index of its location's entry in the (local or the
                   peer's) topology matrix; 0 = not looked up yet */
    uint32_t lkey[TE_MAX_NICS];
    uint32_t rkey[TE_MAX_NICS];
} te_buf_t;

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
    /* rdma: the segment's NICs and matrix as last described (NULL: it has
     * none, TCP is used); replaced under seg_lock, old ones kept until the
     * engine goes (reactors may still read them) */
    struct rd_peer *rdma, *rdma_old;
    _Atomic unsigned desc_gen; /* bumped at every descriptor decode */
} te_seg_t;

struct mc_te {
    mc_te_opts_t o;
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
    int tcp;
    struct rd_transport *rdma; /* installed rdma transport, or NULL */
    _Atomic unsigned buf_gen;  /* bumped at every (un)registration */
    _Atomic int has_cuda;      /* a cuda:N buffer was registered (local copies check) */
    _Atomic int stopping;
    /* unique over the process's life (engines may reuse a freed one's
     * address): keys per-thread caches such as rdma_data.c's path cache */
    uint64_t uid;
};

typedef struct te_task {
    _Atomic uint32_t remaining; /* slices not finished */
    _Atomic uint64_t bytes;
    _Atomic int error; /* first failure, 0 = none */
} te_task_t;

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
    /* tcp.c: a train is a run of small reads of one segment sent as one
     * TE_READV; its first slice carries the count and the scatter list */
    unsigned ntrain;
    struct iovec *iov;
    /* rdma (transport/rdma/): the path and its state, on the NIC's reactor */
    struct te_slice *rd_next; /* in a submit chain or an endpoint's pending queue */
    void *rd_ep;              /* endpoint it is posted on */
    uint32_t rd_lkey, rd_rkey;
    uint32_t rd_rr; /* striping counter of its first attempt */
    uint8_t rd_lnic, rd_rnic, rd_qp, rd_attempt;
    int rd_err;         /* cause of the last failed attempt (mc_status_t) */
    uint64_t rd_due_ns; /* a deferred retry goes at this time */
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

/* batch.c (and te.h's te_batch_allow_unregistered) */
void te_slice_done(te_slice_t *s, mc_status_t st);

/* rdma (transport/rdma/rdma.c, rdma_ep.c, rdma_data.c) */
mc_status_t te_rdma_install(mc_te_t *te);
void te_rdma_register_server(mc_te_t *te);
void te_rdma_shutdown(mc_te_t *te); /* on the running reactors: endpoints, events */
void te_rdma_free(mc_te_t *te);     /* after the reactors stopped */
/* Give the new local buffers [first, first+n) of te->bufs (buf_lock held for
 * writing) one MR per NIC; all or nothing. */
mc_status_t te_rdma_reg_bufs(mc_te_t *te, te_buf_t *b, size_t n);
void te_rdma_dereg_buf(mc_te_t *te, te_buf_t *b);
void te_rdma_desc_encode(mc_te_t *te, mc_mp_writer_t *w); /* the MC_F_RDMA value */
mc_status_t te_rdma_desc_decode(mc_mp_reader_t *r, struct rd_peer **out);
void te_rdma_peer_free(struct rd_peer *p); /* and those retired after it */
unsigned te_rdma_peer_nics(const struct rd_peer *p);
void te_rdma_peer_retire(struct rd_peer **list, struct rd_peer *p);
int te_rdma_usable(mc_te_t *te, te_seg_t *seg);
/* Slices of one submit, gathered per NIC and posted once per NIC. */
typedef struct te_rdma_submit {
    te_slice_t *head[TE_MAX_NICS], *tail[TE_MAX_NICS];
} te_rdma_submit_t;
/* Choose paths for the n slices of one request (contiguous, same buffers)
 * and add them to sub; te_rdma_submit_end posts them. */
void te_rdma_add(mc_te_t *te, te_rdma_submit_t *sub, te_slice_t *s, size_t n);
void te_rdma_submit_end(mc_te_t *te, te_rdma_submit_t *sub);
/* te_rdma_stats: te.h */

/* tcp.c */
mc_status_t te_tcp_lanes_open(mc_te_t *te, te_seg_t *seg);
void te_tcp_post(te_slice_t *s);
/* Post slices ss[0..n) of one submit: runs of small reads of the same
 * segment travel as trains (one RPC each), the others one by one. */
void te_tcp_post_run(te_slice_t *ss, size_t n);
void te_tcp_register_server(mc_te_t *te);

/* te_async.c: te.h's te_open_segment_async, te_seg_refresh_async,
 * te_publish_async */

/* engine.c, for te_async.c */
mc_status_t te_desc_decode(te_seg_t *seg, const uint8_t *p, size_t len);
void te_desc_encode(mc_te_t *te, mc_mp_writer_t *w);
mc_status_t te_publish_encode(mc_te_t *te, mc_buf_t *seg_val, mc_buf_t *rpc_val);

#endif /* MC_TRANSPORT_TE_INT_H */
