/*
 * store/tier.c: file names that cannot escape the tier directory nor
 * collide, the file header codec, and write/read/unlink/scan of files in a
 * temporary directory (corrupt and truncated files are refused).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "store/tier.h"
#include "util/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

static int name_ok(const char *n)
{
    size_t l = strlen(n);
    if (l == 0 || l > 255 || n[0] == '.')
        return 0;
    return strchr(n, '/') == NULL;
}

static void names_are_safe_and_never_start_with_a_dot(void **state)
{
    (void)state;
    const char *keys[] = {"..", ".", "../x", "a/b", "/etc/passwd", "a\\b", ".hidden", "~1", "%2E"};
    char n[MC_TIER_REL_MAX];
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        mc_tier_name(keys[i], strlen(keys[i]), n);
        assert_true(name_ok(n));
        assert_null(strchr(n, '~')); /* short keys never show a literal '~' */
    }
    mc_tier_name("../x", 4, n);
    assert_string_equal(n, "%2E.%2Fx");
    mc_tier_name("a/b", 3, n);
    assert_string_equal(n, "a%2Fb");
    mc_tier_name("model.layer-1_x", 15, n);
    assert_string_equal(n, "model.layer-1_x");
}

static void distinct_keys_get_distinct_names(void **state)
{
    (void)state;
    const char *keys[] = {"a/b", "a_b", "a%2Fb", "A/b", "abc", "ABC", "Abc", "..", "%2E%2E", "~"};
    size_t nk = sizeof(keys) / sizeof(keys[0]);
    char a[MC_TIER_REL_MAX], b[MC_TIER_REL_MAX];
    for (size_t i = 0; i < nk; i++)
        for (size_t j = i + 1; j < nk; j++) {
            mc_tier_name(keys[i], strlen(keys[i]), a);
            mc_tier_name(keys[j], strlen(keys[j]), b);
            assert_string_not_equal(a, b);
        }
}

static void long_keys_end_in_their_hash_and_stay_under_name_max(void **state)
{
    (void)state;
    char key[4096], n[MC_TIER_REL_MAX], m[MC_TIER_REL_MAX];
    memset(key, '/', sizeof(key)); /* every byte escaped: the worst case */
    size_t l = mc_tier_name(key, sizeof(key), n);
    assert_true(l <= 217);
    assert_true(name_ok(n));
    char tail[20];
    snprintf(tail, sizeof(tail), "~%016llx", (unsigned long long)mc_hash64(key, sizeof(key)));
    assert_string_equal(n + l - 17, tail);
    key[4095] = 'x'; /* same prefix, other key: other hash */
    mc_tier_name(key, sizeof(key), m);
    assert_string_not_equal(n, m);
    /* the relative path: two hex levels from the top bits of the hash */
    char rel[MC_TIER_REL_MAX];
    mc_tier_rel_path("abc", 3, 0, rel);
    uint64_t h = mc_hash64("abc", 3);
    char want[64];
    snprintf(want, sizeof(want), "%02x/%02x/abc", (unsigned)(h >> 56),
             (unsigned)((h >> 48) & 0xff));
    assert_string_equal(rel, want);
    mc_tier_rel_path("abc", 3, 3, rel);
    strcat(want, "~3");
    assert_string_equal(rel, want);
}

static void binary_keys_are_escaped(void **state)
{
    (void)state;
    char key[255], n[MC_TIER_REL_MAX];
    for (int i = 0; i < 255; i++)
        key[i] = (char)(i + 1);
    mc_tier_name(key, sizeof(key), n);
    assert_true(name_ok(n));
    for (const char *p = n; *p; p++)
        assert_true(*p >= 0x21 && *p <= 0x7e);
}

static void headers_round_trip(void **state)
{
    (void)state;
    uint8_t buf[MC_TIER_HDR_FIXED + 16];
    size_t n = mc_tier_hdr_encode("key/1", 5, 1234, 0xabcdef, buf);
    assert_int_equal(n, MC_TIER_HDR_FIXED + 5);
    mc_tier_hdr_t h;
    assert_int_equal(mc_tier_hdr_decode(buf, n, &h, NULL), MC_OK);
    assert_int_equal(h.key_len, 5);
    assert_int_equal(h.size, 1234);
    assert_int_equal(h.checksum, 0xabcdef);
    assert_memory_equal(h.key, "key/1", 5);
}

static void truncated_or_corrupt_headers_are_refused_with_a_reason(void **state)
{
    (void)state;
    uint8_t buf[MC_TIER_HDR_FIXED + 16], bad[sizeof(buf)];
    size_t n = mc_tier_hdr_encode("key/1", 5, 1234, 7, buf);
    mc_tier_hdr_t h;
    const char *why = NULL;
    for (size_t cut = 0; cut < n; cut++) {
        why = NULL;
        assert_int_equal(mc_tier_hdr_decode(buf, cut, &h, &why), MC_ERR_CHECKSUM_MISMATCH);
        assert_non_null(why);
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(bad, buf, n);
        bad[i] ^= 0x40;
        why = NULL;
        assert_int_equal(mc_tier_hdr_decode(bad, n, &h, &why), MC_ERR_CHECKSUM_MISMATCH);
        assert_non_null(why);
    }
    memcpy(bad, buf, n);
    bad[12] = 0xff, bad[13] = 0xff; /* key length 65535 */
    assert_int_equal(mc_tier_hdr_decode(bad, n, &h, &why), MC_ERR_CHECKSUM_MISMATCH);
    assert_string_equal(why, "bad key length");
}

