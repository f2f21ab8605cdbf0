/* Reactors: mailbox order and delivery, calls, timers, stop, hooks, NUMA count,
 * attach mode. Every wait is bounded (WAIT_MS); nothing sleeps longer than
 * needed. Callbacks on reactor threads only record; the main thread asserts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "reactor/reactor.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define WAIT_MS 20000 /* generous: sanitizers on 2 cores are slow */

static void nap_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* 1 once *v >= want, 0 at the deadline. */
static int wait_ge(atomic_int *v, int want)
{
    uint64_t end = mc_now_ms() + WAIT_MS;
    while (atomic_load(v) < want) {
        if (mc_now_ms() >= end)
            return 0;
        nap_us(100);
    }
    return 1;
}

/* A wait whose failure would leave a reactor writing into our stack. */
static void must_wait_ge(atomic_int *v, int want)
{
    if (!wait_ge(v, want)) {
        fprintf(stderr, "timed out waiting for a reactor\n");
        abort();
    }
}

static mc_reactor_group_t *start_group(unsigned count, const char *name)
{
    mc_reactor_group_opts_t o;
    mc_reactor_group_opts_init(&o);
    o.count = count;
    o.name = name;
    mc_reactor_group_t *g = NULL;
    assert_int_equal(mc_reactor_group_create(&o, &g), MC_OK);
    assert_non_null(g);
    return g;
}

/* ---- probes: messages that record how they ran ----------------------- */

typedef struct probe_log {
    atomic_int done;     /* probes run (any status) */
    atomic_int clock;    /* orders probes, hooks and timers against each other */
    int last_seq[8];     /* per producer, reactor thread only */
    atomic_int disorder; /* probes that ran out of per-producer order */
} probe_log_t;

typedef struct probe {
    mc_reactor_msg_t msg;
    probe_log_t *log;
    int producer, seq;
    atomic_int runs;
    mc_status_t st;
    pthread_t thread;
    int current_ok; /* mc_reactor_current() was the r passed in */
    int stopping;   /* mc_reactor_stopping(r) when it ran */
    int when;       /* log->clock when it ran */
    mc_status_t post_st;
} probe_t;

static void probe_log_init(probe_log_t *l)
{
    memset(l, 0, sizeof(*l));
}

static void probe_fn(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    probe_t *p = MC_CONTAINER_OF(msg, probe_t, msg);
    p->st = st;
    p->thread = pthread_self();
    p->current_ok = mc_reactor_current() == r;
    p->stopping = mc_reactor_stopping(r);
    p->when = atomic_fetch_add(&p->log->clock, 1);
    if (p->seq != p->log->last_seq[p->producer] + 1)
        atomic_fetch_add(&p->log->disorder, 1);
    p->log->last_seq[p->producer] = p->seq;
    atomic_fetch_add(&p->runs, 1);
    atomic_fetch_add(&p->log->done, 1); /* last: publishes the fields above */
}

static probe_t *probes_new(probe_log_t *log, int n, int producer)
{
    probe_t *p = mc_calloc((size_t)n, sizeof(*p));
    assert_non_null(p);
    for (int i = 0; i < n; i++) {
        p[i].msg.fn = probe_fn;
        p[i].log = log;
        p[i].producer = producer;
        p[i].seq = i + 1;
    }
    return p;
}

/* ---- run a function on a reactor and wait for it --------------------- */

typedef struct sync_call {
    mc_reactor_msg_t msg;
    void (*fn)(mc_reactor_t *r, void *arg);
    void *arg;
    mc_status_t st;
    atomic_int done;
} sync_call_t;

static void sync_call_fn(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    sync_call_t *c = MC_CONTAINER_OF(msg, sync_call_t, msg);
    c->st = st;
    if (st == MC_OK)
        c->fn(r, c->arg);
    atomic_store(&c->done, 1);
}

static mc_status_t run_sync(mc_reactor_t *r, void (*fn)(mc_reactor_t *r, void *arg), void *arg)
{
    sync_call_t c = {.msg.fn = sync_call_fn, .fn = fn, .arg = arg};
    mc_status_t st = mc_reactor_post(r, &c.msg);
    if (st != MC_OK)
        return st;
    must_wait_ge(&c.done, 1);
    return c.st;
}

/* ---- messages --------------------------------------------------------- */

static void messages_posted_from_one_thread_run_in_order_on_the_reactor_thread(void **state)
{
    (void)state;
    enum { N = 1000 };
    mc_reactor_group_t *g = start_group(1, "t");
    mc_reactor_t *r = mc_reactor_group_get(g, 0);
    probe_log_t log;
    probe_log_init(&log);
    probe_t *p = probes_new(&log, N, 0);

    assert_null(mc_reactor_current());
    for (int i = 0; i < N; i++)
        assert_int_equal(mc_reactor_post(r, &p[i].msg), MC_OK);
    assert_true(wait_ge(&log.done, N));

    assert_int_equal(atomic_load(&log.disorder), 0);
    assert_false(pthread_equal(p[0].thread, pthread_self()));
    for (int i = 0; i < N; i++) {
        assert_int_equal(p[i].runs, 1);
        assert_int_equal(p[i].st, MC_OK);
        assert_int_equal(p[i].when, i);
        assert_true(p[i].current_ok);
        assert_true(pthread_equal(p[i].thread, p[0].thread));
    }
    mc_reactor_group_destroy(g);
    mc_free(p);
}

typedef struct producer {
    pthread_t thread;
    mc_reactor_t *r;
    probe_t *p;
    int n;
} producer_t;

