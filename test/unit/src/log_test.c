/* The public log controls (mooncake/log.h) and mc_version (mooncake/version.h):
 * MC_LOG_LEVEL applies once unless levels were set explicitly, sinks get
 * every line with its level and component, and go away cleanly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "mooncake/log.h"
#include "mooncake/version.h"
#include "util/log.h"

/* Runs first: no level has been set explicitly in this process yet. */
static void mc_log_level_from_the_environment_applies_once(void **state)
{
    (void)state;
    setenv("MC_LOG_LEVEL", "warn,rpc=debug", 1);
    mc_log_env_once();
    assert_false(MC_LOG_ENABLED(CLIENT, MC_LOG_INFO));
    assert_true(MC_LOG_ENABLED(CLIENT, MC_LOG_WARN));
    assert_true(MC_LOG_ENABLED(RPC, MC_LOG_DEBUG));
    /* a later change of the variable is not read again */
    setenv("MC_LOG_LEVEL", "trace", 1);
    mc_log_env_once();
    assert_false(MC_LOG_ENABLED(CLIENT, MC_LOG_INFO));
    unsetenv("MC_LOG_LEVEL");
}

static void a_bad_spec_changes_nothing_and_says_what_is_wrong(void **state)
{
    (void)state;
    assert_int_equal(mc_log_set_spec("info", NULL, 0), MC_OK);
    char why[200] = "";
    assert_int_equal(mc_log_set_spec("debug,nosuch=trace", why, sizeof(why)),
                     MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(why, "nosuch=trace"));
    assert_false(MC_LOG_ENABLED(CORE, MC_LOG_DEBUG));
    assert_true(MC_LOG_ENABLED(CORE, MC_LOG_INFO));
}

typedef struct seen {
    int calls;
    mc_log_level_t level;
    char comp[32];
    char line[256];
    size_t len;
} seen_t;

static void record_sink(void *arg, mc_log_level_t level, const char *component, const char *line,
                        size_t len)
{
    seen_t *s = arg;
    s->calls++;
    s->level = level;
    snprintf(s->comp, sizeof(s->comp), "%s", component);
    snprintf(s->line, sizeof(s->line), "%.*s", (int)len, line);
    s->len = len;
}

static void a_sink_gets_each_line_with_its_level_and_component(void **state)
{
    (void)state;
    seen_t s = {0};
    mc_log_set_all(MC_LOG_INFO);
    mc_log_set_sink(record_sink, &s);
    MC_WARN(RPC, "peer %s gone", "10.0.0.2");
    MC_DEBUG(RPC, "filtered out");
    assert_int_equal(s.calls, 1);
    assert_int_equal(s.level, MC_LOG_WARN);
    assert_string_equal(s.comp, "rpc");
    assert_non_null(strstr(s.line, " W [rpc] "));
    assert_non_null(strstr(s.line, "peer 10.0.0.2 gone"));
    assert_int_equal(s.len, strlen(s.line)); /* no newline */
    /* NULL goes back to the fd: the sink sees nothing more */
    mc_log_set_sink(NULL, NULL);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    mc_log_set_fd(fds[1]);
    MC_ERROR(CLIENT, "to the pipe");
    mc_log_set_fd(2);
    char buf[512] = "";
    ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
    assert_true(n > 0);
    assert_non_null(strstr(buf, "to the pipe\n"));
    assert_int_equal(s.calls, 1);
    close(fds[0]);
    close(fds[1]);
}

static void set_fd_drops_the_sink(void **state)
{
    (void)state;
    seen_t s = {0};
    mc_log_set_sink(record_sink, &s);
    mc_log_set_fd(2);
    mc_log_set_all(MC_LOG_ERR);
    MC_ERROR(TEST, "to stderr, not the sink (expected in the test output)");
    assert_int_equal(s.calls, 0);
    mc_log_set_all(MC_LOG_INFO);
}

static void the_version_is_the_makefile_one(void **state)
{
    (void)state;
    const char *v = mc_version();
    assert_non_null(v);
    unsigned a, b, c;
    char tail;
    /* MAJOR.MINOR.PATCH, nothing else */
    assert_int_equal(sscanf(v, "%u.%u.%u%c", &a, &b, &c, &tail), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mc_log_level_from_the_environment_applies_once),
        cmocka_unit_test(a_bad_spec_changes_nothing_and_says_what_is_wrong),
        cmocka_unit_test(a_sink_gets_each_line_with_its_level_and_component),
        cmocka_unit_test(set_fd_drops_the_sink),
        cmocka_unit_test(the_version_is_the_makefile_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
