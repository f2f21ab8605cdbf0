/*
 * The http:// metadata backend (upstream's HTTP metadata protocol) against
 * both servers that speak it here: mooncake-master's /metadata (on its HTTP
 * port and on the extra metadata.http_port) and the standalone
 * mooncake-http-metadata-server. Every test runs once per server (two cmocka
 * groups).
 *
 * First the conformance suite of every metadata backend (meta_cases.h)
 * against both servers; the protocol keeps entries until they are deleted
 * (keeps_entries), and a "fast" owner re-puts its entries every 100 ms.
 * Then what only HTTP has: the exact status codes and texts of the protocol
 * (curl-free: a raw socket speaks HTTP/1.1), keys that need escaping,
 * re-publishing as soon as the server's instance changes, a server that
 * stops answering (call timeout), the Bearer token, the standalone server's
 * budget, a URL without a path, HA masters (a standby answers 503, an
 * acknowledged PUT survives a failover), and a store node and client that
 * use http://master/metadata end to end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>

#include "meta_cases.h"
#include "mooncake/store.h"
#include "proc.h"
#include "reactor/reactor.h"
#include "transport/metadata.h"
#include "util/log.h"
#include "util/time.h"

typedef enum { SRV_MASTER, SRV_MASTER_EXTRA_PORT, SRV_STANDALONE } srv_kind_t;

typedef struct env {
    srv_kind_t kind;
    mc_reactor_group_t *g;
    mc_reactor_t *r;
    test_proc_t srv;
    unsigned port;     /* the HTTP port /metadata is served on */
    unsigned rpc_port; /* master only */
    const char *token; /* the server's; NULL = none */
    const char *extra; /* one more --set for the server, or NULL */
} env_t;

/* ------------------------------------------------------------ helpers */

static void start_server(env_t *e)
{
    char bin[256], port[64], rpc[64], tok[128];
    char *argv[24];
    int n = 0;
    if (e->kind == SRV_STANDALONE) {
        argv[n++] = (char *)test_prog("mooncake-http-metadata-server", bin, sizeof(bin));
        snprintf(port, sizeof(port), "server.port=%u", e->port);
        argv[n++] = "--set";
        argv[n++] = "server.bind_address=127.0.0.1";
    } else {
        argv[n++] = (char *)test_prog("mooncake-master", bin, sizeof(bin));
        if (e->kind == SRV_MASTER)
            snprintf(port, sizeof(port), "server.http_port=%u", e->port);
        else
            snprintf(port, sizeof(port), "metadata.http_port=%u", e->port);
        snprintf(rpc, sizeof(rpc), "server.rpc_port=%u", e->rpc_port);
        argv[n++] = "--set";
        argv[n++] = rpc;
        argv[n++] = "--set";
        argv[n++] = "server.bind_address=127.0.0.1";
        argv[n++] = "--set";
        argv[n++] = "server.reactors=1";
        if (e->kind == SRV_MASTER_EXTRA_PORT) {
            argv[n++] = "--set";
            argv[n++] = "server.http_port=0";
        }
    }
    argv[n++] = "--set";
    argv[n++] = port;
    argv[n++] = "--set";
    argv[n++] = "log.level=warn";
    if (e->token != NULL) {
        snprintf(tok, sizeof(tok), "metadata.http_token=%s", e->token);
        argv[n++] = "--set";
        argv[n++] = tok;
    }
    if (e->extra != NULL) {
        argv[n++] = "--set";
        argv[n++] = (char *)e->extra;
    }
    argv[n] = NULL;
    assert_int_equal(test_proc_start(&e->srv, argv), 0);
    for (int waited = 0; !test_port_open(e->port); waited += 10) {
        if (waited > 5000)
            fail_msg("%s did not listen on port %u within 5 s", argv[0], e->port);
        usleep(10000);
    }
}

static void stop_server(env_t *e, int sig)
{
    if (e->srv.pid > 0)
        test_proc_stop(&e->srv, sig, 5000);
}

