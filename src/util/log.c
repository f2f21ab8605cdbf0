/* log.c - see log.h. */
#include "util/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

_Atomic int mc_log_levels[MC_LOGC_COUNT] = {
#define MC_LOG_DEFAULT_LEVEL(id, name) [MC_LOGC_##id] = MC_LOG_INFO,
    MC_LOG_COMPONENTS(MC_LOG_DEFAULT_LEVEL)
#undef MC_LOG_DEFAULT_LEVEL
};

static const char *const comp_names[MC_LOGC_COUNT] = {
#define MC_LOG_COMP_NAME(id, name) [MC_LOGC_##id] = name,
    MC_LOG_COMPONENTS(MC_LOG_COMP_NAME)
#undef MC_LOG_COMP_NAME
};

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};
static const char level_letters[] = "EWIDT";

static _Atomic int log_fd = 2;
/* write(2) failures of log lines (lines lost), and whether the first one was
 * reported on stderr: once per log descriptor set, since stderr may be all
 * that is left to say it */
static _Atomic uint64_t write_errors;
static atomic_int write_error_reported;
static _Thread_local char thread_name[16] = "main";

/* The sink (mooncake/log.h): read-held while it runs, so that replacing it
 * (write lock) waits for running calls and its arg can be freed after. */
static pthread_rwlock_t sink_lock = PTHREAD_RWLOCK_INITIALIZER;
static mc_log_sink_t sink_fn;
static void *sink_arg;
static _Atomic int sink_set; /* sink_fn != NULL, read without the lock first */

/* Levels were set by the program: MC_LOG_LEVEL must not override them. */
static _Atomic int levels_explicit;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

const char *mc_log_comp_name(mc_log_comp_t comp)
{
    return (unsigned)comp < MC_LOGC_COUNT ? comp_names[comp] : "?";
}

const char *mc_log_level_name(mc_log_level_t level)
{
    return (unsigned)level <= MC_LOG_TRACE ? level_names[level] : "?";
}

void mc_log_set_fd(int fd)
{
    atomic_store(&write_error_reported, 0); /* a new file: its first failure is news */
    atomic_store(&log_fd, fd);
    mc_log_set_sink(NULL, NULL);
}

void mc_log_set_sink(mc_log_sink_t sink, void *arg)
{
    pthread_rwlock_wrlock(&sink_lock);
    sink_fn = sink;
    sink_arg = arg;
    atomic_store(&sink_set, sink != NULL);
    pthread_rwlock_unlock(&sink_lock);
}

static void env_apply(void)
{
    const char *spec = getenv("MC_LOG_LEVEL");
    if (spec == NULL || atomic_load(&levels_explicit))
        return;
    char why[160];
    if (mc_log_set_spec(spec, why, sizeof(why)) != MC_OK)
        MC_WARN(CORE, "MC_LOG_LEVEL ignored: %s", why);
}

void mc_log_env_once(void)
{
    pthread_once(&env_once, env_apply);
}

void mc_log_set_thread_name(const char *name)
{
    snprintf(thread_name, sizeof(thread_name), "%s", name);
    pthread_setname_np(pthread_self(), thread_name);
}

const char *mc_log_thread_name(void)
{
    return thread_name;
}

void mc_log_set_level(mc_log_comp_t comp, mc_log_level_t level)
{
    atomic_store(&levels_explicit, 1);
    if ((unsigned)comp < MC_LOGC_COUNT)
        atomic_store_explicit(&mc_log_levels[comp], (int)level, memory_order_relaxed);
}

void mc_log_set_all(mc_log_level_t level)
{
    for (int c = 0; c < MC_LOGC_COUNT; c++)
        mc_log_set_level((mc_log_comp_t)c, level);
}

static int parse_level(const char *s, size_t n, mc_log_level_t *out)
{
    static const struct {
        const char *name;
        mc_log_level_t level;
    } names[] = {{"error", MC_LOG_ERR},    {"err", MC_LOG_ERR},   {"warn", MC_LOG_WARN},
                 {"warning", MC_LOG_WARN}, {"info", MC_LOG_INFO}, {"debug", MC_LOG_DEBUG},
                 {"trace", MC_LOG_TRACE}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strlen(names[i].name) == n && strncasecmp(s, names[i].name, n) == 0) {
            *out = names[i].level;
            return 0;
        }
    }
    return -1;
}

