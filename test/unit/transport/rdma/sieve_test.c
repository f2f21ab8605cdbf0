/*
 * SIEVE eviction order (transport/rdma/sieve.c): hand movement, visited
 * bits, eviction order against a simple array model over random workloads,
 * removal while the hand points at the victim, pinned nodes passed over.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "transport/rdma/sieve.h"

typedef struct item {
    rd_sieve_node_t node;
    int key;
    int pinned;
} item_t;

#define KEY(n) (((item_t *)(n))->key)

static void insert_keys(rd_sieve_t *s, item_t *it, int n)
{
    for (int i = 0; i < n; i++) {
        it[i].key = i;
        rd_sieve_insert(s, &it[i].node);
    }
}

static void unvisited_tail_is_the_first_victim_and_the_hand_stays_on_it(void **state)
{
    (void)state;
    rd_sieve_t s;
    item_t it[4];
    rd_sieve_init(&s);
    memset(it, 0, sizeof(it));
    insert_keys(&s, it, 4); /* head 3 2 1 0 tail */
    rd_sieve_node_t *v = rd_sieve_victim(&s, NULL, NULL);
    assert_int_equal(KEY(v), 0);
    assert_ptr_equal(s.hand, v);
    rd_sieve_remove(&s, v);
    assert_int_equal(KEY(s.hand), 1); /* one step towards the head */
    assert_int_equal(s.n, 3);
}

static void visited_nodes_are_spared_once_and_lose_their_bit(void **state)
{
    (void)state;
    rd_sieve_t s;
    item_t it[4];
    rd_sieve_init(&s);
    memset(it, 0, sizeof(it));
    insert_keys(&s, it, 4);
    rd_sieve_touch(&it[0].node);
    rd_sieve_touch(&it[1].node);
    rd_sieve_node_t *v = rd_sieve_victim(&s, NULL, NULL);
    assert_int_equal(KEY(v), 2);
    assert_false(it[0].node.visited); /* cleared as the hand passed */
    assert_false(it[1].node.visited);
    assert_false(it[3].node.visited); /* not reached */
    rd_sieve_remove(&s, v);
    /* the hand continues from 3, the head, then wraps to the tail */
    rd_sieve_touch(&it[3].node);
    v = rd_sieve_victim(&s, NULL, NULL);
    assert_int_equal(KEY(v), 0);
}

static void all_visited_wraps_around_to_the_tail(void **state)
{
    (void)state;
    rd_sieve_t s;
    item_t it[3];
    rd_sieve_init(&s);
    memset(it, 0, sizeof(it));
    insert_keys(&s, it, 3);
    for (int i = 0; i < 3; i++)
        rd_sieve_touch(&it[i].node);
    assert_int_equal(KEY(rd_sieve_victim(&s, NULL, NULL)), 0);
}

static void removing_the_victim_under_the_hand_at_the_head_resets_the_hand(void **state)
{
    (void)state;
    rd_sieve_t s;
    item_t it[3];
    rd_sieve_init(&s);
    memset(it, 0, sizeof(it));
    insert_keys(&s, it, 3); /* head 2 1 0 */
    rd_sieve_touch(&it[0].node);
    rd_sieve_touch(&it[1].node);
    rd_sieve_node_t *v = rd_sieve_victim(&s, NULL, NULL);
    assert_int_equal(KEY(v), 2); /* the head */
    rd_sieve_remove(&s, v);      /* e.g. deleted on failure while the hand is on it */
    assert_null(s.hand);
    assert_int_equal(KEY(rd_sieve_victim(&s, NULL, NULL)), 0); /* from the tail again */
}

static void removing_another_node_leaves_the_hand_alone(void **state)
{
    (void)state;
    rd_sieve_t s;
    item_t it[4];
    rd_sieve_init(&s);
    memset(it, 0, sizeof(it));
    insert_keys(&s, it, 4);
    rd_sieve_touch(&it[0].node);
    rd_sieve_node_t *v = rd_sieve_victim(&s, NULL, NULL); /* 1 */
    assert_int_equal(KEY(v), 1);
    rd_sieve_remove(&s, &it[3].node);
    assert_ptr_equal(s.hand, v);
    rd_sieve_remove(&s, &it[0].node);
    assert_ptr_equal(s.hand, v);
    assert_ptr_equal(s.head, &it[2].node);
    assert_ptr_equal(s.tail, v);
}

