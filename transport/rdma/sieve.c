/*
 * sieve.c - SIEVE eviction order (see sieve.h).
 */
#include "transport/rdma/sieve.h"

void rd_sieve_init(rd_sieve_t *s)
{
    s->head = s->tail = s->hand = NULL;
    s->n = 0;
}

void rd_sieve_insert(rd_sieve_t *s, rd_sieve_node_t *node)
{
    node->visited = 0;
    node->prev = NULL;
    node->next = s->head;
    if (s->head != NULL)
        s->head->prev = node;
    else
        s->tail = node;
    s->head = node;
    s->n++;
}

void rd_sieve_remove(rd_sieve_t *s, rd_sieve_node_t *node)
{
    if (s->hand == node)
        s->hand = node->prev;
    if (node->prev != NULL)
        node->prev->next = node->next;
    else
        s->head = node->next;
    if (node->next != NULL)
        node->next->prev = node->prev;
    else
        s->tail = node->prev;
    node->prev = node->next = NULL;
    s->n--;
}

rd_sieve_node_t *rd_sieve_victim(rd_sieve_t *s, rd_sieve_pinned_fn pinned, void *arg)
{
    if (s->n == 0)
        return NULL;
    rd_sieve_node_t *o = s->hand != NULL ? s->hand : s->tail;
    /* One lap clears every visited bit; a second finds any unpinned node. */
    for (size_t steps = 0; steps <= 2 * s->n; steps++) {
        if (!o->visited && (pinned == NULL || !pinned(o, arg))) {
            s->hand = o;
            return o;
        }
        o->visited = 0;
        o = o->prev != NULL ? o->prev : s->tail;
    }
    return NULL;
}
