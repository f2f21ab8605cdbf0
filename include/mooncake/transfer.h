/*
 * mooncake/transfer.h - the transfer engine: move bytes between registered
 * memory of this process and the segments of other processes.
 *
 * Model (as upstream Mooncake's TransferEngine):
 *  - Every engine exposes one segment, named local_hostname, made of the
 *    buffers registered with remote access. Its descriptor (name, address,
 *    port, buffers) is published to the metadata service, or served to peers
 *    directly ("p2p": peers open it by "host:port").
 *  - A peer opens a segment by name and gets a handle; MC_TE_LOCAL_SEGMENT is
 *    this process's own segment.
 *  - Transfers are submitted in batches of requests {opcode, local address,
 *    segment, remote address, length}; READ copies remote -> local, WRITE
 *    local -> remote. Remote addresses are absolute virtual addresses in the
 *    target process (what its descriptor lists), not offsets.
 *  - Requests longer than slice_size are cut into slices that travel in
 *    parallel (several in flight per connection, over a small pool of
 *    connections per peer).
 *
 * Transports: "local" (memcpy, when the target is this process; cudaMemcpy
 * when either side is GPU memory) is always installed; "shm" (memcpy in the
 * shared memory of a peer on the same host: ranges inside its
 * mc_te_alloc_shared memory; on unless mc_te_opts_t.shm_off); "tcp" by
 * default; "rdma" when installed and the peer's descriptor lists NICs (else
 * tcp). A request goes over the first of local, shm, rdma, tcp that
 * reaches its range.
 *
 * Threads: every function may be called from any thread, except
 * mc_te_batch_wait (not from a callback or a reactor thread: it would
 * deadlock) and mc_te_destroy (not from a callback). Batch completion
 * callbacks run on one of the engine's reactor threads (never inside
 * mc_te_submit); they may submit or free batches.
 *
 * Memory: registered memory must stay valid until it is unregistered, and
 * must not be unregistered while transfers that use it are in flight.
 * Strings passed in are copied; request arrays are read during the call only.
 */
#ifndef MOONCAKE_TRANSFER_H
#define MOONCAKE_TRANSFER_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "mooncake/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;

typedef struct mc_te mc_te_t;
typedef struct mc_te_batch mc_te_batch_t;
typedef uint64_t mc_te_segment_t;

#define MC_TE_LOCAL_SEGMENT ((mc_te_segment_t)0)

typedef enum mc_te_opcode { MC_TE_READ = 0, MC_TE_WRITE = 1 } mc_te_opcode_t;

/* Task and batch states, upstream's values. */
typedef enum mc_te_state {
    MC_TE_WAITING = 0,   /* submitted, not finished */
    MC_TE_PENDING = 1,   /* (reserved: upstream reports WAITING for in-flight work) */
    MC_TE_INVALID = 2,   /* no such task */
    MC_TE_CANCELED = 3,  /* the engine shut down before it finished */
    MC_TE_COMPLETED = 4, /* every byte moved */
    MC_TE_TIMEOUT = 5,   /* a slice timed out (and none failed otherwise) */
    MC_TE_FAILED = 6,    /* a slice failed; error says why */
} mc_te_state_t;

typedef struct mc_te_status {
    mc_te_state_t state;
    uint64_t transferred; /* bytes moved so far */
    mc_status_t error;    /* first error of a FAILED/TIMEOUT/CANCELED task or batch */
} mc_te_status_t;

