/*
 * The fault proxy (test/fault/fault_proxy.c) in each of its modes, between
 * this process as a client and a TCP echo server on a thread of this
 * process: bytes pass unchanged; delay, rate, hold (each direction), black
 * hole, drop and reset do what the control commands say, and heal undoes
 * them with nothing lost or reordered; bad commands are refused naming the
 * problem while the proxy keeps serving.
 *
 * Timing assertions have wide margins (a lower bound the fault guarantees,
 * an upper bound many times the expected value): the machine is shared.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "test/integration/cluster.h"
#include "util/mem.h"
#include "util/time.h"

typedef struct env {
    int echo_lfd;
    unsigned echo_port;
    pthread_t echo_thread;
    _Atomic uint64_t echo_bytes; /* bytes the echo server received */
    test_proc_t proxy;
    unsigned ctl_port, port;
    int ctl; /* control connection */
} env_t;

static env_t E;

/* ------------------------------------------------------------ echo server */

static void *echo_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        atomic_fetch_add(&E.echo_bytes, (uint64_t)n);
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(fd, buf + off, (size_t)(n - off));
            if (w <= 0)
                goto out;
            off += w;
        }
    }
out:
    close(fd);
    return NULL;
}

static void *echo_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(E.echo_lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        pthread_t t;
        if (pthread_create(&t, NULL, echo_conn, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
}

/* ------------------------------------------------------------ helpers */

static int dial(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* One control command; the reply line into out. */
static void ctl(const char *cmd, char *out, size_t n)
{
    char line[256];
    int len = snprintf(line, sizeof(line), "%s\n", cmd);
    assert_int_equal(write(E.ctl, line, (size_t)len), len);
    size_t got = 0;
    while (got + 1 < n) {
        struct pollfd p = {.fd = E.ctl, .events = POLLIN};
        assert_int_equal(poll(&p, 1, 5000), 1);
        char ch;
        assert_int_equal(read(E.ctl, &ch, 1), 1);
        if (ch == '\n')
            break;
        out[got++] = ch;
    }
    out[got] = '\0';
}

static void ctl_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void ctl_ok(const char *fmt, ...)
{
    char cmd[256], out[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    ctl(cmd, out, sizeof(out));
    if (strncmp(out, "ok", 2) != 0)
        fail_msg("'%s' answered '%s'", cmd, out);
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

/* Read exactly n bytes within ms: 0, or -1 (timeout: *got says how many),
 * -2 (EOF), -3 (an error: errno). */
static int read_all(int fd, uint8_t *p, size_t n, int ms, size_t *got)
{
    uint64_t end = mc_now_ms() + (uint64_t)ms;
    size_t have = 0;
    int rc = 0;
    while (have < n) {
        int left = (int)(end > mc_now_ms() ? end - mc_now_ms() : 0);
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (left == 0 || poll(&pf, 1, left) != 1) {
            rc = -1;
            break;
        }
        ssize_t r = read(fd, p + have, n - have);
        if (r == 0) {
            rc = -2;
            break;
        }
        if (r < 0) {
            rc = -3;
            break;
        }
        have += (size_t)r;
    }
    if (got != NULL)
        *got = have;
    return rc;
}

static void write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        assert_true(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

/* Send n bytes through the proxy and read them back: the round trip in ms. */
static uint64_t round_trip(size_t n, uint64_t seed, int timeout_ms)
{
    uint8_t *out = mc_malloc(n), *in = mc_malloc(n);
    fill(out, n, seed);
    int fd = dial(E.port);
    uint64_t t0 = mc_now_ms();
    /* a writer thread is not needed: the echo and the proxy buffer enough
     * for the sizes used here as long as we read while writing */
    size_t sent = 0, got = 0;
    while (got < n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN | (sent < n ? POLLOUT : 0)};
        assert_int_equal(poll(&pf, 1, timeout_ms), 1);
        if ((pf.revents & POLLOUT) && sent < n) {
            ssize_t w = write(fd, out + sent, n - sent > 65536 ? 65536 : n - sent);
            assert_true(w > 0);
            sent += (size_t)w;
        }
        if (pf.revents & POLLIN) {
            ssize_t r = read(fd, in + got, n - got);
            assert_true(r > 0);
            got += (size_t)r;
        }
    }
    uint64_t dt = mc_now_ms() - t0;
    assert_memory_equal(in, out, n);
    close(fd);
    mc_free(out);
    mc_free(in);
    return dt;
}

/* ------------------------------------------------------------ setup */

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    E.echo_lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(E.echo_lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(E.echo_lfd, 64) != 0 ||
        getsockname(E.echo_lfd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    E.echo_port = ntohs(a.sin_port);
    if (pthread_create(&E.echo_thread, NULL, echo_main, NULL) != 0)
        return -1;
    char bin[256], route[64];
    snprintf(route, sizeof(route), "127.0.0.1:%u", E.echo_port);
    char *argv[] = {(char *)test_bin("fault_proxy", bin, sizeof(bin)), "--route", route, NULL};
    if (tc_spawn(&E.proxy, argv) != 0)
        return -1;
    char line[128];
    if (test_proc_readline(&E.proxy, line, sizeof(line), 5000) != 0 ||
        sscanf(line, "ready %u %u", &E.ctl_port, &E.port) != 2) {
        fprintf(stderr, "fault_proxy did not say ready\n");
        return -1;
    }
    E.ctl = dial(E.ctl_port);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    close(E.ctl);
    tc_stop(&E.proxy, SIGTERM);
    shutdown(E.echo_lfd, SHUT_RDWR);
    close(E.echo_lfd);
    pthread_join(E.echo_thread, NULL);
    return 0;
}

static int heal_after(void **state)
{
    (void)state;
    ctl_ok("heal all");
    return 0;
}

/* ------------------------------------------------------------ tests */

static void bytes_pass_unchanged_without_faults(void **state)
{
    (void)state;
    uint64_t ms = round_trip(4 << 20, 1, 10000);
    print_message("4 MiB round trip through the proxy: %llu ms\n", (unsigned long long)ms);
    char out[512];
    ctl("stats all", out, sizeof(out));
    print_message("%s\n", out);
    assert_non_null(strstr(out, "up="));
    unsigned long long up = 0;
    const char *p = strstr(out, "up=");
    sscanf(p, "up=%llu", &up);
    assert_true(up >= 4u << 20);
}

static void a_delay_holds_each_direction_back(void **state)
{
    (void)state;
    /* The delays scale with the build's slowness (TC_SLOW) so that the
     * healed round trip, which measures the proxy and the echo thread, has
     * room under a sanitizer while still being well below what the delay
     * alone guarantees (a heal that left the delay in place fails). */
    const uint64_t up = 150 * TC_SLOW, down = 100 * TC_SLOW;
    ctl_ok("delay %u up %llu", E.port, (unsigned long long)up);
    ctl_ok("delay %u down %llu", E.port, (unsigned long long)down);
    uint64_t ms = round_trip(1000, 2, 10000 * TC_SLOW);
    print_message("1000 bytes with %llu ms up and %llu ms down: %llu ms\n", (unsigned long long)up,
                  (unsigned long long)down, (unsigned long long)ms);
    assert_true(ms >= up + down);
    assert_true(ms < 10 * (up + down));
    ctl_ok("heal %u", E.port);
    ms = round_trip(1000, 3, 10000 * TC_SLOW);
    print_message("the same after the heal: %llu ms\n", (unsigned long long)ms);
    assert_true(ms < up);
}

static void a_rate_caps_the_bandwidth(void **state)
{
    (void)state;
    ctl_ok("rate %u both 1000000", E.port); /* 1 MB/s each way */
    uint64_t ms = round_trip(500000, 4, 20000);
    print_message("500 kB at 1 MB/s: %llu ms\n", (unsigned long long)ms);
    assert_true(ms >= 400); /* the echo overlaps the two directions */
    assert_true(ms < 5000);
}

static void a_one_way_hold_stops_that_direction_only_and_heal_delivers_it(void **state)
{
    (void)state;
    uint8_t out[5000], in[5000];
    fill(out, sizeof(out), 5);
    /* down held: the server gets the bytes, the client gets nothing */
    int fd = dial(E.port);
    write_all(fd, out, 100); /* the connection is set up before the hold */
    assert_int_equal(read_all(fd, in, 100, 5000, NULL), 0);
    ctl_ok("hold %u down", E.port);
    uint64_t before = atomic_load(&E.echo_bytes);
    write_all(fd, out, sizeof(out));
    size_t got = 0;
    assert_int_equal(read_all(fd, in, sizeof(out), 400, &got), -1);
    assert_int_equal(got, 0);
    for (int waited = 0; atomic_load(&E.echo_bytes) < before + sizeof(out) && waited < 2000;
         waited += 10)
        usleep(10000);
    assert_true(atomic_load(&E.echo_bytes) >= before + sizeof(out));
    ctl_ok("heal %u", E.port);
    assert_int_equal(read_all(fd, in, sizeof(out), 5000, NULL), 0);
    assert_memory_equal(in, out, sizeof(out));
    close(fd);

    /* up held: the server gets nothing until the heal */
    fd = dial(E.port);
    write_all(fd, out, 100);
    assert_int_equal(read_all(fd, in, 100, 5000, NULL), 0);
    ctl_ok("hold %u up", E.port);
    before = atomic_load(&E.echo_bytes);
    write_all(fd, out, sizeof(out));
    assert_int_equal(read_all(fd, in, sizeof(out), 400, &got), -1);
    assert_int_equal(atomic_load(&E.echo_bytes), before);
    ctl_ok("heal %u", E.port);
    assert_int_equal(read_all(fd, in, sizeof(out), 5000, NULL), 0);
    assert_memory_equal(in, out, sizeof(out));
    close(fd);
}

static void a_black_hole_swallows_new_and_open_connections_until_healed(void **state)
{
    (void)state;
    uint8_t out[3000], in[3000];
    fill(out, sizeof(out), 6);
    int open_fd = dial(E.port);
    write_all(open_fd, out, 10);
    assert_int_equal(read_all(open_fd, in, 10, 5000, NULL), 0);
    ctl_ok("blackhole %u", E.port);
    uint64_t before = atomic_load(&E.echo_bytes);
    int new_fd = dial(E.port); /* accepted, but goes nowhere */
    write_all(new_fd, out, sizeof(out));
    write_all(open_fd, out, sizeof(out));
    size_t got = 1;
    assert_int_equal(read_all(new_fd, in, sizeof(out), 400, &got), -1); /* no EOF, no reset */
    assert_int_equal(got, 0);
    assert_int_equal(read_all(open_fd, in, sizeof(out), 10, &got), -1);
    assert_int_equal(got, 0);
    assert_int_equal(atomic_load(&E.echo_bytes), before);
    ctl_ok("heal %u", E.port);
    assert_int_equal(read_all(new_fd, in, sizeof(out), 5000, NULL), 0);
    assert_memory_equal(in, out, sizeof(out));
    assert_int_equal(read_all(open_fd, in, sizeof(out), 5000, NULL), 0);
    assert_memory_equal(in, out, sizeof(out));
    close(new_fd);
    close(open_fd);
}

static void drop_closes_new_connections_at_once(void **state)
{
    (void)state;
    ctl_ok("drop %u 100", E.port);
    uint8_t b[16];
    int fd = dial(E.port);
    assert_int_equal(read_all(fd, b, 1, 2000, NULL), -2); /* EOF before any byte */
    close(fd);
    char out[512];
    ctl("stats all", out, sizeof(out));
    assert_null(strstr(out, "dropped=0 "));
    ctl_ok("drop %u 0", E.port);
    round_trip(100, 7, 5000);
}

static void reset_ends_open_connections_with_a_reset(void **state)
{
    (void)state;
    uint8_t b[16] = {0};
    int fd = dial(E.port);
    write_all(fd, b, sizeof(b));
    assert_int_equal(read_all(fd, b, sizeof(b), 5000, NULL), 0);
    ctl_ok("reset %u", E.port);
    errno = 0;
    int rc = read_all(fd, b, 1, 2000, NULL);
    assert_int_equal(rc, -3);
    assert_int_equal(errno, ECONNRESET);
    close(fd);
    round_trip(100, 8, 5000); /* new connections work */
}

static void bad_commands_are_refused_naming_the_problem(void **state)
{
    (void)state;
    static const struct {
        const char *cmd, *want;
    } bad[] = {
        {"", "err empty command"},
        {"frobnicate all", "err unknown command 'frobnicate'"},
        {"delay all up", "err usage: delay ROUTE up|down|both MS"},
        {"delay all sideways 10", "err direction 'sideways' is not up, down or both"},
        {"delay all up -5", "err delay '-5' is not a number of milliseconds"},
        {"delay 1 up 5", "err no route '1' (a listen port or all)"},
        {"drop all 101", "err percent '101' is not a number in 0..100"},
        {"rate all both fast", "err rate 'fast' is not a number of bytes per second"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char out[512];
        ctl(bad[i].cmd, out, sizeof(out));
        if (strncmp(out, bad[i].want, strlen(bad[i].want)) != 0)
            fail_msg("'%s' answered '%s', expected '%s...'", bad[i].cmd, out, bad[i].want);
    }
    round_trip(1000, 9, 5000); /* still serving */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(bytes_pass_unchanged_without_faults, heal_after),
        cmocka_unit_test_teardown(a_delay_holds_each_direction_back, heal_after),
        cmocka_unit_test_teardown(a_rate_caps_the_bandwidth, heal_after),
        cmocka_unit_test_teardown(a_one_way_hold_stops_that_direction_only_and_heal_delivers_it,
                                  heal_after),
        cmocka_unit_test_teardown(a_black_hole_swallows_new_and_open_connections_until_healed,
                                  heal_after),
        cmocka_unit_test_teardown(drop_closes_new_connections_at_once, heal_after),
        cmocka_unit_test_teardown(reset_ends_open_connections_with_a_reset, heal_after),
        cmocka_unit_test_teardown(bad_commands_are_refused_naming_the_problem, heal_after),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
