/*
 * tcp.c - the TCP transport, on the project's RPC layer.
 *
 * Initiator: each peer segment has a few persistent connections ("lanes"),
 * spread over the engine's reactors. A slice is one RPC on one lane: WRITE
 * sends {ADDR} and the slice's bytes as the frame payload, straight from
 * registered memory (writev); READ sends {ADDR, LENGTH} and the response
 * payload is read straight into the slice's local memory. Many slices are in
 * flight per lane; each has the engine's timeout; a lane whose peer dies
 * fails its slices at once and reconnects on the next use (rpc/client.c).
 *
 * Small reads of one segment submitted together travel as a train: one
 * TE_READV with their ranges, answered with their bytes back to back and
 * scattered straight into the slices' memory (readv). That saves a frame, a
 * call and a completion per slice for batches of small objects. A train the
 * target refuses as a whole (a range outside its buffers, or a peer without
 * TE_READV) is sent again slice by slice, so each request gets its own
 * outcome.
 *
 * Target: TE_WRITE has a payload sink that checks [ADDR, ADDR+len) against
 * the remote-accessible registered buffers before a byte is stored (a bad
 * range is refused and the payload discarded: memory is untouched); TE_READ
 * checks the range and answers with the bytes, zero-copy.
 */
#include <string.h>
#include <sys/uio.h>

#include "rpc/fields.h"
#include "rpc/methods.h"
#include "transport/te_int.h"
#include "util/log.h"
#include "util/mem.h"

/* Trains: slices of at most TRAIN_SLICE_MAX bytes, at most TRAIN_MAX of
 * them and TRAIN_BYTES_MAX bytes per train (the target checks the same). */
#define TRAIN_SLICE_MAX (32u << 10)
#define TRAIN_MAX 256u
#define TRAIN_BYTES_MAX (1u << 20)

/* A slice's tcp state: a train is a run of small reads of one segment sent
 * as one TE_READV; its first slice carries the count and the scatter list. */
typedef struct tcp_slice {
    unsigned ntrain; /* slices in the train it heads (1: travels alone) */
    struct iovec *iov;
} tcp_slice_t;
_Static_assert(sizeof(tcp_slice_t) <= TE_SLICE_PRIV, "tcp_slice_t fits te_slice_t.priv");
#define TS(s) TE_SLICE_PRIV_OF(tcp_slice_t, s)

/* A submit's slices not posted yet: one run, contiguous in the chunk, so
 * that trains can form across requests. */
typedef struct tcp_submit {
    te_slice_t *run;
    size_t n;
} tcp_submit_t;
_Static_assert(sizeof(tcp_submit_t) <= TE_SUBMIT_PRIV, "tcp_submit_t fits te_submit_t.priv");

static void tcp_post_one(te_slice_t *s);

static void lane_opts(const mc_te_t *te, mc_rpc_client_opts_t *o)
{
    mc_rpc_client_opts_init(o);
    o->call_timeout_us = te->o.timeout_us;
    o->connect_timeout_us = te->o.timeout_us < 3000000 ? te->o.timeout_us : 3000000;
    o->auth_key = te_auth_key(te);
}

mc_status_t te_tcp_lanes_open(mc_te_t *te, te_seg_t *seg)
{
    mc_rpc_client_opts_t o;
    lane_opts(te, &o);
    o.host = seg->host;
    o.port = seg->port;
    unsigned n = te->o.tcp_lanes;
    unsigned gen = atomic_load(&seg->gen);
    for (unsigned i = 0; i < n; i++) {
        mc_status_t st = mc_rpc_client_create(te->rs[i % te->nr], &o, &seg->lanes[i]);
        if (st != MC_OK)
            return st; /* the caller destroys the lanes made so far */
        seg->lane_gen[i] = gen;
        seg->nlanes = i + 1;
    }
    return MC_OK;
}

/* The segment moved (metadata modes: its engine restarted elsewhere): make
 * lane i anew for its current host:port. On lane i's reactor, the one thread
 * that uses it; slices in flight on the old lane fail with MC_ERR_CANCELED
 * (they were going nowhere). If the new client cannot be made the old lane
 * stays. */
