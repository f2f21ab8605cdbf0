/*
 * verbs_real.c - the libibverbs provider of verbs.h: thin wrappers, and the
 * one place where libibverbs' error conventions (NULL + errno, positive
 * errno returns) become mc_status_t. Without the headers at build time
 * (MC_HAVE_IBVERBS unset) it still builds and reports no devices.
 *
 * Not exercised on the build machines (no NIC there): discovery runs and
 * reports "no RDMA devices"; the rest is compiled and kept in step with the
 * emulated provider, which the tests drive.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/rdma/gid.h"
#include "transport/rdma/verbs.h"
#include "util/conf.h"
#include "util/log.h"
#include "util/mem.h"

#ifdef MC_HAVE_IBVERBS
#include <net/if.h>

#include <infiniband/verbs.h>

struct rv_ctx {
    struct ibv_context *ctx;
    char name[RV_NAME_MAX];
    uint8_t port;
    int gid_cfg; /* configured GID index, -1: choose */
    char root[256];
};

struct rv_pd {
    struct ibv_pd *pd;
    rv_ctx_t *c;
};

struct rv_cq {
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
};

struct rv_qp {
    struct ibv_qp *qp;
    rv_ctx_t *c;
};

static mc_status_t from_errno(int e)
{
    switch (e) {
    case 0:
        return MC_OK;
    case ENOMEM:
        return MC_ERR_NOMEM;
    case EINVAL:
        return MC_ERR_INVALID_ARGUMENT;
    case ENODEV:
    case ENOENT:
        return MC_ERR_DEVICE_NOT_FOUND;
    default:
        return MC_ERR_CONTEXT;
    }
}

static uint32_t mtu_bytes(enum ibv_mtu m)
{
    return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}

static enum ibv_mtu mtu_enum(uint32_t b)
{
    switch (b) {
    case 256:
        return IBV_MTU_256;
    case 512:
        return IBV_MTU_512;
    case 1024:
        return IBV_MTU_1024;
    case 2048:
        return IBV_MTU_2048;
    default:
        return IBV_MTU_4096;
    }
}

/* sysfs: PCI bus id (basename of the device link's target) and NUMA node. */
static void sysfs_info(const char *root, const char *dev, rv_dev_info_t *out)
{
    char path[384], real[PATH_MAX];
    snprintf(path, sizeof(path), "%s/class/infiniband/%s/device", root, dev);
    if (realpath(path, real) != NULL) {
        const char *b = strrchr(real, '/');
        snprintf(out->pci, sizeof(out->pci), "%.63s", b ? b + 1 : real);
    }
    snprintf(path, sizeof(path), "%s/class/infiniband/%s/device/numa_node", root, dev);
    FILE *f = fopen(path, "r");
    out->numa_node = -1;
    if (f != NULL) {
        if (fscanf(f, "%d", &out->numa_node) != 1)
            out->numa_node = -1;
        fclose(f);
    }
}

/* The GID table through ibv_query_gid_ex, for when sysfs has none (a
 * container without /sys/class/infiniband): same entries, same choice. */
static int verbs_gid_table(struct ibv_context *ctx, uint8_t port, int len, int link_layer,
                           rd_gid_entry_t *tab, int max)
{
    int n = len < max ? len : max;
    for (int i = 0; i < n; i++) {
        struct ibv_gid_entry e;
        memset(&tab[i], 0, sizeof(tab[i]));
        if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0) != 0)
            continue; /* ENODATA: an empty slot */
        memcpy(tab[i].gid, e.gid.raw, 16);
        if (rd_gid_is_null(tab[i].gid))
            continue;
        tab[i].type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? RV_GID_TYPE_ROCE_V2
                      : link_layer == RV_LL_IB           ? RV_GID_TYPE_IB
                                                         : RV_GID_TYPE_ROCE_V1;
        if (e.ndev_ifindex != 0) {
            char ifn[IF_NAMESIZE];
            if (if_indextoname(e.ndev_ifindex, ifn) != NULL)
                snprintf(tab[i].ndev, sizeof(tab[i].ndev), "%s", ifn);
        }
    }
    return n;
}

