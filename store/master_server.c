/*
 * master_server.c - RPC front of the master core (see master_server.h).
 *
 * Every handler decodes its body with one shared field parser (parse_fields),
 * calls the master core synchronously (its calls are short: hash-map work
 * under a shard lock), and encodes the reply straight into the connection's
 * output buffer. Batch arrays live in per-reactor scratch space, so a steady
 * stream of requests does not allocate.
 */
#include "store/master_server.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "reactor/reactor.h"
#include "mooncake/version.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/master_ha.h"
#include "store/master_server_int.h"
#include "store/proto.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MAX_BATCH 65536 /* keys in one batch call */

/* ------------------------------------------------------------ scratch */

/* Grow the array *p to n elements of size bytes (its old contents kept).
 * 0, or -1 (*p unchanged). */
static int grow(void *p, size_t n, size_t size)
{
    void **pp = p;
    void *q = mc_realloc(*pp, n * size);
    if (q == NULL)
        return -1;
    *pp = q;
    return 0;
}

static mc_status_t scratch_reserve(scratch_t *sc, size_t n, uint32_t reps_per_key)
{
    if (n > sc->cap) {
        size_t cap = sc->cap ? sc->cap : 256;
        while (cap < n)
            cap *= 2;
        if (grow(&sc->keys, cap, sizeof(*sc->keys)) != 0 ||
            grow(&sc->sizes, cap, sizeof(*sc->sizes)) != 0 ||
            grow(&sc->st, cap, sizeof(*sc->st)) != 0 ||
            grow(&sc->nrep, cap, sizeof(*sc->nrep)) != 0 ||
            grow(&sc->exists, cap, sizeof(*sc->exists)) != 0)
            return MC_ERR_NOMEM;
        sc->cap = cap;
    }
    size_t nd = n * reps_per_key;
    if (nd > sc->dcap) {
        size_t cap = sc->dcap ? sc->dcap : 64;
        while (cap < nd)
            cap *= 2;
        if (grow(&sc->descs, cap, sizeof(*sc->descs)) != 0)
            return MC_ERR_NOMEM;
        sc->dcap = cap;
    }
    return MC_OK;
}

static void scratch_fini(scratch_t *sc)
{
    /* held replies of a server being destroyed: their requests go with it */
    mc_list_t *n;
    while (sc->waiters.next != NULL && (n = mc_list_pop_head(&sc->waiters)) != NULL)
        mc_free(MC_CONTAINER_OF(n, waiter_t, node));
    while (sc->held.next != NULL && (n = mc_list_pop_head(&sc->held)) != NULL)
        mc_free(n); /* held_t: its node is first */
    mc_buf_fini(&sc->rbuf);
    mc_free(sc->keys);
    mc_free(sc->sizes);
    mc_free(sc->st);
    mc_free(sc->nrep);
    mc_free(sc->exists);
    mc_free(sc->descs);
    mc_free(sc->segs);
    memset(sc, 0, sizeof(*sc));
}

/* ------------------------------------------------------------- fields */

typedef struct fields {
    uint64_t have; /* bit per field id seen */
    mc_uuid_t client_id;
    const char *key;
    uint32_t key_len;
    uint32_t nkeys;
    uint32_t nsizes;
    uint64_t size;
    int force;
    const char *regex;
    uint32_t regex_len;
    mc_proto_segment_t seg;
    uint32_t nsegs;
    mc_uuid_t segment_id;
    const void *value;
    uint32_t value_len;
    const char *prefix;
    uint32_t prefix_len;
    const char *after;
    uint32_t after_len;
    uint64_t put_id;
    uint64_t count;   /* LIST_KEYS: limit */
    int64_t status;   /* OFFLOAD_DONE: the node's result */
    uint64_t wait_us; /* OFFLOAD_POLL, OFFLOAD_LOAD: an answer may be held this long */
    uint64_t ready;   /* OFFLOAD_PROGRESS: bytes in */
    int has_ready;
    uint64_t have_bytes; /* GET_REPLICA_LIST, OFFLOAD_LOAD: bytes of a load the reader copied */
    int partial;         /* HAVE given: the reader takes partial answers (READY) */
    uint64_t load_id;    /* OFFLOAD_PROGRESS / OFFLOAD_DONE / a reader's HAVE: the load's id;
                            OFFLOAD_POLL: the node takes ids (has_load_id) */
    int has_load_id;
    mc_uuid_t own_disk; /* GET_REPLICA_LIST: the caller reads this segment's disk itself */
    int has_own_disk;
    const void *disk_id; /* OFFLOAD_POLL: the node's offload directory's identity */
    uint32_t disk_id_len;
    int has_disk_id;
    uint64_t done_id; /* OFFLOAD_POLL: the last answer whose DELETEs the node did */
    int has_done_id;
    int release;          /* BATCH_GET_REPLICA_LIST: the reader will release its leases */
    uint64_t grant_us;    /* LEASE_RELEASE: when the leases were granted */
    int64_t view_version; /* LEASE_RELEASE: by the master of this view */
    const char *why;      /* what was wrong with the body */
} fields_t;

#define HAVE(f, id) (((f)->have >> (id)) & 1u)

/* Parse every field the store protocol knows into f; batch arrays go into sc.
 * Returns MC_OK or MC_ERR_INVALID_PARAMS with f->why set. */
/* long: one flat case per field of the protocol */
static mc_status_t parse_fields(mc_rpc_req_t *req, scratch_t *sc, fields_t *f,
                                mc_proto_put_cfg_t *cfg)
{
    size_t len;
    const uint8_t *body = mc_rpc_req_body(req, &len);
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, body, len);
    memset(f, 0, sizeof(*f));
    if (cfg != NULL)
        mc_proto_put_cfg_init(cfg);
    uint32_t n = len ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
        uint64_t id = mc_mp_read_uint(&r);
        if (id < 64)
            f->have |= 1ull << id;
        switch (id) {
        case MC_F_CLIENT_ID:
            f->client_id = mc_proto_read_uuid(&r);
            break;
        case MC_F_KEY:
            f->key = mc_mp_read_bin(&r, &f->key_len);
            break;
        case MC_F_KEYS: {
            uint32_t k = mc_mp_read_array(&r);
            if (k > MAX_BATCH) {
                f->why = "too many keys in one batch (limit 65536)";
                return MC_ERR_INVALID_PARAMS;
            }
            if (scratch_reserve(sc, k, 1) != MC_OK) {
                f->why = "out of memory";
                return MC_ERR_NOMEM;
            }
            for (uint32_t j = 0; j < k && r.err == MC_OK; j++) {
                uint32_t kl = 0;
                sc->keys[j].data = mc_mp_read_bin(&r, &kl);
                sc->keys[j].len = kl;
            }
            f->nkeys = k;
            break;
        }
        case MC_F_SIZE:
            f->size = mc_mp_read_uint(&r);
            break;
        case MC_F_SIZES: {
            uint32_t k = mc_mp_read_array(&r);
            if (k > MAX_BATCH || scratch_reserve(sc, k, 1) != MC_OK) {
                f->why = "too many sizes in one batch (limit 65536)";
                return MC_ERR_INVALID_PARAMS;
            }
            for (uint32_t j = 0; j < k && r.err == MC_OK; j++)
                sc->sizes[j] = mc_mp_read_uint(&r);
            f->nsizes = k;
            break;
        }
        case MC_F_CONFIG:
            if (cfg == NULL)
                mc_mp_skip(&r);
            else
                mc_proto_read_put_cfg(&r, cfg, &f->why);
            break;
        case MC_F_FORCE:
            f->force = mc_mp_read_bool(&r);
            break;
        case MC_F_REGEX:
            f->regex = mc_mp_read_str(&r, &f->regex_len);
            break;
        case MC_F_SEGMENT:
            mc_proto_read_segment(&r, &f->seg, &f->why);
            break;
        case MC_F_SEGMENTS: {
            uint32_t k = mc_mp_read_array(&r);
            if (k > 4096) {
                f->why = "too many segments (limit 4096)";
                return MC_ERR_INVALID_PARAMS;
            }
            if (k > sc->scap) {
                mc_proto_segment_t *s = mc_realloc(sc->segs, k * sizeof(*s));
                if (s == NULL) {
                    f->why = "out of memory";
                    return MC_ERR_NOMEM;
                }
                sc->segs = s;
                sc->scap = k;
            }
            for (uint32_t j = 0; j < k && r.err == MC_OK; j++)
                mc_proto_read_segment(&r, &sc->segs[j], &f->why);
            f->nsegs = k;
            break;
        }
        case MC_F_SEGMENT_ID:
            f->segment_id = mc_proto_read_uuid(&r);
            break;
        case MC_F_VALUE:
            f->value = mc_mp_read_bin(&r, &f->value_len);
            break;
        case MC_F_PREFIX:
            f->prefix = mc_mp_read_bin(&r, &f->prefix_len);
            break;
        case MC_F_PUT_ID:
            f->put_id = mc_mp_read_uint(&r);
            break;
        case MC_F_COUNT:
            f->count = mc_mp_read_uint(&r);
            break;
        case MC_F_STATUS:
            f->status = mc_mp_read_int(&r);
            break;
        case MC_F_WAIT_US:
            f->wait_us = mc_mp_read_uint(&r);
            break;
        case MC_F_LOADED:
            f->ready = mc_mp_read_uint(&r);
            f->has_ready = 1;
            break;
        case MC_F_HAVE:
            f->have_bytes = mc_mp_read_uint(&r);
            f->partial = 1;
            break;
        case MC_F_LOAD_ID:
            f->load_id = mc_mp_read_uint(&r);
            f->has_load_id = 1;
            break;
        case MC_F_OWN_DISK:
            f->own_disk = mc_proto_read_uuid(&r);
            f->has_own_disk = 1;
            break;
        case MC_F_DISK_ID:
            f->disk_id = mc_mp_read_bin(&r, &f->disk_id_len);
            f->has_disk_id = 1;
            break;
        case MC_F_DONE_ID:
            f->done_id = mc_mp_read_uint(&r);
            f->has_done_id = 1;
            break;
        case MC_F_AFTER:
            f->after = mc_mp_read_bin(&r, &f->after_len);
            break;
        case MC_F_RELEASE:
            f->release = mc_mp_read_bool(&r);
            break;
        case MC_F_GRANT_US:
            f->grant_us = mc_mp_read_uint(&r);
            break;
        case MC_F_VIEW_VERSION:
            f->view_version = mc_mp_read_int(&r);
            break;
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    if (r.err != MC_OK || !mc_mp_at_end(&r)) {
        if (f->why == NULL)
            f->why = "malformed body: a field has the wrong type";
        return MC_ERR_INVALID_PARAMS;
    }
    return MC_OK;
}

