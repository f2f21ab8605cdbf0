/*
 * server.c - RPC server: one listening socket, watched by every reactor;
 * connections owned by the reactor that accepted them. See rpc.h for the
 * contract.
 *
 * One socket, not one per reactor with SO_REUSEPORT: the kernel lets sockets
 * of the same user share a port that way, so a second process (a second
 * master by mistake) would bind the port too and get a share of the
 * connections. Without SO_REUSEPORT a second bind fails with "address in
 * use". Every reactor polls the one socket; a new connection wakes them all
 * and one accept wins (the others get EAGAIN): a few wasted wakeups per
 * connection with one reactor per NUMA node, none on the data path.
 *
 * Resource bounds (issue 13):
 *  - accept failing for want of file descriptors (EMFILE, ENFILE) or memory
 *    pauses this reactor's accepting for a backoff (10 ms doubling to 1 s),
 *    with one log line per 10 s; a spare descriptor (nginx's trick) is
 *    released to accept and close the pending connection, so its client
 *    sees a refusal instead of a hang, then taken again. A level-triggered
 *    listener that just logged and returned spun at 100% CPU;
 *  - at most max_conns connections: more are accepted and closed at once;
 *  - input buffers: one connection holds at most max_inbuf bytes (a frame
 *    being received), all of a reactor's at most its share of
 *    max_inbuf_total: over it, the reactor's biggest holder is closed;
 *  - a connection that has not completed a first frame within
 *    first_frame_timeout is closed (checked every second).
 *
 * Authentication (opts.auth_key): a connection starts in AUTH_HELLO and
 * only the handshake's frames are read (small, buffered whole, never
 * dispatched): HELLO {client nonce} is answered {server nonce, server
 * proof}; the PROOF notify that follows must carry the client's proof for
 * these two nonces. Only then is the connection open (and its first frame
 * counted). Any other frame first is answered MC_ERR_REJECT_HANDSHAKE with
 * the reason and the connection closed: it is never processed.
 *
 * Connection lifetime: a connection holds one reference for being open and
 * one per request handed to a handler and not yet replied. Closing (peer EOF,
 * socket error, protocol error, server destroy) frees the socket and events at
 * once; the struct lives until the last late reply releases it. Late replies
 * on a closed connection are discarded.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/event.h>

#include "rpc/fields.h"
#include "rpc/methods.h"
#include "rpc/net.h"
#include "rpc/outq.h"
#include "rpc/reader.h"
#include "rpc/rpc.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MAX_METHODS 4096 /* method ids are below this (rpc/methods.h) */
#define ACCEPT_BACKOFF_MIN_US 10000u
#define ACCEPT_BACKOFF_MAX_US 1000000u
#define LIMIT_LOG_PERIOD_US 10000000u /* refusals are logged once per this */
#define IDLE_CHECK_US 1000000u        /* the first-frame timeout's resolution */
#define AUTH_BODY_MAX 256u            /* handshake bodies are ~80 bytes */

/* A connection's authentication (opts.auth_key set). */
enum conn_auth {
    AUTH_OPEN = 0, /* done, or no key: frames are dispatched */
    AUTH_HELLO,    /* waiting for the client's HELLO */
    AUTH_PROOF,    /* HELLO answered: waiting for the client's PROOF */
};

typedef struct handler {
    mc_rpc_handler_t fn;
    mc_rpc_sink_t sink; /* payload destination chooser, or NULL */
    void *ctx;
} handler_t;

typedef struct listener listener_t;
typedef struct conn conn_t;

struct mc_rpc_server {
    mc_rpc_server_opts_t opts;
    char *bind_addr;
    handler_t *handlers; /* MAX_METHODS entries */
    unsigned n;
    listener_t *ls;
    int fd; /* the listening socket every reactor polls */
    uint16_t port;
    int started;
    size_t inbuf_share; /* max_inbuf_total / reactors */
    _Atomic uint64_t conns_accepted;
    _Atomic uint64_t conns_closed_protocol;
    _Atomic uint64_t requests;
    _Atomic uint64_t unknown_method;
    _Atomic uint64_t nconns;
    _Atomic uint64_t conns_refused;
    _Atomic uint64_t accept_errors;
    _Atomic uint64_t conns_closed_inbuf;
    _Atomic uint64_t conns_closed_idle;
    _Atomic uint64_t inbuf_bytes;
    _Atomic uint64_t auth_ok, auth_failed;
    int has_key;
    mc_auth_key_t key;
    _Atomic uint64_t refuse_logged_us; /* rate limit of the refusal log */
    _Atomic uint64_t refused_unlogged;
    _Atomic uint64_t fence; /* connections accepted before the last fence are closed */
    _Atomic uint64_t conns_closed_fenced;
};

struct listener {
    mc_rpc_server_t *s;
    mc_reactor_t *r;
    int fd;              /* s->fd, not owned */
    int spare_fd;        /* held to be released when descriptors run out; -1 none */
    struct event *ev;    /* readable listening socket */
    struct event *retry; /* accepting paused: resume */
    struct event *idle;  /* periodic first-frame timeout check */
    uint64_t backoff_us; /* current pause; 0 = accepting normally */
    size_t inbuf;        /* bytes of input buffers of this reactor's connections */
    mc_list_t conns;
    mc_reactor_hook_t stop_hook;
    int hooked;
};

struct mc_rpc_req {
    conn_t *c;
    uint64_t req_id;
    uint16_t method;
    uint8_t kind;
    const uint8_t *body;
    size_t body_len;
    const uint8_t *payload;
    size_t payload_len;
    size_t hdr_pos;    /* reply header position, relative to the out buffer head */
    uint64_t start_us; /* when it arrived (mc_now_us) */
    mc_mp_writer_t w;
    mc_rpc_req_t *next_free;
};

