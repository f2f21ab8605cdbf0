/*
 * dummy.c - the co-located ("dummy") client: an mc_store_t opened with
 * mc_store_config_t.service = "HOST:PORT" forwards every call to the store
 * service of its host (service.c; protocol in svc_proto.h) instead of
 * running a transfer engine and a master connection of its own.
 *
 * Its buffers live in one memfd region shared with the service at connect:
 * [0, local_buffer_size) is staging (caller memory outside the region is
 * copied through it), [local_buffer_size, +mem_pool_size) is the pool of
 * mc_store_alloc_from_mem_pool (values there travel without any copy on
 * this side: the service reads and writes them in place).
 *
 * Session: connect to "@mooncake_client_<PORT>.sock", send the memfd, get
 * a session id and token; the connection stays open. When the service goes
 * (its end closes) or restarted (calls answer CLIENT_NOT_FOUND), the next
 * call connects again and shares the same memory again, once per call. A
 * service that does not answer fails the call within rpc_timeout_us
 * (MC_ERR_RPC_TIMEOUT, or MC_ERR_CONN_CLOSED when nobody listens), logged
 * once per outage.
 *
 * Calls: a sync call runs on the caller's thread, on a call channel
 * (svc_proto.h) when its body fits one: the thread sends the call on a unix
 * connection of its own for the call's time and waits for the answer
 * itself (no thread of ours between it and the service's worker); idle
 * channels are kept for the next calls, one per caller running at once. A
 * channel that timed out or failed is closed, never reused (a late answer
 * would answer the next call). Larger bodies, the ping, and calls the
 * service would not give a channel go over the control port (a reactor of
 * ours carries the RPC connection). The async forms run the sync form on
 * one of DUMMY_ASYNC_THREADS helper threads (calls in flight at once, as a
 * normal client's async calls are: no order among them) and call back on
 * the reactor.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rpc/fields.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/client_int.h"
#include "store/offset_alloc.h"
#include "store/svc_proto.h"
#include "util/auth.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/shm.h"
#include "util/time.h"

typedef struct async_job async_job_t;

/* Async calls run at once (each on a helper thread, as a sync call). */
#define DUMMY_ASYNC_THREADS 4

/* A call channel: a unix connection to the service for one call at a time. */
typedef struct chan {
    struct chan *next; /* idle list */
    int fd;
    uint64_t gen;             /* the session (svc_client_t.gen) it belongs to */
    mc_buf_t out;             /* the call being sent */
    uint8_t in[SVC_CHAN_MAX]; /* the answer */
} chan_t;

struct svc_client {
    mc_reactor_group_t *g;
    mc_reactor_t *r;
    mc_rpc_client_t *rpc;
    mc_auth_key_t key; /* the cluster's secret (cfg->secret_file), when has_key */
    int has_key;
    char host[128];
    uint16_t port;
    char sock[64];
    uint64_t timeout_us;
    char name[256]; /* the service's segment */
    /* the shared region: staging then pool */
    mc_shm_t mem;
    uint64_t stage_len, pool_len;
    pthread_mutex_t amu;
    pthread_cond_t acv; /* staging freed */
    mc_oalloc_t *stage;
    /* the session */
    pthread_mutex_t smu;
    int conn;
    uint64_t session, token;
    uint64_t gen; /* sessions made so far (ids restart with a restarted service) */
    int down;     /* an outage was logged */
    /* idle call channels (chmu; taken after smu when both are held) */
    pthread_mutex_t chmu;
    chan_t *idle;
    atomic_int chan_refused; /* the service refused a channel: logged once */
    /* async helper */
    pthread_mutex_t jmu;
    pthread_cond_t jcv;
    async_job_t *jobs;
    pthread_t helper[DUMMY_ASYNC_THREADS];
    unsigned helpers_up;
    int stopping;
    long live; /* async jobs not yet called back */
    /* mc_store_shared_alloc memory shared with the service besides mem
     * (register_buffer): offsets past mem's, never reused; xmu guards the
     * table (shared: calls; exclusive: register/unregister), smu the shares */
    pthread_rwlock_t xmu;
    struct xreg {
        uint8_t *base;
        uint64_t len, off;
        int fd; /* ours, to share it again with a restarted service */
    } xr[SVC_MAX_REGIONS - 1];
    uint32_t nxr;
    uint64_t next_off;
};

/* ------------------------------------------------------------- memory */

#define XREG_ALIGN (2ull << 20) /* offsets of shared regions after mem's */

/* [p, p+len) in memory shared with the service: 1 and its offset there
 * (off may be NULL), or 0. */
static int locate(const svc_client_t *c, const void *p, size_t len, uint64_t *off)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)c->mem.base;
    if (len == 0 || a + len < a)
        return 0;
    if (a >= b && a + len <= b + c->mem.len) {
        if (off != NULL)
            *off = a - b;
        return 1;
    }
    int found = 0;
    pthread_rwlock_t *xmu = (pthread_rwlock_t *)&c->xmu;
    pthread_rwlock_rdlock(xmu);
    for (uint32_t i = 0; i < c->nxr && !found; i++) {
        b = (uintptr_t)c->xr[i].base;
        if (a >= b && a + len <= b + c->xr[i].len) {
            if (off != NULL)
                *off = c->xr[i].off + (a - b);
            found = 1;
        }
    }
    pthread_rwlock_unlock(xmu);
    return found;
}

static int in_region(const svc_client_t *c, const void *p, size_t len)
{
    return locate(c, p, len, NULL);
}

/* Staging bytes for one call: waits (at most the call timeout) for room.
 * MC_OK; MC_ERR_INVALID_PARAMS when len can never fit. */
static mc_status_t stage_get(svc_client_t *c, uint64_t len, mc_oalloc_handle_t *h)
{
    if (c->stage == NULL || len > c->stage_len) {
        MC_ERROR(CLIENT,
                 "a value of %llu bytes does not fit the staging buffer (local_buffer_size %llu): "
                 "put it in mc_store_alloc_from_mem_pool memory",
                 (unsigned long long)len, (unsigned long long)c->stage_len);
        return MC_ERR_INVALID_PARAMS;
    }
    uint64_t end = mc_now_us() + c->timeout_us;
    pthread_mutex_lock(&c->amu);
    mc_status_t st;
    while ((st = mc_oalloc_alloc(c->stage, len, h)) != MC_OK && mc_now_us() < end) {
        struct timespec ts = mc_timespec_in(CLOCK_REALTIME, 5000);
        pthread_cond_timedwait(&c->acv, &c->amu, &ts);
    }
    pthread_mutex_unlock(&c->amu);
    return st == MC_OK ? MC_OK : MC_ERR_RPC_TIMEOUT;
}

static void stage_put(svc_client_t *c, mc_oalloc_handle_t h)
{
    pthread_mutex_lock(&c->amu);
    mc_oalloc_free(c->stage, h);
    pthread_cond_broadcast(&c->acv);
    pthread_mutex_unlock(&c->amu);
}

/* ------------------------------------------------------------ session */

static void chan_free(chan_t *ch)
{
    if (ch == NULL)
        return;
    close(ch->fd);
    mc_buf_fini(&ch->out);
    mc_free(ch);
}

/* Close the idle channels (of an ended session, or all at close). */
static void chans_drop(svc_client_t *c)
{
    pthread_mutex_lock(&c->chmu);
    chan_t *l = c->idle;
    c->idle = NULL;
    pthread_mutex_unlock(&c->chmu);
    while (l != NULL) {
        chan_t *n = l->next;
        chan_free(l);
        l = n;
    }
}

static void session_drop(svc_client_t *c)
{
    if (c->conn >= 0)
        close(c->conn);
    c->conn = -1;
    chans_drop(c);
}

/* Share one more region on the session's connection; the service's answer
 * (*refused: it answered no; else the connection failed). */
