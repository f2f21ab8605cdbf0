/*
 * rdma.c - the RDMA transport's set-up: provider choice, NIC contexts
 * (PD, CQ with completion channel, reactor), the topology matrix, memory
 * registration on every NIC, the RDMA part of the segment descriptor,
 * counters and teardown. See rdma_int.h for threads and states.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include "rpc/fields.h"
#include "transport/cuda.h"
#include "transport/rdma/gid.h"
#include "transport/rdma/rdma_int.h"
#include "util/conf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define RD_PARALLEL_REG_MIN (64u << 20) /* register on all NICs at once from this size */

static void rd_shutdown(mc_te_t *te);
static void rd_free(mc_te_t *te);
static mc_status_t rd_reg_bufs(mc_te_t *te, te_buf_t *b, size_t n);
static void rd_dereg_buf(mc_te_t *te, te_buf_t *b);

static unsigned env_uint(const char *name, unsigned def, unsigned lo, unsigned hi)
{
    return (unsigned)mc_conf_env_uint(name, def, lo, hi);
}

/* A setting where -1 means "not set" (MC_IB_TC): unset or malformed (then
 * logged) is -1. */
static int env_int_or_unset(const char *name, unsigned lo, unsigned hi)
{
    uint64_t v = mc_conf_env_uint(name, (uint64_t)hi + 1, lo, hi);
    return v > hi ? -1 : (int)v;
}

static unsigned opt_or(unsigned v, unsigned def)
{
    return v ? v : def;
}

static mc_reactor_t *reactor_for(mc_te_t *te, int numa, unsigned idx)
{
    for (unsigned i = 0; i < te->nr && numa >= 0; i++)
        if (mc_reactor_numa_node(te->rs[i]) == numa)
            return te->rs[i];
    return te->rs[idx % te->nr];
}

static void nic_start_on_reactor(void *arg)
{
    rd_nic_t *n = arg;
    if (mc_hmap_init(&n->eps, 64) != MC_OK || rd_nic_events_start(n) != MC_OK)
        n->dead = 1;
}

static void nic_close(rd_transport_t *t, rd_nic_t *n)
{
    if (n->cq != NULL)
        t->v->destroy_cq(n->cq);
    if (n->pd != NULL)
        t->v->dealloc_pd(n->pd);
    if (n->ctx != NULL)
        t->v->close(n->ctx);
    n->cq = NULL;
    n->pd = NULL;
    n->ctx = NULL;
}

static mc_status_t nic_open(rd_transport_t *t, rd_nic_t *n)
{
    const mc_rdma_verbs_ops_t *v = t->v;
    mc_status_t st = v->open(n->name, &t->port_opts, &n->ctx);
    if (st != MC_OK)
        return st;
    if ((st = v->query(n->ctx, &n->info)) != MC_OK)
        goto err;
    char why[256];
    if (rd_dev_validate(&n->info, why, sizeof(why)) != MC_OK) {
        MC_ERROR(RDMA, "RDMA device %s port %u is not usable: %s", n->name, n->info.port, why);
        st = MC_ERR_DEVICE_NOT_FOUND;
        nic_close(t, n);
        return st;
    }
    if (n->info.gid_why[0] != '\0')
        MC_WARN(RDMA, "%s port %u: %s", n->name, n->info.port, n->info.gid_why);
    if ((st = v->alloc_pd(n->ctx, &n->pd)) != MC_OK)
        goto err;
    unsigned cqe = t->max_cqe;
    if (n->info.max_cqe && cqe > n->info.max_cqe)
        cqe = n->info.max_cqe;
    t->max_cqe = cqe;
    if ((st = v->create_cq(n->ctx, (int)cqe, &n->cq)) != MC_OK)
        goto err;
    n->mtu = n->info.active_mtu < t->mtu ? n->info.active_mtu : t->mtu;
    n->qp_wr = n->info.max_qp_wr && n->info.max_qp_wr < t->max_wr ? n->info.max_qp_wr : t->max_wr;
    if (n->mtu < 256)
        n->mtu = 256;
    n->r = reactor_for(t->te, n->info.numa_node, n->idx);
    rd_sieve_init(&n->sieve);
    mc_rpc_run_on(n->r, nic_start_on_reactor, n);
    if (n->dead) {
        st = MC_ERR_CONTEXT;
        goto err;
    }
    char gs[RD_GID_STR_MAX];
    MC_INFO(RDMA,
            "%s: %s device, port %u %s, GID index %d %s (%s), LID %u, numa %d, mtu %u, "
            "max_qp_rd_atom %u, reactor %s",
            n->name, v->name, n->info.port, rd_link_layer_str(n->info.link_layer),
            n->info.gid_index, rd_gid_str(n->info.gid, gs, sizeof(gs)),
            rd_gid_type_str(n->info.gid_type), n->info.lid, n->info.numa_node, n->mtu,
            n->info.max_qp_rd_atom, mc_reactor_name(n->r));
    return MC_OK;
err:
    MC_ERROR(RDMA, "cannot set up RDMA device %s: %s", n->name, mc_status_str(st));
    nic_close(t, n);
    return st;
}

