/* msgpack.c - msgpack writer, bounded reader and body validator (see msgpack.h).
 *
 * Format reference: https://github.com/msgpack/msgpack/blob/master/spec.md.
 * Multi-byte msgpack integers are big-endian; they are loaded and stored byte
 * by byte so the host's endianness and the alignment of the body never matter.
 *
 * The reader is safe on any input, validated or not: every length is checked
 * against the bytes left before it is used, and failures are sticky. The
 * validator and mc_mp_skip() are loops whose every iteration consumes at least
 * one input byte or closes one container opened by an earlier byte, so both
 * are O(n) in the body size whatever the headers claim.
 */
#include "rpc/msgpack.h"

#include <string.h>

#include "rpc/frame.h"

/* The validator keeps one counter per open container on the stack; deeper
 * limits than this are clamped (frame bodies nest a few levels at most). */
#define VALIDATE_DEPTH_CAP 64

/* ---- byte helpers ------------------------------------------------------ */

static inline uint16_t be16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static inline uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t be64(const uint8_t *p)
{
    return (uint64_t)be32(p) << 32 | be32(p + 4);
}

static inline void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* Two's complement bits to int64_t without implementation-defined conversion
 * (compiles to nothing). */
static inline int64_t to_i64(uint64_t u)
{
    return u <= INT64_MAX ? (int64_t)u : -(int64_t)(UINT64_MAX - u) - 1;
}

/* Sign-extend the low `bits` bits of u (bits < 64). */
static inline int64_t sext(uint64_t u, unsigned bits)
{
    uint64_t m = (uint64_t)1 << (bits - 1);
    return to_i64((u ^ m) - m);
}

/* ---- writer -------------------------------------------------------------- */

/* Room for n bytes at the tail of the buffer, or NULL (error recorded). */
static inline uint8_t *wroom(mc_mp_writer_t *w, size_t n)
{
    mc_buf_t *b = w->buf;

    if (w->err != MC_OK)
        return NULL;
    if (b->cap - b->len < n) {
        mc_status_t st = mc_buf_reserve(b, n);
        if (st != MC_OK) {
            w->err = st;
            return NULL;
        }
    }
    return b->data + b->len;
}

static inline void wcommit(mc_mp_writer_t *w, size_t n)
{
    w->buf->len += n;
}

void mc_mp_write_nil(mc_mp_writer_t *w)
{
    uint8_t *p = wroom(w, 1);
    if (p == NULL)
        return;
    p[0] = 0xc0;
    wcommit(w, 1);
}

void mc_mp_write_bool(mc_mp_writer_t *w, int v)
{
    uint8_t *p = wroom(w, 1);
    if (p == NULL)
        return;
    p[0] = v ? 0xc3 : 0xc2;
    wcommit(w, 1);
}

void mc_mp_write_uint(mc_mp_writer_t *w, uint64_t v)
{
    uint8_t *p = wroom(w, 9);
    if (p == NULL)
        return;
    if (v <= 0x7f) {
        p[0] = (uint8_t)v;
        wcommit(w, 1);
    } else if (v <= UINT8_MAX) {
        p[0] = 0xcc;
        p[1] = (uint8_t)v;
        wcommit(w, 2);
    } else if (v <= UINT16_MAX) {
        p[0] = 0xcd;
        put16(p + 1, (uint16_t)v);
        wcommit(w, 3);
    } else if (v <= UINT32_MAX) {
        p[0] = 0xce;
        put32(p + 1, (uint32_t)v);
        wcommit(w, 5);
    } else {
        p[0] = 0xcf;
        put64(p + 1, v);
        wcommit(w, 9);
    }
}

void mc_mp_write_int(mc_mp_writer_t *w, int64_t v)
{
    if (v >= 0) {
        mc_mp_write_uint(w, (uint64_t)v);
        return;
    }
    uint8_t *p = wroom(w, 9);
    if (p == NULL)
        return;
    uint64_t u = (uint64_t)v; /* two's complement bits; conversion is modulo 2^64 */
    if (v >= -32) {
        p[0] = (uint8_t)u; /* negative fixint 0xe0..0xff */
        wcommit(w, 1);
    } else if (v >= INT8_MIN) {
        p[0] = 0xd0;
        p[1] = (uint8_t)u;
        wcommit(w, 2);
    } else if (v >= INT16_MIN) {
        p[0] = 0xd1;
        put16(p + 1, (uint16_t)u);
        wcommit(w, 3);
    } else if (v >= INT32_MIN) {
        p[0] = 0xd2;
        put32(p + 1, (uint32_t)u);
        wcommit(w, 5);
    } else {
        p[0] = 0xd3;
        put64(p + 1, u);
        wcommit(w, 9);
    }
}

