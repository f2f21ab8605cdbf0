/*
 * verbs_emu.c - the emulated verbs provider (verbs.h). FOR TESTS AND DEMOS
 * ONLY: nothing here is fast or secure; it lets every state machine, fault
 * and retry path of the RDMA transport run where no NIC exists, and it is
 * strict where hardware is (verbs.h, rv_emu_opts_t).
 *
 * A context = one emulated port as seen by one opener: an id unique on the
 * machine (24 bits on Ethernet, a LID on InfiniBand) that its GIDs encode,
 * a unix socket in the abstract namespace named after it, an accept thread
 * (one server thread per connection) and an initiator thread that executes
 * the context's posted WRs in order.
 *
 *   Ethernet (RoCE) GID table, like mlx5's for one IPv4 address:
 *     0 fe80::0200:5eff:feXX:XXXX  RoCE v1    1 the same  RoCE v2
 *     2 ::ffff:10.X.X.X            RoCE v1    3 the same  RoCE v2
 *   InfiniBand: 0 fe80::2:c903:0:LLLL (the port GID), LID LLLL.
 *
 * A WR travels as {magic, op, QP numbers, PSN, source and destination GID
 * and LID, remote addr, rkey, length} (+ the bytes of a WRITE) to the
 * target context; the server checks the destination GID is one of its
 * table of the source's type, the target QP (exists, RTR or RTS, connected
 * to the source QP and GID, expecting this PSN; otherwise the packet is
 * dropped and the initiator sees RETRY_EXC_ERR, as when a real peer never
 * acknowledges), then the MR (rkey known, range inside, REMOTE_READ /
 * REMOTE_WRITE granted; otherwise REM_ACCESS_ERR), executes it with memcpy
 * (socket I/O straight into / out of the MR's host view, under the MR
 * table's read lock so a deregistration waits) and answers {status} (+ the
 * bytes of a READ). The completion lands in the initiator's CQ; an error
 * completion moves the QP to ERR and every later WR of that QP is flushed
 * (WR_FLUSH_ERR), as on hardware.
 *
 * GPU memory: a dma-buf registration maps the buffer's fd (what a NIC
 * does through the exporter); a plain registration of GPU memory stands
 * for nvidia-peermem and reaches it through the CUDA library's host view
 * (only the tests' fake driver has one), unless no_peermem is set.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "transport/cuda.h"
#include "transport/rdma/gid.h"
#include "transport/rdma/qp_attr.h"
#include "transport/rdma/verbs.h"
#include "transport/rdma/verbs_emu_int.h"
#include "util/conf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

/* ------------------------------------------------------ process state */

pthread_mutex_t emu_mu = PTHREAD_MUTEX_INITIALIZER;
static rv_emu_opts_t g_opts;
static int g_opts_set;
emu_dev_t emu_devs[RV_MAX_DEVICES];
static uint32_t g_serial;
static struct rv_ctx **g_ctxs; /* open contexts, for port events; emu_mu */
static size_t g_nctxs, g_cap_ctxs;
static _Atomic uint32_t g_next_key = 0x100;

/* The emulator's configuration: a number from the environment (malformed:
 * logged, def). */
static uint64_t env_u64(const char *name, uint64_t def)
{
    return mc_conf_env_uint(name, def, 0, UINT64_MAX);
}

/* "emu_K" -> K, or -1. */
static int dev_index(const char *name)
{
    if (name == NULL || strncmp(name, "emu_", 4) != 0)
        return -1;
    char *end = NULL;
    long k = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '\0' || k < 0 || k >= RV_MAX_DEVICES)
        return -1;
    return (int)k;
}

/* Apply fn to each device named in a comma list (emu_mu held). */
static void env_devices(const char *name, void (*fn)(emu_dev_t *))
{
    const char *v = mc_conf_env_str(name);
    char one[RV_NAME_MAX];
    while (v != NULL && *v != '\0') {
        const char *c = strchr(v, ',');
        size_t l = c ? (size_t)(c - v) : strlen(v);
        if (l < sizeof(one)) {
            memcpy(one, v, l);
            one[l] = '\0';
            int k = dev_index(one);
            if (k >= 0)
                fn(&emu_devs[k]);
            else
                MC_WARN(RDMA, "%s: '%s' is not an emulated device (emu_N): ignored", name, one);
        }
        v = c ? c + 1 : NULL;
    }
}

