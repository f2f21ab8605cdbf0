/* Master segments, clients and the metadata KV: mount, remount, two-phase
 * unmount with drain, ping and expiry. */
#include "master_test_util.h"

#include <stdlib.h>

#define MB (1024ull * 1024ull)

static mc_master_segment_t seg_desc(uint64_t n, const char *name, uint64_t size)
{
    mc_master_segment_t s = {
        .id = seg_id(n), .name = name, .te_endpoint = "ep", .base = n << 40, .size = size};
    return s;
}

typedef struct seg_seen {
    unsigned n, unmounting;
    uint64_t used, size, drain_until;
} seg_seen_t;

static int collect_seg(void *arg, const mc_master_segment_info_t *info)
{
    seg_seen_t *s = arg;
    s->n++;
    s->unmounting += info->unmounting;
    s->used += info->used;
    s->size += info->size;
    if (info->drain_until_us > s->drain_until)
        s->drain_until = info->drain_until_us;
    return 0;
}

static seg_seen_t segs(mc_master_t *m)
{
    seg_seen_t s = {0};
    mc_master_foreach_segment(m, collect_seg, &s);
    return s;
}

/* ---- mount ---- */

static void mount_rejects_invalid_parameters(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    static char longname[MC_MASTER_NAME_MAX + 1];
    memset(longname, 'n', MC_MASTER_NAME_MAX);
    mc_master_segment_t s = seg_desc(1, "n", MB);
    mc_uuid_t zero = {0, 0};
    assert_int_equal(mc_master_mount_segment(m, zero, &s, T0), MC_ERR_INVALID_PARAMS);
    s.id = zero;
    assert_int_equal(mc_master_mount_segment(m, C1, &s, T0), MC_ERR_INVALID_PARAMS);
    s = seg_desc(1, "n", MB);
    s.base = 0;
    assert_int_equal(mc_master_mount_segment(m, C1, &s, T0), MC_ERR_INVALID_PARAMS);
    s = seg_desc(1, "n", 0);
    assert_int_equal(mc_master_mount_segment(m, C1, &s, T0), MC_ERR_INVALID_PARAMS);
    s = seg_desc(1, "", MB);
    assert_int_equal(mc_master_mount_segment(m, C1, &s, T0), MC_ERR_INVALID_PARAMS);
    s = seg_desc(1, longname, MB);
    assert_int_equal(mc_master_mount_segment(m, C1, &s, T0), MC_ERR_INVALID_PARAMS);
    s = seg_desc(1, "n", MB);
    s.base = UINT64_MAX - 100;
    assert_int_equal(mc_master_mount_segment(m, C1, &s, T0), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_mount_segment(m, C1, NULL, T0), MC_ERR_INVALID_PARAMS);
    assert_int_equal(segs(m).n, 0);
    mc_master_destroy(m);
}

static void an_identical_mount_is_idempotent(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mc_master_segment_t s = seg_desc(1, "n", MB);
    assert_int_equal(mc_master_mount_segment(m, C1, &s, T0), MC_OK);
    assert_int_equal(mc_master_mount_segment(m, C1, &s, T0), MC_OK);
    assert_int_equal(segs(m).n, 1);
    assert_int_equal(stats(m).capacity_bytes, MB);
    mc_master_destroy(m);
}

static void mounting_an_existing_id_differently_already_exists(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mc_master_segment_t s = seg_desc(1, "n", MB);
    assert_int_equal(mc_master_mount_segment(m, C1, &s, T0), MC_OK);
    s.size = 2 * MB;
    assert_int_equal(mc_master_mount_segment(m, C1, &s, T0), MC_ERR_SEGMENT_ALREADY_EXISTS);
    s = seg_desc(1, "n", MB);
    assert_int_equal(mc_master_mount_segment(m, C2, &s, T0), MC_ERR_SEGMENT_ALREADY_EXISTS);
    s.name = "other";
    assert_int_equal(mc_master_mount_segment(m, C1, &s, T0), MC_ERR_SEGMENT_ALREADY_EXISTS);
    mc_master_destroy(m);
}

static void foreach_segment_reports_usage_and_capacity(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "a", MB, T0);
    mount_seg(m, C1, 2, "b", 2 * MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 1000, 2, T0), MC_OK);
    seg_seen_t s = segs(m);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.size, 3 * MB);
    assert_int_equal(s.used, 2000);
    assert_int_equal(s.unmounting, 0);
    mc_master_destroy(m);
}

