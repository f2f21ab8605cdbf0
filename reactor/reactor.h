/*
 * reactor.h - event loops: one thread + one libevent event_base + a mailbox.
 *
 * A reactor owns the objects created on it (connections, timers, requests);
 * only its own thread touches them. Other threads talk to a reactor by
 * posting messages to its mailbox (an MPSC queue signalled by an eventfd).
 *
 * Two kinds:
 *  - threaded: mc_reactor_group_create() starts N reactor threads. With
 *    count = 0 ("auto") there is one per NUMA node, each pinned to its node's
 *    CPUs with its allocations preferred on that node; a machine with one node
 *    gets one reactor.
 *  - attached: mc_reactor_attach() wraps an event_base that a host program
 *    owns and runs; no thread of ours exists. Mailbox messages run when the
 *    host runs its loop.
 *
 * Messages (mc_reactor_msg_t) are intrusive: the sender embeds one in its own
 * struct, sets fn, and posts it. fn runs exactly once, on the reactor's thread:
 * with MC_OK normally, or with MC_ERR_CANCELED when the reactor stops before
 * running it (then fn runs on the stopping thread, after the loop has ended,
 * and must not touch the event_base). Messages posted by one thread run in the
 * order they were posted. Posting never allocates and never fails, except
 * after the reactor stopped (MC_ERR_CANCELED returned, fn not called).
 *
 * Stop: mc_reactor_group_stop() asks every loop to finish, runs the stop hooks
 * of each reactor on its own thread (so owners can fail their pending work
 * with MC_ERR_CANCELED), joins the threads, then cancels what is left in the
 * mailboxes.
 */
#ifndef MC_REACTOR_REACTOR_H
#define MC_REACTOR_REACTOR_H

#include <stdint.h>

#include "mooncake/status.h"
#include "util/list.h"

struct event_base;
struct event;

typedef struct mc_reactor mc_reactor_t;
typedef struct mc_reactor_group mc_reactor_group_t;
typedef struct mc_reactor_msg mc_reactor_msg_t;

/* Runs on the reactor's thread. st is MC_OK, or MC_ERR_CANCELED at stop. */
typedef void (*mc_reactor_msg_fn_t)(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st);

struct mc_reactor_msg {
    mc_reactor_msg_t *next; /* owned by the mailbox while posted */
    mc_reactor_msg_fn_t fn;
};

typedef struct mc_reactor_group_opts {
    unsigned count;      /* reactors to start; 0 = one per NUMA node */
    int pin;             /* bind each thread to its NUMA node's CPUs (default 1) */
    const char *name;    /* thread name prefix, e.g. "master" -> "master-r0" */
} mc_reactor_group_opts_t;

void mc_reactor_group_opts_init(mc_reactor_group_opts_t *o);

/* Create and start the reactor threads. Returns only after every thread runs
 * its loop. On error nothing is left running and *out is untouched. */
mc_status_t mc_reactor_group_create(const mc_reactor_group_opts_t *o, mc_reactor_group_t **out);

/* Stop (see above) and free. Safe on NULL. Must not be called from one of the
 * group's own threads. */
void mc_reactor_group_destroy(mc_reactor_group_t *g);

unsigned mc_reactor_group_count(const mc_reactor_group_t *g);
mc_reactor_t *mc_reactor_group_get(mc_reactor_group_t *g, unsigned i);

/* Attach mode: wrap a host-owned event_base. The host keeps running its loop;
 * mailbox messages and our events run from it. mc_reactor_detach() removes our
 * events, runs the stop hooks and cancels pending messages; call it from the
 * thread that runs the base, while the base is not inside a callback of ours. */
mc_status_t mc_reactor_attach(struct event_base *base, const char *name, mc_reactor_t **out);
void mc_reactor_detach(mc_reactor_t *r);

/* Thread-safe. MC_OK, or MC_ERR_CANCELED if the reactor is stopping/stopped. */
mc_status_t mc_reactor_post(mc_reactor_t *r, mc_reactor_msg_t *msg);

/* Convenience: allocate a message that calls fn(r, arg, st) and post it.
 * MC_ERR_NOMEM or MC_ERR_CANCELED (fn not called) on failure. */
typedef void (*mc_reactor_call_fn_t)(mc_reactor_t *r, void *arg, mc_status_t st);
mc_status_t mc_reactor_call(mc_reactor_t *r, mc_reactor_call_fn_t fn, void *arg);

struct event_base *mc_reactor_base(mc_reactor_t *r);
unsigned mc_reactor_index(const mc_reactor_t *r);   /* 0-based within its group; 0 if attached */
int mc_reactor_numa_node(const mc_reactor_t *r);    /* -1 if unknown / attached */
const char *mc_reactor_name(const mc_reactor_t *r);

/* The reactor whose thread (or attached loop callback) is running, or NULL. */
mc_reactor_t *mc_reactor_current(void);
static inline int mc_reactor_is_current(mc_reactor_t *r)
{
    return mc_reactor_current() == r;
}

/* Stop hooks: run on the reactor's thread when it stops (or is detached),
 * before pending messages are canceled. Embed mc_reactor_hook_t in the owner.
 * Register and unregister only from the reactor's own thread. */
typedef struct mc_reactor_hook {
    mc_list_t node;
    void (*fn)(mc_reactor_t *r, struct mc_reactor_hook *hook);
} mc_reactor_hook_t;

void mc_reactor_on_stop(mc_reactor_t *r, mc_reactor_hook_t *hook);
void mc_reactor_on_stop_cancel(mc_reactor_t *r, mc_reactor_hook_t *hook);

/* 1 once the reactor has begun stopping. Reactor thread only. */
int mc_reactor_stopping(const mc_reactor_t *r);

/*
 * Timers: embed an mc_timer_t; callbacks run on the reactor's thread.
 * A one-shot timer fires once per start; a periodic timer every period until
 * stopped. Restarting an armed timer re-arms it. Reactor thread only.
 */
typedef struct mc_timer mc_timer_t;
typedef void (*mc_timer_fn_t)(mc_timer_t *t, void *arg);

struct mc_timer {
    struct event *ev;
    mc_timer_fn_t fn;
    void *arg;
    int periodic;
};

mc_status_t mc_timer_init(mc_timer_t *t, mc_reactor_t *r, mc_timer_fn_t fn, void *arg);
void mc_timer_start(mc_timer_t *t, uint64_t usec, int periodic);
void mc_timer_stop(mc_timer_t *t);
int mc_timer_armed(const mc_timer_t *t);
/* Stops and releases; safe on a zeroed or already-finalised timer. */
void mc_timer_fini(mc_timer_t *t);

/* Number of NUMA nodes (1 when libnuma reports none). */
unsigned mc_numa_node_count(void);

#endif /* MC_REACTOR_REACTOR_H */
