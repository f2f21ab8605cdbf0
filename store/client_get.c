/*
 * client_get.c - get, batch get, get_size and query (mooncake/store.h).
 *
 * A get asks the master for the object's COMPLETE replicas (which grants a
 * read lease), then reads one: a replica in this process's own segment first
 * (a plain memcpy), then the others in the master's order. A replica whose
 * segment cannot be opened or whose transfer fails is skipped: the read goes
 * on with the next replica from the byte where it stopped (every replica
 * holds the same bytes). The lease is measured from when GetReplicaList was
 * sent: a read that ends after it may have raced with eviction or removal,
 * so it fails with LEASE_EXPIRED instead of returning bytes that may be
 * stale.
 *
 * Data lands in the caller's buffer directly when it is registered
 * (get_into) or when the transports need no registration (tcp: see
 * store_direct_ok), else in the staging buffer in windows of at most its
 * size, each copied out as it arrives. A sync get of a replica in our own
 * segment leaves the copy to the calling thread (get_sync): r0 only hands
 * out the address, so several callers copy in parallel instead of one
 * reactor thread copying for all of them; the lease is checked after the
 * copy, as on r0.
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "rpc/methods.h"
#include "store/client_int.h"
#include "store/master_client.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

typedef enum get_state {
    G_LIST,         /* send GetReplicaList */
    G_WAIT_LIST,    /* waiting: the replicas and the lease */
    G_PICK,         /* next replica to read from (own segment first) */
    G_WAIT_PEER,    /* waiting: its segment opens */
    G_STAGE,        /* a staging window (skipped when reading straight into buf) */
    G_SUBMIT,       /* read the current piece */
    G_WAIT_REFRESH, /* waiting: a fresh descriptor of the replica's segment */
    G_WAIT_XFER,    /* waiting: the piece's transfer */
    G_NEXT,         /* copy the piece out; next piece, or done */
    G_DONE,         /* report result */
} get_state_t;

typedef struct get_op {
    store_op_t h;
    get_state_t state;
    mc_store_get_cb_t cb;
    void *arg;
    char *key;
    size_t klen;
    uint8_t *buf; /* the caller's, borrowed until cb */
    size_t len;
    uint64_t *need;
    mc_master_replica_desc_t rep[STORE_MAX_REPLICAS];
    uint32_t nrep;
    uint32_t order[STORE_MAX_REPLICAS]; /* replicas in the order to try */
    uint32_t norder, tried;
    uint32_t cur;        /* replica being read */
    unsigned refreshed;  /* bit per replica */
    mc_te_segment_t seg; /* of cur */
    uint64_t size;       /* the object's */
    uint64_t lease_us;
    uint64_t t_sent_us; /* when GetReplicaList left */
    int direct;         /* read straight into buf (store_direct_ok) */
    struct get_defer *defer; /* sync get: own-segment copy left to the caller */
    uint64_t win, off, plen;
    mc_status_t last_err; /* why the last replica failed */
    int64_t result;
} get_op_t;

/* A sync get's own-segment copy, done by the calling thread after the
 * operation finished (n = 0: nothing left to copy). */
typedef struct get_defer {
    const uint8_t *src;
    uint8_t *dst;
    uint64_t n;
    uint64_t deadline_us; /* lease end, 0 = none */
} get_defer_t;

static const char *endpoint(const mc_master_replica_desc_t *d)
{
    return d->te_endpoint[0] != '\0' ? d->te_endpoint : d->segment_name;
}

static void get_finish(store_op_t *h, mc_status_t st)
{
    get_op_t *op = (get_op_t *)h;
    mc_store_t *s = h->s;
    store_stage_put(s, h);
    if (h->batch != NULL && mc_te_batch_free(h->batch) != MC_OK)
        MC_ERROR(CLIENT, "get: transfer batch still busy at the end (leaked)");
    op->cb(op->arg, st != MC_OK ? (int64_t)st : op->result);
    mc_free(op->key);
    mc_free(op);
    store_live_dec(s);
}

