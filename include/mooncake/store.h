/*
 * mooncake/store.h - the Mooncake Store client: put/get/remove of
 * key -> bytes objects kept in the DRAM that processes of the cluster
 * contribute, coordinated by mooncake-master.
 *
 * A client is one handle (mc_store_t). It talks to the master over RPC and
 * moves data with its own transfer engine (mooncake/transfer.h). It may
 * contribute memory (global_segment_size > 0: it mounts a segment other
 * clients' objects are placed in; a "storage node" is a client that only
 * does this) and may read and write objects (local_buffer_size > 0: a
 * registered staging buffer for caller memory that is not registered).
 *
 * A co-located client (mc_store_config_t.service = "HOST:PORT") is the
 * other kind: it runs no transfer engine and no master connection; every
 * call below goes to the store service of its host (a mooncake-store-server
 * with service.enabled, or tools/mooncake_client), which reads and writes
 * the client's buffers in memory shared at open (upstream's dummy client /
 * real client pair; Python's setup_dummy). Same calls, same statuses, plus:
 * values outside the shared memory are copied through the shared staging
 * buffer (local_buffer_size; a larger value is MC_ERR_INVALID_PARAMS: use
 * mc_store_alloc_from_mem_pool memory, which travels without a copy);
 * mount/unmount are MC_ERR_NOT_SUPPORTED; register_buffer is accepted and
 * changes nothing; a service that is gone fails calls within
 * rpc_timeout_us (MC_ERR_CONN_CLOSED, MC_ERR_RPC_TIMEOUT) and the next
 * call after it is back shares the memory again; a service that refuses
 * the client (another user, not in store.shm_group) fails the open with
 * MC_ERR_ILLEGAL_CLIENT.
 *
 * Operations come in two forms with the same semantics:
 *  - sync (mc_store_put, ...): from any thread that is not one of the
 *    client's reactor threads or inside one of its callbacks; returns the
 *    status (or bytes for gets).
 *  - async (mc_store_put_async, ...): returns an error (the callback never
 *    runs) or MC_INPROGRESS; then the callback runs exactly once, later, on a
 *    reactor thread of the client, never inside the submitting call. The
 *    caller's buffers are borrowed until the callback runs.
 * Closing the client completes every pending callback with MC_ERR_CANCELED.
 *
 * Keys: 1..4096 bytes (any bytes but NUL). Values: > 0 bytes. Every write is
 * all-or-nothing: an object becomes readable only when every byte of every
 * replica is written (PutStart -> transfers -> PutEnd; any failure revokes,
 * except a write that timed out or lost its connection, which may still
 * land: that put is left to the master's put_start_discard_timeout, and the
 * key stays busy until then).
 *
 * Statuses are mc_status_t with upstream's store codes: e.g.
 * MC_ERR_OBJECT_NOT_FOUND, MC_ERR_OBJECT_ALREADY_EXISTS, MC_ERR_INVALID_KEY,
 * MC_ERR_NO_AVAILABLE_HANDLE (no space even after eviction),
 * MC_ERR_BUFFER_OVERFLOW (get buffer too small: the needed size is
 * reported), MC_ERR_LEASE_EXPIRED, MC_ERR_RPC_TIMEOUT / MC_ERR_CONN_CLOSED
 * (master unreachable), MC_ERR_TRANSFER_FAIL, MC_ERR_INVALID_PARAMS,
 * MC_ERR_STATE (a sync call from a reactor thread; put/get on a client with
 * local_buffer_size 0 and an unregistered buffer).
 *
 * Persistent tier: when the master has a root_fs_dir, every put also writes
 * the object to a file there (persist "eager": before the put returns, and a
 * failed write fails the put with e.g. MC_ERR_FILE_WRITE_FAIL; "async":
 * after, from a copy). A get of an object that has no readable memory
 * replica is served from its file; a corrupt file fails the get with
 * MC_ERR_CHECKSUM_MISMATCH (its bytes are never returned). query reports the
 * file as a replica with disk = 1; exist counts it. The client does its file
 * I/O on worker threads of its own, never on a reactor.
 */
