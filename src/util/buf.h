/*
 * buf.h - growable byte buffer for connection input and output.
 *
 * Bytes [off, len) are the unread content; [len, cap) is free space to fill.
 * Writers reserve space, write into mc_buf_tail() and commit with
 * mc_buf_produce(); readers look at mc_buf_head() and mc_buf_consume().
 */
#ifndef MC_UTIL_BUF_H
#define MC_UTIL_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mooncake/status.h"

typedef struct mc_buf {
    uint8_t *data;
    size_t off; /* first unread byte */
    size_t len; /* end of content */
    size_t cap;
} mc_buf_t;

#define MC_BUF_INIT                                                                                \
    {                                                                                              \
        NULL, 0, 0, 0                                                                              \
    }

void mc_buf_fini(mc_buf_t *b);

/* Make room for at least n more bytes after len (compacting or growing). */
mc_status_t mc_buf_reserve(mc_buf_t *b, size_t n);

mc_status_t mc_buf_append(mc_buf_t *b, const void *p, size_t n);

/* Drop read bytes and release memory above keep_cap if the buffer is empty. */
void mc_buf_shrink(mc_buf_t *b, size_t keep_cap);

static inline size_t mc_buf_used(const mc_buf_t *b)
{
    return b->len - b->off;
}

static inline uint8_t *mc_buf_head(const mc_buf_t *b)
{
    return b->data + b->off;
}

static inline uint8_t *mc_buf_tail(const mc_buf_t *b)
{
    return b->data + b->len;
}

static inline size_t mc_buf_room(const mc_buf_t *b)
{
    return b->cap - b->len;
}

static inline void mc_buf_produce(mc_buf_t *b, size_t n)
{
    b->len += n;
}

static inline void mc_buf_consume(mc_buf_t *b, size_t n)
{
    b->off += n;
    if (b->off == b->len)
        b->off = b->len = 0;
}

static inline void mc_buf_reset(mc_buf_t *b)
{
    b->off = b->len = 0;
}

#endif /* MC_UTIL_BUF_H */
