/*
 * meta_redis.c - the "redis://" metadata backend: hiredis' async API on the
 * reactor's event_base (hiredis' own libevent adapter). The one wrapper
 * around hiredis (docs/ARCHITECTURE.md §1): its conventions (ac->err/errstr, NULL replies,
 * REDIS_REPLY_ERROR) become mc_status_t here and nowhere else.
 *
 * Commands: get = GET, put = SET key val PX ttl, del = a compare-and-delete
 * script (DEL only while the key still holds the value this process put:
 * another process that took the key since, e.g. one started with the same
 * name, keeps its entry; a key we never put is left alone), list = SCAN
 * MATCH <prefix with * ? [ ] \ escaped>* COUNT 1000 until the cursor is 0
 * (duplicates dropped, the prefix checked again byte for byte), then MGET in
 * batches of 1000 (keys that expired in between are left out).
 *
 * Liveness: every entry we put is remembered and SET again every ttl/3 with a
 * fresh TTL, and after every (re)connect. An entry of a process that stops
 * refreshing disappears after ttl. Closing the backend does not delete
 * anything: the entries expire on their own.
 *
 * Connection states (changed only by set_state; transitions in conn_moves):
 *
 *   DOWN --conn_timer--> CONNECTING --connect cb ok--> CONNECTED --timer 0-->
 *     SELECTING (when /DB was given) --SELECT ok--> READY
 *     (or straight to READY)
 *   CONNECTING/CONNECTED/SELECTING --failure, conn_timer (connect timeout)--> DOWN
 *   READY --connection lost, a reply overdue, READONLY/LOADING/MASTERDOWN--> DOWN
 *   any --close / reactor stop--> CLOSED
 *
 * With Sentinels ("redis-sentinel://S1,S2/NAME[/DB]") two steps come in:
 *
 *   DOWN --conn_timer--> ASKING (SENTINEL get-master-addr-by-name NAME to one
 *     Sentinel; conn_timer = its timeout) --an address--> CONNECTING ...
 *     CONNECTED --timer 0--> ROLE (is it a primary?) --"master"--> SELECTING
 *     or READY
 *   ASKING --no answer, an error, no such name--> ASKING (the next Sentinel),
 *     or DOWN once every Sentinel was asked in this round
 *   ROLE --not a primary (a failover under way)--> DOWN
 *
 * So every connection (the first, and each one after a failure, which is
 * how a failover shows: the old primary dies, or answers READONLY once it
 * is a replica) goes to the primary the Sentinels name now.
 *
 * DOWN waits conn_timer (exponential backoff, 50 ms .. 1 s) before the next
 * attempt. Trouble is logged once per state change (WARN when the connection
 * goes or cannot be made, INFO when it is back), attempts in between at DEBUG.
 * CONNECTED exists because hiredis may not be freed from inside its connect
 * callback: the handshake continues from a timer.
 *
 * Calls: made while not READY they wait in `queue` and are sent when READY;
 * a connection attempt that fails fails them with MC_ERR_CONN_CLOSED (so a
 * call waits for one attempt at most). Sent calls are on `sent`, ordered by
 * deadline; a call not answered within call_timeout fails with
 * MC_ERR_RPC_TIMEOUT and, since a reply that late means a dead peer (host gone,
 * half-open TCP), the connection is dropped and made again. A connection that
 * dies fails what was sent with MC_ERR_CONN_CLOSED. Redis error replies are
 * MC_ERR_METADATA with the error text logged.
 *
 * An op handed to hiredis stays allocated until hiredis calls back (hiredis
 * always does, with a NULL reply when the context goes away). Its user
 * callback may have run before (timeout, close): then op->done is set; at
 * close op->m is cleared (the op is detached) and hiredis' late callback
 * only frees it.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <hiredis/adapters/libevent.h>

#include "reactor/guard.h"
#include "reactor/fsm.h"
#include "rpc/net.h"
#include "rpc/rpc.h"
#include "transport/metadata.h"
#include "util/hash.h"
#include "util/hmap.h"
#include "util/list.h"
#include "transport/meta_int.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/sentinel_url.h"
#include "util/time.h"

#define BACKOFF_MIN_US 50000
#define BACKOFF_MAX_US 1000000
#define CONNECT_TIMEOUT_MAX_US 3000000
#define SCAN_COUNT "1000"
#define MGET_BATCH 1000

typedef enum rc_state {
    RC_DOWN,       /* no context; conn_timer = backoff before the next attempt */
    RC_ASKING,     /* Sentinels only: one is asked for the primary (sac);
                    * conn_timer = its timeout */
    RC_CONNECTING, /* redisAsyncConnect issued; conn_timer = connect timeout */
    RC_CONNECTED,  /* TCP up; conn_timer fires at once to go on outside hiredis */
    RC_ROLE,       /* Sentinels only: ROLE sent; conn_timer still the connect timeout */
    RC_SELECTING,  /* SELECT sent; conn_timer still the connect timeout */
    RC_READY,      /* calls are sent; refresh_timer armed */
    RC_CLOSED,     /* closed or reactor stopped: calls are refused */
    RC_NSTATES
} rc_state_t;

static const char *const rc_state_names[] = {"DOWN", "ASKING",    "CONNECTING", "CONNECTED",
                                             "ROLE", "SELECTING", "READY",      "CLOSED"};

#define B MC_FSM_BIT
static const uint64_t rc_moves[] = {
    [RC_DOWN] = B(RC_ASKING) | B(RC_CONNECTING) | B(RC_CLOSED),
    [RC_ASKING] = B(RC_CONNECTING) | B(RC_DOWN) | B(RC_CLOSED),
    [RC_CONNECTING] = B(RC_CONNECTED) | B(RC_DOWN) | B(RC_CLOSED),
    [RC_CONNECTED] = B(RC_ROLE) | B(RC_SELECTING) | B(RC_READY) | B(RC_DOWN) | B(RC_CLOSED),
    [RC_ROLE] = B(RC_SELECTING) | B(RC_READY) | B(RC_DOWN) | B(RC_CLOSED),
    [RC_SELECTING] = B(RC_READY) | B(RC_DOWN) | B(RC_CLOSED),
    [RC_READY] = B(RC_DOWN) | B(RC_CLOSED),
    [RC_CLOSED] = 0,
};
#undef B

static const mc_fsm_desc_t rc_fsm =
    MC_FSM_DESC("redis_meta", MC_LOGC_METADATA, rc_state_names, rc_moves);

