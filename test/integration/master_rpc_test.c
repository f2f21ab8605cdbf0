/*
 * The master end to end: a real mooncake-master process driven over RPC (and
 * its HTTP port). A client mounts segments, which /segments lists; the put /
 * get / remove protocol hands out addresses inside the mounted ranges and
 * answers misuse with upstream's statuses; pipelined put cycles on four
 * connections all succeed; a client that falls silent loses its objects,
 * segments and metadata while a pinging one keeps everything, and is asked to
 * remount; garbage on the RPC port closes only that connection; SIGTERM ends
 * the master cleanly.
 *
 * One master serves every test, in order. Client M (the main client) mounts
 * two segments in the first test and a reactor timer pings for it every
 * 200 ms from then on, because master.client_ttl is 1 s here (to make the
 * expiry test quick). Every test removes the objects it made, so later ones
 * can assert master_key_count 0; the last test stops the master.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <assert.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "cluster.h"
#include "rpc_util.h"
#include "reactor/reactor.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/master_client.h"
#include "util/time.h"

#define NCLIENTS 4
#define CYCLES_PER_CLIENT 2000
#define DEPTH 32 /* cycles in flight per connection */
#define GIB (1ull << 30)
#define CALL_TIMEOUT_US 3000000 /* generous: the ASan build is slower */
#define PING_PERIOD_US 200000
#define EXPIRY_TIMEOUT_MS 5000 /* client_ttl (1 s) + ticks, with room */

static const mc_uuid_t CLIENT_M = {0x4d4d4d4d, 1}; /* pinged all along */
static const mc_uuid_t CLIENT_A = {0x41414141, 2}; /* falls silent in the liveness test */
static const mc_uuid_t CLIENT_X = {0x58585858, 3}; /* never mounts; a stranger to objects */

/* M's segments: fake address ranges (the master never touches the memory);
 * distinct names because replicas of one object go to distinct names. */
static const mc_master_segment_t SEG_M[2] = {
    {.id = {0x5e65e6, 1},
     .name = "node-m0:17001",
     .te_endpoint = "127.0.0.1:17001",
     .base = 0x100000000ull,
     .size = GIB},
    {.id = {0x5e65e6, 2},
     .name = "node-m1:17002",
     .te_endpoint = "127.0.0.1:17002",
     .base = 0x200000000ull,
     .size = GIB},
};
static const mc_master_segment_t SEG_A = {.id = {0x5e65e6, 0xa},
                                          .name = "node-a:17003",
                                          .te_endpoint = "127.0.0.1:17003",
                                          .base = 0x400000000ull,
                                          .size = GIB};

/* --------------------------------------------------------------- pinger */

/* Pings for one client id every PING_PERIOD_US from a timer on a client
 * reactor; one ping in flight at most. Counters are read by the test thread. */
typedef struct pinger {
    mc_timer_t timer;
    mc_rpc_client_t *c;
    mc_uuid_t client;
    int in_flight;     /* reactor thread only */
    int armed;         /* test thread only */
    atomic_int ok;     /* answers with client status OK */
    atomic_int not_ok; /* failed pings or any other client status */
} pinger_t;

typedef struct env {
    tc_master_t master;
    mc_reactor_group_t *g;
    mc_rpc_client_t *cli[NCLIENTS];
    pinger_t pinger;
} env_t;

static void pinger_cb(void *arg, const mc_rpc_resp_t *resp)
{
    pinger_t *p = arg;
    int64_t cs = 0;
    p->in_flight = 0;
    if (resp->status == MC_OK &&
        mc_mcli_dec_int(resp->body, resp->body_len, MC_F_CLIENT_STATUS, &cs) == MC_OK &&
        cs == MC_MASTER_CLIENT_OK)
        atomic_fetch_add(&p->ok, 1);
    else if (resp->status != MC_ERR_CANCELED)
        atomic_fetch_add(&p->not_ok, 1);
}

static void pinger_fire(mc_timer_t *t, void *arg)
{
    pinger_t *p = arg;
    (void)t;
    if (p->in_flight)
        return;
    mc_mcli_ping(mc_rpc_call_begin(p->c), p->client);
    if (mc_rpc_call_end(p->c, MC_RPC_PING, 1000000, pinger_cb, p) == MC_INPROGRESS)
        p->in_flight = 1;
    else
        atomic_fetch_add(&p->not_ok, 1);
}

static void pinger_arm(void *arg)
{
    pinger_t *p = arg;
    if (mc_timer_init(&p->timer, mc_reactor_current(), pinger_fire, p) == MC_OK)
        mc_timer_start(&p->timer, PING_PERIOD_US, 1);
}

static void pinger_disarm(void *arg)
{
    mc_timer_fini(&((pinger_t *)arg)->timer);
}

/* ---------------------------------------------------------- the master */

static const char *const master_sets[] = {"server.reactors=2", "master.client_ttl=1s",
                                          "log.level=warn", NULL};

static int setup(void **state)
{
    static env_t e;
    memset(&e, 0, sizeof(e));
    signal(SIGPIPE, SIG_IGN);
    assert_int_equal(tc_master_start(&e.master, master_sets), 0);

    rt_clients_create(&e.g, e.cli, NCLIENTS, e.master.rpc_port);
    e.pinger.c = e.cli[0]; /* cli[0] lives on reactor 0, where the timer runs */
    e.pinger.client = CLIENT_M;
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    if (e->pinger.armed)
        mc_rpc_run_on(mc_reactor_group_get(e->g, 0), pinger_disarm, &e->pinger);
    rt_clients_destroy(e->g, e->cli, NCLIENTS);
    tc_master_stop(&e->master, SIGTERM);
    return 0;
}

/* ----------------------------------------------------------------- HTTP */

/* GET path over a raw HTTP/1.0 socket (the server closes after the reply).
 * Returns the status code and the body (malloc'd, NUL-terminated; free it)
 * in *body, or -1. */
static int http_get(unsigned port, const char *path, char **body)
{
    return tc_http_get(port, path, body, 3000);
}

/* The value of an unlabelled Prometheus sample, or -1 when absent. */
static int64_t metric_value(const char *text, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : p) {
        if (strncmp(p, name, nl) == 0 && p[nl] == ' ')
            return strtoll(p + nl + 1, NULL, 10);
    }
    return -1;
}

static int64_t metric(env_t *e, const char *name)
{
    char *text = NULL;
    assert_int_equal(http_get(e->master.http_port, "/metrics", &text), 200);
    int64_t v = metric_value(text, name);
    free(text);
    return v;
}

/* The /segments entry {...} of the segment with this name, copied into out;
 * 0 if it is not listed. */
static int segment_entry(const char *json, const char *name, char *out, size_t room)
{
    char pat[320];
    snprintf(pat, sizeof(pat), "{\"name\": \"%s\"", name);
    const char *p = strstr(json, pat);
    if (p == NULL)
        return 0;
    const char *end = strchr(p, '}');
    assert_non_null(end);
    size_t n = (size_t)(end - p + 1);
    assert_true(n < room);
    memcpy(out, p, n);
    out[n] = '\0';
    return 1;
}

static char *get_segments(env_t *e)
{
    char *json = NULL;
    assert_int_equal(http_get(e->master.http_port, "/segments", &json), 200);
    return json;
}

/* Assert that /segments lists seg as mounted by owner, with its range. */
static void assert_segment_listed(const char *json, const mc_master_segment_t *seg, mc_uuid_t owner)
{
    char ent[1024], want[128];
    assert_true(segment_entry(json, seg->name, ent, sizeof(ent)));
    snprintf(want, sizeof(want), "\"base\": %" PRIu64 ",", seg->base);
    assert_non_null(strstr(ent, want));
    snprintf(want, sizeof(want), "\"capacity\": %" PRIu64 ",", seg->size);
    assert_non_null(strstr(ent, want));
    snprintf(want, sizeof(want), "\"client\": \"%016" PRIx64 "%016" PRIx64 "\"", owner.hi,
             owner.lo);
    assert_non_null(strstr(ent, want));
    assert_non_null(strstr(ent, "\"state\": \"MOUNTED\""));
}

