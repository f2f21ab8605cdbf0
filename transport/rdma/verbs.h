/*
 * verbs.h - the one table through which the RDMA transport reaches verbs.
 *
 * Two providers, both always built:
 *  - "verbs": thin wrappers over libibverbs (verbs_real.c), the one place
 *    its conventions (NULL + errno, positive errno returns) are translated
 *    into mc_status_t. Built against <infiniband/verbs.h> when the headers
 *    exist (MC_HAVE_IBVERBS); otherwise every call reports "built without
 *    libibverbs".
 *  - "emulated" (verbs_emu.c): devices, PDs, MRs with lkey/rkey and access
 *    checks, CQs with completion channels (an eventfd usable in libevent),
 *    RC QPs with the RESET/INIT/RTR/RTS/ERR rules, and RDMA READ/WRITE
 *    executed between processes: every emulated device context owns a unix
 *    socket (abstract namespace, named from its GID) served by a provider
 *    thread; a WR travels to the remote context's socket, is checked there
 *    against the MR's rkey, range and access flags and the target QP's
 *    state, executed with memcpy, and its completion lands in the
 *    initiator's CQ. Delay, bandwidth and faults (error completions, a
 *    device going down, a QP forced into ERR) are injectable. FOR TESTS AND
 *    DEMOS ONLY: it logs a WARN saying so when a context opens.
 *
 * The types are the provider-neutral subset the transport needs (one SGE
 * per WR, RDMA READ/WRITE only, RC QPs). Threads: a context and what hangs
 * off it may be used from any one thread at a time; poll_cq / post_send on
 * different CQs / QPs may run concurrently. Completion-channel fds are
 * readable when an armed CQ got a completion (rv_cq_event consumes it).
 */
#ifndef MC_TRANSPORT_RDMA_VERBS_H
#define MC_TRANSPORT_RDMA_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

#define RV_NAME_MAX 64
#define RV_MAX_DEVICES 32

typedef struct rv_ctx rv_ctx_t;
typedef struct rv_pd rv_pd_t;
typedef struct rv_cq rv_cq_t;
typedef struct rv_qp rv_qp_t;

/* What a registration hands back; keys as the NIC reports them. */
typedef struct rv_mr {
    void *addr;
    uint64_t len;
    uint32_t lkey, rkey;
    void *impl; /* provider's object */
} rv_mr_t;

enum rv_access {
    RV_ACCESS_LOCAL_WRITE = 1,
    RV_ACCESS_REMOTE_WRITE = 2,
    RV_ACCESS_REMOTE_READ = 4,
    RV_ACCESS_RELAXED_ORDERING = 8, /* a hint; providers without it ignore it */
};

/* Link layer of a port. */
enum rv_link_layer { RV_LL_UNKNOWN = 0, RV_LL_IB = 1, RV_LL_ETH = 2 };

/* Type of a GID table entry (sysfs gid_attrs/types). */
enum rv_gid_type {
    RV_GID_TYPE_NONE = 0, /* an empty slot */
    RV_GID_TYPE_IB = 1,   /* an InfiniBand port's GID */
    RV_GID_TYPE_ROCE_V1 = 2,
    RV_GID_TYPE_ROCE_V2 = 3,
};

/* A device as discovery sees it. */
typedef struct rv_dev_info {
    char name[RV_NAME_MAX];
    char pci[RV_NAME_MAX]; /* PCI bus id ("0000:3b:00.0"), "" unknown */
    int numa_node;         /* -1 unknown */
    int port_active;       /* the configured port is ACTIVE */
    int port_state;        /* ibv_port_state number (4 ACTIVE), 0 unknown */
    int link_layer;        /* RV_LL_* */
    uint8_t port;
    uint8_t gid[16];      /* the GID in use (slot gid_index) */
    int gid_index;        /* chosen or configured; -1 none usable (gid_why says why) */
    uint8_t gid_type;     /* RV_GID_TYPE_* of that slot */
    uint16_t gid_tbl_len; /* slots in the port's GID table */
    char gid_why[128];    /* why no GID, or a note on a configured one; "" */
    uint16_t lid;
    uint32_t active_mtu; /* bytes: 256 .. 4096 */
    uint32_t max_qp_wr, max_cqe;
    uint32_t max_qp_rd_atom;      /* RDMA READs a QP serves at once (responder), 0 unknown */
    uint32_t max_qp_init_rd_atom; /* RDMA READs a QP has in flight (initiator), 0 unknown */
} rv_dev_info_t;

typedef enum rv_qp_state {
    RV_QPS_RESET = 0,
    RV_QPS_INIT,
    RV_QPS_RTR,
    RV_QPS_RTS,
    RV_QPS_ERR,
} rv_qp_state_t;

/* Which attributes of rv_qp_attr_t a transition sets (ibv_qp_attr_mask's
 * subset; providers translate bit for bit). */
