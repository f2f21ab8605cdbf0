/* proto.c - encoders and decoders of the store protocol's shared shapes. */
#include "store/proto.h"

#include <string.h>

void mc_proto_write_uuid(mc_mp_writer_t *w, mc_uuid_t id)
{
    mc_mp_write_array(w, 2);
    mc_mp_write_uint(w, id.hi);
    mc_mp_write_uint(w, id.lo);
}

mc_uuid_t mc_proto_read_uuid(mc_mp_reader_t *r)
{
    mc_uuid_t id = {0, 0};
    if (mc_mp_read_array(r) != 2) {
        r->err = MC_ERR_PROTOCOL;
        return id;
    }
    id.hi = mc_mp_read_uint(r);
    id.lo = mc_mp_read_uint(r);
    return id;
}

/* msgpack uint in its smallest form (as mc_mp_write_uint); returns the end. */
static uint8_t *put_uint(uint8_t *p, uint64_t v)
{
    if (v <= 0x7f) {
        *p++ = (uint8_t)v;
    } else if (v <= UINT8_MAX) {
        *p++ = 0xcc;
        *p++ = (uint8_t)v;
    } else if (v <= UINT16_MAX) {
        *p++ = 0xcd;
        *p++ = (uint8_t)(v >> 8);
        *p++ = (uint8_t)v;
    } else if (v <= UINT32_MAX) {
        *p++ = 0xce;
        for (int s = 24; s >= 0; s -= 8)
            *p++ = (uint8_t)(v >> s);
    } else {
        *p++ = 0xcf;
        for (int s = 56; s >= 0; s -= 8)
            *p++ = (uint8_t)(v >> s);
    }
    return p;
}

/* msgpack str of len < 256 bytes (as mc_mp_write_str). */
static uint8_t *put_name(uint8_t *p, const char *s, size_t len)
{
    if (len <= 31) {
        *p++ = (uint8_t)(0xa0 | len);
    } else {
        *p++ = 0xd9;
        *p++ = (uint8_t)len;
    }
    memcpy(p, s, len);
    return p + len;
}

/* Most bytes one descriptor takes besides its two names: fixmap, six one-byte
 * keys, address and size (9 each), the uuid (fixarray + 2 x 9), the status
 * (9), the two names' headers (2 each). */
#define DESC_FIXED_MAX (1 + 6 + 9 + 9 + 19 + 9 + 2 + 2 + 2)

/* The same bytes the mc_mp_write_* calls would produce, written directly: a
 * batch reply holds one descriptor per key, and a dozen writer calls per
 * descriptor (each checking room and errors) were a tenth of the master's CPU
 * time under BatchPutStart. */
void mc_proto_write_replicas(mc_mp_writer_t *w, const mc_master_replica_desc_t *d, uint32_t n)
{
    mc_mp_write_array(w, n);
    for (uint32_t i = 0; i < n && w->err == MC_OK; i++) {
        /* names are NUL-terminated and shorter than MC_MASTER_NAME_MAX */
        size_t nl = strnlen(d[i].segment_name, MC_MASTER_NAME_MAX - 1);
        size_t el = strnlen(d[i].te_endpoint, MC_MASTER_NAME_MAX - 1);
        size_t room = DESC_FIXED_MAX + nl + el;
        if (mc_buf_room(w->buf) < room) {
            mc_status_t st = mc_buf_reserve(w->buf, room);
            if (st != MC_OK) {
                w->err = st;
                return;
            }
        }
        uint8_t *p0 = mc_buf_tail(w->buf), *p = p0;
        int disk = d[i].kind != MC_MASTER_REPLICA_MEMORY;
        *p++ = disk ? 0x87 : 0x86; /* fixmap, 6 entries (7 with the kind) */
        *p++ = 1;
        p = put_uint(p, d[i].address);
        *p++ = 2;
        p = put_uint(p, d[i].size);
        *p++ = 3;
        *p++ = 0x92; /* uuid: fixarray of 2 */
        p = put_uint(p, d[i].segment_id.hi);
        p = put_uint(p, d[i].segment_id.lo);
        *p++ = 4;
        p = put_uint(p, (uint64_t)d[i].status);
        *p++ = 5;
        p = put_name(p, d[i].segment_name, nl);
        *p++ = 6;
        p = put_name(p, d[i].te_endpoint, el);
        if (disk) {
            *p++ = 7;                  /* kind; absent = MEMORY, as older peers send */
            *p++ = (uint8_t)d[i].kind; /* positive fixint: DISK or LOCAL_DISK */
        }
        mc_buf_produce(w->buf, (size_t)(p - p0));
    }
}

