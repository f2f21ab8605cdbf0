/*
 * te_target - a transfer-engine target process for integration tests.
 *
 *   te_target [--metadata CONN] [--name NAME] [--port N] [--size BYTES] [--seed N]
 *             [--reactors N] [--timeout-us N] [--no-aslr]
 *             [--rdma NICS] [--matrix JSON] [--max-eps N] [--shm] [--shm-off]
 *
 * Creates an engine (listening on 127.0.0.1), maps one region laid out as
 *
 *   | guard0 4 KiB | A: size bytes | guard1 4 KiB | B: 64 KiB | guard2 4 KiB |
 *
 * (A starts 7 bytes into its page, so nothing is aligned), fills every part
 * with te_target_pattern(seed + k, offset) (k = 0 for A, 1 for B, 2 for the
 * guards, offsets from each part's start), registers A and B remote-accessible
 * and guard1 local-only, prints
 *
 *   port N / name S / addr 0x.. / size N / addr2 0x.. / size2 N / guard 0x.. / ready
 *
 * and serves until SIGTERM or SIGINT. SIGUSR1 unregisters B (prints
 * "unregistered"): peers that cached the descriptor still think it is there.
 * At exit it checks that no byte of the guards (and of B, when unregistered)
 * changed: exit status 0 if intact, 3 if not (logged on stderr).
 * --no-aslr re-executes itself without address randomization, so that a
 * restart with the same options puts its buffers at the same addresses.
 * --rdma NICS installs the rdma transport on NICS emulated NICs (with
 * --matrix as its nic priority matrix, --max-eps as its endpoint cap).
 * --shm makes the region shared memory (mc_te_alloc_shared), so peers on
 * this host reach A and B over the shm transport; --shm-off turns the shm
 * transport off (mc_te_opts_t.shm_off).
 * TE_LOG=debug (a log spec) shows the engine's logs.
 */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <unistd.h>

#include "mooncake/transfer.h"
#include "util/log.h"

/* The contents of a fresh part: byte `off` of the part filled with `seed`.
 * te_transfer_test.c has the same function. */
static uint8_t te_target_pattern(uint64_t seed, uint64_t off)
{
    uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    return (uint8_t)(x ^ (x >> 17));
}

#define GUARD 4096u
#define SIZE_B (64u * 1024u)
#define A_SKEW 7u /* A starts this far into its page */

