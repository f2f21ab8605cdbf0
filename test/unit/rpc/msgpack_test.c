/* msgpack writer and reader: smallest encodings at every boundary, wire
 * compatibility with the msgpack-c library in both directions, sticky errors,
 * skipping and fault injection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <float.h>
#include <math.h>
#include <string.h>
#include <cmocka.h>
#include <msgpack.h>

#include "rpc/frame.h"
#include "rpc/msgpack.h"
#include "util/buf.h"
#include "util/mem.h"

/* ---- helpers ------------------------------------------------------------- */

#define BIG 70000 /* longer than the longest str/bin in the tables */

/* BIG bytes of a recognisable pattern for str/bin contents. */
static const uint8_t *pattern(void)
{
    static uint8_t p[BIG];
    if (p[1] == 0) {
        for (size_t i = 0; i < BIG; i++)
            p[i] = (uint8_t)('a' + i % 26);
    }
    return p;
}

/* One value of the boundary tables. */
typedef struct val {
    char t; /* u uint, i int, d double, s str, b bin, a array hdr, m map hdr, n nil, T/F bool */
    uint64_t u;
    int64_t i;
    double d;
    size_t len;  /* str/bin length, array/map count */
    size_t wire; /* expected encoded size (header only for a/m) */
} val_t;

/* clang-format off */
/* One boundary per entry, several to a line. */
#define U(v, n) {'u', (v), 0, 0, 0, (n)}
#define I(v, n) {'i', 0, (v), 0, 0, (n)}
#define S(l, n) {'s', 0, 0, 0, (l), (n)}
#define B(l, n) {'b', 0, 0, 0, (l), (n)}
#define A(l, n) {'a', 0, 0, 0, (l), (n)}
#define M(l, n) {'m', 0, 0, 0, (l), (n)}
#define D(v) {'d', 0, 0, (v), 0, 9}

static const val_t vals[] = {
    U(0, 1), U(127, 1), U(128, 2), U(255, 2), U(256, 3), U(65535, 3), U(65536, 5),
    U(UINT32_MAX, 5), U(UINT32_MAX + 1ull, 9), U(UINT64_MAX, 9),
    I(0, 1), I(5, 1), I(127, 1), I(128, 2), I(INT64_MAX, 9),
    I(-1, 1), I(-32, 1), I(-33, 2), I(-128, 2), I(-129, 3), I(INT16_MIN, 3),
    I(INT16_MIN - 1, 5), I(INT32_MIN, 5), I(INT32_MIN - 1ll, 9), I(INT64_MIN, 9),
    S(0, 1), S(31, 32), S(32, 34), S(255, 257), S(256, 259), S(65535, 65538), S(65536, 65541),
    B(0, 2), B(255, 257), B(256, 259), B(65535, 65538), B(65536, 65541),
    A(0, 1), A(15, 1), A(16, 3), A(65535, 3), A(65536, 5),
    M(0, 1), M(15, 1), M(16, 3), M(65536, 5),
    D(0.0), D(-0.0), D(1.5), D(-2.25e300), D(DBL_MAX), D(DBL_MIN), D(5e-324), D(INFINITY),
    {'n', 0, 0, 0, 0, 1}, {'T', 0, 0, 0, 0, 1}, {'F', 0, 0, 0, 0, 1},
};
/* clang-format on */

/* Contents of an array/map: nils, which every reader accepts. */
static size_t contents_of(const val_t *v)
{
    return v->t == 'a' ? v->len : v->t == 'm' ? 2 * v->len : 0;
}

static void write_val(mc_mp_writer_t *w, const val_t *v)
{
    switch (v->t) {
    case 'u':
        mc_mp_write_uint(w, v->u);
        break;
    case 'i':
        mc_mp_write_int(w, v->i);
        break;
    case 'd':
        mc_mp_write_double(w, v->d);
        break;
    case 's':
        mc_mp_write_str(w, pattern(), v->len);
        break;
    case 'b':
        mc_mp_write_bin(w, pattern(), v->len);
        break;
    case 'a':
        mc_mp_write_array(w, (uint32_t)v->len);
        break;
    case 'm':
        mc_mp_write_map(w, (uint32_t)v->len);
        break;
    case 'n':
        mc_mp_write_nil(w);
        break;
    default:
        mc_mp_write_bool(w, v->t == 'T');
        break;
    }
    for (size_t k = 0; k < contents_of(v); k++)
        mc_mp_write_nil(w);
}

