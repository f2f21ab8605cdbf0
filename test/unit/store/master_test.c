/* Master objects: put/get/exist/remove, their batch and regex forms, leases,
 * placement, key validation. Segments, clients and eviction have their own
 * files (master_segments_test.c, master_evict_test.c). */
#include "master_test_util.h"

#include <stdlib.h>

#include "util/hash.h"

#define KB 1024ull
#define MB (1024ull * 1024ull)

/* ---- put ---- */

static void put_start_returns_processing_replicas_inside_the_segment(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(mount_seg(m, C1, 1, "node1", 1 * MB, T0), MC_OK);
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    mc_master_replica_desc_t d[1];
    uint32_t n = 0;
    assert_int_equal(mc_master_put_start(m, C1, "k", 1, 4000, &cfg, T0, d, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(d[0].status, MC_MASTER_REPLICA_PROCESSING);
    assert_int_equal(d[0].size, 4000);
    assert_true(d[0].address >= (1ull << 40) && d[0].address + 4000 <= (1ull << 40) + MB);
    assert_string_equal(d[0].segment_name, "node1");
    assert_string_equal(d[0].te_endpoint, "node1:9000");
    assert_true(d[0].segment_id.lo == 1);
    mc_master_destroy(m);
}

static void get_before_put_end_is_not_ready(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_start_n(m, C1, "k", 100, 1, T0, NULL), MC_OK);
    assert_int_equal(get_n(m, "k", T0, NULL), MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(exists(m, "k", T0), 0);
    mc_master_destroy(m);
}

static void put_end_makes_the_object_readable_with_complete_replicas(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 100, 1, T0), MC_OK);
    mc_master_replica_desc_t d[2];
    uint32_t n = 0;
    uint64_t ttl = 0;
    assert_int_equal(mc_master_get_replica_list(m, "k", 1, T0, d, 2, &n, &ttl), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(d[0].status, MC_MASTER_REPLICA_COMPLETE);
    assert_int_equal(ttl, 5 * SEC);
    assert_int_equal(exists(m, "k", T0), 1);
    mc_master_destroy(m);
}

static void put_start_on_a_complete_object_returns_already_exists(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 100, 1, T0), MC_OK);
    assert_int_equal(put_start_n(m, C1, "k", 100, 1, T0 + 3600 * SEC, NULL),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(put_start_n(m, C2, "k", 100, 1, T0, NULL), MC_ERR_OBJECT_ALREADY_EXISTS);
    mc_master_destroy(m);
}

static void put_start_on_a_recent_unfinished_put_returns_already_exists(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_start_n(m, C1, "k", 100, 1, T0, NULL), MC_OK);
    assert_int_equal(put_start_n(m, C2, "k", 100, 1, T0 + 30 * SEC, NULL),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    mc_master_destroy(m);
}

static void put_start_rejects_zero_and_oversized_objects(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.max_object_size = 1000;
    mc_master_t *m = master_new(&o);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_start_n(m, C1, "k", 0, 1, T0, NULL), MC_ERR_INVALID_PARAMS);
    assert_int_equal(put_start_n(m, C1, "k", 1001, 1, T0, NULL), MC_ERR_INVALID_PARAMS);
    assert_int_equal(put_start_n(m, C1, "k", 1000, 1, T0, NULL), MC_OK);
    mc_master_destroy(m);
}

static void put_start_rejects_zero_replicas_and_more_than_the_limit(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.max_replicas = 3;
    mc_master_t *m = master_new(&o);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_start_n(m, C1, "k", 10, 0, T0, NULL), MC_ERR_INVALID_PARAMS);
    assert_int_equal(put_start_n(m, C1, "k", 10, 4, T0, NULL), MC_ERR_INVALID_PARAMS);
    assert_int_equal(put_start_n(m, C1, "k", 10, 3, T0, NULL), MC_OK);
    mc_master_destroy(m);
}

static void keys_that_are_empty_too_long_or_contain_nul_are_invalid(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    static char big[4097];
    memset(big, 'x', sizeof(big));
    const char nul[] = {'a', '\0', 'b'};
    struct {
        const char *k;
        size_t len;
    } bad[] = {{"", 0}, {big, 4097}, {nul, 3}, {NULL, 1}};
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    mc_master_replica_desc_t d[1];
    uint32_t n;
    int e;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *k = bad[i].k;
        size_t l = bad[i].len;
        assert_int_equal(mc_master_put_start(m, C1, k, l, 10, &cfg, T0, d, &n), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_master_put_end(m, C1, k, l, T0), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_master_put_revoke(m, C1, k, l, T0), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_master_get_replica_list(m, k, l, T0, d, 1, &n, NULL),
                         MC_ERR_INVALID_KEY);
        assert_int_equal(mc_master_exist_key(m, k, l, T0, &e), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_master_remove(m, k, l, 0, T0), MC_ERR_INVALID_KEY);
        assert_int_equal(mc_master_meta_put(m, k, l, "v", 1, C1, T0), MC_ERR_INVALID_KEY);
    }
    /* the longest valid key */
    assert_int_equal(mc_master_put_start(m, C1, big, 4096, 10, &cfg, T0, d, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, C1, big, 4096, T0), MC_OK);
    assert_int_equal(mc_master_get_replica_list(m, big, 4096, T0, d, 1, &n, NULL), MC_OK);
    mc_master_destroy(m);
}

static void put_start_without_any_segment_returns_no_available_handle(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(put_start_n(m, C1, "k", 10, 1, T0, NULL), MC_ERR_NO_AVAILABLE_HANDLE);
    mount_seg(m, C1, 1, "node1", 1000, T0);
    assert_int_equal(put_start_n(m, C1, "k", 1008, 1, T0, NULL), MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_destroy(m);
}

static void put_end_by_another_client_is_illegal(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_start_n(m, C1, "k", 10, 1, T0, NULL), MC_OK);
    assert_int_equal(mc_master_put_end(m, C2, "k", 1, T0), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_put_revoke(m, C2, "k", 1, T0), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0), MC_OK);
    mc_master_destroy(m);
}

static void put_end_and_revoke_of_an_unknown_key_are_not_found(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_put_revoke(m, C1, "k", 1, T0), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_destroy(m);
}

static void put_end_twice_is_idempotent(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 10, 1, T0), MC_OK);
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0), MC_OK);
    assert_int_equal(stats(m).processing_count, 0);
    mc_master_destroy(m);
}

