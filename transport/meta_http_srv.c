/* meta_http_srv.c - upstream's HTTP metadata protocol, server side (see
 * meta_http_srv.h). */
#include "transport/meta_http_srv.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "reactor/reactor.h"
#include "rpc/msgpack.h"
#include "rpc/net.h"
#include "rpc/rpc.h"
#include "util/auth.h"
#include "util/buf.h"
#include "util/hash.h"
#include "util/hmap.h"
#include "util/list.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

uint16_t mc_meta_http_methods(void)
{
    return EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_POST;
}

uint64_t mc_meta_http_instance_id(void)
{
    uint64_t seed[2] = {mc_now_us(), (uint64_t)getpid()};
    uint64_t id = mc_hash64(seed, sizeof(seed));
    return id != 0 ? id : 1;
}

/* Answer with a short text body (upstream sends its texts as
 * application/json too). */
static void reply_text(const mc_meta_http_store_t *st, struct evhttp_request *req, int code,
                       const char *reason, const char *text, int change)
{
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    evbuffer_add(b, text, strlen(text));
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "application/json");
    if (change && st->reply_change != NULL)
        st->reply_change(st->ctx, req, code, reason, b);
    else
        evhttp_send_reply(req, code, reason, b);
    evbuffer_free(b);
}

int mc_meta_http_read_only(struct evhttp_request *req)
{
    enum evhttp_cmd_type c = evhttp_request_get_command(req);
    if (c == EVHTTP_REQ_GET || c == EVHTTP_REQ_HEAD)
        return 0;
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
    evhttp_send_error(req, 405, "Method not allowed");
    return 1;
}

/* ------------------------------------------------------------ auth */

#define HTTP_CHALLENGE_TTL_US 30000000u
#define HTTP_CHALLENGES 64u

struct mc_http_auth {
    mc_auth_key_t key;
    struct {
        uint8_t nonce[MC_AUTH_NONCE_LEN];
        uint64_t until_us; /* 0: free or used */
    } ch[HTTP_CHALLENGES];
    unsigned next; /* the slot of the next challenge (the oldest is reused) */
};

mc_http_auth_t *mc_http_auth_create(const mc_auth_key_t *key)
{
    mc_http_auth_t *a = MC_NEW(mc_http_auth_t);
    if (a != NULL)
        a->key = *key;
    return a;
}

void mc_http_auth_destroy(mc_http_auth_t *a)
{
    if (a != NULL)
        memset(a, 0, sizeof(*a));
    mc_free(a);
}

void mc_http_auth_serve(struct evhttp_request *req, void *arg)
{
    mc_http_auth_t *a = arg;
    if (mc_meta_http_read_only(req))
        return;
    unsigned i = a->next++ % HTTP_CHALLENGES;
    mc_auth_nonce(a->ch[i].nonce);
    a->ch[i].until_us = mc_now_us() + HTTP_CHALLENGE_TTL_US;
    char hex[2 * MC_AUTH_NONCE_LEN + 1];
    mc_auth_hex(a->ch[i].nonce, MC_AUTH_NONCE_LEN, hex);
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    evbuffer_add_printf(b, "{\"nonce\": \"%s\"}\n", hex);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Cache-Control", "no-store");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

int mc_http_auth_admit(mc_http_auth_t *a, struct evhttp_request *req)
{
    if (a == NULL)
        return 1;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Mooncake-Auth");
    const char *why = "authentication required: GET /auth, then X-Mooncake-Auth";
    uint8_t ns[MC_AUTH_NONCE_LEN], nc[MC_AUTH_NONCE_LEN], proof[MC_AUTH_PROOF_LEN];
    const char *d1 = h ? strchr(h, '.') : NULL, *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
    if (h != NULL) {
        why = "malformed X-Mooncake-Auth";
        if (d1 != NULL && d2 != NULL && mc_auth_unhex(h, (size_t)(d1 - h), ns, sizeof(ns)) == 0 &&
            mc_auth_unhex(d1 + 1, (size_t)(d2 - d1 - 1), nc, sizeof(nc)) == 0 &&
            mc_auth_unhex(d2 + 1, strlen(d2 + 1), proof, sizeof(proof)) == 0) {
            why = "unknown, expired or used challenge";
            uint64_t now = mc_now_us();
            for (unsigned i = 0; i < HTTP_CHALLENGES; i++) {
                if (a->ch[i].until_us <= now || memcmp(a->ch[i].nonce, ns, sizeof(ns)) != 0)
                    continue;
                a->ch[i].until_us = 0; /* once */
                why = "wrong proof (another secret?)";
                if (mc_auth_check(&a->key, MC_AUTH_CLIENT, ns, nc, proof, sizeof(proof))) {
                    uint8_t mine[MC_AUTH_PROOF_LEN];
                    char hex[2 * MC_AUTH_PROOF_LEN + 1];
                    mc_auth_proof(&a->key, MC_AUTH_SERVER, nc, ns, mine);
                    mc_auth_hex(mine, sizeof(mine), hex);
                    evhttp_add_header(evhttp_request_get_output_headers(req),
                                      "X-Mooncake-Auth-Server", hex);
                    return 1;
                }
                break;
            }
        }
    }
    MC_DEBUG(HTTP, "refused %s: %s", evhttp_request_get_uri(req), why);
    evhttp_send_error(req, 401, why);
    return 0;
}

/* ------------------------------------------------------------ /metadata */

/* Constant-time comparison of the presented token with ours. */
static int token_ok(const char *want, struct evhttp_request *req)
{
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    const char *got = h + 7;
    size_t wl = strlen(want), gl = strlen(got);
    unsigned char diff = wl != gl;
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? got[i] : 0);
    return diff == 0;
}