enum rv_qp_attr_mask {
    RV_QP_STATE = 1 << 0,
    RV_QP_PKEY_INDEX = 1 << 1,
    RV_QP_PORT = 1 << 2,
    RV_QP_ACCESS_FLAGS = 1 << 3,
    RV_QP_AV = 1 << 4,
    RV_QP_PATH_MTU = 1 << 5,
    RV_QP_DEST_QPN = 1 << 6,
    RV_QP_RQ_PSN = 1 << 7,
    RV_QP_MAX_DEST_RD_ATOMIC = 1 << 8,
    RV_QP_MIN_RNR_TIMER = 1 << 9,
    RV_QP_SQ_PSN = 1 << 10,
    RV_QP_TIMEOUT = 1 << 11,
    RV_QP_RETRY_CNT = 1 << 12,
    RV_QP_RNR_RETRY = 1 << 13,
    RV_QP_MAX_QP_RD_ATOMIC = 1 << 14,
};

/* The attributes of one transition, as ibv_modify_qp takes them; mask says
 * which count. Made by the pure builder (transport/rdma/qp_attr.h); the
 * providers apply them without policy of their own. */
typedef struct rv_qp_attr {
    int mask; /* rv_qp_attr_mask */
    /* INIT */
    uint8_t port;
    uint16_t pkey_index;
    int access; /* rv_access */
    /* RTR */
    uint32_t path_mtu; /* bytes */
    uint32_t dest_qp_num;
    uint32_t rq_psn; /* 24 bits: the peer's first PSN */
    uint8_t max_dest_rd_atomic;
    uint8_t min_rnr_timer;
    struct rv_ah {
        uint8_t is_global; /* GRH: always on RoCE; on IB across subnets */
        uint8_t dgid[16];
        uint8_t sgid_index; /* the local GID slot packets leave from */
        uint8_t hop_limit;
        uint8_t traffic_class;
        uint16_t dlid;
        uint8_t sl;
        uint8_t port;
    } ah;
    /* RTS */
    uint32_t sq_psn;       /* 24 bits: our first PSN (what the peer set as rq_psn) */
    uint8_t timeout;       /* ack timeout: 4.096 us * 2^timeout, 0 = infinite */
    uint8_t retry_cnt;     /* retransmissions before RETRY_EXC_ERR, 0..7 */
    uint8_t rnr_retry;     /* 0..7, 7 = forever */
    uint8_t max_rd_atomic; /* READs in flight as initiator */
} rv_qp_attr_t;

/* How a context addresses its port, passed to get_devices and open (NULL:
 * the defaults): which port, which GID (transport/rdma/gid.h chooses when
 * gid_index < 0, and the QPs then use that slot as sgid_index), and where
 * sysfs is. P_Key index and service level are QP settings
 * (transport/rdma/qp_attr.h). */
typedef struct rv_port_opts {
    uint8_t port;         /* 1 */
    int gid_index;        /* -1: chosen */
    char sysfs_root[128]; /* "/sys"; tests point it at a fake tree */
} rv_port_opts_t;
/* The defaults, overridden by MC_IB_PORT, MC_GID_INDEX (else
 * NCCL_IB_GID_INDEX, as upstream) and MC_SYSFS_ROOT (a malformed value is
 * logged and ignored): the one place they are read. */
void rv_port_opts_init(rv_port_opts_t *o);
/* The defaults alone (no environment). */
void rv_port_opts_default(rv_port_opts_t *o);

typedef struct rv_qp_caps {
    uint32_t max_send_wr;
    uint32_t max_inline;
} rv_qp_caps_t;

typedef enum rv_wr_opcode { RV_WR_RDMA_READ = 0, RV_WR_RDMA_WRITE = 1 } rv_wr_opcode_t;

typedef struct rv_send_wr {
    struct rv_send_wr *next;
    uint64_t wr_id;
    uint64_t local_addr;
    uint64_t remote_addr;
    uint32_t length;
    uint32_t lkey, rkey;
    uint8_t opcode;   /* rv_wr_opcode_t */
    uint8_t signaled; /* a completion is generated (errors always are) */
} rv_send_wr_t;

/* The completion statuses the transport tells apart (ibv_wc_status subset,
 * everything else is GENERAL_ERR). */
typedef enum rv_wc_status {
    RV_WC_SUCCESS = 0,
    RV_WC_LOC_LEN_ERR,
    RV_WC_LOC_PROT_ERR,
    RV_WC_WR_FLUSH_ERR,
    RV_WC_REM_ACCESS_ERR,
    RV_WC_REM_OP_ERR,
    RV_WC_RETRY_EXC_ERR,
    RV_WC_GENERAL_ERR,
} rv_wc_status_t;

