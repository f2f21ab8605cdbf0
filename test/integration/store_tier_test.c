/*
 * The persistent tier end to end: a real mooncake-master with root_fs_dir (a
 * mkdtemp directory) and cluster_id "tc", one real storage node with a small
 * segment (16 MiB, so eviction runs), and clients in this process.
 *
 * An eager put's file exists when the put returns and the master lists a
 * DISK replica (an eager put whose file cannot be written fails and is
 * revoked; an async one stays in memory only); async puts reach disk shortly after and a closing
 * client drains its queue; objects evicted from memory are served from their files byte for byte;
 * keys such as ../x, a/b, /etc/passwd, a 4096-byte key, a binary key and keys differing in case
 * land in distinct files inside the tier directory (the names on disk are checked); a restarted
 * master rebuilds its DISK replicas from the files and the objects stay readable; a corrupt file is
 * a clear error (CHECKSUM_MISMATCH) and is not served; remove deletes the file (the master does,
 * shortly after); a get whose memory replica cannot be read (its node killed) reads the file; a
 * master with a tier quota removes disk-only objects (and their files) until the tier fits; bad
 * tier settings stop the master with the key named.
 *
 * With HA (a real redis-server, two masters sharing the tier): objects
 * evicted down to their files on the leader, the leader SIGKILLed, the new
 * leader lists the same DISK replicas, serves every object with its bytes
 * (from memory or from the file, never from space the old leader reused),
 * keeps disk objects when it evicts, and a remove deletes the file; a
 * restarted master follows as a standby without scanning, and scans when it
 * takes over (a file no master knew of becomes an object; the file of an
 * object removed just before the failover is deleted, not restored).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <assert.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "mooncake/store.h"
#include "cluster.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/ha_redis.h"
#include "store/master_client.h"
#include "store/tier.h"
#include "util/time.h"

#define MIB (1ull << 20)
#define SLOW TC_SLOW
#define CLUSTER "tc"

typedef struct env {
    char parent[64];   /* a mkdtemp directory holding root: "../x" from root lands here */
    char root[96];     /* root_fs_dir */
    char tierdir[256]; /* root/cluster */
    tc_master_t master;
    tc_node_t node;
    mc_store_t *eager, *async;
    const char *master_extra; /* one more "--set" for the next master start */
} env_t;

static env_t E;

static int start_master(env_t *e)
{
    char root[128];
    snprintf(root, sizeof(root), "server.root_fs_dir=%s", e->root);
    const char *const sets[] = {root,
                                "server.cluster_id=" CLUSTER,
                                "server.persist=async",
                                "master.client_ttl=3s",
                                "master.lease_ttl=1s",
                                "master.eviction_high_watermark_ratio=0.7",
                                "master.eviction_ratio=0.3",
                                e->master_extra,
                                NULL};
    return tc_master_start(&e->master, sets);
}

static int start_node(env_t *e)
{
    char master[64];
    const char *const sets[] = {"store.global_segment_size=16MiB", NULL};
    return tc_node_start(&e->node, tc_master_addr(&e->master, master, sizeof(master)), sets);
}

static mc_store_t *open_client(env_t *e, const char *persist, uint64_t queue_bytes)
{
    char master[64];
    tc_master_addr(&e->master, master, sizeof(master));
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.local_buffer_size = 8 * MIB;
    c.reactors = 1;
    c.rpc_timeout_us = 2000000 * SLOW;
    c.persist = persist;
    c.tier_queue_bytes = queue_bytes;
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_open(&c, &s), MC_OK);
    return s;
}

static int setup(void **state)
{
    env_t *e = &E;
    signal(SIGPIPE, SIG_IGN);
    snprintf(e->parent, sizeof(e->parent), "/tmp/mc_tier_test.XXXXXX");
    if (mkdtemp(e->parent) == NULL)
        return -1;
    snprintf(e->root, sizeof(e->root), "%.64s/root", e->parent);
    if (mkdir(e->root, 0755) != 0)
        return -1;
    snprintf(e->tierdir, sizeof(e->tierdir), "%.96s/%s", e->root, CLUSTER);
    if (start_master(e) != 0 || start_node(e) != 0)
        return -1;
    e->eager = open_client(e, "eager", 0);
    e->async = open_client(e, NULL, 0); /* the master's: async */
    *state = e;
    return 0;
}

static void ha_cleanup(void);

static int teardown(void **state)
{
    env_t *e = *state;
    ha_cleanup(); /* what a failed HA test left running */
    mc_store_close(e->eager);
    mc_store_close(e->async);
    tc_node_stop(&e->node, SIGTERM);
    tc_master_stop(&e->master, SIGTERM);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->parent);
    return system(cmd) == 0 ? 0 : -1;
}

/* --------------------------------------------------------------- helpers */

static void file_of(const env_t *e, const void *key, size_t klen, char *out, size_t room)
{
    char rel[MC_TIER_REL_MAX];
    mc_tier_rel_path(key, klen, 0, rel);
    snprintf(out, room, "%s/%s", e->tierdir, rel);
}

static int file_exists(const env_t *e, const void *key, size_t klen)
{
    char p[PATH_MAX];
    file_of(e, key, klen, p, sizeof(p));
    return access(p, F_OK) == 0;
}

/* Wait until the key's file exists (want 1) or not (0): 1 if it did in time. */
static int wait_file(const env_t *e, const void *key, size_t klen, int want)
{
    uint64_t deadline = mc_now_ms() + 3000 * SLOW;
    while (file_exists(e, key, klen) != want) {
        if (mc_now_ms() > deadline)
            return 0;
        usleep(5000);
    }
    return 1;
}