/* Always float64: doubles round-trip exactly and every reader accepts it. */
void mc_mp_write_double(mc_mp_writer_t *w, double v)
{
    uint64_t u;
    uint8_t *p = wroom(w, 9);
    if (p == NULL)
        return;
    memcpy(&u, &v, sizeof(u));
    p[0] = 0xcb;
    put64(p + 1, u);
    wcommit(w, 9);
}

/* Header of a str (fix = 0xa0, b8 = 0xd9) or bin (fix = 0, b8 = 0xc4) followed
 * by the bytes, reserved in one go. */
static void write_raw(mc_mp_writer_t *w, uint8_t fix, uint8_t b8, const void *s, size_t len)
{
    size_t h;

    if (w->err != MC_OK)
        return;
    if ((uint64_t)len > UINT32_MAX) {
        w->err = MC_ERR_LIMIT; /* not representable in msgpack */
        return;
    }
    uint8_t *p = wroom(w, 5 + len);
    if (p == NULL)
        return;
    if (fix && len <= 31) {
        p[0] = (uint8_t)(fix | len);
        h = 1;
    } else if (len <= UINT8_MAX) {
        p[0] = b8;
        p[1] = (uint8_t)len;
        h = 2;
    } else if (len <= UINT16_MAX) {
        p[0] = b8 + 1;
        put16(p + 1, (uint16_t)len);
        h = 3;
    } else {
        p[0] = b8 + 2;
        put32(p + 1, (uint32_t)len);
        h = 5;
    }
    if (len > 0)
        memcpy(p + h, s, len);
    wcommit(w, h + len);
}

void mc_mp_write_str(mc_mp_writer_t *w, const void *s, size_t len)
{
    write_raw(w, 0xa0, 0xd9, s, len);
}

/* NULL is written as nil: an absent optional string. */
void mc_mp_write_cstr(mc_mp_writer_t *w, const char *s)
{
    if (s == NULL)
        mc_mp_write_nil(w);
    else
        write_raw(w, 0xa0, 0xd9, s, strlen(s));
}

void mc_mp_write_bin(mc_mp_writer_t *w, const void *p, size_t len)
{
    write_raw(w, 0, 0xc4, p, len);
}

/* Array (fix = 0x90, b16 = 0xdc) or map (fix = 0x80, b16 = 0xde) header. */
static void write_container(mc_mp_writer_t *w, uint8_t fix, uint8_t b16, uint32_t n)
{
    uint8_t *p = wroom(w, 5);
    if (p == NULL)
        return;
    if (n <= 15) {
        p[0] = (uint8_t)(fix | n);
        wcommit(w, 1);
    } else if (n <= UINT16_MAX) {
        p[0] = b16;
        put16(p + 1, (uint16_t)n);
        wcommit(w, 3);
    } else {
        p[0] = b16 + 1;
        put32(p + 1, n);
        wcommit(w, 5);
    }
}

void mc_mp_write_array(mc_mp_writer_t *w, uint32_t n)
{
    write_container(w, 0x90, 0xdc, n);
}

void mc_mp_write_map(mc_mp_writer_t *w, uint32_t n)
{
    write_container(w, 0x80, 0xde, n);
}

size_t mc_mp_write_array_later(mc_mp_writer_t *w)
{
    size_t at = mc_buf_used(w->buf);
    uint8_t *p = wroom(w, 5);
    if (p == NULL)
        return at;
    p[0] = 0xdd; /* array32: room for any count */
    put32(p + 1, 0);
    wcommit(w, 5);
    return at;
}

void mc_mp_patch_array(mc_mp_writer_t *w, size_t at, uint32_t n)
{
    if (w->err == MC_OK)
        put32(mc_buf_head(w->buf) + at + 1, n);
}

/* ---- reader -------------------------------------------------------------- */

