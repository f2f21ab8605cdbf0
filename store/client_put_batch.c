/*
 * client_put_batch.c - batch put (mooncake/store.h): BatchPutStart for
 * every key, one transfer batch for all of them, BatchPutEnd for those
 * written and BatchPutRevoke for the others. It needs every value in the
 * staging buffer at once (or all registered); otherwise, and with a
 * persistent tier or GPU memory, the keys are put one by one, in parallel
 * (store_put_submit). A sync batch whose writes all go to our own segment
 * leaves them to the calling thread, as a sync put does (client_put.c).
 */
#include <assert.h>
#include <string.h>

#include "rpc/methods.h"
#include "store/client_put_int.h"
#include "store/master_client.h"
#include "util/log.h"
#include "util/mem.h"

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
    store_op_release(h, "batch put");
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
        if (put_may_land_later(&ts))
            op->started[i] = 2;
        if (op->st[i] == MC_OK) {
            MC_WARN(CLIENT, "batch put: a replica write of key %zu failed: %s", i,
                    mc_status_str(ts.error));
            op->st[i] = put_xfer_status(ts.error);
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
        put_gather(op->parts + op->pfirst[i], op->pcount[i], 0, h->stage + op->offs[i],
                   op->sizes[i]);
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
            store_peer_resolve(op->h.s, &op->h, put_replica_endpoint(&op->rep[at]), &op->seg[at]);
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
        MC_WARN(CLIENT, "batch put: cannot open segment '%s': %s",
                put_replica_endpoint(&op->rep[at]), mc_status_str(op->h.wait_st));
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
            mc_status_t rs = put_range_check(h, op->seg[at], op->rep[at].address, op->sizes[i],
                                             op->nrefreshed < MC_ARRAY_SIZE(op->refreshed) &&
                                                 !bput_was_refreshed(op, op->seg[at]));
            if (rs == MC_INPROGRESS) {
                op->refreshed[op->nrefreshed++] = op->seg[at];
                return 0;
            }
            if (rs != MC_OK) {
                op->st[i] = rs;
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
                op->st[i] = put_xfer_status(st);
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
        put_copy_into_segment((void *)(uintptr_t)q->remote, q->local, q->length);
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
            put_copy_hand(op->copy, h); /* the caller owns op until it posts it back */
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
    mc_status_t rc = put_cfg_copy(&oc, cfg, flags);
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
    store_op_init(&op->h, s, bput_step, bput_finish, bput_harvest);
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
        put_cfg_full(&cfg, &full) != MC_OK)
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
    own_copy_t c;
    put_copy_init(&c, bput_copy_run);
    op->cb = store_waiter_status_cb;
    op->arg = &c.w;
    op->copy = &c;
    rc = store_op_submit(&op->h);
    /* bput_finish writes st[] before it calls back */
    (void)put_copy_wait(&c, rc);
    if (rc != MC_INPROGRESS) {
        mc_free(op->cfg.names);
        mc_free(op);
        goto out;
    }
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
