/*
 * master_server_tier.c - the master service's side of the persistent tier
 * (store/tier.h): the tier directory, the startup scan that rebuilds DISK
 * replicas, and the thread that deletes the files of removed objects.
 *
 * Who deletes a file: the master, for every way an object with a DISK
 * replica leaves (remove, remove by regex / all, revoke, discarded put; not
 * eviction, which keeps the object on disk): the master core reports it
 * under the shard lock (opts.disk_drop), this file queues the key and a
 * thread of its own unlinks, so no reactor waits for a file system. Clients
 * could not do it for remove_all or regex removes, whose keys they never
 * see. The unlink runs under the key's shard lock and only while no object
 * of that key exists (mc_master_tier_if_absent): a new put of the key
 * creates its object before it writes its file, so a late deletion never
 * takes a newer file. remove therefore returns before the file is gone;
 * the queue is unbounded (one small node per key) and drained at stop.
 *
 * Restart: the scan reads every file's header (not its data: reads verify
 * the data), at most tier_scan_max files, and logs what it restored, what it
 * skipped and how long it took. Without HA it runs before the RPC port
 * opens, so a client never sees a half-restored tier. With HA only the
 * leader scans, when it becomes the leader (master_ha.c, promote: caught up
 * with the journal, journal hook installed, not yet serving), so what it
 * restores reaches the standbys as DISK records; a standby's state is the
 * journal's and nothing else. That scan restores only keys the master has
 * no object of: for the others the journal is authoritative (their DISK
 * records), and a file of an existing key may be of an older put of it.
 * A leader deletes a removed object's file only once its DROP record is in
 * Redis, and drains its deletions before it hands over cleanly. A standby
 * remembers the removals it replayed lately (a lease and 10 s; 8192 keys,
 * 4 MiB at most): taking over, before its scan, it deletes the files of
 * those keys still absent, which a leader that died or was deposed may not
 * have deleted (the scan would bring them back).
 *
 * Only a master that serves (the leader, or a single master) deletes files
 * or enforces the quota: a standby replaying a remove must not unlink (the
 * leader does, and a lagging standby could take the file of a newer put of
 * the key), and a quota removal on a standby would be a change the journal
 * does not know.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "store/master_ha.h"
#include "store/master_server_int.h"
#include "store/tier.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/prom.h"
#include "util/time.h"

typedef struct drop_node {
    struct drop_node *next;
    uint64_t seq;   /* with HA: the journal record number of its DROP */
    uint64_t at_us; /* when it was queued (or, on a standby, replayed) */
    size_t len;
    char key[];
} drop_node_t;

struct master_tier {
    master_srv_t *srv;
    char *dir; /* fsdir/cluster_id */
    char *cluster;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    drop_node_t *head, **tail; /* mu */
    int stop;                  /* mu */
    /* a standby's removals of objects with files replayed lately, oldest
     * first (mu): the leader may have died before it deleted their files */
    drop_node_t *recent, **rtail;
    size_t nrecent, recent_bytes;
    _Atomic uint64_t deleted, delete_failed, skipped;
    _Atomic uint64_t queued;  /* deletions waiting */
    _Atomic uint64_t flushed; /* with HA: journal records up to this are in Redis */
    /* the last scan's figures: with HA it runs while the HTTP port serves */
    _Atomic uint64_t restored, scan_bad, scan_temps, scan_ms;
};

const char *master_tier_dir(const master_srv_t *s)
{
    return s->tier != NULL ? s->tier->dir : "";
}

const char *master_tier_cluster(const master_srv_t *s)
{
    return s->tier != NULL ? s->tier->cluster : "";
}

