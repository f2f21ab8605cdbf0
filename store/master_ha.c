/*
 * master_ha.c - the HA thread of mooncake-master: election, lease renewal,
 * journal appends (leader), journal following (standby). The scheme, the
 * Redis keys and the guarantees are described in master_ha.h.
 *
 * Roles (s->role, written only by this thread, read by RPC handlers):
 *
 *   STANDBY --no lease seen, elect script won, caught up--> LEADER
 *   LEADER --renewal refused, append FENCED, Redis unreachable past the
 *            lease, append outcome unknown--> STANDBY (state rebuilt)
 *   STANDBY --a journal record it cannot decode--> FAILED (for good)
 *
 * A leader that steps down cannot trust its in-memory state (it may hold
 * mutations whose records never reached the stream), so it throws the master
 * core away and replays the journal from the start into a fresh one. The
 * swap happens after every reactor has run an empty message with the role
 * already changed: from then on no RPC handler is inside the old core (they
 * all check the role first), and the swap itself runs on reactor 0, where the
 * tick and the HTTP handlers run.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <unistd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "reactor/fsm.h"
#include "store/ha_redis.h"
#include "store/master_ha.h"
#include "store/master_server_int.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define READ_COUNT 512      /* stream entries per XREAD */
#define POLL_MAX_US 250000  /* a standby checks the lease at least this often */
#define RECONNECT_US 100000 /* between connection attempts */
/* A snapshot larger than ha.snapshot_chunk is stored as a list of chunks,
 * each of whole records and about that size (a Redis string holds at most
 * 512 MB): built in a key of its own (SNAP_TMP_TTL_MS: one left by a
 * standby killed meanwhile goes by itself), then renamed in place. */
#define SNAP_TMP_TTL_MS 600000
#define SNAP_LOAD_TRIES 3        /* a snapshot replaced while a standby reads it: read again */
#define SNAP_TIMEOUT_US 30000000 /* a snapshot's commands: a chunk moves in time */
#define LAT_BUCKETS 12           /* append latency histogram: 0.1 ms .. 204.8 ms, +Inf */

static const char elect_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end "
    "local v = redis.call('INCR', KEYS[2]) "
    "redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. v .. ' ' .. ARGV[2], 'PX', ARGV[3]) "
    "return v";
static const char renew_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                                "return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
static const char release_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                                  "return redis.call('DEL', KEYS[1]) end return 0";
/* The fencing check and the append in one script: nothing can run between
 * them, so a record enters the stream only while its writer holds the lease.
 * KEYS[3] (head) holds the number of the last record appended: a batch sent
 * again after a lost answer (ARGV[3] <= head) is not stored twice, so an
 * append whose outcome is unknown can simply be retried. */
/* Store a snapshot taken at stream entry ARGV[2] unless a newer one is
 * there, then trim the stream up to it and say so in KEYS[4] (followers
 * behind that point reload the snapshot instead of missing entries). The
 * snapshot is ARGV[1], or (ARGV[4] "list") the list of chunks in KEYS[5],
 * renamed in place (-1: that list is gone, expired). */
static const char snap_lua[] =
    "local function id(s) local a, b = string.match(s, '^(%d+)-(%d+)$') "
    "return tonumber(a), tonumber(b) end "
    "local cur = redis.call('GET', KEYS[2]) "
    "if cur then local a1, b1 = id(ARGV[2]) local a2, b2 = id(string.match(cur, '^(%S+)')) "
    "if a1 < a2 or (a1 == a2 and b1 <= b2) then redis.call('DEL', KEYS[5]) return 0 end end "
    "if ARGV[4] == 'list' then "
    "if redis.call('EXISTS', KEYS[5]) == 0 then return -1 end "
    "redis.call('RENAME', KEYS[5], KEYS[1]) redis.call('PERSIST', KEYS[1]) "
    "else redis.call('SET', KEYS[1], ARGV[1]) end "
    "redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. ARGV[3]) "
    "redis.call('XTRIM', KEYS[3], 'MINID', ARGV[2]) "
    "redis.call('SET', KEYS[4], ARGV[2]) "
    "return 1";
/* The snapshot's form: {type, its "ID SEQ"} and, for a string, the
 * snapshot; for a list, its number of chunks. One script: a snapshot
 * replaced meanwhile cannot mix two forms. */
static const char snap_head_lua[] =
    "local t = redis.call('TYPE', KEYS[1]).ok "
    "local id = redis.call('GET', KEYS[2]) or '' "
    "if t == 'list' then return {t, id, redis.call('LLEN', KEYS[1])} end "
    "if t == 'string' then return {t, id, redis.call('GET', KEYS[1])} end "
    "return {t, id}";
/* The first chunk ARGV[1] of a snapshot list being built in KEYS[1], which
 * expires after ARGV[2] ms: in one step, so that no list without a time to
 * live is left by a standby that dies (or loses Redis) meanwhile. */
static const char snap_first_lua[] =
    "redis.call('DEL', KEYS[1]) redis.call('RPUSH', KEYS[1], ARGV[1]) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1";
/* Chunk ARGV[1] of a listed snapshot, with the snapshot's "ID SEQ" (a
 * reader that sees another one started on a snapshot since replaced). */
static const char snap_chunk_lua[] =
    "return {redis.call('GET', KEYS[2]) or '', redis.call('LINDEX', KEYS[1], ARGV[1]) or ''}";
/* ARGV[4] is the number of the last record the leader stored before this
 * batch: a head behind it means the journal lost records (a Redis failover
 * to a replica that never got them): GAP, and the leader steps down. */
static const char append_lua[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then "
    "return redis.error_reply('FENCED the lease is not ours') end "
    "local h = redis.call('GET', KEYS[3]) "
    "if h and tonumber(h) >= tonumber(ARGV[3]) then return 'DUP' end "
    "if (h and tonumber(h) or 0) < tonumber(ARGV[4]) then "
    "return redis.error_reply('GAP the journal lost records up to ' .. ARGV[4]) end "
    "local id = redis.call('XADD', KEYS[2], '*', 'r', ARGV[2], 's', ARGV[3]) "
    "redis.call('SET', KEYS[3], ARGV[3]) "
    "return id";

struct ha {
    master_srv_t *s;
    mc_ha_url_t url;
    char k_lease[MC_HA_CLUSTER_MAX + 32], k_view[MC_HA_CLUSTER_MAX + 32];
    char k_journal[MC_HA_CLUSTER_MAX + 32], k_head[MC_HA_CLUSTER_MAX + 32];
    char k_snap[MC_HA_CLUSTER_MAX + 32], k_snap_id[MC_HA_CLUSTER_MAX + 32];
    char k_trimmed[MC_HA_CLUSTER_MAX + 32];
    uint64_t snapshot_records; /* a standby snapshots after this many new records (0: never) */
    uint64_t snap_seq;         /* record number of the newest snapshot we know of */
    uint64_t snap_chunk;       /* ha.snapshot_chunk: larger snapshots go in chunks of this */
    char k_snap_tmp[MC_HA_CLUSTER_MAX + 64]; /* our chunked snapshot while it is built */
    char addr[MC_HA_ADDR_MAX];               /* what clients dial */
    char nonce[24];
    char lease_val[MC_HA_ADDR_MAX + 64]; /* ours, while leading */
    uint64_t ttl_us, flush_us;
    int sync; /* mc_ha_sync_t */
    pthread_t thread;
    int started;
    _Atomic int stop;
    mc_ha_redis_t *rc;
    int down_logged;
    char desc[MC_HA_HOST_MAX * 2]; /* the backend, for log lines */
    char peer[MC_HA_HOST_MAX + 8]; /* the Redis server of the last connection (written
                                    * under lmu) */
    int check_pos;                 /* a new connection: is our journal position still there? */
    unsigned wait_n;               /* replicas that must have a write before it counts */
    int wait_logged;

    /* journal: records not yet sent, appended by the hook */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mc_buf_t buf, sending;
    uint64_t seq;              /* global number of the last record in buf (mu) */
    _Atomic uint64_t seq_pub;  /* the same, for handlers */
    _Atomic uint64_t flushed;  /* records up to this are in Redis */
    _Atomic uint64_t free_seq; /* the last record that freed segment space */
    int kicked;                /* mu */
    int encode_failed;         /* mu: a record could not be encoded */

    /* leader */
    int64_t view;
    uint64_t renew_at_us;

    /* follower */
    char last_id[48];     /* stream id applied last ("0-0": none) */
    uint64_t applied_seq; /* global number of the last record applied */
    uint64_t del_mark;    /* offload DELETEs replayed up to del_mark_us */
    uint64_t del_mark_us;

    pthread_mutex_t lmu;
    char leader[MC_HA_ADDR_MAX]; /* lmu */

    /* metrics */
    _Atomic uint64_t elections, renew_ok, renew_fail, appends, append_fail, demotions;
    _Atomic uint64_t records_applied, entries_applied, apply_errors, records_journaled;
    _Atomic uint64_t lag_ms, lag_records, head_seq;
    _Atomic uint64_t lat_buckets[LAT_BUCKETS + 1];
    _Atomic uint64_t lat_sum_us, lat_count;
    _Atomic uint64_t failover_last_us; /* time from first seeing no lease to serving */
    _Atomic uint64_t snapshots_taken, snapshots_loaded, snapshot_bytes;
    _Atomic uint64_t wait_fail, rewinds;
};

/* The role machine (reactor/fsm.h; the diagram at the top of this file). */
static const char *const role_names[] = {
    [MC_HA_ROLE_NONE] = "single",
    [MC_HA_ROLE_STANDBY] = "standby",
    [MC_HA_ROLE_LEADER] = "leader",
    [MC_HA_ROLE_FAILED] = "failed",
};
static const uint64_t role_moves[] = {
    [MC_HA_ROLE_NONE] = MC_FSM_BIT(MC_HA_ROLE_STANDBY),
    [MC_HA_ROLE_STANDBY] = MC_FSM_BIT(MC_HA_ROLE_LEADER) | MC_FSM_BIT(MC_HA_ROLE_FAILED),
    [MC_HA_ROLE_LEADER] = MC_FSM_BIT(MC_HA_ROLE_STANDBY),
    [MC_HA_ROLE_FAILED] = 0,
};
static const mc_fsm_desc_t role_fsm = MC_FSM_DESC("ha_role", MC_LOGC_HA, role_names, role_moves);

/* The only writer of s->role while the HA thread runs (start sets STANDBY
 * before it, a failed start puts NONE back). An illegal change is a bug:
 * logged at ERROR and ignored. */
static void set_role(ha_t *h, mc_ha_role_t r)
{
    int old = atomic_load(&h->s->role);
    if (old == (int)r || mc_fsm_check(&role_fsm, h, (unsigned)old, (unsigned)r) != MC_OK)
        return;
    atomic_store(&h->s->role, (int)r);
    MC_INFO(HA, "role %s -> %s", mc_ha_role_name((mc_ha_role_t)old), mc_ha_role_name(r));
}

static mc_ha_role_t role(const ha_t *h)
{
    return (mc_ha_role_t)atomic_load(&h->s->role);
}

/* last_id is written by the HA thread only, read by /ha_status: lmu. */
static void set_last_id(ha_t *h, const char *id)
{
    pthread_mutex_lock(&h->lmu);
    snprintf(h->last_id, sizeof(h->last_id), "%s", id);
    pthread_mutex_unlock(&h->lmu);
}

static void set_leader(ha_t *h, const char *addr)
{
    pthread_mutex_lock(&h->lmu);
    snprintf(h->leader, sizeof(h->leader), "%s", addr);
    pthread_mutex_unlock(&h->lmu);
}

void master_ha_leader(master_srv_t *s, char *buf, size_t n)
{
    if (s->ha == NULL) {
        buf[0] = '\0';
        return;
    }
    pthread_mutex_lock(&s->ha->lmu);
    snprintf(buf, n, "%s", s->ha->leader);
    pthread_mutex_unlock(&s->ha->lmu);
}

/* ------------------------------------------------------------- journal */

/* The master core's hook: any RPC reactor, under the mutation's lock. */
static void on_journal(void *arg, const mc_master_jrec_t *r)
{
    ha_t *h = arg;
    pthread_mutex_lock(&h->mu);
    size_t before = mc_buf_used(&h->buf);
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &h->buf);
    mc_jrec_encode(&w, r);
    if (w.err != MC_OK) {
        /* the mutation happened but cannot be journaled: this leader's state
         * and the journal now differ, so it must step down */
        h->buf.len = h->buf.off + before;
        h->encode_failed = 1;
        pthread_cond_signal(&h->cv);
    } else {
        h->seq++;
        if (r->type == MC_JREC_DROP || r->type == MC_JREC_SPILL || r->type == MC_JREC_RELEASE ||
            r->type == MC_JREC_CLIENT_EXPIRE)
            atomic_store_explicit(&h->free_seq, h->seq, memory_order_release);
        atomic_store_explicit(&h->seq_pub, h->seq, memory_order_release);
    }
    pthread_mutex_unlock(&h->mu);
}

