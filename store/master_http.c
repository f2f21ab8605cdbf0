/*
 * master_http.c - the master's HTTP port (libevent evhttp on reactor 0):
 *
 *   /metrics          Prometheus text format (upstream's metric names)
 *   /metrics/summary  one human line
 *   /health           "OK"
 *   /segments         JSON array of mounted segments with capacity and use
 *   /keys?regex=RE&limit=N   JSON array of keys (bounded: limit <= 100000); the
 *                     scan runs on the regex worker (master_server_scan.c):
 *                     400 for a regex refused or over its budget, 503 when
 *                     too many scans wait
 *   /get_all_segments, /get_all_keys, /query_key?key=K   upstream's admin
 *                     endpoints, in upstream's formats (text, a line per
 *                     segment / key / memory replica)
 *   /role             "leader", "standby", "failed" or "single" (HA off); HTTP
 *                     200 for the leader and a single master, 503 otherwise,
 *                     so a load balancer's health check finds the leader
 *   /ha_status        JSON: role, leader, view version, lease, journal, lag
 *   /auth             {"nonce": HEX}: a challenge for the endpoints below
 *                     that need authentication (with [security] secret_file;
 *                     mc_http_auth_t of transport/meta_http_srv.h)
 *
 * Authentication (a secret set): /keys, /get_all_keys and /query_key tell
 * keys, and PUT or DELETE /metadata change the metadata, so they need a
 * proof (the segment list, metrics and metadata reads stay open). The
 * client takes a fresh server nonce from GET /auth (valid 30 s, once), picks
 * its own, and sends "X-Mooncake-Auth: SERVER_NONCE.CLIENT_NONCE.PROOF"
 * (hex; PROOF = the client proof of util/auth.h over the two nonces); the
 * answer carries "X-Mooncake-Auth-Server: PROOF" (the server's, over the
 * same nonces) so the client knows whom it talked to. Anything else is 401
 * with the reason. A replayed header finds its nonce used.
 *   /metadata?key=K   upstream's HTTP metadata protocol (GET/PUT/DELETE; see
 *                     transport/meta_http_srv.h) on the embedded metadata KV,
 *                     unless server.http_metadata is off; also on the extra
 *                     port metadata.http_port when set. A standby answers 503
 *                     (X-Mooncake-Leader names the leader when known); with
 *                     ha.sync = strict a PUT or DELETE is answered once
 *                     journaled, like the Meta RPCs. Entries put over HTTP
 *                     have no owner: they stay until deleted (as upstream).
 *                     With a secret, PUT and DELETE need the proof below
 *                     (X-Mooncake-Auth, as /keys); GET stays open
 *
 * Paths other than /metadata answer PUT and DELETE with 405.
 *
 * Requests are served on reactor 0's thread; they read the master through
 * its thread-safe API.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "rpc/methods.h"
#include "rpc/net.h"
#include "store/master_ha.h"
#include "store/master_server_int.h"
#include "transport/meta_http_srv.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/prom.h"
#include "util/time.h"

#define KEYS_DEFAULT_LIMIT 1000
#define KEYS_MAX_LIMIT 100000

/* Prometheus op names of the counted RPCs (upstream's where they exist). */
static const struct {
    uint16_t method;
    const char *op;
    int batch;
} rpc_names[] = {
    {MC_RPC_PUT_START, "put_start", 0},
    {MC_RPC_PUT_END, "put_end", 0},
    {MC_RPC_PUT_REVOKE, "put_revoke", 0},
    {MC_RPC_GET_REPLICA_LIST, "get_replica_list", 0},
    {MC_RPC_GET_REPLICA_LIST_BY_REGEX, "get_replica_list_by_regex", 0},
    {MC_RPC_EXIST_KEY, "exist_key", 0},
    {MC_RPC_REMOVE, "remove", 0},
    {MC_RPC_REMOVE_BY_REGEX, "remove_by_regex", 0},
    {MC_RPC_REMOVE_ALL, "remove_all", 0},
    {MC_RPC_MOUNT_SEGMENT, "mount_segment", 0},
    {MC_RPC_UNMOUNT_SEGMENT, "unmount_segment", 0},
    {MC_RPC_REMOUNT_SEGMENT, "remount_segment", 0},
    {MC_RPC_PING, "ping", 0},
    {MC_RPC_OFFLOAD_LOAD, "offload_load", 0},
    {MC_RPC_OFFLOAD_DONE_BATCH, "offload_done", 1},
    {MC_RPC_BATCH_PUT_START, "put_start", 1},
    {MC_RPC_BATCH_PUT_END, "put_end", 1},
    {MC_RPC_BATCH_PUT_REVOKE, "put_revoke", 1},
    {MC_RPC_BATCH_GET_REPLICA_LIST, "get_replica_list", 1},
    {MC_RPC_LEASE_RELEASE, "lease_release", 1},
    {MC_RPC_BATCH_EXIST_KEY, "exist_key", 1},
    {MC_RPC_BATCH_REMOVE, "remove", 1},
    {MC_RPC_META_GET, "meta_get", 0},
    {MC_RPC_META_PUT, "meta_put", 0},
    {MC_RPC_META_DEL, "meta_del", 0},
    {MC_RPC_META_LIST, "meta_list", 0},
    {MC_RPC_TIER_ADD, "tier_add", 0},
    {MC_RPC_LIST_SEGMENTS, "list_segments", 0}, /* nodes' /metrics, admin tools */
};

