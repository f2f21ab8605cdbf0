/*
 * service.c - the store service of co-located clients (service.h,
 * svc_proto.h).
 *
 * Threads:
 *  - the unix thread: accepts on "@mooncake_client_<port>.sock", checks
 *    the peer, maps its memfd and registers it with the store (a session),
 *    and watches every session's connection: its end of file ends the
 *    session;
 *  - the service reactor: the RPC server of the control port. A handler
 *    checks the session and token, copies the body into a job and queues
 *    it; the reply is posted back to the request's reactor;
 *  - the workers: decode a job, check every (offset, length) against the
 *    session's memory, run the store's sync call on the mapped addresses,
 *    encode the answer. They wait in one epoll set for both kinds of work:
 *    a job the reactor queued (an eventfd counts them), and a call on a
 *    client's call channel (svc_proto.h; EPOLLONESHOT: one worker at a
 *    time per channel), which the worker reads, runs and answers itself:
 *    no reactor between the client's thread and ours. Each worker has a
 *    master connection of its own (store_mconn_t): a put (PutStart, the
 *    copy into the node's segment, PutEnd) and a get (GetReplicaList, the
 *    copy out) run whole on the worker, no reactor between it and the
 *    master either; what that path does not cover (replicas on other
 *    nodes, a persistent tier, batches) goes through the node's client.
 *
 * Sessions are reference counted: one reference while the session is open
 * (its connection), one per call in flight. When a client dies, its calls
 * not yet begun are dropped; a put already running finishes from the
 * still-mapped memory (its bytes were all there when it was called, so the
 * object is whole) or fails, and the store's put revokes what it started.
 * The last reference unregisters and unmaps the client's memory, so a client
 * killed in the middle of a put leaves nothing behind.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "reactor/reactor.h"
#include "rpc/fields.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/client_int.h"
#include "store/service.h"
#include "store/svc_proto.h"
#include "util/auth.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/shm.h"
#include "util/time.h"

#define SVC_IO_TIMEOUT_US 2000000u /* the hello/welcome exchange */
#define SVC_MAX_KEYS 65536u        /* keys in one batch call */
#define SVC_MAX_REGIONS_LEN (1ull << 40)
#define SVC_JOB_BODY 16384u /* bodies up to this reuse cached jobs (no malloc per call) */
#define SVC_JOB_CACHE 64u   /* cached jobs kept */

typedef struct svc_session {
    struct svc_session *next; /* svc->sessions (while open) */
    uint64_t id, token;
    int conn;      /* the unix connection; -1 once closed */
    uint8_t *base; /* region 0: the hello's memfd, at offset 0 */
    uint64_t len;
    /* regions by offset (0: base/len; more from shares, appended by the
     * unix thread: entries are complete before nreg counts them) */
    struct svc_region {
        uint64_t off, len;
        uint8_t *base;
    } reg[SVC_MAX_REGIONS];
    _Atomic uint32_t nreg;
    _Atomic int refs;
    _Atomic int closed; /* its client is gone: calls not yet started are dropped */
    pid_t pid;
    uid_t uid;
} svc_session_t;

typedef struct svc_job svc_job_t;

/* A call channel (svc_proto.h): in the workers' epoll set; served by one
 * worker at a time (EPOLLONESHOT), closed by the worker that sees its end. */
typedef struct svc_chan {
    struct svc_chan *next; /* svc->chans */
    int fd;
    pid_t pid;
    uint64_t session; /* the session it was opened for (logs) */
} svc_chan_t;

struct mc_store_service {
    mc_store_t *store;
    mc_store_service_opts_t o;
    gid_t group;
    char sock[64], bind[64], name[256];
    /* unix thread */
    int lfd, wake[2];
    pthread_t unix_th;
    int unix_up;
    /* sessions */
    pthread_mutex_t mu;
    svc_session_t *sessions;
    unsigned nopen;
    uint64_t total;
    /* control port */
    mc_reactor_group_t *g;
    mc_rpc_server_t *srv;
    mc_auth_key_t key; /* the cluster's secret, when has_key */
    int has_key;
    /* workers: their epoll set (qev: jobs queued, an EFD_SEMAPHORE count;
     * stopev: stop, never read; the call channels) */
    int ep, qev, stopev;
    pthread_mutex_t qmu;
    svc_job_t *qhead, *qtail;
    svc_chan_t *chans; /* under mu */
    unsigned nchans;
    pthread_t *workers;
    unsigned nworkers;
    _Atomic int stop;
    _Atomic long inflight; /* jobs queued, running or replying */
    /* jobs with room for SVC_JOB_BODY, kept for the next calls */
    pthread_mutex_t cmu;
    svc_job_t *cache;
    unsigned ncache;
};

struct svc_job {
    mc_reactor_msg_t msg; /* the reply, on the request's reactor */
    size_t room;          /* bytes of body[] */
    svc_job_t *next;
    mc_store_service_t *svc;
    mc_rpc_req_t *req;
    uint16_t method;
    svc_session_t *sess;
    mc_status_t st;
    mc_buf_t reply;
    size_t blen;
    uint8_t body[];
};

void mc_store_service_opts_init(mc_store_service_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->bind = "127.0.0.1";
    o->port = SVC_DEFAULT_PORT;
    o->threads = 4;
    o->max_sessions = 256;
    o->prefer_local = 1;
}

/* ---------------------------------------------------------------- jobs */

/* A job with room for blen bytes of body: a cached one when it fits. */
static svc_job_t *job_get(mc_store_service_t *svc, size_t blen)
{
    svc_job_t *j = NULL;
    if (blen <= SVC_JOB_BODY) {
        pthread_mutex_lock(&svc->cmu);
        if ((j = svc->cache) != NULL) {
            svc->cache = j->next;
            svc->ncache--;
        }
        pthread_mutex_unlock(&svc->cmu);
    }
    if (j == NULL) {
        size_t room = blen <= SVC_JOB_BODY ? SVC_JOB_BODY : blen;
        if ((j = mc_malloc(sizeof(*j) + room)) == NULL)
            return NULL;
        j->room = room;
        j->reply = (mc_buf_t)MC_BUF_INIT;
    }
    size_t room = j->room;
    mc_buf_t reply = j->reply; /* its buffer is kept too */
    memset(j, 0, sizeof(*j));
    j->room = room;
    j->reply = reply;
    mc_buf_reset(&j->reply);
    return j;
}

static void job_put(mc_store_service_t *svc, svc_job_t *j)
{
    if (j->room == SVC_JOB_BODY && mc_buf_used(&j->reply) <= SVC_JOB_BODY) {
        pthread_mutex_lock(&svc->cmu);
        if (svc->ncache < SVC_JOB_CACHE) {
            j->next = svc->cache;
            svc->cache = j;
            svc->ncache++;
            j = NULL;
        }
        pthread_mutex_unlock(&svc->cmu);
    }
    if (j != NULL) {
        mc_buf_fini(&j->reply);
        mc_free(j);
    }
}

/* ------------------------------------------------------------ sessions */

static void session_put(mc_store_service_t *svc, svc_session_t *ss)
{
    if (atomic_fetch_sub(&ss->refs, 1) != 1)
        return;
    /* no call uses its memory any more */
    uint32_t nreg = atomic_load(&ss->nreg);
    for (uint32_t i = 0; i < nreg; i++) {
        mc_store_unregister_buffer(svc->store, ss->reg[i].base);
        munmap(ss->reg[i].base, ss->reg[i].len);
    }
    MC_DEBUG(CLIENT, "store service: session %llu (pid %d) ended, %llu bytes unmapped",
             (unsigned long long)ss->id, (int)ss->pid, (unsigned long long)ss->len);
    mc_free(ss);
}

