/*
 * redis-sentinel:// addresses (util/sentinel_url.c): lists of Sentinels with
 * default and explicit ports, IPv6 literals, the watched primary's name, an
 * optional database, where the parse stops, and every malformed form refused
 * with what is wrong.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "util/sentinel_url.h"

static void a_list_of_sentinels_with_a_name_and_a_db_is_parsed(void **state)
{
    (void)state;
    mc_sentinel_url_t u;
    const char *rest = NULL, *why = NULL;
    const char *s = "redis-sentinel://a.example:26380,10.0.0.2,[fe80::1]:7000/cache-1/4?cluster=x";
    assert_true(mc_sentinel_url_parse(s, &u, &rest, &why));
    assert_int_equal(u.n, 3);
    assert_string_equal(u.s[0].host, "a.example");
    assert_int_equal(u.s[0].port, 26380);
    assert_string_equal(u.s[1].host, "10.0.0.2");
    assert_int_equal(u.s[1].port, MC_SENTINEL_DEFAULT_PORT);
    assert_string_equal(u.s[2].host, "fe80::1");
    assert_int_equal(u.s[2].port, 7000);
    assert_string_equal(u.name, "cache-1");
    assert_int_equal(u.db, 4);
    assert_string_equal(rest, "?cluster=x");
    assert_true(mc_sentinel_url_parse("redis-sentinel://h/n", &u, &rest, &why));
    assert_int_equal(u.n, 1);
    assert_int_equal(u.db, -1);
    assert_string_equal(rest, "");
}

static void malformed_addresses_are_refused_naming_the_problem(void **state)
{
    (void)state;
    static const struct {
        const char *url, *why;
    } bad[] = {
        {"redis://h/n", "expected redis-sentinel://HOST[:PORT][,HOST[:PORT]...]/NAME[/DB]"},
        {"redis-sentinel://", "a sentinel without a host"},
        {"redis-sentinel://h", "no /NAME of the watched primary after the sentinels"},
        {"redis-sentinel://h?cluster=x", "no /NAME of the watched primary after the sentinels"},
        {"redis-sentinel://h,/n", "a sentinel without a host"},
        {"redis-sentinel://h:0/n", "a sentinel port is not a number in 1..65535"},
        {"redis-sentinel://h:65536/n", "a sentinel port is not a number in 1..65535"},
        {"redis-sentinel://h:x/n", "a sentinel port is not a number in 1..65535"},
        {"redis-sentinel://h h/n", "unexpected characters after a sentinel address"},
        {"redis-sentinel://[::1/n", "unterminated '[' or a bad character in an IPv6 literal"},
        {"redis-sentinel://h/", "no NAME of the watched primary after the sentinels"},
        {"redis-sentinel://h/n/x", "the database is not a decimal number"},
        {"redis-sentinel://h/n/", "the database is not a decimal number"},
        {"redis-sentinel://h/n m", "the primary's name contains blanks or control characters"},
        {"redis-sentinel://a,b,c,d,e,f,g,h,i/n", "more than 8 sentinels"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mc_sentinel_url_t u;
        const char *rest = NULL, *why = NULL;
        assert_false(mc_sentinel_url_parse(bad[i].url, &u, &rest, &why));
        assert_string_equal(why, bad[i].why);
    }
    /* a name as long as the room is refused, not cut */
    char url[300] = "redis-sentinel://h/";
    memset(url + strlen(url), 'n', MC_SENTINEL_NAME_MAX);
    mc_sentinel_url_t u;
    const char *rest = NULL, *why = NULL;
    assert_false(mc_sentinel_url_parse(url, &u, &rest, &why));
    assert_string_equal(why, "the primary's name is too long");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_list_of_sentinels_with_a_name_and_a_db_is_parsed),
        cmocka_unit_test(malformed_addresses_are_refused_naming_the_problem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
