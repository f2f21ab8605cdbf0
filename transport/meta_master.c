/*
 * meta_master.c - the "master://" metadata backend: the embedded KV of
 * mooncake-master, reached with the Meta RPCs over one mc_rpc_client.
 *
 * Bodies (store/proto.h, encoded here because transport/ may not include
 * store/): META_GET {KEY} -> {VALUE}; META_PUT {KEY, VALUE, CLIENT_ID} -> {};
 * META_DEL {KEY, CLIENT_ID} -> {} (only the owner may delete);
 * META_LIST {PREFIX, AFTER} -> {ENTRIES: [{KEY, VALUE}], MORE}: paged, keys in
 * byte order; while MORE we ask again with AFTER = the last key and deliver
 * the whole list once (the entries copied across pages);
 * PING {CLIENT_ID} -> {VIEW_VERSION, CLIENT_STATUS}. Keys and values are bin,
 * the client id is [hi, lo].
 *
 * Liveness. Every put carries our owner id, so the master deletes our entries
 * when we stop pinging (client_ttl). We ping every ping_interval. The master's
 * KV is in memory: a restarted master has a new view version and none of our
 * entries, and an owner the master expired (we were silent too long) gets
 * NEED_REMOUNT. In both cases we re-put every entry we remember. A client id
 * that never mounts segments stays NEED_REMOUNT at the master, so such a
 * process re-puts its (few) entries at every ping; a process whose store
 * client shares the id and remounts sees OK and re-puts only when needed.
 *
 * Own entries are remembered when the put is submitted, so a put that fails
 * because the master is away is published by the next re-put; a put the
 * master rejects outright (bad key, value too long) is forgotten again.
 *
 * Callbacks: every call's callback comes from the rpc client's callback
 * (MC_ERR_CANCELED at close or reactor stop, via the client's destroy / stop
 * hook). The backend counts its callback depth so that a close from inside one
 * of its callbacks frees it only when the outermost callback returns.
 */
#include <stdio.h>
#include <string.h>

#include "reactor/guard.h"
#include "rpc/fields.h"
#include "rpc/methods.h"
#include "rpc/msgpack.h"
#include "rpc/rpc.h"
#include "transport/metadata.h"
#include "transport/meta_int.h"
#include "util/log.h"
#include "util/mem.h"

/* mooncake-master's ClientStatus (store/master.h) */
#define CLIENT_STATUS_NEED_REMOUNT 2

/* Connection attempts: longer than a loopback handshake, shorter than the
 * default call timeout so a dead master is reported as such. */
#define CONNECT_TIMEOUT_MAX_US 3000000

typedef struct meta_master {
    mc_meta_t base; /* first: mc_meta_t * <-> meta_master_t * */
    mc_meta_opts_t o;
    char name[300]; /* "master://host:port" for log lines */
    mc_rpc_client_t *cli;
    meta_own_t *own;
    mc_timer_t ping_timer;
    mc_reactor_hook_t stop_hook;
    int hooked;
    int ping_inflight;
    int have_view; /* view is the version of the master we last reached */
    int64_t view;
    int republish_needed; /* some re-put failed in transit: do it again at the next ping */
    int held_logged;      /* a key held by another live owner was reported */
    size_t reputs_inflight;
    int stopped;      /* closing or reactor stopping: calls are refused */
    mc_guard_t guard; /* our callbacks on the stack: a close inside one waits (reactor/guard.h) */
} meta_master_t;

typedef enum { OP_GET, OP_PUT, OP_DEL, OP_LIST, OP_PING, OP_REPUT } op_kind_t;

/* One RPC in flight; freed by its rpc callback. */
typedef struct mop {
    meta_master_t *m;
    op_kind_t kind;
    union {
        mc_meta_get_cb_t get;
        mc_meta_done_cb_t done;
        mc_meta_list_cb_t list;
    } cb;
    void *arg;
    uint64_t gen; /* put, reput: the own entry's generation */
    /* list: the entries of the pages so far, as records
     * [u32 klen][key][NUL][u32 vlen][value] */
    mc_buf_t acc;
    uint32_t nacc;
    char key[]; /* put, reput: for forgetting a rejected entry and for logs; list: prefix */
} mop_t;

