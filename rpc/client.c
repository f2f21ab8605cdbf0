/*
 * client.c - RPC client: one connection, pipelined calls. See rpc.h.
 *
 * Connection states (changed only by set_state):
 *
 *   IDLE ----call----> CONNECTING --ok--> [AUTH --proofs ok-->] CONNECTED
 *    ^                   |  fail            | refused           | error / peer closed
 *    |                   v                  v                   v
 *    +--no calls---- BACKOFF <--------------+-------------------+
 *                        |  timer, calls waiting
 *                        +--> CONNECTING
 *   any --destroy/reactor stop--> CLOSED
 *
 * AUTH (opts.auth_key set): HELLO {our nonce} is written straight to the
 * new socket (its send buffer is empty, so the small frame goes whole);
 * the answer must carry the server's nonce and its proof for both nonces;
 * then our PROOF goes the same way and the queued calls follow. A server
 * without the secret, a wrong proof or a refusal fails the calls with
 * MC_ERR_REJECT_HANDSHAKE; the handshake has connect_timeout to finish.
 *
 * Calls are encoded straight into the out buffer whatever the state; they
 * leave when the connection is up. A connection that fails or dies fails every
 * call made so far with MC_ERR_CONN_CLOSED (sent or not: the caller decides
 * whether to retry). Deadlines: calls sit on a list ordered by deadline, with
 * one timer armed for the earliest.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/event.h>

#include "reactor/fsm.h"
#include "reactor/guard.h"
#include "rpc/fields.h"
#include "rpc/handshake.h"
#include "rpc/methods.h"
#include "rpc/net.h"
#include "rpc/outq.h"
#include "rpc/reader.h"
#include "rpc/rpc.h"
#include "util/hash.h"
#include "util/hmap.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

typedef enum cli_state {
    CLI_IDLE,       /* no socket; the next call connects */
    CLI_CONNECTING, /* non-blocking connect in progress, conn_timer = connect timeout */
    CLI_AUTH,       /* connected, handshake in progress, conn_timer = connect timeout */
    CLI_CONNECTED,
    CLI_BACKOFF, /* waiting conn_timer before connecting again */
    CLI_CLOSED,  /* destroyed or reactor stopped: calls are refused */
    CLI_NSTATES
} cli_state_t;

static const char *const cli_state_names[CLI_NSTATES] = {"IDLE",      "CONNECTING", "AUTH",
                                                         "CONNECTED", "BACKOFF",    "CLOSED"};

/* Legal transitions (reactor/fsm.h), one bit per target state. */
static const uint64_t cli_moves[CLI_NSTATES] = {
    [CLI_IDLE] = MC_FSM_BIT(CLI_CONNECTING) | MC_FSM_BIT(CLI_CLOSED),
    [CLI_CONNECTING] = MC_FSM_BIT(CLI_AUTH) | MC_FSM_BIT(CLI_CONNECTED) | MC_FSM_BIT(CLI_BACKOFF) |
                       MC_FSM_BIT(CLI_CLOSED),
    [CLI_AUTH] = MC_FSM_BIT(CLI_CONNECTED) | MC_FSM_BIT(CLI_BACKOFF) | MC_FSM_BIT(CLI_CLOSED),
    [CLI_CONNECTED] = MC_FSM_BIT(CLI_BACKOFF) | MC_FSM_BIT(CLI_CLOSED),
    [CLI_BACKOFF] = MC_FSM_BIT(CLI_CONNECTING) | MC_FSM_BIT(CLI_IDLE) | MC_FSM_BIT(CLI_CLOSED),
    [CLI_CLOSED] = 0,
};

static const mc_fsm_desc_t cli_fsm =
    MC_FSM_DESC("rpc_client", MC_LOGC_RPC, cli_state_names, cli_moves);

typedef struct call {
    mc_hnode_t hnode; /* in c->calls by req_id */
    mc_list_t dl;     /* in c->by_deadline */
    uint64_t req_id;
    uint64_t deadline; /* monotonic us */
    mc_rpc_cb_t cb;
    void *arg;
    void *recv; /* response payload destination, or NULL */
    size_t recv_room;
    const struct iovec *riov; /* or scattered over these (recv NULL) */
    unsigned nriov;
    int has_payload; /* sent a zero-copy payload */
    struct call *next_free;
} call_t;

struct mc_rpc_client {
    mc_reactor_t *r;
    mc_rpc_client_opts_t opts;
    mc_sockaddr_t addr;
    char name[64];
    cli_state_t state;
    int fd;
    struct event *rev;
    struct event *wev;
    mc_rpc_reader_t rd; /* the input: buffer, frames, streamed payloads */
    mc_outq_t out;
    /* The response whose payload streams into its call's buffer (or is
     * discarded): its call (NULL once it timed out: discard) and status. */
    call_t *rx_call;
    mc_status_t rx_st;
    call_t *hdr_call; /* the call of the header on_header just saw */
    mc_hmap_t calls;
    mc_list_t by_deadline;
    size_t npending;
    mc_timer_t deadline_timer;
    mc_timer_t conn_timer; /* connect timeout or backoff, by state */
    uint64_t backoff_us;
    uint64_t next_req_id;
    call_t *free_calls;
    size_t call_hdr_pos;
    mc_mp_writer_t w;
    unsigned failed_connects; /* in a row; logged at WARN once per outage */
    mc_guard_t guard; /* callbacks on the stack: a destroy inside one waits (reactor/guard.h) */
    int flush_queued;
    int in_read;
    mc_reactor_hook_t stop_hook;
    int hooked;
    int has_key; /* opts.auth_key was given: key holds it */
    mc_auth_key_t key;
    uint8_t nonce[MC_AUTH_NONCE_LEN]; /* ours, this connection's */
};

