/*
 * mooncake-master - the store's control plane.
 *
 *   mooncake-master [-c FILE] [--set section.key=value]... [--dump-config] [--help]
 *
 * Runs on its built-in defaults when no file is given. Stops cleanly on
 * SIGINT/SIGTERM.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "store/ha_redis.h"
#include "store/master_ha.h"
#include "store/master_server.h"
#include "mooncake/version.h"
#include "util/conf.h"
#include "daemon.h"
#include "util/log.h"
#include "util/mem.h"

/* [server] */
typedef struct server_conf {
    char *bind_address;
    uint64_t rpc_port;
    uint64_t http_port;
    bool http_enabled;
    char *reactors;
    uint64_t tick_interval;
    char *fsdir;
    char *cluster_id;
    int persist;
    uint64_t tier_scan_max;
    uint64_t tier_quota;
    uint64_t regex_timeout;
    uint64_t regex_queue;
    uint64_t max_clients;
    uint64_t max_client_input;
    uint64_t max_input_total;
    uint64_t first_frame_timeout;
} server_conf_t;

static const char *const persist_modes[] = {"off", "async", "eager", NULL};

static const mc_conf_key_t server_keys[] = {
    MC_CONF_ROW(server_conf_t, bind_address, "bind_address", MC_CONF_STRING, "0.0.0.0", 0, 0,
                "address the RPC and HTTP ports listen on"),
    MC_CONF_ROW(server_conf_t, rpc_port, "rpc_port", MC_CONF_UINT, "50051", 0, 65535,
                "RPC port (clients, storage nodes, embedded metadata); 0 = any free port"),
    MC_CONF_ROW(server_conf_t, http_port, "http_port", MC_CONF_UINT, "9003", 0, 65535,
                "HTTP port: /metrics, /metrics/summary, /health, /segments, /keys, /metadata"),
    MC_CONF_ROW(server_conf_t, http_enabled, "http_enabled", MC_CONF_BOOL, "true", 0, 0,
                "serve the HTTP port"),
    MC_CONF_ROW(server_conf_t, reactors, "reactors", MC_CONF_STRING, "auto", 0, 0,
                "event-loop threads: auto (one per NUMA node) or a count 1..256"),
    MC_CONF_ROW(server_conf_t, tick_interval, "tick_interval", MC_CONF_DURATION, "100ms", 1000,
                10000000, "period of background work: eviction, abandoned puts, client expiry"),
    MC_CONF_ROW(server_conf_t, fsdir, "root_fs_dir", MC_CONF_STRING, "", 0, 0,
                "persistent tier root (SSD or a file system shared by every node): objects are "
                "also written to root_fs_dir/cluster_id; empty = no tier"),
    MC_CONF_ROW(server_conf_t, cluster_id, "cluster_id", MC_CONF_STRING, "mooncake_cluster", 0, 0,
                "subdirectory of root_fs_dir for this cluster ([A-Za-z0-9._-])"),
    MC_CONF_ENUM_ROW(server_conf_t, persist, "persist", persist_modes, "async",
                     "when clients write an object's file: off, async (after the put returns, "
                     "from a copy), eager (before the put returns)"),
    MC_CONF_ROW(server_conf_t, tier_scan_max, "tier_scan_max", MC_CONF_UINT, "10000000", 0, 1e12,
                "files the startup scan of the tier restores at most"),
    MC_CONF_ROW(server_conf_t, tier_quota, "tier_quota", MC_CONF_SIZE, "0", 0, 1125899906842624.0,
                "bytes of objects in the tier above which the least recently used objects "
                "that are only on disk are removed (checked every second); 0 = no quota"),
    MC_CONF_ROW(server_conf_t, regex_timeout, "regex_timeout", MC_CONF_DURATION, "3s", 1000, 600e6,
                "deadline of one regex scan (by-regex RPCs, HTTP /keys), from when it is queued; "
                "a scan over it is answered INVALID_PARAMS and does nothing"),
    MC_CONF_ROW(server_conf_t, regex_queue, "regex_queue", MC_CONF_UINT, "16", 1, 4096,
                "regex scans waiting for the scan thread at most; more are refused (status LIMIT, "
                "HTTP 503)"),
    MC_CONF_ROW(server_conf_t, max_clients, "max_clients", MC_CONF_UINT, "10000", 1, 1000000,
                "RPC connections at most; more are closed as they come (logged once per 10 s)"),
    MC_CONF_ROW(server_conf_t, max_client_input, "max_client_input", MC_CONF_SIZE, "0", 0,
                1099511627776.0,
                "bytes one RPC connection may hold buffered (a frame being received); over it "
                "the connection is closed; 0 = the largest frame (64 MiB body + 64 MiB payload)"),
    MC_CONF_ROW(server_conf_t, max_input_total, "max_input_total", MC_CONF_SIZE, "256MiB", 1048576,
                1099511627776.0,
                "bytes all RPC connections may hold buffered; over it the biggest holder is "
                "closed (split evenly over the reactors)"),
    MC_CONF_ROW(server_conf_t, first_frame_timeout, "first_frame_timeout", MC_CONF_DURATION, "10s",
                100000, 3600e6,
                "an RPC connection that has not sent a complete first frame by then is closed"),
};