/* The open session id with this token, with a reference taken; NULL when
 * none (unknown id, or a wrong token: both look the same to the caller). */
static svc_session_t *session_get(mc_store_service_t *svc, uint64_t id, uint64_t token)
{
    pthread_mutex_lock(&svc->mu);
    svc_session_t *ss = svc->sessions;
    while (ss != NULL && ss->id != id)
        ss = ss->next;
    if (ss != NULL && ss->token == token)
        atomic_fetch_add(&ss->refs, 1);
    else
        ss = NULL;
    pthread_mutex_unlock(&svc->mu);
    return ss;
}

/* Out of the table; the open reference dropped. */
static void session_close(mc_store_service_t *svc, svc_session_t *ss)
{
    pthread_mutex_lock(&svc->mu);
    for (svc_session_t **pp = &svc->sessions; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == ss) {
            *pp = ss->next;
            svc->nopen--;
            break;
        }
    }
    pthread_mutex_unlock(&svc->mu);
    atomic_store(&ss->closed, 1);
    if (ss->conn >= 0)
        close(ss->conn);
    ss->conn = -1;
    session_put(svc, ss);
}

static void welcome(int conn, mc_status_t st, uint64_t id, uint64_t token, const char *text)
{
    svc_welcome_t w;
    memset(&w, 0, sizeof(w));
    w.magic = SVC_MAGIC;
    w.status = st;
    w.session = id;
    w.token = token;
    snprintf(w.name, sizeof(w.name), "%s", text);
    mc_unix_send(conn, &w, sizeof(w), -1);
}

static void chan_open(mc_store_service_t *svc, int conn, const svc_channel_t *m, pid_t pid);

/* A new connection: hello + memfd -> a session, or a refusal (said to the
 * client and logged). The session, or NULL. A call channel's first message
 * instead: the channel is opened (or refused) and *taken says that conn is
 * no longer the caller's. */
static svc_session_t *session_open(mc_store_service_t *svc, int conn, int *taken)
{
    char why[256];
    pid_t pid = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    mc_unix_peer(conn, &pid, &uid, &gid);
    union {
        svc_hello_t h;
        svc_channel_t ch;
    } first;
    svc_hello_t h;
    size_t got = 0;
    int fd = -1;
    *taken = 0;
    mc_status_t st = mc_unix_recv(conn, &first, sizeof(first), &got, &fd);
    if (st == MC_OK && got == sizeof(first.ch) && first.ch.magic == SVC_MAGIC &&
        first.ch.op == SVC_OP_CHANNEL && fd < 0) {
        *taken = 1;
        chan_open(svc, conn, &first.ch, pid);
        return NULL;
    }
    memcpy(&h, &first, sizeof(h));
    if (st != MC_OK || got != sizeof(h) || h.magic != SVC_MAGIC || h.version != SVC_VERSION ||
        fd < 0 || h.len == 0 || h.len > SVC_MAX_REGIONS_LEN) {
        MC_WARN(CLIENT, "store service: process %d sent no valid hello (%s)", (int)pid,
                st != MC_OK ? mc_status_str(st) : "bad message or no memfd attached");
        if (fd >= 0)
            close(fd);
        welcome(conn, MC_ERR_INVALID_PARAMS, 0, 0, "bad hello");
        return NULL;
    }
    /* (after the hello: the client reads our answer only once it sent it) */
    if (!mc_unix_peer_allowed(conn, svc->group, why, sizeof(why))) {
        close(fd);
        MC_WARN(CLIENT, "store service: refused a co-located client: %s", why);
        welcome(conn, MC_ERR_ILLEGAL_CLIENT, 0, 0, why);
        return NULL;
    }
    pthread_mutex_lock(&svc->mu);
    int full = svc->nopen >= svc->o.max_sessions;
    pthread_mutex_unlock(&svc->mu);
    if (full) {
        close(fd);
        snprintf(why, sizeof(why), "%u co-located clients connected already (service.max_sessions)",
                 svc->o.max_sessions);
        MC_WARN(CLIENT, "store service: refused process %d: %s", (int)pid, why);
        welcome(conn, MC_ERR_LIMIT, 0, 0, why);
        return NULL;
    }
    void *base = NULL;
    st = mc_shm_map(fd, h.len, 1, &base);
    close(fd);
    if (st != MC_OK) {
        welcome(conn, st, 0, 0, "cannot map the shared memory");
        return NULL;
    }
    /* registered: the store moves its bytes straight in and out (no staging) */
    st = mc_store_register_buffer(svc->store, base, h.len);
    if (st != MC_OK) {
        MC_WARN(CLIENT, "store service: cannot register process %d's %llu bytes: %s", (int)pid,
                (unsigned long long)h.len, mc_status_str(st));
        munmap(base, h.len);
        welcome(conn, st, 0, 0, "cannot register the shared memory");
        return NULL;
    }
    svc_session_t *ss = MC_NEW(svc_session_t);
    if (ss == NULL) {
        mc_store_unregister_buffer(svc->store, base);
        munmap(base, h.len);
        welcome(conn, MC_ERR_NOMEM, 0, 0, "out of memory");
        return NULL;
    }
    ss->conn = conn;
    ss->base = base;
    ss->len = h.len;
    ss->reg[0] = (struct svc_region){0, h.len, base};
    atomic_store(&ss->nreg, 1);
    ss->pid = pid;
    ss->uid = uid;
    atomic_store(&ss->refs, 1);
    if (getrandom(&ss->token, sizeof(ss->token), 0) != (ssize_t)sizeof(ss->token))
        ss->token = mc_now_ns() ^ ((uint64_t)pid << 32);
    pthread_mutex_lock(&svc->mu);
    ss->id = ++svc->total;
    ss->next = svc->sessions;
    svc->sessions = ss;
    svc->nopen++;
    pthread_mutex_unlock(&svc->mu);
    MC_INFO(CLIENT, "store service: session %llu for process %d (uid %u): %llu bytes shared",
            (unsigned long long)ss->id, (int)pid, (unsigned)uid, (unsigned long long)h.len);
    welcome(conn, MC_OK, ss->id, ss->token, svc->name);
    return ss;
}

/* A message on a session's connection: a share (more memory, answered), or
 * its end. 0 when the session goes on, -1 when it is over (end of file, an
 * error, or a message that is not a share). */
