/*
 * client_op.c - what every store-client operation shares (see client_int.h):
 * submission to reactor 0 and the live count, the staging buffer and its
 * FIFO wait queue, the cache of peer segments, transfer and RPC completions,
 * sync waiters; and the calls that are one master RPC each (exist, remove,
 * remove_by_regex, remove_all, batch_exist, batch_remove).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rpc/methods.h"
#include "store/client_int.h"
#include "store/master_client.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

/* --------------------------------------------------------------- basics */

mc_status_t store_check_key(const void *key, size_t klen)
{
    if (key == NULL || klen == 0 || klen > STORE_MAX_KEY || memchr(key, '\0', klen) != NULL)
        return MC_ERR_INVALID_KEY;
    return MC_OK;
}

int store_on_reactor(const mc_store_t *s)
{
    return te_on_reactor(s->te);
}

void store_live_inc(mc_store_t *s)
{
    pthread_mutex_lock(&s->live_mu);
    s->live++;
    pthread_mutex_unlock(&s->live_mu);
}

void store_live_dec(mc_store_t *s)
{
    pthread_mutex_lock(&s->live_mu);
    if (--s->live == 0)
        pthread_cond_broadcast(&s->live_cv);
    pthread_mutex_unlock(&s->live_mu);
}

static void op_msg(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    store_op_t *op = MC_CONTAINER_OF(msg, store_op_t, msg);
    (void)r;
    if (st != MC_OK)
        op->fail(op, MC_ERR_CANCELED);
    else
        op->step(op);
}

mc_status_t store_op_submit(store_op_t *op)
{
    mc_store_t *s = op->s;
    if (atomic_load(&s->closing))
        return MC_ERR_CANCELED;
    mc_list_init(&op->node);
    store_live_inc(s);
    op->msg.fn = op_msg;
    if (mc_reactor_post(s->r0, &op->msg) != MC_OK) {
        store_live_dec(s);
        return MC_ERR_CANCELED;
    }
    return MC_INPROGRESS;
}

void store_op_release(store_op_t *op, const char *what)
{
    store_stage_put(op->s, op);
    if (op->batch != NULL && mc_te_batch_free(op->batch) != MC_OK)
        MC_ERROR(CLIENT, "%s: transfer batch still busy at the end (leaked)", what);
}

void store_op_post(store_op_t *op)
{
    op->msg.fn = op_msg;
    if (mc_reactor_post(op->s->r0, &op->msg) != MC_OK)
        op->fail(op, MC_ERR_CANCELED); /* r0 is stopping: only close is left */
}

/* -------------------------------------------------------------- staging */

uint64_t store_stage_window(const mc_store_t *s, uint64_t len)
{
    uint64_t cap = s->stage_alloc != NULL ? mc_oalloc_capacity(s->stage_alloc) : 0;
    return len < cap ? len : cap;
}

/* stage_mu held. */
static int stage_take(mc_store_t *s, store_op_t *op, uint64_t want)
{
    mc_oalloc_handle_t h;
    if (mc_oalloc_alloc(s->stage_alloc, want, &h) != MC_OK)
        return 0;
    op->stage_h = h;
    op->stage = s->stage_base + h.offset;
    return 1;
}

int store_stage_try(mc_store_t *s, store_op_t *op, uint64_t want)
{
    if (s->stage_alloc == NULL || atomic_load(&s->stage_waiting) > 0)
        return 0;
    pthread_mutex_lock(&s->stage_mu);
    int ok = stage_take(s, op, want);
    pthread_mutex_unlock(&s->stage_mu);
    return ok;
}

mc_status_t store_stage_get(mc_store_t *s, store_op_t *op, uint64_t want)
{
    if (s->stage_alloc == NULL)
        return MC_ERR_STATE;
    if (want == 0 || want > mc_oalloc_capacity(s->stage_alloc))
        return MC_ERR_INVALID_PARAMS;
    if (mc_list_empty(&s->stage_queue)) {
        pthread_mutex_lock(&s->stage_mu);
        int ok = stage_take(s, op, want);
        pthread_mutex_unlock(&s->stage_mu);
        if (ok)
            return MC_OK;
    }
    /* FIFO: once someone waits, later operations queue behind it, so a
     * large window is not starved by a stream of small ones. */
    op->stage_want = want;
    mc_list_push_tail(&s->stage_queue, &op->node);
    atomic_fetch_add(&s->stage_waiting, 1);
    return MC_INPROGRESS;
}

