/*
 * metadata.c - the front of the metadata backends (see metadata.h): the
 * connection-string parser and backend table, option defaults, the blocking
 * *_sync wrappers, and the "own entries" set both backends keep for
 * re-publishing.
 *
 * Connection strings:
 *   master://HOST[:PORT]        PORT defaults to 50051 (mooncake-master's RPC port)
 *   redis://HOST[:PORT][/DB]    PORT defaults to 6379; DB is a decimal index
 *   redis-sentinel://HOST[:PORT][,HOST[:PORT]...]/NAME[/DB]
 *                               the primary Redis Sentinels (port 26379 by
 *                               default) watch as NAME, followed across
 *                               failovers
 *   http://HOST[:PORT][/PATH]   PORT defaults to 80, PATH to /metadata (upstream's
 *                               servers serve that path); PATH is [A-Za-z0-9/._~-]
 *                               and has no query ("?key=" is added per call)
 * HOST is a name, an IPv4 literal or a bracketed IPv6 literal ("[::1]").
 * Anything else (empty host, a port that is not 1..65535, trailing bytes, an
 * unknown scheme) is MC_ERR_INVALID_ARGUMENT, logged naming the string.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "transport/metadata.h"
#include "util/hash.h"
#include "util/hmap.h"
#include "util/conf.h"
#include "transport/meta_int.h"
#include "util/log.h"
#include "util/mem.h"

#define META_HOST_MAX 256
#define MASTER_DEFAULT_PORT 50051
#define REDIS_DEFAULT_PORT 6379
#define HTTP_DEFAULT_PORT 80
#define HTTP_DEFAULT_PATH "/metadata"
#define HTTP_PATH_MAX 256

void mc_meta_opts_init(mc_meta_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->call_timeout_us = 5000000;
    o->ping_interval_us = 1000000;
    o->ttl_us = 30000000;
}

/* Copy src (NULL = all defaults) with zero durations replaced by defaults. */
void meta_fill_defaults(mc_meta_opts_t *dst, const mc_meta_opts_t *src)
{
    mc_meta_opts_t d;
    mc_meta_opts_init(&d);
    *dst = src != NULL ? *src : d;
    if (dst->call_timeout_us == 0)
        dst->call_timeout_us = d.call_timeout_us;
    if (dst->ping_interval_us == 0)
        dst->ping_interval_us = d.ping_interval_us;
    if (dst->ttl_us == 0)
        dst->ttl_us = d.ttl_us;
}

/* ------------------------------------------------------------- parsing */

typedef struct conn_str {
    char host[META_HOST_MAX];
    uint16_t port;
    int db; /* -1 when absent */
} conn_str_t;

static int host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

/* Parse "HOST[:PORT][/DB]" (the part after "scheme://"). *why names the
 * problem on failure. */
static int parse_authority(const char *s, int allow_db, uint16_t default_port, conn_str_t *out,
                           const char **why)
{
    const char *p = s, *hend;
    size_t hlen;
    if (*p == '[') {
        hend = strchr(p, ']');
        if (hend == NULL) {
            *why = "unterminated '[' in the host";
            return 0;
        }
        p++;
        hlen = (size_t)(hend - p);
        for (size_t i = 0; i < hlen; i++) {
            char c = p[i];
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
                  c == ':' || c == '.')) {
                *why = "bad character in an IPv6 literal";
                return 0;
            }
        }
        memcpy(out->host, p, hlen < META_HOST_MAX ? hlen : 0);
        p = hend + 1;
    } else {
        hend = p;
        while (host_char(*hend))
            hend++;
        hlen = (size_t)(hend - p);
        if (hlen < META_HOST_MAX)
            memcpy(out->host, p, hlen);
        p = hend;
    }
    if (hlen == 0) {
        *why = "no host";
        return 0;
    }
    if (hlen >= META_HOST_MAX) {
        *why = "host name too long";
        return 0;
    }
    out->host[hlen] = '\0';

    out->port = default_port;
    if (*p == ':') {
        const char *pe = ++p;
        while (*pe != '\0' && *pe != '/')
            pe++;
        unsigned long port;
        if (!mc_conf_parse_digits(p, pe, 65535, &port) || port == 0) {
            *why = "the port is not a number in 1..65535";
            return 0;
        }
        out->port = (uint16_t)port;
        p = pe;
    }
    out->db = -1;
    if (*p == '/') {
        if (!allow_db) {
            *why = "unexpected path";
            return 0;
        }
        p++;
        unsigned long db;
        if (!mc_conf_parse_digits(p, p + strlen(p), 0x7fffffffUL, &db)) {
            *why = "the database is not a decimal number";
            return 0;
        }
        out->db = (int)db;
        p += strlen(p);
    }
    if (*p != '\0') {
        *why = "unexpected characters after the host";
        return 0;
    }
    return 1;
}

