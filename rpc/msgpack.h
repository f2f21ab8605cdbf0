/*
 * msgpack.h - minimal msgpack writer and bounded reader for frame bodies.
 *
 * Writer: appends to an mc_buf_t. Errors (out of memory) are sticky in
 * w->err; check once at the end.
 *
 * Reader: a cursor over a body that mc_mp_validate() (or mc_frame_decode())
 * has accepted. Type mismatches and truncation set a sticky r->err =
 * MC_ERR_PROTOCOL; after that every read returns zero values. Strings and
 * bins are returned as pointers into the body (not NUL-terminated).
 *
 * Typical request decoding:
 *     mc_mp_reader_t r; mc_mp_reader_init(&r, body, len);
 *     uint32_t n = mc_mp_read_map(&r);
 *     for (i < n) switch (mc_mp_read_uint(&r)) {
 *         case F_KEY: key = mc_mp_read_str(&r, &klen); break;
 *         default: mc_mp_skip(&r);   // unknown field
 *     }
 *     if (r.err) -> MC_ERR_INVALID_PARAMS to the caller
 */
#ifndef MC_RPC_MSGPACK_H
#define MC_RPC_MSGPACK_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "util/buf.h"

struct mc_frame_limits;

typedef struct mc_mp_writer {
    mc_buf_t *buf;
    mc_status_t err;
} mc_mp_writer_t;

static inline void mc_mp_writer_init(mc_mp_writer_t *w, mc_buf_t *buf)
{
    w->buf = buf;
    w->err = MC_OK;
}

void mc_mp_write_nil(mc_mp_writer_t *w);
void mc_mp_write_bool(mc_mp_writer_t *w, int v);
void mc_mp_write_uint(mc_mp_writer_t *w, uint64_t v);
void mc_mp_write_int(mc_mp_writer_t *w, int64_t v); /* smallest encoding; non-negative as uint */
void mc_mp_write_double(mc_mp_writer_t *w, double v);
void mc_mp_write_str(mc_mp_writer_t *w, const void *s, size_t len);
void mc_mp_write_cstr(mc_mp_writer_t *w, const char *s);
void mc_mp_write_bin(mc_mp_writer_t *w, const void *p, size_t len);
void mc_mp_write_array(mc_mp_writer_t *w, uint32_t n);
void mc_mp_write_map(mc_mp_writer_t *w, uint32_t n);
/* An array whose length is known only after its elements are written:
 * reserve an array32 header (returns its position in the buffer), write the
 * elements, then patch the count in (a no-op once the writer failed). */
size_t mc_mp_write_array_later(mc_mp_writer_t *w);
void mc_mp_patch_array(mc_mp_writer_t *w, size_t at, uint32_t n);

typedef enum mc_mp_type {
    MC_MP_NONE = 0, /* end of input or error */
    MC_MP_NIL,
    MC_MP_BOOL,
    MC_MP_UINT,  /* positive fixint, uint8..64 */
    MC_MP_INT,   /* negative fixint, int8..64 (may hold non-negative values) */
    MC_MP_FLOAT, /* float32 or float64 */
    MC_MP_STR,
    MC_MP_BIN,
    MC_MP_ARRAY,
    MC_MP_MAP,
    MC_MP_EXT,
} mc_mp_type_t;

typedef struct mc_mp_reader {
    const uint8_t *p;
    const uint8_t *end;
    mc_status_t err;
} mc_mp_reader_t;

static inline void mc_mp_reader_init(mc_mp_reader_t *r, const void *data, size_t len)
{
    r->p = (const uint8_t *)data;
    r->end = len ? r->p + len : r->p; /* NULL + 0 is undefined */
    r->err = MC_OK;
}

static inline int mc_mp_at_end(const mc_mp_reader_t *r)
{
    return r->p >= r->end;
}

mc_mp_type_t mc_mp_peek(const mc_mp_reader_t *r);
int mc_mp_read_nil(mc_mp_reader_t *r); /* 1 if a nil was consumed */
int mc_mp_read_bool(mc_mp_reader_t *r);
uint64_t mc_mp_read_uint(mc_mp_reader_t *r); /* accepts non-negative ints too */
int64_t mc_mp_read_int(mc_mp_reader_t *r);   /* accepts uints <= INT64_MAX */
double mc_mp_read_double(mc_mp_reader_t *r); /* accepts float32/64 and integers */
const char *mc_mp_read_str(mc_mp_reader_t *r, uint32_t *len);
const void *mc_mp_read_bin(mc_mp_reader_t *r, uint32_t *len); /* accepts str too */
uint32_t mc_mp_read_array(mc_mp_reader_t *r);
uint32_t mc_mp_read_map(mc_mp_reader_t *r);
/* Skip one complete value of any type (iteratively; bounded by the input). */
void mc_mp_skip(mc_mp_reader_t *r);

/*
 * Check that data[0..len) is exactly one msgpack map whose keys are unsigned
 * integers, every nested value well formed, strings/bins/arrays/maps within
 * the limits and nesting at most max_depth. An empty body (len 0) is valid.
 * MC_OK or MC_ERR_PROTOCOL with *reason (static string).
 */
mc_status_t mc_mp_validate(const uint8_t *data, size_t len, const struct mc_frame_limits *lim,
                           const char **reason);

#endif /* MC_RPC_MSGPACK_H */