typedef struct meta_redis {
    mc_meta_t base; /* first: mc_meta_t * <-> meta_redis_t * */
    mc_meta_opts_t o;
    char name[600]; /* "redis://host:port[/db]" for log lines */
    char ip[64];    /* resolved at open: hiredis would resolve on the reactor thread
                     * (with Sentinels: the primary they named last) */
    uint16_t port;
    int db; /* -1 or 0: no SELECT */
    /* redis-sentinel:// (sen == NULL for redis://) */
    mc_sentinel_url_t *sen;
    char (*sen_ip)[64];     /* the Sentinels' addresses, resolved at open */
    unsigned sen_next;      /* the Sentinel to ask next (the last that answered) */
    unsigned sen_tried;     /* asked in this round, without an answer */
    redisAsyncContext *sac; /* the Sentinel being asked (ASKING) */
    char sen_why[200];      /* what the last Sentinel said, for the log */
    rc_state_t state;
    redisAsyncContext *ac; /* NULL unless CONNECTING..READY */
    meta_own_t *own;
    mc_list_t queue;          /* rop_t waiting for READY, FIFO (= deadline order) */
    mc_list_t sent;           /* rop_t handed to hiredis, by deadline */
    mc_timer_t conn_timer;    /* backoff (DOWN), connect timeout, or 0 (CONNECTED) */
    mc_timer_t refresh_timer; /* ttl/3 while READY */
    mc_timer_t dl_timer;      /* earliest deadline of queue and sent */
    uint64_t backoff_us;
    uint64_t connect_timeout_us;
    uint64_t ttl_ms;
    size_t refresh_inflight;
    int trouble_logged; /* a WARN about the connection was the last word */
    int refresh_err_logged;
    mc_reactor_hook_t stop_hook;
    int hooked;
    mc_guard_t guard; /* our callbacks on the stack: a close inside one waits (reactor/guard.h) */
} meta_redis_t;

typedef enum { R_GET, R_PUT, R_DEL, R_LIST, R_SELECT, R_REFRESH, R_ROLE } rkind_t;

static const char *const rkind_names[] = {"get", "put", "del", "list", "select", "refresh", "role"};

/* A list in progress: keys found so far (deduplicated), then their values. */
typedef struct lkey {
    mc_hnode_t node;
    size_t klen;
    void *val; /* mc_malloc'd, NULL until MGET found it */
    size_t vlen;
    int found;
    char key[]; /* NUL-terminated */
} lkey_t;

typedef struct rop {
    mc_list_t node;  /* in m->queue or m->sent; self-linked otherwise */
    meta_redis_t *m; /* NULL once detached (close): only hiredis' callback is awaited */
    rkind_t kind;
    int in_redis; /* hiredis holds (or is running) a reply callback with this op */
    int resent;   /* the reply being handled sent the op's next command */
    int done;     /* the user callback ran (internal ops: completed) */
    int ours;     /* del: the key holds (as far as we know) our value */
    uint64_t deadline;
    union {
        mc_meta_get_cb_t get;
        mc_meta_done_cb_t done;
        mc_meta_list_cb_t list;
    } cb;
    void *arg;
    /* list */
    int scanning; /* SCAN phase (else MGET phase) */
    char cursor[24];
    mc_hmap_t seen;
    lkey_t **keys;
    size_t nkeys, cap, next_mget, batch;
    /* key (NUL-terminated) then value, copied at submit: a queued op is sent later */
    size_t klen, vlen;
    char *val;
    char data[];
} rop_t;

static void mr_free(meta_redis_t *m);
static void conn_down(meta_redis_t *m, const char *why);
static void conn_start(meta_redis_t *m);
static void handshake_next(meta_redis_t *m);
static void arm_deadline(meta_redis_t *m);
static int op_send(meta_redis_t *m, rop_t *op);
static void op_free(rop_t *op);

static meta_redis_t *as_mr(mc_meta_t *b)
{
    return (meta_redis_t *)b;
}

static void set_state(meta_redis_t *m, rc_state_t to)
{
    if (m->state != to)
        (void)MC_FSM_SET(&rc_fsm, m, state, to);
}

static void cb_enter(meta_redis_t *m)
{
    mc_guard_enter(&m->guard);
}

/* After this, m may be gone. */
static void cb_leave(meta_redis_t *m)
{
    if (mc_guard_leave(&m->guard))
        mr_free(m);
}

/* ------------------------------------------------------------------ ops */

static rop_t *op_new(meta_redis_t *m, rkind_t kind, const char *key, const void *val, size_t vlen,
                     void *arg)
{
    size_t klen = key != NULL ? strlen(key) : 0;
    rop_t *op = mc_malloc(sizeof(*op) + klen + 1 + vlen);
    if (op == NULL)
        return NULL;
    memset(op, 0, sizeof(*op));
    mc_list_init(&op->node);
    op->m = m;
    op->kind = kind;
    op->arg = arg;
    op->klen = klen;
    op->vlen = vlen;
    memcpy(op->data, key != NULL ? key : "", klen + 1);
    op->val = op->data + klen + 1;
    if (vlen > 0)
        memcpy(op->val, val, vlen);
    op->deadline = mc_now_us() + m->o.call_timeout_us;
    return op;
}

static void list_state_free(rop_t *op)
{
    for (size_t i = 0; i < op->nkeys; i++) {
        mc_free(op->keys[i]->val);
        mc_free(op->keys[i]);
    }
    mc_free(op->keys);
    op->keys = NULL;
    op->nkeys = op->cap = 0;
    if (op->seen.buckets != NULL)
        mc_hmap_fini(&op->seen);
    op->seen.buckets = NULL;
}

static void op_free(rop_t *op)
{
    if (op->kind == R_LIST)
        list_state_free(op);
    mc_free(op);
}

/* Run the user callback with st (entries for a successful list, the value
 * for a successful get), once; unlink the op; free it unless hiredis still
 * holds it. */
static void op_complete(meta_redis_t *m, rop_t *op, mc_status_t st, const void *val, size_t len,
                        const mc_meta_entry_t *e, size_t n)
{
    mc_list_del(&op->node);
    op->done = 1;
    cb_enter(m);
    switch (op->kind) {
    case R_GET:
        op->cb.get(op->arg, st, st == MC_OK ? val : NULL, st == MC_OK ? len : 0);
        break;
    case R_PUT:
    case R_DEL:
        op->cb.done(op->arg, st);
        break;
    case R_LIST:
        op->cb.list(op->arg, st, st == MC_OK ? e : NULL, st == MC_OK ? n : 0);
        break;
    case R_REFRESH:
        m->refresh_inflight--;
        break;
    case R_SELECT:
    case R_ROLE:
        break;
    }
    if (!op->in_redis)
        op_free(op);
    cb_leave(m);
}

static void op_fail(meta_redis_t *m, rop_t *op, mc_status_t st)
{
    op_complete(m, op, st, NULL, 0, NULL, 0);
}

/* Fail (or cancel) every op on list l. Callbacks may add ops to other lists
 * (or, for the queue in a non-READY state, to this one: those stay). */
static void fail_list(meta_redis_t *m, mc_list_t *l, mc_status_t st)
{
    mc_list_t doomed;
    mc_list_init(&doomed);
    mc_list_splice_tail(&doomed, l);
    mc_list_t *pos;
    while ((pos = doomed.next) != &doomed) {
        rop_t *op = MC_LIST_ENTRY(pos, rop_t, node);
        op_fail(m, op, st); /* unlinks it from doomed */
    }
}

