/* Master core: DISK replicas (master_tier.c) - listed after the memory
 * replicas, kept through eviction and unmount, restored by a scan, and their
 * files dropped (through opts.disk_drop) exactly when the object goes. */
#include "master_test_util.h"

#define OBJ 1000

typedef struct drops {
    int n;
    char last[64];
} drops_t;

static void on_drop(void *arg, const char *key, size_t len)
{
    drops_t *d = arg;
    d->n++;
    snprintf(d->last, sizeof(d->last), "%.*s", (int)len, key);
}

static mc_master_t *tier_master(drops_t *d, double hw)
{
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 1000000 * SEC;
    o.eviction_high_watermark = hw;
    o.eviction_ratio = 1.0;
    o.disk_drop = on_drop;
    o.disk_drop_arg = d;
    return master_new(&o);
}

static void a_disk_replica_is_listed_after_the_memory_ones(void **state)
{
    (void)state;
    drops_t d = {0};
    mc_master_t *m = tier_master(&d, 0.95);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 1 << 20, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "k", OBJ, 1, T0), MC_OK);
    assert_int_equal(mc_master_tier_add(m, "k", 1, OBJ + 1, T0), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_tier_add(m, "nope", 4, OBJ, T0), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_tier_add(m, "k", 1, OBJ, T0), MC_OK);
    mc_master_replica_desc_t r[4];
    uint32_t n = 0;
    assert_int_equal(mc_master_get_replica_list(m, "k", 1, T0, r, 4, &n, NULL), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(r[0].kind, MC_MASTER_REPLICA_MEMORY);
    assert_int_equal(r[1].kind, MC_MASTER_REPLICA_DISK);
    assert_int_equal(r[1].size, OBJ);
    assert_int_equal(r[1].status, MC_MASTER_REPLICA_COMPLETE);
    assert_int_equal(d.n, 0);
    mc_master_destroy(m); /* a stopping master deletes no file */
    assert_int_equal(d.n, 0);
}

static void eviction_keeps_an_object_with_a_disk_replica_and_takes_no_space(void **state)
{
    (void)state;
    drops_t d = {0};
    mc_master_t *m = tier_master(&d, 0.5);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "disk", OBJ, 1, T0), MC_OK);
    assert_int_equal(mc_master_tier_add(m, "disk", 4, OBJ, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "mem", OBJ, 1, T0), MC_OK);
    for (int i = 0; i < 5; i++) {
        char k[16];
        snprintf(k, sizeof(k), "f%d", i);
        assert_int_equal(put_obj(m, C1, k, OBJ, 1, T0 + 1), MC_OK);
    }
    mc_master_tick(m, T0 + 10 * SEC);
    assert_true(stats(m).evicted_keys > 0);
    assert_int_equal(stats(m).allocated_bytes, 0);
    assert_int_equal(exists(m, "mem", T0 + 10 * SEC), 0);
    assert_int_equal(exists(m, "disk", T0 + 10 * SEC), 1);
    mc_master_replica_desc_t r[4];
    uint32_t n = 0;
    assert_int_equal(mc_master_get_replica_list(m, "disk", 4, T0 + 10 * SEC, r, 4, &n, NULL),
                     MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].kind, MC_MASTER_REPLICA_DISK);
    assert_int_equal(d.n, 0); /* eviction keeps the file */
    /* the disk-only object is never an eviction candidate again */
    mc_master_tick(m, T0 + 100 * SEC);
    assert_int_equal(exists(m, "disk", T0 + 100 * SEC), 1);
    /* an unmount keeps it too */
    assert_int_equal(put_obj(m, C1, "disk2", OBJ, 1, T0 + 100 * SEC), MC_OK);
    assert_int_equal(mc_master_tier_add(m, "disk2", 5, OBJ, T0), MC_OK);
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), T0 + 200 * SEC, NULL), MC_OK);
    assert_int_equal(exists(m, "disk2", T0 + 200 * SEC), 1);
    /* remove drops the file */
    assert_int_equal(rm(m, "disk", 0, T0 + 300 * SEC), MC_OK);
    assert_int_equal(d.n, 1);
    assert_string_equal(d.last, "disk");
    mc_master_destroy(m);
}

