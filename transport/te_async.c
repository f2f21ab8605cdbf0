/*
 * te_async.c - opening and refreshing peer segments without blocking, for
 * state machines that run on the engine's reactors (see te.h for the
 * contract). mc_te_open_segment / te_seg_refresh do the same with blocking
 * waits and are refused on reactor threads.
 *
 * Every request is a small machine that runs on te->rs[0]: the reactor of
 * the metadata backend and of every segment's first lane, so the async calls
 * it makes (meta get, MC_RPC_TE_DESC) are legal there and their callbacks
 * come back there.
 *
 *   open:    START --(our name / cached)--> DONE
 *            START --p2p--> lanes --> DESC (rpc on lane 0) --> INSERT --> DONE
 *            START --metadata--> GET (meta get) --> lanes --> INSERT --> DONE
 *   refresh: START --> DESC or GET --> decode under seg_lock --> DONE
 *
 * Lanes (RPC clients of the TCP transport) are created with
 * te_tcp_lanes_open: a client on another reactor of the engine is set up by a
 * short hop to that reactor (mc_rpc_run_on). That is a wait on a sibling
 * reactor's mailbox, never on I/O, and no engine reactor ever waits on rs[0],
 * so it cannot deadlock.
 *
 * Two opens of the same name may race: the second to finish finds the first
 * one's record when it inserts and uses it (its own lanes are dropped).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/fields.h"
#include "rpc/methods.h"
#include "transport/te_int.h"
#include "util/log.h"
#include "util/mem.h"

typedef enum { AOP_OPEN, AOP_REFRESH } aop_kind_t;

typedef struct aop {
    mc_reactor_msg_t msg; /* START, posted to rs[0]; then the wake-up after a wait */
    te_waiter_t wait;     /* waiting for a transport to set the segment up (shm) */
    mc_te_t *te;
    aop_kind_t kind;
    te_seg_t *seg;      /* open: ours until inserted; refresh: the cached record */
    mc_te_segment_t id; /* refresh: the handle */
    union {
        te_open_cb_t open;
        te_done_cb_t done;
    } cb;
    void *arg;
    char name[256];
} aop_t;

/* The end of every request: report and free. On rs[0] (or on a stopping
 * reactor with MC_ERR_CANCELED). */
static void aop_finish(aop_t *op, mc_status_t st, mc_te_segment_t id)
{
    if (op->kind == AOP_OPEN) {
        te_seg_free(op->te, op->seg);
        op->cb.open(op->arg, st, st == MC_OK ? id : 0);
    } else {
        op->cb.done(op->arg, st);
    }
    mc_free(op);
}

/* Existing record of name, with a reference taken, or 0. */
static mc_te_segment_t seg_lookup(mc_te_t *te, const char *name)
{
    mc_te_segment_t id = 0;
    pthread_mutex_lock(&te->seg_lock);
    for (size_t i = 0; i < te->nsegs && id == 0; i++) {
        if (strcmp(te->segs[i]->name, name) == 0) {
            te->segs[i]->refs++;
            id = te->segs[i]->id;
        }
    }
    pthread_mutex_unlock(&te->seg_lock);
    return id;
}

/* Publish op->seg in the engine's table (or adopt a record another open
 * inserted meanwhile). */
static void open_insert(aop_t *op)
{
    mc_te_t *te = op->te;
    te_seg_t *seg = op->seg;
    mc_te_segment_t id = 0;
    pthread_mutex_lock(&te->seg_lock);
    for (size_t i = 0; i < te->nsegs && id == 0; i++) {
        if (strcmp(te->segs[i]->name, seg->name) == 0) {
            te->segs[i]->refs++;
            id = te->segs[i]->id;
        }
    }
    if (id == 0) {
        if (te->nsegs == te->cap_segs) {
            size_t cap = te->cap_segs ? te->cap_segs * 2 : 8;
            te_seg_t **ns = mc_realloc(te->segs, cap * sizeof(*ns));
            if (ns == NULL) {
                pthread_mutex_unlock(&te->seg_lock);
                aop_finish(op, MC_ERR_NOMEM, 0);
                return;
            }
            te->segs = ns;
            te->cap_segs = cap;
        }
        te->segs[te->nsegs++] = seg;
        seg->id = te->nsegs;
        seg->refs = 1;
        id = seg->id;
        op->seg = NULL; /* the engine's now */
    }
    pthread_mutex_unlock(&te->seg_lock);
    MC_DEBUG(TRANSPORT, "segment '%s' open as %llu (async)", op->name, (unsigned long long)id);
    aop_finish(op, MC_OK, id);
}

