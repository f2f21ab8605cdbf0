/*
 * shm.c - the shm transport: peers on the same host move bytes with memcpy
 * in the owner's shared memory.
 *
 * Owner: memory made with mc_te_alloc_shared is a memfd region. The
 * descriptor's MC_F_SHM field says where the segment lives (hostname + boot
 * id), the abstract unix socket that hands out the regions and the regions
 * themselves (id, address, length). The socket admits the same user, or a
 * member of the configured group (SO_PEERCRED). Besides the regions the
 * owner shares one small read-only memfd, the range table: its registered
 * remote-accessible ranges, rewritten under a sequence lock at every
 * (un)registration, so a peer checks every request against the owner's
 * current ranges, as the TCP target does.
 *
 * Initiator: when a peer's descriptor shows the same host, the attach
 * thread connects to the owner's socket, receives the range table and the
 * regions (SCM_RIGHTS) and maps each once. The range table also carries a
 * robust mutex the owner holds while it serves: a peer's trylock tells at
 * once (no system call) whether the owner still lives, so nothing is copied
 * into the memory of an owner that exited; once a second the attach thread
 * also lets go of the mappings of owners that went, so their memory goes
 * back to the system without waiting for a request that may never come.
 * Until then, and whenever a request is
 * outside the mapped regions or the owner's current ranges, requests go
 * over the next transport (rdma or tcp). Requests are cut in SHM_SLICE
 * slices: those up to SHM_INLINE_MAX are copied by the submitter at once,
 * larger ones by the copy threads, so a large request is copied in parallel.
 *
 * Per-segment machine (shm_seg_t.state, set_state is the one writer):
 *   NONE       not on this host, or no shared memory: never used
 *   ATTACHING  queued for / on the attach thread; requests use tcp/rdma
 *   READY      mapped (ss->map): requests in its ranges use shm
 *   FAILED     the attach failed (logged once); again at the next description
 *   GONE       the owner exited (or stopped serving; a request or the
 *              sweep found it): unmapped, until described again
 *
 * Locks: seg_lock (engine) -> ss->mu -> st->jmu. A mapping (shm_map_t) is
 * reference counted: one for being current, one per slice using it; the
 * last put unmaps it, so a replaced or dead mapping stays valid under the
 * copies in flight.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "reactor/fsm.h"
#include "rpc/fields.h"
#include "transport/te_int.h"
#include "util/copy.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/shm.h"
#include "util/time.h"

#define SHM_SLICE (512u << 10)     /* slice size of its requests */
#define SHM_INLINE_MAX (64u << 10) /* slices copied by the submitter */
#define SHM_RANGES_MAX 4096u       /* ranges in the range table */
#define SHM_MAX_REGIONS 64u        /* regions per segment */
#define SHM_MAX_CONNS 1024u        /* peers connected to one owner */
#define SHM_IO_TIMEOUT_US 2000000u /* one request/reply on the socket */
#define SHM_MAGIC 0x4d43534du      /* "MCSM" */
#define SHM_SWEEP_US 1000000u      /* mappings of exited owners let go this often */
#define SHM_SWEEP_MAX 16u          /* of them, at most this many a sweep */

/* ------------------------------------------------------------ structs */

/* The range table: the owner's remote-accessible ranges, sorted by
 * address; seq is odd while the owner rewrites it. Every field is atomic:
 * peers read it while it may change (and retry). `alive` is a robust,
 * process-shared mutex the owner's server thread holds while it serves:
 * when the owner exits, even killed, the kernel marks it owner-dead before
 * the process can be reaped, so a peer's trylock (a compare-and-swap, no
 * system call) tells at once whether the owner is still there. */
typedef struct shm_ranges {
    pthread_mutex_t alive;
    _Atomic uint64_t seq;
    _Atomic uint32_t n;
    _Atomic uint32_t overflow; /* more than SHM_RANGES_MAX: peers do not use shm */
    struct {
        _Atomic uint64_t addr, len;
    } r[SHM_RANGES_MAX];
} shm_ranges_t;

/* Socket messages: a request, and the reply (with a descriptor on OK). */
enum { OP_HELLO = 1, OP_MAP = 2 };
typedef struct shm_req {
    uint32_t magic, op;
    uint64_t id; /* OP_MAP: the region */
} shm_req_t;
typedef struct shm_rep {
    uint32_t magic;
    int32_t status; /* mc_status_t */
    uint64_t len;   /* bytes of the memfd sent */
} shm_rep_t;

/* A peer's MC_F_SHM field (seg->tp[TE_TP_SHM]). */
typedef struct shm_peer {
    char host[64], boot[64], sock[108];
    unsigned nreg;
    struct {
        uint64_t id, addr, len;
    } reg[SHM_MAX_REGIONS];
} shm_peer_t;

/* One attachment to an owner: its regions mapped here. */
typedef struct shm_map {
    _Atomic int refs;
    _Atomic int gone;     /* the owner exited */
    shm_ranges_t *ranges; /* its range table (mapped writable for the liveness trylock) */
    unsigned n;
    struct {
        uint64_t addr, len; /* the owner's addresses */
        uint8_t *base;      /* ours */
    } reg[SHM_MAX_REGIONS];
} shm_map_t;

/* A peer segment's shared memory, as this process sees it (reactor/fsm.h):
 *
 *   NONE --described on this host--> ATTACHING --mapped--> READY --owner exited--> GONE
 *                                        |                   |
 *                                        +--not usable--> FAILED
 *
 * Any state goes back to NONE when the segment is described on another
 * host, and to ATTACHING when it is described again with another owner or
 * other regions (FAILED and GONE included: the owner may have restarted).
 * Only the attach worker (or its stop) leaves ATTACHING for READY/FAILED. */
