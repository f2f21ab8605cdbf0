/*
 * mem.h - heap allocation wrappers.
 *
 * All heap use in libmooncake goes through these so that tests can make the
 * N-th allocation fail (mc_mem_fail_nth) and check every error path frees what
 * it took. They behave like their libc namesakes; mc_free(NULL) is a no-op.
 */
#ifndef MC_UTIL_MEM_H
#define MC_UTIL_MEM_H

#include <stddef.h>

void *mc_malloc(size_t size);
void *mc_calloc(size_t n, size_t size);
void *mc_realloc(void *p, size_t size);
char *mc_strdup(const char *s);
char *mc_strndup(const char *s, size_t n);
void mc_free(void *p);

/* Fault injection for tests: the n-th allocation from now (1 = the next one)
 * returns NULL, once. n = 0 disables. Process-wide and thread-safe. */
void mc_mem_fail_nth(long n);

/* Fault injection for tests: every allocation fails while on. */
void mc_mem_fail_all(int on);

/* Allocations made through these wrappers since start (for tests and stats). */
long mc_mem_alloc_count(void);

#define MC_NEW(type) ((type *)mc_calloc(1, sizeof(type)))
#define MC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif /* MC_UTIL_MEM_H */
