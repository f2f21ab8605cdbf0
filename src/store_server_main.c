/*
 * mooncake-store-server - a storage node: contributes DRAM to the pool.
 *
 *   mooncake-store-server [-c FILE] [--set section.key=value]... [--dump-config] [--help]
 *
 * A store client (mooncake/store.h) that only mounts a segment of
 * global_segment_size bytes: the master places other clients' objects in it
 * and they read and write it with their transfer engines. Runs on its
 * built-in defaults when no file is given. When the segment is set up it
 * prints "ready <segment name>" on stdout (for scripts and tests), and with
 * service.enabled then "service HOST:PORT": the store service of co-located
 * clients (store/service.h) listens there. Stops
 * cleanly on SIGINT/SIGTERM: the segment is unmounted and the descriptor
 * unpublished.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/store.h"
#include "store/node_http.h"
#include "store/service.h"
#include "util/conf.h"
#include "daemon.h"
#include "util/log.h"
#include "util/mem.h"

/* [store] */
typedef struct store_conf {
    char *local_hostname;
    char *master;
    char *metadata;
    char *protocol;
    char *advertise_host;
    uint64_t port;
    uint64_t global_segment_size;
    char *reactors;
    uint64_t rpc_timeout;
    uint64_t transfer_timeout;
    int shm; /* index in shm_choices */
    char *shm_group;
    bool http_enabled;
    char *http_bind;
    uint64_t http_port;
    char *offload_dir;
    uint64_t offload_quota;
    bool offload_buffered_io;
    bool offload_direct_writes;
    bool segment_hugepages;
} store_conf_t;

static const char *const shm_choices[] = {"on", "off", NULL};

/* [security] */
typedef struct security_conf {
    char *secret_file;
} security_conf_t;

static const mc_conf_key_t security_keys[] = {
    MC_CONF_ROW(security_conf_t, secret_file, "secret_file", MC_CONF_STRING, "", 0, 0,
                "file holding the cluster's secret (the same on every process; >= 16 bytes; "
                "mode 600): the master, peer, data and service connections authenticate with "
                "it (HMAC-SHA256 challenge-response); empty = none"),
};

static const mc_conf_key_t store_keys[] = {
    MC_CONF_ROW(store_conf_t, local_hostname, "local_hostname", MC_CONF_STRING, "", 0, 0,
                "name of this node's segment; empty = advertise_host:port"),
    MC_CONF_ROW(store_conf_t, master, "master", MC_CONF_STRING, "127.0.0.1:50051", 0, 0,
                "HOST:PORT of mooncake-master, or redis://HOST:PORT/DB?cluster=ID (or "
                "redis-sentinel://H1:P1,H2:P2/NAME/DB?cluster=ID) to follow the leader of HA "
                "masters"),
    MC_CONF_ROW(store_conf_t, metadata, "metadata", MC_CONF_STRING, "master", 0, 0,
                "transfer metadata: master (the master's embedded service), "
                "redis://HOST:PORT[/DB], redis-sentinel://H1:P1,H2:P2/NAME[/DB], "
                "http://HOST:PORT/metadata (upstream's protocol; the master's HTTP port serves "
                "it) or p2p"),
    MC_CONF_ROW(store_conf_t, protocol, "protocol", MC_CONF_STRING, "tcp", 0, 0,
                "transport: tcp or rdma (MC_RDMA_* variables: transport/README.md)"),
    MC_CONF_ROW(store_conf_t, advertise_host, "advertise_host", MC_CONF_STRING, "127.0.0.1", 0, 0,
                "address other nodes reach this one at"),
    MC_CONF_ROW(store_conf_t, port, "port", MC_CONF_UINT, "0", 0, 65535,
                "transfer engine port (RPC and TCP data); 0 = any free port"),
    MC_CONF_ROW(store_conf_t, global_segment_size, "global_segment_size", MC_CONF_SIZE, "1GiB",
                1048576, 1099511627776.0,
                "DRAM contributed to the pool (mapped and pre-faulted at start)"),
    MC_CONF_ROW(store_conf_t, reactors, "reactors", MC_CONF_STRING, "auto", 0, 0,
                "event-loop threads: auto (one per NUMA node) or a count 1..256"),
    MC_CONF_ROW(store_conf_t, rpc_timeout, "rpc_timeout", MC_CONF_DURATION, "5s", 1000, 600e6,
                "calls to the master"),
    MC_CONF_ROW(store_conf_t, transfer_timeout, "transfer_timeout", MC_CONF_DURATION, "10s", 1000,
                600e6, "data transfers, per slice"),
    MC_CONF_ENUM_ROW(store_conf_t, shm, "shm", shm_choices, "on",
                     "on: the segment is shared memory that processes of this host reach with "
                     "memcpy (others use tcp/rdma); off: tcp/rdma for everyone"),
    MC_CONF_ROW(store_conf_t, shm_group, "shm_group", MC_CONF_STRING, "", 0, 0,
                "group (name or number) admitted to the shared memory besides this user; "
                "empty = this user only"),
    MC_CONF_ROW(store_conf_t, http_enabled, "http_enabled", MC_CONF_BOOL, "true", 0, 0,
                "serve /metrics (Prometheus) and /health on http_port"),
    MC_CONF_ROW(store_conf_t, http_bind, "http_bind", MC_CONF_STRING, "0.0.0.0", 0, 0,
                "address the HTTP port listens on"),
    MC_CONF_ROW(store_conf_t, http_port, "http_port", MC_CONF_UINT, "9300", 0, 65535,
                "HTTP port: /metrics, /health (upstream's client metrics port); 0 = any free "
                "port (printed as \"http HOST:PORT\" on stdout)"),
    MC_CONF_ROW(store_conf_t, offload_dir, "offload_dir", MC_CONF_STRING, "", 0, 0,
                "node-local offload (upstream ssd_offload_path; the master needs enable_offload): "
                "an absolute directory on this node's own disk, one node per directory; empty = "
                "$MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, or none"),
    MC_CONF_ROW(store_conf_t, offload_quota, "offload_quota", MC_CONF_SIZE, "0", 0,
                1125899906842624.0,
                "bytes of offload files at most (least recently used go first); 0 = no quota"),
    MC_CONF_ROW(store_conf_t, offload_buffered_io, "offload_buffered_io", MC_CONF_BOOL, "false", 0,
                0,
                "offload loads and writes go through the page cache; false = with O_DIRECT "
                "where the file system allows it (writes: see offload_direct_writes)"),
    MC_CONF_ROW(store_conf_t, offload_direct_writes, "offload_direct_writes", MC_CONF_BOOL, "false",
                0, 0,
                "offload writes with O_DIRECT where the file system allows it; false = through "
                "the page cache, synced, then dropped from it (1.5-1.7x faster on the VM "
                "measured)"),
    MC_CONF_ROW(store_conf_t, segment_hugepages, "segment_hugepages", MC_CONF_BOOL, "false", 0, 0,
                "the segment in hugetlb pages (2 MiB, reserved in /proc/sys/vm/nr_hugepages): "
                "an offload load reads into it in a few large device requests (loads 1.3-1.6x "
                "faster on the VM measured); too few free: normal pages, with a warning"),
};

