/*
 * client_offload.c - the node side of node-local offload
 * (store/master_offload.c): a node with an offload directory
 * (mc_store_config_t.offload_dir) keeps objects of its own segment on its
 * own disk, as LOCAL_DISK replicas.
 *
 * Files: the persistent tier's (store/tier.h): names from the key, header
 * with the key, size and XXH3 checksums, atomic write (temp file, fsync,
 * rename), verified read, scan. Offload files have the header padded to
 * MC_TIER_ALIGN (MC_TIER_F_ALIGNED) so loads can read the data with
 * O_DIRECT. The directory is this node's alone (the lock file).
 *
 * Two threads, never a reactor:
 *  - the poller sends held OFFLOAD_POLLs (WAIT_US: the master answers as
 *    soon as there is work for the segment, or empty after OFFLOAD_HOLD_US)
 *    and hands each answer to the worker (inbox, evfd), one at a time;
 *  - the worker, at start (and after the master forgot the node: a poll
 *    answered SEGMENT_NOT_FOUND), tells the master the segment offloads (a
 *    poll with COUNT 0: evictions queue PERSIST for it from then on, not
 *    drops), scans the directory (deleting temp files,
 *    which only a killed write leaves, and corrupt files) and reports every
 *    file (LDISK_REPORT_BATCH, a batch of files a call); files the master
 *    refuses (the key exists, so the file may be of an older put; or it
 *    was removed, its DELETE not served yet) are deleted. Then it serves the answers:
 *    PERSIST (write the bytes at segment base + offset to the file, answer
 *    OFFLOAD_DONE with the result: a failed write, e.g. a full disk, is
 *    reported and the master evicts as without offload), LOAD (read the
 *    file into segment base + offset: up to OFFLOAD_IO_DEPTH at once through
 *    store/offload_io.h, io_uring, O_DIRECT where the file system allows;
 *    the checksum verified: a corrupt or missing file is deleted and
 *    reported, its bytes never served; answered from r0 without waiting),
 *    DELETE (the object was removed). While reads are in flight it waits in
 *    the io queue, which also watches evfd: a new answer joins them;
 *  - own reads (store_offload_read_op): a get of an object only on this
 *    node's disk, by this node's own client (or a co-located client of its
 *    store service, whose memory it is given), is not a LOAD: the master
 *    lists the LOCAL_DISK replica at once (GET_REPLICA_LIST with OWN_DISK)
 *    and the worker reads the file straight into the get's memory, as a
 *    load's pieces (O_DIRECT when that memory is aligned, checksum
 *    verified), then the get goes on on r0. No staging copy in the
 *    segment, no call between the master and the node. A failed one
 *    (a missing or corrupt file: deleted) makes the get ask for a LOAD, so
 *    the master learns it as from any failed load;
 *  - a quota (offload_quota, bytes; 0 = none): before a write that would
 *    exceed it, the least recently used files go (deleted, LDISK_DROP).
 *
 * Two nodes sharing a directory would delete each other's files: a lock
 * file (flock on <dir>/.lock) refuses the second at open, naming the first.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rpc/methods.h"
#include "store/client_int.h"
#include "store/master_client.h"
#include "store/offload_io.h"
#include "store/tier.h"
#include "util/auth.h"
#include "util/hash.h"
#include "util/hmap.h"
#include "util/list.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/prom.h"
#include "util/time.h"

#define OFFLOAD_HOLD_US 250000  /* a poll without work is held this long by the master */
#define OFFLOAD_IDLE_US 2000    /* not mounted yet: look again (x5) */
#define OFFLOAD_RETRY_US 500000 /* after a failed poll or report */
#define OFFLOAD_POLL_BATCH 256
#define OFFLOAD_SCAN_MAX 10000000ull
#define OFFLOAD_REPORT_BATCH 1024         /* start report: files in one call */
#define OFFLOAD_REPORT_BYTES (256u << 10) /* and their keys' bytes */
#define OFFLOAD_IO_DEPTH 16               /* LOADs in flight at once */
/* A load's data is read as up to OFFLOAD_PIECES pieces submitted together
 * (of at least OFFLOAD_PIECE_MIN, multiples of MC_TIER_ALIGN): the device
 * serves them at once, and each piece is hashed as soon as it and those
 * before it are in, while the rest is still being read. The checksum is
 * still the whole data's (XXH3 streamed in order: the file format is
 * unchanged). Into scattered 4 KiB pages the pieces go out as separate
 * requests and come in one by one: 8 of 512 KiB for 4 MiB left 30-40 us
 * of hash after the read, against 65-80 with 4 of 1 MiB. Into 2 MiB pages
 * (the segment's, MC_TE_HUGE_THP) pieces in flight together merge into one
 * request and come in together: O_DIRECT loads keep OFFLOAD_READ_WINDOW in
 * flight, and a waiting reader is told before the hash (load_advance;
 * perf/results/offload_thp.txt). */
#define OFFLOAD_PIECES 8
#define OFFLOAD_PIECE_MIN (512u << 10)
/* A progressive load tells its last pieces too, before hashing them, when
 * there are at least this many bytes of them (a device that completes the
 * pieces together leaves the whole hash for then: 270-390 us for 4 MiB on
 * the test VM, which the reader's copy then overlaps); fewer are hashed and
 * answered at once (one message less). */
#define OFFLOAD_PROGRESS_LAST_MIN (1u << 20)
/* An O_DIRECT load keeps this many of its pieces in flight, the next
 * submitted as one comes in (buffered: all at once, the kernel's workers
 * read them). Into 2 MiB pages two pieces merge into one 1 MiB request: the
 * device takes 4 MiB in the same time as one 4 MiB request (2.00-2.07 ms
 * against 1.97-2.03 on the test VM, where all pieces at once also complete
 * together), and each MiB comes in ~0.5 ms apart, hashed (and copied by a
 * waiting reader) while the next is read: only the last MiB's hash is
 * left after the read. Into scattered 4 KiB pages: the same time as all at
 * once (perf/results/offload_thp.txt, offload_cold.txt). */
#define OFFLOAD_READ_WINDOW 2
#define OFFLOAD_WRITE_BATCH 16                  /* PERSIST files written, then synced at once */
#define OFFLOAD_WRITE_BATCH_BYTES (64ull << 20) /* ... or fewer, of this many bytes in all */

/* A load's stages, timed (mooncake_store_offload_load_stage_seconds): where
 * a disk-only get spends its time on the node. */
enum {
    OSTAGE_HANDOFF, /* the poll's answer came -> the worker starts the load */
    OSTAGE_OPEN,    /* open the file, check its header -> its read queued */
    OSTAGE_READ,    /* queued -> the last piece read (io_uring submit, the device, and the
                       hash of the pieces before it, done meanwhile) */
    OSTAGE_VERIFY,  /* the checksum left once the last piece is in (its hash) */
    OSTAGE_ANSWER,  /* verified -> OFFLOAD_DONE sent from r0 */
    OSTAGE_FIRST,   /* inside read: queued -> the first piece in (how much of the read a
                       copy out could overlap) */
    OSTAGE_N
};
static const char *const stage_names[OSTAGE_N] = {"handoff", "open",   "read",
                                                  "verify",  "answer", "first"};

/* A file of the directory (this thread only). */
typedef struct ofile {
    mc_hnode_t node;
    uint64_t size;
    uint64_t used; /* LRU clock of the last write or read */
    /* how it was written, found by the start scan (its header and name) or
     * last opened: a load opens it without reading its header
     * (mc_tier_open_known) */
    int known;
    mc_tier_known_t tk;
    uint32_t klen;
    char key[];
} ofile_t;

/* An own read waiting for the worker (o->reads). */
typedef struct oread {
    mc_list_t node;
    store_op_t *op; /* continued with op->wait_st once read (or failed); or NULL: */
    void (*cb)(void *arg, mc_status_t st); /* called instead (store_offload_read_sync) */
    void *arg;
    uint8_t *buf; /* the get's memory, size bytes */
    uint64_t size;
    uint64_t t_sub; /* queued (µs): the handoff stage */
    uint32_t klen;
    char key[];
} oread_t;

/* A LOAD being read: its file, where it goes, its reads in flight. */
typedef struct oload oload_t;
typedef struct opart {
    oload_t *l;
    int tail;     /* the tail of an O_DIRECT read, through the bounce */
    int done;     /* read (got bytes of len) */
    uint64_t off; /* where in the data (and in dst) */
    uint64_t len; /* bytes of data it holds */
    uint64_t got; /* bytes of data read */
} opart_t;

struct oload {
    int busy;
    oread_t *rd; /* an own read (dst is its memory; answered to its get), or NULL: a LOAD */
    uint64_t id; /* the master's id of this LOAD (0: a master without them) */
    /* stage times (µs): the poll's answer came, the load started, its read queued, its
     * first piece in */
    uint64_t t_ans, t_start, t_queued, t_first, t_in; /* t_in: its last piece in */
    mc_tier_file_t f;
    char key[MC_TIER_KEY_MAX];
    uint32_t klen;
    uint64_t size;
    uint8_t *dst;    /* segment base + offset */
    uint64_t body;   /* bytes read straight into dst (O_DIRECT: a multiple of MC_TIER_ALIGN) */
    uint64_t got;    /* bytes of data read so far */
    unsigned parts;  /* reads in flight */
    unsigned nparts; /* pieces of the data (the tail last) */
    unsigned next;   /* the next piece to read (part[0 .. next) queued) */
    unsigned hashed; /* pieces hashed, in order (part[0 .. hashed)) */
    int fresh;       /* pieces came in at the last reap: load_advance */
    mc_status_t st;  /* the first failure */
    int redo;        /* an O_DIRECT read failed: read the file again, buffered */
    uint8_t *bounce; /* MC_TIER_ALIGN bytes, aligned: an O_DIRECT read's last block */
    mc_hash64_stream_t hs; /* the data's checksum so far (part[0 .. hashed)) */
    opart_t part[OFFLOAD_PIECES + 1];
};

/* A PERSIST of the batch being written: its temp file written, its sync to
 * come (persist_flush). */
typedef struct opersist {
    const char *key; /* in the poll's answer: the batch is flushed before it goes */
    uint32_t klen;
    uint64_t size;
    int sync_errno; /* its fsync's result */
    int committed;  /* renamed over its name: to be answered */
    mc_tier_wfile_t w;
} opersist_t;

#define DISK_ID_LEN 16

