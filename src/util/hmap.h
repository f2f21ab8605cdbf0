/*
 * hmap.h - intrusive chained hash map.
 *
 * Elements embed an mc_hnode_t, which caches the element's 64-bit hash so
 * that resizing never touches keys. The map does not know keys: lookups walk
 * the nodes with a matching hash (MC_HMAP_FOREACH_HASH) and the caller compares
 * keys. Buckets are a power of two; the table doubles when the load passes 1.
 * Overhead: 16 bytes per element plus 8-16 bytes of bucket array.
 * Not thread-safe: the owner serialises access.
 */
#ifndef MC_UTIL_HMAP_H
#define MC_UTIL_HMAP_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

typedef struct mc_hnode {
    struct mc_hnode *next;
    uint64_t hash;
} mc_hnode_t;

typedef struct mc_hmap {
    mc_hnode_t **buckets;
    size_t mask; /* bucket count - 1 */
    size_t count;
} mc_hmap_t;

/* initial_buckets is rounded up to a power of two (minimum 8). */
mc_status_t mc_hmap_init(mc_hmap_t *m, size_t initial_buckets);

/* Frees the bucket array; the elements are the caller's. */
void mc_hmap_fini(mc_hmap_t *m);

/* Insert a node (the caller has checked the key is absent). Never fails: if the
 * table cannot grow it stays as it is, with longer chains. */
void mc_hmap_insert(mc_hmap_t *m, mc_hnode_t *node, uint64_t hash);

/* Remove a node that is in the map. */
void mc_hmap_remove(mc_hmap_t *m, mc_hnode_t *node);

static inline size_t mc_hmap_count(const mc_hmap_t *m)
{
    return m->count;
}

#define MC_HMAP_FOREACH_HASH(m, node, h)                                                           \
    for ((node) = (m)->buckets[(h) & (m)->mask]; (node) != NULL; (node) = (node)->next)            \
        if ((node)->hash == (h))

/* Iteration over every node; the callback may not insert or remove. */
#define MC_HMAP_FOREACH(m, i, node)                                                                \
    for ((i) = 0; (i) <= (m)->mask; (i)++)                                                         \
        for ((node) = (m)->buckets[i]; (node) != NULL; (node) = (node)->next)

#endif /* MC_UTIL_HMAP_H */
