/*
 * client.c - the store client's life cycle (mooncake/store.h): open and
 * close, the segments it contributes (mount at open or at run time, unmount,
 * re-mount after the master lost or expired it), the ping that notices that,
 * and registered buffers. The operations live in client_put.c,
 * client_put_batch.c, client_get.c and client_op.c; client_int.h describes the threads.
 *
 * Liveness. A timer on reactor 0 pings the master every second with the
 * client id (the transfer engine's owner id, so the master's metadata
 * entries and the segments have one owner). The answer carries the master's
 * view version and our status. NEED_REMOUNT (the master restarted, or
 * expired us after a silence) or a new view version makes the client
 * ReMountSegment with every segment it has; after a NEED_REMOUNT the engine's
 * descriptor is published again too (the expiry deleted it; the metadata
 * backend re-publishes by itself only when it sees the new view first). A
 * client that contributes nothing remounts with none, which registers it.
 *
 * Master down at open: the engine and the segment are set up anyway and the
 * mount is left to the first ping that reaches the master; calls fail with
 * MC_ERR_CONN_CLOSED / MC_ERR_RPC_TIMEOUT within rpc_timeout until then.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "reactor/fsm.h"
#include "rpc/methods.h"
#include "store/client_int.h"
#include "store/master_client.h"
#include "util/conf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/shm.h"
#include "util/time.h"

#define PING_INTERVAL_US 1000000
#define STAGE_MAX_ALLOCS 4096
/* Unmounting at close: the master may be gone; do not wait for long. */
#define CLOSE_UNMOUNT_TIMEOUT_US 2000000
/* Longest wait for an unmount's drain (readers' leases) at run time. */
#define DRAIN_WAIT_MAX_US 60000000ull
/* Wait for the last operations' callbacks at close (all are failed by then). */
#define CLOSE_DRAIN_MS 10000

void mc_store_config_init_size(mc_store_config_t *c, size_t struct_size)
{
    mc_store_config_t d;
    memset(&d, 0, sizeof(d));
    d.struct_size = struct_size;
    d.metadata = "master";
    d.protocol = "tcp";
    d.master = "127.0.0.1:50051";
    d.advertise_host = "127.0.0.1";
    d.local_buffer_size = 64ull << 20;
    d.rpc_timeout_us = 5000000;
    d.transfer_timeout_us = 10000000;
    d.tier_queue_bytes = 256ull << 20;
    /* the caller's struct may be older (shorter) than ours */
    memcpy(c, &d, struct_size < sizeof(d) ? struct_size : sizeof(d));
}

mc_status_t store_config_full(const mc_store_config_t *c, mc_store_config_t *out)
{
    mc_store_config_init(out);
    if (c->struct_size < offsetof(mc_store_config_t, local_hostname) ||
        c->struct_size > sizeof(*out)) {
        MC_ERROR(CLIENT,
                 "mc_store_config_t.struct_size is %zu: not set by mc_store_config_init, or "
                 "from a newer mooncake/store.h than this library's (%zu bytes)",
                 c->struct_size, sizeof(*out));
        return MC_ERR_INVALID_ARGUMENT;
    }
    memcpy(out, c, c->struct_size);
    out->struct_size = sizeof(*out);
    if (store_env_hugepages() != MC_SHM_NORMAL)
        out->segment_hugepages = 1; /* upstream's switch, in the environment */
    return MC_OK;
}

void mc_replicate_config_init_size(mc_replicate_config_t *c, size_t struct_size)
{
    mc_replicate_config_t d;
    memset(&d, 0, sizeof(d));
    d.struct_size = struct_size;
    d.replica_num = 1;
    /* the caller's struct may be older (shorter) than ours */
    memcpy(c, &d, struct_size < sizeof(d) ? struct_size : sizeof(d));
}

mc_status_t store_replicate_config_full(const mc_replicate_config_t *c, mc_replicate_config_t *out)
{
    mc_replicate_config_init(out);
    if (c->struct_size < offsetof(mc_replicate_config_t, replica_num) ||
        c->struct_size > sizeof(*out)) {
        MC_ERROR(CLIENT,
                 "put: mc_replicate_config_t.struct_size is %zu: not set by "
                 "mc_replicate_config_init, or from a newer mooncake/store.h than this "
                 "library's (%zu bytes)",
                 c->struct_size, sizeof(*out));
        return MC_ERR_INVALID_PARAMS;
    }
    memcpy(out, c, c->struct_size);
    out->struct_size = sizeof(*out);
    return MC_OK;
}

const char *mc_store_name(const mc_store_t *s)
{
    if (s != NULL && s->svc != NULL)
        return store_dummy_name(s); /* the service's segment: where our data lives */
    return s != NULL ? mc_te_local_name(s->te) : NULL;
}

void *mc_store_alloc_from_mem_pool(mc_store_t *s, size_t size)
{
    return s != NULL ? store_pool_alloc(&s->pool, size) : NULL;
}

mc_status_t mc_store_free_to_mem_pool(mc_store_t *s, void *p)
{
    return s != NULL && p != NULL ? store_pool_free(&s->pool, p) : MC_ERR_INVALID_ARGUMENT;
}

static int attached(const mc_store_t *s)
{
    return mc_reactor_is_attached(s->r0);
}

/* "HOST:PORT" (or "HOST": 50051). */
static int parse_master(const char *addr, char *host, size_t hl, uint16_t *port)
{
    const char *c = strrchr(addr, ':');
    size_t n = c != NULL ? (size_t)(c - addr) : strlen(addr);
    if (n == 0 || n >= hl)
        return -1;
    memcpy(host, addr, n);
    host[n] = '\0';
    *port = 50051;
    if (c != NULL) {
        char *end = NULL;
        unsigned long p = strtoul(c + 1, &end, 10);
        if (end == c + 1 || *end != '\0' || p == 0 || p > 65535)
            return -1;
        *port = (uint16_t)p;
    }
    return 0;
}

static int transient(mc_status_t st)
{
    return st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT || st == MC_ERR_TIMEOUT ||
           st == MC_ERR_SOCKET;
}

static void seg_desc(const mc_store_t *s, const store_seg_t *g, mc_master_segment_t *out)
{
    out->id = g->id;
    out->name = mc_te_local_name(s->te);
    out->te_endpoint = mc_te_local_name(s->te);
    out->base = (uint64_t)(uintptr_t)g->base;
    out->size = g->size;
}

