/*
 * rpc.h - msgpack-framed RPC over TCP, on reactors.
 *
 * Server: listens on every reactor it is given, reads frames (rpc/frame.h),
 * and dispatches requests by method id to handlers. A handler may reply at
 * once or later (asynchronously), always on the connection's reactor thread.
 * Frames that break the protocol or the limits close that one connection,
 * with a logged reason; the server keeps serving the others. Resources are
 * bounded (opts: connections, input buffers, the time to a first frame), and
 * running out of file descriptors pauses accepting with a backoff instead of
 * spinning.
 *
 * Client: one connection to one endpoint, owned by one reactor. Calls are
 * pipelined (many in flight), matched to responses by request id, and each has
 * a timeout. The connection is opened on first use and re-opened with
 * exponential backoff after it fails. When the connection dies, every call in
 * flight or queued on it completes with MC_ERR_CONN_CLOSED.
 *
 * Async contract (docs/ARCHITECTURE.md §3): a call either returns an error (its callback
 * never runs) or MC_INPROGRESS (its callback runs exactly once, never inside
 * the call, on the client's reactor thread). Destroying a client completes
 * every pending callback with MC_ERR_CANCELED. Callbacks may issue new calls
 * and may destroy the client (deferred until the callback returns).
 *
 * Threads: everything named *_begin/_end, mc_rpc_call and mc_rpc_reply* must
 * run on the owning reactor's thread. create/destroy/start may run on any
 * thread (they hop to the reactor and wait), but for an attached reactor they
 * must run on the thread that runs the host's event_base. mc_rpc_call_sync()
 * is for threads that are not reactor threads (tools, tests, sync APIs).
 */
#ifndef MC_RPC_RPC_H
#define MC_RPC_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "reactor/reactor.h"
#include "rpc/frame.h"
#include "rpc/msgpack.h"
#include "util/auth.h"
#include "util/buf.h"

struct iovec;

typedef struct mc_rpc_server mc_rpc_server_t;
typedef struct mc_rpc_client mc_rpc_client_t;
typedef struct mc_rpc_req mc_rpc_req_t;

/* ---------------------------------------------------------------- server */

typedef struct mc_rpc_server_opts {
    const char *bind_addr;    /* IPv4/IPv6 literal or host name; default "0.0.0.0" */
    uint16_t port;            /* 0 = an ephemeral port, the same on every reactor */
    int backlog;              /* default 1024 */
    mc_frame_limits_t limits; /* zero fields = defaults */
    size_t max_outbuf;        /* stop reading a connection whose unsent replies exceed
                                 this (the peer is not reading); default 64 MiB.
                                 Zero-copy reply payloads do not count. */
    /* Resource bounds (issue 13). A connection over a limit is closed with a
     * logged reason; the others go on. */
    unsigned max_conns;              /* open connections at most; more are closed at
                                        accept (default 10000) */
    size_t max_inbuf;                /* bytes one connection may hold buffered (a frame
                                        being received); default: the largest frame the
                                        limits allow. Payloads read into a sink do not count */
    size_t max_inbuf_total;          /* bytes all connections may hold; over it, the
                                        biggest holder is closed (default 256 MiB). Split
                                        evenly over the reactors, each enforcing its share */
    uint64_t first_frame_timeout_us; /* a connection that has not completed its first
                                        frame by then is closed (default 10 s) */
    /* Authentication (util/auth.h, rpc/README.md): NULL = none, and a warning
     * at start when the port listens beyond loopback. With a key, every
     * connection completes the challenge-response before any other frame is
     * processed. Copied at create. */
    const mc_auth_key_t *auth_key;
} mc_rpc_server_opts_t;

void mc_rpc_server_opts_init(mc_rpc_server_opts_t *o);

/*
 * A request handler. The request's body and payload are valid only until the
 * handler returns; copy what an asynchronous reply needs. The handler must
 * eventually reply (mc_rpc_reply / mc_rpc_reply_begin+end) exactly once, on
 * this reactor's thread, even for NOTIFY frames (the reply is then dropped):
 * replying releases req.
 */