static void put_revoke_frees_the_space_and_forgets_the_key(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_start_n(m, C1, "k", 5000, 1, T0, NULL), MC_OK);
    assert_int_equal(stats(m).allocated_bytes, 5000);
    assert_int_equal(mc_master_put_revoke(m, C1, "k", 1, T0), MC_OK);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.allocated_bytes, 0);
    assert_int_equal(s.key_count, 0);
    assert_int_equal(get_n(m, "k", T0, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put_obj(m, C2, "k", 10, 1, T0), MC_OK);
    mc_master_destroy(m);
}

static void put_revoke_of_a_complete_object_is_an_invalid_write(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 10, 1, T0), MC_OK);
    assert_int_equal(mc_master_put_revoke(m, C1, "k", 1, T0), MC_ERR_INVALID_WRITE);
    assert_int_equal(get_n(m, "k", T0, NULL), MC_OK);
    mc_master_destroy(m);
}

/* ---- placement ---- */

static void replicas_land_on_distinct_segments(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    char name[16];
    for (unsigned i = 1; i <= 5; i++) {
        snprintf(name, sizeof(name), "node%u", i);
        mount_seg(m, C1, i, name, MB, T0);
    }
    for (unsigned k = 0; k < 50; k++) {
        char key[16];
        mc_master_put_cfg_t cfg;
        mc_master_put_cfg_init(&cfg);
        cfg.replica_num = 3;
        mc_master_replica_desc_t d[3];
        uint32_t n = 0;
        key_of(key, sizeof(key), "k", k);
        assert_int_equal(mc_master_put_start(m, C1, key, strlen(key), 100, &cfg, T0, d, &n), MC_OK);
        assert_int_equal(n, 3);
        assert_true(d[0].segment_id.lo != d[1].segment_id.lo);
        assert_true(d[0].segment_id.lo != d[2].segment_id.lo);
        assert_true(d[1].segment_id.lo != d[2].segment_id.lo);
    }
    mc_master_destroy(m);
}

static void preferred_segments_are_used_first_in_order(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    char name[16];
    for (unsigned i = 1; i <= 6; i++) {
        snprintf(name, sizeof(name), "node%u", i);
        mount_seg(m, C1, i, name, MB, T0);
    }
    const char *pref[] = {"node5", "nosuch", "node2"};
    for (unsigned k = 0; k < 20; k++) {
        char key[16];
        mc_master_put_cfg_t cfg;
        mc_master_put_cfg_init(&cfg);
        cfg.replica_num = 3;
        cfg.preferred_segments = pref;
        cfg.n_preferred = 3;
        mc_master_replica_desc_t d[3];
        uint32_t n = 0;
        key_of(key, sizeof(key), "k", k);
        assert_int_equal(mc_master_put_start(m, C1, key, strlen(key), 100, &cfg, T0, d, &n), MC_OK);
        assert_int_equal(n, 3);
        assert_string_equal(d[0].segment_name, "node5");
        assert_string_equal(d[1].segment_name, "node2");
        assert_string_not_equal(d[2].segment_name, "node5");
        assert_string_not_equal(d[2].segment_name, "node2");
    }
    mc_master_destroy(m);
}

static void a_full_preferred_segment_falls_back_to_another(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "small", 1000, T0);
    mount_seg(m, C1, 2, "big", MB, T0);
    const char *pref[] = {"small"};
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.preferred_segments = pref;
    cfg.n_preferred = 1;
    mc_master_replica_desc_t d[1];
    uint32_t n = 0;
    assert_int_equal(mc_master_put_start(m, C1, "k", 1, 5000, &cfg, T0, d, &n), MC_OK);
    assert_string_equal(d[0].segment_name, "big");
    mc_master_destroy(m);
}

static void placement_is_best_effort_with_fewer_segments_than_replicas(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    mount_seg(m, C1, 2, "node2", MB, T0);
    uint32_t n = 0;
    assert_int_equal(put_start_n(m, C1, "k", 100, 3, T0, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(stats(m).allocated_bytes, 200);
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0), MC_OK);
    assert_int_equal(get_n(m, "k", T0, &n), MC_OK);
    assert_int_equal(n, 2);
    mc_master_destroy(m);
}

static void replicas_never_share_a_segment_name(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    /* one host exposing three buffers under its name, and one other host */
    mount_seg(m, C1, 1, "hostA", MB, T0);
    mount_seg(m, C1, 2, "hostA", MB, T0);
    mount_seg(m, C1, 3, "hostA", MB, T0);
    mount_seg(m, C2, 4, "hostB", MB, T0);
    for (unsigned k = 0; k < 20; k++) {
        char key[16];
        uint32_t n = 0;
        assert_int_equal(put_start_n(m, C1, key_of(key, sizeof(key), "k", k), 10, 3, T0, &n),
                         MC_OK);
        assert_int_equal(n, 2);
    }
    mc_master_destroy(m);
}

/* ---- leases ---- */

static void get_grants_a_lease_that_blocks_remove_until_it_expires(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 10, 1, T0), MC_OK);
    assert_int_equal(get_n(m, "k", T0 + SEC, NULL), MC_OK);
    assert_int_equal(rm(m, "k", 0, T0 + SEC), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rm(m, "k", 0, T0 + 6 * SEC - 1), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rm(m, "k", 0, T0 + 6 * SEC), MC_OK);
    assert_int_equal(stats(m).allocated_bytes, 0);
    mc_master_destroy(m);
}

static void a_get_never_shortens_a_longer_lease(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 10, 1, T0), MC_OK);
    /* two reactors: the later get arrives with an older clock reading */
    assert_int_equal(get_n(m, "k", T0 + 10 * SEC, NULL), MC_OK);
    assert_int_equal(get_n(m, "k", T0 + 9 * SEC, NULL), MC_OK);
    assert_int_equal(rm(m, "k", 0, T0 + 15 * SEC - 1), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rm(m, "k", 0, T0 + 15 * SEC), MC_OK);
    mc_master_destroy(m);
}

static void a_later_get_extends_the_lease(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 10, 1, T0), MC_OK);
    assert_int_equal(get_n(m, "k", T0, NULL), MC_OK);
    assert_int_equal(get_n(m, "k", T0 + 4 * SEC, NULL), MC_OK);
    assert_int_equal(rm(m, "k", 0, T0 + 6 * SEC), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rm(m, "k", 0, T0 + 9 * SEC), MC_OK);
    mc_master_destroy(m);
}