static void cli_connect(mc_rpc_client_t *c);
static void cli_flush(mc_rpc_client_t *c);
static void cli_free(mc_rpc_client_t *c);
static void conn_lost(mc_rpc_client_t *c, const char *why);

/* The one writer of c->state. An illegal move is a bug: fsm.h logs it at
 * ERROR and the state stays (every caller's next step copes with that). */
static void set_state(mc_rpc_client_t *c, cli_state_t to)
{
    if (c->state != to)
        (void)MC_FSM_SET(&cli_fsm, c, state, to);
}

/* ----------------------------------------------------------- completion */

static void call_put(mc_rpc_client_t *c, call_t *k)
{
    k->next_free = c->free_calls;
    c->free_calls = k;
}

static void arm_deadline(mc_rpc_client_t *c)
{
    if (mc_list_empty(&c->by_deadline)) {
        mc_timer_stop(&c->deadline_timer);
        return;
    }
    call_t *first = MC_LIST_ENTRY(c->by_deadline.next, call_t, dl);
    uint64_t now = mc_now_us();
    mc_timer_start(&c->deadline_timer, first->deadline > now ? first->deadline - now : 0, 0);
}

/* Remove k from the pending sets, run its callback, recycle it. */
static void call_complete(mc_rpc_client_t *c, call_t *k, const mc_rpc_resp_t *resp)
{
    mc_hmap_remove(&c->calls, &k->hnode);
    mc_list_del(&k->dl);
    c->npending--;
    mc_rpc_cb_t cb = k->cb;
    void *arg = k->arg;
    call_put(c, k);
    mc_guard_enter(&c->guard);
    cb(arg, resp);
    mc_guard_exit(&c->guard);
}

/* Fail every pending call with st. Calls made by the callbacks are kept. */
static void fail_all(mc_rpc_client_t *c, mc_status_t st)
{
    mc_list_t doomed;
    mc_list_init(&doomed);
    mc_list_splice_tail(&doomed, &c->by_deadline);
    mc_list_t *pos;
    while ((pos = mc_list_pop_head(&doomed)) != NULL) {
        call_t *k = MC_LIST_ENTRY(pos, call_t, dl);
        mc_list_push_tail(&c->by_deadline, &k->dl); /* call_complete unlinks it */
        mc_rpc_resp_t resp = {.status = st};
        call_complete(c, k, &resp);
    }
    arm_deadline(c);
}

static void after_callbacks(mc_rpc_client_t *c)
{
    if (mc_guard_due(&c->guard))
        cli_free(c);
}

static void on_deadline(mc_timer_t *t, void *arg)
{
    mc_rpc_client_t *c = arg;
    (void)t;
    uint64_t now = mc_now_us();
    int payload_queued = 0;
    mc_guard_enter(&c->guard); /* hold off a destroy from inside a callback */
    while (!mc_list_empty(&c->by_deadline)) {
        call_t *k = MC_LIST_ENTRY(c->by_deadline.next, call_t, dl);
        if (k->deadline > now)
            break;
        MC_DEBUG(RPC, "%s: call %llu timed out", c->name, (unsigned long long)k->req_id);
        if (mc_rpc_reader_streaming(&c->rd) && c->rx_call == k) {
            /* its response is arriving: keep reading it, into nowhere */
            c->rx_call = NULL;
            mc_rpc_reader_discard(&c->rd);
        }
        if (k->has_payload && mc_outq_used(&c->out) > 0)
            payload_queued = 1;
        mc_rpc_resp_t resp = {.status = MC_ERR_RPC_TIMEOUT};
        call_complete(c, k, &resp);
    }
    if (payload_queued && c->state == CLI_CONNECTED)
        /* the caller may reuse the memory now: it must not be sent later */
        conn_lost(c, "a timed-out call's payload was still queued");
    mc_guard_exit(&c->guard);
    if (c->state != CLI_CLOSED)
        arm_deadline(c);
    after_callbacks(c);
}

/* ------------------------------------------------------------ connection */

static void drop_socket(mc_rpc_client_t *c)
{
    if (c->rev != NULL)
        event_free(c->rev);
    if (c->wev != NULL)
        event_free(c->wev);
    c->rev = c->wev = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->flush_queued = 0;
    mc_rpc_reader_reset(&c->rd);
    mc_outq_reset(&c->out);
    c->rx_call = NULL;
}