/* "HOST[:PORT][/PATH]" of an http:// string: the authority goes through
 * parse_authority, the path is checked here. */
static int parse_http(const char *s, conn_str_t *out, char *path, const char **why)
{
    const char *slash = strchr(s, '/');
    const char *bad = strpbrk(s, "?#");
    if (bad != NULL && (slash == NULL || bad < slash)) {
        *why = "a query or fragment after the host (write http://HOST:PORT/metadata)";
        return 0;
    }
    size_t alen = slash != NULL ? (size_t)(slash - s) : strlen(s);
    char auth[META_HOST_MAX + 16];
    if (alen >= sizeof(auth)) {
        *why = "host name too long";
        return 0;
    }
    memcpy(auth, s, alen);
    auth[alen] = '\0';
    if (!parse_authority(auth, 0, HTTP_DEFAULT_PORT, out, why))
        return 0;
    if (slash == NULL || strcmp(slash, "/") == 0) {
        snprintf(path, HTTP_PATH_MAX, "%s", HTTP_DEFAULT_PATH);
        return 1;
    }
    size_t plen = strlen(slash);
    if (plen >= HTTP_PATH_MAX) {
        *why = "path too long";
        return 0;
    }
    for (size_t i = 0; i < plen; i++) {
        char c = slash[i];
        if (!host_char(c) && c != '/' && c != '~') {
            *why = c == '?' || c == '#' ? "a query or fragment in the path (the backend adds "
                                          "?key= itself)"
                                        : "a character in the path that needs escaping";
            return 0;
        }
    }
    memcpy(path, slash, plen + 1);
    return 1;
}

mc_status_t mc_meta_open(const char *conn, mc_reactor_t *r, const mc_meta_opts_t *o,
                         mc_meta_t **out)
{
    static const char master_pfx[] = "master://", redis_pfx[] = "redis://", http_pfx[] = "http://";
    char path[HTTP_PATH_MAX];
    conn_str_t cs;
    const char *why = NULL;

    if (r == NULL || out == NULL || conn == NULL) {
        MC_ERROR(METADATA, "mc_meta_open: %s is NULL",
                 conn == NULL ? "the connection string"
                 : r == NULL  ? "the reactor"
                              : "out");
        return MC_ERR_INVALID_ARGUMENT;
    }
    if (strncmp(conn, master_pfx, sizeof(master_pfx) - 1) == 0) {
        if (parse_authority(conn + sizeof(master_pfx) - 1, 0, MASTER_DEFAULT_PORT, &cs, &why))
            return meta_master_open(cs.host, cs.port, r, o, out);
    } else if (strncmp(conn, redis_pfx, sizeof(redis_pfx) - 1) == 0) {
        if (parse_authority(conn + sizeof(redis_pfx) - 1, 1, REDIS_DEFAULT_PORT, &cs, &why))
            return meta_redis_open(cs.host, cs.port, cs.db, r, o, out);
    } else if (mc_sentinel_url_is(conn)) {
        mc_sentinel_url_t su;
        const char *rest = NULL;
        if (mc_sentinel_url_parse(conn, &su, &rest, &why)) {
            if (*rest == '\0')
                return meta_redis_open_sentinel(&su, r, o, out);
            why = "unexpected characters after the address";
        }
    } else if (strncmp(conn, http_pfx, sizeof(http_pfx) - 1) == 0) {
        if (parse_http(conn + sizeof(http_pfx) - 1, &cs, path, &why))
            return meta_http_open(cs.host, cs.port, path, r, o, out);
    } else if (strncmp(conn, "https://", 8) == 0) {
        why = "https is not supported (no TLS here): use http://HOST:PORT/metadata";
    } else {
        why = "unknown scheme (expected master://HOST:PORT, redis://HOST:PORT[/DB], "
              "redis-sentinel://HOST[:PORT],.../NAME[/DB] or http://HOST:PORT/metadata)";
    }
    MC_ERROR(METADATA, "bad metadata connection string '%s': %s", conn, why);
    return MC_ERR_INVALID_ARGUMENT;
}

void mc_meta_close(mc_meta_t *m)
{
    if (m != NULL)
        m->ops->close(m);
}

mc_status_t mc_meta_retarget(mc_meta_t *m, const char *host, uint16_t port)
{
    if (m == NULL || m->ops->retarget == NULL)
        return MC_ERR_NOT_SUPPORTED;
    return m->ops->retarget(m, host, port);
}

/* ------------------------------------------------------------ own entries */