#ifndef MOONCAKE_STORE_H
#define MOONCAKE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "mooncake/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;

typedef struct mc_store mc_store_t;

typedef struct mc_store_config {
    /* sizeof(mc_store_config_t) as the caller was compiled, set by mc_store_config_init
     * (a macro passing it). The library reads only that many bytes and takes
     * its defaults for the fields added since (fields are only ever added at
     * the end), so a program built against an older header keeps working with
     * a newer libmooncake.so.0; a size it does not know (a newer header than
     * the library, or a struct not initialised) is refused naming it. */
    size_t struct_size;
    const char *local_hostname;   /* segment name; NULL = "<advertise_host>:<port>" */
    const char *metadata;         /* "master" (default: the master's embedded service),
                                     "redis://HOST:PORT[/DB]",
                                     "redis-sentinel://H1:P1,H2:P2/NAME[/DB]" (the primary
                                     Redis Sentinels watch as NAME), "http://HOST:PORT/metadata"
                                     (upstream's protocol; the master serves it on its
                                     HTTP port), or "p2p" */
    const char *protocol;         /* "tcp" (default) or "rdma" (NICs, or MC_RDMA_EMULATED=N
                                     emulated ones for tests; peers without rdma get tcp) */
    const char *master;           /* "HOST:PORT" of mooncake-master; "127.0.0.1:50051" */
    const char *advertise_host;   /* address peers reach this client at; "127.0.0.1" */
    uint16_t port;                /* transfer engine listen port; 0 = any */
    uint64_t global_segment_size; /* bytes contributed to the pool; 0 = pure client */
    uint64_t local_buffer_size;   /* registered staging bytes; 0 = pure server */
    unsigned reactors;            /* 0 = one per NUMA node */
    struct event_base *host_base; /* embed into this libevent loop instead of threads */
    uint64_t rpc_timeout_us;      /* master calls; 5 s */
    uint64_t transfer_timeout_us; /* data transfers; 10 s */
    /* Persistent tier (the master's root_fs_dir): when this client writes
     * an object's file. NULL or "" = as the master says (server.persist);
     * "off", "async" (after the put returns, from a copy of the value),
     * "eager" (before the put returns: a put that returned is on disk). */
    const char *persist;
    uint64_t tier_queue_bytes; /* async copies queued at most (256 MiB); beyond,
                                  a put waits for its own file write */
    /* The cluster's secret file ([security] secret_file of the daemons): the
     * master and every node connection authenticate with it, and a
     * co-located client's connection to its service. NULL = none. */
    const char *secret_file;
    /* Shared memory with processes of this host (the shm transport): "on"
     * (NULL or "": the default) makes the segment shared memory and reaches
     * same-host peers' segments with memcpy; "off" keeps tcp/rdma for them. */
    const char *shm;
    const char *shm_group;    /* group admitted to our shared memory besides our user;
                                 NULL = our user only */
    const char *rdma_devices; /* protocol "rdma": comma list of NICs; NULL or "" = all
                                 (MC_RDMA_DEVICES in the environment wins) */
    /* Co-located ("dummy") client: "HOST:PORT" of the store service of this
     * host (a mooncake-store-server with service.enabled, control port 50052
     * by default, or the mooncake_client launcher). Every call is forwarded
     * to it; this client runs no transfer engine and no master connection.
     * Its local_buffer_size (staging for caller memory) and mem_pool_size
     * (mc_store_alloc_from_mem_pool) are one memfd region shared with the
     * service at open, which reads values from it and writes them into it
     * in place (zero copy for pool memory; one copy through staging for
     * other memory). NULL or "" = a normal client. */
    const char *service;
    /* Bytes of memory for mc_store_alloc_from_mem_pool (0 = none). A normal
     * client registers it; a co-located one shares it with its service. */
    uint64_t mem_pool_size;
    /* Node-local offload (upstream's ssd_offload_path; the master needs
     * enable_offload): an absolute directory of this node's own disk where
     * objects of its segment are kept as LOCAL_DISK replicas (evicted from
     * memory, or after every put: the master's offload_on_evict), surviving
     * a restart of the node. One node per directory (a lock file). Needs
     * global_segment_size > 0. NULL or "" = none. */
    const char *offload_dir;
    uint64_t offload_quota; /* bytes of files at most, least recently used go first; 0 = none */
    /* 1: the offload's loads read files and its writes write them through
     * the page cache; 0 (default): with O_DIRECT where the file system allows
     * it (tmpfs may not: then buffered, logged once for loads) and, for a
     * write, where the object's place in the segment is 4096-aligned. */
    int offload_buffered_io;
    /* 1: a batch get tells the master when its reads are done, and the read
     * leases it took end then (unless another reader holds them) instead of
     * lease_ttl later, so eviction can take objects nobody reads any more
     * (a KV cache's small pools at full speed: perf/README.md "Trace
     * replay"); the master must have lease_release on (its default), else
     * nothing changes. Single gets keep their leases to the TTL (but for
     * the copy a node loaded from its disk for a get: its reader releases
     * that lease once it copied it, whatever this says). 0
     * (default): every lease runs to its TTL, as upstream's, so a plain
     * remove right after a get is refused (OBJECT_HAS_LEASE). */
    int lease_release;
    /* offload writes (offload_dir, not offload_buffered_io): 1 = with
     * O_DIRECT where the file system and the object's place in the segment
     * allow it; 0 (default): through the page cache, synced (fsync) before
     * the master is told, then dropped from it (the loads still read the
     * device): on the one machine measured (a VM's virtio disk) 1.5-1.7x
     * the O_DIRECT writes' rate in eviction storms
     * (perf/results/offload_writes.txt). */
    int offload_direct_writes;
    /* 1: the segment (global_segment_size) in hugetlb pages of the
     * system's pool (2 MiB each; /proc/sys/vm/nr_hugepages reserves them),
     * so a device read into it (an offload load, O_DIRECT) goes to the disk
     * as a few large requests instead of one per ~1 MiB of scattered 4 KiB
     * pages, and peers' copies out of it miss the TLB less: on the one
     * machine measured (a VM's virtio disk) offload loads read 1.3-1.6x
     * faster (perf/results/offload_reads_hugepages.txt). Too few free
     * pages: normal pages made into 2 MiB transparent huge pages (with a
     * warning). A co-located client (service) gets its shared staging and
     * pool memory in these pages instead. 0 (default): normal pages (a
     * node with offload_dir: transparent huge pages); mc_store_open turns
     * it on when $MC_STORE_USE_HUGEPAGE is set (upstream's switch;
     * 0/false/no/off or empty: not). */
    int segment_hugepages;
} mc_store_config_t;

