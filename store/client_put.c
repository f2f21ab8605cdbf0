/*
 * client_put.c - put (mooncake/store.h); the batch put is client_put_batch.c.
 *
 * A put is all-or-nothing: the object becomes readable only through PutEnd,
 * which is sent after every byte of every replica was written; any failure
 * after PutStart sends PutRevoke (once no write is in flight any more) and
 * reports the failure's cause, not the revoke's outcome. Except after a
 * write that timed out or whose connection was lost: it may still land (a
 * slow or stopped target, a partition that heals, bytes a closed socket
 * still sends), so its space must not be reused at once; such a put is left
 * to the master, which discards it after put_start_discard_timeout (the key
 * is busy until then: OBJECT_ALREADY_EXISTS) and frees its space after
 * put_start_release_timeout.
 *
 * A sync put whose replicas are all in this process's own segment leaves
 * the copy to the calling thread (put_sync): r0 stops the op in P_WAIT_COPY
 * and wakes the caller, who copies every remaining byte from its source
 * (checked ranges, as for a transfer) and posts the op back, which then
 * sends PutEnd. Several callers copy in parallel instead of one reactor
 * thread copying for all of them (the store service's workers put into its
 * own segment).
 *
 * A source that the transports can use in place (registered memory, or any
 * memory over tcp: store_direct_ok) is written directly. Others travel
 * through the staging buffer in windows of at most its size: piece by
 * piece, each piece written to every replica in parallel (one transfer
 * batch per piece); so do values given in several parts.
 */
#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "rpc/fields.h"
#include "rpc/methods.h"
#include "store/client_put_int.h"
#include "store/master_client.h"
#include "util/copy.h"
#include "util/log.h"
#include "util/mem.h"

/* Printable form of a key for log lines (room >= 16): non-printable bytes
 * escaped, "..." when cut short. */
