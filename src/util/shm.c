/*
 * shm.c - memfd regions, fd passing over abstract unix sockets, peer
 * credentials, host identity (see shm.h). The syscalls' -1 + errno become
 * mc_status_t here, with one log line naming the cause.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/log.h"
#include "util/shm.h"
#include "util/time.h"

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << 26) /* log2(2 MiB) << MFD_HUGE_SHIFT */
#endif

static void fmt_size(uint64_t n, char *out, size_t len)
{
    if (n >= (1ull << 30) && n % (1ull << 30) == 0)
        snprintf(out, len, "%llu GiB", (unsigned long long)(n >> 30));
    else if (n >= (1ull << 20))
        snprintf(out, len, "%.1f MiB", (double)n / (1 << 20));
    else
        snprintf(out, len, "%llu bytes", (unsigned long long)n);
}

/* A field of /proc/meminfo in bytes, or -1. */
static long long meminfo(const char *field)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, fl) == 0 && line[fl] == ':') {
            v = strtoll(line + fl + 1, NULL, 10) * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

/* Why creating or filling a memfd failed, as a status with the cause
 * logged. */
static mc_status_t create_error(const char *name, uint64_t len, const char *what, int err)
{
    char sz[32];
    fmt_size(len, sz, sizeof(sz));
    switch (err) {
    case EMFILE:
    case ENFILE: {
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        MC_ERROR(CORE,
                 "cannot create %s of shared memory '%s': %s: %s (open-file limit %llu; raise "
                 "it with ulimit -n)",
                 sz, name, what, strerror(err), (unsigned long long)rl.rlim_cur);
        return MC_ERR_LIMIT;
    }
    case EFBIG: {
        struct rlimit rl;
        getrlimit(RLIMIT_FSIZE, &rl);
        MC_ERROR(CORE,
                 "cannot create %s of shared memory '%s': %s: %s (the file-size limit "
                 "RLIMIT_FSIZE is %llu bytes; ulimit -f)",
                 sz, name, what, strerror(err), (unsigned long long)rl.rlim_cur);
        return MC_ERR_LIMIT;
    }
    case ENOSPC:
    case ENOMEM: {
        char av[32] = "?";
        long long a = meminfo("MemAvailable");
        if (a >= 0)
            fmt_size((uint64_t)a, av, sizeof(av));
        MC_ERROR(CORE,
                 "cannot create %s of shared memory '%s': %s: %s (MemAvailable %s; the memory "
                 "limit of this process's cgroup may be lower)",
                 sz, name, what, strerror(err), av);
        return MC_ERR_NOMEM;
    }
    case ENOSYS:
    case EINVAL:
        MC_ERROR(CORE, "cannot create shared memory '%s': %s: %s (memfd needs Linux 3.17)", name,
                 what, strerror(err));
        return MC_ERR_NOT_SUPPORTED;
    default:
        MC_ERROR(CORE, "cannot create %s of shared memory '%s': %s: %s", sz, name, what,
                 strerror(err));
        return MC_ERR_MEMORY;
    }
}

/* Map fd's len bytes shared and writable, at an address aligned to
 * MC_SHM_HUGE_PAGE when len is at least one such page: a huge page can back
 * an aligned 2 MiB only (MC_SHM_THP, shmem THP, hugetlb). */
static void *map_aligned(int fd, uint64_t len)
{
    if (len < MC_SHM_HUGE_PAGE)
        return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    /* a span one page longer, reserved, then the region put at its first
     * aligned address and the rest given back */
    uint64_t span = len + MC_SHM_HUGE_PAGE;
    uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return MAP_FAILED;
    uint8_t *a =
        (uint8_t *)(((uintptr_t)r + MC_SHM_HUGE_PAGE - 1) & ~(uintptr_t)(MC_SHM_HUGE_PAGE - 1));
    void *p = mmap(a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        int err = errno;
        munmap(r, span);
        errno = err;
        return MAP_FAILED;
    }
    if (a > r)
        munmap(r, (size_t)(a - r));
    if (r + span > a + len)
        munmap(a + len, (size_t)(r + span - (a + len)));
    return p;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif
/* MC_SHM_THP gives up on huge pages after this many 2 MiB pages in a row
 * the kernel could not make (memory too fragmented to compact): the rest
 * would cost as much for as little. */
#define COLLAPSE_FAILS_MAX 16
/* ... and after this long (1 s + 0.7 s per GiB; mc_shm_thp_budget_set):
 * where free memory is fragmented each 2 MiB page costs a compaction (3.2 s
 * per GiB measured on the test VM right after a memory-heavy run, 0.25-0.35
 * s per GiB otherwise), and a start that takes minutes is worse than the
 * rest of the region in 4 KiB pages. */
#define THP_BUDGET_BASE_US 1000000ull
#define THP_BUDGET_PER_GIB_US 700000ull
static _Atomic uint64_t thp_budget_base_us = THP_BUDGET_BASE_US;
static _Atomic uint64_t thp_budget_per_gib_us = THP_BUDGET_PER_GIB_US;

void mc_shm_thp_budget_set(uint64_t base_us, uint64_t per_gib_us)
{
    atomic_store(&thp_budget_base_us, base_us);
    atomic_store(&thp_budget_per_gib_us, per_gib_us);
}

/* Reserve the pages of fd (mapped at p, len bytes) 2 MiB at a time, each
 * made into one huge page where the kernel can (MADV_COLLAPSE, whatever the
 * transparent_hugepage settings say). One piece at a time: its 4 KiB pages
 * are still in the cache when they are copied, and the next piece reuses
 * the ones given back (3x a plain fallocate on the test VM, against 7-37x
 * for all reserved first). 0 or fallocate's error; *huge: the bytes in
 * huge pages; *over_budget: 1 when it stopped making them at the time
 * limit. */
static int reserve_thp(int fd, uint8_t *p, uint64_t len, uint64_t *huge, int *over_budget)
{
    unsigned fails = 0;
    int collapse = ((uintptr_t)p % MC_SHM_HUGE_PAGE) == 0;
    uint64_t t0 = mc_now_us();
    uint64_t budget =
        atomic_load(&thp_budget_base_us) + (uint64_t)((double)atomic_load(&thp_budget_per_gib_us) *
                                                      (double)len / (double)(1ull << 30));
    *huge = 0;
    *over_budget = 0;
    for (uint64_t off = 0; off < len; off += MC_SHM_HUGE_PAGE) {
        uint64_t n = len - off < MC_SHM_HUGE_PAGE ? len - off : MC_SHM_HUGE_PAGE;
        int rc = posix_fallocate(fd, (off_t)off, (off_t)n);
        if (rc != 0)
            return rc;
        if (!collapse || n < MC_SHM_HUGE_PAGE)
            continue;
        if (mc_now_us() - t0 > budget) {
            collapse = 0; /* the rest as plain pages */
            *over_budget = 1;
            continue;
        }
        if (madvise(p + off, n, MADV_COLLAPSE) == 0) {
            *huge += n;
            fails = 0;
        } else if (errno == EINVAL || errno == ENOSYS || errno == EPERM ||
                   ++fails >= COLLAPSE_FAILS_MAX) {
            collapse = 0; /* no MADV_COLLAPSE (Linux < 6.1), or no more to be had */
        }
    }
    return 0;
}

/* One attempt: memfd (hugetlb or not), size, reserve, map. */
static mc_status_t try_create(const char *name, uint64_t len, int huge, mc_shm_t *out, int quiet)
{
    /* 2 MiB pages whatever the system's default size (the lengths are
     * rounded to them) */
    int hugetlb = huge == MC_SHM_HUGETLB;
    unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING | (hugetlb ? MFD_HUGETLB | MFD_HUGE_2MB : 0);
    int fd = (int)memfd_create(name, flags);
    if (fd < 0)
        return quiet ? MC_ERR_NOT_SUPPORTED : create_error(name, len, "memfd_create", errno);
    mc_status_t st = MC_OK;
    if (ftruncate(fd, (off_t)len) != 0) {
        st = quiet ? MC_ERR_NOMEM : create_error(name, len, "ftruncate", errno);
        goto err_close;
    }
    /* reserve now: a shortage is an error here, not a SIGBUS at first touch
     * (hugetlb reserves at mmap instead: fallocate may not be supported;
     * MC_SHM_THP once mapped) */
    if (huge == MC_SHM_NORMAL) {
        int rc = posix_fallocate(fd, 0, (off_t)len);
        if (rc != 0 && rc != EOPNOTSUPP) {
            st = create_error(name, len, "reserving the pages (fallocate)", rc);
            goto err_close;
        }
    }
    /* its size is final: a process it is shared with can rely on every
     * byte staying there (mc_shm_map checks the seal) */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        st = quiet ? MC_ERR_NOT_SUPPORTED : create_error(name, len, "sealing its size", errno);
        goto err_close;
    }
    void *p = map_aligned(fd, len);
    if (p == MAP_FAILED) {
        st = quiet ? MC_ERR_NOMEM : create_error(name, len, "mmap", errno);
        goto err_close;
    }
    if (huge == MC_SHM_THP) {
        uint64_t t0 = mc_now_us(), in_huge = 0;
        int over = 0;
        madvise(p, len, MADV_HUGEPAGE); /* kept so by khugepaged, where it runs */
        int rc = reserve_thp(fd, p, len, &in_huge, &over);
        if (rc != 0 && rc != EOPNOTSUPP) {
            munmap(p, len);
            st = create_error(name, len, "reserving the pages (fallocate)", rc);
            goto err_close;
        }
        uint64_t ms = (mc_now_us() - t0) / 1000;
        if (over)
            MC_WARN(CORE,
                    "shared memory '%s': %llu of %llu MiB in 2 MiB pages (%llu ms), the rest in "
                    "4 KiB pages: the kernel made them too slowly (free memory fragmented)",
                    name, (unsigned long long)(in_huge >> 20), (unsigned long long)(len >> 20),
                    (unsigned long long)ms);
        else
            MC_INFO(CORE, "shared memory '%s': %llu of %llu MiB in 2 MiB pages (%llu ms)", name,
                    (unsigned long long)(in_huge >> 20), (unsigned long long)(len >> 20),
                    (unsigned long long)ms);
    }
    out->fd = fd;
    out->base = p;
    out->len = len;
    out->huge = hugetlb;
    return MC_OK;
err_close:
    close(fd);
    return st;
}

mc_status_t mc_shm_create(const char *name, uint64_t len, int huge, mc_shm_t *out)
{
    if (len == 0 || name == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    if (huge != MC_SHM_NORMAL && huge != MC_SHM_HUGETLB && huge != MC_SHM_THP)
        return MC_ERR_INVALID_ARGUMENT;
    if (huge == MC_SHM_HUGETLB) {
        uint64_t hl = mc_shm_huge_round(len);
        if (try_create(name, hl, MC_SHM_HUGETLB, out, 1) == MC_OK)
            return MC_OK;
        long long hfree = meminfo("HugePages_Free");
        MC_WARN(CORE,
                "shared memory '%s': no hugetlb memfd of %llu bytes (HugePages_Free %lld; "
                "/proc/sys/vm/nr_hugepages): using normal pages made into transparent huge "
                "pages where the kernel can",
                name, (unsigned long long)hl, hfree >= 0 ? hfree / 1024 : -1);
    }
    long page = sysconf(_SC_PAGESIZE);
    uint64_t normal = huge != MC_SHM_NORMAL ? mc_shm_huge_round(len) /* its tail too */
                                            : (len + (uint64_t)page - 1) & ~(uint64_t)(page - 1);
    /* more than the host can give fails now, clearly, instead of the
     * fallocate pushing the host into swap or the OOM killer (normal
     * pages only: the hugetlb pool is not in MemAvailable) */
    long long avail = meminfo("MemAvailable");
    long long swap = meminfo("SwapFree");
    if (avail >= 0 && normal > (uint64_t)avail + (uint64_t)(swap > 0 ? swap : 0)) {
        char sz[32], av[32];
        fmt_size(normal, sz, sizeof(sz));
        fmt_size((uint64_t)avail, av, sizeof(av));
        MC_ERROR(CORE,
                 "cannot create %s of shared memory '%s': the host has %s available "
                 "(MemAvailable, plus free swap)",
                 sz, name, av);
        return MC_ERR_NOMEM;
    }
    /* (hugetlb asked for and too few free: huge pages the kernel makes) */
    return try_create(name, normal, huge == MC_SHM_NORMAL ? MC_SHM_NORMAL : MC_SHM_THP, out, 0);
}

mc_status_t mc_shm_map(int fd, uint64_t len, int writable, void **out)
{
    struct stat sb;
    if (fd < 0 || len == 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
        (uint64_t)sb.st_size < len) {
        MC_ERROR(CORE, "cannot map shared memory: descriptor %d is not a memfd of %llu bytes", fd,
                 (unsigned long long)len);
        return MC_ERR_INVALID_ARGUMENT;
    }
    /* a memfd its sender could shrink would turn our accesses past its new
     * end into SIGBUS: only sealed ones (mc_shm_create's) are mapped */
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        MC_ERROR(CORE,
                 "cannot map shared memory: descriptor %d is not a memfd sealed against "
                 "shrinking (F_SEAL_SHRINK): its sender could cut it under us",
                 fd);
        return MC_ERR_INVALID_ARGUMENT;
    }
    int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    void *p = mmap(NULL, len, prot, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        MC_ERROR(CORE, "cannot map %llu bytes of shared memory: %s", (unsigned long long)len,
                 strerror(errno));
        return MC_ERR_NOMEM;
    }
    *out = p;
    return MC_OK;
}

void mc_shm_destroy(mc_shm_t *s)
{
    if (s == NULL)
        return;
    if (s->base != NULL && s->len > 0)
        munmap(s->base, s->len);
    if (s->fd > 0)
        close(s->fd);
    s->base = NULL;
    s->len = 0;
    s->fd = -1;
}

/* ----------------------------------------------------------- sockets */

static socklen_t abstract_addr(const char *name, struct sockaddr_un *a)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n > sizeof(a->sun_path) - 2)
        n = sizeof(a->sun_path) - 2;
    memcpy(a->sun_path + 1, name, n); /* sun_path[0] = 0: abstract */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