static void *producer_main(void *arg)
{
    producer_t *pr = arg;
    for (int i = 0; i < pr->n; i++)
        pr->p[i].post_st = mc_reactor_post(pr->r, &pr->p[i].msg);
    return NULL;
}

static void four_producers_deliver_every_message_once_in_per_producer_order(void **state)
{
    (void)state;
    enum { PRODUCERS = 4, N = 10000 };
    mc_reactor_group_t *g = start_group(1, "t");
    probe_log_t log;
    probe_log_init(&log);
    producer_t pr[PRODUCERS];
    for (int k = 0; k < PRODUCERS; k++) {
        pr[k] = (producer_t){.r = mc_reactor_group_get(g, 0), .n = N};
        pr[k].p = probes_new(&log, N, k);
    }
    for (int k = 0; k < PRODUCERS; k++)
        assert_int_equal(pthread_create(&pr[k].thread, NULL, producer_main, &pr[k]), 0);
    for (int k = 0; k < PRODUCERS; k++)
        pthread_join(pr[k].thread, NULL);
    assert_true(wait_ge(&log.done, PRODUCERS * N));

    assert_int_equal(atomic_load(&log.disorder), 0);
    for (int k = 0; k < PRODUCERS; k++) {
        for (int i = 0; i < N; i++) {
            assert_int_equal(pr[k].p[i].post_st, MC_OK);
            assert_int_equal(atomic_load(&pr[k].p[i].runs), 1);
            assert_int_equal(pr[k].p[i].st, MC_OK);
        }
    }
    nap_us(1000); /* nothing runs twice late */
    assert_int_equal(atomic_load(&log.done), PRODUCERS * N);
    mc_reactor_group_destroy(g);
    for (int k = 0; k < PRODUCERS; k++)
        mc_free(pr[k].p);
}

typedef struct call_rec {
    atomic_int runs;
    mc_status_t st;
    int current_ok;
    void *arg;
} call_rec_t;

static void call_fn(mc_reactor_t *r, void *arg, mc_status_t st)
{
    call_rec_t *c = arg;
    c->st = st;
    c->arg = arg;
    c->current_ok = mc_reactor_current() == r;
    atomic_fetch_add(&c->runs, 1);
}

static void call_runs_the_function_with_its_argument_on_the_reactor(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(1, "t");
    call_rec_t c = {0};
    assert_int_equal(mc_reactor_call(mc_reactor_group_get(g, 0), call_fn, &c), MC_OK);
    assert_true(wait_ge(&c.runs, 1));
    assert_int_equal(c.st, MC_OK);
    assert_ptr_equal(c.arg, &c);
    assert_true(c.current_ok);
    mc_reactor_group_destroy(g);
}

static void call_without_memory_returns_nomem_and_never_calls_the_function(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(1, "t");
    mc_reactor_t *r = mc_reactor_group_get(g, 0);
    call_rec_t failed = {0}, later = {0};
    mc_mem_fail_nth(1);
    assert_int_equal(mc_reactor_call(r, call_fn, &failed), MC_ERR_NOMEM);
    mc_mem_fail_nth(0);
    /* a later call has run, so the failed one would have too */
    assert_int_equal(mc_reactor_call(r, call_fn, &later), MC_OK);
    assert_true(wait_ge(&later.runs, 1));
    assert_int_equal(atomic_load(&failed.runs), 0);
    mc_reactor_group_destroy(g);
}

/* A flood of messages is run in batches, so timers ready meanwhile still fire. */
typedef struct flood {
    probe_log_t log;
    probe_t *p;
    int n;
    mc_timer_t t;
    atomic_int fired_at; /* log.done when the timer fired, + 1 */
} flood_t;

static void flood_timer_fn(mc_timer_t *t, void *arg)
{
    flood_t *f = arg;
    (void)t;
    atomic_store(&f->fired_at, atomic_load(&f->log.done) + 1);
}

static void flood_start(mc_reactor_t *r, void *arg)
{
    flood_t *f = arg;
    assert_int_equal(mc_timer_init(&f->t, r, flood_timer_fn, f), MC_OK);
    mc_timer_start(&f->t, 0, 0);
    for (int i = 0; i < f->n; i++)
        mc_reactor_post(r, &f->p[i].msg);
}

static void flood_fini(mc_reactor_t *r, void *arg)
{
    flood_t *f = arg;
    (void)r;
    mc_timer_fini(&f->t);
}

static void a_flood_of_messages_does_not_starve_timers(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(1, "t");
    mc_reactor_t *r = mc_reactor_group_get(g, 0);
    flood_t f = {.n = 20000};
    probe_log_init(&f.log);
    f.p = probes_new(&f.log, f.n, 0);
    assert_int_equal(run_sync(r, flood_start, &f), MC_OK);
    assert_true(wait_ge(&f.log.done, f.n));
    assert_true(wait_ge(&f.fired_at, 1));
    assert_true(atomic_load(&f.fired_at) - 1 < f.n / 2);
    assert_int_equal(atomic_load(&f.log.disorder), 0);
    assert_int_equal(run_sync(r, flood_fini, &f), MC_OK);
    mc_reactor_group_destroy(g);
    mc_free(f.p);
}

/* ---- timers ----------------------------------------------------------- */

typedef struct tctx {
    mc_timer_t t;
    atomic_int fired;
    int current_ok;
    int fini_in_callback_after; /* fini itself on this firing (0 = never) */
    uint64_t usec;
    int periodic;
    int armed;
    mc_status_t init_st;
} tctx_t;

