/* frame_fuzz - libFuzzer target for the frame decoder and the body reader.
 *
 * Input: one control byte, then the byte stream a connection would receive.
 *   bit 0     decode with tight limits (small bodies, depth 4) instead of defaults
 *   bits 1-7  where the stream is split into two arrivals (0 = nothing first,
 *             127 = everything first)
 * A resumable driver decodes frames as the bytes "arrive"; every decode sees an
 * exactly sized heap copy so ASan catches any read past the available bytes.
 * Each decoded frame's body is walked with the reader, which must read a
 * validated body to its end without error; then the reader is run over the raw
 * stream, which it must survive whatever it contains. Invariants that fail
 * abort(), which libFuzzer reports as a crash.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/frame.h"
#include "rpc/msgpack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

/* Read one value with the typed readers, descending into containers. The
 * body was validated, so depth is bounded by the limits. */
static void walk_value(mc_mp_reader_t *r, unsigned depth)
{
    uint32_t len, n;

    switch (mc_mp_peek(r)) {
    case MC_MP_NIL:
        check(mc_mp_read_nil(r));
        break;
    case MC_MP_BOOL:
        (void)mc_mp_read_bool(r);
        break;
    case MC_MP_UINT:
        (void)mc_mp_read_uint(r);
        break;
    case MC_MP_INT:
        (void)mc_mp_read_int(r);
        break;
    case MC_MP_FLOAT:
        (void)mc_mp_read_double(r);
        break;
    case MC_MP_STR:
        check(mc_mp_read_str(r, &len) != NULL);
        break;
    case MC_MP_BIN:
        check(mc_mp_read_bin(r, &len) != NULL);
        break;
    case MC_MP_ARRAY:
        n = mc_mp_read_array(r);
        for (uint32_t i = 0; i < n; i++) {
            if (i & 1)
                mc_mp_skip(r);
            else
                walk_value(r, depth + 1);
        }
        break;
    case MC_MP_MAP:
        n = mc_mp_read_map(r);
        for (uint32_t i = 0; i < n; i++) {
            walk_value(r, depth + 1);
            walk_value(r, depth + 1);
        }
        break;
    default:
        mc_mp_skip(r);
        break; /* ext */
    }
    check(depth <= 64);
}

/* The way a request handler reads a body: map of field id -> value. */
static void walk_body(const mc_frame_t *f)
{
    mc_mp_reader_t r;

    if (f->hdr.body_len == 0)
        return;
    mc_mp_reader_init(&r, f->body, f->hdr.body_len);
    uint32_t n = mc_mp_read_map(&r);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t key = mc_mp_read_uint(&r);
        if (key & 1)
            mc_mp_skip(&r);
        else
            walk_value(&r, 1);
    }
    check(r.err == MC_OK && mc_mp_at_end(&r));
}

/* The reader on unvalidated bytes: must stop with an error, never overrun. */
static void skim_raw(const uint8_t *p, size_t n)
{
    mc_mp_reader_t r;
    uint32_t len;

    if (n == 0)
        return;
    uint8_t *copy = malloc(n);
    memcpy(copy, p, n);
    mc_mp_reader_init(&r, copy, n);
    while (r.err == MC_OK && !mc_mp_at_end(&r)) {
        const uint8_t *before = r.p;
        switch (mc_mp_peek(&r)) {
        case MC_MP_STR:
            (void)mc_mp_read_str(&r, &len);
            break;
        case MC_MP_MAP:
            (void)mc_mp_read_map(&r);
            break;
        case MC_MP_ARRAY:
            (void)mc_mp_read_array(&r);
            break;
        case MC_MP_UINT:
            (void)mc_mp_read_uint(&r);
            break;
        default:
            mc_mp_skip(&r);
            break;
        }
        check(r.err != MC_OK || r.p > before);
        check(r.p <= r.end);
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const mc_frame_limits_t tight = {4096, 4096, 64, 16, 4};
    mc_frame_limits_t def;

    if (size < 1)
        return 0;
    mc_frame_limits_init(&def);
    const mc_frame_limits_t *lim = data[0] & 1 ? &tight : &def;
    const uint8_t *in = data + 1;
    size_t n = size - 1;
    size_t avail = (size_t)(data[0] >> 1) * n / 127; /* first arrival */
    size_t off = 0;

    for (;;) {
        size_t len = avail - off;
        uint8_t *copy = malloc(len ? len : 1);
        mc_frame_t f;
        mc_frame_hdr_t h;
        size_t need = 0;
        const char *why = NULL;

        if (len)
            memcpy(copy, in + off, len);
        mc_status_t st = mc_frame_decode(copy, len, lim, &f, &need, &why);
        mc_status_t hst = mc_frame_decode_hdr(copy, len, lim, &h, NULL);
        if (st == MC_OK) {
            uint8_t re[MC_FRAME_HDR_LEN];
            check(hst == MC_OK && f.frame_len <= len && f.body == copy + MC_FRAME_HDR_LEN);
            check(f.hdr.body_len <= lim->max_body && f.hdr.payload_len <= lim->max_payload);
            check((f.payload != NULL) == (f.hdr.payload_len != 0));
            mc_frame_encode_hdr(re, &f.hdr);
            check(memcmp(re, copy, MC_FRAME_HDR_LEN) == 0);
            walk_body(&f);
            off += f.frame_len;
            free(copy);
            continue;
        }
        free(copy);
        if (st == MC_AGAIN) {
            check(need > len && need >= MC_FRAME_HDR_LEN);
            check(len < MC_FRAME_HDR_LEN ? hst == MC_AGAIN : hst == MC_OK);
            if (avail == n)
                break;
            avail = n; /* the rest arrives */
            continue;
        }
        check(st == MC_ERR_PROTOCOL && why != NULL);
        /* Either the header is bad, or only the body is. */
        check(hst == MC_ERR_PROTOCOL || strncmp(why, "body: ", 6) == 0);
        break;
    }
    skim_raw(in, n);
    return 0;
}