enum shm_seg_state {
    SS_NONE,      /* not on this host (or not described yet): tcp/rdma */
    SS_ATTACHING, /* queued for the worker, which maps its regions */
    SS_READY,     /* mapped: transfers are memcpy */
    SS_FAILED,    /* on this host but not usable (permissions, limits): tcp/rdma */
    SS_GONE,      /* its owner closed its memory (exited): looked up again */
    SS_NSTATES
};
static const char *const ss_names[] = {"NONE", "ATTACHING", "READY", "FAILED", "GONE"};
static const uint64_t ss_moves[] = {
    [SS_NONE] = MC_FSM_BIT(SS_ATTACHING),
    [SS_ATTACHING] = MC_FSM_BIT(SS_READY) | MC_FSM_BIT(SS_FAILED) | MC_FSM_BIT(SS_NONE),
    [SS_READY] = MC_FSM_BIT(SS_NONE) | MC_FSM_BIT(SS_ATTACHING) | MC_FSM_BIT(SS_GONE),
    [SS_FAILED] = MC_FSM_BIT(SS_NONE) | MC_FSM_BIT(SS_ATTACHING),
    [SS_GONE] = MC_FSM_BIT(SS_NONE) | MC_FSM_BIT(SS_ATTACHING),
};
static const mc_fsm_desc_t ss_fsm = MC_FSM_DESC("shm_seg", MC_LOGC_SHM, ss_names, ss_moves);

/* What the transport keeps for a peer segment (seg->tp_state[TE_TP_SHM]). */
typedef struct shm_seg {
    te_seg_t *seg;
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* an attach finished */
    int state;            /* enum shm_seg_state */
    unsigned gen;         /* bumped when a new attach is wanted */
    shm_peer_t want;      /* the view to attach to (ATTACHING) */
    shm_map_t *map;       /* READY: the current mapping (holds a reference) */
    te_waiter_t *waiters; /* non-blocking opens waiting for the attach to end */
    int queued;           /* on st->jobs or being attached */
    struct shm_seg *next_job;
} shm_seg_t;

/* The slice's shm state (te_slice_t.priv). */
typedef struct shm_slice {
    shm_map_t *map;
    uint8_t *peer; /* the remote range, in our mapping */
    te_slice_t *next;
} shm_slice_t;
_Static_assert(sizeof(shm_slice_t) <= TE_SLICE_PRIV, "shm_slice_t fits te_slice_t.priv");
#define SS(s) TE_SLICE_PRIV_OF(shm_slice_t, s)

/* A region of ours (mc_te_alloc_shared). */
typedef struct shm_region {
    uint64_t id;
    mc_shm_t m;
} shm_region_t;

/* The engine's shm state (te->tp[TE_TP_SHM]). */
typedef struct shm_state {
    mc_te_t *te;
    int on;                             /* serving and using (not mc_te_opts_t.shm_off) */
    char host[64], boot[64], sock[108]; /* our identity and socket name */
    gid_t group;                        /* admitted besides our uid; (gid_t)-1 none */
    pthread_mutex_t mu;                 /* regions */
    shm_region_t *regions;
    size_t nregions, cap;
    mc_shm_t ranges_mem; /* our range table */
    shm_ranges_t *ranges;
    /* the server thread: listening socket and the peers' connections */
    int lfd, wake[2];
    pthread_t server;
    int server_up;
    /* the attach thread and its queue */
    pthread_mutex_t jmu;
    pthread_cond_t jcv;
    shm_seg_t *jobs, *jobs_tail, *busy; /* busy: being attached (off the queue) */
    pthread_t attacher;
    int attacher_up;
    /* copy threads */
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    te_slice_t *qhead, *qtail;
    pthread_t *workers;
    unsigned nworkers;
    _Atomic int stop;
    _Atomic uint64_t bytes; /* moved over shm by this engine, both ways */
} shm_state_t;

#define ST(te) ((shm_state_t *)(te)->tp[TE_TP_SHM])

/* -------------------------------------------------------- mappings */

static void map_free(shm_map_t *m)
{
    for (unsigned i = 0; i < m->n; i++)
        if (m->reg[i].base != NULL)
            munmap(m->reg[i].base, m->reg[i].len);
    if (m->ranges != NULL)
        munmap(m->ranges, sizeof(shm_ranges_t));
    mc_free(m);
}

static void map_put(shm_map_t *m, int n)
{
    if (m != NULL && atomic_fetch_sub(&m->refs, n) == n)
        map_free(m);
}

/* [addr, addr+len) inside one of the owner's current ranges? A torn read
 * (the owner rewriting) is retried. The sequence lock without fences (as
 * ThreadSanitizer wants): data loads are acquire loads, so the second read
 * of seq cannot move before them; the writer's data stores are release
 * stores, so none is visible before its odd seq. */
static int ranges_ok(const shm_ranges_t *t, uint64_t addr, uint64_t len)
{
    for (int tries = 0; tries < 100; tries++) {
        uint64_t s0 = atomic_load_explicit(&t->seq, memory_order_acquire);
        if (s0 & 1)
            continue;
        int ok = 0;
        uint32_t n = atomic_load_explicit(&t->n, memory_order_acquire);
        if (n > SHM_RANGES_MAX || atomic_load_explicit(&t->overflow, memory_order_acquire))
            n = 0;
        uint32_t lo = 0, hi = n; /* last range with start <= addr */
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (atomic_load_explicit(&t->r[mid].addr, memory_order_acquire) <= addr)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo > 0) {
            uint64_t a = atomic_load_explicit(&t->r[lo - 1].addr, memory_order_acquire);
            uint64_t l = atomic_load_explicit(&t->r[lo - 1].len, memory_order_acquire);
            ok = addr >= a && addr + len <= a + l;
        }
        if (atomic_load_explicit(&t->seq, memory_order_relaxed) == s0)
            return ok;
    }
    return 0;
}

/* Does the owner still serve? Its server thread holds ranges->alive: busy
 * means yes; owner-dead (it exited, even killed) or free (it stopped) no,
 * and we let go of the mutex again so other peers see the same. */
static int map_alive(shm_map_t *m)
{
    if (atomic_load_explicit(&m->gone, memory_order_relaxed))
        return 0;
    int rc = pthread_mutex_trylock(&m->ranges->alive);
    if (rc == EBUSY)
        return 1;
    if (rc == EOWNERDEAD)
        pthread_mutex_consistent(&m->ranges->alive);
    if (rc == 0 || rc == EOWNERDEAD)
        pthread_mutex_unlock(&m->ranges->alive);
    atomic_store(&m->gone, 1);
    return 0;
}

/* The mapped region holding [addr, addr+len), or -1. */
static int map_find(const shm_map_t *m, uint64_t addr, uint64_t len)
{
    for (unsigned i = 0; i < m->n; i++)
        if (addr >= m->reg[i].addr && addr + len <= m->reg[i].addr + m->reg[i].len)
            return (int)i;
    return -1;
}