static void lane_follow(mc_te_t *te, te_seg_t *seg, unsigned i)
{
    mc_rpc_client_opts_t o;
    char host[sizeof(seg->host)];
    lane_opts(te, &o);
    pthread_mutex_lock(&te->seg_lock);
    unsigned gen = atomic_load(&seg->gen);
    memcpy(host, seg->host, sizeof(host));
    o.port = seg->port;
    pthread_mutex_unlock(&te->seg_lock);
    o.host = host;
    mc_rpc_client_t *c = NULL;
    mc_status_t st = mc_rpc_client_create(te->rs[i % te->nr], &o, &c);
    if (st != MC_OK) {
        MC_WARN(TCP, "segment '%s' moved to %s:%u, cannot connect there: %s", seg->name, host,
                o.port, mc_status_str(st));
        return;
    }
    MC_INFO(TCP, "segment '%s' moved to %s:%u", seg->name, host, o.port);
    mc_rpc_client_t *old = seg->lanes[i];
    seg->lanes[i] = c;
    seg->lane_gen[i] = gen;
    mc_rpc_client_destroy(old);
}

static void slice_cb(void *arg, const mc_rpc_resp_t *resp)
{
    te_slice_t *s = arg;
    mc_status_t st = resp->status;
    if (st == MC_OK && s->opcode == MC_TE_READ && resp->payload_len != s->len)
        st = MC_ERR_TRANSFER_FAIL; /* short read: the peer answered something else */
    if (st != MC_OK)
        MC_DEBUG(TCP, "slice 0x%llx+%llu on '%s' failed: %s", (unsigned long long)s->remote,
                 (unsigned long long)s->len, s->seg->name, mc_status_str(st));
    if (st == MC_ERR_CONN_CLOSED && s->b->te->meta != NULL)
        atomic_store(&s->seg->stale, 1); /* maybe it moved: look it up again */
    te_slice_done(s, st);                /* may free the batch and s with it */
}

/* Finish the n slices of a train with st. The last te_slice_done may free
 * the batch and the slices with it: nothing is touched after it. */
static void train_done(te_slice_t *s, unsigned n, mc_status_t st)
{
    mc_free(TS(s)->iov);
    TS(s)->iov = NULL;
    for (unsigned i = 0; i < n; i++)
        te_slice_done(&s[i], st);
}

static void train_cb(void *arg, const mc_rpc_resp_t *resp)
{
    te_slice_t *s = arg;
    unsigned n = TS(s)->ntrain;
    uint64_t want = 0;
    for (unsigned i = 0; i < n; i++)
        want += s[i].len;
    mc_status_t st = resp->status;
    if (st == MC_OK && resp->payload_len != want)
        st = MC_ERR_TRANSFER_FAIL; /* short read: the peer answered something else */
    if (st != MC_OK && st != MC_ERR_CONN_CLOSED && st != MC_ERR_RPC_TIMEOUT &&
        st != MC_ERR_CANCELED && st != MC_ERR_BUFFER_OVERFLOW) {
        /* refused as a whole: again one by one, for each slice's own outcome */
        MC_DEBUG(TCP, "train of %u reads on '%s' refused (%s): sending them one by one", n,
                 s->seg->name, mc_status_str(st));
        mc_free(TS(s)->iov);
        TS(s)->iov = NULL;
        for (unsigned i = 0; i < n; i++) {
            TS(&s[i])->ntrain = 1;
            tcp_post_one(&s[i]);
        }
        return;
    }
    if (st != MC_OK)
        MC_DEBUG(TCP, "train of %u reads on '%s' failed: %s", n, s->seg->name, mc_status_str(st));
    if (st == MC_ERR_CONN_CLOSED && s->b->te->meta != NULL)
        atomic_store(&s->seg->stale, 1); /* maybe it moved: look it up again */
    train_done(s, n, st);
}