/* Keep `sent` ordered by deadline: ops come from the queue and refresh
 * rounds with different ages, so walk from the tail. */
static void sent_insert(meta_redis_t *m, rop_t *op)
{
    mc_list_t *pos = m->sent.prev;
    while (pos != &m->sent && MC_LIST_ENTRY(pos, rop_t, node)->deadline > op->deadline)
        pos = pos->prev;
    mc_list_insert_between(&op->node, pos, pos->next);
}

/* -------------------------------------------------------- reply handling */

/* Translate a reply that is not what the command returns on success into a
 * status, logging what Redis said. */
static mc_status_t reply_error(meta_redis_t *m, rop_t *op, const redisReply *rep)
{
    if (rep->type == REDIS_REPLY_ERROR) {
        MC_WARN(METADATA, "%s: %s '%s': redis error: %.*s", m->name, rkind_names[op->kind],
                op->data, (int)(rep->len < 200 ? rep->len : 200), rep->str);
    } else {
        MC_ERROR(METADATA, "%s: %s '%s': unexpected redis reply type %d", m->name,
                 rkind_names[op->kind], op->data, rep->type);
    }
    return MC_ERR_METADATA;
}

static void list_finish(meta_redis_t *m, rop_t *op)
{
    size_t n = 0;
    mc_meta_entry_t *e = NULL;
    if (op->nkeys > 0) {
        e = mc_calloc(op->nkeys, sizeof(*e));
        if (e == NULL) {
            op_fail(m, op, MC_ERR_NOMEM);
            return;
        }
    }
    for (size_t i = 0; i < op->nkeys; i++) {
        lkey_t *k = op->keys[i];
        if (!k->found)
            continue; /* expired or deleted between SCAN and MGET */
        e[n].key = k->key;
        e[n].val = k->val;
        e[n].len = k->vlen;
        n++;
    }
    op_complete(m, op, MC_OK, NULL, 0, e, n);
    mc_free(e);
}

/* Add one SCAN result if it really starts with the prefix (the pattern is a
 * pre-filter) and was not seen before (SCAN may repeat keys). */
static mc_status_t list_add_key(rop_t *op, const char *k, size_t kl)
{
    if (kl < op->klen || memcmp(k, op->data, op->klen) != 0 || memchr(k, '\0', kl) != NULL)
        return MC_OK; /* a key with a NUL cannot be handed out as a C string */
    uint64_t h = mc_hash64(k, kl);
    mc_hnode_t *n;
    MC_HMAP_FOREACH_HASH(&op->seen, n, h)
    {
        lkey_t *x = MC_CONTAINER_OF(n, lkey_t, node);
        if (x->klen == kl && memcmp(x->key, k, kl) == 0)
            return MC_OK;
    }
    if (op->nkeys == op->cap) {
        size_t cap = op->cap ? op->cap * 2 : 64;
        lkey_t **nk = mc_realloc(op->keys, cap * sizeof(*nk));
        if (nk == NULL)
            return MC_ERR_NOMEM;
        op->keys = nk;
        op->cap = cap;
    }
    lkey_t *x = mc_malloc(sizeof(*x) + kl + 1);
    if (x == NULL)
        return MC_ERR_NOMEM;
    x->klen = kl;
    x->val = NULL;
    x->vlen = 0;
    x->found = 0;
    memcpy(x->key, k, kl);
    x->key[kl] = '\0';
    mc_hmap_insert(&op->seen, &x->node, h);
    op->keys[op->nkeys++] = x;
    return MC_OK;
}

/* A SCAN or MGET answer arrived: take it in, then send the next step or
 * finish. */
static void list_reply(meta_redis_t *m, rop_t *op, const redisReply *rep)
{
    mc_status_t st = MC_OK;
    if (op->scanning) {
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
            rep->element[0]->type != REDIS_REPLY_STRING ||
            rep->element[0]->len >= sizeof(op->cursor) ||
            rep->element[1]->type != REDIS_REPLY_ARRAY) {
            op_fail(m, op, reply_error(m, op, rep));
            return;
        }
        const redisReply *ks = rep->element[1];
        for (size_t i = 0; i < ks->elements && st == MC_OK; i++) {
            if (ks->element[i]->type == REDIS_REPLY_STRING)
                st = list_add_key(op, ks->element[i]->str, ks->element[i]->len);
        }
        memcpy(op->cursor, rep->element[0]->str, rep->element[0]->len);
        op->cursor[rep->element[0]->len] = '\0';
        if (strcmp(op->cursor, "0") == 0)
            op->scanning = 0;
    } else {
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != op->batch) {
            op_fail(m, op, reply_error(m, op, rep));
            return;
        }
        for (size_t i = 0; i < op->batch && st == MC_OK; i++) {
            const redisReply *v = rep->element[i];
            lkey_t *k = op->keys[op->next_mget + i];
            if (v->type == REDIS_REPLY_NIL)
                continue;
            if (v->type != REDIS_REPLY_STRING) {
                op_fail(m, op, reply_error(m, op, v));
                return;
            }
            k->val = mc_malloc(v->len > 0 ? v->len : 1);
            if (k->val == NULL) {
                st = MC_ERR_NOMEM;
                break;
            }
            memcpy(k->val, v->str, v->len);
            k->vlen = v->len;
            k->found = 1;
        }
        op->next_mget += op->batch;
    }
    if (st != MC_OK) {
        op_fail(m, op, st);
        return;
    }
    if (!op->scanning && op->next_mget == op->nkeys) {
        list_finish(m, op);
        return;
    }
    if (op_send(m, op) != 0)
        op_fail(m, op, MC_ERR_METADATA);
}

static void handle_reply(meta_redis_t *m, rop_t *op, const redisReply *rep)
{
    switch (op->kind) {
    case R_GET:
        if (rep->type == REDIS_REPLY_STRING)
            op_complete(m, op, MC_OK, rep->str, rep->len, NULL, 0);
        else if (rep->type == REDIS_REPLY_NIL)
            op_fail(m, op, MC_ERR_NOT_FOUND);
        else
            op_fail(m, op, reply_error(m, op, rep));
        break;
    case R_PUT:
    case R_SELECT:
        if (rep->type == REDIS_REPLY_STATUS)
            op_fail(m, op, MC_OK);
        else
            op_fail(m, op, reply_error(m, op, rep));
        break;
    case R_DEL:
        /* DEL answers how many keys went; 0 (already gone) is fine too */
        if (rep->type == REDIS_REPLY_INTEGER)
            op_fail(m, op, MC_OK);
        else
            op_fail(m, op, reply_error(m, op, rep));
        break;
    case R_REFRESH:
        if (rep->type != REDIS_REPLY_STATUS && !m->refresh_err_logged) {
            /* once per round: every other entry is likely to say the same */
            (void)reply_error(m, op, rep);
            m->refresh_err_logged = 1;
        }
        op_fail(m, op, MC_OK);
        break;
    case R_LIST:
        list_reply(m, op, rep);
        break;
    case R_ROLE:
        op_fail(m, op, MC_OK); /* answered in on_reply */
        break;
    }
}

