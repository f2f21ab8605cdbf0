/* Master background work: eviction (watermark, LRU order, leases, soft pins,
 * exist-polling, allocation failure) and abandoned puts (discard, release,
 * pre-emption). */
#include "master_test_util.h"

/* One segment of 100 slots of 1000 bytes; the watermark at half. */
#define OBJ 1000u
#define SLOTS 100u

static mc_master_t *evict_master(double hw, double ratio, int allow_pinned)
{
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.eviction_high_watermark = hw;
    o.eviction_ratio = ratio;
    o.allow_evict_soft_pinned = allow_pinned;
    o.client_ttl_us = 1000000 * SEC; /* these tests jump the clock without pings */
    mc_master_t *m = master_new(&o);
    assert_int_equal(mount_seg(m, C1, 1, "node1", SLOTS * OBJ, T0), MC_OK);
    return m;
}

static const char *kname(unsigned i)
{
    static char buf[8][16];
    static unsigned next;
    char *b = buf[next++ % 8];
    snprintf(b, 16, "k%03u", i);
    return b;
}

/* Objects k000..k(n-1), object i put (and last accessed) at T0 + i s. */
static void fill(mc_master_t *m, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        assert_int_equal(put_obj(m, C1, kname(i), OBJ, 1, T0 + i * SEC), MC_OK);
}

static unsigned count_present(mc_master_t *m, unsigned from, unsigned to, uint64_t now)
{
    unsigned n = 0;
    for (unsigned i = from; i < to; i++)
        n += (unsigned)exists(m, kname(i), now);
    return n;
}

static void nothing_is_evicted_below_the_watermark(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(0.5, 0.1, 1);
    fill(m, 50);
    mc_master_tick(m, T0 + 1000 * SEC);
    assert_int_equal(stats(m).key_count, 50);
    assert_int_equal(stats(m).eviction_attempts, 0);
    mc_master_destroy(m);
}

static void eviction_above_the_watermark_takes_the_least_recently_accessed(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(0.5, 0.1, 1);
    fill(m, 60);
    /* the ten oldest are read later, so they are the most recent now */
    for (unsigned i = 0; i < 10; i++)
        assert_int_equal(get_n(m, kname(i), T0 + (100 + i) * SEC, NULL), MC_OK);
    mc_master_tick(m, T0 + 200 * SEC);
    mc_master_stats_t s = stats(m);
    /* ratio 0.6: evict max(0.1, 0.6 - 0.5 + 0.1) = 20% of 60 */
    assert_int_equal(s.evicted_keys, 12);
    assert_int_equal(s.key_count, 48);
    assert_int_equal(s.allocated_bytes, 48 * OBJ);
    assert_int_equal(s.eviction_attempts, 1);
    assert_int_equal(s.eviction_successes, 1);
    assert_int_equal(s.evicted_bytes, 12 * OBJ);
    /* exactly the twelve least recently accessed went: k010..k021 */
    assert_int_equal(count_present(m, 0, 10, T0), 10);
    assert_int_equal(count_present(m, 10, 22, T0), 0);
    assert_int_equal(count_present(m, 22, 60, T0), 38);
    mc_master_destroy(m);
}

static void leased_objects_are_never_evicted(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(0.5, 0.1, 1);
    fill(m, 60);
    uint64_t now = T0 + 200 * SEC;
    for (unsigned i = 0; i < 60; i++)
        assert_int_equal(get_n(m, kname(i), now, NULL), MC_OK);
    mc_master_tick(m, now + SEC);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.key_count, 60);
    assert_int_equal(s.eviction_attempts, 1);
    assert_int_equal(s.eviction_successes, 0);
    /* once the leases run out the same pressure evicts */
    mc_master_tick(m, now + 5 * SEC);
    assert_int_equal(stats(m).key_count, 48);
    mc_master_destroy(m);
}

