/*
 * Authentication on every kind of port a cluster opens (issue 13, finding
 * 6: anyone who reached a port was trusted), against real processes: a
 * mooncake-master and a mooncake-store-server with the cluster's secret and
 * its store service (service.enabled). For each port - the master's RPC
 * port, the node's data port (the transfer engine's listener), the
 * service's control port - a client with the secret gets in, one with
 * another secret or none is refused with the reason, a recorded handshake
 * replayed on a new connection is refused, and a frame sent before the
 * handshake is answered REJECT_HANDSHAKE and the connection closed.
 *
 * The two attacks of the finding, repeated: a TE_WRITE into a stored
 * object's bytes through the node's data port without the handshake leaves
 * the bytes as they were (the same write after a handshake does change
 * them: the check can see a write), and a client without the secret cannot
 * mount a segment. Co-located clients of the service need the secret too.
 * rpc_auth_test.c covers the handshake itself (a handler that counts what
 * it processes); this test covers that every daemon port uses it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <sys/stat.h>

#include "cluster.h"
#include "mooncake/store.h"
#include "rpc_util.h"
#include "util/mem.h"

#define CALL_US (3000000ull * TC_SLOW)
#define IO_MS (3000 * TC_SLOW)
#define VLEN 65536u

typedef struct port {
    const char *name;
    unsigned port;
    uint16_t method; /* what an attacker would send first */
} port_t;

typedef struct env {
    tc_cluster_t c;
    char dir[64], secret[128], other[128], svc[64];
    unsigned svc_port;
    mc_auth_key_t k, wrong;
    mc_reactor_group_t *g;
    mc_store_t *s; /* a client with the secret */
    port_t ports[3];
} env_t;

static void write_secret(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static mc_status_t open_client(env_t *e, const char *secret, uint64_t segment, mc_store_t **out)
{
    char master[64];
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = tc_master_addr(&e->c.master, master, sizeof(master));
    c.local_buffer_size = 4 << 20;
    c.global_segment_size = segment;
    c.reactors = 1;
    c.rpc_timeout_us = CALL_US;
    c.secret_file = secret;
    return mc_store_open(&c, out);
}

static mc_status_t open_colocated(env_t *e, const char *secret, mc_store_t **out)
{
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.service = e->svc;
    c.local_buffer_size = 4 << 20;
    c.rpc_timeout_us = CALL_US;
    c.secret_file = secret;
    return mc_store_open(&c, out);
}

static int setup(void **state)
{
    static env_t e;
    signal(SIGPIPE, SIG_IGN);
    snprintf(e.dir, sizeof(e.dir), "/tmp/mc-authports.XXXXXX");
    assert_non_null(mkdtemp(e.dir));
    snprintf(e.secret, sizeof(e.secret), "%s/secret", e.dir);
    snprintf(e.other, sizeof(e.other), "%s/other", e.dir);
    write_secret(e.secret, "the cluster's secret, long enough\n");
    write_secret(e.other, "another secret, also long enough\n");
    char why[256];
    assert_int_equal(mc_auth_key_load(e.secret, &e.k, why, sizeof(why)), MC_OK);
    assert_int_equal(mc_auth_key_load(e.other, &e.wrong, why, sizeof(why)), MC_OK);

    char sec[200], port[64], master[64];
    snprintf(sec, sizeof(sec), "security.secret_file=%s", e.secret);
    const char *const ms[] = {sec, NULL};
    assert_int_equal(tc_master_start(&e.c.master, ms), 0);
    e.svc_port = test_free_port();
    snprintf(e.svc, sizeof(e.svc), "127.0.0.1:%u", e.svc_port);
    snprintf(port, sizeof(port), "service.port=%u", e.svc_port);
    const char *const ns[] = {sec, "service.enabled=true", port, NULL};
    assert_int_equal(
        tc_node_start(&e.c.node[0], tc_master_addr(&e.c.master, master, sizeof(master)), ns), 0);
    e.c.nnodes = 1;
    assert_int_equal(tc_wait_listening(&e.c.node[0].proc, e.svc_port, IO_MS), 0);

    e.ports[0] = (port_t){"master rpc", e.c.master.rpc_port, MC_RPC_MOUNT_SEGMENT};
    e.ports[1] = (port_t){"node data", e.c.node[0].port, MC_RPC_TE_WRITE};
    e.ports[2] = (port_t){"service control", e.svc_port, MC_RPC_SVC_PUT};

    e.g = rt_group_create(1, "authp");
    assert_int_equal(open_client(&e, e.secret, 0, &e.s), MC_OK);
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    mc_store_close(e->s);
    mc_reactor_group_destroy(e->g);
    tc_cluster_stop(&e->c, SIGTERM);
    unlink(e->secret);
    unlink(e->other);
    rmdir(e->dir);
    return 0;
}

/* A call of method with an empty body through a fresh client with key
 * (NULL = none); the server's reason (MC_F_ERROR) into why. */
static mc_status_t call(env_t *e, unsigned port, const mc_auth_key_t *key, uint16_t method,
                        char *why, size_t room)
{
    mc_rpc_client_t *c = rt_client_create(mc_reactor_group_get(e->g, 0), port, key, CALL_US);
    uint8_t empty = 0x80; /* {} */
    mc_buf_t resp = MC_BUF_INIT;
    mc_status_t st = mc_rpc_call_sync(c, method, &empty, 1, CALL_US, &resp);
    rt_reason(&resp, why, room);
    mc_buf_fini(&resp);
    mc_rpc_client_destroy(c);
    return st;
}

/* ------------------------------------------------------- raw frames */

/* A TE_WRITE of len bytes at addr. */
static void raw_write(int fd, uint64_t req_id, uint64_t addr, const uint8_t *p, uint32_t len)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_map(&w, 1);
    mc_mp_write_uint(&w, MC_F_ADDR);
    mc_mp_write_uint(&w, addr);
    rt_frame(fd, MC_RPC_TE_WRITE, MC_FRAME_REQUEST, req_id, &b, p, len);
    mc_buf_fini(&b);
}