static void transport_free(rd_transport_t *t)
{
    for (unsigned i = 0; i < t->nnics; i++)
        nic_close(t, &t->nics[i]);
    for (unsigned i = 0; i < RD_MAX_NICS; i++)
        pthread_mutex_destroy(&t->nics[i].info_mu);
    mc_free(t->matrix_json);
    mc_free(t);
}

/* What a host needs before memory is pinned: fork safety once per process
 * (Python hosts fork), and a locked-memory limit that lets registrations
 * through (the usual first failure on a new machine). */
static void env_checks(rd_transport_t *t)
{
    if (t->v == &rv_emu_ops)
        return; /* emulated NICs pin nothing */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int prepared;
    char note[400] = "";
    pthread_mutex_lock(&mu);
    if (!prepared && t->v->prepare != NULL) {
        if (t->v->prepare(note, sizeof(note)) == MC_OK)
            MC_INFO(RDMA, "%s", note);
        else
            MC_WARN(RDMA, "%s", note);
        prepared = 1;
    }
    pthread_mutex_unlock(&mu);
    if (rd_memlock_check(RD_MEMLOCK_WARN, note, sizeof(note)) != MC_OK)
        MC_WARN(RDMA, "%s", note);
}

mc_status_t rd_memlock_check(uint64_t len, char *why, size_t whylen)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        (uint64_t)rl.rlim_cur >= len)
        return MC_OK;
    snprintf(why, whylen,
             "RLIMIT_MEMLOCK is %llu KiB: registering %llu KiB of memory for RDMA will fail "
             "(raise it: 'ulimit -l unlimited', LimitMEMLOCK=infinity in a systemd unit, "
             "--ulimit memlock=-1 for docker, memlock in /etc/security/limits.conf)",
             (unsigned long long)rl.rlim_cur / 1024, (unsigned long long)len / 1024);
    return MC_ERR_MEMORY;
}

/* Is nvidia-peermem (or its predecessor nv_peer_mem) loaded? */
static int peermem_loaded(const rd_transport_t *t)
{
    if (t->v == &rv_emu_ops) {
        rv_emu_opts_t eo;
        rv_emu_opts_get(&eo);
        return !eo.no_peermem;
    }
    char path[384];
    static const char *const mods[] = {"nvidia_peermem", "nv_peer_mem"};
    for (size_t i = 0; i < sizeof(mods) / sizeof(mods[0]); i++) {
        snprintf(path, sizeof(path), "%s/module/%s", t->port_opts.sysfs_root, mods[i]);
        if (access(path, F_OK) == 0)
            return 1;
    }
    return 0;
}

/* How GPU memory will be registered: dma-buf when the driver exports it
 * for every GPU and the provider imports it, else nvidia-peermem when
 * loaded; MC_GPU_REG=dmabuf|peermem forces one. Said once, at start. */
