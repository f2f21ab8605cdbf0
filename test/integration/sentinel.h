/*
 * sentinel.h - cluster.h's Redis with Sentinels: a primary, its replica and
 * three Redis Sentinels on free ports of 127.0.0.1, for tests and the chaos
 * driver (no cmocka here: functions return 0 or -1 and say why on stderr).
 * redis-server is cluster.h's tc_redis_start (a replica: tc_redis_t's
 * replica_of), the Sentinels its tc_spawn, so the exit hook stops whatever a
 * failed test left running. Header-only.
 *
 * Sentinels watch the primary as TEST_SENTINEL_NAME with down-after 1 s and
 * a failover timeout of 5 s, so a killed primary is replaced within a few
 * seconds. Redis runs without persistence and starts full syncs at once.
 */
#ifndef MC_TEST_SENTINEL_H
#define MC_TEST_SENTINEL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cluster.h"

#define TEST_SENTINEL_NAME "mcprimary"
#define TEST_NSENTINELS 3

typedef struct test_sentinels {
    const char *redis_bin, *sentinel_bin;
    char dir[256];       /* logs, configuration files */
    tc_redis_t redis[2]; /* [0] the first primary, [1] its replica (.port) */
    test_proc_t sent[TEST_NSENTINELS];
    unsigned sent_port[TEST_NSENTINELS];
    char list[256]; /* "HOST:P1,HOST:P2,..." for redis-sentinel:// URLs */
    char host[64];  /* the address they announce (127.0.0.1 unless ts_start_at) */
} test_sentinels_t;

/* One command to 127.0.0.1:port; the reply (freeReplyObject) or NULL. */
static inline redisReply *ts_cmd(unsigned port, const char *fmt, ...)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", (int)port, tv);
    if (c == NULL || c->err) {
        if (c != NULL)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

/* redis-server i on its port (chosen the first time), in t->dir;
 * replica_of: 0 = a primary, else that port. */
static inline int ts_start_redis(test_sentinels_t *t, int i, unsigned replica_of)
{
    tc_redis_t *r = &t->redis[i];
    snprintf(r->dir, sizeof(r->dir), "%s", t->dir);
    r->host = t->host;
    r->replica_of = replica_of;
    return tc_redis_start(r);
}

/* Replicas of the primary on port that are in sync, or -1. */
static inline int ts_online_replicas(unsigned port)
{
    redisReply *r = ts_cmd(port, "INFO replication");
    int n = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        n = 0;
        for (const char *p = r->str; (p = strstr(p, "state=online")) != NULL; p++)
            n++;
    }
    if (r != NULL)
        freeReplyObject(r);
    return n;
}

static inline int ts_wait_replicas(unsigned port, int n, int ms)
{
    for (int waited = 0; ts_online_replicas(port) < n; waited += 20) {
        if (waited > ms) {
            fprintf(stderr, "redis %u: fewer than %d replicas in sync within %d ms\n", port, n, ms);
            return -1;
        }
        usleep(20000);
    }
    return 0;
}

static inline int ts_start_sentinel(test_sentinels_t *t, int i)
{
    char conf[300];
    t->sent_port[i] = test_free_port();
    snprintf(conf, sizeof(conf), "%s/sentinel-%d.conf", t->dir, i);
    FILE *f = fopen(conf, "w");
    if (f == NULL)
        return -1;
    fprintf(f,
            "port %u\nbind 127.0.0.1%s%s\nprotected-mode %s\ndaemonize no\ndir %s\n"
            "logfile %s/sentinel-%d.log\n"
            "sentinel monitor " TEST_SENTINEL_NAME " %s %u 2\n"
            "sentinel down-after-milliseconds " TEST_SENTINEL_NAME " 1000\n"
            "sentinel failover-timeout " TEST_SENTINEL_NAME " 5000\n"
            "sentinel parallel-syncs " TEST_SENTINEL_NAME " 1\n",
            t->sent_port[i], strcmp(t->host, "127.0.0.1") ? " " : "",
            strcmp(t->host, "127.0.0.1") ? t->host : "",
            strcmp(t->host, "127.0.0.1") ? "no" : "yes", t->dir, t->dir, i, t->host,
            t->redis[0].port);
    fclose(f);
    char *argv[] = {(char *)t->sentinel_bin, conf, NULL};
    if (tc_spawn(&t->sent[i], argv) != 0 ||
        tc_wait_listening(&t->sent[i], t->sent_port[i], 5000 * TC_SLOW) != 0) {
        fprintf(stderr, "redis-sentinel did not listen on port %u within 5 s\n", t->sent_port[i]);
        return -1;
    }
    return 0;
}

/* A numeric field of SENTINEL MASTER NAME as Sentinel i sees it, or -1. */
static inline long ts_master_field(test_sentinels_t *t, int i, const char *field)
{
    redisReply *r = ts_cmd(t->sent_port[i], "SENTINEL MASTER %s", TEST_SENTINEL_NAME);
    long v = -1;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY)
        for (size_t k = 0; k + 1 < r->elements; k += 2)
            if (r->element[k]->type == REDIS_REPLY_STRING && strcmp(r->element[k]->str, field) == 0)
                v = strtol(r->element[k + 1]->str, NULL, 10);
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

