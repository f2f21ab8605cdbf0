/*
 * prom.h - Prometheus text exposition (format 0.0.4) into an mc_buf_t, for
 * the daemons' /metrics: every family gets HELP and TYPE, counters end in
 * _total (except upstream's names kept for dashboards: conf/prometheus/
 * lint-allowlist), latencies are histograms in seconds.
 *
 * A histogram (mc_prom_hist_t) is lock-free: observe from any thread, write
 * from the HTTP thread (a scrape may see a sum a few observations ahead of
 * its buckets, as every lock-free exporter).
 */
#ifndef MC_UTIL_PROM_H
#define MC_UTIL_PROM_H

#include <stdatomic.h>
#include <stdint.h>

#include "util/buf.h"

/* One family header: "# HELP name help" and "# TYPE name type". */
void mc_prom_head(mc_buf_t *b, const char *name, const char *type, const char *help);

/* A family of one unlabelled sample. */
void mc_prom_gauge(mc_buf_t *b, const char *name, const char *help, uint64_t v);
void mc_prom_counter(mc_buf_t *b, const char *name, const char *help, uint64_t v);

/* One sample line: name{labels} v (labels without braces, "" for none; label
 * values are the caller's, already escaped: mc_prom_escape). */
void mc_prom_sample(mc_buf_t *b, const char *name, const char *labels, uint64_t v);

/* One sample with one label whose value (len bytes) is escaped here:
 * name{label="val"} v. */
void mc_prom_sample_l(mc_buf_t *b, const char *name, const char *label, const char *val, size_t len,
                      uint64_t v);

/* Append s (len bytes) escaped for a label value: backslash, quote, newline;
 * other control and non-ASCII bytes as \xHH so the text stays valid UTF-8. */
void mc_prom_escape(mc_buf_t *b, const char *s, size_t len);

/* Latency buckets: 50us .. 10s (upper bounds, seconds), then +Inf. */
#define MC_PROM_LAT_BUCKETS 16

typedef struct mc_prom_hist {
    _Atomic uint64_t bucket[MC_PROM_LAT_BUCKETS + 1]; /* not cumulative; last = +Inf */
    _Atomic uint64_t sum_us;
    _Atomic uint64_t count;
} mc_prom_hist_t;

void mc_prom_hist_observe_us(mc_prom_hist_t *h, uint64_t us);

/* The samples of one histogram series (the family's head written by the
 * caller once): name_bucket{labels,le=...}, name_sum, name_count. */
void mc_prom_hist_write(mc_buf_t *b, const char *name, const char *labels, const mc_prom_hist_t *h);

/* A histogram family with one series per stage (label stage="names[i]"):
 * its head, then h[i] for each of the n stages. */
void mc_prom_hist_stages(mc_buf_t *b, const char *name, const char *help, const char *const *names,
                         const mc_prom_hist_t *h, unsigned n);

/* process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds,
 * process_start_time_seconds (from /proc/self), as Prometheus' client
 * libraries name them; and mooncake_build_info{version="..."} 1. */
void mc_prom_process(mc_buf_t *b);
void mc_prom_build_info(mc_buf_t *b);

#endif /* MC_UTIL_PROM_H */
