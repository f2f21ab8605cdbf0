/* hash.c - see hash.h. xxhash is used header-only so the hash inlines. */
#include "util/hash.h"

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