static void tctx_fn(mc_timer_t *t, void *arg)
{
    tctx_t *c = arg;
    c->current_ok = mc_reactor_current() == c->t.r && t == &c->t;
    int n = atomic_load(&c->fired) + 1;
    if (c->fini_in_callback_after != 0 && n == c->fini_in_callback_after)
        mc_timer_fini(t);
    atomic_store(&c->fired, n);
}

static void tctx_init(mc_reactor_t *r, void *arg)
{
    tctx_t *c = arg;
    c->init_st = mc_timer_init(&c->t, r, tctx_fn, c);
}

static void tctx_start(mc_reactor_t *r, void *arg)
{
    tctx_t *c = arg;
    (void)r;
    mc_timer_start(&c->t, c->usec, c->periodic);
}

static void tctx_stop(mc_reactor_t *r, void *arg)
{
    tctx_t *c = arg;
    (void)r;
    mc_timer_stop(&c->t);
}

static void tctx_armed(mc_reactor_t *r, void *arg)
{
    tctx_t *c = arg;
    (void)r;
    c->armed = mc_timer_armed(&c->t);
}

static void tctx_fini(mc_reactor_t *r, void *arg)
{
    tctx_t *c = arg;
    (void)r;
    mc_timer_fini(&c->t);
}

static int armed_on(mc_reactor_t *r, tctx_t *c)
{
    assert_int_equal(run_sync(r, tctx_armed, c), MC_OK);
    return c->armed;
}

static void one_shot_timer_fires_once(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(1, "t");
    mc_reactor_t *r = mc_reactor_group_get(g, 0);
    tctx_t c = {.usec = 1000, .periodic = 0};
    assert_int_equal(run_sync(r, tctx_init, &c), MC_OK);
    assert_int_equal(c.init_st, MC_OK);
    assert_false(armed_on(r, &c));
    assert_int_equal(run_sync(r, tctx_start, &c), MC_OK);
    assert_true(wait_ge(&c.fired, 1));
    nap_us(20000); /* twenty periods: a second firing would show */
    assert_int_equal(atomic_load(&c.fired), 1);
    assert_true(c.current_ok);
    assert_false(armed_on(r, &c));
    assert_int_equal(run_sync(r, tctx_fini, &c), MC_OK);
    mc_reactor_group_destroy(g);
}

static void periodic_timer_fires_repeatedly_until_stopped(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(1, "t");
    mc_reactor_t *r = mc_reactor_group_get(g, 0);
    tctx_t c = {.usec = 1000, .periodic = 1};
    assert_int_equal(run_sync(r, tctx_init, &c), MC_OK);
    assert_int_equal(run_sync(r, tctx_start, &c), MC_OK);
    assert_true(wait_ge(&c.fired, 5));
    assert_true(armed_on(r, &c));
    assert_int_equal(run_sync(r, tctx_stop, &c), MC_OK);
    int n = atomic_load(&c.fired);
    nap_us(20000);
    assert_int_equal(atomic_load(&c.fired), n);
    assert_false(armed_on(r, &c));
    assert_true(c.current_ok);
    assert_int_equal(run_sync(r, tctx_fini, &c), MC_OK);
    mc_reactor_group_destroy(g);
}

static void restarting_a_timer_rearms_it(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(1, "t");
    mc_reactor_t *r = mc_reactor_group_get(g, 0);
    tctx_t c = {.usec = 3600u * 1000000u, .periodic = 0};
    assert_int_equal(run_sync(r, tctx_init, &c), MC_OK);
    assert_int_equal(run_sync(r, tctx_start, &c), MC_OK);
    assert_true(armed_on(r, &c));
    /* an hour away, re-armed to 1 ms: only the re-arm can fire in time */
    c.usec = 1000;
    assert_int_equal(run_sync(r, tctx_start, &c), MC_OK);
    assert_true(wait_ge(&c.fired, 1));
    /* after it fired, a restart fires it again; periodic -> one-shot too */
    c.periodic = 1;
    assert_int_equal(run_sync(r, tctx_start, &c), MC_OK);
    assert_true(wait_ge(&c.fired, 3));
    c.periodic = 0;
    assert_int_equal(run_sync(r, tctx_start, &c), MC_OK);
    int n = atomic_load(&c.fired);
    assert_true(wait_ge(&c.fired, n + 1));
    nap_us(20000);
    assert_true(atomic_load(&c.fired) <= n + 1);
    assert_false(armed_on(r, &c));
    assert_int_equal(run_sync(r, tctx_fini, &c), MC_OK);
    mc_reactor_group_destroy(g);
}

static void a_periodic_timer_may_fini_itself_in_its_callback(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(1, "t");
    mc_reactor_t *r = mc_reactor_group_get(g, 0);
    tctx_t c = {.usec = 500, .periodic = 1, .fini_in_callback_after = 3};
    assert_int_equal(run_sync(r, tctx_init, &c), MC_OK);
    assert_int_equal(run_sync(r, tctx_start, &c), MC_OK);
    assert_true(wait_ge(&c.fired, 3));
    nap_us(10000);
    assert_int_equal(atomic_load(&c.fired), 3);
    assert_null(c.t.ev);
    mc_reactor_group_destroy(g);
}

/* reactor.h: a period of 0 fires on every loop iteration (with libevent's
 * EV_PERSIST it fired once and never again). */