static void send_text(struct evhttp_request *req, int code, const char *reason,
                      struct evbuffer *body, const char *ctype)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    evhttp_send_reply(req, code, reason, body);
}

/* Escape a label value or JSON string (quotes, backslashes, control bytes,
 * and non-ASCII bytes as \u00XX so binary keys stay valid text). */
static void add_escaped(struct evbuffer *b, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            evbuffer_add_printf(b, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            evbuffer_add_printf(b, "\\u%04x", c);
        else
            evbuffer_add(b, &c, 1);
    }
}

static int seg_metric(void *arg, const mc_master_segment_info_t *si)
{
    mc_prom_sample_l(arg, "segment_allocated_bytes", "segment", si->name, strlen(si->name),
                     si->used);
    return 0;
}

static int seg_capacity(void *arg, const mc_master_segment_info_t *si)
{
    mc_prom_sample_l(arg, "segment_total_capacity_bytes", "segment", si->name, strlen(si->name),
                     si->size);
    return 0;
}

/* The RPC families: upstream's names (master_<op>_requests_total, ...: one
 * family per method, kept for the dashboards built on them), then the same
 * counts as one labelled family with the latency histograms. */
static void rpc_metrics(master_srv_t *s, mc_buf_t *b)
{
    char name[96], help[160], lab[64];
    for (size_t i = 0; i < sizeof(rpc_names) / sizeof(rpc_names[0]); i++) {
        uint16_t m = rpc_names[i].method;
        const char *pre = rpc_names[i].batch ? "master_batch_" : "master_";
        const char *kind = rpc_names[i].batch ? "Batch " : "";
        snprintf(name, sizeof(name), "%s%s_requests_total", pre, rpc_names[i].op);
        snprintf(help, sizeof(help), "%s%s RPC requests answered.", kind, rpc_names[i].op);
        mc_prom_counter(b, name, help,
                        atomic_load_explicit(&s->req_total[m], memory_order_relaxed));
        snprintf(name, sizeof(name), "%s%s_failures_total", pre, rpc_names[i].op);
        snprintf(help, sizeof(help), "%s%s RPC requests answered with an error.", kind,
                 rpc_names[i].op);
        mc_prom_counter(b, name, help, atomic_load_explicit(&s->req_fail[m], memory_order_relaxed));
    }
    static const struct {
        const char *name, *help;
        int fail;
    } fam[] = {
        {"mooncake_master_rpc_requests_total", "RPC requests answered, by method.", 0},
        {"mooncake_master_rpc_failures_total", "RPC requests answered with an error, by method.",
         1},
    };
    for (size_t f = 0; f < 2; f++) {
        mc_prom_head(b, fam[f].name, "counter", fam[f].help);
        for (size_t i = 0; i < sizeof(rpc_names) / sizeof(rpc_names[0]); i++) {
            uint16_t m = rpc_names[i].method;
            snprintf(lab, sizeof(lab), "method=\"%s%s\"", rpc_names[i].batch ? "batch_" : "",
                     rpc_names[i].op);
            const _Atomic uint64_t *c = fam[f].fail ? &s->req_fail[m] : &s->req_total[m];
            mc_prom_sample(b, fam[f].name, lab, atomic_load_explicit(c, memory_order_relaxed));
        }
    }
    mc_prom_head(b, "mooncake_master_rpc_duration_seconds", "histogram",
                 "Time from a request's arrival to its answer, by method.");
    for (size_t i = 0; i < sizeof(rpc_names) / sizeof(rpc_names[0]); i++) {
        snprintf(lab, sizeof(lab), "method=\"%s%s\"", rpc_names[i].batch ? "batch_" : "",
                 rpc_names[i].op);
        mc_prom_hist_write(b, "mooncake_master_rpc_duration_seconds", lab,
                           &s->req_lat[rpc_names[i].method]);
    }
}

/* Every family with HELP and TYPE (promtool check metrics is clean but for
 * upstream's names in conf/prometheus/lint-allowlist). */