struct conn {
    listener_t *l; /* NULL once closed */
    mc_reactor_t *r;
    int fd;
    struct event *rev;
    struct event *wev;
    mc_rpc_reader_t rd; /* the input: buffer, frames, streamed payloads */
    mc_outq_t out;
    /* A request whose payload streams into its sink's memory (or is
     * discarded): made when its body arrived, dispatched when the payload is
     * in. */
    mc_rpc_req_t *rx_req;
    mc_status_t rx_st; /* the sink's refusal, replied after draining */
    int refs;
    int closed;
    int in_read;      /* inside the read callback: flush happens at its end */
    int flush_queued; /* wev activated for a flush */
    int read_paused;  /* out buffer over max_outbuf */
    int framed;       /* a first frame completed (with a key: the handshake) */
    int auth;         /* enum conn_auth */
    uint8_t nonce_peer[MC_AUTH_NONCE_LEN], nonce_own[MC_AUTH_NONCE_LEN];
    uint64_t accepted_us;
    uint64_t gen;   /* s->fence when accepted: older than the fence = closed */
    size_t in_acct; /* c->rd.in.cap as counted in the listener's and server's totals */
    mc_rpc_req_t *free_reqs;
    mc_list_t node; /* in listener->conns */
    char peer[64];
};

static void conn_close(conn_t *c, const char *why);
static void conn_flush(conn_t *c);

/* ------------------------------------------------------------- requests */

uint16_t mc_rpc_req_method(const mc_rpc_req_t *req)
{
    return req->method;
}

uint8_t mc_rpc_req_kind(const mc_rpc_req_t *req)
{
    return req->kind;
}

const uint8_t *mc_rpc_req_body(const mc_rpc_req_t *req, size_t *len)
{
    *len = req->body_len;
    return req->body;
}

const uint8_t *mc_rpc_req_payload(const mc_rpc_req_t *req, size_t *len)
{
    *len = req->payload_len;
    return req->payload;
}

mc_reactor_t *mc_rpc_req_reactor(const mc_rpc_req_t *req)
{
    return req->c->r;
}

uint64_t mc_rpc_req_start_us(const mc_rpc_req_t *req)
{
    return req->start_us;
}

const char *mc_rpc_req_peer(const mc_rpc_req_t *req)
{
    return req->c->peer;
}

static void conn_unref(conn_t *c)
{
    if (--c->refs > 0)
        return;
    mc_rpc_req_t *req = c->free_reqs;
    while (req != NULL) {
        mc_rpc_req_t *next = req->next_free;
        mc_free(req);
        req = next;
    }
    mc_rpc_reader_fini(&c->rd);
    mc_outq_fini(&c->out);
    mc_free(c);
}

static void req_release(mc_rpc_req_t *req)
{
    conn_t *c = req->c;
    req->next_free = c->free_reqs;
    c->free_reqs = req;
    conn_unref(c);
}

/* Schedule a flush of c's out buffer at the end of this loop iteration, so
 * that replies produced by one batch of events leave in one write. */
static void conn_want_flush(conn_t *c)
{
    if (c->closed || c->in_read || c->flush_queued)
        return;
    c->flush_queued = 1;
    event_active(c->wev, EV_WRITE, 0);
}

mc_mp_writer_t *mc_rpc_reply_begin(mc_rpc_req_t *req)
{
    conn_t *c = req->c;
    mc_buf_t *out = &c->out.buf;
    req->hdr_pos = mc_buf_used(out);
    mc_mp_writer_init(&req->w, out);
    if (mc_buf_reserve(out, MC_FRAME_HDR_LEN + 256) != MC_OK)
        req->w.err = MC_ERR_NOMEM;
    else
        mc_buf_produce(out, MC_FRAME_HDR_LEN);
    return &req->w;
}

void mc_rpc_reply_end(mc_rpc_req_t *req, mc_status_t st)
{
    mc_rpc_reply_end_payload(req, st, NULL, 0);
}

void mc_rpc_reply_end_payload(mc_rpc_req_t *req, mc_status_t st, const void *payload, size_t plen)
{
    struct iovec iov = {.iov_base = (void *)(uintptr_t)payload, .iov_len = plen};
    mc_rpc_reply_end_payloadv(req, st, &iov, plen > 0 ? 1 : 0);
}

void mc_rpc_reply_end_payloadv(mc_rpc_req_t *req, mc_status_t st, const struct iovec *iov,
                               size_t niov)
{
    conn_t *c = req->c;
    size_t plen = 0;
    for (size_t i = 0; i < niov; i++)
        plen += iov[i].iov_len;
    mc_buf_t *out = &c->out.buf;

    if (c->closed || req->kind != MC_FRAME_REQUEST) {
        /* nobody to answer: drop what was encoded */
        if (req->w.err == MC_OK)
            out->len = out->off + req->hdr_pos;
        if (c->closed)
            mc_outq_reset(&c->out);
        req_release(req);
        return;
    }
    if (req->w.err != MC_OK) {
        /* Could not encode the body: answer with the error and no body. */
        MC_ERROR(RPC, "%s: cannot encode reply to method %u: %s", c->peer, req->method,
                 mc_status_str(req->w.err));
        out->len = out->off + req->hdr_pos;
        if (mc_buf_reserve(out, MC_FRAME_HDR_LEN) != MC_OK) {
            req_release(req);
            conn_close(c, "out of memory for a reply");
            return;
        }
        mc_buf_produce(out, MC_FRAME_HDR_LEN);
        st = req->w.err;
        plen = 0;
    }
    size_t body_len = mc_buf_used(out) - req->hdr_pos - MC_FRAME_HDR_LEN;
    if (plen > UINT32_MAX) {
        MC_ERROR(RPC, "%s: reply to method %u: payload of %zu bytes is over the frame limit",
                 c->peer, req->method, plen);
        st = MC_ERR_LIMIT;
        plen = 0;
    }
    if (plen > 0 && mc_outq_reserve_ext(&c->out, niov) != MC_OK) {
        /* keep the frame consistent: error reply without the payload */
        st = MC_ERR_NOMEM;
        plen = 0;
    }
    for (size_t i = 0; plen > 0 && i < niov; i++)
        mc_outq_add_ext(&c->out, iov[i].iov_base, iov[i].iov_len); /* room reserved */
    mc_frame_hdr_t h = {
        .version = MC_FRAME_VERSION,
        .kind = MC_FRAME_RESPONSE,
        .method = req->method,
        .req_id = req->req_id,
        .status = st,
        .body_len = (uint32_t)body_len,
        .payload_len = (uint32_t)plen,
    };
    mc_frame_encode_hdr(mc_buf_head(out) + req->hdr_pos, &h);
    req_release(req);
    conn_want_flush(c);
}