/* Replicas of key: how many memory ones and whether there is a DISK one. */
static void replicas(mc_store_t *s, const void *key, size_t klen, uint32_t *mem, int *disk)
{
    mc_store_replica_t r[8];
    uint32_t n = 0;
    assert_int_equal(mc_store_query(s, key, klen, r, 8, &n), MC_OK);
    *mem = 0;
    *disk = 0;
    for (uint32_t i = 0; i < n && i < 8; i++) {
        if (r[i].disk)
            (*disk)++;
        else
            (*mem)++;
    }
}

/* A put that may find the pool full for a moment (eviction runs on the
 * master's tick) or no segment yet (a node re-mounting after a master
 * restart): retried for a while. */
static mc_status_t put_retry(mc_store_t *s, const void *key, size_t klen, const void *v, size_t len)
{
    mc_status_t st = MC_ERR_NO_AVAILABLE_HANDLE;
    for (int i = 0; i < 500 && st == MC_ERR_NO_AVAILABLE_HANDLE; i++) {
        st = mc_store_put(s, key, klen, v, len, NULL);
        if (st == MC_ERR_NO_AVAILABLE_HANDLE)
            usleep(20000);
    }
    return st;
}

static void get_equals(mc_store_t *s, const void *key, size_t klen, const uint8_t *want, size_t len)
{
    uint8_t *got = malloc(len + 16);
    assert_non_null(got);
    assert_int_equal(mc_store_get(s, key, klen, got, len + 16, NULL), (int64_t)len);
    assert_memory_equal(got, want, len);
    free(got);
}

/* ----------------------------------------------------------------- tests */

static void an_eager_put_is_on_disk_when_it_returns(void **state)
{
    env_t *e = *state;
    uint8_t v[70000];
    tc_fill(v, sizeof(v), 1);
    assert_int_equal(mc_store_put(e->eager, "eager/1", 7, v, sizeof(v), NULL), MC_OK);
    assert_true(file_exists(e, "eager/1", 7)); /* no waiting: eager */
    uint32_t mem;
    int disk;
    replicas(e->eager, "eager/1", 7, &mem, &disk);
    assert_int_equal(mem, 1);
    assert_int_equal(disk, 1);
    get_equals(e->async, "eager/1", 7, v, sizeof(v));
}

static void an_eager_put_whose_file_cannot_be_written_fails_and_leaves_nothing(void **state)
{
    env_t *e = *state;
    /* a key whose first fan-out directory does not exist yet: a plain file
     * there makes its directory impossible to create */
    char key[32], rel[MC_TIER_REL_MAX], block[PATH_MAX];
    for (int i = 0;; i++) {
        snprintf(key, sizeof(key), "nodir/%d", i);
        mc_tier_rel_path(key, strlen(key), 0, rel);
        snprintf(block, sizeof(block), "%s/%.2s", e->tierdir, rel);
        if (access(block, F_OK) != 0)
            break;
    }
    FILE *f = fopen(block, "w");
    assert_non_null(f);
    fclose(f);
    uint8_t v[1000];
    tc_fill(v, sizeof(v), 3);
    /* eager: the put fails with the file error and is revoked */
    assert_int_equal(mc_store_put(e->eager, key, strlen(key), v, sizeof(v), NULL),
                     MC_ERR_FILE_WRITE_FAIL);
    assert_int_equal(mc_store_exist(e->async, key, strlen(key)), 0);
    /* async: the put succeeds in memory; the file is best effort */
    assert_int_equal(mc_store_put(e->async, key, strlen(key), v, sizeof(v), NULL), MC_OK);
    usleep(200000);
    uint32_t mem;
    int disk;
    replicas(e->async, key, strlen(key), &mem, &disk);
    assert_int_equal(mem, 1);
    assert_int_equal(disk, 0);
    get_equals(e->eager, key, strlen(key), v, sizeof(v));
    assert_int_equal(mc_store_remove(e->async, key, strlen(key), 1), MC_OK);
    assert_int_equal(unlink(block), 0);
}

static void async_puts_reach_disk_after_returning_and_close_drains_them(void **state)
{
    env_t *e = *state;
    uint8_t v[50000];
    tc_fill(v, sizeof(v), 2);
    assert_int_equal(mc_store_put(e->async, "async/1", 7, v, sizeof(v), NULL), MC_OK);
    assert_true(wait_file(e, "async/1", 7, 1));
    /* the master learns of the file from the client's TierAdd, after the put */
    uint32_t mem = 0;
    int disk = 0;
    uint64_t deadline = mc_now_ms() + 3000 * SLOW;
    while (disk == 0 && mc_now_ms() < deadline) {
        replicas(e->async, "async/1", 7, &mem, &disk);
        usleep(5000);
    }
    assert_int_equal(disk, 1);

    /* a client with a one-byte queue: the puts after the first wait for
     * their own write; closing right after the puts drains the rest */
    mc_store_t *c = open_client(e, "async", 1);
    char key[32];
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "drain/%d", i);
        tc_fill(v, sizeof(v), 100 + (uint64_t)i);
        assert_int_equal(mc_store_put(c, key, strlen(key), v, sizeof(v), NULL), MC_OK);
    }
    mc_store_close(c);
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "drain/%d", i);
        assert_true(file_exists(e, key, strlen(key)));
    }
}

/* Put, remove and put again, from one client, async: the two file writes of
 * the key are queued back to back and the tier has two worker threads. The
 * second put's file must be the one left (a late rename of the first would
 * put its bytes, or here its size, under the live object). */
