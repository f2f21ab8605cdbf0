/*
 * master_offload.c - node-local offload in the master core: LOCAL_DISK
 * replicas and the requests that make them (master.h, "node-local
 * offload").
 *
 * A LOCAL_DISK replica is 14 bits of the object (obj_t.ldisk: its node's
 * segment slot + 1), beside two flags: PENDING (a PERSIST request is queued
 * or in flight: the object is neither evicted nor removed without force,
 * because its node reads its memory) and REFUSED (its node could not write
 * it: eviction drops it as without offload). No object grows for it.
 *
 * Requests: each offloading segment has a queue (struct offq): PERSIST
 * requests wait in `q` until its owner polls, then in `sent` (deadline
 * order) until the node answers or the deadline passes. DELETE requests of
 * removed objects wait in the master's `offdel` (a list per slot, a hash
 * by key: a poll or a take-back costs what it touches) (the code that
 * removes an object holds only its shard lock, and the segment table may
 * not be read without the segment lock); a poll hands them out; an unmount
 * parks those of its slot for its node's next segment (the node back:
 * its start report must not bring a removed key back), and a report of a
 * key whose DELETE waits is refused (the DELETE taken back). A standby's
 * replay queues them too (a new leader hands out those its old one's node
 * had not done; a replayed LDISK takes one back, as the PERSIST answered
 * did on the leader), and forgets old ones (master.h). Lock order: shard
 * lock, segment lock, offload_lock.
 */
#include <stdlib.h>
#include <string.h>

#include "store/master_int.h"
#include "util/hash.h"
#include "util/hmap.h"
#include "util/list.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

typedef struct offq_ent {
    char *key; /* NULL: answered (a hole in `sent`) */
    uint32_t key_len;
    uint8_t op; /* mc_master_offload_op_t: PERSIST or LOAD */
    uint8_t evict;
    uint32_t anode; /* LOAD: the allocation's handle node (offset: its offset) */
    uint64_t size, offset, deadline_us;
    uint64_t ready; /* LOAD: bytes from the start the node said are in (progress) */
    uint64_t id;    /* LOAD: its id (next_load_id) */
} offq_ent_t;

/* A FIFO of entries: [head, n) used. */
typedef struct fifo {
    offq_ent_t *v;
    uint32_t head, n, cap;
} fifo_t;

/* A LOAD answered MC_OK lately: the memory replica it made (its key's
 * hash, the allocation), so a reader that copied bytes of it early knows
 * the copy it is listed is that load's (mc_master_offload_loaded_by). */
typedef struct load_rec {
    uint64_t id, key_hash, offset;
    uint32_t anode;
} load_rec_t;

#define LOAD_RECS 16 /* per segment, the latest (a reader asks right after the answer) */

struct offq {
    fifo_t q;    /* PERSIST requests not yet polled */
    fifo_t sent; /* polled, unanswered; deadlines ascending */
    load_rec_t done[LOAD_RECS];
    uint32_t ndone; /* records written (the next goes to done[ndone % LOAD_RECS]) */
};

/* A LOAD's id: unique within the process, and unlike those of an earlier
 * run (they start at its first load's wall-clock time in µs, times 1024), so
 * a reader that holds an id from a master that restarted matches nothing. */
static uint64_t load_id_base;
static pthread_once_t load_id_once = PTHREAD_ONCE_INIT;

static void load_id_init(void)
{
    load_id_base = mc_wall_us() << 10;
}

static uint64_t next_load_id(void)
{
    static _Atomic uint64_t n;
    pthread_once(&load_id_once, load_id_init);
    return load_id_base + atomic_fetch_add(&n, 1) + 1;
}

/* Forget the load records of key (hash h): a new load of it. offload_lock held. */
static void load_recs_forget(struct offq *q, uint64_t h)
{
    for (unsigned i = 0; i < LOAD_RECS; i++)
        if (q->done[i].key_hash == h)
            q->done[i].id = 0;
}

typedef struct del_ent {
    mc_list_t all; /* struct offdel.all: queue order */
    mc_list_t at;  /* its slot's list (struct offdel.by_slot), or the parked one */
    mc_hnode_t hn; /* struct offdel.keys: by its key's hash */
    uint32_t slot; /* DEL_PARKED: its segment went; park_hash names its node */
    uint32_t key_len;
    /* DEL_PARKED: its node's offload directory's identity (by_disk: the
     * node told it, seg_t.disk_hash), else its segment's name, hashed */
    uint64_t park_hash;
    int by_disk;
    uint64_t seq; /* its number in queue order (mc_master_offload_deletion_mark) */
    /* the answer that handed it out (0: not handed out): kept until the
     * next poll of that slot (a node asks again only once it did the
     * answer's DELETEs), since a node killed meanwhile never did it (a held
     * poll is answered into a dead connection); done if that poll says this
     * answer's DELETEs are done (a node that says none: any poll), else
     * handed out again (the answer was lost with a broken connection) */
    uint64_t answer;
    char key[];
} del_ent_t;

/* A DELETE whose segment was unmounted (its node expired or left) before
 * it polled: kept for the next segment whose node has the same offload
 * directory (the node restarted, under any name; a node that did not say
 * its directory: the next segment of the same name), so its start report
 * does not bring the removed key back. */
#define DEL_PARKED UINT32_MAX

/* An expired request, collected by the tick. */
typedef struct exp_ent {
    uint32_t slot;
    offq_ent_t e; /* key owned */
} exp_ent_t;

/* Every operation costs what it touches: a poll its slot's DELETEs, a
 * take-back (a report, a PERSIST answered, a replayed LDISK) its key's. */
struct offdel {
    mc_list_t all;      /* queue order (seq) */
    mc_list_t parked;   /* DEL_PARKED ones, in the order they were parked */
    mc_list_t *by_slot; /* LDISK_SLOT_MAX + 1 lists: a mounted segment's */
    mc_hmap_t keys;
    size_t n, max; /* max: OFFDEL_MAX ($MC_MASTER_OFFDEL_MAX in tests) */
    uint64_t seq;  /* DELETEs queued so far */
    /* nodes that lost DELETEs (lost_mark): the next segment of each takes
     * its mark (lost_take), by directory or (a node that did not say its
     * directory) by name */
    struct lost_mark {
        uint64_t hash;
        int by_disk;
    } * lost;
    size_t nlost, lost_cap;
    uint8_t *lost_slot; /* LDISK_SLOT_MAX + 1: the mounted segment lost a DELETE */
};

/* DELETE requests kept at most (then parked ones give way; with none, a
 * new one is not kept). A node whose DELETE was not kept is marked: its
 * next segment's start report keeps only the files of objects the master
 * knows on it (the others are refused: the node deletes them), so a
 * removed object never comes back with it, at the cost of the files of
 * objects the master forgot (a restart after its segment expired). */
#define OFFDEL_MAX (1u << 20)
#define LOST_MARKS_MAX 4096 /* nodes marked at once (beyond: the oldest mark goes, logged) */

static mc_status_t fifo_push(fifo_t *f, const offq_ent_t *e)
{
    if (f->head > 0 && f->n == f->cap) {
        memmove(f->v, f->v + f->head, (f->n - f->head) * sizeof(*f->v));
        f->n -= f->head;
        f->head = 0;
    }
    if (f->n == f->cap) {
        uint32_t nc = f->cap ? f->cap * 2 : 64;
        offq_ent_t *nv = mc_realloc(f->v, nc * sizeof(*nv));
        if (nv == NULL)
            return MC_ERR_NOMEM;
        f->v = nv;
        f->cap = nc;
    }
    f->v[f->n++] = *e;
    return MC_OK;
}

static void fifo_trim(fifo_t *f)
{
    while (f->head < f->n && f->v[f->head].key == NULL)
        f->head++;
    if (f->head == f->n)
        f->head = f->n = 0;
}

static void fifo_free(fifo_t *f)
{
    for (uint32_t i = f->head; i < f->n; i++)
        mc_free(f->v[i].key);
    mc_free(f->v);
    memset(f, 0, sizeof(*f));
}

static uint32_t fifo_len(const fifo_t *f)
{
    return f->n - f->head;
}

static void notify(mc_master_t *m)
{
    if (m->off_notify != NULL)
        m->off_notify(m->off_notify_arg);
}

void mc_master_set_offload_notify(mc_master_t *m, void (*fn)(void *arg), void *arg)
{
    m->off_notify = fn;
    m->off_notify_arg = arg;
}

/* ---- queues ---- */

/* The node named by (by_disk, hash), its directory or its name, lost a
 * DELETE: marked for its next segment (lost_take). 1: a new mark.
 * offload_lock held. */
static int lost_mark(struct offdel *d, int by_disk, uint64_t hash)
{
    for (size_t i = 0; i < d->nlost; i++)
        if (d->lost[i].hash == hash && d->lost[i].by_disk == by_disk)
            return 0;
    if (d->nlost == d->lost_cap) {
        size_t nc = d->lost_cap != 0 ? d->lost_cap * 2 : 8;
        struct lost_mark *nv = nc <= LOST_MARKS_MAX ? mc_realloc(d->lost, nc * sizeof(*nv)) : NULL;
        if (nv == NULL) { /* the oldest mark goes */
            MC_WARN(MASTER,
                    "offload: %zu nodes lost deletions: the oldest one's mark goes; its next "
                    "report may bring back objects removed while it was away",
                    d->nlost);
            memmove(d->lost, d->lost + 1, (d->nlost - 1) * sizeof(*d->lost));
            d->nlost--;
        } else {
            d->lost = nv;
            d->lost_cap = nc;
        }
    }
    d->lost[d->nlost++] = (struct lost_mark){hash, by_disk};
    return 1;
}

/* s is the node of a mark (by_disk, hash): the mark is s's now, its report
 * refuses the files of keys the master does not know. offload_lock held. */
