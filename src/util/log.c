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

void mc_log_write(mc_log_comp_t comp, mc_log_level_t level, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    int saved_errno = errno;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02d %02d:%02d:%02d.%06ld %c [%s] (%s) ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000, level_letters[level <= MC_LOG_TRACE ? level : 0],
                     mc_log_comp_name(comp), thread_name);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
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
    ssize_t w = write(atomic_load(&log_fd), line, len);
    (void)w; /* nowhere left to report a failed log write */
    errno = saved_errno;
}
