/* hash.c - see hash.h. xxhash is used header-only so the hash inlines. */
#include "util/hash.h"

#include <stdint.h>
#include <sys/uio.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t mc_hash64(const void *data, size_t len)
{
    return (uint64_t)XXH3_64bits(data, len);
}

uint64_t mc_hash64_iov(const struct iovec *iov, size_t n)
{
    if (n == 1)
        return mc_hash64(iov[0].iov_base, iov[0].iov_len);
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (size_t i = 0; i < n; i++)
        XXH3_64bits_update(&st, iov[i].iov_base, iov[i].iov_len);
    return (uint64_t)XXH3_64bits_digest(&st);
}

/* XXH3's state wants 64-byte alignment: placed inside raw, whatever raw's. */
_Static_assert(sizeof(XXH3_state_t) + 63 <= sizeof(((mc_hash64_stream_t *)0)->raw),
               "mc_hash64_stream_t too small for XXH3_state_t");

static XXH3_state_t *stream_state(mc_hash64_stream_t *h)
{
    return (XXH3_state_t *)(((uintptr_t)h->raw + 63) & ~(uintptr_t)63);
}

void mc_hash64_begin(mc_hash64_stream_t *h)
{
    XXH3_64bits_reset(stream_state(h));
}

void mc_hash64_update(mc_hash64_stream_t *h, const void *data, size_t len)
{
    XXH3_64bits_update(stream_state(h), data, len);
}

uint64_t mc_hash64_end(mc_hash64_stream_t *h)
{
    return (uint64_t)XXH3_64bits_digest(stream_state(h));
}
