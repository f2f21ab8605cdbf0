/* hash.c - see hash.h. xxhash is used header-only so the hash inlines
 * (long inputs: its library's dispatching entry points, where built). */
#include "util/hash.h"

#include <stdint.h>
#include <sys/uio.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#if defined(MC_HAVE_XXH_DISPATCH) && defined(__x86_64__)
/* libxxhash's entry points that pick AVX-512, AVX2 or SSE2 at run time
 * (xxh_x86dispatch.h; declared here: that header renames the inlined
 * functions). The same values: XXH3's output does not depend on the code
 * path. Long inputs only: short ones (keys) stay inlined. A 4 MiB checksum
 * just read from disk: 392-446 us inlined, 295 us dispatched (AVX-512) on the
 * test VM. */
uint64_t XXH3_64bits_dispatch(const void *input, size_t len);
int XXH3_64bits_update_dispatch(void *state, const void *input, size_t len);
#define LONG_INPUT 1024
#define HASH_LONG(data, len) XXH3_64bits_dispatch(data, len)
#define UPDATE(st, data, len)                                                                      \
    ((len) >= LONG_INPUT ? (void)XXH3_64bits_update_dispatch(st, data, len)                        \
                         : (void)XXH3_64bits_update(st, data, len))
#else
#define LONG_INPUT SIZE_MAX
#define HASH_LONG(data, len) XXH3_64bits(data, len)
#define UPDATE(st, data, len) (void)XXH3_64bits_update(st, data, len)
#endif

uint64_t mc_hash64(const void *data, size_t len)
{
    if (len >= LONG_INPUT)
        return (uint64_t)HASH_LONG(data, len);
    return (uint64_t)XXH3_64bits(data, len);
}

uint64_t mc_hash64_iov(const struct iovec *iov, size_t n)
{
    if (n == 1)
        return mc_hash64(iov[0].iov_base, iov[0].iov_len);
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (size_t i = 0; i < n; i++)
        UPDATE(&st, iov[i].iov_base, iov[i].iov_len);
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
    UPDATE(stream_state(h), data, len);
}

uint64_t mc_hash64_end(mc_hash64_stream_t *h)
{
    return (uint64_t)XXH3_64bits_digest(stream_state(h));
}
