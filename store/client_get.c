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
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "rpc/methods.h"
#include "store/client_int.h"
#include "store/master_client.h"
#include "util/copy.h"
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
    G_TIER,         /* no memory replica left to try: read the tier file */
    G_WAIT_TIER,    /* waiting: the tier worker's read (checksum and key checked) */
    G_LOAD,         /* only a LOCAL_DISK replica: ask the master to have its node load it */
    G_WAIT_LOAD,    /* waiting: the master's answer, once the node loaded it: the replicas */
    G_OWN,          /* only on our own disk: our offload worker reads the file into buf */
    G_WAIT_OWN,     /* waiting: that read (checksum checked) */
    G_DONE,         /* report err, or result */
    G_NSTATES
} get_state_t;

typedef struct get_op {
    store_op_t h;
    get_state_t state;
    mc_store_get_cb_t cb;
    void *arg;
    char *key;
    size_t klen;
    uint8_t *buf; /* the caller's, borrowed until cb (or the bounce) */
    size_t len;
    uint8_t *gpu_dst; /* the caller's GPU memory: buf is a host bounce (owned), copied
                         there at the end */
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
    uint64_t t_sent_us;      /* when GetReplicaList left */
    int direct;              /* read straight into buf (store_direct_ok) */
    struct get_defer *defer; /* sync get: own-segment copy left to the caller */
    uint64_t win, off, plen;
    int ranged;             /* mc_store_get_ranges: read size bytes from src of the value */
    uint64_t src;           /* where the read starts in the value (0 unless ranged) */
    mc_status_t last_err;   /* why the last replica failed */
    int disk;               /* the object has a DISK replica (and this client reads the tier) */
    uint64_t load_until_us; /* LOCAL_DISK only: give up waiting for the load then */
    int no_own;             /* our own read of our disk failed: ask for a LOAD */
    int own_ok;             /* the master's last answer said OWN_DISK: read our file */
    uint64_t got;           /* tier read: the file's data size */
    /* stage times (µs) of a get whose answer was held for a load (held_us > 0):
     * submitted, the last call left, its answer in, the transfer submitted and done */
    uint64_t t_submit_us, t_call_us, t_listed_us, t_xfer_us, t_xfer_end_us, held_us;
    /* a progressive load (the master's answer gave READY): the range being
     * loaded (prep) is copied up to ready while its node reads the rest; the
     * get returns only after the load's final answer (verified) */
    int partial;                   /* the last answer was a partial one */
    int no_partial;                /* a partial copy failed: wait for the whole load */
    uint64_t ready;                /* bytes of prep in (that answer) */
    uint64_t have;                 /* bytes of prep copied into buf */
    mc_master_replica_desc_t prep; /* the range being loaded */
    uint64_t prep_id;              /* its load's id (0: a master without load ids) */
    uint64_t ans_id;               /* LOAD_ID of the last answer (0: none) */
    /* the master takes our release of the leases its answers for a load
     * granted (GRANT_US; more than one when a load outlasted a held call):
     * sent once the copy is over (get_release) */
    unsigned grants;
    uint64_t grant_us; /* the latest */
    int64_t view;
    int64_t result;
    mc_status_t err; /* the get failed (G_DONE reports it) */
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

const char *const store_gls_names[STORE_GLS_N] = {"submit",  "call",     "held",
                                                  "prepare", "transfer", "finish"};

/* A get whose final answer the master held for a load: its stages
 * (STORE_GLS_*). No transfer after that answer (every byte was copied while
 * the load was in flight, or the replica is in our own segment): prepare
 * and transfer 0. */
static void get_load_stages(get_op_t *op)
{
    mc_prom_hist_t *g = op->h.s->get_load_stage;
    uint64_t now = mc_now_us(), rtt = op->t_listed_us - op->t_call_us;
    if (op->held_us == 0 || op->t_listed_us == 0)
        return;
    int xfer = op->t_xfer_us != 0 && op->t_xfer_end_us >= op->t_xfer_us;
    uint64_t t_in = xfer ? op->t_xfer_end_us : op->t_listed_us;
    mc_prom_hist_observe_us(&g[STORE_GLS_SUBMIT], op->t_call_us - op->t_submit_us);
    mc_prom_hist_observe_us(&g[STORE_GLS_CALL], rtt > op->held_us ? rtt - op->held_us : 0);
    mc_prom_hist_observe_us(&g[STORE_GLS_HELD], op->held_us);
    mc_prom_hist_observe_us(&g[STORE_GLS_PREPARE], xfer ? op->t_xfer_us - op->t_listed_us : 0);
    mc_prom_hist_observe_us(&g[STORE_GLS_TRANSFER], xfer ? op->t_xfer_end_us - op->t_xfer_us : 0);
    mc_prom_hist_observe_us(&g[STORE_GLS_FINISH], now > t_in ? now - t_in : 0);
}

#define STORE_MAX_GRANTS 8 /* a get's grants released (more: those run to their TTL) */

static void get_release_cb(void *arg, const mc_rpc_resp_t *resp)
{
    (void)arg;
    if (resp->status != MC_OK)
        MC_DEBUG(CLIENT, "lease release: %s (the lease runs to its TTL)",
                 mc_status_str(resp->status));
}

/* A loaded copy is its node's staging area, read once: once ours is copied
 * (or the get failed), tell the master we are done with its lease, so the
 * copy may go at once instead of lease_ttl later (the node's segment need
 * not hold a lease period of loads). Nobody waits for the answer; a lost
 * one leaves the TTL as the bound. Not when a sync get's caller still
 * copies from our own segment (get_sync: after this). */
static void get_release(get_op_t *op)
{
    mc_store_t *s = op->h.s;
    if (op->grants == 0 || s->mcli == NULL || (op->defer != NULL && op->defer->n > 0))
        return;
    /* the key once per grant (all of one lease period: the latest grant's
     * time covers them) */
    mc_master_key_t k[STORE_MAX_GRANTS];
    unsigned n = op->grants < STORE_MAX_GRANTS ? op->grants : STORE_MAX_GRANTS;
    for (unsigned i = 0; i < n; i++)
        k[i] = (mc_master_key_t){.data = op->key, .len = op->klen};
    mc_mcli_lease_release(mc_rpc_call_begin(s->mcli), k, NULL, n, op->grant_us, op->view);
    mc_status_t st =
        mc_rpc_call_end(s->mcli, MC_RPC_LEASE_RELEASE, s->cfg.rpc_timeout_us, get_release_cb, NULL);
    if (st != MC_INPROGRESS)
        MC_DEBUG(CLIENT, "lease release not sent: %s (the lease runs to its TTL)",
                 mc_status_str(st));
}

static void get_finish(store_op_t *h, mc_status_t st)
{
    get_op_t *op = (get_op_t *)h;
    mc_store_t *s = h->s;
    if (st == MC_OK)
        get_load_stages(op);
    if (st != MC_ERR_CANCELED)
        get_release(op);
    store_stage_put(s, h);
    if (h->batch != NULL && mc_te_batch_free(h->batch) != MC_OK)
        MC_ERROR(CLIENT, "get: transfer batch still busy at the end (leaked)");
    if (op->gpu_dst != NULL) { /* the value is in the host bounce: to the GPU */
        if (st == MC_OK && op->result > 0)
            st = te_gpu_copy(op->gpu_dst, op->buf, (size_t)op->result);
        mc_free(op->buf);
    }
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

/* The object's DISK replica, if the list has one (and this client reads the
 * tier); NULL otherwise. */
static const mc_master_replica_desc_t *disk_rep(mc_store_t *s, const mc_master_replica_desc_t *rep,
                                                uint32_t nrep)
{
    for (uint32_t i = 0; i < nrep; i++)
        if (rep[i].kind == MC_MASTER_REPLICA_DISK && rep[i].status == MC_MASTER_REPLICA_COMPLETE)
            return store_tier_on(s) ? &rep[i] : NULL;
    return NULL;
}

/* Memory replicas to try, into order[]; returns how many: COMPLETE ones; our own
 * segment's first, then the others in the master's order, those on
 * segments that failed us lately last (a dead node stays listed until the
 * master expires it). */
static uint32_t order_reps(mc_store_t *s, const mc_master_replica_desc_t *rep, uint32_t nrep,
                           uint32_t *order)
{
    const char *self = mc_te_local_name(s->te);
    int rank[STORE_MAX_REPLICAS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < nrep; i++) {
        const char *ep = endpoint(&rep[i]);
        rank[i] = strcmp(ep, self) == 0 ? 0 : store_peer_suspect(s, ep) ? 2 : 1;
    }
    for (int pass = 0; pass < 3; pass++)
        for (uint32_t i = 0; i < nrep; i++)
            if (rep[i].status == MC_MASTER_REPLICA_COMPLETE &&
                rep[i].kind == MC_MASTER_REPLICA_MEMORY && rank[i] == pass)
                order[n++] = i;
    return n;
}

/* The state handlers of get_step: each does its state's work and returns
 * the next state; one that starts an asynchronous step returns the
 * G_WAIT_* state that receives its outcome (h->wait_st); G_STAGE returns
 * itself while it waits for staging room. Failures go to G_DONE with err. */

static get_state_t get_fail(get_op_t *op, mc_status_t st)
{
    op->err = st;
    return G_DONE;
}

static void get_decode_load(store_op_t *h, const mc_rpc_resp_t *resp);
static uint64_t load_wait_us(const mc_store_t *s);

/* The fields of a call the master may hold for a load (GetReplicaList,
 * OFFLOAD_LOAD), after the key: WAIT_US, HAVE (the bytes of a load in
 * flight we copied: partial answers welcome), RELEASE (we release the
 * lease of the loaded copy once it is copied: get_release). */
static mc_status_t load_fields(get_op_t *op)
{
    mc_store_t *s = op->h.s;
    mc_status_t st = mc_rpc_call_add_uint(s->mcli, MC_F_WAIT_US, load_wait_us(s));
    if (st == MC_OK && !op->no_partial)
        st = mc_rpc_call_add_uint(s->mcli, MC_F_HAVE, op->have);
    if (st == MC_OK && !op->no_partial && op->have > 0 && op->prep_id != 0)
        st = mc_rpc_call_add_uint(s->mcli, MC_F_LOAD_ID, op->prep_id); /* whose bytes we have */
    if (st == MC_OK)
        st = mc_rpc_call_add_bool(s->mcli, MC_F_RELEASE, 1);
    mc_uuid_t own;
    if (st == MC_OK && !op->no_own && !op->ranged && store_offload_own_segment(s, &own)) {
        /* an object only on our disk: listed at once, we read it (get_own_disk) */
        mc_mp_writer_t *w = mc_rpc_call_add_field(s->mcli, MC_F_OWN_DISK);
        if (w != NULL)
            mc_proto_write_uuid(w, own);
        else
            st = MC_ERR_LIMIT;
    }
    return st;
}

/* With WAIT_US: an object only on a node's disk is loaded by the master's
 * answer to this call already (held until the node has it; no OFFLOAD_LOAD
 * after it unless that took longer than WAIT_US); others are answered at
 * once. */
static get_state_t get_list(get_op_t *op)
{
    mc_store_t *s = op->h.s;
    mc_mp_writer_t *w = mc_rpc_call_begin(s->mcli);
    mc_mcli_key(w, op->key, op->klen);
    mc_status_t st = load_fields(op);
    op->t_sent_us = op->t_call_us = mc_now_us();
    if (st == MC_OK)
        st = store_rpc_end(&op->h, MC_RPC_GET_REPLICA_LIST, get_decode_load);
    return st == MC_INPROGRESS ? G_WAIT_LIST /* waiting: the master */ : get_fail(op, st);
}

/* The replicas are in: the order to try them, the size, the window. */
static get_state_t get_partial(get_op_t *op);
static int own_disk_rep(const get_op_t *op, const mc_master_replica_desc_t *d);

static get_state_t get_listed(get_op_t *op)
{
    mc_store_t *s = op->h.s;
    if (op->h.wait_st != MC_OK)
        return get_fail(op, op->h.wait_st);
    if (op->partial)
        return get_partial(op);
    op->t_xfer_us = op->t_xfer_end_us = 0; /* the transfer stage: after the final answer */
    op->norder = order_reps(s, op->rep, op->nrep, op->order);
    const mc_master_replica_desc_t *dk = disk_rep(s, op->rep, op->nrep);
    op->disk = dk != NULL;
    if (op->norder == 0 && dk == NULL) {
        /* only on a node's own disk: that node loads it into its memory */
        for (uint32_t i = 0; i < op->nrep; i++)
            if (op->rep[i].kind == MC_MASTER_REPLICA_LOCAL_DISK) {
                if (op->rep[i].size > op->len) {
                    if (op->need != NULL)
                        *op->need = op->rep[i].size;
                    return get_fail(op, MC_ERR_BUFFER_OVERFLOW);
                }
                if (own_disk_rep(op, &op->rep[i])) {
                    op->size = op->rep[i].size;
                    return G_OWN;
                }
                return G_LOAD;
            }
        return get_fail(op, MC_ERR_OBJECT_NOT_FOUND);
    }
    op->size = op->norder > 0 ? op->rep[op->order[0]].size : dk->size;
    if (op->ranged) { /* a range of the value: from memory replicas only */
        if (op->norder == 0)
            return get_fail(op, MC_ERR_NOT_SUPPORTED);
        if (op->src > op->size || op->len > op->size - op->src)
            return get_fail(op, MC_ERR_INVALID_PARAMS);
        op->size = op->len;
        op->disk = 0;
    }
    if (op->size > op->len) {
        if (op->need != NULL)
            *op->need = op->size;
        return get_fail(op, MC_ERR_BUFFER_OVERFLOW);
    }
    op->direct = store_direct_ok(s, op->buf, op->size);
    op->win = op->direct ? op->size : store_stage_window(s, op->size);
    op->last_err = MC_ERR_TRANSFER_FAIL;
    op->off = 0;
    if (op->have > 0 && op->norder > 0) {
        /* the load is answered: the bytes copied while it was read are the
         * ones its checksum just verified, if the copy listed is that very
         * load's (the master names its id back; a master without load ids:
         * that very range) */
        const mc_master_replica_desc_t *f = &op->rep[op->order[0]];
        if (op->ans_id == op->prep_id && f->address == op->prep.address &&
            f->size == op->prep.size && strcmp(endpoint(f), endpoint(&op->prep)) == 0 &&
            op->have <= op->size)
            op->off = op->have;
        if (op->off == op->size)
            return G_NEXT; /* every byte copied already: the lease check, done */
    }
    return G_PICK;
}

/* A partial copy failed, or the answer is not one to copy from: wait for the
 * whole load and read it from the start. */
static get_state_t partial_off(get_op_t *op)
{
    op->partial = 0;
    op->no_partial = 1;
    op->have = 0;
    op->prep_id = 0;
    op->off = 0;
    return G_LOAD;
}

/* A partial answer: the node is still reading the object into the range
 * listed (PROCESSING); its first `ready` bytes are in (not verified yet).
 * Copy those after the ones we have, then ask again (HAVE): the rest, or
 * the final answer. Nothing is returned before that final answer. */
static get_state_t get_partial(get_op_t *op)
{
    mc_store_t *s = op->h.s;
    const mc_master_replica_desc_t *d = &op->rep[0];
    if (op->nrep != 1 || d->kind != MC_MASTER_REPLICA_MEMORY || op->ready > d->size ||
        d->size > op->len || op->ranged || strcmp(endpoint(d), mc_te_local_name(s->te)) == 0 ||
        !store_direct_ok(s, op->buf, d->size))
        return partial_off(op); /* odd, ours, or staged: the whole load */
    if (op->have > 0 && (op->ans_id != op->prep_id || d->address != op->prep.address ||
                         strcmp(endpoint(d), endpoint(&op->prep)) != 0))
        op->have = 0; /* another load, or another range: from its start */
    op->prep = *d;
    op->prep_id = op->ans_id;
    op->size = d->size;
    op->off = op->have;
    if (op->ready <= op->off) {
        op->partial = 0;
        return G_LOAD;
    }
    op->direct = 1;
    op->win = op->size;
    op->cur = 0;
    mc_status_t st = store_peer_resolve(s, &op->h, endpoint(d), &op->seg);
    if (st == MC_INPROGRESS)
        return G_WAIT_PEER; /* waiting: the segment open (peer_open_cb steps us) */
    return st == MC_OK ? G_STAGE : partial_off(op);
}

/* A replica on our own segment: copy it (a sync get leaves the copy to its
 * thread), after checking it is memory we expose. 0: it is not; try the
 * next replica. */
static int get_own(get_op_t *op, get_state_t *next)
{
    mc_store_t *s = op->h.s;
    const mc_master_replica_desc_t *d = &op->rep[op->cur];
    if (!te_local_range_ok(s->te, (const void *)(uintptr_t)(d->address + op->src), op->size, 1)) {
        MC_WARN(CLIENT, "get: replica 0x%llx+%llu is not in a segment of ours",
                (unsigned long long)d->address, (unsigned long long)op->size);
        return 0;
    }
    const uint8_t *src = (const uint8_t *)(uintptr_t)d->address + op->src + op->off;
    if (op->defer != NULL) {
        op->defer->src = src;
        op->defer->dst = op->buf + op->off;
        op->defer->n = op->size - op->off;
        op->defer->deadline_us = op->lease_us ? op->t_sent_us + op->lease_us : 0;
        op->result = (int64_t)op->size;
        *next = G_DONE; /* get_sync copies and checks the lease */
        return 1;
    }
    memcpy(op->buf + op->off, src, op->size - op->off);
    op->off = op->size;
    op->plen = 0;
    *next = G_NEXT;
    return 1;
}

/* The next replica to read from (own segment first), or the tier file. */
static get_state_t get_pick(get_op_t *op)
{
    mc_store_t *s = op->h.s;
    for (;;) {
        if (lease_over(op))
            return get_fail(op, MC_ERR_LEASE_EXPIRED);
        if (op->tried >= op->norder) {
            if (!op->disk)
                return get_fail(op, op->last_err);
            if (op->norder > 0)
                MC_INFO(CLIENT, "get: no memory replica could be read (%s); reading the tier file",
                        mc_status_str(op->last_err));
            return G_TIER;
        }
        op->cur = op->order[op->tried++];
        get_state_t next;
        if (strcmp(endpoint(&op->rep[op->cur]), mc_te_local_name(s->te)) == 0) {
            if (get_own(op, &next))
                return next;
            continue;
        }
        mc_status_t st = store_peer_resolve(s, &op->h, endpoint(&op->rep[op->cur]), &op->seg);
        if (st == MC_INPROGRESS)
            return G_WAIT_PEER; /* waiting: the segment open (peer_open_cb steps us) */
        if (st == MC_OK)
            return G_STAGE;
        op->last_err = st;
    }
}

static get_state_t get_peer_opened(get_op_t *op)
{
    if (op->h.wait_st != MC_OK && op->partial)
        return partial_off(op);
    if (op->h.wait_st != MC_OK) {
        MC_WARN(CLIENT, "get: cannot open segment '%s': %s; trying the next replica",
                endpoint(&op->rep[op->cur]), mc_status_str(op->h.wait_st));
        store_peer_note(op->h.s, endpoint(&op->rep[op->cur]), 1);
        op->last_err = MC_ERR_TRANSFER_FAIL;
        return G_PICK;
    }
    op->seg = op->h.opened;
    return G_STAGE;
}

static get_state_t get_stage(get_op_t *op)
{
    if (!op->direct && op->h.stage == NULL) {
        mc_status_t st = store_stage_get(op->h.s, &op->h, op->win);
        if (st == MC_INPROGRESS)
            return G_STAGE; /* waiting: staging room (stage_kick steps us) */
        if (st != MC_OK)
            return get_fail(op, st);
    }
    return G_SUBMIT;
}

/* Read the current piece (one refresh of the segment's descriptor when the
 * replica is outside what we know of it). */
static get_state_t get_fetch(get_op_t *op)
{
    store_op_t *h = &op->h;
    const mc_master_replica_desc_t *d = &op->rep[op->cur];
    uint64_t end = op->partial ? op->ready : op->size; /* partial: what is in */
    op->plen = end - op->off < op->win ? end - op->off : op->win;
    mc_te_request_t req = {.opcode = MC_TE_READ,
                           .local = op->direct ? op->buf + op->off : h->stage,
                           .segment = op->seg,
                           .remote = d->address + op->src + op->off,
                           .length = op->plen};
    if (!store_range_ok(h->s, op->seg, req.remote, op->plen)) {
        if (!(op->refreshed & (1u << op->cur)) && store_seg_refresh(h, op->seg) == MC_INPROGRESS) {
            op->refreshed |= 1u << op->cur;
            return G_WAIT_REFRESH; /* waiting: the refresh (refresh_cb steps us) */
        }
        if (op->partial)
            return partial_off(op);
        MC_WARN(CLIENT,
                "get: replica 0x%llx+%llu is outside the buffers of segment '%s'; trying the "
                "next replica",
                (unsigned long long)d->address, (unsigned long long)op->size, endpoint(d));
        op->last_err = MC_ERR_TRANSFER_FAIL;
        return G_PICK;
    }
    if (op->t_xfer_us == 0)
        op->t_xfer_us = mc_now_us();
    mc_status_t st = store_xfer_submit(h, &req, 1);
    if (st != MC_OK && op->partial)
        return st == MC_ERR_CANCELED ? get_fail(op, st) : partial_off(op);
    if (st != MC_OK) {
        op->last_err = st == MC_ERR_CANCELED ? st : MC_ERR_TRANSFER_FAIL;
        return G_PICK;
    }
    return G_WAIT_XFER; /* waiting: the transfer (store_xfer_cb posts us) */
}

static get_state_t get_refreshed(get_op_t *op)
{
    (void)op;
    return G_SUBMIT; /* a failed refresh shows as a bad range again */
}

static get_state_t get_read(get_op_t *op)
{
    store_op_t *h = &op->h;
    if (h->wait_st != MC_OK && op->partial) {
        MC_INFO(CLIENT, "get: copying a load in flight from '%s' failed: %s; waiting for the load",
                endpoint(&op->rep[op->cur]), mc_status_str(h->wait_st));
        return h->wait_st == MC_ERR_CANCELED ? get_fail(op, h->wait_st) : partial_off(op);
    }
    if (h->wait_st != MC_OK) {
        MC_WARN(CLIENT, "get: reading from segment '%s' failed: %s; trying the next replica",
                endpoint(&op->rep[op->cur]), mc_status_str(h->wait_st));
        store_peer_note(h->s, endpoint(&op->rep[op->cur]), 1);
        op->last_err = h->wait_st == MC_ERR_CANCELED ? h->wait_st : MC_ERR_TRANSFER_FAIL;
        return G_PICK;
    }
    if (op->off == 0)
        store_peer_note(h->s, endpoint(&op->rep[op->cur]), 0);
    if (!op->direct)
        memcpy(op->buf + op->off, h->stage, op->plen);
    if (op->partial)
        atomic_fetch_add_explicit(&h->s->get_load_partial_bytes, op->plen, memory_order_relaxed);
    op->off += op->plen;
    if (op->off == op->size)
        op->t_xfer_end_us = mc_now_us();
    return G_NEXT;
}

/* The next piece, or done (if the lease still holds). */
static get_state_t get_next(get_op_t *op)
{
    if (op->partial) { /* what is in is copied: ask again for the rest */
        if (op->off < op->ready)
            return G_SUBMIT;
        op->have = op->off;
        op->partial = 0;
        return G_LOAD;
    }
    if (op->off < op->size)
        return G_SUBMIT;
    if (lease_over(op)) {
        MC_WARN(CLIENT, "get: the read lease (%llu us) ran out before the read finished",
                (unsigned long long)op->lease_us);
        return get_fail(op, MC_ERR_LEASE_EXPIRED);
    }
    op->result = (int64_t)op->size;
    return G_DONE;
}

static get_state_t get_tier(get_op_t *op)
{
    mc_status_t st =
        store_tier_read_op(&op->h, op->key, op->klen, op->buf, op->len, op->size, &op->got);
    return st == MC_OK ? G_WAIT_TIER /* waiting: the tier worker (it posts us) */
                       : get_fail(op, st);
}

static get_state_t get_tier_read(get_op_t *op)
{
    /* No lease check: a file is never rewritten in place (a new one is
     * renamed over it; an open one keeps its bytes), and the key and
     * checksum in it were checked. */
    mc_status_t st = op->h.wait_st;
    if (st != MC_OK)
        return get_fail(op, st == MC_ERR_FILE_NOT_FOUND ? MC_ERR_OBJECT_NOT_FOUND : st);
    op->result = (int64_t)op->got;
    return G_DONE;
}

/* d (LOCAL_DISK) is on our own segment's disk and the master said we read it
 * ourselves (OWN_DISK: it counted the read for promotion on hit). */
static int own_disk_rep(const get_op_t *op, const mc_master_replica_desc_t *d)
{
    mc_uuid_t own;
    return op->own_ok && !op->no_own && !op->ranged && store_offload_own_segment(op->h.s, &own) &&
           mc_uuid_eq(d->segment_id, own);
}

static get_state_t get_own_disk(get_op_t *op)
{
    mc_status_t st = store_offload_read_op(&op->h, op->key, op->klen, op->buf, op->size);
    if (st == MC_OK)
        return G_WAIT_OWN; /* waiting: the offload worker (it posts us) */
    op->no_own = 1;        /* not now: the master has us load it */
    return G_LOAD;
}

static get_state_t get_own_read(get_op_t *op)
{
    mc_status_t st = op->h.wait_st;
    if (st == MC_OK) {
        op->result = (int64_t)op->size;
        return G_DONE;
    }
    if (st == MC_ERR_CANCELED)
        return get_fail(op, st); /* the client closes */
    /* a missing or corrupt file (deleted), or not serving: a LOAD, whose
     * failure tells the master to drop the disk replica */
    MC_DEBUG(CLIENT, "get: reading '%.*s' from our own disk: %s; asking for a load", (int)op->klen,
             op->key, mc_status_str(st));
    op->no_own = 1;
    return G_LOAD;
}

/* Node-local offload: the object is only on a node's disk. The master
 * has that node read it into its segment (LOAD) and holds our call until
 * the node answered (or LOAD_WAIT_US passed): the answer is the replica
 * list with a lease, as GetReplicaList's, read as such (get_listed): the
 * loaded memory replica, or again only the disk one (ask again, until the
 * transfer timeout). No pause, no polling. */
#define LOAD_WAIT_US 1000000

/* How long the master may hold a call for a load: under the RPC timeout. */
static uint64_t load_wait_us(const mc_store_t *s)
{
    uint64_t wait =
        s->cfg.rpc_timeout_us / 2 < LOAD_WAIT_US ? s->cfg.rpc_timeout_us / 2 : LOAD_WAIT_US;
    return wait > 0 ? wait : 1;
}

static void get_decode_load(store_op_t *h, const mc_rpc_resp_t *resp)
{
    get_op_t *op = (get_op_t *)h;
    int64_t held = 0, ready = 0, grant = 0, view = 0, id = 0;
    get_decode_list(h, resp);
    op->t_listed_us = mc_now_us();
    op->ans_id = h->wait_st == MC_OK &&
                         mc_mcli_dec_int(resp->body, resp->body_len, MC_F_LOAD_ID, &id) == MC_OK
                     ? (uint64_t)id
                     : 0;
    /* a lease granted for a load, that the master takes our release of */
    if (h->wait_st == MC_OK &&
        mc_mcli_dec_int(resp->body, resp->body_len, MC_F_GRANT_US, &grant) == MC_OK &&
        mc_mcli_dec_int(resp->body, resp->body_len, MC_F_VIEW_VERSION, &view) == MC_OK) {
        if (op->grants > 0 && view != op->view)
            op->grants = 0; /* another master's: not ours to release any more */
        op->grants++;
        op->grant_us = (uint64_t)grant;
        op->view = view;
    }
    op->held_us = 0;
    int64_t own = 0;
    op->own_ok = h->wait_st == MC_OK &&
                 mc_mcli_dec_int(resp->body, resp->body_len, MC_F_OWN_DISK, &own) == MC_OK &&
                 own == 1;
    op->partial = h->wait_st == MC_OK &&
                  mc_mcli_dec_int(resp->body, resp->body_len, MC_F_LOADED, &ready) == MC_OK &&
                  ready > 0;
    op->ready = op->partial ? (uint64_t)ready : 0;
    if (h->wait_st == MC_OK &&
        mc_mcli_dec_int(resp->body, resp->body_len, MC_F_HELD_US, &held) == MC_OK && held > 0) {
        op->t_sent_us += (uint64_t)held; /* the lease starts no earlier than that */
        op->held_us = (uint64_t)held;
    }
}

static get_state_t get_load(get_op_t *op)
{
    mc_store_t *s = op->h.s;
    uint64_t now = mc_now_us();
    if (op->load_until_us == 0) {
        op->load_until_us = now + s->cfg.transfer_timeout_us;
    } else if (now > op->load_until_us) {
        MC_WARN(CLIENT, "get: '%.*s' was not loaded from its node's disk in time", (int)op->klen,
                op->key);
        return get_fail(op, MC_ERR_TRANSFER_FAIL);
    }
    mc_mp_writer_t *w = mc_rpc_call_begin(s->mcli);
    mc_mcli_key(w, op->key, op->klen);
    mc_status_t st = load_fields(op);
    op->t_sent_us = op->t_call_us = now;
    if (st == MC_OK)
        st = store_rpc_end(&op->h, MC_RPC_OFFLOAD_LOAD, get_decode_load);
    return st == MC_INPROGRESS ? G_WAIT_LOAD /* waiting: the master */ : get_fail(op, st);
}

/* The machine's table: each state's handler and whether get_step stops
 * there. G_DONE has no handler: it reports. */
static const struct {
    get_state_t (*fn)(get_op_t *op);
    int wait;
} get_table[G_NSTATES] = {
    [G_LIST] = {get_list, 0},
    [G_WAIT_LIST] = {get_listed, 1},
    [G_PICK] = {get_pick, 0},
    [G_WAIT_PEER] = {get_peer_opened, 1},
    [G_STAGE] = {get_stage, 0},
    [G_SUBMIT] = {get_fetch, 0},
    [G_WAIT_REFRESH] = {get_refreshed, 1},
    [G_WAIT_XFER] = {get_read, 1},
    [G_NEXT] = {get_next, 0},
    [G_TIER] = {get_tier, 0},
    [G_WAIT_TIER] = {get_tier_read, 1},
    [G_LOAD] = {get_load, 0},
    [G_WAIT_LOAD] = {get_listed, 1},
    [G_OWN] = {get_own_disk, 0},
    [G_WAIT_OWN] = {get_own_read, 1},
};

static void get_step(store_op_t *h)
{
    get_op_t *op = (get_op_t *)h;
    for (;;) {
        if (store_op_closing(h)) {
            get_finish(h, MC_ERR_CANCELED);
            return;
        }
        get_state_t from = op->state;
        if (from == G_DONE) {
            get_finish(h, op->err);
            return;
        }
        assert(from < G_NSTATES && get_table[from].fn != NULL);
        get_state_t to = get_table[from].fn(op);
        op->state = to;
        if (to == from || get_table[to].wait)
            return;
    }
}

/* A replica list the caller already has (mc_store_get_alloc,
 * mc_store_get_ranges): the get starts where GetReplicaList's answer is
 * handled; a ranged one reads len bytes from src of the value. */
typedef struct get_preset {
    const mc_master_replica_desc_t *rep;
    uint32_t nrep;
    uint64_t lease_us, t_sent_us;
    int ranged;
    uint64_t src;
    int no_own; /* our own read of our disk failed: ask for a LOAD */
} get_preset_t;

static mc_status_t get_submit(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                              int zero_copy, uint64_t *need, get_defer_t *defer,
                              const get_preset_t *pre, mc_store_get_cb_t cb, void *arg)
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
    /* GPU memory: read into host memory, copied to the GPU at the end (no
     * path of the get touches it with the CPU) */
    uint8_t *gpu_dst = NULL;
    if (len > 0 && te_gpu_of(buf) >= 0) {
        gpu_dst = buf;
        registered = 0;
        defer = NULL; /* the own-segment copy happens here, before the GPU copy */
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
    if (gpu_dst != NULL && (op->buf = mc_malloc(len)) == NULL) {
        mc_free(op->key);
        mc_free(op);
        return MC_ERR_NOMEM;
    }
    op->gpu_dst = gpu_dst;
    op->len = len;
    op->need = need;
    op->defer = defer;
    op->cb = cb;
    op->arg = arg;
    op->t_submit_us = mc_now_us();
    op->h.s = s;
    op->h.step = get_step;
    op->h.fail = get_finish;
    op->state = G_LIST;
    if (pre != NULL) {
        memcpy(op->rep, pre->rep, pre->nrep * sizeof(*pre->rep));
        op->nrep = pre->nrep;
        op->lease_us = pre->lease_us;
        op->t_sent_us = pre->t_sent_us;
        op->ranged = pre->ranged;
        op->src = pre->src;
        op->no_own = pre->no_own;
        op->h.wait_st = MC_OK;
        op->state = G_WAIT_LIST;
    }
    st = store_op_submit(&op->h);
    if (st != MC_INPROGRESS) {
        if (op->gpu_dst != NULL)
            mc_free(op->buf);
        mc_free(op->key);
        mc_free(op);
    }
    return st;
}

mc_status_t store_get_submit(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                             int zero_copy, uint64_t *need, mc_store_get_cb_t cb, void *arg)
{
    if (s != NULL && s->svc != NULL) /* co-located: the service gets */
        return store_dummy_async(s, 1, key, klen, NULL, buf, len, 0, NULL, NULL, cb, arg);
    return get_submit(s, key, klen, buf, len, zero_copy, need, NULL, NULL, cb, arg);
}

static int64_t get_sync(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                        int zero_copy, uint64_t *need, const get_preset_t *pre)
{
    if (s == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL)
        return store_dummy_get(s, key, klen, buf, len, need);
    if (store_on_reactor(s))
        return MC_ERR_STATE;
    store_waiter_t w;
    get_defer_t d = {0};
    store_waiter_init(&w);
    mc_status_t st =
        get_submit(s, key, klen, buf, len, zero_copy, need, &d, pre, store_waiter_get_cb, &w);
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
    return get_sync(s, key, klen, buf, len, 0, need, NULL);
}

int64_t mc_store_get_into(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len)
{
    return get_sync(s, key, klen, buf, len, 1, NULL, NULL);
}

/* The direct get's own-segment replica of rep[0..n): the first COMPLETE
 * memory one in our own segment, or NULL. */
static const mc_master_replica_desc_t *own_replica(mc_store_t *s,
                                                   const mc_master_replica_desc_t *rep, uint32_t n)
{
    const char *self = mc_te_local_name(s->te);
    for (uint32_t i = 0; i < n; i++)
        if (rep[i].status == MC_MASTER_REPLICA_COMPLETE &&
            rep[i].kind == MC_MASTER_REPLICA_MEMORY && strcmp(endpoint(&rep[i]), self) == 0)
            return &rep[i];
    return NULL;
}

int64_t store_get_direct(store_mconn_t *m, const void *key, size_t klen, void *buf, size_t len,
                         uint64_t *need)
{
    mc_store_t *s = store_mconn_store(m);
    if (s->svc != NULL || (buf == NULL && len > 0) || (len > 0 && te_gpu_of(buf) >= 0))
        return get_sync(s, key, klen, buf, len, 0, need, NULL);
    mc_status_t st = store_check_key(key, klen);
    if (st != MC_OK)
        return st;
    mc_master_replica_desc_t rep[STORE_MAX_REPLICAS];
    get_preset_t pre = {.rep = rep};
    mc_buf_t *body = store_mconn_body(m), *ans = store_mconn_ans(m);
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, body);
    /* OWN_DISK (our node's disk read here): an object only there is listed
     * at once as ours to read, and read by our offload worker straight into
     * buf, this thread waiting: one master call, no reactor (a master that
     * does not know OWN_DISK lists it as before: the load below) */
    mc_uuid_t own;
    int own_on = store_offload_own_segment(s, &own);
    mc_mp_write_map(&w, own_on ? 2 : 1);
    mc_mp_write_uint(&w, MC_F_KEY);
    mc_mp_write_bin(&w, key, klen);
    if (own_on) {
        mc_mp_write_uint(&w, MC_F_OWN_DISK);
        mc_proto_write_uuid(&w, own);
    }
    pre.t_sent_us = mc_now_us();
    st = w.err != MC_OK ? w.err : store_mconn_call(m, MC_RPC_GET_REPLICA_LIST, body, ans);
    if (st == MC_OK && mc_mcli_dec_replicas(mc_buf_head(ans), mc_buf_used(ans), rep,
                                            STORE_MAX_REPLICAS, &pre.nrep, &pre.lease_us) != MC_OK)
        st = MC_ERR_PROTOCOL;
    if (st != MC_OK)
        return st;
    /* only on our own disk: ours to read when the master said OWN_DISK */
    int mine = own_on && pre.nrep == 1 && rep[0].kind == MC_MASTER_REPLICA_LOCAL_DISK &&
               mc_uuid_eq(rep[0].segment_id, own);
    int64_t own_ans = 0;
    if (mine &&
        mc_mcli_dec_int(mc_buf_head(ans), mc_buf_used(ans), MC_F_OWN_DISK, &own_ans) == MC_OK &&
        own_ans == 1) {
        if (rep[0].size > len) {
            if (need != NULL)
                *need = rep[0].size;
            return MC_ERR_BUFFER_OVERFLOW;
        }
        st = store_offload_read_sync(s, key, klen, buf, rep[0].size);
        if (st == MC_OK)
            return (int64_t)rep[0].size;
        if (st == MC_ERR_CANCELED)
            return st; /* the client closes */
        /* a missing or corrupt file (deleted), or not serving: a LOAD, whose
         * failure tells the master to drop the disk replica */
        MC_DEBUG(CLIENT, "get: reading '%.*s' from our own disk: %s; asking for a load", (int)klen,
                 (const char *)key, mc_status_str(st));
    }
    /* our read failed, or the master did not make it ours (promotion on hit
     * admits it, a load of it is in flight, a master without OWN_DISK): the
     * load below, without asking (and counting) again */
    if (mine)
        pre.no_own = 1;
    const mc_master_replica_desc_t *d = own_replica(s, rep, pre.nrep);
    const void *src = d != NULL ? (const void *)(uintptr_t)d->address : NULL;
    if (d == NULL || d->size == 0 || !te_local_range_ok(s->te, src, d->size, 1))
        return get_sync(s, key, klen, buf, len, 0, need, &pre); /* (on r0, from the list) */
    if (d->size > len) {
        if (need != NULL)
            *need = d->size;
        return MC_ERR_BUFFER_OVERFLOW;
    }
    /* (non-temporal stores from MC_COPY_COLD_MIN: the bytes are for another
     * process, the service's co-located client, not for this thread's
     * caches; a third less memory traffic than memcpy) */
    mc_copy_cold(buf, src, d->size);
    /* bytes read after the lease ended may be another object's */
    if (pre.lease_us > 0 && mc_now_us() > pre.t_sent_us + pre.lease_us) {
        MC_WARN(CLIENT, "get: the read lease ran out before the copy finished");
        return MC_ERR_LEASE_EXPIRED;
    }
    return (int64_t)d->size;
}

static mc_status_t replica_list_sync(mc_store_t *s, const void *key, size_t klen,
                                     mc_master_replica_desc_t *d, uint32_t *n, uint64_t *lease_us);

int64_t mc_store_get_alloc(mc_store_t *s, const void *key, size_t klen, mc_store_alloc_fn alloc,
                           void *arg)
{
    if (s == NULL || alloc == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL) { /* co-located: the service says the size, then gets */
        int64_t size = store_dummy_get_size(s, key, klen);
        if (size <= 0)
            return size < 0 ? size : MC_ERR_OBJECT_NOT_FOUND;
        void *buf = alloc(arg, (uint64_t)size);
        return buf == NULL ? MC_ERR_NOMEM : store_dummy_get(s, key, klen, buf, (size_t)size, NULL);
    }
    if (store_on_reactor(s))
        return MC_ERR_STATE;
    mc_master_replica_desc_t d[STORE_MAX_REPLICAS];
    get_preset_t pre = {.rep = d, .t_sent_us = mc_now_us()};
    mc_status_t st = replica_list_sync(s, key, klen, d, &pre.nrep, &pre.lease_us);
    if (st != MC_OK)
        return st;
    /* the size every replica has (the get checks it again) */
    uint64_t size = 0;
    for (uint32_t i = 0; i < pre.nrep && size == 0; i++)
        if (d[i].status == MC_MASTER_REPLICA_COMPLETE)
            size = d[i].size;
    if (size == 0)
        return MC_ERR_OBJECT_NOT_FOUND;
    void *buf = alloc(arg, size);
    if (buf == NULL)
        return MC_ERR_NOMEM;
    return get_sync(s, key, klen, buf, size, 0, NULL, &pre);
}

mc_status_t mc_store_get_ranges(mc_store_t *s, const void *key, size_t klen, size_t n,
                                const uint64_t *src, void *const *dst, const uint64_t *len,
                                int64_t *result)
{
    if (s == NULL || (n > 0 && (src == NULL || dst == NULL || len == NULL || result == NULL)))
        return MC_ERR_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    if (s->svc != NULL) /* co-located: the service reads them into shared memory */
        return store_dummy_get_ranges(s, key, klen, n, src, dst, len, result);
    if (store_on_reactor(s))
        return MC_ERR_STATE;
    mc_master_replica_desc_t d[STORE_MAX_REPLICAS];
    get_preset_t pre = {.rep = d, .t_sent_us = mc_now_us(), .ranged = 1};
    mc_status_t st = replica_list_sync(s, key, klen, d, &pre.nrep, &pre.lease_us);
    for (size_t i = 0; i < n; i++) {
        pre.src = src[i];
        if (st != MC_OK)
            result[i] = st;
        else if (len[i] == 0)
            result[i] = 0;
        else
            result[i] = get_sync(s, key, klen, dst[i], (size_t)len[i], 1, NULL, &pre);
    }
    return st;
}

mc_status_t mc_store_get_async(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                               mc_store_get_cb_t cb, void *arg)
{
    return store_get_submit(s, key, klen, buf, len, 0, NULL, cb, arg);
}

/* ------------------------------------------------------------ batch get */

/*
 * Batch get: one BatchGetReplicaList for a chunk of keys, then one transfer
 * batch that reads every object from its first replica in get order (our
 * own segment: a memcpy on r0) straight into the caller's buffers, then the
 * lease check of a single get. Keys whose read could not be set up or failed
 * are left to single gets, which fail over to the other replicas (the
 * caller runs them after the chunk). Needs buffers the transports can use
 * in place (store_direct_ok); otherwise every key is a single get.
 */
#define BGET_CHUNK 4096

typedef enum bget_state {
    BG_LIST,      /* send BatchGetReplicaList for the chunk */
    BG_WAIT_LIST, /* waiting: per-key statuses, replicas and the lease; plan each key */
    BG_RESOLVE,   /* open the picked replica's segment of every key to read, one at a time */
    BG_WAIT_PEER, /* waiting: a segment open */
    BG_SUBMIT,    /* one transfer batch reading every key to read into its buffer */
    BG_WAIT_XFER, /* waiting: the batch (bget_harvest marks the keys that failed) */
    BG_CHECK,     /* the lease check of the reads done */
    BG_DONE,      /* report err (MC_OK: per-key results are in result[]) */
    BG_NSTATES
} bget_state_t;

/* bget_op_t.todo[i] */
enum { BG_KEY_DONE, BG_KEY_READ, BG_KEY_RETRY };

typedef struct bget_op {
    store_op_t h;
    bget_state_t state;
    size_t n;
    const mc_master_key_t *keys; /* the caller's (sync call) */
    const mc_slice_t *parts;     /* the caller's: key i's are pcount[i] from pfirst[i] */
    const size_t *pfirst, *pcount;
    int64_t *result;               /* the caller's: bytes or a negative status */
    uint8_t *todo;                 /* BG_KEY_* */
    mc_status_t *st;               /* the master's per key */
    mc_master_replica_desc_t *rep; /* n * STORE_MAX_REPLICAS */
    uint32_t *nrep, *pick;
    mc_te_segment_t *seg;
    mc_te_request_t *reqs; /* one per piece: the transfer's requests (allocated with the op) */
    size_t *task_key;
    size_t rk; /* resolve cursor */
    size_t ntasks;
    uint64_t lease_us, t_sent_us;
    /* the master's grant when it takes our release (LEASE_RELEASE) */
    int release;
    uint64_t grant_us;
    int64_t view;
    mc_status_t err; /* the chunk failed as a whole (BG_DONE reports it) */
    store_waiter_t *w;
} bget_op_t;

static void bget_finish(store_op_t *h, mc_status_t st)
{
    bget_op_t *op = (bget_op_t *)h;
    mc_store_t *s = h->s;
    if (h->batch != NULL && mc_te_batch_free(h->batch) != MC_OK)
        MC_ERROR(CLIENT, "batch get: transfer batch still busy at the end (leaked)");
    if (st != MC_OK)
        for (size_t i = 0; i < op->n; i++)
            if (op->todo[i] != BG_KEY_DONE) {
                op->todo[i] = BG_KEY_DONE;
                op->result[i] = st;
            }
    store_waiter_status_cb(op->w, st);
    store_live_dec(s);
}

static void bget_decode_list(store_op_t *h, const mc_rpc_resp_t *resp)
{
    bget_op_t *op = (bget_op_t *)h;
    size_t got = 0;
    if (mc_mcli_dec_items(resp->body, resp->body_len, op->st, op->rep, STORE_MAX_REPLICAS, op->nrep,
                          op->n, &got, &op->lease_us) != MC_OK ||
        got != op->n) {
        h->wait_st = MC_ERR_PROTOCOL;
        return;
    }
    /* a master that takes releases says when it granted the leases (a
     * master with lease_release off, or an older one, does not) */
    int64_t grant = 0, view = 0;
    op->release = mc_mcli_dec_int(resp->body, resp->body_len, MC_F_GRANT_US, &grant) == MC_OK &&
                  mc_mcli_dec_int(resp->body, resp->body_len, MC_F_VIEW_VERSION, &view) == MC_OK;
    op->grant_us = (uint64_t)grant;
    op->view = view;
}

static void bget_harvest(store_op_t *h, mc_te_batch_t *b)
{
    bget_op_t *op = (bget_op_t *)h;
    for (size_t t = 0; t < op->ntasks; t++) {
        mc_te_status_t ts;
        mc_te_task_status(b, t, &ts);
        if (ts.state != MC_TE_COMPLETED)
            op->todo[op->task_key[t]] = BG_KEY_RETRY;
    }
}

/* Room of key i's pieces. */
static uint64_t bget_room(const bget_op_t *op, size_t i)
{
    uint64_t room = 0;
    for (size_t q = 0; q < op->pcount[i]; q++)
        room += op->parts[op->pfirst[i] + q].len;
    return room;
}

/* Copy n bytes from src over key i's pieces, in order. */
static void bget_scatter(const bget_op_t *op, size_t i, const uint8_t *src, uint64_t n)
{
    for (size_t q = 0; q < op->pcount[i] && n > 0; q++) {
        const mc_slice_t *pc = &op->parts[op->pfirst[i] + q];
        uint64_t take = pc->len < n ? pc->len : n;
        memcpy(pc->ptr, src, take);
        src += take;
        n -= take;
    }
}

/* Key i after the master answered: done (copied from our own segment, or
 * an error), to be read (op->pick[i]), or left to a single get. */
static void bget_plan(mc_store_t *s, bget_op_t *op, size_t i)
{
    const mc_master_replica_desc_t *rep = &op->rep[i * STORE_MAX_REPLICAS];
    uint32_t order[STORE_MAX_REPLICAS];
    op->todo[i] = BG_KEY_DONE;
    if (op->st[i] != MC_OK) {
        op->result[i] = op->st[i];
        return;
    }
    if (order_reps(s, rep, op->nrep[i], order) == 0) {
        int local_disk = 0;
        for (uint32_t k = 0; k < op->nrep[i]; k++)
            local_disk |= rep[k].kind == MC_MASTER_REPLICA_LOCAL_DISK;
        if (disk_rep(s, rep, op->nrep[i]) != NULL || local_disk)
            op->todo[i] = BG_KEY_RETRY; /* a single get reads the file (or has it loaded) */
        else
            op->result[i] = MC_ERR_OBJECT_NOT_FOUND;
        return;
    }
    const mc_master_replica_desc_t *d = &rep[order[0]];
    if (d->size > bget_room(op, i)) {
        op->result[i] = MC_ERR_BUFFER_OVERFLOW;
        return;
    }
    op->pick[i] = order[0];
    if (strcmp(endpoint(d), mc_te_local_name(s->te)) != 0) {
        op->todo[i] = BG_KEY_READ;
        return;
    }
    if (!te_local_range_ok(s->te, (const void *)(uintptr_t)d->address, d->size, 1)) {
        op->todo[i] = BG_KEY_RETRY; /* the single get says why */
        return;
    }
    bget_scatter(op, i, (const uint8_t *)(uintptr_t)d->address, d->size);
    op->result[i] = (int64_t)d->size;
}

/* The state handlers of bget_step, as get's: each returns the next state;
 * one that starts an asynchronous step returns the BG_WAIT_* state that
 * receives its outcome. */

static bget_state_t bget_list(bget_op_t *op)
{
    mc_mp_writer_t *w = mc_rpc_call_begin(op->h.s->mcli);
    if (op->h.s->cfg.lease_release)
        mc_mcli_keys_release(w, op->keys, op->n); /* we release them: bget_release */
    else
        mc_mcli_keys(w, op->keys, op->n);
    op->t_sent_us = mc_now_us();
    op->release = 0;
    mc_status_t st = store_rpc_end(&op->h, MC_RPC_BATCH_GET_REPLICA_LIST, bget_decode_list);
    if (st != MC_INPROGRESS) {
        op->err = st;
        return BG_DONE;
    }
    return BG_WAIT_LIST; /* waiting: the master */
}

static bget_state_t bget_listed(bget_op_t *op)
{
    if (op->h.wait_st != MC_OK) {
        op->err = op->h.wait_st;
        return BG_DONE;
    }
    for (size_t i = 0; i < op->n; i++)
        bget_plan(op->h.s, op, i);
    return BG_RESOLVE;
}

static const mc_master_replica_desc_t *bget_picked(const bget_op_t *op, size_t i)
{
    return &op->rep[i * STORE_MAX_REPLICAS + op->pick[i]];
}

static bget_state_t bget_resolve(bget_op_t *op)
{
    for (; op->rk < op->n; op->rk++) {
        size_t i = op->rk;
        if (op->todo[i] != BG_KEY_READ)
            continue;
        mc_status_t st =
            store_peer_resolve(op->h.s, &op->h, endpoint(bget_picked(op, i)), &op->seg[i]);
        if (st == MC_INPROGRESS)
            return BG_WAIT_PEER; /* waiting: a segment open (peer_open_cb steps us) */
        if (st != MC_OK)
            op->todo[i] = BG_KEY_RETRY;
    }
    return BG_SUBMIT;
}

static bget_state_t bget_peer_opened(bget_op_t *op)
{
    if (op->h.wait_st == MC_OK) {
        op->seg[op->rk] = op->h.opened;
    } else {
        store_peer_note(op->h.s, endpoint(bget_picked(op, op->rk)), 1);
        op->todo[op->rk] = BG_KEY_RETRY;
    }
    op->rk++;
    return BG_RESOLVE;
}

static bget_state_t bget_submit(bget_op_t *op)
{
    store_op_t *h = &op->h;
    size_t k = 0;
    for (size_t i = 0; i < op->n; i++) {
        if (op->todo[i] != BG_KEY_READ)
            continue;
        const mc_master_replica_desc_t *d = bget_picked(op, i);
        if (!store_range_ok(h->s, op->seg[i], d->address, d->size)) {
            op->todo[i] = BG_KEY_RETRY; /* the single get refreshes */
            continue;
        }
        uint64_t off = 0; /* one read per piece, in order */
        for (size_t q = 0; q < op->pcount[i] && off < d->size; q++) {
            const mc_slice_t *pc = &op->parts[op->pfirst[i] + q];
            uint64_t take = pc->len < d->size - off ? pc->len : d->size - off;
            if (take == 0)
                continue;
            op->reqs[k] = (mc_te_request_t){.opcode = MC_TE_READ,
                                            .local = pc->ptr,
                                            .segment = op->seg[i],
                                            .remote = d->address + off,
                                            .length = take};
            op->task_key[k++] = i;
            off += take;
        }
    }
    op->ntasks = k;
    if (k == 0)
        return BG_CHECK;
    if (store_xfer_submit(h, op->reqs, k) != MC_OK) {
        for (size_t t = 0; t < k; t++)
            op->todo[op->task_key[t]] = BG_KEY_RETRY;
        op->ntasks = 0;
        return BG_CHECK;
    }
    return BG_WAIT_XFER; /* waiting: the transfers (store_xfer_cb posts us) */
}

/* The reads are in (bget_harvest marked those that failed). */
static bget_state_t bget_read(bget_op_t *op)
{
    for (size_t t = 0; t < op->ntasks; t++) {
        size_t i = op->task_key[t];
        if (op->todo[i] == BG_KEY_READ) {
            op->todo[i] = BG_KEY_DONE;
            op->result[i] = (int64_t)bget_picked(op, i)->size;
        } else {
            store_peer_note(op->h.s, endpoint(bget_picked(op, i)), 1);
        }
    }
    return BG_CHECK;
}

static void release_cb(void *arg, const mc_rpc_resp_t *resp)
{
    (void)arg;
    if (resp->status != MC_OK)
        MC_DEBUG(CLIENT, "lease release: %s (the leases run to their TTL)",
                 mc_status_str(resp->status));
}

/* Every read of the chunk is over: tell the master we are done with the
 * leases it granted (they end now unless another reader holds them), so
 * eviction need not wait for their TTL. Nobody waits for the answer; a
 * release that is lost leaves the TTL as the bound. The keys left to single
 * gets are read under leases of their own. */
static void bget_release(bget_op_t *op)
{
    mc_store_t *s = op->h.s;
    if (!op->release || s->mcli == NULL)
        return;
    size_t k = 0;
    for (size_t i = 0; i < op->n; i++)
        k += op->st[i] == MC_OK;
    if (k == 0)
        return;
    mc_mcli_lease_release(mc_rpc_call_begin(s->mcli), op->keys, op->st, op->n, op->grant_us,
                          op->view);
    mc_status_t st =
        mc_rpc_call_end(s->mcli, MC_RPC_LEASE_RELEASE, s->cfg.rpc_timeout_us, release_cb, NULL);
    if (st != MC_INPROGRESS)
        MC_DEBUG(CLIENT, "lease release not sent: %s (the leases run to their TTL)",
                 mc_status_str(st));
}

/* As a single get's: reads that ended after the lease are not trusted.
 * Then the leases are released. */
static bget_state_t bget_check(bget_op_t *op)
{
    bget_release(op);
    if (op->lease_us > 0 && mc_now_us() > op->t_sent_us + op->lease_us) {
        MC_WARN(CLIENT, "batch get: the read lease (%llu us) ran out before the reads finished",
                (unsigned long long)op->lease_us);
        for (size_t i = 0; i < op->n; i++)
            if (op->todo[i] == BG_KEY_DONE && op->result[i] >= 0)
                op->result[i] = MC_ERR_LEASE_EXPIRED;
    }
    return BG_DONE;
}

/* The machine's table: each state's handler and whether bget_step stops
 * there. BG_DONE has no handler: it reports. */
static const struct {
    bget_state_t (*fn)(bget_op_t *op);
    int wait;
} bget_table[BG_NSTATES] = {
    [BG_LIST] = {bget_list, 0},       [BG_WAIT_LIST] = {bget_listed, 1},
    [BG_RESOLVE] = {bget_resolve, 0}, [BG_WAIT_PEER] = {bget_peer_opened, 1},
    [BG_SUBMIT] = {bget_submit, 0},   [BG_WAIT_XFER] = {bget_read, 1},
    [BG_CHECK] = {bget_check, 0},
};

static void bget_step(store_op_t *h)
{
    bget_op_t *op = (bget_op_t *)h;
    for (;;) {
        if (store_op_closing(h)) {
            bget_finish(h, MC_ERR_CANCELED);
            return;
        }
        bget_state_t from = op->state;
        if (from == BG_DONE) {
            bget_finish(h, op->err);
            return;
        }
        assert(from < BG_NSTATES && bget_table[from].fn != NULL);
        bget_state_t to = bget_table[from].fn(op);
        op->state = to;
        if (to == from || bget_table[to].wait)
            return;
    }
}

/* Bytes of a chunk's op: the op, then its per-key and per-piece arrays. */
static size_t bget_op_size(size_t n, size_t npieces)
{
    return sizeof(bget_op_t) +
           n * (STORE_MAX_REPLICAS * sizeof(mc_master_replica_desc_t) + sizeof(mc_te_segment_t) +
                sizeof(mc_status_t) + 2 * sizeof(uint32_t)) +
           npieces * (sizeof(mc_te_request_t) + sizeof(size_t));
}

/* Lay op's arrays out after it in its scratch memory (most aligned first). */
static void bget_op_layout(bget_op_t *op, size_t n, size_t npieces)
{
    memset(op, 0, sizeof(*op));
    uint8_t *p = (uint8_t *)(op + 1);
    op->rep = (mc_master_replica_desc_t *)p;
    p += n * STORE_MAX_REPLICAS * sizeof(mc_master_replica_desc_t);
    op->reqs = (mc_te_request_t *)p;
    p += npieces * sizeof(mc_te_request_t);
    op->seg = (mc_te_segment_t *)p;
    p += n * sizeof(mc_te_segment_t);
    op->task_key = (size_t *)p;
    p += npieces * sizeof(size_t);
    op->st = (mc_status_t *)p;
    p += n * sizeof(mc_status_t);
    op->nrep = (uint32_t *)p;
    p += n * sizeof(uint32_t);
    op->pick = (uint32_t *)p;
}

/* One chunk (n <= BGET_CHUNK keys, valid, pieces usable in place, npieces
 * of them): results into result[], and retry[i] = 1 for the keys left to
 * single gets. The op lives in the client's scratch memory (no allocation
 * once the client has served a chunk this large). */
static mc_status_t bget_chunk(mc_store_t *s, const mc_master_key_t *keys, const mc_slice_t *parts,
                              const size_t *pfirst, const size_t *pcount, size_t npieces, size_t n,
                              int64_t *result, uint8_t *retry)
{
    store_scratch_t *sc = store_scratch_take(s, bget_op_size(n, npieces));
    if (sc == NULL)
        return MC_ERR_NOMEM;
    bget_op_t *op = (bget_op_t *)sc->mem;
    bget_op_layout(op, n, npieces);
    op->todo = retry;
    memset(retry, BG_KEY_DONE, n);
    op->n = n;
    op->keys = keys;
    op->parts = parts;
    op->pfirst = pfirst;
    op->pcount = pcount;
    op->result = result;
    op->h.s = s;
    op->h.step = bget_step;
    op->h.fail = bget_finish;
    op->h.harvest = bget_harvest;
    op->state = BG_LIST;
    store_waiter_t w;
    store_waiter_init(&w);
    op->w = &w;
    mc_status_t st = store_op_submit(&op->h);
    if (st != MC_INPROGRESS) {
        w.done = 1;
        store_waiter_wait(&w);
        store_scratch_give(s, sc);
        return st;
    }
    st = (mc_status_t)store_waiter_wait(&w);
    store_scratch_give(s, sc);
    for (size_t i = 0; i < n; i++)
        retry[i] = retry[i] == BG_KEY_RETRY;
    return st;
}

/* Keys idx[0..n) as single gets, all in flight at once; items and tmp are
 * the caller's arrays of n. A key in one piece is read into it; one in
 * several pieces into a temporary buffer of their total size (a bounce:
 * allocated), then scattered over them. */
static mc_status_t bget_singles(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *parts,
                                const size_t *pf, const size_t *pc, const size_t *idx, size_t n,
                                store_fanout_item_t *items, mc_slice_t *tmp, int64_t *result)
{
    if (n == 0)
        return MC_OK;
    memset(items, 0, n * sizeof(*items));
    memset(tmp, 0, n * sizeof(*tmp));
    store_fanout_t f;
    store_fanout_init(&f);
    for (size_t j = 0; j < n; j++) {
        size_t i = idx[j];
        tmp[j] = pc[i] == 1 ? parts[pf[i]] : (mc_slice_t){NULL, 0};
        if (pc[i] != 1) {
            for (size_t q = 0; q < pc[i]; q++)
                tmp[j].len += parts[pf[i] + q].len;
            tmp[j].ptr = tmp[j].len > 0 ? mc_malloc(tmp[j].len) : NULL;
            if (tmp[j].len > 0 && tmp[j].ptr == NULL) {
                result[i] = MC_ERR_NOMEM;
                continue;
            }
        }
        items[j] = (store_fanout_item_t){&f, &result[i]};
        store_fanout_add(&f);
        mc_status_t st = store_get_submit(s, keys[i].ptr, keys[i].len, tmp[j].ptr, tmp[j].len, 0,
                                          NULL, store_fanout_get_cb, &items[j]);
        if (st != MC_INPROGRESS) {
            result[i] = st;
            store_fanout_cancel(&f);
        }
    }
    store_fanout_wait(&f);
    for (size_t j = 0; j < n; j++) {
        size_t i = idx[j];
        if (pc[i] == 1)
            continue;
        const uint8_t *src = tmp[j].ptr;
        for (uint64_t left = result[i] > 0 ? (uint64_t)result[i] : 0, q = 0; q < pc[i] && left > 0;
             q++) {
            const mc_slice_t *p = &parts[pf[i] + q];
            uint64_t take = p->len < left ? p->len : left;
            if (te_gpu_of(p->ptr) < 0)
                memcpy(p->ptr, src, take);
            else if (te_gpu_copy(p->ptr, src, take) != MC_OK) /* logged */
                result[i] = MC_ERR_TRANSFER_FAIL;
            src += take;
            left -= take;
        }
        mc_free(tmp[j].ptr);
    }
    return MC_OK;
}

/* A co-located client's batch get: one call to the service for values of
 * one piece each; for values in pieces, a get per key into one buffer that
 * is then scattered. */
static mc_status_t dummy_batch_get(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *parts,
                                   const size_t *nparts, size_t n, int64_t *result)
{
    if (n == 0)
        return MC_OK;
    if (nparts == NULL)
        return store_dummy_batch_get(s, keys, (mc_slice_t *)(uintptr_t)parts, n, result);
    for (size_t i = 0, at = 0; i < n; at += nparts[i++]) {
        const mc_slice_t *p = parts + at;
        if (nparts[i] == 1) {
            result[i] = store_dummy_get(s, keys[i].ptr, keys[i].len, p->ptr, p->len, NULL);
            continue;
        }
        size_t total = 0;
        for (size_t q = 0; q < nparts[i]; q++)
            total += p[q].len;
        uint8_t *tmp = total > 0 ? mc_malloc(total) : NULL;
        if (tmp == NULL) {
            result[i] = total > 0 ? MC_ERR_NOMEM : MC_ERR_INVALID_PARAMS;
            continue;
        }
        int64_t got = store_dummy_get(s, keys[i].ptr, keys[i].len, tmp, total, NULL);
        for (size_t q = 0, off = 0; got > 0 && q < nparts[i] && off < (size_t)got; q++) {
            size_t c = (size_t)got - off < p[q].len ? (size_t)got - off : p[q].len;
            memcpy(p[q].ptr, tmp + off, c);
            off += c;
        }
        mc_free(tmp);
        result[i] = got;
    }
    return MC_OK;
}

/* Batch get of n keys into pieces: key i's are parts[pfirst .. + nparts[i])
 * in order (nparts NULL: one piece each, parts[i]). */
static mc_status_t batch_get(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *parts,
                             const size_t *nparts, size_t n, int64_t *result)
{
    if (s == NULL || result == NULL || (n > 0 && (keys == NULL || parts == NULL)))
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL)
        return dummy_batch_get(s, keys, parts, nparts, n, result);
    if (store_on_reactor(s))
        return MC_ERR_STATE;
    if (n == 0)
        return MC_OK;
    size_t chunk = n < BGET_CHUNK ? n : BGET_CHUNK;
    /* the client's scratch memory: the singles' fan-out items and buffers,
     * idx, pf, pc [n], then per chunk keys, results, caller indexes, first
     * pieces and counts, retry flags (most aligned first) */
    store_scratch_t *sc = store_scratch_take(
        s, n * (sizeof(store_fanout_item_t) + sizeof(mc_slice_t)) + 3 * n * sizeof(size_t) +
               chunk * (sizeof(mc_master_key_t) + sizeof(int64_t) + 3 * sizeof(size_t) + 1));
    if (sc == NULL)
        return MC_ERR_NOMEM;
    store_fanout_item_t *items = (store_fanout_item_t *)sc->mem;
    mc_slice_t *tmp = (mc_slice_t *)(items + n);
    size_t *idx = (size_t *)(tmp + n);
    size_t *pf = idx + n, *pc = idx + 2 * n;
    mc_master_key_t *ck = (mc_master_key_t *)(idx + 3 * n);
    int64_t *cr = (int64_t *)(ck + chunk);
    size_t *ci = (size_t *)(cr + chunk);
    size_t *cf = ci + chunk, *cc = cf + chunk;
    uint8_t *retry = (uint8_t *)(cc + chunk);
    for (size_t i = 0, at = 0; i < n; i++) {
        pf[i] = at;
        pc[i] = nparts != NULL ? nparts[i] : 1;
        at += pc[i];
    }
    /* keys for single gets: those whose pieces cannot be used in place
     * (they need the staging buffer), and those a chunk left over */
    size_t nsingle = 0, i = 0;
    while (i < n) {
        size_t m = 0, npieces = 0;
        for (; i < n && m < chunk; i++) {
            int ok = pc[i] > 0 && store_check_key(keys[i].ptr, keys[i].len) == MC_OK;
            for (size_t q = 0; q < pc[i] && ok; q++) {
                const mc_slice_t *p = &parts[pf[i] + q];
                ok = p->len > 0 && p->ptr != NULL && store_direct_ok(s, p->ptr, p->len);
            }
            if (ok) {
                ck[m] = (mc_master_key_t){keys[i].ptr, keys[i].len};
                cf[m] = pf[i];
                cc[m] = pc[i];
                npieces += pc[i];
                ci[m++] = i;
            } else {
                idx[nsingle++] = i; /* a single get checks it and says what is wrong */
            }
        }
        if (m == 0)
            continue;
        mc_status_t st = bget_chunk(s, ck, parts, cf, cc, npieces, m, cr, retry);
        for (size_t j = 0; j < m; j++) {
            if (st == MC_OK && retry[j])
                idx[nsingle++] = ci[j];
            else
                result[ci[j]] = st == MC_OK ? cr[j] : st;
        }
    }
    mc_status_t rc = bget_singles(s, keys, parts, pf, pc, idx, nsingle, items, tmp, result);
    store_scratch_give(s, sc);
    return rc;
}

