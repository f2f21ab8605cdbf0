/* buf.c - see buf.h. */
#include "util/buf.h"

#include "util/mem.h"

void mc_buf_fini(mc_buf_t *b)
{
    mc_free(b->data);
    b->data = NULL;
    b->off = b->len = b->cap = 0;
}

mc_status_t mc_buf_reserve(mc_buf_t *b, size_t n)
{
    if (b->cap - b->len >= n)
        return MC_OK;
    size_t used = b->len - b->off;
    /* Compact when that alone makes room and the move is cheap relative to
     * the space it frees. */
    if (b->off > 0 && b->cap - used >= n && used <= b->off) {
        memmove(b->data, b->data + b->off, used);
        b->off = 0;
        b->len = used;
        return MC_OK;
    }
    size_t want = used + n;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < want)
        cap *= 2;
    uint8_t *d = mc_malloc(cap);
    if (d == NULL)
        return MC_ERR_NOMEM;
    if (used > 0)
        memcpy(d, b->data + b->off, used);
    mc_free(b->data);
    b->data = d;
    b->off = 0;
    b->len = used;
    b->cap = cap;
    return MC_OK;
}

mc_status_t mc_buf_append(mc_buf_t *b, const void *p, size_t n)
{
    if (n == 0)
        return MC_OK; /* p may be NULL */
    mc_status_t st = mc_buf_reserve(b, n);
    if (st != MC_OK)
        return st;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return MC_OK;
}

void mc_buf_shrink(mc_buf_t *b, size_t keep_cap)
{
    if (b->off == b->len && b->cap > keep_cap) {
        mc_free(b->data);
        b->data = NULL;
        b->off = b->len = b->cap = 0;
    }
}
