/*
 * Node-local offload end to end: a real mooncake-master with enable_offload
 * and offload_on_evict, a real storage node (mooncake-store-server) with a
 * 16 MiB segment and an offload directory (mkdtemp), and a client in this
 * process (no segment of its own).
 *
 * Under memory pressure (48 MiB of 1 MiB objects into 16 MiB) eviction has
 * the node write objects to its disk before their memory goes, and every
 * object stays readable byte for byte (the node loads disk-only objects
 * into its segment, the client reads them from there); a node that is down
 * makes its disk replicas unavailable (not wrong); restarted, it reports
 * its files and they are readable again; a file corrupted or truncated
 * while the node was down is never returned (the truncated one is deleted
 * by the node's start scan, the corrupt one at its first read, counted by
 * the master as a failed load; a load reads a file in pieces at once and
 * a byte changed in any of them is found, while the older file format
 * still reads; a get is one GetReplicaList held until the node loaded the
 * object, and when the load outlasts that hold the reader asks
 * OFFLOAD_LOAD until it is there; a reader releases the lease of the copy
 * it read, so a node's segment need not hold a lease period of loads); a
 * second node on the same
 * directory and a node with an unwritable directory do not start; objects
 * put and evicted while a restarted node scans its directory are written,
 * not dropped; objects removed while their node is down stay removed
 * after its restart, on its port or another (its offload directory's
 * identity, kept in the directory, names it; a garbled one is made anew);
 * a node killed and back at once on another port keeps its files (its
 * report takes over its old segment's disk replicas); a node reports
 * thousands of files in a few calls; a node
 * whose segment is in hugetlb pages (segment_hugepages,
 * with and without shared memory) loads into it and serves every object,
 * and its pages are free again soon after it stops (this process lets go
 * of its mapping of the segment without asking anything of it), and with
 * too few pages free it starts on normal pages; removing
 * an object deletes its file on the node; on a full disk (a 6 MiB tmpfs,
 * when the test may mount one; skipped otherwise) the node's writes fail,
 * are counted, and those objects are evicted as without offload (puts go
 * on; no get returns other bytes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "mooncake/store.h"
#include "cluster.h"
#include "store/node_http.h"
#include "store/tier.h"
#include "test/thp.h"
#include "util/buf.h"
#include "util/time.h"

#define MIB (1ull << 20)
#define SLOW TC_SLOW
#define NOBJ 48
#define OBJ_SIZE MIB

typedef struct env {
    char dir[64];     /* mkdtemp: holds the offload directory */
    char offdir[128]; /* the node's offload directory */
    tc_master_t master;
    tc_node_t node;
    unsigned node_http;   /* the node's HTTP port (/metrics) */
    char node_extra[64];  /* one more --set for the node, or "" */
    char node_extra2[64]; /* and another */
    mc_store_t *c;
    uint8_t *val[NOBJ];
} env_t;

static env_t E;

static int start_node(env_t *e, tc_node_t *n)
{
    char master[64], od[192], hp[48];
    snprintf(od, sizeof(od), "store.offload_dir=%s", e->offdir);
    if (e->node_http == 0)
        e->node_http = test_free_port();
    snprintf(hp, sizeof(hp), "store.http_port=%u", e->node_http);
    const char *const sets[] = {"store.global_segment_size=16MiB",
                                od,
                                hp,
                                e->node_extra[0] ? e->node_extra : NULL,
                                e->node_extra[0] && e->node_extra2[0] ? e->node_extra2 : NULL,
                                NULL};
    return tc_node_start(n, tc_master_addr(&e->master, master, sizeof(master)), sets);
}

static int setup(void **state)
{
    env_t *e = &E;
    signal(SIGPIPE, SIG_IGN);
    snprintf(e->dir, sizeof(e->dir), "/tmp/mc_offload_test.XXXXXX");
    if (mkdtemp(e->dir) == NULL)
        return -1;
    snprintf(e->offdir, sizeof(e->offdir), "%.60s/node", e->dir);
    const char *const ms[] = {
        "master.enable_offload=true",   "master.offload_on_evict=true",
        "master.offload_cap_ratio=1.0", "master.client_ttl=2s",
        "master.lease_ttl=1s",          "master.eviction_high_watermark_ratio=0.6",
        "master.eviction_ratio=0.3",    NULL};
    if (tc_master_start(&e->master, ms) != 0 || start_node(e, &e->node) != 0)
        return -1;
    char master[64];
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = tc_master_addr(&e->master, master, sizeof(master));
    c.local_buffer_size = 8 * MIB;
    c.reactors = 1;
    c.rpc_timeout_us = 2000000 * SLOW;
    if (mc_store_open(&c, &e->c) != MC_OK)
        return -1;
    for (int i = 0; i < NOBJ; i++) {
        e->val[i] = malloc(OBJ_SIZE);
        if (e->val[i] == NULL)
            return -1;
        tc_fill(e->val[i], OBJ_SIZE, 1000 + (uint64_t)i);
    }
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    mc_store_close(e->c);
    tc_node_stop(&e->node, SIGTERM);
    tc_master_stop(&e->master, SIGTERM);
    for (int i = 0; i < NOBJ; i++)
        free(e->val[i]);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void key_of(int i, char *k, size_t room)
{
    snprintf(k, room, "off-%d", i);
}

static int file_exists(const env_t *e, int i)
{
    char k[32], rel[MC_TIER_REL_MAX], p[PATH_MAX];
    key_of(i, k, sizeof(k));
    mc_tier_rel_path(k, strlen(k), 0, rel);
    snprintf(p, sizeof(p), "%s/%s", e->offdir, rel);
    return access(p, F_OK) == 0;
}

static void file_path(const env_t *e, int i, char *p, size_t room)
{
    char k[32], rel[MC_TIER_REL_MAX];
    key_of(i, k, sizeof(k));
    mc_tier_rel_path(k, strlen(k), 0, rel);
    snprintf(p, room, "%s/%s", e->offdir, rel);
}

/* The pool may be full while the node writes the evicted objects: retried. */
static mc_status_t put_retry(mc_store_t *s, const char *key, const void *v, size_t len)
{
    mc_status_t st = MC_ERR_NO_AVAILABLE_HANDLE;
    for (int i = 0; i < 1000 && st == MC_ERR_NO_AVAILABLE_HANDLE; i++) {
        st = mc_store_put(s, key, strlen(key), v, len, NULL);
        if (st == MC_ERR_NO_AVAILABLE_HANDLE)
            usleep(10000);
    }
    return st;
}

/* get key i: its status; on success the bytes must be the object's. */
static int64_t get_check(env_t *e, int i)
{
    char k[32];
    key_of(i, k, sizeof(k));
    uint8_t *got = malloc(OBJ_SIZE + 16);
    assert_non_null(got);
    int64_t r = mc_store_get(e->c, k, strlen(k), got, OBJ_SIZE + 16, NULL);
    if (r >= 0) {
        assert_int_equal(r, OBJ_SIZE);
        assert_memory_equal(got, e->val[i], OBJ_SIZE); /* never other bytes */
    }
    free(got);
    return r;
}

static long long metric(const env_t *e, const char *name);
static long long node_metric(const env_t *e, const char *name);
static long file_resident(const env_t *e, int i, long *pages);

/* The test directory's file system takes O_DIRECT (tmpfs before Linux 6.6
 * does not): probed. */
static int takes_o_direct(const env_t *e)
{
    char probe[256];
    snprintf(probe, sizeof(probe), "%s/.probe", e->dir);
    int fd = open(probe, O_WRONLY | O_CREAT | O_DIRECT, 0600);
    if (fd < 0)
        return 0;
    close(fd);
    unlink(probe);
    return 1;
}

/* Until the node answered every request of the master (bounded). */
static void wait_node_answered(const env_t *e)
{
    uint64_t deadline = mc_now_ms() + 5000 * SLOW;
    while (
        (metric(e, "master_offload_queued") != 0 || metric(e, "master_offload_in_flight") != 0) &&
        mc_now_ms() < deadline)
        usleep(20000);
}

/* The reader's count of gets of disk-only objects timed at stage st
 * (mooncake_store_get_load_stage_seconds_count{stage="st"}); -1: absent. */
static long long rsample(mc_store_t *s, const char *pat)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_node_get_load_stages(s, &b);
    assert_int_equal(mc_buf_append(&b, "", 1), MC_OK); /* a string */
    const char *p = strstr((const char *)mc_buf_head(&b), pat);
    long long v = p != NULL ? atoll(p + strlen(pat)) : -1;
    mc_buf_fini(&b);
    return v;
}