void mc_rpc_reply(mc_rpc_req_t *req, mc_status_t st, const void *body, size_t len)
{
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    if (len > 0 && w->err == MC_OK) {
        if (mc_buf_append(w->buf, body, len) != MC_OK)
            w->err = MC_ERR_NOMEM;
    }
    mc_rpc_reply_end(req, st);
}

/* ------------------------------------------------------------ connection */

/* Count c->rd.in's allocation in the totals (after it grew or shrank). */
static void conn_in_sync(conn_t *c, listener_t *l)
{
    size_t cap = c->rd.in.cap;
    if (cap == c->in_acct || l == NULL)
        return;
    if (cap > c->in_acct) {
        l->inbuf += cap - c->in_acct;
        atomic_fetch_add_explicit(&l->s->inbuf_bytes, cap - c->in_acct, memory_order_relaxed);
    } else {
        l->inbuf -= c->in_acct - cap;
        atomic_fetch_sub_explicit(&l->s->inbuf_bytes, c->in_acct - cap, memory_order_relaxed);
    }
    c->in_acct = cap;
}

/* Log a refusal at most once per LIMIT_LOG_PERIOD_US per server, with how
 * many went unlogged since. */
static void log_limited(mc_rpc_server_t *s, const char *what, const char *detail)
{
    uint64_t now = mc_now_us();
    uint64_t last = atomic_load_explicit(&s->refuse_logged_us, memory_order_relaxed);
    if (last != 0 && now - last < LIMIT_LOG_PERIOD_US) {
        atomic_fetch_add_explicit(&s->refused_unlogged, 1, memory_order_relaxed);
        return;
    }
    if (!atomic_compare_exchange_strong(&s->refuse_logged_us, &last, now)) {
        atomic_fetch_add_explicit(&s->refused_unlogged, 1, memory_order_relaxed);
        return;
    }
    uint64_t more = atomic_exchange(&s->refused_unlogged, 0);
    MC_WARN(RPC, "rpc port %u: %s: %s (%llu more like it in the last %u s)", s->port, what, detail,
            (unsigned long long)more, LIMIT_LOG_PERIOD_US / 1000000);
}

static void conn_close(conn_t *c, const char *why)
{
    if (c->closed)
        return;
    MC_DEBUG(RPC, "%p: closing connection from %s: %s", (void *)c, c->peer, why);
    c->closed = 1;
    event_free(c->rev);
    event_free(c->wev);
    c->rev = c->wev = NULL;
    close(c->fd);
    c->fd = -1;
    mc_list_del(&c->node);
    listener_t *l = c->l;
    c->l = NULL;
    if (c->auth == AUTH_PROOF) /* answered our hello, never proved itself */
        atomic_fetch_add_explicit(&l->s->auth_failed, 1, memory_order_relaxed);
    if (c->rx_req != NULL) {
        req_release(c->rx_req);
        c->rx_req = NULL;
    }
    mc_rpc_reader_fini(&c->rd);
    conn_in_sync(c, l);
    atomic_fetch_sub_explicit(&l->s->nconns, 1, memory_order_relaxed);
    mc_outq_reset(&c->out);
    conn_unref(c);
}

/* A request object for frame header h whose body is at body. NULL (and the
 * connection closed) when out of memory. */
static mc_rpc_req_t *req_new(conn_t *c, const mc_frame_hdr_t *h, const uint8_t *body)
{
    mc_rpc_req_t *req = c->free_reqs;
    if (req != NULL) {
        c->free_reqs = req->next_free;
    } else if ((req = mc_malloc(sizeof(*req))) == NULL) {
        conn_close(c, "out of memory for a request");
        return NULL;
    }
    req->c = c;
    req->req_id = h->req_id;
    req->method = h->method;
    req->kind = h->kind;
    req->body = body;
    req->body_len = h->body_len;
    req->payload = NULL;
    req->payload_len = h->payload_len;
    req->start_us = mc_now_us();
    c->refs++;
    if (c->auth == AUTH_OPEN)
        c->framed = 1;
    return req;
}

static handler_t *handler_of(mc_rpc_server_t *s, uint16_t method)
{
    return method < MAX_METHODS ? &s->handlers[method] : NULL;
}

static void dispatch(conn_t *c, mc_rpc_req_t *req)
{
    mc_rpc_server_t *s = c->l->s;
    MC_TRACE(RPC, "%s: request %llu method %u", c->peer, (unsigned long long)req->req_id,
             req->method);
    atomic_fetch_add_explicit(&s->requests, 1, memory_order_relaxed);
    handler_t *h = handler_of(s, req->method);
    if (h == NULL || h->fn == NULL) {
        atomic_fetch_add_explicit(&s->unknown_method, 1, memory_order_relaxed);
        MC_DEBUG(RPC, "%s: no handler for method %u", c->peer, req->method);
        mc_rpc_reply(req, MC_ERR_NO_METHOD, NULL, 0);
        return;
    }
    h->fn(h->ctx, req);
}

static void protocol_error(conn_t *c, const char *reason)
{
    atomic_fetch_add_explicit(&c->l->s->conns_closed_protocol, 1, memory_order_relaxed);
    MC_WARN(RPC, "closing connection from %s: protocol error: %s", c->peer, reason);
}

/* ------------------------------------------------- the reader's callbacks */

/* Accepted before the last mc_rpc_server_fence: nothing more of it is read. */
static int conn_fenced(const conn_t *c)
{
    return c->l != NULL && c->gen < atomic_load_explicit(&c->l->s->fence, memory_order_acquire);
}

static void conn_close_fenced(conn_t *c)
{
    atomic_fetch_add_explicit(&c->l->s->conns_closed_fenced, 1, memory_order_relaxed);
    conn_close(c, "fenced: accepted before mc_rpc_server_fence");
}

/* The reader asks before every read(2) and after every callback: a fenced
 * connection stops at once, even in the middle of a payload. */
static int rd_open(void *owner)
{
    conn_t *c = owner;
    return !c->closed && !conn_fenced(c);
}

/* Requests and notifications only; a request with a payload for a method
 * with a sink streams into the sink's memory. */