static void set_no_gid(emu_dev_t *d)
{
    d->o.no_gid = 1;
}

static void set_down(emu_dev_t *d)
{
    d->down = 1;
}

void rv_emu_opts_get(rv_emu_opts_t *o)
{
    pthread_mutex_lock(&emu_mu);
    if (!g_opts_set) {
        g_opts.ndevices = (unsigned)env_u64("MC_RDMA_EMULATED", 2);
        if (g_opts.ndevices == 0 || g_opts.ndevices > RV_MAX_DEVICES)
            g_opts.ndevices = 2;
        g_opts.delay_us = env_u64("MC_RDMA_EMU_DELAY_US", 0);
        g_opts.bandwidth = env_u64("MC_RDMA_EMU_BANDWIDTH", 0);
        g_opts.mtu = (uint32_t)env_u64("MC_RDMA_EMU_MTU", 4096);
        const char *ll = mc_conf_env_str("MC_RDMA_EMU_LINK_LAYER");
        g_opts.link_layer = ll != NULL && strcmp(ll, "ib") == 0 ? RV_LL_IB : RV_LL_ETH;
        if (ll != NULL && *ll && strcmp(ll, "ib") != 0 && strcmp(ll, "eth") != 0)
            MC_WARN(RDMA, "MC_RDMA_EMU_LINK_LAYER='%s' is neither eth nor ib: using eth", ll);
        g_opts.max_rd_atom = (uint32_t)env_u64("MC_RDMA_EMU_MAX_RD_ATOM", RD_QP_DEFAULT_RD_ATOM);
        g_opts.blackhole = env_u64("MC_RDMA_EMU_BLACKHOLE", 0) != 0;
        g_opts.no_peermem = env_u64("MC_RDMA_EMU_NO_PEERMEM", 0) != 0;
        env_devices("MC_RDMA_EMU_NO_GID", set_no_gid);
        env_devices("MC_RDMA_EMU_DOWN", set_down);
        g_opts_set = 1;
    }
    *o = g_opts;
    pthread_mutex_unlock(&emu_mu);
}

void rv_emu_configure(const rv_emu_opts_t *o)
{
    pthread_mutex_lock(&emu_mu);
    g_opts = *o;
    if (g_opts.ndevices == 0 || g_opts.ndevices > RV_MAX_DEVICES)
        g_opts.ndevices = 2;
    if (g_opts.mtu == 0)
        g_opts.mtu = 4096;
    if (g_opts.link_layer == RV_LL_UNKNOWN)
        g_opts.link_layer = RV_LL_ETH;
    if (g_opts.max_rd_atom == 0)
        g_opts.max_rd_atom = RD_QP_DEFAULT_RD_ATOM;
    g_opts_set = 1;
    pthread_mutex_unlock(&emu_mu);
}

void rv_emu_set_device(const char *dev, const rv_emu_dev_opts_t *o)
{
    int k = dev_index(dev);
    if (k < 0)
        return;
    pthread_mutex_lock(&emu_mu);
    if (o != NULL)
        emu_devs[k].o = *o;
    else
        memset(&emu_devs[k].o, 0, sizeof(emu_devs[k].o));
    pthread_mutex_unlock(&emu_mu);
}

void rv_emu_fail_next(const char *dev, unsigned count, rv_wc_status_t status)
{
    int k = dev_index(dev);
    if (k < 0)
        return;
    pthread_mutex_lock(&emu_mu);
    emu_devs[k].fail_count = count;
    emu_devs[k].fail_status = status;
    pthread_mutex_unlock(&emu_mu);
}

void rv_emu_stats(const char *dev, rv_emu_stats_t *out)
{
    int k = dev_index(dev);
    memset(out, 0, sizeof(*out));
    if (k < 0)
        return;
    pthread_mutex_lock(&emu_mu);
    *out = emu_devs[k].st;
    pthread_mutex_unlock(&emu_mu);
}

