/* State-machine helpers: legal moves update and log, illegal ones are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "reactor/fsm.h"
#include "util/log.h"

enum conn_state { CONN_IDLE, CONN_CONNECTING, CONN_OPEN, CONN_CLOSED };

static const char *const conn_state_names[] = {"IDLE", "CONNECTING", "OPEN", "CLOSED"};
static const uint64_t conn_moves[] = {
    [CONN_IDLE] = MC_FSM_BIT(CONN_CONNECTING) | MC_FSM_BIT(CONN_CLOSED),
    [CONN_CONNECTING] = MC_FSM_BIT(CONN_OPEN) | MC_FSM_BIT(CONN_CLOSED),
    [CONN_OPEN] = MC_FSM_BIT(CONN_CLOSED),
    [CONN_CLOSED] = 0,
};
static const mc_fsm_desc_t conn_fsm =
    MC_FSM_DESC("test_conn", MC_LOGC_TEST, conn_state_names, conn_moves);

typedef struct conn {
    enum conn_state state;
} conn_t;

/* Log lines written while fn runs, captured through a pipe. */
static char captured[4096];

static void capture_begin(int *fds)
{
    assert_int_equal(pipe(fds), 0);
    mc_log_set_fd(fds[1]);
}

static void capture_end(int *fds)
{
    mc_log_set_fd(2);
    close(fds[1]);
    ssize_t n = read(fds[0], captured, sizeof(captured) - 1);
    captured[n > 0 ? n : 0] = '\0';
    close(fds[0]);
}

static void legal_transitions_succeed_and_update_the_state(void **state)
{
    (void)state;
    conn_t c = {CONN_IDLE};
    assert_int_equal(conn_fsm.count, 4);
    assert_int_equal(MC_FSM_SET(&conn_fsm, &c, state, CONN_CONNECTING), MC_OK);
    assert_int_equal(c.state, CONN_CONNECTING);
    assert_int_equal(MC_FSM_SET(&conn_fsm, &c, state, CONN_OPEN), MC_OK);
    assert_int_equal(c.state, CONN_OPEN);
    assert_int_equal(MC_FSM_SET(&conn_fsm, &c, state, CONN_CLOSED), MC_OK);
    assert_int_equal(c.state, CONN_CLOSED);
}

static void illegal_transitions_are_refused_and_leave_the_state_alone(void **state)
{
    (void)state;
    conn_t c = {CONN_IDLE};
    int fds[2];
    capture_begin(fds);
    mc_status_t st = MC_FSM_SET(&conn_fsm, &c, state, CONN_OPEN);
    capture_end(fds);
    assert_int_equal(st, MC_ERR_STATE);
    assert_int_equal(c.state, CONN_IDLE);
    assert_non_null(strstr(captured, " E [test] "));
    assert_non_null(strstr(captured, "IDLE(0) -> OPEN(2)"));

    capture_begin(fds);
    c.state = CONN_CLOSED;
    mc_status_t from_closed = MC_FSM_SET(&conn_fsm, &c, state, CONN_IDLE);
    /* self-moves are legal only when listed */
    mc_status_t self = MC_FSM_SET(&conn_fsm, &c, state, CONN_CLOSED);
    /* out of range */
    mc_status_t beyond = mc_fsm_check(&conn_fsm, &c, CONN_IDLE, 17);
    capture_end(fds);
    assert_int_equal(from_closed, MC_ERR_STATE);
    assert_int_equal(self, MC_ERR_STATE);
    assert_int_equal(beyond, MC_ERR_STATE);
    assert_int_equal(c.state, CONN_CLOSED);
    assert_non_null(strstr(captured, "IDLE(0) -> ?(17)"));
    assert_false(mc_fsm_allowed(&conn_fsm, 9, CONN_OPEN));
    assert_false(mc_fsm_allowed(&conn_fsm, CONN_IDLE, 64));
}

static void legal_transitions_are_logged_at_debug_with_the_object(void **state)
{
    (void)state;
    conn_t c = {CONN_IDLE};
    char want[128];
    snprintf(want, sizeof(want), "test_conn %p: IDLE -> CONNECTING", (void *)&c);
    int fds[2];

    capture_begin(fds);
    assert_int_equal(MC_FSM_SET(&conn_fsm, &c, state, CONN_CONNECTING), MC_OK);
    capture_end(fds);
    assert_string_equal(captured, ""); /* info: not logged */

    c.state = CONN_IDLE;
    mc_log_set_level(MC_LOGC_TEST, MC_LOG_DEBUG);
    capture_begin(fds);
    assert_int_equal(MC_FSM_SET(&conn_fsm, &c, state, CONN_CONNECTING), MC_OK);
    capture_end(fds);
    mc_log_set_level(MC_LOGC_TEST, MC_LOG_INFO);
    assert_non_null(strstr(captured, " D [test] "));
    assert_non_null(strstr(captured, want));
}

static void state_names_print_and_unknown_states_print_a_question_mark(void **state)
{
    (void)state;
    assert_string_equal(mc_fsm_state_name(&conn_fsm, CONN_IDLE), "IDLE");
    assert_string_equal(mc_fsm_state_name(&conn_fsm, CONN_CLOSED), "CLOSED");
    assert_string_equal(mc_fsm_state_name(&conn_fsm, 4), "?");
    assert_string_equal(mc_fsm_state_name(&conn_fsm, 1000), "?");
    assert_true(mc_fsm_allowed(&conn_fsm, CONN_CONNECTING, CONN_OPEN));
    assert_false(mc_fsm_allowed(&conn_fsm, CONN_OPEN, CONN_CONNECTING));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(legal_transitions_succeed_and_update_the_state),
        cmocka_unit_test(illegal_transitions_are_refused_and_leave_the_state_alone),
        cmocka_unit_test(legal_transitions_are_logged_at_debug_with_the_object),
        cmocka_unit_test(state_names_print_and_unknown_states_print_a_question_mark),
    };
    mc_log_set_level(MC_LOGC_TEST, MC_LOG_INFO);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
