/*
 * fsm.h - checked state changes for per-connection state machines
 * (docs/ARCHITECTURE.md §7).
 *
 * A machine is described once, statically: its name, the names of its states
 * (indexed by the state enum) and, per from-state, a bitmask of the states it
 * may move to. The owner writes one set_state() that calls mc_fsm_set() (or
 * mc_fsm_check() and then does its own bookkeeping); no other code writes the
 * state field. Legal moves are logged at DEBUG as
 * "<machine> %p: FROM -> TO" under the descriptor's log component. Illegal
 * ones are logged at ERROR, refused with MC_ERR_STATE and leave the state as
 * it was: the caller decides whether that is fatal (assert) or a reason to
 * close the connection. At most 64 states. Pure functions, any thread.
 *
 *     enum conn_state { CONN_IDLE, CONN_OPEN, CONN_CLOSED, CONN_NSTATES };
 *     static const char *const conn_state_names[] = {"IDLE", "OPEN", "CLOSED"};
 *     static const uint64_t conn_moves[] = {
 *         [CONN_IDLE] = MC_FSM_BIT(CONN_OPEN) | MC_FSM_BIT(CONN_CLOSED),
 *         [CONN_OPEN] = MC_FSM_BIT(CONN_CLOSED),
 *         [CONN_CLOSED] = 0,
 *     };
 *     static const mc_fsm_desc_t conn_fsm =
 *         MC_FSM_DESC("tcp_conn", MC_LOGC_TCP, conn_state_names, conn_moves);
 *     ...
 *     if (MC_FSM_SET(&conn_fsm, c, state, CONN_OPEN) != MC_OK) ...
 */
#ifndef MC_REACTOR_FSM_H
#define MC_REACTOR_FSM_H

#include <stdint.h>

#include "mooncake/status.h"
#include "util/log.h"

typedef struct mc_fsm_desc {
    const char *machine;            /* for log lines, e.g. "tcp_conn" */
    mc_log_comp_t comp;             /* log component of the owner */
    const char *const *state_names; /* [count] */
    const uint64_t *allowed;        /* [count]: bit `to` set when from -> to is legal */
    unsigned count;                 /* states, <= 64 */
} mc_fsm_desc_t;

#define MC_FSM_BIT(state) (UINT64_C(1) << (state))

/* Static initialiser; fails to compile when names[] and allowed[] differ in
 * length or there are more than 64 states. */
#define MC_FSM_DESC(machine, comp, names, allowed)                                                 \
    {                                                                                              \
        (machine), (comp), (names), (allowed),                                                     \
            (unsigned)(sizeof(names) / sizeof((names)[0])) +                                       \
                0 * (unsigned)sizeof(char[(sizeof(names) / sizeof((names)[0]) ==                   \
                                           sizeof(allowed) / sizeof((allowed)[0])) &&              \
                                                  sizeof(names) / sizeof((names)[0]) <= 64         \
                                              ? 1                                                  \
                                              : -1])                                               \
    }

/* The state's name, or "?" when out of range. */
static inline const char *mc_fsm_state_name(const mc_fsm_desc_t *d, unsigned state)
{
    return state < d->count && d->state_names[state] != NULL ? d->state_names[state] : "?";
}

static inline int mc_fsm_allowed(const mc_fsm_desc_t *d, unsigned from, unsigned to)
{
    return from < d->count && to < d->count && (d->allowed[from] & MC_FSM_BIT(to)) != 0;
}

/* Check from -> to for obj (only printed) and log it. MC_OK when legal;
 * MC_ERR_STATE (logged at ERROR) when not. Does not change anything. */
mc_status_t mc_fsm_check(const mc_fsm_desc_t *d, const void *obj, unsigned from, unsigned to);

/* Checked assignment to obj->field: MC_OK and the field updated, or
 * MC_ERR_STATE and the field unchanged. obj is evaluated more than once. */
#define MC_FSM_SET(d, obj, field, to)                                                              \
    (mc_fsm_check((d), (obj), (unsigned)(obj)->field, (unsigned)(to)) == MC_OK                     \
         ? ((obj)->field = (to), MC_OK)                                                            \
         : MC_ERR_STATE)

#endif /* MC_REACTOR_FSM_H */
