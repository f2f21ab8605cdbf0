/*
 * verbs_emu.c - the emulated verbs provider (verbs.h). FOR TESTS AND DEMOS
 * ONLY: nothing here is fast or secure; it lets every state machine, fault
 * and retry path of the RDMA transport run where no NIC exists.
 *
 * A context = one emulated NIC as seen by one opener: a GID made of the
 * process id and a serial, a unix socket in the abstract namespace named
 * after the GID, an accept thread (one server thread per connection) and
 * an initiator thread that executes the context's posted WRs in order.
 *
 * A WR travels as {magic, op, src qpn, dst qpn, remote addr, rkey, length}
 * (+ the bytes of a WRITE) to the target context; the server checks the
 * target QP (exists, RTR or RTS, connected to the source QP; otherwise the
 * initiator sees RETRY_EXC_ERR, as when a real peer never acknowledges),
 * then the MR (rkey known, range inside, REMOTE_READ / REMOTE_WRITE granted;
 * otherwise REM_ACCESS_ERR), executes it with memcpy (socket I/O straight
 * into / out of the MR, under the MR table's read lock so a deregistration
 * waits) and answers {status} (+ the bytes of a READ). The completion lands
 * in the initiator's CQ; an error completion moves the QP to ERR and every
 * later WR of that QP is flushed (WR_FLUSH_ERR), as on hardware.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "transport/rdma/verbs.h"
#include "util/conf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define EMU_MAGIC 0x4d43454du /* "MCEM" */
#define EMU_MAX_LEN (1u << 30)
#define EMU_MAX_CONNS 64
#define EMU_RETRY_MS 200 /* how long a WR waits for its target QP to reach RTR */

/* ------------------------------------------------------ process state */

typedef struct emu_dev {
    unsigned fail_count;
    uint32_t fail_status;
    int down;
    rv_emu_stats_t st;
} emu_dev_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static rv_emu_opts_t g_opts;
static int g_opts_set;
static emu_dev_t g_dev[RV_MAX_DEVICES];
static uint32_t g_serial;
static struct rv_ctx **g_ctxs; /* open contexts, for port events; g_mu */
static size_t g_nctxs, g_cap_ctxs;
static _Atomic uint32_t g_next_key = 0x100;
static _Atomic uint32_t g_next_qpn = 0x40;

void rv_emu_opts_get(rv_emu_opts_t *o)
{
    pthread_mutex_lock(&g_mu);
    if (!g_opts_set) {
        /* the emulator's configuration: defaults, then the environment */
        g_opts.ndevices = (unsigned)mc_conf_env_uint("MC_RDMA_EMULATED", 2, 0, RV_MAX_DEVICES);
        if (g_opts.ndevices == 0) /* the rdma transport's "no emulation" */
            g_opts.ndevices = 2;
        g_opts.delay_us = mc_conf_env_uint("MC_RDMA_EMU_DELAY_US", 0, 0, UINT64_MAX);
        g_opts.bandwidth = mc_conf_env_uint("MC_RDMA_EMU_BANDWIDTH", 0, 0, UINT64_MAX);
        g_opts.mtu = (uint32_t)mc_conf_env_uint("MC_RDMA_EMU_MTU", 4096, 0, UINT32_MAX);
        g_opts_set = 1;
    }
    *o = g_opts;
    pthread_mutex_unlock(&g_mu);
}

void rv_emu_configure(const rv_emu_opts_t *o)
{
    pthread_mutex_lock(&g_mu);
    g_opts = *o;
    if (g_opts.ndevices == 0 || g_opts.ndevices > RV_MAX_DEVICES)
        g_opts.ndevices = 2;
    if (g_opts.mtu == 0)
        g_opts.mtu = 4096;
    g_opts_set = 1;
    pthread_mutex_unlock(&g_mu);
}

/* "emu_K" -> K, or -1. */
static int dev_index(const char *name)
{
    if (name == NULL || strncmp(name, "emu_", 4) != 0)
        return -1;
    char *end = NULL;
    long k = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '\0' || k < 0 || k >= RV_MAX_DEVICES)
        return -1;
    return (int)k;
}

