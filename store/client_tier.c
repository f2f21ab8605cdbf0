/*
 * client_tier.c - the store client's side of the persistent tier
 * (store/tier.h): its settings, learned from the master, and the worker
 * threads that do the file I/O, so that no reactor ever waits for a disk.
 *
 * Settings. GetFsdir answers the tier directory (root_fs_dir/cluster_id)
 * and the persistence mode; the client's own `persist` option overrides the
 * mode (a reader-only process may set off; a test or a careful writer
 * eager). They are asked for once at open (a short wait) and, if the master
 * could not answer then, by a worker every second until it does; until
 * then the client persists nothing and reads no files.
 *
 * Jobs, served FIFO by TIER_THREADS threads (reads go to the front: a get
 * is waiting for them, async writes are not):
 *  - read (gets): mc_tier_read into the caller's buffer, which the get
 *    borrows until its callback; the get continues on r0 (store_op_post).
 *  - write with an operation (eager puts, and async puts whose queue was
 *    full): the caller's parts, borrowed until the put's callback; write the
 *    file, then TIER_ADD from this thread (a sync master call: not a
 *    reactor); the put continues on r0. A failed TIER_ADD deletes the file
 *    (the put fails, the file must not come back as an object at restart):
 *    the master does when it answered (it checks the key is still absent),
 *    this thread when it did not.
 *  - async write: a copy of the value, owned by the job; the put has
 *    already returned. Queued copies are bounded by tier_queue_bytes: a put
 *    that would exceed it waits for its own write instead (it degrades to
 *    eager after its PutEnd), so memory stays bounded and nothing is
 *    silently skipped. A failed TIER_ADD keeps the file: the put was
 *    acknowledged, and a restarted master will find it.
 * Close drains the queue (async writes included, while the master
 * connection is still up) for at most TIER_DRAIN_MS, then drops what is
 * left (logged) and joins the threads.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rpc/methods.h"
#include "store/client_int.h"
#include "store/master_client.h"
#include "store/tier.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define TIER_THREADS 2
#define TIER_DRAIN_MS 10000
#define TIER_FETCH_RETRY_US 1000000
#define TIER_OPEN_FETCH_US 1000000

typedef enum { JOB_READ, JOB_WRITE } job_kind_t;

typedef struct tier_job {
    struct tier_job *next;
    job_kind_t kind;
    store_op_t *op; /* NULL: async write */
    char *key;      /* owned */
    size_t klen;
    uint64_t khash;    /* mc_hash64 of the key */
    struct iovec *iov; /* owned array; the bytes: the caller's, or copy */
    size_t iovcnt;
    uint64_t len;
    uint8_t *copy; /* async: owned copy of the value */
    void *buf;     /* read: destination, room bytes */
    uint64_t room, expect;
    uint64_t *got;
} tier_job_t;

struct store_tier {
    mc_store_t *s;
    pthread_t th[TIER_THREADS];
    int nth;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tier_job_t *head, **tail; /* mu */
    int stop;                 /* mu: no new jobs; threads exit when the queue is empty */
    int drop;                 /* mu: drain deadline passed: drop async writes */
    int fetching;             /* mu: a worker is asking the master for the settings */
    uint64_t queued_bytes;    /* mu: async copies queued */
    uint64_t queue_max;
    /* mu: key hashes of the writes running (wbusy[i] set): a write of a
     * key waits for the one running, so the files of successive puts of a
     * key (say an async put, a remove and a new put) are renamed in the
     * order they were queued and the last put's file is the one left */
    int wbusy[TIER_THREADS];
    uint64_t whash[TIER_THREADS];
    int override;      /* -1 = the master's mode, else MC_MASTER_PERSIST_* */
    _Atomic int known; /* settings received (dir and mode valid) */
    int mode;          /* written before known is set */
    char dir[4096];
    _Atomic uint64_t written, write_failed, read_ok, read_failed, degraded;
};