static void train_issue(te_slice_t *s, mc_rpc_client_t *lane)
{
    unsigned n = TS(s)->ntrain;
    struct iovec *iov = mc_malloc(n * sizeof(*iov));
    TS(s)->iov = iov;
    if (iov == NULL) {
        train_done(s, n, MC_ERR_NOMEM);
        return;
    }
    mc_mp_writer_t *w = mc_rpc_call_begin(lane);
    mc_mp_write_map(w, 1);
    mc_mp_write_uint(w, MC_F_RANGES);
    mc_mp_write_array(w, 2 * n);
    for (unsigned i = 0; i < n; i++) {
        mc_mp_write_uint(w, s[i].remote);
        mc_mp_write_uint(w, s[i].len);
        iov[i].iov_base = s[i].local;
        iov[i].iov_len = s[i].len;
    }
    mc_status_t st = mc_rpc_call_end_scatter(lane, MC_RPC_TE_READV, 0, iov, n, train_cb, s);
    if (st != MC_INPROGRESS)
        train_done(s, n, st);
}

/* On the lane's reactor: issue the slice's (or its train's) RPC. */
static void slice_issue(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    te_slice_t *s = MC_CONTAINER_OF(msg, te_slice_t, msg);
    (void)r;
    if (st != MC_OK) {
        train_done(s, TS(s)->ntrain, st);
        return;
    }
    te_seg_t *seg = s->seg;
    if (s->b->te->meta != NULL && atomic_load(&seg->gen) != seg->lane_gen[s->lane])
        lane_follow(s->b->te, seg, s->lane);
    mc_rpc_client_t *lane = seg->lanes[s->lane];
    if (TS(s)->ntrain > 1) {
        train_issue(s, lane);
        return;
    }
    mc_mp_writer_t *w = mc_rpc_call_begin(lane);
    if (s->opcode == MC_TE_WRITE) {
        mc_mp_write_map(w, 1);
        mc_mp_write_uint(w, MC_F_ADDR);
        mc_mp_write_uint(w, s->remote);
        st = mc_rpc_call_end_xfer(lane, MC_RPC_TE_WRITE, 0, s->local, s->len, NULL, 0, slice_cb, s);
    } else {
        mc_mp_write_map(w, 2);
        mc_mp_write_uint(w, MC_F_ADDR);
        mc_mp_write_uint(w, s->remote);
        mc_mp_write_uint(w, MC_F_LENGTH);
        mc_mp_write_uint(w, s->len);
        st = mc_rpc_call_end_xfer(lane, MC_RPC_TE_READ, 0, NULL, 0, s->local, s->len, slice_cb, s);
    }
    if (st != MC_INPROGRESS)
        te_slice_done(s, st);
}

static void tcp_post_one(te_slice_t *s)
{
    te_seg_t *seg = s->seg;
    /* Round-robin over the lanes: slices of one request travel in parallel. */
    s->lane = atomic_fetch_add_explicit(&seg->next_lane, 1, memory_order_relaxed) % seg->nlanes;
    s->msg.fn = slice_issue;
    mc_reactor_t *r = s->b->te->rs[s->lane % s->b->te->nr];
    if (mc_reactor_post(r, &s->msg) != MC_OK)
        train_done(s, TS(s)->ntrain, MC_ERR_CANCELED);
}

/* Post slices ss[0..n) of one submit: runs of small reads of the same
 * segment travel as trains (one RPC each), the others one by one. */
static void post_run(te_slice_t *ss, size_t n)
{
    size_t i = 0;
    while (i < n) {
        te_slice_t *s = &ss[i];
        size_t j = i + 1;
        if (s->opcode == MC_TE_READ && s->len <= TRAIN_SLICE_MAX) {
            uint64_t bytes = s->len;
            while (j < n && j - i < TRAIN_MAX && ss[j].seg == s->seg &&
                   ss[j].opcode == MC_TE_READ && ss[j].len <= TRAIN_SLICE_MAX &&
                   bytes + ss[j].len <= TRAIN_BYTES_MAX)
                bytes += ss[j++].len;
        }
        TS(s)->ntrain = (unsigned)(j - i);
        tcp_post_one(s);
        i = j;
    }
}

/* Slices of consecutive requests gather into one run (trains may span
 * requests); a gap in the chunk (another transport's slices between) posts
 * the run so far. */