static long long rstage_count(mc_store_t *s, const char *st)
{
    char pat[96];
    snprintf(pat, sizeof(pat), "mooncake_store_get_load_stage_seconds_count{stage=\"%s\"} ", st);
    return rsample(s, pat);
}

/* Bytes the reader copied from loads in flight (progressive loads). */
static long long rpartial(mc_store_t *s)
{
    return rsample(s, "\nmooncake_store_get_load_partial_bytes_total ");
}

static void eviction_under_pressure_keeps_every_object_readable(void **state)
{
    env_t *e = *state;
    for (int i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        assert_int_equal(put_retry(e->c, k, e->val[i], OBJ_SIZE), MC_OK);
    }
    int ondisk = 0;
    for (int i = 0; i < NOBJ; i++)
        ondisk += file_exists(e, i);
    /* 48 MiB through 16 MiB: most of them went to the node's disk */
    assert_true(ondisk >= NOBJ - 16);
    /* written through the page cache, synced, then dropped from it (where
     * the page cache is not the file's only copy: not on tmpfs) */
    if (takes_o_direct(e)) {
        wait_node_answered(e); /* its counts are final */
        long long written = node_metric(e, "mooncake_store_offload_written_total");
        assert_true(written >= ondisk);
        assert_int_equal(node_metric(e, "mooncake_store_offload_written_direct_total"), 0);
        struct statfs sf;
        assert_int_equal(statfs(e->dir, &sf), 0);
        if (sf.f_type != TMPFS_MAGIC) {
            long resident = 0, pages = 0;
            for (int i = 0; i < NOBJ; i++)
                if (file_exists(e, i))
                    resident += file_resident(e, i, &pages);
            assert_true(pages > 0);
            assert_true(resident * 10 < pages); /* not kept in the page cache */
        }
    }
    /* the node answered its write batches in one call each */
    assert_true(metric(e, "master_batch_offload_done_requests_total") > 0);
    assert_int_equal(metric(e, "master_batch_offload_done_failures_total"), 0);
    for (int i = 0; i < NOBJ; i++)
        assert_int_equal(get_check(e, i), OBJ_SIZE);
    /* and once more, in another order (loads evict other loads) */
    for (int i = NOBJ - 1; i >= 0; i -= 3)
        assert_int_equal(get_check(e, i), OBJ_SIZE);
    /* the reader timed those loaded gets by stage */
    assert_true(rstage_count(e->c, "held") > 0);
    /* a poll the master answered with work (PERSIST, LOAD) was followed by
     * the next at once: the pause after an early answer is for masters
     * that do not hold polls, and a LOAD asked for during it waited it out */
    assert_int_equal(node_metric(e, "mooncake_store_offload_poll_pauses_total"), 0);
}

/* A node with an offload directory reads files straight into its segment
 * with O_DIRECT: the segment is made of 2 MiB pages (MADV_COLLAPSE, Linux
 * 6.1, whatever the sysfs THP settings say but deny), so a 4 MiB read goes
 * to the device as one request, not several of scattered 4 KiB pages. */
static void an_offload_nodes_segment_is_made_of_huge_pages(void **state)
{
    env_t *e = *state;
    long size = 0, pmd = test_smaps_pmd_kb(e->node.proc.pid, NULL, "mooncake-segment", &size);
    assert_true(pmd >= 0); /* the node's segment is shared memory (store.shm on) */
    if (!test_thp_possible())
        return;
    assert_int_equal(size, 16 * 1024);
    assert_int_equal(pmd, size);
}

/* Flip byte at of object i's file (again to restore it). */
/* Pages of object i's file in the page cache (mincore); *pages += its pages. */
static long file_resident(const env_t *e, int i, long *pages)
{
    char p[512];
    file_path(e, i, p, sizeof(p));
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    size_t len = (size_t)st.st_size, np = (len + 4095) / 4096;
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(m != MAP_FAILED);
    unsigned char *v = malloc(np);
    assert_non_null(v);
    assert_int_equal(mincore(m, len, v), 0);
    long r = 0;
    for (size_t k = 0; k < np; k++)
        r += v[k] & 1;
    free(v);
    munmap(m, len);
    close(fd);
    *pages += (long)np;
    return r;
}