/* Check that the fields in `mask` were all given; else name the first one. */
static mc_status_t require(fields_t *f, uint64_t mask)
{
    static const char *const missing_msg[] = {
        [MC_F_CLIENT_ID] = "missing field client_id (1)",
        [MC_F_KEY] = "missing field key (2)",
        [MC_F_KEYS] = "missing field keys (3)",
        [MC_F_SIZE] = "missing field size (4)",
        [MC_F_SIZES] = "missing field sizes (5)",
        [MC_F_REGEX] = "missing field regex (8)",
        [MC_F_SEGMENT] = "missing field segment (9)",
        [MC_F_SEGMENTS] = "missing field segments (10)",
        [MC_F_SEGMENT_ID] = "missing field segment_id (11)",
        [MC_F_VALUE] = "missing field value (12)",
        [MC_F_PREFIX] = "missing field prefix (13)",
        [MC_F_VIEW_VERSION] = "missing field view_version (25)",
        [MC_F_GRANT_US] = "missing field grant_us (37)",
    };
    uint64_t missing = mask & ~f->have;
    if (missing == 0)
        return MC_OK;
    unsigned id = (unsigned)__builtin_ctzll(missing);
    f->why = id < MC_ARRAY_SIZE(missing_msg) && missing_msg[id] != NULL ? missing_msg[id]
                                                                        : "missing field";
    return MC_ERR_INVALID_PARAMS;
}

#define BIT(id) (1ull << (id))

/* --------------------------------------------------------------- reply */

static void count(master_srv_t *s, mc_rpc_req_t *req, mc_status_t st)
{
    unsigned m = mc_rpc_req_method(req);
    if (m < MASTER_MAX_METHOD) {
        atomic_fetch_add_explicit(&s->req_total[m], 1, memory_order_relaxed);
        if (st < 0)
            atomic_fetch_add_explicit(&s->req_fail[m], 1, memory_order_relaxed);
        uint64_t now = mc_now_us(), t0 = mc_rpc_req_start_us(req);
        mc_prom_hist_observe_us(&s->req_lat[m], now > t0 ? now - t0 : 0);
    }
}

/* Reply with a status and, for failures, the reason when there is one. */
static void reply_status(master_srv_t *s, mc_rpc_req_t *req, mc_status_t st, const char *why)
{
    count(s, req, st);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    if (st < 0 && why != NULL) {
        mc_mp_write_map(w, 1);
        mc_mp_write_uint(w, MC_F_ERROR);
        mc_mp_write_cstr(w, why);
    }
    mc_rpc_reply_end(req, st);
}

static scratch_t *scratch_of(master_srv_t *s, mc_rpc_req_t *req)
{
    return &s->scratch[mc_reactor_index(mc_rpc_req_reactor(req))];
}

/* Send st and body (may be NULL) once the journal records up to seq are in
 * Redis, or NOT_LEADER when this master stops leading first (the change may
 * or may not survive then). */
static void reply_held(master_srv_t *s, mc_rpc_req_t *req, mc_status_t st, const mc_buf_t *body,
                       uint64_t seq)
{
    size_t len = body != NULL ? mc_buf_used(body) : 0;
    waiter_t *wt = mc_malloc(sizeof(*wt) + len);
    if (wt == NULL) {
        mc_rpc_reply(req, MC_ERR_NOMEM, NULL, 0);
        return;
    }
    wt->req = req;
    wt->hreq = NULL;
    wt->st = st;
    wt->seq = seq;
    wt->len = len;
    if (len)
        memcpy(wt->body, mc_buf_head(body), len);
    scratch_t *sc = scratch_of(s, req);
    mc_list_push_tail(&sc->waiters, &wt->node);
    atomic_fetch_add(&sc->nwaiters, 1);
    master_ha_kick(s);
}

/* Reply to a call that changed metadata. With ha.sync = strict the reply is
 * held until the journal records the call produced are in Redis. */
static void reply_durable(master_srv_t *s, mc_rpc_req_t *req, mc_status_t st, const mc_buf_t *body)
{
    uint64_t seq = 0;
    size_t len = body != NULL ? mc_buf_used(body) : 0;
    count(s, req, st);
    if (master_ha_must_wait(s, &seq))
        reply_held(s, req, st, body, seq);
    else
        mc_rpc_reply(req, st, len ? mc_buf_head(body) : NULL, len);
}

/* A reply that may have to wait for the journal (strict HA) is encoded
 * first into the reactor's scratch buffer: body_begin starts the body
 * {field: ...}, the caller writes the value with the writer, and
 * body_durable or body_space sends it (MC_ERR_NOMEM when it could not be
 * encoded). */
static mc_mp_writer_t body_begin(master_srv_t *s, mc_rpc_req_t *req, uint32_t field)
{
    mc_buf_t *b = &scratch_of(s, req)->rbuf;
    mc_buf_reset(b);
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, b);
    mc_mp_write_map(&w, 1);
    mc_mp_write_uint(&w, field);
    return w;
}

/* Send the body as the MC_OK reply of a call that changed metadata
 * (reply_durable). */
static void body_durable(master_srv_t *s, mc_rpc_req_t *req, const mc_mp_writer_t *w)
{
    if (w->err != MC_OK)
        reply_status(s, req, MC_ERR_NOMEM, "out of memory");
    else
        reply_durable(s, req, MC_OK, w->buf);
}

/* Send the body as the MC_OK reply of a call that hands out segment space
 * (PutStart, a node's loads). The caller writes into the space as soon as
 * it has the reply, so with ha.sync = strict the reply waits until the
 * records that freed space lately (evictions, removes, releases, expiries)
 * are in Redis: a new leader that lacked one would still list the old
 * object in that space, over the new bytes. The call's own records need not
 * wait (a new leader without them refuses the PutEnd or the load's end).
 * Out of memory: the space handed out is taken back by the put's or the
 * load's timeout. */
static void body_space(master_srv_t *s, mc_rpc_req_t *req, const mc_mp_writer_t *w)
{
    uint64_t seq = 0;
    count(s, req, w->err == MC_OK ? MC_OK : MC_ERR_NOMEM);
    if (w->err != MC_OK)
        mc_rpc_reply(req, MC_ERR_NOMEM, NULL, 0);
    else if (master_ha_frees_pending(s, &seq))
        reply_held(s, req, MC_OK, w->buf, seq);
    else
        mc_rpc_reply(req, MC_OK, mc_buf_head(w->buf), mc_buf_used(w->buf));
}

void master_srv_complete_waiters(master_srv_t *s, scratch_t *sc)
{
    uint64_t flushed = master_ha_flushed(s);
    int leading = master_ha_serving(s, mc_now_us());
    mc_list_t *n = sc->waiters.next;
    while (n != &sc->waiters) {
        mc_list_t *next = n->next;
        waiter_t *wt = MC_CONTAINER_OF(n, waiter_t, node);
        int durable = wt->seq <= flushed;
        if (durable || !leading) {
            mc_list_del(n);
            atomic_fetch_sub(&sc->nwaiters, 1);
            if (wt->hreq != NULL)
                master_http_held_reply(wt, durable);
            else
                mc_rpc_reply(wt->req, durable ? wt->st : MC_ERR_NOT_LEADER,
                             durable && wt->len ? wt->body : NULL, durable ? wt->len : 0);
            mc_free(wt);
        }
        n = next;
    }
}

/* Status-only durable reply. */
static void reply_status_durable(master_srv_t *s, mc_rpc_req_t *req, mc_status_t st)
{
    reply_durable(s, req, st, NULL);
}

/* Parse the body and check required fields; on failure reply and return 0. */
/* A standby (or a leader whose lease may have run out) refuses every store
 * call with NOT_LEADER and, when it knows it, the leader's address. */
static void reply_not_leader(master_srv_t *s, mc_rpc_req_t *req)
{
    char leader[300];
    master_ha_leader(s, leader, sizeof(leader));
    count(s, req, MC_ERR_NOT_LEADER);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, leader[0] ? 2 : 1);
    mc_mp_write_uint(w, MC_F_ERROR);
    mc_mp_write_cstr(w, "not the leader");
    if (leader[0]) {
        mc_mp_write_uint(w, MC_F_LEADER);
        mc_mp_write_cstr(w, leader);
    }
    mc_rpc_reply_end(req, MC_ERR_NOT_LEADER);
}

static int begin(master_srv_t *s, mc_rpc_req_t *req, fields_t *f, mc_proto_put_cfg_t *cfg,
                 uint64_t required)
{
    if (!master_ha_serving(s, mc_now_us())) {
        reply_not_leader(s, req);
        return 0;
    }
    mc_status_t st = parse_fields(req, scratch_of(s, req), f, cfg);
    if (st == MC_OK)
        st = require(f, required);
    if (st != MC_OK) {
        MC_DEBUG(MASTER, "%s: method %u: %s", mc_rpc_req_peer(req), mc_rpc_req_method(req), f->why);
        reply_status(s, req, st, f->why);
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------- handlers */

static void h_service_ready(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, MC_F_TEXT);
    char text[64];
    snprintf(text, sizeof(text), "mooncake-c %s", mc_version());
    mc_mp_write_cstr(w, text);
    mc_mp_write_uint(w, MC_F_VIEW_VERSION);
    mc_mp_write_int(w, s->view_version);
    mc_rpc_reply_end(req, MC_OK);
}

static void h_get_fsdir(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    /* upstream GetFsdir: root_fs_dir/cluster_id, "" without a tier */
    mc_mp_write_map(w, 3);
    mc_mp_write_uint(w, MC_F_TEXT);
    mc_mp_write_cstr(w, master_tier_dir(s));
    mc_mp_write_uint(w, MC_F_CLUSTER_ID);
    mc_mp_write_cstr(w, master_tier_cluster(s));
    mc_mp_write_uint(w, MC_F_PERSIST);
    mc_mp_write_uint(w, s->tier != NULL ? (uint64_t)s->opts.persist : 0);
    mc_rpc_reply_end(req, MC_OK);
}

/* A client wrote a key's tier file. An object gone meanwhile (removed, or
 * evicted before an async write finished) leaves an orphan file: queued for
 * deletion (it is deleted only if the key is still absent then). */
static void h_tier_add(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_CLIENT_ID) | BIT(MC_F_KEY) | BIT(MC_F_SIZE)))
        return;
    mc_status_t st = s->tier == NULL
                         ? MC_ERR_UNAVAILABLE_IN_CURRENT_MODE
                         : mc_master_tier_add(s->m, f.key, f.key_len, f.size, mc_now_us());
    if (st == MC_ERR_OBJECT_NOT_FOUND || st == MC_ERR_INVALID_PARAMS)
        master_tier_orphan(s, f.key, f.key_len);
    if (st == MC_OK) {
        /* its DISK record: an eager put's PutEnd comes after it anyway; an
         * async file's report is acknowledged once a new leader would know
         * it too (otherwise its scan finds the file) */
        reply_status_durable(s, req, st);
        return;
    }
    reply_status(s, req, st,
                 st == MC_ERR_UNAVAILABLE_IN_CURRENT_MODE ? "no tier (root_fs_dir)"
                 : st == MC_ERR_INVALID_PARAMS            ? "size differs from the object's"
                                                          : NULL);
}

