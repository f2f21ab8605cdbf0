/*
 * tier.h - the persistent (SSD / shared file system) tier's files: where an
 * object's file lives, what is in it, and the blocking calls that write,
 * read, delete and scan them. Used by the master (startup scan, deletions)
 * and by the store client (writes and reads, on its tier worker thread).
 *
 * Layout. Every object is one file under the tier directory
 * D = <root_fs_dir>/<cluster_id>:
 *
 *     D/<h1>/<h2>/<name>[~<n>]
 *
 * h = XXH3-64 (seed 0) of the key bytes (mc_hash64, stable across hosts and
 * versions); h1 = two lowercase hex digits of bits 56..63 of h, h2 of bits
 * 48..55 (256 x 256 fan-out directories, created on demand). <name> is the
 * key escaped byte by byte: [A-Za-z0-9_-] and '.' (except as the first byte)
 * stay, every other byte becomes %XX (uppercase hex). So a name has no '/',
 * no NUL, is never "." or "..", never starts with '.' (temp files do) and
 * decodes back to the key: two keys never share a name. If the escaped key
 * is longer than MC_TIER_NAME_KEEP bytes, <name> is its first
 * MC_TIER_NAME_KEEP bytes (not cutting an escape) + '~' + 16 hex digits of
 * h: at most 217 bytes, under NAME_MAX (255). A literal '~' never appears in
 * an escaped key, so such names cannot equal a short key's name. Two long
 * keys with the same prefix and the same 64-bit hash would share a name:
 * the header holds the full key, readers compare it, and writers then use
 * the first free suffix "~1".."~7" (probe n). Case-only differences give
 * different names and, almost always, different hash directories; on a
 * case-insensitive file system the header check and the suffixes keep
 * them apart too.
 *
 * File format (little endian), MC_TIER_HDR_FIXED bytes, the key, the data:
 *
 *     0  magic "MCKVTIER"          8 bytes
 *     8  version (1)               u16
 *    10  header length (48)        u16
 *    12  key length (1..4096)      u32
 *    16  data size (> 0)           u64
 *    24  data checksum             u64   XXH3-64 of the data
 *    32  flags                     u64   bit 0: MC_TIER_F_ALIGNED; others 0
 *    40  header checksum           u64   XXH3-64 of bytes 0..39 and the key
 *    48  key, then data (MC_TIER_F_ALIGNED: zeroes up to the next multiple
 *        of MC_TIER_ALIGN, then the data, so it can be read with O_DIRECT)
 *
 * Writes are atomic: a temp file ".tmp-<pid>-<n>" in the leaf directory,
 * pwritev, fsync, rename over the final name; with sync_dir the directory
 * is fsynced too, so the rename itself survives a crash (eager puts). A
 * reader therefore sees a whole old file or a whole new one, never a torn
 * one. mc_tier_read uses plain pread: one file per object, read once,
 * sequentially, from a worker thread. The node-local offload opens files
 * with mc_tier_open_read and reads them itself, several at once through
 * io_uring, with O_DIRECT for MC_TIER_F_ALIGNED files
 * (store/client_offload.c).
 *
 * Threads: every function is reentrant; they block (file I/O).
 */
#ifndef MC_STORE_TIER_H
#define MC_STORE_TIER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "mooncake/status.h"

#define MC_TIER_MAGIC "MCKVTIER"
#define MC_TIER_VERSION 1
#define MC_TIER_HDR_FIXED 48
#define MC_TIER_KEY_MAX 4096
/* Escaped key bytes kept in a file name before the hash takes over. */
#define MC_TIER_NAME_KEEP 200
/* Collision suffixes: probes 0 (none) .. MC_TIER_PROBES - 1. */
#define MC_TIER_PROBES 8
/* "hh/hh/" + name + "~n" + NUL */
#define MC_TIER_REL_MAX 232

/* The file name of key (no directories, probe 0) into out (room >=
 * MC_TIER_REL_MAX); returns its length. */