static void on_ready(meta_redis_t *m);

/* hiredis reply callback: every op sent. While it runs op->in_redis stays
 * set, so nothing below (a nested close, say) frees the op under us. */
static void on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    rop_t *op = privdata;
    const redisReply *rep = r;
    meta_redis_t *m = op->m;
    if (m == NULL || op->done) {
        /* detached at close, or timed out: nobody waits for this answer */
        op_free(op);
        return;
    }
    mc_reactor_t *saved = mc_reactor_enter(m->base.r);
    cb_enter(m);
    op->resent = 0;
    if (rep == NULL) {
        /* hiredis is tearing the context down (an error, or our own free).
         * Detach first, so that calls made by the callbacks wait for the
         * next connection instead of hitting the dying one. */
        if (ac == m->ac)
            conn_down(m, ac->err ? ac->errstr : "connection closed");
        if (!op->done)
            op_fail(m, op, op->kind == R_SELECT ? MC_OK : MC_ERR_CONN_CLOSED);
    } else if (op->kind == R_ROLE) {
        int primary = rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
                      rep->element[0]->type == REDIS_REPLY_STRING &&
                      strcmp(rep->element[0]->str, "master") == 0;
        op_fail(m, op, MC_OK);
        if (m->state == RC_ROLE && ac == m->ac) {
            if (primary) {
                handshake_next(m);
            } else {
                char why[160];
                snprintf(why, sizeof(why),
                         "%s:%u, named by a sentinel, is not a primary (a failover under way?)",
                         m->ip, m->port);
                conn_down(m, why);
                redisAsyncFree(ac); /* hiredis frees it once this callback returns */
            }
        }
    } else if (rep->type == REDIS_REPLY_ERROR && m->state == RC_READY && ac == m->ac &&
               (strncmp(rep->str, "READONLY", 8) == 0 || strncmp(rep->str, "LOADING", 7) == 0 ||
                strncmp(rep->str, "MASTERDOWN", 10) == 0)) {
        /* a primary turned replica by a failover, one still loading, a
         * replica that lost its primary: the call fails and the next
         * connection goes where the Sentinels (or the address) say now */
        char why[160];
        snprintf(why, sizeof(why), "%.*s", (int)(rep->len < 120 ? rep->len : 120), rep->str);
        op_fail(m, op, MC_ERR_CONN_CLOSED);
        conn_down(m, why);
        redisAsyncFree(ac); /* what else was sent fails with MC_ERR_CONN_CLOSED */
    } else if (op->kind == R_SELECT) {
        char why[160] = "";
        if (rep->type != REDIS_REPLY_STATUS)
            snprintf(why, sizeof(why), "SELECT %d: %.*s", m->db,
                     rep->type == REDIS_REPLY_ERROR ? (int)(rep->len < 120 ? rep->len : 120) : 0,
                     rep->type == REDIS_REPLY_ERROR ? rep->str : "");
        op_fail(m, op, MC_OK);
        if (m->state == RC_SELECTING && ac == m->ac) {
            if (why[0] == '\0') {
                on_ready(m);
            } else {
                conn_down(m, why);
                redisAsyncFree(ac); /* hiredis frees it once this callback returns */
            }
        }
    } else {
        handle_reply(m, op, rep);
    }
    if (!op->resent) {
        assert(op->done); /* every reply ends the op or sends its next step */
        op->in_redis = 0;
        op_free(op);
    }
    cb_leave(m);
    mc_reactor_leave(saved);
}

/* --------------------------------------------------------------- sending */

/* Hand op's next command to hiredis. 0, or -1 (logged; op untouched). */
/* KEYS[1] = key, ARGV[1] = the value we put, ARGV[2] = "1" if we put one:
 * delete only while the key still holds it. */
#define DEL_IF_OURS                                                                                \
    "if ARGV[2] == '1' and redis.call('GET', KEYS[1]) == ARGV[1] then "                            \
    "return redis.call('DEL', KEYS[1]) end return 0"

static int op_send(meta_redis_t *m, rop_t *op)
{
    const char *argv[MGET_BATCH + 1];
    size_t lens[MGET_BATCH + 1];
    char ttl[24], db[16], pattern_buf[512];
    char *pattern = pattern_buf;
    int argc = 0, rc;

#define ARG(p, n) (argv[argc] = (p), lens[argc] = (n), argc++)
    switch (op->kind) {
    case R_GET:
        ARG("GET", 3);
        ARG(op->data, op->klen);
        break;
    case R_PUT:
    case R_REFRESH:
        snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)m->ttl_ms);
        ARG("SET", 3);
        ARG(op->data, op->klen);
        ARG(op->val, op->vlen);
        ARG("PX", 2);
        ARG(ttl, strlen(ttl));
        break;
    case R_DEL:
        ARG("EVAL", 4);
        ARG(DEL_IF_OURS, sizeof(DEL_IF_OURS) - 1);
        ARG("1", 1);
        ARG(op->data, op->klen);
        ARG(op->val, op->vlen);
        ARG(op->ours ? "1" : "0", 1);
        break;
    case R_SELECT:
        snprintf(db, sizeof(db), "%d", m->db);
        ARG("SELECT", 6);
        ARG(db, strlen(db));
        break;
    case R_ROLE:
        ARG("ROLE", 4);
        break;
    case R_LIST:
        if (op->scanning) {
            /* the prefix is matched literally: escape the glob characters */
            size_t need = op->klen * 2 + 2, pl = 0;
            if (need > sizeof(pattern_buf) && (pattern = mc_malloc(need)) == NULL)
                return -1;
            for (size_t i = 0; i < op->klen; i++) {
                char c = op->data[i];
                if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\')
                    pattern[pl++] = '\\';
                pattern[pl++] = c;
            }
            pattern[pl++] = '*';
            ARG("SCAN", 4);
            ARG(op->cursor, strlen(op->cursor));
            ARG("MATCH", 5);
            ARG(pattern, pl);
            ARG("COUNT", 5);
            ARG(SCAN_COUNT, sizeof(SCAN_COUNT) - 1);
        } else {
            op->batch = op->nkeys - op->next_mget;
            if (op->batch > MGET_BATCH)
                op->batch = MGET_BATCH;
            ARG("MGET", 4);
            for (size_t i = 0; i < op->batch; i++) {
                lkey_t *k = op->keys[op->next_mget + i];
                ARG(k->key, k->klen);
            }
        }
        break;
    }
#undef ARG
    /* hiredis copies the arguments into its output buffer */
    rc = redisAsyncCommandArgv(m->ac, on_reply, op, argc, argv, lens);
    if (pattern != pattern_buf)
        mc_free(pattern);
    if (rc != REDIS_OK) {
        MC_ERROR(METADATA, "%s: %s '%s': cannot queue the command: %s", m->name,
                 rkind_names[op->kind], op->data,
                 m->ac->errstr[0] ? m->ac->errstr : "hiredis error");
        return -1;
    }
    op->in_redis = 1;
    op->resent = 1;
    return 0;
}

