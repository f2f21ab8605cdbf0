/*
 * sentinel_url.h - the address part of a redis-sentinel:// URL, shared by
 * the HA coordinator (store/ha_redis.c) and the redis metadata backend
 * (transport/metadata.c): a list of Redis Sentinels and the name of the
 * primary they watch.
 *
 *   redis-sentinel://H1[:P1],H2[:P2],.../NAME[/DB]
 *
 * P defaults to 26379 (Sentinel's port). NAME is the name given to
 * `sentinel monitor NAME ...`. DB is a decimal database index. Hosts are
 * names, IPv4 literals or bracketed IPv6 literals ("[::1]:26379").
 * Pure parsing: no I/O, no allocation.
 */
#ifndef MC_UTIL_SENTINEL_URL_H
#define MC_UTIL_SENTINEL_URL_H

#include <stdint.h>

#define MC_SENTINEL_SCHEME "redis-sentinel://"
#define MC_SENTINEL_DEFAULT_PORT 26379
#define MC_SENTINELS_MAX 8
#define MC_SENTINEL_HOST_MAX 256
#define MC_SENTINEL_NAME_MAX 128

typedef struct mc_sentinel_url {
    unsigned n; /* 1..MC_SENTINELS_MAX */
    struct {
        char host[MC_SENTINEL_HOST_MAX]; /* without brackets */
        uint16_t port;
    } s[MC_SENTINELS_MAX];
    char name[MC_SENTINEL_NAME_MAX]; /* the watched primary's name */
    int db;                          /* -1 when absent */
} mc_sentinel_url_t;

/* 1 when s starts with "redis-sentinel://". */
int mc_sentinel_url_is(const char *s);

/* Parse s (the whole URL, scheme included) up to its end or the first '?'.
 * 1 on success with *rest pointing at the '?' or the terminating NUL;
 * 0 with *why naming the problem. *out is written only on success. */
int mc_sentinel_url_parse(const char *s, mc_sentinel_url_t *out, const char **rest,
                          const char **why);

#endif /* MC_UTIL_SENTINEL_URL_H */
