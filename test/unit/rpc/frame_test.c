/* Frame codec: header layout, resumable decoding at every split point, and
 * rejection of malformed frames and bodies (run under ASan/UBSan: every
 * decode sees an exactly sized heap copy, so an over-read is caught). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "rpc/frame.h"
#include "rpc/msgpack.h"
#include "util/buf.h"

/* ---- helpers ------------------------------------------------------------- */

static mc_frame_hdr_t hdr_of(uint8_t kind, uint32_t body_len, uint32_t payload_len)
{
    mc_frame_hdr_t h = {0};
    h.version = MC_FRAME_VERSION;
    h.kind = kind;
    h.method = 7;
    h.req_id = 99;
    h.body_len = body_len;
    h.payload_len = payload_len;
    return h;
}

/* Append one frame (header + body + payload) to b. */
static void append_frame(mc_buf_t *b, const mc_frame_hdr_t *h, const void *body,
                         const void *payload)
{
    uint8_t hdr[MC_FRAME_HDR_LEN];
    mc_frame_encode_hdr(hdr, h);
    assert_int_equal(mc_buf_append(b, hdr, sizeof(hdr)), MC_OK);
    if (h->body_len) /* mc_buf_append(b, NULL, 0) would memcpy from NULL */
        assert_int_equal(mc_buf_append(b, body, h->body_len), MC_OK);
    if (h->payload_len)
        assert_int_equal(mc_buf_append(b, payload, h->payload_len), MC_OK);
}

/* Decode from an exactly sized heap copy of buf[0..len) so that ASan flags any
 * read past len. The frame's pointers are rebased onto buf. */
static mc_status_t decode_exact(const uint8_t *buf, size_t len, const mc_frame_limits_t *lim,
                                mc_frame_t *f, size_t *need, const char **reason)
{
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len)
        memcpy(copy, buf, len);
    mc_status_t st = mc_frame_decode(copy, len, lim, f, need, reason);
    if (st == MC_OK) {
        assert_ptr_equal(f->body, copy + MC_FRAME_HDR_LEN);
        f->body = buf + (f->body - copy);
        if (f->payload != NULL)
            f->payload = buf + (f->payload - copy);
    }
    free(copy);
    return st;
}

/* A frame around body[0..len) must be rejected with reason. */
static void expect_body_error(const void *body, uint32_t len, const mc_frame_limits_t *lim,
                              const char *reason)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_frame_hdr_t h = hdr_of(MC_FRAME_REQUEST, len, 0);
    mc_frame_t f;
    size_t need = 0;
    const char *why = NULL;

    append_frame(&b, &h, body, NULL);
    assert_int_equal(decode_exact(mc_buf_head(&b), mc_buf_used(&b), lim, &f, &need, &why),
                     MC_ERR_PROTOCOL);
    assert_non_null(why);
    assert_string_equal(why, reason);
    mc_buf_fini(&b);
}

static void expect_body_ok(const void *body, uint32_t len, const mc_frame_limits_t *lim)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_frame_hdr_t h = hdr_of(MC_FRAME_REQUEST, len, 0);
    mc_frame_t f;
    size_t need = 0;
    const char *why = "unset";

    append_frame(&b, &h, body, NULL);
    mc_status_t st = decode_exact(mc_buf_head(&b), mc_buf_used(&b), lim, &f, &need, &why);
    if (st != MC_OK)
        fail_msg("body rejected: %s", why);
    assert_int_equal(f.hdr.body_len, len);
    mc_buf_fini(&b);
}

/* A header with field `off` patched to v (little-endian, n bytes). */
static void expect_hdr_error(size_t off, size_t n, uint64_t v, const char *reason)
{
    mc_frame_hdr_t h = hdr_of(MC_FRAME_REQUEST, 0, 0);
    uint8_t buf[MC_FRAME_HDR_LEN];
    mc_frame_hdr_t out;
    mc_frame_t f;
    size_t need = 0;
    const char *why = NULL;

    mc_frame_encode_hdr(buf, &h);
    for (size_t i = 0; i < n; i++)
        buf[off + i] = (uint8_t)(v >> (8 * i));
    assert_int_equal(decode_exact(buf, sizeof(buf), NULL, &f, &need, &why), MC_ERR_PROTOCOL);
    assert_string_equal(why, reason);
    why = NULL;
    assert_int_equal(mc_frame_decode_hdr(buf, sizeof(buf), NULL, &out, &why), MC_ERR_PROTOCOL);
    assert_string_equal(why, reason);
}

/* ---- header -------------------------------------------------------------- */

static void limits_init_fills_the_documented_defaults(void **state)
{
    mc_frame_limits_t l;
    (void)state;
    mc_frame_limits_init(&l);
    assert_int_equal(l.max_body, 64u << 20);
    assert_int_equal(l.max_payload, 64u << 20);
    assert_int_equal(l.max_str, 16u << 20);
    assert_int_equal(l.max_elems, 1u << 20);
    assert_int_equal(l.max_depth, 16);
}

static void header_puts_every_field_little_endian_at_its_offset(void **state)
{
    static const uint8_t want[MC_FRAME_HDR_LEN] = {
        0x4d, 0x43, 0x01, 0x02, 0x34, 0x12, 0x78, 0x56,  /* magic ver kind method flags */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  /* req_id */
        0xfc, 0xff, 0xff, 0xff, 0x44, 0x33, 0x22, 0x11,  /* status -4, body_len */
        0x88, 0x77, 0x66, 0x55, 0x00, 0x00, 0x00, 0x00}; /* payload_len reserved */
    mc_frame_hdr_t h = {0};
    uint8_t buf[MC_FRAME_HDR_LEN];
    (void)state;

    h.version = 1;
    h.kind = MC_FRAME_RESPONSE;
    h.method = 0x1234;
    h.flags = 0x5678;
    h.req_id = 0x0102030405060708ull;
    h.status = -4;
    h.body_len = 0x11223344;
    h.payload_len = 0x55667788;
    memset(buf, 0xee, sizeof(buf));
    mc_frame_encode_hdr(buf, &h);
    assert_memory_equal(buf, want, sizeof(want));
}