/* ----------------------------------------------------- synchronous calls */

/* A blocking call: the body is encoded into req with w, the answer lands in
 * resp (also for failed calls, which may carry MC_F_ERROR). */
typedef struct sync_call {
    mc_buf_t req, resp;
    mc_mp_writer_t w;
} sync_call_t;

#define SYNC_CALL_INIT                                                                             \
    {                                                                                              \
        MC_BUF_INIT, MC_BUF_INIT,                                                                  \
        {                                                                                          \
            0                                                                                      \
        }                                                                                          \
    }

static mc_mp_writer_t *sc_begin(sync_call_t *s)
{
    mc_buf_reset(&s->req);
    mc_buf_reset(&s->resp);
    mc_mp_writer_init(&s->w, &s->req);
    return &s->w;
}

static mc_status_t sc_end(sync_call_t *s, mc_rpc_client_t *c, uint16_t method)
{
    assert_int_equal(s->w.err, MC_OK);
    return mc_rpc_call_sync(c, method, mc_buf_head(&s->req), mc_buf_used(&s->req), CALL_TIMEOUT_US,
                            &s->resp);
}

static void sc_fini(sync_call_t *s)
{
    mc_buf_fini(&s->req);
    mc_buf_fini(&s->resp);
}

/* End a call whose answer is only a status, and release its buffers. */
static mc_status_t sc_status(sync_call_t *s, mc_rpc_client_t *c, uint16_t method)
{
    mc_status_t st = sc_end(s, c, method);
    sc_fini(s);
    return st;
}

static mc_status_t ping(mc_rpc_client_t *c, mc_uuid_t client, int64_t *client_status)
{
    sync_call_t s = SYNC_CALL_INIT;
    mc_mcli_ping(sc_begin(&s), client);
    mc_status_t st = sc_end(&s, c, MC_RPC_PING);
    if (st == MC_OK)
        assert_int_equal(mc_mcli_dec_int(mc_buf_head(&s.resp), mc_buf_used(&s.resp),
                                         MC_F_CLIENT_STATUS, client_status),
                         MC_OK);
    sc_fini(&s);
    return st;
}

static mc_status_t put_start(mc_rpc_client_t *c, mc_uuid_t client, const char *key, uint64_t size,
                             const mc_master_put_cfg_t *cfg, mc_master_replica_desc_t *d,
                             uint32_t *n)
{
    sync_call_t s = SYNC_CALL_INIT;
    mc_mcli_put_start(sc_begin(&s), client, key, strlen(key), size, cfg);
    mc_status_t st = sc_end(&s, c, MC_RPC_PUT_START);
    *n = 0;
    if (st == MC_OK)
        assert_int_equal(mc_mcli_dec_replicas(mc_buf_head(&s.resp), mc_buf_used(&s.resp), d,
                                              MC_MASTER_MAX_REPLICAS, n, NULL),
                         MC_OK);
    sc_fini(&s);
    return st;
}

static mc_status_t put_end(mc_rpc_client_t *c, mc_uuid_t client, const char *key)
{
    sync_call_t s = SYNC_CALL_INIT;
    mc_mcli_client_key(sc_begin(&s), client, key, strlen(key));
    return sc_status(&s, c, MC_RPC_PUT_END);
}

static mc_status_t get_replicas(mc_rpc_client_t *c, const char *key, mc_master_replica_desc_t *d,
                                uint32_t *n, uint64_t *lease_us)
{
    sync_call_t s = SYNC_CALL_INIT;
    mc_mcli_key(sc_begin(&s), key, strlen(key));
    mc_status_t st = sc_end(&s, c, MC_RPC_GET_REPLICA_LIST);
    *n = 0;
    if (st == MC_OK)
        assert_int_equal(mc_mcli_dec_replicas(mc_buf_head(&s.resp), mc_buf_used(&s.resp), d,
                                              MC_MASTER_MAX_REPLICAS, n, lease_us),
                         MC_OK);
    sc_fini(&s);
    return st;
}

static mc_status_t exist_key(mc_rpc_client_t *c, const char *key, int *exists)
{
    sync_call_t s = SYNC_CALL_INIT;
    mc_mcli_key(sc_begin(&s), key, strlen(key));
    mc_status_t st = sc_end(&s, c, MC_RPC_EXIST_KEY);
    int64_t v = 0;
    if (st == MC_OK)
        assert_int_equal(
            mc_mcli_dec_int(mc_buf_head(&s.resp), mc_buf_used(&s.resp), MC_F_EXISTS, &v), MC_OK);
    *exists = (int)v;
    sc_fini(&s);
    return st;
}

static mc_status_t remove_key(mc_rpc_client_t *c, const char *key, int force)
{
    sync_call_t s = SYNC_CALL_INIT;
    mc_mcli_remove(sc_begin(&s), key, strlen(key), force);
    return sc_status(&s, c, MC_RPC_REMOVE);
}

static mc_status_t mount(mc_rpc_client_t *c, mc_uuid_t client, const mc_master_segment_t *seg)
{
    sync_call_t s = SYNC_CALL_INIT;
    mc_mcli_mount(sc_begin(&s), client, seg);
    return sc_status(&s, c, MC_RPC_MOUNT_SEGMENT);
}

static mc_status_t meta_put(mc_rpc_client_t *c, const char *key, const char *val, mc_uuid_t owner)
{
    sync_call_t s = SYNC_CALL_INIT;
    mc_mcli_meta_put(sc_begin(&s), key, strlen(key), val, strlen(val), owner);
    return sc_status(&s, c, MC_RPC_META_PUT);
}

/* MC_OK with the value NUL-terminated in val. */
static mc_status_t meta_get(mc_rpc_client_t *c, const char *key, char *val, size_t room)
{
    sync_call_t s = SYNC_CALL_INIT;
    mc_mcli_key(sc_begin(&s), key, strlen(key));
    mc_status_t st = sc_end(&s, c, MC_RPC_META_GET);
    val[0] = '\0';
    if (st == MC_OK) {
        const void *p = NULL;
        size_t len = 0;
        assert_int_equal(
            mc_mcli_dec_bytes(mc_buf_head(&s.resp), mc_buf_used(&s.resp), MC_F_VALUE, &p, &len),
            MC_OK);
        assert_true(len < room);
        memcpy(val, p, len);
        val[len] = '\0';
    }
    sc_fini(&s);
    return st;
}

/* The failed call's MC_F_ERROR text (NUL-terminated in why). */
static mc_status_t raw_call(mc_rpc_client_t *c, uint16_t method, sync_call_t *s, char *why,
                            size_t room)
{
    mc_status_t st = sc_end(s, c, method);
    const void *p = NULL;
    size_t len = 0;
    why[0] = '\0';
    if (mc_mcli_dec_bytes(mc_buf_head(&s->resp), mc_buf_used(&s->resp), MC_F_ERROR, &p, &len) ==
            MC_OK &&
        len < room) {
        memcpy(why, p, len);
        why[len] = '\0';
    }
    return st;
}

/* The segment (of M's and A's) a replica names, or NULL. */
static const mc_master_segment_t *segment_of(const mc_master_replica_desc_t *d)
{
    const mc_master_segment_t *all[] = {&SEG_M[0], &SEG_M[1], &SEG_A};
    for (size_t i = 0; i < 3; i++)
        if (mc_uuid_eq(all[i]->id, d->segment_id))
            return all[i];
    return NULL;
}

/* A replica lies wholly inside the segment it names, which is one we
 * mounted, and has the object's size. */