void rv_emu_fail_next(const char *dev, unsigned count, rv_wc_status_t status)
{
    int k = dev_index(dev);
    if (k < 0)
        return;
    pthread_mutex_lock(&g_mu);
    g_dev[k].fail_count = count;
    g_dev[k].fail_status = status;
    pthread_mutex_unlock(&g_mu);
}

void rv_emu_stats(const char *dev, rv_emu_stats_t *out)
{
    int k = dev_index(dev);
    memset(out, 0, sizeof(*out));
    if (k < 0)
        return;
    pthread_mutex_lock(&g_mu);
    *out = g_dev[k].st;
    pthread_mutex_unlock(&g_mu);
}

/* ---------------------------------------------------------- objects */

typedef struct emu_wr {
    struct emu_wr *next;
    rv_qp_t *qp;
    rv_send_wr_t wr;
    uint64_t post_ns;
} emu_wr_t;

typedef struct emu_conn {
    uint8_t gid[16];
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
    uint8_t gid[16];
    uint16_t lid;
    int lfd;
    pthread_t acc_th, init_th;
    pthread_mutex_t mu; /* WR queue, QP table, server list */
    pthread_cond_t cv;
    emu_wr_t *head, *tail;
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
    int async_efd; /* port events (rv_emu_set_down) */
    _Atomic int async_pending;
};

typedef struct emu_mr {
    rv_ctx_t *ctx;
    uint64_t addr, len;
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
    uint32_t dest_qpn;
    uint8_t dgid[16];
    uint32_t mtu;
    int access;
    uint32_t max_wr;
    _Atomic uint32_t outstanding;
};

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

static void sock_name(const uint8_t gid[16], struct sockaddr_un *a, socklen_t *alen)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "mc-emu-");
    for (int i = 8; i < 16; i++)
        n += snprintf(a->sun_path + 1 + n, sizeof(a->sun_path) - 1 - (size_t)n, "%02x", gid[i]);
    *alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

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

/* MR of ctx with this key covering [addr, addr+len) with access; mr_lock
 * held. */
static emu_mr_t *mr_find(rv_ctx_t *c, uint32_t key, int remote, uint64_t addr, uint64_t len,
                         int access)
{
    for (size_t i = 0; i < c->nmrs; i++) {
        emu_mr_t *m = c->mrs[i];
        if ((remote ? m->rkey : m->lkey) != key)
            continue;
        if (addr < m->addr || addr + len > m->addr + m->len || addr + len < addr)
            return NULL;
        if ((access & m->access) != access)
            return NULL;
        return m;
    }
    return NULL;
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
        /* The target QP must be RTR or RTS and connected to the sender. A
         * QP still on its way there (INIT, e.g. the passive side of a
         * handshake posts before the active side got its answer) is
         * retried for up to EMU_RETRY_MS, as a NIC retransmits (retry_cnt x
         * timeout) before it reports RETRY_EXC_ERR. */
        uint32_t st = RV_WC_RETRY_EXC_ERR;
        for (int waited = 0; waited <= EMU_RETRY_MS * 10; waited++) {
            pthread_mutex_lock(&c->mu);
            rv_qp_t *qp = qp_lookup(c, q.dst_qpn);
            int qs = qp ? atomic_load(&qp->state) : -1;
            int ok =
                qp != NULL && (qs == RV_QPS_RTR || qs == RV_QPS_RTS) && qp->dest_qpn == q.src_qpn;
            int hopeless = qp == NULL || qs == RV_QPS_ERR || c->stop;
            pthread_mutex_unlock(&c->mu);
            if (ok)
                st = RV_WC_SUCCESS;
            if (ok || hopeless)
                break;
            usleep(100);
        }
        pthread_mutex_lock(&g_mu);
        if (g_dev[c->dev].down)
            st = RV_WC_RETRY_EXC_ERR;
        pthread_mutex_unlock(&g_mu);
        pthread_rwlock_rdlock(&c->mr_lock);
        int need = q.op == RV_WR_RDMA_WRITE ? RV_ACCESS_REMOTE_WRITE : RV_ACCESS_REMOTE_READ;
        if (st == RV_WC_SUCCESS && mr_find(c, q.rkey, 1, q.raddr, q.len, need) == NULL)
            st = RV_WC_REM_ACCESS_ERR;
        int bad = 0;
        void *mem = (void *)(uintptr_t)q.raddr;
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

static void *acc_thread(void *arg)
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

/* Initiator: a connection to the context with this GID (cached). */
static int conn_get(rv_ctx_t *c, const uint8_t gid[16])
{
    for (unsigned i = 0; i < c->nconns; i++)
        if (memcmp(c->conns[i].gid, gid, 16) == 0)
            return c->conns[i].fd;
    if (c->nconns == EMU_MAX_CONNS) {
        close(c->conns[0].fd);
        c->conns[0] = c->conns[--c->nconns];
    }
    struct sockaddr_un a;
    socklen_t alen;
    sock_name(gid, &a, &alen);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, alen) != 0) {
        close(fd);
        return -1;
    }
    memcpy(c->conns[c->nconns].gid, gid, 16);
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