static void allocation_failures_in_mount_leave_no_trace(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    unsigned failures = 0;
    for (long n = 1; n <= 8; n++) {
        mc_mem_fail_nth(n);
        mc_status_t st = mount_seg(m, C1, (uint64_t)n, "x", MB, T0);
        mc_mem_fail_nth(0);
        if (st == MC_ERR_NOMEM) {
            failures++;
            assert_int_equal(mc_master_unmount_segment(m, C1, seg_id((uint64_t)n), T0, NULL),
                             MC_ERR_SEGMENT_NOT_FOUND);
        } else {
            assert_int_equal(st, MC_OK);
        }
    }
    assert_true(failures > 0);
    seg_seen_t ss = segs(m);
    assert_int_equal(stats(m).capacity_bytes, ss.n * MB);
    mc_mem_fail_nth(1);
    assert_int_equal(mc_master_meta_put(m, "k", 1, "v", 1, C1, T0), MC_ERR_NOMEM);
    mc_mem_fail_nth(0);
    void *v;
    size_t vl;
    assert_int_equal(mc_master_meta_get(m, "k", 1, &v, &vl), MC_ERR_NOT_FOUND);
    mc_master_destroy(m);
}

/* ---- unmount ---- */

static void unmount_of_an_unknown_segment_is_not_found(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(9), T0, NULL),
                     MC_ERR_SEGMENT_NOT_FOUND);
    mc_master_destroy(m);
}

static void unmount_by_another_client_is_illegal(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "a", MB, T0);
    assert_int_equal(mc_master_unmount_segment(m, C2, seg_id(1), T0, NULL), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(segs(m).n, 1);
    mc_master_destroy(m);
}

static void unmount_without_readers_completes_at_once(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "a", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 1000, 1, T0), MC_OK);
    uint64_t drain = 1;
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), T0, &drain), MC_OK);
    assert_true(drain <= T0);
    assert_int_equal(segs(m).n, 0);
    assert_int_equal(get_n(m, "k", T0, NULL), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.key_count, 0);
    assert_int_equal(s.capacity_bytes, 0);
    assert_int_equal(s.allocated_bytes, 0);
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), T0, NULL),
                     MC_ERR_SEGMENT_NOT_FOUND);
    mc_master_destroy(m);
}

static void a_two_replica_object_survives_unmount_of_one_segment(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "a", MB, T0);
    mount_seg(m, C1, 2, "b", MB, T0);
    assert_int_equal(put_obj(m, C1, "k", 1000, 2, T0), MC_OK);
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), T0, NULL), MC_OK);
    mc_master_replica_desc_t d[2];
    uint32_t n = 0;
    assert_int_equal(mc_master_get_replica_list(m, "k", 1, T0, d, 2, &n, NULL), MC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].segment_name, "b");
    assert_int_equal(stats(m).allocated_bytes, 1000);
    mc_master_destroy(m);
}

/* Documented behaviour (mc_master_unmount_segment): the replicas disappear at
 * once, so no new reader gets them, but the segment is reported busy until
 * the leases granted before the unmount run out; meanwhile its id cannot be
 * mounted again, so its memory cannot be handed to a writer under a reader. */