static void a_zero_period_timer_fires_on_every_loop_iteration_until_stopped(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(1, "t");
    mc_reactor_t *r = mc_reactor_group_get(g, 0);
    tctx_t c = {.usec = 0, .periodic = 1};
    assert_int_equal(run_sync(r, tctx_init, &c), MC_OK);
    assert_int_equal(run_sync(r, tctx_start, &c), MC_OK);
    assert_true(wait_ge(&c.fired, 1000));
    /* messages still get through while it spins */
    for (int i = 0; i < 20; i++)
        assert_true(armed_on(r, &c));
    int before = atomic_load(&c.fired);
    assert_true(wait_ge(&c.fired, before + 1000));
    assert_int_equal(run_sync(r, tctx_stop, &c), MC_OK);
    int n = atomic_load(&c.fired);
    nap_us(20000);
    assert_int_equal(atomic_load(&c.fired), n);
    assert_false(armed_on(r, &c));
    /* restarted as a 1 ms periodic timer it keeps its period (EV_PERSIST) */
    c.usec = 1000;
    assert_int_equal(run_sync(r, tctx_start, &c), MC_OK);
    assert_true(wait_ge(&c.fired, n + 3));
    assert_int_equal(run_sync(r, tctx_stop, &c), MC_OK);
    /* and back to period 0 */
    c.usec = 0;
    n = atomic_load(&c.fired);
    assert_int_equal(run_sync(r, tctx_start, &c), MC_OK);
    assert_true(wait_ge(&c.fired, n + 1000));
    assert_int_equal(run_sync(r, tctx_fini, &c), MC_OK);
    assert_true(c.current_ok); /* read once the timer is gone (no race) */
    /* one that finis itself in its callback stops there */
    tctx_t d = {.usec = 0, .periodic = 1, .fini_in_callback_after = 50};
    assert_int_equal(run_sync(r, tctx_init, &d), MC_OK);
    assert_int_equal(run_sync(r, tctx_start, &d), MC_OK);
    assert_true(wait_ge(&d.fired, 50));
    nap_us(10000);
    assert_int_equal(atomic_load(&d.fired), 50);
    assert_null(d.t.ev);
    mc_reactor_group_destroy(g);
}

static void timer_fini_is_safe_on_a_zeroed_timer_and_twice(void **state)
{
    (void)state;
    mc_timer_t t;
    memset(&t, 0, sizeof(t));
    assert_false(mc_timer_armed(&t));
    mc_timer_stop(&t);
    mc_timer_fini(&t);
    mc_timer_fini(&t);

    mc_reactor_group_t *g = start_group(1, "t");
    mc_reactor_t *r = mc_reactor_group_get(g, 0);
    tctx_t c = {0};
    assert_int_equal(run_sync(r, tctx_init, &c), MC_OK);
    assert_int_equal(run_sync(r, tctx_fini, &c), MC_OK);
    assert_int_equal(run_sync(r, tctx_fini, &c), MC_OK);
    assert_null(c.t.ev);
    mc_reactor_group_destroy(g);
}

static void timer_init_without_memory_returns_nomem(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(1, "t");
    mc_reactor_t *r = mc_reactor_group_get(g, 0);
    tctx_t c = {0};
    mc_mem_fail_nth(1);
    assert_int_equal(run_sync(r, tctx_init, &c), MC_OK);
    mc_mem_fail_nth(0);
    assert_int_equal(c.init_st, MC_ERR_NOMEM);
    assert_null(c.t.ev);
    mc_timer_fini(&c.t);
    mc_reactor_group_destroy(g);
}

/* ---- stop ------------------------------------------------------------- */

typedef struct hook_rec {
    mc_reactor_hook_t hook;
    probe_log_t *log;
    atomic_int runs;
    int when;
    pthread_t thread;
    int current_ok;
    int stopping;
    /* posts tried from inside the hook */
    mc_reactor_t *post_to[2];
    probe_t post_probe[2];
    mc_status_t post_st[2];
} hook_rec_t;

static void hook_fn(mc_reactor_t *r, mc_reactor_hook_t *hook)
{
    hook_rec_t *h = MC_CONTAINER_OF(hook, hook_rec_t, hook);
    h->when = atomic_fetch_add(&h->log->clock, 1);
    h->thread = pthread_self();
    h->current_ok = mc_reactor_current() == r;
    h->stopping = mc_reactor_stopping(r);
    for (int i = 0; i < 2; i++)
        if (h->post_to[i] != NULL)
            h->post_st[i] = mc_reactor_post(h->post_to[i], &h->post_probe[i].msg);
    atomic_fetch_add(&h->runs, 1);
}

static void hook_rec_init(hook_rec_t *h, probe_log_t *log)
{
    memset(h, 0, sizeof(*h));
    h->hook.fn = hook_fn;
    h->log = log;
    for (int i = 0; i < 2; i++) {
        h->post_probe[i].msg.fn = probe_fn;
        h->post_probe[i].log = log;
        h->post_probe[i].producer = 7;
        h->post_st[i] = MC_OK;
    }
}

static void register_hook(mc_reactor_t *r, void *arg)
{
    mc_reactor_on_stop(r, arg);
}

static void unregister_hook(mc_reactor_t *r, void *arg)
{
    mc_reactor_on_stop_cancel(r, arg);
}

/* Holds the reactor thread until the stop has begun. */
typedef struct blocker {
    mc_reactor_msg_t msg;
    atomic_int entered;
    int saw_stopping;
    pthread_t thread;
} blocker_t;