typedef void (*mc_rpc_handler_t)(void *ctx, mc_rpc_req_t *req);

/* Reactors are borrowed and must outlive the server. */
mc_status_t mc_rpc_server_create(mc_reactor_t *const *reactors, unsigned n,
                                 const mc_rpc_server_opts_t *o, mc_rpc_server_t **out);

/* Register before start. MC_ERR_EXISTS if the method has a handler. */
mc_status_t mc_rpc_server_register(mc_rpc_server_t *s, uint16_t method, mc_rpc_handler_t fn,
                                   void *ctx);

/*
 * Payload sink: for methods whose requests carry a bulk payload that should
 * land straight in its final place (the TCP transport writing into
 * registered memory). Called when a request's header and body have arrived
 * and before any payload byte is stored: return MC_OK and the destination
 * (payload_len bytes, valid until the handler runs) in *dst, or an error
 * status: then the payload is read and discarded, the handler is not called
 * and the request is answered with that status. Then the handler runs with
 * mc_rpc_req_payload() pointing at the destination.
 */
typedef mc_status_t (*mc_rpc_sink_t)(void *ctx, mc_rpc_req_t *req, uint64_t payload_len,
                                     void **dst);

mc_status_t mc_rpc_server_register_sink(mc_rpc_server_t *s, uint16_t method, mc_rpc_sink_t sink,
                                        mc_rpc_handler_t fn, void *ctx);

/* Bind and listen on every reactor. MC_ERR_SOCKET (logged with the cause,
 * e.g. "address in use") if any bind fails; then nothing listens. */
mc_status_t mc_rpc_server_start(mc_rpc_server_t *s);

/* The bound port (useful with port 0). */
uint16_t mc_rpc_server_port(const mc_rpc_server_t *s);

/* Stop listening, close every connection (pending requests are dropped; their
 * late replies are discarded), free. Safe on NULL. Not from a reactor thread
 * of the server (it waits for them). */
void mc_rpc_server_destroy(mc_rpc_server_t *s);

/* Fence: every connection open now is closed, and nothing more it sends is
 * read (checked before every read(2), so even a payload being received
 * stops there); connections accepted later are not affected. For a target
 * whose peers may still have old requests in flight that must not land any
 * more (a storage node whose segment the master forgot: a write of a put the
 * master no longer knows of, delivered late by TCP, would overwrite what
 * the space holds now). Thread-safe; returns at once, the connections are
 * closed on their reactors right after. */
void mc_rpc_server_fence(mc_rpc_server_t *s);

/* Request accessors (valid until reply). */
uint16_t mc_rpc_req_method(const mc_rpc_req_t *req);
uint8_t mc_rpc_req_kind(const mc_rpc_req_t *req);
const uint8_t *mc_rpc_req_body(const mc_rpc_req_t *req, size_t *len);    /* handler only */
const uint8_t *mc_rpc_req_payload(const mc_rpc_req_t *req, size_t *len); /* handler only */
mc_reactor_t *mc_rpc_req_reactor(const mc_rpc_req_t *req);
/* "ip:port" of the peer; static per connection. */
const char *mc_rpc_req_peer(const mc_rpc_req_t *req);
/* When the request arrived (mc_now_us), for latency metrics. */
uint64_t mc_rpc_req_start_us(const mc_rpc_req_t *req);

/* Reply with a status and a prepared body (may be NULL/0). Releases req. */
void mc_rpc_reply(mc_rpc_req_t *req, mc_status_t st, const void *body, size_t len);

/* Zero-copy reply: encode the body with the returned writer (straight into the
 * connection's output buffer), then mc_rpc_reply_end(). No other reply on the
 * same connection may begin in between. If the connection already closed the
 * writer points at a scratch buffer that is discarded. */
mc_mp_writer_t *mc_rpc_reply_begin(mc_rpc_req_t *req);
void mc_rpc_reply_end(mc_rpc_req_t *req, mc_status_t st);

/* reply_end with a payload sent straight from memory (zero-copy, writev):
 * payload must stay valid until it has been written to the socket. */
