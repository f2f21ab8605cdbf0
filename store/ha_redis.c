/*
 * ha_redis.c - see ha_redis.h.
 */
#include "store/ha_redis.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "util/conf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

struct mc_ha_redis {
    redisContext *ctx;
    int broken;          /* an error reply said this server cannot serve us now */
    uint64_t timeout_us; /* of commands */
    char peer[MC_SENTINEL_HOST_MAX + 8];
    char err[256];
};

static _Thread_local char connect_err[700];

int mc_ha_url_is_redis(const char *s)
{
    return s != NULL && (strncmp(s, "redis://", 8) == 0 || mc_sentinel_url_is(s));
}

/* "?cluster=ID" or nothing, at p. */
static mc_status_t parse_query(const char *p, mc_ha_url_t *u, const char **why)
{
    if (*p == '?') {
        p++;
        if (strncmp(p, "cluster=", 8) != 0) {
            *why = "the only query parameter is cluster=ID";
            return MC_ERR_INVALID_ARGUMENT;
        }
        p += 8;
        size_t n = strlen(p);
        if (n == 0 || n >= sizeof(u->cluster) || strpbrk(p, "&? \t") != NULL) {
            *why = "cluster id empty, too long or with '&', '?' or blanks";
            return MC_ERR_INVALID_ARGUMENT;
        }
        memcpy(u->cluster, p, n);
        p += n;
    }
    if (*p != '\0') {
        *why = "unexpected characters after the address";
        return MC_ERR_INVALID_ARGUMENT;
    }
    return MC_OK;
}

void mc_ha_url_describe(const mc_ha_url_t *u, char *buf, size_t n)
{
    if (!u->sentinel) {
        snprintf(buf, n, "redis %s:%u/%d", u->host, u->port, u->db);
        return;
    }
    size_t at = (size_t)snprintf(buf, n, "sentinels ");
    for (unsigned i = 0; i < u->sent.n && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s:%u", i ? "," : "", u->sent.s[i].host,
                               u->sent.s[i].port);
    if (at < n)
        snprintf(buf + at, n - at, " (primary %s, db %d)", u->sent.name, u->db);
}

mc_status_t mc_ha_url_parse(const char *s, mc_ha_url_t *out, const char **why)
{
    mc_ha_url_t u;
    memset(&u, 0, sizeof(u));
    u.port = 6379;
    if (mc_sentinel_url_is(s)) {
        const char *rest;
        if (!mc_sentinel_url_parse(s, &u.sent, &rest, why))
            return MC_ERR_INVALID_ARGUMENT;
        u.sentinel = 1;
        u.db = u.sent.db >= 0 ? u.sent.db : 0;
        mc_status_t st = parse_query(rest, &u, why);
        if (st == MC_OK)
            *out = u;
        return st;
    }
    if (s == NULL || strncmp(s, "redis://", 8) != 0) {
        *why = "expected redis://HOST[:PORT][/DB][?cluster=ID] or "
               "redis-sentinel://HOST[:PORT][,HOST[:PORT]...]/NAME[/DB][?cluster=ID]";
        return MC_ERR_INVALID_ARGUMENT;
    }
    const char *p = s + 8, *e = p;
    while (*e != '\0' && *e != ':' && *e != '/' && *e != '?')
        e++;
    if (e == p || (size_t)(e - p) >= sizeof(u.host)) {
        *why = e == p ? "no host" : "host name too long";
        return MC_ERR_INVALID_ARGUMENT;
    }
    memcpy(u.host, p, (size_t)(e - p));
    p = e;
    unsigned long v;
    if (*p == ':') {
        e = ++p;
        while (*e != '\0' && *e != '/' && *e != '?')
            e++;
        if (!mc_conf_parse_digits(p, e, 65535, &v) || v == 0) {
            *why = "the port is not a number in 1..65535";
            return MC_ERR_INVALID_ARGUMENT;
        }
        u.port = (uint16_t)v;
        p = e;
    }
    if (*p == '/') {
        e = ++p;
        while (*e != '\0' && *e != '?')
            e++;
        if (e != p) {
            if (!mc_conf_parse_digits(p, e, 0x7fffffffUL, &v)) {
                *why = "the database is not a decimal number";
                return MC_ERR_INVALID_ARGUMENT;
            }
            u.db = (int)v;
        }
        p = e;
    }
    mc_status_t st = parse_query(p, &u, why);
    if (st == MC_OK)
        *out = u;
    return st;
}

