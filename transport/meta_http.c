/*
 * meta_http.c - the "http://" metadata backend: upstream Mooncake's HTTP
 * metadata protocol (GET / PUT / DELETE on PATH?key=K; the server side and
 * the status codes are in meta_http_srv.h), with libevent's HTTP client on
 * the backend's reactor. Servers: mooncake-master's HTTP port (/metadata),
 * mooncake-http-metadata-server, or upstream's mooncake_http_metadata_server.
 * The one wrapper around evhttp's client conventions (a NULL request or a
 * response code 0 for a transport failure).
 *
 * Mapping: GET 200 -> MC_OK and the body, 404 -> MC_ERR_NOT_FOUND; PUT 200
 * -> MC_OK; DELETE 200 or 404 -> MC_OK (deleting a missing key is fine);
 * list = GET PATH?prefix=P, our servers' extension (msgpack pairs; an
 * upstream server answers 400: MC_ERR_NOT_SUPPORTED). A request that gets no
 * answer (refused, reset, no server) fails with MC_ERR_CONN_CLOSED; one not
 * answered within call_timeout with MC_ERR_RPC_TIMEOUT (the request is
 * canceled, which resets the connection). Other answers are MC_ERR_METADATA
 * with the server's text logged (401: the token; 400 on a PUT: a duplicate
 * rpc_meta key; 507: the server's budget). A PUT refused outright (400, 413)
 * is forgotten, like the master backend's.
 *
 * Authentication: no cluster secret (a master with one takes PUT and DELETE
 * only with a proof over a challenge: use the master:// backend there; a
 * refused PUT is logged with the server's 401 text). With opts.http_token
 * (default: $MC_METADATA_HTTP_TOKEN, as
 * upstream) every request carries "Authorization: Bearer <token>".
 *
 * Liveness. The protocol has no owners and no TTLs: an entry stays until it
 * is deleted (upstream's servers behave so too). The backend remembers what
 * it put and PUTs it all again (a) every ttl/3, (b) after a request failed
 * for want of a server and a later one got an answer (the server may have
 * restarted), and (c) at once when the server's X-Mooncake-Instance header
 * changes (our servers: a restart). Closing deletes nothing.
 *
 * Ordering: one persistent connection; evhttp sends its requests one after
 * the other in submission order, so a del is never overtaken by an older
 * put of the same key.
 *
 * Callbacks: requests are handed to evhttp only from the `kick` timer, and
 * evhttp's completion callback only parks the answer on `done` and arms
 * `kick` again; user callbacks run from that timer (and from close). So no
 * user callback runs inside a submit or inside evhttp's own stack, and a
 * close from a user callback may free the connection. The backend counts its
 * callback depth: a close from inside one frees it when the outermost
 * returns.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "reactor/guard.h"
#include "rpc/msgpack.h"
#include "rpc/net.h"
#include "rpc/rpc.h"
#include "transport/meta_int.h"
#include "transport/metadata.h"
#include "util/conf.h"
#include "util/list.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

typedef enum { H_GET, H_PUT, H_DEL, H_LIST, H_REFRESH } hkind_t;

static const char *const hkind_names[] = {"get", "put", "del", "list", "refresh"};

typedef struct meta_http {
    mc_meta_t base; /* first: mc_meta_t * <-> meta_http_t * */
    mc_meta_opts_t o;
    char name[600]; /* the URL, for log lines */
    char ip[64];    /* resolved at open */
    uint16_t port;
    char hosthdr[300];              /* Host: header */
    char *path;                     /* "/metadata" */
    char *auth;                     /* "Bearer <token>" or NULL */
    struct evhttp_connection *conn; /* made on first use */
    meta_own_t *own;
    mc_list_t queue; /* hop_t to hand to evhttp (from kick) */
    mc_list_t sent;  /* hop_t handed to evhttp, in submission (= deadline) order */
    mc_list_t done;  /* hop_t answered, callbacks to run (from kick) */
    mc_timer_t kick;
    mc_timer_t dl_timer;
    mc_timer_t refresh_timer;
    uint64_t instance; /* last X-Mooncake-Instance seen; 0 none */
    int unreachable;   /* the last answer-less request failed: WARN logged */
    int republish;     /* re-put everything when the kick runs */
    size_t refresh_inflight;
    int list_warned;
    int closed;
    mc_reactor_hook_t stop_hook;
    int hooked;
    mc_guard_t guard; /* our callbacks on the stack: a close inside one waits (reactor/guard.h) */
} meta_http_t;