/* Port, device limits and the GID to use (gid.h) of an open device. */
static void fill_port(struct ibv_context *ctx, const char *dev, const char *root, uint8_t port,
                      int gid_cfg, rv_dev_info_t *out)
{
    struct ibv_port_attr pa;
    struct ibv_device_attr da;
    out->port = port;
    out->gid_index = -1;
    int tbl_len = 0;
    if (ibv_query_port(ctx, port, &pa) == 0) {
        out->port_active = pa.state == IBV_PORT_ACTIVE;
        out->port_state = pa.state;
        out->lid = pa.lid;
        out->active_mtu = mtu_bytes(pa.active_mtu);
        out->link_layer = pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? RV_LL_IB
                          : pa.link_layer == IBV_LINK_LAYER_ETHERNET ? RV_LL_ETH
                                                                     : RV_LL_UNKNOWN;
        tbl_len = pa.gid_tbl_len;
    } else {
        snprintf(out->gid_why, sizeof(out->gid_why), "ibv_query_port(%u) failed: %s", port,
                 strerror(errno));
        return;
    }
    if (ibv_query_device(ctx, &da) == 0) {
        out->max_qp_wr = (uint32_t)da.max_qp_wr;
        out->max_cqe = (uint32_t)da.max_cqe;
        out->max_qp_rd_atom = (uint32_t)da.max_qp_rd_atom;
        out->max_qp_init_rd_atom = (uint32_t)da.max_qp_init_rd_atom;
    }
    if (out->link_layer == RV_LL_UNKNOWN) /* very old providers report 0 for IB */
        out->link_layer = rd_gid_link_layer_sysfs(root, dev, port);
    static _Thread_local rd_gid_entry_t tab[RD_GID_TBL_MAX];
    int n = rd_gid_read_sysfs(root, dev, port, out->link_layer, tab, RD_GID_TBL_MAX);
    if (n == 0 && tbl_len > 0)
        n = verbs_gid_table(ctx, port, tbl_len, out->link_layer, tab, RD_GID_TBL_MAX);
    out->gid_tbl_len = (uint16_t)n;
    int k = rd_gid_select(tab, n, out->link_layer, gid_cfg, out->gid_why, sizeof(out->gid_why));
    if (k < 0)
        return;
    union ibv_gid gid;
    if (ibv_query_gid(ctx, port, k, &gid) != 0) {
        snprintf(out->gid_why, sizeof(out->gid_why), "ibv_query_gid(port %u, index %d) failed: %s",
                 port, k, strerror(errno));
        return;
    }
    memcpy(out->gid, gid.raw, 16);
    out->gid_index = k;
    out->gid_type = tab[k].type;
}

static const char *opt_root(const rv_port_opts_t *o)
{
    return o->sysfs_root[0] ? o->sysfs_root : "/sys";
}

static int real_get_devices(const rv_port_opts_t *o, rv_dev_info_t *out, int max)
{
    rv_port_opts_t def;
    if (o == NULL) {
        rv_port_opts_default(&def);
        o = &def;
    }
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list == NULL) {
        MC_INFO(RDMA, "no RDMA devices (%s)", strerror(errno));
        return 0;
    }
    int k = 0;
    for (int i = 0; i < n && k < max; i++) {
        memset(&out[k], 0, sizeof(out[k]));
        snprintf(out[k].name, sizeof(out[k].name), "%s", ibv_get_device_name(list[i]));
        sysfs_info(opt_root(o), out[k].name, &out[k]);
        out[k].gid_index = -1;
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (ctx != NULL) {
            fill_port(ctx, out[k].name, opt_root(o), o->port, o->gid_index, &out[k]);
            ibv_close_device(ctx);
        }
        k++;
    }
    ibv_free_device_list(list);
    if (k == 0)
        MC_INFO(RDMA, "no RDMA devices");
    return k;
}