/* A device's effective settings (emu_mu held). */
static void dev_config(int k, const rv_emu_opts_t *o, int *ll, uint32_t *rd, int *table)
{
    const rv_emu_dev_opts_t *d = &emu_devs[k].o;
    *ll = d->link_layer ? d->link_layer : o->link_layer;
    *rd = d->max_rd_atom ? d->max_rd_atom : o->max_rd_atom;
    *table = d->no_gid ? TABLE_EMPTY : d->no_ipv4 ? TABLE_NO_IPV4 : TABLE_FULL;
}

/* ---------------------------------------------------------- addresses */

static const uint8_t eth_iid[5] = {0x02, 0x00, 0x5e, 0xff, 0xfe};
static const uint8_t ib_iid[6] = {0x00, 0x02, 0xc9, 0x03, 0x00, 0x00};

static void gid_ll(uint8_t g[16], int ib, uint32_t id)
{
    memset(g, 0, 16);
    g[0] = 0xfe;
    g[1] = 0x80;
    if (ib) {
        memcpy(g + 8, ib_iid, 6);
        g[14] = (uint8_t)(id >> 8);
        g[15] = (uint8_t)id;
    } else {
        memcpy(g + 8, eth_iid, 5);
        g[13] = (uint8_t)(id >> 16);
        g[14] = (uint8_t)(id >> 8);
        g[15] = (uint8_t)id;
    }
}

static void gid_v4(uint8_t g[16], uint32_t id)
{
    memset(g, 0, 16);
    g[10] = g[11] = 0xff;
    g[12] = 10;
    g[13] = (uint8_t)(id >> 16);
    g[14] = (uint8_t)(id >> 8);
    g[15] = (uint8_t)id;
}

/* Which emulated port a GID belongs to: RV_LL_ETH or RV_LL_IB with *id,
 * RV_LL_UNKNOWN when it is no emulated GID. */
int emu_gid_owner(const uint8_t g[16], uint32_t *id)
{
    if (rd_gid_is_v4mapped(g) && g[12] == 10) {
        *id = (uint32_t)g[13] << 16 | (uint32_t)g[14] << 8 | g[15];
        return RV_LL_ETH;
    }
    if (g[0] == 0xfe && g[1] == 0x80 && memcmp(g + 8, eth_iid, 5) == 0) {
        *id = (uint32_t)g[13] << 16 | (uint32_t)g[14] << 8 | g[15];
        return RV_LL_ETH;
    }
    if (g[0] == 0xfe && g[1] == 0x80 && memcmp(g + 8, ib_iid, 6) == 0) {
        *id = (uint32_t)g[14] << 8 | g[15];
        return RV_LL_IB;
    }
    return RV_LL_UNKNOWN;
}

void emu_sock_name(int ll, uint32_t id, struct sockaddr_un *a, socklen_t *alen)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "mc-emu-%c-%06x",
                     ll == RV_LL_IB ? 'i' : 'e', id);
    *alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The table of a port with this id (ETH: mlx5's four entries, the two
 * IPv4 ones only while its netdev has an address; IB: one). */
static void fill_table(rv_ctx_t *c, int table)
{
    memset(c->gids, 0, sizeof(c->gids));
    c->ngids = EMU_GIDS; /* an empty table still has its slots, all null */
    if (table == TABLE_EMPTY)
        return;
    if (c->ll == RV_LL_IB) {
        gid_ll(c->gids[0].gid, 1, c->id);
        c->gids[0].type = RV_GID_TYPE_IB;
        return;
    }
    for (int i = 0; i < (table == TABLE_NO_IPV4 ? 2 : EMU_GIDS); i++) {
        if (i < 2)
            gid_ll(c->gids[i].gid, 0, c->id);
        else
            gid_v4(c->gids[i].gid, c->id);
        c->gids[i].type = i % 2 ? RV_GID_TYPE_ROCE_V2 : RV_GID_TYPE_ROCE_V1;
        snprintf(c->gids[i].ndev, sizeof(c->gids[i].ndev), "emueth%d", c->dev);
    }
}

/* ---------------------------------------------------------- memory */

/* MR of ctx with this key covering [addr, addr+len) with access; mr_lock
 * held. */
