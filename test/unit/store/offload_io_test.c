/*
 * store/offload_io.c: queued reads complete with the file's bytes (also
 * when more are queued than run at once, in any order), a read past the end
 * of the file is short, a bad descriptor fails that read alone, and the
 * queue refuses more than its depth; a watched eventfd wakes the reap;
 * fsyncs queued among them complete with their own results. Runs on io_uring when the
 * build has liburing and the kernel allows it, else on pread (printed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "store/offload_io.h"

#define FILE_SIZE (1u << 20)
#define PIECE (64u << 10)

typedef struct seen {
    int n;
    ssize_t res[64];
    int order[64];
} seen_t;

static void on_done(void *arg, void *tag, ssize_t res)
{
    seen_t *s = arg;
    int i = (int)(intptr_t)tag;
    s->res[i] = res;
    s->order[s->n++] = i;
}

static void reads_complete_with_the_files_bytes(void **state)
{
    (void)state;
    char path[] = "/tmp/offload_io_test.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    uint8_t *data = malloc(FILE_SIZE), *out = malloc(FILE_SIZE + PIECE);
    assert_non_null(data);
    assert_non_null(out);
    for (size_t i = 0; i < FILE_SIZE; i++)
        data[i] = (uint8_t)(i * 31 + (i >> 12));
    assert_int_equal(write(fd, data, FILE_SIZE), FILE_SIZE);

    mc_oio_t *io = NULL;
    assert_int_equal(mc_oio_create(0, &io), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oio_create(257, &io), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oio_create(4, &io), MC_OK);
    print_message("offload_io: %s %s\n", mc_oio_kind(io), mc_oio_why_not(io));
    memset(out, 0, FILE_SIZE + PIECE);
    seen_t s = {0};
    /* 16 pieces through a queue of 4: reap as room is needed */
    unsigned n = FILE_SIZE / PIECE;
    for (unsigned i = 0; i < n; i++) {
        while (mc_oio_room(io) == 0)
            assert_true(mc_oio_reap(io, on_done, &s) > 0);
        assert_int_equal(mc_oio_read(io, fd, out + (size_t)i * PIECE, PIECE, (uint64_t)i * PIECE,
                                     (void *)(intptr_t)i),
                         MC_OK);
    }
    assert_int_equal(mc_oio_room(io), 0);
    assert_int_equal(mc_oio_read(io, fd, out, 1, 0, (void *)(intptr_t)63), MC_ERR_LIMIT);
    while (mc_oio_pending(io) > 0)
        mc_oio_reap(io, on_done, &s);
    assert_int_equal(mc_oio_reap(io, on_done, &s), 0); /* nothing in flight: no wait */
    assert_int_equal(s.n, (int)n);
    for (unsigned i = 0; i < n; i++)
        assert_int_equal(s.res[i], PIECE);
    assert_memory_equal(out, data, FILE_SIZE);

    /* a read across the end is short; one on a closed descriptor fails alone */
    memset(&s, 0, sizeof(s));
    assert_int_equal(mc_oio_read(io, fd, out, PIECE, FILE_SIZE - 100, (void *)(intptr_t)0), MC_OK);
    assert_int_equal(mc_oio_read(io, 12345, out + PIECE, 10, 0, (void *)(intptr_t)1), MC_OK);
    assert_int_equal(mc_oio_read(io, fd, out + 2 * PIECE, 10, FILE_SIZE + 10, (void *)(intptr_t)2),
                     MC_OK);
    while (mc_oio_pending(io) > 0)
        mc_oio_reap(io, on_done, &s);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.res[0], 100);
    assert_memory_equal(out, data + FILE_SIZE - 100, 100);
    assert_int_equal(s.res[1], -EBADF);
    assert_int_equal(s.res[2], 0);

    /* a watched eventfd wakes a reap that waits for a read */
    int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    assert_true(efd >= 0);
    mc_status_t w = mc_oio_watch(io, efd, (void *)(intptr_t)7);
    if (w == MC_OK) {
        assert_int_equal(mc_oio_watch(io, efd, (void *)(intptr_t)7), MC_ERR_STATE);
        uint64_t one = 1;
        assert_int_equal(write(efd, &one, sizeof(one)), sizeof(one));
        memset(&s, 0, sizeof(s));
        assert_int_equal(mc_oio_read(io, fd, out, PIECE, 0, (void *)(intptr_t)1), MC_OK);
        for (int k = 0; k < 1000 && (mc_oio_pending(io) > 0 || s.n < 2); k++)
            mc_oio_reap(io, on_done, &s);
        assert_int_equal(s.n, 2);
        assert_true(s.res[7] > 0); /* POLLIN */
        assert_int_equal(s.res[1], PIECE);
        assert_int_equal(mc_oio_pending(io), 0); /* the watch is not a read */
    } else {
        assert_int_equal(w, MC_ERR_NOT_SUPPORTED); /* pread mode */
    }
    close(efd);

    /* fsyncs queued with a read: each its own result, a bad descriptor's
     * alone */
    memset(&s, 0, sizeof(s));
    assert_int_equal(mc_oio_fsync(io, fd, (void *)(intptr_t)0), MC_OK);
    assert_int_equal(mc_oio_fsync(io, 12345, (void *)(intptr_t)1), MC_OK);
    assert_int_equal(mc_oio_read(io, fd, out, PIECE, PIECE, (void *)(intptr_t)2), MC_OK);
    assert_int_equal(mc_oio_fsync(io, fd, (void *)(intptr_t)3), MC_OK);
    assert_int_equal(mc_oio_fsync(io, fd, (void *)(intptr_t)4), MC_ERR_LIMIT); /* depth 4 */
    while (mc_oio_pending(io) > 0)
        mc_oio_reap(io, on_done, &s);
    assert_int_equal(s.n, 4);
    assert_int_equal(s.res[0], 0);
    assert_int_equal(s.res[1], -EBADF);
    assert_int_equal(s.res[2], PIECE);
    assert_memory_equal(out, data + PIECE, PIECE);
    assert_int_equal(s.res[3], 0);
    mc_oio_destroy(io);
    mc_oio_destroy(NULL);
    close(fd);
    free(data);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_complete_with_the_files_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
