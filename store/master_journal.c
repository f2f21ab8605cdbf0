/*
 * master_journal.c - the journal record codec (master_ha.h). Pure: no I/O,
 * no allocation. The decoder trusts nothing: every field's type, every count
 * and every length is checked, and a record that fails any check is reported
 * with what was wrong.
 */
#include <string.h>

#include "store/master_ha.h"

void mc_jrec_encode(mc_mp_writer_t *w, const mc_master_jrec_t *r)
{
    switch (r->type) {
    case MC_JREC_MOUNT:
        mc_mp_write_array(w, 3);
        mc_mp_write_uint(w, r->type);
        mc_proto_write_uuid(w, r->client);
        mc_proto_write_segment(w, &r->seg);
        return;
    case MC_JREC_UNMOUNT:
        mc_mp_write_array(w, 3);
        mc_mp_write_uint(w, r->type);
        mc_proto_write_uuid(w, r->client);
        mc_proto_write_uuid(w, r->segment_id);
        return;
    case MC_JREC_PUT_START:
        mc_mp_write_array(w, 7);
        mc_mp_write_uint(w, r->type);
        mc_proto_write_uuid(w, r->client);
        mc_mp_write_bin(w, r->key, r->key_len);
        mc_mp_write_uint(w, r->size);
        mc_mp_write_uint(w, r->pin_ttl_ms);
        mc_mp_write_uint(w, r->put_id);
        mc_mp_write_array(w, r->nrep);
        for (uint32_t i = 0; i < r->nrep; i++) {
            mc_mp_write_array(w, 2);
            mc_proto_write_uuid(w, r->rep[i].segment_id);
            mc_mp_write_uint(w, r->rep[i].offset);
        }
        return;
    case MC_JREC_PUT_END:
        mc_mp_write_array(w, 3);
        mc_mp_write_uint(w, r->type);
        mc_proto_write_uuid(w, r->client);
        mc_mp_write_bin(w, r->key, r->key_len);
        return;
    case MC_JREC_DROP:
        mc_mp_write_array(w, 3);
        mc_mp_write_uint(w, r->type);
        mc_mp_write_bin(w, r->key, r->key_len);
        mc_mp_write_bool(w, r->park);
        return;
    case MC_JREC_CLIENT_EXPIRE:
        mc_mp_write_array(w, 2);
        mc_mp_write_uint(w, r->type);
        mc_proto_write_uuid(w, r->client);
        return;
    case MC_JREC_META_PUT:
        mc_mp_write_array(w, 4);
        mc_mp_write_uint(w, r->type);
        mc_proto_write_uuid(w, r->client);
        mc_mp_write_bin(w, r->key, r->key_len);
        mc_mp_write_bin(w, r->val, r->val_len);
        return;
    case MC_JREC_META_DEL:
        mc_mp_write_array(w, 2);
        mc_mp_write_uint(w, r->type);
        mc_mp_write_bin(w, r->key, r->key_len);
        return;
    case MC_JREC_RELEASE:
        mc_mp_write_array(w, 4);
        mc_mp_write_uint(w, r->type);
        mc_mp_write_bin(w, r->key, r->key_len);
        mc_proto_write_uuid(w, r->rep[0].segment_id);
        mc_mp_write_uint(w, r->rep[0].offset);
        return;
    case MC_JREC_DISK:
        mc_mp_write_array(w, 3);
        mc_mp_write_uint(w, r->type);
        mc_mp_write_bin(w, r->key, r->key_len);
        mc_mp_write_uint(w, r->size);
        return;
    case MC_JREC_SPILL:
    case MC_JREC_LDISK_DROP:
        mc_mp_write_array(w, 2);
        mc_mp_write_uint(w, r->type);
        mc_mp_write_bin(w, r->key, r->key_len);
        return;
    case MC_JREC_LOAD:
        mc_mp_write_array(w, 4);
        mc_mp_write_uint(w, r->type);
        mc_mp_write_bin(w, r->key, r->key_len);
        mc_proto_write_uuid(w, r->rep[0].segment_id);
        mc_mp_write_uint(w, r->rep[0].offset);
        return;
    case MC_JREC_LDISK:
        mc_mp_write_array(w, 4);
        mc_mp_write_uint(w, r->type);
        mc_mp_write_bin(w, r->key, r->key_len);
        mc_mp_write_uint(w, r->size);
        mc_proto_write_uuid(w, r->segment_id);
        return;
    case MC_JREC_SEG_DISK:
        mc_mp_write_array(w, 3);
        mc_mp_write_uint(w, r->type);
        mc_proto_write_uuid(w, r->segment_id);
        mc_mp_write_uint(w, r->disk_hash);
        return;
    case MC_JREC_OFFDEL:
        mc_mp_write_array(w, 5);
        mc_mp_write_uint(w, r->type);
        mc_mp_write_bin(w, r->key, r->key_len);
        mc_proto_write_uuid(w, r->segment_id);
        mc_mp_write_uint(w, r->disk_hash);
        mc_mp_write_bool(w, r->park);
        return;
    case MC_JREC_OFFLOST:
        mc_mp_write_array(w, 3);
        mc_mp_write_uint(w, r->type);
        mc_mp_write_uint(w, r->disk_hash);
        mc_mp_write_bool(w, r->park);
        return;
    }
    w->err = MC_ERR_INVALID_PARAMS; /* a record type the encoder does not know */
}