/* ---- node-local offload (master_offload.c) ---- */

#define OFFLOAD_POLL_MAX 4096

typedef struct off_items {
    mc_mp_writer_t w; /* the reply's ITEMS array, its count patched at the end */
    uint32_t n;
    int ids; /* the node takes load ids: a 6th element */
} off_items_t;

static int offload_item(void *arg, const mc_master_offload_req_t *r)
{
    off_items_t *it = arg;
    mc_mp_write_array(&it->w, it->ids ? 6 : 5);
    mc_mp_write_uint(&it->w, r->op);
    mc_mp_write_bool(&it->w, r->evict);
    mc_mp_write_bin(&it->w, r->key, r->key_len);
    mc_mp_write_uint(&it->w, r->size);
    mc_mp_write_uint(&it->w, r->offset);
    if (it->ids)
        mc_mp_write_uint(&it->w, r->load_id);
    it->n++;
    return 0;
}

/* Held offload calls. A node's OFFLOAD_POLL with WAIT_US that finds no
 * work, and a reader's OFFLOAD_LOAD with WAIT_US of an object whose load is
 * queued or in flight (or that finds no room on the node yet), are held on
 * their connection's reactor (scratch.held) instead of being answered at
 * once: the master core tells us (offload_notify) whenever offload work is
 * queued or answered, and every reactor holding calls then looks at them
 * again (the tick does too, for the deadlines). A poll is answered as soon
 * as there is work for its segment, a load as soon as its node answered:
 * no node polls on a timer, no reader lists again after a pause. At the
 * deadline (WAIT_US, at most HOLD_MAX_US) a poll is answered empty, a load
 * with the replica list as it is then (the reader asks again). */
#define HOLD_MAX_US 2000000

typedef enum held_kind {
    HELD_POLL, /* OFFLOAD_POLL: waiting for work for its segment */
    HELD_LOAD, /* OFFLOAD_LOAD: waiting for the node's answer, or for room */
} held_kind_t;

/* What a reader's call for a load (GetReplicaList or OFFLOAD_LOAD with
 * WAIT_US) asks besides its key. */
typedef struct load_ask {
    int partial;      /* HAVE given: it takes partial answers */
    int release;      /* it releases the lease of the final answer (RELEASE) */
    uint64_t have;    /* bytes of the load in flight it copied */
    uint64_t have_id; /* that load's id (LOAD_ID; 0: none given, an older reader) */
} load_ask_t;

static load_ask_t load_ask(const fields_t *f)
{
    return (load_ask_t){
        .partial = f->partial, .release = f->release, .have = f->have_bytes, .have_id = f->load_id};
}

typedef struct held {
    mc_list_t node; /* first: scratch_fini frees by it */
    mc_rpc_req_t *req;
    held_kind_t kind;
    uint64_t deadline_us;
    mc_uuid_t client_id, segment_id; /* POLL */
    uint32_t max;                    /* POLL */
    int ids;                         /* POLL: the node takes load ids */
    int says_done;                   /* POLL: DONE_ID given */
    uint64_t done_id;                /* POLL */
    load_ask_t ask;                  /* LOAD */
    uint32_t key_len;                /* LOAD */
    char key[];
} held_t;

/* What a poll asks. */
typedef struct poll_ask {
    mc_uuid_t client, segment;
    uint32_t max;
    int ids;       /* the node takes load ids */
    int says_done; /* DONE_ID given: done_id */
    uint64_t done_id;
} poll_ask_t;

/* Answer a poll with the requests queued for the node, up to max (with
 * their load ids when it takes them: ids), and the answer's number when it
 * hands out DELETEs (ANSWER_ID). With may_hold and none queued: no answer
 * (0); else answered (1). */
static int offload_poll_answer(master_srv_t *s, mc_rpc_req_t *req, const poll_ask_t *a,
                               int may_hold)
{
    mc_buf_t *b = &scratch_of(s, req)->rbuf;
    mc_buf_reset(b);
    off_items_t it = {.n = 0, .ids = a->ids};
    mc_mp_writer_init(&it.w, b);
    mc_mp_write_map(&it.w, 2);
    mc_mp_write_uint(&it.w, MC_F_ITEMS);
    size_t at = mc_mp_write_array_later(&it.w);
    uint64_t answer = 0;
    mc_status_t st =
        mc_master_offload_poll_ack(s->m, a->client, a->segment, mc_now_us(), a->max, a->says_done,
                                   a->done_id, &answer, offload_item, &it);
    mc_mp_write_uint(&it.w, MC_F_ANSWER_ID);
    mc_mp_write_uint(&it.w, answer);
    if (st == MC_OK && it.w.err != MC_OK)
        st = it.w.err; /* out of memory: the requests taken are voided by their timeout */
    if (st == MC_OK && it.n == 0 && may_hold)
        return 0;
    if (st != MC_OK) {
        reply_status(s, req, st,
                     st == MC_ERR_UNAVAILABLE_IN_CURRENT_MODE ? "offload is off (enable_offload)"
                                                              : NULL);
        return 1;
    }
    mc_mp_patch_array(&it.w, at, it.n);
    body_space(s, req, &it.w); /* loads write into space handed out */
    return 1;
}

/* Answer a load with the object's replica list and a lease, as
 * GetReplicaList (without recording an access: mc_master_offload_list), and
 * how long the call was held (the reader's lease starts that much later).
 * A reader that will release the lease (RELEASE) gets the grant's time and
 * this master's view to send back with LEASE_RELEASE once it copied it; one
 * that copied bytes of a load early (HAVE, LOAD_ID) gets that id back when
 * the copy listed is that load's (it keeps those bytes; else it reads all). */
static void offload_load_list(master_srv_t *s, mc_rpc_req_t *req, const char *key, size_t klen,
                              const load_ask_t *a)
{
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    uint64_t lease = 0, now = mc_now_us(), t0 = mc_rpc_req_start_us(req);
    int release = a->release && s->opts.master.lease_release;
    mc_status_t st = mc_master_offload_list(s->m, key, klen, now, release, d,
                                            MC_MASTER_MAX_REPLICAS, &n, &lease);
    if (st != MC_OK) {
        reply_status(s, req, st, NULL);
        return;
    }
    int same =
        a->partial && a->have > 0 && mc_master_offload_loaded_by(s->m, key, klen, a->have_id);
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 3 + (release ? 2 : 0) + (same ? 1 : 0));
    if (same) {
        mc_mp_write_uint(w, MC_F_LOAD_ID);
        mc_mp_write_uint(w, a->have_id);
    }
    if (release) {
        mc_mp_write_uint(w, MC_F_GRANT_US);
        mc_mp_write_uint(w, now);
        mc_mp_write_uint(w, MC_F_VIEW_VERSION);
        mc_mp_write_int(w, mc_master_view_version(s->m));
    }
    mc_mp_write_uint(w, MC_F_REPLICAS);
    mc_proto_write_replicas(w, d, n);
    mc_mp_write_uint(w, MC_F_LEASE_TTL_US);
    mc_mp_write_uint(w, lease);
    mc_mp_write_uint(w, MC_F_HELD_US);
    mc_mp_write_uint(w, now > t0 ? now - t0 : 0);
    mc_rpc_reply_end(req, MC_OK);
}

/* A reader's call with OWN_DISK whose object is only on the caller's own
 * disk (mc_master_offload_own_disk): answered at once with its LOCAL_DISK
 * replica, no lease, marked OWN_DISK (the caller reads its file itself).
 * 1 when answered. A GetReplicaList with or without WAIT_US (a store
 * service's worker lists without: it must not be held); an OFFLOAD_LOAD
 * only with it (h_offload_load). */
static int own_disk_answer(master_srv_t *s, mc_rpc_req_t *req, const fields_t *f)
{
    mc_master_replica_desc_t d;
    if (!f->has_own_disk || !mc_master_offload_own_disk(s->m, f->key, f->key_len, f->own_disk, &d))
        return 0;
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 3);
    mc_mp_write_uint(w, MC_F_REPLICAS);
    mc_proto_write_replicas(w, &d, 1);
    mc_mp_write_uint(w, MC_F_LEASE_TTL_US);
    mc_mp_write_uint(w, 0);
    mc_mp_write_uint(w, MC_F_OWN_DISK);
    mc_mp_write_uint(w, 1);
    mc_rpc_reply_end(req, MC_OK);
    return 1;
}

static void reply_load_failed(master_srv_t *s, mc_rpc_req_t *req, mc_status_t st)
{
    reply_status(s, req, st,
                 st == MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS
                     ? "the node holding it on disk does not poll for offload work"
                     : NULL);
}

/* A reader that takes partial answers, of a load in flight whose node said
 * more bytes are in than it has of that load: the range being loaded
 * (PROCESSING), READY, the load's id, and HELD_US, no lease (the load holds
 * the range; the reader returns nothing before the load's final answer).
 * 0: nothing new. */
static int offload_partial_answer(master_srv_t *s, mc_rpc_req_t *req, const char *key, size_t klen,
                                  const load_ask_t *a)
{
    mc_master_replica_desc_t d;
    uint64_t ready = 0, id = 0, now = mc_now_us(), t0 = mc_rpc_req_start_us(req);
    if (!mc_master_offload_partial(s->m, key, klen, a->have, a->have_id, &d, &ready, &id))
        return 0;
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 5);
    mc_mp_write_uint(w, MC_F_LOAD_ID);
    mc_mp_write_uint(w, id);
    mc_mp_write_uint(w, MC_F_REPLICAS);
    mc_proto_write_replicas(w, &d, 1);
    mc_mp_write_uint(w, MC_F_LEASE_TTL_US);
    mc_mp_write_uint(w, 0);
    mc_mp_write_uint(w, MC_F_LOADED);
    mc_mp_write_uint(w, ready);
    mc_mp_write_uint(w, MC_F_HELD_US);
    mc_mp_write_uint(w, now > t0 ? now - t0 : 0);
    mc_rpc_reply_end(req, MC_OK);
    return 1;
}

