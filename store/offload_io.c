/*
 * offload_io.c - batched file reads: io_uring when built with liburing and
 * the kernel allows it, pread otherwise (store/offload_io.h).
 */
#include "store/offload_io.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef MC_HAVE_URING
#include <liburing.h>
#endif

#include "util/log.h"
#include "util/mem.h"

typedef struct oio_req {
    int fd;
    uint8_t *buf;
    size_t len, done; /* done: bytes read so far (short reads are continued) */
    uint64_t off;
    void *tag;
    int fsync;  /* an fsync of fd, not a read */
    int busy;   /* the slot is queued or in flight */
    int queued; /* pread mode: waiting for mc_oio_reap */
} oio_req_t;

struct mc_oio {
    unsigned depth, used;
    oio_req_t *reqs;
    oio_req_t watch; /* mc_oio_watch's poll (not counted in used) */
    int ring_ok;
    char why[160]; /* why not io_uring ("" when it is) */
#ifdef MC_HAVE_URING
    struct io_uring ring;
#endif
};

mc_status_t mc_oio_create(unsigned depth, mc_oio_t **out)
{
    if (depth == 0 || depth > 256)
        return MC_ERR_INVALID_PARAMS;
    mc_oio_t *io = MC_NEW(mc_oio_t);
    if (io == NULL)
        return MC_ERR_NOMEM;
    io->reqs = mc_calloc(depth, sizeof(*io->reqs));
    if (io->reqs == NULL) {
        mc_free(io);
        return MC_ERR_NOMEM;
    }
    io->depth = depth;
#ifdef MC_HAVE_URING
    int rc = io_uring_queue_init(depth, &io->ring, 0);
    if (rc == 0)
        io->ring_ok = 1;
    else
        snprintf(io->why, sizeof(io->why), "io_uring_queue_init: %s", strerror(-rc));
#else
    snprintf(io->why, sizeof(io->why), "built without liburing");
#endif
    *out = io;
    return MC_OK;
}

void mc_oio_destroy(mc_oio_t *io)
{
    if (io == NULL)
        return;
#ifdef MC_HAVE_URING
    if (io->ring_ok) {
        while (io->used > 0) {
            /* reads in flight write into their memory: wait for them */
            struct io_uring_cqe *cqe;
            if (io_uring_wait_cqe(&io->ring, &cqe) != 0)
                break;
            if (io_uring_cqe_get_data(cqe) != &io->watch)
                io->used--;
            io_uring_cqe_seen(&io->ring, cqe);
        }
        io_uring_queue_exit(&io->ring);
    }
#endif
    mc_free(io->reqs);
    mc_free(io);
}

const char *mc_oio_kind(const mc_oio_t *io)
{
    return io->ring_ok ? "io_uring" : "pread";
}

const char *mc_oio_why_not(const mc_oio_t *io)
{
    return io->why;
}

unsigned mc_oio_room(const mc_oio_t *io)
{
    return io->depth - io->used;
}

unsigned mc_oio_pending(const mc_oio_t *io)
{
    return io->used;
}

#ifdef MC_HAVE_URING
/* Submit (the rest of) r's read. 0, or -errno (no sqe: cannot happen with
 * one per slot and depth entries). */
static int ring_prep(mc_oio_t *io, oio_req_t *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    if (sqe == NULL)
        return -EBUSY;
    if (r->fsync)
        io_uring_prep_fsync(sqe, r->fd, 0);
    else
        io_uring_prep_read(sqe, r->fd, r->buf + r->done, (unsigned)(r->len - r->done),
                           r->off + r->done);
    io_uring_sqe_set_data(sqe, r);
    return 0;
}
#endif

/* Queue req (a read or an fsync) in a free slot: MC_OK, or MC_ERR_LIMIT (no
 * room). With io_uring its sqe is prepared now (submitted by mc_oio_reap);
 * without, mc_oio_reap runs it. */
static mc_status_t queue(mc_oio_t *io, const oio_req_t *req)
{
    if (io->used == io->depth)
        return MC_ERR_LIMIT;
    oio_req_t *r = NULL;
    for (unsigned i = 0; i < io->depth && r == NULL; i++)
        if (!io->reqs[i].busy)
            r = &io->reqs[i];
    *r = *req;
    r->busy = 1;
#ifdef MC_HAVE_URING
    if (io->ring_ok && ring_prep(io, r) != 0) {
        r->busy = 0;
        return MC_ERR_LIMIT;
    }
#endif
    r->queued = !io->ring_ok;
    io->used++;
    return MC_OK;
}