/* Fields each type has after the type itself. */
static const uint8_t nfields[MC_JREC_TYPE_MAX + 1] = {
    [MC_JREC_MOUNT] = 2,      [MC_JREC_UNMOUNT] = 2,  [MC_JREC_PUT_START] = 6,
    [MC_JREC_PUT_END] = 2,    [MC_JREC_DROP] = 2,     [MC_JREC_CLIENT_EXPIRE] = 1,
    [MC_JREC_META_PUT] = 3,   [MC_JREC_META_DEL] = 1, [MC_JREC_RELEASE] = 3,
    [MC_JREC_DISK] = 2,       [MC_JREC_SPILL] = 1,    [MC_JREC_LDISK] = 3,
    [MC_JREC_LDISK_DROP] = 1, [MC_JREC_LOAD] = 3,     [MC_JREC_SEG_DISK] = 2,
    [MC_JREC_OFFDEL] = 4,     [MC_JREC_OFFLOST] = 2,
};

static const char *read_key(mc_mp_reader_t *rd, mc_master_jrec_t *r)
{
    if (mc_mp_peek(rd) != MC_MP_BIN && mc_mp_peek(rd) != MC_MP_STR)
        return "key is not bin";
    uint32_t len = 0;
    r->key = mc_mp_read_bin(rd, &len);
    r->key_len = len;
    if (rd->err != MC_OK)
        return "key truncated";
    if (len == 0 || len > 65535)
        return "key length out of range [1, 65535]";
    return NULL;
}

static const char *read_uuid(mc_mp_reader_t *rd, mc_uuid_t *id, const char *bad)
{
    if (mc_mp_peek(rd) != MC_MP_ARRAY)
        return bad;
    *id = mc_proto_read_uuid(rd);
    return rd->err == MC_OK ? NULL : bad;
}

static const char *read_uint(mc_mp_reader_t *rd, uint64_t *v, const char *bad)
{
    if (mc_mp_peek(rd) != MC_MP_UINT)
        return bad;
    *v = mc_mp_read_uint(rd);
    return rd->err == MC_OK ? NULL : bad;
}

static const char *read_bool(mc_mp_reader_t *rd, int *v, const char *bad)
{
    if (mc_mp_peek(rd) != MC_MP_BOOL)
        return bad;
    *v = mc_mp_read_bool(rd);
    return NULL;
}

