/*
 * engine.c - the transfer engine: lifetime, registered memory, the local
 * segment's descriptor and its publication, and the cache of peer segments.
 * See mooncake/transfer.h for the contract and te_int.h for the locking.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "rpc/fields.h"
#include "rpc/methods.h"
#include "transport/cuda.h"
#include "transport/te.h"
#include "transport/te_int.h"
#include "transport/location.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define PRETOUCH_MIN (64u << 20) /* regions from this size are pre-touched in parallel */
#define DESC_MAX_BUFFERS 65536

/* ------------------------------------------------------------- options */

void mc_te_opts_init_size(mc_te_opts_t *o, size_t struct_size)
{
    mc_te_opts_t d;
    memset(&d, 0, sizeof(d));
    d.struct_size = struct_size;
    d.metadata = "p2p";
    d.cluster = "default";
    d.listen_host = "0.0.0.0";
    d.advertise_host = "127.0.0.1";
    d.slice_size = 64 * 1024;
    d.timeout_us = 10000000;
    d.tcp_lanes = 2;
    /* the caller's struct may be older (shorter) than ours */
    memcpy(o, &d, struct_size < sizeof(d) ? struct_size : sizeof(d));
}

mc_status_t te_opts_full(const mc_te_opts_t *o, mc_te_opts_t *out)
{
    mc_te_opts_init(out);
    if (o->struct_size < offsetof(mc_te_opts_t, local_hostname) || o->struct_size > sizeof(*out)) {
        MC_ERROR(TRANSPORT,
                 "mc_te_opts_t.struct_size is %zu: not set by mc_te_opts_init, or from a newer "
                 "mooncake/transfer.h than this library's (%zu bytes)",
                 o->struct_size, sizeof(*out));
        return MC_ERR_INVALID_ARGUMENT;
    }
    memcpy(out, o, o->struct_size);
    out->struct_size = sizeof(*out);
    return MC_OK;
}

int te_on_reactor(mc_te_t *te)
{
    mc_reactor_t *cur = mc_reactor_current();
    for (unsigned i = 0; cur != NULL && i < te->nr; i++)
        if (te->rs[i] == cur)
            return 1;
    return 0;
}

/* --------------------------------------------------------- local buffers */