static void pack_val(msgpack_packer *pk, const val_t *v)
{
    switch (v->t) {
    case 'u':
        msgpack_pack_uint64(pk, v->u);
        break;
    case 'i':
        msgpack_pack_int64(pk, v->i);
        break;
    case 'd':
        msgpack_pack_double(pk, v->d);
        break;
    case 's':
        msgpack_pack_str(pk, v->len);
        msgpack_pack_str_body(pk, pattern(), v->len);
        break;
    case 'b':
        msgpack_pack_bin(pk, v->len);
        msgpack_pack_bin_body(pk, pattern(), v->len);
        break;
    case 'a':
        msgpack_pack_array(pk, v->len);
        break;
    case 'm':
        msgpack_pack_map(pk, v->len);
        break;
    case 'n':
        msgpack_pack_nil(pk);
        break;
    case 'T':
        msgpack_pack_true(pk);
        break;
    default:
        msgpack_pack_false(pk);
        break;
    }
    for (size_t k = 0; k < contents_of(v); k++)
        msgpack_pack_nil(pk);
}

static int same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof(a)) == 0;
}

/* Read v back with our reader and check value and position. */
static void read_val(mc_mp_reader_t *r, const val_t *v)
{
    const uint8_t *start = r->p;
    uint32_t len = 12345;
    const void *p;

    switch (v->t) {
    case 'u':
        assert_true(mc_mp_read_uint(r) == v->u);
        break;
    case 'i':
        assert_true(mc_mp_read_int(r) == v->i);
        break;
    case 'd':
        assert_true(same_double(mc_mp_read_double(r), v->d));
        break;
    case 's':
        p = mc_mp_read_str(r, &len);
        assert_int_equal(len, v->len);
        assert_non_null(p);
        assert_memory_equal(p, pattern(), v->len);
        break;
    case 'b':
        p = mc_mp_read_bin(r, &len);
        assert_int_equal(len, v->len);
        assert_non_null(p);
        assert_memory_equal(p, pattern(), v->len);
        break;
    case 'a':
        assert_int_equal(mc_mp_read_array(r), v->len);
        break;
    case 'm':
        assert_int_equal(mc_mp_read_map(r), v->len);
        break;
    case 'n':
        assert_true(mc_mp_read_nil(r));
        break;
    default:
        assert_int_equal(mc_mp_read_bool(r), v->t == 'T');
        break;
    }
    assert_int_equal(r->err, MC_OK);
    assert_int_equal(r->p - start, v->wire);
    for (size_t k = 0; k < contents_of(v); k++)
        assert_true(mc_mp_read_nil(r));
}