static mc_status_t share_send(int conn, const struct xreg *x, int *refused)
{
    *refused = 0;
    svc_share_t m = {.magic = SVC_MAGIC, .op = SVC_OP_SHARE, .off = x->off, .len = x->len};
    svc_welcome_t w;
    size_t got = 0;
    int nofd = -1;
    mc_status_t st = mc_unix_send(conn, &m, sizeof(m), x->fd);
    if (st == MC_OK)
        st = mc_unix_recv(conn, &w, sizeof(w), &got, &nofd);
    if (nofd >= 0)
        close(nofd);
    if (st == MC_OK && (got != sizeof(w) || w.magic != SVC_MAGIC))
        st = MC_ERR_PROTOCOL;
    if (st == MC_OK && w.status != MC_OK) {
        w.name[sizeof(w.name) - 1] = '\0';
        MC_ERROR(CLIENT, "the store service refused %llu bytes of shared memory: %s",
                 (unsigned long long)x->len, w.name);
        st = (mc_status_t)w.status;
        *refused = 1;
    }
    return st;
}

/* A new connection of the service's socket that sends msg (len bytes; with
 * the descriptor sfd, or -1) and reads the service's welcome into *w (its
 * status is the caller's to read): MC_OK and *fd, or the error (nothing
 * left open). The hello of a session and of a call channel. */
static mc_status_t greet(svc_client_t *c, const void *msg, size_t len, int sfd, int *fd,
                         svc_welcome_t *w)
{
    memset(w, 0, sizeof(*w));
    *fd = -1;
    mc_status_t st = mc_unix_connect(c->sock, c->timeout_us, fd);
    if (st == MC_OK) {
        size_t got = 0;
        int nofd = -1;
        st = mc_unix_send(*fd, msg, len, sfd);
        if (st == MC_OK)
            st = mc_unix_recv(*fd, w, sizeof(*w), &got, &nofd);
        if (nofd >= 0)
            close(nofd);
        if (st == MC_OK && (got != sizeof(*w) || w->magic != SVC_MAGIC))
            st = MC_ERR_PROTOCOL;
    }
    if (st != MC_OK && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    return st;
}

/* The session, made (or made again after the service went) when needed.
 * smu held. */
static mc_status_t session_ensure(svc_client_t *c)
{
    if (c->conn >= 0) {
        char x;
        ssize_t r = recv(c->conn, &x, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            session_drop(c); /* the service went: connect again */
        else
            return MC_OK;
    }
    int fd = -1;
    svc_welcome_t w;
    svc_hello_t h = {.magic = SVC_MAGIC, .version = SVC_VERSION, .len = c->mem.len};
    mc_status_t st = greet(c, &h, sizeof(h), c->mem.fd, &fd, &w);
    if (st == MC_OK && w.status != MC_OK) {
        st = (mc_status_t)w.status;
        w.name[sizeof(w.name) - 1] = '\0';
        MC_ERROR(CLIENT, "the store service on port %u refused us: %s (%s)", (unsigned)c->port,
                 w.name, mc_status_str(st));
    }
    if (st != MC_OK) {
        if (fd >= 0)
            close(fd);
        if (!c->down)
            MC_WARN(CLIENT,
                    "the store service on port %u of this host is unreachable (unix socket '@%s': "
                    "%s); calls fail until it is back",
                    (unsigned)c->port, c->sock, mc_status_str(st));
        c->down = 1;
        return st == MC_ERR_CONN_CLOSED || st == MC_ERR_TIMEOUT ? MC_ERR_CONN_CLOSED : st;
    }
    /* and the memory shared since (a restarted service knows none of it) */
    uint32_t shared = 0;
    int refused = 0;
    pthread_rwlock_rdlock(&c->xmu);
    for (uint32_t i = 0; i < c->nxr && st == MC_OK; i++, shared++)
        st = share_send(fd, &c->xr[i], &refused);
    pthread_rwlock_unlock(&c->xmu);
    if (st != MC_OK) {
        close(fd);
        MC_ERROR(CLIENT, "the store service on port %u did not take our shared region %u: %s",
                 (unsigned)c->port, shared, mc_status_str(st));
        return st;
    }
    c->conn = fd;
    c->session = w.session;
    c->token = w.token;
    c->gen++;
    w.name[sizeof(w.name) - 1] = '\0';
    snprintf(c->name, sizeof(c->name), "%s", w.name);
    MC_INFO(CLIENT, "store service '%s' (port %u): session %llu, %llu bytes shared%s", c->name,
            (unsigned)c->port, (unsigned long long)c->session, (unsigned long long)c->mem.len,
            c->down ? " again" : "");
    c->down = 0;
    return MC_OK;
}

/* The body of a call: a map of `fields` (nf entries, already encoded) with
 * the session's id and token in front, appended to b. */
static mc_status_t call_body(mc_buf_t *b, uint64_t session, uint64_t token, const mc_buf_t *fields,
                             uint32_t nf)
{
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, b);
    mc_mp_write_map(&w, nf + 2);
    mc_mp_write_uint(&w, MC_F_SVC_SESSION);
    mc_mp_write_uint(&w, session);
    mc_mp_write_uint(&w, MC_F_SVC_TOKEN);
    mc_mp_write_uint(&w, token);
    if (fields != NULL && w.err == MC_OK)
        w.err = mc_buf_append(b, mc_buf_head(fields), mc_buf_used(fields));
    return w.err;
}

/* A new call channel of session gen: MC_OK; CLIENT_NOT_FOUND (the service
 * does not know the session); NOT_SUPPORTED (it refused a channel: the
 * control port carries the call); CONN_CLOSED, RPC_TIMEOUT. */
static mc_status_t chan_open(svc_client_t *c, uint64_t gen, uint64_t session, uint64_t token,
                             chan_t **out)
{
    int fd = -1;
    svc_welcome_t w;
    svc_channel_t m = {
        .magic = SVC_MAGIC, .op = SVC_OP_CHANNEL, .session = session, .token = token};
    mc_status_t st = greet(c, &m, sizeof(m), -1, &fd, &w);
    if (st == MC_OK && w.status != MC_OK) {
        st = (mc_status_t)w.status;
        if (st != MC_ERR_CLIENT_NOT_FOUND) {
            w.name[sizeof(w.name) - 1] = '\0';
            if (!atomic_exchange(&c->chan_refused, 1))
                MC_WARN(CLIENT,
                        "the store service refused a call channel (%s: %s): calls go over its "
                        "control port",
                        mc_status_str(st), w.name);
            st = MC_ERR_NOT_SUPPORTED;
        }
    }
    chan_t *ch = st == MC_OK ? MC_NEW(chan_t) : NULL;
    if (st == MC_OK && ch == NULL)
        st = MC_ERR_NOMEM;
    if (st != MC_OK) {
        if (fd >= 0)
            close(fd);
        return st == MC_ERR_TIMEOUT ? MC_ERR_RPC_TIMEOUT : st;
    }
    ch->fd = fd;
    ch->gen = gen;
    ch->out = (mc_buf_t)MC_BUF_INIT;
    *out = ch;
    return MC_OK;
}

/* An idle channel of session gen, or a new one (chan_open's statuses).
 * Idle ones of an older session are closed. */
static mc_status_t chan_take(svc_client_t *c, uint64_t gen, uint64_t session, uint64_t token,
                             chan_t **out)
{
    chan_t *stale = NULL, *ch = NULL;
    pthread_mutex_lock(&c->chmu);
    while (c->idle != NULL && ch == NULL) {
        chan_t *x = c->idle;
        c->idle = x->next;
        if (x->gen == gen) {
            ch = x;
        } else {
            x->next = stale;
            stale = x;
        }
    }
    pthread_mutex_unlock(&c->chmu);
    while (stale != NULL) {
        chan_t *n = stale->next;
        chan_free(stale);
        stale = n;
    }
    if (ch != NULL) {
        *out = ch;
        return MC_OK;
    }
    return chan_open(c, gen, session, token, out);
}

static void chan_give(svc_client_t *c, chan_t *ch)
{
    pthread_mutex_lock(&c->chmu);
    ch->next = c->idle;
    c->idle = ch;
    pthread_mutex_unlock(&c->chmu);
}

/* A call on a channel, sent and waited for by this thread: the call's
 * status, its answer's body appended to resp (may be NULL). *rpc set: no
 * channel for it (the control port carries it). A call that could not be
 * sent (a channel whose service went) is tried once more on a new channel;
 * one sent whose channel ends before the answer is CONN_CLOSED (the service
 * died: nothing is sent again). */
static mc_status_t chan_call(svc_client_t *c, uint64_t gen, uint64_t session, uint64_t token,
                             uint16_t method, const mc_buf_t *fields, uint32_t nf, mc_buf_t *resp,
                             int *rpc)
{
    mc_status_t st = MC_OK;
    *rpc = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        chan_t *ch = NULL;
        if ((st = chan_take(c, gen, session, token, &ch)) != MC_OK) {
            *rpc = st == MC_ERR_NOT_SUPPORTED;
            return st;
        }
        mc_buf_reset(&ch->out);
        svc_call_t hd = {.magic = SVC_MAGIC, .method = method};
        st = mc_buf_append(&ch->out, &hd, sizeof(hd));
        if (st == MC_OK)
            st = call_body(&ch->out, session, token, fields, nf);
        if (st == MC_OK && mc_buf_used(&ch->out) > SVC_CHAN_MAX)
            *rpc = 1; /* (call() sends only bodies that fit) */
        if (st != MC_OK || *rpc) {
            chan_give(c, ch);
            return st;
        }
        st = mc_unix_send(ch->fd, mc_buf_head(&ch->out), mc_buf_used(&ch->out), -1);
        if (st != MC_OK) {
            chan_free(ch); /* not sent: its service went (or restarted) */
            continue;
        }
        size_t got = 0;
        int nofd = -1;
        st = mc_unix_recv(ch->fd, ch->in, sizeof(ch->in), &got, &nofd);
        if (nofd >= 0)
            close(nofd);
        svc_answer_t ans = {0, 0};
        if (st == MC_OK && got >= sizeof(ans))
            memcpy(&ans, ch->in, sizeof(ans));
        if (st == MC_OK && (got < sizeof(ans) || ans.magic != SVC_MAGIC))
            st = MC_ERR_PROTOCOL;
        if (st != MC_OK) {
            chan_free(ch);
            return st == MC_ERR_TIMEOUT ? MC_ERR_RPC_TIMEOUT : st;
        }
        if (resp != NULL && got > sizeof(ans))
            st = mc_buf_append(resp, ch->in + sizeof(ans), got - sizeof(ans));
        chan_give(c, ch);
        return st != MC_OK ? st : (mc_status_t)ans.status;
    }
    return st;
}