static void assert_replica_inside(const mc_master_replica_desc_t *d, uint64_t size)
{
    const mc_master_segment_t *seg = segment_of(d);
    assert_non_null(seg);
    assert_int_equal(d->size, size);
    assert_true(d->address >= seg->base);
    assert_true(d->address < seg->base + seg->size);
    assert_true(d->address + size <= seg->base + seg->size);
    assert_string_equal(d->segment_name, seg->name);
    assert_string_equal(d->te_endpoint, seg->te_endpoint);
}

/* --------------------------------------------------------------- tests */

/* LIST_SEGMENTS, of every client (owner NULL) or of one: how many entries. */
static uint32_t list_segments_count(mc_rpc_client_t *c, const mc_uuid_t *owner)
{
    sync_call_t s = SYNC_CALL_INIT;
    mc_mp_writer_t *w = sc_begin(&s);
    if (owner != NULL)
        mc_mcli_list_segments(w, *owner);
    else
        mc_mcli_empty(w);
    assert_int_equal(sc_end(&s, c, MC_RPC_LIST_SEGMENTS), MC_OK);
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, mc_buf_head(&s.resp), mc_buf_used(&s.resp));
    uint32_t n = UINT32_MAX, nf = mc_mp_read_map(&r);
    for (uint32_t f = 0; f < nf && r.err == MC_OK; f++) {
        if (mc_mp_read_uint(&r) != MC_F_SEGMENTS) {
            mc_mp_skip(&r);
            continue;
        }
        n = mc_mp_read_array(&r);
        for (uint32_t i = 0; i < n && r.err == MC_OK; i++)
            mc_mp_skip(&r);
    }
    assert_int_equal(r.err, MC_OK);
    sc_fini(&s);
    return n;
}

static void a_client_mounts_two_segments_and_segments_lists_them(void **state)
{
    env_t *e = *state;
    for (int i = 0; i < NCLIENTS; i++) {
        sync_call_t s = SYNC_CALL_INIT;
        mc_mcli_empty(sc_begin(&s));
        assert_int_equal(sc_end(&s, e->cli[i], MC_RPC_SERVICE_READY), MC_OK);
        const void *text = NULL;
        size_t tlen = 0;
        assert_int_equal(
            mc_mcli_dec_bytes(mc_buf_head(&s.resp), mc_buf_used(&s.resp), MC_F_TEXT, &text, &tlen),
            MC_OK);
        assert_true(tlen > 10 && memcmp(text, "mooncake-c", 10) == 0);
        sc_fini(&s);
    }

    assert_int_equal(mount(e->cli[0], CLIENT_M, &SEG_M[0]), MC_OK);
    assert_int_equal(mount(e->cli[1], CLIENT_M, &SEG_M[1]), MC_OK);
    /* an identical re-mount is OK; the same id with another range is not */
    assert_int_equal(mount(e->cli[2], CLIENT_M, &SEG_M[0]), MC_OK);
    mc_master_segment_t moved = SEG_M[0];
    moved.base += GIB * 16;
    assert_int_equal(mount(e->cli[2], CLIENT_M, &moved), MC_ERR_SEGMENT_ALREADY_EXISTS);

    int64_t cs = 0;
    assert_int_equal(ping(e->cli[0], CLIENT_M, &cs), MC_OK);
    assert_int_equal(cs, MC_MASTER_CLIENT_OK);
    /* from now on M stays alive (client_ttl is 1 s) */
    mc_rpc_run_on(mc_reactor_group_get(e->g, 0), pinger_arm, &e->pinger);
    e->pinger.armed = 1;

    char *json = get_segments(e);
    assert_segment_listed(json, &SEG_M[0], CLIENT_M);
    assert_segment_listed(json, &SEG_M[1], CLIENT_M);
    free(json);
    /* over RPC: every segment, or one client's (a node's /metrics asks so) */
    assert_int_equal(list_segments_count(e->cli[0], NULL), 2);
    assert_int_equal(list_segments_count(e->cli[0], &CLIENT_M), 2);
    assert_int_equal(list_segments_count(e->cli[0], &CLIENT_X), 0);
    assert_int_equal(metric(e, "master_segment_count"), 2);
    assert_int_equal(metric(e, "master_total_capacity_bytes"), (int64_t)(2 * GIB));
}