static int rd_on_header(void *owner, const mc_frame_hdr_t *h, const char **why)
{
    conn_t *c = owner;
    if (h->kind != MC_FRAME_REQUEST && h->kind != MC_FRAME_NOTIFY) {
        *why = "unexpected frame kind";
        return -1;
    }
    if (c->auth != AUTH_OPEN) {
        /* before the handshake only its small frames are read (whole) */
        if (h->payload_len != 0 || h->body_len > AUTH_BODY_MAX) {
            atomic_fetch_add_explicit(&c->l->s->auth_failed, 1, memory_order_relaxed);
            *why = "a large frame before the authentication handshake";
            return -1;
        }
        return 0;
    }
    handler_t *hd = handler_of(c->l->s, h->method);
    return h->payload_len > 0 && h->kind == MC_FRAME_REQUEST && hd != NULL && hd->sink != NULL;
}

/* Header and body are in: ask the sink where the payload goes. */
static void rd_stream_begin(void *owner, const mc_frame_hdr_t *h, const uint8_t *body,
                            mc_rpc_rx_dst_t *d)
{
    conn_t *c = owner;
    handler_t *hd = handler_of(c->l->s, h->method);
    mc_rpc_req_t *req = req_new(c, h, body);
    if (req == NULL)
        return; /* closed */
    void *dst = NULL;
    mc_status_t st = hd->sink(hd->ctx, req, h->payload_len, &dst);
    MC_TRACE(RPC, "%s: request %llu method %u: %u payload bytes %s", c->peer,
             (unsigned long long)h->req_id, h->method, h->payload_len,
             st == MC_OK ? "into the sink" : "discarded");
    c->rx_req = req;
    c->rx_st = st;
    req->payload = st == MC_OK ? dst : NULL;
    if (st == MC_OK) {
        d->dst = dst;
        d->dst_len = h->payload_len;
    }
}

/* The handshake failed, or a frame came before it: answer a request with
 * MC_ERR_REJECT_HANDSHAKE and the reason (written at once: the connection
 * closes), never processing it; close. */
static void auth_refuse(conn_t *c, const mc_frame_t *f, const char *why)
{
    mc_rpc_server_t *s = c->l->s;
    atomic_fetch_add_explicit(&s->auth_failed, 1, memory_order_relaxed);
    char detail[192];
    snprintf(detail, sizeof(detail), "%s: %s", c->peer, why);
    log_limited(s, "authentication failed", detail);
    if (f->hdr.kind == MC_FRAME_REQUEST) {
        mc_buf_t b = MC_BUF_INIT;
        if (mc_buf_reserve(&b, MC_FRAME_HDR_LEN) == MC_OK) {
            mc_buf_produce(&b, MC_FRAME_HDR_LEN);
            mc_mp_writer_t w;
            mc_mp_writer_init(&w, &b);
            mc_mp_write_map(&w, 1);
            mc_mp_write_uint(&w, MC_F_ERROR);
            mc_mp_write_cstr(&w, why);
            mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                                .kind = MC_FRAME_RESPONSE,
                                .method = f->hdr.method,
                                .req_id = f->hdr.req_id,
                                .status = MC_ERR_REJECT_HANDSHAKE,
                                .body_len = (uint32_t)(mc_buf_used(&b) - MC_FRAME_HDR_LEN)};
            mc_frame_encode_hdr(mc_buf_head(&b), &h);
            if (w.err == MC_OK && write(c->fd, mc_buf_head(&b), mc_buf_used(&b)) < 0)
                MC_DEBUG(RPC, "%s: cannot send the refusal: %s", c->peer, strerror(errno));
        }
        mc_buf_fini(&b);
    }
    c->auth = AUTH_HELLO; /* counted above, not again at the close */
    conn_close(c, why);
}

/* The bin field `id` of a handshake body, exactly len bytes; NULL if absent. */
static const uint8_t *auth_field(const mc_frame_t *f, unsigned id, uint32_t len)
{
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, f->body, f->hdr.body_len);
    uint32_t n = f->hdr.body_len ? mc_mp_read_map(&r) : 0;
    const uint8_t *found = NULL;
    for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
        if (mc_mp_read_uint(&r) == id) {
            uint32_t l = 0;
            const void *p = mc_mp_read_bin(&r, &l);
            if (r.err == MC_OK && l == len)
                found = p;
        } else {
            mc_mp_skip(&r);
        }
    }
    return r.err == MC_OK ? found : NULL;
}

/* One frame of the handshake (c->auth != AUTH_OPEN). */
static void auth_step(conn_t *c, const mc_frame_t *f)
{
    mc_rpc_server_t *s = c->l->s;
    if (c->auth == AUTH_HELLO && f->hdr.method == MC_RPC_AUTH_HELLO &&
        f->hdr.kind == MC_FRAME_REQUEST) {
        const uint8_t *nc = auth_field(f, MC_F_NONCE, MC_AUTH_NONCE_LEN);
        if (nc == NULL) {
            auth_refuse(c, f, "malformed authentication hello");
            return;
        }
        memcpy(c->nonce_peer, nc, MC_AUTH_NONCE_LEN);
        mc_auth_nonce(c->nonce_own);
        uint8_t proof[MC_AUTH_PROOF_LEN];
        mc_auth_proof(&s->key, MC_AUTH_SERVER, c->nonce_peer, c->nonce_own, proof);
        mc_rpc_req_t *req = req_new(c, &f->hdr, f->body);
        if (req == NULL)
            return; /* closed */
        c->auth = AUTH_PROOF;
        mc_mp_writer_t *w = mc_rpc_reply_begin(req);
        mc_mp_write_map(w, 2);
        mc_mp_write_uint(w, MC_F_NONCE);
        mc_mp_write_bin(w, c->nonce_own, MC_AUTH_NONCE_LEN);
        mc_mp_write_uint(w, MC_F_PROOF);
        mc_mp_write_bin(w, proof, MC_AUTH_PROOF_LEN);
        mc_rpc_reply_end(req, MC_OK);
        return;
    }
    if (c->auth == AUTH_PROOF && f->hdr.method == MC_RPC_AUTH_PROOF &&
        f->hdr.kind == MC_FRAME_NOTIFY) {
        const uint8_t *p = auth_field(f, MC_F_PROOF, MC_AUTH_PROOF_LEN);
        if (!mc_auth_check(&s->key, MC_AUTH_CLIENT, c->nonce_own, c->nonce_peer, p,
                           p != NULL ? MC_AUTH_PROOF_LEN : 0)) {
            auth_refuse(c, f, "wrong authentication proof (another secret?)");
            return;
        }
        c->auth = AUTH_OPEN;
        c->framed = 1;
        atomic_fetch_add_explicit(&s->auth_ok, 1, memory_order_relaxed);
        MC_DEBUG(RPC, "%s: authenticated", c->peer);
        return;
    }
    auth_refuse(c, f,
                c->auth == AUTH_HELLO
                    ? "authentication required: this server has a secret ([security] secret_file)"
                    : "unexpected frame during the authentication handshake");
}

