/*
 * store_dummy - a co-located store client process for the service tests
 * (and the fault script perf/fault_service.sh).
 *
 *   store_dummy --service HOST:PORT --mode work|churn [--id N] [--count N]
 *               [--size BYTES] [--pool BYTES] [--staging BYTES] [--timeout-ms N] [--uid U]
 *
 * work: N rounds of puts and gets of its own keys ("c<id>-<round>-...") with
 * verification: values in pool memory (zero copy) and in plain memory
 * (through staging), of varied sizes up to --size, a batch put and batch get
 * of 8 small values, exist and remove; prints "ok <rounds>" and exits 0, or
 * "fail <what>" and exits 1.
 * churn: puts --size values from pool memory in a loop until killed (prints
 * "running" after the first put) - for kill tests.
 * --uid U: drop to user U first (a user the service does not admit).
 * TEST_LOG=debug shows the library's logs.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mooncake/store.h"
#include "util/log.h"

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        p[i] = (uint8_t)(x >> ((i & 7) * 8));
    }
}

static int fail(const char *what, const char *key, int64_t st)
{
    printf("fail %s %s: %s\n", what, key, st < 0 ? mc_status_str((mc_status_t)st) : "mismatch");
    fflush(stdout);
    return 1;
}

int main(int argc, char **argv)
{
    const char *service = NULL, *mode = "work";
    unsigned long id = 0, count = 20, timeout_ms = 5000;
    long uid = -1;
    uint64_t size = 1 << 20, pool = 64 << 20, staging = 16 << 20;
    static const struct option lo[] = {
        {"service", required_argument, NULL, 's'}, {"mode", required_argument, NULL, 'm'},
        {"id", required_argument, NULL, 'i'},      {"count", required_argument, NULL, 'c'},
        {"size", required_argument, NULL, 'z'},    {"pool", required_argument, NULL, 'p'},
        {"staging", required_argument, NULL, 'S'}, {"timeout-ms", required_argument, NULL, 't'},
        {"uid", required_argument, NULL, 'u'},     {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (opt) {
        case 's':
            service = optarg;
            break;
        case 'm':
            mode = optarg;
            break;
        case 'i':
            id = strtoul(optarg, NULL, 0);
            break;
        case 'c':
            count = strtoul(optarg, NULL, 0);
            break;
        case 'z':
            size = strtoull(optarg, NULL, 0);
            break;
        case 'p':
            pool = strtoull(optarg, NULL, 0);
            break;
        case 'S':
            staging = strtoull(optarg, NULL, 0);
            break;
        case 't':
            timeout_ms = strtoul(optarg, NULL, 0);
            break;
        case 'u':
            uid = strtol(optarg, NULL, 10);
            break;
        default:
            fprintf(stderr, "usage: store_dummy --service HOST:PORT --mode work|churn ...\n");
            return 2;
        }
    }
    if (service == NULL || size == 0)
        return 2;
    if (uid >= 0 && (setgid((gid_t)uid) != 0 || setuid((uid_t)uid) != 0)) {
        perror("store_dummy: setuid");
        return 1;
    }
    mc_log_set_spec(getenv("TEST_LOG") ? getenv("TEST_LOG") : "error", NULL, 0);
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.service = service;
    c.local_buffer_size = staging;
    c.mem_pool_size = pool;
    c.rpc_timeout_us = (uint64_t)timeout_ms * 1000;
    mc_store_t *s = NULL;
    mc_status_t st = mc_store_open(&c, &s);
    if (st != MC_OK) {
        printf("fail open %s: %s\n", service, mc_status_str(st));
        return 1;
    }
    char key[128];
    if (strcmp(mode, "churn") == 0) {
        uint8_t *v = mc_store_alloc_from_mem_pool(s, size);
        if (v == NULL)
            return fail("alloc", "pool", MC_ERR_NOMEM);
        fill(v, size, id);
        for (unsigned long i = 0;; i++) {
            snprintf(key, sizeof(key), "churn-%lu-%d-%lu", id, (int)getpid(), i % 4);
            mc_store_remove(s, key, strlen(key), 1);
            st = mc_store_put(s, key, strlen(key), v, size, NULL);
            if (i == 0) {
                printf(st == MC_OK ? "running\n" : "fail first put %s\n", mc_status_str(st));
                fflush(stdout);
            }
        }
    }
    uint8_t *plain = malloc(size), *back = malloc(size);
    uint8_t *pv = mc_store_alloc_from_mem_pool(s, size);
    uint8_t *pb = mc_store_alloc_from_mem_pool(s, size);
    if (plain == NULL || back == NULL || pv == NULL || pb == NULL)
        return fail("alloc", "buffers", MC_ERR_NOMEM);
    int rc = 0;
    for (unsigned long r = 0; r < count && rc == 0; r++) {
        size_t len = 1 + (size_t)((r * 2654435761u + id * 40503u) % size);
        /* plain memory: through staging */
        snprintf(key, sizeof(key), "c%lu-%lu-plain", id, r);
        fill(plain, len, id * 1000 + r);
        if ((st = mc_store_put(s, key, strlen(key), plain, len, NULL)) != MC_OK) {
            rc = fail("put", key, st);
            break;
        }
        memset(back, 0, len);
        int64_t n = mc_store_get(s, key, strlen(key), back, size, NULL);
        if (n != (int64_t)len || memcmp(back, plain, len) != 0) {
            rc = fail("get", key, n < 0 ? n : 1);
            break;
        }
        /* pool memory: zero copy both ways */
        snprintf(key, sizeof(key), "c%lu-%lu-pool", id, r);
        fill(pv, len, id * 7000 + r);
        if ((st = mc_store_put(s, key, strlen(key), pv, len, NULL)) != MC_OK) {
            rc = fail("put", key, st);
            break;
        }
        memset(pb, 0, len);
        n = mc_store_get(s, key, strlen(key), pb, len, NULL);
        if (n != (int64_t)len || memcmp(pb, pv, len) != 0) {
            rc = fail("get", key, n < 0 ? n : 1);
            break;
        }
        if (mc_store_exist(s, key, strlen(key)) != 1) {
            rc = fail("exist", key, 1);
            break;
        }
        /* a batch of 8 small values */
        enum { B = 8 };
        char kb[B][64];
        mc_slice_t keys[B], vals[B], outs[B];
        uint8_t vb[B][512], ob[B][512];
        mc_status_t sts[B];
        int64_t res[B];
        for (int i = 0; i < B; i++) {
            snprintf(kb[i], sizeof(kb[i]), "c%lu-%lu-b%d", id, r, i);
            keys[i] = (mc_slice_t){kb[i], strlen(kb[i])};
            fill(vb[i], sizeof(vb[i]), id + r * 31 + (unsigned long)i);
            vals[i] = (mc_slice_t){vb[i], 100 + (size_t)i * 50};
            outs[i] = (mc_slice_t){ob[i], sizeof(ob[i])};
        }
        if ((st = mc_store_batch_put(s, keys, vals, B, NULL, sts)) != MC_OK) {
            rc = fail("batch_put", "batch", st);
            break;
        }
        for (int i = 0; i < B && rc == 0; i++)
            if (sts[i] != MC_OK)
                rc = fail("batch_put", kb[i], sts[i]);
        if (rc == 0 && (st = mc_store_batch_get(s, keys, outs, B, res)) != MC_OK)
            rc = fail("batch_get", "batch", st);
        for (int i = 0; i < B && rc == 0; i++)
            if (res[i] != (int64_t)vals[i].len || memcmp(ob[i], vb[i], vals[i].len) != 0)
                rc = fail("batch_get", kb[i], res[i] < 0 ? res[i] : 1);
        for (int i = 0; i < B; i++)
            mc_store_remove(s, kb[i], strlen(kb[i]), 1);
        snprintf(key, sizeof(key), "c%lu-%lu-plain", id, r);
        mc_store_remove(s, key, strlen(key), 1);
        snprintf(key, sizeof(key), "c%lu-%lu-pool", id, r);
        if (rc == 0 && (st = mc_store_remove(s, key, strlen(key), 1)) != MC_OK)
            rc = fail("remove", key, st);
    }
    mc_store_free_to_mem_pool(s, pv);
    mc_store_free_to_mem_pool(s, pb);
    free(plain);
    free(back);
    mc_store_close(s);
    if (rc == 0) {
        printf("ok %lu\n", count);
        fflush(stdout);
    }
    return rc;
}
