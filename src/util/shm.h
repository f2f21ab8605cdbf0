/*
 * shm.h - shared memory between processes of one host: memfd-backed
 * regions, abstract unix sockets that pass file descriptors (SCM_RIGHTS),
 * the peer's credentials, and this host's identity (hostname + boot id).
 *
 * The one wrapper of these syscalls: every failure comes back as an
 * mc_status_t, logged once here with the cause and what was being done
 * ("cannot create 4 GiB of shared memory: ..."), so callers only decide.
 *
 * Threads: every function may be called from any thread; the socket calls
 * block (bounded by their timeout).
 */
#ifndef MC_UTIL_SHM_H
#define MC_UTIL_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mooncake/status.h"

/* A mapped memfd. */
typedef struct mc_shm {
    int fd;
    void *base;
    uint64_t len; /* mapped bytes (a multiple of the page size used) */
    int huge;     /* backed by hugetlb pages */
} mc_shm_t;

/* The hugetlb page size asked for (mc_shm_create's huge; a segment's
 * MAP_HUGETLB, store/client.c): 2 MiB whatever the system's default. */
#define MC_SHM_HUGE_PAGE (2ull << 20)

/* len rounded up to whole MC_SHM_HUGE_PAGE pages. */
static inline uint64_t mc_shm_huge_round(uint64_t len)
{
    return (len + MC_SHM_HUGE_PAGE - 1) & ~(MC_SHM_HUGE_PAGE - 1);
}

/* mc_shm_create's huge. */
enum {
    MC_SHM_NORMAL = 0,  /* normal pages (THP where shmem_enabled says so) */
    MC_SHM_HUGETLB = 1, /* a hugetlb memfd (2 MiB pages) when the host has
                         * enough free, else as MC_SHM_THP (logged) */
    /* normal pages made into 2 MiB transparent huge pages at once, where the
     * kernel can (MADV_COLLAPSE: Linux 6.1, whatever the sysfs settings;
     * giving up after 16 in a row it could not make), logged with the count
     * and the time. For memory that devices read into: a 4 MiB O_DIRECT
     * read into scattered 4 KiB pages is cut into requests of at most
     * max_segments runs, each run a descriptor the device handles (the test
     * VM's disk reads 40% slower into them). Costs time here: ~3x the plain
     * reserve (0.4 s per GiB on the test VM), bounded (mc_shm_thp_budget_set:
     * free memory so fragmented that each page costs a compaction). */
    MC_SHM_THP = 2,
};

/* Make len bytes (rounded up to pages: to 2 MiB when huge) of shared memory, mapped read-write
 * at a 2 MiB-aligned address (when that long), zeroed. huge: MC_SHM_*. The
 * memory is reserved at once (fallocate), so a shortage shows here and not
 * as SIGBUS later. MC_OK; MC_ERR_INVALID_ARGUMENT (len 0, huge not MC_SHM_*); MC_ERR_NOMEM (more
 * than the host has available, or the memory limit of the process or its cgroup: the message says
 * which and how much there is); MC_ERR_LIMIT (the open-file limit, or RLIMIT_FSIZE);
 * MC_ERR_NOT_SUPPORTED (no memfd in this kernel). */
mc_status_t mc_shm_create(const char *name, uint64_t len, int huge, mc_shm_t *out);

/* MC_SHM_THP's time limit: huge pages are made for at most base_us +
 * per_gib_us per GiB of the region, the rest reserved as 4 KiB pages (a
 * warning says how many were made). Default 1 s + 0.7 s per GiB; for
 * tests. */
void mc_shm_thp_budget_set(uint64_t base_us, uint64_t per_gib_us);

/* Map a region received from another process: fd must be a memfd of at
 * least len bytes (checked with fstat) sealed against shrinking (as
 * mc_shm_create seals its own: the sender cannot cut pages we access). The
 * fd is not closed. MC_OK, MC_ERR_INVALID_ARGUMENT (too small, not a sealed
 * memfd), MC_ERR_NOMEM. */
mc_status_t mc_shm_map(int fd, uint64_t len, int writable, void **out);

/* Unmap and close. NULL and a zeroed struct are fine. */
void mc_shm_destroy(mc_shm_t *s);

/* Abstract unix sockets (SOCK_SEQPACKET: message boundaries kept). `name`
 * is the abstract name without its leading NUL (at most 100 bytes).
 * Listening on a name another process holds is MC_ERR_ADDRESS_IN_USE. */
mc_status_t mc_unix_listen(const char *name, int *fd_out);
/* Connect, with a send/receive timeout on the socket. MC_OK;
 * MC_ERR_CONN_CLOSED (nobody listens there); MC_ERR_SOCKET. */
mc_status_t mc_unix_connect(const char *name, uint64_t timeout_us, int *fd_out);

/* One message, with a descriptor attached when fd >= 0. MC_OK,
 * MC_ERR_CONN_CLOSED, MC_ERR_TIMEOUT, MC_ERR_SOCKET. */
mc_status_t mc_unix_send(int sock, const void *msg, size_t len, int fd);
/* One message (truncated to cap: MC_ERR_PROTOCOL) and the descriptor it
 * carried (*fd = -1 when none; extra ones are closed). MC_OK,
 * MC_ERR_CONN_CLOSED (peer gone), MC_ERR_TIMEOUT, MC_ERR_PROTOCOL,
 * MC_ERR_SOCKET. */
mc_status_t mc_unix_recv(int sock, void *msg, size_t cap, size_t *got, int *fd);

/* The connected peer's credentials (SO_PEERCRED). */
mc_status_t mc_unix_peer(int sock, pid_t *pid, uid_t *uid, gid_t *gid);
/* May the peer on sock use what we share? Same effective uid, or (group !=
 * (gid_t)-1) the group is its primary or one of its supplementary groups.
 * *why gets a reason when it may not. */
int mc_unix_peer_allowed(int sock, gid_t group, char *why, size_t whylen);
/* A group name or number -> gid. MC_OK or MC_ERR_INVALID_ARGUMENT. */
mc_status_t mc_group_id(const char *name, gid_t *out);

/* This host: hostname and the kernel's boot id (/proc/sys/kernel/random/
 * boot_id). Two processes share memory only when both match. The boot id
 * can be faked with $MC_SHM_BOOT_ID (tests of the cross-host path). */
void mc_host_identity(char *host, size_t hostlen, char *boot, size_t bootlen);

#endif /* MC_UTIL_SHM_H */