/* ------------------------------------------------------- per segment */

/* The one writer of ss->state (under ss->mu). An illegal move is a bug:
 * fsm.h logs it at ERROR and the state stays. */
static void set_state(shm_seg_t *ss, int to)
{
    if (ss->state != to)
        (void)MC_FSM_SET(&ss_fsm, ss, state, to);
}

/* READY, and its owner exited or stopped serving: the mapping is taken off
 * ss (GONE) and returned, for the caller to put once ss->mu is released;
 * else NULL. ss->mu held. */
static shm_map_t *seg_owner_gone(shm_seg_t *ss)
{
    shm_map_t *m = ss->map;
    if (ss->state != SS_READY || m == NULL || map_alive(m))
        return NULL;
    MC_INFO(SHM, "segment '%s': its owner closed its shared memory (exited?)", ss->seg->name);
    ss->map = NULL;
    set_state(ss, SS_GONE);
    /* it may have restarted: the next submit looks it up again */
    atomic_store(&ss->seg->stale, 1);
    return m;
}

/* Same owner incarnation and regions as the mapping we have? */
static int same_attach(const shm_peer_t *p, const shm_peer_t *q)
{
    if (strcmp(p->sock, q->sock) != 0 || p->nreg != q->nreg)
        return 0;
    for (unsigned i = 0; i < p->nreg; i++)
        if (p->reg[i].id != q->reg[i].id || p->reg[i].addr != q->reg[i].addr ||
            p->reg[i].len != q->reg[i].len)
            return 0;
    return 1;
}

static void job_push(shm_state_t *st, shm_seg_t *ss)
{
    pthread_mutex_lock(&st->jmu);
    ss->next_job = NULL;
    if (st->jobs_tail != NULL)
        st->jobs_tail->next_job = ss;
    else
        st->jobs = ss;
    st->jobs_tail = ss;
    pthread_cond_signal(&st->jcv);
    pthread_mutex_unlock(&st->jmu);
}

static void shm_seg_described(mc_te_t *te, te_seg_t *seg)
{
    shm_state_t *st = ST(te);
    const shm_peer_t *p = seg->tp[TE_TP_SHM];
    shm_seg_t *ss = seg->tp_state[TE_TP_SHM];
    int local = st != NULL && st->on && p != NULL && p->nreg > 0 &&
                strcmp(p->host, st->host) == 0 && strcmp(p->boot, st->boot) == 0;
    if (ss == NULL) {
        if (!local)
            return;
        ss = MC_NEW(shm_seg_t);
        if (ss == NULL)
            return; /* no shm for it: tcp/rdma */
        ss->seg = seg;
        pthread_mutex_init(&ss->mu, NULL);
        pthread_cond_init(&ss->cv, NULL);
        seg->tp_state[TE_TP_SHM] = ss;
    }
    shm_map_t *old = NULL;
    pthread_mutex_lock(&ss->mu);
    if (!local) {
        old = ss->map;
        ss->map = NULL;
        ss->gen++;
        set_state(ss, SS_NONE);
    } else if (ss->state == SS_READY && ss->map != NULL && !atomic_load(&ss->map->gone) &&
               same_attach(&ss->want, p)) {
        /* described again, same owner and regions: the mapping stays */
    } else if (ss->state == SS_ATTACHING && same_attach(&ss->want, p)) {
        /* that attach is on its way */
    } else {
        ss->want = *p;
        ss->gen++;
        set_state(ss, SS_ATTACHING);
        if (!ss->queued) {
            ss->queued = 1;
            job_push(st, ss);
        }
    }
    pthread_mutex_unlock(&ss->mu);
    map_put(old, 1);
}

/* Call the waiters taken off ss (after ss->mu is released). */
static void waiters_run(te_waiter_t *w)
{
    while (w != NULL) {
        te_waiter_t *next = w->next;
        w->fn(w);
        w = next;
    }
}

static int shm_seg_pending(mc_te_t *te, te_seg_t *seg, te_waiter_t *w)
{
    shm_seg_t *ss = seg->tp_state[TE_TP_SHM];
    (void)te;
    if (ss == NULL)
        return 0;
    pthread_mutex_lock(&ss->mu);
    int pending = ss->state == SS_ATTACHING;
    if (pending) {
        w->next = ss->waiters;
        ss->waiters = w;
    }
    pthread_mutex_unlock(&ss->mu);
    return pending;
}

static void shm_seg_wait(mc_te_t *te, te_seg_t *seg, uint64_t timeout_us)
{
    shm_seg_t *ss = seg->tp_state[TE_TP_SHM];
    (void)te;
    if (ss == NULL)
        return;
    uint64_t end = mc_now_ns() + timeout_us * 1000;
    pthread_mutex_lock(&ss->mu);
    while (ss->state == SS_ATTACHING && mc_now_ns() < end) {
        struct timespec ts = mc_timespec_in(CLOCK_REALTIME, 10000);
        pthread_cond_timedwait(&ss->cv, &ss->mu, &ts);
    }
    pthread_mutex_unlock(&ss->mu);
}

/* The segment record goes: off the attach queue (waiting for an attach in
 * progress), the mapping dropped. */
static void shm_seg_release(mc_te_t *te, te_seg_t *seg)
{
    shm_seg_t *ss = seg->tp_state[TE_TP_SHM];
    shm_state_t *st = ST(te);
    if (ss == NULL)
        return;
    if (st != NULL) {
        pthread_mutex_lock(&st->jmu);
        for (shm_seg_t **pp = &st->jobs; *pp != NULL; pp = &(*pp)->next_job) {
            if (*pp == ss) {
                *pp = ss->next_job;
                break;
            }
        }
        st->jobs_tail = NULL;
        for (shm_seg_t *x = st->jobs; x != NULL; x = x->next_job)
            st->jobs_tail = x;
        while (st->busy == ss)
            pthread_cond_wait(&st->jcv, &st->jmu);
        pthread_mutex_unlock(&st->jmu);
    }
    map_put(ss->map, 1);
    waiters_run(ss->waiters); /* (none: they were woken when the attach ended) */
    pthread_cond_destroy(&ss->cv);
    pthread_mutex_destroy(&ss->mu);
    mc_free(ss);
    seg->tp_state[TE_TP_SHM] = NULL;
}

