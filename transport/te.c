/*
 * te.c - the accessors of transport/te.h: what the rest of the tree may
 * know of an engine, read from its private structures here.
 */
#include "transport/cuda.h"
#include "transport/te.h"
#include "transport/te_int.h"

#include <stdio.h>

#include "util/prom.h"

unsigned te_nreactors(const mc_te_t *te)
{
    return te->nr;
}

mc_reactor_t *te_reactor(const mc_te_t *te, unsigned i)
{
    return i < te->nr ? te->rs[i] : NULL;
}

const mc_auth_key_t *te_auth_key(const mc_te_t *te)
{
    return te->has_key ? &te->key : NULL;
}

void te_fence_inbound(mc_te_t *te)
{
    if (te->srv != NULL)
        mc_rpc_server_fence(te->srv);
}

void te_owner_id(const mc_te_t *te, uint64_t *hi, uint64_t *lo)
{
    *hi = te->o.owner_hi;
    *lo = te->o.owner_lo;
}

mc_status_t te_meta_retarget(mc_te_t *te, const char *host, uint16_t port)
{
    if (te->meta == NULL)
        return MC_ERR_NOT_SUPPORTED;
    return mc_meta_retarget(te->meta, host, port);
}

int te_segment_range_ok(mc_te_t *te, mc_te_segment_t id, uint64_t addr, uint64_t len)
{
    if (id == MC_TE_LOCAL_SEGMENT)
        return te_local_range_ok(te, (const void *)(uintptr_t)addr, len, 1);
    te_seg_t *seg = te_seg_get(te, id);
    return seg != NULL && te_seg_range_ok(te, seg, addr, len);
}

size_t te_segment_buffers(mc_te_t *te, mc_te_segment_t id, te_range_t *out, size_t max)
{
    te_seg_t *seg = te_seg_get(te, id);
    if (seg == NULL)
        return 0;
    pthread_mutex_lock(&te->seg_lock); /* guards seg->bufs (te_int.h) */
    size_t n = seg->nbufs;
    for (size_t i = 0; i < n && i < max; i++) {
        out[i].addr = seg->bufs[i].addr;
        out[i].len = seg->bufs[i].len;
    }
    pthread_mutex_unlock(&te->seg_lock);
    return n;
}

int te_gpu_of(const void *p)
{
    int gpu = -1;
    if (!te_cuda_in_process() || te_cuda_ptr_gpu(p, &gpu) != MC_OK)
        return -1;
    return gpu;
}

mc_status_t te_gpu_copy(void *dst, const void *src, size_t n)
{
    return te_cuda_memcpy(dst, src, n);
}

mc_status_t mc_te_segment_buffer(mc_te_t *te, mc_te_segment_t seg, size_t i, int refresh,
                                 uint64_t *addr, uint64_t *len)
{
    if (te == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    uint64_t a = 0, l = 0;
    mc_status_t st = MC_ERR_NOT_FOUND;
    if (seg == MC_TE_LOCAL_SEGMENT) {
        pthread_rwlock_rdlock(&te->buf_lock);
        for (size_t k = 0, n = 0; k < te->nbufs; k++)
            if (te->bufs[k].remote && n++ == i) {
                a = te->bufs[k].addr;
                l = te->bufs[k].len;
                st = MC_OK;
                break;
            }
        pthread_rwlock_unlock(&te->buf_lock);
    } else {
        te_seg_t *s = te_seg_get(te, seg);
        if (s == NULL)
            return MC_ERR_INVALID_ARGUMENT;
        if (refresh && (st = te_seg_refresh(te, s)) != MC_OK)
            return st;
        st = MC_ERR_NOT_FOUND;
        pthread_mutex_lock(&te->seg_lock);
        if (i < s->nbufs) {
            a = s->bufs[i].addr;
            l = s->bufs[i].len;
            st = MC_OK;
        }
        pthread_mutex_unlock(&te->seg_lock);
    }
    if (st == MC_OK) {
        if (addr != NULL)
            *addr = a;
        if (len != NULL)
            *len = l;
    }
    return st;
}

void te_metrics(mc_te_t *te, const char *prefix, struct mc_buf *b)
{
    static const char *const tp_name[TE_TP_COUNT] = {"local", "shm", "rdma", "tcp"};
    static const char *const op_name[TE_SERVED_OPS] = {"read", "write", "readv"};
    char name[128], lab[64];

    snprintf(name, sizeof(name), "%s_transfers_total", prefix);
    mc_prom_head(b, name, "counter",
                 "Transfer requests this process issued, by transport and result.");
    for (unsigned t = 0; t < TE_TP_COUNT; t++) {
        snprintf(lab, sizeof(lab), "transport=\"%s\",result=\"ok\"", tp_name[t]);
        mc_prom_sample(b, name, lab, atomic_load_explicit(&te->xfer_ok[t], memory_order_relaxed));
        snprintf(lab, sizeof(lab), "transport=\"%s\",result=\"failed\"", tp_name[t]);
        mc_prom_sample(b, name, lab,
                       atomic_load_explicit(&te->xfer_failed[t], memory_order_relaxed));
    }
    snprintf(name, sizeof(name), "%s_transfer_bytes_total", prefix);
    mc_prom_head(b, name, "counter", "Bytes of the transfers this process issued, by transport.");
    for (unsigned t = 0; t < TE_TP_COUNT; t++) {
        snprintf(lab, sizeof(lab), "transport=\"%s\"", tp_name[t]);
        mc_prom_sample(b, name, lab,
                       atomic_load_explicit(&te->xfer_bytes[t], memory_order_relaxed));
    }
    snprintf(name, sizeof(name), "%s_transfer_duration_seconds", prefix);
    mc_prom_head(b, name, "histogram",
                 "Time from submit to the last slice of a transfer request, by transport.");
    for (unsigned t = 0; t < TE_TP_COUNT; t++) {
        snprintf(lab, sizeof(lab), "transport=\"%s\"", tp_name[t]);
        mc_prom_hist_write(b, name, lab, &te->xfer_lat[t]);
    }
    snprintf(name, sizeof(name), "%s_served_requests_total", prefix);
    mc_prom_head(b, name, "counter",
                 "Transfer requests of peers the TCP transport answered, by op.");
    for (unsigned o = 0; o < TE_SERVED_OPS; o++) {
        snprintf(lab, sizeof(lab), "op=\"%s\"", op_name[o]);
        mc_prom_sample(b, name, lab,
                       atomic_load_explicit(&te->served_reqs[o], memory_order_relaxed));
    }
    snprintf(name, sizeof(name), "%s_served_bytes_total", prefix);
    mc_prom_head(b, name, "counter", "Bytes the TCP transport served to peers, by op.");
    for (unsigned o = 0; o < TE_SERVED_OPS; o++) {
        snprintf(lab, sizeof(lab), "op=\"%s\"", op_name[o]);
        mc_prom_sample(b, name, lab,
                       atomic_load_explicit(&te->served_bytes[o], memory_order_relaxed));
    }
    mc_rpc_server_stats_t rs = {0};
    if (te->srv != NULL)
        mc_rpc_server_stats(te->srv, &rs);
    snprintf(name, sizeof(name), "%s_connections_open", prefix);
    mc_prom_gauge(b, name, "Connections of peers to this process's transfer engine.",
                  rs.conns_open);
    snprintf(name, sizeof(name), "%s_connections_total", prefix);
    mc_prom_counter(b, name, "Connections of peers accepted by this process's transfer engine.",
                    rs.conns_accepted);
}