static mc_status_t real_open(const char *dev, const rv_port_opts_t *o, rv_ctx_t **out)
{
    rv_port_opts_t def;
    if (o == NULL) {
        rv_port_opts_default(&def);
        o = &def;
    }
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list == NULL)
        return MC_ERR_DEVICE_NOT_FOUND;
    struct ibv_context *ctx = NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(ibv_get_device_name(list[i]), dev) == 0)
            ctx = ibv_open_device(list[i]);
    int e = errno;
    ibv_free_device_list(list);
    if (ctx == NULL) {
        MC_ERROR(RDMA, "cannot open RDMA device %s: %s", dev, strerror(e));
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    rv_ctx_t *c = mc_calloc(1, sizeof(*c));
    if (c == NULL) {
        ibv_close_device(ctx);
        return MC_ERR_NOMEM;
    }
    c->ctx = ctx;
    c->port = o->port ? o->port : 1;
    c->gid_cfg = o->gid_index;
    snprintf(c->root, sizeof(c->root), "%s", opt_root(o));
    snprintf(c->name, sizeof(c->name), "%s", dev);
    *out = c;
    return MC_OK;
}

static void real_close(rv_ctx_t *c)
{
    if (c == NULL)
        return;
    ibv_close_device(c->ctx);
    mc_free(c);
}

static mc_status_t real_query(rv_ctx_t *c, rv_dev_info_t *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", c->name);
    sysfs_info(c->root, c->name, out);
    fill_port(c->ctx, c->name, c->root, c->port, c->gid_cfg, out);
    return MC_OK;
}

static mc_status_t real_alloc_pd(rv_ctx_t *c, rv_pd_t **out)
{
    rv_pd_t *pd = mc_calloc(1, sizeof(*pd));
    if (pd == NULL)
        return MC_ERR_NOMEM;
    pd->pd = ibv_alloc_pd(c->ctx);
    if (pd->pd == NULL) {
        mc_free(pd);
        return from_errno(errno);
    }
    pd->c = c;
    *out = pd;
    return MC_OK;
}

static void real_dealloc_pd(rv_pd_t *pd)
{
    if (pd == NULL)
        return;
    ibv_dealloc_pd(pd->pd);
    mc_free(pd);
}

static int access_flags(int access)
{
    int a = 0;
    if (access & RV_ACCESS_LOCAL_WRITE)
        a |= IBV_ACCESS_LOCAL_WRITE;
    if (access & RV_ACCESS_REMOTE_WRITE)
        a |= IBV_ACCESS_REMOTE_WRITE;
    if (access & RV_ACCESS_REMOTE_READ)
        a |= IBV_ACCESS_REMOTE_READ;
#ifdef IBV_ACCESS_RELAXED_ORDERING
    if (access & RV_ACCESS_RELAXED_ORDERING)
        a |= IBV_ACCESS_RELAXED_ORDERING;
#endif
    return a;
}

static mc_status_t real_reg_mr(rv_pd_t *pd, void *addr, uint64_t len, int access, rv_mr_t *out)
{
    struct ibv_mr *mr = ibv_reg_mr(pd->pd, addr, len, access_flags(access));
    if (mr == NULL) {
        int e = errno;
        MC_ERROR(RDMA, "ibv_reg_mr(%p, %llu) failed: %s%s", addr, (unsigned long long)len,
                 strerror(e),
                 e == ENOMEM || e == EPERM ? " (is RLIMIT_MEMLOCK large enough? ulimit -l)" : "");
        return from_errno(e);
    }
    out->addr = addr;
    out->len = len;
    out->lkey = mr->lkey;
    out->rkey = mr->rkey;
    out->impl = mr;
    return MC_OK;
}

static mc_status_t real_reg_dmabuf_mr(rv_pd_t *pd, int fd, uint64_t offset, uint64_t len,
                                      uint64_t iova, int access, rv_mr_t *out)
{
    int a = access_flags(access);
    struct ibv_mr *mr = ibv_reg_dmabuf_mr(pd->pd, offset, len, iova, fd, a);
    if (mr == NULL) {
        MC_ERROR(RDMA, "ibv_reg_dmabuf_mr(fd %d, offset %llu, %llu bytes at 0x%llx) failed: %s", fd,
                 (unsigned long long)offset, (unsigned long long)len, (unsigned long long)iova,
                 strerror(errno));
        return from_errno(errno);
    }
    out->addr = (void *)(uintptr_t)iova;
    out->len = len;
    out->lkey = mr->lkey;
    out->rkey = mr->rkey;
    out->impl = mr;
    return MC_OK;
}