static int gpu_reg_mode(rd_transport_t *t)
{
    int ngpus = te_cuda_gpus(NULL);
    if (ngpus == 0)
        return RD_GPU_REG_NONE;
    int dmabuf = t->v->reg_dmabuf_mr != NULL;
    for (int i = 0; i < ngpus && dmabuf; i++)
        dmabuf = te_cuda_dmabuf_supported(i);
    int peermem = peermem_loaded(t);
    const char *force = mc_conf_env_str("MC_GPU_REG");
    int mode = dmabuf ? RD_GPU_REG_DMABUF : peermem ? RD_GPU_REG_PEERMEM : RD_GPU_REG_NONE;
    if (force != NULL && strcmp(force, "dmabuf") == 0)
        mode = RD_GPU_REG_DMABUF;
    else if (force != NULL && strcmp(force, "peermem") == 0)
        mode = RD_GPU_REG_PEERMEM;
    else if (force != NULL && *force && strcmp(force, "auto") != 0)
        MC_WARN(RDMA, "MC_GPU_REG='%s' is not auto, dmabuf or peermem: using auto", force);
    if (mode == RD_GPU_REG_DMABUF)
        MC_INFO(RDMA,
                "GPU memory: registered as dma-buf (cuMemGetHandleForAddressRange + "
                "ibv_reg_dmabuf_mr)%s",
                dmabuf ? "" : " as MC_GPU_REG asks, though the driver reports no support");
    else if (mode == RD_GPU_REG_PEERMEM)
        MC_INFO(RDMA,
                "GPU memory: registered through nvidia-peermem (ibv_reg_mr on device "
                "pointers)%s",
                peermem ? "" : " as MC_GPU_REG asks, though the module is not loaded");
    else
        MC_WARN(RDMA,
                "GPU memory cannot be registered on the NICs: %s and no nvidia-peermem "
                "module is loaded (GPU buffers will be refused)",
                t->v->reg_dmabuf_mr == NULL ? "the verbs provider has no ibv_reg_dmabuf_mr"
                                            : "the CUDA driver exports no dma-buf");
    return mode;
}

/* The engine registers the buffers it has on the NICs once this returned
 * (reg_bufs), and the ones to come. */