static mc_meta_t *open_meta_tok(env_t *e, uint64_t timeout_us, uint64_t ttl_us, const char *tok)
{
    char conn[96];
    snprintf(conn, sizeof(conn), "http://127.0.0.1:%u/metadata", e->port);
    mc_meta_opts_t o;
    mc_meta_opts_init(&o);
    o.owner_hi = 9;
    o.owner_lo = 1;
    if (timeout_us)
        o.call_timeout_us = timeout_us;
    if (ttl_us)
        o.ttl_us = ttl_us;
    o.http_token = tok != NULL ? tok : "";
    mc_meta_t *m = NULL;
    assert_int_equal(mc_meta_open(conn, e->r, &o, &m), MC_OK);
    assert_non_null(m);
    return m;
}

static mc_meta_t *open_meta(env_t *e, uint64_t timeout_us, uint64_t ttl_us)
{
    return open_meta_tok(e, timeout_us, ttl_us, e->token);
}

/* One HTTP/1.1 exchange over a raw socket (Connection: close): the status
 * code, and the body into body (NUL-terminated). */
static int http_raw(unsigned port, const char *method, const char *target, const char *extra_hdr,
                    const char *body, char *out, size_t outlen)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[2048];
    size_t bl = body != NULL ? strlen(body) : 0;
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, target, extra_hdr != NULL ? extra_hdr : "", bl, body ? body : "");
    assert_int_equal(write(fd, req, (size_t)n), n);
    char resp[8192];
    size_t got = 0;
    ssize_t r;
    while (got + 1 < sizeof(resp) && (r = read(fd, resp + got, sizeof(resp) - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    resp[got] = '\0';
    int code = 0;
    assert_int_equal(sscanf(resp, "HTTP/1.1 %d", &code), 1);
    const char *b = strstr(resp, "\r\n\r\n");
    snprintf(out, outlen, "%s", b != NULL ? b + 4 : "");
    return code;
}

/* ------------------------------------------------------- setup/teardown */

static env_t master_env = {.kind = SRV_MASTER};
static env_t extra_env = {.kind = SRV_MASTER_EXTRA_PORT};
static env_t standalone_env = {.kind = SRV_STANDALONE};

static int group_setup_common(env_t *e, void **state)
{
    signal(SIGPIPE, SIG_IGN);
    char bin[256];
    const char *prog =
        e->kind == SRV_STANDALONE ? "mooncake-http-metadata-server" : "mooncake-master";
    if (access(test_prog(prog, bin, sizeof(bin)), X_OK) != 0) {
        fprintf(stderr, "FATAL: %s not found: build it first (make)\n", bin);
        return -1;
    }
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "meta";
    if (mc_reactor_group_create(&go, &e->g) != MC_OK)
        return -1;
    e->r = mc_reactor_group_get(e->g, 0);
    *state = e;
    return 0;
}

static int group_setup_master(void **state)
{
    return group_setup_common(&master_env, state);
}

static int group_setup_extra(void **state)
{
    return group_setup_common(&extra_env, state);
}

static int group_setup_standalone(void **state)
{
    return group_setup_common(&standalone_env, state);
}

static int group_teardown(void **state)
{
    env_t *e = *state;
    if (e != NULL)
        mc_reactor_group_destroy(e->g);
    return 0;
}

static int setup(void **state)
{
    env_t *e = *state;
    e->port = test_free_port();
    e->rpc_port = test_free_port();
    e->token = NULL;
    e->extra = NULL;
    start_server(e);
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    stop_server(e, SIGKILL);
    e->token = NULL;
    e->extra = NULL;
    return 0;
}

/* ---------------------------------------------------------------- tests */

static const uint8_t bin1[] = {0x00, 0x01, 0x00, 0xff, 'a', 0x00};
static const uint8_t bin2[] = {0xde, 0xad, 0x00, 0xbe, 0xef};

static void keys_that_need_escaping_travel_intact(void **state)
{
    env_t *e = *state;
    mc_meta_t *m = open_meta(e, 0, 0);
    static const char *const keys[] = {
        "a b/c",      "k&key=x", "p%41q", "plus+sign", "q?r#s", "utf8/\xc3\xa9\xe2\x82\xac",
        "semi;colon",
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        assert_int_equal(mc_meta_put_sync(m, keys[i], keys[i], strlen(keys[i])), MC_OK);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        meta_check_value(m, keys[i], keys[i], strlen(keys[i]));
    meta_check_value(m, "pAq", NULL, 0); /* %41 was not decoded twice */
    meta_check_value(m, "plus sign", NULL, 0);
    meta_check_list(m, "", keys, (int)(sizeof(keys) / sizeof(keys[0])));
    mc_meta_close(m);
}

/* What an upstream client (curl) sees: codes and texts of the protocol. */
static void the_server_answers_with_upstreams_codes_and_texts(void **state)
{
    env_t *e = *state;
    char body[4096];
    assert_int_equal(http_raw(e->port, "GET", "/metadata?key=nope", NULL, NULL, body, sizeof(body)),
                     404);
    assert_string_equal(body, "metadata not found");
    assert_int_equal(http_raw(e->port, "PUT", "/metadata?key=mooncake/ram/n1", NULL,
                              "{\"segment\":1}", body, sizeof(body)),
                     200);
    assert_string_equal(body, "metadata updated");
    assert_int_equal(http_raw(e->port, "GET", "/metadata?key=mooncake%2Fram%2Fn1", NULL, NULL, body,
                              sizeof(body)),
                     200);
    assert_string_equal(body, "{\"segment\":1}");
    /* rpc_meta: first come first served; the same value again is fine */
    assert_int_equal(http_raw(e->port, "PUT", "/metadata?key=mooncake/rpc_meta/n1", NULL,
                              "{\"p\":1}", body, sizeof(body)),
                     200);
    assert_int_equal(http_raw(e->port, "PUT", "/metadata?key=mooncake/rpc_meta/n1", NULL,
                              "{\"p\":1}", body, sizeof(body)),
                     200);
    assert_string_equal(body, "metadata unchanged");
    assert_int_equal(http_raw(e->port, "PUT", "/metadata?key=mooncake/rpc_meta/n1", NULL,
                              "{\"p\":2}", body, sizeof(body)),
                     400);
    assert_string_equal(body, "Duplicate rpc_meta key not allowed");
    assert_int_equal(http_raw(e->port, "DELETE", "/metadata?key=mooncake/ram/n1", NULL, NULL, body,
                              sizeof(body)),
                     200);
    assert_string_equal(body, "metadata deleted");
    assert_int_equal(http_raw(e->port, "DELETE", "/metadata?key=mooncake/ram/n1", NULL, NULL, body,
                              sizeof(body)),
                     404);
    assert_int_equal(http_raw(e->port, "GET", "/metadata", NULL, NULL, body, sizeof(body)), 400);
    assert_string_equal(body, "Missing key parameter");
    assert_int_equal(http_raw(e->port, "GET", "/metadata?key=", NULL, NULL, body, sizeof(body)),
                     400);
    assert_int_equal(http_raw(e->port, "POST", "/metadata?key=x", NULL, "v", body, sizeof(body)),
                     405);
    /* the other paths stay read-only */
    assert_int_equal(http_raw(e->port, "PUT", "/health", NULL, "x", body, sizeof(body)), 405);
    assert_int_equal(http_raw(e->port, "GET", "/health", NULL, NULL, body, sizeof(body)), 200);
    /* and the server keeps serving after all that */
    mc_meta_t *m = open_meta(e, 0, 0);
    meta_check_value(m, "mooncake/rpc_meta/n1", "{\"p\":1}", 7);
    mc_meta_close(m);
}

static void entries_are_republished_after_the_server_restarts(void **state)
{
    env_t *e = *state;
    mc_meta_t *a = open_meta(e, 1000000, 0);
    mc_meta_t *b = open_meta(e, 1000000, 0);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/seg/a", bin1, sizeof(bin1)), MC_OK);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/rpc/a", bin2, sizeof(bin2)), MC_OK);
    assert_int_equal(mc_meta_put_sync(a, "mc/c1/rpc/gone", bin2, sizeof(bin2)), MC_OK);
    assert_int_equal(mc_meta_del_sync(a, "mc/c1/rpc/gone"), MC_OK);
    meta_check_value(b, "mc/c1/seg/a", bin1, sizeof(bin1));

    stop_server(e, SIGKILL);
    start_server(e); /* empty */
    meta_check_value(b, "mc/c1/seg/a", NULL, 0);

    /* a's next call sees the new instance (or the failure and the recovery)
     * and re-publishes without waiting for the periodic round (ttl/3 = 10 s) */
    uint64_t t0 = mc_now_ms();
    meta_check_value(a, "nothing", NULL, 0);
    assert_true(meta_wait_get(b, "mc/c1/seg/a", MC_OK, bin1, sizeof(bin1), 3000));
    assert_true(meta_wait_get(b, "mc/c1/rpc/a", MC_OK, bin2, sizeof(bin2), 1000));
    meta_check_value(b, "mc/c1/rpc/gone", NULL, 0); /* deleted before: not re-published */
    print_message("entries back %llu ms after the server restarted\n",
                  (unsigned long long)(mc_now_ms() - t0));
    mc_meta_close(a);
    mc_meta_close(b);
}

static void a_server_that_stops_answering_times_calls_out_and_the_next_one_works(void **state)
{
    env_t *e = *state;
    mc_meta_t *a = open_meta(e, 400000, 0);
    assert_int_equal(mc_meta_put_sync(a, "warm", "up", 2), MC_OK);
    assert_int_equal(test_proc_freeze(e->srv.pid), 0);
    uint64_t t0 = mc_now_us();
    mc_buf_t v = MC_BUF_INIT;
    assert_int_equal(mc_meta_get_sync(a, "warm", &v), MC_ERR_RPC_TIMEOUT);
    uint64_t took = mc_now_us() - t0;
    assert_true(took >= 350000 && took < 2000000);
    kill(e->srv.pid, SIGCONT);
    meta_check_value(a, "warm", "up", 2);
    mc_buf_fini(&v);
    mc_meta_close(a);
}

static void a_token_is_required_when_the_server_has_one(void **state)
{
    env_t *e = *state;
    stop_server(e, SIGKILL);
    e->token = "s3cret";
    start_server(e);
    mc_meta_t *none = open_meta_tok(e, 0, 0, "");
    mc_meta_t *wrong = open_meta_tok(e, 0, 0, "s3cres");
    mc_meta_t *good = open_meta_tok(e, 0, 0, "s3cret");
    assert_int_equal(mc_meta_put_sync(none, "k", "v", 1), MC_ERR_METADATA);
    assert_int_equal(mc_meta_put_sync(wrong, "k", "v", 1), MC_ERR_METADATA);
    assert_int_equal(mc_meta_put_sync(good, "k", "v", 1), MC_OK);
    mc_buf_t v = MC_BUF_INIT;
    assert_int_equal(mc_meta_get_sync(none, "k", &v), MC_ERR_METADATA);
    mc_buf_fini(&v);
    meta_check_value(good, "k", "v", 1);
    char body[256];
    assert_int_equal(http_raw(e->port, "GET", "/metadata?key=k", NULL, NULL, body, sizeof(body)),
                     401);
    assert_string_equal(body, "unauthorized");
    assert_int_equal(http_raw(e->port, "GET", "/metadata?key=k", "Authorization: Bearer s3cret\r\n",
                              NULL, body, sizeof(body)),
                     200);
    mc_meta_close(none);
    mc_meta_close(wrong);
    mc_meta_close(good);
}

static void a_full_standalone_server_refuses_new_keys_and_keeps_serving(void **state)
{
    env_t *e = *state;
    if (e->kind != SRV_STANDALONE) {
        skip(); /* the master's KV has its own bounds */
        return;
    }
    stop_server(e, SIGKILL);
    e->extra = "metadata.max_keys=2";
    start_server(e);
    mc_meta_t *m = open_meta(e, 0, 0);
    assert_int_equal(mc_meta_put_sync(m, "a", "1", 1), MC_OK);
    assert_int_equal(mc_meta_put_sync(m, "b", "2", 1), MC_OK);
    assert_int_equal(mc_meta_put_sync(m, "c", "3", 1), MC_ERR_METADATA);
    assert_int_equal(mc_meta_put_sync(m, "a", "11", 2), MC_OK); /* replacing is fine */
    char body[256];
    assert_int_equal(http_raw(e->port, "PUT", "/metadata?key=d", NULL, "4", body, sizeof(body)),
                     507);
    assert_int_equal(mc_meta_del_sync(m, "b"), MC_OK);
    assert_int_equal(mc_meta_put_sync(m, "c", "3", 1), MC_OK);
    meta_check_value(m, "a", "11", 2);
    mc_meta_close(m);
}

/* The upstream-style configuration: node and client use
 * metadata = http://master/metadata and nothing else runs. */
static void a_store_works_with_http_metadata_on_the_master(void **state)
{
    env_t *e = *state;
    if (e->kind == SRV_STANDALONE) {
        skip(); /* covered with the master; the standalone server is the same protocol */
        return;
    }
    char bin[256], master[64], meta[96], line[256];
    snprintf(master, sizeof(master), "store.master=127.0.0.1:%u", e->rpc_port);
    snprintf(meta, sizeof(meta), "store.metadata=http://127.0.0.1:%u/metadata", e->port);
    char *argv[] = {(char *)test_prog("mooncake-store-server", bin, sizeof(bin)),
                    "--set",
                    master,
                    "--set",
                    meta,
                    "--set",
                    "store.global_segment_size=16MiB",
                    "--set",
                    "store.reactors=1",
                    "--set",
                    "log.level=warn",
                    NULL};
    test_proc_t node = {0, -1};
    assert_int_equal(test_proc_start(&node, argv), 0);
    assert_int_equal(test_proc_readline(&node, line, sizeof(line), 10000), 0);
    assert_true(strncmp(line, "ready ", 6) == 0);

    mc_store_config_t c;
    mc_store_config_init(&c);
    char maddr[32], murl[96];
    snprintf(maddr, sizeof(maddr), "127.0.0.1:%u", e->rpc_port);
    snprintf(murl, sizeof(murl), "http://127.0.0.1:%u/metadata", e->port);
    c.master = maddr;
    c.metadata = murl;
    c.local_buffer_size = 1 << 20;
    c.global_segment_size = 0;
    c.reactors = 1;
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_open(&c, &s), MC_OK);
    char val[4096], out[4096];
    for (size_t i = 0; i < sizeof(val); i++)
        val[i] = (char)(i * 7);
    assert_int_equal(mc_store_put(s, "k1", 2, val, sizeof(val), NULL), MC_OK);
    assert_int_equal(mc_store_get(s, "k1", 2, out, sizeof(out), NULL), (int64_t)sizeof(val));
    assert_memory_equal(out, val, sizeof(val));
    mc_store_close(s);
    test_proc_stop(&node, SIGTERM, 5000);
}