static void
a_two_replica_put_lands_in_distinct_mounted_segments_and_reads_back_complete(void **state)
{
    env_t *e = *state;
    mc_rpc_client_t *c = e->cli[1];
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS], g[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0, gn = 0;
    uint64_t lease = 0;
    const uint64_t size = 1 << 20;

    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.replica_num = 2;
    assert_int_equal(put_start(c, CLIENT_M, "obj-1", size, &cfg, d, &n), MC_OK);
    assert_int_equal(n, 2);
    for (uint32_t i = 0; i < n; i++) {
        assert_replica_inside(&d[i], size);
        assert_int_equal(d[i].status, MC_MASTER_REPLICA_PROCESSING);
    }
    assert_true(segment_of(&d[0]) != segment_of(&d[1]));

    /* not readable before PutEnd */
    assert_int_equal(get_replicas(c, "obj-1", g, &gn, &lease), MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(put_end(c, CLIENT_M, "obj-1"), MC_OK);
    assert_int_equal(put_end(c, CLIENT_M, "obj-1"), MC_OK); /* idempotent for its writer */

    assert_int_equal(get_replicas(c, "obj-1", g, &gn, &lease), MC_OK);
    assert_int_equal(gn, 2);
    assert_true(lease > 0);
    for (uint32_t i = 0; i < gn; i++) {
        assert_int_equal(g[i].status, MC_MASTER_REPLICA_COMPLETE);
        assert_replica_inside(&g[i], size);
        assert_true(g[i].address == d[0].address || g[i].address == d[1].address);
    }
    assert_true(segment_of(&g[0]) != segment_of(&g[1]));

    assert_int_equal(remove_key(c, "obj-1", 1), MC_OK);
    assert_int_equal(metric(e, "master_key_count"), 0);
}

static void misused_puts_gets_and_removes_get_upstream_statuses(void **state)
{
    env_t *e = *state;
    mc_rpc_client_t *c = e->cli[2];
    mc_master_replica_desc_t x[MC_MASTER_MAX_REPLICAS];
    uint32_t xn = 0;
    sync_call_t s = SYNC_CALL_INIT;
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);

    /* only the writer may finish a put, before and after it completed */
    assert_int_equal(put_start(c, CLIENT_M, "obj-2", 4096, &cfg, x, &xn), MC_OK);
    assert_int_equal(put_end(c, CLIENT_X, "obj-2"), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(MC_ERR_ILLEGAL_CLIENT, -601);
    assert_int_equal(put_end(c, CLIENT_M, "obj-2"), MC_OK);
    assert_int_equal(put_end(c, CLIENT_X, "obj-2"), MC_ERR_ILLEGAL_CLIENT);

    assert_int_equal(put_start(c, CLIENT_M, "obj-2", 4096, &cfg, x, &xn),
                     MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(MC_ERR_OBJECT_ALREADY_EXISTS, -705);
    assert_int_equal(get_replicas(c, "no-such-key", x, &xn, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(MC_ERR_OBJECT_NOT_FOUND, -704);

    /* a leased object is removed only by force */
    assert_int_equal(get_replicas(c, "obj-2", x, &xn, NULL), MC_OK);
    assert_int_equal(remove_key(c, "obj-2", 0), MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(MC_ERR_OBJECT_HAS_LEASE, -706);
    assert_int_equal(remove_key(c, "obj-2", 1), MC_OK);
    assert_int_equal(get_replicas(c, "obj-2", x, &xn, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(remove_key(c, "obj-2", 1), MC_ERR_OBJECT_NOT_FOUND);

    /* a revoked put is gone; only its writer may revoke, and only unfinished */
    assert_int_equal(put_start(c, CLIENT_M, "revoked", 4096, &cfg, x, &xn), MC_OK);
    mc_mcli_client_key(sc_begin(&s), CLIENT_X, "revoked", 7);
    assert_int_equal(sc_end(&s, c, MC_RPC_PUT_REVOKE), MC_ERR_ILLEGAL_CLIENT);
    mc_mcli_client_key(sc_begin(&s), CLIENT_M, "revoked", 7);
    assert_int_equal(sc_end(&s, c, MC_RPC_PUT_REVOKE), MC_OK);
    assert_int_equal(get_replicas(c, "revoked", x, &xn, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put_end(c, CLIENT_M, "revoked"), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put_start(c, CLIENT_M, "done", 4096, &cfg, x, &xn), MC_OK);
    assert_int_equal(put_end(c, CLIENT_M, "done"), MC_OK);
    mc_mcli_client_key(sc_begin(&s), CLIENT_M, "done", 4);
    assert_int_equal(sc_end(&s, c, MC_RPC_PUT_REVOKE), MC_ERR_INVALID_WRITE);
    assert_int_equal(remove_key(c, "done", 0), MC_OK);

    /* bad keys and parameters */
    assert_int_equal(put_start(c, CLIENT_M, "", 4096, &cfg, x, &xn), MC_ERR_INVALID_KEY);
    assert_int_equal(get_replicas(c, "", x, &xn, NULL), MC_ERR_INVALID_KEY);
    mc_mcli_key(sc_begin(&s), "a\0b", 3); /* a NUL inside */
    assert_int_equal(sc_end(&s, c, MC_RPC_GET_REPLICA_LIST), MC_ERR_INVALID_KEY);
    assert_int_equal(put_start(c, CLIENT_M, "zero-size", 0, &cfg, x, &xn), MC_ERR_INVALID_PARAMS);
    cfg.replica_num = 0;
    assert_int_equal(put_start(c, CLIENT_M, "zero-replicas", 8, &cfg, x, &xn),
                     MC_ERR_INVALID_PARAMS);
    sc_fini(&s);
    assert_int_equal(metric(e, "master_key_count"), 0);
}

static void a_body_missing_a_required_field_is_refused_with_a_reason_naming_it(void **state)
{
    env_t *e = *state;
    mc_rpc_client_t *c = e->cli[3];
    sync_call_t s = SYNC_CALL_INIT;
    char why[256];

    mc_mp_writer_t *w = sc_begin(&s);
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, MC_F_CLIENT_ID);
    mc_proto_write_uuid(w, CLIENT_M);
    mc_mp_write_uint(w, MC_F_SIZE);
    mc_mp_write_uint(w, 64);
    assert_int_equal(raw_call(c, MC_RPC_PUT_START, &s, why, sizeof(why)), MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "key"));

    w = sc_begin(&s);
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, MC_F_CLIENT_ID);
    mc_proto_write_uuid(w, CLIENT_M);
    mc_mp_write_uint(w, MC_F_KEY);
    mc_mp_write_bin(w, "k", 1);
    assert_int_equal(raw_call(c, MC_RPC_PUT_START, &s, why, sizeof(why)), MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "size"));

    mc_mcli_empty(sc_begin(&s));
    assert_int_equal(raw_call(c, MC_RPC_PING, &s, why, sizeof(why)), MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "client_id"));

    /* and a field of the wrong type gets a reason too */
    w = sc_begin(&s);
    mc_mp_write_map(w, 1);
    mc_mp_write_uint(w, MC_F_KEY);
    mc_mp_write_uint(w, 42); /* a key must be bin or str */
    assert_int_equal(raw_call(c, MC_RPC_GET_REPLICA_LIST, &s, why, sizeof(why)),
                     MC_ERR_INVALID_PARAMS);
    assert_true(why[0] != '\0');
    sc_fini(&s);
}

/* An OFFLOAD_DONE_BATCH body into s: CLIENT_M's files w-0 .. w-(nkeys-1)
 * on SEG_M[0], with nsizes sizes of 4096 (no sizes field when nsizes < 0). */
static void offload_batch_body(sync_call_t *s, uint32_t nkeys, int nsizes)
{
    mc_mp_writer_t *w = sc_begin(s);
    mc_mp_write_map(w, nsizes < 0 ? 3 : 4);
    mc_mp_write_uint(w, MC_F_CLIENT_ID);
    mc_proto_write_uuid(w, CLIENT_M);
    mc_mp_write_uint(w, MC_F_SEGMENT_ID);
    mc_proto_write_uuid(w, SEG_M[0].id);
    mc_mp_write_uint(w, MC_F_KEYS);
    mc_mp_write_array(w, nkeys);
    for (uint32_t i = 0; i < nkeys; i++) {
        char k[16];
        int n = snprintf(k, sizeof(k), "w-%u", i);
        mc_mp_write_bin(w, k, (size_t)n);
    }
    if (nsizes < 0)
        return;
    mc_mp_write_uint(w, MC_F_SIZES);
    mc_mp_write_array(w, (uint32_t)nsizes);
    for (int i = 0; i < nsizes; i++)
        mc_mp_write_uint(w, 4096);
}

/* OFFLOAD_DONE_BATCH (a node's write batch) and LDISK_REPORT_BATCH (its
 * start report): one status per file, and bad bodies get a reason. This
 * master has offload off: every file is refused on its own (no offload
 * asked of this node; offload off), the call itself answers. */
static void a_node_write_batch_gets_one_status_per_file(void **state)
{
    env_t *e = *state;
    mc_rpc_client_t *c = e->cli[1];
    sync_call_t s = SYNC_CALL_INIT;
    char why[256];
    static const uint16_t methods[] = {MC_RPC_OFFLOAD_DONE_BATCH, MC_RPC_LDISK_REPORT_BATCH};
    for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
        mc_status_t st[8];
        size_t cnt = 0;
        offload_batch_body(&s, 3, 3);
        assert_int_equal(raw_call(c, methods[m], &s, why, sizeof(why)), MC_OK);
        assert_int_equal(
            mc_mcli_dec_statuses(mc_buf_head(&s.resp), mc_buf_used(&s.resp), st, NULL, 8, &cnt),
            MC_OK);
        assert_int_equal(cnt, 3);
        for (int i = 0; i < 3; i++) {
            assert_true(st[i] < 0);
            if (methods[m] == MC_RPC_LDISK_REPORT_BATCH)
                assert_int_equal(st[i], MC_ERR_UNAVAILABLE_IN_CURRENT_MODE);
        }

        /* keys and sizes of different lengths */
        offload_batch_body(&s, 2, 1);
        assert_int_equal(raw_call(c, methods[m], &s, why, sizeof(why)), MC_ERR_INVALID_PARAMS);
        assert_non_null(strstr(why, "differ"));

        /* no sizes: named */
        offload_batch_body(&s, 1, -1);
        assert_int_equal(raw_call(c, methods[m], &s, why, sizeof(why)), MC_ERR_INVALID_PARAMS);
        assert_non_null(strstr(why, "sizes"));
    }
    sc_fini(&s);
}

/* OFFLOAD_POLL with DISK_ID (the node's offload directory's identity): an
 * empty one, one over 64 bytes, one not a byte string are refused with a
 * reason; a good one gets the poll's own answer (offload is off here). */
static void a_poll_with_a_bad_disk_id_is_refused_naming_it(void **state)
{
    env_t *e = *state;
    mc_rpc_client_t *c = e->cli[1];
    sync_call_t s = SYNC_CALL_INIT;
    char why[256];
    static const size_t lens[] = {0, 65, 1, 16, 64};
    uint8_t id[65];
    memset(id, 0xab, sizeof(id));
    for (size_t t = 0; t < sizeof(lens) / sizeof(lens[0]); t++) {
        mc_mp_writer_t *w = sc_begin(&s);
        mc_mp_write_map(w, 4);
        mc_mp_write_uint(w, MC_F_CLIENT_ID);
        mc_proto_write_uuid(w, CLIENT_M);
        mc_mp_write_uint(w, MC_F_SEGMENT_ID);
        mc_proto_write_uuid(w, SEG_M[0].id);
        mc_mp_write_uint(w, MC_F_COUNT);
        mc_mp_write_uint(w, 0);
        mc_mp_write_uint(w, MC_F_DISK_ID);
        if (t == 2)
            mc_mp_write_uint(w, 7); /* not bytes */
        else
            mc_mp_write_bin(w, id, lens[t]);
        mc_status_t st = raw_call(c, MC_RPC_OFFLOAD_POLL, &s, why, sizeof(why));
        if (t < 2) {
            assert_int_equal(st, MC_ERR_INVALID_PARAMS);
            assert_non_null(strstr(why, "disk_id"));
        } else if (t == 2) {
            assert_int_equal(st, MC_ERR_INVALID_PARAMS);
            assert_non_null(strstr(why, "wrong type"));
        } else {
            assert_int_equal(st, MC_ERR_UNAVAILABLE_IN_CURRENT_MODE);
            assert_non_null(strstr(why, "offload is off"));
        }
    }
    sc_fini(&s);
}

/* OFFLOAD_PROGRESS (a node's load in flight has bytes in): a body without
 * READY, or READY over SIZE, is refused with a reason; a progress of a load
 * this master never asked of the node is OBJECT_NOT_FOUND (nothing to do). */
static void a_load_progress_is_checked(void **state)
{
    env_t *e = *state;
    mc_rpc_client_t *c = e->cli[1];
    sync_call_t s = SYNC_CALL_INIT;
    char why[256];
    for (int t = 0; t < 3; t++) {
        mc_mp_writer_t *w = sc_begin(&s);
        mc_mp_write_map(w, t == 0 ? 4 : 5);
        mc_mp_write_uint(w, MC_F_CLIENT_ID);
        mc_proto_write_uuid(w, CLIENT_M);
        mc_mp_write_uint(w, MC_F_SEGMENT_ID);
        mc_proto_write_uuid(w, SEG_M[0].id);
        mc_mp_write_uint(w, MC_F_KEY);
        mc_mp_write_bin(w, "p-0", 3);
        mc_mp_write_uint(w, MC_F_SIZE);
        mc_mp_write_uint(w, 4096);
        if (t > 0) {
            mc_mp_write_uint(w, MC_F_LOADED);
            mc_mp_write_uint(w, t == 1 ? 4097 : 1024);
        }
        mc_status_t st = raw_call(c, MC_RPC_OFFLOAD_PROGRESS, &s, why, sizeof(why));
        if (t == 0) {
            assert_int_equal(st, MC_ERR_INVALID_PARAMS);
            assert_non_null(strstr(why, "loaded"));
        } else if (t == 1) {
            assert_int_equal(st, MC_ERR_INVALID_PARAMS);
            assert_non_null(strstr(why, "over the size"));
        } else {
            assert_int_equal(st, MC_ERR_OBJECT_NOT_FOUND);
        }
    }
    sc_fini(&s);
}

/* LEASE_RELEASE: a batch get that says RELEASE gets the grant's time and
 * view; sent back, they end the lease (a plain remove goes through); a
 * release of another view counts for nothing; bad bodies get reasons. */
static void leases_a_batch_get_releases_end_at_its_release(void **state)
{
    env_t *e = *state;
    mc_rpc_client_t *c = e->cli[3];
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    assert_int_equal(put_start(c, CLIENT_M, "lr", 64, &cfg, d, &n), MC_OK);
    assert_int_equal(put_end(c, CLIENT_M, "lr"), MC_OK);
    mc_master_key_t k = {"lr", 2};
    sync_call_t s = SYNC_CALL_INIT;
    char why[256];
    int64_t grant = 0, view = 0, count = -1;

    /* without RELEASE: no grant to send back (and the lease holds) */
    mc_mcli_keys(sc_begin(&s), &k, 1);
    assert_int_equal(sc_end(&s, c, MC_RPC_BATCH_GET_REPLICA_LIST), MC_OK);
    assert_int_equal(
        mc_mcli_dec_int(mc_buf_head(&s.resp), mc_buf_used(&s.resp), MC_F_GRANT_US, &grant),
        MC_ERR_NOT_FOUND);
    assert_int_equal(remove_key(c, "lr", 1), MC_OK);
    assert_int_equal(put_start(c, CLIENT_M, "lr", 64, &cfg, d, &n), MC_OK);
    assert_int_equal(put_end(c, CLIENT_M, "lr"), MC_OK);

    mc_mcli_keys_release(sc_begin(&s), &k, 1);
    assert_int_equal(sc_end(&s, c, MC_RPC_BATCH_GET_REPLICA_LIST), MC_OK);
    const uint8_t *b = mc_buf_head(&s.resp);
    size_t bl = mc_buf_used(&s.resp);
    assert_int_equal(mc_mcli_dec_int(b, bl, MC_F_GRANT_US, &grant), MC_OK);
    assert_int_equal(mc_mcli_dec_int(b, bl, MC_F_VIEW_VERSION, &view), MC_OK);
    mc_status_t st[1];
    size_t got = 0;
    assert_int_equal(mc_mcli_dec_items(b, bl, st, d, MC_MASTER_MAX_REPLICAS, &n, 1, &got, NULL),
                     MC_OK);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(remove_key(c, "lr", 0), MC_ERR_OBJECT_HAS_LEASE);

    /* bad bodies: a missing field named, a grant from the future */
    mc_mp_writer_t *w = sc_begin(&s);
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, MC_F_KEYS);
    mc_mp_write_array(w, 1);
    mc_mp_write_bin(w, "lr", 2);
    mc_mp_write_uint(w, MC_F_VIEW_VERSION);
    mc_mp_write_int(w, view);
    assert_int_equal(raw_call(c, MC_RPC_LEASE_RELEASE, &s, why, sizeof(why)),
                     MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "grant_us"));
    mc_mcli_lease_release(sc_begin(&s), &k, NULL, 1, (uint64_t)grant + 3600000000ull, view);
    assert_int_equal(raw_call(c, MC_RPC_LEASE_RELEASE, &s, why, sizeof(why)),
                     MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "grant_us"));

    /* another master's view: nothing released */
    mc_mcli_lease_release(sc_begin(&s), &k, NULL, 1, (uint64_t)grant, view + 1);
    assert_int_equal(sc_end(&s, c, MC_RPC_LEASE_RELEASE), MC_OK);
    assert_int_equal(
        mc_mcli_dec_int(mc_buf_head(&s.resp), mc_buf_used(&s.resp), MC_F_COUNT, &count), MC_OK);
    assert_int_equal(count, 0);
    assert_int_equal(remove_key(c, "lr", 0), MC_ERR_OBJECT_HAS_LEASE);

    /* ours: the lease ends, a plain remove goes through */
    mc_mcli_lease_release(sc_begin(&s), &k, NULL, 1, (uint64_t)grant, view);
    assert_int_equal(sc_end(&s, c, MC_RPC_LEASE_RELEASE), MC_OK);
    assert_int_equal(
        mc_mcli_dec_int(mc_buf_head(&s.resp), mc_buf_used(&s.resp), MC_F_COUNT, &count), MC_OK);
    assert_int_equal(count, 1);
    assert_int_equal(remove_key(c, "lr", 0), MC_OK);
    sc_fini(&s);
}