typedef struct rv_wc {
    uint64_t wr_id;
    uint32_t status; /* rv_wc_status_t */
    uint32_t byte_len;
    uint32_t qp_num;
    uint8_t opcode;
} rv_wc_t;

/* Device events the transport acts on. */
typedef enum rv_async_type {
    RV_EV_PORT_ACTIVE = 1,
    RV_EV_PORT_ERR,
    RV_EV_LID_CHANGE,   /* re-query, re-publish */
    RV_EV_GID_CHANGE,   /* re-query (the GID may move), re-publish */
    RV_EV_DEVICE_FATAL, /* the whole device is gone */
} rv_async_type_t;

typedef struct rv_async_event {
    int type;     /* rv_async_type_t */
    uint8_t port; /* the port it concerns (0 for DEVICE_FATAL) */
} rv_async_event_t;

const char *rv_wc_status_str(uint32_t st);
const char *rv_qp_state_str(int st);

/*
 * The ops table. Every function returns a status (no errno leaks out) and
 * writes output parameters only on success; destroy/close accept NULL.
 * poll_cq returns the number of completions (>= 0) or a negative status.
 * post_send: MC_OK, or an error with *bad at the first WR not posted
 * (MC_ERR_STATE: the QP is not in RTS / ERR; MC_ERR_LIMIT: send queue full;
 * MC_ERR_INVALID_ARGUMENT: malformed WR).
 */
typedef struct mc_rdma_verbs_ops {
    const char *name;
    /* Devices this provider sees, with the port and GID o selects: count
     * (0 = none) into out[0..max). */
    int (*get_devices)(const rv_port_opts_t *o, rv_dev_info_t *out, int max);
    /* Open dev for port o->port; the GID is chosen here (or o->gid_index)
     * and kept: query reports it, and QPs must use it as sgid_index. */
    mc_status_t (*open)(const char *dev, const rv_port_opts_t *o, rv_ctx_t **out);
    void (*close)(rv_ctx_t *c);
    /* Fresh port state, link layer, GID, LID, MTU, limits of an open context. */
    mc_status_t (*query)(rv_ctx_t *c, rv_dev_info_t *out);
    mc_status_t (*alloc_pd)(rv_ctx_t *c, rv_pd_t **out);
    void (*dealloc_pd)(rv_pd_t *pd);
    mc_status_t (*reg_mr)(rv_pd_t *pd, void *addr, uint64_t len, int access, rv_mr_t *out);
    /* Register [offset, offset+len) of a dma-buf (GPU memory exported by
     * its driver) to be addressed as [iova, iova+len) (ibv_reg_dmabuf_mr);
     * the fd may be closed afterwards. NULL when the provider has none. */
    mc_status_t (*reg_dmabuf_mr)(rv_pd_t *pd, int fd, uint64_t offset, uint64_t len, uint64_t iova,
                                 int access, rv_mr_t *out);
    void (*dereg_mr)(rv_mr_t *mr);
    /* A CQ with its own completion channel. */
    mc_status_t (*create_cq)(rv_ctx_t *c, int cqe, rv_cq_t **out);
    void (*destroy_cq)(rv_cq_t *cq);
    int (*cq_fd)(rv_cq_t *cq);
    /* Arm: the next completion makes cq_fd readable once. */
    mc_status_t (*req_notify)(rv_cq_t *cq);
    /* Consume the channel's events (non-blocking; acked inside). */
    void (*cq_event)(rv_cq_t *cq);
    int (*poll_cq)(rv_cq_t *cq, int n, rv_wc_t *wc);
    mc_status_t (*create_qp)(rv_pd_t *pd, rv_cq_t *cq, const rv_qp_caps_t *caps, rv_qp_t **out);
    void (*destroy_qp)(rv_qp_t *qp);
    uint32_t (*qp_num)(rv_qp_t *qp);
    /* One legal transition (RESET->INIT->RTR->RTS, any->ERR, any->RESET)
     * with the attributes attr->mask names (attr may be NULL for ERR and
     * RESET); an illegal transition is MC_ERR_STATE, attributes the device
     * refuses MC_ERR_INVALID_ARGUMENT (logged with the reason). */
    mc_status_t (*modify_qp)(rv_qp_t *qp, rv_qp_state_t to, const rv_qp_attr_t *attr);
    rv_qp_state_t (*qp_state)(rv_qp_t *qp);
    mc_status_t (*post_send)(rv_qp_t *qp, rv_send_wr_t *wr, rv_send_wr_t **bad);
    /* Device events: an fd readable when one is pending (-1: none), and the
     * next event, non-blocking: 1 with *ev filled, or 0 when none is
     * pending. QP and CQ events are not reported (they surface as
     * completions). */
    int (*async_fd)(rv_ctx_t *c);
    int (*async_event)(rv_ctx_t *c, rv_async_event_t *ev);
    /* Once per process before the first registration: what the library
     * needs for a host that forks (ibv_fork_init unless the kernel copies
     * DMA pages on fork). note says what was done. */
    mc_status_t (*prepare)(char *note, size_t notelen);
} mc_rdma_verbs_ops_t;