static void the_last_put_of_a_key_leaves_its_file_not_an_earlier_one(void **state)
{
    env_t *e = *state;
    enum { TRIALS = 30, A = 256 * 1024, B = 256 * 1024 + 4096 };
    mc_store_t *c = open_client(e, "async", 64u << 20);
    uint8_t *va = malloc(A), *vb = malloc(B), *got = malloc(B + 16);
    assert_true(va != NULL && vb != NULL && got != NULL);
    char key[32];
    for (int i = 0; i < TRIALS; i++) {
        snprintf(key, sizeof(key), "order/%d", i);
        tc_fill(va, A, 300 + (uint64_t)i);
        tc_fill(vb, B, 600 + (uint64_t)i);
        assert_int_equal(put_retry(c, key, strlen(key), va, A), MC_OK);
        assert_int_equal(mc_store_remove(c, key, strlen(key), 1), MC_OK);
        assert_int_equal(put_retry(c, key, strlen(key), vb, B), MC_OK);
    }
    mc_store_close(c); /* drains the writes */
    for (int i = 0; i < TRIALS; i++) {
        snprintf(key, sizeof(key), "order/%d", i);
        tc_fill(vb, B, 600 + (uint64_t)i);
        uint64_t n = 0;
        assert_int_equal(mc_tier_read(e->tierdir, key, strlen(key), got, B + 16, B, &n), MC_OK);
        assert_int_equal(n, B);
        assert_memory_equal(got, vb, B);
        assert_int_equal(mc_store_remove(e->async, key, strlen(key), 1), MC_OK);
    }
    free(va);
    free(vb);
    free(got);
}

static void objects_evicted_from_memory_are_served_from_their_files(void **state)
{
    env_t *e = *state;
    enum { N = 40 }; /* 40 MiB through a 16 MiB segment */
    uint8_t *v = malloc(MIB);
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "evict/%d", i);
        tc_fill(v, MIB, 1000 + (uint64_t)i);
        assert_int_equal(put_retry(e->eager, key, strlen(key), v, MIB), MC_OK);
    }
    int disk_only = 0;
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "evict/%d", i);
        assert_int_equal(mc_store_exist(e->async, key, strlen(key)), 1);
        uint32_t mem;
        int disk;
        replicas(e->async, key, strlen(key), &mem, &disk);
        assert_int_equal(disk, 1);
        if (mem == 0)
            disk_only++;
        tc_fill(v, MIB, 1000 + (uint64_t)i);
        get_equals(e->async, key, strlen(key), v, MIB);
    }
    print_message("%d of %d objects were only on disk\n", disk_only, N);
    assert_true(disk_only >= N - 16);
    /* a batch get reads them too (disk-only keys through single gets) */
    mc_slice_t keys[4], bufs[4];
    char kb[4][32];
    int64_t res[4];
    for (int i = 0; i < 4; i++) {
        snprintf(kb[i], sizeof(kb[i]), "evict/%d", i);
        keys[i] = (mc_slice_t){kb[i], strlen(kb[i])};
        bufs[i] = (mc_slice_t){malloc(MIB), MIB};
    }
    assert_int_equal(mc_store_batch_get(e->async, keys, bufs, 4, res), MC_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(res[i], (int64_t)MIB);
        tc_fill(v, MIB, 1000 + (uint64_t)i);
        assert_memory_equal(bufs[i].ptr, v, MIB);
        free(bufs[i].ptr);
    }
    free(v);
}

/* every regular file under the tier directory */
static struct {
    int n;
    char names[32][300];
    int outside;
} walk;
static char walk_root[300];

static int walk_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag != FTW_F)
        return 0;
    if (strncmp(path, walk_root, strlen(walk_root)) != 0)
        walk.outside++;
    const char *base = strrchr(path, '/') + 1;
    if (walk.n < 32)
        snprintf(walk.names[walk.n], sizeof(walk.names[0]), "%s", base);
    walk.n++;
    return 0;
}

static void hostile_keys_map_to_safe_distinct_files_inside_the_directory(void **state)
{
    env_t *e = *state;
    /* a fresh cluster directory would need a new master: use a prefix and
     * count only files created here, by name */
    static char longkey[4096], binkey[255];
    memset(longkey, 'L', sizeof(longkey));
    memcpy(longkey, "long/../", 8);
    for (int i = 0; i < 255; i++)
        binkey[i] = (char)(i + 1); /* every byte but NUL, '/' and '.' included */
    struct {
        const char *k;
        size_t len;
    } keys[] = {
        {"../x", 4},
        {"a/b", 3},
        {"a_b", 3},
        {"/etc/passwd", 11},
        {"..", 2},
        {".", 1},
        {longkey, sizeof(longkey)},
        {binkey, sizeof(binkey)},
        {"Case", 4},
        {"case", 4},
        {"CASE", 4},
    };
    size_t nk = sizeof(keys) / sizeof(keys[0]);
    uint8_t v[1000];
    for (size_t i = 0; i < nk; i++) {
        tc_fill(v, sizeof(v), 5000 + i);
        assert_int_equal(mc_store_put(e->eager, keys[i].k, keys[i].len, v, sizeof(v), NULL), MC_OK);
    }
    /* nothing escaped: no file next to the cluster directory or above it */
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/x", e->root);
    assert_int_equal(access(p, F_OK), -1);
    snprintf(p, sizeof(p), "%s/x", e->parent);
    assert_int_equal(access(p, F_OK), -1);
    /* every key's file is where the naming rule puts it, with a safe name */
    char seen[16][300];
    for (size_t i = 0; i < nk; i++) {
        file_of(e, keys[i].k, keys[i].len, p, sizeof(p));
        struct stat sb;
        assert_int_equal(stat(p, &sb), 0);
        assert_true(S_ISREG(sb.st_mode));
        assert_true(strncmp(p, e->tierdir, strlen(e->tierdir)) == 0);
        const char *base = strrchr(p, '/') + 1;
        assert_true(strlen(base) <= 255);
        assert_true(base[0] != '.');
        /* two levels of two hex digits, then the name: no other '/' */
        const char *rel = p + strlen(e->tierdir) + 1;
        assert_int_equal(rel[2], '/');
        assert_int_equal(rel[5], '/');
        assert_null(strchr(rel + 6, '/'));
        snprintf(seen[i], sizeof(seen[i]), "%s", rel);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(seen[i], seen[j]);
        tc_fill(v, sizeof(v), 5000 + i);
        get_equals(e->async, keys[i].k, keys[i].len, v, sizeof(v));
    }
    print_message("names: %s | %s | %s | %s\n", seen[0], seen[1], seen[3], seen[6]);
    /* and the walk of the whole directory finds them, nothing outside */
    memset(&walk, 0, sizeof(walk));
    snprintf(walk_root, sizeof(walk_root), "%s/", e->tierdir);
    assert_int_equal(nftw(e->tierdir, walk_cb, 16, FTW_PHYS), 0);
    assert_int_equal(walk.outside, 0);
    for (size_t i = 0; i < nk; i++) {
        const char *base = strrchr(seen[i], '/') + 1;
        int found = 0;
        for (int j = 0; j < walk.n && j < 32; j++)
            found += strcmp(walk.names[j], base) == 0;
        if (walk.n <= 32)
            assert_int_equal(found, 1);
    }
}

