/*
 * ha_redis.h - the blocking Redis access of high availability: the masters'
 * HA thread (master_ha.c) and the clients' leader discovery (client.c). The
 * one wrapper around hiredis' synchronous API (docs/ARCHITECTURE.md §1): connection
 * errors, timeouts and error replies become mc_status_t here.
 *
 * Only for threads that may block (never a reactor): every command has the
 * connection's timeout.
 */
#ifndef MC_STORE_HA_REDIS_H
#define MC_STORE_HA_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "util/sentinel_url.h"

#define MC_HA_HOST_MAX 256
#define MC_HA_CLUSTER_MAX 128
#define MC_HA_ADDR_MAX 300

/* redis://HOST[:PORT][/DB][?cluster=ID], or
 * redis-sentinel://H1[:P1],H2[:P2].../NAME[/DB][?cluster=ID]: the primary
 * that the Sentinels watch under NAME, asked of them at every connection
 * (so a connection made after a failover reaches the new primary). */
typedef struct mc_ha_url {
    char host[MC_HA_HOST_MAX];       /* redis:// only */
    uint16_t port;                   /* 6379 */
    int db;                          /* 0 */
    char cluster[MC_HA_CLUSTER_MAX]; /* "" when absent */
    int sentinel;                    /* redis-sentinel://: the fields below */
    mc_sentinel_url_t sent;
} mc_ha_url_t;

/* MC_OK or MC_ERR_INVALID_ARGUMENT with *why naming the problem. */
mc_status_t mc_ha_url_parse(const char *s, mc_ha_url_t *out, const char **why);

/* 1 when s starts with "redis://" or "redis-sentinel://". */
int mc_ha_url_is_redis(const char *s);

/* "redis 10.0.0.5:6379/0" or "sentinels h1:26379,h2:26379 (primary NAME, db 0)"
 * for log lines. */
void mc_ha_url_describe(const mc_ha_url_t *u, char *buf, size_t n);

typedef struct mc_ha_redis mc_ha_redis_t;

/* Connect (and SELECT db) within timeout_us; commands then time out after
 * timeout_us too. With Sentinels: ask them in order (each within
 * timeout_us / their number, at least 100 ms) for the primary's address,
 * connect to it and check with ROLE that it is a primary (a Sentinel may still
 * name the old one during a failover); the next Sentinel is asked when one
 * does not answer or names a server that is not a primary.
 * MC_OK, MC_ERR_CONN_CLOSED (refused, unreachable, no primary known: logged
 * at DEBUG with the cause, which mc_ha_redis_connect_err() gives; the caller
 * decides how loud to be), MC_ERR_NOMEM. */
mc_status_t mc_ha_redis_connect(const mc_ha_url_t *u, uint64_t timeout_us, mc_ha_redis_t **out);
void mc_ha_redis_close(mc_ha_redis_t *c);
/* Why the last mc_ha_redis_connect() of this thread failed. */
const char *mc_ha_redis_connect_err(void);
/* "HOST:PORT" of the server connected to (the primary, with Sentinels). */
const char *mc_ha_redis_peer(const mc_ha_redis_t *c);
/* Change the command timeout (e.g. around a blocking XREAD). */
void mc_ha_redis_set_timeout(mc_ha_redis_t *c, uint64_t timeout_us);
/* Text of the last failure ("connection refused", the server's error reply). */
const char *mc_ha_redis_err(const mc_ha_redis_t *c);

/* A reply, read through the accessors below (hiredis' own type stays in
 * ha_redis.c). Error replies never reach the caller: mc_ha_redis_cmd turns
 * them into MC_ERR_ETCD_OPERATION_ERROR. */
typedef struct mc_ha_reply mc_ha_reply_t;
typedef enum mc_ha_reply_type {
    MC_HA_REPLY_OTHER, /* a type HA never asks for (RESP3 doubles, maps, ...) */
    MC_HA_REPLY_NIL,
    MC_HA_REPLY_INT,
    MC_HA_REPLY_STR,    /* a bulk string */
    MC_HA_REPLY_STATUS, /* a status line ("OK") */
    MC_HA_REPLY_ARRAY,
} mc_ha_reply_type_t;

/* MC_HA_REPLY_OTHER for NULL (an array element out of range). */
mc_ha_reply_type_t mc_ha_reply_type(const mc_ha_reply_t *r);
/* An INT reply's value; 0 for other types. */
long long mc_ha_reply_int(const mc_ha_reply_t *r);
/* A STR or STATUS reply's bytes, NUL-terminated (binary values may hold
 * NULs: use the length), owned by the reply; NULL and 0 for other types. */
const char *mc_ha_reply_str(const mc_ha_reply_t *r);
size_t mc_ha_reply_strlen(const mc_ha_reply_t *r);
/* An ARRAY reply's elements (0 for other types) and element i (NULL when
 * out of range), owned by the reply. */
size_t mc_ha_reply_count(const mc_ha_reply_t *r);
const mc_ha_reply_t *mc_ha_reply_at(const mc_ha_reply_t *r, size_t i);

/* One command. *reply (freed with mc_ha_redis_free) is set on MC_OK.
 * MC_ERR_CONN_CLOSED (the connection failed or timed out, or the server
 * cannot serve us any more - READONLY: a replica now, after a failover;
 * LOADING; MASTERDOWN -: it is unusable now; reconnect),
 * MC_ERR_ETCD_OPERATION_ERROR (another error reply: its text in
 * mc_ha_redis_err). */
mc_status_t mc_ha_redis_cmd(mc_ha_redis_t *c, mc_ha_reply_t **reply, int argc, const char **argv,
                            const size_t *lens);
void mc_ha_redis_free(mc_ha_reply_t *reply);

/* WAIT n timeout_ms: block until n replicas have every write this
 * connection made, or the timeout. *acked = the number that have. MC_OK (even
 * when *acked < n), or MC_ERR_CONN_CLOSED as mc_ha_redis_cmd. */
mc_status_t mc_ha_redis_wait(mc_ha_redis_t *c, unsigned n, uint64_t timeout_ms, unsigned *acked);

/* Keys of a cluster: "mc/CLUSTER/ha/NAME". */
void mc_ha_key(char *buf, size_t n, const char *cluster, const char *name);

/* Parse a lease value "ADDR VIEW NONCE". MC_OK or MC_ERR_INVALID_PARAMS. */
mc_status_t mc_ha_parse_lease(const char *v, size_t len, char *addr, size_t addr_len,
                              int64_t *view);

/* Connect, GET the lease, close: the leader's RPC address and view version.
 * MC_OK; MC_ERR_NOT_FOUND (no leader now); MC_ERR_CONN_CLOSED;
 * MC_ERR_INVALID_PARAMS (the lease holds something else: logged). */
mc_status_t mc_ha_resolve_leader(const mc_ha_url_t *u, uint64_t timeout_us, char *addr,
                                 size_t addr_len, int64_t *view);

#endif /* MC_STORE_HA_REDIS_H */
