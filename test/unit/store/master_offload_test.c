/* Master core: node-local offload (master_offload.c) - LOCAL_DISK replicas
 * listed by get/query/exist, eviction that asks the node to persist (bounded
 * per cycle and per queue) before it drops the memory replica, failures and
 * timeouts that fall back to plain eviction, eager offload after PutEnd,
 * deletions handed to the node, unmount and expiry that drop a node's disk
 * replicas, restart reports, and the journal (records, replay, snapshot). */
#include <stdlib.h>

#include "master_test_util.h"

#include "store/master_ha.h"
#include "util/buf.h"

#define OBJ 1000

typedef struct polled {
    int n, persist, del, evict;
    char key[16][32];
    uint64_t off[16];
    uint64_t id[16]; /* LOAD: its id */
    int op[16];
} polled_t;

static int on_req(void *arg, const mc_master_offload_req_t *r)
{
    polled_t *p = arg;
    if (p->n < 16) {
        snprintf(p->key[p->n], sizeof(p->key[0]), "%.*s", (int)r->key_len, r->key);
        p->off[p->n] = r->offset;
        p->id[p->n] = r->load_id;
        p->op[p->n] = r->op;
    }
    p->n++;
    p->persist += r->op == MC_MASTER_OFFLOAD_PERSIST;
    p->del += r->op == MC_MASTER_OFFLOAD_DELETE;
    p->evict += r->evict;
    return 0;
}

static polled_t poll_seg(mc_master_t *m, mc_uuid_t c, uint64_t seg, uint64_t now)
{
    polled_t p;
    memset(&p, 0, sizeof(p));
    assert_int_equal(mc_master_offload_poll(m, c, seg_id(seg), now, 1000, on_req, &p), MC_OK);
    return p;
}

static mc_master_t *off_master(int on_evict, uint32_t limit, double cap, int force)
{
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 1000000 * SEC;
    o.eviction_high_watermark = 0.5;
    o.eviction_ratio = 1.0;
    o.enable_offload = 1;
    o.offload_on_evict = on_evict;
    o.offloading_queue_limit = limit;
    o.offload_cap_ratio = cap;
    o.offload_force_evict = force;
    o.offload_timeout_us = 5 * SEC;
    return master_new(&o);
}

static mc_status_t done(mc_master_t *m, mc_uuid_t c, uint64_t seg, const char *key,
                        mc_status_t result, uint64_t now)
{
    return mc_master_offload_done(m, c, seg_id(seg), key, strlen(key), OBJ, result, now);
}

static uint64_t allocated(mc_master_t *m)
{
    return stats(m).allocated_bytes;
}

static void put_n(mc_master_t *m, int n, uint64_t now)
{
    for (int i = 0; i < n; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        assert_int_equal(put_obj(m, C1, k, OBJ, 1, now + (uint64_t)i), MC_OK);
    }
}

static void eviction_asks_the_node_then_keeps_the_object_on_its_disk(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    assert_int_equal(mc_master_offload_poll(m, C1, seg_id(1), T0, 10, on_req, &(polled_t){0}),
                     MC_OK); /* the node offloads */
    assert_int_equal(mc_master_offload_poll(m, C2, seg_id(1), T0, 10, on_req, &(polled_t){0}),
                     MC_ERR_ILLEGAL_CLIENT);
    put_n(m, 8, T0);
    uint64_t before = allocated(m);
    mc_master_tick(m, T0 + SEC);
    /* nothing dropped yet: every victim waits for its node */
    assert_int_equal(allocated(m), before);
    polled_t p = poll_seg(m, C1, 1, T0 + SEC);
    assert_int_equal(p.persist, 8);
    assert_int_equal(p.evict, 8);
    /* pending: not removable without force, not evicted again */
    assert_int_equal(mc_master_remove(m, "k0", 2, 0, T0 + SEC), MC_ERR_OBJECT_HAS_LEASE);
    mc_master_tick(m, T0 + 2 * SEC);
    assert_int_equal(poll_seg(m, C1, 1, T0 + 2 * SEC).n, 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(done(m, C1, 1, p.key[i], MC_OK, T0 + 2 * SEC), MC_OK);
    assert_int_equal(allocated(m), 0); /* memory went once the disk copy existed */
    for (int i = 0; i < 8; i++)
        assert_int_equal(exists(m, p.key[i], T0 + 3 * SEC), 1);
    mc_master_replica_desc_t r[4];
    uint32_t n = 0;
    assert_int_equal(mc_master_get_replica_list(m, "k3", 2, T0 + 3 * SEC, r, 4, &n, NULL), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].kind, MC_MASTER_REPLICA_LOCAL_DISK);
    assert_string_equal(r[0].segment_name, "n1");
    assert_string_equal(r[0].te_endpoint, "n1:9000");
    assert_int_equal(r[0].size, OBJ);
    mc_master_key_info_t ki;
    assert_int_equal(mc_master_query_key(m, "k3", 2, r, 4, &n, &ki), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ki.local_disk, 1);
    assert_int_equal(ki.nrep, 0);
    /* a second answer for the same key is not a request any more */
    assert_int_equal(done(m, C1, 1, "k3", MC_OK, T0 + 3 * SEC), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_offload_stats_t os;
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.ldisk_objects, 8);
    assert_int_equal(os.persisted_total, 8);
    assert_int_equal(os.spilled_total, 8);
    assert_int_equal(os.in_flight, 0);
    mc_master_destroy(m);
}

static void without_a_polling_node_eviction_drops_as_before(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    put_n(m, 8, T0);
    mc_master_tick(m, T0 + SEC);
    assert_int_equal(allocated(m), 0);
    assert_int_equal(exists(m, "k0", T0 + SEC), 0);
    mc_master_destroy(m);
}

/* A put that finds every object of a full pool waiting for its node backs
 * eviction off for a while (nothing could make room); the node's answers
 * free memory and end that backoff: the next put that finds no room asks
 * for the objects written since at once, not a backoff later (the node
 * idled meanwhile in an eviction storm). */
static void a_nodes_answer_ends_the_eviction_backoff(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 4 * OBJ, T0), MC_OK);
    poll_seg(m, C1, 1, T0);
    put_n(m, 4, T0); /* k0..k3: full */
    uint64_t t = T0 + SEC;
    assert_int_equal(put_obj(m, C1, "k4", OBJ, 1, t), MC_ERR_NO_AVAILABLE_HANDLE);
    assert_int_equal(put_obj(m, C1, "k4", OBJ, 1, t + 1), MC_ERR_NO_AVAILABLE_HANDLE);
    polled_t p = poll_seg(m, C1, 1, t + 2);
    assert_int_equal(p.persist, 4); /* all four asked for, all four pending */
    for (int i = 0; i < 2; i++)
        assert_int_equal(done(m, C1, 1, p.key[i], MC_OK, t + 3), MC_OK);
    assert_int_equal(put_obj(m, C1, "k4", OBJ, 1, t + 4), MC_OK);
    assert_int_equal(put_obj(m, C1, "k5", OBJ, 1, t + 5), MC_OK);
    /* full again, 1 ms after the backoff began: k4 and k5 are asked for now */
    assert_int_equal(put_obj(m, C1, "k6", OBJ, 1, t + 1000), MC_ERR_NO_AVAILABLE_HANDLE);
    assert_int_equal(poll_seg(m, C1, 1, t + 1001).persist, 2);
    mc_master_destroy(m);

    /* requests that time out end them too: their objects are evicted as
     * without offload at once, not a backoff later */
    m = off_master(1, 100, 1.0, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 4 * OBJ, T0), MC_OK);
    poll_seg(m, C1, 1, T0);
    put_n(m, 4, T0);
    assert_int_equal(put_obj(m, C1, "k4", OBJ, 1, t), MC_ERR_NO_AVAILABLE_HANDLE);
    assert_int_equal(poll_seg(m, C1, 1, t + 2).persist, 4); /* sent at t + 2, never answered */
    uint64_t to = t + 2 + 5 * SEC;                          /* offload_timeout */
    assert_int_equal(put_obj(m, C1, "k4", OBJ, 1, to - 50000), MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_tick(m, to - 40000); /* nothing to evict yet: the tick's backoff too */
    mc_master_tick(m, to + 1);     /* the four time out */
    assert_int_equal(put_obj(m, C1, "k4", OBJ, 1, to + 2), MC_OK);
    mc_master_destroy(m);
}

static void requests_are_bounded_per_cycle_and_per_queue(void **state)
{
    (void)state;
    /* queue of 4, half of it per cycle; full queue keeps objects in memory */
    mc_master_t *m = off_master(1, 4, 0.5, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    poll_seg(m, C1, 1, T0);
    put_n(m, 8, T0);
    mc_master_tick(m, T0 + SEC);
    mc_master_offload_stats_t os;
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.queued, 2);
    mc_master_tick(m, T0 + 2 * SEC);
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.queued, 4);
    mc_master_tick(m, T0 + 3 * SEC);
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.queued, 4); /* full: nothing more, nothing evicted */
    assert_true(os.refused_total > 0);
    assert_int_equal(allocated(m), 8 * OBJ);
    mc_master_destroy(m);

    /* offload_force_evict: a full queue evicts as without offload */
    m = off_master(1, 4, 0.5, 1);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    poll_seg(m, C1, 1, T0);
    put_n(m, 8, T0);
    mc_master_tick(m, T0 + SEC);
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.queued, 2);
    assert_int_equal(allocated(m), 2 * OBJ); /* the 6 others evicted */
    mc_master_destroy(m);
}