static uint32_t emu_execute(rv_ctx_t *c, rv_qp_t *qp, const rv_send_wr_t *wr)
{
    if (atomic_load(&qp->state) != RV_QPS_RTS)
        return RV_WC_WR_FLUSH_ERR;
    pthread_mutex_lock(&g_mu);
    emu_dev_t *d = &g_dev[c->dev];
    uint32_t st = RV_WC_SUCCESS;
    if (d->down) {
        st = RV_WC_RETRY_EXC_ERR;
    } else if (d->fail_count > 0) {
        d->fail_count--;
        st = d->fail_status;
    }
    pthread_mutex_unlock(&g_mu);
    if (st != RV_WC_SUCCESS)
        return st;
    int need = wr->opcode == RV_WR_RDMA_READ ? RV_ACCESS_LOCAL_WRITE : 0;
    pthread_rwlock_rdlock(&c->mr_lock);
    emu_mr_t *m = mr_find(c, wr->lkey, 0, wr->local_addr, wr->length, need);
    pthread_rwlock_unlock(&c->mr_lock);
    if (m == NULL)
        return RV_WC_LOC_PROT_ERR;
    int fd = conn_get(c, qp->dgid);
    if (fd < 0)
        return RV_WC_RETRY_EXC_ERR;
    emu_req_t q = {EMU_MAGIC,       wr->opcode, qp->qpn,   qp->dest_qpn,
                   wr->remote_addr, wr->rkey,   wr->length};
    void *local = (void *)(uintptr_t)wr->local_addr;
    int bad = io_full(fd, &q, sizeof(q), 1);
    if (!bad && wr->opcode == RV_WR_RDMA_WRITE)
        bad = io_full(fd, local, wr->length, 1);
    if (!bad)
        bad = io_full(fd, &st, sizeof(st), 0);
    if (!bad && st == RV_WC_SUCCESS && wr->opcode == RV_WR_RDMA_READ)
        bad = io_full(fd, local, wr->length, 0);
    if (bad) {
        conn_drop(c, fd);
        return RV_WC_RETRY_EXC_ERR;
    }
    return st;
}

static void *init_thread(void *arg)
{
    rv_ctx_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->head == NULL && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop)
            break;
        emu_wr_t *w = c->head;
        c->head = w->next;
        if (c->head == NULL)
            c->tail = NULL;
        c->busy_qp = w->qp;
        pthread_mutex_unlock(&c->mu);

        rv_qp_t *qp = w->qp;
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
        if (st != RV_WC_SUCCESS && st != RV_WC_WR_FLUSH_ERR)
            atomic_store(&qp->state, RV_QPS_ERR); /* an error moves an RC QP to ERR */
        pthread_mutex_lock(&g_mu);
        if (st == RV_WC_SUCCESS) {
            g_dev[c->dev].st.bytes += w->wr.length;
            g_dev[c->dev].st.wrs++;
        } else {
            g_dev[c->dev].st.errors++;
        }
        pthread_mutex_unlock(&g_mu);
        if (w->wr.signaled || st != RV_WC_SUCCESS) {
            rv_wc_t wc = {.wr_id = w->wr.wr_id,
                          .status = st,
                          .byte_len = w->wr.length,
                          .qp_num = qp->qpn,
                          .opcode = w->wr.opcode};
            cq_push(qp->cq, &wc);
        }
        atomic_fetch_sub(&qp->outstanding, 1);
        mc_free(w);
        pthread_mutex_lock(&c->mu);
        c->busy_qp = NULL;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---------------------------------------------------------- the ops */

