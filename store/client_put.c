/*
 * client_put.c - put and batch put (mooncake/store.h).
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
 *
 * Batch put: BatchPutStart for every key, one transfer batch for all of
 * them, BatchPutEnd for those written and BatchPutRevoke for the others. It
 * needs every value in the staging buffer at once (or all registered);
 * otherwise the keys are put one by one, in parallel.
 */
#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "rpc/fields.h"
#include "rpc/methods.h"
#include "store/client_int.h"
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

/* Copy bytes [off, off + n) of the concatenation of parts to dst. */
static void gather(const mc_slice_t *parts, size_t nparts, uint64_t off, uint8_t *dst, uint64_t n)
{
    gather_with(parts, nparts, off, dst, n, copy_plain);
}

/* A value's bytes into a segment: nobody reads them soon (mc_copy_cold),
 * unless the caller's source overlaps the destination. */
static void copy_into_segment(void *dst, const void *src, size_t n)
{
    const uint8_t *d = dst, *s = src;
    if (d < s + n && s < d + n)
        memmove(dst, src, n);
    else
        mc_copy_cold(dst, src, n);
}

/* Transfer failures are reported as TRANSFER_FAIL (the cause is logged),
 * except cancellation. */
static mc_status_t xfer_status(mc_status_t st)
{
    return st == MC_ERR_CANCELED ? st : MC_ERR_TRANSFER_FAIL;
}

/* A write that failed this way may still land later: its space must not be
 * handed out again at once, so such a put is not revoked but left to the
 * master, which discards it after put_start_discard_timeout and reuses the
 * space after put_start_release_timeout. A timeout: the target may be slow
 * or stopped, not gone. A lost connection: the bytes already handed to the
 * kernel are sent even after the socket is closed (the lane of a timed-out
 * write is dropped with other writes' bytes in it) and a stopped target or
 * a healed partition delivers them later, over an object the space was
 * given to meanwhile (the chaos driver found exactly that). Only a target
 * that refused the range answered for every byte. */
static int may_land_later(const mc_te_status_t *ts)
{
    return ts->state == MC_TE_TIMEOUT || ts->error == MC_ERR_RPC_TIMEOUT ||
           ts->error == MC_ERR_TIMEOUT || ts->error == MC_ERR_CONN_CLOSED;
}

static const char *replica_endpoint(const mc_master_replica_desc_t *d)
{
    return d->te_endpoint[0] != '\0' ? d->te_endpoint : d->segment_name;
}

/* A put config owned by the operation (the caller's is borrowed for the call). */
typedef struct own_cfg {
    mc_master_put_cfg_t cfg;
    const char *pref[MC_PROTO_MAX_PREFERRED];
    char *names; /* the preferred names, back to back */
} own_cfg_t;

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

static mc_status_t cfg_copy(own_cfg_t *o, const mc_replicate_config_t *c, unsigned flags)
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
    int in_doubt;          /* a write timed out: no revoke (may_land_later) */
    int persist;           /* MC_MASTER_PERSIST_* for this put, fixed at P_TIER */
    struct own_copy *copy; /* sync put: own-segment copies left to the caller */
    mc_status_t err;
} put_op_t;

/* A sync put's or batch put's caller: it waits for the op to finish (w),
 * and copies (run) when r0 hands it an op stopped in P_WAIT_COPY or
 * B_WAIT_COPY (op, under w.mu): the copies into our own segment run on the
 * calling thread (the store service's worker) instead of r0's. */
typedef struct own_copy {
    store_waiter_t w;
    store_op_t *op;
    void (*run)(store_op_t *op);
} own_copy_t;

/* r0: hand h (stopped in its WAIT_COPY state) to its caller. r0 touches h
 * no more until the caller posts it back. */
static void own_copy_hand(own_copy_t *c, store_op_t *h)
{
    pthread_mutex_lock(&c->w.mu);
    c->op = h;
    pthread_cond_signal(&c->w.cv);
    pthread_mutex_unlock(&c->w.mu);
}

/* The caller's wait: copy whenever r0 hands it the op, until the op
 * reports; the op's status. */