static void lost_take(struct offdel *d, seg_t *s, int by_disk, uint64_t hash)
{
    for (size_t i = 0; d != NULL && i < d->nlost; i++) {
        if (d->lost[i].hash != hash || d->lost[i].by_disk != by_disk)
            continue;
        d->lost[i] = d->lost[--d->nlost];
        s->del_lost = 1;
        MC_WARN(MASTER,
                "segment '%s': its node's offload directory missed deletions this master could "
                "not keep: its report's files of objects the master does not know are refused "
                "(deleted), so no removed object comes back",
                s->name);
        return;
    }
}

/* Who s's node is for a parked DELETE or a mark: its directory's identity
 * (*by_disk 1) when it said it, else its name's hash. */
static uint64_t seg_ident(const seg_t *s, int *by_disk)
{
    *by_disk = s->disk_hash != 0;
    return *by_disk ? s->disk_hash : s->name_hash;
}

/* s's node lost a DELETE, or took a mark and may not have reported yet:
 * marked for its next segment. offload_lock held. */
static int seg_lost(const struct offdel *d, const seg_t *s)
{
    return s->del_lost || (d != NULL && s->slot <= LDISK_SLOT_MAX && d->lost_slot[s->slot]);
}

void offload_seg_free(mc_master_t *m, seg_t *s)
{
    pthread_mutex_lock(&m->offload_lock);
    if (s->offq != NULL) {
        atomic_fetch_sub(&m->off_queued, fifo_len(&s->offq->q));
        uint64_t live = 0;
        for (uint32_t i = s->offq->sent.head; i < s->offq->sent.n; i++)
            live += s->offq->sent.v[i].key != NULL;
        atomic_fetch_sub(&m->off_in_flight, live);
        fifo_free(&s->offq->q);
        fifo_free(&s->offq->sent);
        mc_free(s->offq);
        s->offq = NULL;
    }
    s->offload = 0;
    pthread_mutex_unlock(&m->offload_lock);
}

/* x to slot (DEL_PARKED: the parked list), not handed out there yet, and
 * numbered as queued now (a standby forgets by that number: one moved to
 * a node must not be taken as long done). offload_lock held. */
static void del_move(struct offdel *d, del_ent_t *x, uint32_t slot)
{
    x->slot = slot;
    x->answer = 0;
    mc_list_del(&x->at);
    mc_list_push_tail(slot == DEL_PARKED ? &d->parked : &d->by_slot[slot], &x->at);
    mc_list_del(&x->all);
    mc_list_push_tail(&d->all, &x->all);
    x->seq = d->seq++;
}

/* 1 when x is s's node back: the same offload directory (s's node told
 * it), else the same name. offload_lock held. */
static int same_node(const seg_t *x, const seg_t *s)
{
    if (s->disk_hash != 0)
        return x->disk_hash == s->disk_hash;
    return x->name_hash == s->name_hash && strcmp(x->name, s->name) == 0;
}

void offload_seg_going(mc_master_t *m, seg_t *s)
{
    /* the node back already (a segment of its directory, or name, mounted
     * while this one drains) takes them at once; else they are parked */
    size_t n = 0;
    pthread_mutex_lock(&m->offload_lock);
    seg_t *heir = NULL;
    for (uint32_t i = 0; i < m->nslots && heir == NULL; i++) {
        seg_t *x = m->slots[i];
        if (x != NULL && x != s && x->state == SEG_MOUNTED && x->slot <= LDISK_SLOT_MAX &&
            same_node(x, s))
            heir = x;
    }
    struct offdel *d = m->offdel;
    mc_list_t *from = d != NULL && s->slot <= LDISK_SLOT_MAX ? &d->by_slot[s->slot] : NULL;
    for (mc_list_t *e; from != NULL && (e = mc_list_pop_head(from)) != NULL; n++) {
        del_ent_t *x = MC_CONTAINER_OF(e, del_ent_t, at);
        x->park_hash = seg_ident(s, &x->by_disk);
        /* (its node may not have done it) */
        del_move(d, x, heir != NULL ? heir->slot : DEL_PARKED);
    }
    if (d != NULL && seg_lost(d, s)) {
        /* for its node's next segment; and the heir's report (if it is
         * still to come) refuses too: the mark stays for the segment after
         * it, as the heir may have reported already */
        int by_disk;
        uint64_t h = seg_ident(s, &by_disk);
        (void)lost_mark(d, by_disk, h);
        if (s->slot <= LDISK_SLOT_MAX)
            d->lost_slot[s->slot] = 0;
        if (heir != NULL)
            heir->del_lost = 1;
    }
    pthread_mutex_unlock(&m->offload_lock);
    if (n > 0)
        MC_INFO(MASTER,
                "segment '%s' goes with %zu deletions of removed objects' files its node had "
                "not done: %s",
                s->name, n,
                heir != NULL        ? "handed to its node's new segment"
                : s->disk_hash != 0 ? "kept for the next segment of its node's offload directory"
                                    : "kept for the next segment of that name");
}

/* Parked DELETEs of s's node (by_disk: parked by its directory's identity
 * h, else by its name's) go to s. offload_lock held. How many. */
static size_t unpark(struct offdel *d, seg_t *s, int by_disk, uint64_t h)
{
    size_t n = 0;
    if (d == NULL || s->slot > LDISK_SLOT_MAX)
        return 0; /* holds no LOCAL_DISK replica: they stay parked */
    for (mc_list_t *e = d->parked.next, *next; e != &d->parked; e = next) {
        next = e->next;
        del_ent_t *x = MC_CONTAINER_OF(e, del_ent_t, at);
        if (x->by_disk != by_disk || x->park_hash != h)
            continue;
        del_move(d, x, s->slot); /* for the node's new incarnation */
        n++;
    }
    return n;
}

void offload_seg_mounted(mc_master_t *m, seg_t *s)
{
    /* those parked by name (a node that did not say its directory); those
     * parked by directory come when the new node says its own (its first
     * poll, before its report: mc_master_offload_disk) */
    pthread_mutex_lock(&m->offload_lock);
    size_t n = unpark(m->offdel, s, 0, s->name_hash);
    if (m->offdel != NULL && s->slot <= LDISK_SLOT_MAX)
        m->offdel->lost_slot[s->slot] = 0; /* (its last segment's went with it) */
    lost_take(m->offdel, s, 0, s->name_hash);
    pthread_mutex_unlock(&m->offload_lock);
    if (n > 0)
        MC_INFO(MASTER,
                "segment '%s': %zu deletions of removed objects' files from its name's last "
                "segment are its node's now",
                s->name, n);
}

static void offdel_free(struct offdel *d, del_ent_t *x)
{
    mc_list_del(&x->all);
    mc_list_del(&x->at);
    mc_hmap_remove(&d->keys, &x->hn);
    d->n--;
    mc_free(x);
}

/* Take back the DELETE of key queued for slot, or (disk_hash != 0) for a
 * segment of that offload directory, if there is one: 1 (its node is told
 * instead that its file of key is to go). offload_lock held, and with
 * disk_hash the segment lock. */
static int offdel_take_in(mc_master_t *m, uint32_t slot, uint64_t disk_hash, const char *key,
                          size_t key_len)
{
    struct offdel *d = m->offdel;
    if (d == NULL)
        return 0;
    uint64_t h = mc_hash64(key, key_len);
    mc_hnode_t *hn;
    MC_HMAP_FOREACH_HASH(&d->keys, hn, h)
    {
        del_ent_t *x = MC_CONTAINER_OF(hn, del_ent_t, hn);
        if (x->key_len != key_len || memcmp(x->key, key, key_len) != 0)
            continue;
        const seg_t *of = disk_hash != 0 && x->slot < m->nslots ? m->slots[x->slot] : NULL;
        if (x->slot == slot || (of != NULL && of->disk_hash == disk_hash)) {
            offdel_free(d, x);
            return 1;
        }
    }
    return 0;
}

static int offdel_take(mc_master_t *m, uint32_t slot, const char *key, size_t key_len)
{
    return offdel_take_in(m, slot, 0, key, key_len);
}

/* The same for s's node: a DELETE of key queued for s, or for another
 * segment of its offload directory (its node's last incarnation, not
 * expired yet: its DELETEs come to s when it goes). Segment lock and
 * offload_lock held. */
static int offdel_take_node(mc_master_t *m, const seg_t *s, const char *key, size_t key_len)
{
    return offdel_take_in(m, s->slot, s->disk_hash, key, key_len);
}

/* Room for one more DELETE in a full list: the oldest parked one goes
 * (its node never came back, or under another name), its node marked. 1:
 * made. offload_lock held. */
static int offdel_unpark_one(mc_master_t *m, struct offdel *d)
{
    if (mc_list_empty(&d->parked))
        return 0;
    del_ent_t *x = MC_CONTAINER_OF(d->parked.next, del_ent_t, at);
    if (lost_mark(d, x->by_disk, x->park_hash))
        MC_WARN(MASTER,
                "offload: %zu deletions of removed objects' files wait (the limit): the "
                "oldest, '%.*s', kept for a node away, goes; that node's next report keeps "
                "only the files of objects this master knows",
                d->n, (int)x->key_len, x->key);
    atomic_fetch_add(&m->off_del_lost, 1);
    offdel_free(d, x);
    return 1;
}

/* The list, made on the first DELETE (NULL: out of memory). offload_lock
 * held. */