/* ---- files ---- */

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/tier_test.XXXXXX");
    return mkdtemp(dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static mc_status_t put(const char *key, size_t klen, const void *data, size_t len)
{
    struct iovec v = {(void *)(uintptr_t)data, len};
    return mc_tier_write(dir, key, klen, &v, 1, len, 0);
}

static void files_round_trip_and_are_refused_when_corrupt(void **state)
{
    (void)state;
    char data[10000], out[10000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)(i * 7);
    /* two parts write the same file as one */
    struct iovec v[2] = {{data, 3000}, {data + 3000, 7000}};
    assert_int_equal(mc_tier_write(dir, "k1", 2, v, 2, sizeof(data), 1), MC_OK);
    uint64_t size = 0;
    assert_int_equal(mc_tier_read(dir, "k1", 2, out, sizeof(out), sizeof(data), &size), MC_OK);
    assert_int_equal(size, sizeof(data));
    assert_memory_equal(out, data, sizeof(data));
    assert_int_equal(mc_tier_read(dir, "k1", 2, out, 10, 0, &size), MC_ERR_BUFFER_OVERFLOW);
    assert_int_equal(mc_tier_read(dir, "k1", 2, out, sizeof(out), 5, &size),
                     MC_ERR_CHECKSUM_MISMATCH);
    assert_int_equal(mc_tier_read(dir, "k2", 2, out, sizeof(out), 0, &size), MC_ERR_FILE_NOT_FOUND);

    /* flip one data byte */
    char rel[MC_TIER_REL_MAX], path[512];
    mc_tier_rel_path("k1", 2, 0, rel);
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    char c;
    assert_int_equal(pread(fd, &c, 1, 5000), 1);
    c ^= 1;
    assert_int_equal(pwrite(fd, &c, 1, 5000), 1);
    assert_int_equal(mc_tier_read(dir, "k1", 2, out, sizeof(out), 0, &size),
                     MC_ERR_CHECKSUM_MISMATCH);
    /* cut it short */
    assert_int_equal(ftruncate(fd, 4000), 0);
    assert_int_equal(mc_tier_read(dir, "k1", 2, out, sizeof(out), 0, &size),
                     MC_ERR_CHECKSUM_MISMATCH);
    /* cut inside the header */
    assert_int_equal(ftruncate(fd, 20), 0);
    close(fd);
    assert_int_equal(mc_tier_read(dir, "k1", 2, out, sizeof(out), 0, &size),
                     MC_ERR_CHECKSUM_MISMATCH);
    /* a rewrite replaces the corrupt file (a short key's name is its own) */
    assert_int_equal(put("k1", 2, data, 10), MC_OK);
    assert_int_equal(mc_tier_read(dir, "k1", 2, out, sizeof(out), 0, &size), MC_OK);
    assert_int_equal(size, 10);
    assert_int_equal(mc_tier_unlink(dir, "k1", 2), MC_OK);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(mc_tier_unlink(dir, "k1", 2), MC_OK);
    /* unlink takes a corrupt file too */
    assert_int_equal(put("k1", 2, data, 10), MC_OK);
    assert_int_equal(truncate(path, 30), 0);
    assert_int_equal(mc_tier_unlink(dir, "k1", 2), MC_OK);
    assert_int_equal(access(path, F_OK), -1);
}

/* Put key other's file (4 bytes "bbbb") under key's first name, as a hash
 * collision would; leaf (room bytes) receives the directory of key's names. */
static void plant(const char *other, const char *key, char *leaf, size_t room)
{
    assert_int_equal(put(other, strlen(other), "bbbb", 4), MC_OK);
    char rk[MC_TIER_REL_MAX], ro[MC_TIER_REL_MAX], po[512], cmd[2000];
    mc_tier_rel_path(key, strlen(key), 0, rk);
    mc_tier_rel_path(other, strlen(other), 0, ro);
    snprintf(leaf, room, "%s/%s", dir, rk);
    snprintf(po, sizeof(po), "%s/%s", dir, ro);
    *strrchr(leaf, '/') = '\0';
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && mv '%s' '%s/%s'", leaf, po, leaf, key);
    assert_int_equal(system(cmd), 0);
}

static void a_name_taken_by_another_key_moves_to_the_next_suffix(void **state)
{
    (void)state;
    char pa[512];
    plant("B", "A", pa, sizeof(pa));

    char out[8];
    uint64_t size;
    assert_int_equal(mc_tier_read(dir, "A", 1, out, sizeof(out), 0, &size), MC_ERR_FILE_NOT_FOUND);
    assert_int_equal(put("A", 1, "aa", 2), MC_OK);
    char p1[600];
    snprintf(p1, sizeof(p1), "%s/A~1", pa);
    assert_int_equal(access(p1, F_OK), 0);
    assert_int_equal(mc_tier_read(dir, "A", 1, out, sizeof(out), 0, &size), MC_OK);
    assert_int_equal(size, 2);
    assert_memory_equal(out, "aa", 2);
    /* a rewrite of A finds its own file at ~1 again */
    assert_int_equal(put("A", 1, "ccc", 3), MC_OK);
    snprintf(p1, sizeof(p1), "%s/A~2", pa);
    assert_int_equal(access(p1, F_OK), -1);
    assert_int_equal(mc_tier_unlink(dir, "A", 1), MC_OK);
    snprintf(p1, sizeof(p1), "%s/A", pa);
    assert_int_equal(access(p1, F_OK), 0); /* B's planted file is untouched */
    assert_int_equal(unlink(p1), 0);
}

typedef struct seen {
    int n;
    uint64_t bytes;
} seen_t;

static int count_cb(void *arg, const void *key, size_t klen, const mc_tier_known_t *k)
{
    seen_t *s = arg;
    (void)key;
    (void)klen;
    s->n++;
    s->bytes += k->size;
    return 0;
}

static void a_scan_reports_every_file_once_skips_bad_ones_and_clears_stale_temps(void **state)
{
    (void)state;
    char key[32];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "scan/%d", i);
        assert_int_equal(put(key, strlen(key), "0123456789", 10), MC_OK);
    }
    /* a stray file with a valid-looking name but garbage inside */
    char rel[MC_TIER_REL_MAX], path[512];
    mc_tier_rel_path("junk", 4, 0, rel);
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    assert_int_equal(put("junk", 4, "x", 1), MC_OK);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("garbage", f);
    fclose(f);
    /* two temp files next to it: a crashed writer's (two hours old) and a
     * live one's */
    char tmp_old[600], tmp_new[600];
    snprintf(tmp_old, sizeof(tmp_old), "%s", path);
    strcpy(strrchr(tmp_old, '/'), "/.tmp-1-1");
    snprintf(tmp_new, sizeof(tmp_new), "%s", path);
    strcpy(strrchr(tmp_new, '/'), "/.tmp-1-2");
    fclose(fopen(tmp_old, "w"));
    fclose(fopen(tmp_new, "w"));
    struct timeval tv[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    assert_int_equal(utimes(tmp_old, tv), 0);
    seen_t s = {0};
    mc_tier_scan_stats_t st;
    assert_int_equal(mc_tier_scan(dir, 1000, count_cb, &s, &st), MC_OK);
    assert_int_equal(s.n, 20);
    assert_int_equal(s.bytes, 200);
    assert_int_equal(st.files, 20);
    assert_int_equal(st.bad, 1);
    assert_int_equal(st.temps, 1);
    assert_int_equal(st.temps_removed, 1);
    assert_int_equal(access(tmp_old, F_OK), -1);
    assert_int_equal(access(tmp_new, F_OK), 0);
    memset(&s, 0, sizeof(s));
    assert_int_equal(mc_tier_scan(dir, 5, count_cb, &s, &st), MC_OK);
    assert_int_equal(s.n, 5);
    assert_true(st.truncated);
    assert_int_equal(mc_tier_scan("/nonexistent/tier", 5, count_cb, &s, &st), MC_OK);
}