static mc_status_t own_copy_wait(own_copy_t *c)
{
    store_waiter_t *w = &c->w;
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
    store_stage_put(s, h);
    if (h->batch != NULL && mc_te_batch_free(h->batch) != MC_OK)
        MC_ERROR(CLIENT, "put: transfer batch still busy at the end (leaked)");
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
        if (ts.state != MC_TE_COMPLETED && may_land_later(&ts))
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
        gather(op->parts, op->nparts, 0, h->stage, op->win);
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
        mc_status_t st = store_peer_resolve(op->h.s, &op->h, replica_endpoint(&op->rep[op->nres]),
                                            &op->seg[op->nres]);
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
                replica_endpoint(&op->rep[op->nres]), mc_status_str(st));
        return put_fail(op, st == MC_ERR_CANCELED ? st : MC_ERR_TRANSFER_FAIL);
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
        if (store_range_ok(h->s, op->seg[i], reqs[i].remote, op->plen))
            continue;
        /* The descriptor we hold predates this memory: look again, once. */
        if (op->seg[i] != MC_TE_LOCAL_SEGMENT && !(op->refreshed & (1u << i)) &&
            store_seg_refresh(h, op->seg[i]) == MC_INPROGRESS) {
            op->refreshed |= 1u << i;
            return P_WAIT_REFRESH; /* waiting: the refresh (refresh_cb steps us) */
        }
        MC_WARN(CLIENT, "put '%s': replica 0x%llx+%llu is outside the buffers of segment '%s'",
                PUT_KEY(op, kb), (unsigned long long)reqs[i].remote, (unsigned long long)op->plen,
                replica_endpoint(&op->rep[i]));
        return put_fail(op, MC_ERR_TRANSFER_FAIL);
    }
    if (own)
        return P_WAIT_COPY; /* waiting: the caller's copy (put_step hands it over) */
    mc_status_t st = store_xfer_submit(h, reqs, op->nrep);
    if (st != MC_OK) {
        MC_WARN(CLIENT, "put '%s': cannot submit the transfer: %s", PUT_KEY(op, kb),
                mc_status_str(st));
        return put_fail(op, st == MC_ERR_CANCELED ? st : MC_ERR_TRANSFER_FAIL);
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
        return put_fail(op, xfer_status(op->h.wait_st));
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
        gather(op->parts, op->nparts, op->off, h->stage, n);
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
            copy_into_segment(dst, op->direct + op->off, op->plen);
        else
            gather_with(op->parts, op->nparts, op->off, dst, op->plen, copy_into_segment);
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
            own_copy_hand(op->copy, h); /* the caller owns op until it posts it back */
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
    st = op->key == NULL || op->parts == NULL ? MC_ERR_NOMEM : cfg_copy(&op->cfg, cfg, flags);
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
    op->h.s = s;
    op->h.step = put_step;
    op->h.fail = put_finish;
    op->h.harvest = put_harvest;
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
        gather(parts, nparts, 0, op->h.stage, op->win);
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

/* The caller's *cfg as this library's mc_replicate_config_t, in *tmp (an
 * older, shorter struct gets the defaults of the fields it lacks); NULL stays
 * NULL. Every public call that takes a cfg starts with it. */
static mc_status_t cfg_full(const mc_replicate_config_t **cfg, mc_replicate_config_t *tmp)
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
    own_copy_t c = {.op = NULL, .run = put_copy_run};
    store_waiter_init(&c.w);
    mc_status_t st =
        put_new(s, key, klen, parts, nparts, cfg, flags, &c, pre, store_waiter_status_cb, &c.w);
    if (st != MC_INPROGRESS) {
        c.w.done = 1;
        store_waiter_wait(&c.w);
        return st;
    }
    return own_copy_wait(&c);
}

static mc_status_t put_sync(mc_store_t *s, const void *key, size_t klen, const mc_slice_t *parts,
                            size_t nparts, const mc_replicate_config_t *cfg, unsigned flags)
{
    mc_replicate_config_t full;
    if (s == NULL || cfg_full(&cfg, &full) != MC_OK)
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
    if (cfg_full(&cfg, &full) != MC_OK)
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
        if (strcmp(replica_endpoint(&rep[i]), mc_te_local_name(s->te)) != 0)
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
                    replica_endpoint(&rep[i]));
            st = MC_ERR_TRANSFER_FAIL;
        }
    }
    /* every byte is in place before PutEnd makes the object readable */
    for (uint32_t i = 0; st == MC_OK && i < nrep; i++)
        gather_with(parts, nparts, 0, (uint8_t *)(uintptr_t)rep[i].address, len, copy_into_segment);
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
    if (cfg_full(&cfg, &full) != MC_OK)
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
    if ((st = cfg_copy(&oc, cfg, upsert ? PUT_UPSERT : 0)) != MC_OK)
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

/* ============================================================ batch put */

typedef enum bput_state {
    B_STAGE,        /* staging for every value at once, copy them (skipped: direct) */
    B_START,        /* send BatchPutStart */
    B_WAIT_START,   /* waiting: per-key statuses and replicas */
    B_RESOLVE,      /* open every replica's segment, one at a time */
    B_WAIT_PEER,    /* waiting: a segment open */
    B_SUBMIT,       /* one transfer batch for every replica of every started key */
    B_WAIT_REFRESH, /* waiting: a fresh descriptor */
    B_WAIT_XFER,    /* waiting: the transfer batch */
    B_WAIT_COPY,    /* waiting: the sync caller's copies into our own segment (bput_copy_run) */
    B_END,          /* BatchPutEnd for the keys fully written */
    B_WAIT_END,     /* waiting: per-key statuses of BatchPutEnd */
    B_REVOKE,       /* BatchPutRevoke for the started keys that failed */
    B_WAIT_REVOKE,  /* waiting: BatchPutRevoke's answer */
    B_DONE,         /* report: err for the keys still OK, else their own status */
    B_NSTATES
} bput_state_t;

