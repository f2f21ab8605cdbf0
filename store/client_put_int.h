/*
 * client_put_int.h - what the put (client_put.c) and the batch put
 * (client_put_batch.c) share: copying a value's pieces, how a failed write
 * is reported, the put config an operation owns, and the sync caller that
 * does the copies into our own segment itself. Nothing else includes it.
 */
#ifndef MC_STORE_CLIENT_PUT_INT_H
#define MC_STORE_CLIENT_PUT_INT_H

#include "store/client_int.h"
#include "store/proto.h"

/* Copy bytes [off, off + n) of the concatenation of parts to dst. */
void put_gather(const mc_slice_t *parts, size_t nparts, uint64_t off, uint8_t *dst, uint64_t n);

/* Whether a write of [remote, remote + len) of segment seg may go: MC_OK
 * when it is inside what we know of the segment; MC_INPROGRESS when the
 * descriptor we hold may predate that memory and may_refresh (the caller's
 * once per segment): a refresh was asked, h is stepped again when it
 * answers; else MC_ERR_TRANSFER_FAIL (the caller logs it, or not). */
mc_status_t put_range_check(store_op_t *h, mc_te_segment_t seg, uint64_t remote, uint64_t len,
                            int may_refresh);

/* A value's bytes into a segment: nobody reads them soon (mc_copy_cold),
 * unless the caller's source overlaps the destination. */
void put_copy_into_segment(void *dst, const void *src, size_t n);

/* Transfer failures are reported as TRANSFER_FAIL (the cause is logged),
 * except cancellation. */
static inline mc_status_t put_xfer_status(mc_status_t st)
{
    return st == MC_ERR_CANCELED ? st : MC_ERR_TRANSFER_FAIL;
}

/* A write that failed this way may still land later: its space must not be
 * handed out again at once, so such a put is not revoked but left to the
 * master, which discards it after put_start_discard_timeout and reuses the
 * space after put_start_release_timeout. A timeout: the target may be slow
 * or stopped, not gone. A lost connection: the bytes already handed to the
 * kernel are sent even after the socket is closed (the lane of a timed-out
 * write is dropped with other writes' bytes in it) and a stopped target or
 * a healed partition delivers them later, over an object the space was
 * given to meanwhile (the chaos driver found exactly that). Only a target
 * that refused the range answered for every byte. */
static inline int put_may_land_later(const mc_te_status_t *ts)
{
    return ts->state == MC_TE_TIMEOUT || ts->error == MC_ERR_RPC_TIMEOUT ||
           ts->error == MC_ERR_TIMEOUT || ts->error == MC_ERR_CONN_CLOSED;
}

static inline const char *put_replica_endpoint(const mc_master_replica_desc_t *d)
{
    return d->te_endpoint[0] != '\0' ? d->te_endpoint : d->segment_name;
}

/* A put config owned by the operation (the caller's is borrowed for the call). */
typedef struct own_cfg {
    mc_master_put_cfg_t cfg;
    const char *pref[MC_PROTO_MAX_PREFERRED];
    char *names; /* the preferred names, back to back (mc_free them) */
} own_cfg_t;

/* c (NULL: the defaults) as the master takes it, into *o; flags: PUT_*.
 * MC_OK, MC_ERR_INVALID_PARAMS (logged), MC_ERR_NOMEM. */
mc_status_t put_cfg_copy(own_cfg_t *o, const mc_replicate_config_t *c, unsigned flags);

/* The caller's *cfg as this library's mc_replicate_config_t, in *tmp (an
 * older, shorter struct gets the defaults of the fields it lacks); NULL stays
 * NULL. Every public call that takes a cfg starts with it. */
mc_status_t put_cfg_full(const mc_replicate_config_t **cfg, mc_replicate_config_t *tmp);

/* A sync put's or batch put's caller: it waits for the op to finish (w),
 * and copies (run) when r0 hands it an op stopped in P_WAIT_COPY or
 * B_WAIT_COPY (op, under w.mu): the copies into our own segment run on the
 * calling thread (the store service's worker) instead of r0's. */
typedef struct own_copy {
    store_waiter_t w;
    store_op_t *op;
    void (*run)(store_op_t *op);
} own_copy_t;

/* Set c up before the op it waits for is made: run does the op's copies. */
void put_copy_init(own_copy_t *c, void (*run)(store_op_t *op));

/* r0: hand h (stopped in its WAIT_COPY state) to its caller. r0 touches h
 * no more until the caller posts it back. */
void put_copy_hand(own_copy_t *c, store_op_t *h);

/* The caller's wait, given what the op's submit returned: unless
 * MC_INPROGRESS the op never ran, c is let go and that is returned; else
 * copy whenever r0 hands it the op, until the op reports: its status. */
mc_status_t put_copy_wait(own_copy_t *c, mc_status_t submitted);

#endif /* MC_STORE_CLIENT_PUT_INT_H */