/* [metadata]: upstream's HTTP metadata protocol on the HTTP port(s). */
typedef struct meta_conf {
    bool http;
    uint64_t http_port;
    char *http_token;
} meta_conf_t;

static const mc_conf_key_t meta_keys[] = {
    MC_CONF_ROW(meta_conf_t, http, "http", MC_CONF_BOOL, "true", 0, 0,
                "serve upstream's HTTP metadata protocol (GET/PUT/DELETE /metadata?key=K) on "
                "the HTTP port, backed by the embedded metadata service"),
    MC_CONF_ROW(meta_conf_t, http_port, "http_port", MC_CONF_UINT, "0", 0, 65535,
                "one more HTTP port with the same paths, for upstream-style configurations "
                "(http://HOST:8080/metadata); 0 = none"),
    MC_CONF_ROW(meta_conf_t, http_token, "http_token", MC_CONF_STRING, "", 0, 0,
                "Bearer token /metadata requires (upstream's MC_METADATA_HTTP_TOKEN); "
                "empty = none"),
};

/* [master]: the semantics of the store. */
typedef struct master_conf {
    uint64_t lease_ttl;
    bool lease_release;
    uint64_t soft_pin_ttl;
    uint64_t max_soft_pin_ttl;
    bool allow_evict_soft_pinned;
    double eviction_ratio;
    double eviction_high_watermark_ratio;
    uint64_t client_ttl;
    uint64_t put_start_discard_timeout;
    uint64_t put_start_release_timeout;
    uint64_t max_key_len;
    uint64_t max_object_size;
    uint64_t max_replicas;
    uint64_t regex_max_len;
    uint64_t regex_match_limit;
    uint64_t regex_depth_limit;
    uint64_t regex_heap_limit;
    uint64_t meta_max_entries;
    uint64_t meta_max_bytes;
    bool enable_offload;
    bool offload_on_evict;
    bool offload_force_evict;
    uint64_t offloading_queue_limit;
    double offload_cap_ratio;
    uint64_t offload_timeout;
    bool promotion_on_hit;
    uint64_t promotion_admission_threshold;
} master_conf_t;