/* The value of a metric line "name V" on /metrics at http_port, or -1. */
static long long metric_at(unsigned http_port, const char *name)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)http_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    const char *rq = "GET /metrics HTTP/1.0\r\n\r\n";
    assert_int_equal(write(fd, rq, strlen(rq)), (ssize_t)strlen(rq));
    static char body[1 << 18];
    size_t n = 0;
    ssize_t r;
    while (n + 1 < sizeof(body) && (r = read(fd, body + n, sizeof(body) - 1 - n)) > 0)
        n += (size_t)r;
    body[n] = '\0';
    close(fd);
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = strstr(body, pat);
    return p != NULL ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* The value of a metric line "name V" on the master's /metrics, or -1. */
static long long metric(const env_t *e, const char *name)
{
    return metric_at(e->master.http_port, name);
}

/* Output of `mooncake-cli ARGS` against the test's master (exit 0 asserted). */
static void cli_out(const env_t *e, const char *args, char *out, size_t room)
{
    char bin[256], cmd[768];
    snprintf(cmd, sizeof(cmd), "timeout 20 %s --master 127.0.0.1:%u %s 2>&1",
             test_prog("mooncake-cli", bin, sizeof(bin)), e->master.rpc_port, args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, room - 1, f);
    out[n] = '\0';
    int status = pclose(f);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        print_message("%s: %s\n", cmd, out);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void a_restarted_master_serves_objects_from_their_files(void **state)
{
    env_t *e = *state;
    uint8_t v[70000];
    tc_fill(v, sizeof(v), 7);
    assert_int_equal(mc_store_put(e->eager, "restart/1", 9, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(tc_master_stop(&e->master, SIGTERM) >= 0, 1);
    assert_int_equal(start_master(e), 0);
    /* the object is back, with only its DISK replica (memory is gone) */
    uint64_t deadline = mc_now_ms() + 10000 * SLOW;
    int ex = -1;
    while (mc_now_ms() < deadline && (ex = mc_store_exist(e->async, "restart/1", 9)) != 1)
        usleep(50000);
    assert_int_equal(ex, 1);
    uint32_t mem;
    int disk;
    replicas(e->async, "restart/1", 9, &mem, &disk);
    assert_int_equal(mem, 0);
    assert_int_equal(disk, 1);
    get_equals(e->async, "restart/1", 9, v, sizeof(v));
    /* the restart is visible in the master's metrics */
    assert_true(metric(e, "master_tier_restored_objects") > 10);
    assert_int_equal(metric(e, "master_tier_scan_skipped_files"), 0);
    /* mooncake-cli shows the DISK replica: stat, and ls (memory count "+D") */
    char out[4096];
    cli_out(e, "stat restart/1", out, sizeof(out));
    assert_non_null(strstr(out, "DISK (tier file)"));
    cli_out(e, "ls --regex ^restart/", out, sizeof(out));
    assert_non_null(strstr(out, "0+D"));
    /* so is every object written before (hostile keys included) */
    assert_int_equal(mc_store_exist(e->async, "../x", 4), 1);
    assert_int_equal(mc_store_exist(e->async, "eager/1", 7), 1);
    uint8_t w[70000];
    tc_fill(w, 70000, 1);
    get_equals(e->async, "eager/1", 7, w, sizeof(w));
    /* a new put of a restored key is refused: it exists */
    assert_int_equal(mc_store_put(e->eager, "restart/1", 9, v, 10, NULL),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    /* puts work again once the node has re-mounted its segment */
    assert_int_equal(put_retry(e->eager, "restart/2", 9, v, 100), MC_OK);
}

static void a_corrupt_file_is_a_clear_error_and_not_served(void **state)
{
    env_t *e = *state;
    /* restart/1 is only on disk since the restart */
    char p[PATH_MAX];
    file_of(e, "restart/1", 9, p, sizeof(p));
    int fd = open(p, O_RDWR);
    assert_true(fd >= 0);
    char c;
    assert_int_equal(pread(fd, &c, 1, 30000), 1);
    c ^= 0x5a;
    assert_int_equal(pwrite(fd, &c, 1, 30000), 1);
    close(fd);
    uint8_t buf[70000];
    assert_int_equal(mc_store_get(e->async, "restart/1", 9, buf, sizeof(buf), NULL),
                     MC_ERR_CHECKSUM_MISMATCH);
    /* a header cut short too */
    assert_int_equal(truncate(p, 20), 0);
    assert_int_equal(mc_store_get(e->async, "restart/1", 9, buf, sizeof(buf), NULL),
                     MC_ERR_CHECKSUM_MISMATCH);
}

static void remove_deletes_the_file(void **state)
{
    env_t *e = *state;
    uint8_t v[3000];
    tc_fill(v, sizeof(v), 9);
    assert_int_equal(mc_store_put(e->eager, "rm/1", 4, v, sizeof(v), NULL), MC_OK);
    assert_true(file_exists(e, "rm/1", 4));
    assert_int_equal(mc_store_remove(e->async, "rm/1", 4, 1), MC_OK);
    assert_true(wait_file(e, "rm/1", 4, 0)); /* the master deletes it, shortly after */
    assert_int_equal(mc_store_exist(e->async, "rm/1", 4), 0);
    /* remove_all takes the files of disk-only objects too */
    assert_true(file_exists(e, "../x", 4));
    assert_true(mc_store_remove_all(e->async, 1) > 0);
    assert_true(wait_file(e, "../x", 4, 0));
    assert_true(wait_file(e, "eager/1", 7, 0));
    assert_true(wait_file(e, "restart/1", 9, 0)); /* the corrupt one too */
    assert_true(metric(e, "master_tier_files_deleted_total") > 10);
    assert_int_equal(metric(e, "master_tier_file_delete_failures_total"), 0);
    /* an async put removed at once: whether the remove or the file write
     * comes first, no file is left behind (a late TierAdd finds no object and
     * the master deletes the orphan) */
    for (int i = 0; i < 5; i++) {
        char k[32];
        snprintf(k, sizeof(k), "orphan/%d", i);
        assert_int_equal(mc_store_put(e->async, k, strlen(k), v, sizeof(v), NULL), MC_OK);
        assert_int_equal(mc_store_remove(e->async, k, strlen(k), 1), MC_OK);
    }
    usleep(300000 * SLOW); /* the writes are done by now (the queue is short) */
    for (int i = 0; i < 5; i++) {
        char k[32];
        snprintf(k, sizeof(k), "orphan/%d", i);
        assert_true(wait_file(e, k, strlen(k), 0));
        assert_int_equal(mc_store_exist(e->async, k, strlen(k)), 0);
    }
    /* a put of a removed key writes a fresh file that stays */
    assert_int_equal(mc_store_put(e->eager, "rm/1", 4, v, 100, NULL), MC_OK);
    usleep(200000);
    assert_true(file_exists(e, "rm/1", 4));
    get_equals(e->async, "rm/1", 4, v, 100);
}

static void a_get_whose_memory_replica_fails_reads_the_file(void **state)
{
    env_t *e = *state;
    uint8_t v[200000];
    tc_fill(v, sizeof(v), 11);
    assert_int_equal(put_retry(e->eager, "dead/1", 6, v, sizeof(v)), MC_OK);
    uint32_t mem;
    int disk;
    replicas(e->async, "dead/1", 6, &mem, &disk);
    assert_int_equal(mem, 1);
    assert_int_equal(disk, 1);
    /* the node holding the memory replica dies; the master still lists the
     * replica (it expires the node only after client_ttl): the read from it
     * fails, and the get goes on with the file */
    assert_true(tc_node_stop(&e->node, SIGKILL) >= 0);
    replicas(e->async, "dead/1", 6, &mem, &disk);
    assert_int_equal(mem, 1);
    get_equals(e->async, "dead/1", 6, v, sizeof(v));
}

/* count the regular files under dir */
static int nfiles;
static int count_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path;
    (void)sb;
    (void)ftw;
    nfiles += flag == FTW_F;
    return 0;
}

static void a_master_with_a_quota_removes_the_oldest_disk_only_objects(void **state)
{
    env_t *e = *state;
    /* 10 MiB of files, as clients would have written them; the restarted
     * master finds them */
    long long before = -1;
    uint8_t *v = malloc(MIB);
    char key[32];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "qt/%d", i);
        tc_fill(v, MIB, 300 + (uint64_t)i);
        struct iovec iov = {v, MIB};
        assert_int_equal(mc_tier_write(e->tierdir, key, strlen(key), &iov, 1, MIB, 0), MC_OK);
    }
    free(v);
    e->master_extra = "server.tier_quota=4MiB";
    assert_true(tc_master_stop(&e->master, SIGTERM) >= 0);
    assert_int_equal(start_master(e), 0);
    e->master_extra = NULL;
    before = metric(e, "master_tier_restored_objects");
    assert_true(before >= 10);
    assert_int_equal(metric(e, "master_tier_quota_bytes"), 4 << 20);
    /* within a couple of checks (every second) the tier is under its quota */
    uint64_t deadline = mc_now_ms() + 10000 * SLOW;
    long long bytes;
    while ((bytes = metric(e, "master_tier_bytes")) > (4 << 20) && mc_now_ms() < deadline)
        usleep(100000);
    assert_true(bytes >= 0 && bytes <= (4 << 20));
    long long gone = metric(e, "master_tier_quota_evicted_total");
    assert_true(gone > 0);
    /* their files are deleted: as many files as objects left */
    deadline = mc_now_ms() + 5000 * SLOW;
    long long left = metric(e, "master_tier_objects");
    do {
        nfiles = 0;
        assert_int_equal(nftw(e->tierdir, count_cb, 16, FTW_PHYS), 0);
    } while (nfiles != left && mc_now_ms() < deadline && usleep(50000) == 0);
    assert_int_equal(nfiles, left);
    assert_int_equal(left + gone, before);
    print_message("quota 4 MiB: %lld of %lld objects removed, %lld bytes left\n", gone, before,
                  bytes);
}

/* Run the master with one bad setting: it must exit non-zero and its
 * output must name what was wrong. */
static void master_refuses(const char *set, const char *named)
{
    char bin[256], cmd[1024], out[4096];
    snprintf(cmd, sizeof(cmd),
             "timeout 20 %s --set server.bind_address=127.0.0.1 --set server.rpc_port=0 "
             "--set server.http_enabled=false --set server.reactors=1 %s 2>&1",
             test_prog("mooncake-master", bin, sizeof(bin)), set);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    int status = pclose(f);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 124);
    if (strstr(out, named) == NULL)
        print_message("output was: %s\n", out);
    assert_non_null(strstr(out, named));
}