static void header_round_trips_maximum_values(void **state)
{
    mc_frame_limits_t l = {UINT32_MAX, UINT32_MAX, 0, 0, 0};
    mc_frame_hdr_t h = {0}, out;
    uint8_t buf[MC_FRAME_HDR_LEN];
    const char *why = NULL;
    (void)state;

    h.version = MC_FRAME_VERSION;
    h.kind = MC_FRAME_KIND_MAX;
    h.method = UINT16_MAX;
    h.req_id = UINT64_MAX;
    h.status = INT32_MAX;
    h.body_len = UINT32_MAX;
    h.payload_len = UINT32_MAX;
    mc_frame_encode_hdr(buf, &h);
    assert_int_equal(mc_frame_decode_hdr(buf, sizeof(buf), &l, &out, &why), MC_OK);
    assert_int_equal(out.version, MC_FRAME_VERSION);
    assert_int_equal(out.kind, MC_FRAME_KIND_MAX);
    assert_int_equal(out.method, UINT16_MAX);
    assert_int_equal(out.flags, 0);
    assert_true(out.req_id == UINT64_MAX);
    assert_int_equal(out.status, INT32_MAX);
    assert_true(out.body_len == UINT32_MAX);
    assert_true(out.payload_len == UINT32_MAX);
}

static void header_round_trips_minimum_values(void **state)
{
    mc_frame_hdr_t h = {0}, out;
    uint8_t buf[MC_FRAME_HDR_LEN];
    const char *why = NULL;
    (void)state;

    h.version = MC_FRAME_VERSION;
    h.kind = MC_FRAME_REQUEST;
    h.status = INT32_MIN;
    mc_frame_encode_hdr(buf, &h);
    assert_int_equal(mc_frame_decode_hdr(buf, sizeof(buf), NULL, &out, &why), MC_OK);
    assert_int_equal(out.kind, MC_FRAME_REQUEST);
    assert_int_equal(out.method, 0);
    assert_true(out.req_id == 0);
    assert_int_equal(out.status, INT32_MIN);
    assert_int_equal(out.body_len, 0);
    assert_int_equal(out.payload_len, 0);
}

static void header_with_version_zero_is_written_as_the_current_version(void **state)
{
    mc_frame_hdr_t h = {0};
    uint8_t buf[MC_FRAME_HDR_LEN];
    (void)state;
    h.kind = MC_FRAME_NOTIFY;
    mc_frame_encode_hdr(buf, &h);
    assert_int_equal(buf[2], MC_FRAME_VERSION);
}

static void decode_hdr_needs_the_whole_header(void **state)
{
    mc_frame_hdr_t h = hdr_of(MC_FRAME_REQUEST, 5, 0), out;
    uint8_t buf[MC_FRAME_HDR_LEN];
    (void)state;
    mc_frame_encode_hdr(buf, &h);
    for (size_t n = 0; n < MC_FRAME_HDR_LEN; n++)
        assert_int_equal(mc_frame_decode_hdr(buf, n, NULL, &out, NULL), MC_AGAIN);
    assert_int_equal(mc_frame_decode_hdr(buf, MC_FRAME_HDR_LEN, NULL, &out, NULL), MC_OK);
    assert_int_equal(out.body_len, 5);
}

/* ---- decoding complete and partial frames -------------------------------- */

static void decode_asks_for_the_header_until_it_is_in(void **state)
{
    mc_frame_hdr_t h = hdr_of(MC_FRAME_REQUEST, 1, 0);
    uint8_t buf[MC_FRAME_HDR_LEN];
    mc_frame_t f;
    (void)state;
    mc_frame_encode_hdr(buf, &h);
    for (size_t n = 0; n < MC_FRAME_HDR_LEN; n++) {
        size_t need = 0;
        assert_int_equal(decode_exact(buf, n, NULL, &f, &need, NULL), MC_AGAIN);
        assert_int_equal(need, MC_FRAME_HDR_LEN);
    }
}

/* Another protocol's short request (an HTTP GET line) must be refused from
 * its first bytes, not wait forever for a 32-byte header. */