static void rd_on_frame(void *owner, const mc_frame_t *f, int streamed)
{
    conn_t *c = owner;
    mc_rpc_req_t *req;
    if (c->auth != AUTH_OPEN) {
        auth_step(c, f);
        return;
    }
    if (streamed) {
        req = c->rx_req;
        c->rx_req = NULL;
        if (c->rx_st != MC_OK) {
            atomic_fetch_add_explicit(&c->l->s->requests, 1, memory_order_relaxed);
            mc_rpc_reply(req, c->rx_st, NULL, 0);
            return;
        }
    } else {
        req = req_new(c, &f->hdr, f->body);
        if (req == NULL)
            return; /* closed */
        req->payload = f->payload;
    }
    dispatch(c, req);
}

static const mc_rpc_reader_ops_t rd_ops = {
    .on_header = rd_on_header,
    .stream_begin = rd_stream_begin,
    .on_frame = rd_on_frame,
    .open = rd_open,
};

/* The reactor's connections hold more input than its share of
 * max_inbuf_total: close the biggest holders until under it (as Redis closes
 * the client over its buffer limit). */
static void inbuf_enforce(listener_t *l)
{
    while (l->inbuf > l->s->inbuf_share) {
        conn_t *big = NULL;
        mc_list_t *pos;
        MC_LIST_FOREACH(pos, &l->conns)
        {
            conn_t *c = MC_LIST_ENTRY(pos, conn_t, node);
            if (big == NULL || c->in_acct > big->in_acct)
                big = c;
        }
        if (big == NULL || big->in_acct == 0)
            break;
        char detail[160];
        snprintf(detail, sizeof(detail), "closing %s, which holds %zu bytes", big->peer,
                 big->in_acct);
        log_limited(l->s, "input buffers over their share of max_inbuf_total", detail);
        atomic_fetch_add_explicit(&l->s->conns_closed_inbuf, 1, memory_order_relaxed);
        conn_close(big, "input buffers over max_inbuf_total: the biggest holder");
    }
}

static void conn_on_read_body(evutil_socket_t fd, short what, void *arg)
{
    conn_t *c = arg;
    const char *why = NULL;
    (void)what;

    c->refs++; /* keep c alive until the end of this callback */
    c->in_read = 1;
    mc_status_t st = mc_rpc_reader_read(&c->rd, fd, &why);
    if (!c->closed && conn_fenced(c))
        conn_close_fenced(c);
    if (!c->closed) {
        switch (st) {
        case MC_OK:
            /* the buffer grew (a frame being received) or shrank */
            conn_in_sync(c, c->l);
            if (c->l->inbuf > c->l->s->inbuf_share)
                inbuf_enforce(c->l);
            break;
        case MC_ERR_LIMIT:
            atomic_fetch_add_explicit(&c->l->s->conns_closed_inbuf, 1, memory_order_relaxed);
            MC_WARN(RPC, "closing connection from %s: %s (max_inbuf %zu)", c->peer,
                    why != NULL ? why : "input over its limit", c->l->s->opts.max_inbuf);
            conn_close(c, "input buffer over max_inbuf");
            break;
        case MC_ERR_CONN_CLOSED:
            conn_close(c, "peer closed");
            break;
        case MC_ERR_PROTOCOL:
            protocol_error(c, why != NULL ? why : mc_status_str(st));
            conn_close(c, "protocol error");
            break;
        case MC_ERR_NOMEM:
            conn_close(c, "out of memory for input");
            break;
        default:
            MC_DEBUG(RPC, "read from %s failed: %s", c->peer, strerror(errno));
            conn_close(c, "read error");
            break;
        }
    }
    c->in_read = 0;
    if (!c->closed)
        conn_flush(c);
    conn_unref(c);
}

/* libevent entry: make the reactor current (attach mode), then run the body. */
static void conn_on_read(evutil_socket_t fd, short what, void *arg)
{
    mc_reactor_t *saved = mc_reactor_enter(((conn_t *)arg)->r);
    conn_on_read_body(fd, what, arg);
    mc_reactor_leave(saved);
}

static void conn_flush(conn_t *c)
{
    /* This flush serves any queued activation: event_del() below would
     * cancel it, and a flag left set would stall every later reply. */
    c->flush_queued = 0;
    mc_status_t st = mc_outq_flush(&c->out, c->fd);
    if (st == MC_ERR_SOCKET) {
        MC_DEBUG(RPC, "write to %s failed: %s", c->peer, strerror(errno));
        conn_close(c, "write error");
        return;
    }
    /* Back-pressure counts the bytes held in our buffer: zero-copy payloads
     * (mc_rpc_reply_end_payload) are the caller's memory and cost nothing
     * while they wait; counting them paused (and logged) every pipelined
     * bulk read of more than max_outbuf in flight. */
    size_t left = mc_outq_used(&c->out);
    size_t held = mc_buf_used(&c->out.buf);
    mc_rpc_server_t *s = c->l->s;
    if (left > 0) {
        event_add(c->wev, NULL);
        if (!c->read_paused && held > s->opts.max_outbuf) {
            /* The peer sends requests but does not read replies. */
            MC_WARN(RPC, "%s: %zu bytes of replies unread, pausing its requests", c->peer, held);
            event_del(c->rev);
            c->read_paused = 1;
        }
    } else {
        event_del(c->wev);
        mc_buf_shrink(&c->out.buf, 1u << 20);
    }
    if (c->read_paused && held <= s->opts.max_outbuf / 2) {
        event_add(c->rev, NULL);
        c->read_paused = 0;
    }
}

