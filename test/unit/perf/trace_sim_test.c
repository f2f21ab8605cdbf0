/* trace_replay's trace parser and LRU baselines, on tiny traces checked by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "perf/trace_sim.c"

static void parse_ok(const char *text, trace_t *t)
{
    char err[256] = "";
    int rc = trace_parse(text, strlen(text), "t", t, err, sizeof(err));
    if (rc != 0)
        fail_msg("parse failed: %s", err);
}

static void assert_parse_error(const char *text, const char *want)
{
    trace_t t;
    char err[256] = "";
    assert_int_equal(trace_parse(text, strlen(text), "t", &t, err, sizeof(err)), -1);
    if (strstr(err, want) == NULL)
        fail_msg("error '%s' does not say '%s'", err, want);
    assert_null(t.req);
    assert_int_equal(t.nreq, 0);
}

/* MRU first. */
static void assert_order(const lru_t *c, const uint32_t *want, uint32_t n)
{
    uint32_t got[16];
    assert_int_equal(lru_order(c, got, 16), n);
    assert_memory_equal(got, want, n * sizeof(*want));
}

static void lru_evicts_the_least_recently_used_block(void **state)
{
    (void)state;
    lru_t *c = lru_create(3, 10);
    assert_non_null(c);
    assert_int_equal(lru_request(c, (uint32_t[]){0, 1, 2}, 3), 0);
    assert_order(c, (uint32_t[]){2, 1, 0}, 3);
    /* 0 hits and becomes most recent; 3 then pushes out 1, now the oldest */
    assert_int_equal(lru_request(c, (uint32_t[]){0, 3}, 2), 1);
    assert_order(c, (uint32_t[]){3, 0, 2}, 3);
    assert_false(lru_contains(c, 1));
    assert_int_equal(lru_size(c), 3);
    lru_destroy(c);
}

static void the_hit_run_stops_at_the_first_missing_block(void **state)
{
    (void)state;
    lru_t *c = lru_create(4, 10);
    lru_request(c, (uint32_t[]){2}, 1);
    lru_request(c, (uint32_t[]){0}, 1);
    assert_order(c, (uint32_t[]){0, 2}, 2);
    /* 0 hits; 1 is missing, so 2 is not reused although it is there: it is
     * neither read nor rewritten, so it stays the oldest */
    assert_int_equal(lru_request(c, (uint32_t[]){0, 1, 2}, 3), 1);
    assert_order(c, (uint32_t[]){1, 0, 2}, 3);
    lru_destroy(c);
}

static void a_request_larger_than_the_cache_keeps_its_last_blocks(void **state)
{
    (void)state;
    lru_t *c = lru_create(2, 10);
    assert_int_equal(lru_request(c, (uint32_t[]){4, 5, 6, 7}, 4), 0);
    assert_order(c, (uint32_t[]){7, 6}, 2);
    lru_destroy(c);
}

/* Five requests, ids 1..4; dealt to 2 workers round-robin:
 *   r0 [1,2] w0   r1 [1,3] w1   r2 [1,2,4] w0   r3 [1,3] w1   r4 [1,2] w0
 * input lengths 1000, 1000, 1100, 900, 600 (the last two end inside their
 * second block, so a full hit saves their input length, not 1024). */
static const char tiny[] = "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, "
                           "\"hash_ids\": [1, 2]}\n"
                           "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, "
                           "\"hash_ids\": [1, 3]}\n"
                           "{\"timestamp\": 10, \"input_length\": 1100, \"output_length\": 5, "
                           "\"hash_ids\": [1, 2, 4]}\n"
                           "{\"timestamp\": 20, \"input_length\": 900, \"output_length\": 5, "
                           "\"hash_ids\": [1, 3]}\n"
                           "{\"timestamp\": 30.5, \"input_length\": 600, \"output_length\": 5, "
                           "\"hash_ids\": [1, 2]}\n";

static void baselines_of_a_tiny_trace_with_room_for_every_prefix(void **state)
{
    (void)state;
    trace_t t;
    parse_ok(tiny, &t);
    trace_baseline_t b;
    assert_int_equal(trace_baselines(&t, 2, 2, &b), 0);
    assert_int_equal(b.blocks, 11);
    /* local, 2 blocks each. w0: r0 misses -> {1,2}; r2 hits 1,2 (2) and 4
     * pushes out 1 -> {4,2}; r4 misses 1 (0), and 1 pushes out 2.
     * w1: r1 misses -> {1,3}; r3 hits both (2). */
    assert_int_equal(b.local_hits, 4);
    assert_int_equal(b.local_tokens, 1024 + 900);
    /* global, 4 blocks: r1 hits 1; r2 hits 1,2; r3 hits 1,3; r4 hits 1,2;
     * never full after r2 (4 distinct ids) */
    assert_int_equal(b.global_hits, 1 + 2 + 2 + 2);
    assert_int_equal(b.global_tokens, 512 + 1024 + 900 + 600);
    assert_int_equal(b.inf_hits, b.global_hits);
    assert_int_equal(b.inf_tokens, b.global_tokens);
    trace_free(&t);
}

