/*
 * Node-local offload: faults and policies, each case with its own real
 * mooncake-master and storage node (mooncake-store-server, 16 MiB segment,
 * offload directory in a mkdtemp directory) and a client in this process.
 *
 *  - a node SIGKILLed during an eviction storm (writes in flight): while it
 *    is gone and after the master expired it, its disk replicas are gone
 *    (gets fail: nothing wrong is served, master_offload_objects is 0);
 *    restarted, its scan deletes every temp file an interrupted write left
 *    (a planted half-written one too) and every object it reports is
 *    served byte for byte;
 *  - eager offload (offload_on_evict off): a put's object gets its file at
 *    once and keeps its memory; with a quota of 3 objects the oldest file
 *    goes first and the master is told (its LOCAL_DISK replica is gone);
 *  - promotion on hit (threshold 2): the first load of a disk-only object
 *    is a staging copy, the second promotes it (counted once);
 *  - a co-located client of the node's store service reads a disk-only
 *    object byte for byte, its node reading the file straight into the
 *    get's memory (no LOAD: master_offload_own_reads_total), also into
 *    memory shared with the service; a client elsewhere still has it
 *    loaded; a corrupt file read so is never served (the get fails, the
 *    file and the master's replica go); promotion on hit counts these
 *    reads (the second is a load, promoted);
 *  - HA (redis, two masters, strict journal): the standby knows the
 *    LOCAL_DISK replicas from the journal, and after the leader is
 *    SIGKILLed the new leader has every disk-only object loaded by its
 *    node, byte for byte (the node reports nothing: its segment is known);
 *    two disk-only objects removed while their node was frozen (the old
 *    leader could not hand their DELETEs out) have their files deleted by
 *    the node once it polls the new leader, which replayed the removals;
 *  - a master that keeps fewer DELETEs than were queued (MC_MASTER_OFFDEL_MAX
 *    = 1): two disk-only objects removed while their node was frozen, the
 *    node killed, expired and restarted on its directory: neither removed
 *    object comes back (one by its DELETE, one by the mark its lost DELETE
 *    left), and offload works on after the report.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "mooncake/store.h"
#include "cluster.h"
#include "store/tier.h"
#include "util/time.h"

#define MIB (1ull << 20)
#define SLOW TC_SLOW
#define OBJ MIB
#define NVAL 64

typedef struct env {
    char dir[64];     /* mkdtemp */
    char offdir[128]; /* the node's offload directory */
    tc_redis_t redis; /* HA case only */
    char url[128];    /* HA: the masters' redis:// URL, where nodes and clients find the leader */
    tc_master_t standby;
    tc_master_t master;
    unsigned mport; /* the HTTP port metrics and /query_key are read from: the leader's */
    tc_node_t node;
    unsigned svc_port; /* the node's store service, 0 = none */
    mc_store_t *c;
    uint8_t *val[NVAL];
} env_t;

static env_t E;

static int start_node(env_t *e, const char *extra)
{
    char master[64], od[192], svc[64];
    snprintf(od, sizeof(od), "store.offload_dir=%s", e->offdir);
    snprintf(svc, sizeof(svc), "service.port=%u", e->svc_port);
    const char *sets[6] = {"store.global_segment_size=16MiB", od, NULL, NULL, NULL, NULL};
    int k = 2;
    if (extra != NULL)
        sets[k++] = extra;
    if (e->svc_port != 0) {
        sets[k++] = "service.enabled=true";
        sets[k++] = svc;
    }
    return tc_node_start(
        &e->node, e->url[0] ? e->url : tc_master_addr(&e->master, master, sizeof(master)), sets);
}

/* A master with the offload sets + extra, a node (node_extra), a client;
 * ha: two masters (redis, strict journal), found through e->url. */
static int up_ha_or_not(env_t *e, const char *const *extra, const char *node_extra, int service,
                        int ha);
static int leads(const tc_master_t *m);

static int up(env_t *e, const char *const *extra, const char *node_extra, int service)
{
    return up_ha_or_not(e, extra, node_extra, service, 0);
}