static struct offdel *offdel_get(mc_master_t *m)
{
    if (m->offdel != NULL)
        return m->offdel;
    struct offdel *d = mc_calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    d->by_slot = mc_malloc((LDISK_SLOT_MAX + 1) * sizeof(*d->by_slot));
    d->lost_slot = mc_calloc(LDISK_SLOT_MAX + 1, 1);
    if (d->by_slot == NULL || d->lost_slot == NULL || mc_hmap_init(&d->keys, 64) != MC_OK) {
        mc_free(d->lost_slot);
        mc_free(d->by_slot);
        mc_free(d);
        return NULL;
    }
    const char *mx = getenv("MC_MASTER_OFFDEL_MAX"); /* tests: a small limit */
    d->max = mx != NULL ? strtoull(mx, NULL, 10) : 0;
    d->max = d->max != 0 && d->max < OFFDEL_MAX ? d->max : OFFDEL_MAX;
    mc_list_init(&d->all);
    mc_list_init(&d->parked);
    for (uint32_t i = 0; i <= LDISK_SLOT_MAX; i++)
        mc_list_init(&d->by_slot[i]);
    m->offdel = d;
    return d;
}

void offload_fini(mc_master_t *m)
{
    for (uint32_t i = 0; i < m->nslots; i++)
        if (m->slots[i] != NULL)
            offload_seg_free(m, m->slots[i]);
    struct offdel *d = m->offdel;
    if (d != NULL) {
        for (mc_list_t *e; (e = mc_list_pop_head(&d->all)) != NULL;)
            mc_free(MC_CONTAINER_OF(e, del_ent_t, all));
        mc_hmap_fini(&d->keys);
        mc_free(d->by_slot);
        mc_free(d->lost);
        mc_free(d->lost_slot);
        mc_free(d);
        m->offdel = NULL;
    }
}

void offload_cycle_start(mc_master_t *m)
{
    double c = m->o.offload_cap_ratio * (double)m->o.offloading_queue_limit;
    m->offload_cycle_left = c <= 0.0 ? 0 : c < 1.0 ? 1 : (uint64_t)c;
}

/* Queue a PERSIST request for o's replica on an offloading segment.
 * Shard lock held; takes the segment lock and offload_lock. MC_OK (queued,
 * o is PENDING), MC_ERR_UNABLE_TO_OFFLOAD-like codes: MC_ERR_SEGMENT_NOT_FOUND
 * (no replica on an offloading segment), MC_ERR_LIMIT (queue full),
 * MC_ERR_NOMEM. */
static mc_status_t queue_persist(mc_master_t *m, obj_t *o, int evict)
{
    mc_status_t st = MC_ERR_SEGMENT_NOT_FOUND;
    pthread_rwlock_rdlock(&m->seg_lock);
    pthread_mutex_lock(&m->offload_lock);
    for (uint32_t r = 0; r < o->nrep; r++) {
        seg_t *s = m->slots[o->rep[r].slot];
        if (s == NULL || !s->offload || s->state != SEG_MOUNTED || s->slot > LDISK_SLOT_MAX)
            continue;
        if (s->offq == NULL && (s->offq = mc_calloc(1, sizeof(*s->offq))) == NULL) {
            st = MC_ERR_NOMEM;
            break;
        }
        if (fifo_len(&s->offq->q) + fifo_len(&s->offq->sent) >= m->o.offloading_queue_limit) {
            st = MC_ERR_LIMIT;
            continue; /* another replica's node may have room */
        }
        offq_ent_t e = {.key = mc_malloc(o->key_len),
                        .key_len = o->key_len,
                        .evict = (uint8_t)evict,
                        .size = o->size,
                        .offset = o->rep[r].offset};
        if (e.key == NULL) {
            st = MC_ERR_NOMEM;
            break;
        }
        memcpy(e.key, obj_key(o), o->key_len);
        if (fifo_push(&s->offq->q, &e) != MC_OK) {
            mc_free(e.key);
            st = MC_ERR_NOMEM;
            break;
        }
        o->ldisk |= LDISK_PENDING;
        atomic_fetch_add(&m->off_queued, 1);
        atomic_fetch_add(&m->off_requested, 1);
        st = MC_OK;
        break;
    }
    pthread_mutex_unlock(&m->offload_lock);
    pthread_rwlock_unlock(&m->seg_lock);
    if (st == MC_OK)
        notify(m);
    return st;
}

int offload_instead_of_evict(mc_master_t *m, obj_t *o, uint64_t now_us)
{
    (void)now_us;
    if (!m->o.enable_offload || !m->o.offload_on_evict || (o->ldisk & LDISK_REFUSED))
        return 0;
    if (o->ldisk & LDISK_PENDING)
        return 1;
    mc_status_t st = MC_ERR_LIMIT;
    if (m->offload_cycle_left > 0) {
        st = queue_persist(m, o, 1);
        if (st == MC_OK) {
            m->offload_cycle_left--;
            return 1;
        }
    }
    if (st == MC_ERR_SEGMENT_NOT_FOUND)
        return 0; /* no offloading node has it: evicted as before */
    atomic_fetch_add(&m->off_refused, 1);
    return !m->o.offload_force_evict;
}

void offload_after_put(mc_master_t *m, obj_t *o)
{
    if (o->ldisk & (LDISK_PENDING | LDISK_SLOT_MASK))
        return;
    mc_status_t st = queue_persist(m, o, 0);
    if (st == MC_ERR_LIMIT || st == MC_ERR_NOMEM)
        atomic_fetch_add(&m->off_refused, 1);
}

/* ---- LOCAL_DISK replicas ---- */

static void ldisk_lose(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h);

static void ldisk_journal_set(mc_master_t *m, obj_t *o, mc_uuid_t seg_id)
{
    if (m->jfn != NULL) {
        mc_master_jrec_t r = {.type = MC_JREC_LDISK,
                              .key = obj_key(o),
                              .key_len = o->key_len,
                              .size = o->size,
                              .segment_id = seg_id};
        journal(m, &r);
    }
}

static void ldisk_set(mc_master_t *m, obj_t *o, uint32_t slot)
{
    if (!obj_ldisk(o)) {
        atomic_fetch_add(&m->ldisk_objects, 1);
        atomic_fetch_add(&m->ldisk_bytes, o->size);
    }
    o->ldisk = (uint16_t)((o->ldisk & ~LDISK_SLOT_MASK) | (slot + 1));
}

/* Clear o's LOCAL_DISK replica (not the flags). */
static void ldisk_clear(mc_master_t *m, obj_t *o)
{
    if (!obj_ldisk(o))
        return;
    atomic_fetch_sub(&m->ldisk_objects, 1);
    atomic_fetch_sub(&m->ldisk_bytes, o->size);
    o->ldisk &= (uint16_t)~LDISK_SLOT_MASK;
}

/* Queue the DELETE of key's file for slot (DEL_PARKED: parked by
 * park_hash, by_disk). 0, or why not: "queue full", "out of memory".
 * offload_lock held. */
static const char *offdel_push(mc_master_t *m, const char *key, size_t key_len, uint32_t slot,
                               uint64_t park_hash, int by_disk)
{
    struct offdel *d = offdel_get(m);
    if (d == NULL)
        return "out of memory"; /* (no list: no mark either) */
    if (d->n >= d->max)
        offdel_unpark_one(m, d);
    del_ent_t *x = d->n < d->max ? mc_malloc(sizeof(*x) + key_len) : NULL;
    if (x == NULL) { /* not kept: its node is marked */
        if (slot <= LDISK_SLOT_MAX)
            d->lost_slot[slot] = 1; /* (its segment: marked by who it is when it goes) */
        else if (park_hash != 0)
            (void)lost_mark(d, by_disk, park_hash);
        atomic_fetch_add(&m->off_del_lost, 1);
        return d->n >= d->max ? "queue full" : "out of memory";
    }
    memset(x, 0, sizeof(*x));
    x->slot = slot;
    x->key_len = (uint32_t)key_len;
    x->park_hash = park_hash;
    x->by_disk = by_disk;
    x->seq = d->seq++;
    memcpy(x->key, key, key_len);
    mc_list_push_tail(&d->all, &x->all);
    mc_list_push_tail(slot == DEL_PARKED ? &d->parked : &d->by_slot[slot], &x->at);
    mc_hmap_insert(&d->keys, &x->hn, mc_hash64(x->key, x->key_len));
    d->n++;
    return NULL;
}

void ldisk_dropped(mc_master_t *m, obj_t *o)
{
    if (!obj_ldisk(o))
        return;
    uint32_t slot = (o->ldisk & LDISK_SLOT_MASK) - 1u;
    ldisk_clear(m, o);
    pthread_mutex_lock(&m->offload_lock);
    const char *why = offdel_push(m, obj_key(o), o->key_len, slot, 0, 0);
    pthread_mutex_unlock(&m->offload_lock);
    if (why == NULL)
        notify(m);
    else
        MC_WARN(MASTER,
                "offload: cannot queue the deletion of '%.*s' for its node (%s); its file "
                "stays until the node's next start, whose report will not bring it back",
                (int)o->key_len, obj_key(o), why);
}

void ldisk_drop_slots(mc_master_t *m, obj_t *o, const uint32_t *slots, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (obj_ldisk(o) && (o->ldisk & LDISK_SLOT_MASK) - 1u == slots[i]) {
            ldisk_clear(m, o);                    /* the node is going: nothing to ask it */
            o->ldisk &= (uint16_t)~LDISK_PENDING; /* nor a load to wait for */
        }
        for (uint32_t r = 0; r < o->nrep && (o->ldisk & LDISK_PENDING); r++)
            if (o->rep[r].slot == slots[i])
                o->ldisk &= (uint16_t)~LDISK_PENDING; /* its request goes with it */
    }
}

int ldisk_describe(const mc_master_t *m, const obj_t *o, mc_master_replica_desc_t *d)
{
    const seg_t *s = m->slots[(o->ldisk & LDISK_SLOT_MASK) - 1u];
    if (s == NULL || s->state != SEG_MOUNTED)
        return 0;
    memset(d, 0, offsetof(mc_master_replica_desc_t, segment_name));
    d->size = o->size;
    d->segment_id = s->id;
    d->status = MC_MASTER_REPLICA_COMPLETE;
    d->kind = MC_MASTER_REPLICA_LOCAL_DISK;
    memcpy(d->segment_name, s->name, strlen(s->name) + 1);
    memcpy(d->te_endpoint, s->endpoint, strlen(s->endpoint) + 1);
    return 1;
}