static void conn_on_write_body(evutil_socket_t fd, short what, void *arg)
{
    conn_t *c = arg;
    (void)fd;
    (void)what;
    c->flush_queued = 0;
    if (!c->closed)
        conn_flush(c);
}

/* libevent entry: make the reactor current (attach mode), then run the body. */
static void conn_on_write(evutil_socket_t fd, short what, void *arg)
{
    mc_reactor_t *saved = mc_reactor_enter(((conn_t *)arg)->r);
    conn_on_write_body(fd, what, arg);
    mc_reactor_leave(saved);
}

/* Accepting failed for want of descriptors or memory: free the pending
 * connection with the spare descriptor (its client sees a close, not a
 * hang), and stop polling the socket on this reactor for a backoff. */
static void accept_pause(listener_t *l, int err)
{
    mc_rpc_server_t *s = l->s;
    atomic_fetch_add_explicit(&s->accept_errors, 1, memory_order_relaxed);
    if ((err == EMFILE || err == ENFILE) && l->spare_fd >= 0) {
        close(l->spare_fd);
        l->spare_fd = -1;
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            close(fd);
            atomic_fetch_add_explicit(&s->conns_refused, 1, memory_order_relaxed);
        }
        l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    l->backoff_us = l->backoff_us == 0 ? ACCEPT_BACKOFF_MIN_US : l->backoff_us * 2;
    if (l->backoff_us > ACCEPT_BACKOFF_MAX_US)
        l->backoff_us = ACCEPT_BACKOFF_MAX_US;
    char detail[96];
    snprintf(detail, sizeof(detail), "%s; accepting again in %llu ms", strerror(err),
             (unsigned long long)(l->backoff_us / 1000));
    log_limited(s, "accept failed", detail);
    struct timeval tv = {.tv_sec = (time_t)(l->backoff_us / 1000000),
                         .tv_usec = (suseconds_t)(l->backoff_us % 1000000)};
    event_del(l->ev);
    evtimer_add(l->retry, &tv);
}

static void listener_on_retry(evutil_socket_t fd, short what, void *arg)
{
    listener_t *l = arg;
    mc_reactor_t *saved = mc_reactor_enter(l->r);
    (void)fd;
    (void)what;
    if (l->spare_fd < 0)
        l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    event_add(l->ev, NULL); /* the backoff stays until an accept succeeds */
    mc_reactor_leave(saved);
}

/* Every second: close connections that have not completed a first frame
 * within first_frame_timeout (they hold a descriptor and maybe a buffer). */
static void listener_on_idle(evutil_socket_t fd, short what, void *arg)
{
    listener_t *l = arg;
    mc_reactor_t *saved = mc_reactor_enter(l->r);
    (void)fd;
    (void)what;
    uint64_t now = mc_now_us(), limit = l->s->opts.first_frame_timeout_us;
    mc_list_t *pos, *tmp;
    MC_LIST_FOREACH_SAFE(pos, tmp, &l->conns)
    {
        conn_t *c = MC_LIST_ENTRY(pos, conn_t, node);
        if (conn_fenced(c)) {
            conn_close_fenced(c);
            continue;
        }
        if (c->framed || now - c->accepted_us <= limit)
            continue;
        char detail[128];
        snprintf(detail, sizeof(detail), "closing %s: no complete frame in %llu ms", c->peer,
                 (unsigned long long)(limit / 1000));
        log_limited(l->s, "idle connection", detail);
        atomic_fetch_add_explicit(&l->s->conns_closed_idle, 1, memory_order_relaxed);
        conn_close(c, "no complete frame within first_frame_timeout");
    }
    mc_reactor_leave(saved);
}

static void listener_on_accept_body(evutil_socket_t lfd, short what, void *arg)
{
    listener_t *l = arg;
    mc_rpc_server_t *s = l->s;
    (void)what;
    /* Accept a bounded number per event so one busy listener cannot starve
     * the connections already open on this reactor. */
    for (int i = 0; i < 64; i++) {
        mc_sockaddr_t peer;
        peer.len = sizeof(peer.ss);
        int fd = accept4(lfd, (struct sockaddr *)&peer.ss, &peer.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return; /* another reactor took it, or none left */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                accept_pause(l, errno);
                return;
            }
            log_limited(s, "accept failed", strerror(errno));
            atomic_fetch_add_explicit(&s->accept_errors, 1, memory_order_relaxed);
            return;
        }
        l->backoff_us = 0;
        char name[64];
        mc_net_addr_str(&peer, name, sizeof(name));
        if (atomic_load_explicit(&s->nconns, memory_order_relaxed) >= s->opts.max_conns) {
            char detail[128];
            snprintf(detail, sizeof(detail), "closing %s at once (max_conns %u)", name,
                     s->opts.max_conns);
            log_limited(s, "too many connections", detail);
            atomic_fetch_add_explicit(&s->conns_refused, 1, memory_order_relaxed);
            close(fd);
            continue;
        }
        mc_net_tune(fd);
        conn_t *c = MC_NEW(conn_t);
        if (c == NULL) {
            MC_ERROR(RPC, "out of memory accepting a connection");
            close(fd);
            continue;
        }
        c->l = l;
        c->r = l->r;
        c->fd = fd;
        c->refs = 1;
        c->accepted_us = mc_now_us();
        c->gen = atomic_load_explicit(&s->fence, memory_order_acquire);
        c->auth = s->has_key ? AUTH_HELLO : AUTH_OPEN;
        mc_rpc_reader_init(&c->rd, &rd_ops, c, &s->opts.limits);
        c->rd.max_in = s->opts.max_inbuf;
        mc_outq_init(&c->out);
        memcpy(c->peer, name, sizeof(c->peer));
        struct event_base *base = mc_reactor_base(l->r);
        c->rev = event_new(base, fd, EV_READ | EV_PERSIST, conn_on_read, c);
        c->wev = event_new(base, fd, EV_WRITE | EV_PERSIST, conn_on_write, c);
        if (c->rev == NULL || c->wev == NULL || event_add(c->rev, NULL) != 0) {
            MC_ERROR(RPC, "cannot register connection from %s", c->peer);
            if (c->rev)
                event_free(c->rev);
            if (c->wev)
                event_free(c->wev);
            close(fd);
            mc_free(c);
            continue;
        }
        mc_list_push_tail(&l->conns, &c->node);
        atomic_fetch_add_explicit(&s->nconns, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->conns_accepted, 1, memory_order_relaxed);
        MC_DEBUG(RPC, "%p: accepted connection from %s", (void *)c, c->peer);
    }
}