/* Index of the last buffer whose addr <= a, or -1. buf_lock held. */
static long buf_floor(const mc_te_t *te, uint64_t a)
{
    long lo = 0, hi = (long)te->nbufs - 1, ans = -1;
    while (lo <= hi) {
        long mid = (lo + hi) / 2;
        if (te->bufs[mid].addr <= a) {
            ans = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return ans;
}

long te_buf_index(mc_te_t *te, uint64_t a)
{
    long i = buf_floor(te, a);
    return i >= 0 && a < te->bufs[i].addr + te->bufs[i].len ? i : -1;
}

/* [addr, addr+len) inside one registered buffer (remote-accessible if asked).
 * Overflow of addr + len counts as outside. */
int te_local_range_ok(mc_te_t *te, const void *p, uint64_t len, int need_remote)
{
    uint64_t addr = (uint64_t)(uintptr_t)p;
    if (len == 0 || addr + len < addr)
        return 0;
    pthread_rwlock_rdlock(&te->buf_lock);
    long i = buf_floor(te, addr);
    int ok = i >= 0 && addr + len <= te->bufs[i].addr + te->bufs[i].len &&
             (!need_remote || te->bufs[i].remote);
    pthread_rwlock_unlock(&te->buf_lock);
    return ok;
}

int te_needs_local_reg(const mc_te_t *te)
{
    /* RDMA posts need an lkey; tcp and local move bytes from any memory */
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (te_tp_on(te, id) && (te_transports[id]->flags & TE_TP_LOCAL_REG))
            return 1;
    return 0;
}

typedef struct touch_job {
    uint8_t *p;
    size_t len;
} touch_job_t;

static void *touch_thread(void *arg)
{
    touch_job_t *j = arg;
    long page = sysconf(_SC_PAGESIZE);
    /* MADV_POPULATE_WRITE (Linux 5.14) faults pages in without changing
     * them. Refused (memory that is not writable, or not mapped; a kernel
     * before 5.14): nothing is done, the pages fault in at first use. (It
     * wrote each page's first byte back to itself then: a SIGSEGV on
     * read-only memory, and a write lost to a racing writer.) */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    uintptr_t start = (uintptr_t)j->p & ~(uintptr_t)(page - 1);
    (void)madvise((void *)start, j->len + ((uintptr_t)j->p - start), MADV_POPULATE_WRITE);
    return NULL;
}

/* Fault in a large region with one thread per CPU, so the first transfers
 * do not pay for page faults (and NUMA first-touch places it now). */
static void pretouch(void *addr, size_t len)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (len < PRETOUCH_MIN || ncpu < 1)
        return;
    if (ncpu > 16)
        ncpu = 16;
    pthread_t th[16];
    touch_job_t jobs[16];
    size_t part = (len / (size_t)ncpu + 4095) & ~(size_t)4095;
    int started = 0;
    for (long i = 0; i < ncpu; i++) {
        size_t off = (size_t)i * part;
        if (off >= len)
            break;
        jobs[i].p = (uint8_t *)addr + off;
        jobs[i].len = off + part > len ? len - off : part;
        if (pthread_create(&th[started], NULL, touch_thread, &jobs[i]) != 0) {
            touch_thread(&jobs[i]);
            continue;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
}

static mc_status_t publish(mc_te_t *te);

/* Insert n buffers, all or nothing. buf_lock held for writing. */
static mc_status_t bufs_insert(mc_te_t *te, const mc_te_buffer_t *v, size_t n, const char *loc,
                               int remote)
{
    for (size_t k = 0; k < n; k++) {
        uint64_t a = (uint64_t)(uintptr_t)v[k].addr, l = v[k].len;
        if (v[k].addr == NULL || l == 0 || a + l < a)
            return MC_ERR_INVALID_ARGUMENT;
        long i = buf_floor(te, a + l - 1);
        if (i >= 0 && te->bufs[i].addr + te->bufs[i].len > a)
            return MC_ERR_ADDRESS_OVERLAPPED;
        for (size_t j = 0; j < k; j++) {
            uint64_t b = (uint64_t)(uintptr_t)v[j].addr;
            if (a < b + v[j].len && b < a + l)
                return MC_ERR_ADDRESS_OVERLAPPED;
        }
    }
    if (te->nbufs + n > te->cap_bufs) {
        size_t cap = te->cap_bufs ? te->cap_bufs : 16;
        while (cap < te->nbufs + n)
            cap *= 2;
        te_buf_t *nb = mc_realloc(te->bufs, cap * sizeof(*nb));
        if (nb == NULL)
            return MC_ERR_NOMEM;
        te->bufs = nb;
        te->cap_bufs = cap;
    }
    for (size_t k = 0; k < n; k++) {
        uint64_t a = (uint64_t)(uintptr_t)v[k].addr;
        long i = buf_floor(te, a) + 1;
        memmove(&te->bufs[i + 1], &te->bufs[i], (te->nbufs - (size_t)i) * sizeof(te_buf_t));
        te_buf_t *b = &te->bufs[i];
        memset(b, 0, sizeof(*b));
        b->addr = a;
        b->len = v[k].len;
        b->remote = remote;
        snprintf(b->location, sizeof(b->location), "%s", loc);
        te->nbufs++;
    }
    return MC_OK;
}

/* cuda:N memory is checked buffer by buffer (transport/cuda.c). */
static mc_status_t check_location(const char *loc, const mc_te_buffer_t *bufs, size_t n)
{
    if (strncmp(loc, "cpu:", 4) == 0)
        return MC_OK;
    if (strncmp(loc, "cuda:", 5) == 0) {
        for (size_t k = 0; k < n; k++) {
            mc_status_t st = te_cuda_check(loc, bufs[k].addr, bufs[k].len);
            if (st != MC_OK)
                return st;
        }
        return MC_OK;
    }
    MC_ERROR(TRANSPORT, "bad memory location '%s' (expected cpu:N or cuda:N)", loc);
    return MC_ERR_INVALID_ARGUMENT;
}

/* The installed transports' registrations of a buffer undone. buf_lock
 * held for writing. */
static void dereg_all(mc_te_t *te, te_buf_t *b)
{
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (te_tp_on(te, id) && te_transports[id]->dereg_buf != NULL)
            te_transports[id]->dereg_buf(te, b);
}

/* The installed transports register the buffers just inserted (rdma: one
 * MR per NIC); on failure they are taken out again (all or nothing).
 * buf_lock held for writing. */
static mc_status_t tp_reg_new(mc_te_t *te, const mc_te_buffer_t *v, size_t n)
{
    mc_status_t st = MC_OK;
    for (unsigned id = 0; id < TE_TP_COUNT && st == MC_OK; id++) {
        const te_transport_ops_t *ops = te_transports[id];
        if (!te_tp_on(te, id) || ops->reg_bufs == NULL)
            continue;
        for (size_t k = 0; k < n && st == MC_OK; k++)
            st = ops->reg_bufs(te, &te->bufs[buf_floor(te, (uint64_t)(uintptr_t)v[k].addr)], 1);
    }
    if (st == MC_OK)
        return MC_OK;
    for (size_t j = 0; j < n; j++) {
        long i = buf_floor(te, (uint64_t)(uintptr_t)v[j].addr);
        dereg_all(te, &te->bufs[i]);
        memmove(&te->bufs[i], &te->bufs[i + 1], (te->nbufs - (size_t)i - 1) * sizeof(te_buf_t));
        te->nbufs--;
    }
    return st;
}

mc_status_t mc_te_register_batch(mc_te_t *te, const mc_te_buffer_t *bufs, size_t n,
                                 const char *location, int remote_accessible)
{
    if (n == 0)
        return MC_OK;
    if (bufs == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    /* NULL or upstream's wildcard "*": where the memory (of the first buffer)
     * is: cuda:N for GPU memory, else cpu:<its NUMA node> */
    char detected[TE_LOCATION_MAX];
    const char *loc = location;
    if (loc == NULL || strcmp(loc, "*") == 0) {
        te_location_detect(bufs[0].addr, bufs[0].len, detected, sizeof(detected));
        loc = detected;
    }
    mc_status_t st = check_location(loc, bufs, n);
    if (st != MC_OK)
        return st;
    /* fault large regions in first (in parallel): the NICs' registrations
     * then pin pages that exist */
    if (strncmp(loc, "cuda:", 5) != 0)
        for (size_t k = 0; k < n; k++)
            if (bufs[k].addr != NULL)
                pretouch(bufs[k].addr, bufs[k].len);
    pthread_rwlock_wrlock(&te->buf_lock);
    st = bufs_insert(te, bufs, n, loc, remote_accessible);
    if (st == MC_OK)
        st = tp_reg_new(te, bufs, n);
    atomic_fetch_add(&te->buf_gen, 1);
    if (st == MC_OK && strncmp(loc, "cuda:", 5) == 0)
        atomic_store(&te->has_cuda, 1);
    pthread_rwlock_unlock(&te->buf_lock);
    if (st != MC_OK) {
        if (st == MC_ERR_ADDRESS_OVERLAPPED)
            MC_ERROR(TRANSPORT, "register: range overlaps a registered buffer");
        return st;
    }
    return remote_accessible ? publish(te) : MC_OK;
}

mc_status_t mc_te_register(mc_te_t *te, void *addr, size_t len, const char *location,
                           int remote_accessible)
{
    mc_te_buffer_t b = {addr, len};
    return mc_te_register_batch(te, &b, 1, location, remote_accessible);
}

mc_status_t mc_te_unregister(mc_te_t *te, void *addr)
{
    uint64_t a = (uint64_t)(uintptr_t)addr;
    pthread_rwlock_wrlock(&te->buf_lock);
    long i = buf_floor(te, a);
    if (i < 0 || te->bufs[i].addr != a) {
        pthread_rwlock_unlock(&te->buf_lock);
        return MC_ERR_ADDRESS_NOT_REGISTERED;
    }
    int remote = te->bufs[i].remote;
    dereg_all(te, &te->bufs[i]);
    atomic_fetch_add(&te->buf_gen, 1);
    memmove(&te->bufs[i], &te->bufs[i + 1], (te->nbufs - (size_t)i - 1) * sizeof(te_buf_t));
    te->nbufs--;
    pthread_rwlock_unlock(&te->buf_lock);
    return remote ? publish(te) : MC_OK;
}

/* ----------------------------------------------------------- descriptors */

/* Encode this engine's descriptor: the remote-accessible buffers, and each
 * installed transport's field (rdma: MC_F_RDMA, and MC_F_RKEYS per buffer;
 * peers that do not know a field skip it: new fields, same format). */
void te_desc_encode(mc_te_t *te, mc_mp_writer_t *w)
{
    pthread_rwlock_rdlock(&te->buf_lock);
    uint32_t nremote = 0, nfields = 5, nproto = 0;
    for (size_t i = 0; i < te->nbufs; i++)
        nremote += te->bufs[i].remote != 0;
    for (unsigned id = 0; id < TE_TP_COUNT; id++) {
        if (!te_tp_on(te, id))
            continue;
        nproto++;
        nfields += te_transports[id]->desc_key != 0;
    }
    mc_mp_write_map(w, nfields);
    mc_mp_write_uint(w, MC_F_NAME);
    mc_mp_write_cstr(w, te->name);
    mc_mp_write_uint(w, MC_F_HOST);
    mc_mp_write_cstr(w, te->advertise_host);
    mc_mp_write_uint(w, MC_F_PORT);
    mc_mp_write_uint(w, te->port);
    /* tcp first, as before the table (some tools print the list) */
    mc_mp_write_uint(w, MC_F_PROTOCOLS);
    mc_mp_write_array(w, nproto);
    mc_mp_write_cstr(w, "tcp");
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (te_tp_on(te, id) && id != TE_TP_TCP)
            mc_mp_write_cstr(w, te_transports[id]->name);
    for (unsigned id = 0; id < TE_TP_COUNT; id++) {
        const te_transport_ops_t *ops = te_transports[id];
        if (te_tp_on(te, id) && ops->desc_key != 0) {
            mc_mp_write_uint(w, ops->desc_key);
            ops->desc_encode(te, w);
        }
    }
    mc_mp_write_uint(w, MC_F_BUFFERS);
    mc_mp_write_array(w, nremote);
    for (size_t i = 0; i < te->nbufs; i++) {
        const te_buf_t *b = &te->bufs[i];
        if (!b->remote)
            continue;
        unsigned extra = 0;
        for (unsigned id = 0; id < TE_TP_COUNT; id++)
            if (te_tp_on(te, id) && te_transports[id]->buf_nfields != NULL)
                extra += te_transports[id]->buf_nfields(te, b);
        mc_mp_write_map(w, 3 + extra);
        mc_mp_write_uint(w, MC_F_ADDR);
        mc_mp_write_uint(w, b->addr);
        mc_mp_write_uint(w, MC_F_LENGTH);
        mc_mp_write_uint(w, b->len);
        mc_mp_write_uint(w, MC_F_LOCATION);
        mc_mp_write_cstr(w, b->location);
        for (unsigned id = 0; id < TE_TP_COUNT && extra > 0; id++)
            if (te_tp_on(te, id) && te_transports[id]->buf_nfields != NULL &&
                te_transports[id]->buf_nfields(te, b) > 0)
                te_transports[id]->buf_encode(te, b, w);
    }
    pthread_rwlock_unlock(&te->buf_lock);
}

static void copy_str(mc_mp_reader_t *r, char *dst, size_t room)
{
    uint32_t len = 0;
    const char *s = mc_mp_read_str(r, &len);
    if (r->err == MC_OK && len < room) {
        memcpy(dst, s, len);
        dst[len] = '\0';
    } else {
        r->err = MC_ERR_PROTOCOL;
    }
}

/* A transport whose descriptor field is `key`, or -1. */
static int tp_of_key(uint64_t key)
{
    for (int id = 0; id < TE_TP_COUNT; id++)
        if (te_transports[id]->desc_key != 0 && te_transports[id]->desc_key == key)
            return id;
    return -1;
}

static void peers_free(void **peers)
{
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (peers[id] != NULL)
            te_transports[id]->peer_free(peers[id]);
}

/* One buffer of a peer's descriptor: the engine's fields, and those the
 * transports know (every transport of the table reads its own, installed
 * or not: the view is kept for when it is). */
static void buf_decode(mc_mp_reader_t *r, te_buf_t *b)
{
    uint32_t nf = mc_mp_read_map(r);
    for (uint32_t f = 0; f < nf && r->err == MC_OK; f++) {
        uint64_t key = mc_mp_read_uint(r);
        switch (key) {
        case MC_F_ADDR:
            b->addr = mc_mp_read_uint(r);
            break;
        case MC_F_LENGTH:
            b->len = mc_mp_read_uint(r);
            break;
        case MC_F_LOCATION:
            copy_str(r, b->location, sizeof(b->location));
            break;
        default: {
            int used = 0;
            for (unsigned id = 0; id < TE_TP_COUNT && !used && r->err == MC_OK; id++)
                if (te_transports[id]->buf_decode != NULL)
                    used = te_transports[id]->buf_decode(key, r, b);
            if (!used)
                mc_mp_skip(r);
            break;
        }
        }
    }
    b->remote = 1;
}

/* Decode a peer's descriptor into seg (host, port, buffers, the transports'
 * views); seg_lock held when seg is shared. All or nothing. */
mc_status_t te_desc_decode(mc_te_t *te, te_seg_t *seg, const uint8_t *p, size_t len)
{
    mc_mp_reader_t r;
    te_buf_t *bufs = NULL;
    uint32_t nb = 0;
    char host[64] = "";
    uint16_t port = 0;
    void *peers[TE_TP_COUNT] = {0};
    te_retired_t *ret[TE_TP_COUNT] = {0};
    mc_mp_reader_init(&r, p, len);
    uint32_t n = mc_mp_read_map(&r);
    for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
        uint64_t key = mc_mp_read_uint(&r);
        int tp;
        switch (key) {
        case MC_F_HOST:
            copy_str(&r, host, sizeof(host));
            break;
        case MC_F_PORT:
            port = (uint16_t)mc_mp_read_uint(&r);
            break;
        case MC_F_BUFFERS:
            nb = mc_mp_read_array(&r);
            if (nb > DESC_MAX_BUFFERS) {
                r.err = MC_ERR_PROTOCOL;
                break;
            }
            mc_free(bufs);
            bufs = mc_calloc(nb ? nb : 1, sizeof(*bufs));
            if (bufs == NULL) {
                r.err = MC_ERR_NOMEM;
                break;
            }
            for (uint32_t k = 0; k < nb && r.err == MC_OK; k++)
                buf_decode(&r, &bufs[k]);
            break;
        default:
            if ((tp = tp_of_key(key)) < 0) {
                mc_mp_skip(&r);
                break;
            }
            if (peers[tp] != NULL)
                te_transports[tp]->peer_free(peers[tp]);
            peers[tp] = NULL;
            if (te_transports[tp]->desc_decode(te, &r, &peers[tp]) != MC_OK && r.err == MC_OK)
                r.err = MC_ERR_PROTOCOL;
            break;
        }
    }
    for (unsigned id = 0; id < TE_TP_COUNT && r.err == MC_OK; id++) {
        if (peers[id] != NULL && te_transports[id]->desc_check != NULL &&
            te_transports[id]->desc_check(peers[id], bufs, nb) != MC_OK)
            r.err = MC_ERR_PROTOCOL;
        /* a view it replaces is kept until the segment goes */
        if (seg->tp[id] != NULL && (ret[id] = MC_NEW(te_retired_t)) == NULL)
            r.err = MC_ERR_NOMEM;
    }
    if (r.err != MC_OK || host[0] == '\0' || port == 0) {
        peers_free(peers);
        for (unsigned id = 0; id < TE_TP_COUNT; id++)
            mc_free(ret[id]);
        mc_free(bufs);
        MC_ERROR(TRANSPORT, "segment '%s': malformed descriptor", seg->name);
        return MC_ERR_MALFORMED;
    }
    mc_free(seg->bufs);
    seg->bufs = bufs;
    seg->nbufs = nb;
    atomic_fetch_add(&seg->desc_gen, 1); /* path caches (rdma) look again */
    for (unsigned id = 0; id < TE_TP_COUNT; id++) {
        if (ret[id] != NULL) {
            ret[id]->tp = id;
            ret[id]->peer = seg->tp[id];
            ret[id]->next = seg->retired;
            seg->retired = ret[id];
        }
        /* atomic: transports' reactors read it without seg_lock (rdma_ep.c) */
        __atomic_store_n(&seg->tp[id], peers[id], __ATOMIC_RELEASE);
    }
    if (strcmp(seg->host, host) != 0 || seg->port != port)
        atomic_fetch_add(&seg->gen, 1); /* lanes follow (tcp.c) */
    snprintf(seg->host, sizeof(seg->host), "%s", host);
    seg->port = port;
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (te_transports[id]->seg_described != NULL)
            te_transports[id]->seg_described(te, seg);
    return MC_OK;
}

void te_seg_free(mc_te_t *te, te_seg_t *seg)
{
    if (seg == NULL)
        return;
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (te_transports[id]->seg_release != NULL)
            te_transports[id]->seg_release(te, seg);
    for (unsigned k = 0; k < seg->nlanes; k++)
        mc_rpc_client_destroy(seg->lanes[k]);
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (seg->tp[id] != NULL)
            te_transports[id]->peer_free(seg->tp[id]);
    while (seg->retired != NULL) {
        te_retired_t *x = seg->retired;
        seg->retired = x->next;
        te_transports[x->tp]->peer_free(x->peer);
        mc_free(x);
    }
    mc_free(seg->bufs);
    mc_free(seg->name);
    mc_free(seg);
}

/* (te_int.h) */
void te_meta_key(const mc_te_t *te, const char *kind, const char *name, char *out, size_t len)
{
    snprintf(out, len, "mc/%s/%s/%s", te->cluster, kind, name);
}

/* The two published values: the descriptor under mc/<cluster>/seg/<name>
 * and {HOST, PORT} under mc/<cluster>/rpc/<name>. */
mc_status_t te_publish_encode(mc_te_t *te, mc_buf_t *seg_val, mc_buf_t *rpc_val)
{
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, seg_val);
    te_desc_encode(te, &w);
    if (w.err != MC_OK)
        return w.err;
    mc_mp_writer_init(&w, rpc_val);
    mc_mp_write_map(&w, 2);
    mc_mp_write_uint(&w, MC_F_HOST);
    mc_mp_write_cstr(&w, te->advertise_host);
    mc_mp_write_uint(&w, MC_F_PORT);
    mc_mp_write_uint(&w, te->port);
    return w.err;
}

/* Publish the descriptor and RPC address (metadata modes). On the thread
 * that runs the engine's loop (an attached host thread, or a reactor) a
 * blocking call would wait for that very loop: publish asynchronously there
 * (the backend retries until it is stored). */
static mc_status_t publish(mc_te_t *te)
{
    if (te->meta == NULL)
        return MC_OK;
    if (te->attached != NULL || te_on_reactor(te))
        return te_publish_async(te);
    mc_buf_t sv = MC_BUF_INIT, rv = MC_BUF_INIT;
    char key[512];
    mc_status_t st = te_publish_encode(te, &sv, &rv);
    if (st == MC_OK) {
        te_meta_key(te, "seg", te->name, key, sizeof(key));
        st = mc_meta_put_sync(te->meta, key, mc_buf_head(&sv), mc_buf_used(&sv));
    }
    if (st == MC_OK) {
        te_meta_key(te, "rpc", te->name, key, sizeof(key));
        st = mc_meta_put_sync(te->meta, key, mc_buf_head(&rv), mc_buf_used(&rv));
    }
    mc_buf_fini(&sv);
    mc_buf_fini(&rv);
    if (st == MC_ERR_ILLEGAL_CLIENT) {
        /* another live process holds the name (the backend logged it and
         * retries until that one expires); a store node's mount is refused
         * too and it stops, naming the holder */
        MC_WARN(TRANSPORT, "segment '%s' not published yet: the name is another process's",
                te->name);
        return MC_OK;
    }
    if (st != MC_OK) {
        MC_ERROR(TRANSPORT, "cannot publish segment '%s': %s", te->name, mc_status_str(st));
        return MC_ERR_METADATA;
    }
    return MC_OK;
}

/* Serve our descriptor (p2p mode, and refreshes). */
static void h_desc(void *ctx, mc_rpc_req_t *req)
{
    mc_te_t *te = ctx;
    mc_mp_writer_t *w = mc_rpc_reply_begin(req);
    te_desc_encode(te, w);
    mc_rpc_reply_end(req, MC_OK);
}

/* ------------------------------------------------------------- segments */

te_seg_t *te_seg_get(mc_te_t *te, mc_te_segment_t id)
{
    te_seg_t *s = NULL;
    pthread_mutex_lock(&te->seg_lock);
    if (id >= 1 && id <= te->nsegs)
        s = te->segs[id - 1];
    pthread_mutex_unlock(&te->seg_lock);
    return s;
}

int te_seg_range_ok(mc_te_t *te, te_seg_t *seg, uint64_t addr, uint64_t len)
{
    int ok = 0;
    if (len == 0 || addr + len < addr)
        return 0;
    pthread_mutex_lock(&te->seg_lock);
    for (size_t i = 0; i < seg->nbufs && !ok; i++)
        ok = addr >= seg->bufs[i].addr && addr + len <= seg->bufs[i].addr + seg->bufs[i].len;
    pthread_mutex_unlock(&te->seg_lock);
    return ok;
}

/* Wait (bounded) for what the transports started when seg was described
 * (shm: mapping the owner's memory), so the next submit uses it. Blocking:
 * not on a reactor. */
static void seg_settle(mc_te_t *te, te_seg_t *seg)
{
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (te_tp_on(te, id) && te_transports[id]->seg_wait != NULL)
            te_transports[id]->seg_wait(te, seg,
                                        te->o.timeout_us < 3000000 ? te->o.timeout_us : 3000000);
}

/* Fetch the segment's descriptor again (blocking: not on a reactor). */
mc_status_t te_seg_refresh(mc_te_t *te, te_seg_t *seg)
{
    mc_buf_t b = MC_BUF_INIT;
    mc_status_t st;
    if (te->meta != NULL) {
        char key[512];
        te_meta_key(te, "seg", seg->name, key, sizeof(key));
        st = mc_meta_get_sync(te->meta, key, &b);
    } else {
        st = mc_rpc_call_sync(seg->lanes[0], MC_RPC_TE_DESC, NULL, 0, te->o.timeout_us, &b);
    }
    if (st == MC_OK) {
        pthread_mutex_lock(&te->seg_lock);
        st = te_desc_decode(te, seg, mc_buf_head(&b), mc_buf_used(&b));
        pthread_mutex_unlock(&te->seg_lock);
        if (st == MC_OK)
            seg_settle(te, seg);
    } else {
        MC_WARN(TRANSPORT, "cannot fetch the descriptor of segment '%s': %s", seg->name,
                mc_status_str(st));
    }
    mc_buf_fini(&b);
    return st;
}

/* (te_int.h) */
int te_split_host_port(const char *name, char *host, size_t hl, uint16_t *port)
{
    const char *c = strrchr(name, ':');
    if (c == NULL || c == name || (size_t)(c - name) >= hl)
        return -1;
    char *end = NULL;
    unsigned long p = strtoul(c + 1, &end, 10);
    if (end == c + 1 || *end != '\0' || p == 0 || p > 65535)
        return -1;
    memcpy(host, name, (size_t)(c - name));
    host[c - name] = '\0';
    *port = (uint16_t)p;
    return 0;
}

mc_status_t mc_te_open_segment(mc_te_t *te, const char *name, mc_te_segment_t *out)
{
    if (name == NULL || *name == '\0' || strlen(name) > 255)
        return MC_ERR_INVALID_ARGUMENT;
    if (strcmp(name, te->name) == 0) {
        *out = MC_TE_LOCAL_SEGMENT;
        return MC_OK;
    }
    if (te_on_reactor(te))
        return MC_ERR_STATE; /* blocking lookups are not for reactor threads */
    pthread_mutex_lock(&te->seg_lock);
    for (size_t i = 0; i < te->nsegs; i++) {
        if (strcmp(te->segs[i]->name, name) == 0) {
            te->segs[i]->refs++;
            *out = te->segs[i]->id;
            pthread_mutex_unlock(&te->seg_lock);
            return MC_OK;
        }
    }
    pthread_mutex_unlock(&te->seg_lock);

    te_seg_t *seg = MC_NEW(te_seg_t);
    if (seg == NULL || (seg->name = mc_strdup(name)) == NULL) {
        mc_free(seg);
        return MC_ERR_NOMEM;
    }
    mc_status_t st = MC_OK;
    if (te->meta == NULL) {
        if (te_split_host_port(name, seg->host, sizeof(seg->host), &seg->port) != 0) {
            MC_ERROR(TRANSPORT, "segment '%s': with metadata = p2p a segment is named HOST:PORT",
                     name);
            st = MC_ERR_INVALID_ARGUMENT;
        } else {
            st = te_tcp_lanes_open(te, seg);
            if (st == MC_OK)
                st = te_seg_refresh(te, seg);
        }
    } else {
        st = te_seg_refresh(te, seg);
        if (st == MC_OK)
            st = te_tcp_lanes_open(te, seg);
    }
    if (st != MC_OK) {
        te_seg_free(te, seg);
        return st;
    }
    pthread_mutex_lock(&te->seg_lock);
    if (te->nsegs == te->cap_segs) {
        size_t cap = te->cap_segs ? te->cap_segs * 2 : 8;
        te_seg_t **ns = mc_realloc(te->segs, cap * sizeof(*ns));
        if (ns == NULL) {
            pthread_mutex_unlock(&te->seg_lock);
            te_seg_free(te, seg);
            return MC_ERR_NOMEM;
        }
        te->segs = ns;
        te->cap_segs = cap;
    }
    te->segs[te->nsegs++] = seg;
    seg->id = te->nsegs;
    seg->refs = 1;
    pthread_mutex_unlock(&te->seg_lock);
    MC_DEBUG(TRANSPORT, "segment '%s' open as %llu: %s:%u, %zu buffer(s)", name,
             (unsigned long long)seg->id, seg->host, seg->port, seg->nbufs);
    *out = seg->id;
    return MC_OK;
}

mc_status_t mc_te_close_segment(mc_te_t *te, mc_te_segment_t id)
{
    if (id == MC_TE_LOCAL_SEGMENT)
        return MC_OK;
    mc_status_t st = MC_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&te->seg_lock);
    if (id <= te->nsegs && te->segs[id - 1]->refs > 0) {
        te->segs[id - 1]->refs--; /* the record stays: slices may point at it */
        st = MC_OK;
    }
    pthread_mutex_unlock(&te->seg_lock);
    return st;
}

/* ---------------------------------------------------------- life cycle */

mc_status_t mc_te_install_transport(mc_te_t *te, const char *proto)
{
    if (proto == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    int id = te_tp_find(proto);
    if (id < 0) {
        char names[128] = "";
        size_t used = 0;
        for (unsigned i = 0; i < TE_TP_COUNT && used < sizeof(names); i++)
            used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "",
                                     te_transports[i]->name);
        MC_ERROR(TRANSPORT, "unknown transport '%s' (expected one of %s)", proto, names);
        return MC_ERR_INVALID_ARGUMENT;
    }
    if (te_tp_on(te, (unsigned)id))
        return MC_OK;
    const te_transport_ops_t *ops = te_transports[id];
    mc_status_t st = ops->install(te);
    if (st != MC_OK)
        return st;
    /* it takes the buffers registered so far, and is on for those to come
     * (under buf_lock: no registration slips between) */
    pthread_rwlock_wrlock(&te->buf_lock);
    if (ops->reg_bufs != NULL)
        st = ops->reg_bufs(te, te->bufs, te->nbufs);
    if (st == MC_OK) {
        te->tp_on |= 1u << id;
        atomic_fetch_add(&te->buf_gen, 1);
    }
    pthread_rwlock_unlock(&te->buf_lock);
    if (st != MC_OK) {
        if (ops->shutdown != NULL)
            ops->shutdown(te);
        if (ops->free != NULL)
            ops->free(te);
        return st;
    }
    if (te->nbufs > 0 && ops->desc_key != 0)
        publish(te); /* the descriptor now carries its field */
    return MC_OK;
}

const char *mc_te_local_name(const mc_te_t *te)
{
    return te->name;
}

uint16_t mc_te_port(const mc_te_t *te)
{
    return te->port;
}

static void te_free(mc_te_t *te)
{
    /* handshakes stop arriving, then the NICs' endpoints go on their
     * reactors; their contexts after the reactors stopped */
    mc_rpc_server_destroy(te->srv);
    te->srv = NULL;
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (te_tp_on(te, id) && te_transports[id]->shutdown != NULL)
            te_transports[id]->shutdown(te);
    for (size_t i = 0; i < te->nsegs; i++)
        te_seg_free(te, te->segs[i]);
    mc_free(te->segs);
    mc_rpc_server_destroy(te->srv);
    mc_meta_close(te->meta);
    if (te->attached != NULL)
        mc_reactor_detach(te->attached);
    mc_reactor_group_destroy(te->g);
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (te_tp_on(te, id) && te_transports[id]->free != NULL)
            te_transports[id]->free(te);
    pthread_rwlock_destroy(&te->buf_lock);
    pthread_mutex_destroy(&te->seg_lock);
    mc_free(te->bufs);
    mc_free(te->rs);
    mc_free(te->name);
    mc_free(te->cluster);
    mc_free(te->metadata);
    mc_free(te->listen_host);
    mc_free(te->advertise_host);
    mc_free(te);
}

/* The engine's struct from options o (defaults d): checked options, the
 * strings copied, the owner id chosen. MC_OK and *out, or an error. */
static mc_status_t te_new(const mc_te_opts_t *o, const mc_te_opts_t *d, mc_te_t **out)
{
    if (o->slice_size < 4096 || o->tcp_lanes == 0 || o->tcp_lanes > TE_MAX_LANES) {
        MC_ERROR(TRANSPORT, "bad options: slice_size must be >= 4096 and tcp_lanes 1..%d",
                 TE_MAX_LANES);
        return MC_ERR_INVALID_ARGUMENT;
    }
    static _Atomic uint64_t next_uid = 1;
    mc_te_t *te = MC_NEW(mc_te_t);
    if (te == NULL)
        return MC_ERR_NOMEM;
    te->uid = atomic_fetch_add(&next_uid, 1);
    te->o = *o;
    if (te->o.timeout_us == 0)
        te->o.timeout_us = d->timeout_us;
    /* A slice travels as one frame payload, and slices are up to 1.25 x
     * slice_size (batch.c): larger ones would make the peer drop the
     * connection (frame limit), failing every slice on it. */
    mc_frame_limits_t lim;
    mc_frame_limits_init(&lim);
    uint64_t slice_max = (uint64_t)lim.max_payload / 5 * 4;
    if (te->o.slice_size > slice_max) {
        MC_WARN(TRANSPORT, "slice_size %llu is over the frame payload limit: using %llu",
                (unsigned long long)te->o.slice_size, (unsigned long long)slice_max);
        te->o.slice_size = slice_max;
    }
    pthread_rwlock_init(&te->buf_lock, NULL);
    pthread_mutex_init(&te->seg_lock, NULL);
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (te_transports[id]->flags & TE_TP_BUILTIN)
            te->tp_on |= 1u << id;
    te->cluster = mc_strdup(o->cluster ? o->cluster : d->cluster);
    te->metadata = mc_strdup(o->metadata ? o->metadata : d->metadata);
    te->listen_host = mc_strdup(o->listen_host ? o->listen_host : d->listen_host);
    te->advertise_host = mc_strdup(o->advertise_host ? o->advertise_host : d->advertise_host);
    if (te->cluster == NULL || te->metadata == NULL || te->listen_host == NULL ||
        te->advertise_host == NULL) {
        te_free(te);
        return MC_ERR_NOMEM;
    }
    te->o.secret_file = NULL; /* the caller's string; the key is what we keep */
    if (o->secret_file != NULL && o->secret_file[0] != '\0') {
        char why[256];
        if (mc_auth_key_load(o->secret_file, &te->key, why, sizeof(why)) != MC_OK) {
            MC_ERROR(TRANSPORT, "secret_file: %s", why);
            te_free(te);
            return MC_ERR_INVALID_ARGUMENT;
        }
        te->has_key = 1;
    }
    if (te->o.owner_hi == 0 && te->o.owner_lo == 0) {
        uint64_t id[2];
        if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
            id[0] = (uint64_t)getpid();
            id[1] = mc_now_ns();
        }
        te->o.owner_hi = id[0] | 1; /* never the zero id */
        te->o.owner_lo = id[1];
    }
    *out = te;
    return MC_OK;
}