/* The caller's mounted segment: slot, or an error. Segment lock held. */
static mc_status_t own_segment(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id, seg_t **out)
{
    seg_t *s = seg_find(m, segment_id);
    if (s == NULL || s->state != SEG_MOUNTED)
        return MC_ERR_SEGMENT_NOT_FOUND;
    if (!mc_uuid_eq(s->owner, client))
        return MC_ERR_ILLEGAL_CLIENT;
    *out = s;
    return MC_OK;
}

/* s's node offloads (a poll, a report, a replayed LDISK say so): evictions
 * queue PERSIST for its objects from now on, loads are queued for it.
 * offload_lock held. */
static void seg_mark_offloading(seg_t *s)
{
    if (!s->offload)
        MC_INFO(MASTER, "segment '%s' offloads to its node's disk", s->name);
    s->offload = 1;
}

mc_status_t mc_master_offload_poll(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                   uint64_t now_us, uint32_t max, mc_master_offload_cb_t cb,
                                   void *arg)
{
    return mc_master_offload_poll_ack(m, client, segment_id, now_us, max, 0, 0, NULL, cb, arg);
}

mc_status_t mc_master_offload_poll_ack(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                       uint64_t now_us, uint32_t max, int says_done,
                                       uint64_t done_answer, uint64_t *answer,
                                       mc_master_offload_cb_t cb, void *arg)
{
    if (answer != NULL)
        *answer = 0;
    if (cb == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (!m->o.enable_offload)
        return MC_ERR_UNAVAILABLE_IN_CURRENT_MODE;
    seg_t *s = NULL;
    pthread_rwlock_rdlock(&m->seg_lock);
    mc_status_t st = own_segment(m, client, segment_id, &s);
    if (st != MC_OK)
        goto out;
    pthread_mutex_lock(&m->offload_lock);
    seg_mark_offloading(s);
    if (max > 0)
        s->del_lost = 0; /* a poll for work: its node's report is done (a mark it took, used) */
    uint32_t given = 0;
    int stop = 0;
    /* deletions first: they free the node's disk (those the last poll
     * handed out are done: the node polls again once it did them; one
     * whose answer it says it did not get is handed out again) */
    struct offdel *d = m->offdel;
    mc_list_t *mine = d != NULL && s->slot <= LDISK_SLOT_MAX ? &d->by_slot[s->slot] : NULL;
    uint64_t ans = 0;
    for (mc_list_t *e = mine != NULL ? mine->next : NULL, *next; e != NULL && e != mine; e = next) {
        next = e->next;
        del_ent_t *x = MC_CONTAINER_OF(e, del_ent_t, at);
        if (x->answer != 0) {
            if (!says_done || x->answer == done_answer) {
                offdel_free(d, x);
                continue;
            }
            x->answer = 0; /* lost on its way (a broken connection): again */
            atomic_fetch_add(&m->off_del_again, 1);
        }
        if (stop || given >= max)
            break; /* (those handed out are first: handed out in order) */
        mc_master_offload_req_t rq = {
            .op = MC_MASTER_OFFLOAD_DELETE, .key = x->key, .key_len = x->key_len};
        stop = cb(arg, &rq);
        given++;
        if (ans == 0)
            ans = next_load_id(); /* unique, and unlike an earlier run's */
        x->answer = ans;
    }
    if (answer != NULL)
        *answer = ans;
    struct offq *q = s->offq;
    while (q != NULL && !stop && given < max && fifo_len(&q->q) > 0) {
        offq_ent_t e = q->q.v[q->q.head];
        mc_master_offload_req_t rq = {.op = (mc_master_offload_op_t)e.op,
                                      .evict = e.evict,
                                      .key = e.key,
                                      .key_len = e.key_len,
                                      .size = e.size,
                                      .offset = e.offset,
                                      .load_id = e.op == MC_MASTER_OFFLOAD_LOAD ? e.id : 0};
        e.deadline_us = now_us + m->o.offload_timeout_us;
        if (fifo_push(&q->sent, &e) != MC_OK)
            break; /* stays queued */
        q->q.head++;
        fifo_trim(&q->q);
        atomic_fetch_sub(&m->off_queued, 1);
        atomic_fetch_add(&m->off_in_flight, 1);
        stop = cb(arg, &rq);
        given++;
    }
    pthread_mutex_unlock(&m->offload_lock);
out:
    pthread_rwlock_unlock(&m->seg_lock);
    return st;
}

/* s's node offloads to the directory whose identity hashes to h (not 0):
 * its DELETEs parked by that directory, and those queued for its node's
 * last segments not expired yet, are s's now. Journaled (SEG_DISK) on a
 * leader; replayed on a standby. seg_lock held. */
static void seg_disk_set(mc_master_t *m, seg_t *s, uint64_t h)
{
    const seg_t *twin = NULL;
    size_t n = 0;
    pthread_mutex_lock(&m->offload_lock);
    struct offdel *d = m->offdel;
    if (s->disk_hash == h) {
        pthread_mutex_unlock(&m->offload_lock);
        return;
    }
    if (d != NULL && s->slot <= LDISK_SLOT_MAX && d->lost_slot[s->slot]) {
        /* it lost a DELETE before it said its directory (so before its
         * report): that report refuses, and the mark goes on with it */
        d->lost_slot[s->slot] = 0;
        s->del_lost = 1;
    }
    s->disk_hash = h;
    mc_master_jrec_t r = {.type = MC_JREC_SEG_DISK, .segment_id = s->id, .disk_hash = h};
    journal(m, &r);
    n = unpark(d, s, 1, h);
    lost_take(d, s, 1, h);
    /* its node's last incarnations, not expired yet (mounted or draining):
     * their DELETEs are this node's now, before its report (which they
     * refuse) */
    for (uint32_t i = 0; i < m->nslots; i++) {
        seg_t *x = m->slots[i];
        if (x == NULL || x == s || x->disk_hash != h)
            continue;
        twin = x;
        mc_list_t *from = d != NULL && x->slot <= LDISK_SLOT_MAX && s->slot <= LDISK_SLOT_MAX
                              ? &d->by_slot[x->slot]
                              : NULL;
        for (mc_list_t *e; from != NULL && (e = mc_list_pop_head(from)) != NULL; n++)
            del_move(d, MC_CONTAINER_OF(e, del_ent_t, at), s->slot);
        if (seg_lost(d, x)) { /* and so is a mark: this report is the one to refuse */
            s->del_lost = 1;
            x->del_lost = 0;
            if (d != NULL && x->slot <= LDISK_SLOT_MAX)
                d->lost_slot[x->slot] = 0;
        }
    }
    pthread_mutex_unlock(&m->offload_lock);
    if (twin != NULL) /* (a directory's lock keeps two live nodes off one directory) */
        MC_INFO(MASTER,
                "segment '%s' offloads to the directory of segment '%s' (not expired yet): "
                "its node is back (or the directory was copied: each node's directory "
                "needs an identity of its own, remove the copy's .disk_id)",
                s->name, twin->name);
    if (n > 0)
        MC_INFO(MASTER,
                "segment '%s': %zu deletions of removed objects' files kept for its node's "
                "offload directory are its node's now",
                s->name, n);
}

mc_status_t mc_master_offload_disk(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                   const void *disk_id, size_t len)
{
    if (disk_id == NULL || len == 0 || len > MC_MASTER_DISK_ID_MAX)
        return MC_ERR_INVALID_PARAMS;
    if (!m->o.enable_offload)
        return MC_ERR_UNAVAILABLE_IN_CURRENT_MODE;
    uint64_t h = mc_hash64(disk_id, len);
    h = h != 0 ? h : 1; /* 0: not told */
    seg_t *s = NULL;
    pthread_rwlock_rdlock(&m->seg_lock);
    mc_status_t st = own_segment(m, client, segment_id, &s);
    if (st == MC_OK)
        seg_disk_set(m, s, h);
    pthread_rwlock_unlock(&m->seg_lock);
    return st;
}

/* Take key's sent request off s's queue into *out (its key freed): 1, or 0
 * when there is none. load_id != 0: only that LOAD. offload_lock held. */
static int sent_take(mc_master_t *m, seg_t *s, const char *key, size_t len, uint64_t size,
                     uint64_t load_id, offq_ent_t *out)
{
    struct offq *q = s->offq;
    if (q == NULL)
        return 0;
    for (uint32_t i = q->sent.head; i < q->sent.n; i++) {
        offq_ent_t *e = &q->sent.v[i];
        if (e->key != NULL && e->key_len == len && e->size == size &&
            (load_id == 0 || (e->op == MC_MASTER_OFFLOAD_LOAD && e->id == load_id)) &&
            memcmp(e->key, key, len) == 0) {
            *out = *e;
            mc_free(e->key);
            out->key = NULL;
            e->key = NULL;
            fifo_trim(&q->sent);
            atomic_fetch_sub(&m->off_in_flight, 1);
            return 1;
        }
    }
    return 0;
}

/* Free a LOAD's allocation on slot. Shard lock held, segment lock not. */
static void load_free(mc_master_t *m, uint32_t slot, const offq_ent_t *e)
{
    replica_t r = {.slot = slot, .node = e->anode, .offset = e->offset};
    pthread_rwlock_rdlock(&m->seg_lock);
    if (m->slots[slot] != NULL)
        replica_free(m, &r, e->size);
    pthread_rwlock_unlock(&m->seg_lock);
}

/* Attach a loaded replica r to o (growing o when it has no room: the
 * table's slot is updated). Returns the object (moved or not), NULL when
 * out of memory (r untouched). Shard lock held. */
static obj_t *attach_replica(shard_t *sh, obj_t *o, uint64_t h, const replica_t *r)
{
    if (o->nrep < o->rep_cap) {
        o->rep[o->nrep++] = *r;
        return o;
    }
    size_t body = sizeof(*o) + o->rep_cap * sizeof(replica_t);
    obj_t *n = mc_malloc(sizeof(*o) + (o->rep_cap + 1u) * sizeof(replica_t) + o->key_len);
    if (n == NULL)
        return NULL;
    memcpy(n, o, body);
    n->rep_cap = (uint8_t)(o->rep_cap + 1u);
    memcpy(obj_key(n), obj_key(o), o->key_len);
    n->rep[n->nrep++] = *r;
    otab_remove(&sh->tab, h, o);
    otab_insert(&sh->tab, h, n); /* same count: no growth needed */
    mc_free(o);
    return n;
}

/* The object loaded from its node's disk gets its memory replica. */
static void load_journal(mc_master_t *m, obj_t *o, mc_uuid_t sid, uint64_t offset)
{
    if (m->jfn != NULL) {
        mc_master_jrec_t r = {
            .type = MC_JREC_LOAD, .key = obj_key(o), .key_len = o->key_len, .nrep = 1};
        r.rep[0].segment_id = sid;
        r.rep[0].offset = offset;
        journal(m, &r);
    }
}

/* How much older than its load a staging copy (a load not promoted) looks
 * to eviction. */
#define OFFLOAD_STAGE_AGE_US (3600ull * 1000000ull)
/* A loaded copy is spared by eviction this long (at most lease_ttl) after
 * its load, for its reader's answer to come (READERS_LOADED). */
#define OFFLOAD_LOADED_GRACE_US 1000000ull

/* ---- promotion on hit: count-min sketch ---- */

#define CMS_AGE 65536u

/* Count one load of key; returns its estimated count. offload_lock held. */
static unsigned cms_hit(mc_master_t *m, uint64_t h)
{
    if (++m->cms_hits >= CMS_AGE) {
        for (unsigned r = 0; r < 4; r++)
            for (unsigned i = 0; i < 1024; i++)
                m->cms[r][i] >>= 1;
        m->cms_hits = 0;
    }
    unsigned est = 255;
    for (unsigned r = 0; r < 4; r++) {
        uint8_t *c = &m->cms[r][(h >> (r * 16)) & 1023u];
        if (*c < 255)
            (*c)++;
        if (*c < est)
            est = *c;
    }
    return est;
}

static mc_status_t load_try(mc_master_t *m, const char *key, size_t key_len, uint64_t *size);

mc_status_t mc_master_offload_load(mc_master_t *m, const char *key, size_t key_len, uint64_t now_us)
{
    uint64_t size = 0;
    mc_status_t st = load_try(m, key, key_len, &size);
    if (st == MC_ERR_NO_AVAILABLE_HANDLE) {
        /* no room on the node's segment: evict as a put would, then once more */
        char seg[MC_MASTER_NAME_MAX];
        if (evict_for(m, size, now_us, seg))
            st = load_try(m, key, key_len, &size);
    }
    return st;
}

static mc_status_t load_try(mc_master_t *m, const char *key, size_t key_len, uint64_t *size)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    uint64_t h;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, key, key_len, &sh, &h);
    mc_status_t st = MC_OK;
    if (o == NULL || (!obj_ldisk(o) && o->nrep == 0))
        st = MC_ERR_OBJECT_NOT_FOUND;
    else if (o->state != OBJ_COMPLETE)
        st = MC_ERR_REPLICA_IS_NOT_READY;
    if (st != MC_OK || o->nrep > 0 || (o->ldisk & LDISK_PENDING))
        goto out; /* in memory again, or a load in flight: list again */
    uint32_t slot = (o->ldisk & LDISK_SLOT_MASK) - 1u;
    *size = o->size;
    pthread_rwlock_rdlock(&m->seg_lock);
    pthread_mutex_lock(&m->offload_lock);
    seg_t *s = m->slots[slot];
    replica_t r;
    if (s == NULL || s->state != SEG_MOUNTED || !s->offload)
        st = MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
    else if (s->offq == NULL && (s->offq = mc_calloc(1, sizeof(*s->offq))) == NULL)
        st = MC_ERR_NOMEM;
    else if (fifo_len(&s->offq->q) + fifo_len(&s->offq->sent) >= m->o.offloading_queue_limit)
        st = MC_ERR_LIMIT;
    else if (!try_alloc(m, s, o->size, &r))
        st = MC_ERR_NO_AVAILABLE_HANDLE;
    if (st == MC_OK) {
        offq_ent_t e = {.key = mc_malloc(o->key_len),
                        .key_len = o->key_len,
                        .op = MC_MASTER_OFFLOAD_LOAD,
                        .anode = r.node,
                        .size = o->size,
                        .offset = r.offset,
                        .id = next_load_id()};
        load_recs_forget(s->offq, h); /* a copy of an older load is not this one's */
        if (e.key != NULL)
            memcpy(e.key, obj_key(o), o->key_len);
        if (e.key == NULL || fifo_push(&s->offq->q, &e) != MC_OK) {
            mc_free(e.key);
            replica_free(m, &r, o->size);
            st = MC_ERR_NOMEM;
        } else {
            o->ldisk |= LDISK_PENDING;
            atomic_fetch_add(&m->off_queued, 1);
        }
    }
    pthread_mutex_unlock(&m->offload_lock);
    pthread_rwlock_unlock(&m->seg_lock);
    if (st == MC_OK)
        notify(m);
