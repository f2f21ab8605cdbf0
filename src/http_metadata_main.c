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
 * (upstream's MC_METADATA_MAX_KEYS / MC_METADATA_MAX_TOTAL_BYTES, which set
 * them from the environment too); metadata.http_token (or
 * MC_METADATA_HTTP_TOKEN) makes every request carry that Bearer token.
 * When it listens it prints "listening <port>" on stdout (for scripts and
 * tests). Stops cleanly on SIGINT/SIGTERM.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "reactor/reactor.h"
#include "rpc/net.h"
#include "rpc/rpc.h"
#include "transport/meta_http_srv.h"
#include "util/conf.h"
#include "util/daemon.h"
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

static const char usage[] =
    "usage: mooncake-http-metadata-server [-c FILE] [--set section.key=value]... "
    "[--dump-config] [--help]\n"
    "Upstream Mooncake's HTTP metadata server: GET/PUT/DELETE /metadata?key=K, for transfer\n"
    "engines configured with metadata_server = http://HOST:PORT/metadata.\n";

typedef struct srv {
    server_conf_t *sc;
    meta_conf_t *mc;
    mc_meta_http_store_t *store;
    struct evhttp *http;
    struct event_base *base;
    uint16_t port;
    mc_status_t st;
} srv_t;

static void on_health(struct evhttp_request *req, void *arg)
{
    (void)arg;
    if (mc_meta_http_read_only(req))
        return;
    struct evbuffer *b = evbuffer_new();
    if (b != NULL)
        evbuffer_add_printf(b, "OK\n");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain");
    evhttp_send_reply(req, 200, "OK", b);
    if (b != NULL)
        evbuffer_free(b);
}

static void start_on_reactor(void *arg)
{
    srv_t *s = arg;
    s->http = evhttp_new(s->base);
    if (s->http == NULL) {
        s->st = MC_ERR_NOMEM;
        return;
    }
    evhttp_set_allowed_methods(s->http, mc_meta_http_methods());
    evhttp_set_max_headers_size(s->http, 16384);
    evhttp_set_max_body_size(s->http, (ev_ssize_t)s->mc->max_value);
    evhttp_set_timeout(s->http, 30);
    evhttp_set_cb(s->http, "/metadata", mc_meta_http_serve, s->store);
    evhttp_set_cb(s->http, "/health", on_health, s);
    struct evhttp_bound_socket *bs =
        evhttp_bind_socket_with_handle(s->http, s->sc->bind_address, (uint16_t)s->sc->port);
    if (bs == NULL) {
        MC_ERROR(HTTP, "cannot listen for HTTP on %s:%u (address in use?)", s->sc->bind_address,
                 (unsigned)s->sc->port);
        evhttp_free(s->http);
        s->http = NULL;
        s->st = MC_ERR_SOCKET;
        return;
    }
    s->port = mc_net_local_port(evhttp_bound_socket_get_fd(bs));
    s->st = MC_OK;
}

static void stop_on_reactor(void *arg)
{
    srv_t *s = arg;
    if (s->http != NULL)
        evhttp_free(s->http);
    s->http = NULL;
}

int main(int argc, char **argv)
{
    server_conf_t sc;
    meta_conf_t mcf;
    mc_log_opts_t lo;
    mc_reactor_group_t *g = NULL;
    srv_t s = {.sc = &sc, .mc = &mcf, .st = MC_ERR_CANCELED};
    int rc = 1;

    mc_conf_t *conf = mc_conf_create();
    if (conf == NULL ||
        mc_conf_add_section(conf, "server", server_keys, MC_ARRAY_SIZE(server_keys), &sc) !=
            MC_OK ||
        mc_conf_add_section(conf, "metadata", meta_keys, MC_ARRAY_SIZE(meta_keys), &mcf) != MC_OK ||
        mc_daemon_add_log_section(conf, &lo) != MC_OK) {
        fprintf(stderr, "mooncake-http-metadata-server: cannot set up configuration\n");
        goto out;
    }
    rc = mc_daemon_configure(conf, &lo, argc, argv, usage, "mooncake-http-metadata-server");
    if (rc >= 0)
        goto out;
    rc = 1;

    s.store = mc_meta_http_mem_create(mcf.max_keys, mcf.max_total_bytes, mcf.http_token);
    if (s.store == NULL) {
        fprintf(stderr, "mooncake-http-metadata-server: out of memory\n");
        goto out;
    }
    sigset_t sigs;
    mc_daemon_block_signals(&sigs);
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "httpmeta";
    if (mc_reactor_group_create(&go, &g) != MC_OK)
        goto out_store;
    s.base = mc_reactor_base(mc_reactor_group_get(g, 0));
    mc_rpc_run_on(mc_reactor_group_get(g, 0), start_on_reactor, &s);
    if (s.st != MC_OK) {
        fprintf(stderr, "mooncake-http-metadata-server: cannot start: %s\n", mc_status_msg(s.st));
        goto out_group;
    }
    MC_INFO(HTTP, "mooncake-http-metadata-server ready: http://%s:%u/metadata%s", sc.bind_address,
            s.port, mcf.http_token[0] != '\0' ? " (token required)" : "");
    printf("listening %u\n", s.port);
    fflush(stdout);
    int sig = mc_daemon_wait_signal(&sigs);
    MC_INFO(HTTP, "signal %d (%s): shutting down", sig, strsignal(sig));
    mc_rpc_run_on(mc_reactor_group_get(g, 0), stop_on_reactor, &s);
    rc = 0;
out_group:
    mc_reactor_group_destroy(g);
out_store:
    mc_meta_http_mem_destroy(s.store);
out:
    mc_conf_destroy(conf);
    return rc;
}