static void a_short_prefix_that_cannot_start_a_frame_is_refused_at_once(void **state)
{
    mc_frame_hdr_t h = hdr_of(MC_FRAME_REQUEST, 1, 0);
    uint8_t good[MC_FRAME_HDR_LEN];
    mc_frame_t f;
    (void)state;
    mc_frame_encode_hdr(good, &h);
    static const struct {
        size_t at;
        uint8_t byte;
        const char *reason;
    } bad[] = {{0, 'G', "bad magic"},
               {1, 'X', "bad magic"},
               {2, 9, "unsupported version"},
               {3, 0, "bad kind"},
               {3, MC_FRAME_KIND_MAX + 1, "bad kind"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t buf[MC_FRAME_HDR_LEN];
        memcpy(buf, good, sizeof(buf));
        buf[bad[i].at] = bad[i].byte;
        for (size_t n = bad[i].at + 1; n < MC_FRAME_HDR_LEN; n++) {
            const char *reason = NULL;
            size_t need = 0;
            assert_int_equal(decode_exact(buf, n, NULL, &f, &need, &reason), MC_ERR_PROTOCOL);
            assert_string_equal(reason, bad[i].reason);
        }
    }
    const char http[] = "GET / HTTP/1.0\r\n\r\n";
    assert_int_equal(decode_exact((const uint8_t *)http, strlen(http), NULL, &f, NULL, NULL),
                     MC_ERR_PROTOCOL);
}

static void decode_asks_for_the_whole_frame_once_the_header_is_in(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_frame_hdr_t h = hdr_of(MC_FRAME_DATA, 3, 10);
    static const uint8_t body[3] = {0x81, 0x01, 0x02}, payload[10];
    mc_frame_t f;
    (void)state;

    append_frame(&b, &h, body, payload);
    for (size_t n = MC_FRAME_HDR_LEN; n < mc_buf_used(&b); n++) {
        size_t need = 0;
        assert_int_equal(decode_exact(mc_buf_head(&b), n, NULL, &f, &need, NULL), MC_AGAIN);
        assert_int_equal(need, MC_FRAME_HDR_LEN + 3 + 10);
    }
    mc_buf_fini(&b);
}

static void maximal_lengths_ask_for_the_full_frame_size(void **state)
{
    mc_frame_limits_t l = {UINT32_MAX, UINT32_MAX, 0, 0, 0};
    mc_frame_hdr_t h = hdr_of(MC_FRAME_DATA, UINT32_MAX, UINT32_MAX);
    uint8_t buf[MC_FRAME_HDR_LEN];
    mc_frame_t f;
    size_t need = 0;
    (void)state;
    mc_frame_encode_hdr(buf, &h);
    assert_int_equal(decode_exact(buf, sizeof(buf), &l, &f, &need, NULL), MC_AGAIN);
    assert_true((uint64_t)need == MC_FRAME_HDR_LEN + 2 * (uint64_t)UINT32_MAX);
}

static void decoded_frame_points_into_the_input(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_frame_hdr_t h = hdr_of(MC_FRAME_DATA, 3, 4);
    static const uint8_t body[3] = {0x81, 0x05, 0xc3}, payload[4] = {9, 8, 7, 6};
    mc_frame_t f;
    size_t need = 0;
    const char *why = NULL;
    (void)state;

    h.status = -704;
    h.req_id = 0xdeadbeefcafeull;
    append_frame(&b, &h, body, payload);
    append_frame(&b, &h, body, payload); /* a following frame is not consumed */
    const uint8_t *in = mc_buf_head(&b);
    assert_int_equal(mc_frame_decode(in, mc_buf_used(&b), NULL, &f, &need, &why), MC_OK);
    assert_int_equal(f.frame_len, MC_FRAME_HDR_LEN + 3 + 4);
    assert_ptr_equal(f.body, in + MC_FRAME_HDR_LEN);
    assert_ptr_equal(f.payload, in + MC_FRAME_HDR_LEN + 3);
    assert_int_equal(f.hdr.kind, MC_FRAME_DATA);
    assert_int_equal(f.hdr.status, -704);
    assert_true(f.hdr.req_id == 0xdeadbeefcafeull);
    assert_memory_equal(f.payload, payload, 4);
    mc_buf_fini(&b);
}

static void frame_without_payload_has_a_null_payload(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_frame_hdr_t h = hdr_of(MC_FRAME_REQUEST, 1, 0);
    static const uint8_t body[1] = {0x80};
    mc_frame_t f;
    size_t need;
    (void)state;
    append_frame(&b, &h, body, NULL);
    assert_int_equal(mc_frame_decode(mc_buf_head(&b), mc_buf_used(&b), NULL, &f, &need, NULL),
                     MC_OK);
    assert_null(f.payload);
    assert_int_equal(f.frame_len, MC_FRAME_HDR_LEN + 1);
    mc_buf_fini(&b);
}

static void empty_body_is_a_valid_frame(void **state)
{
    mc_frame_hdr_t h = hdr_of(MC_FRAME_NOTIFY, 0, 0);
    uint8_t buf[MC_FRAME_HDR_LEN];
    mc_frame_t f;
    size_t need;
    (void)state;
    mc_frame_encode_hdr(buf, &h);
    assert_int_equal(decode_exact(buf, sizeof(buf), NULL, &f, &need, NULL), MC_OK);
    assert_int_equal(f.frame_len, MC_FRAME_HDR_LEN);
    assert_int_equal(f.hdr.body_len, 0);
}

/* ---- resumable decoding: every split point --------------------------------- */

#define MAX_FRAMES 8

typedef struct stream {
    mc_buf_t bytes; /* all frames back to back */
    size_t nframes;
    size_t start[MAX_FRAMES]; /* offset of each frame in bytes */
    mc_frame_hdr_t hdr[MAX_FRAMES];
} stream_t;

/* Several valid frames of every kind: bodies of various shapes, one payload,
 * one empty body. */
static void stream_build(stream_t *s)
{
    mc_buf_t body = MC_BUF_INIT;
    mc_mp_writer_t w;
    uint8_t payload[100];

    memset(s, 0, sizeof(*s));
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)(i * 7);
    for (int i = 0; i < 5; i++) {
        mc_frame_hdr_t h;
        uint32_t plen = 0;
        mc_buf_reset(&body);
        mc_mp_writer_init(&w, &body);
        switch (i) {
        case 0: /* request {1: "hello", 2: 42} */
            h = hdr_of(MC_FRAME_REQUEST, 0, 0);
            mc_mp_write_map(&w, 2);
            mc_mp_write_uint(&w, 1);
            mc_mp_write_cstr(&w, "hello");
            mc_mp_write_uint(&w, 2);
            mc_mp_write_uint(&w, 42);
            break;
        case 1: /* response with an empty map */
            h = hdr_of(MC_FRAME_RESPONSE, 0, 0);
            h.status = -704;
            mc_mp_write_map(&w, 0);
            break;
        case 2: /* notify with no body at all */
            h = hdr_of(MC_FRAME_NOTIFY, 0, 0);
            break;
        case 3: /* data: {1: bin, 2: [1, -2, 3.5]} + payload */
            h = hdr_of(MC_FRAME_DATA, 0, 0);
            plen = sizeof(payload);
            mc_mp_write_map(&w, 2);
            mc_mp_write_uint(&w, 1);
            mc_mp_write_bin(&w, payload, 8);
            mc_mp_write_uint(&w, 2);
            mc_mp_write_array(&w, 3);
            mc_mp_write_uint(&w, 1);
            mc_mp_write_int(&w, -2);
            mc_mp_write_double(&w, 3.5);
            break;
        default: /* request with nesting, a long string and big numbers */
            h = hdr_of(MC_FRAME_REQUEST, 0, 0);
            h.req_id = UINT64_MAX;
            h.method = 0xffff;
            mc_mp_write_map(&w, 3);
            mc_mp_write_uint(&w, 300);
            mc_mp_write_map(&w, 1);
            mc_mp_write_cstr(&w, "nested-key");
            mc_mp_write_array(&w, 2);
            mc_mp_write_nil(&w);
            mc_mp_write_bool(&w, 1);
            mc_mp_write_uint(&w, 70000);
            mc_mp_write_cstr(&w, "a string longer than thirty-one bytes, str8");
            mc_mp_write_uint(&w, UINT32_MAX + 1ull);
            mc_mp_write_int(&w, INT64_MIN);
            break;
        }
        assert_int_equal(w.err, MC_OK);
        h.req_id += (uint64_t)i;
        h.body_len = (uint32_t)mc_buf_used(&body);
        h.payload_len = plen;
        s->start[s->nframes] = mc_buf_used(&s->bytes);
        s->hdr[s->nframes++] = h;
        append_frame(&s->bytes, &h, mc_buf_head(&body), payload);
    }
    mc_buf_fini(&body);
}

