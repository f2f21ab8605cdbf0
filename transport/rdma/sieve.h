/*
 * sieve.h - the SIEVE eviction order of the RDMA endpoint pools (pure data
 * structure: no locking, no allocation; nodes are embedded in their owners).
 *
 * A FIFO list, newest at the head, a visited bit per node and a hand. A hit
 * sets the node's visited bit (rd_sieve_touch). To choose a victim the hand
 * starts where it stopped last time (the tail at first), clears visited
 * bits while it walks towards the head (wrapping to the tail), and stops at
 * the first node that is neither visited nor pinned: that node is the
 * victim, and the hand stays on it until it is removed, when the hand moves
 * one step towards the head (rd_sieve_remove, which does this for any node
 * the hand points at). New nodes enter unvisited (textbook SIEVE; upstream
 * Mooncake inserts them visited). Pinned nodes (endpoints with work queued
 * or in flight) are passed over; when every node is pinned there is no
 * victim and the pool runs over its cap until one goes idle.
 */
#ifndef MC_TRANSPORT_RDMA_SIEVE_H
#define MC_TRANSPORT_RDMA_SIEVE_H

#include <stddef.h>

typedef struct rd_sieve_node {
    struct rd_sieve_node *prev; /* towards the head (newer) */
    struct rd_sieve_node *next; /* towards the tail (older) */
    int visited;
} rd_sieve_node_t;

typedef struct rd_sieve {
    rd_sieve_node_t *head, *tail, *hand;
    size_t n;
} rd_sieve_t;

typedef int (*rd_sieve_pinned_fn)(rd_sieve_node_t *node, void *arg);

void rd_sieve_init(rd_sieve_t *s);
/* Insert at the head, unvisited. */
void rd_sieve_insert(rd_sieve_t *s, rd_sieve_node_t *node);
static inline void rd_sieve_touch(rd_sieve_node_t *node)
{
    node->visited = 1;
}
/* Unlink node; a hand on it moves to its newer neighbour (or to none when
 * it was the head: the next walk starts at the tail). */
void rd_sieve_remove(rd_sieve_t *s, rd_sieve_node_t *node);
/* Run the hand and return the victim (still linked, the hand on it), or
 * NULL when the list is empty or every node is pinned. pinned may be NULL. */
rd_sieve_node_t *rd_sieve_victim(rd_sieve_t *s, rd_sieve_pinned_fn pinned, void *arg);

#endif /* MC_TRANSPORT_RDMA_SIEVE_H */