/* Check the msgpack-c object o against v. */
static void check_object(const msgpack_object *o, const val_t *v)
{
    switch (v->t) {
    case 'u':
        assert_int_equal(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
        assert_true(o->via.u64 == v->u);
        break;
    case 'i':
        if (v->i >= 0) {
            assert_int_equal(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
            assert_true(o->via.u64 == (uint64_t)v->i);
        } else {
            assert_int_equal(o->type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
            assert_true(o->via.i64 == v->i);
        }
        break;
    case 'd':
        assert_int_equal(o->type, MSGPACK_OBJECT_FLOAT64);
        assert_true(same_double(o->via.f64, v->d));
        break;
    case 's':
        assert_int_equal(o->type, MSGPACK_OBJECT_STR);
        assert_int_equal(o->via.str.size, v->len);
        if (v->len)
            assert_memory_equal(o->via.str.ptr, pattern(), v->len);
        break;
    case 'b':
        assert_int_equal(o->type, MSGPACK_OBJECT_BIN);
        assert_int_equal(o->via.bin.size, v->len);
        if (v->len)
            assert_memory_equal(o->via.bin.ptr, pattern(), v->len);
        break;
    case 'a':
        assert_int_equal(o->type, MSGPACK_OBJECT_ARRAY);
        assert_int_equal(o->via.array.size, v->len);
        for (size_t k = 0; k < v->len; k++)
            assert_int_equal(o->via.array.ptr[k].type, MSGPACK_OBJECT_NIL);
        break;
    case 'm':
        assert_int_equal(o->type, MSGPACK_OBJECT_MAP);
        assert_int_equal(o->via.map.size, v->len);
        break;
    case 'n':
        assert_int_equal(o->type, MSGPACK_OBJECT_NIL);
        break;
    default:
        assert_int_equal(o->type, MSGPACK_OBJECT_BOOLEAN);
        assert_int_equal(o->via.boolean, v->t == 'T');
        break;
    }
}

/* Bytes in a reader over a writer's buffer. */
static void reader_over(mc_mp_reader_t *r, const mc_buf_t *b)
{
    mc_mp_reader_init(r, mc_buf_head(b), mc_buf_used(b));
}

static void reader_over_bytes(mc_mp_reader_t *r, const void *p, size_t n)
{
    mc_mp_reader_init(r, p, n);
}

/* ---- round trips at the boundaries --------------------------------------- */

static void every_boundary_value_round_trips_in_its_smallest_encoding(void **state)
{
    (void)state;
    for (size_t i = 0; i < MC_ARRAY_SIZE(vals); i++) {
        mc_buf_t b = MC_BUF_INIT;
        mc_mp_writer_t w;
        mc_mp_reader_t r;
        mc_mp_writer_init(&w, &b);
        write_val(&w, &vals[i]);
        assert_int_equal(w.err, MC_OK);
        assert_int_equal(mc_buf_used(&b), vals[i].wire + contents_of(&vals[i]));
        reader_over(&r, &b);
        read_val(&r, &vals[i]);
        assert_true(mc_mp_at_end(&r));
        mc_buf_fini(&b);
    }
}

static void an_array_counted_afterwards_reads_back_with_its_count(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    (void)state;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_map(&w, 2);
    mc_mp_write_uint(&w, 1);
    size_t at = mc_mp_write_array_later(&w);
    for (unsigned i = 0; i < 70000; i++) /* over any 16-bit count */
        mc_mp_write_uint(&w, i);
    mc_mp_patch_array(&w, at, 70000);
    mc_mp_write_uint(&w, 2);
    size_t empty = mc_mp_write_array_later(&w);
    mc_mp_patch_array(&w, empty, 0);
    assert_int_equal(w.err, MC_OK);
    mc_mp_reader_t r;
    reader_over(&r, &b);
    assert_int_equal(mc_mp_read_map(&r), 2);
    assert_int_equal(mc_mp_read_uint(&r), 1);
    assert_int_equal(mc_mp_read_array(&r), 70000);
    for (unsigned i = 0; i < 70000; i++)
        assert_int_equal(mc_mp_read_uint(&r), i);
    assert_int_equal(mc_mp_read_uint(&r), 2);
    assert_int_equal(mc_mp_read_array(&r), 0);
    assert_int_equal(r.err, MC_OK);
    assert_true(r.p == r.end);
    mc_buf_fini(&b);
}

static void non_negative_ints_are_written_as_uints(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    (void)state;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_int(&w, 5);
    mc_mp_write_int(&w, 200);
    mc_mp_write_int(&w, INT64_MAX);
    static const uint8_t want[] = {0x05, 0xcc, 200,  0xcf, 0x7f, 0xff,
                                   0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(mc_buf_used(&b), sizeof(want));
    assert_memory_equal(mc_buf_head(&b), want, sizeof(want));
    mc_buf_fini(&b);
}

static void negative_ints_use_the_smallest_signed_encoding(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    (void)state;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_int(&w, -1);
    mc_mp_write_int(&w, -32);
    mc_mp_write_int(&w, -33);
    mc_mp_write_int(&w, -129);
    mc_mp_write_int(&w, INT64_MIN);
    static const uint8_t want[] = {0xff, 0xe0, 0xd0, 0xdf, 0xd1, 0xff, 0x7f, 0xd3,
                                   0x80, 0,    0,    0,    0,    0,    0,    0};
    assert_int_equal(mc_buf_used(&b), sizeof(want));
    assert_memory_equal(mc_buf_head(&b), want, sizeof(want));
    mc_buf_fini(&b);
}

static void nan_round_trips_as_nan(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_reader_t r;
    (void)state;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_double(&w, NAN);
    reader_over(&r, &b);
    assert_true(isnan(mc_mp_read_double(&r)));
    assert_int_equal(r.err, MC_OK);
    mc_buf_fini(&b);
}

static void cstr_writes_the_string_and_null_as_nil(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_reader_t r;
    uint32_t len;
    (void)state;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_cstr(&w, "key");
    mc_mp_write_cstr(&w, NULL);
    mc_mp_write_cstr(&w, "");
    reader_over(&r, &b);
    const char *s = mc_mp_read_str(&r, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(s, "key", 3);
    assert_true(mc_mp_read_nil(&r));
    assert_non_null(mc_mp_read_str(&r, &len));
    assert_int_equal(len, 0);
    assert_true(mc_mp_at_end(&r));
    assert_int_equal(r.err, MC_OK);
    mc_buf_fini(&b);
}

static void array32_and_map32_headers_hold_the_largest_counts(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_reader_t r;
    (void)state;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_array(&w, UINT32_MAX);
    mc_mp_write_map(&w, UINT32_MAX);
    static const uint8_t want[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0xdf, 0xff, 0xff, 0xff, 0xff};
    assert_memory_equal(mc_buf_head(&b), want, sizeof(want));
    /* Without the 4G elements behind them, the reader calls them truncated. */
    reader_over(&r, &b);
    assert_int_equal(mc_mp_read_array(&r), 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    mc_buf_fini(&b);
}

/* ---- compatibility with msgpack-c ------------------------------------------ */

static void writer_bytes_equal_msgpack_c_packer_bytes(void **state)
{
    (void)state;
    for (size_t i = 0; i < MC_ARRAY_SIZE(vals); i++) {
        mc_buf_t b = MC_BUF_INIT;
        mc_mp_writer_t w;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        mc_mp_writer_init(&w, &b);
        write_val(&w, &vals[i]);
        pack_val(&pk, &vals[i]);
        assert_int_equal(mc_buf_used(&b), sb.size);
        assert_memory_equal(mc_buf_head(&b), sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
        mc_buf_fini(&b);
    }
}

static void writer_output_unpacks_with_msgpack_c(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    msgpack_unpacked u;
    size_t off = 0;
    (void)state;
    mc_mp_writer_init(&w, &b);
    for (size_t i = 0; i < MC_ARRAY_SIZE(vals); i++)
        write_val(&w, &vals[i]);
    assert_int_equal(w.err, MC_OK);
    msgpack_unpacked_init(&u);
    for (size_t i = 0; i < MC_ARRAY_SIZE(vals); i++) {
        size_t before = off;
        assert_int_equal(
            msgpack_unpack_next(&u, (const char *)mc_buf_head(&b), mc_buf_used(&b), &off),
            MSGPACK_UNPACK_SUCCESS);
        check_object(&u.data, &vals[i]);
        assert_int_equal(off - before, vals[i].wire + contents_of(&vals[i]));
    }
    assert_int_equal(off, mc_buf_used(&b));
    msgpack_unpacked_destroy(&u);
    mc_buf_fini(&b);
}

static void msgpack_c_packer_output_reads_with_our_reader(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    mc_mp_reader_t r;
    (void)state;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (size_t i = 0; i < MC_ARRAY_SIZE(vals); i++)
        pack_val(&pk, &vals[i]);
    reader_over_bytes(&r, sb.data, sb.size);
    for (size_t i = 0; i < MC_ARRAY_SIZE(vals); i++)
        read_val(&r, &vals[i]);
    assert_true(mc_mp_at_end(&r));
    msgpack_sbuffer_destroy(&sb);
}

static void msgpack_c_fixed_width_and_legacy_encodings_read_correctly(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    mc_mp_reader_t r;
    uint32_t len;
    (void)state;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_fix_uint8(&pk, 1);
    msgpack_pack_fix_uint16(&pk, 2);
    msgpack_pack_fix_uint32(&pk, 3);
    msgpack_pack_fix_uint64(&pk, 4);
    msgpack_pack_fix_int8(&pk, 5);
    msgpack_pack_fix_int16(&pk, -6);
    msgpack_pack_fix_int32(&pk, 7);
    msgpack_pack_fix_int64(&pk, INT64_MIN);
    msgpack_pack_float(&pk, 0.25f);
    msgpack_pack_v4raw(&pk, 40); /* old-spec raw: str16 for 32..65535 bytes */
    msgpack_pack_v4raw_body(&pk, pattern(), 40);
    msgpack_pack_ext(&pk, 3, 7);
    msgpack_pack_ext_body(&pk, "xyz", 3);
    msgpack_pack_uint8(&pk, 9);

    reader_over_bytes(&r, sb.data, sb.size);
    assert_true(mc_mp_read_uint(&r) == 1);
    assert_true(mc_mp_read_uint(&r) == 2);
    assert_true(mc_mp_read_int(&r) == 3);
    assert_true(mc_mp_read_int(&r) == 4);
    assert_true(mc_mp_read_uint(&r) == 5);
    assert_true(mc_mp_read_int(&r) == -6);
    assert_true(mc_mp_read_uint(&r) == 7);
    assert_true(mc_mp_read_int(&r) == INT64_MIN);
    assert_true(mc_mp_read_double(&r) == 0.25);
    const char *s = mc_mp_read_str(&r, &len);
    assert_int_equal(len, 40);
    assert_memory_equal(s, pattern(), 40);
    assert_int_equal(mc_mp_peek(&r), MC_MP_EXT);
    mc_mp_skip(&r);
    assert_true(mc_mp_read_uint(&r) == 9);
    assert_int_equal(r.err, MC_OK);
    assert_true(mc_mp_at_end(&r));
    msgpack_sbuffer_destroy(&sb);
}

/* ---- reader leniency and strictness ---------------------------------------- */

static void read_uint_accepts_non_negative_signed_encodings(void **state)
{
    static const uint8_t in[] = {0xd0, 0x7f, 0xd1, 0x01, 0x00, 0xd2, 0x00, 0x01, 0x00, 0x00,
                                 0xd3, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    mc_mp_reader_t r;
    (void)state;
    reader_over_bytes(&r, in, sizeof(in));
    assert_true(mc_mp_read_uint(&r) == 127);
    assert_true(mc_mp_read_uint(&r) == 256);
    assert_true(mc_mp_read_uint(&r) == 65536);
    assert_true(mc_mp_read_uint(&r) == INT64_MAX);
    assert_int_equal(r.err, MC_OK);
    assert_true(mc_mp_at_end(&r));
}

static void read_uint_rejects_negative_values(void **state)
{
    static const uint8_t fixint[] = {0xff};
    static const uint8_t int64[] = {0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0};
    mc_mp_reader_t r;
    (void)state;
    reader_over_bytes(&r, fixint, sizeof(fixint));
    assert_true(mc_mp_read_uint(&r) == 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    reader_over_bytes(&r, int64, sizeof(int64));
    assert_true(mc_mp_read_uint(&r) == 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
}

static void read_int_accepts_uints_up_to_int64_max_only(void **state)
{
    static const uint8_t max[] = {0xcf, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t over[] = {0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0};
    mc_mp_reader_t r;
    (void)state;
    reader_over_bytes(&r, max, sizeof(max));
    assert_true(mc_mp_read_int(&r) == INT64_MAX);
    assert_int_equal(r.err, MC_OK);
    reader_over_bytes(&r, over, sizeof(over));
    assert_true(mc_mp_read_int(&r) == 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    assert_ptr_equal(r.p, over);
}

static void read_double_accepts_float32_and_integers(void **state)
{
    static const uint8_t in[] = {0xca, 0xc0, 0x20, 0x00, 0x00, /* float32 -2.5 */
                                 0x07, 0xe0, 0xcd, 0x01, 0x00};
    mc_mp_reader_t r;
    (void)state;
    reader_over_bytes(&r, in, sizeof(in));
    assert_true(mc_mp_read_double(&r) == -2.5);
    assert_true(mc_mp_read_double(&r) == 7.0);
    assert_true(mc_mp_read_double(&r) == -32.0);
    assert_true(mc_mp_read_double(&r) == 256.0);
    assert_int_equal(r.err, MC_OK);
}

static void read_bin_accepts_str_but_read_str_rejects_bin(void **state)
{
    static const uint8_t in[] = {0xa2, 'h', 'i', 0xc4, 0x01, 'x'};
    mc_mp_reader_t r;
    uint32_t len;
    (void)state;
    reader_over_bytes(&r, in, sizeof(in));
    const void *p = mc_mp_read_bin(&r, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(p, "hi", 2);
    assert_null(mc_mp_read_str(&r, &len));
    assert_int_equal(len, 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
}

static void read_nil_consumes_only_a_nil(void **state)
{
    static const uint8_t in[] = {0x01, 0xc0};
    mc_mp_reader_t r;
    (void)state;
    reader_over_bytes(&r, in, sizeof(in));
    assert_false(mc_mp_read_nil(&r));
    assert_int_equal(r.err, MC_OK);
    assert_ptr_equal(r.p, in);
    assert_true(mc_mp_read_uint(&r) == 1);
    assert_true(mc_mp_read_nil(&r));
    assert_false(mc_mp_read_nil(&r)); /* at end */
    assert_int_equal(r.err, MC_OK);
}

static void type_mismatches_set_err_and_return_zeros_without_consuming(void **state)
{
    static const uint8_t str[] = {0xa1, 'x'};
    static const uint8_t num[] = {0x05};
    static const uint8_t arr[] = {0x91, 0x01};
    static const uint8_t nil[] = {0xc0};
    mc_mp_reader_t r;
    uint32_t len = 7;
    (void)state;

    reader_over_bytes(&r, str, sizeof(str));
    assert_true(mc_mp_read_uint(&r) == 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    assert_ptr_equal(r.p, str);
    reader_over_bytes(&r, str, sizeof(str));
    assert_true(mc_mp_read_int(&r) == 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    reader_over_bytes(&r, str, sizeof(str));
    assert_true(mc_mp_read_double(&r) == 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    reader_over_bytes(&r, num, sizeof(num));
    assert_null(mc_mp_read_str(&r, &len));
    assert_int_equal(len, 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    reader_over_bytes(&r, num, sizeof(num));
    assert_null(mc_mp_read_bin(&r, &len));
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    reader_over_bytes(&r, arr, sizeof(arr));
    assert_int_equal(mc_mp_read_map(&r), 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    assert_ptr_equal(r.p, arr);
    reader_over_bytes(&r, nil, sizeof(nil));
    assert_int_equal(mc_mp_read_array(&r), 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    reader_over_bytes(&r, nil, sizeof(nil));
    assert_int_equal(mc_mp_read_bool(&r), 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    assert_ptr_equal(r.p, nil);
}

static void errors_are_sticky(void **state)
{
    static const uint8_t in[] = {0xa1, 'x', 0x05, 0xc0, 0x80};
    mc_mp_reader_t r;
    uint32_t len = 7;
    (void)state;
    reader_over_bytes(&r, in, sizeof(in));
    (void)mc_mp_read_uint(&r); /* a str: mismatch */
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    assert_null(mc_mp_read_str(&r, &len)); /* would match, but err is set */
    assert_int_equal(len, 0);
    assert_int_equal(mc_mp_peek(&r), MC_MP_NONE);
    assert_false(mc_mp_read_nil(&r));
    mc_mp_skip(&r);
    assert_ptr_equal(r.p, in);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
}

static void truncated_values_set_err(void **state)
{
    static const uint8_t u16[] = {0xcd, 0x01};
    static const uint8_t str[] = {0xa5, 'a', 'b'};
    static const uint8_t str16[] = {0xda, 0x00};
    static const uint8_t f64[] = {0xcb, 0, 0, 0};
    mc_mp_reader_t r;
    uint32_t len;
    (void)state;
    reader_over_bytes(&r, u16, sizeof(u16));
    assert_true(mc_mp_read_uint(&r) == 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    reader_over_bytes(&r, str, sizeof(str));
    assert_null(mc_mp_read_str(&r, &len));
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    reader_over_bytes(&r, str16, sizeof(str16));
    assert_null(mc_mp_read_bin(&r, &len));
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    reader_over_bytes(&r, f64, sizeof(f64));
    assert_true(mc_mp_read_double(&r) == 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    reader_over_bytes(&r, u16, 0);
    assert_true(mc_mp_read_uint(&r) == 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
}

static void container_counts_larger_than_the_bytes_left_set_err(void **state)
{
    static const uint8_t map[] = {0x82, 0x01, 0x02, 0x03};
    static const uint8_t arr[] = {0xdc, 0x00, 0x03, 0x01, 0x02};
    mc_mp_reader_t r;
    (void)state;
    reader_over_bytes(&r, map, sizeof(map));
    assert_int_equal(mc_mp_read_map(&r), 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
    reader_over_bytes(&r, arr, sizeof(arr));
    assert_int_equal(mc_mp_read_array(&r), 0);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
}

static mc_mp_type_t expected_type(unsigned b)
{
    if (b <= 0x7f || (b >= 0xcc && b <= 0xcf))
        return MC_MP_UINT;
    if (b >= 0xe0 || (b >= 0xd0 && b <= 0xd3))
        return MC_MP_INT;
    if (b <= 0x8f || b == 0xde || b == 0xdf)
        return MC_MP_MAP;
    if (b <= 0x9f || b == 0xdc || b == 0xdd)
        return MC_MP_ARRAY;
    if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb))
        return MC_MP_STR;
    if (b >= 0xc4 && b <= 0xc6)
        return MC_MP_BIN;
    if ((b >= 0xc7 && b <= 0xc9) || (b >= 0xd4 && b <= 0xd8))
        return MC_MP_EXT;
    if (b == 0xca || b == 0xcb)
        return MC_MP_FLOAT;
    if (b == 0xc0)
        return MC_MP_NIL;
    if (b == 0xc2 || b == 0xc3)
        return MC_MP_BOOL;
    return MC_MP_NONE; /* 0xc1 */
}

static void peek_names_the_type_of_every_first_byte(void **state)
{
    mc_mp_reader_t r;
    (void)state;
    for (unsigned b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        reader_over_bytes(&r, &byte, 1);
        assert_int_equal(mc_mp_peek(&r), expected_type(b));
        assert_ptr_equal(r.p, &byte);
    }
    reader_over_bytes(&r, "", 0);
    assert_int_equal(mc_mp_peek(&r), MC_MP_NONE);
}

/* ---- skip -------------------------------------------------------------------- */

static void skip_passes_over_nested_values_of_every_type(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_reader_t r;
    static const uint8_t ext[] = {
        0xd4, 1, 0,                                              /* fixext1 */
        0xd8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* fixext16 */
        0xc7, 1, 5, 0,                                           /* ext8 */
        0xc8, 0, 1, 5, 0,                                        /* ext16 */
        0xc9, 0, 0, 0, 1, 5, 0,                                  /* ext32 */
        0xca, 0, 0, 0, 0,                                        /* float32 */
    };
    (void)state;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_map(&w, 2);
    mc_mp_write_cstr(&w, "a");
    mc_mp_write_array(&w, 4);
    mc_mp_write_map(&w, 1);
    mc_mp_write_int(&w, -1000);
    mc_mp_write_array(&w, 0);
    mc_mp_write_bin(&w, pattern(), 300);
    mc_mp_write_str(&w, pattern(), 70);
    mc_mp_write_array(&w, 6);
    assert_int_equal(mc_buf_append(&b, ext, sizeof(ext)), MC_OK);
    mc_mp_write_uint(&w, 7);
    mc_mp_write_double(&w, 1.0);
    mc_mp_write_uint(&w, 424242); /* the value after the skipped one */
    reader_over(&r, &b);
    mc_mp_skip(&r);
    assert_int_equal(r.err, MC_OK);
    assert_true(mc_mp_read_uint(&r) == 424242);
    assert_true(mc_mp_at_end(&r));
    mc_buf_fini(&b);
}

static void skip_of_a_truncated_structure_sets_err_and_stays_put(void **state)
{
    static const uint8_t in[] = {0x92, 0x81, 0x01, 0xa3, 'a'};
    mc_mp_reader_t r;
    (void)state;
    for (size_t n = 0; n < sizeof(in); n++) {
        reader_over_bytes(&r, in, n);
        mc_mp_skip(&r);
        assert_int_equal(r.err, MC_ERR_PROTOCOL);
        assert_ptr_equal(r.p, in);
    }
}

static void skip_rejects_byte_0xc1(void **state)
{
    static const uint8_t in[] = {0x91, 0xc1};
    mc_mp_reader_t r;
    (void)state;
    reader_over_bytes(&r, in, sizeof(in));
    mc_mp_skip(&r);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
}

static void skip_of_a_4g_element_claim_fails_fast(void **state)
{
    static const uint8_t in[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02, 0x03, 0x04, 0x05};
    mc_mp_reader_t r;
    (void)state;
    reader_over_bytes(&r, in, sizeof(in));
    mc_mp_skip(&r);
    assert_int_equal(r.err, MC_ERR_PROTOCOL);
}

static void deep_nesting_is_skipped_without_recursion(void **state)
{
    static uint8_t in[100001];
    mc_mp_reader_t r;
    (void)state;
    memset(in, 0x91, sizeof(in) - 1); /* 100000 nested one-element arrays */
    in[sizeof(in) - 1] = 0xc0;
    reader_over_bytes(&r, in, sizeof(in));
    mc_mp_skip(&r);
    assert_int_equal(r.err, MC_OK);
    assert_true(mc_mp_at_end(&r));
}

/* ---- typical use, limits, faults ------------------------------------------- */

static void request_decoding_skips_unknown_fields(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_reader_t r;
    const char *key = NULL;
    uint32_t klen = 0;
    uint64_t size = 0;
    (void)state;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_map(&w, 3);
    mc_mp_write_uint(&w, 1);
    mc_mp_write_cstr(&w, "object-key");
    mc_mp_write_uint(&w, 99); /* a field from a newer peer */
    mc_mp_write_array(&w, 2);
    mc_mp_write_cstr(&w, "x");
    mc_mp_write_map(&w, 0);
    mc_mp_write_uint(&w, 2);
    mc_mp_write_uint(&w, 1u << 30);
    assert_int_equal(mc_mp_validate(mc_buf_head(&b), mc_buf_used(&b), NULL, NULL), MC_OK);
    reader_over(&r, &b);
    uint32_t n = mc_mp_read_map(&r);
    for (uint32_t i = 0; i < n; i++) {
        switch (mc_mp_read_uint(&r)) {
        case 1:
            key = mc_mp_read_str(&r, &klen);
            break;
        case 2:
            size = mc_mp_read_uint(&r);
            break;
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    assert_int_equal(r.err, MC_OK);
    assert_true(mc_mp_at_end(&r));
    assert_int_equal(klen, 10);
    assert_memory_equal(key, "object-key", 10);
    assert_true(size == 1u << 30);
    mc_buf_fini(&b);
}

static void validate_accepts_an_empty_body_with_null_limits(void **state)
{
    (void)state;
    assert_int_equal(mc_mp_validate(NULL, 0, NULL, NULL), MC_OK);
}

static void validate_reports_the_reason_of_a_rejection(void **state)
{
    static const uint8_t in[] = {0x81, 0xa1, 'k', 0x01};
    const char *why = NULL;
    (void)state;
    assert_int_equal(mc_mp_validate(in, sizeof(in), NULL, &why), MC_ERR_PROTOCOL);
    assert_string_equal(why, "body: map key is not an unsigned integer");
    assert_int_equal(mc_mp_validate(in, sizeof(in), NULL, NULL), MC_ERR_PROTOCOL);
}

static void writer_out_of_memory_is_sticky(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    (void)state;
    mc_mp_writer_init(&w, &b);
    mc_mem_fail_nth(1);
    mc_mp_write_uint(&w, 1);
    mc_mem_fail_nth(0);
    assert_int_equal(w.err, MC_ERR_NOMEM);
    mc_mp_write_cstr(&w, "later writes are dropped");
    mc_mp_write_map(&w, 1);
    assert_int_equal(w.err, MC_ERR_NOMEM);
    assert_int_equal(mc_buf_used(&b), 0);
    mc_buf_fini(&b);
}

static void writer_out_of_memory_while_growing_keeps_what_was_written(void **state)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    (void)state;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_uint(&w, 7);
    mc_mem_fail_nth(1);
    mc_mp_write_bin(&w, pattern(), BIG); /* outgrows the first 4 KiB */
    mc_mem_fail_nth(0);
    assert_int_equal(w.err, MC_ERR_NOMEM);
    assert_int_equal(mc_buf_used(&b), 1);
    assert_int_equal(mc_buf_head(&b)[0], 7);
    mc_buf_fini(&b);
}

static void str_longer_than_4g_is_a_limit_error(void **state)
{
    (void)state;
#if SIZE_MAX > UINT32_MAX
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    /* The length is refused before the bytes are looked at. */
    mc_mp_write_str(&w, "x", (size_t)UINT32_MAX + 1);
    assert_int_equal(w.err, MC_ERR_LIMIT);
    assert_int_equal(mc_buf_used(&b), 0);
    mc_buf_fini(&b);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_boundary_value_round_trips_in_its_smallest_encoding),
        cmocka_unit_test(non_negative_ints_are_written_as_uints),
        cmocka_unit_test(an_array_counted_afterwards_reads_back_with_its_count),
        cmocka_unit_test(negative_ints_use_the_smallest_signed_encoding),
        cmocka_unit_test(nan_round_trips_as_nan),
        cmocka_unit_test(cstr_writes_the_string_and_null_as_nil),
        cmocka_unit_test(array32_and_map32_headers_hold_the_largest_counts),
        cmocka_unit_test(writer_bytes_equal_msgpack_c_packer_bytes),
        cmocka_unit_test(writer_output_unpacks_with_msgpack_c),
        cmocka_unit_test(msgpack_c_packer_output_reads_with_our_reader),
        cmocka_unit_test(msgpack_c_fixed_width_and_legacy_encodings_read_correctly),
        cmocka_unit_test(read_uint_accepts_non_negative_signed_encodings),
        cmocka_unit_test(read_uint_rejects_negative_values),
        cmocka_unit_test(read_int_accepts_uints_up_to_int64_max_only),
        cmocka_unit_test(read_double_accepts_float32_and_integers),
        cmocka_unit_test(read_bin_accepts_str_but_read_str_rejects_bin),
        cmocka_unit_test(read_nil_consumes_only_a_nil),
        cmocka_unit_test(type_mismatches_set_err_and_return_zeros_without_consuming),
        cmocka_unit_test(errors_are_sticky),
        cmocka_unit_test(truncated_values_set_err),
        cmocka_unit_test(container_counts_larger_than_the_bytes_left_set_err),
        cmocka_unit_test(peek_names_the_type_of_every_first_byte),
        cmocka_unit_test(skip_passes_over_nested_values_of_every_type),
        cmocka_unit_test(skip_of_a_truncated_structure_sets_err_and_stays_put),
        cmocka_unit_test(skip_rejects_byte_0xc1),
        cmocka_unit_test(skip_of_a_4g_element_claim_fails_fast),
        cmocka_unit_test(deep_nesting_is_skipped_without_recursion),
        cmocka_unit_test(request_decoding_skips_unknown_fields),
        cmocka_unit_test(validate_accepts_an_empty_body_with_null_limits),
        cmocka_unit_test(validate_reports_the_reason_of_a_rejection),
        cmocka_unit_test(writer_out_of_memory_is_sticky),
        cmocka_unit_test(writer_out_of_memory_while_growing_keeps_what_was_written),
        cmocka_unit_test(str_longer_than_4g_is_a_limit_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