static mc_status_t rd_install(mc_te_t *te)
{
    if (RD_OF(te) != NULL)
        return MC_OK;
    const mc_te_opts_t *o = &te->o;
    rd_transport_t *t = mc_calloc(1, sizeof(*t));
    if (t == NULL)
        return MC_ERR_NOMEM;
    t->te = te;
    for (unsigned i = 0; i < RD_MAX_NICS; i++)
        pthread_mutex_init(&t->nics[i].info_mu, NULL);
    t->qps_per_ep = env_uint("MC_NUM_QP_PER_EP", opt_or(o->rdma_qps_per_ep, 4), 1, RD_MAX_QPS);
    t->max_wr = env_uint("MC_MAX_WR", opt_or(o->rdma_max_wr, 256), 1, 16384);
    t->max_cqe = env_uint("MC_MAX_CQE_PER_CTX", opt_or(o->rdma_max_cqe, 4096), 16, 1u << 20);
    t->max_eps = env_uint("MC_MAX_EP_PER_CTX", opt_or(o->rdma_max_eps, 256), 1, 1u << 20);
    t->retry = env_uint("MC_RETRY_CNT", opt_or(o->rdma_retry, 9), 0, 250);
    t->mtu = env_uint("MC_MTU", opt_or(o->rdma_mtu, 4096), 256, 4096);
    /* QP settings, upstream's names */
    rd_qp_settings_init(&t->qs);
    t->qs.traffic_class = env_int_or_unset("MC_IB_TC", 0, 255);
    t->qs.service_level = (uint8_t)env_uint("MC_IB_SL", 0, 0, 15);
    t->qs.timeout = (uint8_t)env_uint("MC_IB_TIMEOUT", RD_QP_DEFAULT_TIMEOUT, 1, 31);
    t->qs.retry_cnt = (uint8_t)env_uint("MC_IB_RETRY_CNT", RD_QP_DEFAULT_RETRY_CNT, 0, 7);
    t->qs.pkey_index = (uint16_t)env_uint("MC_PKEY_INDEX", 0, 0, 65535);
    /* upstream's per-slice deadline, in seconds; unset: none */
    int slice_s = env_int_or_unset("MC_SLICE_TIMEOUT", 1, 65535);
    t->slice_timeout_ms = slice_s > 0 ? (uint32_t)slice_s * 1000u : 0;
    if (getrandom(&t->instance, sizeof(t->instance), 0) != (ssize_t)sizeof(t->instance))
        t->instance = mc_now_ns() ^ ((uint64_t)getpid() << 32);
    t->instance |= 1; /* never 0 ("not described") */
    if (t->mtu & (t->mtu - 1)) {
        MC_ERROR(RDMA, "bad MTU %u: expected 256, 512, 1024, 2048 or 4096", t->mtu);
        transport_free(t);
        return MC_ERR_INVALID_ARGUMENT;
    }
    unsigned emulated = env_uint("MC_RDMA_EMULATED", o->rdma_emulated, 0, RV_MAX_DEVICES);
    /* Busy polling pays when completions come from hardware; emulated NICs
     * are threads of these processes, and a spinning reactor takes the CPU
     * they need (32 x 4 KiB writes: 8k requests/s busy-polling, 53k in
     * event mode on 2 cores): events only unless asked. */
    t->busy_poll_us = env_uint("MC_RDMA_BUSY_POLL_US",
                               opt_or(o->rdma_busy_poll_us, emulated ? 0 : 50), 0, 1000000);
    const char *devices = mc_conf_env_str("MC_RDMA_DEVICES");
    const char *matrix = mc_conf_env_str("MC_NIC_PRIORITY_MATRIX");
    if (devices == NULL)
        devices = o->rdma_devices;
    if (matrix == NULL)
        matrix = o->rdma_matrix;
    rv_port_opts_init(&t->port_opts); /* the real provider's addressing, for every context */
    if (emulated > 0) {
        rv_emu_opts_t eo;
        rv_emu_opts_get(&eo);
        eo.ndevices = emulated;
        rv_emu_configure(&eo);
        t->v = &rv_emu_ops;
        MC_WARN(RDMA, "rdma transport on %u EMULATED NIC(s): for tests and demos only", emulated);
    } else {
        t->v = &rv_real_ops;
    }

    env_checks(t);
    rv_dev_info_t devs[RV_MAX_DEVICES];
    int ndev = t->v->get_devices(&t->port_opts, devs, RV_MAX_DEVICES);
    char err[256] = "";
    mc_status_t st;
    if (matrix != NULL && *matrix != '\0') {
        st = rd_topo_parse(&t->topo, matrix, err, sizeof(err));
        if (st == MC_OK)
            st = rd_topo_check_devices(&t->topo, devs, ndev, err, sizeof(err));
    } else {
        /* cuda:N entries prefer the NICs closest to GPU N on the PCIe tree */
        rd_gpu_facts_t gpus[RD_MAX_LOCS / 2];
        int ngpus = te_cuda_gpus(NULL);
        if (ngpus > RD_MAX_LOCS / 2)
            ngpus = RD_MAX_LOCS / 2;
        for (int i = 0; i < ngpus; i++) {
            gpus[i].numa = -1;
            if (te_cuda_pci_bus_id(i, gpus[i].pci, sizeof(gpus[i].pci)) != MC_OK)
                gpus[i].pci[0] = '\0';
        }
        st = rd_topo_discover(&t->topo, devs, ndev, mc_numa_node_count(), gpus, (unsigned)ngpus,
                              t->port_opts.sysfs_root, devices, err, sizeof(err));
    }
    if (st != MC_OK) {
        if (st == MC_ERR_DEVICE_NOT_FOUND)
            MC_ERROR(RDMA, "cannot install the rdma transport: %s%s", err,
                     emulated ? ""
                              : " (MC_RDMA_EMULATED=N selects N emulated NICs, for tests "
                                "and demos only)");
        else
            MC_ERROR(RDMA, "cannot install the rdma transport: %s", err);
        transport_free(t);
        return st;
    }
    size_t need = rd_topo_format(&t->topo, NULL, 0);
    t->matrix_json = mc_malloc(need);
    if (t->matrix_json == NULL) {
        transport_free(t);
        return MC_ERR_NOMEM;
    }
    rd_topo_format(&t->topo, t->matrix_json, need);
    for (unsigned i = 0; i < t->topo.nnics; i++) {
        rd_nic_t *n = &t->nics[i];
        n->t = t;
        n->idx = i;
        memcpy(n->name, t->topo.nics[i], sizeof(n->name)); /* both RV_NAME_MAX, terminated */
        st = nic_open(t, n);
        t->nnics = i + 1;
        if (st != MC_OK) {
            te->tp[TE_TP_RDMA] = t;
            rd_shutdown(te);
            te->tp[TE_TP_RDMA] = NULL;
            transport_free(t);
            return st;
        }
    }
    t->gpu_reg = gpu_reg_mode(t);
    te->tp[TE_TP_RDMA] = t;
    MC_INFO(RDMA, "rdma transport on %u NIC(s) (%s): matrix %s", t->nnics, t->v->name,
            t->matrix_json);
    return MC_OK;
}