/* r0: hand freed room to the queue, in order. */
static void stage_kick(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    mc_store_t *s = MC_CONTAINER_OF(msg, mc_store_t, kick_msg);
    (void)r;
    s->kick_posted = 0;
    if (st != MC_OK || atomic_load(&s->closing))
        return; /* close fails the queue */
    while (!mc_list_empty(&s->stage_queue)) {
        store_op_t *op = MC_CONTAINER_OF(s->stage_queue.next, store_op_t, node);
        pthread_mutex_lock(&s->stage_mu);
        int ok = stage_take(s, op, op->stage_want);
        pthread_mutex_unlock(&s->stage_mu);
        if (!ok)
            break;
        mc_list_del(&op->node);
        atomic_fetch_sub(&s->stage_waiting, 1);
        op->wait_st = MC_OK;
        op->step(op);
    }
}

void store_stage_put(mc_store_t *s, store_op_t *op)
{
    if (op->stage == NULL)
        return;
    pthread_mutex_lock(&s->stage_mu);
    mc_oalloc_free(s->stage_alloc, op->stage_h);
    pthread_mutex_unlock(&s->stage_mu);
    op->stage = NULL;
    /* Off r0 this only happens while closing, when the queue is failed. */
    if (atomic_load(&s->stage_waiting) > 0 && mc_reactor_is_current(s->r0) && !s->kick_posted) {
        s->kick_msg.fn = stage_kick;
        if (mc_reactor_post(s->r0, &s->kick_msg) == MC_OK)
            s->kick_posted = 1;
    }
}

void store_stage_cancel_all(mc_store_t *s)
{
    mc_list_t *n;
    while ((n = mc_list_pop_head(&s->stage_queue)) != NULL) {
        atomic_fetch_sub(&s->stage_waiting, 1);
        store_op_t *op = MC_CONTAINER_OF(n, store_op_t, node);
        op->fail(op, MC_ERR_CANCELED);
    }
}

/* ---------------------------------------------------------------- peers */

static peer_t *peer_find(mc_store_t *s, const char *name)
{
    for (mc_list_t *n = s->peers.next; n != &s->peers; n = n->next) {
        peer_t *p = MC_CONTAINER_OF(n, peer_t, node);
        if (strcmp(p->name, name) == 0)
            return p;
    }
    return NULL;
}

static void peer_open_cb(void *arg, mc_status_t st, mc_te_segment_t seg)
{
    peer_t *p = arg;
    mc_store_t *s = p->s;
    if (atomic_load(&s->closing)) {
        /* the waiters were failed already; store_peer_free_all frees p */
        p->state = PEER_OPEN;
        return;
    }
    mc_list_t waiters;
    mc_list_init(&waiters);
    mc_list_splice_tail(&waiters, &p->waiters);
    if (st == MC_OK) {
        p->state = PEER_OPEN;
        p->handle = seg;
    } else {
        /* not cached: the next operation that needs it tries again */
        mc_list_del(&p->node);
        mc_free(p);
    }
    mc_list_t *n;
    while ((n = mc_list_pop_head(&waiters)) != NULL) {
        store_op_t *op = MC_CONTAINER_OF(n, store_op_t, node);
        op->wait_st = st;
        op->opened = seg;
        op->step(op);
    }
}

mc_status_t store_peer_resolve(mc_store_t *s, store_op_t *op, const char *name, mc_te_segment_t *h)
{
    if (strcmp(name, mc_te_local_name(s->te)) == 0) {
        *h = MC_TE_LOCAL_SEGMENT;
        return MC_OK;
    }
    peer_t *p = peer_find(s, name);
    if (p != NULL && p->state == PEER_OPEN) {
        *h = p->handle;
        return MC_OK;
    }
    if (p == NULL) {
        if (strlen(name) >= sizeof(p->name))
            return MC_ERR_INVALID_ARGUMENT;
        p = MC_NEW(peer_t);
        if (p == NULL)
            return MC_ERR_NOMEM;
        p->s = s;
        p->state = PEER_OPENING;
        mc_list_init(&p->waiters);
        strcpy(p->name, name);
        mc_status_t st = te_open_segment_async(s->te, name, peer_open_cb, p);
        if (st != MC_INPROGRESS) {
            mc_free(p);
            return st;
        }
        mc_list_push_tail(&s->peers, &p->node);
    }
    mc_list_push_tail(&p->waiters, &op->node);
    return MC_INPROGRESS;
}