static void batch_calls_return_one_status_per_item(void **state)
{
    env_t *e = *state;
    mc_rpc_client_t *c = e->cli[1];
    sync_call_t s = SYNC_CALL_INIT;
    mc_status_t st[8];
    uint32_t nrep[8];
    size_t cnt = 0;
    mc_master_replica_desc_t bd[8 * MC_MASTER_MAX_REPLICAS]; /* room for 8 items */
    mc_master_replica_desc_t x[MC_MASTER_MAX_REPLICAS];
    uint32_t xn = 0;
    mc_master_put_cfg_t one;
    mc_master_put_cfg_init(&one);

    /* b-0 exists already: its item fails, the others go through */
    assert_int_equal(put_start(c, CLIENT_M, "b-0", 4096, &one, x, &xn), MC_OK);
    assert_int_equal(put_end(c, CLIENT_M, "b-0"), MC_OK);
    mc_master_key_t put3[] = {{"b-1", 3}, {"b-2", 3}, {"b-0", 3}};
    uint64_t sizes[] = {4096, 8192, 4096};
    mc_mcli_batch_put_start(sc_begin(&s), CLIENT_M, put3, sizes, 3, &one);
    assert_int_equal(sc_end(&s, c, MC_RPC_BATCH_PUT_START), MC_OK);
    assert_int_equal(mc_mcli_dec_items(mc_buf_head(&s.resp), mc_buf_used(&s.resp), st, bd,
                                       MC_MASTER_MAX_REPLICAS, nrep, 8, &cnt, NULL),
                     MC_OK);
    assert_int_equal(cnt, 3);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_OK);
    assert_int_equal(st[2], MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(nrep[0], 1);
    assert_int_equal(nrep[1], 1);
    assert_int_equal(nrep[2], 0);
    assert_replica_inside(&bd[0], 4096);
    assert_replica_inside(&bd[MC_MASTER_MAX_REPLICAS], 8192);

    mc_master_key_t end3[] = {{"b-1", 3}, {"b-2", 3}, {"never-started", 13}};
    mc_mcli_client_keys(sc_begin(&s), CLIENT_M, end3, 3);
    assert_int_equal(sc_end(&s, c, MC_RPC_BATCH_PUT_END), MC_OK);
    assert_int_equal(
        mc_mcli_dec_statuses(mc_buf_head(&s.resp), mc_buf_used(&s.resp), st, NULL, 8, &cnt), MC_OK);
    assert_int_equal(cnt, 3);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_OK);
    assert_int_equal(st[2], MC_ERR_OBJECT_NOT_FOUND);

    mc_master_key_t mixed[] = {{"b-1", 3}, {"missing", 7}, {"b-2", 3}, {"b-0", 3}};
    mc_mcli_keys(sc_begin(&s), mixed, 4);
    assert_int_equal(sc_end(&s, c, MC_RPC_BATCH_GET_REPLICA_LIST), MC_OK);
    uint64_t lease = 0;
    assert_int_equal(mc_mcli_dec_items(mc_buf_head(&s.resp), mc_buf_used(&s.resp), st, bd,
                                       MC_MASTER_MAX_REPLICAS, nrep, 8, &cnt, &lease),
                     MC_OK);
    assert_int_equal(cnt, 4);
    assert_true(lease > 0); /* the found keys carry their read lease */
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(st[2], MC_OK);
    assert_int_equal(st[3], MC_OK);
    assert_int_equal(nrep[0], 1);
    assert_int_equal(nrep[1], 0);
    assert_int_equal(nrep[2], 1);
    assert_int_equal(bd[0].status, MC_MASTER_REPLICA_COMPLETE);
    assert_replica_inside(&bd[2 * MC_MASTER_MAX_REPLICAS], 8192);

    int exists[8] = {0};
    mc_mcli_keys(sc_begin(&s), mixed, 4);
    assert_int_equal(sc_end(&s, c, MC_RPC_BATCH_EXIST_KEY), MC_OK);
    assert_int_equal(
        mc_mcli_dec_statuses(mc_buf_head(&s.resp), mc_buf_used(&s.resp), st, exists, 8, &cnt),
        MC_OK);
    assert_int_equal(cnt, 4);
    assert_int_equal(exists[0], 1);
    assert_int_equal(exists[1], 0);
    assert_int_equal(exists[2], 1);
    assert_int_equal(exists[3], 1);

    /* leased by the batch get: without force every existing item refuses */
    mc_mcli_batch_remove(sc_begin(&s), mixed, 4, 0);
    assert_int_equal(sc_end(&s, c, MC_RPC_BATCH_REMOVE), MC_OK);
    assert_int_equal(
        mc_mcli_dec_statuses(mc_buf_head(&s.resp), mc_buf_used(&s.resp), st, NULL, 8, &cnt), MC_OK);
    assert_int_equal(cnt, 4);
    assert_int_equal(st[0], MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(st[1], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(st[2], MC_ERR_OBJECT_HAS_LEASE);
    assert_int_equal(st[3], MC_ERR_OBJECT_HAS_LEASE);

    mc_mcli_batch_remove(sc_begin(&s), mixed, 4, 1);
    assert_int_equal(sc_end(&s, c, MC_RPC_BATCH_REMOVE), MC_OK);
    assert_int_equal(
        mc_mcli_dec_statuses(mc_buf_head(&s.resp), mc_buf_used(&s.resp), st, NULL, 8, &cnt), MC_OK);
    assert_int_equal(cnt, 4);
    assert_int_equal(st[0], MC_OK);
    assert_int_equal(st[1], MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(st[2], MC_OK);
    assert_int_equal(st[3], MC_OK);
    sc_fini(&s);
    assert_int_equal(metric(e, "master_key_count"), 0);
}

/* ------------------------------------------------- pipelined put cycles */

/* One key's life: each state has its request in flight and is left when the
 * response arrives (cycle_cb). */
typedef enum cycle_state {
    CY_PUT_START, /* waits for one PROCESSING replica inside M's segments */
    CY_PUT_END,   /* waits for OK */
    CY_GET,       /* waits for the same replica, COMPLETE, with a lease */
    CY_REMOVE,    /* waits for OK (forced: the get left a lease) */
    CY_DONE,
} cycle_state_t;

typedef struct driver driver_t;

typedef struct cycle {
    driver_t *d;
    int busy;
    cycle_state_t state;
    char key[32];
    size_t klen;
    uint64_t size;
    uint64_t address; /* from PutStart */
} cycle_t;

struct driver {
    mc_reactor_msg_t msg;
    mc_rpc_client_t *c;
    unsigned id;
    int issued, completed, bad;
    mc_status_t first_bad_status;
    int first_bad_state;
    cycle_t cycles[DEPTH];
    atomic_int *done;
};

static int replica_in_m(const mc_master_replica_desc_t *d, uint64_t size)
{
    for (int i = 0; i < 2; i++)
        if (mc_uuid_eq(d->segment_id, SEG_M[i].id))
            return d->size == size && d->address >= SEG_M[i].base &&
                   d->address + size <= SEG_M[i].base + SEG_M[i].size;
    return 0;
}

/* Whether the response is what state expects. */
static int cycle_check(cycle_t *cy, const mc_rpc_resp_t *resp)
{
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    uint64_t lease = 0;
    if (resp->status != MC_OK)
        return 0;
    switch (cy->state) {
    case CY_PUT_START:
        if (mc_mcli_dec_replicas(resp->body, resp->body_len, d, MC_MASTER_MAX_REPLICAS, &n, NULL) !=
                MC_OK ||
            n != 1 || d[0].status != MC_MASTER_REPLICA_PROCESSING || !replica_in_m(&d[0], cy->size))
            return 0;
        cy->address = d[0].address;
        return 1;
    case CY_GET:
        return mc_mcli_dec_replicas(resp->body, resp->body_len, d, MC_MASTER_MAX_REPLICAS, &n,
                                    &lease) == MC_OK &&
               n == 1 && d[0].status == MC_MASTER_REPLICA_COMPLETE && d[0].address == cy->address &&
               lease > 0;
    case CY_PUT_END:
    case CY_REMOVE:
        return 1;
    default:
        assert(0);
        return 0;
    }
}

static void cycle_cb(void *arg, const mc_rpc_resp_t *resp);

/* Send the request of cy's state. 0 if the client refused it. */
static int cycle_send(cycle_t *cy)
{
    driver_t *d = cy->d;
    mc_mp_writer_t *w = mc_rpc_call_begin(d->c);
    uint16_t method = 0;
    switch (cy->state) {
    case CY_PUT_START:
        mc_mcli_put_start(w, CLIENT_M, cy->key, cy->klen, cy->size, NULL);
        method = MC_RPC_PUT_START;
        break;
    case CY_PUT_END:
        mc_mcli_client_key(w, CLIENT_M, cy->key, cy->klen);
        method = MC_RPC_PUT_END;
        break;
    case CY_GET:
        mc_mcli_key(w, cy->key, cy->klen);
        method = MC_RPC_GET_REPLICA_LIST;
        break;
    case CY_REMOVE:
        mc_mcli_remove(w, cy->key, cy->klen, 1);
        method = MC_RPC_REMOVE;
        break;
    default:
        assert(0);
    }
    return mc_rpc_call_end(d->c, method, 10000000, cycle_cb, cy) == MC_INPROGRESS;
}

static void cycle_fail(cycle_t *cy, mc_status_t st)
{
    driver_t *d = cy->d;
    if (d->bad++ == 0) {
        d->first_bad_status = st;
        d->first_bad_state = cy->state;
    }
    cy->state = CY_DONE;
}

static void driver_fill(driver_t *d);

static void cycle_finish(cycle_t *cy)
{
    driver_t *d = cy->d;
    cy->busy = 0;
    if (++d->completed == CYCLES_PER_CLIENT)
        atomic_fetch_add(d->done, 1);
    else
        driver_fill(d);
}

static void cycle_cb(void *arg, const mc_rpc_resp_t *resp)
{
    cycle_t *cy = arg;
    if (cycle_check(cy, resp))
        cy->state++;
    else
        cycle_fail(cy, resp->status);
    if (cy->state != CY_DONE && !cycle_send(cy))
        cycle_fail(cy, MC_ERR_INTERNAL_ERROR);
    if (cy->state == CY_DONE)
        cycle_finish(cy);
}

/* Keep DEPTH cycles in flight until CYCLES_PER_CLIENT were started. */
static void driver_fill(driver_t *d)
{
    while (d->issued < CYCLES_PER_CLIENT && d->issued - d->completed < DEPTH) {
        cycle_t *cy = d->cycles;
        while (cy->busy)
            cy++;
        cy->busy = 1;
        cy->state = CY_PUT_START;
        cy->klen = (size_t)snprintf(cy->key, sizeof(cy->key), "pipe-%u-%d", d->id, d->issued);
        cy->size = 1024u * (1u + (unsigned)d->issued % 8u);
        d->issued++;
        if (!cycle_send(cy)) {
            cycle_fail(cy, MC_ERR_INTERNAL_ERROR);
            cycle_finish(cy);
        }
    }
}

static void driver_start(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    (void)r;
    (void)st;
    driver_fill(MC_CONTAINER_OF(msg, driver_t, msg));
}

static void pipelined_put_cycles_on_four_connections_all_succeed(void **state)
{
    env_t *e = *state;
    static driver_t d[NCLIENTS];
    atomic_int done = 0;
    int64_t puts_before = metric(e, "master_put_start_requests_total");
    assert_true(puts_before >= 0);
    uint64_t t0 = mc_now_us();
    for (int i = 0; i < NCLIENTS; i++) {
        memset(&d[i], 0, sizeof(d[i]));
        d[i].c = e->cli[i];
        d[i].id = (unsigned)i;
        d[i].done = &done;
        d[i].msg.fn = driver_start;
        for (int k = 0; k < DEPTH; k++)
            d[i].cycles[k].d = &d[i];
    }
    for (int i = 0; i < NCLIENTS; i++)
        assert_int_equal(mc_reactor_post(mc_reactor_group_get(e->g, (unsigned)i % 2), &d[i].msg),
                         MC_OK);
    assert_true(rt_wait_count(&done, NCLIENTS, 120000));
    print_message("%d put cycles (4 calls each) in %llu ms\n", NCLIENTS * CYCLES_PER_CLIENT,
                  (unsigned long long)((mc_now_us() - t0) / 1000));
    for (int i = 0; i < NCLIENTS; i++) {
        if (d[i].bad)
            print_message("client %d: %d bad cycles; first in state %d with %s\n", i, d[i].bad,
                          d[i].first_bad_state, mc_status_str(d[i].first_bad_status));
        assert_int_equal(d[i].completed, CYCLES_PER_CLIENT);
        assert_int_equal(d[i].bad, 0);
    }
    assert_int_equal(metric(e, "master_key_count"), 0);
    assert_int_equal(metric(e, "master_processing_key_count"), 0);
    int64_t puts_after = metric(e, "master_put_start_requests_total");
    print_message("master counted %lld put_start requests (%lld before this test)\n",
                  (long long)puts_after, (long long)puts_before);
    assert_true(puts_after >= puts_before + NCLIENTS * CYCLES_PER_CLIENT);
}

/* ------------------------------------------------------------ liveness */

static void a_silent_client_loses_objects_segments_and_metadata_then_remounts(void **state)
{
    env_t *e = *state;
    mc_rpc_client_t *c = e->cli[1];
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    char key[32], val[64];
    assert_true(e->pinger.armed);

    assert_int_equal(mount(c, CLIENT_A, &SEG_A), MC_OK);
    const char *pref[] = {SEG_A.name};
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.preferred_segments = pref;
    cfg.n_preferred = 1;
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "a-obj-%d", i);
        assert_int_equal(put_start(c, CLIENT_A, key, 4096, &cfg, d, &n), MC_OK);
        assert_int_equal(n, 1);
        assert_true(segment_of(&d[0]) == &SEG_A);
        assert_replica_inside(&d[0], 4096);
        assert_int_equal(put_end(c, CLIENT_A, key), MC_OK);
    }
    /* and one put it never finishes */
    assert_int_equal(put_start(c, CLIENT_A, "a-pending", 4096, &cfg, d, &n), MC_OK);
    assert_true(n == 1 && segment_of(&d[0]) == &SEG_A);
    assert_int_equal(meta_put(c, "te/node-a", "descriptor of a", CLIENT_A), MC_OK);
    assert_int_equal(meta_put(c, "te/node-m", "descriptor of m", CLIENT_M), MC_OK);
    assert_int_equal(meta_get(c, "te/node-a", val, sizeof(val)), MC_OK);
    assert_string_equal(val, "descriptor of a");
    char *json = get_segments(e);
    assert_segment_listed(json, &SEG_A, CLIENT_A);
    free(json);
    assert_int_equal(metric(e, "master_active_clients"), 2);
    assert_int_equal(metric(e, "master_key_count"), 4);

    /* A falls silent; M's pinger goes on. Poll with ExistKey, which grants
     * no lease (a lease would keep A's segment draining after the expiry). */
    int ok_before = atomic_load(&e->pinger.ok);
    int bad_before = atomic_load(&e->pinger.not_ok);
    uint64_t t0 = mc_now_ms();
    int exists = 1;
    while (exists && mc_now_ms() < t0 + EXPIRY_TIMEOUT_MS) {
        assert_int_equal(exist_key(c, "a-obj-0", &exists), MC_OK);
        if (exists)
            usleep(20000);
    }
    assert_int_equal(exists, 0);
    print_message("client A expired %llu ms after its last call (client_ttl 1000 ms)\n",
                  (unsigned long long)(mc_now_ms() - t0));

    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "a-obj-%d", i);
        assert_int_equal(get_replicas(c, key, d, &n, NULL), MC_ERR_OBJECT_NOT_FOUND);
    }
    assert_int_equal(metric(e, "master_key_count"), 0);
    assert_int_equal(metric(e, "master_active_clients"), 1);
    assert_int_equal(metric(e, "master_segment_count"), 2);
    json = get_segments(e);
    char ent[1024];
    assert_false(segment_entry(json, SEG_A.name, ent, sizeof(ent)));
    assert_segment_listed(json, &SEG_M[0], CLIENT_M);
    assert_segment_listed(json, &SEG_M[1], CLIENT_M);
    free(json);
    assert_int_equal(meta_get(c, "te/node-a", val, sizeof(val)), MC_ERR_NOT_FOUND);
    assert_int_equal(meta_get(c, "te/node-m", val, sizeof(val)), MC_OK);
    assert_string_equal(val, "descriptor of m");
    assert_true(atomic_load(&e->pinger.ok) > ok_before);
    assert_int_equal(atomic_load(&e->pinger.not_ok), bad_before);

    /* A comes back: told to remount, and after that it is whole again */
    int64_t cs = 0;
    assert_int_equal(ping(c, CLIENT_A, &cs), MC_OK);
    assert_int_equal(cs, MC_MASTER_CLIENT_NEED_REMOUNT);
    /* its unfinished put went with its segment */
    assert_int_equal(put_end(c, CLIENT_A, "a-pending"), MC_ERR_OBJECT_NOT_FOUND);
    sync_call_t s = SYNC_CALL_INIT;
    mc_mcli_remount(sc_begin(&s), CLIENT_A, &SEG_A, 1);
    assert_int_equal(sc_end(&s, c, MC_RPC_REMOUNT_SEGMENT), MC_OK);
    assert_int_equal(ping(c, CLIENT_A, &cs), MC_OK);
    assert_int_equal(cs, MC_MASTER_CLIENT_OK);
    json = get_segments(e);
    assert_segment_listed(json, &SEG_A, CLIENT_A);
    free(json);
    assert_int_equal(put_start(c, CLIENT_A, "a-obj-again", 4096, &cfg, d, &n), MC_OK);
    assert_true(n == 1 && segment_of(&d[0]) == &SEG_A);
    assert_int_equal(put_end(c, CLIENT_A, "a-obj-again"), MC_OK);

    /* leave the master as we found it */
    assert_int_equal(remove_key(c, "a-obj-again", 1), MC_OK);
    mc_mcli_unmount(sc_begin(&s), CLIENT_A, SEG_A.id);
    assert_int_equal(sc_end(&s, c, MC_RPC_UNMOUNT_SEGMENT), MC_OK);
    mc_mcli_client_key(sc_begin(&s), CLIENT_M, "te/node-m", 9); /* only its owner deletes it */
    assert_int_equal(sc_end(&s, c, MC_RPC_META_DEL), MC_OK);
    sc_fini(&s);
}