static void a_url_without_a_path_uses_upstreams_metadata_path(void **state)
{
    env_t *e = *state;
    char conn[64];
    snprintf(conn, sizeof(conn), "http://127.0.0.1:%u", e->port);
    mc_meta_opts_t o;
    mc_meta_opts_init(&o);
    o.owner_lo = 1;
    mc_meta_t *m = NULL;
    assert_int_equal(mc_meta_open(conn, e->r, &o, &m), MC_OK);
    assert_int_equal(mc_meta_put_sync(m, "k", "v", 1), MC_OK);
    char body[64];
    assert_int_equal(http_raw(e->port, "GET", "/metadata?key=k", NULL, NULL, body, sizeof(body)),
                     200);
    assert_string_equal(body, "v");
    mc_meta_close(m);
}

/* ------------------------------------- the conformance suite's backends */

static int http_master_start(meta_env_t *e, int fast_expiry)
{
    (void)fast_expiry; /* nothing expires over HTTP */
    const char *const sets[] = {"log.level=warn", NULL};
    return tc_master_start(&e->master, sets);
}

static void http_master_stop(meta_env_t *e, int sig)
{
    tc_master_stop(&e->master, sig);
}

static pid_t http_master_pid(meta_env_t *e)
{
    return e->master.proc.pid;
}