/* Ask for key's load (again: the master core knows one in flight) and
 * answer when there is nothing to wait for; with may_hold, no answer (0)
 * while the load is in flight or there is no room for it yet; a reader
 * that takes partial answers gets one when its node said more bytes are in
 * than it has (offload_partial_answer). */
static int offload_load_answer(master_srv_t *s, mc_rpc_req_t *req, const char *key, size_t klen,
                               int may_hold, const load_ask_t *a)
{
    mc_status_t st = mc_master_offload_load(s->m, key, klen, mc_now_us());
    int wait = st == MC_OK ? mc_master_offload_loading(s->m, key, klen)
                           : st == MC_ERR_NO_AVAILABLE_HANDLE || st == MC_ERR_LIMIT;
    if (wait && st == MC_OK && a->partial && offload_partial_answer(s, req, key, klen, a))
        return 1;
    if (wait && may_hold)
        return 0;
    if (st != MC_OK && !wait)
        reply_load_failed(s, req, st);
    else
        offload_load_list(s, req, key, klen, a); /* loaded, or the deadline: as it is now */
    return 1;
}

static void held_look(mc_reactor_t *r, void *arg, mc_status_t st);

/* The master core's notify (any thread, master locks held): every reactor
 * holding calls looks at them again, one posted look at a time. */
void master_srv_offload_kick(void *arg)
{
    master_srv_t *s = arg;
    for (unsigned i = 0; i < s->nscratch; i++) {
        scratch_t *sc = &s->scratch[i];
        if (atomic_load(&sc->nheld) == 0)
            continue;
        int no = 0;
        if (!atomic_compare_exchange_strong(&sc->kick_posted, &no, 1))
            continue;
        if (mc_reactor_call(mc_reactor_group_get(s->g, i), held_look, s) != MC_OK)
            atomic_store(&sc->kick_posted, 0); /* stopping; or the next kick */
    }
}

/* On a reactor: answer the held calls that have their answer or reached
 * their deadline. */
static void held_look(mc_reactor_t *r, void *arg, mc_status_t st)
{
    master_srv_t *s = arg;
    if (st != MC_OK)
        return; /* the reactor stops: the calls go with the server */
    scratch_t *sc = &s->scratch[mc_reactor_index(r)];
    atomic_store(&sc->kick_posted, 0); /* events from now on post another look */
    uint64_t now = mc_now_us();
    int serving = master_ha_serving(s, now);
    mc_list_t *n = sc->held.next;
    while (n != &sc->held) {
        mc_list_t *next = n->next;
        held_t *h = MC_CONTAINER_OF(n, held_t, node);
        int last = now >= h->deadline_us;
        int done;
        if (!serving) {
            reply_not_leader(s, h->req);
            done = 1;
        } else if (h->kind == HELD_POLL) {
            done = offload_poll_answer(s, h->req,
                                       &(poll_ask_t){h->client_id, h->segment_id, h->max, h->ids,
                                                     h->says_done, h->done_id},
                                       !last);
        } else {
            done = offload_load_answer(s, h->req, h->key, h->key_len, !last, &h->ask);
        }
        if (done) {
            mc_list_del(n);
            atomic_fetch_sub(&sc->nheld, 1);
            mc_free(h);
        }
        n = next;
    }
}

/* Hold req (its answer comes from held_look). key: a LOAD's. 0 when out of
 * memory (not held: the caller answers now). */
static int hold(master_srv_t *s, mc_rpc_req_t *req, held_kind_t kind, const fields_t *f,
                uint32_t max)
{
    size_t klen = kind == HELD_LOAD ? f->key_len : 0;
    held_t *h = mc_malloc(sizeof(*h) + klen);
    if (h == NULL)
        return 0;
    h->req = req;
    h->kind = kind;
    h->deadline_us = mc_now_us() + (f->wait_us < HOLD_MAX_US ? f->wait_us : HOLD_MAX_US);
    h->client_id = f->client_id;
    h->segment_id = f->segment_id;
    h->max = max;
    h->ask = load_ask(f);
    h->ids = f->has_load_id;
    h->says_done = f->has_done_id;
    h->done_id = f->done_id;
    h->key_len = (uint32_t)klen;
    if (klen)
        memcpy(h->key, f->key, klen);
    scratch_t *sc = scratch_of(s, req);
    mc_list_push_tail(&sc->held, &h->node);
    atomic_fetch_add(&sc->nheld, 1);
    return 1;
}

static void h_offload_poll(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_CLIENT_ID) | BIT(MC_F_SEGMENT_ID)))
        return;
    /* COUNT 0 (given): the node says it offloads and takes no work yet
     * (before its start scan); answered at once, empty */
    int announce = HAVE(&f, MC_F_COUNT) && f.count == 0;
    uint32_t max = announce                                     ? 0
                   : f.count == 0 || f.count > OFFLOAD_POLL_MAX ? OFFLOAD_POLL_MAX
                                                                : (uint32_t)f.count;
    int may_hold = f.wait_us > 0 && !announce;
    if (f.has_disk_id) { /* before the answer: DELETEs kept for its directory are in it */
        mc_status_t st =
            mc_master_offload_disk(s->m, f.client_id, f.segment_id, f.disk_id, f.disk_id_len);
        if (st != MC_OK) {
            reply_status(s, req, st,
                         st == MC_ERR_INVALID_PARAMS ? "disk_id (136): 1..64 bytes"
                         : st == MC_ERR_UNAVAILABLE_IN_CURRENT_MODE
                             ? "offload is off (enable_offload)"
                             : NULL);
            return;
        }
    }
    poll_ask_t a = {f.client_id, f.segment_id, max, f.has_load_id, f.has_done_id, f.done_id};
    if (!offload_poll_answer(s, req, &a, may_hold) && !hold(s, req, HELD_POLL, &f, max))
        offload_poll_answer(s, req, &a, 0);
}

static void h_offload_done(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL,
               BIT(MC_F_CLIENT_ID) | BIT(MC_F_SEGMENT_ID) | BIT(MC_F_KEY) | BIT(MC_F_SIZE) |
                   BIT(MC_F_STATUS)))
        return;
    mc_status_t st =
        mc_master_offload_done_id(s->m, f.client_id, f.segment_id, f.key, f.key_len, f.size,
                                  (mc_status_t)f.status, mc_now_us(), f.load_id);
    if (st == MC_OK)
        reply_status_durable(s, req, st); /* its LDISK record */
    else
        reply_status(s, req, st,
                     st == MC_ERR_OBJECT_NOT_FOUND ? "no offload of this object is pending" : NULL);
}

static void reply_statuses(master_srv_t *s, mc_rpc_req_t *req, const mc_status_t *st, size_t n);

/* What a node's batch call does with each of its files. */
typedef mc_status_t (*node_file_fn)(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                    const char *key, size_t key_len, uint64_t size,
                                    uint64_t now_us);

/* A node's batch call {CLIENT_ID, SEGMENT_ID, KEYS, SIZES}: fn on each
 * file; one answer with a status per file, sent once their records are
 * durable. */
static void node_files_batch(master_srv_t *s, mc_rpc_req_t *req, node_file_fn fn)
{
    fields_t f;
    if (!begin(s, req, &f, NULL,
               BIT(MC_F_CLIENT_ID) | BIT(MC_F_SEGMENT_ID) | BIT(MC_F_KEYS) | BIT(MC_F_SIZES)))
        return;
    if (f.nkeys != f.nsizes) {
        reply_status(s, req, MC_ERR_INVALID_PARAMS, "keys and sizes differ in length");
        return;
    }
    scratch_t *sc = scratch_of(s, req);
    uint64_t now = mc_now_us();
    for (uint32_t i = 0; i < f.nkeys; i++)
        sc->st[i] = fn(s->m, f.client_id, f.segment_id, sc->keys[i].data, sc->keys[i].len,
                       sc->sizes[i], now);
    reply_statuses(s, req, sc->st, f.nkeys);
}

static mc_status_t offload_done_ok(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                   const char *key, size_t key_len, uint64_t size, uint64_t now_us)
{
    return mc_master_offload_done(m, client, segment_id, key, key_len, size, MC_OK, now_us);
}

/* A node's write batch: each file as OFFLOAD_DONE with STATUS OK would be. */
static void h_offload_done_batch(void *ctx, mc_rpc_req_t *req)
{
    node_files_batch(ctx, req, offload_done_ok);
}

/* A node's start report, many files at once: each as LDISK_REPORT would be. */
static void h_ldisk_report_batch(void *ctx, mc_rpc_req_t *req)
{
    node_files_batch(ctx, req, mc_master_ldisk_report);
}

static void h_ldisk_report(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL,
               BIT(MC_F_CLIENT_ID) | BIT(MC_F_SEGMENT_ID) | BIT(MC_F_KEY) | BIT(MC_F_SIZE)))
        return;
    mc_status_t st = mc_master_ldisk_report(s->m, f.client_id, f.segment_id, f.key, f.key_len,
                                            f.size, mc_now_us());
    /* a removed key's file (its DELETE taken back): nodes older than
     * LDISK_REPORT_BATCH delete a file refused so, not one NOT_FOUND */
    if (st == MC_ERR_OBJECT_NOT_FOUND)
        st = MC_ERR_OBJECT_ALREADY_EXISTS;
    if (st == MC_OK)
        reply_status_durable(s, req, st);
    else
        reply_status(s, req, st,
                     st == MC_ERR_UNAVAILABLE_IN_CURRENT_MODE ? "offload is off (enable_offload)"
                     : st == MC_ERR_OBJECT_ALREADY_EXISTS
                         ? "the key exists, or was removed: the file may be of an older put"
                         : NULL);
}

static void h_ldisk_drop(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_CLIENT_ID) | BIT(MC_F_SEGMENT_ID) | BIT(MC_F_KEY)))
        return;
    mc_status_t st =
        mc_master_ldisk_drop(s->m, f.client_id, f.segment_id, f.key, f.key_len, mc_now_us());
    if (st == MC_OK)
        reply_status_durable(s, req, st);
    else
        reply_status(s, req, st, NULL);
}

/* A reader found only a LOCAL_DISK replica. Without WAIT_US: the status
 * only (the reader lists again). With it: answered once the node loaded the
 * object, with the replica list and a lease (held meanwhile). */
static void h_offload_load(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEY)))
        return;
    if (f.wait_us > 0 && own_disk_answer(s, req, &f)) /* the caller reads it itself */
        return;
    if (f.wait_us == 0) {
        mc_status_t st = mc_master_offload_load(s->m, f.key, f.key_len, mc_now_us());
        if (st != MC_OK)
            reply_load_failed(s, req, st);
        else
            reply_status(s, req, st, NULL);
        return;
    }
    load_ask_t a = load_ask(&f);
    if (!offload_load_answer(s, req, f.key, f.key_len, 1, &a) && !hold(s, req, HELD_LOAD, &f, 0))
        offload_load_answer(s, req, f.key, f.key_len, 0, &a);
}

