/*
 * tier.c - the persistent tier's file names, file format and file I/O. See
 * tier.h for the layout and the format.
 */
#include "store/tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

/* Room for a full path: the tier directory + '/' + the relative path. */
#define PATH_ROOM (PATH_MAX + MC_TIER_REL_MAX)
/* Room for a header with its key and its padding (MC_TIER_F_ALIGNED). */
#define HEAD_ROOM (MC_TIER_HDR_FIXED + MC_TIER_KEY_MAX + MC_TIER_ALIGN)

/* ------------------------------------------------------------- names */

static int keeps(unsigned char c, size_t pos)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '-')
        return 1;
    return c == '.' && pos > 0; /* a leading '.' would allow ".", ".." and hidden names */
}

size_t mc_tier_name(const void *key, size_t klen, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *k = key;
    size_t o = 0, i = 0;
    for (; i < klen; i++) {
        size_t w = keeps(k[i], i) ? 1 : 3;
        if (o + w > MC_TIER_NAME_KEEP)
            break;
        if (w == 1) {
            out[o++] = (char)k[i];
        } else {
            out[o++] = '%';
            out[o++] = hex[k[i] >> 4];
            out[o++] = hex[k[i] & 15];
        }
    }
    if (i < klen)
        o += (size_t)snprintf(out + o, 18, "~%016llx", (unsigned long long)mc_hash64(key, klen));
    out[o] = '\0';
    return o;
}

size_t mc_tier_rel_path(const void *key, size_t klen, unsigned probe, char *out)
{
    uint64_t h = mc_hash64(key, klen);
    int n = snprintf(out, 8, "%02x/%02x/", (unsigned)(h >> 56), (unsigned)((h >> 48) & 0xff));
    size_t o = (size_t)n;
    o += mc_tier_name(key, klen, out + o);
    if (probe > 0)
        o += (size_t)snprintf(out + o, 4, "~%u", probe % 10);
    return o;
}

/* ------------------------------------------------------------- header */

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t hdr_sum(const uint8_t *fixed, const void *key, size_t klen)
{
    struct iovec iov[2] = {{(void *)(uintptr_t)fixed, 40}, {(void *)(uintptr_t)key, klen}};
    return mc_hash64_iov(iov, 2);
}

uint64_t mc_tier_data_off(size_t klen, unsigned flags)
{
    uint64_t off = MC_TIER_HDR_FIXED + (uint64_t)klen;
    if (flags & MC_TIER_F_ALIGNED)
        off = (off + MC_TIER_ALIGN - 1) / MC_TIER_ALIGN * MC_TIER_ALIGN;
    return off;
}

size_t mc_tier_hdr_encode_flags(const void *key, size_t klen, uint64_t size, uint64_t checksum,
                                unsigned flags, uint8_t *out)
{
    memcpy(out, MC_TIER_MAGIC, 8);
    put16(out + 8, MC_TIER_VERSION);
    put16(out + 10, MC_TIER_HDR_FIXED);
    put32(out + 12, (uint32_t)klen);
    put64(out + 16, size);
    put64(out + 24, checksum);
    put64(out + 32, flags & MC_TIER_F_ALIGNED);
    put64(out + 40, hdr_sum(out, key, klen));
    memcpy(out + MC_TIER_HDR_FIXED, key, klen);
    size_t n = (size_t)mc_tier_data_off(klen, flags);
    memset(out + MC_TIER_HDR_FIXED + klen, 0, n - MC_TIER_HDR_FIXED - klen); /* padding */
    return n;
}

size_t mc_tier_hdr_encode(const void *key, size_t klen, uint64_t size, uint64_t checksum,
                          uint8_t *out)
{
    return mc_tier_hdr_encode_flags(key, klen, size, checksum, 0, out);
}

mc_status_t mc_tier_hdr_decode(const uint8_t *p, size_t n, mc_tier_hdr_t *h, const char **why)
{
    const char *w = NULL;
    if (n < MC_TIER_HDR_FIXED)
        w = "shorter than the header";
    else if (memcmp(p, MC_TIER_MAGIC, 8) != 0)
        w = "bad magic (not a tier file)";
    else if (get16(p + 8) != MC_TIER_VERSION)
        w = "unknown version";
    else if (get16(p + 10) != MC_TIER_HDR_FIXED)
        w = "bad header length";
    else if (get32(p + 12) == 0 || get32(p + 12) > MC_TIER_KEY_MAX)
        w = "bad key length";
    else if (n < MC_TIER_HDR_FIXED + (size_t)get32(p + 12))
        w = "cut short inside the key";
    else if (get64(p + 16) == 0)
        w = "data size 0";
    else if ((get64(p + 32) & ~(uint64_t)MC_TIER_F_ALIGNED) != 0)
        w = "unknown flags";
    else if (hdr_sum(p, p + MC_TIER_HDR_FIXED, get32(p + 12)) != get64(p + 40))
        w = "header checksum mismatch";
    if (w != NULL) {
        if (why != NULL)
            *why = w;
        return MC_ERR_CHECKSUM_MISMATCH;
    }
    h->key_len = get32(p + 12);
    h->size = get64(p + 16);
    h->checksum = get64(p + 24);
    h->flags = (unsigned)get64(p + 32);
    h->data_off = mc_tier_data_off(h->key_len, h->flags);
    h->key = p + MC_TIER_HDR_FIXED;
    return MC_OK;
}