static void baselines_of_a_tiny_trace_when_capacity_bites(void **state)
{
    (void)state;
    trace_t t;
    parse_ok(tiny, &t);
    trace_baseline_t b;
    assert_int_equal(trace_baselines(&t, 2, 1, &b), 0);
    /* local, 1 block each: every write pushes out the previous block, so a
     * request never finds its first block: no hit at all */
    assert_int_equal(b.local_hits, 0);
    assert_int_equal(b.local_tokens, 0);
    /* global, 2 blocks (MRU first):
     *   r0: -> {2,1}
     *   r1 [1,3]: hits 1 -> {1,2}; 3 pushes out 2 -> {3,1}          hit 1
     *   r2 [1,2,4]: hits 1 -> {1,3}; 2 pushes out 3, 4 pushes out 1
     *      -> {4,2}                                                 hit 1
     *   r3 [1,3]: 1 missing: 1 pushes out 2, 3 pushes out 4 -> {3,1} hit 0
     *   r4 [1,2]: hits 1 -> {1,3}; 2 pushes out 3                    hit 1 */
    assert_int_equal(b.global_hits, 3);
    assert_int_equal(b.global_tokens, 512 + 512 + 512);
    assert_int_equal(b.inf_hits, 7);
    trace_free(&t);
}

static void affinity_routes_a_request_to_the_worker_holding_its_prefix(void **state)
{
    (void)state;
    trace_t t;
    parse_ok("{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [1, 2]}\n"
             "{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [1, 2]}\n"
             "{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [1, 2]}\n"
             "{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [5, 6]}\n"
             "{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [5, 6]}\n",
             &t);
    trace_baseline_t b;
    assert_int_equal(trace_baselines(&t, 2, 2, &b), 0);
    /* round-robin: w0 gets r0 r2 r4 (r2 hits 2; r4's 5,6 push 1,2 out),
     * w1 gets r1 r3 (both miss) */
    assert_int_equal(b.local_hits, 2);
    /* affinity: r0 (nothing cached) -> w0 by turn; r1, r2 -> w0, which holds
     * [1,2] (2 hits each); r3 (nothing cached) -> w1 by turn; r4 -> w1 */
    assert_int_equal(b.affinity_hits, 6);
    assert_int_equal(b.affinity_tokens, 3 * 1024);
    assert_int_equal(b.global_hits, 6);
    trace_free(&t);
}

static void affinity_needs_more_than_a_shared_first_block(void **state)
{
    (void)state;
    trace_t t;
    parse_ok(tiny, &t);
    trace_baseline_t b;
    assert_int_equal(trace_baselines(&t, 2, 2, &b), 0);
    /* every request starts with block 1, which alone does not route:
     * r0 w0 (turn); r1 w1 (w0 holds only [1] of it: turn); r2 -> w0 (holds
     * [1,2]: 2 hits); r3 -> w1 (holds [1,3]: 2 hits); r4: w0 now holds [4,2]
     * and w1 [3,1], a run of 1 at best: turn, w0, no hit. As round-robin. */
    assert_int_equal(b.affinity_hits, 4);
    assert_int_equal(b.affinity_tokens, 1024 + 900);
    trace_free(&t);
}

static void baselines_reject_zero_workers_or_capacity(void **state)
{
    (void)state;
    trace_t t;
    parse_ok(tiny, &t);
    trace_baseline_t b;
    assert_int_equal(trace_baselines(&t, 0, 2, &b), -1);
    assert_int_equal(trace_baselines(&t, 2, 0, &b), -1);
    trace_free(&t);
}