/* Defaults: as noted per field; no segment (global_segment_size 0) and a
 * 64 MiB staging buffer. Values larger than the staging buffer travel
 * through it in pieces; registered caller memory skips it. */
MC_API void mc_store_config_init_size(mc_store_config_t *c, size_t struct_size);
#define mc_store_config_init(c) mc_store_config_init_size((c), sizeof(mc_store_config_t))

/* Connect (the master may be down: calls then fail until it is back), mount
 * the segment if any. MC_OK, MC_ERR_INVALID_ARGUMENT (named in the log),
 * MC_ERR_NOMEM, MC_ERR_SOCKET, MC_ERR_DEVICE_NOT_FOUND (protocol "rdma" without a NIC),
 * or the master's refusal of the segment (e.g. MC_ERR_INVALID_PARAMS).
 * With host_base, call it on the thread that runs that loop; the segment is
 * then mounted asynchronously (at the first ping). */
MC_API mc_status_t mc_store_open(const mc_store_config_t *c, mc_store_t **out);

/* Unmount, unpublish, cancel pending calls (MC_ERR_CANCELED), free. NULL ok.
 * Not from one of the client's callbacks (it waits for the client's threads:
 * refused there, with an error logged). */
MC_API void mc_store_close(mc_store_t *s);

/* What a put does to the object's soft pin (upstream SoftPinAction). A
 * soft-pinned object is evicted only after every unpinned one (and not at
 * all when the master disallows it); its window restarts at each read. */