/* A node's LOAD in flight has its first READY bytes in: readers holding a
 * call that takes partial answers are told (offload_notify). */
static void h_offload_progress(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL,
               BIT(MC_F_CLIENT_ID) | BIT(MC_F_SEGMENT_ID) | BIT(MC_F_KEY) | BIT(MC_F_SIZE)))
        return;
    if (!f.has_ready) {
        reply_status(s, req, MC_ERR_INVALID_PARAMS, "missing field loaded (132)");
        return;
    }
    mc_status_t st = mc_master_offload_progress(s->m, f.client_id, f.segment_id, f.key, f.key_len,
                                                f.size, f.ready, f.load_id);
    reply_status(s, req, st, st == MC_ERR_INVALID_PARAMS ? "ready is over the size" : NULL);
}

static void h_put_start(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    mc_proto_put_cfg_t cfg;
    if (!begin(s, req, &f, &cfg, BIT(MC_F_CLIENT_ID) | BIT(MC_F_KEY) | BIT(MC_F_SIZE)))
        return;
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    cfg.cfg.put_id = f.put_id;
    mc_status_t st = mc_master_put_start(s->m, f.client_id, f.key, f.key_len, f.size, &cfg.cfg,
                                         mc_now_us(), d, &n);
    if (st != MC_OK) {
        reply_status(s, req, st, NULL);
        return;
    }
    mc_mp_writer_t w = body_begin(s, req, MC_F_REPLICAS);
    mc_proto_write_replicas(&w, d, n);
    body_space(s, req, &w);
}

static void h_put_end(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_CLIENT_ID) | BIT(MC_F_KEY)))
        return;
    reply_status_durable(s, req,
                         mc_master_put_end(s->m, f.client_id, f.key, f.key_len, mc_now_us()));
}

static void h_put_revoke(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_CLIENT_ID) | BIT(MC_F_KEY)))
        return;
    reply_status(s, req, mc_master_put_revoke(s->m, f.client_id, f.key, f.key_len, mc_now_us()),
                 NULL);
}

/* Reply {STATUSES: [st...]} for n items; the call's status is MC_OK when the
 * batch itself was processed (items carry their own). */
static void reply_statuses(master_srv_t *s, mc_rpc_req_t *req, const mc_status_t *st, size_t n)
{
    mc_mp_writer_t w = body_begin(s, req, MC_F_STATUSES);
    mc_mp_write_array(&w, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        mc_mp_write_int(&w, st[i]);
    body_durable(s, req, &w);
}

static void h_batch_put_start(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    mc_proto_put_cfg_t cfg;
    if (!begin(s, req, &f, &cfg, BIT(MC_F_CLIENT_ID) | BIT(MC_F_KEYS) | BIT(MC_F_SIZES)))
        return;
    if (f.nkeys != f.nsizes) {
        reply_status(s, req, MC_ERR_INVALID_PARAMS, "keys and sizes differ in length");
        return;
    }
    scratch_t *sc = scratch_of(s, req);
    uint32_t per = cfg.cfg.replica_num ? cfg.cfg.replica_num : 1;
    if (per > MC_MASTER_MAX_REPLICAS)
        per = MC_MASTER_MAX_REPLICAS;
    if (scratch_reserve(sc, f.nkeys, per) != MC_OK) {
        reply_status(s, req, MC_ERR_NOMEM, "out of memory");
        return;
    }
    cfg.cfg.put_id = f.put_id;
    mc_status_t st = mc_master_batch_put_start(s->m, f.client_id, sc->keys, sc->sizes, f.nkeys,
                                               &cfg.cfg, mc_now_us(), sc->descs, sc->nrep, sc->st);
    if (st != MC_OK) {
        reply_status(s, req, st, NULL);
        return;
    }
    mc_mp_writer_t w = body_begin(s, req, MC_F_ITEMS);
    mc_mp_write_array(&w, f.nkeys);
    for (uint32_t i = 0; i < f.nkeys; i++) {
        mc_mp_write_map(&w, 2);
        mc_mp_write_uint(&w, MC_F_STATUS);
        mc_mp_write_int(&w, sc->st[i]);
        mc_mp_write_uint(&w, MC_F_REPLICAS);
        mc_proto_write_replicas(&w, &sc->descs[(size_t)i * per],
                                sc->st[i] == MC_OK ? sc->nrep[i] : 0);
    }
    body_space(s, req, &w);
}

typedef mc_status_t (*batch_keys_fn_t)(mc_master_t *m, mc_uuid_t client,
                                       const mc_master_key_t *keys, size_t n, uint64_t now_us,
                                       mc_status_t *st);

static void batch_client_keys(master_srv_t *s, mc_rpc_req_t *req, batch_keys_fn_t fn)
{
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_CLIENT_ID) | BIT(MC_F_KEYS)))
        return;
    scratch_t *sc = scratch_of(s, req);
    mc_status_t st = fn(s->m, f.client_id, sc->keys, f.nkeys, mc_now_us(), sc->st);
    if (st != MC_OK)
        reply_status(s, req, st, NULL);
    else
        reply_statuses(s, req, sc->st, f.nkeys);
}

static void h_batch_put_end(void *ctx, mc_rpc_req_t *req)
{
    batch_client_keys(ctx, req, mc_master_batch_put_end);
}

static void h_batch_put_revoke(void *ctx, mc_rpc_req_t *req)
{
    batch_client_keys(ctx, req, mc_master_batch_put_revoke);
}

/* Nothing in the list is readable but a node's LOCAL_DISK replica (no
 * complete memory or DISK replica). */
static int only_local_disk(const mc_master_replica_desc_t *d, uint32_t n)
{
    int ldisk = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (d[i].kind == MC_MASTER_REPLICA_LOCAL_DISK)
            ldisk = 1;
        else if (d[i].status == MC_MASTER_REPLICA_COMPLETE)
            return 0;
    }
    return ldisk;
}

/* With WAIT_US (a reader that would ask for the load next): an object only
 * on a node's disk is loaded as OFFLOAD_LOAD with WAIT_US would, and the
 * call answered (with HELD_US) once the node loaded it: one call less per
 * disk-only get. Any other object: answered at once, as without. */
static void h_get_replica_list(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEY)))
        return;
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    uint64_t lease = 0;
    /* only on a node's disk: straight to the load, no lease granted on this
     * listing (the load's answer grants one, which its reader may release:
     * a lease held to its TTL here would keep the loaded copy as long) */
    if (own_disk_answer(s, req, &f)) /* on the caller's own disk: it reads its file */
        return;
    int disk_only = f.wait_us > 0 && mc_master_offload_disk_only(s->m, f.key, f.key_len);
    mc_status_t st = disk_only ? MC_OK
                               : mc_master_get_replica_list(s->m, f.key, f.key_len, mc_now_us(), d,
                                                            MC_MASTER_MAX_REPLICAS, &n, &lease);
    if (st != MC_OK) {
        reply_status(s, req, st, NULL);
        return;
    }
    if (disk_only || (f.wait_us > 0 && only_local_disk(d, n))) {
        load_ask_t a = load_ask(&f);
        if (!offload_load_answer(s, req, f.key, f.key_len, 1, &a) &&
            !hold(s, req, HELD_LOAD, &f, 0))
            offload_load_answer(s, req, f.key, f.key_len, 0, &a);
        return;
    }
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, MC_F_REPLICAS);
    mc_proto_write_replicas(w, d, n);
    mc_mp_write_uint(w, MC_F_LEASE_TTL_US);
    mc_mp_write_uint(w, lease);
    mc_rpc_reply_end(req, MC_OK);
}

static void h_batch_get_replica_list(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEYS)))
        return;
    scratch_t *sc = scratch_of(s, req);
    if (scratch_reserve(sc, f.nkeys, MC_MASTER_MAX_REPLICAS) != MC_OK) {
        reply_status(s, req, MC_ERR_NOMEM, "out of memory");
        return;
    }
    /* a reader that will release its leases (LEASE_RELEASE) gets the grant's
     * time and this master's view to send back with it */
    int release = f.release && s->opts.master.lease_release;
    uint64_t now = mc_now_us();
    mc_status_t st = mc_master_batch_get_leased(s->m, sc->keys, f.nkeys, now, release, sc->descs,
                                                MC_MASTER_MAX_REPLICAS, sc->nrep, sc->st);
    if (st != MC_OK) {
        reply_status(s, req, st, NULL);
        return;
    }
    count(s, req, MC_OK);
    uint64_t lease = s->opts.master.lease_ttl_us;
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, release ? 3 : 1);
    if (release) {
        mc_mp_write_uint(w, MC_F_GRANT_US);
        mc_mp_write_uint(w, now);
        mc_mp_write_uint(w, MC_F_VIEW_VERSION);
        mc_mp_write_int(w, mc_master_view_version(s->m));
    }
    mc_mp_write_uint(w, MC_F_ITEMS);
    mc_mp_write_array(w, f.nkeys);
    for (uint32_t i = 0; i < f.nkeys; i++) {
        int ok = sc->st[i] == MC_OK;
        mc_mp_write_map(w, ok ? 3 : 1);
        mc_mp_write_uint(w, MC_F_STATUS);
        mc_mp_write_int(w, sc->st[i]);
        if (ok) {
            mc_mp_write_uint(w, MC_F_REPLICAS);
            mc_proto_write_replicas(w, &sc->descs[(size_t)i * MC_MASTER_MAX_REPLICAS], sc->nrep[i]);
            mc_mp_write_uint(w, MC_F_LEASE_TTL_US);
            mc_mp_write_uint(w, lease);
        }
    }
    mc_rpc_reply_end(req, MC_OK);
}

static void h_lease_release(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEYS) | BIT(MC_F_GRANT_US) | BIT(MC_F_VIEW_VERSION)))
        return;
    size_t released = 0;
    mc_status_t st =
        mc_master_batch_lease_release(s->m, scratch_of(s, req)->keys, f.nkeys, f.view_version,
                                      f.grant_us, mc_now_us(), &released);
    if (st != MC_OK) {
        reply_status(s, req, st,
                     st == MC_ERR_INVALID_PARAMS ? "grant_us is later than this master's clock"
                                                 : NULL);
        return;
    }
    if (released > 0)
        master_srv_offload_kick(s); /* a load waiting for room may find it now */
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 1);
    mc_mp_write_uint(w, MC_F_COUNT);
    mc_mp_write_uint(w, released);
    mc_rpc_reply_end(req, MC_OK);
}

