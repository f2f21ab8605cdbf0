/* daemon.c - see daemon.h. */
#include "util/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"

static const mc_conf_key_t log_keys[] = {
    MC_CONF_ROW(mc_log_opts_t, level, "level", MC_CONF_STRING, "info", 0, 0,
                "log levels: LEVEL or LEVEL,component=LEVEL,... (error|warn|info|debug|trace; "
                "components core conf reactor rpc transport tcp rdma metadata master client tier "
                "http ha)"),
    MC_CONF_ROW(mc_log_opts_t, file, "file", MC_CONF_STRING, "", 0, 0,
                "append log lines to this file instead of stderr"),
};

mc_status_t mc_daemon_add_log_section(mc_conf_t *conf, mc_log_opts_t *o)
{
    return mc_conf_add_section(conf, "log", log_keys, sizeof(log_keys) / sizeof(log_keys[0]), o);
}

mc_status_t mc_daemon_apply_log(const mc_log_opts_t *o, char *err, size_t errlen)
{
    char why[256];
    if (mc_log_set_spec(o->level, why, sizeof(why)) != MC_OK) {
        snprintf(err, errlen, "log.level: %s", why);
        return MC_ERR_CONFIG;
    }
    if (o->file != NULL && o->file[0] != '\0') {
        int fd = open(o->file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            snprintf(err, errlen, "log.file: cannot open '%s': %s", o->file, strerror(errno));
            return MC_ERR_CONFIG;
        }
        mc_log_set_fd(fd); /* kept open for the life of the process */
        /* a file that takes no line (a full disk, /dev/full) fails the start:
         * running without a log is silently losing everything */
        int e = mc_log_probe();
        if (e != 0) {
            mc_log_set_fd(2);
            close(fd);
            snprintf(err, errlen, "log.file: cannot write '%s': %s", o->file, strerror(e));
            return MC_ERR_CONFIG;
        }
    }
    return MC_OK;
}

extern char **environ;

int mc_daemon_configure(mc_conf_t *conf, const mc_log_opts_t *lo, int argc, char **argv,
                        const char *usage, const char *prog)
{
    char err[512];
    int exit_now = 0;
    if (mc_conf_parse_args(conf, argc, argv, environ, usage, &exit_now, err, sizeof(err)) !=
            MC_OK ||
        (!exit_now && mc_daemon_apply_log(lo, err, sizeof(err)) != MC_OK)) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 2;
    }
    return exit_now ? 0 : -1;
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

int mc_daemon_wait_signal(const sigset_t *set)
{
    int sig = 0;
    while (sigwait(set, &sig) != 0)
        ;
    return sig;
}