/* ------------------------------------------------------------- file I/O */

static int full_path(const char *dir, const void *key, size_t klen, unsigned probe, char *out)
{
    size_t dl = strlen(dir);
    if (dl + 1 + MC_TIER_REL_MAX > PATH_ROOM)
        return -1;
    memcpy(out, dir, dl);
    out[dl] = '/';
    mc_tier_rel_path(key, klen, probe, out + dl + 1);
    return 0;
}

/* Read the header (and key) of an open file into buf (room >=
 * MC_TIER_HDR_FIXED + MC_TIER_KEY_MAX): its first block at once (the fixed
 * part and any key up to 4048 bytes: one system call, where a scan of many
 * files paid two), the rest of a longer key after. Returns bytes read (the
 * header and key, or fewer when the file is shorter) or -1 (errno). */
static ssize_t read_head(int fd, uint8_t *buf)
{
    size_t got = 0, want = MC_TIER_ALIGN, keyed = 0;
    while (got < want) {
        ssize_t r = pread(fd, buf + got, want - got, (off_t)got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
        if (!keyed && got >= MC_TIER_HDR_FIXED) {
            keyed = 1;
            uint32_t kl = get32(buf + 12);
            want = memcmp(buf, MC_TIER_MAGIC, 8) == 0 && kl <= MC_TIER_KEY_MAX
                       ? MC_TIER_HDR_FIXED + kl
                       : MC_TIER_HDR_FIXED;
        }
    }
    return (ssize_t)(got < want ? got : want);
}

/* Open probe after probe until the file holding key: returns its fd (its
 * header in head, decoded into *h), its path and its probe (*probe); -1 with
 * *st = FILE_NOT_FOUND (no file holds key; *probe = the first missing probe,
 * or MC_TIER_PROBES), CHECKSUM_MISMATCH (a corrupt file at path, its probe in
 * *probe: whose it is cannot be told, but a short key's name is its key's alone, and a long
 * key's shares a 64-bit hash and 200 bytes of key, so it is taken as the
 * key's own: readers refuse it, writers replace it, unlink deletes it), or
 * another error. */
static int open_key(const char *dir, const void *key, size_t klen, uint8_t *head, mc_tier_hdr_t *h,
                    char *path, unsigned *probe, mc_status_t *st)
{
    *probe = MC_TIER_PROBES;
    for (unsigned p = 0; p < MC_TIER_PROBES; p++) {
        if (full_path(dir, key, klen, p, path) != 0) {
            MC_ERROR(TIER, "tier directory path too long: '%s'", dir);
            *st = MC_ERR_INVALID_PARAMS;
            return -1;
        }
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT || errno == ENOTDIR) { /* ENOTDIR: a file in the way */
                /* probes are taken in order: a gap ends the chain */
                *probe = p;
                *st = MC_ERR_FILE_NOT_FOUND;
                return -1;
            }
            MC_ERROR(TIER, "cannot open '%s': %s", path, strerror(errno));
            *st = MC_ERR_FILE_OPEN_FAIL;
            return -1;
        }
        ssize_t n = read_head(fd, head);
        const char *why = NULL;
        if (n < 0) {
            MC_ERROR(TIER, "cannot read the header of '%s': %s", path, strerror(errno));
            close(fd);
            *st = MC_ERR_FILE_READ_FAIL;
            return -1;
        }
        if (mc_tier_hdr_decode(head, (size_t)n, h, &why) != MC_OK) {
            /* whose file it is cannot be told: not served, not overwritten */
            MC_ERROR(TIER, "corrupt tier file '%s': %s", path, why);
            close(fd);
            *probe = p; /* the corrupt file's */
            *st = MC_ERR_CHECKSUM_MISMATCH;
            return -1;
        }
        if (h->key_len == klen && memcmp(h->key, key, klen) == 0) {
            *probe = p;
            *st = MC_OK;
            return fd;
        }
        close(fd); /* another key with the same name (see tier.h): next probe */
    }
    *st = MC_ERR_FILE_NOT_FOUND;
    return -1;
}

static int mkdirs(char *path)
{
    /* path is "<dir>/h1/h2/name": create <dir>/h1 and <dir>/h1/h2 */
    char *leaf = strrchr(path, '/');
    char *mid = NULL;
    for (char *q = leaf - 1; q > path; q--)
        if (*q == '/') {
            mid = q;
            break;
        }
    if (mid == NULL)
        return -1;
    *mid = '\0';
    int rc = mkdir(path, 0755);
    *mid = '/';
    if (rc != 0 && errno != EEXIST)
        return -1;
    *leaf = '\0';
    rc = mkdir(path, 0755);
    *leaf = '/';
    return rc != 0 && errno != EEXIST ? -1 : 0;
}