/* Send op now (READY) or queue it. Called from the submit functions, so it
 * never runs callbacks. */
static mc_status_t op_submit(meta_redis_t *m, rop_t *op)
{
    if (m->state == RC_READY) {
        if (op_send(m, op) != 0) {
            op_free(op);
            return MC_ERR_METADATA;
        }
        sent_insert(m, op);
    } else {
        mc_list_push_tail(&m->queue, &op->node);
    }
    /* Every call has the same timeout, so a new one is due last: the armed
     * timer (for an earlier op) stays right. */
    if (!mc_timer_armed(&m->dl_timer))
        arm_deadline(m);
    return MC_INPROGRESS;
}

/* ------------------------------------------------------ own entries */

static void refresh_one(void *arg, const char *key, const void *val, size_t len, uint64_t gen)
{
    meta_redis_t *m = arg;
    (void)gen;
    rop_t *op = op_new(m, R_REFRESH, key, val, len, NULL);
    if (op == NULL)
        return; /* next round */
    if (op_send(m, op) != 0) {
        op_free(op);
        return;
    }
    sent_insert(m, op);
    m->refresh_inflight++;
}

/* SET every own entry again with a fresh TTL. */
static void refresh_round(meta_redis_t *m)
{
    if (m->state != RC_READY)
        return;
    m->refresh_err_logged = 0;
    meta_own_foreach(m->own, refresh_one, m);
    arm_deadline(m);
}

static void on_refresh_timer(mc_timer_t *t, void *arg)
{
    meta_redis_t *m = arg;
    (void)t;
    cb_enter(m);
    /* the previous round still in flight: this one would only pile up */
    if (m->refresh_inflight == 0)
        refresh_round(m);
    cb_leave(m);
}

/* ------------------------------------------------------------ deadlines */

static void arm_deadline(meta_redis_t *m)
{
    if (m->state == RC_CLOSED)
        return; /* a callback closed us: the timer is gone */
    uint64_t first = UINT64_MAX;
    if (!mc_list_empty(&m->queue))
        first = MC_LIST_ENTRY(m->queue.next, rop_t, node)->deadline;
    if (!mc_list_empty(&m->sent)) {
        uint64_t d = MC_LIST_ENTRY(m->sent.next, rop_t, node)->deadline;
        if (d < first)
            first = d;
    }
    if (first == UINT64_MAX) {
        mc_timer_stop(&m->dl_timer);
        return;
    }
    uint64_t now = mc_now_us();
    mc_timer_start(&m->dl_timer, first > now ? first - now : 0, 0);
}

static void on_deadline(mc_timer_t *t, void *arg)
{
    meta_redis_t *m = arg;
    (void)t;
    uint64_t now = mc_now_us();
    int overdue = 0;
    cb_enter(m);
    while (!mc_list_empty(&m->queue) && m->state != RC_CLOSED) {
        rop_t *op = MC_LIST_ENTRY(m->queue.next, rop_t, node);
        if (op->deadline > now)
            break;
        MC_DEBUG(METADATA, "%s: %s '%s': not connected within %llu ms", m->name,
                 rkind_names[op->kind], op->data,
                 (unsigned long long)(m->o.call_timeout_us / 1000));
        op_fail(m, op, MC_ERR_RPC_TIMEOUT);
    }
    while (!mc_list_empty(&m->sent) && m->state != RC_CLOSED) {
        rop_t *op = MC_LIST_ENTRY(m->sent.next, rop_t, node);
        if (op->deadline > now)
            break;
        overdue++;
        op_fail(m, op, MC_ERR_RPC_TIMEOUT); /* hiredis still holds it: freed later */
    }
    if (overdue > 0 && m->ac != NULL) {
        char why[96];
        snprintf(why, sizeof(why), "no reply within %llu ms",
                 (unsigned long long)(m->o.call_timeout_us / 1000));
        redisAsyncContext *ac = m->ac;
        conn_down(m, why);
        redisAsyncFree(ac); /* what else was sent fails with MC_ERR_CONN_CLOSED */
    }
    if (m->state != RC_CLOSED)
        arm_deadline(m);
    cb_leave(m);
}

/* ----------------------------------------------------------- connection */

/* The connection failed, died or was dropped: forget the context (its
 * owner - hiredis or the caller - frees it), fail the calls that waited for
 * it, and wait before the next attempt. */
static void conn_down(meta_redis_t *m, const char *why)
{
    if (m->ac != NULL) {
        m->ac->data = NULL; /* its connect/disconnect callbacks are ours no more */
        m->ac = NULL;
    }
    /* once per change of fortune: READY -> trouble, first failed attempt */
    if (m->state == RC_READY)
        MC_WARN(METADATA, "%s: connection lost: %s; reconnecting", m->name, why);
    else if (!m->trouble_logged)
        MC_WARN(METADATA, "%s: cannot connect: %s; retrying every %llu ms at most", m->name, why,
                (unsigned long long)(BACKOFF_MAX_US / 1000));
    else
        MC_DEBUG(METADATA, "%s: cannot connect: %s", m->name, why);
    m->trouble_logged = 1;
    set_state(m, RC_DOWN);
    mc_timer_stop(&m->refresh_timer);
    mc_timer_start(&m->conn_timer, m->backoff_us, 0);
    m->backoff_us *= 2;
    if (m->backoff_us > BACKOFF_MAX_US)
        m->backoff_us = BACKOFF_MAX_US;
    fail_list(m, &m->queue, MC_ERR_CONN_CLOSED);
    arm_deadline(m);
}

static void on_ready(meta_redis_t *m)
{
    set_state(m, RC_READY);
    mc_timer_stop(&m->conn_timer);
    m->backoff_us = BACKOFF_MIN_US;
    if (m->trouble_logged)
        MC_INFO(METADATA, "%s: connected; re-publishing %zu entries", m->name,
                meta_own_count(m->own));
    else
        MC_DEBUG(METADATA, "%s: connected", m->name);
    m->trouble_logged = 0;
    /* Our entries first (Redis may have lost them), then what waited. A
     * queued del of a key is not undone by this: del forgets the key at
     * submit. */
    refresh_round(m);
    mc_timer_start(&m->refresh_timer, m->o.ttl_us / 3 > 1000 ? m->o.ttl_us / 3 : 1000, 1);
    while (m->state == RC_READY && !mc_list_empty(&m->queue)) {
        rop_t *op = MC_LIST_ENTRY(m->queue.next, rop_t, node);
        mc_list_del(&op->node);
        if (op_send(m, op) != 0) {
            op_fail(m, op, MC_ERR_METADATA);
            continue;
        }
        sent_insert(m, op);
    }
    arm_deadline(m);
}