static void on_metrics(struct evhttp_request *req, void *arg)
{
    if (mc_meta_http_read_only(req))
        return;
    master_srv_t *s = arg;
    mc_master_stats_t st;
    mc_master_get_stats(s->m, &st);
    mc_buf_t b = MC_BUF_INIT;
    mc_prom_gauge(&b, "master_key_count", "Objects stored (complete and in progress).",
                  st.key_count);
    mc_prom_gauge(&b, "master_processing_key_count", "Objects whose put has not finished.",
                  st.processing_count);
    mc_prom_gauge(&b, "master_soft_pin_key_count", "Objects put with a soft pin.",
                  st.soft_pinned_count);
    mc_prom_gauge(&b, "master_allocated_bytes", "Bytes allocated to replicas.", st.allocated_bytes);
    mc_prom_gauge(&b, "master_total_capacity_bytes", "Bytes of mounted segments.",
                  st.capacity_bytes);
    mc_prom_gauge(&b, "master_segment_count", "Mounted segments.", st.segment_count);
    mc_prom_gauge(&b, "master_unmounting_segment_count", "Segments draining after an unmount.",
                  st.unmounting_count);
    mc_prom_gauge(&b, "master_active_clients", "Clients that pinged within client_ttl.",
                  st.active_clients);
    mc_prom_gauge(&b, "master_view_version", "View version of this master run.", st.view_version);
    mc_prom_counter(&b, "master_attempted_evictions_total", "Eviction rounds started.",
                    st.eviction_attempts);
    mc_prom_counter(&b, "master_successful_evictions_total", "Eviction rounds that freed space.",
                    st.eviction_successes);
    mc_prom_counter(&b, "master_evicted_key_count", "Objects evicted.", st.evicted_keys);
    mc_prom_counter(&b, "master_evicted_size_bytes", "Bytes evicted.", st.evicted_bytes);
    mc_prom_counter(&b, "master_put_start_discard_cnt", "Unfinished puts discarded.",
                    st.put_start_discards);
    mc_prom_counter(&b, "master_put_start_release_cnt", "Reserved spaces of discarded puts freed.",
                    st.put_start_releases);

    mc_prom_head(&b, "master_value_size_bytes", "histogram", "Sizes of values put.");
    uint64_t cum = 0;
    char lab[48];
    for (unsigned i = 0; i < MC_MASTER_VALUE_BUCKETS; i++) {
        cum += st.value_size_buckets[i];
        if (i + 1 < MC_MASTER_VALUE_BUCKETS)
            snprintf(lab, sizeof(lab), "le=\"%" PRIu64 "\"", mc_master_value_bucket_bound(i));
        else
            snprintf(lab, sizeof(lab), "le=\"+Inf\"");
        mc_prom_sample(&b, "master_value_size_bytes_bucket", lab, cum);
    }
    mc_prom_sample(&b, "master_value_size_bytes_sum", NULL, st.value_size_sum);
    mc_prom_sample(&b, "master_value_size_bytes_count", NULL, cum);

    mc_prom_head(&b, "segment_allocated_bytes", "gauge", "Bytes allocated in a segment.");
    mc_master_foreach_segment(s->m, seg_metric, &b);
    mc_prom_head(&b, "segment_total_capacity_bytes", "gauge", "Bytes of a segment.");
    mc_master_foreach_segment(s->m, seg_capacity, &b);
    master_tier_metrics(s, &b);
    master_offload_metrics(s, &b);
    rpc_metrics(s, &b);

    mc_rpc_server_stats_t rs;
    mc_rpc_server_stats(s->rpc, &rs);
    mc_prom_counter(&b, "master_rpc_connections_total", "RPC connections accepted.",
                    rs.conns_accepted);
    mc_prom_counter(&b, "master_rpc_protocol_errors_total",
                    "RPC connections closed for a protocol error.", rs.conns_closed_protocol);
    mc_prom_counter(&b, "master_rpc_requests_total", "RPC requests received.", rs.requests);
    mc_prom_gauge(&b, "master_rpc_connections_open", "RPC connections open.", rs.conns_open);
    mc_prom_counter(&b, "master_rpc_connections_refused_total",
                    "RPC connections closed at accept (server.max_clients, no descriptor left).",
                    rs.conns_refused);
    mc_prom_counter(&b, "master_rpc_accept_errors_total",
                    "accept(2) failures (EMFILE, ENFILE, ...).", rs.accept_errors);
    mc_prom_counter(&b, "master_rpc_connections_closed_input_total",
                    "RPC connections closed for server.max_client_input or max_input_total.",
                    rs.conns_closed_inbuf);
    mc_prom_counter(&b, "master_rpc_connections_closed_idle_total",
                    "RPC connections closed for server.first_frame_timeout.", rs.conns_closed_idle);
    mc_prom_gauge(&b, "master_rpc_input_buffer_bytes", "Bytes the RPC connections hold buffered.",
                  rs.inbuf_bytes);
    mc_prom_counter(&b, "master_log_write_errors_total",
                    "Log lines lost to failed writes (log.file).", mc_log_write_errors());
    uint64_t scans, over, refused;
    master_scan_stats(s, &scans, &over, &refused);
    mc_prom_counter(&b, "master_regex_scans_total", "Regex scans run (by-regex RPCs, /keys).",
                    scans);
    mc_prom_counter(&b, "master_regex_scans_over_budget_total",
                    "Regex scans stopped by a regex limit or server.regex_timeout.", over);
    mc_prom_counter(&b, "master_regex_scans_refused_total",
                    "Regex scans refused because server.regex_queue were waiting.", refused);
    master_ha_metrics(s, &b);
    mc_prom_process(&b);
    mc_prom_build_info(&b);

    struct evbuffer *out = evbuffer_new();
    if (out == NULL || evbuffer_add(out, mc_buf_head(&b), mc_buf_used(&b)) != 0)
        evhttp_send_error(req, 500, "out of memory");
    else
        send_text(req, 200, "OK", out, "text/plain; version=0.0.4");
    if (out != NULL)
        evbuffer_free(out);
    mc_buf_fini(&b);
}