static const mc_conf_key_t master_keys[] = {
    MC_CONF_ROW(master_conf_t, lease_ttl, "lease_ttl", MC_CONF_DURATION, "5s", 1000, 3600e6,
                "read lease a get grants; leased objects are not removed or evicted"),
    MC_CONF_ROW(master_conf_t, lease_release, "lease_release", MC_CONF_BOOL, "true", 0, 0,
                "a reader that says it will (batch gets of this project's clients) ends its "
                "lease when its reads are done, so eviction can take what nobody reads; "
                "false = every lease runs to lease_ttl, as upstream's"),
    MC_CONF_ROW(master_conf_t, soft_pin_ttl, "soft_pin_ttl", MC_CONF_DURATION, "30m", 1000,
                86400e6 * 7, "how long a put with soft pin is protected from eviction"),
    MC_CONF_ROW(master_conf_t, max_soft_pin_ttl, "max_soft_pin_ttl", MC_CONF_DURATION, "24h", 1000,
                86400e6 * 30, "upper bound of a per-put soft pin"),
    MC_CONF_ROW(master_conf_t, allow_evict_soft_pinned, "allow_evict_soft_pinned_objects",
                MC_CONF_BOOL, "true", 0, 0,
                "soft-pinned objects may be evicted, after every unpinned candidate"),
    MC_CONF_ROW(master_conf_t, eviction_ratio, "eviction_ratio", MC_CONF_DOUBLE, "0.05", 0.001, 1.0,
                "share of eligible objects one eviction round removes"),
    MC_CONF_ROW(master_conf_t, eviction_high_watermark_ratio, "eviction_high_watermark_ratio",
                MC_CONF_DOUBLE, "0.95", 0.01, 1.0,
                "used/capacity above which eviction runs in the background (1.0 = only when a "
                "put fails for space)"),
    MC_CONF_ROW(master_conf_t, client_ttl, "client_ttl", MC_CONF_DURATION, "10s", 100000, 3600e6,
                "a client silent this long is expired with its segments"),
    MC_CONF_ROW(master_conf_t, put_start_discard_timeout, "put_start_discard_timeout",
                MC_CONF_DURATION, "30s", 1000, 86400e6,
                "an unfinished put becomes invisible (another put may take the key)"),
    MC_CONF_ROW(master_conf_t, put_start_release_timeout, "put_start_release_timeout",
                MC_CONF_DURATION, "10m", 1000, 86400e6,
                "the space of a discarded put is reused only after this (a slow writer may "
                "still be writing)"),
    MC_CONF_ROW(master_conf_t, max_key_len, "max_key_len", MC_CONF_UINT, "4096", 1, 65535,
                "longest key, bytes"),
    MC_CONF_ROW(master_conf_t, max_object_size, "max_object_size", MC_CONF_SIZE, "64GiB", 1,
                1099511627776.0, "largest object"),
    MC_CONF_ROW(master_conf_t, max_replicas, "max_replicas", MC_CONF_UINT, "8", 1, 8,
                "most replicas one object may ask for"),
    MC_CONF_ROW(master_conf_t, regex_max_len, "regex_max_len", MC_CONF_UINT, "1024", 1, 65535,
                "longest regex (PCRE2 syntax) the by-regex calls and /keys accept, bytes"),
    MC_CONF_ROW(master_conf_t, regex_match_limit, "regex_match_limit", MC_CONF_UINT, "100000", 1,
                1e9, "backtracking steps one regex may take on one key (PCRE2 match limit)"),
    MC_CONF_ROW(master_conf_t, regex_depth_limit, "regex_depth_limit", MC_CONF_UINT, "10000", 1,
                1e9, "nested backtracking one regex may reach on one key (PCRE2 depth limit)"),
    MC_CONF_ROW(master_conf_t, regex_heap_limit, "regex_heap_limit", MC_CONF_SIZE, "4MiB", 1024,
                4294967296.0, "heap one regex may use on one key (PCRE2 heap limit)"),
    MC_CONF_ROW(master_conf_t, meta_max_entries, "meta_max_entries", MC_CONF_UINT, "65536", 1, 1e8,
                "entries the embedded metadata store holds at most"),
    MC_CONF_ROW(master_conf_t, meta_max_bytes, "meta_max_bytes", MC_CONF_SIZE, "256MiB", 1024,
                1099511627776.0,
                "bytes of keys and values the embedded metadata store holds at most"),
    /* node-local offload: upstream's names (store/README.md, "Node-local offload") */
    MC_CONF_ROW(master_conf_t, enable_offload, "enable_offload", MC_CONF_BOOL, "false", 0, 0,
                "nodes with an offload directory keep objects on their own disk (LOCAL_DISK "
                "replicas)"),
    MC_CONF_ROW(master_conf_t, offload_on_evict, "offload_on_evict", MC_CONF_BOOL, "false", 0, 0,
                "offload when eviction picks an object (true) or after every put (false)"),
    MC_CONF_ROW(master_conf_t, offload_force_evict, "offload_force_evict", MC_CONF_BOOL, "false", 0,
                0, "a full offload queue: evict without offloading (true) or keep in memory"),
    MC_CONF_ROW(master_conf_t, offloading_queue_limit, "offloading_queue_limit", MC_CONF_UINT,
                "50000", 1, 1e8, "offload requests queued per node at most"),
    MC_CONF_ROW(master_conf_t, offload_cap_ratio, "offload_cap_ratio", MC_CONF_DOUBLE, "0.5", 0.0,
                1.0, "offload requests one eviction cycle may queue, as a fraction of the limit"),
    MC_CONF_ROW(master_conf_t, offload_timeout, "offload_timeout", MC_CONF_DURATION, "30s", 100000,
                3600e6,
                "an offload request unanswered this long is void (evicted as "
                "without offload)"),
    MC_CONF_ROW(master_conf_t, promotion_on_hit, "promotion_on_hit", MC_CONF_BOOL, "false", 0, 0,
                "a key loaded from a node's disk promotion_admission_threshold times stays in "
                "DRAM (else a load is the first to go at the next eviction)"),
    MC_CONF_ROW(master_conf_t, promotion_admission_threshold, "promotion_admission_threshold",
                MC_CONF_UINT, "2", 1, 255, "loads of a key (count-min sketch) that promote it"),
};

