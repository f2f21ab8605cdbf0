/*
 * rdma_data.c - the RDMA data path: path choice at submit, one mailbox
 * message per NIC per submit, posting in chains bounded by QP and CQ depth
 * (a pending queue per endpoint holds the rest), completions polled on the
 * NIC's reactor (completion-channel fd in libevent while idle, busy polling
 * for busy_poll_us after activity while WRs are in flight), retries on the
 * next path and failure with the cause.
 *
 * Accounting: a slice owns one WR; ep->depth[qp], ep->outstanding and
 * nic->cq_outstanding grow before ibv_post_send and shrink when its
 * completion is polled (every WR is signalled, so every WR completes once,
 * flushed ones too). wr_id is the slice.
 */
#include <string.h>
#include <unistd.h>

#include "transport/rdma/gid.h"
#include "transport/rdma/rdma_int.h"
#include "util/log.h"
#include "util/time.h"

/* ------------------------------------------------------------ paths */

static mc_status_t wc_cause(uint32_t st)
{
    switch (st) {
    case RV_WC_REM_ACCESS_ERR:
    case RV_WC_LOC_PROT_ERR:
    case RV_WC_LOC_LEN_ERR:
        return MC_ERR_ADDRESS_NOT_REGISTERED;
    case RV_WC_RETRY_EXC_ERR:
        return MC_ERR_ENDPOINT;
    default:
        return MC_ERR_TRANSFER_FAIL;
    }
}

/* What the path choice of a request needs: the matrix entries of its local
 * and remote locations and the buffers' keys on every NIC. The entries
 * point into the local topology and the peer's descriptor, both kept until
 * the engine or segment goes. */
typedef struct path_ctx {
    const rd_topo_entry_t *le, *re;
    uint32_t lkeys[RD_MAX_NICS], rkeys[RD_MAX_NICS];
} path_ctx_t;

/* Locks: buf_lock (read), then seg_lock. */
static mc_status_t path_lookup(mc_te_t *te, const te_slice_t *s, path_ctx_t *pc)
{
    rd_transport_t *t = RD_OF(te);
    pc->le = pc->re = NULL;
    pthread_rwlock_rdlock(&te->buf_lock);
    long i = te_buf_index(te, (uint64_t)(uintptr_t)s->local);
    if (i >= 0 && RD_BUF(&te->bufs[i])->nkeys == t->nnics) {
        const rd_buf_t *rb = RD_BUF(&te->bufs[i]);
        int ent = rb->ent; /* set at registration */
        pc->le = ent > 0 ? &t->topo.ents[ent - 1] : NULL;
        memcpy(pc->lkeys, rb->lkey, sizeof(pc->lkeys));
    }
    pthread_rwlock_unlock(&te->buf_lock);
    if (pc->le == NULL)
        return MC_ERR_ADDRESS_NOT_REGISTERED;
    pthread_mutex_lock(&te->seg_lock);
    te_seg_t *seg = s->seg;
    rd_peer_t *p = RD_PEER(seg);
    for (size_t k = 0; p != NULL && k < seg->nbufs; k++) {
        te_buf_t *b = &seg->bufs[k];
        rd_buf_t *rb = RD_BUF(b);
        if (s->remote >= b->addr && s->remote + s->len <= b->addr + b->len &&
            rb->nkeys == p->nnics) {
            if (rb->ent == 0) { /* first use of this descriptor's buffer */
                const rd_topo_entry_t *e = rd_topo_find(&p->topo, b->location);
                rb->ent = e ? (int)(e - p->topo.ents) + 1 : -1;
            }
            pc->re = rb->ent > 0 ? &p->topo.ents[rb->ent - 1] : NULL;
            memcpy(pc->rkeys, rb->rkey, sizeof(pc->rkeys));
            break;
        }
    }
    pthread_mutex_unlock(&te->seg_lock);
    return pc->re != NULL ? MC_OK : MC_ERR_ADDRESS_NOT_REGISTERED;
}

/* s's NICs and keys for attempt `attempt` (0: striped over the preferred
 * NICs by RS(s)->rr; then preferred, then secondary, from there on). */
