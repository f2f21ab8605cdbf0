/*
 * The store client without a cluster: its argument checks, its behaviour when
 * the master is missing or mute, and the async contract (callbacks once,
 * never inside the call, MC_ERR_CANCELED at close, sync calls refused on the
 * client's threads). The "master" is a closed port, or a socket that accepts
 * connections and never answers. Metadata is p2p, so nothing else is needed.
 * The full protocol runs in test/integration/store_client_test.c.
 *
 * Independent of the rdma transport's environment (MC_RDMA_EMULATED and
 * the other variables of transport/README.md are cleared at start: protocol
 * "rdma" must fail here for want of a NIC).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test/rdma_env.h"
#include "mooncake/store.h"
#include "util/log.h"
#include "util/time.h"

#define RPC_TIMEOUT_US 1000000

/* A listening socket on 127.0.0.1; *port gets its port. With listen()
 * connections complete (the kernel accepts) but nobody reads: a mute master. */
static int tcp_socket(unsigned *port, int do_listen)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t alen = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    *port = ntohs(a.sin_port);
    if (do_listen)
        assert_int_equal(listen(fd, 16), 0);
    return fd;
}

static mc_status_t open_with(const char *master, uint64_t segment, uint64_t staging,
                             const char *protocol, mc_store_t **out)
{
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = master;
    c.metadata = "p2p";
    c.protocol = protocol;
    c.global_segment_size = segment;
    c.local_buffer_size = staging;
    c.reactors = 1;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    return mc_store_open(&c, out);
}

static void config_defaults_are_the_documented_ones(void **state)
{
    (void)state;
    mc_store_config_t c;
    mc_store_config_init(&c);
    assert_string_equal(c.metadata, "master");
    assert_string_equal(c.protocol, "tcp");
    assert_string_equal(c.master, "127.0.0.1:50051");
    assert_int_equal(c.global_segment_size, 0);
    assert_int_equal(c.local_buffer_size, 64u << 20);
    assert_int_equal(c.rpc_timeout_us, 5000000);
    assert_int_equal(c.transfer_timeout_us, 10000000);
    assert_null(c.persist); /* the master's */
    assert_int_equal(c.tier_queue_bytes, 256u << 20);
    mc_replicate_config_t r;
    mc_replicate_config_init(&r);
    assert_int_equal(r.replica_num, 1);
    assert_int_equal(r.n_preferred, 0);
}