static void tcp_post(mc_te_t *te, te_submit_t *sub, te_slice_t *s, size_t n)
{
    tcp_submit_t *ts = TE_SUBMIT_PRIV_OF(tcp_submit_t, sub, TE_TP_TCP);
    (void)te;
    for (size_t i = 0; i < n; i++) {
        TS(&s[i])->ntrain = 1;
        TS(&s[i])->iov = NULL;
    }
    if (ts->run != NULL && ts->run + ts->n != s) {
        post_run(ts->run, ts->n);
        ts->run = NULL;
    }
    if (ts->run == NULL) {
        ts->run = s;
        ts->n = 0;
    }
    ts->n += n;
}

static void tcp_submit_end(mc_te_t *te, te_submit_t *sub)
{
    tcp_submit_t *ts = TE_SUBMIT_PRIV_OF(tcp_submit_t, sub, TE_TP_TCP);
    (void)te;
    if (ts->run != NULL)
        post_run(ts->run, ts->n);
}

static int tcp_usable(mc_te_t *te, te_seg_t *seg, uint64_t remote, uint64_t len)
{
    (void)te;
    (void)remote;
    (void)len;
    return seg != NULL;
}

/* ----------------------------------------------------------- target side */

static int read_addr_len(mc_rpc_req_t *req, uint64_t *addr, uint64_t *len)
{
    size_t blen;
    const uint8_t *body = mc_rpc_req_body(req, &blen);
    mc_mp_reader_t r;
    int have_addr = 0;
    mc_mp_reader_init(&r, body, blen);
    uint32_t n = blen ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < n && r.err == MC_OK; i++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_ADDR:
            *addr = mc_mp_read_uint(&r);
            have_addr = 1;
            break;
        case MC_F_LENGTH:
            *len = mc_mp_read_uint(&r);
            break;
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    return r.err == MC_OK && have_addr ? 0 : -1;
}

static mc_status_t write_sink(void *ctx, mc_rpc_req_t *req, uint64_t plen, void **dst)
{
    mc_te_t *te = ctx;
    uint64_t addr = 0, len = 0;
    if (read_addr_len(req, &addr, &len) != 0)
        return MC_ERR_INVALID_PARAMS;
    if (!te_local_range_ok(te, (void *)(uintptr_t)addr, plen, 1)) {
        MC_WARN(TCP,
                "%s: refused a write of %llu bytes at 0x%llx: not inside a registered "
                "remote-accessible buffer",
                mc_rpc_req_peer(req), (unsigned long long)plen, (unsigned long long)addr);
        return MC_ERR_ADDRESS_NOT_REGISTERED;
    }
    *dst = (void *)(uintptr_t)addr;
    return MC_OK;
}

static void h_write(void *ctx, mc_rpc_req_t *req)
{
    size_t plen;
    /* Without a payload the sink was not consulted: nothing was written. */
    mc_rpc_req_payload(req, &plen);
    if (plen > 0)
        te_count_served(ctx, TE_SERVED_WRITE, plen);
    mc_rpc_reply(req, plen > 0 ? MC_OK : MC_ERR_INVALID_PARAMS, NULL, 0);
}

static void h_read(void *ctx, mc_rpc_req_t *req)
{
    mc_te_t *te = ctx;
    uint64_t addr = 0, len = 0;
    if (read_addr_len(req, &addr, &len) != 0 || len == 0) {
        mc_rpc_reply(req, MC_ERR_INVALID_PARAMS, NULL, 0);
        return;
    }
    /* The answer is one frame: a payload over the frame limit (or over the
     * header's 32 bits) would break the protocol for the asking peer. */
    mc_frame_limits_t lim;
    mc_frame_limits_init(&lim);
    if (len > lim.max_payload) {
        MC_WARN(TCP, "%s: refused a read of %llu bytes: over the frame payload limit (%u)",
                mc_rpc_req_peer(req), (unsigned long long)len, lim.max_payload);
        mc_rpc_reply(req, MC_ERR_LIMIT, NULL, 0);
        return;
    }
    if (!te_local_range_ok(te, (void *)(uintptr_t)addr, len, 1)) {
        MC_WARN(TCP,
                "%s: refused a read of %llu bytes at 0x%llx: not inside a registered "
                "remote-accessible buffer",
                mc_rpc_req_peer(req), (unsigned long long)len, (unsigned long long)addr);
        mc_rpc_reply(req, MC_ERR_ADDRESS_NOT_REGISTERED, NULL, 0);
        return;
    }
    te_count_served(te, TE_SERVED_READ, len);
    mc_rpc_reply_begin(req);
    mc_rpc_reply_end_payload(req, MC_OK, (const void *)(uintptr_t)addr, len);
}