static const char *key_str(const char *key, size_t klen, char *buf, size_t room)
{
    size_t o = 0, i = 0;
    for (; i < klen && o + 8 < room; i++) {
        unsigned char c = (unsigned char)key[i];
        if (isprint(c) && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, room - o, "\\x%02x", c);
    }
    if (i < klen) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

/* Copy bytes [off, off + n) of the concatenation of parts to dst with
 * copy (memcpy, or mc_copy_cold into a segment). */
static void gather_with(const mc_slice_t *parts, size_t nparts, uint64_t off, uint8_t *dst,
                        uint64_t n, void (*copy)(void *, const void *, size_t))
{
    for (size_t i = 0; i < nparts && n > 0; i++) {
        if (off >= parts[i].len) {
            off -= parts[i].len;
            continue;
        }
        uint64_t take = parts[i].len - off;
        if (take > n)
            take = n;
        copy(dst, (const uint8_t *)parts[i].ptr + off, take);
        dst += take;
        n -= take;
        off = 0;
    }
}

static void copy_plain(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

/* (client_put_int.h) */
void put_gather(const mc_slice_t *parts, size_t nparts, uint64_t off, uint8_t *dst, uint64_t n)
{
    gather_with(parts, nparts, off, dst, n, copy_plain);
}

/* (client_put_int.h) */
mc_status_t put_range_check(store_op_t *h, mc_te_segment_t seg, uint64_t remote, uint64_t len,
                            int may_refresh)
{
    if (store_range_ok(h->s, seg, remote, len))
        return MC_OK;
    /* the descriptor we hold predates this memory: look again, once */
    if (may_refresh && seg != MC_TE_LOCAL_SEGMENT && store_seg_refresh(h, seg) == MC_INPROGRESS)
        return MC_INPROGRESS;
    return MC_ERR_TRANSFER_FAIL;
}

/* (client_put_int.h) */
void put_copy_into_segment(void *dst, const void *src, size_t n)
{
    const uint8_t *d = dst, *s = src;
    if (d < s + n && s < d + n)
        memmove(dst, src, n);
    else
        mc_copy_cold(dst, src, n);
}

/* The soft pin of a put as the master takes it: the action (with_soft_pin is
 * ENABLE), and upstream's rules: a TTL only with ENABLE, ENABLE with a TTL
 * of 0 pins nothing (sent as DISABLE, which on an upsert also drops the
 * replaced object's pin, as upstream). */
static mc_status_t cfg_pin(mc_master_put_cfg_t *o, const mc_replicate_config_t *c)
{
    int action = c->soft_pin_action;
    if (action < MC_SOFT_PIN_PRESERVE || action > MC_SOFT_PIN_DISABLE ||
        (c->with_soft_pin && action == MC_SOFT_PIN_DISABLE)) {
        MC_ERROR(CLIENT, "put: soft_pin_action %d is not PRESERVE (0), ENABLE (1) or DISABLE (2)%s",
                 action, c->with_soft_pin ? " (with_soft_pin asks ENABLE)" : "");
        return MC_ERR_INVALID_PARAMS;
    }
    if (c->with_soft_pin)
        action = MC_SOFT_PIN_ENABLE;
    if (c->has_soft_pin_ttl) {
        if (action != MC_SOFT_PIN_ENABLE) {
            MC_ERROR(CLIENT, "put: a soft_pin_ttl_ms needs soft_pin_action ENABLE");
            return MC_ERR_INVALID_PARAMS;
        }
        if (c->soft_pin_ttl_ms == 0)
            action = MC_SOFT_PIN_DISABLE;
        else
            o->soft_pin_ttl_us =
                c->soft_pin_ttl_ms > UINT64_MAX / 1000 ? UINT64_MAX : c->soft_pin_ttl_ms * 1000;
    }
    o->pin_action = (uint8_t)action;
    o->with_soft_pin = action == MC_SOFT_PIN_ENABLE; /* masters before pin actions */
    o->hard_pin = c->with_hard_pin != 0;
    return MC_OK;
}

mc_status_t put_cfg_copy(own_cfg_t *o, const mc_replicate_config_t *c, unsigned flags)
{
    mc_master_put_cfg_init(&o->cfg);
    o->names = NULL;
    o->cfg.upsert = (flags & PUT_UPSERT) != 0;
    if (c == NULL)
        return MC_OK;
    if (c->replica_num == 0 || c->replica_num > STORE_MAX_REPLICAS ||
        c->n_preferred > MC_PROTO_MAX_PREFERRED ||
        (c->n_preferred > 0 && c->preferred_segments == NULL)) {
        MC_ERROR(CLIENT, "put: replica_num must be 1..%d and at most %d preferred segments",
                 STORE_MAX_REPLICAS, MC_PROTO_MAX_PREFERRED);
        return MC_ERR_INVALID_PARAMS;
    }
    o->cfg.replica_num = c->replica_num;
    mc_status_t st = cfg_pin(&o->cfg, c);
    if (st != MC_OK)
        return st;
    size_t total = 0;
    for (size_t i = 0; i < c->n_preferred; i++) {
        const char *n = c->preferred_segments[i];
        if (n == NULL || strlen(n) >= MC_MASTER_NAME_MAX) {
            MC_ERROR(CLIENT, "put: preferred segment %zu is NULL or too long", i);
            return MC_ERR_INVALID_PARAMS;
        }
        total += strlen(n) + 1;
    }
    if (c->n_preferred > 0) {
        o->names = mc_malloc(total);
        if (o->names == NULL)
            return MC_ERR_NOMEM;
        char *p = o->names;
        for (size_t i = 0; i < c->n_preferred; i++) {
            size_t l = strlen(c->preferred_segments[i]) + 1;
            memcpy(p, c->preferred_segments[i], l);
            o->pref[i] = p;
            p += l;
        }
        o->cfg.preferred_segments = o->pref;
        o->cfg.n_preferred = c->n_preferred;
    }
    return MC_OK;
}

/* ================================================================== put */

typedef enum put_state {
    P_STAGE,        /* take a staging window, copy the first piece (skipped: direct) */
    P_START,        /* send PutStart */
    P_WAIT_START,   /* waiting: PutStart's answer (the replicas) */
    P_RESOLVE,      /* open the replicas' segments, one at a time */
    P_WAIT_PEER,    /* waiting: a segment open */
    P_SUBMIT,       /* write the current piece to every replica */
    P_WAIT_REFRESH, /* waiting: a fresh descriptor of a replica's segment */
    P_WAIT_XFER,    /* waiting: the piece's transfer batch */
    P_WAIT_COPY,    /* waiting: the sync caller's copy into our own segment (put_copy_run) */
    P_NEXT,         /* piece written: copy the next one, or finish */
    P_TIER,         /* persist = eager: write the tier file (client_tier.c) */
    P_WAIT_TIER,    /* waiting: the file write and its TierAdd */
    P_END,          /* send PutEnd */
    P_WAIT_END,     /* waiting: PutEnd's answer */
    P_PERSIST,      /* persist = async: queue a copy for the tier worker */
    P_WAIT_PERSIST, /* waiting: our own file write (the async queue was full) */
    P_REVOKE,       /* a failure after PutStart: send PutRevoke */
    P_WAIT_REVOKE,  /* waiting: PutRevoke's answer */
    P_DONE,         /* report err */
    P_NSTATES
} put_state_t;

typedef struct put_op {
    store_op_t h;
    put_state_t state;
    mc_store_cb_t cb;
    void *arg;
    char *key;
    size_t klen;
    mc_slice_t *parts; /* the caller's memory, borrowed until cb */
    size_t nparts;
    uint8_t *bounce; /* host copy of a value in GPU memory (owned), or NULL */
    uint64_t len;
    const uint8_t *direct; /* registered source: written without staging */
    own_cfg_t cfg;
    mc_master_replica_desc_t rep[STORE_MAX_REPLICAS];
    uint32_t nrep;
    mc_te_segment_t seg[STORE_MAX_REPLICAS];
    uint32_t nres;         /* replicas whose segment is resolved */
    unsigned refreshed;    /* bit per replica: descriptor refreshed once */
    uint64_t win;          /* bytes per piece */
    uint64_t off, plen;    /* current piece */
    int copied;            /* the current piece is in the staging window */
    int started;           /* PutStart succeeded: failures revoke */
    int in_doubt;          /* a write timed out: no revoke (put_may_land_later) */
    int persist;           /* MC_MASTER_PERSIST_* for this put, fixed at P_TIER */
    struct own_copy *copy; /* sync put: own-segment copies left to the caller */
    mc_status_t err;
} put_op_t;

/* (client_put_int.h) */
void put_copy_hand(own_copy_t *c, store_op_t *h)
{
    pthread_mutex_lock(&c->w.mu);
    c->op = h;
    pthread_cond_signal(&c->w.cv);
    pthread_mutex_unlock(&c->w.mu);
}

/* (client_put_int.h) */
void put_copy_init(own_copy_t *c, void (*run)(store_op_t *op))
{
    c->op = NULL;
    c->run = run;
    store_waiter_init(&c->w);
}

/* (client_put_int.h) */
mc_status_t put_copy_wait(own_copy_t *c, mc_status_t submitted)
{
    store_waiter_t *w = &c->w;
    if (submitted != MC_INPROGRESS) { /* the op never ran: nothing will wake us */
        w->done = 1;
        store_waiter_wait(w);
        return submitted;
    }
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->done && c->op == NULL)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->done)
            break;
        store_op_t *h = c->op;
        c->op = NULL;
        pthread_mutex_unlock(&w->mu);
        c->run(h);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return (mc_status_t)store_waiter_wait(w);
}

