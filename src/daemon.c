/* daemon.c - see daemon.h. */
#include "daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef MC_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "mooncake/version.h"
#include "util/log.h"

static const mc_conf_key_t log_keys[] = {
    MC_CONF_ROW(mc_log_opts_t, level, "level", MC_CONF_STRING, "info", 0, 0,
                "log levels: LEVEL or LEVEL,component=LEVEL,... (error|warn|info|debug|trace; "
                "components core conf reactor rpc transport tcp rdma metadata master client tier "
                "http ha); SIGHUP re-reads it"),
    MC_CONF_ROW(mc_log_opts_t, file, "file", MC_CONF_STRING, "", 0, 0,
                "append log lines to this file instead of stderr; SIGHUP reopens it (logrotate)"),
};

/* What a reload needs: the start's command line, and the log file in use.
 * Only main's thread touches this (configure, then the signal loop). */
static struct {
    int argc;
    char **argv;
    const char *prog;
    int fd;     /* the log file's descriptor (log lines go there), -1 = stderr */
    char *path; /* its path */
} dm = {.fd = -1};

mc_status_t mc_daemon_add_log_section(mc_conf_t *conf, mc_log_opts_t *o)
{
    return mc_conf_add_section(conf, "log", log_keys, sizeof(log_keys) / sizeof(log_keys[0]), o);
}

/* Point the log at path ("" = stderr). The descriptor number of a file in
 * use stays the same (dup2): a thread writing a line meanwhile writes it to
 * the old file or to the new one, never to a closed descriptor. */
static mc_status_t log_to(const char *path, char *err, size_t errlen)
{
    if (path == NULL || path[0] == '\0') {
        mc_log_set_fd(2);
        return MC_OK; /* the old file's descriptor stays open: a writer may hold it */
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "log.file: cannot open '%s': %s", path, strerror(errno));
        return MC_ERR_CONFIG;
    }
    /* a file that takes no line (a full disk, /dev/full) is refused: running
     * without a log would be losing everything silently */
    int e = mc_log_probe(fd);
    if (e != 0) {
        snprintf(err, errlen, "log.file: cannot write '%s': %s", path, strerror(e));
        close(fd);
        return MC_ERR_CONFIG;
    }
    char *copy = strdup(path);
    if (copy == NULL) {
        close(fd);
        snprintf(err, errlen, "log.file: out of memory");
        return MC_ERR_CONFIG;
    }
    if (dm.fd >= 0) {
        if (dup3(fd, dm.fd, O_CLOEXEC) < 0) {
            snprintf(err, errlen, "log.file: cannot switch to '%s': %s", path, strerror(errno));
            close(fd);
            free(copy);
            return MC_ERR_CONFIG;
        }
        close(fd);
    } else {
        dm.fd = fd;
    }
    mc_log_set_fd(dm.fd);
    free(dm.path);
    dm.path = copy;
    return MC_OK;
}

mc_status_t mc_daemon_apply_log(const mc_log_opts_t *o, char *err, size_t errlen)
{
    char why[256];
    if (mc_log_set_spec(o->level, why, sizeof(why)) != MC_OK) {
        snprintf(err, errlen, "log.level: %s", why);
        return MC_ERR_CONFIG;
    }
    return log_to(o->file, err, errlen);
}

extern char **environ;

int mc_daemon_configure(mc_conf_t *conf, const mc_log_opts_t *lo, int argc, char **argv,
                        const char *usage, const char *prog)
{
    char err[512];
    int exit_now = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0 || strcmp(argv[i], "-V") == 0) {
            printf("%s %s\n", prog, mc_version());
            fflush(stdout);
            return 0;
        }
        if (strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0 ||
            strcmp(argv[i], "--set") == 0)
            i++; /* a value, whatever it looks like */
    }
    dm.argc = argc;
    dm.argv = argv;
    dm.prog = prog;
    if (mc_conf_parse_args(conf, argc, argv, environ, usage, &exit_now, err, sizeof(err)) !=
            MC_OK ||
        (!exit_now && mc_daemon_apply_log(lo, err, sizeof(err)) != MC_OK)) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 2;
    }
    return exit_now ? 0 : -1;
}