static void lease_ttl_is_configurable(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.lease_ttl_us = 100 * MS;
    mc_master_t *m = master_new(&o);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 10, 1, T0), MC_OK);
    mc_master_replica_desc_t d[1];
    uint32_t n;
    uint64_t ttl = 0;
    assert_int_equal(mc_master_get_replica_list(m, "k", 1, T0, d, 1, &n, &ttl), MC_OK);
    assert_int_equal(ttl, 100 * MS);
    assert_int_equal(rm(m, "k", 0, T0 + 99 * MS), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rm(m, "k", 0, T0 + 100 * MS), MC_OK);
    mc_master_destroy(m);
}

static void put_end_grants_no_lease(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 10, 1, T0), MC_OK);
    assert_int_equal(rm(m, "k", 0, T0), MC_OK);
    mc_master_destroy(m);
}

static void force_remove_ignores_the_lease_but_reserves_the_space_until_it_ends(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", 1000, T0);
    assert_int_equal(put_obj(m, C1, "k", 1000, 1, T0), MC_OK);
    assert_int_equal(get_n(m, "k", T0, NULL), MC_OK);
    assert_int_equal(rm(m, "k", 1, T0 + SEC), MC_OK);
    assert_int_equal(get_n(m, "k", T0 + SEC, NULL), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.key_count, 0);
    assert_int_equal(s.parked_count, 1);
    assert_int_equal(s.allocated_bytes, 1000);
    /* the reader may still be reading: no new put lands there yet */
    assert_int_equal(put_start_n(m, C1, "k2", 1000, 1, T0 + SEC, NULL), MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_tick(m, T0 + 5 * SEC);
    assert_int_equal(stats(m).allocated_bytes, 0);
    assert_int_equal(put_start_n(m, C1, "k2", 1000, 1, T0 + 5 * SEC, NULL), MC_OK);
    mc_master_destroy(m);
}

/* ---- remove ---- */

static void remove_of_an_unknown_key_is_not_found(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(rm(m, "k", 0, T0), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(rm(m, "k", 1, T0), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_destroy(m);
}

static void remove_of_an_unfinished_put_is_not_ready(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_start_n(m, C1, "k", 10, 1, T0, NULL), MC_OK);
    assert_int_equal(rm(m, "k", 0, T0), MC_ERR_REPLICA_IS_NOT_READY);
    mc_master_destroy(m);
}

static void force_remove_of_an_unfinished_put_reserves_its_space_until_release(void **state)
{
    (void)state;
    mc_master_t *m = master_new_immortal();
    mount_seg(m, C1, 1, "node1", 1000, T0);
    assert_int_equal(put_start_n(m, C1, "k", 1000, 1, T0, NULL), MC_OK);
    assert_int_equal(rm(m, "k", 1, T0 + SEC), MC_OK);
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0 + 2 * SEC), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(stats(m).put_start_discards, 1);
    mc_master_tick(m, T0 + 599 * SEC);
    assert_int_equal(put_start_n(m, C1, "k", 1000, 1, T0 + 599 * SEC, NULL),
                     MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_tick(m, T0 + 600 * SEC);
    assert_int_equal(put_start_n(m, C1, "k", 1000, 1, T0 + 600 * SEC, NULL), MC_OK);
    mc_master_destroy(m);
}

static void remove_by_regex_removes_matching_unleased_objects(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    char key[32];
    for (unsigned i = 0; i < 10; i++) {
        assert_int_equal(put_obj(m, C1, key_of(key, sizeof(key), "a/", i), 10, 1, T0), MC_OK);
        assert_int_equal(put_obj(m, C1, key_of(key, sizeof(key), "b/", i), 10, 1, T0), MC_OK);
    }
    assert_int_equal(get_n(m, "a/0003", T0, NULL), MC_OK);
    long cnt = -1;
    assert_int_equal(mc_master_remove_by_regex(m, "^a/", 0, T0, &cnt), MC_OK);
    assert_int_equal(cnt, 9);
    assert_int_equal(exists(m, "a/0003", T0), 1);
    assert_int_equal(exists(m, "a/0004", T0), 0);
    assert_int_equal(exists(m, "b/0004", T0), 1);
    assert_int_equal(stats(m).key_count, 11);
    mc_master_destroy(m);
}

static void remove_by_regex_rejects_a_bad_pattern(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    long cnt;
    assert_int_equal(mc_master_remove_by_regex(m, "(", 0, T0, &cnt), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_remove_by_regex(m, NULL, 0, T0, &cnt), MC_ERR_INVALID_PARAMS);
    mc_master_destroy(m);
}

static void remove_all_skips_leased_and_unfinished_objects_unless_forced(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "a", 10, 1, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "b", 10, 1, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "leased", 10, 1, T0), MC_OK);
    assert_int_equal(get_n(m, "leased", T0, NULL), MC_OK);
    assert_int_equal(put_start_n(m, C1, "busy", 10, 1, T0, NULL), MC_OK);
    long cnt = -1;
    assert_int_equal(mc_master_remove_all(m, 0, T0, &cnt), MC_OK);
    assert_int_equal(cnt, 2);
    assert_int_equal(stats(m).key_count, 2);
    assert_int_equal(mc_master_remove_all(m, 1, T0, &cnt), MC_OK);
    assert_int_equal(cnt, 2);
    assert_int_equal(stats(m).key_count, 0);
    mc_master_destroy(m);
}

/* ---- exist, regex get, listing ---- */

static void exist_reports_only_complete_objects(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(exists(m, "k", T0), 0);
    assert_int_equal(put_start_n(m, C1, "k", 10, 1, T0, NULL), MC_OK);
    assert_int_equal(exists(m, "k", T0), 0);
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0), MC_OK);
    assert_int_equal(exists(m, "k", T0), 1);
    mc_master_destroy(m);
}

/* stat and /query_key look without touching: no lease (an rm right after
 * works), no access (the LRU order stays), and they see puts in progress. */