static void put_finish(store_op_t *h, mc_status_t st)
{
    put_op_t *op = (put_op_t *)h;
    mc_store_t *s = h->s;
    store_op_release(h, "put");
    op->cb(op->arg, st);
    mc_free(op->cfg.names);
    mc_free(op->parts);
    mc_free(op->bounce);
    mc_free(op->key);
    mc_free(op);
    store_live_dec(s);
}

/* A value with a part in GPU memory: copied to host memory first (one
 * cuMemcpy per GPU part), so every path of the put (staging, TCP, the
 * tier's files) reads host memory; *out owned by the caller. MC_OK with
 * *out NULL when no part is GPU memory. */
static mc_status_t gpu_bounce_in(const mc_slice_t *parts, size_t nparts, uint64_t len,
                                 uint8_t **out)
{
    *out = NULL;
    size_t i = 0;
    while (i < nparts && (parts[i].len == 0 || te_gpu_of(parts[i].ptr) < 0))
        i++;
    if (i == nparts)
        return MC_OK;
    uint8_t *b = mc_malloc(len);
    if (b == NULL)
        return MC_ERR_NOMEM;
    uint64_t off = 0;
    for (i = 0; i < nparts; i++) {
        mc_status_t st = MC_OK;
        if (parts[i].len > 0 && te_gpu_of(parts[i].ptr) >= 0)
            st = te_gpu_copy(b + off, parts[i].ptr, parts[i].len);
        else if (parts[i].len > 0)
            memcpy(b + off, parts[i].ptr, parts[i].len);
        if (st != MC_OK) {
            mc_free(b);
            return st;
        }
        off += parts[i].len;
    }
    *out = b;
    return MC_OK;
}

/* In the transfer callback: whether a failed write may still land. */
static void put_harvest(store_op_t *h, mc_te_batch_t *b)
{
    put_op_t *op = (put_op_t *)h;
    for (uint32_t t = 0; t < op->nrep; t++) {
        mc_te_status_t ts;
        mc_te_task_status(b, t, &ts);
        if (ts.state != MC_TE_COMPLETED && put_may_land_later(&ts))
            op->in_doubt = 1;
    }
}

static void put_decode_start(store_op_t *h, const mc_rpc_resp_t *resp)
{
    put_op_t *op = (put_op_t *)h;
    if (mc_mcli_dec_replicas(resp->body, resp->body_len, op->rep, STORE_MAX_REPLICAS, &op->nrep,
                             NULL) != MC_OK)
        h->wait_st = MC_ERR_PROTOCOL;
}

/* Record a failure: revoke when the master has our put, else report. */
static put_state_t put_fail(put_op_t *op, mc_status_t st)
{
    op->err = st;
    return op->started ? P_REVOKE : P_DONE;
}

/* The op's key for log lines (kb: at least 96 bytes). */
#define PUT_KEY(op, kb) key_str((op)->key, (op)->klen, (kb), sizeof(kb))

/*
 * The state handlers of put_step: each does its state's work and returns
 * the next state. A handler that starts an asynchronous step returns the
 * P_WAIT_* state that receives its outcome (in h->wait_st); P_STAGE returns
 * itself while it waits for staging room. put_step stops there (see
 * put_waits) until the completion steps the op again.
 */

static put_state_t put_stage(put_op_t *op)
{
    store_op_t *h = &op->h;
    if (op->direct == NULL && h->stage == NULL) {
        mc_status_t st = store_stage_get(h->s, h, op->win);
        if (st == MC_INPROGRESS)
            return P_STAGE; /* waiting: staging room (stage_kick steps us) */
        if (st != MC_OK)
            return put_fail(op, st);
    }
    if (op->direct == NULL && !op->copied) {
        put_gather(op->parts, op->nparts, 0, h->stage, op->win);
        op->copied = 1;
    }
    return P_START;
}

static put_state_t put_start(put_op_t *op)
{
    mc_store_t *s = op->h.s;
    mc_mp_writer_t *w = mc_rpc_call_begin(s->mcli);
    mc_mcli_put_start(w, s->client_id, op->key, op->klen, op->len, &op->cfg.cfg);
    mc_status_t st = store_rpc_end(&op->h, MC_RPC_PUT_START, put_decode_start);
    return st == MC_INPROGRESS ? P_WAIT_START : put_fail(op, st);
}

static put_state_t put_started(put_op_t *op)
{
    char kb[96];
    if (op->h.wait_st != MC_OK) {
        MC_DEBUG(CLIENT, "put '%s': PutStart: %s", PUT_KEY(op, kb), mc_status_str(op->h.wait_st));
        return put_fail(op, op->h.wait_st);
    }
    op->started = 1;
    if (op->nrep == 0) {
        MC_ERROR(CLIENT, "put '%s': the master placed no replica", PUT_KEY(op, kb));
        return put_fail(op, MC_ERR_INTERNAL_ERROR);
    }
    return P_RESOLVE;
}

/* Open the replicas' segments, one at a time. */
static put_state_t put_resolve(put_op_t *op)
{
    while (op->nres < op->nrep) {
        mc_status_t st = store_peer_resolve(
            op->h.s, &op->h, put_replica_endpoint(&op->rep[op->nres]), &op->seg[op->nres]);
        if (st == MC_INPROGRESS)
            return P_WAIT_PEER; /* waiting: the segment open (peer_open_cb steps us) */
        if (st != MC_OK)
            return put_fail(op, st);
        op->nres++;
    }
    return P_SUBMIT;
}

