/*
 * rdma_int.h - internals of the RDMA transport (rdma.c: install, NICs,
 * registration, descriptor; rdma_ep.c: endpoints, handshake, SIEVE pools;
 * rdma_data.c: posting, completions, retries).
 *
 * Threads: each NIC belongs to one reactor (the one on its NUMA node, else
 * round-robin): its CQ, its endpoint pool, its endpoints and their QPs are
 * touched only there. Submitters reach it with one mailbox message per NIC
 * per submit (a chain of slices); handshake requests arriving on any RPC
 * reactor hop to the NIC's reactor and back. Counters are atomics, read from
 * anywhere.
 *
 * Endpoint states (ep_set_state is the one writer):
 *   NEW         QPs created and in INIT; not yet announced to the peer
 *   CONNECTING  our CONNECT is in flight (active side); slices queue
 *   CONNECTED   QPs in RTS; slices are posted
 *   CLOSING     out of the pool (failed, evicted, replaced or the peer
 *               dropped it): QPs in ERR when it failed; freed once no WR is
 *               outstanding and no handshake reply is due (QPs are
 *               destroyed only after they drained)
 */
#ifndef MC_TRANSPORT_RDMA_RDMA_INT_H
#define MC_TRANSPORT_RDMA_RDMA_INT_H

#include <event2/event.h>
#include <stdatomic.h>

#include "reactor/fsm.h"
#include "transport/rdma/qp_attr.h"
#include "transport/rdma/sieve.h"
#include "transport/rdma/topo.h"
#include "transport/rdma/verbs.h"
#include "transport/te_int.h"
#include "util/hmap.h"

#define RD_MAX_QPS 16
#define RD_POLL_BATCH 32
#define RD_BACKOFF_SLOTS 64
#define RD_BACKOFF_MIN_US 10000u
#define RD_BACKOFF_MAX_US 1000000u
#define RD_RETRY_PAUSE_US 10000u /* first pause after a sweep of failed paths */
#define RD_READY_WAIT_MS 1000u   /* a passive endpoint posts without RDMA_READY after this */

typedef struct rd_nic rd_nic_t;
typedef struct rd_transport rd_transport_t;

/* The rdma state of a buffer (te_buf_t.priv): a local buffer's MR on each
 * NIC (mr[nnics], with copies of their keys); a peer's rkey on each of its
 * NICs (nkeys of them). */
typedef struct rd_buf {
    struct rv_mr *mr;
    unsigned nkeys;
    int ent; /* 1 + index of its location's entry in the (local or the peer's)
                topology matrix; 0 = not looked up yet, -1 = none */
    uint32_t lkey[RD_MAX_NICS];
    uint32_t rkey[RD_MAX_NICS];
} rd_buf_t;
_Static_assert(sizeof(rd_buf_t) <= TE_BUF_PRIV, "rd_buf_t fits te_buf_t.priv");
#define RD_BUF(b) ((rd_buf_t *)(void *)(b)->priv)
#define RD_CBUF(b) ((const rd_buf_t *)(const void *)(b)->priv)

/* The rdma state of a slice (te_slice_t.priv): its path, on the NIC's
 * reactor. */
typedef struct rd_slice {
    te_slice_t *next; /* in a submit chain or an endpoint's pending queue */
    void *ep;         /* endpoint it is posted on */
    uint32_t lkey, rkey;
    uint32_t rr; /* striping counter of its first attempt */
    uint8_t lnic, rnic, qp, attempt;
    int err;           /* cause of the last failed attempt (mc_status_t) */
    uint32_t first_ms; /* when its first attempt was chosen (mc_now_ms, wrapping) */
    uint64_t due_ns;   /* a deferred retry goes at this time */
} rd_slice_t;
_Static_assert(sizeof(rd_slice_t) <= TE_SLICE_PRIV, "rd_slice_t fits te_slice_t.priv");
#define RS(s) TE_SLICE_PRIV_OF(rd_slice_t, s)

/* Slices of one submit, gathered per NIC and posted once per NIC
 * (te_submit_t.priv). */
typedef struct rd_submit {
    te_slice_t *head[RD_MAX_NICS], *tail[RD_MAX_NICS];
} rd_submit_t;
_Static_assert(sizeof(rd_submit_t) <= TE_SUBMIT_PRIV, "rd_submit_t fits te_submit_t.priv");

/* The engine's rdma transport (NULL when not installed) and a segment's
 * NICs as last described (NULL: none, it is reached otherwise). */
#define RD_OF(te) ((rd_transport_t *)(te)->tp[TE_TP_RDMA])
#define RD_PEER(seg) ((rd_peer_t *)__atomic_load_n(&(seg)->tp[TE_TP_RDMA], __ATOMIC_ACQUIRE))

