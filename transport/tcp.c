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
 * Target: TE_WRITE has a payload sink that checks [ADDR, ADDR+len) against
 * the remote-accessible registered buffers before a byte is stored (a bad
 * range is refused and the payload discarded: memory is untouched); TE_READ
 * checks the range and answers with the bytes, zero-copy.
 */
#include <string.h>

#include "rpc/fields.h"
#include "rpc/methods.h"
#include "transport/te_int.h"
#include "util/log.h"

static void lane_opts(const mc_te_t *te, mc_rpc_client_opts_t *o)
{
    mc_rpc_client_opts_init(o);
    o->call_timeout_us = te->o.timeout_us;
    o->connect_timeout_us = te->o.timeout_us < 3000000 ? te->o.timeout_us : 3000000;
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
    te_slice_done(s, st); /* may free the batch and s with it */
}

/* On the lane's reactor: issue the slice's RPC. */
static void slice_issue(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    te_slice_t *s = MC_CONTAINER_OF(msg, te_slice_t, msg);
    (void)r;
    if (st != MC_OK) {
        te_slice_done(s, st);
        return;
    }
    te_seg_t *seg = s->seg;
    if (s->b->te->meta != NULL && atomic_load(&seg->gen) != seg->lane_gen[s->lane])
        lane_follow(s->b->te, seg, s->lane);
    mc_rpc_client_t *lane = seg->lanes[s->lane];
    mc_mp_writer_t *w = mc_rpc_call_begin(lane);
    if (s->opcode == MC_TE_WRITE) {
        mc_mp_write_map(w, 1);
        mc_mp_write_uint(w, MC_F_ADDR);
        mc_mp_write_uint(w, s->remote);
        st = mc_rpc_call_end_xfer(lane, MC_RPC_TE_WRITE, 0, s->local, s->len, NULL, 0, slice_cb,
                                  s);
    } else {
        mc_mp_write_map(w, 2);
        mc_mp_write_uint(w, MC_F_ADDR);
        mc_mp_write_uint(w, s->remote);
        mc_mp_write_uint(w, MC_F_LENGTH);
        mc_mp_write_uint(w, s->len);
        st = mc_rpc_call_end_xfer(lane, MC_RPC_TE_READ, 0, NULL, 0, s->local, s->len, slice_cb,
                                  s);
    }
    if (st != MC_INPROGRESS)
        te_slice_done(s, st);
}

void te_tcp_post(te_slice_t *s)
{
    te_seg_t *seg = s->seg;
    /* Round-robin over the lanes: slices of one request travel in parallel. */
    s->lane = atomic_fetch_add_explicit(&seg->next_lane, 1, memory_order_relaxed) % seg->nlanes;
    s->msg.fn = slice_issue;
    mc_reactor_t *r = s->b->te->rs[s->lane % s->b->te->nr];
    if (mc_reactor_post(r, &s->msg) != MC_OK)
        te_slice_done(s, MC_ERR_CANCELED);
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
        case MC_F_LENGTH: *len = mc_mp_read_uint(&r); break;
        default: mc_mp_skip(&r); break;
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
        MC_WARN(TCP, "%s: refused a write of %llu bytes at 0x%llx: not inside a registered "
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
    (void)ctx;
    /* Without a payload the sink was not consulted: nothing was written. */
    mc_rpc_req_payload(req, &plen);
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
        MC_WARN(TCP, "%s: refused a read of %llu bytes at 0x%llx: not inside a registered "
                     "remote-accessible buffer",
                mc_rpc_req_peer(req), (unsigned long long)len, (unsigned long long)addr);
        mc_rpc_reply(req, MC_ERR_ADDRESS_NOT_REGISTERED, NULL, 0);
        return;
    }
    mc_rpc_reply_begin(req);
    mc_rpc_reply_end_payload(req, MC_OK, (const void *)(uintptr_t)addr, len);
}

void te_tcp_register_server(mc_te_t *te)
{
    mc_rpc_server_register_sink(te->srv, MC_RPC_TE_WRITE, write_sink, h_write, te);
    mc_rpc_server_register(te->srv, MC_RPC_TE_READ, h_read, te);
}