static void bad_tier_settings_stop_the_master_and_name_the_key(void **state)
{
    env_t *e = *state;
    char set[256];
    master_refuses("--set server.root_fs_dir=/nonexistent/tier", "server.root_fs_dir");
    master_refuses("--set server.root_fs_dir=relative/dir", "server.root_fs_dir");
    snprintf(set, sizeof(set), "--set server.root_fs_dir=%s --set server.cluster_id=../x", e->root);
    master_refuses(set, "server.cluster_id");
    snprintf(set, sizeof(set), "--set server.root_fs_dir=%s --set server.cluster_id=a/b", e->root);
    master_refuses(set, "server.cluster_id");
    master_refuses("--set server.persist=sometimes", "server.persist");
    /* and nothing was created outside the tier root */
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/x", e->parent);
    assert_int_equal(access(p, F_OK), -1);
    snprintf(p, sizeof(p), "%s/a", e->root);
    assert_int_equal(access(p, F_OK), -1);
}

/* ------------------------------------------------------------------- HA */

#define HA_CLUSTER "hatier" /* ha.cluster_id, and the tier's cluster_id */

typedef struct ha_env {
    tc_redis_t redis;
    tc_master_t m[2];
    tc_node_t node;
    char dir[256], url[128];
    mc_store_t *s;
} ha_env_t;