/* ------------------------------------------------------------- segments */

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << 26) /* log2(2 MiB) << MAP_HUGE_SHIFT */
#endif

/* Memory for a segment (ours when buf is NULL), registered remote-accessible
 * (segment_hugepages: hugetlb pages when the pool has them). A descriptor
 * that cannot be published now (MC_ERR_METADATA: the metadata service is
 * away) is published by the backend when it is back. */
static mc_status_t seg_create(mc_store_t *s, void *buf, uint64_t len, store_seg_t **out)
{
    store_seg_t *g = MC_NEW(store_seg_t);
    if (g == NULL)
        return MC_ERR_NOMEM;
    mc_list_init(&g->node);
    if (getrandom(&g->id, sizeof(g->id), 0) != (ssize_t)sizeof(g->id)) {
        g->id.hi = (uint64_t)getpid();
        g->id.lo = mc_now_ns();
    }
    g->id.hi |= 1; /* never {0,0} */
    g->size = len;
    void *shm = NULL;
    mc_status_t st = MC_ERR_NOT_SUPPORTED;
    if (buf == NULL && s->shm) {
        /* same-host peers reach it with memcpy (the shm transport) */
        /* a node's offload loads read files straight into its segment: in
         * 2 MiB pages a 4 MiB O_DIRECT read goes to the device as one
         * request of two runs, in scattered 4 KiB pages as several of
         * up to max_segments runs (perf/results/offload_thp.txt) */
        int huge = s->cfg.segment_hugepages ? MC_TE_HUGE_HUGETLB
                   : s->offload != NULL     ? MC_TE_HUGE_THP
                                            : MC_TE_HUGE_NONE;
        if ((st = mc_te_alloc_shared(s->te, len, huge, &shm)) == MC_OK) {
            g->base = shm;
            g->shared = 1;
        } else if (st != MC_ERR_NOT_SUPPORTED) {
            mc_free(g); /* out of memory or a limit: the log says which */
            return st;
        }
    }
    if (buf == NULL && shm == NULL) {
        void *p = MAP_FAILED;
        if (s->cfg.segment_hugepages) {
            g->map_len = mc_shm_huge_round(len); /* MAP_HUGE_2MB */
            p = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB, -1, 0);
            if (p == MAP_FAILED)
                MC_WARN(CLIENT,
                        "segment_hugepages: no %llu bytes of hugetlb pages free (%s; "
                        "/proc/sys/vm/nr_hugepages): the segment uses normal pages",
                        (unsigned long long)g->map_len, strerror(errno));
        }
        if (p == MAP_FAILED) {
            long page = sysconf(_SC_PAGESIZE);
            g->map_len = (len + (uint64_t)page - 1) & ~(uint64_t)(page - 1);
            p = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p != MAP_FAILED && (s->offload != NULL || s->cfg.segment_hugepages))
                madvise(p, g->map_len, MADV_HUGEPAGE); /* as above, where THP is on */
        }
        if (p == MAP_FAILED) {
            MC_ERROR(CLIENT, "cannot map a segment of %llu bytes: %s", (unsigned long long)len,
                     strerror(errno));
            mc_free(g);
            return MC_ERR_NOMEM;
        }
        g->base = p;
    } else if (buf != NULL) {
        g->base = buf;
    }
    st = mc_te_register(s->te, g->base, len, "cpu:0", 1);
    if (st == MC_ERR_METADATA)
        st = MC_OK;
    if (st != MC_OK) {
        MC_ERROR(CLIENT, "cannot register a segment of %llu bytes at %p: %s",
                 (unsigned long long)len, (void *)g->base, mc_status_str(st));
        if (g->map_len > 0)
            munmap(g->base, g->map_len);
        if (g->shared)
            mc_te_free_shared(s->te, g->base);
        mc_free(g);
        return st;
    }
    *out = g;
    return MC_OK;
}

static void seg_destroy(mc_store_t *s, store_seg_t *g, int unregister)
{
    if (unregister)
        mc_te_unregister(s->te, g->base);
    if (g->map_len > 0)
        munmap(g->base, g->map_len);
    if (g->shared && s->te != NULL) /* else it went with the engine */
        mc_te_free_shared(s->te, g->base);
    mc_free(g);
}

static mc_status_t mount_sync(mc_store_t *s, const store_seg_t *g)
{
    mc_master_segment_t d;
    mc_buf_t body = MC_BUF_INIT;
    mc_mp_writer_t w;
    seg_desc(s, g, &d);
    mc_mp_writer_init(&w, &body);
    mc_mcli_mount(&w, s->client_id, &d);
    mc_buf_t resp = MC_BUF_INIT;
    mc_status_t st =
        w.err != MC_OK ? w.err : store_call_sync(s, MC_RPC_MOUNT_SEGMENT, &body, &resp);
    const void *why = NULL;
    size_t wl = 0;
    if (st != MC_OK && mc_buf_used(&resp) > 0 &&
        mc_mcli_dec_bytes(mc_buf_head(&resp), mc_buf_used(&resp), MC_F_ERROR, &why, &wl) == MC_OK)
        MC_ERROR(CLIENT, "mounting segment '%s' refused: %s: %.*s", d.name, mc_status_str(st),
                 (int)wl, (const char *)why);
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return st;
}

/* UnmountSegment; *drain_us (may be NULL) receives the master's drain delay. */
static mc_status_t unmount_sync(mc_store_t *s, const store_seg_t *g, uint64_t timeout_us,
                                uint64_t *drain_us)
{
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_unmount(&w, s->client_id, g->id);
    mc_status_t st = w.err;
    if (st == MC_OK)
        st = store_call_sync_timeout(s, MC_RPC_UNMOUNT_SEGMENT, &body, &resp, timeout_us);
    int64_t drain = 0;
    if (st == MC_OK && drain_us != NULL &&
        mc_mcli_dec_int(mc_buf_head(&resp), mc_buf_used(&resp), MC_F_DRAIN_UNTIL_US, &drain) ==
            MC_OK &&
        drain > 0)
        *drain_us = (uint64_t)drain;
    if (st == MC_ERR_SEGMENT_NOT_FOUND)
        st = MC_OK; /* the master forgot it already (restart, expiry) */
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return st;
}