static void query_key_describes_an_object_without_a_lease_or_an_access(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    mount_seg(m, C1, 2, "node2", MB, T0);
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS + 1];
    uint32_t n = 99;
    mc_master_key_info_t ki;
    assert_int_equal(mc_master_query_key(m, "k", 1, d, MC_MASTER_MAX_REPLICAS + 1, &n, &ki),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put_start_n(m, C1, "k", 10, 2, T0, NULL), MC_OK);
    assert_int_equal(mc_master_query_key(m, "k", 1, d, MC_MASTER_MAX_REPLICAS + 1, &n, &ki), MC_OK);
    assert_int_equal(n, 2);
    assert_false(ki.complete);
    assert_int_equal(d[0].status, MC_MASTER_REPLICA_PROCESSING);
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0), MC_OK);
    assert_int_equal(mc_master_query_key(m, "k", 1, d, MC_MASTER_MAX_REPLICAS + 1, &n, &ki), MC_OK);
    assert_true(ki.complete);
    assert_int_equal(ki.size, 10);
    assert_int_equal(n, 2);
    assert_int_equal(d[0].status, MC_MASTER_REPLICA_COMPLETE);
    assert_int_equal(d[0].size, 10);
    assert_true(strcmp(d[0].segment_name, "node1") == 0 || strcmp(d[0].segment_name, "node2") == 0);
    assert_int_equal(ki.lease_until_us, 0);
    uint64_t access = ki.last_access_us;
    assert_int_equal(mc_master_query_key(m, "k", 1, d, MC_MASTER_MAX_REPLICAS + 1, &n, &ki), MC_OK);
    assert_int_equal(ki.last_access_us, access);
    /* no lease: removable at once (a get's lease would refuse this) */
    assert_int_equal(rm(m, "k", 0, T0 + 1), MC_OK);
    assert_int_equal(mc_master_query_key(m, "", 0, d, MC_MASTER_MAX_REPLICAS + 1, &n, &ki),
                     MC_ERR_INVALID_KEY);
    mc_master_destroy(m);
}

static void exist_grants_no_lease(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 10, 1, T0), MC_OK);
    assert_int_equal(exists(m, "k", T0 + SEC), 1);
    assert_int_equal(rm(m, "k", 0, T0 + SEC), MC_OK);
    mc_master_destroy(m);
}

typedef struct regex_seen {
    unsigned count;
    int saw_b;
} regex_seen_t;

static int count_replicas(void *arg, const char *key, size_t key_len,
                          const mc_master_replica_desc_t *reps, uint32_t nrep)
{
    regex_seen_t *s = arg;
    s->count++;
    if (key_len > 0 && key[0] == 'b')
        s->saw_b = 1;
    assert_int_equal(nrep, 1);
    assert_int_equal(reps[0].status, MC_MASTER_REPLICA_COMPLETE);
    return 0;
}

static void get_by_regex_reports_complete_matches_and_leases_them(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    char key[32];
    for (unsigned i = 0; i < 5; i++) {
        assert_int_equal(put_obj(m, C1, key_of(key, sizeof(key), "a/", i), 10, 1, T0), MC_OK);
        assert_int_equal(put_obj(m, C1, key_of(key, sizeof(key), "b/", i), 10, 1, T0), MC_OK);
    }
    assert_int_equal(put_start_n(m, C1, "a/busy", 10, 1, T0, NULL), MC_OK);
    regex_seen_t seen = {0};
    size_t cnt = 0;
    int trunc = -1;
    assert_int_equal(mc_master_get_replica_list_by_regex(m, "^a/[0-9]+$", T0, count_replicas, &seen,
                                                         &cnt, &trunc),
                     MC_OK);
    assert_int_equal(cnt, 5);
    assert_int_equal(seen.count, 5);
    assert_false(seen.saw_b);
    assert_int_equal(trunc, 0);
    assert_int_equal(rm(m, "a/0001", 0, T0 + SEC), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rm(m, "b/0001", 0, T0 + SEC), MC_OK);
    mc_master_destroy(m);
}

static void get_by_regex_stops_at_the_result_cap(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.regex_max_results = 3;
    mc_master_t *m = master_new(&o);
    mount_seg(m, C1, 1, "node1", MB, T0);
    char key[32];
    for (unsigned i = 0; i < 10; i++)
        assert_int_equal(put_obj(m, C1, key_of(key, sizeof(key), "a/", i), 10, 1, T0), MC_OK);
    regex_seen_t seen = {0};
    size_t cnt = 0;
    int trunc = 0;
    assert_int_equal(
        mc_master_get_replica_list_by_regex(m, "a", T0, count_replicas, &seen, &cnt, &trunc),
        MC_OK);
    assert_int_equal(cnt, 3);
    assert_int_equal(trunc, 1);
    assert_int_equal(
        mc_master_get_replica_list_by_regex(m, "[a-", T0, count_replicas, &seen, &cnt, &trunc),
        MC_ERR_INVALID_PARAMS);
    mc_master_destroy(m);
}

static int count_keys(void *arg, const mc_master_key_info_t *ki)
{
    unsigned *n = arg;
    (*n)++;
    assert_int_equal(ki->size, 10);
    return 0;
}

static void foreach_key_lists_matching_keys_up_to_a_bound(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    char key[32];
    for (unsigned i = 0; i < 10; i++) {
        assert_int_equal(put_obj(m, C1, key_of(key, sizeof(key), "a/", i), 10, 1, T0), MC_OK);
        assert_int_equal(put_obj(m, C1, key_of(key, sizeof(key), "b/", i), 10, 1, T0), MC_OK);
    }
    unsigned n = 0;
    size_t cnt = 0;
    assert_int_equal(mc_master_foreach_key(m, NULL, 1000, count_keys, &n, &cnt), MC_OK);
    assert_int_equal(n, 20);
    n = 0;
    assert_int_equal(mc_master_foreach_key(m, "^b/", 1000, count_keys, &n, &cnt), MC_OK);
    assert_int_equal(n, 10);
    n = 0;
    assert_int_equal(mc_master_foreach_key(m, NULL, 4, count_keys, &n, &cnt), MC_OK);
    assert_int_equal(n, 4);
    assert_int_equal(cnt, 4);
    /* listing is no access: nothing got leased */
    assert_int_equal(rm(m, "a/0001", 0, T0), MC_OK);
    mc_master_destroy(m);
}

/* ---- batches ---- */

static mc_master_key_t mk(const char *s)
{
    mc_master_key_t k = {s, strlen(s)};
    return k;
}