out:
    shard_unlock(sh);
    return st;
}

int mc_master_offload_disk_only(mc_master_t *m, const char *key, size_t key_len)
{
    if (!key_valid(m, key, key_len))
        return 0;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, key, key_len, &sh, NULL);
    int only = o != NULL && o->state == OBJ_COMPLETE && o->nrep == 0 && !o->disk && obj_ldisk(o);
    shard_unlock(sh);
    return only;
}

int mc_master_offload_own_disk(mc_master_t *m, const char *key, size_t key_len, mc_uuid_t seg_id,
                               mc_master_replica_desc_t *d)
{
    if (!key_valid(m, key, key_len))
        return 0;
    uint64_t h;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, key, key_len, &sh, &h);
    int own = o != NULL && o->state == OBJ_COMPLETE && o->nrep == 0 && !o->disk && obj_ldisk(o) &&
              !(o->ldisk & LDISK_PENDING);
    if (own) {
        uint32_t slot = (o->ldisk & LDISK_SLOT_MASK) - 1u;
        pthread_rwlock_rdlock(&m->seg_lock);
        pthread_mutex_lock(&m->offload_lock);
        const seg_t *s = m->slots[slot];
        own = s != NULL && s->state == SEG_MOUNTED && mc_uuid_eq(s->id, seg_id) &&
              ldisk_describe(m, o, d);
        if (own && m->o.promotion_on_hit)
            own = cms_hit(m, h) < m->o.promotion_admission_threshold; /* else: load, promoted */
        pthread_mutex_unlock(&m->offload_lock);
        pthread_rwlock_unlock(&m->seg_lock);
    }
    shard_unlock(sh);
    if (own)
        atomic_fetch_add(&m->off_own_reads, 1);
    return own;
}

/* o (may be NULL) is complete, on its node's disk only, and a LOAD of it is in
 * flight. Shard lock held. */
static int obj_loading(const obj_t *o)
{
    return o != NULL && o->state == OBJ_COMPLETE && o->nrep == 0 && obj_ldisk(o) &&
           (o->ldisk & LDISK_PENDING);
}

int mc_master_offload_loading(mc_master_t *m, const char *key, size_t key_len)
{
    if (!key_valid(m, key, key_len))
        return 0;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, key, key_len, &sh, NULL);
    int loading = obj_loading(o);
    shard_unlock(sh);
    return loading;
}

/* key's LOAD in flight on s (sent, unanswered; load_id != 0: only that one),
 * or NULL. offload_lock held. */
static offq_ent_t *sent_load(seg_t *s, const char *key, size_t len, uint64_t load_id)
{
    struct offq *q = s->offq;
    if (q == NULL)
        return NULL;
    for (uint32_t i = q->sent.head; i < q->sent.n; i++) {
        offq_ent_t *e = &q->sent.v[i];
        if (e->key != NULL && e->op == MC_MASTER_OFFLOAD_LOAD && e->key_len == len &&
            (load_id == 0 || e->id == load_id) && memcmp(e->key, key, len) == 0)
            return e;
    }
    return NULL;
}

mc_status_t mc_master_offload_progress(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                       const char *key, size_t key_len, uint64_t size,
                                       uint64_t ready, uint64_t load_id)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    if (ready > size)
        return MC_ERR_INVALID_PARAMS;
    pthread_rwlock_rdlock(&m->seg_lock);
    seg_t *s = NULL;
    mc_status_t st = own_segment(m, client, segment_id, &s);
    int more = 0;
    if (st == MC_OK) {
        pthread_mutex_lock(&m->offload_lock);
        offq_ent_t *e = sent_load(s, key, key_len, load_id);
        if (e == NULL || e->size != size) {
            st = MC_ERR_OBJECT_NOT_FOUND;
        } else if (ready > e->ready) {
            e->ready = ready;
            more = 1;
        }
        pthread_mutex_unlock(&m->offload_lock);
    }
    pthread_rwlock_unlock(&m->seg_lock);
    if (more)
        notify(m); /* a reader may copy them */
    return st;
}