static const uint8_t type_of_byte_c0[32] = {
    /* 0xc0 */ MC_MP_NIL,   MC_MP_NONE,  MC_MP_BOOL,  MC_MP_BOOL,
    /* 0xc4 */ MC_MP_BIN,   MC_MP_BIN,   MC_MP_BIN,   MC_MP_EXT,
    /* 0xc8 */ MC_MP_EXT,   MC_MP_EXT,   MC_MP_FLOAT, MC_MP_FLOAT,
    /* 0xcc */ MC_MP_UINT,  MC_MP_UINT,  MC_MP_UINT,  MC_MP_UINT,
    /* 0xd0 */ MC_MP_INT,   MC_MP_INT,   MC_MP_INT,   MC_MP_INT,
    /* 0xd4 */ MC_MP_EXT,   MC_MP_EXT,   MC_MP_EXT,   MC_MP_EXT,
    /* 0xd8 */ MC_MP_EXT,   MC_MP_STR,   MC_MP_STR,   MC_MP_STR,
    /* 0xdc */ MC_MP_ARRAY, MC_MP_ARRAY, MC_MP_MAP,   MC_MP_MAP,
};

static inline size_t rleft(const mc_mp_reader_t *r)
{
    return (size_t)(r->end - r->p);
}

static inline void rfail(mc_mp_reader_t *r)
{
    r->err = MC_ERR_PROTOCOL;
}

mc_mp_type_t mc_mp_peek(const mc_mp_reader_t *r)
{
    if (r->err != MC_OK || r->p >= r->end)
        return MC_MP_NONE;
    uint8_t b = *r->p;
    if (b <= 0x7f)
        return MC_MP_UINT;
    if (b <= 0x8f)
        return MC_MP_MAP;
    if (b <= 0x9f)
        return MC_MP_ARRAY;
    if (b <= 0xbf)
        return MC_MP_STR;
    if (b >= 0xe0)
        return MC_MP_INT;
    return (mc_mp_type_t)type_of_byte_c0[b - 0xc0];
}

int mc_mp_read_nil(mc_mp_reader_t *r)
{
    if (r->err != MC_OK || r->p >= r->end || *r->p != 0xc0)
        return 0;
    r->p++;
    return 1;
}

int mc_mp_read_bool(mc_mp_reader_t *r)
{
    if (r->err != MC_OK)
        return 0;
    if (r->p < r->end && (*r->p & 0xfe) == 0xc2)
        return *r->p++ & 1;
    rfail(r);
    return 0;
}

/* n (1..8) big-endian bytes. */
static inline uint64_t load_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Any integer encoding: its value's two's complement bits in *u and whether
 * it is negative. 0 on a non-integer or truncated value (nothing consumed). */
static int read_any_int(mc_mp_reader_t *r, uint64_t *u, int *neg)
{
    const uint8_t *p = r->p;
    size_t left = rleft(r);

    if (r->err != MC_OK || left == 0)
        return 0;
    uint8_t b = p[0];
    if (b <= 0x7f || b >= 0xe0) {
        *neg = b >= 0xe0;
        *u = *neg ? (uint64_t)sext(b, 8) : b;
        r->p++;
        return 1;
    }
    if (b < 0xcc || b > 0xd3)
        return 0;
    size_t n = (size_t)1 << (b & 3); /* uint8..64 0xcc..0xcf, int8..64 0xd0..0xd3 */
    if (left < 1 + n)
        return 0;
    uint64_t v = load_be(p + 1, n);
    if (b <= 0xcf) {
        *neg = 0;
        *u = v;
    } else {
        int64_t s = n == 8 ? to_i64(v) : sext(v, 8 * (unsigned)n);
        *neg = s < 0;
        *u = (uint64_t)s;
    }
    r->p += 1 + n;
    return 1;
}

uint64_t mc_mp_read_uint(mc_mp_reader_t *r)
{
    uint64_t u;
    int neg;

    /* Hot path: field ids and small numbers are positive fixints. */
    if (r->err == MC_OK && r->p < r->end && *r->p <= 0x7f)
        return *r->p++;
    const uint8_t *save = r->p;
    if (read_any_int(r, &u, &neg) && !neg)
        return u;
    r->p = save;
    rfail(r);
    return 0;
}

int64_t mc_mp_read_int(mc_mp_reader_t *r)
{
    uint64_t u;
    int neg;

    const uint8_t *save = r->p;
    if (read_any_int(r, &u, &neg) && (neg || u <= INT64_MAX))
        return to_i64(u);
    r->p = save;
    rfail(r);
    return 0;
}