static int write_all(int fd, struct iovec *iov, int cnt)
{
    off_t off = 0;
    while (cnt > 0) {
        ssize_t r = pwritev(fd, iov, cnt > IOV_MAX ? IOV_MAX : cnt, off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        off += r;
        while (cnt > 0 && (size_t)r >= iov->iov_len) {
            r -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + r;
            iov->iov_len -= (size_t)r;
        }
    }
    return 0;
}

static _Atomic unsigned long tmp_seq;

/* Write the temp file tmp with O_DIRECT: the header (hlen bytes, a
 * multiple of MC_TIER_ALIGN) and the data's whole blocks straight from data
 * (aligned), its last partial block through an aligned block padded with
 * zeros, then the file cut to its size. MC_OK (*fdp open), MC_ERR_NOT_SUPPORTED
 * (the file system refuses O_DIRECT or this alignment: nothing left, write
 * it buffered), MC_ERR_FILE_WRITE_FAIL or MC_ERR_NOMEM (logged; nothing left). */
static mc_status_t write_direct(const char *tmp, const uint8_t *head, size_t hlen,
                                const uint8_t *data, uint64_t size, int *fdp)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL)
        return MC_ERR_NOT_SUPPORTED;
    if (fd < 0) {
        MC_ERROR(TIER, "cannot create '%s': %s", tmp, strerror(errno));
        return MC_ERR_FILE_WRITE_FAIL;
    }
    uint64_t body = size / MC_TIER_ALIGN * MC_TIER_ALIGN, tail = size - body;
    size_t blen = hlen + (tail != 0 ? MC_TIER_ALIGN : 0);
    uint8_t *blk = aligned_alloc(MC_TIER_ALIGN, blen);
    if (blk == NULL) {
        close(fd);
        unlink(tmp);
        return MC_ERR_NOMEM;
    }
    memcpy(blk, head, hlen);
    if (tail != 0) {
        memcpy(blk + hlen, data + body, tail);
        memset(blk + hlen + tail, 0, MC_TIER_ALIGN - tail);
    }
    struct iovec v[3] = {{blk, hlen}, {(void *)(uintptr_t)data, body}, {blk + hlen, MC_TIER_ALIGN}};
    const char *what = "writing";
    int rc = write_all(fd, v, tail != 0 ? 3 : 2), err = errno;
    if (rc == 0 && tail != 0) {
        what = "cutting";
        rc = ftruncate(fd, (off_t)(hlen + size));
        err = errno;
    }
    free(blk);
    if (rc == 0) {
        *fdp = fd;
        return MC_OK;
    }
    close(fd);
    unlink(tmp);
    if (err == EINVAL && what[0] == 'w')
        return MC_ERR_NOT_SUPPORTED; /* an alignment the device wants more of */
    MC_ERROR(TIER, "%s '%s' failed: %s", what, tmp, strerror(err));
    return MC_ERR_FILE_WRITE_FAIL;
}

mc_status_t mc_tier_write(const char *dir, const void *key, size_t klen, const struct iovec *iov,
                          size_t iovcnt, uint64_t size, int sync_dir)
{
    return mc_tier_write_flags(dir, key, klen, iov, iovcnt, size, sync_dir, 0);
}

mc_status_t mc_tier_write_flags(const char *dir, const void *key, size_t klen,
                                const struct iovec *iov, size_t iovcnt, uint64_t size, int sync_dir,
                                unsigned flags)
{
    mc_tier_wfile_t w;
    mc_status_t st = mc_tier_wopen(dir, key, klen, iov, iovcnt, size, flags, &w);
    if (st != MC_OK)
        return st;
    return mc_tier_wcommit(&w, fsync(w.fd) == 0 ? 0 : errno, sync_dir);
}