typedef struct list_out {
    mc_mp_writer_t w;
    uint32_t n;
} list_out_t;

static int list_one(void *arg, const char *key, size_t klen, const void *val, size_t len)
{
    list_out_t *o = arg;
    mc_mp_write_array(&o->w, 2);
    mc_mp_write_bin(&o->w, key, klen);
    mc_mp_write_bin(&o->w, val, len);
    o->n++;
    return o->w.err != MC_OK;
}

static void serve_list(const mc_meta_http_store_t *st, struct evhttp_request *req,
                       const char *prefix)
{
    mc_buf_t buf = MC_BUF_INIT;
    list_out_t o = {.n = 0};
    mc_mp_writer_init(&o.w, &buf);
    size_t at = mc_mp_write_array_later(&o.w);
    mc_status_t s = st->list(st->ctx, prefix, strlen(prefix), list_one, &o);
    mc_mp_patch_array(&o.w, at, o.n);
    if (s == MC_OK)
        s = o.w.err;
    struct evbuffer *b = s == MC_OK ? evbuffer_new() : NULL;
    if (b == NULL || evbuffer_add(b, mc_buf_head(&buf), mc_buf_used(&buf)) != 0) {
        mc_buf_fini(&buf);
        if (b != NULL)
            evbuffer_free(b);
        reply_text(st, req, 500, "Internal Server Error",
                   mc_status_msg(s != MC_OK ? s : MC_ERR_NOMEM), 0);
        return;
    }
    mc_buf_fini(&buf);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "application/x-msgpack");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static void serve_get(const mc_meta_http_store_t *st, struct evhttp_request *req, const char *key)
{
    void *val = NULL;
    size_t len = 0;
    mc_status_t s = st->get(st->ctx, key, strlen(key), &val, &len);
    if (s == MC_ERR_NOT_FOUND) {
        reply_text(st, req, 404, "Not Found", "metadata not found", 0);
        return;
    }
    if (s != MC_OK) {
        reply_text(st, req, s == MC_ERR_INVALID_KEY ? 400 : 500,
                   s == MC_ERR_INVALID_KEY ? "Bad Request" : "Internal Server Error",
                   mc_status_msg(s), 0);
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (b == NULL || (len > 0 && evbuffer_add(b, val, len) != 0)) {
        mc_free(val);
        if (b != NULL)
            evbuffer_free(b);
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    mc_free(val);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static void serve_put(const mc_meta_http_store_t *st, struct evhttp_request *req, const char *key)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const void *val = len > 0 ? evbuffer_pullup(in, -1) : NULL;
    size_t klen = strlen(key);
    if (len > 0 && val == NULL) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    if (strstr(key, "rpc_meta") != NULL) {
        /* upstream: an rpc_meta name is taken by its first owner; the same
         * value again is an idempotent re-publish */
        void *old = NULL;
        size_t olen = 0;
        mc_status_t g = st->get(st->ctx, key, klen, &old, &olen);
        if (g == MC_OK) {
            int same = olen == len && (len == 0 || memcmp(old, val, len) == 0);
            mc_free(old);
            if (same)
                reply_text(st, req, 200, "OK", "metadata unchanged", 0);
            else
                reply_text(st, req, 400, "Bad Request", "Duplicate rpc_meta key not allowed", 0);
            return;
        }
    }
    mc_status_t s = st->put(st->ctx, key, klen, val, len);
    switch (s) {
    case MC_OK:
        reply_text(st, req, 200, "OK", "metadata updated", 1);
        break;
    case MC_ERR_LIMIT:
        reply_text(st, req, 507, "Insufficient Storage", "metadata budget exhausted", 0);
        break;
    case MC_ERR_INVALID_KEY:
        reply_text(st, req, 400, "Bad Request", "invalid metadata key", 0);
        break;
    case MC_ERR_INVALID_PARAMS:
        reply_text(st, req, 413, "Payload Too Large", "metadata value too long", 0);
        break;
    default:
        reply_text(st, req, 500, "Internal Server Error", mc_status_msg(s), 0);
        break;
    }
}

static void serve_del(const mc_meta_http_store_t *st, struct evhttp_request *req, const char *key)
{
    mc_status_t s = st->del(st->ctx, key, strlen(key));
    if (s == MC_OK)
        reply_text(st, req, 200, "OK", "metadata deleted", 1);
    else if (s == MC_ERR_NOT_FOUND)
        reply_text(st, req, 404, "Not Found", "metadata not found", 0);
    else
        reply_text(st, req, s == MC_ERR_INVALID_KEY ? 400 : 500,
                   s == MC_ERR_INVALID_KEY ? "Bad Request" : "Internal Server Error",
                   mc_status_msg(s), 0);
}

void mc_meta_http_serve(struct evhttp_request *req, void *arg)
{
    const mc_meta_http_store_t *st = arg;
    char inst[32];
    snprintf(inst, sizeof(inst), "%016" PRIx64, st->instance);
    evhttp_add_header(evhttp_request_get_output_headers(req), "X-Mooncake-Instance", inst);

    if (st->token != NULL && st->token[0] != '\0' && !token_ok(st->token, req)) {
        reply_text(st, req, 401, "Unauthorized", "unauthorized", 0);
        return;
    }
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD && !mc_http_auth_admit(st->auth, req))
        return;
    if (st->admit != NULL && st->admit(st->ctx, req))
        return;

    struct evkeyvalq q;
    q.tqh_first = NULL; /* TAILQ_INIT, without <sys/queue.h> */
    q.tqh_last = &q.tqh_first;
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (query != NULL && evhttp_parse_query_str(query, &q) != 0) {
        reply_text(st, req, 400, "Bad Request", "malformed query string", 0);
        return;
    }
    const char *key = evhttp_find_header(&q, "key");
    const char *prefix = evhttp_find_header(&q, "prefix");
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if ((key == NULL || key[0] == '\0') && prefix != NULL &&
        (cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD)) {
        serve_list(st, req, prefix);
    } else if (key == NULL || key[0] == '\0') {
        reply_text(st, req, 400, "Bad Request", "Missing key parameter", 0);
    } else {
        switch (cmd) {
        case EVHTTP_REQ_GET:
        case EVHTTP_REQ_HEAD:
            serve_get(st, req, key);
            break;
        case EVHTTP_REQ_PUT:
            serve_put(st, req, key);
            break;
        case EVHTTP_REQ_DELETE:
            serve_del(st, req, key);
            break;
        default:
            reply_text(st, req, 405, "Method Not Allowed", "Method not allowed", 0);
            break;
        }
    }
    evhttp_clear_headers(&q);
}

/* ------------------------------------------------------- in-memory store */

typedef struct mem_entry {
    mc_hnode_t node;
    size_t klen, vlen;
    char data[]; /* key, then value */
} mem_entry_t;

typedef struct mem_store {
    mc_meta_http_store_t st; /* first */
    mc_hmap_t map;
    uint64_t max_keys, max_bytes, bytes;
} mem_store_t;

static mem_entry_t *mem_find(mem_store_t *ms, const char *key, size_t klen, uint64_t h)
{
    mc_hnode_t *n;
    MC_HMAP_FOREACH_HASH(&ms->map, n, h)
    {
        mem_entry_t *e = MC_CONTAINER_OF(n, mem_entry_t, node);
        if (e->klen == klen && memcmp(e->data, key, klen) == 0)
            return e;
    }
    return NULL;
}

static mc_status_t mem_get(void *ctx, const char *key, size_t klen, void **val, size_t *len)
{
    mem_store_t *ms = ctx;
    mem_entry_t *e = mem_find(ms, key, klen, mc_hash64(key, klen));
    if (e == NULL)
        return MC_ERR_NOT_FOUND;
    *val = NULL;
    *len = e->vlen;
    if (e->vlen > 0) {
        if ((*val = mc_malloc(e->vlen)) == NULL)
            return MC_ERR_NOMEM;
        memcpy(*val, e->data + e->klen, e->vlen);
    }
    return MC_OK;
}

static mc_status_t mem_put(void *ctx, const char *key, size_t klen, const void *val, size_t len)
{
    mem_store_t *ms = ctx;
    uint64_t h = mc_hash64(key, klen);
    mem_entry_t *old = mem_find(ms, key, klen, h);
    if (old == NULL && mc_hmap_count(&ms->map) >= ms->max_keys)
        return MC_ERR_LIMIT;
    uint64_t bytes = ms->bytes - (old != NULL ? old->vlen : 0) + len;
    if (bytes > ms->max_bytes)
        return MC_ERR_LIMIT;
    mem_entry_t *e = mc_malloc(sizeof(*e) + klen + len);
    if (e == NULL)
        return MC_ERR_NOMEM;
    e->klen = klen;
    e->vlen = len;
    memcpy(e->data, key, klen);
    if (len > 0)
        memcpy(e->data + klen, val, len);
    if (old != NULL) {
        mc_hmap_remove(&ms->map, &old->node);
        mc_free(old);
    }
    mc_hmap_insert(&ms->map, &e->node, h);
    ms->bytes = bytes;
    return MC_OK;
}

static mc_status_t mem_del(void *ctx, const char *key, size_t klen)
{
    mem_store_t *ms = ctx;
    mem_entry_t *e = mem_find(ms, key, klen, mc_hash64(key, klen));
    if (e == NULL)
        return MC_ERR_NOT_FOUND;
    mc_hmap_remove(&ms->map, &e->node);
    ms->bytes -= e->vlen;
    mc_free(e);
    return MC_OK;
}

static mc_status_t mem_list(void *ctx, const char *prefix, size_t plen,
                            int (*fn)(void *, const char *, size_t, const void *, size_t),
                            void *arg)
{
    mem_store_t *ms = ctx;
    size_t b;
    mc_hnode_t *n;
    MC_HMAP_FOREACH(&ms->map, b, n)
    {
        mem_entry_t *e = MC_CONTAINER_OF(n, mem_entry_t, node);
        if (e->klen < plen || memcmp(e->data, prefix, plen) != 0)
            continue;
        if (fn(arg, e->data, e->klen, e->data + e->klen, e->vlen) != 0)
            return MC_OK;
    }
    return MC_OK;
}

mc_meta_http_store_t *mc_meta_http_mem_create(uint64_t max_keys, uint64_t max_bytes,
                                              const char *token)
{
    mem_store_t *ms = MC_NEW(mem_store_t);
    if (ms == NULL)
        return NULL;
    if (mc_hmap_init(&ms->map, 64) != MC_OK)
        goto err_free;
    if (token != NULL && token[0] != '\0' && (ms->st.token = mc_strdup(token)) == NULL)
        goto err_map;
    ms->max_keys = max_keys;
    ms->max_bytes = max_bytes;
    ms->st.ctx = ms;
    ms->st.get = mem_get;
    ms->st.put = mem_put;
    ms->st.del = mem_del;
    ms->st.list = mem_list;
    ms->st.instance = mc_meta_http_instance_id();
    return &ms->st;

err_map:
    mc_hmap_fini(&ms->map);
err_free:
    mc_free(ms);
    return NULL;
}

void mc_meta_http_mem_destroy(mc_meta_http_store_t *st)
{
    if (st == NULL)
        return;
    mem_store_t *ms = (mem_store_t *)st;
    size_t b;
    for (b = 0; b <= ms->map.mask; b++) {
        mc_hnode_t *n = ms->map.buckets[b], *next;
        for (; n != NULL; n = next) {
            next = n->next;
            mc_free(MC_CONTAINER_OF(n, mem_entry_t, node));
        }
    }
    mc_hmap_fini(&ms->map);
    mc_free((char *)ms->st.token);
    mc_free(ms);
}

void mc_meta_http_mem_usage(const mc_meta_http_store_t *st, uint64_t *keys, uint64_t *bytes)
{
    const mem_store_t *ms = (const mem_store_t *)st;
    *keys = mc_hmap_count(&ms->map);
    *bytes = ms->bytes;
}

/* ------------------------------------------------------ standalone server */

struct mc_meta_http_server {
    mc_meta_http_server_opts_t o;
    char *bind_address;
    mc_meta_http_store_t *store;
    mc_http_auth_t *auth; /* with o.auth_key */
    mc_reactor_group_t *g;
    struct evhttp *http;
    uint16_t port;
    mc_status_t st;
};

void mc_meta_http_server_opts_init(mc_meta_http_server_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->bind_address = "0.0.0.0";
    o->port = 8080;
    o->max_keys = 65536;
    o->max_bytes = 1ull << 30;
    o->max_value = 16u << 20;
}

static void on_health(struct evhttp_request *req, void *arg)
{
    (void)arg;
    if (mc_meta_http_read_only(req))
        return;
    struct evbuffer *b = evbuffer_new();
    if (b != NULL)
        evbuffer_add_printf(b, "OK\n");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain");
    evhttp_send_reply(req, 200, "OK", b);
    if (b != NULL)
        evbuffer_free(b);
}

static void srv_start_on_reactor(void *arg)
{
    mc_meta_http_server_t *s = arg;
    s->http = evhttp_new(mc_reactor_base(mc_reactor_group_get(s->g, 0)));
    if (s->http == NULL) {
        s->st = MC_ERR_NOMEM;
        return;
    }
    evhttp_set_allowed_methods(s->http, mc_meta_http_methods());
    evhttp_set_max_headers_size(s->http, 16384);
    evhttp_set_max_body_size(s->http, (ev_ssize_t)s->o.max_value);
    evhttp_set_timeout(s->http, 30);
    evhttp_set_cb(s->http, "/metadata", mc_meta_http_serve, s->store);
    evhttp_set_cb(s->http, "/health", on_health, s);
    if (s->auth != NULL)
        evhttp_set_cb(s->http, "/auth", mc_http_auth_serve, s->auth);
    struct evhttp_bound_socket *bs =
        evhttp_bind_socket_with_handle(s->http, s->bind_address, s->o.port);
    if (bs == NULL) {
        MC_ERROR(HTTP, "cannot listen for HTTP on %s:%u (address in use?)", s->bind_address,
                 s->o.port);
        evhttp_free(s->http);
        s->http = NULL;
        s->st = MC_ERR_SOCKET;
        return;
    }
    s->port = mc_net_local_port(evhttp_bound_socket_get_fd(bs));
    s->st = MC_OK;
}

static void srv_stop_on_reactor(void *arg)
{
    mc_meta_http_server_t *s = arg;
    if (s->http != NULL)
        evhttp_free(s->http);
    s->http = NULL;
}

mc_status_t mc_meta_http_server_start(const mc_meta_http_server_opts_t *o,
                                      mc_meta_http_server_t **out)
{
    mc_status_t st = MC_ERR_NOMEM;
    mc_meta_http_server_t *s = MC_NEW(mc_meta_http_server_t);
    if (s == NULL)
        return MC_ERR_NOMEM;
    s->o = *o;
    s->o.auth_key = NULL; /* the caller's; s->auth holds the copy */
    s->bind_address = mc_strdup(o->bind_address != NULL ? o->bind_address : "0.0.0.0");
    s->store = mc_meta_http_mem_create(o->max_keys, o->max_bytes, o->token);
    if (s->bind_address == NULL || s->store == NULL)
        goto err_free;
    if (o->auth_key != NULL && (s->auth = mc_http_auth_create(o->auth_key)) == NULL)
        goto err_free;
    s->store->auth = s->auth;
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "httpmeta";
    st = mc_reactor_group_create(&go, &s->g);
    if (st != MC_OK)
        goto err_free;
    s->st = MC_ERR_CANCELED;
    mc_rpc_run_on(mc_reactor_group_get(s->g, 0), srv_start_on_reactor, s);
    st = s->st;
    if (st != MC_OK)
        goto err_group;
    *out = s;
    return MC_OK;

err_group:
    mc_reactor_group_destroy(s->g);
err_free:
    mc_meta_http_mem_destroy(s->store);
    mc_http_auth_destroy(s->auth);
    mc_free(s->bind_address);
    mc_free(s);
    return st;
}

uint16_t mc_meta_http_server_port(const mc_meta_http_server_t *s)
{
    return s->port;
}

void mc_meta_http_server_stop(mc_meta_http_server_t *s)
{
    if (s == NULL)
        return;
    mc_rpc_run_on(mc_reactor_group_get(s->g, 0), srv_stop_on_reactor, s);
    mc_reactor_group_destroy(s->g);
    mc_meta_http_mem_destroy(s->store);
    mc_http_auth_destroy(s->auth);
    mc_free(s->bind_address);
    mc_free(s);
}