static void nic_shutdown_on_reactor(void *arg)
{
    rd_nic_t *n = arg;
    rd_nic_close_all(n);
    rd_nic_events_stop(n);
    if (!n->dead)
        mc_hmap_fini(&n->eps);
    n->dead = 1;
}

static void rd_shutdown(mc_te_t *te)
{
    rd_transport_t *t = RD_OF(te);
    if (t == NULL)
        return;
    for (unsigned i = 0; i < t->nnics; i++)
        if (t->nics[i].r != NULL && t->nics[i].ctx != NULL)
            mc_rpc_run_on(t->nics[i].r, nic_shutdown_on_reactor, &t->nics[i]);
}

static void rd_free(mc_te_t *te)
{
    if (RD_OF(te) == NULL)
        return;
    /* local MRs go before their PDs */
    for (size_t i = 0; i < te->nbufs; i++)
        rd_dereg_buf(te, &te->bufs[i]);
    transport_free(RD_OF(te));
    te->tp[TE_TP_RDMA] = NULL;
}

/* ---------------------------------------------------------- memory */

static void rd_dereg_buf(mc_te_t *te, te_buf_t *tb)
{
    rd_transport_t *t = RD_OF(te);
    rd_buf_t *b = RD_BUF(tb);
    if (t == NULL || b->mr == NULL)
        return;
    for (unsigned i = 0; i < b->nkeys; i++)
        t->v->dereg_mr(&b->mr[i]);
    mc_free(b->mr);
    b->mr = NULL;
    b->nkeys = 0;
}

typedef struct reg_job {
    rd_transport_t *t;
    unsigned nic;
    te_buf_t *b;
    int access;
    int dmabuf_fd; /* >= 0: register this dma-buf (GPU memory) */
    uint64_t dmabuf_off;
    mc_status_t *st;
} reg_job_t;

static void *reg_thread(void *arg)
{
    reg_job_t *j = arg;
    const mc_rdma_verbs_ops_t *v = j->t->v;
    rv_pd_t *pd = j->t->nics[j->nic].pd;
    if (j->dmabuf_fd >= 0)
        j->st[j->nic] = v->reg_dmabuf_mr(pd, j->dmabuf_fd, j->dmabuf_off, j->b->len, j->b->addr,
                                         j->access, &RD_BUF(j->b)->mr[j->nic]);
    else
        j->st[j->nic] = v->reg_mr(pd, (void *)(uintptr_t)j->b->addr, j->b->len, j->access,
                                  &RD_BUF(j->b)->mr[j->nic]);
    return NULL;
}

/* Register b on every NIC, one thread per NIC for large regions (pinning
 * and mapping a large region costs ~1 s per 100 GB per NIC; the NICs do it
 * in parallel). st[i] is NIC i's result. */
static void reg_all_nics(rd_transport_t *t, te_buf_t *b, int access, int fd, uint64_t off,
                         mc_status_t *st)
{
    reg_job_t jobs[RD_MAX_NICS];
    pthread_t th[RD_MAX_NICS];
    int started[RD_MAX_NICS] = {0};
    int parallel = t->nnics > 1 && b->len >= RD_PARALLEL_REG_MIN;
    for (unsigned i = 0; i < t->nnics; i++) {
        jobs[i] = (reg_job_t){t, i, b, access, fd, off, st};
        if (parallel && pthread_create(&th[i], NULL, reg_thread, &jobs[i]) == 0)
            started[i] = 1;
        else
            reg_thread(&jobs[i]);
    }
    for (unsigned i = 0; i < t->nnics; i++)
        if (started[i])
            pthread_join(th[i], NULL);
}

/* GPU memory's way onto the NICs: the dma-buf of its allocation (fd >= 0)
 * or its address (peermem). */
static mc_status_t gpu_source(rd_transport_t *t, const te_buf_t *b, int *fd, uint64_t *off)
{
    *fd = -1;
    switch (t->gpu_reg) {
    case RD_GPU_REG_DMABUF: {
        mc_status_t st = te_cuda_dmabuf((const void *)(uintptr_t)b->addr, b->len, fd, off);
        if (st != MC_OK)
            MC_ERROR(RDMA, "cannot export 0x%llx+%llu (%s) as dma-buf: %s",
                     (unsigned long long)b->addr, (unsigned long long)b->len, b->location,
                     mc_status_str(st));
        return st;
    }
    case RD_GPU_REG_PEERMEM:
        return MC_OK;
    default:
        MC_ERROR(RDMA,
                 "cannot register %s memory on the NICs: neither dma-buf nor "
                 "nvidia-peermem is available (see the log at start)",
                 b->location);
        return MC_ERR_NOT_SUPPORTED;
    }
}