static int up_ha_or_not(env_t *e, const char *const *extra, const char *node_extra, int service,
                        int ha)
{
    memset(e, 0, sizeof(*e));
    signal(SIGPIPE, SIG_IGN);
    snprintf(e->dir, sizeof(e->dir), "/tmp/mc_offload_fault.XXXXXX");
    if (mkdtemp(e->dir) == NULL)
        return -1;
    snprintf(e->offdir, sizeof(e->offdir), "%.60s/node", e->dir);
    const char *sets[16] = {"master.enable_offload=true",
                            "master.offload_cap_ratio=1.0",
                            "master.client_ttl=2s",
                            "master.lease_ttl=300ms",
                            "master.eviction_high_watermark_ratio=0.6",
                            "master.eviction_ratio=0.3"};
    int k = 6;
    for (int i = 0; extra != NULL && extra[i] != NULL && k < 11; i++)
        sets[k++] = extra[i];
    char backend[128];
    if (ha) {
        if (tc_redis_start(&e->redis) != 0)
            return -1;
        snprintf(backend, sizeof(backend), "ha.backend=redis://127.0.0.1:%u/0", e->redis.port);
        snprintf(e->url, sizeof(e->url), "redis://127.0.0.1:%u/0?cluster=offha", e->redis.port);
        sets[k++] = backend;
        sets[k++] = "ha.cluster_id=offha";
        sets[k++] = "ha.lease_ttl=1s";
        sets[k++] = "ha.sync=strict";
    }
    sets[k] = NULL;
    if (service)
        e->svc_port = test_free_port();
    if (tc_master_start(&e->master, sets) != 0)
        return -1;
    e->mport = e->master.http_port;
    if (ha) { /* the first one leads; the second follows the journal */
        uint64_t until = mc_now_ms() + 10000 * SLOW;
        while (!leads(&e->master)) {
            if (mc_now_ms() > until)
                return -1;
            usleep(50000);
        }
        if (tc_master_start(&e->standby, sets) != 0)
            return -1;
    }
    if (start_node(e, node_extra) != 0)
        return -1;
    char master[64];
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = e->url[0] ? e->url : tc_master_addr(&e->master, master, sizeof(master));
    c.local_buffer_size = 8 * MIB;
    c.reactors = 1;
    c.rpc_timeout_us = 2000000 * SLOW;
    if (mc_store_open(&c, &e->c) != MC_OK)
        return -1;
    for (int i = 0; i < NVAL; i++) {
        e->val[i] = malloc(OBJ);
        if (e->val[i] == NULL)
            return -1;
        tc_fill(e->val[i], OBJ, 7000 + (uint64_t)i);
    }
    return 0;
}

/* 1 when m answers /role with "leader". */
static int leads(const tc_master_t *m)
{
    char *body = NULL;
    int code = tc_http_get(m->http_port, "/role", &body, 2000);
    int yes = code == 200 && body != NULL && strncmp(body, "leader", 6) == 0;
    free(body);
    return yes;
}

