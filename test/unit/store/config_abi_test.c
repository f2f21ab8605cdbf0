/*
 * Config structs grow without breaking programs built against an older
 * header (issue 14): mc_store_config_t, mc_te_opts_t and mc_replicate_config_t
 * carry struct_size (set by their init macros); the library writes and reads only that many
 * bytes and takes its defaults for the fields the caller's header lacked.
 * "Older" is simulated by cutting the struct before its last fields, with
 * garbage after the cut (what an old program's memory holds there).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "mooncake/store.h"
#include "mooncake/transfer.h"
#include "store/client_int.h"
#include "transport/te.h"

#define GARBAGE 0xAB

static void init_writes_no_byte_past_an_older_struct(void **state)
{
    (void)state;
    unsigned char buf[sizeof(mc_store_config_t) + 16];
    memset(buf, GARBAGE, sizeof(buf));
    size_t old = offsetof(mc_store_config_t, service);
    mc_store_config_init_size((mc_store_config_t *)(void *)buf, old);
    for (size_t i = old; i < sizeof(buf); i++)
        assert_int_equal(buf[i], GARBAGE);
    mc_store_config_t c;
    memcpy(&c, buf, sizeof(c));
    assert_int_equal(c.struct_size, old);
    assert_string_equal(c.master, "127.0.0.1:50051"); /* the part it has: defaults */

    unsigned char tb[sizeof(mc_te_opts_t) + 16];
    memset(tb, GARBAGE, sizeof(tb));
    size_t told = offsetof(mc_te_opts_t, local_hostname) + sizeof(const char *);
    mc_te_opts_init_size((mc_te_opts_t *)(void *)tb, told);
    for (size_t i = told; i < sizeof(tb); i++)
        assert_int_equal(tb[i], GARBAGE);
}

static void an_older_store_config_gets_defaults_for_the_fields_it_lacks(void **state)
{
    (void)state;
    unsigned char buf[sizeof(mc_store_config_t)];
    memset(buf, GARBAGE, sizeof(buf));
    size_t old = offsetof(mc_store_config_t, service); /* before service, mem_pool_size */
    mc_store_config_t *c = (mc_store_config_t *)(void *)buf;
    mc_store_config_init_size(c, old);
    c->local_buffer_size = 12345;
    c->master = "10.0.0.1:1";
    mc_store_config_t full;
    assert_int_equal(store_config_full(c, &full), MC_OK);
    assert_int_equal(full.struct_size, sizeof(mc_store_config_t));
    assert_int_equal(full.local_buffer_size, 12345); /* what it set */
    assert_string_equal(full.master, "10.0.0.1:1");
    assert_null(full.service); /* not the garbage past its end */
    assert_int_equal(full.mem_pool_size, 0);
}

static void a_size_the_library_does_not_know_is_refused(void **state)
{
    (void)state;
    mc_store_config_t c, full;
    mc_store_config_init(&c);
    c.struct_size = 0; /* not initialised */
    assert_int_equal(store_config_full(&c, &full), MC_ERR_INVALID_ARGUMENT);
    c.struct_size = sizeof(c) + 8; /* a newer header than the library */
    assert_int_equal(store_config_full(&c, &full), MC_ERR_INVALID_ARGUMENT);
    mc_store_t *s = NULL;
    assert_int_equal(mc_store_open(&c, &s), MC_ERR_INVALID_ARGUMENT);
    assert_null(s);

    mc_te_opts_t o, ofull;
    mc_te_opts_init(&o);
    o.struct_size = 3;
    assert_int_equal(te_opts_full(&o, &ofull), MC_ERR_INVALID_ARGUMENT);
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&o, &te), MC_ERR_INVALID_ARGUMENT);
}

static void an_engine_starts_from_an_older_opts_struct(void **state)
{
    (void)state;
    unsigned char buf[sizeof(mc_te_opts_t)];
    memset(buf, GARBAGE, sizeof(buf));
    /* a header that ended after listen_host: everything later is garbage */
    size_t old = offsetof(mc_te_opts_t, listen_host) + sizeof(const char *);
    mc_te_opts_t *o = (mc_te_opts_t *)(void *)buf;
    mc_te_opts_init_size(o, old);
    o->listen_host = "127.0.0.1";
    mc_te_opts_t full;
    assert_int_equal(te_opts_full(o, &full), MC_OK);
    mc_te_opts_t d;
    mc_te_opts_init(&d);
    assert_string_equal(full.listen_host, "127.0.0.1");
    assert_int_equal(full.slice_size, d.slice_size); /* defaults, not garbage */
    assert_int_equal(full.timeout_us, d.timeout_us);
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(o, &te), MC_OK);
    mc_te_destroy(te);
}

static void an_older_replicate_config_gets_defaults_for_the_fields_it_lacks(void **state)
{
    (void)state;
    unsigned char buf[sizeof(mc_replicate_config_t) + 16];
    memset(buf, GARBAGE, sizeof(buf));
    /* a header that ended before soft_pin_action */
    size_t old = offsetof(mc_replicate_config_t, soft_pin_action);
    mc_replicate_config_t *c = (mc_replicate_config_t *)(void *)buf;
    mc_replicate_config_init_size(c, old);
    for (size_t i = old; i < sizeof(buf); i++)
        assert_int_equal(buf[i], GARBAGE); /* init wrote nothing past it */
    assert_int_equal(c->replica_num, 1);
    c->replica_num = 3;
    mc_replicate_config_t full;
    assert_int_equal(store_replicate_config_full(c, &full), MC_OK);
    assert_int_equal(full.struct_size, sizeof(mc_replicate_config_t));
    assert_int_equal(full.replica_num, 3);                        /* what it set */
    assert_int_equal(full.soft_pin_action, MC_SOFT_PIN_PRESERVE); /* not the garbage */
    assert_int_equal(full.has_soft_pin_ttl, 0);
    assert_int_equal(full.with_hard_pin, 0);
}

static void a_replicate_config_size_the_library_does_not_know_is_refused(void **state)
{
    (void)state;
    mc_replicate_config_t c, full;
    mc_replicate_config_init(&c);
    assert_int_equal(c.struct_size, sizeof(c));
    assert_int_equal(store_replicate_config_full(&c, &full), MC_OK);
    c.struct_size = 0; /* not initialised */
    assert_int_equal(store_replicate_config_full(&c, &full), MC_ERR_INVALID_PARAMS);
    c.struct_size = sizeof(c) + 8; /* a newer header than the library */
    assert_int_equal(store_replicate_config_full(&c, &full), MC_ERR_INVALID_PARAMS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(init_writes_no_byte_past_an_older_struct),
        cmocka_unit_test(an_older_store_config_gets_defaults_for_the_fields_it_lacks),
        cmocka_unit_test(a_size_the_library_does_not_know_is_refused),
        cmocka_unit_test(an_engine_starts_from_an_older_opts_struct),
        cmocka_unit_test(an_older_replicate_config_gets_defaults_for_the_fields_it_lacks),
        cmocka_unit_test(a_replicate_config_size_the_library_does_not_know_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
