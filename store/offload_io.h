/*
 * offload_io.h - batched file reads and fsyncs for the node-local offload
 * worker (store/client_offload.c): the only wrapper of liburing.
 *
 * A queue of reads (file, offset, length, memory) that run together: with
 * io_uring (built with liburing and allowed by the kernel) every queued read
 * is submitted in one io_uring_enter and they complete in any order; without
 * it (no liburing at build time, or io_uring_queue_init refused: an old
 * kernel, a seccomp filter) each read is a plain pread when it is reaped.
 * Short reads are continued until the length or the end of the file; a
 * read's result is the bytes read (< length only at the end of the file) or
 * -errno. A descriptor can be watched too (mc_oio_watch), so a thread that
 * waits for its reads also wakes when, say, an eventfd is written.
 *
 * One thread at a time (the worker's). Reads of O_DIRECT descriptors need
 * their offset, length and memory aligned as the file system says (the
 * caller's business: tier files with MC_TIER_F_ALIGNED, MC_TIER_ALIGN).
 */
#ifndef MC_STORE_OFFLOAD_IO_H
#define MC_STORE_OFFLOAD_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mooncake/status.h"

typedef struct mc_oio mc_oio_t;

/* A queue of at most depth reads in flight (1..256). MC_OK (*out set; with
 * io_uring or without, mc_oio_kind says), MC_ERR_INVALID_PARAMS, MC_ERR_NOMEM. */
mc_status_t mc_oio_create(unsigned depth, mc_oio_t **out);
/* Waits for the reads in flight first. Safe on NULL. */
void mc_oio_destroy(mc_oio_t *io);

/* "io_uring" or "pread", and why not io_uring ("" when it is). */
const char *mc_oio_kind(const mc_oio_t *io);
const char *mc_oio_why_not(const mc_oio_t *io);

/* Room for more reads (depth minus those queued or in flight). */
unsigned mc_oio_room(const mc_oio_t *io);

/* Queue a read of len bytes at off of fd into buf, tagged tag (returned
 * when it completes). MC_OK, MC_ERR_LIMIT (no room: reap first). Nothing is
 * submitted before mc_oio_reap. */
mc_status_t mc_oio_read(mc_oio_t *io, int fd, void *buf, size_t len, uint64_t off, void *tag);

/* Queue an fsync of fd, tagged tag; its result is 0 or -errno. With
 * io_uring the fsyncs queued together run at once (the file system commits
 * them together); without, one after the other at mc_oio_reap. MC_OK,
 * MC_ERR_LIMIT (no room). */
mc_status_t mc_oio_fsync(mc_oio_t *io, int fd, void *tag);

/* Submit what is queued now, without waiting (mc_oio_reap submits too):
 * reads queued between reaps reach the device before the caller goes on
 * to other work. Nothing in pread mode (its reads run at mc_oio_reap). */
void mc_oio_submit(mc_oio_t *io);

typedef void (*mc_oio_done_t)(void *arg, void *tag, ssize_t result);

/* Submit what is queued, wait for at least one read to complete (none
 * when nothing is queued or in flight), and call done for every completed
 * read. Returns how many completed. */
unsigned mc_oio_reap(mc_oio_t *io, mc_oio_done_t done, void *arg);

/* Also wake mc_oio_reap when fd becomes readable: done gets tag (once: arm
 * it again after). Not counted in pending; the reads must keep their own
 * tags distinct from it. MC_OK, MC_ERR_NOT_SUPPORTED (pread mode: reap never
 * waits there anyway), MC_ERR_STATE (armed already). */
mc_status_t mc_oio_watch(mc_oio_t *io, int fd, void *tag);

/* Reads queued or in flight. */
unsigned mc_oio_pending(const mc_oio_t *io);

#endif /* MC_STORE_OFFLOAD_IO_H */