typedef enum mc_soft_pin_action {
    MC_SOFT_PIN_PRESERVE = 0, /* a new object is not pinned; an upsert keeps the pin
                                 the replaced object had */
    MC_SOFT_PIN_ENABLE = 1,   /* pinned for soft_pin_ttl_ms (the master's default
                                 soft_pin_ttl when not given; 0 = not pinned) */
    MC_SOFT_PIN_DISABLE = 2,  /* not pinned; an upsert drops the replaced object's pin */
} mc_soft_pin_action_t;

/* Where replicas go, and how they are protected. */
typedef struct mc_replicate_config {
    /* sizeof(mc_replicate_config_t) as the caller was compiled, set by
     * mc_replicate_config_init (a macro passing it), as in mc_store_config_t:
     * the library reads only that many bytes and takes its defaults for the
     * fields added since (only ever at the end); a put given a size it does
     * not know (a struct not initialised, or a newer header than the
     * library) fails with MC_ERR_INVALID_PARAMS, naming it in the log. */
    size_t struct_size;
    uint32_t replica_num;                  /* 1 by default; best effort above the
                                              number of segments */
    int with_soft_pin;                     /* = soft_pin_action ENABLE (older spelling) */
    const char *const *preferred_segments; /* segment names tried first */
    size_t n_preferred;
    int soft_pin_action;      /* mc_soft_pin_action_t, PRESERVE by default */
    int has_soft_pin_ttl;     /* soft_pin_ttl_ms is given; only with ENABLE, else the
                                 put fails with MC_ERR_INVALID_PARAMS (as upstream) */
    uint64_t soft_pin_ttl_ms; /* clamped by the master to its max_soft_pin_ttl */
    int with_hard_pin;        /* never evicted (removed only by remove); an upsert
                                 keeps a hard pin */
} mc_replicate_config_t;

MC_API void mc_replicate_config_init_size(mc_replicate_config_t *c, size_t struct_size);
#define mc_replicate_config_init(c)                                                                \
    mc_replicate_config_init_size((c), sizeof(mc_replicate_config_t))

/* A piece of a value (puts gather, gets scatter). */
typedef struct mc_slice {
    void *ptr;
    size_t len;
} mc_slice_t;

/* ---------------------------------------------------------------- sync */

/* Store value = concatenation of the slices. cfg NULL = defaults. */
MC_API mc_status_t mc_store_put(mc_store_t *s, const void *key, size_t klen, const void *buf,
                                size_t len, const mc_replicate_config_t *cfg);
MC_API mc_status_t mc_store_put_parts(mc_store_t *s, const void *key, size_t klen,
                                      const mc_slice_t *parts, size_t nparts,
                                      const mc_replicate_config_t *cfg);

/* Upsert (upstream): like put, but an existing object of the key is
 * replaced instead of kept (put returns MC_ERR_OBJECT_ALREADY_EXISTS). The
 * old object disappears when the upsert starts (readers that hold a lease
 * on it finish reading its bytes, which are not reused before their lease
 * ends; new readers get MC_ERR_REPLICA_IS_NOT_READY until the new value is
 * complete); a failed upsert leaves no object. An unfinished put of the key
 * is pre-empted. The soft pin follows cfg->soft_pin_action: PRESERVE keeps
 * the replaced object's. */
MC_API mc_status_t mc_store_upsert(mc_store_t *s, const void *key, size_t klen, const void *buf,
                                   size_t len, const mc_replicate_config_t *cfg);
MC_API mc_status_t mc_store_upsert_parts(mc_store_t *s, const void *key, size_t klen,
                                         const mc_slice_t *parts, size_t nparts,
                                         const mc_replicate_config_t *cfg);

/* Read into buf (len bytes of room). Returns the object size (>= 0) or a
 * negative status; MC_ERR_BUFFER_OVERFLOW when it does not fit, with the
 * needed size in *need (may be NULL). */