static void batch_put_start_reports_each_item(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    mount_seg(m, C1, 2, "node2", MB, T0);
    assert_int_equal(put_obj(m, C1, "old", 10, 1, T0), MC_OK);
    mc_master_key_t keys[] = {mk("a"), mk(""), mk("old"), mk("b"), mk("a"), mk("c")};
    uint64_t sizes[] = {10, 10, 10, 0, 10, 2 * MB};
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.replica_num = 2;
    mc_master_replica_desc_t d[6 * 2];
    uint32_t nrep[6];
    mc_status_t st[6];
    assert_int_equal(mc_master_batch_put_start(m, C1, keys, sizes, 6, &cfg, T0, d, nrep, st),
                     MC_OK);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(nrep[0], 2);
    assert_true(d[0].segment_id.lo != d[1].segment_id.lo);
    assert_int_equal(st[1], MC_ERR_INVALID_KEY);
    assert_int_equal(st[2], MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(st[3], MC_ERR_INVALID_PARAMS);
    /* the same key twice in one batch: the second is a duplicate (#727) */
    assert_int_equal(st[4], MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(st[5], MC_ERR_NO_AVAILABLE_HANDLE);
    assert_int_equal(nrep[5], 0);
    assert_int_equal(stats(m).processing_count, 1);
    mc_master_destroy(m);
}

/* With a put id (clients with master discovery send one so that a resend
 * is recognised), a key given twice in one batch is still a duplicate: the
 * second must not be taken for a resend of the first and get its replicas
 * (two values written to the same space, both "put"). */
static void batch_put_start_with_a_put_id_refuses_a_key_given_twice(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    mc_master_key_t keys[] = {mk("a"), mk("b"), mk("a")};
    uint64_t sizes[] = {10, 10, 10};
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.put_id = 0x1234;
    mc_master_replica_desc_t d[3];
    uint32_t nrep[3];
    mc_status_t st[3];
    assert_int_equal(mc_master_batch_put_start(m, C1, keys, sizes, 3, &cfg, T0, d, nrep, st),
                     MC_OK);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_OK);
    assert_int_equal(st[2], MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(nrep[2], 0);
    /* the whole batch sent again (a lost answer): the same replicas, and
     * the duplicate refused again */
    mc_master_replica_desc_t d2[3];
    assert_int_equal(
        mc_master_batch_put_start(m, C1, keys, sizes, 3, &cfg, T0 + 1000, d2, nrep, st), MC_OK);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_OK);
    assert_int_equal(st[2], MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(d2[0].address, d[0].address);
    assert_int_equal(d2[1].address, d[1].address);
    assert_int_equal(stats(m).processing_count, 2);
    mc_master_destroy(m);
}

static void batch_put_start_rejects_a_bad_config_as_a_whole(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mc_master_key_t keys[] = {mk("a")};
    uint64_t sizes[] = {10};
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.replica_num = 0;
    mc_master_replica_desc_t d[1];
    uint32_t nrep[1];
    mc_status_t st[1] = {MC_AGAIN};
    assert_int_equal(mc_master_batch_put_start(m, C1, keys, sizes, 1, &cfg, T0, d, nrep, st),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(st[0], MC_AGAIN);
    mc_master_destroy(m);
}

static void batch_put_end_and_revoke_report_each_item(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_start_n(m, C1, "a", 10, 1, T0, NULL), MC_OK);
    assert_int_equal(put_start_n(m, C1, "b", 10, 1, T0, NULL), MC_OK);
    assert_int_equal(put_start_n(m, C2, "c", 10, 1, T0, NULL), MC_OK);
    mc_master_key_t keys[] = {mk("a"), mk("nosuch"), mk("c"), mk("")};
    mc_status_t st[4];
    assert_int_equal(mc_master_batch_put_end(m, C1, keys, 4, T0, st), MC_OK);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(st[2], MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(st[3], MC_ERR_INVALID_KEY);
    mc_master_key_t rk[] = {mk("a"), mk("b"), mk("c")};
    assert_int_equal(mc_master_batch_put_revoke(m, C1, rk, 3, T0, st), MC_OK);
    assert_int_equal(st[0], MC_ERR_INVALID_WRITE);
    assert_int_equal(st[1], MC_OK);
    assert_int_equal(st[2], MC_ERR_ILLEGAL_CLIENT);
    mc_master_destroy(m);
}

static void batch_get_reports_each_item(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    mount_seg(m, C1, 2, "node2", MB, T0);
    assert_int_equal(put_obj(m, C1, "a", 10, 2, T0), MC_OK);
    assert_int_equal(put_start_n(m, C1, "busy", 10, 1, T0, NULL), MC_OK);
    mc_master_key_t keys[] = {mk("a"), mk("busy"), mk("nosuch"), mk("")};
    mc_master_replica_desc_t d[4 * 1];
    uint32_t nrep[4];
    mc_status_t st[4];
    /* room for one replica per key: the first is returned */
    assert_int_equal(mc_master_batch_get_replica_list(m, keys, 4, T0, d, 1, nrep, st), MC_OK);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(nrep[0], 1);
    assert_int_equal(st[1], MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(st[2], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(st[3], MC_ERR_INVALID_KEY);
    assert_int_equal(rm(m, "a", 0, T0), MC_ERR_OBJECT_HAS_LEASE);
    mc_master_destroy(m);
}

static void batch_exist_reports_each_item(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "a", 10, 1, T0), MC_OK);
    assert_int_equal(put_start_n(m, C1, "busy", 10, 1, T0, NULL), MC_OK);
    mc_master_key_t keys[] = {mk("a"), mk("busy"), mk("nosuch"), mk("")};
    int ex[4];
    mc_status_t st[4];
    assert_int_equal(mc_master_batch_exist_key(m, keys, 4, T0, ex, st), MC_OK);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(ex[0], 1);
    assert_int_equal(ex[1], 0);
    assert_int_equal(ex[2], 0);
    assert_int_equal(st[3], MC_ERR_INVALID_KEY);
    mc_master_destroy(m);
}

static void batch_remove_reports_each_item(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "a", 10, 1, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "leased", 10, 1, T0), MC_OK);
    assert_int_equal(get_n(m, "leased", T0, NULL), MC_OK);
    assert_int_equal(put_start_n(m, C1, "busy", 10, 1, T0, NULL), MC_OK);
    mc_master_key_t keys[] = {mk("a"), mk("leased"), mk("busy"), mk("nosuch")};
    mc_status_t st[4];
    assert_int_equal(mc_master_batch_remove(m, keys, 4, 0, T0, st), MC_OK);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(st[2], MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(st[3], MC_ERR_OBJECT_NOT_FOUND);
    mc_master_destroy(m);
}

static void batch_calls_take_each_shard_lock_once(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", 64 * MB, T0);
    enum { N = 3000 };
    static char names[N][16];
    static mc_master_key_t keys[N];
    static uint64_t sizes[N];
    static mc_master_replica_desc_t d[N];
    static uint32_t nrep[N];
    static mc_status_t st[N];
    static int ex[N];
    static unsigned char used[MC_MASTER_NUM_SHARDS];
    unsigned shards = 0;
    for (unsigned i = 0; i < N; i++) {
        keys[i] = mk(key_of(names[i], sizeof(names[i]), "key", i));
        sizes[i] = 100;
        unsigned s = (unsigned)(mc_hash64(keys[i].data, keys[i].len) % MC_MASTER_NUM_SHARDS);
        if (!used[s]++)
            shards++;
    }
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    uint64_t before = stats(m).shard_locks;
    assert_int_equal(mc_master_batch_put_start(m, C1, keys, sizes, N, &cfg, T0, d, nrep, st),
                     MC_OK);
    assert_int_equal(stats(m).shard_locks - before, shards);
    before = stats(m).shard_locks;
    assert_int_equal(mc_master_batch_put_end(m, C1, keys, N, T0, st), MC_OK);
    assert_int_equal(mc_master_batch_get_replica_list(m, keys, N, T0, d, 1, nrep, st), MC_OK);
    assert_int_equal(mc_master_batch_exist_key(m, keys, N, T0, ex, st), MC_OK);
    assert_int_equal(mc_master_batch_remove(m, keys, N, 1, T0, st), MC_OK);
    assert_int_equal(stats(m).shard_locks - before, 4 * shards);
    for (unsigned i = 0; i < N; i++)
        assert_int_equal(st[i], MC_OK);
    mc_master_destroy(m);
}

/* ---- soft pin and stats ---- */

static int capture_key(void *arg, const mc_master_key_info_t *ki)
{
    *(mc_master_key_info_t *)arg = *ki;
    return 0;
}

static void soft_pin_ttl_is_clamped_to_the_maximum(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.max_soft_pin_ttl_us = 3600 * SEC;
    mc_master_t *m = master_new(&o);
    mount_seg(m, C1, 1, "node1", MB, T0);
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.with_soft_pin = 1;
    cfg.soft_pin_ttl_us = 48 * 3600 * SEC;
    mc_master_replica_desc_t d[1];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, C1, "k", 1, 10, &cfg, T0, d, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0), MC_OK);
    mc_master_key_info_t ki;
    size_t c;
    assert_int_equal(mc_master_foreach_key(m, NULL, 10, capture_key, &ki, &c), MC_OK);
    assert_int_equal(c, 1);
    assert_int_equal(ki.soft_pin_until_us, T0 + 3600 * SEC);
    assert_int_equal(stats(m).soft_pinned_count, 1);
    mc_master_destroy(m);
}