/* Copy a str/bin field into a fixed buffer; too long is a protocol error. */
static void read_name(mc_mp_reader_t *r, char *dst, size_t room)
{
    uint32_t len = 0;
    const char *s = mc_mp_read_bin(r, &len);
    if (r->err != MC_OK)
        return;
    if (len >= room || memchr(s, '\0', len) != NULL) {
        r->err = MC_ERR_PROTOCOL;
        return;
    }
    memcpy(dst, s, len);
    dst[len] = '\0';
}

void mc_proto_read_replicas(mc_mp_reader_t *r, mc_master_replica_desc_t *d, uint32_t room,
                            uint32_t *n)
{
    uint32_t cnt = mc_mp_read_array(r);
    *n = 0;
    if (cnt > room) {
        r->err = MC_ERR_PROTOCOL;
        return;
    }
    for (uint32_t i = 0; i < cnt && r->err == MC_OK; i++) {
        memset(&d[i], 0, sizeof(d[i]));
        uint32_t nf = mc_mp_read_map(r);
        for (uint32_t f = 0; f < nf && r->err == MC_OK; f++) {
            switch (mc_mp_read_uint(r)) {
            case 1:
                d[i].address = mc_mp_read_uint(r);
                break;
            case 2:
                d[i].size = mc_mp_read_uint(r);
                break;
            case 3:
                d[i].segment_id = mc_proto_read_uuid(r);
                break;
            case 4:
                d[i].status = (mc_master_replica_status_t)mc_mp_read_uint(r);
                break;
            case 5:
                read_name(r, d[i].segment_name, sizeof(d[i].segment_name));
                break;
            case 6:
                read_name(r, d[i].te_endpoint, sizeof(d[i].te_endpoint));
                break;
            case 7: {
                uint64_t k = mc_mp_read_uint(r);
                if (k != MC_MASTER_REPLICA_MEMORY && k != MC_MASTER_REPLICA_DISK &&
                    k != MC_MASTER_REPLICA_LOCAL_DISK)
                    r->err = MC_ERR_PROTOCOL; /* a kind we cannot read from */
                d[i].kind = (mc_master_replica_kind_t)k;
                break;
            }
            default:
                mc_mp_skip(r);
                break;
            }
        }
    }
    if (r->err == MC_OK)
        *n = cnt;
}

void mc_proto_write_segment(mc_mp_writer_t *w, const mc_master_segment_t *s)
{
    mc_mp_write_map(w, 5);
    mc_mp_write_uint(w, 1);
    mc_proto_write_uuid(w, s->id);
    mc_mp_write_uint(w, 2);
    mc_mp_write_cstr(w, s->name ? s->name : "");
    mc_mp_write_uint(w, 3);
    mc_mp_write_uint(w, s->base);
    mc_mp_write_uint(w, 4);
    mc_mp_write_uint(w, s->size);
    mc_mp_write_uint(w, 5);
    mc_mp_write_cstr(w, s->te_endpoint ? s->te_endpoint : "");
}