static void get_decode_list(store_op_t *h, const mc_rpc_resp_t *resp)
{
    get_op_t *op = (get_op_t *)h;
    if (mc_mcli_dec_replicas(resp->body, resp->body_len, op->rep, STORE_MAX_REPLICAS, &op->nrep,
                             &op->lease_us) != MC_OK)
        h->wait_st = MC_ERR_PROTOCOL;
}

static int lease_over(const get_op_t *op)
{
    return op->lease_us > 0 && mc_now_us() > op->t_sent_us + op->lease_us;
}

/* Replicas to try: COMPLETE ones; our own segment's first, then the others
 * in the master's order, those on segments that failed us lately last (a
 * dead node stays listed until the master expires it). */
static void order_replicas(mc_store_t *s, get_op_t *op)
{
    const char *self = mc_te_local_name(s->te);
    int rank[STORE_MAX_REPLICAS];
    for (uint32_t i = 0; i < op->nrep; i++) {
        const char *ep = endpoint(&op->rep[i]);
        rank[i] = strcmp(ep, self) == 0 ? 0 : store_peer_suspect(s, ep) ? 2 : 1;
    }
    op->norder = 0;
    for (int pass = 0; pass < 3; pass++)
        for (uint32_t i = 0; i < op->nrep; i++)
            if (op->rep[i].status == MC_MASTER_REPLICA_COMPLETE && rank[i] == pass)
                op->order[op->norder++] = i;
}