int master_ha_must_wait(master_srv_t *s, uint64_t *seq)
{
    ha_t *h = s->ha;
    if (h == NULL || h->sync != MC_HA_SYNC_STRICT)
        return 0;
    uint64_t q = atomic_load_explicit(&h->seq_pub, memory_order_acquire);
    if (q <= atomic_load_explicit(&h->flushed, memory_order_acquire))
        return 0;
    *seq = q;
    return 1;
}

int master_ha_frees_pending(master_srv_t *s, uint64_t *seq)
{
    ha_t *h = s->ha;
    if (h == NULL || h->sync != MC_HA_SYNC_STRICT)
        return 0;
    uint64_t q = atomic_load_explicit(&h->free_seq, memory_order_acquire);
    if (q <= atomic_load_explicit(&h->flushed, memory_order_acquire))
        return 0;
    *seq = q;
    return 1;
}

uint64_t master_ha_seq(master_srv_t *s)
{
    return s->ha != NULL ? atomic_load_explicit(&s->ha->seq_pub, memory_order_acquire) : 0;
}

uint64_t master_ha_flushed(master_srv_t *s)
{
    return s->ha != NULL ? atomic_load_explicit(&s->ha->flushed, memory_order_acquire) : 0;
}

void master_ha_kick(master_srv_t *s)
{
    ha_t *h = s->ha;
    pthread_mutex_lock(&h->mu);
    h->kicked = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void waiters_on_reactor(mc_reactor_t *r, void *arg, mc_status_t st)
{
    master_srv_t *s = arg;
    if (st != MC_OK)
        return; /* the reactor stops: the requests go with the server */
    master_srv_complete_waiters(s, &s->scratch[mc_reactor_index(r)]);
}

/* Tell every reactor with held replies to look at them again. */
static void notify_waiters(ha_t *h)
{
    master_srv_t *s = h->s;
    for (unsigned i = 0; i < s->nscratch; i++)
        if (atomic_load(&s->scratch[i].nwaiters) > 0)
            mc_reactor_call(mc_reactor_group_get(s->g, i), waiters_on_reactor, s);
}

/* ------------------------------------------------------------- redis */

/* A command's timeout: a third of the lease, at most 1 s. */
static uint64_t cmd_timeout_us(const ha_t *h)
{
    return h->ttl_us / 3 < 1000000 ? h->ttl_us / 3 : 1000000;
}

static int ensure_conn(ha_t *h)
{
    if (h->rc != NULL)
        return 1;
    uint64_t t = cmd_timeout_us(h);
    mc_status_t st = mc_ha_redis_connect(&h->url, t, &h->rc);
    if (st != MC_OK) {
        if (!h->down_logged)
            MC_WARN(HA, "%s unreachable (%s); retrying every %d ms", h->desc,
                    mc_ha_redis_connect_err(), RECONNECT_US / 1000);
        h->down_logged = 1;
        h->rc = NULL;
        return 0;
    }
    const char *peer = mc_ha_redis_peer(h->rc);
    if (h->down_logged)
        MC_INFO(HA, "%s reachable again (%s)", h->desc, peer);
    else if (h->url.sentinel && h->peer[0] != '\0' && strcmp(peer, h->peer) != 0)
        MC_INFO(HA, "redis primary of '%s' moved from %s to %s", h->url.sent.name, h->peer, peer);
    pthread_mutex_lock(&h->lmu); /* /ha_status reads it */
    snprintf(h->peer, sizeof(h->peer), "%s", peer);
    pthread_mutex_unlock(&h->lmu);
    h->down_logged = 0;
    h->check_pos = 1;
    return 1;
}

/* Strict with Sentinels: 1 once wait_n replicas have every write this
 * connection made (Redis WAIT), so a failover to one of them keeps it;
 * 0 when they did not confirm within a third of the lease (at most 1 s):
 * the caller drops the connection, and the next one asks the Sentinels
 * again in case the primary changed. */
static int replicated(ha_t *h)
{
    if (h->wait_n == 0)
        return 1;
    if (h->rc == NULL)
        return 0;
    uint64_t ms = h->ttl_us / 3000;
    ms = ms > 1000 ? 1000 : ms < 10 ? 10 : ms;
    unsigned acked = 0;
    mc_status_t st = mc_ha_redis_wait(h->rc, h->wait_n, ms, &acked);
    if (st == MC_OK && acked >= h->wait_n) {
        if (h->wait_logged)
            MC_INFO(HA, "redis %s: writes reach %u replica(s) again", h->peer, acked);
        h->wait_logged = 0;
        return 1;
    }
    atomic_fetch_add(&h->wait_fail, 1);
    if (!h->wait_logged)
        MC_WARN(HA,
                "redis %s: %s; nothing is acknowledged until %u replica(s) confirm "
                "(ha.wait_replicas)",
                h->peer,
                st == MC_OK ? (acked == 0 ? "no replica confirmed a write within the WAIT"
                                          : "too few replicas confirmed a write within the WAIT")
                            : mc_ha_redis_err(h->rc),
                h->wait_n);
    h->wait_logged = 1;
    return 0;
}

static void drop_conn(ha_t *h)
{
    mc_ha_redis_close(h->rc);
    h->rc = NULL;
}

/* EVAL script with 1..5 keys and up to 4 args. */
static mc_status_t eval(ha_t *h, const char *script, int nkeys, const char *const *keys, int nargs,
                        const char *const *args, const size_t *arg_lens, mc_ha_reply_t **out)
{
    const char *argv[16];
    size_t lens[16];
    char nk[4];
    snprintf(nk, sizeof(nk), "%d", nkeys);
    int n = 0;
    argv[n] = "EVAL";
    lens[n++] = 4;
    argv[n] = script;
    lens[n++] = strlen(script);
    argv[n] = nk;
    lens[n++] = strlen(nk);
    for (int i = 0; i < nkeys; i++) {
        argv[n] = keys[i];
        lens[n++] = strlen(keys[i]);
    }
    for (int i = 0; i < nargs; i++) {
        argv[n] = args[i];
        lens[n++] = arg_lens != NULL ? arg_lens[i] : strlen(args[i]);
    }
    mc_ha_reply_t *r = NULL;
    mc_status_t st = mc_ha_redis_cmd(h->rc, &r, n, argv, lens);
    if (st == MC_ERR_CONN_CLOSED)
        drop_conn(h);
    if (st == MC_OK)
        *out = r;
    return st;
}

/* ------------------------------------------------------------- replay */

/* Apply the records of one stream entry. Returns 0, or -1 when a record
 * cannot be decoded (the caller stops following). */
static int apply_entry(ha_t *h, const char *id, const uint8_t *p, size_t len, uint64_t seq)
{
    mc_mp_reader_t rd;
    mc_mp_reader_init(&rd, p, len);
    mc_jrec_scratch_t sc;
    uint64_t now = mc_now_us();
    size_t n = 0;
    while (!mc_mp_at_end(&rd)) {
        mc_master_jrec_t r;
        const char *why = NULL;
        size_t at = (size_t)(rd.p - p);
        if (mc_jrec_decode(&rd, &r, &sc, &why) != MC_OK) {
            MC_ERROR(HA,
                     "journal entry %s: record %zu (byte %zu of %zu) is malformed: %s; this "
                     "master stops following the journal and will not lead",
                     id, n, at, len, why != NULL ? why : "?");
            return -1;
        }
        mc_status_t st = mc_master_apply(h->s->m, &r, now);
        if (st != MC_OK) {
            atomic_fetch_add(&h->apply_errors, 1);
            MC_ERROR(HA, "journal entry %s: record %zu (type %d, key '%.*s') does not apply: %s",
                     id, n, (int)r.type, (int)(r.key_len < 64 ? r.key_len : 64), r.key ? r.key : "",
                     mc_status_str(st));
        }
        n++;
    }
    atomic_fetch_add(&h->records_applied, n);
    atomic_fetch_add(&h->entries_applied, 1);
    set_last_id(h, id);
    if (seq != 0)
        h->applied_seq = seq;
    return 0;
}

/* Order of two stream ids "MS-SEQ": <0, 0, >0. */
static int id_cmp(const char *a, const char *b)
{
    unsigned long long am = 0, as = 0, bm = 0, bs = 0;
    sscanf(a, "%llu-%llu", &am, &as);
    sscanf(b, "%llu-%llu", &bm, &bs);
    if (am != bm)
        return am < bm ? -1 : 1;
    return as < bs ? -1 : as > bs;
}

/* 1 when entries after last_id were trimmed (a snapshot must be loaded),
 * 0 when not, -1 on a connection failure. */
static int trimmed_past(ha_t *h)
{
    const char *argv[2] = {"GET", h->k_trimmed};
    size_t lens[2] = {3, strlen(h->k_trimmed)};
    mc_ha_reply_t *r = NULL;
    if (mc_ha_redis_cmd(h->rc, &r, 2, argv, lens) != MC_OK) {
        drop_conn(h);
        return -1;
    }
    int gap = mc_ha_reply_type(r) == MC_HA_REPLY_STR && id_cmp(mc_ha_reply_str(r), h->last_id) > 0;
    mc_ha_redis_free(r);
    return gap;
}

static int is_str(const mc_ha_reply_t *r)
{
    return mc_ha_reply_str(r) != NULL; /* a string or a status */
}

/* One XREAD (block_ms < 0: no BLOCK). Returns entries applied, or -1 on a
 * connection failure or a bad reply (logged), -2 on a malformed record, -3
 * when the entries after ours were trimmed (load the snapshot). */
static long read_journal(ha_t *h, long block_ms)
{
    char cnt[16], blk[24];
    snprintf(cnt, sizeof(cnt), "%d", READ_COUNT);
    snprintf(blk, sizeof(blk), "%ld", block_ms);
    const char *argv[9];
    int n = 0;
    argv[n++] = "XREAD";
    argv[n++] = "COUNT";
    argv[n++] = cnt;
    if (block_ms >= 0) {
        argv[n++] = "BLOCK";
        argv[n++] = blk;
        mc_ha_redis_set_timeout(h->rc, (uint64_t)block_ms * 1000 + 1000000);
    }
    argv[n++] = "STREAMS";
    argv[n++] = h->k_journal;
    argv[n++] = h->last_id;
    size_t lens[9];
    for (int i = 0; i < n; i++)
        lens[i] = strlen(argv[i]);
    mc_ha_reply_t *r = NULL;
    mc_status_t st = mc_ha_redis_cmd(h->rc, &r, n, argv, lens);
    if (block_ms >= 0 && h->rc != NULL)
        mc_ha_redis_set_timeout(h->rc, cmd_timeout_us(h));
    if (st != MC_OK) {
        MC_WARN(HA, "XREAD of %s failed: %s", h->k_journal, mc_ha_redis_err(h->rc));
        drop_conn(h);
        return -1;
    }
    long applied = 0;
    if (mc_ha_reply_type(r) == MC_HA_REPLY_NIL) {
        mc_ha_redis_free(r);
        return 0;
    }
    /* Read before checking: a trim after the check cannot remove what this
     * reply already holds, and one before it is seen now. */
    int gap = trimmed_past(h);
    if (gap != 0) {
        mc_ha_redis_free(r);
        return gap < 0 ? -1 : -3;
    }
    /* [[key, [[id, [field, value, ...]], ...]]] */
    const mc_ha_reply_t *stream = mc_ha_reply_at(r, 0);
    if (mc_ha_reply_count(r) != 1 || mc_ha_reply_count(stream) != 2 ||
        mc_ha_reply_type(mc_ha_reply_at(stream, 1)) != MC_HA_REPLY_ARRAY)
        goto bad;
    const mc_ha_reply_t *ents = mc_ha_reply_at(stream, 1);
    uint64_t wall_ms = mc_wall_us() / 1000;
    for (size_t i = 0; i < mc_ha_reply_count(ents); i++) {
        const mc_ha_reply_t *e = mc_ha_reply_at(ents, i);
        if (mc_ha_reply_count(e) != 2 || !is_str(mc_ha_reply_at(e, 0)) ||
            mc_ha_reply_type(mc_ha_reply_at(e, 1)) != MC_HA_REPLY_ARRAY)
            goto bad;
        const char *id = mc_ha_reply_str(mc_ha_reply_at(e, 0));
        const mc_ha_reply_t *f = mc_ha_reply_at(e, 1);
        const uint8_t *rec = NULL;
        size_t rlen = 0;
        uint64_t seq = 0;
        for (size_t k = 0; k + 1 < mc_ha_reply_count(f); k += 2) {
            const mc_ha_reply_t *name = mc_ha_reply_at(f, k), *val = mc_ha_reply_at(f, k + 1);
            if (!is_str(name) || !is_str(val))
                goto bad;
            if (strcmp(mc_ha_reply_str(name), "r") == 0) {
                rec = (const uint8_t *)mc_ha_reply_str(val);
                rlen = mc_ha_reply_strlen(val);
            } else if (strcmp(mc_ha_reply_str(name), "s") == 0) {
                seq = strtoull(mc_ha_reply_str(val), NULL, 10);
            }
        }
        if (rec == NULL) {
            MC_ERROR(HA, "journal entry %s has no field r; this master stops following", id);
            mc_ha_redis_free(r);
            return -2;
        }
        if (apply_entry(h, id, rec, rlen, seq) != 0) {
            mc_ha_redis_free(r);
            return -2;
        }
        uint64_t id_ms = strtoull(id, NULL, 10);
        atomic_store(&h->lag_ms, wall_ms > id_ms ? wall_ms - id_ms : 0);
        applied++;
    }
    mc_ha_redis_free(r);
    return applied;
bad:
    MC_ERROR(HA, "XREAD of %s: a reply of an unexpected shape (type %d); reconnecting",
             h->k_journal, (int)mc_ha_reply_type(r));
    mc_ha_redis_free(r);
    drop_conn(h);
    return -1;
}

/* ------------------------------------------------------------ snapshots */

/* A snapshot being encoded: the records, and where to cut them into
 * chunks (after the record that makes a chunk reach `chunk` bytes). */
typedef struct snap_enc {
    mc_mp_writer_t w;
    uint64_t chunk;
    size_t *cuts; /* chunk ends, ascending; the last is the end */
    size_t ncuts, cap;
    int nomem;
} snap_enc_t;

static void snap_cut(snap_enc_t *e, size_t at)
{
    if (e->ncuts == e->cap) {
        size_t nc = e->cap ? e->cap * 2 : 16;
        size_t *nv = mc_realloc(e->cuts, nc * sizeof(*nv));
        if (nv == NULL) {
            e->nomem = 1;
            return;
        }
        e->cuts = nv;
        e->cap = nc;
    }
    e->cuts[e->ncuts++] = at;
}

static void to_buf(void *arg, const mc_master_jrec_t *r)
{
    snap_enc_t *e = arg;
    mc_jrec_encode(&e->w, r);
    size_t used = mc_buf_used(e->w.buf), last = e->ncuts ? e->cuts[e->ncuts - 1] : 0;
    if (used - last >= e->chunk)
        snap_cut(e, used);
}

/* Build our chunked snapshot in k_snap_tmp: the chunks [cuts[i-1],
 * cuts[i]) of b, a command each (each under Redis' limits however large
 * the snapshot), the list set to expire with its first chunk should we
 * never finish it. A failure is logged and drops the connection. */
static mc_status_t snap_push_chunks(ha_t *h, const mc_buf_t *b, const size_t *cuts, size_t n)
{
    const char *p = (const char *)mc_buf_head(b);
    char ttl[24];
    snprintf(ttl, sizeof(ttl), "%d", SNAP_TMP_TTL_MS);
    const char *keys[1] = {h->k_snap_tmp};
    const char *args[2] = {p, ttl};
    size_t al[2] = {cuts[0], strlen(ttl)};
    mc_ha_reply_t *r = NULL;
    mc_status_t st = eval(h, snap_first_lua, 1, keys, 2, args, al, &r);
    for (size_t i = 1; st == MC_OK && i < n; i++) {
        mc_ha_redis_free(r);
        r = NULL;
        const char *push[3] = {"RPUSH", h->k_snap_tmp, p + cuts[i - 1]};
        size_t pl[3] = {5, strlen(h->k_snap_tmp), cuts[i] - cuts[i - 1]};
        st = mc_ha_redis_cmd(h->rc, &r, 3, push, pl);
    }
    mc_ha_redis_free(r);
    if (st != MC_OK) {
        MC_WARN(HA, "snapshot of %zu bytes in %zu chunks not stored: %s", cuts[n - 1], n,
                h->rc != NULL ? mc_ha_redis_err(h->rc) : "the connection was lost");
        drop_conn(h); /* (a timed-out connection cannot be reused) */
    }
    return st;
}

/* Standby: write our state (as of last_id) to Redis and trim the stream:
 * one string, or (larger than ha.snapshot_chunk) a list of chunks. */
static void take_snapshot(ha_t *h)
{
    mc_buf_t b = MC_BUF_INIT;
    snap_enc_t e = {.chunk = h->snap_chunk};
    mc_mp_writer_init(&e.w, &b);
    mc_master_snapshot(h->s->m, to_buf, &e);
    size_t used = mc_buf_used(&b);
    if (e.ncuts == 0 || e.cuts[e.ncuts - 1] != used)
        snap_cut(&e, used);
    if (e.w.err != MC_OK || e.nomem) {
        MC_ERROR(HA, "snapshot: out of memory while encoding the state");
        mc_free(e.cuts);
        mc_buf_fini(&b);
        return;
    }
    int list = e.ncuts > 1;
    uint64_t t0 = mc_now_us();
    mc_ha_redis_set_timeout(h->rc, SNAP_TIMEOUT_US);
    if (list && snap_push_chunks(h, &b, e.cuts, e.ncuts) != MC_OK) {
        h->snap_seq = h->applied_seq; /* tried again after ha.snapshot_records more */
        if (h->rc != NULL)
            mc_ha_redis_set_timeout(h->rc, cmd_timeout_us(h));
        mc_free(e.cuts);
        mc_buf_fini(&b);
        return;
    }
    const char *keys[5] = {h->k_snap, h->k_snap_id, h->k_journal, h->k_trimmed, h->k_snap_tmp};
    char sq[24];
    snprintf(sq, sizeof(sq), "%llu", (unsigned long long)h->applied_seq);
    const char *args[4] = {!list && used ? (const char *)mc_buf_head(&b) : "", h->last_id, sq,
                           list ? "list" : "string"};
    size_t lens[4] = {list ? 0 : used, strlen(h->last_id), strlen(sq), strlen(args[3])};
    mc_ha_reply_t *r = NULL;
    if (eval(h, snap_lua, 5, keys, 4, args, lens, &r) == MC_OK) {
        if (mc_ha_reply_type(r) == MC_HA_REPLY_INT && mc_ha_reply_int(r) == 1) {
            atomic_fetch_add(&h->snapshots_taken, 1);
            atomic_store(&h->snapshot_bytes, used);
            MC_INFO(HA,
                    "snapshot at journal entry %s (record %llu): %zu bytes (%zu chunk%s) in %llu "
                    "ms; journal trimmed",
                    h->last_id, (unsigned long long)h->applied_seq, used, e.ncuts,
                    e.ncuts == 1 ? "" : "s", (unsigned long long)((mc_now_us() - t0) / 1000));
        } else if (mc_ha_reply_type(r) == MC_HA_REPLY_INT && mc_ha_reply_int(r) == -1) {
            MC_WARN(HA, "snapshot not stored: its chunks expired before it was complete");
        }
        mc_ha_redis_free(r);
    } else if (h->rc != NULL) {
        MC_WARN(HA, "snapshot not stored: %s", mc_ha_redis_err(h->rc));
    }
    h->snap_seq = h->applied_seq; /* ours, or a newer one is there */
    if (h->rc != NULL)
        mc_ha_redis_set_timeout(h->rc, cmd_timeout_us(h));
    mc_free(e.cuts);
    mc_buf_fini(&b);
}

static void swap_master_on_r0(void *arg);

/* A fresh master core in place of the current one (reactor 0 swaps it, and
 * this thread waits): its count of DELETEs starts over, and so does the
 * mark a standby forgets them by (forget_deletions). */
static void new_core(ha_t *h)
{
    mc_rpc_run_on(mc_reactor_group_get(h->s->g, 0), swap_master_on_r0, h->s);
    h->del_mark = 0;
    h->del_mark_us = mc_now_us();
}

/* The snapshot's "ID SEQ" (reply r) into id and *seq: 1, or 0 when it is
 * not one. */
static int snap_id_parse(const mc_ha_reply_t *r, char *id, unsigned long long *seq)
{
    return r != NULL && mc_ha_reply_type(r) == MC_HA_REPLY_STR &&
           sscanf(mc_ha_reply_str(r), "%47s %llu", id, seq) == 2;
}

/* Apply the chunks of a listed snapshot (n of them, "ID SEQ" sid) in
 * order. 0, -1 (connection), -2 (a malformed record), 1 (replaced
 * meanwhile: read it again). */
static int load_chunks(ha_t *h, long long n, const char *sid)
{
    const char *keys[2] = {h->k_snap, h->k_snap_id};
    for (long long i = 0; i < n; i++) {
        char ix[24];
        snprintf(ix, sizeof(ix), "%lld", i);
        const char *args[1] = {ix};
        mc_ha_reply_t *r = NULL;
        if (eval(h, snap_chunk_lua, 2, keys, 1, args, NULL, &r) != MC_OK) {
            drop_conn(h); /* (a timeout leaves the connection unusable) */
            return -1;
        }
        const mc_ha_reply_t *id = mc_ha_reply_at(r, 0), *chunk = mc_ha_reply_at(r, 1);
        if (mc_ha_reply_count(r) != 2 || mc_ha_reply_type(id) != MC_HA_REPLY_STR ||
            strcmp(mc_ha_reply_str(id), sid) != 0 || mc_ha_reply_type(chunk) != MC_HA_REPLY_STR) {
            mc_ha_redis_free(r);
            return 1;
        }
        int rc = apply_entry(h, "snapshot", (const uint8_t *)mc_ha_reply_str(chunk),
                             mc_ha_reply_strlen(chunk), 0);
        mc_ha_redis_free(r);
        if (rc != 0)
            return -2;
    }
    return 0;
}

/* One try of load_snapshot: 0, -1, -2, or 1 (replaced while read). */
static int load_snapshot_once(ha_t *h)
{
    const char *keys[2] = {h->k_snap, h->k_snap_id};
    mc_ha_reply_t *r = NULL;
    if (eval(h, snap_head_lua, 2, keys, 0, NULL, NULL, &r) != MC_OK) {
        drop_conn(h);
        return -1;
    }
    char id[48];
    unsigned long long seq = 0;
    const mc_ha_reply_t *type = mc_ha_reply_at(r, 0), *body = mc_ha_reply_at(r, 2);
    int is_list = body != NULL && mc_ha_reply_type(body) == MC_HA_REPLY_INT;
    if (mc_ha_reply_count(r) != 3 || !snap_id_parse(mc_ha_reply_at(r, 1), id, &seq) ||
        (!is_list && mc_ha_reply_type(body) != MC_HA_REPLY_STR)) {
        MC_ERROR(HA,
                 "the journal was trimmed but %s / %s hold no snapshot (%s); this master "
                 "cannot rebuild the state and stops following",
                 h->k_snap, h->k_snap_id,
                 type != NULL && mc_ha_reply_type(type) == MC_HA_REPLY_STR ? mc_ha_reply_str(type)
                                                                           : "?");
        mc_ha_redis_free(r);
        return -2;
    }
    /* a fresh core, then the snapshot's records */
    uint64_t t0 = mc_now_us();
    long long chunks = is_list ? mc_ha_reply_int(body) : 1;
    new_core(h);
    int rc;
    if (is_list) {
        char sid[80];
        snprintf(sid, sizeof(sid), "%s", mc_ha_reply_str(mc_ha_reply_at(r, 1)));
        rc = load_chunks(h, chunks, sid);
    } else {
        rc = apply_entry(h, "snapshot", (const uint8_t *)mc_ha_reply_str(body),
                         mc_ha_reply_strlen(body), seq) == 0
                 ? 0
                 : -2;
    }
    mc_ha_redis_free(r);
    if (rc != 0) {
        /* a part of it applied: the next read starts over (from the
         * journal's start, trimmed: the snapshot again) */
        set_last_id(h, "0-0");
        h->applied_seq = 0;
        return rc;
    }
    set_last_id(h, id);
    h->applied_seq = seq;
    h->snap_seq = seq;
    atomic_fetch_add(&h->snapshots_loaded, 1);
    mc_master_stats_t st;
    mc_master_get_stats(h->s->m, &st);
    MC_INFO(HA,
            "loaded the snapshot at journal entry %s: %llu objects, %llu segments (%lld "
            "chunk%s) in %llu ms",
            id, (unsigned long long)st.key_count, (unsigned long long)st.segment_count, chunks,
            chunks == 1 ? "" : "s", (unsigned long long)((mc_now_us() - t0) / 1000));
    return 0;
}

/* Standby: start over from the snapshot (entries we had not read were
 * trimmed, or we start). 0, or -1 (connection; retried), -2 (bad snapshot:
 * FAILED). */
static int load_snapshot(ha_t *h)
{
    int rc = 1;
    if (h->rc == NULL)
        return -1;
    mc_ha_redis_set_timeout(h->rc, SNAP_TIMEOUT_US);
    for (int i = 0; i < SNAP_LOAD_TRIES && rc == 1; i++) {
        if (i > 0)
            MC_INFO(HA, "the snapshot was replaced while this master read it: reading the new one");
        rc = load_snapshot_once(h);
    }
    if (h->rc != NULL)
        mc_ha_redis_set_timeout(h->rc, cmd_timeout_us(h));
    return rc == 1 ? -1 : rc; /* (replaced each time: again at the next read) */
}

/* ------------------------------------------------------------- roles */

static void noop_on(void *arg)
{
    (void)arg;
}

static void swap_master_on_r0(void *arg)
{
    master_srv_t *s = arg;
    mc_master_t *fresh = NULL;
    if (mc_master_create(&s->opts.master, s->view_version, &fresh) != MC_OK) {
        /* keep the old one (never served again by this leader) */
        MC_ERROR(HA, "cannot create a fresh master core; keeping the old state");
        mc_master_set_journal(s->m, NULL, NULL);
        return;
    }
    mc_master_t *old = s->m;
    mc_master_set_offload_notify(fresh, master_srv_offload_kick, s);
    s->m = fresh;
    mc_master_destroy(old);
}

/* Stop leading: refuse at once, fail held replies, rebuild from the journal. */
static void demote(ha_t *h, const char *why)
{
    master_srv_t *s = h->s;
    MC_WARN(HA,
            "no longer the leader (view %lld): %s; refusing store calls and rebuilding "
            "the state from the journal",
            (long long)h->view, why);
    atomic_store(&s->lease_until_us, 0);
    set_role(h, MC_HA_ROLE_STANDBY);
    atomic_fetch_add(&h->demotions, 1);
    if (h->rc != NULL) {
        /* if the lease is still ours, hand it over now rather than at its end */
        const char *keys[1] = {h->k_lease};
        const char *args[1] = {h->lease_val};
        mc_ha_reply_t *r = NULL;
        if (eval(h, release_lua, 1, keys, 1, args, NULL, &r) == MC_OK)
            mc_ha_redis_free(r);
    }
    set_leader(h, "");
    for (unsigned i = 0; i < s->nscratch; i++)
        mc_rpc_run_on(mc_reactor_group_get(s->g, i), noop_on, NULL);
    notify_waiters(h);
    new_core(h);
    pthread_mutex_lock(&h->mu);
    mc_buf_reset(&h->buf);
    h->encode_failed = 0;
    pthread_mutex_unlock(&h->mu);
    set_last_id(h, "0-0");
    h->applied_seq = 0;
    drop_conn(h);
}

static mc_status_t renew(ha_t *h);

/* Every SCAN_TICK_FILES files of the tier scan in promote: a scan of a large
 * tier may outlast the lease, so renew it on the way. A failed renewal is
 * left to leader_step (it demotes when the lease runs out or was taken). */
static void scan_tick(void *arg)
{
    ha_t *h = arg;
    if (mc_now_us() >= h->renew_at_us && renew(h) != MC_OK)
        h->renew_at_us = mc_now_us() + RECONNECT_US;
}

static void promote(ha_t *h, int64_t view, uint64_t lease_until, uint64_t t_no_lease)
{
    master_srv_t *s = h->s;
    uint64_t now = mc_now_us();
    pthread_mutex_lock(&h->mu);
    mc_buf_reset(&h->buf);
    h->seq = h->applied_seq;
    atomic_store(&h->seq_pub, h->seq);
    atomic_store(&h->flushed, h->seq);
    master_tier_flushed(s, h->seq);
    pthread_mutex_unlock(&h->mu);
    h->view = view;
    s->view_version = view;
    mc_master_set_view_version(s->m, view);
    mc_master_touch_clients(s->m, now);
    mc_master_set_journal(s->m, on_journal, h);
    h->renew_at_us = now + h->ttl_us / 3;
    set_leader(h, h->addr);
    atomic_store(&s->lease_until_us, lease_until);
    atomic_fetch_add(&h->elections, 1);
    if (t_no_lease != 0)
        atomic_store(&h->failover_last_us, now - t_no_lease);
    /* The tier's files: first those of objects removed lately (the old
     * leader may have died before it deleted them; the scan would bring them
     * back), then the scan: only the leader scans, with the journal hook on,
     * so what it restores reaches the standbys as DISK records; before it
     * serves, so that no client sees a half-restored tier. */
    master_tier_takeover(s);
    if (master_tier_scan(s, scan_tick, h) != MC_OK)
        MC_ERROR(HA, "tier scan failed: files not restored by this leader");
    set_role(h, MC_HA_ROLE_LEADER);
    mc_master_stats_t st;
    mc_master_get_stats(s->m, &st);
    MC_INFO(HA,
            "leader of cluster '%s' at %s, view %lld: %llu objects, %llu segments "
            "from the journal (up to %s)",
            h->url.cluster, h->addr, (long long)view, (unsigned long long)st.key_count,
            (unsigned long long)st.segment_count, h->last_id);
    mc_master_offload_stats_t os;
    mc_master_offload_stats(s->m, &os);
    if (os.deletions > 0)
        MC_INFO(HA,
                "%llu deletions of removed objects' offloaded files replayed: handed to their "
                "nodes (those done already delete nothing)",
                (unsigned long long)os.deletions);
}

static mc_status_t renew(ha_t *h)
{
    const char *keys[1] = {h->k_lease};
    char ttl[24];
    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)(h->ttl_us / 1000));
    const char *args[2] = {h->lease_val, ttl};
    uint64_t t0 = mc_now_us();
    mc_ha_reply_t *r = NULL;
    mc_status_t st = eval(h, renew_lua, 1, keys, 2, args, NULL, &r);
    if (st != MC_OK) {
        atomic_fetch_add(&h->renew_fail, 1);
        return st;
    }
    if (mc_ha_reply_type(r) != MC_HA_REPLY_INT) {
        MC_WARN(HA, "lease renewal: a reply of type %d instead of an integer",
                (int)mc_ha_reply_type(r));
        mc_ha_redis_free(r);
        atomic_fetch_add(&h->renew_fail, 1);
        return MC_ERR_PROTOCOL;
    }
    int ok = mc_ha_reply_int(r) == 1;
    mc_ha_redis_free(r);
    if (!ok) {
        atomic_fetch_add(&h->renew_fail, 1);
        return MC_ERR_NOT_LEADER;
    }
    if (!replicated(h)) {
        /* a renewal a failover could undo would let a standby take over
         * while we still think we lead: it counts only once replicated */
        drop_conn(h);
        atomic_fetch_add(&h->renew_fail, 1);
        return MC_ERR_CONN_CLOSED;
    }
    atomic_fetch_add(&h->renew_ok, 1);
    atomic_store(&h->s->lease_until_us, t0 + h->ttl_us);
    h->renew_at_us = t0 + h->ttl_us / 3;
    return MC_OK;
}