/* PutStart+PutEnd with a config; the key's info (foreach_key) after. */
static mc_status_t put_cfg(mc_master_t *m, mc_uuid_t c, const char *key, uint64_t size,
                           const mc_master_put_cfg_t *cfg, uint64_t now, uint64_t *addr)
{
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    mc_status_t st = mc_master_put_start(m, c, key, strlen(key), size, cfg, now, d, &n);
    if (st != MC_OK)
        return st;
    if (addr != NULL)
        *addr = d[0].address;
    return mc_master_put_end(m, c, key, strlen(key), now);
}

static mc_master_key_info_t key_info(mc_master_t *m, const char *key)
{
    mc_master_key_info_t ki;
    size_t c = 0;
    char re[64];
    snprintf(re, sizeof(re), "^%s$", key);
    assert_int_equal(mc_master_foreach_key(m, re, 10, capture_key, &ki, &c), MC_OK);
    assert_int_equal(c, 1);
    return ki;
}

static void a_soft_pin_ttl_without_enable_is_invalid_params(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.soft_pin_ttl_us = 10 * SEC; /* PRESERVE + ttl */
    assert_int_equal(put_cfg(m, C1, "a", 10, &cfg, T0, NULL), MC_ERR_INVALID_PARAMS);
    cfg.pin_action = MC_MASTER_PIN_DISABLE; /* DISABLE + ttl */
    assert_int_equal(put_cfg(m, C1, "a", 10, &cfg, T0, NULL), MC_ERR_INVALID_PARAMS);
    cfg.soft_pin_ttl_us = 0;
    cfg.pin_action = 3; /* no such action */
    assert_int_equal(put_cfg(m, C1, "a", 10, &cfg, T0, NULL), MC_ERR_INVALID_PARAMS);
    cfg.pin_action = MC_MASTER_PIN_ENABLE;
    cfg.soft_pin_ttl_us = 10 * SEC;
    assert_int_equal(put_cfg(m, C1, "a", 10, &cfg, T0, NULL), MC_OK);
    assert_int_equal(key_info(m, "a").soft_pin_until_us, T0 + 10 * SEC);
    assert_int_equal(stats(m).key_count, 1);
    mc_master_destroy(m);
}

static void an_upsert_replaces_a_complete_object_with_a_new_size(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    assert_int_equal(put_cfg(m, C1, "k", 100, &cfg, T0, NULL), MC_OK);
    /* a plain put of the key is refused, an upsert (by another client) is not */
    assert_int_equal(put_cfg(m, C2, "k", 200, &cfg, T0, NULL), MC_ERR_OBJECT_ALREADY_EXISTS);
    cfg.upsert = 1;
    mc_master_replica_desc_t d[1];
    uint32_t n;
    assert_int_equal(mc_master_put_start(m, C2, "k", 1, 200, &cfg, T0 + 1, d, &n), MC_OK);
    /* readers wait for the new value; the old writer cannot finish it */
    assert_int_equal(get_n(m, "k", T0 + 2, NULL), MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0 + 2), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_put_end(m, C2, "k", 1, T0 + 2), MC_OK);
    assert_int_equal(key_info(m, "k").size, 200);
    assert_int_equal(stats(m).key_count, 1);
    assert_int_equal(stats(m).allocated_bytes, 200);
    /* on a new key an upsert is a put */
    assert_int_equal(put_cfg(m, C1, "new", 10, &cfg, T0 + 3, NULL), MC_OK);
    assert_int_equal(exists(m, "new", T0 + 3), 1);
    mc_master_destroy(m);
}

static void an_upsert_of_a_leased_object_keeps_its_space_until_the_lease_ends(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL); /* lease 5 s */
    mount_seg(m, C1, 1, "node1", MB, T0);
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    uint64_t a1 = 0, a2 = 0;
    assert_int_equal(put_cfg(m, C1, "k", 100, &cfg, T0, &a1), MC_OK);
    assert_int_equal(get_n(m, "k", T0, NULL), MC_OK); /* a reader holds a lease */
    cfg.upsert = 1;
    assert_int_equal(put_cfg(m, C1, "k", 100, &cfg, T0 + 1, &a2), MC_OK);
    assert_int_not_equal(a1, a2); /* the reader's bytes are not overwritten */
    assert_int_equal(stats(m).parked_count, 1);
    mc_master_tick(m, T0 + 6 * SEC);
    assert_int_equal(stats(m).parked_count, 0);
    assert_int_equal(stats(m).allocated_bytes, 100);
    mc_master_destroy(m);
}

