/*
 * batch.c - batches, tasks and slices; completion accounting; the local
 * transport (memcpy when the target is this process).
 *
 * A task finishes when its last slice does (task->remaining reaches 0); the
 * batch is idle when tasks_done catches up with ntasks. ntasks grows before
 * any slice of a submit is posted, so a completion can never see a
 * half-submitted batch as idle. Slices of one submit are allocated in one
 * chunk that lives until the batch is freed: messages and RPC callbacks point
 * into it.
 *
 * Each request goes over the first installed transport of the table
 * (transport.h) that can reach its segment; one that cannot carry GPU
 * memory is passed over for a request that touches some.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "transport/cuda.h"
#include "transport/te_int.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

mc_status_t mc_te_batch_alloc(mc_te_t *te, size_t capacity, mc_te_batch_t **out)
{
    if (capacity == 0 || capacity > (1u << 24))
        return MC_ERR_INVALID_ARGUMENT;
    mc_te_batch_t *b = MC_NEW(mc_te_batch_t);
    if (b == NULL)
        return MC_ERR_NOMEM;
    b->tasks = mc_calloc(capacity, sizeof(*b->tasks));
    if (b->tasks == NULL) {
        mc_free(b);
        return MC_ERR_NOMEM;
    }
    b->te = te;
    b->cap = capacity;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    *out = b;
    return MC_OK;
}

void te_batch_allow_unregistered(mc_te_batch_t *b)
{
    b->local_unreg_ok = !te_needs_local_reg(b->te);
}

static int batch_idle(mc_te_batch_t *b)
{
    return atomic_load_explicit(&b->tasks_done, memory_order_acquire) ==
           atomic_load_explicit(&b->ntasks, memory_order_acquire);
}

/* Where a batch's callback is (b->cb_posted; changed under mu only). The
 * batch stays busy from the moment its callback is due until it returned:
 * batch_wait wakes as the last task finishes, and a free from that thread
 * must not pull the batch from under a callback that is about to run or
 * running. */
enum {
    CB_IDLE = 0, /* none due */
    CB_POSTED,   /* in reactor 0's mailbox (cb_msg); it will report any later idle too */
    CB_RUNNING,  /* running on some reactor thread */
    CB_AGAIN,    /* running, and the batch went idle again meanwhile: run it once more */
};

/* The batch whose callback this thread is running, and whether that
 * callback freed it (the free is done when the callback returns). */
static _Thread_local mc_te_batch_t *cb_batch;
static _Thread_local int cb_batch_freed;

static void batch_release(mc_te_batch_t *b);

mc_status_t mc_te_batch_free(mc_te_batch_t *b)
{
    if (b == NULL)
        return MC_OK;
    /* Completions update the batch under mu (te_slice_done): checked under
     * it, an idle batch with no callback due has nobody left touching it. */
    pthread_mutex_lock(&b->mu);
    int own = cb_batch == b; /* from inside its own callback */
    int busy = !batch_idle(b) || (!own && atomic_load(&b->cb_posted) != CB_IDLE);
    pthread_mutex_unlock(&b->mu);
    if (busy)
        return MC_ERR_BATCH_BUSY;
    if (own) {
        cb_batch_freed = 1;
        return MC_OK;
    }
    batch_release(b);
    return MC_OK;
}

static void batch_release(mc_te_batch_t *b)
{
    te_chunk_t *c = b->chunks;
    while (c != NULL) {
        te_chunk_t *next = c->next;
        mc_free(c);
        c = next;
    }
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    mc_free(b->tasks);
    mc_free(b);
}

void mc_te_batch_set_callback(mc_te_batch_t *b, mc_te_batch_cb_t cb, void *arg)
{
    b->cb = cb;
    b->cb_arg = arg;
}

static mc_te_state_t state_of_error(int err)
{
    if (err == MC_ERR_RPC_TIMEOUT || err == MC_ERR_TIMEOUT)
        return MC_TE_TIMEOUT;
    if (err == MC_ERR_CANCELED)
        return MC_TE_CANCELED;
    return MC_TE_FAILED;
}