mc_status_t mc_store_mount_segment(mc_store_t *s, void *buf, size_t len)
{
    if (s == NULL || len < 8)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL) {
        MC_ERROR(CLIENT, "a co-located client mounts no segment: its service's segment holds "
                         "the data (mount memory in the service: store.global_segment_size)");
        return MC_ERR_NOT_SUPPORTED;
    }
    if (store_on_reactor(s))
        return MC_ERR_STATE;
    store_seg_t *g;
    mc_status_t st = seg_create(s, buf, len, &g);
    if (st != MC_OK)
        return st;
    st = mount_sync(s, g);
    if (st != MC_OK) {
        MC_ERROR(CLIENT, "cannot mount a segment of %zu bytes: %s", len, mc_status_str(st));
        if (transient(st)) /* it may have been mounted after all */
            unmount_sync(s, g, s->cfg.rpc_timeout_us, NULL);
        seg_destroy(s, g, 1);
        return st;
    }
    pthread_mutex_lock(&s->seg_mu);
    mc_list_push_tail(&s->segs, &g->node);
    pthread_mutex_unlock(&s->seg_mu);
    MC_INFO(CLIENT, "segment '%s': mounted %zu bytes at %p", mc_te_local_name(s->te), len,
            (void *)g->base);
    return MC_OK;
}

mc_status_t mc_store_unmount_segment(mc_store_t *s, void *buf)
{
    if (s == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL)
        return MC_ERR_NOT_SUPPORTED; /* it mounted none */
    if (store_on_reactor(s))
        return MC_ERR_STATE;
    /* buf, or (NULL) every segment the library mapped itself */
    mc_list_t mine;
    mc_list_init(&mine);
    pthread_mutex_lock(&s->seg_mu);
    for (mc_list_t *n = s->segs.next, *next; n != &s->segs; n = next) {
        next = n->next;
        store_seg_t *g = MC_CONTAINER_OF(n, store_seg_t, node);
        if (buf != NULL ? g->base == buf : g->map_len > 0) {
            mc_list_del(&g->node); /* remounts no longer include it */
            mc_list_push_tail(&mine, &g->node);
        }
    }
    pthread_mutex_unlock(&s->seg_mu);
    if (mc_list_empty(&mine))
        return MC_ERR_SEGMENT_NOT_FOUND;
    uint64_t drain = 0;
    mc_status_t rc = MC_OK;
    for (mc_list_t *n = mine.next, *next; n != &mine; n = next) {
        next = n->next;
        store_seg_t *g = MC_CONTAINER_OF(n, store_seg_t, node);
        uint64_t d = 0;
        mc_status_t st = unmount_sync(s, g, s->cfg.rpc_timeout_us, &d);
        if (st != MC_OK) {
            /* still ours: back on the list, so a later call can retry */
            MC_ERROR(CLIENT, "cannot unmount the segment at %p: %s", (void *)g->base,
                     mc_status_str(st));
            mc_list_del(&g->node);
            pthread_mutex_lock(&s->seg_mu);
            mc_list_push_tail(&s->segs, &g->node);
            pthread_mutex_unlock(&s->seg_mu);
            rc = st;
            continue;
        }
        if (d > drain)
            drain = d;
    }
    /* Readers granted a lease before the unmount may still be reading. */
    if (drain > 0)
        usleep((useconds_t)(drain < DRAIN_WAIT_MAX_US ? drain : DRAIN_WAIT_MAX_US));
    mc_list_t *n;
    while ((n = mc_list_pop_head(&mine)) != NULL) {
        store_seg_t *g = MC_CONTAINER_OF(n, store_seg_t, node);
        MC_INFO(CLIENT, "segment '%s': unmounted %llu bytes at %p", mc_te_local_name(s->te),
                (unsigned long long)g->size, (void *)g->base);
        seg_destroy(s, g, 1);
    }
    return rc;
}

/* ---------------------------------------------------- master discovery */

#define RESOLVE_PERIOD_MS 5000  /* look again even when nothing went wrong */
#define RESOLVE_RETRY_US 100000 /* while there is no leader */

static void ping_fire(mc_timer_t *t, void *arg);

typedef struct retarget_msg {
    mc_store_t *s;
    char addr[MC_HA_ADDR_MAX];
} retarget_msg_t;

static void retarget_on_r0(mc_reactor_t *r, void *arg, mc_status_t st)
{
    retarget_msg_t *m = arg;
    mc_store_t *s = m->s;
    (void)r;
    char host[MC_HA_ADDR_MAX];
    uint16_t port;
    if (st == MC_OK && s->mcli != NULL && !atomic_load(&s->closing) &&
        parse_master(m->addr, host, sizeof(host), &port) == 0) {
        MC_INFO(CLIENT, "master leader of cluster '%s' is now %s", s->ha_url.cluster, m->addr);
        /* the embedded metadata service moves with the leader */
        if (strcmp(s->metadata, "master") == 0 && te_meta_retarget(s->te, host, port) != MC_OK)
            MC_WARN(CLIENT, "the transfer metadata backend cannot follow the leader to %s",
                    m->addr);
        if (mc_rpc_client_retarget(s->mcli, host, port) == MC_OK) {
            store_master_addr_set(s, host, port);
            store_retry_run(s);
            ping_fire(&s->ping_timer, s); /* know at once whether it knows us */
        }
    }
    mc_free(m);
}

void store_master_addr_set(mc_store_t *s, const char *host, uint16_t port)
{
    pthread_mutex_lock(&s->res_mu);
    snprintf(s->mc_host, sizeof(s->mc_host), "%s", host);
    s->mc_port = port;
    s->mc_gen++;
    pthread_mutex_unlock(&s->res_mu);
}

void store_master_trouble(mc_store_t *s)
{
    if (!s->ha)
        return;
    pthread_mutex_lock(&s->res_mu);
    s->res_kick = 1;
    pthread_cond_signal(&s->res_cv);
    pthread_mutex_unlock(&s->res_mu);
}