static int down(void **state)
{
    env_t *e = *state;
    mc_store_close(e->c);
    tc_node_stop(&e->node, SIGTERM);
    tc_master_stop(&e->master, SIGTERM);
    tc_master_stop(&e->standby, SIGTERM);
    if (e->url[0])
        tc_redis_stop(&e->redis, SIGTERM);
    for (int i = 0; i < NVAL; i++)
        free(e->val[i]);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int up_evict(void **state)
{
    *state = &E;
    return up(&E, NULL, NULL, 0);
}

static int up_eager_quota(void **state)
{
    *state = &E;
    const char *const ms[] = {"master.offload_on_evict=false", NULL};
    return up(&E, ms, "store.offload_quota=3MiB", 0);
}

static int up_promotion(void **state)
{
    *state = &E;
    const char *const ms[] = {"master.offload_on_evict=true", "master.promotion_on_hit=true",
                              "master.promotion_admission_threshold=2", NULL};
    return up(&E, ms, NULL, 0);
}

static int up_service(void **state)
{
    *state = &E;
    const char *const ms[] = {"master.offload_on_evict=true", NULL};
    return up(&E, ms, NULL, 1);
}

static int up_service_promotion(void **state)
{
    *state = &E;
    const char *const ms[] = {"master.offload_on_evict=true", "master.promotion_on_hit=true",
                              "master.promotion_admission_threshold=2", NULL};
    return up(&E, ms, NULL, 1);
}

static int up_ha(void **state)
{
    *state = &E;
    const char *const ms[] = {"master.offload_on_evict=true", NULL};
    return up_ha_or_not(&E, ms, NULL, 0, 1);
}

static int up_offdel_max_1(void **state)
{
    *state = &E;
    const char *const ms[] = {"master.offload_on_evict=true", NULL};
    setenv("MC_MASTER_OFFDEL_MAX", "1", 1); /* the master's (its process inherits it) */
    int rc = up(&E, ms, NULL, 0);
    unsetenv("MC_MASTER_OFFDEL_MAX");
    return rc;
}

static void key_of(int i, char *k, size_t room)
{
    snprintf(k, room, "f-%d", i);
}

static void file_path(const env_t *e, int i, char *p, size_t room)
{
    char k[32], rel[MC_TIER_REL_MAX];
    key_of(i, k, sizeof(k));
    mc_tier_rel_path(k, strlen(k), 0, rel);
    snprintf(p, room, "%s/%s", e->offdir, rel);
}

static int file_exists(const env_t *e, int i)
{
    char p[PATH_MAX];
    file_path(e, i, p, sizeof(p));
    return access(p, F_OK) == 0;
}

static long long metric(const env_t *e, const char *name)
{
    char *body = NULL;
    if (tc_http_get(e->mport, "/metrics", &body, 3000) != 200 || body == NULL) {
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

/* The master's GetReplicaList and OFFLOAD_LOAD calls answered so far. */
static long long master_get_calls(const env_t *e)
{
    long long l = metric(e, "master_get_replica_list_requests_total");
    long long o = metric(e, "master_offload_load_requests_total");
    return l < 0 || o < 0 ? -1 : l + o;
}

/* Wait until metric name reaches at least (or, below = 1, at most) v. */
static int wait_metric(const env_t *e, const char *name, long long v, int below, int ms)
{
    uint64_t until = mc_now_ms() + (uint64_t)ms * SLOW;
    for (;;) {
        long long m = metric(e, name);
        if (m >= 0 && (below ? m <= v : m >= v))
            return 1;
        if (mc_now_ms() > until)
            return 0;
        usleep(20000);
    }
}

static mc_status_t put_key(env_t *e, const char *k, int v)
{
    mc_status_t st = MC_ERR_NO_AVAILABLE_HANDLE;
    for (int i = 0; i < 1000 && st == MC_ERR_NO_AVAILABLE_HANDLE; i++) {
        st = mc_store_put(e->c, k, strlen(k), e->val[v % NVAL], OBJ, NULL);
        if (st == MC_ERR_NO_AVAILABLE_HANDLE)
            usleep(10000); /* full until the node wrote what eviction picked */
    }
    return st;
}

static mc_status_t put_i(env_t *e, int i)
{
    char k[32];
    key_of(i, k, sizeof(k));
    return put_key(e, k, i);
}

/* get key i: its status; bytes other than the object's fail the test. */
static int64_t get_check(env_t *e, mc_store_t *c, int i)
{
    char k[32];
    key_of(i, k, sizeof(k));
    uint8_t *got = malloc(OBJ);
    assert_non_null(got);
    int64_t r = mc_store_get(c, k, strlen(k), got, OBJ, NULL);
    if (r >= 0) {
        assert_int_equal(r, OBJ);
        assert_memory_equal(got, e->val[i % NVAL], OBJ);
    }
    free(got);
    return r;
}

/* Key i's replicas: memory ones (address != 0), and whether its node has it
 * on disk (a LOCAL_DISK replica: address 0, not the persistent tier). */
static void replicas(env_t *e, int i, int *mem, int *ldisk)
{
    char k[32];
    key_of(i, k, sizeof(k));
    mc_store_replica_t r[8];
    uint32_t n = 0;
    *mem = *ldisk = 0;
    if (mc_store_query(e->c, k, strlen(k), r, 8, &n) != MC_OK)
        return;
    for (uint32_t j = 0; j < n && j < 8; j++) {
        if (r[j].address != 0)
            (*mem)++;
        else if (!r[j].disk)
            (*ldisk)++;
    }
}

/* Temp files (".tmp-*") anywhere under dir. */
static int count_temps(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "find '%s' -name '.tmp-*' | wc -l", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (f != NULL) {
        if (fscanf(f, "%d", &n) != 1)
            n = -1;
        pclose(f);
    }
    return n;
}

static void a_killed_node_never_serves_a_half_written_object(void **state)
{
    env_t *e = *state;
    /* an eviction storm: the node writes what eviction picks while puts go on */
    int n = 0;
    for (; n < 40; n++) {
        assert_int_equal(put_i(e, n), MC_OK);
        if (n >= 24 && metric(e, "master_offload_in_flight") > 0)
            break; /* a write is in flight on the node now */
    }
    n++;
    int ws = tc_node_stop(&e->node, SIGKILL);
    assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
    int temps_left = count_temps(e->offdir);
    /* what a write cut by the kill leaves: a temp file, never the final name */
    char p[PATH_MAX];
    file_path(e, 0, p, sizeof(p));
    char *slash = strrchr(p, '/');
    assert_non_null(slash);
    snprintf(slash + 1, (size_t)(p + sizeof(p) - slash - 1), ".tmp-999999-1");
    mkdir(e->offdir, 0700);
    char leaf[PATH_MAX];
    snprintf(leaf, sizeof(leaf), "%.*s", (int)(slash - p), p);
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", leaf);
    assert_int_equal(system(cmd), 0);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, e->val[0], 5000), 5000); /* a header's worth and some data */
    close(fd);

    /* the master expires the node: its disk replicas go with it */
    assert_true(wait_metric(e, "master_offload_objects", 0, 1, 8000));
    for (int i = 0; i < n; i += 5)
        assert_true(get_check(e, e->c, i) < 0); /* unavailable, never wrong */

    assert_int_equal(start_node(e, NULL), 0);
    int files = 0;
    for (int i = 0; i < n; i++)
        files += file_exists(e, i);
    assert_true(files > 0);
    /* its scan (after the mount) reported every file it kept ... */
    assert_true(wait_metric(e, "master_offload_objects", files, 0, 8000));
    /* ... and deleted, before that, every temp file */
    assert_int_equal(count_temps(e->offdir), 0);
    print_message("killed with %d temp file(s) of writes in flight; %d files restored\n",
                  temps_left, files);
    /* every one is an object again, byte for byte */
    for (int i = 0; i < n; i++)
        if (file_exists(e, i))
            assert_int_equal(get_check(e, e->c, i), OBJ);
}

static void eager_offload_and_the_quota_drop_the_oldest_file(void **state)
{
    env_t *e = *state;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(put_i(e, i), MC_OK);
        assert_true(wait_metric(e, "master_offload_persisted_total", i + 1, 0, 5000));
        assert_true(file_exists(e, i)); /* written after the put, no eviction needed */
        int mem, ld;
        replicas(e, i, &mem, &ld);
        assert_int_equal(mem, 1); /* and it keeps its memory */
        assert_int_equal(ld, 1);
    }
    assert_int_equal(metric(e, "master_offload_objects"), 3);
    /* a 4th and a 5th file: over the 3 MiB quota, the oldest go first */
    for (int i = 3; i < 5; i++) {
        assert_int_equal(put_i(e, i), MC_OK);
        assert_true(wait_metric(e, "master_offload_persisted_total", i + 1, 0, 5000));
    }
    assert_false(file_exists(e, 0));
    assert_false(file_exists(e, 1));
    for (int i = 2; i < 5; i++)
        assert_true(file_exists(e, i));
    /* the master was told: those objects have no LOCAL_DISK replica left */
    assert_true(wait_metric(e, "master_offload_objects", 3, 1, 3000));
    for (int i = 0; i < 5; i++) {
        int mem, ld;
        replicas(e, i, &mem, &ld);
        assert_int_equal(mem, 1);
        assert_int_equal(ld, i >= 2);
        assert_int_equal(get_check(e, e->c, i), OBJ);
    }
}

