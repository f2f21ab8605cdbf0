/*
 * echo_server - RPC echo service for integration tests and benchmarks.
 *
 *   echo_server [-r REACTORS] [-p PORT]
 *
 * Prints "port N" on stdout once listening, then serves until SIGTERM/SIGINT.
 * Methods: MC_RPC_ECHO (body back), MC_RPC_ECHO_SLOW (body {1: delay_us}:
 * replies after the delay, asynchronously), MC_RPC_TEST_PUT / MC_RPC_TEST_GET
 * (payloads into / out of a 64 MiB region, through a payload sink, zero-copy).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "reactor/reactor.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "util/log.h"
#include "util/mem.h"

static void on_echo(void *ctx, mc_rpc_req_t *req)
{
    size_t len;
    const uint8_t *body = mc_rpc_req_body(req, &len);
    (void)ctx;
    mc_rpc_reply(req, MC_OK, body, len);
}

typedef struct slow {
    mc_timer_t t;
    mc_rpc_req_t *req;
} slow_t;

static void on_slow_timer(mc_timer_t *t, void *arg)
{
    slow_t *s = arg;
    mc_rpc_reply(s->req, MC_OK, NULL, 0);
    mc_timer_fini(t);
    mc_free(s);
}

static void on_echo_slow(void *ctx, mc_rpc_req_t *req)
{
    size_t len;
    const uint8_t *body = mc_rpc_req_body(req, &len);
    mc_mp_reader_t r;
    uint64_t delay = 0;
    (void)ctx;
    mc_mp_reader_init(&r, body, len);
    uint32_t n = mc_mp_read_map(&r);
    for (uint32_t i = 0; i < n; i++) {
        if (mc_mp_read_uint(&r) == 1)
            delay = mc_mp_read_uint(&r);
        else
            mc_mp_skip(&r);
    }
    slow_t *s = MC_NEW(slow_t);
    if (r.err != MC_OK || s == NULL ||
        mc_timer_init(&s->t, mc_rpc_req_reactor(req), on_slow_timer, s) != MC_OK) {
        mc_free(s);
        mc_rpc_reply(req, r.err != MC_OK ? MC_ERR_INVALID_PARAMS : MC_ERR_NOMEM, NULL, 0);
        return;
    }
    s->req = req;
    mc_timer_start(&s->t, delay, 0);
}

#define REGION_SIZE (64u << 20)
static uint8_t *region;

/* Read {1: offset, 2: length} */
static int read_range(mc_rpc_req_t *req, uint64_t *off, uint64_t *len)
{
    size_t blen;
    const uint8_t *body = mc_rpc_req_body(req, &blen);
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, body, blen);
    uint32_t n = mc_mp_read_map(&r);
    for (uint32_t i = 0; i < n; i++) {
        switch (mc_mp_read_uint(&r)) {
        case 1:
            *off = mc_mp_read_uint(&r);
            break;
        case 2:
            *len = mc_mp_read_uint(&r);
            break;
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    return r.err == MC_OK ? 0 : -1;
}

static mc_status_t put_sink(void *ctx, mc_rpc_req_t *req, uint64_t plen, void **dst)
{
    uint64_t off = 0, len = 0;
    (void)ctx;
    if (read_range(req, &off, &len) != 0)
        return MC_ERR_INVALID_PARAMS;
    if (off > REGION_SIZE || plen > REGION_SIZE - off)
        return MC_ERR_ADDRESS_NOT_REGISTERED; /* touches nothing */
    *dst = region + off;
    return MC_OK;
}

static void on_put(void *ctx, mc_rpc_req_t *req)
{
    size_t plen;
    (void)ctx;
    mc_rpc_req_payload(req, &plen);
    mc_rpc_reply(req, plen > 0 ? MC_OK : MC_ERR_INVALID_PARAMS, NULL, 0);
}

static void on_get(void *ctx, mc_rpc_req_t *req)
{
    uint64_t off = 0, len = 0;
    (void)ctx;
    if (read_range(req, &off, &len) != 0 || off > REGION_SIZE || len > REGION_SIZE - off) {
        mc_rpc_reply(req, MC_ERR_ADDRESS_NOT_REGISTERED, NULL, 0);
        return;
    }
    mc_rpc_reply_begin(req);
    mc_rpc_reply_end_payload(req, MC_OK, region + off, len);
}

int main(int argc, char **argv)
{
    unsigned nreactors = 1;
    unsigned port = 0;
    int opt;
    while ((opt = getopt(argc, argv, "r:p:")) != -1) {
        if (opt == 'r')
            nreactors = (unsigned)atoi(optarg);
        else if (opt == 'p')
            port = (unsigned)atoi(optarg);
        else {
            fprintf(stderr, "usage: echo_server [-r REACTORS] [-p PORT]\n");
            return 2;
        }
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* reactor threads inherit the mask */
    signal(SIGPIPE, SIG_IGN);

    if (getenv("ECHO_LOG") != NULL) /* e.g. ECHO_LOG=rpc=trace when debugging */
        mc_log_set_spec(getenv("ECHO_LOG"), NULL, 0);
    region = mc_calloc(1, REGION_SIZE);
    if (region == NULL)
        return 1;
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = nreactors;
    go.name = "echo";
    mc_reactor_group_t *g = NULL;
    if (mc_reactor_group_create(&go, &g) != MC_OK)
        return 1;
    mc_reactor_t *rs[64];
    unsigned n = mc_reactor_group_count(g);
    for (unsigned i = 0; i < n && i < 64; i++)
        rs[i] = mc_reactor_group_get(g, i);

    mc_rpc_server_opts_t so;
    mc_rpc_server_opts_init(&so);
    so.bind_addr = "127.0.0.1";
    so.port = (uint16_t)port;
    mc_rpc_server_t *srv = NULL;
    if (mc_rpc_server_create(rs, n, &so, &srv) != MC_OK ||
        mc_rpc_server_register(srv, MC_RPC_ECHO, on_echo, NULL) != MC_OK ||
        mc_rpc_server_register(srv, MC_RPC_ECHO_SLOW, on_echo_slow, NULL) != MC_OK ||
        mc_rpc_server_register_sink(srv, MC_RPC_TEST_PUT, put_sink, on_put, NULL) != MC_OK ||
        mc_rpc_server_register(srv, MC_RPC_TEST_GET, on_get, NULL) != MC_OK ||
        mc_rpc_server_start(srv) != MC_OK) {
        fprintf(stderr, "echo_server: cannot start\n");
        return 1;
    }
    printf("port %u\n", mc_rpc_server_port(srv));
    fflush(stdout);

    int sig = 0;
    sigwait(&set, &sig);
    mc_rpc_server_destroy(srv);
    mc_reactor_group_destroy(g);
    mc_free(region);
    return 0;
}