static void listener_on_accept(evutil_socket_t fd, short what, void *arg)
{
    mc_reactor_t *saved = mc_reactor_enter(((listener_t *)arg)->r);
    listener_on_accept_body(fd, what, arg);
    mc_reactor_leave(saved);
}

/* ---------------------------------------------------------------- server */

void mc_rpc_server_opts_init(mc_rpc_server_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->bind_addr = "0.0.0.0";
    o->backlog = 1024;
    mc_frame_limits_init(&o->limits);
    o->max_outbuf = 64u << 20;
    o->max_conns = 10000;
    o->max_inbuf = 0; /* the largest frame: set at create from the limits */
    o->max_inbuf_total = 256u << 20;
    o->first_frame_timeout_us = 10000000;
}

mc_status_t mc_rpc_server_create(mc_reactor_t *const *reactors, unsigned n,
                                 const mc_rpc_server_opts_t *o, mc_rpc_server_t **out)
{
    if (n == 0)
        return MC_ERR_INVALID_ARGUMENT;
    mc_rpc_server_t *s = MC_NEW(mc_rpc_server_t);
    if (s == NULL)
        return MC_ERR_NOMEM;
    if (o != NULL)
        s->opts = *o;
    else
        mc_rpc_server_opts_init(&s->opts);
    if (s->opts.max_outbuf == 0)
        s->opts.max_outbuf = 64u << 20;
    if (s->opts.backlog <= 0)
        s->opts.backlog = 1024;
    mc_frame_limits_t fl = s->opts.limits;
    if (fl.max_body == 0 || fl.max_payload == 0) {
        mc_frame_limits_t d;
        mc_frame_limits_init(&d);
        fl.max_body = fl.max_body ? fl.max_body : d.max_body;
        fl.max_payload = fl.max_payload ? fl.max_payload : d.max_payload;
    }
    if (s->opts.max_inbuf == 0) /* a whole frame, and one read beyond it */
        s->opts.max_inbuf =
            MC_FRAME_HDR_LEN + (size_t)fl.max_body + fl.max_payload + MC_RPC_READ_CHUNK;
    if (s->opts.max_conns == 0)
        s->opts.max_conns = 10000;
    if (s->opts.max_inbuf_total == 0)
        s->opts.max_inbuf_total = 256u << 20;
    if (s->opts.first_frame_timeout_us == 0)
        s->opts.first_frame_timeout_us = 10000000;
    s->inbuf_share = s->opts.max_inbuf_total / n;
    if (s->opts.auth_key != NULL) {
        s->key = *s->opts.auth_key;
        s->has_key = 1;
    }
    s->opts.auth_key = NULL; /* the caller's copy is not ours to keep */
    s->fd = -1;
    s->bind_addr = mc_strdup(s->opts.bind_addr ? s->opts.bind_addr : "0.0.0.0");
    s->handlers = mc_calloc(MAX_METHODS, sizeof(*s->handlers));
    s->ls = mc_calloc(n, sizeof(*s->ls));
    if (s->bind_addr == NULL || s->handlers == NULL || s->ls == NULL)
        goto err_free;
    s->opts.bind_addr = s->bind_addr;
    s->n = n;
    for (unsigned i = 0; i < n; i++) {
        s->ls[i].s = s;
        s->ls[i].r = reactors[i];
        s->ls[i].fd = -1;
        s->ls[i].spare_fd = -1;
        mc_list_init(&s->ls[i].conns);
    }
    *out = s;
    return MC_OK;

err_free:
    mc_free(s->ls);
    mc_free(s->handlers);
    mc_free(s->bind_addr);
    mc_free(s);
    return MC_ERR_NOMEM;
}

mc_status_t mc_rpc_server_register(mc_rpc_server_t *s, uint16_t method, mc_rpc_handler_t fn,
                                   void *ctx)
{
    if (method >= MAX_METHODS || fn == NULL || s->started)
        return MC_ERR_INVALID_ARGUMENT;
    if (s->handlers[method].fn != NULL)
        return MC_ERR_EXISTS;
    s->handlers[method].fn = fn;
    s->handlers[method].ctx = ctx;
    return MC_OK;
}

mc_status_t mc_rpc_server_register_sink(mc_rpc_server_t *s, uint16_t method, mc_rpc_sink_t sink,
                                        mc_rpc_handler_t fn, void *ctx)
{
    mc_status_t st = mc_rpc_server_register(s, method, fn, ctx);
    if (st == MC_OK)
        s->handlers[method].sink = sink;
    return st;
}

/* Runs on the listener's reactor: close the listening socket and every
 * connection accepted there. Also the reactor stop hook. */
static void listener_shutdown(listener_t *l)
{
    if (l->ev != NULL) {
        event_free(l->ev);
        l->ev = NULL;
    }
    if (l->retry != NULL) {
        event_free(l->retry);
        l->retry = NULL;
    }
    if (l->idle != NULL) {
        event_free(l->idle);
        l->idle = NULL;
    }
    if (l->spare_fd >= 0) {
        close(l->spare_fd);
        l->spare_fd = -1;
    }
    l->fd = -1; /* the server's: closed once every reactor stopped polling it */
    mc_list_t *pos, *tmp;
    MC_LIST_FOREACH_SAFE(pos, tmp, &l->conns)
    {
        conn_close(MC_LIST_ENTRY(pos, conn_t, node), "server shutting down");
    }
    if (l->hooked) {
        mc_reactor_on_stop_cancel(l->r, &l->stop_hook);
        l->hooked = 0;
    }
}