static void mm_free(meta_master_t *m);
static void republish(meta_master_t *m);

/* Statuses that say nothing about the entry itself: the master was away or
 * busy. The entry stays remembered and is re-put later. */
static int transient(mc_status_t st)
{
    return st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT || st == MC_ERR_CANCELED ||
           st == MC_ERR_NOMEM || st == MC_ERR_TIMEOUT || st == MC_ERR_NOT_LEADER;
}

static void cb_enter(meta_master_t *m)
{
    mc_guard_enter(&m->guard);
}

/* After this, m may be gone. */
static void cb_leave(meta_master_t *m)
{
    if (mc_guard_leave(&m->guard))
        mm_free(m);
}

static void write_owner(mc_mp_writer_t *w, const meta_master_t *m)
{
    mc_mp_write_uint(w, MC_F_CLIENT_ID);
    mc_mp_write_array(w, 2);
    mc_mp_write_uint(w, m->o.owner_hi);
    mc_mp_write_uint(w, m->o.owner_lo);
}

/* The MC_F_ERROR text of a failed call, or "". */
static const char *error_text(const mc_rpc_resp_t *resp, char *buf, size_t len)
{
    buf[0] = '\0';
    if (resp->body == NULL)
        return buf;
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, resp->body, resp->body_len);
    uint32_t n = mc_mp_read_map(&r);
    for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
        if (mc_mp_read_uint(&r) != MC_F_ERROR) {
            mc_mp_skip(&r);
            continue;
        }
        uint32_t tl = 0;
        const char *t = mc_mp_read_str(&r, &tl);
        if (r.err == MC_OK) {
            size_t k = tl < len - 1 ? tl : len - 1;
            memcpy(buf, t, k);
            buf[k] = '\0';
        }
        break;
    }
    return buf;
}

/* The caller sets the callback member matching kind. */
static mop_t *op_new(meta_master_t *m, op_kind_t kind, const char *key, void *arg)
{
    size_t klen = key != NULL ? strlen(key) : 0;
    mop_t *op = mc_malloc(sizeof(*op) + klen + 1);
    if (op == NULL)
        return NULL;
    memset(op, 0, sizeof(*op));
    op->m = m;
    op->kind = kind;
    op->arg = arg;
    memcpy(op->key, key != NULL ? key : "", klen + 1);
    return op;
}

/* ------------------------------------------------------------- replies */

static void reply_get(mop_t *op, const mc_rpc_resp_t *resp)
{
    mc_status_t st = resp->status;
    const void *val = NULL;
    uint32_t len = 0;
    if (st == MC_OK) {
        int have = 0;
        mc_mp_reader_t r;
        mc_mp_reader_init(&r, resp->body, resp->body_len);
        uint32_t n = mc_mp_read_map(&r);
        for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
            if (mc_mp_read_uint(&r) == MC_F_VALUE) {
                val = mc_mp_read_bin(&r, &len);
                have = 1;
            } else {
                mc_mp_skip(&r);
            }
        }
        if (r.err != MC_OK || !have) {
            MC_ERROR(METADATA, "%s: get '%s': malformed answer (no value)", op->m->name, op->key);
            st = MC_ERR_PROTOCOL;
            val = NULL;
            len = 0;
        }
    }
    op->cb.get(op->arg, st, st == MC_OK ? val : NULL, st == MC_OK ? len : 0);
}

/* Count the entries of an ENTRIES array and the bytes their keys need. */
static mc_status_t send_op(meta_master_t *m, mop_t *op, uint16_t method);
static mc_status_t send_list(meta_master_t *m, mop_t *op, const char *after, size_t alen);

static mc_status_t acc_add(mop_t *op, const char *k, uint32_t kl, const void *v, uint32_t vl)
{
    if (mc_buf_reserve(&op->acc, 8 + (size_t)kl + 1 + vl) != MC_OK)
        return MC_ERR_NOMEM;
    uint8_t *p = mc_buf_tail(&op->acc);
    memcpy(p, &kl, 4);
    memcpy(p + 4, k, kl);
    p[4 + kl] = '\0';
    memcpy(p + 5 + kl, &vl, 4);
    if (vl > 0)
        memcpy(p + 9 + kl, v, vl);
    mc_buf_produce(&op->acc, 9 + (size_t)kl + vl);
    op->nacc++;
    return MC_OK;
}