static size_t stream_frame_len(const stream_t *s, size_t i)
{
    return MC_FRAME_HDR_LEN + (size_t)s->hdr[i].body_len + s->hdr[i].payload_len;
}

/* The tiny resumable consumer a connection would be: accumulate what arrives,
 * decode until MC_AGAIN, consume each frame. Checks every frame and every
 * MC_AGAIN against the stream it is fed from. */
typedef struct driver {
    const stream_t *s;
    uint8_t acc[1024];
    size_t len;
    size_t got; /* frames decoded so far */
} driver_t;

static void driver_feed(driver_t *d, const uint8_t *p, size_t n)
{
    assert_true(d->len + n <= sizeof(d->acc));
    memcpy(d->acc + d->len, p, n);
    d->len += n;
    for (;;) {
        mc_frame_t f;
        size_t need = 0;
        const char *why = NULL;
        mc_status_t st = decode_exact(d->acc, d->len, NULL, &f, &need, &why);
        if (st == MC_AGAIN) {
            assert_true(need > d->len);
            assert_true(d->got < d->s->nframes || d->len == 0);
            size_t want =
                d->len < MC_FRAME_HDR_LEN ? MC_FRAME_HDR_LEN : stream_frame_len(d->s, d->got);
            assert_int_equal(need, want);
            return;
        }
        if (st != MC_OK)
            fail_msg("valid stream rejected: %s", why);
        assert_true(d->got < d->s->nframes);
        const mc_frame_hdr_t *h = &d->s->hdr[d->got];
        const uint8_t *orig = mc_buf_head(&d->s->bytes) + d->s->start[d->got];
        assert_int_equal(f.frame_len, stream_frame_len(d->s, d->got));
        assert_int_equal(f.hdr.version, h->version);
        assert_int_equal(f.hdr.kind, h->kind);
        assert_int_equal(f.hdr.method, h->method);
        assert_int_equal(f.hdr.flags, h->flags);
        assert_true(f.hdr.req_id == h->req_id);
        assert_int_equal(f.hdr.status, h->status);
        assert_int_equal(f.hdr.body_len, h->body_len);
        assert_int_equal(f.hdr.payload_len, h->payload_len);
        assert_memory_equal(f.body, orig + MC_FRAME_HDR_LEN, h->body_len);
        if (h->payload_len) {
            assert_non_null(f.payload);
            assert_memory_equal(f.payload, orig + MC_FRAME_HDR_LEN + h->body_len, h->payload_len);
        } else {
            assert_null(f.payload);
        }
        memmove(d->acc, d->acc + f.frame_len, d->len - f.frame_len);
        d->len -= f.frame_len;
        d->got++;
    }
}

static void every_split_point_yields_the_same_frames(void **state)
{
    stream_t s;
    (void)state;
    stream_build(&s);
    size_t total = mc_buf_used(&s.bytes);
    const uint8_t *in = mc_buf_head(&s.bytes);
    for (size_t k = 0; k <= total; k++) {
        driver_t d = {.s = &s};
        driver_feed(&d, in, k);
        driver_feed(&d, in + k, total - k);
        assert_int_equal(d.got, s.nframes);
        assert_int_equal(d.len, 0);
    }
    mc_buf_fini(&s.bytes);
}

static void byte_by_byte_feeding_yields_the_same_frames(void **state)
{
    stream_t s;
    driver_t d = {0};
    (void)state;
    stream_build(&s);
    d.s = &s;
    for (size_t i = 0; i < mc_buf_used(&s.bytes); i++)
        driver_feed(&d, mc_buf_head(&s.bytes) + i, 1);
    assert_int_equal(d.got, s.nframes);
    assert_int_equal(d.len, 0);
    mc_buf_fini(&s.bytes);
}

