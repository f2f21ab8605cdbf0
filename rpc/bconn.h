/*
 * bconn.h - a blocking RPC connection owned by one thread: one call at a
 * time, sent and answered on the caller's own thread, with no reactor in
 * between. For worker threads that call a server on their hot path and
 * would otherwise hand every call to a reactor and wait for it to hand the
 * answer back (the store service's workers calling the master: two thread
 * switches per call).
 *
 * The wire is the same as rpc.h's client: frames (rpc/frame.h), msgpack
 * bodies, the authentication handshake when a key is given (rpc/README.md).
 * The connection is opened on the first call and again after it broke; a
 * call that times out closes it (its answer, arriving late, must not be
 * taken for the next call's). Before each call the socket is polled: a
 * connection the server closed meanwhile (a restart) is reopened instead of
 * failing the call.
 *
 * Statuses of a call are those of rpc.h's client: MC_ERR_CONN_CLOSED (no
 * connection, or it broke before the answer), MC_ERR_RPC_TIMEOUT,
 * MC_ERR_REJECT_HANDSHAKE, MC_ERR_PROTOCOL (a malformed answer: the
 * connection is closed), MC_ERR_DNS, or the status the server answered.
 *
 * Threads: a connection belongs to the thread that calls it; nothing is
 * shared, nothing is locked.
 */
#ifndef MC_RPC_BCONN_H
#define MC_RPC_BCONN_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "rpc/reader.h"
#include "util/auth.h"
#include "util/buf.h"

typedef struct mc_rpc_bconn {
    int fd; /* -1: not connected */
    char host[256];
    uint16_t port;
    int has_key;
    mc_auth_key_t key;
    uint64_t next_id;
    mc_frame_limits_t limits; /* rd's */
    mc_rpc_reader_t rd;       /* the answers' reader (rpc/reader.h), as the client's */
    /* the frame a wait is for, filled by rd's callbacks */
    struct {
        int done;  /* it came: st says what it means */
        int wrong; /* another frame came in its place */
        int extra; /* a frame came after it */
        mc_status_t st;
        uint64_t id;                     /* a call's req_id; 0: the handshake's answer */
        mc_buf_t *resp;                  /* a call's answer body goes there (may be NULL) */
        const uint8_t *nonce;            /* the handshake: the nonce of our hello */
        uint8_t mine[MC_AUTH_PROOF_LEN]; /* the handshake: our proof */
        char why[200];                   /* what went wrong (logged by the waiter) */
    } w;
} mc_rpc_bconn_t;

/* A connection to nobody yet (mc_rpc_bconn_target names the server). key:
 * NULL = no authentication; copied. *c stays where it is until
 * mc_rpc_bconn_fini (its reader points at it). */
void mc_rpc_bconn_init(mc_rpc_bconn_t *c, const mc_auth_key_t *key);

/* The server to call: when it differs from the current one, the connection
 * (if any) is closed and the next call connects to the new one. */
void mc_rpc_bconn_target(mc_rpc_bconn_t *c, const char *host, uint16_t port);

/* Call method with body[0..len) and wait at most timeout_us (connecting
 * included). The answer's body is appended to *resp (may be NULL). The
 * status (see above). */
mc_status_t mc_rpc_bconn_call(mc_rpc_bconn_t *c, uint16_t method, const void *body, size_t len,
                              uint64_t timeout_us, mc_buf_t *resp);

/* Close the connection (the next call opens it again). */
void mc_rpc_bconn_close(mc_rpc_bconn_t *c);

/* Close and free what it holds. */
void mc_rpc_bconn_fini(mc_rpc_bconn_t *c);

#endif /* MC_RPC_BCONN_H */