mc_status_t mc_tier_wopen(const char *dir, const void *key, size_t klen, const struct iovec *iov,
                          size_t iovcnt, uint64_t size, unsigned flags, mc_tier_wfile_t *w)
{
    w->fd = -1;
    w->direct = 0;
    w->path[0] = w->tmp[0] = '\0';
    if (klen == 0 || klen > MC_TIER_KEY_MAX || memchr(key, '\0', klen) != NULL)
        return MC_ERR_INVALID_KEY;
    char *path = w->path, *tmp = w->tmp;
    uint8_t *head = mc_malloc(HEAD_ROOM);
    struct iovec *v = mc_malloc((iovcnt + 1) * sizeof(*v));
    mc_status_t st = MC_ERR_NOMEM;
    int fd = -1;
    if (head == NULL || v == NULL)
        goto out;

    /* which probe: ours if a file already holds key, else the first free */
    mc_tier_hdr_t h;
    unsigned free_probe;
    fd = open_key(dir, key, klen, head, &h, path, &free_probe, &st);
    w->known.probe = free_probe; /* ours, or the first free */
    if (fd >= 0) {
        close(fd);
        fd = -1;
    } else if (st == MC_ERR_FILE_NOT_FOUND && free_probe < MC_TIER_PROBES) {
        full_path(dir, key, klen, free_probe, path);
    } else if (st == MC_ERR_FILE_NOT_FOUND) {
        MC_ERROR(TIER, "every name of a key is taken by other keys (under '%s')", dir);
        st = MC_ERR_REPLICA_ALREADY_EXISTS;
        goto out;
    } else if (st == MC_ERR_CHECKSUM_MISMATCH) {
        MC_WARN(TIER, "replacing the corrupt file '%s'", path); /* path: open_key's */
    } else {
        goto out;
    }

    if (mkdirs(path) != 0) {
        MC_ERROR(TIER, "cannot create the directories of '%s': %s", path, strerror(errno));
        st = MC_ERR_FILE_WRITE_FAIL;
        goto out;
    }
    char *slash = strrchr(path, '/');
    size_t dl = (size_t)(slash - path);
    memcpy(tmp, path, dl);
    snprintf(tmp + dl, sizeof(w->tmp) - dl, "/.tmp-%d-%lu", (int)getpid(),
             atomic_fetch_add(&tmp_seq, 1));

    w->known.flags = flags & MC_TIER_F_ALIGNED;
    w->known.size = size;
    w->known.checksum = mc_hash64_iov(iov, iovcnt);
    v[0].iov_base = head;
    v[0].iov_len = mc_tier_hdr_encode_flags(key, klen, size, w->known.checksum, flags, head);
    if ((flags & MC_TIER_W_DIRECT) && (flags & MC_TIER_F_ALIGNED) && iovcnt == 1 &&
        (uintptr_t)iov[0].iov_base % MC_TIER_ALIGN == 0 && v[0].iov_len % MC_TIER_ALIGN == 0) {
        st = write_direct(tmp, head, v[0].iov_len, iov[0].iov_base, size, &fd);
        if (st == MC_OK) {
            w->fd = fd; /* the caller's now */
            w->direct = 1;
            fd = -1;
            goto out;
        }
        if (st != MC_ERR_NOT_SUPPORTED)
            goto out;
        /* refused: through the page cache */
    }
    memcpy(v + 1, iov, iovcnt * sizeof(*v));
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        MC_ERROR(TIER, "cannot create '%s': %s", tmp, strerror(errno));
        st = MC_ERR_FILE_WRITE_FAIL;
        goto out;
    }
    if (write_all(fd, v, (int)iovcnt + 1) != 0) {
        MC_ERROR(TIER, "writing '%s' failed: %s", tmp, strerror(errno));
        close(fd);
        fd = -1;
        unlink(tmp);
        st = MC_ERR_FILE_WRITE_FAIL;
        goto out;
    }
    w->fd = fd; /* the caller's now */
    fd = -1;
    st = MC_OK;
out:
    if (fd >= 0)
        close(fd);
    mc_free(v);
    mc_free(head);
    return st;
}

mc_status_t mc_tier_wcommit(mc_tier_wfile_t *w, int sync_errno, int sync_dir)
{
    const char *what = "syncing";
    errno = sync_errno;
    if (sync_errno != 0)
        goto err_unlink;
    what = "closing";
    int rc = close(w->fd);
    w->fd = -1;
    if (rc != 0)
        goto err_unlink;
    what = "renaming";
    if (rename(w->tmp, w->path) != 0)
        goto err_unlink;
    if (sync_dir) {
        char *slash = strrchr(w->path, '/');
        *slash = '\0';
        int dfd = open(w->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) != 0)
            MC_WARN(TIER, "cannot sync directory '%s': %s", w->path, strerror(errno));
        if (dfd >= 0)
            close(dfd);
        *slash = '/';
    }
    return MC_OK;

err_unlink:
    MC_ERROR(TIER, "%s '%s' failed: %s", what, w->tmp, strerror(errno));
    mc_tier_wabort(w);
    return MC_ERR_FILE_WRITE_FAIL;
}

void mc_tier_wabort(mc_tier_wfile_t *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    if (w->tmp[0] != '\0')
        unlink(w->tmp);
    w->tmp[0] = '\0';
}

