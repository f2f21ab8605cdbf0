/*
 * daemon.h - what every mooncake-c daemon's main() shares (linked into the
 * programs, not into libmooncake): the [log] configuration section, the
 * command line (--version besides the configuration's own flags), the
 * "reactors = auto|N" value, signals, and systemd's readiness protocol.
 *
 * Signals: SIGINT and SIGTERM stop the daemon; SIGHUP reopens the log file
 * and re-reads the [log] section (level and file) from the same sources as
 * at start (the -c file, the environment, --set), without a restart:
 * logrotate's postrotate and `systemctl reload` send it.
 *
 * systemd (Type=notify): mc_daemon_ready() sends READY=1 once the daemon
 * serves, a reload sends RELOADING=1 then READY=1, mc_daemon_stopping()
 * STOPPING=1. Outside systemd ($NOTIFY_SOCKET unset) these do nothing.
 */
#ifndef MC_SRC_DAEMON_H
#define MC_SRC_DAEMON_H

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

/* What every daemon's main() does first: answer --version / -V ("PROG
 * VERSION", exit 0), parse the command line and the environment
 * (MC_<SECTION>_<KEY>) into conf, then apply the [log] section lo registered
 * in it. Remembers argv for SIGHUP. Returns -1 to go on, or the exit code: 0
 * after --version, --help or --dump-config, 2 for a bad configuration
 * (printed as "prog: reason"). */
int mc_daemon_configure(mc_conf_t *conf, const mc_log_opts_t *lo, int argc, char **argv,
                        const char *usage, const char *prog);

/* Parse "auto" (0) or a count 1..256 for key `what`. MC_ERR_CONFIG with a
 * message otherwise. */
mc_status_t mc_daemon_parse_reactors(const char *value, const char *what, unsigned *out, char *err,
                                     size_t errlen);

/* Block SIGINT/SIGTERM/SIGHUP in the calling thread (call before starting
 * threads, which inherit the mask) and ignore SIGPIPE. */
void mc_daemon_block_signals(sigset_t *set);

/* Wait for SIGINT or SIGTERM and return its number; a SIGHUP meanwhile
 * reloads the [log] section (mc_daemon_reload_log) and waits on. */
int mc_daemon_wait_signal(const sigset_t *set);

/* Re-read the [log] section from the start's sources and apply it: levels,
 * and the file reopened (a renamed file is left alone, lines go to a new one
 * at the configured path). On an error the old settings stay and the reason
 * is logged. MC_OK or MC_ERR_CONFIG. */
mc_status_t mc_daemon_reload_log(void);

/* systemd: READY=1 with STATUS=status (may be NULL); STOPPING=1. */
void mc_daemon_ready(const char *status);
void mc_daemon_stopping(void);

/* 1 when host is a loopback address or name (127.0.0.0/8, ::1, localhost). */
int mc_daemon_is_loopback(const char *host);

/* WARN once when `bind` (what a daemon listens on) is reachable from other
 * hosts but `advertise` (what it tells peers) is a loopback address: peers on
 * other hosts get an address they cannot use. `what` names the setting. */
void mc_daemon_check_advertise(const char *prog, const char *bind, const char *advertise,
                               const char *what);

#endif /* MC_SRC_DAEMON_H */