emu_mr_t *emu_mr_find(rv_ctx_t *c, uint32_t key, int remote, uint64_t addr, uint64_t len,
                      int access)
{
    for (size_t i = 0; i < c->nmrs; i++) {
        emu_mr_t *m = c->mrs[i];
        if ((remote ? m->rkey : m->lkey) != key)
            continue;
        if (addr < m->addr || addr + len > m->addr + m->len || addr + len < addr)
            return NULL;
        if ((access & m->access) != access)
            return NULL;
        return m;
    }
    return NULL;
}

uint8_t *emu_mr_host(const emu_mr_t *m, uint64_t addr)
{
    return m->host + (addr - m->addr);
}

/* ---------------------------------------------------------- the ops */

static int emu_get_devices(const rv_port_opts_t *oo, rv_dev_info_t *out, int max)
{
    rv_emu_opts_t o;
    rv_emu_opts_get(&o);
    int n = (int)o.ndevices < max ? (int)o.ndevices : max;
    for (int i = 0; i < n; i++) {
        rv_dev_info_t *d = &out[i];
        memset(d, 0, sizeof(*d));
        snprintf(d->name, sizeof(d->name), "emu_%d", i);
        snprintf(d->pci, sizeof(d->pci), "emulated:%02x", i);
        d->numa_node = -1;
        uint32_t rd;
        int table;
        pthread_mutex_lock(&emu_mu);
        d->port_active = !emu_devs[i].down;
        dev_config(i, &o, &d->link_layer, &rd, &table);
        pthread_mutex_unlock(&emu_mu);
        d->port_state = d->port_active ? 4 : 1;
        d->port = 1;
        d->active_mtu = o.mtu;
        d->max_qp_wr = 16384;
        d->max_cqe = 65536;
        d->max_qp_rd_atom = d->max_qp_init_rd_atom = rd;
        /* ids are given at open: the table's shape is known, not its values */
        rv_ctx_t shape = {.dev = i, .ll = d->link_layer, .id = 1};
        fill_table(&shape, table);
        d->gid_tbl_len = (uint16_t)shape.ngids;
        d->gid_index = rd_gid_select(shape.gids, shape.ngids, d->link_layer,
                                     oo ? oo->gid_index : -1, d->gid_why, sizeof(d->gid_why));
        if (d->gid_index >= 0)
            d->gid_type = shape.gids[d->gid_index].type;
    }
    return n;
}

static void emu_close(rv_ctx_t *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&emu_mu);
    for (size_t i = 0; i < g_nctxs; i++) {
        if (g_ctxs[i] == c) {
            g_ctxs[i] = g_ctxs[--g_nctxs];
            break;
        }
    }
    pthread_mutex_unlock(&emu_mu);
    close(c->async_efd);
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    emu_srv_t *srvs = c->srvs;
    c->srvs = NULL;
    for (emu_srv_t *s = srvs; s != NULL; s = s->next)
        shutdown(s->fd, SHUT_RDWR);
    pthread_mutex_unlock(&c->mu);
    shutdown(c->lfd, SHUT_RDWR);
    pthread_join(c->acc_th, NULL);
    pthread_join(c->init_th, NULL);
    while (srvs != NULL) {
        emu_srv_t *next = srvs->next;
        pthread_join(srvs->th, NULL);
        close(srvs->fd);
        mc_free(srvs);
        srvs = next;
    }
    /* accepted after the list was taken: the accept thread saw stop */
    close(c->lfd);
    for (unsigned i = 0; i < c->nconns; i++)
        close(c->conns[i].fd);
    while (c->head != NULL) {
        emu_wr_t *w = c->head;
        c->head = w->next;
        mc_free(w);
    }
    emu_late_free_all(c);
    for (size_t i = 0; i < c->nmrs; i++) { /* registrations still open die with their context */
        if (c->mrs[i]->map != NULL)
            munmap(c->mrs[i]->map, c->mrs[i]->map_len);
        mc_free(c->mrs[i]);
    }
    pthread_rwlock_destroy(&c->mr_lock);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    mc_free(c->qps);
    mc_free(c->mrs);
    mc_free(c);
}

/* Bind the listening socket under a free id (the abstract namespace makes
 * the id unique on the machine). */
