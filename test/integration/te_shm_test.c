/*
 * The shm transport across processes: this test's engine against te_target
 * processes ($TEST_BIN_DIR/te_target --shm: its buffers in shared memory) on
 * this host, and te_shm_peer as another initiator process.
 *
 * Covered: the same-host target is chosen for shm and random data of many
 * sizes (1 B .. 64 MiB, unaligned) round-trips byte for byte, as do batches
 * of small requests; requests outside the owner's registered ranges are
 * refused (by the initiator, or by the target once they fall back to tcp)
 * and the target's guard bytes stay intact, also for a buffer the target
 * unregistered after we mapped its memory; a target that says it is on
 * another host (a faked boot id), or has shm off, is reached over tcp; a
 * killed owner is noticed (requests fail, nothing is written into its dead
 * memory) and a restarted one is mapped again; a killed owner's memory is
 * unmapped within seconds without a request; a second initiator process
 * shares the memory; a user the owner does not admit is refused shm (and
 * still served over tcp).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>

#include "mooncake/transfer.h"
#include "te_util.h"
#include "transport/te.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define MIB (1024u * 1024u)
#define LOCAL_SIZE (64u * MIB + 8192u)
#define TIMEOUT_US 2000000u
#define WAIT_US 10000000u

typedef struct env {
    mc_te_t *te;
    uint8_t *src, *dst;
    target_t t;
} env_t;

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

/* Start te_target with up to two extra flags (NULL: none) and read what it
 * prints up to "ready". port 0: any. */
static void target_start(target_t *t, unsigned port, uint64_t size, unsigned seed,
                         const char *extra1, const char *extra2)
{
    char portb[16], sizeb[32];
    snprintf(portb, sizeof(portb), "%u", port);
    snprintf(sizeb, sizeof(sizeb), "%llu", (unsigned long long)size);
    const char *args[] = {"--port", portb, "--size", sizeb, "--no-aslr", extra1, extra2, NULL};
    if (extra1 == NULL)
        args[5] = extra2;
    tt_start(t, seed, args);
}

static mc_te_t *engine_new(void)
{
    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.reactors = 2;
    o.timeout_us = TIMEOUT_US;
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    return te;
}

static mc_status_t run(mc_te_t *te, const mc_te_request_t *reqs, size_t n)
{
    return tt_run(te, reqs, n, WAIT_US);
}

static void round_trip(env_t *e, mc_te_segment_t seg, uint64_t base, size_t loff, uint64_t roff,
                       size_t len, uint64_t seed)
{
    fill_random(e->src + loff, len, seed);
    memset(e->dst + loff, 0, len);
    mc_te_request_t w = tt_req(MC_TE_WRITE, e->src + loff, seg, base + roff, len);
    mc_status_t st = run(e->te, &w, 1);
    if (st != MC_OK)
        fail_msg("write of %zu bytes at +%llu: %s", len, (unsigned long long)roff,
                 mc_status_str(st));
    mc_te_request_t r = tt_req(MC_TE_READ, e->dst + loff, seg, base + roff, len);
    if ((st = run(e->te, &r, 1)) != MC_OK)
        fail_msg("read of %zu bytes at +%llu: %s", len, (unsigned long long)roff,
                 mc_status_str(st));
    if (memcmp(e->src + loff, e->dst + loff, len) != 0)
        fail_msg("%zu bytes at +%llu did not round-trip", len, (unsigned long long)roff);
}

static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Run te_shm_peer against t (uid < 0: as ourselves); its "shm" and "read"
 * lines. */