double mc_mp_read_double(mc_mp_reader_t *r)
{
    uint64_t u;
    int neg;

    if (r->err != MC_OK)
        return 0;
    size_t left = rleft(r);
    if (left >= 9 && r->p[0] == 0xcb) {
        double d;
        u = be64(r->p + 1);
        memcpy(&d, &u, sizeof(d));
        r->p += 9;
        return d;
    }
    if (left >= 5 && r->p[0] == 0xca) {
        float f;
        uint32_t v = be32(r->p + 1);
        memcpy(&f, &v, sizeof(f));
        r->p += 5;
        return f;
    }
    if (read_any_int(r, &u, &neg))
        return neg ? (double)to_i64(u) : (double)u;
    rfail(r);
    return 0;
}

/* A str (fixstr, str8/16/32) or, with accept_bin, also a bin (bin8/16/32):
 * pointer to its bytes and their count; advances past it. */
static const uint8_t *read_raw(mc_mp_reader_t *r, int accept_bin, uint32_t *len)
{
    const uint8_t *p = r->p;
    size_t left = rleft(r);
    size_t h = 0;
    uint32_t n = 0;
    uint8_t b = left ? p[0] : 0xc1;

    if (r->err != MC_OK)
        goto out_zero;
    if (b >= 0xa0 && b <= 0xbf) {
        h = 1;
        n = b & 0x1f;
    } else if ((b >= 0xd9 && b <= 0xdb) || (accept_bin && b >= 0xc4 && b <= 0xc6)) {
        unsigned k = b >= 0xd9 ? b - 0xd9u : b - 0xc4u; /* 0, 1, 2: length in 1, 2, 4 bytes */
        h = 1 + ((size_t)1 << k);
        if (left < h)
            goto err;
        n = k == 0 ? p[1] : k == 1 ? be16(p + 1) : be32(p + 1);
    } else {
        goto err;
    }
    if (left - h < n)
        goto err;
    r->p = p + h + n;
    if (len != NULL)
        *len = n;
    return p + h;
err:
    rfail(r);
out_zero:
    if (len != NULL)
        *len = 0;
    return NULL;
}

const char *mc_mp_read_str(mc_mp_reader_t *r, uint32_t *len)
{
    /* Hot path: fixstr (keys, names up to 31 bytes). */
    if (r->err == MC_OK && r->p < r->end && (*r->p & 0xe0) == 0xa0) {
        uint32_t n = *r->p & 0x1f;
        if (rleft(r) - 1 >= n) {
            const char *s = (const char *)r->p + 1;
            r->p += 1 + n;
            if (len != NULL)
                *len = n;
            return s;
        }
    }
    return (const char *)read_raw(r, 0, len);
}

const void *mc_mp_read_bin(mc_mp_reader_t *r, uint32_t *len)
{
    return read_raw(r, 1, len);
}

/* Array or map header: the element count, checked against the bytes left
 * (each element takes at least one byte, so a larger count is truncated). */
static uint32_t read_container(mc_mp_reader_t *r, uint8_t fix, uint8_t b16, unsigned per_elem)
{
    const uint8_t *p = r->p;
    size_t left = rleft(r);
    size_t h;
    uint32_t n;

    if (r->err != MC_OK)
        return 0;
    if (left == 0)
        goto err;
    if ((p[0] & 0xf0) == fix) {
        h = 1;
        n = p[0] & 0x0f;
    } else if (p[0] == b16 && left >= 3) {
        h = 3;
        n = be16(p + 1);
    } else if (p[0] == b16 + 1 && left >= 5) {
        h = 5;
        n = be32(p + 1);
    } else {
        goto err;
    }
    if ((uint64_t)n * per_elem > left - h)
        goto err;
    r->p = p + h;
    return n;
err:
    rfail(r);
    return 0;
}

uint32_t mc_mp_read_array(mc_mp_reader_t *r)
{
    return read_container(r, 0x90, 0xdc, 1);
}

uint32_t mc_mp_read_map(mc_mp_reader_t *r)
{
    /* Hot path: fixmap. */
    if (r->err == MC_OK && r->p < r->end && (*r->p & 0xf0) == 0x80) {
        uint32_t n = *r->p & 0x0f;
        if (2 * n <= rleft(r) - 1) {
            r->p++;
            return n;
        }
    }
    return read_container(r, 0x80, 0xde, 2);
}

/* What value_header() found. */
enum { VH_BAD_BYTE = -2, VH_SHORT = -1, VH_SCALAR = 0, VH_ARRAY = 1, VH_MAP = 2 };

/* Layout of the values whose first byte is 0xc0..0xdf. A value is `hdr` bytes
 * of header; its length or count n is the `lenbytes`-byte big-endian field
 * after the first byte, or `fixlen` when there is no such field. Scalars are
 * followed by n bytes of data (str/bin/ext; 0 for numbers), arrays by n
 * values, maps by 2n. */