static void parse_remaps_ids_densely_in_order_of_first_appearance(void **state)
{
    (void)state;
    trace_t t;
    parse_ok("{\"timestamp\": 1, \"input_length\": 3, \"hash_ids\": [900, 7]}\n"
             "\n"
             "{\"hash_ids\": [7, 123456789012], \"input_length\": 2, \"timestamp\": 1.25,"
             " \"extra\": {\"a\": [1, \"x\", null, true]}, \"s\": \"q\\\"uote\"}\n",
             &t);
    assert_int_equal(t.nreq, 2);
    assert_int_equal(t.nblocks, 4);
    assert_int_equal(t.nuniq, 3);
    assert_int_equal(t.blocks[0], 0);
    assert_int_equal(t.blocks[1], 1);
    assert_int_equal(t.blocks[2], 1);
    assert_int_equal(t.blocks[3], 2);
    assert_int_equal(t.ids[0], 900);
    assert_int_equal(t.ids[1], 7);
    assert_int_equal(t.ids[2], 123456789012ull);
    assert_int_equal(t.req[1].ts_us, 1250);
    assert_int_equal(t.req[1].first, 2);
    assert_int_equal(t.req[1].n, 2);
    assert_int_equal(t.max_blocks, 2);
    assert_int_equal(t.input_tokens, 5);
    trace_free(&t);
}

static void parse_errors_name_the_line_and_the_field(void **state)
{
    (void)state;
    const char *ok = "{\"timestamp\": 5, \"input_length\": 1, \"hash_ids\": [1]}\n";
    char buf[512];
    struct {
        const char *line, *want;
    } cases[] = {
        {"{\"timestamp\": 6, \"input_length\": 1, \"hash_ids\": []}", "t:2: hash_ids is empty"},
        {"{\"input_length\": 1, \"hash_ids\": [1]}", "t:2: missing timestamp"},
        {"{\"timestamp\": 6, \"hash_ids\": [1]}", "t:2: missing input_length"},
        {"{\"timestamp\": 6, \"input_length\": 1}", "t:2: missing hash_ids"},
        {"{\"timestamp\": 4, \"input_length\": 1, \"hash_ids\": [1]}",
         "t:2: timestamp goes backwards"},
        {"{\"timestamp\": 6, \"input_length\": -1, \"hash_ids\": [1]}", "t:2: input_length"},
        {"{\"timestamp\": 6, \"input_length\": 1, \"hash_ids\": [1.5]}", "t:2: hash_ids"},
        {"{\"timestamp\": 6, \"input_length\": 1, \"hash_ids\": [\"a\"]}", "t:2: hash_ids"},
        {"{\"timestamp\": 6, \"input_length\": 1, \"hash_ids\": [1]} x", "t:2: text after"},
        {"[1, 2]", "t:2: expected '{'"},
        {"{\"timestamp\": 6, \"input_length\": 1, \"hash_ids\": [1, 2}", "t:2: expected ']'"},
        {"{\"timestamp\": \"6\", \"input_length\": 1, \"hash_ids\": [1]}", "t:2: timestamp"},
        {"{\"timestamp\": 6, \"input_length\": 1, \"hash_ids\": [1], \"hash_ids\": [2]}",
         "t:2: hash_ids given twice"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(buf, sizeof(buf), "%s%s\n", ok, cases[i].line);
        assert_parse_error(buf, cases[i].want);
    }
    assert_parse_error("\n\n", "t: no requests");
}

static void load_names_a_missing_file(void **state)
{
    (void)state;
    trace_t t;
    char err[256] = "";
    assert_int_equal(trace_load("/nonexistent/trace.jsonl", &t, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent/trace.jsonl"));
}

static void tokens_saved_never_exceed_the_input_length(void **state)
{
    (void)state;
    trace_req_t r = {.input_len = 1100, .n = 3};
    assert_int_equal(trace_tokens_saved(&r, 0), 0);
    assert_int_equal(trace_tokens_saved(&r, 2), 1024);
    assert_int_equal(trace_tokens_saved(&r, 3), 1100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lru_evicts_the_least_recently_used_block),
        cmocka_unit_test(the_hit_run_stops_at_the_first_missing_block),
        cmocka_unit_test(a_request_larger_than_the_cache_keeps_its_last_blocks),
        cmocka_unit_test(baselines_of_a_tiny_trace_with_room_for_every_prefix),
        cmocka_unit_test(baselines_of_a_tiny_trace_when_capacity_bites),
        cmocka_unit_test(affinity_routes_a_request_to_the_worker_holding_its_prefix),
        cmocka_unit_test(affinity_needs_more_than_a_shared_first_block),
        cmocka_unit_test(baselines_reject_zero_workers_or_capacity),
        cmocka_unit_test(parse_remaps_ids_densely_in_order_of_first_appearance),
        cmocka_unit_test(parse_errors_name_the_line_and_the_field),
        cmocka_unit_test(load_names_a_missing_file),
        cmocka_unit_test(tokens_saved_never_exceed_the_input_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
