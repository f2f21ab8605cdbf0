/*
 * te.c - the accessors of transport/te.h: what the rest of the tree may
 * know of an engine, read from its private structures here.
 */
#include "transport/cuda.h"
#include "transport/te.h"
#include "transport/te_int.h"

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