static void on_summary(struct evhttp_request *req, void *arg)
{
    if (mc_meta_http_read_only(req))
        return;
    master_srv_t *s = arg;
    mc_master_stats_t st;
    mc_master_get_stats(s->m, &st);
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    double used =
        st.capacity_bytes ? 100.0 * (double)st.allocated_bytes / (double)st.capacity_bytes : 0.0;
    evbuffer_add_printf(b,
                        "keys=%" PRIu64 " (in progress %" PRIu64 ", soft-pinned %" PRIu64
                        ") storage=%" PRIu64 "/%" PRIu64 " bytes (%.1f%%) segments=%" PRIu64
                        " clients=%" PRIu64 " evicted=%" PRIu64 " keys/%" PRIu64
                        " bytes uptime=%" PRIu64 "s\n",
                        st.key_count, st.processing_count, st.soft_pinned_count, st.allocated_bytes,
                        st.capacity_bytes, used, st.segment_count, st.active_clients,
                        st.evicted_keys, st.evicted_bytes, (mc_now_us() - s->started_us) / 1000000);
    send_text(req, 200, "OK", b, "text/plain");
    evbuffer_free(b);
}

static void on_role(struct evhttp_request *req, void *arg)
{
    if (mc_meta_http_read_only(req))
        return;
    master_srv_t *s = arg;
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    int r = s->ha != NULL ? atomic_load(&s->role) : MC_HA_ROLE_NONE;
    int serving = master_ha_serving(s, mc_now_us());
    evbuffer_add_printf(b, "%s\n", mc_ha_role_name((mc_ha_role_t)r));
    send_text(req, serving ? 200 : 503, serving ? "OK" : "Not the leader", b, "text/plain");
    evbuffer_free(b);
}

static void on_ha_status(struct evhttp_request *req, void *arg)
{
    if (mc_meta_http_read_only(req))
        return;
    master_srv_t *s = arg;
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    mc_buf_t hb = MC_BUF_INIT;
    master_ha_status_json(s, &hb);
    evbuffer_add(b, mc_buf_head(&hb), mc_buf_used(&hb));
    mc_buf_fini(&hb);
    send_text(req, 200, "OK", b, "application/json");
    evbuffer_free(b);
}

static void on_health(struct evhttp_request *req, void *arg)
{
    if (mc_meta_http_read_only(req))
        return;
    (void)arg;
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    evbuffer_add_printf(b, "OK\n");
    send_text(req, 200, "OK", b, "text/plain");
    evbuffer_free(b);
}

typedef struct json_ctx {
    struct evbuffer *b;
    size_t n;
} json_ctx_t;

static void add_uuid(struct evbuffer *b, mc_uuid_t id)
{
    evbuffer_add_printf(b, "\"%016" PRIx64 "%016" PRIx64 "\"", id.hi, id.lo);
}

static int seg_json(void *arg, const mc_master_segment_info_t *si)
{
    json_ctx_t *j = arg;
    struct evbuffer *b = j->b;
    evbuffer_add_printf(b, "%s\n  {\"name\": \"", j->n++ ? "," : "");
    add_escaped(b, si->name, strlen(si->name));
    evbuffer_add_printf(b, "\", \"id\": ");
    add_uuid(b, si->id);
    evbuffer_add_printf(b, ", \"client\": ");
    add_uuid(b, si->owner);
    evbuffer_add_printf(b, ", \"te_endpoint\": \"");
    add_escaped(b, si->te_endpoint, strlen(si->te_endpoint));
    evbuffer_add_printf(b,
                        "\", \"base\": %" PRIu64 ", \"capacity\": %" PRIu64 ", \"used\": %" PRIu64
                        ", \"allocations\": %u, \"state\": \"%s\"}",
                        si->base, si->size, si->used, si->allocs,
                        si->unmounting ? "UNMOUNTING" : "MOUNTED");
    return 0;
}

static void on_segments(struct evhttp_request *req, void *arg)
{
    if (mc_meta_http_read_only(req))
        return;
    master_srv_t *s = arg;
    json_ctx_t j = {.b = evbuffer_new()};
    if (j.b == NULL) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    evbuffer_add_printf(j.b, "[");
    mc_master_foreach_segment(s->m, seg_json, &j);
    evbuffer_add_printf(j.b, "%s]\n", j.n ? "\n" : "");
    send_text(req, 200, "OK", j.b, "application/json");
    evbuffer_free(j.b);
}

