/*
 * master_scan.c - the regex forms (get_replica_list_by_regex,
 * remove_by_regex), key listing and remove_all. See master.h ("regex scans,
 * step by step").
 *
 * A pattern is matched with no lock held: a shard's keys are copied under its
 * lock (a memcpy per key), the lock is released, and the regex runs on the
 * copies. Whatever a pattern costs (util/regex.h bounds each match), no put
 * or get ever waits behind it. The matches are then looked up again, under
 * their shard lock, and acted on as the objects are at that moment.
 *
 * Copied keys are records in a byte buffer: hash (8 bytes), length (2), key.
 */
#include <stdio.h>
#include <string.h>

#include "store/master_int.h"
#include "util/buf.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

#define REC_HDR 10 /* hash + length */

struct mc_master_scan {
    mc_master_scan_kind_t kind;
    int force;
    size_t max;     /* matches wanted at most (0: no cap) */
    mc_regex_t *re; /* NULL: every key matches */
    unsigned shard; /* next shard to copy */
    mc_buf_t chunk; /* the copied keys of the current shard, unread from off */
    mc_buf_t hits;  /* the matched keys, in shard order */
    size_t nhits;
    int matched; /* phase 1 over */
};

static mc_status_t rec_add(mc_buf_t *b, uint64_t h, const char *key, uint16_t len)
{
    if (mc_buf_reserve(b, REC_HDR + len) != MC_OK)
        return MC_ERR_NOMEM;
    uint8_t *p = mc_buf_tail(b);
    memcpy(p, &h, 8);
    memcpy(p + 8, &len, 2);
    memcpy(p + REC_HDR, key, len);
    mc_buf_produce(b, REC_HDR + len);
    return MC_OK;
}

/* The record at p: its hash, key and length; returns the next record. */
static const uint8_t *rec_get(const uint8_t *p, uint64_t *h, const char **key, uint16_t *len)
{
    memcpy(h, p, 8);
    memcpy(len, p + 8, 2);
    *key = (const char *)p + REC_HDR;
    return p + REC_HDR + *len;
}

mc_status_t mc_master_scan_create(mc_master_t *m, mc_master_scan_kind_t kind, const char *regex,
                                  size_t len, int force, size_t max, mc_master_scan_t **out,
                                  char *why, size_t whylen)
{
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    if (kind > MC_MASTER_SCAN_KEYS || out == NULL ||
        (regex == NULL && kind != MC_MASTER_SCAN_KEYS)) {
        if (why != NULL && whylen > 0)
            snprintf(why, whylen, "no regex given");
        return MC_ERR_INVALID_PARAMS;
    }
    mc_master_scan_t *sc = MC_NEW(mc_master_scan_t);
    if (sc == NULL)
        return MC_ERR_NOMEM;
    sc->kind = kind;
    sc->force = force;
    sc->max = kind == MC_MASTER_SCAN_REPLICAS ? m->o.regex_max_results
              : kind == MC_MASTER_SCAN_KEYS   ? max
                                              : 0;
    if (regex != NULL) {
        mc_status_t st = mc_regex_compile(regex, len, &m->o.regex, &sc->re, why, whylen);
        if (st != MC_OK) {
            mc_free(sc);
            return st;
        }
    }
    *out = sc;
    return MC_OK;
}

void mc_master_scan_destroy(mc_master_scan_t *sc)
{
    if (sc == NULL)
        return;
    mc_regex_free(sc->re);
    mc_buf_fini(&sc->chunk);
    mc_buf_fini(&sc->hits);
    mc_free(sc);
}

size_t mc_master_scan_matched(const mc_master_scan_t *sc)
{
    return sc->nhits;
}

/* Whether an object of the table is one this kind of scan reports. */
static int wanted(const mc_master_scan_t *sc, const obj_t *o)
{
    return sc->kind != MC_MASTER_SCAN_REPLICAS || o->state == OBJ_COMPLETE;
}