/* The resolver thread: blocking Redis reads, never on a reactor. */
static void *resolver_main(void *arg)
{
    mc_store_t *s = arg;
    pthread_mutex_lock(&s->res_mu);
    while (!s->res_stop) {
        if (!s->res_kick) {
            struct timespec ts = mc_timespec_in(CLOCK_REALTIME, (uint64_t)RESOLVE_PERIOD_MS * 1000);
            pthread_cond_timedwait(&s->res_cv, &s->res_mu, &ts);
            if (s->res_stop)
                break;
        }
        int kicked = s->res_kick;
        s->res_kick = 0;
        pthread_mutex_unlock(&s->res_mu);
        char addr[MC_HA_ADDR_MAX];
        int64_t view = 0;
        mc_status_t st = mc_ha_resolve_leader(&s->ha_url, 500000, addr, sizeof(addr), &view);
        if (st == MC_OK && strcmp(addr, s->res_addr) != 0) {
            retarget_msg_t *m = MC_NEW(retarget_msg_t);
            if (m != NULL) {
                m->s = s;
                snprintf(m->addr, sizeof(m->addr), "%s", addr);
                if (mc_reactor_call(s->r0, retarget_on_r0, m) == MC_OK)
                    snprintf(s->res_addr, sizeof(s->res_addr), "%s", addr);
                else
                    mc_free(m);
            }
        } else if (st != MC_OK && kicked) {
            /* no leader yet (election under way) or Redis away: look again soon */
            MC_DEBUG(CLIENT, "no master leader in redis yet: %s", mc_status_str(st));
            usleep(RESOLVE_RETRY_US);
            pthread_mutex_lock(&s->res_mu);
            s->res_kick = 1;
            continue;
        }
        pthread_mutex_lock(&s->res_mu);
    }
    pthread_mutex_unlock(&s->res_mu);
    return NULL;
}

/* At open: the leader's address, waiting up to timeout for one to exist. */
static mc_status_t resolve_at_open(mc_store_t *s, uint64_t timeout_us, char *addr, size_t n)
{
    uint64_t deadline = mc_now_us() + timeout_us;
    mc_status_t st;
    for (;;) {
        st = mc_ha_resolve_leader(&s->ha_url, 500000, addr, n, NULL);
        if (st == MC_OK || st == MC_ERR_INVALID_PARAMS || mc_now_us() >= deadline)
            return st;
        usleep(RESOLVE_RETRY_US);
    }
}

static void stop_resolver(mc_store_t *s)
{
    if (!s->resolver_started)
        return;
    pthread_mutex_lock(&s->res_mu);
    s->res_stop = 1;
    pthread_cond_signal(&s->res_cv);
    pthread_mutex_unlock(&s->res_mu);
    pthread_join(s->resolver, NULL);
    s->resolver_started = 0;
}

static void retry_fire(mc_timer_t *t, void *arg)
{
    (void)t;
    store_retry_run(arg);
}

/* -------------------------------------------------------- ping, remount */

static const char *const reg_names[STORE_NREG] = {"UNREGISTERED", "MOUNTING", "REGISTERED"};
static const uint64_t reg_moves[STORE_NREG] = {
    [STORE_UNREGISTERED] = MC_FSM_BIT(STORE_MOUNTING),
    [STORE_MOUNTING] = MC_FSM_BIT(STORE_REGISTERED) | MC_FSM_BIT(STORE_UNREGISTERED),
    [STORE_REGISTERED] = MC_FSM_BIT(STORE_UNREGISTERED),
};
static const mc_fsm_desc_t reg_fsm =
    MC_FSM_DESC("store_registration", MC_LOGC_CLIENT, reg_names, reg_moves);

/* The only writer of s->reg (r0; open sets the first state before the
 * ping timer runs). An illegal move is a bug: logged and refused. */
static void set_reg(mc_store_t *s, store_reg_t to)
{
    if (s->reg != to)
        (void)MC_FSM_SET(&reg_fsm, s, reg, to);
}

/* The master does not know us (any more): mount at the next chance, with
 * an INFO line when loud. A ReMount in flight registers us anyway. */
static void want_mount(mc_store_t *s, int loud)
{
    if (s->reg == STORE_REGISTERED)
        set_reg(s, STORE_UNREGISTERED);
    s->mount_loud |= loud;
}

static void remount_cb(void *arg, const mc_rpc_resp_t *resp)
{
    mc_store_t *s = arg;
    if (resp->status != MC_OK) {
        set_reg(s, STORE_UNREGISTERED);
        if (resp->status != MC_ERR_CANCELED)
            MC_WARN(CLIENT, "re-mount at the master failed: %s; retrying at the next ping",
                    mc_status_str(resp->status));
        return;
    }
    size_t n = 0;
    pthread_mutex_lock(&s->seg_mu);
    for (mc_list_t *l = s->segs.next; l != &s->segs; l = l->next)
        n++;
    pthread_mutex_unlock(&s->seg_mu);
    if (n > 0 && s->mount_loud)
        MC_INFO(CLIENT, "segment '%s': %zu segment(s) mounted at the master",
                mc_te_local_name(s->te), n);
    else
        MC_DEBUG(CLIENT, "re-mounted %zu segment(s) at the master", n);
    set_reg(s, STORE_REGISTERED);
    s->mount_loud = 0;
    te_publish_async(s->te);
}

/* UNREGISTERED: send our segments (ReMount) and wait in MOUNTING. */
void store_remount(mc_store_t *s)
{
    if (s->reg != STORE_UNREGISTERED || s->mcli == NULL || atomic_load(&s->closing))
        return;
    mc_master_segment_t small[8], *d = small;
    size_t n = 0, cap = MC_ARRAY_SIZE(small);
    pthread_mutex_lock(&s->seg_mu);
    for (mc_list_t *l = s->segs.next; l != &s->segs; l = l->next)
        n++;
    if (n > cap && (d = mc_calloc(n, sizeof(*d))) == NULL) {
        pthread_mutex_unlock(&s->seg_mu);
        return; /* retried at the next ping */
    }
    size_t k = 0;
    for (mc_list_t *l = s->segs.next; l != &s->segs; l = l->next)
        seg_desc(s, MC_CONTAINER_OF(l, store_seg_t, node), &d[k++]);
    mc_mcli_remount(mc_rpc_call_begin(s->mcli), s->client_id, d, k);
    pthread_mutex_unlock(&s->seg_mu);
    if (d != small)
        mc_free(d);
    if (mc_rpc_call_end(s->mcli, MC_RPC_REMOUNT_SEGMENT, s->cfg.rpc_timeout_us, remount_cb, s) ==
        MC_INPROGRESS)
        set_reg(s, STORE_MOUNTING);
}

