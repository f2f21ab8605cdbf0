/*
 * transport.h - the transports' ops table: what the engine (engine.c,
 * batch.c) asks of local, shm, rdma and tcp, without knowing any of them.
 *
 * A transport is one file (or folder) that defines one te_transport_ops_t
 * and lists it in te_transports[] (transport.c) under its id below. The
 * table's order is the order of preference: a request goes over the first
 * installed transport that can reach its range (`usable`), so the local
 * memcpy beats shared memory, which beats rdma, which beats tcp (always
 * installed: the fallback for every peer).
 *
 * Adding a transport:
 *  1. a file with its ops (hooks it has no use for stay NULL) and its
 *     private state: per engine in te->tp[id] (set by install), per peer
 *     segment in seg->tp[id] (what desc_decode returned; replaced views are
 *     kept on a retired list until the segment goes, since reactors may
 *     still read one) and seg->tp_state[id] (what it keeps for the segment
 *     across descriptions; freed by seg_release), per slice in s->priv
 *     (TE_SLICE_PRIV bytes, its own while the slice is posted on it), per
 *     submit in sub->priv[id];
 *  2. an id in te_tp_id_t and a row in te_transports[] at its place of
 *     preference;
 *  3. if peers must learn something about it, an MC_F_* key (rpc/fields.h)
 *     for its descriptor field: peers that do not know the key skip it.
 *
 * Threads: install/free run on the caller's thread (not a reactor);
 * register_server before the RPC server starts; post on any thread
 * (usually the submitter's; the slices' completion may run on any thread
 * and must not run a batch callback inside the submit: batch.c guards that);
 * desc_decode under seg_lock or on a segment not yet shared.
 */
#ifndef MC_TRANSPORT_TRANSPORT_H
#define MC_TRANSPORT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "rpc/msgpack.h"

/* Ids, in the order of preference. */
typedef enum te_tp_id {
    TE_TP_LOCAL = 0, /* the target is this process: memcpy (cudaMemcpy for GPU memory) */
    TE_TP_SHM,       /* a process of this host: memcpy in its shared memory (shm.c) */
    TE_TP_RDMA,      /* verbs READ/WRITE (transport/rdma/) */
    TE_TP_TCP,       /* RPC calls over the segment's lanes (tcp.c) */
    TE_TP_COUNT
} te_tp_id_t;

#define TE_SLICE_PRIV 48   /* bytes of transport-private state per slice */
#define TE_BUF_PRIV 144    /* bytes of transport-private state per buffer (TE_TP_BUF_PRIV) */
#define TE_SUBMIT_PRIV 256 /* bytes of transport-private state per submit call */

/* te_transport_ops_t.flags */
enum {
    TE_TP_BUILTIN = 1u << 0,   /* installed by mc_te_create; install may be NULL */
    TE_TP_CAN_GPU = 1u << 1,   /* moves cuda:N memory */
    TE_TP_LOCAL_REG = 1u << 2, /* the initiator's memory must be registered with it (lkeys) */
    TE_TP_BUF_PRIV = 1u << 3,  /* keeps state in te_buf_t.priv (at most one transport may) */
    TE_TP_AUTO = 1u << 4,      /* mc_te_create installs it; a failure (or an option that
                                  turns it off) only leaves it out */
};

struct mc_te;
struct te_buf;
struct te_seg;
struct te_slice;

/* Per submit call: each transport's scratch (zeroed when its first slice of
 * the submit comes), and which transports got slices. */
typedef struct te_submit {
    unsigned used; /* bit (1 << id) per transport given slices */
    _Alignas(16) unsigned char priv[TE_TP_COUNT][TE_SUBMIT_PRIV];
} te_submit_t;

/* Someone waiting for a transport to finish setting a segment up
 * (seg_pending): embedded in the waiting request. */
typedef struct te_waiter {
    struct te_waiter *next;
    void (*fn)(struct te_waiter *w); /* called once, on any thread */
} te_waiter_t;