static void unmount_while_a_get_holds_a_lease_drains_until_the_lease_ends(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "a", MB, T0);
    mount_seg(m, C1, 2, "b", MB, T0);
    assert_int_equal(put_obj(m, C1, "one", 1000, 1, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "two", 1000, 2, T0), MC_OK);
    uint32_t n;
    uint64_t lease_end = T0 + SEC + 5 * SEC;
    assert_int_equal(get_n(m, "one", T0 + SEC, &n), MC_OK);
    assert_int_equal(get_n(m, "two", T0 + SEC, &n), MC_OK);

    /* unmount whichever segment holds "one" */
    mc_master_replica_desc_t d[1];
    assert_int_equal(mc_master_get_replica_list(m, "one", 3, T0 + SEC, d, 1, &n, NULL), MC_OK);
    uint64_t victim = d[0].segment_id.lo;
    uint64_t drain = 0;
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(victim), T0 + 2 * SEC, &drain), MC_OK);
    assert_int_equal(drain, lease_end);

    /* gone for new readers at once; the two-replica object keeps one */
    assert_int_equal(get_n(m, "one", T0 + 2 * SEC, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(get_n(m, "two", T0 + 2 * SEC, &n), MC_OK);
    assert_int_equal(n, 1);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.unmounting_count, 1);
    assert_int_equal(s.capacity_bytes, MB);
    seg_seen_t ss = segs(m);
    assert_int_equal(ss.unmounting, 1);
    assert_int_equal(ss.drain_until, lease_end);

    /* asking again reports the same drain; re-mounting waits for it */
    uint64_t again = 0;
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(victim), T0 + 3 * SEC, &again), MC_OK);
    assert_int_equal(again, lease_end);
    char name[2] = {victim == 1 ? 'a' : 'b', 0};
    assert_int_equal(mount_seg(m, C1, victim, name, MB, T0 + 3 * SEC),
                     MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
    /* nor can the owner mount a new id over the same memory */
    mc_master_segment_t over = {.id = seg_id(77),
                                .name = name,
                                .te_endpoint = "",
                                .base = (victim << 40) + 4096,
                                .size = 4096};
    assert_int_equal(mc_master_mount_segment(m, C1, &over, T0 + 3 * SEC),
                     MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
    /* and no put lands there */
    for (unsigned i = 0; i < 10; i++) {
        char key[16];
        mc_master_replica_desc_t pd[2];
        mc_master_put_cfg_t cfg;
        mc_master_put_cfg_init(&cfg);
        cfg.replica_num = 2;
        key_of(key, sizeof(key), "new", i);
        assert_int_equal(
            mc_master_put_start(m, C1, key, strlen(key), 10, &cfg, T0 + 3 * SEC, pd, &n), MC_OK);
        assert_int_equal(n, 1);
        assert_true(pd[0].segment_id.lo != victim);
    }

    mc_master_tick(m, lease_end - 1);
    assert_int_equal(stats(m).unmounting_count, 1);
    mc_master_tick(m, lease_end);
    assert_int_equal(stats(m).unmounting_count, 0);
    assert_int_equal(segs(m).n, 1);
    assert_int_equal(mount_seg(m, C1, victim, name, MB, lease_end), MC_OK);
    mc_master_destroy(m);
}

static void unmount_drops_an_unfinished_put_and_its_put_end_is_not_found(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "a", MB, T0);
    assert_int_equal(put_start_n(m, C2, "k", 1000, 1, T0, NULL), MC_OK);
    uint64_t drain = 1;
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), T0, &drain), MC_OK);
    assert_true(drain <= T0); /* writers get no grace */
    assert_int_equal(mc_master_put_end(m, C2, "k", 1, T0), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(stats(m).processing_count, 0);
    mc_master_destroy(m);
}

static void an_unfinished_put_keeps_its_other_replicas_across_an_unmount(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "a", MB, T0);
    mount_seg(m, C1, 2, "b", MB, T0);
    uint32_t n = 0;
    assert_int_equal(put_start_n(m, C2, "k", 1000, 2, T0, &n), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), T0, NULL), MC_OK);
    assert_int_equal(mc_master_put_end(m, C2, "k", 1, T0), MC_OK);
    assert_int_equal(get_n(m, "k", T0, &n), MC_OK);
    assert_int_equal(n, 1);
    mc_master_destroy(m);
}

/* ---- clients ---- */

static void ping_of_an_unknown_client_asks_for_a_remount(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    int64_t vv = 0;
    mc_master_client_status_t cs = MC_MASTER_CLIENT_UNDEFINED;
    mc_master_ping(m, C1, T0, &vv, &cs);
    assert_int_equal(vv, 7);
    assert_int_equal(cs, MC_MASTER_CLIENT_NEED_REMOUNT);
    mc_master_ping(m, C1, T0, &vv, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_NEED_REMOUNT);
    assert_int_equal(mc_master_remount_segments(m, C1, NULL, 0, T0), MC_OK);
    mc_master_ping(m, C1, T0, &vv, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_OK);
    mc_master_destroy(m);
}

static void a_client_that_mounts_is_ok(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "a", MB, T0);
    mc_master_client_status_t cs;
    mc_master_ping(m, C1, T0, NULL, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_OK);
    assert_int_equal(stats(m).active_clients, 1);
    mc_master_destroy(m);
}