static int check_part(const char *what, const uint8_t *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != te_target_pattern(seed, i)) {
            fprintf(stderr, "te_target: %s changed at offset %zu\n", what, i);
            return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv)
{
    const char *metadata = "p2p", *name = NULL;
    unsigned long port = 0, reactors = 1;
    uint64_t size = 1u << 20, seed = 1, timeout_us = 0;
    unsigned long rdma = 0, max_eps = 0;
    const char *matrix = NULL;
    static const struct option longopts[] = {
        {"metadata", required_argument, NULL, 'm'},   {"name", required_argument, NULL, 'n'},
        {"port", required_argument, NULL, 'p'},       {"size", required_argument, NULL, 's'},
        {"seed", required_argument, NULL, 'S'},       {"reactors", required_argument, NULL, 'r'},
        {"timeout-us", required_argument, NULL, 't'}, {"no-aslr", no_argument, NULL, 'A'},
        {"rdma", required_argument, NULL, 'R'},       {"matrix", required_argument, NULL, 'M'},
        {"max-eps", required_argument, NULL, 'E'},    {"shm", no_argument, NULL, 'H'},
        {"shm-off", no_argument, NULL, 'O'},          {NULL, 0, NULL, 0},
    };
    int no_aslr = 0, shm = 0, shm_off = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 'm':
            metadata = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        case 'p':
            port = strtoul(optarg, NULL, 0);
            break;
        case 's':
            size = strtoull(optarg, NULL, 0);
            break;
        case 'S':
            seed = strtoull(optarg, NULL, 0);
            break;
        case 'r':
            reactors = strtoul(optarg, NULL, 0);
            break;
        case 't':
            timeout_us = strtoull(optarg, NULL, 0);
            break;
        case 'A':
            no_aslr = 1;
            break;
        case 'R':
            rdma = strtoul(optarg, NULL, 0);
            break;
        case 'M':
            matrix = optarg;
            break;
        case 'E':
            max_eps = strtoul(optarg, NULL, 0);
            break;
        case 'H':
            shm = 1;
            break;
        case 'O':
            shm_off = 1;
            break;
        default:
            fprintf(stderr, "usage: te_target [--metadata CONN] [--name NAME] [--port N] "
                            "[--size BYTES] [--seed N] [--reactors N] [--timeout-us N] "
                            "[--no-aslr] [--rdma NICS] [--matrix JSON] [--max-eps N] [--shm] "
                            "[--shm-off]\n");
            return 2;
        }
    }
    if (size == 0 || port > 65535) {
        fprintf(stderr, "te_target: bad --size or --port\n");
        return 2;
    }
    if (no_aslr) {
        int pers = personality(0xffffffff);
        if (pers != -1 && !(pers & ADDR_NO_RANDOMIZE) &&
            personality((unsigned long)pers | ADDR_NO_RANDOMIZE) != -1) {
            execv("/proc/self/exe", argv);
            perror("te_target: re-exec without ASLR"); /* carry on randomized */
        }
    }

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* reactor threads inherit the mask */
    signal(SIGPIPE, SIG_IGN);
    mc_log_set_spec(getenv("TE_LOG") ? getenv("TE_LOG") : "warn", NULL, 0);

    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.metadata = metadata;
    o.local_hostname = name;
    o.listen_host = "127.0.0.1";
    o.listen_port = (uint16_t)port;
    o.reactors = (unsigned)reactors;
    if (timeout_us)
        o.timeout_us = timeout_us;
    o.rdma_emulated = (unsigned)rdma;
    o.rdma_matrix = matrix;
    o.rdma_max_eps = (unsigned)max_eps;
    o.shm_off = shm_off;
    mc_te_t *te = NULL;
    mc_status_t st = mc_te_create(&o, &te);
    if (st != MC_OK) {
        fprintf(stderr, "te_target: cannot create the engine: %s\n", mc_status_str(st));
        return 1;
    }

    if (rdma > 0 && (st = mc_te_install_transport(te, "rdma")) != MC_OK) {
        fprintf(stderr, "te_target: cannot install rdma: %s\n", mc_status_str(st));
        return 1;
    }

    size_t total = GUARD + A_SKEW + size + GUARD + SIZE_B + GUARD;
    uint8_t *base = NULL;
    if (shm) {
        void *p = NULL;
        if ((st = mc_te_alloc_shared(te, total, 0, &p)) != MC_OK) {
            fprintf(stderr, "te_target: cannot allocate shared memory: %s\n", mc_status_str(st));
            return 1;
        }
        base = p;
    } else {
        base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED) {
            perror("te_target: mmap");
            return 1;
        }
    }
    uint8_t *g0 = base, *a = base + GUARD + A_SKEW, *g1 = a + size, *b = g1 + GUARD,
            *g2 = b + SIZE_B;
    size_t g0len = GUARD + A_SKEW;
    for (size_t i = 0; i < g0len; i++)
        g0[i] = te_target_pattern(seed + 2, i);
    for (uint64_t i = 0; i < size; i++)
        a[i] = te_target_pattern(seed, i);
    for (size_t i = 0; i < GUARD; i++)
        g1[i] = g2[i] = te_target_pattern(seed + 2, i);
    for (size_t i = 0; i < SIZE_B; i++)
        b[i] = te_target_pattern(seed + 1, i);

    mc_te_buffer_t remote[2] = {{a, (size_t)size}, {b, SIZE_B}};
    if ((st = mc_te_register(te, g1, GUARD, "cpu:0", 0)) != MC_OK ||
        (st = mc_te_register_batch(te, remote, 2, "cpu:0", 1)) != MC_OK) {
        fprintf(stderr, "te_target: cannot register: %s\n", mc_status_str(st));
        return 1;
    }
    printf("port %u\nname %s\naddr 0x%" PRIxPTR "\nsize %" PRIu64 "\naddr2 0x%" PRIxPTR
           "\nsize2 %u\nguard 0x%" PRIxPTR "\nready\n",
           mc_te_port(te), mc_te_local_name(te), (uintptr_t)a, size, (uintptr_t)b, SIZE_B,
           (uintptr_t)g1);
    fflush(stdout);

    int b_registered = 1;
    for (;;) {
        int sig = 0;
        sigwait(&set, &sig);
        if (sig != SIGUSR1)
            break;
        if (b_registered && mc_te_unregister(te, b) == MC_OK) {
            b_registered = 0;
            printf("unregistered\n");
        } else {
            printf("unregister failed\n");
        }
        fflush(stdout);
    }
    /* shared memory goes with the engine: checked before (the test's
     * requests are over when it stops us) */
    if (!shm)
        mc_te_destroy(te);
    int intact = check_part("guard0", g0, g0len, seed + 2) &&
                 check_part("guard1", g1, GUARD, seed + 2) &&
                 check_part("guard2", g2, GUARD, seed + 2) &&
                 (b_registered || check_part("unregistered buffer B", b, SIZE_B, seed + 1));
    if (shm)
        mc_te_destroy(te);
    else
        munmap(base, total);
    return intact ? 0 : 3;
}