MC_API int64_t mc_store_get(mc_store_t *s, const void *key, size_t klen, void *buf, size_t len,
                            uint64_t *need);

/* Get into memory the caller provides once the size is known: after the
 * master answered, alloc(arg, size) runs on the calling thread and returns
 * where to put the size bytes (NULL fails the get with MC_ERR_NOMEM). One
 * master call, as mc_store_get. Returns the size read or a negative status;
 * memory alloc returned stays the caller's also when the read then fails. */
typedef void *(*mc_store_alloc_fn)(void *arg, uint64_t size);
MC_API int64_t mc_store_get_alloc(mc_store_t *s, const void *key, size_t klen,
                                  mc_store_alloc_fn alloc, void *arg);

/* Ranges of one value into registered memory (as mc_store_get_into): for
 * each i < n, the len[i] bytes at src[i] of the value into dst[i]; one
 * master call for all of them. result[i]: the bytes read or a negative
 * status (MC_ERR_INVALID_PARAMS: the range is not inside the value;
 * MC_ERR_NOT_SUPPORTED: the value has no memory replica). Returns MC_OK, or
 * the status of the lookup that failed them all (MC_ERR_OBJECT_NOT_FOUND,
 * ...; then in every result[i] too). A co-located client (store service)
 * reads into memory it shares with the service (mc_store_shared_alloc,
 * registered); the service reads the ranges there. */
MC_API mc_status_t mc_store_get_ranges(mc_store_t *s, const void *key, size_t klen, size_t n,
                                       const uint64_t *src, void *const *dst, const uint64_t *len,
                                       int64_t *result);

/* 1 exists, 0 not, or a negative status. Does not extend the object's life. */
MC_API int mc_store_exist(mc_store_t *s, const void *key, size_t klen);

/* Object size (>= 0) or a negative status. */
MC_API int64_t mc_store_get_size(mc_store_t *s, const void *key, size_t klen);

MC_API mc_status_t mc_store_remove(mc_store_t *s, const void *key, size_t klen, int force);
/* Number removed (>= 0) or a negative status. regex is PCRE2 syntax, searched
 * in each key (unanchored unless it says ^/$, as upstream's std::regex_search);
 * MC_ERR_INVALID_PARAMS for a pattern the master refuses or that goes over
 * its budget (length, backtracking, server.regex_timeout): then nothing was
 * removed. */
MC_API int64_t mc_store_remove_by_regex(mc_store_t *s, const char *regex, int force);
MC_API int64_t mc_store_remove_all(mc_store_t *s, int force);

/* Batch forms: st[i] per key (for batch_get: bytes or a negative status). The
 * call's own return is MC_OK when the batch was processed. */
MC_API mc_status_t mc_store_batch_put(mc_store_t *s, const mc_slice_t *keys,
                                      const mc_slice_t *values, size_t n,
                                      const mc_replicate_config_t *cfg, mc_status_t *st);
MC_API mc_status_t mc_store_batch_get(mc_store_t *s, const mc_slice_t *keys, mc_slice_t *bufs,
                                      size_t n, int64_t *result);
MC_API mc_status_t mc_store_batch_exist(mc_store_t *s, const mc_slice_t *keys, size_t n,
                                        int *result);
MC_API mc_status_t mc_store_batch_remove(mc_store_t *s, const mc_slice_t *keys, size_t n, int force,
                                         mc_status_t *st);

/* The batch forms with values in several pieces: key i's value is the
 * concatenation of nparts[i] slices, taken in order from parts (key 0's
 * first, then key 1's, ...); gets scatter the object over them in the
 * same way (result[i]: the object size, which must fit in the pieces'
 * total, else MC_ERR_BUFFER_OVERFLOW). As the single-buffer forms, pieces
 * in registered memory (or any memory over tcp) are used in place. The
 * upsert forms replace existing objects (mc_store_upsert). */
