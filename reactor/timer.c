/* timer.c - one-shot and periodic timers on a reactor's event_base. See reactor.h. */
#include <assert.h>

#include <event2/event.h>

#include "reactor/reactor.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

/* t->periodic: */
enum {
    T_ONCE = 0, /* one-shot */
    T_PERSIST,  /* periodic, period > 0: EV_PERSIST re-arms it */
    T_EVERY,    /* periodic, period 0: re-armed by timer_cb before each run */
};

static const struct timeval zero_tv = {0, 0};

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    mc_timer_t *t = arg;
    (void)fd;
    (void)what;
    if (t->periodic == T_ONCE)
        t->added = 0; /* libevent removed it before calling us */
    /* libevent re-arms an EV_PERSIST timer only when its timeout is not
     * zero, so a period of 0 would fire once and never again: re-arm it here,
     * before the callback (which may stop, restart or fini it). A zero
     * timeout fires at the next loop iteration, after pending I/O. */
    if (t->periodic == T_EVERY && event_add(t->ev, &zero_tv) != 0)
        MC_ERROR(REACTOR, "%s: cannot re-arm a period-0 timer: event_add failed",
                 mc_reactor_name(t->r));
    mc_reactor_t *saved = mc_reactor_enter(t->r);
    t->fn(t, t->arg); /* may fini t or free its owner: t is not used below */
    mc_reactor_leave(saved);
}

mc_status_t mc_timer_init(mc_timer_t *t, mc_reactor_t *r, mc_timer_fn_t fn, void *arg)
{
    assert(t != NULL && r != NULL && fn != NULL);
    t->ev = NULL;
    /* mc_malloc + event_assign rather than event_new: fault injection reaches it */
    struct event *ev = mc_malloc(event_get_struct_event_size());
    if (ev == NULL)
        return MC_ERR_NOMEM;
    /* Cannot fail: a timer has no fd and the base is valid. */
    event_assign(ev, mc_reactor_base(r), -1, 0, timer_cb, t);
    t->ev = ev;
    t->r = r;
    t->fn = fn;
    t->arg = arg;
    t->periodic = T_ONCE;
    t->added = 0;
    return MC_OK;
}

void mc_timer_start(mc_timer_t *t, uint64_t usec, int periodic)
{
    assert(t->ev != NULL);
    if (t->added) /* (a busy-poll kick starts a stopped timer: no del needed) */
        event_del(t->ev);
    int kind = !periodic ? T_ONCE : usec > 0 ? T_PERSIST : T_EVERY;
    if (kind != t->periodic) {
        /* EV_PERSIST makes libevent re-arm from the scheduled time, so a
         * periodic timer does not drift by its callbacks' run time */
        event_assign(t->ev, mc_reactor_base(t->r), -1, kind == T_PERSIST ? EV_PERSIST : 0, timer_cb,
                     t);
        t->periodic = kind;
    }
    struct timeval tv = mc_us_to_timeval(usec);
    t->added = 1;
    if (event_add(t->ev, &tv) != 0) /* only when libevent cannot grow its timer heap */
        MC_ERROR(REACTOR, "%s: cannot arm a timer (%llu us): event_add failed",
                 mc_reactor_name(t->r), (unsigned long long)usec);
}

void mc_timer_stop(mc_timer_t *t)
{
    if (t->ev != NULL && t->added)
        event_del(t->ev);
    t->added = 0;
}

int mc_timer_armed(const mc_timer_t *t)
{
    return t->ev != NULL && event_pending(t->ev, EV_TIMEOUT, NULL) != 0;
}

void mc_timer_fini(mc_timer_t *t)
{
    if (t->ev == NULL)
        return;
    event_del(t->ev);
    mc_free(t->ev);
    t->ev = NULL;
}