void store_peer_cancel_all(mc_store_t *s)
{
    for (mc_list_t *n = s->peers.next; n != &s->peers; n = n->next) {
        peer_t *p = MC_CONTAINER_OF(n, peer_t, node);
        mc_list_t *w;
        while ((w = mc_list_pop_head(&p->waiters)) != NULL) {
            store_op_t *op = MC_CONTAINER_OF(w, store_op_t, node);
            op->fail(op, MC_ERR_CANCELED);
        }
    }
}

void store_peer_free_all(mc_store_t *s)
{
    mc_list_t *n;
    while ((n = mc_list_pop_head(&s->peers)) != NULL)
        mc_free(MC_CONTAINER_OF(n, peer_t, node));
}

void store_peer_note(mc_store_t *s, const char *name, int suspect)
{
    for (unsigned i = 0; i < STORE_SUSPECTS; i++) {
        if (s->suspects[i].at_us != 0 && strcmp(s->suspects[i].name, name) == 0) {
            s->suspects[i].at_us = suspect ? mc_now_us() : 0;
            return;
        }
    }
    if (!suspect || strlen(name) >= sizeof(s->suspects[0].name))
        return;
    unsigned i = s->next_suspect++ % STORE_SUSPECTS;
    strcpy(s->suspects[i].name, name);
    s->suspects[i].at_us = mc_now_us();
}

int store_peer_suspect(const mc_store_t *s, const char *name)
{
    uint64_t now = mc_now_us();
    for (unsigned i = 0; i < STORE_SUSPECTS; i++)
        if (s->suspects[i].at_us != 0 && now - s->suspects[i].at_us < STORE_SUSPECT_US &&
            strcmp(s->suspects[i].name, name) == 0)
            return 1;
    return 0;
}

static void refresh_cb(void *arg, mc_status_t st)
{
    store_op_t *op = arg;
    op->wait_st = st;
    op->step(op);
}

mc_status_t store_seg_refresh(store_op_t *op, mc_te_segment_t h)
{
    return te_seg_refresh_async(op->s->te, h, refresh_cb, op);
}

int store_range_ok(mc_store_t *s, mc_te_segment_t h, uint64_t remote, uint64_t len)
{
    return te_segment_range_ok(s->te, h, remote, len);
}

void store_xfer_cb(void *arg, mc_te_batch_t *b, const mc_te_status_t *st)
{
    store_op_t *op = arg;
    if (st->state == MC_TE_COMPLETED)
        op->wait_st = MC_OK;
    else
        op->wait_st = st->error != MC_OK ? st->error : MC_ERR_TRANSFER_FAIL;
    if (op->harvest != NULL)
        op->harvest(op, b);
    /* From inside its callback the free takes effect when the callback
     * returns: nobody touches the batch after this. */
    mc_te_batch_free(b);
    op->batch = NULL;
    store_op_post(op);
}

mc_status_t store_xfer_submit(store_op_t *op, const mc_te_request_t *reqs, size_t n)
{
    mc_status_t st = mc_te_batch_alloc(op->s->te, n, &op->batch);
    if (st != MC_OK)
        return st;
    mc_te_batch_set_callback(op->batch, store_xfer_cb, op);
    te_batch_allow_unregistered(op->batch);
    st = mc_te_submit(op->batch, reqs, n);
    if (st != MC_OK) {
        mc_te_batch_free(op->batch);
        op->batch = NULL;
    }
    return st;
}

int store_inplace_ok(const mc_store_t *s)
{
    return !s->always_stage && !te_needs_local_reg(s->te);
}

int store_direct_ok(const mc_store_t *s, const void *p, uint64_t len)
{
    if (te_gpu_of(p) >= 0)
        return 0; /* GPU memory goes through a host bounce buffer (store_put/get) */
    return store_inplace_ok(s) || te_local_range_ok(s->te, p, len, 0);
}

/* ------------------------------------------------------------------ rpc */

/* Master calls a new leader may be asked again after the old one went away
 * with the call in flight: reads, and the calls that are idempotent at the
 * master (PutEnd of a complete object of the same client is OK; a PutEnd
 * whose PutStart record reached the journal completes the put there).
 * PutStart carries a put id (added in keep_for_resend): if the journal
 * already holds it, the new leader recognises the resend and answers with
 * the same replicas instead of OBJECT_ALREADY_EXISTS. Remove is not resent
 * (a second one reports OBJECT_NOT_FOUND for an object it did remove). A
 * NOT_LEADER answer is resent for every call (see resend_worthy). */
