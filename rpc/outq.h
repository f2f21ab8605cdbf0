/*
 * outq.h - a connection's output: framing bytes in a buffer, interleaved with
 * zero-copy references to external memory (payloads sent straight from
 * registered buffers). Flushed with writev(2).
 *
 * Positions are counted in framing bytes since the queue was created: an
 * external chunk added when `n` framing bytes had been appended is sent after
 * exactly those n bytes. External memory is borrowed: it must stay valid
 * until mc_outq_used() no longer covers it (sent) or mc_outq_reset().
 */
#ifndef MC_RPC_OUTQ_H
#define MC_RPC_OUTQ_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "util/buf.h"

typedef struct mc_outq_ext {
    uint64_t at; /* framing offset this chunk follows */
    const uint8_t *p;
    size_t len;
} mc_outq_ext_t;

typedef struct mc_outq {
    mc_buf_t buf;       /* framing bytes not yet sent */
    uint64_t buf_base;  /* framing bytes sent so far (the offset of buf's head) */
    mc_outq_ext_t *ext; /* ring of external chunks */
    size_t ext_cap, ext_head, ext_n;
    size_t ext_sent;  /* bytes of the head chunk already sent */
    size_t ext_bytes; /* unsent external bytes */
} mc_outq_t;

void mc_outq_init(mc_outq_t *q);
void mc_outq_fini(mc_outq_t *q);

/* Drop everything queued (the connection is gone). */
void mc_outq_reset(mc_outq_t *q);

/* Room for n more external chunks, so that the next n adds cannot fail. */
mc_status_t mc_outq_reserve_ext(mc_outq_t *q, size_t n);

/* Queue len bytes at p to follow the framing bytes appended so far. */
mc_status_t mc_outq_add_ext(mc_outq_t *q, const void *p, size_t len);

static inline size_t mc_outq_used(const mc_outq_t *q)
{
    return mc_buf_used(&q->buf) + q->ext_bytes;
}

/* Write as much as the socket takes. MC_OK (all sent), MC_AGAIN (socket
 * full: wait for writability), MC_ERR_SOCKET (errno is set). */
mc_status_t mc_outq_flush(mc_outq_t *q, int fd);

#endif /* MC_RPC_OUTQ_H */