/* A call over the control port (call()'s statuses). */
static mc_status_t call_rpc(svc_client_t *c, uint16_t method, uint64_t session, uint64_t token,
                            const mc_buf_t *fields, uint32_t nf, mc_buf_t *resp)
{
    mc_buf_t body = MC_BUF_INIT;
    mc_status_t st = call_body(&body, session, token, fields, nf);
    if (st == MC_OK)
        st = mc_rpc_call_sync(c->rpc, method, mc_buf_head(&body), mc_buf_used(&body), c->timeout_us,
                              resp);
    mc_buf_fini(&body);
    return st;
}

/* A call: `fields` (nf map entries, already encoded) with the session's id
 * and token in front; on a call channel when it fits one, else over the
 * control port. The answer's body is appended to resp (may be NULL). A
 * session the service does not know (it restarted) is made again and the
 * call sent once more. */
static mc_status_t call(svc_client_t *c, uint16_t method, const mc_buf_t *fields, uint32_t nf,
                        mc_buf_t *resp)
{
    mc_status_t st = MC_OK;
    if (mc_reactor_current() == c->r)
        return MC_ERR_STATE; /* a sync call from our callback: it would wait for itself */
    /* (the ping checks the control port itself; 64: the header, session and token) */
    int by_chan =
        method != MC_RPC_SVC_PING && (fields == NULL || mc_buf_used(fields) + 64 <= SVC_CHAN_MAX);
    for (int attempt = 0; attempt < 2; attempt++) {
        pthread_mutex_lock(&c->smu);
        st = session_ensure(c);
        uint64_t session = c->session, token = c->token, gen = c->gen;
        pthread_mutex_unlock(&c->smu);
        if (st != MC_OK)
            return st;
        if (resp != NULL)
            mc_buf_reset(resp);
        int rpc = !by_chan;
        if (by_chan)
            st = chan_call(c, gen, session, token, method, fields, nf, resp, &rpc);
        if (rpc) {
            if (resp != NULL)
                mc_buf_reset(resp);
            st = call_rpc(c, method, session, token, fields, nf, resp);
        }
        if (st != MC_ERR_CLIENT_NOT_FOUND)
            break;
        /* the service restarted: share our memory with it again */
        pthread_mutex_lock(&c->smu);
        if (c->session == session)
            session_drop(c);
        pthread_mutex_unlock(&c->smu);
    }
    return st;
}

/* ------------------------------------------------------------- bodies */

static void put_key(mc_mp_writer_t *w, const void *key, size_t klen)
{
    mc_mp_write_uint(w, MC_F_KEY);
    mc_mp_write_bin(w, key, klen);
}

/* CONFIG (svc_proto.h); cfg NULL: the defaults. upsert: replace an existing
 * object (mc_store_upsert). */
static void put_config(mc_mp_writer_t *w, const mc_replicate_config_t *cfg, int upsert)
{
    mc_replicate_config_t def;
    if (cfg == NULL) {
        mc_replicate_config_init(&def);
        cfg = &def;
    }
    mc_mp_write_uint(w, MC_F_CONFIG);
    mc_mp_write_map(w, cfg->has_soft_pin_ttl ? 7 : 6);
    mc_mp_write_uint(w, 4);
    mc_mp_write_bool(w, upsert);
    mc_mp_write_uint(w, 5);
    mc_mp_write_bool(w, cfg->with_hard_pin);
    mc_mp_write_uint(w, 6);
    mc_mp_write_uint(w, (uint64_t)cfg->soft_pin_action);
    if (cfg->has_soft_pin_ttl) {
        mc_mp_write_uint(w, 7);
        mc_mp_write_uint(w, cfg->soft_pin_ttl_ms);
    }
    mc_mp_write_uint(w, 1);
    mc_mp_write_uint(w, cfg->replica_num);
    mc_mp_write_uint(w, 2);
    mc_mp_write_bool(w, cfg->with_soft_pin);
    size_t np = cfg->n_preferred < 16 ? cfg->n_preferred : 16;
    mc_mp_write_uint(w, 3);
    mc_mp_write_array(w, (uint32_t)np);
    for (size_t i = 0; i < np; i++)
        mc_mp_write_cstr(w, cfg->preferred_segments[i]);
}

/* The offset of [p, p+len), which in_region found in shared memory. */
static uint64_t off_of(const svc_client_t *c, const void *p, size_t len)
{
    uint64_t off = UINT64_MAX; /* (unregistered meanwhile: the service refuses it) */
    locate(c, p, len, &off);
    return off;
}

/* Room in shared memory for a value in plain memory: staging, or pool
 * memory for a value larger than the staging buffer while the pool has
 * room. */
typedef struct bounce {
    mc_oalloc_handle_t h;
    void *pool;
    uint64_t off;
} bounce_t;