static int is_pinned(rd_sieve_node_t *n, void *arg)
{
    (void)arg;
    return ((item_t *)n)->pinned;
}

static void pinned_nodes_are_passed_over_and_all_pinned_gives_none(void **state)
{
    (void)state;
    rd_sieve_t s;
    item_t it[3];
    rd_sieve_init(&s);
    memset(it, 0, sizeof(it));
    insert_keys(&s, it, 3);
    it[0].pinned = it[1].pinned = 1;
    assert_int_equal(KEY(rd_sieve_victim(&s, is_pinned, NULL)), 2);
    it[2].pinned = 1;
    assert_null(rd_sieve_victim(&s, is_pinned, NULL));
    rd_sieve_init(&s);
    assert_null(rd_sieve_victim(&s, NULL, NULL));
}

/* Reference model: keys newest first in an array, a hand index (-1 none). */
typedef struct model {
    int keys[64], visited[64], n, hand;
} model_t;

static int model_find(model_t *m, int key)
{
    for (int i = 0; i < m->n; i++)
        if (m->keys[i] == key)
            return i;
    return -1;
}

static int model_evict(model_t *m)
{
    int i = m->hand >= 0 ? m->hand : m->n - 1;
    while (m->visited[i]) {
        m->visited[i] = 0;
        i = i > 0 ? i - 1 : m->n - 1;
    }
    int key = m->keys[i];
    memmove(&m->keys[i], &m->keys[i + 1], (size_t)(m->n - i - 1) * sizeof(int));
    memmove(&m->visited[i], &m->visited[i + 1], (size_t)(m->n - i - 1) * sizeof(int));
    m->n--;
    m->hand = i - 1; /* the newer neighbour; -1 (none) when it was the head */
    return key;
}

static void model_insert(model_t *m, int key)
{
    memmove(&m->keys[1], &m->keys[0], (size_t)m->n * sizeof(int));
    memmove(&m->visited[1], &m->visited[0], (size_t)m->n * sizeof(int));
    m->keys[0] = key;
    m->visited[0] = 0;
    m->n++;
    if (m->hand >= 0)
        m->hand++;
}

static void eviction_order_matches_the_reference_model(void **state)
{
    (void)state;
    enum { KEYS = 40, CAP = 8, OPS = 20000 };
    item_t it[KEYS];
    int in[KEYS];
    rd_sieve_t s;
    model_t m;
    unsigned seed = 12345;
    for (int round = 0; round < 3; round++) {
        memset(it, 0, sizeof(it));
        memset(in, 0, sizeof(in));
        memset(&m, 0, sizeof(m));
        m.hand = -1;
        rd_sieve_init(&s);
        int evictions = 0;
        for (int op = 0; op < OPS; op++) {
            seed = seed * 1103515245u + 12345u;
            /* skewed: low keys are hot */
            int key = (int)((seed >> 8) % KEYS);
            if ((seed >> 20) % 3 == 0)
                key %= 6;
            if (in[key]) {
                rd_sieve_touch(&it[key].node);
                m.visited[model_find(&m, key)] = 1;
                continue;
            }
            if (s.n == CAP) {
                rd_sieve_node_t *v = rd_sieve_victim(&s, NULL, NULL);
                int want = model_evict(&m);
                assert_int_equal(KEY(v), want);
                rd_sieve_remove(&s, v);
                in[KEY(v)] = 0;
                evictions++;
            }
            it[key].key = key;
            rd_sieve_insert(&s, &it[key].node);
            model_insert(&m, key);
            in[key] = 1;
        }
        assert_true(evictions > 1000);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unvisited_tail_is_the_first_victim_and_the_hand_stays_on_it),
        cmocka_unit_test(visited_nodes_are_spared_once_and_lose_their_bit),
        cmocka_unit_test(all_visited_wraps_around_to_the_tail),
        cmocka_unit_test(removing_the_victim_under_the_hand_at_the_head_resets_the_hand),
        cmocka_unit_test(removing_another_node_leaves_the_hand_alone),
        cmocka_unit_test(pinned_nodes_are_passed_over_and_all_pinned_gives_none),
        cmocka_unit_test(eviction_order_matches_the_reference_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