static void conn_lost_st(mc_rpc_client_t *c, const char *why, mc_status_t st);

/* The connection failed or died: fail the calls, wait, maybe reconnect. */
static void conn_lost(mc_rpc_client_t *c, const char *why)
{
    conn_lost_st(c, why, MC_ERR_CONN_CLOSED);
}

/* The same, failing the calls with st. */
static void conn_lost_st(mc_rpc_client_t *c, const char *why, mc_status_t st)
{
    if (c->state == CLI_CONNECTED)
        MC_WARN(RPC, "connection to %s lost: %s", c->name, why);
    else if (c->failed_connects++ == 0)
        MC_WARN(RPC, "cannot connect to %s: %s (retrying with backoff up to %llu ms)", c->name, why,
                (unsigned long long)(c->opts.backoff_max_us / 1000));
    else
        MC_DEBUG(RPC, "cannot connect to %s: %s (attempt %u)", c->name, why, c->failed_connects);
    drop_socket(c);
    set_state(c, CLI_BACKOFF);
    mc_timer_start(&c->conn_timer, c->backoff_us, 0);
    c->backoff_us *= 2;
    if (c->backoff_us > c->opts.backoff_max_us)
        c->backoff_us = c->opts.backoff_max_us;
    mc_guard_enter(&c->guard);
    fail_all(c, st);
    mc_guard_exit(&c->guard);
}

static call_t *call_find(mc_rpc_client_t *c, uint64_t req_id)
{
    mc_hnode_t *node;
    uint64_t h = mc_hash_u64(req_id);
    MC_HMAP_FOREACH_HASH(&c->calls, node, h)
    {
        call_t *k = MC_CONTAINER_OF(node, call_t, hnode);
        if (k->req_id == req_id)
            return k;
    }
    return NULL;
}

/* ------------------------------------------------- the reader's callbacks */

static int rd_open(void *owner)
{
    mc_rpc_client_t *c = owner;
    return (c->state == CLI_CONNECTED || c->state == CLI_AUTH) && !mc_guard_closing(&c->guard);
}

/* Write one frame of the handshake straight to the socket (nothing else is
 * queued ahead of it, so it goes whole). 0 or -1. */
static int send_now(mc_rpc_client_t *c, uint16_t method, uint8_t kind, unsigned field,
                    const uint8_t *bin, uint32_t len)
{
    uint8_t frame[MC_RPC_HS_FRAME_MAX];
    size_t n = mc_rpc_hs_frame(frame, method, kind, 0, field, bin, len);
    return n > 0 && write(c->fd, frame, n) == (ssize_t)n ? 0 : -1;
}

/* Connected with a key: say hello and wait for the server's proof. */
static void auth_start(mc_rpc_client_t *c)
{
    set_state(c, CLI_AUTH);
    event_del(c->wev); /* nothing may leave before the handshake */
    mc_timer_start(&c->conn_timer, c->opts.connect_timeout_us, 0);
    mc_auth_nonce(c->nonce);
    if (send_now(c, MC_RPC_AUTH_HELLO, MC_FRAME_REQUEST, MC_F_NONCE, c->nonce, MC_AUTH_NONCE_LEN) !=
        0) {
        mc_guard_enter(&c->guard);
        conn_lost(c, "cannot send the authentication hello");
        mc_guard_exit(&c->guard);
    }
}

static void auth_fail(mc_rpc_client_t *c, const char *why)
{
    MC_WARN(RPC, "authentication with %s failed: %s", c->name, why);
    conn_lost_st(c, why, MC_ERR_REJECT_HANDSHAKE);
}

/* The server's answer to our HELLO. */
static void auth_reply(mc_rpc_client_t *c, const mc_frame_t *f)
{
    char why[200];
    uint8_t mine[MC_AUTH_PROOF_LEN];
    if (mc_rpc_hs_answer(f, &c->key, c->nonce, mine, why, sizeof(why)) != MC_OK) {
        auth_fail(c, why);
        return;
    }
    if (send_now(c, MC_RPC_AUTH_PROOF, MC_FRAME_NOTIFY, MC_F_PROOF, mine, MC_AUTH_PROOF_LEN) != 0) {
        conn_lost(c, "cannot send the authentication proof");
        return;
    }
    set_state(c, CLI_CONNECTED);
    mc_timer_stop(&c->conn_timer);
    c->backoff_us = c->opts.backoff_min_us;
    MC_DEBUG(RPC, "authenticated with %s", c->name);
    c->failed_connects = 0;
}

/* Responses only; a payload streams into its call's buffer (or scatter
 * list), or is discarded when its call is gone. */
static int rd_on_header(void *owner, const mc_frame_hdr_t *h, const char **why)
{
    mc_rpc_client_t *c = owner;
    if (h->kind != MC_FRAME_RESPONSE) {
        *why = "unexpected frame kind";
        return -1;
    }
    if (c->state == CLI_AUTH) {
        if (h->method != MC_RPC_AUTH_HELLO || h->payload_len != 0 || h->body_len > 1024) {
            *why = "unexpected frame during the authentication handshake";
            return -1;
        }
        c->hdr_call = NULL;
        return 0;
    }
    call_t *k = c->hdr_call = call_find(c, h->req_id);
    return k == NULL || k->recv != NULL || k->riov != NULL;
}

