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
 *    host runs its loop. "The reactor's thread" then means the thread that
 *    runs the host's loop.
 *
 * Messages (mc_reactor_msg_t) are intrusive: the sender embeds one in its own
 * struct, sets fn, and posts it. fn runs exactly once, always on the reactor's
 * thread with mc_reactor_current() == r: with MC_OK normally, or with
 * MC_ERR_CANCELED when the reactor stops before running it. Messages posted by
 * one thread run in the order they were posted (canceled ones too). Posting
 * never allocates and never fails, except once the reactor is stopping
 * (MC_ERR_CANCELED returned, fn not called). A post that races with the stop
 * is either refused or accepted-and-then-canceled, never lost. The message
 * belongs to the mailbox from a successful post until fn is called; fn may
 * free it. After a successful post the sender must not touch the message.
 *
 * Stop (mc_reactor_group_stop/destroy, mc_reactor_detach), on each reactor's
 * own thread, in this order:
 *   1. the loop stops taking messages (one already running finishes; the rest
 *      stay queued) and mc_reactor_post() starts refusing;
 *   2. the stop hooks run (owners fail their pending work with
 *      MC_ERR_CANCELED and release their events), newest hook first;
 *   3. the mailbox is closed and every message still queued runs with
 *      MC_ERR_CANCELED, in posting order. The loop does not run again:
 *      callbacks of this step may free events but must not expect new ones
 *      (timers, I/O) to fire.
 * The stop does not touch timers and other events. On a threaded reactor they
 * never fire again (its loop has ended); on an attached one the host's loop
 * goes on, so their owners must release them in their stop hook. Either way
 * they must be freed before the event_base goes away (mc_reactor_group_destroy,
 * or whenever the host frees its base).
 *
 * Lifetimes: a reactor handle stays valid until mc_reactor_group_destroy()
 * (or mc_reactor_detach()) returns. Posting to a stopped reactor is fine
 * (MC_ERR_CANCELED); posting to a destroyed one is a use-after-free, so other
 * threads must be done posting before the destroy call begins.
 *
 * Callbacks registered directly on mc_reactor_base() by other modules (fd
 * events, bufferevents) should bracket their body with mc_reactor_enter() /
 * mc_reactor_leave() so that mc_reactor_current() is right in attach mode too
 * (on threaded reactors it is already right; the bracket costs two TLS
 * stores). Mailbox messages, stop hooks and mc_timer callbacks are bracketed
 * by the reactor itself.
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
    unsigned count;   /* reactors to start; 0 = one per NUMA node */
    int pin;          /* bind each thread to its NUMA node's CPUs (default 1) */
    const char *name; /* thread name prefix, e.g. "master" -> "master-r0" (default "mc") */
} mc_reactor_group_opts_t;

void mc_reactor_group_opts_init(mc_reactor_group_opts_t *o);

/* Create and start the reactor threads. An explicit count spreads the
 * reactors round-robin over the NUMA nodes. Returns only after every thread
 * runs its loop (a message posted right after this returns will run).
 * MC_OK; MC_ERR_INVALID_PARAMS (o NULL, or name longer than 32 bytes);
 * MC_ERR_NOMEM; MC_ERR_INTERNAL_ERROR (eventfd, event_base or pthread_create
 * failed; logged with the cause). On error nothing is left running and *out is
 * untouched. */
mc_status_t mc_reactor_group_create(const mc_reactor_group_opts_t *o, mc_reactor_group_t **out);

/* Stop every reactor of the group (see "Stop" above; the reactors stop in
 * parallel, each on its own thread) and join the threads. Afterwards the
 * handles and their event_bases stay valid: posts return MC_ERR_CANCELED, and
 * the calling thread may free the objects and events that lived on the
 * reactors. Idempotent. Not from one of the group's own threads, and not
 * concurrently with itself or destroy. */
void mc_reactor_group_stop(mc_reactor_group_t *g);

/* Stop (if not yet stopped) and free the reactors and their event_bases.
 * Safe on NULL. Not from one of the group's own threads. */
void mc_reactor_group_destroy(mc_reactor_group_t *g);

unsigned mc_reactor_group_count(const mc_reactor_group_t *g);
/* The i-th reactor, or NULL when i >= count. Borrowed until destroy. */
mc_reactor_t *mc_reactor_group_get(mc_reactor_group_t *g, unsigned i);

/* Attach mode: wrap a host-owned event_base (borrowed; must outlive the
 * reactor). The host keeps running its loop; mailbox messages and our events
 * run from it. name is copied (NULL = "attached"). MC_OK, MC_ERR_NOMEM, or
 * MC_ERR_INTERNAL_ERROR (eventfd or event_add failed; logged).
 * mc_reactor_detach() stops the reactor (see "Stop": hooks, then pending
 * messages canceled, all on the calling thread), removes our events and frees
 * the reactor; call it from the thread that runs the base, while the base is
 * not inside a callback of ours. Safe on NULL. */
mc_status_t mc_reactor_attach(struct event_base *base, const char *name, mc_reactor_t **out);
void mc_reactor_detach(mc_reactor_t *r);