static void on_connect(const redisAsyncContext *cac, int status)
{
    meta_redis_t *m = cac->data;
    if (m == NULL)
        return;
    mc_reactor_t *saved = mc_reactor_enter(m->base.r);
    cb_enter(m);
    if (status != REDIS_OK) {
        /* hiredis frees the context when this returns */
        conn_down(m, cac->errstr[0] ? cac->errstr : "connect failed");
    } else {
        /* Go on from a timer: the steps ahead may free the context, which
         * hiredis does not allow inside this callback. */
        set_state(m, RC_CONNECTED);
        mc_timer_start(&m->conn_timer, 0, 0);
    }
    cb_leave(m);
    mc_reactor_leave(saved);
}

static void on_disconnect(const redisAsyncContext *cac, int status)
{
    meta_redis_t *m = cac->data;
    if (m == NULL)
        return; /* one we dropped, or already handled through a NULL reply */
    mc_reactor_t *saved = mc_reactor_enter(m->base.r);
    cb_enter(m);
    conn_down(m, status == REDIS_OK ? "closed by the server"
                 : cac->errstr[0]   ? cac->errstr
                                    : "connection error");
    cb_leave(m);
    mc_reactor_leave(saved);
}

static void conn_start(meta_redis_t *m)
{
    set_state(m, RC_CONNECTING);
    redisAsyncContext *ac = redisAsyncConnect(m->ip, m->port);
    if (ac == NULL) {
        conn_down(m, "out of memory");
        return;
    }
    if (ac->err) {
        char why[128];
        snprintf(why, sizeof(why), "%s", ac->errstr);
        redisAsyncFree(ac);
        conn_down(m, why);
        return;
    }
    if (redisLibeventAttach(ac, mc_reactor_base(m->base.r)) != REDIS_OK) {
        redisAsyncFree(ac);
        conn_down(m, "cannot attach to the event loop");
        return;
    }
    ac->data = m;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    m->ac = ac;
    mc_timer_start(&m->conn_timer, m->connect_timeout_us, 0);
}

/* ------------------------------------------------------------ sentinels */

static void ask_start(meta_redis_t *m);

/* The Sentinel asked last gave no usable answer (m->sen_why says why):
 * ask the next one, or wait for the next round once all were asked. */
static void ask_failed(meta_redis_t *m)
{
    m->sen_next = (m->sen_next + 1) % m->sen->n;
    if (++m->sen_tried < m->sen->n) {
        ask_start(m);
        return;
    }
    m->sen_tried = 0;
    char why[sizeof(m->sen_why) + 64];
    snprintf(why, sizeof(why), "no sentinel named a primary (last: %s)", m->sen_why);
    conn_down(m, why);
}

/* hiredis reply callback of the Sentinel being asked; also runs (with
 * r = NULL) when hiredis drops that context: connection refused, our free. */
static void on_sentinel_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    meta_redis_t *m = privdata;
    if (ac != m->sac)
        return; /* one we gave up on (timeout, close): m->sac moved on */
    mc_reactor_t *saved = mc_reactor_enter(m->base.r);
    cb_enter(m);
    m->sac = NULL;
    const redisReply *rep = r;
    unsigned i = m->sen_next % m->sen->n;
    unsigned long port = 0;
    unsigned char bin[16];
    int ok = rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
             rep->element[0]->type == REDIS_REPLY_STRING &&
             rep->element[1]->type == REDIS_REPLY_STRING && rep->element[0]->len < sizeof(m->ip);
    if (ok) {
        port = strtoul(rep->element[1]->str, NULL, 10);
        ok = port > 0 && port < 65536 &&
             (inet_pton(AF_INET, rep->element[0]->str, bin) == 1 ||
              inet_pton(AF_INET6, rep->element[0]->str, bin) == 1);
        if (!ok)
            snprintf(m->sen_why, sizeof(m->sen_why),
                     "sentinel %s:%u named '%.64s:%.8s', not an IP address and port",
                     m->sen->s[i].host, m->sen->s[i].port, rep->element[0]->str,
                     rep->element[1]->str);
    } else {
        snprintf(m->sen_why, sizeof(m->sen_why), "sentinel %s:%u: %.120s", m->sen->s[i].host,
                 m->sen->s[i].port,
                 rep == NULL                      ? (ac->errstr[0] ? ac->errstr : "connection lost")
                 : rep->type == REDIS_REPLY_NIL   ? "does not know the primary's name"
                 : rep->type == REDIS_REPLY_ERROR ? rep->str
                                                  : "a reply of an unexpected shape");
    }
    if (ok) {
        if (strcmp(m->ip, rep->element[0]->str) != 0 || m->port != port)
            MC_INFO(METADATA, "%s: the primary is %s:%lu", m->name, rep->element[0]->str, port);
        snprintf(m->ip, sizeof(m->ip), "%s", rep->element[0]->str);
        m->port = (uint16_t)port;
    }
    if (rep != NULL)
        redisAsyncFree(ac); /* inside its callback: hiredis frees it on return */
    if (ok) {
        m->sen_tried = 0;
        conn_start(m);
    } else {
        MC_DEBUG(METADATA, "%s: %s", m->name, m->sen_why);
        ask_failed(m);
    }
    cb_leave(m);
    mc_reactor_leave(saved);
}

/* DOWN (or ASKING, after a Sentinel failed us): ask Sentinel sent_next. */
static void ask_start(meta_redis_t *m)
{
    unsigned i = m->sen_next % m->sen->n;
    set_state(m, RC_ASKING);
    mc_timer_start(&m->conn_timer, m->connect_timeout_us, 0);
    redisAsyncContext *ac = redisAsyncConnect(m->sen_ip[i], m->sen->s[i].port);
    const char *why = NULL;
    if (ac == NULL) {
        why = "out of memory";
    } else if (ac->err) {
        snprintf(m->sen_why, sizeof(m->sen_why), "sentinel %s:%u: %s", m->sen->s[i].host,
                 m->sen->s[i].port, ac->errstr);
        redisAsyncFree(ac);
        ask_failed(m);
        return;
    } else if (redisLibeventAttach(ac, mc_reactor_base(m->base.r)) != REDIS_OK) {
        why = "cannot attach to the event loop";
    } else {
        m->sac = ac;
        if (redisAsyncCommand(ac, on_sentinel_reply, m, "SENTINEL get-master-addr-by-name %s",
                              m->sen->name) == REDIS_OK)
            return; /* sent once connected; on_sentinel_reply goes on */
        m->sac = NULL;
        why = "cannot queue the command";
    }
    if (ac != NULL)
        redisAsyncFree(ac);
    snprintf(m->sen_why, sizeof(m->sen_why), "sentinel %s:%u: %s", m->sen->s[i].host,
             m->sen->s[i].port, why);
    ask_failed(m);
}