mc_status_t mc_store_batch_get(mc_store_t *s, const mc_slice_t *keys, mc_slice_t *bufs, size_t n,
                               int64_t *result)
{
    return batch_get(s, keys, bufs, NULL, n, result);
}

mc_status_t mc_store_batch_get_parts(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *parts,
                                     const size_t *nparts, size_t n, int64_t *result)
{
    if (n > 0 && nparts == NULL)
        return MC_ERR_INVALID_PARAMS;
    return batch_get(s, keys, parts, nparts, n, result);
}

mc_status_t mc_store_batch_get_size(mc_store_t *s, const mc_slice_t *keys, size_t n, int64_t *sizes)
{
    if (s == NULL || sizes == NULL || (n > 0 && keys == NULL))
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL) { /* co-located: the service says each size */
        for (size_t i = 0; i < n; i++)
            sizes[i] = store_dummy_get_size(s, keys[i].ptr, keys[i].len);
        return MC_OK;
    }
    if (n == 0)
        return MC_OK;
    /* the valid keys go to the master, in chunks */
    size_t chunk = n < BGET_CHUNK ? n : BGET_CHUNK;
    size_t sz = chunk * (sizeof(mc_master_key_t) + sizeof(size_t) + sizeof(mc_status_t) +
                         sizeof(uint32_t) + STORE_MAX_REPLICAS * sizeof(mc_master_replica_desc_t));
    uint8_t *mem = mc_malloc(sz);
    if (mem == NULL)
        return MC_ERR_NOMEM;
    mc_master_replica_desc_t *d = (mc_master_replica_desc_t *)mem;
    mc_master_key_t *ck = (mc_master_key_t *)(d + chunk * STORE_MAX_REPLICAS);
    size_t *ci = (size_t *)(ck + chunk);
    mc_status_t *cst = (mc_status_t *)(ci + chunk);
    uint32_t *nrep = (uint32_t *)(cst + chunk);
    mc_status_t rc = MC_OK;
    size_t i = 0;
    while (i < n && rc == MC_OK) {
        size_t m = 0;
        for (; i < n && m < chunk; i++) {
            mc_status_t st = store_check_key(keys[i].ptr, keys[i].len);
            if (st != MC_OK) {
                sizes[i] = st;
                continue;
            }
            ck[m] = (mc_master_key_t){keys[i].ptr, keys[i].len};
            ci[m++] = i;
        }
        if (m == 0)
            break;
        mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
        mc_mp_writer_t w;
        mc_mp_writer_init(&w, &body);
        mc_mcli_keys(&w, ck, m);
        size_t got = 0;
        rc = w.err != MC_OK ? w.err
                            : store_call_sync(s, MC_RPC_BATCH_GET_REPLICA_LIST, &body, &resp);
        if (rc == MC_OK && (mc_mcli_dec_items(mc_buf_head(&resp), mc_buf_used(&resp), cst, d,
                                              STORE_MAX_REPLICAS, nrep, m, &got, NULL) != MC_OK ||
                            got != m))
            rc = MC_ERR_PROTOCOL;
        mc_buf_fini(&body);
        mc_buf_fini(&resp);
        for (size_t j = 0; j < m; j++) {
            int64_t v = rc != MC_OK ? rc : cst[j] != MC_OK ? cst[j] : MC_ERR_OBJECT_NOT_FOUND;
            for (uint32_t r = 0; rc == MC_OK && cst[j] == MC_OK && r < nrep[j]; r++)
                if (d[j * STORE_MAX_REPLICAS + r].status == MC_MASTER_REPLICA_COMPLETE) {
                    v = (int64_t)d[j * STORE_MAX_REPLICAS + r].size;
                    break;
                }
            sizes[ci[j]] = v;
        }
    }
    for (; i < n; i++) /* after a failed call: the keys not asked fail alike */
        sizes[i] = rc;
    mc_free(mem);
    return MC_OK;
}