static int session_input(mc_store_service_t *svc, svc_session_t *ss)
{
    svc_share_t m;
    size_t got = 0;
    int fd = -1;
    mc_status_t st = mc_unix_recv(ss->conn, &m, sizeof(m), &got, &fd);
    if (st != MC_OK || got != sizeof(m) || m.magic != SVC_MAGIC || m.op != SVC_OP_SHARE) {
        if (fd >= 0)
            close(fd);
        if (st == MC_OK && got > 0)
            MC_WARN(CLIENT,
                    "store service: session %llu (pid %d) sent a message that is not a "
                    "share: its session ends",
                    (unsigned long long)ss->id, (int)ss->pid);
        return -1;
    }
    uint32_t n = atomic_load(&ss->nreg);
    const struct svc_region *last = &ss->reg[n - 1];
    char why[200] = "";
    if (fd < 0)
        snprintf(why, sizeof(why), "no memfd attached");
    else if (n >= SVC_MAX_REGIONS)
        snprintf(why, sizeof(why), "%u regions shared already (at most %u per client)", n,
                 SVC_MAX_REGIONS);
    else if (m.len == 0 || m.len > SVC_MAX_REGIONS_LEN || m.off < last->off + last->len ||
             m.off + m.len < m.off)
        snprintf(why, sizeof(why), "bad region %llu+%llu (past %llu expected)",
                 (unsigned long long)m.off, (unsigned long long)m.len,
                 (unsigned long long)(last->off + last->len));
    void *base = NULL;
    if (why[0] == '\0' && (st = mc_shm_map(fd, m.len, 1, &base)) != MC_OK)
        snprintf(why, sizeof(why), "cannot map it: %s", mc_status_str(st));
    if (fd >= 0)
        close(fd);
    if (why[0] == '\0' && (st = mc_store_register_buffer(svc->store, base, m.len)) != MC_OK) {
        snprintf(why, sizeof(why), "cannot register it: %s", mc_status_str(st));
        munmap(base, m.len);
    }
    if (why[0] != '\0') {
        MC_WARN(CLIENT, "store service: refused memory session %llu (pid %d) shared: %s",
                (unsigned long long)ss->id, (int)ss->pid, why);
        welcome(ss->conn, st != MC_OK ? st : MC_ERR_INVALID_PARAMS, ss->id, 0, why);
        return 0;
    }
    ss->reg[n] = (struct svc_region){m.off, m.len, base};
    atomic_store(&ss->nreg, n + 1);
    MC_INFO(CLIENT, "store service: session %llu (pid %d) shared %llu more bytes at offset %llu",
            (unsigned long long)ss->id, (int)ss->pid, (unsigned long long)m.len,
            (unsigned long long)m.off);
    welcome(ss->conn, MC_OK, ss->id, 0, svc->name);
    return 0;
}