static put_state_t put_peer_opened(put_op_t *op)
{
    char kb[96];
    mc_status_t st = op->h.wait_st;
    if (st != MC_OK) {
        MC_WARN(CLIENT, "put '%s': cannot open segment '%s': %s", PUT_KEY(op, kb),
                put_replica_endpoint(&op->rep[op->nres]), mc_status_str(st));
        return put_fail(op, put_xfer_status(st));
    }
    op->seg[op->nres++] = op->h.opened;
    return P_RESOLVE;
}

/* Whether the caller copies: a sync put whose replicas are all in our own
 * segment. */
static int put_own(const put_op_t *op)
{
    if (op->copy == NULL)
        return 0;
    for (uint32_t i = 0; i < op->nrep; i++)
        if (op->seg[i] != MC_TE_LOCAL_SEGMENT)
            return 0;
    return 1;
}

/* Write the current piece to every replica in one batch, or, when the
 * caller copies (put_own), every remaining byte. A replica's range outside
 * what we know of its segment gets one descriptor refresh. */
static put_state_t put_submit(put_op_t *op)
{
    store_op_t *h = &op->h;
    char kb[96];
    int own = put_own(op);
    op->plen = own || op->len - op->off < op->win ? op->len - op->off : op->win;
    const uint8_t *src = op->direct != NULL ? op->direct + op->off : h->stage;
    mc_te_request_t reqs[STORE_MAX_REPLICAS];
    for (uint32_t i = 0; i < op->nrep; i++) {
        reqs[i] = (mc_te_request_t){.opcode = MC_TE_WRITE,
                                    .local = (void *)(uintptr_t)src,
                                    .segment = op->seg[i],
                                    .remote = op->rep[i].address + op->off,
                                    .length = op->plen};
        mc_status_t rs =
            put_range_check(h, op->seg[i], reqs[i].remote, op->plen, !(op->refreshed & (1u << i)));
        if (rs == MC_OK)
            continue;
        if (rs == MC_INPROGRESS) {
            op->refreshed |= 1u << i;
            return P_WAIT_REFRESH; /* waiting: the refresh (refresh_cb steps us) */
        }
        MC_WARN(CLIENT, "put '%s': replica 0x%llx+%llu is outside the buffers of segment '%s'",
                PUT_KEY(op, kb), (unsigned long long)reqs[i].remote, (unsigned long long)op->plen,
                put_replica_endpoint(&op->rep[i]));
        return put_fail(op, MC_ERR_TRANSFER_FAIL);
    }
    if (own)
        return P_WAIT_COPY; /* waiting: the caller's copy (put_step hands it over) */
    mc_status_t st = store_xfer_submit(h, reqs, op->nrep);
    if (st != MC_OK) {
        MC_WARN(CLIENT, "put '%s': cannot submit the transfer: %s", PUT_KEY(op, kb),
                mc_status_str(st));
        return put_fail(op, put_xfer_status(st));
    }
    return P_WAIT_XFER; /* waiting: the batch (store_xfer_cb posts us) */
}

static put_state_t put_written(put_op_t *op)
{
    char kb[96];
    if (op->h.wait_st != MC_OK) {
        MC_WARN(CLIENT, "put '%s': writing %llu bytes at offset %llu to %u replica(s) failed: %s",
                PUT_KEY(op, kb), (unsigned long long)op->plen, (unsigned long long)op->off,
                op->nrep, mc_status_str(op->h.wait_st));
        return put_fail(op, put_xfer_status(op->h.wait_st));
    }
    op->off += op->plen;
    op->copied = 0;
    return P_NEXT;
}

/* The piece is written: copy the next one, or go on to the tier and PutEnd. */
static put_state_t put_next(put_op_t *op)
{
    store_op_t *h = &op->h;
    if (op->off >= op->len) {
        store_stage_put(h->s, h); /* nothing more to send: let others use it */
        return P_TIER;
    }
    if (op->direct == NULL) {
        uint64_t n = op->len - op->off < op->win ? op->len - op->off : op->win;
        put_gather(op->parts, op->nparts, op->off, h->stage, n);
        op->copied = 1;
    }
    return P_SUBMIT;
}

static put_state_t put_tier(put_op_t *op)
{
    mc_store_t *s = op->h.s;
    op->persist = store_tier_on(s) ? store_tier_mode(s) : MC_MASTER_PERSIST_OFF;
    if (op->persist != MC_MASTER_PERSIST_EAGER)
        return P_END;
    mc_status_t st = store_tier_write_op(&op->h, op->key, op->klen, op->parts, op->nparts, op->len);
    return st == MC_OK ? P_WAIT_TIER /* waiting: the tier worker (it posts us) */
                       : put_fail(op, st);
}

static put_state_t put_tier_written(put_op_t *op)
{
    char kb[96];
    if (op->h.wait_st != MC_OK) {
        /* eager: a put that returns OK is on disk, so this one fails */
        MC_WARN(CLIENT, "put '%s': writing its tier file failed: %s", PUT_KEY(op, kb),
                mc_status_str(op->h.wait_st));
        return put_fail(op, op->h.wait_st);
    }
    return P_END;
}

static put_state_t put_end(put_op_t *op)
{
    mc_store_t *s = op->h.s;
    mc_mp_writer_t *w = mc_rpc_call_begin(s->mcli);
    mc_mcli_client_key(w, s->client_id, op->key, op->klen);
    mc_status_t st = store_rpc_end(&op->h, MC_RPC_PUT_END, NULL);
    return st == MC_INPROGRESS ? P_WAIT_END : put_fail(op, st);
}

static put_state_t put_ended(put_op_t *op)
{
    char kb[96];
    if (op->h.wait_st != MC_OK) {
        MC_WARN(CLIENT, "put '%s': PutEnd: %s", PUT_KEY(op, kb), mc_status_str(op->h.wait_st));
        return put_fail(op, op->h.wait_st);
    }
    op->err = MC_OK;
    return op->persist == MC_MASTER_PERSIST_ASYNC ? P_PERSIST : P_DONE;
}

