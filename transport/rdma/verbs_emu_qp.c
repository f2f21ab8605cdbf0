/*
 * verbs_emu_qp.c - the emulated provider's QPs (verbs_emu.c has the
 * model): state rules and the strict checks hardware makes at each
 * transition, the wire between contexts (one unix socket per port), the
 * server threads that execute a peer's WRs against our MRs, and the
 * initiator thread that executes ours, with lost packets completing at
 * once or, in black-hole mode, after the QP's timeout x retries.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transport/rdma/qp_attr.h"
#include "transport/rdma/verbs_emu_int.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

static _Atomic uint32_t g_next_qpn = 0x40;

const char *rv_wc_status_str(uint32_t st)
{
    static const char *const names[] = {"SUCCESS",       "LOC_LEN_ERR",    "LOC_PROT_ERR",
                                        "WR_FLUSH_ERR",  "REM_ACCESS_ERR", "REM_OP_ERR",
                                        "RETRY_EXC_ERR", "GENERAL_ERR"};
    return st < sizeof(names) / sizeof(names[0]) ? names[st] : "UNKNOWN";
}

const char *rv_qp_state_str(int st)
{
    static const char *const names[] = {"RESET", "INIT", "RTR", "RTS", "ERR"};
    return st >= 0 && st <= RV_QPS_ERR ? names[st] : "?";
}

/* ------------------------------------------------------------ helpers */