static void *unix_main(void *arg)
{
    mc_store_service_t *svc = arg;
    size_t cap = svc->o.max_sessions + 8;
    struct pollfd *pf = mc_calloc(cap + 2, sizeof(*pf));
    svc_session_t **who = mc_calloc(cap + 2, sizeof(*who));
    if (pf == NULL || who == NULL) {
        MC_ERROR(CLIENT, "store service: out of memory for the unix socket's thread");
        mc_free(pf);
        mc_free(who);
        return NULL;
    }
    size_t n = 2;
    pf[0] = (struct pollfd){.fd = svc->wake[0], .events = POLLIN};
    pf[1] = (struct pollfd){.fd = svc->lfd, .events = POLLIN};
    while (!atomic_load(&svc->stop)) {
        if (poll(pf, n, -1) < 0) {
            if (errno == EINTR)
                continue;
            MC_ERROR(CLIENT, "store service: poll: %s", strerror(errno));
            break;
        }
        if (pf[0].revents)
            break;
        for (size_t i = 2; i < n; i++) {
            if (pf[i].revents == 0)
                continue;
            /* after the hello a client sends only shares: anything else,
             * or its end, ends the session (a misbehaving client ends its
             * own) */
            if ((pf[i].revents & POLLIN) && session_input(svc, who[i]) == 0)
                continue;
            session_close(svc, who[i]);
            pf[i] = pf[n - 1];
            who[i] = who[n - 1];
            n--;
            i--;
        }
        if (pf[1].revents & POLLIN) {
            int c = accept4(svc->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (c < 0)
                continue;
            struct timeval tv = {.tv_sec = SVC_IO_TIMEOUT_US / 1000000};
            setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
            setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
            int taken = 0;
            svc_session_t *ss = n < cap + 2 ? session_open(svc, c, &taken) : NULL;
            if (ss == NULL) {
                if (!taken)
                    close(c);
                continue;
            }
            pf[n] = (struct pollfd){.fd = c, .events = POLLIN};
            who[n++] = ss;
        }
    }
    for (size_t i = 2; i < n; i++)
        session_close(svc, who[i]);
    mc_free(pf);
    mc_free(who);
    return NULL;
}

/* ------------------------------------------------------------- decoding */

typedef struct svc_args {
    const uint8_t *key;
    uint32_t klen;
    mc_slice_t *keys; /* KEYS, pointing into the body */
    uint32_t nkeys;
    uint64_t *parts; /* PARTS: offset, length pairs */
    uint32_t nparts; /* pairs */
    uint64_t *src;   /* SRC (GET_RANGES): where each pair's bytes start in the value */
    uint32_t nsrc;
    int force;
    const char *regex;
    uint32_t rlen;
    mc_replicate_config_t cfg;
    int has_cfg;
    int upsert; /* CONFIG field 4: replace an existing object */
    const char *pref[16];
} svc_args_t;

static void args_free(svc_args_t *a)
{
    mc_free(a->keys);
    mc_free(a->parts);
    mc_free(a->src);
}

static void read_config(mc_mp_reader_t *r, svc_args_t *a)
{
    mc_replicate_config_init(&a->cfg);
    a->has_cfg = 1;
    uint32_t nf = mc_mp_read_map(r);
    for (uint32_t f = 0; f < nf && r->err == MC_OK; f++) {
        switch (mc_mp_read_uint(r)) {
        case 1:
            a->cfg.replica_num = (uint32_t)mc_mp_read_uint(r);
            break;
        case 2:
            a->cfg.with_soft_pin = mc_mp_read_bool(r);
            break;
        case 4:
            a->upsert = mc_mp_read_bool(r);
            break;
        case 5:
            a->cfg.with_hard_pin = mc_mp_read_bool(r);
            break;
        case 6: { /* out of range stays out of range: the put refuses it */
            uint64_t v = mc_mp_read_uint(r);
            a->cfg.soft_pin_action = v > INT_MAX ? INT_MAX : (int)v;
            break;
        }
        case 7:
            a->cfg.has_soft_pin_ttl = 1;
            a->cfg.soft_pin_ttl_ms = mc_mp_read_uint(r);
            break;
        case 3: {
            uint32_t np = mc_mp_read_array(r);
            if (np > 16) {
                r->err = MC_ERR_PROTOCOL;
                break;
            }
            /* names must be NUL-terminated strings for the store's API:
             * they are copied into the key buffer area below */
            for (uint32_t i = 0; i < np && r->err == MC_OK; i++) {
                uint32_t len = 0;
                const char *s = mc_mp_read_str(r, &len);
                char *c = r->err == MC_OK ? mc_strndup(s, len) : NULL;
                if (c == NULL) {
                    r->err = MC_ERR_NOMEM;
                    break;
                }
                a->pref[a->cfg.n_preferred++] = c;
            }
            a->cfg.preferred_segments = a->pref;
            break;
        }
        default:
            mc_mp_skip(r);
            break;
        }
    }
}

/* A list of unsigned integers (PARTS, SRC) into *out (allocated): 1..max
 * of them, a multiple of unit, the field once; r->err says why not. */
static mc_status_t read_uints(mc_mp_reader_t *r, uint64_t **out, uint32_t *n, uint32_t unit,
                              uint32_t max)
{
    uint32_t k = mc_mp_read_array(r);
    if (r->err != MC_OK || k == 0 || k % unit != 0 || k > max || *out != NULL)
        return r->err = r->err != MC_OK ? r->err : MC_ERR_PROTOCOL;
    if ((*out = mc_calloc(k, sizeof(**out))) == NULL)
        return r->err = MC_ERR_NOMEM;
    for (uint32_t i = 0; i < k && r->err == MC_OK; i++)
        (*out)[i] = mc_mp_read_uint(r);
    *n = k;
    return r->err;
}

static mc_status_t args_decode(const uint8_t *body, size_t blen, svc_args_t *a)
{
    mc_mp_reader_t r;
    memset(a, 0, sizeof(*a));
    mc_mp_reader_init(&r, body, blen);
    uint32_t nf = blen ? mc_mp_read_map(&r) : 0;
    for (uint32_t f = 0; f < nf && r.err == MC_OK; f++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_KEY:
            a->key = mc_mp_read_bin(&r, &a->klen);
            break;
        case MC_F_KEYS: {
            uint32_t n = mc_mp_read_array(&r);
            if (n == 0 || n > SVC_MAX_KEYS || a->keys != NULL) {
                r.err = MC_ERR_PROTOCOL;
                break;
            }
            a->keys = mc_calloc(n, sizeof(*a->keys));
            if (a->keys == NULL) {
                r.err = MC_ERR_NOMEM;
                break;
            }
            for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
                uint32_t kl = 0;
                a->keys[i].ptr = (void *)mc_mp_read_bin(&r, &kl);
                a->keys[i].len = kl;
            }
            a->nkeys = n;
            break;
        }
        case MC_F_SVC_PARTS:
            if (read_uints(&r, &a->parts, &a->nparts, 2, 2 * SVC_MAX_PARTS) == MC_OK)
                a->nparts /= 2;
            break;
        case MC_F_SVC_SRC:
            read_uints(&r, &a->src, &a->nsrc, 1, SVC_MAX_PARTS);
            break;
        case MC_F_FORCE:
            a->force = mc_mp_read_bool(&r);
            break;
        case MC_F_REGEX:
            a->regex = mc_mp_read_str(&r, &a->rlen);
            break;
        case MC_F_CONFIG:
            read_config(&r, a);
            break;
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    return r.err == MC_OK ? MC_OK : MC_ERR_INVALID_PARAMS;
}

/* The address of [off, off + len) when it lies inside one region of the
 * session's memory; NULL when not. */
static uint8_t *region_ptr(const svc_session_t *ss, uint64_t off, uint64_t len)
{
    if (len == 0 || off + len < off)
        return NULL;
    uint32_t n = atomic_load(&ss->nreg);
    for (uint32_t i = 0; i < n; i++) {
        const struct svc_region *g = &ss->reg[i];
        if (off >= g->off && off + len <= g->off + g->len)
            return g->base + (off - g->off);
    }
    return NULL;
}

/* Every part inside one region of the session's memory (no overflow, no
 * empty part); MC_OK or INVALID_PARAMS, logged with the first offender. */
static mc_status_t parts_check(const svc_session_t *ss, const svc_args_t *a)
{
    for (uint32_t i = 0; i < a->nparts; i++) {
        uint64_t off = a->parts[2 * i], len = a->parts[2 * i + 1];
        if (region_ptr(ss, off, len) == NULL) {
            MC_WARN(CLIENT,
                    "store service: session %llu (pid %d) named bytes %llu+%llu, outside the "
                    "shared memory of its %u region(s): refused, nothing touched",
                    (unsigned long long)ss->id, (int)ss->pid, (unsigned long long)off,
                    (unsigned long long)len, (unsigned)atomic_load(&ss->nreg));
            return MC_ERR_INVALID_PARAMS;
        }
    }
    return MC_OK;
}

static void *part_ptr(const svc_session_t *ss, const svc_args_t *a, uint32_t i)
{
    return region_ptr(ss, a->parts[2 * i], a->parts[2 * i + 1]); /* checked before */
}

/* ------------------------------------------------------------- the calls */

/* What a call runs with: the service, the caller's session (a reference
 * held for the call), the method. */
typedef struct svc_ctx {
    mc_store_service_t *svc;
    svc_session_t *sess;
    uint16_t method;
    store_mconn_t *mc; /* the worker's master connection (NULL: none; calls go through r0) */
} svc_ctx_t;

/* Puts without preferred segments prefer ours (one service per host: the
 * host's data stays on the host). */
static const mc_replicate_config_t *put_config(mc_store_service_t *svc, svc_args_t *a,
                                               mc_replicate_config_t *tmp, const char **self)
{
    if (!a->has_cfg)
        mc_replicate_config_init(&a->cfg);
    *tmp = a->cfg;
    if (svc->o.prefer_local && tmp->n_preferred == 0) {
        *self = svc->name;
        tmp->preferred_segments = self;
        tmp->n_preferred = 1;
    }
    return tmp;
}

/* MC_RPC_SVC_PUT: a put (or upsert) of the parts in the session's memory. */
static mc_status_t call_put(const svc_ctx_t *j, svc_args_t *a, mc_mp_writer_t *w)
{
    mc_store_service_t *svc = j->svc;
    mc_store_t *s = svc->store;
    svc_session_t *ss = j->sess;
    mc_replicate_config_t tmp;
    const char *self = NULL;
    mc_status_t st;
    if (a->key == NULL || a->nparts == 0)
        return MC_ERR_INVALID_PARAMS;
    mc_slice_t parts[64];
    mc_slice_t *pp = a->nparts <= 64 ? parts : mc_calloc(a->nparts, sizeof(*pp));
    if (pp == NULL)
        return MC_ERR_NOMEM;
    for (uint32_t i = 0; i < a->nparts; i++) {
        pp[i].ptr = part_ptr(ss, a, i);
        pp[i].len = a->parts[2 * i + 1];
    }
    const mc_replicate_config_t *cfg = put_config(svc, a, &tmp, &self);
    /* on this thread with its own master connection (no reactor hop); a
     * put that is not for that path goes through the client's r0 */
    int done = 0;
    if (j->mc != NULL)
        st = store_put_direct(j->mc, a->key, a->klen, pp, a->nparts, cfg, a->upsert, &done);
    if (!done && a->upsert)
        st = a->nparts == 1 ? mc_store_upsert_from(s, a->key, a->klen, pp[0].ptr, pp[0].len, cfg)
                            : mc_store_upsert_parts(s, a->key, a->klen, pp, a->nparts, cfg);
    else if (!done)
        st = a->nparts == 1 ? mc_store_put_from(s, a->key, a->klen, pp[0].ptr, pp[0].len, cfg)
                            : mc_store_put_parts(s, a->key, a->klen, pp, a->nparts, cfg);
    if (pp != parts)
        mc_free(pp);
    mc_mp_write_map(w, 0);
    return st;
}

/* An answer of a status (or a count) per key or range: {STATUSES: [...]}. */
static void write_statuses(mc_mp_writer_t *w, const int64_t *res, uint32_t n)
{
    mc_mp_write_map(w, 1);
    mc_mp_write_uint(w, MC_F_STATUSES);
    mc_mp_write_array(w, n);
    for (uint32_t i = 0; i < n; i++)
        mc_mp_write_int(w, res[i]);
}

/* MC_RPC_SVC_BATCH_PUT / _GET: one buffer per key in the session's memory. */
static mc_status_t call_batch_rw(const svc_ctx_t *j, svc_args_t *a, mc_mp_writer_t *w)
{
    mc_store_service_t *svc = j->svc;
    mc_store_t *s = svc->store;
    svc_session_t *ss = j->sess;
    mc_replicate_config_t tmp;
    const char *self = NULL;
    mc_status_t st;
    if (a->nkeys == 0 || a->nparts != a->nkeys)
        return MC_ERR_INVALID_PARAMS;
    mc_slice_t *bufs = mc_calloc(a->nkeys, sizeof(*bufs));
    int64_t *res = mc_calloc(a->nkeys, sizeof(*res));
    if (bufs == NULL || res == NULL) {
        mc_free(bufs);
        mc_free(res);
        return MC_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < a->nkeys; i++) {
        bufs[i].ptr = part_ptr(ss, a, i);
        bufs[i].len = a->parts[2 * i + 1];
    }
    if (j->method == MC_RPC_SVC_BATCH_GET) {
        st = mc_store_batch_get(s, a->keys, bufs, a->nkeys, res);
    } else {
        mc_status_t *sts = (mc_status_t *)mc_calloc(a->nkeys, sizeof(*sts));
        const mc_replicate_config_t *cfg = put_config(svc, a, &tmp, &self);
        st = sts == NULL ? MC_ERR_NOMEM
             : a->upsert ? mc_store_batch_upsert(s, a->keys, bufs, a->nkeys, cfg, sts)
                         : mc_store_batch_put(s, a->keys, bufs, a->nkeys, cfg, sts);
        for (uint32_t i = 0; sts != NULL && i < a->nkeys; i++)
            res[i] = sts[i];
        mc_free(sts);
    }
    write_statuses(w, res, a->nkeys);
    mc_free(bufs);
    mc_free(res);
    return st;
}

/* MC_RPC_SVC_GET_RANGES: ranges of one value into the session's memory (one
 * SRC per PARTS pair); a status or the bytes read per range, as
 * mc_store_get_ranges gives them. */
static mc_status_t call_get_ranges(mc_store_t *s, const svc_session_t *ss, svc_args_t *a,
                                   mc_mp_writer_t *w)
{
    if (a->key == NULL || a->nparts == 0 || a->nsrc != a->nparts)
        return MC_ERR_INVALID_PARAMS;
    void **dst = mc_calloc(a->nparts, sizeof(*dst));
    uint64_t *len = mc_calloc(a->nparts, sizeof(*len));
    int64_t *res = mc_calloc(a->nparts, sizeof(*res));
    mc_status_t st = MC_ERR_NOMEM;
    if (dst != NULL && len != NULL && res != NULL) {
        for (uint32_t i = 0; i < a->nparts; i++) {
            dst[i] = part_ptr(ss, a, i);
            len[i] = a->parts[2 * i + 1];
        }
        st = mc_store_get_ranges(s, a->key, a->klen, a->nparts, a->src, dst, len, res);
        write_statuses(w, res, a->nparts);
    }
    mc_free(dst);
    mc_free(len);
    mc_free(res);
    return st;
}

/* MC_RPC_SVC_QUERY: the replicas of a key (at most 8 described). */
static mc_status_t call_query(mc_store_t *s, svc_args_t *a, mc_mp_writer_t *w)
{
    mc_status_t st;
    if (a->key == NULL)
        return MC_ERR_INVALID_PARAMS;
    mc_store_replica_t r[8];
    uint32_t n = 0;
    st = mc_store_query(s, a->key, a->klen, r, 8, &n);
    uint32_t k = n < 8 ? n : 8;
    mc_mp_write_map(w, 2);
    mc_mp_write_uint(w, MC_F_COUNT);
    mc_mp_write_uint(w, n);
    mc_mp_write_uint(w, MC_F_REPLICAS);
    mc_mp_write_array(w, st == MC_OK ? k : 0);
    for (uint32_t i = 0; st == MC_OK && i < k; i++) {
        mc_mp_write_map(w, 5);
        mc_mp_write_uint(w, MC_F_NAME);
        mc_mp_write_cstr(w, r[i].segment);
        mc_mp_write_uint(w, MC_F_ADDR);
        mc_mp_write_uint(w, r[i].address);
        mc_mp_write_uint(w, MC_F_SIZE);
        mc_mp_write_uint(w, r[i].size);
        mc_mp_write_uint(w, MC_F_STATUS);
        mc_mp_write_uint(w, (uint64_t)r[i].complete);
        mc_mp_write_uint(w, MC_F_EXISTS);
        mc_mp_write_bool(w, r[i].disk);
    }
    return st;
}

static mc_status_t run_call(const svc_ctx_t *j, svc_args_t *a, mc_mp_writer_t *w)
{
    mc_store_service_t *svc = j->svc;
    mc_store_t *s = svc->store;
    svc_session_t *ss = j->sess;
    mc_status_t st = parts_check(ss, a);
    if (st != MC_OK)
        return st;
    switch (j->method) {
    case MC_RPC_SVC_PUT:
        return call_put(j, a, w);
    case MC_RPC_SVC_GET: {
        if (a->key == NULL || a->nparts != 1)
            return MC_ERR_INVALID_PARAMS;
        uint64_t need = 0;
        int64_t n =
            j->mc != NULL
                ? store_get_direct(j->mc, a->key, a->klen, part_ptr(ss, a, 0), a->parts[1], &need)
                : mc_store_get(s, a->key, a->klen, part_ptr(ss, a, 0), a->parts[1], &need);
        mc_mp_write_map(w, 1);
        mc_mp_write_uint(w, MC_F_SIZE);
        mc_mp_write_uint(w, n >= 0 ? (uint64_t)n : need);
        return n >= 0 ? MC_OK : (mc_status_t)n;
    }
    case MC_RPC_SVC_BATCH_PUT:
    case MC_RPC_SVC_BATCH_GET:
        return call_batch_rw(j, a, w);
    case MC_RPC_SVC_EXIST: {
        if (a->key == NULL)
            return MC_ERR_INVALID_PARAMS;
        int x = mc_store_exist(s, a->key, a->klen);
        mc_mp_write_map(w, 1);
        mc_mp_write_uint(w, MC_F_EXISTS);
        mc_mp_write_bool(w, x == 1);
        return x < 0 ? (mc_status_t)x : MC_OK;
    }
    case MC_RPC_SVC_BATCH_EXIST:
    case MC_RPC_SVC_BATCH_REMOVE: {
        if (a->nkeys == 0)
            return MC_ERR_INVALID_PARAMS;
        int *res = mc_calloc(a->nkeys,
                             sizeof(int) > sizeof(mc_status_t) ? sizeof(int) : sizeof(mc_status_t));
        if (res == NULL)
            return MC_ERR_NOMEM;
        st = j->method == MC_RPC_SVC_BATCH_EXIST
                 ? mc_store_batch_exist(s, a->keys, a->nkeys, res)
                 : mc_store_batch_remove(s, a->keys, a->nkeys, a->force, (mc_status_t *)res);
        mc_mp_write_map(w, 1);
        mc_mp_write_uint(w, MC_F_STATUSES);
        mc_mp_write_array(w, a->nkeys);
        for (uint32_t i = 0; i < a->nkeys; i++)
            mc_mp_write_int(w, res[i]);
        mc_free(res);
        return st;
    }
    case MC_RPC_SVC_REMOVE:
        if (a->key == NULL)
            return MC_ERR_INVALID_PARAMS;
        mc_mp_write_map(w, 0);
        return mc_store_remove(s, a->key, a->klen, a->force);
    case MC_RPC_SVC_REMOVE_REGEX:
    case MC_RPC_SVC_REMOVE_ALL: {
        int64_t n;
        if (j->method == MC_RPC_SVC_REMOVE_ALL) {
            n = mc_store_remove_all(s, a->force);
        } else {
            char *re = a->regex != NULL ? mc_strndup(a->regex, a->rlen) : NULL;
            if (re == NULL)
                return a->regex == NULL ? MC_ERR_INVALID_PARAMS : MC_ERR_NOMEM;
            n = mc_store_remove_by_regex(s, re, a->force);
            mc_free(re);
        }
        mc_mp_write_map(w, 1);
        mc_mp_write_uint(w, MC_F_COUNT);
        mc_mp_write_uint(w, n > 0 ? (uint64_t)n : 0);
        return n >= 0 ? MC_OK : (mc_status_t)n;
    }
    case MC_RPC_SVC_GET_SIZE: {
        if (a->key == NULL)
            return MC_ERR_INVALID_PARAMS;
        int64_t n = mc_store_get_size(s, a->key, a->klen);
        mc_mp_write_map(w, 1);
        mc_mp_write_uint(w, MC_F_SIZE);
        mc_mp_write_uint(w, n > 0 ? (uint64_t)n : 0);
        return n >= 0 ? MC_OK : (mc_status_t)n;
    }
    case MC_RPC_SVC_QUERY:
        return call_query(s, a, w);
    case MC_RPC_SVC_GET_RANGES:
        return call_get_ranges(s, ss, a, w);
    default:
        return MC_ERR_NO_METHOD;
    }
}

static void reply_msg(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t rst)
{
    svc_job_t *j = MC_CONTAINER_OF(msg, svc_job_t, msg);
    mc_store_service_t *svc = j->svc;
    (void)r;
    (void)rst; /* a stopping reactor: the server drops the request itself */
    mc_rpc_reply(j->req, j->st, mc_buf_head(&j->reply), mc_buf_used(&j->reply));
    session_put(svc, j->sess);
    job_put(svc, j);
    atomic_fetch_sub(&svc->inflight, 1);
}

/* Decode and run one call of x's session; its answer's body is appended to
 * reply (nothing appended when it could not be encoded). The call's status. */
static mc_status_t exec_call(const svc_ctx_t *x, const uint8_t *body, size_t blen, mc_buf_t *reply)
{
    svc_args_t a;
    mc_mp_writer_t w;
    size_t base = mc_buf_used(reply);
    mc_mp_writer_init(&w, reply);
    mc_status_t st = args_decode(body, blen, &a);
    if (st == MC_OK && atomic_load(&x->sess->closed))
        st = MC_ERR_CANCELED; /* its client died before the call began: nothing runs */
    else if (st == MC_OK)
        st = run_call(x, &a, &w);
    else
        MC_WARN(CLIENT, "store service: session %llu (pid %d): malformed call %u",
                (unsigned long long)x->sess->id, (int)x->sess->pid, x->method);
    for (size_t i = 0; i < a.cfg.n_preferred && a.has_cfg; i++)
        mc_free((void *)a.pref[i]);
    args_free(&a);
    if (w.err != MC_OK) {
        reply->len = reply->off + base;
        if (st == MC_OK)
            st = w.err;
    }
    return st;
}

static void job_run(svc_job_t *j, store_mconn_t *mc)
{
    svc_ctx_t x = {j->svc, j->sess, j->method, mc};
    j->st = exec_call(&x, j->body, j->blen, &j->reply);
    j->msg.fn = reply_msg;
    if (mc_reactor_post(mc_rpc_req_reactor(j->req), &j->msg) != MC_OK) {
        /* the service is stopping: the server drops the request */
        mc_store_service_t *svc = j->svc;
        session_put(svc, j->sess);
        job_put(svc, j);
        atomic_fetch_sub(&svc->inflight, 1);
    }
}

static int read_session(const uint8_t *body, size_t blen, uint64_t *id, uint64_t *token);

/* ------------------------------------------------------- call channels */

/* Out of the epoll set and the table, closed. The worker that serves it
 * (or stop, once the workers are gone). */
static void chan_close(mc_store_service_t *svc, svc_chan_t *ch)
{
    epoll_ctl(svc->ep, EPOLL_CTL_DEL, ch->fd, NULL);
    pthread_mutex_lock(&svc->mu);
    for (svc_chan_t **pp = &svc->chans; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == ch) {
            *pp = ch->next;
            svc->nchans--;
            break;
        }
    }
    pthread_mutex_unlock(&svc->mu);
    close(ch->fd);
    mc_free(ch);
}