static inline mc_status_t path_apply(const path_ctx_t *pc, te_slice_t *s, unsigned attempt)
{
    int l = rd_topo_select(pc->le, RS(s)->rr, attempt);
    int r = rd_topo_select(pc->re, RS(s)->rr, attempt);
    if (l < 0 || r < 0)
        return MC_ERR_DEVICE_NOT_FOUND;
    RS(s)->lnic = (uint8_t)l;
    RS(s)->rnic = (uint8_t)r;
    RS(s)->lkey = pc->lkeys[l];
    RS(s)->rkey = pc->rkeys[r];
    return MC_OK;
}

static mc_status_t choose_path(mc_te_t *te, te_slice_t *s, unsigned attempt)
{
    path_ctx_t pc;
    mc_status_t st = path_lookup(te, s, &pc);
    return st == MC_OK ? path_apply(&pc, s, attempt) : st;
}

static void nic_submit_msg(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st);
static void dispatch(rd_nic_t *n, te_slice_t *s);
static void on_retry_timer(mc_timer_t *tm, void *arg);

static void chain_add(rd_submit_t *sub, te_slice_t *s)
{
    unsigned k = RS(s)->lnic;
    RS(s)->next = NULL;
    if (sub->tail[k] != NULL)
        RS(sub->tail[k])->next = s;
    else
        sub->head[k] = s;
    sub->tail[k] = s;
}

/* The last path context this thread looked up, reused while the next
 * request lies in the same two buffers and nothing was (un)registered or
 * re-described since (the generation counters). Keyed by the engine's uid,
 * not its address: a new engine may get a destroyed one's address, with
 * its segment at the same address and the same generations (it then used
 * the old engine's freed topology: wrong keys, or no NIC). */
typedef struct path_cache {
    uint64_t te_uid;
    te_seg_t *seg;
    unsigned buf_gen, desc_gen;
    uint64_t l0, l1, r0, r1; /* the buffers' ranges */
    path_ctx_t pc;
} path_cache_t;

static _Thread_local path_cache_t tl_path;

static mc_status_t path_lookup_cached(mc_te_t *te, const te_slice_t *s, uint64_t len,
                                      path_ctx_t *pc)
{
    path_cache_t *c = &tl_path;
    uint64_t la = (uint64_t)(uintptr_t)s->local;
    unsigned bg = atomic_load_explicit(&te->buf_gen, memory_order_acquire);
    unsigned dg = atomic_load_explicit(&s->seg->desc_gen, memory_order_acquire);
    if (c->te_uid == te->uid && c->seg == s->seg && c->buf_gen == bg && c->desc_gen == dg &&
        la >= c->l0 && la + len <= c->l1 && s->remote >= c->r0 && s->remote + len <= c->r1) {
        *pc = c->pc;
        return MC_OK;
    }
    mc_status_t st = path_lookup(te, s, pc);
    if (st != MC_OK)
        return st;
    /* remember the two buffers' bounds */
    c->te_uid = 0; /* invalid until filled in below */
    pthread_rwlock_rdlock(&te->buf_lock);
    long i = te_buf_index(te, la);
    if (i >= 0) {
        c->l0 = te->bufs[i].addr;
        c->l1 = te->bufs[i].addr + te->bufs[i].len;
    }
    pthread_rwlock_unlock(&te->buf_lock);
    pthread_mutex_lock(&te->seg_lock);
    int found = 0;
    for (size_t k = 0; k < s->seg->nbufs && !found; k++) {
        const te_buf_t *b = &s->seg->bufs[k];
        if (s->remote >= b->addr && s->remote + len <= b->addr + b->len) {
            c->r0 = b->addr;
            c->r1 = b->addr + b->len;
            found = 1;
        }
    }
    pthread_mutex_unlock(&te->seg_lock);
    if (i >= 0 && found) {
        c->te_uid = te->uid;
        c->seg = s->seg;
        c->buf_gen = bg;
        c->desc_gen = dg;
        c->pc = *pc;
    }
    return MC_OK;
}