struct store_offload {
    mc_store_t *s;
    char dir[4096];
    int lock_fd;
    uint8_t disk_id[DISK_ID_LEN]; /* the directory's identity (its .disk_id) */
    int has_disk_id;              /* 0: none could be read or made (logged) */
    uint64_t done_id;             /* the last answer whose DELETEs were done (its ANSWER_ID; mu) */
    uint64_t quota;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop; /* mu */
    mc_hmap_t files;
    uint64_t bytes, clock;
    int reported; /* mu: the files of the directory were reported since the last (re)mount */
    _Atomic int off_logged; /* the worker and the poller log it once */
    int buffered;           /* offload_buffered_io: loads and writes never O_DIRECT */
    int direct_refused;     /* logged: the file system refused O_DIRECT */
    int direct_writes;      /* offload_direct_writes: writes with O_DIRECT (never if buffered) */
    int no_done_batch;      /* the master has no OFFLOAD_DONE_BATCH: one call per file */
    int no_report_batch;    /* the master has no LDISK_REPORT_BATCH: one call per file */
    /* mu: the worker does the DELETEs of the answer it took; the poller
     * waits (the master counts a poll's DELETEs done when the next comes) */
    int deleting;
    /* loads say nothing until done: progressive loads are off ($MC_OFFLOAD_PROGRESS=0), or
     * the master has no OFFLOAD_PROGRESS */
    _Atomic int no_progress;
    int progress_always;      /* $MC_OFFLOAD_PROGRESS=1: also while other loads are in flight */
    uint64_t verify_delay_us; /* $MC_OFFLOAD_VERIFY_DELAY_US (tests): see load_part_done */
    uint64_t report_delay_us; /* $MC_OFFLOAD_REPORT_DELAY_US (tests): the scan takes this longer */
    int no_own_reads;         /* $MC_OFFLOAD_OWN_READS=0: own gets ask for a LOAD too */
    mc_list_t reads;          /* mu: own reads the worker has not started */
    mc_oio_t *io;
    opersist_t *wb;    /* OFFLOAD_WRITE_BATCH: the PERSIST batch (worker) */
    unsigned nwb;      /* written, not synced yet */
    unsigned wsyncing; /* their fsyncs in the io queue */
    uint64_t wb_bytes;
    oload_t *loads; /* OFFLOAD_IO_DEPTH slots, with their bounce blocks */
    uint8_t *bounces;
    /* the poller thread: held polls, their answers handed to the worker */
    pthread_t poller_th;
    int poller_started;
    mc_buf_t inbox;      /* mu: a poll's answer the worker has not taken (empty: none) */
    mc_buf_t poll_body;  /* the poller's: the poll r0 sends */
    int poll_out;        /* mu: a poll is out (r0 sends it; its answer goes to the inbox) */
    mc_status_t poll_st; /* mu: how the last poll went */
    int poll_work;       /* mu: the last poll's answer had requests */
    int evfd;            /* written with each answer: wakes the worker's io wait */
    int watch_armed;     /* worker: the io queue watches evfd */
    unsigned dones_out;  /* mu: LOAD answers sent (r0), not acknowledged yet */
    uint64_t inbox_us;   /* mu: when the inbox's answer came */
    mc_prom_hist_t stage[OSTAGE_N]; /* a load's time by stage (stage_names) */
    _Atomic uint64_t written, write_failed, loaded, load_failed, deleted, quota_dropped,
        bytes_written, bytes_read, loaded_direct, written_direct, own_read, own_read_direct,
        own_read_failed, poll_pauses;
    /* start reports: files kept, files refused (deleted), calls */
    _Atomic uint64_t report_taken, report_refused, report_calls;
    mc_prom_hist_t report_time; /* complete start reports: the scan and the calls */
};

/* ------------------------------------------------------------ the index */

static ofile_t *file_find(store_offload_t *o, const void *key, size_t klen, uint64_t h)
{
    mc_hnode_t *n;
    MC_HMAP_FOREACH_HASH(&o->files, n, h)
    {
        ofile_t *f = MC_CONTAINER_OF(n, ofile_t, node);
        if (f->klen == klen && memcmp(f->key, key, klen) == 0)
            return f;
    }
    return NULL;
}

static void file_add(store_offload_t *o, const void *key, size_t klen, uint64_t size)
{
    uint64_t h = mc_hash64(key, klen);
    ofile_t *f = file_find(o, key, klen, h);
    if (f != NULL) {
        o->bytes -= f->size;
    } else {
        f = mc_malloc(sizeof(*f) + klen);
        if (f == NULL)
            return; /* not counted for the quota: logged by the allocator */
        f->klen = (uint32_t)klen;
        memcpy(f->key, key, klen);
        mc_hmap_insert(&o->files, &f->node, h);
    }
    f->size = size;
    f->used = ++o->clock;
    f->known = 0;
    o->bytes += size;
}

/* key's file is as k says (written or opened here). */
static void file_know(store_offload_t *o, const void *key, size_t klen, const mc_tier_known_t *k)
{
    ofile_t *f = file_find(o, key, klen, mc_hash64(key, klen));
    if (f != NULL && k->size == f->size) {
        f->tk = *k;
        f->known = 1;
    }
}

static void file_forget(store_offload_t *o, const void *key, size_t klen)
{
    ofile_t *f = file_find(o, key, klen, mc_hash64(key, klen));
    if (f == NULL)
        return;
    o->bytes -= f->size;
    mc_hmap_remove(&o->files, &f->node);
    mc_free(f);
}

/* ------------------------------------------------------------ master calls */

static store_seg_t *first_seg(mc_store_t *s)
{
    pthread_mutex_lock(&s->seg_mu);
    store_seg_t *g =
        s->segs.next != &s->segs ? MC_CONTAINER_OF(s->segs.next, store_seg_t, node) : NULL;
    pthread_mutex_unlock(&s->seg_mu);
    return g;
}

static void head(mc_mp_writer_t *w, mc_store_t *s, const store_seg_t *g, uint32_t n)
{
    mc_mp_write_map(w, 2 + n);
    mc_mp_write_uint(w, MC_F_CLIENT_ID);
    mc_proto_write_uuid(w, s->client_id);
    mc_mp_write_uint(w, MC_F_SEGMENT_ID);
    mc_proto_write_uuid(w, g->id);
}

/* A poll's head (n more fields follow): with the directory's identity, so
 * the master knows this node under any segment name, and the last answer
 * whose DELETEs were done (those of an answer lost on its way come again).
 * done: o->done_id, read under mu. */
static void poll_head(mc_mp_writer_t *w, store_offload_t *o, const store_seg_t *g, uint32_t n,
                      uint64_t done)
{
    head(w, o->s, g, n + 1 + (o->has_disk_id ? 1 : 0));
    if (o->has_disk_id) {
        mc_mp_write_uint(w, MC_F_DISK_ID);
        mc_mp_write_bin(w, o->disk_id, DISK_ID_LEN);
    }
    mc_mp_write_uint(w, MC_F_DONE_ID);
    mc_mp_write_uint(w, done);
}

/* r at the value of field id of a poll's answer: 1, or 0 when it has none
 * (or is not a map). */
static int answer_field(mc_mp_reader_t *r, const uint8_t *body, size_t len, uint64_t id)
{
    mc_mp_reader_init(r, body, len);
    uint32_t nf = mc_mp_read_map(r);
    for (uint32_t i = 0; i < nf && r->err == MC_OK; i++) {
        if (mc_mp_read_uint(r) == id)
            return r->err == MC_OK;
        mc_mp_skip(r);
    }
    return 0;
}

/* The number of a poll's answer (ANSWER_ID), 0 when none (no DELETEs in
 * it, or a master that does not number them). */
static uint64_t answer_id(const uint8_t *body, size_t len)
{
    mc_mp_reader_t r;
    if (!answer_field(&r, body, len, MC_F_ANSWER_ID))
        return 0;
    uint64_t id = mc_mp_read_uint(&r);
    return r.err == MC_OK ? id : 0;
}

/* REPORT (size given) or DROP (size 0) of key. */
static mc_status_t call_key(store_offload_t *o, const store_seg_t *g, uint16_t method,
                            const void *key, size_t klen, uint64_t size)
{
    mc_buf_t body = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    head(&w, o->s, g, method == MC_RPC_LDISK_REPORT ? 2 : 1);
    mc_mp_write_uint(&w, MC_F_KEY);
    mc_mp_write_bin(&w, key, (uint32_t)klen);
    if (method == MC_RPC_LDISK_REPORT) {
        mc_mp_write_uint(&w, MC_F_SIZE);
        mc_mp_write_uint(&w, size);
    }
    mc_status_t st = w.err != MC_OK ? w.err : store_call_sync(o->s, method, &body, NULL);
    mc_buf_fini(&body);
    return st;
}

/* A file named in a batch call: its key and size. */
typedef struct fref {
    const void *key;
    size_t klen;
    uint64_t size;
} fref_t;

/* One batch call {CLIENT_ID, SEGMENT_ID, KEYS, SIZES} -> {STATUSES} of
 * the n files f (OFFLOAD_DONE_BATCH, LDISK_REPORT_BATCH): MC_OK with each
 * file's status in st, MC_ERR_NO_METHOD (a master that lacks it: *no set,
 * logged once; the caller sends a call per file), or the call's failure. */
static mc_status_t files_call(store_offload_t *o, const store_seg_t *g, uint16_t method,
                              const fref_t *f, unsigned n, mc_status_t *st, int *no)
{
    if (*no)
        return MC_ERR_NO_METHOD;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    head(&w, o->s, g, 2);
    mc_mp_write_uint(&w, MC_F_KEYS);
    mc_mp_write_array(&w, n);
    for (unsigned i = 0; i < n; i++)
        mc_mp_write_bin(&w, f[i].key, (uint32_t)f[i].klen);
    mc_mp_write_uint(&w, MC_F_SIZES);
    mc_mp_write_array(&w, n);
    for (unsigned i = 0; i < n; i++)
        mc_mp_write_uint(&w, f[i].size);
    mc_status_t r = w.err != MC_OK ? w.err : store_call_sync(o->s, method, &body, &resp);
    size_t ng = 0;
    if (r == MC_OK &&
        (mc_mcli_dec_statuses(mc_buf_head(&resp), mc_buf_used(&resp), st, NULL, n, &ng) != MC_OK ||
         ng != n))
        r = MC_ERR_PROTOCOL;
    if (r == MC_ERR_NO_METHOD) {
        MC_INFO(CLIENT, "offload: the master lacks batch call %u: a call per file", method);
        *no = 1;
    }
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return r;
}

/* The body of an OFFLOAD_DONE: which object, its size, the outcome; of a
 * LOAD, its id (0: none given, or a PERSIST). */
static void done_body(mc_mp_writer_t *w, store_offload_t *o, const store_seg_t *g, const void *key,
                      size_t klen, uint64_t size, mc_status_t result, uint64_t load_id)
{
    head(w, o->s, g, load_id != 0 ? 4 : 3);
    if (load_id != 0) {
        mc_mp_write_uint(w, MC_F_LOAD_ID);
        mc_mp_write_uint(w, load_id);
    }
    mc_mp_write_uint(w, MC_F_KEY);
    mc_mp_write_bin(w, key, (uint32_t)klen);
    mc_mp_write_uint(w, MC_F_SIZE);
    mc_mp_write_uint(w, size);
    mc_mp_write_uint(w, MC_F_STATUS);
    mc_mp_write_int(w, result);
}