typedef struct regex_out {
    mc_mp_writer_t *w;
    uint32_t n;
} regex_out_t;

static int regex_entry(void *arg, const char *key, size_t key_len,
                       const mc_master_replica_desc_t *reps, uint32_t nrep)
{
    regex_out_t *o = arg;
    mc_mp_write_map(o->w, 2);
    mc_mp_write_uint(o->w, MC_F_KEY);
    mc_mp_write_bin(o->w, key, key_len);
    mc_mp_write_uint(o->w, MC_F_REPLICAS);
    mc_proto_write_replicas(o->w, reps, nrep);
    o->n++;
    return 0;
}

/* ---- regex scans: matched on the scan worker (master_server_scan.c) ---- */

/* Phase 2 of GetReplicaListByRegex on the worker: {ENTRIES, TRUNCATED}. */
static mc_status_t act_replicas(scan_job_t *j)
{
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &j->out);
    mc_mp_write_map(&w, 2);
    mc_mp_write_uint(&w, MC_F_ENTRIES);
    size_t at = mc_mp_write_array_later(&w);
    regex_out_t o = {.w = &w};
    size_t cnt = 0;
    int truncated = 0;
    mc_status_t st =
        mc_master_scan_replicas(j->s->m, j->sc, mc_now_us(), regex_entry, &o, &cnt, &truncated);
    mc_mp_patch_array(&w, at, o.n);
    mc_mp_write_uint(&w, MC_F_TRUNCATED);
    mc_mp_write_bool(&w, truncated);
    return st != MC_OK ? st : w.err;
}

/* Phase 2 of RemoveByRegex on the worker: {COUNT}. */
static mc_status_t act_remove(scan_job_t *j)
{
    long n = 0;
    mc_status_t st = mc_master_scan_remove(j->s->m, j->sc, mc_now_us(), &n);
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &j->out);
    mc_mp_write_map(&w, 1);
    mc_mp_write_uint(&w, MC_F_COUNT);
    mc_mp_write_int(&w, n);
    j->count = n;
    return st != MC_OK ? st : w.err;
}

/* On the request's reactor: answer and free. A remove waits for its
 * journal records in strict HA mode, like every other change. */
static void done_rpc(scan_job_t *j)
{
    master_srv_t *s = j->s;
    mc_rpc_req_t *req = j->req;
    if (j->st != MC_OK)
        reply_status(s, req, j->st, j->why[0] ? j->why : NULL);
    else if (j->act == act_remove)
        reply_durable(s, req, MC_OK, &j->out);
    else {
        count(s, req, MC_OK);
        mc_rpc_reply(req, MC_OK, mc_buf_head(&j->out), mc_buf_used(&j->out));
    }
    scan_job_free(j);
}

static void submit_scan(master_srv_t *s, mc_rpc_req_t *req, mc_master_scan_kind_t kind,
                        mc_status_t (*act)(scan_job_t *j))
{
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_REGEX)))
        return;
    char why[256];
    mc_master_scan_t *sc = NULL;
    mc_status_t st =
        mc_master_scan_create(s->m, kind, f.regex, f.regex_len, f.force, 0, &sc, why, sizeof(why));
    if (st != MC_OK) {
        MC_DEBUG(MASTER, "%s: regex refused: %s", mc_rpc_req_peer(req), why);
        reply_status(s, req, st, why[0] ? why : NULL);
        return;
    }
    scan_job_t *j = scan_job_new(s, sc, mc_rpc_req_reactor(req));
    if (j == NULL) {
        mc_master_scan_destroy(sc);
        reply_status(s, req, MC_ERR_NOMEM, "out of memory");
        return;
    }
    j->act = act;
    j->done = done_rpc;
    j->req = req;
    st = master_scan_submit(s, j, why, sizeof(why));
    if (st != MC_OK) {
        scan_job_free(j);
        reply_status(s, req, st, why);
    }
}

static void h_get_replica_list_by_regex(void *ctx, mc_rpc_req_t *req)
{
    submit_scan(ctx, req, MC_MASTER_SCAN_REPLICAS, act_replicas);
}

/* ---- operators' queries (mooncake-cli): nothing granted, nothing recorded */

static uint64_t left_us(uint64_t until, uint64_t now)
{
    return until > now ? until - now : 0;
}

static void h_query_key(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEY)))
        return;
    mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS + 1];
    uint32_t n = 0;
    mc_master_key_info_t ki;
    mc_status_t st =
        mc_master_query_key(s->m, f.key, f.key_len, d, MC_MASTER_MAX_REPLICAS + 1, &n, &ki);
    if (st != MC_OK) {
        reply_status(s, req, st, NULL);
        return;
    }
    uint64_t now = mc_now_us();
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 7);
    mc_mp_write_uint(w, MC_F_SIZE);
    mc_mp_write_uint(w, ki.size);
    mc_mp_write_uint(w, MC_F_COMPLETE);
    mc_mp_write_bool(w, ki.complete);
    mc_mp_write_uint(w, MC_F_DISK);
    mc_mp_write_bool(w, ki.disk);
    mc_mp_write_uint(w, MC_F_REPLICAS);
    mc_proto_write_replicas(w, d, n);
    mc_mp_write_uint(w, MC_F_LEASE_LEFT_US);
    mc_mp_write_uint(w, left_us(ki.lease_until_us, now));
    mc_mp_write_uint(w, MC_F_PIN_LEFT_US);
    mc_mp_write_uint(w, left_us(ki.soft_pin_until_us, now));
    mc_mp_write_uint(w, MC_F_IDLE_US);
    mc_mp_write_uint(w, now > ki.last_access_us ? now - ki.last_access_us : 0);
    mc_rpc_reply_end(req, MC_OK);
}

typedef struct seg_out {
    mc_mp_writer_t *w;
    uint32_t n;
    int only; /* list only the segments of owner */
    mc_uuid_t owner;
} seg_out_t;

static int seg_entry(void *arg, const mc_master_segment_info_t *si)
{
    seg_out_t *o = arg;
    if (o->only && !mc_uuid_eq(si->owner, o->owner))
        return 0;
    mc_mp_writer_t *w = o->w;
    mc_mp_write_map(w, 9);
    mc_mp_write_uint(w, MC_F_SEGMENT_ID);
    mc_proto_write_uuid(w, si->id);
    mc_mp_write_uint(w, MC_F_NAME);
    mc_mp_write_cstr(w, si->name);
    mc_mp_write_uint(w, MC_F_ENDPOINT);
    mc_mp_write_cstr(w, si->te_endpoint != NULL ? si->te_endpoint : "");
    mc_mp_write_uint(w, MC_F_ADDR);
    mc_mp_write_uint(w, si->base);
    mc_mp_write_uint(w, MC_F_SIZE);
    mc_mp_write_uint(w, si->size);
    mc_mp_write_uint(w, MC_F_USED);
    mc_mp_write_uint(w, si->used);
    mc_mp_write_uint(w, MC_F_ALLOCS);
    mc_mp_write_uint(w, si->allocs);
    mc_mp_write_uint(w, MC_F_STATE);
    mc_mp_write_cstr(w, si->unmounting ? "UNMOUNTING" : "MOUNTED");
    mc_mp_write_uint(w, MC_F_CLIENT_ID);
    mc_proto_write_uuid(w, si->owner);
    o->n++;
    return 0;
}

static void h_list_segments(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, 0))
        return;
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 1);
    mc_mp_write_uint(w, MC_F_SEGMENTS);
    size_t at = mc_mp_write_array_later(w);
    /* CLIENT_ID: only that client's segments (a node's /metrics asks for its own) */
    seg_out_t o = {.w = w, .only = HAVE(&f, MC_F_CLIENT_ID), .owner = f.client_id};
    mc_master_foreach_segment(s->m, seg_entry, &o);
    mc_mp_patch_array(w, at, o.n);
    mc_rpc_reply_end(req, MC_OK);
}

typedef struct keys_rpc_out {
    mc_mp_writer_t w;
    uint32_t n;
    uint64_t now;
} keys_rpc_out_t;

static int key_entry(void *arg, const mc_master_key_info_t *ki)
{
    keys_rpc_out_t *o = arg;
    mc_mp_writer_t *w = &o->w;
    mc_mp_write_map(w, 6);
    mc_mp_write_uint(w, MC_F_KEY);
    mc_mp_write_bin(w, ki->key, ki->key_len);
    mc_mp_write_uint(w, MC_F_SIZE);
    mc_mp_write_uint(w, ki->size);
    mc_mp_write_uint(w, MC_F_NREP);
    mc_mp_write_uint(w, ki->nrep);
    mc_mp_write_uint(w, MC_F_DISK);
    mc_mp_write_bool(w, ki->disk);
    mc_mp_write_uint(w, MC_F_COMPLETE);
    mc_mp_write_bool(w, ki->complete);
    mc_mp_write_uint(w, MC_F_LEASE_LEFT_US);
    mc_mp_write_uint(w, left_us(ki->lease_until_us, o->now));
    o->n++;
    return w->err != MC_OK;
}

/* Phase 2 of ListKeys on the worker: {ENTRIES, TRUNCATED}. */
static mc_status_t act_list_keys(scan_job_t *j)
{
    keys_rpc_out_t o = {.now = mc_now_us()};
    mc_mp_writer_init(&o.w, &j->out);
    mc_mp_write_map(&o.w, 2);
    mc_mp_write_uint(&o.w, MC_F_ENTRIES);
    size_t at = mc_mp_write_array_later(&o.w);
    size_t cnt = 0;
    mc_status_t st = mc_master_scan_keys(j->s->m, j->sc, key_entry, &o, &cnt);
    mc_mp_patch_array(&o.w, at, o.n);
    mc_mp_write_uint(&o.w, MC_F_TRUNCATED);
    mc_mp_write_bool(&o.w, (uint64_t)o.n >= (uint64_t)j->count);
    return st != MC_OK ? st : o.w.err;
}

#define LIST_KEYS_DEFAULT 1000
#define LIST_KEYS_MAX 100000