static void described(aop_t *op);

/* A transport finished setting the segment up: on rs[0] again. */
static void wait_msg(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    aop_t *op = MC_CONTAINER_OF(msg, aop_t, msg);
    (void)r;
    if (st != MC_OK || atomic_load(&op->te->stopping)) {
        aop_finish(op, MC_ERR_CANCELED, 0);
        return;
    }
    described(op);
}

static void wait_done(te_waiter_t *w)
{
    aop_t *op = MC_CONTAINER_OF(w, aop_t, wait);
    op->msg.fn = wait_msg;
    if (mc_reactor_post(op->te->rs[0], &op->msg) != MC_OK)
        aop_finish(op, MC_ERR_CANCELED, 0); /* the engine is going */
}

/* The descriptor is decoded: wait (without blocking) until the transports
 * are done with it (shm maps a same-host owner's memory), so the first
 * transfers use them; then finish. */
static void described(aop_t *op)
{
    mc_te_t *te = op->te;
    te_seg_t *seg = op->seg;
    for (unsigned id = 0; id < TE_TP_COUNT; id++) {
        const te_transport_ops_t *ops = te_transports[id];
        if (te_tp_on(te, id) && ops->seg_pending != NULL) {
            op->wait.fn = wait_done;
            if (ops->seg_pending(te, seg, &op->wait))
                return; /* wait_done goes on */
        }
    }
    if (op->kind == AOP_REFRESH)
        aop_finish(op, MC_OK, op->id);
    else
        open_insert(op);
}

/* A descriptor arrived (or did not). */
static void got_desc(aop_t *op, mc_status_t st, const void *val, size_t len)
{
    mc_te_t *te = op->te;
    if (st == MC_OK && atomic_load(&te->stopping))
        st = MC_ERR_CANCELED;
    if (st != MC_OK) {
        if (st != MC_ERR_CANCELED)
            MC_WARN(TRANSPORT, "cannot fetch the descriptor of segment '%s': %s", op->name,
                    mc_status_str(st));
        aop_finish(op, st, 0);
        return;
    }
    if (op->kind == AOP_REFRESH) {
        pthread_mutex_lock(&te->seg_lock);
        st = te_desc_decode(te, op->seg, val, len);
        pthread_mutex_unlock(&te->seg_lock);
        if (st != MC_OK)
            aop_finish(op, st, op->id);
        else
            described(op);
        return;
    }
    st = te_desc_decode(te, op->seg, val, len); /* not shared yet: no lock */
    if (st == MC_OK && te->meta != NULL)
        st = te_tcp_lanes_open(te, op->seg); /* p2p opened them before asking */
    if (st != MC_OK) {
        aop_finish(op, st, 0);
        return;
    }
    described(op);
}

static void meta_cb(void *arg, mc_status_t st, const void *val, size_t len)
{
    got_desc(arg, st, val, len);
}

static void desc_rpc_cb(void *arg, const mc_rpc_resp_t *resp)
{
    got_desc(arg, resp->status, resp->body, resp->body_len);
}

/* Ask for the descriptor of op->seg: metadata backend or the peer itself. */
static void fetch_desc(aop_t *op)
{
    mc_te_t *te = op->te;
    mc_status_t st;
    if (te->meta != NULL) {
        char key[512];
        te_meta_key(te, "seg", op->name, key, sizeof(key));
        st = te->meta->ops->get(te->meta, key, meta_cb, op);
    } else {
        st = mc_rpc_call(op->seg->lanes[0], MC_RPC_TE_DESC, NULL, 0, te->o.timeout_us, desc_rpc_cb,
                         op);
    }
    if (st != MC_INPROGRESS)
        aop_finish(op, st == MC_OK ? MC_ERR_INTERNAL_ERROR : st, 0);
}