/* Copy the keys of shard s that this scan may report into sc->chunk. */
static mc_status_t copy_shard(mc_master_t *m, mc_master_scan_t *sc, unsigned s)
{
    shard_t *sh = &m->shards[s];
    mc_status_t st = MC_OK;
    mc_buf_reset(&sc->chunk);
    shard_lock(sh);
    OTAB_WALK(&sh->tab, i, k)
    {
        otab_walk_prefetch(&sh->tab, i);
        obj_t *o = sh->tab.slots[i].obj;
        if (o == NULL || !wanted(sc, o))
            continue;
        st = rec_add(&sc->chunk, sh->tab.slots[i].hash, obj_key(o), o->key_len);
        if (st != MC_OK)
            break;
    }
    shard_unlock(sh);
    return st;
}

/* The cap was reached: REPLICAS keeps one match more than it reports, to
 * know that the list was cut short. */
static int full(const mc_master_scan_t *sc)
{
    if (sc->max == 0)
        return 0;
    return sc->nhits >= (sc->kind == MC_MASTER_SCAN_REPLICAS ? sc->max + 1 : sc->max);
}

mc_status_t mc_master_scan_step(mc_master_t *m, mc_master_scan_t *sc, size_t keys, char *why,
                                size_t whylen)
{
    if (sc->matched)
        return MC_OK;
    size_t ran = 0;
    for (;;) {
        if (full(sc)) {
            sc->matched = 1;
            return MC_OK;
        }
        if (mc_buf_used(&sc->chunk) == 0) {
            if (sc->shard == MC_MASTER_NUM_SHARDS) {
                sc->matched = 1;
                mc_buf_fini(&sc->chunk);
                return MC_OK;
            }
            mc_status_t st = copy_shard(m, sc, sc->shard++);
            if (st != MC_OK)
                return st;
            continue;
        }
        if (keys != 0 && ran == keys)
            return MC_INPROGRESS;
        uint64_t h;
        const char *key;
        uint16_t len;
        const uint8_t *rec = mc_buf_head(&sc->chunk);
        size_t rlen = (size_t)(rec_get(rec, &h, &key, &len) - rec);
        int hit = 1;
        if (sc->re != NULL) {
            mc_status_t st = mc_regex_match(sc->re, key, len, &hit, why, whylen);
            ran++;
            if (st == MC_ERR_LIMIT)
                return MC_ERR_INVALID_PARAMS; /* the pattern's fault: why says which limit */
            if (st != MC_OK)
                return st;
        }
        if (hit) {
            mc_status_t st = rec_add(&sc->hits, h, key, len);
            if (st != MC_OK)
                return st;
            sc->nhits++;
        }
        mc_buf_consume(&sc->chunk, rlen);
    }
}

/* Walk the matches, taking each shard's lock once for its run of records:
 * fn(o or NULL when gone, h, key, len) under the lock; after_shard(sh) before
 * its unlock. fn returns non-zero to stop. */
typedef int (*visit_fn_t)(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h, const char *key,
                          uint16_t len, void *arg);

static void visit_hits(mc_master_t *m, mc_master_scan_t *sc, visit_fn_t fn, void *arg, int shrink)
{
    const uint8_t *p = mc_buf_head(&sc->hits), *end = p + mc_buf_used(&sc->hits);
    shard_t *held = NULL;
    int stop = 0;
    while (p < end && !stop) {
        uint64_t h;
        const char *key;
        uint16_t len;
        p = rec_get(p, &h, &key, &len);
        shard_t *sh = &m->shards[shard_of(h)];
        if (sh != held) {
            if (held != NULL) {
                if (shrink)
                    otab_shrink(&held->tab);
                shard_unlock(held);
            }
            shard_lock(sh);
            held = sh;
        }
        stop = fn(m, sh, otab_find(&sh->tab, h, key, len), h, key, len, arg);
    }
    if (held != NULL) {
        if (shrink)
            otab_shrink(&held->tab);
        shard_unlock(held);
    }
}