static void h_list_keys(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, 0))
        return;
    uint64_t limit = HAVE(&f, MC_F_COUNT) ? f.count : LIST_KEYS_DEFAULT;
    if (limit == 0 || limit > LIST_KEYS_MAX) {
        reply_status(s, req, MC_ERR_INVALID_PARAMS, "the limit (count) must be 1..100000");
        return;
    }
    char why[256];
    mc_master_scan_t *sc = NULL;
    mc_status_t st =
        mc_master_scan_create(s->m, MC_MASTER_SCAN_KEYS, f.regex, f.regex != NULL ? f.regex_len : 0,
                              0, (size_t)limit, &sc, why, sizeof(why));
    if (st != MC_OK) {
        reply_status(s, req, st, st == MC_ERR_INVALID_PARAMS ? why : NULL);
        return;
    }
    scan_job_t *j = scan_job_new(s, sc, mc_rpc_req_reactor(req));
    if (j == NULL) {
        mc_master_scan_destroy(sc);
        reply_status(s, req, MC_ERR_NOMEM, "out of memory");
        return;
    }
    j->act = act_list_keys;
    j->done = done_rpc;
    j->req = req;
    j->count = (long)limit;
    st = master_scan_submit(s, j, why, sizeof(why));
    if (st != MC_OK) {
        scan_job_free(j);
        reply_status(s, req, st, why);
    }
}

static void h_exist_key(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEY)))
        return;
    int exists = 0;
    mc_status_t st = mc_master_exist_key(s->m, f.key, f.key_len, mc_now_us(), &exists);
    if (st != MC_OK) {
        reply_status(s, req, st, NULL);
        return;
    }
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 1);
    mc_mp_write_uint(w, MC_F_EXISTS);
    mc_mp_write_bool(w, exists);
    mc_rpc_reply_end(req, MC_OK);
}

static void h_batch_exist_key(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEYS)))
        return;
    scratch_t *sc = scratch_of(s, req);
    mc_status_t st =
        mc_master_batch_exist_key(s->m, sc->keys, f.nkeys, mc_now_us(), sc->exists, sc->st);
    if (st != MC_OK) {
        reply_status(s, req, st, NULL);
        return;
    }
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, MC_F_STATUSES);
    mc_mp_write_array(w, f.nkeys);
    for (uint32_t i = 0; i < f.nkeys; i++)
        mc_mp_write_int(w, sc->st[i]);
    mc_mp_write_uint(w, MC_F_EXISTS);
    mc_mp_write_array(w, f.nkeys);
    for (uint32_t i = 0; i < f.nkeys; i++)
        mc_mp_write_bool(w, sc->st[i] == MC_OK && sc->exists[i]);
    mc_rpc_reply_end(req, MC_OK);
}

static void h_remove(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEY)))
        return;
    reply_status_durable(s, req, mc_master_remove(s->m, f.key, f.key_len, f.force, mc_now_us()));
}

static void reply_count(master_srv_t *s, mc_rpc_req_t *req, mc_status_t st, long n)
{
    if (st != MC_OK) {
        reply_status(s, req, st, NULL);
        return;
    }
    mc_mp_writer_t w = body_begin(s, req, MC_F_COUNT);
    mc_mp_write_int(&w, n);
    body_durable(s, req, &w);
}

static void h_remove_by_regex(void *ctx, mc_rpc_req_t *req)
{
    submit_scan(ctx, req, MC_MASTER_SCAN_REMOVE, act_remove);
}

static void h_remove_all(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, 0))
        return;
    long n = 0;
    mc_status_t st = mc_master_remove_all(s->m, f.force, mc_now_us(), &n);
    reply_count(s, req, st, n);
}

static void h_batch_remove(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEYS)))
        return;
    scratch_t *sc = scratch_of(s, req);
    mc_status_t st = mc_master_batch_remove(s->m, sc->keys, f.nkeys, f.force, mc_now_us(), sc->st);
    if (st != MC_OK)
        reply_status(s, req, st, NULL);
    else
        reply_statuses(s, req, sc->st, f.nkeys);
}

static void h_mount_segment(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_CLIENT_ID) | BIT(MC_F_SEGMENT)))
        return;
    mc_status_t st = mc_master_mount_segment(s->m, f.client_id, &f.seg.seg, mc_now_us());
    mc_uuid_t holder;
    char ep[MC_MASTER_NAME_MAX], why[MC_MASTER_NAME_MAX * 2 + 128];
    if (st == MC_ERR_SEGMENT_ALREADY_EXISTS &&
        mc_master_segment_holder(s->m, f.seg.seg.name, f.client_id, &holder, ep, sizeof(ep))) {
        snprintf(why, sizeof(why),
                 "segment name '%s' is held by another live client, %016llx-%016llx "
                 "(transfer endpoint '%s'): two processes with the same local_hostname/port?",
                 f.seg.seg.name, (unsigned long long)holder.hi, (unsigned long long)holder.lo, ep);
        reply_status(s, req, st, why);
        return;
    }
    if (st == MC_OK)
        MC_INFO(MASTER, "segment '%s' mounted by %s: %llu bytes at 0x%llx", f.seg.name,
                mc_rpc_req_peer(req), (unsigned long long)f.seg.seg.size,
                (unsigned long long)f.seg.seg.base);
    reply_status_durable(s, req, st);
}

static void h_remount_segment(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_CLIENT_ID)))
        return;
    scratch_t *sc = scratch_of(s, req);
    mc_master_segment_t segs[64];
    mc_master_segment_t *arr = segs;
    if (f.nsegs > 64 && (arr = mc_malloc(f.nsegs * sizeof(*arr))) == NULL) {
        reply_status(s, req, MC_ERR_NOMEM, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < f.nsegs; i++)
        arr[i] = sc->segs[i].seg;
    mc_status_t st = mc_master_remount_segments(s->m, f.client_id, arr, f.nsegs, mc_now_us());
    if (arr != segs)
        mc_free(arr);
    reply_status_durable(s, req, st);
}

static void h_unmount_segment(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_CLIENT_ID) | BIT(MC_F_SEGMENT_ID)))
        return;
    uint64_t drain = 0;
    mc_status_t st =
        mc_master_unmount_segment(s->m, f.client_id, f.segment_id, mc_now_us(), &drain);
    if (st != MC_OK) {
        reply_status(s, req, st, NULL);
        return;
    }
    mc_mp_writer_t w = body_begin(s, req, MC_F_DRAIN_UNTIL_US);
    /* as a delay from now: the peer's clock is not ours */
    uint64_t now = mc_now_us();
    mc_mp_write_uint(&w, drain > now ? drain - now : 0);
    body_durable(s, req, &w);
}

static void h_ping(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_CLIENT_ID)))
        return;
    int64_t vv = 0;
    mc_master_client_status_t cs = MC_MASTER_CLIENT_UNDEFINED;
    mc_master_ping(s->m, f.client_id, mc_now_us(), &vv, &cs);
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, MC_F_VIEW_VERSION);
    mc_mp_write_int(w, vv);
    mc_mp_write_uint(w, MC_F_CLIENT_STATUS);
    mc_mp_write_uint(w, (uint64_t)cs);
    mc_rpc_reply_end(req, MC_OK);
}

static void h_meta_get(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEY)))
        return;
    void *val = NULL;
    size_t len = 0;
    mc_status_t st = mc_master_meta_get(s->m, f.key, f.key_len, &val, &len);
    if (st != MC_OK) {
        reply_status(s, req, st, NULL);
        return;
    }
    count(s, req, MC_OK);
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 1);
    mc_mp_write_uint(w, MC_F_VALUE);
    mc_mp_write_bin(w, val, len);
    mc_rpc_reply_end(req, MC_OK);
    mc_free(val);
}

static const char *meta_why(mc_status_t st, const master_srv_t *s)
{
    (void)s;
    switch (st) {
    case MC_ERR_INVALID_PARAMS:
        return "metadata entries need an owner (client_id) and a value within master."
               "meta_max_value_len";
    case MC_ERR_ILLEGAL_CLIENT:
        return "the entry belongs to another client, alive (same name on two processes?)";
    case MC_ERR_LIMIT:
        return "the metadata store is full (master.meta_max_entries / meta_max_bytes)";
    default:
        return NULL;
    }
}

static void h_meta_put(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEY) | BIT(MC_F_VALUE)))
        return;
    mc_status_t st =
        mc_master_meta_put(s->m, f.key, f.key_len, f.value, f.value_len, f.client_id, mc_now_us());
    if (st != MC_OK && st != MC_ERR_NOMEM) {
        MC_DEBUG(MASTER, "%s: META_PUT '%.*s' refused: %s", mc_rpc_req_peer(req), (int)f.key_len,
                 f.key, mc_status_str(st));
        reply_status(s, req, st, meta_why(st, s));
        return;
    }
    reply_status_durable(s, req, st);
}

static void h_meta_del(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, BIT(MC_F_KEY) | BIT(MC_F_CLIENT_ID)))
        return;
    if (mc_uuid_is_zero(f.client_id)) {
        reply_status(s, req, MC_ERR_INVALID_PARAMS, "client_id {0,0} owns nothing");
        return;
    }
    mc_status_t st = mc_master_meta_del(s->m, f.key, f.key_len, f.client_id);
    if (st == MC_ERR_ILLEGAL_CLIENT) {
        reply_status(s, req, st, "only the entry's owner may delete it");
        return;
    }
    reply_status_durable(s, req, st);
}

static int meta_entry(void *arg, const char *key, size_t key_len, const void *val, size_t val_len)
{
    regex_out_t *o = arg;
    mc_mp_write_map(o->w, 2);
    mc_mp_write_uint(o->w, MC_F_KEY);
    mc_mp_write_bin(o->w, key, key_len);
    mc_mp_write_uint(o->w, MC_F_VALUE);
    mc_mp_write_bin(o->w, val, val_len);
    o->n++;
    return 0;
}

/* One page of META_LIST: {ENTRIES, MORE}; the client asks again with AFTER =
 * the last key while MORE. A page carries at most META_PAGE_BYTES of keys
 * and values, or one entry if that is larger (a value is at most
 * meta_max_value_len, under the frame limit). */
#define META_PAGE_BYTES (4u << 20)

static void h_meta_list(void *ctx, mc_rpc_req_t *req)
{
    master_srv_t *s = ctx;
    fields_t f;
    if (!begin(s, req, &f, NULL, 0))
        return;
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    size_t body_start = mc_buf_used(w->buf);
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, MC_F_ENTRIES);
    size_t at = mc_mp_write_array_later(w);
    regex_out_t o = {.w = w};
    size_t cnt = 0;
    int more = 0;
    mc_status_t st =
        mc_master_meta_list_page(s->m, f.prefix ? f.prefix : "", f.prefix_len, f.after, f.after_len,
                                 META_PAGE_BYTES, meta_entry, &o, &cnt, &more);
    mc_mp_patch_array(w, at, (uint32_t)o.n);
    mc_mp_write_uint(w, MC_F_MORE);
    mc_mp_write_bool(w, more);
    if (st != MC_OK && w->err == MC_OK)
        w->buf->len = w->buf->off + body_start;
    count(s, req, st);
    mc_rpc_reply_end(req, st);
}