/* --------------------------------------------------------------- garbage */

static void garbage_on_the_rpc_port_is_disconnected_while_a_client_keeps_working(void **state)
{
    env_t *e = *state;
    mc_rpc_client_t *c = e->cli[2];
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    int64_t errs_before = metric(e, "master_rpc_protocol_errors_total");
    assert_true(errs_before >= 0);
    assert_int_equal(put_start(c, CLIENT_M, "garbage-before", 64, NULL, d, &n), MC_OK);
    int sent = 0;

    /* random bytes (more than a header, so the master can judge them) */
    uint8_t junk[512];
    unsigned seed = 7;
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)rand_r(&seed);
    junk[0] = 'x'; /* not the magic, whatever the seed gives */
    assert_true(rt_sent_is_disconnected(e->master.rpc_port, junk, sizeof(junk)));
    sent++;

    /* a valid header announcing a body far over the limit */
    uint8_t hdr[MC_FRAME_HDR_LEN];
    mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                        .kind = MC_FRAME_REQUEST,
                        .method = MC_RPC_PUT_START,
                        .req_id = 1,
                        .body_len = 0xFFFFFFF0u};
    mc_frame_encode_hdr(hdr, &h);
    assert_true(rt_sent_is_disconnected(e->master.rpc_port, hdr, sizeof(hdr)));
    sent++;

    /* someone pointing a browser at the RPC port */
    const char http[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n";
    assert_true(rt_sent_is_disconnected(e->master.rpc_port, http, sizeof(http) - 1));
    sent++;

    /* a complete frame whose body is not a msgpack map */
    uint8_t frame[MC_FRAME_HDR_LEN + 2];
    h.body_len = 2;
    mc_frame_encode_hdr(frame, &h);
    frame[MC_FRAME_HDR_LEN] = 0x92;     /* fixarray of two... */
    frame[MC_FRAME_HDR_LEN + 1] = 0x01; /* ...with one element */
    assert_true(rt_sent_is_disconnected(e->master.rpc_port, frame, sizeof(frame)));
    sent++;

    assert_int_equal(put_end(c, CLIENT_M, "garbage-before"), MC_OK);
    for (int i = 0; i < NCLIENTS; i++) {
        sync_call_t s = SYNC_CALL_INIT;
        mc_mcli_empty(sc_begin(&s));
        assert_int_equal(sc_end(&s, e->cli[i], MC_RPC_SERVICE_READY), MC_OK);
        sc_fini(&s);
    }
    assert_int_equal(remove_key(c, "garbage-before", 0), MC_OK);
    assert_true(metric(e, "master_rpc_protocol_errors_total") >= errs_before + sent);
}