static void peer_run(const target_t *t, uint64_t addr, uint64_t len, long uid, int *shm,
                     char *status, size_t slen, uint64_t *hash)
{
    char bin[256], ab[32], lb[32], ub[16];
    snprintf(ab, sizeof(ab), "0x%" PRIx64, addr);
    snprintf(lb, sizeof(lb), "%" PRIu64, len);
    snprintf(ub, sizeof(ub), "%ld", uid);
    char *argv[12] = {(char *)test_bin("te_shm_peer", bin, sizeof(bin)),
                      "--segment",
                      (char *)t->name,
                      "--addr",
                      ab,
                      "--len",
                      lb,
                      uid >= 0 ? "--uid" : NULL,
                      ub,
                      NULL};
    test_proc_t p = {0};
    assert_int_equal(test_proc_start(&p, argv), 0);
    char line[256];
    *shm = -1;
    status[0] = '\0';
    while (test_proc_readline(&p, line, sizeof(line), 15000) == 0) {
        if (strncmp(line, "shm ", 4) == 0)
            *shm = atoi(line + 4);
        if (strncmp(line, "read ", 5) == 0) {
            char st[64];
            unsigned long long h = 0;
            if (sscanf(line + 5, "%63s %llu", st, &h) == 2) {
                snprintf(status, slen, "%s", st);
                *hash = h;
            }
            break;
        }
    }
    int ws = test_proc_stop(&p, 0, 10000); /* (signal 0: waits for its exit) */
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

/* ------------------------------------------------------ setup/teardown */

static int group_setup(void **state)
{
    static env_t e;
    memset(&e, 0, sizeof(e));
    *state = &e; /* the group teardown runs after a failed setup too */
    signal(SIGPIPE, SIG_IGN);
    char bin[256];
    if (access(test_bin("te_target", bin, sizeof(bin)), X_OK) != 0 ||
        access(test_bin("te_shm_peer", bin, sizeof(bin)), X_OK) != 0) {
        fprintf(stderr, "FATAL: te_target / te_shm_peer not found: make tests\n");
        return -1;
    }
    e.te = engine_new();
    e.src = mc_malloc(LOCAL_SIZE);
    e.dst = mc_malloc(LOCAL_SIZE);
    mc_te_buffer_t bufs[2] = {{e.src, LOCAL_SIZE}, {e.dst, LOCAL_SIZE}};
    if (e.src == NULL || e.dst == NULL || mc_te_register_batch(e.te, bufs, 2, "cpu:0", 0) != MC_OK)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    env_t *e = *state;
    mc_te_destroy(e->te);
    mc_free(e->src);
    mc_free(e->dst);
    return 0;
}

static int teardown(void **state)
{
    env_t *e = *state;
    if (e->t.p.pid > 0)
        tc_stop_ms(&e->t.p, SIGKILL, 5000);
    unsetenv("MC_SHM_BOOT_ID");
    return 0;
}

/* --------------------------------------------------------------- tests */

static void a_same_host_target_is_reached_over_shared_memory_byte_for_byte(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    target_start(t, 0, 64 * MIB + 64, 5, "--shm", NULL);
    mc_te_segment_t seg = tt_open(e->te, t);
    assert_int_equal(te_shm_ready(e->te, seg), 1);

    /* what the target holds from the start */
    mc_te_request_t r[3] = {tt_req(MC_TE_READ, e->dst, seg, t->addr, 100000),
                            tt_req(MC_TE_READ, e->dst + 200000, seg, t->addr + t->size - 77, 77),
                            tt_req(MC_TE_READ, e->dst + 300000, seg, t->addr2 + 3, t->size2 - 3)};
    assert_int_equal(run(e->te, r, 3), MC_OK);
    tt_check_pattern(e->dst, 100000, t->seed, 0);
    tt_check_pattern(e->dst + 200000, 77, t->seed, t->size - 77);
    tt_check_pattern(e->dst + 300000, t->size2 - 3, t->seed + 1, 3);

    static const size_t sizes[] = {1,     2,       3,       7,           100,     4095,
                                   4096,  4097,    65535,   65536,       65537,   81920,
                                   81921, MIB - 1, MIB + 3, 7 * MIB + 5, 64 * MIB};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t len = sizes[i];
        size_t loff = (i * 131) % 4096 + 1;
        uint64_t roff = ((uint64_t)i * 7919 + 3) % (t->size - len + 1);
        round_trip(e, seg, t->addr, loff, roff, len, 100 + i);
    }

    /* many small requests in one batch, at scattered unaligned places */
    enum { N = 300 };
    static mc_te_request_t w[N], rb[N];
    fill_random(e->src, 4 * MIB, 77);
    memset(e->dst, 0, 4 * MIB);
    for (size_t i = 0; i < N; i++) {
        size_t len = 1 + (i * 2654435761u) % 9000;
        size_t loff = i * 10000 + i % 7;
        uint64_t roff = (uint64_t)i * 200003 + 11;
        w[i] = tt_req(MC_TE_WRITE, e->src + loff, seg, t->addr + roff, len);
        rb[i] = tt_req(MC_TE_READ, e->dst + loff, seg, t->addr + roff, len);
    }
    assert_int_equal(run(e->te, w, N), MC_OK);
    assert_int_equal(run(e->te, rb, N), MC_OK);
    for (size_t i = 0; i < N; i++)
        if (memcmp(w[i].local, rb[i].local, w[i].length) != 0)
            fail_msg("request %zu of the batch did not round-trip", i);

    /* a second initiator process sees what we wrote, over shared memory too */
    int shm = -1;
    char st[64];
    uint64_t h = 0;
    peer_run(t, t->addr + 11, 9000, -1, &shm, st, sizeof(st), &h);
    assert_int_equal(shm, 1);
    assert_string_equal(st, "OK");
    mc_te_request_t one = tt_req(MC_TE_READ, e->dst, seg, t->addr + 11, 9000);
    assert_int_equal(run(e->te, &one, 1), MC_OK);
    assert_int_equal(h, fnv(e->dst, 9000));
    tt_stop_intact(t);
}