typedef struct bput_op {
    store_op_t h;
    bput_state_t state;
    size_t n;                /* keys sent (the valid ones) */
    mc_master_key_t *keys;   /* caller's memory (sync call) */
    const mc_slice_t *parts; /* the caller's pieces; key i's: pcount[i] from pfirst[i] */
    size_t *pfirst, *pcount;
    uint64_t *sizes;
    uint64_t *offs; /* staging offset of each value */
    int direct;     /* every value registered */
    own_cfg_t cfg;
    uint32_t per;                  /* replicas asked for per key */
    mc_status_t *st;               /* per key: outcome so far */
    uint8_t *started;              /* per key: PutStart succeeded; 2: in doubt (no revoke) */
    mc_master_replica_desc_t *rep; /* n * per */
    uint32_t *nrep;
    mc_te_segment_t *seg; /* n * per */
    size_t rk, rj;        /* resolve cursor: key, replica */
    mc_te_segment_t refreshed[16];
    unsigned nrefreshed;
    mc_te_request_t *reqs; /* n * per: the transfer's requests (no allocation per submit) */
    size_t *task_key;      /* transfer task -> key */
    size_t ntasks;
    mc_status_t err;      /* the whole batch failed before the transfer (B_DONE reports it) */
    mc_master_key_t *sub; /* keys of an End/Revoke call */
    size_t *sub_idx;
    size_t nsub;
    mc_status_t call_err; /* a whole End/Revoke call failed */
    mc_status_t *sub_st;
    mc_status_t *out_st; /* the caller's per-key results (sync call) */
    const size_t *orig;  /* key j of the batch is the caller's orig[j] */
    mc_store_cb_t cb;
    void *arg;
    struct own_copy *copy; /* sync batch: own-segment copies left to the caller */
} bput_op_t;

static void bput_finish(store_op_t *h, mc_status_t st)
{
    bput_op_t *op = (bput_op_t *)h;
    mc_store_t *s = h->s;
    store_stage_put(s, h);
    if (h->batch != NULL && mc_te_batch_free(h->batch) != MC_OK)
        MC_ERROR(CLIENT, "batch put: transfer batch still busy at the end (leaked)");
    for (size_t i = 0; i < op->n; i++)
        op->out_st[op->orig[i]] = st != MC_OK && op->st[i] == MC_OK ? st : op->st[i];
    op->cb(op->arg, st);
    mc_free(op->cfg.names);
    mc_free(op);
    store_live_dec(s);
}

static void bput_decode_start(store_op_t *h, const mc_rpc_resp_t *resp)
{
    bput_op_t *op = (bput_op_t *)h;
    size_t got = 0;
    if (mc_mcli_dec_items(resp->body, resp->body_len, op->st, op->rep, op->per, op->nrep, op->n,
                          &got, NULL) != MC_OK ||
        got != op->n)
        h->wait_st = MC_ERR_PROTOCOL;
}

static void bput_decode_statuses(store_op_t *h, const mc_rpc_resp_t *resp)
{
    bput_op_t *op = (bput_op_t *)h;
    size_t got = 0;
    if (mc_mcli_dec_statuses(resp->body, resp->body_len, op->sub_st, NULL, op->nsub, &got) !=
            MC_OK ||
        got != op->nsub)
        h->wait_st = MC_ERR_PROTOCOL;
}

/* Keys for End (ok) or Revoke (started and failed) into op->sub. */
static size_t bput_select(bput_op_t *op, int for_end)
{
    size_t k = 0;
    for (size_t i = 0; i < op->n; i++) {
        if (!op->started[i] || (for_end ? op->st[i] != MC_OK : op->st[i] == MC_OK) ||
            (!for_end && op->started[i] == 2))
            continue;
        op->sub[k] = op->keys[i];
        op->sub_idx[k++] = i;
    }
    op->nsub = k;
    return k;
}

/* In the transfer callback: keys with a failed replica write. */
static void bput_harvest(store_op_t *h, mc_te_batch_t *b)
{
    bput_op_t *op = (bput_op_t *)h;
    for (size_t t = 0; t < op->ntasks; t++) {
        mc_te_status_t ts;
        mc_te_task_status(b, t, &ts);
        size_t i = op->task_key[t];
        if (ts.state == MC_TE_COMPLETED)
            continue;
        if (may_land_later(&ts))
            op->started[i] = 2;
        if (op->st[i] == MC_OK) {
            MC_WARN(CLIENT, "batch put: a replica write of key %zu failed: %s", i,
                    mc_status_str(ts.error));
            op->st[i] = xfer_status(ts.error);
        }
    }
}

