/*
 * A put whose replica write failed after its bytes may have left this
 * process must not give its space back at once: the bytes can still land
 * (a stopped node reads them when it resumes, a partition delivers them when
 * it heals, and a connection closed with bytes in the kernel still sends
 * them) and would overwrite whatever the space was given to next. Found by
 * the chaos driver (test/fault/chaos.c): wrong bytes in objects put just
 * after a black hole healed. The lane of a timed-out write was dropped with
 * other writes' bytes in flight; those writes failed with CONN_CLOSED and
 * their puts were revoked, their space reused, and the held bytes landed on
 * the new objects.
 *
 * Here: one node, frozen (SIGSTOP); put A (64 KiB), then 300 ms later put B
 * (32 MiB: more than the sockets hold) over the same two lanes. A's write
 * times out first, B's bytes still queued make the client drop that lane, and
 * B's writes there fail with CONN_CLOSED while part of them sits in the
 * node's socket. Both puts fail, and neither space may be reused before the
 * master discards the puts: its used bytes still count B.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "cluster.h"
#include "mooncake/store.h"
#include "util/mem.h"
#include "util/time.h"

#define MIB (1u << 20)

typedef struct env {
    tc_cluster_t c;
    mc_store_t *s;
} env_t;

static int setup(void **state)
{
    static env_t e;
    signal(SIGPIPE, SIG_IGN);
    /* the frozen node must not expire, nor the failed puts be discarded,
     * while the test looks */
    const char *const ms[] = {"master.client_ttl=60s", "master.put_start_discard_timeout=60s",
                              "master.put_start_release_timeout=120s", NULL};
    const char *const ns[] = {"store.global_segment_size=64MiB", NULL};
    assert_int_equal(tc_cluster_start(&e.c, 1, ms, ns), 0);
    char master[64];
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = tc_master_addr(&e.c.master, master, sizeof(master));
    c.shm = "off"; /* the tcp transport's lanes are the subject */
    c.global_segment_size = 0;
    c.local_buffer_size = 64 * MIB;
    c.reactors = 1;
    c.rpc_timeout_us = 2000000;
    c.transfer_timeout_us = 1000000;
    assert_int_equal(mc_store_open(&c, &e.s), MC_OK);
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    kill(e->c.node[0].proc.pid, SIGCONT);
    mc_store_close(e->s);
    tc_cluster_stop(&e->c, SIGTERM);
    return 0;
}

/* The master's used storage bytes (/metrics/summary), or -1. */
static long long used_bytes(env_t *e)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)e->c.master.http_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    static const char req[] = "GET /metrics/summary HTTP/1.0\r\nHost: x\r\n\r\n";
    if (write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) {
        close(fd);
        return -1;
    }
    char resp[4096];
    size_t got = 0;
    ssize_t r;
    while (got + 1 < sizeof(resp) && (r = read(fd, resp + got, sizeof(resp) - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    resp[got] = '\0';
    const char *p = strstr(resp, "storage=");
    return p != NULL ? strtoll(p + 8, NULL, 10) : -1;
}

typedef struct done {
    _Atomic int fired;
    _Atomic int st;
} done_t;

static void on_put(void *arg, mc_status_t st)
{
    done_t *d = arg;
    atomic_store(&d->st, (int)st);
    atomic_store(&d->fired, 1);
}

static void a_put_whose_bytes_may_still_land_keeps_its_space(void **state)
{
    env_t *e = *state;
    uint8_t *a = mc_malloc(64 << 10), *b = mc_malloc(32 * MIB);
    memset(a, 0xaa, 64 << 10);
    memset(b, 0xbb, 32 * MIB);
    long long before = used_bytes(e);
    assert_true(before >= 0);
    assert_int_equal(test_proc_freeze(e->c.node[0].proc.pid), 0);
    static done_t da, db;
    assert_int_equal(mc_store_put_async(e->s, "late-a", 6, a, 64 << 10, NULL, on_put, &da),
                     MC_INPROGRESS);
    usleep(300000);
    assert_int_equal(mc_store_put_async(e->s, "late-b", 6, b, 32 * MIB, NULL, on_put, &db),
                     MC_INPROGRESS);
    for (int waited = 0; (!atomic_load(&da.fired) || !atomic_load(&db.fired)) && waited < 15000;
         waited += 10)
        usleep(10000);
    assert_true(atomic_load(&da.fired) && atomic_load(&db.fired));
    print_message("put A: %s; put B: %s\n", mc_status_str(atomic_load(&da.st)),
                  mc_status_str(atomic_load(&db.st)));
    assert_int_not_equal(atomic_load(&da.st), MC_OK);
    assert_int_not_equal(atomic_load(&db.st), MC_OK);
    /* a revoke would have freed the space at once: give it a moment */
    usleep(300000);
    long long after = used_bytes(e);
    print_message("used bytes: %lld before, %lld after the failed puts\n", before, after);
    assert_true(after - before >= (long long)(32 * MIB));
    kill(e->c.node[0].proc.pid, SIGCONT);
    mc_free(a);
    mc_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_put_whose_bytes_may_still_land_keeps_its_space),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
