/*
 * store_cases.h - the store client's cases that every transport must pass,
 * parameterised by the protocol of the client and the nodes
 * (store_client_test: tcp; store_rdma_test: rdma on emulated NICs). Each
 * test program starts its cluster (cluster.h) and client into a
 * store_env_t, lists these cases among its own, and adds what only its
 * transport has.
 *
 * Where the transport counts what it moved (store_env_t.moved), the cases
 * also check that every value crossed it (at least its bytes each way).
 * They assume the pool is empty when they start (each removes what it put)
 * and two nodes of the client's protocol; the killed-node case kills node 0.
 */
#ifndef MC_TEST_STORE_CASES_H
#define MC_TEST_STORE_CASES_H

#include "cluster.h"
#include "mooncake/store.h"
#include "util/mem.h"
#include "util/time.h"

#define SC_MIB (1ull << 20)

typedef struct store_env {
    tc_cluster_t c; /* node 0 and 1 are the client's peers (same protocol) */
    mc_store_t *s;  /* the client under test: no segment of its own */
    const char *protocol;
    size_t staging;   /* the client's local_buffer_size */
    size_t big;       /* a value of several staging buffers that fits a node */
    size_t batch_big; /* three of these do not fit the staging buffer at once */
    /* bytes the client's transport moved so far (both ways), or NULL when
     * the transport does not count */
    uint64_t (*moved)(struct store_env *e);
} store_env_t;

/* Deterministic bytes for (seed, offset) (cluster.h's tc_fill). */
static inline void sc_fill(uint8_t *p, size_t n, uint64_t seed)
{
    tc_fill(p, n, seed);
}

static inline uint64_t sc_moved(store_env_t *e)
{
    return e->moved != NULL ? e->moved(e) : 0;
}

/* At least want bytes crossed the transport since before (when it counts). */
static inline void sc_check_moved(store_env_t *e, uint64_t before, uint64_t want)
{
    if (e->moved != NULL && e->moved(e) - before < want)
        fail_msg("the %s transport moved %llu bytes, want at least %llu", e->protocol,
                 (unsigned long long)(e->moved(e) - before), (unsigned long long)want);
}

/* Put (replicas on segment `where` when not NULL) then get back, byte for
 * byte; nothing is written past the object. */
