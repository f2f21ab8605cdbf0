/*
 * te_util.h - the transfer engine tests' side of the te_target helper
 * (helpers/te_target.c): start it and read what it announces, stop it and
 * learn whether the bytes it guards stayed intact, and the few engine calls
 * every such test makes (open its segment, one request, one batch run, the
 * pattern of its untouched memory). For te_transfer_test (tcp), te_shm_test
 * and te_rdma_test. Header-only, on cluster.h (a failed test's target is
 * killed at exit).
 */
#ifndef MC_TEST_TE_UTIL_H
#define MC_TEST_TE_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cluster.h"
#include "mooncake/transfer.h"

/* As te_target.c: the contents of a fresh part of its region. */
static inline uint8_t te_target_pattern(uint64_t seed, uint64_t off)
{
    uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    return (uint8_t)(x ^ (x >> 17));
}

/* A running te_target and what it announced ("port", "name", "addr",
 * "size", "addr2", "size2", "guard" lines before "ready"). */
typedef struct target {
    test_proc_t p;
    unsigned seed;
    uint16_t port;
    char name[128];
    uint64_t addr, size, addr2, size2, guard;
} target_t;

/* Start te_target with args (its flags, NULL-terminated; --seed is added)
 * and read its announcement up to "ready" (10 s). */
static inline void tt_start(target_t *t, unsigned seed, const char *const *args)
{
    char bin[256], seedb[16];
    snprintf(seedb, sizeof(seedb), "%u", seed);
    char *argv[24] = {(char *)test_bin("te_target", bin, sizeof(bin)), "--seed", seedb};
    int n = 3;
    for (size_t i = 0; args[i] != NULL && n < 23; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    memset(t, 0, sizeof(*t));
    t->seed = seed;
    assert_int_equal(tc_spawn(&t->p, argv), 0);
    char line[256];
    for (;;) {
        if (test_proc_readline(&t->p, line, sizeof(line), 10000) != 0)
            fail_msg("te_target did not get ready within 10 s");
        if (strcmp(line, "ready") == 0)
            break;
        char *sp = strchr(line, ' ');
        if (sp == NULL)
            continue;
        *sp++ = '\0';
        if (strcmp(line, "port") == 0)
            t->port = (uint16_t)strtoul(sp, NULL, 10);
        else if (strcmp(line, "name") == 0)
            snprintf(t->name, sizeof(t->name), "%s", sp);
        else if (strcmp(line, "addr") == 0)
            t->addr = strtoull(sp, NULL, 0);
        else if (strcmp(line, "size") == 0)
            t->size = strtoull(sp, NULL, 0);
        else if (strcmp(line, "addr2") == 0)
            t->addr2 = strtoull(sp, NULL, 0);
        else if (strcmp(line, "size2") == 0)
            t->size2 = strtoull(sp, NULL, 0);
        else if (strcmp(line, "guard") == 0)
            t->guard = strtoull(sp, NULL, 0);
    }
}

/* Stop with SIGTERM: the target exits 0 only if no byte it guards changed. */
static inline void tt_stop_intact(target_t *t)
{
    int status = tc_stop_ms(&t->p, SIGTERM, 10000);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("te_target exited with %d: memory it guards changed", WEXITSTATUS(status));
}

static inline mc_te_segment_t tt_open(mc_te_t *te, const target_t *t)
{
    mc_te_segment_t seg = 0;
    mc_status_t st = mc_te_open_segment(te, t->name, &seg);
    if (st != MC_OK)
        fail_msg("open '%s': %s", t->name, mc_status_str(st));
    return seg;
}

static inline mc_te_request_t tt_req(mc_te_opcode_t op, void *local, mc_te_segment_t seg,
                                     uint64_t remote, uint64_t len)
{
    mc_te_request_t r = {
        .opcode = op, .local = local, .segment = seg, .remote = remote, .length = len};
    return r;
}

/* Run reqs as one batch (waiting up to wait_us): the submit's error, else
 * the wait's; the batch is freed. */
static inline mc_status_t tt_run(mc_te_t *te, const mc_te_request_t *reqs, size_t n,
                                 uint64_t wait_us)
{
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(te, n, &b), MC_OK);
    mc_status_t st = mc_te_submit(b, reqs, n);
    if (st == MC_OK)
        st = mc_te_batch_wait(b, wait_us);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    return st;
}

/* p[0..len) is the target's untouched memory from offset off. */
static inline void tt_check_pattern(const uint8_t *p, size_t len, uint64_t seed, uint64_t off)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != te_target_pattern(seed, off + i))
            fail_msg("byte %llu of the target's buffer is not its initial value",
                     (unsigned long long)(off + i));
}

#endif /* MC_TEST_TE_UTIL_H */