static void a_failed_or_unanswered_offload_falls_back_to_eviction(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    poll_seg(m, C1, 1, T0);
    put_n(m, 6, T0);
    mc_master_tick(m, T0 + SEC);
    polled_t p = poll_seg(m, C1, 1, T0 + SEC);
    assert_int_equal(p.persist, 6);
    /* disk full for k0..k2; k3..k5 never answered */
    for (int i = 0; i < 3; i++)
        assert_int_equal(done(m, C1, 1, p.key[i], MC_ERR_FILE_WRITE_FAIL, T0 + SEC), MC_OK);
    mc_master_tick(m, T0 + 2 * SEC);
    assert_int_equal(allocated(m), 3 * OBJ);                 /* the failed ones were evicted */
    assert_int_equal(poll_seg(m, C1, 1, T0 + 2 * SEC).n, 0); /* and not asked again */
    mc_master_tick(m, T0 + 7 * SEC); /* timeout: void; below the watermark: stays */
    assert_int_equal(allocated(m), 3 * OBJ);
    /* no longer pending: evicted as without offload at the next pass */
    for (int i = 0; i < 3; i++) {
        char k[16];
        snprintf(k, sizeof(k), "n%d", i);
        assert_int_equal(put_obj(m, C1, k, OBJ, 1, T0 + 8 * SEC), MC_OK);
    }
    mc_master_tick(m, T0 + 8 * SEC);
    for (int i = 3; i < 6; i++)
        assert_int_equal(exists(m, p.key[i], T0 + 8 * SEC), 0);
    assert_int_equal(allocated(m), 3 * OBJ); /* the new ones, queued for their node */
    mc_master_offload_stats_t os;
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.failed_total, 3);
    assert_int_equal(os.timeouts_total, 3);
    assert_int_equal(os.in_flight, 0);
    assert_int_equal(os.queued, 3);
    /* a late answer is refused: the node deletes its file */
    assert_int_equal(done(m, C1, 1, p.key[4], MC_OK, T0 + 9 * SEC), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_destroy(m);
}

static void eager_offload_after_put_end_keeps_memory(void **state)
{
    (void)state;
    mc_master_t *m = off_master(0, 100, 0.5, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 100 * OBJ, T0), MC_OK);
    assert_int_equal(mount_seg(m, C2, 2, "n2", 100 * OBJ, T0), MC_OK);
    poll_seg(m, C1, 1, T0); /* only n1 offloads */
    put_n(m, 4, T0);
    int on1 = 0;
    for (int i = 0; i < 4; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        mc_master_replica_desc_t r[4];
        uint32_t n = 0;
        assert_int_equal(mc_master_get_replica_list(m, k, strlen(k), T0 + 1, r, 4, &n, NULL),
                         MC_OK);
        on1 += strcmp(r[0].segment_name, "n1") == 0;
    }
    polled_t p1 = poll_seg(m, C1, 1, T0 + 1);
    polled_t p2 = poll_seg(m, C2, 2, T0 + 1);
    assert_int_equal(p1.persist, on1); /* every put on n1, none on n2 (not offloading then) */
    assert_int_equal(p2.persist, 0);
    assert_int_equal(p1.evict, 0);
    for (int i = 0; i < p1.n; i++)
        assert_int_equal(done(m, C1, 1, p1.key[i], MC_OK, T0 + 2), MC_OK);
    for (int i = 0; i < p2.n; i++)
        assert_int_equal(done(m, C2, 2, p2.key[i], MC_OK, T0 + 2), MC_OK);
    assert_int_equal(allocated(m), 4 * OBJ);
    mc_master_offload_stats_t os;
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.ldisk_objects, (uint64_t)(p1.n + p2.n));
    if (p1.n > 0) {
        mc_master_replica_desc_t r[4];
        uint32_t n = 0;
        assert_int_equal(
            mc_master_get_replica_list(m, p1.key[0], strlen(p1.key[0]), T0 + 3, r, 4, &n, NULL),
            MC_OK);
        assert_int_equal(n, 2);
        assert_int_equal(r[0].kind, MC_MASTER_REPLICA_MEMORY);
        assert_int_equal(r[1].kind, MC_MASTER_REPLICA_LOCAL_DISK);
    }
    mc_master_destroy(m);
}

/* Evict everything of node n1 down to its disk: returns the keys' count. */
static int offload_all(mc_master_t *m, uint64_t now)
{
    poll_seg(m, C1, 1, now);
    put_n(m, 6, now);
    mc_master_tick(m, now + SEC);
    polled_t p = poll_seg(m, C1, 1, now + SEC);
    for (int i = 0; i < p.n; i++)
        assert_int_equal(done(m, C1, 1, p.key[i], MC_OK, now + SEC), MC_OK);
    return p.n;
}

static void removing_hands_the_deletion_to_the_node(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    assert_int_equal(offload_all(m, T0), 6);
    assert_int_equal(mc_master_remove(m, "k1", 2, 0, T0 + 10 * SEC), MC_OK);
    polled_t p = poll_seg(m, C1, 1, T0 + 10 * SEC);
    assert_int_equal(p.del, 1);
    assert_string_equal(p.key[0], "k1");
    assert_int_equal(poll_seg(m, C1, 1, T0 + 10 * SEC).n, 0); /* once */
    long cnt = 0;
    assert_int_equal(mc_master_remove_all(m, 0, T0 + 10 * SEC, &cnt), MC_OK);
    assert_int_equal(cnt, 5);
    assert_int_equal(poll_seg(m, C1, 1, T0 + 10 * SEC).del, 5);
    mc_master_destroy(m);
}

static void unmount_and_expiry_drop_the_nodes_disk_replicas(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    assert_int_equal(offload_all(m, T0), 6);
    uint64_t now = T0 + 10 * SEC;
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), now, NULL), MC_OK);
    for (int i = 0; i < 6; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        assert_int_equal(exists(m, k, now), 0);
    }
    mc_master_offload_stats_t os;
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.ldisk_objects, 0);
    mc_master_destroy(m);

    /* expiry: a client that stops pinging takes its disk replicas along */
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 10 * SEC;
    o.eviction_high_watermark = 0.5;
    o.eviction_ratio = 1.0;
    o.enable_offload = 1;
    o.offload_on_evict = 1;
    m = master_new(&o);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    assert_int_equal(mount_seg(m, C2, 2, "n2", 10 * OBJ, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "x", OBJ, 1, T0), MC_OK);
    mc_master_replica_desc_t r[4];
    uint32_t n = 0;
    assert_int_equal(mc_master_get_replica_list(m, "x", 1, T0, r, 4, &n, NULL), MC_OK);
    uint64_t seg = r[0].segment_id.lo;
    mc_uuid_t owner = seg == 1 ? C1 : C2;
    assert_int_equal(mc_master_ldisk_report(m, owner, seg_id(seg), "y", 1, OBJ, T0), MC_OK);
    assert_int_equal(exists(m, "y", T0), 1);
    for (uint64_t t = T0; t <= T0 + 30 * SEC; t += 2 * SEC) {
        mc_master_client_status_t cs;
        int64_t vv;
        mc_master_ping(m, owner.lo == C1.lo ? C2 : C1, t, &vv, &cs);
        mc_master_tick(m, t);
    }
    assert_int_equal(exists(m, "y", T0 + 30 * SEC), 0); /* its node is gone */
    mc_master_destroy(m);
}

static void a_restarted_node_reports_its_files(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "live", OBJ, 1, T0), MC_OK);
    /* a file of an existing object may be of an older put: refused */
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "live", 4, OBJ, T0),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "old", 3, OBJ, T0), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "old", 3, OBJ, T0), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "zero", 4, 0, T0),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_ldisk_report(m, C2, seg_id(1), "x", 1, OBJ, T0),
                     MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(9), "x", 1, OBJ, T0),
                     MC_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(exists(m, "old", T0), 1);
    assert_int_equal(get_n(m, "old", T0, NULL), MC_OK);
    /* the node finds the file corrupt: the only replica goes, and the object */
    assert_int_equal(mc_master_ldisk_drop(m, C1, seg_id(1), "old", 3, T0), MC_OK);
    assert_int_equal(exists(m, "old", T0), 0);
    mc_master_offload_stats_t os;
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.ldisk_objects, 0);
    /* with offload off, polling is refused */
    mc_master_destroy(m);
    m = master_new_immortal();
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    assert_int_equal(mc_master_offload_poll(m, C1, seg_id(1), T0, 10, on_req, &(polled_t){0}),
                     MC_ERR_UNAVAILABLE_IN_CURRENT_MODE);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "old", 3, OBJ, T0),
                     MC_ERR_UNAVAILABLE_IN_CURRENT_MODE);
    mc_master_destroy(m);
}

/* A node's report round that failed partway is tried again, and its scan
 * reports the files of the first part again: one of those keys removed
 * meanwhile has its DELETE still queued for the node. Its file is refused
 * (the node deletes it) and the DELETE taken back, so the key does not come
 * back, also when it was put again meanwhile; a DELETE for another node's
 * file of that key is not taken. */
static void a_file_of_a_key_removed_since_the_last_report_is_refused(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    assert_int_equal(mount_seg(m, C2, 2, "n2", 10 * OBJ, T0), MC_OK);
    /* round 1, until it failed */
    static const char *const keys[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), keys[i], 1, OBJ, T0), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, C2, seg_id(2), "d", 1, OBJ, T0), MC_OK);
    uint64_t now = T0 + SEC;
    assert_int_equal(mc_master_remove(m, "a", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m, "c", 1, 0, now), MC_OK);
    assert_int_equal(put_obj(m, C2, "c", OBJ, 1, now), MC_OK); /* c again, in memory */
    assert_int_equal(mc_master_remove(m, "d", 1, 0, now), MC_OK);
    /* round 2 */
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "a", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "b", 1, OBJ, now), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "c", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(exists(m, "a", now), 0);
    assert_int_equal(exists(m, "b", now), 1);
    assert_int_equal(exists(m, "c", now), 1); /* the new put, in memory only */
    mc_master_replica_desc_t r[4];
    uint32_t n = 0;
    assert_int_equal(mc_master_get_replica_list(m, "c", 1, now, r, 4, &n, NULL), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].kind, MC_MASTER_REPLICA_MEMORY);
    /* n1's DELETEs were taken back; n2's of d is still its own */
    assert_int_equal(poll_seg(m, C1, 1, now).del, 0);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "d", 1, OBJ, now), MC_OK);
    polled_t p = poll_seg(m, C2, 2, now);
    assert_int_equal(p.del, 1);
    assert_string_equal(p.key[0], "d");
    /* the reported ones again (a third round): kept */
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "b", 1, OBJ, now), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "a", 1, OBJ, now), MC_OK);
    assert_int_equal(exists(m, "a", now), 1); /* its DELETE was taken once: a later file is one */
    mc_master_destroy(m);
}

/* A node's segment went (it expired, or left) before it took the DELETEs
 * of objects removed meanwhile (queued, or handed out by a poll answered
 * into a dead connection: taken only once the node polls again): they wait
 * for the next segment of its name (the node restarted), so its start
 * report does not bring the removed keys back; another name does not get
 * them, nor does the new node get those the old one took. */