void rd_post(mc_te_t *te, te_submit_t *tsub, te_slice_t *s, size_t n)
{
    rd_transport_t *t = RD_OF(te);
    rd_submit_t *sub = TE_SUBMIT_PRIV_OF(rd_submit_t, tsub, TE_TP_RDMA);
    uint32_t rr = atomic_fetch_add_explicit(&t->rr, (uint32_t)n, memory_order_relaxed);
    /* the slices of one request share their buffers: one lookup, often none */
    path_ctx_t pc;
    uint64_t len = (uint64_t)(s[n - 1].local - s[0].local) + s[n - 1].len;
    mc_status_t st = path_lookup_cached(te, &s[0], len, &pc);
    for (size_t i = 0; i < n; i++) {
        te_slice_t *x = &s[i];
        RS(x)->rr = rr + (uint32_t)i;
        RS(x)->attempt = 0;
        RS(x)->first_ms = (uint32_t)mc_now_ms();
        RS(x)->err = 0;
        RS(x)->ep = NULL;
        mc_status_t xs = st == MC_OK ? path_apply(&pc, x, 0) : st;
        if (xs != MC_OK)
            te_slice_done(x, xs);
        else
            chain_add(sub, x);
    }
}

void rd_submit_end(mc_te_t *te, te_submit_t *tsub)
{
    rd_transport_t *t = RD_OF(te);
    rd_submit_t *sub = TE_SUBMIT_PRIV_OF(rd_submit_t, tsub, TE_TP_RDMA);
    for (unsigned k = 0; k < t->nnics; k++) {
        te_slice_t *h = sub->head[k];
        if (h == NULL)
            continue;
        sub->head[k] = sub->tail[k] = NULL;
        h->msg.fn = nic_submit_msg;
        if (mc_reactor_post(t->nics[k].r, &h->msg) != MC_OK) {
            while (h != NULL) {
                te_slice_t *next = RS(h)->next;
                te_slice_done(h, MC_ERR_CANCELED);
                h = next;
            }
        }
    }
}

/* ------------------------------------------------------------ NIC side */

void rd_mark_dirty(rd_ep_t *ep)
{
    if (ep->dirty)
        return;
    ep->dirty = 1;
    ep->dnext = ep->nic->dirty;
    ep->nic->dirty = ep;
}

void rd_flush_dirty(rd_nic_t *n)
{
    while (n->dirty != NULL) {
        rd_ep_t *ep = n->dirty;
        n->dirty = ep->dnext;
        ep->dirty = 0;
        rd_ep_flush(ep);
    }
}

/* Queue s on its endpoint (on s's NIC, which is n). */
static void enqueue(rd_nic_t *n, te_slice_t *s)
{
    mc_status_t why = MC_ERR_ENDPOINT;
    if (n->down_until_ns != 0 && mc_now_ns() < n->down_until_ns) {
        rd_slice_retry(n, s, MC_ERR_ENDPOINT);
        return;
    }
    rd_ep_t *ep = rd_ep_get(n, s->seg, RS(s)->rnic, &why);
    if (ep == NULL) {
        rd_slice_retry(n, s, why);
        return;
    }
    RS(s)->ep = ep;
    RS(s)->next = NULL;
    if (ep->pend_tail != NULL)
        RS(ep->pend_tail)->next = s;
    else
        ep->pend_head = s;
    ep->pend_tail = s;
    ep->npending++;
    rd_mark_dirty(ep);
}

static void nic_submit_msg(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    te_slice_t *s = MC_CONTAINER_OF(msg, te_slice_t, msg);
    rd_transport_t *t = RD_OF(s->b->te);
    rd_nic_t *n = &t->nics[RS(s)->lnic];
    (void)r;
    while (s != NULL) {
        te_slice_t *next = RS(s)->next;
        if (st != MC_OK || n->dead)
            te_slice_done(s, MC_ERR_CANCELED);
        else
            enqueue(n, s);
        s = next;
    }
    if (!n->dead)
        rd_flush_dirty(n);
}