static void flip_byte(const env_t *e, int i, off_t at)
{
    char p[PATH_MAX];
    file_path(e, i, p, sizeof(p));
    int fd = open(p, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b = 0;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

/* Loads the node did, well or not (the master's counts). */
static long long loads_done(const env_t *e)
{
    return metric(e, "master_offload_loads_total") +
           metric(e, "master_offload_load_failures_total");
}

/* A file the node wrote is loaded without reading its header again (it
 * would often be a device read of its own): its data is checked against
 * the checksum the node wrote. So a header changed behind the node's back
 * does not stop a load (its bytes, checked, are the object's), while a
 * data byte changed does: never served, the file goes. A get is a load
 * when the master's count of loads grows (else a copy in memory served it:
 * the next file is tried, its byte put back). */
static void a_load_checks_the_data_against_what_the_node_wrote(void **state)
{
    env_t *e = *state;
    char k[32];
    int head_ok = -1, data_bad = -1;
    for (int i = 0; i < NOBJ && head_ok < 0; i++) {
        if (!file_exists(e, i))
            continue;
        long long loads = loads_done(e);
        flip_byte(e, i, 0); /* the header's magic */
        int64_t r = get_check(e, i);
        int loaded = loads_done(e) > loads;
        if (loaded) {
            assert_int_equal(r, OBJ_SIZE); /* the object's bytes */
            head_ok = i;
        }
        if (file_exists(e, i))
            flip_byte(e, i, 0); /* as it was (the restart's scan checks headers) */
    }
    assert_true(head_ok >= 0);
    long long failed = metric(e, "master_offload_load_failures_total");
    for (int i = NOBJ - 1; i >= 0 && data_bad < 0; i--) {
        if (i == head_ok || !file_exists(e, i))
            continue;
        long long loads = loads_done(e);
        key_of(i, k, sizeof(k));
        off_t at = (off_t)mc_tier_data_off(strlen(k), MC_TIER_F_ALIGNED);
        flip_byte(e, i, at + 1000);
        int64_t r = get_check(e, i); /* never other bytes */
        if (loads_done(e) > loads) {
            assert_true(r < 0);
            assert_int_equal(metric(e, "master_offload_load_failures_total"), failed + 1);
            assert_false(file_exists(e, i));
            assert_true(get_check(e, i) < 0);
            data_bad = i;
        } else {
            flip_byte(e, i, at + 1000);
        }
    }
    assert_true(data_bad >= 0);
}

static void a_restarted_node_restores_its_objects_and_never_serves_a_corrupt_file(void **state)
{
    env_t *e = *state;
    int had[NOBJ], n = 0;
    for (int i = 0; i < NOBJ; i++)
        n += had[i] = file_exists(e, i);
    assert_true(n > 2);
    assert_int_equal(tc_node_stop(&e->node, SIGTERM), 0);
    /* down: its objects are unavailable, not wrong */
    for (int i = 0; i < NOBJ; i += 7)
        assert_true(get_check(e, i) < 0);

    /* corrupt one file's data, truncate another's */
    int bad = -1, cut = -1;
    for (int i = 0; i < NOBJ && (bad < 0 || cut < 0); i++) {
        if (!had[i])
            continue;
        if (bad < 0)
            bad = i;
        else
            cut = i;
    }
    flip_byte(e, bad, 4096);
    char p[PATH_MAX];
    file_path(e, cut, p, sizeof(p));
    assert_int_equal(truncate(p, 100000), 0);

    assert_int_equal(start_node(e, &e->node), 0);
    uint64_t deadline = mc_now_ms() + 10000 * SLOW;
    int ok = 0;
    while (mc_now_ms() < deadline) {
        ok = 0;
        for (int i = 0; i < NOBJ; i++)
            if (had[i] && i != bad && i != cut && get_check(e, i) == OBJ_SIZE)
                ok++;
        if (ok == n - 2)
            break;
        usleep(100000);
    }
    assert_int_equal(ok, n - 2); /* every intact file is an object again */
    /* the cut file was dropped by the node's scan: never reported, deleted */
    assert_false(file_exists(e, cut));
    assert_true(get_check(e, cut) < 0);
    /* the corrupt one is found by its checksum on the first read: the read
     * fails, the master counts it and drops the replica, the file goes */
    long long failed = metric(e, "master_offload_load_failures_total");
    assert_true(get_check(e, bad) < 0);
    assert_int_equal(metric(e, "master_offload_load_failures_total"), failed + 1);
    assert_true(get_check(e, bad) < 0);
    assert_false(file_exists(e, bad)); /* never served later either */
}

static void remove_deletes_the_file_on_the_node(void **state)
{
    env_t *e = *state;
    int i = 0;
    while (i < NOBJ && !file_exists(e, i))
        i++;
    assert_true(i < NOBJ);
    char k[32];
    key_of(i, k, sizeof(k));
    assert_int_equal(mc_store_remove(e->c, k, strlen(k), 0), MC_OK);
    uint64_t deadline = mc_now_ms() + 3000 * SLOW;
    while (file_exists(e, i) && mc_now_ms() < deadline)
        usleep(5000);
    assert_false(file_exists(e, i));
}

/* A load reads a file as several pieces at once and hashes each as it comes
 * in (store/client_offload.c): a byte changed in any piece (the first, the
 * middle ones, the last whole one, the unaligned tail) is found before the
 * load is answered, the object is never returned and its file goes; an
 * intact file of the same shape, and a file of the older format (data not
 * aligned: read through the page cache), are read byte for byte. The files
 * are written here while the node is down; it reports them at start.
 * Progressive loads (this node is started with MC_OFFLOAD_PROGRESS=1):
 * the node tells the master what is read before the checksum is checked,
 * and waits 300 ms before checking it ($MC_OFFLOAD_VERIFY_DELAY_US), so the
 * reader surely copies every load's bytes while it is in flight (counted):
 * the corrupt ones still fail. */
/* read O_DIRECT: 6 pieces of 512 KiB (client_offload.c's OFFLOAD_PIECE_MIN)
 * and a 100-byte tail; where the file system refuses O_DIRECT: 7 pieces
 * of 440 KiB, no tail (every byte below is still in some piece) */
#define PC_SIZE (3 * MIB + 100)
#define PC_PIECE (512 * 1024)
static void a_corrupt_byte_in_any_piece_of_a_load_is_never_served(void **state)
{
    env_t *e = *state;
    /* where the byte is changed, in the data: each of the 6 pieces, then
     * the tail */
    static const uint64_t bad_at[] = {
        10,          PC_PIECE + 5, 2 * PC_PIECE + 7, 3 * PC_PIECE + 9, 4 * PC_PIECE + 11,
        3 * MIB - 1, 3 * MIB + 50};
    enum { NBAD = sizeof(bad_at) / sizeof(bad_at[0]), NPC = NBAD + 2 }; /* + intact + old format */
    uint8_t *val = malloc(PC_SIZE), *got = malloc(PC_SIZE);
    assert_non_null(val);
    assert_non_null(got);
    assert_int_equal(tc_node_stop(&e->node, SIGTERM), 0);
    for (int i = 0; i < NPC; i++) {
        char k[32], rel[MC_TIER_REL_MAX], p[PATH_MAX];
        snprintf(k, sizeof(k), "pc-%d", i);
        tc_fill(val, PC_SIZE, 5000 + (uint64_t)i);
        struct iovec v = {val, PC_SIZE};
        unsigned flags = i == NPC - 1 ? 0 : MC_TIER_F_ALIGNED; /* the last: older format */
        assert_int_equal(mc_tier_write_flags(e->offdir, k, strlen(k), &v, 1, PC_SIZE, 0, flags),
                         MC_OK);
        if (i >= NBAD)
            continue;
        mc_tier_rel_path(k, strlen(k), 0, rel);
        snprintf(p, sizeof(p), "%s/%s", e->offdir, rel);
        int fd = open(p, O_RDWR);
        assert_true(fd >= 0);
        off_t at = (off_t)(mc_tier_data_off(strlen(k), flags) + bad_at[i]);
        uint8_t b = 0;
        assert_int_equal(pread(fd, &b, 1, at), 1);
        b ^= 0x21;
        assert_int_equal(pwrite(fd, &b, 1, at), 1);
        close(fd);
    }
    char delay[32];
    snprintf(delay, sizeof(delay), "%d", 300000 * SLOW);
    assert_int_equal(setenv("MC_OFFLOAD_VERIFY_DELAY_US", delay, 1), 0);
    assert_int_equal(setenv("MC_OFFLOAD_PROGRESS", "1", 1), 0);
    int started = start_node(e, &e->node);
    unsetenv("MC_OFFLOAD_VERIFY_DELAY_US");
    unsetenv("MC_OFFLOAD_PROGRESS");
    assert_int_equal(started, 0);
    long long failed0 = metric(e, "master_offload_load_failures_total");
    long long part0 = rpartial(e->c);
    assert_true(part0 >= 0);
    long long loads0 = metric(e, "master_offload_load_requests_total");
    long long held0 = rstage_count(e->c, "held"), xfer0 = rstage_count(e->c, "transfer");
    assert_true(held0 >= 0 && xfer0 >= 0);
    /* the intact ones, once the node reported its files */
    for (int i = NBAD; i < NPC; i++) {
        char k[32];
        snprintf(k, sizeof(k), "pc-%d", i);
        uint64_t deadline = mc_now_ms() + 10000 * SLOW;
        int64_t r;
        while ((r = mc_store_get(e->c, k, strlen(k), got, PC_SIZE, NULL)) != (int64_t)PC_SIZE &&
               mc_now_ms() < deadline)
            usleep(50000);
        assert_int_equal(r, PC_SIZE);
        tc_fill(val, PC_SIZE, 5000 + (uint64_t)i);
        assert_memory_equal(got, val, PC_SIZE);
    }
    /* the reader timed each of those loaded gets by stage (the master held
     * its call, then the bytes were copied out of the node's segment) */
    assert_int_equal(rstage_count(e->c, "held"), held0 + (NPC - NBAD));
    assert_int_equal(rstage_count(e->c, "transfer"), xfer0 + (NPC - NBAD));
    /* their bytes were copied while their loads were in flight (the node
     * waits before its checksum check) */
    long long part1 = rpartial(e->c);
    assert_true(part1 > part0);
    assert_true(part1 <= part0 + (long long)(NPC - NBAD) * (long long)PC_SIZE);
    part0 = part1;
    /* every corrupt one: the load fails (counted), never other bytes; the
     * file is deleted and the object gone */
    for (int i = 0; i < NBAD; i++) {
        char k[32];
        snprintf(k, sizeof(k), "pc-%d", i);
        memset(got, 0, PC_SIZE);
        assert_true(mc_store_get(e->c, k, strlen(k), got, PC_SIZE, NULL) < 0);
        assert_true(mc_store_get(e->c, k, strlen(k), got, PC_SIZE, NULL) < 0);
        char rel[MC_TIER_REL_MAX], p[PATH_MAX];
        mc_tier_rel_path(k, strlen(k), 0, rel);
        snprintf(p, sizeof(p), "%s/%s", e->offdir, rel);
        assert_int_not_equal(access(p, F_OK), 0);
    }
    assert_int_equal(metric(e, "master_offload_load_failures_total"), failed0 + NBAD);
    /* failed gets are not timed; their bytes were copied while their loads
     * were in flight, and not one was returned */
    assert_int_equal(rstage_count(e->c, "held"), held0 + (NPC - NBAD));
    assert_true(rpartial(e->c) > part0);
    /* each get was one GetReplicaList, held by the master until the node
     * had some of the object in (or failed), then an OFFLOAD_LOAD (held
     * again) after each copy of what was in: at most one per piece and one
     * more, never a loop */
    long long asks = metric(e, "master_offload_load_requests_total") - loads0;
    assert_true(asks >= 0 && asks <= (NPC - NBAD + 2 * NBAD) * 6);
    free(val);
    free(got);
}

typedef struct aget {
    atomic_int done;
    int64_t res;
} aget_t;

static void aget_cb(void *arg, int64_t res)
{
    aget_t *a = arg;
    a->res = res;
    atomic_store(&a->done, 1);
}

/* A load slower than the reader's held GetReplicaList (held up to its
 * WAIT_US, half the reader's rpc_timeout): at that deadline the list is
 * answered with the disk replica alone and the reader asks OFFLOAD_LOAD
 * (held again, as often as needed) until the node has loaded it; the get
 * then returns the object. The node is stopped (SIGSTOP) for 700 ms, over
 * three of those waits (well under the master's client_ttl). The node runs
 * without progressive loads (MC_OFFLOAD_PROGRESS=0): the old path. */
static void a_load_slower_than_the_held_list_is_asked_for_again(void **state)
{
    env_t *e = *state;
    const char *k = "slow-0";
    assert_int_equal(tc_node_stop(&e->node, SIGTERM), 0);
    struct iovec v = {e->val[0], OBJ_SIZE};
    assert_int_equal(
        mc_tier_write_flags(e->offdir, k, strlen(k), &v, 1, OBJ_SIZE, 0, MC_TIER_F_ALIGNED), MC_OK);
    /* and without progressive loads (MC_OFFLOAD_PROGRESS=0): the reader
     * copies the object after the load's answer, as before them */
    assert_int_equal(setenv("MC_OFFLOAD_PROGRESS", "0", 1), 0);
    int started = start_node(e, &e->node);
    unsetenv("MC_OFFLOAD_PROGRESS");
    assert_int_equal(started, 0);
    uint64_t deadline = mc_now_ms() + 10000 * SLOW;
    while (mc_store_exist(e->c, k, strlen(k)) != 1 && mc_now_ms() < deadline)
        usleep(20000); /* the node reports its files */
    assert_int_equal(mc_store_exist(e->c, k, strlen(k)), 1);

    char master[64];
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = tc_master_addr(&e->master, master, sizeof(master));
    c.local_buffer_size = 8 * MIB;
    c.reactors = 1;
    c.rpc_timeout_us = 400000; /* the master holds a call for a load up to 200 ms */
    mc_store_t *c2 = NULL;
    assert_int_equal(mc_store_open(&c, &c2), MC_OK);
    long long loads0 = metric(e, "master_offload_load_requests_total");
    uint8_t *got = malloc(OBJ_SIZE);
    assert_non_null(got);
    aget_t a = {.res = 0};
    atomic_init(&a.done, 0);
    assert_int_equal(kill(e->node.proc.pid, SIGSTOP), 0);
    mc_status_t st = mc_store_get_async(c2, k, strlen(k), got, OBJ_SIZE, aget_cb, &a);
    assert_true(st == MC_OK || st == MC_INPROGRESS);
    usleep(700000);
    assert_int_equal(kill(e->node.proc.pid, SIGCONT), 0);
    deadline = mc_now_ms() + 10000 * SLOW;
    while (!atomic_load(&a.done) && mc_now_ms() < deadline)
        usleep(10000);
    assert_true(atomic_load(&a.done));
    assert_int_equal(a.res, OBJ_SIZE);
    assert_memory_equal(got, e->val[0], OBJ_SIZE);
    /* the list's hold ran out while the node was stopped: asked again */
    assert_true(metric(e, "master_offload_load_requests_total") > loads0);
    /* the node told nothing early: every byte was copied after the answer */
    assert_int_equal(rpartial(c2), 0);
    assert_int_equal(rstage_count(c2, "transfer"), 1);
    mc_store_close(c2);
    free(got);
}

/* A loaded copy is its node's staging area, read once: its reader releases
 * the copy's lease as soon as it copied it, so the node's segment need not
 * hold a lease period of loads. A master of its own with a 60 s lease and a
 * node with a 16 MiB segment: 48 MiB put (most of it goes to the disk),
 * then every disk-only object read once in a row, well over 16 MiB of
 * loads: each load finds room (the copies read before it may go). With
 * every copy leased to its TTL, the load after the segment filled would
 * wait a minute and its get fail after the reader's transfer timeout. */
static void read_loaded_copies_go_at_once_not_after_their_lease(void **state)
{
    env_t *e = *state;
    char dir[64], od[192], addr[64];
    snprintf(dir, sizeof(dir), "/tmp/mc_offload_rel.XXXXXX");
    assert_non_null(mkdtemp(dir));
    tc_master_t m;
    tc_node_t n;
    memset(&m, 0, sizeof(m));
    memset(&n, 0, sizeof(n));
    const char *const ms[] = {
        "master.enable_offload=true",   "master.offload_on_evict=true",
        "master.offload_cap_ratio=1.0", "master.client_ttl=2s",
        "master.lease_ttl=60s",         "master.eviction_high_watermark_ratio=0.6",
        "master.eviction_ratio=0.3",    NULL};
    assert_int_equal(tc_master_start(&m, ms), 0);
    snprintf(od, sizeof(od), "store.offload_dir=%s/node", dir);
    const char *const ns[] = {"store.global_segment_size=16MiB", od, NULL};
    assert_int_equal(tc_node_start(&n, tc_master_addr(&m, addr, sizeof(addr)), ns), 0);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = addr;
    c.local_buffer_size = 8 * MIB;
    c.reactors = 1;
    c.rpc_timeout_us = 2000000 * SLOW;
    c.transfer_timeout_us = 5000000 * SLOW; /* a load waiting for a lease gives up then */
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_open(&c, &s), MC_OK);
    char k[32], rel[MC_TIER_REL_MAX], p[PATH_MAX];
    for (int i = 0; i < NOBJ; i++) {
        snprintf(k, sizeof(k), "rel-%d", i);
        assert_int_equal(put_retry(s, k, e->val[i], OBJ_SIZE), MC_OK);
    }
    /* offload_on_evict: an object with a file had its memory freed (spilled) */
    int ondisk[NOBJ], nd = 0;
    for (int i = 0; i < NOBJ; i++) {
        snprintf(k, sizeof(k), "rel-%d", i);
        mc_tier_rel_path(k, strlen(k), 0, rel);
        snprintf(p, sizeof(p), "%s/node/%s", dir, rel);
        nd += ondisk[i] = access(p, F_OK) == 0;
    }
    uint8_t *got = malloc(OBJ_SIZE);
    int64_t bad = 0; /* the first get that failed or returned other bytes (its status) */
    int bad_at = -1;
    for (int i = 0; i < NOBJ && got != NULL && bad_at < 0 && nd >= 24; i++) {
        if (!ondisk[i])
            continue;
        snprintf(k, sizeof(k), "rel-%d", i);
        int64_t r = mc_store_get(s, k, strlen(k), got, OBJ_SIZE, NULL);
        if (r != OBJ_SIZE || memcmp(got, e->val[i], OBJ_SIZE) != 0) {
            bad = r;
            bad_at = i;
        }
    }
    free(got);
    mc_store_close(s);
    tc_node_stop(&n, SIGTERM);
    tc_master_stop(&m, SIGTERM);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    assert_true(nd >= 24); /* half again the segment's 16 MiB went to the disk */
    if (bad_at >= 0)
        fail_msg("get of rel-%d: %lld (%s)", bad_at, (long long)bad,
                 bad < 0 ? mc_status_str((mc_status_t)bad) : "other bytes");
}

static void a_shared_or_unwritable_directory_stops_the_node(void **state)
{
    env_t *e = *state;
    tc_node_t second;
    memset(&second, 0, sizeof(second));
    /* the same directory as the running node: its lock refuses */
    assert_int_not_equal(start_node(e, &second), 0);
    /* a directory that cannot be made */
    char saved[128];
    snprintf(saved, sizeof(saved), "%s", e->offdir);
    snprintf(e->offdir, sizeof(e->offdir), "/proc/mc_offload_nope");
    assert_int_not_equal(start_node(e, &second), 0);
    snprintf(e->offdir, sizeof(e->offdir), "%s", saved);
}

static long long metric_at(unsigned port, const char *name)
{
    char *body = NULL;
    if (tc_http_get(port, "/metrics", &body, 3000) != 200 || body == NULL) {
        free(body);
        return -1;
    }
    long long v = -1;
    size_t nl = strlen(name);
    for (char *p = body; p != NULL && *p != '\0'; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, nl) == 0 && p[nl] == ' ') {
            v = atoll(p + nl + 1);
            break;
        }
    free(body);
    return v;
}