/* Node n1 mounted (C1, segment 1), polling, its files a, b, c, d reported. */
static void mount_with_files_abcd(mc_master_t *m)
{
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    poll_seg(m, C1, 1, T0);
    static const char *const keys[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), keys[i], 1, OBJ, T0), MC_OK);
}

static void deletions_of_a_gone_segment_wait_for_its_next_mount(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    mount_with_files_abcd(m);
    uint64_t now = T0 + SEC;
    assert_int_equal(mc_master_remove(m, "d", 1, 0, now), MC_OK);
    assert_int_equal(poll_seg(m, C1, 1, now).del, 1);
    assert_int_equal(poll_seg(m, C1, 1, now).del, 0); /* taken: the node polled again */
    assert_int_equal(mc_master_remove(m, "a", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m, "c", 1, 0, now), MC_OK);
    assert_int_equal(poll_seg(m, C1, 1, now).del, 2); /* into a dead connection, say */
    uint64_t drain = 0;
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), now, &drain), MC_OK);
    assert_true(drain <= now);                /* gone: nothing held a lease */
    assert_int_equal(exists(m, "b", now), 0); /* its only replica went with the node */
    /* another node, another name: none of them */
    assert_int_equal(mount_seg(m, C2, 2, "n2", 10 * OBJ, now), MC_OK);
    assert_int_equal(poll_seg(m, C2, 2, now).del, 0);
    /* the node back, under its name: its report brings b back, not a */
    assert_int_equal(mount_seg(m, C3, 3, "n1", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, C3, seg_id(3), "a", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_ldisk_report(m, C3, seg_id(3), "b", 1, OBJ, now), MC_OK);
    assert_int_equal(exists(m, "a", now), 0);
    assert_int_equal(exists(m, "b", now), 1);
    /* c's file was not reported (gone from its disk): its DELETE comes;
     * d's was taken by the node before */
    polled_t p = poll_seg(m, C3, 3, now);
    assert_int_equal(p.del, 1);
    assert_string_equal(p.key[0], "c");
    assert_int_equal(poll_seg(m, C2, 2, now).del, 0);
    mc_master_destroy(m);
}

/* The node back while its old segment still drains (a reader holds a
 * lease on an object in it): the old segment left the mounted ones at once,
 * so the new one mounts, and its DELETEs were parked when its unmount
 * started: the new node's report of the removed key is refused. */
static void a_node_back_while_its_old_segment_drains_gets_its_deletions(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    poll_seg(m, C1, 1, T0);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "a", 1, OBJ, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "mem", OBJ, 1, T0), MC_OK);
    assert_int_equal(get_n(m, "mem", T0, NULL), MC_OK); /* a lease on it */
    uint64_t now = T0 + 1000;
    assert_int_equal(mc_master_remove(m, "a", 1, 0, now), MC_OK);
    uint64_t drain = 0;
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), now, &drain), MC_OK);
    assert_true(drain > now); /* draining */
    assert_int_equal(mount_seg(m, C3, 3, "n1", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, C3, seg_id(3), "a", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(exists(m, "a", now), 0);
    mc_master_tick(m, drain + 1); /* the old one goes: nothing left to move */
    assert_int_equal(poll_seg(m, C3, 3, drain + 1).del, 0);
    assert_int_equal(exists(m, "a", drain + 1), 0);
    mc_master_destroy(m);
}

/* A DELETE of a key's older file and the PERSIST of its new put, in one
 * poll's answer: once the node answers the PERSIST, the DELETE is done
 * too, and a node killed before its next poll gets its new file back
 * after its restart (not refused by that DELETE). */
static void a_persist_answered_ends_the_deletion_handed_out_with_it(void **state)
{
    (void)state;
    mc_master_t *m = off_master(0, 100, 1.0, 0); /* eager: a PERSIST after each PutEnd */
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    poll_seg(m, C1, 1, T0);
    assert_int_equal(put_obj(m, C1, "k", OBJ, 1, T0), MC_OK);
    polled_t p = poll_seg(m, C1, 1, T0);
    assert_int_equal(p.persist, 1);
    assert_int_equal(done(m, C1, 1, "k", MC_OK, T0), MC_OK);
    uint64_t now = T0 + SEC;
    assert_int_equal(mc_master_remove(m, "k", 1, 0, now), MC_OK);
    assert_int_equal(put_obj(m, C1, "k", OBJ, 1, now), MC_OK);
    p = poll_seg(m, C1, 1, now);
    assert_int_equal(p.del, 1);
    assert_int_equal(p.persist, 1);
    assert_int_equal(done(m, C1, 1, "k", MC_OK, now), MC_OK);
    uint64_t drain = 0;
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), now, &drain), MC_OK);
    assert_true(drain <= now);
    assert_int_equal(mount_seg(m, C3, 3, "n1", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, C3, seg_id(3), "k", 1, OBJ, now), MC_OK);
    assert_int_equal(exists(m, "k", now), 1);
    assert_int_equal(poll_seg(m, C3, 3, now).del, 0);
    mc_master_destroy(m);
}

typedef struct keys_seen {
    int n;
    char key[700][16];
} keys_seen_t;

static int on_key(void *arg, const mc_master_offload_req_t *r)
{
    keys_seen_t *k = arg;
    assert_int_equal(r->op, MC_MASTER_OFFLOAD_DELETE);
    assert_true(k->n < 700);
    snprintf(k->key[k->n++], sizeof(k->key[0]), "%.*s", (int)r->key_len, r->key);
    return 0;
}

/* Hundreds of DELETEs for two nodes: each node gets its own, in the order
 * of the removals, in polls of at most `max`, minus those taken back by
 * its reports; each once. */
static void many_deletions_go_to_their_nodes_in_order(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    assert_int_equal(mount_seg(m, C2, 2, "n2", 10 * OBJ, T0), MC_OK);
    poll_seg(m, C1, 1, T0);
    poll_seg(m, C2, 2, T0);
    char k[16];
    for (int i = 0; i < 300; i++) {
        snprintf(k, sizeof(k), "a%d", i);
        assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), k, strlen(k), OBJ, T0), MC_OK);
        snprintf(k, sizeof(k), "b%d", i);
        assert_int_equal(mc_master_ldisk_report(m, C2, seg_id(2), k, strlen(k), OBJ, T0), MC_OK);
    }
    for (int i = 0; i < 300; i++) { /* interleaved: a0 b0 a1 b1 ... */
        snprintf(k, sizeof(k), "a%d", i);
        assert_int_equal(mc_master_remove(m, k, strlen(k), 0, T0), MC_OK);
        snprintf(k, sizeof(k), "b%d", i);
        assert_int_equal(mc_master_remove(m, k, strlen(k), 0, T0), MC_OK);
    }
    mc_master_offload_stats_t st;
    mc_master_offload_stats(m, &st);
    assert_int_equal(st.deletions, 600);
    for (int i = 0; i < 300; i += 3) { /* n1's report of every third: refused */
        snprintf(k, sizeof(k), "a%d", i);
        assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), k, strlen(k), OBJ, T0),
                         MC_ERR_OBJECT_NOT_FOUND);
    }
    /* n2's files are not n1's to take back */
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "b1", 2, OBJ, T0), MC_OK);
    keys_seen_t *a = mc_calloc(1, sizeof(*a)), *b = mc_calloc(1, sizeof(*b));
    assert_non_null(a);
    assert_non_null(b);
    for (int round = 0; round < 10; round++) {
        assert_int_equal(mc_master_offload_poll(m, C1, seg_id(1), T0, 64, on_key, a), MC_OK);
        assert_int_equal(mc_master_offload_poll(m, C2, seg_id(2), T0, 64, on_key, b), MC_OK);
    }
    assert_int_equal(a->n, 200);
    assert_int_equal(b->n, 300);
    for (int i = 0, j = 0; i < 300; i++) {
        if (i % 3 == 0)
            continue;
        snprintf(k, sizeof(k), "a%d", i);
        assert_string_equal(a->key[j++], k);
    }
    for (int i = 0; i < 300; i++) {
        snprintf(k, sizeof(k), "b%d", i);
        assert_string_equal(b->key[i], k);
    }
    mc_master_offload_stats(m, &st);
    assert_int_equal(st.deletions, 0); /* each done: its node polled again */
    mc_free(a);
    mc_free(b);
    mc_master_destroy(m);
}

/* A node's segment is named by its host and port, and its port is any free
 * one by default: back after a crash, its node has another name. Its
 * offload directory's identity (its polls say it) finds it: the DELETEs
 * kept when its last segment went are its new segment's once it says the
 * same directory, not the next segment of the old name's (another node's
 * directory); and back before its last segment expired, its report takes
 * that segment's LOCAL_DISK replicas over (the same files) instead of
 * having them refused and deleted. */