void mc_rpc_reply_end_payload(mc_rpc_req_t *req, mc_status_t st, const void *payload, size_t plen);
/* The same with the payload gathered from iov[0..n) (each piece borrowed
 * as above); the total must fit the frame's 32-bit payload length. */
void mc_rpc_reply_end_payloadv(mc_rpc_req_t *req, mc_status_t st, const struct iovec *iov,
                               size_t n);

/* Counters (approximate when read from another thread). */
typedef struct mc_rpc_server_stats {
    uint64_t conns_accepted;
    uint64_t conns_closed_protocol; /* closed for a protocol error */
    uint64_t requests;
    uint64_t unknown_method;
    uint64_t conns_open;          /* now */
    uint64_t conns_refused;       /* closed at accept: max_conns, or no fd left */
    uint64_t accept_errors;       /* accept(2) failures (EMFILE, ENFILE, ...) */
    uint64_t conns_closed_inbuf;  /* closed for max_inbuf / max_inbuf_total */
    uint64_t conns_closed_idle;   /* closed for first_frame_timeout */
    uint64_t inbuf_bytes;         /* input buffers held now */
    uint64_t auth_ok;             /* handshakes completed */
    uint64_t auth_failed;         /* connections refused by the handshake */
    uint64_t conns_closed_fenced; /* closed by mc_rpc_server_fence */
} mc_rpc_server_stats_t;

void mc_rpc_server_stats(const mc_rpc_server_t *s, mc_rpc_server_stats_t *out);

/* ---------------------------------------------------------------- client */

typedef struct mc_rpc_client_opts {
    const char *host; /* IP literal or host name (resolved at create) */
    uint16_t port;
    uint64_t connect_timeout_us; /* default 3 s */
    uint64_t call_timeout_us;    /* default for calls given 0; default 5 s */
    uint64_t backoff_min_us;     /* first reconnect delay; default 50 ms */
    uint64_t backoff_max_us;     /* cap; default 2 s */
    mc_frame_limits_t limits;
    /* Authentication: NULL = none. With a key, each connection proves the
     * server holds it, then proves we do, before a call is sent; a failed
     * handshake fails the calls with MC_ERR_REJECT_HANDSHAKE. Copied at create. */
    const mc_auth_key_t *auth_key;
} mc_rpc_client_opts_t;

void mc_rpc_client_opts_init(mc_rpc_client_opts_t *o);

/* What a callback receives. body/payload point into the client's buffers and
 * are valid only during the callback. status is a transport status
 * (MC_ERR_RPC_TIMEOUT, MC_ERR_CONN_CLOSED, MC_ERR_CANCELED) or the status the
 * server put in the response. body is set only when a response arrived. */
typedef struct mc_rpc_resp {
    mc_status_t status;
    const uint8_t *body;
    size_t body_len;
    const uint8_t *payload;
    size_t payload_len;
} mc_rpc_resp_t;

typedef void (*mc_rpc_cb_t)(void *arg, const mc_rpc_resp_t *resp);

mc_status_t mc_rpc_client_create(mc_reactor_t *r, const mc_rpc_client_opts_t *o,
                                 mc_rpc_client_t **out);

/* Complete pending calls with MC_ERR_CANCELED and free. Safe on NULL. From
 * inside one of this client's callbacks, the free is deferred until it
 * returns. */
void mc_rpc_client_destroy(mc_rpc_client_t *c);

/* Zero-copy call: encode the body with the returned writer, then call end.
 * end returns MC_INPROGRESS (cb runs exactly once) or an error (cb never runs;
 * e.g. MC_ERR_NOMEM, MC_ERR_LIMIT). timeout_us 0 = the client's default. */
mc_mp_writer_t *mc_rpc_call_begin(mc_rpc_client_t *c);
mc_status_t mc_rpc_call_end(mc_rpc_client_t *c, uint16_t method, uint64_t timeout_us,
                            mc_rpc_cb_t cb, void *arg);