mc_status_t mc_daemon_reload_log(void)
{
    char err[512] = "";
    mc_log_opts_t lo;
    int exit_now = 0;
    mc_status_t st = MC_ERR_CONFIG;
    mc_conf_t *conf = mc_conf_create();
    if (conf == NULL) {
        snprintf(err, sizeof(err), "out of memory");
        goto out;
    }
    /* the other sections stay as they are: only [log] is read again */
    mc_conf_set_partial(conf, 1);
    if (mc_daemon_add_log_section(conf, &lo) != MC_OK) {
        snprintf(err, sizeof(err), "out of memory");
        goto out;
    }
    if (mc_conf_parse_args(conf, dm.argc, dm.argv, environ, NULL, &exit_now, err, sizeof(err)) !=
        MC_OK)
        goto out;
    st = mc_daemon_apply_log(&lo, err, sizeof(err));
out:
    if (st == MC_OK)
        MC_INFO(CORE, "%s %s: SIGHUP: log reopened (level %s, %s)", dm.prog ? dm.prog : "daemon",
                mc_version(), lo.level, lo.file[0] != '\0' ? lo.file : "stderr");
    else
        MC_WARN(CORE, "SIGHUP: [log] not reloaded, the old settings stay: %s", err);
    mc_conf_destroy(conf);
    return st;
}

mc_status_t mc_daemon_parse_reactors(const char *value, const char *what, unsigned *out, char *err,
                                     size_t errlen)
{
    if (value == NULL || strcmp(value, "auto") == 0) {
        *out = 0;
        return MC_OK;
    }
    char *end = NULL;
    errno = 0;
    unsigned long n = strtoul(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || n < 1 || n > 256 || value[0] == '-') {
        snprintf(err, errlen, "%s: bad value \"%s\": expected auto or a count 1..256", what, value);
        return MC_ERR_CONFIG;
    }
    *out = (unsigned)n;
    return MC_OK;
}

void mc_daemon_block_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* sd_notify, or nothing without libsystemd. */
static void notify(const char *state)
{
#ifdef MC_HAVE_SYSTEMD
    int r = sd_notify(0, state);
    if (r < 0)
        MC_WARN(CORE, "sd_notify(%s): %s", state, strerror(-r));
#else
    (void)state;
#endif
}

int mc_daemon_wait_signal(const sigset_t *set)
{
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) != 0)
            continue;
        if (sig != SIGHUP)
            return sig;
        notify("RELOADING=1");
        (void)mc_daemon_reload_log();
        notify("READY=1");
    }
}

void mc_daemon_ready(const char *status)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "READY=1\nSTATUS=%s", status != NULL ? status : "serving");
    notify(buf);
}

void mc_daemon_stopping(void)
{
    notify("STOPPING=1");
}

int mc_daemon_is_loopback(const char *host)
{
    if (host == NULL)
        return 0;
    if (strcmp(host, "localhost") == 0)
        return 1;
    struct in_addr a4;
    struct in6_addr a6;
    const char *h = host;
    char buf[64];
    size_t n = strlen(host);
    if (n > 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof(buf)) {
        memcpy(buf, host + 1, n - 2);
        buf[n - 2] = '\0';
        h = buf;
    }
    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, h, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

void mc_daemon_check_advertise(const char *prog, const char *bind, const char *advertise,
                               const char *what)
{
    if (mc_daemon_is_loopback(bind) || !mc_daemon_is_loopback(advertise))
        return;
    MC_WARN(CORE,
            "%s listens on %s but tells peers %s (%s): peers on other hosts cannot reach it; set "
            "%s to an address they can reach, or listen on 127.0.0.1 only",
            prog, bind, advertise, what, what);
}