static void a_node_back_under_another_name_is_known_by_its_directory(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    mount_with_files_abcd(m);
    assert_int_equal(mc_master_offload_disk(m, C1, seg_id(1), "D1", 2), MC_OK);
    assert_int_equal(mc_master_offload_disk(m, C1, seg_id(1), "", 0), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_offload_disk(m, C2, seg_id(1), "D1", 2), MC_ERR_ILLEGAL_CLIENT);
    uint64_t now = T0 + SEC;
    assert_int_equal(mc_master_remove(m, "a", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m, "c", 1, 0, now), MC_OK);
    assert_int_equal(poll_seg(m, C1, 1, now).del, 2); /* into a dead connection */
    /* back at once, on another port: n1's segment is still mounted */
    assert_int_equal(mount_seg(m, C3, 3, "n1b", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(m, C3, seg_id(3), "D1", 2), MC_OK);
    /* n1's DELETEs are its node's, back: a and c's, handed out again */
    assert_int_equal(poll_seg(m, C3, 3, now).del, 2);
    assert_int_equal(mc_master_ldisk_report(m, C3, seg_id(3), "b", 1, OBJ, now), MC_OK);
    /* not the same directory: refused, as before */
    assert_int_equal(mount_seg(m, C2, 2, "n2", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(m, C2, seg_id(2), "D2", 2), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, C2, seg_id(2), "d", 1, OBJ, now),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    mc_master_offload_stats_t st;
    mc_master_offload_stats(m, &st);
    assert_int_equal(st.taken_over_total, 1);
    /* n1 expires (its client gone): b stays, on n1b; d goes with n1 */
    uint64_t drain = 0;
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), now, &drain), MC_OK);
    assert_int_equal(exists(m, "b", now), 1);
    assert_int_equal(exists(m, "d", now), 0);
    mc_master_replica_desc_t d[4];
    uint32_t nd = 0;
    mc_master_key_info_t ki;
    assert_int_equal(mc_master_query_key(m, "b", 1, d, 4, &nd, &ki), MC_OK);
    assert_int_equal(nd, 1);
    assert_string_equal(d[0].segment_name, "n1b");
    /* (a and c's done: n1b polled again) */
    polled_t p = poll_seg(m, C3, 3, now);
    assert_int_equal(p.del, 0);
    assert_int_equal(poll_seg(m, C2, 2, now).del, 0);

    /* n1b killed in turn, a key removed meanwhile: parked by directory */
    assert_int_equal(mc_master_remove(m, "b", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_unmount_segment(m, C3, seg_id(3), now, &drain), MC_OK);
    /* a segment named n1b again but of another directory does not get it */
    const mc_uuid_t c4 = {0x44, 0x4}, c5 = {0x55, 0x5};
    assert_int_equal(mount_seg(m, c4, 4, "n1b", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(m, c4, seg_id(4), "D4", 2), MC_OK);
    assert_int_equal(poll_seg(m, c4, 4, now).del, 0);
    assert_int_equal(mc_master_ldisk_report(m, c4, seg_id(4), "e", 1, OBJ, now), MC_OK);
    /* the node of D1, under a third name, does: its report of b is refused */
    assert_int_equal(mount_seg(m, c5, 5, "n1c", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, c5, seg_id(5), "x", 1, OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(m, c5, seg_id(5), "D1", 2), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, c5, seg_id(5), "b", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(exists(m, "b", now), 0);
    assert_int_equal(poll_seg(m, c5, 5, now).del, 0);
    mc_master_destroy(m);
}

static polled_t poll_ack(mc_master_t *m, uint64_t done, uint64_t *answer)
{
    polled_t p;
    memset(&p, 0, sizeof(p));
    assert_int_equal(
        mc_master_offload_poll_ack(m, C1, seg_id(1), T0, 1000, 1, done, answer, on_req, &p), MC_OK);
    return p;
}

/* A node says which answer's DELETEs it did last (DONE_ID): the DELETEs of
 * an answer lost on its way (the connection broke while it was sent; the
 * node, alive, polls again on a new one) are handed out again, not counted
 * done (their files stayed, and the node's next restart brought the keys
 * back). A node that says nothing: done when it polls again, as before. */
static void a_deletion_whose_answer_was_lost_is_handed_out_again(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    mount_with_files_abcd(m);
    uint64_t now = T0 + SEC, a1 = 0, a2 = 0, a3 = 1;
    assert_int_equal(mc_master_remove(m, "a", 1, 0, now), MC_OK);
    polled_t p = poll_ack(m, 0, &a1);
    assert_int_equal(p.del, 1);
    assert_true(a1 != 0);
    p = poll_ack(m, 0, &a2); /* a1 never reached the node */
    assert_int_equal(p.del, 1);
    assert_string_equal(p.key[0], "a");
    assert_true(a2 != 0 && a2 != a1);
    mc_master_offload_stats_t st;
    mc_master_offload_stats(m, &st);
    assert_int_equal(st.deletions_again_total, 1);
    p = poll_ack(m, a2, &a3); /* done */
    assert_int_equal(p.n, 0);
    assert_int_equal(a3, 0);
    mc_master_offload_stats(m, &st);
    assert_int_equal(st.deletions, 0);
    /* a node that says nothing */
    assert_int_equal(mc_master_remove(m, "b", 1, 0, now), MC_OK);
    assert_int_equal(poll_seg(m, C1, 1, now).del, 1);
    assert_int_equal(poll_seg(m, C1, 1, now).n, 0);
    mc_master_offload_stats(m, &st);
    assert_int_equal(st.deletions, 0);
    assert_int_equal(st.deletions_again_total, 1);
    mc_master_destroy(m);
}

/* The node back (another name, its directory's identity) before its last
 * segment expired: the DELETEs queued for that segment, before and after
 * the new one said its directory, refuse its report of those files (else
 * the removed keys came back, and the DELETEs, handed to it when the old
 * segment went, deleted the files of objects it then listed); a LOAD asked
 * of the old segment's node does not keep the object it takes over
 * waiting: the next load is asked of the new node. */
static void a_node_back_before_its_segment_expired_takes_its_deletions_and_loads(void **state)
{
    (void)state;
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    mount_with_files_abcd(m);
    assert_int_equal(mc_master_offload_disk(m, C1, seg_id(1), "D1", 2), MC_OK);
    uint64_t now = T0 + SEC;
    assert_int_equal(mc_master_remove(m, "a", 1, 0, now), MC_OK); /* the node is dead */
    assert_int_equal(mc_master_offload_load(m, "d", 1, now), MC_OK);
    assert_int_equal(mc_master_offload_loading(m, "d", 1), 1); /* asked of n1, never done */
    assert_int_equal(mount_seg(m, C3, 3, "n1b", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(m, C3, seg_id(3), "D1", 2), MC_OK);
    assert_int_equal(mc_master_remove(m, "b", 1, 0, now), MC_OK); /* still n1's replica */
    assert_int_equal(mc_master_ldisk_report(m, C3, seg_id(3), "a", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_ldisk_report(m, C3, seg_id(3), "b", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_ldisk_report(m, C3, seg_id(3), "c", 1, OBJ, now), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, C3, seg_id(3), "d", 1, OBJ, now), MC_OK);
    assert_int_equal(exists(m, "a", now), 0);
    assert_int_equal(exists(m, "b", now), 0);
    assert_int_equal(mc_master_offload_loading(m, "d", 1), 0);
    mc_master_offload_stats_t st;
    mc_master_offload_stats(m, &st);
    assert_int_equal(st.deletions, 0);
    assert_int_equal(st.taken_over_total, 2);
    /* n1 expires: nothing of it is left to hand to n1b */
    uint64_t drain = 0;
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), now, &drain), MC_OK);
    assert_int_equal(exists(m, "c", now), 1);
    assert_int_equal(exists(m, "d", now), 1);
    polled_t p = poll_seg(m, C3, 3, now);
    assert_int_equal(p.del, 0);
    assert_int_equal(mc_master_offload_load(m, "d", 1, now), MC_OK);
    p = poll_seg(m, C3, 3, now);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.op[0], MC_MASTER_OFFLOAD_LOAD);
    assert_string_equal(p.key[0], "d");
    mc_master_destroy(m);
}

/* ---- reads of disk-only objects: LOAD, promotion ---- */

static mc_master_t *load_master(int promote)
{
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 1000000 * SEC;
    o.eviction_high_watermark = 0.5;
    o.eviction_ratio = 1.0;
    o.enable_offload = 1;
    o.offload_on_evict = 1;
    o.promotion_on_hit = promote;
    o.promotion_admission_threshold = 2;
    mc_master_t *m = master_new(&o);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    poll_seg(m, C1, 1, T0);
    return m;
}

/* Load key through its node: the LOAD request's answer. */
static void load_once(mc_master_t *m, const char *key, mc_status_t result, uint64_t now)
{
    assert_int_equal(mc_master_offload_load(m, key, strlen(key), now), MC_OK);
    assert_int_equal(mc_master_offload_load(m, key, strlen(key), now), MC_OK); /* in flight */
    polled_t p = poll_seg(m, C1, 1, now);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.op[0], MC_MASTER_OFFLOAD_LOAD);
    assert_string_equal(p.key[0], key);
    assert_int_equal(done(m, C1, 1, key, result, now), MC_OK);
}

/* A loaded copy is its node's staging area: listed for a reader that will
 * release the lease (mc_master_offload_list with release) it may go as soon
 * as the reader released it. A 10-object segment holding 10 loaded copies
 * under their leases has no room for the 11th load; once their readers
 * released them, the 11th (and more) load at once. */
static void a_released_loaded_copy_makes_room_for_the_next_load(void **state)
{
    (void)state;
    mc_master_t *m = load_master(0);
    char k[16];
    for (int i = 0; i < 12; i++) {
        snprintf(k, sizeof(k), "d%d", i);
        assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), k, strlen(k), OBJ, T0), MC_OK);
    }
    mc_master_replica_desc_t r[4];
    uint32_t n = 0;
    uint64_t lease = 0, now = T0 + 1;
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "d%d", i);
        load_once(m, k, MC_OK, now);
        assert_int_equal(mc_master_offload_list(m, k, strlen(k), now, 1, r, 4, &n, &lease), MC_OK);
        assert_int_equal(r[0].kind, MC_MASTER_REPLICA_MEMORY);
    }
    assert_int_equal(allocated(m), 10 * OBJ);
    /* every copy leased: no room for another load */
    assert_int_equal(mc_master_offload_load(m, "d10", 3, now), MC_ERR_NO_AVAILABLE_HANDLE);
    /* their readers copied them and release them */
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "d%d", i);
        mc_master_key_t key = {k, strlen(k)};
        size_t cnt = 0;
        assert_int_equal(mc_master_batch_lease_release(m, &key, 1, mc_master_view_version(m), now,
                                                       now + 1, &cnt),
                         MC_OK);
        assert_int_equal(cnt, 1);
    }
    load_once(m, "d10", MC_OK, now + 2); /* at once, well within the lease */
    load_once(m, "d11", MC_OK, now + 3);
    assert_int_equal(exists(m, "d0", now + 4), 1); /* still on its node's disk */
    /* listing a disk-only object grants nothing until its load answers */
    assert_int_equal(mc_master_offload_disk_only(m, "d0", 2), 1);
    assert_int_equal(mc_master_offload_disk_only(m, "d11", 3), 0); /* loaded */
    assert_int_equal(mc_master_offload_disk_only(m, "nope", 4), 0);
    mc_master_destroy(m);
}

/* At depth > 1 the loads of several readers share the node's segment: a
 * copy loaded for a reader whose answer has not come yet is not evicted to
 * make room for another load (that reader would have to load it again),
 * until its reader's grant and release, or until the grace (at most 1 s)
 * passed without them. */
