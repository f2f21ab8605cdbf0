/*
 * util/shm.c: memfd regions (zeroed, shared between mappings, limits
 * reported as clear statuses; in 2 MiB pages for devices), descriptors passed over abstract unix
 * sockets, a second listener on a name refused, peer credentials, groups,
 * host identity.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/log.h"
#include "test/thp.h"
#include "util/shm.h"

static void a_region_is_zeroed_and_seen_by_a_second_mapping(void **state)
{
    (void)state;
    mc_shm_t s;
    assert_int_equal(mc_shm_create("t", 3 * 4096 + 5, 0, &s), MC_OK);
    assert_true(s.len >= 3 * 4096 + 5);
    uint8_t *p = s.base;
    for (size_t i = 0; i < s.len; i++)
        assert_int_equal(p[i], 0);
    void *q = NULL;
    assert_int_equal(mc_shm_map(s.fd, s.len, 1, &q), MC_OK);
    memcpy(p + 100, "hello", 5);
    assert_memory_equal((uint8_t *)q + 100, "hello", 5);
    munmap(q, s.len);
    /* a mapping longer than the memfd is refused */
    assert_int_equal(mc_shm_map(s.fd, s.len + 4096, 1, &q), MC_ERR_INVALID_ARGUMENT);
    /* its size is sealed: it cannot be cut under a process that maps it */
    assert_int_not_equal(ftruncate(s.fd, 4096), 0);
    /* a memfd that is not sealed is not mapped */
    int raw = memfd_create("unsealed", MFD_CLOEXEC);
    assert_true(raw >= 0);
    assert_int_equal(ftruncate(raw, 8192), 0);
    assert_int_equal(mc_shm_map(raw, 8192, 1, &q), MC_ERR_INVALID_ARGUMENT);
    close(raw);
    mc_shm_destroy(&s);
    mc_shm_destroy(&s); /* twice, and NULL: fine */
    mc_shm_destroy(NULL);
}

/* Too few hugetlb pages: normal pages, made into transparent huge pages
 * where the kernel can (MC_SHM_THP). */
static void huge_pages_fall_back_to_normal_pages(void **state)
{
    (void)state;
    mc_shm_t s;
    assert_int_equal(mc_shm_create("t", 1 << 20, MC_SHM_HUGETLB, &s), MC_OK);
    memset(s.base, 1, s.len);
    mc_shm_destroy(&s);
    assert_int_equal(mc_shm_create("t", 4u << 20, MC_SHM_HUGETLB, &s), MC_OK);
    memset(s.base, 1, s.len);
    if (!s.huge && test_thp_possible()) /* (a host with a hugetlb pool gave hugetlb pages) */
        assert_int_equal(test_smaps_pmd_kb(0, s.base, NULL, NULL), 2 * 2048);
    mc_shm_destroy(&s);
}

/* Memory that devices read into (an offload node's segment): 2 MiB pages
 * made at once (MADV_COLLAPSE, Linux 6.1, whatever the sysfs THP settings
 * say but "deny"; the size rounded up to 2 MiB, so its tail too), the
 * contents zeroed and shared as usual; a value of
 * huge that is none of MC_SHM_* is refused. */
static void thp_regions_are_aligned_and_in_huge_pages(void **state)
{
    (void)state;
    mc_shm_t s;
    assert_int_equal(mc_shm_create("t", (8u << 20) + 4096, 7, &s), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_shm_create("t", (8u << 20) + 4096, MC_SHM_THP, &s), MC_OK);
    assert_int_equal(s.len, 10u << 20); /* rounded up to 2 MiB: the tail a huge page too */
    assert_int_equal((uintptr_t)s.base % MC_SHM_HUGE_PAGE, 0);
    uint8_t *p = s.base;
    for (size_t i = 0; i < s.len; i += 512)
        assert_int_equal(p[i], 0);
    void *q = NULL;
    assert_int_equal(mc_shm_map(s.fd, s.len, 1, &q), MC_OK);
    memcpy(p + (4u << 20) + 7, "hello", 5);
    assert_memory_equal((uint8_t *)q + (4u << 20) + 7, "hello", 5);
    munmap(q, s.len);
    if (test_thp_possible()) /* every one of its 5 pages */
        assert_int_equal(test_smaps_pmd_kb(0, s.base, NULL, NULL), 5 * 2048);
    mc_shm_destroy(&s);
}