/* Thread-safe. MC_OK, or MC_ERR_CANCELED if the reactor is stopping/stopped
 * (fn will not be called). Never runs fn inside the call. */
mc_status_t mc_reactor_post(mc_reactor_t *r, mc_reactor_msg_t *msg);

/* Convenience: allocate a message that calls fn(r, arg, st) and post it.
 * MC_ERR_NOMEM or MC_ERR_CANCELED (fn not called) on failure. Thread-safe. */
typedef void (*mc_reactor_call_fn_t)(mc_reactor_t *r, void *arg, mc_status_t st);
mc_status_t mc_reactor_call(mc_reactor_t *r, mc_reactor_call_fn_t fn, void *arg);

/* Accessors; thread-safe (the values never change). */
struct event_base *mc_reactor_base(mc_reactor_t *r);
unsigned mc_reactor_index(const mc_reactor_t *r); /* 0-based within its group; 0 if attached */
int mc_reactor_numa_node(const mc_reactor_t *r);  /* -1 if unknown / attached */
const char *mc_reactor_name(const mc_reactor_t *r);
int mc_reactor_is_attached(const mc_reactor_t *r);

/* The reactor whose thread (or attached loop callback) is running, or NULL. */
mc_reactor_t *mc_reactor_current(void);
static inline int mc_reactor_is_current(mc_reactor_t *r)
{
    return mc_reactor_current() == r;
}

/* Make r current on the calling thread until the matching leave; returns the
 * previous value to hand to mc_reactor_leave(). Nests. For wrapping libevent
 * callbacks that other modules register on mc_reactor_base(r):
 *
 *     static void on_readable(evutil_socket_t fd, short what, void *arg)
 *     {
 *         conn_t *c = arg;
 *         mc_reactor_t *saved = mc_reactor_enter(c->r);
 *         ...                      // may free c; must not use it below
 *         mc_reactor_leave(saved);
 *     }
 */
mc_reactor_t *mc_reactor_enter(mc_reactor_t *r);
void mc_reactor_leave(mc_reactor_t *saved);

/* Stop hooks: run on the reactor's thread when it stops (or is detached),
 * before pending messages are canceled, newest registration first. A hook is
 * unregistered before it runs, so it may free its owner. Embed
 * mc_reactor_hook_t in the owner and set fn. Register and unregister only from
 * the reactor's own thread (hooks may register further hooks; they run too;
 * a registration after the hooks have run, from a canceled message, is
 * ignored). on_stop_cancel is a no-op on a hook that is not registered (or
 * zeroed, or already run). */
typedef struct mc_reactor_hook {
    mc_list_t node;
    void (*fn)(mc_reactor_t *r, struct mc_reactor_hook *hook);
} mc_reactor_hook_t;

void mc_reactor_on_stop(mc_reactor_t *r, mc_reactor_hook_t *hook);
void mc_reactor_on_stop_cancel(mc_reactor_t *r, mc_reactor_hook_t *hook);

/* 1 once the reactor has begun stopping (step 1 above). Meant for the
 * reactor's thread (e.g. a long message that should give up early); the
 * value is an atomic read, so other threads may look, as a hint. */
int mc_reactor_stopping(const mc_reactor_t *r);

/*
 * Timers: embed an mc_timer_t; callbacks run on the reactor's thread (with
 * mc_reactor_current() == the timer's reactor, attached or not).
 * A one-shot timer fires once per start; a periodic timer every period until
 * stopped (a period of 0 fires once per loop iteration, after the I/O and
 * messages ready in that iteration, so it busy-polls without starving
 * them). Restarting an armed
 * timer re-arms it from now with the new period and kind. Reactor thread only.
 * The callback may stop, restart or fini its own timer and free its owner.
 * The event lives on the reactor's event_base: fini it before the base goes
 * away (see "Stop").
 */
typedef struct mc_timer mc_timer_t;
typedef void (*mc_timer_fn_t)(mc_timer_t *t, void *arg);

struct mc_timer {
    struct event *ev;
    mc_reactor_t *r;
    mc_timer_fn_t fn;
    void *arg;
    int periodic; /* kind (timer.c): one-shot, periodic, every loop iteration */
    int added;    /* the event may be pending (timer.c): start skips event_del if not */
};

/* MC_OK or MC_ERR_NOMEM (the timer is then left zeroed-equivalent). */
mc_status_t mc_timer_init(mc_timer_t *t, mc_reactor_t *r, mc_timer_fn_t fn, void *arg);
void mc_timer_start(mc_timer_t *t, uint64_t usec, int periodic);
void mc_timer_stop(mc_timer_t *t);
int mc_timer_armed(const mc_timer_t *t);
/* Stops and releases; safe on a zeroed or already-finalised timer. */
void mc_timer_fini(mc_timer_t *t);

/* Number of NUMA nodes that have CPUs this process may use (1 when libnuma
 * reports none or is unavailable). Any thread. */
unsigned mc_numa_node_count(void);

#endif /* MC_REACTOR_REACTOR_H */