/* Try to take the lease; on success catch up and lead. */
static void try_elect(ha_t *h, uint64_t t_no_lease)
{
    const char *keys[2] = {h->k_lease, h->k_view};
    char ttl[24];
    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)(h->ttl_us / 1000));
    const char *args[3] = {h->addr, h->nonce, ttl};
    uint64_t t0 = mc_now_us();
    mc_ha_reply_t *r = NULL;
    if (eval(h, elect_lua, 2, keys, 3, args, NULL, &r) != MC_OK) {
        if (h->rc != NULL)
            MC_WARN(HA, "election script failed: %s", mc_ha_redis_err(h->rc));
        return;
    }
    long long v = mc_ha_reply_type(r) == MC_HA_REPLY_INT ? mc_ha_reply_int(r) : -1;
    if (mc_ha_reply_type(r) != MC_HA_REPLY_INT)
        MC_WARN(HA, "election script: a reply of type %d instead of an integer",
                (int)mc_ha_reply_type(r));
    mc_ha_redis_free(r);
    if (v <= 0)
        return; /* another master was faster */
    snprintf(h->lease_val, sizeof(h->lease_val), "%s %lld %s", h->addr, v, h->nonce);
    if (!replicated(h)) {
        /* a failover could undo this election and hand the same view to
         * another master: give the lease back and try again later */
        const char *rkeys[1] = {h->k_lease};
        const char *rargs[1] = {h->lease_val};
        if (eval(h, release_lua, 1, rkeys, 1, rargs, NULL, &r) == MC_OK)
            mc_ha_redis_free(r);
        drop_conn(h);
        return;
    }
    atomic_store(&h->s->lease_until_us, t0 + h->ttl_us);
    h->renew_at_us = t0 + h->ttl_us / 3;
    /* No deposed leader can append now: read the stream to its end. */
    for (;;) {
        long n = read_journal(h, -1);
        if (n == -3) {
            int rc = load_snapshot(h);
            n = rc == 0 ? READ_COUNT : rc; /* read on after it */
        }
        if (n < 0) {
            if (n == -2)
                set_role(h, MC_HA_ROLE_FAILED);
            return; /* the lease runs out; another master takes over */
        }
        if (mc_now_us() >= h->renew_at_us) {
            if (renew(h) != MC_OK)
                return;
        }
        if (n < READ_COUNT)
            break;
    }
    promote(h, v, atomic_load(&h->s->lease_until_us), t_no_lease);
}