static ha_env_t H;

static void ha_cleanup(void)
{
    ha_env_t *h = &H;
    if (h->s != NULL)
        mc_store_close(h->s);
    h->s = NULL;
    tc_node_stop(&h->node, SIGTERM);
    for (int i = 0; i < 2; i++)
        tc_master_stop(&h->m[i], SIGTERM);
    tc_redis_stop(&h->redis, SIGTERM);
}

/* extra: more settings (NULL-terminated, may be NULL), after the defaults */
static int ha_start_master_with(ha_env_t *h, int i, const char *const *extra)
{
    char root[128], backend[96];
    snprintf(root, sizeof(root), "server.root_fs_dir=%s", E.root);
    snprintf(backend, sizeof(backend), "ha.backend=redis://127.0.0.1:%u/0", h->redis.port);
    const char *const sets[] = {root,
                                "server.cluster_id=" HA_CLUSTER,
                                "server.persist=eager",
                                "master.client_ttl=10s",
                                "master.lease_ttl=1s",
                                "master.eviction_high_watermark_ratio=0.7",
                                "master.eviction_ratio=0.3",
                                backend,
                                "ha.cluster_id=" HA_CLUSTER,
                                "ha.lease_ttl=1s",
                                "ha.sync=strict",
                                NULL,
                                NULL,
                                NULL,
                                NULL,
                                NULL};
    const char *all[sizeof(sets) / sizeof(sets[0])];
    size_t n = 0;
    while (sets[n] != NULL) {
        all[n] = sets[n];
        n++;
    }
    for (size_t j = 0; extra != NULL && extra[j] != NULL && n + 1 < sizeof(all) / sizeof(all[0]);
         j++)
        all[n++] = extra[j];
    all[n] = NULL;
    return tc_master_start(&h->m[i], all);
}

static int ha_start_master(ha_env_t *h, int i)
{
    return ha_start_master_with(h, i, NULL);
}

/* The master that leads per Redis (0 or 1), or -1. */
static int ha_leader(const ha_env_t *h)
{
    mc_ha_url_t u;
    const char *why;
    if (mc_ha_url_parse(h->url, &u, &why) != MC_OK)
        return -1;
    char addr[MC_HA_ADDR_MAX];
    int64_t view = 0;
    if (mc_ha_resolve_leader(&u, 500000, addr, sizeof(addr), &view) != MC_OK)
        return -1;
    for (int i = 0; i < 2; i++) {
        char want[64];
        snprintf(want, sizeof(want), "127.0.0.1:%u", h->m[i].rpc_port);
        if (strcmp(addr, want) == 0)
            return i;
    }
    return -1;
}

static int ha_wait_leader(const ha_env_t *h, int want, int timeout_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms * SLOW;
    while (mc_now_ms() < deadline) {
        if (ha_leader(h) == want)
            return 1;
        usleep(20000);
    }
    return 0;
}

static int ha_file_exists(const ha_env_t *h, const char *key)
{
    char rel[MC_TIER_REL_MAX], p[PATH_MAX];
    mc_tier_rel_path(key, strlen(key), 0, rel);
    snprintf(p, sizeof(p), "%s/%s", h->dir, rel);
    return access(p, F_OK) == 0;
}

/* Redis, master 0 leading and master 1 following (both with extra, may be
 * NULL), a node of 16 MiB and H.s, an eager-persist client. */
static void ha_setup(const char *const *extra)
{
    memset(&H, 0, sizeof(H));
    snprintf(H.dir, sizeof(H.dir), "%.96s/%s", E.root, HA_CLUSTER);
    assert_int_equal(tc_redis_start(&H.redis), 0);
    snprintf(H.url, sizeof(H.url), "redis://127.0.0.1:%u/0?cluster=" HA_CLUSTER, H.redis.port);
    assert_int_equal(ha_start_master_with(&H, 0, extra), 0);
    assert_true(ha_wait_leader(&H, 0, 5000));
    assert_int_equal(ha_start_master_with(&H, 1, extra), 0);
    const char *const ns[] = {"store.global_segment_size=16MiB", "store.rpc_timeout=3s", NULL};
    assert_int_equal(tc_node_start(&H.node, H.url, ns), 0);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = H.url;
    c.local_buffer_size = 8 * MIB;
    c.reactors = 1;
    c.rpc_timeout_us = 3000000 * SLOW;
    c.persist = "eager";
    assert_int_equal(mc_store_open(&c, &H.s), MC_OK);
}