static void unfinished_puts_are_never_evicted(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(0.5, 1.0, 1);
    for (unsigned i = 0; i < 60; i++)
        assert_int_equal(put_start_n(m, C1, kname(i), OBJ, 1, T0, NULL), MC_OK);
    mc_master_tick(m, T0 + SEC);
    assert_int_equal(stats(m).key_count, 60);
    assert_int_equal(stats(m).processing_count, 60);
    mc_master_destroy(m);
}

/* upstream #2187: clients polling ExistKey renewed leases and starved
 * eviction ("Success/Attempts=0/649"). Here exist neither leases nor counts
 * as an access, so polling changes nothing. */
static void polling_exist_does_not_prevent_eviction(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(0.5, 0.1, 1);
    fill(m, 60);
    uint64_t t = T0 + 100 * SEC;
    for (unsigned round = 0; round < 5; round++, t += 100 * MS) {
        for (unsigned i = 0; i < 60; i++)
            (void)exists(m, kname(i), t);
        mc_master_tick(m, t);
    }
    mc_master_stats_t s = stats(m);
    assert_true(s.evicted_keys >= 12);
    assert_true((double)s.allocated_bytes / (double)s.capacity_bytes <= 0.5);
    /* and the order stayed LRU by put time: the oldest went */
    assert_int_equal(count_present(m, 0, 10, t), 0);
    assert_int_equal(count_present(m, 50, 60, t), 10);
    mc_master_destroy(m);
}

static void soft_pinned_objects_are_evicted_only_after_all_others(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(0.5, 0.6, 1);
    /* 30 pinned objects older than 30 unpinned ones */
    for (unsigned i = 0; i < 30; i++)
        assert_int_equal(put_pinned(m, C1, kname(i), OBJ, T0 + i * SEC), MC_OK);
    for (unsigned i = 30; i < 60; i++)
        assert_int_equal(put_obj(m, C1, kname(i), OBJ, 1, T0 + i * SEC), MC_OK);
    assert_int_equal(stats(m).soft_pinned_count, 30);
    /* ratio 0.6 -> evict max(0.6, 0.7) = 70% of 60 = 42: all 30 unpinned,
     * then the 12 oldest pinned */
    mc_master_tick(m, T0 + 100 * SEC);
    assert_int_equal(stats(m).evicted_keys, 42);
    assert_int_equal(count_present(m, 30, 60, T0), 0);
    assert_int_equal(count_present(m, 0, 12, T0), 0);
    assert_int_equal(count_present(m, 12, 30, T0), 18);
    assert_int_equal(stats(m).soft_pinned_count, 18);
    mc_master_destroy(m);
}

static void soft_pinned_objects_outlive_older_unpinned_ones(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(0.5, 0.1, 1);
    for (unsigned i = 0; i < 30; i++)
        assert_int_equal(put_pinned(m, C1, kname(i), OBJ, T0 + i * SEC), MC_OK);
    for (unsigned i = 30; i < 60; i++)
        assert_int_equal(put_obj(m, C1, kname(i), OBJ, 1, T0 + i * SEC), MC_OK);
    mc_master_tick(m, T0 + 100 * SEC);
    assert_int_equal(stats(m).evicted_keys, 12);
    assert_int_equal(count_present(m, 0, 30, T0), 30);
    assert_int_equal(count_present(m, 30, 42, T0), 0);
    mc_master_destroy(m);
}

static void soft_pinned_objects_stay_when_their_eviction_is_disallowed(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(0.5, 1.0, 0);
    for (unsigned i = 0; i < 30; i++)
        assert_int_equal(put_pinned(m, C1, kname(i), OBJ, T0 + i * SEC), MC_OK);
    for (unsigned i = 30; i < 60; i++)
        assert_int_equal(put_obj(m, C1, kname(i), OBJ, 1, T0 + i * SEC), MC_OK);
    mc_master_tick(m, T0 + 100 * SEC);
    assert_int_equal(count_present(m, 0, 30, T0), 30);
    assert_int_equal(count_present(m, 30, 60, T0), 0);
    mc_master_destroy(m);
}