void rd_slice_retry(rd_nic_t *n, te_slice_t *s, mc_status_t cause)
{
    rd_transport_t *t = n->t;
    mc_te_t *te = t->te;
    /* the reason reported is the first real one: a path skipped because it
     * backs off (MC_ERR_ENDPOINT) does not hide the completion error that
     * made it back off */
    if (cause != MC_OK && cause != MC_ERR_CANCELED &&
        (RS(s)->err == 0 || (RS(s)->err == MC_ERR_ENDPOINT && cause != MC_ERR_ENDPOINT)))
        RS(s)->err = cause;
    if (RS(s)->err == 0)
        RS(s)->err = MC_ERR_TRANSFER_FAIL;
    RS(s)->ep = NULL;
    if (cause == MC_ERR_CANCELED || atomic_load(&te->stopping) || n->dead) {
        te_slice_done(s, MC_ERR_CANCELED);
        return;
    }
    /* MC_SLICE_TIMEOUT: past its deadline a slice is not tried again */
    if (t->slice_timeout_ms != 0 &&
        (uint32_t)mc_now_ms() - RS(s)->first_ms >= t->slice_timeout_ms) {
        if (atomic_load_explicit(&s->task->error, memory_order_relaxed) == 0)
            MC_ERROR(RDMA,
                     "%s slice of %llu bytes to '%s' (0x%llx) timed out after %u attempt(s) "
                     "(MC_SLICE_TIMEOUT %u s; last: %s)",
                     s->opcode == MC_TE_WRITE ? "write" : "read", (unsigned long long)s->len,
                     s->seg->name, (unsigned long long)s->remote, RS(s)->attempt + 1,
                     t->slice_timeout_ms / 1000, mc_status_str(RS(s)->err));
        te_slice_done(s, MC_ERR_TIMEOUT);
        return;
    }
    if (RS(s)->attempt >= t->retry) {
        const rd_peer_t *p = RD_PEER(s->seg); /* NULL: re-described without rdma */
        if (atomic_load_explicit(&s->task->error, memory_order_relaxed) == 0)
            MC_ERROR(RDMA,
                     "%s slice of %llu bytes to '%s' (0x%llx) failed after %u attempts: "
                     "%s (last path %s -> %s)",
                     s->opcode == MC_TE_WRITE ? "write" : "read", (unsigned long long)s->len,
                     s->seg->name, (unsigned long long)s->remote, RS(s)->attempt + 1,
                     mc_status_str(RS(s)->err), n->name,
                     p != NULL && RS(s)->rnic < p->nnics ? p->nic[RS(s)->rnic].name : "?");
        te_slice_done(s, RS(s)->err);
        return;
    }
    RS(s)->attempt++;
    atomic_fetch_add_explicit(&n->retries, 1, memory_order_relaxed);
    mc_status_t st = choose_path(te, s, RS(s)->attempt);
    if (st != MC_OK) {
        te_slice_done(s, st);
        return;
    }
    /* After each full sweep over the NICs, pause before the next one (10 ms,
     * doubling, at most 160 ms): a path that failed a moment ago is backing
     * off, and a transient fault (a peer restarting, a link flapping) gets
     * time to clear before the budget is spent. */
    unsigned cycle = t->nnics > 0 ? t->nnics : 1;
    if (RS(s)->attempt % cycle == 0) {
        unsigned sweep = RS(s)->attempt / cycle;
        uint64_t pause_us = (uint64_t)RD_RETRY_PAUSE_US << (sweep > 5 ? 4 : sweep - 1);
        RS(s)->due_ns = mc_now_ns() + pause_us * 1000;
        RS(s)->next = n->deferred;
        n->deferred = s;
        if (!mc_timer_armed(&n->retry_timer))
            mc_timer_start(&n->retry_timer, pause_us, 0);
        return;
    }
    dispatch(n, s);
}

/* Send s (its path chosen) to its NIC: queue it here or hop. */
static void dispatch(rd_nic_t *n, te_slice_t *s)
{
    if (RS(s)->lnic == n->idx) {
        enqueue(n, s);
        return;
    }
    rd_nic_t *other = &n->t->nics[RS(s)->lnic];
    RS(s)->next = NULL;
    s->msg.fn = nic_submit_msg;
    if (mc_reactor_post(other->r, &s->msg) != MC_OK)
        te_slice_done(s, MC_ERR_CANCELED);
}

/* Deferred retries that are due go; the timer is re-armed for the rest. */
static void on_retry_timer(mc_timer_t *tm, void *arg)
{
    rd_nic_t *n = arg;
    (void)tm;
    uint64_t now = mc_now_ns(), next = 0;
    te_slice_t *due = NULL, **pp = &n->deferred;
    while (*pp != NULL) {
        te_slice_t *s = *pp;
        if (RS(s)->due_ns <= now) {
            *pp = RS(s)->next;
            RS(s)->next = due;
            due = s;
        } else {
            if (next == 0 || RS(s)->due_ns < next)
                next = RS(s)->due_ns;
            pp = &RS(s)->next;
        }
    }
    if (next != 0)
        mc_timer_start(&n->retry_timer, (next - now) / 1000 + 1, 0);
    while (due != NULL) {
        te_slice_t *s = due;
        due = RS(s)->next;
        dispatch(n, s);
    }
    rd_flush_dirty(n);
}