static long long metric(const env_t *e, const char *name)
{
    return metric_at(e->master.http_port, name);
}

static long long node_metric(const env_t *e, const char *name)
{
    return metric_at(e->node_http, name);
}

/* A full disk (a small tmpfs, when this test may mount one): the node's
 * writes fail, the master counts them and evicts those objects as without
 * offload; puts go on, and no get returns other bytes. */
static void a_full_disk_refuses_offload_and_evicts_as_before(void **state)
{
    env_t *e = *state;
    char mnt[128], cmd[256];
    snprintf(mnt, sizeof(mnt), "%.60s/full", e->dir);
    assert_int_equal(mkdir(mnt, 0700), 0);
    snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=6m tmpfs '%s' 2>/dev/null", mnt);
    if (geteuid() != 0 || system(cmd) != 0) {
        fprintf(stderr, "store_offload_test: cannot mount a tmpfs here (not root): "
                        "the full-disk case is skipped\n");
        skip();
    }
    char saved[128];
    snprintf(saved, sizeof(saved), "%s", e->offdir);
    snprintf(e->offdir, sizeof(e->offdir), "%.100s/node", mnt);
    assert_int_equal(tc_node_stop(&e->node, SIGTERM), 0); /* the only node: on the small disk */
    tc_node_t full;
    memset(&full, 0, sizeof(full));
    int started = start_node(e, &full);
    long long failed0 = metric(e, "master_offload_failed_total");
    for (int i = 0; i < 32 && started == 0; i++) {
        char k[32];
        snprintf(k, sizeof(k), "full-%d", i);
        assert_int_equal(put_retry(e->c, k, e->val[i % NOBJ], OBJ_SIZE), MC_OK);
    }
    long long failed = metric(e, "master_offload_failed_total");
    int served = 0, gone = 0;
    for (int i = 0; i < 32 && started == 0; i++) {
        char k[32];
        snprintf(k, sizeof(k), "full-%d", i);
        uint8_t *got = malloc(OBJ_SIZE);
        assert_non_null(got);
        int64_t r = mc_store_get(e->c, k, strlen(k), got, OBJ_SIZE, NULL);
        if (r == OBJ_SIZE) {
            assert_memory_equal(got, e->val[i % NOBJ], OBJ_SIZE);
            served++;
        } else {
            assert_int_equal(r, MC_ERR_OBJECT_NOT_FOUND); /* evicted as without offload */
            gone++;
        }
        free(got);
    }
    if (started == 0)
        tc_node_stop(&full, SIGTERM);
    snprintf(cmd, sizeof(cmd), "umount '%s'", mnt);
    assert_int_equal(system(cmd), 0);
    snprintf(e->offdir, sizeof(e->offdir), "%s", saved);
    assert_int_equal(started, 0);
    assert_true(failed > failed0); /* counted */
    assert_true(gone > 0);         /* the disk could not hold 32 MiB */
    assert_true(served > 0);       /* what it held, and memory, still served */
}

