/*
 * mem_pool.c - the memory of mc_store_alloc_from_mem_pool (client_int.h):
 * an offset allocator over one region (registered memory for a normal
 * client, shared memory for a co-located one). Each allocation carries its
 * handle in a small header just before it, so freeing needs no table; the
 * memory is cache-line aligned.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "store/client_int.h"
#include "util/conf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/shm.h"

#define POOL_MAX_ALLOCS 65536u
#define POOL_ALIGN 64u         /* cache-line aligned */
#define POOL_HDR 16u           /* {magic | node, offset} just before the memory */
#define POOL_MAGIC 0x4d43504fu /* "MCPO" */

void store_pool_init(store_pool_t *p)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
}

mc_status_t store_pool_setup(store_pool_t *p, void *base, uint64_t len)
{
    p->base = base;
    p->len = len & ~(uint64_t)(MC_OALLOC_ALIGN - 1);
    if (p->len == 0)
        return MC_OK;
    return mc_oalloc_create(p->len, POOL_MAX_ALLOCS, &p->a);
}

void store_pool_fini(store_pool_t *p)
{
    mc_oalloc_destroy(p->a);
    p->a = NULL;
    pthread_mutex_destroy(&p->mu);
}

void *store_pool_alloc(store_pool_t *p, size_t size)
{
    if (p->a == NULL || size == 0 || size > p->len)
        return NULL;
    mc_oalloc_handle_t h;
    pthread_mutex_lock(&p->mu);
    mc_status_t st = mc_oalloc_alloc(p->a, size + POOL_ALIGN + POOL_HDR, &h);
    uint64_t used = mc_oalloc_used(p->a);
    pthread_mutex_unlock(&p->mu);
    if (st != MC_OK) {
        MC_WARN(CLIENT, "mem pool: no room for %zu bytes (%llu of %llu in use)", size,
                (unsigned long long)used, (unsigned long long)p->len);
        return NULL;
    }
    uintptr_t raw = (uintptr_t)p->base + h.offset;
    uintptr_t q = (raw + POOL_HDR + POOL_ALIGN - 1) & ~(uintptr_t)(POOL_ALIGN - 1);
    uint64_t hdr[2] = {(uint64_t)POOL_MAGIC << 32 | h.node, h.offset};
    memcpy((void *)(q - POOL_HDR), hdr, sizeof(hdr));
    return (void *)q;
}