static void a_revoked_put_drops_its_eagerly_written_file(void **state)
{
    (void)state;
    drops_t d = {0};
    mc_master_t *m = tier_master(&d, 0.95);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 1 << 20, T0), MC_OK);
    assert_int_equal(put_start_n(m, C1, "k", OBJ, 1, T0, NULL), MC_OK);
    assert_int_equal(mc_master_tier_add(m, "k", 1, OBJ, T0), MC_OK); /* eager: before PutEnd */
    assert_int_equal(mc_master_put_revoke(m, C1, "k", 1, T0), MC_OK);
    assert_int_equal(d.n, 1);
    mc_master_destroy(m);
}

static void count_call(void *arg)
{
    ++*(int *)arg;
}

static void restored_objects_are_readable_and_file_deletion_waits_for_absence(void **state)
{
    (void)state;
    drops_t d = {0};
    mc_master_t *m = tier_master(&d, 0.95);
    assert_int_equal(mc_master_tier_restore(m, "r", 1, OBJ, T0), MC_OK);
    assert_int_equal(mc_master_tier_restore(m, "r", 1, OBJ + 1, T0), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_tier_restore(m, "z", 1, 0, T0), MC_ERR_INVALID_PARAMS);
    assert_int_equal(exists(m, "r", T0), 1);
    uint32_t n = 0;
    assert_int_equal(get_n(m, "r", T0, &n), MC_OK);
    assert_int_equal(n, 1);
    /* a new put of the key is refused: the object exists */
    assert_int_equal(mount_seg(m, C1, 1, "n1", 1 << 20, T0), MC_OK);
    assert_int_equal(put_start_n(m, C1, "r", OBJ, 1, T0, NULL), MC_ERR_OBJECT_ALREADY_EXISTS);
    int calls = 0;
    assert_int_equal(mc_master_tier_if_absent(m, "r", 1, count_call, &calls),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(calls, 0);
    assert_int_equal(rm(m, "r", 0, T0 + 10 * SEC), MC_OK);
    assert_int_equal(d.n, 1);
    assert_int_equal(mc_master_tier_if_absent(m, "r", 1, count_call, &calls), MC_OK);
    assert_int_equal(calls, 1);
    mc_master_destroy(m);
}

static void the_quota_removes_the_oldest_disk_only_objects_first(void **state)
{
    (void)state;
    drops_t d = {0};
    mc_master_t *m = tier_master(&d, 0.95);
    char k[16];
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "q%d", i);
        assert_int_equal(mc_master_tier_restore(m, k, strlen(k), OBJ, T0 + (uint64_t)i * SEC),
                         MC_OK);
    }
    /* one in memory too (not a candidate), one being read (leased) */
    assert_int_equal(mount_seg(m, C1, 1, "n1", 1 << 20, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "mem", OBJ, 1, T0), MC_OK);
    assert_int_equal(mc_master_tier_add(m, "mem", 3, OBJ, T0), MC_OK);
    uint32_t n;
    assert_int_equal(get_n(m, "q0", T0 + 20 * SEC, &n), MC_OK); /* leased until +21 s */
    mc_master_tier_stats_t ts;
    mc_master_tier_stats(m, &ts);
    assert_int_equal(ts.disk_objects, 11);
    assert_int_equal(ts.disk_bytes, 11 * OBJ);
    /* under the quota: nothing */
    assert_int_equal(mc_master_tier_enforce_quota(m, 20 * OBJ, T0 + 20 * SEC), 0);
    assert_int_equal(mc_master_tier_enforce_quota(m, 0, T0 + 20 * SEC), 0);
    /* quota 5 objects: down to 95% of it (4.75): 7 must go, oldest first,
     * the leased q0 and the in-memory one staying */
    assert_int_equal(mc_master_tier_enforce_quota(m, 5 * OBJ, T0 + 20 * SEC), 7);
    assert_int_equal(d.n, 7);
    assert_int_equal(exists(m, "q0", T0 + 20 * SEC), 1);
    assert_int_equal(exists(m, "mem", T0 + 20 * SEC), 1);
    for (int i = 1; i <= 7; i++) {
        snprintf(k, sizeof(k), "q%d", i);
        assert_int_equal(exists(m, k, T0 + 20 * SEC), 0);
    }
    assert_int_equal(exists(m, "q8", T0 + 20 * SEC), 1);
    assert_int_equal(exists(m, "q9", T0 + 20 * SEC), 1);
    mc_master_tier_stats(m, &ts);
    assert_int_equal(ts.disk_objects, 4);
    assert_int_equal(ts.disk_bytes, 4 * OBJ);
    assert_int_equal(ts.disk_evicted, 7);
    /* a removed object's bytes leave the count too */
    assert_int_equal(rm(m, "q9", 0, T0 + 30 * SEC), MC_OK);
    mc_master_tier_stats(m, &ts);
    assert_int_equal(ts.disk_bytes, 3 * OBJ);
    mc_master_destroy(m);
}