static void rd_stream_begin(void *owner, const mc_frame_hdr_t *h, const uint8_t *body,
                            mc_rpc_rx_dst_t *d)
{
    mc_rpc_client_t *c = owner;
    call_t *k = c->hdr_call; /* found for this very header */
    (void)body;
    int fits = k != NULL && h->payload_len <= k->recv_room;
    MC_TRACE(RPC, "%s: response %llu: %u payload bytes %s", c->name, (unsigned long long)h->req_id,
             h->payload_len,
             k == NULL ? "discarded (no call)"
             : fits    ? "into the call's buffer"
                       : "too large");
    c->rx_call = k;
    c->rx_st = k == NULL ? MC_OK : fits ? (mc_status_t)h->status : MC_ERR_BUFFER_OVERFLOW;
    if (fits && k->riov != NULL) {
        d->dst = k->riov[0].iov_base;
        d->dst_len = k->riov[0].iov_len;
        d->iov = k->riov + 1;
        d->niov = k->nriov - 1;
    } else if (fits) {
        d->dst = k->recv;
        d->dst_len = h->payload_len;
    }
}

static void rd_on_frame(void *owner, const mc_frame_t *f, int streamed)
{
    mc_rpc_client_t *c = owner;
    if (c->state == CLI_AUTH) {
        auth_reply(c, f);
        return;
    }
    if (streamed) {
        call_t *k = c->rx_call;
        c->rx_call = NULL;
        if (k != NULL) {
            mc_rpc_resp_t resp = {.status = c->rx_st,
                                  .body = f->body,
                                  .body_len = f->hdr.body_len,
                                  .payload = c->rx_st == MC_OK ? k->recv : NULL,
                                  .payload_len = c->rx_st == MC_OK ? f->hdr.payload_len : 0};
            call_complete(c, k, &resp);
        }
        return;
    }
    call_t *k = c->hdr_call;
    if (k != NULL) {
        mc_rpc_resp_t resp = {.status = f->hdr.status,
                              .body = f->body,
                              .body_len = f->hdr.body_len,
                              .payload = f->payload,
                              .payload_len = f->hdr.payload_len};
        call_complete(c, k, &resp);
    } else {
        MC_DEBUG(RPC, "%s: response to unknown call %llu (timed out?)", c->name,
                 (unsigned long long)f->hdr.req_id);
    }
}

static const mc_rpc_reader_ops_t rd_ops = {
    .on_header = rd_on_header,
    .stream_begin = rd_stream_begin,
    .on_frame = rd_on_frame,
    .open = rd_open,
};

static void on_read_body(evutil_socket_t fd, short what, void *arg)
{
    mc_rpc_client_t *c = arg;
    const char *why = NULL;
    (void)what;

    mc_guard_enter(&c->guard);
    c->in_read = 1;
    mc_status_t st = mc_rpc_reader_read(&c->rd, fd, &why);
    if ((c->state == CLI_CONNECTED || c->state == CLI_AUTH) && !mc_guard_closing(&c->guard)) {
        switch (st) {
        case MC_OK:
            break;
        case MC_ERR_CONN_CLOSED:
            conn_lost(c, "peer closed the connection");
            break;
        case MC_ERR_PROTOCOL:
            MC_ERROR(RPC, "protocol error from %s: %s", c->name,
                     why != NULL ? why : mc_status_str(st));
            conn_lost(c, "protocol error");
            break;
        case MC_ERR_NOMEM:
            conn_lost(c, "out of memory for input");
            break;
        default:
            conn_lost(c, strerror(errno));
            break;
        }
    }
    c->in_read = 0;
    mc_guard_exit(&c->guard);
    if (c->state == CLI_CONNECTED && !mc_guard_closing(&c->guard)) {
        arm_deadline(c);
        cli_flush(c);
    }
    after_callbacks(c);
}

/* libevent entry: make the reactor current (attach mode), then run the body. */
static void on_read(evutil_socket_t fd, short what, void *arg)
{
    mc_reactor_t *saved = mc_reactor_enter(((mc_rpc_client_t *)arg)->r);
    on_read_body(fd, what, arg);
    mc_reactor_leave(saved);
}

static void cli_flush(mc_rpc_client_t *c)
{
    if (c->state != CLI_CONNECTED)
        return;
    /* This flush serves any queued activation: event_del() below would
     * cancel it, and a flag left set would stall every later call. */
    c->flush_queued = 0;
    mc_status_t st = mc_outq_flush(&c->out, c->fd);
    if (st == MC_AGAIN) {
        event_add(c->wev, NULL);
        return;
    }
    if (st != MC_OK) {
        mc_guard_enter(&c->guard);
        conn_lost(c, strerror(errno));
        mc_guard_exit(&c->guard);
        after_callbacks(c);
        return;
    }
    event_del(c->wev);
    mc_buf_shrink(&c->out.buf, 1u << 20);
}