static const struct {
    uint16_t method;
    mc_rpc_handler_t fn;
} handlers[] = {
    {MC_RPC_SERVICE_READY, h_service_ready},
    {MC_RPC_PUT_START, h_put_start},
    {MC_RPC_PUT_END, h_put_end},
    {MC_RPC_PUT_REVOKE, h_put_revoke},
    {MC_RPC_BATCH_PUT_START, h_batch_put_start},
    {MC_RPC_BATCH_PUT_END, h_batch_put_end},
    {MC_RPC_BATCH_PUT_REVOKE, h_batch_put_revoke},
    {MC_RPC_GET_REPLICA_LIST, h_get_replica_list},
    {MC_RPC_BATCH_GET_REPLICA_LIST, h_batch_get_replica_list},
    {MC_RPC_LEASE_RELEASE, h_lease_release},
    {MC_RPC_GET_REPLICA_LIST_BY_REGEX, h_get_replica_list_by_regex},
    {MC_RPC_QUERY_KEY, h_query_key},
    {MC_RPC_LIST_SEGMENTS, h_list_segments},
    {MC_RPC_LIST_KEYS, h_list_keys},
    {MC_RPC_EXIST_KEY, h_exist_key},
    {MC_RPC_BATCH_EXIST_KEY, h_batch_exist_key},
    {MC_RPC_REMOVE, h_remove},
    {MC_RPC_REMOVE_BY_REGEX, h_remove_by_regex},
    {MC_RPC_REMOVE_ALL, h_remove_all},
    {MC_RPC_BATCH_REMOVE, h_batch_remove},
    {MC_RPC_MOUNT_SEGMENT, h_mount_segment},
    {MC_RPC_REMOUNT_SEGMENT, h_remount_segment},
    {MC_RPC_UNMOUNT_SEGMENT, h_unmount_segment},
    {MC_RPC_PING, h_ping},
    {MC_RPC_GET_FSDIR, h_get_fsdir},
    {MC_RPC_TIER_ADD, h_tier_add},
    {MC_RPC_OFFLOAD_POLL, h_offload_poll},
    {MC_RPC_OFFLOAD_DONE, h_offload_done},
    {MC_RPC_OFFLOAD_DONE_BATCH, h_offload_done_batch},
    {MC_RPC_OFFLOAD_PROGRESS, h_offload_progress},
    {MC_RPC_LDISK_REPORT, h_ldisk_report},
    {MC_RPC_LDISK_REPORT_BATCH, h_ldisk_report_batch},
    {MC_RPC_LDISK_DROP, h_ldisk_drop},
    {MC_RPC_OFFLOAD_LOAD, h_offload_load},
    {MC_RPC_META_GET, h_meta_get},
    {MC_RPC_META_PUT, h_meta_put},
    {MC_RPC_META_DEL, h_meta_del},
    {MC_RPC_META_LIST, h_meta_list},
};

/* -------------------------------------------------------------- service */

void mc_master_server_opts_init(mc_master_server_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->bind_address = "0.0.0.0";
    o->rpc_port = 50051;
    o->http_port = 9003;
    o->http_enabled = 1;
    o->http_metadata = 1;
    o->tick_interval_us = 100000;
    o->regex_timeout_us = 3000000; /* under the clients' default call timeout (5 s) */
    o->regex_queue = 16;
    o->fsdir = "";
    o->cluster_id = "mooncake_cluster";
    o->persist = MC_MASTER_PERSIST_ASYNC;
    o->tier_scan_max = 10000000;
    o->ha.wait_replicas = 1;
    mc_master_opts_init(&o->master);
}

static void on_tick(mc_timer_t *t, void *arg)
{
    master_srv_t *s = arg;
    (void)t;
    /* a standby's state changes only by the journal: no expiry, no eviction */
    if (s->ha == NULL || master_ha_serving(s, mc_now_us()))
        mc_master_tick(s->m, mc_now_us());
    master_srv_offload_kick(s); /* held offload calls: their deadlines */
}

static void arm_tick(void *arg)
{
    master_srv_t *s = arg;
    if (mc_timer_init(&s->tick, mc_reactor_group_get(s->g, 0), on_tick, s) == MC_OK) {
        mc_timer_start(&s->tick, s->opts.tick_interval_us, 1);
        s->tick_armed = 1;
    }
}

static void disarm_tick(void *arg)
{
    master_srv_t *s = arg;
    mc_timer_fini(&s->tick);
}

mc_status_t mc_master_server_start(const mc_master_server_opts_t *o, mc_master_server_t **out)
{
    master_srv_t *s = MC_NEW(master_srv_t);
    if (s == NULL)
        return MC_ERR_NOMEM;
    s->opts = *o;
    if (o->auth_key != NULL) {
        s->key = *o->auth_key;
        s->has_key = 1;
    }
    s->opts.auth_key = s->has_key ? &s->key : NULL; /* the caller's copy is not ours to keep */
    s->bind_address = mc_strdup(o->bind_address ? o->bind_address : "0.0.0.0");
    s->fsdir = mc_strdup(o->fsdir ? o->fsdir : "");
    mc_status_t st = MC_ERR_NOMEM;
    if (s->bind_address == NULL || s->fsdir == NULL)
        goto err_free;
    s->opts.bind_address = s->bind_address;
    s->opts.fsdir = s->fsdir;
    /* A new view version on every start, so clients notice a restart and
     * re-mount and re-publish: wall-clock microseconds only grow. */
    s->view_version = o->view_version ? o->view_version : (int64_t)mc_wall_us();

    st = master_tier_create(s);
    if (st != MC_OK)
        goto err_free;
    st = mc_master_create(&s->opts.master, s->view_version, &s->m);
    if (st != MC_OK) {
        MC_ERROR(MASTER, "cannot create the master: %s", mc_status_str(st));
        goto err_free;
    }
    /* restores DISK replicas before anyone can ask; with HA the leader does,
     * when it takes over (master_ha.c), so that the journal has them */
    st = master_tier_start(s, o->ha.sync == MC_HA_SYNC_OFF);
    if (st != MC_OK)
        goto err_master;
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = o->reactors;
    go.name = "master";
    st = mc_reactor_group_create(&go, &s->g);
    if (st != MC_OK)
        goto err_master;
    unsigned n = mc_reactor_group_count(s->g);
    s->scratch = mc_calloc(n, sizeof(*s->scratch));
    mc_reactor_t **rs = mc_calloc(n, sizeof(*rs));
    s->nscratch = n;
    if (s->scratch == NULL || rs == NULL) {
        mc_free(rs);
        st = MC_ERR_NOMEM;
        goto err_group;
    }
    for (unsigned i = 0; i < n; i++) {
        rs[i] = mc_reactor_group_get(s->g, i);
        mc_list_init(&s->scratch[i].waiters);
        mc_list_init(&s->scratch[i].held);
    }
    mc_master_set_offload_notify(s->m, master_srv_offload_kick, s);
    mc_rpc_server_opts_t so;
    mc_rpc_server_opts_init(&so);
    so.bind_addr = s->bind_address;
    so.port = o->rpc_port;
    so.max_conns = o->max_clients;
    so.max_inbuf = o->max_client_input;
    so.max_inbuf_total = o->max_input_total;
    so.first_frame_timeout_us = o->first_frame_timeout_us;
    so.auth_key = o->auth_key;
    st = mc_rpc_server_create(rs, n, &so, &s->rpc);
    mc_free(rs);
    if (st != MC_OK)
        goto err_group;
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
        mc_rpc_server_register(s->rpc, handlers[i].method, handlers[i].fn, s);
    st = mc_rpc_server_start(s->rpc);
    if (st != MC_OK) {
        MC_ERROR(MASTER, "cannot listen for RPC on %s:%u", s->bind_address, o->rpc_port);
        goto err_rpc;
    }
    st = master_scan_start(s);
    if (st != MC_OK)
        goto err_rpc;
    if (o->ha.sync != MC_HA_SYNC_OFF) {
        st = master_ha_start(s);
        if (st != MC_OK)
            goto err_scan;
    }
    if (o->http_enabled) {
        st = master_http_start(s);
        if (st != MC_OK)
            goto err_ha;
    }
    mc_rpc_run_on(mc_reactor_group_get(s->g, 0), arm_tick, s);
    *out = (mc_master_server_t *)s;
    return MC_OK;

err_ha:
    master_ha_stop(s);
err_scan:
    master_scan_stop(s);
err_rpc:
    mc_rpc_server_destroy(s->rpc);
err_group:
    mc_reactor_group_destroy(s->g);
    master_ha_free(s);
    master_scan_free(s);
err_master:
    master_tier_stop(s);
    mc_master_destroy(s->m);
err_free:
    master_tier_stop(s);
    mc_free(s->scratch);
    mc_free(s->bind_address);
    mc_free(s->fsdir);
    mc_free(s);
    return st;
}

void mc_master_server_stop(mc_master_server_t *ms)
{
    master_srv_t *s = (master_srv_t *)ms;
    if (s == NULL)
        return;
    /* first: its answers go out on the reactors and the HTTP server */
    master_scan_stop(s);
    master_ha_stop(s);
    if (s->tick_armed)
        mc_rpc_run_on(mc_reactor_group_get(s->g, 0), disarm_tick, s);
    master_http_stop(s);
    mc_rpc_server_destroy(s->rpc);
    mc_reactor_group_destroy(s->g);
    master_ha_free(s);
    master_scan_free(s);
    for (unsigned i = 0; s->scratch != NULL && i < s->nscratch; i++)
        scratch_fini(&s->scratch[i]);
    master_tier_stop(s); /* drains pending deletions while the master still exists */
    mc_master_destroy(s->m);
    mc_free(s->scratch);
    mc_free(s->bind_address);
    mc_free(s->fsdir);
    mc_free(s);
}

uint16_t mc_master_server_rpc_port(const mc_master_server_t *ms)
{
    return mc_rpc_server_port(((const master_srv_t *)ms)->rpc);
}

uint16_t mc_master_server_http_port(const mc_master_server_t *ms)
{
    return ((const master_srv_t *)ms)->http_port;
}

uint16_t mc_master_server_http_metadata_port(const mc_master_server_t *ms)
{
    return ((const master_srv_t *)ms)->http_meta_port;
}

int64_t mc_master_server_view_version(const mc_master_server_t *ms)
{
    return ((const master_srv_t *)ms)->view_version;
}

unsigned mc_master_server_reactors(const mc_master_server_t *ms)
{
    return mc_reactor_group_count(((const master_srv_t *)ms)->g);
}