static int bput_was_refreshed(const bput_op_t *op, mc_te_segment_t h)
{
    for (unsigned i = 0; i < op->nrefreshed; i++)
        if (op->refreshed[i] == h)
            return 1;
    return 0;
}

/* The state handlers of bput_step, as put's: each returns the next state;
 * one that starts an asynchronous step returns the B_WAIT_* state that
 * receives its outcome; B_STAGE returns itself while it waits for room. */

static bput_state_t bput_stage(bput_op_t *op)
{
    store_op_t *h = &op->h;
    if (op->direct)
        return B_START;
    if (h->stage == NULL) {
        uint64_t total = op->offs[op->n - 1] + op->sizes[op->n - 1];
        mc_status_t st = store_stage_get(h->s, h, total);
        if (st == MC_INPROGRESS)
            return B_STAGE; /* waiting: staging room (stage_kick steps us) */
        if (st != MC_OK) {
            op->err = st;
            return B_DONE;
        }
    }
    for (size_t i = 0; i < op->n; i++)
        gather(op->parts + op->pfirst[i], op->pcount[i], 0, h->stage + op->offs[i], op->sizes[i]);
    return B_START;
}

static bput_state_t bput_start(bput_op_t *op)
{
    mc_store_t *s = op->h.s;
    mc_mp_writer_t *w = mc_rpc_call_begin(s->mcli);
    mc_mcli_batch_put_start(w, s->client_id, op->keys, op->sizes, op->n, &op->cfg.cfg);
    mc_status_t st = store_rpc_end(&op->h, MC_RPC_BATCH_PUT_START, bput_decode_start);
    if (st != MC_INPROGRESS) {
        op->err = st;
        return B_DONE;
    }
    return B_WAIT_START;
}

static bput_state_t bput_started(bput_op_t *op)
{
    if (op->h.wait_st != MC_OK) {
        MC_DEBUG(CLIENT, "batch put of %zu keys: BatchPutStart: %s", op->n,
                 mc_status_str(op->h.wait_st));
        op->err = op->h.wait_st;
        return B_DONE;
    }
    for (size_t i = 0; i < op->n; i++) {
        op->started[i] = op->st[i] == MC_OK;
        if (op->started[i] && op->nrep[i] == 0)
            op->st[i] = MC_ERR_INTERNAL_ERROR;
    }
    return B_RESOLVE;
}

/* Open every replica's segment, one at a time (cursor rk, rj). */
static bput_state_t bput_resolve(bput_op_t *op)
{
    while (op->rk < op->n) {
        if (op->st[op->rk] != MC_OK || op->rj >= op->nrep[op->rk]) {
            op->rk++;
            op->rj = 0;
            continue;
        }
        size_t at = op->rk * op->per + op->rj;
        mc_status_t st =
            store_peer_resolve(op->h.s, &op->h, replica_endpoint(&op->rep[at]), &op->seg[at]);
        if (st == MC_INPROGRESS)
            return B_WAIT_PEER; /* waiting: a segment open (peer_open_cb steps us) */
        if (st != MC_OK)
            op->st[op->rk] = st;
        else
            op->rj++;
    }
    return B_SUBMIT;
}

static bput_state_t bput_peer_opened(bput_op_t *op)
{
    size_t at = op->rk * op->per + op->rj;
    if (op->h.wait_st != MC_OK) {
        MC_WARN(CLIENT, "batch put: cannot open segment '%s': %s", replica_endpoint(&op->rep[at]),
                mc_status_str(op->h.wait_st));
        op->st[op->rk] = MC_ERR_TRANSFER_FAIL;
    } else {
        op->seg[at] = op->h.opened;
        op->rj++;
    }
    return B_RESOLVE;
}

/* Fill op->reqs with a write per replica of every key still OK; a key with
 * a replica outside what we know of its segment fails, unless that segment
 * can still be refreshed once: then 0 (a refresh is in flight). Else the
 * number of requests. */