static unsigned http_master_port(meta_env_t *e)
{
    return e->master.http_port;
}

static void http_master_conn(meta_env_t *e, int space, char *buf, size_t len)
{
    (void)space;
    snprintf(buf, len, "http://127.0.0.1:%u/metadata", e->master.http_port);
}

static int standalone_start(meta_env_t *e, int fast_expiry)
{
    (void)fast_expiry;
    char bin[256];
    int fresh = e->own_port == 0;
    for (int attempt = 0; attempt < 5; attempt++) {
        if (fresh)
            e->own_port = test_free_port();
        tc_args_t a;
        tc_args_init(&a, test_prog("mooncake-http-metadata-server", bin, sizeof(bin)));
        tc_args_add(&a, "--set");
        tc_args_add(&a, "server.bind_address=127.0.0.1");
        tc_args_add(&a, "--set");
        tc_args_add(&a, "server.port=%u", e->own_port);
        tc_args_add(&a, "--set");
        tc_args_add(&a, "log.level=warn");
        if (tc_spawn(&e->own, a.argv) == 0 &&
            tc_wait_listening(&e->own, e->own_port, TC_START_TIMEOUT_MS) == 0)
            return 0;
        tc_stop(&e->own, SIGKILL);
        if (!fresh)
            usleep(100000); /* the same port: the old server may still hold it */
    }
    fprintf(stderr, "mooncake-http-metadata-server did not start on port %u\n", e->own_port);
    return -1;
}

