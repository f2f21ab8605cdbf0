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
    assert_int_equal(stats(m).eviction_attempts, 0);
    /* the failure leaves nothing behind: the next tick, below the watermark,
     * evicts nothing even once the leases are gone (it used to: a sticky
     * "need eviction" flag) */
    mc_master_tick(m, now + 5 * SEC);
    assert_int_equal(stats(m).evicted_keys, 0);
    /* the next put makes its own room: the least recently used window */
    assert_int_equal(put_start_n(m, C1, "new", OBJ, 1, now + 5 * SEC, NULL), MC_OK);
    assert_int_equal(stats(m).evicted_keys, 5);
    mc_master_destroy(m);
}

/* Issue 13 finding 3: 20 PutStarts of 1 GiB into a 64 MiB segment that was
 * 0.03% used each failed, yet evicted 182 of 200 objects. */
static void a_put_larger_than_any_segment_evicts_nothing(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 1000000 * SEC;
    mc_master_t *m = master_new(&o);
    assert_int_equal(mount_seg(m, C1, 1, "node1", 64 << 20, T0), MC_OK);
    for (unsigned i = 0; i < 200; i++)
        assert_int_equal(put_obj(m, C1, kname(i), 100, 1, T0 + i * MS), MC_OK);
    uint64_t now = T0 + 100 * SEC;
    for (unsigned i = 0; i < 20; i++) {
        assert_int_equal(put_start_n(m, C1, "huge", 1ull << 30, 1, now + i * MS, NULL),
                         MC_ERR_NO_AVAILABLE_HANDLE);
        mc_master_tick(m, now + i * MS);
    }
    assert_int_equal(stats(m).key_count, 200);
    assert_int_equal(stats(m).evicted_keys, 0);
    assert_int_equal(stats(m).eviction_attempts, 0);
    mc_master_destroy(m);
}

/* A value that fits the segment but no window eviction could clear (leased
 * objects every few slots) is refused without evicting; one that fits
 * between two leased objects evicts only what lies there. */
static void a_put_no_eviction_can_make_room_for_evicts_nothing(void **state)
{
    (void)state;
    mc_master_t *m = evict_master(1.0, 0.05, 1);
    fill(m, SLOTS);
    uint64_t now = T0 + 200 * SEC;
    for (unsigned i = 0; i < SLOTS; i += 4) /* leased: k000, k004, k008, ... */
        assert_int_equal(get_n(m, kname(i), now, NULL), MC_OK);
    /* four slots between two leased objects: never */
    assert_int_equal(put_start_n(m, C1, "four", 4 * OBJ, 1, now, NULL), MC_ERR_NO_AVAILABLE_HANDLE);
    assert_int_equal(stats(m).evicted_keys, 0);
    assert_int_equal(stats(m).key_count, SLOTS);
    /* three fit between two: an LRU round takes eviction_ratio of the 75
     * unleased objects, the 4 least recently used (k001, k002, k003, k005),
     * and the first three make the room; never a leased one */
    assert_int_equal(put_start_n(m, C1, "three", 3 * OBJ, 1, now, NULL), MC_OK);
    assert_int_equal(stats(m).evicted_keys, 4);
    assert_int_equal(count_present(m, 0, SLOTS, now), SLOTS - 4);
    assert_int_equal(count_present(m, 1, 4, now), 0);
    assert_int_equal(count_present(m, 5, 6, now), 0);
    for (unsigned i = 0; i < SLOTS; i += 4)
        assert_true(exists(m, kname(i), now));
    mc_master_destroy(m);
}

/* Found by perf/trace_replay: a put's eviction evicted, for the next puts,
 * a wide window of the segment with the largest gap; with placement at
 * random that window held recent objects as well as old ones, and the other
 * segments kept their old objects for ever (the store reached 0.79x the hit
 * rate of an ideal LRU). The room for the next puts is now the least
 * recently used objects of every segment. */
