/* prom.c - see prom.h. */
#include "util/prom.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "mooncake/version.h"

static void appendf(mc_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void appendf(mc_buf_t *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(line)) {
        mc_buf_append(b, line, (size_t)n);
        return;
    }
    if (mc_buf_reserve(b, (size_t)n + 1) != MC_OK)
        return;
    va_start(ap, fmt);
    vsnprintf((char *)mc_buf_tail(b), (size_t)n + 1, fmt, ap);
    va_end(ap);
    mc_buf_produce(b, (size_t)n);
}

void mc_prom_head(mc_buf_t *b, const char *name, const char *type, const char *help)
{
    appendf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void mc_prom_sample(mc_buf_t *b, const char *name, const char *labels, uint64_t v)
{
    if (labels != NULL && labels[0] != '\0')
        appendf(b, "%s{%s} %" PRIu64 "\n", name, labels, v);
    else
        appendf(b, "%s %" PRIu64 "\n", name, v);
}

void mc_prom_gauge(mc_buf_t *b, const char *name, const char *help, uint64_t v)
{
    mc_prom_head(b, name, "gauge", help);
    mc_prom_sample(b, name, NULL, v);
}

void mc_prom_counter(mc_buf_t *b, const char *name, const char *help, uint64_t v)
{
    mc_prom_head(b, name, "counter", help);
    mc_prom_sample(b, name, NULL, v);
}

void mc_prom_escape(mc_buf_t *b, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' || c == '"')
            appendf(b, "\\%c", c);
        else if (c == '\n')
            appendf(b, "\\n");
        else if (c < 0x20 || c >= 0x7f)
            appendf(b, "\\\\x%02x", c);
        else
            mc_buf_append(b, &c, 1);
    }
}

void mc_prom_sample_l(mc_buf_t *b, const char *name, const char *label, const char *val, size_t len,
                      uint64_t v)
{
    appendf(b, "%s{%s=\"", name, label);
    mc_prom_escape(b, val, len);
    appendf(b, "\"} %" PRIu64 "\n", v);
}

/* upper bounds in microseconds */
static const uint64_t lat_bound_us[MC_PROM_LAT_BUCKETS] = {
    50,    100,   250,    500,    1000,   2500,    5000,    10000,
    25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 10000000,
};

void mc_prom_hist_observe_us(mc_prom_hist_t *h, uint64_t us)
{
    unsigned i = 0;
    while (i < MC_PROM_LAT_BUCKETS && us > lat_bound_us[i])
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

void mc_prom_hist_write(mc_buf_t *b, const char *name, const char *labels, const mc_prom_hist_t *h)
{
    const char *sep = labels != NULL && labels[0] != '\0' ? "," : "";
    if (labels == NULL)
        labels = "";
    uint64_t cum = 0;
    for (unsigned i = 0; i <= MC_PROM_LAT_BUCKETS; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        if (i < MC_PROM_LAT_BUCKETS)
            appendf(b, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, labels, sep,
                    (double)lat_bound_us[i] / 1e6, cum);
        else
            appendf(b, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, cum);
    }
    const char *lo = labels[0] != '\0' ? "{" : "";
    const char *lc = labels[0] != '\0' ? "}" : "";
    appendf(b, "%s_sum%s%s%s %.6f\n", name, lo, labels, lc,
            (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6);
    /* the count is the buckets' total, so that the two always agree */
    appendf(b, "%s_count%s%s%s %" PRIu64 "\n", name, lo, labels, lc, cum);
}

/* /proc/self/stat fields 14-15 (utime, stime, ticks), 22 (starttime, ticks
 * after boot), 23 (vsize), 24 (rss, pages). */
static int read_stat(double *cpu_s, double *start_s, uint64_t *vsize, uint64_t *rss)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (p == NULL)
        return -1;
    unsigned long long ut, st, start, vs;
    long long rs;
    /* after ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime(14) stime cutime cstime priority nice threads
     * itrealvalue starttime(22) vsize rss */
    if (sscanf(p + 1,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
               "%llu %llu %lld",
               &ut, &st, &start, &vs, &rs) != 5)
        return -1;
    double hz = (double)sysconf(_SC_CLK_TCK);
    *cpu_s = (double)(ut + st) / hz;
    /* boot time: now (realtime) - uptime */
    double up = 0;
    f = fopen("/proc/uptime", "r");
    if (f != NULL) {
        if (fscanf(f, "%lf", &up) != 1)
            up = 0;
        fclose(f);
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double boot = (double)now.tv_sec + (double)now.tv_nsec / 1e9 - up;
    *start_s = boot + (double)start / hz;
    *vsize = vs;
    *rss = rs > 0 ? (uint64_t)rs * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
    return 0;
}

static uint64_t open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    uint64_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n > 0 ? n - 1 : 0; /* not the directory's own descriptor */
}

void mc_prom_process(mc_buf_t *b)
{
    double cpu = 0, start = 0;
    uint64_t vsize = 0, rss = 0;
    read_stat(&cpu, &start, &vsize, &rss);
    mc_prom_head(b, "process_cpu_seconds_total", "counter",
                 "Total user and system CPU time spent in seconds.");
    appendf(b, "process_cpu_seconds_total %.2f\n", cpu);
    mc_prom_gauge(b, "process_resident_memory_bytes", "Resident memory size in bytes.", rss);
    mc_prom_gauge(b, "process_virtual_memory_bytes", "Virtual memory size in bytes.", vsize);
    mc_prom_gauge(b, "process_open_fds", "Number of open file descriptors.", open_fds());
    struct rlimit rl;
    uint64_t maxfds = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_cur : 0;
    mc_prom_gauge(b, "process_max_fds", "Maximum number of open file descriptors.", maxfds);
    mc_prom_head(b, "process_start_time_seconds", "gauge",
                 "Start time of the process since unix epoch in seconds.");
    appendf(b, "process_start_time_seconds %.2f\n", start);
}

void mc_prom_build_info(mc_buf_t *b)
{
    mc_prom_head(b, "mooncake_build_info", "gauge",
                 "A metric with a constant '1' value labelled by the mooncake-c version.");
    appendf(b, "mooncake_build_info{version=\"%s\"} 1\n", mc_version());
}

void mc_prom_hist_stages(mc_buf_t *b, const char *name, const char *help, const char *const *names,
                         const mc_prom_hist_t *h, unsigned n)
{
    char lab[64];
    mc_prom_head(b, name, "histogram", help);
    for (unsigned i = 0; i < n; i++) {
        snprintf(lab, sizeof(lab), "stage=\"%s\"", names[i]);
        mc_prom_hist_write(b, name, lab, &h[i]);
    }
}