/* A scan that finds the file of a key whose new put is unfinished (possible
 * when a leader scans on taking over) leaves the put alone: the file is of
 * an older put; the writer reports its own. */
static void a_scan_leaves_an_unfinished_put_of_the_key_alone(void **state)
{
    (void)state;
    drops_t d = {0};
    mc_master_t *m = tier_master(&d, 0.95);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 1 << 20, T0), MC_OK);
    assert_int_equal(put_start_n(m, C1, "k", OBJ, 1, T0, NULL), MC_OK);
    assert_int_equal(mc_master_tier_restore(m, "k", 1, OBJ, T0), MC_ERR_OBJECT_ALREADY_EXISTS);
    mc_master_tier_stats_t ts;
    mc_master_tier_stats(m, &ts);
    assert_int_equal(ts.disk_objects, 0);
    /* finished: the file counts */
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0), MC_OK);
    assert_int_equal(mc_master_tier_restore(m, "k", 1, OBJ, T0), MC_OK);
    mc_master_tier_stats(m, &ts);
    assert_int_equal(ts.disk_objects, 1);
    mc_master_destroy(m);
}

/* A new HA leader's scan restores only keys it has no object of: the
 * journal has the DISK replicas of the others, and their files may be of
 * older puts. */
static void a_new_leaders_scan_restores_only_absent_keys(void **state)
{
    (void)state;
    drops_t d = {0};
    mc_master_t *m = tier_master(&d, 0.95);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 1 << 20, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "k", OBJ, 1, T0), MC_OK);
    assert_int_equal(mc_master_tier_restore_absent(m, "k", 1, OBJ, T0),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_master_tier_restore_absent(m, "new", 3, OBJ, T0), MC_OK);
    assert_int_equal(mc_master_tier_restore_absent(m, "bad", 3, 0, T0), MC_ERR_INVALID_PARAMS);
    mc_master_tier_stats_t ts;
    mc_master_tier_stats(m, &ts);
    assert_int_equal(ts.disk_objects, 1);
    assert_true(exists(m, "new", T0));
    mc_master_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_disk_replica_is_listed_after_the_memory_ones),
        cmocka_unit_test(eviction_keeps_an_object_with_a_disk_replica_and_takes_no_space),
        cmocka_unit_test(a_revoked_put_drops_its_eagerly_written_file),
        cmocka_unit_test(restored_objects_are_readable_and_file_deletion_waits_for_absence),
        cmocka_unit_test(the_quota_removes_the_oldest_disk_only_objects_first),
        cmocka_unit_test(a_scan_leaves_an_unfinished_put_of_the_key_alone),
        cmocka_unit_test(a_new_leaders_scan_restores_only_absent_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