static void h_readv(void *ctx, mc_rpc_req_t *req)
{
    mc_te_t *te = ctx;
    size_t blen;
    const uint8_t *body = mc_rpc_req_body(req, &blen);
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, body, blen);
    struct iovec *iov = NULL;
    uint32_t n = 0;
    mc_status_t st = MC_ERR_INVALID_PARAMS;
    uint32_t nf = blen ? mc_mp_read_map(&r) : 0;
    for (uint32_t f = 0; f < nf && r.err == MC_OK; f++) {
        if (mc_mp_read_uint(&r) != MC_F_RANGES || iov != NULL) {
            mc_mp_skip(&r);
            continue;
        }
        uint32_t cnt = mc_mp_read_array(&r);
        if (r.err != MC_OK || cnt == 0 || cnt % 2 != 0 || cnt / 2 > TRAIN_MAX) {
            MC_WARN(TCP,
                    "%s: refused a vectored read: %u range numbers (want pairs, 1..%u "
                    "ranges)",
                    mc_rpc_req_peer(req), cnt, TRAIN_MAX);
            mc_rpc_reply(req, MC_ERR_INVALID_PARAMS, NULL, 0);
            return;
        }
        iov = mc_malloc(cnt / 2 * sizeof(*iov));
        if (iov == NULL) {
            mc_rpc_reply(req, MC_ERR_NOMEM, NULL, 0);
            return;
        }
        uint64_t total = 0;
        st = MC_OK;
        for (n = 0; n < cnt / 2 && r.err == MC_OK; n++) {
            uint64_t addr = mc_mp_read_uint(&r), len = mc_mp_read_uint(&r);
            if (r.err != MC_OK)
                break;
            total += len;
            if (len == 0) {
                st = MC_ERR_INVALID_PARAMS;
                continue;
            }
            if (len > TRAIN_BYTES_MAX || total > TRAIN_BYTES_MAX) {
                if (st == MC_OK)
                    MC_WARN(TCP, "%s: refused a vectored read of more than %u bytes",
                            mc_rpc_req_peer(req), TRAIN_BYTES_MAX);
                st = MC_ERR_LIMIT;
                continue;
            }
            if (st == MC_OK && !te_local_range_ok(te, (void *)(uintptr_t)addr, len, 1)) {
                MC_WARN(TCP,
                        "%s: refused a vectored read of %llu bytes at 0x%llx: not inside a "
                        "registered remote-accessible buffer",
                        mc_rpc_req_peer(req), (unsigned long long)len, (unsigned long long)addr);
                st = MC_ERR_ADDRESS_NOT_REGISTERED;
            }
            iov[n].iov_base = (void *)(uintptr_t)addr;
            iov[n].iov_len = len;
        }
    }
    if (r.err != MC_OK)
        st = MC_ERR_INVALID_PARAMS;
    if (st != MC_OK) {
        mc_free(iov);
        mc_rpc_reply(req, st, NULL, 0);
        return;
    }
    uint64_t served = 0;
    for (uint32_t i = 0; i < n; i++)
        served += iov[i].iov_len;
    te_count_served(te, TE_SERVED_READV, served);
    mc_rpc_reply_begin(req);
    mc_rpc_reply_end_payloadv(req, MC_OK, iov, n); /* the pieces are queued, not iov */
    mc_free(iov);
}

static void tcp_register_server(mc_te_t *te)
{
    mc_rpc_server_register(te->srv, MC_RPC_TE_READV, h_readv, te);
    mc_rpc_server_register_sink(te->srv, MC_RPC_TE_WRITE, write_sink, h_write, te);
    mc_rpc_server_register(te->srv, MC_RPC_TE_READ, h_read, te);
}

const te_transport_ops_t te_tcp_ops = {
    .name = "tcp",
    .flags = TE_TP_BUILTIN,
    .register_server = tcp_register_server,
    .usable = tcp_usable,
    .post = tcp_post,
    .submit_end = tcp_submit_end,
};