static void requests_outside_the_owners_ranges_are_refused_and_its_memory_is_unchanged(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    target_start(t, 0, 1 * MIB, 7, "--shm", NULL);
    mc_te_segment_t seg = tt_open(e->te, t);
    assert_int_equal(te_shm_ready(e->te, seg), 1);
    fill_random(e->src, 2 * MIB, 3);
    /* the guard between A and B is in the owner's mapped memory, registered
     * local-only: not in its descriptor, refused at submit */
    mc_te_request_t g = tt_req(MC_TE_WRITE, e->src, seg, t->guard, 100);
    assert_int_equal(run(e->te, &g, 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    mc_te_request_t over = tt_req(MC_TE_WRITE, e->src, seg, t->addr + t->size - 10, 11);
    assert_int_equal(run(e->te, &over, 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    mc_te_request_t before = tt_req(MC_TE_WRITE, e->src, seg, t->addr - 1, 2);
    assert_int_equal(run(e->te, &before, 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    mc_te_request_t wrap = tt_req(MC_TE_WRITE, e->src, seg, UINT64_MAX - 4, 10);
    assert_int_equal(run(e->te, &wrap, 1), MC_ERR_ADDRESS_NOT_REGISTERED);

    /* B unregistered by the owner: our descriptor still lists it, its memory
     * is still mapped here, yet the owner's range table says no: the write
     * goes over tcp, where the target refuses it */
    mc_te_request_t wb = tt_req(MC_TE_WRITE, e->src, seg, t->addr2, 1000);
    assert_int_equal(run(e->te, &wb, 1), MC_OK);
    memset(e->dst, 0, 1000);
    mc_te_request_t rbk = tt_req(MC_TE_READ, e->dst, seg, t->addr2, 1000);
    assert_int_equal(run(e->te, &rbk, 1), MC_OK);
    assert_memory_equal(e->dst, e->src, 1000);
    /* (put B's bytes back as they were: the target checks them at exit) */
    for (size_t i = 0; i < t->size2; i++)
        e->dst[i] = te_target_pattern(t->seed + 1, i);
    mc_te_request_t restore = tt_req(MC_TE_WRITE, e->dst, seg, t->addr2, t->size2);
    assert_int_equal(run(e->te, &restore, 1), MC_OK);
    kill(t->p.pid, SIGUSR1);
    char line[64];
    assert_int_equal(test_proc_readline(&t->p, line, sizeof(line), 5000), 0);
    assert_string_equal(line, "unregistered");
    mc_te_request_t late = tt_req(MC_TE_WRITE, e->src, seg, t->addr2 + 5, 500);
    assert_int_equal(run(e->te, &late, 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    mc_te_request_t lread = tt_req(MC_TE_READ, e->dst, seg, t->addr2, 500);
    assert_int_equal(run(e->te, &lread, 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    /* A is still served over shared memory */
    round_trip(e, seg, t->addr, 3, 1000, 300000, 9);
    assert_int_equal(te_shm_ready(e->te, seg), 1);
    tt_stop_intact(t); /* guards and the unregistered B unchanged */
}

static void another_host_or_shm_off_is_reached_over_tcp(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    setenv("MC_SHM_BOOT_ID", "another-host", 1); /* the target says so */
    target_start(t, 0, 4 * MIB, 11, "--shm", NULL);
    unsetenv("MC_SHM_BOOT_ID");
    mc_te_segment_t seg = tt_open(e->te, t);
    assert_int_equal(te_shm_ready(e->te, seg), 0);
    round_trip(e, seg, t->addr, 5, 12345, 3 * MIB + 7, 21);
    tt_stop_intact(t);

    target_start(t, 0, 4 * MIB, 12, "--shm", "--shm-off");
    seg = tt_open(e->te, t);
    assert_int_equal(te_shm_ready(e->te, seg), 0);
    round_trip(e, seg, t->addr, 5, 777, MIB + 1, 22);
    tt_stop_intact(t);
}

static void a_killed_owner_is_noticed_and_a_restarted_one_is_mapped_again(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    target_start(t, 0, 2 * MIB, 13, "--shm", NULL);
    unsigned port = t->port;
    mc_te_segment_t seg = tt_open(e->te, t);
    assert_int_equal(te_shm_ready(e->te, seg), 1);
    round_trip(e, seg, t->addr, 1, 10, 100000, 31);
    uint64_t addr = t->addr;
    tc_stop_ms(&t->p, SIGKILL, 5000);
    /* nothing lands in the dead owner's memory (still mapped here): the
     * request fails, over tcp to nobody */
    fill_random(e->src, 1000, 5);
    mc_te_request_t w = tt_req(MC_TE_WRITE, e->src, seg, addr, 1000);
    uint64_t t0 = mc_now_us();
    mc_status_t st = run(e->te, &w, 1);
    assert_int_not_equal(st, MC_OK);
    assert_true(mc_now_us() - t0 < WAIT_US);
    assert_int_equal(te_shm_ready(e->te, seg), 0);

    /* the same name (host:port) again, new memory: the segment went stale
     * when its owner was found gone, so the next submit fetches its
     * descriptor again and maps the new memory */
    target_start(t, port, 2 * MIB, 14, "--shm", NULL);
    mc_te_segment_t seg2 = tt_open(e->te, t);
    assert_int_equal(seg2, seg); /* the cached handle */
    /* (--no-aslr: same addresses; the next submit finds the segment stale) */
    mc_te_request_t r = tt_req(MC_TE_READ, e->dst, seg, t->addr, 5000);
    for (int i = 0; i < 50 && run(e->te, &r, 1) != MC_OK; i++)
        usleep(20000);
    assert_int_equal(run(e->te, &r, 1), MC_OK);
    tt_check_pattern(e->dst, 5000, t->seed, 0);
    assert_int_equal(te_shm_ready(e->te, seg), 1);
    round_trip(e, seg, t->addr, 9, 4096, 700000, 32);
    tt_stop_intact(t);
}

/* The inodes of our mappings of owners' segment memory (/proc/self/maps),
 * up to room; returns how many. */
static int segment_inodes(unsigned long *ino, int room)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long in = 0;
        if (strstr(line, "/memfd:mooncake-segment") != NULL && n < room &&
            sscanf(line, "%*s %*s %*s %*s %lu", &in) == 1)
            ino[n++] = in;
    }
    fclose(f);
    return n;
}

/* How many of our segment mappings are of none of the n inodes old. */
static int new_mappings(const unsigned long *old, int n)
{
    unsigned long now[64];
    int k = segment_inodes(now, 64), fresh = 0;
    for (int i = 0; i < k; i++) {
        int seen = 0;
        for (int j = 0; j < n; j++)
            seen |= now[i] == old[j];
        fresh += !seen;
    }
    return fresh;
}

/* A killed owner's memory is let go within seconds though no request goes
 * to it any more (a dead node's segment is no longer listed by the master):
 * a mapping keeps its pages, hugetlb ones too, from the system. */
static void a_killed_owners_memory_is_let_go_without_a_request(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    unsigned long before[64];
    int nb = segment_inodes(before, 64);
    target_start(t, 0, 2 * MIB, 15, "--shm", NULL);
    mc_te_segment_t seg = tt_open(e->te, t);
    assert_int_equal(te_shm_ready(e->te, seg), 1);
    round_trip(e, seg, t->addr, 3, 20, 300000, 33);
    assert_true(new_mappings(before, nb) > 0); /* its memory, mapped here */
    tc_stop_ms(&t->p, SIGKILL, 5000);
    uint64_t deadline = mc_now_us() + WAIT_US;
    while (new_mappings(before, nb) > 0 && mc_now_us() < deadline)
        usleep(50000);
    assert_int_equal(new_mappings(before, nb), 0);
    assert_int_equal(te_shm_ready(e->te, seg), 0);
}

static void a_user_the_owner_does_not_admit_gets_no_shared_memory(void **state)
{
    env_t *e = *state;
    target_t *t = &e->t;
    if (geteuid() != 0) {
        fprintf(stderr, "(skipped: needs root to run a peer as another user)\n");
        skip();
    }
    target_start(t, 0, 1 * MIB, 17, "--shm", NULL);
    int shm = -1;
    char st[64];
    uint64_t h = 0;
    peer_run(t, t->addr + 100, 4000, 65534, &shm, st, sizeof(st), &h);
    assert_int_equal(shm, 0);      /* refused by SO_PEERCRED */
    assert_string_equal(st, "OK"); /* and served over tcp */
    uint8_t buf[4000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = te_target_pattern(t->seed, 100 + i);
    assert_int_equal(h, fnv(buf, sizeof(buf)));
    tt_stop_intact(t);
}

int main(void)
{
    mc_log_set_spec(getenv("TEST_LOG") ? getenv("TEST_LOG") : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(a_same_host_target_is_reached_over_shared_memory_byte_for_byte,
                                  teardown),
        cmocka_unit_test_teardown(
            requests_outside_the_owners_ranges_are_refused_and_its_memory_is_unchanged, teardown),
        cmocka_unit_test_teardown(another_host_or_shm_off_is_reached_over_tcp, teardown),
        cmocka_unit_test_teardown(a_killed_owner_is_noticed_and_a_restarted_one_is_mapped_again,
                                  teardown),
        cmocka_unit_test_teardown(a_killed_owners_memory_is_let_go_without_a_request, teardown),
        cmocka_unit_test_teardown(a_user_the_owner_does_not_admit_gets_no_shared_memory, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
