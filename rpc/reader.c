/*
 * reader.c - the input side of an RPC connection (see reader.h).
 *
 * Two modes, by rx.active:
 *   buffered: read(2) into `in` (at least MC_RPC_READ_CHUNK, or what the
 *             frame being decoded still needs), deliver every complete
 *             frame, consume it;
 *   streaming: a frame's header and body sit at the head of `in`; its
 *             payload is read(2)/readv(2) straight into the destination the
 *             owner chose (or into a scratch area, discarded); when the last
 *             byte is in, the frame is delivered and header and body go.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "rpc/msgpack.h"
#include "rpc/reader.h"

void mc_rpc_reader_init(mc_rpc_reader_t *r, const mc_rpc_reader_ops_t *ops, void *owner,
                        const mc_frame_limits_t *limits)
{
    memset(r, 0, sizeof(*r));
    r->ops = ops;
    r->owner = owner;
    r->limits = limits;
    r->in = (mc_buf_t)MC_BUF_INIT;
}

void mc_rpc_reader_reset(mc_rpc_reader_t *r)
{
    mc_buf_reset(&r->in);
    r->need = 0;
    r->hdr_read = 0;
    memset(&r->rx, 0, sizeof(r->rx));
}

void mc_rpc_reader_fini(mc_rpc_reader_t *r)
{
    mc_rpc_reader_reset(r);
    mc_buf_fini(&r->in);
}

void mc_rpc_reader_discard(mc_rpc_reader_t *r)
{
    memset(&r->rx.d, 0, sizeof(r->rx.d));
}

static int owner_open(const mc_rpc_reader_t *r)
{
    return r->ops->open(r->owner);
}

/* n payload bytes arrived: into the destination (memcpy'd from src unless
 * src is NULL: read(2) put them there), moving on to the next piece. */
static void rx_put(mc_rpc_reader_t *r, const uint8_t *src, size_t n)
{
    mc_rpc_rx_dst_t *d = &r->rx.d;
    while (n > 0 && d->dst != NULL) {
        size_t take = n < d->dst_len ? n : (size_t)d->dst_len;
        if (src != NULL) {
            memcpy(d->dst, src, take);
            src += take;
        }
        d->dst += take;
        d->dst_len -= take;
        n -= take;
        if (d->dst_len == 0 && d->niov > 0) {
            d->dst = d->iov->iov_base;
            d->dst_len = d->iov->iov_len;
            d->iov++;
            d->niov--;
        }
    }
}

/* The streamed payload is complete: deliver the frame, then drop its
 * header and body (and the payload, when it was buffered whole). */
static void rx_finish(mc_rpc_reader_t *r)
{
    mc_frame_t f = {.hdr = r->rx.hdr,
                    .body = mc_buf_head(&r->in) + MC_FRAME_HDR_LEN,
                    .payload = NULL,
                    .frame_len = r->rx.hb};
    r->rx.active = 0;
    r->ops->on_frame(r->owner, &f, 1);
    if (owner_open(r))
        mc_buf_consume(&r->in, f.frame_len);
}

/* A frame whose payload streams: once header and body are in, let the owner
 * choose the destination, move the payload bytes already buffered there,
 * and leave the rest to the read loop. MC_AGAIN (header or body not in
 * yet), MC_OK, MC_ERR_PROTOCOL (*why). */
static mc_status_t rx_begin(mc_rpc_reader_t *r, const mc_frame_hdr_t *h, const char **why)
{
    size_t hb = MC_FRAME_HDR_LEN + (size_t)h->body_len;
    size_t used = mc_buf_used(&r->in);
    if (used < hb) {
        r->need = hb;
        return MC_AGAIN;
    }
    const uint8_t *body = mc_buf_head(&r->in) + MC_FRAME_HDR_LEN;
    if (mc_mp_validate(body, h->body_len, r->limits, why) != MC_OK)
        return MC_ERR_PROTOCOL;
    r->rx.active = 1;
    r->rx.left = h->payload_len;
    r->rx.hb = hb;
    r->rx.hdr = *h;
    memset(&r->rx.d, 0, sizeof(r->rx.d));
    r->hdr_read = h->payload_len >= MC_RPC_STREAM_MIN;
    r->ops->stream_begin(r->owner, h, body, &r->rx.d);
    if (!owner_open(r))
        return MC_OK;
    size_t avail = used - hb;
    size_t n = avail < r->rx.left ? avail : (size_t)r->rx.left;
    rx_put(r, mc_buf_head(&r->in) + hb, n);
    r->rx.left -= n;
    if (r->rx.left == 0) {
        /* The whole payload was buffered: it goes with header and body.
         * Nothing moves: sliding the bytes after it down instead cost a
         * memmove of the rest of the input per frame, quadratic in the
         * frames one read(2) brings in. */
        r->rx.hb = hb + n;
        rx_finish(r);
    } else {
        r->in.len -= n; /* every buffered byte after the body was payload */
    }
    return MC_OK;
}