static void pinging_keeps_a_client_alive(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "a", MB, T0);
    for (uint64_t t = T0; t < T0 + 60 * SEC; t += SEC) {
        mc_master_ping(m, C1, t, NULL, NULL);
        mc_master_tick(m, t);
    }
    assert_int_equal(segs(m).n, 1);
    assert_int_equal(stats(m).active_clients, 1);
    mc_master_destroy(m);
}

static void client_expiry_removes_its_segments_objects_and_metadata(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C1, 1, "a", MB, T0);
    mount_seg(m, C1, 2, "a2", MB, T0);
    mount_seg(m, C2, 3, "b", MB, T0);
    mount_seg(m, C3, 4, "c", MB, T0);
    const char *pref_a[] = {"a"}, *pref_ab[] = {"a", "b"}, *pref_bc[] = {"b", "c"};
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    mc_master_replica_desc_t d[2];
    uint32_t n;
    /* "solo" lives only on C1; "pair" on C1 and C2; "other" on C2 and C3 */
    cfg.preferred_segments = pref_a;
    cfg.n_preferred = 1;
    assert_int_equal(mc_master_put_start(m, C2, "solo", 4, 100, &cfg, T0, d, &n), MC_OK);
    cfg.replica_num = 2;
    cfg.preferred_segments = pref_ab;
    cfg.n_preferred = 2;
    assert_int_equal(mc_master_put_start(m, C2, "pair", 4, 100, &cfg, T0, d, &n), MC_OK);
    cfg.preferred_segments = pref_bc;
    assert_int_equal(mc_master_put_start(m, C2, "other", 5, 100, &cfg, T0, d, &n), MC_OK);
    mc_master_key_t keys[] = {{"solo", 4}, {"pair", 4}, {"other", 5}};
    mc_status_t st[3];
    assert_int_equal(mc_master_batch_put_end(m, C2, keys, 3, T0, st), MC_OK);
    assert_int_equal(mc_master_meta_put(m, "mc/seg/a", 8, "x", 1, C1, T0), MC_OK);
    assert_int_equal(mc_master_meta_put(m, "mc/seg/b", 8, "y", 1, C2, T0), MC_OK);
    /* an entry nobody owns could never be cleaned up: refused (issue 13) */
    assert_int_equal(mc_master_meta_put(m, "mc/static", 9, "z", 1, (mc_uuid_t){0, 0}, T0),
                     MC_ERR_INVALID_PARAMS);

    /* C2 and C3 keep pinging; C1 falls silent */
    for (uint64_t t = T0 + SEC; t <= T0 + 11 * SEC; t += SEC) {
        mc_master_ping(m, C2, t, NULL, NULL);
        mc_master_ping(m, C3, t, NULL, NULL);
        mc_master_tick(m, t);
    }
    assert_int_equal(stats(m).active_clients, 2);
    seg_seen_t ss = segs(m);
    assert_int_equal(ss.n, 2);
    assert_int_equal(ss.unmounting, 0);
    assert_int_equal(get_n(m, "solo", T0 + 12 * SEC, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(get_n(m, "pair", T0 + 12 * SEC, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(get_n(m, "other", T0 + 12 * SEC, &n), MC_OK);
    assert_int_equal(n, 2);
    void *v;
    size_t vl;
    assert_int_equal(mc_master_meta_get(m, "mc/seg/a", 8, &v, &vl), MC_ERR_NOT_FOUND);
    assert_int_equal(mc_master_meta_get(m, "mc/seg/b", 8, &v, &vl), MC_OK);
    mc_free(v);
    assert_int_equal(mc_master_meta_get(m, "mc/static", 9, &v, &vl), MC_ERR_NOT_FOUND);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.capacity_bytes, 2 * MB);
    assert_int_equal(s.allocated_bytes, 300);

    mc_master_client_status_t cs;
    mc_master_ping(m, C1, T0 + 12 * SEC, NULL, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_NEED_REMOUNT);
    mc_master_destroy(m);
}

/* A node's metadata backend may register it (META_PUT) before it mounts;
 * once it has mounted, the master knows it: OK, on the leader and on a
 * standby that replayed both records. A NEED_REMOUNT says "I forgot your
 * segments", and the node closes every connection to its port before it
 * mounts again (store/client.c): after every HA failover before this. */
static void a_client_that_mounted_is_ok_even_if_its_metadata_came_first(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(mc_master_meta_put(m, "mc/seg/a", 8, "d", 1, C1, T0), MC_OK);
    mc_master_client_status_t cs;
    mc_master_ping(m, C1, T0, NULL, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_NEED_REMOUNT);
    mc_master_segment_t sd = seg_desc(1, "a", MB);
    assert_int_equal(mc_master_mount_segment(m, C1, &sd, T0), MC_OK);
    mc_master_ping(m, C1, T0, NULL, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_OK);
    assert_int_equal(stats(m).active_clients, 1);

    /* a standby replaying the same records */
    mc_master_t *b = master_new(NULL);
    mc_master_jrec_t r = {.type = MC_JREC_META_PUT,
                          .client = C1,
                          .key = "mc/seg/a",
                          .key_len = 8,
                          .val = "d",
                          .val_len = 1};
    assert_int_equal(mc_master_apply(b, &r, T0), MC_OK);
    mc_master_jrec_t mr = {.type = MC_JREC_MOUNT, .client = C1, .seg = sd};
    assert_int_equal(mc_master_apply(b, &mr, T0), MC_OK);
    mc_master_ping(b, C1, T0 + SEC, NULL, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_OK);
    mc_master_destroy(b);
    mc_master_destroy(m);
}

static void an_expired_client_remounts_and_is_ok_again(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mc_master_segment_t sd[2] = {seg_desc(1, "a", MB), seg_desc(2, "a", MB)};
    assert_int_equal(mc_master_mount_segment(m, C1, &sd[0], T0), MC_OK);
    assert_int_equal(mc_master_mount_segment(m, C1, &sd[1], T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "k", 100, 1, T0), MC_OK);
    mc_master_tick(m, T0 + 11 * SEC);
    assert_int_equal(segs(m).n, 0);
    assert_int_equal(stats(m).active_clients, 0);

    mc_master_client_status_t cs;
    int64_t vv;
    mc_master_ping(m, C1, T0 + 12 * SEC, &vv, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_NEED_REMOUNT);
    assert_int_equal(mc_master_remount_segments(m, C1, sd, 2, T0 + 12 * SEC), MC_OK);
    mc_master_ping(m, C1, T0 + 12 * SEC, &vv, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_OK);
    assert_int_equal(segs(m).n, 2);
    /* the segments come back empty: what they held was forgotten */
    assert_int_equal(get_n(m, "k", T0 + 12 * SEC, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(stats(m).allocated_bytes, 0);
    assert_int_equal(put_obj(m, C1, "k", 100, 1, T0 + 12 * SEC), MC_OK);
    /* remounting again is harmless */
    assert_int_equal(mc_master_remount_segments(m, C1, sd, 2, T0 + 12 * SEC), MC_OK);
    assert_int_equal(segs(m).n, 2);
    mc_master_destroy(m);
}

static void remount_while_draining_is_unavailable_until_the_drain_ends(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mc_master_segment_t sd = seg_desc(1, "a", MB);
    assert_int_equal(mc_master_mount_segment(m, C1, &sd, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "k", 100, 1, T0), MC_OK);
    /* a reader gets the object just before the owner falls silent */
    assert_int_equal(get_n(m, "k", T0 + 10 * SEC, NULL), MC_OK);
    mc_master_tick(m, T0 + 10 * SEC + 1);
    assert_int_equal(stats(m).unmounting_count, 1);
    assert_int_equal(mc_master_remount_segments(m, C1, &sd, 1, T0 + 11 * SEC),
                     MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
    mc_master_client_status_t cs;
    mc_master_ping(m, C1, T0 + 11 * SEC, NULL, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_NEED_REMOUNT);
    mc_master_tick(m, T0 + 15 * SEC);
    assert_int_equal(mc_master_remount_segments(m, C1, &sd, 1, T0 + 15 * SEC), MC_OK);
    mc_master_ping(m, C1, T0 + 15 * SEC, NULL, &cs);
    assert_int_equal(cs, MC_MASTER_CLIENT_OK);
    mc_master_destroy(m);
}

static void remount_skips_invalid_segments(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    mount_seg(m, C2, 5, "theirs", MB, T0);
    mc_master_segment_t sd[3] = {seg_desc(1, "a", MB), seg_desc(2, "", MB),
                                 seg_desc(5, "theirs", MB)};
    assert_int_equal(mc_master_remount_segments(m, C1, sd, 3, T0), MC_OK);
    assert_int_equal(segs(m).n, 2);
    assert_int_equal(mc_master_remount_segments(m, (mc_uuid_t){0, 0}, sd, 1, T0),
                     MC_ERR_INVALID_PARAMS);
    mc_master_destroy(m);
}

/* ---- metadata KV ---- */

static int count_meta(void *arg, const char *key, size_t key_len, const void *val, size_t val_len)
{
    (void)key;
    (void)key_len;
    (void)val;
    (void)val_len;
    (*(unsigned *)arg)++;
    return 0;
}

static void meta_put_get_replace_and_delete(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    void *v = NULL;
    size_t vl = 0;
    assert_int_equal(mc_master_meta_get(m, "k", 1, &v, &vl), MC_ERR_NOT_FOUND);
    assert_int_equal(mc_master_meta_put(m, "k", 1, "hello", 5, C1, T0), MC_OK);
    assert_int_equal(mc_master_meta_get(m, "k", 1, &v, &vl), MC_OK);
    assert_int_equal(vl, 5);
    assert_memory_equal(v, "hello", 5);
    mc_free(v);
    assert_int_equal(mc_master_meta_put(m, "k", 1, "bye", 3, C1, T0), MC_OK);
    assert_int_equal(mc_master_meta_get(m, "k", 1, &v, &vl), MC_OK);
    assert_int_equal(vl, 3);
    assert_memory_equal(v, "bye", 3);
    mc_free(v);
    assert_int_equal(mc_master_meta_put(m, "empty", 5, NULL, 0, C1, T0), MC_OK);
    assert_int_equal(mc_master_meta_get(m, "empty", 5, &v, &vl), MC_OK);
    assert_int_equal(vl, 0);
    assert_int_equal(mc_master_meta_del(m, "k", 1, C1), MC_OK);
    assert_int_equal(mc_master_meta_del(m, "k", 1, C1), MC_ERR_NOT_FOUND);
    assert_int_equal(mc_master_meta_get(m, "k", 1, &v, &vl), MC_ERR_NOT_FOUND);
    mc_master_destroy(m);
}

/* Issue 13 finding 7: two nodes with the same local_hostname both mounted. */
static void a_segment_name_another_live_client_holds_is_refused(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(mount_seg(m, C1, 1, "host-a", MB, T0), MC_OK);
    /* the same client may have several segments of its name */
    assert_int_equal(mount_seg(m, C1, 2, "host-a", MB, T0), MC_OK);
    assert_int_equal(mount_seg(m, C2, 3, "host-a", MB, T0), MC_ERR_SEGMENT_ALREADY_EXISTS);
    mc_uuid_t who = {0, 0};
    char ep[64];
    assert_int_equal(mc_master_segment_holder(m, "host-a", C2, &who, ep, sizeof(ep)), 1);
    assert_true(mc_uuid_eq(who, C1));
    assert_string_equal(ep, "host-a:9000");
    assert_int_equal(mc_master_segment_holder(m, "host-a", C1, &who, ep, sizeof(ep)), 0);
    /* C1 expires: the name is free */
    for (uint64_t t = T0 + SEC; t <= T0 + 11 * SEC; t += SEC) {
        mc_master_ping(m, C2, t, NULL, NULL);
        mc_master_tick(m, t);
    }
    assert_int_equal(mount_seg(m, C2, 3, "host-a", MB, T0 + 12 * SEC), MC_OK);
    mc_master_destroy(m);
}

static void meta_rejects_values_over_the_limit(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.meta_max_value_len = 4;
    mc_master_t *m = master_new(&o);
    assert_int_equal(mc_master_meta_put(m, "k", 1, "12345", 5, C1, T0), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_meta_put(m, "k", 1, "1234", 4, C1, T0), MC_OK);
    mc_master_destroy(m);
}

static void meta_list_reports_keys_with_a_prefix(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(mc_master_meta_put(m, "mc/seg/a", 8, "1", 1, C1, T0), MC_OK);
    assert_int_equal(mc_master_meta_put(m, "mc/seg/b", 8, "2", 1, C1, T0), MC_OK);
    assert_int_equal(mc_master_meta_put(m, "mc/rpc/a", 8, "3", 1, C1, T0), MC_OK);
    unsigned n = 0;
    size_t cnt = 0;
    assert_int_equal(mc_master_meta_list(m, "mc/seg/", 7, count_meta, &n, &cnt), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(cnt, 2);
    n = 0;
    assert_int_equal(mc_master_meta_list(m, NULL, 0, count_meta, &n, &cnt), MC_OK);
    assert_int_equal(n, 3);
    mc_master_destroy(m);
}

/* Issue 13 finding 7: a second process with the same name overwrote, and at
 * its stop deleted, the first one's descriptor. Only the owner replaces or
 * deletes an entry; once the owner expires the name is free again. */
static void meta_entries_are_replaced_and_deleted_only_by_their_owner(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(mc_master_meta_put(m, "mc/seg/n", 8, "first", 5, C1, T0), MC_OK);
    assert_int_equal(mc_master_meta_put(m, "mc/seg/n", 8, "second", 6, C2, T0),
                     MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_meta_del(m, "mc/seg/n", 8, C2), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_meta_del(m, "mc/seg/n", 8, (mc_uuid_t){0, 0}),
                     MC_ERR_ILLEGAL_CLIENT);
    /* upstream's HTTP protocol (no owners) cannot take it either */
    assert_int_equal(mc_master_meta_put_unowned(m, "mc/seg/n", 8, "http", 4, T0),
                     MC_ERR_ILLEGAL_CLIENT);
    void *v;
    size_t vl;
    assert_int_equal(mc_master_meta_get(m, "mc/seg/n", 8, &v, &vl), MC_OK);
    assert_memory_equal(v, "first", 5);
    mc_free(v);
    /* C1 falls silent while C2 pings: C1's entry goes, C2 may take the name */
    for (uint64_t t = T0 + SEC; t <= T0 + 11 * SEC; t += SEC) {
        mc_master_ping(m, C2, t, NULL, NULL);
        mc_master_tick(m, t);
    }
    assert_int_equal(mc_master_meta_put(m, "mc/seg/n", 8, "second", 6, C2, T0 + 12 * SEC), MC_OK);
    assert_int_equal(mc_master_meta_del(m, "mc/seg/n", 8, C2), MC_OK);
    mc_master_destroy(m);
}

static void meta_holds_a_bounded_number_of_entries_and_bytes(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.meta_max_entries = 3;
    o.meta_max_bytes = 64;
    mc_master_t *m = master_new(&o);
    assert_int_equal(mc_master_meta_put(m, "a", 1, "1", 1, C1, T0), MC_OK);
    assert_int_equal(mc_master_meta_put(m, "b", 1, "2", 1, C1, T0), MC_OK);
    assert_int_equal(mc_master_meta_put(m, "c", 1, "3", 1, C1, T0), MC_OK);
    assert_int_equal(mc_master_meta_put(m, "d", 1, "4", 1, C1, T0), MC_ERR_LIMIT);
    /* replacing is not a new entry, but counts its new size */
    assert_int_equal(mc_master_meta_put(m, "c", 1, "33", 2, C1, T0), MC_OK);
    char big[64];
    memset(big, 'x', sizeof(big));
    assert_int_equal(mc_master_meta_put(m, "c", 1, big, 60, C1, T0), MC_ERR_LIMIT);
    assert_int_equal(mc_master_meta_del(m, "a", 1, C1), MC_OK);
    assert_int_equal(mc_master_meta_put(m, "d", 1, big, 50, C1, T0), MC_OK);
    mc_master_destroy(m);
}

typedef struct page_seen {
    char last[32];
    unsigned n;
    size_t bytes;
} page_seen_t;

static int page_entry(void *arg, const char *key, size_t key_len, const void *val, size_t val_len)
{
    page_seen_t *p = arg;
    (void)val;
    /* in key order, each once */
    assert_true(key_len < sizeof(p->last));
    char k[32];
    memcpy(k, key, key_len);
    k[key_len] = '\0';
    assert_true(p->last[0] == '\0' || strcmp(k, p->last) > 0);
    strcpy(p->last, k);
    p->n++;
    p->bytes += key_len + val_len;
    return 0;
}

static void meta_list_pages_cover_every_entry_once_within_the_budget(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    static char val[1000];
    memset(val, 'v', sizeof(val));
    char key[32];
    for (unsigned i = 0; i < 50; i++) {
        snprintf(key, sizeof(key), "mc/p/%03u", (i * 37) % 50);
        assert_int_equal(mc_master_meta_put(m, key, strlen(key), val, sizeof(val), C1, T0), MC_OK);
    }
    assert_int_equal(mc_master_meta_put(m, "mc/q/x", 6, "1", 1, C1, T0), MC_OK);
    page_seen_t seen = {{0}, 0, 0};
    unsigned pages = 0;
    int more = 1;
    while (more) {
        size_t cnt = 0;
        size_t before = seen.bytes;
        assert_int_equal(mc_master_meta_list_page(m, "mc/p/", 5, seen.last[0] ? seen.last : NULL,
                                                  strlen(seen.last), 4096, page_entry, &seen, &cnt,
                                                  &more),
                         MC_OK);
        assert_true(cnt >= 1);
        assert_true(seen.bytes - before <= 4096);
        pages++;
    }
    assert_int_equal(seen.n, 50);
    assert_int_equal(pages, 13); /* 4 entries (of ~1 KiB) per 4 KiB page */
    /* an entry larger than the budget still comes, alone */
    page_seen_t one = {{0}, 0, 0};
    size_t cnt = 0;
    assert_int_equal(
        mc_master_meta_list_page(m, "mc/p/", 5, NULL, 0, 10, page_entry, &one, &cnt, &more), MC_OK);
    assert_int_equal(cnt, 1);
    assert_true(more);
    mc_master_destroy(m);
}

static void meta_entries_of_a_silent_owner_expire_with_it(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    /* an owner that never mounted anything is tracked from its first put */
    assert_int_equal(mc_master_meta_put(m, "mc/rpc/x", 8, "1", 1, C3, T0), MC_OK);
    mc_master_tick(m, T0 + 10 * SEC);
    void *v;
    size_t vl;
    assert_int_equal(mc_master_meta_get(m, "mc/rpc/x", 8, &v, &vl), MC_OK);
    mc_free(v);
    mc_master_tick(m, T0 + 10 * SEC + 1);
    assert_int_equal(mc_master_meta_get(m, "mc/rpc/x", 8, &v, &vl), MC_ERR_NOT_FOUND);
    mc_master_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mount_rejects_invalid_parameters),
        cmocka_unit_test(an_identical_mount_is_idempotent),
        cmocka_unit_test(mounting_an_existing_id_differently_already_exists),
        cmocka_unit_test(foreach_segment_reports_usage_and_capacity),
        cmocka_unit_test(allocation_failures_in_mount_leave_no_trace),
        cmocka_unit_test(unmount_of_an_unknown_segment_is_not_found),
        cmocka_unit_test(unmount_by_another_client_is_illegal),
        cmocka_unit_test(unmount_without_readers_completes_at_once),
        cmocka_unit_test(a_two_replica_object_survives_unmount_of_one_segment),
        cmocka_unit_test(unmount_while_a_get_holds_a_lease_drains_until_the_lease_ends),
        cmocka_unit_test(unmount_drops_an_unfinished_put_and_its_put_end_is_not_found),
        cmocka_unit_test(an_unfinished_put_keeps_its_other_replicas_across_an_unmount),
        cmocka_unit_test(ping_of_an_unknown_client_asks_for_a_remount),
        cmocka_unit_test(a_client_that_mounts_is_ok),
        cmocka_unit_test(pinging_keeps_a_client_alive),
        cmocka_unit_test(client_expiry_removes_its_segments_objects_and_metadata),
        cmocka_unit_test(a_client_that_mounted_is_ok_even_if_its_metadata_came_first),
        cmocka_unit_test(an_expired_client_remounts_and_is_ok_again),
        cmocka_unit_test(remount_while_draining_is_unavailable_until_the_drain_ends),
        cmocka_unit_test(remount_skips_invalid_segments),
        cmocka_unit_test(meta_put_get_replace_and_delete),
        cmocka_unit_test(meta_rejects_values_over_the_limit),
        cmocka_unit_test(meta_list_reports_keys_with_a_prefix),
        cmocka_unit_test(meta_entries_of_a_silent_owner_expire_with_it),
        cmocka_unit_test(meta_entries_are_replaced_and_deleted_only_by_their_owner),
        cmocka_unit_test(meta_holds_a_bounded_number_of_entries_and_bytes),
        cmocka_unit_test(meta_list_pages_cover_every_entry_once_within_the_budget),
        cmocka_unit_test(a_segment_name_another_live_client_holds_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
