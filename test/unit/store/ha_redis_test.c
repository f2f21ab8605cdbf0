/*
 * The pure parts of ha_redis.c: redis:// URLs as `ha.backend` and a client's
 * `master` take them (a bad one is refused with what is wrong), and the
 * lease value "ADDR VIEW NONCE" clients read the leader from.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "store/ha_redis.h"

static void a_full_url_gives_host_port_db_and_cluster(void **state)
{
    (void)state;
    mc_ha_url_t u;
    const char *why = NULL;
    assert_int_equal(mc_ha_url_parse("redis://10.0.0.5:6380/3?cluster=prod", &u, &why), MC_OK);
    assert_string_equal(u.host, "10.0.0.5");
    assert_int_equal(u.port, 6380);
    assert_int_equal(u.db, 3);
    assert_string_equal(u.cluster, "prod");
    assert_int_equal(mc_ha_url_parse("redis://cache", &u, &why), MC_OK);
    assert_string_equal(u.host, "cache");
    assert_int_equal(u.port, 6379);
    assert_int_equal(u.db, 0);
    assert_string_equal(u.cluster, "");
    assert_int_equal(mc_ha_url_parse("redis://h/?cluster=c", &u, &why), MC_OK);
    assert_int_equal(u.db, 0);
    assert_string_equal(u.cluster, "c");
}

static void a_sentinel_url_gives_the_sentinels_the_primary_name_db_and_cluster(void **state)
{
    (void)state;
    mc_ha_url_t u;
    const char *why = NULL;
    assert_int_equal(
        mc_ha_url_parse("redis-sentinel://10.0.0.1:26380,sent2/mymaster/3?cluster=prod", &u, &why),
        MC_OK);
    assert_true(u.sentinel);
    assert_int_equal(u.sent.n, 2);
    assert_string_equal(u.sent.s[0].host, "10.0.0.1");
    assert_int_equal(u.sent.s[0].port, 26380);
    assert_string_equal(u.sent.s[1].host, "sent2");
    assert_int_equal(u.sent.s[1].port, 26379);
    assert_string_equal(u.sent.name, "mymaster");
    assert_int_equal(u.db, 3);
    assert_string_equal(u.cluster, "prod");
    assert_true(mc_ha_url_is_redis("redis-sentinel://s/p"));
    assert_int_equal(mc_ha_url_parse("redis-sentinel://s/p", &u, &why), MC_OK);
    assert_int_equal(u.db, 0);
    assert_string_equal(u.cluster, "");
    char d[256];
    mc_ha_url_describe(&u, d, sizeof(d));
    assert_string_equal(d, "sentinels s:26379 (primary p, db 0)");
    assert_int_equal(mc_ha_url_parse("redis://h:7/2", &u, &why), MC_OK);
    assert_false(u.sentinel);
    mc_ha_url_describe(&u, d, sizeof(d));
    assert_string_equal(d, "redis h:7/2");
}

static void bad_urls_are_refused_naming_the_problem(void **state)
{
    (void)state;
    static const struct {
        const char *url, *why;
    } bad[] = {
        {"10.0.0.5:6379", "expected redis://HOST[:PORT][/DB][?cluster=ID] or "
                          "redis-sentinel://HOST[:PORT][,HOST[:PORT]...]/NAME[/DB][?cluster=ID]"},
        {"redis://", "no host"},
        {"redis://h:0", "the port is not a number in 1..65535"},
        {"redis://h:70000", "the port is not a number in 1..65535"},
        {"redis://h:x", "the port is not a number in 1..65535"},
        {"redis://h/x", "the database is not a decimal number"},
        {"redis://h/0?db=1", "the only query parameter is cluster=ID"},
        {"redis://h/0?cluster=", "cluster id empty, too long or with '&', '?' or blanks"},
        {"redis://h/0?cluster=a&b=c", "cluster id empty, too long or with '&', '?' or blanks"},
        {"redis-sentinel://s1/", "no NAME of the watched primary after the sentinels"},
        {"redis-sentinel://s1/p?db=2", "the only query parameter is cluster=ID"},
        {"redis-sentinel://s1/p/0?cluster=",
         "cluster id empty, too long or with '&', '?' or blanks"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mc_ha_url_t u;
        const char *why = NULL;
        assert_int_equal(mc_ha_url_parse(bad[i].url, &u, &why), MC_ERR_INVALID_ARGUMENT);
        assert_string_equal(why, bad[i].why);
    }
}

static void a_lease_value_gives_the_leader_and_its_view(void **state)
{
    (void)state;
    char addr[64];
    int64_t view = 0;
    const char *v = "10.0.0.11:50051 42 00ff00ff00ff00ff";
    assert_int_equal(mc_ha_parse_lease(v, strlen(v), addr, sizeof(addr), &view), MC_OK);
    assert_string_equal(addr, "10.0.0.11:50051");
    assert_int_equal(view, 42);
    static const char *const bad[] = {"",         "nospace", "a:1 x n", "a:1 0 n",
                                      "a:1 -3 n", " 5 n",    "a:1 7"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(mc_ha_parse_lease(bad[i], strlen(bad[i]), addr, sizeof(addr), &view),
                         MC_ERR_INVALID_PARAMS);
    /* an address longer than the room is refused, not cut */
    assert_int_equal(mc_ha_parse_lease(v, strlen(v), addr, 8, &view), MC_ERR_INVALID_PARAMS);
}

static void keys_are_namespaced_by_cluster(void **state)
{
    (void)state;
    char k[64];
    mc_ha_key(k, sizeof(k), "prod", "lease");
    assert_string_equal(k, "mc/prod/ha/lease");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_full_url_gives_host_port_db_and_cluster),
        cmocka_unit_test(a_sentinel_url_gives_the_sentinels_the_primary_name_db_and_cluster),
        cmocka_unit_test(bad_urls_are_refused_naming_the_problem),
        cmocka_unit_test(a_lease_value_gives_the_leader_and_its_view),
        cmocka_unit_test(keys_are_namespaced_by_cluster),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