static const struct vh_row {
    int8_t kind;
    uint8_t hdr;
    uint8_t lenbytes;
    uint8_t fixlen;
} vh_rows[32] = {
    {VH_SCALAR, 1, 0, 0},   /* 0xc0 nil */
    {VH_BAD_BYTE, 0, 0, 0}, /* 0xc1 never used */
    {VH_SCALAR, 1, 0, 0},   /* 0xc2 false */
    {VH_SCALAR, 1, 0, 0},   /* 0xc3 true */
    {VH_SCALAR, 2, 1, 0},   /* 0xc4 bin8 */
    {VH_SCALAR, 3, 2, 0},   /* 0xc5 bin16 */
    {VH_SCALAR, 5, 4, 0},   /* 0xc6 bin32 */
    {VH_SCALAR, 3, 1, 0},   /* 0xc7 ext8: len, type */
    {VH_SCALAR, 4, 2, 0},   /* 0xc8 ext16 */
    {VH_SCALAR, 6, 4, 0},   /* 0xc9 ext32 */
    {VH_SCALAR, 5, 0, 0},   /* 0xca float32 */
    {VH_SCALAR, 9, 0, 0},   /* 0xcb float64 */
    {VH_SCALAR, 2, 0, 0},   /* 0xcc uint8 */
    {VH_SCALAR, 3, 0, 0},   /* 0xcd uint16 */
    {VH_SCALAR, 5, 0, 0},   /* 0xce uint32 */
    {VH_SCALAR, 9, 0, 0},   /* 0xcf uint64 */
    {VH_SCALAR, 2, 0, 0},   /* 0xd0 int8 */
    {VH_SCALAR, 3, 0, 0},   /* 0xd1 int16 */
    {VH_SCALAR, 5, 0, 0},   /* 0xd2 int32 */
    {VH_SCALAR, 9, 0, 0},   /* 0xd3 int64 */
    {VH_SCALAR, 2, 0, 1},   /* 0xd4 fixext1: type, 1 byte */
    {VH_SCALAR, 2, 0, 2},   /* 0xd5 fixext2 */
    {VH_SCALAR, 2, 0, 4},   /* 0xd6 fixext4 */
    {VH_SCALAR, 2, 0, 8},   /* 0xd7 fixext8 */
    {VH_SCALAR, 2, 0, 16},  /* 0xd8 fixext16 */
    {VH_SCALAR, 2, 1, 0},   /* 0xd9 str8 */
    {VH_SCALAR, 3, 2, 0},   /* 0xda str16 */
    {VH_SCALAR, 5, 4, 0},   /* 0xdb str32 */
    {VH_ARRAY, 3, 2, 0},    /* 0xdc array16 */
    {VH_ARRAY, 5, 4, 0},    /* 0xdd array32 */
    {VH_MAP, 3, 2, 0},      /* 0xde map16 */
    {VH_MAP, 5, 4, 0},      /* 0xdf map32 */
};

/*
 * Parse the header of the value at p (left >= 1 bytes available) without
 * looking at its contents:
 *   *skip   bytes to advance past the header and, for str/bin/ext, the data
 *   *items  values that follow as its contents (array n, map 2n, else 0)
 *   *blob   data length of str/bin/ext (checked against limits by the caller)
 * Returns VH_BAD_BYTE for 0xc1, VH_SHORT if the header itself is cut off,
 * else the kind. The caller checks *skip against the bytes left.
 */
static int value_header(const uint8_t *p, size_t left, uint64_t *skip, uint64_t *items,
                        uint32_t *blob)
{
    uint8_t b = p[0];
    uint32_t n;
    int kind;

    *items = 0;
    *blob = 0;
    *skip = 1;
    if (b <= 0x7f || b >= 0xe0)
        return VH_SCALAR;
    if (b <= 0x9f) {
        *items = (b <= 0x8f ? 2u : 1u) * (b & 0x0f);
        return b <= 0x8f ? VH_MAP : VH_ARRAY;
    }
    if (b <= 0xbf) {
        *blob = b & 0x1f;
        *skip = 1 + (uint64_t)*blob;
        return VH_SCALAR;
    }
    const struct vh_row *row = &vh_rows[b - 0xc0];
    kind = row->kind;
    if (kind == VH_BAD_BYTE)
        return kind;
    n = row->fixlen;
    if (row->lenbytes) {
        if (left < 1u + row->lenbytes)
            return VH_SHORT;
        n = (uint32_t)load_be(p + 1, row->lenbytes);
    }
    if (kind == VH_SCALAR) {
        *blob = n;
        *skip = row->hdr + (uint64_t)n;
    } else {
        *items = (kind == VH_MAP ? 2u : 1u) * (uint64_t)n;
        *skip = row->hdr;
    }
    return kind;
}