static void with_ha_a_new_leader_serves_objects_evicted_to_files_and_deletes_them(void **state)
{
    (void)state;
    const char *redis_bin = tc_redis_bin();
    if (access(redis_bin, X_OK) != 0) {
        print_message("skipped: %s not found\n", redis_bin);
        skip();
    }
    ha_setup(NULL);
    mc_store_t *s = H.s;

    /* 30 MiB through a 16 MiB segment: the oldest are only on disk */
    enum { N = 30 };
    uint8_t *v = malloc(MIB);
    assert_non_null(v);
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "ha/%d", i);
        tc_fill(v, MIB, 5000 + (uint64_t)i);
        assert_int_equal(put_retry(s, key, strlen(key), v, MIB), MC_OK);
        assert_true(ha_file_exists(&H, key));
    }
    int was_disk_only[N], disk_only = 0;
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "ha/%d", i);
        uint32_t mem;
        int disk;
        replicas(s, key, strlen(key), &mem, &disk);
        assert_int_equal(disk, 1);
        was_disk_only[i] = mem == 0;
        disk_only += mem == 0;
    }
    print_message("%d of %d objects were only on disk before the failover\n", disk_only, N);
    assert_true(disk_only > 0);
    /* the evictions seen above may be the eviction tick's, whose records no
     * reply waited for: a put's PutEnd (strict) waits for every record
     * before it, so after it the standby has them all */
    tc_fill(v, 4096, 4999);
    assert_int_equal(put_retry(s, "ha/sync", 7, v, 4096), MC_OK);

    /* the leader dies; master 1 takes over */
    tc_stop_ms(&H.m[0].proc, SIGKILL, 1000);
    assert_true(ha_wait_leader(&H, 1, 5000));
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "ha/%d", i);
        uint32_t mem = 0;
        int disk = 0;
        replicas(s, key, strlen(key), &mem, &disk);
        assert_int_equal(disk, 1);
        if (was_disk_only[i])
            assert_int_equal(mem, 0); /* its memory was freed on the standby too */
        tc_fill(v, MIB, 5000 + (uint64_t)i);
        get_equals(s, key, strlen(key), v, MIB);
    }
    /* the new leader evicts too: puts into the space the old one freed, and
     * disk objects stay readable with their bytes */
    for (int i = N; i < N + 12; i++) {
        snprintf(key, sizeof(key), "ha/%d", i);
        tc_fill(v, MIB, 5000 + (uint64_t)i);
        assert_int_equal(put_retry(s, key, strlen(key), v, MIB), MC_OK);
    }
    for (int i = 0; i < N + 12; i++) {
        snprintf(key, sizeof(key), "ha/%d", i);
        assert_int_equal(mc_store_exist(s, key, strlen(key)), 1);
        tc_fill(v, MIB, 5000 + (uint64_t)i);
        get_equals(s, key, strlen(key), v, MIB);
    }
    /* a remove on the new leader deletes the file (it knows there is one) */
    assert_int_equal(mc_store_remove(s, "ha/0", 4, 1), MC_OK);
    uint64_t deadline = mc_now_ms() + 3000 * SLOW;
    while (ha_file_exists(&H, "ha/0") && mc_now_ms() < deadline)
        usleep(5000);
    assert_false(ha_file_exists(&H, "ha/0"));
    assert_int_equal(mc_store_exist(s, "ha/0", 4), 0);
    /* the old leader comes back as a standby: it does not scan (its state
     * is the journal's), the leader stays and keeps serving from the files */
    assert_int_equal(ha_start_master(&H, 0), 0);
    usleep(500000 * SLOW);
    assert_int_equal(ha_leader(&H), 1);
    assert_int_equal(metric_at(H.m[0].http_port, "master_tier_restored_objects"), 0);
    assert_true(ha_file_exists(&H, "ha/1"));
    tc_fill(v, MIB, 5001);
    get_equals(s, "ha/1", 4, v, MIB);
    /* a removed object's file the leader did not get to delete (as if it
     * died first): the next leader deletes it rather than restore it */
    assert_int_equal(mc_store_remove(s, "ha/2", 4, 1), MC_OK);
    deadline = mc_now_ms() + 3000 * SLOW;
    while (ha_file_exists(&H, "ha/2") && mc_now_ms() < deadline)
        usleep(5000);
    assert_false(ha_file_exists(&H, "ha/2"));
    struct iovec old = {v, MIB};
    assert_int_equal(mc_tier_write(H.dir, "ha/2", 4, &old, 1, MIB, 0), MC_OK);
    /* a file no master was told of (its TierAdd lost with a leader) */
    uint8_t g[3000];
    tc_fill(g, sizeof(g), 77);
    struct iovec iov = {g, sizeof(g)};
    assert_int_equal(mc_tier_write(H.dir, "ghost", 5, &iov, 1, sizeof(g), 0), MC_OK);
    /* master 1 dies: master 0 leads, scans, and the file becomes an object;
     * the journal's objects are all there, with their bytes */
    tc_stop_ms(&H.m[1].proc, SIGKILL, 1000);
    assert_true(ha_wait_leader(&H, 0, 5000));
    assert_int_equal(mc_store_exist(s, "ghost", 5), 1);
    get_equals(s, "ghost", 5, g, sizeof(g));
    assert_true(metric_at(H.m[0].http_port, "master_tier_restored_objects") >= 1);
    assert_int_equal(mc_store_exist(s, "ha/2", 4), 0);
    assert_false(ha_file_exists(&H, "ha/2"));
    for (int i = 1; i < N + 12; i++) {
        if (i == 2)
            continue;
        snprintf(key, sizeof(key), "ha/%d", i);
        tc_fill(v, MIB, 5000 + (uint64_t)i);
        get_equals(s, key, strlen(key), v, MIB);
    }
    assert_int_equal(mc_store_exist(s, "ha/0", 4), 0);

    free(v);
    ha_cleanup();
}