/* Put n objects PREFIX/i (the values of val[i]). */
static void put_all(env_t *e, const char *prefix, int n)
{
    for (int i = 0; i < n; i++) {
        char k[32];
        snprintf(k, sizeof(k), "%s/%d", prefix, i);
        assert_int_equal(put_retry(e->c, k, e->val[i], OBJ_SIZE), MC_OK);
    }
}

/* Get every object PREFIX/i back: each must be val[i], byte for byte. */
static void get_all(env_t *e, const char *prefix, int n)
{
    uint8_t *got = malloc(OBJ_SIZE);
    assert_non_null(got);
    for (int i = 0; i < n; i++) {
        char k[32];
        snprintf(k, sizeof(k), "%s/%d", prefix, i);
        assert_int_equal(mc_store_get(e->c, k, strlen(k), got, OBJ_SIZE, NULL), OBJ_SIZE);
        assert_memory_equal(got, e->val[i], OBJ_SIZE);
    }
    free(got);
}

/* offload_direct_writes: the node writes with O_DIRECT straight from its
 * segment (where the file system allows it), and every object reads back. */
static void direct_writes_go_straight_from_the_segment(void **state)
{
    env_t *e = *state;
    tc_node_stop(&e->node, SIGTERM); /* running or not (the test before may have stopped it) */
    snprintf(e->node_extra, sizeof(e->node_extra), "store.offload_direct_writes=true");
    assert_int_equal(start_node(e, &e->node), 0);
    long long w0 = node_metric(e, "mooncake_store_offload_written_total");
    long long d0 = node_metric(e, "mooncake_store_offload_written_direct_total");
    put_all(e, "dw", NOBJ);
    wait_node_answered(e);
    long long w = node_metric(e, "mooncake_store_offload_written_total") - w0;
    long long d = node_metric(e, "mooncake_store_offload_written_direct_total") - d0;
    assert_true(w >= NOBJ - 16); /* 48 MiB through 16 MiB */
    if (takes_o_direct(e))
        assert_int_equal(d, w);
    get_all(e, "dw", NOBJ);
    e->node_extra[0] = '\0';
}