static void an_upsert_pre_empts_a_put_in_progress(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_start_n(m, C1, "k", 100, 1, T0, NULL), MC_OK);
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.upsert = 1;
    assert_int_equal(put_cfg(m, C2, "k", 50, &cfg, T0 + 1, NULL), MC_OK);
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0 + 2), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(key_info(m, "k").size, 50);
    /* the pre-empted writer's space waits for its release timeout */
    assert_int_equal(stats(m).parked_count, 1);
    mc_master_destroy(m);
}

static void upsert_pin_actions_preserve_enable_and_disable(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.pin_action = MC_MASTER_PIN_ENABLE;
    cfg.soft_pin_ttl_us = 60 * SEC;
    assert_int_equal(put_cfg(m, C1, "k", 10, &cfg, T0, NULL), MC_OK);
    assert_int_equal(stats(m).soft_pinned_count, 1);
    /* PRESERVE: the replacement keeps the pin's window */
    mc_master_put_cfg_init(&cfg);
    cfg.upsert = 1;
    assert_int_equal(put_cfg(m, C1, "k", 10, &cfg, T0 + SEC, NULL), MC_OK);
    assert_int_equal(key_info(m, "k").soft_pin_until_us, T0 + SEC + 60 * SEC);
    assert_int_equal(stats(m).soft_pinned_count, 1);
    /* DISABLE: it drops it */
    cfg.pin_action = MC_MASTER_PIN_DISABLE;
    assert_int_equal(put_cfg(m, C1, "k", 10, &cfg, T0 + 2 * SEC, NULL), MC_OK);
    assert_int_equal(key_info(m, "k").soft_pin_until_us, 0);
    assert_int_equal(stats(m).soft_pinned_count, 0);
    /* PRESERVE of an unpinned object: still unpinned; ENABLE: the default TTL */
    cfg.pin_action = MC_MASTER_PIN_PRESERVE;
    assert_int_equal(put_cfg(m, C1, "k", 10, &cfg, T0 + 3 * SEC, NULL), MC_OK);
    assert_int_equal(key_info(m, "k").soft_pin_until_us, 0);
    cfg.pin_action = MC_MASTER_PIN_ENABLE;
    assert_int_equal(put_cfg(m, C1, "k", 10, &cfg, T0 + 4 * SEC, NULL), MC_OK);
    assert_int_equal(key_info(m, "k").soft_pin_until_us, T0 + 4 * SEC + 30 * 60 * SEC);
    /* an expired pin is not carried over by PRESERVE */
    cfg.pin_action = MC_MASTER_PIN_PRESERVE;
    uint64_t later = T0 + 4 * SEC + 31 * 60 * SEC;
    assert_int_equal(put_cfg(m, C1, "k", 10, &cfg, later, NULL), MC_OK);
    assert_int_equal(key_info(m, "k").soft_pin_until_us, 0);
    mc_master_destroy(m);
}

static void a_hard_pinned_object_is_never_evicted_and_stays_pinned_through_upserts(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.eviction_ratio = 1.0;
    o.client_ttl_us = 1000000 * SEC;
    mc_master_t *m = master_new(&o);
    mount_seg(m, C1, 1, "node1", MB, T0);
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.hard_pin = 1;
    assert_int_equal(put_cfg(m, C1, "hard", 400 * KB, &cfg, T0, NULL), MC_OK);
    mc_master_put_cfg_init(&cfg);
    assert_int_equal(put_cfg(m, C1, "soft", 400 * KB, &cfg, T0, NULL), MC_OK);
    /* no room for a third: eviction makes some, never from the hard pin */
    assert_int_equal(put_cfg(m, C1, "third", 400 * KB, &cfg, T0 + 10 * SEC, NULL), MC_OK);
    assert_int_equal(exists(m, "hard", T0 + 10 * SEC), 1);
    assert_int_equal(exists(m, "soft", T0 + 10 * SEC), 0);
    /* an upsert with DISABLE keeps a hard pin (upstream: immutable) */
    cfg.upsert = 1;
    cfg.pin_action = MC_MASTER_PIN_DISABLE;
    assert_int_equal(put_cfg(m, C1, "hard", 400 * KB, &cfg, T0 + 11 * SEC, NULL), MC_OK);
    mc_master_put_cfg_init(&cfg);
    assert_int_equal(put_cfg(m, C1, "fourth", 400 * KB, &cfg, T0 + 20 * SEC, NULL), MC_OK);
    assert_int_equal(exists(m, "hard", T0 + 20 * SEC), 1);
    assert_int_equal(exists(m, "third", T0 + 20 * SEC), 0);
    mc_master_destroy(m);
}

static void stats_count_keys_bytes_and_value_sizes(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", 64 * MB, T0);
    mount_seg(m, C1, 2, "node2", 64 * MB, T0);
    assert_int_equal(put_obj(m, C1, "a", 4 * KB, 1, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "b", 4 * KB + 1, 2, T0), MC_OK);
    assert_int_equal(put_start_n(m, C1, "c", 20 * MB, 1, T0, NULL), MC_OK);
    assert_int_equal(put_pinned(m, C1, "d", 100 * MB / 2, T0), MC_OK);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.view_version, 7);
    assert_int_equal(s.key_count, 4);
    assert_int_equal(s.processing_count, 1);
    assert_int_equal(s.soft_pinned_count, 1);
    assert_int_equal(s.capacity_bytes, 128 * MB);
    assert_int_equal(s.allocated_bytes, 4 * KB + 2 * (4 * KB + 1) + 20 * MB + 50 * MB);
    assert_int_equal(s.segment_count, 2);
    assert_int_equal(s.active_clients, 1);
    assert_int_equal(s.value_size_count, 4);
    assert_int_equal(s.value_size_buckets[0], 1); /* <= 4K */
    assert_int_equal(s.value_size_buckets[1], 1); /* <= 64K */
    assert_int_equal(s.value_size_buckets[5], 0);
    assert_int_equal(s.value_size_buckets[6], 2); /* <= 64M: 20M and 50M */
    assert_int_equal(s.value_size_sum, 4 * KB + 4 * KB + 1 + 20 * MB + 50 * MB);
    assert_int_equal(mc_master_value_bucket_bound(7), UINT64_MAX);
    mc_master_destroy(m);
}