static void standalone_stop(meta_env_t *e, int sig)
{
    tc_stop(&e->own, sig);
}

static pid_t standalone_pid(meta_env_t *e)
{
    return e->own.pid;
}

static unsigned standalone_port(meta_env_t *e)
{
    return e->own_port;
}

static void standalone_conn(meta_env_t *e, int space, char *buf, size_t len)
{
    (void)space;
    snprintf(buf, len, "http://127.0.0.1:%u/metadata", e->own_port);
}

/* a "fast" owner re-puts its entries every 100 ms */
static void http_fast_liveness(mc_meta_opts_t *o)
{
    o->ttl_us = 300000;
}

static const char *const http_bad[] = {
    "http://",
    "http:///metadata",
    "http://h:0/metadata",
    "http://h:99999/metadata",
    "http://h:x/metadata",
    "http://h/metadata?key=x",
    "http://h?key=x",
    "http://h:8080/meta data",
    "https://h:8080/metadata",
    "http:/h:8080/metadata",
    "",
    NULL,
};

static const char *const http_good[] = {
    "http://127.0.0.1:%u",
    "http://127.0.0.1:%u/",
    "http://127.0.0.1:%u/metadata",
    "http://localhost:%u/metadata",
    "http://[::1]:%u/metadata",
    "http://127.0.0.1/metadata",
    NULL,
};