static mc_status_t bounce_get(mc_store_t *s, uint64_t len, bounce_t *b)
{
    svc_client_t *c = s->svc;
    b->pool = NULL;
    if (len > c->stage_len && (b->pool = store_pool_alloc(&s->pool, len)) != NULL) {
        b->off = off_of(c, b->pool, len);
        return MC_OK;
    }
    mc_status_t st = stage_get(c, len, &b->h); /* logs why a value cannot fit */
    b->off = b->h.offset;
    return st;
}

static void bounce_put(mc_store_t *s, bounce_t *b)
{
    if (b->pool != NULL)
        store_pool_free(&s->pool, b->pool);
    else
        stage_put(s->svc, b->h);
}

/* A key's check, as the normal client's (1..4096 bytes, no NUL). */
static int key_ok(const void *key, size_t klen)
{
    return key != NULL && klen > 0 && klen <= 4096 && memchr(key, 0, klen) == NULL;
}

/* *r at the value of field in the answer body b: 1, or 0 when it has none. */
static int answer_field(const mc_buf_t *b, unsigned field, mc_mp_reader_t *r)
{
    mc_mp_reader_init(r, mc_buf_head(b), mc_buf_used(b));
    uint32_t nf = mc_buf_used(b) ? mc_mp_read_map(r) : 0;
    for (uint32_t f = 0; f < nf && r->err == MC_OK; f++) {
        if (mc_mp_read_uint(r) == field)
            return r->err == MC_OK;
        mc_mp_skip(r);
    }
    return 0;
}

/* Field lookup in an answer body. */
static int64_t answer_int(const mc_buf_t *b, unsigned field, int64_t def)
{
    mc_mp_reader_t r;
    if (!answer_field(b, field, &r))
        return def;
    if (mc_mp_peek(&r) == MC_MP_BOOL)
        return mc_mp_read_bool(&r);
    int64_t v = mc_mp_read_int(&r);
    return r.err == MC_OK ? v : def;
}

/* STATUSES of an answer into out[0..n) (int64). MC_OK or PROTOCOL. */
static mc_status_t answer_list(const mc_buf_t *b, int64_t *out, size_t n)
{
    mc_mp_reader_t r;
    if (!answer_field(b, MC_F_STATUSES, &r) || mc_mp_read_array(&r) != n)
        return MC_ERR_PROTOCOL;
    for (size_t i = 0; i < n && r.err == MC_OK; i++)
        out[i] = mc_mp_read_int(&r);
    return r.err == MC_OK ? MC_OK : MC_ERR_PROTOCOL;
}

/* --------------------------------------------------------- the calls */

mc_status_t store_dummy_put(mc_store_t *s, const void *key, size_t klen, const mc_slice_t *parts,
                            size_t nparts, const mc_replicate_config_t *cfg, int upsert)
{
    svc_client_t *c = s->svc;
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    if (nparts == 0 || parts == NULL || nparts > SVC_MAX_PARTS)
        return MC_ERR_INVALID_PARAMS;
    uint64_t total = 0, outside = 0;
    for (size_t i = 0; i < nparts; i++) {
        if (parts[i].len == 0 || parts[i].ptr == NULL)
            return MC_ERR_INVALID_PARAMS;
        total += parts[i].len;
        if (!in_region(c, parts[i].ptr, parts[i].len))
            outside += parts[i].len;
    }
    /* what is not in our shared memory goes through one staging range */
    bounce_t h = {{0, MC_OALLOC_NO_NODE}, NULL, 0};
    mc_status_t st = outside > 0 ? bounce_get(s, outside, &h) : MC_OK;
    if (st != MC_OK)
        return st;
    mc_buf_t f = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &f);
    put_key(&w, key, klen);
    mc_mp_write_uint(&w, MC_F_SVC_PARTS);
    mc_mp_write_array(&w, (uint32_t)(2 * nparts));
    uint64_t so = h.off;
    for (size_t i = 0; i < nparts; i++) {
        if (in_region(c, parts[i].ptr, parts[i].len)) {
            mc_mp_write_uint(&w, off_of(c, parts[i].ptr, parts[i].len));
        } else {
            memcpy((uint8_t *)c->mem.base + so, parts[i].ptr, parts[i].len);
            mc_mp_write_uint(&w, so);
            so += parts[i].len;
        }
        mc_mp_write_uint(&w, parts[i].len);
    }
    uint32_t nf = 2;
    if (cfg != NULL || upsert) {
        put_config(&w, cfg, upsert);
        nf++;
    }
    (void)total;
    st = w.err != MC_OK ? w.err : call(c, MC_RPC_SVC_PUT, &f, nf, NULL);
    mc_buf_fini(&f);
    if (outside > 0)
        bounce_put(s, &h);
    return st;
}

int64_t store_dummy_get(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                        uint64_t *need)
{
    svc_client_t *c = s->svc;
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    if (buf == NULL || len == 0)
        return MC_ERR_INVALID_PARAMS;
    int direct = in_region(c, buf, len);
    uint64_t room = len;
    bounce_t h = {{0, MC_OALLOC_NO_NODE}, NULL, 0};
    mc_buf_t resp = MC_BUF_INIT;
    int64_t ret = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t off;
        if (direct) {
            off = off_of(c, buf, len);
        } else {
            /* the first try with what fits the staging buffer; the object's
             * size comes back if it did not fit (then staging or pool
             * memory of that size) */
            if (attempt == 0 && room > c->stage_len && c->stage_len > 0)
                room = c->stage_len;
            mc_status_t st = bounce_get(s, room, &h);
            if (st != MC_OK) {
                ret = st;
                break;
            }
            off = h.off;
        }
        mc_buf_t f = MC_BUF_INIT;
        mc_mp_writer_t w;
        mc_mp_writer_init(&w, &f);
        put_key(&w, key, klen);
        mc_mp_write_uint(&w, MC_F_SVC_PARTS);
        mc_mp_write_array(&w, 2);
        mc_mp_write_uint(&w, off);
        mc_mp_write_uint(&w, room);
        mc_status_t st = w.err != MC_OK ? w.err : call(c, MC_RPC_SVC_GET, &f, 2, &resp);
        mc_buf_fini(&f);
        int64_t size = answer_int(&resp, MC_F_SIZE, 0);
        if (st == MC_OK && !direct)
            memcpy(buf, (uint8_t *)c->mem.base + off, (size_t)size);
        if (!direct)
            bounce_put(s, &h);
        if (st == MC_ERR_BUFFER_OVERFLOW && !direct && (uint64_t)size <= len && room < len &&
            (uint64_t)size > room) {
            room = (uint64_t)size; /* it fits the caller's buffer: try again */
            continue;
        }
        if (st == MC_ERR_BUFFER_OVERFLOW && need != NULL)
            *need = (uint64_t)size;
        ret = st == MC_OK ? size : st;
        break;
    }
    mc_buf_fini(&resp);
    return ret;
}

/* Ranges of one value into shared memory (mc_store_get_ranges through the
 * service), as the normal client answers them: an empty range reads 0
 * bytes; a range outside memory shared with the service is INVALID_PARAMS
 * alone (the zero-copy forms insist on registered memory); a whole-call
 * failure (no such key) is every range's. At most SVC_MAX_PARTS ranges per
 * call: more go in several. */