static int emu_get_devices(const rv_port_opts_t *po, rv_dev_info_t *out, int max)
{
    (void)po; /* port 1, GID index 0 */
    rv_emu_opts_t o;
    rv_emu_opts_get(&o);
    int n = (int)o.ndevices < max ? (int)o.ndevices : max;
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        snprintf(out[i].name, sizeof(out[i].name), "emu_%d", i);
        snprintf(out[i].pci, sizeof(out[i].pci), "emulated:%02x", i);
        out[i].numa_node = -1;
        pthread_mutex_lock(&g_mu);
        out[i].port_active = !g_dev[i].down;
        pthread_mutex_unlock(&g_mu);
        out[i].port = 1;
        out[i].lid = (uint16_t)(i + 1);
        out[i].active_mtu = o.mtu;
        out[i].max_qp_wr = 16384;
        out[i].max_cqe = 65536;
    }
    return n;
}

static void emu_close(rv_ctx_t *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_nctxs; i++) {
        if (g_ctxs[i] == c) {
            g_ctxs[i] = g_ctxs[--g_nctxs];
            break;
        }
    }
    pthread_mutex_unlock(&g_mu);
    close(c->async_efd);
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    emu_srv_t *srvs = c->srvs;
    c->srvs = NULL;
    for (emu_srv_t *s = srvs; s != NULL; s = s->next)
        shutdown(s->fd, SHUT_RDWR);
    pthread_mutex_unlock(&c->mu);
    shutdown(c->lfd, SHUT_RDWR);
    pthread_join(c->acc_th, NULL);
    pthread_join(c->init_th, NULL);
    while (srvs != NULL) {
        emu_srv_t *next = srvs->next;
        pthread_join(srvs->th, NULL);
        close(srvs->fd);
        mc_free(srvs);
        srvs = next;
    }
    /* accepted after the list was taken: the accept thread saw stop */
    close(c->lfd);
    for (unsigned i = 0; i < c->nconns; i++)
        close(c->conns[i].fd);
    while (c->head != NULL) {
        emu_wr_t *w = c->head;
        c->head = w->next;
        mc_free(w);
    }
    for (size_t i = 0; i < c->nmrs; i++)
        mc_free(c->mrs[i]); /* registrations still open die with their context */
    pthread_rwlock_destroy(&c->mr_lock);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    mc_free(c->qps);
    mc_free(c->mrs);
    mc_free(c);
}

