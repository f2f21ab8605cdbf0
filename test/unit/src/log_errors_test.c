/* util/log: a log that cannot be written (issue 13, finding 8). The start
 * probe reports the write error; later failures are said once on stderr and
 * counted, and the next file gets its own report. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"

/* Run fn with stderr redirected into a temporary file; its content in out. */
static void with_stderr_captured(void (*fn)(void), char *out, size_t room)
{
    char path[] = "/tmp/mc-log-test-XXXXXX";
    int tmp = mkstemp(path);
    assert_true(tmp >= 0);
    unlink(path);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(tmp, 2), 2);
    fn();
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    ssize_t n = pread(tmp, out, room - 1, 0);
    assert_true(n >= 0);
    out[n] = '\0';
    close(tmp);
}

static void a_full_device_fails_the_probe(void **state)
{
    (void)state;
    int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    uint64_t before = mc_log_write_errors();
    assert_int_equal(mc_log_probe(fd), ENOSPC);
    assert_int_equal(mc_log_write_errors(), before); /* a probe is not a lost line */
    close(fd);
    /* a writable file passes */
    fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_int_equal(mc_log_probe(fd), 0);
    close(fd);
}

static int full_fd = -1;

static void log_five_lines_to_a_full_device(void)
{
    mc_log_set_fd(full_fd);
    for (int i = 0; i < 5; i++)
        MC_ERROR(CORE, "line %d that cannot be written", i);
    mc_log_set_fd(2);
}

static void later_write_errors_are_said_once_on_stderr_and_counted(void **state)
{
    (void)state;
    full_fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
    assert_true(full_fd >= 0);
    uint64_t before = mc_log_write_errors();
    char err[4096];
    with_stderr_captured(log_five_lines_to_a_full_device, err, sizeof(err));
    assert_int_equal(mc_log_write_errors() - before, 5);
    /* one line, naming the cause */
    assert_non_null(strstr(err, "cannot write the log file: No space left on device"));
    assert_int_equal(strchr(err, '\n') - err + 1, (long)strlen(err));
    /* setting the file again: its first failure is reported again */
    with_stderr_captured(log_five_lines_to_a_full_device, err, sizeof(err));
    assert_non_null(strstr(err, "No space left on device"));
    assert_int_equal(mc_log_write_errors() - before, 10);
    close(full_fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_full_device_fails_the_probe),
        cmocka_unit_test(later_write_errors_are_said_once_on_stderr_and_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
