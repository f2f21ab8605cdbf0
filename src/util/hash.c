/* hash.c - see hash.h. xxhash is used header-only so the hash inlines. */
#include "util/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t mc_hash64(const void *data, size_t len)
{
    return (uint64_t)XXH3_64bits(data, len);
}
