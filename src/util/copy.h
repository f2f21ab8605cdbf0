/*
 * copy.h - bulk copies.
 *
 * mc_copy_cold: memcpy for a destination nobody reads soon (a value written
 * into a store segment, read later by other calls or processes). Large
 * copies (MC_COPY_COLD_MIN and up) use non-temporal stores on x86-64: the
 * destination's cache lines are not read first (no read-for-ownership, a
 * third of the memory traffic of a copy to memory not in cache) and the
 * copy does not evict what the caches hold. Smaller copies, and every copy
 * on other architectures, are memcpy. The stores are complete (sfence)
 * when it returns. The regions must not overlap.
 */
#ifndef MC_UTIL_COPY_H
#define MC_UTIL_COPY_H

#include <stddef.h>

#define MC_COPY_COLD_MIN (256u * 1024u)

void mc_copy_cold(void *dst, const void *src, size_t n);

#endif /* MC_UTIL_COPY_H */