mc_status_t mc_tier_read(const char *dir, const void *key, size_t klen, void *buf, uint64_t room,
                         uint64_t expect, uint64_t *size)
{
    char path[PATH_ROOM];
    uint8_t *head = mc_malloc(MC_TIER_HDR_FIXED + MC_TIER_KEY_MAX);
    if (head == NULL)
        return MC_ERR_NOMEM;
    mc_tier_hdr_t h;
    unsigned free_probe;
    mc_status_t st;
    int fd = open_key(dir, key, klen, head, &h, path, &free_probe, &st);
    if (fd < 0)
        goto out;
    *size = h.size;
    if (expect != 0 && h.size != expect) {
        MC_ERROR(TIER, "tier file '%s' holds %llu bytes, the master says %llu", path,
                 (unsigned long long)h.size, (unsigned long long)expect);
        st = MC_ERR_CHECKSUM_MISMATCH;
        goto out_close;
    }
    if (h.size > room) {
        st = MC_ERR_BUFFER_OVERFLOW;
        goto out_close;
    }
    off_t off = (off_t)h.data_off;
    uint64_t got = 0;
    while (got < h.size) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, h.size - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            MC_ERROR(TIER, "reading '%s' failed: %s", path, strerror(errno));
            st = MC_ERR_FILE_READ_FAIL;
            goto out_close;
        }
        if (r == 0)
            break;
        got += (uint64_t)r;
    }
    if (got < h.size) {
        MC_ERROR(TIER, "corrupt tier file '%s': %llu of %llu data bytes (cut short)", path,
                 (unsigned long long)got, (unsigned long long)h.size);
        st = MC_ERR_CHECKSUM_MISMATCH;
        goto out_close;
    }
    if (mc_hash64(buf, h.size) != h.checksum) {
        MC_ERROR(TIER, "corrupt tier file '%s': data checksum mismatch", path);
        st = MC_ERR_CHECKSUM_MISMATCH;
        goto out_close;
    }
    st = MC_OK;
out_close:
    close(fd);
out:
    mc_free(head);
    return st;
}

/* fd's file (at path) holds fewer than data_off + size bytes: logged as
 * corrupt (cut short). */
static int cut_short(int fd, const char *path, uint64_t data_off, uint64_t size)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size >= data_off + size)
        return 0;
    uint64_t have = (uint64_t)sb.st_size > data_off ? (uint64_t)sb.st_size - data_off : 0;
    MC_ERROR(TIER, "corrupt tier file '%s': %llu of %llu data bytes (cut short)", path,
             (unsigned long long)have, (unsigned long long)size);
    return 1;
}

mc_status_t mc_tier_open_read(const char *dir, const void *key, size_t klen, uint64_t expect,
                              int want_direct, mc_tier_file_t *f)
{
    memset(f, 0, sizeof(*f));
    f->fd = -1;
    uint8_t *head = mc_malloc(HEAD_ROOM);
    if (head == NULL)
        return MC_ERR_NOMEM;
    mc_tier_hdr_t h;
    unsigned free_probe;
    mc_status_t st;
    int fd = open_key(dir, key, klen, head, &h, f->path, &free_probe, &st);
    mc_free(head);
    if (fd < 0)
        return st;
    if (expect != 0 && h.size != expect) {
        MC_ERROR(TIER, "tier file '%s' holds %llu bytes, the master says %llu", f->path,
                 (unsigned long long)h.size, (unsigned long long)expect);
        close(fd);
        return MC_ERR_CHECKSUM_MISMATCH;
    }
    if (cut_short(fd, f->path, h.data_off, h.size)) {
        close(fd);
        return MC_ERR_CHECKSUM_MISMATCH;
    }
    f->fd = fd;
    f->size = h.size;
    f->checksum = h.checksum;
    f->data_off = h.data_off;
    f->known = (mc_tier_known_t){free_probe, h.flags, h.size, h.checksum};
    if (want_direct && (h.flags & MC_TIER_F_ALIGNED)) {
        /* the same descriptor (no second lookup of the path, and surely the
         * file whose header was checked); a file system that refuses
         * O_DIRECT (EINVAL) leaves it buffered */
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0)
            f->direct = 1;
        else
            f->direct_errno = errno;
    }
    return MC_OK;
}