static void aop_start(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    aop_t *op = MC_CONTAINER_OF(msg, aop_t, msg);
    mc_te_t *te = op->te;
    (void)r;
    if (st != MC_OK || atomic_load(&te->stopping)) {
        aop_finish(op, MC_ERR_CANCELED, 0);
        return;
    }
    if (op->kind == AOP_REFRESH) {
        fetch_desc(op);
        return;
    }
    if (strcmp(op->name, te->name) == 0) {
        aop_finish(op, MC_OK, MC_TE_LOCAL_SEGMENT);
        return;
    }
    mc_te_segment_t id = seg_lookup(te, op->name);
    if (id != 0) {
        aop_finish(op, MC_OK, id);
        return;
    }
    te_seg_t *seg = MC_NEW(te_seg_t);
    if (seg == NULL || (seg->name = mc_strdup(op->name)) == NULL) {
        mc_free(seg);
        aop_finish(op, MC_ERR_NOMEM, 0);
        return;
    }
    op->seg = seg;
    if (te->meta == NULL) {
        if (te_split_host_port(op->name, seg->host, sizeof(seg->host), &seg->port) != 0) {
            MC_ERROR(TRANSPORT, "segment '%s': with metadata = p2p a segment is named HOST:PORT",
                     op->name);
            aop_finish(op, MC_ERR_INVALID_ARGUMENT, 0);
            return;
        }
        st = te_tcp_lanes_open(te, seg);
        if (st != MC_OK) {
            aop_finish(op, st, 0);
            return;
        }
    }
    fetch_desc(op);
}

static mc_status_t aop_submit(aop_t *op)
{
    op->msg.fn = aop_start;
    if (atomic_load(&op->te->stopping) || mc_reactor_post(op->te->rs[0], &op->msg) != MC_OK) {
        mc_free(op);
        return MC_ERR_CANCELED;
    }
    return MC_INPROGRESS;
}

mc_status_t te_open_segment_async(mc_te_t *te, const char *name, te_open_cb_t cb, void *arg)
{
    if (name == NULL || *name == '\0' || strlen(name) > 255 || cb == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    aop_t *op = MC_NEW(aop_t);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->te = te;
    op->kind = AOP_OPEN;
    op->cb.open = cb;
    op->arg = arg;
    snprintf(op->name, sizeof(op->name), "%s", name);
    return aop_submit(op);
}

mc_status_t te_seg_refresh_async(mc_te_t *te, mc_te_segment_t id, te_done_cb_t cb, void *arg)
{
    te_seg_t *seg = id == MC_TE_LOCAL_SEGMENT ? NULL : te_seg_get(te, id);
    if (seg == NULL || cb == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    aop_t *op = MC_NEW(aop_t);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->te = te;
    op->kind = AOP_REFRESH;
    op->seg = seg;
    op->id = id;
    op->cb.done = cb;
    op->arg = arg;
    snprintf(op->name, sizeof(op->name), "%s", seg->name);
    return aop_submit(op);
}

/* ------------------------------------------------------------- publish */

static void publish_done(void *arg, mc_status_t st)
{
    (void)arg;
    if (st != MC_OK && st != MC_ERR_CANCELED)
        MC_DEBUG(TRANSPORT, "re-publishing: %s (the backend retries)", mc_status_str(st));
}

mc_status_t te_publish_async(mc_te_t *te)
{
    if (te->meta == NULL)
        return MC_OK;
    mc_buf_t sv = MC_BUF_INIT, rv = MC_BUF_INIT;
    char key[512];
    mc_status_t st = te_publish_encode(te, &sv, &rv);
    if (st == MC_OK) {
        te_meta_key(te, "seg", te->name, key, sizeof(key));
        st = te->meta->ops->put(te->meta, key, mc_buf_head(&sv), mc_buf_used(&sv), publish_done,
                                NULL);
    }
    if (st == MC_INPROGRESS) {
        snprintf(key, sizeof(key), "mc/%s/rpc/%s", te->cluster, te->name);
        st = te->meta->ops->put(te->meta, key, mc_buf_head(&rv), mc_buf_used(&rv), publish_done,
                                NULL);
    }
    mc_buf_fini(&sv);
    mc_buf_fini(&rv);
    return st == MC_INPROGRESS ? MC_OK : st;
}
