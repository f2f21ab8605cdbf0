/* Read leases released by their readers (mc_master_batch_get_leased with
 * release, mc_master_batch_lease_release): a lease ends once every reader
 * that holds it is done, the TTL stays the bound when a release is lost or
 * a reader dies, and a release that is not of the current lease period
 * (stale, another object of the key, another master) releases nothing. */
#include "master_test_util.h"

#define KB 1024ull
#define MB (1024ull * 1024ull)
#define VIEW 7 /* master_new's view version */

static mc_master_key_t key1(const char *k)
{
    return (mc_master_key_t){k, strlen(k)};
}

/* A reader's batch get of one key that it promises to release (release 1)
 * or not (release 0). */
static mc_status_t lget(mc_master_t *m, const char *key, uint64_t now, int release)
{
    mc_master_key_t k = key1(key);
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    mc_status_t st = MC_ERR_INTERNAL_ERROR;
    assert_int_equal(
        mc_master_batch_get_leased(m, &k, 1, now, release, d, MC_MASTER_MAX_REPLICAS, &n, &st),
        MC_OK);
    return st;
}

/* Release one key granted at grant; returns how many releases counted. */
static size_t rel(mc_master_t *m, const char *key, int64_t view, uint64_t grant, uint64_t now)
{
    mc_master_key_t k = key1(key);
    size_t n = 99;
    assert_int_equal(mc_master_batch_lease_release(m, &k, 1, view, grant, now, &n), MC_OK);
    return n;
}

/* The cases' master (o: its options, NULL for the defaults): one 1 MiB
 * segment of C1, holding "k" (100 bytes, one replica, put at T0). */
static mc_master_t *master_with_k(const mc_master_opts_t *o)
{
    mc_master_t *m = master_new(o);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 100, 1, T0), MC_OK);
    return m;
}

/* The same, with "k" read at T0 by a reader that will release it. */
static mc_master_t *master_with_k_read(const mc_master_opts_t *o)
{
    mc_master_t *m = master_with_k(o);
    assert_int_equal(lget(m, "k", T0, 1), MC_OK);
    return m;
}

static void a_released_lease_ends_before_its_ttl(void **state)
{
    (void)state;
    mc_master_t *m = master_with_k_read(NULL);
    assert_int_equal(rm(m, "k", 0, T0 + 1 * MS), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rel(m, "k", VIEW, T0, T0 + 2 * MS), 1);
    /* nobody reads it: removable long before the 5 s TTL */
    assert_int_equal(rm(m, "k", 0, T0 + 3 * MS), MC_OK);
    mc_master_destroy(m);
}

static void the_lease_ends_when_the_last_of_its_readers_releases(void **state)
{
    (void)state;
    mc_master_t *m = master_with_k_read(NULL);
    assert_int_equal(lget(m, "k", T0 + 1 * MS, 1), MC_OK);
    assert_int_equal(rel(m, "k", VIEW, T0, T0 + 2 * MS), 1);
    assert_int_equal(rm(m, "k", 0, T0 + 3 * MS), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rel(m, "k", VIEW, T0 + 1 * MS, T0 + 4 * MS), 1);
    assert_int_equal(rm(m, "k", 0, T0 + 5 * MS), MC_OK);
    mc_master_destroy(m);
}

static void a_lost_release_falls_back_to_the_ttl(void **state)
{
    (void)state;
    mc_master_t *m = master_with_k_read(NULL);
    /* its release never comes */
    assert_int_equal(rm(m, "k", 0, T0 + 5 * SEC - 1), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rm(m, "k", 0, T0 + 5 * SEC), MC_OK);
    mc_master_destroy(m);
}

static void a_reader_that_does_not_release_keeps_the_ttl(void **state)
{
    (void)state;
    mc_master_t *m = master_with_k_read(NULL);
    assert_int_equal(get_n(m, "k", T0 + 1 * MS, NULL), MC_OK); /* an upstream reader */
    assert_int_equal(rel(m, "k", VIEW, T0, T0 + 2 * MS), 1);
    assert_int_equal(rm(m, "k", 0, T0 + 3 * MS), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rm(m, "k", 0, T0 + 1 * MS + 5 * SEC - 1), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rm(m, "k", 0, T0 + 1 * MS + 5 * SEC), MC_OK);

    /* a batch get without release is the same */
    assert_int_equal(put_obj(m, C1, "j", 100, 1, T0), MC_OK);
    assert_int_equal(lget(m, "j", T0, 0), MC_OK);
    assert_int_equal(rel(m, "j", VIEW, T0, T0 + 1 * MS), 0);
    assert_int_equal(rm(m, "j", 0, T0 + 2 * MS), MC_ERR_OBJECT_HAS_LEASE);
    mc_master_destroy(m);
}

