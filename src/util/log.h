/*
 * log.h - leveled, per-component logging.
 *
 * One line per message: "2026-11-21 14:40:01.123456 W [rpc] (reactor-0) text",
 * written with a single write(2) so lines from different threads never
 * interleave. The macros check the component's level before evaluating their
 * arguments (Redis serverLog), so a disabled MC_DEBUG costs one relaxed load.
 * Levels can be changed at run time from any thread (mc_log_set_spec).
 *
 * Log an error once, where it is decided, with its cause and what was being
 * done (docs/ARCHITECTURE.md §2).
 */
#ifndef MC_UTIL_LOG_H
#define MC_UTIL_LOG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/log.h" /* the public half: levels, spec, fd, sink */
#include "mooncake/status.h"

/* X(enumerator suffix, name used in specs and in log lines) */
#define MC_LOG_COMPONENTS(X)                                                                       \
    X(CORE, "core")                                                                                \
    X(CONF, "conf")                                                                                \
    X(REACTOR, "reactor")                                                                          \
    X(RPC, "rpc")                                                                                  \
    X(TRANSPORT, "transport")                                                                      \
    X(TCP, "tcp")                                                                                  \
    X(RDMA, "rdma")                                                                                \
    X(SHM, "shm")                                                                                  \
    X(METADATA, "metadata")                                                                        \
    X(MASTER, "master")                                                                            \
    X(CLIENT, "client")                                                                            \
    X(TIER, "tier")                                                                                \
    X(HTTP, "http")                                                                                \
    X(HA, "ha")                                                                                    \
    X(TEST, "test")

typedef enum mc_log_comp {
#define MC_LOG_COMP_ENUM(id, name) MC_LOGC_##id,
    MC_LOG_COMPONENTS(MC_LOG_COMP_ENUM)
#undef MC_LOG_COMP_ENUM
        MC_LOGC_COUNT
} mc_log_comp_t;

/* Current level per component; read by the macros, written by mc_log_set_*. */
extern _Atomic int mc_log_levels[MC_LOGC_COUNT];

void mc_log_write(mc_log_comp_t comp, mc_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define MC_LOG(comp, level, ...)                                                                   \
    do {                                                                                           \
        if ((int)(level) <=                                                                        \
            atomic_load_explicit(&mc_log_levels[MC_LOGC_##comp], memory_order_relaxed))            \
            mc_log_write(MC_LOGC_##comp, (level), __VA_ARGS__);                                    \
    } while (0)

#define MC_ERROR(comp, ...) MC_LOG(comp, MC_LOG_ERR, __VA_ARGS__)
#define MC_WARN(comp, ...) MC_LOG(comp, MC_LOG_WARN, __VA_ARGS__)
#define MC_INFO(comp, ...) MC_LOG(comp, MC_LOG_INFO, __VA_ARGS__)
#define MC_DEBUG(comp, ...) MC_LOG(comp, MC_LOG_DEBUG, __VA_ARGS__)
#define MC_TRACE(comp, ...) MC_LOG(comp, MC_LOG_TRACE, __VA_ARGS__)

#define MC_LOG_ENABLED(comp, level)                                                                \
    ((int)(level) <= atomic_load_explicit(&mc_log_levels[MC_LOGC_##comp], memory_order_relaxed))

/* mc_log_set_spec, mc_log_set_all, mc_log_set_fd, mc_log_set_sink: see
 * mooncake/log.h. */
void mc_log_set_level(mc_log_comp_t comp, mc_log_level_t level);
const char *mc_log_comp_name(mc_log_comp_t comp);
const char *mc_log_level_name(mc_log_level_t level);

/* A log line that cannot be written is lost: the first such failure after
 * each mc_log_set_fd is said once on stderr (unless the log is stderr), and
 * every one is counted here (a metric). */
uint64_t mc_log_write_errors(void);

/* Write one INFO line ("log opened (pid N)") to fd whatever the levels, to
 * find out whether a log file can be written before using it: 0, or the
 * errno of the failed write (not counted as a write error). */
int mc_log_probe(int fd);

/* Apply MC_LOG_LEVEL once per process, unless levels were set explicitly
 * before (mooncake/log.h). Called where a library client starts
 * (mc_te_create); cheap after the first call. */
void mc_log_env_once(void);

/* Name of the calling thread in log lines (and in ps/top via pthread_setname_np;
 * truncated to 15 bytes there). */
void mc_log_set_thread_name(const char *name);
const char *mc_log_thread_name(void);

#endif /* MC_UTIL_LOG_H */
