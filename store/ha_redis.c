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
    char err[256];
};

int mc_ha_url_is_redis(const char *s)
{
    return s != NULL && strncmp(s, "redis://", 8) == 0;
}

mc_status_t mc_ha_url_parse(const char *s, mc_ha_url_t *out, const char **why)
{
    mc_ha_url_t u;
    memset(&u, 0, sizeof(u));
    u.port = 6379;
    if (!mc_ha_url_is_redis(s)) {
        *why = "expected redis://HOST[:PORT][/DB][?cluster=ID]";
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
    if (*p == '?') {
        p++;
        if (strncmp(p, "cluster=", 8) != 0) {
            *why = "the only query parameter is cluster=ID";
            return MC_ERR_INVALID_ARGUMENT;
        }
        p += 8;
        size_t n = strlen(p);
        if (n == 0 || n >= sizeof(u.cluster) || strpbrk(p, "&? \t") != NULL) {
            *why = "cluster id empty, too long or with '&', '?' or blanks";
            return MC_ERR_INVALID_ARGUMENT;
        }
        memcpy(u.cluster, p, n);
        p += n;
    }
    if (*p != '\0') {
        *why = "unexpected characters after the address";
        return MC_ERR_INVALID_ARGUMENT;
    }
    *out = u;
    return MC_OK;
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

mc_status_t mc_ha_redis_connect(const mc_ha_url_t *u, uint64_t timeout_us, mc_ha_redis_t **out)
{
    mc_ha_redis_t *c = MC_NEW(mc_ha_redis_t);
    if (c == NULL)
        return MC_ERR_NOMEM;
    struct timeval tv;
    set_tv(&tv, timeout_us);
    c->ctx = redisConnectWithTimeout(u->host, u->port, tv);
    if (c->ctx == NULL) {
        mc_free(c);
        return MC_ERR_NOMEM;
    }
    if (c->ctx->err) {
        MC_DEBUG(HA, "redis %s:%u: %s", u->host, u->port, c->ctx->errstr);
        mc_ha_redis_close(c);
        return MC_ERR_CONN_CLOSED;
    }
    redisSetTimeout(c->ctx, tv);
    if (u->db != 0) {
        redisReply *r = redisCommand(c->ctx, "SELECT %d", u->db);
        int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (r != NULL)
            freeReplyObject(r);
        if (!ok) {
            MC_WARN(HA, "redis %s:%u: SELECT %d failed", u->host, u->port, u->db);
            mc_ha_redis_close(c);
            return MC_ERR_CONN_CLOSED;
        }
    }
    *out = c;
    return MC_OK;
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
    redisReply *r = redisCommandArgv(c->ctx, argc, argv, lens);
    if (r == NULL) {
        snprintf(c->err, sizeof(c->err), "%s", c->ctx->err ? c->ctx->errstr : "no reply");
        return MC_ERR_CONN_CLOSED;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(c->err, sizeof(c->err), "%.*s", (int)r->len, r->str);
        freeReplyObject(r);
        return MC_ERR_ETCD_OPERATION_ERROR;
    }
    *reply = (mc_ha_reply_t *)r;
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