int mc_master_offload_partial(mc_master_t *m, const char *key, size_t key_len, uint64_t have,
                              uint64_t have_id, mc_master_replica_desc_t *d, uint64_t *ready,
                              uint64_t *load_id)
{
    if (!key_valid(m, key, key_len))
        return 0;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, key, key_len, &sh, NULL);
    int got = 0;
    if (obj_loading(o)) {
        uint32_t slot = (o->ldisk & LDISK_SLOT_MASK) - 1u;
        pthread_rwlock_rdlock(&m->seg_lock);
        pthread_mutex_lock(&m->offload_lock);
        seg_t *s = m->slots[slot];
        offq_ent_t *e = s != NULL && s->state == SEG_MOUNTED ? sent_load(s, key, key_len, 0) : NULL;
        if (e != NULL && have_id != 0 && have_id != e->id)
            have = 0; /* the reader's bytes are of another load: this one from its start */
        if (e != NULL && e->size == o->size && e->ready > have) {
            replica_t r = {.slot = slot, .node = e->anode, .offset = e->offset};
            replica_describe(m, &r, o->size, MC_MASTER_REPLICA_PROCESSING, d);
            *ready = e->ready;
            *load_id = e->id;
            got = 1;
        }
        pthread_mutex_unlock(&m->offload_lock);
        pthread_rwlock_unlock(&m->seg_lock);
    }
    shard_unlock(sh);
    return got;
}

/* The answer to a LOAD (shard lock held; e taken off the queue). */
static mc_status_t load_done(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h, uint32_t slot,
                             mc_uuid_t sid, const offq_ent_t *e, mc_status_t result,
                             uint64_t now_us)
{
    int match = o != NULL && (o->ldisk & LDISK_PENDING) && o->state == OBJ_COMPLETE &&
                o->nrep == 0 && (o->ldisk & LDISK_SLOT_MASK) == slot + 1u && o->size == e->size;
    if (o != NULL && match)
        o->ldisk &= (uint16_t)~LDISK_PENDING;
    if (!match || result != MC_OK) {
        load_free(m, slot, e);
        if (match) {
            atomic_fetch_add(&m->off_load_failed, 1);
            MC_WARN(MASTER,
                    "load of '%.*s' from its node's disk failed: %s; its disk copy is dropped",
                    (int)o->key_len, obj_key(o), mc_status_str(result));
            ldisk_lose(m, sh, o, h); /* corrupt or gone: never served */
        }
        return match ? MC_OK : MC_ERR_OBJECT_NOT_FOUND;
    }
    replica_t r = {.slot = slot, .node = e->anode, .offset = e->offset};
    obj_t *n = attach_replica(sh, o, h, &r);
    if (n == NULL) {
        load_free(m, slot, e);
        return MC_ERR_NOMEM;
    }
    if (mc_uuid_is_zero(n->owner))
        n->owner = (mc_uuid_t){1, 1}; /* restored from a disk: the journal needs an owner */
    load_journal(m, n, sid, e->offset);
    atomic_fetch_add(&m->off_loads, 1);
    pthread_rwlock_rdlock(&m->seg_lock);
    pthread_mutex_lock(&m->offload_lock);
    unsigned hits = cms_hit(m, h);
    seg_t *s = m->slots[slot];
    if (s != NULL && s->offq != NULL && e->id != 0) /* a reader that copied it early keeps it */
        s->offq->done[s->offq->ndone++ % LOAD_RECS] =
            (load_rec_t){.id = e->id, .key_hash = h, .offset = e->offset, .anode = e->anode};
    pthread_mutex_unlock(&m->offload_lock);
    pthread_rwlock_unlock(&m->seg_lock);
    if (m->o.promotion_on_hit && hits >= m->o.promotion_admission_threshold) {
        n->access_us = now_us; /* promoted: stays by LRU like any object */
        atomic_fetch_add(&m->off_promoted, 1);
    } else {
        /* a staging copy: older than anything read in the last hour (the
         * first to go), and among staging copies the oldest load first */
        n->access_us = now_us > OFFLOAD_STAGE_AGE_US ? now_us - OFFLOAD_STAGE_AGE_US : 0;
    }
    if (n->pin_ttl_ms == 0 && !obj_held(n, now_us)) {
        /* until its reader's answer grants the lease it releases once it
         * copied it (the listing granted none), no eviction takes the copy
         * (READERS_LOADED: the tick's, a put's, another load's making room)
         * for a moment, else the reader would have to load it again */
        uint64_t grace = m->o.lease_ttl_us < OFFLOAD_LOADED_GRACE_US ? m->o.lease_ttl_us
                                                                     : OFFLOAD_LOADED_GRACE_US;
        n->readers = READERS_LOADED;
        n->period_us = now_us;
        n->lease_us = now_us + grace;
    }
    return MC_OK;
}

mc_status_t mc_master_offload_done(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                   const char *key, size_t key_len, uint64_t size,
                                   mc_status_t result, uint64_t now_us)
{
    return mc_master_offload_done_id(m, client, segment_id, key, key_len, size, result, now_us, 0);
}

int mc_master_offload_loaded_by(mc_master_t *m, const char *key, size_t key_len, uint64_t load_id)
{
    if (load_id == 0 || !key_valid(m, key, key_len))
        return 0;
    shard_t *sh;
    uint64_t h;
    obj_t *o = obj_lock_find(m, key, key_len, &sh, &h);
    int by = 0;
    if (o != NULL && o->state == OBJ_COMPLETE && obj_ldisk(o)) {
        uint32_t slot = (o->ldisk & LDISK_SLOT_MASK) - 1u;
        load_rec_t rec = {0};
        pthread_rwlock_rdlock(&m->seg_lock);
        pthread_mutex_lock(&m->offload_lock);
        const seg_t *s = m->slots[slot];
        for (unsigned i = 0; s != NULL && s->offq != NULL && i < LOAD_RECS; i++)
            if (s->offq->done[i].id == load_id && s->offq->done[i].key_hash == h)
                rec = s->offq->done[i];
        pthread_mutex_unlock(&m->offload_lock);
        pthread_rwlock_unlock(&m->seg_lock);
        /* and the replica it made is still the object's */
        for (uint32_t i = 0; rec.id != 0 && i < o->nrep && !by; i++)
            by = o->rep[i].slot == slot && o->rep[i].node == rec.anode &&
                 o->rep[i].offset == rec.offset;
    }
    shard_unlock(sh);
    return by;
}

mc_status_t mc_master_offload_done_id(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                      const char *key, size_t key_len, uint64_t size,
                                      mc_status_t result, uint64_t now_us, uint64_t load_id)
{
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    uint64_t h;
    shard_t *sh = shard_lock_key(m, key, key_len, &h);
    pthread_rwlock_rdlock(&m->seg_lock);
    seg_t *s = NULL;
    mc_status_t st = own_segment(m, client, segment_id, &s);
    int had = 0;
    offq_ent_t e = {0};
    if (st == MC_OK) {
        pthread_mutex_lock(&m->offload_lock);
        had = sent_take(m, s, key, key_len, size, load_id, &e);
        pthread_mutex_unlock(&m->offload_lock);
    }
    obj_t *o = st == MC_OK ? otab_find(&sh->tab, h, key, key_len) : NULL;
    uint32_t slot = s != NULL ? s->slot : 0;
    mc_uuid_t sid = s != NULL ? s->id : (mc_uuid_t){0, 0};
    if (st != MC_OK || (had && e.op == MC_MASTER_OFFLOAD_LOAD)) {
        pthread_rwlock_unlock(&m->seg_lock);
        if (st == MC_OK)
            st = load_done(m, sh, o, h, slot, sid, &e, result, now_us);
        goto out;
    }
    /* (the segment lock is held until the DELETE's take-back below) */
    /* only the answer to a request of this node about this very object:
     * pending, complete, the size asked, a memory replica on the node */
    int match = o != NULL && had && (o->ldisk & LDISK_PENDING) && o->state == OBJ_COMPLETE &&
                o->size == size;
    int on_node = 0;
    for (uint32_t r = 0; match && r < o->nrep; r++)
        on_node |= o->rep[r].slot == slot;
    if (!match || !on_node || (obj_ldisk(o) && (o->ldisk & LDISK_SLOT_MASK) != slot + 1u)) {
        pthread_rwlock_unlock(&m->seg_lock);
        if (o != NULL && had)
            o->ldisk &= (uint16_t)~LDISK_PENDING;
        st = MC_ERR_OBJECT_NOT_FOUND;
        goto out;
    }
    o->ldisk &= (uint16_t)~LDISK_PENDING;
    if (result != MC_OK) {
        pthread_rwlock_unlock(&m->seg_lock);
        o->ldisk |= LDISK_REFUSED;
        atomic_fetch_add(&m->off_failed, 1);
        MC_WARN(MASTER, "offload of '%.*s' failed on its node: %s; evicted as without offload",
                (int)key_len, key, mc_status_str(result));
        goto out;
    }
    ldisk_set(m, o, slot);
    ldisk_journal_set(m, o, sid);
    /* a DELETE of an older file of key, handed out with this PERSIST, is
     * done: a node killed before its next poll must not have it again (nor
     * one queued for its last incarnation, which comes to it later) */
    pthread_mutex_lock(&m->offload_lock);
    offdel_take_node(m, s, key, key_len);
    pthread_mutex_unlock(&m->offload_lock);
    pthread_rwlock_unlock(&m->seg_lock);
    atomic_fetch_add(&m->off_persisted, 1);
    if (e.evict && !obj_leased(o, now_us)) {
        obj_spill(m, o); /* what eviction asked for: memory goes, the disk copy stays */
        atomic_fetch_add(&m->off_spilled, 1);
        atomic_fetch_add(&m->evicted_keys, 1);
    }
out:
    shard_unlock(sh);
    if (had && e.op == MC_MASTER_OFFLOAD_PERSIST)
        evict_backoff_end(m, now_us); /* not pending any more, its memory maybe gone */
    if (had)
        notify(m); /* a reader may wait for this load; room may be free now */
    return st;
}

/* Give key a LOCAL_DISK replica on slot (sid): set on an existing object
 * when mode allows, or a disk-only object made. absent_only: a node's scan
 * (refuse existing objects); else a replay. Shard lock held. */