/* Standby: the journal lost entries this standby applied (a Redis
 * failover to a replica that never got them - records no reply waited for,
 * or any record with ha.wait_replicas = 0 - or a Redis restarted without
 * persistence). Our state holds changes the journal does not: start over
 * from the journal, as the leader does when it steps down. */
static void rebuild(ha_t *h, const char *why)
{
    MC_WARN(HA, "%s; rebuilding the state from the journal", why);
    atomic_fetch_add(&h->rewinds, 1);
    new_core(h);
    set_last_id(h, "0-0");
    h->applied_seq = 0;
    h->snap_seq = 0;
}

/* A standby replays each removal of a disk-offloaded object as a DELETE
 * for its node (mc_master_offload_forget_deletions), so that as the leader
 * it hands out those the old leader's node had not done. It cannot see the
 * nodes poll: a DELETE replayed more than DEL_KEEP_US ago (up to twice
 * that) is taken as done (a node polls within milliseconds; one down has
 * its DELETEs parked, which stay). */
#define DEL_KEEP_US (60ull * 1000000)

static void forget_deletions(ha_t *h)
{
    uint64_t now = mc_now_us();
    if (now - h->del_mark_us < DEL_KEEP_US)
        return;
    mc_master_t *m = h->s->m;
    size_t n = mc_master_offload_forget_deletions(m, h->del_mark);
    if (n > 0)
        MC_DEBUG(HA, "%zu replayed deletions of offloaded files taken as done", n);
    h->del_mark = mc_master_offload_deletion_mark(m);
    h->del_mark_us = now;
}

