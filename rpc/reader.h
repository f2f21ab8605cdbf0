/*
 * reader.h - the input side of an RPC connection, one for the client, the
 * server and the blocking connection (bconn.c): the input buffer, frame
 * decoding (rpc/frame.h), payloads streamed straight into their destination
 * (or discarded) instead of through the buffer, and the read budget per
 * readiness event. The owner (client.c, server.c, bconn.c) says what frames
 * mean through mc_rpc_reader_ops_t.
 *
 * Threads: the owner's thread only (a reactor's; bconn's caller).
 * Re-entrancy: the callbacks may close the owner (ops->open then says 0):
 * the reader checks after every callback and touches nothing more, its
 * buffer included, until the owner calls mc_rpc_reader_reset/fini. Nothing
 * here allocates but the input buffer.
 */
#ifndef MC_RPC_READER_H
#define MC_RPC_READER_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "rpc/frame.h"
#include "util/buf.h"

struct iovec;

/* Where a streamed payload goes: dst (dst_len bytes), then the pieces of
 * iov[0..niov) in order; dst NULL: read it and throw it away. */
typedef struct mc_rpc_rx_dst {
    uint8_t *dst;
    uint64_t dst_len;
    const struct iovec *iov;
    unsigned niov;
} mc_rpc_rx_dst_t;

typedef struct mc_rpc_reader_ops {
    /* A frame's header was decoded (its body and payload may not be in
     * yet; this runs again each time the reader retries the frame).
     * Returns 1: stream its payload (payload_len > 0; stream_begin chooses
     * where); 0: buffer the frame whole, then on_frame; -1 with *why set:
     * a protocol error (the reader returns MC_ERR_PROTOCOL). */
    int (*on_header)(void *owner, const mc_frame_hdr_t *h, const char **why);
    /* A streamed frame's header and body are in, the body validated: set
     * *d (zeroed on entry: discard the payload). May close the owner. */
    void (*stream_begin)(void *owner, const mc_frame_hdr_t *h, const uint8_t *body,
                         mc_rpc_rx_dst_t *d);
    /* A frame is complete. Buffered: f->payload points at it. Streamed
     * (streamed = 1): f->payload is NULL, the bytes went where stream_begin
     * said. f's bytes stay valid during the call. May close the owner. */
    void (*on_frame)(void *owner, const mc_frame_t *f, int streamed);
    /* 0 once the owner closed or is closing: stop, touch nothing. */
    int (*open)(void *owner);
} mc_rpc_reader_ops_t;

typedef struct mc_rpc_reader {
    const mc_rpc_reader_ops_t *ops;
    void *owner;
    const mc_frame_limits_t *limits;
    mc_buf_t in;
    size_t need;   /* bytes the decoder wants before it can progress */
    size_t max_in; /* the buffer never holds more (0: as frames allow; set by the owner) */
    int hdr_read;  /* the last payload streamed (>= MC_RPC_STREAM_MIN): read small */
    /* A frame whose payload streams: its header and body stay at the head
     * of `in` until it completes. */
    struct {
        int active;
        mc_rpc_rx_dst_t d; /* the remaining destination */
        uint64_t left;     /* payload bytes still to read */
        size_t hb;         /* bytes consumed at the end: header + body (+ the
                              payload when it was buffered whole) */
        mc_frame_hdr_t hdr;
    } rx;
} mc_rpc_reader_t;

/* Payloads from this size are worth a read(2) of their own: after one, the
 * next read asks for at most MC_RPC_HDR_READ bytes (a header and a small
 * body), so that the next payload, likely as large, lands straight in its
 * destination instead of being read into the buffer and copied (a syscall
 * costs less than copying this much). */
#define MC_RPC_STREAM_MIN (16 * 1024)
#define MC_RPC_HDR_READ 256
#define MC_RPC_READ_CHUNK (64 * 1024) /* bytes asked of read(2) at least */
#define MC_RPC_READ_BUDGET (4u << 20) /* bytes read per readiness event, for fairness */

/* limits is borrowed for the reader's life. */
void mc_rpc_reader_init(mc_rpc_reader_t *r, const mc_rpc_reader_ops_t *ops, void *owner,
                        const mc_frame_limits_t *limits);
/* The connection went: forget buffered input and any streaming frame. */
void mc_rpc_reader_reset(mc_rpc_reader_t *r);
void mc_rpc_reader_fini(mc_rpc_reader_t *r);

/* fd is readable: read (up to MC_RPC_READ_BUDGET bytes) and deliver every
 * complete frame. MC_OK: drained, out of budget, or the owner closed;
 * MC_ERR_CONN_CLOSED: the peer closed; MC_ERR_SOCKET: read(2) failed (errno
 * says why); MC_ERR_PROTOCOL: *why says what the peer broke; MC_ERR_LIMIT:
 * the input would exceed max_in (*why); MC_ERR_NOMEM: no room for the input. After an error the
 * owner closes the connection. */
mc_status_t mc_rpc_reader_read(mc_rpc_reader_t *r, int fd, const char **why);

/* Deliver the frames already buffered (after the owner resumed reading).
 * MC_OK or MC_ERR_PROTOCOL with *why. */
mc_status_t mc_rpc_reader_process(mc_rpc_reader_t *r, const char **why);

/* 1 while a frame's payload streams. */
static inline int mc_rpc_reader_streaming(const mc_rpc_reader_t *r)
{
    return r->rx.active;
}

/* The streaming frame's destination is no longer the owner's (its call
 * timed out): read the rest of the payload into nowhere. */
void mc_rpc_reader_discard(mc_rpc_reader_t *r);

#endif /* MC_RPC_READER_H */