static void allocation_failures_in_put_start_leave_no_trace(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    unsigned failures = 0;
    for (long n = 1; n <= 8; n++) {
        char key[16];
        key_of(key, sizeof(key), "k", (unsigned)n);
        mc_master_stats_t before = stats(m);
        mc_mem_fail_nth(n);
        mc_status_t st = put_start_n(m, C1, key, 100, 1, T0, NULL);
        mc_mem_fail_nth(0);
        if (st == MC_ERR_NOMEM) {
            failures++;
            mc_master_stats_t after = stats(m);
            assert_int_equal(after.key_count, before.key_count);
            assert_int_equal(after.allocated_bytes, before.allocated_bytes);
            assert_int_equal(get_n(m, key, T0, NULL), MC_ERR_OBJECT_NOT_FOUND);
        } else {
            assert_int_equal(st, MC_OK);
        }
    }
    assert_true(failures > 0);
    /* a batch that cannot get its scratch memory fails as a whole */
    mc_master_key_t keys[] = {{"b1", 2}, {"b2", 2}};
    mc_status_t st[2] = {MC_AGAIN, MC_AGAIN};
    mc_mem_fail_nth(1);
    assert_int_equal(mc_master_batch_remove(m, keys, 2, 0, T0, st), MC_ERR_NOMEM);
    mc_mem_fail_nth(0);
    assert_int_equal(st[0], MC_AGAIN);
    mc_master_destroy(m);
}

static void create_rejects_inconsistent_options(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_t *m = NULL;
    mc_master_opts_init(&o);
    o.put_start_release_timeout_us = o.put_start_discard_timeout_us;
    assert_int_equal(mc_master_create(&o, 1, &m), MC_ERR_INVALID_PARAMS);
    mc_master_opts_init(&o);
    o.eviction_ratio = 1.5;
    assert_int_equal(mc_master_create(&o, 1, &m), MC_ERR_INVALID_PARAMS);
    mc_master_opts_init(&o);
    o.max_replicas = MC_MASTER_MAX_REPLICAS + 1;
    assert_int_equal(mc_master_create(&o, 1, &m), MC_ERR_INVALID_PARAMS);
    mc_master_opts_init(&o);
    o.max_key_len = 70000;
    assert_int_equal(mc_master_create(&o, 1, &m), MC_ERR_INVALID_PARAMS);
    assert_null(m);
    mc_master_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(put_start_returns_processing_replicas_inside_the_segment),
        cmocka_unit_test(get_before_put_end_is_not_ready),
        cmocka_unit_test(put_end_makes_the_object_readable_with_complete_replicas),
        cmocka_unit_test(put_start_on_a_complete_object_returns_already_exists),
        cmocka_unit_test(put_start_on_a_recent_unfinished_put_returns_already_exists),
        cmocka_unit_test(put_start_rejects_zero_and_oversized_objects),
        cmocka_unit_test(put_start_rejects_zero_replicas_and_more_than_the_limit),
        cmocka_unit_test(keys_that_are_empty_too_long_or_contain_nul_are_invalid),
        cmocka_unit_test(put_start_without_any_segment_returns_no_available_handle),
        cmocka_unit_test(put_end_by_another_client_is_illegal),
        cmocka_unit_test(put_end_and_revoke_of_an_unknown_key_are_not_found),
        cmocka_unit_test(put_end_twice_is_idempotent),
        cmocka_unit_test(put_revoke_frees_the_space_and_forgets_the_key),
        cmocka_unit_test(put_revoke_of_a_complete_object_is_an_invalid_write),
        cmocka_unit_test(replicas_land_on_distinct_segments),
        cmocka_unit_test(preferred_segments_are_used_first_in_order),
        cmocka_unit_test(a_full_preferred_segment_falls_back_to_another),
        cmocka_unit_test(placement_is_best_effort_with_fewer_segments_than_replicas),
        cmocka_unit_test(replicas_never_share_a_segment_name),
        cmocka_unit_test(get_grants_a_lease_that_blocks_remove_until_it_expires),
        cmocka_unit_test(a_get_never_shortens_a_longer_lease),
        cmocka_unit_test(a_later_get_extends_the_lease),
        cmocka_unit_test(lease_ttl_is_configurable),
        cmocka_unit_test(put_end_grants_no_lease),
        cmocka_unit_test(force_remove_ignores_the_lease_but_reserves_the_space_until_it_ends),
        cmocka_unit_test(remove_of_an_unknown_key_is_not_found),
        cmocka_unit_test(remove_of_an_unfinished_put_is_not_ready),
        cmocka_unit_test(force_remove_of_an_unfinished_put_reserves_its_space_until_release),
        cmocka_unit_test(remove_by_regex_removes_matching_unleased_objects),
        cmocka_unit_test(remove_by_regex_rejects_a_bad_pattern),
        cmocka_unit_test(remove_all_skips_leased_and_unfinished_objects_unless_forced),
        cmocka_unit_test(exist_reports_only_complete_objects),
        cmocka_unit_test(exist_grants_no_lease),
        cmocka_unit_test(query_key_describes_an_object_without_a_lease_or_an_access),
        cmocka_unit_test(get_by_regex_reports_complete_matches_and_leases_them),
        cmocka_unit_test(get_by_regex_stops_at_the_result_cap),
        cmocka_unit_test(foreach_key_lists_matching_keys_up_to_a_bound),
        cmocka_unit_test(batch_put_start_reports_each_item),
        cmocka_unit_test(batch_put_start_with_a_put_id_refuses_a_key_given_twice),
        cmocka_unit_test(batch_put_start_rejects_a_bad_config_as_a_whole),
        cmocka_unit_test(batch_put_end_and_revoke_report_each_item),
        cmocka_unit_test(batch_get_reports_each_item),
        cmocka_unit_test(batch_exist_reports_each_item),
        cmocka_unit_test(batch_remove_reports_each_item),
        cmocka_unit_test(batch_calls_take_each_shard_lock_once),
        cmocka_unit_test(soft_pin_ttl_is_clamped_to_the_maximum),
        cmocka_unit_test(a_soft_pin_ttl_without_enable_is_invalid_params),
        cmocka_unit_test(an_upsert_replaces_a_complete_object_with_a_new_size),
        cmocka_unit_test(an_upsert_of_a_leased_object_keeps_its_space_until_the_lease_ends),
        cmocka_unit_test(an_upsert_pre_empts_a_put_in_progress),
        cmocka_unit_test(upsert_pin_actions_preserve_enable_and_disable),
        cmocka_unit_test(a_hard_pinned_object_is_never_evicted_and_stays_pinned_through_upserts),
        cmocka_unit_test(stats_count_keys_bytes_and_value_sizes),
        cmocka_unit_test(allocation_failures_in_put_start_leave_no_trace),
        cmocka_unit_test(create_rejects_inconsistent_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