/* ------------------------------------------------------ attach thread */

/* One request on the owner's socket; the descriptor of the reply. */
static mc_status_t ask(int conn, uint32_t op, uint64_t id, uint64_t *len, int *fd)
{
    shm_req_t q = {.magic = SHM_MAGIC, .op = op, .id = id};
    shm_rep_t r;
    size_t got = 0;
    mc_status_t st = mc_unix_send(conn, &q, sizeof(q), -1);
    if (st == MC_OK)
        st = mc_unix_recv(conn, &r, sizeof(r), &got, fd);
    if (st != MC_OK)
        return st;
    if (got != sizeof(r) || r.magic != SHM_MAGIC)
        st = MC_ERR_PROTOCOL;
    else if (r.status != MC_OK)
        st = (mc_status_t)r.status;
    else if (*fd < 0)
        st = MC_ERR_PROTOCOL;
    if (st != MC_OK && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    *len = r.len;
    return st;
}

/* Connect to the owner and map its range table and regions. */
static mc_status_t attach(const shm_peer_t *p, shm_map_t **out, char *why, size_t whylen)
{
    shm_map_t *m = MC_NEW(shm_map_t);
    if (m == NULL)
        return MC_ERR_NOMEM;
    int conn = -1;
    atomic_store(&m->refs, 1);
    mc_status_t st = mc_unix_connect(p->sock, SHM_IO_TIMEOUT_US, &conn);
    if (st != MC_OK) {
        snprintf(why, whylen, "cannot connect to its socket '@%s': %s", p->sock, mc_status_str(st));
        goto err;
    }
    uint64_t len = 0;
    int fd = -1;
    void *base = NULL;
    if ((st = ask(conn, OP_HELLO, 0, &len, &fd)) != MC_OK) {
        snprintf(why, whylen, "its socket refused us: %s (see the owner's log)", mc_status_str(st));
        goto err;
    }
    st = len == sizeof(shm_ranges_t) ? mc_shm_map(fd, len, 1, &base) : MC_ERR_PROTOCOL;
    close(fd);
    if (st != MC_OK) {
        snprintf(why, whylen, "cannot map its range table: %s", mc_status_str(st));
        goto err;
    }
    m->ranges = base;
    for (unsigned i = 0; i < p->nreg; i++) {
        if ((st = ask(conn, OP_MAP, p->reg[i].id, &len, &fd)) != MC_OK) {
            snprintf(why, whylen, "region %u: %s", i, mc_status_str(st));
            goto err;
        }
        st = len >= p->reg[i].len ? mc_shm_map(fd, p->reg[i].len, 1, &base) : MC_ERR_PROTOCOL;
        close(fd);
        if (st != MC_OK) {
            snprintf(why, whylen, "cannot map region %u (%llu bytes): %s", i,
                     (unsigned long long)p->reg[i].len, mc_status_str(st));
            goto err;
        }
        m->reg[i].addr = p->reg[i].addr;
        m->reg[i].len = p->reg[i].len;
        m->reg[i].base = base;
        m->n = i + 1;
    }
    close(conn);
    if (!map_alive(m)) {
        snprintf(why, whylen, "it stopped while we attached");
        map_free(m);
        return MC_ERR_CONN_CLOSED;
    }
    *out = m;
    return MC_OK;
err:
    if (conn >= 0)
        close(conn);
    map_free(m);
    return st;
}

/* Let go of the mappings of owners that exited or stopped serving without
 * waiting for a request to find out: none may come (the master lists no
 * segment of a dead node), and a mapping keeps the owner's memory, hugetlb
 * pages too, from the system (a restarted node found its pool taken).
 * The attach thread, every SHM_SWEEP_US; segment lock, then each ss->mu. */
static void sweep(shm_state_t *st)
{
    mc_te_t *te = st->te;
    shm_map_t *dead[SHM_SWEEP_MAX];
    unsigned n = 0;
    pthread_mutex_lock(&te->seg_lock);
    for (size_t i = 0; i < te->nsegs && n < SHM_SWEEP_MAX; i++) {
        shm_seg_t *ss = te->segs[i] != NULL ? te->segs[i]->tp_state[TE_TP_SHM] : NULL;
        if (ss == NULL)
            continue;
        pthread_mutex_lock(&ss->mu);
        if ((dead[n] = seg_owner_gone(ss)) != NULL)
            n++;
        pthread_mutex_unlock(&ss->mu);
    }
    pthread_mutex_unlock(&te->seg_lock);
    for (unsigned i = 0; i < n; i++)
        map_put(dead[i], 1); /* unmapped once no copy in flight uses it */
}

/* Wait on jcv until deadline_us (mc_now_us), jmu held. */
static void jobs_wait(shm_state_t *st, uint64_t deadline_us)
{
    uint64_t now = mc_now_us();
    if (now >= deadline_us)
        return;
    struct timespec ts = mc_timespec_in(CLOCK_REALTIME, deadline_us - now);
    pthread_cond_timedwait(&st->jcv, &st->jmu, &ts);
}

static void *attach_main(void *arg)
{
    shm_state_t *st = arg;
    uint64_t next_sweep = mc_now_us() + SHM_SWEEP_US;
    pthread_mutex_lock(&st->jmu);
    for (;;) {
        while (st->jobs == NULL && !atomic_load(&st->stop)) {
            if (mc_now_us() >= next_sweep) {
                pthread_mutex_unlock(&st->jmu); /* the lock order: seg_lock first */
                sweep(st);
                pthread_mutex_lock(&st->jmu);
                next_sweep = mc_now_us() + SHM_SWEEP_US;
                continue;
            }
            jobs_wait(st, next_sweep);
        }
        if (atomic_load(&st->stop))
            break;
        shm_seg_t *ss = st->jobs;
        st->jobs = ss->next_job;
        if (st->jobs == NULL)
            st->jobs_tail = NULL;
        st->busy = ss;
        pthread_mutex_unlock(&st->jmu);

        pthread_mutex_lock(&ss->mu);
        ss->queued = 0;
        unsigned gen = ss->gen;
        shm_peer_t want = ss->want;
        int go = ss->state == SS_ATTACHING;
        pthread_mutex_unlock(&ss->mu);
        shm_map_t *m = NULL, *old = NULL;
        char why[256] = "";
        mc_status_t rc = go ? attach(&want, &m, why, sizeof(why)) : MC_ERR_CANCELED;
        pthread_mutex_lock(&ss->mu);
        if (go && ss->gen == gen && ss->state == SS_ATTACHING) {
            if (rc == MC_OK) {
                old = ss->map;
                ss->map = m;
                m = NULL;
                set_state(ss, SS_READY);
                MC_INFO(SHM, "segment '%s': same host, %u region(s) mapped: shared memory from now",
                        ss->seg->name, want.nreg);
            } else {
                set_state(ss, SS_FAILED);
                MC_WARN(SHM,
                        "segment '%s' is on this host but its shared memory is not usable: "
                        "%s (tcp/rdma instead)",
                        ss->seg->name, why);
            }
        }
        te_waiter_t *w = ss->state != SS_ATTACHING ? ss->waiters : NULL;
        if (w != NULL)
            ss->waiters = NULL;
        pthread_cond_broadcast(&ss->cv);
        pthread_mutex_unlock(&ss->mu);
        map_put(m, 1); /* an attach nobody wants any more */
        map_put(old, 1);
        waiters_run(w);

        pthread_mutex_lock(&st->jmu);
        st->busy = NULL;
        pthread_cond_broadcast(&st->jcv); /* shm_seg_release may wait for it */
    }
    pthread_mutex_unlock(&st->jmu);
    return NULL;
}

/* ------------------------------------------------------- server thread */

static void serve_one(shm_state_t *st, int conn, int *close_it)
{
    shm_req_t q;
    size_t got = 0;
    int fd = -1;
    mc_status_t rc = mc_unix_recv(conn, &q, sizeof(q), &got, &fd);
    if (fd >= 0)
        close(fd); /* peers send none */
    if (rc == MC_ERR_TIMEOUT)
        return;
    if (rc != MC_OK || got != sizeof(q) || q.magic != SHM_MAGIC) {
        *close_it = 1; /* gone, or not one of ours */
        return;
    }
    shm_rep_t r = {.magic = SHM_MAGIC, .status = MC_ERR_INVALID_PARAMS};
    int send_fd = -1;
    pthread_mutex_lock(&st->mu);
    if (q.op == OP_HELLO) {
        r.status = MC_OK;
        r.len = sizeof(shm_ranges_t);
        send_fd = st->ranges_mem.fd;
    } else if (q.op == OP_MAP) {
        r.status = MC_ERR_NOT_FOUND;
        for (size_t i = 0; i < st->nregions; i++) {
            if (st->regions[i].id == q.id) {
                r.status = MC_OK;
                r.len = st->regions[i].m.len;
                send_fd = st->regions[i].m.fd;
                break;
            }
        }
    }
    /* sent under mu: a region freed meanwhile would close the fd */
    if (mc_unix_send(conn, &r, sizeof(r), send_fd) != MC_OK)
        *close_it = 1;
    pthread_mutex_unlock(&st->mu);
}

static void *server_main(void *arg)
{
    shm_state_t *st = arg;
    struct pollfd *pf = mc_calloc(SHM_MAX_CONNS + 2, sizeof(*pf));
    if (pf == NULL)
        return NULL;
    /* held while we serve: peers see us alive (ranges->alive) */
    pthread_mutex_lock(&st->ranges->alive);
    size_t n = 2;
    pf[0] = (struct pollfd){.fd = st->wake[0], .events = POLLIN};
    pf[1] = (struct pollfd){.fd = st->lfd, .events = POLLIN};
    while (!atomic_load(&st->stop)) {
        if (poll(pf, n, -1) < 0) {
            if (errno == EINTR)
                continue;
            MC_ERROR(SHM, "poll on the shared-memory socket: %s", strerror(errno));
            break;
        }
        if (pf[0].revents)
            break; /* shutdown */
        for (size_t i = 2; i < n; i++) {
            if (pf[i].revents == 0)
                continue;
            int close_it = (pf[i].revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
            if (!close_it && (pf[i].revents & POLLIN))
                serve_one(st, pf[i].fd, &close_it);
            if (close_it) {
                close(pf[i].fd);
                pf[i] = pf[--n];
                i--;
            }
        }
        if (pf[1].revents & POLLIN) {
            int c = accept4(st->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (c < 0)
                continue;
            char why[200];
            if (!mc_unix_peer_allowed(c, st->group, why, sizeof(why))) {
                MC_WARN(SHM, "shared memory of '%s': refused a peer: %s", st->te->name, why);
                close(c);
            } else if (n >= SHM_MAX_CONNS + 2) {
                MC_WARN(SHM, "shared memory of '%s': refused a peer: %u peers connected already",
                        st->te->name, SHM_MAX_CONNS);
                close(c);
            } else {
                struct timeval tv = {.tv_sec = 2};
                setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
                pf[n++] = (struct pollfd){.fd = c, .events = POLLIN};
            }
        }
    }
    for (size_t i = 2; i < n; i++)
        close(pf[i].fd);
    mc_free(pf);
    pthread_mutex_unlock(&st->ranges->alive); /* we stop: peers see it free */
    return NULL;
}

/* --------------------------------------------------------- copying */

static void copy_slice(shm_state_t *st, te_slice_t *s)
{
    shm_map_t *m = SS(s)->map;
    uint8_t *peer = SS(s)->peer;
    if (s->opcode == MC_TE_WRITE)
        mc_copy_cold(peer, s->local, s->len); /* into the owner's segment: not for our caches */
    else
        memcpy(s->local, peer, s->len);
    atomic_fetch_add_explicit(&st->bytes, s->len, memory_order_relaxed);
    te_slice_done(s, MC_OK); /* may free the slice */
    map_put(m, 1);
}

static void *worker_main(void *arg)
{
    shm_state_t *st = arg;
    pthread_mutex_lock(&st->qmu);
    for (;;) {
        while (st->qhead == NULL && !atomic_load(&st->stop))
            pthread_cond_wait(&st->qcv, &st->qmu);
        te_slice_t *s = st->qhead;
        if (s == NULL)
            break; /* stopping, queue empty */
        st->qhead = SS(s)->next;
        if (st->qhead == NULL)
            st->qtail = NULL;
        pthread_mutex_unlock(&st->qmu);
        if (atomic_load(&st->stop)) {
            shm_map_t *m = SS(s)->map;
            te_slice_done(s, MC_ERR_CANCELED);
            map_put(m, 1);
        } else {
            copy_slice(st, s);
        }
        pthread_mutex_lock(&st->qmu);
    }
    pthread_mutex_unlock(&st->qmu);
    return NULL;
}

static int shm_usable(mc_te_t *te, te_seg_t *seg, uint64_t remote, uint64_t len)
{
    shm_seg_t *ss = seg != NULL ? seg->tp_state[TE_TP_SHM] : NULL;
    (void)te;
    if (ss == NULL)
        return 0;
    int ok = 0;
    pthread_mutex_lock(&ss->mu);
    shm_map_t *m = ss->map;
    if (ss->state == SS_READY && m != NULL) {
        shm_map_t *dead = seg_owner_gone(ss);
        if (dead != NULL) {
            pthread_mutex_unlock(&ss->mu);
            map_put(dead, 1);
            return 0;
        }
        ok = map_find(m, remote, len) >= 0 && ranges_ok(m->ranges, remote, len);
    }
    pthread_mutex_unlock(&ss->mu);
    return ok;
}

static void shm_post(mc_te_t *te, te_submit_t *sub, te_slice_t *s, size_t n)
{
    shm_state_t *st = ST(te);
    shm_seg_t *ss = s[0].seg->tp_state[TE_TP_SHM];
    (void)sub;
    pthread_mutex_lock(&ss->mu);
    shm_map_t *m = ss->map;
    if (m != NULL)
        atomic_fetch_add(&m->refs, (int)n);
    pthread_mutex_unlock(&ss->mu);
    int k = m != NULL ? map_find(m, s[0].remote, s[n - 1].remote + s[n - 1].len - s[0].remote) : -1;
    if (k < 0) {
        /* the owner went between the choice and now */
        for (size_t i = 0; i < n; i++)
            te_slice_done(&s[i], MC_ERR_CONN_CLOSED);
        map_put(m, (int)n);
        return;
    }
    te_slice_t *head = NULL, *tail = NULL;
    for (size_t i = 0; i < n; i++) {
        SS(&s[i])->map = m;
        SS(&s[i])->peer = m->reg[k].base + (s[i].remote - m->reg[k].addr);
        SS(&s[i])->next = NULL;
        if (s[i].len <= SHM_INLINE_MAX || st->nworkers == 0) {
            copy_slice(st, &s[i]);
            continue;
        }
        if (tail != NULL)
            SS(tail)->next = &s[i];
        else
            head = &s[i];
        tail = &s[i];
    }
    if (head == NULL)
        return;
    pthread_mutex_lock(&st->qmu);
    if (st->qtail != NULL)
        SS(st->qtail)->next = head;
    else
        st->qhead = head;
    st->qtail = tail;
    pthread_cond_broadcast(&st->qcv);
    pthread_mutex_unlock(&st->qmu);
}

/* ------------------------------------------------------ registration */

/* Rewrite the range table from the remote-accessible buffers (skipping
 * `except`, about to go). buf_lock held for writing. */
static void ranges_publish(mc_te_t *te, const te_buf_t *except)
{
    shm_state_t *st = ST(te);
    if (st == NULL || st->ranges == NULL)
        return;
    shm_ranges_t *t = st->ranges;
    uint64_t seq = atomic_load_explicit(&t->seq, memory_order_relaxed);
    atomic_store_explicit(&t->seq, seq + 1, memory_order_relaxed);
    uint32_t n = 0, over = 0;
    for (size_t i = 0; i < te->nbufs; i++) {
        const te_buf_t *b = &te->bufs[i];
        if (!b->remote || b == except)
            continue;
        if (n == SHM_RANGES_MAX) {
            over = 1;
            break;
        }
        atomic_store_explicit(&t->r[n].addr, b->addr, memory_order_release);
        atomic_store_explicit(&t->r[n].len, b->len, memory_order_release);
        n++;
    }
    atomic_store_explicit(&t->n, n, memory_order_release);
    atomic_store_explicit(&t->overflow, over, memory_order_release);
    atomic_store_explicit(&t->seq, seq + 2, memory_order_release);
}

static mc_status_t shm_reg_bufs(mc_te_t *te, te_buf_t *b, size_t n)
{
    (void)b;
    (void)n;
    ranges_publish(te, NULL);
    return MC_OK;
}

static void shm_dereg_buf(mc_te_t *te, te_buf_t *b)
{
    ranges_publish(te, b);
}

/* ------------------------------------------------------- descriptor */

/* Does region r hold a remote-accessible buffer? buf_lock held. */
static int region_shared(const mc_te_t *te, const shm_region_t *r)
{
    uint64_t a = (uint64_t)(uintptr_t)r->m.base;
    for (size_t i = 0; i < te->nbufs; i++)
        if (te->bufs[i].remote && te->bufs[i].addr >= a && te->bufs[i].addr < a + r->m.len)
            return 1;
    return 0;
}

/* {HOST, BOOT_ID, SOCKET, REGIONS}: the regions that hold registered
 * remote-accessible buffers (buf_lock held by the caller). */
static void shm_desc_encode(mc_te_t *te, mc_mp_writer_t *w)
{
    shm_state_t *st = ST(te);
    mc_mp_write_map(w, 4);
    mc_mp_write_uint(w, MC_F_HOST);
    mc_mp_write_cstr(w, st->host);
    mc_mp_write_uint(w, MC_F_BOOT_ID);
    mc_mp_write_cstr(w, st->boot);
    mc_mp_write_uint(w, MC_F_SOCKET);
    mc_mp_write_cstr(w, st->on ? st->sock : "");
    pthread_mutex_lock(&st->mu);
    uint32_t nr = 0;
    for (size_t i = 0; st->on && i < st->nregions && nr < SHM_MAX_REGIONS; i++)
        nr += region_shared(te, &st->regions[i]);
    mc_mp_write_uint(w, MC_F_REGIONS);
    mc_mp_write_array(w, 3 * nr);
    for (size_t i = 0, k = 0; k < nr; i++) {
        if (!region_shared(te, &st->regions[i]))
            continue;
        mc_mp_write_uint(w, st->regions[i].id);
        mc_mp_write_uint(w, (uint64_t)(uintptr_t)st->regions[i].m.base);
        mc_mp_write_uint(w, st->regions[i].m.len);
        k++;
    }
    pthread_mutex_unlock(&st->mu);
}

static void read_cstr(mc_mp_reader_t *r, char *dst, size_t room)
{
    uint32_t len = 0;
    const char *s = mc_mp_read_str(r, &len);
    if (r->err == MC_OK && len < room) {
        memcpy(dst, s, len);
        dst[len] = '\0';
    } else if (r->err == MC_OK) {
        r->err = MC_ERR_PROTOCOL;
    }
}

static mc_status_t shm_desc_decode(mc_te_t *te, mc_mp_reader_t *r, void **out)
{
    (void)te;
    shm_peer_t *p = MC_NEW(shm_peer_t);
    if (p == NULL) {
        r->err = MC_ERR_NOMEM;
        return MC_ERR_NOMEM;
    }
    uint32_t nf = mc_mp_read_map(r);
    for (uint32_t f = 0; f < nf && r->err == MC_OK; f++) {
        switch (mc_mp_read_uint(r)) {
        case MC_F_HOST:
            read_cstr(r, p->host, sizeof(p->host));
            break;
        case MC_F_BOOT_ID:
            read_cstr(r, p->boot, sizeof(p->boot));
            break;
        case MC_F_SOCKET:
            read_cstr(r, p->sock, sizeof(p->sock));
            break;
        case MC_F_REGIONS: {
            uint32_t cnt = mc_mp_read_array(r);
            if (cnt % 3 != 0 || cnt / 3 > SHM_MAX_REGIONS) {
                r->err = MC_ERR_PROTOCOL;
                break;
            }
            p->nreg = cnt / 3;
            for (unsigned i = 0; i < p->nreg && r->err == MC_OK; i++) {
                p->reg[i].id = mc_mp_read_uint(r);
                p->reg[i].addr = mc_mp_read_uint(r);
                p->reg[i].len = mc_mp_read_uint(r);
                if (p->reg[i].len == 0 || p->reg[i].addr + p->reg[i].len < p->reg[i].addr)
                    r->err = MC_ERR_PROTOCOL;
            }
            break;
        }
        default:
            mc_mp_skip(r);
            break;
        }
    }
    if (r->err != MC_OK) {
        mc_free(p);
        return MC_ERR_MALFORMED;
    }
    if (p->sock[0] == '\0')
        p->nreg = 0; /* shm off at the owner */
    *out = p;
    return MC_OK;
}

static void shm_peer_free(void *p)
{
    mc_free(p);
}

/* ---------------------------------------------------------- life */

static void state_free(shm_state_t *st)
{
    for (size_t i = 0; i < st->nregions; i++)
        mc_shm_destroy(&st->regions[i].m);
    mc_free(st->regions);
    mc_shm_destroy(&st->ranges_mem);
    if (st->lfd >= 0)
        close(st->lfd);
    if (st->wake[0] >= 0)
        close(st->wake[0]);
    if (st->wake[1] >= 0)
        close(st->wake[1]);
    mc_free(st->workers);
    pthread_mutex_destroy(&st->mu);
    pthread_mutex_destroy(&st->jmu);
    pthread_cond_destroy(&st->jcv);
    pthread_mutex_destroy(&st->qmu);
    pthread_cond_destroy(&st->qcv);
    mc_free(st);
}

static void stop_threads(shm_state_t *st)
{
    atomic_store(&st->stop, 1);
    if (st->server_up) {
        ssize_t w = write(st->wake[1], "x", 1);
        (void)w;
        pthread_join(st->server, NULL);
        st->server_up = 0;
    }
    if (st->attacher_up) {
        pthread_mutex_lock(&st->jmu);
        pthread_cond_broadcast(&st->jcv);
        pthread_mutex_unlock(&st->jmu);
        pthread_join(st->attacher, NULL);
        st->attacher_up = 0;
    }
    /* attaches that will not happen now: their waiters are told */
    pthread_mutex_lock(&st->jmu);
    shm_seg_t *q = st->jobs;
    st->jobs = st->jobs_tail = NULL;
    pthread_mutex_unlock(&st->jmu);
    while (q != NULL) {
        shm_seg_t *next = q->next_job;
        pthread_mutex_lock(&q->mu);
        q->queued = 0;
        if (q->state == SS_ATTACHING)
            set_state(q, SS_FAILED);
        te_waiter_t *w = q->waiters;
        q->waiters = NULL;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        waiters_run(w);
        q = next;
    }
    pthread_mutex_lock(&st->qmu);
    pthread_cond_broadcast(&st->qcv);
    pthread_mutex_unlock(&st->qmu);
    for (unsigned i = 0; i < st->nworkers; i++)
        pthread_join(st->workers[i], NULL);
    st->nworkers = 0;
}

/* Serving: the socket, the range table, the threads. */
static mc_status_t serve_start(shm_state_t *st)
{
    mc_te_t *te = st->te;
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = mc_now_ns();
    snprintf(st->sock, sizeof(st->sock), "mooncake-te-%d-%llu-%016llx", (int)getpid(),
             (unsigned long long)te->uid, (unsigned long long)rnd);
    mc_status_t rc = mc_shm_create("mooncake-ranges", sizeof(shm_ranges_t), 0, &st->ranges_mem);
    if (rc != MC_OK)
        return rc;
    st->ranges = st->ranges_mem.base;
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    int merr = pthread_mutex_init(&st->ranges->alive, &ma);
    pthread_mutexattr_destroy(&ma);
    if (merr != 0)
        return MC_ERR_INTERNAL_ERROR;
    if ((rc = mc_unix_listen(st->sock, &st->lfd)) != MC_OK)
        return rc;
    if (pipe2(st->wake, O_CLOEXEC) != 0)
        return MC_ERR_SOCKET;
    if (pthread_create(&st->server, NULL, server_main, st) != 0)
        return MC_ERR_INTERNAL_ERROR;
    st->server_up = 1;
    if (pthread_create(&st->attacher, NULL, attach_main, st) != 0)
        return MC_ERR_INTERNAL_ERROR;
    st->attacher_up = 1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned nw = te->o.shm_threads ? te->o.shm_threads : (ncpu > 4 ? 4 : (unsigned)ncpu);
    if (nw > 64)
        nw = 64;
    st->workers = mc_calloc(nw ? nw : 1, sizeof(pthread_t));
    if (st->workers == NULL)
        return MC_ERR_NOMEM;
    for (unsigned i = 0; i < nw; i++) {
        if (pthread_create(&st->workers[i], NULL, worker_main, st) != 0)
            break;
        st->nworkers = i + 1;
    }
    return MC_OK;
}

static mc_status_t shm_install(mc_te_t *te)
{
    if (ST(te) != NULL)
        return MC_OK;
    shm_state_t *st = MC_NEW(shm_state_t);
    if (st == NULL)
        return MC_ERR_NOMEM;
    st->te = te;
    st->lfd = st->wake[0] = st->wake[1] = -1;
    st->ranges_mem.fd = -1;
    st->group = (gid_t)-1;
    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->jmu, NULL);
    pthread_cond_init(&st->jcv, NULL);
    pthread_mutex_init(&st->qmu, NULL);
    pthread_cond_init(&st->qcv, NULL);
    mc_host_identity(st->host, sizeof(st->host), st->boot, sizeof(st->boot));
    mc_status_t rc = MC_OK;
    if (te->o.shm_group != NULL && te->o.shm_group[0] != '\0' &&
        (rc = mc_group_id(te->o.shm_group, &st->group)) != MC_OK) {
        state_free(st);
        return rc;
    }
    st->on = !te->o.shm_off;
    if (st->on && (rc = serve_start(st)) != MC_OK) {
        MC_WARN(SHM, "engine '%s': shared memory off: %s", te->name ? te->name : "?",
                mc_status_str(rc));
        stop_threads(st);
        state_free(st);
        return rc;
    }
    te->tp[TE_TP_SHM] = st;
    return MC_OK;
}

static void shm_shutdown(mc_te_t *te)
{
    shm_state_t *st = ST(te);
    if (st != NULL)
        stop_threads(st); /* queued slices are canceled by the workers */
}

static void shm_free(mc_te_t *te)
{
    shm_state_t *st = ST(te);
    if (st == NULL)
        return;
    te->tp[TE_TP_SHM] = NULL;
    state_free(st);
}

const te_transport_ops_t te_shm_ops = {
    .name = "shm",
    .flags = TE_TP_AUTO,
    .desc_key = MC_F_SHM,
    .install = shm_install,
    .shutdown = shm_shutdown,
    .free = shm_free,
    .reg_bufs = shm_reg_bufs,
    .dereg_buf = shm_dereg_buf,
    .desc_encode = shm_desc_encode,
    .desc_decode = shm_desc_decode,
    .peer_free = shm_peer_free,
    .seg_described = shm_seg_described,
    .seg_wait = shm_seg_wait,
    .seg_pending = shm_seg_pending,
    .seg_release = shm_seg_release,
    .usable = shm_usable,
    .slice_size = SHM_SLICE,
    .post = shm_post,
};

/* ------------------------------------------------------ public API */

_Static_assert(MC_TE_HUGE_NONE == MC_SHM_NORMAL && MC_TE_HUGE_HUGETLB == MC_SHM_HUGETLB &&
                   MC_TE_HUGE_THP == MC_SHM_THP,
               "mc_te_alloc_shared passes huge to mc_shm_create as it is");

mc_status_t mc_te_alloc_shared(mc_te_t *te, size_t len, int huge, void **out)
{
    shm_state_t *st = ST(te);
    if (te == NULL || len == 0 || out == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (huge != MC_TE_HUGE_NONE && huge != MC_TE_HUGE_HUGETLB && huge != MC_TE_HUGE_THP) {
        MC_ERROR(SHM, "mc_te_alloc_shared: huge is %d: MC_TE_HUGE_NONE, _HUGETLB or _THP", huge);
        return MC_ERR_INVALID_ARGUMENT;
    }
    if (st == NULL) {
        MC_ERROR(SHM, "mc_te_alloc_shared: the shm transport is not installed on '%s'", te->name);
        return MC_ERR_NOT_SUPPORTED;
    }
    shm_region_t r = {0};
    if (getrandom(&r.id, sizeof(r.id), 0) != (ssize_t)sizeof(r.id))
        r.id = mc_now_ns();
    r.id |= 1;
    mc_status_t rc = mc_shm_create("mooncake-segment", len, huge, &r.m);
    if (rc != MC_OK)
        return rc;
    pthread_mutex_lock(&st->mu);
    if (st->nregions == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 4;
        shm_region_t *nr = mc_realloc(st->regions, cap * sizeof(*nr));
        if (nr == NULL) {
            pthread_mutex_unlock(&st->mu);
            mc_shm_destroy(&r.m);
            return MC_ERR_NOMEM;
        }
        st->regions = nr;
        st->cap = cap;
    }
    st->regions[st->nregions++] = r;
    pthread_mutex_unlock(&st->mu);
    *out = r.m.base;
    return MC_OK;
}

mc_status_t mc_te_free_shared(mc_te_t *te, void *addr)
{
    shm_state_t *st = te != NULL ? ST(te) : NULL;
    if (st == NULL || addr == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < st->nregions; i++) {
        if (st->regions[i].m.base == addr) {
            mc_shm_t m = st->regions[i].m;
            st->regions[i] = st->regions[--st->nregions];
            pthread_mutex_unlock(&st->mu);
            mc_shm_destroy(&m); /* peers' mappings keep the memory until they drop them */
            return MC_OK;
        }
    }
    pthread_mutex_unlock(&st->mu);
    return MC_ERR_INVALID_ARGUMENT;
}

uint64_t te_shm_bytes(mc_te_t *te)
{
    shm_state_t *st = ST(te);
    return st != NULL ? atomic_load(&st->bytes) : 0;
}

int te_shm_ready(mc_te_t *te, mc_te_segment_t id)
{
    te_seg_t *seg = te_seg_get(te, id);
    shm_seg_t *ss = seg != NULL ? seg->tp_state[TE_TP_SHM] : NULL;
    if (ss == NULL)
        return 0;
    pthread_mutex_lock(&ss->mu);
    int ok = ss->state == SS_READY;
    pthread_mutex_unlock(&ss->mu);
    return ok;
}