static void an_expired_soft_pin_makes_an_ordinary_object(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(0.5, 0.1, 0);
    for (unsigned i = 0; i < 60; i++)
        assert_int_equal(put_pinned(m, C1, kname(i), OBJ, T0 + i * SEC), MC_OK);
    mc_master_tick(m, T0 + 100 * SEC);
    assert_int_equal(stats(m).key_count, 60);
    /* the 30 min window of the first ones ends; a get renews it for k059 */
    assert_int_equal(get_n(m, kname(59), T0 + 1800 * SEC, NULL), MC_OK);
    mc_master_tick(m, T0 + 1860 * SEC);
    assert_int_equal(stats(m).evicted_keys, 12);
    assert_int_equal(count_present(m, 0, 12, T0), 0);
    assert_int_equal(exists(m, kname(59), T0), 1);
    mc_master_destroy(m);
}

static void put_start_evicts_and_retries_when_space_runs_out(void **state)
{
    (void)state;
    /* watermark 1.0: only the allocation failure can trigger eviction */
    mc_master_t *m = evict_master(1.0, 0.05, 1);
    fill(m, SLOTS);
    uint32_t n = 0;
    assert_int_equal(put_start_n(m, C1, "new", OBJ, 1, T0 + 200 * SEC, &n), MC_OK);
    assert_int_equal(n, 1);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.eviction_attempts, 1);
    assert_int_equal(s.evicted_keys, 5);
    assert_int_equal(count_present(m, 0, 5, T0), 0);
    assert_int_equal(count_present(m, 5, SLOTS, T0), SLOTS - 5);
    mc_master_destroy(m);
}

static void put_start_fails_when_nothing_can_be_evicted(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(1.0, 0.05, 1);
    fill(m, SLOTS);
    uint64_t now = T0 + 200 * SEC;
    for (unsigned i = 0; i < SLOTS; i++)
        assert_int_equal(get_n(m, kname(i), now, NULL), MC_OK);
    assert_int_equal(put_start_n(m, C1, "new", OBJ, 1, now, NULL), MC_ERR_NO_AVAILABLE_HANDLE);
    assert_int_equal(stats(m).key_count, SLOTS);
    /* the failure asks the next tick for an eviction pass, even below the
     * watermark; with the leases gone it frees room */
    mc_master_tick(m, now + 5 * SEC);
    assert_int_equal(stats(m).evicted_keys, 5);
    assert_int_equal(put_start_n(m, C1, "new", OBJ, 1, now + 5 * SEC, NULL), MC_OK);
    mc_master_destroy(m);
}

static void batch_put_start_evicts_once_and_retries_the_items_without_room(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(1.0, 0.05, 1);
    fill(m, SLOTS - 1);
    mc_master_key_t keys[] = {{"x1", 2}, {"x2", 2}, {"x3", 2}};
    uint64_t sizes[] = {OBJ, OBJ, OBJ};
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    mc_master_replica_desc_t d[3];
    uint32_t nrep[3];
    mc_status_t st[3];
    assert_int_equal(
        mc_master_batch_put_start(m, C1, keys, sizes, 3, &cfg, T0 + 200 * SEC, d, nrep, st), MC_OK);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_OK);
    assert_int_equal(st[2], MC_OK);
    assert_int_equal(stats(m).eviction_attempts, 1);
    mc_master_destroy(m);
}

/* ---- abandoned puts ---- */

static void an_abandoned_put_is_discarded_after_the_discard_timeout(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(1.0, 0.05, 1);
    assert_int_equal(put_start_n(m, C2, "k", OBJ, 1, T0, NULL), MC_OK);
    mc_master_tick(m, T0 + 30 * SEC);
    assert_int_equal(stats(m).processing_count, 1);
    mc_master_tick(m, T0 + 30 * SEC + 1);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.processing_count, 0);
    assert_int_equal(s.key_count, 0);
    assert_int_equal(s.parked_count, 1);
    assert_int_equal(s.put_start_discards, 1);
    assert_int_equal(s.allocated_bytes, OBJ);
    /* the key is free again; the late writer's PutEnd finds nothing */
    assert_int_equal(mc_master_put_end(m, C2, "k", 1, T0 + 31 * SEC), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put_obj(m, C1, "k", OBJ, 1, T0 + 31 * SEC), MC_OK);
    mc_master_destroy(m);
}