/* call_end with bulk data both ways (the TCP transport):
 *  - payload/plen: sent after the body straight from memory (writev, no
 *    copy); it must stay valid until the callback runs. If the call times out
 *    while its payload is still queued, the connection is dropped so the
 *    memory is never read after the callback.
 *  - recv/recv_room: a response payload is read straight into recv (never
 *    after the callback ran); one larger than recv_room fails the call with
 *    MC_ERR_BUFFER_OVERFLOW. resp->payload then points at recv. */
mc_status_t mc_rpc_call_end_xfer(mc_rpc_client_t *c, uint16_t method, uint64_t timeout_us,
                                 const void *payload, size_t plen, void *recv, size_t recv_room,
                                 mc_rpc_cb_t cb, void *arg);

/* call_end whose response payload is scattered over iov[0..n) in order (the
 * TCP transport's vectored reads): the array and the memory stay borrowed
 * until the callback runs; a payload larger than their sum fails the call
 * with MC_ERR_BUFFER_OVERFLOW. resp->payload is then NULL and
 * resp->payload_len the bytes received. MC_ERR_INVALID_ARGUMENT (frame
 * dropped) for no room at all. */
mc_status_t mc_rpc_call_end_scatter(mc_rpc_client_t *c, uint16_t method, uint64_t timeout_us,
                                    const struct iovec *iov, unsigned n, mc_rpc_cb_t cb, void *arg);

/* The same with a prepared body. */
mc_status_t mc_rpc_call(mc_rpc_client_t *c, uint16_t method, const void *body, size_t len,
                        uint64_t timeout_us, mc_rpc_cb_t cb, void *arg);

/* Blocking call from a thread that is not the client's reactor thread. The
 * response body is copied into *resp_body (appended; caller owns the buffer).
 * Returns the call's status. */
mc_status_t mc_rpc_call_sync(mc_rpc_client_t *c, uint16_t method, const void *body, size_t len,
                             uint64_t timeout_us, mc_buf_t *resp_body);

/* Copy the body written so far for the call being built (between
 * mc_rpc_call_begin and its end) into dst (appended), e.g. to send it again
 * elsewhere later. MC_OK, MC_ERR_NOMEM, or the writer's error. Reactor thread. */
mc_status_t mc_rpc_call_copy_body(mc_rpc_client_t *c, mc_buf_t *dst);

/* Add the field `field` = value to the body map of the call being built
 * (bodies are maps, rpc/README.md): its header count is raised in place.
 * MC_OK; MC_ERR_LIMIT (a 15-field fixmap, or no map); the writer's error.
 * Reactor thread. */
mc_status_t mc_rpc_call_add_uint(mc_rpc_client_t *c, unsigned field, uint64_t value);
/* The same with a boolean value. */
mc_status_t mc_rpc_call_add_bool(mc_rpc_client_t *c, unsigned field, int value);
/* The same with the value left to the caller (any msgpack value: a uuid,
 * an array): the call's writer to write it with, or NULL (no room, or the
 * writer's error). */
mc_mp_writer_t *mc_rpc_call_add_field(mc_rpc_client_t *c, unsigned field);

/* Point the client at another server (a new leader). A connection to the old
 * one is closed: its calls complete with MC_ERR_CONN_CLOSED; later calls go
 * to the new address. MC_OK, or MC_ERR_DNS / MC_ERR_INVALID_PARAMS for an
 * address that does not resolve (the client is unchanged). Reactor thread;
 * not from inside one of this client's callbacks. */
mc_status_t mc_rpc_client_retarget(mc_rpc_client_t *c, const char *host, uint16_t port);

/* Calls sent or queued and not yet completed. Reactor thread. */
size_t mc_rpc_client_pending(const mc_rpc_client_t *c);

/* 1 when connected. Reactor thread. */
int mc_rpc_client_connected(const mc_rpc_client_t *c);

/* Run fn(arg) on r's thread and wait for it (directly when already there, or
 * when r is attached: then the caller must be the host loop's thread). */
void mc_rpc_run_on(mc_reactor_t *r, void (*fn)(void *arg), void *arg);

#endif /* MC_RPC_RPC_H */
