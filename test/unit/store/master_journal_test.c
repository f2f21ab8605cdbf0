/*
 * The journal of high availability without Redis: the record codec (every
 * type round-trips; malformed input is refused with a reason, at every
 * truncation point, never a crash) and replay (a standby fed the records of
 * a leader ends with the same objects, replicas at the same addresses, the
 * same segments and metadata, and places later puts without overlapping).
 */
#include "master_test_util.h"

#include "store/master_ha.h"
#include "util/buf.h"

/* A journal hook that keeps the encoded records. */
typedef struct sink {
    mc_buf_t buf;
    unsigned n;
} sink_t;

static void to_sink(void *arg, const mc_master_jrec_t *r)
{
    sink_t *k = arg;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &k->buf);
    mc_jrec_encode(&w, r);
    assert_int_equal(w.err, MC_OK);
    k->n++;
}

/* Decode every record of buf and apply it to m; returns how many. */
static unsigned replay(mc_master_t *m, const mc_buf_t *buf, uint64_t now)
{
    mc_mp_reader_t rd;
    mc_mp_reader_init(&rd, mc_buf_head(buf), mc_buf_used(buf));
    mc_jrec_scratch_t sc;
    unsigned n = 0;
    while (!mc_mp_at_end(&rd)) {
        mc_master_jrec_t r;
        const char *why = NULL;
        assert_int_equal(mc_jrec_decode(&rd, &r, &sc, &why), MC_OK);
        assert_int_equal(mc_master_apply(m, &r, now), MC_OK);
        n++;
    }
    return n;
}

static void every_record_type_round_trips(void **state)
{
    (void)state;
    mc_master_segment_t seg = {
        .id = {7, 8}, .name = "node-a", .te_endpoint = "10.0.0.1:1", .base = 4096, .size = 1 << 20};
    mc_master_jrec_t in[8] = {
        {.type = MC_JREC_MOUNT, .client = C1, .seg = seg},
        {.type = MC_JREC_UNMOUNT, .client = C1, .segment_id = {7, 8}},
        {.type = MC_JREC_PUT_START,
         .client = C2,
         .key = "k\0ey",
         .key_len = 4,
         .size = 12345,
         .pin_ttl_ms = 60000,
         .put_id = 0xfeedfacecafebeefull,
         .nrep = 2,
         .rep = {{{7, 8}, 64}, {{9, 10}, 1ull << 40}}},
        {.type = MC_JREC_PUT_END, .client = C2, .key = "key", .key_len = 3},
        {.type = MC_JREC_DROP, .key = "key", .key_len = 3, .park = 1},
        {.type = MC_JREC_CLIENT_EXPIRE, .client = C3},
        {.type = MC_JREC_META_PUT,
         .client = C1,
         .key = "mc/x",
         .key_len = 4,
         .val = "v\0v",
         .val_len = 3},
        {.type = MC_JREC_META_DEL, .key = "mc/x", .key_len = 4},
    };
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    for (int i = 0; i < 8; i++)
        mc_jrec_encode(&w, &in[i]);
    assert_int_equal(w.err, MC_OK);
    mc_mp_reader_t rd;
    mc_mp_reader_init(&rd, mc_buf_head(&b), mc_buf_used(&b));
    mc_jrec_scratch_t sc;
    for (int i = 0; i < 8; i++) {
        mc_master_jrec_t r;
        const char *why = NULL;
        assert_int_equal(mc_jrec_decode(&rd, &r, &sc, &why), MC_OK);
        assert_int_equal(r.type, in[i].type);
        assert_int_equal(r.client.hi, in[i].client.hi);
        assert_int_equal(r.client.lo, in[i].client.lo);
        assert_int_equal(r.key_len, in[i].key_len);
        if (in[i].key_len)
            assert_memory_equal(r.key, in[i].key, r.key_len);
        assert_int_equal(r.size, in[i].size);
        assert_int_equal(r.pin_ttl_ms, in[i].pin_ttl_ms);
        assert_int_equal(r.put_id, in[i].put_id);
        assert_int_equal(r.nrep, in[i].nrep);
        for (uint32_t k = 0; k < r.nrep; k++) {
            assert_int_equal(r.rep[k].segment_id.lo, in[i].rep[k].segment_id.lo);
            assert_int_equal(r.rep[k].offset, in[i].rep[k].offset);
        }
        assert_int_equal(r.segment_id.lo, in[i].segment_id.lo);
        assert_int_equal(r.park, in[i].park);
        assert_int_equal(r.val_len, in[i].val_len);
        if (in[i].val_len)
            assert_memory_equal(r.val, in[i].val, r.val_len);
        if (r.type == MC_JREC_MOUNT) {
            assert_string_equal(r.seg.name, "node-a");
            assert_string_equal(r.seg.te_endpoint, "10.0.0.1:1");
            assert_int_equal(r.seg.base, 4096);
            assert_int_equal(r.seg.size, 1 << 20);
            assert_int_equal(r.seg.id.hi, 7);
        }
    }
    assert_true(mc_mp_at_end(&rd));
    mc_buf_fini(&b);
}

static mc_status_t decode_bytes(const uint8_t *p, size_t n, const char **why)
{
    mc_mp_reader_t rd;
    mc_mp_reader_init(&rd, p, n);
    mc_jrec_scratch_t sc;
    mc_master_jrec_t r;
    *why = NULL;
    return mc_jrec_decode(&rd, &r, &sc, why);
}