static mc_status_t call_done(store_offload_t *o, const store_seg_t *g, const void *key, size_t klen,
                             uint64_t size, mc_status_t result, uint64_t load_id)
{
    mc_buf_t body = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    done_body(&w, o, g, key, klen, size, result, load_id);
    mc_status_t st =
        w.err != MC_OK ? w.err : store_call_sync(o->s, MC_RPC_OFFLOAD_DONE, &body, NULL);
    mc_buf_fini(&body);
    return st;
}

/* A LOAD's answer, sent from r0 without the worker waiting for it (the
 * master's reply only says whether it still wanted the load: nothing to do
 * either way; a lost one is voided by the master's offload_timeout). */
typedef struct done_msg {
    store_offload_t *o;
    uint64_t t_ver;  /* the load was verified (its answer's stage starts) */
    uint16_t method; /* OFFLOAD_DONE, or OFFLOAD_PROGRESS */
    size_t len;
    uint8_t body[];
} done_msg_t;

static void done_over(done_msg_t *m)
{
    store_offload_t *o = m->o;
    mc_free(m);
    pthread_mutex_lock(&o->mu);
    o->dones_out--;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static void done_answered(void *arg, const mc_rpc_resp_t *resp)
{
    done_msg_t *m = arg;
    if (m->method == MC_RPC_OFFLOAD_PROGRESS) {
        /* a master that does not know it: loads say nothing until done; any
         * other failure (the load timed out, ...) is for OFFLOAD_DONE to say */
        if (resp->status == MC_ERR_NO_METHOD && !atomic_exchange(&m->o->no_progress, 1))
            MC_INFO(CLIENT, "offload: the master has no progressive loads (OFFLOAD_PROGRESS)");
        done_over(m);
        return;
    }
    if (resp->status != MC_OK && resp->status != MC_ERR_OBJECT_NOT_FOUND &&
        resp->status != MC_ERR_CANCELED)
        MC_WARN(CLIENT,
                "offload: the answer to a load got %s from the master (the master "
                "voids the load after offload_timeout)",
                mc_status_str(resp->status));
    done_over(m);
}

static void done_on_r0(mc_reactor_t *r, void *arg, mc_status_t st)
{
    (void)r;
    done_msg_t *m = arg;
    mc_store_t *s = m->o->s;
    if (st == MC_OK && s->mcli != NULL) {
        uint64_t now = mc_now_us();
        if (m->method == MC_RPC_OFFLOAD_DONE)
            mc_prom_hist_observe_us(&m->o->stage[OSTAGE_ANSWER],
                                    now > m->t_ver ? now - m->t_ver : 0);
        st = mc_rpc_call(s->mcli, m->method, m->body, m->len, s->cfg.rpc_timeout_us, done_answered,
                         m);
    }
    if (st != MC_INPROGRESS)
        done_over(m);
}

/* call_done for a LOAD, not waiting: MC_OK (sent from r0), or the failure
 * to hand it to r0 (then sent here, waiting). */
static void call_done_async(store_offload_t *o, const store_seg_t *g, const void *key, size_t klen,
                            uint64_t size, mc_status_t result, uint64_t t_ver, uint64_t load_id)
{
    mc_buf_t body = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    done_body(&w, o, g, key, klen, size, result, load_id);
    done_msg_t *m = w.err == MC_OK ? mc_malloc(sizeof(*m) + mc_buf_used(&body)) : NULL;
    if (m != NULL) {
        m->o = o;
        m->t_ver = t_ver;
        m->method = MC_RPC_OFFLOAD_DONE;
        m->len = mc_buf_used(&body);
        memcpy(m->body, mc_buf_head(&body), m->len);
        pthread_mutex_lock(&o->mu);
        o->dones_out++;
        pthread_mutex_unlock(&o->mu);
        if (mc_reactor_call(o->s->r0, done_on_r0, m) != MC_OK) {
            done_over(m);
            m = NULL;
        }
    }
    mc_buf_fini(&body);
    if (m == NULL)
        call_done(o, g, key, klen, size, result, load_id);
}

/* A LOAD in flight has its first ready bytes in the segment (read, not
 * verified yet): tell the master, from r0 without waiting, so a reader
 * waiting for the load copies them while the rest is read. Best effort: a
 * lost one only means the reader copies them later. */
static void load_progress(store_offload_t *o, const store_seg_t *g, const char *key, size_t klen,
                          uint64_t size, uint64_t ready, uint64_t load_id)
{
    if (atomic_load(&o->no_progress))
        return;
    mc_buf_t body = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    head(&w, o->s, g, load_id != 0 ? 4 : 3);
    if (load_id != 0) { /* the master matches the load on it */
        mc_mp_write_uint(&w, MC_F_LOAD_ID);
        mc_mp_write_uint(&w, load_id);
    }
    mc_mp_write_uint(&w, MC_F_KEY);
    mc_mp_write_bin(&w, key, (uint32_t)klen);
    mc_mp_write_uint(&w, MC_F_SIZE);
    mc_mp_write_uint(&w, size);
    mc_mp_write_uint(&w, MC_F_LOADED);
    mc_mp_write_uint(&w, ready);
    done_msg_t *m = w.err == MC_OK ? mc_malloc(sizeof(*m) + mc_buf_used(&body)) : NULL;
    if (m != NULL) {
        m->o = o;
        m->t_ver = 0;
        m->method = MC_RPC_OFFLOAD_PROGRESS;
        m->len = mc_buf_used(&body);
        memcpy(m->body, mc_buf_head(&body), m->len);
        pthread_mutex_lock(&o->mu);
        o->dones_out++; /* o outlives it (the worker's end waits for them) */
        pthread_mutex_unlock(&o->mu);
        if (mc_reactor_call(o->s->r0, done_on_r0, m) != MC_OK)
            done_over(m);
    }
    mc_buf_fini(&body);
}

/* ------------------------------------------------------------ startup report */

typedef struct found {
    struct found *next;
    mc_tier_known_t known; /* as its header and name say: its loads need not read them */
    size_t klen;
    char key[];
} found_t;

static int on_found(void *arg, const void *key, size_t klen, const mc_tier_known_t *k)
{
    found_t **list = arg;
    found_t *f = mc_malloc(sizeof(*f) + klen);
    if (f == NULL)
        return 1;
    f->known = *k;
    f->klen = klen;
    memcpy(f->key, key, klen);
    f->next = *list;
    *list = f;
    return 0;
}

static uint32_t poll_items(const uint8_t *body, size_t len);

/* A poll's answer into the inbox, the worker woken (mu held). MC_ERR_NOMEM:
 * not taken (its requests are voided by their timeout at the master). */
static mc_status_t inbox_put(store_offload_t *o, const void *body, size_t len)
{
    if (mc_buf_append(&o->inbox, body, len) != MC_OK)
        return MC_ERR_NOMEM;
    o->inbox_us = mc_now_us();
    uint64_t one = 1;
    if (write(o->evfd, &one, sizeof(one)) < 0)
        MC_WARN(CLIENT, "offload: eventfd: %s", strerror(errno));
    return MC_OK;
}

/* Tell the master that g offloads, before the scan and the report (seconds
 * on a directory of many files): it learns that from a poll, and until then
 * it evicts g's objects as a node's without offload (dropped). A poll with
 * COUNT 0, not held: the master marks the segment and hands out no work
 * (PERSIST requests of objects evicted meanwhile wait, their memory kept,
 * for the first poll after the report). MC_OK, or why not (the segment not
 * mounted yet, the master away or without offload: the round is tried
 * again, the report not sent). */
static mc_status_t announce(store_offload_t *o, const store_seg_t *g)
{
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    pthread_mutex_lock(&o->mu);
    uint64_t done = o->done_id;
    pthread_mutex_unlock(&o->mu);
    poll_head(&w, o, g, 1, done);
    mc_mp_write_uint(&w, MC_F_COUNT);
    mc_mp_write_uint(&w, 0);
    mc_status_t st =
        w.err != MC_OK ? w.err : store_call_sync(o->s, MC_RPC_OFFLOAD_POLL, &body, &resp);
    if (st == MC_OK && poll_items(mc_buf_head(&resp), mc_buf_used(&resp)) > 0) {
        /* a master older than COUNT 0 (read as "as many as you have"):
         * its requests are ours now, served after the report */
        pthread_mutex_lock(&o->mu);
        if (mc_buf_used(&o->inbox) == 0) /* else they time out at the master */
            inbox_put(o, mc_buf_head(&resp), mc_buf_used(&resp));
        pthread_mutex_unlock(&o->mu);
    }
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    return st;
}

static void off_refused(store_offload_t *o, mc_status_t st)
{
    if (st == MC_ERR_UNAVAILABLE_IN_CURRENT_MODE && !o->off_logged) {
        MC_WARN(CLIENT, "offload: the master has enable_offload off; %s is kept but not used",
                o->dir);
        o->off_logged = 1;
    }
}

/* A file's report refused by the master: the key exists (the file may be
 * of an older put), or was removed (its DELETE not done yet), or the file
 * is no object it takes. The node deletes the file. */
static int report_refused(mc_status_t st)
{
    return st == MC_ERR_OBJECT_ALREADY_EXISTS || st == MC_ERR_OBJECT_NOT_FOUND ||
           st == MC_ERR_INVALID_PARAMS || st == MC_ERR_INVALID_KEY;
}

/* The master's answers to the files fs[0..n) of the start report, in one
 * LDISK_REPORT_BATCH (an LDISK_REPORT per file with a master that does not
 * know it, up to the first that is neither taken nor refused), into st.
 * MC_OK, or why the round stops there (the call failed: no st is set; the
 * files stay and the round is tried again). */
static mc_status_t report_batch(store_offload_t *o, const store_seg_t *g, found_t *const *fs,
                                unsigned n, mc_status_t *st)
{
    fref_t f[OFFLOAD_REPORT_BATCH];
    for (unsigned i = 0; i < n; i++)
        f[i] = (fref_t){fs[i]->key, fs[i]->klen, fs[i]->known.size};
    mc_status_t r = files_call(o, g, MC_RPC_LDISK_REPORT_BATCH, f, n, st, &o->no_report_batch);
    if (r != MC_ERR_NO_METHOD)
        return r; /* a failed call's status is no file's */
    for (unsigned i = 0; i < n; i++) {
        st[i] = call_key(o, g, MC_RPC_LDISK_REPORT, f[i].key, f[i].klen, f[i].size);
        if (st[i] != MC_OK && !report_refused(st[i])) {
            for (unsigned k = i + 1; k < n; k++)
                st[k] = st[i]; /* not sent: the next round */
            break;
        }
    }
    return MC_OK;
}

/* Tell the master g offloads, scan the directory and report every file, a
 * batch of files per call (a call per file: 1.4 s for 10,000 files here,
 * while PERSIST requests wait for the report; batched, about 20 ms besides
 * the scan's 0.3 s: perf/offload_report.sh). 0: try again later. */
static int report_all(store_offload_t *o, const store_seg_t *g)
{
    found_t *list = NULL;
    mc_tier_scan_stats_t ss = {0};
    mc_status_t an = announce(o, g);
    if (an != MC_OK) {
        off_refused(o, an);
        return 0; /* not mounted yet, or the master away or refusing: the next round */
    }
    if (o->report_delay_us > 0)
        usleep((useconds_t)o->report_delay_us);
    uint64_t t0 = mc_now_us();
    /* our directory alone (the lock): temp files are a killed writer's and
     * corrupt files go (a truncated one never becomes an object) */
    mc_status_t st = mc_tier_scan_owned(o->dir, OFFLOAD_SCAN_MAX, on_found, &list, &ss);
    if (st != MC_OK)
        MC_ERROR(CLIENT, "offload: cannot scan %s: %s", o->dir, mc_status_str(st));
    uint64_t t_scan = mc_now_us() - t0;
    uint64_t ok = 0, refused = 0, calls = 0;
    int again = 0;
    found_t *fs[OFFLOAD_REPORT_BATCH];
    mc_status_t rs[OFFLOAD_REPORT_BATCH];
    while (list != NULL && !again) {
        unsigned n = 0;
        size_t bytes = 0;
        while (list != NULL && n < OFFLOAD_REPORT_BATCH &&
               (n == 0 || bytes + list->klen <= OFFLOAD_REPORT_BYTES)) {
            bytes += list->klen;
            fs[n++] = list;
            list = list->next;
        }
        mc_status_t call = report_batch(o, g, fs, n, rs);
        calls += o->no_report_batch ? n : 1;
        for (unsigned i = 0; i < n; i++) {
            found_t *f = fs[i];
            mc_status_t r = call == MC_OK ? rs[i] : call;
            if (r == MC_OK) {
                file_add(o, f->key, f->klen, f->known.size);
                file_know(o, f->key, f->klen, &f->known); /* no header read at its loads */
                ok++;
            } else if (call == MC_OK && report_refused(r)) {
                mc_tier_unlink(o->dir, f->key, f->klen);
                file_forget(o, f->key, f->klen);
                refused++;
            } else if (!again) {
                off_refused(o, r);
                again = 1; /* the master is away or refuses: the rest in the next round */
            }
            mc_free(f);
        }
    }
    while (list != NULL) { /* not sent: the next round scans them again */
        found_t *f = list;
        list = f->next;
        mc_free(f);
    }
    atomic_fetch_add(&o->report_taken, ok);
    atomic_fetch_add(&o->report_refused, refused);
    atomic_fetch_add(&o->report_calls, calls);
    if (again)
        return 0;
    mc_prom_hist_observe_us(&o->report_time, mc_now_us() - t0);
    MC_INFO(CLIENT,
            "offload: %s: %llu objects reported in %llu calls, %llu refused (deleted), %llu "
            "corrupt files deleted, %llu skipped, %llu temp files of an interrupted write "
            "deleted, in %llu ms (the scan %llu ms)",
            o->dir, (unsigned long long)ok, (unsigned long long)calls, (unsigned long long)refused,
            (unsigned long long)ss.bad_removed, (unsigned long long)ss.bad,
            (unsigned long long)ss.temps_removed, (unsigned long long)((mc_now_us() - t0) / 1000),
            (unsigned long long)(t_scan / 1000));
    return 1;
}

/* ------------------------------------------------------------ requests */

/* Make room for size bytes under the quota: least recently used first. */
static int quota_room(store_offload_t *o, const store_seg_t *g, uint64_t size)
{
    if (o->quota == 0)
        return 1;
    if (size > o->quota)
        return 0;
    while (o->bytes + size > o->quota && mc_hmap_count(&o->files) > 0) {
        ofile_t *lru = NULL;
        size_t i;
        mc_hnode_t *n;
        MC_HMAP_FOREACH(&o->files, i, n)
        {
            ofile_t *f = MC_CONTAINER_OF(n, ofile_t, node);
            if (lru == NULL || f->used < lru->used)
                lru = f;
        }
        mc_tier_unlink(o->dir, lru->key, lru->klen);
        call_key(o, g, MC_RPC_LDISK_DROP, lru->key, lru->klen, 0);
        atomic_fetch_add(&o->quota_dropped, 1);
        file_forget(o, lru->key, lru->klen);
    }
    return o->bytes + size <= o->quota;
}

static void persist_failed(store_offload_t *o, const store_seg_t *g, const char *key, size_t klen,
                           uint64_t size, mc_status_t st)
{
    atomic_fetch_add(&o->write_failed, 1);
    MC_WARN(CLIENT, "offload: write of '%.*s' (%llu bytes) failed: %s", (int)klen, key,
            (unsigned long long)size, mc_status_str(st));
    call_done(o, g, key, klen, size, st, 0);
}

static void load_reap(store_offload_t *o, const store_seg_t *g);

/* The master's answers to the batch's committed files, in one
 * OFFLOAD_DONE_BATCH (an OFFLOAD_DONE per file with a master that does not
 * know it), into st (by batch index); MC_ERR_CANCELED each when the call
 * failed. */
static void persist_answer(store_offload_t *o, const store_seg_t *g, mc_status_t *st)
{
    mc_status_t got[OFFLOAD_WRITE_BATCH] = {0};
    fref_t f[OFFLOAD_WRITE_BATCH];
    unsigned n = 0;
    for (unsigned i = 0; i < o->nwb; i++)
        if (o->wb[i].committed)
            f[n++] = (fref_t){o->wb[i].key, o->wb[i].klen, o->wb[i].size};
    mc_status_t r = files_call(o, g, MC_RPC_OFFLOAD_DONE_BATCH, f, n, got, &o->no_done_batch);
    for (unsigned i = 0, k = 0; i < o->nwb; i++) {
        opersist_t *p = &o->wb[i];
        if (!p->committed)
            continue;
        /* a failed call's status is no file's: the files stay (the master
         * times the requests out) */
        st[i] = r == MC_OK              ? got[k]
                : r == MC_ERR_NO_METHOD ? call_done(o, g, p->key, p->klen, p->size, MC_OK, 0)
                                        : MC_ERR_CANCELED;
        k++;
    }
}

/* Sync the batch's files at once (io_uring: one submission, the file system
 * commits them together; without it, one after the other, their writeback
 * started when each was written), then rename each over its name and
 * answer the master. Only a synced file is renamed: a node killed before
 * leaves temp files, which the next scan deletes. */
static void persist_flush(store_offload_t *o, const store_seg_t *g)
{
    for (unsigned i = 0; i < o->nwb; i++) {
        opersist_t *p = &o->wb[i];
        p->sync_errno = 0;
        if (mc_oio_fsync(o->io, p->w.fd, p) == MC_OK)
            o->wsyncing++;
        else if (fsync(p->w.fd) != 0) /* no room in the io queue: here */
            p->sync_errno = errno;
    }
    while (o->wsyncing > 0)
        load_reap(o, g); /* loads in flight complete meanwhile too */
    unsigned ok = 0;
    for (unsigned i = 0; i < o->nwb; i++) {
        opersist_t *p = &o->wb[i];
        /* synced: clean, let go (not where loads read through the page
         * cache too: buffered, or the file system refused O_DIRECT) */
        if (p->sync_errno == 0 && !p->w.direct && !o->buffered && !o->direct_refused)
            (void)posix_fadvise(p->w.fd, 0, 0, POSIX_FADV_DONTNEED);
        mc_status_t st = mc_tier_wcommit(&p->w, p->sync_errno, 0);
        p->committed = st == MC_OK;
        if (st != MC_OK) {
            persist_failed(o, g, p->key, p->klen, p->size, st);
            continue;
        }
        file_add(o, p->key, p->klen, p->size);
        file_know(o, p->key, p->klen, &p->w.known);
        if (p->w.direct)
            atomic_fetch_add(&o->written_direct, 1);
        atomic_fetch_add(&o->written, 1);
        atomic_fetch_add(&o->bytes_written, p->size);
        ok++;
    }
    mc_status_t r[OFFLOAD_WRITE_BATCH] = {0};
    if (ok > 0)
        persist_answer(o, g, r); /* one call for the batch */
    for (unsigned i = 0; i < o->nwb; i++) {
        opersist_t *p = &o->wb[i];
        if (p->committed && r[i] == MC_ERR_OBJECT_NOT_FOUND) {
            /* removed meanwhile (or the request timed out): not an object */
            mc_tier_unlink(o->dir, p->key, p->klen);
            file_forget(o, p->key, p->klen);
        }
    }
    o->nwb = 0;
    o->wb_bytes = 0;
}

/* A PERSIST: write the bytes at segment base + off to a temp file (the
 * batch is synced and answered by persist_flush: when full, before any
 * other request, at the end of the poll's answer). */
static void do_persist(store_offload_t *o, const store_seg_t *g, const char *key, size_t klen,
                       uint64_t size, uint64_t off)
{
    mc_status_t st = MC_OK;
    if (off > g->size || size > g->size - off) {
        st = MC_ERR_INVALID_PARAMS; /* not our memory: never read it */
    } else {
        if (o->quota != 0 && o->nwb > 0 && o->bytes + o->wb_bytes + size > o->quota)
            persist_flush(o, g); /* the quota counts the batch's files first */
        if (!quota_room(o, g, o->wb_bytes + size))
            st = MC_ERR_FILE_WRITE_FAIL;
    }
    opersist_t *p = &o->wb[o->nwb];
    if (st == MC_OK) {
        struct iovec iov = {g->base + off, size};
        /* data at a multiple of MC_TIER_ALIGN: loads read it with O_DIRECT;
         * written through the page cache (dropped once synced:
         * persist_flush), or with offload_direct_writes with O_DIRECT where
         * the file system and the object's place in the segment allow */
        st = mc_tier_wopen(o->dir, key, klen, &iov, 1, size,
                           MC_TIER_F_ALIGNED | (o->direct_writes ? MC_TIER_W_DIRECT : 0), &p->w);
    }
    if (st != MC_OK) {
        persist_failed(o, g, key, klen, size, st);
        return;
    }
    /* buffered: the device writes it while the next ones are copied (a
     * hint: the fsync decides); O_DIRECT: written already, the fsync
     * commits its metadata */
    if (!p->w.direct)
        (void)sync_file_range(p->w.fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    p->key = key;
    p->klen = (uint32_t)klen;
    p->size = size;
    o->nwb++;
    o->wb_bytes += size;
    if (o->nwb == OFFLOAD_WRITE_BATCH || o->wb_bytes >= OFFLOAD_WRITE_BATCH_BYTES)
        persist_flush(o, g);
}

/* ---- LOAD: batched reads (offload_io.h) ---- */

/* An own read is over: its get goes on (on r0) with st, or its caller is
 * told (a sync read's thread). */
static void own_done(oread_t *rd, mc_status_t st)
{
    store_op_t *op = rd->op;
    void (*cb)(void *, mc_status_t) = rd->cb;
    void *arg = rd->arg;
    mc_free(rd);
    if (op == NULL) {
        cb(arg, st);
        return;
    }
    op->wait_st = st;
    store_op_post(op);
}

/* The load is over (read and verified, or failed): answer the master (or,
 * an own read, its get). */
static void load_end(store_offload_t *o, const store_seg_t *g, oload_t *l, uint64_t t_read)
{
    mc_status_t st = l->st;
    uint64_t now = mc_now_us();
    mc_tier_close(&l->f);
    if (st == MC_OK && t_read != 0) { /* read and verified here: its stages */
        mc_prom_hist_observe_us(&o->stage[OSTAGE_HANDOFF],
                                l->t_start > l->t_ans ? l->t_start - l->t_ans : 0);
        mc_prom_hist_observe_us(&o->stage[OSTAGE_OPEN], l->t_queued - l->t_start);
        mc_prom_hist_observe_us(&o->stage[OSTAGE_READ], t_read - l->t_queued);
        mc_prom_hist_observe_us(&o->stage[OSTAGE_VERIFY], now - t_read);
        if (l->t_first >= l->t_queued)
            mc_prom_hist_observe_us(&o->stage[OSTAGE_FIRST], l->t_first - l->t_queued);
    }
    if (st == MC_OK) {
        ofile_t *f = file_find(o, l->key, l->klen, mc_hash64(l->key, l->klen));
        if (f != NULL)
            f->used = ++o->clock;
        if (f != NULL && !f->known) /* the next load opens it without its header */
            file_know(o, l->key, l->klen, &l->f.known);
        atomic_fetch_add(l->rd != NULL ? &o->own_read : &o->loaded, 1);
        atomic_fetch_add(&o->bytes_read, l->size);
        if (l->f.direct)
            atomic_fetch_add(l->rd != NULL ? &o->own_read_direct : &o->loaded_direct, 1);
    } else {
        atomic_fetch_add(l->rd != NULL ? &o->own_read_failed : &o->load_failed, 1);
        if (st == MC_ERR_CHECKSUM_MISMATCH) {
            /* logged by tier.c with the path and why; never served */
            mc_tier_unlink(o->dir, l->key, l->klen);
            file_forget(o, l->key, l->klen);
        }
    }
    l->busy = 0;
    if (l->rd != NULL) {
        own_done(l->rd, st);
        l->rd = NULL;
        return;
    }
    call_done_async(o, g, l->key, l->klen, l->size, st, now, l->id);
}

/* Loads in flight (worker). */
static unsigned loads_busy(const store_offload_t *o)
{
    unsigned n = 0;
    for (unsigned i = 0; i < OFFLOAD_IO_DEPTH; i++)
        n += o->loads[i].busy != 0;
    return n;
}

typedef struct reap_ctx {
    store_offload_t *o;
    const store_seg_t *g;
} reap_ctx_t;

/* Queue l's next pieces, up to its window (OFFLOAD_READ_WINDOW in flight
 * for O_DIRECT; all for buffered); none once it failed. Returns how many. */
static unsigned load_queue(store_offload_t *o, oload_t *l)
{
    unsigned window = l->f.direct ? OFFLOAD_READ_WINDOW : OFFLOAD_PIECES + 1, n = 0;
    while (l->st == MC_OK && !l->redo && l->next < l->nparts && l->parts < window) {
        opart_t *p = &l->part[l->next];
        mc_status_t q =
            p->tail
                ? mc_oio_read(o->io, l->f.fd, l->bounce, MC_TIER_ALIGN, l->f.data_off + p->off, p)
                : mc_oio_read(o->io, l->f.fd, l->dst + p->off, p->len, l->f.data_off + p->off, p);
        if (q != MC_OK) { /* cannot happen: room was checked; not the file's fault */
            l->st = MC_ERR_FILE_READ_FAIL;
            break;
        }
        l->next++;
        l->parts++;
        n++;
    }
    return n;
}

static void load_part_done(void *arg, void *tag, ssize_t res)
{
    reap_ctx_t *c = arg;
    if (tag == NULL) { /* evfd: a poll's answer is in */
        uint64_t v;
        if (read(c->o->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
            MC_WARN(CLIENT, "offload: reading the wake-up eventfd: %s", strerror(errno));
        c->o->watch_armed = 0;
        return;
    }
    uintptr_t w0 = (uintptr_t)c->o->wb;
    if ((uintptr_t)tag - w0 < OFFLOAD_WRITE_BATCH * sizeof(opersist_t)) { /* a batch's fsync */
        ((opersist_t *)tag)->sync_errno = res < 0 ? (int)-res : 0;
        c->o->wsyncing--;
        return;
    }
    opart_t *p = tag;
    oload_t *l = p->l;
    p->done = res >= 0;
    if (res < 0 && l->f.direct && !l->redo) {
        /* O_DIRECT refused this read (alignment the file system wants more
         * of, ...): the whole file once more through the page cache */
        MC_WARN(CLIENT, "offload: O_DIRECT read of '%s' failed: %s; reading it buffered", l->f.path,
                strerror((int)-res));
        l->redo = 1;
    } else if (res < 0 && l->st == MC_OK) {
        MC_ERROR(CLIENT, "offload: reading '%s' failed: %s", l->f.path, strerror((int)-res));
        l->st = MC_ERR_FILE_READ_FAIL;
    } else if (res > 0 && p->tail) {
        p->got = (uint64_t)res < p->len ? (uint64_t)res : p->len;
        memcpy(l->dst + p->off, l->bounce, p->got);
        l->got += p->got;
    } else if (res > 0) {
        p->got = (uint64_t)res;
        l->got += p->got;
    }
    if (l->t_first == 0 && l->part[0].done)
        l->t_first = mc_now_us();
    if (--l->parts == 0 && l->next == l->nparts)
        l->t_in = mc_now_us(); /* the read is over; what is left to hash is the verify stage */
    l->fresh = 1;              /* load_advance, once every completion in is seen */
}

/* After a reap, a load with pieces just in: a waiting reader is told what
 * is ready before it is hashed (it copies while we hash), the pieces in
 * are hashed in order, and a load whose last piece is in is checked and
 * answered. (A device that completes a load's pieces together, as one
 * request, leaves the whole hash after the read: told first, the reader's
 * copy and the hash overlap.) */
static void load_advance(reap_ctx_t *c, oload_t *l)
{
    l->fresh = 0;
    unsigned ready = l->hashed;
    while (ready < l->nparts && l->part[ready].done && l->part[ready].got == l->part[ready].len)
        ready++;
    int ok = l->st == MC_OK && !l->redo;
    if (ok && ready > l->hashed && l->rd == NULL &&
        (c->o->progress_always || loads_busy(c->o) == 1) &&
        (l->parts > 0 || l->part[ready - 1].off + l->part[ready - 1].len - l->part[l->hashed].off >=
                             OFFLOAD_PROGRESS_LAST_MIN)) {
        /* pieces in, the rest still read (or hashed now): a waiting reader
         * may copy them meanwhile (checked once the last is in) */
        const opart_t *h = &l->part[ready - 1];
        load_progress(c->o, c->g, l->key, l->klen, l->size, h->off + h->len, l->id);
    }
    while (ok && l->hashed < ready) {
        opart_t *h = &l->part[l->hashed++];
        mc_hash64_update(&l->hs, l->dst + h->off, h->len);
    }
    if (l->parts > 0)
        return; /* (none: all read, or no more queued after a failure) */
    uint64_t t_read = l->t_in;
    if (c->o->verify_delay_us > 0 && l->st == MC_OK && !l->redo && l->hashed > 0 && l->rd == NULL) {
        /* tests ($MC_OFFLOAD_VERIFY_DELAY_US): every piece read is told
         * before the checksum is checked, which waits that long, so a reader
         * surely copies bytes of a load not verified yet (and a corrupt one
         * must still fail its get) */
        const opart_t *h = &l->part[l->hashed - 1];
        load_progress(c->o, c->g, l->key, l->klen, l->size, h->off + h->len, l->id);
        usleep((useconds_t)c->o->verify_delay_us);
    }
    if (l->redo && l->st == MC_OK) {
        t_read = 0; /* read twice: not timed by stage */
        uint64_t got = 0;
        l->st = mc_tier_read(c->o->dir, l->key, l->klen, l->dst, l->size, l->size, &got);
        l->f.direct = 0;
    } else if (l->st == MC_OK) {
        /* every piece read whole was hashed; one cut short (the file is)
         * left got short: cut short or corrupt, never served */
        l->st = mc_tier_verify_sum(&l->f, l->got, mc_hash64_end(&l->hs));
    }
    load_end(c->o, c->g, l, t_read);
}

/* Wait for at least one read in flight to finish (its load answered when it
 * was the last of it). */
static void load_reap(store_offload_t *o, const store_seg_t *g)
{
    reap_ctx_t c = {o, g};
    if (mc_oio_reap(o->io, load_part_done, &c) == 0)
        return;
    /* the loads' next pieces to the device first, then their hashes */
    unsigned queued = 0;
    for (unsigned i = 0; i < OFFLOAD_IO_DEPTH; i++)
        if (o->loads[i].busy && o->loads[i].fresh)
            queued += load_queue(o, &o->loads[i]);
    if (queued > 0)
        mc_oio_submit(o->io);
    for (unsigned i = 0; i < OFFLOAD_IO_DEPTH; i++)
        if (o->loads[i].busy && o->loads[i].fresh)
            load_advance(&c, &o->loads[i]);
}

/* A free load slot, taken for key (reads reaped until one is free). */
static oload_t *load_take(store_offload_t *o, const store_seg_t *g, const char *key, size_t klen,
                          uint64_t size, uint64_t t_ans)
{
    oload_t *l = NULL;
    for (;;) {
        for (unsigned i = 0; i < OFFLOAD_IO_DEPTH && l == NULL; i++)
            if (!o->loads[i].busy && mc_oio_room(o->io) >= OFFLOAD_PIECES + 1)
                l = &o->loads[i];
        if (l != NULL)
            break;
        load_reap(o, g); /* every slot busy: one finishes first */
    }
    l->busy = 1;
    l->rd = NULL;
    l->id = 0;
    l->t_ans = t_ans;
    l->t_start = mc_now_us();
    l->klen = (uint32_t)(klen < MC_TIER_KEY_MAX ? klen : MC_TIER_KEY_MAX);
    memcpy(l->key, key, l->klen);
    l->size = size;
    l->got = l->body = 0;
    l->parts = l->nparts = l->hashed = l->next = 0;
    l->t_first = l->t_in = 0;
    l->fresh = 0;
    l->redo = 0;
    l->st = MC_OK;
    l->f.fd = -1;
    return l;
}

static void load_read(store_offload_t *o, const store_seg_t *g, oload_t *l);

/* Start reading key's file into segment base + off; answered by
 * load_part_done (or here, when it cannot start). */
static void load_start(store_offload_t *o, const store_seg_t *g, const char *key, size_t klen,
                       uint64_t size, uint64_t off, uint64_t load_id, uint64_t t_ans)
{
    oload_t *l = load_take(o, g, key, klen, size, t_ans);
    l->id = load_id;
    if (off > g->size || size > g->size - off || klen > MC_TIER_KEY_MAX) {
        l->st = MC_ERR_INVALID_PARAMS; /* not our memory: never write there */
        load_end(o, g, l, 0);
        return;
    }
    l->dst = g->base + off;
    load_read(o, g, l);
}

/* Start an own read: the file straight into its get's memory. */
static void own_start(store_offload_t *o, const store_seg_t *g, oread_t *rd)
{
    oload_t *l = load_take(o, g, rd->key, rd->klen, rd->size, rd->t_sub);
    l->rd = rd;
    l->dst = rd->buf;
    load_read(o, g, l);
}

/* Open l's file and queue its pieces' reads into l->dst. */
static void load_read(store_offload_t *o, const store_seg_t *g, oload_t *l)
{
    const char *key = l->key;
    size_t klen = l->klen;
    uint64_t size = l->size;
    int direct = !o->buffered && ((uintptr_t)l->dst % MC_TIER_ALIGN) == 0;
    /* a file written or read here before: no header read (often a device
     * read of its own, the page cache long since dropped it) */
    const ofile_t *of = file_find(o, key, klen, mc_hash64(key, klen));
    l->st = MC_ERR_FILE_NOT_FOUND;
    if (of != NULL && of->known && of->tk.size == size)
        l->st = mc_tier_open_known(o->dir, key, klen, &of->tk, direct, &l->f);
    if (l->st == MC_ERR_FILE_NOT_FOUND) /* not known here (or gone): by its header */
        l->st = mc_tier_open_read(o->dir, key, klen, size, direct, &l->f);
    if (l->st != MC_OK) {
        load_end(o, g, l, 0);
        return;
    }
    if (direct && !l->f.direct && l->f.direct_errno != 0 && !o->direct_refused) {
        MC_WARN(CLIENT,
                "offload: the file system of %s refuses O_DIRECT (%s): loads are read through "
                "the page cache",
                o->dir, strerror(l->f.direct_errno));
        o->direct_refused = 1;
    }
    uint64_t body = l->f.direct ? size / MC_TIER_ALIGN * MC_TIER_ALIGN : size;
    l->body = body;
    /* the pieces: up to OFFLOAD_PIECES of the body (aligned), then the tail */
    uint64_t np = (body + OFFLOAD_PIECE_MIN - 1) / OFFLOAD_PIECE_MIN;
    np = np > OFFLOAD_PIECES ? OFFLOAD_PIECES : np;
    uint64_t psz =
        np == 0 ? 0 : ((body + np - 1) / np + MC_TIER_ALIGN - 1) / MC_TIER_ALIGN * MC_TIER_ALIGN;
    for (uint64_t at = 0; at < body; at += psz)
        l->part[l->nparts++] =
            (opart_t){.l = l, .off = at, .len = body - at < psz ? body - at : psz};
    if (body < size)
        l->part[l->nparts++] = (opart_t){.l = l, .tail = 1, .off = body, .len = size - body};
    mc_hash64_begin(&l->hs);
    load_queue(o, l); /* the first window: the rest as pieces come in (load_reap) */
    l->t_queued = mc_now_us();
    if (l->parts == 0) {
        l->st = MC_ERR_FILE_READ_FAIL;
        load_end(o, g, l, 0);
    }
}

/* Do the requests of a poll's answer: with deletes, its DELETEs only (done
 * before the next poll: the master counts them done when it comes); else
 * the others, PERSIST at once, LOAD started (answered when read). */
static void serve_answer(store_offload_t *o, const store_seg_t *g, const mc_buf_t *resp,
                         uint64_t t_ans, int deletes)
{
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, mc_buf_head(resp), mc_buf_used(resp));
    uint32_t nf = mc_mp_read_map(&r);
    for (uint32_t i = 0; i < nf && r.err == MC_OK; i++) {
        uint64_t id = mc_mp_read_uint(&r);
        if (id != MC_F_ITEMS) {
            mc_mp_skip(&r);
            continue;
        }
        uint32_t n = mc_mp_read_array(&r);
        for (uint32_t k = 0; k < n && r.err == MC_OK && !atomic_load(&o->s->closing); k++) {
            /* op, evict, key, size, offset, and a LOAD's id (a master with load ids) */
            uint32_t ne = mc_mp_read_array(&r);
            if (ne != 5 && ne != 6)
                r.err = MC_ERR_PROTOCOL;
            uint64_t op = mc_mp_read_uint(&r);
            (void)mc_mp_read_bool(&r);
            uint32_t klen = 0;
            const char *key = mc_mp_read_bin(&r, &klen);
            uint64_t size = mc_mp_read_uint(&r);
            uint64_t off = mc_mp_read_uint(&r);
            uint64_t load_id = ne == 6 ? mc_mp_read_uint(&r) : 0;
            if (r.err != MC_OK || klen == 0)
                break;
            if (deletes != (op == MC_MASTER_OFFLOAD_DELETE))
                continue; /* the other pass's */
            if (op != MC_MASTER_OFFLOAD_PERSIST && o->nwb > 0)
                persist_flush(o, g); /* the batch's files first: requests in order */
            if (op == MC_MASTER_OFFLOAD_PERSIST) {
                do_persist(o, g, key, klen, size, off);
            } else if (op == MC_MASTER_OFFLOAD_LOAD) {
                load_start(o, g, key, klen, size, off, load_id, t_ans); /* answered when read */
            } else if (op == MC_MASTER_OFFLOAD_DELETE) {
                if (mc_tier_unlink(o->dir, key, klen) == MC_OK)
                    atomic_fetch_add(&o->deleted, 1);
                file_forget(o, key, klen);
            }
        }
    }
    if (o->nwb > 0)
        persist_flush(o, g); /* the keys are in resp */
    if (r.err != MC_OK && !deletes)
        MC_WARN(CLIENT, "offload: malformed poll answer from the master");
}

/* Wait wait_us unless stopped (mu held; o->cv's other wake-ups, an own
 * read's say, do not cut it short). */
static void timed_wait(store_offload_t *o, uint64_t wait_us)
{
    struct timespec ts = mc_timespec_in(CLOCK_MONOTONIC, wait_us);
    while (!o->stop && pthread_cond_timedwait(&o->cv, &o->mu, &ts) != ETIMEDOUT) {
    }
}

/* The requests in a poll's answer (its ITEMS), 0 when none (or not one). */
static uint32_t poll_items(const uint8_t *body, size_t len)
{
    mc_mp_reader_t r;
    if (!answer_field(&r, body, len, MC_F_ITEMS))
        return 0;
    uint32_t n = mc_mp_read_array(&r);
    return r.err == MC_OK ? n : 0;
}

/* r0: a poll's answer. An answer goes into the inbox here and wakes the
 * worker (evfd, cv) at once: the poller thread is not in its way. */
static void poll_answered(void *arg, const mc_rpc_resp_t *resp)
{
    store_offload_t *o = arg;
    mc_status_t st = resp->status;
    if (st == MC_ERR_NOT_LEADER || st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT ||
        st == MC_ERR_SOCKET)
        store_master_trouble(o->s); /* look for the leader (with discovery) */
    pthread_mutex_lock(&o->mu);
    if (st == MC_OK)
        st = inbox_put(o, resp->body, resp->body_len);
    o->poll_st = st;
    o->poll_work = st == MC_OK && poll_items(resp->body, resp->body_len) > 0;
    o->poll_out = 0;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static void poll_on_r0(mc_reactor_t *r, void *arg, mc_status_t st)
{
    (void)r;
    store_offload_t *o = arg;
    mc_store_t *s = o->s;
    if (st == MC_OK)
        st = s->mcli == NULL
                 ? MC_ERR_CONN_CLOSED
                 : mc_rpc_call(s->mcli, MC_RPC_OFFLOAD_POLL, mc_buf_head(&o->poll_body),
                               mc_buf_used(&o->poll_body), s->cfg.rpc_timeout_us, poll_answered, o);
    if (st != MC_INPROGRESS)
        poll_answered(o, &(mc_rpc_resp_t){.status = st != MC_OK ? st : MC_ERR_STATE});
}

/* The poller: one held OFFLOAD_POLL after another (the master answers as
 * soon as there is work, or empty after OFFLOAD_HOLD_US), sent from r0,
 * whose answer goes to the worker (inbox, evfd) before the next poll: a new
 * LOAD reaches the node while its reads are in flight, without a timer.
 * This thread only paces them (one out at a time, after the worker took
 * the last answer; retries). */
static void *poller(void *arg)
{
    store_offload_t *o = arg;
    mc_store_t *s = o->s;
    uint64_t hold =
        s->cfg.rpc_timeout_us / 2 < OFFLOAD_HOLD_US ? s->cfg.rpc_timeout_us / 2 : OFFLOAD_HOLD_US;
    for (;;) {
        pthread_mutex_lock(&o->mu);
        while (!o->stop && (!o->reported || mc_buf_used(&o->inbox) > 0 || o->deleting))
            pthread_cond_wait(&o->cv, &o->mu); /* the worker's turn */
        int stop = o->stop;
        uint64_t done = o->done_id;
        pthread_mutex_unlock(&o->mu);
        store_seg_t *g = first_seg(s);
        if (stop || g == NULL || atomic_load(&s->closing))
            break;
        mc_buf_reset(&o->poll_body);
        mc_mp_writer_t w;
        mc_mp_writer_init(&w, &o->poll_body);
        poll_head(&w, o, g, 3, done);
        mc_mp_write_uint(&w, MC_F_COUNT);
        mc_mp_write_uint(&w, OFFLOAD_POLL_BATCH);
        mc_mp_write_uint(&w, MC_F_LOAD_ID); /* we take load ids: name them in our answers */
        mc_mp_write_uint(&w, 1);
        mc_mp_write_uint(&w, MC_F_WAIT_US); /* answered as soon as there is work */
        mc_mp_write_uint(&w, hold > 0 ? hold : 1);
        uint64_t t0 = mc_now_us();
        pthread_mutex_lock(&o->mu);
        o->poll_out = w.err == MC_OK;
        o->poll_st = w.err;
        pthread_mutex_unlock(&o->mu);
        if (w.err == MC_OK && mc_reactor_call(s->r0, poll_on_r0, o) != MC_OK) {
            pthread_mutex_lock(&o->mu);
            o->poll_out = 0;
            o->poll_st = MC_ERR_CANCELED; /* r0 stops */
            pthread_mutex_unlock(&o->mu);
        }
        pthread_mutex_lock(&o->mu);
        while (o->poll_out) /* its answer refers to o: wait for it, stopping or not */
            pthread_cond_wait(&o->cv, &o->mu);
        mc_status_t st = o->poll_st;
        if (st == MC_OK) {
            /* an answer that came early and empty: a master that does not
             * hold. (One with work comes early whenever work is queued,
             * and the next poll goes at once: a LOAD asked for right after
             * it must not wait out a pause, 2 ms that a depth-1 reader
             * of page-cached files spent in each get.) */
            if (!o->stop && !o->poll_work && mc_now_us() - t0 < hold / 10) {
                atomic_fetch_add(&o->poll_pauses, 1);
                timed_wait(o, OFFLOAD_IDLE_US);
            }
        } else {
            if (st == MC_ERR_SEGMENT_NOT_FOUND || st == MC_ERR_ILLEGAL_CLIENT) {
                o->reported = 0; /* forgotten: the worker reports again once re-mounted */
                pthread_cond_broadcast(&o->cv);
            }
            if (st == MC_ERR_UNAVAILABLE_IN_CURRENT_MODE && !o->off_logged) {
                MC_WARN(CLIENT, "offload: the master has enable_offload off; %s is not used",
                        o->dir);
                o->off_logged = 1;
            }
            if (!o->stop)
                timed_wait(o, OFFLOAD_RETRY_US);
        }
        pthread_mutex_unlock(&o->mu);
    }
    return NULL;
}

/* The worker: the directory's report, then the poller's answers and the
 * loads' reads. It waits in the io queue while reads are in flight (the
 * evfd wakes it for a new answer) and on o->cv otherwise. */
/* Fail the own reads not started (mu not held): their gets ask for a LOAD. */
static void own_fail_queued(store_offload_t *o, mc_status_t st)
{
    mc_list_t q;
    mc_list_init(&q);
    pthread_mutex_lock(&o->mu);
    for (mc_list_t *n; (n = mc_list_pop_head(&o->reads)) != NULL;)
        mc_list_push_tail(&q, n);
    pthread_mutex_unlock(&o->mu);
    for (mc_list_t *n; (n = mc_list_pop_head(&q)) != NULL;)
        own_done(MC_CONTAINER_OF(n, oread_t, node), st);
}

static void *worker(void *arg)
{
    store_offload_t *o = arg;
    mc_store_t *s = o->s;
    mc_buf_t ans = MC_BUF_INIT;
    uint64_t ans_us = 0;
    mc_list_t reads; /* own reads taken */
    mc_list_init(&reads);
    for (;;) {
        store_seg_t *g = first_seg(s);
        pthread_mutex_lock(&o->mu);
        int stop = o->stop, reported = o->reported, took = 0;
        if (g != NULL && reported && mc_buf_used(&o->inbox) > 0) {
            ans_us = o->inbox_us;
            mc_buf_t t = o->inbox;
            o->inbox = ans;
            ans = t;
            took = 1;
            o->deleting = 1; /* the poller polls again once its DELETEs are done */
        }
        for (mc_list_t *n; g != NULL && reported && (n = mc_list_pop_head(&o->reads)) != NULL;) {
            mc_list_push_tail(&reads, n);
            took = 1;
        }
        pthread_mutex_unlock(&o->mu);
        if (o->deleting) { /* (only this thread sets it) */
            uint64_t id = 0;
            if (!stop) {
                serve_answer(o, g, &ans, ans_us, 1);
                id = answer_id(mc_buf_head(&ans), mc_buf_used(&ans));
            }
            pthread_mutex_lock(&o->mu);
            if (id != 0)
                o->done_id = id; /* the next poll says so */
            o->deleting = 0;
            pthread_cond_broadcast(&o->cv); /* the poller polls again */
            pthread_mutex_unlock(&o->mu);
        }
        if (stop)
            break;
        if (g == NULL || !reported)
            own_fail_queued(o, MC_ERR_STATE); /* not serving now: the master's way */
        if (g == NULL) {
            pthread_mutex_lock(&o->mu);
            if (!o->stop)
                timed_wait(o, OFFLOAD_IDLE_US * 5); /* not mounted yet */
            pthread_mutex_unlock(&o->mu);
            continue;
        }
        if (!reported) {
            while (mc_oio_pending(o->io) > 0)
                load_reap(o, g); /* the loads answered first */
            int ok = report_all(o, g);
            pthread_mutex_lock(&o->mu);
            o->reported = ok;
            pthread_cond_broadcast(&o->cv); /* the poller starts */
            if (!ok && !o->stop)
                timed_wait(o, OFFLOAD_RETRY_US);
            pthread_mutex_unlock(&o->mu);
            continue;
        }
        if (took) {
            if (mc_buf_used(&ans) > 0)
                serve_answer(o, g, &ans, ans_us, 0);
            mc_buf_reset(&ans);
            for (mc_list_t *n; (n = mc_list_pop_head(&reads)) != NULL;)
                own_start(o, g, MC_CONTAINER_OF(n, oread_t, node));
        }
        if (mc_oio_pending(o->io) > 0) {
            if (!o->watch_armed && mc_oio_watch(o->io, o->evfd, NULL) == MC_OK)
                o->watch_armed = 1;
            load_reap(o, g); /* a read finished, or an answer came in */
        } else if (!took) {
            pthread_mutex_lock(&o->mu);
            while (!o->stop && o->reported && mc_buf_used(&o->inbox) == 0 &&
                   mc_list_empty(&o->reads))
                pthread_cond_wait(&o->cv, &o->mu);
            pthread_mutex_unlock(&o->mu);
        }
    }
    store_seg_t *g = first_seg(s);
    while (mc_oio_pending(o->io) > 0 && g != NULL)
        load_reap(o, g); /* no read may land in memory after close */
    for (mc_list_t *n; (n = mc_list_pop_head(&reads)) != NULL;)
        own_done(MC_CONTAINER_OF(n, oread_t, node), MC_ERR_CANCELED);
    own_fail_queued(o, MC_ERR_CANCELED);
    mc_buf_fini(&ans);
    return NULL;
}

void store_offload_announce(mc_store_t *s)
{
    store_offload_t *o = s->offload;
    store_seg_t *g = first_seg(s);
    if (o != NULL && g != NULL && s->reg == STORE_REGISTERED)
        (void)announce(o, g); /* refused or failed: the worker's report tells it */
}

/* ------------------------------------------------------------ open/close */

/* The directory's identity: read from its .disk_id (32 hex digits and a
 * newline), or made at random and written there (synced, renamed into
 * place) at its first use, or when that file is garbled (logged: DELETEs
 * the master kept for the old identity no longer find this node). One
 * that cannot be read or written (an I/O error, a full or read-only file
 * system) leaves the node without one (logged): it starts, and the master
 * knows it by its segment's name only. The lock is held. */
static void disk_id_load(store_offload_t *o)
{
    static const char without[] =
        "this node runs without a directory identity (the master knows it by its segment's "
        "name only: deletions kept for it do not follow it to another port)";
    char p[4200], tmp[4200], hex[2 * DISK_ID_LEN + 2];
    snprintf(p, sizeof(p), "%s/.disk_id", o->dir);
    o->has_disk_id = 0;
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = pread(fd, hex, sizeof(hex), 0);
        int err = errno;
        close(fd);
        if ((n == 2 * DISK_ID_LEN || (n == 2 * DISK_ID_LEN + 1 && hex[2 * DISK_ID_LEN] == '\n')) &&
            mc_auth_unhex(hex, 2 * DISK_ID_LEN, o->disk_id, DISK_ID_LEN) == 0) {
            o->has_disk_id = 1;
            return;
        }
        if (n < 0) {
            MC_WARN(CLIENT, "offload: cannot read %s: %s; %s", p, strerror(err), without);
            return;
        }
        MC_WARN(CLIENT,
                "offload: %s does not hold 32 hex digits (the directory's identity): a new one is "
                "made (deletions the master kept for this directory's node under the old one "
                "are not found)",
                p);
    } else if (errno != ENOENT) {
        MC_WARN(CLIENT, "offload: cannot open %s: %s; %s", p, strerror(errno), without);
        return;
    }
    if (getrandom(o->disk_id, DISK_ID_LEN, 0) != DISK_ID_LEN) {
        MC_WARN(CLIENT, "offload: no random bytes for %s: %s; %s", p, strerror(errno), without);
        return;
    }
    mc_auth_hex(o->disk_id, DISK_ID_LEN, hex);
    hex[2 * DISK_ID_LEN] = '\n';
    snprintf(tmp, sizeof(tmp), "%s/.disk_id.new", o->dir);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int ok =
        fd >= 0 && write(fd, hex, 2 * DISK_ID_LEN + 1) == 2 * DISK_ID_LEN + 1 && fsync(fd) == 0;
    if (fd >= 0)
        close(fd);
    ok = ok && rename(tmp, p) == 0;
    int dfd = ok ? open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    ok = ok && dfd >= 0 && fsync(dfd) == 0;
    if (dfd >= 0)
        close(dfd);
    if (!ok) {
        MC_WARN(CLIENT, "offload: cannot write %s: %s; %s", p, strerror(errno), without);
        (void)unlink(tmp);
        return;
    }
    o->has_disk_id = 1;
}

/* The directory exists (made if its parent does), is ours (the lock), and
 * takes files. Logged with what is wrong. */
static mc_status_t open_dir(store_offload_t *o)
{
    if (mkdir(o->dir, 0700) != 0 && errno != EEXIST) {
        MC_ERROR(CLIENT, "offload: cannot create the offload directory %s: %s", o->dir,
                 strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    char p[4200];
    snprintf(p, sizeof(p), "%s/.lock", o->dir);
    o->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (o->lock_fd < 0) {
        MC_ERROR(CLIENT, "offload: the offload directory %s is not writable: %s: %s", o->dir, p,
                 strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    if (flock(o->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char who[64] = "";
        ssize_t n = pread(o->lock_fd, who, sizeof(who) - 1, 0);
        who[n > 0 ? n : 0] = '\0';
        who[strcspn(who, "\n")] = '\0';
        MC_ERROR(CLIENT,
                 "offload: the offload directory %s is in use by another node (%s holds %s); "
                 "every node needs a directory of its own",
                 o->dir, who[0] ? who : "unknown", p);
        return MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    char me[64];
    int n = snprintf(me, sizeof(me), "pid %d\n", (int)getpid());
    if (ftruncate(o->lock_fd, 0) != 0 || pwrite(o->lock_fd, me, (size_t)n, 0) != n) {
        MC_ERROR(CLIENT, "offload: the offload directory %s is not writable: %s", o->dir,
                 strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    disk_id_load(o);
    return MC_OK;
}

mc_status_t store_offload_open(mc_store_t *s, const char *dir, uint64_t quota,
                               uint64_t segment_size, int buffered, int direct_writes)
{
    if (dir == NULL || dir[0] == '\0')
        return MC_OK;
    if (dir[0] != '/' || strlen(dir) >= sizeof(((store_offload_t *)0)->dir) - 300) {
        MC_ERROR(CLIENT, "offload_dir '%s': an absolute path (under 3800 bytes) is needed", dir);
        return MC_ERR_INVALID_ARGUMENT;
    }
    if (segment_size == 0) {
        MC_ERROR(CLIENT, "offload_dir needs a segment (global_segment_size > 0): offload keeps "
                         "objects of this node's own segment");
        return MC_ERR_INVALID_ARGUMENT;
    }
    store_offload_t *o = MC_NEW(store_offload_t);
    if (o == NULL)
        return MC_ERR_NOMEM;
    o->s = s;
    o->lock_fd = -1;
    o->quota = quota;
    o->buffered = buffered;
    o->direct_writes = !buffered && direct_writes;
    /* progressive loads: by default told only for a load alone in flight
     * (with others in flight the device is busy anyway, and on a 2-CPU VM
     * the extra calls and copies cost more than they saved at depth 4:
     * perf/results/offload_progressive.txt); MC_OFFLOAD_PROGRESS=0: never,
     * 1: always */
    const char *pe = getenv("MC_OFFLOAD_PROGRESS");
    o->no_progress = pe != NULL && strcmp(pe, "0") == 0;
    o->progress_always = pe != NULL && strcmp(pe, "1") == 0;
    const char *rd = getenv("MC_OFFLOAD_REPORT_DELAY_US"); /* tests: a long scan */
    o->report_delay_us = rd != NULL ? strtoull(rd, NULL, 10) : 0;
    if (o->report_delay_us > 5000000)
        o->report_delay_us = 5000000;
    const char *vd = getenv("MC_OFFLOAD_VERIFY_DELAY_US");
    o->verify_delay_us = vd != NULL ? strtoull(vd, NULL, 10) : 0;
    if (o->verify_delay_us > 2000000)
        o->verify_delay_us = 2000000;
    /* own reads: by default; MC_OFFLOAD_OWN_READS=0: never (comparisons) */
    const char *ow = getenv("MC_OFFLOAD_OWN_READS");
    o->no_own_reads = ow != NULL && strcmp(ow, "0") == 0;
    /* MC_OFFLOAD_REPORT_BATCH=0: the start report a call per file, as to an
     * older master (comparisons: perf/offload_report.sh) */
    const char *rb = getenv("MC_OFFLOAD_REPORT_BATCH");
    o->no_report_batch = rb != NULL && strcmp(rb, "0") == 0;
    mc_list_init(&o->reads);
    snprintf(o->dir, sizeof(o->dir), "%s", dir);
    mc_status_t st = mc_hmap_init(&o->files, 1024);
    if (st != MC_OK) {
        mc_free(o);
        return st;
    }
    /* the loads' slots and their O_DIRECT bounce blocks: no allocation per load */
    o->loads = mc_calloc(OFFLOAD_IO_DEPTH, sizeof(*o->loads));
    o->wb = mc_calloc(OFFLOAD_WRITE_BATCH, sizeof(*o->wb));
    o->bounces = aligned_alloc(MC_TIER_ALIGN, (size_t)OFFLOAD_IO_DEPTH * MC_TIER_ALIGN);
    if (o->loads == NULL || o->wb == NULL || o->bounces == NULL ||
        mc_oio_create(OFFLOAD_IO_DEPTH * (OFFLOAD_PIECES + 1) + OFFLOAD_WRITE_BATCH, &o->io) !=
            MC_OK) {
        mc_free(o->loads);
        mc_free(o->wb);
        free(o->bounces);
        mc_hmap_fini(&o->files);
        mc_free(o);
        return MC_ERR_NOMEM;
    }
    for (unsigned i = 0; i < OFFLOAD_IO_DEPTH; i++) {
        o->loads[i].bounce = o->bounces + (size_t)i * MC_TIER_ALIGN;
        o->loads[i].f.fd = -1;
    }
    o->inbox = (mc_buf_t)MC_BUF_INIT;
    o->poll_body = (mc_buf_t)MC_BUF_INIT;
    o->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&o->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->offload = o;
    st = o->evfd < 0 ? MC_ERR_NOMEM : open_dir(o);
    if (st == MC_OK && pthread_create(&o->th, NULL, worker, o) != 0)
        st = MC_ERR_NOMEM;
    o->started = st == MC_OK;
    if (st == MC_OK && pthread_create(&o->poller_th, NULL, poller, o) != 0)
        st = MC_ERR_NOMEM;
    o->poller_started = st == MC_OK;
    if (st != MC_OK) {
        store_offload_free(s);
        return st;
    }
    MC_INFO(
        CLIENT,
        "offload: node-local offload to %s (quota %llu bytes, 0 = none); loads read with %s%s%s, "
        "loads %s, writes %s",
        o->dir, (unsigned long long)quota, mc_oio_kind(o->io), mc_oio_why_not(o->io)[0] ? ": " : "",
        mc_oio_why_not(o->io),
        buffered ? "buffered (offload_buffered_io)" : "O_DIRECT where the file system allows",
        buffered           ? "buffered"
        : o->direct_writes ? "O_DIRECT where the file system allows (offload_direct_writes)"
                           : "buffered, synced, then dropped from the page cache");
    return MC_OK;
}

void store_offload_close(mc_store_t *s)
{
    store_offload_t *o = s->offload;
    if (o == NULL)
        return;
    pthread_mutex_lock(&o->mu);
    o->stop = 1; /* own reads are refused from now on */
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    uint64_t one = 1;
    if (o->evfd >= 0 && write(o->evfd, &one, sizeof(one)) < 0)
        MC_WARN(CLIENT, "offload: eventfd: %s", strerror(errno)); /* the worker's io wait */
    if (o->poller_started)
        pthread_join(o->poller_th, NULL); /* its held poll returns within OFFLOAD_HOLD_US */
    o->poller_started = 0;
    if (o->started)
        pthread_join(o->th, NULL); /* own reads queued or in flight: answered CANCELED */
    o->started = 0;
    pthread_mutex_lock(&o->mu);
    while (o->dones_out > 0) /* answers on r0 refer to o */
        pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
}

void store_offload_free(mc_store_t *s)
{
    store_offload_t *o = s->offload;
    if (o == NULL)
        return;
    store_offload_close(s); /* stopped already, unless open failed */
    mc_buf_fini(&o->inbox);
    mc_buf_fini(&o->poll_body);
    if (o->evfd >= 0)
        close(o->evfd);
    size_t i;
    mc_hnode_t *n, *next;
    for (i = 0; i <= o->files.mask; i++)
        for (n = o->files.buckets[i]; n != NULL; n = next) {
            next = n->next;
            mc_free(MC_CONTAINER_OF(n, ofile_t, node));
        }
    mc_hmap_fini(&o->files);
    mc_oio_destroy(o->io);
    mc_free(o->loads);
    mc_free(o->wb);
    free(o->bounces);
    if (o->lock_fd >= 0)
        close(o->lock_fd); /* releases the lock */
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    s->offload = NULL;
    mc_free(o);
}

void store_offload_stats(mc_store_t *s, store_offload_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    store_offload_t *o = s->offload;
    if (o == NULL)
        return;
    out->written = atomic_load(&o->written);
    out->write_failed = atomic_load(&o->write_failed);
    out->loaded = atomic_load(&o->loaded);
    out->load_failed = atomic_load(&o->load_failed);
    out->deleted = atomic_load(&o->deleted);
    out->quota_dropped = atomic_load(&o->quota_dropped);
    out->bytes_written = atomic_load(&o->bytes_written);
    out->bytes_read = atomic_load(&o->bytes_read);
    out->loaded_direct = atomic_load(&o->loaded_direct);
    out->written_direct = atomic_load(&o->written_direct);
    out->own_read = atomic_load(&o->own_read);
    out->own_read_direct = atomic_load(&o->own_read_direct);
    out->own_read_failed = atomic_load(&o->own_read_failed);
    out->poll_pauses = atomic_load(&o->poll_pauses);
    out->reported = atomic_load(&o->report_taken);
    out->report_refused = atomic_load(&o->report_refused);
    out->report_calls = atomic_load(&o->report_calls);
}

int store_offload_own_segment(mc_store_t *s, mc_uuid_t *seg_id)
{
    store_offload_t *o = s->offload;
    if (o == NULL || o->no_own_reads)
        return 0;
    pthread_mutex_lock(&o->mu);
    int on = o->reported && !o->stop;
    pthread_mutex_unlock(&o->mu);
    store_seg_t *g = on ? first_seg(s) : NULL;
    if (g == NULL)
        return 0;
    *seg_id = g->id;
    return 1;
}

/* Queue an own read for the worker, answered by own_done (store_offload_read_op's
 * statuses). */
static mc_status_t read_queue(mc_store_t *s, store_op_t *op, void (*cb)(void *, mc_status_t),
                              void *arg, const void *key, size_t klen, void *buf, uint64_t size)
{
    store_offload_t *o = s->offload;
    if (o == NULL || klen == 0 || klen > MC_TIER_KEY_MAX)
        return MC_ERR_NOT_SUPPORTED;
    oread_t *rd = mc_malloc(sizeof(*rd) + klen);
    if (rd == NULL)
        return MC_ERR_NOMEM;
    rd->op = op;
    rd->cb = cb;
    rd->arg = arg;
    rd->buf = buf;
    rd->size = size;
    rd->klen = (uint32_t)klen;
    memcpy(rd->key, key, klen);
    rd->t_sub = mc_now_us();
    pthread_mutex_lock(&o->mu);
    int ok = o->reported && !o->stop;
    if (ok) {
        mc_list_push_tail(&o->reads, &rd->node);
        pthread_cond_broadcast(&o->cv); /* the worker, waiting on cv */
    }
    pthread_mutex_unlock(&o->mu);
    if (!ok) {
        mc_free(rd);
        return MC_ERR_STATE;
    }
    uint64_t one = 1; /* the worker, waiting in the io queue */
    if (write(o->evfd, &one, sizeof(one)) < 0)
        MC_WARN(CLIENT, "offload: eventfd: %s", strerror(errno));
    return MC_OK;
}

mc_status_t store_offload_read_op(store_op_t *op, const void *key, size_t klen, void *buf,
                                  uint64_t size)
{
    return read_queue(op->s, op, NULL, NULL, key, klen, buf, size);
}

mc_status_t store_offload_read_sync(mc_store_t *s, const void *key, size_t klen, void *buf,
                                    uint64_t size)
{
    store_waiter_t w;
    store_waiter_init(&w);
    mc_status_t st = read_queue(s, NULL, store_waiter_status_cb, &w, key, klen, buf, size);
    if (st != MC_OK) /* not queued: answered here */
        store_waiter_status_cb(&w, st);
    return (mc_status_t)store_waiter_wait(&w); /* (and destroys it) */
}

void store_offload_metrics(mc_store_t *s, mc_buf_t *b)
{
    store_offload_t *o = s->offload;
    if (o == NULL)
        return;
    static const char name[] = "mooncake_store_offload_load_stage_seconds";
    mc_prom_hist_stages(
        b, name,
        "Time of this node's loads and own reads (disk-only objects read for readers) by "
        "stage: handoff (the master's answer, or the own read's get, to the worker), open (the "
        "file and its header), "
        "read (io_uring, the device, and the hash of the pieces read before the last), "
        "verify (the checksum left once the last piece is in), answer (to the master); "
        "first (inside read: to the first piece in).",
        stage_names, o->stage, OSTAGE_N);
    static const char rname[] = "mooncake_store_offload_report_seconds";
    mc_prom_head(b, rname, "histogram",
                 "Time of this node's complete start reports: the offload directory's scan and "
                 "the calls that report its files to the master.");
    mc_prom_hist_write(b, rname, "", &o->report_time);
}
