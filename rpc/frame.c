/* frame.c - the 32-byte frame header and the resumable frame decoder (see frame.h).
 *
 * Pure functions: no I/O, no globals, no allocation. Header integers are read
 * and written byte by byte, so neither host endianness nor alignment of the
 * caller's buffer matters.
 */
#include "rpc/frame.h"

#include <stdint.h>

#include "rpc/msgpack.h"

#define DEFAULT_MAX_BODY (64u << 20)
#define DEFAULT_MAX_PAYLOAD (64u << 20)
#define DEFAULT_MAX_STR (16u << 20)
#define DEFAULT_MAX_ELEMS (1u << 20)
#define DEFAULT_MAX_DEPTH 16u

static inline uint16_t ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static inline uint32_t ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t ld64(const uint8_t *p)
{
    return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static inline void st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void st32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void st64(uint8_t *p, uint64_t v)
{
    st32(p, (uint32_t)v);
    st32(p + 4, (uint32_t)(v >> 32));
}

/* Two's complement bits to int32_t without implementation-defined conversion. */
static inline int32_t to_i32(uint32_t u)
{
    return u <= INT32_MAX ? (int32_t)u : -(int32_t)(UINT32_MAX - u) - 1;
}

void mc_frame_limits_init(mc_frame_limits_t *l)
{
    l->max_body = DEFAULT_MAX_BODY;
    l->max_payload = DEFAULT_MAX_PAYLOAD;
    l->max_str = DEFAULT_MAX_STR;
    l->max_elems = DEFAULT_MAX_ELEMS;
    l->max_depth = DEFAULT_MAX_DEPTH;
}

/* Copy of *in (NULL = all defaults) with zero fields replaced by defaults. */
static void limits_resolve(const mc_frame_limits_t *in, mc_frame_limits_t *out)
{
    mc_frame_limits_init(out);
    if (in == NULL)
        return;
    if (in->max_body)
        out->max_body = in->max_body;
    if (in->max_payload)
        out->max_payload = in->max_payload;
    if (in->max_str)
        out->max_str = in->max_str;
    if (in->max_elems)
        out->max_elems = in->max_elems;
    if (in->max_depth)
        out->max_depth = in->max_depth;
}

void mc_frame_encode_hdr(uint8_t *out, const mc_frame_hdr_t *h)
{
    out[0] = MC_FRAME_MAGIC0;
    out[1] = MC_FRAME_MAGIC1;
    /* Version 0 is never valid on the wire; a zero-initialised header means
     * "the current version", so callers need not set it. */
    out[2] = h->version ? h->version : MC_FRAME_VERSION;
    out[3] = h->kind;
    st16(out + 4, h->method);
    st16(out + 6, h->flags);
    st64(out + 8, h->req_id);
    st32(out + 16, (uint32_t)h->status); /* int -> unsigned: defined, modulo 2^32 */
    st32(out + 20, h->body_len);
    st32(out + 24, h->payload_len);
    st32(out + 28, 0);
}

/* Parse and check a complete header against resolved limits. Writes *h even
 * on error (callers copy it out only on success). */
static mc_status_t hdr_check(const uint8_t *buf, const mc_frame_limits_t *l, mc_frame_hdr_t *h,
                             const char **reason)
{
    const char *why;

    h->version = buf[2];
    h->kind = buf[3];
    h->method = ld16(buf + 4);
    h->flags = ld16(buf + 6);
    h->req_id = ld64(buf + 8);
    h->status = to_i32(ld32(buf + 16));
    h->body_len = ld32(buf + 20);
    h->payload_len = ld32(buf + 24);

    if (buf[0] != MC_FRAME_MAGIC0 || buf[1] != MC_FRAME_MAGIC1)
        why = "bad magic";
    else if (h->version != MC_FRAME_VERSION)
        why = "unsupported version";
    else if (h->kind < 1 || h->kind > MC_FRAME_KIND_MAX)
        why = "bad kind";
    else if (h->flags != 0)
        why = "reserved flags set";
    else if (ld32(buf + 28) != 0)
        why = "reserved field set";
    else if (h->body_len > l->max_body)
        why = "body too large";
    else if (h->payload_len > l->max_payload)
        why = "payload too large";
    else if ((uint64_t)h->body_len + h->payload_len > (uint64_t)(SIZE_MAX - MC_FRAME_HDR_LEN))
        why = "frame too large"; /* only reachable where size_t is 32 bits */
    else
        return MC_OK;
    if (reason != NULL)
        *reason = why;
    return MC_ERR_PROTOCOL;
}

/* Check the first bytes of an incomplete header, so that a peer speaking
 * another protocol (an HTTP request shorter than a header) is refused at once
 * instead of waiting forever for the rest of a header. */
static mc_status_t prefix_check(const uint8_t *buf, size_t len, const char **reason)
{
    const char *why = NULL;
    if (len > 0 && buf[0] != MC_FRAME_MAGIC0)
        why = "bad magic";
    else if (len > 1 && buf[1] != MC_FRAME_MAGIC1)
        why = "bad magic";
    else if (len > 2 && buf[2] != MC_FRAME_VERSION)
        why = "unsupported version";
    else if (len > 3 && (buf[3] == 0 || buf[3] > MC_FRAME_KIND_MAX))
        why = "bad kind";
    if (why == NULL)
        return MC_AGAIN;
    if (reason != NULL)
        *reason = why;
    return MC_ERR_PROTOCOL;
}

mc_status_t mc_frame_decode_hdr(const uint8_t *buf, size_t len, const mc_frame_limits_t *lim,
                                mc_frame_hdr_t *out, const char **reason)
{
    mc_frame_limits_t l;
    mc_frame_hdr_t h;

    if (len < MC_FRAME_HDR_LEN)
        return prefix_check(buf, len, reason);
    limits_resolve(lim, &l);
    mc_status_t st = hdr_check(buf, &l, &h, reason);
    if (st == MC_OK)
        *out = h;
    return st;
}

mc_status_t mc_frame_decode(const uint8_t *buf, size_t len, const mc_frame_limits_t *lim,
                            mc_frame_t *out, size_t *need, const char **reason)
{
    mc_frame_limits_t l;
    mc_frame_hdr_t h;

    if (len < MC_FRAME_HDR_LEN) {
        if (need != NULL)
            *need = MC_FRAME_HDR_LEN;
        return prefix_check(buf, len, reason);
    }
    limits_resolve(lim, &l);
    mc_status_t st = hdr_check(buf, &l, &h, reason);
    if (st != MC_OK)
        return st;
    /* hdr_check guarantees this sum fits in size_t. */
    size_t total = MC_FRAME_HDR_LEN + (size_t)h.body_len + (size_t)h.payload_len;
    if (len < total) {
        if (need != NULL)
            *need = total;
        return MC_AGAIN;
    }
    const uint8_t *body = buf + MC_FRAME_HDR_LEN;
    st = mc_mp_validate(body, h.body_len, &l, reason);
    if (st != MC_OK)
        return st;
    out->hdr = h;
    out->body = body;
    out->payload = h.payload_len ? body + h.body_len : NULL;
    out->frame_len = total;
    return MC_OK;
}