/* After a (re)connection: is the entry we applied last still in the stream
 * (or trimmed behind a snapshot, which the next read handles)? 1 yes, 0 no,
 * -1 connection lost. */
static int position_kept(ha_t *h)
{
    const char *argv[6] = {"XRANGE", h->k_journal, h->last_id, h->last_id, "COUNT", "1"};
    size_t lens[6];
    for (int i = 0; i < 6; i++)
        lens[i] = strlen(argv[i]);
    mc_ha_reply_t *r = NULL;
    if (mc_ha_redis_cmd(h->rc, &r, 6, argv, lens) != MC_OK) {
        drop_conn(h);
        return -1;
    }
    int found = mc_ha_reply_type(r) == MC_HA_REPLY_ARRAY && mc_ha_reply_count(r) == 1;
    mc_ha_redis_free(r);
    if (found)
        return 1;
    int gap = trimmed_past(h);
    return gap < 0 ? -1 : gap;
}

/* Standby: follow the stream; when no lease exists, run for leader. */
static void standby_step(ha_t *h, uint64_t *t_no_lease)
{
    if (h->check_pos && strcmp(h->last_id, "0-0") != 0) {
        int kept = position_kept(h);
        if (kept < 0)
            return;
        if (kept == 0) {
            char why[512];
            snprintf(why, sizeof(why),
                     "journal entry %s, applied here, is not in the journal at %s", h->last_id,
                     h->peer);
            rebuild(h, why);
        }
    }
    h->check_pos = 0;
    forget_deletions(h);
    uint64_t poll = h->ttl_us / 4 < POLL_MAX_US ? h->ttl_us / 4 : POLL_MAX_US;
    long n = read_journal(h, (long)(poll / 1000 ? poll / 1000 : 1));
    if (n == -3) {
        int rc = load_snapshot(h);
        n = rc == 0 ? READ_COUNT : rc; /* -1: a connection failure, retried */
    }
    if (n == -2) {
        set_role(h, MC_HA_ROLE_FAILED);
        return;
    }
    if (n > 0 && h->snapshot_records != 0 && h->rc != NULL &&
        h->applied_seq >= h->snap_seq + h->snapshot_records) {
        /* a snapshot costs about the state's size: take one only when the
         * journal since the last is at least twice that, so the cost per
         * record stays bounded however large the state */
        mc_master_stats_t st;
        mc_master_get_stats(h->s->m, &st);
        uint64_t state = 2 * st.key_count + st.segment_count;
        if (h->applied_seq - h->snap_seq >= 2 * state)
            take_snapshot(h);
    }
    if (n < 0 || n >= READ_COUNT)
        return; /* reconnect, or more to read first */
    const char *argv[4] = {"MGET", h->k_lease, h->k_head, h->k_snap_id};
    size_t lens[4] = {4, strlen(h->k_lease), strlen(h->k_head), strlen(h->k_snap_id)};
    mc_ha_reply_t *r = NULL;
    if (h->rc == NULL || mc_ha_redis_cmd(h->rc, &r, 4, argv, lens) != MC_OK) {
        drop_conn(h);
        return;
    }
    if (mc_ha_reply_count(r) != 3) {
        MC_WARN(HA, "MGET %s: a reply of an unexpected shape", h->k_lease);
        mc_ha_redis_free(r);
        return;
    }
    const mc_ha_reply_t *lease = mc_ha_reply_at(r, 0), *head = mc_ha_reply_at(r, 1),
                        *snap = mc_ha_reply_at(r, 2);
    unsigned long long sseq = 0;
    if (mc_ha_reply_type(snap) == MC_HA_REPLY_STR &&
        sscanf(mc_ha_reply_str(snap), "%*s %llu", &sseq) == 1 && sseq > h->snap_seq)
        h->snap_seq = sseq; /* another standby's: no need for ours yet */
    if (mc_ha_reply_type(head) == MC_HA_REPLY_STR) {
        uint64_t hs = strtoull(mc_ha_reply_str(head), NULL, 10);
        atomic_store(&h->head_seq, hs);
        atomic_store(&h->lag_records, hs > h->applied_seq ? hs - h->applied_seq : 0);
        if (hs <= h->applied_seq)
            atomic_store(&h->lag_ms, 0);
    }
    if (h->applied_seq > 0 && (mc_ha_reply_type(head) == MC_HA_REPLY_NIL ||
                               (mc_ha_reply_type(head) == MC_HA_REPLY_STR &&
                                strtoull(mc_ha_reply_str(head), NULL, 10) < h->applied_seq))) {
        char why[512];
        snprintf(why, sizeof(why), "the journal at %s ends before record %llu, applied here",
                 h->peer, (unsigned long long)h->applied_seq);
        mc_ha_redis_free(r);
        rebuild(h, why);
        return;
    }
    int no_lease = mc_ha_reply_type(lease) == MC_HA_REPLY_NIL;
    if (!no_lease) {
        char addr[MC_HA_ADDR_MAX];
        if (mc_ha_reply_type(lease) == MC_HA_REPLY_STR &&
            mc_ha_parse_lease(mc_ha_reply_str(lease), mc_ha_reply_strlen(lease), addr, sizeof(addr),
                              NULL) == MC_OK)
            set_leader(h, addr);
        else
            MC_WARN(HA, "%s does not hold \"ADDR VIEW NONCE\"", h->k_lease);
        *t_no_lease = 0;
    }
    mc_ha_redis_free(r);
    if (no_lease && role(h) == MC_HA_ROLE_STANDBY && !atomic_load(&h->stop)) {
        set_leader(h, "");
        if (*t_no_lease == 0)
            *t_no_lease = mc_now_us();
        try_elect(h, *t_no_lease);
        if (role(h) == MC_HA_ROLE_LEADER)
            *t_no_lease = 0;
    }
}