static void get_step(store_op_t *h)
{
    get_op_t *op = (get_op_t *)h;
    mc_store_t *s = h->s;
    mc_status_t st;

    for (;;) {
        if (store_op_closing(h)) {
            get_finish(h, MC_ERR_CANCELED);
            return;
        }
        switch (op->state) {
        case G_LIST: {
            mc_mp_writer_t *w = mc_rpc_call_begin(s->mcli);
            mc_mcli_key(w, op->key, op->klen);
            op->t_sent_us = mc_now_us();
            st = store_rpc_end(h, MC_RPC_GET_REPLICA_LIST, get_decode_list);
            if (st != MC_INPROGRESS) {
                get_finish(h, st);
                return;
            }
            op->state = G_WAIT_LIST;
            return; /* waiting: the master */
        }

        case G_WAIT_LIST:
            if (h->wait_st != MC_OK) {
                get_finish(h, h->wait_st);
                return;
            }
            order_replicas(s, op);
            if (op->norder == 0) {
                get_finish(h, MC_ERR_OBJECT_NOT_FOUND);
                return;
            }
            op->size = op->rep[op->order[0]].size;
            if (op->size > op->len) {
                if (op->need != NULL)
                    *op->need = op->size;
                get_finish(h, MC_ERR_BUFFER_OVERFLOW);
                return;
            }
            op->direct = store_direct_ok(s, op->buf, op->size);
            op->win = op->direct ? op->size : store_stage_window(s, op->size);
            op->last_err = MC_ERR_TRANSFER_FAIL;
            op->state = G_PICK;
            break;

        case G_PICK:
            if (lease_over(op)) {
                get_finish(h, MC_ERR_LEASE_EXPIRED);
                return;
            }
            if (op->tried >= op->norder) {
                get_finish(h, op->last_err);
                return;
            }
            op->cur = op->order[op->tried++];
            if (strcmp(endpoint(&op->rep[op->cur]), mc_te_local_name(s->te)) == 0) {
                /* our own segment: copy, after checking it is memory we expose */
                const mc_master_replica_desc_t *d = &op->rep[op->cur];
                if (te_local_range_ok(s->te, (const void *)(uintptr_t)d->address, op->size, 1)) {
                    const uint8_t *src = (const uint8_t *)(uintptr_t)d->address + op->off;
                    if (op->defer != NULL) {
                        op->defer->src = src;
                        op->defer->dst = op->buf + op->off;
                        op->defer->n = op->size - op->off;
                        op->defer->deadline_us = op->lease_us ? op->t_sent_us + op->lease_us : 0;
                        op->result = (int64_t)op->size;
                        op->state = G_DONE; /* get_sync copies and checks the lease */
                        break;
                    }
                    memcpy(op->buf + op->off, src, op->size - op->off);
                    op->off = op->size;
                    op->plen = 0;
                    op->state = G_NEXT;
                    break;
                }
                MC_WARN(CLIENT, "get: replica 0x%llx+%llu is not in a segment of ours",
                        (unsigned long long)d->address, (unsigned long long)op->size);
                break; /* next replica */
            }
            {
                int r = store_peer_resolve(s, h, endpoint(&op->rep[op->cur]), &op->seg);
                if (r == 0) {
                    op->state = G_WAIT_PEER;
                    return; /* waiting: the segment open */
                }
                if (r < 0) {
                    op->last_err = r;
                    break;
                }
            }
            op->state = G_STAGE;
            break;

        case G_WAIT_PEER:
            if (h->wait_st != MC_OK) {
                MC_WARN(CLIENT, "get: cannot open segment '%s': %s; trying the next replica",
                        endpoint(&op->rep[op->cur]), mc_status_str(h->wait_st));
                store_peer_note(s, endpoint(&op->rep[op->cur]), 1);
                op->last_err = MC_ERR_TRANSFER_FAIL;
                op->state = G_PICK;
                break;
            }
            op->seg = h->opened;
            op->state = G_STAGE;
            break;

        case G_STAGE:
            if (!op->direct && h->stage == NULL) {
                int r = store_stage_get(s, h, op->win);
                if (r < 0) {
                    get_finish(h, r);
                    return;
                }
                if (r == 0)
                    return; /* waiting: staging room */
            }
            op->state = G_SUBMIT;
            break;

        case G_SUBMIT: {
            const mc_master_replica_desc_t *d = &op->rep[op->cur];
            op->plen = op->size - op->off < op->win ? op->size - op->off : op->win;
            mc_te_request_t req = {.opcode = MC_TE_READ,
                                   .local = op->direct ? op->buf + op->off : h->stage,
                                   .segment = op->seg,
                                   .remote = d->address + op->off,
                                   .length = op->plen};
            if (!store_range_ok(s, op->seg, req.remote, op->plen)) {
                if (!(op->refreshed & (1u << op->cur)) &&
                    store_seg_refresh(h, op->seg) == MC_INPROGRESS) {
                    op->refreshed |= 1u << op->cur;
                    op->state = G_WAIT_REFRESH;
                    return; /* waiting: the refresh */
                }
                MC_WARN(CLIENT,
                        "get: replica 0x%llx+%llu is outside the buffers of segment "
                        "'%s'; trying the next replica",
                        (unsigned long long)d->address, (unsigned long long)op->size, endpoint(d));
                op->last_err = MC_ERR_TRANSFER_FAIL;
                op->state = G_PICK;
                break;
            }
            st = store_xfer_submit(h, &req, 1);
            if (st != MC_OK) {
                op->last_err = st == MC_ERR_CANCELED ? st : MC_ERR_TRANSFER_FAIL;
                op->state = G_PICK;
                break;
            }
            op->state = G_WAIT_XFER;
            return; /* waiting: the transfer */
        }

        case G_WAIT_REFRESH:
            op->state = G_SUBMIT; /* a failed refresh shows as a bad range again */
            break;

        case G_WAIT_XFER:
            if (h->wait_st != MC_OK) {
                MC_WARN(CLIENT,
                        "get: reading from segment '%s' failed: %s; trying the next "
                        "replica",
                        endpoint(&op->rep[op->cur]), mc_status_str(h->wait_st));
                store_peer_note(s, endpoint(&op->rep[op->cur]), 1);
                op->last_err = h->wait_st == MC_ERR_CANCELED ? h->wait_st : MC_ERR_TRANSFER_FAIL;
                op->state = G_PICK;
                break;
            }
            if (op->off == 0)
                store_peer_note(s, endpoint(&op->rep[op->cur]), 0);
            if (!op->direct)
                memcpy(op->buf + op->off, h->stage, op->plen);
            op->off += op->plen;
            op->state = G_NEXT;
            break;

        case G_NEXT:
            if (op->off < op->size) {
                op->state = G_SUBMIT;
                break;
            }
            if (lease_over(op)) {
                MC_WARN(CLIENT, "get: the read lease (%llu us) ran out before the read finished",
                        (unsigned long long)op->lease_us);
                get_finish(h, MC_ERR_LEASE_EXPIRED);
                return;
            }
            op->result = (int64_t)op->size;
            op->state = G_DONE;
            break;

        case G_DONE:
            get_finish(h, MC_OK);
            return;

        default:
            assert(0);
            return;
        }
    }
}