/* The master forgot our segments (it expired us, or restarted): before
 * they are mounted again, and the master places new objects in them, no
 * write of a put it forgot may land any more. Such a put's writer gave up
 * (a timeout, a lost connection) and left its space to the master, which
 * kept it reserved; the master that forgot the put hands that space out
 * again, and the old bytes, still in flight (a partition that healed, a
 * closed socket's retransmissions), would overwrite a new object there
 * (wrong bytes for a get, without an error). So every connection peers
 * have open to our port is closed and read no more (te_fence_inbound);
 * writers connect again. r0, before the ReMount is sent. 1 when it fenced
 * (we have segments). */
static int store_fence_segments(mc_store_t *s)
{
    size_t n = 0;
    pthread_mutex_lock(&s->seg_mu);
    for (mc_list_t *l = s->segs.next; l != &s->segs; l = l->next)
        n++;
    pthread_mutex_unlock(&s->seg_mu);
    if (n == 0)
        return 0;
    te_fence_inbound(s->te);
    return 1;
}

static void ping_cb(void *arg, const mc_rpc_resp_t *resp)
{
    mc_store_t *s = arg;
    s->ping_inflight = 0;
    if (resp->status == MC_ERR_CANCELED || atomic_load(&s->closing))
        return;
    if (resp->status != MC_OK) {
        if (!s->master_down)
            MC_WARN(CLIENT, "master %s unreachable: %s; calls fail until it is back", s->master,
                    mc_status_str(resp->status));
        s->master_down = 1;
        store_master_trouble(s);
        return;
    }
    if (s->master_down)
        MC_INFO(CLIENT, "master %s reachable again", s->master);
    s->master_down = 0;
    int64_t view = 0, cs = 0;
    if (mc_mcli_dec_int(resp->body, resp->body_len, MC_F_VIEW_VERSION, &view) != MC_OK ||
        mc_mcli_dec_int(resp->body, resp->body_len, MC_F_CLIENT_STATUS, &cs) != MC_OK) {
        MC_WARN(CLIENT, "malformed ping answer from the master");
        return;
    }
    if (cs == MC_MASTER_CLIENT_NEED_REMOUNT) {
        /* The master does not know us: it expired us, or it restarted (it
         * may answer before we saw its new view version), or it never
         * heard of us (a client without segments: its metadata backend's
         * first put registered it). A master marks a client that mounted
         * OK (a master of before that did so only for a first contact: one
         * extra fence at the start). */
        if (s->reg == STORE_REGISTERED && store_fence_segments(s))
            MC_WARN(CLIENT, "the master does not know this client (it expired it, or restarted): "
                            "closed the connections to our port, mounting again");
        want_mount(s, s->ping_ok_seen);
    } else {
        s->ping_ok_seen = 1;
    }
    if (s->view != 0 && view != s->view && s->ha) {
        /* a new leader that replayed the journal knows our segments; it says
         * NEED_REMOUNT if it does not */
        MC_INFO(CLIENT, "master view version %lld -> %lld (a new leader)", (long long)s->view,
                (long long)view);
    } else if (s->view != 0 && view != s->view) {
        MC_INFO(CLIENT, "master view version %lld -> %lld (a new master): mounting again",
                (long long)s->view, (long long)view);
        if (store_fence_segments(s))
            MC_INFO(CLIENT, "closed the connections to our port before mounting again");
        want_mount(s, 1);
    }
    s->view = view;   /* a master's view version is never 0 (master_server.c) */
    store_remount(s); /* when UNREGISTERED */
}

static void ping_fire(mc_timer_t *t, void *arg)
{
    mc_store_t *s = arg;
    (void)t;
    if (s->ping_inflight || s->mcli == NULL || atomic_load(&s->closing))
        return;
    mc_mcli_ping(mc_rpc_call_begin(s->mcli), s->client_id);
    /* a ping may take as long as any call; one at a time */
    if (mc_rpc_call_end(s->mcli, MC_RPC_PING, s->cfg.rpc_timeout_us, ping_cb, s) == MC_INPROGRESS)
        s->ping_inflight = 1;
}

typedef struct timer_ctx {
    mc_store_t *s;
    mc_status_t st;
} timer_ctx_t;

static void ping_arm(void *arg)
{
    timer_ctx_t *tc = arg;
    tc->st = mc_timer_init(&tc->s->ping_timer, tc->s->r0, ping_fire, tc->s);
    if (tc->st == MC_OK && tc->s->ha) {
        tc->st = mc_timer_init(&tc->s->retry_timer, tc->s->r0, retry_fire, tc->s);
        tc->s->retry_timer_ok = tc->st == MC_OK;
        if (tc->st != MC_OK)
            mc_timer_fini(&tc->s->ping_timer);
    }
    if (tc->st == MC_OK) {
        mc_timer_start(&tc->s->ping_timer, PING_INTERVAL_US, 1);
        if (tc->s->reg == STORE_UNREGISTERED)
            ping_fire(&tc->s->ping_timer, tc->s); /* mount now, not in a second */
    }
}

/* On r0 at close: no more pings, queued operations fail, then every call to
 * the master completes with MC_ERR_CANCELED. */
static void close_on_r0(void *arg)
{
    mc_store_t *s = arg;
    mc_timer_fini(&s->ping_timer);
    if (s->retry_timer_ok)
        mc_timer_fini(&s->retry_timer);
    s->retry_timer_ok = 0;
    store_retry_cancel_all(s);
    store_stage_cancel_all(s);
    store_peer_cancel_all(s);
    mc_rpc_client_t *c = s->mcli;
    s->mcli = NULL;
    mc_rpc_client_destroy(c);
}

/* ------------------------------------------------------------ buffers */

mc_status_t mc_store_register_buffer(mc_store_t *s, void *buf, size_t len)
{
    if (s == NULL || buf == NULL || len == 0)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL) /* shared with the service, or copied through staging */
        return store_dummy_register(s, buf, len);
    /* located by the engine: GPU memory registers as cuda:N (the NICs then
     * register it as GPU memory), host memory as cpu:<its NUMA node> */
    return mc_te_register(s->te, buf, len, NULL, 0);
}

mc_status_t mc_store_unregister_buffer(mc_store_t *s, void *buf)
{
    if (s == NULL || buf == NULL)
        return MC_ERR_INVALID_PARAMS;
    if (s->svc != NULL)
        return store_dummy_unregister(s, buf);
    return mc_te_unregister(s->te, buf);
}