static void on_write_body(evutil_socket_t fd, short what, void *arg)
{
    mc_rpc_client_t *c = arg;
    (void)what;
    c->flush_queued = 0;
    if (c->state == CLI_CONNECTING) {
        int err = 0;
        if (mc_net_connect_result(fd, &err) != MC_OK) {
            conn_lost(c, strerror(err));
            after_callbacks(c);
            return;
        }
        if (c->has_key) {
            auth_start(c);
            after_callbacks(c);
            return;
        }
        set_state(c, CLI_CONNECTED);
        mc_timer_stop(&c->conn_timer);
        c->backoff_us = c->opts.backoff_min_us;
        if (c->failed_connects > 0)
            MC_INFO(RPC, "connected to %s after %u failed attempt(s)", c->name, c->failed_connects);
        else
            MC_DEBUG(RPC, "connected to %s", c->name);
        c->failed_connects = 0;
    }
    cli_flush(c);
}

/* libevent entry: make the reactor current (attach mode), then run the body. */
static void on_write(evutil_socket_t fd, short what, void *arg)
{
    mc_reactor_t *saved = mc_reactor_enter(((mc_rpc_client_t *)arg)->r);
    on_write_body(fd, what, arg);
    mc_reactor_leave(saved);
}

static void on_conn_timer(mc_timer_t *t, void *arg)
{
    mc_rpc_client_t *c = arg;
    (void)t;
    if (c->state == CLI_CONNECTING) {
        conn_lost(c, "connect timed out");
        after_callbacks(c);
    } else if (c->state == CLI_AUTH) {
        auth_fail(c, "the authentication handshake timed out");
        after_callbacks(c);
    } else if (c->state == CLI_BACKOFF || c->state == CLI_IDLE) {
        if (c->npending > 0) {
            cli_connect(c);
        } else {
            set_state(c, CLI_IDLE);
        }
    }
}

static void cli_connect(mc_rpc_client_t *c)
{
    int fd = -1;
    mc_status_t st = mc_net_connect(&c->addr, &fd);
    set_state(c, CLI_CONNECTING);
    if (st != MC_OK && st != MC_INPROGRESS) {
        mc_guard_enter(&c->guard);
        conn_lost(c, strerror(errno));
        mc_guard_exit(&c->guard);
        after_callbacks(c);
        return;
    }
    struct event_base *base = mc_reactor_base(c->r);
    c->fd = fd;
    c->rev = event_new(base, fd, EV_READ | EV_PERSIST, on_read, c);
    c->wev = event_new(base, fd, EV_WRITE | EV_PERSIST, on_write, c);
    if (c->rev == NULL || c->wev == NULL || event_add(c->rev, NULL) != 0 ||
        event_add(c->wev, NULL) != 0) {
        mc_guard_enter(&c->guard);
        conn_lost(c, "cannot register socket events");
        mc_guard_exit(&c->guard);
        after_callbacks(c);
        return;
    }
    mc_timer_start(&c->conn_timer, c->opts.connect_timeout_us, 0);
    /* Completion (immediate or not) is reported by writability: on_write. */
}

/* ----------------------------------------------------------------- calls */

mc_mp_writer_t *mc_rpc_call_begin(mc_rpc_client_t *c)
{
    mc_buf_t *out = &c->out.buf;
    c->call_hdr_pos = mc_buf_used(out);
    mc_mp_writer_init(&c->w, out);
    if (mc_buf_reserve(out, MC_FRAME_HDR_LEN + 256) != MC_OK)
        c->w.err = MC_ERR_NOMEM;
    else
        mc_buf_produce(out, MC_FRAME_HDR_LEN);
    return &c->w;
}

mc_status_t mc_rpc_call_copy_body(mc_rpc_client_t *c, mc_buf_t *dst)
{
    if (c->w.err != MC_OK)
        return c->w.err;
    mc_buf_t *out = &c->out.buf;
    size_t from = c->call_hdr_pos + MC_FRAME_HDR_LEN;
    return mc_buf_append(dst, mc_buf_head(out) + from, mc_buf_used(out) - from);
}

/* Raise the count of the body map of the call being built by one (the
 * caller writes the field next). */
static mc_status_t call_add_field(mc_rpc_client_t *c)
{
    if (c->w.err != MC_OK)
        return c->w.err;
    mc_buf_t *out = &c->out.buf;
    size_t from = c->call_hdr_pos + MC_FRAME_HDR_LEN;
    if (mc_buf_used(out) <= from)
        return MC_ERR_LIMIT;
    uint8_t *p = mc_buf_head(out) + from;
    if ((p[0] & 0xf0) == 0x80 && (p[0] & 0x0f) < 15) {
        p[0]++;
    } else if (p[0] == 0xde && mc_buf_used(out) >= from + 3) {
        unsigned n = (unsigned)p[1] << 8 | p[2];
        if (n == 0xffff)
            return MC_ERR_LIMIT;
        n++;
        p[1] = (uint8_t)(n >> 8);
        p[2] = (uint8_t)n;
    } else {
        return MC_ERR_LIMIT;
    }
    return MC_OK; /* p may move when the buffer grows: not used after this */
}