static mc_status_t emu_open(const char *dev, const rv_port_opts_t *po, rv_ctx_t **out)
{
    (void)po;
    rv_emu_opts_t o;
    rv_emu_opts_get(&o);
    int k = dev_index(dev);
    if (k < 0 || (unsigned)k >= o.ndevices) {
        MC_ERROR(RDMA, "no emulated device '%s' (there are emu_0 .. emu_%u)", dev ? dev : "",
                 o.ndevices - 1);
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    rv_ctx_t *c = mc_calloc(1, sizeof(*c));
    if (c == NULL)
        return MC_ERR_NOMEM;
    c->dev = k;
    c->o = o;
    snprintf(c->name, sizeof(c->name), "%s", dev);
    pthread_mutex_lock(&g_mu);
    uint32_t serial = ++g_serial;
    pthread_mutex_unlock(&g_mu);
    uint32_t pid = (uint32_t)getpid();
    c->gid[0] = 0xfe;
    c->gid[1] = 0x80;
    memcpy(&c->gid[8], &pid, 4);
    memcpy(&c->gid[12], &serial, 4);
    c->lid = (uint16_t)(k + 1);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_rwlock_init(&c->mr_lock, NULL);
    struct sockaddr_un a;
    socklen_t alen;
    sock_name(c->gid, &a, &alen);
    c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->lfd < 0 || bind(c->lfd, (struct sockaddr *)&a, alen) != 0 || listen(c->lfd, 64) != 0) {
        MC_ERROR(RDMA, "emulated device %s: cannot listen on its socket: %s", dev, strerror(errno));
        if (c->lfd >= 0)
            close(c->lfd);
        pthread_rwlock_destroy(&c->mr_lock);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        mc_free(c);
        return MC_ERR_CONTEXT;
    }
    if (pthread_create(&c->acc_th, NULL, acc_thread, c) != 0) {
        close(c->lfd);
        mc_free(c);
        return MC_ERR_CONTEXT;
    }
    if (pthread_create(&c->init_th, NULL, init_thread, c) != 0) {
        shutdown(c->lfd, SHUT_RDWR);
        pthread_join(c->acc_th, NULL);
        close(c->lfd);
        mc_free(c);
        return MC_ERR_CONTEXT;
    }
    c->async_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_lock(&g_mu);
    if (c->async_efd >= 0 && g_nctxs == g_cap_ctxs) {
        size_t cap = g_cap_ctxs ? g_cap_ctxs * 2 : 16;
        struct rv_ctx **nc = mc_realloc(g_ctxs, cap * sizeof(*nc));
        if (nc != NULL) {
            g_ctxs = nc;
            g_cap_ctxs = cap;
        }
    }
    int listed = c->async_efd >= 0 && g_nctxs < g_cap_ctxs;
    if (listed)
        g_ctxs[g_nctxs++] = c;
    pthread_mutex_unlock(&g_mu);
    if (!listed) {
        if (c->async_efd < 0)
            c->async_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); /* close() needs an fd */
        emu_close(c);
        return MC_ERR_NOMEM;
    }
    MC_WARN(RDMA,
            "opened EMULATED RDMA device %s (for tests and demos only: no NIC, data "
            "moves over a unix socket)",
            dev);
    *out = c;
    return MC_OK;
}

static mc_status_t emu_query(rv_ctx_t *c, rv_dev_info_t *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", c->name);
    snprintf(out->pci, sizeof(out->pci), "emulated:%02x", c->dev);
    out->numa_node = -1;
    pthread_mutex_lock(&g_mu);
    out->port_active = !g_dev[c->dev].down;
    pthread_mutex_unlock(&g_mu);
    out->port = 1;
    memcpy(out->gid, c->gid, 16);
    out->lid = c->lid;
    out->active_mtu = c->o.mtu;
    out->max_qp_wr = 16384;
    out->max_cqe = 65536;
    return MC_OK;
}

static mc_status_t emu_alloc_pd(rv_ctx_t *c, rv_pd_t **out)
{
    rv_pd_t *pd = mc_calloc(1, sizeof(*pd));
    if (pd == NULL)
        return MC_ERR_NOMEM;
    pd->ctx = c;
    *out = pd;
    return MC_OK;
}

static void emu_dealloc_pd(rv_pd_t *pd)
{
    mc_free(pd);
}