static void a_loaded_copy_waits_for_its_reader_before_another_load_takes_it(void **state)
{
    (void)state;
    mc_master_t *m = load_master(0);
    char k[16];
    for (int i = 0; i < 12; i++) {
        snprintf(k, sizeof(k), "d%d", i);
        assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), k, strlen(k), OBJ, T0), MC_OK);
    }
    uint64_t now = T0 + 1;
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "d%d", i);
        load_once(m, k, MC_OK, now); /* no reader's answer yet: nothing granted */
    }
    assert_int_equal(allocated(m), 10 * OBJ);
    /* every copy awaits its reader: no room for another load */
    assert_int_equal(mc_master_offload_load(m, "d10", 3, now + 10), MC_ERR_NO_AVAILABLE_HANDLE);
    /* d0's reader is answered (the grant it will release) and copies it */
    mc_master_replica_desc_t r[4];
    uint32_t n = 0;
    uint64_t lease = 0;
    assert_int_equal(mc_master_offload_list(m, "d0", 2, now + 20, 1, r, 4, &n, &lease), MC_OK);
    assert_int_equal(r[0].kind, MC_MASTER_REPLICA_MEMORY);
    assert_int_equal(mc_master_offload_load(m, "d10", 3, now + 30), MC_ERR_NO_AVAILABLE_HANDLE);
    mc_master_key_t key = {"d0", 2};
    size_t cnt = 0;
    assert_int_equal(mc_master_batch_lease_release(m, &key, 1, mc_master_view_version(m), now + 20,
                                                   now + 40, &cnt),
                     MC_OK);
    assert_int_equal(cnt, 1);
    load_once(m, "d10", MC_OK, now + 50); /* d0's copy made room, at once */
    assert_int_equal(mc_master_offload_disk_only(m, "d0", 2), 1);
    for (int i = 1; i < 10; i++) { /* the others are still there for their readers */
        snprintf(k, sizeof(k), "d%d", i);
        assert_int_equal(mc_master_offload_disk_only(m, k, strlen(k)), 0);
    }
    /* a reader that never comes holds its copy only for the grace */
    load_once(m, "d11", MC_OK, now + 1000000 + 100);
    assert_int_equal(allocated(m) <= 10 * OBJ, 1);
    mc_master_destroy(m);
}

static void a_disk_only_object_is_loaded_by_its_node_and_listed_in_memory(void **state)
{
    (void)state;
    mc_master_t *m = load_master(0);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "d", 1, OBJ, T0), MC_OK);
    assert_int_equal(allocated(m), 0);
    load_once(m, "d", MC_OK, T0 + 1);
    assert_int_equal(allocated(m), OBJ); /* the node's staging copy */
    mc_master_replica_desc_t r[4];
    uint32_t n = 0;
    assert_int_equal(mc_master_get_replica_list(m, "d", 1, T0 + 2, r, 4, &n, NULL), MC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(r[0].kind, MC_MASTER_REPLICA_MEMORY);
    assert_int_equal(r[0].address, (1ull << 40) + 0); /* in the node's segment */
    assert_int_equal(r[1].kind, MC_MASTER_REPLICA_LOCAL_DISK);
    /* in memory: a load is not asked again */
    assert_int_equal(mc_master_offload_load(m, "d", 1, T0 + 3), MC_OK);
    assert_int_equal(poll_seg(m, C1, 1, T0 + 3).n, 0);
    /* nothing to load: absent, or no disk copy */
    assert_int_equal(mc_master_offload_load(m, "nope", 4, T0), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put_obj(m, C1, "mem", OBJ, 1, T0), MC_OK);
    mc_master_offload_stats_t os;
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.loads_total, 1);
    mc_master_destroy(m);
}

static void a_corrupt_file_is_dropped_and_never_listed(void **state)
{
    (void)state;
    mc_master_t *m = load_master(0);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "bad", 3, OBJ, T0), MC_OK);
    load_once(m, "bad", MC_ERR_CHECKSUM_MISMATCH, T0 + 1);
    assert_int_equal(exists(m, "bad", T0 + 2), 0);
    assert_int_equal(allocated(m), 0); /* its staging range is free again */
    mc_master_offload_stats_t os;
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.load_failed_total, 1);
    assert_int_equal(os.ldisk_objects, 0);
    mc_master_destroy(m);
}

/* Progressive loads: the node says how much of a LOAD in flight is in; a
 * reader is given the range being loaded (PROCESSING) and that count, only
 * when it is more than it has; once the load is answered, nothing partial
 * is given (the object is listed), and a failed one leaves nothing. */
static void a_load_in_flight_tells_readers_how_much_is_in(void **state)
{
    (void)state;
    mc_master_t *m = load_master(0);
    mc_master_replica_desc_t d;
    uint64_t ready = 0, id = 0;
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "d", 1, OBJ, T0), MC_OK);
    /* no load yet: nothing to tell, and no load to progress */
    assert_int_equal(mc_master_offload_partial(m, "d", 1, 0, 0, &d, &ready, &id), 0);
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "d", 1, OBJ, 100, 0),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_offload_load(m, "d", 1, T0), MC_OK);
    /* queued, not polled: not in flight */
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "d", 1, OBJ, 100, 0),
                     MC_ERR_OBJECT_NOT_FOUND);
    polled_t p = poll_seg(m, C1, 1, T0);
    assert_int_equal(p.n, 1);
    assert_int_equal(mc_master_offload_partial(m, "d", 1, 0, 0, &d, &ready, &id),
                     0); /* nothing in */
    /* bad progress: over the size, another node, another size, a bad key */
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "d", 1, OBJ, OBJ + 1, 0),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_offload_progress(m, C2, seg_id(1), "d", 1, OBJ, 100, 0),
                     MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "d", 1, OBJ - 1, 100, 0),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "", 0, OBJ, 100, 0),
                     MC_ERR_INVALID_KEY);
    assert_int_equal(mc_master_offload_partial(m, "d", 1, 0, 0, &d, &ready, &id), 0);
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "d", 1, OBJ, 400, 0), MC_OK);
    assert_int_equal(mc_master_offload_partial(m, "d", 1, 0, 0, &d, &ready, &id), 1);
    assert_int_equal(ready, 400);
    assert_int_equal(d.kind, MC_MASTER_REPLICA_MEMORY);
    assert_int_equal(d.status, MC_MASTER_REPLICA_PROCESSING);
    assert_int_equal(d.size, OBJ);
    assert_int_equal(d.address, (1ull << 40) + p.off[0]); /* the range being loaded */
    assert_int_equal(mc_master_offload_partial(m, "d", 1, 400, 0, &d, &ready, &id),
                     0); /* has them */
    /* progress never goes back */
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "d", 1, OBJ, 200, 0), MC_OK);
    assert_int_equal(mc_master_offload_partial(m, "d", 1, 300, 0, &d, &ready, &id), 1);
    assert_int_equal(ready, 400);
    /* answered: listed as a whole, nothing partial any more */
    assert_int_equal(done(m, C1, 1, "d", MC_OK, T0 + 1), MC_OK);
    assert_int_equal(mc_master_offload_partial(m, "d", 1, 0, 0, &d, &ready, &id), 0);
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "d", 1, OBJ, 500, 0),
                     MC_ERR_OBJECT_NOT_FOUND);
    /* a load whose checksum fails: nothing partial after it, and no object */
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "bad", 3, OBJ, T0), MC_OK);
    assert_int_equal(mc_master_offload_load(m, "bad", 3, T0 + 2), MC_OK);
    assert_int_equal(poll_seg(m, C1, 1, T0 + 2).n, 1);
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "bad", 3, OBJ, 600, 0), MC_OK);
    assert_int_equal(mc_master_offload_partial(m, "bad", 3, 0, 0, &d, &ready, &id), 1);
    assert_int_equal(done(m, C1, 1, "bad", MC_ERR_CHECKSUM_MISMATCH, T0 + 3), MC_OK);
    assert_int_equal(mc_master_offload_partial(m, "bad", 3, 0, 0, &d, &ready, &id), 0);
    assert_int_equal(exists(m, "bad", T0 + 4), 0);
    mc_master_destroy(m);
}

/* Load ids: a load that timed out is void, and the next load of the key
 * (into the very same range) has another id. The slow node's late progress
 * and answer of the void load name its id: neither is taken for the new
 * load (without ids, matched on key and size, they would be: a reader
 * would copy bytes the new load had not read, and the new load would be
 * answered by the old one's word while still reading). A reader that
 * copied bytes of a load keeps them only when the copy listed is that
 * load's (mc_master_offload_loaded_by), and its partial answers start over
 * for another load. */
static void a_late_word_of_a_void_load_is_not_taken_for_the_next(void **state)
{
    (void)state;
    mc_master_t *m = load_master(0);
    mc_master_replica_desc_t d;
    uint64_t ready = 0, id = 0;
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "d", 1, OBJ, T0), MC_OK);
    assert_int_equal(mc_master_offload_load(m, "d", 1, T0), MC_OK);
    polled_t a = poll_seg(m, C1, 1, T0);
    assert_int_equal(a.n, 1);
    assert_int_not_equal(a.id[0], 0);
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "d", 1, OBJ, 300, a.id[0]),
                     MC_OK);
    assert_int_equal(mc_master_offload_partial(m, "d", 1, 0, 0, &d, &ready, &id), 1);
    assert_int_equal(id, a.id[0]);
    mc_master_tick(m, T0 + 60 * SEC); /* unanswered: void, its range freed */
    assert_int_equal(mc_master_offload_load(m, "d", 1, T0 + 61 * SEC), MC_OK);
    polled_t b = poll_seg(m, C1, 1, T0 + 61 * SEC);
    assert_int_equal(b.n, 1);
    assert_int_equal(b.off[0], a.off[0]); /* the very same range */
    assert_int_not_equal(b.id[0], a.id[0]);
    /* the old load's late word is about no load in flight */
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "d", 1, OBJ, OBJ, a.id[0]),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_offload_partial(m, "d", 1, 0, 0, &d, &ready, &id), 0);
    assert_int_equal(
        mc_master_offload_done_id(m, C1, seg_id(1), "d", 1, OBJ, MC_OK, T0 + 62 * SEC, a.id[0]),
        MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_offload_loading(m, "d", 1), 1); /* still reading */
    /* the new load's own word counts; a reader with 300 bytes of the old
     * load is given the new one from its start */
    assert_int_equal(mc_master_offload_progress(m, C1, seg_id(1), "d", 1, OBJ, 200, b.id[0]),
                     MC_OK);
    assert_int_equal(mc_master_offload_partial(m, "d", 1, 300, a.id[0], &d, &ready, &id), 1);
    assert_int_equal(ready, 200);
    assert_int_equal(id, b.id[0]);
    assert_int_equal(mc_master_offload_partial(m, "d", 1, 200, b.id[0], &d, &ready, &id), 0);
    assert_int_equal(mc_master_offload_loaded_by(m, "d", 1, b.id[0]), 0); /* not answered yet */
    assert_int_equal(
        mc_master_offload_done_id(m, C1, seg_id(1), "d", 1, OBJ, MC_OK, T0 + 62 * SEC, b.id[0]),
        MC_OK);
    assert_int_equal(mc_master_offload_loading(m, "d", 1), 0);
    /* the copy listed is the new load's: its bytes are kept, the old one's not */
    assert_int_equal(mc_master_offload_loaded_by(m, "d", 1, b.id[0]), 1);
    assert_int_equal(mc_master_offload_loaded_by(m, "d", 1, a.id[0]), 0);
    assert_int_equal(mc_master_offload_loaded_by(m, "d", 1, 0), 0);
    assert_int_equal(mc_master_offload_loaded_by(m, "x", 1, b.id[0]), 0);
    mc_master_destroy(m);
}