typedef struct hop {
    mc_list_t node; /* in queue, sent or done */
    meta_http_t *m;
    hkind_t kind;
    struct evhttp_request *req; /* while evhttp holds it */
    uint64_t deadline;
    int code;              /* HTTP status; 0 = no answer */
    struct evbuffer *body; /* the answer's body (moved out of evhttp's) */
    uint64_t instance;     /* the answer's X-Mooncake-Instance, 0 none */
    uint64_t gen;          /* put/refresh: the own entry's version */
    union {
        mc_meta_get_cb_t get;
        mc_meta_done_cb_t done;
        mc_meta_list_cb_t list;
    } cb;
    void *arg;
    size_t klen, vlen;
    char *val;
    char data[]; /* key (NUL-terminated), then the value */
} hop_t;

static void mh_free(meta_http_t *m);

static meta_http_t *as_mh(mc_meta_t *b)
{
    return (meta_http_t *)b;
}

static void cb_enter(meta_http_t *m)
{
    mc_guard_enter(&m->guard);
}

/* After this, m may be gone. */
static void cb_leave(meta_http_t *m)
{
    if (mc_guard_leave(&m->guard))
        mh_free(m);
}

/* ------------------------------------------------------------------ ops */

static hop_t *op_new(meta_http_t *m, hkind_t kind, const char *key, const void *val, size_t vlen,
                     void *arg)
{
    size_t klen = strlen(key);
    hop_t *op = mc_malloc(sizeof(*op) + klen + 1 + vlen);
    if (op == NULL)
        return NULL;
    memset(op, 0, sizeof(*op));
    mc_list_init(&op->node);
    op->m = m;
    op->kind = kind;
    op->arg = arg;
    op->klen = klen;
    op->vlen = vlen;
    memcpy(op->data, key, klen + 1);
    op->val = op->data + klen + 1;
    if (vlen > 0)
        memcpy(op->val, val, vlen);
    op->deadline = mc_now_us() + m->o.call_timeout_us;
    return op;
}

static void op_free(hop_t *op)
{
    if (op->body != NULL)
        evbuffer_free(op->body);
    mc_free(op);
}

/* Run the user callback once with st, unlink and free the op. */
static void op_complete(meta_http_t *m, hop_t *op, mc_status_t st, const void *val, size_t len,
                        const mc_meta_entry_t *e, size_t n)
{
    mc_list_del(&op->node);
    cb_enter(m);
    switch (op->kind) {
    case H_GET:
        op->cb.get(op->arg, st, st == MC_OK ? val : NULL, st == MC_OK ? len : 0);
        break;
    case H_PUT:
    case H_DEL:
        op->cb.done(op->arg, st);
        break;
    case H_LIST:
        op->cb.list(op->arg, st, st == MC_OK ? e : NULL, st == MC_OK ? n : 0);
        break;
    case H_REFRESH:
        m->refresh_inflight--;
        break;
    }
    op_free(op);
    cb_leave(m);
}

static void op_fail(meta_http_t *m, hop_t *op, mc_status_t st)
{
    op_complete(m, op, st, NULL, 0, NULL, 0);
}

/* ------------------------------------------------------------ answers */

/* The server's text (the first 200 bytes), for log lines. */
static const char *body_text(hop_t *op, char *buf, size_t len)
{
    size_t n = op->body != NULL ? evbuffer_get_length(op->body) : 0;
    if (n >= len)
        n = len - 1;
    if (n > 0)
        evbuffer_copyout(op->body, buf, n);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] >= 0x7f)
            buf[i] = '?';
    buf[n] = '\0';
    return buf;
}

/* An answer that is not this call's success: the status, logged with what
 * the server said. */