typedef struct replicas_ctx {
    mc_master_scan_t *sc;
    uint64_t now_us;
    mc_master_replicas_cb_t cb;
    void *arg;
    size_t cnt;
    int trunc;
} replicas_ctx_t;

static int visit_replicas(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h, const char *key,
                          uint16_t len, void *arg)
{
    replicas_ctx_t *x = arg;
    mc_master_replica_desc_t reps[MC_MASTER_MAX_REPLICAS];
    (void)sh, (void)h, (void)key, (void)len;
    if (o == NULL || o->state != OBJ_COMPLETE)
        return 0;
    if (x->cnt == x->sc->max) {
        x->trunc = 1; /* one more readable match than the cap */
        return 1;
    }
    uint32_t nr = read_grant(m, o, x->now_us, reps, MC_MASTER_MAX_REPLICAS, 0);
    if (nr == 0)
        return 0;
    x->cnt++;
    return x->cb(x->arg, obj_key(o), o->key_len, reps, nr) != 0;
}

mc_status_t mc_master_scan_replicas(mc_master_t *m, mc_master_scan_t *sc, uint64_t now_us,
                                    mc_master_replicas_cb_t cb, void *arg, size_t *count,
                                    int *truncated)
{
    if (!sc->matched || sc->kind != MC_MASTER_SCAN_REPLICAS || cb == NULL)
        return MC_ERR_STATE;
    replicas_ctx_t x = {.sc = sc, .now_us = now_us, .cb = cb, .arg = arg};
    visit_hits(m, sc, visit_replicas, &x, 0);
    if (count != NULL)
        *count = x.cnt;
    if (truncated != NULL)
        *truncated = x.trunc;
    return MC_OK;
}

typedef struct remove_ctx {
    int force;
    uint64_t now_us;
    long cnt;
} remove_ctx_t;

static int visit_remove(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h, const char *key,
                        uint16_t len, void *arg)
{
    remove_ctx_t *x = arg;
    if (o != NULL && remove_locked(m, sh, h, key, len, x->force, x->now_us) == MC_OK)
        x->cnt++;
    return 0;
}

mc_status_t mc_master_scan_remove(mc_master_t *m, mc_master_scan_t *sc, uint64_t now_us,
                                  long *count)
{
    if (!sc->matched || sc->kind != MC_MASTER_SCAN_REMOVE)
        return MC_ERR_STATE;
    remove_ctx_t x = {.force = sc->force, .now_us = now_us};
    visit_hits(m, sc, visit_remove, &x, 1);
    if (count != NULL)
        *count = x.cnt;
    return MC_OK;
}

typedef struct keys_ctx {
    mc_master_key_cb_t cb;
    void *arg;
    size_t cnt;
} keys_ctx_t;

static int visit_keys(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h, const char *key,
                      uint16_t len, void *arg)
{
    keys_ctx_t *x = arg;
    (void)m, (void)sh, (void)h, (void)key, (void)len;
    if (o == NULL)
        return 0;
    int complete = o->state == OBJ_COMPLETE;
    mc_master_key_info_t ki = {
        .key = obj_key(o),
        .key_len = o->key_len,
        .size = o->size,
        .nrep = o->nrep,
        .disk = o->disk,
        .complete = complete,
        .lease_until_us = complete ? o->lease_us : 0,
        .soft_pin_until_us = complete && o->pin_ttl_ms != 0 ? o->pin_us : 0,
        .last_access_us = o->access_us,
    };
    x->cnt++;
    return x->cb(x->arg, &ki) != 0;
}

mc_status_t mc_master_scan_keys(mc_master_t *m, mc_master_scan_t *sc, mc_master_key_cb_t cb,
                                void *arg, size_t *count)
{
    if (!sc->matched || sc->kind != MC_MASTER_SCAN_KEYS || cb == NULL)
        return MC_ERR_STATE;
    keys_ctx_t x = {.cb = cb, .arg = arg};
    visit_hits(m, sc, visit_keys, &x, 0);
    if (count != NULL)
        *count = x.cnt;
    return MC_OK;
}

