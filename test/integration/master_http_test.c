/*
 * The master's HTTP port as upstream's users poll it: /get_all_segments
 * (SGLang), /get_all_keys and /query_key?key= in upstream's formats, and
 * read-only paths that refuse PUT/DELETE. Against a real master and two
 * storage nodes (cluster.h), with objects put through the store client.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cluster.h"
#include "mooncake/store.h"

/* ------------------------------------------------------------ helpers */

typedef struct http_resp {
    int code;
    char ctype[128];
    char body[1 << 16];
} http_resp_t;

static http_resp_t resp;

/* One request over a raw socket (Connection: close). */
static int http_req(unsigned port, const char *method, const char *target, http_resp_t *r)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                     method, target);
    assert_int_equal(write(fd, req, (size_t)n), n);
    static char raw[sizeof(r->body) + 4096];
    size_t got = 0;
    ssize_t k;
    while (got + 1 < sizeof(raw) && (k = read(fd, raw + got, sizeof(raw) - 1 - got)) > 0)
        got += (size_t)k;
    close(fd);
    raw[got] = '\0';
    r->code = 0;
    assert_int_equal(sscanf(raw, "HTTP/1.1 %d", &r->code), 1);
    r->ctype[0] = '\0';
    const char *ct = strcasestr(raw, "\r\nContent-Type: ");
    if (ct != NULL)
        sscanf(ct + 16, "%127[^\r]", r->ctype);
    const char *b = strstr(raw, "\r\n\r\n");
    snprintf(r->body, sizeof(r->body), "%s", b != NULL ? b + 4 : "");
    return r->code;
}

static tc_cluster_t c;
static mc_store_t *st;

static int group_setup(void **state)
{
    (void)state;
    const char *ms[] = {"master.lease_ttl=1s", NULL};
    if (tc_cluster_start(&c, 2, ms, NULL) != 0)
        return -1;
    char maddr[64];
    mc_store_config_t cfg;
    mc_store_config_init(&cfg);
    cfg.master = tc_master_addr(&c.master, maddr, sizeof(maddr));
    cfg.local_buffer_size = 1 << 20;
    cfg.reactors = 1;
    return mc_store_open(&cfg, &st) == MC_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    mc_store_close(st);
    tc_cluster_stop(&c, SIGTERM);
    return 0;
}

/* ---------------------------------------------------------------- tests */

static void get_all_segments_lists_the_mounted_segments_one_per_line(void **state)
{
    (void)state;
    assert_int_equal(http_req(c.master.http_port, "GET", "/get_all_segments", &resp), 200);
    assert_string_equal(resp.ctype, "text/plain; version=0.0.4");
    char want1[600], want2[600];
    snprintf(want1, sizeof(want1), "%s\n%s\n", c.node[0].name, c.node[1].name);
    snprintf(want2, sizeof(want2), "%s\n%s\n", c.node[1].name, c.node[0].name);
    if (strcmp(resp.body, want1) != 0 && strcmp(resp.body, want2) != 0)
        fail_msg("/get_all_segments answered '%s'", resp.body);
}

static void get_all_keys_lists_every_key_one_per_line(void **state)
{
    (void)state;
    assert_int_equal(http_req(c.master.http_port, "GET", "/get_all_keys", &resp), 200);
    assert_string_equal(resp.body, "");
    char v[100] = "value";
    assert_int_equal(mc_store_put(st, "alpha", 5, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(mc_store_put(st, "beta", 4, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(http_req(c.master.http_port, "GET", "/get_all_keys", &resp), 200);
    assert_string_equal(resp.ctype, "text/plain; version=0.0.4");
    if (strcmp(resp.body, "alpha\nbeta\n") != 0 && strcmp(resp.body, "beta\nalpha\n") != 0)
        fail_msg("/get_all_keys answered '%s'", resp.body);
    assert_int_equal(mc_store_remove(st, "alpha", 5, 1), MC_OK);
    assert_int_equal(mc_store_remove(st, "beta", 4, 1), MC_OK);
}

static void query_key_describes_each_memory_replica_and_grants_no_lease(void **state)
{
    (void)state;
    char v[3000];
    memset(v, 'x', sizeof(v));
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    rc.replica_num = 2;
    assert_int_equal(mc_store_put(st, "qk/1", 4, v, sizeof(v), &rc), MC_OK);
    /* a key with characters that need escaping in a URL */
    assert_int_equal(http_req(c.master.http_port, "GET", "/query_key?key=qk%2F1", &resp), 200);
    assert_string_equal(resp.ctype, "text/plain; version=0.0.4");
    /* two lines, one per replica: {"size_":3000,"buffer_address_":N,"transport_endpoint_":"..."} */
    int lines = 0, seen[2] = {0, 0};
    for (char *line = strtok(resp.body, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        unsigned long long size, addr;
        char ep[256];
        if (sscanf(
                line,
                "{\"size_\":%llu,\"buffer_address_\":%llu,\"transport_endpoint_\":\"%255[^\"]\"}",
                &size, &addr, ep) != 3)
            fail_msg("/query_key line '%s' is not upstream's descriptor", line);
        assert_int_equal(size, sizeof(v));
        assert_true(addr != 0);
        for (int i = 0; i < 2; i++)
            if (strcmp(ep, c.node[i].name) == 0)
                seen[i] = 1;
        lines++;
    }
    assert_int_equal(lines, 2);
    assert_true(seen[0] && seen[1]);
    /* no lease: the object can be removed at once (a get's lease would refuse) */
    assert_int_equal(mc_store_remove(st, "qk/1", 4, 0), MC_OK);
    assert_int_equal(http_req(c.master.http_port, "GET", "/query_key?key=qk%2F1", &resp), 404);
    assert_string_equal(resp.body, "OBJECT_NOT_FOUND");
    assert_int_equal(http_req(c.master.http_port, "GET", "/query_key", &resp), 404);
    assert_string_equal(resp.body, "INVALID_KEY");
}

static void read_only_paths_refuse_changes(void **state)
{
    (void)state;
    static const char *const paths[] = {"/metrics",      "/health",          "/get_all_segments",
                                        "/get_all_keys", "/query_key?key=x", "/segments"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        assert_int_equal(http_req(c.master.http_port, "PUT", paths[i], &resp), 405);
        assert_int_equal(http_req(c.master.http_port, "DELETE", paths[i], &resp), 405);
    }
    assert_int_equal(http_req(c.master.http_port, "GET", "/health", &resp), 200);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(get_all_segments_lists_the_mounted_segments_one_per_line),
        cmocka_unit_test(get_all_keys_lists_every_key_one_per_line),
        cmocka_unit_test(query_key_describes_each_memory_replica_and_grants_no_lease),
        cmocka_unit_test(read_only_paths_refuse_changes),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