void rd_deferred_cancel(rd_nic_t *n)
{
    while (n->deferred != NULL) {
        te_slice_t *s = n->deferred;
        n->deferred = RS(s)->next;
        te_slice_done(s, MC_ERR_CANCELED);
    }
}

/* The pending slices that fit: one chain per QP, QPs in turn, each chain
 * bounded by the QP's free depth and the CQ's free entries. */
void rd_ep_flush(rd_ep_t *ep)
{
    rd_nic_t *n = ep->nic;
    rd_transport_t *t = n->t;
    if (ep->state != EP_CONNECTED || !ep->peer_ready || ep->npending == 0)
        return; /* waiting: the connection, or the active side's RDMA_READY */
    rv_send_wr_t wr[64];
    int posted = 0;
    while (ep->npending > 0) {
        unsigned q = ep->next_qp, tries = 0;
        while (ep->depth[q] >= n->qp_wr && tries++ < ep->nqp)
            q = (q + 1) % ep->nqp;
        if (ep->depth[q] >= n->qp_wr)
            break; /* every QP full: the pending queue waits for completions */
        uint32_t cq_room = t->max_cqe - n->cq_outstanding;
        if (cq_room == 0)
            break;
        ep->next_qp = (q + 1) % ep->nqp;
        /* spread what is pending evenly over the QPs */
        uint32_t count = (ep->npending + ep->nqp - 1) / ep->nqp;
        if (count > n->qp_wr - ep->depth[q])
            count = n->qp_wr - ep->depth[q];
        if (count > cq_room)
            count = cq_room;
        if (count > 64)
            count = 64;
        te_slice_t *s = ep->pend_head;
        for (uint32_t i = 0; i < count; i++, s = RS(s)->next) {
            rv_send_wr_t *w = &wr[i];
            w->next = i + 1 < count ? &wr[i + 1] : NULL;
            w->wr_id = (uint64_t)(uintptr_t)s;
            w->local_addr = (uint64_t)(uintptr_t)s->local;
            w->remote_addr = s->remote;
            w->length = (uint32_t)s->len;
            w->lkey = RS(s)->lkey;
            w->rkey = RS(s)->rkey;
            w->opcode = s->opcode == MC_TE_WRITE ? RV_WR_RDMA_WRITE : RV_WR_RDMA_READ;
            w->signaled = 1;
            RS(s)->qp = (uint8_t)q;
        }
        if (ep->outstanding == 0)
            ep->progress_ns = mc_now_ns(); /* the watchdog measures from here */
        ep->depth[q] += count;
        ep->outstanding += count;
        n->cq_outstanding += count;
        rv_send_wr_t *bad = NULL;
        mc_status_t st = t->v->post_send(ep->qp[q], wr, &bad);
        uint32_t ok = st == MC_OK ? count : (uint32_t)(bad - wr);
        /* the posted ones leave the pending queue */
        for (uint32_t i = 0; i < ok; i++) {
            ep->pend_head = RS(ep->pend_head)->next;
            ep->npending--;
        }
        if (ep->pend_head == NULL)
            ep->pend_tail = NULL;
        posted += (int)ok;
        if (st != MC_OK) {
            uint32_t back = count - ok;
            ep->depth[q] -= back;
            ep->outstanding -= back;
            n->cq_outstanding -= back;
            if (st == MC_ERR_LIMIT)
                break; /* the QP is fuller than we count: wait for completions */
            MC_WARN(RDMA, "%s: post to %s@%s failed: %s", n->name, ep->peer, ep->peer_nic,
                    mc_status_str(st));
            if (posted)
                rd_poll_kick(n);
            rd_ep_close(ep, MC_ERR_ENDPOINT, 1); /* the rest is retried elsewhere */
            return;
        }
    }
    if (posted)
        rd_poll_kick(n);
}

