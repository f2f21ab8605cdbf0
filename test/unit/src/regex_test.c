/* util/regex: PCRE2 behind limits. Patterns that used to crash or stall the
 * master (issue 13: `(.*){1,32767}`, `(a*)*\1z`) are refused or stopped with a
 * reason; ordinary patterns search bytes as upstream's std::regex_search. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "util/regex.h"

static mc_status_t compile(const char *pat, const mc_regex_limits_t *l, mc_regex_t **re, char *why,
                           size_t n)
{
    return mc_regex_compile(pat, strlen(pat), l, re, why, n);
}

static int matches(mc_regex_t *re, const char *s)
{
    int m = -1;
    char why[128];
    assert_int_equal(mc_regex_match(re, s, strlen(s), &m, why, sizeof(why)), MC_OK);
    return m;
}

static void the_regex_of_death_is_refused_at_compile_time_with_a_reason(void **state)
{
    (void)state;
    char why[256];
    mc_regex_t *re = NULL;
    assert_int_equal(compile("(.*){1,32767}", NULL, &re, why, sizeof(why)), MC_ERR_INVALID_PARAMS);
    assert_null(re);
    assert_non_null(strstr(why, "too large"));
    assert_int_equal(compile("(.*){1,8000}", NULL, &re, why, sizeof(why)), MC_ERR_INVALID_PARAMS);
}

static void a_pattern_longer_than_the_cap_is_refused_naming_the_cap(void **state)
{
    (void)state;
    mc_regex_limits_t l;
    mc_regex_limits_init(&l);
    l.max_len = 16;
    char why[256];
    mc_regex_t *re = NULL;
    assert_int_equal(compile("abcdefghijklmnopq", &l, &re, why, sizeof(why)),
                     MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "16 bytes"));
    assert_int_equal(compile("abcdefghijklmnop", &l, &re, why, sizeof(why)), MC_OK);
    mc_regex_free(re);
}

static void a_syntax_error_names_its_offset(void **state)
{
    (void)state;
    char why[256];
    mc_regex_t *re = NULL;
    assert_int_equal(compile("ab(c", NULL, &re, why, sizeof(why)), MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "offset 4"));
    assert_non_null(strstr(why, "parenthesis"));
}

static void compiling_is_refused_past_its_memory_budget(void **state)
{
    (void)state;
    mc_regex_limits_t l;
    mc_regex_limits_init(&l);
    l.compile_mem = 512;
    char why[256];
    mc_regex_t *re = NULL;
    /* a few hundred bytes of compiled code: over 512 bytes with PCRE2's own
     * structures */
    assert_int_equal(
        compile("(abc|def|ghi|jkl|mno|pqr|stu|vwx|yz0|123|456|789){3}", &l, &re, why, sizeof(why)),
        MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "512 bytes"));
}

static void exponential_backtracking_stops_at_the_match_limit(void **state)
{
    (void)state;
    char why[256];
    mc_regex_t *re = NULL;
    assert_int_equal(compile("(a*)*\\1z", NULL, &re, why, sizeof(why)), MC_OK);
    /* 2^30 ways to split the a's before the b: glibc regexec would take
     * hours; PCRE2 gives up after match_limit steps */
    const char *subj = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaab z";
    int m = -1;
    assert_int_equal(mc_regex_match(re, subj, strlen(subj), &m, why, sizeof(why)), MC_ERR_LIMIT);
    assert_non_null(strstr(why, "match limit"));
    /* the same pattern on a short subject still answers */
    assert_int_equal(matches(re, "aaz"), 1);
    assert_int_equal(matches(re, "aab"), 0);
    mc_regex_free(re);
}

static void a_pattern_cannot_raise_its_own_limits(void **state)
{
    (void)state;
    char why[256];
    mc_regex_t *re = NULL;
    assert_int_equal(compile("(*LIMIT_MATCH=1000000000)(a*)*\\1z", NULL, &re, why, sizeof(why)),
                     MC_OK);
    const char *subj = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaab z";
    int m = -1;
    assert_int_equal(mc_regex_match(re, subj, strlen(subj), &m, why, sizeof(why)), MC_ERR_LIMIT);
    mc_regex_free(re);
}

static void matching_is_an_unanchored_search_over_bytes(void **state)
{
    (void)state;
    char why[256];
    mc_regex_t *re = NULL;
    assert_int_equal(compile("b/[0-9]+", NULL, &re, why, sizeof(why)), MC_OK);
    assert_int_equal(matches(re, "a/b/12/c"), 1);
    assert_int_equal(matches(re, "a/b/x"), 0);
    mc_regex_free(re);

    assert_int_equal(compile("^key\\d{2}$", NULL, &re, why, sizeof(why)), MC_OK);
    assert_int_equal(matches(re, "key42"), 1);
    assert_int_equal(matches(re, "key421"), 0);
    assert_int_equal(matches(re, "xkey42"), 0);
    mc_regex_free(re);

    /* bytes that are not UTF-8 are just bytes */
    assert_int_equal(compile("\\xff.\\x01", NULL, &re, why, sizeof(why)), MC_OK);
    const char bin[] = {'k', (char)0xff, (char)0xc3, 0x01};
    int m = -1;
    assert_int_equal(mc_regex_match(re, bin, sizeof(bin), &m, why, sizeof(why)), MC_OK);
    assert_int_equal(m, 1);
    mc_regex_free(re);

    /* a (*UTF) pattern is refused rather than failing on binary keys */
    assert_int_equal(compile("(*UTF)a", NULL, &re, why, sizeof(why)), MC_ERR_INVALID_PARAMS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_regex_of_death_is_refused_at_compile_time_with_a_reason),
        cmocka_unit_test(a_pattern_longer_than_the_cap_is_refused_naming_the_cap),
        cmocka_unit_test(a_syntax_error_names_its_offset),
        cmocka_unit_test(compiling_is_refused_past_its_memory_budget),
        cmocka_unit_test(exponential_backtracking_stops_at_the_match_limit),
        cmocka_unit_test(a_pattern_cannot_raise_its_own_limits),
        cmocka_unit_test(matching_is_an_unanchored_search_over_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
