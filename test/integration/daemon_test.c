/*
 * What an operator expects of the daemons (src/daemon.h), tried on the real
 * programs: --version on every installed program; SIGHUP reopens the log
 * file (logrotate renames it, the daemon writes a new one) and re-reads the
 * [log] levels from the -c file, without stopping; a bad [log] at SIGHUP
 * keeps the old settings; systemd's notify protocol (READY=1 when serving,
 * RELOADING=1 / READY=1 around a SIGHUP, STOPPING=1), read from a
 * NOTIFY_SOCKET of our own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sys/stat.h>
#include <sys/un.h>

#include "cluster.h"
#include "mooncake/version.h"

/* ------------------------------------------------------------ helpers */

static char dir[64];

static void slurp(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static int file_has(const char *path, const char *needle)
{
    static char buf[1 << 16];
    slurp(path, buf, sizeof(buf));
    return strstr(buf, needle) != NULL;
}

static int wait_file_has(const char *path, const char *needle, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 20) {
        if (file_has(path, needle))
            return 1;
        usleep(20000);
    }
    return file_has(path, needle);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Run prog with one argument; its stdout into out; the exit status. */
static int run_capture(const char *prog, const char *arg, char *out, size_t len)
{
    char bin[256];
    char *argv[] = {(char *)test_prog(prog, bin, sizeof(bin)), (char *)arg, NULL};
    test_proc_t p = {0, -1};
    assert_int_equal(test_proc_start(&p, argv), 0);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < len && (r = read(p.out_fd, out + n, len - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    int status = 0;
    waitpid(p.pid, &status, 0);
    close(p.out_fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* One HTTP GET over a raw socket; the status code (0: no answer). */
static int http_get(unsigned port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    char req[256], resp[512];
    int n =
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return 0;
    }
    ssize_t r = read(fd, resp, sizeof(resp) - 1);
    close(fd);
    int code = 0;
    if (r > 0) {
        resp[r] = '\0';
        sscanf(resp, "HTTP/1.1 %d", &code);
    }
    return code;
}

/* ---------------------------------------------------------------- tests */

static void every_program_prints_its_version(void **state)
{
    (void)state;
    static const char *const progs[] = {"mooncake-master", "mooncake-store-server",
                                        "mooncake-http-metadata-server", "mooncake-cli",
                                        "mooncake-topology"};
    for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
        char out[256], want[128];
        snprintf(want, sizeof(want), "%s %s\n", progs[i], mc_version());
        assert_int_equal(run_capture(progs[i], "--version", out, sizeof(out)), 0);
        assert_string_equal(out, want);
        assert_int_equal(run_capture(progs[i], "-V", out, sizeof(out)), 0);
        assert_string_equal(out, want);
    }
    /* and it is the Makefile's VERSION: three numbers */
    unsigned a, b, c;
    assert_int_equal(sscanf(mc_version(), "%u.%u.%u", &a, &b, &c), 3);
}

static void sighup_reopens_the_log_and_rereads_its_levels_without_stopping(void **state)
{
    (void)state;
    char conf[128], log[128], rotated[128], text[512];
    snprintf(conf, sizeof(conf), "%s/master.conf", dir);
    snprintf(log, sizeof(log), "%s/master.log", dir);
    snprintf(rotated, sizeof(rotated), "%s/master.log.1", dir);
    snprintf(text, sizeof(text), "[log]\nlevel = info\nfile = %s\n", log);
    write_file(conf, text);

    static tc_master_t m;
    memset(&m, 0, sizeof(m));
    tc_two_ports(&m.rpc_port, &m.http_port);
    char bin[256];
    tc_args_t a;
    tc_args_init(&a, test_prog("mooncake-master", bin, sizeof(bin)));
    tc_args_add(&a, "-c");
    tc_args_add(&a, "%s", conf);
    tc_args_add(&a, "--set");
    tc_args_add(&a, "server.bind_address=127.0.0.1");
    tc_args_add(&a, "--set");
    tc_args_add(&a, "server.rpc_port=%u", m.rpc_port);
    tc_args_add(&a, "--set");
    tc_args_add(&a, "server.http_port=%u", m.http_port);
    tc_args_add(&a, "--set");
    tc_args_add(&a, "server.reactors=1");
    assert_int_equal(tc_spawn(&m.proc, a.argv), 0);
    assert_int_equal(tc_wait_listening(&m.proc, m.http_port, TC_START_TIMEOUT_MS), 0);
    assert_true(wait_file_has(log, "ready", 5000));

    /* logrotate: rename, then HUP */
    assert_int_equal(rename(log, rotated), 0);
    assert_int_equal(kill(m.proc.pid, SIGHUP), 0);
    assert_true(wait_file_has(log, "SIGHUP: log reopened", 5000));
    assert_false(file_has(rotated, "SIGHUP"));
    assert_int_equal(http_get(m.http_port, "/health"), 200);
    assert_true(tc_alive(&m.proc, NULL));

    /* a bad level: the old settings stay, and it still serves */
    snprintf(text, sizeof(text), "[log]\nlevel = loud\nfile = %s\n", log);
    write_file(conf, text);
    assert_int_equal(kill(m.proc.pid, SIGHUP), 0);
    assert_true(wait_file_has(log, "[log] not reloaded", 5000));
    assert_true(file_has(log, "loud"));
    assert_int_equal(http_get(m.http_port, "/health"), 200);

    /* levels re-read: at error level the INFO line of the shutdown is gone */
    snprintf(text, sizeof(text), "[log]\nlevel = error\nfile = %s\n", log);
    write_file(conf, text);
    assert_int_equal(kill(m.proc.pid, SIGHUP), 0);
    usleep(300000); /* the reload's own INFO line is not written at error level */
    assert_true(tc_alive(&m.proc, NULL));
    assert_int_equal(http_get(m.http_port, "/health"), 200);
    int st = tc_stop(&m.proc, SIGTERM);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_false(file_has(log, "shutting down"));
    assert_true(file_has(rotated, "ready"));
}

/* A NOTIFY_SOCKET of our own: a bound unix datagram socket. */
static int notify_socket(char *path, size_t len)
{
    snprintf(path, len, "%s/notify.sock", dir);
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    assert_true(strlen(path) < sizeof(a.sun_path));
    memcpy(a.sun_path, path, strlen(path) + 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* The next datagram within timeout_ms, into buf ("" on timeout). */
static const char *notify_next(int fd, char *buf, size_t len, int timeout_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    buf[0] = '\0';
    if (poll(&pfd, 1, timeout_ms) == 1) {
        ssize_t n = recv(fd, buf, len - 1, 0);
        buf[n > 0 ? n : 0] = '\0';
    }
    return buf;
}

static void daemons_tell_systemd_when_ready_reloading_and_stopping(void **state)
{
    (void)state;
    char path[128], msg[512];
    int fd = notify_socket(path, sizeof(path));
    setenv("NOTIFY_SOCKET", path, 1);

    static tc_master_t m;
    memset(&m, 0, sizeof(m));
    assert_int_equal(tc_master_start(&m, NULL), 0);
    unsetenv("NOTIFY_SOCKET");
    notify_next(fd, msg, sizeof(msg), 5000);
    assert_non_null(strstr(msg, "READY=1"));
    assert_non_null(strstr(msg, "STATUS=serving"));
    kill(m.proc.pid, SIGHUP);
    assert_string_equal(notify_next(fd, msg, sizeof(msg), 5000), "RELOADING=1");
    assert_string_equal(notify_next(fd, msg, sizeof(msg), 5000), "READY=1");

    /* the storage node too, once its segment is mounted */
    char maddr[64];
    setenv("NOTIFY_SOCKET", path, 1);
    static tc_node_t n;
    assert_int_equal(tc_node_start(&n, tc_master_addr(&m, maddr, sizeof(maddr)), NULL), 0);
    unsetenv("NOTIFY_SOCKET");
    notify_next(fd, msg, sizeof(msg), 5000);
    assert_non_null(strstr(msg, "READY=1"));
    assert_non_null(strstr(msg, n.name));
    tc_node_stop(&n, SIGTERM);
    assert_string_equal(notify_next(fd, msg, sizeof(msg), 5000), "STOPPING=1");

    tc_master_stop(&m, SIGTERM);
    assert_string_equal(notify_next(fd, msg, sizeof(msg), 5000), "STOPPING=1");
    close(fd);
    unlink(path);
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/mc-daemon-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_program_prints_its_version),
        cmocka_unit_test(sighup_reopens_the_log_and_rereads_its_levels_without_stopping),
        cmocka_unit_test(daemons_tell_systemd_when_ready_reloading_and_stopping),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