static void a_load_unanswered_frees_its_range(void **state)
{
    (void)state;
    mc_master_t *m = load_master(0);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "d", 1, OBJ, T0), MC_OK);
    assert_int_equal(mc_master_offload_load(m, "d", 1, T0), MC_OK);
    assert_int_equal(poll_seg(m, C1, 1, T0).n, 1);
    assert_int_equal(allocated(m), OBJ);
    mc_master_tick(m, T0 + 60 * SEC);
    assert_int_equal(allocated(m), 0);
    assert_int_equal(exists(m, "d", T0 + 60 * SEC), 1); /* still on disk: load again */
    assert_int_equal(mc_master_offload_load(m, "d", 1, T0 + 61 * SEC), MC_OK);
    assert_int_equal(poll_seg(m, C1, 1, T0 + 61 * SEC).n, 1);
    mc_master_destroy(m);
}

static void repeated_reads_promote_a_disk_object_into_dram(void **state)
{
    (void)state;
    mc_master_t *m = load_master(1);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "hot", 3, OBJ, T0), MC_OK);
    mc_master_replica_desc_t r[4];
    uint32_t n = 0;
    mc_master_key_info_t ki;
    load_once(m, "hot", MC_OK, T0 + SEC);
    assert_int_equal(mc_master_query_key(m, "hot", 3, r, 4, &n, &ki), MC_OK);
    assert_int_equal(ki.nrep, 1);
    assert_int_equal(ki.last_access_us, 0); /* read once: a staging copy, the first to go */
    mc_master_offload_stats_t os;
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.promoted_total, 0);
    /* under pressure eviction drops the staging copy: on disk only again */
    for (int i = 0; i < 5; i++) {
        char k[16];
        snprintf(k, sizeof(k), "p%d", i);
        assert_int_equal(put_obj(m, C1, k, OBJ, 1, T0 + 3 * SEC), MC_OK);
    }
    mc_master_tick(m, T0 + 4 * SEC);
    assert_int_equal(mc_master_query_key(m, "hot", 3, r, 4, &n, &ki), MC_OK);
    assert_int_equal(ki.nrep, 0);
    assert_int_equal(ki.local_disk, 1);
    poll_seg(m, C1, 1, T0 + 5 * SEC); /* the p* persist requests: left unanswered */
    /* read again: the second load promotes it (threshold 2) */
    load_once(m, "hot", MC_OK, T0 + 6 * SEC);
    assert_int_equal(mc_master_query_key(m, "hot", 3, r, 4, &n, &ki), MC_OK);
    assert_int_equal(ki.nrep, 1);
    assert_int_equal(ki.last_access_us, T0 + 6 * SEC); /* promoted: LRU as any object */
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.promoted_total, 1);
    mc_master_destroy(m);
}

/* Own reads: only the disk's own segment is told to read it itself, with
 * its LOCAL_DISK replica and no lease (a remove right after is not
 * refused); not while a load is in flight, nor once it is in memory; with
 * promotion on, the read that reaches the threshold is a load instead. */
static void a_node_reads_its_own_disk_only_objects_itself(void **state)
{
    (void)state;
    mc_master_t *m = load_master(1); /* promotion on, threshold 2 */
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "own", 3, OBJ, T0), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "gone", 4, OBJ, T0), MC_OK);
    mc_master_replica_desc_t d;
    memset(&d, 0, sizeof(d));
    /* another segment's owner: no */
    assert_int_equal(mc_master_offload_own_disk(m, "own", 3, seg_id(2), &d), 0);
    assert_int_equal(mc_master_offload_own_disk(m, "nope", 4, seg_id(1), &d), 0);
    /* its own: yes, its disk replica, nothing granted */
    assert_int_equal(mc_master_offload_own_disk(m, "gone", 4, seg_id(1), &d), 1);
    assert_int_equal(d.kind, MC_MASTER_REPLICA_LOCAL_DISK);
    assert_int_equal(d.size, OBJ);
    assert_true(mc_uuid_eq(d.segment_id, seg_id(1)));
    assert_int_equal(mc_master_remove(m, "gone", 4, 0, T0 + 1), MC_OK); /* no lease held */
    assert_int_equal(mc_master_offload_own_disk(m, "gone", 4, seg_id(1), &d), 0);
    /* read 1 of "own": its own; read 2 reaches the threshold: a load */
    assert_int_equal(mc_master_offload_own_disk(m, "own", 3, seg_id(1), &d), 1);
    assert_int_equal(mc_master_offload_own_disk(m, "own", 3, seg_id(1), &d), 0);
    assert_int_equal(mc_master_offload_load(m, "own", 3, T0 + 2), MC_OK);
    /* a load in flight: no */
    assert_int_equal(mc_master_offload_own_disk(m, "own", 3, seg_id(1), &d), 0);
    mc_master_offload_stats_t os;
    mc_master_offload_stats(m, &os);
    assert_int_equal(os.own_reads_total, 2);
    mc_master_destroy(m);
}

/* ---- journal ---- */

typedef struct sink {
    mc_buf_t buf;
    unsigned n, ldisk, drops, seg_disk;
} sink_t;

static void to_sink(void *arg, const mc_master_jrec_t *r)
{
    sink_t *k = arg;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &k->buf);
    mc_jrec_encode(&w, r);
    assert_int_equal(w.err, MC_OK);
    k->n++;
    k->ldisk += r->type == MC_JREC_LDISK;
    k->drops += r->type == MC_JREC_LDISK_DROP;
    k->seg_disk += r->type == MC_JREC_SEG_DISK;
}

static void replay(mc_master_t *m, const mc_buf_t *buf, uint64_t now)
{
    mc_mp_reader_t rd;
    mc_mp_reader_init(&rd, mc_buf_head(buf), mc_buf_used(buf));
    mc_jrec_scratch_t sc;
    while (!mc_mp_at_end(&rd)) {
        mc_master_jrec_t r;
        const char *why = NULL;
        assert_int_equal(mc_jrec_decode(&rd, &r, &sc, &why), MC_OK);
        assert_int_equal(mc_master_apply(m, &r, now), MC_OK);
    }
}

static void assert_same_listing(mc_master_t *a, mc_master_t *b, const char *key, uint64_t now)
{
    mc_master_replica_desc_t ra[4], rb[4];
    uint32_t na = 0, nb = 0;
    mc_master_key_info_t ia, ib;
    mc_status_t sa = mc_master_query_key(a, key, strlen(key), ra, 4, &na, &ia);
    mc_status_t sb = mc_master_query_key(b, key, strlen(key), rb, 4, &nb, &ib);
    (void)now;
    assert_int_equal(sa, sb);
    if (sa != MC_OK)
        return;
    assert_int_equal(na, nb);
    for (uint32_t i = 0; i < na; i++) {
        assert_int_equal(ra[i].kind, rb[i].kind);
        assert_int_equal(ra[i].address, rb[i].address);
        assert_string_equal(ra[i].segment_name, rb[i].segment_name);
    }
    assert_int_equal(ia.local_disk, ib.local_disk);
}

static void local_disk_replicas_replay_on_a_standby_and_in_a_snapshot(void **state)
{
    (void)state;
    sink_t k = {.buf = MC_BUF_INIT};
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    mc_master_set_journal(m, to_sink, &k);
    assert_int_equal(mount_seg(m, C1, 1, "n1", 10 * OBJ, T0), MC_OK);
    assert_int_equal(offload_all(m, T0), 6);
    assert_int_equal(mc_master_ldisk_report(m, C1, seg_id(1), "rep", 3, OBJ, T0 + 2 * SEC), MC_OK);
    assert_int_equal(mc_master_remove(m, "k2", 2, 0, T0 + 2 * SEC), MC_OK);
    assert_int_equal(put_obj(m, C1, "mem", OBJ, 1, T0 + 2 * SEC), MC_OK);
    assert_int_equal(k.ldisk, 7);

    mc_master_t *s = master_new_immortal();
    replay(s, &k.buf, T0 + 3 * SEC);
    const char *keys[] = {"k0", "k1", "k2", "k3", "k4", "k5", "rep", "mem"};
    for (int i = 0; i < 8; i++)
        assert_same_listing(m, s, keys[i], T0 + 3 * SEC);
    mc_master_offload_stats_t a, b;
    mc_master_offload_stats(m, &a);
    mc_master_offload_stats(s, &b);
    assert_int_equal(a.ldisk_objects, b.ldisk_objects);
    assert_int_equal(stats(m).allocated_bytes, stats(s).allocated_bytes);

    /* a snapshot of the standby rebuilds the same */
    sink_t k2 = {.buf = MC_BUF_INIT};
    mc_master_snapshot(s, to_sink, &k2);
    mc_master_t *s2 = master_new_immortal();
    replay(s2, &k2.buf, T0 + 3 * SEC);
    for (int i = 0; i < 8; i++)
        assert_same_listing(m, s2, keys[i], T0 + 3 * SEC);
    /* as a new leader it has the node load a disk-only object at once (the
     * node polls it soon), not refused as if the node did not offload */
    assert_int_equal(mc_master_offload_loading(s2, "rep", 3), 0);
    assert_int_equal(mc_master_offload_load(s2, "rep", 3, T0 + 3 * SEC), MC_OK);
    assert_int_equal(mc_master_offload_loading(s2, "rep", 3), 1);

    /* a load of a disk-only object replays as the same memory replica */
    assert_int_equal(mc_master_offload_load(m, "rep", 3, T0 + 3 * SEC), MC_OK);
    polled_t lp = poll_seg(m, C1, 1, T0 + 3 * SEC);
    assert_int_equal(lp.n - lp.del, 1); /* the LOAD (and the DELETE of k2) */
    mc_buf_reset(&k.buf);
    assert_int_equal(done(m, C1, 1, "rep", MC_OK, T0 + 3 * SEC), MC_OK);
    replay(s, &k.buf, T0 + 3 * SEC);
    assert_same_listing(m, s, "rep", T0 + 3 * SEC);
    assert_int_equal(stats(m).allocated_bytes, stats(s).allocated_bytes);

    /* the node lost a file: LDISK_DROP + DROP replay too */
    mc_buf_reset(&k.buf);
    assert_int_equal(mc_master_ldisk_drop(m, C1, seg_id(1), "k0", 2, T0 + 4 * SEC), MC_OK);
    replay(s, &k.buf, T0 + 4 * SEC);
    assert_same_listing(m, s, "k0", T0 + 4 * SEC);

    /* the codec refuses a malformed LDISK record */
    mc_buf_t b2 = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b2);
    mc_mp_write_array(&w, 4);
    mc_mp_write_uint(&w, MC_JREC_LDISK);
    mc_mp_write_bin(&w, "k", 1);
    mc_mp_write_uint(&w, 0);
    mc_proto_write_uuid(&w, seg_id(1));
    mc_mp_reader_t rd;
    mc_mp_reader_init(&rd, mc_buf_head(&b2), mc_buf_used(&b2));
    mc_jrec_scratch_t sc;
    mc_master_jrec_t r;
    const char *why = NULL;
    assert_int_equal(mc_jrec_decode(&rd, &r, &sc, &why), MC_ERR_DESERIALIZE_FAIL);
    assert_string_equal(why, "ldisk: size is 0");
    mc_buf_fini(&b2);

    mc_master_destroy(s2);
    mc_master_destroy(s);
    mc_master_destroy(m);
    mc_buf_fini(&k.buf);
    mc_buf_fini(&k2.buf);
}