static int resendable(uint16_t method)
{
    switch (method) {
    case MC_RPC_GET_REPLICA_LIST:
    case MC_RPC_BATCH_GET_REPLICA_LIST:
    case MC_RPC_EXIST_KEY:
    case MC_RPC_BATCH_EXIST_KEY:
    case MC_RPC_PUT_START:
    case MC_RPC_BATCH_PUT_START:
    case MC_RPC_PUT_END:
    case MC_RPC_BATCH_PUT_END:
    case MC_RPC_PUT_REVOKE:
    case MC_RPC_BATCH_PUT_REVOKE:
    /* a client's own segments: an identical mount is OK, a second unmount
     * finds nothing (SEGMENT_NOT_FOUND, which the caller takes as done) */
    case MC_RPC_MOUNT_SEGMENT:
    case MC_RPC_REMOUNT_SEGMENT:
    case MC_RPC_UNMOUNT_SEGMENT:
        return 1;
    default:
        return 0;
    }
}

/* A call may go to the new leader: any call a master refused as a standby
 * (NOT_LEADER: it changed nothing, or - from a leader that was deposed while
 * the reply waited for the journal - a change that may not survive), and
 * the resendable ones when the master went away with the call in flight. */
int store_resend_worthy(uint16_t method, mc_status_t st)
{
    return st == MC_ERR_NOT_LEADER ||
           (resendable(method) &&
            (st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT || st == MC_ERR_SOCKET));
}

/* Outcomes that say "not this master" rather than anything about the call. */
int store_leader_trouble(mc_status_t st)
{
    return st == MC_ERR_NOT_LEADER || st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT ||
           st == MC_ERR_SOCKET;
}

static void op_rpc_cb(void *arg, const mc_rpc_resp_t *resp)
{
    store_op_t *op = arg;
    mc_store_t *s = op->s;
    if (op->rpc_method != 0 && store_resend_worthy(op->rpc_method, resp->status) &&
        !store_op_closing(op) && mc_now_us() + RETRY_TICK_US < op->rpc_deadline_us) {
        /* park it; the retry timer (or a new leader) sends it again */
        store_master_trouble(s);
        op->wait_st = resp->status;
        mc_list_push_tail(&s->retry, &op->node);
        if (s->retry_timer_ok && !mc_timer_armed(&s->retry_timer))
            mc_timer_start(&s->retry_timer, RETRY_TICK_US, 0);
        return;
    }
    if (op->rpc_method != 0) {
        mc_buf_fini(&op->rpc_body);
        op->rpc_method = 0;
    }
    if (store_leader_trouble(resp->status))
        store_master_trouble(s);
    op->wait_st = resp->status;
    if (resp->status == MC_OK && op->decode != NULL)
        op->decode(op, resp);
    op->step(op);
}

static void retry_give_up(store_op_t *op, mc_status_t st)
{
    mc_buf_fini(&op->rpc_body);
    op->rpc_method = 0;
    op->wait_st = st;
    op->step(op);
}

void store_retry_run(mc_store_t *s)
{
    mc_list_t todo;
    mc_list_init(&todo);
    mc_list_splice_tail(&todo, &s->retry);
    mc_list_t *n;
    uint64_t now = mc_now_us();
    while ((n = mc_list_pop_head(&todo)) != NULL) {
        store_op_t *op = MC_CONTAINER_OF(n, store_op_t, node);
        if (store_op_closing(op) || s->mcli == NULL) {
            retry_give_up(op, MC_ERR_CANCELED);
            continue;
        }
        if (now >= op->rpc_deadline_us) {
            retry_give_up(op, op->wait_st); /* the last outcome */
            continue;
        }
        mc_status_t st =
            mc_rpc_call(s->mcli, op->rpc_method, mc_buf_head(&op->rpc_body),
                        mc_buf_used(&op->rpc_body), op->rpc_deadline_us - now, op_rpc_cb, op);
        if (st != MC_INPROGRESS)
            retry_give_up(op, st);
    }
}

void store_retry_cancel_all(mc_store_t *s)
{
    mc_list_t *n;
    while ((n = mc_list_pop_head(&s->retry)) != NULL)
        retry_give_up(MC_CONTAINER_OF(n, store_op_t, node), MC_ERR_CANCELED);
}

/* A put id: unique enough among one client's unfinished puts of one key. */
uint64_t store_put_id(void)
{
    static _Atomic uint64_t ctr;
    uint64_t x = atomic_fetch_add(&ctr, 1) + 1;
    x ^= mc_now_ns() << 20;
    x *= 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 31);
}

