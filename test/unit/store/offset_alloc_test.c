/* Offset allocator: bins, splits, merges, limits and a randomized model check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "store/offset_alloc.h"
#include "util/mem.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)

static mc_oalloc_t *make(uint64_t capacity, uint32_t max_allocs)
{
    mc_oalloc_t *a = NULL;
    assert_int_equal(mc_oalloc_create(capacity, max_allocs, &a), MC_OK);
    assert_non_null(a);
    return a;
}

static mc_oalloc_handle_t must_alloc(mc_oalloc_t *a, uint64_t size)
{
    mc_oalloc_handle_t h;
    assert_int_equal(mc_oalloc_alloc(a, size, &h), MC_OK);
    assert_int_equal(h.offset % MC_OALLOC_ALIGN, 0);
    return h;
}

static void assert_no_space(mc_oalloc_t *a, uint64_t size)
{
    mc_oalloc_handle_t h;
    assert_int_equal(mc_oalloc_alloc(a, size, &h), MC_ERR_NO_AVAILABLE_HANDLE);
}

static void assert_ratio(double got, double want)
{
    double d = got - want;
    assert_true(d < 1e-12 && d > -1e-12);
}

static void whole_capacity_fits_in_one_allocation(void **state)
{
    (void)state;
    /* bin floors and sizes between bin floors */
    static const uint64_t caps[] = {8, 1000 * 8, 4104, 1 * GiB, 1 * GiB + 4096, 3 * GiB + 8};
    for (size_t i = 0; i < MC_ARRAY_SIZE(caps); i++) {
        mc_oalloc_t *a = make(caps[i], 16);
        for (int round = 0; round < 2; round++) {
            mc_oalloc_handle_t h = must_alloc(a, caps[i]);
            assert_int_equal(h.offset, 0);
            assert_int_equal(mc_oalloc_size(a, h), caps[i]);
            assert_int_equal(mc_oalloc_used(a), caps[i]);
            assert_int_equal(mc_oalloc_largest_free(a), 0);
            assert_ratio(mc_oalloc_free_ratio(a), 0.0);
            assert_no_space(a, 8);
            mc_oalloc_free(a, h);
            assert_int_equal(mc_oalloc_used(a), 0);
            assert_int_equal(mc_oalloc_largest_free(a), caps[i]);
            assert_ratio(mc_oalloc_free_ratio(a), 1.0);
        }
        mc_oalloc_destroy(a);
    }
}

static void zero_and_oversized_requests_are_invalid_params(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(1 * MiB, 16);
    mc_oalloc_handle_t h;
    assert_int_equal(mc_oalloc_alloc(a, 0, &h), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_alloc(a, 1 * MiB + 1, &h), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_alloc(a, UINT64_MAX, &h), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_alloc(a, 8, NULL), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_live(a), 0);
    mc_oalloc_destroy(a);
}

static void capacity_is_rounded_down_to_the_alignment(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(1003, 16);
    mc_oalloc_handle_t h;
    assert_int_equal(mc_oalloc_capacity(a), 1000);
    assert_int_equal(mc_oalloc_alloc(a, 1001, &h), MC_ERR_INVALID_PARAMS);
    h = must_alloc(a, 1000);
    assert_int_equal(mc_oalloc_used(a), 1000);
    mc_oalloc_free(a, h);
    mc_oalloc_destroy(a);
}

static void create_rejects_bad_parameters(void **state)
{
    (void)state;
    mc_oalloc_t *a = NULL;
    assert_int_equal(mc_oalloc_create(0, 16, &a), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_create(MC_OALLOC_ALIGN - 1, 16, &a), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_create(1 * MiB, 0, &a), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_create(1 * MiB, UINT32_MAX, &a), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_create(1 * MiB, 16, NULL), MC_ERR_INVALID_PARAMS);
    assert_null(a);
    mc_oalloc_destroy(NULL);
}

static void create_reports_out_of_memory_and_frees_what_it_took(void **state)
{
    (void)state;
    for (long nth = 1; nth <= 2; nth++) {
        mc_oalloc_t *a = NULL;
        mc_mem_fail_nth(nth);
        assert_int_equal(mc_oalloc_create(1 * MiB, 16, &a), MC_ERR_NOMEM);
        assert_null(a);
    }
    mc_mem_fail_nth(0);
}

