/*
 * util/copy.c: mc_copy_cold copies byte for byte whatever the sizes (below,
 * at and above the streaming threshold) and the alignments of both sides,
 * and writes nothing outside the destination.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "util/copy.h"

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (uint8_t)(x >> 16);
    }
}

static void every_size_and_alignment_copies_exactly_and_stays_inside(void **state)
{
    (void)state;
    const size_t sizes[] = {0,
                            1,
                            63,
                            64,
                            65,
                            4096,
                            MC_COPY_COLD_MIN - 1,
                            MC_COPY_COLD_MIN,
                            MC_COPY_COLD_MIN + 1,
                            MC_COPY_COLD_MIN + 63,
                            (1u << 20) + 17,
                            (4u << 20) + 5};
    size_t max = (4u << 20) + 5 + 256;
    uint8_t *src = malloc(max), *dst = malloc(max + 256), *want = malloc(max + 256);
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(want);
    fill(src, max, 1);
    const size_t aligns[][2] = {{0, 0}, {1, 0}, {0, 1}, {7, 33}, {63, 64}, {17, 5}};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (size_t a = 0; a < sizeof(aligns) / sizeof(aligns[0]); a++) {
            size_t n = sizes[i], so = aligns[a][0], doff = aligns[a][1] + 64;
            memset(dst, 0xa5, n + doff + 64);
            memset(want, 0xa5, n + doff + 64);
            memcpy(want + doff, src + so, n);
            mc_copy_cold(dst + doff, src + so, n);
            assert_memory_equal(dst, want, n + doff + 64);
        }
    }
    free(src);
    free(dst);
    free(want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_size_and_alignment_copies_exactly_and_stays_inside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