static void eviction_takes_released_objects_and_spares_leased_ones(void **state)
{
    (void)state;
    mc_master_t *m = master_new_immortal();
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "a", 400 * KB, 1, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "b", 400 * KB, 1, T0 + 1 * MS), MC_OK);
    assert_int_equal(lget(m, "a", T0 + 2 * MS, 1), MC_OK);
    assert_int_equal(lget(m, "b", T0 + 3 * MS, 1), MC_OK);
    /* both leased: a put that needs one of them finds no room */
    assert_int_equal(put_start_n(m, C1, "c", 400 * KB, 1, T0 + 4 * MS, NULL),
                     MC_ERR_NO_AVAILABLE_HANDLE);
    assert_int_equal(exists(m, "a", T0), 1);
    assert_int_equal(exists(m, "b", T0), 1);
    /* b's reader is done (a is the older, but still read) */
    assert_int_equal(rel(m, "b", VIEW, T0 + 3 * MS, T0 + 5 * MS), 1);
    assert_int_equal(put_start_n(m, C1, "c", 400 * KB, 1, T0 + 6 * MS, NULL), MC_OK);
    assert_int_equal(exists(m, "a", T0), 1);
    assert_int_equal(exists(m, "b", T0), 0);
    mc_master_destroy(m);
}

static void the_tick_spares_a_released_object_until_its_ttl(void **state)
{
    (void)state;
    /* above the high watermark the tick evicts the least recently used of
     * what no lease holds; an object whose readers all released it still
     * counts as held there until its deadline (a put that finds no room
     * may take it: above) */
    mc_master_t *m = master_new_immortal();
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_obj(m, C1, "a", 500 * KB, 1, T0), MC_OK);
    assert_int_equal(lget(m, "a", T0 + 1 * MS, 1), MC_OK);
    assert_int_equal(rel(m, "a", VIEW, T0 + 1 * MS, T0 + 2 * MS), 1);
    assert_int_equal(put_obj(m, C1, "b", 480 * KB, 1, T0 + 3 * MS), MC_OK); /* 98% used */
    mc_master_tick(m, T0 + 4 * MS);
    assert_int_equal(exists(m, "a", T0), 1);
    assert_int_equal(exists(m, "b", T0), 0); /* newer, but never read */
    /* past its deadline it is the least recently used again */
    assert_int_equal(put_obj(m, C1, "c", 480 * KB, 1, T0 + 5 * MS), MC_OK);
    mc_master_tick(m, T0 + 1 * MS + 5 * SEC);
    assert_int_equal(exists(m, "a", T0), 0);
    assert_int_equal(exists(m, "c", T0), 1);
    mc_master_destroy(m);
}