/* Key i's memory replicas as the master's /query_key lists them (no lease,
 * no access: looking does not keep it in memory); -1 when it is absent. */
static int mem_replicas(const env_t *e, int i)
{
    char path[64], *body = NULL;
    snprintf(path, sizeof(path), "/query_key?key=f-%d", i);
    int code = tc_http_get(e->mport, path, &body, 3000);
    int n = code == 200 ? 0 : -1;
    for (const char *p = body; code == 200 && p != NULL && (p = strstr(p, "\"size_\"")) != NULL;
         p++)
        n++;
    free(body);
    return n;
}

/* Push key t out of memory: puts of other keys until its only replica is
 * on its node's disk. 1 when it is. */
static int make_disk_only(env_t *e, int t, int *next)
{
    for (int k = 0; k < 200; k++) {
        if (mem_replicas(e, t) == 0)
            return 1; /* it exists, on its node's disk only */
        assert_int_equal(put_i(e, (*next)++), MC_OK);
    }
    return 0;
}

/* Key 0 put, then pushed out of memory: only on its node's disk. */
static void put_disk_only(env_t *e)
{
    int next = 1;
    assert_int_equal(put_i(e, 0), MC_OK);
    assert_true(make_disk_only(e, 0, &next));
}

static void promotion_after_two_loads(void **state)
{
    env_t *e = *state;
    int next = 1;
    assert_int_equal(put_i(e, 0), MC_OK);
    assert_true(make_disk_only(e, 0, &next));
    long long loads = metric(e, "master_offload_loads_total");
    assert_int_equal(metric(e, "master_offload_promoted_total"), 0);
    assert_int_equal(get_check(e, e->c, 0), OBJ); /* load 1: a staging copy */
    assert_int_equal(metric(e, "master_offload_loads_total"), loads + 1);
    assert_int_equal(metric(e, "master_offload_promoted_total"), 0);
    usleep(400000); /* its lease (300 ms) runs out: eviction may take the copy */
    assert_true(make_disk_only(e, 0, &next));
    assert_int_equal(get_check(e, e->c, 0), OBJ); /* load 2: promoted */
    assert_int_equal(metric(e, "master_offload_loads_total"), loads + 2);
    assert_int_equal(metric(e, "master_offload_promoted_total"), 1);
}