/* persist = async: the put has succeeded; the file is best effort. */
static put_state_t put_persist(put_op_t *op)
{
    char kb[96];
    mc_store_t *s = op->h.s;
    mc_status_t st = store_tier_write_async(s, op->key, op->klen, op->parts, op->nparts, op->len);
    if (st == MC_ERR_LIMIT) {
        /* queue full: write from the caller's memory and only then return,
         * so queued copies stay bounded and none is skipped */
        st = store_tier_write_op(&op->h, op->key, op->klen, op->parts, op->nparts, op->len);
        if (st == MC_OK)
            return P_WAIT_PERSIST; /* waiting: the tier worker */
    }
    if (st != MC_OK)
        MC_WARN(CLIENT, "put '%s': its tier file is not written: %s", PUT_KEY(op, kb),
                mc_status_str(st));
    return P_DONE;
}

static put_state_t put_persisted(put_op_t *op)
{
    char kb[96];
    if (op->h.wait_st != MC_OK)
        MC_WARN(CLIENT, "put '%s': writing its tier file failed: %s", PUT_KEY(op, kb),
                mc_status_str(op->h.wait_st));
    return P_DONE;
}

/* A failure after PutStart: revoke, unless a write may still land. */
static put_state_t put_revoke(put_op_t *op)
{
    char kb[96];
    mc_store_t *s = op->h.s;
    store_stage_put(s, &op->h);
    if (op->in_doubt) {
        MC_WARN(CLIENT,
                "put '%s': not revoked: a write timed out and may still land; the master "
                "discards the put after its put_start_discard_timeout",
                PUT_KEY(op, kb));
        return P_DONE;
    }
    mc_mp_writer_t *w = mc_rpc_call_begin(s->mcli);
    mc_mcli_client_key(w, s->client_id, op->key, op->klen);
    return store_rpc_end(&op->h, MC_RPC_PUT_REVOKE, NULL) == MC_INPROGRESS ? P_WAIT_REVOKE : P_DONE;
}

static put_state_t put_revoked(put_op_t *op)
{
    char kb[96];
    mc_status_t st = op->h.wait_st;
    if (st != MC_OK && st != MC_ERR_OBJECT_NOT_FOUND)
        MC_WARN(CLIENT,
                "put '%s': PutRevoke: %s (the master discards the put after its "
                "put_start_discard_timeout)",
                PUT_KEY(op, kb), mc_status_str(st));
    return P_DONE;
}

/* A failed refresh shows as a bad range again, in put_submit. */
static put_state_t put_refreshed(put_op_t *op)
{
    (void)op;
    return P_SUBMIT;
}

/* The caller's thread: write bytes [off, off + plen) of the value to every
 * replica (own segment, ranges checked by put_submit), then step op on r0
 * again (put_written). */
static void put_copy_run(store_op_t *h)
{
    put_op_t *op = (put_op_t *)h;
    for (uint32_t i = 0; i < op->nrep; i++) {
        uint8_t *dst = (uint8_t *)(uintptr_t)(op->rep[i].address + op->off);
        if (op->direct != NULL)
            put_copy_into_segment(dst, op->direct + op->off, op->plen);
        else
            gather_with(op->parts, op->nparts, op->off, dst, op->plen, put_copy_into_segment);
    }
    op->h.wait_st = MC_OK;
    store_op_post(&op->h);
}

/* The machine's table: the handler of each state, and whether put_step
 * stops there (an asynchronous step's completion steps the op again; each
 * handler above names its waker). P_DONE has no handler: it reports. */
static const struct {
    put_state_t (*fn)(put_op_t *op);
    int wait;
} put_table[P_NSTATES] = {
    [P_STAGE] = {put_stage, 0},
    [P_START] = {put_start, 0},
    [P_WAIT_START] = {put_started, 1},
    [P_RESOLVE] = {put_resolve, 0},
    [P_WAIT_PEER] = {put_peer_opened, 1},
    [P_SUBMIT] = {put_submit, 0},
    [P_WAIT_REFRESH] = {put_refreshed, 1},
    [P_WAIT_XFER] = {put_written, 1},
    [P_WAIT_COPY] = {put_written, 1},
    [P_NEXT] = {put_next, 0},
    [P_TIER] = {put_tier, 0},
    [P_WAIT_TIER] = {put_tier_written, 1},
    [P_END] = {put_end, 0},
    [P_WAIT_END] = {put_ended, 1},
    [P_PERSIST] = {put_persist, 0},
    [P_WAIT_PERSIST] = {put_persisted, 1},
    [P_REVOKE] = {put_revoke, 0},
    [P_WAIT_REVOKE] = {put_revoked, 1},
};

/* The put machine: runs handlers while the state changes; stops in a
 * waiting state, or in P_STAGE waiting for room, until stepped again. */
static void put_step(store_op_t *h)
{
    put_op_t *op = (put_op_t *)h;
    for (;;) {
        if (store_op_closing(h)) {
            put_finish(h, MC_ERR_CANCELED);
            return;
        }
        put_state_t from = op->state;
        if (from == P_DONE) {
            put_finish(h, op->err);
            return;
        }
        assert(from < P_NSTATES && put_table[from].fn != NULL);
        put_state_t to = put_table[from].fn(op);
        op->state = to;
        if (to == P_WAIT_COPY) {
            put_copy_hand(op->copy, h); /* the caller owns op until it posts it back */
            return;
        }
        if (to == from || put_table[to].wait)
            return;
    }
}

/* A put whose PutStart was answered already (store_put_direct): the op
 * starts from its answer. */
typedef struct put_preset {
    const mc_master_replica_desc_t *rep;
    uint32_t nrep;
} put_preset_t;