size_t mc_tier_name(const void *key, size_t klen, char *out);

/* "h1/h2/name[~probe]" of key into out (room >= MC_TIER_REL_MAX); returns
 * its length. */
size_t mc_tier_rel_path(const void *key, size_t klen, unsigned probe, char *out);

typedef struct mc_tier_hdr {
    uint32_t key_len;
    uint64_t size;
    uint64_t checksum;  /* of the data */
    unsigned flags;     /* MC_TIER_F_* */
    uint64_t data_off;  /* where the data starts in the file */
    const uint8_t *key; /* inside the decoded bytes */
} mc_tier_hdr_t;

/* Header flag: the data starts at a multiple of MC_TIER_ALIGN (node-local
 * offload files, read with O_DIRECT). */
#define MC_TIER_F_ALIGNED 1u
#define MC_TIER_ALIGN 4096u
/* A writer's flag (mc_tier_wopen; never in a header): write an
 * MC_TIER_F_ALIGNED file with O_DIRECT, its data straight from the caller's
 * memory, when that is one piece aligned to MC_TIER_ALIGN and the file
 * system allows it (else as without: through the page cache). */
#define MC_TIER_W_DIRECT 0x100u

/* Where the data of a file with a key of klen bytes and these flags starts. */
uint64_t mc_tier_data_off(size_t klen, unsigned flags);
/* mc_tier_hdr_encode with flags (out: room >= mc_tier_data_off(klen, flags);
 * the padding is zeroed); returns the data offset. */
size_t mc_tier_hdr_encode_flags(const void *key, size_t klen, uint64_t size, uint64_t checksum,
                                unsigned flags, uint8_t *out);

/* Write the header of (key, size, checksum) into out (room >=
 * MC_TIER_HDR_FIXED + klen); returns the bytes written (= the data offset). */
size_t mc_tier_hdr_encode(const void *key, size_t klen, uint64_t size, uint64_t checksum,
                          uint8_t *out);

/* Decode the first n bytes of a file. MC_OK (*h set, pointing into p),
 * MC_ERR_CHECKSUM_MISMATCH (not a tier file, unknown version, bad lengths,
 * header checksum wrong, or cut short: *why says which). */
mc_status_t mc_tier_hdr_decode(const uint8_t *p, size_t n, mc_tier_hdr_t *h, const char **why);

/* Write key's file under dir (the tier directory) with the data in iov (size
 * bytes in all), atomically, replacing the key's file (also a corrupt one:
 * logged). sync_dir: also fsync the directory after the rename. MC_OK, MC_ERR_INVALID_KEY,
 * MC_ERR_FILE_WRITE_FAIL (logged with the path and errno), MC_ERR_REPLICA_ALREADY_EXISTS (every
 * probe holds another key: logged). */
mc_status_t mc_tier_write(const char *dir, const void *key, size_t klen, const struct iovec *iov,
                          size_t iovcnt, uint64_t size, int sync_dir);

/* mc_tier_write with header flags (MC_TIER_F_ALIGNED). */
mc_status_t mc_tier_write_flags(const char *dir, const void *key, size_t klen,
                                const struct iovec *iov, size_t iovcnt, uint64_t size, int sync_dir,
                                unsigned flags);

/* What opens a file again without reading its header (mc_tier_open_known):
 * set by mc_tier_wopen (the file it writes) and mc_tier_open_read (the file
 * it opened). */
typedef struct mc_tier_known {
    unsigned probe; /* which of the key's names (mc_tier_rel_path) */
    unsigned flags; /* the header's: MC_TIER_F_ALIGNED */
    uint64_t size, checksum;
} mc_tier_known_t;