/* ---- the whole walk in one call ---- */

/* Create and match to the end; the reason of a refusal is logged. */
static mc_status_t scan_all(mc_master_t *m, mc_master_scan_kind_t kind, const char *regex,
                            int force, size_t max, mc_master_scan_t **out)
{
    char why[256];
    mc_master_scan_t *sc = NULL;
    mc_status_t st = mc_master_scan_create(m, kind, regex, regex ? strlen(regex) : 0, force, max,
                                           &sc, why, sizeof(why));
    while (st == MC_OK && (st = mc_master_scan_step(m, sc, 0, why, sizeof(why))) == MC_INPROGRESS)
        ;
    if (st != MC_OK) {
        if (st == MC_ERR_INVALID_PARAMS)
            MC_DEBUG(MASTER, "regex '%s' refused: %s", regex ? regex : "", why);
        mc_master_scan_destroy(sc);
        return st;
    }
    *out = sc;
    return MC_OK;
}

mc_status_t mc_master_get_replica_list_by_regex(mc_master_t *m, const char *regex, uint64_t now_us,
                                                mc_master_replicas_cb_t cb, void *arg,
                                                size_t *count, int *truncated)
{
    if (regex == NULL || cb == NULL)
        return MC_ERR_INVALID_PARAMS;
    mc_master_scan_t *sc;
    mc_status_t st = scan_all(m, MC_MASTER_SCAN_REPLICAS, regex, 0, 0, &sc);
    if (st != MC_OK)
        return st;
    st = mc_master_scan_replicas(m, sc, now_us, cb, arg, count, truncated);
    mc_master_scan_destroy(sc);
    return st;
}

mc_status_t mc_master_remove_by_regex(mc_master_t *m, const char *regex, int force, uint64_t now_us,
                                      long *count)
{
    if (regex == NULL)
        return MC_ERR_INVALID_PARAMS;
    mc_master_scan_t *sc;
    mc_status_t st = scan_all(m, MC_MASTER_SCAN_REMOVE, regex, force, 0, &sc);
    if (st != MC_OK)
        return st;
    st = mc_master_scan_remove(m, sc, now_us, count);
    mc_master_scan_destroy(sc);
    return st;
}

mc_status_t mc_master_foreach_key(mc_master_t *m, const char *regex, size_t max,
                                  mc_master_key_cb_t cb, void *arg, size_t *count)
{
    if (cb == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (max == 0) {
        if (count != NULL)
            *count = 0;
        return MC_OK;
    }
    mc_master_scan_t *sc;
    mc_status_t st = scan_all(m, MC_MASTER_SCAN_KEYS, regex, 0, max, &sc);
    if (st != MC_OK)
        return st;
    st = mc_master_scan_keys(m, sc, cb, arg, count);
    mc_master_scan_destroy(sc);
    return st;
}

/* No pattern to match: one pass under each shard's lock, as a remove does. */
mc_status_t mc_master_remove_all(mc_master_t *m, int force, uint64_t now_us, long *count)
{
    long cnt = 0;
    for (unsigned s = 0; s < MC_MASTER_NUM_SHARDS; s++) {
        shard_t *sh = &m->shards[s];
        shard_lock(sh);
        OTAB_WALK(&sh->tab, i, k)
        {
            otab_walk_prefetch(&sh->tab, i);
            obj_t *o = sh->tab.slots[i].obj;
            if (o != NULL && remove_locked(m, sh, sh->tab.slots[i].hash, obj_key(o), o->key_len,
                                           force, now_us) == MC_OK)
                cnt++;
        }
        otab_shrink(&sh->tab);
        shard_unlock(sh);
    }
    if (count != NULL)
        *count = cnt;
    return MC_OK;
}
