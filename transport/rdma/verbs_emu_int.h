/*
 * verbs_emu_int.h - internals shared by the emulated verbs provider's two
 * files: verbs_emu.c (settings, devices and contexts, addresses, MRs, CQs,
 * events, the ops table) and verbs_emu_qp.c (QPs and their strict rules,
 * the wire between contexts, the server and initiator threads). See
 * verbs_emu.c for the model.
 *
 * Locks: emu_mu (process-wide device state and the list of open contexts),
 * ctx->mu (a context's WR queue, late completions, QP table, servers, and
 * the QP fields servers read), ctx->mr_lock (its MR table; held for
 * reading around every copy in or out of an MR).
 */
#ifndef MC_TRANSPORT_RDMA_VERBS_EMU_INT_H
#define MC_TRANSPORT_RDMA_VERBS_EMU_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "transport/rdma/gid.h"
#include "transport/rdma/verbs.h"

#define EMU_MAGIC 0x4d43454du /* "MCEM" */
#define EMU_MAX_LEN (1u << 30)
#define EMU_MAX_CONNS 64
#define EMU_RETRY_MS 200 /* how long a WR waits for its target QP to reach RTR */
#define EMU_GIDS 4
#define EMU_DROP 100u /* server verdict: the packet went nowhere (never a WC status) */
#define EMU_EVENTS 16

enum { TABLE_FULL, TABLE_NO_IPV4, TABLE_EMPTY }; /* what a port's GID table holds */

typedef struct emu_dev {
    unsigned fail_count;
    uint32_t fail_status;
    int down;
    rv_emu_stats_t st;
    rv_emu_dev_opts_t o;
} emu_dev_t;

extern pthread_mutex_t emu_mu;
extern emu_dev_t emu_devs[RV_MAX_DEVICES];

typedef struct emu_wr {
    struct emu_wr *next;
    rv_qp_t *qp;
    rv_send_wr_t wr;
    uint64_t post_ns;
} emu_wr_t;

/* A completion that waits: a lost packet's RETRY_EXC_ERR after the QP's
 * retries (black-hole mode), and the flushes of the WRs behind it. */
typedef struct emu_late {
    struct emu_late *next;
    rv_qp_t *qp;
    rv_wc_t wc;
    int signaled;
    uint64_t due_ns;
} emu_late_t;

typedef struct emu_conn {
    uint32_t key; /* link layer << 24 | id */
    int fd;
} emu_conn_t;

typedef struct emu_srv {
    struct emu_srv *next;
    rv_ctx_t *ctx;
    int fd;
    pthread_t th;
} emu_srv_t;

struct rv_ctx {
    int dev;
    char name[RV_NAME_MAX];
    int ll;      /* RV_LL_ETH or RV_LL_IB */
    uint32_t id; /* 24 bits on Ethernet; the LID on InfiniBand */
    uint8_t port;
    rd_gid_entry_t gids[EMU_GIDS];
    int ngids;     /* table slots (0: empty table) */
    int gid_index; /* the GID it advertises; -1 none */
    int gid_cfg;   /* configured index, -1: chosen */
    char gid_why[128];
    uint32_t max_rd_atom;
    int lfd;
    pthread_t acc_th, init_th;
    pthread_mutex_t mu; /* WR queue, late list, QP table, server list */
    pthread_cond_t cv;
    emu_wr_t *head, *tail;
    emu_late_t *late; /* by due time */
    rv_qp_t *busy_qp; /* the QP whose WR the initiator executes right now */
    rv_qp_t **qps;
    size_t nqps, cap_qps;
    emu_srv_t *srvs;
    pthread_rwlock_t mr_lock; /* the MR table; servers read it around memcpy */
    struct emu_mr **mrs;
    size_t nmrs, cap_mrs;
    emu_conn_t conns[EMU_MAX_CONNS]; /* initiator thread only */
    unsigned nconns;
    uint64_t busy_until_ns; /* bandwidth model; initiator thread only */
    rv_emu_opts_t o;
    int stop;
    int async_efd;                       /* port events (rv_emu_set_down, rv_emu_post_event) */
    rv_async_event_t events[EMU_EVENTS]; /* emu_mu */
    unsigned nevents;
};

typedef struct emu_mr {
    rv_ctx_t *ctx;
    uint64_t addr, len;
    uint8_t *host; /* where addr's bytes are for the CPU */
    void *map;     /* a dma-buf mapping (munmap at dereg) */
    size_t map_len;
    uint32_t lkey, rkey;
    int access;
} emu_mr_t;

struct rv_pd {
    rv_ctx_t *ctx;
};

struct rv_cq {
    pthread_mutex_t mu;
    rv_wc_t *ring;
    int cap, head, count;
    int efd;
    int armed;
    int overrun;
};

struct rv_qp {
    rv_ctx_t *ctx;
    rv_cq_t *cq;
    uint32_t qpn;
    _Atomic int state;
    /* RTR: the remote end */
    uint32_t dest_qpn;
    uint8_t dgid[16];
    uint16_t dlid;
    uint8_t is_global, sgid_index;
    uint32_t mtu;
    uint32_t exp_psn; /* the next PSN it accepts (servers, under ctx->mu) */
    /* RTS */
    uint32_t next_psn; /* initiator thread */
    uint8_t timeout, retry_cnt;
    uint64_t stall_ns; /* a lost WR waits out its retries until then; 0 none */
    int access;
    uint32_t max_wr;
    _Atomic uint32_t outstanding;
};

/* verbs_emu.c */
/* Which emulated port a GID belongs to: RV_LL_ETH or RV_LL_IB with *id,
 * RV_LL_UNKNOWN when it is no emulated GID. */
int emu_gid_owner(const uint8_t g[16], uint32_t *id);
/* The abstract socket a port listens on. */
void emu_sock_name(int ll, uint32_t id, struct sockaddr_un *a, socklen_t *alen);
/* MR of ctx with this key covering [addr, addr+len) with access; mr_lock
 * held. */
emu_mr_t *emu_mr_find(rv_ctx_t *c, uint32_t key, int remote, uint64_t addr, uint64_t len,
                      int access);
/* Where addr's bytes are for the CPU. */
uint8_t *emu_mr_host(const emu_mr_t *m, uint64_t addr);

/* verbs_emu_qp.c */
void *emu_acc_thread(void *arg);
void *emu_init_thread(void *arg);
void emu_late_free_all(rv_ctx_t *c);
mc_status_t emu_create_qp(rv_pd_t *pd, rv_cq_t *cq, const rv_qp_caps_t *caps, rv_qp_t **out);
void emu_destroy_qp(rv_qp_t *qp);
uint32_t emu_qp_num(rv_qp_t *qp);
mc_status_t emu_modify_qp(rv_qp_t *qp, rv_qp_state_t to, const rv_qp_attr_t *attr);
rv_qp_state_t emu_qp_state(rv_qp_t *qp);
mc_status_t emu_post_send(rv_qp_t *qp, rv_send_wr_t *wr, rv_send_wr_t **bad);

#endif /* MC_TRANSPORT_RDMA_VERBS_EMU_INT_H */