/* --------------------------------------------------------- open, close */

static void store_free(mc_store_t *s)
{
    store_offload_free(s);
    store_tier_free(s);
    store_pool_fini(&s->pool);
    if (s->pool_map != NULL)
        munmap(s->pool_map, s->pool_map_len);
    mc_list_t *n;
    while ((n = mc_list_pop_head(&s->segs)) != NULL)
        seg_destroy(s, MC_CONTAINER_OF(n, store_seg_t, node), 0);
    store_peer_free_all(s);
    store_scratch_free_all(s);
    mc_oalloc_destroy(s->stage_alloc);
    if (s->stage_base != NULL)
        munmap(s->stage_base, s->stage_size);
    pthread_mutex_destroy(&s->live_mu);
    pthread_cond_destroy(&s->live_cv);
    pthread_mutex_destroy(&s->stage_mu);
    pthread_mutex_destroy(&s->seg_mu);
    pthread_mutex_destroy(&s->scratch_mu);
    pthread_mutex_destroy(&s->res_mu);
    pthread_cond_destroy(&s->res_cv);
    mc_free(s->local_hostname);
    mc_free(s->metadata);
    mc_free(s->protocol);
    mc_free(s->master);
    mc_free(s->advertise_host);
    mc_free(s->rdma_devices);
    mc_free(s);
}

static char *dup_or(const char *v, const char *def)
{
    return mc_strdup(v != NULL ? v : def);
}

/* The client's struct, its locks and lists, and its copies of the
 * configuration's strings (defaults filled in). MC_OK and *out, or an
 * error (nothing left behind). */
static mc_status_t store_new(const mc_store_config_t *c, const mc_store_config_t *d,
                             mc_store_t **out)
{
    mc_store_t *s = MC_NEW(mc_store_t);
    if (s == NULL)
        return MC_ERR_NOMEM;
    s->cfg = *c;
    store_pool_init(&s->pool);
    pthread_mutex_init(&s->live_mu, NULL);
    pthread_cond_init(&s->live_cv, NULL);
    pthread_mutex_init(&s->stage_mu, NULL);
    pthread_mutex_init(&s->seg_mu, NULL);
    pthread_mutex_init(&s->scratch_mu, NULL);
    mc_list_init(&s->stage_queue);
    mc_list_init(&s->peers);
    mc_list_init(&s->segs);
    mc_list_init(&s->retry);
    pthread_mutex_init(&s->res_mu, NULL);
    pthread_cond_init(&s->res_cv, NULL);
    if (s->cfg.rpc_timeout_us == 0)
        s->cfg.rpc_timeout_us = d->rpc_timeout_us;
    if (s->cfg.transfer_timeout_us == 0)
        s->cfg.transfer_timeout_us = d->transfer_timeout_us;
    s->local_hostname = c->local_hostname != NULL ? mc_strdup(c->local_hostname) : NULL;
    s->metadata = dup_or(c->metadata, d->metadata);
    s->protocol = dup_or(c->protocol, d->protocol);
    s->master = dup_or(c->master, d->master);
    s->advertise_host = dup_or(c->advertise_host, d->advertise_host);
    if (c->rdma_devices != NULL && c->rdma_devices[0] != '\0')
        s->rdma_devices = mc_strdup(c->rdma_devices);
    if ((c->local_hostname != NULL && s->local_hostname == NULL) || s->metadata == NULL ||
        s->protocol == NULL || s->master == NULL || s->advertise_host == NULL ||
        (c->rdma_devices != NULL && c->rdma_devices[0] != '\0' && s->rdma_devices == NULL)) {
        store_free(s);
        return MC_ERR_NOMEM;
    }
    s->cfg.local_hostname = s->local_hostname;
    s->cfg.metadata = s->metadata;
    s->cfg.protocol = s->protocol;
    s->cfg.master = s->master;
    s->cfg.advertise_host = s->advertise_host;
    if (c->shm == NULL || c->shm[0] == '\0' || strcmp(c->shm, "on") == 0) {
        s->shm = 1;
    } else if (strcmp(c->shm, "off") != 0) {
        MC_ERROR(CLIENT, "bad shm '%s' (expected on or off)", c->shm);
        store_free(s);
        return MC_ERR_INVALID_ARGUMENT;
    }
    s->cfg.shm = s->cfg.shm_group = NULL; /* the caller's: used during open only */
    *out = s;
    return MC_OK;
}

/* The master to talk to now: s->master itself, or with HA (redis://) the
 * leader Redis names (s->ha set). Its HOST:PORT into maddr, host, port.
 * Also checks the protocol. Errors are logged. */
static mc_status_t open_master_addr(mc_store_t *s, char *maddr, size_t mlen, char *host,
                                    size_t hlen, uint16_t *port)
{
    snprintf(maddr, mlen, "%s", s->master);
    if (mc_ha_url_is_redis(s->master)) {
        const char *why = NULL;
        if (mc_ha_url_parse(s->master, &s->ha_url, &why) != MC_OK) {
            MC_ERROR(CLIENT, "bad master address '%s': %s", s->master, why);
            return MC_ERR_INVALID_ARGUMENT;
        }
        if (s->ha_url.cluster[0] == '\0')
            snprintf(s->ha_url.cluster, sizeof(s->ha_url.cluster), "mooncake");
        mc_status_t st = resolve_at_open(s, s->cfg.rpc_timeout_us, maddr, mlen);
        if (st != MC_OK) {
            MC_ERROR(CLIENT, "master %s: no leader of cluster '%s' found within %llu ms: %s",
                     s->master, s->ha_url.cluster,
                     (unsigned long long)(s->cfg.rpc_timeout_us / 1000), mc_status_str(st));
            return st == MC_ERR_NOT_FOUND ? MC_ERR_NOT_LEADER : st;
        }
        s->ha = 1;
        snprintf(s->res_addr, sizeof(s->res_addr), "%s", maddr);
        MC_INFO(CLIENT, "master leader of cluster '%s' is %s", s->ha_url.cluster, maddr);
    }
    if (parse_master(maddr, host, hlen, port) != 0) {
        MC_ERROR(CLIENT, "bad master address '%s' (expected HOST:PORT)", s->master);
        return MC_ERR_INVALID_ARGUMENT;
    }
    if (strcmp(s->protocol, "tcp") != 0 && strcmp(s->protocol, "rdma") != 0) {
        MC_ERROR(CLIENT, "unknown protocol '%s' (expected tcp or rdma)", s->protocol);
        return MC_ERR_INVALID_ARGUMENT;
    }
    return MC_OK;
}