/* ------------------------------------------------------------- tests */

static void the_right_secret_gets_in_on_every_port(void **state)
{
    env_t *e = *state;
    char why[256];
    for (size_t i = 0; i < MC_ARRAY_SIZE(e->ports); i++) {
        /* past the handshake, an unregistered method is answered as such */
        mc_status_t st = call(e, e->ports[i].port, &e->k, MC_RPC_ECHO_SLOW, why, sizeof(why));
        if (st != MC_ERR_NO_METHOD)
            fail_msg("%s port: %s (%s)", e->ports[i].name, mc_status_str(st), why);
    }
    /* and the store works with it */
    uint8_t v[VLEN], back[VLEN];
    tc_fill(v, sizeof(v), 1);
    assert_int_equal(mc_store_put(e->s, "ok", 2, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(mc_store_get(e->s, "ok", 2, back, sizeof(back), NULL), (int64_t)sizeof(v));
    assert_memory_equal(v, back, sizeof(v));
}

static void a_wrong_secret_is_refused_on_every_port(void **state)
{
    env_t *e = *state;
    char why[256];
    for (size_t i = 0; i < MC_ARRAY_SIZE(e->ports); i++) {
        mc_status_t st = call(e, e->ports[i].port, &e->wrong, MC_RPC_ECHO_SLOW, why, sizeof(why));
        if (st != MC_ERR_REJECT_HANDSHAKE)
            fail_msg("%s port with another secret: %s", e->ports[i].name, mc_status_str(st));
    }
}

static void no_secret_is_refused_with_the_reason_on_every_port(void **state)
{
    env_t *e = *state;
    char why[256];
    for (size_t i = 0; i < MC_ARRAY_SIZE(e->ports); i++) {
        mc_status_t st = call(e, e->ports[i].port, NULL, MC_RPC_ECHO_SLOW, why, sizeof(why));
        if (st != MC_ERR_REJECT_HANDSHAKE || strstr(why, "authentication required") == NULL)
            fail_msg("%s port without a secret: %s (%s)", e->ports[i].name, mc_status_str(st), why);
    }
}

static void a_replayed_handshake_is_refused_on_every_port(void **state)
{
    env_t *e = *state;
    uint8_t nc[MC_AUTH_NONCE_LEN], ns[MC_AUTH_NONCE_LEN], ns2[MC_AUTH_NONCE_LEN];
    uint8_t cproof[MC_AUTH_PROOF_LEN], body[512];
    mc_frame_hdr_t h;
    for (size_t i = 0; i < MC_ARRAY_SIZE(e->ports); i++) {
        mc_auth_nonce(nc);
        /* recorded: a handshake that worked (a call after it is answered) */
        int fd = rt_connect(e->ports[i].port);
        rt_handshake(fd, &e->k, nc, ns, cproof, IO_MS);
        rt_bin(fd, MC_RPC_ECHO_SLOW, MC_FRAME_REQUEST, 3, 0, NULL, 0);
        assert_int_equal(rt_recv(fd, &h, body, sizeof(body), IO_MS), 0);
        assert_int_equal(h.req_id, 3);
        assert_int_equal(h.status, MC_ERR_NO_METHOD);
        close(fd);
        /* replayed on a new connection: the server's nonce is new */
        fd = rt_connect(e->ports[i].port);
        rt_bin(fd, MC_RPC_AUTH_HELLO, MC_FRAME_REQUEST, 1, MC_F_NONCE, nc, sizeof(nc));
        assert_int_equal(rt_recv(fd, &h, body, sizeof(body), IO_MS), 0);
        assert_int_equal(rt_body_bin(body, h.body_len, MC_F_NONCE, ns2, sizeof(ns2)), 0);
        assert_memory_not_equal(ns, ns2, sizeof(ns));
        rt_bin(fd, MC_RPC_AUTH_PROOF, MC_FRAME_NOTIFY, 2, MC_F_PROOF, cproof, sizeof(cproof));
        rt_bin(fd, MC_RPC_ECHO_SLOW, MC_FRAME_REQUEST, 3, 0, NULL, 0);
        int r = rt_recv(fd, &h, body, sizeof(body), IO_MS);
        if (r == 0 && h.req_id == 3)
            fail_msg("%s port answered a call after a replayed handshake", e->ports[i].name);
        assert_true(rt_closed_within(fd, IO_MS));
        close(fd);
    }
}

static void frames_before_the_handshake_are_refused_on_every_port(void **state)
{
    env_t *e = *state;
    uint8_t body[512];
    mc_frame_hdr_t h;
    for (size_t i = 0; i < MC_ARRAY_SIZE(e->ports); i++) {
        int fd = rt_connect(e->ports[i].port);
        rt_bin(fd, e->ports[i].method, MC_FRAME_REQUEST, 9, 0, NULL, 0);
        if (rt_recv(fd, &h, body, sizeof(body), IO_MS) != 0 || h.req_id != 9 ||
            h.status != MC_ERR_REJECT_HANDSHAKE)
            fail_msg("%s port: a frame before the handshake was not refused", e->ports[i].name);
        assert_true(rt_closed_within(fd, IO_MS));
        close(fd);
    }
}

/* Finding 6: an in-range TE_WRITE through the node's data port overwrote
 * a stored object (its get returned the attacker's bytes). */
static void a_write_before_the_handshake_leaves_stored_bytes_alone(void **state)
{
    env_t *e = *state;
    static uint8_t v[VLEN], bad[VLEN], back[VLEN];
    tc_fill(v, sizeof(v), 2);
    memset(bad, 0x5a, sizeof(bad));
    const char *keys[2] = {"victim", "control"};
    uint64_t addr[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(mc_store_put(e->s, keys[k], strlen(keys[k]), v, sizeof(v), NULL), MC_OK);
        mc_store_replica_t rep;
        uint32_t n = 0;
        assert_int_equal(mc_store_query(e->s, keys[k], strlen(keys[k]), &rep, 1, &n), MC_OK);
        assert_int_equal(n, 1);
        assert_int_equal(rep.size, VLEN);
        addr[k] = rep.address;
    }
    /* the attack: the connection closed (a frame with a payload before the
     * handshake is not even read), the bytes unchanged */
    mc_frame_hdr_t h;
    uint8_t body[512];
    int fd = rt_connect(e->c.node[0].port);
    raw_write(fd, 4, addr[0], bad, sizeof(bad));
    if (rt_recv(fd, &h, body, sizeof(body), IO_MS) == 0)
        assert_int_equal(h.status, MC_ERR_REJECT_HANDSHAKE);
    assert_true(rt_closed_within(fd, IO_MS));
    close(fd);
    memset(back, 0, sizeof(back));
    assert_int_equal(mc_store_get(e->s, "victim", 6, back, sizeof(back), NULL), (int64_t)VLEN);
    assert_memory_equal(back, v, sizeof(v));

    /* the same write after a handshake does land: the check above can see it */
    uint8_t nc[MC_AUTH_NONCE_LEN], ns[MC_AUTH_NONCE_LEN], cproof[MC_AUTH_PROOF_LEN];
    mc_auth_nonce(nc);
    fd = rt_connect(e->c.node[0].port);
    rt_handshake(fd, &e->k, nc, ns, cproof, IO_MS);
    raw_write(fd, 5, addr[1], bad, sizeof(bad));
    assert_int_equal(rt_recv(fd, &h, body, sizeof(body), IO_MS), 0);
    assert_int_equal(h.req_id, 5);
    assert_int_equal(h.status, MC_OK);
    close(fd);
    assert_int_equal(mc_store_get(e->s, "control", 7, back, sizeof(back), NULL), (int64_t)VLEN);
    assert_memory_equal(back, bad, sizeof(bad));
}

static int segments_listed(env_t *e)
{
    char *b = NULL;
    assert_int_equal(tc_http_get(e->c.master.http_port, "/get_all_segments", &b, IO_MS), 200);
    int n = 0;
    for (char *p = b; p != NULL && *p != '\0'; p++)
        n += *p == '\n';
    free(b);
    return n;
}

/* Finding 6: any peer could mount segments (4,096 fake ones failed every
 * put until client_ttl passed). */
static void a_client_without_the_secret_cannot_mount(void **state)
{
    env_t *e = *state;
    int before = segments_listed(e);
    assert_int_equal(before, 1);
    mc_store_t *s = NULL;
    assert_int_equal(open_client(e, NULL, 16 << 20, &s), MC_ERR_REJECT_HANDSHAKE);
    assert_int_equal(open_client(e, e->other, 16 << 20, &s), MC_ERR_REJECT_HANDSHAKE);
    assert_int_equal(segments_listed(e), before);
    /* with it, the same client mounts */
    assert_int_equal(open_client(e, e->secret, 16 << 20, &s), MC_OK);
    assert_int_equal(segments_listed(e), before + 1);
    mc_store_close(s);
}

static void co_located_clients_need_the_secret(void **state)
{
    env_t *e = *state;
    mc_store_t *d = NULL;
    assert_int_not_equal(open_colocated(e, NULL, &d), MC_OK);
    assert_int_not_equal(open_colocated(e, e->other, &d), MC_OK);
    assert_int_equal(open_colocated(e, e->secret, &d), MC_OK);
    uint8_t v[4096], back[4096];
    tc_fill(v, sizeof(v), 3);
    assert_int_equal(mc_store_put(d, "colocated", 9, v, sizeof(v), NULL), MC_OK);
    assert_int_equal(mc_store_get(d, "colocated", 9, back, sizeof(back), NULL), (int64_t)sizeof(v));
    assert_memory_equal(v, back, sizeof(v));
    mc_store_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_right_secret_gets_in_on_every_port),
        cmocka_unit_test(a_wrong_secret_is_refused_on_every_port),
        cmocka_unit_test(no_secret_is_refused_with_the_reason_on_every_port),
        cmocka_unit_test(a_replayed_handshake_is_refused_on_every_port),
        cmocka_unit_test(frames_before_the_handshake_are_refused_on_every_port),
        cmocka_unit_test(a_write_before_the_handshake_leaves_stored_bytes_alone),
        cmocka_unit_test(a_client_without_the_secret_cannot_mount),
        cmocka_unit_test(co_located_clients_need_the_secret),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