static void real_dereg_mr(rv_mr_t *mr)
{
    if (mr == NULL || mr->impl == NULL)
        return;
    ibv_dereg_mr(mr->impl);
    mr->impl = NULL;
}

static mc_status_t real_create_cq(rv_ctx_t *c, int cqe, rv_cq_t **out)
{
    rv_cq_t *cq = mc_calloc(1, sizeof(*cq));
    if (cq == NULL)
        return MC_ERR_NOMEM;
    cq->ch = ibv_create_comp_channel(c->ctx);
    if (cq->ch == NULL)
        goto err;
    cq->cq = ibv_create_cq(c->ctx, cqe, NULL, cq->ch, 0);
    if (cq->cq == NULL)
        goto err_ch;
    /* the channel fd goes into libevent: never block in ibv_get_cq_event */
    int fl = fcntl(cq->ch->fd, F_GETFL);
    if (fl < 0 || fcntl(cq->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
        goto err_cq;
    *out = cq;
    return MC_OK;
err_cq:
    ibv_destroy_cq(cq->cq);
err_ch:
    ibv_destroy_comp_channel(cq->ch);
err:
    mc_free(cq);
    return from_errno(errno);
}

static void real_destroy_cq(rv_cq_t *cq)
{
    if (cq == NULL)
        return;
    ibv_destroy_cq(cq->cq);
    ibv_destroy_comp_channel(cq->ch);
    mc_free(cq);
}

static int real_cq_fd(rv_cq_t *cq)
{
    return cq->ch->fd;
}

static mc_status_t real_req_notify(rv_cq_t *cq)
{
    return from_errno(ibv_req_notify_cq(cq->cq, 0));
}

static void real_cq_event(rv_cq_t *cq)
{
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    unsigned n = 0;
    while (ibv_get_cq_event(cq->ch, &ev_cq, &ev_ctx) == 0)
        n++;
    if (n > 0)
        ibv_ack_cq_events(cq->cq, n);
}

static uint32_t wc_status(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_SUCCESS:
        return RV_WC_SUCCESS;
    case IBV_WC_LOC_LEN_ERR:
        return RV_WC_LOC_LEN_ERR;
    case IBV_WC_LOC_PROT_ERR:
        return RV_WC_LOC_PROT_ERR;
    case IBV_WC_WR_FLUSH_ERR:
        return RV_WC_WR_FLUSH_ERR;
    case IBV_WC_REM_ACCESS_ERR:
        return RV_WC_REM_ACCESS_ERR;
    case IBV_WC_REM_OP_ERR:
        return RV_WC_REM_OP_ERR;
    case IBV_WC_RETRY_EXC_ERR:
        return RV_WC_RETRY_EXC_ERR;
    default:
        return RV_WC_GENERAL_ERR;
    }
}

static int real_poll_cq(rv_cq_t *cq, int n, rv_wc_t *wc)
{
    struct ibv_wc w[64];
    if (n > 64)
        n = 64;
    int k = ibv_poll_cq(cq->cq, n, w);
    if (k < 0)
        return MC_ERR_CONTEXT;
    for (int i = 0; i < k; i++) {
        wc[i].wr_id = w[i].wr_id;
        wc[i].status = wc_status(w[i].status);
        wc[i].byte_len = w[i].byte_len;
        wc[i].qp_num = w[i].qp_num;
        wc[i].opcode = w[i].opcode == IBV_WC_RDMA_READ ? RV_WR_RDMA_READ : RV_WR_RDMA_WRITE;
    }
    return k;
}

static mc_status_t real_create_qp(rv_pd_t *pd, rv_cq_t *cq, const rv_qp_caps_t *caps, rv_qp_t **out)
{
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = cq->cq;
    ia.recv_cq = cq->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = 0;
    ia.cap.max_send_wr = caps->max_send_wr;
    ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = caps->max_inline;
    rv_qp_t *qp = mc_calloc(1, sizeof(*qp));
    if (qp == NULL)
        return MC_ERR_NOMEM;
    qp->qp = ibv_create_qp(pd->pd, &ia);
    if (qp->qp == NULL) {
        int e = errno;
        mc_free(qp);
        MC_ERROR(RDMA, "ibv_create_qp failed: %s", strerror(e));
        return from_errno(e);
    }
    qp->c = pd->c;
    *out = qp;
    return MC_OK;
}

static void real_destroy_qp(rv_qp_t *qp)
{
    if (qp == NULL)
        return;
    ibv_destroy_qp(qp->qp);
    mc_free(qp);
}

static uint32_t real_qp_num(rv_qp_t *qp)
{
    return qp->qp->qp_num;
}

/* Apply attributes as built by transport/rdma/qp_attr.c: no policy here. */
static mc_status_t real_modify_qp(rv_qp_t *qp, rv_qp_state_t to, const rv_qp_attr_t *attr)
{
    static const struct {
        int rv, ibv;
    } bits[] = {
        {RV_QP_PKEY_INDEX, IBV_QP_PKEY_INDEX},
        {RV_QP_PORT, IBV_QP_PORT},
        {RV_QP_ACCESS_FLAGS, IBV_QP_ACCESS_FLAGS},
        {RV_QP_AV, IBV_QP_AV},
        {RV_QP_PATH_MTU, IBV_QP_PATH_MTU},
        {RV_QP_DEST_QPN, IBV_QP_DEST_QPN},
        {RV_QP_RQ_PSN, IBV_QP_RQ_PSN},
        {RV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MAX_DEST_RD_ATOMIC},
        {RV_QP_MIN_RNR_TIMER, IBV_QP_MIN_RNR_TIMER},
        {RV_QP_SQ_PSN, IBV_QP_SQ_PSN},
        {RV_QP_TIMEOUT, IBV_QP_TIMEOUT},
        {RV_QP_RETRY_CNT, IBV_QP_RETRY_CNT},
        {RV_QP_RNR_RETRY, IBV_QP_RNR_RETRY},
        {RV_QP_MAX_QP_RD_ATOMIC, IBV_QP_MAX_QP_RD_ATOMIC},
    };
    static const enum ibv_qp_state states[] = {
        [RV_QPS_RESET] = IBV_QPS_RESET, [RV_QPS_INIT] = IBV_QPS_INIT, [RV_QPS_RTR] = IBV_QPS_RTR,
        [RV_QPS_RTS] = IBV_QPS_RTS,     [RV_QPS_ERR] = IBV_QPS_ERR,
    };
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = states[to];
    int mask = IBV_QP_STATE;
    if (attr != NULL) {
        for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
            if (attr->mask & bits[i].rv)
                mask |= bits[i].ibv;
        a.pkey_index = attr->pkey_index;
        a.port_num = attr->port;
        a.qp_access_flags = (unsigned)access_flags(attr->access);
        a.path_mtu = mtu_enum(attr->path_mtu);
        a.dest_qp_num = attr->dest_qp_num;
        a.rq_psn = attr->rq_psn;
        a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
        a.min_rnr_timer = attr->min_rnr_timer;
        a.ah_attr.is_global = attr->ah.is_global;
        memcpy(a.ah_attr.grh.dgid.raw, attr->ah.dgid, 16);
        a.ah_attr.grh.sgid_index = attr->ah.sgid_index;
        a.ah_attr.grh.hop_limit = attr->ah.hop_limit;
        a.ah_attr.grh.traffic_class = attr->ah.traffic_class;
        a.ah_attr.dlid = attr->ah.dlid;
        a.ah_attr.sl = attr->ah.sl;
        a.ah_attr.port_num = attr->ah.port;
        a.sq_psn = attr->sq_psn;
        a.timeout = attr->timeout;
        a.retry_cnt = attr->retry_cnt;
        a.rnr_retry = attr->rnr_retry;
        a.max_rd_atomic = attr->max_rd_atomic;
    }
    int rc = ibv_modify_qp(qp->qp, &a, mask);
    if (rc != 0) {
        MC_ERROR(RDMA, "%s: ibv_modify_qp(qp %u -> %s) failed: %s", qp->c->name, qp->qp->qp_num,
                 rv_qp_state_str(to), strerror(rc));
        return rc == EINVAL ? MC_ERR_INVALID_ARGUMENT : from_errno(rc);
    }
    return MC_OK;
}

static rv_qp_state_t real_qp_state(rv_qp_t *qp)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    if (ibv_query_qp(qp->qp, &a, IBV_QP_STATE, &ia) != 0)
        return RV_QPS_ERR;
    switch (a.qp_state) {
    case IBV_QPS_RESET:
        return RV_QPS_RESET;
    case IBV_QPS_INIT:
        return RV_QPS_INIT;
    case IBV_QPS_RTR:
        return RV_QPS_RTR;
    case IBV_QPS_RTS:
        return RV_QPS_RTS;
    default:
        return RV_QPS_ERR;
    }
}