/* store_put_submit; copy: a sync caller that copies into our own segment
 * (put_sync), or NULL; pre: PutStart was answered (or NULL). */
static mc_status_t put_new(mc_store_t *s, const void *key, size_t klen, const mc_slice_t *parts,
                           size_t nparts, const mc_replicate_config_t *cfg, unsigned flags,
                           own_copy_t *copy, const put_preset_t *pre, mc_store_cb_t cb, void *arg)
{
    int zero_copy = (flags & PUT_ZERO_COPY) != 0;
    if (s == NULL || cb == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL) /* co-located: the service puts */
        return nparts == 1 ? store_dummy_async(s, 0, key, klen, parts[0].ptr, NULL, parts[0].len, 0,
                                               cfg, cb, NULL, arg)
                           : MC_ERR_NOT_SUPPORTED;
    mc_status_t st = store_check_key(key, klen);
    if (st != MC_OK)
        return st;
    if (nparts == 0 || parts == NULL)
        return MC_ERR_INVALID_PARAMS;
    uint64_t len = 0;
    for (size_t i = 0; i < nparts; i++) {
        if (parts[i].len > 0 && parts[i].ptr == NULL)
            return MC_ERR_INVALID_PARAMS;
        if (len + parts[i].len < len)
            return MC_ERR_INVALID_PARAMS;
        len += parts[i].len;
    }
    if (len == 0)
        return MC_ERR_INVALID_PARAMS;
    int registered = nparts == 1 && te_local_range_ok(s->te, parts[0].ptr, len, 0);
    if (zero_copy && !registered) {
        MC_ERROR(CLIENT, "put_from: %p+%llu is not inside a registered buffer", parts[0].ptr,
                 (unsigned long long)len);
        return MC_ERR_INVALID_PARAMS;
    }
    uint8_t *bounce = NULL;
    st = gpu_bounce_in(parts, nparts, len, &bounce);
    if (st != MC_OK)
        return st;
    mc_slice_t host = {bounce, len};
    if (bounce != NULL) { /* from here on the value is the host copy */
        parts = &host;
        nparts = 1;
        zero_copy = 0;
        registered = 0;
    }
    const uint8_t *direct = NULL;
    if (registered || (nparts == 1 && s->stage_alloc != NULL && store_inplace_ok(s)))
        direct = parts[0].ptr;
    if (direct == NULL && s->stage_alloc == NULL) {
        MC_ERROR(CLIENT, "put: the value is not in registered memory and the client has no "
                         "staging buffer (local_buffer_size = 0)");
        mc_free(bounce);
        return MC_ERR_STATE;
    }

    put_op_t *op = MC_NEW(put_op_t);
    if (op == NULL) {
        mc_free(bounce);
        return MC_ERR_NOMEM;
    }
    op->bounce = bounce;
    op->key = mc_malloc(klen);
    op->parts = mc_malloc(nparts * sizeof(*parts));
    st = op->key == NULL || op->parts == NULL ? MC_ERR_NOMEM : put_cfg_copy(&op->cfg, cfg, flags);
    if (st != MC_OK)
        goto err;
    memcpy(op->key, key, klen);
    memcpy(op->parts, parts, nparts * sizeof(*parts));
    op->klen = klen;
    op->nparts = nparts;
    op->len = len;
    op->direct = direct;
    op->win = direct != NULL ? len : store_stage_window(s, len);
    op->cb = cb;
    op->arg = arg;
    store_op_init(&op->h, s, put_step, put_finish, put_harvest);
    op->copy = copy;
    op->state = P_STAGE;
    if (pre != NULL) {
        memcpy(op->rep, pre->rep, pre->nrep * sizeof(*pre->rep));
        op->nrep = pre->nrep;
        op->h.wait_st = MC_OK;
        op->state = P_WAIT_START; /* (put_started marks it started: failures revoke) */
    }
    /* Fast path: copy the first piece on the caller's thread. */
    if (direct == NULL && store_stage_try(s, &op->h, op->win)) {
        put_gather(parts, nparts, 0, op->h.stage, op->win);
        op->copied = 1;
    }
    st = store_op_submit(&op->h);
    if (st == MC_INPROGRESS)
        return st;
    store_stage_put(s, &op->h);
err:
    mc_free(op->cfg.names);
    mc_free(op->parts);
    mc_free(op->bounce);
    mc_free(op->key);
    mc_free(op);
    return st;
}

mc_status_t store_put_submit(mc_store_t *s, const void *key, size_t klen, const mc_slice_t *parts,
                             size_t nparts, const mc_replicate_config_t *cfg, unsigned flags,
                             mc_store_cb_t cb, void *arg)
{
    return put_new(s, key, klen, parts, nparts, cfg, flags, NULL, NULL, cb, arg);
}

/* ----------------------------------------------------------- public: put */

/* (client_put_int.h) */
mc_status_t put_cfg_full(const mc_replicate_config_t **cfg, mc_replicate_config_t *tmp)
{
    if (*cfg == NULL)
        return MC_OK;
    mc_status_t st = store_replicate_config_full(*cfg, tmp);
    if (st == MC_OK)
        *cfg = tmp;
    return st;
}

/* put_sync once cfg is full; pre: PutStart was answered (or NULL). */
static mc_status_t put_sync_from(mc_store_t *s, const void *key, size_t klen,
                                 const mc_slice_t *parts, size_t nparts,
                                 const mc_replicate_config_t *cfg, unsigned flags,
                                 const put_preset_t *pre)
{
    if (store_on_reactor(s))
        return MC_ERR_STATE;
    own_copy_t c;
    put_copy_init(&c, put_copy_run);
    mc_status_t st =
        put_new(s, key, klen, parts, nparts, cfg, flags, &c, pre, store_waiter_status_cb, &c.w);
    return put_copy_wait(&c, st);
}