static void listener_on_reactor_stop(mc_reactor_t *r, mc_reactor_hook_t *hook)
{
    listener_t *l = MC_CONTAINER_OF(hook, listener_t, stop_hook);
    (void)r;
    l->hooked = 0; /* the reactor is dropping its hook list */
    listener_shutdown(l);
}

typedef struct {
    listener_t *l;
    mc_status_t st;
} arm_ctx_t;

static void listener_arm(void *arg)
{
    arm_ctx_t *a = arg;
    listener_t *l = a->l;
    struct event_base *base = mc_reactor_base(l->r);
    l->ev = event_new(base, l->fd, EV_READ | EV_PERSIST, listener_on_accept, l);
    l->retry = evtimer_new(base, listener_on_retry, l);
    l->idle = event_new(base, -1, EV_PERSIST, listener_on_idle, l);
    struct timeval tv = {.tv_sec = IDLE_CHECK_US / 1000000, .tv_usec = IDLE_CHECK_US % 1000000};
    if (l->ev == NULL || l->retry == NULL || l->idle == NULL || event_add(l->ev, NULL) != 0 ||
        event_add(l->idle, &tv) != 0) {
        a->st = MC_ERR_SOCKET;
        return;
    }
    l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    l->stop_hook.fn = listener_on_reactor_stop;
    mc_reactor_on_stop(l->r, &l->stop_hook);
    l->hooked = 1;
    a->st = MC_OK;
}

static void listener_disarm(void *arg)
{
    listener_shutdown(arg);
}

mc_status_t mc_rpc_server_start(mc_rpc_server_t *s)
{
    mc_sockaddr_t addr;
    mc_status_t st = mc_net_resolve(s->bind_addr, s->opts.port, &addr);
    if (st != MC_OK)
        return st;
    st = mc_net_listen(&addr, s->opts.backlog, &s->fd);
    if (st != MC_OK)
        return st;
    s->port = mc_net_local_port(s->fd);
    if (!s->has_key && !mc_net_is_loopback(&addr))
        MC_WARN(RPC,
                "rpc port %u listens on %s without a secret: anyone who reaches it is trusted "
                "(set [security] secret_file on every process of the cluster)",
                s->port, s->bind_addr);
    for (unsigned i = 0; i < s->n; i++)
        s->ls[i].fd = s->fd;
    for (unsigned i = 0; i < s->n; i++) {
        arm_ctx_t a = {.l = &s->ls[i], .st = MC_ERR_SOCKET};
        mc_rpc_run_on(s->ls[i].r, listener_arm, &a);
        if (a.st != MC_OK) {
            MC_ERROR(RPC, "cannot register listener on reactor %u", i);
            st = a.st;
            goto err_close;
        }
    }
    s->started = 1;
    MC_DEBUG(RPC, "rpc server listening on %s:%u with %u reactor(s)", s->bind_addr, s->port, s->n);
    return MC_OK;

err_close:
    for (unsigned i = 0; i < s->n; i++)
        mc_rpc_run_on(s->ls[i].r, listener_disarm, &s->ls[i]);
    close(s->fd);
    s->fd = -1;
    return st;
}

uint16_t mc_rpc_server_port(const mc_rpc_server_t *s)
{
    return s->port;
}

void mc_rpc_server_destroy(mc_rpc_server_t *s)
{
    if (s == NULL)
        return;
    for (unsigned i = 0; i < s->n; i++)
        mc_rpc_run_on(s->ls[i].r, listener_disarm, &s->ls[i]);
    if (s->fd >= 0)
        close(s->fd);
    mc_free(s->ls);
    mc_free(s->handlers);
    mc_free(s->bind_addr);
    mc_free(s);
}

/* On a listener's reactor: close its fenced connections now (their peers
 * see the close at once instead of at their next request). */
static void fence_close(mc_reactor_t *r, void *arg, mc_status_t st)
{
    listener_t *l = arg;
    (void)r;
    if (st != MC_OK || l->ev == NULL)
        return; /* stopping: the connections go with the listener */
    mc_reactor_t *saved = mc_reactor_enter(l->r);
    mc_list_t *pos, *tmp;
    MC_LIST_FOREACH_SAFE(pos, tmp, &l->conns)
    {
        conn_t *c = MC_LIST_ENTRY(pos, conn_t, node);
        if (conn_fenced(c))
            conn_close_fenced(c);
    }
    mc_reactor_leave(saved);
}

void mc_rpc_server_fence(mc_rpc_server_t *s)
{
    atomic_fetch_add_explicit(&s->fence, 1, memory_order_acq_rel);
    for (unsigned i = 0; s->started && i < s->n; i++)
        if (mc_reactor_call(s->ls[i].r, fence_close, &s->ls[i]) != MC_OK)
            MC_DEBUG(RPC, "fence: reactor %u closes its connections at its next idle check", i);
}

void mc_rpc_server_stats(const mc_rpc_server_t *s, mc_rpc_server_stats_t *out)
{
    out->conns_accepted = atomic_load_explicit(&s->conns_accepted, memory_order_relaxed);
    out->conns_closed_protocol =
        atomic_load_explicit(&s->conns_closed_protocol, memory_order_relaxed);
    out->requests = atomic_load_explicit(&s->requests, memory_order_relaxed);
    out->unknown_method = atomic_load_explicit(&s->unknown_method, memory_order_relaxed);
    out->conns_open = atomic_load_explicit(&s->nconns, memory_order_relaxed);
    out->conns_refused = atomic_load_explicit(&s->conns_refused, memory_order_relaxed);
    out->accept_errors = atomic_load_explicit(&s->accept_errors, memory_order_relaxed);
    out->conns_closed_inbuf = atomic_load_explicit(&s->conns_closed_inbuf, memory_order_relaxed);
    out->conns_closed_idle = atomic_load_explicit(&s->conns_closed_idle, memory_order_relaxed);
    out->inbuf_bytes = atomic_load_explicit(&s->inbuf_bytes, memory_order_relaxed);
    out->auth_ok = atomic_load_explicit(&s->auth_ok, memory_order_relaxed);
    out->auth_failed = atomic_load_explicit(&s->auth_failed, memory_order_relaxed);
    out->conns_closed_fenced = atomic_load_explicit(&s->conns_closed_fenced, memory_order_relaxed);
}