static mc_status_t emu_reg_mr(rv_pd_t *pd, void *addr, uint64_t len, int access, rv_mr_t *out)
{
    rv_ctx_t *c = pd->ctx;
    if (addr == NULL || len == 0 || (uint64_t)(uintptr_t)addr + len < (uint64_t)(uintptr_t)addr)
        return MC_ERR_INVALID_ARGUMENT;
    /* as the verbs spec: remote write needs local write */
    if ((access & RV_ACCESS_REMOTE_WRITE) && !(access & RV_ACCESS_LOCAL_WRITE))
        return MC_ERR_INVALID_ARGUMENT;
    emu_mr_t *m = mc_calloc(1, sizeof(*m));
    if (m == NULL)
        return MC_ERR_NOMEM;
    uint32_t key = atomic_fetch_add(&g_next_key, 1);
    m->addr = (uint64_t)(uintptr_t)addr;
    m->len = len;
    m->lkey = key;
    m->rkey = key ^ 0x5a5a0000u;
    m->access = access;
    m->ctx = c;
    pthread_rwlock_wrlock(&c->mr_lock);
    if (c->nmrs == c->cap_mrs) {
        size_t cap = c->cap_mrs ? c->cap_mrs * 2 : 16;
        emu_mr_t **nm = mc_realloc(c->mrs, cap * sizeof(*nm));
        if (nm == NULL) {
            pthread_rwlock_unlock(&c->mr_lock);
            mc_free(m);
            return MC_ERR_NOMEM;
        }
        c->mrs = nm;
        c->cap_mrs = cap;
    }
    c->mrs[c->nmrs++] = m;
    pthread_rwlock_unlock(&c->mr_lock);
    out->addr = addr;
    out->len = len;
    out->lkey = m->lkey;
    out->rkey = m->rkey;
    out->impl = m;
    return MC_OK;
}

static void emu_dereg_mr(rv_mr_t *mr)
{
    if (mr == NULL || mr->impl == NULL)
        return;
    emu_mr_t *m = mr->impl;
    rv_ctx_t *c = m->ctx;
    /* the write lock waits for servers copying in or out of it */
    pthread_rwlock_wrlock(&c->mr_lock);
    for (size_t i = 0; i < c->nmrs; i++) {
        if (c->mrs[i] == m) {
            c->mrs[i] = c->mrs[--c->nmrs];
            break;
        }
    }
    pthread_rwlock_unlock(&c->mr_lock);
    mc_free(m);
    mr->impl = NULL;
}

static mc_status_t emu_create_cq(rv_ctx_t *c, int cqe, rv_cq_t **out)
{
    (void)c;
    if (cqe <= 0 || cqe > 65536)
        return MC_ERR_INVALID_ARGUMENT;
    rv_cq_t *cq = mc_calloc(1, sizeof(*cq));
    if (cq == NULL)
        return MC_ERR_NOMEM;
    cq->ring = mc_calloc((size_t)cqe, sizeof(*cq->ring));
    cq->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (cq->ring == NULL || cq->efd < 0) {
        if (cq->efd >= 0)
            close(cq->efd);
        mc_free(cq->ring);
        mc_free(cq);
        return MC_ERR_NOMEM;
    }
    cq->cap = cqe;
    pthread_mutex_init(&cq->mu, NULL);
    *out = cq;
    return MC_OK;
}

static void emu_destroy_cq(rv_cq_t *cq)
{
    if (cq == NULL)
        return;
    close(cq->efd);
    pthread_mutex_destroy(&cq->mu);
    mc_free(cq->ring);
    mc_free(cq);
}

static int emu_cq_fd(rv_cq_t *cq)
{
    return cq->efd;
}

static mc_status_t emu_req_notify(rv_cq_t *cq)
{
    pthread_mutex_lock(&cq->mu);
    cq->armed = 1;
    pthread_mutex_unlock(&cq->mu);
    return MC_OK;
}

static void emu_cq_event(rv_cq_t *cq)
{
    uint64_t v;
    ssize_t k = read(cq->efd, &v, sizeof(v));
    (void)k;
}

static int emu_poll_cq(rv_cq_t *cq, int n, rv_wc_t *wc)
{
    int k = 0;
    pthread_mutex_lock(&cq->mu);
    while (k < n && cq->count > 0) {
        wc[k++] = cq->ring[cq->head];
        cq->head = (cq->head + 1) % cq->cap;
        cq->count--;
    }
    pthread_mutex_unlock(&cq->mu);
    return k;
}

static mc_status_t emu_create_qp(rv_pd_t *pd, rv_cq_t *cq, const rv_qp_caps_t *caps, rv_qp_t **out)
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