/* The transfer engine (reactors, listener, metadata at meta) and its
 * transport; s->r0 and the client id come from it. */
static mc_status_t open_engine(mc_store_t *s, const mc_store_config_t *c, const char *meta)
{
    mc_te_opts_t to;
    mc_te_opts_init(&to);
    to.local_hostname = s->local_hostname;
    to.metadata = meta;
    to.listen_port = c->port;
    to.advertise_host = s->advertise_host;
    to.reactors = c->reactors;
    to.host_base = c->host_base;
    to.timeout_us = s->cfg.transfer_timeout_us;
    to.shm_off = !s->shm;
    to.shm_group = c->shm_group;
    to.secret_file = c->secret_file;
    to.rdma_devices = s->rdma_devices; /* the engine keeps the pointer: ours lives as long */
    mc_status_t st = mc_te_create(&to, &s->te);
    if (st != MC_OK)
        return st;
    st = mc_te_install_transport(s->te, s->protocol);
    if (st != MC_OK)
        return st;
    s->r0 = te_reactor(s->te, 0);
    te_owner_id(s->te, &s->client_id.hi, &s->client_id.lo);
    return MC_OK;
}

/* The RPC client of the master on r0, and with HA the resolver thread. */
static mc_status_t open_master_conn(mc_store_t *s, const char *host, uint16_t port)
{
    mc_rpc_client_opts_t ro;
    mc_rpc_client_opts_init(&ro);
    ro.host = host;
    ro.port = port;
    ro.call_timeout_us = s->cfg.rpc_timeout_us;
    if (ro.connect_timeout_us > s->cfg.rpc_timeout_us)
        ro.connect_timeout_us = s->cfg.rpc_timeout_us;
    ro.backoff_max_us = 1000000;
    ro.auth_key = te_auth_key(s->te); /* the engine's: one secret file per process */
    mc_status_t st = mc_rpc_client_create(s->r0, &ro, &s->mcli);
    if (st != MC_OK) {
        MC_ERROR(CLIENT, "cannot set up the connection to master %s: %s", s->master,
                 mc_status_str(st));
        return st;
    }
    store_master_addr_set(s, host, port);
    if (s->ha) {
        if (pthread_create(&s->resolver, NULL, resolver_main, s) != 0) {
            MC_ERROR(CLIENT, "cannot start the master resolver thread");
            return MC_ERR_NOMEM;
        }
        s->resolver_started = 1;
    }
    return MC_OK;
}

/* The staging buffer: mapped, registered with the engine, its allocator. */
static mc_status_t open_staging(mc_store_t *s, uint64_t size)
{
    long page = sysconf(_SC_PAGESIZE);
    s->stage_size = (size + (uint64_t)page - 1) & ~(uint64_t)(page - 1);
    void *p = mmap(NULL, s->stage_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        MC_ERROR(CLIENT, "cannot map a staging buffer of %llu bytes: %s",
                 (unsigned long long)s->stage_size, strerror(errno));
        s->stage_size = 0;
        return MC_ERR_NOMEM;
    }
    s->stage_base = p;
    mc_status_t st = mc_te_register(s->te, p, s->stage_size, "cpu:0", 0);
    if (st == MC_OK)
        st = mc_oalloc_create(size, STAGE_MAX_ALLOCS, &s->stage_alloc);
    if (st != MC_OK)
        return st;
    /* for tests and comparisons: copy as a transport that needs registered
     * memory (RDMA) would */
    const char *env = mc_conf_env_str("MC_STORE_STAGING");
    s->always_stage = env != NULL && strcmp(env, "always") == 0;
    if (s->always_stage)
        MC_INFO(CLIENT, "MC_STORE_STAGING=always: unregistered buffers go through the staging "
                        "buffer");
    return MC_OK;
}

/* The memory of mc_store_alloc_from_mem_pool: mapped, registered (values
 * there travel without the staging copy). */
static mc_status_t open_pool(mc_store_t *s, uint64_t size)
{
    long page = sysconf(_SC_PAGESIZE);
    s->pool_map_len = (size + (uint64_t)page - 1) & ~(uint64_t)(page - 1);
    void *p =
        mmap(NULL, s->pool_map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        MC_ERROR(CLIENT, "cannot map a memory pool of %llu bytes: %s",
                 (unsigned long long)s->pool_map_len, strerror(errno));
        s->pool_map_len = 0;
        return MC_ERR_NOMEM;
    }
    s->pool_map = p;
    mc_status_t st = mc_te_register(s->te, p, s->pool_map_len, "cpu:0", 0);
    return st == MC_OK ? store_pool_setup(&s->pool, p, s->pool_map_len) : st;
}

/* The contributed segment (size > 0), mounted now when a blocking call may
 * be made and the master answers; else at the first ping (s->reg says
 * which). A pure client registers at the first ping too. */
static mc_status_t open_segment(mc_store_t *s, uint64_t size)
{
    if (size == 0) {
        s->reg = STORE_UNREGISTERED; /* a ReMount registers the client: pings then answer OK */
        return MC_OK;
    }
    store_seg_t *g;
    mc_status_t st = seg_create(s, NULL, size, &g);
    if (st != MC_OK)
        return st;
    pthread_mutex_lock(&s->seg_mu); /* the offload threads look at the list already */
    mc_list_push_tail(&s->segs, &g->node);
    pthread_mutex_unlock(&s->seg_mu);
    if (attached(s)) {
        /* a sync call would wait for the host's loop: mount async */
        s->reg = STORE_UNREGISTERED;
        s->mount_loud = 1;
        return MC_OK;
    }
    st = mount_sync(s, g);
    if (st == MC_OK) {
        s->reg = STORE_REGISTERED;
    } else if (transient(st)) {
        MC_WARN(CLIENT, "master %s unreachable (%s): the segment is mounted when it is back",
                s->master, mc_status_str(st));
        s->reg = STORE_UNREGISTERED; /* mounted at the first ping answered */
        s->mount_loud = 1;
        s->master_down = 1;
    } else {
        MC_ERROR(CLIENT, "cannot mount segment '%s' (%llu bytes): %s", mc_te_local_name(s->te),
                 (unsigned long long)g->size, mc_status_str(st));
        return st;
    }
    return MC_OK;
}