/* The node-local offload's records (LDISK, SEG_DISK, OFFDEL, OFFLOST). */
static const char *decode_offload(mc_mp_reader_t *rd, mc_master_jrec_t *r)
{
    const char *why = NULL;
    switch (r->type) {
    case MC_JREC_LDISK:
        if ((why = read_key(rd, r)) != NULL ||
            (why = read_uint(rd, &r->size, "ldisk: size is not an unsigned integer")) != NULL ||
            (why = read_uuid(rd, &r->segment_id, "ldisk: segment id is not [hi, lo]")) != NULL)
            return why;
        return r->size == 0 ? "ldisk: size is 0" : NULL;
    case MC_JREC_SEG_DISK:
        if ((why = read_uuid(rd, &r->segment_id, "seg_disk: segment id is not [hi, lo]")) != NULL ||
            (why = read_uint(rd, &r->disk_hash,
                             "seg_disk: directory hash is not an unsigned integer")) != NULL)
            return why;
        return r->disk_hash == 0 ? "seg_disk: directory hash is 0" : NULL;
    case MC_JREC_OFFDEL:
        if ((why = read_key(rd, r)) != NULL ||
            (why = read_uuid(rd, &r->segment_id, "offdel: segment id is not [hi, lo]")) != NULL ||
            (why = read_uint(rd, &r->disk_hash, "offdel: park hash is not an unsigned integer")) !=
                NULL)
            return why;
        return read_bool(rd, &r->park, "offdel: by_directory is not a bool");
    case MC_JREC_OFFLOST:
        if ((why = read_uint(rd, &r->disk_hash, "offlost: node hash is not an unsigned integer")) !=
                NULL ||
            (why = read_bool(rd, &r->park, "offlost: by_directory is not a bool")) != NULL)
            return why;
        return r->disk_hash == 0 ? "offlost: node hash is 0" : NULL;
    default:
        return "unknown record type";
    }
}

static const char *decode_body(mc_mp_reader_t *rd, mc_master_jrec_t *r, mc_jrec_scratch_t *sc)
{
    const char *why = NULL;
    uint64_t v = 0;
    switch (r->type) {
    case MC_JREC_MOUNT:
        if ((why = read_uuid(rd, &r->client, "mount: client id is not [hi, lo]")) != NULL)
            return why;
        if (mc_mp_peek(rd) != MC_MP_MAP)
            return "mount: segment is not a map";
        mc_proto_read_segment(rd, &sc->seg, &why);
        if (rd->err != MC_OK)
            return why != NULL ? why : "mount: malformed segment";
        r->seg = sc->seg.seg;
        return NULL;
    case MC_JREC_UNMOUNT:
        if ((why = read_uuid(rd, &r->client, "unmount: client id is not [hi, lo]")) != NULL)
            return why;
        return read_uuid(rd, &r->segment_id, "unmount: segment id is not [hi, lo]");
    case MC_JREC_PUT_START: {
        if ((why = read_uuid(rd, &r->client, "put_start: client id is not [hi, lo]")) != NULL ||
            (why = read_key(rd, r)) != NULL ||
            (why = read_uint(rd, &r->size, "put_start: size is not an unsigned integer")) != NULL ||
            (why = read_uint(rd, &v, "put_start: pin_ttl_ms is not an unsigned integer")) != NULL)
            return why;
        if (v > UINT32_MAX)
            return "put_start: pin_ttl_ms out of range";
        r->pin_ttl_ms = (uint32_t)v;
        if ((why = read_uint(rd, &r->put_id, "put_start: put_id is not an unsigned integer")) !=
            NULL)
            return why;
        if (mc_mp_peek(rd) != MC_MP_ARRAY)
            return "put_start: replicas is not an array";
        uint32_t n = mc_mp_read_array(rd);
        if (n == 0 || n > MC_MASTER_MAX_REPLICAS)
            return "put_start: replica count out of range [1, 8]";
        r->nrep = n;
        for (uint32_t i = 0; i < n; i++) {
            if (mc_mp_peek(rd) != MC_MP_ARRAY || mc_mp_read_array(rd) != 2)
                return "put_start: a replica is not [segment_id, offset]";
            if ((why = read_uuid(rd, &r->rep[i].segment_id,
                                 "put_start: replica segment id is not [hi, lo]")) != NULL ||
                (why = read_uint(rd, &r->rep[i].offset,
                                 "put_start: replica offset is not an unsigned integer")) != NULL)
                return why;
        }
        return NULL;
    }
    case MC_JREC_PUT_END:
        if ((why = read_uuid(rd, &r->client, "put_end: client id is not [hi, lo]")) != NULL)
            return why;
        return read_key(rd, r);
    case MC_JREC_DROP:
        if ((why = read_key(rd, r)) != NULL)
            return why;
        if (mc_mp_peek(rd) != MC_MP_BOOL)
            return "drop: park is not a bool";
        r->park = mc_mp_read_bool(rd);
        return NULL;
    case MC_JREC_CLIENT_EXPIRE:
        return read_uuid(rd, &r->client, "client_expire: client id is not [hi, lo]");
    case MC_JREC_META_PUT: {
        if ((why = read_uuid(rd, &r->client, "meta_put: owner is not [hi, lo]")) != NULL ||
            (why = read_key(rd, r)) != NULL)
            return why;
        if (mc_mp_peek(rd) != MC_MP_BIN && mc_mp_peek(rd) != MC_MP_STR)
            return "meta_put: value is not bin";
        uint32_t len = 0;
        r->val = mc_mp_read_bin(rd, &len);
        r->val_len = len;
        return rd->err == MC_OK ? NULL : "meta_put: value truncated";
    }
    case MC_JREC_META_DEL:
        return read_key(rd, r);
    case MC_JREC_RELEASE:
        r->nrep = 1;
        if ((why = read_key(rd, r)) != NULL ||
            (why = read_uuid(rd, &r->rep[0].segment_id, "release: segment id is not [hi, lo]")) !=
                NULL)
            return why;
        return read_uint(rd, &r->rep[0].offset, "release: offset is not an unsigned integer");
    case MC_JREC_DISK:
        if ((why = read_key(rd, r)) != NULL ||
            (why = read_uint(rd, &r->size, "disk: size is not an unsigned integer")) != NULL)
            return why;
        return r->size == 0 ? "disk: size is 0" : NULL;
    case MC_JREC_SPILL:
    case MC_JREC_LDISK_DROP:
        return read_key(rd, r);
    case MC_JREC_LOAD:
        r->nrep = 1;
        if ((why = read_key(rd, r)) != NULL ||
            (why = read_uuid(rd, &r->rep[0].segment_id, "load: segment id is not [hi, lo]")) !=
                NULL)
            return why;
        return read_uint(rd, &r->rep[0].offset, "load: offset is not an unsigned integer");
    case MC_JREC_LDISK:
    case MC_JREC_SEG_DISK:
    case MC_JREC_OFFDEL:
    case MC_JREC_OFFLOST:
        return decode_offload(rd, r);
    }
    return "unknown record type";
}