MC_API mc_status_t mc_store_batch_put_parts(mc_store_t *s, const mc_slice_t *keys,
                                            const mc_slice_t *parts, const size_t *nparts, size_t n,
                                            const mc_replicate_config_t *cfg, mc_status_t *st);
MC_API mc_status_t mc_store_batch_upsert_parts(mc_store_t *s, const mc_slice_t *keys,
                                               const mc_slice_t *parts, const size_t *nparts,
                                               size_t n, const mc_replicate_config_t *cfg,
                                               mc_status_t *st);
MC_API mc_status_t mc_store_batch_upsert(mc_store_t *s, const mc_slice_t *keys,
                                         const mc_slice_t *values, size_t n,
                                         const mc_replicate_config_t *cfg, mc_status_t *st);
MC_API mc_status_t mc_store_batch_get_parts(mc_store_t *s, const mc_slice_t *keys,
                                            const mc_slice_t *parts, const size_t *nparts, size_t n,
                                            int64_t *result);

/* Object sizes (>= 0) or negative statuses per key, with one master call
 * (it grants read leases, as a get's first step). MC_OK when the batch was
 * processed. */
MC_API mc_status_t mc_store_batch_get_size(mc_store_t *s, const mc_slice_t *keys, size_t n,
                                           int64_t *sizes);

/* Zero-copy forms: buf lies in memory registered with mc_store_register_buffer. */
MC_API mc_status_t mc_store_put_from(mc_store_t *s, const void *key, size_t klen, const void *buf,
                                     size_t len, const mc_replicate_config_t *cfg);
MC_API mc_status_t mc_store_upsert_from(mc_store_t *s, const void *key, size_t klen,
                                        const void *buf, size_t len,
                                        const mc_replicate_config_t *cfg);
MC_API int64_t mc_store_get_into(mc_store_t *s, const void *key, size_t klen, void *buf,
                                 size_t len);

/* Register caller memory for the zero-copy forms. Where it lives is found
 * by the transfer engine (transfer.h, location NULL): GPU memory registers
 * as "cuda:N" when a CUDA driver is loaded (on RDMA NICs as GPU memory:
 * dma-buf or nvidia-peermem), host memory as "cpu:<its NUMA node>". Values
 * in GPU memory (these or any other, registered or not) travel through host
 * memory inside the store: one cuMemcpy each way, never a CPU access to GPU
 * memory. MC_OK, MC_ERR_INVALID_PARAMS, MC_ERR_ADDRESS_OVERLAPPED, or the
 * engine's refusal. */
MC_API mc_status_t mc_store_register_buffer(mc_store_t *s, void *buf, size_t len);
MC_API mc_status_t mc_store_unregister_buffer(mc_store_t *s, void *buf);

/* Contribute (or withdraw) memory at run time. buf is borrowed until
 * unmounted; NULL with len allocates (and frees at unmount). Unmount waits
 * until readers that were granted a lease before it are done (at most the
 * master's lease_ttl); unmount(NULL) withdraws every segment the library
 * allocated (including the one of global_segment_size). MC_OK,
 * MC_ERR_SEGMENT_NOT_FOUND, MC_ERR_INVALID_PARAMS, MC_ERR_STATE (from a
 * reactor thread), or the master's status. */
MC_API mc_status_t mc_store_mount_segment(mc_store_t *s, void *buf, size_t len);
MC_API mc_status_t mc_store_unmount_segment(mc_store_t *s, void *buf);

/* Replica descriptors of a key (no data is read; grants a read lease).
 * *n receives how many replicas the object has; the first min(*n, room) are
 * written to out. */
typedef struct mc_store_replica {
    char segment[256]; /* segment name (the holder's local_hostname); "" for disk */
    uint64_t address;
    uint64_t size;
    int complete;
    int disk; /* 1: the object's file in the persistent tier (address 0) */
} mc_store_replica_t;

MC_API mc_status_t mc_store_query(mc_store_t *s, const void *key, size_t klen,
                                  mc_store_replica_t *out, uint32_t room, uint32_t *n);

/* --------------------------------------------------------------- async */