static mc_status_t get_submit(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                              int zero_copy, uint64_t *need, get_defer_t *defer,
                              mc_store_get_cb_t cb, void *arg)
{
    if (s == NULL || cb == NULL || (buf == NULL && len > 0))
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = store_check_key(key, klen);
    if (st != MC_OK)
        return st;
    int registered = len > 0 && te_local_range_ok(s->te, buf, len, 0);
    if (zero_copy && !registered) {
        MC_ERROR(CLIENT, "get_into: %p+%zu is not inside a registered buffer", buf, len);
        return MC_ERR_INVALID_PARAMS;
    }
    if (!registered && s->stage_alloc == NULL) {
        MC_ERROR(CLIENT, "get: the buffer is not registered and the client has no staging "
                         "buffer (local_buffer_size = 0)");
        return MC_ERR_STATE;
    }
    get_op_t *op = MC_NEW(get_op_t);
    if (op == NULL || (op->key = mc_malloc(klen)) == NULL) {
        mc_free(op);
        return MC_ERR_NOMEM;
    }
    memcpy(op->key, key, klen);
    op->klen = klen;
    op->buf = buf;
    op->len = len;
    op->need = need;
    op->defer = defer;
    op->cb = cb;
    op->arg = arg;
    op->h.s = s;
    op->h.step = get_step;
    op->h.fail = get_finish;
    op->state = G_LIST;
    st = store_op_submit(&op->h);
    if (st != MC_INPROGRESS) {
        mc_free(op->key);
        mc_free(op);
    }
    return st;
}

mc_status_t store_get_submit(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                             int zero_copy, uint64_t *need, mc_store_get_cb_t cb, void *arg)
{
    return get_submit(s, key, klen, buf, len, zero_copy, need, NULL, cb, arg);
}

