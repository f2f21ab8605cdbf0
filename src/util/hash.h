/*
 * hash.h - the project's stable 64-bit hash.
 *
 * XXH3-64 with seed 0 (xxHash >= 0.8, whose XXH3 output is frozen). It is
 * stable across processes, hosts and versions, so it may be used for anything
 * that is stored or shared: master shard selection, persistent file names.
 */
#ifndef MC_UTIL_HASH_H
#define MC_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t mc_hash64(const void *data, size_t len);

struct iovec;
/* mc_hash64 of the concatenation of iov[0 .. n) (streaming: no copy). */
uint64_t mc_hash64_iov(const struct iovec *iov, size_t n);

/* mc_hash64 of bytes given in pieces, in order: begin, update per piece,
 * end gives the same value as mc_hash64 of the pieces put together (so a
 * file's checksum can be computed while the rest of it is still being
 * read). The state is ~600 bytes, aligned inside (any placement; not to be
 * copied once begun); no allocation. */
typedef struct mc_hash64_stream {
    unsigned char raw[704];
} mc_hash64_stream_t;
void mc_hash64_begin(mc_hash64_stream_t *h);
void mc_hash64_update(mc_hash64_stream_t *h, const void *data, size_t len);
uint64_t mc_hash64_end(mc_hash64_stream_t *h);

static inline uint64_t mc_hash_u64(uint64_t x)
{
    /* splitmix64 finaliser: a cheap, well-mixed hash for integer keys */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

#endif /* MC_UTIL_HASH_H */