/* Append the records in h->sending (up to global number seq) with the
 * fencing script. On failure the leader has been demoted. */
static mc_status_t append_sending(ha_t *h, uint64_t seq)
{
    if (mc_buf_used(&h->sending) == 0)
        return MC_OK;
    const char *keys[3] = {h->k_lease, h->k_journal, h->k_head};
    char sq[24], pq[24];
    snprintf(sq, sizeof(sq), "%llu", (unsigned long long)seq);
    snprintf(pq, sizeof(pq), "%llu", (unsigned long long)atomic_load(&h->flushed));
    const char *args[4] = {h->lease_val, (const char *)mc_buf_head(&h->sending), sq, pq};
    size_t lens[4] = {strlen(h->lease_val), mc_buf_used(&h->sending), strlen(sq), strlen(pq)};
    uint64_t t0 = mc_now_us();
    mc_ha_reply_t *r = NULL;
    mc_status_t st;
    int warned = 0;
    for (;;) {
        st = h->rc != NULL || ensure_conn(h) ? eval(h, append_lua, 3, keys, 4, args, lens, &r)
                                             : MC_ERR_CONN_CLOSED;
        if (st == MC_OK && !replicated(h)) {
            /* stored on the primary only: a failover now could lose it, so
             * it is not acknowledged; sent again (to the new primary, if
             * one took over: there the head check lets it in) */
            mc_ha_redis_free(r);
            r = NULL;
            drop_conn(h);
            st = MC_ERR_CONN_CLOSED;
        }
        if (st != MC_ERR_CONN_CLOSED || atomic_load(&h->stop))
            break;
        /* outcome unknown (Redis slow or gone): send the same batch again
         * while the lease may still be ours; the script skips it if stored */
        atomic_fetch_add(&h->append_fail, 1);
        if (!warned)
            MC_WARN(HA,
                    "journal append of records up to %llu: no answer from redis; retrying "
                    "until the lease runs out",
                    (unsigned long long)seq);
        warned = 1;
        if (mc_now_us() >= atomic_load(&h->s->lease_until_us))
            break;
        usleep(RECONNECT_US / 4);
    }
    uint64_t dt = mc_now_us() - t0;
    if (st != MC_OK) {
        atomic_fetch_add(&h->append_fail, 1);
        char why[300];
        snprintf(why, sizeof(why), "journal append refused (%s)",
                 st == MC_ERR_CONN_CLOSED ? "redis unreachable until the lease ran out"
                 : h->rc != NULL          ? mc_ha_redis_err(h->rc)
                                          : "connection lost");
        mc_buf_reset(&h->sending);
        demote(h, why);
        return st;
    }
    if (warned)
        MC_INFO(HA, "journal append of records up to %llu went through after %llu ms",
                (unsigned long long)seq, (unsigned long long)(dt / 1000));
    mc_ha_redis_free(r);
    atomic_fetch_add(&h->appends, 1);
    atomic_fetch_add(&h->lat_sum_us, dt);
    atomic_fetch_add(&h->lat_count, 1);
    unsigned b = 0;
    while (b < LAT_BUCKETS && dt > (100u << b))
        b++;
    atomic_fetch_add(&h->lat_buckets[b], 1);
    atomic_store(&h->flushed, seq);
    master_tier_flushed(h->s, seq);
    atomic_store(&h->head_seq, seq);
    mc_buf_reset(&h->sending);
    notify_waiters(h);
    return MC_OK;
}