mc_status_t mc_te_task_status(mc_te_batch_t *b, size_t task, mc_te_status_t *out)
{
    if (task >= atomic_load_explicit(&b->ntasks, memory_order_acquire)) {
        out->state = MC_TE_INVALID;
        out->transferred = 0;
        out->error = MC_ERR_INVALID_ARGUMENT;
        return MC_ERR_INVALID_ARGUMENT;
    }
    te_task_t *t = &b->tasks[task];
    uint32_t rem = atomic_load_explicit(&t->remaining, memory_order_acquire);
    int err = atomic_load_explicit(&t->error, memory_order_acquire);
    out->transferred = atomic_load_explicit(&t->bytes, memory_order_relaxed);
    out->error = (mc_status_t)err;
    if (rem > 0)
        out->state = MC_TE_WAITING;
    else
        out->state = err != 0 ? state_of_error(err) : MC_TE_COMPLETED;
    return MC_OK;
}

mc_status_t mc_te_batch_status(mc_te_batch_t *b, mc_te_status_t *out)
{
    size_t n = atomic_load_explicit(&b->ntasks, memory_order_acquire);
    out->state = MC_TE_COMPLETED;
    out->transferred = 0;
    out->error = MC_OK;
    int waiting = 0;
    for (size_t i = 0; i < n; i++) {
        mc_te_status_t ts;
        mc_te_task_status(b, i, &ts);
        out->transferred += ts.transferred;
        if (ts.state == MC_TE_WAITING)
            waiting = 1;
        else if (ts.state != MC_TE_COMPLETED && out->error == MC_OK) {
            out->error = ts.error;
            out->state = ts.state;
        }
    }
    if (waiting)
        out->state = MC_TE_WAITING;
    return MC_OK;
}

/* Run the callback (cb_posted is CB_RUNNING), again while the batch went
 * idle once more during the run; then the batch is free to go. */
static void run_callback(mc_te_batch_t *b)
{
    mc_te_batch_t *saved_batch = cb_batch;
    int saved_freed = cb_batch_freed;
    for (;;) {
        mc_te_status_t st;
        mc_te_batch_status(b, &st);
        cb_batch = b;
        cb_batch_freed = 0;
        b->cb(b->cb_arg, b, &st);
        int freed = cb_batch_freed;
        cb_batch = saved_batch;
        cb_batch_freed = saved_freed;
        if (freed) {
            batch_release(b);
            return;
        }
        pthread_mutex_lock(&b->mu);
        int again = atomic_load(&b->cb_posted) == CB_AGAIN && batch_idle(b);
        atomic_store(&b->cb_posted, again ? CB_RUNNING : CB_IDLE);
        pthread_mutex_unlock(&b->mu);
        if (!again)
            return;
    }
}

static void cb_msg(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    mc_te_batch_t *b = MC_CONTAINER_OF(msg, mc_te_batch_t, cb_msg);
    (void)r;
    (void)st;
    pthread_mutex_lock(&b->mu);
    atomic_store(&b->cb_posted, CB_RUNNING);
    pthread_mutex_unlock(&b->mu);
    run_callback(b);
}

/* Set while a thread is inside mc_te_submit: callbacks must not run there. */
static _Thread_local int in_submit;

/* A task finished: counted for /metrics (te_metrics). */
static void count_task(mc_te_t *te, te_task_t *t)
{
    unsigned tp = t->tp < TE_TP_COUNT ? t->tp : TE_TP_TCP;
    if (atomic_load_explicit(&t->error, memory_order_relaxed) == 0) {
        atomic_fetch_add_explicit(&te->xfer_ok[tp], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&te->xfer_bytes[tp],
                                  atomic_load_explicit(&t->bytes, memory_order_relaxed),
                                  memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&te->xfer_failed[tp], 1, memory_order_relaxed);
    }
    uint64_t now = mc_now_us();
    mc_prom_hist_observe_us(&te->xfer_lat[tp], now > t->start_us ? now - t->start_us : 0);
}