static int bput_requests(bput_op_t *op, size_t *nreq)
{
    store_op_t *h = &op->h;
    size_t k = 0;
    for (size_t i = 0; i < op->n; i++) {
        if (op->st[i] != MC_OK)
            continue;
        size_t first = k;
        for (uint32_t j = 0; j < op->nrep[i]; j++) {
            size_t at = i * op->per + j;
            if (!store_range_ok(h->s, op->seg[at], op->rep[at].address, op->sizes[i])) {
                if (op->seg[at] != MC_TE_LOCAL_SEGMENT && !bput_was_refreshed(op, op->seg[at]) &&
                    op->nrefreshed < MC_ARRAY_SIZE(op->refreshed) &&
                    store_seg_refresh(h, op->seg[at]) == MC_INPROGRESS) {
                    op->refreshed[op->nrefreshed++] = op->seg[at];
                    return 0;
                }
                op->st[i] = MC_ERR_TRANSFER_FAIL;
                k = first;
                break;
            }
            if (!op->direct) { /* one write from the staged copy */
                op->reqs[k] = (mc_te_request_t){.opcode = MC_TE_WRITE,
                                                .local = h->stage + op->offs[i],
                                                .segment = op->seg[at],
                                                .remote = op->rep[at].address,
                                                .length = op->sizes[i]};
                op->task_key[k++] = i;
                continue;
            }
            uint64_t off = 0; /* in place: one write per piece */
            for (size_t q = 0; q < op->pcount[i]; q++) {
                const mc_slice_t *pc = &op->parts[op->pfirst[i] + q];
                if (pc->len == 0)
                    continue;
                op->reqs[k] = (mc_te_request_t){.opcode = MC_TE_WRITE,
                                                .local = pc->ptr,
                                                .segment = op->seg[at],
                                                .remote = op->rep[at].address + off,
                                                .length = pc->len};
                op->task_key[k++] = i;
                off += pc->len;
            }
        }
    }
    *nreq = k;
    return 1;
}

/* One transfer batch for every replica of every started key. */
static bput_state_t bput_submit(bput_op_t *op)
{
    size_t k = 0;
    if (!bput_requests(op, &k))
        return B_WAIT_REFRESH; /* waiting: a refresh (refresh_cb steps us) */
    op->ntasks = k;
    if (k == 0)
        return B_REVOKE;
    int own = op->copy != NULL;
    for (size_t i = 0; own && i < k; i++)
        own = op->reqs[i].segment == MC_TE_LOCAL_SEGMENT;
    if (own)
        return B_WAIT_COPY; /* waiting: the caller's copies (bput_step hands them over) */
    mc_status_t st = store_xfer_submit(&op->h, op->reqs, k);
    if (st != MC_OK) {
        MC_WARN(CLIENT, "batch put: cannot submit the transfer: %s", mc_status_str(st));
        for (size_t i = 0; i < op->n; i++)
            if (op->st[i] == MC_OK)
                op->st[i] = xfer_status(st);
        return B_REVOKE;
    }
    return B_WAIT_XFER; /* waiting: the batch (store_xfer_cb posts us) */
}

static bput_state_t bput_refreshed(bput_op_t *op)
{
    (void)op;
    return B_SUBMIT; /* a failed refresh shows as a bad range again */
}

static bput_state_t bput_written(bput_op_t *op)
{
    store_stage_put(op->h.s, &op->h); /* bput_harvest marked the keys that failed */
    return B_END;
}

static bput_state_t bput_ended(bput_op_t *op)
{
    for (size_t k = 0; k < op->nsub; k++)
        op->st[op->sub_idx[k]] = op->h.wait_st != MC_OK ? op->h.wait_st : op->sub_st[k];
    return B_REVOKE;
}

/* BatchPutEnd for the keys fully written. */
static bput_state_t bput_end(bput_op_t *op)
{
    mc_store_t *s = op->h.s;
    if (bput_select(op, 1) == 0)
        return B_REVOKE;
    mc_mp_writer_t *w = mc_rpc_call_begin(s->mcli);
    mc_mcli_client_keys(w, s->client_id, op->sub, op->nsub);
    mc_status_t st = store_rpc_end(&op->h, MC_RPC_BATCH_PUT_END, bput_decode_statuses);
    if (st != MC_INPROGRESS) {
        op->h.wait_st = st; /* every key of the call failed so */
        return bput_ended(op);
    }
    return B_WAIT_END;
}

/* BatchPutRevoke for the started keys that failed. */
static bput_state_t bput_revoke(bput_op_t *op)
{
    mc_store_t *s = op->h.s;
    store_stage_put(s, &op->h);
    if (bput_select(op, 0) == 0)
        return B_DONE;
    mc_mp_writer_t *w = mc_rpc_call_begin(s->mcli);
    mc_mcli_client_keys(w, s->client_id, op->sub, op->nsub);
    return store_rpc_end(&op->h, MC_RPC_BATCH_PUT_REVOKE, bput_decode_statuses) == MC_INPROGRESS
               ? B_WAIT_REVOKE
               : B_DONE;
}

static bput_state_t bput_revoked(bput_op_t *op)
{
    if (op->h.wait_st != MC_OK)
        MC_WARN(CLIENT, "batch put: BatchPutRevoke of %zu keys: %s", op->nsub,
                mc_status_str(op->h.wait_st));
    return B_DONE;
}