typedef struct mc_te_opts {
    /* sizeof(mc_te_opts_t) as the caller was compiled, set by mc_te_opts_init
     * (a macro passing it). The library reads only that many bytes and takes
     * its defaults for the fields added since (fields are only ever added at
     * the end), so a program built against an older header keeps working with
     * a newer libmooncake.so.0; a size it does not know (a newer header than
     * the library, or a struct not initialised) is refused naming it. */
    size_t struct_size;
    const char *local_hostname; /* segment name; NULL = "<advertise_host>:<port>" */
    /* Metadata service: "p2p" (peers are opened by "host:port" and asked
     * directly; the default), "master://HOST:PORT" (the embedded service of
     * mooncake-master), "redis://HOST:PORT[/DB]",
     * "redis-sentinel://H1:P1,H2:P2/NAME[/DB]" (the primary Redis Sentinels
     * watch as NAME, followed across failovers) or "http://HOST:PORT/metadata"
     * (upstream's HTTP metadata protocol: mooncake-master's HTTP port,
     * mooncake-http-metadata-server, or upstream's server; a Bearer token
     * from $MC_METADATA_HTTP_TOKEN when set). */
    const char *metadata;
    const char *cluster;          /* key namespace in the metadata service; "default" */
    const char *listen_host;      /* "0.0.0.0" */
    uint16_t listen_port;         /* 0 = any free port */
    const char *advertise_host;   /* address peers connect to; "127.0.0.1" */
    unsigned reactors;            /* event-loop threads; 0 = one per NUMA node */
    struct event_base *host_base; /* embed in this loop instead of starting threads */
    uint64_t slice_size;          /* bytes; 64 KiB */
    uint64_t timeout_us;          /* per slice; 10 s */
    unsigned tcp_lanes;           /* connections per peer; 2 */
    uint64_t owner_hi, owner_lo;  /* client id for metadata ownership; 0 = random */
    /* Authentication: a file holding the cluster's secret (the same on every
     * process; at least 16 bytes; mode 600). Every connection of the engine
     * (its listener, its peers, the master:// metadata) then completes an
     * HMAC-SHA256 challenge-response first. NULL or "" = none (a warning at
     * start when listening beyond loopback). A bad file fails mc_te_create
     * with MC_ERR_INVALID_ARGUMENT (named in the log). */
    const char *secret_file;
    /* rdma transport (mc_te_install_transport(te, "rdma")); the MC_* variables
     * named here override these when set. */
    const char *rdma_devices;   /* comma list of NICs to use; NULL = all (MC_RDMA_DEVICES) */
    const char *rdma_matrix;    /* nic priority matrix; NULL = discovered
                                   (MC_NIC_PRIORITY_MATRIX) */
    unsigned rdma_emulated;     /* N > 0: N EMULATED NICs, for tests and demos only; 0 = real
                                   devices (MC_RDMA_EMULATED) */
    unsigned rdma_qps_per_ep;   /* QPs per endpoint; 4 (MC_NUM_QP_PER_EP) */
    unsigned rdma_max_wr;       /* send queue depth per QP; 256 (MC_MAX_WR) */
    unsigned rdma_max_cqe;      /* CQ depth per NIC; 4096 (MC_MAX_CQE_PER_CTX) */
    unsigned rdma_max_eps;      /* endpoints per NIC before SIEVE evicts; 256
                                   (MC_MAX_EP_PER_CTX) */
    unsigned rdma_retry;        /* attempts after the first, per slice; 9 (MC_RETRY_CNT) */
    unsigned rdma_mtu;          /* MTU cap in bytes; 4096 (MC_MTU) */
    unsigned rdma_busy_poll_us; /* busy-poll the CQ this long after activity; 50, 0 on
                                   emulated NICs (MC_RDMA_BUSY_POLL_US) */
    /* shm transport: peers on this host reach our shared memory
     * (mc_te_alloc_shared) with memcpy, and we theirs; on unless shm_off. */
    int shm_off;           /* 1: neither offer our shared memory nor use a peer's */
    unsigned shm_threads;  /* copy threads; 0 = min(4, CPUs) */
    const char *shm_group; /* a group (name or number) admitted besides our own user;
                              NULL = our user only */
} mc_te_opts_t;

MC_API void mc_te_opts_init_size(mc_te_opts_t *o, size_t struct_size);
#define mc_te_opts_init(o) mc_te_opts_init_size((o), sizeof(mc_te_opts_t))

/* Start an engine: reactors, the listener (RPC + TCP data), the metadata
 * connection. MC_OK, MC_ERR_INVALID_ARGUMENT (bad option, named in the log),
 * MC_ERR_SOCKET (cannot listen), MC_ERR_NOMEM. */
MC_API mc_status_t mc_te_create(const mc_te_opts_t *o, mc_te_t **out);

/* Unpublish, stop, fail in-flight tasks with CANCELED, free. NULL is fine. */
MC_API void mc_te_destroy(mc_te_t *te);