/* One completion. s may be freed by te_slice_done: read it first. */
static void complete(rd_nic_t *n, const rv_wc_t *wc)
{
    te_slice_t *s = (te_slice_t *)(uintptr_t)wc->wr_id;
    rd_ep_t *ep = RS(s)->ep;
    if (n->t->slice_timeout_ms != 0)
        ep->progress_ns = mc_now_ns();
    ep->depth[RS(s)->qp]--;
    ep->outstanding--;
    n->cq_outstanding--;
    if (wc->status == RV_WC_SUCCESS) {
        atomic_fetch_add_explicit(&n->bytes, s->len, memory_order_relaxed);
        atomic_fetch_add_explicit(&n->slices, 1, memory_order_relaxed);
        te_slice_done(s, MC_OK);
        if (ep->npending > 0)
            rd_mark_dirty(ep);
        else if (ep->state == EP_CLOSING)
            rd_ep_maybe_free(ep);
        return;
    }
    mc_status_t cause = wc->status == RV_WC_WR_FLUSH_ERR ? ep->cause : wc_cause(wc->status);
    if (wc->status != RV_WC_WR_FLUSH_ERR) {
        atomic_fetch_add_explicit(&n->errors, 1, memory_order_relaxed);
        MC_WARN(RDMA, "%s: %s to %s@%s completed with %s", n->name,
                s->opcode == MC_TE_WRITE ? "write" : "read", ep->peer, ep->peer_nic,
                rv_wc_status_str(wc->status));
        if (wc->status == RV_WC_RETRY_EXC_ERR) {
            rv_dev_info_t info;
            if (n->t->v->query(n->ctx, &info) == MC_OK && !info.port_active) {
                MC_WARN(RDMA, "%s: port is down: using other NICs for 1 s", n->name);
                n->down_until_ns = mc_now_ns() + 1000000000u;
            }
        }
    }
    /* rd_ep_close frees ep when nothing points at it any more (this was its
     * last WR and no DISCONNECT could be sent): ep is not touched after it */
    int closing = ep->state == EP_CLOSING;
    if (!closing)
        rd_ep_close(ep, cause, 1);
    rd_slice_retry(n, s, cause == MC_OK ? MC_ERR_ENDPOINT : cause);
    if (closing)
        rd_ep_maybe_free(ep);
}

/* Completions wc[0..k) just polled (k = the poll's result), then whatever
 * else the CQ holds. The number reaped. */
static int reap(rd_nic_t *n, rv_wc_t *wc, int k)
{
    int total = 0;
    for (;;) {
        if (k <= 0) {
            if (k < 0)
                MC_ERROR(RDMA, "%s: polling the CQ failed: %s", n->name,
                         mc_status_str((mc_status_t)k));
            break;
        }
        for (int i = 0; i < k; i++)
            complete(n, &wc[i]);
        total += k;
        if (k < RD_POLL_BATCH)
            break;
        k = n->t->v->poll_cq(n->cq, RD_POLL_BATCH, wc);
    }
    if (total > 0)
        rd_flush_dirty(n);
    return total;
}

static int poll_cq(rd_nic_t *n)
{
    rv_wc_t wc[RD_POLL_BATCH];
    return reap(n, wc, n->t->v->poll_cq(n->cq, RD_POLL_BATCH, wc));
}

void rd_drain(rd_nic_t *n, uint64_t timeout_us)
{
    uint64_t end = mc_now_us() + timeout_us;
    while (n->cq_outstanding > 0 && mc_now_us() < end) {
        if (poll_cq(n) == 0)
            usleep(100);
    }
    if (n->cq_outstanding > 0)
        MC_WARN(RDMA, "%s: %u WRs still outstanding at shutdown", n->name, n->cq_outstanding);
}

/* Back to event mode: arm the channel, then look once more (a completion
 * that came before the arming raises no event). */
static void to_event_mode(rd_nic_t *n)
{
    if (n->polling) {
        mc_timer_stop(&n->poll_timer);
        n->polling = 0;
    }
    n->t->v->req_notify(n->cq);
    if (poll_cq(n) > 0 && n->cq_outstanding > 0)
        rd_poll_kick(n);
}

void rd_poll_kick(rd_nic_t *n)
{
    if (n->t->busy_poll_us == 0 || n->polling)
        return;
    n->polling = 1;
    n->busy_until_ns = mc_now_ns() + (uint64_t)n->t->busy_poll_us * 1000;
    /* period 0: once per loop iteration, after the I/O ready in it */
    mc_timer_start(&n->poll_timer, 0, 1);
}

/* A busy poll that found completions, or ends the busy period. Its own
 * function (never inlined) so that perf/rdma_callgrind.sh can count this
 * work apart from the polls that found nothing (the spinning, whose number
 * depends on how long the NIC takes, not on the slices). */