mc_status_t mc_unix_listen(const char *name, int *fd_out)
{
    struct sockaddr_un a;
    socklen_t al = abstract_addr(name, &a);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        MC_ERROR(CORE, "cannot make a unix socket for '@%s': %s", name, strerror(errno));
        return errno == EMFILE || errno == ENFILE ? MC_ERR_LIMIT : MC_ERR_SOCKET;
    }
    if (bind(fd, (struct sockaddr *)&a, al) != 0) {
        int e = errno;
        close(fd);
        if (e == EADDRINUSE) {
            MC_ERROR(CORE, "unix socket '@%s' is in use: another process serves it", name);
            return MC_ERR_EXISTS;
        }
        MC_ERROR(CORE, "cannot bind unix socket '@%s': %s", name, strerror(e));
        return MC_ERR_SOCKET;
    }
    if (listen(fd, 128) != 0) {
        MC_ERROR(CORE, "cannot listen on unix socket '@%s': %s", name, strerror(errno));
        close(fd);
        return MC_ERR_SOCKET;
    }
    *fd_out = fd;
    return MC_OK;
}

static void set_timeouts(int fd, uint64_t timeout_us)
{
    struct timeval tv = {.tv_sec = (time_t)(timeout_us / 1000000),
                         .tv_usec = (suseconds_t)(timeout_us % 1000000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

mc_status_t mc_unix_connect(const char *name, uint64_t timeout_us, int *fd_out)
{
    struct sockaddr_un a;
    socklen_t al = abstract_addr(name, &a);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        MC_WARN(CORE, "cannot make a unix socket: %s", strerror(errno));
        return errno == EMFILE || errno == ENFILE ? MC_ERR_LIMIT : MC_ERR_SOCKET;
    }
    set_timeouts(fd, timeout_us);
    if (connect(fd, (struct sockaddr *)&a, al) != 0) {
        int e = errno;
        close(fd);
        if (e == ECONNREFUSED || e == ENOENT) {
            MC_DEBUG(CORE, "unix socket '@%s': nobody listens (%s)", name, strerror(e));
            return MC_ERR_CONN_CLOSED;
        }
        MC_WARN(CORE, "cannot connect to unix socket '@%s': %s", name, strerror(e));
        return e == EAGAIN || e == ETIMEDOUT ? MC_ERR_TIMEOUT : MC_ERR_SOCKET;
    }
    *fd_out = fd;
    return MC_OK;
}

static mc_status_t io_status(int e)
{
    if (e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT)
        return MC_ERR_TIMEOUT;
    if (e == EPIPE || e == ECONNRESET || e == ENOTCONN)
        return MC_ERR_CONN_CLOSED;
    return MC_ERR_SOCKET;
}

mc_status_t mc_unix_send(int sock, const void *msg, size_t len, int fd)
{
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&u, 0, sizeof(u));
        mh.msg_control = u.buf;
        mh.msg_controllen = sizeof(u.buf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    ssize_t n;
    do
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return io_status(errno);
    return (size_t)n == len ? MC_OK : MC_ERR_SOCKET;
}

mc_status_t mc_unix_recv(int sock, void *msg, size_t cap, size_t *got, int *fd)
{
    struct iovec iov = {.iov_base = msg, .iov_len = cap};
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    *fd = -1;
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return io_status(errno);
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nfd; i++) {
            int x;
            memcpy(&x, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (*fd < 0)
                *fd = x;
            else
                close(x); /* one descriptor per message: the others are dropped */
        }
    }
    if (n == 0) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return MC_ERR_CONN_CLOSED;
    }
    if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return MC_ERR_PROTOCOL;
    }
    *got = (size_t)n;
    return MC_OK;
}