mc_status_t mc_jrec_decode(mc_mp_reader_t *rd, mc_master_jrec_t *r, mc_jrec_scratch_t *sc,
                           const char **why)
{
    memset(r, 0, sizeof(*r));
    const char *w = NULL;
    if (mc_mp_peek(rd) != MC_MP_ARRAY) {
        w = "record is not an array";
        goto bad;
    }
    uint32_t n = mc_mp_read_array(rd);
    if (n == 0 || mc_mp_peek(rd) != MC_MP_UINT) {
        w = "record type missing or not an unsigned integer";
        goto bad;
    }
    uint64_t type = mc_mp_read_uint(rd);
    if (type == 0 || type > MC_JREC_TYPE_MAX) {
        w = "unknown record type";
        goto bad;
    }
    if (n != 1u + nfields[type]) {
        w = "wrong number of fields for the record type";
        goto bad;
    }
    r->type = (mc_master_jrec_type_t)type;
    w = decode_body(rd, r, sc);
    if (w == NULL && rd->err != MC_OK)
        w = "record truncated";
    if (w == NULL)
        return MC_OK;
bad:
    if (rd->err == MC_OK)
        rd->err = MC_ERR_PROTOCOL;
    if (why != NULL)
        *why = w;
    return MC_ERR_DESERIALIZE_FAIL;
}

const char *mc_ha_role_name(mc_ha_role_t r)
{
    switch (r) {
    case MC_HA_ROLE_NONE:
        return "single";
    case MC_HA_ROLE_STANDBY:
        return "standby";
    case MC_HA_ROLE_LEADER:
        return "leader";
    case MC_HA_ROLE_FAILED:
        return "failed";
    }
    return "unknown";
}