static mc_status_t rd_reg_bufs(mc_te_t *te, te_buf_t *b, size_t n)
{
    rd_transport_t *t = RD_OF(te);
    if (t == NULL)
        return MC_OK;
    /* local-only buffers need LOCAL_WRITE (READ lands there); remote ones
     * every right */
    for (size_t k = 0; k < n; k++) {
        rd_buf_t *rb = RD_BUF(&b[k]);
        if (rb->mr != NULL)
            continue;
        int gpu = strncmp(b[k].location, "cuda:", 5) == 0;
        int fd = -1;
        uint64_t off = 0;
        if (gpu && gpu_source(t, &b[k], &fd, &off) != MC_OK)
            goto err;
        char why[400];
        if (!gpu && t->v != &rv_emu_ops && rd_memlock_check(b[k].len, why, sizeof(why)) != MC_OK) {
            MC_ERROR(RDMA, "cannot register 0x%llx+%llu: %s", (unsigned long long)b[k].addr,
                     (unsigned long long)b[k].len, why);
            goto err;
        }
        int access = RV_ACCESS_LOCAL_WRITE | RV_ACCESS_RELAXED_ORDERING;
        if (b[k].remote)
            access |= RV_ACCESS_REMOTE_READ | RV_ACCESS_REMOTE_WRITE;
        rb->mr = mc_calloc(t->nnics, sizeof(rv_mr_t));
        if (rb->mr == NULL) {
            if (fd >= 0)
                close(fd);
            goto err;
        }
        mc_status_t pst[RD_MAX_NICS];
        reg_all_nics(t, &b[k], access, fd, off, pst);
        if (fd >= 0)
            close(fd); /* the registrations hold the buffer */
        for (unsigned i = 0; i < t->nnics; i++) {
            mc_status_t st = pst[i];
            if (st != MC_OK) {
                /* undo the NICs after i that did register */
                for (unsigned j = i + 1; j < t->nnics; j++)
                    if (pst[j] == MC_OK)
                        t->v->dereg_mr(&rb->mr[j]);
                MC_ERROR(RDMA, "cannot register 0x%llx+%llu (%s) on %s: %s%s",
                         (unsigned long long)b[k].addr, (unsigned long long)b[k].len, b[k].location,
                         t->nics[i].name, mc_status_str(st),
                         !gpu                               ? ""
                         : t->gpu_reg == RD_GPU_REG_PEERMEM ? " (through nvidia-peermem)"
                                                            : " (as dma-buf)");
                rb->nkeys = i;
                goto err;
            }
            rb->lkey[i] = rb->mr[i].lkey;
            rb->rkey[i] = rb->mr[i].rkey;
        }
        rb->nkeys = t->nnics;
        const rd_topo_entry_t *e = rd_topo_find(&t->topo, b[k].location);
        rb->ent = e ? (int)(e - t->topo.ents) + 1 : -1;
    }
    return MC_OK;
err:
    for (size_t k = 0; k < n; k++)
        rd_dereg_buf(te, &b[k]);
    return MC_ERR_MEMORY;
}

/* ---------------------------------------------------------- descriptor */

/* (rdma_int.h) */
void rd_write_port(mc_mp_writer_t *w, const rd_nic_t *n)
{
    mc_mp_write_uint(w, MC_F_GID);
    mc_mp_write_bin(w, n->info.gid, 16);
    mc_mp_write_uint(w, MC_F_LID);
    mc_mp_write_uint(w, n->info.lid);
    mc_mp_write_uint(w, MC_F_MTU);
    mc_mp_write_uint(w, n->mtu);
    mc_mp_write_uint(w, MC_F_LINK_LAYER);
    mc_mp_write_uint(w, (uint64_t)n->info.link_layer);
    mc_mp_write_uint(w, MC_F_GID_TYPE);
    mc_mp_write_uint(w, n->info.gid_type);
}