static void sizes_are_rounded_up_to_the_alignment(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(1 * MiB, 16);
    mc_oalloc_handle_t h1 = must_alloc(a, 1);
    mc_oalloc_handle_t h2 = must_alloc(a, 9);
    assert_int_equal(mc_oalloc_size(a, h1), 8);
    assert_int_equal(mc_oalloc_size(a, h2), 16);
    assert_int_equal(h2.offset, 8);
    assert_int_equal(mc_oalloc_used(a), 24);
    assert_int_equal(mc_oalloc_live(a), 2);
    mc_oalloc_free(a, h1);
    mc_oalloc_free(a, h2);
    assert_int_equal(mc_oalloc_live(a), 0);
    mc_oalloc_destroy(a);
}

static void running_out_of_space_fails_and_a_free_makes_room(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(1 * MiB, 64);
    mc_oalloc_handle_t h[16];
    for (int i = 0; i < 16; i++) {
        h[i] = must_alloc(a, 64 * KiB);
        assert_int_equal(h[i].offset, (uint64_t)i * 64 * KiB);
    }
    assert_no_space(a, 8);
    mc_oalloc_free(a, h[5]);
    assert_int_equal(mc_oalloc_largest_free(a), 64 * KiB);
    assert_no_space(a, 64 * KiB + 8);
    h[5] = must_alloc(a, 64 * KiB);
    assert_int_equal(h[5].offset, 5 * 64 * KiB);
    for (int i = 0; i < 16; i++)
        mc_oalloc_free(a, h[i]);
    mc_oalloc_destroy(a);
}

static void running_out_of_nodes_fails_even_with_space_left(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(1 * MiB, 4);
    mc_oalloc_handle_t h[4];
    for (int i = 0; i < 4; i++)
        h[i] = must_alloc(a, 8);
    assert_no_space(a, 8);
    assert_int_equal(mc_oalloc_live(a), 4);
    mc_oalloc_free(a, h[1]); /* leaves a hole, so 4 live + 3 free ranges */
    h[1] = must_alloc(a, 16);
    assert_no_space(a, 8);
    for (int i = 0; i < 4; i++)
        mc_oalloc_free(a, h[i]);
    assert_int_equal(mc_oalloc_largest_free(a), 1 * MiB);
    mc_oalloc_destroy(a);
}

/* Four 1 KiB allocations filling a 4 KiB space. */
static mc_oalloc_t *four_blocks(mc_oalloc_handle_t h[4])
{
    mc_oalloc_t *a = make(4 * KiB, 8);
    for (int i = 0; i < 4; i++)
        h[i] = must_alloc(a, 1 * KiB);
    assert_int_equal(mc_oalloc_largest_free(a), 0);
    return a;
}

static void free_all_and_check_the_space_is_whole(mc_oalloc_t *a, mc_oalloc_handle_t *h, int n)
{
    for (int i = 0; i < n; i++)
        mc_oalloc_free(a, h[i]);
    assert_int_equal(mc_oalloc_used(a), 0);
    assert_int_equal(mc_oalloc_largest_free(a), mc_oalloc_capacity(a));
    mc_oalloc_handle_t all = must_alloc(a, mc_oalloc_capacity(a));
    mc_oalloc_free(a, all);
    mc_oalloc_destroy(a);
}

static void free_merges_with_a_free_left_neighbour(void **state)
{
    (void)state;
    mc_oalloc_handle_t h[4];
    mc_oalloc_t *a = four_blocks(h);
    mc_oalloc_free(a, h[0]);
    mc_oalloc_free(a, h[1]);
    assert_int_equal(mc_oalloc_largest_free(a), 2 * KiB);
    h[0] = must_alloc(a, 2 * KiB);
    assert_int_equal(h[0].offset, 0);
    free_all_and_check_the_space_is_whole(a, (mc_oalloc_handle_t[]){h[0], h[2], h[3]}, 3);
}

static void free_merges_with_a_free_right_neighbour(void **state)
{
    (void)state;
    mc_oalloc_handle_t h[4];
    mc_oalloc_t *a = four_blocks(h);
    mc_oalloc_free(a, h[3]);
    mc_oalloc_free(a, h[2]);
    assert_int_equal(mc_oalloc_largest_free(a), 2 * KiB);
    h[2] = must_alloc(a, 2 * KiB);
    assert_int_equal(h[2].offset, 2 * KiB);
    free_all_and_check_the_space_is_whole(a, (mc_oalloc_handle_t[]){h[0], h[1], h[2]}, 3);
}

