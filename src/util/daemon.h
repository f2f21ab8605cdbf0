/*
 * daemon.h - what every mooncake-c program's main() shares: the [log]
 * configuration section, the "reactors = auto|N" value, and waiting for a
 * termination signal.
 */
#ifndef MC_UTIL_DAEMON_H
#define MC_UTIL_DAEMON_H

#include <signal.h>

#include "mooncake/status.h"
#include "util/conf.h"

typedef struct mc_log_opts {
    char *level; /* "info", or a spec "warn,rpc=debug" (log.h) */
    char *file;  /* append log lines here; "" = stderr */
} mc_log_opts_t;

/* Register the [log] section writing into o. */
mc_status_t mc_daemon_add_log_section(mc_conf_t *conf, mc_log_opts_t *o);

/* Apply the [log] options (levels, file). MC_ERR_CONFIG with a message naming
 * the key on a bad spec or an unopenable file. */
mc_status_t mc_daemon_apply_log(const mc_log_opts_t *o, char *err, size_t errlen);

/* What both daemons' main() do first: parse the command line and the
 * environment (MC_<SECTION>_<KEY>) into conf, then apply the [log] section lo
 * registered in it. Returns -1 to go on, or the exit code: 0 after --help or
 * --dump-config, 2 for a bad configuration (printed as "prog: reason"). */
int mc_daemon_configure(mc_conf_t *conf, const mc_log_opts_t *lo, int argc, char **argv,
                        const char *usage, const char *prog);

/* Parse "auto" (0) or a count 1..256 for key `what`. MC_ERR_CONFIG with a
 * message otherwise. */
mc_status_t mc_daemon_parse_reactors(const char *value, const char *what, unsigned *out, char *err,
                                     size_t errlen);

/* Block SIGINT/SIGTERM/SIGHUP in the calling thread (call before starting
 * threads, which inherit the mask) and ignore SIGPIPE. */
void mc_daemon_block_signals(sigset_t *set);

/* Wait for one of the blocked signals; returns its number. */
int mc_daemon_wait_signal(const sigset_t *set);

#endif /* MC_UTIL_DAEMON_H */