/* The machine's table: each state's handler and whether bput_step stops
 * there. B_DONE has no handler: it reports. */
static const struct {
    bput_state_t (*fn)(bput_op_t *op);
    int wait;
} bput_table[B_NSTATES] = {
    [B_STAGE] = {bput_stage, 0},
    [B_START] = {bput_start, 0},
    [B_WAIT_START] = {bput_started, 1},
    [B_RESOLVE] = {bput_resolve, 0},
    [B_WAIT_PEER] = {bput_peer_opened, 1},
    [B_SUBMIT] = {bput_submit, 0},
    [B_WAIT_REFRESH] = {bput_refreshed, 1},
    [B_WAIT_XFER] = {bput_written, 1},
    [B_WAIT_COPY] = {bput_written, 1},
    [B_END] = {bput_end, 0},
    [B_WAIT_END] = {bput_ended, 1},
    [B_REVOKE] = {bput_revoke, 0},
    [B_WAIT_REVOKE] = {bput_revoked, 1},
};

/* The caller's thread: every write of op->reqs (all into our own segment,
 * ranges checked by bput_requests), then step op on r0 again. */
static void bput_copy_run(store_op_t *h)
{
    bput_op_t *op = (bput_op_t *)h;
    for (size_t i = 0; i < op->ntasks; i++) {
        const mc_te_request_t *q = &op->reqs[i];
        copy_into_segment((void *)(uintptr_t)q->remote, q->local, q->length);
    }
    op->h.wait_st = MC_OK;
    store_op_post(&op->h);
}

static void bput_step(store_op_t *h)
{
    bput_op_t *op = (bput_op_t *)h;
    for (;;) {
        if (store_op_closing(h)) {
            bput_finish(h, MC_ERR_CANCELED);
            return;
        }
        bput_state_t from = op->state;
        if (from == B_DONE) {
            bput_finish(h, op->err);
            return;
        }
        assert(from < B_NSTATES && bput_table[from].fn != NULL);
        bput_state_t to = bput_table[from].fn(op);
        op->state = to;
        if (to == B_WAIT_COPY) {
            own_copy_hand(op->copy, h); /* the caller owns op until it posts it back */
            return;
        }
        if (to == from || bput_table[to].wait)
            return;
    }
}

/* Batch put through n single puts in parallel (values too large for one
 * staging window together). */
static void fanout_put_cb(void *arg, mc_status_t st)
{
    store_fanout_get_cb(arg, st);
}

static mc_status_t batch_put_fanout(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *parts,
                                    const size_t *pfirst, const size_t *pcount, const size_t *idx,
                                    size_t nv, const mc_replicate_config_t *cfg, unsigned flags,
                                    mc_status_t *st)
{
    store_fanout_item_t *items = mc_calloc(nv, sizeof(*items));
    int64_t *res = mc_calloc(nv, sizeof(*res));
    if (items == NULL || res == NULL) {
        mc_free(items);
        mc_free(res);
        return MC_ERR_NOMEM;
    }
    store_fanout_t f;
    store_fanout_init(&f);
    for (size_t j = 0; j < nv; j++) {
        size_t i = idx[j];
        items[j] = (store_fanout_item_t){&f, &res[j]};
        store_fanout_add(&f);
        mc_status_t r = store_put_submit(s, keys[i].ptr, keys[i].len, parts + pfirst[i], pcount[i],
                                         cfg, flags, fanout_put_cb, &items[j]);
        if (r != MC_INPROGRESS) {
            res[j] = r;
            store_fanout_cancel(&f);
        }
    }
    store_fanout_wait(&f);
    for (size_t j = 0; j < nv; j++)
        st[idx[j]] = (mc_status_t)res[j];
    mc_free(items);
    mc_free(res);
    return MC_OK;
}

/* The batch put op for the nv valid keys idx[] of keys/values: one
 * allocation for the op and its arrays. MC_OK and *out, or an error. */
/* The operation of a batch put of the keys idx[0 .. nv): key i's value is
 * parts[pf[i] .. + pc[i]), npieces pieces in all; one allocation for it and
 * its arrays. */