static void free_merges_with_free_neighbours_on_both_sides(void **state)
{
    (void)state;
    mc_oalloc_handle_t h[4];
    mc_oalloc_t *a = four_blocks(h);
    mc_oalloc_free(a, h[0]);
    mc_oalloc_free(a, h[2]);
    assert_int_equal(mc_oalloc_largest_free(a), 1 * KiB);
    mc_oalloc_free(a, h[1]);
    assert_int_equal(mc_oalloc_largest_free(a), 3 * KiB);
    h[0] = must_alloc(a, 3 * KiB);
    assert_int_equal(h[0].offset, 0);
    free_all_and_check_the_space_is_whole(a, (mc_oalloc_handle_t[]){h[0], h[3]}, 2);
}

static void holes_smaller_than_a_request_fail_it_despite_enough_free_bytes(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(1 * MiB, 64);
    mc_oalloc_handle_t h[16];
    for (int i = 0; i < 16; i++)
        h[i] = must_alloc(a, 64 * KiB);
    for (int i = 0; i < 16; i += 2)
        mc_oalloc_free(a, h[i]);
    assert_ratio(mc_oalloc_free_ratio(a), 0.5);
    assert_int_equal(mc_oalloc_largest_free(a), 64 * KiB);
    assert_no_space(a, 64 * KiB + 8);
    /* one hole of three blocks: 4, 5 and 6 */
    mc_oalloc_free(a, h[5]);
    assert_int_equal(mc_oalloc_largest_free(a), 192 * KiB);
    assert_no_space(a, 192 * KiB + 8);
    h[5] = must_alloc(a, 192 * KiB);
    assert_int_equal(h[5].offset, 4 * 64 * KiB);
    assert_int_equal(mc_oalloc_largest_free(a), 64 * KiB);
    mc_oalloc_free(a, h[5]);
    for (int i = 1; i < 16; i += 2)
        if (i != 5)
            mc_oalloc_free(a, h[i]);
    assert_int_equal(mc_oalloc_largest_free(a), 1 * MiB);
    mc_oalloc_destroy(a);
}

/* 512 KiB .. 576 KiB - 1 is one bin: holes of 520, 575 and 530 KiB share it. */
static void a_request_in_the_bin_of_the_largest_hole_still_finds_it(void **state)
{
    (void)state;
    static const uint64_t piece[] = {520 * KiB, 4 * KiB, 575 * KiB, 4 * KiB, 530 * KiB, 4 * KiB};
    uint64_t cap = 0;
    for (size_t i = 0; i < MC_ARRAY_SIZE(piece); i++)
        cap += piece[i];
    mc_oalloc_t *a = make(cap, 16);
    mc_oalloc_handle_t h[MC_ARRAY_SIZE(piece)];
    for (size_t i = 0; i < MC_ARRAY_SIZE(piece); i++)
        h[i] = must_alloc(a, piece[i]);
    mc_oalloc_free(a, h[0]);
    mc_oalloc_free(a, h[2]);
    mc_oalloc_free(a, h[4]);
    assert_int_equal(mc_oalloc_largest_free(a), 575 * KiB);

    mc_oalloc_handle_t big = must_alloc(a, 570 * KiB);
    assert_int_equal(big.offset, h[2].offset);
    assert_int_equal(mc_oalloc_largest_free(a), 530 * KiB);
    assert_no_space(a, 540 * KiB);
    mc_oalloc_handle_t mid = must_alloc(a, 530 * KiB);
    assert_int_equal(mid.offset, h[4].offset);
    assert_int_equal(mc_oalloc_largest_free(a), 520 * KiB);

    mc_oalloc_free(a, big);
    mc_oalloc_free(a, mid);
    assert_int_equal(mc_oalloc_largest_free(a), 575 * KiB);
    mc_oalloc_destroy(a);
}