/* CONNECTED (or ROLE answered): the next handshake step, or READY. */
static void handshake_next(meta_redis_t *m)
{
    rkind_t kind;
    rc_state_t next;
    if (m->sen != NULL && m->state == RC_CONNECTED) {
        kind = R_ROLE;
        next = RC_ROLE;
    } else if (m->db > 0) {
        kind = R_SELECT;
        next = RC_SELECTING;
    } else {
        on_ready(m);
        return;
    }
    rop_t *op = op_new(m, kind, NULL, NULL, 0, NULL);
    if (op != NULL && op_send(m, op) == 0) {
        sent_insert(m, op);
        set_state(m, next);
        arm_deadline(m);
        return;
    }
    mc_free(op);
    redisAsyncContext *ac = m->ac;
    conn_down(m, kind == R_ROLE ? "cannot send ROLE" : "cannot send SELECT");
    redisAsyncFree(ac);
}

static void on_conn_timer(mc_timer_t *t, void *arg)
{
    meta_redis_t *m = arg;
    (void)t;
    cb_enter(m);
    switch (m->state) {
    case RC_DOWN:
        if (m->sen != NULL)
            ask_start(m);
        else
            conn_start(m);
        break;
    case RC_ASKING: {
        redisAsyncContext *ac = m->sac;
        unsigned i = m->sen_next % m->sen->n;
        m->sac = NULL; /* its callback, run by the free, finds it is not ours any more */
        snprintf(m->sen_why, sizeof(m->sen_why), "sentinel %s:%u: no answer within %llu ms",
                 m->sen->s[i].host, m->sen->s[i].port,
                 (unsigned long long)(m->connect_timeout_us / 1000));
        if (ac != NULL)
            redisAsyncFree(ac);
        ask_failed(m);
        break;
    }
    case RC_CONNECTED:
        mc_timer_start(&m->conn_timer, m->connect_timeout_us, 0);
        handshake_next(m);
        break;
    case RC_CONNECTING:
    case RC_ROLE:
    case RC_SELECTING: {
        redisAsyncContext *ac = m->ac;
        conn_down(m, "connect timed out");
        redisAsyncFree(ac);
        break;
    }
    default:
        break;
    }
    cb_leave(m);
}

/* ----------------------------------------------------------------- calls */

