/* Master regex scans (master_scan.c): patterns that crashed or froze the
 * master (issue 13 findings 1 and 2) are refused or stopped and change
 * nothing; matching runs in steps with no shard lock held; the acting phase
 * sees the objects as they are then. */
#include "master_test_util.h"

#define MB (1024ull * 1024ull)

static int never(void *arg, const char *key, size_t key_len, const mc_master_replica_desc_t *reps,
                 uint32_t nrep)
{
    (void)arg, (void)key, (void)key_len, (void)reps, (void)nrep;
    fail_msg("no object may be reported");
    return 1;
}

static int count_key(void *arg, const mc_master_key_info_t *ki)
{
    (void)ki;
    (*(size_t *)arg)++;
    return 0;
}

/* Keys that make `(a*)*\1z` backtrack exponentially: n a's, then "b z". */
static void backtracking_key(char *buf, size_t room, unsigned n, unsigned i)
{
    memset(buf, 'a', n);
    snprintf(buf + n, room - n, "b z/%04u", i);
}

static void the_regex_of_death_is_refused_by_every_regex_call(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(mount_seg(m, C1, 1, "node1", 64 * MB, T0), MC_OK);
    for (unsigned i = 0; i < 50; i++) {
        char key[32];
        snprintf(key, sizeof(key), "key/%u", i);
        assert_int_equal(put_obj(m, C1, key, 10, 1, T0), MC_OK);
    }
    /* glibc's regcomp overflowed its stack on this one: SIGSEGV */
    const char *death = "(.*){1,32767}";
    long removed = -1;
    size_t n = 0;
    int trunc = 0;
    assert_int_equal(mc_master_remove_by_regex(m, death, 1, T0, &removed), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_get_replica_list_by_regex(m, death, T0, never, NULL, &n, &trunc),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_foreach_key(m, death, 100, count_key, &n, NULL),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(n, 0);
    char why[256];
    mc_master_scan_t *sc = NULL;
    assert_int_equal(mc_master_scan_create(m, MC_MASTER_SCAN_REMOVE, death, strlen(death), 0, 0,
                                           &sc, why, sizeof(why)),
                     MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "too large"));
    assert_int_equal(stats(m).key_count, 50);
    mc_master_destroy(m);
}

static void a_backtracking_regex_over_its_budget_removes_nothing(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(mount_seg(m, C1, 1, "node1", 64 * MB, T0), MC_OK);
    char key[64];
    for (unsigned i = 0; i < 200; i++) {
        /* a few cheap keys that match, then ones that blow the budget */
        if (i < 20)
            snprintf(key, sizeof(key), "z/%u", i);
        else
            backtracking_key(key, sizeof(key), 30, i);
        assert_int_equal(put_obj(m, C1, key, 10, 1, T0), MC_OK);
    }
    /* glibc's regexec took minutes per key of 30 a's: the master froze */
    long removed = -1;
    assert_int_equal(mc_master_remove_by_regex(m, "(a*)*\\1z", 1, T0, &removed),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(removed, -1);
    assert_int_equal(stats(m).key_count, 200);

    char why[256];
    mc_master_scan_t *sc = NULL;
    assert_int_equal(mc_master_scan_create(m, MC_MASTER_SCAN_REMOVE, "(a*)*\\1z", 8, 1, 0, &sc, why,
                                           sizeof(why)),
                     MC_OK);
    mc_status_t st;
    while ((st = mc_master_scan_step(m, sc, 16, why, sizeof(why))) == MC_INPROGRESS)
        ;
    assert_int_equal(st, MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "match limit"));
    assert_int_equal(mc_master_scan_remove(m, sc, T0, &removed), MC_ERR_STATE);
    mc_master_scan_destroy(sc);
    assert_int_equal(stats(m).key_count, 200);
    mc_master_destroy(m);
}

static void matching_runs_in_steps_with_no_shard_lock_held(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(mount_seg(m, C1, 1, "node1", 64 * MB, T0), MC_OK);
    char key[32];
    for (unsigned i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "k/%u", i);
        assert_int_equal(put_obj(m, C1, key, 10, 1, T0), MC_OK);
    }
    char why[256];
    mc_master_scan_t *sc = NULL;
    assert_int_equal(
        mc_master_scan_create(m, MC_MASTER_SCAN_REMOVE, "^k/", 3, 0, 0, &sc, why, sizeof(why)),
        MC_OK);
    unsigned steps = 0;
    mc_status_t st;
    while ((st = mc_master_scan_step(m, sc, 100, why, sizeof(why))) == MC_INPROGRESS) {
        steps++;
        /* between steps every other call proceeds (a held shard lock would
         * deadlock this thread): puts, gets, removes of matched keys */
        snprintf(key, sizeof(key), "other/%u", steps);
        assert_int_equal(put_obj(m, C2, key, 10, 1, T0), MC_OK);
        snprintf(key, sizeof(key), "k/%u", steps);
        assert_int_equal(get_n(m, key, T0, NULL), MC_OK); /* leased: a plain remove skips it */
    }
    assert_int_equal(st, MC_OK);
    assert_true(steps >= 2000 / 100 - 1);
    assert_int_equal(mc_master_scan_matched(sc), 2000);
    long removed = -1;
    assert_int_equal(mc_master_scan_remove(m, sc, T0, &removed), MC_OK);
    mc_master_scan_destroy(sc);
    /* the leased ones stay (judged as they are when the scan acts) */
    assert_int_equal(removed, 2000 - steps);
    assert_int_equal(stats(m).key_count, 2 * steps);
    mc_master_destroy(m);
}

static void the_acting_phase_skips_objects_gone_since_they_matched(void **state)
{
    (void)state;
    mc_master_t *m = master_new(NULL);
    assert_int_equal(mount_seg(m, C1, 1, "node1", 64 * MB, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "a/1", 10, 1, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "a/2", 10, 1, T0), MC_OK);
    assert_int_equal(put_obj(m, C1, "b/1", 10, 1, T0), MC_OK);
    char why[256];
    mc_master_scan_t *sc = NULL;
    assert_int_equal(
        mc_master_scan_create(m, MC_MASTER_SCAN_KEYS, "^a/", 3, 0, 100, &sc, why, sizeof(why)),
        MC_OK);
    assert_int_equal(mc_master_scan_step(m, sc, 0, why, sizeof(why)), MC_OK);
    assert_int_equal(mc_master_scan_matched(sc), 2);
    assert_int_equal(mc_master_remove(m, "a/2", 3, 0, T0), MC_OK);
    size_t n = 0, cnt = 0;
    assert_int_equal(mc_master_scan_keys(m, sc, count_key, &n, &cnt), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(cnt, 1);
    mc_master_scan_destroy(sc);

    /* no regex: a listing of every key, capped */
    n = 0;
    assert_int_equal(mc_master_foreach_key(m, NULL, 1, count_key, &n, &cnt), MC_OK);
    assert_int_equal(n, 1);
    mc_master_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_regex_of_death_is_refused_by_every_regex_call),
        cmocka_unit_test(a_backtracking_regex_over_its_budget_removes_nothing),
        cmocka_unit_test(matching_runs_in_steps_with_no_shard_lock_held),
        cmocka_unit_test(the_acting_phase_skips_objects_gone_since_they_matched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