void mc_mp_skip(mc_mp_reader_t *r)
{
    uint64_t pending = 1; /* values still to skip */
    uint64_t skip, items;
    uint32_t blob;

    if (r->err != MC_OK)
        return;
    const uint8_t *p = r->p;
    while (pending > 0) {
        size_t left = (size_t)(r->end - p);
        /* Every pending value needs at least one byte, so a larger count is
         * truncated input: fail now rather than count it down. */
        if (pending > left || value_header(p, left, &skip, &items, &blob) < 0 || skip > left) {
            rfail(r);
            return;
        }
        p += skip;
        pending += items - 1;
    }
    r->p = p;
}

/* ---- validator ----------------------------------------------------------- */

/* A top-level key: any integer encoding of a non-negative value, exactly what
 * mc_mp_read_uint accepts (signed encodings have the sign in the top bit of
 * the first data byte; a cut-off one is left for the truncation check). */
static inline int is_uint_key(const uint8_t *p, size_t left)
{
    uint8_t b = p[0];
    if (b <= 0x7f || (b >= 0xcc && b <= 0xcf))
        return 1;
    return b >= 0xd0 && b <= 0xd3 && (left < 2 || !(p[1] & 0x80));
}

mc_status_t mc_mp_validate(const uint8_t *data, size_t len, const struct mc_frame_limits *lim,
                           const char **reason)
{
    /* open[d] = values still to check in the open container at nesting level
     * d; level 0 is a virtual one holding the body's single value, level 1
     * the top-level map, whose keys are the values taken at odd counts. */
    uint64_t open[VALIDATE_DEPTH_CAP + 1];
    mc_frame_limits_t l;
    const uint8_t *p = data, *end;
    uint64_t skip, items;
    uint32_t blob;
    unsigned depth = 0;
    const char *why;

    if (len == 0)
        return MC_OK;
    end = data + len;
    mc_frame_limits_init(&l);
    if (lim != NULL) {
        if (lim->max_str)
            l.max_str = lim->max_str;
        if (lim->max_elems)
            l.max_elems = lim->max_elems;
        if (lim->max_depth)
            l.max_depth = lim->max_depth;
    }
    if (l.max_depth > VALIDATE_DEPTH_CAP)
        l.max_depth = VALIDATE_DEPTH_CAP;
    if ((p[0] & 0xf0) != 0x80 && p[0] != 0xde && p[0] != 0xdf) {
        why = "body: not a map";
        goto err;
    }
    open[0] = 1;
    for (;;) {
        while (open[depth] == 0) {
            if (depth == 0)
                goto done;
            depth--;
        }
        open[depth]--;
        size_t left = (size_t)(end - p);
        if (left == 0) {
            why = "body: truncated";
            goto err;
        }
        if (depth == 1 && (open[1] & 1) && !is_uint_key(p, left)) {
            why = "body: map key is not an unsigned integer";
            goto err;
        }
        int kind = value_header(p, left, &skip, &items, &blob);
        if (kind == VH_BAD_BYTE) {
            why = "body: invalid byte 0xc1";
            goto err;
        }
        if (kind == VH_SHORT) {
            why = "body: truncated";
            goto err;
        }
        if (blob > l.max_str) {
            why = "body: string too long";
            goto err;
        }
        if (skip > left) {
            why = "body: truncated";
            goto err;
        }
        p += skip;
        if (kind == VH_SCALAR)
            continue;
        if (depth + 1 > l.max_depth) {
            why = "body: nesting too deep";
            goto err;
        }
        if ((kind == VH_MAP ? items / 2 : items) > l.max_elems) {
            why = "body: too many elements";
            goto err;
        }
        /* Each value takes at least one byte: a larger count cannot fit. */
        if (items > (uint64_t)(end - p)) {
            why = "body: truncated";
            goto err;
        }
        open[++depth] = items;
    }
done:
    if (p != end) {
        why = "body: trailing bytes";
        goto err;
    }
    return MC_OK;
err:
    if (reason != NULL)
        *reason = why;
    return MC_ERR_PROTOCOL;
}