static mc_status_t put_sync(mc_store_t *s, const void *key, size_t klen, const mc_slice_t *parts,
                            size_t nparts, const mc_replicate_config_t *cfg, unsigned flags)
{
    mc_replicate_config_t full;
    if (s == NULL || put_cfg_full(&cfg, &full) != MC_OK)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL)
        return store_dummy_put(s, key, klen, parts, nparts, cfg, (flags & PUT_UPSERT) != 0);
    return put_sync_from(s, key, klen, parts, nparts, cfg, flags, NULL);
}

mc_status_t mc_store_put(mc_store_t *s, const void *key, size_t klen, const void *buf, size_t len,
                         const mc_replicate_config_t *cfg)
{
    mc_slice_t part = {(void *)(uintptr_t)buf, len};
    return put_sync(s, key, klen, &part, 1, cfg, 0);
}

mc_status_t mc_store_put_parts(mc_store_t *s, const void *key, size_t klen, const mc_slice_t *parts,
                               size_t nparts, const mc_replicate_config_t *cfg)
{
    return put_sync(s, key, klen, parts, nparts, cfg, 0);
}

mc_status_t mc_store_put_from(mc_store_t *s, const void *key, size_t klen, const void *buf,
                              size_t len, const mc_replicate_config_t *cfg)
{
    mc_slice_t part = {(void *)(uintptr_t)buf, len};
    return put_sync(s, key, klen, &part, 1, cfg, PUT_ZERO_COPY);
}

mc_status_t mc_store_upsert(mc_store_t *s, const void *key, size_t klen, const void *buf,
                            size_t len, const mc_replicate_config_t *cfg)
{
    mc_slice_t part = {(void *)(uintptr_t)buf, len};
    return put_sync(s, key, klen, &part, 1, cfg, PUT_UPSERT);
}

mc_status_t mc_store_upsert_parts(mc_store_t *s, const void *key, size_t klen,
                                  const mc_slice_t *parts, size_t nparts,
                                  const mc_replicate_config_t *cfg)
{
    return put_sync(s, key, klen, parts, nparts, cfg, PUT_UPSERT);
}

mc_status_t mc_store_upsert_from(mc_store_t *s, const void *key, size_t klen, const void *buf,
                                 size_t len, const mc_replicate_config_t *cfg)
{
    mc_slice_t part = {(void *)(uintptr_t)buf, len};
    return put_sync(s, key, klen, &part, 1, cfg, PUT_ZERO_COPY | PUT_UPSERT);
}

mc_status_t mc_store_put_async(mc_store_t *s, const void *key, size_t klen, const void *buf,
                               size_t len, const mc_replicate_config_t *cfg, mc_store_cb_t cb,
                               void *arg)
{
    mc_slice_t part = {(void *)(uintptr_t)buf, len};
    mc_replicate_config_t full;
    if (put_cfg_full(&cfg, &full) != MC_OK)
        return MC_ERR_INVALID_PARAMS;
    return store_put_submit(s, key, klen, &part, 1, cfg, 0, cb, arg);
}

/* ------------------------------------------------- put on the caller's thread */

/* A call of the direct put, its body in store_mconn_body(m): the answer's
 * body into *ans. */
static mc_status_t direct_call(store_mconn_t *m, uint16_t method, mc_buf_t *body, mc_buf_t **ans)
{
    *ans = store_mconn_ans(m);
    return store_mconn_call(m, method, body, *ans);
}

/* PutEnd or PutRevoke of key (the direct put's). */
static mc_status_t direct_key_call(store_mconn_t *m, uint16_t method, const void *key, size_t klen)
{
    mc_store_t *s = store_mconn_store(m);
    mc_buf_t *body = store_mconn_body(m), *ans;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, body);
    mc_mcli_client_key(&w, s->client_id, key, klen);
    return w.err != MC_OK ? w.err : direct_call(m, method, body, &ans);
}

/* Add FIELD = v to the map that starts body (a fixmap of under 15 fields,
 * as PutStart's): the put id of a PutStart a new leader may be asked again. */
static mc_status_t body_add_uint(mc_buf_t *body, unsigned field, uint64_t v)
{
    uint8_t *p = mc_buf_head(body);
    if (mc_buf_used(body) == 0 || (p[0] & 0xf0) != 0x80 || (p[0] & 0x0f) >= 15)
        return MC_ERR_LIMIT;
    p[0]++;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, body);
    mc_mp_write_uint(&w, field);
    mc_mp_write_uint(&w, v);
    return w.err;
}

/* The direct put's key for log lines. */
#define DKEY key_str((const char *)key, klen, kb, sizeof(kb))

/* PutStart of len bytes on m: the replicas into rep/nrep. With HA the body
 * carries a put id (a new leader asked again knows the put). */
static mc_status_t direct_start(store_mconn_t *m, const void *key, size_t klen, uint64_t len,
                                const own_cfg_t *oc, mc_master_replica_desc_t *rep, uint32_t *nrep)
{
    mc_store_t *s = store_mconn_store(m);
    mc_buf_t *body = store_mconn_body(m), *ans = NULL;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, body);
    mc_mcli_put_start(&w, s->client_id, key, klen, len, &oc->cfg);
    mc_status_t st = w.err;
    if (st == MC_OK && s->ha) {
        uint64_t id = 0;
        while (id == 0)
            id = store_put_id();
        st = body_add_uint(body, MC_F_PUT_ID, id);
    }
    if (st == MC_OK)
        st = direct_call(m, MC_RPC_PUT_START, body, &ans);
    if (st == MC_OK && mc_mcli_dec_replicas(mc_buf_head(ans), mc_buf_used(ans), rep,
                                            STORE_MAX_REPLICAS, nrep, NULL) != MC_OK)
        st = MC_ERR_PROTOCOL;
    return st;
}