static mc_status_t bput_op_new(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *parts,
                               const size_t *pf, const size_t *pc, size_t npieces,
                               const size_t *idx, size_t nv, const mc_replicate_config_t *cfg,
                               unsigned flags, int all_direct, mc_status_t *st, bput_op_t **out)
{
    own_cfg_t oc;
    mc_status_t rc = cfg_copy(&oc, cfg, flags);
    if (rc != MC_OK)
        return rc;
    uint32_t per = oc.cfg.replica_num;
    /* one write per replica of each value, or per replica of each piece */
    size_t nreq = npieces > nv ? npieces : nv;
    size_t sz = sizeof(bput_op_t) +
                nv * (sizeof(mc_master_key_t) * 2 + sizeof(uint64_t) * 2 + sizeof(mc_status_t) * 2 +
                      1 + sizeof(uint32_t) + sizeof(size_t) * 4) +
                nv * per * (sizeof(mc_master_replica_desc_t) + sizeof(mc_te_segment_t)) +
                nreq * per * (sizeof(mc_te_request_t) + sizeof(size_t)) + 64;
    bput_op_t *op = mc_calloc(1, sz);
    if (op == NULL) {
        mc_free(oc.names);
        return MC_ERR_NOMEM;
    }
    /* carve, most aligned first */
    uint8_t *p = (uint8_t *)(op + 1);
    op->reqs = (mc_te_request_t *)p;
    p += nreq * per * sizeof(mc_te_request_t);
    op->rep = (mc_master_replica_desc_t *)p;
    p += nv * per * sizeof(mc_master_replica_desc_t);
    op->keys = (mc_master_key_t *)p;
    p += nv * sizeof(mc_master_key_t);
    op->sub = (mc_master_key_t *)p;
    p += nv * sizeof(mc_master_key_t);
    op->sizes = (uint64_t *)p;
    p += nv * sizeof(uint64_t);
    op->offs = (uint64_t *)p;
    p += nv * sizeof(uint64_t);
    op->seg = (mc_te_segment_t *)p;
    p += nv * per * sizeof(mc_te_segment_t);
    op->task_key = (size_t *)p;
    p += nreq * per * sizeof(size_t);
    op->sub_idx = (size_t *)p;
    p += nv * sizeof(size_t);
    size_t *orig = (size_t *)p;
    p += nv * sizeof(size_t);
    op->pfirst = (size_t *)p;
    p += nv * sizeof(size_t);
    op->pcount = (size_t *)p;
    p += nv * sizeof(size_t);
    op->st = (mc_status_t *)p;
    p += nv * sizeof(mc_status_t);
    op->sub_st = (mc_status_t *)p;
    p += nv * sizeof(mc_status_t);
    op->nrep = (uint32_t *)p;
    p += nv * sizeof(uint32_t);
    op->started = p;

    uint64_t off = 0;
    for (size_t j = 0; j < nv; j++) {
        size_t i = idx[j];
        orig[j] = i;
        op->keys[j].data = keys[i].ptr;
        op->keys[j].len = keys[i].len;
        op->pfirst[j] = pf[i];
        op->pcount[j] = pc[i];
        uint64_t len = 0;
        for (size_t q = 0; q < pc[i]; q++)
            len += parts[pf[i] + q].len;
        op->sizes[j] = len;
        op->offs[j] = off;
        off += (len + MC_OALLOC_ALIGN - 1) & ~(uint64_t)(MC_OALLOC_ALIGN - 1);
    }
    op->parts = parts;
    op->n = nv;
    op->direct = all_direct;
    op->cfg = oc;
    if (oc.names != NULL)
        op->cfg.cfg.preferred_segments = op->cfg.pref; /* pref moved with the struct */
    op->per = per;
    op->out_st = st;
    op->orig = orig;
    op->h.s = s;
    op->h.step = bput_step;
    op->h.fail = bput_finish;
    op->h.harvest = bput_harvest;
    op->state = B_STAGE;
    *out = op;
    return MC_OK;
}

/* A co-located client's batch put: one call to the service for values of
 * one piece each; a put per key for values in pieces. */
static mc_status_t dummy_batch_put(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *parts,
                                   const size_t *nparts, size_t n, const mc_replicate_config_t *cfg,
                                   int upsert, mc_status_t *st)
{
    if (n == 0)
        return MC_OK;
    if (nparts == NULL)
        return store_dummy_batch_put(s, keys, parts, n, cfg, upsert, st);
    for (size_t i = 0, at = 0; i < n; at += nparts[i++])
        st[i] = store_dummy_put(s, keys[i].ptr, keys[i].len, parts + at, nparts[i], cfg, upsert);
    return MC_OK;
}

/* Batch put of n keys whose values are pieces: key i's are parts[pfirst[i]
 * .. + pcount[i]) (pfirst/pcount NULL: one piece each, parts[i]). */