/* A co-located client of the node's store service. */
static mc_store_t *colocated(const env_t *e)
{
    mc_store_config_t c;
    mc_store_config_init(&c);
    char svc[64];
    snprintf(svc, sizeof(svc), "127.0.0.1:%u", e->svc_port);
    c.service = svc;
    c.local_buffer_size = 4 * MIB;
    c.rpc_timeout_us = 2000000 * SLOW;
    mc_store_t *d = NULL;
    assert_int_equal(mc_store_open(&c, &d), MC_OK);
    return d;
}

static void a_colocated_client_reads_a_disk_only_object(void **state)
{
    env_t *e = *state;
    put_disk_only(e);
    mc_store_t *d = colocated(e);
    long long loads = metric(e, "master_offload_loads_total");
    long long own = metric(e, "master_offload_own_reads_total");
    long long calls = master_get_calls(e);
    assert_true(own >= 0);
    assert_true(calls >= 0);
    /* the node reads its own file straight into the get's memory: no LOAD,
     * and the service's worker asked the master once (its listing said
     * OWN_DISK), not a listing and then an OFFLOAD_LOAD */
    assert_int_equal(get_check(e, d, 0), OBJ);
    assert_int_equal(metric(e, "master_offload_own_reads_total"), own + 1);
    assert_int_equal(metric(e, "master_offload_loads_total"), loads);
    assert_int_equal(master_get_calls(e), calls + 1);
    assert_int_equal(mem_replicas(e, 0), 0); /* still only on the disk */
    /* again, into memory shared with the service (page aligned: O_DIRECT) */
    uint8_t *shared = mc_store_shared_alloc(OBJ);
    assert_non_null(shared);
    assert_int_equal(mc_store_register_buffer(d, shared, OBJ), MC_OK);
    assert_int_equal(mc_store_get(d, "f-0", 3, shared, OBJ, NULL), OBJ);
    assert_memory_equal(shared, e->val[0], OBJ);
    assert_int_equal(metric(e, "master_offload_own_reads_total"), own + 2);
    assert_int_equal(metric(e, "master_offload_loads_total"), loads);
    assert_int_equal(master_get_calls(e), calls + 2);
    /* a client elsewhere still has the node load it */
    assert_int_equal(get_check(e, e->c, 0), OBJ);
    assert_int_equal(metric(e, "master_offload_loads_total"), loads + 1);
    assert_int_equal(metric(e, "master_offload_own_reads_total"), own + 2);
    mc_store_close(d);
    mc_store_shared_free(shared);
}