/* The master's answer to a PutStart sent by hand (no PutEnd follows). */
static mc_status_t raw_put_start(unsigned port, const char *key, uint64_t size)
{
    tc_rpc_t c;
    assert_int_equal(tc_rpc_open(&c, port), 0);
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    mc_uuid_t who = {0x5eed, 0x77};
    mc_mcli_put_start(&w, who, key, strlen(key), size, &cfg);
    mc_status_t st = tc_rpc_call(&c, MC_RPC_PUT_START, &body, 3000000 * SLOW, &resp);
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    tc_rpc_close(&c);
    return st;
}

/* A PutStart that evicts to make room hands out the space the evicted
 * objects held, and its caller writes there at once. Its answer therefore
 * waits (ha.sync = strict) until the evictions' records are in Redis: a
 * leader that dies right after it leaves a successor that knows those
 * objects left memory. Records no reply waits for go within flush_interval
 * (1 s here) or at a lease renewal (every second or so with a 3 s lease),
 * so without that wait the kill below, milliseconds after the answer,
 * loses them. */
static void with_ha_a_put_start_that_evicts_answers_once_the_evictions_are_durable(void **state)
{
    (void)state;
    const char *redis_bin = tc_redis_bin();
    if (access(redis_bin, X_OK) != 0) {
        print_message("skipped: %s not found\n", redis_bin);
        skip();
    }
    /* no eviction tick (watermark 1): only a put that does not fit evicts */
    const char *const extra[] = {"ha.flush_interval=1s", "ha.lease_ttl=3s",
                                 "master.eviction_high_watermark_ratio=1", NULL};
    ha_setup(extra);
    mc_store_t *s = H.s;

    /* 12 MiB of 16: every put acknowledged, so every record stored */
    enum { N = 12 };
    uint8_t *v = malloc(MIB);
    assert_non_null(v);
    char key[32];
    const int n = N;
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "ev/%d", i);
        tc_fill(v, MIB, 9000 + (uint64_t)i);
        assert_int_equal(mc_store_put(s, key, strlen(key), v, MIB, NULL), MC_OK);
    }
    for (int i = 0; i < n; i++) {
        uint32_t mem;
        int disk;
        snprintf(key, sizeof(key), "ev/%d", i);
        replicas(s, key, strlen(key), &mem, &disk);
        assert_int_equal(mem, 1); /* nothing evicted yet */
    }
    usleep(1200000); /* the queries' read leases (master.lease_ttl=1s) end */
    /* the PutStart by hand evicts (to disk: the objects have files) */
    assert_int_equal(raw_put_start(H.m[0].rpc_port, "ev/new", 8 * MIB), MC_OK);
    int evicted[N], nev = 0;
    for (int i = 0; i < n; i++) {
        uint32_t mem;
        int disk;
        snprintf(key, sizeof(key), "ev/%d", i);
        replicas(s, key, strlen(key), &mem, &disk);
        assert_int_equal(disk, 1);
        evicted[i] = mem == 0;
        nev += evicted[i];
    }
    assert_true(nev > 0);
    tc_stop_ms(&H.m[0].proc, SIGKILL, 1000);
    assert_true(ha_wait_leader(&H, 1, 8000));
    for (int i = 0; i < n; i++) {
        uint32_t mem = 0;
        int disk = 0;
        snprintf(key, sizeof(key), "ev/%d", i);
        replicas(s, key, strlen(key), &mem, &disk);
        assert_int_equal(disk, 1);
        if (evicted[i])
            assert_int_equal(mem, 0);
        tc_fill(v, MIB, 9000 + (uint64_t)i);
        get_equals(s, key, strlen(key), v, MIB);
    }
    print_message("%d of %d objects evicted by the PutStart, all known to the new leader\n", nev,
                  n);
    free(v);
    ha_cleanup();
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_eager_put_is_on_disk_when_it_returns),
        cmocka_unit_test(an_eager_put_whose_file_cannot_be_written_fails_and_leaves_nothing),
        cmocka_unit_test(async_puts_reach_disk_after_returning_and_close_drains_them),
        cmocka_unit_test(the_last_put_of_a_key_leaves_its_file_not_an_earlier_one),
        cmocka_unit_test(objects_evicted_from_memory_are_served_from_their_files),
        cmocka_unit_test(hostile_keys_map_to_safe_distinct_files_inside_the_directory),
        cmocka_unit_test(a_restarted_master_serves_objects_from_their_files),
        cmocka_unit_test(a_corrupt_file_is_a_clear_error_and_not_served),
        cmocka_unit_test(remove_deletes_the_file),
        cmocka_unit_test(a_get_whose_memory_replica_fails_reads_the_file),
        cmocka_unit_test(a_master_with_a_quota_removes_the_oldest_disk_only_objects),
        cmocka_unit_test(bad_tier_settings_stop_the_master_and_name_the_key),
        cmocka_unit_test(with_ha_a_new_leader_serves_objects_evicted_to_files_and_deletes_them),
        cmocka_unit_test(with_ha_a_put_start_that_evicts_answers_once_the_evictions_are_durable),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