static __attribute__((noinline)) void poll_work(rd_nic_t *n, rv_wc_t *wc, int k)
{
    if (reap(n, wc, k) > 0)
        n->busy_until_ns = mc_now_ns() + (uint64_t)n->t->busy_poll_us * 1000;
    if (n->cq_outstanding == 0 || mc_now_ns() > n->busy_until_ns)
        to_event_mode(n);
}

/* Every loop iteration while busy (a period-0 timer). */
static void on_poll_timer(mc_timer_t *tm, void *arg)
{
    rd_nic_t *n = arg;
    rv_wc_t wc[RD_POLL_BATCH];
    (void)tm;
    int k = n->t->v->poll_cq(n->cq, RD_POLL_BATCH, wc);
    if (k != 0 || n->cq_outstanding == 0 || mc_now_ns() > n->busy_until_ns)
        poll_work(n, wc, k);
}

static void on_cq_event(evutil_socket_t fd, short what, void *arg)
{
    rd_nic_t *n = arg;
    (void)fd;
    (void)what;
    mc_reactor_t *saved = mc_reactor_enter(n->r);
    n->t->v->cq_event(n->cq);
    poll_cq(n);
    if (n->cq_outstanding > 0 && n->t->busy_poll_us > 0)
        rd_poll_kick(n);
    else
        to_event_mode(n);
    mc_reactor_leave(saved);
}

/* Port events: a port that goes down is skipped (its slices go to other
 * NICs at once, without waiting for error completions) until it is up. */
static void republish_on_r0(mc_reactor_t *r, void *arg, mc_status_t st)
{
    mc_te_t *te = arg;
    (void)r;
    if (st == MC_OK && !atomic_load(&te->stopping))
        te_publish_async(te);
}

/* The port's facts again (its LID or GID table changed, or it came back):
 * a new GID or LID is published, so peers reach us at the new address
 * (their endpoints to the old one fail and are made again). */
static void nic_requery(rd_nic_t *n, const char *why)
{
    rv_dev_info_t info;
    if (n->t->v->query(n->ctx, &info) != MC_OK)
        return;
    int changed = memcmp(info.gid, n->info.gid, 16) != 0 || info.lid != n->info.lid ||
                  info.gid_index != n->info.gid_index;
    pthread_mutex_lock(&n->info_mu);
    n->info = info;
    pthread_mutex_unlock(&n->info_mu);
    atomic_fetch_add(&n->requeries, 1);
    if (!changed)
        return;
    char gs[RD_GID_STR_MAX];
    if (info.gid_index < 0) {
        MC_WARN(RDMA,
                "%s port %u: %s: no usable GID any more (%s): its slices go to the other "
                "NICs",
                n->name, info.port, why, info.gid_why);
        n->down_until_ns = UINT64_MAX;
    } else {
        MC_INFO(RDMA, "%s port %u: %s: now GID index %d %s (%s), LID %u: publishing it", n->name,
                info.port, why, info.gid_index, rd_gid_str(info.gid, gs, sizeof(gs)),
                rd_gid_type_str(info.gid_type), info.lid);
    }
    mc_te_t *te = n->t->te;
    if (mc_reactor_call(te->rs[0], republish_on_r0, te) != MC_OK)
        MC_DEBUG(RDMA, "%s: the engine stops: not re-publishing", n->name);
}

static void on_async_event(evutil_socket_t fd, short what, void *arg)
{
    rd_nic_t *n = arg;
    (void)fd;
    (void)what;
    mc_reactor_t *saved = mc_reactor_enter(n->r);
    rv_async_event_t ev;
    while (n->t->v->async_event(n->ctx, &ev)) {
        if (ev.port != 0 && ev.port != n->info.port) {
            MC_DEBUG(RDMA, "%s: event %d for port %u (we use port %u): ignored", n->name, ev.type,
                     ev.port, n->info.port);
            continue;
        }
        switch (ev.type) {
        case RV_EV_PORT_ERR:
        case RV_EV_DEVICE_FATAL:
            if (n->down_until_ns != UINT64_MAX)
                MC_WARN(RDMA, "%s: %s: its slices go to the other NICs", n->name,
                        ev.type == RV_EV_PORT_ERR ? "port down" : "device failed");
            n->down_until_ns = UINT64_MAX;
            break;
        case RV_EV_PORT_ACTIVE:
            if (n->down_until_ns != 0)
                MC_INFO(RDMA, "%s: port active again", n->name);
            n->down_until_ns = 0;
            nic_requery(n, "port active again");
            break;
        case RV_EV_LID_CHANGE:
            nic_requery(n, "LID changed");
            break;
        case RV_EV_GID_CHANGE:
            nic_requery(n, "GID table changed");
            break;
        default:
            break;
        }
    }
    mc_reactor_leave(saved);
}