static const meta_backend_t http_master_backend = {
    .name = "http (mooncake-master /metadata)",
    .start = http_master_start,
    .stop = http_master_stop,
    .pid = http_master_pid,
    .port = http_master_port,
    .conn = http_master_conn,
    .fast_liveness = http_fast_liveness,
    .owner_hi = 9,
    .keeps_entries = 1,
    .bad_conns = http_bad,
    .good_conns = http_good,
};

static const meta_backend_t http_standalone_backend = {
    .name = "http (mooncake-http-metadata-server)",
    .start = standalone_start,
    .stop = standalone_stop,
    .pid = standalone_pid,
    .port = standalone_port,
    .conn = standalone_conn,
    .fast_liveness = http_fast_liveness,
    .owner_hi = 9,
    .keeps_entries = 1,
    .bad_conns = http_bad,
    .good_conns = http_good,
};

/* ---------------------------------------------------------- HA masters */

/* Two masters with ha.sync = strict on a real redis-server: /metadata is
 * served by the leader only (a standby answers 503 naming it), a PUT is
 * answered once journaled, and the entry survives the leader's death. */
typedef struct ha_env {
    tc_redis_t redis;
    tc_master_t m[2];
} ha_env_t;

/* Master i through the harness, on h's Redis with ha.sync = strict. */
static void ha_start_master(ha_env_t *h, int i)
{
    char backend[96];
    snprintf(backend, sizeof(backend), "ha.backend=redis://127.0.0.1:%u/0", h->redis.port);
    const char *const sets[] = {backend,          "ha.cluster_id=httpmeta",     "ha.lease_ttl=1s",
                                "ha.sync=strict", "server.tick_interval=100ms", NULL};
    assert_int_equal(tc_master_start(&h->m[i], sets), 0);
}

/* The index of the master whose /role answers 200, waiting up to 10 s. */
static int ha_leader(ha_env_t *h, int not )
{
    char body[256];
    for (int waited = 0; waited < 10000; waited += 20) {
        for (int i = 0; i < 2; i++)
            if (i != not &&h->m[i].proc.pid > 0 &&
                http_raw(h->m[i].http_port, "GET", "/role", NULL, NULL, body, sizeof(body)) == 200)
                return i;
        usleep(20000);
    }
    fail_msg("no leader within 10 s");
    return -1;
}