static mc_status_t ldisk_restore(mc_master_t *m, shard_t *sh, uint64_t h, const char *key,
                                 size_t key_len, uint64_t size, uint32_t slot, mc_uuid_t sid,
                                 uint64_t now_us, int absent_only)
{
    if (size == 0 || size > m->o.max_object_size)
        return MC_ERR_INVALID_PARAMS;
    if (slot > LDISK_SLOT_MAX)
        return MC_ERR_NO_AVAILABLE_HANDLE;
    obj_t *o = otab_find(&sh->tab, h, key, key_len);
    if (o != NULL) {
        if (absent_only)
            return (o->ldisk & LDISK_SLOT_MASK) == slot + 1u ? MC_OK : MC_ERR_OBJECT_ALREADY_EXISTS;
        if (o->size != size)
            return MC_ERR_EXISTS;
        o->ldisk &= (uint16_t)~LDISK_PENDING;
        ldisk_set(m, o, slot);
        return MC_OK;
    }
    if (otab_reserve(&sh->tab) != MC_OK || (o = mc_malloc(sizeof(*o) + key_len)) == NULL)
        return MC_ERR_NOMEM;
    memset(o, 0, sizeof(*o));
    o->size = size;
    o->access_us = now_us;
    o->key_len = (uint16_t)key_len;
    o->state = OBJ_COMPLETE;
    memcpy(obj_key(o), key, key_len);
    otab_insert(&sh->tab, h, o);
    ldisk_set(m, o, slot);
    ldisk_journal_set(m, o, sid);
    return MC_OK;
}

mc_status_t mc_master_ldisk_report(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                   const char *key, size_t key_len, uint64_t size, uint64_t now_us)
{
    if (!m->o.enable_offload)
        return MC_ERR_UNAVAILABLE_IN_CURRENT_MODE;
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    uint64_t h;
    shard_t *sh = shard_lock_key(m, key, key_len, &h);
    pthread_rwlock_rdlock(&m->seg_lock);
    seg_t *s = NULL;
    mc_status_t st = own_segment(m, client, segment_id, &s);
    if (st == MC_OK) {
        /* its node offloads (a leader that took over after its announce
         * poll learns it here, before its first poll) */
        pthread_mutex_lock(&m->offload_lock);
        seg_mark_offloading(s);
        /* removed since this node last reported (a round that failed
         * partway, retried; or its last segment went before the node did
         * the DELETE): no later PERSIST of key is known done on the node
         * (a poll hands out DELETEs first, and a PERSIST answered takes
         * its key's DELETE back), so the file is the removed object's: it
         * goes, and the key does not come back. (The shard lock keeps a
         * DELETE from being queued meanwhile.) */
        int removed = offdel_take_node(m, s, key, key_len);
        /* the node back before its last segment expired (a new name: its
         * port is any free one) reports a file that segment's LOCAL_DISK
         * replica still names: the same directory, so the same file; the
         * replica is this segment's now (refused, the node deleted the
         * file, and the object went when the old segment expired) */
        obj_t *o = removed ? NULL : otab_find(&sh->tab, h, key, key_len);
        int takeover = 0;
        if (o != NULL && obj_ldisk(o) && s->disk_hash != 0 && o->size == size &&
            s->slot <= LDISK_SLOT_MAX) {
            uint32_t old = (o->ldisk & LDISK_SLOT_MASK) - 1u;
            seg_t *os = old < m->nslots ? m->slots[old] : NULL;
            takeover = os != NULL && os != s && os->disk_hash == s->disk_hash;
        }
        /* its directory missed DELETEs the master could not keep: a file
         * of a key it does not know may be a removed object's, and goes
         * (one of a key it knows is as below: its own replica, or
         * refused) */
        int lost = !removed && o == NULL && seg_lost(m->offdel, s);
        pthread_mutex_unlock(&m->offload_lock);
        if (lost)
            atomic_fetch_add(&m->off_lost_refused, 1);
        if (takeover) {
            /* a LOAD asked of the old segment's node (gone) is asked of
             * this one next (the old one's queue goes with it) */
            o->ldisk &= (uint16_t)~LDISK_PENDING;
            ldisk_set(m, o, s->slot);
            notify(m);
            ldisk_journal_set(m, o, s->id);
            atomic_fetch_add(&m->off_taken_over, 1);
            st = MC_OK;
        } else {
            st = removed || lost
                     ? MC_ERR_OBJECT_NOT_FOUND
                     : ldisk_restore(m, sh, h, key, key_len, size, s->slot, s->id, now_us, 1);
        }
    }
    pthread_rwlock_unlock(&m->seg_lock);
    shard_unlock(sh);
    return st;
}

/* o loses its LOCAL_DISK replica; it goes when nothing else holds it.
 * Shard lock held, segment lock not. */
static void ldisk_lose(mc_master_t *m, shard_t *sh, obj_t *o, uint64_t h)
{
    ldisk_clear(m, o);
    if (o->state == OBJ_COMPLETE && o->nrep == 0 && !o->disk) {
        obj_unlink(m, sh, o, h); /* journals DROP */
        obj_destroy(m, o);
        return;
    }
    if (m->jfn != NULL) {
        mc_master_jrec_t r = {.type = MC_JREC_LDISK_DROP, .key = obj_key(o), .key_len = o->key_len};
        journal(m, &r);
    }
}

mc_status_t mc_master_ldisk_drop(mc_master_t *m, mc_uuid_t client, mc_uuid_t segment_id,
                                 const char *key, size_t key_len, uint64_t now_us)
{
    (void)now_us;
    if (!key_valid(m, key, key_len))
        return MC_ERR_INVALID_KEY;
    uint64_t h;
    shard_t *sh = shard_lock_key(m, key, key_len, &h);
    pthread_rwlock_rdlock(&m->seg_lock);
    seg_t *s = NULL;
    mc_status_t st = own_segment(m, client, segment_id, &s);
    uint32_t slot = s != NULL ? s->slot : 0;
    pthread_rwlock_unlock(&m->seg_lock);
    if (st == MC_OK) {
        obj_t *o = otab_find(&sh->tab, h, key, key_len);
        if (o != NULL && (o->ldisk & LDISK_SLOT_MASK) == slot + 1u)
            ldisk_lose(m, sh, o, h);
    }
    shard_unlock(sh);
    return st;
}

void offload_tick(mc_master_t *m, uint64_t now_us)
{
    if (atomic_load(&m->off_in_flight) == 0)
        return;
    /* expired requests, collected under the locks, acted on after */
    exp_ent_t *ex = NULL;
    size_t n = 0, cap = 0;
    pthread_rwlock_rdlock(&m->seg_lock);
    pthread_mutex_lock(&m->offload_lock);
    for (uint32_t i = 0; i < m->nslots; i++) {
        seg_t *s = m->slots[i];
        if (s == NULL || s->offq == NULL)
            continue;
        fifo_t *f = &s->offq->sent;
        while (f->head < f->n &&
               (f->v[f->head].key == NULL || f->v[f->head].deadline_us <= now_us)) {
            offq_ent_t *e = &f->v[f->head];
            if (e->key != NULL) {
                if (n == cap) {
                    size_t nc = cap ? cap * 2 : 64;
                    exp_ent_t *nv = mc_realloc(ex, nc * sizeof(*nv));
                    if (nv == NULL)
                        break; /* the rest at the next tick */
                    ex = nv;
                    cap = nc;
                }
                ex[n++] = (exp_ent_t){s->slot, *e};
                atomic_fetch_sub(&m->off_in_flight, 1);
            }
            f->head++;
        }
        fifo_trim(f);
    }
    pthread_mutex_unlock(&m->offload_lock);
    pthread_rwlock_unlock(&m->seg_lock);
    for (size_t i = 0; i < n; i++) {
        offq_ent_t *e = &ex[i].e;
        shard_t *sh;
        obj_t *o = obj_lock_find(m, e->key, e->key_len, &sh, NULL);
        if (e->op == MC_MASTER_OFFLOAD_LOAD) {
            /* the node may still write there if it is only slow: a risk
             * taken after offload_timeout_us (logged) */
            load_free(m, ex[i].slot, e);
            if (o != NULL)
                o->ldisk &= (uint16_t)~LDISK_PENDING;
        } else if (o != NULL && (o->ldisk & LDISK_PENDING)) {
            /* not asked again: evicted as without offload */
            o->ldisk = (uint16_t)((o->ldisk & ~LDISK_PENDING) | LDISK_REFUSED);
        }
        shard_unlock(sh);
        MC_WARN(MASTER, "offload %s of '%.*s' got no answer from its node in %llu ms",
                e->op == MC_MASTER_OFFLOAD_LOAD ? "load" : "write", (int)e->key_len, e->key,
                (unsigned long long)(m->o.offload_timeout_us / 1000));
        mc_free(e->key);
        atomic_fetch_add(&m->off_timeouts, 1);
    }
    mc_free(ex);
    if (n > 0) {
        evict_backoff_end(m, now_us); /* no longer pending: evictable again */
        notify(m);
    }
}

/* ---- journal replay (standby) ---- */