/* [service]: the role of upstream's mooncake_client ("real client") */
typedef struct service_conf {
    bool enabled;
    char *bind;
    uint64_t port;
    uint64_t threads;
    uint64_t max_sessions;
    bool prefer_local;
    uint64_t staging;
} service_conf_t;

static const mc_conf_key_t service_keys[] = {
    MC_CONF_ROW(service_conf_t, enabled, "enabled", MC_CONF_BOOL, "false", 0, 0,
                "serve co-located clients (mc_store_config_t.service / setup_dummy): they share "
                "their buffers with this node and it runs their puts and gets"),
    MC_CONF_ROW(service_conf_t, bind, "bind", MC_CONF_STRING, "127.0.0.1", 0, 0,
                "address of the control port (clients are on this host)"),
    MC_CONF_ROW(service_conf_t, port, "port", MC_CONF_UINT, "50052", 1, 65535,
                "control port; the unix socket is @mooncake_client_<port>.sock"),
    MC_CONF_ROW(service_conf_t, threads, "threads", MC_CONF_UINT, "4", 1, 256,
                "worker threads running the clients' calls"),
    MC_CONF_ROW(service_conf_t, max_sessions, "max_sessions", MC_CONF_UINT, "256", 1, 65536,
                "co-located clients at once"),
    MC_CONF_ROW(service_conf_t, prefer_local, "prefer_local", MC_CONF_BOOL, "true", 0, 0,
                "puts that name no preferred segment prefer this node's segment"),
    MC_CONF_ROW(service_conf_t, staging, "staging", MC_CONF_SIZE, "64MiB", 1048576, 1099511627776.0,
                "staging of the node's client for the clients' multi-part values (single "
                "buffers move straight between their shared memory and the segments)"),
};

static const char usage[] =
    "usage: mooncake-store-server [-c FILE] [--set section.key=value]... [--dump-config] "
    "[--help]\n"
    "A storage node of Mooncake Store: mounts global_segment_size bytes of DRAM at the master\n"
    "so that clients' objects can be placed in it.\n";