static void a_record_cut_anywhere_is_refused_with_a_reason(void **state)
{
    (void)state;
    mc_master_jrec_t r = {.type = MC_JREC_PUT_START,
                          .client = C2,
                          .key = "some/key",
                          .key_len = 8,
                          .size = 4096,
                          .nrep = 1,
                          .rep = {{{1, 2}, 4096}}};
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    mc_jrec_encode(&w, &r);
    for (size_t cut = 0; cut < mc_buf_used(&b); cut++) {
        const char *why;
        assert_int_equal(decode_bytes(mc_buf_head(&b), cut, &why), MC_ERR_DESERIALIZE_FAIL);
        assert_non_null(why);
    }
    mc_buf_fini(&b);
}

static void malformed_records_are_refused_with_what_was_wrong(void **state)
{
    (void)state;
    const char *why;
    /* not an array */
    static const uint8_t not_array[] = {0x05};
    assert_int_equal(decode_bytes(not_array, sizeof(not_array), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "record is not an array");
    /* [99]: unknown type */
    static const uint8_t unknown[] = {0x91, 0x63};
    assert_int_equal(decode_bytes(unknown, sizeof(unknown), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "unknown record type");
    /* [5, "k"]: DROP with a field missing */
    static const uint8_t short_drop[] = {0x92, 0x05, 0xa1, 'k'};
    assert_int_equal(decode_bytes(short_drop, sizeof(short_drop), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "wrong number of fields for the record type");
    /* [5, 7, true]: DROP whose key is a number */
    static const uint8_t num_key[] = {0x93, 0x05, 0x07, 0xc3};
    assert_int_equal(decode_bytes(num_key, sizeof(num_key), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "key is not bin");
    /* [5, "", true]: empty key */
    static const uint8_t empty_key[] = {0x93, 0x05, 0xa0, 0xc3};
    assert_int_equal(decode_bytes(empty_key, sizeof(empty_key), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "key length out of range [1, 65535]");
    /* [3, [1,2], "k", 8, 0, 0, []]: a put with no replica */
    static const uint8_t no_rep[] = {0x97, 0x03, 0x92, 0x01, 0x02, 0xa1,
                                     'k',  0x08, 0x00, 0x00, 0x90};
    assert_int_equal(decode_bytes(no_rep, sizeof(no_rep), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "put_start: replica count out of range [1, 8]");
    /* [3, [1,2], "k", -1, ...]: negative size */
    static const uint8_t neg[] = {0x97, 0x03, 0x92, 0x01, 0x02, 0xa1, 'k', 0xff, 0x00, 0x00, 0x90};
    assert_int_equal(decode_bytes(neg, sizeof(neg), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "put_start: size is not an unsigned integer");
    /* [4, "x", "k"]: client id of the wrong type */
    static const uint8_t bad_client[] = {0x93, 0x04, 0xa1, 'x', 0xa1, 'k'};
    assert_int_equal(decode_bytes(bad_client, sizeof(bad_client), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "put_end: client id is not [hi, lo]");
}

static void random_bytes_never_crash_the_decoder(void **state)
{
    (void)state;
    uint8_t buf[64];
    uint64_t x = 88172645463325252ull;
    unsigned ok = 0;
    for (int i = 0; i < 200000; i++) {
        size_t n = (size_t)(x % sizeof(buf));
        for (size_t k = 0; k < n; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[k] = (uint8_t)x;
        }
        /* bias towards arrays with a valid type so the bodies get exercised */
        if (n > 1 && (x & 1)) {
            buf[0] = (uint8_t)(0x90 | (x >> 8 & 7));
            buf[1] = (uint8_t)(1 + (x >> 16) % MC_JREC_TYPE_MAX);
        }
        const char *why;
        mc_status_t st = decode_bytes(buf, n, &why);
        if (st == MC_OK)
            ok++;
        else
            assert_non_null(why);
    }
    (void)ok;
}

/* The leader's history replayed on a standby gives the same state. */
static void a_replayed_journal_rebuilds_the_same_objects_segments_and_metadata(void **state)
{
    (void)state;
    mc_master_t *a = master_new_immortal(), *b = master_new_immortal();
    sink_t k = {MC_BUF_INIT, 0};
    mc_master_set_journal(a, to_sink, &k);
    uint64_t now = T0;
    assert_int_equal(mount_seg(a, C1, 1, "n1", 64 << 20, now), MC_OK);
    assert_int_equal(mount_seg(a, C2, 2, "n2", 64 << 20, now), MC_OK);
    assert_int_equal(mount_seg(a, C3, 3, "n3", 64 << 20, now), MC_OK);
    char key[32];
    for (unsigned i = 0; i < 300; i++)
        assert_int_equal(
            put_obj(a, C1, key_of(key, sizeof(key), "k", i), 1000 + i * 37, 1 + i % 2, now), MC_OK);
    /* removed objects, and a revoked put */
    for (unsigned i = 0; i < 300; i += 3)
        assert_int_equal(rm(a, key_of(key, sizeof(key), "k", i), 0, now), MC_OK);
    assert_int_equal(put_start_n(a, C2, "revoked", 5000, 1, now, NULL), MC_OK);
    assert_int_equal(mc_master_put_revoke(a, C2, "revoked", 7, now), MC_OK);
    /* segment 3 goes away with its replicas */
    assert_int_equal(mc_master_unmount_segment(a, C3, seg_id(3), now, NULL), MC_OK);
    assert_int_equal(mc_master_meta_put(a, "mc/c/seg/n1", 11, "desc", 4, C1, now), MC_OK);
    assert_int_equal(mc_master_meta_put(a, "mc/c/tmp", 8, "x", 1, C1, now), MC_OK);
    assert_int_equal(mc_master_meta_del(a, "mc/c/tmp", 8, C1), MC_OK);
    mc_master_tick(a, now); /* commits the drained unmount */
    /* in progress at the "failover" */
    assert_int_equal(put_start_n(a, C2, "unfinished", 5000, 1, now, NULL), MC_OK);

    assert_true(k.n > 600);
    assert_int_equal(replay(b, &k.buf, T0 + 5 * SEC), k.n);

    mc_master_stats_t sa = stats(a), sb = stats(b);
    assert_int_equal(sb.key_count, sa.key_count);
    assert_int_equal(sb.processing_count, sa.processing_count);
    assert_int_equal(sb.allocated_bytes, sa.allocated_bytes);
    assert_int_equal(sb.capacity_bytes, sa.capacity_bytes);
    assert_int_equal(sb.segment_count, sa.segment_count);
    /* same replicas at the same addresses */
    for (unsigned i = 0; i < 300; i++) {
        key_of(key, sizeof(key), "k", i);
        mc_master_replica_desc_t da[8], db[8];
        uint32_t na = 0, nb = 0;
        mc_status_t s1 = mc_master_get_replica_list(a, key, strlen(key), now, da, 8, &na, NULL);
        mc_status_t s2 = mc_master_get_replica_list(b, key, strlen(key), now, db, 8, &nb, NULL);
        assert_int_equal(s1, s2);
        assert_int_equal(na, nb);
        for (uint32_t r = 0; r < na; r++) {
            assert_int_equal(da[r].address, db[r].address);
            assert_int_equal(da[r].segment_id.lo, db[r].segment_id.lo);
        }
    }
    void *v = NULL;
    size_t vl = 0;
    assert_int_equal(mc_master_meta_get(b, "mc/c/seg/n1", 11, &v, &vl), MC_OK);
    assert_int_equal(vl, 4);
    assert_memory_equal(v, "desc", 4);
    mc_free(v);
    assert_int_equal(mc_master_meta_get(b, "mc/c/tmp", 8, &v, &vl), MC_ERR_NOT_FOUND);
    /* the unfinished put finishes on the standby (its PutEnd reaches it) */
    assert_int_equal(mc_master_put_end(b, C2, "unfinished", 10, T0 + 6 * SEC), MC_OK);
    /* and new puts on b never overlap what a placed: fill b up */
    for (unsigned i = 0; i < 2000; i++) {
        if (put_obj(b, C1, key_of(key, sizeof(key), "new", i), 40000, 1, T0 + 7 * SEC) != MC_OK)
            break;
    }
    mc_master_stats_t sb2 = stats(b);
    assert_true(sb2.allocated_bytes <= sb2.capacity_bytes);
    mc_master_destroy(a);
    mc_master_destroy(b);
    mc_buf_fini(&k.buf);
}

/* A discarded put's space stays reserved on the standby until the leader
 * frees it (RELEASE): never earlier (the slow writer may still write), never
 * later (the leader places new puts there). */
static void a_discarded_put_is_parked_then_released_on_the_standby_too(void **state)
{
    (void)state;
    mc_master_t *a = master_new_immortal(), *b = master_new_immortal();
    sink_t k = {MC_BUF_INIT, 0};
    mc_master_set_journal(a, to_sink, &k);
    assert_int_equal(mount_seg(a, C1, 1, "n1", 1 << 20, T0), MC_OK);
    assert_int_equal(put_start_n(a, C2, "slow", 4096, 1, T0, NULL), MC_OK);
    mc_master_tick(a, T0 + 31 * SEC); /* discarded, parked */
    unsigned n1 = k.n;
    assert_int_equal(replay(b, &k.buf, T0), n1);
    assert_int_equal(stats(b).key_count, 0);
    assert_int_equal(stats(b).parked_count, 1);
    assert_int_equal(stats(b).allocated_bytes, stats(a).allocated_bytes);
    mc_buf_reset(&k.buf);
    mc_master_tick(a, T0 + 11 * 60 * SEC); /* released */
    assert_int_equal(stats(a).parked_count, 0);
    assert_true(k.n > n1);
    replay(b, &k.buf, T0);
    assert_int_equal(stats(b).parked_count, 0);
    assert_int_equal(stats(b).allocated_bytes, 0);
    mc_master_destroy(a);
    mc_master_destroy(b);
    mc_buf_fini(&k.buf);
}

/* A snapshot (the whole state as records) loaded into an empty master gives
 * the same objects at the same addresses, parked space included. */
static void a_snapshot_rebuilds_the_state_of_a_standby(void **state)
{
    (void)state;
    mc_master_t *a = master_new_immortal(), *b = master_new_immortal();
    uint64_t now = T0;
    assert_int_equal(mount_seg(a, C1, 1, "n1", 8 << 20, now), MC_OK);
    assert_int_equal(mount_seg(a, C2, 2, "n2", 8 << 20, now), MC_OK);
    char key[32];
    for (unsigned i = 0; i < 200; i++)
        assert_int_equal(put_obj(a, C1, key_of(key, sizeof(key), "s", i), 5000 + i, 1 + i % 2, now),
                         MC_OK);
    assert_int_equal(put_start_n(a, C2, "inflight", 3000, 1, now, NULL), MC_OK);
    assert_int_equal(put_start_n(a, C2, "parked", 3000, 1, now, NULL), MC_OK);
    mc_master_tick(a, now + 31 * SEC); /* both discarded: parked */
    assert_int_equal(put_start_n(a, C2, "parked", 3000, 1, now + 31 * SEC, NULL), MC_OK);
    assert_int_equal(mc_master_meta_put(a, "mc/k", 4, "val", 3, C1, now), MC_OK);
    sink_t k = {MC_BUF_INIT, 0};
    mc_master_snapshot(a, to_sink, &k);
    assert_int_equal(replay(b, &k.buf, now), k.n);
    mc_master_stats_t sa = stats(a), sb = stats(b);
    assert_int_equal(sb.key_count, sa.key_count);
    assert_int_equal(sb.processing_count, sa.processing_count);
    assert_int_equal(sb.parked_count, sa.parked_count);
    assert_int_equal(sb.allocated_bytes, sa.allocated_bytes);
    assert_int_equal(sb.segment_count, sa.segment_count);
    for (unsigned i = 0; i < 200; i++) {
        key_of(key, sizeof(key), "s", i);
        mc_master_replica_desc_t da[8], db[8];
        uint32_t na = 0, nb = 0;
        assert_int_equal(mc_master_get_replica_list(a, key, strlen(key), now, da, 8, &na, NULL),
                         MC_OK);
        assert_int_equal(mc_master_get_replica_list(b, key, strlen(key), now, db, 8, &nb, NULL),
                         MC_OK);
        assert_int_equal(na, nb);
        for (uint32_t r = 0; r < na; r++)
            assert_int_equal(da[r].address, db[r].address);
    }
    void *v = NULL;
    size_t vl = 0;
    assert_int_equal(mc_master_meta_get(b, "mc/k", 4, &v, &vl), MC_OK);
    mc_free(v);
    mc_master_destroy(a);
    mc_master_destroy(b);
    mc_buf_fini(&k.buf);
}

/* What the leader's tick does on its own (client expiry, eviction) reaches
 * the standby through the journal: it runs no tick of its own. */
static void expiry_and_eviction_on_the_leader_replay_on_the_standby(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 10 * SEC;
    o.eviction_high_watermark = 0.5;
    o.eviction_ratio = 0.5;
    mc_master_t *a = master_new(&o), *b = master_new(&o);
    sink_t k = {MC_BUF_INIT, 0};
    mc_master_set_journal(a, to_sink, &k);
    uint64_t now = T0;
    assert_int_equal(mount_seg(a, C1, 1, "n1", 1 << 20, now), MC_OK);
    assert_int_equal(mount_seg(a, C2, 2, "n2", 1 << 20, now), MC_OK);
    assert_int_equal(mc_master_meta_put(a, "mc/c/seg/n2", 11, "d", 1, C2, now), MC_OK);
    char key[32];
    for (unsigned i = 0; i < 300; i++) /* ~75% full: eviction above 50% */
        put_obj(a, C1, key_of(key, sizeof(key), "e", i), 5000, 1, now);
    mc_master_tick(a, now + SEC);
    assert_true(stats(a).evicted_keys > 0);
    /* C2 falls silent; C1 keeps pinging */
    mc_master_ping(a, C1, now + 8 * SEC, NULL, NULL);
    mc_master_tick(a, now + 12 * SEC);
    assert_int_equal(stats(a).segment_count, 1);
    replay(b, &k.buf, now);
    mc_master_stats_t sa = stats(a), sb = stats(b);
    assert_int_equal(sb.key_count, sa.key_count);
    assert_int_equal(sb.allocated_bytes, sa.allocated_bytes);
    assert_int_equal(sb.segment_count, 1);
    void *v = NULL;
    size_t vl = 0;
    assert_int_equal(mc_master_meta_get(b, "mc/c/seg/n2", 11, &v, &vl), MC_ERR_NOT_FOUND);
    /* C2 comes back: the standby-turned-leader asks it to mount again */
    mc_master_client_status_t cs = MC_MASTER_CLIENT_OK;
    mc_master_ping(b, C2, now + 13 * SEC, NULL, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_NEED_REMOUNT);
    mc_master_ping(b, C1, now + 13 * SEC, NULL, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_OK);
    mc_master_destroy(a);
    mc_master_destroy(b);
    mc_buf_fini(&k.buf);
}

static mc_status_t put_start_id(mc_master_t *m, mc_uuid_t c, const char *key, uint64_t size,
                                uint64_t put_id, uint64_t now, mc_master_replica_desc_t *d)
{
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.put_id = put_id;
    uint32_t n = 0;
    return mc_master_put_start(m, c, key, strlen(key), size, &cfg, now, d, &n);
}

/* A PutStart resent with its put id (the answer was lost in a failover) gets
 * the same replicas, from the leader that started it or from a standby that
 * replayed its record; anything else is still OBJECT_ALREADY_EXISTS. */
static void a_resent_put_start_gets_the_same_replicas_even_after_failover(void **state)
{
    (void)state;
    mc_master_t *a = master_new_immortal(), *b = master_new_immortal();
    sink_t k = {MC_BUF_INIT, 0};
    mc_master_set_journal(a, to_sink, &k);
    assert_int_equal(mount_seg(a, C1, 1, "n1", 1 << 20, T0), MC_OK);
    assert_int_equal(mount_seg(a, C2, 2, "n2", 1 << 20, T0), MC_OK);
    mc_master_replica_desc_t d1[8], d2[8];
    assert_int_equal(put_start_id(a, C1, "k", 4096, 77, T0, d1), MC_OK);
    assert_int_equal(put_start_id(a, C1, "k", 4096, 77, T0, d2), MC_OK);
    assert_int_equal(d2[0].address, d1[0].address);
    assert_int_equal(put_start_id(a, C1, "k", 4096, 78, T0, d2), MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(put_start_id(a, C2, "k", 4096, 77, T0, d2), MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(put_start_id(a, C1, "k", 8192, 77, T0, d2), MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(put_start_id(a, C1, "z", 4096, 0, T0, d2), MC_OK);
    assert_int_equal(put_start_id(a, C1, "z", 4096, 0, T0, d2), MC_ERR_OBJECT_ALREADY_EXISTS);
    /* the standby turned leader knows the put id from the journal */
    replay(b, &k.buf, T0);
    assert_int_equal(put_start_id(b, C1, "k", 4096, 77, T0 + SEC, d2), MC_OK);
    assert_int_equal(d2[0].address, d1[0].address);
    assert_int_equal(stats(b).processing_count, 2);
    assert_int_equal(mc_master_put_end(b, C1, "k", 1, T0 + SEC), MC_OK);
    /* complete now: a late resend is refused, not re-placed */
    assert_int_equal(put_start_id(b, C1, "k", 4096, 77, T0 + SEC, d2),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    mc_master_destroy(a);
    mc_master_destroy(b);
    mc_buf_fini(&k.buf);
}

/* A record that disagrees with the standby's state is an error, not a crash:
 * a put placed on a segment the standby never saw mounted. */
static void a_record_that_contradicts_the_state_is_reported(void **state)
{
    (void)state;
    mc_master_t *b = master_new_immortal();
    mc_master_jrec_t r = {.type = MC_JREC_PUT_START,
                          .client = C1,
                          .key = "k",
                          .key_len = 1,
                          .size = 64,
                          .nrep = 1,
                          .rep = {{{0x5e6, 9}, 0}}};
    assert_int_equal(mc_master_apply(b, &r, T0), MC_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(mount_seg(b, C1, 9, "n9", 1 << 20, T0), MC_OK);
    assert_int_equal(mc_master_apply(b, &r, T0), MC_OK);
    /* the same range again: taken */
    r.key = "k2";
    r.key_len = 2;
    assert_int_equal(mc_master_apply(b, &r, T0), MC_ERR_EXISTS);
    assert_int_equal(stats(b).key_count, 1);
    mc_master_destroy(b);
}

static void disk_and_spill_records_round_trip(void **state)
{
    (void)state;
    mc_master_jrec_t in[2] = {
        {.type = MC_JREC_DISK, .key = "d\0isk", .key_len = 5, .size = 1ull << 33},
        {.type = MC_JREC_SPILL, .key = "spilled", .key_len = 7},
    };
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    for (int i = 0; i < 2; i++)
        mc_jrec_encode(&w, &in[i]);
    assert_int_equal(w.err, MC_OK);
    mc_mp_reader_t rd;
    mc_mp_reader_init(&rd, mc_buf_head(&b), mc_buf_used(&b));
    mc_jrec_scratch_t sc;
    for (int i = 0; i < 2; i++) {
        mc_master_jrec_t r;
        const char *why = NULL;
        assert_int_equal(mc_jrec_decode(&rd, &r, &sc, &why), MC_OK);
        assert_int_equal(r.type, in[i].type);
        assert_int_equal(r.key_len, in[i].key_len);
        assert_memory_equal(r.key, in[i].key, r.key_len);
        assert_int_equal(r.size, in[i].size);
    }
    assert_true(mc_mp_at_end(&rd));
    /* cut anywhere: refused with a reason */
    for (size_t cut = 0; cut < mc_buf_used(&b); cut++) {
        if (cut == 0)
            continue;
        mc_mp_reader_init(&rd, mc_buf_head(&b), cut);
        mc_master_jrec_t r;
        const char *why = NULL;
        mc_status_t st = mc_jrec_decode(&rd, &r, &sc, &why);
        if (st == MC_OK) /* the cut fell after the first record */
            st = mc_jrec_decode(&rd, &r, &sc, &why);
        assert_int_equal(st, MC_ERR_DESERIALIZE_FAIL);
        assert_non_null(why);
    }
    mc_buf_fini(&b);
}

static void malformed_disk_and_spill_records_are_refused(void **state)
{
    (void)state;
    const char *why;
    /* [10, "k"]: DISK without its size */
    static const uint8_t short_disk[] = {0x92, 0x0a, 0xa1, 'k'};
    assert_int_equal(decode_bytes(short_disk, sizeof(short_disk), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "wrong number of fields for the record type");
    /* [10, "k", 0] */
    static const uint8_t zero[] = {0x93, 0x0a, 0xa1, 'k', 0x00};
    assert_int_equal(decode_bytes(zero, sizeof(zero), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "disk: size is 0");
    /* [10, "k", -1] */
    static const uint8_t neg[] = {0x93, 0x0a, 0xa1, 'k', 0xff};
    assert_int_equal(decode_bytes(neg, sizeof(neg), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "disk: size is not an unsigned integer");
    /* [10, 7, 8]: key is a number */
    static const uint8_t num_key[] = {0x93, 0x0a, 0x07, 0x08};
    assert_int_equal(decode_bytes(num_key, sizeof(num_key), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "key is not bin");
    /* [11, "", ]: SPILL with an empty key */
    static const uint8_t empty[] = {0x92, 0x0b, 0xa0};
    assert_int_equal(decode_bytes(empty, sizeof(empty), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "key length out of range [1, 65535]");
    /* [11, "k", 1]: SPILL with a field too many */
    static const uint8_t long_spill[] = {0x93, 0x0b, 0xa1, 'k', 0x01};
    assert_int_equal(decode_bytes(long_spill, sizeof(long_spill), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "wrong number of fields for the record type");
    /* [MAX + 1]: past the last type */
    static const uint8_t past[] = {0x91, MC_JREC_TYPE_MAX + 1};
    assert_int_equal(decode_bytes(past, sizeof(past), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "unknown record type");
}

/* SEG_DISK (a node's offload directory), OFFDEL (a pending DELETE of a
 * node's file, in snapshots) and OFFLOST (a node that lost DELETEs, in
 * snapshots): they round-trip, a cut one is refused, and a malformed one
 * is refused naming what was wrong. */
static void directory_and_deletion_records_round_trip_and_bad_ones_are_refused(void **state)
{
    (void)state;
    mc_master_jrec_t in[5] = {
        {.type = MC_JREC_SEG_DISK, .segment_id = {7, 8}, .disk_hash = 0xfeedfacecafebeefull},
        {.type = MC_JREC_OFFDEL,
         .key = "o\0ff",
         .key_len = 4,
         .segment_id = {7, 8},
         .disk_hash = 42,
         .park = 1},
        {.type = MC_JREC_OFFDEL, .key = "parked", .key_len = 6, .disk_hash = 0, .park = 0},
        {.type = MC_JREC_OFFLOST, .disk_hash = 0xfffffffffffffff1ull, .park = 1},
        {.type = MC_JREC_OFFLOST, .disk_hash = 9, .park = 0},
    };
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    for (int i = 0; i < 5; i++)
        mc_jrec_encode(&w, &in[i]);
    assert_int_equal(w.err, MC_OK);
    mc_mp_reader_t rd;
    mc_mp_reader_init(&rd, mc_buf_head(&b), mc_buf_used(&b));
    mc_jrec_scratch_t sc;
    size_t first_end = 0;
    for (int i = 0; i < 5; i++) {
        mc_master_jrec_t r;
        const char *why = NULL;
        assert_int_equal(mc_jrec_decode(&rd, &r, &sc, &why), MC_OK);
        if (i == 0)
            first_end = (size_t)(rd.p - (const uint8_t *)mc_buf_head(&b));
        assert_int_equal(r.type, in[i].type);
        assert_int_equal(r.segment_id.hi, in[i].segment_id.hi);
        assert_int_equal(r.segment_id.lo, in[i].segment_id.lo);
        assert_true(r.disk_hash == in[i].disk_hash);
        assert_int_equal(r.park, in[i].park);
        assert_int_equal(r.key_len, in[i].key_len);
        if (in[i].key_len)
            assert_memory_equal(r.key, in[i].key, r.key_len);
    }
    assert_true(mc_mp_at_end(&rd));
    /* cut anywhere in the first record: refused with a reason */
    for (size_t cut = 0; cut < first_end; cut++) {
        const char *why;
        assert_int_equal(decode_bytes(mc_buf_head(&b), cut, &why), MC_ERR_DESERIALIZE_FAIL);
        assert_non_null(why);
    }
    mc_buf_fini(&b);

    const char *why;
    /* [15, [7, 8], 0]: no directory */
    static const uint8_t zero[] = {0x93, 0x0f, 0x92, 0x07, 0x08, 0x00};
    assert_int_equal(decode_bytes(zero, sizeof(zero), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "seg_disk: directory hash is 0");
    /* [15, "x", 1]: segment id of the wrong type */
    static const uint8_t bad_seg[] = {0x93, 0x0f, 0xa1, 'x', 0x01};
    assert_int_equal(decode_bytes(bad_seg, sizeof(bad_seg), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "seg_disk: segment id is not [hi, lo]");
    /* [15, [7, 8], -1] */
    static const uint8_t neg[] = {0x93, 0x0f, 0x92, 0x07, 0x08, 0xff};
    assert_int_equal(decode_bytes(neg, sizeof(neg), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "seg_disk: directory hash is not an unsigned integer");
    /* [16, "k", [0, 0], 5, 1]: by_directory not a bool */
    static const uint8_t not_bool[] = {0x95, 0x10, 0xa1, 'k', 0x92, 0x00, 0x00, 0x05, 0x01};
    assert_int_equal(decode_bytes(not_bool, sizeof(not_bool), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "offdel: by_directory is not a bool");
    /* [16, "k", [0, 0], 5]: a field missing */
    static const uint8_t short_del[] = {0x94, 0x10, 0xa1, 'k', 0x92, 0x00, 0x00, 0x05};
    assert_int_equal(decode_bytes(short_del, sizeof(short_del), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "wrong number of fields for the record type");
    /* [16, "", [0, 0], 5, true]: empty key */
    static const uint8_t empty[] = {0x95, 0x10, 0xa0, 0x92, 0x00, 0x00, 0x05, 0xc3};
    assert_int_equal(decode_bytes(empty, sizeof(empty), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "key length out of range [1, 65535]");
    /* [17, 0, true]: no node */
    static const uint8_t lost0[] = {0x93, 0x11, 0x00, 0xc3};
    assert_int_equal(decode_bytes(lost0, sizeof(lost0), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "offlost: node hash is 0");
    /* [17, "x", true]: the hash of the wrong type */
    static const uint8_t lost_str[] = {0x93, 0x11, 0xa1, 'x', 0xc3};
    assert_int_equal(decode_bytes(lost_str, sizeof(lost_str), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "offlost: node hash is not an unsigned integer");
    /* [17, 5, 1]: by_directory not a bool */
    static const uint8_t lost_int[] = {0x93, 0x11, 0x05, 0x01};
    assert_int_equal(decode_bytes(lost_int, sizeof(lost_int), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "offlost: by_directory is not a bool");
    /* [17, 5]: a field missing */
    static const uint8_t lost_short[] = {0x92, 0x11, 0x05};
    assert_int_equal(decode_bytes(lost_short, sizeof(lost_short), &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "wrong number of fields for the record type");
}

/* Every key of one master describes the same on the other: status, memory
 * replicas at the same addresses, the DISK replica or not. */
static void assert_same_object(mc_master_t *a, mc_master_t *b, const char *key, uint64_t now)
{
    mc_master_replica_desc_t da[9], db[9];
    uint32_t na = 0, nb = 0;
    mc_status_t s1 = mc_master_get_replica_list(a, key, strlen(key), now, da, 9, &na, NULL);
    mc_status_t s2 = mc_master_get_replica_list(b, key, strlen(key), now, db, 9, &nb, NULL);
    assert_int_equal(s1, s2);
    if (s1 != MC_OK)
        return;
    assert_int_equal(na, nb);
    for (uint32_t r = 0; r < na; r++) {
        assert_int_equal(da[r].kind, db[r].kind);
        assert_int_equal(da[r].size, db[r].size);
        if (da[r].kind == MC_MASTER_REPLICA_MEMORY) {
            assert_int_equal(da[r].address, db[r].address);
            assert_int_equal(da[r].segment_id.lo, db[r].segment_id.lo);
        }
    }
}

static void assert_same_tier(mc_master_t *a, mc_master_t *b)
{
    mc_master_stats_t sa = stats(a), sb = stats(b);
    assert_int_equal(sb.key_count, sa.key_count);
    assert_int_equal(sb.allocated_bytes, sa.allocated_bytes);
    assert_int_equal(sb.segment_count, sa.segment_count);
    mc_master_tier_stats_t ta, tb;
    mc_master_tier_stats(a, &ta);
    mc_master_tier_stats(b, &tb);
    assert_int_equal(tb.disk_objects, ta.disk_objects);
    assert_int_equal(tb.disk_bytes, ta.disk_bytes);
}

/* Memory replicas only, and whether a DISK one is listed. */
static uint32_t mem_replicas(mc_master_t *m, const char *key, uint64_t now, int *disk)
{
    mc_master_replica_desc_t d[9];
    uint32_t n = 0, mem = 0;
    *disk = 0;
    if (mc_master_get_replica_list(m, key, strlen(key), now, d, 9, &n, NULL) != MC_OK)
        return 0;
    for (uint32_t i = 0; i < n; i++) {
        if (d[i].kind == MC_MASTER_REPLICA_DISK)
            *disk = 1;
        else
            mem++;
    }
    return mem;
}

typedef struct drops {
    unsigned n;
} drops_t;

static void count_drop(void *arg, const char *key, size_t len)
{
    (void)key;
    (void)len;
    ((drops_t *)arg)->n++;
}

/* A leader with a tier: files reported (TierAdd), restored by a scan,
 * evictions down to files, removals. Its journal replayed on a standby
 * gives the same objects, DISK replicas and free space; the standby turned
 * leader then keeps disk objects on eviction and places new puts where the
 * old leader freed space without overlapping anything. */
static void tier_adds_evictions_to_files_and_removes_replay_on_the_standby(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 1000000 * SEC;
    o.eviction_high_watermark = 0.5;
    o.eviction_ratio = 0.5;
    drops_t da = {0}, db = {0};
    o.disk_drop = count_drop;
    o.disk_drop_arg = &da;
    mc_master_t *a = master_new(&o);
    o.disk_drop_arg = &db;
    mc_master_t *b = master_new(&o);
    sink_t k = {MC_BUF_INIT, 0};
    mc_master_set_journal(a, to_sink, &k);
    uint64_t now = T0;
    assert_int_equal(mount_seg(a, C1, 1, "n1", 1 << 20, now), MC_OK);
    char key[32];
    for (unsigned i = 0; i < 150; i++) { /* ~72% full: eviction above 50% */
        key_of(key, sizeof(key), "t", i);
        assert_int_equal(put_obj(a, C1, key, 5000, 1, now), MC_OK);
        if (i % 2 == 0)
            assert_int_equal(mc_master_tier_add(a, key, strlen(key), 5000, now), MC_OK);
    }
    /* eager persistence: the file is reported before PutEnd */
    assert_int_equal(put_start_n(a, C1, "eager", 5000, 1, now, NULL), MC_OK);
    assert_int_equal(mc_master_tier_add(a, "eager", 5, 5000, now), MC_OK);
    /* files found by a scan: disk-only objects, and a DISK replica more */
    for (unsigned i = 0; i < 10; i++) {
        key_of(key, sizeof(key), "r", i);
        assert_int_equal(mc_master_tier_restore(a, key, strlen(key), 777, now), MC_OK);
    }
    assert_int_equal(mc_master_tier_restore(a, "t0001", 5, 5000, now), MC_OK);
    mc_master_tick(a, now + SEC); /* evicts: objects with a file stay */
    assert_true(stats(a).evicted_keys > 0);
    unsigned spilled = 0;
    for (unsigned i = 0; i < 150; i += 2) {
        int disk = 0;
        if (mem_replicas(a, key_of(key, sizeof(key), "t", i), now + SEC, &disk) == 0) {
            assert_true(disk);
            spilled++;
        }
    }
    assert_true(spilled > 0);
    /* removals of objects with files (their files go), after the leases of
     * the gets above */
    uint64_t later = now + 100 * SEC;
    assert_int_equal(rm(a, "t0000", 0, later), MC_OK);
    assert_int_equal(rm(a, "r0003", 0, later), MC_OK);
    assert_int_equal(rm(a, "t0002", 0, later), MC_OK);
    /* new puts in the space the evictions freed */
    for (unsigned i = 0; i < 40; i++)
        put_obj(a, C1, key_of(key, sizeof(key), "n", i), 5000, 1, later);

    replay(b, &k.buf, now);
    assert_same_tier(a, b);
    uint64_t t = later + SEC;
    for (unsigned i = 0; i < 150; i++)
        assert_same_object(a, b, key_of(key, sizeof(key), "t", i), t);
    for (unsigned i = 0; i < 10; i++)
        assert_same_object(a, b, key_of(key, sizeof(key), "r", i), t);
    for (unsigned i = 0; i < 40; i++)
        assert_same_object(a, b, key_of(key, sizeof(key), "n", i), t);
    assert_same_object(a, b, "eager", t);
    /* the files of removed objects are dropped on the standby too */
    assert_int_equal(db.n, da.n);
    assert_true(da.n >= 3);

    /* b leads now: its evictions keep what has a file, a remove drops it */
    mc_master_t *lead = b;
    mc_buf_reset(&k.buf);
    mc_master_set_journal(lead, to_sink, &k);
    assert_int_equal(mc_master_put_end(lead, C1, "eager", 5, t), MC_OK);
    mc_master_tick(lead, t + 10 * SEC);
    mc_master_tier_stats_t ts;
    mc_master_tier_stats(lead, &ts);
    for (unsigned i = 4; i < 150; i += 2)
        assert_true(exists(lead, key_of(key, sizeof(key), "t", i), t + 11 * SEC));
    unsigned before = db.n;
    assert_int_equal(rm(lead, "t0004", 0, t + 100 * SEC), MC_OK);
    assert_int_equal(db.n, before + 1);
    mc_master_destroy(a);
    mc_master_destroy(b);
    mc_buf_fini(&k.buf);
}

/* A snapshot keeps objects with files: in memory and on disk, only on disk
 * (evicted down to the file, or restored by a scan). */
static void a_snapshot_keeps_disk_replicas_and_disk_only_objects(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 1000000 * SEC;
    o.eviction_high_watermark = 0.5;
    o.eviction_ratio = 0.5;
    mc_master_t *a = master_new(&o), *b = master_new(&o);
    uint64_t now = T0;
    assert_int_equal(mount_seg(a, C1, 1, "n1", 1 << 20, now), MC_OK);
    char key[32];
    for (unsigned i = 0; i < 150; i++) {
        key_of(key, sizeof(key), "s", i);
        assert_int_equal(put_obj(a, C1, key, 5000, 1, now), MC_OK);
        if (i % 3 != 0)
            assert_int_equal(mc_master_tier_add(a, key, strlen(key), 5000, now), MC_OK);
    }
    for (unsigned i = 0; i < 5; i++) {
        key_of(key, sizeof(key), "r", i);
        assert_int_equal(mc_master_tier_restore(a, key, strlen(key), 99, now), MC_OK);
    }
    mc_master_tick(a, now + SEC);
    assert_true(stats(a).evicted_keys > 0);
    sink_t k = {MC_BUF_INIT, 0};
    mc_master_snapshot(a, to_sink, &k);
    assert_int_equal(replay(b, &k.buf, now), k.n);
    assert_same_tier(a, b);
    for (unsigned i = 0; i < 150; i++)
        assert_same_object(a, b, key_of(key, sizeof(key), "s", i), now + 2 * SEC);
    for (unsigned i = 0; i < 5; i++)
        assert_same_object(a, b, key_of(key, sizeof(key), "r", i), now + 2 * SEC);
    mc_master_destroy(a);
    mc_master_destroy(b);
    mc_buf_fini(&k.buf);
}

/* DISK and SPILL that disagree with the standby's state are reported. */
static void disk_and_spill_records_that_contradict_the_state_are_reported(void **state)
{
    (void)state;
    mc_master_t *b = master_new_immortal();
    mc_master_jrec_t spill = {.type = MC_JREC_SPILL, .key = "k", .key_len = 1};
    assert_int_equal(mc_master_apply(b, &spill, T0), MC_ERR_EXISTS); /* no such object */
    assert_int_equal(mount_seg(b, C1, 1, "n1", 1 << 20, T0), MC_OK);
    assert_int_equal(put_obj(b, C1, "k", 4096, 1, T0), MC_OK);
    assert_int_equal(mc_master_apply(b, &spill, T0), MC_ERR_EXISTS); /* it has no file */
    mc_master_jrec_t disk = {.type = MC_JREC_DISK, .key = "k", .key_len = 1, .size = 4095};
    assert_int_equal(mc_master_apply(b, &disk, T0), MC_ERR_EXISTS); /* another size */
    disk.size = 4096;
    assert_int_equal(mc_master_apply(b, &disk, T0), MC_OK);
    assert_int_equal(mc_master_apply(b, &spill, T0), MC_OK);
    assert_int_equal(stats(b).allocated_bytes, 0);
    assert_true(exists(b, "k", T0));
    disk.size = 0;
    assert_int_equal(mc_master_apply(b, &disk, T0), MC_ERR_INVALID_PARAMS);
    mc_master_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_record_type_round_trips),
        cmocka_unit_test(a_record_cut_anywhere_is_refused_with_a_reason),
        cmocka_unit_test(malformed_records_are_refused_with_what_was_wrong),
        cmocka_unit_test(random_bytes_never_crash_the_decoder),
        cmocka_unit_test(a_replayed_journal_rebuilds_the_same_objects_segments_and_metadata),
        cmocka_unit_test(a_discarded_put_is_parked_then_released_on_the_standby_too),
        cmocka_unit_test(a_snapshot_rebuilds_the_state_of_a_standby),
        cmocka_unit_test(expiry_and_eviction_on_the_leader_replay_on_the_standby),
        cmocka_unit_test(a_resent_put_start_gets_the_same_replicas_even_after_failover),
        cmocka_unit_test(a_record_that_contradicts_the_state_is_reported),
        cmocka_unit_test(disk_and_spill_records_round_trip),
        cmocka_unit_test(malformed_disk_and_spill_records_are_refused),
        cmocka_unit_test(directory_and_deletion_records_round_trip_and_bad_ones_are_refused),
        cmocka_unit_test(tier_adds_evictions_to_files_and_removes_replay_on_the_standby),
        cmocka_unit_test(a_snapshot_keeps_disk_replicas_and_disk_only_objects),
        cmocka_unit_test(disk_and_spill_records_that_contradict_the_state_are_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