static void emu_destroy_qp(rv_qp_t *qp)
{
    if (qp == NULL)
        return;
    rv_ctx_t *c = qp->ctx;
    pthread_mutex_lock(&c->mu);
    /* WRs not executed yet go without completions (as a destroyed QP's) */
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
    for (size_t i = 0; i < c->nqps; i++) {
        if (c->qps[i] == qp) {
            c->qps[i] = c->qps[--c->nqps];
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    mc_free(qp);
}

static uint32_t emu_qp_num(rv_qp_t *qp)
{
    return qp->qpn;
}

static mc_status_t emu_modify_qp(rv_qp_t *qp, rv_qp_state_t to, const rv_qp_attr_t *attr)
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
        if (attr == NULL || attr->port != 1)
            return MC_ERR_INVALID_ARGUMENT;
        qp->access = attr->access;
    } else if (to == RV_QPS_RTR) {
        static const uint8_t zero[16];
        if (attr == NULL || attr->dest_qp_num == 0 || memcmp(attr->dgid, zero, 16) == 0)
            return MC_ERR_INVALID_ARGUMENT;
        uint32_t m = attr->path_mtu;
        if (m != 256 && m != 512 && m != 1024 && m != 2048 && m != 4096)
            return MC_ERR_INVALID_ARGUMENT;
        if (m > qp->ctx->o.mtu)
            return MC_ERR_INVALID_ARGUMENT; /* above the port's active MTU */
        qp->dest_qpn = attr->dest_qp_num;
        memcpy(qp->dgid, attr->dgid, 16);
        qp->mtu = m;
    } else if (to == RV_QPS_RESET) {
        qp->dest_qpn = 0;
    }
    atomic_store(&qp->state, to);
    return MC_OK;
}

static rv_qp_state_t emu_qp_state(rv_qp_t *qp)
{
    return (rv_qp_state_t)atomic_load(&qp->state);
}

static mc_status_t emu_post_send(rv_qp_t *qp, rv_send_wr_t *wr, rv_send_wr_t **bad)
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

void rv_emu_set_down(const char *dev, int down)
{
    int k = dev_index(dev);
    if (k < 0)
        return;
    pthread_mutex_lock(&g_mu);
    g_dev[k].down = down;
    /* a port event for every context open on it */
    for (size_t i = 0; i < g_nctxs; i++) {
        if (g_ctxs[i]->dev == k) {
            atomic_store(&g_ctxs[i]->async_pending, 1);
            uint64_t one = 1;
            ssize_t w = write(g_ctxs[i]->async_efd, &one, sizeof(one));
            (void)w;
        }
    }
    pthread_mutex_unlock(&g_mu);
    MC_WARN(RDMA, "emulated device %s: port %s", dev, down ? "DOWN" : "up");
}

static int emu_async_fd(rv_ctx_t *c)
{
    return c->async_efd;
}

static int emu_async_event(rv_ctx_t *c, int *port_active)
{
    uint64_t v;
    ssize_t r = read(c->async_efd, &v, sizeof(v));
    (void)r;
    if (!atomic_exchange(&c->async_pending, 0))
        return 0;
    pthread_mutex_lock(&g_mu);
    *port_active = !g_dev[c->dev].down;
    pthread_mutex_unlock(&g_mu);
    return 1;
}

void rv_emu_qp_error(rv_qp_t *qp)
{
    atomic_store(&qp->state, RV_QPS_ERR);
}

const mc_rdma_verbs_ops_t rv_emu_ops = {
    .name = "emulated",
    .get_devices = emu_get_devices,
    .open = emu_open,
    .close = emu_close,
    .query = emu_query,
    .alloc_pd = emu_alloc_pd,
    .dealloc_pd = emu_dealloc_pd,
    .reg_mr = emu_reg_mr,
    .dereg_mr = emu_dereg_mr,
    .create_cq = emu_create_cq,
    .destroy_cq = emu_destroy_cq,
    .cq_fd = emu_cq_fd,
    .req_notify = emu_req_notify,
    .cq_event = emu_cq_event,
    .poll_cq = emu_poll_cq,
    .create_qp = emu_create_qp,
    .destroy_qp = emu_destroy_qp,
    .qp_num = emu_qp_num,
    .modify_qp = emu_modify_qp,
    .qp_state = emu_qp_state,
    .post_send = emu_post_send,
    .async_fd = emu_async_fd,
    .async_event = emu_async_event,
};