/* [ha]: several masters, one leader, no metadata lost on failover. */
typedef struct ha_conf {
    char *backend;
    char *cluster_id;
    uint64_t lease_ttl;
    int sync;
    uint64_t flush_interval;
    uint64_t snapshot_records;
    uint64_t snapshot_chunk;
    char *advertise_address;
    uint64_t wait_replicas;
} ha_conf_t;

static const char *const sync_choices[] = {"off", "async", "strict", NULL};

static const mc_conf_key_t ha_keys[] = {
    MC_CONF_ROW(ha_conf_t, backend, "backend", MC_CONF_STRING, "", 0, 0,
                "coordinator of several masters: redis://HOST[:PORT][/DB], or "
                "redis-sentinel://HOST[:PORT][,HOST[:PORT]...]/NAME[/DB] for the primary that "
                "Redis Sentinels watch as NAME (followed across failovers); empty = a single "
                "master (no HA)"),
    MC_CONF_ROW(ha_conf_t, cluster_id, "cluster_id", MC_CONF_STRING, "mooncake", 0, 0,
                "masters (and clients, master = redis://...?cluster=ID) of one cluster share it"),
    MC_CONF_ROW(ha_conf_t, lease_ttl, "lease_ttl", MC_CONF_DURATION, "5s", 300000, 60e6,
                "leader lease; a dead leader is replaced within about this plus 250 ms"),
    MC_CONF_ENUM_ROW(ha_conf_t, sync, "sync", sync_choices, "strict",
                     "strict: a change is acknowledged only once journaled in Redis; async: "
                     "journaled within flush_interval; off: no HA even with a backend"),
    MC_CONF_ROW(ha_conf_t, flush_interval, "flush_interval", MC_CONF_DURATION, "10ms", 1000, 1e6,
                "longest delay before a journal record no reply waits for reaches Redis "
                "(async: every record; strict: PutStart)"),
    MC_CONF_ROW(ha_conf_t, snapshot_records, "snapshot_records", MC_CONF_UINT, "1000000", 0, 1e12,
                "a standby writes a snapshot and trims the journal after at least this many new "
                "records and twice the state (bounds replay); 0 = never"),
    MC_CONF_ROW(ha_conf_t, snapshot_chunk, "snapshot_chunk", MC_CONF_SIZE, "16MiB", 4096, 256 << 20,
                "a snapshot larger than this is stored as a list of chunks of about this size "
                "(a Redis string holds at most 512 MB): any state fits"),
    MC_CONF_ROW(ha_conf_t, advertise_address, "advertise_address", MC_CONF_STRING, "", 0, 0,
                "HOST:PORT clients reach this master at when it leads; empty = "
                "server.bind_address (127.0.0.1 for 0.0.0.0) and the RPC port"),
    MC_CONF_ROW(ha_conf_t, wait_replicas, "wait_replicas", MC_CONF_UINT, "1", 0, 16,
                "with a redis-sentinel:// backend and sync = strict: a change is acknowledged "
                "only once this many Redis replicas have its journal record (WAIT), so a Redis "
                "failover loses none; while fewer are reachable nothing is acknowledged; "
                "0 = once the primary has it; ignored with redis://"),
};

/* [security] */
typedef struct security_conf {
    char *secret_file;
} security_conf_t;

static const mc_conf_key_t security_keys[] = {
    MC_CONF_ROW(security_conf_t, secret_file, "secret_file", MC_CONF_STRING, "", 0, 0,
                "file holding the cluster's secret (the same on every process; >= 16 bytes; "
                "mode 600): every RPC connection then proves both sides hold it "
                "(HMAC-SHA256 challenge-response) before any other frame; empty = none"),
};

static const char usage[] =
    "usage: mooncake-master [-c FILE] [--set section.key=value]... [--dump-config] [--help]\n"
    "The store's control plane: object metadata, allocation, leases, eviction, liveness,\n"
    "embedded transfer metadata, Prometheus metrics.\n";