static int real_async_fd(rv_ctx_t *c)
{
    int fd = c->ctx->async_fd;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK))
        fcntl(fd, F_SETFL, fl | O_NONBLOCK); /* watched by libevent: never block */
    return fd;
}

static int real_async_event(rv_ctx_t *c, rv_async_event_t *out)
{
    struct ibv_async_event ev;
    for (;;) {
        if (ibv_get_async_event(c->ctx, &ev) != 0)
            return 0;
        int type = 0;
        switch (ev.event_type) {
        case IBV_EVENT_PORT_ACTIVE:
            type = RV_EV_PORT_ACTIVE;
            break;
        case IBV_EVENT_PORT_ERR:
            type = RV_EV_PORT_ERR;
            break;
        case IBV_EVENT_LID_CHANGE:
            type = RV_EV_LID_CHANGE;
            break;
        case IBV_EVENT_GID_CHANGE:
            type = RV_EV_GID_CHANGE;
            break;
        case IBV_EVENT_DEVICE_FATAL:
            type = RV_EV_DEVICE_FATAL;
            break;
        default:
            break; /* QP/CQ events surface as completions */
        }
        out->type = type;
        out->port = type == RV_EV_DEVICE_FATAL ? 0 : (uint8_t)ev.element.port_num;
        ibv_ack_async_event(&ev);
        if (type != 0)
            return 1;
    }
}

