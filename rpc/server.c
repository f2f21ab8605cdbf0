/*
 * server.c - RPC server: one listening socket per reactor, connections owned
 * by the reactor that accepted them. See rpc.h for the contract.
 *
 * Connection lifetime: a connection holds one reference for being open and
 * one per request handed to a handler and not yet replied. Closing (peer EOF,
 * socket error, protocol error, server destroy) frees the socket and events at
 * once; the struct lives until the last late reply releases it. Late replies
 * on a closed connection are discarded.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/event.h>

#include "rpc/net.h"
#include "rpc/outq.h"
#include "rpc/reader.h"
#include "rpc/rpc.h"
#include "util/log.h"
#include "util/mem.h"

#define MAX_METHODS 4096 /* method ids are below this (rpc/methods.h) */

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
    uint16_t port;
    int started;
    _Atomic uint64_t conns_accepted;
    _Atomic uint64_t conns_closed_protocol;
    _Atomic uint64_t requests;
    _Atomic uint64_t unknown_method;
};

struct listener {
    mc_rpc_server_t *s;
    mc_reactor_t *r;
    int fd;
    struct event *ev;
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
    size_t hdr_pos; /* reply header position, relative to the out buffer head */
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
    c->l = NULL;
    if (c->rx_req != NULL) {
        req_release(c->rx_req);
        c->rx_req = NULL;
    }
    mc_rpc_reader_fini(&c->rd);
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
    c->refs++;
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

static int rd_open(void *owner)
{
    return !((conn_t *)owner)->closed;
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

static void rd_on_frame(void *owner, const mc_frame_t *f, int streamed)
{
    conn_t *c = owner;
    mc_rpc_req_t *req;
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

static void conn_on_read_body(evutil_socket_t fd, short what, void *arg)
{
    conn_t *c = arg;
    const char *why = NULL;
    (void)what;

    c->refs++; /* keep c alive until the end of this callback */
    c->in_read = 1;
    mc_status_t st = mc_rpc_reader_read(&c->rd, fd, &why);
    if (!c->closed) {
        switch (st) {
        case MC_OK:
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

static void listener_on_accept_body(evutil_socket_t lfd, short what, void *arg)
{
    listener_t *l = arg;
    (void)what;
    /* Accept a bounded number per event so one busy listener cannot starve
     * the connections already open on this reactor. */
    for (int i = 0; i < 64; i++) {
        mc_sockaddr_t peer;
        peer.len = sizeof(peer.ss);
        int fd = accept4(lfd, (struct sockaddr *)&peer.ss, &peer.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                MC_WARN(RPC, "accept failed: %s", strerror(errno));
            return;
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
        mc_rpc_reader_init(&c->rd, &rd_ops, c, &l->s->opts.limits);
        mc_outq_init(&c->out);
        mc_net_addr_str(&peer, c->peer, sizeof(c->peer));
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
        atomic_fetch_add_explicit(&l->s->conns_accepted, 1, memory_order_relaxed);
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
    if (l->fd >= 0) {
        close(l->fd);
        l->fd = -1;
    }
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
    l->ev = event_new(mc_reactor_base(l->r), l->fd, EV_READ | EV_PERSIST, listener_on_accept, l);
    if (l->ev == NULL || event_add(l->ev, NULL) != 0) {
        a->st = MC_ERR_SOCKET;
        return;
    }
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
    /* Bind reactor 0 first so that port 0 becomes a concrete port the others
     * then share through SO_REUSEPORT. */
    for (unsigned i = 0; i < s->n; i++) {
        st = mc_net_listen(&addr, s->opts.backlog, &s->ls[i].fd);
        if (st != MC_OK)
            goto err_close;
        if (i == 0) {
            s->port = mc_net_local_port(s->ls[0].fd);
            struct sockaddr_in *in4 = (struct sockaddr_in *)&addr.ss;
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&addr.ss;
            if (addr.ss.ss_family == AF_INET)
                in4->sin_port = htons(s->port);
            else
                in6->sin6_port = htons(s->port);
        }
    }
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
    mc_free(s->ls);
    mc_free(s->handlers);
    mc_free(s->bind_addr);
    mc_free(s);
}

void mc_rpc_server_stats(const mc_rpc_server_t *s, mc_rpc_server_stats_t *out)
{
    out->conns_accepted = atomic_load_explicit(&s->conns_accepted, memory_order_relaxed);
    out->conns_closed_protocol =
        atomic_load_explicit(&s->conns_closed_protocol, memory_order_relaxed);
    out->requests = atomic_load_explicit(&s->requests, memory_order_relaxed);
    out->unknown_method = atomic_load_explicit(&s->unknown_method, memory_order_relaxed);
}