mc_status_t mc_tier_open_known(const char *dir, const void *key, size_t klen,
                               const mc_tier_known_t *k, int want_direct, mc_tier_file_t *f)
{
    memset(f, 0, sizeof(*f));
    f->fd = -1;
    if (klen == 0 || klen > MC_TIER_KEY_MAX || k->probe >= MC_TIER_PROBES)
        return MC_ERR_INVALID_PARAMS;
    if (full_path(dir, key, klen, k->probe, f->path) != 0) {
        MC_ERROR(TIER, "tier directory path too long: '%s'", dir);
        return MC_ERR_INVALID_PARAMS;
    }
    int direct = want_direct && (k->flags & MC_TIER_F_ALIGNED);
    int fd = open(f->path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd < 0 && direct && errno == EINVAL) { /* a file system without O_DIRECT */
        f->direct_errno = errno;
        direct = 0;
        fd = open(f->path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return MC_ERR_FILE_NOT_FOUND;
        MC_ERROR(TIER, "cannot open '%s': %s", f->path, strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    uint64_t data_off = mc_tier_data_off(klen, k->flags);
    if (cut_short(fd, f->path, data_off, k->size)) {
        close(fd);
        return MC_ERR_CHECKSUM_MISMATCH;
    }
    f->fd = fd;
    f->direct = direct;
    f->size = k->size;
    f->checksum = k->checksum;
    f->data_off = data_off;
    f->known = *k;
    return MC_OK;
}

mc_status_t mc_tier_verify_sum(const mc_tier_file_t *f, uint64_t got, uint64_t sum)
{
    if (got < f->size) {
        MC_ERROR(TIER, "corrupt tier file '%s': %llu of %llu data bytes (cut short)", f->path,
                 (unsigned long long)got, (unsigned long long)f->size);
        return MC_ERR_CHECKSUM_MISMATCH;
    }
    if (sum != f->checksum) {
        MC_ERROR(TIER, "corrupt tier file '%s': data checksum mismatch", f->path);
        return MC_ERR_CHECKSUM_MISMATCH;
    }
    return MC_OK;
}

mc_status_t mc_tier_verify(const mc_tier_file_t *f, const void *buf, uint64_t got)
{
    return mc_tier_verify_sum(f, got, got < f->size ? 0 : mc_hash64(buf, f->size));
}

void mc_tier_close(mc_tier_file_t *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

mc_status_t mc_tier_unlink(const char *dir, const void *key, size_t klen)
{
    char path[PATH_ROOM];
    uint8_t *head = mc_malloc(MC_TIER_HDR_FIXED + MC_TIER_KEY_MAX);
    if (head == NULL)
        return MC_ERR_NOMEM;
    mc_tier_hdr_t h;
    unsigned free_probe;
    mc_status_t st;
    int fd = open_key(dir, key, klen, head, &h, path, &free_probe, &st);
    mc_free(head);
    if (fd < 0 && st != MC_ERR_CHECKSUM_MISMATCH) /* a corrupt one goes too */
        return st == MC_ERR_FILE_NOT_FOUND ? MC_OK : st;
    if (fd >= 0)
        close(fd);
    if (unlink(path) != 0 && errno != ENOENT) {
        MC_ERROR(TIER, "cannot delete '%s': %s", path, strerror(errno));
        return MC_ERR_FILE_WRITE_FAIL;
    }
    return MC_OK;
}

/* ------------------------------------------------------------- scan */

static int is_hex2(const char *n)
{
    for (int i = 0; i < 2; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f')))
            return 0;
    return n[2] == '\0';
}

/* A scan's state, shared by its workers: each takes the next leaf
 * directory, reads its files' headers (the time of a scan: a device read
 * each when the headers are not cached, so several run at once) and hands
 * what it found to the caller's thread, which alone calls the callback. */
typedef struct scan_hit {
    struct scan_hit *next;
    mc_tier_known_t k;
    size_t klen;
    uint8_t key[];
} scan_hit_t;

typedef struct scan_run {
    const char *dir;
    uint64_t max;
    int owned;
    char (*leaves)[8]; /* "ab/cd/" */
    size_t nleaves;
    _Atomic size_t next_leaf;
    _Atomic uint64_t files; /* taken so far (max) */
    _Atomic int stop;       /* the callback said stop, or max was reached */
    /* sequential (no workers): the callback, called at once */
    mc_tier_scan_cb_t cb;
    void *arg;
    /* workers: what they found, for the caller's thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    scan_hit_t *hits, **hits_tail;
    unsigned running;
    mc_tier_scan_stats_t s; /* workers' counts, added up (mu) */
} scan_run_t;

/* One leaf directory, its files' headers into *s; what it found to the
 * callback (sequential) or onto *found (a worker). Returns 1 to stop. */
static int scan_leaf(scan_run_t *run, const char *rel, uint8_t *head, mc_tier_scan_stats_t *s,
                     scan_hit_t ***found)
{
    char path[PATH_ROOM], want[MC_TIER_REL_MAX];
    if (snprintf(path, sizeof(path), "%s/%s", run->dir, rel) >= (int)sizeof(path))
        return 0;
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    struct dirent *de;
    int stop = 0;
    while (!stop && !atomic_load_explicit(&run->stop, memory_order_relaxed) &&
           (de = readdir(d)) != NULL) {
        if (snprintf(path, sizeof(path), "%s/%s%s", run->dir, rel, de->d_name) >=
            (int)sizeof(path)) {
            s->bad += de->d_name[0] != '.';
            continue;
        }
        if (de->d_name[0] == '.') {
            if (strncmp(de->d_name, ".tmp-", 5) != 0)
                continue;
            /* a writer that crashed left it; one still writing has touched
             * it within the hour (a write takes seconds at most) */
            struct stat sb;
            if ((run->owned ||
                 (stat(path, &sb) == 0 && sb.st_mtime + MC_TIER_TEMP_MAX_AGE_S < time(NULL))) &&
                unlink(path) == 0)
                s->temps_removed++;
            else
                s->temps++;
            continue;
        }
        /* a place among the max taken first, given back if the file is bad */
        if (atomic_fetch_add(&run->files, 1) >= run->max) {
            atomic_fetch_sub(&run->files, 1);
            s->truncated = 1;
            atomic_store(&run->stop, 1);
            break;
        }
        int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC); /* no path walk */
        if (fd < 0) {
            atomic_fetch_sub(&run->files, 1);
            s->bad++;
            continue;
        }
        ssize_t n = read_head(fd, head);
        struct stat fs;
        int have_size = fstat(fd, &fs) == 0;
        close(fd);
        mc_tier_hdr_t h;
        const char *why = "unreadable";
        if (n < 0 || mc_tier_hdr_decode(head, (size_t)n, &h, &why) != MC_OK ||
            (have_size && (uint64_t)fs.st_size < h.data_off + h.size &&
             (why = "cut short: fewer data bytes than its header says") != NULL)) {
            atomic_fetch_sub(&run->files, 1);
            if (run->owned && unlink(path) == 0) {
                s->bad_removed++;
                MC_WARN(TIER, "scan: deleted '%s': %s", path, why);
                continue;
            }
            if (s->bad++ < 10)
                MC_WARN(TIER, "scan: skipping '%s': %s", path, why);
            continue;
        }
        /* it must sit where its key's name is (probe suffix aside) */
        size_t wl = mc_tier_rel_path(h.key, h.key_len, 0, want);
        size_t rl = strlen(rel);
        size_t nl = strlen(de->d_name);
        if (wl < rl || memcmp(want, rel, rl) != 0 || nl < wl - rl ||
            memcmp(de->d_name, want + rl, wl - rl) != 0 ||
            !(nl == wl - rl || (nl == wl - rl + 2 && de->d_name[wl - rl] == '~'))) {
            atomic_fetch_sub(&run->files, 1);
            if (s->bad++ < 10)
                MC_WARN(TIER, "scan: skipping '%s': its name is not its key's", path);
            continue;
        }
        s->files++;
        mc_tier_known_t k = {.probe = nl == wl - rl ? 0 : (unsigned)(de->d_name[wl - rl + 1] - '0'),
                             .flags = h.flags,
                             .size = h.size,
                             .checksum = h.checksum};
        if (found == NULL) {
            stop = run->cb(run->arg, h.key, h.key_len, &k) != 0;
            continue;
        }
        scan_hit_t *x = mc_malloc(sizeof(*x) + h.key_len);
        if (x == NULL) { /* counted, not reported: as a file the callback refused */
            MC_WARN(TIER, "scan: out of memory: '%s' not reported", path);
            continue;
        }
        x->next = NULL;
        x->k = k;
        x->klen = h.key_len;
        memcpy(x->key, h.key, h.key_len);
        **found = x;
        *found = &x->next;
    }
    closedir(d);
    return stop;
}

static void stats_add(mc_tier_scan_stats_t *to, const mc_tier_scan_stats_t *s)
{
    to->files += s->files;
    to->bad += s->bad;
    to->temps += s->temps;
    to->temps_removed += s->temps_removed;
    to->bad_removed += s->bad_removed;
    to->truncated |= s->truncated;
}

static void *scan_worker(void *arg)
{
    scan_run_t *run = arg;
    /* (on its own stack: no allocation that could fail and leave its
     * leaves unscanned) */
    uint8_t head[MC_TIER_HDR_FIXED + MC_TIER_KEY_MAX];
    mc_tier_scan_stats_t s = {0};
    for (size_t i;
         !atomic_load(&run->stop) && (i = atomic_fetch_add(&run->next_leaf, 1)) < run->nleaves;) {
        scan_hit_t *found = NULL, **tail = &found;
        scan_leaf(run, run->leaves[i], head, &s, &tail);
        if (found != NULL) {
            pthread_mutex_lock(&run->mu);
            *run->hits_tail = found;
            run->hits_tail = tail;
            pthread_cond_signal(&run->cv);
            pthread_mutex_unlock(&run->mu);
        }
    }
    pthread_mutex_lock(&run->mu);
    stats_add(&run->s, &s);
    run->running--;
    pthread_cond_signal(&run->cv);
    pthread_mutex_unlock(&run->mu);
    return NULL;
}

/* The leaf directories of dir ("ab/cd/"), into run. 0, or -1 (errno). */
static int list_leaves(scan_run_t *run)
{
    DIR *d1 = opendir(run->dir);
    if (d1 == NULL)
        return -1;
    size_t cap = 0;
    char p1[PATH_ROOM];
    struct dirent *e1;
    int rc = 0;
    while (rc == 0 && (e1 = readdir(d1)) != NULL) {
        if (!is_hex2(e1->d_name))
            continue;
        if (snprintf(p1, sizeof(p1), "%s/%.2s", run->dir, e1->d_name) >= (int)sizeof(p1))
            break;
        DIR *d2 = opendir(p1);
        if (d2 == NULL)
            continue;
        struct dirent *e2;
        while (rc == 0 && (e2 = readdir(d2)) != NULL) {
            if (!is_hex2(e2->d_name))
                continue;
            if (run->nleaves == cap) {
                size_t nc = cap != 0 ? cap * 2 : 256;
                char(*nv)[8] = mc_realloc(run->leaves, nc * sizeof(*nv));
                if (nv == NULL) {
                    rc = -1;
                    errno = ENOMEM;
                    break;
                }
                run->leaves = nv;
                cap = nc;
            }
            snprintf(run->leaves[run->nleaves++], 8, "%.2s/%.2s/", e1->d_name, e2->d_name);
        }
        closedir(d2);
    }
    closedir(d1);
    return rc;
}

mc_status_t mc_tier_scan_n(const char *dir, uint64_t max, unsigned threads, int owned,
                           mc_tier_scan_cb_t cb, void *arg, mc_tier_scan_stats_t *stats)
{
    scan_run_t run = {.dir = dir, .max = max, .owned = owned, .cb = cb, .arg = arg};
    mc_tier_scan_stats_t s = {0};
    mc_status_t st = MC_OK;
    int synced = 0; /* run.mu and run.cv set up (destroyed at out) */
    if (list_leaves(&run) != 0) {
        if (errno == ENOMEM) {
            st = MC_ERR_NOMEM;
        } else if (errno != ENOENT) {
            MC_ERROR(TIER, "cannot list '%s': %s", dir, strerror(errno));
            st = MC_ERR_FILE_OPEN_FAIL;
        }
        goto out;
    }
    threads = threads == 0                         ? 1
              : threads > MC_TIER_SCAN_THREADS_MAX ? MC_TIER_SCAN_THREADS_MAX
                                                   : threads;
    if (threads > run.nleaves)
        threads = run.nleaves > 0 ? (unsigned)run.nleaves : 1;
    pthread_t tid[MC_TIER_SCAN_THREADS_MAX];
    unsigned started = 0;
    synced = threads > 1;
    if (synced) {
        pthread_mutex_init(&run.mu, NULL);
        pthread_cond_init(&run.cv, NULL);
        run.hits_tail = &run.hits;
        run.running = threads;
        for (; started < threads; started++)
            if (pthread_create(&tid[started], NULL, scan_worker, &run) != 0)
                break;
        pthread_mutex_lock(&run.mu);
        run.running -= threads - started; /* (those that could not start never will) */
        pthread_mutex_unlock(&run.mu);
    }
    if (started == 0) { /* sequential: one thread, or none could start */
        uint8_t head[MC_TIER_HDR_FIXED + MC_TIER_KEY_MAX]; /* (as a worker's) */
        for (size_t i = 0; i < run.nleaves && !atomic_load(&run.stop); i++)
            if (scan_leaf(&run, run.leaves[i], head, &s, NULL))
                atomic_store(&run.stop, 1);
        goto out;
    }
    /* the callback on this thread, as the workers find files */
    int said_stop = 0; /* (run.stop alone may be max reached: what was found is reported) */
    pthread_mutex_lock(&run.mu);
    for (;;) {
        while (run.hits == NULL && run.running > 0)
            pthread_cond_wait(&run.cv, &run.mu);
        scan_hit_t *x = run.hits;
        run.hits = NULL;
        run.hits_tail = &run.hits;
        if (x == NULL)
            break; /* none left, and no worker running */
        pthread_mutex_unlock(&run.mu);
        while (x != NULL) {
            scan_hit_t *next = x->next;
            if (!said_stop && cb(arg, x->key, x->klen, &x->k) != 0) {
                said_stop = 1;
                atomic_store(&run.stop, 1);
            }
            mc_free(x);
            x = next;
        }
        pthread_mutex_lock(&run.mu);
    }
    pthread_mutex_unlock(&run.mu);
    for (unsigned i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    stats_add(&s, &run.s);
out:
    if (synced) {
        pthread_cond_destroy(&run.cv);
        pthread_mutex_destroy(&run.mu);
    }
    mc_free(run.leaves);
    if (stats != NULL)
        *stats = s;
    return st;
}

mc_status_t mc_tier_scan(const char *dir, uint64_t max, mc_tier_scan_cb_t cb, void *arg,
                         mc_tier_scan_stats_t *stats)
{
    return mc_tier_scan_n(dir, max, MC_TIER_SCAN_THREADS, 0, cb, arg, stats);
}

mc_status_t mc_tier_scan_owned(const char *dir, uint64_t max, mc_tier_scan_cb_t cb, void *arg,
                               mc_tier_scan_stats_t *stats)
{
    return mc_tier_scan_n(dir, max, MC_TIER_SCAN_THREADS, 1, cb, arg, stats);
}
