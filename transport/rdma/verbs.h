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

/* A device as discovery sees it. */
typedef struct rv_dev_info {
    char name[RV_NAME_MAX];
    char pci[RV_NAME_MAX]; /* PCI bus id ("0000:3b:00.0"), "" unknown */
    int numa_node;         /* -1 unknown */
    int port_active;       /* port 1 (or the configured port) is ACTIVE */
    uint8_t port;
    uint8_t gid[16];
    uint16_t lid;
    uint32_t active_mtu; /* bytes: 256 .. 4096 */
    uint32_t max_qp_wr, max_cqe;
} rv_dev_info_t;

typedef enum rv_qp_state {
    RV_QPS_RESET = 0,
    RV_QPS_INIT,
    RV_QPS_RTR,
    RV_QPS_RTS,
    RV_QPS_ERR,
} rv_qp_state_t;

/* Everything a transition may need; which fields count depends on the
 * target state (INIT: port, access; RTR: the remote side and MTU; RTS: -). */
typedef struct rv_qp_attr {
    uint8_t port;
    int access;
    uint32_t dest_qp_num;
    uint8_t dgid[16];
    uint16_t dlid;
    int sgid_index;
    uint32_t path_mtu; /* bytes */
} rv_qp_attr_t;

/* How a context addresses its port (the real provider; the emulated one has
 * port 1 and GID index 0 whatever these say), passed to get_devices and
 * open (NULL: port 1, the rest 0). */
typedef struct rv_port_opts {
    uint8_t port;        /* 1 */
    int gid_index;       /* 0: the GID discovery and the descriptor report */
    uint16_t pkey_index; /* 0: set at the INIT transition */
    uint8_t sl;          /* 0: service level of the RTR address vector */
} rv_port_opts_t;
/* The defaults, overridden by MC_IB_PORT, MC_GID_INDEX, MC_PKEY_INDEX and
 * MC_IB_SL (a malformed value is logged and ignored): the one place they
 * are read. */
void rv_port_opts_init(rv_port_opts_t *o);

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
    /* Devices this provider sees: count (0 = none) into out[0..max). */
    int (*get_devices)(const rv_port_opts_t *po, rv_dev_info_t *out, int max);
    mc_status_t (*open)(const char *dev, const rv_port_opts_t *po, rv_ctx_t **out);
    void (*close)(rv_ctx_t *c);
    /* Fresh port state, GID, LID, MTU of an open context. */
    mc_status_t (*query)(rv_ctx_t *c, rv_dev_info_t *out);
    mc_status_t (*alloc_pd)(rv_ctx_t *c, rv_pd_t **out);
    void (*dealloc_pd)(rv_pd_t *pd);
    mc_status_t (*reg_mr)(rv_pd_t *pd, void *addr, uint64_t len, int access, rv_mr_t *out);
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
    /* One legal transition (RESET->INIT->RTR->RTS, any->ERR, any->RESET);
     * anything else is MC_ERR_STATE. */
    mc_status_t (*modify_qp)(rv_qp_t *qp, rv_qp_state_t to, const rv_qp_attr_t *attr);
    rv_qp_state_t (*qp_state)(rv_qp_t *qp);
    mc_status_t (*post_send)(rv_qp_t *qp, rv_send_wr_t *wr, rv_send_wr_t **bad);
    /* Device events (port up/down, fatal errors): an fd readable when one is
     * pending (-1: none), and the next event, non-blocking: 1 and
     * *port_active set (0 after PORT_ERR or a fatal error, 1 after
     * PORT_ACTIVE), or 0 when none is pending. */
    int (*async_fd)(rv_ctx_t *c);
    int (*async_event)(rv_ctx_t *c, int *port_active);
} mc_rdma_verbs_ops_t;

extern const mc_rdma_verbs_ops_t rv_real_ops;
extern const mc_rdma_verbs_ops_t rv_emu_ops;

/* ------------------------------------------------- emulated provider */

/* Settings of the emulated provider (process-wide; read when a context
 * opens, except the fault knobs, which act at once). */
typedef struct rv_emu_opts {
    unsigned ndevices;  /* emu_0 .. emu_{n-1}; 1..RV_MAX_DEVICES */
    uint64_t delay_us;  /* added to every WR's completion */
    uint64_t bandwidth; /* bytes/s per device, 0 = unlimited */
    uint32_t mtu;       /* active MTU the devices report; 4096 */
} rv_emu_opts_t;

/* Defaults, then MC_RDMA_EMULATED (device count), MC_RDMA_EMU_DELAY_US,
 * MC_RDMA_EMU_BANDWIDTH (bytes/s), MC_RDMA_EMU_MTU from the environment. */
void rv_emu_opts_get(rv_emu_opts_t *o);
/* Replace the settings (tests). */
void rv_emu_configure(const rv_emu_opts_t *o);

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
} rv_emu_stats_t;
void rv_emu_stats(const char *dev, rv_emu_stats_t *out);

#endif /* MC_TRANSPORT_RDMA_VERBS_H */