/* A process that forks (Python hosts do, for workers and subprocesses)
 * must not let a child's copy-on-write break the pages a NIC DMAs into:
 * ibv_fork_init marks registered memory MADV_DONTFORK, unless the kernel
 * copies DMA pages on fork by itself (5.12+: then it is not needed). */
static mc_status_t real_prepare(char *note, size_t len)
{
    enum ibv_fork_status fs = ibv_is_fork_initialized();
    if (fs == IBV_FORK_UNNEEDED) {
        snprintf(note, len, "fork safety: not needed (the kernel copies DMA pages on fork)");
        return MC_OK;
    }
    if (fs == IBV_FORK_ENABLED) {
        snprintf(note, len, "fork safety: already enabled (ibv_fork_init)");
        return MC_OK;
    }
    int rc = ibv_fork_init();
    if (rc != 0) {
        snprintf(note, len,
                 "fork safety: ibv_fork_init failed: %s (memory was registered before; a fork "
                 "may corrupt RDMA buffers)",
                 strerror(rc));
        return MC_ERR_CONTEXT;
    }
    snprintf(note, len, "fork safety: ibv_fork_init done");
    return MC_OK;
}

/* Translate a chain in groups of 32 WRs, one ibv_post_send per group. */
static mc_status_t real_post_send(rv_qp_t *qp, rv_send_wr_t *wr, rv_send_wr_t **bad)
{
    struct ibv_send_wr w[32];
    struct ibv_sge sg[32];
    rv_send_wr_t *src[32];
    while (wr != NULL) {
        int n = 0;
        for (; wr != NULL && n < 32; wr = wr->next, n++) {
            src[n] = wr;
            sg[n].addr = wr->local_addr;
            sg[n].length = wr->length;
            sg[n].lkey = wr->lkey;
            memset(&w[n], 0, sizeof(w[n]));
            w[n].wr_id = wr->wr_id;
            w[n].sg_list = &sg[n];
            w[n].num_sge = 1;
            w[n].opcode = wr->opcode == RV_WR_RDMA_READ ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
            w[n].send_flags = wr->signaled ? IBV_SEND_SIGNALED : 0;
            w[n].wr.rdma.remote_addr = wr->remote_addr;
            w[n].wr.rdma.rkey = wr->rkey;
            w[n].next = NULL;
            if (n > 0)
                w[n - 1].next = &w[n];
        }
        struct ibv_send_wr *b = NULL;
        int rc = ibv_post_send(qp->qp, w, &b);
        if (rc != 0) {
            *bad = b ? src[b - w] : src[0];
            return rc == ENOMEM ? MC_ERR_LIMIT : rc == EINVAL ? MC_ERR_STATE : from_errno(rc);
        }
    }
    return MC_OK;
}