static void rd_desc_encode(mc_te_t *te, mc_mp_writer_t *w)
{
    rd_transport_t *t = RD_OF(te);
    mc_mp_write_map(w, 3);
    mc_mp_write_uint(w, MC_F_INSTANCE);
    mc_mp_write_uint(w, t->instance);
    mc_mp_write_uint(w, MC_F_NICS);
    mc_mp_write_array(w, t->nnics);
    for (unsigned i = 0; i < t->nnics; i++) {
        rd_nic_t *n = &t->nics[i];
        pthread_mutex_lock(&n->info_mu);
        mc_mp_write_map(w, 6);
        mc_mp_write_uint(w, MC_F_NAME);
        mc_mp_write_cstr(w, n->name);
        rd_write_port(w, n);
        pthread_mutex_unlock(&n->info_mu);
    }
    mc_mp_write_uint(w, MC_F_MATRIX);
    mc_mp_write_cstr(w, t->matrix_json);
}

static void read_name(mc_mp_reader_t *r, char *dst, size_t room)
{
    uint32_t len = 0;
    const char *s = mc_mp_read_str(r, &len);
    if (r->err == MC_OK && len > 0 && len < room) {
        memcpy(dst, s, len);
        dst[len] = '\0';
    } else if (r->err == MC_OK) {
        r->err = MC_ERR_PROTOCOL;
    }
}

static mc_status_t rd_desc_decode(mc_te_t *te, mc_mp_reader_t *r, void **out)
{
    (void)te;
    rd_peer_t *p = mc_calloc(1, sizeof(*p));
    if (p == NULL)
        return MC_ERR_NOMEM;
    int have_matrix = 0;
    uint32_t nf = mc_mp_read_map(r);
    for (uint32_t f = 0; f < nf && r->err == MC_OK; f++) {
        switch (mc_mp_read_uint(r)) {
        case MC_F_NICS: {
            uint32_t nn = mc_mp_read_array(r);
            if (nn > RD_MAX_NICS) {
                r->err = MC_ERR_PROTOCOL;
                break;
            }
            p->nnics = nn;
            for (uint32_t i = 0; i < nn && r->err == MC_OK; i++) {
                uint32_t nk = mc_mp_read_map(r);
                for (uint32_t k = 0; k < nk && r->err == MC_OK; k++) {
                    switch (mc_mp_read_uint(r)) {
                    case MC_F_NAME:
                        read_name(r, p->nic[i].name, sizeof(p->nic[i].name));
                        break;
                    case MC_F_GID: {
                        uint32_t gl = 0;
                        const void *g = mc_mp_read_bin(r, &gl);
                        if (r->err == MC_OK && gl == 16)
                            memcpy(p->nic[i].gid, g, 16);
                        else if (r->err == MC_OK)
                            r->err = MC_ERR_PROTOCOL;
                        break;
                    }
                    case MC_F_LID:
                        p->nic[i].lid = (uint16_t)mc_mp_read_uint(r);
                        break;
                    case MC_F_MTU:
                        p->nic[i].mtu = (uint32_t)mc_mp_read_uint(r);
                        break;
                    case MC_F_LINK_LAYER: {
                        uint64_t ll = mc_mp_read_uint(r);
                        p->nic[i].link_layer = ll == RV_LL_IB || ll == RV_LL_ETH ? (int)ll : 0;
                        break;
                    }
                    case MC_F_GID_TYPE: {
                        uint64_t gt = mc_mp_read_uint(r);
                        p->nic[i].gid_type = gt <= RV_GID_TYPE_ROCE_V2 ? (uint8_t)gt : 0;
                        break;
                    }
                    default:
                        mc_mp_skip(r);
                        break;
                    }
                }
            }
            break;
        }
        case MC_F_INSTANCE:
            p->instance = mc_mp_read_uint(r);
            break;
        case MC_F_MATRIX: {
            uint32_t len = 0;
            const char *s = mc_mp_read_str(r, &len);
            if (r->err != MC_OK || len > 65536) {
                r->err = MC_ERR_PROTOCOL;
                break;
            }
            char *text = mc_strndup(s, len);
            char err[200];
            if (text == NULL || rd_topo_parse(&p->topo, text, err, sizeof(err)) != MC_OK) {
                MC_WARN(RDMA, "peer descriptor: bad matrix: %s", text ? err : "no memory");
                r->err = MC_ERR_PROTOCOL;
            }
            mc_free(text);
            have_matrix = 1;
            break;
        }
        default:
            mc_mp_skip(r);
            break;
        }
    }
    /* the matrix must name exactly the NICs listed, in the same order */
    int ok = r->err == MC_OK && have_matrix && p->nnics > 0 && p->topo.nnics == p->nnics;
    for (unsigned i = 0; ok && i < p->nnics; i++)
        ok = strcmp(p->topo.nics[i], p->nic[i].name) == 0;
    if (!ok) {
        mc_free(p);
        if (r->err == MC_OK)
            r->err = MC_ERR_PROTOCOL;
        return MC_ERR_MALFORMED;
    }
    *out = p;
    return MC_OK;
}