mc_status_t apply_ldisk(mc_master_t *m, const mc_master_jrec_t *r, uint64_t now_us)
{
    if (!key_valid(m, r->key, r->key_len) || mc_uuid_is_zero(r->segment_id))
        return MC_ERR_INVALID_PARAMS;
    uint64_t h;
    shard_t *sh = shard_lock_key(m, r->key, r->key_len, &h);
    pthread_rwlock_rdlock(&m->seg_lock);
    seg_t *s = seg_find(m, r->segment_id);
    uint32_t slot = s != NULL && s->state == SEG_MOUNTED ? s->slot : UINT32_MAX;
    if (slot != UINT32_MAX) {
        /* its node offloads: as a leader, loads are queued for it at once
         * (it polls the new leader soon) instead of refused until then */
        pthread_mutex_lock(&m->offload_lock);
        seg_mark_offloading(s);
        pthread_mutex_unlock(&m->offload_lock);
    }
    pthread_rwlock_unlock(&m->seg_lock);
    mc_status_t st = slot == UINT32_MAX ? MC_ERR_SEGMENT_NOT_FOUND
                                        : ldisk_restore(m, sh, h, r->key, r->key_len, r->size, slot,
                                                        r->segment_id, now_us, 0);
    if (st == MC_OK) {
        /* the node wrote key's file again (a PERSIST answered, or its
         * report taken): the leader took back the DELETE of its older file
         * (offdel_take), and so does this standby, which would hand it out
         * as the new leader and have the new file deleted */
        pthread_mutex_lock(&m->offload_lock);
        offdel_take(m, slot, r->key, r->key_len);
        pthread_mutex_unlock(&m->offload_lock);
    }
    shard_unlock(sh);
    return st;
}

mc_status_t apply_seg_disk(mc_master_t *m, const mc_master_jrec_t *r)
{
    if (r->disk_hash == 0)
        return MC_ERR_INVALID_PARAMS;
    pthread_rwlock_rdlock(&m->seg_lock);
    seg_t *s = seg_find(m, r->segment_id);
    if (s != NULL)
        seg_disk_set(m, s, r->disk_hash);
    pthread_rwlock_unlock(&m->seg_lock);
    return s != NULL ? MC_OK : MC_ERR_SEGMENT_NOT_FOUND;
}

mc_status_t apply_offdel(mc_master_t *m, const mc_master_jrec_t *r)
{
    if (!key_valid(m, r->key, r->key_len))
        return MC_ERR_INVALID_PARAMS;
    pthread_rwlock_rdlock(&m->seg_lock);
    uint32_t slot = DEL_PARKED; /* its segment went: parked as the record says */
    seg_t *s = mc_uuid_is_zero(r->segment_id) ? NULL : seg_find(m, r->segment_id);
    if (s != NULL && s->state == SEG_MOUNTED && s->slot <= LDISK_SLOT_MAX)
        slot = s->slot;
    pthread_mutex_lock(&m->offload_lock);
    const char *why = offdel_push(m, r->key, r->key_len, slot, r->disk_hash, r->park != 0);
    pthread_mutex_unlock(&m->offload_lock);
    pthread_rwlock_unlock(&m->seg_lock);
    if (why != NULL)
        MC_WARN(MASTER, "offload: cannot keep the deletion of '%.*s' for its node (%s)",
                (int)r->key_len, r->key, why);
    return why == NULL ? MC_OK : MC_ERR_NOMEM;
}

void offload_snapshot(mc_master_t *m, mc_master_journal_fn_t fn, void *arg)
{
    pthread_rwlock_rdlock(&m->seg_lock);
    pthread_mutex_lock(&m->offload_lock);
    struct offdel *d = m->offdel;
    for (mc_list_t *e = d != NULL ? d->all.next : NULL; e != NULL && e != &d->all; e = e->next) {
        const del_ent_t *x = MC_CONTAINER_OF(e, del_ent_t, all);
        mc_master_jrec_t r = {.type = MC_JREC_OFFDEL,
                              .key = x->key,
                              .key_len = x->key_len,
                              .disk_hash = x->park_hash,
                              .park = x->by_disk};
        const seg_t *s = x->slot != DEL_PARKED && x->slot < m->nslots ? m->slots[x->slot] : NULL;
        if (s != NULL) {
            /* parked as offload_seg_going would, should its segment be gone */
            r.segment_id = s->id;
            r.disk_hash = seg_ident(s, &r.park);
        }
        fn(arg, &r);
    }
    /* nodes marked, and mounted segments that took a mark (their node's
     * next incarnation is marked too: a standby cannot tell) */
    for (size_t i = 0; d != NULL && i < d->nlost; i++) {
        mc_master_jrec_t r = {
            .type = MC_JREC_OFFLOST, .disk_hash = d->lost[i].hash, .park = d->lost[i].by_disk};
        fn(arg, &r);
    }
    for (uint32_t i = 0; i < m->nslots; i++) {
        const seg_t *s = m->slots[i];
        if (s == NULL || !seg_lost(d, s))
            continue;
        mc_master_jrec_t r = {.type = MC_JREC_OFFLOST};
        r.disk_hash = seg_ident(s, &r.park);
        fn(arg, &r);
    }
    pthread_mutex_unlock(&m->offload_lock);
    pthread_rwlock_unlock(&m->seg_lock);
}

mc_status_t apply_offlost(mc_master_t *m, const mc_master_jrec_t *r)
{
    if (r->disk_hash == 0)
        return MC_ERR_INVALID_PARAMS;
    pthread_rwlock_rdlock(&m->seg_lock);
    pthread_mutex_lock(&m->offload_lock);
    struct offdel *d = offdel_get(m);
    if (d != NULL)
        (void)lost_mark(d, r->park != 0, r->disk_hash);
    for (uint32_t i = 0; d != NULL && i < m->nslots; i++) {
        seg_t *x = m->slots[i]; /* mounted now: its report too (a snapshot's own mark) */
        if (x != NULL && (r->park ? x->disk_hash == r->disk_hash : x->name_hash == r->disk_hash))
            x->del_lost = 1;
    }
    pthread_mutex_unlock(&m->offload_lock);
    pthread_rwlock_unlock(&m->seg_lock);
    return d != NULL ? MC_OK : MC_ERR_NOMEM;
}

uint64_t mc_master_offload_deletion_mark(mc_master_t *m)
{
    pthread_mutex_lock(&m->offload_lock);
    uint64_t seq = m->offdel != NULL ? m->offdel->seq : 0;
    pthread_mutex_unlock(&m->offload_lock);
    return seq;
}

size_t mc_master_offload_forget_deletions(mc_master_t *m, uint64_t mark)
{
    size_t gone = 0;
    pthread_mutex_lock(&m->offload_lock);
    struct offdel *d = m->offdel;
    /* each slot's list is in queue order (queued and moved at its tail):
     * its head up to mark, and never the parked ones */
    for (uint32_t i = 0; d != NULL && i <= LDISK_SLOT_MAX; i++) {
        for (mc_list_t *e; (e = d->by_slot[i].next) != &d->by_slot[i];) {
            del_ent_t *x = MC_CONTAINER_OF(e, del_ent_t, at);
            if (x->seq >= mark)
                break;
            offdel_free(d, x);
            gone++;
        }
    }
    pthread_mutex_unlock(&m->offload_lock);
    return gone;
}

mc_status_t apply_ldisk_drop(mc_master_t *m, const mc_master_jrec_t *r)
{
    if (!key_valid(m, r->key, r->key_len))
        return MC_ERR_INVALID_PARAMS;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, r->key, r->key_len, &sh, NULL);
    if (o != NULL)
        ldisk_clear(m, o);
    shard_unlock(sh);
    return MC_OK;
}

mc_status_t apply_load(mc_master_t *m, const mc_master_jrec_t *r)
{
    if (!key_valid(m, r->key, r->key_len))
        return MC_ERR_INVALID_PARAMS;
    uint64_t h;
    shard_t *sh;
    obj_t *o = obj_lock_find(m, r->key, r->key_len, &sh, &h);
    mc_status_t st = MC_OK;
    replica_t rep;
    if (o == NULL || o->state != OBJ_COMPLETE || o->nrep > 0 || !obj_ldisk(o)) {
        st = MC_ERR_EXISTS; /* the leader loads only disk-only objects */
        goto out;
    }
    pthread_rwlock_rdlock(&m->seg_lock);
    st = replica_reserve(m, r->rep[0].segment_id, r->rep[0].offset, o->size, &rep);
    pthread_rwlock_unlock(&m->seg_lock);
    if (st != MC_OK)
        goto out;
    obj_t *n = attach_replica(sh, o, h, &rep);
    if (n == NULL) {
        pthread_rwlock_rdlock(&m->seg_lock);
        replica_free(m, &rep, o->size);
        pthread_rwlock_unlock(&m->seg_lock);
        st = MC_ERR_NOMEM;
        goto out;
    }
    if (mc_uuid_is_zero(n->owner))
        n->owner = (mc_uuid_t){1, 1};
out:
    shard_unlock(sh);
    return st;
}

void mc_master_offload_stats(mc_master_t *m, mc_master_offload_stats_t *out)
{
    out->ldisk_objects = atomic_load(&m->ldisk_objects);
    out->ldisk_bytes = atomic_load(&m->ldisk_bytes);
    out->queued = atomic_load(&m->off_queued);
    out->in_flight = atomic_load(&m->off_in_flight);
    out->requested_total = atomic_load(&m->off_requested);
    out->persisted_total = atomic_load(&m->off_persisted);
    out->failed_total = atomic_load(&m->off_failed);
    out->timeouts_total = atomic_load(&m->off_timeouts);
    out->refused_total = atomic_load(&m->off_refused);
    out->spilled_total = atomic_load(&m->off_spilled);
    out->loads_total = atomic_load(&m->off_loads);
    out->load_failed_total = atomic_load(&m->off_load_failed);
    out->promoted_total = atomic_load(&m->off_promoted);
    out->own_reads_total = atomic_load(&m->off_own_reads);
    out->taken_over_total = atomic_load(&m->off_taken_over);
    out->deletions_again_total = atomic_load(&m->off_del_again);
    out->deletions_lost_total = atomic_load(&m->off_del_lost);
    out->lost_refused_total = atomic_load(&m->off_lost_refused);
    pthread_mutex_lock(&m->offload_lock);
    out->deletions = m->offdel != NULL ? m->offdel->n : 0;
    pthread_mutex_unlock(&m->offload_lock);
}