/* Deliver the accumulated entries (or st) to the caller. */
static void list_deliver(mop_t *op, mc_status_t st)
{
    mc_meta_entry_t *e = NULL;
    uint32_t n = 0;
    if (st == MC_OK && op->nacc > 0) {
        e = mc_calloc(op->nacc, sizeof(*e));
        if (e == NULL) {
            st = MC_ERR_NOMEM;
        } else {
            const uint8_t *p = mc_buf_head(&op->acc), *end = p + mc_buf_used(&op->acc);
            while (p < end && n < op->nacc) {
                uint32_t kl, vl;
                memcpy(&kl, p, 4);
                e[n].key = (const char *)p + 4;
                memcpy(&vl, p + 5 + kl, 4);
                e[n].val = p + 9 + kl;
                e[n].len = vl;
                p += 9 + (size_t)kl + vl;
                n++;
            }
        }
    }
    op->cb.list(op->arg, st, st == MC_OK ? e : NULL, st == MC_OK ? n : 0);
    mc_free(e);
    mc_buf_fini(&op->acc);
}

/* One page: its entries are copied into op->acc; while the master says MORE
 * the next page is asked for (a new op takes the accumulated ones over). */
static void reply_list(mop_t *op, const mc_rpc_resp_t *resp)
{
    meta_master_t *m = op->m;
    mc_status_t st = resp->status;
    const char *last = NULL;
    uint32_t last_len = 0, n = 0;
    int more = 0;
    if (st != MC_OK)
        goto done;
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, resp->body, resp->body_len);
    uint32_t nf = mc_mp_read_map(&r);
    for (uint32_t i = 0; i < nf && r.err == MC_OK && st == MC_OK; i++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_ENTRIES:
            n = mc_mp_read_array(&r);
            for (uint32_t j = 0; j < n && r.err == MC_OK && st == MC_OK; j++) {
                const char *k = NULL;
                const void *v = NULL;
                uint32_t kl = 0, vl = 0;
                uint32_t ef = mc_mp_read_map(&r);
                for (uint32_t f = 0; f < ef && r.err == MC_OK; f++) {
                    switch (mc_mp_read_uint(&r)) {
                    case MC_F_KEY:
                        k = mc_mp_read_bin(&r, &kl);
                        break;
                    case MC_F_VALUE:
                        v = mc_mp_read_bin(&r, &vl);
                        break;
                    default:
                        mc_mp_skip(&r);
                        break;
                    }
                }
                if (r.err != MC_OK || k == NULL)
                    goto malformed;
                st = acc_add(op, k, kl, v, vl);
                last = k;
                last_len = kl;
            }
            break;
        case MC_F_MORE:
            more = mc_mp_read_bool(&r);
            break;
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    if (r.err != MC_OK)
        goto malformed;
    if (st == MC_OK && more && last != NULL) {
        mop_t *next = op_new(m, OP_LIST, op->key, op->arg);
        if (next == NULL) {
            st = MC_ERR_NOMEM;
            goto done;
        }
        next->cb.list = op->cb.list;
        next->acc = op->acc;
        next->nacc = op->nacc;
        op->acc = (mc_buf_t)MC_BUF_INIT;
        op->nacc = 0;
        st = send_list(m, next, last, last_len);
        if (st == MC_INPROGRESS)
            return; /* the next page's reply goes on */
        /* send_list freed next: the entries went with it */
        op->cb.list(op->arg, st, NULL, 0);
        return;
    }
    goto done;

malformed:
    MC_ERROR(METADATA, "%s: list '%s': malformed answer", m->name, op->key);
    st = MC_ERR_PROTOCOL;
done:
    list_deliver(op, st);
}