mc_status_t mc_store_open(const mc_store_config_t *c, mc_store_t **out)
{
    mc_log_env_once(); /* MC_LOG_LEVEL, before the first line of a host program */
    mc_store_config_t d;
    mc_store_config_init(&d);
    if (c == NULL || out == NULL) {
        MC_ERROR(CLIENT, "mc_store_open: config and out must not be NULL");
        return MC_ERR_INVALID_ARGUMENT;
    }
    mc_store_config_t full; /* the caller's, completed with the fields it lacks */
    mc_status_t st = store_config_full(c, &full);
    if (st != MC_OK)
        return st;
    c = &full;
    mc_store_t *s;
    st = store_new(c, &d, &s);
    if (st != MC_OK)
        return st;
    if (c->service != NULL && c->service[0] != '\0') {
        /* a co-located client: the service of this host does the work */
        st = store_dummy_open(s, c);
        if (st != MC_OK) {
            store_free(s);
            return st;
        }
        *out = s;
        return MC_OK;
    }
    char maddr[MC_HA_ADDR_MAX], mhost[MC_HA_ADDR_MAX], meta[512];
    uint16_t mport;
    if (store_tier_parse_persist(c->persist) == -2) /* named in the log */
        st = MC_ERR_INVALID_ARGUMENT;
    else
        st = open_master_addr(s, maddr, sizeof(maddr), mhost, sizeof(mhost), &mport);
    if (st != MC_OK) {
        store_free(s);
        return st;
    }
    /* the transfer engine: reactors, listener, metadata (the master's
     * embedded one follows the leader with HA) */
    if (strcmp(s->metadata, "master") == 0)
        snprintf(meta, sizeof(meta), "master://%s", maddr);
    else
        snprintf(meta, sizeof(meta), "%s", s->metadata);
    st = open_engine(s, c, meta);
    if (st == MC_OK)
        st = open_master_conn(s, mhost, mport);
    if (st == MC_OK && c->local_buffer_size > 0)
        st = open_staging(s, c->local_buffer_size);
    if (st == MC_OK && c->mem_pool_size > 0)
        st = open_pool(s, c->mem_pool_size);
    /* the offload directory before the segment: a node refused for it
     * (shared, unwritable) must not leave a segment mounted behind it */
    if (st == MC_OK)
        st = store_offload_open(s, c->offload_dir, c->offload_quota, c->global_segment_size,
                                c->offload_buffered_io, c->offload_direct_writes);
    if (st == MC_OK)
        st = open_segment(s, c->global_segment_size);
    if (st == MC_OK)
        store_offload_announce(s); /* before the first put: evictions written */
    if (st == MC_OK)
        st = store_tier_open(s, c->persist,
                             c->tier_queue_bytes ? c->tier_queue_bytes : d.tier_queue_bytes);
    if (st == MC_OK) {
        timer_ctx_t tc = {.s = s, .st = MC_ERR_CANCELED};
        mc_rpc_run_on(s->r0, ping_arm, &tc);
        st = tc.st;
    }
    if (st != MC_OK)
        goto err_te;
    MC_INFO(CLIENT,
            "store client '%s': master %s, metadata %s, segment %llu bytes, staging %llu bytes",
            mc_te_local_name(s->te), s->master, meta, (unsigned long long)c->global_segment_size,
            (unsigned long long)c->local_buffer_size);
    *out = s;
    return MC_OK;

err_te:
    store_offload_close(s);
    store_tier_close(s);
    atomic_store(&s->closing, 1);
    stop_resolver(s);
    if (s->mcli != NULL)
        mc_rpc_run_on(s->r0, close_on_r0, s);
    mc_te_destroy(s->te);
    s->te = NULL;
    store_free(s);
    return st;
}

void mc_store_close(mc_store_t *s)
{
    if (s == NULL)
        return;
    if (s->svc != NULL) {
        store_dummy_close(s); /* ends the session: the service unmaps our memory */
        store_free(s);
        return;
    }
    if (store_on_reactor(s)) {
        MC_ERROR(CLIENT, "mc_store_close from a callback of the client is refused (it would "
                         "wait for its own thread); close from another thread");
        return;
    }
    /* Finish the tier's file work (async writes report to the master). */
    store_offload_close(s);
    store_tier_close(s);
    /* Withdraw the segments while the master connection is up. A master that
     * is away forgets them anyway (its client expiry). */
    if (!attached(s) && (s->ha || !atomic_load(&s->master_down))) {
        /* with HA the leader may just have moved: the call follows it */
        /* Not under seg_mu: r0 takes it to remount, and the call needs r0.
         * Nobody else changes the list now (closing is the last call). */
        uint64_t t = s->cfg.rpc_timeout_us < CLOSE_UNMOUNT_TIMEOUT_US ? s->cfg.rpc_timeout_us
                                                                      : CLOSE_UNMOUNT_TIMEOUT_US;
        for (mc_list_t *n = s->segs.next; n != &s->segs; n = n->next) {
            mc_status_t st = unmount_sync(s, MC_CONTAINER_OF(n, store_seg_t, node), t, NULL);
            if (st != MC_OK) {
                MC_DEBUG(CLIENT, "unmount at close: %s", mc_status_str(st));
                break; /* the master is away: it forgets us by itself */
            }
        }
    }
    atomic_store(&s->closing, 1);
    stop_resolver(s);
    mc_rpc_run_on(s->r0, close_on_r0, s);
    /* Unpublishes; transfers and segment opens in flight fail (CANCELED). */
    mc_te_destroy(s->te);
    s->te = NULL;
    pthread_mutex_lock(&s->live_mu);
    uint64_t deadline = mc_now_ms() + CLOSE_DRAIN_MS;
    while (s->live > 0 && mc_now_ms() < deadline) {
        pthread_mutex_unlock(&s->live_mu);
        usleep(1000);
        pthread_mutex_lock(&s->live_mu);
    }
    long left = s->live;
    pthread_mutex_unlock(&s->live_mu);
    if (left > 0) {
        MC_ERROR(CLIENT, "close: %ld operation(s) never completed; leaking the client", left);
        return;
    }
    store_free(s);
}