mc_status_t mc_oio_read(mc_oio_t *io, int fd, void *buf, size_t len, uint64_t off, void *tag)
{
    if (len > 0x7ffff000u)
        return MC_ERR_INVALID_PARAMS; /* one read(2) at most */
    return queue(io, &(oio_req_t){.fd = fd, .buf = buf, .len = len, .off = off, .tag = tag});
}

mc_status_t mc_oio_fsync(mc_oio_t *io, int fd, void *tag)
{
    return queue(io, &(oio_req_t){.fd = fd, .tag = tag, .fsync = 1});
}

mc_status_t mc_oio_watch(mc_oio_t *io, int fd, void *tag)
{
    if (!io->ring_ok)
        return MC_ERR_NOT_SUPPORTED;
    if (io->watch.busy)
        return MC_ERR_STATE;
#ifdef MC_HAVE_URING
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    if (sqe == NULL)
        return MC_ERR_LIMIT;
    io_uring_prep_poll_add(sqe, fd, POLLIN);
    io_uring_sqe_set_data(sqe, &io->watch);
    io->watch = (oio_req_t){.fd = fd, .tag = tag, .busy = 1};
    return MC_OK;
#else
    (void)fd;
    (void)tag;
    return MC_ERR_NOT_SUPPORTED;
#endif
}

static void finish(mc_oio_t *io, oio_req_t *r, ssize_t res, mc_oio_done_t done, void *arg)
{
    void *tag = r->tag;
    r->busy = 0;
    r->queued = 0;
    io->used--;
    done(arg, tag, res);
}

/* pread mode: the oldest queued read, whole. */
static unsigned reap_pread(mc_oio_t *io, mc_oio_done_t done, void *arg)
{
    for (unsigned i = 0; i < io->depth; i++) {
        oio_req_t *r = &io->reqs[i];
        if (!r->busy || !r->queued)
            continue;
        ssize_t res = 0;
        if (r->fsync) {
            finish(io, r, fsync(r->fd) == 0 ? 0 : -errno, done, arg);
            return 1;
        }
        while (r->done < r->len) {
            ssize_t n = pread(r->fd, r->buf + r->done, r->len - r->done, (off_t)(r->off + r->done));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                res = -errno;
                break;
            }
            if (n == 0)
                break;
            r->done += (size_t)n;
        }
        finish(io, r, res < 0 ? res : (ssize_t)r->done, done, arg);
        return 1;
    }
    return 0;
}

void mc_oio_submit(mc_oio_t *io)
{
#ifdef MC_HAVE_URING
    if (!io->ring_ok)
        return;
    int rc = io_uring_submit(&io->ring);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
        MC_ERROR(CLIENT, "offload: io_uring_submit: %s", strerror(-rc)); /* the next reap tries */
#else
    (void)io;
#endif
}

unsigned mc_oio_reap(mc_oio_t *io, mc_oio_done_t done, void *arg)
{
    if (io->used == 0)
        return 0;
    if (!io->ring_ok)
        return reap_pread(io, done, arg);
#ifdef MC_HAVE_URING
    unsigned n = 0;
    for (;;) {
        int rc = io_uring_submit_and_wait(&io->ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            MC_ERROR(CLIENT, "offload: io_uring_submit_and_wait: %s", strerror(-rc));
            return n; /* the reads stay in flight; the next reap tries again */
        }
        struct io_uring_cqe *cqe;
        int again = 0;
        while (io_uring_peek_cqe(&io->ring, &cqe) == 0) {
            oio_req_t *r = io_uring_cqe_get_data(cqe);
            int res = cqe->res;
            io_uring_cqe_seen(&io->ring, cqe);
            if (r == &io->watch) { /* its fd is readable (or the poll failed) */
                r->busy = 0;
                done(arg, r->tag, res);
                n++;
                continue;
            }
            if (res == -EINTR || res == -EAGAIN) {
                again |= ring_prep(io, r) == 0;
                continue;
            }
            ssize_t out = res;
            if (!r->fsync && res >= 0) { /* a read: its bytes so far */
                r->done += (size_t)res;
                if (res > 0 && r->done < r->len) { /* short: the rest (0 next time: the end) */
                    again |= ring_prep(io, r) == 0;
                    continue;
                }
                out = (ssize_t)r->done;
            }
            finish(io, r, out, done, arg);
            n++;
        }
        if (n > 0 || io->used == 0 || (!again && rc < 0))
            return n;
    }
#else
    return 0;
#endif
}
