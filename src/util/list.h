/*
 * list.h - intrusive circular doubly linked list (the Linux/nginx kind).
 *
 * Embed an mc_list_t in the element; the list head is an mc_list_t too. All
 * operations are O(1) and never allocate. An element may be on one list per
 * embedded node. mc_list_del leaves the node self-linked, so deleting twice is
 * harmless and mc_list_linked() tells whether it is on a list.
 */
#ifndef MC_UTIL_LIST_H
#define MC_UTIL_LIST_H

#include <stddef.h>

typedef struct mc_list {
    struct mc_list *prev, *next;
} mc_list_t;

#define MC_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

#define MC_LIST_INIT(name)                                                                         \
    {                                                                                              \
        &(name), &(name)                                                                           \
    }

static inline void mc_list_init(mc_list_t *l)
{
    l->prev = l->next = l;
}

static inline int mc_list_empty(const mc_list_t *l)
{
    return l->next == l;
}

static inline int mc_list_linked(const mc_list_t *n)
{
    return n->next != n;
}

static inline void mc_list_insert_between(mc_list_t *n, mc_list_t *prev, mc_list_t *next)
{
    n->prev = prev;
    n->next = next;
    prev->next = n;
    next->prev = n;
}

/* Append at the tail (FIFO order with mc_list_pop_head). */
static inline void mc_list_push_tail(mc_list_t *head, mc_list_t *n)
{
    mc_list_insert_between(n, head->prev, head);
}

static inline void mc_list_push_head(mc_list_t *head, mc_list_t *n)
{
    mc_list_insert_between(n, head, head->next);
}

static inline void mc_list_del(mc_list_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}

static inline mc_list_t *mc_list_pop_head(mc_list_t *head)
{
    if (mc_list_empty(head))
        return NULL;
    mc_list_t *n = head->next;
    mc_list_del(n);
    return n;
}

/* Move every element of src to the tail of dst; src becomes empty. */
static inline void mc_list_splice_tail(mc_list_t *dst, mc_list_t *src)
{
    if (mc_list_empty(src))
        return;
    src->next->prev = dst->prev;
    dst->prev->next = src->next;
    src->prev->next = dst;
    dst->prev = src->prev;
    mc_list_init(src);
}

#define MC_LIST_FOREACH(pos, head) for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

/* Safe against deletion of pos inside the loop. */
#define MC_LIST_FOREACH_SAFE(pos, tmp, head)                                                       \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);                               \
         (pos) = (tmp), (tmp) = (pos)->next)

#define MC_LIST_ENTRY(ptr, type, member) MC_CONTAINER_OF(ptr, type, member)

#endif /* MC_UTIL_LIST_H */