/* What a scan with worker threads hands its callback: every file once, on
 * the caller's thread, no more than max, nothing after the callback said
 * stop; an owned directory's corrupt file deleted. */
#define PAR_KEYS 400

typedef struct par_seen {
    pthread_t caller;
    unsigned n, elsewhere, stop_after;
    unsigned char seen[PAR_KEYS];
    unsigned twice, strange;
} par_seen_t;

static int par_cb(void *arg, const void *key, size_t klen, const mc_tier_known_t *k)
{
    par_seen_t *s = arg;
    char name[32];
    unsigned i = 0;
    (void)k;
    snprintf(name, sizeof(name), "%.*s", (int)(klen < 31 ? klen : 31), (const char *)key);
    if (sscanf(name, "par/%u", &i) != 1 || i >= PAR_KEYS)
        s->strange++;
    else if (s->seen[i]++ != 0)
        s->twice++;
    s->elsewhere += !pthread_equal(pthread_self(), s->caller);
    return ++s->n == s->stop_after;
}

static void a_scan_with_threads_reports_each_file_once_on_the_callers_thread(void **state)
{
    (void)state;
    char key[32];
    for (int i = 0; i < PAR_KEYS; i++) {
        snprintf(key, sizeof(key), "par/%d", i);
        assert_int_equal(put(key, strlen(key), "abc", 3), MC_OK);
    }
    static const unsigned threads[] = {1, 2, 16, MC_TIER_SCAN_THREADS_MAX, 1000};
    for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
        par_seen_t s = {.caller = pthread_self()};
        mc_tier_scan_stats_t st;
        assert_int_equal(mc_tier_scan_n(dir, 1000, threads[t], 0, par_cb, &s, &st), MC_OK);
        assert_int_equal(s.n, PAR_KEYS);
        assert_int_equal(s.twice, 0);
        assert_int_equal(s.strange, 0);
        assert_int_equal(s.elsewhere, 0);
        assert_int_equal(st.files, PAR_KEYS);
        assert_false(st.truncated);
        /* at most max */
        memset(&s, 0, sizeof(s));
        s.caller = pthread_self();
        assert_int_equal(mc_tier_scan_n(dir, 7, threads[t], 0, par_cb, &s, &st), MC_OK);
        assert_int_equal(s.n, 7);
        assert_int_equal(st.files, 7);
        assert_true(st.truncated);
        /* the callback says stop at the third file: no fourth call */
        memset(&s, 0, sizeof(s));
        s.caller = pthread_self();
        s.stop_after = 3;
        assert_int_equal(mc_tier_scan_n(dir, 1000, threads[t], 0, par_cb, &s, &st), MC_OK);
        assert_int_equal(s.n, 3);
        assert_int_equal(s.twice, 0);
    }
    /* owned: a corrupt file goes, the others stay */
    char rel[MC_TIER_REL_MAX], path[512];
    mc_tier_rel_path("par/7", 5, 0, rel);
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    assert_int_equal(truncate(path, 10), 0);
    par_seen_t s = {.caller = pthread_self()};
    mc_tier_scan_stats_t st;
    assert_int_equal(mc_tier_scan_n(dir, 1000, 16, 1, par_cb, &s, &st), MC_OK);
    assert_int_equal(s.n, PAR_KEYS - 1);
    assert_int_equal(s.seen[7], 0);
    assert_int_equal(st.bad_removed, 1);
    assert_int_equal(access(path, F_OK), -1);
}