/* A connection whose first message asks for a call channel of a session:
 * checked (peer, session and token, the channels' limit), answered, and
 * handed to the workers; refused ones are closed here. The unix thread. */
static void chan_open(mc_store_service_t *svc, int conn, const svc_channel_t *m, pid_t pid)
{
    char why[256];
    mc_status_t st = MC_OK;
    if (!mc_unix_peer_allowed(conn, svc->group, why, sizeof(why))) {
        MC_WARN(CLIENT, "store service: refused a call channel: %s", why);
        st = MC_ERR_ILLEGAL_CLIENT;
    }
    svc_session_t *ss = st == MC_OK ? session_get(svc, m->session, m->token) : NULL;
    if (st == MC_OK && ss == NULL) {
        snprintf(why, sizeof(why), "no such session");
        st = MC_ERR_CLIENT_NOT_FOUND; /* (we restarted): the client shares again */
    }
    if (ss != NULL)
        session_put(svc, ss);
    svc_chan_t *ch = st == MC_OK ? MC_NEW(svc_chan_t) : NULL;
    if (st == MC_OK && ch == NULL) {
        snprintf(why, sizeof(why), "out of memory");
        st = MC_ERR_NOMEM;
    }
    if (st == MC_OK) {
        pthread_mutex_lock(&svc->mu);
        if (svc->nchans >= svc->o.max_sessions * 16u) {
            snprintf(why, sizeof(why), "%u call channels open (16 per service.max_sessions)",
                     svc->nchans);
            st = MC_ERR_LIMIT; /* the client calls over the control port instead */
        } else {
            *ch = (svc_chan_t){.next = svc->chans, .fd = conn, .pid = pid, .session = m->session};
            svc->chans = ch;
            svc->nchans++;
        }
        pthread_mutex_unlock(&svc->mu);
        if (st != MC_OK) {
            MC_DEBUG(CLIENT, "store service: refused a call channel of process %d: %s", (int)pid,
                     why);
            mc_free(ch);
            ch = NULL;
        }
    }
    welcome(conn, st, m->session, 0, st == MC_OK ? svc->name : why);
    if (ch == NULL) {
        close(conn);
        return;
    }
    /* in the set only now: its client calls only after our answer */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = ch};
    if (epoll_ctl(svc->ep, EPOLL_CTL_ADD, conn, &ev) != 0) {
        MC_WARN(CLIENT, "store service: cannot watch a call channel: %s", strerror(errno));
        chan_close(svc, ch); /* its client sees the end: the call fails */
    }
}