/* An endpoint's machine (rd_ep_fsm, rdma_ep.c: ep_set_state is the only
 * writer after creation):
 *   NEW --our CONNECT sent--> CONNECTING --answer, QPs at RTS--> CONNECTED
 *   NEW/CONNECTING --the peer's CONNECT accepted--> CONNECTED
 *   any --a failure, eviction, the peer's DISCONNECT--> CLOSING (freed once
 *   nothing points at it) */
enum rd_ep_state {
    EP_NEW,        /* made, QPs created, no handshake yet */
    EP_CONNECTING, /* our CONNECT in flight (or waiting to retry a simultaneous open) */
    EP_CONNECTED,  /* QPs at RTS both sides: slices post */
    EP_CLOSING,    /* QPs to ERR, in-flight WRs flushing; out of the pool */
};

typedef struct rd_ep {
    mc_hnode_t hnode;      /* nic->eps, by key (while in the pool) */
    rd_sieve_node_t snode; /* nic->sieve (while in the pool) */
    struct rd_ep *next;    /* nic->closing */
    struct rd_ep *dnext;   /* nic->dirty: has pending slices and maybe room */
    mc_status_t cause;     /* why it closed (MC_OK: evicted) */
    rd_nic_t *nic;
    uint64_t key; /* hash of "<peer segment>@<peer NIC>" */
    char *peer;   /* peer segment name */
    char peer_nic[RV_NAME_MAX];
    const struct rd_peer *via; /* descriptor + NIC index it was last found by */
    uint64_t peer_instance;    /* the peer transport's instance it was made with, 0 unknown */
    uint64_t progress_ns;      /* last post into an idle endpoint or completion (watchdog) */
    int peer_ready;            /* the peer's QPs are at RTR: slices may be posted (the
                                  passive side waits for the active side's RDMA_READY) */
    unsigned via_nic;
    char host[64]; /* the peer engine's RPC address */
    uint16_t port;
    int state; /* enum rd_ep_state */
    int in_pool, dirty, hs_inflight, active, freeing;
    unsigned nqp;
    uint32_t psn; /* our first send PSN on every QP (random, announced) */
    rv_qp_t *qp[RD_MAX_QPS];
    uint32_t rqpn[RD_MAX_QPS]; /* the peer's QP numbers once connected */
    uint32_t depth[RD_MAX_QPS];
    uint32_t outstanding; /* WRs posted and not completed */
    unsigned next_qp;
    uint32_t mtu;
    te_slice_t *pend_head, *pend_tail; /* waiting for connection or room */
    uint32_t npending;
    mc_rpc_client_t *rpc; /* to the peer (handshake, disconnect) */
    mc_timer_t timer;     /* handshake retry after a simultaneous open */
    unsigned hs_tries;
} rd_ep_t;

/* Failed keys, remembered to back off reconnects (no storms). */
typedef struct rd_backoff {
    uint64_t key;
    uint64_t until_ns;
    uint32_t delay_us;
} rd_backoff_t;

struct rd_nic {
    rd_transport_t *t;
    unsigned idx;
    char name[RV_NAME_MAX];
    rv_ctx_t *ctx;
    rv_pd_t *pd;
    rv_cq_t *cq;
    rv_dev_info_t info; /* written on its reactor (port events) under info_mu; other
                           threads read it under info_mu */
    pthread_mutex_t info_mu;
    uint32_t mtu;           /* min(active, configured) */
    uint32_t qp_wr;         /* send queue depth of its QPs */
    uint64_t down_until_ns; /* port found down: skip this NIC until then */
    mc_reactor_t *r;
    struct event *cq_ev;
    struct event *async_ev; /* port events */
    mc_timer_t poll_timer;  /* busy polling while work is in flight */
    int polling;            /* poll_timer armed (else the CQ is armed for an event) */
    te_slice_t *deferred;   /* retries waiting out a pause (rd_due_ns) */
    mc_timer_t retry_timer;
    mc_timer_t watchdog; /* slice_timeout: endpoints with WRs and no progress */
    uint64_t busy_until_ns;
    uint32_t cq_outstanding;
    mc_hmap_t eps;
    rd_sieve_t sieve;
    rd_ep_t *closing;
    rd_ep_t *dirty;
    rd_backoff_t backoff[RD_BACKOFF_SLOTS];
    int dead; /* shut down: messages that arrive later cancel */
    _Atomic uint64_t bytes, slices, retries, errors;
    _Atomic uint64_t neps, eps_created, evictions, handshakes;
    _Atomic uint64_t requeries; /* port facts read again after an event */
    _Atomic uint32_t last_mtu;
};