static int bind_id(rv_ctx_t *c, uint32_t seed)
{
    uint32_t range = c->ll == RV_LL_IB ? 0xbffe : 0xfffffe; /* LIDs 1..0xbfff */
    c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->lfd < 0)
        return -1;
    for (uint32_t k = 0; k < 4096; k++) {
        c->id = 1 + (seed + k) % range;
        struct sockaddr_un a;
        socklen_t alen;
        emu_sock_name(c->ll, c->id, &a, &alen);
        if (bind(c->lfd, (struct sockaddr *)&a, alen) == 0)
            return listen(c->lfd, 64);
        if (errno != EADDRINUSE)
            break;
    }
    return -1;
}

static mc_status_t emu_open(const char *dev, const rv_port_opts_t *oo, rv_ctx_t **out)
{
    rv_emu_opts_t o;
    rv_emu_opts_get(&o);
    int k = dev_index(dev);
    if (k < 0 || (unsigned)k >= o.ndevices) {
        MC_ERROR(RDMA, "no emulated device '%s' (there are emu_0 .. emu_%u)", dev ? dev : "",
                 o.ndevices - 1);
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    uint8_t port = oo && oo->port ? oo->port : 1;
    if (port != 1) {
        MC_ERROR(RDMA, "emulated device %s has one port (1), not %u", dev, port);
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    rv_ctx_t *c = mc_calloc(1, sizeof(*c));
    if (c == NULL)
        return MC_ERR_NOMEM;
    c->dev = k;
    c->o = o;
    c->port = port;
    snprintf(c->name, sizeof(c->name), "%s", dev);
    int table;
    pthread_mutex_lock(&emu_mu);
    uint32_t serial = ++g_serial;
    dev_config(k, &o, &c->ll, &c->max_rd_atom, &table);
    pthread_mutex_unlock(&emu_mu);
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_rwlock_init(&c->mr_lock, NULL);
    uint32_t seed = (uint32_t)getpid() * 2654435761u + serial * 40503u + (uint32_t)k;
    if (bind_id(c, seed) != 0) {
        MC_ERROR(RDMA, "emulated device %s: cannot listen on its socket: %s", dev, strerror(errno));
        if (c->lfd >= 0)
            close(c->lfd);
        pthread_rwlock_destroy(&c->mr_lock);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        mc_free(c);
        return MC_ERR_CONTEXT;
    }
    c->gid_cfg = oo ? oo->gid_index : -1;
    fill_table(c, table);
    c->gid_index =
        rd_gid_select(c->gids, c->ngids, c->ll, c->gid_cfg, c->gid_why, sizeof(c->gid_why));
    if (pthread_create(&c->acc_th, NULL, emu_acc_thread, c) != 0) {
        close(c->lfd);
        mc_free(c);
        return MC_ERR_CONTEXT;
    }
    if (pthread_create(&c->init_th, NULL, emu_init_thread, c) != 0) {
        shutdown(c->lfd, SHUT_RDWR);
        pthread_join(c->acc_th, NULL);
        close(c->lfd);
        mc_free(c);
        return MC_ERR_CONTEXT;
    }
    c->async_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_lock(&emu_mu);
    if (c->async_efd >= 0 && g_nctxs == g_cap_ctxs) {
        size_t cap = g_cap_ctxs ? g_cap_ctxs * 2 : 16;
        struct rv_ctx **nc = mc_realloc(g_ctxs, cap * sizeof(*nc));
        if (nc != NULL) {
            g_ctxs = nc;
            g_cap_ctxs = cap;
        }
    }
    int listed = c->async_efd >= 0 && g_nctxs < g_cap_ctxs;
    if (listed)
        g_ctxs[g_nctxs++] = c;
    pthread_mutex_unlock(&emu_mu);
    if (!listed) {
        if (c->async_efd < 0)
            c->async_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); /* close() needs an fd */
        emu_close(c);
        return MC_ERR_NOMEM;
    }
    MC_WARN(RDMA,
            "opened EMULATED RDMA device %s (%s; for tests and demos only: no NIC, data "
            "moves over a unix socket)",
            dev, rd_link_layer_str(c->ll));
    *out = c;
    return MC_OK;
}

static mc_status_t emu_query(rv_ctx_t *c, rv_dev_info_t *out)
{
    /* the table as the device has it now (rv_emu_set_device may have
     * changed it): chosen again, as the real provider does at each query */
    int ll, table;
    uint32_t rd;
    pthread_mutex_lock(&emu_mu);
    dev_config(c->dev, &c->o, &ll, &rd, &table);
    pthread_mutex_unlock(&emu_mu);
    pthread_mutex_lock(&c->mu); /* servers read the table */
    fill_table(c, table);
    c->gid_index =
        rd_gid_select(c->gids, c->ngids, c->ll, c->gid_cfg, c->gid_why, sizeof(c->gid_why));
    pthread_mutex_unlock(&c->mu);
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", c->name);
    snprintf(out->pci, sizeof(out->pci), "emulated:%02x", c->dev);
    out->numa_node = -1;
    pthread_mutex_lock(&emu_mu);
    out->port_active = !emu_devs[c->dev].down;
    pthread_mutex_unlock(&emu_mu);
    out->port_state = out->port_active ? 4 : 1;
    out->port = c->port;
    out->link_layer = c->ll;
    out->gid_index = c->gid_index;
    out->gid_tbl_len = (uint16_t)c->ngids;
    snprintf(out->gid_why, sizeof(out->gid_why), "%s", c->gid_why);
    if (c->gid_index >= 0) {
        memcpy(out->gid, c->gids[c->gid_index].gid, 16);
        out->gid_type = c->gids[c->gid_index].type;
    }
    out->lid = c->ll == RV_LL_IB ? (uint16_t)c->id : 0; /* RoCE ports have no LID */
    out->active_mtu = c->o.mtu;
    out->max_qp_wr = 16384;
    out->max_cqe = 65536;
    out->max_qp_rd_atom = out->max_qp_init_rd_atom = c->max_rd_atom;
    return MC_OK;
}

static mc_status_t emu_alloc_pd(rv_ctx_t *c, rv_pd_t **out)
{
    rv_pd_t *pd = mc_calloc(1, sizeof(*pd));
    if (pd == NULL)
        return MC_ERR_NOMEM;
    pd->ctx = c;
    *out = pd;
    return MC_OK;
}

static void emu_dealloc_pd(rv_pd_t *pd)
{
    mc_free(pd);
}

static mc_status_t mr_add(rv_pd_t *pd, uint64_t addr, uint64_t len, uint8_t *host, void *map,
                          size_t map_len, int access, rv_mr_t *out)
{
    rv_ctx_t *c = pd->ctx;
    emu_mr_t *m = mc_calloc(1, sizeof(*m));
    if (m == NULL)
        return MC_ERR_NOMEM;
    uint32_t key = atomic_fetch_add(&g_next_key, 1);
    m->addr = addr;
    m->len = len;
    m->host = host;
    m->map = map;
    m->map_len = map_len;
    m->lkey = key;
    m->rkey = key ^ 0x5a5a0000u;
    m->access = access;
    m->ctx = c;
    pthread_rwlock_wrlock(&c->mr_lock);
    if (c->nmrs == c->cap_mrs) {
        size_t cap = c->cap_mrs ? c->cap_mrs * 2 : 16;
        emu_mr_t **nm = mc_realloc(c->mrs, cap * sizeof(*nm));
        if (nm == NULL) {
            pthread_rwlock_unlock(&c->mr_lock);
            mc_free(m);
            return MC_ERR_NOMEM;
        }
        c->mrs = nm;
        c->cap_mrs = cap;
    }
    c->mrs[c->nmrs++] = m;
    pthread_rwlock_unlock(&c->mr_lock);
    out->addr = (void *)(uintptr_t)addr;
    out->len = len;
    out->lkey = m->lkey;
    out->rkey = m->rkey;
    out->impl = m;
    return MC_OK;
}

static mc_status_t check_access(uint64_t addr, uint64_t len, int access)
{
    if (addr == 0 || len == 0 || addr + len < addr)
        return MC_ERR_INVALID_ARGUMENT;
    /* as the verbs spec: remote write needs local write */
    if ((access & RV_ACCESS_REMOTE_WRITE) && !(access & RV_ACCESS_LOCAL_WRITE))
        return MC_ERR_INVALID_ARGUMENT;
    return MC_OK;
}

static mc_status_t emu_reg_mr(rv_pd_t *pd, void *addr, uint64_t len, int access, rv_mr_t *out)
{
    mc_status_t st = check_access((uint64_t)(uintptr_t)addr, len, access);
    if (st != MC_OK)
        return st;
    uint8_t *host = addr;
    int gpu = -1;
    if (te_cuda_ptr_gpu(addr, &gpu) != MC_OK)
        return MC_ERR_MEMORY;
    if (gpu >= 0) {
        /* GPU memory by its virtual address: what nvidia-peermem resolves
         * for a NIC */
        if (pd->ctx->o.no_peermem) {
            MC_ERROR(RDMA, "%s: cannot register GPU memory %p+%llu: no nvidia-peermem (emulated)",
                     pd->ctx->name, addr, (unsigned long long)len);
            return MC_ERR_MEMORY;
        }
        host = te_cuda_host_view(addr, len);
        if (host == NULL) {
            MC_ERROR(RDMA,
                     "%s: cannot reach GPU memory %p+%llu: the emulated NIC copies with "
                     "the CPU and this CUDA library gives no host view",
                     pd->ctx->name, addr, (unsigned long long)len);
            return MC_ERR_MEMORY;
        }
    }
    return mr_add(pd, (uint64_t)(uintptr_t)addr, len, host, NULL, 0, access, out);
}

static mc_status_t emu_reg_dmabuf_mr(rv_pd_t *pd, int fd, uint64_t offset, uint64_t len,
                                     uint64_t iova, int access, rv_mr_t *out)
{
    mc_status_t st = check_access(iova, len, access);
    if (st != MC_OK)
        return st;
    /* the NIC reaches the buffer through its exporter: here, a mapping */
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t base = offset & ~(page - 1);
    size_t map_len = (size_t)((offset - base + len + page - 1) & ~(page - 1));
    void *map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)base);
    if (map == MAP_FAILED) {
        MC_ERROR(RDMA, "%s: cannot map dma-buf fd %d (offset %llu, %llu bytes): %s", pd->ctx->name,
                 fd, (unsigned long long)offset, (unsigned long long)len, strerror(errno));
        return MC_ERR_MEMORY;
    }
    st = mr_add(pd, iova, len, (uint8_t *)map + (offset - base), map, map_len, access, out);
    if (st != MC_OK)
        munmap(map, map_len);
    return st;
}

