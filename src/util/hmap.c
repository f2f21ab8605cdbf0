/* hmap.c - see hmap.h. */
#include "util/hmap.h"

#include "util/mem.h"

mc_status_t mc_hmap_init(mc_hmap_t *m, size_t initial_buckets)
{
    size_t n = 8;
    while (n < initial_buckets)
        n <<= 1;
    m->buckets = mc_calloc(n, sizeof(*m->buckets));
    if (m->buckets == NULL)
        return MC_ERR_NOMEM;
    m->mask = n - 1;
    m->count = 0;
    return MC_OK;
}

void mc_hmap_fini(mc_hmap_t *m)
{
    mc_free(m->buckets);
    m->buckets = NULL;
    m->mask = 0;
    m->count = 0;
}

static void grow(mc_hmap_t *m)
{
    size_t n = (m->mask + 1) * 2;
    mc_hnode_t **nb = mc_calloc(n, sizeof(*nb));
    if (nb == NULL)
        return; /* keep working with longer chains */
    for (size_t i = 0; i <= m->mask; i++) {
        mc_hnode_t *node = m->buckets[i];
        while (node != NULL) {
            mc_hnode_t *next = node->next;
            size_t b = node->hash & (n - 1);
            node->next = nb[b];
            nb[b] = node;
            node = next;
        }
    }
    mc_free(m->buckets);
    m->buckets = nb;
    m->mask = n - 1;
}

void mc_hmap_insert(mc_hmap_t *m, mc_hnode_t *node, uint64_t hash)
{
    if (m->count >= m->mask + 1)
        grow(m);
    size_t b = hash & m->mask;
    node->hash = hash;
    node->next = m->buckets[b];
    m->buckets[b] = node;
    m->count++;
}

void mc_hmap_remove(mc_hmap_t *m, mc_hnode_t *node)
{
    mc_hnode_t **pp = &m->buckets[node->hash & m->mask];
    while (*pp != NULL) {
        if (*pp == node) {
            *pp = node->next;
            node->next = NULL;
            m->count--;
            return;
        }
        pp = &(*pp)->next;
    }
}