/* mc_tier_write_flags in steps, for a writer that syncs several files at
 * once (the node-local offload's batches): mc_tier_wopen writes key's file
 * to a temp file, not synced (MC_OK: w->fd open; else as mc_tier_write, and
 * nothing is left); the caller syncs w->fd (fsync, or io_uring's) and gives
 * mc_tier_wcommit the sync's errno (0: synced): it closes the file and
 * renames it over key's name (sync_dir: and fsyncs the directory); on a
 * failed sync, close or rename the temp file is deleted (MC_ERR_FILE_WRITE_FAIL,
 * logged with the path). mc_tier_wabort deletes a temp file not committed.
 * A node killed in between leaves only the temp file: never read as an
 * object, deleted by the next scan. */
typedef struct mc_tier_wfile {
    int fd;
    char path[4096 + MC_TIER_REL_MAX]; /* the key's file */
    char tmp[4096 + MC_TIER_REL_MAX];  /* the temp file being written */
    mc_tier_known_t known;             /* the file once committed */
    int direct;                        /* written with O_DIRECT (MC_TIER_W_DIRECT) */
} mc_tier_wfile_t;
mc_status_t mc_tier_wopen(const char *dir, const void *key, size_t klen, const struct iovec *iov,
                          size_t iovcnt, uint64_t size, unsigned flags, mc_tier_wfile_t *w);
mc_status_t mc_tier_wcommit(mc_tier_wfile_t *w, int sync_errno, int sync_dir);
void mc_tier_wabort(mc_tier_wfile_t *w);

/* Read key's data into buf (room bytes). expect: the size the master
 * reported, 0 = any. *size receives the data size. MC_OK,
 * MC_ERR_FILE_NOT_FOUND, MC_ERR_CHECKSUM_MISMATCH (corrupt header or data,
 * or a size other than expect: logged with the path; the bytes in buf are
 * then not to be used), MC_ERR_BUFFER_OVERFLOW (room too small: *size set),
 * MC_ERR_FILE_READ_FAIL. */
mc_status_t mc_tier_read(const char *dir, const void *key, size_t klen, void *buf, uint64_t room,
                         uint64_t expect, uint64_t *size);

/* A file opened for reading by the caller's own I/O (the node-local
 * offload's batched io_uring reads): read size bytes at data_off from fd,
 * then mc_tier_verify, then mc_tier_close. */
typedef struct mc_tier_file {
    int fd;
    int direct;       /* fd has O_DIRECT: offsets, lengths and memory aligned to MC_TIER_ALIGN */
    int direct_errno; /* wanted O_DIRECT, the file system refused it (open's errno), or 0 */
    uint64_t size, checksum, data_off;
    mc_tier_known_t known; /* to open it again (mc_tier_open_known) */
    char path[4096 + MC_TIER_REL_MAX];
} mc_tier_file_t;

/* Open key's file (header and key checked; a file shorter than its header
 * says is corrupt). expect as mc_tier_read. want_direct: with O_DIRECT when
 * the file is MC_TIER_F_ALIGNED and the file system allows it (f->direct
 * says; else buffered). MC_OK (f->fd open), MC_ERR_FILE_NOT_FOUND,
 * MC_ERR_CHECKSUM_MISMATCH (logged with the path), MC_ERR_FILE_OPEN_FAIL,
 * MC_ERR_FILE_READ_FAIL, MC_ERR_NOMEM. */
mc_status_t mc_tier_open_read(const char *dir, const void *key, size_t klen, uint64_t expect,
                              int want_direct, mc_tier_file_t *f);
/* Open key's file as k says it is, without reading its header: for a
 * directory no other process writes (a node's own offload directory, held
 * by its lock file), where k came from this process's own mc_tier_wopen or
 * mc_tier_open_read of the file. Saves the header's read (a device read
 * when the page cache no longer holds it). The header is not checked: the
 * data read is checked against k->checksum (mc_tier_verify_sum), so a file
 * changed since is never served. want_direct as mc_tier_open_read. MC_OK
 * (f->fd open), MC_ERR_FILE_NOT_FOUND (gone), MC_ERR_CHECKSUM_MISMATCH
 * (shorter than k says: logged), MC_ERR_FILE_OPEN_FAIL, MC_ERR_INVALID_PARAMS. */