static void a_stale_release_releases_nothing(void **state)
{
    (void)state;
    mc_master_t *m = master_with_k(NULL);

    /* a release of a lease that ran out, arriving in a later lease period */
    assert_int_equal(lget(m, "k", T0, 1), MC_OK);
    assert_int_equal(lget(m, "k", T0 + 6 * SEC, 1), MC_OK);
    assert_int_equal(rel(m, "k", VIEW, T0, T0 + 6 * SEC + 1 * MS), 0);
    assert_int_equal(rm(m, "k", 0, T0 + 6 * SEC + 2 * MS), MC_ERR_OBJECT_HAS_LEASE);

    /* a grant of an earlier period still within the TTL of its grant: the
     * period ended early (its reader released), a new one began */
    assert_int_equal(rel(m, "k", VIEW, T0 + 6 * SEC, T0 + 6 * SEC + 3 * MS), 1);
    assert_int_equal(lget(m, "k", T0 + 6 * SEC + 4 * MS, 1), MC_OK);
    assert_int_equal(rel(m, "k", VIEW, T0 + 6 * SEC, T0 + 6 * SEC + 5 * MS), 0);
    assert_int_equal(rm(m, "k", 0, T0 + 6 * SEC + 6 * MS), MC_ERR_OBJECT_HAS_LEASE);

    /* a grant of another master (a restart, a failover) */
    assert_int_equal(rel(m, "k", VIEW + 1, T0 + 6 * SEC + 4 * MS, T0 + 6 * SEC + 7 * MS), 0);
    assert_int_equal(rm(m, "k", 0, T0 + 6 * SEC + 8 * MS), MC_ERR_OBJECT_HAS_LEASE);
    /* the right one */
    assert_int_equal(rel(m, "k", VIEW, T0 + 6 * SEC + 4 * MS, T0 + 6 * SEC + 9 * MS), 1);
    assert_int_equal(rm(m, "k", 0, T0 + 6 * SEC + 10 * MS), MC_OK);

    /* a second release of one grant finds the lease over: nothing more */
    assert_int_equal(rel(m, "k", VIEW, T0 + 6 * SEC + 4 * MS, T0 + 6 * SEC + 11 * MS), 0);
    mc_master_destroy(m);
}