static mc_status_t answer_error(meta_http_t *m, hop_t *op)
{
    char text[208];
    body_text(op, text, sizeof(text));
    if (op->code == 401)
        MC_ERROR(METADATA,
                 "%s: %s '%s': HTTP 401 (%s): the server wants a token "
                 "(MC_METADATA_HTTP_TOKEN)%s",
                 m->name, hkind_names[op->kind], op->data, text,
                 m->auth != NULL ? "; ours was refused" : "; we sent none");
    else
        MC_WARN(METADATA, "%s: %s '%s': HTTP %d: %s", m->name, hkind_names[op->kind], op->data,
                op->code, text);
    return MC_ERR_METADATA;
}

/* Decode a list answer (msgpack [[key, value], ...]) and complete op. */
static void list_answer(meta_http_t *m, hop_t *op)
{
    size_t len = evbuffer_get_length(op->body);
    const uint8_t *p = len > 0 ? evbuffer_pullup(op->body, -1) : NULL;
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, p, len);
    uint32_t n = mc_mp_read_array(&r);
    mc_meta_entry_t *e = NULL;
    char *keys = NULL;
    mc_status_t st = r.err;
    if (st == MC_OK && n > 0) {
        /* every key needs a NUL: one block of len + n bytes holds them all */
        e = mc_calloc(n, sizeof(*e));
        keys = mc_malloc(len + n);
        if (e == NULL || keys == NULL)
            st = MC_ERR_NOMEM;
    }
    size_t used = 0;
    for (uint32_t i = 0; i < n && st == MC_OK; i++) {
        uint32_t kl = 0, vl = 0;
        if (mc_mp_read_array(&r) != 2)
            r.err = MC_ERR_PROTOCOL;
        const void *k = mc_mp_read_bin(&r, &kl);
        const void *v = mc_mp_read_bin(&r, &vl);
        if (r.err != MC_OK || memchr(k, '\0', kl) != NULL) {
            st = MC_ERR_PROTOCOL;
            break;
        }
        memcpy(keys + used, k, kl);
        keys[used + kl] = '\0';
        e[i].key = keys + used;
        e[i].val = v;
        e[i].len = vl;
        used += kl + 1;
    }
    if (st == MC_ERR_PROTOCOL || r.err != MC_OK) {
        MC_ERROR(METADATA, "%s: list '%s': malformed answer (%zu bytes)", m->name, op->data, len);
        st = MC_ERR_METADATA;
    }
    op_complete(m, op, st, NULL, 0, e, st == MC_OK ? n : 0);
    mc_free(keys);
    mc_free(e);
}

static void deliver(meta_http_t *m, hop_t *op)
{
    if (op->code == 0) {
        op_fail(m, op, MC_ERR_CONN_CLOSED);
        return;
    }
    switch (op->kind) {
    case H_GET:
        if (op->code == 200) {
            size_t len = evbuffer_get_length(op->body);
            const void *v = len > 0 ? evbuffer_pullup(op->body, -1) : NULL;
            op_complete(m, op, MC_OK, v, len, NULL, 0);
        } else if (op->code == 404) {
            op_fail(m, op, MC_ERR_NOT_FOUND);
        } else {
            op_fail(m, op, answer_error(m, op));
        }
        break;
    case H_PUT:
        if (op->code == 200) {
            op_fail(m, op, MC_OK);
        } else {
            mc_status_t st = answer_error(m, op);
            if (op->code == 400 || op->code == 413)
                meta_own_forget(m->own, op->data, op->gen); /* refused outright */
            op_fail(m, op, st);
        }
        break;
    case H_DEL:
        op_fail(m, op, op->code == 200 || op->code == 404 ? MC_OK : answer_error(m, op));
        break;
    case H_LIST:
        if (op->code == 200) {
            list_answer(m, op);
        } else if (op->code == 400) {
            if (!m->list_warned)
                MC_WARN(METADATA,
                        "%s: the server does not list entries (upstream's protocol has no "
                        "listing; mooncake-master and mooncake-http-metadata-server do)",
                        m->name);
            m->list_warned = 1;
            op_fail(m, op, MC_ERR_NOT_SUPPORTED);
        } else {
            op_fail(m, op, answer_error(m, op));
        }
        break;
    case H_REFRESH:
        if (op->code != 200) {
            (void)answer_error(m, op);
            if (op->code == 400 || op->code == 413)
                meta_own_forget(m->own, op->data, op->gen); /* refused outright */
        }
        op_fail(m, op, MC_OK);
        break;
    }
}