/* /keys rows, encoded on the scan worker into a plain buffer. */
typedef struct keys_out {
    mc_buf_t *b;
    size_t n;
    uint64_t now;
    mc_status_t err;
} keys_out_t;

static void out_str(keys_out_t *o, const char *p, size_t n)
{
    if (o->err == MC_OK)
        o->err = mc_buf_append(o->b, p, n);
}

static void out_fmt(keys_out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_fmt(keys_out_t *o, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        out_str(o, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* JSON string content, escaped as add_escaped does. */
static void out_escaped(keys_out_t *o, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            out_fmt(o, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            out_fmt(o, "\\u%04x", c);
        else
            out_str(o, (const char *)&c, 1);
    }
}

static int key_json(void *arg, const mc_master_key_info_t *ki)
{
    keys_out_t *o = arg;
    out_fmt(o, "%s\n  {\"key\": \"", o->n++ ? "," : "");
    out_escaped(o, ki->key, ki->key_len);
    out_fmt(o,
            "\", \"size\": %" PRIu64 ", \"replicas\": %u, \"disk\": %s"
            ", \"complete\": %s, \"lease_ms_left\": %" PRIu64 "}",
            ki->size, ki->nrep, ki->disk ? "true" : "false", ki->complete ? "true" : "false",
            ki->lease_until_us > o->now ? (ki->lease_until_us - o->now) / 1000 : 0);
    return 0;
}

/* Phase 2 of /keys on the scan worker: the JSON array into j->out. */
static mc_status_t act_keys(scan_job_t *j)
{
    keys_out_t o = {.b = &j->out, .now = mc_now_us()};
    out_str(&o, "[", 1);
    mc_status_t st = mc_master_scan_keys(j->s->m, j->sc, key_json, &o, NULL);
    out_fmt(&o, "%s]\n", o.n ? "\n" : "");
    return st != MC_OK ? st : o.err;
}

/* On reactor 0: answer the request (a client that went away meanwhile is
 * handled by libevent: the reply then only frees the request). */
static void done_keys(scan_job_t *j)
{
    struct evhttp_request *req = j->req;
    if (j->st == MC_OK) {
        struct evbuffer *b = evbuffer_new();
        if (b == NULL || evbuffer_add(b, mc_buf_head(&j->out), mc_buf_used(&j->out)) != 0) {
            evhttp_send_error(req, 500, "out of memory");
        } else {
            send_text(req, 200, "OK", b, "application/json");
        }
        if (b != NULL)
            evbuffer_free(b);
    } else {
        int code = j->st == MC_ERR_INVALID_PARAMS ? 400 : j->st == MC_ERR_LIMIT ? 503 : 500;
        evhttp_send_error(req, code, j->why[0] ? j->why : mc_status_str(j->st));
    }
    scan_job_free(j);
}

/* With a key: the request's X-Mooncake-Auth proves the secret over a live
 * challenge of GET /auth (transport/meta_http_srv.h). 1 when admitted;
 * otherwise 401 was sent. */
static int http_admit(master_srv_t *s, struct evhttp_request *req)
{
    return mc_http_auth_admit(s->auth, req);
}

static void on_keys(struct evhttp_request *req, void *arg)
{
    if (mc_meta_http_read_only(req))
        return;
    master_srv_t *s = arg;
    if (!http_admit(s, req))
        return;
    struct evkeyvalq q;
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    q.tqh_first = NULL; /* TAILQ_INIT, without <sys/queue.h> */
    q.tqh_last = &q.tqh_first;
    if (query != NULL && evhttp_parse_query_str(query, &q) != 0) {
        evhttp_send_error(req, 400, "malformed query string");
        return;
    }
    const char *re = evhttp_find_header(&q, "regex");
    const char *lim = evhttp_find_header(&q, "limit");
    size_t limit = KEYS_DEFAULT_LIMIT;
    if (lim != NULL) {
        char *end = NULL;
        unsigned long v = strtoul(lim, &end, 10);
        if (end == lim || *end != '\0' || v == 0 || v > KEYS_MAX_LIMIT) {
            evhttp_clear_headers(&q);
            evhttp_send_error(req, 400, "limit must be 1..100000");
            return;
        }
        limit = v;
    }
    char why[256];
    mc_master_scan_t *sc = NULL;
    mc_status_t st = mc_master_scan_create(s->m, MC_MASTER_SCAN_KEYS, re, re ? strlen(re) : 0, 0,
                                           limit, &sc, why, sizeof(why));
    evhttp_clear_headers(&q);
    if (st != MC_OK) {
        evhttp_send_error(req, st == MC_ERR_INVALID_PARAMS ? 400 : 500,
                          why[0] ? why : mc_status_str(st));
        return;
    }
    scan_job_t *j = scan_job_new(s, sc, mc_reactor_group_get(s->g, 0));
    if (j == NULL) {
        mc_master_scan_destroy(sc);
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    j->act = act_keys;
    j->done = done_keys;
    j->req = req;
    st = master_scan_submit(s, j, why, sizeof(why));
    if (st != MC_OK) {
        scan_job_free(j);
        evhttp_send_error(req, st == MC_ERR_LIMIT ? 503 : 500, why);
    }
}

/* ------------------------------------------- upstream's admin endpoints */

/* Upstream answers these on a standby with 503 "service plane is not
 * active"; so do we. 1 when answered. */
static int admin_standby(master_srv_t *s, struct evhttp_request *req)
{
    if (master_ha_serving(s, mc_now_us()))
        return 0;
    struct evbuffer *b = evbuffer_new();
    if (b != NULL)
        evbuffer_add_printf(b, "service plane is not active");
    send_text(req, 503, "Service Unavailable", b, "text/plain");
    if (b != NULL)
        evbuffer_free(b);
    return 1;
}

static int seg_name_line(void *arg, const mc_master_segment_info_t *si)
{
    if (!si->unmounting)
        evbuffer_add_printf(arg, "%s\n", si->name);
    return 0;
}

/* /get_all_segments: the mounted segments' names, one per line (what
 * SGLang polls). */
static void on_get_all_segments(struct evhttp_request *req, void *arg)
{
    master_srv_t *s = arg;
    if (mc_meta_http_read_only(req) || admin_standby(s, req))
        return;
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    mc_master_foreach_segment(s->m, seg_name_line, b);
    send_text(req, 200, "OK", b, "text/plain; version=0.0.4");
    evbuffer_free(b);
}

static int key_line(void *arg, const mc_master_key_info_t *ki)
{
    keys_out_t *o = arg;
    out_str(o, ki->key, ki->key_len);
    out_str(o, "\n", 1);
    return o->err != MC_OK;
}

static mc_status_t act_all_keys(scan_job_t *j)
{
    keys_out_t o = {.b = &j->out};
    mc_status_t st = mc_master_scan_keys(j->s->m, j->sc, key_line, &o, NULL);
    return st != MC_OK ? st : o.err;
}

static void done_text(scan_job_t *j)
{
    struct evhttp_request *req = j->req;
    struct evbuffer *b = evbuffer_new();
    if (j->st != MC_OK || b == NULL ||
        evbuffer_add(b, mc_buf_head(&j->out), mc_buf_used(&j->out)) != 0) {
        evhttp_send_error(req, j->st == MC_ERR_LIMIT ? 503 : 500, "Failed to get all keys");
    } else {
        send_text(req, 200, "OK", b, "text/plain; version=0.0.4");
    }
    if (b != NULL)
        evbuffer_free(b);
    scan_job_free(j);
}

/* /get_all_keys: every object's key, one per line, raw bytes as upstream
 * (a key with a newline in it spans two lines). On the scan worker, like
 * /keys. */
static void on_get_all_keys(struct evhttp_request *req, void *arg)
{
    master_srv_t *s = arg;
    if (mc_meta_http_read_only(req) || admin_standby(s, req) || !http_admit(s, req))
        return;
    char why[256];
    mc_master_scan_t *sc = NULL;
    mc_status_t st =
        mc_master_scan_create(s->m, MC_MASTER_SCAN_KEYS, NULL, 0, 0, 0, &sc, why, sizeof(why));
    scan_job_t *j = st == MC_OK ? scan_job_new(s, sc, mc_reactor_group_get(s->g, 0)) : NULL;
    if (j == NULL) {
        mc_master_scan_destroy(sc);
        evhttp_send_error(req, 500, "Failed to get all keys");
        return;
    }
    j->act = act_all_keys;
    j->done = done_text;
    j->req = req;
    st = master_scan_submit(s, j, why, sizeof(why));
    if (st != MC_OK) {
        scan_job_free(j);
        evhttp_send_error(req, st == MC_ERR_LIMIT ? 503 : 500, why);
    }
}

/* /query_key?key=K: one line of JSON per memory replica, upstream's
 * AllocatedBuffer::Descriptor ({"size_", "buffer_address_",
 * "transport_endpoint_"}); 404 and the error's name when there is no such
 * object. Unlike upstream it grants no lease (looking must not keep an
 * object from eviction). */
static void on_query_key(struct evhttp_request *req, void *arg)
{
    master_srv_t *s = arg;
    if (mc_meta_http_read_only(req) || admin_standby(s, req) || !http_admit(s, req))
        return;
    struct evkeyvalq q;
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    q.tqh_first = NULL; /* TAILQ_INIT, without <sys/queue.h> */
    q.tqh_last = &q.tqh_first;
    if (query != NULL && evhttp_parse_query_str(query, &q) != 0) {
        evhttp_send_error(req, 400, "malformed query string");
        return;
    }
    const char *key = evhttp_find_header(&q, "key");
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS + 1];
    uint32_t n = 0;
    mc_master_key_info_t ki;
    mc_status_t st = key != NULL ? mc_master_query_key(s->m, key, strlen(key), d,
                                                       MC_MASTER_MAX_REPLICAS + 1, &n, &ki)
                                 : MC_ERR_INVALID_KEY;
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_clear_headers(&q);
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    if (st != MC_OK) {
        evbuffer_add_printf(b, "%s", mc_status_str(st));
        send_text(req, 404, "Not Found", b, "text/plain; version=0.0.4");
    } else {
        for (uint32_t i = 0; i < n; i++) {
            if (d[i].kind != MC_MASTER_REPLICA_MEMORY)
                continue;
            evbuffer_add_printf(b,
                                "{\"size_\":%" PRIu64 ",\"buffer_address_\":%" PRIu64
                                ",\"transport_endpoint_\":\"",
                                d[i].size, d[i].address);
            add_escaped(b, d[i].te_endpoint, strlen(d[i].te_endpoint));
            evbuffer_add_printf(b, "\"}\n");
        }
        send_text(req, 200, "OK", b, "text/plain; version=0.0.4");
    }
    evbuffer_free(b);
    evhttp_clear_headers(&q);
}

/* ------------------------------------------------------------ /metadata */

static int meta_admit(void *ctx, struct evhttp_request *req)
{
    master_srv_t *s = ctx;
    if (master_ha_serving(s, mc_now_us()))
        return 0;
    char leader[300];
    master_ha_leader(s, leader, sizeof(leader));
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    if (leader[0] != '\0')
        evhttp_add_header(h, "X-Mooncake-Leader", leader);
    struct evbuffer *b = evbuffer_new();
    if (b != NULL)
        evbuffer_add_printf(b, "not the leader%s%s", leader[0] ? ": " : "", leader);
    evhttp_send_reply(req, 503, "Service Unavailable", b);
    if (b != NULL)
        evbuffer_free(b);
    return 1;
}

static mc_status_t meta_get(void *ctx, const char *key, size_t klen, void **val, size_t *len)
{
    master_srv_t *s = ctx;
    return mc_master_meta_get(s->m, key, klen, val, len);
}

static mc_status_t meta_put(void *ctx, const char *key, size_t klen, const void *val, size_t len)
{
    master_srv_t *s = ctx;
    /* upstream's protocol has no owner: the entry stays until deleted */
    return mc_master_meta_put_unowned(s->m, key, klen, val, len, mc_now_us());
}

static mc_status_t meta_del(void *ctx, const char *key, size_t klen)
{
    master_srv_t *s = ctx;
    mc_uuid_t none = {0, 0}; /* unowned entries only: an owner's are its own */
    return mc_master_meta_del(s->m, key, klen, none);
}

static mc_status_t meta_list(void *ctx, const char *prefix, size_t plen,
                             int (*fn)(void *, const char *, size_t, const void *, size_t),
                             void *arg)
{
    master_srv_t *s = ctx;
    return mc_master_meta_list(s->m, prefix, plen, fn, arg, NULL);
}

/* A PUT or DELETE changed the KV: with strict HA the answer waits for its
 * journal record, like reply_durable does for the Meta RPCs. */
static void meta_reply_change(void *ctx, struct evhttp_request *req, int code, const char *reason,
                              struct evbuffer *body)
{
    master_srv_t *s = ctx;
    uint64_t seq = 0;
    if (!master_ha_must_wait(s, &seq)) {
        evhttp_send_reply(req, code, reason, body);
        return;
    }
    size_t len = evbuffer_get_length(body);
    waiter_t *wt = mc_malloc(sizeof(*wt) + len);
    if (wt == NULL) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    memset(wt, 0, sizeof(*wt));
    wt->hreq = req;
    wt->hcode = code;
    wt->seq = seq;
    wt->len = len;
    evbuffer_copyout(body, wt->body, len);
    scratch_t *sc = &s->scratch[0]; /* the HTTP server runs on reactor 0 */
    mc_list_push_tail(&sc->waiters, &wt->node);
    atomic_fetch_add(&sc->nwaiters, 1);
    master_ha_kick(s);
}

void master_http_held_reply(waiter_t *wt, int durable)
{
    struct evbuffer *b = evbuffer_new();
    if (b != NULL) {
        if (durable)
            evbuffer_add(b, wt->body, wt->len);
        else
            evbuffer_add_printf(b, "not the leader any more: the change may be lost");
    }
    evhttp_send_reply(wt->hreq, durable ? wt->hcode : 503, durable ? "OK" : "Service Unavailable",
                      b);
    if (b != NULL)
        evbuffer_free(b);
}

typedef struct http_start {
    master_srv_t *s;
    mc_status_t st;
} http_start_t;

static void http_start_on_reactor(void *arg)
{
    http_start_t *hs = arg;
    master_srv_t *s = hs->s;
    struct event_base *base = mc_reactor_base(mc_reactor_group_get(s->g, 0));
    s->http = evhttp_new(base);
    if (s->http == NULL) {
        hs->st = MC_ERR_NOMEM;
        return;
    }
    evhttp_set_allowed_methods(s->http, s->opts.http_metadata ? mc_meta_http_methods()
                                                              : EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_max_headers_size(s->http, 16384);
    /* bodies: /metadata values (the KV's own cap refuses longer ones) */
    evhttp_set_max_body_size(
        s->http, s->opts.http_metadata ? (ev_ssize_t)s->opts.master.meta_max_value_len + 1 : 4096);
    evhttp_set_timeout(s->http, 30);
    evhttp_set_cb(s->http, "/metrics", on_metrics, s);
    evhttp_set_cb(s->http, "/metrics/summary", on_summary, s);
    evhttp_set_cb(s->http, "/health", on_health, s);
    evhttp_set_cb(s->http, "/segments", on_segments, s);
    evhttp_set_cb(s->http, "/keys", on_keys, s);
    if (s->auth != NULL)
        evhttp_set_cb(s->http, "/auth", mc_http_auth_serve, s->auth);
    evhttp_set_cb(s->http, "/get_all_segments", on_get_all_segments, s);
    evhttp_set_cb(s->http, "/get_all_keys", on_get_all_keys, s);
    evhttp_set_cb(s->http, "/query_key", on_query_key, s);
    evhttp_set_cb(s->http, "/role", on_role, s);
    evhttp_set_cb(s->http, "/ha_status", on_ha_status, s);
    if (s->opts.http_metadata)
        evhttp_set_cb(s->http, "/metadata", mc_meta_http_serve, s->hstore);
    struct evhttp_bound_socket *bs =
        evhttp_bind_socket_with_handle(s->http, s->bind_address, s->opts.http_port);
    if (bs == NULL) {
        MC_ERROR(HTTP, "cannot listen for HTTP on %s:%u (address in use?)", s->bind_address,
                 s->opts.http_port);
        goto err_free;
    }
    s->http_port = mc_net_local_port(evhttp_bound_socket_get_fd(bs));
    if (s->opts.http_metadata && s->opts.http_metadata_port != 0) {
        bs = evhttp_bind_socket_with_handle(s->http, s->bind_address, s->opts.http_metadata_port);
        if (bs == NULL) {
            MC_ERROR(HTTP, "cannot listen for HTTP metadata on %s:%u (address in use?)",
                     s->bind_address, s->opts.http_metadata_port);
            goto err_free;
        }
        s->http_meta_port = mc_net_local_port(evhttp_bound_socket_get_fd(bs));
    }
    hs->st = MC_OK;
    return;

err_free:
    evhttp_free(s->http);
    s->http = NULL;
    hs->st = MC_ERR_SOCKET;
}

static void master_http_free(master_srv_t *s)
{
    if (s->hstore != NULL)
        mc_free((char *)s->hstore->token);
    mc_free(s->hstore);
    s->hstore = NULL;
    mc_http_auth_destroy(s->auth);
    s->auth = NULL;
}

static void http_stop_on_reactor(void *arg)
{
    master_srv_t *s = arg;
    /* held /metadata answers go out (503) before their requests are freed */
    scratch_t *sc = &s->scratch[0];
    mc_list_t *n = sc->waiters.next;
    while (n != &sc->waiters) {
        mc_list_t *next = n->next;
        waiter_t *wt = MC_CONTAINER_OF(n, waiter_t, node);
        if (wt->hreq != NULL) {
            mc_list_del(n);
            atomic_fetch_sub(&sc->nwaiters, 1);
            master_http_held_reply(wt, 0);
            mc_free(wt);
        }
        n = next;
    }
    if (s->http != NULL)
        evhttp_free(s->http);
    s->http = NULL;
}

mc_status_t master_http_start(master_srv_t *s)
{
    http_start_t hs = {.s = s, .st = MC_ERR_CANCELED};
    s->started_us = mc_now_us();
    if (s->has_key && (s->auth = mc_http_auth_create(&s->key)) == NULL)
        return MC_ERR_NOMEM;
    if (s->opts.http_metadata) {
        mc_meta_http_store_t *hst = MC_NEW(mc_meta_http_store_t);
        char *tok =
            mc_strdup(s->opts.http_metadata_token != NULL ? s->opts.http_metadata_token : "");
        if (hst == NULL || tok == NULL) {
            mc_free(hst);
            mc_free(tok);
            master_http_free(s);
            return MC_ERR_NOMEM;
        }
        hst->ctx = s;
        hst->admit = meta_admit;
        hst->get = meta_get;
        hst->put = meta_put;
        hst->del = meta_del;
        hst->list = meta_list;
        hst->reply_change = meta_reply_change;
        hst->token = tok;
        hst->auth = s->auth; /* PUT and DELETE need the proof */
        hst->instance = mc_meta_http_instance_id();
        s->hstore = hst;
    }
    mc_rpc_run_on(mc_reactor_group_get(s->g, 0), http_start_on_reactor, &hs);
    if (hs.st != MC_OK)
        master_http_free(s);
    return hs.st;
}

void master_http_stop(master_srv_t *s)
{
    if (s->http != NULL)
        mc_rpc_run_on(mc_reactor_group_get(s->g, 0), http_stop_on_reactor, s);
    master_http_free(s);
}