/* ---- aligned files (node-local offload: O_DIRECT reads) ---- */

static void aligned_files_keep_their_data_at_4096_and_open_for_direct_reads(void **state)
{
    (void)state;
    char data[10000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)(i * 13 + 1);
    struct iovec v = {data, sizeof(data)};
    assert_int_equal(mc_tier_write_flags(dir, "al", 2, &v, 1, sizeof(data), 0, MC_TIER_F_ALIGNED),
                     MC_OK);
    char rel[MC_TIER_REL_MAX], path[512];
    mc_tier_rel_path("al", 2, 0, rel);
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, MC_TIER_ALIGN + sizeof(data));
    /* the plain reader reads it as any file */
    char out[10000];
    uint64_t size = 0;
    assert_int_equal(mc_tier_read(dir, "al", 2, out, sizeof(out), sizeof(data), &size), MC_OK);
    assert_memory_equal(out, data, sizeof(data));

    mc_tier_file_t f;
    assert_int_equal(mc_tier_open_read(dir, "al", 2, sizeof(data), 1, &f), MC_OK);
    assert_int_equal(f.data_off, MC_TIER_ALIGN);
    assert_int_equal(f.size, sizeof(data));
    /* O_DIRECT when this file system allows it (tmpfs may refuse: then the
     * descriptor is a buffered one and direct_errno says why) */
    assert_true(f.direct || f.direct_errno != 0);
    uint8_t *buf = aligned_alloc(MC_TIER_ALIGN, 3 * MC_TIER_ALIGN);
    uint8_t *bounce = aligned_alloc(MC_TIER_ALIGN, MC_TIER_ALIGN);
    assert_non_null(buf);
    assert_non_null(bounce);
    size_t body = f.direct ? sizeof(data) / MC_TIER_ALIGN * MC_TIER_ALIGN : sizeof(data);
    assert_int_equal(pread(f.fd, buf, body, (off_t)f.data_off), (ssize_t)body);
    if (body < sizeof(data)) {
        assert_int_equal(pread(f.fd, bounce, MC_TIER_ALIGN, (off_t)(f.data_off + body)),
                         (ssize_t)(sizeof(data) - body)); /* the end of the file */
        memcpy(buf + body, bounce, sizeof(data) - body);
    }
    assert_int_equal(mc_tier_verify(&f, buf, sizeof(data)), MC_OK);
    assert_int_equal(mc_tier_verify(&f, buf, sizeof(data) - 1), MC_ERR_CHECKSUM_MISMATCH);
    buf[5] ^= 1;
    assert_int_equal(mc_tier_verify(&f, buf, sizeof(data)), MC_ERR_CHECKSUM_MISMATCH);
    mc_tier_close(&f);
    assert_int_equal(f.fd, -1);
    free(buf);
    free(bounce);

    /* a plain file never opens for O_DIRECT: its data is not aligned */
    assert_int_equal(put("pl", 2, data, 100), MC_OK);
    assert_int_equal(mc_tier_open_read(dir, "pl", 2, 100, 1, &f), MC_OK);
    assert_false(f.direct);
    assert_int_equal(f.data_off, MC_TIER_HDR_FIXED + 2);
    mc_tier_close(&f);
    /* the size the master says must be the file's; a file cut short is refused */
    assert_int_equal(mc_tier_open_read(dir, "al", 2, 99, 1, &f), MC_ERR_CHECKSUM_MISMATCH);
    assert_int_equal(truncate(path, MC_TIER_ALIGN + 5000), 0);
    assert_int_equal(mc_tier_open_read(dir, "al", 2, sizeof(data), 1, &f),
                     MC_ERR_CHECKSUM_MISMATCH);
    assert_int_equal(mc_tier_open_read(dir, "none", 4, 0, 1, &f), MC_ERR_FILE_NOT_FOUND);
}

static void unknown_header_flags_are_refused(void **state)
{
    (void)state;
    uint8_t buf[MC_TIER_ALIGN];
    size_t n = mc_tier_hdr_encode_flags("k", 1, 10, 7, MC_TIER_F_ALIGNED, buf);
    assert_int_equal(n, MC_TIER_ALIGN);
    mc_tier_hdr_t h;
    const char *why = NULL;
    assert_int_equal(mc_tier_hdr_decode(buf, n, &h, &why), MC_OK);
    assert_int_equal(h.flags, MC_TIER_F_ALIGNED);
    assert_int_equal(h.data_off, MC_TIER_ALIGN);
    buf[32] |= 2;
    assert_int_equal(mc_tier_hdr_decode(buf, n, &h, &why), MC_ERR_CHECKSUM_MISMATCH);
    assert_string_equal(why, "unknown flags");
}