/* Take every pending record into h->sending; returns the global number of
 * the last one, *failed when a record could not be encoded. */
static uint64_t take_pending(ha_t *h, int *failed)
{
    pthread_mutex_lock(&h->mu);
    h->kicked = 0;
    *failed = h->encode_failed;
    if (mc_buf_used(&h->sending) == 0) {
        mc_buf_t tmp = h->sending;
        h->sending = h->buf;
        h->buf = tmp;
        mc_buf_reset(&h->buf);
    }
    uint64_t seq = h->seq;
    pthread_mutex_unlock(&h->mu);
    return seq;
}

/* Leader: append what is pending, renew the lease in time. */
static void leader_step(ha_t *h)
{
    uint64_t now = mc_now_us();
    uint64_t until = atomic_load(&h->s->lease_until_us);
    if (now >= until) {
        demote(h, "the lease ran out before it could be renewed");
        return;
    }
    /* wait for records (strict: a kick; async: the flush interval) or the
     * renewal time, whichever comes first */
    uint64_t wake = h->renew_at_us;
    /* strict: replies that wait kick a flush at once; records no reply
     * waits for (PutStart) still go within the flush interval */
    if (now + h->flush_us < wake)
        wake = now + h->flush_us;
    pthread_mutex_lock(&h->mu);
    if (!h->kicked && !h->encode_failed && !atomic_load(&h->stop) && wake > now) {
        struct timespec ts = mc_timespec_in(CLOCK_MONOTONIC, wake - now);
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    pthread_mutex_unlock(&h->mu);
    int failed = 0;
    uint64_t seq = take_pending(h, &failed);
    if (failed) {
        demote(h, "a journal record could not be encoded (out of memory)");
        return;
    }
    if (!ensure_conn(h) && mc_buf_used(&h->sending) == 0) {
        if (mc_now_us() >= atomic_load(&h->s->lease_until_us))
            demote(h, "redis unreachable until the lease ran out");
        else
            usleep(RECONNECT_US / 4);
        return;
    }
    if (append_sending(h, seq) != MC_OK)
        return;
    if (mc_now_us() >= h->renew_at_us) {
        mc_status_t st = renew(h);
        if (st == MC_ERR_NOT_LEADER)
            demote(h, "the lease was taken by another master");
        else if (st != MC_OK && mc_now_us() >= atomic_load(&h->s->lease_until_us))
            demote(h, "the lease could not be renewed in time");
        else if (st != MC_OK)
            h->renew_at_us = mc_now_us() + RECONNECT_US;
    }
}

static void *ha_main(void *arg)
{
    ha_t *h = arg;
    uint64_t t_no_lease = 0;
    while (!atomic_load(&h->stop)) {
        mc_ha_role_t r = role(h);
        if (r == MC_HA_ROLE_LEADER) {
            leader_step(h);
            continue;
        }
        if (r == MC_HA_ROLE_FAILED) {
            usleep(POLL_MAX_US);
            continue;
        }
        if (!ensure_conn(h)) {
            usleep(RECONNECT_US);
            continue;
        }
        standby_step(h, &t_no_lease);
    }
    return NULL;
}

mc_status_t master_ha_start(master_srv_t *s)
{
    const char *why = NULL;
    ha_t *h = MC_NEW(ha_t);
    if (h == NULL)
        return MC_ERR_NOMEM;
    h->s = s;
    if (mc_ha_url_parse(s->opts.ha.backend ? s->opts.ha.backend : "", &h->url, &why) != MC_OK) {
        MC_ERROR(HA, "ha.backend '%s': %s", s->opts.ha.backend ? s->opts.ha.backend : "", why);
        mc_free(h);
        return MC_ERR_CONFIG;
    }
    const char *cl =
        s->opts.ha.cluster_id && *s->opts.ha.cluster_id ? s->opts.ha.cluster_id : "mooncake";
    if (strlen(cl) >= sizeof(h->url.cluster) || strpbrk(cl, " /\t") != NULL) {
        MC_ERROR(HA, "ha.cluster_id '%s': too long or contains '/' or blanks", cl);
        mc_free(h);
        return MC_ERR_CONFIG;
    }
    snprintf(h->url.cluster, sizeof(h->url.cluster), "%s", cl);
    mc_ha_url_describe(&h->url, h->desc, sizeof(h->desc));
    mc_ha_key(h->k_lease, sizeof(h->k_lease), cl, "lease");
    mc_ha_key(h->k_view, sizeof(h->k_view), cl, "view");
    mc_ha_key(h->k_journal, sizeof(h->k_journal), cl, "journal");
    mc_ha_key(h->k_head, sizeof(h->k_head), cl, "head");
    mc_ha_key(h->k_snap, sizeof(h->k_snap), cl, "snap");
    mc_ha_key(h->k_snap_id, sizeof(h->k_snap_id), cl, "snap_id");
    mc_ha_key(h->k_trimmed, sizeof(h->k_trimmed), cl, "trimmed");
    h->snapshot_records = s->opts.ha.snapshot_records;
    h->snap_chunk = s->opts.ha.snapshot_chunk ? s->opts.ha.snapshot_chunk : 16ull << 20;
    uint16_t port = mc_rpc_server_port(s->rpc);
    if (s->opts.ha.advertise != NULL && *s->opts.ha.advertise) {
        snprintf(h->addr, sizeof(h->addr), "%s", s->opts.ha.advertise);
    } else {
        const char *b = s->bind_address;
        int wild = strcmp(b, "0.0.0.0") == 0 || strcmp(b, "::") == 0 || *b == '\0';
        if (wild)
            MC_WARN(HA,
                    "server.bind_address is a wildcard: advertising 127.0.0.1:%u to "
                    "clients; set ha.advertise_address for other hosts",
                    port);
        snprintf(h->addr, sizeof(h->addr), "%s:%u", wild ? "127.0.0.1" : b, port);
    }
    uint64_t rnd[2] = {0, 0};
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd[0] = mc_wall_us() ^ (uint64_t)(uintptr_t)h;
    snprintf(h->nonce, sizeof(h->nonce), "%016llx", (unsigned long long)(rnd[0] ^ rnd[1]));
    snprintf(h->k_snap_tmp, sizeof(h->k_snap_tmp), "%s:%s", h->k_snap, h->nonce);
    h->ttl_us = s->opts.ha.lease_ttl_us;
    h->flush_us = s->opts.ha.flush_interval_us ? s->opts.ha.flush_interval_us : 10000;
    h->sync = s->opts.ha.sync;
    /* a lone Redis has no replica to wait for */
    h->wait_n = h->url.sentinel && h->sync == MC_HA_SYNC_STRICT ? s->opts.ha.wait_replicas : 0;
    snprintf(h->last_id, sizeof(h->last_id), "0-0");
    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->lmu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_store(&s->role, MC_HA_ROLE_STANDBY);
    s->ha = h;
    if (pthread_create(&h->thread, NULL, ha_main, h) != 0) {
        MC_ERROR(HA, "cannot start the HA thread");
        s->ha = NULL;
        atomic_store(&s->role, MC_HA_ROLE_NONE);
        pthread_mutex_destroy(&h->mu);
        pthread_mutex_destroy(&h->lmu);
        pthread_cond_destroy(&h->cv);
        mc_free(h);
        return MC_ERR_NOMEM;
    }
    h->started = 1;
    MC_INFO(HA,
            "high availability: cluster '%s' on %s, lease %llu ms, sync %s%s, "
            "advertising %s; starting as a standby",
            cl, h->desc, (unsigned long long)(h->ttl_us / 1000),
            h->sync == MC_HA_SYNC_STRICT ? "strict" : "async",
            h->wait_n == 0   ? ""
            : h->wait_n == 1 ? " (acknowledged once a replica has it)"
                             : " (acknowledged once replicas have it)",
            h->addr);
    return MC_OK;
}

void master_ha_stop(master_srv_t *s)
{
    ha_t *h = s->ha;
    if (h == NULL)
        return;
    atomic_store(&h->stop, 1);
    pthread_mutex_lock(&h->mu);
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->started)
        pthread_join(h->thread, NULL);
    /* refuse new calls; once every reactor ran an empty message none is
     * inside the core, so what is pending is all there will be */
    atomic_store(&s->lease_until_us, 0);
    for (unsigned i = 0; i < s->nscratch; i++)
        mc_rpc_run_on(mc_reactor_group_get(s->g, i), noop_on, NULL);
    if (role(h) == MC_HA_ROLE_LEADER && ensure_conn(h)) {
        /* flush, then hand over at once instead of after the lease TTL */
        int failed = 0;
        uint64_t seq = take_pending(h, &failed);
        if (!failed && append_sending(h, seq) == MC_OK) {
            /* still the leader: the files of what was removed go now, or
             * the next leader's scan would bring them back */
            master_tier_drain(s, h->ttl_us / 2);
            const char *keys[1] = {h->k_lease};
            const char *args[1] = {h->lease_val};
            mc_ha_reply_t *r = NULL;
            if (eval(h, release_lua, 1, keys, 1, args, NULL, &r) == MC_OK) {
                MC_INFO(HA, "journal flushed and lease released");
                mc_ha_redis_free(r);
            }
        }
    }
    if (role(h) == MC_HA_ROLE_LEADER)
        set_role(h, MC_HA_ROLE_STANDBY);
    mc_master_set_journal(s->m, NULL, NULL);
    drop_conn(h);
    /* s->ha stays: handlers still running see a standby and refuse */
}