mc_status_t store_dummy_get_ranges(mc_store_t *s, const void *key, size_t klen, size_t n,
                                   const uint64_t *src, void *const *dst, const uint64_t *len,
                                   int64_t *result)
{
    svc_client_t *c = s->svc;
    mc_status_t st = key_ok(key, klen) ? MC_OK : MC_ERR_INVALID_KEY;
    size_t *idx =
        st == MC_OK ? mc_calloc(n < SVC_MAX_PARTS ? n : SVC_MAX_PARTS, sizeof(*idx)) : NULL;
    if (st == MC_OK && idx == NULL)
        st = MC_ERR_NOMEM;
    mc_buf_t f = MC_BUF_INIT, resp = MC_BUF_INIT;
    for (size_t base = 0; st == MC_OK && base < n; base += SVC_MAX_PARTS) {
        size_t end = n - base > SVC_MAX_PARTS ? base + SVC_MAX_PARTS : n, m = 0;
        uint64_t off;
        for (size_t i = base; i < end; i++) {
            if (len[i] == 0) {
                result[i] = 0;
            } else if (!locate(c, dst[i], (size_t)len[i], &off)) {
                MC_ERROR(CLIENT,
                         "get_ranges: %p+%llu is not inside memory shared with the store "
                         "service (mc_store_shared_alloc, registered)",
                         dst[i], (unsigned long long)len[i]);
                result[i] = MC_ERR_INVALID_PARAMS;
            } else {
                idx[m++] = i;
            }
        }
        if (m == 0) { /* nothing to read: the key's existence decides, as a normal get */
            int64_t size = store_dummy_get_size(s, key, klen);
            st = size < 0 ? (mc_status_t)size : MC_OK;
            continue;
        }
        mc_buf_reset(&f);
        mc_mp_writer_t w;
        mc_mp_writer_init(&w, &f);
        put_key(&w, key, klen);
        mc_mp_write_uint(&w, MC_F_SVC_PARTS);
        mc_mp_write_array(&w, (uint32_t)(2 * m));
        for (size_t j = 0; j < m; j++) {
            locate(c, dst[idx[j]], (size_t)len[idx[j]], &off);
            mc_mp_write_uint(&w, off);
            mc_mp_write_uint(&w, len[idx[j]]);
        }
        mc_mp_write_uint(&w, MC_F_SVC_SRC);
        mc_mp_write_array(&w, (uint32_t)m);
        for (size_t j = 0; j < m; j++)
            mc_mp_write_uint(&w, src[idx[j]]);
        st = w.err != MC_OK ? w.err : call(c, MC_RPC_SVC_GET_RANGES, &f, 3, &resp);
        int64_t *got = (int64_t *)mc_calloc(m, sizeof(*got));
        if (st == MC_OK && (got == NULL || answer_list(&resp, got, m) != MC_OK))
            st = got == NULL ? MC_ERR_NOMEM : MC_ERR_PROTOCOL;
        for (size_t j = 0; st == MC_OK && j < m; j++)
            result[idx[j]] = got[j];
        mc_free(got);
    }
    if (st != MC_OK)
        for (size_t i = 0; i < n; i++)
            result[i] = st;
    mc_buf_fini(&f);
    mc_buf_fini(&resp);
    mc_free(idx);
    return st;
}

/* A call whose fields are the key and, when force >= 0, FORCE: its status;
 * the answer's body into *resp. */
static mc_status_t call_key(mc_store_t *s, uint16_t method, const void *key, size_t klen, int force,
                            mc_buf_t *resp)
{
    mc_buf_t f = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &f);
    put_key(&w, key, klen);
    if (force >= 0) {
        mc_mp_write_uint(&w, MC_F_FORCE);
        mc_mp_write_bool(&w, force);
    }
    mc_status_t st = w.err != MC_OK ? w.err : call(s->svc, method, &f, force >= 0 ? 2 : 1, resp);
    mc_buf_fini(&f);
    return st;
}

/* A call with a key and FORCE; an int answer field (or status). */
static int64_t key_call(mc_store_t *s, uint16_t method, const void *key, size_t klen, int force,
                        unsigned field)
{
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    mc_buf_t resp = MC_BUF_INIT;
    mc_status_t st = call_key(s, method, key, klen, force != 0, &resp);
    int64_t v = st == MC_OK ? (field ? answer_int(&resp, field, 0) : 0) : st;
    mc_buf_fini(&resp);
    return v;
}

int store_dummy_exist(mc_store_t *s, const void *key, size_t klen)
{
    return (int)key_call(s, MC_RPC_SVC_EXIST, key, klen, 0, MC_F_EXISTS);
}

int64_t store_dummy_get_size(mc_store_t *s, const void *key, size_t klen)
{
    return key_call(s, MC_RPC_SVC_GET_SIZE, key, klen, 0, MC_F_SIZE);
}

mc_status_t store_dummy_remove(mc_store_t *s, const void *key, size_t klen, int force)
{
    return (mc_status_t)key_call(s, MC_RPC_SVC_REMOVE, key, klen, force, 0);
}

int64_t store_dummy_remove_by_regex(mc_store_t *s, const char *regex, int force)
{
    mc_buf_t f = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &f);
    uint32_t nf = 1;
    mc_mp_write_uint(&w, MC_F_FORCE);
    mc_mp_write_bool(&w, force);
    if (regex != NULL) {
        mc_mp_write_uint(&w, MC_F_REGEX);
        mc_mp_write_cstr(&w, regex);
        nf++;
    }
    uint16_t m = regex != NULL ? MC_RPC_SVC_REMOVE_REGEX : MC_RPC_SVC_REMOVE_ALL;
    mc_status_t st = w.err != MC_OK ? w.err : call(s->svc, m, &f, nf, &resp);
    int64_t v = st == MC_OK ? answer_int(&resp, MC_F_COUNT, 0) : st;
    mc_buf_fini(&f);
    mc_buf_fini(&resp);
    return v;
}

/* Batch calls: KEYS (and PARTS); STATUSES into res. A bad key is
 * INVALID_KEY in its place (as the normal client answers) and stays out of
 * the call. */
static mc_status_t batch_call(mc_store_t *s, uint16_t method, const mc_slice_t *keys, size_t n,
                              const uint64_t *parts, int force, const mc_replicate_config_t *cfg,
                              int upsert, int64_t *res)
{
    if (keys == NULL || n == 0 || n > SVC_MAX_PARTS)
        return MC_ERR_INVALID_PARAMS;
    size_t nv = 0;
    for (size_t i = 0; i < n; i++) {
        int ok = key_ok(keys[i].ptr, keys[i].len);
        res[i] = ok ? MC_OK : MC_ERR_INVALID_KEY;
        nv += ok;
    }
    if (nv == 0)
        return MC_OK;
    mc_buf_t f = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &f);
    uint32_t nf = 2;
    mc_mp_write_uint(&w, MC_F_KEYS);
    mc_mp_write_array(&w, (uint32_t)nv);
    for (size_t i = 0; i < n; i++)
        if (res[i] == MC_OK)
            mc_mp_write_bin(&w, keys[i].ptr, keys[i].len);
    mc_mp_write_uint(&w, MC_F_FORCE);
    mc_mp_write_bool(&w, force);
    if (parts != NULL) {
        mc_mp_write_uint(&w, MC_F_SVC_PARTS);
        mc_mp_write_array(&w, (uint32_t)(2 * nv));
        for (size_t i = 0; i < n; i++)
            if (res[i] == MC_OK) {
                mc_mp_write_uint(&w, parts[2 * i]);
                mc_mp_write_uint(&w, parts[2 * i + 1]);
            }
        nf++;
    }
    if (cfg != NULL || upsert) {
        put_config(&w, cfg, upsert);
        nf++;
    }
    uint8_t *valid = NULL;
    if (nv < n) { /* which slots the answers go to */
        valid = mc_malloc(n);
        for (size_t i = 0; valid != NULL && i < n; i++)
            valid[i] = res[i] == MC_OK;
    }
    mc_status_t st = w.err != MC_OK     ? w.err
                     : nv < n && !valid ? MC_ERR_NOMEM
                                        : call(s->svc, method, &f, nf, &resp);
    if (st == MC_OK)
        st = answer_list(&resp, res, nv);
    /* the answers of the nv valid keys, back into their places (from the
     * end: an answer never moves left) */
    for (size_t i = n, j = nv; st == MC_OK && valid != NULL && i-- > 0;)
        res[i] = valid[i] ? res[--j] : MC_ERR_INVALID_KEY;
    mc_free(valid);
    mc_buf_fini(&f);
    mc_buf_fini(&resp);
    return st;
}

