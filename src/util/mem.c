/* mem.c - see mem.h. */
#include "util/mem.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic long fail_countdown; /* 0 = off */
static _Atomic int fail_all;
static _Atomic long alloc_count;

void mc_mem_fail_nth(long n)
{
    atomic_store(&fail_countdown, n);
}

void mc_mem_fail_all(int on)
{
    atomic_store(&fail_all, on);
}

long mc_mem_alloc_count(void)
{
    return atomic_load_explicit(&alloc_count, memory_order_relaxed);
}

/* True when this allocation must fail. The common case (injection off) is two
 * relaxed loads. */
static int should_fail(void)
{
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    if (atomic_load_explicit(&fail_all, memory_order_relaxed))
        return 1;
    long c = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    while (c > 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &c, c - 1))
            return c == 1;
    }
    return 0;
}

void *mc_malloc(size_t size)
{
    return should_fail() ? NULL : malloc(size);
}

void *mc_calloc(size_t n, size_t size)
{
    return should_fail() ? NULL : calloc(n, size);
}

void *mc_realloc(void *p, size_t size)
{
    return should_fail() ? NULL : realloc(p, size);
}

char *mc_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = mc_malloc(len + 1);
    if (d != NULL) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

char *mc_strdup(const char *s)
{
    return mc_strndup(s, strlen(s));
}

void mc_free(void *p)
{
    free(p);
}