void master_ha_free(master_srv_t *s)
{
    ha_t *h = s->ha;
    if (h == NULL)
        return;
    mc_buf_fini(&h->buf);
    mc_buf_fini(&h->sending);
    pthread_mutex_destroy(&h->mu);
    pthread_mutex_destroy(&h->lmu);
    pthread_cond_destroy(&h->cv);
    s->ha = NULL;
    mc_free(h);
}

/* ------------------------------------------------------------- status */

static void appendf(mc_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void appendf(mc_buf_t *b, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > 0)
        mc_buf_append(b, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

void master_ha_status_json(master_srv_t *s, mc_buf_t *b)
{
    ha_t *h = s->ha;
    if (h == NULL) {
        appendf(b, "{\"role\":\"single\",\"ha\":false,\"view_version\":%lld}\n",
                (long long)s->view_version);
        return;
    }
    char leader[MC_HA_ADDR_MAX], last_id[sizeof(h->last_id)], peer[sizeof(h->peer)];
    master_ha_leader(s, leader, sizeof(leader));
    pthread_mutex_lock(&h->lmu);
    memcpy(last_id, h->last_id, sizeof(last_id));
    memcpy(peer, h->peer, sizeof(peer));
    pthread_mutex_unlock(&h->lmu);
    uint64_t until = atomic_load(&s->lease_until_us), now = mc_now_us();
    appendf(b,
            "{\"role\":\"%s\",\"ha\":true,\"cluster\":\"%s\",\"address\":\"%s\","
            "\"leader\":\"%s\",\"view_version\":%lld,\"sync\":\"%s\",\"lease_ttl_ms\":%llu,"
            "\"lease_left_ms\":%llu,",
            mc_ha_role_name(role(h)), h->url.cluster, h->addr, leader, (long long)s->view_version,
            h->sync == MC_HA_SYNC_STRICT ? "strict" : "async",
            (unsigned long long)(h->ttl_us / 1000),
            (unsigned long long)(until > now && role(h) == MC_HA_ROLE_LEADER ? (until - now) / 1000
                                                                             : 0));
    appendf(b,
            "\"elections\":%llu,\"lease_renewals_ok\":%llu,\"lease_renewals_failed\":%llu,"
            "\"journal_appends\":%llu,\"journal_append_failures\":%llu,"
            "\"journal_records_pending\":%llu,\"journal_head_seq\":%llu,"
            "\"records_applied\":%llu,\"apply_errors\":%llu,\"replication_lag_records\":%llu,"
            "\"replication_lag_ms\":%llu,\"last_failover_ms\":%llu,\"snapshots_taken\":%llu,"
            "\"snapshots_loaded\":%llu,\"replica_waits_failed\":%llu,\"journal_rewinds\":%llu,"
            "\"redis\":\"%s\",\"last_applied_entry\":\"%s\"}\n",
            (unsigned long long)atomic_load(&h->elections),
            (unsigned long long)atomic_load(&h->renew_ok),
            (unsigned long long)atomic_load(&h->renew_fail),
            (unsigned long long)atomic_load(&h->appends),
            (unsigned long long)atomic_load(&h->append_fail),
            (unsigned long long)(atomic_load(&h->seq_pub) - atomic_load(&h->flushed)),
            (unsigned long long)atomic_load(&h->head_seq),
            (unsigned long long)atomic_load(&h->records_applied),
            (unsigned long long)atomic_load(&h->apply_errors),
            (unsigned long long)(role(h) == MC_HA_ROLE_LEADER ? 0 : atomic_load(&h->lag_records)),
            (unsigned long long)(role(h) == MC_HA_ROLE_LEADER ? 0 : atomic_load(&h->lag_ms)),
            (unsigned long long)(atomic_load(&h->failover_last_us) / 1000),
            (unsigned long long)atomic_load(&h->snapshots_taken),
            (unsigned long long)atomic_load(&h->snapshots_loaded),
            (unsigned long long)atomic_load(&h->wait_fail),
            (unsigned long long)atomic_load(&h->rewinds), peer, last_id);
}

void master_ha_metrics(master_srv_t *s, mc_buf_t *b)
{
    ha_t *h = s->ha;
    int r = h != NULL ? (int)role(h) : MC_HA_ROLE_NONE;
    appendf(b,
            "# HELP master_ha_role 0 single, 1 standby, 2 leader, 3 failed\n"
            "# TYPE master_ha_role gauge\nmaster_ha_role %d\n",
            r);
    if (h == NULL)
        return;
    appendf(b,
            "# HELP master_ha_elections_total elections this master won\n"
            "# TYPE master_ha_elections_total counter\nmaster_ha_elections_total %llu\n",
            (unsigned long long)atomic_load(&h->elections));
    appendf(b,
            "# HELP master_ha_demotions_total times this master stopped leading\n"
            "# TYPE master_ha_demotions_total counter\nmaster_ha_demotions_total %llu\n",
            (unsigned long long)atomic_load(&h->demotions));
    appendf(b,
            "# HELP master_ha_lease_renewals_total leader lease renewals, by result\n"
            "# TYPE master_ha_lease_renewals_total counter\n"
            "master_ha_lease_renewals_total{result=\"ok\"} %llu\n"
            "master_ha_lease_renewals_total{result=\"failed\"} %llu\n",
            (unsigned long long)atomic_load(&h->renew_ok),
            (unsigned long long)atomic_load(&h->renew_fail));
    appendf(b,
            "# HELP master_ha_journal_appends_total journal append scripts run, by result\n"
            "# TYPE master_ha_journal_appends_total counter\n"
            "master_ha_journal_appends_total{result=\"ok\"} %llu\n"
            "master_ha_journal_appends_total{result=\"failed\"} %llu\n",
            (unsigned long long)atomic_load(&h->appends),
            (unsigned long long)atomic_load(&h->append_fail));
    appendf(
        b,
        "# HELP master_ha_journal_records_applied_total journal records a standby applied\n"
        "# TYPE master_ha_journal_records_applied_total counter\n"
        "master_ha_journal_records_applied_total %llu\n"
        "# HELP master_ha_journal_apply_errors_total journal records a standby could not apply\n"
        "# TYPE master_ha_journal_apply_errors_total counter\n"
        "master_ha_journal_apply_errors_total %llu\n",
        (unsigned long long)atomic_load(&h->records_applied),
        (unsigned long long)atomic_load(&h->apply_errors));
    appendf(b,
            "# HELP master_ha_snapshots_total metadata snapshots, taken or loaded\n"
            "# TYPE master_ha_snapshots_total counter\n"
            "master_ha_snapshots_total{op=\"taken\"} %llu\n"
            "master_ha_snapshots_total{op=\"loaded\"} %llu\n"
            "# HELP master_ha_snapshot_bytes size of the last snapshot\n"
            "# TYPE master_ha_snapshot_bytes gauge\nmaster_ha_snapshot_bytes %llu\n",
            (unsigned long long)atomic_load(&h->snapshots_taken),
            (unsigned long long)atomic_load(&h->snapshots_loaded),
            (unsigned long long)atomic_load(&h->snapshot_bytes));
    appendf(b,
            "# HELP master_ha_replica_waits_failed_total journal writes not confirmed by "
            "ha.wait_replicas replicas in time (sent again)\n"
            "# TYPE master_ha_replica_waits_failed_total counter\n"
            "master_ha_replica_waits_failed_total %llu\n"
            "# HELP master_ha_journal_rewinds_total a standby found the journal without entries "
            "it had applied and rebuilt its state\n"
            "# TYPE master_ha_journal_rewinds_total counter\n"
            "master_ha_journal_rewinds_total %llu\n",
            (unsigned long long)atomic_load(&h->wait_fail),
            (unsigned long long)atomic_load(&h->rewinds));
    int lead = r == MC_HA_ROLE_LEADER;
    appendf(b,
            "# HELP master_ha_replication_lag_records journal records not yet applied\n"
            "# TYPE master_ha_replication_lag_records gauge\n"
            "master_ha_replication_lag_records %llu\n"
            "# HELP master_ha_replication_lag_ms milliseconds the standby is behind the journal\n"
            "# TYPE master_ha_replication_lag_ms gauge\nmaster_ha_replication_lag_ms %llu\n",
            (unsigned long long)(lead ? 0 : atomic_load(&h->lag_records)),
            (unsigned long long)(lead ? 0 : atomic_load(&h->lag_ms)));
    appendf(b, "# HELP master_ha_journal_append_seconds time of one journal append script\n"
               "# TYPE master_ha_journal_append_seconds histogram\n");
    uint64_t cum = 0;
    for (unsigned i = 0; i < LAT_BUCKETS; i++) {
        cum += atomic_load(&h->lat_buckets[i]);
        appendf(b, "master_ha_journal_append_seconds_bucket{le=\"%g\"} %llu\n",
                (double)(100u << i) / 1e6, (unsigned long long)cum);
    }
    cum += atomic_load(&h->lat_buckets[LAT_BUCKETS]);
    appendf(b,
            "master_ha_journal_append_seconds_bucket{le=\"+Inf\"} %llu\n"
            "master_ha_journal_append_seconds_sum %g\n"
            "master_ha_journal_append_seconds_count %llu\n",
            (unsigned long long)cum, (double)atomic_load(&h->lat_sum_us) / 1e6,
            (unsigned long long)atomic_load(&h->lat_count));
}