/* Before a call ends: keep its body if a new leader may need it. */
static void keep_for_resend(store_op_t *op, uint16_t method, const void *body, size_t len)
{
    mc_store_t *s = op->s;
    op->rpc_method = 0;
    if (!s->ha)
        return;
    mc_buf_reset(&op->rpc_body);
    if ((method == MC_RPC_PUT_START || method == MC_RPC_BATCH_PUT_START) && body == NULL) {
        uint64_t id = 0;
        while (id == 0)
            id = store_put_id();
        if (mc_rpc_call_add_uint(s->mcli, MC_F_PUT_ID, id) != MC_OK)
            return; /* sent once, without an id: not resent after a failure */
    } else if (method == MC_RPC_PUT_START || method == MC_RPC_BATCH_PUT_START) {
        return; /* a prepared body has no id: not resendable */
    }
    mc_status_t st = body != NULL ? mc_buf_append(&op->rpc_body, body, len)
                                  : mc_rpc_call_copy_body(s->mcli, &op->rpc_body);
    if (st != MC_OK)
        return; /* sent once, like without discovery */
    op->rpc_method = method;
    op->rpc_deadline_us = mc_now_us() + s->cfg.rpc_timeout_us;
}

mc_status_t store_rpc_end(store_op_t *op, uint16_t method, store_decode_fn_t decode)
{
    mc_store_t *s = op->s;
    op->decode = decode;
    keep_for_resend(op, method, NULL, 0);
    mc_status_t st = mc_rpc_call_end(s->mcli, method, s->cfg.rpc_timeout_us, op_rpc_cb, op);
    if (st != MC_INPROGRESS && op->rpc_method != 0) {
        mc_buf_fini(&op->rpc_body);
        op->rpc_method = 0;
    }
    return st;
}

mc_status_t store_rpc_call(store_op_t *op, uint16_t method, const void *body, size_t len,
                           store_decode_fn_t decode)
{
    mc_store_t *s = op->s;
    op->decode = decode;
    keep_for_resend(op, method, body, len);
    mc_status_t st = mc_rpc_call(s->mcli, method, body, len, s->cfg.rpc_timeout_us, op_rpc_cb, op);
    if (st != MC_INPROGRESS && op->rpc_method != 0) {
        mc_buf_fini(&op->rpc_body);
        op->rpc_method = 0;
    }
    return st;
}

mc_status_t store_call_sync(mc_store_t *s, uint16_t method, const mc_buf_t *body, mc_buf_t *resp)
{
    return store_call_sync_timeout(s, method, body, resp, s->cfg.rpc_timeout_us);
}

mc_status_t store_call_resend(mc_store_t *s, uint16_t method, const mc_buf_t *body, mc_buf_t *resp,
                              uint64_t timeout_us, store_send_fn_t send, void *ctx)
{
    if (atomic_load(&s->closing))
        return MC_ERR_CANCELED;
    size_t keep = resp != NULL ? mc_buf_used(resp) : 0;
    uint64_t deadline = mc_now_us() + timeout_us;
    mc_status_t st;
    for (;;) {
        uint64_t now = mc_now_us();
        st = send(ctx, method, body, deadline > now ? deadline - now : 1, resp);
        if (!store_leader_trouble(st))
            break;
        store_master_trouble(s);
        /* with discovery, a read is asked again (of the new leader) while
         * time is left; see resendable() */
        if (!s->ha || !store_resend_worthy(method, st) || atomic_load(&s->closing) ||
            mc_now_us() + RETRY_TICK_US >= deadline)
            break;
        if (resp != NULL)
            resp->len = resp->off + keep;
        usleep(RETRY_TICK_US);
    }
    return st;
}

/* One try of store_call_sync: mcli's call, through r0. */
static mc_status_t send_mcli(void *ctx, uint16_t method, const mc_buf_t *body, uint64_t timeout_us,
                             mc_buf_t *resp)
{
    mc_store_t *s = ctx;
    return mc_rpc_call_sync(s->mcli, method, mc_buf_head(body), mc_buf_used(body), timeout_us,
                            resp);
}

mc_status_t store_call_sync_timeout(mc_store_t *s, uint16_t method, const mc_buf_t *body,
                                    mc_buf_t *resp, uint64_t timeout_us)
{
    if (store_on_reactor(s))
        return MC_ERR_STATE;
    mc_buf_t scratch = MC_BUF_INIT;
    mc_status_t st = store_call_resend(s, method, body, resp != NULL ? resp : &scratch, timeout_us,
                                       send_mcli, s);
    mc_buf_fini(&scratch);
    return st;
}

