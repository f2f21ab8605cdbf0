/* Status codes: every code has a name and a message; upstream numbers kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "mooncake/status.h"

static const struct {
    mc_status_t st;
    int value;
    const char *name;
} expected[] = {
#define ROW(name, value, msg) {name, value, #name},
    MC_STATUS_TABLE(ROW)
#undef ROW
};

static void every_code_has_a_distinct_name_and_a_message(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
        const char *s = mc_status_str(expected[i].st);
        assert_non_null(s);
        assert_string_not_equal(s, "UNKNOWN_STATUS");
        /* the name is the enumerator without its MC_/MC_ERR_ prefix */
        assert_non_null(strstr(expected[i].name, s));
        assert_int_equal(strlen(expected[i].name) - strlen(s),
                         strncmp(expected[i].name, "MC_ERR_", 7) == 0 ? 7 : 3);
        assert_true(strlen(mc_status_msg(expected[i].st)) > 0);
        for (size_t j = 0; j < i; j++) {
            assert_int_not_equal(expected[i].value, expected[j].value);
            assert_string_not_equal(mc_status_str(expected[j].st), s);
        }
    }
}

static void store_codes_keep_upstream_numbers(void **state)
{
    (void)state;
    assert_int_equal(MC_OK, 0);
    assert_int_equal(MC_ERR_INTERNAL_ERROR, -1);
    assert_int_equal(MC_ERR_NO_AVAILABLE_HANDLE, -200);
    assert_int_equal(MC_ERR_INVALID_PARAMS, -600);
    assert_int_equal(MC_ERR_OBJECT_NOT_FOUND, -704);
    assert_int_equal(MC_ERR_OBJECT_ALREADY_EXISTS, -705);
    assert_int_equal(MC_ERR_OBJECT_HAS_LEASE, -706);
    assert_int_equal(MC_ERR_LEASE_EXPIRED, -707);
    assert_int_equal(MC_ERR_RPC_FAIL, -900);
    assert_int_equal(MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS, -1010);
    assert_string_equal(mc_status_str(MC_ERR_OBJECT_NOT_FOUND), "OBJECT_NOT_FOUND");
    assert_string_equal(mc_status_str(MC_OK), "OK");
}

static void transfer_codes_are_upstream_minus_3000(void **state)
{
    (void)state;
    assert_int_equal(MC_ERR_INVALID_ARGUMENT, -3000 - 1);
    assert_int_equal(MC_ERR_TOO_MANY_REQUESTS, -3000 - 2);
    assert_int_equal(MC_ERR_ADDRESS_NOT_REGISTERED, -3000 - 3);
    assert_int_equal(MC_ERR_BATCH_BUSY, -3000 - 4);
    assert_int_equal(MC_ERR_ADDRESS_OVERLAPPED, -3000 - 7);
    assert_int_equal(MC_ERR_METADATA, -3000 - 200);
    assert_string_equal(mc_status_str(MC_ERR_BATCH_BUSY), "BATCH_BUSY");
}

static void unknown_values_are_named_unknown(void **state)
{
    (void)state;
    assert_string_equal(mc_status_str((mc_status_t)-99999), "UNKNOWN_STATUS");
    assert_string_equal(mc_status_msg((mc_status_t)12345), "unknown status code");
}

static void again_and_protocol_error_are_distinct(void **state)
{
    (void)state;
    assert_true(MC_AGAIN >= 0);
    assert_true(mc_status_is_err(MC_ERR_PROTOCOL));
    assert_false(mc_status_is_err(MC_AGAIN));
    assert_false(mc_status_is_err(MC_INPROGRESS));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_code_has_a_distinct_name_and_a_message),
        cmocka_unit_test(store_codes_keep_upstream_numbers),
        cmocka_unit_test(transfer_codes_are_upstream_minus_3000),
        cmocka_unit_test(unknown_values_are_named_unknown),
        cmocka_unit_test(again_and_protocol_error_are_distinct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