static void a_handle_that_is_not_live_is_ignored(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(1 * MiB, 16);
    mc_oalloc_handle_t h = must_alloc(a, 4 * KiB);
    mc_oalloc_handle_t keep = must_alloc(a, 4 * KiB);
    mc_oalloc_free(a, h);
    mc_oalloc_free(a, h); /* twice */
    mc_oalloc_free(a, (mc_oalloc_handle_t){0, MC_OALLOC_NO_NODE});
    mc_oalloc_free(a, (mc_oalloc_handle_t){keep.offset + 8, keep.node});
    mc_oalloc_free(a, (mc_oalloc_handle_t){0, 1000});
    assert_int_equal(mc_oalloc_size(a, h), 0);
    assert_int_equal(mc_oalloc_size(a, (mc_oalloc_handle_t){0, MC_OALLOC_NO_NODE}), 0);
    assert_int_equal(mc_oalloc_live(a), 1);
    assert_int_equal(mc_oalloc_used(a), 4 * KiB);
    assert_int_equal(mc_oalloc_size(a, keep), 4 * KiB);
    mc_oalloc_free(a, keep);
    assert_int_equal(mc_oalloc_largest_free(a), 1 * MiB);
    mc_oalloc_destroy(a);
}

static void a_terabyte_segment_serves_tens_of_gigabytes_per_allocation(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(1 * TiB, 64);
    mc_oalloc_handle_t h[26];
    for (int i = 0; i < 25; i++) {
        h[i] = must_alloc(a, 40 * GiB);
        assert_int_equal(h[i].offset, (uint64_t)i * 40 * GiB);
    }
    assert_no_space(a, 40 * GiB);
    assert_int_equal(mc_oalloc_largest_free(a), 24 * GiB);
    h[25] = must_alloc(a, 24 * GiB);
    assert_int_equal(mc_oalloc_used(a), 1 * TiB);
    for (int i = 0; i < 26; i += 2)
        mc_oalloc_free(a, h[i]);
    assert_int_equal(mc_oalloc_largest_free(a), 40 * GiB);
    assert_no_space(a, 40 * GiB + 8);
    for (int i = 1; i < 26; i += 2)
        mc_oalloc_free(a, h[i]);
    h[0] = must_alloc(a, 1 * TiB);
    mc_oalloc_free(a, h[0]);
    mc_oalloc_destroy(a);
}

static void the_whole_64_bit_range_works_without_overflow(void **state)
{
    (void)state;
    const uint64_t cap = UINT64_MAX & ~(uint64_t)(MC_OALLOC_ALIGN - 1);
    const uint64_t half = UINT64_C(1) << 63, quarter = UINT64_C(1) << 62;
    mc_oalloc_t *a = make(UINT64_MAX, 16);
    mc_oalloc_handle_t h;
    assert_int_equal(mc_oalloc_capacity(a), cap);
    assert_int_equal(mc_oalloc_largest_free(a), cap);
    assert_int_equal(mc_oalloc_alloc(a, UINT64_MAX, &h), MC_ERR_INVALID_PARAMS);
    mc_oalloc_handle_t h0 = must_alloc(a, half);
    mc_oalloc_handle_t h1 = must_alloc(a, quarter);
    mc_oalloc_handle_t h2 = must_alloc(a, cap - half - quarter);
    assert_int_equal(h1.offset, half);
    assert_int_equal(h2.offset, half + quarter);
    assert_int_equal(mc_oalloc_used(a), cap);
    assert_no_space(a, 8);
    mc_oalloc_free(a, h1);
    assert_int_equal(mc_oalloc_largest_free(a), quarter);
    mc_oalloc_free(a, h0);
    assert_int_equal(mc_oalloc_largest_free(a), half + quarter);
    mc_oalloc_free(a, h2);
    h = must_alloc(a, cap);
    mc_oalloc_free(a, h);
    mc_oalloc_destroy(a);
}

/* ---- randomized check against a reference model ---- */

/* The model: live allocations sorted by offset (bytes, sizes aligned). */
typedef struct model_block {
    uint64_t offset, size;
    mc_oalloc_handle_t h;
} model_block_t;

typedef struct model {
    model_block_t *b;
    size_t n;
    uint64_t capacity, used;
} model_t;

static uint64_t rng_next(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t model_largest_gap(const model_t *m)
{
    uint64_t best = 0, end = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (m->b[i].offset - end > best)
            best = m->b[i].offset - end;
        end = m->b[i].offset + m->b[i].size;
    }
    return m->capacity - end > best ? m->capacity - end : best;
}

/* Insert, checking the block lies inside the space and overlaps no live one. */
static void model_insert(model_t *m, mc_oalloc_handle_t h, uint64_t size)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->b[mid].offset < h.offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    assert_true(h.offset <= m->capacity && size <= m->capacity - h.offset);
    if (lo > 0)
        assert_true(m->b[lo - 1].offset + m->b[lo - 1].size <= h.offset);
    if (lo < m->n)
        assert_true(h.offset + size <= m->b[lo].offset);
    memmove(&m->b[lo + 1], &m->b[lo], (m->n - lo) * sizeof(m->b[0]));
    m->b[lo] = (model_block_t){h.offset, size, h};
    m->n++;
    m->used += size;
}