static void discarded_space_is_reused_only_after_the_release_timeout(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 1000000 * SEC;
    mc_master_t *m = master_new(&o);
    mount_seg(m, C1, 1, "node1", OBJ, T0);
    assert_int_equal(put_start_n(m, C2, "k", OBJ, 1, T0, NULL), MC_OK);
    mc_master_tick(m, T0 + 31 * SEC);
    /* a slow writer may still be writing: the range is not handed out */
    assert_int_equal(put_start_n(m, C1, "k", OBJ, 1, T0 + 31 * SEC, NULL),
                     MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_tick(m, T0 + 599 * SEC);
    assert_int_equal(put_start_n(m, C1, "k", OBJ, 1, T0 + 599 * SEC, NULL),
                     MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_tick(m, T0 + 600 * SEC);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.parked_count, 0);
    assert_int_equal(s.put_start_releases, 1);
    assert_int_equal(s.allocated_bytes, 0);
    assert_int_equal(put_start_n(m, C1, "k", OBJ, 1, T0 + 600 * SEC, NULL), MC_OK);
    mc_master_destroy(m);
}

static void a_new_put_start_pre_empts_a_stale_unfinished_put(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(1.0, 0.05, 1);
    assert_int_equal(put_start_n(m, C2, "k", OBJ, 1, T0, NULL), MC_OK);
    assert_int_equal(put_start_n(m, C1, "k", OBJ, 1, T0 + 30 * SEC, NULL),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    /* no tick ran: the PutStart itself notices the put is stale */
    uint32_t n = 0;
    assert_int_equal(put_start_n(m, C1, "k", OBJ, 1, T0 + 31 * SEC, &n), MC_OK);
    assert_int_equal(mc_master_put_end(m, C2, "k", 1, T0 + 32 * SEC), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_put_end(m, C1, "k", 1, T0 + 32 * SEC), MC_OK);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.put_start_discards, 1);
    assert_int_equal(s.parked_count, 1);
    assert_int_equal(s.allocated_bytes, 2 * OBJ);
    mc_master_destroy(m);
}

static void a_put_finished_in_time_is_not_discarded(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(1.0, 0.05, 1);
    assert_int_equal(put_start_n(m, C2, "k", OBJ, 1, T0, NULL), MC_OK);
    assert_int_equal(mc_master_put_end(m, C2, "k", 1, T0 + 29 * SEC), MC_OK);
    mc_master_tick(m, T0 + 100 * SEC);
    assert_int_equal(exists(m, "k", T0 + 100 * SEC), 1);
    assert_int_equal(stats(m).put_start_discards, 0);
    mc_master_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nothing_is_evicted_below_the_watermark),
        cmocka_unit_test(eviction_above_the_watermark_takes_the_least_recently_accessed),
        cmocka_unit_test(leased_objects_are_never_evicted),
        cmocka_unit_test(unfinished_puts_are_never_evicted),
        cmocka_unit_test(polling_exist_does_not_prevent_eviction),
        cmocka_unit_test(soft_pinned_objects_are_evicted_only_after_all_others),
        cmocka_unit_test(soft_pinned_objects_outlive_older_unpinned_ones),
        cmocka_unit_test(soft_pinned_objects_stay_when_their_eviction_is_disallowed),
        cmocka_unit_test(an_expired_soft_pin_makes_an_ordinary_object),
        cmocka_unit_test(put_start_evicts_and_retries_when_space_runs_out),
        cmocka_unit_test(put_start_fails_when_nothing_can_be_evicted),
        cmocka_unit_test(batch_put_start_evicts_once_and_retries_the_items_without_room),
        cmocka_unit_test(an_abandoned_put_is_discarded_after_the_discard_timeout),
        cmocka_unit_test(discarded_space_is_reused_only_after_the_release_timeout),
        cmocka_unit_test(a_new_put_start_pre_empts_a_stale_unfinished_put),
        cmocka_unit_test(a_put_finished_in_time_is_not_discarded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