/* The engine's reactors: the host's (attach mode) or a group of its own. */
static mc_status_t te_start_reactors(mc_te_t *te, const mc_te_opts_t *o)
{
    mc_status_t st;
    if (o->host_base != NULL) {
        st = mc_reactor_attach(o->host_base, "te", &te->attached);
        if (st != MC_OK)
            return st;
        te->nr = 1;
    } else {
        mc_reactor_group_opts_t go;
        mc_reactor_group_opts_init(&go);
        go.count = o->reactors;
        go.name = "te";
        st = mc_reactor_group_create(&go, &te->g);
        if (st != MC_OK)
            return st;
        te->nr = mc_reactor_group_count(te->g);
    }
    te->rs = mc_calloc(te->nr, sizeof(*te->rs));
    if (te->rs == NULL)
        return MC_ERR_NOMEM;
    for (unsigned i = 0; i < te->nr; i++)
        te->rs[i] = te->attached ? te->attached : mc_reactor_group_get(te->g, i);
    return MC_OK;
}

/* The RPC server on every reactor (descriptor and the transports' methods)
 * and the engine's name: local_hostname, else ADVERTISE_HOST:PORT. */
static mc_status_t te_start_server(mc_te_t *te, const mc_te_opts_t *o)
{
    mc_rpc_server_opts_t so;
    mc_rpc_server_opts_init(&so);
    so.bind_addr = te->listen_host;
    so.port = o->listen_port;
    so.auth_key = te_auth_key(te);
    mc_status_t st = mc_rpc_server_create(te->rs, te->nr, &so, &te->srv);
    if (st != MC_OK)
        return st;
    mc_rpc_server_register(te->srv, MC_RPC_TE_DESC, h_desc, te);
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if (te_transports[id]->register_server != NULL)
            te_transports[id]->register_server(te);
    st = mc_rpc_server_start(te->srv);
    if (st != MC_OK)
        return st;
    te->port = mc_rpc_server_port(te->srv);
    char name[300];
    if (o->local_hostname != NULL && o->local_hostname[0] != '\0')
        snprintf(name, sizeof(name), "%s", o->local_hostname);
    else
        snprintf(name, sizeof(name), "%s:%u", te->advertise_host, te->port);
    return (te->name = mc_strdup(name)) != NULL ? MC_OK : MC_ERR_NOMEM;
}