mc_status_t store_dummy_batch_exist(mc_store_t *s, const mc_slice_t *keys, size_t n, int *result)
{
    int64_t small[64], *res = n <= 64 ? small : mc_calloc(n, sizeof(*res));
    if (res == NULL)
        return MC_ERR_NOMEM;
    mc_status_t st = batch_call(s, MC_RPC_SVC_BATCH_EXIST, keys, n, NULL, 0, NULL, 0, res);
    for (size_t i = 0; st == MC_OK && i < n; i++)
        result[i] = (int)res[i];
    if (res != small)
        mc_free(res);
    return st;
}

mc_status_t store_dummy_batch_remove(mc_store_t *s, const mc_slice_t *keys, size_t n, int force,
                                     mc_status_t *sts)
{
    int64_t small[64], *res = n <= 64 ? small : mc_calloc(n, sizeof(*res));
    if (res == NULL)
        return MC_ERR_NOMEM;
    mc_status_t st = batch_call(s, MC_RPC_SVC_BATCH_REMOVE, keys, n, NULL, force, NULL, 0, res);
    for (size_t i = 0; st == MC_OK && i < n; i++)
        sts[i] = (mc_status_t)res[i];
    if (res != small)
        mc_free(res);
    return st;
}

#define STAGE_ROUND(len) (((len) + MC_OALLOC_ALIGN - 1) & ~(uint64_t)(MC_OALLOC_ALIGN - 1))

/* One batch call of n keys whose values outside our memory (`outside`
 * bytes, rounded) go through one staging range (put: copied in first; get:
 * copied out after). */
static mc_status_t batch_group(mc_store_t *s, int get, const mc_slice_t *keys,
                               const mc_slice_t *bufs, size_t n, uint64_t outside,
                               const mc_replicate_config_t *cfg, int upsert, int64_t *res)
{
    svc_client_t *c = s->svc;
    uint64_t *parts = mc_calloc(2 * n, sizeof(*parts));
    if (parts == NULL)
        return MC_ERR_NOMEM;
    mc_oalloc_handle_t h = {0, MC_OALLOC_NO_NODE};
    mc_status_t st = outside > 0 ? stage_get(c, outside, &h) : MC_OK;
    if (st != MC_OK) {
        mc_free(parts);
        return st;
    }
    uint64_t so = h.offset;
    for (size_t i = 0; i < n; i++) {
        if (in_region(c, bufs[i].ptr, bufs[i].len)) {
            parts[2 * i] = off_of(c, bufs[i].ptr, bufs[i].len);
        } else {
            parts[2 * i] = so;
            if (!get)
                memcpy((uint8_t *)c->mem.base + so, bufs[i].ptr, bufs[i].len);
            so += STAGE_ROUND(bufs[i].len);
        }
        parts[2 * i + 1] = bufs[i].len;
    }
    st = batch_call(s, get ? MC_RPC_SVC_BATCH_GET : MC_RPC_SVC_BATCH_PUT, keys, n, parts, 0, cfg,
                    upsert, res);
    for (size_t i = 0; get && st == MC_OK && i < n; i++)
        if (res[i] > 0 && !in_region(c, bufs[i].ptr, bufs[i].len))
            memcpy(bufs[i].ptr, (uint8_t *)c->mem.base + parts[2 * i], (size_t)res[i]);
    if (outside > 0)
        stage_put(c, h);
    mc_free(parts);
    return st;
}

/* Batch put/get: in calls whose values outside our memory fit the staging
 * buffer together (one call when they all do); a value that alone does not
 * fit is INVALID_PARAMS in its place (put it in pool memory). */
static mc_status_t batch_data(mc_store_t *s, int get, const mc_slice_t *keys,
                              const mc_slice_t *bufs, size_t n, const mc_replicate_config_t *cfg,
                              int upsert, int64_t *res)
{
    svc_client_t *c = s->svc;
    if (keys == NULL || bufs == NULL || n == 0 || n > SVC_MAX_PARTS)
        return MC_ERR_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++)
        if (bufs[i].ptr == NULL || bufs[i].len == 0)
            return MC_ERR_INVALID_PARAMS;
    mc_status_t st = MC_OK;
    for (size_t i = 0; i < n && st == MC_OK;) {
        uint64_t outside = 0;
        size_t j = i;
        for (; j < n; j++) {
            uint64_t need = in_region(c, bufs[j].ptr, bufs[j].len) ? 0 : STAGE_ROUND(bufs[j].len);
            if (outside + need > c->stage_len)
                break;
            outside += need;
        }
        if (j == i) { /* value i alone is larger than staging */
            mc_oalloc_handle_t none;
            res[i] = stage_get(c, bufs[i].len, &none); /* logs why: INVALID_PARAMS */
            i++;
            continue;
        }
        st = batch_group(s, get, keys + i, bufs + i, j - i, outside, cfg, upsert, res + i);
        i = j;
    }
    return st;
}

mc_status_t store_dummy_batch_put(mc_store_t *s, const mc_slice_t *keys, const mc_slice_t *values,
                                  size_t n, const mc_replicate_config_t *cfg, int upsert,
                                  mc_status_t *sts)
{
    int64_t small[64], *res = n <= 64 ? small : mc_calloc(n, sizeof(*res));
    if (res == NULL)
        return MC_ERR_NOMEM;
    mc_status_t st = batch_data(s, 0, keys, values, n, cfg, upsert, res);
    for (size_t i = 0; st == MC_OK && i < n; i++)
        sts[i] = (mc_status_t)res[i];
    if (res != small)
        mc_free(res);
    return st;
}

mc_status_t store_dummy_batch_get(mc_store_t *s, const mc_slice_t *keys, mc_slice_t *bufs, size_t n,
                                  int64_t *result)
{
    return batch_data(s, 1, keys, bufs, n, NULL, 0, result);
}

mc_status_t store_dummy_query(mc_store_t *s, const void *key, size_t klen, mc_store_replica_t *out,
                              uint32_t room, uint32_t *n)
{
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    mc_buf_t resp = MC_BUF_INIT;
    mc_status_t st = call_key(s, MC_RPC_SVC_QUERY, key, klen, -1, &resp);
    if (st != MC_OK) {
        mc_buf_fini(&resp);
        return st;
    }
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, mc_buf_head(&resp), mc_buf_used(&resp));
    uint32_t nf = mc_mp_read_map(&r), k = 0;
    *n = 0;
    for (uint32_t i = 0; i < nf && r.err == MC_OK; i++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_COUNT:
            *n = (uint32_t)mc_mp_read_uint(&r);
            break;
        case MC_F_REPLICAS: {
            uint32_t nr = mc_mp_read_array(&r);
            for (uint32_t j = 0; j < nr && r.err == MC_OK; j++) {
                mc_store_replica_t x;
                memset(&x, 0, sizeof(x));
                uint32_t nk = mc_mp_read_map(&r);
                for (uint32_t q = 0; q < nk && r.err == MC_OK; q++) {
                    switch (mc_mp_read_uint(&r)) {
                    case MC_F_NAME: {
                        uint32_t l = 0;
                        const char *nm = mc_mp_read_str(&r, &l);
                        if (r.err == MC_OK && l < sizeof(x.segment))
                            memcpy(x.segment, nm, l);
                        break;
                    }
                    case MC_F_ADDR:
                        x.address = mc_mp_read_uint(&r);
                        break;
                    case MC_F_SIZE:
                        x.size = mc_mp_read_uint(&r);
                        break;
                    case MC_F_STATUS:
                        x.complete = (int)mc_mp_read_uint(&r);
                        break;
                    case MC_F_EXISTS:
                        x.disk = mc_mp_read_bool(&r);
                        break;
                    default:
                        mc_mp_skip(&r);
                        break;
                    }
                }
                if (k < room && out != NULL)
                    out[k++] = x;
            }
            break;
        }
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    mc_buf_fini(&resp);
    return r.err == MC_OK ? MC_OK : MC_ERR_PROTOCOL;
}