static void a_release_for_an_object_removed_meanwhile_spares_its_successor(void **state)
{
    (void)state;
    mc_master_t *m = master_with_k(NULL);
    assert_int_equal(lget(m, "k", T0, 1), MC_OK);        /* reader A */
    assert_int_equal(rm(m, "k", 1, T0 + 1 * MS), MC_OK); /* forced, while A reads */
    assert_int_equal(put_obj(m, C1, "k", 100, 1, T0 + 2 * MS), MC_OK);
    assert_int_equal(lget(m, "k", T0 + 3 * MS, 1), MC_OK); /* reader B, the new object */
    /* A's release: for the object A read, not this one */
    assert_int_equal(rel(m, "k", VIEW, T0, T0 + 4 * MS), 0);
    assert_int_equal(rm(m, "k", 0, T0 + 5 * MS), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(rel(m, "k", VIEW, T0 + 3 * MS, T0 + 6 * MS), 1);
    assert_int_equal(rm(m, "k", 0, T0 + 7 * MS), MC_OK);
    mc_master_destroy(m);
}

static void a_dead_readers_leases_end_by_their_ttl_before_it_expires(void **state)
{
    (void)state;
    /* the master does not know which client holds a lease: a reader that
     * dies leaves its count behind, and the lease ends at its TTL (5 s),
     * before the reader would be expired (client_ttl 10 s) */
    mc_master_t *m = master_with_k(NULL);
    mc_master_ping(m, C2, T0, NULL, NULL); /* the reader, known to the master */
    assert_int_equal(lget(m, "k", T0, 1), MC_OK);
    assert_int_equal(lget(m, "k", T0 + 1 * MS, 1), MC_OK); /* a live reader */
    assert_int_equal(rel(m, "k", VIEW, T0 + 1 * MS, T0 + 2 * MS), 1);
    for (uint64_t t = T0; t < T0 + 5 * SEC; t += 500 * MS) {
        mc_master_ping(m, C1, t, NULL, NULL);
        mc_master_tick(m, t);
    }
    /* the live reader's grant (1 ms later) set the deadline */
    assert_int_equal(rm(m, "k", 0, T0 + 1 * MS + 5 * SEC - 1), MC_ERR_OBJECT_HAS_LEASE);
    mc_master_ping(m, C1, T0 + 1 * MS + 5 * SEC, NULL, NULL);
    mc_master_tick(m, T0 + 1 * MS + 5 * SEC);
    assert_int_equal(rm(m, "k", 0, T0 + 1 * MS + 5 * SEC), MC_OK);

    /* and once the dead reader has expired, a new reader's lease is counted
     * afresh: its release ends it */
    assert_int_equal(put_obj(m, C1, "j", 100, 1, T0 + 11 * SEC), MC_OK);
    mc_master_ping(m, C1, T0 + 11 * SEC, NULL, NULL);
    mc_master_tick(m, T0 + 11 * SEC);
    assert_int_equal(lget(m, "j", T0 + 11 * SEC, 1), MC_OK);
    assert_int_equal(rel(m, "j", VIEW, T0 + 11 * SEC, T0 + 11 * SEC + 1 * MS), 1);
    assert_int_equal(rm(m, "j", 0, T0 + 11 * SEC + 2 * MS), MC_OK);
    mc_master_destroy(m);
}

static void release_is_off_with_the_option_and_on_pinned_objects(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    assert_int_equal(o.lease_release, 1);
    o.lease_release = 0;
    mc_master_t *m = master_with_k_read(&o);
    assert_int_equal(rel(m, "k", VIEW, T0, T0 + 1 * MS), 0);
    assert_int_equal(rm(m, "k", 0, T0 + 2 * MS), MC_ERR_OBJECT_HAS_LEASE);
    mc_master_destroy(m);

    /* a soft-pinned object keeps the TTL; its pin is reported as before */
    m = master_new(NULL);
    mount_seg(m, C1, 1, "node1", MB, T0);
    assert_int_equal(put_pinned(m, C1, "p", 100, T0), MC_OK);
    assert_int_equal(lget(m, "p", T0, 1), MC_OK);
    assert_int_equal(rel(m, "p", VIEW, T0, T0 + 1 * MS), 0);
    assert_int_equal(rm(m, "p", 0, T0 + 2 * MS), MC_ERR_OBJECT_HAS_LEASE);
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    mc_master_key_info_t info;
    assert_int_equal(mc_master_query_key(m, "p", 1, d, MC_MASTER_MAX_REPLICAS, &n, &info), MC_OK);
    assert_int_equal(info.soft_pin_until_us, T0 + 30 * 60 * SEC);
    /* an unpinned object's lease period start is not reported as a pin */
    assert_int_equal(put_obj(m, C1, "u", 100, 1, T0), MC_OK);
    assert_int_equal(lget(m, "u", T0 + 1 * MS, 1), MC_OK);
    assert_int_equal(mc_master_query_key(m, "u", 1, d, MC_MASTER_MAX_REPLICAS, &n, &info), MC_OK);
    assert_int_equal(info.soft_pin_until_us, 0);
    assert_int_equal(info.lease_until_us, T0 + 1 * MS + 5 * SEC);
    mc_master_destroy(m);
}

static void bad_releases_are_refused_or_skipped(void **state)
{
    (void)state;
    mc_master_t *m = master_with_k_read(NULL);
    mc_master_key_t k = key1("k");
    size_t n = 99;
    /* a grant time this master has not reached */
    assert_int_equal(mc_master_batch_lease_release(m, &k, 1, VIEW, T0 + 1 * SEC, T0 + 1 * MS, &n),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_batch_lease_release(m, NULL, 1, VIEW, T0, T0 + 1 * MS, &n),
                     MC_ERR_INVALID_PARAMS);
    /* bad and absent keys are skipped, the others released */
    mc_master_key_t ks[3] = {{"", 0}, key1("absent"), key1("k")};
    assert_int_equal(mc_master_batch_lease_release(m, ks, 3, VIEW, T0, T0 + 1 * MS, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(rm(m, "k", 0, T0 + 2 * MS), MC_OK);
    assert_int_equal(mc_master_batch_lease_release(m, ks, 0, VIEW, T0, T0 + 3 * MS, NULL), MC_OK);
    mc_master_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_released_lease_ends_before_its_ttl),
        cmocka_unit_test(the_lease_ends_when_the_last_of_its_readers_releases),
        cmocka_unit_test(a_lost_release_falls_back_to_the_ttl),
        cmocka_unit_test(a_reader_that_does_not_release_keeps_the_ttl),
        cmocka_unit_test(eviction_takes_released_objects_and_spares_leased_ones),
        cmocka_unit_test(the_tick_spares_a_released_object_until_its_ttl),
        cmocka_unit_test(a_stale_release_releases_nothing),
        cmocka_unit_test(a_release_for_an_object_removed_meanwhile_spares_its_successor),
        cmocka_unit_test(a_dead_readers_leases_end_by_their_ttl_before_it_expires),
        cmocka_unit_test(release_is_off_with_the_option_and_on_pinned_objects),
        cmocka_unit_test(bad_releases_are_refused_or_skipped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