static void emu_dereg_mr(rv_mr_t *mr)
{
    if (mr == NULL || mr->impl == NULL)
        return;
    emu_mr_t *m = mr->impl;
    rv_ctx_t *c = m->ctx;
    /* the write lock waits for servers copying in or out of it */
    pthread_rwlock_wrlock(&c->mr_lock);
    for (size_t i = 0; i < c->nmrs; i++) {
        if (c->mrs[i] == m) {
            c->mrs[i] = c->mrs[--c->nmrs];
            break;
        }
    }
    pthread_rwlock_unlock(&c->mr_lock);
    if (m->map != NULL)
        munmap(m->map, m->map_len);
    mc_free(m);
    mr->impl = NULL;
}

static mc_status_t emu_create_cq(rv_ctx_t *c, int cqe, rv_cq_t **out)
{
    (void)c;
    if (cqe <= 0 || cqe > 65536)
        return MC_ERR_INVALID_ARGUMENT;
    rv_cq_t *cq = mc_calloc(1, sizeof(*cq));
    if (cq == NULL)
        return MC_ERR_NOMEM;
    cq->ring = mc_calloc((size_t)cqe, sizeof(*cq->ring));
    cq->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (cq->ring == NULL || cq->efd < 0) {
        if (cq->efd >= 0)
            close(cq->efd);
        mc_free(cq->ring);
        mc_free(cq);
        return MC_ERR_NOMEM;
    }
    cq->cap = cqe;
    pthread_mutex_init(&cq->mu, NULL);
    *out = cq;
    return MC_OK;
}