static void reply_ping(mop_t *op, const mc_rpc_resp_t *resp)
{
    meta_master_t *m = op->m;
    m->ping_inflight = 0;
    if (resp->status != MC_OK) {
        /* The rpc client logs connection trouble; it reconnects on the next
         * ping. */
        MC_DEBUG(METADATA, "%s: ping failed: %s", m->name, mc_status_str(resp->status));
        return;
    }
    int64_t view = 0;
    uint64_t cs = 0;
    int have_view = 0;
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, resp->body, resp->body_len);
    uint32_t n = mc_mp_read_map(&r);
    for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_VIEW_VERSION:
            view = mc_mp_read_int(&r);
            have_view = 1;
            break;
        case MC_F_CLIENT_STATUS:
            cs = mc_mp_read_uint(&r);
            break;
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    if (r.err != MC_OK || !have_view) {
        MC_ERROR(METADATA, "%s: malformed ping answer", m->name);
        return;
    }
    int lost = 0;
    if (m->have_view && view != m->view) {
        MC_INFO(METADATA,
                "%s: view version %lld -> %lld (the master restarted): re-publishing "
                "%zu entries",
                m->name, (long long)m->view, (long long)view, meta_own_count(m->own));
        lost = 1;
    }
    if (cs == CLIENT_STATUS_NEED_REMOUNT) {
        MC_DEBUG(METADATA, "%s: ping says NEED_REMOUNT: re-publishing %zu entries", m->name,
                 meta_own_count(m->own));
        lost = 1;
    }
    m->have_view = 1;
    m->view = view;
    if (lost || m->republish_needed)
        republish(m);
}

/* The key is another live owner's (a process with our name that has not
 * expired yet, e.g. our own predecessor killed a moment ago): keep ours and
 * put it again at every ping until that owner expires and the master takes
 * it. Logged once per state change. */
static void held_elsewhere(meta_master_t *m, const char *key, const mc_rpc_resp_t *resp)
{
    char why[160];
    if (!m->held_logged)
        MC_WARN(METADATA,
                "%s: '%s' is held by another live client (%s); retrying at every ping until "
                "it expires (master.client_ttl)",
                m->name, key, error_text(resp, why, sizeof(why)));
    m->held_logged = 1;
    m->republish_needed = 1;
}

static void reply_reput(mop_t *op, const mc_rpc_resp_t *resp)
{
    meta_master_t *m = op->m;
    m->reputs_inflight--;
    if (resp->status == MC_OK)
        return;
    if (resp->status == MC_ERR_ILLEGAL_CLIENT) {
        held_elsewhere(m, op->key, resp);
        return;
    }
    if (transient(resp->status)) {
        if (resp->status != MC_ERR_CANCELED)
            m->republish_needed = 1;
        return;
    }
    char why[160];
    MC_WARN(METADATA, "%s: re-publishing '%s' rejected: %s%s%s; forgetting it", m->name, op->key,
            mc_status_str(resp->status), resp->body != NULL ? ": " : "",
            error_text(resp, why, sizeof(why)));
    meta_own_forget(m->own, op->key, op->gen);
}

static void on_reply(void *arg, const mc_rpc_resp_t *resp)
{
    mop_t *op = arg;
    meta_master_t *m = op->m;
    mc_status_t st = resp->status;
    char why[160];
    cb_enter(m);
    switch (op->kind) {
    case OP_GET:
        reply_get(op, resp);
        break;
    case OP_LIST:
        reply_list(op, resp);
        break;
    case OP_PUT:
        if (st == MC_ERR_ILLEGAL_CLIENT) {
            held_elsewhere(m, op->key, resp);
        } else if (st != MC_OK && !transient(st)) {
            MC_WARN(METADATA, "%s: put '%s' rejected: %s%s%s", m->name, op->key, mc_status_str(st),
                    resp->body != NULL ? ": " : "", error_text(resp, why, sizeof(why)));
            meta_own_forget(m->own, op->key, op->gen);
        }
        op->cb.done(op->arg, st);
        break;
    case OP_DEL:
        /* the contract: deleting a missing key is fine */
        op->cb.done(op->arg, st == MC_ERR_NOT_FOUND ? MC_OK : st);
        break;
    case OP_PING:
        reply_ping(op, resp);
        break;
    case OP_REPUT:
        reply_reput(op, resp);
        break;
    }
    mc_free(op);
    cb_leave(m);
}