/* ------------------------------------------------------ size and query */

/* GetReplicaList from the caller's thread (*lease_us may be NULL). */
static mc_status_t replica_list_sync(mc_store_t *s, const void *key, size_t klen,
                                     mc_master_replica_desc_t *d, uint32_t *n, uint64_t *lease_us)
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
                                            STORE_MAX_REPLICAS, n, lease_us) != MC_OK)
        st = MC_ERR_PROTOCOL;
    if (st == MC_OK && *n == 0)
        st = MC_ERR_OBJECT_NOT_FOUND;
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return st;
}

int64_t mc_store_get_size(mc_store_t *s, const void *key, size_t klen)
{
    if (s != NULL && s->svc != NULL)
        return store_dummy_get_size(s, key, klen);
    mc_master_replica_desc_t d[STORE_MAX_REPLICAS];
    uint32_t n = 0;
    mc_status_t st = replica_list_sync(s, key, klen, d, &n, NULL);
    return st != MC_OK ? st : (int64_t)d[0].size;
}

mc_status_t mc_store_query(mc_store_t *s, const void *key, size_t klen, mc_store_replica_t *out,
                           uint32_t room, uint32_t *n)
{
    if (n == NULL || (room > 0 && out == NULL))
        return MC_ERR_INVALID_PARAMS;
    if (s != NULL && s->svc != NULL)
        return store_dummy_query(s, key, klen, out, room, n);
    mc_master_replica_desc_t d[STORE_MAX_REPLICAS];
    uint32_t cnt = 0;
    mc_status_t st = replica_list_sync(s, key, klen, d, &cnt, NULL);
    if (st != MC_OK)
        return st;
    for (uint32_t i = 0; i < cnt && i < room; i++) {
        snprintf(out[i].segment, sizeof(out[i].segment), "%s", d[i].segment_name);
        out[i].address = d[i].address;
        out[i].size = d[i].size;
        out[i].complete = d[i].status == MC_MASTER_REPLICA_COMPLETE;
        out[i].disk = d[i].kind == MC_MASTER_REPLICA_DISK;
    }
    *n = cnt;
    return MC_OK;
}