mc_status_t mc_rpc_call_add_uint(mc_rpc_client_t *c, unsigned field, uint64_t value)
{
    mc_status_t st = call_add_field(c);
    if (st != MC_OK)
        return st;
    mc_mp_write_uint(&c->w, field);
    mc_mp_write_uint(&c->w, value);
    return c->w.err;
}

mc_status_t mc_rpc_call_add_bool(mc_rpc_client_t *c, unsigned field, int value)
{
    mc_status_t st = call_add_field(c);
    if (st != MC_OK)
        return st;
    mc_mp_write_uint(&c->w, field);
    mc_mp_write_bool(&c->w, value);
    return c->w.err;
}

mc_mp_writer_t *mc_rpc_call_add_field(mc_rpc_client_t *c, unsigned field)
{
    if (call_add_field(c) != MC_OK)
        return NULL;
    mc_mp_write_uint(&c->w, field);
    return c->w.err == MC_OK ? &c->w : NULL;
}

mc_status_t mc_rpc_client_retarget(mc_rpc_client_t *c, const char *host, uint16_t port)
{
    mc_sockaddr_t a;
    mc_status_t st = mc_net_resolve(host, port, &a);
    if (st != MC_OK)
        return st;
    if (c->state == CLI_CONNECTING || c->state == CLI_CONNECTED) {
        /* the old connection goes first, logged under the old name */
        mc_guard_enter(&c->guard);
        conn_lost(c, "the server moved");
        mc_guard_exit(&c->guard);
    }
    char old[sizeof(c->name)];
    memcpy(old, c->name, sizeof(old));
    c->addr = a;
    mc_net_addr_str(&c->addr, c->name, sizeof(c->name));
    MC_INFO(RPC, "client %p: %s -> %s", (void *)c, old, c->name);
    c->backoff_us = c->opts.backoff_min_us;
    c->failed_connects = 0;
    if (c->state == CLI_BACKOFF)
        mc_timer_start(&c->conn_timer, 0, 0); /* at once, to the new address */
    after_callbacks(c);
    return MC_OK;
}

mc_status_t mc_rpc_call_end(mc_rpc_client_t *c, uint16_t method, uint64_t timeout_us,
                            mc_rpc_cb_t cb, void *arg)
{
    return mc_rpc_call_end_xfer(c, method, timeout_us, NULL, 0, NULL, 0, cb, arg);
}

static mc_status_t call_end(mc_rpc_client_t *c, uint16_t method, uint64_t timeout_us,
                            const void *payload, size_t plen, void *recv, size_t recv_room,
                            const struct iovec *riov, unsigned nriov, mc_rpc_cb_t cb, void *arg);

mc_status_t mc_rpc_call_end_xfer(mc_rpc_client_t *c, uint16_t method, uint64_t timeout_us,
                                 const void *payload, size_t plen, void *recv, size_t recv_room,
                                 mc_rpc_cb_t cb, void *arg)
{
    return call_end(c, method, timeout_us, payload, plen, recv, recv_room, NULL, 0, cb, arg);
}

mc_status_t mc_rpc_call_end_scatter(mc_rpc_client_t *c, uint16_t method, uint64_t timeout_us,
                                    const struct iovec *iov, unsigned n, mc_rpc_cb_t cb, void *arg)
{
    size_t room = 0;
    for (unsigned i = 0; i < n; i++)
        room += iov[i].iov_len;
    if (n == 0 || room == 0) {
        if (c->w.err == MC_OK)
            c->out.buf.len = c->out.buf.off + c->call_hdr_pos;
        return MC_ERR_INVALID_ARGUMENT;
    }
    return call_end(c, method, timeout_us, NULL, 0, NULL, room, iov, n, cb, arg);
}