/* ---------------------------------------------------------------- waiters */

void store_waiter_init(store_waiter_t *w)
{
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->done = 0;
    w->result = 0;
}

int64_t store_waiter_wait(store_waiter_t *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return w->result;
}

static void waiter_done(store_waiter_t *w, int64_t v)
{
    pthread_mutex_lock(&w->mu);
    w->result = v;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void store_fanout_init(store_fanout_t *f)
{
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->left = 1; /* the waiter's own count, dropped by store_fanout_wait */
}

void store_fanout_add(store_fanout_t *f)
{
    pthread_mutex_lock(&f->mu);
    f->left++;
    pthread_mutex_unlock(&f->mu);
}

void store_fanout_cancel(store_fanout_t *f)
{
    pthread_mutex_lock(&f->mu);
    if (--f->left == 0)
        pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

void store_fanout_get_cb(void *arg, int64_t result)
{
    store_fanout_item_t *it = arg;
    *it->out = result;
    store_fanout_cancel(it->f);
}

/* ------------------------------------------------------------ scratch */

store_scratch_t *store_scratch_take(mc_store_t *s, size_t size)
{
    pthread_mutex_lock(&s->scratch_mu);
    store_scratch_t *sc = s->scratch_free;
    if (sc != NULL) {
        s->scratch_free = sc->next;
        s->scratch_kept -= sc->cap;
    }
    pthread_mutex_unlock(&s->scratch_mu);
    if (sc != NULL && sc->cap >= size)
        return sc;
    mc_free(sc); /* too small: one that fits replaces it */
    size_t cap = size < 4096 ? 4096 : size;
    sc = mc_malloc(sizeof(*sc) + cap);
    if (sc != NULL)
        sc->cap = cap;
    return sc;
}

void store_scratch_give(mc_store_t *s, store_scratch_t *sc)
{
    if (sc == NULL)
        return;
    pthread_mutex_lock(&s->scratch_mu);
    int keep = s->scratch_kept + sc->cap <= STORE_SCRATCH_KEEP;
    if (keep) {
        sc->next = s->scratch_free;
        s->scratch_free = sc;
        s->scratch_kept += sc->cap;
    }
    pthread_mutex_unlock(&s->scratch_mu);
    if (!keep)
        mc_free(sc);
}

void store_scratch_free_all(mc_store_t *s)
{
    store_scratch_t *sc;
    while ((sc = s->scratch_free) != NULL) {
        s->scratch_free = sc->next;
        mc_free(sc);
    }
    s->scratch_kept = 0;
}

void store_fanout_wait(store_fanout_t *f)
{
    pthread_mutex_lock(&f->mu);
    f->left--;
    while (f->left > 0)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

void store_waiter_status_cb(void *arg, mc_status_t st)
{
    waiter_done(arg, st);
}

void store_waiter_get_cb(void *arg, int64_t result)
{
    waiter_done(arg, result);
}

/* ------------------------------------------------- one-RPC operations */

/* Async exist/remove: one call on r0. */
typedef enum { RPC_OP_EXIST, RPC_OP_REMOVE } rpc_op_kind_t;

typedef struct rpc_op {
    store_op_t h;
    rpc_op_kind_t kind;
    int sent;
    int64_t exists;
    mc_buf_t body;
    mc_store_cb_t cb;
    void *arg;
} rpc_op_t;

static void rpc_op_fail(store_op_t *h, mc_status_t st)
{
    rpc_op_t *op = (rpc_op_t *)h;
    mc_store_t *s = h->s;
    op->cb(op->arg, st);
    mc_buf_fini(&op->body);
    mc_free(op);
    store_live_dec(s);
}

static void rpc_op_decode(store_op_t *h, const mc_rpc_resp_t *resp)
{
    rpc_op_t *op = (rpc_op_t *)h;
    if (mc_mcli_dec_int(resp->body, resp->body_len, MC_F_EXISTS, &op->exists) != MC_OK)
        h->wait_st = MC_ERR_PROTOCOL;
}

static void rpc_op_step(store_op_t *h)
{
    rpc_op_t *op = (rpc_op_t *)h;
    if (store_op_closing(h)) {
        rpc_op_fail(h, MC_ERR_CANCELED);
        return;
    }
    if (!op->sent) {
        op->sent = 1;
        mc_status_t st = store_rpc_call(
            h, op->kind == RPC_OP_EXIST ? MC_RPC_EXIST_KEY : MC_RPC_REMOVE, mc_buf_head(&op->body),
            mc_buf_used(&op->body), op->kind == RPC_OP_EXIST ? rpc_op_decode : NULL);
        if (st != MC_INPROGRESS)
            rpc_op_fail(h, st);
        return; /* waiting for the master's answer */
    }
    mc_status_t st = h->wait_st;
    if (st == MC_OK && op->kind == RPC_OP_EXIST)
        st = op->exists ? 1 : 0;
    rpc_op_fail(h, st);
}

static mc_status_t rpc_op_submit(mc_store_t *s, rpc_op_kind_t kind, const void *key, size_t klen,
                                 int force, mc_store_cb_t cb, void *arg)
{
    if (s == NULL || cb == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL) /* co-located: the service asks */
        return store_dummy_async(s, kind == RPC_OP_EXIST ? 3 : 2, key, klen, NULL, NULL, 0, force,
                                 NULL, cb, NULL, arg);
    mc_status_t st = store_check_key(key, klen);
    if (st != MC_OK)
        return st;
    rpc_op_t *op = MC_NEW(rpc_op_t);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->h.s = s;
    op->h.step = rpc_op_step;
    op->h.fail = rpc_op_fail;
    op->kind = kind;
    op->cb = cb;
    op->arg = arg;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &op->body);
    if (kind == RPC_OP_EXIST)
        mc_mcli_key(&w, key, klen);
    else
        mc_mcli_remove(&w, key, klen, force);
    st = w.err != MC_OK ? w.err : store_op_submit(&op->h);
    if (st != MC_INPROGRESS) {
        mc_buf_fini(&op->body);
        mc_free(op);
    }
    return st;
}

mc_status_t mc_store_exist_async(mc_store_t *s, const void *key, size_t klen, mc_store_cb_t cb,
                                 void *arg)
{
    return rpc_op_submit(s, RPC_OP_EXIST, key, klen, 0, cb, arg);
}

mc_status_t mc_store_remove_async(mc_store_t *s, const void *key, size_t klen, int force,
                                  mc_store_cb_t cb, void *arg)
{
    return rpc_op_submit(s, RPC_OP_REMOVE, key, klen, force, cb, arg);
}

/* Sync forms: one blocking call from the user's thread. */

int mc_store_exist(mc_store_t *s, const void *key, size_t klen)
{
    if (s == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL)
        return store_dummy_exist(s, key, klen);
    mc_status_t st = store_check_key(key, klen);
    if (st != MC_OK)
        return st;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_key(&w, key, klen);
    int64_t exists = 0;
    st = w.err != MC_OK ? w.err : store_call_sync(s, MC_RPC_EXIST_KEY, &body, &resp);
    if (st == MC_OK &&
        mc_mcli_dec_int(mc_buf_head(&resp), mc_buf_used(&resp), MC_F_EXISTS, &exists) != MC_OK)
        st = MC_ERR_PROTOCOL;
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return st != MC_OK ? st : exists != 0;
}

mc_status_t mc_store_remove(mc_store_t *s, const void *key, size_t klen, int force)
{
    if (s == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL)
        return store_dummy_remove(s, key, klen, force);
    mc_status_t st = store_check_key(key, klen);
    if (st != MC_OK)
        return st;
    mc_buf_t body = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_remove(&w, key, klen, force);
    st = w.err != MC_OK ? w.err : store_call_sync(s, MC_RPC_REMOVE, &body, NULL);
    mc_buf_fini(&body);
    return st;
}

static int64_t remove_many(mc_store_t *s, uint16_t method, const char *regex, int force)
{
    if (s == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL)
        return store_dummy_remove_by_regex(s, regex, force);
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    if (regex != NULL)
        mc_mcli_regex(&w, regex, force);
    else
        mc_mcli_remove_all(&w, force);
    int64_t count = 0;
    mc_status_t st = w.err != MC_OK ? w.err : store_call_sync(s, method, &body, &resp);
    if (st == MC_OK &&
        mc_mcli_dec_int(mc_buf_head(&resp), mc_buf_used(&resp), MC_F_COUNT, &count) != MC_OK)
        st = MC_ERR_PROTOCOL;
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return st != MC_OK ? st : count;
}

int64_t mc_store_remove_by_regex(mc_store_t *s, const char *regex, int force)
{
    if (regex == NULL)
        return MC_ERR_INVALID_PARAMS;
    return remove_many(s, MC_RPC_REMOVE_BY_REGEX, regex, force);
}

int64_t mc_store_remove_all(mc_store_t *s, int force)
{
    return remove_many(s, MC_RPC_REMOVE_ALL, NULL, force);
}

/* Valid keys of a batch, for the request; idx[j] = position of the j-th
 * valid key. Invalid ones get MC_ERR_INVALID_KEY in bad[] right away. */
static mc_status_t valid_keys(const mc_slice_t *keys, size_t n, mc_master_key_t **out, size_t **idx,
                              size_t *nvalid, mc_status_t *bad)
{
    *out = mc_calloc(n ? n : 1, sizeof(**out));
    *idx = mc_calloc(n ? n : 1, sizeof(**idx));
    if (*out == NULL || *idx == NULL) {
        mc_free(*out);
        mc_free(*idx);
        return MC_ERR_NOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        mc_status_t st = store_check_key(keys[i].ptr, keys[i].len);
        bad[i] = st;
        if (st != MC_OK)
            continue;
        (*out)[k].data = keys[i].ptr;
        (*out)[k].len = keys[i].len;
        (*idx)[k++] = i;
    }
    *nvalid = k;
    return MC_OK;
}

static mc_status_t batch_keys_call(mc_store_t *s, uint16_t method, const mc_slice_t *keys, size_t n,
                                   int force, mc_status_t *st_out, int *exists_out)
{
    if (s == NULL || (n > 0 && keys == NULL) || st_out == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    mc_master_key_t *mk;
    size_t *idx, nv;
    mc_status_t st = valid_keys(keys, n, &mk, &idx, &nv, st_out);
    if (st != MC_OK)
        return st;
    mc_status_t *sts = mc_calloc(nv ? nv : 1, sizeof(*sts));
    int *ex = mc_calloc(nv ? nv : 1, sizeof(*ex));
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    if (sts == NULL || ex == NULL) {
        st = MC_ERR_NOMEM;
        goto out;
    }
    if (nv > 0) {
        mc_mp_writer_t w;
        mc_mp_writer_init(&w, &body);
        if (method == MC_RPC_BATCH_REMOVE)
            mc_mcli_batch_remove(&w, mk, nv, force);
        else
            mc_mcli_keys(&w, mk, nv);
        st = w.err != MC_OK ? w.err : store_call_sync(s, method, &body, &resp);
        size_t got = 0;
        if (st == MC_OK && (mc_mcli_dec_statuses(mc_buf_head(&resp), mc_buf_used(&resp), sts, ex,
                                                 nv, &got) != MC_OK ||
                            got != nv))
            st = MC_ERR_PROTOCOL;
        if (st != MC_OK)
            goto out;
    }
    for (size_t j = 0; j < nv; j++) {
        st_out[idx[j]] = sts[j];
        if (exists_out != NULL)
            exists_out[idx[j]] = ex[j];
    }
    st = MC_OK;
out:
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    mc_free(sts);
    mc_free(ex);
    mc_free(mk);
    mc_free(idx);
    return st;
}

mc_status_t mc_store_batch_exist(mc_store_t *s, const mc_slice_t *keys, size_t n, int *result)
{
    if (result == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (s != NULL && s->svc != NULL)
        return n == 0 ? MC_OK : store_dummy_batch_exist(s, keys, n, result);
    mc_status_t *st = mc_calloc(n ? n : 1, sizeof(*st));
    int *ex = mc_calloc(n ? n : 1, sizeof(*ex));
    mc_status_t rc = st != NULL && ex != NULL
                         ? batch_keys_call(s, MC_RPC_BATCH_EXIST_KEY, keys, n, 0, st, ex)
                         : MC_ERR_NOMEM;
    for (size_t i = 0; rc == MC_OK && i < n; i++)
        result[i] = st[i] == MC_OK ? (ex[i] != 0) : (int)st[i];
    mc_free(st);
    mc_free(ex);
    return rc;
}

mc_status_t mc_store_batch_remove(mc_store_t *s, const mc_slice_t *keys, size_t n, int force,
                                  mc_status_t *st)
{
    if (s != NULL && s->svc != NULL)
        return n == 0 ? MC_OK : store_dummy_batch_remove(s, keys, n, force, st);
    return batch_keys_call(s, MC_RPC_BATCH_REMOVE, keys, n, force, st, NULL);
}