const char *store_dummy_name(const mc_store_t *s)
{
    return s->svc->name;
}

/* ----------------------------------------------------------- async */

struct async_job {
    async_job_t *next;
    mc_reactor_msg_t msg; /* the callback, on our reactor */
    mc_store_t *s;
    int kind; /* 0 put, 1 get, 2 remove, 3 exist */
    void *key;
    size_t klen;
    const void *cbuf;
    void *buf;
    size_t len;
    int force;
    int has_cfg;
    mc_replicate_config_t cfg;
    mc_store_cb_t cb;
    mc_store_get_cb_t gcb;
    void *arg;
    int64_t result;
};

static void async_done(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    async_job_t *j = MC_CONTAINER_OF(msg, async_job_t, msg);
    svc_client_t *c = j->s->svc;
    (void)r;
    int64_t res = st == MC_OK ? j->result : MC_ERR_CANCELED;
    if (j->kind == 1)
        j->gcb(j->arg, res);
    else
        j->cb(j->arg, (mc_status_t)res);
    mc_free(j->key);
    mc_free(j);
    pthread_mutex_lock(&c->jmu);
    c->live--;
    pthread_cond_broadcast(&c->jcv);
    pthread_mutex_unlock(&c->jmu);
}

static void *helper_main(void *arg)
{
    svc_client_t *c = arg;
    pthread_mutex_lock(&c->jmu);
    for (;;) {
        while (c->jobs == NULL && !c->stopping)
            pthread_cond_wait(&c->jcv, &c->jmu);
        async_job_t *j = c->jobs;
        if (j == NULL)
            break;
        c->jobs = j->next;
        pthread_mutex_unlock(&c->jmu);
        mc_store_t *s = j->s;
        if (c->stopping) {
            j->result = MC_ERR_CANCELED;
        } else {
            switch (j->kind) {
            case 0: {
                mc_slice_t p = {(void *)j->cbuf, j->len};
                j->result =
                    store_dummy_put(s, j->key, j->klen, &p, 1, j->has_cfg ? &j->cfg : NULL, 0);
                break;
            }
            case 1:
                j->result = store_dummy_get(s, j->key, j->klen, j->buf, j->len, NULL);
                break;
            case 2:
                j->result = store_dummy_remove(s, j->key, j->klen, j->force);
                break;
            default:
                j->result = store_dummy_exist(s, j->key, j->klen);
                break;
            }
        }
        j->msg.fn = async_done;
        if (mc_reactor_post(c->r, &j->msg) != MC_OK) {
            /* the reactor is gone (closing): report here, canceled */
            j->result = MC_ERR_CANCELED;
            async_done(c->r, &j->msg, MC_OK);
        }
        pthread_mutex_lock(&c->jmu);
    }
    pthread_mutex_unlock(&c->jmu);
    return NULL;
}

mc_status_t store_dummy_async(mc_store_t *s, int kind, const void *key, size_t klen,
                              const void *cbuf, void *buf, size_t len, int force,
                              const mc_replicate_config_t *cfg, mc_store_cb_t cb,
                              mc_store_get_cb_t gcb, void *arg)
{
    svc_client_t *c = s->svc;
    if (!key_ok(key, klen))
        return MC_ERR_INVALID_KEY;
    if ((kind == 1 && gcb == NULL) || (kind != 1 && cb == NULL))
        return MC_ERR_INVALID_PARAMS;
    async_job_t *j = MC_NEW(async_job_t);
    void *k = mc_malloc(klen);
    if (j == NULL || k == NULL) {
        mc_free(j);
        mc_free(k);
        return MC_ERR_NOMEM;
    }
    memcpy(k, key, klen);
    *j = (async_job_t){.s = s,
                       .kind = kind,
                       .key = k,
                       .klen = klen,
                       .cbuf = cbuf,
                       .buf = buf,
                       .len = len,
                       .force = force,
                       .cb = cb,
                       .gcb = gcb,
                       .arg = arg};
    if (cfg != NULL) {
        j->cfg = *cfg; /* its names borrowed until the callback, as the buffers */
        j->has_cfg = 1;
    }
    pthread_mutex_lock(&c->jmu);
    if (c->stopping) {
        pthread_mutex_unlock(&c->jmu);
        mc_free(k);
        mc_free(j);
        return MC_ERR_CANCELED;
    }
    async_job_t **pp = &c->jobs;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = j;
    c->live++;
    pthread_cond_broadcast(&c->jcv);
    pthread_mutex_unlock(&c->jmu);
    return MC_INPROGRESS;
}

/* ------------------------------------------------------------ open/close */

/* "HOST:PORT" -> parts. */
static int split_addr(const char *a, char *host, size_t hl, uint16_t *port)
{
    const char *colon = strrchr(a, ':');
    if (colon == NULL || colon == a || (size_t)(colon - a) >= hl)
        return -1;
    char *end = NULL;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0' || p == 0 || p > 65535)
        return -1;
    memcpy(host, a, (size_t)(colon - a));
    host[colon - a] = '\0';
    *port = (uint16_t)p;
    return 0;
}

static void client_free(svc_client_t *c)
{
    if (c == NULL)
        return;
    if (c->helpers_up > 0) {
        pthread_mutex_lock(&c->jmu);
        c->stopping = 1;
        pthread_cond_broadcast(&c->jcv);
        pthread_mutex_unlock(&c->jmu);
        for (unsigned i = 0; i < c->helpers_up; i++)
            pthread_join(c->helper[i], NULL);
    }
    mc_rpc_client_destroy(c->rpc);
    mc_reactor_group_destroy(c->g);
    session_drop(c);
    mc_oalloc_destroy(c->stage);
    mc_shm_destroy(&c->mem);
    for (uint32_t i = 0; i < c->nxr; i++)
        close(c->xr[i].fd);
    pthread_rwlock_destroy(&c->xmu);
    pthread_mutex_destroy(&c->amu);
    pthread_cond_destroy(&c->acv);
    pthread_mutex_destroy(&c->smu);
    pthread_mutex_destroy(&c->chmu);
    pthread_mutex_destroy(&c->jmu);
    pthread_cond_destroy(&c->jcv);
    mc_free(c);
}