/* The entries this process published: key -> value copy. Reactor thread of
 * the backend only. */
typedef struct own_entry {
    mc_hnode_t node;
    uint64_t gen; /* which put stored this value */
    size_t klen, vlen;
    char *val;   /* into data, after the key's NUL */
    char data[]; /* key, NUL, value */
} own_entry_t;

struct meta_own {
    mc_hmap_t map;
    uint64_t next_gen;
};

meta_own_t *meta_own_create(void)
{
    meta_own_t *s = MC_NEW(meta_own_t);
    if (s == NULL)
        return NULL;
    if (mc_hmap_init(&s->map, 16) != MC_OK) {
        mc_free(s);
        return NULL;
    }
    return s;
}

void meta_own_destroy(meta_own_t *s)
{
    if (s == NULL)
        return;
    size_t b;
    for (b = 0; b <= s->map.mask; b++) {
        mc_hnode_t *n = s->map.buckets[b], *next;
        for (; n != NULL; n = next) {
            next = n->next;
            mc_free(MC_CONTAINER_OF(n, own_entry_t, node));
        }
    }
    mc_hmap_fini(&s->map);
    mc_free(s);
}

static own_entry_t *own_find(meta_own_t *s, const char *key, size_t klen, uint64_t h)
{
    mc_hnode_t *n;
    MC_HMAP_FOREACH_HASH(&s->map, n, h)
    {
        own_entry_t *e = MC_CONTAINER_OF(n, own_entry_t, node);
        if (e->klen == klen && memcmp(e->data, key, klen) == 0)
            return e;
    }
    return NULL;
}

/* Remember key -> val (replacing an older value). *gen (may be NULL)
 * receives the generation of this value, for meta_own_forget. MC_OK or
 * MC_ERR_NOMEM (then the set is unchanged). */
mc_status_t meta_own_set(meta_own_t *s, const char *key, const void *val, size_t len, uint64_t *gen)
{
    size_t klen = strlen(key);
    uint64_t h = mc_hash64(key, klen);
    own_entry_t *e = mc_malloc(sizeof(*e) + klen + 1 + len);
    if (e == NULL)
        return MC_ERR_NOMEM;
    e->gen = ++s->next_gen;
    e->klen = klen;
    e->vlen = len;
    memcpy(e->data, key, klen + 1);
    e->val = e->data + klen + 1;
    if (len > 0)
        memcpy(e->val, val, len);
    own_entry_t *old = own_find(s, key, klen, h);
    if (old != NULL) {
        mc_hmap_remove(&s->map, &old->node);
        mc_free(old);
    }
    mc_hmap_insert(&s->map, &e->node, h);
    if (gen != NULL)
        *gen = e->gen;
    return MC_OK;
}

/* Forget key; with gen != 0 only if its value is still the one of that put
 * (a later put of the same key is kept). */
void meta_own_forget(meta_own_t *s, const char *key, uint64_t gen)
{
    size_t klen = strlen(key);
    own_entry_t *e = own_find(s, key, klen, mc_hash64(key, klen));
    if (e == NULL || (gen != 0 && e->gen != gen))
        return;
    mc_hmap_remove(&s->map, &e->node);
    mc_free(e);
}

int meta_own_get(meta_own_t *s, const char *key, const void **val, size_t *len)
{
    size_t klen = strlen(key);
    own_entry_t *e = own_find(s, key, klen, mc_hash64(key, klen));
    if (e == NULL)
        return 0;
    *val = e->val;
    *len = e->vlen;
    return 1;
}

size_t meta_own_count(const meta_own_t *s)
{
    return mc_hmap_count(&s->map);
}

/* fn gets each entry with its generation; it must not change the set. */
void meta_own_foreach(meta_own_t *s,
                      void (*fn)(void *arg, const char *key, const void *val, size_t len,
                                 uint64_t gen),
                      void *arg)
{
    size_t b;
    mc_hnode_t *n;
    MC_HMAP_FOREACH(&s->map, b, n)
    {
        own_entry_t *e = MC_CONTAINER_OF(n, own_entry_t, node);
        fn(arg, e->data, e->val, e->vlen, e->gen);
    }
}

/* ---------------------------------------------------------- sync wrappers */

typedef enum { SYNC_GET, SYNC_PUT, SYNC_DEL, SYNC_LIST } sync_kind_t;

typedef struct sync_op {
    mc_meta_t *m;
    sync_kind_t kind;
    const char *key; /* or prefix */
    const void *val;
    size_t len;
    mc_buf_t *out; /* get: the value is appended here */
    mc_buf_t list; /* list: packed entries (klen, vlen, key NUL, value) */
    size_t nlist;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    mc_status_t st;
} sync_op_t;