static void model_remove(model_t *m, size_t i)
{
    m->used -= m->b[i].size;
    memmove(&m->b[i], &m->b[i + 1], (m->n - i - 1) * sizeof(m->b[0]));
    m->n--;
}

/* Sizes from 1 B to 64 MiB, spread evenly over the powers of two. */
static uint64_t random_size(uint64_t *rng)
{
    unsigned e = (unsigned)(rng_next(rng) % 26);
    uint64_t lo = UINT64_C(1) << e;
    return lo + rng_next(rng) % lo;
}

/*
 * Every step: the allocator succeeds exactly when the model has room (a free
 * range >= the aligned request, and fewer than max_allocs live), never hands
 * out overlapping or out-of-range blocks, and agrees with the model on used,
 * live, free_ratio and largest_free.
 */
static void random_operations_agree_with_a_reference_model(void **state)
{
    (void)state;
    enum { STEPS = 200000, MAX_ALLOCS = 500 };
    const uint64_t cap = 1 * GiB + 4096; /* not a bin floor */
    model_t m = {mc_calloc(MAX_ALLOCS, sizeof(model_block_t)), 0, cap, 0};
    assert_non_null(m.b);
    mc_oalloc_t *a = make(cap + 5, MAX_ALLOCS);
    uint64_t rng = 42;
    long ok = 0, no_space = 0, no_node = 0, frees = 0, exact_gap = 0;

    for (long step = 0; step < STEPS; step++) {
        /* phases that mostly fill and mostly drain, so both limits are hit and
         * the space goes through many fragmentation states */
        uint64_t free_pct = (step / 5000) % 2 ? 65 : 35;
        uint64_t r = rng_next(&rng) % 100;
        if (r < free_pct && m.n > 0) {
            size_t i = (size_t)(rng_next(&rng) % m.n);
            assert_int_equal(mc_oalloc_size(a, m.b[i].h), m.b[i].size);
            mc_oalloc_free(a, m.b[i].h);
            model_remove(&m, i);
            frees++;
        } else {
            uint64_t gap = model_largest_gap(&m);
            uint64_t size;
            if (r >= 94 && gap > 64) {
                /* around the largest gap: exercises the same-bin search */
                size = gap - rng_next(&rng) % 16 + 8 * (rng_next(&rng) % 2);
                exact_gap++;
            } else {
                size = random_size(&rng);
            }
            uint64_t aligned = (size + MC_OALLOC_ALIGN - 1) & ~(uint64_t)(MC_OALLOC_ALIGN - 1);
            mc_oalloc_handle_t h;
            mc_status_t st = mc_oalloc_alloc(a, size, &h);
            if (size > cap) {
                assert_int_equal(st, MC_ERR_INVALID_PARAMS);
            } else if (m.n == MAX_ALLOCS) {
                assert_int_equal(st, MC_ERR_NO_AVAILABLE_HANDLE);
                no_node++;
            } else if (aligned > gap) {
                assert_int_equal(st, MC_ERR_NO_AVAILABLE_HANDLE);
                no_space++;
            } else {
                assert_int_equal(st, MC_OK);
                assert_int_equal(h.offset % MC_OALLOC_ALIGN, 0);
                model_insert(&m, h, aligned);
                ok++;
            }
        }
        assert_int_equal(mc_oalloc_used(a), m.used);
        assert_int_equal(mc_oalloc_live(a), m.n);
        assert_ratio(mc_oalloc_free_ratio(a), (double)(cap - m.used) / (double)cap);
        assert_int_equal(mc_oalloc_largest_free(a), model_largest_gap(&m));
    }
    print_message("%ld allocs (%ld near the largest gap), %ld frees, %ld failed for space,"
                  " %ld for nodes\n",
                  ok, exact_gap, frees, no_space, no_node);
    /* the run must have reached both limits to mean anything */
    assert_true(no_space > 1000 && no_node > 100 && ok > 50000);

    while (m.n > 0) {
        mc_oalloc_free(a, m.b[m.n - 1].h);
        model_remove(&m, m.n - 1);
    }
    assert_int_equal(mc_oalloc_largest_free(a), cap);
    mc_oalloc_handle_t all = must_alloc(a, cap);
    mc_oalloc_free(a, all);
    mc_oalloc_destroy(a);
    mc_free(m.b);
}

