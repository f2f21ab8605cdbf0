/* Master at scale: memory per object with a million objects, and several
 * threads hammering the same master while segments come and go. */
#include "master_test_util.h"

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifdef UNDER_ASAN
/* from <sanitizer/allocator_interface.h>, which gcc does not install */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#define MB (1024ull * 1024ull)

/* ---- memory ---- */

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f != NULL) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static uint64_t heap_bytes(void)
{
#ifdef UNDER_ASAN
    /* requested bytes: ASan's redzones and shadow would swamp the number */
    return __sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#endif
}

static void a_million_small_objects_take_under_250_bytes_each(void **state)
{
    (void)state;
#ifdef UNDER_TSAN
    skip(); /* TSan's shadow memory makes the numbers meaningless, and it is slow */
#endif
    enum { N = 1000000, SIZE = 64 };
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.max_allocs_per_segment = 2 * N;
    mc_master_t *m = master_new(&o);
    assert_int_equal(mount_seg(m, C1, 1, "big", 2ull * N * SIZE, T0), MC_OK);

    uint64_t rss0 = rss_bytes(), heap0 = heap_bytes();
    long allocs0 = mc_mem_alloc_count();
    mc_master_put_cfg_t cfg;
    mc_master_put_cfg_init(&cfg);
    mc_master_replica_desc_t d[1];
    char key[48];
    for (unsigned i = 0; i < N; i++) {
        int len = snprintf(key, sizeof(key), "object-key-%029u", i); /* 40 bytes */
        uint32_t n;
        if (mc_master_put_start(m, C1, key, (size_t)len, SIZE, &cfg, T0, d, &n) != MC_OK ||
            mc_master_put_end(m, C1, key, (size_t)len, T0) != MC_OK)
            fail_msg("put %u failed", i);
    }
    uint64_t rss1 = rss_bytes(), heap1 = heap_bytes();
    long allocs1 = mc_mem_alloc_count();
    assert_int_equal(stats(m).key_count, N);

    double heap_per = (double)(heap1 - heap0) / N;
    double rss_per = (double)(rss1 - rss0) / N;
    double allocs_per = (double)(allocs1 - allocs0) / N;
#ifdef UNDER_ASAN
    print_message("memory: %.1f bytes/object requested from the heap (ASan build: RSS %.1f "
                  "includes redzones and shadow), %.2f allocations/object\n",
                  heap_per, rss_per, allocs_per);
    assert_true(heap_per < 250.0);
#else
    print_message("memory: %.1f bytes/object resident (RSS delta, incl. allocator nodes), "
                  "%.1f bytes/object in malloc, %.2f allocations/object\n",
                  rss_per, heap_per, allocs_per);
    assert_true(rss_per < 250.0);
    assert_true(heap_per < 250.0);
#endif
    /* one allocation per object (the hash tables' growth adds a little) */
    assert_true(allocs_per < 1.05);
    mc_master_destroy(m);
}

/* ---- concurrency ---- */

enum { NTHREADS = 4, OPS = 20000, NKEYS = 2000 };

typedef struct worker {
    mc_master_t *m;
    unsigned id;
    unsigned puts, gets, removes, unexpected;
} worker_t;

static const char *wkey(char *buf, unsigned k)
{
    snprintf(buf, 24, "stress/%u", k);
    return buf;
}

static mc_master_segment_t churn_seg(void)
{
    mc_master_segment_t s = {.id = seg_id(99),
                             .name = "churn",
                             .te_endpoint = "churn:1",
                             .base = 99ull << 40,
                             .size = MB};
    return s;
}