typedef void (*mc_store_cb_t)(void *arg, mc_status_t st);
/* get: result = bytes read (>= 0) or a negative status. */
typedef void (*mc_store_get_cb_t)(void *arg, int64_t result);

MC_API mc_status_t mc_store_put_async(mc_store_t *s, const void *key, size_t klen, const void *buf,
                                      size_t len, const mc_replicate_config_t *cfg,
                                      mc_store_cb_t cb, void *arg);
MC_API mc_status_t mc_store_get_async(mc_store_t *s, const void *key, size_t klen, void *buf,
                                      size_t len, mc_store_get_cb_t cb, void *arg);
MC_API mc_status_t mc_store_remove_async(mc_store_t *s, const void *key, size_t klen, int force,
                                         mc_store_cb_t cb, void *arg);
/* cb's st: 1 exists, 0 not, negative status. */
MC_API mc_status_t mc_store_exist_async(mc_store_t *s, const void *key, size_t klen,
                                        mc_store_cb_t cb, void *arg);

/* Name of this client's segment (its local_hostname); for a co-located
 * client, its service's segment. */
MC_API const char *mc_store_name(const mc_store_t *s);

/* Memory values can be written into in place and put without a copy (and
 * gotten into): size bytes, 64-byte aligned, from the mem_pool_size pool
 * (for a co-located client: memory the service reads and writes directly,
 * upstream's alloc_from_mem_pool). NULL when the pool has no room or none
 * was configured (logged). Any thread. */
MC_API void *mc_store_alloc_from_mem_pool(mc_store_t *s, size_t size);
/* Give it back. MC_OK, or MC_ERR_INVALID_ARGUMENT (not such memory, or
 * freed already). */
MC_API mc_status_t mc_store_free_to_mem_pool(mc_store_t *s, void *p);

/* Shared memory made before (or without) any store: size bytes of their own
 * memfd, page aligned, zeroed (upstream's MooncakeHostMemAllocator: SGLang
 * keeps its host KV pages there before it opens its co-located client). A
 * co-located client's mc_store_register_buffer of a range inside it shares
 * the memfd with its service, which then reads and writes values there in
 * place (no staging copy); for a normal client it is ordinary memory. NULL
 * when the host has not that much (logged). Any thread. */
MC_API void *mc_store_shared_alloc(size_t size);
/* mc_store_shared_alloc_huge's huge: normal pages; hugetlb pages (2 MiB)
 * when the system's pool has that many free (/proc/sys/vm/nr_hugepages),
 * else as MC_STORE_HUGE_THP (logged); or normal pages made into 2 MiB
 * transparent huge pages at once where the kernel can (logged with the
 * count and the time: ~0.4 s per GiB on the test VM, ~3x the normal pages'
 * time). Values read or written by a device (an offload node's O_DIRECT
 * read into this memory) go to it as a few large requests in huge pages,
 * as one request per ~1 MiB of scattered 4 KiB pages in normal ones.
 * mc_store_shared_alloc is mc_store_shared_alloc_huge with
 * MC_STORE_HUGE_HUGETLB when $MC_STORE_USE_HUGEPAGE is set (upstream's
 * switch; 0/false/no/off or empty turn it off), else MC_STORE_HUGE_NONE. */
#define MC_STORE_HUGE_NONE 0
#define MC_STORE_HUGE_HUGETLB 1
#define MC_STORE_HUGE_THP 2
/* As mc_store_shared_alloc, in the pages huge says (MC_STORE_HUGE_*; any
 * other value: NULL, logged). Sizes are rounded up to 2 MiB in huge pages;
 * the memory is zeroed either way. */
MC_API void *mc_store_shared_alloc_huge(size_t size, int huge);
/* Unmap it. Unregister it from the stores first; a service keeps its own
 * mapping of memory it was shared until that client's session ends. MC_OK, or
 * MC_ERR_INVALID_ARGUMENT (not such memory, or freed already). */
MC_API mc_status_t mc_store_shared_free(void *p);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_STORE_H */