/* A node that restarts scans its directory and reports every file before
 * its first held poll (a while, on a directory of many files: here 0.8 s,
 * MC_OFFLOAD_REPORT_DELAY_US); objects put meanwhile and evicted are still
 * written to its disk, not dropped: the node tells the master it offloads
 * before the scan. */
static void objects_evicted_while_a_restarted_node_reports_are_written(void **state)
{
    env_t *e = *state;
    tc_node_stop(&e->node, SIGTERM);
    char delay[32];
    snprintf(delay, sizeof(delay), "%d", 800000 * SLOW);
    setenv("MC_OFFLOAD_REPORT_DELAY_US", delay, 1);
    int started = start_node(e, &e->node);
    unsetenv("MC_OFFLOAD_REPORT_DELAY_US");
    assert_int_equal(started, 0);
    long long w0 = node_metric(e, "mooncake_store_offload_written_total");
    uint64_t t0 = mc_now_ms();
    put_all(e, "rs", NOBJ); /* 48 MiB into 16: evictions from the start */
    uint64_t t_put = mc_now_ms() - t0;
    wait_node_answered(e);
    get_all(e, "rs", NOBJ);
    assert_true(node_metric(e, "mooncake_store_offload_written_total") - w0 >= NOBJ - 16);
    assert_true(t_put >= 300); /* the puts waited for the writes: they ran while it scanned */
}

static int key_file_exists(const env_t *e, const char *k)
{
    char rel[MC_TIER_REL_MAX], p[PATH_MAX];
    mc_tier_rel_path(k, strlen(k), 0, rel);
    snprintf(p, sizeof(p), "%s/%s", e->offdir, rel);
    return access(p, F_OK) == 0;
}

/* Until mc_store_exist(k) is want (bounded): its last answer. */
static int exist_wait(env_t *e, const char *k, int want)
{
    uint64_t deadline = mc_now_ms() + 10000 * SLOW;
    int x;
    while ((x = mc_store_exist(e->c, k, strlen(k))) != want && mc_now_ms() < deadline)
        usleep(50000);
    return x;
}

/* Objects only on a node's disk, removed while the node is down (killed:
 * its segment is listed until it expires), stay removed: the master keeps
 * their DELETEs past the node's expiry for the next segment of its name
 * (the node restarted with its port, as a deployment's fixed store.port),
 * which refuses the restarted node's reports of them; their files go, and
 * the node's other objects come back. */
static void removed_while_down(env_t *e, int same_port)
{
    unsigned port = (unsigned)test_free_port();
    snprintf(e->node_extra, sizeof(e->node_extra), "store.port=%u", port);
    snprintf(e->node_extra2, sizeof(e->node_extra2), "store.local_hostname=127.0.0.1:%u", port);
    tc_node_stop(&e->node, SIGTERM);
    assert_int_equal(start_node(e, &e->node), 0);
    const char *pre = same_port ? "rd" : "rn";
    put_all(e, pre, NOBJ); /* 48 MiB into 16: the first ones go to disk */
    wait_node_answered(e);
    char rm[2][32], keep[2][32];
    int nrm = 0, nkeep = 0;
    for (int i = 0; i < NOBJ && nkeep < 2; i++) {
        char k[32];
        snprintf(k, sizeof(k), "%s/%d", pre, i);
        if (!key_file_exists(e, k))
            continue;
        if (nrm < 2)
            snprintf(rm[nrm++], sizeof(rm[0]), "%s", k);
        else
            snprintf(keep[nkeep++], sizeof(keep[0]), "%s", k);
    }
    assert_int_equal(nkeep, 2);
    tc_node_stop(&e->node, SIGKILL);
    for (int i = 0; i < 2; i++)
        assert_int_equal(mc_store_remove(e->c, rm[i], strlen(rm[i]), 0), MC_OK);
    assert_int_equal(exist_wait(e, keep[0], 0), 0); /* the node expired */
    if (!same_port)
        e->node_extra[0] = e->node_extra2[0] = '\0'; /* any free port: another name */
    assert_int_equal(start_node(e, &e->node), 0);
    assert_int_equal(exist_wait(e, keep[0], 1), 1); /* reported */
    assert_int_equal(exist_wait(e, keep[1], 1), 1);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(mc_store_exist(e->c, rm[i], strlen(rm[i])), 0);
        assert_false(key_file_exists(e, rm[i]));
    }
    uint8_t *got = malloc(OBJ_SIZE);
    assert_non_null(got);
    int i = atoi(keep[0] + 3); /* after "rd/" or "rn/" */
    assert_int_equal(mc_store_get(e->c, keep[0], strlen(keep[0]), got, OBJ_SIZE, NULL), OBJ_SIZE);
    assert_memory_equal(got, e->val[i], OBJ_SIZE);
    free(got);
    e->node_extra[0] = e->node_extra2[0] = '\0';
}

static void objects_removed_while_their_node_is_down_stay_removed(void **state)
{
    removed_while_down(*state, 1);
}

/* The same, the node back on another port (the default: any free one), so
 * under another segment name: the master knows it by its directory's
 * identity (its polls say it), and keeps the DELETEs for it. */
static void objects_removed_while_their_node_is_down_stay_removed_under_another_name(void **state)
{
    removed_while_down(*state, 0);
}

/* The directory's identity file, 32 hex digits and a newline: kept across
 * restarts; garbled, a new one is made; unreadable (here a directory in
 * its place), the node starts without one: each time it starts and
 * works. */
static void read_disk_id(const env_t *e, char *out, size_t room)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/.disk_id", e->offdir);
    FILE *f = fopen(p, "r");
    out[0] = '\0';
    if (f != NULL) {
        size_t n = fread(out, 1, room - 1, f);
        out[n] = '\0';
        fclose(f);
    }
}

static void the_directory_keeps_its_identity_and_a_garbled_one_is_made_anew(void **state)
{
    env_t *e = *state;
    char id0[64], id1[64], p[PATH_MAX];
    read_disk_id(e, id0, sizeof(id0));
    assert_int_equal(strlen(id0), 33);
    assert_int_equal(strspn(id0, "0123456789abcdef"), 32);
    tc_node_stop(&e->node, SIGTERM);
    assert_int_equal(start_node(e, &e->node), 0);
    read_disk_id(e, id1, sizeof(id1));
    assert_string_equal(id1, id0);
    tc_node_stop(&e->node, SIGTERM);
    snprintf(p, sizeof(p), "%s/.disk_id", e->offdir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("not an identity\n", f);
    fclose(f);
    assert_int_equal(start_node(e, &e->node), 0);
    read_disk_id(e, id1, sizeof(id1));
    assert_int_equal(strlen(id1), 33);
    assert_int_equal(strspn(id1, "0123456789abcdef"), 32);
    assert_string_not_equal(id1, id0);
    put_all(e, "id", 2);
    get_all(e, "id", 2);
    tc_node_stop(&e->node, SIGTERM);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkdir(p, 0700), 0);
    assert_int_equal(start_node(e, &e->node), 0);
    put_all(e, "id2", 2);
    get_all(e, "id2", 2);
    tc_node_stop(&e->node, SIGTERM);
    assert_int_equal(rmdir(p), 0);
    assert_int_equal(start_node(e, &e->node), 0); /* with one again, for the tests after */
    read_disk_id(e, id1, sizeof(id1));
    assert_int_equal(strlen(id1), 33);
}

/* A node killed and back at once on another port (the default), its last
 * segment still mounted (its client not expired yet): its report takes
 * over that segment's LOCAL_DISK replicas (the same directory, so the same
 * files). Before, each was refused as an existing object's, the node
 * deleted the file, and the objects went when the old segment expired. */