static void *work(void *arg)
{
    worker_t *w = arg;
    mc_master_t *m = w->m;
    unsigned seed = 1234 + w->id;
    mc_uuid_t me = {0xc0, w->id + 1};
    uint64_t now = T0 + w->id * 7;
    char key[24];
    int churn_mounted = 1;
    for (unsigned i = 0; i < OPS; i++) {
        now += 500;
        unsigned k = (unsigned)rand_r(&seed) % NKEYS;
        unsigned op = (unsigned)rand_r(&seed) % 8;
        wkey(key, k);
        size_t kl = strlen(key);
        mc_status_t st;
        if (w->id == 0 && i % 50 == 0)
            mc_master_tick(m, now);
        if (w->id == 0 && i % 2000 == 1000) {
            /* a segment goes away and comes back, under everyone's feet */
            mc_master_segment_t s = churn_seg();
            if (churn_mounted) {
                st = mc_master_unmount_segment(m, C1, s.id, now, NULL);
                churn_mounted = st != MC_OK;
            } else {
                st = mc_master_mount_segment(m, C1, &s, now);
                churn_mounted = st == MC_OK;
            }
            if (st != MC_OK && st != MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS)
                w->unexpected++;
        }
        switch (op) {
        case 0:
        case 1:
        case 2: {
            mc_master_put_cfg_t cfg;
            mc_master_put_cfg_init(&cfg);
            cfg.replica_num = 1 + (unsigned)rand_r(&seed) % 3;
            mc_master_replica_desc_t d[3];
            uint32_t n;
            uint64_t size = 1 + (unsigned)rand_r(&seed) % 8192;
            st = mc_master_put_start(m, me, key, kl, size, &cfg, now, d, &n);
            if (st == MC_OK) {
                w->puts++;
                if (rand_r(&seed) % 4 == 0)
                    st = mc_master_put_revoke(m, me, key, kl, now);
                else
                    st = mc_master_put_end(m, me, key, kl, now);
                /* NOT_FOUND: every replica was on the segment that left */
                if (st != MC_OK && st != MC_ERR_OBJECT_NOT_FOUND)
                    w->unexpected++;
            } else if (st != MC_ERR_OBJECT_ALREADY_EXISTS && st != MC_ERR_NO_AVAILABLE_HANDLE) {
                w->unexpected++;
            }
            break;
        }
        case 3:
        case 4: {
            uint32_t n;
            st = get_n(m, key, now, &n);
            w->gets++;
            if (st != MC_OK && st != MC_ERR_OBJECT_NOT_FOUND && st != MC_ERR_REPLICA_IS_NOT_READY)
                w->unexpected++;
            break;
        }
        case 5:
            (void)exists(m, key, now);
            break;
        case 6:
            st = rm(m, key, 0, now);
            w->removes += st == MC_OK;
            if (st != MC_OK && st != MC_ERR_OBJECT_NOT_FOUND && st != MC_ERR_OBJECT_HAS_LEASE &&
                st != MC_ERR_REPLICA_IS_NOT_READY)
                w->unexpected++;
            break;
        default: {
            char kb[8][24];
            mc_master_key_t keys[8];
            mc_master_replica_desc_t d[8];
            uint32_t nrep[8];
            mc_status_t sts[8];
            for (unsigned j = 0; j < 8; j++) {
                wkey(kb[j], (unsigned)rand_r(&seed) % NKEYS);
                keys[j].data = kb[j];
                keys[j].len = strlen(kb[j]);
            }
            if (mc_master_batch_get_replica_list(m, keys, 8, now, d, 1, nrep, sts) != MC_OK)
                w->unexpected++;
            break;
        }
        }
    }
    return NULL;
}

typedef struct books {
    uint64_t bytes, reps;
} books_t;

static int add_key(void *arg, const mc_master_key_info_t *ki)
{
    books_t *b = arg;
    b->bytes += ki->size * ki->nrep;
    b->reps += ki->nrep;
    return 0;
}

static int add_seg(void *arg, const mc_master_segment_info_t *si)
{
    books_t *b = arg;
    if (!si->unmounting) {
        b->bytes += si->used;
        b->reps += si->allocs;
    }
    return 0;
}

static void check_books(mc_master_t *m)
{
    books_t objs = {0}, segsum = {0};
    size_t cnt;
    assert_int_equal(mc_master_foreach_key(m, NULL, SIZE_MAX, add_key, &objs, &cnt), MC_OK);
    mc_master_foreach_segment(m, add_seg, &segsum);
    mc_master_stats_t s = stats(m);
    assert_int_equal(s.parked_count, 0);
    assert_int_equal(s.processing_count, 0);
    assert_int_equal(cnt, s.key_count);
    assert_int_equal(objs.bytes, s.allocated_bytes);
    assert_int_equal(segsum.bytes, s.allocated_bytes);
    assert_int_equal(segsum.reps, objs.reps);
}

static void concurrent_puts_gets_and_removes_keep_the_books_balanced(void **state)
{
    (void)state;
    mc_master_opts_t o;
    mc_master_opts_init(&o);
    o.client_ttl_us = 1000000 * SEC;
    mc_master_t *m = master_new(&o);
    for (unsigned i = 1; i <= 4; i++) {
        char name[16];
        snprintf(name, sizeof(name), "node%u", i);
        assert_int_equal(mount_seg(m, C1, i, name, MB, T0), MC_OK);
    }
    mc_master_segment_t cs = churn_seg();
    assert_int_equal(mc_master_mount_segment(m, C1, &cs, T0), MC_OK);

    pthread_t th[NTHREADS];
    worker_t w[NTHREADS];
    for (unsigned i = 0; i < NTHREADS; i++) {
        w[i] = (worker_t){.m = m, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    unsigned puts = 0, gets = 0, removes = 0;
    for (unsigned i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].unexpected, 0);
        puts += w[i].puts;
        gets += w[i].gets;
        removes += w[i].removes;
    }
    mc_master_stats_t s = stats(m);
    print_message("stress: %u puts, %u gets, %u removes, %llu evicted in %llu passes, "
                  "%llu keys left\n",
                  puts, gets, removes, (unsigned long long)s.evicted_keys,
                  (unsigned long long)s.eviction_attempts, (unsigned long long)s.key_count);
    assert_true(puts > 1000);
    assert_true(s.evicted_keys > 0);

    uint64_t later = T0 + 100 * SEC; /* every lease and drain is over */
    mc_master_tick(m, later);
    check_books(m);

    long removed = 0;
    assert_int_equal(mc_master_remove_all(m, 0, later, &removed), MC_OK);
    assert_true(removed > 0);
    s = stats(m);
    assert_int_equal(s.key_count, 0);
    assert_int_equal(s.allocated_bytes, 0);
    check_books(m);
    mc_master_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_million_small_objects_take_under_250_bytes_each),
        cmocka_unit_test(concurrent_puts_gets_and_removes_keep_the_books_balanced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