mc_status_t store_pool_free(store_pool_t *p, void *ptr)
{
    uint8_t *q = ptr;
    if (p->a == NULL || q < p->base + POOL_HDR || q >= p->base + p->len ||
        (uintptr_t)q % POOL_ALIGN != 0)
        return MC_ERR_INVALID_ARGUMENT;
    uint64_t hdr[2];
    mc_status_t st = MC_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&p->mu);
    memcpy(hdr, q - POOL_HDR, sizeof(hdr));
    if ((hdr[0] >> 32) == POOL_MAGIC && hdr[1] < p->len && p->base + hdr[1] < q) {
        mc_oalloc_handle_t h = {.offset = hdr[1], .node = (uint32_t)hdr[0]};
        mc_oalloc_free(p->a, h);
        memset(q - POOL_HDR, 0, POOL_HDR); /* a second free is refused */
        st = MC_OK;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* ------------------------------------------------- shared allocations */

/* mc_store_shared_alloc: one memfd per allocation, listed so that a
 * co-located client's register_buffer finds the memfd behind an address. */
typedef struct shared_alloc {
    struct shared_alloc *next;
    mc_shm_t m;
} shared_alloc_t;

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_alloc_t *shared_list;

_Static_assert(MC_STORE_HUGE_NONE == MC_SHM_NORMAL && MC_STORE_HUGE_HUGETLB == MC_SHM_HUGETLB &&
                   MC_STORE_HUGE_THP == MC_SHM_THP,
               "mc_store_shared_alloc_huge passes huge to mc_shm_create");

/* Each of store_env_hugepages' warnings once per process. */
static atomic_int warned_use, warned_size;

int store_env_hugepages(void)
{
    const char *v = mc_conf_env_str("MC_STORE_USE_HUGEPAGE");
    bool on = true;
    if (v == NULL)
        return MC_SHM_NORMAL;
    if (mc_conf_parse_bool(v, &on) != MC_OK && atomic_exchange(&warned_use, 1) == 0)
        MC_WARN(CLIENT,
                "MC_STORE_USE_HUGEPAGE='%s' is not 1/true/yes/on or 0/false/no/off: taken as on "
                "(as upstream, which turns huge pages on when the variable is set at all)",
                v);
    if (!on)
        return MC_SHM_NORMAL;
    const char *sz = mc_conf_env_str("MC_STORE_HUGEPAGE_SIZE");
    uint64_t b = MC_SHM_HUGE_PAGE;
    if (sz != NULL && (mc_conf_parse_size(sz, &b) != MC_OK || b != MC_SHM_HUGE_PAGE) &&
        atomic_exchange(&warned_size, 1) == 0)
        MC_WARN(CLIENT, "MC_STORE_HUGEPAGE_SIZE='%s': %s; 2 MiB pages are used", sz,
                b == (1ull << 30) ? "1 GiB pages are not supported by mooncake-c"
                                  : "not a page size (2MB, or upstream's 1GB)");
    return MC_SHM_HUGETLB;
}

void *mc_store_shared_alloc(size_t size)
{
    return mc_store_shared_alloc_huge(size, store_env_hugepages());
}

void *mc_store_shared_alloc_huge(size_t size, int huge)
{
    if (huge != MC_STORE_HUGE_NONE && huge != MC_STORE_HUGE_HUGETLB && huge != MC_STORE_HUGE_THP) {
        MC_ERROR(CLIENT,
                 "mc_store_shared_alloc_huge: huge is %d, not MC_STORE_HUGE_NONE (0), _HUGETLB "
                 "(1) or _THP (2)",
                 huge);
        return NULL;
    }
    shared_alloc_t *a = size > 0 ? MC_NEW(shared_alloc_t) : NULL;
    if (a == NULL)
        return NULL;
    if (mc_shm_create("mooncake-shared", size, huge, &a->m) != MC_OK) { /* logged */
        mc_free(a);
        return NULL;
    }
    pthread_mutex_lock(&shared_mu);
    a->next = shared_list;
    shared_list = a;
    pthread_mutex_unlock(&shared_mu);
    return a->m.base;
}

mc_status_t mc_store_shared_free(void *p)
{
    shared_alloc_t *a = NULL;
    pthread_mutex_lock(&shared_mu);
    for (shared_alloc_t **pp = &shared_list; p != NULL && *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->m.base == p) {
            a = *pp;
            *pp = a->next;
            break;
        }
    }
    pthread_mutex_unlock(&shared_mu);
    if (a == NULL)
        return MC_ERR_INVALID_ARGUMENT;
    mc_shm_destroy(&a->m);
    mc_free(a);
    return MC_OK;
}

int store_shared_find(const void *p, size_t len, void **base, uint64_t *blen, int *fd)
{
    uintptr_t x = (uintptr_t)p;
    int found = 0;
    pthread_mutex_lock(&shared_mu);
    for (shared_alloc_t *a = shared_list; a != NULL && !found; a = a->next) {
        uintptr_t b = (uintptr_t)a->m.base;
        if (len > 0 && x >= b && x + len >= x && x + len <= b + a->m.len) {
            *base = a->m.base;
            *blen = a->m.len;
            *fd = fcntl(a->m.fd, F_DUPFD_CLOEXEC, 0);
            found = *fd >= 0;
        }
    }
    pthread_mutex_unlock(&shared_mu);
    return found;
}
