/*
 * mooncake-http-metadata-server - a standalone server of upstream
 * Mooncake's HTTP metadata protocol (transport/meta_http_srv.h), for
 * deployments that run one instead of using mooncake-master's /metadata:
 *
 *   mooncake-http-metadata-server [-c FILE] [--set section.key=value]...
 *
 * Serves /metadata?key=K (GET/PUT/DELETE) and /health on
 * server.bind_address:server.port (0.0.0.0:8080 as upstream). Entries live
 * in memory, bounded by metadata.max_keys and metadata.max_total_bytes
 * (upstream's MC_METADATA_MAX_KEYS / MC_METADATA_MAX_TOTAL_BYTES set them
 * from the environment too); metadata.http_token (or MC_METADATA_HTTP_TOKEN)
 * makes every request carry that Bearer token; security.secret_file (the
 * cluster's secret) makes PUT and DELETE carry a proof over a challenge of
 * GET /auth (X-Mooncake-Auth, transport/meta_http_srv.h). When it listens it prints
 * "listening <port>" on stdout (for scripts and tests). Stops cleanly on
 * SIGINT/SIGTERM.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "transport/meta_http_srv.h"
#include "util/auth.h"
#include "util/conf.h"
#include "daemon.h"
#include "util/log.h"
#include "util/mem.h"

/* [server] */
typedef struct server_conf {
    char *bind_address;
    uint64_t port;
} server_conf_t;

static const mc_conf_key_t server_keys[] = {
    MC_CONF_ROW(server_conf_t, bind_address, "bind_address", MC_CONF_STRING, "0.0.0.0", 0, 0,
                "address the HTTP port listens on"),
    MC_CONF_ROW(server_conf_t, port, "port", MC_CONF_UINT, "8080", 0, 65535,
                "HTTP port (/metadata, /health); 0 = any free port"),
};

/* [metadata] */
typedef struct meta_conf {
    char *http_token;
    uint64_t max_keys;
    uint64_t max_total_bytes;
    uint64_t max_value;
} meta_conf_t;

static const mc_conf_key_t meta_keys[] = {
    MC_CONF_ROW(meta_conf_t, http_token, "http_token", MC_CONF_STRING, "", 0, 0,
                "Bearer token every request must carry (upstream's MC_METADATA_HTTP_TOKEN); "
                "empty = none"),
    MC_CONF_ROW(meta_conf_t, max_keys, "max_keys", MC_CONF_UINT, "65536", 1, 1e9,
                "entries held at most; a PUT of a new key beyond it answers 507"),
    MC_CONF_ROW(meta_conf_t, max_total_bytes, "max_total_bytes", MC_CONF_SIZE, "1GiB", 1,
                1099511627776.0, "bytes of values held at most; a PUT beyond it answers 507"),
    MC_CONF_ROW(meta_conf_t, max_value, "max_value", MC_CONF_SIZE, "16MiB", 1, 1073741824.0,
                "longest value (a longer PUT body is refused by the HTTP layer)"),
};

/* [security] */
typedef struct security_conf {
    char *secret_file;
} security_conf_t;

static const mc_conf_key_t security_keys[] = {
    MC_CONF_ROW(security_conf_t, secret_file, "secret_file", MC_CONF_STRING, "", 0, 0,
                "file holding the cluster's secret (>= 16 bytes; mode 600): PUT and DELETE "
                "then need a proof over a challenge of GET /auth (X-Mooncake-Auth); empty = "
                "none"),
};

static const char usage[] =
    "usage: mooncake-http-metadata-server [-c FILE] [--set section.key=value]... "
    "[--dump-config] [--help]\n"
    "Upstream Mooncake's HTTP metadata server: GET/PUT/DELETE /metadata?key=K, for transfer\n"
    "engines configured with metadata_server = http://HOST:PORT/metadata.\n";

int main(int argc, char **argv)
{
    server_conf_t sc;
    meta_conf_t mcf;
    security_conf_t secf;
    mc_log_opts_t lo;
    mc_auth_key_t key;
    int rc = 1;

    mc_conf_t *conf = mc_conf_create();
    if (conf == NULL ||
        mc_conf_add_section(conf, "server", server_keys, MC_ARRAY_SIZE(server_keys), &sc) !=
            MC_OK ||
        mc_conf_add_section(conf, "metadata", meta_keys, MC_ARRAY_SIZE(meta_keys), &mcf) != MC_OK ||
        mc_conf_add_section(conf, "security", security_keys, MC_ARRAY_SIZE(security_keys), &secf) !=
            MC_OK ||
        mc_daemon_add_log_section(conf, &lo) != MC_OK) {
        fprintf(stderr, "mooncake-http-metadata-server: cannot set up configuration\n");
        goto out;
    }
    rc = mc_daemon_configure(conf, &lo, argc, argv, usage, "mooncake-http-metadata-server");
    if (rc >= 0)
        goto out;
    rc = 1;

    mc_meta_http_server_opts_t o;
    mc_meta_http_server_opts_init(&o);
    o.bind_address = sc.bind_address;
    o.port = (uint16_t)sc.port;
    o.token = mcf.http_token;
    o.max_keys = mcf.max_keys;
    o.max_bytes = mcf.max_total_bytes;
    o.max_value = mcf.max_value;
    if (secf.secret_file[0] != '\0') {
        char err[512];
        if (mc_auth_key_load(secf.secret_file, &key, err, sizeof(err)) != MC_OK) {
            fprintf(stderr, "mooncake-http-metadata-server: security.secret_file: %s\n", err);
            rc = 2;
            goto out;
        }
        o.auth_key = &key;
    }

    sigset_t sigs;
    mc_daemon_block_signals(&sigs);
    mc_meta_http_server_t *srv = NULL;
    mc_status_t st = mc_meta_http_server_start(&o, &srv);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake-http-metadata-server: cannot start: %s\n", mc_status_msg(st));
        goto out;
    }
    MC_INFO(HTTP, "mooncake-http-metadata-server ready: http://%s:%u/metadata%s", sc.bind_address,
            mc_meta_http_server_port(srv), mcf.http_token[0] != '\0' ? " (token required)" : "");
    printf("listening %u\n", mc_meta_http_server_port(srv));
    fflush(stdout);
    mc_daemon_ready("serving /metadata");
    int sig = mc_daemon_wait_signal(&sigs);
    mc_daemon_stopping();
    MC_INFO(HTTP, "signal %d (%s): shutting down", sig, strsignal(sig));
    mc_meta_http_server_stop(srv);
    rc = 0;
out:
    mc_conf_destroy(conf);
    return rc;
}
