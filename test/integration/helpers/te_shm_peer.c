/*
 * te_shm_peer - a second initiator process for the shm transport tests.
 *
 *   te_shm_peer --segment NAME --addr A --len N [--uid U] [--write SEED]
 *
 * Optionally drops to uid U first (a user the owner does not admit), makes
 * an engine (p2p), opens segment NAME, and prints
 *
 *   shm 0|1                 whether it is reached over shared memory
 *   read STATUS HASH        reading [A, A+N): the status name and the FNV-1a
 *                           hash of the bytes read (0 when it failed)
 *
 * With --write SEED it first writes N bytes of its xorshift sequence (as
 * te_shm_test.c's fill) at A and prints "write STATUS". Exit status 0.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mooncake/transfer.h"
#include "transport/te.h"
#include "util/log.h"

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static mc_status_t run(mc_te_t *te, mc_te_opcode_t op, void *local, mc_te_segment_t seg,
                       uint64_t addr, uint64_t len)
{
    mc_te_batch_t *b = NULL;
    mc_te_request_t r = {
        .opcode = op, .local = local, .segment = seg, .remote = addr, .length = len};
    mc_status_t st = mc_te_batch_alloc(te, 1, &b);
    if (st == MC_OK)
        st = mc_te_submit(b, &r, 1);
    if (st == MC_OK)
        st = mc_te_batch_wait(b, 10000000);
    mc_te_batch_free(b);
    return st;
}

int main(int argc, char **argv)
{
    const char *segment = NULL;
    uint64_t addr = 0, len = 0, seed = 0;
    long uid = -1;
    int write = 0;
    static const struct option lo[] = {
        {"segment", required_argument, NULL, 's'}, {"addr", required_argument, NULL, 'a'},
        {"len", required_argument, NULL, 'l'},     {"uid", required_argument, NULL, 'u'},
        {"write", required_argument, NULL, 'w'},   {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (opt) {
        case 's':
            segment = optarg;
            break;
        case 'a':
            addr = strtoull(optarg, NULL, 0);
            break;
        case 'l':
            len = strtoull(optarg, NULL, 0);
            break;
        case 'u':
            uid = strtol(optarg, NULL, 10);
            break;
        case 'w':
            write = 1;
            seed = strtoull(optarg, NULL, 0);
            break;
        default:
            fprintf(stderr, "usage: te_shm_peer --segment NAME --addr A --len N [--uid U] "
                            "[--write SEED]\n");
            return 2;
        }
    }
    if (segment == NULL || len == 0)
        return 2;
    if (uid >= 0 && (setgid((gid_t)uid) != 0 || setuid((uid_t)uid) != 0)) {
        perror("te_shm_peer: setuid");
        return 1;
    }
    mc_log_set_spec(getenv("TE_LOG") ? getenv("TE_LOG") : "error", NULL, 0);
    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.reactors = 1;
    mc_te_t *te = NULL;
    mc_status_t st = mc_te_create(&o, &te);
    if (st != MC_OK) {
        fprintf(stderr, "te_shm_peer: engine: %s\n", mc_status_str(st));
        return 1;
    }
    mc_te_segment_t seg = 0;
    if ((st = mc_te_open_segment(te, segment, &seg)) != MC_OK) {
        fprintf(stderr, "te_shm_peer: open %s: %s\n", segment, mc_status_str(st));
        return 1;
    }
    printf("shm %d\n", te_shm_ready(te, seg));
    uint8_t *buf = malloc(len);
    if (buf == NULL || mc_te_register(te, buf, len, "cpu:0", 0) != MC_OK)
        return 1;
    if (write) {
        fill(buf, len, seed);
        printf("write %s\n", mc_status_str(run(te, MC_TE_WRITE, buf, seg, addr, len)));
    }
    memset(buf, 0, len);
    st = run(te, MC_TE_READ, buf, seg, addr, len);
    uint64_t h = 0;
    if (st == MC_OK) {
        h = 0xcbf29ce484222325ull;
        for (uint64_t i = 0; i < len; i++)
            h = (h ^ buf[i]) * 0x100000001b3ull;
    }
    printf("read %s %" PRIu64 "\n", mc_status_str(st), h);
    fflush(stdout);
    free(buf);
    mc_te_destroy(te);
    return 0;
}