static void a_node_back_before_its_old_segment_expired_keeps_its_files(void **state)
{
    env_t *e = *state;
    tc_node_stop(&e->node, SIGTERM); /* running or not (the test before may have stopped it) */
    assert_int_equal(start_node(e, &e->node), 0);
    put_all(e, "qb", NOBJ); /* 48 MiB into 16: the first ones go to disk */
    wait_node_answered(e);
    int had[NOBJ], n = 0;
    for (int i = 0; i < NOBJ; i++) {
        char k[32];
        snprintf(k, sizeof(k), "qb/%d", i);
        n += had[i] = key_file_exists(e, k);
    }
    assert_true(n > 2);
    long long segs = metric(e, "master_segment_count");
    long long over0 = metric(e, "master_offload_taken_over_total");
    tc_node_stop(&e->node, SIGKILL);
    assert_int_equal(start_node(e, &e->node), 0);
    uint64_t deadline = mc_now_ms() + 10000 * SLOW;
    while (node_metric(e, "mooncake_store_offload_reported_total") +
                   node_metric(e, "mooncake_store_offload_report_refused_total") <
               n &&
           mc_now_ms() < deadline)
        usleep(20000);
    assert_int_equal(node_metric(e, "mooncake_store_offload_report_refused_total"), 0);
    /* these and the other tests' files (the directory holds them all) */
    assert_true(metric(e, "master_offload_taken_over_total") - over0 >= n);
    while (metric(e, "master_segment_count") >= segs + 1 && mc_now_ms() < deadline)
        usleep(50000); /* the old segment expires */
    assert_int_equal(metric(e, "master_segment_count"), segs);
    uint8_t *got = malloc(OBJ_SIZE);
    assert_non_null(got);
    for (int i = 0; i < NOBJ; i++) {
        if (!had[i])
            continue;
        char k[32];
        snprintf(k, sizeof(k), "qb/%d", i);
        assert_true(key_file_exists(e, k));
        assert_int_equal(mc_store_get(e->c, k, strlen(k), got, OBJ_SIZE, NULL), OBJ_SIZE);
        assert_memory_equal(got, e->val[i], OBJ_SIZE);
    }
    free(got);
}

/* A node's start report goes to the master a batch of files per call (a
 * call per file: 1.4 s for 10,000 files here, while PERSIST requests wait
 * for it). 2500 small files written while the node is down (three
 * batches) are objects again after its start, each readable byte for
 * byte, reported in as many calls as batches; and again, a call per file,
 * as a node does with a master that lacks the batch call. */
#define MANY 2500
#define MANY_SIZE 4096

static void a_node_reports_thousands_of_files_in_few_calls(void **state)
{
    env_t *e = *state;
    assert_int_equal(tc_node_stop(&e->node, SIGTERM), 0);
    uint8_t *val = malloc(MANY_SIZE), *got = malloc(MANY_SIZE);
    char(*names)[16] = calloc(MANY, sizeof(*names));
    mc_slice_t *keys = calloc(MANY, sizeof(*keys));
    int *ex = calloc(MANY, sizeof(*ex));
    mc_tier_wfile_t *w = malloc(sizeof(*w));
    assert_true(val != NULL && got != NULL && names != NULL && keys != NULL && ex != NULL &&
                w != NULL);
    for (int i = 0; i < MANY; i++) {
        int kl = snprintf(names[i], sizeof(names[i]), "many-%d", i);
        keys[i] = (mc_slice_t){names[i], (size_t)kl};
        tc_fill(val, MANY_SIZE, 9000 + (uint64_t)i);
        struct iovec v = {val, MANY_SIZE};
        assert_int_equal(
            mc_tier_wopen(e->offdir, names[i], (size_t)kl, &v, 1, MANY_SIZE, MC_TIER_F_ALIGNED, w),
            MC_OK);
        assert_int_equal(mc_tier_wcommit(w, 0, 0), MC_OK); /* not synced: the node reads them */
    }
    assert_int_equal(start_node(e, &e->node), 0);
    uint64_t deadline = mc_now_ms() + 10000 * SLOW;
    while (node_metric(e, "mooncake_store_offload_reported_total") < MANY && mc_now_ms() < deadline)
        usleep(20000);
    long long reported = node_metric(e, "mooncake_store_offload_reported_total");
    long long calls = node_metric(e, "mooncake_store_offload_report_calls_total");
    assert_true(reported >= MANY); /* and the earlier tests' files */
    assert_true(calls >= 1);
    assert_true(calls <= (reported + 1023) / 1024); /* 1024 short keys a call */
    assert_int_equal(node_metric(e, "mooncake_store_offload_report_refused_total"), 0);
    assert_int_equal(mc_store_batch_exist(e->c, keys, MANY, ex), MC_OK);
    for (int i = 0; i < MANY; i++)
        assert_int_equal(ex[i], 1);
    for (int i = 0; i < MANY; i += 97) {
        memset(got, 0, MANY_SIZE);
        assert_int_equal(mc_store_get(e->c, names[i], keys[i].len, got, MANY_SIZE, NULL),
                         MANY_SIZE);
        tc_fill(val, MANY_SIZE, 9000 + (uint64_t)i);
        assert_memory_equal(got, val, MANY_SIZE);
    }
    /* a call per file, as to a master without the batch call
     * (MC_OFFLOAD_REPORT_BATCH=0): the same objects */
    tc_node_stop(&e->node, SIGTERM);
    setenv("MC_OFFLOAD_REPORT_BATCH", "0", 1);
    int started = start_node(e, &e->node);
    unsetenv("MC_OFFLOAD_REPORT_BATCH");
    assert_int_equal(started, 0);
    deadline = mc_now_ms() + 20000 * SLOW;
    while (node_metric(e, "mooncake_store_offload_reported_total") < reported &&
           mc_now_ms() < deadline)
        usleep(20000);
    assert_int_equal(node_metric(e, "mooncake_store_offload_reported_total"), reported);
    assert_int_equal(node_metric(e, "mooncake_store_offload_report_calls_total"), reported);
    assert_int_equal(mc_store_batch_exist(e->c, keys, MANY, ex), MC_OK);
    for (int i = 0; i < MANY; i++)
        assert_int_equal(ex[i], 1);
    memset(got, 0, MANY_SIZE);
    assert_int_equal(mc_store_get(e->c, names[7], keys[7].len, got, MANY_SIZE, NULL), MANY_SIZE);
    tc_fill(val, MANY_SIZE, 9000 + 7);
    assert_memory_equal(got, val, MANY_SIZE);
    free(w);
    free(ex);
    free(keys);
    free(names);
    free(got);
    free(val);
}

/* The 2 MiB pool (what segment_hugepages asks for, whatever the system's
 * default size): its FILE under /sys/kernel/mm/hugepages/hugepages-2048kB
 * (nr_hugepages, free_hugepages, resv_hugepages), -1 when absent. */
#define HUGE_2M_DIR "/sys/kernel/mm/hugepages/hugepages-2048kB/"

static long huge_read(const char *file)
{
    char p[128];
    snprintf(p, sizeof(p), HUGE_2M_DIR "%s", file);
    FILE *f = fopen(p, "r");
    long n = -1;
    if (f != NULL) {
        if (fscanf(f, "%ld", &n) != 1)
            n = -1;
        fclose(f);
    }
    return n;
}

/* 2 MiB pages the pool can still give (free less reserved), -1: unknown. */
static long huge_avail(void)
{
    long fr = huge_read("free_hugepages"), rs = huge_read("resv_hugepages");
    return fr >= 0 && rs >= 0 ? fr - rs : -1;
}