static void an_owned_scan_deletes_temp_and_cut_short_files(void **state)
{
    (void)state;
    char data[5000];
    memset(data, 'x', sizeof(data));
    struct iovec v = {data, sizeof(data)};
    const char *keys[] = {"o/1", "o/2", "o/3"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            mc_tier_write_flags(dir, keys[i], 3, &v, 1, sizeof(data), 0, MC_TIER_F_ALIGNED), MC_OK);
    char rel[MC_TIER_REL_MAX], cut[512], tmp[600];
    mc_tier_rel_path("o/2", 3, 0, rel);
    snprintf(cut, sizeof(cut), "%s/%s", dir, rel);
    assert_int_equal(truncate(cut, MC_TIER_ALIGN + 100), 0); /* a header, part of the data */
    /* a write cut by a crash a moment ago: a fresh temp file */
    snprintf(tmp, sizeof(tmp), "%s", cut);
    strcpy(strrchr(tmp, '/'), "/.tmp-77-1");
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs("half", f);
    fclose(f);
    /* a shared tier's scan skips both and leaves them (another writer may live) */
    seen_t s = {0};
    mc_tier_scan_stats_t st;
    assert_int_equal(mc_tier_scan(dir, 1000, count_cb, &s, &st), MC_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(st.bad, 1);
    assert_int_equal(st.temps, 1);
    assert_int_equal(access(cut, F_OK), 0);
    assert_int_equal(access(tmp, F_OK), 0);
    /* the owner's scan deletes them: the cut file is never an object */
    memset(&s, 0, sizeof(s));
    assert_int_equal(mc_tier_scan_owned(dir, 1000, count_cb, &s, &st), MC_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.bytes, 2 * sizeof(data));
    assert_int_equal(st.bad_removed, 1);
    assert_int_equal(st.temps_removed, 1);
    assert_int_equal(access(cut, F_OK), -1);
    assert_int_equal(access(tmp, F_OK), -1);
}

/* The write in steps (the offload's batches): until committed, the key's
 * old file (or none) is what readers get and the new bytes are only in a
 * temp file; a failed sync or an abort leaves the old file and no temp. */
static int temps_in(const char *leaf_of)
{
    char rel[MC_TIER_REL_MAX], cmd[700];
    mc_tier_rel_path(leaf_of, strlen(leaf_of), 0, rel);
    *strrchr(rel, '/') = '\0';
    snprintf(cmd, sizeof(cmd), "test $(ls -A '%s/%s' | grep -c '^\\.tmp-') = 0", dir, rel);
    return system(cmd) == 0 ? 0 : 1;
}

static void a_write_in_steps_shows_the_new_file_only_once_committed(void **state)
{
    (void)state;
    char old[6000], neu[7000], out[8000];
    memset(old, 'o', sizeof(old));
    memset(neu, 'n', sizeof(neu));
    uint64_t size = 0;
    struct iovec v = {neu, sizeof(neu)};
    mc_tier_wfile_t w;
    /* a new key: nothing to read before the commit */
    assert_int_equal(mc_tier_wopen(dir, "s/1", 3, &v, 1, sizeof(neu), MC_TIER_F_ALIGNED, &w),
                     MC_OK);
    assert_true(w.fd >= 0);
    assert_int_equal(temps_in("s/1"), 1);
    assert_int_equal(mc_tier_read(dir, "s/1", 3, out, sizeof(out), 0, &size),
                     MC_ERR_FILE_NOT_FOUND);
    assert_int_equal(mc_tier_wcommit(&w, fsync(w.fd) == 0 ? 0 : errno, 0), MC_OK);
    assert_int_equal(w.fd, -1);
    assert_int_equal(temps_in("s/1"), 0);
    assert_int_equal(mc_tier_read(dir, "s/1", 3, out, sizeof(out), sizeof(neu), &size), MC_OK);
    assert_memory_equal(out, neu, sizeof(neu));

    /* replacing a key: the old bytes until the commit */
    struct iovec vo = {old, sizeof(old)};
    assert_int_equal(mc_tier_write(dir, "s/2", 3, &vo, 1, sizeof(old), 0), MC_OK);
    assert_int_equal(mc_tier_wopen(dir, "s/2", 3, &v, 1, sizeof(neu), MC_TIER_F_ALIGNED, &w),
                     MC_OK);
    assert_int_equal(mc_tier_read(dir, "s/2", 3, out, sizeof(out), 0, &size), MC_OK);
    assert_int_equal(size, sizeof(old));
    assert_memory_equal(out, old, sizeof(old));
    /* the sync failed (EIO): not renamed, the temp file gone */
    assert_int_equal(mc_tier_wcommit(&w, EIO, 0), MC_ERR_FILE_WRITE_FAIL);
    assert_int_equal(temps_in("s/2"), 0);
    assert_int_equal(mc_tier_read(dir, "s/2", 3, out, sizeof(out), 0, &size), MC_OK);
    assert_int_equal(size, sizeof(old));
    /* an abort: the same */
    assert_int_equal(mc_tier_wopen(dir, "s/2", 3, &v, 1, sizeof(neu), 0, &w), MC_OK);
    mc_tier_wabort(&w);
    assert_int_equal(w.fd, -1);
    assert_int_equal(temps_in("s/2"), 0);
    assert_int_equal(mc_tier_read(dir, "s/2", 3, out, sizeof(out), 0, &size), MC_OK);
    assert_memory_equal(out, old, sizeof(old));
    /* then committed: the new bytes */
    assert_int_equal(mc_tier_wopen(dir, "s/2", 3, &v, 1, sizeof(neu), 0, &w), MC_OK);
    assert_int_equal(mc_tier_wcommit(&w, 0, 1), MC_OK);
    assert_int_equal(mc_tier_read(dir, "s/2", 3, out, sizeof(out), 0, &size), MC_OK);
    assert_int_equal(size, sizeof(neu));
    assert_memory_equal(out, neu, sizeof(neu));
    /* a bad key opens nothing */
    assert_int_equal(mc_tier_wopen(dir, "", 0, &v, 1, sizeof(neu), 0, &w), MC_ERR_INVALID_KEY);
    assert_int_equal(w.fd, -1);
}

/* Checksums are stored in files: mc_hash64 must give XXH3-64's frozen
 * value whichever code computes it (long inputs go through libxxhash's
 * dispatching entry points where built: AVX2 or AVX-512). The reference is
 * the header's inlined code, built here. */
static void long_and_short_inputs_hash_to_xxh3s_frozen_values(void **state)
{
    (void)state;
    enum { N = (1 << 20) + 3 };
    uint8_t *data = malloc(N);
    assert_non_null(data);
    for (size_t i = 0; i < N; i++)
        data[i] = (uint8_t)((i * 2654435761u) >> 13);
    static const size_t lens[] = {0, 1, 17, 240, 241, 1023, 1024, 1025, 4096 + 777, 65536, N};
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        uint64_t want = XXH3_64bits(data + 1, lens[k] > N - 1 ? N - 1 : lens[k]);
        assert_int_equal(mc_hash64(data + 1, lens[k] > N - 1 ? N - 1 : lens[k]), want);
        struct iovec v[2] = {{data + 1, lens[k] / 3}, {data + 1 + lens[k] / 3, 0}};
        v[1].iov_len = (lens[k] > N - 1 ? N - 1 : lens[k]) - v[0].iov_len;
        assert_int_equal(mc_hash64_iov(v, 2), want);
    }
    /* XXH3-64 of "abc" (xxHash's published test vectors for seed 0) */
    assert_int_equal(mc_hash64("abc", 3), 0x78af5f94892f3950ull);
    free(data);
}