static void sync_finish(sync_op_t *so, mc_status_t st)
{
    pthread_mutex_lock(&so->mu);
    so->st = st;
    so->done = 1;
    pthread_cond_signal(&so->cv);
    pthread_mutex_unlock(&so->mu);
}

static void sync_get_cb(void *arg, mc_status_t st, const void *val, size_t len)
{
    sync_op_t *so = arg;
    if (st == MC_OK && len > 0 && mc_buf_append(so->out, val, len) != MC_OK)
        st = MC_ERR_NOMEM;
    sync_finish(so, st);
}

static void sync_done_cb(void *arg, mc_status_t st)
{
    sync_finish(arg, st);
}

static void sync_list_cb(void *arg, mc_status_t st, const mc_meta_entry_t *e, size_t n)
{
    sync_op_t *so = arg;
    for (size_t i = 0; i < n && st == MC_OK; i++) {
        size_t hdr[2] = {strlen(e[i].key), e[i].len};
        if (mc_buf_append(&so->list, hdr, sizeof(hdr)) != MC_OK ||
            mc_buf_append(&so->list, e[i].key, hdr[0] + 1) != MC_OK ||
            (hdr[1] > 0 && mc_buf_append(&so->list, e[i].val, hdr[1]) != MC_OK))
            st = MC_ERR_NOMEM;
        so->nlist++;
    }
    sync_finish(so, st);
}

static void sync_start(mc_reactor_t *r, void *arg, mc_status_t st)
{
    sync_op_t *so = arg;
    mc_meta_t *m = so->m;
    (void)r;
    if (st == MC_OK) {
        switch (so->kind) {
        case SYNC_GET:
            st = m->ops->get(m, so->key, sync_get_cb, so);
            break;
        case SYNC_PUT:
            st = m->ops->put(m, so->key, so->val, so->len, sync_done_cb, so);
            break;
        case SYNC_DEL:
            st = m->ops->del(m, so->key, sync_done_cb, so);
            break;
        case SYNC_LIST:
            st = m->ops->list(m, so->key, sync_list_cb, so);
            break;
        }
    }
    if (st != MC_INPROGRESS)
        sync_finish(so, st);
}

/* Run so on m's reactor and wait for its callback. */
static mc_status_t sync_run(sync_op_t *so)
{
    if (so->m == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (mc_reactor_is_current(so->m->r)) {
        MC_ERROR(METADATA, "mc_meta_*_sync called on the backend's own reactor thread: it "
                           "would wait for itself; use the async calls there");
        return MC_ERR_STATE;
    }
    pthread_mutex_init(&so->mu, NULL);
    pthread_cond_init(&so->cv, NULL);
    mc_status_t st = mc_reactor_call(so->m->r, sync_start, so);
    if (st == MC_OK) {
        pthread_mutex_lock(&so->mu);
        while (!so->done)
            pthread_cond_wait(&so->cv, &so->mu);
        pthread_mutex_unlock(&so->mu);
        st = so->st;
    }
    pthread_cond_destroy(&so->cv);
    pthread_mutex_destroy(&so->mu);
    return st;
}

mc_status_t mc_meta_get_sync(mc_meta_t *m, const char *key, mc_buf_t *val)
{
    if (val == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    sync_op_t so = {.m = m, .kind = SYNC_GET, .key = key, .out = val};
    return sync_run(&so);
}

mc_status_t mc_meta_put_sync(mc_meta_t *m, const char *key, const void *val, size_t len)
{
    sync_op_t so = {.m = m, .kind = SYNC_PUT, .key = key, .val = val, .len = len};
    return sync_run(&so);
}

mc_status_t mc_meta_del_sync(mc_meta_t *m, const char *key)
{
    sync_op_t so = {.m = m, .kind = SYNC_DEL, .key = key};
    return sync_run(&so);
}

mc_status_t mc_meta_list_sync(mc_meta_t *m, const char *prefix,
                              void (*fn)(void *arg, const char *key, const void *val, size_t len),
                              void *arg)
{
    if (fn == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    sync_op_t so = {.m = m, .kind = SYNC_LIST, .key = prefix};
    mc_status_t st = sync_run(&so);
    if (st == MC_OK) {
        const uint8_t *p = mc_buf_head(&so.list);
        for (size_t i = 0; i < so.nlist; i++) {
            size_t hdr[2];
            memcpy(hdr, p, sizeof(hdr));
            const char *key = (const char *)p + sizeof(hdr);
            fn(arg, key, key + hdr[0] + 1, hdr[1]);
            p += sizeof(hdr) + hdr[0] + 1 + hdr[1];
        }
    }
    mc_buf_fini(&so.list);
    return st;
}