static void open_rejects_bad_settings(void **state)
{
    (void)state;
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_open(NULL, &s), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(open_with("127.0.0.1:0", 0, 1 << 20, "tcp", &s), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(open_with(":50051", 0, 1 << 20, "tcp", &s), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(open_with("127.0.0.1:x", 0, 1 << 20, "tcp", &s), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(open_with("127.0.0.1:1", 0, 1 << 20, "udp", &s), MC_ERR_INVALID_ARGUMENT);
    /* no NIC here (and MC_RDMA_EMULATED unset): rdma cannot install */
    assert_int_equal(open_with("127.0.0.1:1", 0, 1 << 20, "rdma", &s), MC_ERR_DEVICE_NOT_FOUND);
    assert_null(s);
    mc_store_close(NULL);
}

static void open_rejects_a_bad_persist_mode(void **state)
{
    (void)state;
    mc_store_t *s = NULL;
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.persist = "sometimes"; /* persistent tier mode: off, async, eager or empty */
    assert_int_equal(mc_store_open(&c, &s), MC_ERR_INVALID_ARGUMENT);
    assert_null(s);
}

static void without_a_master_open_works_and_calls_fail_in_time(void **state)
{
    (void)state;
    unsigned port;
    int fd = tcp_socket(&port, 0); /* bound, not listening: connections are refused */
    char master[64];
    snprintf(master, sizeof(master), "127.0.0.1:%u", port);
    mc_store_t *s = NULL;
    uint64_t t0 = mc_now_ms();
    assert_int_equal(open_with(master, 8u << 20, 1u << 20, "tcp", &s), MC_OK);
    assert_non_null(mc_store_name(s));
    assert_true(strncmp(mc_store_name(s), "127.0.0.1:", 10) == 0);
    uint8_t v[100] = {0}, out[100];
    mc_status_t st = mc_store_put(s, "k", 1, v, sizeof(v), NULL);
    assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
    int64_t g = mc_store_get(s, "k", 1, out, sizeof(out), NULL);
    assert_true(g == MC_ERR_CONN_CLOSED || g == MC_ERR_RPC_TIMEOUT);
    int e = mc_store_exist(s, "k", 1);
    assert_true(e == MC_ERR_CONN_CLOSED || e == MC_ERR_RPC_TIMEOUT);
    assert_true(mc_now_ms() - t0 < 3 * RPC_TIMEOUT_US / 1000 + 2000);
    mc_store_close(s);
    close(fd);
}

static void a_client_without_staging_needs_registered_memory(void **state)
{
    (void)state;
    mc_store_t *s = NULL;
    assert_int_equal(open_with("127.0.0.1:1", 0, 0, "tcp", &s), MC_OK);
    uint8_t v[64] = {0};
    assert_int_equal(mc_store_put(s, "k", 1, v, sizeof(v), NULL), MC_ERR_STATE);
    assert_int_equal(mc_store_get(s, "k", 1, v, sizeof(v), NULL), MC_ERR_STATE);
    assert_int_equal(mc_store_put_from(s, "k", 1, v, sizeof(v), NULL), MC_ERR_INVALID_PARAMS);
    /* registered: the call goes out (and meets no master) */
    assert_int_equal(mc_store_register_buffer(s, v, sizeof(v)), MC_OK);
    mc_status_t st = mc_store_put_from(s, "k", 1, v, sizeof(v), NULL);
    assert_true(st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT);
    assert_int_equal(mc_store_register_buffer(s, v, sizeof(v)), MC_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(mc_store_unregister_buffer(s, v), MC_OK);
    mc_store_close(s);
}

/* ------------------------------------------------- callbacks and close */

typedef struct cb_ctx {
    mc_store_t *s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int calls;
    atomic_int canceled;
    atomic_int in_submit;
    atomic_int inside;
    atomic_int sync_in_cb; /* status a sync call got from inside the callback */
} cb_ctx_t;

static void note(cb_ctx_t *c, int64_t st)
{
    if (atomic_load(&c->in_submit))
        atomic_fetch_add(&c->inside, 1);
    if (st == MC_ERR_CANCELED)
        atomic_fetch_add(&c->canceled, 1);
    pthread_mutex_lock(&c->mu);
    atomic_fetch_add(&c->calls, 1);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void st_cb(void *arg, mc_status_t st)
{
    note(arg, st);
}

static void get_cb(void *arg, int64_t r)
{
    note(arg, r);
}

/* From the client's thread: sync calls and close are refused, not deadlocked. */
static void reentrant_cb(void *arg, mc_status_t st)
{
    cb_ctx_t *c = arg;
    uint8_t v[8] = {0};
    atomic_store(&c->sync_in_cb, mc_store_put(c->s, "k", 1, v, sizeof(v), NULL));
    mc_store_close(c->s); /* refused: logged, nothing happens */
    note(c, st);
}

static void wait_calls(cb_ctx_t *c, int n)
{
    pthread_mutex_lock(&c->mu);
    while (atomic_load(&c->calls) < n)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static void sync_calls_and_close_from_a_callback_are_refused(void **state)
{
    (void)state;
    static cb_ctx_t c = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    assert_int_equal(open_with("127.0.0.1:1", 0, 1 << 20, "tcp", &c.s), MC_OK);
    assert_int_equal(mc_store_exist_async(c.s, "k", 1, reentrant_cb, &c), MC_INPROGRESS);
    wait_calls(&c, 1);
    assert_int_equal(atomic_load(&c.sync_in_cb), MC_ERR_STATE);
    mc_store_close(c.s);
}

static void close_completes_every_pending_call_with_canceled(void **state)
{
    (void)state;
    unsigned port;
    int fd = tcp_socket(&port, 1); /* accepts, never answers */
    char master[64];
    snprintf(master, sizeof(master), "127.0.0.1:%u", port);
    static cb_ctx_t c = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    mc_store_config_t cfg;
    mc_store_config_init(&cfg);
    cfg.master = master;
    cfg.metadata = "p2p";
    cfg.local_buffer_size = 1 << 20;
    cfg.reactors = 2;
    cfg.rpc_timeout_us = 30000000; /* nothing times out during the test */
    assert_int_equal(mc_store_open(&cfg, &c.s), MC_OK);
    static uint8_t big[3 << 20], small[100], out[100];
    int n = 0;
    /* bad calls: an error now, no callback */
    assert_int_equal(mc_store_put_async(c.s, "", 0, small, 1, NULL, st_cb, &c), MC_ERR_INVALID_KEY);
    assert_int_equal(mc_store_get_async(c.s, "k", 1, out, sizeof(out), NULL, &c),
                     MC_ERR_INVALID_PARAMS);
    atomic_store(&c.in_submit, 1);
    /* waiting for the master, for staging (3 MiB through 1 MiB pieces: the
     * first put holds the window), and plain RPCs */
    for (int i = 0; i < 4; i++) {
        char key[16];
        snprintf(key, sizeof(key), "p%d", i);
        assert_int_equal(mc_store_put_async(c.s, key, strlen(key), i % 2 ? big : small,
                                            i % 2 ? sizeof(big) : sizeof(small), NULL, st_cb, &c),
                         MC_INPROGRESS);
        n++;
    }
    assert_int_equal(mc_store_get_async(c.s, "g", 1, out, sizeof(out), get_cb, &c), MC_INPROGRESS);
    assert_int_equal(mc_store_exist_async(c.s, "g", 1, st_cb, &c), MC_INPROGRESS);
    assert_int_equal(mc_store_remove_async(c.s, "g", 1, 0, st_cb, &c), MC_INPROGRESS);
    n += 3;
    atomic_store(&c.in_submit, 0);
    usleep(100000);
    assert_int_equal(atomic_load(&c.calls), 0); /* the master never answers */
    uint64_t t0 = mc_now_ms();
    mc_store_close(c.s);
    assert_true(mc_now_ms() - t0 < 5000);
    assert_int_equal(atomic_load(&c.calls), n);
    assert_int_equal(atomic_load(&c.canceled), n);
    assert_int_equal(atomic_load(&c.inside), 0);
    close(fd);
}

int main(void)
{
    test_rdma_env_clear();
    const char *spec = getenv("TEST_LOG");
    mc_log_set_spec(spec != NULL ? spec : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_defaults_are_the_documented_ones),
        cmocka_unit_test(open_rejects_bad_settings),
        cmocka_unit_test(open_rejects_a_bad_persist_mode),
        cmocka_unit_test(without_a_master_open_works_and_calls_fail_in_time),
        cmocka_unit_test(a_client_without_staging_needs_registered_memory),
        cmocka_unit_test(sync_calls_and_close_from_a_callback_are_refused),
        cmocka_unit_test(close_completes_every_pending_call_with_canceled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
