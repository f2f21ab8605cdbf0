/*
 * master_test_util.h - helpers shared by the store/master*_test.c files:
 * a master with fake segments (the master never touches segment memory, so
 * any non-zero base address will do) and one-line put/get wrappers.
 */
#ifndef MC_TEST_MASTER_TEST_UTIL_H
#define MC_TEST_MASTER_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "store/master.h"
#include "util/mem.h"

#define SEC 1000000ull
#define MS 1000ull
/* test clock origin: far from 0 so "now - ttl" never wraps */
#define T0 (1000 * SEC)

static const mc_uuid_t C1 = {0x11, 0x1};
static const mc_uuid_t C2 = {0x22, 0x2};
static const mc_uuid_t C3 = {0x33, 0x3};

static inline mc_master_t *master_new(const mc_master_opts_t *o)
{
    mc_master_opts_t d;
    if (o == NULL) {
        mc_master_opts_init(&d);
        o = &d;
    }
    mc_master_t *m = NULL;
    assert_int_equal(mc_master_create(o, 7, &m), MC_OK);
    return m;
}

static inline mc_uuid_t seg_id(uint64_t n)
{
    mc_uuid_t id = {0x5e6, n};
    return id;
}

/* Defaults, except that clients never expire: for tests that jump the clock
 * by minutes without pinging. */
static inline mc_master_t *master_new_immortal(void)
{
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 1000000 * SEC;
    return master_new(&o);
}

/* Segment n: base n << 40, so addresses tell segments apart. */
static inline mc_status_t mount_seg(mc_master_t *m, mc_uuid_t client, uint64_t n, const char *name,
                                    uint64_t size, uint64_t now)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "%s:9000", name);
    mc_master_segment_t s = {
        .id = seg_id(n), .name = name, .te_endpoint = ep, .base = n << 40, .size = size};
    return mc_master_mount_segment(m, client, &s, now);
}

static inline mc_status_t put_start_n(mc_master_t *m, mc_uuid_t c, const char *key, uint64_t size,
                                      uint32_t replicas, uint64_t now, uint32_t *nrep)
{
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.replica_num = replicas;
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    mc_status_t st = mc_master_put_start(m, c, key, strlen(key), size, &cfg, now, d, &n);
    if (nrep != NULL)
        *nrep = n;
    return st;
}

/* PutStart + PutEnd at the same instant. */
static inline mc_status_t put_obj(mc_master_t *m, mc_uuid_t c, const char *key, uint64_t size,
                                  uint32_t replicas, uint64_t now)
{
    mc_status_t st = put_start_n(m, c, key, size, replicas, now, NULL);
    if (st != MC_OK)
        return st;
    return mc_master_put_end(m, c, key, strlen(key), now);
}

static inline mc_status_t put_pinned(mc_master_t *m, mc_uuid_t c, const char *key, uint64_t size,
                                     uint64_t now)
{
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    cfg.with_soft_pin = 1;
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n;
    mc_status_t st = mc_master_put_start(m, c, key, strlen(key), size, &cfg, now, d, &n);
    if (st != MC_OK)
        return st;
    return mc_master_put_end(m, c, key, strlen(key), now);
}

static inline mc_status_t get_n(mc_master_t *m, const char *key, uint64_t now, uint32_t *nrep)
{
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    mc_status_t st =
        mc_master_get_replica_list(m, key, strlen(key), now, d, MC_MASTER_MAX_REPLICAS, &n, NULL);
    if (nrep != NULL)
        *nrep = n;
    return st;
}

static inline int exists(mc_master_t *m, const char *key, uint64_t now)
{
    int e = -1;
    assert_int_equal(mc_master_exist_key(m, key, strlen(key), now, &e), MC_OK);
    return e;
}

static inline mc_status_t rm(mc_master_t *m, const char *key, int force, uint64_t now)
{
    return mc_master_remove(m, key, strlen(key), force, now);
}

static inline mc_master_stats_t stats(mc_master_t *m)
{
    mc_master_stats_t s;
    mc_master_get_stats(m, &s);
    return s;
}

static inline const char *key_of(char *buf, size_t cap, const char *prefix, unsigned i)
{
    snprintf(buf, cap, "%s%04u", prefix, i);
    return buf;
}

#endif /* MC_TEST_MASTER_TEST_UTIL_H */