void mc_ha_key(char *buf, size_t n, const char *cluster, const char *name)
{
    snprintf(buf, n, "mc/%s/ha/%s", cluster, name);
}

static void set_tv(struct timeval *tv, uint64_t us)
{
    tv->tv_sec = (time_t)(us / 1000000);
    tv->tv_usec = (suseconds_t)(us % 1000000);
}

/* A plain connection to host:port with the timeout on connect and commands.
 * NULL with connect_err set on failure. */
static redisContext *dial(const char *host, uint16_t port, uint64_t timeout_us)
{
    struct timeval tv;
    set_tv(&tv, timeout_us);
    redisContext *ctx = redisConnectWithTimeout(host, port, tv);
    if (ctx == NULL) {
        snprintf(connect_err, sizeof(connect_err), "%s:%u: out of memory", host, port);
        return NULL;
    }
    if (ctx->err) {
        snprintf(connect_err, sizeof(connect_err), "%s:%u: %s", host, port, ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    return ctx;
}

static int reply_str_is(const redisReply *r, const char *s)
{
    return r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
           r->len == strlen(s) && memcmp(r->str, s, r->len) == 0;
}

/* Ask sentinel i for the primary, connect to it and check that it is one.
 * The context, or NULL with connect_err set. */
static redisContext *via_sentinel(const mc_ha_url_t *u, unsigned i, uint64_t timeout_us, char *peer,
                                  size_t peer_len)
{
    const char *sh = u->sent.s[i].host;
    uint16_t sp = u->sent.s[i].port;
    uint64_t per = timeout_us / u->sent.n > 100000 ? timeout_us / u->sent.n : 100000;
    redisContext *sc = dial(sh, sp, per);
    if (sc == NULL)
        return NULL;
    redisReply *r = redisCommand(sc, "SENTINEL get-master-addr-by-name %s", u->sent.name);
    char ip[MC_SENTINEL_HOST_MAX];
    unsigned long port = 0;
    int ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             r->element[0]->type == REDIS_REPLY_STRING &&
             r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len < sizeof(ip) &&
             mc_conf_parse_digits(r->element[1]->str, r->element[1]->str + r->element[1]->len,
                                  65535, &port) &&
             port > 0;
    if (ok) {
        memcpy(ip, r->element[0]->str, r->element[0]->len);
        ip[r->element[0]->len] = '\0';
    } else {
        snprintf(connect_err, sizeof(connect_err), "sentinel %s:%u: %s", sh, sp,
                 r == NULL                      ? (sc->err ? sc->errstr : "no reply")
                 : r->type == REDIS_REPLY_NIL   ? "does not know the primary's name"
                 : r->type == REDIS_REPLY_ERROR ? r->str
                                                : "a reply of an unexpected shape");
    }
    if (r != NULL)
        freeReplyObject(r);
    redisFree(sc);
    if (!ok)
        return NULL;
    redisContext *c = dial(ip, (uint16_t)port, timeout_us);
    if (c == NULL)
        return NULL;
    r = redisCommand(c, "ROLE");
    ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
         reply_str_is(r->element[0], "master");
    if (!ok)
        snprintf(connect_err, sizeof(connect_err),
                 "%s:%lu (named by sentinel %s:%u) is not a primary%s", ip, port, sh, sp,
                 r == NULL ? " (no answer to ROLE)" : "");
    if (r != NULL)
        freeReplyObject(r);
    if (!ok) {
        redisFree(c);
        return NULL;
    }
    snprintf(peer, peer_len, "%s:%lu", ip, port);
    return c;
}

mc_status_t mc_ha_redis_connect(const mc_ha_url_t *u, uint64_t timeout_us, mc_ha_redis_t **out)
{
    mc_ha_redis_t *c = MC_NEW(mc_ha_redis_t);
    if (c == NULL)
        return MC_ERR_NOMEM;
    connect_err[0] = '\0';
    if (u->sentinel) {
        for (unsigned i = 0; i < u->sent.n && c->ctx == NULL; i++)
            c->ctx = via_sentinel(u, i, timeout_us, c->peer, sizeof(c->peer));
    } else {
        c->ctx = dial(u->host, u->port, timeout_us);
        snprintf(c->peer, sizeof(c->peer), "%s:%u", u->host, u->port);
    }
    if (c->ctx == NULL) {
        MC_DEBUG(HA, "redis: %s", connect_err);
        mc_free(c);
        return MC_ERR_CONN_CLOSED;
    }
    c->timeout_us = timeout_us;
    if (u->db != 0) {
        redisReply *r = redisCommand(c->ctx, "SELECT %d", u->db);
        int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (r != NULL)
            freeReplyObject(r);
        if (!ok) {
            snprintf(connect_err, sizeof(connect_err), "%s: SELECT %d failed", c->peer, u->db);
            MC_WARN(HA, "redis %s", connect_err);
            mc_ha_redis_close(c);
            return MC_ERR_CONN_CLOSED;
        }
    }
    *out = c;
    return MC_OK;
}

const char *mc_ha_redis_connect_err(void)
{
    return connect_err;
}

const char *mc_ha_redis_peer(const mc_ha_redis_t *c)
{
    return c->peer;
}

void mc_ha_redis_close(mc_ha_redis_t *c)
{
    if (c == NULL)
        return;
    if (c->ctx != NULL)
        redisFree(c->ctx);
    mc_free(c);
}

void mc_ha_redis_set_timeout(mc_ha_redis_t *c, uint64_t timeout_us)
{
    struct timeval tv;
    set_tv(&tv, timeout_us);
    c->timeout_us = timeout_us;
    if (c->ctx->err == 0)
        redisSetTimeout(c->ctx, tv);
}

const char *mc_ha_redis_err(const mc_ha_redis_t *c)
{
    return c->err;
}

/* mc_ha_reply_t is hiredis' redisReply under another name */
static const redisReply *rep(const mc_ha_reply_t *r)
{
    return (const redisReply *)r;
}

mc_ha_reply_type_t mc_ha_reply_type(const mc_ha_reply_t *r)
{
    if (r == NULL)
        return MC_HA_REPLY_OTHER;
    switch (rep(r)->type) {
    case REDIS_REPLY_NIL:
        return MC_HA_REPLY_NIL;
    case REDIS_REPLY_INTEGER:
        return MC_HA_REPLY_INT;
    case REDIS_REPLY_STRING:
        return MC_HA_REPLY_STR;
    case REDIS_REPLY_STATUS:
        return MC_HA_REPLY_STATUS;
    case REDIS_REPLY_ARRAY:
        return MC_HA_REPLY_ARRAY;
    default:
        return MC_HA_REPLY_OTHER;
    }
}

long long mc_ha_reply_int(const mc_ha_reply_t *r)
{
    return mc_ha_reply_type(r) == MC_HA_REPLY_INT ? rep(r)->integer : 0;
}

const char *mc_ha_reply_str(const mc_ha_reply_t *r)
{
    mc_ha_reply_type_t t = mc_ha_reply_type(r);
    return t == MC_HA_REPLY_STR || t == MC_HA_REPLY_STATUS ? rep(r)->str : NULL;
}

size_t mc_ha_reply_strlen(const mc_ha_reply_t *r)
{
    return mc_ha_reply_str(r) != NULL ? rep(r)->len : 0;
}

size_t mc_ha_reply_count(const mc_ha_reply_t *r)
{
    return mc_ha_reply_type(r) == MC_HA_REPLY_ARRAY ? rep(r)->elements : 0;
}

const mc_ha_reply_t *mc_ha_reply_at(const mc_ha_reply_t *r, size_t i)
{
    return i < mc_ha_reply_count(r) ? (const mc_ha_reply_t *)rep(r)->element[i] : NULL;
}

mc_status_t mc_ha_redis_cmd(mc_ha_redis_t *c, mc_ha_reply_t **reply, int argc, const char **argv,
                            const size_t *lens)
{
    if (c->ctx->err) {
        snprintf(c->err, sizeof(c->err), "%s", c->ctx->errstr);
        return MC_ERR_CONN_CLOSED;
    }
    if (c->broken)
        return MC_ERR_CONN_CLOSED; /* c->err still says why */
    redisReply *r = redisCommandArgv(c->ctx, argc, argv, lens);
    if (r == NULL) {
        snprintf(c->err, sizeof(c->err), "%s", c->ctx->err ? c->ctx->errstr : "no reply");
        return MC_ERR_CONN_CLOSED;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(c->err, sizeof(c->err), "%.*s", (int)r->len, r->str);
        freeReplyObject(r);
        /* a primary turned replica by a failover, one still loading its data
         * or a replica that lost its primary: another server must be found */
        if (strncmp(c->err, "READONLY", 8) == 0 || strncmp(c->err, "LOADING", 7) == 0 ||
            strncmp(c->err, "MASTERDOWN", 10) == 0) {
            c->broken = 1;
            return MC_ERR_CONN_CLOSED;
        }
        return MC_ERR_ETCD_OPERATION_ERROR;
    }
    *reply = (mc_ha_reply_t *)r;
    return MC_OK;
}

mc_status_t mc_ha_redis_wait(mc_ha_redis_t *c, unsigned n, uint64_t timeout_ms, unsigned *acked)
{
    char ns[16], ts[24];
    snprintf(ns, sizeof(ns), "%u", n);
    snprintf(ts, sizeof(ts), "%llu", (unsigned long long)timeout_ms);
    const char *argv[3] = {"WAIT", ns, ts};
    size_t lens[3] = {4, strlen(ns), strlen(ts)};
    uint64_t old = c->timeout_us;
    mc_ha_redis_set_timeout(c, (timeout_ms + 1000) * 1000);
    mc_ha_reply_t *v = NULL;
    mc_status_t st = mc_ha_redis_cmd(c, &v, 3, argv, lens);
    mc_ha_redis_set_timeout(c, old);
    if (st != MC_OK)
        return st;
    redisReply *r = (redisReply *)v;
    if (r->type != REDIS_REPLY_INTEGER) {
        snprintf(c->err, sizeof(c->err), "WAIT: a reply of type %d instead of an integer", r->type);
        freeReplyObject(r);
        return MC_ERR_ETCD_OPERATION_ERROR;
    }
    *acked = r->integer > 0 ? (unsigned)r->integer : 0;
    freeReplyObject(r);
    return MC_OK;
}

void mc_ha_redis_free(mc_ha_reply_t *reply)
{
    if (reply != NULL)
        freeReplyObject(reply);
}

mc_status_t mc_ha_parse_lease(const char *v, size_t len, char *addr, size_t addr_len, int64_t *view)
{
    char tmp[MC_HA_ADDR_MAX + 64];
    if (len == 0 || len >= sizeof(tmp))
        return MC_ERR_INVALID_PARAMS;
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    char *sp = strchr(tmp, ' ');
    if (sp == NULL || sp == tmp || (size_t)(sp - tmp) >= addr_len)
        return MC_ERR_INVALID_PARAMS;
    char *end = NULL;
    errno = 0;
    long long vv = strtoll(sp + 1, &end, 10);
    if (errno != 0 || end == sp + 1 || *end != ' ' || vv <= 0)
        return MC_ERR_INVALID_PARAMS;
    memcpy(addr, tmp, (size_t)(sp - tmp));
    addr[sp - tmp] = '\0';
    if (view != NULL)
        *view = vv;
    return MC_OK;
}

mc_status_t mc_ha_resolve_leader(const mc_ha_url_t *u, uint64_t timeout_us, char *addr,
                                 size_t addr_len, int64_t *view)
{
    mc_ha_redis_t *c;
    mc_status_t st = mc_ha_redis_connect(u, timeout_us, &c);
    if (st != MC_OK)
        return st;
    char key[MC_HA_CLUSTER_MAX + 32];
    mc_ha_key(key, sizeof(key), u->cluster, "lease");
    const char *argv[2] = {"GET", key};
    size_t lens[2] = {3, strlen(key)};
    mc_ha_reply_t *r = NULL;
    st = mc_ha_redis_cmd(c, &r, 2, argv, lens);
    if (st == MC_OK) {
        if (mc_ha_reply_type(r) == MC_HA_REPLY_NIL) {
            st = MC_ERR_NOT_FOUND;
        } else if (mc_ha_reply_type(r) != MC_HA_REPLY_STR ||
                   mc_ha_parse_lease(mc_ha_reply_str(r), mc_ha_reply_strlen(r), addr, addr_len,
                                     view) != MC_OK) {
            MC_WARN(HA, "redis key %s does not hold a lease \"ADDR VIEW NONCE\"", key);
            st = MC_ERR_INVALID_PARAMS;
        }
        mc_ha_redis_free(r);
    }
    mc_ha_redis_close(c);
    return st;
}