const mc_rdma_verbs_ops_t rv_real_ops = {
    .name = "verbs",
    .get_devices = real_get_devices,
    .open = real_open,
    .close = real_close,
    .query = real_query,
    .alloc_pd = real_alloc_pd,
    .dealloc_pd = real_dealloc_pd,
    .reg_mr = real_reg_mr,
    .reg_dmabuf_mr = real_reg_dmabuf_mr,
    .dereg_mr = real_dereg_mr,
    .create_cq = real_create_cq,
    .destroy_cq = real_destroy_cq,
    .cq_fd = real_cq_fd,
    .req_notify = real_req_notify,
    .cq_event = real_cq_event,
    .poll_cq = real_poll_cq,
    .create_qp = real_create_qp,
    .destroy_qp = real_destroy_qp,
    .qp_num = real_qp_num,
    .modify_qp = real_modify_qp,
    .qp_state = real_qp_state,
    .post_send = real_post_send,
    .async_fd = real_async_fd,
    .async_event = real_async_event,
    .prepare = real_prepare,
};

#else /* !MC_HAVE_IBVERBS */

static int none_get_devices(const rv_port_opts_t *o, rv_dev_info_t *out, int max)
{
    (void)o;
    (void)out;
    (void)max;
    MC_INFO(RDMA, "no RDMA devices (built without libibverbs)");
    return 0;
}

static mc_status_t none_open(const char *dev, const rv_port_opts_t *o, rv_ctx_t **out)
{
    (void)dev;
    (void)o;
    (void)out;
    return MC_ERR_DEVICE_NOT_FOUND;
}

/* Only get_devices and open are reachable: nothing opens without a device. */
const mc_rdma_verbs_ops_t rv_real_ops = {
    .name = "verbs",
    .get_devices = none_get_devices,
    .open = none_open,
};

#endif

void rv_port_opts_default(rv_port_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->port = 1;
    o->gid_index = -1;
    snprintf(o->sysfs_root, sizeof(o->sysfs_root), "/sys");
}

void rv_port_opts_init(rv_port_opts_t *o)
{
    rv_port_opts_default(o);
    o->port = (uint8_t)mc_conf_env_uint("MC_IB_PORT", 1, 1, 255);
    /* unset (or malformed: logged) = chosen */
    const char *name = mc_conf_env_str("MC_GID_INDEX") ? "MC_GID_INDEX" : "NCCL_IB_GID_INDEX";
    o->gid_index = (int)mc_conf_env_uint(name, RD_GID_TBL_MAX, 0, RD_GID_TBL_MAX - 1);
    if (o->gid_index == RD_GID_TBL_MAX)
        o->gid_index = -1;
    const char *root = mc_conf_env_str("MC_SYSFS_ROOT");
    if (root != NULL)
        snprintf(o->sysfs_root, sizeof(o->sysfs_root), "%s", root);
}
