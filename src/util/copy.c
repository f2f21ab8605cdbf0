/*
 * copy.c - bulk copies (copy.h).
 */
#include "util/copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>

/* 64 bytes a step: unaligned loads, aligned streaming stores. */
static void copy_stream(uint8_t *d, const uint8_t *s, size_t n)
{
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
        _mm_stream_si128((__m128i *)(void *)d, a);
        _mm_stream_si128((__m128i *)(void *)(d + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + 48), e);
    }
    _mm_sfence(); /* ordered before whatever publishes the bytes */
    memcpy(d, s, n);
}
#endif

void mc_copy_cold(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__) && defined(__SSE2__)
    if (n >= MC_COPY_COLD_MIN) {
        copy_stream(dst, src, n);
        return;
    }
#endif
    memcpy(dst, src, n);
}
