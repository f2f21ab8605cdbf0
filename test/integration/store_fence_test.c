/*
 * A storage node whose segment the master forgot (the master restarted, or
 * expired the node) must not let a write of a put from before that land in
 * the segment any more: the master hands the space out again, and the old
 * bytes would overwrite the new object there (a get then returns wrong bytes
 * without an error). Found by the chaos driver (test/fault/chaos.c): wrong
 * bytes in objects put on a node just after it came back from a 15 s
 * partition; the master had expired it meanwhile, dropped its objects and
 * the reservations of the puts whose writes had timed out, and TCP delivered
 * those writes (a closed socket's retransmissions) after the node mounted
 * again.
 *
 * Here: a connection to the node's port from before a master restart plays
 * the late writer. After the node mounted its segment at the new master and
 * a new object was put there, a TE_WRITE over that old connection at the new
 * object's address must not land: the node closed the connections of before
 * (te_fence_inbound) when it learned that the master had forgotten it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "cluster.h"
#include "mooncake/store.h"
#include "rpc/fields.h"
#include "rpc/frame.h"
#include "rpc/methods.h"
#include "rpc/msgpack.h"
#include "util/buf.h"
#include "util/mem.h"
#include "util/time.h"

#define VAL 4096

typedef struct env {
    tc_cluster_t c;
    mc_store_t *s;
} env_t;

static const char *const master_sets[] = {"master.client_ttl=60s", NULL};

static int setup(void **state)
{
    static env_t e;
    signal(SIGPIPE, SIG_IGN);
    const char *const ns[] = {"store.global_segment_size=16MiB", NULL};
    assert_int_equal(tc_cluster_start(&e.c, 1, master_sets, ns), 0);
    char master[64];
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = tc_master_addr(&e.c.master, master, sizeof(master));
    c.shm = "off"; /* the node's tcp port is the subject */
    c.global_segment_size = 0;
    c.local_buffer_size = 4u << 20;
    c.reactors = 1;
    c.rpc_timeout_us = 1000000;
    c.transfer_timeout_us = 1000000;
    assert_int_equal(mc_store_open(&c, &e.s), MC_OK);
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    mc_store_close(e->s);
    tc_cluster_stop(&e->c, SIGTERM);
    return 0;
}

/* A frame with body {ADDR: addr[, LENGTH: len]} and payload (may be NULL)
 * on fd; 0 when every byte was sent. */
static int raw_send(int fd, uint16_t method, uint64_t req_id, uint64_t addr, uint64_t len,
                    const uint8_t *payload, uint32_t plen)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_buf_reserve(&b, MC_FRAME_HDR_LEN);
    mc_buf_produce(&b, MC_FRAME_HDR_LEN);
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &b);
    mc_mp_write_map(&w, len ? 2 : 1);
    mc_mp_write_uint(&w, MC_F_ADDR);
    mc_mp_write_uint(&w, addr);
    if (len) {
        mc_mp_write_uint(&w, MC_F_LENGTH);
        mc_mp_write_uint(&w, len);
    }
    mc_frame_hdr_t h = {.version = MC_FRAME_VERSION,
                        .kind = MC_FRAME_REQUEST,
                        .method = method,
                        .req_id = req_id,
                        .body_len = (uint32_t)(mc_buf_used(&b) - MC_FRAME_HDR_LEN),
                        .payload_len = plen};
    mc_frame_encode_hdr(mc_buf_head(&b), &h);
    if (plen > 0)
        mc_buf_append(&b, payload, plen);
    ssize_t n = send(fd, mc_buf_head(&b), mc_buf_used(&b), MSG_NOSIGNAL);
    int rc = n == (ssize_t)mc_buf_used(&b) ? 0 : -1;
    mc_buf_fini(&b);
    return rc;
}

/* Read one response frame (within 3 s) and return its status; 1 when the
 * connection closed (or nothing came) first. Payload bytes are skipped. */
static int raw_status(int fd)
{
    uint8_t buf[MC_FRAME_HDR_LEN + 64 * 1024];
    size_t got = 0;
    uint64_t deadline = mc_now_ms() + 3000;
    while (got < MC_FRAME_HDR_LEN) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (mc_now_ms() >= deadline || poll(&p, 1, 100) < 0)
            return 1;
        if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t n = recv(fd, buf + got, sizeof(buf) - got, 0);
        if (n <= 0)
            return 1;
        got += (size_t)n;
    }
    mc_frame_limits_t lim;
    mc_frame_limits_init(&lim);
    mc_frame_hdr_t h;
    const char *why = NULL;
    assert_int_equal(mc_frame_decode_hdr(buf, got, &lim, &h, &why), MC_OK);
    return h.status;
}

static uint64_t address_of(env_t *e, const char *key)
{
    mc_store_replica_t r;
    uint32_t n = 0;
    assert_int_equal(mc_store_query(e->s, key, strlen(key), &r, 1, &n), MC_OK);
    assert_int_equal(n, 1);
    return r.address;
}

static void a_write_from_before_the_master_forgot_the_segment_does_not_land(void **state)
{
    env_t *e = *state;
    uint8_t *v = mc_malloc(VAL), *got = mc_malloc(VAL), *late = mc_malloc(VAL);
    memset(late, 0xee, VAL);

    /* the late writer's connection, in use before the master forgets */
    memset(v, 0x11, VAL);
    assert_int_equal(mc_store_put(e->s, "before", 6, v, VAL, NULL), MC_OK);
    uint64_t a0 = address_of(e, "before");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)e->c.node[0].port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(raw_send(fd, MC_RPC_TE_READ, 1, a0, 16, NULL, 0), 0);
    assert_int_equal(raw_status(fd), MC_OK);

    /* the master restarts (same address) and forgets every object and
     * reservation; the node mounts its segment there again */
    tc_master_stop(&e->c.master, SIGKILL);
    assert_int_equal(tc_master_start(&e->c.master, master_sets), 0);
    memset(v, 0x22, VAL);
    mc_status_t st = MC_ERR_INTERNAL_ERROR;
    for (int waited = 0; st != MC_OK && waited < 15000; waited += 100) {
        st = mc_store_put(e->s, "after", 5, v, VAL, NULL);
        if (st != MC_OK)
            usleep(100000);
    }
    assert_int_equal(st, MC_OK);
    uint64_t a1 = address_of(e, "after");
    print_message("object 'before' was at 0x%llx, 'after' is at 0x%llx\n", (unsigned long long)a0,
                  (unsigned long long)a1);

    /* the old write arrives now: it must not land */
    int sent = raw_send(fd, MC_RPC_TE_WRITE, 2, a1, 0, late, VAL);
    int wst = sent == 0 ? raw_status(fd) : 1;
    print_message("the late write: %s\n",
                  wst == 1 ? "connection closed" : mc_status_str((mc_status_t)wst));
    close(fd);
    assert_int_equal(wst, 1);
    int64_t n = mc_store_get(e->s, "after", 5, got, VAL, NULL);
    assert_int_equal(n, VAL);
    assert_memory_equal(got, v, VAL);

    /* new connections work as before */
    memset(v, 0x33, VAL);
    assert_int_equal(mc_store_put(e->s, "later", 5, v, VAL, NULL), MC_OK);
    assert_int_equal(mc_store_get(e->s, "later", 5, got, VAL, NULL), VAL);
    assert_memory_equal(got, v, VAL);
    mc_free(v);
    mc_free(got);
    mc_free(late);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_write_from_before_the_master_forgot_the_segment_does_not_land),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