/* ---- reserve: rebuilding another allocator's exact ranges ---- */

static void reserve_takes_exactly_the_range_asked_for(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(4096, 64);
    mc_oalloc_handle_t h;
    assert_int_equal(mc_oalloc_reserve(a, 1024, 100, &h), MC_OK);
    assert_int_equal(h.offset, 1024);
    assert_int_equal(mc_oalloc_size(a, h), 104); /* rounded up to the alignment */
    assert_int_equal(mc_oalloc_used(a), 104);
    /* the space in front and behind stays free: largest is what follows */
    assert_int_equal(mc_oalloc_largest_free(a), 4096 - 1024 - 104);
    mc_oalloc_handle_t front;
    assert_int_equal(mc_oalloc_reserve(a, 0, 1024, &front), MC_OK);
    mc_oalloc_free(a, h);
    mc_oalloc_free(a, front);
    assert_int_equal(mc_oalloc_largest_free(a), 4096); /* merged back whole */
    mc_oalloc_destroy(a);
}

static void reserve_refuses_a_range_overlapping_a_live_one(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(4096, 64);
    mc_oalloc_handle_t h, x;
    assert_int_equal(mc_oalloc_reserve(a, 512, 512, &h), MC_OK);
    assert_int_equal(mc_oalloc_reserve(a, 512, 8, &x), MC_ERR_EXISTS);
    assert_int_equal(mc_oalloc_reserve(a, 256, 512, &x), MC_ERR_EXISTS); /* tail overlaps */
    assert_int_equal(mc_oalloc_reserve(a, 1016, 16, &x), MC_ERR_EXISTS); /* head overlaps */
    assert_int_equal(mc_oalloc_reserve(a, 1024, 8, &x), MC_OK);          /* adjacent is fine */
    assert_int_equal(mc_oalloc_live(a), 2);
    mc_oalloc_destroy(a);
}

static void reserve_rejects_misaligned_and_out_of_range_requests(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(4096, 64);
    mc_oalloc_handle_t h;
    assert_int_equal(mc_oalloc_reserve(a, 3, 8, &h), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_reserve(a, 0, 0, &h), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_reserve(a, 4096, 8, &h), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_reserve(a, 4000, 200, &h), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_reserve(a, UINT64_MAX - 7, 16, &h), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_oalloc_live(a), 0);
    mc_oalloc_destroy(a);
}

static void reserve_respects_the_allocation_limit(void **state)
{
    (void)state;
    mc_oalloc_t *a = make(4096, 2);
    mc_oalloc_handle_t h;
    assert_int_equal(mc_oalloc_reserve(a, 0, 8, &h), MC_OK);
    assert_int_equal(mc_oalloc_reserve(a, 64, 8, &h), MC_OK);
    assert_int_equal(mc_oalloc_reserve(a, 128, 8, &h), MC_ERR_NO_AVAILABLE_HANDLE);
    mc_oalloc_destroy(a);
}

/* A replica allocator fed the (offset, size) of every allocation of a
 * primary, in order, ends in the same state: same ranges, same free space,
 * and it then hands out the same offsets as the primary. */
static void replaying_allocations_rebuilds_an_identical_allocator(void **state)
{
    (void)state;
    mc_oalloc_t *p = make(1 << 20, 4096), *r = make(1 << 20, 4096);
    mc_oalloc_handle_t ph[512], rh[512];
    uint64_t seed = 42;
    for (int i = 0; i < 512; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t sz = 8 + (seed >> 33) % 1500;
        assert_int_equal(mc_oalloc_alloc(p, sz, &ph[i]), MC_OK);
        assert_int_equal(mc_oalloc_reserve(r, ph[i].offset, sz, &rh[i]), MC_OK);
        assert_int_equal(rh[i].offset, ph[i].offset);
        if (i % 3 == 2) { /* frees in between make holes the replay must find */
            mc_oalloc_free(p, ph[i - 1]);
            mc_oalloc_free(r, rh[i - 1]);
        }
    }
    assert_int_equal(mc_oalloc_used(p), mc_oalloc_used(r));
    assert_int_equal(mc_oalloc_live(p), mc_oalloc_live(r));
    assert_int_equal(mc_oalloc_largest_free(p), mc_oalloc_largest_free(r));
    mc_oalloc_destroy(p);
    mc_oalloc_destroy(r);
}

