/*
 * mooncake/visibility.h - export control for the public C ABI.
 *
 * libmooncake is built with -fvisibility=hidden; only declarations marked
 * MC_API are exported from libmooncake.so.
 */
#ifndef MOONCAKE_VISIBILITY_H
#define MOONCAKE_VISIBILITY_H

#if defined(__GNUC__) || defined(__clang__)
#define MC_API __attribute__((visibility("default")))
#else
#define MC_API
#endif

#endif /* MOONCAKE_VISIBILITY_H */