static mc_status_t batch_put(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *parts,
                             const size_t *nparts, size_t n, const mc_replicate_config_t *cfg,
                             unsigned flags, mc_status_t *st)
{
    mc_replicate_config_t full;
    if (s == NULL || st == NULL || (n > 0 && (keys == NULL || parts == NULL)) ||
        cfg_full(&cfg, &full) != MC_OK)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL)
        return dummy_batch_put(s, keys, parts, nparts, n, cfg, (flags & PUT_UPSERT) != 0, st);
    if (store_on_reactor(s))
        return MC_ERR_STATE;
    if (n == 0)
        return MC_OK;
    /* Per key checks; the valid ones go on. idx: the valid keys; pf, pc: every
     * key's first piece and count. */
    size_t *idx = mc_calloc(3 * n, sizeof(*idx));
    if (idx == NULL)
        return MC_ERR_NOMEM;
    size_t *pf = idx + n, *pc = idx + 2 * n;
    size_t nv = 0, npieces = 0, at = 0;
    uint64_t total = 0;
    int all_direct = 1, gpu = 0;
    for (size_t i = 0; i < n; i++) {
        pf[i] = at;
        pc[i] = nparts != NULL ? nparts[i] : 1;
        at += pc[i];
        st[i] = store_check_key(keys[i].ptr, keys[i].len);
        uint64_t len = 0;
        int direct = 1;
        for (size_t q = 0; q < pc[i] && st[i] == MC_OK; q++) {
            const mc_slice_t *p = &parts[pf[i] + q];
            if ((p->len > 0 && p->ptr == NULL) || len + p->len < len)
                st[i] = MC_ERR_INVALID_PARAMS;
            len += p->len;
            if (p->len > 0 && !te_local_range_ok(s->te, p->ptr, p->len, 0))
                direct = 0;
            if (p->len > 0 && te_gpu_of(p->ptr) >= 0)
                gpu = 1;
        }
        if (st[i] == MC_OK && len == 0)
            st[i] = MC_ERR_INVALID_PARAMS;
        if (st[i] != MC_OK)
            continue;
        idx[nv++] = i;
        npieces += pc[i];
        total += (len + MC_OALLOC_ALIGN - 1) & ~(uint64_t)(MC_OALLOC_ALIGN - 1);
        if (!direct && (s->stage_alloc == NULL || !store_inplace_ok(s)))
            all_direct = 0;
    }
    mc_status_t rc = MC_OK;
    if (nv == 0)
        goto out;
    /* with a tier, keys go one by one: each put writes its own file; GPU
     * values too: each single put bounces its value through host memory */
    int tier = store_tier_mode(s) != MC_MASTER_PERSIST_OFF;
    if (tier || gpu ||
        (!all_direct && (s->stage_alloc == NULL || store_stage_window(s, total) < total))) {
        if ((!all_direct || gpu) && s->stage_alloc == NULL) {
            for (size_t j = 0; j < nv; j++)
                st[idx[j]] = MC_ERR_STATE;
            goto out;
        }
        rc = batch_put_fanout(s, keys, parts, pf, pc, idx, nv, cfg, flags, st);
        goto out;
    }

    bput_op_t *op;
    rc = bput_op_new(s, keys, parts, pf, pc, npieces, idx, nv, cfg, flags, all_direct, st, &op);
    if (rc != MC_OK)
        goto out;
    own_copy_t c = {.op = NULL, .run = bput_copy_run};
    store_waiter_init(&c.w);
    op->cb = store_waiter_status_cb;
    op->arg = &c.w;
    op->copy = &c;
    rc = store_op_submit(&op->h);
    if (rc != MC_INPROGRESS) {
        c.w.done = 1;
        store_waiter_wait(&c.w);
        mc_free(op->cfg.names);
        mc_free(op);
        goto out;
    }
    /* bput_finish writes st[] before it calls back */
    (void)own_copy_wait(&c);
    rc = MC_OK;
out:
    mc_free(idx);
    return rc;
}

mc_status_t mc_store_batch_put(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *values,
                               size_t n, const mc_replicate_config_t *cfg, mc_status_t *st)
{
    return batch_put(s, keys, values, NULL, n, cfg, 0, st);
}

mc_status_t mc_store_batch_upsert(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *values,
                                  size_t n, const mc_replicate_config_t *cfg, mc_status_t *st)
{
    return batch_put(s, keys, values, NULL, n, cfg, PUT_UPSERT, st);
}

mc_status_t mc_store_batch_put_parts(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *parts,
                                     const size_t *nparts, size_t n,
                                     const mc_replicate_config_t *cfg, mc_status_t *st)
{
    if (n > 0 && nparts == NULL)
        return MC_ERR_INVALID_PARAMS;
    return batch_put(s, keys, parts, nparts, n, cfg, 0, st);
}

mc_status_t mc_store_batch_upsert_parts(mc_store_t *s, const mc_slice_t *keys,
                                        const mc_slice_t *parts, const size_t *nparts, size_t n,
                                        const mc_replicate_config_t *cfg, mc_status_t *st)
{
    if (n > 0 && nparts == NULL)
        return MC_ERR_INVALID_PARAMS;
    return batch_put(s, keys, parts, nparts, n, cfg, PUT_UPSERT, st);
}
