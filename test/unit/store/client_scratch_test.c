/*
 * The store client's scratch memory (store/client_op.c): what batch get's
 * per-key arrays live in so that a steady load allocates nothing. A taken
 * scratch comes back on the next take (no allocation when it is big
 * enough), a larger need replaces it, concurrent takers get different
 * ones, and the client keeps at most STORE_SCRATCH_KEEP bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "store/client_int.h"
#include "util/mem.h"

static void client_init(mc_store_t *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->scratch_mu, NULL);
}

static void client_fini(mc_store_t *s)
{
    store_scratch_free_all(s);
    pthread_mutex_destroy(&s->scratch_mu);
}

static void a_given_back_scratch_serves_the_next_call_without_allocating(void **state)
{
    (void)state;
    static mc_store_t s;
    client_init(&s);
    store_scratch_t *a = store_scratch_take(&s, 100000);
    assert_non_null(a);
    assert_true(a->cap >= 100000);
    memset(a->mem, 0xab, 100000); /* all of it is usable */
    store_scratch_give(&s, a);
    assert_int_equal(s.scratch_kept, a->cap);
    long before = mc_mem_alloc_count();
    for (int i = 0; i < 100; i++) {
        store_scratch_t *b = store_scratch_take(&s, 1000 + (size_t)i * 997);
        assert_ptr_equal(b, a);
        store_scratch_give(&s, b);
    }
    assert_int_equal(mc_mem_alloc_count(), before);
    client_fini(&s);
}

static void a_larger_need_replaces_the_kept_scratch(void **state)
{
    (void)state;
    static mc_store_t s;
    client_init(&s);
    store_scratch_t *a = store_scratch_take(&s, 5000);
    store_scratch_give(&s, a);
    store_scratch_t *b = store_scratch_take(&s, 1 << 20);
    assert_non_null(b);
    assert_true(b->cap >= 1 << 20);
    assert_int_equal(s.scratch_kept, 0); /* the small one was freed, not kept */
    store_scratch_give(&s, b);
    long before = mc_mem_alloc_count();
    store_scratch_t *c = store_scratch_take(&s, 1 << 20);
    assert_ptr_equal(c, b);
    assert_int_equal(mc_mem_alloc_count(), before);
    store_scratch_give(&s, c);
    client_fini(&s);
}

static void concurrent_takers_get_their_own(void **state)
{
    (void)state;
    static mc_store_t s;
    client_init(&s);
    store_scratch_t *a = store_scratch_take(&s, 4096);
    store_scratch_t *b = store_scratch_take(&s, 4096);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    store_scratch_give(&s, a);
    store_scratch_give(&s, b);
    assert_int_equal(s.scratch_kept, a->cap + b->cap);
    client_fini(&s);
    assert_int_equal(s.scratch_kept, 0);
}

static void the_client_keeps_at_most_its_budget(void **state)
{
    (void)state;
    static mc_store_t s;
    client_init(&s);
    store_scratch_t *big = store_scratch_take(&s, STORE_SCRATCH_KEEP - 4096);
    store_scratch_t *more = store_scratch_take(&s, 1 << 20);
    assert_non_null(big);
    assert_non_null(more);
    store_scratch_give(&s, big);
    store_scratch_give(&s, more); /* over the budget: freed */
    assert_int_equal(s.scratch_kept, big->cap);
    assert_ptr_equal(s.scratch_free, big);
    assert_null(big->next);
    store_scratch_t *none = store_scratch_take(&s, (size_t)STORE_SCRATCH_KEEP + 1);
    assert_non_null(none); /* larger than the budget: served, never kept */
    store_scratch_give(&s, none);
    assert_int_equal(s.scratch_kept, 0);
    assert_null(s.scratch_free);
    client_fini(&s);
}

static void out_of_memory_is_null(void **state)
{
    (void)state;
    static mc_store_t s;
    client_init(&s);
    mc_mem_fail_nth(1);
    assert_null(store_scratch_take(&s, 4096));
    mc_mem_fail_nth(0);
    store_scratch_give(&s, NULL); /* nothing */
    assert_int_equal(s.scratch_kept, 0);
    client_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_given_back_scratch_serves_the_next_call_without_allocating),
        cmocka_unit_test(a_larger_need_replaces_the_kept_scratch),
        cmocka_unit_test(concurrent_takers_get_their_own),
        cmocka_unit_test(the_client_keeps_at_most_its_budget),
        cmocka_unit_test(out_of_memory_is_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