/* ------------------------------------------------------------- settings */

static mc_status_t fetch(store_tier_t *t, uint64_t timeout_us)
{
    mc_store_t *s = t->s;
    if (atomic_load(&s->closing))
        return MC_ERR_CANCELED;
    mc_buf_t resp = MC_BUF_INIT;
    mc_status_t st = mc_rpc_call_sync(s->mcli, MC_RPC_GET_FSDIR, NULL, 0, timeout_us, &resp);
    if (st != MC_OK) {
        mc_buf_fini(&resp);
        return st;
    }
    const void *p = NULL;
    size_t n = 0;
    int64_t mode = 0;
    st = mc_mcli_dec_bytes(mc_buf_head(&resp), mc_buf_used(&resp), MC_F_TEXT, &p, &n);
    if (st == MC_OK && n >= sizeof(t->dir))
        st = MC_ERR_PROTOCOL;
    if (st == MC_OK && n > 0 && memchr(p, '\0', n) != NULL)
        st = MC_ERR_PROTOCOL;
    if (st == MC_OK) {
        memcpy(t->dir, p, n);
        t->dir[n] = '\0';
        /* an older master sends no mode: async, upstream's behaviour */
        if (mc_mcli_dec_int(mc_buf_head(&resp), mc_buf_used(&resp), MC_F_PERSIST, &mode) != MC_OK)
            mode = MC_MASTER_PERSIST_ASYNC;
        if (mode < MC_MASTER_PERSIST_OFF || mode > MC_MASTER_PERSIST_EAGER)
            mode = MC_MASTER_PERSIST_ASYNC;
        if (t->override >= 0)
            mode = t->override;
        t->mode = n == 0 ? MC_MASTER_PERSIST_OFF : (int)mode;
        atomic_store_explicit(&t->known, 1, memory_order_release);
        if (n > 0)
            MC_INFO(TIER, "tier directory '%s', persist %s", t->dir,
                    t->mode == MC_MASTER_PERSIST_EAGER   ? "eager"
                    : t->mode == MC_MASTER_PERSIST_ASYNC ? "async"
                                                         : "off");
    } else {
        MC_ERROR(TIER, "malformed GetFsdir answer from the master");
    }
    mc_buf_fini(&resp);
    return st;
}

int store_tier_mode(const mc_store_t *s)
{
    const store_tier_t *t = s->tier;
    if (t == NULL || !atomic_load_explicit(&t->known, memory_order_acquire))
        return MC_MASTER_PERSIST_OFF;
    return t->mode;
}

int store_tier_on(const mc_store_t *s)
{
    const store_tier_t *t = s->tier;
    return t != NULL && atomic_load_explicit(&t->known, memory_order_acquire) && t->dir[0] != '\0';
}

/* ------------------------------------------------------------- jobs */

static void job_free(tier_job_t *j)
{
    mc_free(j->key);
    mc_free(j->iov);
    mc_free(j->copy);
    mc_free(j);
}

static mc_status_t tier_add(store_tier_t *t, const tier_job_t *j)
{
    mc_store_t *s = t->s;
    mc_buf_t body = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mp_write_map(&w, 3);
    mc_mp_write_uint(&w, MC_F_CLIENT_ID);
    mc_proto_write_uuid(&w, s->client_id);
    mc_mp_write_uint(&w, MC_F_KEY);
    mc_mp_write_bin(&w, j->key, (uint32_t)j->klen);
    mc_mp_write_uint(&w, MC_F_SIZE);
    mc_mp_write_uint(&w, j->len);
    mc_status_t st = w.err != MC_OK ? w.err : store_call_sync(s, MC_RPC_TIER_ADD, &body, NULL);
    mc_buf_fini(&body);
    return st;
}