int main(int argc, char **argv)
{
    char err[512];
    store_conf_t sc;
    service_conf_t vc;
    mc_log_opts_t lo;
    int rc = 1;

    security_conf_t secf;
    mc_conf_t *conf = mc_conf_create();
    if (conf == NULL ||
        mc_conf_add_section(conf, "store", store_keys, MC_ARRAY_SIZE(store_keys), &sc) != MC_OK ||
        mc_conf_add_section(conf, "service", service_keys, MC_ARRAY_SIZE(service_keys), &vc) !=
            MC_OK ||
        mc_conf_add_section(conf, "security", security_keys, MC_ARRAY_SIZE(security_keys), &secf) !=
            MC_OK ||
        mc_daemon_add_log_section(conf, &lo) != MC_OK) {
        fprintf(stderr, "mooncake-store-server: cannot set up configuration\n");
        goto out;
    }
    rc = mc_daemon_configure(conf, &lo, argc, argv, usage, "mooncake-store-server");
    if (rc >= 0)
        goto out;
    rc = 1;

    mc_store_config_t c;
    mc_store_config_init(&c);
    c.local_hostname = sc.local_hostname[0] != '\0' ? sc.local_hostname : NULL;
    c.master = sc.master;
    c.metadata = sc.metadata;
    c.secret_file = secf.secret_file[0] != '\0' ? secf.secret_file : NULL;
    c.protocol = sc.protocol;
    c.advertise_host = sc.advertise_host;
    c.port = (uint16_t)sc.port;
    c.global_segment_size = sc.global_segment_size;
    /* a storage node reads and writes nothing itself; a service gathers its
     * clients' multi-part values through staging */
    c.local_buffer_size = vc.enabled ? vc.staging : 0;
    c.rpc_timeout_us = sc.rpc_timeout;
    c.transfer_timeout_us = sc.transfer_timeout;
    c.shm = shm_choices[sc.shm];
    c.shm_group = sc.shm_group[0] != '\0' ? sc.shm_group : NULL;
    {
        const char *env = getenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
        c.offload_dir = sc.offload_dir[0] != '\0'       ? sc.offload_dir
                        : env != NULL && env[0] != '\0' ? env
                                                        : NULL;
    }
    c.offload_quota = sc.offload_quota;
    c.offload_buffered_io = sc.offload_buffered_io;
    c.offload_direct_writes = sc.offload_direct_writes;
    c.segment_hugepages = sc.segment_hugepages;
    if (mc_daemon_parse_reactors(sc.reactors, "store.reactors", &c.reactors, err, sizeof(err)) !=
        MC_OK) {
        fprintf(stderr, "mooncake-store-server: %s\n", err);
        rc = 2;
        goto out;
    }

    sigset_t sigs;
    mc_daemon_block_signals(&sigs);
    mc_store_t *s = NULL;
    mc_status_t st = mc_store_open(&c, &s);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake-store-server: cannot start: %s (%s)\n", mc_status_msg(st),
                mc_status_str(st));
        goto out;
    }
    mc_store_service_t *svc = NULL;
    if (vc.enabled) {
        mc_store_service_opts_t so;
        mc_store_service_opts_init(&so);
        so.bind = vc.bind;
        so.port = (uint16_t)vc.port;
        so.threads = (unsigned)vc.threads;
        so.max_sessions = (unsigned)vc.max_sessions;
        so.prefer_local = vc.prefer_local;
        so.group = c.shm_group;
        so.secret_file = c.secret_file;
        st = mc_store_service_start(s, &so, &svc);
        if (st != MC_OK) {
            fprintf(stderr,
                    "mooncake-store-server: cannot serve co-located clients on %s:%u: %s "
                    "(%s)\n",
                    vc.bind, (unsigned)vc.port, mc_status_msg(st), mc_status_str(st));
            mc_store_close(s);
            goto out;
        }
    }
    mc_node_http_t *http = NULL;
    uint16_t http_port = 0;
    if (sc.http_enabled) {
        err[0] = '\0';
        st = mc_node_http_start(s, sc.http_bind, (uint16_t)sc.http_port, &http_port, &http, err,
                                sizeof(err));
        if (st != MC_OK) {
            fprintf(stderr, "mooncake-store-server: %s\n", err);
            mc_store_service_stop(svc);
            mc_store_close(s);
            goto out;
        }
        MC_INFO(CLIENT, "metrics at http://%s:%u/metrics", sc.http_bind, (unsigned)http_port);
    }
    mc_daemon_check_advertise("mooncake-store-server", "0.0.0.0", sc.advertise_host,
                              "store.advertise_host");
    char size[MC_CONF_FMT_LEN];
    MC_INFO(CLIENT, "mooncake-store-server ready: segment '%s' of %s, master %s, metadata %s",
            mc_store_name(s), mc_conf_format_size(sc.global_segment_size, size, sizeof(size)),
            sc.master, sc.metadata);
    printf("ready %s\n", mc_store_name(s));
    if (svc != NULL)
        printf("service %s:%u\n", vc.bind, (unsigned)vc.port);
    if (http != NULL)
        printf("http %s:%u\n", sc.http_bind, (unsigned)http_port);
    fflush(stdout);
    char ready[320];
    snprintf(ready, sizeof(ready), "serving segment %s", mc_store_name(s));
    mc_daemon_ready(ready);
    int sig = mc_daemon_wait_signal(&sigs);
    mc_daemon_stopping();
    MC_INFO(CLIENT, "signal %d (%s): unmounting and shutting down", sig, strsignal(sig));
    mc_node_http_stop(http);    /* it reads s */
    mc_store_service_stop(svc); /* its clients' calls end first */
    mc_store_close(s);
    MC_INFO(CLIENT, "stopped");
    rc = 0;
out:
    mc_conf_destroy(conf);
    return rc;
}