/* A replica fed a primary's live ranges in any order (a snapshot lists its
 * objects in hash order) ends with the same ranges; so it does again after
 * frees merged the ranges its search starts pointed at; and a range that
 * overlaps a live one is still refused, wherever the search starts. */
static void reserving_in_any_order_rebuilds_the_same_ranges(void **state)
{
    (void)state;
    enum { N = 4000 };
    mc_oalloc_t *p = make(64 << 20, 8192), *r = make(64 << 20, 8192);
    static mc_oalloc_handle_t ph[N], rh[N];
    static uint64_t sz[N];
    static int live[N], order[N], freed[N];
    uint64_t seed = 7;
    int n = 0;
    for (int i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        sz[i] = 8 + (seed >> 33) % 9000;
        assert_int_equal(mc_oalloc_alloc(p, sz[i], &ph[i]), MC_OK);
        live[i] = 1;
        if (i % 5 == 4) { /* holes */
            mc_oalloc_free(p, ph[i - 2]);
            live[i - 2] = 0;
        }
    }
    for (int i = 0; i < N; i++)
        if (live[i])
            order[n++] = i;
    for (int round = 0; round < 2; round++) {
        for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int j = (int)((seed >> 33) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int k = 0; k < n; k++) {
            int i = order[k];
            if (round == 1 && !freed[i])
                continue; /* round 2: the freed half only */
            assert_int_equal(mc_oalloc_reserve(r, ph[i].offset, sz[i], &rh[i]), MC_OK);
            assert_int_equal(rh[i].offset, ph[i].offset);
        }
        assert_int_equal(mc_oalloc_used(r), mc_oalloc_used(p));
        assert_int_equal(mc_oalloc_live(r), mc_oalloc_live(p));
        assert_int_equal(mc_oalloc_largest_free(r), mc_oalloc_largest_free(p));
        for (int k = 0; k < n; k++) {
            mc_oalloc_handle_t x;
            int i = order[k];
            if (k % 7 == 0) /* inside a live range: refused */
                assert_int_equal(mc_oalloc_reserve(r, ph[i].offset, 8, &x), MC_ERR_EXISTS);
        }
        if (round == 0) /* free every other, in this order: merges */
            for (int k = 0; k < n; k += 2) {
                mc_oalloc_free(r, rh[order[k]]);
                freed[order[k]] = 1;
            }
    }
    mc_oalloc_destroy(p);
    mc_oalloc_destroy(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(whole_capacity_fits_in_one_allocation),
        cmocka_unit_test(zero_and_oversized_requests_are_invalid_params),
        cmocka_unit_test(capacity_is_rounded_down_to_the_alignment),
        cmocka_unit_test(create_rejects_bad_parameters),
        cmocka_unit_test(create_reports_out_of_memory_and_frees_what_it_took),
        cmocka_unit_test(sizes_are_rounded_up_to_the_alignment),
        cmocka_unit_test(running_out_of_space_fails_and_a_free_makes_room),
        cmocka_unit_test(running_out_of_nodes_fails_even_with_space_left),
        cmocka_unit_test(free_merges_with_a_free_left_neighbour),
        cmocka_unit_test(free_merges_with_a_free_right_neighbour),
        cmocka_unit_test(free_merges_with_free_neighbours_on_both_sides),
        cmocka_unit_test(holes_smaller_than_a_request_fail_it_despite_enough_free_bytes),
        cmocka_unit_test(a_request_in_the_bin_of_the_largest_hole_still_finds_it),
        cmocka_unit_test(a_handle_that_is_not_live_is_ignored),
        cmocka_unit_test(a_terabyte_segment_serves_tens_of_gigabytes_per_allocation),
        cmocka_unit_test(the_whole_64_bit_range_works_without_overflow),
        cmocka_unit_test(random_operations_agree_with_a_reference_model),
        cmocka_unit_test(reserve_takes_exactly_the_range_asked_for),
        cmocka_unit_test(reserve_refuses_a_range_overlapping_a_live_one),
        cmocka_unit_test(reserve_rejects_misaligned_and_out_of_range_requests),
        cmocka_unit_test(reserve_respects_the_allocation_limit),
        cmocka_unit_test(replaying_allocations_rebuilds_an_identical_allocator),
        cmocka_unit_test(reserving_in_any_order_rebuilds_the_same_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