mc_status_t mc_tier_open_known(const char *dir, const void *key, size_t klen,
                               const mc_tier_known_t *k, int want_direct, mc_tier_file_t *f);
/* The got bytes read into buf are f's whole data with its checksum: MC_OK,
 * or MC_ERR_CHECKSUM_MISMATCH (logged with the path: never to be used). */
mc_status_t mc_tier_verify(const mc_tier_file_t *f, const void *buf, uint64_t got);
/* The same for a reader that hashed the data itself as it came in (pieces
 * read at once, hashed in order: mc_hash64_stream_t): got bytes were read,
 * sum is mc_hash64 of the f->size bytes of data (not used when got is
 * short). MC_OK, or MC_ERR_CHECKSUM_MISMATCH (logged with the path). */
mc_status_t mc_tier_verify_sum(const mc_tier_file_t *f, uint64_t got, uint64_t sum);
void mc_tier_close(mc_tier_file_t *f);

/* Delete key's file (the probe whose header holds key, or a corrupt file in
 * the way). MC_OK (also when there was none), MC_ERR_FILE_WRITE_FAIL. */
mc_status_t mc_tier_unlink(const char *dir, const void *key, size_t klen);

/* Return non-zero to stop. key is borrowed for the call; k is the file as
 * its header and name say (size: the object's; the whole record opens it
 * again without its header, mc_tier_open_known). */
typedef int (*mc_tier_scan_cb_t)(void *arg, const void *key, size_t klen, const mc_tier_known_t *k);

typedef struct mc_tier_scan_stats {
    uint64_t files;         /* object files reported */
    uint64_t bad;           /* files skipped: unreadable, corrupt header, misplaced */
    uint64_t temps;         /* temp files seen and left (younger than MC_TIER_TEMP_MAX_AGE_S) */
    uint64_t temps_removed; /* older temp files deleted (their writer is gone) */
    uint64_t bad_removed;   /* corrupt files deleted (mc_tier_scan_owned) */
    int truncated;          /* stopped at max */
} mc_tier_scan_stats_t;

/* Temp files older than this (seconds) are a crashed writer's: a scan
 * deletes them. */
#define MC_TIER_TEMP_MAX_AGE_S 3600

/* Every object file under dir (headers only: data is checked on read; a
 * file shorter than its header says is skipped as corrupt), at most max;
 * stale temp files are deleted on the way. MC_OK (also for a missing dir:
 * nothing reported), MC_ERR_FILE_OPEN_FAIL (dir exists but cannot be listed). */
mc_status_t mc_tier_scan(const char *dir, uint64_t max, mc_tier_scan_cb_t cb, void *arg,
                         mc_tier_scan_stats_t *stats);
/* The same for a directory no other process writes (a node's own offload
 * directory, held by its lock file): every temp file is a dead writer's and
 * goes, and corrupt files (bad header, cut short) are deleted (counted in
 * bad_removed, logged) instead of skipped. */
mc_status_t mc_tier_scan_owned(const char *dir, uint64_t max, mc_tier_scan_cb_t cb, void *arg,
                               mc_tier_scan_stats_t *stats);

/* Both read the headers of MC_TIER_SCAN_THREADS leaf directories at once
 * (threads of their own: a header not cached is a device read, and a
 * device serves several at once); the callback is called on the caller's
 * thread alone, in no set order. mc_tier_scan_n: with threads of them (1:
 * one after another, on the caller's thread; at most
 * MC_TIER_SCAN_THREADS_MAX), of a directory owned or not. */
#define MC_TIER_SCAN_THREADS 16
#define MC_TIER_SCAN_THREADS_MAX 64
mc_status_t mc_tier_scan_n(const char *dir, uint64_t max, unsigned threads, int owned,
                           mc_tier_scan_cb_t cb, void *arg, mc_tier_scan_stats_t *stats);

#endif /* MC_STORE_TIER_H */