/* A load hashes its pieces as they come in (mc_hash64_stream_t): the value
 * is the whole data's at any split, so the file's checksum (the format's,
 * unchanged) verifies it; a wrong byte in any piece, or a piece cut short,
 * is refused. */
static void a_checksum_streamed_in_pieces_verifies_the_file_as_a_whole(void **state)
{
    (void)state;
    enum { N = 3 * 4096 + 777 };
    uint8_t *data = malloc(N);
    assert_non_null(data);
    for (size_t i = 0; i < N; i++)
        data[i] = (uint8_t)(i * 31 + 7);
    uint64_t whole = mc_hash64(data, N);
    /* any split: empty pieces, 1 byte, XXH3's internal block sizes and more */
    static const size_t cuts[][4] = {
        {0, 0, 0, N}, {1, 1, 1, N - 3},          {64, 256, 1024, N - 1344}, {4096, 4096, 4096, 777},
        {N, 0, 0, 0}, {240, 241, 3000, N - 3481}};
    for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
        mc_hash64_stream_t h;
        mc_hash64_begin(&h);
        size_t at = 0;
        for (int k = 0; k < 4; k++) {
            mc_hash64_update(&h, data + at, cuts[c][k]);
            at += cuts[c][k];
        }
        assert_int_equal(at, N);
        assert_int_equal(mc_hash64_end(&h), whole);
    }
    /* a stream placed at an odd address works the same (aligned inside) */
    uint8_t *room = malloc(sizeof(mc_hash64_stream_t) + 8);
    assert_non_null(room);
    mc_hash64_stream_t *odd = (mc_hash64_stream_t *)(void *)(room + 1);
    mc_hash64_begin(odd);
    mc_hash64_update(odd, data, 5000);
    mc_hash64_update(odd, data + 5000, N - 5000);
    assert_int_equal(mc_hash64_end(odd), whole);
    free(room);

    struct iovec v = {data, N};
    assert_int_equal(mc_tier_write_flags(dir, "ps", 2, &v, 1, N, 0, MC_TIER_F_ALIGNED), MC_OK);
    mc_tier_file_t f;
    assert_int_equal(mc_tier_open_read(dir, "ps", 2, N, 0, &f), MC_OK);
    assert_int_equal(mc_tier_verify_sum(&f, N, whole), MC_OK);
    /* a byte changed in any of four pieces: the streamed sum differs */
    for (size_t piece = 0; piece < 4; piece++) {
        size_t at = piece * 4096 + 100;
        data[at] ^= 0x40;
        mc_hash64_stream_t h;
        mc_hash64_begin(&h);
        for (size_t p = 0; p < 4; p++) {
            size_t len = p < 3 ? 4096 : N - 3 * 4096;
            mc_hash64_update(&h, data + p * 4096, len);
        }
        assert_int_equal(mc_tier_verify_sum(&f, N, mc_hash64_end(&h)), MC_ERR_CHECKSUM_MISMATCH);
        data[at] ^= 0x40;
    }
    /* cut short: refused whatever the sum */
    assert_int_equal(mc_tier_verify_sum(&f, N - 1, whole), MC_ERR_CHECKSUM_MISMATCH);
    mc_tier_close(&f);
    free(data);
}

/* A file written (mc_tier_wopen) or opened (mc_tier_open_read) here opens
 * again from what that said (mc_tier_known_t), without its header: the same
 * descriptor state as mc_tier_open_read (data offset, checksum, O_DIRECT for
 * an aligned file); the key's own probe when another key holds its first
 * name; a file gone is not found, one cut short is corrupt. */
typedef struct found_one {
    const char *key;
    int n;
    mc_tier_known_t k;
} found_one_t;