int main(int argc, char **argv)
{
    char err[512];
    server_conf_t sc;
    master_conf_t mcf;
    ha_conf_t hcf;
    meta_conf_t mtc;
    security_conf_t secf;
    mc_auth_key_t key;
    mc_log_opts_t lo;
    int rc = 1;

    mc_conf_t *conf = mc_conf_create();
    if (conf == NULL ||
        mc_conf_add_section(conf, "server", server_keys, MC_ARRAY_SIZE(server_keys), &sc) !=
            MC_OK ||
        mc_conf_add_section(conf, "master", master_keys, MC_ARRAY_SIZE(master_keys), &mcf) !=
            MC_OK ||
        mc_conf_add_section(conf, "ha", ha_keys, MC_ARRAY_SIZE(ha_keys), &hcf) != MC_OK ||
        mc_conf_add_section(conf, "metadata", meta_keys, MC_ARRAY_SIZE(meta_keys), &mtc) != MC_OK ||
        mc_conf_add_section(conf, "security", security_keys, MC_ARRAY_SIZE(security_keys), &secf) !=
            MC_OK ||
        mc_daemon_add_log_section(conf, &lo) != MC_OK) {
        fprintf(stderr, "mooncake-master: cannot set up configuration\n");
        goto out;
    }
    rc = mc_daemon_configure(conf, &lo, argc, argv, usage, "mooncake-master");
    if (rc >= 0)
        goto out;
    rc = 1;

    mc_master_server_opts_t o;
    mc_master_server_opts_init(&o);
    if (secf.secret_file[0] != '\0') {
        if (mc_auth_key_load(secf.secret_file, &key, err, sizeof(err)) != MC_OK) {
            fprintf(stderr, "mooncake-master: security.secret_file: %s\n", err);
            rc = 2;
            goto out;
        }
        o.auth_key = &key;
    }
    o.bind_address = sc.bind_address;
    o.rpc_port = (uint16_t)sc.rpc_port;
    o.http_port = (uint16_t)sc.http_port;
    o.http_enabled = sc.http_enabled;
    o.http_metadata = mtc.http;
    o.http_metadata_port = (uint16_t)mtc.http_port;
    o.http_metadata_token = mtc.http_token;
    o.tick_interval_us = sc.tick_interval;
    o.fsdir = sc.fsdir;
    o.cluster_id = sc.cluster_id;
    o.persist = sc.persist;
    o.tier_scan_max = sc.tier_scan_max;
    o.tier_quota = sc.tier_quota;
    o.regex_timeout_us = sc.regex_timeout;
    o.regex_queue = (unsigned)sc.regex_queue;
    o.max_clients = (unsigned)sc.max_clients;
    o.max_client_input = sc.max_client_input;
    o.max_input_total = sc.max_input_total;
    o.first_frame_timeout_us = sc.first_frame_timeout;
    if (mc_daemon_parse_reactors(sc.reactors, "server.reactors", &o.reactors, err, sizeof(err)) !=
        MC_OK) {
        fprintf(stderr, "mooncake-master: %s\n", err);
        rc = 2;
        goto out;
    }
    o.master.lease_ttl_us = mcf.lease_ttl;
    o.master.lease_release = mcf.lease_release;
    o.master.soft_pin_ttl_us = mcf.soft_pin_ttl;
    o.master.max_soft_pin_ttl_us = mcf.max_soft_pin_ttl;
    o.master.allow_evict_soft_pinned = mcf.allow_evict_soft_pinned;
    o.master.eviction_ratio = mcf.eviction_ratio;
    o.master.eviction_high_watermark = mcf.eviction_high_watermark_ratio;
    o.master.client_ttl_us = mcf.client_ttl;
    o.master.put_start_discard_timeout_us = mcf.put_start_discard_timeout;
    o.master.put_start_release_timeout_us = mcf.put_start_release_timeout;
    o.master.max_key_len = (uint32_t)mcf.max_key_len;
    o.master.max_object_size = mcf.max_object_size;
    o.master.max_replicas = (uint32_t)mcf.max_replicas;
    o.master.regex.max_len = (uint32_t)mcf.regex_max_len;
    o.master.regex.match_limit = (uint32_t)mcf.regex_match_limit;
    o.master.regex.depth_limit = (uint32_t)mcf.regex_depth_limit;
    o.master.regex.heap_limit_kib = (uint32_t)(mcf.regex_heap_limit / 1024);
    o.master.meta_max_entries = mcf.meta_max_entries;
    o.master.meta_max_bytes = mcf.meta_max_bytes;
    o.master.enable_offload = mcf.enable_offload;
    o.master.offload_on_evict = mcf.offload_on_evict;
    o.master.offload_force_evict = mcf.offload_force_evict;
    o.master.offloading_queue_limit = (uint32_t)mcf.offloading_queue_limit;
    o.master.offload_cap_ratio = mcf.offload_cap_ratio;
    o.master.offload_timeout_us = mcf.offload_timeout;
    o.master.promotion_on_hit = mcf.promotion_on_hit;
    o.master.promotion_admission_threshold = (uint32_t)mcf.promotion_admission_threshold;
    if (o.master.put_start_release_timeout_us <= o.master.put_start_discard_timeout_us) {
        fprintf(stderr, "mooncake-master: master.put_start_release_timeout must be longer than "
                        "master.put_start_discard_timeout\n");
        rc = 2;
        goto out;
    }

    if (hcf.backend[0] != '\0' && hcf.sync != MC_HA_SYNC_OFF) {
        mc_ha_url_t u;
        const char *why = NULL;
        if (mc_ha_url_parse(hcf.backend, &u, &why) != MC_OK || u.cluster[0] != '\0') {
            fprintf(stderr, "mooncake-master: ha.backend \"%s\": %s\n", hcf.backend,
                    why != NULL ? why : "no ?cluster= here: use ha.cluster_id");
            rc = 2;
            goto out;
        }
        if (hcf.cluster_id[0] == '\0' || strpbrk(hcf.cluster_id, " /\t") != NULL ||
            strlen(hcf.cluster_id) >= MC_HA_CLUSTER_MAX) {
            fprintf(stderr,
                    "mooncake-master: ha.cluster_id \"%s\": empty, too long, or with "
                    "'/' or blanks\n",
                    hcf.cluster_id);
            rc = 2;
            goto out;
        }
        o.ha.sync = hcf.sync;
        o.ha.backend = hcf.backend;
        o.ha.cluster_id = hcf.cluster_id;
        o.ha.lease_ttl_us = hcf.lease_ttl;
        o.ha.flush_interval_us = hcf.flush_interval;
        o.ha.advertise = hcf.advertise_address;
        o.ha.snapshot_records = hcf.snapshot_records;
        o.ha.snapshot_chunk = hcf.snapshot_chunk;
        /* what clients are told to dial when this master leads */
        char adv[256];
        snprintf(adv, sizeof(adv), "%s",
                 hcf.advertise_address[0] != '\0' ? hcf.advertise_address
                 : strcmp(sc.bind_address, "0.0.0.0") == 0 || strcmp(sc.bind_address, "::") == 0
                     ? "127.0.0.1"
                     : sc.bind_address);
        char *colon = strrchr(adv, ':');
        if (hcf.advertise_address[0] != '\0' && colon != NULL && strchr(adv, ']') < colon)
            *colon = '\0'; /* HOST:PORT -> HOST */
        mc_daemon_check_advertise("mooncake-master", sc.bind_address, adv, "ha.advertise_address");
        o.ha.wait_replicas = (unsigned)hcf.wait_replicas;
    }

    sigset_t sigs;
    mc_daemon_block_signals(&sigs);
    mc_master_server_t *srv = NULL;
    mc_status_t st = mc_master_server_start(&o, &srv);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake-master: cannot start: %s\n", mc_status_msg(st));
        goto out;
    }
    MC_INFO(MASTER,
            "mooncake-master %s ready: rpc %s:%u, http %s, %u reactor(s), view version %lld",
            mc_version(), sc.bind_address, mc_master_server_rpc_port(srv),
            o.http_enabled ? "on" : "off", mc_master_server_reactors(srv),
            (long long)mc_master_server_view_version(srv));
    if (o.http_enabled)
        MC_INFO(MASTER, "metrics at http://%s:%u/metrics%s", sc.bind_address,
                mc_master_server_http_port(srv), o.http_metadata ? ", metadata at /metadata" : "");
    if (o.http_enabled && o.http_metadata && mc_master_server_http_metadata_port(srv) != 0)
        MC_INFO(MASTER, "HTTP metadata also at http://%s:%u/metadata", sc.bind_address,
                mc_master_server_http_metadata_port(srv));
    char ready[160];
    snprintf(ready, sizeof(ready), "serving: rpc port %u, http port %u",
             mc_master_server_rpc_port(srv), mc_master_server_http_port(srv));
    mc_daemon_ready(ready);
    int sig = mc_daemon_wait_signal(&sigs);
    mc_daemon_stopping();
    MC_INFO(MASTER, "signal %d (%s): shutting down", sig, strsignal(sig));
    mc_master_server_stop(srv);
    MC_INFO(MASTER, "stopped");
    rc = 0;
out:
    mc_conf_destroy(conf);
    return rc;
}