/* One call on ch (a worker; the channel is ours until it is armed again):
 * read it, run it, answer it. in: SVC_CHAN_MAX bytes; out: the answer. */
static void chan_serve(mc_store_service_t *svc, svc_chan_t *ch, uint8_t *in, mc_buf_t *out,
                       store_mconn_t *mc)
{
    size_t got = 0;
    int fd = -1;
    mc_status_t st = mc_unix_recv(ch->fd, in, SVC_CHAN_MAX, &got, &fd);
    if (fd >= 0)
        close(fd);
    svc_call_t call = {0, 0};
    if (st == MC_OK && got >= sizeof(call))
        memcpy(&call, in, sizeof(call));
    if (st != MC_OK || got < sizeof(call) || call.magic != SVC_MAGIC) {
        if (st != MC_ERR_CONN_CLOSED) /* (its end: the client closed or died) */
            MC_WARN(CLIENT,
                    "store service: process %d sent %s on a call channel of session %llu: the "
                    "channel closes",
                    (int)ch->pid, st != MC_OK ? mc_status_str(st) : "something that is not a call",
                    (unsigned long long)ch->session);
        chan_close(svc, ch);
        return;
    }
    const uint8_t *body = in + sizeof(call);
    size_t blen = got - sizeof(call);
    svc_answer_t ans = {.magic = SVC_MAGIC, .status = MC_OK};
    mc_buf_reset(out);
    if (mc_buf_append(out, &ans, sizeof(ans)) != MC_OK) {
        chan_close(svc, ch);
        return;
    }
    uint64_t id = 0, token = 0;
    svc_session_t *ss = NULL;
    if (atomic_load(&svc->stop)) {
        st = MC_ERR_CANCELED;
    } else if (call.method < MC_RPC_SVC_PUT || call.method > MC_RPC_SVC_LAST) {
        st = MC_ERR_NO_METHOD;
    } else if (read_session(body, blen, &id, &token) != 0) {
        MC_WARN(CLIENT, "store service: process %d: call %u without a session", (int)ch->pid,
                call.method);
        st = MC_ERR_INVALID_PARAMS;
    } else if ((ss = session_get(svc, id, token)) == NULL) {
        st = MC_ERR_CLIENT_NOT_FOUND;
    } else {
        atomic_fetch_add(&svc->inflight, 1);
        svc_ctx_t x = {svc, ss, (uint16_t)call.method, mc};
        st = exec_call(&x, body, blen, out);
        session_put(svc, ss);
        atomic_fetch_sub(&svc->inflight, 1);
    }
    if (mc_buf_used(out) > SVC_CHAN_MAX) { /* (bounded by the calls that fit a channel) */
        MC_ERROR(CLIENT, "store service: an answer of %zu bytes does not fit a call channel",
                 mc_buf_used(out));
        out->len = out->off + sizeof(ans);
        st = MC_ERR_INTERNAL_ERROR;
    }
    ans.status = st;
    memcpy(mc_buf_head(out), &ans, sizeof(ans));
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = ch};
    if (mc_unix_send(ch->fd, mc_buf_head(out), mc_buf_used(out), -1) != MC_OK ||
        epoll_ctl(svc->ep, EPOLL_CTL_MOD, ch->fd, &ev) != 0)
        chan_close(svc, ch); /* its client stopped waiting (timed out) or died */
}