/* ---- malformed headers ----------------------------------------------------- */

static void bad_magic_is_rejected(void **state)
{
    (void)state;
    expect_hdr_error(0, 1, 'X', "bad magic");
    expect_hdr_error(1, 1, 'X', "bad magic");
}

static void unsupported_version_is_rejected(void **state)
{
    (void)state;
    expect_hdr_error(2, 1, 0, "unsupported version");
    expect_hdr_error(2, 1, MC_FRAME_VERSION + 1, "unsupported version");
}

static void kinds_outside_1_to_max_are_rejected(void **state)
{
    (void)state;
    expect_hdr_error(3, 1, 0, "bad kind");
    expect_hdr_error(3, 1, MC_FRAME_KIND_MAX + 1, "bad kind");
    expect_hdr_error(3, 1, 255, "bad kind");
}

static void nonzero_flags_are_rejected(void **state)
{
    (void)state;
    expect_hdr_error(6, 2, 1, "reserved flags set");
    expect_hdr_error(6, 2, 0x8000, "reserved flags set");
}

static void nonzero_reserved_field_is_rejected(void **state)
{
    (void)state;
    expect_hdr_error(28, 4, 1, "reserved field set");
    expect_hdr_error(28, 4, 0x80000000u, "reserved field set");
}

static void body_len_over_the_limit_is_rejected_before_the_body_arrives(void **state)
{
    mc_frame_limits_t l = {.max_body = 100};
    mc_frame_hdr_t h = hdr_of(MC_FRAME_REQUEST, 101, 0);
    uint8_t buf[MC_FRAME_HDR_LEN];
    mc_frame_t f;
    size_t need = 0;
    const char *why = NULL;
    (void)state;
    mc_frame_encode_hdr(buf, &h);
    assert_int_equal(decode_exact(buf, sizeof(buf), &l, &f, &need, &why), MC_ERR_PROTOCOL);
    assert_string_equal(why, "body too large");
    h.body_len = 100;
    mc_frame_encode_hdr(buf, &h);
    assert_int_equal(decode_exact(buf, sizeof(buf), &l, &f, &need, &why), MC_AGAIN);
}

static void body_len_of_4g_is_rejected_under_default_limits(void **state)
{
    (void)state;
    expect_hdr_error(20, 4, UINT32_MAX, "body too large");
    expect_hdr_error(20, 4, (64u << 20) + 1, "body too large");
}

static void payload_len_over_the_limit_is_rejected(void **state)
{
    mc_frame_limits_t l = {.max_payload = 10};
    mc_frame_hdr_t h = hdr_of(MC_FRAME_DATA, 0, 11), out;
    uint8_t buf[MC_FRAME_HDR_LEN];
    const char *why = NULL;
    (void)state;
    mc_frame_encode_hdr(buf, &h);
    assert_int_equal(mc_frame_decode_hdr(buf, sizeof(buf), &l, &out, &why), MC_ERR_PROTOCOL);
    assert_string_equal(why, "payload too large");
    expect_hdr_error(24, 4, UINT32_MAX, "payload too large");
}

static void zero_limit_fields_mean_the_defaults(void **state)
{
    mc_frame_limits_t zero = {0};
    mc_frame_hdr_t h = hdr_of(MC_FRAME_DATA, 64u << 20, 64u << 20), out;
    uint8_t buf[MC_FRAME_HDR_LEN];
    (void)state;
    mc_frame_encode_hdr(buf, &h);
    assert_int_equal(mc_frame_decode_hdr(buf, sizeof(buf), &zero, &out, NULL), MC_OK);
    h.payload_len++;
    mc_frame_encode_hdr(buf, &h);
    assert_int_equal(mc_frame_decode_hdr(buf, sizeof(buf), &zero, &out, NULL), MC_ERR_PROTOCOL);
}

static void a_rejected_header_leaves_the_output_untouched(void **state)
{
    mc_frame_hdr_t h = hdr_of(MC_FRAME_REQUEST, 0, 0), out;
    uint8_t buf[MC_FRAME_HDR_LEN];
    (void)state;
    mc_frame_encode_hdr(buf, &h);
    buf[0] = 0;
    memset(&out, 0xab, sizeof(out));
    assert_int_equal(mc_frame_decode_hdr(buf, sizeof(buf), NULL, &out, NULL), MC_ERR_PROTOCOL);
    assert_int_equal(out.kind, 0xab);
}

/* ---- malformed bodies ------------------------------------------------------ */

static void truncated_body_is_incomplete_not_an_error(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_frame_hdr_t h = hdr_of(MC_FRAME_REQUEST, 4, 0);
    static const uint8_t body[4] = {0x81, 0x01, 0xa1, 'x'};
    mc_frame_t f;
    (void)state;
    append_frame(&b, &h, body, NULL);
    for (size_t n = 0; n < mc_buf_used(&b); n++) {
        size_t need = 0;
        assert_int_equal(decode_exact(mc_buf_head(&b), n, NULL, &f, &need, NULL), MC_AGAIN);
        assert_true(need > n);
    }
    mc_buf_fini(&b);
}

static void body_that_is_an_array_is_rejected(void **state)
{
    static const uint8_t body[] = {0x92, 0x01, 0x02};
    (void)state;
    expect_body_error(body, sizeof(body), NULL, "body: not a map");
}

static void body_that_is_an_int_is_rejected(void **state)
{
    static const uint8_t body[] = {0x05};
    (void)state;
    expect_body_error(body, sizeof(body), NULL, "body: not a map");
}