static void emu_destroy_cq(rv_cq_t *cq)
{
    if (cq == NULL)
        return;
    close(cq->efd);
    pthread_mutex_destroy(&cq->mu);
    mc_free(cq->ring);
    mc_free(cq);
}

static int emu_cq_fd(rv_cq_t *cq)
{
    return cq->efd;
}

static mc_status_t emu_req_notify(rv_cq_t *cq)
{
    pthread_mutex_lock(&cq->mu);
    cq->armed = 1;
    pthread_mutex_unlock(&cq->mu);
    return MC_OK;
}

static void emu_cq_event(rv_cq_t *cq)
{
    uint64_t v;
    ssize_t k = read(cq->efd, &v, sizeof(v));
    (void)k;
}

static int emu_poll_cq(rv_cq_t *cq, int n, rv_wc_t *wc)
{
    int k = 0;
    pthread_mutex_lock(&cq->mu);
    while (k < n && cq->count > 0) {
        wc[k++] = cq->ring[cq->head];
        cq->head = (cq->head + 1) % cq->cap;
        cq->count--;
    }
    pthread_mutex_unlock(&cq->mu);
    return k;
}

/* Queue ev for every open context of device k (emu_mu held). */
static void post_event(int k, int type, uint8_t port)
{
    for (size_t i = 0; i < g_nctxs; i++) {
        rv_ctx_t *c = g_ctxs[i];
        if (c->dev != k)
            continue;
        if (c->nevents < EMU_EVENTS) {
            c->events[c->nevents].type = type;
            c->events[c->nevents].port = type == RV_EV_DEVICE_FATAL ? 0 : port ? port : c->port;
            c->nevents++;
        }
        uint64_t one = 1;
        ssize_t w = write(c->async_efd, &one, sizeof(one));
        (void)w;
    }
}