static int find_cb(void *arg, const void *key, size_t klen, const mc_tier_known_t *k)
{
    found_one_t *f = arg;
    if (klen == strlen(f->key) && memcmp(key, f->key, klen) == 0) {
        f->k = *k;
        f->n++;
    }
    return 0;
}

/* A scan tells each file as mc_tier_open_known takes it: the same record
 * its writer got, its probe too (a file under its key's second name). */
static void a_scan_tells_what_opens_a_file_without_its_header(void **state)
{
    (void)state;
    enum { N = 4096 + 77 };
    static uint8_t data[N];
    for (size_t i = 0; i < N; i++)
        data[i] = (uint8_t)(i * 7 + 3);
    struct iovec v = {data, N};
    char pa[512];
    plant("B3", "A3", pa, sizeof(pa)); /* A3's first name holds B3's file: A3 goes to ~1 */
    mc_tier_wfile_t w;
    assert_int_equal(mc_tier_wopen(dir, "A3", 2, &v, 1, N, MC_TIER_F_ALIGNED, &w), MC_OK);
    assert_int_equal(mc_tier_wcommit(&w, 0, 0), MC_OK);
    assert_int_equal(w.known.probe, 1);
    found_one_t f = {.key = "A3"};
    mc_tier_scan_stats_t st;
    assert_int_equal(mc_tier_scan_owned(dir, 1000, find_cb, &f, &st), MC_OK);
    assert_int_equal(f.n, 1);
    assert_memory_equal(&f.k, &w.known, sizeof(w.known));
    mc_tier_file_t b;
    assert_int_equal(mc_tier_open_known(dir, "A3", 2, &f.k, 0, &b), MC_OK);
    uint8_t got[N];
    assert_int_equal(pread(b.fd, got, N, (off_t)b.data_off), N);
    assert_memory_equal(got, data, N);
    assert_int_equal(mc_tier_verify(&b, got, N), MC_OK);
    mc_tier_close(&b);
}

static void a_known_file_opens_without_its_header(void **state)
{
    (void)state;
    enum { N = 2 * 4096 + 300 };
    static uint8_t data[N];
    for (size_t i = 0; i < N; i++)
        data[i] = (uint8_t)(i * 13 + 1);
    struct iovec v = {data, N};
    mc_tier_wfile_t w;
    assert_int_equal(mc_tier_wopen(dir, "kn", 2, &v, 1, N, MC_TIER_F_ALIGNED, &w), MC_OK);
    assert_int_equal(mc_tier_wcommit(&w, 0, 0), MC_OK);
    assert_int_equal(w.known.probe, 0);
    assert_int_equal(w.known.flags, MC_TIER_F_ALIGNED);
    assert_int_equal(w.known.size, N);
    assert_int_equal(w.known.checksum, mc_hash64(data, N));
    mc_tier_file_t a, b;
    assert_int_equal(mc_tier_open_read(dir, "kn", 2, N, 1, &a), MC_OK);
    assert_memory_equal(&a.known, &w.known, sizeof(w.known));
    assert_int_equal(mc_tier_open_known(dir, "kn", 2, &w.known, 1, &b), MC_OK);
    assert_int_equal(b.data_off, a.data_off);
    assert_int_equal(b.size, a.size);
    assert_int_equal(b.checksum, a.checksum);
    assert_int_equal(b.direct, a.direct);
    assert_string_equal(b.path, a.path);
    /* its header is not read: a header changed since does not matter, the
     * data is checked against the known checksum (this one's whole bytes) */
    int fd = open(a.path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "XXXXXXXX", 8, 0), 8);
    close(fd);
    mc_tier_close(&b);
    assert_int_equal(mc_tier_open_known(dir, "kn", 2, &w.known, 0, &b), MC_OK);
    assert_false(b.direct);
    uint8_t *got = malloc(N);
    assert_non_null(got);
    assert_int_equal(pread(b.fd, got, N, (off_t)b.data_off), N);
    assert_memory_equal(got, data, N);
    assert_int_equal(mc_tier_verify(&b, got, N), MC_OK);
    got[N - 1] ^= 1; /* a data byte changed: refused by the known checksum */
    assert_int_equal(mc_tier_verify(&b, got, N), MC_ERR_CHECKSUM_MISMATCH);
    mc_tier_close(&b);
    mc_tier_close(&a);
    free(got);
    /* cut short: corrupt; gone: not found; a probe out of range: refused */
    assert_int_equal(truncate(a.path, (off_t)(a.data_off + N - 1)), 0);
    assert_int_equal(mc_tier_open_known(dir, "kn", 2, &w.known, 1, &b), MC_ERR_CHECKSUM_MISMATCH);
    assert_int_equal(b.fd, -1);
    assert_int_equal(unlink(a.path), 0);
    assert_int_equal(mc_tier_open_known(dir, "kn", 2, &w.known, 1, &b), MC_ERR_FILE_NOT_FOUND);
    mc_tier_known_t bad = w.known;
    bad.probe = MC_TIER_PROBES;
    assert_int_equal(mc_tier_open_known(dir, "kn", 2, &bad, 1, &b), MC_ERR_INVALID_PARAMS);

    /* a key whose first name another key holds: its own probe (1) */
    char pa[512];
    plant("B2", "A2", pa, sizeof(pa));
    struct iovec va = {"aaa", 3};
    assert_int_equal(mc_tier_wopen(dir, "A2", 2, &va, 1, 3, 0, &w), MC_OK);
    assert_int_equal(mc_tier_wcommit(&w, 0, 0), MC_OK);
    assert_int_equal(w.known.probe, 1);
    assert_int_equal(w.known.flags, 0);
    assert_int_equal(mc_tier_open_known(dir, "A2", 2, &w.known, 1, &b), MC_OK);
    assert_false(b.direct); /* not an aligned file: buffered */
    char out[3];
    assert_int_equal(pread(b.fd, out, 3, (off_t)b.data_off), 3);
    assert_memory_equal(out, "aaa", 3);
    mc_tier_close(&b);
    assert_int_equal(mc_tier_open_read(dir, "A2", 2, 3, 1, &a), MC_OK);
    assert_int_equal(a.known.probe, 1);
    mc_tier_close(&a);
}

