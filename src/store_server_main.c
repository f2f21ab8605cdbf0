/*
 * mooncake-store-server - a storage node: contributes DRAM to the pool.
 *
 *   mooncake-store-server [-c FILE] [--set section.key=value]... [--dump-config] [--help]
 *
 * A store client (mooncake/store.h) that only mounts a segment of
 * global_segment_size bytes: the master places other clients' objects in it
 * and they read and write it with their transfer engines. Runs on its
 * built-in defaults when no file is given. When the segment is set up it
 * prints "ready <segment name>" on stdout (for scripts and tests). Stops
 * cleanly on SIGINT/SIGTERM: the segment is unmounted and the descriptor
 * unpublished.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "mooncake/store.h"
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
} store_conf_t;

static const char *const shm_choices[] = {"on", "off", NULL};

/* [security] */
typedef struct security_conf {
    char *secret_file;
} security_conf_t;

static const mc_conf_key_t security_keys[] = {
    MC_CONF_ROW(security_conf_t, secret_file, "secret_file", MC_CONF_STRING, "", 0, 0,
                "file holding the cluster's secret (the same on every process; >= 16 bytes; "
                "mode 600): the master, peer and data connections authenticate with it "
                "(HMAC-SHA256 challenge-response); empty = none"),
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
    mc_log_opts_t lo;
    int rc = 1;

    security_conf_t secf;
    mc_conf_t *conf = mc_conf_create();
    if (conf == NULL ||
        mc_conf_add_section(conf, "store", store_keys, MC_ARRAY_SIZE(store_keys), &sc) != MC_OK ||
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
    c.local_buffer_size = 0; /* a storage node reads and writes nothing itself */
    c.rpc_timeout_us = sc.rpc_timeout;
    c.transfer_timeout_us = sc.transfer_timeout;
    c.shm = shm_choices[sc.shm];
    c.shm_group = sc.shm_group[0] != '\0' ? sc.shm_group : NULL;
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
    char size[MC_CONF_FMT_LEN];
    MC_INFO(CLIENT, "mooncake-store-server ready: segment '%s' of %s, master %s, metadata %s",
            mc_store_name(s), mc_conf_format_size(sc.global_segment_size, size, sizeof(size)),
            sc.master, sc.metadata);
    printf("ready %s\n", mc_store_name(s));
    fflush(stdout);
    char ready[320];
    snprintf(ready, sizeof(ready), "serving segment %s", mc_store_name(s));
    mc_daemon_ready(ready);
    int sig = mc_daemon_wait_signal(&sigs);
    mc_daemon_stopping();
    MC_INFO(CLIENT, "signal %d (%s): unmounting and shutting down", sig, strsignal(sig));
    mc_store_close(s);
    MC_INFO(CLIENT, "stopped");
    rc = 0;
out:
    mc_conf_destroy(conf);
    return rc;
}