/* "tcp", "local" or "shm": MC_OK (also when already installed; shm is
 * installed by mc_te_create unless shm_off). "rdma": opens the
 * NICs (rdma_* options), registers every buffer on each and republishes the
 * descriptor: MC_OK; MC_ERR_DEVICE_NOT_FOUND (no usable NIC: "no RDMA
 * devices"), MC_ERR_CONFIG (bad nic priority matrix), MC_ERR_INVALID_ARGUMENT
 * (bad MTU), MC_ERR_CONTEXT / MC_ERR_MEMORY (a NIC or a registration failed),
 * each logged with the reason. Anything else MC_ERR_INVALID_ARGUMENT. */
MC_API mc_status_t mc_te_install_transport(mc_te_t *te, const char *proto);

MC_API const char *mc_te_local_name(const mc_te_t *te);
MC_API uint16_t mc_te_port(const mc_te_t *te);

/* Register [addr, addr+len) at location ("cpu:N"; "cuda:N" for GPU memory,
 * which needs the CUDA driver (libcuda.so.1, loaded at run time) and GPU N:
 * MC_ERR_DEVICE_NOT_FOUND without them, the reason logged). NULL or "*"
 * (upstream's wildcard): where the memory is: "cuda:N" when the CUDA driver
 * (if one is loaded) says it is GPU memory, else "cpu:N", N the NUMA node of
 * its first page (0 when unknown). With
 * remote_accessible, peers may read and write it. Large regions are
 * pre-touched in parallel. Publishes the updated descriptor.
 * MC_OK, MC_ERR_INVALID_ARGUMENT, MC_ERR_ADDRESS_OVERLAPPED, MC_ERR_NOMEM,
 * MC_ERR_METADATA (registered locally but not published). */
MC_API mc_status_t mc_te_register(mc_te_t *te, void *addr, size_t len, const char *location,
                                  int remote_accessible);

/* Where [addr, addr+len) of this process lives, as mc_te_register with a
 * NULL location would register it: "cuda:N" (the CUDA driver, when one is
 * loaded, says it is memory of GPU N), else "cpu:N" (its first page's NUMA
 * node). Written to out (room >= 16). Any thread; no engine needed. */
MC_API void mc_te_memory_location(const void *addr, size_t len, char *out, size_t room);

typedef struct mc_te_buffer {
    void *addr;
    size_t len;
} mc_te_buffer_t;

/* Register several buffers, publishing once. All or nothing. */
MC_API mc_status_t mc_te_register_batch(mc_te_t *te, const mc_te_buffer_t *bufs, size_t n,
                                        const char *location, int remote_accessible);

/* mc_te_alloc_shared's huge: normal pages; hugetlb pages when the host
 * has them free (else as MC_TE_HUGE_THP, logged); or normal pages made into 2 MiB
 * transparent huge pages at once where the kernel can (Linux 6.1; slower
 * to make: for memory that devices read into). */
#define MC_TE_HUGE_NONE 0
#define MC_TE_HUGE_HUGETLB 1
#define MC_TE_HUGE_THP 2

/* Shared memory: len bytes (rounded up to pages) of a memfd, mapped here,
 * zeroed, reserved at once. Registered remote-accessible (mc_te_register),
 * it is what same-host peers reach over the shm transport (others keep
 * using tcp or rdma); unregistered it is plain memory. huge: MC_TE_HUGE_*.
 * MC_OK;
 * MC_ERR_NOMEM (more than the host has, or the cgroup's limit: the log says
 * how much there is); MC_ERR_LIMIT (open-file or file-size limit);
 * MC_ERR_NOT_SUPPORTED (the shm transport could not start: logged; with
 * shm_off this still works, peers just do not map it);
 * MC_ERR_INVALID_ARGUMENT. */
MC_API mc_status_t mc_te_alloc_shared(mc_te_t *te, size_t len, int huge, void **out);
/* Free memory of mc_te_alloc_shared (unregister it first); mc_te_destroy
 * frees what is left. Peers that mapped it keep it until they let go. MC_OK
 * or MC_ERR_INVALID_ARGUMENT (not such memory). */