extern const mc_rdma_verbs_ops_t rv_real_ops;
extern const mc_rdma_verbs_ops_t rv_emu_ops;

/* ------------------------------------------------- emulated provider */

/* Settings of the emulated provider (process-wide; read when a context
 * opens, except the fault knobs, which act at once).
 *
 * The emulator is strict where hardware is (transport/rdma/README.md):
 * each device has a GID table like mlx5's (Ethernet: fe80:: and an
 * IPv4-mapped address, each as RoCE v1 and v2; InfiniBand: one port GID and
 * a LID), chooses the GID as the real provider does, and refuses at RTR a
 * sgid_index other than the GID it advertises, a peer of the other link
 * layer, a missing GRH on RoCE, a zero LID on IB, read depths beyond its
 * max_qp_rd_atom. Packets carry the source GID and PSN; a target whose QP
 * is not connected to that GID and QP, or expects another PSN, drops them
 * (the sender sees RETRY_EXC_ERR: at once, or after timeout x retries in
 * black-hole mode, as an RC QP waits for acks on hardware). */
typedef struct rv_emu_opts {
    unsigned ndevices;    /* emu_0 .. emu_{n-1}; 1..RV_MAX_DEVICES */
    uint64_t delay_us;    /* added to every WR's completion */
    uint64_t bandwidth;   /* bytes/s per device, 0 = unlimited */
    uint32_t mtu;         /* active MTU the devices report; 4096 */
    int link_layer;       /* RV_LL_ETH (RoCE, default) or RV_LL_IB, every device */
    uint32_t max_rd_atom; /* max_qp_rd_atom and max_qp_init_rd_atom; 16 */
    int blackhole;        /* lost packets fail after timeout x (retry_cnt + 1) */
    int no_peermem;       /* no nvidia-peermem: GPU memory registers only by dma-buf */
} rv_emu_opts_t;

/* Per device, over the process settings (tests). */
typedef struct rv_emu_dev_opts {
    int link_layer;       /* 0: the process setting */
    int no_gid;           /* its GID table is empty: no usable GID */
    int no_ipv4;          /* its netdev has no IPv4 address: only the fe80:: pair */
    uint32_t max_rd_atom; /* 0: the process setting */
} rv_emu_dev_opts_t;

/* Defaults, then MC_RDMA_EMULATED (device count), MC_RDMA_EMU_DELAY_US,
 * MC_RDMA_EMU_BANDWIDTH (bytes/s), MC_RDMA_EMU_MTU,
 * MC_RDMA_EMU_LINK_LAYER (eth | ib), MC_RDMA_EMU_MAX_RD_ATOM,
 * MC_RDMA_EMU_BLACKHOLE (1), MC_RDMA_EMU_NO_PEERMEM (1), and the device
 * lists MC_RDMA_EMU_NO_GID and MC_RDMA_EMU_DOWN ("emu_1,emu_2": empty GID
 * table; port down from the start) from the environment. */
void rv_emu_opts_get(rv_emu_opts_t *o);
/* Replace the settings (tests). */
void rv_emu_configure(const rv_emu_opts_t *o);
/* Per-device settings (NULL: back to the process settings). */
void rv_emu_set_device(const char *dev, const rv_emu_dev_opts_t *o);
/* Post an async event to every context open on dev, for port (0: the
 * context's own port) (tests: LID/GID changes, events of another port;
 * port up/down come with rv_emu_set_down). */
void rv_emu_post_event(const char *dev, int type, uint8_t port);

/* Faults, by device name, on every context of this process open on it:
 * the next `count` WRs posted complete with `status` (the QP then goes to
 * ERR, as on hardware); */
void rv_emu_fail_next(const char *dev, unsigned count, rv_wc_status_t status);
/* the device's port goes down (1) or up (0): WRs in flight and new ones
 * complete with RETRY_EXC_ERR and their QPs go to ERR, and every open
 * context of the device gets a port event (async_fd); */
void rv_emu_set_down(const char *dev, int down);
/* move one QP to ERR from outside (its queued WRs flush). */
void rv_emu_qp_error(rv_qp_t *qp);

/* Counters of this process's emulated devices (bytes executed as
 * initiator, WRs completed with an error). */
typedef struct rv_emu_stats {
    uint64_t bytes, wrs, errors;
    uint64_t early; /* packets that reached a QP not yet at RTR (hardware drops them: the
                       sender waits an ack timeout before it sends again) */
} rv_emu_stats_t;
void rv_emu_stats(const char *dev, rv_emu_stats_t *out);

#endif /* MC_TRANSPORT_RDMA_VERBS_H */