static void a_puts_eviction_takes_the_least_recently_used_of_every_segment(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.eviction_high_watermark = 1.0;
    o.eviction_ratio = 0.1;
    o.client_ttl_us = 1000000 * SEC;
    mc_master_t *m = master_new(&o);
    assert_int_equal(mount_seg(m, C1, 1, "node1", 10 * OBJ, T0), MC_OK);
    assert_int_equal(mount_seg(m, C1, 2, "node2", 10 * OBJ, T0), MC_OK);
    /* node2 holds the ten oldest objects (k000..k009), node1 the ten newest */
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    mc_master_replica_desc_t d[1];
    uint32_t n;
    for (unsigned i = 0; i < 20; i++) {
        const char *pref[1] = {i < 10 ? "node2" : "node1"};
        cfg.preferred_segments = pref;
        cfg.n_preferred = 1;
        const char *k = kname(i);
        assert_int_equal(mc_master_put_start(m, C1, k, strlen(k), OBJ, &cfg, T0 + i * SEC, d, &n),
                         MC_OK);
        assert_string_equal(d[0].segment_name, pref[0]);
        assert_int_equal(mc_master_put_end(m, C1, k, strlen(k), T0 + i * SEC), MC_OK);
    }
    /* full: a put evicts ceil(20 * 0.1) = 2 objects, the two least recently
     * used of the pool, whichever segment its own room is made on */
    assert_int_equal(put_start_n(m, C1, "new", OBJ, 1, T0 + 100 * SEC, NULL), MC_OK);
    assert_int_equal(stats(m).evicted_keys, 2);
    assert_int_equal(count_present(m, 10, 20, T0), 10); /* the newest: all kept */
    assert_int_equal(count_present(m, 0, 10, T0), 8);
    assert_false(exists(m, kname(0), T0));
    assert_false(exists(m, kname(1), T0));
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

/* ---- property: eviction only for a reason ----
 *
 * Random sequences of puts (fitting, needing eviction, impossible), gets
 * (leases), removes, soft pins, clock steps and ticks, on three segments of
 * different sizes. After every operation: if objects were evicted, either
 * use was above the watermark when the tick ran, or the operation was a put
 * that needed room and succeeded. Every object that disappeared was removed
 * or counted as evicted, and no leased object ever disappears. */

#define PROP_KEYS 64
#define PROP_STEPS 2000

typedef struct model {
    int present[PROP_KEYS];
    uint64_t lease_until[PROP_KEYS];
} model_t;

static uint64_t prop_rand(uint64_t *s)
{
    /* xorshift64*: the sequence depends only on the seed */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static void run_property(uint64_t seed, double hw, int allow_pinned)
{
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.eviction_high_watermark = hw;
    o.eviction_ratio = 0.05;
    o.allow_evict_soft_pinned = allow_pinned;
    o.client_ttl_us = 1000000 * SEC;
    o.lease_ttl_us = 2 * SEC;
    mc_master_t *m = master_new(&o);
    assert_int_equal(mount_seg(m, C1, 1, "s1", 32 * 1024, T0), MC_OK);
    assert_int_equal(mount_seg(m, C1, 2, "s2", 48 * 1024, T0), MC_OK);
    assert_int_equal(mount_seg(m, C1, 3, "s3", 16 * 1024, T0), MC_OK);
    model_t md = {{0}, {0}};
    uint64_t now = T0, rs = seed;
    char key[16];
    for (unsigned step = 0; step < PROP_STEPS; step++) {
        mc_master_stats_t before = stats(m);
        double ratio = (double)before.allocated_bytes / (double)before.capacity_bytes;
        unsigned k = (unsigned)(prop_rand(&rs) % PROP_KEYS);
        snprintf(key, sizeof(key), "p%02u", k);
        unsigned op = (unsigned)(prop_rand(&rs) % 100);
        int was_put = 0, put_ok = 0, was_tick = 0, removed = 0;
        if (op < 45) {
            /* sizes: mostly small, some large, a few larger than any segment */
            unsigned r = (unsigned)(prop_rand(&rs) % 100);
            uint64_t size = r < 70   ? 64 + prop_rand(&rs) % 2048
                            : r < 95 ? 4096 + prop_rand(&rs) % 12288
                                     : 64 * 1024 + prop_rand(&rs) % (1 << 20);
            mc_master_put_cfg_t cfg;
            mc_master_put_cfg_init(&cfg);
            cfg.with_soft_pin = prop_rand(&rs) % 8 == 0;
            cfg.replica_num = 1 + (uint32_t)(prop_rand(&rs) % 2);
            mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
            uint32_t n = 0;
            was_put = 1;
            mc_status_t st = mc_master_put_start(m, C1, key, strlen(key), size, &cfg, now, d, &n);
            if (st == MC_OK) {
                assert_int_equal(mc_master_put_end(m, C1, key, strlen(key), now), MC_OK);
                put_ok = 1;
                md.present[k] = 1;
            } else {
                assert_true(st == MC_ERR_NO_AVAILABLE_HANDLE || st == MC_ERR_OBJECT_ALREADY_EXISTS);
            }
        } else if (op < 70) {
            if (get_n(m, key, now, NULL) == MC_OK)
                md.lease_until[k] = now + 2 * SEC;
        } else if (op < 82) {
            if (mc_master_remove(m, key, strlen(key), 0, now) == MC_OK) {
                md.present[k] = 0;
                removed = 1;
            }
        } else if (op < 92) {
            now += (prop_rand(&rs) % 1500) * MS;
        } else {
            was_tick = 1;
            mc_master_tick(m, now);
        }
        mc_master_stats_t after = stats(m);
        uint64_t evicted = after.evicted_keys - before.evicted_keys;
        if (evicted > 0) {
            int reason = (was_tick && ratio > hw) || (was_put && put_ok);
            if (!reason)
                fail_msg("seed %llu step %u: %llu evicted (op %u, ratio %.3f, put %d ok %d)",
                         (unsigned long long)seed, step, (unsigned long long)evicted, op, ratio,
                         was_put, put_ok);
        }
        /* every object the model holds that vanished was evicted, and none
         * of them was leased */
        uint64_t gone = 0;
        for (unsigned i = 0; i < PROP_KEYS; i++) {
            if (!md.present[i])
                continue;
            snprintf(key, sizeof(key), "p%02u", i);
            if (!exists(m, key, now)) {
                assert_true(md.lease_until[i] <= now);
                md.present[i] = 0;
                gone++;
            }
        }
        assert_int_equal(gone, evicted);
        (void)removed;
    }
    /* the run exercised what it is about */
    mc_master_stats_t s = stats(m);
    assert_true(s.evicted_keys > 0);
    mc_master_destroy(m);
}

static void random_operations_evict_only_for_a_reason(void **state)
{
    (void)state;
    static const uint64_t seeds[] = {1, 2, 3, 42, 1234567, 0x9e3779b97f4a7c15ull};
    for (size_t i = 0; i < MC_ARRAY_SIZE(seeds); i++) {
        run_property(seeds[i], 0.9, 1);
        run_property(seeds[i], 1.0, 0);
        run_property(seeds[i], 0.6, 1);
    }
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
        cmocka_unit_test(a_puts_eviction_takes_the_least_recently_used_of_every_segment),
        cmocka_unit_test(a_put_larger_than_any_segment_evicts_nothing),
        cmocka_unit_test(a_put_no_eviction_can_make_room_for_evicts_nothing),
        cmocka_unit_test(random_operations_evict_only_for_a_reason),
        cmocka_unit_test(an_abandoned_put_is_discarded_after_the_discard_timeout),
        cmocka_unit_test(discarded_space_is_reused_only_after_the_release_timeout),
        cmocka_unit_test(a_new_put_start_pre_empts_a_stale_unfinished_put),
        cmocka_unit_test(a_put_finished_in_time_is_not_discarded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