/* --------------------------------------------------------------- calls */

static mc_meta_t *as_base(meta_master_t *m)
{
    return &m->base;
}

static meta_master_t *as_mm(mc_meta_t *b)
{
    return (meta_master_t *)b;
}

/* Finish the call begun with mc_rpc_call_begin; on a synchronous failure the
 * op is freed and the status returned. */
static mc_status_t send_op(meta_master_t *m, mop_t *op, uint16_t method)
{
    /* call_end also reports a failure of the writer (out of memory) */
    mc_status_t st = mc_rpc_call_end(m->cli, method, m->o.call_timeout_us, on_reply, op);
    if (st != MC_INPROGRESS) {
        MC_DEBUG(METADATA, "%s: cannot send method %u: %s", m->name, method, mc_status_str(st));
        mc_buf_fini(&op->acc);
        mc_free(op);
    }
    return st;
}

static void write_put(mc_mp_writer_t *w, meta_master_t *m, const char *key, const void *val,
                      size_t len)
{
    mc_mp_write_map(w, 3);
    mc_mp_write_uint(w, MC_F_KEY);
    mc_mp_write_bin(w, key, strlen(key));
    mc_mp_write_uint(w, MC_F_VALUE);
    mc_mp_write_bin(w, val, len);
    write_owner(w, m);
}