/* Making huge pages stops at its time limit (free memory so fragmented
 * that each costs a compaction): the rest of the region is reserved in
 * 4 KiB pages, zeroed and usable as ever. With no time at all, none. */
static void thp_regions_give_up_on_huge_pages_at_their_time_limit(void **state)
{
    (void)state;
    mc_shm_t s;
    mc_shm_thp_budget_set(0, 0);
    mc_status_t st = mc_shm_create("t", 8u << 20, MC_SHM_THP, &s);
    mc_shm_thp_budget_set(1000000, 700000); /* the defaults, before any check fails */
    assert_int_equal(st, MC_OK);
    assert_int_equal(s.len, 8u << 20);
    uint8_t *p = s.base;
    for (size_t i = 0; i < s.len; i += 512)
        assert_int_equal(p[i], 0);
    memset(p, 7, s.len);
    if (test_thp_possible() && test_shmem_thp_off())
        assert_int_equal(test_smaps_pmd_kb(0, s.base, NULL, NULL), 0);
    mc_shm_destroy(&s);
    /* and within the limit, all of them */
    assert_int_equal(mc_shm_create("t", 8u << 20, MC_SHM_THP, &s), MC_OK);
    if (test_thp_possible())
        assert_int_equal(test_smaps_pmd_kb(0, s.base, NULL, NULL), 4 * 2048);
    mc_shm_destroy(&s);
}

static void more_than_the_host_has_is_refused_at_once(void **state)
{
    (void)state;
    mc_shm_t s;
    assert_int_equal(mc_shm_create("t", 1ull << 50, 0, &s), MC_ERR_NOMEM);
    assert_int_equal(mc_shm_create("t", 0, 0, &s), MC_ERR_INVALID_ARGUMENT);
}

static void the_file_size_limit_is_reported_as_a_limit(void **state)
{
    (void)state;
    struct rlimit old, rl;
    getrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_IGN);
    rl.rlim_cur = 1 << 20;
    rl.rlim_max = old.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl), 0);
    mc_shm_t s;
    mc_status_t st = mc_shm_create("t", 8 << 20, 0, &s);
    setrlimit(RLIMIT_FSIZE, &old);
    assert_int_equal(st, MC_ERR_LIMIT);
}

static void the_open_file_limit_is_reported_as_a_limit(void **state)
{
    (void)state;
    struct rlimit old, rl;
    getrlimit(RLIMIT_NOFILE, &old);
    int fds[64];
    int n = 0;
    /* fill the table up to a low limit */
    rl.rlim_cur = 32;
    rl.rlim_max = old.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    while (n < 64 && (fds[n] = dup(0)) >= 0)
        n++;
    mc_shm_t s;
    mc_status_t st = mc_shm_create("t", 4096, 0, &s);
    int lfd = -1;
    mc_status_t lst = mc_unix_listen("mc-shm-test-nofile", &lfd);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    setrlimit(RLIMIT_NOFILE, &old);
    assert_int_equal(st, MC_ERR_LIMIT);
    assert_int_equal(lst, MC_ERR_LIMIT);
}