mc_status_t mc_log_set_spec(const char *spec, char *errbuf, size_t errlen)
{
    int levels[MC_LOGC_COUNT];
    for (int c = 0; c < MC_LOGC_COUNT; c++)
        levels[c] = atomic_load(&mc_log_levels[c]);

    /* Parse everything first, apply only if the whole spec is valid. */
    const char *p = spec;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && (*p == ' ' || *p == '\t'))
            p++, len--;
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        const char *eq = memchr(p, '=', len);
        mc_log_level_t level;
        if (len == 0) {
            /* empty item ("info,,rpc=debug"): tolerated */
        } else if (eq == NULL) {
            if (parse_level(p, len, &level) != 0)
                goto bad;
            for (int c = 0; c < MC_LOGC_COUNT; c++)
                levels[c] = (int)level;
        } else {
            size_t clen = (size_t)(eq - p);
            int comp = -1;
            for (int c = 0; c < MC_LOGC_COUNT; c++) {
                if (strlen(comp_names[c]) == clen && strncmp(comp_names[c], p, clen) == 0)
                    comp = c;
            }
            if (comp < 0 || parse_level(eq + 1, len - clen - 1, &level) != 0)
                goto bad;
            levels[comp] = (int)level;
        }
        if (end == NULL)
            break;
        p = end + 1;
        continue;
    bad:
        if (errbuf != NULL)
            snprintf(errbuf, errlen,
                     "bad log spec item '%.*s' (want LEVEL or COMPONENT=LEVEL; levels "
                     "error|warn|info|debug|trace)",
                     (int)len, p);
        return MC_ERR_INVALID_PARAMS;
    }
    for (int c = 0; c < MC_LOGC_COUNT; c++)
        atomic_store(&mc_log_levels[c], levels[c]);
    atomic_store(&levels_explicit, 1);
    return MC_OK;
}

/* Format a log line (no newline) into line[0..cap - 1); its length. */
static size_t format_line(char *line, size_t cap, mc_log_comp_t comp, mc_log_level_t level,
                          const char *fmt, va_list ap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, cap, "%04d-%02d-%02d %02d:%02d:%02d.%06ld %c [%s] (%s) ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000, level_letters[level <= MC_LOG_TRACE ? level : 0],
                     mc_log_comp_name(comp), thread_name);
    int m = vsnprintf(line + n, cap - (size_t)n - 1, fmt, ap);
    if (m < 0)
        return (size_t)n;
    if ((size_t)m >= cap - (size_t)n - 1) {
        /* truncated: mark it so nobody mistakes it for the whole message */
        memcpy(line + cap - 5, "...", 3);
        return cap - 2;
    }
    return (size_t)(n + m);
}

/* A line was lost: count it, and say so once on stderr (unless that is the
 * log) with the cause. */
static void write_failed(int fd, int err)
{
    atomic_fetch_add(&write_errors, 1);
    if (fd == 2 || atomic_exchange(&write_error_reported, 1) != 0)
        return;
    char msg[256];
    int k = snprintf(msg, sizeof(msg),
                     "mooncake: cannot write the log file: %s; log lines are being lost "
                     "(counted in the log write errors; said once)\n",
                     strerror(err));
    if (k > 0 && write(2, msg, (size_t)k) < 0) {
        /* nowhere left to say it */
    }
}

static int probe_line(int fd, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    size_t len = format_line(line, sizeof(line), MC_LOGC_CORE, MC_LOG_INFO, fmt, ap);
    va_end(ap);
    line[len++] = '\n';
    ssize_t w = write(fd, line, len);
    if (w == (ssize_t)len)
        return 0;
    return w < 0 ? errno : ENOSPC;
}

int mc_log_probe(int fd)
{
    return probe_line(fd, "log opened (pid %d)", (int)getpid());
}

uint64_t mc_log_write_errors(void)
{
    return atomic_load(&write_errors);
}

void mc_log_write(mc_log_comp_t comp, mc_log_level_t level, const char *fmt, ...)
{
    char line[2048];
    int saved_errno = errno;
    va_list ap;
    va_start(ap, fmt);
    size_t len = format_line(line, sizeof(line), comp, level, fmt, ap);
    va_end(ap);
    if (atomic_load_explicit(&sink_set, memory_order_relaxed)) {
        pthread_rwlock_rdlock(&sink_lock);
        if (sink_fn != NULL) {
            line[len] = '\0';
            sink_fn(sink_arg, level, mc_log_comp_name(comp), line, len);
            pthread_rwlock_unlock(&sink_lock);
            errno = saved_errno;
            return;
        }
        pthread_rwlock_unlock(&sink_lock);
    }
    line[len++] = '\n';
    int fd = atomic_load(&log_fd);
    ssize_t w = write(fd, line, len);
    if (w != (ssize_t)len)
        write_failed(fd, w < 0 ? errno : ENOSPC); /* a short write lost the rest */
    errno = saved_errno;
}