void mc_proto_read_segment(mc_mp_reader_t *r, mc_proto_segment_t *out, const char **why)
{
    memset(out, 0, sizeof(*out));
    out->seg.name = out->name;
    out->seg.te_endpoint = out->te_endpoint;
    uint32_t nf = mc_mp_read_map(r);
    for (uint32_t f = 0; f < nf && r->err == MC_OK; f++) {
        switch (mc_mp_read_uint(r)) {
        case 1:
            out->seg.id = mc_proto_read_uuid(r);
            break;
        case 2:
            read_name(r, out->name, sizeof(out->name));
            if (r->err != MC_OK)
                *why = "segment name too long or not text";
            break;
        case 3:
            out->seg.base = mc_mp_read_uint(r);
            break;
        case 4:
            out->seg.size = mc_mp_read_uint(r);
            break;
        case 5:
            read_name(r, out->te_endpoint, sizeof(out->te_endpoint));
            if (r->err != MC_OK)
                *why = "segment te_endpoint too long or not text";
            break;
        default:
            mc_mp_skip(r);
            break;
        }
    }
}

void mc_proto_write_put_cfg(mc_mp_writer_t *w, const mc_master_put_cfg_t *c)
{
    mc_mp_write_map(w, 7);
    mc_mp_write_uint(w, 1);
    mc_mp_write_uint(w, c->replica_num);
    mc_mp_write_uint(w, 2);
    mc_mp_write_bool(w, c->with_soft_pin);
    mc_mp_write_uint(w, 3);
    mc_mp_write_array(w, (uint32_t)c->n_preferred);
    for (size_t i = 0; i < c->n_preferred; i++)
        mc_mp_write_cstr(w, c->preferred_segments[i]);
    mc_mp_write_uint(w, 4);
    mc_mp_write_uint(w, c->soft_pin_ttl_us);
    mc_mp_write_uint(w, 5);
    mc_mp_write_uint(w, c->pin_action);
    mc_mp_write_uint(w, 6);
    mc_mp_write_bool(w, c->hard_pin);
    mc_mp_write_uint(w, 7);
    mc_mp_write_bool(w, c->upsert);
}

void mc_proto_put_cfg_init(mc_proto_put_cfg_t *out)
{
    mc_master_put_cfg_init(&out->cfg);
    out->cfg.preferred_segments = out->pref;
    out->cfg.n_preferred = 0;
}

void mc_proto_read_put_cfg(mc_mp_reader_t *r, mc_proto_put_cfg_t *out, const char **why)
{
    mc_proto_put_cfg_init(out);
    uint32_t nf = mc_mp_read_map(r);
    for (uint32_t f = 0; f < nf && r->err == MC_OK; f++) {
        switch (mc_mp_read_uint(r)) {
        case 1:
            out->cfg.replica_num = (uint32_t)mc_mp_read_uint(r);
            break;
        case 2:
            out->cfg.with_soft_pin = mc_mp_read_bool(r);
            break;
        case 3: {
            uint32_t n = mc_mp_read_array(r);
            if (n > MC_PROTO_MAX_PREFERRED) {
                *why = "too many preferred segments";
                r->err = MC_ERR_PROTOCOL;
                break;
            }
            for (uint32_t i = 0; i < n && r->err == MC_OK; i++) {
                read_name(r, out->names[i], sizeof(out->names[i]));
                out->pref[i] = out->names[i];
            }
            out->cfg.n_preferred = n;
            break;
        }
        case 4:
            out->cfg.soft_pin_ttl_us = mc_mp_read_uint(r);
            break;
        case 5: {
            uint64_t a = mc_mp_read_uint(r);
            /* out of range stays out of range: the master refuses it */
            out->cfg.pin_action = a > 255 ? 255 : (uint8_t)a;
            break;
        }
        case 6:
            out->cfg.hard_pin = mc_mp_read_bool(r);
            break;
        case 7:
            out->cfg.upsert = mc_mp_read_bool(r);
            break;
        default:
            mc_mp_skip(r);
            break;
        }
    }
}