static void body_that_is_a_str_is_rejected(void **state)
{
    static const uint8_t body[] = {0xa2, 'h', 'i'};
    (void)state;
    expect_body_error(body, sizeof(body), NULL, "body: not a map");
}

static void map_with_a_string_key_is_rejected(void **state)
{
    static const uint8_t body[] = {0x81, 0xa1, 'k', 0x01};
    (void)state;
    expect_body_error(body, sizeof(body), NULL, "body: map key is not an unsigned integer");
}

static void map_with_a_negative_key_is_rejected(void **state)
{
    static const uint8_t fixint[] = {0x82, 0x01, 0x01, 0xff, 0x01};
    static const uint8_t int8[] = {0x81, 0xd0, 0x80, 0x01};
    (void)state;
    expect_body_error(fixint, sizeof(fixint), NULL, "body: map key is not an unsigned integer");
    expect_body_error(int8, sizeof(int8), NULL, "body: map key is not an unsigned integer");
}

static void map_keys_in_any_unsigned_encoding_are_accepted(void **state)
{
    static const uint8_t body[] = {0x85, 0x00, 0xc0,                             /* fixint */
                                   0xcd, 0x01, 0x00, 0xc0,                       /* uint16 */
                                   0xcf, 0,    0,    0,    0, 0, 0, 0, 9, 0xc0,  /* uint64 */
                                   0xd0, 0x05, 0xc0,                             /* int8 5 */
                                   0xd3, 0x7f, 0,    0,    0, 0, 0, 0, 0, 0xc0}; /* int64 */
    (void)state;
    expect_body_ok(body, sizeof(body), NULL);
}

static void nested_maps_may_have_keys_of_any_type(void **state)
{
    static const uint8_t body[] = {0x81, 0x01, 0x82, 0xa1, 'k', 0x01, 0xff, 0x02};
    (void)state;
    expect_body_ok(body, sizeof(body), NULL);
}

/* {0: [[...[]...]]} with `levels` containers in all, the top-level map included. */
static uint32_t nested_body(uint8_t *out, unsigned levels)
{
    uint32_t n = 0;
    out[n++] = 0x81;
    out[n++] = 0x00;
    for (unsigned i = 1; i < levels; i++)
        out[n++] = i + 1 < levels ? 0x91 : 0x90;
    return n;
}

static void nesting_16_deep_is_accepted(void **state)
{
    uint8_t body[32];
    (void)state;
    expect_body_ok(body, nested_body(body, 16), NULL);
}

static void nesting_17_deep_is_rejected(void **state)
{
    uint8_t body[32];
    (void)state;
    expect_body_error(body, nested_body(body, 17), NULL, "body: nesting too deep");
}

static void nesting_limit_is_configurable(void **state)
{
    mc_frame_limits_t l = {.max_depth = 3};
    uint8_t body[32];
    (void)state;
    expect_body_ok(body, nested_body(body, 3), &l);
    expect_body_error(body, nested_body(body, 4), &l, "body: nesting too deep");
}

static void str_longer_than_max_str_is_rejected(void **state)
{
    mc_frame_limits_t l = {.max_str = 4};
    static const uint8_t ok[] = {0x81, 0x01, 0xa4, 'a', 'b', 'c', 'd'};
    static const uint8_t str[] = {0x81, 0x01, 0xa5, 'a', 'b', 'c', 'd', 'e'};
    static const uint8_t bin[] = {0x81, 0x01, 0xc4, 0x05, 1, 2, 3, 4, 5};
    (void)state;
    expect_body_ok(ok, sizeof(ok), &l);
    expect_body_error(str, sizeof(str), &l, "body: string too long");
    expect_body_error(bin, sizeof(bin), &l, "body: string too long");
}