/* A standby replays every DROP of an object with a LOCAL_DISK replica as a
 * DELETE for its node, so as a new leader it hands out those the old
 * leader's node had not done. Not those of keys whose node wrote a new file
 * since (a replayed LDISK record takes the DELETE back: else the new leader
 * deleted the only copy of a disk-only object), and not those queued before
 * the standby's cut-off (mc_master_offload_forget_deletions: their nodes
 * polled long since). */
static void a_new_leader_hands_out_the_deletions_the_old_ones_node_had_not_done(void **state)
{
    (void)state;
    sink_t k = {.buf = MC_BUF_INIT};
    mc_master_t *m = off_master(0, 100, 1.0, 0); /* eager: a PERSIST after each PutEnd */
    mc_master_set_journal(m, to_sink, &k);
    mount_with_files_abcd(m);
    uint64_t now = T0 + SEC;
    assert_int_equal(mc_master_remove(m, "a", 1, 0, now), MC_OK);
    assert_int_equal(poll_seg(m, C1, 1, now).del, 1);
    assert_int_equal(poll_seg(m, C1, 1, now).n, 0); /* a's DELETE done */
    mc_master_t *s = off_master(0, 100, 1.0, 0);
    replay(s, &k.buf, now);
    uint64_t cut = mc_master_offload_deletion_mark(s);
    mc_buf_reset(&k.buf);
    /* b, d removed: the old leader dies before its node polls */
    assert_int_equal(mc_master_remove(m, "b", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m, "d", 1, 0, now), MC_OK);
    polled_t p = poll_seg(m, C1, 1, now);
    assert_int_equal(p.del, 2); /* ... or its answer to this poll was lost with it */
    /* c removed, put again and persisted: its node deleted the old file and
     * wrote the new one */
    assert_int_equal(mc_master_remove(m, "c", 1, 0, now), MC_OK);
    assert_int_equal(put_obj(m, C1, "c", OBJ, 1, now), MC_OK);
    p = poll_seg(m, C1, 1, now);
    assert_int_equal(p.del, 1);
    assert_int_equal(p.persist, 1);
    assert_int_equal(done(m, C1, 1, "c", MC_OK, now), MC_OK);
    assert_int_equal(poll_seg(m, C1, 1, now).n, 0);
    replay(s, &k.buf, now);

    assert_int_equal(mc_master_offload_forget_deletions(s, cut), 1); /* a's */
    assert_int_equal(mc_master_offload_forget_deletions(s, cut), 0);
    p = poll_seg(s, C1, 1, now); /* the node's first poll of the new leader */
    assert_int_equal(p.n, 2);
    assert_int_equal(p.del, 2);
    assert_string_equal(p.key[0], "b");
    assert_string_equal(p.key[1], "d");
    assert_int_equal(poll_seg(s, C1, 1, now).n, 0);
    /* c's new file is its object's */
    assert_int_equal(exists(s, "c", now), 1);
    assert_int_equal(mc_master_ldisk_report(s, C1, seg_id(1), "c", 1, OBJ, now), MC_OK);

    /* a DELETE parked for a node that is down is never forgotten */
    assert_int_equal(mc_master_remove(s, "c", 1, 0, now), MC_OK);
    uint64_t drain = 0;
    assert_int_equal(mc_master_unmount_segment(s, C1, seg_id(1), now, &drain), MC_OK);
    assert_int_equal(mc_master_offload_forget_deletions(s, mc_master_offload_deletion_mark(s)), 0);
    assert_int_equal(mount_seg(s, C3, 3, "n1", 10 * OBJ, now), MC_OK);
    p = poll_seg(s, C3, 3, now);
    assert_int_equal(p.del, 1);
    assert_string_equal(p.key[0], "c");

    mc_master_destroy(s);
    mc_master_destroy(m);
    mc_buf_fini(&k.buf);
}

/* Master rebuilt from buf (journal records or a snapshot). */
static mc_master_t *rebuilt(const mc_buf_t *buf, uint64_t now)
{
    mc_master_t *s = off_master(1, 100, 1.0, 0);
    replay(s, buf, now);
    return s;
}

/* m leads after n1 (C1, segment 1, directory D1) went with a DELETE of a
 * not done; its node is back as n1b (C3, segment 3): it gets a's DELETE,
 * its report of a is refused, of b (not removed) taken. */