static int io_full(int fd, void *p, size_t len, int wr)
{
    uint8_t *b = p;
    while (len > 0) {
        ssize_t k = wr ? send(fd, b, len, MSG_NOSIGNAL) : recv(fd, b, len, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        len -= (size_t)k;
    }
    return 0;
}

static void sleep_until(uint64_t t_ns)
{
    uint64_t now = mc_now_ns();
    if (t_ns <= now)
        return;
    struct timespec ts = {(time_t)((t_ns - now) / 1000000000u), (long)((t_ns - now) % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void cq_push(rv_cq_t *cq, const rv_wc_t *wc)
{
    pthread_mutex_lock(&cq->mu);
    if (cq->count == cq->cap) {
        cq->overrun = 1; /* hardware would raise a CQ error; the transport bounds it */
        pthread_mutex_unlock(&cq->mu);
        MC_ERROR(RDMA, "emulated CQ overrun: a completion was lost");
        return;
    }
    cq->ring[(cq->head + cq->count) % cq->cap] = *wc;
    cq->count++;
    int signal = cq->armed;
    cq->armed = 0;
    pthread_mutex_unlock(&cq->mu);
    if (signal) {
        uint64_t one = 1;
        ssize_t k = write(cq->efd, &one, sizeof(one));
        (void)k;
    }
}

/* ---------------------------------------------------------- the wire */

typedef struct emu_req {
    uint32_t magic;
    uint32_t op;
    uint32_t src_qpn, dst_qpn;
    uint32_t psn;
    uint8_t src_gid[16], dst_gid[16];
    uint8_t src_type, global;
    uint16_t src_lid, dst_lid;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t len;
} emu_req_t;

static rv_qp_t *qp_lookup(rv_ctx_t *c, uint32_t qpn)
{
    for (size_t i = 0; i < c->nqps; i++)
        if (c->qps[i]->qpn == qpn)
            return c->qps[i];
    return NULL;
}

static int drain(int fd, uint64_t len)
{
    uint8_t scratch[4096];
    while (len > 0) {
        size_t k = len < sizeof(scratch) ? (size_t)len : sizeof(scratch);
        if (io_full(fd, scratch, k, 0) != 0)
            return -1;
        len -= k;
    }
    return 0;
}

/* Is the packet addressed to this port (its destination GID in our table,
 * of the source's GID type; or our LID without a GRH on IB)? */
static int addressed_here(const rv_ctx_t *c, const emu_req_t *q)
{
    if (!q->global)
        return c->ll == RV_LL_IB && q->dst_lid == c->id;
    for (int i = 0; i < c->ngids; i++)
        if (c->gids[i].type != RV_GID_TYPE_NONE && c->gids[i].type == q->src_type &&
            memcmp(c->gids[i].gid, q->dst_gid, 16) == 0)
            return 1;
    return 0;
}

/* The target QP's verdict on a packet (c->mu held): 1 accept, 0 not yet
 * (not at RTR: a NIC retransmits meanwhile), -1 never (drop). */
static int qp_verdict(rv_ctx_t *c, const emu_req_t *q, rv_qp_t **out)
{
    rv_qp_t *qp = qp_lookup(c, q->dst_qpn);
    int qs = qp ? atomic_load(&qp->state) : -1;
    if (qp == NULL || qs == RV_QPS_ERR || c->stop)
        return -1;
    if (qs != RV_QPS_RTR && qs != RV_QPS_RTS)
        return 0;
    /* an RC QP answers only its peer: its QP number, and where its acks go
     * (the GID, or the LID without a GRH) must be the sender's */
    int from_peer = qp->dest_qpn == q->src_qpn &&
                    (q->global ? qp->is_global && memcmp(qp->dgid, q->src_gid, 16) == 0
                               : !qp->is_global && qp->dlid == q->src_lid);
    if (!from_peer || q->psn != qp->exp_psn)
        return -1;
    qp->exp_psn = (qp->exp_psn + 1) & 0xffffff;
    *out = qp;
    return 1;
}

/* Serve one peer context: one request at a time, in order. */
static void *srv_thread(void *arg)
{
    emu_srv_t *s = arg;
    rv_ctx_t *c = s->ctx;
    emu_req_t q;
    while (io_full(s->fd, &q, sizeof(q), 0) == 0) {
        if (q.magic != EMU_MAGIC || q.op > RV_WR_RDMA_WRITE || q.len > EMU_MAX_LEN) {
            MC_WARN(RDMA, "%s: malformed emulated WR (magic %#x op %u len %u): closing", c->name,
                    q.magic, q.op, q.len);
            break;
        }
        uint32_t st = EMU_DROP;
        if (addressed_here(c, &q)) {
            /* a QP still on its way to RTR (the passive side of a handshake
             * posts before the active side got its answer) is waited for
             * up to EMU_RETRY_MS, as a NIC retransmits before it reports
             * RETRY_EXC_ERR */
            for (int waited = 0; waited <= EMU_RETRY_MS * 10; waited++) {
                rv_qp_t *qp = NULL;
                pthread_mutex_lock(&c->mu);
                int v = qp_verdict(c, &q, &qp);
                pthread_mutex_unlock(&c->mu);
                if (v == 1)
                    st = RV_WC_SUCCESS;
                if (v != 0)
                    break;
                if (waited == 0) {
                    pthread_mutex_lock(&emu_mu);
                    emu_devs[c->dev].st.early++;
                    pthread_mutex_unlock(&emu_mu);
                    MC_DEBUG(RDMA, "%s: a packet for qp %u before it is at RTR", c->name,
                             q.dst_qpn);
                }
                usleep(100);
            }
        }
        pthread_mutex_lock(&emu_mu);
        if (emu_devs[c->dev].down)
            st = EMU_DROP;
        pthread_mutex_unlock(&emu_mu);
        pthread_rwlock_rdlock(&c->mr_lock);
        int need = q.op == RV_WR_RDMA_WRITE ? RV_ACCESS_REMOTE_WRITE : RV_ACCESS_REMOTE_READ;
        emu_mr_t *m = st == RV_WC_SUCCESS ? emu_mr_find(c, q.rkey, 1, q.raddr, q.len, need) : NULL;
        if (st == RV_WC_SUCCESS && m == NULL)
            st = RV_WC_REM_ACCESS_ERR;
        int bad = 0;
        void *mem = m != NULL ? emu_mr_host(m, q.raddr) : NULL;
        if (q.op == RV_WR_RDMA_WRITE)
            bad = st == RV_WC_SUCCESS ? io_full(s->fd, mem, q.len, 0) : drain(s->fd, q.len);
        if (!bad)
            bad = io_full(s->fd, &st, sizeof(st), 1);
        if (!bad && q.op == RV_WR_RDMA_READ && st == RV_WC_SUCCESS)
            bad = io_full(s->fd, mem, q.len, 1);
        pthread_rwlock_unlock(&c->mr_lock);
        if (bad)
            break;
    }
    return NULL;
}

void *emu_acc_thread(void *arg)
{
    rv_ctx_t *c = arg;
    for (;;) {
        int fd = accept(c->lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            break;
        }
        pthread_mutex_lock(&c->mu);
        if (c->stop) {
            pthread_mutex_unlock(&c->mu);
            close(fd);
            break;
        }
        emu_srv_t *s = mc_calloc(1, sizeof(*s));
        if (s == NULL) {
            pthread_mutex_unlock(&c->mu);
            close(fd);
            continue;
        }
        s->ctx = c;
        s->fd = fd;
        if (pthread_create(&s->th, NULL, srv_thread, s) != 0) {
            pthread_mutex_unlock(&c->mu);
            close(fd);
            mc_free(s);
            continue;
        }
        s->next = c->srvs;
        c->srvs = s;
        pthread_mutex_unlock(&c->mu);
    }
    return NULL;
}

/* Initiator: a connection to the port ll/id (cached). */
static int conn_get(rv_ctx_t *c, int ll, uint32_t id)
{
    uint32_t key = (uint32_t)ll << 24 | id;
    for (unsigned i = 0; i < c->nconns; i++)
        if (c->conns[i].key == key)
            return c->conns[i].fd;
    if (c->nconns == EMU_MAX_CONNS) {
        close(c->conns[0].fd);
        c->conns[0] = c->conns[--c->nconns];
    }
    struct sockaddr_un a;
    socklen_t alen;
    emu_sock_name(ll, id, &a, &alen);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, alen) != 0) {
        close(fd);
        return -1;
    }
    c->conns[c->nconns].key = key;
    c->conns[c->nconns++].fd = fd;
    return fd;
}

static void conn_drop(rv_ctx_t *c, int fd)
{
    for (unsigned i = 0; i < c->nconns; i++) {
        if (c->conns[i].fd == fd) {
            close(fd);
            c->conns[i] = c->conns[--c->nconns];
            return;
        }
    }
}

/* Execute one WR: a WC status, or EMU_DROP when the packet went nowhere. */
static uint32_t emu_execute(rv_ctx_t *c, rv_qp_t *qp, const rv_send_wr_t *wr)
{
    if (atomic_load(&qp->state) != RV_QPS_RTS)
        return RV_WC_WR_FLUSH_ERR;
    pthread_mutex_lock(&emu_mu);
    emu_dev_t *d = &emu_devs[c->dev];
    uint32_t st = RV_WC_SUCCESS;
    if (d->down) {
        st = EMU_DROP;
    } else if (d->fail_count > 0) {
        d->fail_count--;
        st = d->fail_status;
    }
    pthread_mutex_unlock(&emu_mu);
    if (st != RV_WC_SUCCESS)
        return st;
    int need = wr->opcode == RV_WR_RDMA_READ ? RV_ACCESS_LOCAL_WRITE : 0;
    pthread_rwlock_rdlock(&c->mr_lock);
    emu_mr_t *m = emu_mr_find(c, wr->lkey, 0, wr->local_addr, wr->length, need);
    uint8_t *local = m != NULL ? emu_mr_host(m, wr->local_addr) : NULL;
    pthread_rwlock_unlock(&c->mr_lock);
    if (m == NULL)
        return RV_WC_LOC_PROT_ERR;
    /* where the packet goes: by GID with a GRH, else by LID (IB) */
    uint32_t id = 0;
    int ll = c->ll;
    if (qp->is_global) {
        ll = emu_gid_owner(qp->dgid, &id);
        if (ll != c->ll)
            return EMU_DROP;
    } else {
        id = qp->dlid;
    }
    emu_req_t q;
    memset(&q, 0, sizeof(q));
    q.magic = EMU_MAGIC;
    q.op = wr->opcode;
    q.src_qpn = qp->qpn;
    q.dst_qpn = qp->dest_qpn;
    q.psn = qp->next_psn;
    q.global = qp->is_global;
    if (qp->is_global) {
        memcpy(q.src_gid, c->gids[qp->sgid_index].gid, 16);
        q.src_type = c->gids[qp->sgid_index].type;
        memcpy(q.dst_gid, qp->dgid, 16);
    }
    q.src_lid = c->ll == RV_LL_IB ? (uint16_t)c->id : 0;
    q.dst_lid = qp->dlid;
    q.raddr = wr->remote_addr;
    q.rkey = wr->rkey;
    q.len = wr->length;
    qp->next_psn = (qp->next_psn + 1) & 0xffffff;
    int fd = conn_get(c, ll, id);
    if (fd < 0)
        return EMU_DROP; /* nobody there */
    /* local stays valid: a deregistration waits for the completion (the
     * transport deregisters only what no WR uses) */
    int bad = io_full(fd, &q, sizeof(q), 1);
    if (!bad && wr->opcode == RV_WR_RDMA_WRITE)
        bad = io_full(fd, local, wr->length, 1);
    if (!bad)
        bad = io_full(fd, &st, sizeof(st), 0);
    if (!bad && st == RV_WC_SUCCESS && wr->opcode == RV_WR_RDMA_READ)
        bad = io_full(fd, local, wr->length, 0);
    if (bad) {
        conn_drop(c, fd);
        return EMU_DROP;
    }
    return st;
}

/* Deliver a completion (initiator thread). */
static void complete(rv_ctx_t *c, rv_qp_t *qp, const rv_wc_t *wc, int signaled)
{
    if (wc->status != RV_WC_SUCCESS && wc->status != RV_WC_WR_FLUSH_ERR)
        atomic_store(&qp->state, RV_QPS_ERR); /* an error moves an RC QP to ERR */
    pthread_mutex_lock(&emu_mu);
    if (wc->status == RV_WC_SUCCESS) {
        emu_devs[c->dev].st.bytes += wc->byte_len;
        emu_devs[c->dev].st.wrs++;
    } else {
        emu_devs[c->dev].st.errors++;
    }
    pthread_mutex_unlock(&emu_mu);
    if (signaled || wc->status != RV_WC_SUCCESS)
        cq_push(qp->cq, wc);
    atomic_fetch_sub(&qp->outstanding, 1);
}

/* Queue a completion for later, after those due no later (c->mu held). */
static void late_add(rv_ctx_t *c, emu_late_t *l)
{
    emu_late_t **pp = &c->late;
    while (*pp != NULL && (*pp)->due_ns <= l->due_ns)
        pp = &(*pp)->next;
    l->next = *pp;
    *pp = l;
}

static void wait_work(rv_ctx_t *c)
{
    while (!c->stop && c->head == NULL) {
        if (c->late == NULL) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        uint64_t now = mc_now_ns();
        if (c->late->due_ns <= now)
            return;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t wait = c->late->due_ns - now;
        ts.tv_sec += (time_t)(wait / 1000000000u);
        ts.tv_nsec += (long)(wait % 1000000000u);
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
}

void *emu_init_thread(void *arg)
{
    rv_ctx_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        wait_work(c);
        if (c->stop)
            break;
        if (c->late != NULL && c->late->due_ns <= mc_now_ns()) {
            emu_late_t *l = c->late;
            c->late = l->next;
            pthread_mutex_unlock(&c->mu);
            complete(c, l->qp, &l->wc, l->signaled);
            mc_free(l);
            pthread_mutex_lock(&c->mu);
            continue;
        }
        if (c->head == NULL)
            continue;
        emu_wr_t *w = c->head;
        c->head = w->next;
        if (c->head == NULL)
            c->tail = NULL;
        c->busy_qp = w->qp;
        pthread_mutex_unlock(&c->mu);

        rv_qp_t *qp = w->qp;
        rv_wc_t wc = {.wr_id = w->wr.wr_id,
                      .byte_len = w->wr.length,
                      .qp_num = qp->qpn,
                      .opcode = w->wr.opcode};
        emu_late_t *l = NULL;
        if (qp->stall_ns != 0) {
            /* a WR before it waits out its retries: this one flushes then */
            wc.status = RV_WC_WR_FLUSH_ERR;
            l = mc_malloc(sizeof(*l));
            if (l != NULL)
                l->due_ns = qp->stall_ns;
        } else {
            sleep_until(w->post_ns + c->o.delay_us * 1000);
            /* the link: this WR occupies it for length / bandwidth after the
             * previous one; the copy itself overlaps that time */
            uint64_t done_ns = 0;
            if (c->o.bandwidth > 0) {
                uint64_t now = mc_now_ns();
                if (c->busy_until_ns < now)
                    c->busy_until_ns = now;
                c->busy_until_ns += (uint64_t)w->wr.length * 1000000000u / c->o.bandwidth;
                done_ns = c->busy_until_ns;
            }
            uint32_t st = emu_execute(c, qp, &w->wr);
            if (st == RV_WC_SUCCESS && done_ns != 0)
                sleep_until(done_ns);
            if (st == EMU_DROP) {
                st = RV_WC_RETRY_EXC_ERR;
                if (c->o.blackhole) { /* no ack: the QP retries, then gives up */
                    uint64_t give_up = rd_qp_give_up_ns(qp->timeout, qp->retry_cnt);
                    l = mc_malloc(sizeof(*l));
                    if (l != NULL) {
                        l->due_ns = give_up == UINT64_MAX ? UINT64_MAX : w->post_ns + give_up;
                        qp->stall_ns = l->due_ns;
                    }
                }
            }
            wc.status = st;
        }
        if (l != NULL) {
            l->qp = qp;
            l->wc = wc;
            l->signaled = w->wr.signaled;
        } else {
            complete(c, qp, &wc, w->wr.signaled);
        }
        mc_free(w);
        pthread_mutex_lock(&c->mu);
        if (l != NULL)
            late_add(c, l);
        c->busy_qp = NULL;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void emu_late_free_all(rv_ctx_t *c)
{
    while (c->late != NULL) {
        emu_late_t *l = c->late;
        c->late = l->next;
        mc_free(l);
    }
}

/* ---------------------------------------------------------- QPs */

mc_status_t emu_create_qp(rv_pd_t *pd, rv_cq_t *cq, const rv_qp_caps_t *caps, rv_qp_t **out)
{
    rv_ctx_t *c = pd->ctx;
    if (caps->max_send_wr == 0 || caps->max_send_wr > 16384)
        return MC_ERR_INVALID_ARGUMENT;
    rv_qp_t *qp = mc_calloc(1, sizeof(*qp));
    if (qp == NULL)
        return MC_ERR_NOMEM;
    qp->ctx = c;
    qp->cq = cq;
    qp->qpn = atomic_fetch_add(&g_next_qpn, 1) & 0xffffff;
    qp->max_wr = caps->max_send_wr;
    atomic_store(&qp->state, RV_QPS_RESET);
    pthread_mutex_lock(&c->mu);
    if (c->nqps == c->cap_qps) {
        size_t cap = c->cap_qps ? c->cap_qps * 2 : 16;
        rv_qp_t **nq = mc_realloc(c->qps, cap * sizeof(*nq));
        if (nq == NULL) {
            pthread_mutex_unlock(&c->mu);
            mc_free(qp);
            return MC_ERR_NOMEM;
        }
        c->qps = nq;
        c->cap_qps = cap;
    }
    c->qps[c->nqps++] = qp;
    pthread_mutex_unlock(&c->mu);
    *out = qp;
    return MC_OK;
}

void emu_destroy_qp(rv_qp_t *qp)
{
    if (qp == NULL)
        return;
    rv_ctx_t *c = qp->ctx;
    pthread_mutex_lock(&c->mu);
    /* WRs not executed yet, and completions still waiting, go without
     * completions (as a destroyed QP's) */
    emu_wr_t **pp = &c->head;
    c->tail = NULL;
    while (*pp != NULL) {
        emu_wr_t *w = *pp;
        if (w->qp == qp) {
            *pp = w->next;
            mc_free(w);
        } else {
            c->tail = w;
            pp = &w->next;
        }
    }
    while (c->busy_qp == qp)
        pthread_cond_wait(&c->cv, &c->mu);
    for (emu_late_t **lp = &c->late; *lp != NULL;) {
        emu_late_t *l = *lp;
        if (l->qp == qp) {
            *lp = l->next;
            mc_free(l);
        } else {
            lp = &l->next;
        }
    }
    for (size_t i = 0; i < c->nqps; i++) {
        if (c->qps[i] == qp) {
            c->qps[i] = c->qps[--c->nqps];
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    mc_free(qp);
}

uint32_t emu_qp_num(rv_qp_t *qp)
{
    return qp->qpn;
}

/* Refuse attributes as a NIC would (EINVAL), saying why. */
static mc_status_t refuse(const rv_qp_t *qp, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static mc_status_t refuse(const rv_qp_t *qp, const char *what, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    MC_WARN(RDMA, "%s: emulated qp %u refuses %s: %s", qp->ctx->name, qp->qpn, what, why);
    return MC_ERR_INVALID_ARGUMENT;
}

static mc_status_t check_rtr(rv_qp_t *qp, const rv_qp_attr_t *a)
{
    rv_ctx_t *c = qp->ctx;
    const int need = RV_QP_AV | RV_QP_PATH_MTU | RV_QP_DEST_QPN | RV_QP_RQ_PSN |
                     RV_QP_MAX_DEST_RD_ATOMIC | RV_QP_MIN_RNR_TIMER;
    if ((a->mask & need) != need)
        return refuse(qp, "RTR", "attribute mask 0x%x lacks 0x%x", a->mask, need & ~a->mask);
    if (a->dest_qp_num == 0 || a->dest_qp_num > 0xffffff)
        return refuse(qp, "RTR", "dest_qp_num %u", a->dest_qp_num);
    uint32_t m = a->path_mtu;
    if (m != 256 && m != 512 && m != 1024 && m != 2048 && m != 4096)
        return refuse(qp, "RTR", "path_mtu %u is not 256..4096", m);
    if (m > c->o.mtu)
        return refuse(qp, "RTR", "path_mtu %u is above the port's active MTU %u", m, c->o.mtu);
    if (a->max_dest_rd_atomic > c->max_rd_atom)
        return refuse(qp, "RTR", "max_dest_rd_atomic %u exceeds the device's max_qp_rd_atom %u",
                      a->max_dest_rd_atomic, c->max_rd_atom);
    if (a->ah.port != c->port)
        return refuse(qp, "RTR", "address vector port %u (the port is %u)", a->ah.port, c->port);
    char g1[RD_GID_STR_MAX], g2[RD_GID_STR_MAX];
    if (c->ll == RV_LL_ETH && !a->ah.is_global)
        return refuse(qp, "RTR", "RoCE needs a GRH (is_global): Ethernet has no LIDs");
    if (c->ll == RV_LL_IB && !a->ah.is_global && a->ah.dlid == 0)
        return refuse(qp, "RTR", "dlid 0 on InfiniBand");
    if (a->ah.is_global) {
        if (c->gid_index < 0)
            return refuse(qp, "RTR", "the port has no usable GID (%s)", c->gid_why);
        int k = a->ah.sgid_index;
        const rd_gid_entry_t *adv = &c->gids[c->gid_index];
        if (k >= c->ngids || c->gids[k].type == RV_GID_TYPE_NONE)
            return refuse(qp, "RTR", "sgid_index %d is an empty slot (the table has %d)", k,
                          c->ngids);
        if (memcmp(c->gids[k].gid, adv->gid, 16) != 0 || c->gids[k].type != adv->type)
            return refuse(qp, "RTR",
                          "sgid_index %d is %s (%s), not the GID this port advertises (index "
                          "%d, %s, %s): packets would leave from an address the peer does not "
                          "answer",
                          k, rd_gid_str(c->gids[k].gid, g1, sizeof(g1)),
                          rd_gid_type_str(c->gids[k].type), c->gid_index,
                          rd_gid_str(adv->gid, g2, sizeof(g2)), rd_gid_type_str(adv->type));
        uint32_t id;
        int ll = emu_gid_owner(a->ah.dgid, &id);
        if (rd_gid_is_null(a->ah.dgid))
            return refuse(qp, "RTR", "a null destination GID");
        if (ll != RV_LL_UNKNOWN && ll != c->ll)
            return refuse(qp, "RTR",
                          "link layers differ: this port is %s, the destination %s is %s",
                          rd_link_layer_str(c->ll), rd_gid_str(a->ah.dgid, g1, sizeof(g1)),
                          rd_link_layer_str(ll));
    }
    return MC_OK;
}

static mc_status_t check_rts(rv_qp_t *qp, const rv_qp_attr_t *a)
{
    const int need =
        RV_QP_SQ_PSN | RV_QP_TIMEOUT | RV_QP_RETRY_CNT | RV_QP_RNR_RETRY | RV_QP_MAX_QP_RD_ATOMIC;
    if ((a->mask & need) != need)
        return refuse(qp, "RTS", "attribute mask 0x%x lacks 0x%x", a->mask, need & ~a->mask);
    if (a->max_rd_atomic > qp->ctx->max_rd_atom)
        return refuse(qp, "RTS", "max_rd_atomic %u exceeds the device's max_qp_init_rd_atom %u",
                      a->max_rd_atomic, qp->ctx->max_rd_atom);
    if (a->retry_cnt > 7 || a->rnr_retry > 7 || a->timeout > 31)
        return refuse(qp, "RTS", "retry_cnt %u, rnr_retry %u, timeout %u out of range",
                      a->retry_cnt, a->rnr_retry, a->timeout);
    return MC_OK;
}

mc_status_t emu_modify_qp(rv_qp_t *qp, rv_qp_state_t to, const rv_qp_attr_t *attr)
{
    int from = atomic_load(&qp->state);
    int ok = to == RV_QPS_ERR || to == RV_QPS_RESET ||
             (from == RV_QPS_RESET && to == RV_QPS_INIT) ||
             (from == RV_QPS_INIT && to == RV_QPS_RTR) || (from == RV_QPS_RTR && to == RV_QPS_RTS);
    if (!ok) {
        MC_DEBUG(RDMA, "emulated qp %u: illegal transition %s -> %s", qp->qpn,
                 rv_qp_state_str(from), rv_qp_state_str(to));
        return MC_ERR_STATE;
    }
    if (to == RV_QPS_INIT) {
        const int need = RV_QP_PKEY_INDEX | RV_QP_PORT | RV_QP_ACCESS_FLAGS;
        if (attr == NULL || (attr->mask & need) != need)
            return refuse(qp, "INIT", "attribute mask lacks port, pkey index or access");
        if (attr->port != qp->ctx->port)
            return refuse(qp, "INIT", "port %u (the device has port %u)", attr->port,
                          qp->ctx->port);
        if (attr->pkey_index != 0)
            return refuse(qp, "INIT", "pkey index %u (the emulated P_Key table has one entry)",
                          attr->pkey_index);
        qp->access = attr->access;
    } else if (to == RV_QPS_RTR) {
        if (attr == NULL)
            return refuse(qp, "RTR", "no attributes");
        mc_status_t st = check_rtr(qp, attr);
        if (st != MC_OK)
            return st;
        pthread_mutex_lock(&qp->ctx->mu); /* the servers read these */
        qp->dest_qpn = attr->dest_qp_num;
        memcpy(qp->dgid, attr->ah.dgid, 16);
        qp->dlid = attr->ah.dlid;
        qp->is_global = attr->ah.is_global;
        qp->sgid_index = attr->ah.sgid_index;
        qp->mtu = attr->path_mtu;
        qp->exp_psn = attr->rq_psn & 0xffffff;
        pthread_mutex_unlock(&qp->ctx->mu);
    } else if (to == RV_QPS_RTS) {
        if (attr == NULL)
            return refuse(qp, "RTS", "no attributes");
        mc_status_t st = check_rts(qp, attr);
        if (st != MC_OK)
            return st;
        qp->next_psn = attr->sq_psn & 0xffffff;
        qp->timeout = attr->timeout;
        qp->retry_cnt = attr->retry_cnt;
    } else if (to == RV_QPS_RESET) {
        pthread_mutex_lock(&qp->ctx->mu);
        qp->dest_qpn = 0;
        qp->stall_ns = 0;
        pthread_mutex_unlock(&qp->ctx->mu);
    } else if (to == RV_QPS_ERR) {
        /* what waits out its retries flushes now, as on hardware */
        rv_ctx_t *c = qp->ctx;
        pthread_mutex_lock(&c->mu);
        uint64_t now = mc_now_ns();
        emu_late_t *mine = NULL, **tail = &mine, **pp = &c->late;
        while (*pp != NULL) { /* this QP's, in order */
            emu_late_t *l = *pp;
            if (l->qp == qp) {
                *pp = l->next;
                l->next = NULL;
                *tail = l;
                tail = &l->next;
            } else {
                pp = &l->next;
            }
        }
        while (mine != NULL) {
            emu_late_t *l = mine;
            mine = l->next;
            l->due_ns = now;
            l->wc.status = RV_WC_WR_FLUSH_ERR;
            late_add(c, l);
        }
        if (qp->stall_ns != 0)
            qp->stall_ns = now;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    atomic_store(&qp->state, to);
    return MC_OK;
}

rv_qp_state_t emu_qp_state(rv_qp_t *qp)
{
    return (rv_qp_state_t)atomic_load(&qp->state);
}

mc_status_t emu_post_send(rv_qp_t *qp, rv_send_wr_t *wr, rv_send_wr_t **bad)
{
    rv_ctx_t *c = qp->ctx;
    int st = atomic_load(&qp->state);
    if (st != RV_QPS_RTS && st != RV_QPS_ERR) {
        *bad = wr;
        return MC_ERR_STATE;
    }
    uint64_t now = mc_now_ns();
    emu_wr_t *first = NULL, *last = NULL;
    uint32_t n = 0;
    mc_status_t err = MC_OK;
    rv_send_wr_t *w = wr;
    for (; w != NULL; w = w->next) {
        if (w->opcode > RV_WR_RDMA_WRITE || w->length == 0 || w->length > EMU_MAX_LEN) {
            err = MC_ERR_INVALID_ARGUMENT;
            break;
        }
        if (atomic_load(&qp->outstanding) + n + 1 > qp->max_wr) {
            err = MC_ERR_LIMIT;
            break;
        }
        emu_wr_t *e = mc_malloc(sizeof(*e));
        if (e == NULL) {
            err = MC_ERR_NOMEM;
            break;
        }
        e->next = NULL;
        e->qp = qp;
        e->wr = *w;
        e->wr.next = NULL;
        e->post_ns = now;
        if (last)
            last->next = e;
        else
            first = e;
        last = e;
        n++;
    }
    if (first != NULL) {
        atomic_fetch_add(&qp->outstanding, n);
        pthread_mutex_lock(&c->mu);
        if (c->tail)
            c->tail->next = first;
        else
            c->head = first;
        c->tail = last;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    if (err != MC_OK)
        *bad = w;
    return err;
}

void rv_emu_qp_error(rv_qp_t *qp)
{
    atomic_store(&qp->state, RV_QPS_ERR);
}