/* The node reading its own file finds a changed byte: the co-located get
 * fails (never other bytes), the file is deleted and the master, told by
 * the load the get asks for then, drops the disk replica. */
static void a_corrupt_file_the_node_reads_itself_is_never_served(void **state)
{
    env_t *e = *state;
    put_disk_only(e);
    char p[PATH_MAX];
    file_path(e, 0, p, sizeof(p));
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    int fd = open(p, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    off_t at = sb.st_size - (off_t)(OBJ / 3); /* inside the data */
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
    mc_store_t *d = colocated(e);
    long long failed = metric(e, "master_offload_load_failures_total");
    long long own = metric(e, "master_offload_own_reads_total");
    int64_t r = get_check(e, d, 0); /* other bytes would fail the test */
    assert_true(r < 0);
    assert_int_equal(metric(e, "master_offload_own_reads_total"), own + 1);
    assert_int_equal(metric(e, "master_offload_load_failures_total"), failed + 1);
    assert_false(file_exists(e, 0));
    assert_int_equal(mem_replicas(e, 0), -1); /* gone from the master too */
    assert_int_equal(get_check(e, d, 0), MC_ERR_OBJECT_NOT_FOUND);
    mc_store_close(d);
}

/* Promotion on hit counts the reads a node makes of its own disk: the read
 * that reaches the threshold is a load, and its copy stays in memory. */
static void own_reads_count_for_promotion(void **state)
{
    env_t *e = *state;
    put_disk_only(e);
    mc_store_t *d = colocated(e);
    long long loads = metric(e, "master_offload_loads_total");
    long long own = metric(e, "master_offload_own_reads_total");
    assert_int_equal(get_check(e, d, 0), OBJ); /* read 1: from the disk, in place */
    assert_int_equal(metric(e, "master_offload_own_reads_total"), own + 1);
    assert_int_equal(metric(e, "master_offload_loads_total"), loads);
    assert_int_equal(metric(e, "master_offload_promoted_total"), 0);
    assert_int_equal(get_check(e, d, 0), OBJ); /* read 2: loaded and promoted */
    assert_int_equal(metric(e, "master_offload_own_reads_total"), own + 1);
    assert_int_equal(metric(e, "master_offload_loads_total"), loads + 1);
    assert_int_equal(metric(e, "master_offload_promoted_total"), 1);
    assert_int_equal(mem_replicas(e, 0), 1);
    mc_store_close(d);
}

/* SIGKILL the leader; the standby leads. */
static void kill_the_leader(env_t *e)
{
    int ws = tc_master_stop(&e->master, SIGKILL);
    assert_true(WIFSIGNALED(ws));
    uint64_t until = mc_now_ms() + 10000 * SLOW;
    while (!leads(&e->standby) && mc_now_ms() < until)
        usleep(50000);
    assert_true(leads(&e->standby));
}

/* Every offload answered and none to come: no request queued or in
 * flight, and master_offload_objects the same 300 ms later (eviction runs
 * on a timer while memory is above its watermark after the puts: a cycle
 * may queue more PERSISTs after both counts were 0). 1 when settled
 * within 10 s. */
static int offload_settled(const env_t *e)
{
    uint64_t until = mc_now_ms() + 10000 * SLOW;
    while (mc_now_ms() < until) {
        long long n = metric(e, "master_offload_objects");
        if (metric(e, "master_offload_in_flight") == 0 && metric(e, "master_offload_queued") == 0) {
            usleep(300000);
            if (metric(e, "master_offload_in_flight") == 0 &&
                metric(e, "master_offload_queued") == 0 && metric(e, "master_offload_objects") == n)
                return 1;
        } else {
            usleep(20000);
        }
    }
    return 0;
}

static void a_new_leader_knows_the_disk_replicas(void **state)
{
    env_t *e = *state;
    for (int i = 0; i < 24; i++) /* 24 MiB through 16 MiB: some go to the node's disk */
        assert_int_equal(put_i(e, i), MC_OK);
    assert_true(offload_settled(e));
    int disk[24], nd = 0;
    for (int i = 0; i < 24; i++)
        if (mem_replicas(e, i) == 0)
            disk[nd++] = i;
    assert_true(nd > 0);
    long long objs = metric(e, "master_offload_objects");
    assert_true(objs >= nd);
    /* the standby follows the journal: it knows them already */
    e->mport = e->standby.http_port;
    assert_true(wait_metric(e, "master_offload_objects", objs, 0, 5000));
    assert_int_equal(metric(e, "master_offload_objects"), objs);

    kill_the_leader(e);
    /* from the journal, not from the node (its segment is known: no report) */
    assert_int_equal(metric(e, "master_offload_objects"), objs);
    long long loads = metric(e, "master_offload_loads_total");
    for (int j = 0; j < nd; j++) /* its node loads each for the new leader */
        assert_int_equal(get_check(e, e->c, disk[j]), OBJ);
    assert_int_equal(metric(e, "master_offload_loads_total"), loads + nd);
}

/* Keys 0..23 put (24 MiB through the 16 MiB segment: some go to the
 * node's disk) and every offload answered: those only on the node's disk
 * (no memory replica, its file there) into disk; how many. */
static int put_24_disk_only(env_t *e, int disk[24])
{
    for (int i = 0; i < 24; i++)
        assert_int_equal(put_i(e, i), MC_OK);
    assert_true(offload_settled(e));
    int nd = 0;
    for (int i = 0; i < 24; i++)
        if (mem_replicas(e, i) == 0 && file_exists(e, i))
            disk[nd++] = i;
    return nd;
}

/* Two disk-only objects removed while their node is frozen: the leader
 * queues their DELETEs, and dies before the node polls again. The standby
 * replayed the removals as DELETEs for the node: as the new leader it
 * hands them out, and the files go (else the node's next restart would
 * report them and bring the removed keys back). */
static void a_new_leader_hands_out_the_deletions_the_old_one_could_not(void **state)
{
    env_t *e = *state;
    int disk[24], nd = put_24_disk_only(e, disk);
    assert_true(nd >= 3);
    /* frozen: its held poll is answered (empty) and it asks no more */
    assert_int_equal(kill(e->node.proc.pid, SIGSTOP), 0);
    usleep(600000);
    for (int j = 0; j < 2; j++) {
        char k[32];
        key_of(disk[j], k, sizeof(k));
        assert_int_equal(mc_store_remove(e->c, k, strlen(k), 0), MC_OK);
    }
    assert_int_equal(metric(e, "master_offload_deletions"), 2); /* not handed out */
    e->mport = e->standby.http_port;
    assert_true(wait_metric(e, "master_offload_deletions", 2, 0, 5000));

    kill_the_leader(e);
    assert_int_equal(kill(e->node.proc.pid, SIGCONT), 0);
    uint64_t until = mc_now_ms() + 10000 * SLOW;
    while ((file_exists(e, disk[0]) || file_exists(e, disk[1])) && mc_now_ms() < until)
        usleep(50000);
    assert_false(file_exists(e, disk[0]));
    assert_false(file_exists(e, disk[1]));
    assert_true(wait_metric(e, "master_offload_deletions", 0, 1, 5000)); /* done */
    /* each handed out once: the node said it did that answer (DONE_ID) */
    assert_int_equal(metric(e, "master_offload_deletions_again_total"), 0);
    assert_int_equal(mem_replicas(e, disk[0]), -1);
    assert_int_equal(mem_replicas(e, disk[1]), -1);
    for (int j = 2; j < nd; j++) /* the others stay, byte for byte */
        assert_int_equal(get_check(e, e->c, disk[j]), OBJ);
}

/* Two disk-only objects removed while their node is frozen, the master
 * keeping one DELETE at most: the second is not kept, and the node is
 * marked. The node is killed, expires, and restarts on its directory: the
 * first removed object's file is refused by its DELETE (parked for the
 * directory), the second's by the mark (the master does not know the key:
 * without the mark its file came back as a disk-only object), and so are
 * the files of the objects the master forgot when the node expired. After
 * that report the node offloads and its files are objects again. */
static void a_lost_deletion_never_brings_a_removed_object_back(void **state)
{
    env_t *e = *state;
    int disk[24], nd = put_24_disk_only(e, disk);
    assert_true(nd >= 2);
    assert_int_equal(kill(e->node.proc.pid, SIGSTOP), 0); /* frozen: no more polls */
    usleep(600000);
    for (int j = 0; j < 2; j++) {
        char k[32];
        key_of(disk[j], k, sizeof(k));
        assert_int_equal(mc_store_remove(e->c, k, strlen(k), 0), MC_OK);
    }
    assert_int_equal(metric(e, "master_offload_deletions"), 1);
    assert_int_equal(metric(e, "master_offload_deletions_lost_total"), 1);
    assert_int_equal(kill(e->node.proc.pid, SIGCONT), 0);
    int ws = tc_node_stop(&e->node, SIGKILL); /* before it polls: neither file deleted */
    assert_true(WIFSIGNALED(ws));
    assert_true(file_exists(e, disk[0]));
    assert_true(file_exists(e, disk[1]));
    /* expired: its disk replicas go; its DELETE and the mark wait for its directory */
    assert_true(wait_metric(e, "master_offload_objects", 0, 1, 8000));

    assert_int_equal(start_node(e, NULL), 0);
    uint64_t until = mc_now_ms() + 8000 * SLOW;
    while ((file_exists(e, disk[0]) || file_exists(e, disk[1])) && mc_now_ms() < until)
        usleep(50000);
    assert_false(file_exists(e, disk[0])); /* refused: the node deleted them */
    assert_false(file_exists(e, disk[1]));
    assert_int_equal(mem_replicas(e, disk[0]), -1); /* neither came back */
    assert_int_equal(mem_replicas(e, disk[1]), -1);
    assert_true(wait_metric(e, "master_offload_lost_refused_total", 1, 0, 8000));
    assert_int_equal(metric(e, "master_offload_objects"), 0); /* the forgotten ones: refused */
    print_message("%d disk-only objects: 2 removed, 1 DELETE lost; %lld files refused\n", nd,
                  metric(e, "master_offload_lost_refused_total"));
    /* the mark is used up: new objects offload and are read back */
    for (int i = 100; i < 124; i++)
        assert_int_equal(put_i(e, i), MC_OK);
    assert_true(wait_metric(e, "master_offload_objects", 1, 0, 8000));
    for (int i = 100; i < 124; i++)
        assert_int_equal(get_check(e, e->c, i), OBJ);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_killed_node_never_serves_a_half_written_object, up_evict,
                                        down),
        cmocka_unit_test_setup_teardown(eager_offload_and_the_quota_drop_the_oldest_file,
                                        up_eager_quota, down),
        cmocka_unit_test_setup_teardown(promotion_after_two_loads, up_promotion, down),
        cmocka_unit_test_setup_teardown(a_colocated_client_reads_a_disk_only_object, up_service,
                                        down),
        cmocka_unit_test_setup_teardown(a_corrupt_file_the_node_reads_itself_is_never_served,
                                        up_service, down),
        cmocka_unit_test_setup_teardown(own_reads_count_for_promotion, up_service_promotion, down),
        cmocka_unit_test_setup_teardown(a_new_leader_knows_the_disk_replicas, up_ha, down),
        cmocka_unit_test_setup_teardown(a_new_leader_hands_out_the_deletions_the_old_one_could_not,
                                        up_ha, down),
        cmocka_unit_test_setup_teardown(a_lost_deletion_never_brings_a_removed_object_back,
                                        up_offdel_max_1, down),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
