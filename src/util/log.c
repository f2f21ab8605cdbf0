/* log.c - see log.h. */
#include "util/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
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
 * reported on stderr: once per log file, since stderr may be all that is
 * left to say it */
static _Atomic uint64_t write_errors;
static atomic_int write_error_reported;
static _Thread_local char thread_name[16] = "main";

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
    atomic_store(&log_fd, fd);
    atomic_store(&write_error_reported, 0); /* a new file: its first failure is news */
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
    return MC_OK;
}

/* Format one line and write it to fd; the errno of a failed or short write,
 * else 0. */
static int log_vline(int fd, mc_log_comp_t comp, mc_log_level_t level, const char *fmt, va_list ap)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02d %02d:%02d:%02d.%06ld %c [%s] (%s) ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000, level_letters[level <= MC_LOG_TRACE ? level : 0],
                     mc_log_comp_name(comp), thread_name);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    size_t len;
    if (m < 0) {
        len = (size_t)n;
    } else if ((size_t)m >= sizeof(line) - (size_t)n - 1) {
        /* truncated: mark it so nobody mistakes it for the whole message */
        len = sizeof(line) - 5;
        memcpy(line + len, "...", 3);
        len += 3;
    } else {
        len = (size_t)(n + m);
    }
    line[len++] = '\n';
    ssize_t w = write(fd, line, len);
    if (w == (ssize_t)len)
        return 0;
    return w < 0 ? errno : ENOSPC; /* a short write lost the rest of the line */
}

void mc_log_write(mc_log_comp_t comp, mc_log_level_t level, const char *fmt, ...)
{
    int saved_errno = errno;
    int fd = atomic_load(&log_fd);
    va_list ap;
    va_start(ap, fmt);
    int err = log_vline(fd, comp, level, fmt, ap);
    va_end(ap);
    if (err != 0) {
        atomic_fetch_add(&write_errors, 1);
        /* said once on stderr (unless stderr is the log), then only counted */
        if (fd != 2 && atomic_exchange(&write_error_reported, 1) == 0) {
            char msg[256];
            int k = snprintf(msg, sizeof(msg),
                             "mooncake: cannot write the log file: %s; log lines are being lost "
                             "(counted in the log write errors; said once)\n",
                             strerror(err));
            if (k > 0 && write(2, msg, (size_t)k) < 0) {
                /* nowhere left to say it */
            }
        }
    }
    errno = saved_errno;
}

/* A line through log_vline with its arguments packed as a va_list. */
static int log_line(int fd, mc_log_comp_t comp, mc_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int err = log_vline(fd, comp, level, fmt, ap);
    va_end(ap);
    return err;
}

int mc_log_probe(void)
{
    return log_line(atomic_load(&log_fd), MC_LOGC_CORE, MC_LOG_INFO, "log opened (pid %d)",
                    (int)getpid());
}

uint64_t mc_log_write_errors(void)
{
    return atomic_load(&write_errors);
}