static mc_status_t call_end(mc_rpc_client_t *c, uint16_t method, uint64_t timeout_us,
                            const void *payload, size_t plen, void *recv, size_t recv_room,
                            const struct iovec *riov, unsigned nriov, mc_rpc_cb_t cb, void *arg)
{
    mc_buf_t *out = &c->out.buf;
    mc_status_t st = c->w.err;
    call_t *k = NULL;

    if (st == MC_OK && (c->state == CLI_CLOSED || mc_guard_closing(&c->guard)))
        st = MC_ERR_CANCELED;
    if (st == MC_OK) {
        k = c->free_calls;
        if (k != NULL)
            c->free_calls = k->next_free;
        else if ((k = mc_malloc(sizeof(*k))) == NULL)
            st = MC_ERR_NOMEM;
    }
    if (st == MC_OK && plen > 0 && mc_outq_add_ext(&c->out, payload, plen) != MC_OK)
        st = MC_ERR_NOMEM;
    if (st != MC_OK) {
        /* roll the frame back out of the buffer */
        if (c->w.err == MC_OK)
            out->len = out->off + c->call_hdr_pos;
        if (k != NULL)
            call_put(c, k);
        return st;
    }
    size_t body_len = mc_buf_used(out) - c->call_hdr_pos - MC_FRAME_HDR_LEN;
    mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                        .kind = MC_FRAME_REQUEST,
                        .method = method,
                        .req_id = ++c->next_req_id,
                        .body_len = (uint32_t)body_len,
                        .payload_len = (uint32_t)plen};
    mc_frame_encode_hdr(mc_buf_head(out) + c->call_hdr_pos, &h);
    k->recv = recv;
    k->recv_room = recv_room;
    k->riov = riov;
    k->nriov = nriov;
    k->has_payload = plen > 0;

    k->req_id = h.req_id;
    k->deadline = mc_now_us() + (timeout_us ? timeout_us : c->opts.call_timeout_us);
    k->cb = cb;
    k->arg = arg;
    mc_hmap_insert(&c->calls, &k->hnode, mc_hash_u64(k->req_id));
    /* Keep by_deadline sorted; with one timeout for all calls this is an
     * append. */
    mc_list_t *pos = c->by_deadline.prev;
    while (pos != &c->by_deadline && MC_LIST_ENTRY(pos, call_t, dl)->deadline > k->deadline)
        pos = pos->prev;
    mc_list_insert_between(&k->dl, pos, pos->next);
    c->npending++;
    if (c->by_deadline.next == &k->dl && !c->in_read)
        arm_deadline(c);

    switch (c->state) {
    case CLI_IDLE:
        /* Connect from the loop, not here: a connect that fails at once must
         * not run callbacks inside this call. */
        if (!mc_timer_armed(&c->conn_timer))
            mc_timer_start(&c->conn_timer, 0, 0);
        break;
    case CLI_CONNECTED:
        if (!c->flush_queued && !c->in_read) {
            c->flush_queued = 1;
            event_active(c->wev, EV_WRITE, 0);
        }
        break;
    default:
        break; /* CONNECTING/BACKOFF: sent once connected */
    }
    return MC_INPROGRESS;
}

mc_status_t mc_rpc_call(mc_rpc_client_t *c, uint16_t method, const void *body, size_t len,
                        uint64_t timeout_us, mc_rpc_cb_t cb, void *arg)
{
    mc_mp_writer_t *w = mc_rpc_call_begin(c);
    if (w->err == MC_OK && len > 0 && mc_buf_append(w->buf, body, len) != MC_OK)
        w->err = MC_ERR_NOMEM;
    return mc_rpc_call_end(c, method, timeout_us, cb, arg);
}

size_t mc_rpc_client_pending(const mc_rpc_client_t *c)
{
    return c->npending;
}

int mc_rpc_client_connected(const mc_rpc_client_t *c)
{
    return c->state == CLI_CONNECTED;
}

/* ------------------------------------------------------ create / destroy */

void mc_rpc_client_opts_init(mc_rpc_client_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->connect_timeout_us = 3000000;
    o->call_timeout_us = 5000000;
    o->backoff_min_us = 50000;
    o->backoff_max_us = 2000000;
    mc_frame_limits_init(&o->limits);
}

static void on_reactor_stop(mc_reactor_t *r, mc_reactor_hook_t *hook)
{
    mc_rpc_client_t *c = MC_CONTAINER_OF(hook, mc_rpc_client_t, stop_hook);
    (void)r;
    c->hooked = 0;
    drop_socket(c);
    mc_timer_stop(&c->conn_timer);
    set_state(c, CLI_CLOSED);
    mc_guard_enter(&c->guard);
    fail_all(c, MC_ERR_CANCELED);
    mc_guard_exit(&c->guard);
}

typedef struct {
    mc_rpc_client_t *c;
    mc_status_t st;
} init_ctx_t;

static void cli_init_on_reactor(void *arg)
{
    init_ctx_t *ic = arg;
    mc_rpc_client_t *c = ic->c;
    ic->st = mc_timer_init(&c->deadline_timer, c->r, on_deadline, c);
    if (ic->st == MC_OK)
        ic->st = mc_timer_init(&c->conn_timer, c->r, on_conn_timer, c);
    if (ic->st != MC_OK)
        return;
    c->stop_hook.fn = on_reactor_stop;
    mc_reactor_on_stop(c->r, &c->stop_hook);
    c->hooked = 1;
}