static void str32_claiming_4g_bytes_is_rejected_without_reading_them(void **state)
{
    static const uint8_t body[] = {0x81, 0x01, 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'};
    mc_frame_limits_t l = {.max_str = UINT32_MAX};
    (void)state;
    expect_body_error(body, sizeof(body), NULL, "body: string too long");
    expect_body_error(body, sizeof(body), &l, "body: truncated");
}

static void array_header_over_max_elems_is_rejected(void **state)
{
    mc_frame_limits_t l = {.max_elems = 2};
    static const uint8_t ok[] = {0x81, 0x01, 0x92, 0x01, 0x02};
    static const uint8_t arr[] = {0x81, 0x01, 0x93, 0x01, 0x02, 0x03};
    static const uint8_t map[] = {0x83, 0x01, 0x01, 0x02, 0x02, 0x03, 0x03};
    (void)state;
    expect_body_ok(ok, sizeof(ok), &l);
    expect_body_error(arr, sizeof(arr), &l, "body: too many elements");
    expect_body_error(map, sizeof(map), &l, "body: too many elements");
}

static void array_claiming_4g_elements_in_10_bytes_fails_fast(void **state)
{
    static const uint8_t body[] = {0x81, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02, 0x03};
    mc_frame_limits_t l = {.max_elems = UINT32_MAX};
    (void)state;
    expect_body_error(body, sizeof(body), NULL, "body: too many elements");
    expect_body_error(body, sizeof(body), &l, "body: truncated");
}

static void map32_claiming_4g_entries_fails_fast(void **state)
{
    static const uint8_t body[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02};
    mc_frame_limits_t l = {.max_elems = UINT32_MAX};
    (void)state;
    expect_body_error(body, sizeof(body), &l, "body: truncated");
}

static void array_claiming_more_elements_than_bytes_is_truncated(void **state)
{
    static const uint8_t body[] = {0x81, 0x01, 0xdc, 0x00, 0x10, 0x01, 0x02, 0x03};
    (void)state;
    expect_body_error(body, sizeof(body), NULL, "body: truncated");
}

static void byte_0xc1_is_rejected(void **state)
{
    static const uint8_t body[] = {0x81, 0x01, 0xc1};
    (void)state;
    expect_body_error(body, sizeof(body), NULL, "body: invalid byte 0xc1");
}

static void trailing_bytes_after_the_map_are_rejected(void **state)
{
    static const uint8_t body[] = {0x81, 0x01, 0x02, 0x03};
    static const uint8_t two_maps[] = {0x80, 0x80};
    (void)state;
    expect_body_error(body, sizeof(body), NULL, "body: trailing bytes");
    expect_body_error(two_maps, sizeof(two_maps), NULL, "body: trailing bytes");
}

static void body_shorter_than_its_map_is_truncated(void **state)
{
    static const uint8_t missing_value[] = {0x81, 0x01};
    static const uint8_t short_str[] = {0x81, 0x01, 0xa5, 'a'};
    static const uint8_t short_uint[] = {0x81, 0x01, 0xcf, 0x00};
    static const uint8_t short_hdr[] = {0x81, 0x01, 0xda, 0x00};
    static const uint8_t short_key[] = {0x81, 0xcd, 0x00};
    static const uint8_t short_signed_key[] = {0x81, 0xd1};
    (void)state;
    expect_body_error(missing_value, sizeof(missing_value), NULL, "body: truncated");
    expect_body_error(short_str, sizeof(short_str), NULL, "body: truncated");
    expect_body_error(short_uint, sizeof(short_uint), NULL, "body: truncated");
    expect_body_error(short_hdr, sizeof(short_hdr), NULL, "body: truncated");
    expect_body_error(short_key, sizeof(short_key), NULL, "body: truncated");
    expect_body_error(short_signed_key, sizeof(short_signed_key), NULL, "body: truncated");
}

static void ext_types_are_accepted(void **state)
{
    uint8_t body[128];
    uint32_t n = 0;
    (void)state;
    body[n++] = 0x88;
    for (unsigned i = 0; i < 5; i++) { /* fixext 1, 2, 4, 8, 16 */
        body[n++] = (uint8_t)i;
        body[n++] = (uint8_t)(0xd4 + i);
        body[n++] = 0x01; /* ext type */
        for (unsigned j = 0; j < (1u << i); j++)
            body[n++] = 0xee;
    }
    body[n++] = 5; /* ext8, 3 bytes */
    memcpy(body + n, "\xc7\x03\xff\x01\x02\x03", 6);
    n += 6;
    body[n++] = 6; /* ext16, 2 bytes */
    memcpy(body + n, "\xc8\x00\x02\x05\x01\x02", 6);
    n += 6;
    body[n++] = 7; /* ext32, 1 byte */
    memcpy(body + n, "\xc9\x00\x00\x00\x01\x05\x01", 7);
    n += 7;
    expect_body_ok(body, n, NULL);
}

static void every_msgpack_type_is_accepted_as_a_value(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    static const uint8_t raw[] = {
        0xca, 0x3f, 0x80, 0x00, 0x00,               /* float32 1.0 */
        0xd9, 0x01, 'x',  0xda, 0x00, 0x01, 'y',    /* str8, str16 */
        0xdb, 0x00, 0x00, 0x00, 0x01, 'z',          /* str32 */
        0xc5, 0x00, 0x01, 0x00,                     /* bin16 */
        0xc6, 0x00, 0x00, 0x00, 0x01, 0x00,         /* bin32 */
        0xdd, 0x00, 0x00, 0x00, 0x01, 0xc0,         /* array32 */
        0xde, 0x00, 0x01, 0xc0, 0xc0,               /* map16 {nil: nil} */
        0xdf, 0x00, 0x00, 0x00, 0x00,               /* map32 {} */
        0xd1, 0x80, 0x00, 0xd2, 0x80, 0,    0,   0, /* int16, int32 */
    };
    (void)state;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_map(&w, 13);
    mc_mp_write_uint(&w, 0), mc_mp_write_nil(&w);
    mc_mp_write_uint(&w, 1), mc_mp_write_bool(&w, 0);
    mc_mp_write_uint(&w, 2), mc_mp_write_bool(&w, 1);
    mc_mp_write_uint(&w, 3), mc_mp_write_int(&w, -1);
    mc_mp_write_uint(&w, 4), mc_mp_write_int(&w, INT64_MIN);
    mc_mp_write_uint(&w, 5), mc_mp_write_uint(&w, UINT64_MAX);
    mc_mp_write_uint(&w, 6), mc_mp_write_double(&w, -0.5);
    mc_mp_write_uint(&w, 7), mc_mp_write_str(&w, "", 0);
    mc_mp_write_uint(&w, 8), mc_mp_write_bin(&w, "ab", 2);
    mc_mp_write_uint(&w, 9), mc_mp_write_array(&w, 0);
    mc_mp_write_uint(&w, 10), mc_mp_write_map(&w, 0);
    mc_mp_write_uint(&w, 11), mc_mp_write_int(&w, -100);
    mc_mp_write_uint(&w, 12), mc_mp_write_array(&w, 11);
    assert_int_equal(mc_buf_append(&b, raw, sizeof(raw)), MC_OK);
    assert_int_equal(w.err, MC_OK);
    expect_body_ok(mc_buf_head(&b), (uint32_t)mc_buf_used(&b), NULL);
    mc_buf_fini(&b);
}

/* Every proper prefix of a valid body, presented as a complete frame, is a
 * protocol error (never a crash and never accepted). */
static void every_truncation_of_a_valid_body_is_rejected(void **state)
{
    stream_t s;
    (void)state;
    stream_build(&s);
    for (size_t i = 0; i < s.nframes; i++) {
        const uint8_t *body = mc_buf_head(&s.bytes) + s.start[i] + MC_FRAME_HDR_LEN;
        for (uint32_t n = 1; n < s.hdr[i].body_len; n++) {
            const char *why = NULL;
            assert_int_equal(mc_mp_validate(body, n, NULL, &why), MC_ERR_PROTOCOL);
            assert_non_null(why);
            expect_body_error(body, n, NULL, why);
        }
    }
    mc_buf_fini(&s.bytes);
}

/* Every single-byte mutation of a valid stream decodes or fails cleanly. */
static void single_byte_mutations_never_crash(void **state)
{
    static const uint8_t values[] = {0x00, 0x01, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0,
                                     0xbf, 0xc0, 0xc1, 0xc4, 0xc7, 0xc9, 0xcf, 0xd3,
                                     0xd8, 0xdb, 0xdd, 0xdf, 0xe0, 0xff};
    stream_t s;
    mc_frame_limits_t l = {.max_depth = 2, .max_elems = 4, .max_str = 8};
    (void)state;
    stream_build(&s);
    size_t total = mc_buf_used(&s.bytes);
    uint8_t *m = malloc(total);
    assert_non_null(m);
    for (size_t i = 0; i < total; i++) {
        for (size_t v = 0; v < sizeof(values); v++) {
            memcpy(m, mc_buf_head(&s.bytes), total);
            m[i] = values[v];
            for (size_t off = 0; off < total;) {
                mc_frame_t f;
                size_t need = 0;
                const char *why = NULL;
                mc_status_t st =
                    decode_exact(m + off, total - off, v & 1 ? &l : NULL, &f, &need, &why);
                if (st != MC_OK) {
                    assert_true(st == MC_AGAIN ? need > total - off : why != NULL);
                    break;
                }
                off += f.frame_len;
            }
        }
    }
    free(m);
    mc_buf_fini(&s.bytes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(limits_init_fills_the_documented_defaults),
        cmocka_unit_test(header_puts_every_field_little_endian_at_its_offset),
        cmocka_unit_test(header_round_trips_maximum_values),
        cmocka_unit_test(header_round_trips_minimum_values),
        cmocka_unit_test(header_with_version_zero_is_written_as_the_current_version),
        cmocka_unit_test(decode_hdr_needs_the_whole_header),
        cmocka_unit_test(decode_asks_for_the_header_until_it_is_in),
        cmocka_unit_test(a_short_prefix_that_cannot_start_a_frame_is_refused_at_once),
        cmocka_unit_test(decode_asks_for_the_whole_frame_once_the_header_is_in),
        cmocka_unit_test(maximal_lengths_ask_for_the_full_frame_size),
        cmocka_unit_test(decoded_frame_points_into_the_input),
        cmocka_unit_test(frame_without_payload_has_a_null_payload),
        cmocka_unit_test(empty_body_is_a_valid_frame),
        cmocka_unit_test(every_split_point_yields_the_same_frames),
        cmocka_unit_test(byte_by_byte_feeding_yields_the_same_frames),
        cmocka_unit_test(bad_magic_is_rejected),
        cmocka_unit_test(unsupported_version_is_rejected),
        cmocka_unit_test(kinds_outside_1_to_max_are_rejected),
        cmocka_unit_test(nonzero_flags_are_rejected),
        cmocka_unit_test(nonzero_reserved_field_is_rejected),
        cmocka_unit_test(body_len_over_the_limit_is_rejected_before_the_body_arrives),
        cmocka_unit_test(body_len_of_4g_is_rejected_under_default_limits),
        cmocka_unit_test(payload_len_over_the_limit_is_rejected),
        cmocka_unit_test(zero_limit_fields_mean_the_defaults),
        cmocka_unit_test(a_rejected_header_leaves_the_output_untouched),
        cmocka_unit_test(truncated_body_is_incomplete_not_an_error),
        cmocka_unit_test(body_that_is_an_array_is_rejected),
        cmocka_unit_test(body_that_is_an_int_is_rejected),
        cmocka_unit_test(body_that_is_a_str_is_rejected),
        cmocka_unit_test(map_with_a_string_key_is_rejected),
        cmocka_unit_test(map_with_a_negative_key_is_rejected),
        cmocka_unit_test(map_keys_in_any_unsigned_encoding_are_accepted),
        cmocka_unit_test(nested_maps_may_have_keys_of_any_type),
        cmocka_unit_test(nesting_16_deep_is_accepted),
        cmocka_unit_test(nesting_17_deep_is_rejected),
        cmocka_unit_test(nesting_limit_is_configurable),
        cmocka_unit_test(str_longer_than_max_str_is_rejected),
        cmocka_unit_test(str32_claiming_4g_bytes_is_rejected_without_reading_them),
        cmocka_unit_test(array_header_over_max_elems_is_rejected),
        cmocka_unit_test(array_claiming_4g_elements_in_10_bytes_fails_fast),
        cmocka_unit_test(map32_claiming_4g_entries_fails_fast),
        cmocka_unit_test(array_claiming_more_elements_than_bytes_is_truncated),
        cmocka_unit_test(byte_0xc1_is_rejected),
        cmocka_unit_test(trailing_bytes_after_the_map_are_rejected),
        cmocka_unit_test(body_shorter_than_its_map_is_truncated),
        cmocka_unit_test(ext_types_are_accepted),
        cmocka_unit_test(every_msgpack_type_is_accepted_as_a_value),
        cmocka_unit_test(every_truncation_of_a_valid_body_is_rejected),
        cmocka_unit_test(single_byte_mutations_never_crash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