/* Transports on by default (shm): a failure only leaves one out. */
static void te_install_auto(mc_te_t *te)
{
    for (unsigned id = 0; id < TE_TP_COUNT; id++)
        if ((te_transports[id]->flags & TE_TP_AUTO) && te_transports[id]->install(te) == MC_OK)
            te->tp_on |= 1u << id;
}

/* The metadata backend (not in p2p mode), and the first publication. */
static mc_status_t te_open_meta(mc_te_t *te)
{
    if (strcmp(te->metadata, "p2p") == 0 || strcmp(te->metadata, "") == 0 ||
        strcmp(te->metadata, "P2PHANDSHAKE") == 0)
        return MC_OK;
    mc_meta_opts_t mo;
    mc_meta_opts_init(&mo);
    mo.owner_hi = te->o.owner_hi;
    mo.owner_lo = te->o.owner_lo;
    mo.auth_key = te_auth_key(te);
    mo.call_timeout_us = te->o.timeout_us < 5000000 ? te->o.timeout_us : 5000000;
    mc_status_t st = mc_meta_open(te->metadata, te->rs[0], &mo, &te->meta);
    if (st != MC_OK)
        return st;
    if (publish(te) != MC_OK)
        MC_WARN(TRANSPORT, "segment '%s' not published yet; the metadata backend retries",
                te->name);
    return MC_OK;
}