static mc_status_t mr_get(mc_meta_t *b, const char *key, mc_meta_get_cb_t cb, void *arg)
{
    meta_redis_t *m = as_mr(b);
    if (key == NULL || cb == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (m->state == RC_CLOSED)
        return MC_ERR_CANCELED;
    rop_t *op = op_new(m, R_GET, key, NULL, 0, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.get = cb;
    return op_submit(m, op);
}

static mc_status_t mr_put(mc_meta_t *b, const char *key, const void *val, size_t len,
                          mc_meta_done_cb_t cb, void *arg)
{
    meta_redis_t *m = as_mr(b);
    if (key == NULL || cb == NULL || (len > 0 && val == NULL))
        return MC_ERR_INVALID_ARGUMENT;
    if (m->state == RC_CLOSED)
        return MC_ERR_CANCELED;
    rop_t *op = op_new(m, R_PUT, key, val, len, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.done = cb;
    mc_status_t st = meta_own_set(m->own, key, val, len, NULL);
    if (st != MC_OK) {
        op_free(op);
        return st;
    }
    /* Remembered even if this SET fails: the refresh rounds and the next
     * connection publish it; only del forgets it. */
    return op_submit(m, op);
}

static mc_status_t mr_del(mc_meta_t *b, const char *key, mc_meta_done_cb_t cb, void *arg)
{
    meta_redis_t *m = as_mr(b);
    if (key == NULL || cb == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (m->state == RC_CLOSED)
        return MC_ERR_CANCELED;
    const void *val = NULL;
    size_t vlen = 0;
    int ours = meta_own_get(m->own, key, &val, &vlen);
    if (!ours) /* only the owner deletes: the script then leaves the key alone */
        MC_DEBUG(METADATA, "%s: del '%s': not an entry of this process, left alone", m->name, key);
    rop_t *op = op_new(m, R_DEL, key, ours ? val : NULL, ours ? vlen : 0, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.done = cb;
    op->ours = ours;
    mc_status_t st = op_submit(m, op);
    if (st == MC_INPROGRESS)
        meta_own_forget(m->own, key, 0); /* not refreshed any more, whatever happens */
    return st;
}

static mc_status_t mr_list(mc_meta_t *b, const char *prefix, mc_meta_list_cb_t cb, void *arg)
{
    meta_redis_t *m = as_mr(b);
    if (prefix == NULL || cb == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (m->state == RC_CLOSED)
        return MC_ERR_CANCELED;
    rop_t *op = op_new(m, R_LIST, prefix, NULL, 0, arg);
    if (op == NULL)
        return MC_ERR_NOMEM;
    op->cb.list = cb;
    op->scanning = 1;
    strcpy(op->cursor, "0");
    if (mc_hmap_init(&op->seen, 64) != MC_OK) {
        op->seen.buckets = NULL;
        op_free(op);
        return MC_ERR_NOMEM;
    }
    return op_submit(m, op);
}

/* ------------------------------------------------------- open / close */

/* Cancel everything and let go of hiredis and our events; the struct stays
 * for close to free. On the reactor thread (or after it stopped). */
static void shutdown_conn(meta_redis_t *m)
{
    if (m->state == RC_CLOSED)
        return;
    set_state(m, RC_CLOSED);
    mc_timer_fini(&m->conn_timer);
    mc_timer_fini(&m->refresh_timer);
    mc_timer_fini(&m->dl_timer);
    cb_enter(m);
    fail_list(m, &m->queue, MC_ERR_CANCELED);
    /* Sent ops: the user hears MC_ERR_CANCELED now; hiredis' NULL reply,
     * when it comes, finds them detached and frees them. */
    mc_list_t *pos;
    while ((pos = m->sent.next) != &m->sent) {
        rop_t *op = MC_LIST_ENTRY(pos, rop_t, node);
        op_fail(m, op, MC_ERR_CANCELED); /* in_redis: not freed */
        op->m = NULL;
    }
    redisAsyncContext *ac = m->ac;
    if (ac != NULL) {
        ac->data = NULL;
        m->ac = NULL;
        redisAsyncFree(ac); /* deferred by hiredis when inside its callback */
    }
    if (m->sac != NULL) {
        ac = m->sac;
        m->sac = NULL; /* its callback, run by the free, ignores it */
        redisAsyncFree(ac);
    }
    cb_leave(m);
}

static void on_reactor_stop(mc_reactor_t *r, mc_reactor_hook_t *hook)
{
    meta_redis_t *m = MC_CONTAINER_OF(hook, meta_redis_t, stop_hook);
    (void)r;
    m->hooked = 0;
    cb_enter(m);
    shutdown_conn(m);
    cb_leave(m);
}

static void mr_free(meta_redis_t *m)
{
    meta_own_destroy(m->own);
    mc_free(m->sen);
    mc_free(m->sen_ip);
    mc_free(m);
}

static void close_on_reactor(void *arg)
{
    meta_redis_t *m = arg;
    if (m->hooked) {
        mc_reactor_on_stop_cancel(m->base.r, &m->stop_hook);
        m->hooked = 0;
    }
    cb_enter(m);
    shutdown_conn(m);
    mc_guard_exit(&m->guard);
    if (mc_guard_close(&m->guard)) /* else closed from inside one of our callbacks: */
        mr_free(m);                /* the outermost cb_leave frees m */
}

static void mr_close(mc_meta_t *b)
{
    mc_rpc_run_on(b->r, close_on_reactor, as_mr(b));
}

static const mc_meta_ops_t redis_ops = {
    .name = "redis",
    .get = mr_get,
    .put = mr_put,
    .del = mr_del,
    .list = mr_list,
    .close = mr_close,
};

typedef struct init_ctx {
    meta_redis_t *m;
    mc_status_t st;
} init_ctx_t;

static void init_on_reactor(void *arg)
{
    init_ctx_t *ic = arg;
    meta_redis_t *m = ic->m;
    mc_reactor_t *r = m->base.r;
    if (mc_reactor_stopping(r)) {
        ic->st = MC_ERR_CANCELED;
        return;
    }
    ic->st = mc_timer_init(&m->conn_timer, r, on_conn_timer, m);
    if (ic->st == MC_OK)
        ic->st = mc_timer_init(&m->refresh_timer, r, on_refresh_timer, m);
    if (ic->st == MC_OK)
        ic->st = mc_timer_init(&m->dl_timer, r, on_deadline, m);
    if (ic->st != MC_OK) {
        mc_timer_fini(&m->conn_timer);
        mc_timer_fini(&m->refresh_timer);
        return;
    }
    m->stop_hook.fn = on_reactor_stop;
    mc_reactor_on_stop(r, &m->stop_hook);
    m->hooked = 1;
    /* connect from the loop: open returns at once */
    mc_timer_start(&m->conn_timer, 0, 0);
}

/* The IP literal of a resolved "ip:port" / "[ip]:port" string. */
static void ip_of(const char *addr, char *ip, size_t len)
{
    const char *b = addr, *e = strrchr(addr, ':');
    if (*b == '[') {
        b++;
        e = strchr(b, ']');
    }
    size_t n = e != NULL ? (size_t)(e - b) : strlen(b);
    if (n >= len)
        n = len - 1;
    memcpy(ip, b, n);
    ip[n] = '\0';
}

/* A meta_redis_t with its names and addresses filled in: options, timers,
 * the reactor. Frees m on failure. */
static mc_status_t open_common(meta_redis_t *m, mc_reactor_t *r, const mc_meta_opts_t *o,
                               mc_meta_t **out)
{
    mc_status_t st;
    m->base.ops = &redis_ops;
    m->base.r = r;
    meta_fill_defaults(&m->o, o);
    m->state = RC_DOWN;
    m->backoff_us = BACKOFF_MIN_US;
    m->connect_timeout_us = m->o.call_timeout_us < CONNECT_TIMEOUT_MAX_US ? m->o.call_timeout_us
                                                                          : CONNECT_TIMEOUT_MAX_US;
    m->ttl_ms = m->o.ttl_us / 1000 > 0 ? m->o.ttl_us / 1000 : 1;
    mc_list_init(&m->queue);
    mc_list_init(&m->sent);
    m->own = meta_own_create();
    if (m->own == NULL) {
        st = MC_ERR_NOMEM;
        goto err_free;
    }
    init_ctx_t ic = {.m = m, .st = MC_ERR_CANCELED};
    mc_rpc_run_on(r, init_on_reactor, &ic);
    if (ic.st != MC_OK) {
        st = ic.st;
        MC_ERROR(METADATA, "%s: cannot start: %s", m->name, mc_status_str(st));
        goto err_own;
    }
    MC_DEBUG(METADATA, "%s: opened (%s, ttl %llu ms)", m->name, m->sen ? "sentinels" : m->ip,
             (unsigned long long)m->ttl_ms);
    *out = &m->base;
    return MC_OK;

err_own:
    meta_own_destroy(m->own);
err_free:
    mc_free(m->sen);
    mc_free(m->sen_ip);
    mc_free(m);
    return st;
}

mc_status_t meta_redis_open(const char *host, uint16_t port, int db, mc_reactor_t *r,
                            const mc_meta_opts_t *o, mc_meta_t **out)
{
    meta_redis_t *m = MC_NEW(meta_redis_t);
    if (m == NULL)
        return MC_ERR_NOMEM;
    if (db >= 0)
        snprintf(m->name, sizeof(m->name), "redis://%s:%u/%d", host, port, db);
    else
        snprintf(m->name, sizeof(m->name), "redis://%s:%u", host, port);
    m->port = port;
    m->db = db;
    mc_sockaddr_t sa;
    mc_status_t st = mc_net_resolve(host, port, &sa); /* logs why it failed */
    if (st != MC_OK) {
        mc_free(m);
        return st;
    }
    char addr[96];
    mc_net_addr_str(&sa, addr, sizeof(addr));
    ip_of(addr, m->ip, sizeof(m->ip));
    return open_common(m, r, o, out);
}

mc_status_t meta_redis_open_sentinel(const mc_sentinel_url_t *u, mc_reactor_t *r,
                                     const mc_meta_opts_t *o, mc_meta_t **out)
{
    meta_redis_t *m = MC_NEW(meta_redis_t);
    if (m == NULL)
        return MC_ERR_NOMEM;
    m->sen = mc_malloc(sizeof(*u));
    m->sen_ip = mc_calloc(u->n, sizeof(*m->sen_ip));
    if (m->sen == NULL || m->sen_ip == NULL) {
        mc_free(m->sen);
        mc_free(m->sen_ip);
        mc_free(m);
        return MC_ERR_NOMEM;
    }
    *m->sen = *u;
    m->db = u->db;
    size_t at = (size_t)snprintf(m->name, sizeof(m->name), "redis-sentinel://");
    for (unsigned i = 0; i < u->n; i++) {
        mc_sockaddr_t sa;
        mc_status_t st = mc_net_resolve(u->s[i].host, u->s[i].port, &sa); /* logs why */
        if (st != MC_OK) {
            mc_free(m->sen);
            mc_free(m->sen_ip);
            mc_free(m);
            return st;
        }
        char addr[96];
        mc_net_addr_str(&sa, addr, sizeof(addr));
        ip_of(addr, m->sen_ip[i], sizeof(m->sen_ip[i]));
        if (at < sizeof(m->name))
            at += (size_t)snprintf(m->name + at, sizeof(m->name) - at, "%s%s:%u", i ? "," : "",
                                   u->s[i].host, u->s[i].port);
    }
    if (at < sizeof(m->name))
        at += (size_t)snprintf(m->name + at, sizeof(m->name) - at, "/%s", u->name);
    if (u->db >= 0 && at < sizeof(m->name))
        snprintf(m->name + at, sizeof(m->name) - at, "/%d", u->db);
    return open_common(m, r, o, out);
}