static void rd_peer_free(void *p)
{
    mc_free(p);
}

/* Every buffer of the peer carries one rkey per NIC. */
static mc_status_t rd_desc_check(const void *peer, const te_buf_t *bufs, size_t n)
{
    const rd_peer_t *p = peer;
    for (size_t k = 0; k < n; k++)
        if (RD_CBUF(&bufs[k])->nkeys != p->nnics)
            return MC_ERR_MALFORMED;
    return MC_OK;
}

/* A local buffer's rkeys, one per NIC (MC_F_RKEYS in its map). */
static unsigned rd_buf_nfields(mc_te_t *te, const te_buf_t *b)
{
    (void)te;
    return RD_CBUF(b)->nkeys > 0;
}

static void rd_buf_encode(mc_te_t *te, const te_buf_t *b, mc_mp_writer_t *w)
{
    const rd_buf_t *rb = RD_CBUF(b);
    (void)te;
    mc_mp_write_uint(w, MC_F_RKEYS);
    mc_mp_write_array(w, rb->nkeys);
    for (unsigned k = 0; k < rb->nkeys; k++)
        mc_mp_write_uint(w, rb->rkey[k]);
}

static int rd_buf_decode(uint64_t key, mc_mp_reader_t *r, te_buf_t *b)
{
    if (key != MC_F_RKEYS)
        return 0;
    rd_buf_t *rb = RD_BUF(b);
    uint32_t nk = mc_mp_read_array(r);
    if (nk > RD_MAX_NICS) {
        r->err = MC_ERR_PROTOCOL;
        return 1;
    }
    for (uint32_t j = 0; j < nk && r->err == MC_OK; j++)
        rb->rkey[j] = (uint32_t)mc_mp_read_uint(r);
    rb->nkeys = nk;
    return 1;
}

static int rd_usable(mc_te_t *te, te_seg_t *seg, uint64_t remote, uint64_t len)
{
    (void)remote;
    (void)len;
    return seg != NULL && RD_OF(te) != NULL && RD_PEER(seg) != NULL;
}

unsigned te_rdma_stats(mc_te_t *te, te_rdma_nic_stats_t *out, unsigned max)
{
    rd_transport_t *t = RD_OF(te);
    if (t == NULL)
        return 0;
    for (unsigned i = 0; i < t->nnics && i < max; i++) {
        rd_nic_t *n = &t->nics[i];
        te_rdma_nic_stats_t *s = &out[i];
        memset(s, 0, sizeof(*s));
        snprintf(s->name, sizeof(s->name), "%s", n->name);
        s->bytes = atomic_load(&n->bytes);
        s->slices = atomic_load(&n->slices);
        s->retries = atomic_load(&n->retries);
        s->errors = atomic_load(&n->errors);
        s->eps = atomic_load(&n->neps);
        s->eps_created = atomic_load(&n->eps_created);
        s->evictions = atomic_load(&n->evictions);
        s->handshakes = atomic_load(&n->handshakes);
        s->requeries = atomic_load(&n->requeries);
        s->mtu = atomic_load(&n->last_mtu);
    }
    return t->nnics;
}

const te_transport_ops_t te_rdma_ops = {
    .name = "rdma",
    .flags = TE_TP_CAN_GPU | TE_TP_LOCAL_REG | TE_TP_BUF_PRIV,
    .desc_key = MC_F_RDMA,
    .register_server = rd_ep_register_server,
    .install = rd_install,
    .shutdown = rd_shutdown,
    .free = rd_free,
    .reg_bufs = rd_reg_bufs,
    .dereg_buf = rd_dereg_buf,
    .desc_encode = rd_desc_encode,
    .buf_nfields = rd_buf_nfields,
    .buf_encode = rd_buf_encode,
    .buf_decode = rd_buf_decode,
    .desc_decode = rd_desc_decode,
    .desc_check = rd_desc_check,
    .peer_free = rd_peer_free,
    .usable = rd_usable,
    .post = rd_post,
    .submit_end = rd_submit_end,
};
