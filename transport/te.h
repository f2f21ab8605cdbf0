/*
 * te.h - the transfer engine as the rest of the tree uses it: the store
 * client (store/), the tools and the benchmarks. It adds to the public
 * include/mooncake/transfer.h what code running on the engine's own
 * reactors needs: the reactors, the owner id, range checks, and segment
 * opens and descriptor refreshes that never block. transport/te_int.h (the
 * engine's structures) is private to transport/: `make check-layers` keeps
 * it so.
 *
 * Threads: every function here may be called from any thread unless it
 * says otherwise; none blocks on I/O. The engine must outlive the calls.
 */
#ifndef MC_TRANSPORT_TE_H
#define MC_TRANSPORT_TE_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/transfer.h"
#include "reactor/reactor.h"
#include "util/auth.h"

/* Most TCP lanes per peer segment (mc_te_opts_t.tcp_lanes). */
#define TE_MAX_LANES 16

/* ---------------------------------------------------------------- engine */

/* The engine's reactors (mc_te_opts_t.reactors of them, or the one a host
 * attached). Reactor 0 runs the metadata backend, every segment's first
 * lane and the callbacks of the *_async calls below. i < te_nreactors. */
unsigned te_nreactors(const mc_te_t *te);
mc_reactor_t *te_reactor(const mc_te_t *te, unsigned i);
/* 1 when the calling thread is one of the engine's reactors. */
int te_on_reactor(mc_te_t *te);

/* The owner id the engine publishes under (mc_te_opts_t.owner_hi/lo, or the
 * random one mc_te_create chose): the store client's id at the master. */
void te_owner_id(const mc_te_t *te, uint64_t *hi, uint64_t *lo);
/* The cluster key (mc_te_opts_t.secret_file), or NULL: for the other
 * connections of the engine's owner (the store client's master). */
const mc_auth_key_t *te_auth_key(const mc_te_t *te);

/* Point the engine's master:// metadata backend at another master (a new
 * HA leader); mc_meta_retarget's contract. Call on te_reactor(te, 0).
 * MC_ERR_NOT_SUPPORTED without a metadata backend (p2p) or with one that has
 * no servers to move between (redis); the resolver's errors. */
mc_status_t te_meta_retarget(mc_te_t *te, const char *host, uint16_t port);

/* Close every connection peers have open to this engine's port now, and read
 * nothing more from them (mc_rpc_server_fence): a TE_WRITE sent before this
 * call never lands after it, however late TCP delivers it (a partition that
 * healed, a closed socket's retransmissions). Later connections work as
 * usual. What the store client calls before it mounts its segments again at
 * a master that forgot them. Covers tcp only: shm and rdma writes do not
 * pass through the port. Thread-safe; no-op without a server. */
void te_fence_inbound(mc_te_t *te);

/* Whether this engine's transports need the initiator's memory registered:
 * 1 with a transport installed that does (rdma: a post needs an lkey), 0 for
 * tcp and local, which move bytes with syscalls and memcpy from any
 * mapped memory. */
int te_needs_local_reg(const mc_te_t *te);

/* ---------------------------------------------------------------- ranges */

/* [addr, addr+len) inside one registered local buffer (remote-accessible
 * if need_remote). 0 for len 0 or an overflowing range. */
int te_local_range_ok(mc_te_t *te, const void *addr, uint64_t len, int need_remote);

/* [addr, addr+len) inside one remote-accessible buffer of segment seg as
 * last described (MC_TE_LOCAL_SEGMENT: our own buffers). 0 for an unknown
 * handle, len 0 or an overflowing range. */
int te_segment_range_ok(mc_te_t *te, mc_te_segment_t seg, uint64_t addr, uint64_t len);

typedef struct te_range {
    uint64_t addr, len;
} te_range_t;

/* The remote-accessible buffers of open segment seg as last described:
 * fills out[0..min(n, max)) and returns n (0 for an unknown handle). */
size_t te_segment_buffers(mc_te_t *te, mc_te_segment_t seg, te_range_t *out, size_t max);

/* The caller (the store client, which borrows its caller's memory for the
 * duration of an operation) vouches for the local ranges of b's requests;
 * they are then not required to be registered, where te_needs_local_reg
 * says no transport of the engine needs that. Before the submit. */
void te_batch_allow_unregistered(mc_te_batch_t *b);

