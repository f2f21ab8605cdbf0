/*
 * mooncake/log.h - where libmooncake's log lines go and how many of them.
 *
 * The library logs one line per message, e.g.
 *   "2026-11-21 14:40:01.123456 W [rpc] (te-0) connection to 10.0.0.2:50051 lost"
 * (UTC time, level letter E/W/I/D/T, component, thread), by default to
 * stderr at level INFO for every component.
 *
 * Levels: set them with mc_log_set_spec ("warn", "info,rpc=debug") from any
 * thread, at any time. Before the first transfer engine or store client of
 * the process starts, the library applies the environment variable
 * MC_LOG_LEVEL (same syntax) unless the program already set levels with
 * mc_log_set_spec / mc_log_set_all: an explicit setting wins. A malformed
 * MC_LOG_LEVEL is reported once on the log and ignored.
 *
 * Output: a file descriptor (mc_log_set_fd, default 2) or a sink callback
 * (mc_log_set_sink), which then receives every line instead. The sink runs
 * on whichever thread logged, often one of the library's reactor threads,
 * possibly several at once: it must be quick, thread-safe, and must not
 * call into libmooncake (no logging from inside it, no store or transfer
 * call). The line it receives is borrowed for the call and carries no
 * newline.
 */
#ifndef MOONCAKE_LOG_H
#define MOONCAKE_LOG_H

#include <stddef.h>

#include "mooncake/status.h"
#include "mooncake/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mc_log_level {
    MC_LOG_ERR = 0,
    MC_LOG_WARN,
    MC_LOG_INFO,
    MC_LOG_DEBUG,
    MC_LOG_TRACE,
} mc_log_level_t;

/* Set levels from a spec: "info" (every component), "warn,rpc=debug,tcp=trace".
 * Level names: error|err, warn|warning, info, debug, trace. Components: core
 * conf reactor rpc transport tcp rdma metadata master client tier http ha.
 * MC_OK, or MC_ERR_INVALID_PARAMS when the spec is malformed: then nothing
 * changes and, if errbuf is not NULL, it receives a message naming the bad
 * part (truncated to errlen). */
MC_API mc_status_t mc_log_set_spec(const char *spec, char *errbuf, size_t errlen);

/* Every component at level. */
MC_API void mc_log_set_all(mc_log_level_t level);

/* Send log lines to fd (default 2, stderr), and drop any sink. The fd stays
 * owned by the caller and must stay open while the library may log. */
MC_API void mc_log_set_fd(int fd);

/* line: the formatted line (no newline), len bytes, borrowed for the call;
 * component: its name ("rpc"), static storage. */
typedef void (*mc_log_sink_t)(void *arg, mc_log_level_t level, const char *component,
                              const char *line, size_t len);

/* Send log lines to sink(arg, ...) instead of the fd; NULL goes back to the
 * fd. When this returns, no call of the previous sink is running any more,
 * so its arg may be freed. Not from inside a sink. */
MC_API void mc_log_set_sink(mc_log_sink_t sink, void *arg);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_LOG_H */