mc_status_t mc_rpc_client_create(mc_reactor_t *r, const mc_rpc_client_opts_t *o,
                                 mc_rpc_client_t **out)
{
    mc_rpc_client_t *c = MC_NEW(mc_rpc_client_t);
    if (c == NULL)
        return MC_ERR_NOMEM;
    c->r = r;
    if (o != NULL)
        c->opts = *o;
    else
        mc_rpc_client_opts_init(&c->opts);
    if (c->opts.auth_key != NULL) {
        c->key = *c->opts.auth_key;
        c->has_key = 1;
    }
    c->opts.auth_key = NULL; /* the caller's copy is not ours to keep */
    mc_rpc_client_opts_t d;
    mc_rpc_client_opts_init(&d);
    if (c->opts.connect_timeout_us == 0)
        c->opts.connect_timeout_us = d.connect_timeout_us;
    if (c->opts.call_timeout_us == 0)
        c->opts.call_timeout_us = d.call_timeout_us;
    if (c->opts.backoff_min_us == 0)
        c->opts.backoff_min_us = d.backoff_min_us;
    if (c->opts.backoff_max_us < c->opts.backoff_min_us)
        c->opts.backoff_max_us = c->opts.backoff_min_us;
    c->backoff_us = c->opts.backoff_min_us;
    c->fd = -1;
    c->state = CLI_IDLE;
    mc_rpc_reader_init(&c->rd, &rd_ops, c, &c->opts.limits);
    mc_outq_init(&c->out);
    c->opts.host = NULL; /* not kept: resolved below */
    mc_list_init(&c->by_deadline);

    mc_status_t st = mc_net_resolve(o ? o->host : d.host, c->opts.port, &c->addr);
    if (st != MC_OK)
        goto err_free;
    mc_net_addr_str(&c->addr, c->name, sizeof(c->name));
    st = mc_hmap_init(&c->calls, 64);
    if (st != MC_OK)
        goto err_free;
    init_ctx_t ic = {.c = c, .st = MC_ERR_CANCELED};
    mc_rpc_run_on(r, cli_init_on_reactor, &ic);
    if (ic.st != MC_OK) {
        st = ic.st;
        goto err_timers;
    }
    *out = c;
    return MC_OK;

err_timers:
    mc_timer_fini(&c->deadline_timer);
    mc_timer_fini(&c->conn_timer);
    mc_hmap_fini(&c->calls);
err_free:
    mc_free(c);
    return st;
}

static void cli_free(mc_rpc_client_t *c)
{
    drop_socket(c);
    mc_timer_fini(&c->deadline_timer);
    mc_timer_fini(&c->conn_timer);
    if (c->hooked)
        mc_reactor_on_stop_cancel(c->r, &c->stop_hook);
    mc_hmap_fini(&c->calls);
    call_t *k = c->free_calls;
    while (k != NULL) {
        call_t *next = k->next_free;
        mc_free(k);
        k = next;
    }
    mc_rpc_reader_fini(&c->rd);
    mc_outq_fini(&c->out);
    mc_free(c);
}

static void cli_destroy_on_reactor(void *arg)
{
    mc_rpc_client_t *c = arg;
    if (c->state != CLI_CLOSED)
        set_state(c, CLI_CLOSED);
    mc_guard_enter(&c->guard);
    fail_all(c, MC_ERR_CANCELED);
    mc_guard_exit(&c->guard);
    if (mc_guard_close(&c->guard)) /* else freed when the outer callback returns */
        cli_free(c);
}

void mc_rpc_client_destroy(mc_rpc_client_t *c)
{
    if (c == NULL)
        return;
    mc_rpc_run_on(c->r, cli_destroy_on_reactor, c);
}

/* ------------------------------------------------------------ sync calls */

typedef struct sync_call {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    mc_status_t st;
    mc_buf_t *resp_body;
    mc_rpc_client_t *c;
    uint16_t method;
    const void *body;
    size_t len;
    uint64_t timeout_us;
} sync_call_t;

static void sync_finish(sync_call_t *sc, mc_status_t st)
{
    pthread_mutex_lock(&sc->mu);
    sc->st = st;
    sc->done = 1;
    pthread_cond_signal(&sc->cv);
    pthread_mutex_unlock(&sc->mu);
}

static void sync_cb(void *arg, const mc_rpc_resp_t *resp)
{
    sync_call_t *sc = arg;
    mc_status_t st = resp->status;
    if (resp->body_len > 0 && sc->resp_body != NULL &&
        mc_buf_append(sc->resp_body, resp->body, resp->body_len) != MC_OK)
        st = MC_ERR_NOMEM;
    sync_finish(sc, st);
}

static void sync_start(mc_reactor_t *r, void *arg, mc_status_t st)
{
    sync_call_t *sc = arg;
    (void)r;
    if (st == MC_OK)
        st = mc_rpc_call(sc->c, sc->method, sc->body, sc->len, sc->timeout_us, sync_cb, sc);
    if (st != MC_INPROGRESS)
        sync_finish(sc, st);
}

mc_status_t mc_rpc_call_sync(mc_rpc_client_t *c, uint16_t method, const void *body, size_t len,
                             uint64_t timeout_us, mc_buf_t *resp_body)
{
    sync_call_t sc = {.c = c,
                      .method = method,
                      .body = body,
                      .len = len,
                      .timeout_us = timeout_us,
                      .resp_body = resp_body};
    pthread_mutex_init(&sc.mu, NULL);
    pthread_cond_init(&sc.cv, NULL);
    mc_status_t st = mc_reactor_call(c->r, sync_start, &sc);
    if (st == MC_OK) {
        pthread_mutex_lock(&sc.mu);
        while (!sc.done)
            pthread_cond_wait(&sc.cv, &sc.mu);
        pthread_mutex_unlock(&sc.mu);
        st = sc.st;
    }
    pthread_cond_destroy(&sc.cv);
    pthread_mutex_destroy(&sc.mu);
    return st;
}
