/*
 * master_server.h - mooncake-master as a service: the master core
 * (store/master.h) served over msgpack RPC on every reactor, its background
 * work on a timer, and an HTTP port for metrics, health and admin queries.
 *
 * Threads: start/stop from main(); RPC handlers run on the reactor that
 * accepted the connection and call the (thread-safe, sharded) master core
 * synchronously; the tick timer and the HTTP server run on reactor 0.
 */
#ifndef MC_STORE_MASTER_SERVER_H
#define MC_STORE_MASTER_SERVER_H

#include <stdint.h>

#include "mooncake/status.h"
#include "store/master.h"
#include "util/auth.h"

typedef struct mc_master_server mc_master_server_t;

typedef struct mc_master_server_opts {
    const char *bind_address;        /* "0.0.0.0" */
    uint16_t rpc_port;               /* 50051; 0 = ephemeral */
    uint16_t http_port;              /* 9003; 0 = ephemeral */
    int http_enabled;                /* 1 */
    int http_metadata;               /* serve upstream's HTTP metadata protocol at /metadata (1) */
    uint16_t http_metadata_port;     /* one more HTTP port with the same paths (upstream's
                                        8080); 0 = none (0) */
    const char *http_metadata_token; /* Bearer token /metadata requires; NULL/"" = none */
    unsigned reactors;               /* 0 = one per NUMA node */
    uint64_t tick_interval_us;       /* background work period (100 ms) */
    uint64_t regex_timeout_us;       /* a regex scan's deadline, from when it is queued (3 s) */
    unsigned regex_queue;            /* regex scans waiting at most; more are refused (16) */
    /* RPC resource bounds (rpc.h, mc_rpc_server_opts_t); 0 = its default */
    unsigned max_clients;            /* connections (10000) */
    uint64_t max_client_input;       /* bytes one connection may buffer (a whole frame) */
    uint64_t max_input_total;        /* bytes all connections may buffer (256 MiB) */
    uint64_t first_frame_timeout_us; /* a connection silent this long is closed (10 s) */
    const mc_auth_key_t *auth_key;   /* RPC authentication ([security] secret_file); NULL =
                                        none. Copied at start. */
    const char *fsdir;               /* root_fs_dir: the persistent tier's root; "" = no tier */
    const char *cluster_id;          /* tier directory = fsdir/cluster_id ("mooncake_cluster") */
    int persist;                     /* mc_master_persist_t, announced to clients (ASYNC) */
    uint64_t tier_scan_max;          /* files the startup scan restores at most (10 M) */
    uint64_t tier_quota;             /* bytes of objects on disk before the oldest disk-only
                                        ones are removed; 0 = no quota (0) */
    int64_t view_version;            /* 0 = derive from the wall clock (bumps on every start) */
    mc_master_opts_t master;
    struct {
        int sync;                   /* mc_ha_sync_t (master_ha.h); 0 = off: no HA */
        const char *backend;        /* "redis://host:port/db" */
        const char *cluster_id;     /* "mooncake" */
        uint64_t lease_ttl_us;      /* 5 s */
        uint64_t flush_interval_us; /* async: records reach Redis within this (10 ms) */
        uint64_t snapshot_records;  /* a standby snapshots (and trims the journal) after
                                     * this many new records; 0 = never */
        uint64_t snapshot_chunk;    /* a larger snapshot is stored as a list of chunks of
                                     * about this many bytes; 0 = 16 MiB */
        const char *advertise;      /* "host:port" clients use; "" = bind address (or
                                     * 127.0.0.1 for a wildcard bind) and the RPC port */
        unsigned wait_replicas;     /* redis-sentinel:// backend and sync strict: a record
                                     * is acknowledged once this many replicas have it
                                     * (Redis WAIT); 1; 0 = once the primary has it */
    } ha;
} mc_master_server_opts_t;

void mc_master_server_opts_init(mc_master_server_opts_t *o);

/* Start reactors, RPC and HTTP. With a tier (fsdir set): create
 * fsdir/cluster_id if missing, restore the objects of its files (a bounded,
 * logged scan of their headers, before serving), and start the thread that
 * deletes the files of removed objects. MC_ERR_SOCKET when a port cannot be
 * bound (logged with the cause), MC_ERR_CONFIG (bad cluster_id or an
 * unusable fsdir: logged); nothing is left running on error. */
mc_status_t mc_master_server_start(const mc_master_server_opts_t *o, mc_master_server_t **out);

/* Stop serving and free everything. Safe on NULL. */
void mc_master_server_stop(mc_master_server_t *s);

uint16_t mc_master_server_rpc_port(const mc_master_server_t *s);
uint16_t mc_master_server_http_port(const mc_master_server_t *s);
/* The extra metadata port (http_metadata_port; 0 when none). */
uint16_t mc_master_server_http_metadata_port(const mc_master_server_t *s);
int64_t mc_master_server_view_version(const mc_master_server_t *s);
unsigned mc_master_server_reactors(const mc_master_server_t *s);

#endif /* MC_STORE_MASTER_SERVER_H */