/* How GPU memory is registered on the NICs. */
enum rd_gpu_reg {
    RD_GPU_REG_NONE = 0, /* it cannot be (no GPU, or neither way works) */
    RD_GPU_REG_DMABUF,   /* cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr */
    RD_GPU_REG_PEERMEM,  /* ibv_reg_mr on the device pointer (nvidia-peermem) */
};

struct rd_transport {
    mc_te_t *te;
    const mc_rdma_verbs_ops_t *v;
    rd_qp_settings_t qs; /* MC_IB_TC, MC_IB_SL, MC_IB_TIMEOUT, MC_IB_RETRY_CNT, MC_PKEY_INDEX */
    uint64_t instance;   /* random at install, published: peers notice a restart */
    uint32_t slice_timeout_ms; /* MC_SLICE_TIMEOUT (seconds, upstream's); 0 = none */
    int gpu_reg;               /* enum rd_gpu_reg */
    rd_topo_t topo;
    char *matrix_json;
    unsigned nnics;
    rd_nic_t nics[RD_MAX_NICS];
    unsigned qps_per_ep, max_wr, max_cqe, max_eps, retry, mtu, busy_poll_us;
    rv_port_opts_t port_opts; /* MC_IB_PORT, MC_GID_INDEX, MC_SYSFS_ROOT */
    _Atomic uint32_t rr;
};

/* A peer segment's RDMA side, from its descriptor. */
typedef struct rd_peer {
    unsigned nnics;
    uint64_t instance; /* 0: not described (an older peer) */
    struct {
        char name[RV_NAME_MAX];
        uint8_t gid[16];
        uint16_t lid;
        uint32_t mtu;
        int link_layer;   /* 0: not described (an older peer) */
        uint8_t gid_type; /* 0: not described */
    } nic[RD_MAX_NICS];
    _Atomic uint64_t key[RD_MAX_NICS]; /* endpoint key of each NIC, 0 = not yet computed */
    rd_topo_t topo;
} rd_peer_t;

extern const mc_fsm_desc_t rd_ep_fsm;

/* rdma.c */
#define RD_MEMLOCK_WARN (1ull << 30) /* warn at start below 1 GiB of lockable memory */
/* MC_OK when RLIMIT_MEMLOCK lets len bytes be pinned; else MC_ERR_MEMORY
 * with why saying the limit and how to raise it. */
mc_status_t rd_memlock_check(uint64_t len, char *why, size_t whylen);
/* A NIC's port as its peers learn it (the descriptor, a handshake): GID,
 * LID, MTU, link layer and GID type, 5 map entries; n->info_mu held. */
void rd_write_port(mc_mp_writer_t *w, const rd_nic_t *n);

/* rdma_ep.c (NIC reactor) */
/* The pooled endpoint to seg's NIC rnic, made (and its handshake started)
 * when missing; NULL when that path backs off after a failure or cannot be
 * made (*why says why). */
rd_ep_t *rd_ep_get(rd_nic_t *n, te_seg_t *seg, unsigned rnic, mc_status_t *why);
/* Take ep out of service: out of the pool, QPs to ERR when failed (flushing
 * what is in flight), the peer told, pending slices retried elsewhere; freed
 * once drained. cause = MC_OK for a graceful close (eviction). */
void rd_ep_close(rd_ep_t *ep, mc_status_t cause, int tell_peer);
void rd_ep_maybe_free(rd_ep_t *ep);
void rd_nic_close_all(rd_nic_t *n);
void rd_ep_register_server(mc_te_t *te);
uint64_t rd_ep_key(const char *peer, const char *nic);

/* rdma_data.c: choose the paths of one request's slices and gather them
 * in sub per NIC (submitter); rd_submit_end posts one chain per NIC. */
void rd_post(mc_te_t *te, te_submit_t *sub, te_slice_t *s, size_t n);
void rd_submit_end(mc_te_t *te, te_submit_t *sub);

/* rdma_data.c (NIC reactor) */
void rd_ep_flush(rd_ep_t *ep);
void rd_flush_dirty(rd_nic_t *n);
void rd_mark_dirty(rd_ep_t *ep);
/* An attempt of s failed with cause: try the next path or fail the slice. */
void rd_slice_retry(rd_nic_t *n, te_slice_t *s, mc_status_t cause);
mc_status_t rd_nic_events_start(rd_nic_t *n);
void rd_nic_events_stop(rd_nic_t *n);
void rd_poll_kick(rd_nic_t *n);
/* Poll until no WR of n is outstanding or timeout_us passed (shutdown). */
void rd_drain(rd_nic_t *n, uint64_t timeout_us);
/* Fail the deferred retries with CANCELED (shutdown). */
void rd_deferred_cancel(rd_nic_t *n);

#endif /* MC_TRANSPORT_RDMA_RDMA_INT_H */