static int64_t get_sync(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                        int zero_copy, uint64_t *need)
{
    if (s == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (store_on_reactor(s))
        return MC_ERR_STATE;
    store_waiter_t w;
    get_defer_t d = {0};
    store_waiter_init(&w);
    mc_status_t st =
        get_submit(s, key, klen, buf, len, zero_copy, need, &d, store_waiter_get_cb, &w);
    if (st != MC_INPROGRESS) {
        w.done = 1;
        store_waiter_wait(&w);
        return st;
    }
    int64_t r = store_waiter_wait(&w);
    if (r >= 0 && d.n > 0) {
        memcpy(d.dst, d.src, d.n);
        if (d.deadline_us != 0 && mc_now_us() > d.deadline_us) {
            MC_WARN(CLIENT, "get: the read lease ran out before the copy finished");
            return MC_ERR_LEASE_EXPIRED;
        }
    }
    return r;
}

int64_t mc_store_get(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                     uint64_t *need)
{
    return get_sync(s, key, klen, buf, len, 0, need);
}

int64_t mc_store_get_into(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len)
{
    return get_sync(s, key, klen, buf, len, 1, NULL);
}

mc_status_t mc_store_get_async(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                               mc_store_get_cb_t cb, void *arg)
{
    return store_get_submit(s, key, klen, buf, len, 0, NULL, cb, arg);
}

/* ------------------------------------------------------------ batch get */

typedef struct bget {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t left;
} bget_t;

typedef struct bget_item {
    bget_t *b;
    int64_t *out;
} bget_item_t;

static void bget_cb(void *arg, int64_t result)
{
    bget_item_t *it = arg;
    bget_t *b = it->b;
    *it->out = result;
    pthread_mutex_lock(&b->mu);
    if (--b->left == 0)
        pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Every key as its own get, all in flight at once. */
mc_status_t mc_store_batch_get(mc_store_t *s, const mc_slice_t *keys, mc_slice_t *bufs, size_t n,
                               int64_t *result)
{
    if (s == NULL || result == NULL || (n > 0 && (keys == NULL || bufs == NULL)))
        return MC_ERR_INVALID_PARAMS;
    if (store_on_reactor(s))
        return MC_ERR_STATE;
    if (n == 0)
        return MC_OK;
    bget_item_t *items = mc_calloc(n, sizeof(*items));
    if (items == NULL)
        return MC_ERR_NOMEM;
    bget_t b = {.left = 1};
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    for (size_t i = 0; i < n; i++) {
        items[i].b = &b;
        items[i].out = &result[i];
        pthread_mutex_lock(&b.mu);
        b.left++;
        pthread_mutex_unlock(&b.mu);
        mc_status_t st = store_get_submit(s, keys[i].ptr, keys[i].len, bufs[i].ptr, bufs[i].len, 0,
                                          NULL, bget_cb, &items[i]);
        if (st != MC_INPROGRESS) {
            result[i] = st;
            pthread_mutex_lock(&b.mu);
            b.left--;
            pthread_mutex_unlock(&b.mu);
        }
    }
    pthread_mutex_lock(&b.mu);
    b.left--;
    while (b.left > 0)
        pthread_cond_wait(&b.cv, &b.mu);
    pthread_mutex_unlock(&b.mu);
    pthread_cond_destroy(&b.cv);
    pthread_mutex_destroy(&b.mu);
    mc_free(items);
    return MC_OK;
}

/* ------------------------------------------------------ size and query */

/* GetReplicaList from the caller's thread. */
static mc_status_t replica_list_sync(mc_store_t *s, const void *key, size_t klen,
                                     mc_master_replica_desc_t *d, uint32_t *n)
{
    if (s == NULL)
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = store_check_key(key, klen);
    if (st != MC_OK)
        return st;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_key(&w, key, klen);
    st = w.err != MC_OK ? w.err : store_call_sync(s, MC_RPC_GET_REPLICA_LIST, &body, &resp);
    if (st == MC_OK && mc_mcli_dec_replicas(mc_buf_head(&resp), mc_buf_used(&resp), d,
                                            STORE_MAX_REPLICAS, n, NULL) != MC_OK)
        st = MC_ERR_PROTOCOL;
    if (st == MC_OK && *n == 0)
        st = MC_ERR_OBJECT_NOT_FOUND;
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return st;
}

int64_t mc_store_get_size(mc_store_t *s, const void *key, size_t klen)
{
    mc_master_replica_desc_t d[STORE_MAX_REPLICAS];
    uint32_t n = 0;
    mc_status_t st = replica_list_sync(s, key, klen, d, &n);
    return st != MC_OK ? st : (int64_t)d[0].size;
}

mc_status_t mc_store_query(mc_store_t *s, const void *key, size_t klen, mc_store_replica_t *out,
                           uint32_t room, uint32_t *n)
{
    if (n == NULL || (room > 0 && out == NULL))
        return MC_ERR_INVALID_PARAMS;
    mc_master_replica_desc_t d[STORE_MAX_REPLICAS];
    uint32_t cnt = 0;
    mc_status_t st = replica_list_sync(s, key, klen, d, &cnt);
    if (st != MC_OK)
        return st;
    for (uint32_t i = 0; i < cnt && i < room; i++) {
        snprintf(out[i].segment, sizeof(out[i].segment), "%s", d[i].segment_name);
        out[i].address = d[i].address;
        out[i].size = d[i].size;
        out[i].complete = d[i].status == MC_MASTER_REPLICA_COMPLETE;
    }
    *n = cnt;
    return MC_OK;
}