void rv_emu_set_down(const char *dev, int down)
{
    int k = dev_index(dev);
    if (k < 0)
        return;
    pthread_mutex_lock(&emu_mu);
    emu_devs[k].down = down;
    post_event(k, down ? RV_EV_PORT_ERR : RV_EV_PORT_ACTIVE, 0);
    pthread_mutex_unlock(&emu_mu);
    MC_WARN(RDMA, "emulated device %s: port %s", dev, down ? "DOWN" : "up");
}

void rv_emu_post_event(const char *dev, int type, uint8_t port)
{
    int k = dev_index(dev);
    if (k < 0)
        return;
    pthread_mutex_lock(&emu_mu);
    post_event(k, type, port);
    pthread_mutex_unlock(&emu_mu);
}

static int emu_async_fd(rv_ctx_t *c)
{
    return c->async_efd;
}

static int emu_async_event(rv_ctx_t *c, rv_async_event_t *ev)
{
    uint64_t v;
    ssize_t r = read(c->async_efd, &v, sizeof(v));
    (void)r;
    pthread_mutex_lock(&emu_mu);
    int got = c->nevents > 0;
    if (got) {
        *ev = c->events[0];
        memmove(&c->events[0], &c->events[1], (c->nevents - 1) * sizeof(c->events[0]));
        c->nevents--;
    }
    pthread_mutex_unlock(&emu_mu);
    return got;
}

static mc_status_t emu_prepare(char *note, size_t len)
{
    snprintf(note, len, "fork safety: nothing to do (emulated NICs pin nothing)");
    return MC_OK;
}

const mc_rdma_verbs_ops_t rv_emu_ops = {
    .name = "emulated",
    .get_devices = emu_get_devices,
    .open = emu_open,
    .close = emu_close,
    .query = emu_query,
    .alloc_pd = emu_alloc_pd,
    .dealloc_pd = emu_dealloc_pd,
    .reg_mr = emu_reg_mr,
    .reg_dmabuf_mr = emu_reg_dmabuf_mr,
    .dereg_mr = emu_dereg_mr,
    .create_cq = emu_create_cq,
    .destroy_cq = emu_destroy_cq,
    .cq_fd = emu_cq_fd,
    .req_notify = emu_req_notify,
    .cq_event = emu_cq_event,
    .poll_cq = emu_poll_cq,
    .create_qp = emu_create_qp,
    .destroy_qp = emu_destroy_qp,
    .qp_num = emu_qp_num,
    .modify_qp = emu_modify_qp,
    .qp_state = emu_qp_state,
    .post_send = emu_post_send,
    .async_fd = emu_async_fd,
    .async_event = emu_async_event,
    .prepare = emu_prepare,
};
