/* master_server_int.h - what master_server.c and master_http.c share. */
#ifndef MC_STORE_MASTER_SERVER_INT_H
#define MC_STORE_MASTER_SERVER_INT_H

#include <stdatomic.h>
#include <stdint.h>

#include "reactor/reactor.h"
#include "rpc/rpc.h"
#include "store/master.h"
#include "store/master_server.h"
#include "store/proto.h"
#include "util/list.h"
#include "util/prom.h"

#define MASTER_MAX_METHOD 400 /* method ids counted per RPC (rpc/methods.h) */

/* Per-reactor arrays for batch calls, grown on demand and reused. */
typedef struct scratch {
    mc_master_key_t *keys;
    uint64_t *sizes;
    mc_status_t *st;
    uint32_t *nrep;
    int *exists;
    size_t cap;
    mc_master_replica_desc_t *descs;
    size_t dcap;
    mc_proto_segment_t *segs;
    size_t scap;
    mc_buf_t rbuf;     /* replies encoded before they may be sent (strict HA) */
    mc_list_t waiters; /* waiter_t: replies waiting for their journal records */
    _Atomic uint64_t nwaiters;
    mc_list_t held;          /* held_t: offload polls and loads waiting for work or a load */
    _Atomic uint64_t nheld;  /* how many (read by other threads to decide on a kick) */
    _Atomic int kick_posted; /* a look at `held` is posted to this reactor */
} scratch_t;

struct evhttp_request;

/* A reply held until the journal records of its call are in Redis: an RPC
 * reply (req) or, on reactor 0, an HTTP one (hreq, /metadata). */
typedef struct waiter {
    mc_list_t node;
    mc_rpc_req_t *req;
    struct evhttp_request *hreq;
    int hcode; /* HTTP status to send once durable */
    mc_status_t st;
    uint64_t seq; /* the call's records are <= seq */
    size_t len;
    uint8_t body[];
} waiter_t;

typedef struct ha ha_t;
typedef struct master_scan master_scan_t;

struct evhttp;

typedef struct master_srv {
    mc_master_server_opts_t opts;
    char *bind_address;
    char *fsdir;
    _Atomic int64_t view_version; /* the HA thread sets a new leader's */
    struct master_tier *tier;     /* master_server_tier.c; NULL = no tier */
    master_scan_t *scan;          /* master_server_scan.c: the regex scan worker */
    mc_master_t *m;
    mc_reactor_group_t *g;
    mc_rpc_server_t *rpc;
    scratch_t *scratch; /* one per reactor, by mc_reactor_index */
    unsigned nscratch;
    mc_timer_t tick;
    int tick_armed;
    struct evhttp *http;
    /* the cluster secret: the RPC port's handshake, and on HTTP (master_http.c)
     * the proof /keys and the changes of /metadata need (auth: challenges
     * from GET /auth; reactor 0 only; NULL without a key) */
    int has_key;
    mc_auth_key_t key;
    struct mc_http_auth *auth;
    uint16_t http_port;
    uint16_t http_meta_port;           /* the extra metadata port, 0 = none */
    struct mc_meta_http_store *hstore; /* /metadata's view of the embedded KV */
    uint64_t started_us;
    _Atomic uint64_t req_total[MASTER_MAX_METHOD];
    _Atomic uint64_t req_fail[MASTER_MAX_METHOD];
    mc_prom_hist_t req_lat[MASTER_MAX_METHOD]; /* arrival to answer */

    /* high availability (master_ha.c); ha NULL when ha.sync = off */
    ha_t *ha;
    _Atomic int role;                /* mc_ha_role_t */
    _Atomic uint64_t lease_until_us; /* leader: serve only before this (mc_now_us) */
} master_srv_t;

/* master_server_tier.c. create: validate, make the directory (no thread yet;
 * sets s->opts.master.disk_drop); start: after the master exists, scan and
 * restore (scan: without HA; with HA the leader scans when it takes over),
 * start the deleter; stop: drain the deleter, join it, free. */
mc_status_t master_tier_create(master_srv_t *s);
mc_status_t master_tier_start(master_srv_t *s, int scan);
/* The startup scan: restore DISK replicas from the files (journaled when
 * the journal hook is on). tick(arg), if not NULL, runs every 1024 files (the
 * HA thread renews its lease there). MC_OK (nothing without a tier),
 * MC_ERR_CONFIG (the directory cannot be listed). */
mc_status_t master_tier_scan(master_srv_t *s, void (*tick)(void *arg), void *arg);
void master_tier_stop(master_srv_t *s);
/* Wait (at most max_us) until the queued file deletions are done: a leader
 * handing over cleanly, after its last records are stored and before it
 * releases the lease (a deletion skipped would leave a file the next
 * leader's scan turns back into an object). */
void master_tier_drain(master_srv_t *s, uint64_t max_us);
/* A standby becoming the leader (HA thread; caught up, not serving yet):
 * delete the files of objects whose removal it replayed lately, if their
 * keys are still absent. Before master_tier_scan. */
void master_tier_takeover(master_srv_t *s);
/* The HA thread: journal records up to seq are in Redis (a file is deleted
 * only once its object's DROP record is). */