/* evhttp's completion callback: park the answer, deliver it from kick. */
static void on_response(struct evhttp_request *req, void *arg)
{
    hop_t *op = arg;
    meta_http_t *m = op->m;
    op->req = NULL;
    op->code = req != NULL ? evhttp_request_get_response_code(req) : 0;
    if (op->code != 0) {
        const char *inst =
            evhttp_find_header(evhttp_request_get_input_headers(req), "X-Mooncake-Instance");
        if (inst != NULL)
            op->instance = strtoull(inst, NULL, 16);
        op->body = evbuffer_new();
        if (op->body == NULL ||
            evbuffer_add_buffer(op->body, evhttp_request_get_input_buffer(req)) != 0)
            op->code = 0; /* cannot keep the body: report it as lost */
    }
    mc_list_del(&op->node);
    mc_list_push_tail(&m->done, &op->node);
    if (!m->closed)
        mc_timer_start(&m->kick, 0, 0);
}

/* --------------------------------------------------------------- sending */

static void refresh_one(void *arg, const char *key, const void *val, size_t len, uint64_t gen)
{
    meta_http_t *m = arg;
    hop_t *op = op_new(m, H_REFRESH, key, val, len, NULL);
    if (op == NULL)
        return; /* next round */
    op->gen = gen;
    mc_list_push_tail(&m->queue, &op->node);
    m->refresh_inflight++;
}

/* Hand op to evhttp and put it on `sent`. 0, or -1 (logged; op on no
 * list). */