static void blocker_fn(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    blocker_t *b = MC_CONTAINER_OF(msg, blocker_t, msg);
    (void)st;
    b->thread = pthread_self();
    atomic_store(&b->entered, 1);
    uint64_t end = mc_now_ms() + WAIT_MS;
    while (!mc_reactor_stopping(r) && mc_now_ms() < end)
        nap_us(100);
    b->saw_stopping = mc_reactor_stopping(r);
}

static void *destroy_main(void *arg)
{
    mc_reactor_group_destroy(arg);
    return NULL;
}

static void stop_cancels_queued_messages_once_on_the_reactor_thread_after_hooks(void **state)
{
    (void)state;
    enum { N = 100 };
    mc_reactor_group_t *g = start_group(1, "t");
    mc_reactor_t *r = mc_reactor_group_get(g, 0);
    probe_log_t log;
    probe_log_init(&log);
    hook_rec_t h;
    hook_rec_init(&h, &log);
    assert_int_equal(run_sync(r, register_hook, &h.hook), MC_OK);

    blocker_t b = {.msg.fn = blocker_fn};
    assert_int_equal(mc_reactor_post(r, &b.msg), MC_OK);
    assert_true(wait_ge(&b.entered, 1));
    probe_t *p = probes_new(&log, N, 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(mc_reactor_post(r, &p[i].msg), MC_OK);

    /* destroy on another thread; the blocker lets go once the stop has begun */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, destroy_main, g), 0);
    pthread_join(t, NULL);

    assert_true(b.saw_stopping);
    assert_int_equal(atomic_load(&h.runs), 1);
    assert_true(pthread_equal(h.thread, b.thread));
    assert_int_equal(atomic_load(&log.done), N);
    assert_int_equal(atomic_load(&log.disorder), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(atomic_load(&p[i].runs), 1);
        assert_int_equal(p[i].st, MC_ERR_CANCELED);
        assert_true(p[i].current_ok);
        assert_true(pthread_equal(p[i].thread, b.thread));
        assert_true(p[i].when > h.when); /* hooks first */
    }
    mc_free(p);
}

static void post_after_stop_returns_canceled(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(2, "t");
    mc_reactor_t *r0 = mc_reactor_group_get(g, 0);
    mc_reactor_t *r1 = mc_reactor_group_get(g, 1);
    probe_log_t log;
    probe_log_init(&log);
    /* a stop hook on r0 posts to itself and to its sibling: both refused */
    hook_rec_t h;
    hook_rec_init(&h, &log);
    h.post_to[0] = r0;
    h.post_to[1] = r1;
    assert_int_equal(run_sync(r0, register_hook, &h.hook), MC_OK);

    mc_reactor_group_stop(g);
    mc_reactor_group_stop(g); /* idempotent */
    assert_int_equal(atomic_load(&h.runs), 1);
    assert_int_equal(h.post_st[0], MC_ERR_CANCELED);
    assert_int_equal(h.post_st[1], MC_ERR_CANCELED);

    probe_t *p = probes_new(&log, 1, 0);
    assert_int_equal(mc_reactor_post(r0, &p[0].msg), MC_ERR_CANCELED);
    assert_int_equal(mc_reactor_post(r1, &p[0].msg), MC_ERR_CANCELED);
    call_rec_t c = {0};
    assert_int_equal(mc_reactor_call(r1, call_fn, &c), MC_ERR_CANCELED);
    assert_int_equal(mc_reactor_stopping(r0), 1);
    mc_reactor_group_destroy(g);
    assert_int_equal(atomic_load(&log.done), 0);
    assert_int_equal(atomic_load(&c.runs), 0);
    mc_free(p);
}

static void posts_racing_with_stop_are_refused_or_run_exactly_once(void **state)
{
    (void)state;
    enum { PRODUCERS = 2, N = 20000 };
    mc_reactor_group_t *g = start_group(1, "t");
    probe_log_t log;
    probe_log_init(&log);
    producer_t pr[PRODUCERS];
    for (int k = 0; k < PRODUCERS; k++) {
        pr[k] = (producer_t){.r = mc_reactor_group_get(g, 0), .n = N};
        pr[k].p = probes_new(&log, N, k);
    }
    for (int k = 0; k < PRODUCERS; k++)
        assert_int_equal(pthread_create(&pr[k].thread, NULL, producer_main, &pr[k]), 0);
    /* stop in the middle of the stream (best effort: the scheduler decides) */
    wait_ge(&log.done, N / 8);
    mc_reactor_group_stop(g);
    for (int k = 0; k < PRODUCERS; k++)
        pthread_join(pr[k].thread, NULL);

    int ok = 0, canceled = 0;
    for (int k = 0; k < PRODUCERS; k++) {
        for (int i = 0; i < N; i++) {
            probe_t *q = &pr[k].p[i];
            if (q->post_st == MC_OK) {
                assert_int_equal(atomic_load(&q->runs), 1);
                ok++;
                canceled += q->st == MC_ERR_CANCELED;
            } else {
                assert_int_equal(q->post_st, MC_ERR_CANCELED);
                assert_int_equal(atomic_load(&q->runs), 0);
            }
        }
    }
    assert_int_equal(atomic_load(&log.done), ok);
    assert_int_equal(atomic_load(&log.disorder), 0);
    print_message("%d accepted (%d of them canceled), %d refused\n", ok, canceled,
                  PRODUCERS * N - ok);
    mc_reactor_group_destroy(g);
    for (int k = 0; k < PRODUCERS; k++)
        mc_free(pr[k].p);
}