void master_tier_flushed(master_srv_t *s, uint64_t seq);
/* The tier directory and its cluster id ("" without a tier). */
const char *master_tier_dir(const master_srv_t *s);
const char *master_tier_cluster(const master_srv_t *s);
/* A client's file whose object is gone: delete it (queued). */
void master_tier_orphan(master_srv_t *s, const char *key, size_t len);
struct evbuffer;
/* Prometheus lines of the tier (nothing without one). */
void master_tier_metrics(const master_srv_t *s, mc_buf_t *b);
/* Node-local offload's metrics (with enable_offload). */
void master_offload_metrics(const master_srv_t *s, mc_buf_t *b);

/* ---- master_server_scan.c: regex scans on a worker thread ---- */
typedef struct scan_job scan_job_t;
struct scan_job {
    mc_list_t node;       /* in the worker's queue */
    mc_reactor_msg_t msg; /* back to r for done() */
    master_srv_t *s;
    mc_master_scan_t *sc; /* owned by the job */
    mc_reactor_t *r;      /* the reactor that took the request */
    uint64_t deadline_us; /* set when queued */
    /* On the worker, once matching ended: phase 2 (mc_master_scan_*) and the
     * reply body into out; returns the reply's status. */
    mc_status_t (*act)(scan_job_t *j);
    /* On r, exactly once: answer (j->st, j->why, j->out), then scan_job_free. */
    void (*done)(scan_job_t *j);
    mc_status_t st;
    char why[256]; /* the reason of a failure */
    mc_buf_t out;  /* the reply body act() encoded */
    void *req;     /* the mc_rpc_req_t or evhttp_request to answer */
    int force;
    long count;
};

mc_status_t master_scan_start(master_srv_t *s);
/* Cancel what is queued or running and wait until every job was answered
 * on its reactor (which must still run). */
void master_scan_stop(master_srv_t *s);
void master_scan_free(master_srv_t *s);
/* A job for scan sc (ownership moves to the job), answered on r. NULL: out of memory. */
scan_job_t *scan_job_new(master_srv_t *s, mc_master_scan_t *sc, mc_reactor_t *r);
void scan_job_free(scan_job_t *j);
/* Queue j (set act and done first). MC_OK: done() will run on j->r.
 * MC_ERR_LIMIT (queue full) or MC_ERR_CANCELED (stopping), with a sentence
 * in why: the caller answers and frees j. */
mc_status_t master_scan_submit(master_srv_t *s, scan_job_t *j, char *why, size_t whylen);
/* Scans finished, those over budget (time or regex limits), those refused
 * because the queue was full. */
void master_scan_stats(master_srv_t *s, uint64_t *total, uint64_t *over_budget, uint64_t *refused);

mc_status_t master_http_start(master_srv_t *s);
void master_http_stop(master_srv_t *s);
/* Send a held /metadata answer: its own when durable, else 503 (no longer
 * the leader, or shutting down). Frees nothing. Reactor 0. */
void master_http_held_reply(waiter_t *wt, int durable);

/* ---- master_ha.c ---- */
/* Start the HA thread (s->opts.ha); the RPC server is up (its port known).
 * The master starts as a standby. MC_OK, MC_ERR_CONFIG (bad backend URL:
 * logged), MC_ERR_NOMEM. */
mc_status_t master_ha_start(master_srv_t *s);
/* Stop serving, flush what is pending, release the lease if ours, join the
 * thread; handlers keep seeing a standby. Safe when HA is off. */
void master_ha_stop(master_srv_t *s);
/* Free it, once no reactor runs (after the reactors are destroyed). */
void master_ha_free(master_srv_t *s);
/* Whether store RPCs may be served now (always when HA is off). Any thread. */
static inline int master_ha_serving(master_srv_t *s, uint64_t now_us)
{
    if (s->ha == NULL)
        return 1;
    return atomic_load_explicit(&s->role, memory_order_acquire) == 2 /* LEADER */ &&
           now_us < atomic_load_explicit(&s->lease_until_us, memory_order_relaxed);
}
/* Strict mode: 1 when a reply must wait for records up to the current seq,
 * which *seq receives. */
int master_ha_must_wait(master_srv_t *s, uint64_t *seq);
/* Strict mode: 1 when a record that freed segment space (a remove, an
 * eviction, a release, an expiry) is not in Redis yet; *seq receives its
 * number. A reply that hands out space waits for it (master_server.c,
 * body_space). */
int master_ha_frees_pending(master_srv_t *s, uint64_t *seq);
/* Records up to this number are in Redis. */
uint64_t master_ha_flushed(master_srv_t *s);
/* The number of the last record journaled (0 without HA). Only where the
 * HA state cannot be freed meanwhile: a reactor, under a mutation. */
uint64_t master_ha_seq(master_srv_t *s);
/* Wake the HA thread to flush now (a reply waits). */
void master_ha_kick(master_srv_t *s);
/* On reactor i: send the replies whose records are durable; fail the others
 * with NOT_LEADER when this master no longer leads. */
void master_srv_complete_waiters(master_srv_t *s, scratch_t *sc);
/* The master core's offload notify (mc_master_set_offload_notify; arg = s):
 * reactors holding offload polls and loads look at them again. */
void master_srv_offload_kick(void *arg);
/* The leader's address as far as we know ("" if unknown), into buf. */
void master_ha_leader(master_srv_t *s, char *buf, size_t n);
/* Text for /ha_status (JSON) and the HA part of /metrics (appended to b). */
void master_ha_status_json(master_srv_t *s, mc_buf_t *b);
void master_ha_metrics(master_srv_t *s, mc_buf_t *b);

#endif /* MC_STORE_MASTER_SERVER_INT_H */