mc_status_t store_dummy_open(mc_store_t *s, const mc_store_config_t *cfg)
{
    svc_client_t *c = MC_NEW(svc_client_t);
    if (c == NULL)
        return MC_ERR_NOMEM;
    c->conn = -1;
    c->mem.fd = -1;
    pthread_rwlock_init(&c->xmu, NULL);
    pthread_mutex_init(&c->amu, NULL);
    pthread_cond_init(&c->acv, NULL);
    pthread_mutex_init(&c->smu, NULL);
    pthread_mutex_init(&c->chmu, NULL);
    pthread_mutex_init(&c->jmu, NULL);
    pthread_cond_init(&c->jcv, NULL);
    c->timeout_us = s->cfg.rpc_timeout_us;
    mc_status_t st = MC_ERR_INVALID_ARGUMENT;
    if (split_addr(cfg->service, c->host, sizeof(c->host), &c->port) != 0) {
        MC_ERROR(CLIENT, "bad service address '%s' (expected HOST:PORT of the store service)",
                 cfg->service);
        goto err;
    }
    if (cfg->global_segment_size > 0)
        MC_WARN(CLIENT,
                "a co-located client contributes no memory (global_segment_size %llu "
                "ignored): the service's segment holds the data",
                (unsigned long long)cfg->global_segment_size);
    snprintf(c->sock, sizeof(c->sock), SVC_SOCK_FMT, (unsigned)c->port);
    if (cfg->secret_file != NULL && cfg->secret_file[0] != '\0') {
        char why[512];
        if (mc_auth_key_load(cfg->secret_file, &c->key, why, sizeof(why)) != MC_OK) {
            MC_ERROR(CLIENT, "secret_file: %s", why);
            st = MC_ERR_INVALID_ARGUMENT;
            goto err;
        }
        c->has_key = 1;
    }
    c->stage_len = cfg->local_buffer_size & ~(uint64_t)(MC_OALLOC_ALIGN - 1);
    c->pool_len = cfg->mem_pool_size & ~(uint64_t)(MC_OALLOC_ALIGN - 1);
    if (c->stage_len + c->pool_len == 0) {
        MC_ERROR(CLIENT, "a co-located client needs local_buffer_size or mem_pool_size > 0: its "
                         "values travel through that shared memory");
        goto err;
    }
    /* values cross it by memcpy only, but a service that loads an object
     * from its offload disk reads it straight into pool memory (O_DIRECT):
     * in huge pages, as one large request */
    int huge = cfg->segment_hugepages ? MC_SHM_HUGETLB : MC_SHM_NORMAL;
    if ((st = mc_shm_create("mooncake-client", c->stage_len + c->pool_len, huge, &c->mem)) != MC_OK)
        goto err;
    c->next_off = (c->mem.len + XREG_ALIGN - 1) & ~(uint64_t)(XREG_ALIGN - 1);
    if (c->stage_len > 0 && (st = mc_oalloc_create(c->stage_len, 4096, &c->stage)) != MC_OK)
        goto err;
    if ((st = store_pool_setup(&s->pool, (uint8_t *)c->mem.base + c->stage_len, c->pool_len)) !=
        MC_OK)
        goto err;
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "dummy";
    if ((st = mc_reactor_group_create(&go, &c->g)) != MC_OK)
        goto err;
    c->r = mc_reactor_group_get(c->g, 0);
    mc_rpc_client_opts_t ro;
    mc_rpc_client_opts_init(&ro);
    ro.host = c->host;
    ro.port = c->port;
    ro.call_timeout_us = c->timeout_us;
    ro.connect_timeout_us = c->timeout_us < 3000000 ? c->timeout_us : 3000000;
    ro.backoff_max_us = 500000;
    ro.auth_key = c->has_key ? &c->key : NULL;
    if ((st = mc_rpc_client_create(c->r, &ro, &c->rpc)) != MC_OK)
        goto err;
    for (; c->helpers_up < DUMMY_ASYNC_THREADS; c->helpers_up++)
        if (pthread_create(&c->helper[c->helpers_up], NULL, helper_main, c) != 0) {
            st = MC_ERR_INTERNAL_ERROR;
            goto err;
        }
    s->svc = c;
    /* the first session now: a service that is not there is an error at
     * open (later outages fail calls and reconnect) */
    pthread_mutex_lock(&c->smu);
    st = session_ensure(c);
    pthread_mutex_unlock(&c->smu);
    if (st == MC_OK) {
        mc_buf_t resp = MC_BUF_INIT;
        st = call(c, MC_RPC_SVC_PING, NULL, 0, &resp);
        mc_buf_fini(&resp);
        if (st != MC_OK)
            MC_ERROR(CLIENT, "the store service at %s does not answer on its control port: %s",
                     cfg->service, mc_status_str(st));
    }
    if (st != MC_OK) {
        s->svc = NULL;
        goto err;
    }
    MC_INFO(CLIENT,
            "co-located store client of service '%s' (%s): staging %llu bytes, pool %llu bytes, "
            "shared",
            c->name, cfg->service, (unsigned long long)c->stage_len,
            (unsigned long long)c->pool_len);
    return MC_OK;
err:
    client_free(c);
    return st;
}

void store_dummy_close(mc_store_t *s)
{
    svc_client_t *c = s->svc;
    if (c == NULL)
        return;
    /* async calls queued: canceled by the helper; running ones finish */
    pthread_mutex_lock(&c->jmu);
    c->stopping = 1;
    pthread_cond_broadcast(&c->jcv);
    uint64_t end = mc_now_ms() + 10000;
    while (c->live > 0 && mc_now_ms() < end) {
        struct timespec ts = mc_timespec_in(CLOCK_REALTIME, 1000000);
        pthread_cond_timedwait(&c->jcv, &c->jmu, &ts);
    }
    pthread_mutex_unlock(&c->jmu);
    client_free(c); /* the session's end: the service unmaps our memory */
    s->svc = NULL;
}

/* ------------------------------------------------ registered buffers */

mc_status_t store_dummy_register(mc_store_t *s, void *buf, size_t len)
{
    svc_client_t *c = s->svc;
    if (in_region(c, buf, len))
        return MC_OK; /* shared already */
    struct xreg x = {0};
    void *base = NULL;
    if (!store_shared_find(buf, len, &base, &x.len, &x.fd)) {
        MC_INFO(CLIENT,
                "register_buffer %p+%zu: not memory shared with the service: values there are "
                "copied through staging (mc_store_alloc_from_mem_pool or mc_store_shared_alloc "
                "memory travels without a copy)",
                buf, len);
        return MC_OK;
    }
    x.base = base;
    mc_status_t st = MC_OK;
    pthread_mutex_lock(&c->smu);
    pthread_rwlock_wrlock(&c->xmu);
    int known = 0;
    for (uint32_t i = 0; i < c->nxr; i++)
        known |= c->xr[i].base == x.base;
    if (!known && c->nxr >= SVC_MAX_REGIONS - 1) {
        MC_ERROR(CLIENT,
                 "register_buffer %p+%zu: %u regions are shared with the service already "
                 "(at most %u): allocate fewer, larger ones",
                 buf, len, c->nxr, SVC_MAX_REGIONS - 1);
        st = MC_ERR_LIMIT;
    }
    pthread_rwlock_unlock(&c->xmu);
    if (known || st != MC_OK) {
        pthread_mutex_unlock(&c->smu);
        close(x.fd);
        return st;
    }
    x.off = c->next_off;
    /* the session's connection is ours under smu: tell the service now (a
     * session made later shares every region after its hello) */
    int refused = 0;
    if (c->conn >= 0 && (st = share_send(c->conn, &x, &refused)) != MC_OK && !refused) {
        session_drop(c); /* the service went: the next session shares it */
        st = MC_OK;
    }
    if (st == MC_OK) {
        c->next_off = (x.off + x.len + XREG_ALIGN - 1) & ~(uint64_t)(XREG_ALIGN - 1);
        pthread_rwlock_wrlock(&c->xmu);
        c->xr[c->nxr++] = x;
        pthread_rwlock_unlock(&c->xmu);
        MC_INFO(CLIENT,
                "register_buffer %p+%zu: %llu bytes of shared memory shared with the "
                "service: values there travel without a copy",
                buf, len, (unsigned long long)x.len);
    } else {
        close(x.fd); /* the service refused it (logged) */
    }
    pthread_mutex_unlock(&c->smu);
    return st;
}

mc_status_t store_dummy_unregister(mc_store_t *s, void *buf)
{
    svc_client_t *c = s->svc;
    /* calls stop naming it (the service keeps its mapping until the session
     * ends); an offset is never given out twice */
    pthread_rwlock_wrlock(&c->xmu);
    for (uint32_t i = 0; i < c->nxr; i++) {
        if (c->xr[i].base == buf) {
            close(c->xr[i].fd);
            c->xr[i] = c->xr[--c->nxr];
            break;
        }
    }
    pthread_rwlock_unlock(&c->xmu);
    return MC_OK;
}