static long huge_pool(void)
{
    return huge_read("nr_hugepages");
}

/* The pool's size set to n: 0 when it took. */
static int huge_pool_set(long n)
{
    FILE *f = fopen(HUGE_2M_DIR "nr_hugepages", "w");
    if (f == NULL)
        return -1;
    int ok = fprintf(f, "%ld\n", n) > 0;
    ok = fclose(f) == 0 && ok;
    return ok ? 0 : -1;
}

static long huge_pool0 = -1; /* the pool's size before the test grew it */

/* The test's teardown: the pool as it was, whether the test passed or not. */
static int huge_pool_restore(void **state)
{
    (void)state;
    int rc = huge_pool0 >= 0 && huge_pool() != huge_pool0 ? huge_pool_set(huge_pool0) : 0;
    huge_pool0 = -1;
    return rc;
}

/* segment_hugepages: with the pages free, the node's 16 MiB segment takes
 * 8 of them (with shared memory, and without: MAP_HUGETLB), its loads land
 * there and every object reads back byte for byte; with too few free (a
 * segment larger than the pool has free) it starts on normal pages (taking
 * none) and serves the same. The pool is grown for the test when it may be
 * (root) and too small, and put back (the teardown checks it took). */
/* The stopped nodes' pages are free again (at least free0) within 5 s: this
 * process lets go of its mapping of a node's shared segment within a second
 * or so of the node's exit (the shm transport's sweep), though it asks
 * nothing of it. 1: they are. */
static int pages_back(long free0)
{
    uint64_t by = mc_now_ms() + 5000 * SLOW;
    while (huge_avail() < free0 && mc_now_ms() < by)
        usleep(50000);
    return huge_avail() >= free0;
}

/* Wait until the node's start report of the directory's files (thousands,
 * from the tests before) is done: until then the PERSISTs of the objects
 * later puts evict wait, time out, and the objects are dropped. */
static int wait_reported(env_t *e)
{
    uint64_t until = mc_now_ms() + 20000 * SLOW;
    while (node_metric(e, "mooncake_store_offload_report_seconds_count") < 1 && mc_now_ms() < until)
        usleep(20000);
    return node_metric(e, "mooncake_store_offload_report_seconds_count") >= 1;
}

static void a_hugetlb_segment_serves_loads_and_too_few_pages_fall_back(void **state)
{
    env_t *e = *state;
    const long need = 16 / 2; /* the node's segment, in 2 MiB pages */
    const long want = need + 2;
    long pool0 = huge_pool0 = huge_pool();
    if (huge_avail() < want && pool0 >= 0)
        huge_pool_set(pool0 + want - huge_avail());
    long avail = huge_avail();
    int have = avail >= want;
    if (!have)
        fprintf(stderr, "  (no %ld hugetlb pages: the fallback part only)\n", want);
    long free0 = huge_avail();
    static const char *const modes[] = {"store.segment_hugepages=true", "store.shm=off"};
    long took[2] = {-1, -1}, loads[2] = {0, 0};
    int back = 1;
    for (int m = 0; have && m < 2; m++) {
        tc_node_stop(&e->node, SIGTERM);
        back &= pages_back(free0); /* (the last node's, before this one takes its own) */
        long a0 = huge_avail();
        snprintf(e->node_extra, sizeof(e->node_extra), "%s", modes[0]);
        if (m == 1) /* without shared memory: MAP_HUGETLB */
            snprintf(e->node_extra2, sizeof(e->node_extra2), "%s", modes[1]);
        assert_int_equal(start_node(e, &e->node), 0);
        took[m] = a0 - huge_avail();
        assert_true(wait_reported(e));
        char pre[16];
        snprintf(pre, sizeof(pre), "hp%d", m);
        long long l0 = loads_done(e);
        put_all(e, pre, NOBJ);
        wait_node_answered(e);
        get_all(e, pre, NOBJ);
        loads[m] = loads_done(e) - l0;
        e->node_extra2[0] = '\0';
    }
    /* too few: a segment larger than the pool has free (the pool is left
     * as it is: its other pages may be someone else's) */
    tc_node_stop(&e->node, SIGTERM);
    back &= !have || pages_back(free0);
    long a1 = huge_avail();
    /* (with overcommit, surplus pages would cover the rest) */
    int few = a1 >= 0 && a1 <= 64 && huge_read("nr_overcommit_hugepages") == 0;
    long seg_mib = few && (a1 + 1) * 2 > 16 ? (a1 + 1) * 2 : 16;
    snprintf(e->node_extra, sizeof(e->node_extra), "store.segment_hugepages=true");
    snprintf(e->node_extra2, sizeof(e->node_extra2), "store.global_segment_size=%ldMiB", seg_mib);
    int started = start_node(e, &e->node);
    long took_few = a1 - huge_avail();
    /* normal pages made into transparent huge pages instead */
    long few_size = 0, few_pmd = started == 0 ? test_smaps_pmd_kb(e->node.proc.pid, NULL,
                                                                  "mooncake-segment", &few_size)
                                              : -1;
    int reported = started == 0 && wait_reported(e);
    if (reported) {
        put_all(e, "hpf", NOBJ);
        wait_node_answered(e);
        get_all(e, "hpf", NOBJ);
    }
    e->node_extra2[0] = '\0';
    e->node_extra[0] = '\0';
    tc_node_stop(&e->node, SIGTERM);
    if (pool0 >= 0 && huge_pool() != pool0)
        huge_pool_set(pool0); /* put back before any check fails */
    assert_int_equal(start_node(e, &e->node), 0);
    assert_int_equal(started, 0);
    assert_true(reported);
    assert_true(back);
    if (few)
        assert_int_equal(took_few, 0); /* normal pages: none taken */
    if (few && test_thp_possible()) {
        assert_int_equal(few_size, seg_mib * 1024);
        assert_int_equal(few_pmd, few_size);
    }
    for (int m = 0; have && m < 2; m++) {
        assert_true(took[m] >= need); /* the segment's pages */
        assert_true(loads[m] > 0);    /* gets of disk-only objects: loads into it */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eviction_under_pressure_keeps_every_object_readable),
        cmocka_unit_test(an_offload_nodes_segment_is_made_of_huge_pages),
        cmocka_unit_test(a_load_checks_the_data_against_what_the_node_wrote),
        cmocka_unit_test(a_restarted_node_restores_its_objects_and_never_serves_a_corrupt_file),
        cmocka_unit_test(remove_deletes_the_file_on_the_node),
        cmocka_unit_test(a_corrupt_byte_in_any_piece_of_a_load_is_never_served),
        cmocka_unit_test(a_load_slower_than_the_held_list_is_asked_for_again),
        cmocka_unit_test(read_loaded_copies_go_at_once_not_after_their_lease),
        cmocka_unit_test(a_shared_or_unwritable_directory_stops_the_node),
        cmocka_unit_test(a_full_disk_refuses_offload_and_evicts_as_before),
        cmocka_unit_test(direct_writes_go_straight_from_the_segment),
        cmocka_unit_test(objects_evicted_while_a_restarted_node_reports_are_written),
        cmocka_unit_test(objects_removed_while_their_node_is_down_stay_removed),
        cmocka_unit_test(objects_removed_while_their_node_is_down_stay_removed_under_another_name),
        cmocka_unit_test(a_node_back_before_its_old_segment_expired_keeps_its_files),
        cmocka_unit_test(the_directory_keeps_its_identity_and_a_garbled_one_is_made_anew),
        cmocka_unit_test(a_node_reports_thousands_of_files_in_few_calls),
        cmocka_unit_test_teardown(a_hugetlb_segment_serves_loads_and_too_few_pages_fall_back,
                                  huge_pool_restore),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