static void node_back_under_another_name_gets_a(mc_master_t *m, uint64_t now, int unmount)
{
    uint64_t drain = 0;
    if (unmount)
        assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), now, &drain), MC_OK);
    assert_int_equal(mount_seg(m, C3, 3, "n1b", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(m, C3, seg_id(3), "D1", 2), MC_OK);
    polled_t p = poll_seg(m, C3, 3, now);
    assert_int_equal(p.del, 1);
    assert_string_equal(p.key[0], "a");
    assert_int_equal(mc_master_ldisk_report(m, C3, seg_id(3), "a", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_ldisk_report(m, C3, seg_id(3), "b", 1, OBJ, now), MC_OK);
    assert_int_equal(exists(m, "a", now), 0);
    assert_int_equal(exists(m, "b", now), 1);
}

/* What a leader knows of nodes' offload directories (SEG_DISK records) and
 * of the DELETEs its nodes have not done (OFFDEL records in snapshots), a
 * standby knows too, from the journal or from a snapshot: as the new
 * leader it hands a node back under another name (a restart on another
 * port) the DELETEs of its directory, and refuses its files of removed
 * keys. Without them it matched the node by name: the removed key came
 * back with the node's report. */
static void a_standby_knows_the_nodes_directories_and_a_snapshot_their_deletions(void **state)
{
    (void)state;
    sink_t k = {.buf = MC_BUF_INIT};
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    mc_master_set_journal(m, to_sink, &k);
    mount_with_files_abcd(m);
    assert_int_equal(mc_master_offload_disk(m, C1, seg_id(1), "D1", 2), MC_OK);
    assert_int_equal(mc_master_offload_disk(m, C1, seg_id(1), "D1", 2), MC_OK);
    assert_int_equal(k.seg_disk, 1); /* said again (every poll): journaled once */
    uint64_t now = T0 + SEC;
    /* a removed; the node, frozen, does not poll; the leader dies, the node
     * is killed too and comes back on another port */
    assert_int_equal(mc_master_remove(m, "a", 1, 0, now), MC_OK);

    /* a standby that followed the journal */
    mc_master_t *s = rebuilt(&k.buf, now);
    node_back_under_another_name_gets_a(s, now, 1);
    mc_master_destroy(s);

    /* a standby started from another's snapshot: the segment's directory
     * and a's DELETE, queued for its segment */
    s = rebuilt(&k.buf, now);
    sink_t k2 = {.buf = MC_BUF_INIT};
    mc_master_snapshot(s, to_sink, &k2);
    assert_int_equal(k2.seg_disk, 1);
    mc_master_t *s2 = rebuilt(&k2.buf, now);
    mc_master_offload_stats_t st;
    mc_master_offload_stats(s2, &st);
    assert_int_equal(st.deletions, 1);
    node_back_under_another_name_gets_a(s2, now, 1);
    mc_master_destroy(s2);
    /* ... the node alive: its next poll gets it */
    s2 = rebuilt(&k2.buf, now);
    polled_t p = poll_seg(s2, C1, 1, now);
    assert_int_equal(p.del, 1);
    assert_string_equal(p.key[0], "a");
    mc_master_destroy(s2);

    /* a snapshot taken once n1 expired: a's DELETE parked by D1 */
    uint64_t drain = 0;
    assert_int_equal(mc_master_unmount_segment(s, C1, seg_id(1), now, &drain), MC_OK);
    mc_buf_reset(&k2.buf);
    mc_master_snapshot(s, to_sink, &k2);
    s2 = rebuilt(&k2.buf, now);
    /* another node named n1, of another directory, does not get it */
    const mc_uuid_t c4 = {0x44, 0x4};
    assert_int_equal(mount_seg(s2, c4, 4, "n1", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(s2, c4, seg_id(4), "D4", 2), MC_OK);
    assert_int_equal(poll_seg(s2, c4, 4, now).del, 0);
    node_back_under_another_name_gets_a(s2, now, 0);
    mc_master_destroy(s2);

    mc_master_destroy(s);
    mc_master_destroy(m);
    mc_buf_fini(&k.buf);
    mc_buf_fini(&k2.buf);
}

/* More DELETEs than the master keeps (MC_MASTER_OFFDEL_MAX, 1M by
 * default; 2 here): the one not kept marks its node, and the node's next
 * segment's report keeps only the files of objects the master knows. c
 * was removed while n1 was frozen, its DELETE not kept: without the mark
 * the node, back as n1b, brought c back with its report. The cost: d, not
 * removed but forgotten when n1 went, is refused too. After that report (a
 * poll for work) the node's files are taken again. A standby that followed
 * the journal, and one started from a snapshot, mark the node alike. */
static void a_node_whose_deletions_were_not_kept_gets_back_only_known_objects(mc_master_t *m,
                                                                              uint64_t now)
{
    const mc_uuid_t c3 = {0x33, 0x3};
    assert_int_equal(mount_seg(m, c3, 3, "n1b", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(m, c3, seg_id(3), "D1", 2), MC_OK);
    /* its start report (before any poll for work) */
    assert_int_equal(mc_master_ldisk_report(m, c3, seg_id(3), "a", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND); /* its DELETE kept */
    assert_int_equal(mc_master_ldisk_report(m, c3, seg_id(3), "c", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND); /* its DELETE lost: the mark */
    assert_int_equal(mc_master_ldisk_report(m, c3, seg_id(3), "d", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND); /* forgotten, so refused too */
    assert_int_equal(exists(m, "c", now), 0);
    assert_int_equal(exists(m, "d", now), 0);
    mc_master_offload_stats_t st;
    mc_master_offload_stats(m, &st);
    assert_int_equal(st.lost_refused_total, 2);
    /* b's DELETE (a's went with its refused report); the report is done */
    polled_t p = poll_seg(m, c3, 3, now);
    assert_int_equal(p.del, 1);
    assert_string_equal(p.key[0], "b");
    assert_int_equal(mc_master_ldisk_report(m, c3, seg_id(3), "e", 1, OBJ, now), MC_OK);
    assert_int_equal(exists(m, "e", now), 1);
}

static void deletions_not_kept_keep_removed_objects_from_coming_back(void **state)
{
    (void)state;
    setenv("MC_MASTER_OFFDEL_MAX", "2", 1);
    sink_t k = {.buf = MC_BUF_INIT};
    mc_master_t *m = off_master(1, 100, 1.0, 0);
    mc_master_set_journal(m, to_sink, &k);
    mount_with_files_abcd(m);
    assert_int_equal(mc_master_offload_disk(m, C1, seg_id(1), "D1", 2), MC_OK);
    uint64_t now = T0 + SEC;
    /* n1 frozen (no poll): a, b kept, c's DELETE not (the limit) */
    assert_int_equal(mc_master_remove(m, "a", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m, "b", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m, "c", 1, 0, now), MC_OK);
    mc_master_offload_stats_t st;
    mc_master_offload_stats(m, &st);
    assert_int_equal(st.deletions, 2);
    assert_int_equal(st.deletions_lost_total, 1);
    uint64_t drain = 0;
    assert_int_equal(mc_master_unmount_segment(m, C1, seg_id(1), now, &drain), MC_OK);

    /* a standby that followed the journal (its replay loses c's alike),
     * and one started from the leader's snapshot (an OFFLOST record) */
    mc_master_t *s = rebuilt(&k.buf, now);
    sink_t k2 = {.buf = MC_BUF_INIT};
    mc_master_snapshot(m, to_sink, &k2);
    mc_master_t *s2 = rebuilt(&k2.buf, now);
    a_node_whose_deletions_were_not_kept_gets_back_only_known_objects(s, now);
    a_node_whose_deletions_were_not_kept_gets_back_only_known_objects(s2, now);
    a_node_whose_deletions_were_not_kept_gets_back_only_known_objects(m, now);
    /* the mark was used: the node's next segment's report is taken */
    const mc_uuid_t c4 = {0x44, 0x4};
    assert_int_equal(mc_master_unmount_segment(m, (mc_uuid_t){0x33, 0x3}, seg_id(3), now, &drain),
                     MC_OK);
    assert_int_equal(mount_seg(m, c4, 4, "n1c", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(m, c4, seg_id(4), "D1", 2), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m, c4, seg_id(4), "f", 1, OBJ, now), MC_OK);

    /* a node that lost a DELETE while mounted: its own re-report keeps only
     * what the master knows too */
    mc_master_t *m2 = off_master(1, 100, 1.0, 0);
    mount_with_files_abcd(m2);
    assert_int_equal(mc_master_remove(m2, "a", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m2, "b", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m2, "c", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m2, C1, seg_id(1), "c", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_ldisk_report(m2, C1, seg_id(1), "d", 1, OBJ, now),
                     MC_OK); /* known: its own replica */
    mc_master_destroy(m2);

    /* ... and so does its node back before that segment expired (another
     * name, the same directory): d's replica moves to it, c stays gone */
    m2 = off_master(1, 100, 1.0, 0);
    mount_with_files_abcd(m2);
    assert_int_equal(mc_master_offload_disk(m2, C1, seg_id(1), "D1", 2), MC_OK);
    assert_int_equal(mc_master_remove(m2, "a", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m2, "b", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m2, "c", 1, 0, now), MC_OK);
    const mc_uuid_t c3 = {0x33, 0x3};
    assert_int_equal(mount_seg(m2, c3, 3, "n1b", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(m2, c3, seg_id(3), "D1", 2), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m2, c3, seg_id(3), "c", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_master_ldisk_report(m2, c3, seg_id(3), "d", 1, OBJ, now), MC_OK);
    assert_int_equal(exists(m2, "c", now), 0);
    assert_int_equal(exists(m2, "d", now), 1);
    mc_master_destroy(m2);

    /* ... and one that loses a DELETE after its node came back (n1b, its
     * report done) goes with the mark kept for the node's next segment:
     * n1b had reported already, so n1c's report is the one to refuse d */
    m2 = off_master(1, 100, 1.0, 0);
    mount_with_files_abcd(m2);
    assert_int_equal(mc_master_offload_disk(m2, C1, seg_id(1), "D1", 2), MC_OK);
    assert_int_equal(mount_seg(m2, c3, 3, "n1b", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(m2, c3, seg_id(3), "D1", 2), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m2, c3, seg_id(3), "a", 1, OBJ, now), MC_OK);
    poll_seg(m2, c3, 3, now); /* its report is done */
    assert_int_equal(mc_master_remove(m2, "b", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m2, "c", 1, 0, now), MC_OK);
    assert_int_equal(mc_master_remove(m2, "d", 1, 0, now), MC_OK); /* not kept */
    assert_int_equal(mc_master_unmount_segment(m2, C1, seg_id(1), now, &drain), MC_OK);
    poll_seg(m2, c3, 3, now);
    poll_seg(m2, c3, 3, now);
    assert_int_equal(mc_master_unmount_segment(m2, c3, seg_id(3), now, &drain), MC_OK);
    assert_int_equal(mount_seg(m2, c4, 4, "n1c", 10 * OBJ, now), MC_OK);
    assert_int_equal(mc_master_offload_disk(m2, c4, seg_id(4), "D1", 2), MC_OK);
    assert_int_equal(mc_master_ldisk_report(m2, c4, seg_id(4), "d", 1, OBJ, now),
                     MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(exists(m2, "d", now), 0);
    mc_master_destroy(m2);

    mc_master_destroy(s2);
    mc_master_destroy(s);
    mc_master_destroy(m);
    mc_buf_fini(&k.buf);
    mc_buf_fini(&k2.buf);
    unsetenv("MC_MASTER_OFFDEL_MAX");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eviction_asks_the_node_then_keeps_the_object_on_its_disk),
        cmocka_unit_test(without_a_polling_node_eviction_drops_as_before),
        cmocka_unit_test(requests_are_bounded_per_cycle_and_per_queue),
        cmocka_unit_test(a_nodes_answer_ends_the_eviction_backoff),
        cmocka_unit_test(a_failed_or_unanswered_offload_falls_back_to_eviction),
        cmocka_unit_test(eager_offload_after_put_end_keeps_memory),
        cmocka_unit_test(removing_hands_the_deletion_to_the_node),
        cmocka_unit_test(unmount_and_expiry_drop_the_nodes_disk_replicas),
        cmocka_unit_test(a_restarted_node_reports_its_files),
        cmocka_unit_test(a_file_of_a_key_removed_since_the_last_report_is_refused),
        cmocka_unit_test(deletions_of_a_gone_segment_wait_for_its_next_mount),
        cmocka_unit_test(a_persist_answered_ends_the_deletion_handed_out_with_it),
        cmocka_unit_test(a_node_back_while_its_old_segment_drains_gets_its_deletions),
        cmocka_unit_test(many_deletions_go_to_their_nodes_in_order),
        cmocka_unit_test(a_node_back_under_another_name_is_known_by_its_directory),
        cmocka_unit_test(a_deletion_whose_answer_was_lost_is_handed_out_again),
        cmocka_unit_test(a_node_back_before_its_segment_expired_takes_its_deletions_and_loads),
        cmocka_unit_test(a_disk_only_object_is_loaded_by_its_node_and_listed_in_memory),
        cmocka_unit_test(a_corrupt_file_is_dropped_and_never_listed),
        cmocka_unit_test(a_load_unanswered_frees_its_range),
        cmocka_unit_test(a_released_loaded_copy_makes_room_for_the_next_load),
        cmocka_unit_test(a_loaded_copy_waits_for_its_reader_before_another_load_takes_it),
        cmocka_unit_test(a_late_word_of_a_void_load_is_not_taken_for_the_next),
        cmocka_unit_test(a_load_in_flight_tells_readers_how_much_is_in),
        cmocka_unit_test(repeated_reads_promote_a_disk_object_into_dram),
        cmocka_unit_test(a_node_reads_its_own_disk_only_objects_itself),
        cmocka_unit_test(local_disk_replicas_replay_on_a_standby_and_in_a_snapshot),
        cmocka_unit_test(a_new_leader_hands_out_the_deletions_the_old_ones_node_had_not_done),
        cmocka_unit_test(a_standby_knows_the_nodes_directories_and_a_snapshot_their_deletions),
        cmocka_unit_test(deletions_not_kept_keep_removed_objects_from_coming_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