/* The next queued job, or NULL (another worker took it). */
static svc_job_t *job_next(mc_store_service_t *svc)
{
    uint64_t one;
    if (read(svc->qev, &one, sizeof(one)) != (ssize_t)sizeof(one))
        return NULL;
    pthread_mutex_lock(&svc->qmu);
    svc_job_t *j = svc->qhead; /* (one per count: never NULL here) */
    if (j != NULL && (svc->qhead = j->next) == NULL)
        svc->qtail = NULL;
    pthread_mutex_unlock(&svc->qmu);
    return j;
}

static void *worker_main(void *arg)
{
    mc_store_service_t *svc = arg;
    uint8_t *in = mc_malloc(SVC_CHAN_MAX);
    mc_buf_t out = MC_BUF_INIT;
    /* this worker's own master connection: puts and gets call the master
     * from here (connected at the first call) */
    store_mconn_t *mc = store_mconn_new(svc->store);
    if (in == NULL || mc == NULL) {
        MC_ERROR(CLIENT, "store service: out of memory for a worker");
        mc_free(in);
        store_mconn_free(mc);
        return NULL;
    }
    for (;;) {
        struct epoll_event ev;
        int n = epoll_wait(svc->ep, &ev, 1, -1);
        if (n < 0 && errno != EINTR) {
            MC_ERROR(CLIENT, "store service: epoll_wait: %s", strerror(errno));
            break;
        }
        if (n <= 0)
            continue;
        if (ev.data.ptr == &svc->stopev) {
            break; /* stopping: every job is done (stop waited for them) */
        } else if (ev.data.ptr == &svc->qev) {
            svc_job_t *j = job_next(svc);
            if (j != NULL)
                job_run(j, mc);
        } else {
            chan_serve(svc, ev.data.ptr, in, &out, mc);
        }
    }
    store_mconn_free(mc);
    mc_free(in);
    mc_buf_fini(&out);
    return NULL;
}

