/* master_server_int.h - what master_server.c and master_http.c share. */
#ifndef MC_STORE_MASTER_SERVER_INT_H
#define MC_STORE_MASTER_SERVER_INT_H

#include <stdatomic.h>

#include "reactor/reactor.h"
#include "rpc/rpc.h"
#include "store/master.h"
#include "store/master_server.h"
#include "store/proto.h"

#define MC_MASTER_VERSION "0.1.0"
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
} scratch_t;

struct evhttp;

typedef struct master_srv {
    mc_master_server_opts_t opts;
    char *bind_address;
    char *fsdir;
    struct master_tier *tier; /* master_server_tier.c; NULL = no tier */
    int64_t view_version;
    mc_master_t *m;
    mc_reactor_group_t *g;
    mc_rpc_server_t *rpc;
    scratch_t *scratch; /* one per reactor, by mc_reactor_index */
    unsigned nscratch;
    mc_timer_t tick;
    int tick_armed;
    struct evhttp *http;
    uint16_t http_port;
    uint64_t started_us;
    _Atomic uint64_t req_total[MASTER_MAX_METHOD];
    _Atomic uint64_t req_fail[MASTER_MAX_METHOD];
} master_srv_t;

/* master_server_tier.c. create: validate, make the directory (no thread yet;
 * sets s->opts.master.disk_drop); start: after the master exists, scan and
 * restore, start the deleter; stop: drain the deleter, join it, free. */
mc_status_t master_tier_create(master_srv_t *s);
mc_status_t master_tier_start(master_srv_t *s);
void master_tier_stop(master_srv_t *s);
/* The tier directory and its cluster id ("" without a tier). */
const char *master_tier_dir(const master_srv_t *s);
const char *master_tier_cluster(const master_srv_t *s);
/* A client's file whose object is gone: delete it (queued). */
void master_tier_orphan(master_srv_t *s, const char *key, size_t len);
struct evbuffer;
/* Prometheus lines of the tier (nothing without one). */
void master_tier_metrics(const master_srv_t *s, struct evbuffer *b);

mc_status_t master_http_start(master_srv_t *s);
void master_http_stop(master_srv_t *s);

#endif /* MC_STORE_MASTER_SERVER_INT_H */