static int cluster_id_ok(const char *c)
{
    size_t n = strlen(c);
    if (n == 0 || n > 128 || strcmp(c, ".") == 0 || strcmp(c, "..") == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = c[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return 0;
    }
    return 1;
}

/* The leader, or a single master (HA off): the one that owns the files. */
static int owns_files(const struct master_tier *t)
{
    int r = atomic_load(&t->srv->role);
    return r == MC_HA_ROLE_NONE || r == MC_HA_ROLE_LEADER;
}

/* What a standby keeps of replayed removals: those of the last lease_ttl +
 * RECENT_EXTRA_US (a leader deletes a file within milliseconds of the DROP
 * record being stored; a new leader takes over within a lease), at most
 * RECENT_MAX of them and RECENT_MAX_BYTES of keys. */
#define RECENT_EXTRA_US 10000000ull
#define RECENT_MAX 8192
#define RECENT_MAX_BYTES (4u << 20)

static uint64_t recent_window(const struct master_tier *t)
{
    return t->srv->opts.ha.lease_ttl_us + RECENT_EXTRA_US;
}

/* Standby: remember n (taken). */
static void recent_add(struct master_tier *t, drop_node_t *n)
{
    uint64_t window = recent_window(t);
    pthread_mutex_lock(&t->mu);
    n->next = NULL;
    *t->rtail = n;
    t->rtail = &n->next;
    t->nrecent++;
    t->recent_bytes += n->len;
    while (t->recent != n && (t->nrecent > RECENT_MAX || t->recent_bytes > RECENT_MAX_BYTES ||
                              t->recent->at_us + window < n->at_us)) {
        drop_node_t *o = t->recent;
        t->recent = o->next;
        t->nrecent--;
        t->recent_bytes -= o->len;
        mc_free(o);
    }
    pthread_mutex_unlock(&t->mu);
}

static void queue_drop(void *arg, const char *key, size_t len)
{
    struct master_tier *t = arg;
    int role = atomic_load(&t->srv->role);
    if (role == MC_HA_ROLE_FAILED)
        return;
    drop_node_t *n = mc_malloc(sizeof(*n) + len);
    if (n == NULL) {
        MC_ERROR(TIER,
                 "out of memory while queueing the deletion of a file of '%.*s' "
                 "(left on disk)",
                 (int)(len > 64 ? 64 : len), key);
        return;
    }
    n->next = NULL;
    /* obj_unlink journaled the DROP just before (same thread, same lock) */
    n->seq = role == MC_HA_ROLE_STANDBY ? 0 : master_ha_seq(t->srv);
    n->at_us = mc_now_us();
    n->len = len;
    memcpy(n->key, key, len);
    if (role == MC_HA_ROLE_STANDBY) {
        /* a standby replaying a remove: the leader deletes the file (a
         * lagging standby could take the file of a newer put of the key);
         * kept in case this master takes over before the leader did */
        recent_add(t, n);
        return;
    }
    atomic_fetch_add(&t->queued, 1);
    pthread_mutex_lock(&t->mu);
    *t->tail = n;
    t->tail = &n->next;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void master_tier_orphan(master_srv_t *s, const char *key, size_t len)
{
    if (s->tier != NULL)
        queue_drop(s->tier, key, len);
}

void master_tier_flushed(master_srv_t *s, uint64_t seq)
{
    if (s->tier != NULL)
        atomic_store(&s->tier->flushed, seq);
}

/* With HA, a file goes only once its DROP record is in Redis: a leader that
 * died before would leave a new leader with the object and no file. 1 when
 * it may go, 0 when this master stopped leading meanwhile. */
static int durable(struct master_tier *t, const drop_node_t *n)
{
    for (;;) {
        if (!owns_files(t))
            return 0;
        if (atomic_load(&t->flushed) >= n->seq)
            return 1;
        usleep(1000); /* strict: the append is under way; async: flush_interval */
    }
}

typedef struct unlink_ctx {
    struct master_tier *t;
    const drop_node_t *n;
} unlink_ctx_t;

static void do_unlink(void *arg)
{
    unlink_ctx_t *c = arg;
    if (mc_tier_unlink(c->t->dir, c->n->key, c->n->len) == MC_OK)
        atomic_fetch_add(&c->t->deleted, 1);
    else
        atomic_fetch_add(&c->t->delete_failed, 1);
}

/* How often the quota is checked (a walk of every shard when exceeded). */
#define QUOTA_CHECK_US 1000000

static void *deleter_main(void *arg)
{
    struct master_tier *t = arg;
    uint64_t quota = t->srv->opts.tier_quota;
    uint64_t next_check = 0;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        if (quota > 0 && !t->stop && mc_now_us() >= next_check) {
            pthread_mutex_unlock(&t->mu);
            if (owns_files(t)) /* a standby's removals would not be journaled */
                mc_master_tier_enforce_quota(t->srv->m, quota, mc_now_us());
            next_check = mc_now_us() + QUOTA_CHECK_US;
            pthread_mutex_lock(&t->mu);
            continue;
        }
        if (t->head == NULL && !t->stop) {
            if (quota > 0) {
                struct timespec ts = mc_timespec_in(CLOCK_REALTIME, 1000000);
                pthread_cond_timedwait(&t->cv, &t->mu, &ts);
            } else {
                pthread_cond_wait(&t->cv, &t->mu);
            }
            continue;
        }
        drop_node_t *n = t->head;
        if (n == NULL)
            break; /* stopping, queue drained */
        t->head = n->next;
        if (t->head == NULL)
            t->tail = &t->head;
        pthread_mutex_unlock(&t->mu);
        unlink_ctx_t c = {t, n};
        if (!durable(t, n))
            atomic_fetch_add(&t->skipped, 1); /* demoted since: the new leader decides */
        else if (mc_master_tier_if_absent(t->srv->m, n->key, n->len, do_unlink, &c) != MC_OK)
            atomic_fetch_add(&t->skipped, 1); /* the key was put again: its file is new */
        mc_free(n);
        atomic_fetch_sub(&t->queued, 1);
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

mc_status_t master_tier_create(master_srv_t *s)
{
    const char *root = s->opts.fsdir;
    if (root == NULL || root[0] == '\0')
        return MC_OK;
    const char *cid = s->opts.cluster_id != NULL ? s->opts.cluster_id : "mooncake_cluster";
    if (!cluster_id_ok(cid)) {
        MC_ERROR(TIER, "server.cluster_id '%s' must be 1..128 of [A-Za-z0-9._-], not . or ..", cid);
        return MC_ERR_CONFIG;
    }
    if (s->opts.persist < MC_MASTER_PERSIST_OFF || s->opts.persist > MC_MASTER_PERSIST_EAGER) {
        MC_ERROR(TIER, "server.persist must be off, async or eager");
        return MC_ERR_CONFIG;
    }
    struct stat sb;
    errno = 0;
    if (root[0] != '/' || stat(root, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        MC_ERROR(TIER, "server.root_fs_dir '%s' must be an absolute path to a directory%s%s", root,
                 errno ? ": " : "", errno ? strerror(errno) : "");
        return MC_ERR_CONFIG;
    }
    struct master_tier *t = MC_NEW(struct master_tier);
    if (t == NULL)
        return MC_ERR_NOMEM;
    size_t n = strlen(root) + 1 + strlen(cid) + 1;
    t->dir = mc_malloc(n);
    t->cluster = mc_strdup(cid);
    if (t->dir == NULL || t->cluster == NULL) {
        mc_free(t->dir);
        mc_free(t->cluster);
        mc_free(t);
        return MC_ERR_NOMEM;
    }
    snprintf(t->dir, n, "%s/%s", root, cid);
    if (strlen(t->dir) > 3800) {
        MC_ERROR(TIER, "server.root_fs_dir is too long");
        goto err_free;
    }
    if (mkdir(t->dir, 0755) != 0 && errno != EEXIST) {
        MC_ERROR(TIER, "cannot create the tier directory '%s': %s", t->dir, strerror(errno));
        goto err_free;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->tail = &t->head;
    t->rtail = &t->recent;
    t->srv = s;
    s->tier = t;
    s->opts.master.disk_drop = queue_drop;
    s->opts.master.disk_drop_arg = t;
    return MC_OK;

err_free:
    mc_free(t->dir);
    mc_free(t->cluster);
    mc_free(t);
    return MC_ERR_CONFIG;
}

typedef struct restore_ctx {
    mc_master_t *m;
    int absent_only; /* a new HA leader: keys it has are the journal's */
    uint64_t now, ok, refused, known, seen;
    void (*tick)(void *arg);
    void *tick_arg;
} restore_ctx_t;

/* How many files between two calls of the scan's tick. */
#define SCAN_TICK_FILES 1024

static int restore_cb(void *arg, const void *key, size_t klen, const mc_tier_known_t *k)
{
    restore_ctx_t *c = arg;
    uint64_t size = k->size;
    mc_status_t st = c->absent_only ? mc_master_tier_restore_absent(c->m, key, klen, size, c->now)
                                    : mc_master_tier_restore(c->m, key, klen, size, c->now);
    if (st == MC_OK) {
        c->ok++;
    } else if (st == MC_ERR_OBJECT_ALREADY_EXISTS && c->absent_only) {
        c->known++;
    } else if (c->refused++ < 10) {
        MC_WARN(TIER, "scan: file of a %zu-byte key not restored: %s", klen, mc_status_str(st));
    }
    if (c->tick != NULL && ++c->seen % SCAN_TICK_FILES == 0)
        c->tick(c->tick_arg);
    return 0;
}

mc_status_t master_tier_scan(master_srv_t *s, void (*tick)(void *arg), void *arg)
{
    struct master_tier *t = s->tier;
    if (t == NULL)
        return MC_OK;
    uint64_t t0 = mc_now_us();
    restore_ctx_t c = {
        .m = s->m, .absent_only = s->ha != NULL, .now = t0, .tick = tick, .tick_arg = arg};
    mc_tier_scan_stats_t ss;
    mc_status_t st = mc_tier_scan(t->dir, s->opts.tier_scan_max, restore_cb, &c, &ss);
    if (st != MC_OK)
        return MC_ERR_CONFIG;
    MC_INFO(TIER,
            "tier '%s' (persist %s): %llu objects restored from files in %llu ms (%llu files "
            "of known keys); %llu files skipped (corrupt or misplaced), %llu refused, %llu temp "
            "files left, %llu stale ones deleted%s",
            t->dir,
            s->opts.persist == MC_MASTER_PERSIST_EAGER   ? "eager"
            : s->opts.persist == MC_MASTER_PERSIST_ASYNC ? "async"
                                                         : "off",
            (unsigned long long)c.ok, (unsigned long long)((mc_now_us() - t0) / 1000),
            (unsigned long long)c.known, (unsigned long long)ss.bad, (unsigned long long)c.refused,
            (unsigned long long)ss.temps, (unsigned long long)ss.temps_removed,
            ss.truncated ? "; STOPPED at server.tier_scan_max: later files are not served" : "");
    t->restored = c.ok;
    t->scan_bad = ss.bad;
    t->scan_temps = ss.temps;
    t->scan_ms = (mc_now_us() - t0) / 1000;
    return MC_OK;
}

mc_status_t master_tier_start(master_srv_t *s, int scan)
{
    struct master_tier *t = s->tier;
    if (t == NULL)
        return MC_OK;
    if (scan) {
        mc_status_t st = master_tier_scan(s, NULL, NULL);
        if (st != MC_OK)
            return st;
    }
    if (pthread_create(&t->thread, NULL, deleter_main, t) != 0) {
        MC_ERROR(TIER, "cannot start the tier deletion thread");
        return MC_ERR_NOMEM;
    }
    t->started = 1;
    return MC_OK;
}

void master_tier_drain(master_srv_t *s, uint64_t max_us)
{
    struct master_tier *t = s->tier;
    if (t == NULL || !t->started)
        return;
    uint64_t deadline = mc_now_us() + max_us;
    while (atomic_load(&t->queued) > 0 && mc_now_us() < deadline)
        usleep(1000); /* the deletion thread works through it */
    if (atomic_load(&t->queued) > 0)
        MC_WARN(TIER, "%llu file deletions still queued at the handover: those files stay",
                (unsigned long long)atomic_load(&t->queued));
}

void master_tier_takeover(master_srv_t *s)
{
    struct master_tier *t = s->tier;
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    drop_node_t *list = t->recent;
    t->recent = NULL;
    t->rtail = &t->recent;
    t->nrecent = 0;
    t->recent_bytes = 0;
    pthread_mutex_unlock(&t->mu);
    uint64_t now = mc_now_us(), window = recent_window(t), tried = 0;
    uint64_t since = now > window ? now - window : 0;
    for (drop_node_t *n = list, *next; n != NULL; n = next) {
        next = n->next;
        if (n->at_us >= since) {
            /* caught up and not serving yet: an absent key is removed for
             * good, and no put of it can be writing a new file */
            unlink_ctx_t c = {t, n};
            if (mc_master_tier_if_absent(s->m, n->key, n->len, do_unlink, &c) == MC_OK)
                tried++;
        }
        mc_free(n);
    }
    if (tried > 0)
        MC_INFO(TIER,
                "taking over: %llu files of objects removed lately deleted (if the old "
                "leader had not)",
                (unsigned long long)tried);
}

void master_tier_stop(master_srv_t *s)
{
    struct master_tier *t = s->tier;
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->started)
        pthread_join(t->thread, NULL);
    for (drop_node_t *n = t->head, *next; n != NULL; n = next) {
        next = n->next;
        mc_free(n);
    }
    for (drop_node_t *n = t->recent, *next; n != NULL; n = next) {
        next = n->next;
        mc_free(n);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    mc_free(t->dir);
    mc_free(t->cluster);
    mc_free(t);
    s->tier = NULL;
}

void master_tier_metrics(const master_srv_t *s, mc_buf_t *b)
{
    const struct master_tier *t = s->tier;
    if (t == NULL)
        return;
    mc_master_tier_stats_t ts;
    mc_master_tier_stats(s->m, &ts);
    struct {
        const char *name, *type, *help;
        uint64_t v;
    } rows[] = {
        {"master_tier_restored_objects", "gauge", "Objects rebuilt from tier files at start.",
         t->restored},
        {"master_tier_scan_skipped_files", "gauge",
         "Tier files the startup scan skipped (corrupt or misplaced).", t->scan_bad},
        {"master_tier_scan_temp_files", "gauge", "Temp files the startup scan saw.", t->scan_temps},
        {"master_tier_scan_duration_ms", "gauge", "Duration of the startup scan.", t->scan_ms},
        {"master_tier_files_deleted_total", "counter", "Tier files deleted with their objects.",
         atomic_load(&t->deleted)},
        {"master_tier_file_delete_failures_total", "counter", "Tier file deletions that failed.",
         atomic_load(&t->delete_failed)},
        {"master_tier_deletions_skipped_total", "counter",
         "Deletions skipped because the key was put again.", atomic_load(&t->skipped)},
        {"master_tier_deletions_queued", "gauge", "Tier file deletions waiting.",
         atomic_load(&t->queued)},
        {"master_tier_objects", "gauge", "Objects with a DISK replica.", ts.disk_objects},
        {"master_tier_bytes", "gauge", "Bytes of objects with a DISK replica.", ts.disk_bytes},
        {"master_tier_quota_bytes", "gauge", "server.tier_quota (0 = none).", s->opts.tier_quota},
        {"master_tier_quota_evicted_total", "counter",
         "Disk-only objects removed to keep the tier under its quota.", ts.disk_evicted},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        mc_prom_head(b, rows[i].name, rows[i].type, rows[i].help);
        mc_prom_sample(b, rows[i].name, NULL, rows[i].v);
    }
}

void master_offload_metrics(const master_srv_t *s, mc_buf_t *b)
{
    if (!s->opts.master.enable_offload)
        return;
    mc_master_offload_stats_t os;
    mc_master_offload_stats(s->m, &os);
    struct {
        const char *name, *type, *help;
        uint64_t v;
    } rows[] = {
        {"master_offload_objects", "gauge", "Objects with a LOCAL_DISK replica.", os.ldisk_objects},
        {"master_offload_bytes", "gauge", "Bytes of objects with a LOCAL_DISK replica.",
         os.ldisk_bytes},
        {"master_offload_queued", "gauge", "Offload requests waiting for their node's poll.",
         os.queued},
        {"master_offload_in_flight", "gauge", "Offload requests sent, not answered.", os.in_flight},
        {"master_offload_taken_over_total", "counter",
         "LOCAL_DISK replicas a node back (the same offload directory, another segment) took "
         "over at its report.",
         os.taken_over_total},
        {"master_offload_deletions_again_total", "counter",
         "Deletions handed to a node again: it said it had not got the answer that carried "
         "them (a connection broke).",
         os.deletions_again_total},
        {"master_offload_deletions_lost_total", "counter",
         "Deletions of removed objects' files not kept (over 1M waiting, or no memory): their "
         "node's next start report keeps only the files of objects the master knows.",
         os.deletions_lost_total},
        {"master_offload_lost_refused_total", "counter",
         "Files a node reported that were refused (deleted) because deletions for its "
         "directory were lost: the removed objects among them do not come back.",
         os.lost_refused_total},
        {"master_offload_deletions", "gauge",
         "Deletions of removed objects' files their nodes have not done (a standby's: those it "
         "would hand out as the leader).",
         os.deletions},
        {"master_offload_requested_total", "counter", "Objects nodes were asked to persist.",
         os.requested_total},
        {"master_offload_persisted_total", "counter", "Objects nodes persisted.",
         os.persisted_total},
        {"master_offload_failed_total", "counter",
         "Persist requests that failed on the node (disk full, quota).", os.failed_total},
        {"master_offload_timeouts_total", "counter", "Requests their node did not answer in time.",
         os.timeouts_total},
        {"master_offload_refused_total", "counter",
         "Objects not queued (queue or per-cycle cap full).", os.refused_total},
        {"master_offload_spilled_total", "counter",
         "Objects whose memory went once their node had them on disk.", os.spilled_total},
        {"master_offload_loads_total", "counter", "Disk-only objects loaded by their node.",
         os.loads_total},
        {"master_offload_load_failures_total", "counter",
         "Loads that failed (corrupt or missing file: the replica is dropped).",
         os.load_failed_total},
        {"master_offload_promoted_total", "counter", "Loads kept in DRAM by promotion_on_hit.",
         os.promoted_total},
        {"master_offload_own_reads_total", "counter",
         "Gets of disk-only objects answered to the node holding them, which read its own disk (no "
         "LOAD).",
         os.own_reads_total},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        mc_prom_head(b, rows[i].name, rows[i].type, rows[i].help);
        mc_prom_sample(b, rows[i].name, NULL, rows[i].v);
    }
}