mc_status_t mc_unix_peer(int sock, pid_t *pid, uid_t *uid, gid_t *gid)
{
    struct ucred cr;
    socklen_t l = sizeof(cr);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &l) != 0)
        return MC_ERR_SOCKET;
    *pid = cr.pid;
    *uid = cr.uid;
    *gid = cr.gid;
    return MC_OK;
}

/* Is gid among pid's supplementary groups (/proc/PID/status, Groups:)? */
static int in_groups(pid_t pid, gid_t gid)
{
    char path[64], line[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    int found = 0;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "Groups:", 7) != 0)
            continue;
        char *p = line + 7, *end;
        for (;;) {
            unsigned long g = strtoul(p, &end, 10);
            if (end == p)
                break;
            if ((gid_t)g == gid)
                found = 1;
            p = end;
        }
        break;
    }
    fclose(f);
    return found;
}

int mc_unix_peer_allowed(int sock, gid_t group, char *why, size_t whylen)
{
    pid_t pid;
    uid_t uid;
    gid_t gid;
    if (mc_unix_peer(sock, &pid, &uid, &gid) != MC_OK) {
        snprintf(why, whylen, "its credentials are unknown (SO_PEERCRED: %s)", strerror(errno));
        return 0;
    }
    if (uid == geteuid())
        return 1;
    if (group != (gid_t)-1 && (gid == group || in_groups(pid, group)))
        return 1;
    snprintf(why, whylen,
             "process %d runs as uid %u, not %u%s (same user, or a member of the configured "
             "group)",
             (int)pid, (unsigned)uid, (unsigned)geteuid(),
             group != (gid_t)-1 ? " and is not in the group" : "");
    return 0;
}