static void http_metadata_on_ha_masters_is_the_leaders_and_survives_a_failover(void **state)
{
    (void)state;
    static ha_env_t h;
    memset(&h, 0, sizeof(h));
    assert_int_equal(tc_redis_start(&h.redis), 0);
    ha_start_master(&h, 0);
    int l = ha_leader(&h, -1); /* the first one leads before the second starts */
    ha_start_master(&h, 1);
    int sb = 1 - l;

    char body[512], target[64];
    assert_int_equal(http_raw(h.m[l].http_port, "PUT", "/metadata?key=mooncake/ram/n1", NULL,
                              "{\"v\":1}", body, sizeof(body)),
                     200);
    assert_string_equal(body, "metadata updated");
    assert_int_equal(http_raw(h.m[l].http_port, "GET", "/metadata?key=mooncake/ram/n1", NULL, NULL,
                              body, sizeof(body)),
                     200);
    assert_string_equal(body, "{\"v\":1}");
    /* the standby refuses, and names the leader once it has looked it up
     * in Redis (its first poll after it started) */
    snprintf(target, sizeof(target), "127.0.0.1:%u", h.m[l].rpc_port);
    int named = 0;
    for (int waited = 0; waited < 5000 && !named; waited += 50) {
        assert_int_equal(http_raw(h.m[sb].http_port, "GET", "/metadata?key=mooncake/ram/n1", NULL,
                                  NULL, body, sizeof(body)),
                         503);
        named = strstr(body, target) != NULL;
        if (!named)
            usleep(50000);
    }
    if (!named)
        fail_msg("the standby's 503 does not name the leader %s: '%s'", target, body);

    tc_master_stop(&h.m[l], SIGKILL);
    assert_int_equal(ha_leader(&h, l), sb);
    /* an acknowledged PUT was journaled: the new leader has it */
    assert_int_equal(http_raw(h.m[sb].http_port, "GET", "/metadata?key=mooncake/ram/n1", NULL, NULL,
                              body, sizeof(body)),
                     200);
    assert_string_equal(body, "{\"v\":1}");
    assert_int_equal(http_raw(h.m[sb].http_port, "DELETE", "/metadata?key=mooncake/ram/n1", NULL,
                              NULL, body, sizeof(body)),
                     200);

    tc_master_stop(&h.m[sb], SIGTERM);
    tc_redis_stop(&h.redis, SIGKILL); /* its directory goes at exit */
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    /* TEST_LOG=debug (or "warn,metadata=debug") to see more */
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        T(keys_that_need_escaping_travel_intact),
        T(the_server_answers_with_upstreams_codes_and_texts),
        T(entries_are_republished_after_the_server_restarts),
        T(a_server_that_stops_answering_times_calls_out_and_the_next_one_works),
        T(a_token_is_required_when_the_server_has_one),
        T(a_full_standalone_server_refuses_new_keys_and_keeps_serving),
        T(a_url_without_a_path_uses_upstreams_metadata_path),
        T(a_store_works_with_http_metadata_on_the_master),
    };
    const struct CMUnitTest extra[] = {
        T(the_server_answers_with_upstreams_codes_and_texts),
        T(a_url_without_a_path_uses_upstreams_metadata_path),
    };
    int rc = meta_run(&http_master_backend, NULL, 0);
    rc |= meta_run(&http_standalone_backend, NULL, 0);
    mc_log_set_spec(spec != NULL ? spec : "error", NULL, 0);
    rc |=
        cmocka_run_group_tests_name("master /metadata", tests, group_setup_master, group_teardown);
    rc |= cmocka_run_group_tests_name("master metadata.http_port", extra, group_setup_extra,
                                      group_teardown);
    rc |= cmocka_run_group_tests_name("mooncake-http-metadata-server", tests,
                                      group_setup_standalone, group_teardown);
    const struct CMUnitTest ha[] = {
        cmocka_unit_test(http_metadata_on_ha_masters_is_the_leaders_and_survives_a_failover),
    };
    rc |= cmocka_run_group_tests_name("HA masters", ha, NULL, NULL);
    return rc;
}