static mc_status_t mm_get(mc_meta_t *b, const char *key, mc_meta_get_cb_t cb, void *arg)
{
    meta_master_t *m = as_mm(b);
    if (key == NULL || cb == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (m->stopped)
        return MC_ERR_CANCELED;
    mop_t *op = op_new(m, OP_GET, key, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.get = cb;
    mc_mp_writer_t *w = mc_rpc_call_begin(m->cli);
    mc_mp_write_map(w, 1);
    mc_mp_write_uint(w, MC_F_KEY);
    mc_mp_write_bin(w, key, strlen(key));
    return send_op(m, op, MC_RPC_META_GET);
}

static mc_status_t mm_put(mc_meta_t *b, const char *key, const void *val, size_t len,
                          mc_meta_done_cb_t cb, void *arg)
{
    meta_master_t *m = as_mm(b);
    if (key == NULL || cb == NULL || (len > 0 && val == NULL) || len > UINT32_MAX)
        return MC_ERR_INVALID_ARGUMENT;
    if (m->stopped)
        return MC_ERR_CANCELED;
    mop_t *op = op_new(m, OP_PUT, key, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.done = cb;
    mc_status_t st = meta_own_set(m->own, key, val, len, &op->gen);
    if (st != MC_OK) {
        mc_free(op);
        return st;
    }
    uint64_t gen = op->gen;
    mc_mp_writer_t *w = mc_rpc_call_begin(m->cli);
    write_put(w, m, key, val, len);
    st = send_op(m, op, MC_RPC_META_PUT);
    if (st != MC_INPROGRESS)
        meta_own_forget(m->own, key, gen);
    return st;
}

static mc_status_t mm_del(mc_meta_t *b, const char *key, mc_meta_done_cb_t cb, void *arg)
{
    meta_master_t *m = as_mm(b);
    if (key == NULL || cb == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (m->stopped)
        return MC_ERR_CANCELED;
    mop_t *op = op_new(m, OP_DEL, key, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.done = cb;
    mc_mp_writer_t *w = mc_rpc_call_begin(m->cli);
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, MC_F_KEY);
    mc_mp_write_bin(w, key, strlen(key));
    write_owner(w, m); /* only the owner may delete */
    mc_status_t st = send_op(m, op, MC_RPC_META_DEL);
    /* Forget it even if the delete fails in transit: we no longer want it
     * published, and the master drops it with our owner id at the latest. */
    if (st == MC_INPROGRESS)
        meta_own_forget(m->own, key, 0);
    return st;
}

/* META_LIST {PREFIX, AFTER}; on failure op is freed (with its entries). */
static mc_status_t send_list(meta_master_t *m, mop_t *op, const char *after, size_t alen)
{
    mc_mp_writer_t *w = mc_rpc_call_begin(m->cli);
    mc_mp_write_map(w, after != NULL ? 2 : 1);
    mc_mp_write_uint(w, MC_F_PREFIX);
    mc_mp_write_bin(w, op->key, strlen(op->key));
    if (after != NULL) {
        mc_mp_write_uint(w, MC_F_AFTER);
        mc_mp_write_bin(w, after, (uint32_t)alen);
    }
    return send_op(m, op, MC_RPC_META_LIST);
}

static mc_status_t mm_list(mc_meta_t *b, const char *prefix, mc_meta_list_cb_t cb, void *arg)
{
    meta_master_t *m = as_mm(b);
    if (prefix == NULL || cb == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (m->stopped)
        return MC_ERR_CANCELED;
    mop_t *op = op_new(m, OP_LIST, prefix, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.list = cb;
    return send_list(m, op, NULL, 0);
}

/* ------------------------------------------------------ liveness duties */

static void reput_one(void *arg, const char *key, const void *val, size_t len, uint64_t gen)
{
    meta_master_t *m = arg;
    mop_t *op = op_new(m, OP_REPUT, key, NULL);
    if (op == NULL) {
        m->republish_needed = 1;
        return;
    }
    /* a rejection forgets this value only, not a newer put of the same key */
    op->gen = gen;
    mc_mp_writer_t *w = mc_rpc_call_begin(m->cli);
    write_put(w, m, key, val, len);
    if (send_op(m, op, MC_RPC_META_PUT) == MC_INPROGRESS)
        m->reputs_inflight++;
    else
        m->republish_needed = 1;
}

/* Re-put every remembered entry, unless a round is still in flight (then the
 * next ping does it). */
static void republish(meta_master_t *m)
{
    if (m->reputs_inflight > 0) {
        m->republish_needed = 1;
        return;
    }
    m->republish_needed = 0;
    meta_own_foreach(m->own, reput_one, m);
}

static void send_ping(meta_master_t *m)
{
    mop_t *op = op_new(m, OP_PING, NULL, NULL);
    if (op == NULL)
        return;
    mc_mp_writer_t *w = mc_rpc_call_begin(m->cli);
    mc_mp_write_map(w, 1);
    write_owner(w, m);
    if (send_op(m, op, MC_RPC_PING) == MC_INPROGRESS)
        m->ping_inflight = 1;
}

static void on_ping_timer(mc_timer_t *t, void *arg)
{
    meta_master_t *m = arg;
    cb_enter(m);
    /* one ping at a time: a master slower than ping_interval gets no pile-up */
    if (!m->ping_inflight && !m->stopped)
        send_ping(m);
    if (!m->stopped)
        mc_timer_start(t, m->o.ping_interval_us, 0);
    cb_leave(m);
}

/* ------------------------------------------------------- open / close */

static void on_reactor_stop(mc_reactor_t *r, mc_reactor_hook_t *hook)
{
    meta_master_t *m = MC_CONTAINER_OF(hook, meta_master_t, stop_hook);
    (void)r;
    /* Runs before the rpc client's own hook (newest first), which then
     * cancels the calls in flight. The timer's event must go before the
     * base does; close frees the rest. */
    m->hooked = 0;
    m->stopped = 1;
    mc_timer_fini(&m->ping_timer);
}

typedef struct init_ctx {
    meta_master_t *m;
    mc_status_t st;
} init_ctx_t;

static void init_on_reactor(void *arg)
{
    init_ctx_t *ic = arg;
    meta_master_t *m = ic->m;
    if (mc_reactor_stopping(m->base.r)) {
        ic->st = MC_ERR_CANCELED;
        return;
    }
    ic->st = mc_timer_init(&m->ping_timer, m->base.r, on_ping_timer, m);
    if (ic->st != MC_OK)
        return;
    m->stop_hook.fn = on_reactor_stop;
    mc_reactor_on_stop(m->base.r, &m->stop_hook);
    m->hooked = 1;
    /* The first ping goes at once: it registers our owner id and learns the
     * master's view version before our first puts can be lost to a restart. */
    mc_timer_start(&m->ping_timer, 0, 0);
}

static void mm_free(meta_master_t *m)
{
    meta_own_destroy(m->own);
    mc_free(m);
}

static void close_on_reactor(void *arg)
{
    meta_master_t *m = arg;
    m->stopped = 1;
    mc_timer_fini(&m->ping_timer);
    if (m->hooked) {
        mc_reactor_on_stop_cancel(m->base.r, &m->stop_hook);
        m->hooked = 0;
    }
    cb_enter(m);
    /* completes every call in flight with MC_ERR_CANCELED, through on_reply */
    mc_rpc_client_destroy(m->cli);
    m->cli = NULL;
    mc_guard_exit(&m->guard);
    if (mc_guard_close(&m->guard)) /* else closed from inside one of our callbacks: */
        mm_free(m);                /* the outermost cb_leave frees m */
}

static void mm_close(mc_meta_t *b)
{
    mc_rpc_run_on(b->r, close_on_reactor, as_mm(b));
}

static mc_status_t mm_retarget(mc_meta_t *b, const char *host, uint16_t port)
{
    meta_master_t *m = (meta_master_t *)b;
    if (m->stopped)
        return MC_ERR_CANCELED;
    mc_status_t st = mc_rpc_client_retarget(m->cli, host, port);
    if (st == MC_OK)
        snprintf(m->name, sizeof(m->name), "master://%s:%u", host, port);
    return st;
}

static const mc_meta_ops_t master_ops = {
    .name = "master",
    .get = mm_get,
    .put = mm_put,
    .del = mm_del,
    .list = mm_list,
    .close = mm_close,
    .retarget = mm_retarget,
};

mc_status_t meta_master_open(const char *host, uint16_t port, mc_reactor_t *r,
                             const mc_meta_opts_t *o, mc_meta_t **out)
{
    mc_status_t st;
    meta_master_t *m = MC_NEW(meta_master_t);
    if (m == NULL)
        return MC_ERR_NOMEM;
    m->base.ops = &master_ops;
    m->base.r = r;
    meta_fill_defaults(&m->o, o);
    snprintf(m->name, sizeof(m->name), "master://%s:%u", host, port);
    if (m->o.owner_hi == 0 && m->o.owner_lo == 0) {
        MC_ERROR(METADATA,
                 "%s: the owner id is 0 (set mc_meta_opts_t.owner_hi/lo to the "
                 "process's client id)",
                 m->name);
        st = MC_ERR_INVALID_ARGUMENT;
        goto err_free;
    }
    m->own = meta_own_create();
    if (m->own == NULL) {
        st = MC_ERR_NOMEM;
        goto err_free;
    }

    mc_rpc_client_opts_t ro;
    mc_rpc_client_opts_init(&ro);
    ro.host = host;
    ro.port = port;
    ro.auth_key = m->o.auth_key;
    ro.call_timeout_us = m->o.call_timeout_us;
    ro.connect_timeout_us = m->o.call_timeout_us < CONNECT_TIMEOUT_MAX_US ? m->o.call_timeout_us
                                                                          : CONNECT_TIMEOUT_MAX_US;
    st = mc_rpc_client_create(r, &ro, &m->cli);
    if (st != MC_OK) {
        MC_ERROR(METADATA, "%s: cannot create the rpc client: %s", m->name, mc_status_str(st));
        goto err_own;
    }
    init_ctx_t ic = {.m = m, .st = MC_ERR_CANCELED};
    mc_rpc_run_on(r, init_on_reactor, &ic);
    if (ic.st != MC_OK) {
        st = ic.st;
        MC_ERROR(METADATA, "%s: cannot start: %s", m->name, mc_status_str(st));
        goto err_cli;
    }
    MC_DEBUG(METADATA, "%s: opened (owner %016llx-%016llx, ping every %llu ms)", m->name,
             (unsigned long long)m->o.owner_hi, (unsigned long long)m->o.owner_lo,
             (unsigned long long)(m->o.ping_interval_us / 1000));
    *out = as_base(m);
    return MC_OK;

err_cli:
    mc_timer_fini(&m->ping_timer);
    mc_rpc_client_destroy(m->cli);
err_own:
    meta_own_destroy(m->own);
err_free:
    mc_free(m);
    return st;
}