mc_status_t mc_group_id(const char *name, gid_t *out)
{
    if (name == NULL || *name == '\0')
        return MC_ERR_INVALID_ARGUMENT;
    char *end = NULL;
    unsigned long g = strtoul(name, &end, 10);
    if (end != name && *end == '\0') {
        *out = (gid_t)g;
        return MC_OK;
    }
    struct group gr, *res = NULL;
    char buf[4096];
    if (getgrnam_r(name, &gr, buf, sizeof(buf), &res) != 0 || res == NULL) {
        MC_ERROR(CORE, "unknown group '%s'", name);
        return MC_ERR_INVALID_ARGUMENT;
    }
    *out = gr.gr_gid;
    return MC_OK;
}

void mc_host_identity(char *host, size_t hostlen, char *boot, size_t bootlen)
{
    if (gethostname(host, hostlen) != 0 && hostlen > 0)
        snprintf(host, hostlen, "localhost");
    if (hostlen > 0)
        host[hostlen - 1] = '\0';
    const char *fake = getenv("MC_SHM_BOOT_ID"); /* test hook: another "host" */
    if (fake != NULL && *fake != '\0') {
        snprintf(boot, bootlen, "%s", fake);
        return;
    }
    snprintf(boot, bootlen, "unknown");
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f == NULL)
        return;
    if (fgets(boot, (int)bootlen, f) != NULL)
        boot[strcspn(boot, "\n")] = '\0';
    fclose(f);
}