/* Whether every replica is in our own segment. */
static int direct_own(mc_store_t *s, const mc_master_replica_desc_t *rep, uint32_t nrep)
{
    for (uint32_t i = 0; i < nrep; i++)
        if (strcmp(put_replica_endpoint(&rep[i]), mc_te_local_name(s->te)) != 0)
            return 0;
    return nrep > 0;
}

/* store_put_direct once the put is for this path (key, parts and cfg
 * checked, len their total). */
static mc_status_t direct_put(store_mconn_t *m, const void *key, size_t klen,
                              const mc_slice_t *parts, size_t nparts, uint64_t len,
                              const mc_replicate_config_t *cfg, int upsert, const own_cfg_t *oc)
{
    mc_store_t *s = store_mconn_store(m);
    char kb[96];
    mc_master_replica_desc_t rep[STORE_MAX_REPLICAS];
    uint32_t nrep = 0;
    mc_status_t st = direct_start(m, key, klen, len, oc, rep, &nrep);
    if (st != MC_OK && st != MC_ERR_PROTOCOL) { /* (a malformed answer: it has the put) */
        MC_DEBUG(CLIENT, "put '%s': PutStart: %s", DKEY, mc_status_str(st));
        return st;
    }
    if (st == MC_OK && nrep > 0 && !direct_own(s, rep, nrep)) {
        /* placed elsewhere (our segment is full): the r0 machine writes it */
        put_preset_t pre = {rep, nrep};
        return put_sync_from(s, key, klen, parts, nparts, cfg, upsert ? PUT_UPSERT : 0, &pre);
    }
    if (st == MC_OK && nrep == 0) {
        MC_ERROR(CLIENT, "put '%s': the master placed no replica", DKEY);
        st = MC_ERR_INTERNAL_ERROR;
    }
    for (uint32_t i = 0; st == MC_OK && i < nrep; i++) {
        if (!te_segment_range_ok(s->te, MC_TE_LOCAL_SEGMENT, rep[i].address, len)) {
            MC_WARN(CLIENT, "put '%s': replica 0x%llx+%llu is outside the buffers of segment '%s'",
                    DKEY, (unsigned long long)rep[i].address, (unsigned long long)len,
                    put_replica_endpoint(&rep[i]));
            st = MC_ERR_TRANSFER_FAIL;
        }
    }
    /* every byte is in place before PutEnd makes the object readable */
    for (uint32_t i = 0; st == MC_OK && i < nrep; i++)
        gather_with(parts, nparts, 0, (uint8_t *)(uintptr_t)rep[i].address, len,
                    put_copy_into_segment);
    if (st == MC_OK && (st = direct_key_call(m, MC_RPC_PUT_END, key, klen)) != MC_OK)
        MC_WARN(CLIENT, "put '%s': PutEnd: %s", DKEY, mc_status_str(st));
    if (st != MC_OK) {
        mc_status_t rst = direct_key_call(m, MC_RPC_PUT_REVOKE, key, klen);
        if (rst != MC_OK && rst != MC_ERR_OBJECT_NOT_FOUND)
            MC_WARN(CLIENT,
                    "put '%s': PutRevoke: %s (the master discards the put after its "
                    "put_start_discard_timeout)",
                    DKEY, mc_status_str(rst));
    }
    return st;
}

mc_status_t store_put_direct(store_mconn_t *m, const void *key, size_t klen,
                             const mc_slice_t *parts, size_t nparts,
                             const mc_replicate_config_t *cfg, int upsert, int *done)
{
    mc_store_t *s = store_mconn_store(m);
    mc_replicate_config_t full;
    *done = 0;
    if (put_cfg_full(&cfg, &full) != MC_OK)
        return MC_ERR_INVALID_PARAMS;
    /* not for this path: replicas elsewhere by definition, a tier file to
     * write before or after PutEnd, no segment of ours, GPU memory */
    if (s->svc != NULL || (cfg != NULL && cfg->replica_num > 1) ||
        (store_tier_on(s) && store_tier_mode(s) != MC_MASTER_PERSIST_OFF))
        return MC_ERR_NOT_SUPPORTED;
    pthread_mutex_lock(&s->seg_mu);
    int mounted = !mc_list_empty(&s->segs);
    pthread_mutex_unlock(&s->seg_mu);
    if (!mounted)
        return MC_ERR_NOT_SUPPORTED;
    for (size_t i = 0; i < nparts; i++)
        if (parts[i].len > 0 && parts[i].ptr != NULL && te_gpu_of(parts[i].ptr) >= 0)
            return MC_ERR_NOT_SUPPORTED; /* (the r0 path bounces it) */
    /* from here on, the put's own status */
    *done = 1;
    mc_status_t st = store_check_key(key, klen);
    if (st != MC_OK)
        return st;
    uint64_t len = 0;
    for (size_t i = 0; i < nparts; i++) {
        if ((parts[i].len > 0 && parts[i].ptr == NULL) || len + parts[i].len < len)
            return MC_ERR_INVALID_PARAMS;
        len += parts[i].len;
    }
    if (nparts == 0 || parts == NULL || len == 0)
        return MC_ERR_INVALID_PARAMS;
    own_cfg_t oc;
    if ((st = put_cfg_copy(&oc, cfg, upsert ? PUT_UPSERT : 0)) != MC_OK)
        return st;
    if (atomic_load(&s->closing)) {
        mc_free(oc.names);
        return MC_ERR_CANCELED;
    }
    store_live_inc(s); /* close waits for us */
    st = direct_put(m, key, klen, parts, nparts, len, cfg, upsert, &oc);
    mc_free(oc.names);
    store_live_dec(s);
    return st;
}
