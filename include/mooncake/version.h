/*
 * mooncake/version.h - the version of libmooncake.
 *
 * mc_version() returns the release string the library was built as (the
 * Makefile's VERSION, e.g. "0.1.0"): static storage, any thread. Programs
 * print it for --version; the Python package reports it as
 * mooncake.__version__.
 */
#ifndef MOONCAKE_VERSION_H
#define MOONCAKE_VERSION_H

#include "mooncake/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

MC_API const char *mc_version(void);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_VERSION_H */