mc_status_t mc_te_create(const mc_te_opts_t *o, mc_te_t **out)
{
    mc_log_env_once(); /* MC_LOG_LEVEL, before the first line of a host program */
    mc_te_opts_t d, full;
    mc_te_opts_init(&d);
    if (o == NULL)
        o = &d;
    mc_status_t st = te_opts_full(o, &full); /* the fields an older caller lacks: defaults */
    if (st != MC_OK)
        return st;
    o = &full;
    mc_te_t *te;
    st = te_new(o, &d, &te);
    if (st != MC_OK)
        return st;
    st = te_start_reactors(te, o);
    if (st == MC_OK)
        st = te_start_server(te, o);
    if (st == MC_OK) {
        te_install_auto(te); /* before the first publication: its descriptor field */
        st = te_open_meta(te);
    }
    if (st != MC_OK) {
        te_free(te);
        return st;
    }
    MC_INFO(TRANSPORT, "transfer engine '%s' listening on %s:%u, metadata %s, %u reactor(s)",
            te->name, te->listen_host, te->port, te->metadata, te->nr);
    *out = te;
    return MC_OK;
}

void mc_te_destroy(mc_te_t *te)
{
    if (te == NULL)
        return;
    atomic_store(&te->stopping, 1);
    /* Unpublish, unless that would block the host's loop (attach mode): then
     * the entries go with our owner id's expiry (master) or their TTL (redis). */
    if (te->meta != NULL && te->attached == NULL) {
        char key[512];
        te_meta_key(te, "seg", te->name, key, sizeof(key));
        mc_meta_del_sync(te->meta, key);
        te_meta_key(te, "rpc", te->name, key, sizeof(key));
        mc_meta_del_sync(te->meta, key);
    }
    te_free(te);
}