static void stop_hooks_run_on_their_own_reactor_thread_newest_first(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(2, "t");
    probe_log_t log;
    probe_log_init(&log);
    hook_rec_t h[2][3];
    pthread_t threads[2];
    for (unsigned i = 0; i < 2; i++) {
        mc_reactor_t *r = mc_reactor_group_get(g, i);
        for (int k = 0; k < 3; k++) {
            hook_rec_init(&h[i][k], &log);
            assert_int_equal(run_sync(r, register_hook, &h[i][k].hook), MC_OK);
        }
        assert_int_equal(run_sync(r, unregister_hook, &h[i][1].hook), MC_OK);
    }
    /* the thread of each reactor, learnt from a probe */
    for (unsigned i = 0; i < 2; i++) {
        probe_t *p = probes_new(&log, 1, (int)i);
        assert_int_equal(mc_reactor_post(mc_reactor_group_get(g, i), &p[0].msg), MC_OK);
        assert_true(wait_ge(&log.done, (int)i + 1)); /* done, not runs: p is freed below */
        threads[i] = p[0].thread;
        mc_free(p);
    }
    assert_false(pthread_equal(threads[0], threads[1]));

    mc_reactor_group_destroy(g);
    for (unsigned i = 0; i < 2; i++) {
        assert_int_equal(atomic_load(&h[i][1].runs), 0);
        for (int k = 0; k < 3; k += 2) {
            assert_int_equal(atomic_load(&h[i][k].runs), 1);
            assert_true(pthread_equal(h[i][k].thread, threads[i]));
            assert_true(h[i][k].current_ok);
            assert_true(h[i][k].stopping);
        }
        assert_true(h[i][2].when < h[i][0].when);
    }
}

static void hook_cancel_is_a_no_op_on_a_zeroed_hook(void **state)
{
    (void)state;
    mc_reactor_hook_t hook;
    memset(&hook, 0, sizeof(hook));
    mc_reactor_on_stop_cancel(NULL, &hook);
}

/* ---- groups ----------------------------------------------------------- */

static void auto_count_is_one_reactor_per_numa_node(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(0, "auto");
    unsigned nodes = mc_numa_node_count();
    assert_true(nodes >= 1);
    assert_int_equal(mc_reactor_group_count(g), nodes);
    for (unsigned i = 0; i < nodes; i++) {
        int node = mc_reactor_numa_node(mc_reactor_group_get(g, i));
        assert_true(node >= -1);
    }
    mc_reactor_group_destroy(g);
}

typedef struct name_rec {
    char thread_name[16];
    unsigned index;
} name_rec_t;

static void record_name(mc_reactor_t *r, void *arg)
{
    name_rec_t *n = arg;
    snprintf(n->thread_name, sizeof(n->thread_name), "%s", mc_log_thread_name());
    n->index = mc_reactor_index(r);
}

static void explicit_count_starts_that_many_named_reactors(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(3, "store");
    assert_int_equal(mc_reactor_group_count(g), 3);
    assert_null(mc_reactor_group_get(g, 3));
    for (unsigned i = 0; i < 3; i++) {
        mc_reactor_t *r = mc_reactor_group_get(g, i);
        char want[16];
        snprintf(want, sizeof(want), "store-r%u", i);
        assert_string_equal(mc_reactor_name(r), want);
        assert_int_equal(mc_reactor_index(r), i);
        assert_false(mc_reactor_is_attached(r));
        assert_non_null(mc_reactor_base(r));
        name_rec_t n = {{0}, 99};
        assert_int_equal(run_sync(r, record_name, &n), MC_OK);
        assert_string_equal(n.thread_name, want);
        assert_int_equal(n.index, i);
    }
    mc_reactor_group_destroy(g);
    mc_reactor_group_destroy(NULL);
}

static void create_frees_everything_when_any_allocation_fails(void **state)
{
    (void)state;
    mc_reactor_group_opts_t o;
    mc_reactor_group_opts_init(&o);
    o.count = 2;
    int failures = 0;
    for (long n = 1; n < 100; n++) {
        mc_reactor_group_t *g = NULL;
        mc_mem_fail_nth(n);
        mc_status_t st = mc_reactor_group_create(&o, &g);
        mc_mem_fail_nth(0);
        if (st == MC_OK) {
            mc_reactor_group_destroy(g);
            break;
        }
        assert_int_equal(st, MC_ERR_NOMEM);
        assert_null(g);
        failures++;
    }
    assert_true(failures > 0);
}

static void create_rejects_bad_options(void **state)
{
    (void)state;
    mc_reactor_group_t *g = NULL;
    assert_int_equal(mc_reactor_group_create(NULL, &g), MC_ERR_INVALID_PARAMS);
    mc_reactor_group_opts_t o;
    mc_reactor_group_opts_init(&o);
    assert_int_equal(o.count, 0);
    assert_int_equal(o.pin, 1);
    o.name = "a-name-that-is-much-longer-than-thirty-two-bytes";
    assert_int_equal(mc_reactor_group_create(&o, &g), MC_ERR_INVALID_PARAMS);
    assert_null(g);
}

static void enter_and_leave_nest_and_restore_the_current_reactor(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(2, "t");
    mc_reactor_t *r0 = mc_reactor_group_get(g, 0), *r1 = mc_reactor_group_get(g, 1);
    assert_null(mc_reactor_current());
    mc_reactor_t *s0 = mc_reactor_enter(r0);
    assert_true(mc_reactor_is_current(r0));
    mc_reactor_t *s1 = mc_reactor_enter(r1);
    assert_ptr_equal(mc_reactor_current(), r1);
    mc_reactor_leave(s1);
    assert_ptr_equal(mc_reactor_current(), r0);
    mc_reactor_leave(s0);
    assert_null(mc_reactor_current());
    mc_reactor_group_destroy(g);
}