static void run_job(store_tier_t *t, tier_job_t *j)
{
    mc_status_t st;
    if (j->kind == JOB_READ) {
        st = mc_tier_read(t->dir, j->key, j->klen, j->buf, j->room, j->expect, j->got);
        atomic_fetch_add(st == MC_OK ? &t->read_ok : &t->read_failed, 1);
    } else {
        st = mc_tier_write(t->dir, j->key, j->klen, j->iov, j->iovcnt, j->len, j->op != NULL);
        if (st == MC_OK) {
            mc_status_t ast = tier_add(t, j);
            if (ast != MC_OK && j->op != NULL) {
                /* the put fails: its file must not be found at a restart.
                 * When the master answered that the object is gone or is
                 * another put's (OBJECT_NOT_FOUND, INVALID_PARAMS) it has
                 * queued the deletion itself, done under the key's shard
                 * lock and only while the key is absent: an unlink from
                 * here could take the file of a newer put of the key that
                 * started since (its object would claim a file that is
                 * gone). Otherwise (no answer) the master may not know. */
                int master_deletes = ast == MC_ERR_OBJECT_NOT_FOUND || ast == MC_ERR_INVALID_PARAMS;
                MC_WARN(TIER, "eager put: TierAdd failed (%s); %s", mc_status_str(ast),
                        master_deletes ? "the master deletes its file" : "deleting its file");
                if (!master_deletes)
                    mc_tier_unlink(t->dir, j->key, j->klen);
                st = ast;
            } else if (ast != MC_OK && ast != MC_ERR_OBJECT_NOT_FOUND) {
                MC_WARN(TIER, "async write: TierAdd failed (%s); the file stays for a restart",
                        mc_status_str(ast));
            }
        }
        atomic_fetch_add(st == MC_OK ? &t->written : &t->write_failed, 1);
    }
    if (j->op != NULL) {
        store_op_t *op = j->op;
        op->wait_st = st;
        j->op = NULL;
        job_free(j);
        store_op_post(op);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->queued_bytes -= j->len;
    pthread_mutex_unlock(&t->mu);
    job_free(j);
}

/* mu held: unlink and return the first job that may run now (a write of a
 * key that another worker is writing waits: jobs of a key keep their queue
 * order), or NULL. */
static tier_job_t *take_job(store_tier_t *t)
{
    for (tier_job_t **pp = &t->head; *pp != NULL; pp = &(*pp)->next) {
        tier_job_t *j = *pp;
        int busy = 0;
        for (int i = 0; i < TIER_THREADS && j->kind == JOB_WRITE; i++)
            busy |= t->wbusy[i] && t->whash[i] == j->khash;
        if (busy)
            continue;
        *pp = j->next;
        if (*pp == NULL)
            t->tail = pp;
        return j;
    }
    return NULL;
}

static void *worker_main(void *arg)
{
    store_tier_t *t = arg;
    uint64_t next_fetch = 0;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        if (!atomic_load(&t->known) && !t->stop && !t->fetching && mc_now_us() >= next_fetch) {
            t->fetching = 1; /* one asker at a time: fetch writes dir and mode */
            pthread_mutex_unlock(&t->mu);
            /* short: close joins this thread */
            fetch(t, t->s->cfg.rpc_timeout_us < TIER_OPEN_FETCH_US ? t->s->cfg.rpc_timeout_us
                                                                   : TIER_OPEN_FETCH_US);
            next_fetch = mc_now_us() + TIER_FETCH_RETRY_US;
            pthread_mutex_lock(&t->mu);
            t->fetching = 0;
            continue;
        }
        tier_job_t *j = take_job(t);
        if (j == NULL) {
            if (t->stop && t->head == NULL)
                break;
            if (!atomic_load(&t->known)) {
                struct timespec ts = mc_timespec_in(CLOCK_REALTIME, 1000000);
                pthread_cond_timedwait(&t->cv, &t->mu, &ts);
            } else {
                pthread_cond_wait(&t->cv, &t->mu);
            }
            continue;
        }
        int slot = -1;
        for (int i = 0; i < TIER_THREADS && j->kind == JOB_WRITE && slot < 0; i++)
            if (!t->wbusy[i])
                slot = i; /* one per worker: always found */
        if (slot >= 0) {
            t->wbusy[slot] = 1;
            t->whash[slot] = j->khash;
        }
        int drop = t->drop && j->op == NULL;
        pthread_mutex_unlock(&t->mu);
        if (drop) {
            pthread_mutex_lock(&t->mu);
            t->queued_bytes -= j->len;
            pthread_mutex_unlock(&t->mu);
            job_free(j);
        } else {
            run_job(t, j);
        }
        pthread_mutex_lock(&t->mu);
        if (slot >= 0) {
            t->wbusy[slot] = 0;
            pthread_cond_broadcast(&t->cv); /* a write of the key may wait */
        }
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Queue j (front: reads). MC_OK, or MC_ERR_CANCELED (closing: j untouched). */
static mc_status_t submit(store_tier_t *t, tier_job_t *j, int front)
{
    pthread_mutex_lock(&t->mu);
    if (t->stop) {
        pthread_mutex_unlock(&t->mu);
        return MC_ERR_CANCELED;
    }
    if (front) {
        j->next = t->head;
        t->head = j;
        if (j->next == NULL)
            t->tail = &j->next;
    } else {
        j->next = NULL;
        *t->tail = j;
        t->tail = &j->next;
    }
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return MC_OK;
}

static tier_job_t *job_new(job_kind_t kind, const void *key, size_t klen, size_t iovcnt)
{
    tier_job_t *j = MC_NEW(tier_job_t);
    if (j == NULL)
        return NULL;
    j->kind = kind;
    j->key = mc_malloc(klen);
    j->iov = iovcnt > 0 ? mc_malloc(iovcnt * sizeof(*j->iov)) : NULL;
    if (j->key == NULL || (iovcnt > 0 && j->iov == NULL)) {
        job_free(j);
        return NULL;
    }
    memcpy(j->key, key, klen);
    j->klen = klen;
    j->khash = mc_hash64(key, klen);
    j->iovcnt = iovcnt;
    return j;
}

mc_status_t store_tier_write_op(store_op_t *op, const void *key, size_t klen,
                                const mc_slice_t *parts, size_t nparts, uint64_t len)
{
    store_tier_t *t = op->s->tier;
    tier_job_t *j = job_new(JOB_WRITE, key, klen, nparts);
    if (j == NULL)
        return MC_ERR_NOMEM;
    for (size_t i = 0; i < nparts; i++)
        j->iov[i] = (struct iovec){parts[i].ptr, parts[i].len};
    j->len = len;
    j->op = op;
    mc_status_t st = submit(t, j, 0);
    if (st != MC_OK)
        job_free(j);
    return st;
}

mc_status_t store_tier_write_async(mc_store_t *s, const void *key, size_t klen,
                                   const mc_slice_t *parts, size_t nparts, uint64_t len)
{
    store_tier_t *t = s->tier;
    pthread_mutex_lock(&t->mu);
    int full = t->queued_bytes + len > t->queue_max && t->queued_bytes > 0;
    if (!full)
        t->queued_bytes += len; /* reserved before the copy, so racing puts see it */
    pthread_mutex_unlock(&t->mu);
    if (full) {
        atomic_fetch_add(&t->degraded, 1);
        return MC_ERR_LIMIT;
    }
    tier_job_t *j = job_new(JOB_WRITE, key, klen, 1);
    mc_status_t st = MC_ERR_NOMEM;
    if (j == NULL || (j->copy = mc_malloc(len)) == NULL)
        goto err;
    uint64_t off = 0;
    for (size_t i = 0; i < nparts; i++) {
        memcpy(j->copy + off, parts[i].ptr, parts[i].len);
        off += parts[i].len;
    }
    j->iov[0] = (struct iovec){j->copy, len};
    j->len = len;
    st = submit(t, j, 0);
    if (st == MC_OK)
        return MC_OK;
err:
    if (j != NULL)
        job_free(j);
    pthread_mutex_lock(&t->mu);
    t->queued_bytes -= len;
    pthread_mutex_unlock(&t->mu);
    return st;
}

mc_status_t store_tier_read_op(store_op_t *op, const void *key, size_t klen, void *buf,
                               uint64_t room, uint64_t expect, uint64_t *got)
{
    store_tier_t *t = op->s->tier;
    tier_job_t *j = job_new(JOB_READ, key, klen, 0);
    if (j == NULL)
        return MC_ERR_NOMEM;
    j->buf = buf;
    j->room = room;
    j->expect = expect;
    j->got = got;
    j->op = op;
    mc_status_t st = submit(t, j, 1);
    if (st != MC_OK)
        job_free(j);
    return st;
}

/* ------------------------------------------------------------- lifetime */

int store_tier_parse_persist(const char *persist)
{
    if (persist == NULL || persist[0] == '\0')
        return -1;
    if (strcmp(persist, "off") == 0)
        return MC_MASTER_PERSIST_OFF;
    if (strcmp(persist, "async") == 0)
        return MC_MASTER_PERSIST_ASYNC;
    if (strcmp(persist, "eager") == 0)
        return MC_MASTER_PERSIST_EAGER;
    MC_ERROR(CLIENT, "persist '%s': expected off, async or eager (or empty: the master's)",
             persist);
    return -2;
}

mc_status_t store_tier_open(mc_store_t *s, const char *persist, uint64_t queue_bytes)
{
    int override = store_tier_parse_persist(persist);
    if (override == -2)
        return MC_ERR_INVALID_ARGUMENT;
    store_tier_t *t = MC_NEW(store_tier_t);
    if (t == NULL)
        return MC_ERR_NOMEM;
    t->s = s;
    t->override = override;
    t->queue_max = queue_bytes;
    t->tail = &t->head;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    /* one short attempt now, so that the first put already knows (the
     * workers retry if the master is away); not with a host loop, which
     * runs only after open returns */
    if (s->cfg.host_base == NULL)
        fetch(t, s->cfg.rpc_timeout_us < TIER_OPEN_FETCH_US ? s->cfg.rpc_timeout_us
                                                            : TIER_OPEN_FETCH_US);
    s->tier = t;
    for (int i = 0; i < TIER_THREADS; i++) {
        if (pthread_create(&t->th[i], NULL, worker_main, t) != 0) {
            MC_ERROR(CLIENT, "cannot start the tier worker threads");
            store_tier_close(s);
            store_tier_free(s);
            return MC_ERR_NOMEM;
        }
        t->nth++;
    }
    return MC_OK;
}

void store_tier_close(mc_store_t *s)
{
    store_tier_t *t = s->tier;
    if (t == NULL || t->nth == 0)
        return;
    uint64_t deadline = mc_now_ms() + TIER_DRAIN_MS;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->cv);
    while (t->queued_bytes > 0 && !t->drop) {
        pthread_mutex_unlock(&t->mu);
        usleep(1000);
        pthread_mutex_lock(&t->mu);
        if (mc_now_ms() > deadline && !t->drop) {
            t->drop = 1;
            MC_WARN(TIER,
                    "close: async tier writes still queued after %d ms (%llu bytes): "
                    "dropping them",
                    TIER_DRAIN_MS, (unsigned long long)t->queued_bytes);
        }
    }
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->nth; i++)
        pthread_join(t->th[i], NULL);
    t->nth = 0;
}

void store_tier_free(mc_store_t *s)
{
    store_tier_t *t = s->tier;
    if (t == NULL)
        return;
    /* every thread is gone: whatever is queued belongs to no one */
    for (tier_job_t *j = t->head, *n; j != NULL; j = n) {
        n = j->next;
        job_free(j);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    mc_free(t);
    s->tier = NULL;
}