typedef struct te_transport_ops {
    const char *name; /* for mc_te_install_transport and the descriptor's PROTOCOLS */
    unsigned flags;   /* TE_TP_* */
    /* MC_F_* key of its descriptor field (0: it publishes none) */
    unsigned desc_key;

    /* ---- life ---- */
    /* Register its RPC methods on te->srv (every transport of the table, at
     * mc_te_create, installed or not: peers may ask before we install). */
    void (*register_server)(struct mc_te *te);
    /* Set te->tp[id] up, and take the buffers registered so far (reg_bufs).
     * MC_OK or the reason, logged. */
    mc_status_t (*install)(struct mc_te *te);
    /* On the running reactors, before the segments go: stop its work. */
    void (*shutdown)(struct mc_te *te);
    /* After the reactors stopped: free te->tp[id]. */
    void (*free)(struct mc_te *te);

    /* ---- memory (buf_lock held for writing) ---- */
    /* The new local buffers b[0..n), all or nothing (undo what it did). */
    mc_status_t (*reg_bufs)(struct mc_te *te, struct te_buf *b, size_t n);
    void (*dereg_buf)(struct mc_te *te, struct te_buf *b);

    /* ---- descriptor ---- */
    /* The value of desc_key in our descriptor (installed transports). */
    void (*desc_encode)(struct mc_te *te, mc_mp_writer_t *w);
    /* Extra fields of one buffer's map in our descriptor: how many, then
     * each as key, value (buf_lock held). */
    unsigned (*buf_nfields)(struct mc_te *te, const struct te_buf *b);
    void (*buf_encode)(struct mc_te *te, const struct te_buf *b, mc_mp_writer_t *w);
    /* A peer's buffer field `key` it knows: read its value into b, return 1;
     * 0 = not its key (the reader is untouched). Errors go to r->err. */
    int (*buf_decode)(uint64_t key, mc_mp_reader_t *r, struct te_buf *b);
    /* A peer's desc_key value -> its view of that peer (freed with
     * peer_free); MC_OK or MC_ERR_MALFORMED (r->err set). */
    mc_status_t (*desc_decode)(struct mc_te *te, mc_mp_reader_t *r, void **peer);
    /* The whole descriptor read: does peer agree with the buffers? */
    mc_status_t (*desc_check)(const void *peer, const struct te_buf *bufs, size_t n);
    void (*peer_free)(void *peer);
    /* A segment was (re)described (seg_lock held): seg->tp[id] is current.
     * Must not block. */
    void (*seg_described)(struct mc_te *te, struct te_seg *seg);
    /* For callers that may block (mc_te_open_segment, te_seg_refresh, off
     * the reactors): wait, at most timeout_us, until what seg_described
     * started is done (shm: the mapping), so the next submit can use it. */
    void (*seg_wait)(struct mc_te *te, struct te_seg *seg, uint64_t timeout_us);
    /* The same for the non-blocking opens (te_async.c): 1 when what
     * seg_described started is still going, and w->fn will be called once,
     * on any thread, when it is done (or given up: engine shutdown); 0 when
     * nothing is pending (w is not kept). */
    int (*seg_pending)(struct mc_te *te, struct te_seg *seg, te_waiter_t *w);
    /* The segment record goes (engine teardown): drop what it keeps for it
     * besides the peer views. */
    void (*seg_release)(struct mc_te *te, struct te_seg *seg);

    /* ---- data path ---- */
    /* Can it move bytes to and from [remote, remote+len) of seg now? (seg
     * NULL: this process.) seg_lock held; must not block. */
    int (*usable)(struct mc_te *te, struct te_seg *seg, uint64_t remote, uint64_t len);
    /* Slice size for its requests (0: te's slice_size; UINT64_MAX: never
     * cut a request). */
    uint64_t slice_size;
    /* Post the n slices of one request (contiguous, same segment). Each
     * slice ends with exactly one te_slice_done, maybe before post returns. */
    void (*post)(struct mc_te *te, te_submit_t *sub, struct te_slice *s, size_t n);
    /* After the last post of a submit (transports that batch their posts). */
    void (*submit_end)(struct mc_te *te, te_submit_t *sub);
} te_transport_ops_t;

extern const te_transport_ops_t *const te_transports[TE_TP_COUNT];

extern const te_transport_ops_t te_local_ops; /* batch.c */
extern const te_transport_ops_t te_shm_ops;   /* shm.c */
extern const te_transport_ops_t te_rdma_ops;  /* rdma/rdma.c */
extern const te_transport_ops_t te_tcp_ops;   /* tcp.c */

/* The id of a transport by name, -1 when the table has none. */
int te_tp_find(const char *name);

/* A transport's view of a slice's or a submit's private area (each file
 * checks with _Static_assert that its struct fits). */
#define TE_SLICE_PRIV_OF(type, s) ((type *)(void *)(s)->priv)
#define TE_SUBMIT_PRIV_OF(type, sub, id) ((type *)(void *)(sub)->priv[id])

#endif /* MC_TRANSPORT_TRANSPORT_H */