static int op_send(meta_http_t *m, hop_t *op)
{
    static const enum evhttp_cmd_type cmds[] = {[H_GET] = EVHTTP_REQ_GET,
                                                [H_PUT] = EVHTTP_REQ_PUT,
                                                [H_DEL] = EVHTTP_REQ_DELETE,
                                                [H_LIST] = EVHTTP_REQ_GET,
                                                [H_REFRESH] = EVHTTP_REQ_PUT};
    if (m->conn == NULL) {
        m->conn = evhttp_connection_base_new(mc_reactor_base(m->base.r), NULL, m->ip, m->port);
        if (m->conn == NULL) {
            MC_ERROR(METADATA, "%s: cannot create an HTTP connection", m->name);
            return -1;
        }
        struct timeval tv = {.tv_sec = (time_t)(m->o.call_timeout_us / 1000000),
                             .tv_usec = (suseconds_t)(m->o.call_timeout_us % 1000000)};
        evhttp_connection_set_timeout_tv(m->conn, &tv); /* a backstop to our deadlines */
        evhttp_connection_set_retries(m->conn, 0);
    }
    char *enc = evhttp_uriencode(op->data, (ev_ssize_t)op->klen, 0);
    if (enc == NULL)
        return -1;
    size_t ulen = strlen(m->path) + strlen(enc) + 16;
    char *uri = mc_malloc(ulen);
    if (uri == NULL) {
        free(enc);
        return -1;
    }
    snprintf(uri, ulen, "%s?%s=%s", m->path, op->kind == H_LIST ? "prefix" : "key", enc);
    free(enc);
    struct evhttp_request *req = evhttp_request_new(on_response, op);
    if (req == NULL) {
        mc_free(uri);
        return -1;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", m->hosthdr);
    if (m->auth != NULL)
        evhttp_add_header(h, "Authorization", m->auth);
    if (op->kind == H_PUT || op->kind == H_REFRESH) {
        evhttp_add_header(h, "Content-Type", "application/json");
        if (op->vlen > 0)
            evbuffer_add(evhttp_request_get_output_buffer(req), op->val, op->vlen);
    }
    /* On `sent` before evhttp sees it: a connection that fails at once
     * answers (on_response) inside evhttp_make_request. */
    op->req = req;
    mc_list_push_tail(&m->sent, &op->node);
    if (evhttp_make_request(m->conn, req, cmds[op->kind], uri) != 0) {
        mc_free(uri);
        mc_list_del(&op->node);
        op->req = NULL;
        MC_ERROR(METADATA, "%s: %s '%s': cannot send the request", m->name, hkind_names[op->kind],
                 op->data);
        return -1;
    }
    mc_free(uri);
    return 0;
}

static void arm_deadline(meta_http_t *m)
{
    if (m->closed)
        return;
    uint64_t first = UINT64_MAX;
    /* the queue goes out at the next kick: only `sent` can be overdue */
    if (!mc_list_empty(&m->sent))
        first = MC_LIST_ENTRY(m->sent.next, hop_t, node)->deadline;
    if (first == UINT64_MAX) {
        mc_timer_stop(&m->dl_timer);
        return;
    }
    uint64_t now = mc_now_us();
    mc_timer_start(&m->dl_timer, first > now ? first - now : 0, 0);
}

/* Notice the server coming back or restarting from an answer. */
static void note_answer(meta_http_t *m, const hop_t *op)
{
    if (op->code == 0) {
        if (!m->unreachable)
            MC_WARN(METADATA,
                    "%s: no answer (server down or unreachable); calls fail until "
                    "it answers",
                    m->name);
        m->unreachable = 1;
        return;
    }
    if (m->unreachable) {
        MC_INFO(METADATA, "%s: answering again; re-publishing %zu entries", m->name,
                meta_own_count(m->own));
        m->unreachable = 0;
        m->republish = 1;
    }
    if (op->instance != 0) {
        if (m->instance != 0 && op->instance != m->instance && !m->republish) {
            MC_INFO(METADATA, "%s: the server restarted; re-publishing %zu entries", m->name,
                    meta_own_count(m->own));
            m->republish = 1;
        }
        m->instance = op->instance;
    }
}

/* The kick: deliver answers, re-publish when due, send what is queued. */
static void on_kick(mc_timer_t *t, void *arg)
{
    meta_http_t *m = arg;
    (void)t;
    cb_enter(m);
    while (!m->closed && !mc_list_empty(&m->done)) {
        hop_t *op = MC_LIST_ENTRY(m->done.next, hop_t, node);
        note_answer(m, op);
        deliver(m, op);
    }
    if (!m->closed && m->republish) {
        m->republish = 0;
        meta_own_foreach(m->own, refresh_one, m);
    }
    while (!m->closed && !mc_list_empty(&m->queue)) {
        hop_t *op = MC_LIST_ENTRY(m->queue.next, hop_t, node);
        mc_list_del(&op->node);
        if (op_send(m, op) != 0)
            op_fail(m, op, MC_ERR_METADATA);
    }
    arm_deadline(m);
    cb_leave(m);
}

static void on_deadline(mc_timer_t *t, void *arg)
{
    meta_http_t *m = arg;
    (void)t;
    uint64_t now = mc_now_us();
    cb_enter(m);
    while (!m->closed && !mc_list_empty(&m->sent)) {
        hop_t *op = MC_LIST_ENTRY(m->sent.next, hop_t, node);
        if (op->deadline > now)
            break;
        if (op->req != NULL) {
            /* no callback after a cancel; an ongoing request resets the
             * connection and the next ones go out on a new one */
            evhttp_cancel_request(op->req);
            op->req = NULL;
        }
        MC_WARN(METADATA, "%s: %s '%s': no answer within %llu ms", m->name, hkind_names[op->kind],
                op->data, (unsigned long long)(m->o.call_timeout_us / 1000));
        op_fail(m, op, MC_ERR_RPC_TIMEOUT);
    }
    arm_deadline(m);
    cb_leave(m);
}

static void on_refresh_timer(mc_timer_t *t, void *arg)
{
    meta_http_t *m = arg;
    (void)t;
    /* the previous round still in flight: this one would only pile up */
    if (m->refresh_inflight == 0 && meta_own_count(m->own) > 0) {
        m->republish = 1;
        mc_timer_start(&m->kick, 0, 0);
    }
}

/* Queue op; it goes out from the kick, never inside this call. */
static mc_status_t op_submit(meta_http_t *m, hop_t *op)
{
    mc_list_push_tail(&m->queue, &op->node);
    if (!mc_timer_armed(&m->kick))
        mc_timer_start(&m->kick, 0, 0);
    return MC_INPROGRESS;
}

/* ----------------------------------------------------------------- calls */

static mc_status_t mh_get(mc_meta_t *b, const char *key, mc_meta_get_cb_t cb, void *arg)
{
    meta_http_t *m = as_mh(b);
    if (key == NULL || cb == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (m->closed)
        return MC_ERR_CANCELED;
    hop_t *op = op_new(m, H_GET, key, NULL, 0, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.get = cb;
    return op_submit(m, op);
}

static mc_status_t mh_put(mc_meta_t *b, const char *key, const void *val, size_t len,
                          mc_meta_done_cb_t cb, void *arg)
{
    meta_http_t *m = as_mh(b);
    if (key == NULL || cb == NULL || (len > 0 && val == NULL))
        return MC_ERR_INVALID_ARGUMENT;
    if (m->closed)
        return MC_ERR_CANCELED;
    hop_t *op = op_new(m, H_PUT, key, val, len, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.done = cb;
    /* remembered even if this PUT fails for want of a server: the next
     * re-publish sends it; only del (or an outright refusal) forgets it */
    mc_status_t st = meta_own_set(m->own, key, val, len, &op->gen);
    if (st != MC_OK) {
        op_free(op);
        return st;
    }
    return op_submit(m, op);
}

static mc_status_t mh_del(mc_meta_t *b, const char *key, mc_meta_done_cb_t cb, void *arg)
{
    meta_http_t *m = as_mh(b);
    if (key == NULL || cb == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (m->closed)
        return MC_ERR_CANCELED;
    hop_t *op = op_new(m, H_DEL, key, NULL, 0, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.done = cb;
    meta_own_forget(m->own, key, 0);
    return op_submit(m, op);
}

static mc_status_t mh_list(mc_meta_t *b, const char *prefix, mc_meta_list_cb_t cb, void *arg)
{
    meta_http_t *m = as_mh(b);
    if (prefix == NULL || cb == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (m->closed)
        return MC_ERR_CANCELED;
    hop_t *op = op_new(m, H_LIST, prefix, NULL, 0, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.list = cb;
    return op_submit(m, op);
}

/* ------------------------------------------------------- open / close */

static void fail_all(meta_http_t *m, mc_list_t *l, mc_status_t st)
{
    while (!mc_list_empty(l))
        op_fail(m, MC_LIST_ENTRY(l->next, hop_t, node), st);
}

/* Cancel everything and let go of evhttp and our events; the struct stays
 * for close to free. On the reactor thread (or after it stopped). */
static void shutdown_conn(meta_http_t *m)
{
    if (m->closed)
        return;
    m->closed = 1;
    mc_timer_fini(&m->kick);
    mc_timer_fini(&m->dl_timer);
    mc_timer_fini(&m->refresh_timer);
    cb_enter(m);
    /* evhttp_connection_free frees the requests it holds without calling
     * back: detach them from their ops first */
    mc_list_t *pos;
    for (pos = m->sent.next; pos != &m->sent; pos = pos->next)
        MC_LIST_ENTRY(pos, hop_t, node)->req = NULL;
    if (m->conn != NULL)
        evhttp_connection_free(m->conn);
    m->conn = NULL;
    fail_all(m, &m->sent, MC_ERR_CANCELED);
    fail_all(m, &m->queue, MC_ERR_CANCELED);
    fail_all(m, &m->done, MC_ERR_CANCELED);
    cb_leave(m);
}

static void on_reactor_stop(mc_reactor_t *r, mc_reactor_hook_t *hook)
{
    meta_http_t *m = MC_CONTAINER_OF(hook, meta_http_t, stop_hook);
    (void)r;
    m->hooked = 0;
    cb_enter(m);
    shutdown_conn(m);
    cb_leave(m);
}

static void mh_free(meta_http_t *m)
{
    meta_own_destroy(m->own);
    mc_free(m->path);
    mc_free(m->auth);
    mc_free(m);
}

static void close_on_reactor(void *arg)
{
    meta_http_t *m = arg;
    if (m->hooked) {
        mc_reactor_on_stop_cancel(m->base.r, &m->stop_hook);
        m->hooked = 0;
    }
    cb_enter(m);
    shutdown_conn(m);
    mc_guard_exit(&m->guard);
    if (mc_guard_close(&m->guard)) /* else closed from inside one of our callbacks: */
        mh_free(m);                /* the outermost cb_leave frees m */
}

static void mh_close(mc_meta_t *b)
{
    mc_rpc_run_on(b->r, close_on_reactor, as_mh(b));
}

static const mc_meta_ops_t http_ops = {
    .name = "http",
    .get = mh_get,
    .put = mh_put,
    .del = mh_del,
    .list = mh_list,
    .close = mh_close,
};

typedef struct init_ctx {
    meta_http_t *m;
    mc_status_t st;
} init_ctx_t;

static void init_on_reactor(void *arg)
{
    init_ctx_t *ic = arg;
    meta_http_t *m = ic->m;
    mc_reactor_t *r = m->base.r;
    if (mc_reactor_stopping(r)) {
        ic->st = MC_ERR_CANCELED;
        return;
    }
    ic->st = mc_timer_init(&m->kick, r, on_kick, m);
    if (ic->st == MC_OK)
        ic->st = mc_timer_init(&m->dl_timer, r, on_deadline, m);
    if (ic->st == MC_OK)
        ic->st = mc_timer_init(&m->refresh_timer, r, on_refresh_timer, m);
    if (ic->st != MC_OK) {
        mc_timer_fini(&m->kick);
        mc_timer_fini(&m->dl_timer);
        return;
    }
    m->stop_hook.fn = on_reactor_stop;
    mc_reactor_on_stop(r, &m->stop_hook);
    m->hooked = 1;
    uint64_t period = m->o.ttl_us / 3 > 1000 ? m->o.ttl_us / 3 : 1000;
    mc_timer_start(&m->refresh_timer, period, 1);
}

/* The IP literal of a resolved "ip:port" / "[ip]:port" string. */
static void ip_of(const char *addr, char *ip, size_t len)
{
    const char *b = addr, *e = strrchr(addr, ':');
    if (*b == '[') {
        b++;
        e = strchr(b, ']');
    }
    size_t n = e != NULL ? (size_t)(e - b) : strlen(b);
    if (n >= len)
        n = len - 1;
    memcpy(ip, b, n);
    ip[n] = '\0';
}

mc_status_t meta_http_open(const char *host, uint16_t port, const char *path, mc_reactor_t *r,
                           const mc_meta_opts_t *o, mc_meta_t **out)
{
    mc_status_t st;
    meta_http_t *m = MC_NEW(meta_http_t);
    if (m == NULL)
        return MC_ERR_NOMEM;
    m->base.ops = &http_ops;
    m->base.r = r;
    meta_fill_defaults(&m->o, o);
    int v6 = strchr(host, ':') != NULL;
    snprintf(m->name, sizeof(m->name), "http://%s%s%s:%u%s", v6 ? "[" : "", host, v6 ? "]" : "",
             port, path);
    snprintf(m->hosthdr, sizeof(m->hosthdr), "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", port);
    m->port = port;
    mc_list_init(&m->queue);
    mc_list_init(&m->sent);
    mc_list_init(&m->done);
    m->path = mc_strdup(path);
    const char *tok = m->o.http_token;
    if (tok == NULL)
        tok = mc_conf_env_str("MC_METADATA_HTTP_TOKEN"); /* upstream's variable */
    if (tok != NULL && tok[0] != '\0') {
        size_t n = strlen(tok) + 8;
        m->auth = mc_malloc(n);
        if (m->auth != NULL)
            snprintf(m->auth, n, "Bearer %s", tok);
    }
    m->own = meta_own_create();
    if (m->path == NULL || m->own == NULL || (tok != NULL && tok[0] != '\0' && m->auth == NULL)) {
        st = MC_ERR_NOMEM;
        goto err_free;
    }

    mc_sockaddr_t sa;
    st = mc_net_resolve(host, port, &sa); /* logs why it failed */
    if (st != MC_OK)
        goto err_free;
    char addr[96];
    mc_net_addr_str(&sa, addr, sizeof(addr));
    ip_of(addr, m->ip, sizeof(m->ip));

    init_ctx_t ic = {.m = m, .st = MC_ERR_CANCELED};
    mc_rpc_run_on(r, init_on_reactor, &ic);
    if (ic.st != MC_OK) {
        st = ic.st;
        MC_ERROR(METADATA, "%s: cannot start: %s", m->name, mc_status_str(st));
        goto err_free;
    }
    MC_DEBUG(METADATA, "%s: opened (%s%s)", m->name, m->ip,
             m->auth != NULL ? ", with a token" : "");
    *out = &m->base;
    return MC_OK;

err_free:
    mh_free(m);
    return st;
}