/* The smallest HTTP request is shorter than a frame header; its first byte
 * already rules out a frame, so waiting for 32 bytes (forever: connections
 * have no idle timeout) only holds a socket for nothing. */
static void
a_request_shorter_than_a_frame_header_is_disconnected_when_its_magic_is_wrong(void **state)
{
    env_t *e = *state;
    const char req[] = "GET / HTTP/1.0\r\n\r\n"; /* 18 bytes */
    assert_true(rt_sent_is_disconnected(e->master.rpc_port, req, sizeof(req) - 1));
}

/* -------------------------------------------------------------- shutdown */

static void the_master_exits_zero_on_sigterm_within_five_seconds(void **state)
{
    env_t *e = *state;
    uint64_t t0 = mc_now_ms();
    /* with clients connected and the pinger still calling */
    int status = tc_stop_ms(&e->master.proc, SIGTERM, 5000);
    print_message("master stopped in %llu ms\n", (unsigned long long)(mc_now_ms() - t0));
    assert_int_not_equal(status, -1);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_client_mounts_two_segments_and_segments_lists_them),
        cmocka_unit_test(
            a_two_replica_put_lands_in_distinct_mounted_segments_and_reads_back_complete),
        cmocka_unit_test(misused_puts_gets_and_removes_get_upstream_statuses),
        cmocka_unit_test(a_body_missing_a_required_field_is_refused_with_a_reason_naming_it),
        cmocka_unit_test(leases_a_batch_get_releases_end_at_its_release),
        cmocka_unit_test(batch_calls_return_one_status_per_item),
        cmocka_unit_test(a_node_write_batch_gets_one_status_per_file),
        cmocka_unit_test(a_load_progress_is_checked),
        cmocka_unit_test(a_poll_with_a_bad_disk_id_is_refused_naming_it),
        cmocka_unit_test(pipelined_put_cycles_on_four_connections_all_succeed),
        cmocka_unit_test(a_silent_client_loses_objects_segments_and_metadata_then_remounts),
        cmocka_unit_test(garbage_on_the_rpc_port_is_disconnected_while_a_client_keeps_working),
        cmocka_unit_test(
            a_request_shorter_than_a_frame_header_is_disconnected_when_its_magic_is_wrong),
        cmocka_unit_test(the_master_exits_zero_on_sigterm_within_five_seconds),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