static inline void sc_round_trip(mc_store_t *s, const char *key, size_t len, uint32_t replicas,
                                 const char *where)
{
    uint8_t *v = malloc(len), *back = malloc(len + 16);
    assert_non_null(v);
    assert_non_null(back);
    tc_fill(v, len, len ^ strlen(key));
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = replicas;
    const char *pref[1] = {where};
    if (where != NULL) {
        rc.preferred_segments = pref;
        rc.n_preferred = 1;
    }
    assert_int_equal(mc_store_put(s, key, strlen(key), v, len, &rc), MC_OK);
    memset(back, 0xee, len + 16);
    assert_int_equal(mc_store_get(s, key, strlen(key), back, len + 16, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    assert_int_equal(back[len], 0xee); /* nothing written past the object */
    free(v);
    free(back);
}

/* The segment holding key's only replica. */
static inline void sc_replica_of(mc_store_t *s, const char *key, char *seg, size_t room)
{
    mc_store_replica_t r[2];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(s, key, strlen(key), r, 2, &n), MC_OK);
    assert_int_equal(n, 1);
    snprintf(seg, room, "%s", r[0].segment);
}

/* Space of objects force-removed while leased is reused only when their
 * lease (1 s) ends: wait for it before cases that need much of the pool. */
/* Ranges of the value key (its len bytes are val) read with
 * mc_store_get_ranges into registered memory dst (room for len bytes):
 * unaligned, across pieces, the last bytes, an empty one; one past the end
 * and memory outside registered buffers (plain) fail alone; a missing key
 * fails them all. */
static inline void sc_ranges_check(mc_store_t *s, const char *key, const uint8_t *val, size_t len,
                                   uint8_t *dst, void *plain)
{
    size_t half = len / 2, klen = strlen(key);
    memset(dst, 0, len);
    uint64_t rsrc[] = {1, len - 7, 3 * SC_MIB, 0, len - 3};
    uint64_t rlen[] = {half + 3, 7, 11, 0, 4};
    void *rdst[] = {dst, dst + half + 4096, dst + half + 8192, dst, dst};
    int64_t rres[5];
    assert_int_equal(mc_store_get_ranges(s, key, klen, 5, rsrc, rdst, rlen, rres), MC_OK);
    assert_int_equal(rres[0], (int64_t)rlen[0]);
    assert_int_equal(rres[1], 7);
    assert_int_equal(rres[2], 11);
    assert_int_equal(rres[3], 0);
    assert_int_equal(rres[4], MC_ERR_INVALID_PARAMS);
    assert_memory_equal(dst, val + 1, rlen[0]);
    assert_memory_equal(dst + half + 4096, val + len - 7, 7);
    assert_memory_equal(dst + half + 8192, val + 3 * SC_MIB, 11);
    void *pdst[] = {plain};
    assert_int_equal(mc_store_get_ranges(s, key, klen, 1, rsrc, pdst, rlen + 1, rres), MC_OK);
    assert_int_equal(rres[0], MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_get_ranges(s, "sc-none", 7, 2, rsrc, rdst, rlen, rres),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(rres[0], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(rres[1], MC_ERR_OBJECT_NOT_FOUND);
}

static inline void sc_wait_parked_space(void)
{
    usleep(1100000 * TC_SLOW);
}

/* ------------------------------------------------------------------ cases */

static void values_of_many_sizes_round_trip_byte_for_byte(void **state)
{
    store_env_t *e = *state;
    static const size_t sizes[] = {1,
                                   2,
                                   7,
                                   8,
                                   9,
                                   100,
                                   4095,
                                   4096,
                                   4097,
                                   65535,
                                   65536,
                                   65537,
                                   81920,
                                   SC_MIB + 3,
                                   4 * SC_MIB - 1,
                                   4 * SC_MIB,
                                   4 * SC_MIB + 1,
                                   9 * SC_MIB + 7,
                                   16 * SC_MIB - 1,
                                   16 * SC_MIB};
    char key[64], seg[256];
    for (size_t i = 0; i < MC_ARRAY_SIZE(sizes); i++) {
        /* alternate the nodes so both peers serve */
        const char *where = e->c.node[i % 2].name;
        snprintf(key, sizeof(key), "size-%zu", sizes[i]);
        uint64_t before = sc_moved(e);
        sc_round_trip(e->s, key, sizes[i], 1, where);
        sc_check_moved(e, before, 2 * sizes[i]); /* written and read back */
        sc_replica_of(e->s, key, seg, sizeof(seg));
        assert_string_equal(seg, where);
        assert_int_equal(mc_store_get_size(e->s, key, strlen(key)), (int64_t)sizes[i]);
    }
    /* several staging buffers' worth: it travels in pieces both ways */
    uint64_t before = sc_moved(e);
    sc_round_trip(e->s, "size-big", e->big, 1, NULL);
    sc_check_moved(e, before, 2 * e->big);
    assert_int_equal(mc_store_remove(e->s, "size-big", 8, 1), MC_OK);
    assert_int_equal(mc_store_remove_by_regex(e->s, "^size-", 1), (int64_t)MC_ARRAY_SIZE(sizes));
}

static void registered_buffers_and_parts_round_trip_without_staging(void **state)
{
    store_env_t *e = *state;
    size_t len = 9 * SC_MIB + 5; /* over twice some staging buffers: it could not stage at once */
    uint8_t *reg = aligned_alloc(4096, 20 * SC_MIB);
    assert_non_null(reg);
    assert_int_equal(mc_store_register_buffer(e->s, reg, 20 * SC_MIB), MC_OK);
    tc_fill(reg, len, 42);
    uint64_t before = sc_moved(e);
    assert_int_equal(mc_store_put_from(e->s, "zc", 2, reg, len, NULL), MC_OK);
    uint8_t *dst = reg + 10 * SC_MIB;
    memset(dst, 0, len);
    assert_int_equal(mc_store_get_into(e->s, "zc", 2, dst, 10 * SC_MIB), (int64_t)len);
    assert_memory_equal(dst, reg, len);
    sc_check_moved(e, before, 2 * len);
    uint8_t plain_dst[16];
    sc_ranges_check(e->s, "zc", reg, len, dst, plain_dst);
    /* the zero-copy forms insist on registered memory */
    uint8_t plain[64];
    assert_int_equal(mc_store_put_from(e->s, "zc2", 3, plain, sizeof(plain), NULL),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_store_get_into(e->s, "zc", 2, plain, sizeof(plain)), MC_ERR_INVALID_PARAMS);
    /* a plain get into registered memory works in place too */
    memset(dst, 0, len);
    assert_int_equal(mc_store_get(e->s, "zc", 2, dst, len, NULL), (int64_t)len);
    assert_memory_equal(dst, reg, len);
    /* a plain get into too small a registered buffer reports the size */
    uint64_t need = 0;
    assert_int_equal(mc_store_get(e->s, "zc", 2, dst, 100, &need), MC_ERR_BUFFER_OVERFLOW);
    assert_int_equal(need, len);
    assert_int_equal(mc_store_unregister_buffer(e->s, reg), MC_OK);
    assert_int_equal(mc_store_unregister_buffer(e->s, reg), MC_ERR_ADDRESS_NOT_REGISTERED);
    /* unregistered now: the same memory is served (through the staging
     * buffer where the transport needs registered memory) */
    memset(dst, 0, len);
    assert_int_equal(mc_store_get(e->s, "zc", 2, dst, len, NULL), (int64_t)len);
    assert_memory_equal(dst, reg, len);

    /* gather: the value is the concatenation of the parts */
    size_t plen = 3 * SC_MIB + 5;
    uint8_t *whole = malloc(plen), *back = malloc(plen);
    tc_fill(whole, plen, 7);
    mc_slice_t parts[3] = {
        {whole, 1}, {whole + 1, SC_MIB}, {whole + 1 + SC_MIB, plen - 1 - SC_MIB}};
    assert_int_equal(mc_store_put_parts(e->s, "parts", 5, parts, 3, NULL), MC_OK);
    assert_int_equal(mc_store_get(e->s, "parts", 5, back, plen, NULL), (int64_t)plen);
    assert_memory_equal(back, whole, plen);
    free(whole);
    free(back);
    free(reg);
    assert_int_equal(mc_store_remove(e->s, "zc", 2, 1), MC_OK);
    assert_int_equal(mc_store_remove(e->s, "parts", 5, 1), MC_OK);
}

static void two_replicas_land_on_the_two_nodes(void **state)
{
    store_env_t *e = *state;
    sc_wait_parked_space();
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = 2;
    const char *pref[2] = {e->c.node[0].name, e->c.node[1].name};
    rc.preferred_segments = pref;
    rc.n_preferred = 2;
    size_t len = 5 * SC_MIB + 1;
    uint8_t *v = malloc(len), *back = malloc(len);
    tc_fill(v, len, 5);
    uint64_t before = sc_moved(e);
    assert_int_equal(mc_store_put(e->s, "two", 3, v, len, &rc), MC_OK);
    sc_check_moved(e, before, 2 * len); /* each replica written */
    mc_store_replica_t r[4];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(e->s, "two", 3, r, 4, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_string_not_equal(r[0].segment, r[1].segment);
    for (uint32_t i = 0; i < n; i++) {
        assert_true(r[i].complete);
        assert_int_equal(r[i].size, len);
        assert_true(strcmp(r[i].segment, e->c.node[0].name) == 0 ||
                    strcmp(r[i].segment, e->c.node[1].name) == 0);
    }
    assert_int_equal(mc_store_get(e->s, "two", 3, back, len, NULL), (int64_t)len);
    assert_memory_equal(back, v, len);
    /* more replicas than nodes: best effort */
    sc_round_trip(e->s, "three", 1000, 3, NULL);
    assert_int_equal(mc_store_query(e->s, "three", 5, r, 4, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(mc_store_remove_all(e->s, 1), 2);
    free(v);
    free(back);
}

static void batch_calls_report_each_key(void **state)
{
    store_env_t *e = *state;
    enum { N = 6 };
    char kbuf[N][16];
    mc_slice_t keys[N], vals[N], bufs[N];
    uint8_t *data[N], *back[N];
    for (int i = 0; i < N; i++) {
        snprintf(kbuf[i], sizeof(kbuf[i]), "b%d", i);
        keys[i] = (mc_slice_t){kbuf[i], strlen(kbuf[i])};
        size_t len = (size_t)(i + 1) * 100003;
        data[i] = malloc(len);
        back[i] = malloc(len);
        tc_fill(data[i], len, (uint64_t)i);
        vals[i] = (mc_slice_t){data[i], len};
        bufs[i] = (mc_slice_t){back[i], len};
    }
    keys[3] = (mc_slice_t){"", 0}; /* one bad key */
    mc_status_t st[N];
    uint64_t before = sc_moved(e);
    assert_int_equal(mc_store_batch_put(e->s, keys, vals, N, NULL, st), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], i == 3 ? MC_ERR_INVALID_KEY : MC_OK);
    /* again: they exist now */
    assert_int_equal(mc_store_batch_put(e->s, keys, vals, 2, NULL, st), MC_OK);
    assert_int_equal(st[0], MC_ERR_OBJECT_ALREADY_EXISTS);
    int ex[N];
    assert_int_equal(mc_store_batch_exist(e->s, keys, N, ex), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(ex[i], i == 3 ? MC_ERR_INVALID_KEY : 1);
    int64_t res[N];
    assert_int_equal(mc_store_batch_get(e->s, keys, bufs, N, res), MC_OK);
    uint64_t total = 0;
    for (int i = 0; i < N; i++) {
        if (i == 3) {
            assert_int_equal(res[i], MC_ERR_INVALID_KEY);
            continue;
        }
        assert_int_equal(res[i], (int64_t)vals[i].len);
        assert_memory_equal(back[i], data[i], vals[i].len);
        total += vals[i].len;
    }
    sc_check_moved(e, before, 2 * total);
    assert_int_equal(mc_store_batch_remove(e->s, keys, N, 1, st), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], i == 3 ? MC_ERR_INVALID_KEY : MC_OK);
    assert_int_equal(mc_store_batch_exist(e->s, keys, N, ex), MC_OK);
    assert_int_equal(ex[0], 0);
    for (int i = 0; i < N; i++) {
        free(data[i]);
        free(back[i]);
    }

    /* three values that do not fit the staging buffer together: still one call */
    sc_wait_parked_space();
    size_t blen = e->batch_big;
    mc_slice_t bk[3], bv[3], bo[3];
    for (int i = 0; i < 3; i++) {
        snprintf(kbuf[i], sizeof(kbuf[i]), "big%d", i);
        bk[i] = (mc_slice_t){kbuf[i], strlen(kbuf[i])};
        bv[i] = (mc_slice_t){malloc(blen), blen};
        bo[i] = (mc_slice_t){malloc(blen), blen};
        tc_fill(bv[i].ptr, blen, (uint64_t)i + 99);
    }
    assert_int_equal(mc_store_batch_put(e->s, bk, bv, 3, NULL, st), MC_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(st[i], MC_OK);
    assert_int_equal(mc_store_batch_get(e->s, bk, bo, 3, res), MC_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i], (int64_t)blen);
        assert_memory_equal(bo[i].ptr, bv[i].ptr, blen);
    }
    /* and one of them alone */
    memset(bo[2].ptr, 0, blen);
    assert_int_equal(mc_store_get(e->s, "big2", 4, bo[2].ptr, blen, NULL), (int64_t)blen);
    assert_memory_equal(bo[2].ptr, bv[2].ptr, blen);
    for (int i = 0; i < 3; i++) {
        free(bv[i].ptr);
        free(bo[i].ptr);
    }
    assert_int_equal(mc_store_remove_by_regex(e->s, "^big", 1), 3);
}

/* mc_store_get_alloc's allocator: records the size it was asked for. */
typedef struct sc_alloc_rec {
    uint64_t size;
    int calls;
    void *p;
} sc_alloc_rec_t;

static inline void *sc_rec_alloc(void *arg, uint64_t size)
{
    sc_alloc_rec_t *r = arg;
    r->size = size;
    r->calls++;
    r->p = malloc(size);
    return r->p;
}

static void upserts_pieces_allocs_and_sizes(void **state)
{
    store_env_t *e = *state;
    uint8_t a[1000], b[3000], out[4000];
    sc_fill(a, sizeof(a), 1);
    sc_fill(b, sizeof(b), 2);
    /* upsert replaces what put keeps */
    assert_int_equal(mc_store_put(e->s, "u", 1, a, sizeof(a), NULL), MC_OK);
    assert_int_equal(mc_store_put(e->s, "u", 1, b, sizeof(b), NULL), MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_store_upsert(e->s, "u", 1, b, sizeof(b), NULL), MC_OK);
    assert_int_equal(mc_store_get(e->s, "u", 1, out, sizeof(out), NULL), (int64_t)sizeof(b));
    assert_memory_equal(out, b, sizeof(b));
    mc_slice_t two[2] = {{a, 10}, {b, 20}};
    assert_int_equal(mc_store_upsert_parts(e->s, "u", 1, two, 2, NULL), MC_OK);
    assert_int_equal(mc_store_get(e->s, "u", 1, out, sizeof(out), NULL), 30);
    assert_memory_equal(out, a, 10);
    assert_memory_equal(out + 10, b, 20);

    /* upstream's soft pin rules, checked before any RPC */
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.has_soft_pin_ttl = 1;
    rc.soft_pin_ttl_ms = 1000;
    assert_int_equal(mc_store_put(e->s, "p", 1, a, 10, &rc), MC_ERR_INVALID_PARAMS);
    rc.soft_pin_action = 7;
    assert_int_equal(mc_store_put(e->s, "p", 1, a, 10, &rc), MC_ERR_INVALID_PARAMS);
    rc.soft_pin_action = MC_SOFT_PIN_ENABLE;
    rc.with_hard_pin = 1;
    assert_int_equal(mc_store_put(e->s, "p", 1, a, 10, &rc), MC_OK);

    /* values in pieces: key i in i + 1 pieces, read back into other layouts */
    enum { N = 3 };
    mc_slice_t keys[N] = {{"pa", 2}, {"pb", 2}, {"pc", 2}};
    mc_slice_t parts[6];
    size_t np[N] = {1, 2, 3};
    uint8_t *src = malloc(600000), *dst = malloc(600000);
    sc_fill(src, 600000, 3);
    size_t at = 0, off = 0;
    for (int i = 0; i < N; i++)
        for (size_t q = 0; q < np[i]; q++) {
            size_t len = 1000 * (at + 1) + 7;
            parts[at++] = (mc_slice_t){src + off, len};
            off += len;
        }
    mc_status_t st[N];
    assert_int_equal(mc_store_batch_put_parts(e->s, keys, parts, np, N, NULL, st), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], MC_OK);
    /* back as one piece each: the concatenations */
    int64_t sizes[N + 1];
    mc_slice_t sk[N + 1] = {keys[0], keys[1], keys[2], {"nosuch", 6}};
    assert_int_equal(mc_store_batch_get_size(e->s, sk, N + 1, sizes), MC_OK);
    assert_int_equal(sizes[0], 1007);
    assert_int_equal(sizes[1], 2007 + 3007);
    assert_int_equal(sizes[2], 4007 + 5007 + 6007);
    assert_int_equal(sizes[3], MC_ERR_OBJECT_NOT_FOUND);
    mc_slice_t one[N];
    for (int i = 0, o = 0; i < N; i++) {
        one[i] = (mc_slice_t){dst + o, (size_t)sizes[i]};
        o += (int)sizes[i];
    }
    int64_t res[N];
    memset(dst, 0, 600000);
    assert_int_equal(mc_store_batch_get_parts(e->s, keys, one, (size_t[]){1, 1, 1}, N, res), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(res[i], sizes[i]);
    assert_memory_equal(dst, src, off);
    /* scattered over pieces of other sizes (key pc: 3 pieces -> 2, the
     * second one larger than needed) */
    mc_slice_t sc[2] = {{dst, 100}, {dst + 100, 20000}};
    memset(dst, 0, 600000);
    assert_int_equal(mc_store_batch_get_parts(e->s, &keys[2], sc, (size_t[]){2}, 1, res), MC_OK);
    assert_int_equal(res[0], sizes[2]);
    assert_memory_equal(dst, src + 1007 + 2007 + 3007, (size_t)sizes[2]);
    /* too little room: BUFFER_OVERFLOW */
    mc_slice_t small[1] = {{dst, 10}};
    assert_int_equal(mc_store_batch_get_parts(e->s, &keys[1], small, (size_t[]){1}, 1, res), MC_OK);
    assert_int_equal(res[0], MC_ERR_BUFFER_OVERFLOW);
    /* a batch upsert of pieces replaces them */
    assert_int_equal(
        mc_store_batch_upsert_parts(e->s, keys, parts + 3, (size_t[]){1, 1, 1}, N, NULL, st),
        MC_OK);
    assert_int_equal(mc_store_batch_get_size(e->s, keys, N, sizes), MC_OK);
    assert_int_equal(sizes[0], 4007);
    assert_int_equal(sizes[2], 6007);

    /* get into memory allocated once the size is known */
    sc_alloc_rec_t r = {0};
    assert_int_equal(mc_store_get_alloc(e->s, "pb", 2, sc_rec_alloc, &r), 5007);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.size, 5007);
    assert_memory_equal(r.p, parts[4].ptr, 5007);
    free(r.p);
    sc_alloc_rec_t none = {0};
    assert_int_equal(mc_store_get_alloc(e->s, "nosuch", 6, sc_rec_alloc, &none),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(none.calls, 0);
    assert_int_equal(mc_store_get_alloc(e->s, "", 0, sc_rec_alloc, &none), MC_ERR_INVALID_KEY);

    free(src);
    free(dst);
    assert_int_equal(mc_store_remove_all(e->s, 1), 5);
}

/* Kills node 0: list it last (but for tests of the other nodes). */
static void a_killed_node_leaves_two_replica_objects_readable_and_puts_go_on(void **state)
{
    store_env_t *e = *state;
    size_t len = 2 * SC_MIB + 11;
    uint8_t *v = malloc(len), *back = malloc(len);
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = 2;
    const char *pref[2] = {e->c.node[0].name, e->c.node[1].name};
    rc.preferred_segments = pref;
    rc.n_preferred = 2;
    char key[32];
    mc_store_replica_t r[2];
    uint32_t n = 0;
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "dual-%d", i);
        tc_fill(v, len, (uint64_t)i + 500);
        assert_int_equal(mc_store_put(e->s, key, strlen(key), v, len, &rc), MC_OK);
        assert_int_equal(mc_store_query(e->s, key, strlen(key), r, 2, &n), MC_OK);
        assert_int_equal(n, 2);
    }
    tc_stop_ms(&e->c.node[0].proc, SIGKILL, 2000);
    /* every object has a replica on the dead node: gets fail over */
    uint64_t before = sc_moved(e);
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "dual-%d", i);
        tc_fill(v, len, (uint64_t)i + 500);
        memset(back, 0, len);
        assert_int_equal(mc_store_get(e->s, key, strlen(key), back, len, NULL), (int64_t)len);
        assert_memory_equal(back, v, len);
    }
    sc_check_moved(e, before, 8 * len);
    /* once the master expired the node (client_ttl), its replicas are gone
     * and puts place theirs on the survivors */
    uint64_t deadline = mc_now_ms() + 15000 * TC_SLOW;
    n = 2;
    while (mc_now_ms() < deadline) {
        assert_int_equal(mc_store_query(e->s, "dual-0", 6, r, 2, &n), MC_OK);
        if (n == 1)
            break;
        usleep(200000);
    }
    assert_int_equal(n, 1);
    assert_string_equal(r[0].segment, e->c.node[1].name);
    uint32_t alive = 0;
    for (unsigned i = 0; i < e->c.nnodes; i++)
        alive += e->c.node[i].proc.pid > 0;
    rc.preferred_segments = NULL;
    rc.n_preferred = 0;
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "after-kill-%d", i);
        tc_fill(v, len, (uint64_t)i + 900);
        assert_int_equal(mc_store_put(e->s, key, strlen(key), v, len, &rc), MC_OK);
        assert_int_equal(mc_store_query(e->s, key, strlen(key), r, 2, &n), MC_OK);
        assert_int_equal(n, alive < 2 ? alive : 2);
        for (uint32_t k = 0; k < n; k++)
            assert_string_not_equal(r[k].segment, e->c.node[0].name);
        assert_int_equal(mc_store_get(e->s, key, strlen(key), back, len, NULL), (int64_t)len);
        assert_memory_equal(back, v, len);
    }
    free(v);
    free(back);
}

#endif /* MC_TEST_STORE_CASES_H */