typedef struct mask_rec {
    int term_blocked, pipe_blocked, segv_blocked;
} mask_rec_t;

static void record_mask(mc_reactor_t *r, void *arg)
{
    mask_rec_t *m = arg;
    sigset_t cur;
    (void)r;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    m->term_blocked = sigismember(&cur, SIGTERM);
    m->pipe_blocked = sigismember(&cur, SIGPIPE);
    m->segv_blocked = sigismember(&cur, SIGSEGV);
}

static void reactor_threads_leave_asynchronous_signals_to_the_host(void **state)
{
    (void)state;
    mc_reactor_group_t *g = start_group(1, "t");
    mask_rec_t m = {-1, -1, -1};
    assert_int_equal(run_sync(mc_reactor_group_get(g, 0), record_mask, &m), MC_OK);
    assert_int_equal(m.term_blocked, 1);
    assert_int_equal(m.pipe_blocked, 1);
    assert_int_equal(m.segv_blocked, 0);
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    assert_int_equal(sigismember(&cur, SIGTERM), 0); /* the caller's mask is restored */
    mc_reactor_group_destroy(g);
}

/* ---- attach mode ------------------------------------------------------ */

static void host_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Run the host's loop until *v >= want; a 5 ms tick bounds each pass. */
static int host_run_until(struct event_base *base, atomic_int *v, int want)
{
    struct event *tick = event_new(base, -1, EV_PERSIST, host_tick, NULL);
    struct timeval tv = {0, 5000};
    event_add(tick, &tv);
    uint64_t end = mc_now_ms() + WAIT_MS;
    while (atomic_load(v) < want && mc_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(tick);
    return atomic_load(v) >= want;
}

static void attached_reactor_runs_messages_on_the_host_thread(void **state)
{
    (void)state;
    enum { N = 2000 };
    struct event_base *base = event_base_new();
    assert_non_null(base);
    mc_reactor_t *r = NULL;
    assert_int_equal(mc_reactor_attach(base, "host", &r), MC_OK);
    assert_true(mc_reactor_is_attached(r));
    assert_ptr_equal(mc_reactor_base(r), base);
    assert_string_equal(mc_reactor_name(r), "host");
    assert_int_equal(mc_reactor_index(r), 0);
    assert_int_equal(mc_reactor_numa_node(r), -1);

    probe_log_t log;
    probe_log_init(&log);
    producer_t pr = {.r = r, .n = N};
    pr.p = probes_new(&log, N, 0);
    assert_int_equal(pthread_create(&pr.thread, NULL, producer_main, &pr), 0);
    assert_true(host_run_until(base, &log.done, N));
    pthread_join(pr.thread, NULL);

    assert_null(mc_reactor_current()); /* only while our callbacks run */
    assert_int_equal(atomic_load(&log.disorder), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(pr.p[i].post_st, MC_OK);
        assert_int_equal(atomic_load(&pr.p[i].runs), 1);
        assert_int_equal(pr.p[i].st, MC_OK);
        assert_true(pr.p[i].current_ok);
        assert_true(pthread_equal(pr.p[i].thread, pthread_self()));
    }
    mc_reactor_detach(r);
    event_base_free(base);
    mc_free(pr.p);
}

static void timers_work_on_an_attached_reactor(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    mc_reactor_t *r = NULL;
    assert_int_equal(mc_reactor_attach(base, NULL, &r), MC_OK);
    assert_string_equal(mc_reactor_name(r), "attached");
    tctx_t one = {0}, per = {0};
    tctx_init(r, &one);
    tctx_init(r, &per);
    assert_int_equal(one.init_st, MC_OK);
    assert_int_equal(per.init_st, MC_OK);
    mc_timer_start(&one.t, 1000, 0);
    mc_timer_start(&per.t, 1000, 1);
    assert_true(mc_timer_armed(&one.t));
    assert_true(host_run_until(base, &per.fired, 4));
    assert_int_equal(atomic_load(&one.fired), 1);
    assert_true(one.current_ok);
    assert_true(per.current_ok);
    assert_false(mc_timer_armed(&one.t));
    assert_true(mc_timer_armed(&per.t));
    assert_null(mc_reactor_current());
    mc_timer_fini(&one.t);
    mc_timer_fini(&per.t);
    mc_reactor_detach(r);
    event_base_free(base);
}

static void detach_runs_hooks_then_cancels_pending_messages_on_the_calling_thread(void **state)
{
    (void)state;
    enum { N = 10 };
    struct event_base *base = event_base_new();
    mc_reactor_t *r = NULL;
    assert_int_equal(mc_reactor_attach(base, "host", &r), MC_OK);
    probe_log_t log;
    probe_log_init(&log);
    hook_rec_t h;
    hook_rec_init(&h, &log);
    h.post_to[0] = r; /* refused: stopping */
    mc_reactor_on_stop(r, &h.hook);
    probe_t *p = probes_new(&log, N, 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(mc_reactor_post(r, &p[i].msg), MC_OK);

    mc_reactor_detach(r);
    assert_null(mc_reactor_current());
    assert_int_equal(atomic_load(&h.runs), 1);
    assert_true(h.current_ok);
    assert_true(h.stopping);
    assert_int_equal(h.post_st[0], MC_ERR_CANCELED);
    assert_int_equal(atomic_load(&log.done), N);
    assert_int_equal(atomic_load(&log.disorder), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(atomic_load(&p[i].runs), 1);
        assert_int_equal(p[i].st, MC_ERR_CANCELED);
        assert_true(p[i].current_ok);
        assert_true(pthread_equal(p[i].thread, pthread_self()));
        assert_true(p[i].when > h.when);
    }
    /* the host's base no longer has our events: an empty loop returns at once */
    assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 1);
    event_base_free(base);
    mc_free(p);
    mc_reactor_detach(NULL);
}

/* A hook that registers another hook, and a canceled message that registers one
 * too late. */
typedef struct late {
    mc_reactor_msg_t msg;
    hook_rec_t first, second, too_late;
} late_t;

static void first_hook_fn(mc_reactor_t *r, mc_reactor_hook_t *hook)
{
    late_t *l = MC_CONTAINER_OF(hook, late_t, first.hook);
    hook_fn(r, hook);
    mc_reactor_on_stop(r, &l->second.hook);
}

static void late_msg_fn(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    late_t *l = MC_CONTAINER_OF(msg, late_t, msg);
    (void)st;
    mc_reactor_on_stop(r, &l->too_late.hook);
    mc_reactor_on_stop_cancel(r, &l->too_late.hook);
    mc_reactor_on_stop(r, &l->too_late.hook);
}

static void hooks_added_by_hooks_run_and_hooks_added_after_them_are_ignored(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    mc_reactor_t *r = NULL;
    assert_int_equal(mc_reactor_attach(base, "host", &r), MC_OK);
    probe_log_t log;
    probe_log_init(&log);
    late_t l = {.msg.fn = late_msg_fn};
    hook_rec_init(&l.first, &log);
    hook_rec_init(&l.second, &log);
    hook_rec_init(&l.too_late, &log);
    l.first.hook.fn = first_hook_fn;
    mc_reactor_on_stop(r, &l.first.hook);
    assert_int_equal(mc_reactor_post(r, &l.msg), MC_OK);
    mc_reactor_detach(r);
    assert_int_equal(atomic_load(&l.first.runs), 1);
    assert_int_equal(atomic_load(&l.second.runs), 1);
    assert_int_equal(atomic_load(&l.too_late.runs), 0);
    event_base_free(base);
}

static void attach_frees_everything_when_an_allocation_fails(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    mc_reactor_t *r = NULL;
    assert_int_equal(mc_reactor_attach(NULL, "x", &r), MC_ERR_INVALID_PARAMS);
    int failures = 0;
    for (long n = 1; n < 20; n++) {
        mc_mem_fail_nth(n);
        mc_status_t st = mc_reactor_attach(base, "x", &r);
        mc_mem_fail_nth(0);
        if (st == MC_OK) {
            mc_reactor_detach(r);
            break;
        }
        assert_int_equal(st, MC_ERR_NOMEM);
        failures++;
    }
    assert_true(failures > 0);
    assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 1);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(messages_posted_from_one_thread_run_in_order_on_the_reactor_thread),
        cmocka_unit_test(four_producers_deliver_every_message_once_in_per_producer_order),
        cmocka_unit_test(call_runs_the_function_with_its_argument_on_the_reactor),
        cmocka_unit_test(call_without_memory_returns_nomem_and_never_calls_the_function),
        cmocka_unit_test(a_flood_of_messages_does_not_starve_timers),
        cmocka_unit_test(one_shot_timer_fires_once),
        cmocka_unit_test(periodic_timer_fires_repeatedly_until_stopped),
        cmocka_unit_test(restarting_a_timer_rearms_it),
        cmocka_unit_test(a_periodic_timer_may_fini_itself_in_its_callback),
        cmocka_unit_test(a_zero_period_timer_fires_on_every_loop_iteration_until_stopped),
        cmocka_unit_test(timer_fini_is_safe_on_a_zeroed_timer_and_twice),
        cmocka_unit_test(timer_init_without_memory_returns_nomem),
        cmocka_unit_test(stop_cancels_queued_messages_once_on_the_reactor_thread_after_hooks),
        cmocka_unit_test(post_after_stop_returns_canceled),
        cmocka_unit_test(posts_racing_with_stop_are_refused_or_run_exactly_once),
        cmocka_unit_test(stop_hooks_run_on_their_own_reactor_thread_newest_first),
        cmocka_unit_test(hook_cancel_is_a_no_op_on_a_zeroed_hook),
        cmocka_unit_test(auto_count_is_one_reactor_per_numa_node),
        cmocka_unit_test(explicit_count_starts_that_many_named_reactors),
        cmocka_unit_test(create_frees_everything_when_any_allocation_fails),
        cmocka_unit_test(create_rejects_bad_options),
        cmocka_unit_test(enter_and_leave_nest_and_restore_the_current_reactor),
        cmocka_unit_test(reactor_threads_leave_asynchronous_signals_to_the_host),
        cmocka_unit_test(attached_reactor_runs_messages_on_the_host_thread),
        cmocka_unit_test(timers_work_on_an_attached_reactor),
        cmocka_unit_test(detach_runs_hooks_then_cancels_pending_messages_on_the_calling_thread),
        cmocka_unit_test(hooks_added_by_hooks_run_and_hooks_added_after_them_are_ignored),
        cmocka_unit_test(attach_frees_everything_when_an_allocation_fails),
    };
    mc_log_set_all(MC_LOG_WARN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