/* One slice finished with st. Any thread. */
void te_slice_done(te_slice_t *s, mc_status_t st)
{
    te_task_t *t = s->task;
    mc_te_batch_t *b = s->b;
    if (st == MC_OK) {
        atomic_fetch_add_explicit(&t->bytes, s->len, memory_order_relaxed);
    } else {
        int zero = 0;
        atomic_compare_exchange_strong(&t->error, &zero, (int)st);
    }
    if (atomic_fetch_sub_explicit(&t->remaining, 1, memory_order_acq_rel) != 1)
        return;
    count_task(b->te, t);
    /* The task finished. A task that is not the last one unfinished is
     * counted without mu: the batch stays busy (ntasks only grows), so
     * nobody frees it, waits on it or calls back, and b is not touched
     * after the count. */
    size_t d = atomic_load_explicit(&b->tasks_done, memory_order_relaxed);
    while (d + 1 < atomic_load_explicit(&b->ntasks, memory_order_acquire)) {
        if (atomic_compare_exchange_weak_explicit(&b->tasks_done, &d, d + 1, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return;
    }
    /* Possibly the last: everything below that touches the batch happens
     * under mu, so mc_te_batch_free (which checks under mu) never frees it
     * under our feet; a callback made due here keeps it busy until it ran. */
    pthread_mutex_lock(&b->mu);
    size_t done = atomic_fetch_add_explicit(&b->tasks_done, 1, memory_order_acq_rel) + 1;
    int idle = done == atomic_load_explicit(&b->ntasks, memory_order_acquire);
    int direct = 0;
    if (idle && b->cb != NULL) {
        int cs = atomic_load(&b->cb_posted);
        if (cs == CB_RUNNING) {
            atomic_store(&b->cb_posted, CB_AGAIN);
        } else if (cs == CB_IDLE && !in_submit && te_on_reactor(b->te)) {
            atomic_store(&b->cb_posted, CB_RUNNING);
            direct = 1;
        } else if (cs == CB_IDLE) {
            /* inside submit, or off the reactors: run it from reactor 0 */
            atomic_store(&b->cb_posted, CB_POSTED);
            b->cb_msg.fn = cb_msg;
            if (mc_reactor_post(b->te->rs[0], &b->cb_msg) != MC_OK)
                atomic_store(&b->cb_posted, CB_IDLE);
        } /* CB_POSTED, CB_AGAIN: the run that is due reports this idle too */
    }
    if (idle)
        pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (direct)
        run_callback(b);
}

/* Slices for a request: slice_size each, but a tail of up to a quarter slice
 * rides with the previous slice instead of travelling alone. */
static size_t slice_count(uint64_t len, uint64_t slice)
{
    if (slice == UINT64_MAX)
        return len > 0;                /* never cut */
    uint64_t last = slice + slice / 4; /* the most the last slice may carry */
    if (len <= last)
        return len > 0;
    /* k full slices until at most `last` bytes are left, then that tail */
    return (size_t)((len - last + slice - 1) / slice) + 1;
}

/* Is addr inside a cuda:N buffer of ours? */
static int is_cuda(mc_te_t *te, const void *addr)
{
    pthread_rwlock_rdlock(&te->buf_lock);
    long i = te_buf_index(te, (uint64_t)(uintptr_t)addr);
    int cuda = i >= 0 && strncmp(te->bufs[i].location, "cuda:", 5) == 0;
    pthread_rwlock_unlock(&te->buf_lock);
    return cuda;
}

/* The first bad request a validation pass found: its index, status and
 * what to log (logged once, for the request reported). */
typedef struct bad_req {
    size_t i;
    mc_status_t st;
    enum { BAD_OP, BAD_LOCAL, BAD_LOCAL_TARGET, BAD_SEG, BAD_RANGE, BAD_CUDA } what;
    te_seg_t *seg;
    unsigned tp; /* BAD_CUDA: the transport that cannot */
} bad_req_t;

static mc_status_t bad_log(const bad_req_t *e, const mc_te_request_t *reqs)
{
    const mc_te_request_t *q = &reqs[e->i];
    switch (e->what) {
    case BAD_OP:
        MC_ERROR(TRANSPORT, "request %zu: bad opcode %d or zero length", e->i, (int)q->opcode);
        break;
    case BAD_LOCAL:
        MC_ERROR(TRANSPORT, "request %zu: local range %p+%llu is not registered", e->i, q->local,
                 (unsigned long long)q->length);
        break;
    case BAD_LOCAL_TARGET:
        MC_ERROR(TRANSPORT,
                 "request %zu: target range 0x%llx+%llu of the local segment is not registered",
                 e->i, (unsigned long long)q->remote, (unsigned long long)q->length);
        break;
    case BAD_SEG:
        MC_ERROR(TRANSPORT, "request %zu: unknown segment %llu", e->i,
                 (unsigned long long)q->segment);
        break;
    case BAD_RANGE:
        MC_ERROR(TRANSPORT, "request %zu: range 0x%llx+%llu is outside the buffers of segment '%s'",
                 e->i, (unsigned long long)q->remote, (unsigned long long)q->length, e->seg->name);
        break;
    case BAD_CUDA:
        MC_ERROR(TRANSPORT,
                 "request %zu: GPU memory cannot travel over %s to segment '%s' "
                 "(needs the rdma transport on both sides)",
                 e->i, te_transports[e->tp]->name, e->seg->name);
        break;
    }
    return e->st;
}

/* [addr, addr+len) inside local buffer *hint (a guess, updated), else found
 * by search. buf_lock held. The buffer's index or -1. */
static long local_find(mc_te_t *te, uint64_t addr, uint64_t len, long *hint)
{
    if (len == 0 || addr + len < addr)
        return -1;
    long i = *hint;
    if (i < 0 || (size_t)i >= te->nbufs || addr < te->bufs[i].addr ||
        addr - te->bufs[i].addr >= te->bufs[i].len) {
        i = te_buf_index(te, addr);
        if (i < 0)
            return -1;
        *hint = i;
    }
    return addr + len <= te->bufs[i].addr + te->bufs[i].len ? i : -1;
}

/* Pass 1, under buf_lock: opcodes, lengths and the local ranges (and the
 * target ranges of requests to the local segment). Stops at the first bad
 * request (*bad) and returns its index, else n. */
static size_t validate_local(mc_te_batch_t *b, const mc_te_request_t *reqs, size_t n,
                             bad_req_t *bad)
{
    mc_te_t *te = b->te;
    long hint = -1;
    size_t i;
    pthread_rwlock_rdlock(&te->buf_lock);
    for (i = 0; i < n; i++) {
        const mc_te_request_t *q = &reqs[i];
        *bad = (bad_req_t){.i = i, .st = MC_ERR_ADDRESS_NOT_REGISTERED};
        if ((q->opcode != MC_TE_READ && q->opcode != MC_TE_WRITE) || q->length == 0) {
            bad->st = MC_ERR_INVALID_ARGUMENT;
            bad->what = BAD_OP;
            break;
        }
        if (!(b->local_unreg_ok && q->local != NULL) &&
            local_find(te, (uint64_t)(uintptr_t)q->local, q->length, &hint) < 0) {
            bad->what = BAD_LOCAL;
            break;
        }
        if (q->segment == MC_TE_LOCAL_SEGMENT && local_find(te, q->remote, q->length, &hint) < 0) {
            bad->what = BAD_LOCAL_TARGET;
            break;
        }
    }
    pthread_rwlock_unlock(&te->buf_lock);
    return i;
}

/* Index in seg->bufs of the peer buffer holding [addr, addr+len), trying
 * *hint first; -1 when none. seg_lock held. */
static long seg_find(const te_seg_t *seg, uint64_t addr, uint64_t len, long *hint)
{
    if (len == 0 || addr + len < addr)
        return -1;
    long h = *hint;
    if (h >= 0 && (size_t)h < seg->nbufs && addr >= seg->bufs[h].addr &&
        addr + len <= seg->bufs[h].addr + seg->bufs[h].len)
        return h;
    for (size_t k = 0; k < seg->nbufs; k++)
        if (addr >= seg->bufs[k].addr && addr + len <= seg->bufs[k].addr + seg->bufs[k].len) {
            *hint = (long)k;
            return (long)k;
        }
    return -1;
}

/* The first installed transport from `from` on that reaches seg (NULL:
 * this process); seg_lock held. tcp reaches every peer, local this
 * process; TE_TP_COUNT when none does. */
static unsigned pick(mc_te_t *te, te_seg_t *seg, const mc_te_request_t *q, unsigned from)
{
    for (unsigned id = from; id < TE_TP_COUNT; id++)
        if (te_tp_on(te, id) && te_transports[id]->usable(te, seg, q->remote, q->length))
            return id;
    return TE_TP_COUNT;
}

/* Check every request and choose its transport; MC_OK or the first problem
 * (logged with its index). The common case takes buf_lock once, then
 * seg_lock once, for the whole submit; a request that needs a blocking
 * descriptor refresh (a stale segment, a range we do not know yet) drops
 * seg_lock for it. */
static mc_status_t validate(mc_te_batch_t *b, const mc_te_request_t *reqs, size_t n,
                            te_seg_t **segs, uint8_t *tps)
{
    mc_te_t *te = b->te;
    bad_req_t bad1, bad2;
    size_t upto = validate_local(b, reqs, n, &bad1); /* requests [0, upto) are fine locally */
    int on_reactor = te_on_reactor(te);
    int has_cuda = atomic_load_explicit(&te->has_cuda, memory_order_relaxed);
    te_seg_t *seg = NULL;
    mc_te_segment_t seg_id = MC_TE_LOCAL_SEGMENT;
    long hint = -1;
    int failed = 0;
    pthread_mutex_lock(&te->seg_lock);
    for (size_t i = 0; i < upto && !failed; i++) {
        const mc_te_request_t *q = &reqs[i];
        if (q->segment == MC_TE_LOCAL_SEGMENT) {
            segs[i] = NULL;
            tps[i] = TE_TP_LOCAL;
            continue;
        }
        bad2 = (bad_req_t){.i = i, .st = MC_ERR_ADDRESS_NOT_REGISTERED, .what = BAD_RANGE};
        if (q->segment != seg_id || seg == NULL) {
            seg = q->segment <= te->nsegs ? te->segs[q->segment - 1] : NULL;
            seg_id = q->segment;
            hint = -1;
            if (seg == NULL) {
                bad2.st = MC_ERR_INVALID_ARGUMENT;
                bad2.what = BAD_SEG;
                failed = 1;
                break;
            }
        }
        bad2.seg = seg;
        /* a lane could not reach it: it may have restarted elsewhere (with
         * the same addresses), so look it up again (blocking: off the
         * reactors only) */
        if (!on_reactor && atomic_load_explicit(&seg->stale, memory_order_relaxed)) {
            pthread_mutex_unlock(&te->seg_lock);
            if (atomic_exchange(&seg->stale, 0) && te_seg_refresh(te, seg) != MC_OK)
                atomic_store(&seg->stale, 1);
            pthread_mutex_lock(&te->seg_lock);
        }
        long k = seg_find(seg, q->remote, q->length, &hint);
        if (k < 0) {
            /* the peer may have registered more since we looked: look again
             * (blocking, so only off the reactors) */
            if (on_reactor || q->length == 0 || q->remote + q->length < q->remote) {
                failed = 1;
                break;
            }
            pthread_mutex_unlock(&te->seg_lock);
            mc_status_t rst = te_seg_refresh(te, seg);
            pthread_mutex_lock(&te->seg_lock);
            if (rst != MC_OK || (k = seg_find(seg, q->remote, q->length, &hint)) < 0) {
                failed = 1;
                break;
            }
        }
        unsigned tp = pick(te, seg, q, 0);
        /* tcp moves bytes with socket calls (and shm with memcpy), which GPU
         * memory is not reachable by: RDMA (GPUDirect) only */
        if (!(te_transports[tp]->flags & TE_TP_CAN_GPU)) {
            int cuda = strncmp(seg->bufs[k].location, "cuda:", 5) == 0;
            if (!cuda && has_cuda) {
                pthread_mutex_unlock(&te->seg_lock); /* is_cuda takes buf_lock */
                cuda = is_cuda(te, q->local);
                pthread_mutex_lock(&te->seg_lock);
            }
            unsigned alt = tp;
            while (cuda && alt < TE_TP_COUNT && !(te_transports[alt]->flags & TE_TP_CAN_GPU))
                alt = pick(te, seg, q, alt + 1);
            if (cuda && alt == TE_TP_COUNT) {
                bad2.st = MC_ERR_NOT_SUPPORTED;
                bad2.what = BAD_CUDA;
                bad2.tp = tp;
                failed = 1;
                break;
            }
            tp = alt;
        }
        segs[i] = seg;
        tps[i] = (uint8_t)tp;
    }
    pthread_mutex_unlock(&te->seg_lock);
    if (failed)
        return bad_log(&bad2, reqs);
    if (upto < n)
        return bad_log(&bad1, reqs);
    return MC_OK;
}

static uint64_t tp_slice_size(const mc_te_t *te, unsigned tp)
{
    uint64_t z = te_transports[tp]->slice_size;
    return z != 0 ? z : te->o.slice_size;
}

mc_status_t mc_te_submit(mc_te_batch_t *b, const mc_te_request_t *reqs, size_t n)
{
    mc_te_t *te = b->te;
    if (n == 0)
        return MC_OK;
    if (reqs == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (atomic_load(&te->stopping))
        return MC_ERR_CANCELED;
    size_t first = atomic_load_explicit(&b->ntasks, memory_order_relaxed);
    if (n > b->cap - first) {
        MC_ERROR(TRANSPORT, "batch of capacity %zu has %zu tasks: %zu more do not fit", b->cap,
                 first, n);
        return MC_ERR_TOO_MANY_REQUESTS;
    }
    te_seg_t *segs_small[64];
    uint8_t tps_small[64];
    te_seg_t **segs = segs_small;
    uint8_t *tps = tps_small;
    if (n > 64) {
        /* one allocation for both arrays */
        segs = mc_malloc(n * (sizeof(*segs) + sizeof(*tps)));
        if (segs == NULL)
            return MC_ERR_NOMEM;
        tps = (uint8_t *)(segs + n);
    }
    mc_status_t st = validate(b, reqs, n, segs, tps);
    size_t total = 0;
    te_chunk_t *chunk = NULL;
    if (st == MC_OK) {
        for (size_t i = 0; i < n; i++)
            total += slice_count(reqs[i].length, tp_slice_size(te, tps[i]));
        chunk = mc_malloc(sizeof(*chunk) + total * sizeof(te_slice_t));
        if (chunk == NULL)
            st = MC_ERR_NOMEM;
    }
    if (st != MC_OK) {
        if (segs != segs_small)
            mc_free(segs);
        return st;
    }
    chunk->n = total;
    chunk->next = b->chunks;
    b->chunks = chunk;

    /* Tasks first, counted before any slice can complete. */
    uint64_t now = mc_now_us();
    for (size_t i = 0; i < n; i++) {
        te_task_t *t = &b->tasks[first + i];
        atomic_store_explicit(&t->bytes, 0, memory_order_relaxed);
        atomic_store_explicit(&t->error, 0, memory_order_relaxed);
        t->start_us = now;
        t->tp = (uint8_t)tps[i];
        atomic_store_explicit(&t->remaining,
                              (uint32_t)slice_count(reqs[i].length, tp_slice_size(te, tps[i])),
                              memory_order_relaxed);
    }
    atomic_store_explicit(&b->ntasks, first + n, memory_order_release);

    /* Slices, handed to their transport request by request. Transports
     * that gather their posts (and send them in submit_end) take slices from
     * the chunk's front, the others from its back: a gathering transport's
     * slices of consecutive requests stay contiguous (tcp's trains span
     * requests) across, say, a local request between them. */
    in_submit = 1;
    te_submit_t sub;
    sub.used = 0;
    size_t front = 0, back = total;
    for (size_t i = 0; i < n; i++) {
        const mc_te_request_t *q = &reqs[i];
        te_task_t *t = &b->tasks[first + i];
        unsigned tp = tps[i];
        uint64_t off = 0, left = q->length, slice = tp_slice_size(te, tp);
        size_t ns = slice_count(q->length, slice);
        size_t k0 = te_transports[tp]->submit_end != NULL ? front : back - ns, k = k0;
        if (k0 == front)
            front += ns;
        else
            back -= ns;
        while (left > 0) {
            uint64_t take = slice == UINT64_MAX || left <= slice + slice / 4 ? left : slice;
            te_slice_t *s = &chunk->slices[k++];
            s->b = b;
            s->task = t;
            s->seg = segs[i];
            s->local = (uint8_t *)q->local + off;
            s->remote = q->remote + off;
            s->len = take;
            s->opcode = q->opcode;
            s->tp = tp;
            off += take;
            left -= take;
        }
        if (!(sub.used & (1u << tp))) {
            sub.used |= 1u << tp;
            memset(sub.priv[tp], 0, sizeof(sub.priv[tp]));
        }
        te_transports[tp]->post(te, &sub, &chunk->slices[k0], ns);
    }
    for (unsigned tp = 0; tp < TE_TP_COUNT; tp++)
        if ((sub.used & (1u << tp)) && te_transports[tp]->submit_end != NULL)
            te_transports[tp]->submit_end(te, &sub);
    in_submit = 0;
    if (segs != segs_small)
        mc_free(segs);
    return MC_OK;
}

mc_status_t mc_te_batch_wait(mc_te_batch_t *b, uint64_t timeout_us)
{
    if (te_on_reactor(b->te))
        return MC_ERR_STATE;
    struct timespec deadline = mc_timespec_in(CLOCK_REALTIME, timeout_us);
    pthread_mutex_lock(&b->mu);
    int rc = 0;
    while (!batch_idle(b) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&b->cv, &b->mu, &deadline);
    pthread_mutex_unlock(&b->mu);
    if (!batch_idle(b))
        return MC_ERR_TIMEOUT;
    mc_te_status_t st;
    mc_te_batch_status(b, &st);
    return st.state == MC_TE_COMPLETED ? MC_OK : st.error;
}

/* ------------------------------------------------------- local transport */

/* The target is this process: memmove, or cudaMemcpy when either side is
 * GPU memory. Requests are not cut: one slice each, done in the post. */
static void local_post(mc_te_t *te, te_submit_t *sub, te_slice_t *s, size_t n)
{
    (void)sub;
    for (size_t i = 0; i < n; i++) {
        void *remote = (void *)(uintptr_t)s[i].remote;
        void *dst = s[i].opcode == MC_TE_WRITE ? remote : s[i].local;
        const void *src = s[i].opcode == MC_TE_WRITE ? s[i].local : remote;
        mc_status_t cst = MC_OK;
        if (atomic_load_explicit(&te->has_cuda, memory_order_relaxed) &&
            (is_cuda(te, s[i].local) || is_cuda(te, remote)))
            cst = te_cuda_memcpy(dst, src, s[i].len);
        else
            memmove(dst, src, s[i].len);
        te_slice_done(&s[i], cst);
    }
}

static int local_usable(mc_te_t *te, te_seg_t *seg, uint64_t remote, uint64_t len)
{
    (void)te;
    (void)remote;
    (void)len;
    return seg == NULL;
}

const te_transport_ops_t te_local_ops = {
    .name = "local",
    .flags = TE_TP_BUILTIN | TE_TP_CAN_GPU,
    .usable = local_usable,
    .slice_size = UINT64_MAX,
    .post = local_post,
};