MC_API mc_status_t mc_te_free_shared(mc_te_t *te, void *addr);

/* MC_OK or MC_ERR_ADDRESS_NOT_REGISTERED (addr is not the start of a
 * registered buffer). It does not wait for transfers in flight (as
 * upstream): a peer's read or write that passed its range check may still
 * touch the memory, so unregister (and free) only memory no transfer uses. */
MC_API mc_status_t mc_te_unregister(mc_te_t *te, void *addr);

/* Open a segment by name: fetches and caches its descriptor. Opening the same
 * name again returns the same handle. MC_OK, MC_ERR_INVALID_ARGUMENT,
 * MC_ERR_NOT_FOUND (no such segment), MC_ERR_METADATA / MC_ERR_SOCKET /
 * MC_ERR_RPC_TIMEOUT (could not ask). The local name gives
 * MC_TE_LOCAL_SEGMENT. */
MC_API mc_status_t mc_te_open_segment(mc_te_t *te, const char *name, mc_te_segment_t *out);
MC_API mc_status_t mc_te_close_segment(mc_te_t *te, mc_te_segment_t seg);

/* Buffer i (in address order) of the ones a segment's descriptor lists
 * (for MC_TE_LOCAL_SEGMENT: this engine's remote-accessible buffers): its
 * address and length (each may be NULL). With refresh, the descriptor is
 * fetched again first (blocking: not from a reactor thread or callback).
 * MC_OK, MC_ERR_NOT_FOUND (fewer buffers), MC_ERR_INVALID_ARGUMENT (unknown
 * segment), or the status of the fetch. */
MC_API mc_status_t mc_te_segment_buffer(mc_te_t *te, mc_te_segment_t seg, size_t i, int refresh,
                                        uint64_t *addr, uint64_t *len);

/* A batch holds up to capacity requests over its life (submits append). */
MC_API mc_status_t mc_te_batch_alloc(mc_te_t *te, size_t capacity, mc_te_batch_t **out);

/* MC_OK, or MC_ERR_BATCH_BUSY while a task is unfinished (then nothing is
 * freed). */
MC_API mc_status_t mc_te_batch_free(mc_te_batch_t *b);

typedef void (*mc_te_batch_cb_t)(void *arg, mc_te_batch_t *b, const mc_te_status_t *st);

/* Called each time every task submitted so far has finished. Set before
 * submitting. */
MC_API void mc_te_batch_set_callback(mc_te_batch_t *b, mc_te_batch_cb_t cb, void *arg);

typedef struct mc_te_request {
    mc_te_opcode_t opcode;
    void *local; /* inside a registered buffer */
    mc_te_segment_t segment;
    uint64_t remote; /* absolute address in the target */
    uint64_t length; /* > 0 */
} mc_te_request_t;

/* Submit n requests; they become tasks first_task .. first_task+n-1 where
 * first_task is the number of tasks submitted before. All or nothing: on an
 * error nothing is submitted. MC_OK, MC_ERR_TOO_MANY_REQUESTS (capacity),
 * MC_ERR_ADDRESS_NOT_REGISTERED (local range not registered, or remote range
 * outside the target's buffers, also when address + length overflows),
 * MC_ERR_INVALID_ARGUMENT (bad opcode, zero length, unknown segment),
 * MC_ERR_CANCELED (engine stopping). */
MC_API mc_status_t mc_te_submit(mc_te_batch_t *b, const mc_te_request_t *reqs, size_t n);

MC_API mc_status_t mc_te_task_status(mc_te_batch_t *b, size_t task, mc_te_status_t *out);

/* Whole batch: COMPLETED when every task did; FAILED/TIMEOUT/CANCELED when
 * all finished and one did not; else WAITING. */
MC_API mc_status_t mc_te_batch_status(mc_te_batch_t *b, mc_te_status_t *out);

/* Block until every submitted task finished or timeout_us passed
 * (MC_ERR_TIMEOUT). Returns MC_OK when all COMPLETED, else the first task
 * error. Not from a reactor thread (MC_ERR_STATE). */
MC_API mc_status_t mc_te_batch_wait(mc_te_batch_t *b, uint64_t timeout_us);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_TRANSFER_H */