/* Wait until every Sentinel knows the replica and the other Sentinels
 * (hello messages every 2 s): before that, they cannot agree on a failover. */
static inline int ts_wait_ready(test_sentinels_t *t, int ms)
{
    for (int waited = 0;; waited += 100) {
        int ready = 1;
        for (int i = 0; i < TEST_NSENTINELS && ready; i++)
            ready = ts_master_field(t, i, "num-slaves") >= 1 &&
                    ts_master_field(t, i, "num-other-sentinels") == TEST_NSENTINELS - 1;
        if (ready)
            return 0;
        if (waited > ms) {
            fprintf(stderr, "the Sentinels did not find the replica and each other in %d ms\n", ms);
            return -1;
        }
        usleep(100000);
    }
}

/* Find the binaries (TEST_REDIS_SERVER, TEST_REDIS_SENTINEL override) and
 * start the primary, the replica (in sync) and the Sentinels in dir (which
 * exists; NULL: a temporary one, removed at exit), and wait until the
 * Sentinels could fail over. They listen on 127.0.0.1 and host (an address
 * of this machine other namespaces reach it at) and announce host. 0 or -1. */
static inline int ts_start_at(test_sentinels_t *t, const char *dir, const char *host)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->host, sizeof(t->host), "%s", host);
    if (dir != NULL) {
        snprintf(t->dir, sizeof(t->dir), "%s", dir);
    } else if (tc_tmpdir(t->dir, sizeof(t->dir), "sentinel") != 0) {
        return -1;
    }
    t->redis_bin = tc_redis_bin();
    t->sentinel_bin = getenv("TEST_REDIS_SENTINEL");
    if (t->sentinel_bin == NULL)
        t->sentinel_bin = "/usr/bin/redis-sentinel";
    if (access(t->redis_bin, X_OK) != 0 || access(t->sentinel_bin, X_OK) != 0) {
        fprintf(stderr,
                "FATAL: %s or %s not found: these tests need redis-server and "
                "redis-sentinel (make deps)\n",
                t->redis_bin, t->sentinel_bin);
        return -1;
    }
    if (ts_start_redis(t, 0, 0) != 0 || ts_start_redis(t, 1, t->redis[0].port) != 0 ||
        ts_wait_replicas(t->redis[0].port, 1, 5000) != 0)
        return -1;
    size_t at = 0;
    for (int i = 0; i < TEST_NSENTINELS; i++) {
        if (ts_start_sentinel(t, i) != 0)
            return -1;
        at += (size_t)snprintf(t->list + at, sizeof(t->list) - at, "%s%s:%u", i ? "," : "", t->host,
                               t->sent_port[i]);
    }
    return ts_wait_ready(t, 15000);
}

/* ts_start_at on 127.0.0.1. */
static inline int ts_start(test_sentinels_t *t, const char *dir)
{
    return ts_start_at(t, dir, "127.0.0.1");
}

/* The primary's port per Sentinel i, or 0. */
static inline unsigned ts_primary(test_sentinels_t *t, int i)
{
    redisReply *r =
        ts_cmd(t->sent_port[i], "SENTINEL get-master-addr-by-name %s", TEST_SENTINEL_NAME);
    unsigned port = 0;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        port = (unsigned)strtoul(r->element[1]->str, NULL, 10);
    if (r != NULL)
        freeReplyObject(r);
    return port;
}

/* Wait until every Sentinel names port as the primary. 0 or -1. */
static inline int ts_wait_primary(test_sentinels_t *t, unsigned port, int ms)
{
    for (int waited = 0;; waited += 50) {
        int all = 1;
        for (int i = 0; i < TEST_NSENTINELS && all; i++)
            all = t->sent[i].pid <= 0 || ts_primary(t, i) == port;
        if (all)
            return 0;
        if (waited > ms) {
            fprintf(stderr, "the Sentinels did not name %u the primary within %d ms\n", port, ms);
            return -1;
        }
        usleep(50000);
    }
}

/* Index (0/1) of the redis-server on port, or -1. */
static inline int ts_index(const test_sentinels_t *t, unsigned port)
{
    return port == t->redis[0].port ? 0 : port == t->redis[1].port ? 1 : -1;
}

/* Cut the replication link of the primary on port: its replicas may not
 * sync any more (an ACL takes PSYNC, SYNC and REPLCONF from the default user)
 * and their connections are dropped. Clients are not affected. 0 or -1. */
static inline int ts_cut_replication(unsigned port)
{
    redisReply *r = ts_cmd(port, "ACL SETUSER default -psync -sync -replconf");
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (r != NULL)
        freeReplyObject(r);
    r = ts_cmd(port, "CLIENT KILL TYPE replica");
    ok = ok && r != NULL && r->type == REDIS_REPLY_INTEGER;
    if (r != NULL)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* SIGKILL redis-server i and reap it. */
static inline void ts_kill_redis(test_sentinels_t *t, int i)
{
    tc_stop_ms(&t->redis[i].proc, SIGKILL, 1000);
}

static inline void ts_stop(test_sentinels_t *t)
{
    for (int i = 0; i < TEST_NSENTINELS; i++)
        tc_stop(&t->sent[i], SIGTERM);
    for (int i = 0; i < 2; i++)
        tc_redis_stop(&t->redis[i], SIGTERM);
}

#endif /* MC_TEST_SENTINEL_H */
