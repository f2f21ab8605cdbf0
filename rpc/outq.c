/* outq.c - see outq.h. */
#include "rpc/outq.h"

#include <errno.h>
#include <sys/uio.h>

#include "util/mem.h"

#define MAX_IOV 64

void mc_outq_init(mc_outq_t *q)
{
    *q = (mc_outq_t){.buf = MC_BUF_INIT};
}

void mc_outq_fini(mc_outq_t *q)
{
    mc_buf_fini(&q->buf);
    mc_free(q->ext);
    *q = (mc_outq_t){.buf = MC_BUF_INIT};
}

void mc_outq_reset(mc_outq_t *q)
{
    q->buf_base += mc_buf_used(&q->buf);
    mc_buf_reset(&q->buf);
    q->ext_head = q->ext_n = 0;
    q->ext_sent = q->ext_bytes = 0;
}

mc_status_t mc_outq_reserve_ext(mc_outq_t *q, size_t n)
{
    if (q->ext_cap - q->ext_n >= n)
        return MC_OK;
    size_t cap = q->ext_cap ? q->ext_cap : 16;
    while (cap - q->ext_n < n)
        cap *= 2;
    mc_outq_ext_t *e = mc_malloc(cap * sizeof(*e));
    if (e == NULL)
        return MC_ERR_NOMEM;
    for (size_t i = 0; i < q->ext_n; i++)
        e[i] = q->ext[(q->ext_head + i) % q->ext_cap];
    mc_free(q->ext);
    q->ext = e;
    q->ext_cap = cap;
    q->ext_head = 0;
    return MC_OK;
}

mc_status_t mc_outq_add_ext(mc_outq_t *q, const void *p, size_t len)
{
    if (len == 0)
        return MC_OK;
    if (mc_outq_reserve_ext(q, 1) != MC_OK)
        return MC_ERR_NOMEM;
    mc_outq_ext_t *e = &q->ext[(q->ext_head + q->ext_n) % q->ext_cap];
    e->at = q->buf_base + mc_buf_used(&q->buf);
    e->p = p;
    e->len = len;
    q->ext_n++;
    q->ext_bytes += len;
    return MC_OK;
}

/* Build the iovec of what is queued, in order, at most MAX_IOV entries. */
static int build_iov(const mc_outq_t *q, struct iovec *iov)
{
    int n = 0;
    const uint8_t *fp = mc_buf_head(&q->buf);
    size_t fleft = mc_buf_used(&q->buf);
    uint64_t fpos = q->buf_base;
    size_t sent = q->ext_sent;
    size_t i;
    /* each chunk takes up to two entries: the framing before it, itself */
    for (i = 0; i < q->ext_n && n <= MAX_IOV - 2; i++) {
        const mc_outq_ext_t *e = &q->ext[(q->ext_head + i) % q->ext_cap];
        size_t before = (size_t)(e->at - fpos);
        if (before > 0) {
            iov[n].iov_base = (void *)fp;
            iov[n].iov_len = before;
            n++;
            fp += before;
            fleft -= before;
            fpos += before;
        }
        iov[n].iov_base = (void *)(e->p + sent);
        iov[n].iov_len = e->len - sent;
        n++;
        sent = 0;
    }
    /* the framing after the last chunk, if an entry is left for it (the
     * loop above may have filled all MAX_IOV); else it goes next round */
    if (i == q->ext_n && fleft > 0 && n < MAX_IOV) {
        iov[n].iov_base = (void *)fp;
        iov[n].iov_len = fleft;
        n++;
    }
    return n;
}

/* Account n written bytes. */
static void consume(mc_outq_t *q, size_t n)
{
    while (n > 0) {
        if (q->ext_n > 0) {
            mc_outq_ext_t *e = &q->ext[q->ext_head];
            size_t before = (size_t)(e->at - q->buf_base);
            if (before > 0) {
                size_t k = n < before ? n : before;
                mc_buf_consume(&q->buf, k);
                q->buf_base += k;
                n -= k;
                continue;
            }
            size_t left = e->len - q->ext_sent;
            size_t k = n < left ? n : left;
            q->ext_sent += k;
            q->ext_bytes -= k;
            n -= k;
            if (q->ext_sent == e->len) {
                q->ext_head = (q->ext_head + 1) % q->ext_cap;
                q->ext_n--;
                q->ext_sent = 0;
            }
        } else {
            mc_buf_consume(&q->buf, n);
            q->buf_base += n;
            n = 0;
        }
    }
}

mc_status_t mc_outq_flush(mc_outq_t *q, int fd)
{
    struct iovec iov[MAX_IOV];
    while (mc_outq_used(q) > 0) {
        int cnt = build_iov(q, iov);
        ssize_t w = writev(fd, iov, cnt);
        if (w > 0) {
            consume(q, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return MC_AGAIN;
        if (w == 0)
            errno = EPIPE;
        return MC_ERR_SOCKET;
    }
    return MC_OK;
}