static void a_descriptor_travels_over_a_unix_socket(void **state)
{
    (void)state;
    char name[64];
    snprintf(name, sizeof(name), "mc-shm-test-%d", (int)getpid());
    int lfd = -1, c = -1;
    assert_int_equal(mc_unix_listen(name, &lfd), MC_OK);
    /* a second listener on the same name is refused */
    int lfd2 = -1;
    assert_int_equal(mc_unix_listen(name, &lfd2), MC_ERR_EXISTS);
    assert_int_equal(mc_unix_connect(name, 1000000, &c), MC_OK);
    int a = accept(lfd, NULL, NULL);
    assert_true(a >= 0);
    assert_true(mc_unix_peer_allowed(a, (gid_t)-1, name, sizeof(name)));
    pid_t pid;
    uid_t uid;
    gid_t gid;
    assert_int_equal(mc_unix_peer(a, &pid, &uid, &gid), MC_OK);
    assert_int_equal(pid, getpid());

    mc_shm_t s;
    assert_int_equal(mc_shm_create("t", 8192, 0, &s), MC_OK);
    memcpy(s.base, "shared", 6);
    assert_int_equal(mc_unix_send(a, "map", 3, s.fd), MC_OK);
    char msg[16];
    size_t got = 0;
    int fd = -1;
    assert_int_equal(mc_unix_recv(c, msg, sizeof(msg), &got, &fd), MC_OK);
    assert_int_equal(got, 3);
    assert_true(fd >= 0);
    void *q = NULL;
    assert_int_equal(mc_shm_map(fd, 8192, 0, &q), MC_OK);
    assert_memory_equal(q, "shared", 6);
    munmap(q, 8192);
    close(fd);
    /* a message without a descriptor, then the peer closes */
    assert_int_equal(mc_unix_send(a, "x", 1, -1), MC_OK);
    assert_int_equal(mc_unix_recv(c, msg, sizeof(msg), &got, &fd), MC_OK);
    assert_int_equal(fd, -1);
    /* too long for the buffer: a protocol error */
    assert_int_equal(mc_unix_send(a, "0123456789abcdefXYZ", 19, -1), MC_OK);
    assert_int_equal(mc_unix_recv(c, msg, sizeof(msg), &got, &fd), MC_ERR_PROTOCOL);
    close(a);
    assert_int_equal(mc_unix_recv(c, msg, sizeof(msg), &got, &fd), MC_ERR_CONN_CLOSED);
    close(c);
    close(lfd);
    mc_shm_destroy(&s);
    /* nobody listens any more */
    assert_int_equal(mc_unix_connect(name, 100000, &c), MC_ERR_CONN_CLOSED);
}

static void groups_and_host_identity(void **state)
{
    (void)state;
    gid_t g;
    assert_int_equal(mc_group_id("0", &g), MC_OK);
    assert_int_equal(g, 0);
    assert_int_equal(mc_group_id("root", &g), MC_OK);
    assert_int_equal(g, 0);
    assert_int_equal(mc_group_id("no-such-group-here", &g), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_group_id("", &g), MC_ERR_INVALID_ARGUMENT);
    char host[64], boot[64], boot2[64];
    mc_host_identity(host, sizeof(host), boot, sizeof(boot));
    assert_true(host[0] != '\0');
    assert_int_equal(strlen(boot), 36); /* a uuid */
    setenv("MC_SHM_BOOT_ID", "elsewhere", 1);
    mc_host_identity(host, sizeof(host), boot2, sizeof(boot2));
    unsetenv("MC_SHM_BOOT_ID");
    assert_string_equal(boot2, "elsewhere");
}

int main(void)
{
    mc_log_set_spec(getenv("TEST_LOG") ? getenv("TEST_LOG") : "off", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_region_is_zeroed_and_seen_by_a_second_mapping),
        cmocka_unit_test(huge_pages_fall_back_to_normal_pages),
        cmocka_unit_test(thp_regions_are_aligned_and_in_huge_pages),
        cmocka_unit_test(thp_regions_give_up_on_huge_pages_at_their_time_limit),
        cmocka_unit_test(more_than_the_host_has_is_refused_at_once),
        cmocka_unit_test(the_file_size_limit_is_reported_as_a_limit),
        cmocka_unit_test(the_open_file_limit_is_reported_as_a_limit),
        cmocka_unit_test(a_descriptor_travels_over_a_unix_socket),
        cmocka_unit_test(groups_and_host_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
