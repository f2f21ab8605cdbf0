/* util/prom.h: the Prometheus text the daemons' /metrics are made of. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "mooncake/version.h"
#include "util/prom.h"

static char *text(mc_buf_t *b)
{
    mc_buf_append(b, "", 1);
    return (char *)mc_buf_head(b);
}

static void a_family_has_help_and_type_before_its_sample(void **state)
{
    (void)state;
    mc_buf_t b = MC_BUF_INIT;
    mc_prom_counter(&b, "x_total", "Things.", 7);
    assert_string_equal(text(&b), "# HELP x_total Things.\n# TYPE x_total counter\nx_total 7\n");
    mc_buf_fini(&b);
}

static void label_values_are_escaped(void **state)
{
    (void)state;
    mc_buf_t b = MC_BUF_INIT;
    mc_prom_sample_l(&b, "seg", "segment", "a\"b\\c\nd\x01", 8, 3);
    assert_string_equal(text(&b), "seg{segment=\"a\\\"b\\\\c\\nd\\\\x01\"} 3\n");
    mc_buf_fini(&b);
}

static void a_histogram_is_cumulative_and_its_count_is_the_inf_bucket(void **state)
{
    (void)state;
    mc_prom_hist_t h;
    memset(&h, 0, sizeof(h));
    mc_prom_hist_observe_us(&h, 10);       /* <= 50us */
    mc_prom_hist_observe_us(&h, 50);       /* <= 50us (bounds are inclusive) */
    mc_prom_hist_observe_us(&h, 3000);     /* <= 5ms */
    mc_prom_hist_observe_us(&h, 60000000); /* over 10 s: +Inf only */
    mc_buf_t b = MC_BUF_INIT;
    mc_prom_hist_write(&b, "lat_seconds", "m=\"x\"", &h);
    char *t = text(&b);
    assert_non_null(strstr(t, "lat_seconds_bucket{m=\"x\",le=\"5e-05\"} 2\n"));
    assert_non_null(strstr(t, "lat_seconds_bucket{m=\"x\",le=\"0.0025\"} 2\n"));
    assert_non_null(strstr(t, "lat_seconds_bucket{m=\"x\",le=\"0.005\"} 3\n"));
    assert_non_null(strstr(t, "lat_seconds_bucket{m=\"x\",le=\"10\"} 3\n"));
    assert_non_null(strstr(t, "lat_seconds_bucket{m=\"x\",le=\"+Inf\"} 4\n"));
    assert_non_null(strstr(t, "lat_seconds_sum{m=\"x\"} 60.003060\n"));
    assert_non_null(strstr(t, "lat_seconds_count{m=\"x\"} 4\n"));
    mc_buf_fini(&b);
}

static void process_and_build_info_are_there(void **state)
{
    (void)state;
    mc_buf_t b = MC_BUF_INIT;
    mc_prom_process(&b);
    mc_prom_build_info(&b);
    char *t = text(&b);
    char want[128];
    snprintf(want, sizeof(want), "mooncake_build_info{version=\"%s\"} 1\n", mc_version());
    assert_non_null(strstr(t, want));
    const char *names[] = {"process_cpu_seconds_total ",
                           "process_resident_memory_bytes ",
                           "process_virtual_memory_bytes ",
                           "process_open_fds ",
                           "process_max_fds ",
                           "process_start_time_seconds "};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char line[96];
        snprintf(line, sizeof(line), "\n%s", names[i]);
        const char *p = strstr(t, line);
        assert_non_null(p);
        double v = -1;
        assert_int_equal(sscanf(p + strlen(line), "%lf", &v), 1);
        if (strstr(names[i], "resident") || strstr(names[i], "start_time") ||
            strstr(names[i], "open_fds"))
            assert_true(v > 0);
    }
    mc_buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_family_has_help_and_type_before_its_sample),
        cmocka_unit_test(label_values_are_escaped),
        cmocka_unit_test(a_histogram_is_cumulative_and_its_count_is_the_inf_bucket),
        cmocka_unit_test(process_and_build_info_are_there),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