/* Find SESSION and TOKEN in a body. */
static int read_session(const uint8_t *body, size_t blen, uint64_t *id, uint64_t *token)
{
    mc_mp_reader_t r;
    int got = 0;
    mc_mp_reader_init(&r, body, blen);
    uint32_t nf = blen ? mc_mp_read_map(&r) : 0;
    for (uint32_t f = 0; f < nf && r.err == MC_OK && got != 3; f++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_SVC_SESSION:
            *id = mc_mp_read_uint(&r);
            got |= 1;
            break;
        case MC_F_SVC_TOKEN:
            *token = mc_mp_read_uint(&r);
            got |= 2;
            break;
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    return r.err == MC_OK && got == 3 ? 0 : -1;
}

static void h_ping(void *ctx, mc_rpc_req_t *req)
{
    mc_store_service_t *svc = ctx;
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    mc_mp_write_map(w, 1);
    mc_mp_write_uint(w, MC_F_NAME);
    mc_mp_write_cstr(w, svc->name);
    mc_rpc_reply_end(req, MC_OK);
}

static void h_call(void *ctx, mc_rpc_req_t *req)
{
    mc_store_service_t *svc = ctx;
    size_t blen = 0;
    const uint8_t *body = mc_rpc_req_body(req, &blen);
    uint64_t id = 0, token = 0;
    if (atomic_load(&svc->stop)) {
        mc_rpc_reply(req, MC_ERR_CANCELED, NULL, 0);
        return;
    }
    if (read_session(body, blen, &id, &token) != 0) {
        MC_WARN(CLIENT, "store service: %s: call %u without a session", mc_rpc_req_peer(req),
                mc_rpc_req_method(req));
        mc_rpc_reply(req, MC_ERR_INVALID_PARAMS, NULL, 0);
        return;
    }
    svc_session_t *ss = session_get(svc, id, token);
    if (ss == NULL) {
        /* unknown: we restarted (or it ended): the client shares again */
        mc_rpc_reply(req, MC_ERR_CLIENT_NOT_FOUND, NULL, 0);
        return;
    }
    svc_job_t *j = job_get(svc, blen);
    if (j == NULL) {
        session_put(svc, ss);
        mc_rpc_reply(req, MC_ERR_NOMEM, NULL, 0);
        return;
    }
    j->svc = svc;
    j->req = req;
    j->method = mc_rpc_req_method(req);
    j->sess = ss;
    j->blen = blen;
    memcpy(j->body, body, blen);
    atomic_fetch_add(&svc->inflight, 1);
    pthread_mutex_lock(&svc->qmu);
    if (svc->qtail != NULL)
        svc->qtail->next = j;
    else
        svc->qhead = j;
    svc->qtail = j;
    pthread_mutex_unlock(&svc->qmu);
    uint64_t one = 1;
    if (write(svc->qev, &one, sizeof(one)) != (ssize_t)sizeof(one))
        MC_ERROR(CLIENT, "store service: cannot wake a worker: %s", strerror(errno));
}

/* ------------------------------------------------------------ life */

/* The workers' epoll set with its two eventfds (svc_free closes them). */
static mc_status_t workers_set(mc_store_service_t *svc)
{
    svc->ep = epoll_create1(EPOLL_CLOEXEC);
    svc->qev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
    svc->stopev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event qe = {.events = EPOLLIN, .data.ptr = &svc->qev};
    struct epoll_event se = {.events = EPOLLIN, .data.ptr = &svc->stopev};
    if (svc->ep < 0 || svc->qev < 0 || svc->stopev < 0 ||
        epoll_ctl(svc->ep, EPOLL_CTL_ADD, svc->qev, &qe) != 0 ||
        epoll_ctl(svc->ep, EPOLL_CTL_ADD, svc->stopev, &se) != 0) {
        MC_ERROR(CLIENT, "store service: cannot make the workers' epoll set: %s", strerror(errno));
        return MC_ERR_INTERNAL_ERROR;
    }
    return MC_OK;
}

/* Every worker out of its wait, to stop (stopev stays readable). */
static void workers_wake(mc_store_service_t *svc)
{
    uint64_t one = 1;
    if (write(svc->stopev, &one, sizeof(one)) != (ssize_t)sizeof(one))
        MC_ERROR(CLIENT, "store service: cannot stop the workers: %s", strerror(errno));
}

static void svc_free(mc_store_service_t *svc)
{
    if (svc->lfd >= 0)
        close(svc->lfd);
    if (svc->wake[0] >= 0)
        close(svc->wake[0]);
    if (svc->wake[1] >= 0)
        close(svc->wake[1]);
    while (svc->chans != NULL) /* (the workers are gone) */
        chan_close(svc, svc->chans);
    if (svc->ep >= 0)
        close(svc->ep);
    if (svc->qev >= 0)
        close(svc->qev);
    if (svc->stopev >= 0)
        close(svc->stopev);
    mc_free(svc->workers);
    while (svc->cache != NULL) {
        svc_job_t *j = svc->cache;
        svc->cache = j->next;
        mc_buf_fini(&j->reply);
        mc_free(j);
    }
    pthread_mutex_destroy(&svc->cmu);
    pthread_mutex_destroy(&svc->mu);
    pthread_mutex_destroy(&svc->qmu);
    mc_free(svc);
}

mc_status_t mc_store_service_start(mc_store_t *store, const mc_store_service_opts_t *o,
                                   mc_store_service_t **out)
{
    mc_store_service_opts_t d;
    mc_store_service_opts_init(&d);
    if (o == NULL)
        o = &d;
    if (store == NULL || out == NULL || o->port == 0 || o->threads == 0 || o->threads > 256 ||
        o->max_sessions == 0 || o->max_sessions > 65536) {
        MC_ERROR(CLIENT, "store service: bad options (port 1..65535, threads 1..256, "
                         "max_sessions 1..65536)");
        return MC_ERR_INVALID_ARGUMENT;
    }
    mc_store_service_t *svc = MC_NEW(mc_store_service_t);
    if (svc == NULL)
        return MC_ERR_NOMEM;
    svc->store = store;
    svc->o = *o;
    svc->lfd = svc->wake[0] = svc->wake[1] = svc->ep = svc->qev = svc->stopev = -1;
    svc->group = (gid_t)-1;
    pthread_mutex_init(&svc->mu, NULL);
    pthread_mutex_init(&svc->cmu, NULL);
    pthread_mutex_init(&svc->qmu, NULL);
    snprintf(svc->bind, sizeof(svc->bind), "%s", o->bind ? o->bind : d.bind);
    svc->o.bind = svc->bind;
    svc->o.group = NULL;
    svc->o.secret_file = NULL; /* the caller's string; the key is what we keep */
    snprintf(svc->name, sizeof(svc->name), "%s", mc_store_name(store));
    snprintf(svc->sock, sizeof(svc->sock), SVC_SOCK_FMT, (unsigned)o->port);
    mc_status_t st = MC_OK;
    if (o->secret_file != NULL && o->secret_file[0] != '\0') {
        char why[512];
        if ((st = mc_auth_key_load(o->secret_file, &svc->key, why, sizeof(why))) != MC_OK) {
            MC_ERROR(CLIENT, "store service: secret_file: %s", why);
            st = MC_ERR_INVALID_ARGUMENT;
            goto err;
        }
        svc->has_key = 1;
    }
    if (o->group != NULL && o->group[0] != '\0' &&
        (st = mc_group_id(o->group, &svc->group)) != MC_OK)
        goto err;
    /* the unix socket first: a second service of this port on this host is
     * refused here, before it could take the control port */
    if ((st = mc_unix_listen(svc->sock, &svc->lfd)) != MC_OK) {
        if (st == MC_ERR_EXISTS)
            MC_ERROR(CLIENT,
                     "store service: another service holds port %u on this host (its "
                     "socket '@%s' is in use): one service per port",
                     (unsigned)o->port, svc->sock);
        goto err;
    }
    if (pipe2(svc->wake, O_CLOEXEC) != 0) {
        st = MC_ERR_SOCKET;
        goto err;
    }
    if ((st = workers_set(svc)) != MC_OK)
        goto err;
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "svc";
    if ((st = mc_reactor_group_create(&go, &svc->g)) != MC_OK)
        goto err;
    mc_reactor_t *r = mc_reactor_group_get(svc->g, 0);
    mc_rpc_server_opts_t so;
    mc_rpc_server_opts_init(&so);
    so.bind_addr = svc->bind;
    so.port = o->port;
    so.auth_key = svc->has_key ? &svc->key : NULL;
    if ((st = mc_rpc_server_create(&r, 1, &so, &svc->srv)) != MC_OK)
        goto err_group;
    mc_rpc_server_register(svc->srv, MC_RPC_SVC_PING, h_ping, svc);
    for (unsigned m = MC_RPC_SVC_PUT; m <= MC_RPC_SVC_LAST; m++)
        mc_rpc_server_register(svc->srv, (uint16_t)m, h_call, svc);
    if ((st = mc_rpc_server_start(svc->srv)) != MC_OK) {
        MC_ERROR(CLIENT, "store service: cannot listen on %s:%u (another process has it?)",
                 svc->bind, (unsigned)o->port);
        goto err_srv;
    }
    svc->workers = mc_calloc(o->threads, sizeof(pthread_t));
    if (svc->workers == NULL) {
        st = MC_ERR_NOMEM;
        goto err_srv;
    }
    for (unsigned i = 0; i < o->threads; i++) {
        if (pthread_create(&svc->workers[i], NULL, worker_main, svc) != 0)
            break;
        svc->nworkers = i + 1;
    }
    if (svc->nworkers == 0 || pthread_create(&svc->unix_th, NULL, unix_main, svc) != 0) {
        st = MC_ERR_INTERNAL_ERROR;
        goto err_workers;
    }
    svc->unix_up = 1;
    MC_INFO(CLIENT,
            "store service of '%s': co-located clients on %s:%u and unix socket '@%s', %u "
            "worker(s)",
            svc->name, svc->bind, (unsigned)o->port, svc->sock, svc->nworkers);
    *out = svc;
    return MC_OK;

err_workers:
    atomic_store(&svc->stop, 1);
    workers_wake(svc);
    for (unsigned i = 0; i < svc->nworkers; i++)
        pthread_join(svc->workers[i], NULL);
err_srv:
    mc_rpc_server_destroy(svc->srv);
err_group:
    mc_reactor_group_destroy(svc->g);
err:
    svc_free(svc);
    return st;
}

static void noop(void *arg)
{
    (void)arg;
}

void mc_store_service_stop(mc_store_service_t *svc)
{
    if (svc == NULL)
        return;
    atomic_store(&svc->stop, 1); /* new calls are refused */
    /* a handler that read stop before we set it has queued its job by the
     * time the reactor runs this (handlers run on it, one at a time) */
    mc_rpc_run_on(mc_reactor_group_get(svc->g, 0), noop, NULL);
    /* the calls in flight finish and reply (bounded by the store's timeouts) */
    while (atomic_load(&svc->inflight) > 0)
        usleep(1000);
    workers_wake(svc);
    for (unsigned i = 0; i < svc->nworkers; i++)
        pthread_join(svc->workers[i], NULL);
    mc_rpc_server_destroy(svc->srv);
    mc_reactor_group_destroy(svc->g);
    if (svc->unix_up) {
        ssize_t w = write(svc->wake[1], "x", 1);
        (void)w;
        pthread_join(svc->unix_th, NULL); /* ends every session */
    }
    svc_free(svc);
}

void mc_store_service_sessions(mc_store_service_t *svc, unsigned *open, uint64_t *total)
{
    pthread_mutex_lock(&svc->mu);
    *open = svc->nopen;
    *total = svc->total;
    pthread_mutex_unlock(&svc->mu);
}