mc_status_t mc_rpc_reader_process(mc_rpc_reader_t *r, const char **why)
{
    while (!r->rx.active && owner_open(r)) {
        mc_frame_hdr_t h;
        const uint8_t *head = mc_buf_head(&r->in);
        size_t used = mc_buf_used(&r->in);
        *why = NULL;
        mc_status_t st = mc_frame_decode_hdr(head, used, r->limits, &h, why);
        if (st == MC_AGAIN) {
            r->need = MC_FRAME_HDR_LEN;
            return MC_OK;
        }
        if (st != MC_OK)
            return MC_ERR_PROTOCOL;
        int stream = r->ops->on_header(r->owner, &h, why);
        if (stream < 0)
            return MC_ERR_PROTOCOL;
        if (stream > 0 && h.payload_len > 0) {
            st = rx_begin(r, &h, why);
            if (st == MC_AGAIN)
                return MC_OK;
            if (st != MC_OK)
                return st;
            continue;
        }
        mc_frame_t f;
        size_t need = 0;
        st = mc_frame_decode(head, used, r->limits, &f, &need, why);
        if (st == MC_AGAIN) {
            r->need = need;
            return MC_OK;
        }
        if (st != MC_OK)
            return MC_ERR_PROTOCOL;
        r->hdr_read = 0;
        r->ops->on_frame(r->owner, &f, 0); /* the frame's bytes stay in place meanwhile */
        if (!owner_open(r))
            return MC_OK;
        mc_buf_consume(&r->in, f.frame_len);
        r->need = 0;
    }
    return MC_OK;
}

/* Read the rest of a streamed payload. >0 bytes, 0 at EOF, -1 (errno). */
static ssize_t rx_read(mc_rpc_reader_t *r, int fd)
{
    uint8_t scratch[16384];
    mc_rpc_rx_dst_t *d = &r->rx.d;
    ssize_t n;
    if (d->dst == NULL) {
        size_t want = r->rx.left < sizeof(scratch) ? (size_t)r->rx.left : sizeof(scratch);
        n = read(fd, scratch, want);
    } else if (d->niov == 0) {
        n = read(fd, d->dst, d->dst_len < r->rx.left ? d->dst_len : r->rx.left);
    } else {
        struct iovec iov[64];
        int k = 0;
        uint64_t want = r->rx.left;
        iov[k].iov_base = d->dst;
        iov[k].iov_len = d->dst_len < want ? d->dst_len : want;
        want -= iov[k++].iov_len;
        for (unsigned i = 0; i < d->niov && k < 64 && want > 0; i++, k++) {
            iov[k] = d->iov[i];
            if (iov[k].iov_len > want)
                iov[k].iov_len = want;
            want -= iov[k].iov_len;
        }
        n = readv(fd, iov, k);
    }
    if (n > 0) {
        r->rx.left -= (uint64_t)n;
        rx_put(r, NULL, (size_t)n);
    }
    return n;
}

mc_status_t mc_rpc_reader_read(mc_rpc_reader_t *r, int fd, const char **why)
{
    size_t budget = MC_RPC_READ_BUDGET;
    mc_status_t st = MC_OK;
    *why = NULL;
    while (budget > 0 && owner_open(r)) {
        ssize_t n;
        size_t room = 0;
        if (r->rx.active) {
            n = rx_read(r, fd);
        } else {
            size_t used = mc_buf_used(&r->in);
            size_t missing = r->need > used ? r->need - used : 0;
            size_t want = missing < MC_RPC_READ_CHUNK ? MC_RPC_READ_CHUNK : missing;
            if (r->max_in != 0 && used + want > r->max_in) {
                *why = "a frame larger than this connection may buffer";
                return MC_ERR_LIMIT;
            }
            if (mc_buf_reserve(&r->in, want) != MC_OK)
                return MC_ERR_NOMEM;
            room = mc_buf_room(&r->in);
            if (r->hdr_read && room > MC_RPC_HDR_READ && missing <= MC_RPC_HDR_READ)
                room = MC_RPC_HDR_READ; /* see MC_RPC_STREAM_MIN */
            n = read(fd, mc_buf_tail(&r->in), room);
        }
        if (n == 0)
            return MC_ERR_CONN_CLOSED;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return MC_ERR_SOCKET;
        }
        budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
        if (r->rx.active) {
            if (r->rx.left > 0)
                continue;
            rx_finish(r);
        } else {
            mc_buf_produce(&r->in, (size_t)n);
        }
        st = mc_rpc_reader_process(r, why);
        if (st != MC_OK)
            return st;
        if (room > 0 && (size_t)n < room && !r->rx.active)
            break; /* drained; level-triggered events call again if more comes */
    }
    if (owner_open(r) && mc_buf_used(&r->in) == 0)
        mc_buf_shrink(&r->in, 1u << 20);
    return MC_OK;
}