/* MC_SLICE_TIMEOUT: an endpoint with WRs outstanding and no completion for
 * that long is stuck (a peer that vanished: on hardware its QPs retry for
 * timeout x retry_cnt, which MC_IB_TIMEOUT may make minutes). It is closed
 * with MC_ERR_TIMEOUT: its QPs go to ERR, what was posted flushes, and each
 * slice is retried elsewhere or, past its own deadline, fails TIMEOUT. */
static uint64_t watchdog_period_us(const rd_transport_t *t)
{
    uint64_t us = (uint64_t)t->slice_timeout_ms * 1000 / 4;
    return us < 10000 ? 10000 : us;
}

static void on_watchdog(mc_timer_t *tm, void *arg)
{
    rd_nic_t *n = arg;
    (void)tm;
    uint64_t now = mc_now_ns(), limit = (uint64_t)n->t->slice_timeout_ms * 1000000u;
    rd_ep_t *stuck[16];
    unsigned k = 0;
    size_t i;
    mc_hnode_t *h;
    MC_HMAP_FOREACH(&n->eps, i, h)
    {
        rd_ep_t *ep = MC_CONTAINER_OF(h, rd_ep_t, hnode);
        if (k < 16 && ep->state == EP_CONNECTED && ep->outstanding > 0 &&
            now - ep->progress_ns > limit)
            stuck[k++] = ep;
    }
    for (unsigned j = 0; j < k; j++) { /* closing edits the pool: after the walk */
        MC_WARN(RDMA,
                "%s: endpoint to %s@%s: %u WR(s) and no completion for %u ms "
                "(MC_SLICE_TIMEOUT): closing it",
                stuck[j]->nic->name, stuck[j]->peer, stuck[j]->peer_nic, stuck[j]->outstanding,
                n->t->slice_timeout_ms);
        rd_ep_close(stuck[j], MC_ERR_TIMEOUT, 1);
    }
    if (k > 0)
        rd_flush_dirty(n);
}

mc_status_t rd_nic_events_start(rd_nic_t *n)
{
    const mc_rdma_verbs_ops_t *v = n->t->v;
    int afd = v->async_fd(n->ctx);
    if (afd >= 0) {
        n->async_ev =
            event_new(mc_reactor_base(n->r), afd, EV_READ | EV_PERSIST, on_async_event, n);
        if (n->async_ev == NULL || event_add(n->async_ev, NULL) != 0)
            return MC_ERR_INTERNAL_ERROR;
    }
    n->cq_ev =
        event_new(mc_reactor_base(n->r), v->cq_fd(n->cq), EV_READ | EV_PERSIST, on_cq_event, n);
    if (n->cq_ev == NULL || event_add(n->cq_ev, NULL) != 0)
        return MC_ERR_INTERNAL_ERROR;
    if (mc_timer_init(&n->poll_timer, n->r, on_poll_timer, n) != MC_OK ||
        mc_timer_init(&n->retry_timer, n->r, on_retry_timer, n) != MC_OK ||
        mc_timer_init(&n->watchdog, n->r, on_watchdog, n) != MC_OK)
        return MC_ERR_NOMEM;
    if (n->t->slice_timeout_ms != 0)
        mc_timer_start(&n->watchdog, watchdog_period_us(n->t), 1);
    return v->req_notify(n->cq);
}

void rd_nic_events_stop(rd_nic_t *n)
{
    if (n->async_ev != NULL)
        event_free(n->async_ev);
    n->async_ev = NULL;
    if (n->cq_ev != NULL)
        event_free(n->cq_ev);
    n->cq_ev = NULL;
    mc_timer_fini(&n->poll_timer);
    mc_timer_fini(&n->retry_timer);
    mc_timer_fini(&n->watchdog);
}