/* --------------------------------------------- segments without blocking
 *
 * For code that runs on the engine's reactors (the store client's state
 * machines): the descriptor is fetched with async calls (p2p: MC_RPC_TE_DESC
 * on the segment's first lane; metadata modes: the backend's get), never
 * with a blocking wait.
 *
 * Contract (the async contract of every mooncake-c module): from any thread;
 * returns an error (cb never runs) or MC_INPROGRESS, and then cb runs exactly
 * once, later, on te_reactor(te, 0). When the engine is being destroyed cb
 * gets MC_ERR_CANCELED. Segment handles are those of mc_te_open_segment
 * (same cache, same reference counting). */
typedef void (*te_open_cb_t)(void *arg, mc_status_t st, mc_te_segment_t seg);
typedef void (*te_done_cb_t)(void *arg, mc_status_t st);

/* Open a segment by name without blocking: MC_TE_LOCAL_SEGMENT for our own
 * name, the cached handle when open, else fetch the descriptor and connect.
 * Errors in the callback as mc_te_open_segment's. Immediate errors:
 * MC_ERR_INVALID_ARGUMENT (bad name), MC_ERR_NOMEM, MC_ERR_CANCELED. */
mc_status_t te_open_segment_async(mc_te_t *te, const char *name, te_open_cb_t cb, void *arg);

/* Fetch an open segment's descriptor again (its owner registered more
 * memory, or restarted): used when a remote range is outside what we knew.
 * MC_ERR_INVALID_ARGUMENT for MC_TE_LOCAL_SEGMENT or an unknown handle. */
mc_status_t te_seg_refresh_async(mc_te_t *te, mc_te_segment_t seg, te_done_cb_t cb, void *arg);

/* Publish this engine's descriptor and RPC address again (metadata modes;
 * MC_OK without doing anything in p2p mode), without blocking: for a store
 * client whose owner id the master expired and re-admitted (its entries went
 * with the expiry). Fire and forget: the backend retries what fails in
 * transit. Call on te_reactor(te, 0). */
mc_status_t te_publish_async(mc_te_t *te);

/* ------------------------------------------------------------------- shm */

/* 1 when open segment seg is reached over shared memory now (its owner is
 * on this host and its regions are mapped), else 0 (tests, benchmarks). */
int te_shm_ready(mc_te_t *te, mc_te_segment_t seg);
/* Bytes this engine moved over shared memory so far, both ways. */
uint64_t te_shm_bytes(mc_te_t *te);

/* ------------------------------------------------------------------- gpu */

/* The GPU whose memory p is (the CUDA driver's answer, transport/cuda.h):
 * its ordinal, or -1 for host memory, when the driver is not in the
 * process (it is never loaded for this: without it no GPU memory exists),
 * without a GPU, or when the library misbehaved (logged). Costs a driver
 * call when GPUs exist. */
int te_gpu_of(const void *p);
/* Copy n bytes where either side may be GPU memory (cuMemcpy with the
 * GPU's context current, the caller's put back). MC_OK;
 * MC_ERR_DEVICE_NOT_FOUND (no driver), MC_ERR_TRANSFER_FAIL; logged. */
mc_status_t te_gpu_copy(void *dst, const void *src, size_t n);

/* ------------------------------------------------------------------ rdma */

/* Per-NIC counters of the installed rdma transport (tests, benchmarks). */
typedef struct te_rdma_nic_stats {
    char name[64];
    uint64_t bytes, slices, retries, errors;
    uint64_t eps, eps_created, evictions, handshakes;
    uint64_t requeries; /* port facts read again after a port event */
    uint32_t mtu;       /* negotiated MTU of the last endpoint connected */
} te_rdma_nic_stats_t;
/* Number of NICs (0 without rdma); fills out[0..min(n, max)). */
unsigned te_rdma_stats(mc_te_t *te, te_rdma_nic_stats_t *out, unsigned max);

/* Append the engine's Prometheus families, each name prefixed with
 * `prefix` (e.g. "mooncake_store"): PREFIX_transfers_total{transport,result},
 * PREFIX_transfer_bytes_total{transport}, PREFIX_transfer_duration_seconds
 * {transport} (submit to last slice, per request), PREFIX_served_requests_total
 * {op} and PREFIX_served_bytes_total{op} (what the TCP server answered
 * peers: read, write, readv; shm and rdma peers move bytes without this
 * process), PREFIX_connections_open and PREFIX_connections_total (its RPC
 * server). */
/* *o as this library's mc_te_opts_t: the bytes o->struct_size says the
 * caller has, defaults for the rest. MC_ERR_INVALID_ARGUMENT (logged) for a
 * size that is not one of a mc_te_opts_t. */
mc_status_t te_opts_full(const mc_te_opts_t *o, mc_te_opts_t *out);

struct mc_buf;
void te_metrics(mc_te_t *te, const char *prefix, struct mc_buf *b);

#endif /* MC_TRANSPORT_TE_H */