/* MC_TIER_W_DIRECT: an aligned file whose data is one piece aligned in
 * memory is written with O_DIRECT (where the file system allows it: probed
 * here), a last partial block included, and the file is cut to its size;
 * data not aligned in memory, or a file not MC_TIER_F_ALIGNED, goes through
 * the page cache. Either way the file reads back byte for byte. */
static void direct_writes_keep_the_format_and_fall_back_when_unaligned(void **state)
{
    (void)state;
    char probe[600];
    snprintf(probe, sizeof(probe), "%s/.probe", dir);
    int pfd = open(probe, O_WRONLY | O_CREAT | O_DIRECT, 0600);
    int can_direct = pfd >= 0;
    if (pfd >= 0)
        close(pfd);
    unlink(probe);
    enum { N = 3 * 4096 + 100 };
    uint8_t *mem = aligned_alloc(4096, 5 * 4096); /* a multiple of the alignment (C11) */
    uint8_t *out = malloc(N);
    assert_non_null(mem);
    assert_non_null(out);
    for (size_t i = 0; i < N + 4096; i++)
        mem[i] = (uint8_t)(i * 7 + 3);
    static const struct {
        const char *key;
        size_t skew; /* bytes past an aligned address */
        uint64_t size;
        unsigned flags;
        int direct; /* expected when the file system allows O_DIRECT */
    } cases[] = {
        {"d-tail", 0, N, MC_TIER_F_ALIGNED | MC_TIER_W_DIRECT, 1},
        {"d-whole", 0, 2 * 4096, MC_TIER_F_ALIGNED | MC_TIER_W_DIRECT, 1},
        {"d-small", 0, 10, MC_TIER_F_ALIGNED | MC_TIER_W_DIRECT, 1},
        {"d-skew", 8, N, MC_TIER_F_ALIGNED | MC_TIER_W_DIRECT, 0},
        {"d-unaligned-file", 0, N, MC_TIER_W_DIRECT, 0},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *k = cases[c].key;
        struct iovec v = {mem + cases[c].skew, cases[c].size};
        mc_tier_wfile_t w;
        assert_int_equal(mc_tier_wopen(dir, k, strlen(k), &v, 1, cases[c].size, cases[c].flags, &w),
                         MC_OK);
        assert_int_equal(w.direct, cases[c].direct && can_direct);
        assert_int_equal(w.known.flags, cases[c].flags & MC_TIER_F_ALIGNED); /* not W_DIRECT */
        assert_int_equal(mc_tier_wcommit(&w, fsync(w.fd) == 0 ? 0 : errno, 0), MC_OK);
        struct stat sb;
        assert_int_equal(stat(w.path, &sb), 0);
        assert_int_equal((uint64_t)sb.st_size,
                         mc_tier_data_off(strlen(k), cases[c].flags) + cases[c].size);
        uint64_t size = 0;
        memset(out, 0, N);
        assert_int_equal(mc_tier_read(dir, k, strlen(k), out, N, cases[c].size, &size), MC_OK);
        assert_int_equal(size, cases[c].size);
        assert_memory_equal(out, mem + cases[c].skew, cases[c].size);
    }
    free(mem);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_are_safe_and_never_start_with_a_dot),
        cmocka_unit_test(distinct_keys_get_distinct_names),
        cmocka_unit_test(long_keys_end_in_their_hash_and_stay_under_name_max),
        cmocka_unit_test(binary_keys_are_escaped),
        cmocka_unit_test(headers_round_trip),
        cmocka_unit_test(truncated_or_corrupt_headers_are_refused_with_a_reason),
        cmocka_unit_test_setup_teardown(files_round_trip_and_are_refused_when_corrupt, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_name_taken_by_another_key_moves_to_the_next_suffix, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            a_scan_reports_every_file_once_skips_bad_ones_and_clears_stale_temps, setup, teardown),
        cmocka_unit_test_setup_teardown(
            a_scan_with_threads_reports_each_file_once_on_the_callers_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(
            aligned_files_keep_their_data_at_4096_and_open_for_direct_reads, setup, teardown),
        cmocka_unit_test(unknown_header_flags_are_refused),
        cmocka_unit_test_setup_teardown(an_owned_scan_deletes_temp_and_cut_short_files, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_write_in_steps_shows_the_new_file_only_once_committed,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_known_file_opens_without_its_header, setup, teardown),
        cmocka_unit_test_setup_teardown(a_scan_tells_what_opens_a_file_without_its_header, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(direct_writes_keep_the_format_and_fall_back_when_unaligned,
                                        setup, teardown),
        cmocka_unit_test(long_and_short_inputs_hash_to_xxh3s_frozen_values),
        cmocka_unit_test_setup_teardown(a_checksum_streamed_in_pieces_verifies_the_file_as_a_whole,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
