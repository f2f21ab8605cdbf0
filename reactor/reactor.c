/* reactor.c - threaded and attached reactors, the mailbox, stop hooks. See reactor.h. */
#include "reactor/reactor.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>

#include "reactor/topology.h"
#include "util/log.h"
#include "util/mem.h"

/*
 * Mailbox.
 *
 * Producers push onto a Treiber stack (CAS loop; newest first). The consumer
 * never pops single nodes: it takes the whole stack with one exchange, which
 * rules out ABA, then reverses it onto its private FIFO "ready" list, so the
 * messages of each producer keep their order. (A plain exchange-push would
 * leave a window where the new head's next is not yet written while the
 * consumer may already have taken it; the CAS publishes a complete node.)
 *
 * Wake-ups: a producer writes the eventfd only when it pushed onto an empty
 * stack. No wake-up is lost because the consumer reads (clears) the eventfd
 * BEFORE it takes the stack:
 *  - a push that lands before the take is taken by it;
 *  - a push that lands after the take finds the stack empty (the take left
 *    NULL), so its producer writes the eventfd, and that write comes after
 *    our read, so it stays pending and wakes us again.
 * A push onto a non-empty stack needs no write: the push that made the stack
 * non-empty has written (or is about to write) the eventfd, and nothing takes
 * the stack without a wake-up after it. The worst case is a spurious wake-up
 * that finds nothing. Both sides use seq_cst so that the read/exchange and
 * push/write orders hold on weak memory too.
 *
 * Stop: the consumer closes the mailbox by exchanging in MAILBOX_CLOSED. A
 * producer's CAS that sees MAILBOX_CLOSED refuses the message; a CAS that won
 * before the close put the message on the stack that the close took, and the
 * consumer cancels it. So each message is refused, or run/canceled exactly
 * once.
 */

/* Messages run per wake-up before the loop gets back to its other events: a
 * flood of messages must not starve sockets and timers, and 256 still
 * amortises the eventfd round trip to nothing. */
#define MAILBOX_BATCH 256

static mc_reactor_msg_t closed_sentinel;
#define MAILBOX_CLOSED (&closed_sentinel)

struct mc_reactor {
    /* Written by any thread. */
    _Atomic(mc_reactor_msg_t *) head; /* newest first; MAILBOX_CLOSED once closed */
    _Atomic int stopping;             /* stop step 1 has begun */
    int efd;                          /* eventfd; closed at destroy/detach */
    char pad[64];                     /* keep producers' cache line off the owner's fields */

    /* The reactor's thread only (or the creating/destroying thread while no
     * reactor thread runs). */
    struct event_base *base;
    struct event *mbox_ev;
    mc_reactor_msg_t *ready_head, *ready_tail; /* taken off the stack, not yet run */
    mc_list_t hooks;
    int hooks_run;             /* stop step 2 done: later hooks are not kept */
    int shut;                  /* stop steps 2-3 done */
    int in_mailbox;            /* inside mailbox_cb (detach from there is a bug) */
    int owns_base;             /* threaded: the base is ours to free */
    mc_reactor_group_t *group; /* NULL when attached */
    unsigned index;
    int node;
    int thread_started;
    pthread_t thread;
    mc_reactor_msg_t started_msg;
    char name[48];
};

struct mc_reactor_group {
    unsigned count;
    int pin;
    int stopped;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned started; /* threads whose loop has run its first message */
    mc_reactor_t **r;
};

/* The reactor running on this thread: permanent on a reactor thread, set
 * around callbacks for attached reactors. */
static _Thread_local mc_reactor_t *tls_current;

mc_reactor_t *mc_reactor_current(void)
{
    return tls_current;
}

mc_reactor_t *mc_reactor_enter(mc_reactor_t *r)
{
    mc_reactor_t *saved = tls_current;
    tls_current = r;
    return saved;
}

void mc_reactor_leave(mc_reactor_t *saved)
{
    tls_current = saved;
}

/* ---- mailbox ---------------------------------------------------------- */

static void mailbox_wake(mc_reactor_t *r)
{
    uint64_t one = 1;
    while (write(r->efd, &one, sizeof(one)) < 0) {
        if (errno == EINTR)
            continue;
        /* EAGAIN: the counter is saturated, so a wake-up is pending anyway */
        if (errno != EAGAIN)
            MC_ERROR(REACTOR, "%s: eventfd write failed while waking the reactor: %s", r->name,
                     strerror(errno));
        break;
    }
}

/* Push unless closed. The message may run (and be freed) as soon as the CAS
 * succeeds, so nothing below it touches msg. */
static int mailbox_push(mc_reactor_t *r, mc_reactor_msg_t *msg)
{
    mc_reactor_msg_t *old = atomic_load(&r->head);
    do {
        if (old == MAILBOX_CLOSED)
            return -1;
        msg->next = old;
    } while (!atomic_compare_exchange_weak(&r->head, &old, msg));
    if (old == NULL)
        mailbox_wake(r);
    return 0;
}

/* Move a taken stack (newest first) to the tail of the ready list, oldest first. */
static void ready_append_stack(mc_reactor_t *r, mc_reactor_msg_t *stack)
{
    mc_reactor_msg_t *fifo = NULL, *last = stack;
    while (stack != NULL) {
        mc_reactor_msg_t *next = stack->next;
        stack->next = fifo;
        fifo = stack;
        stack = next;
    }
    if (fifo == NULL)
        return;
    if (r->ready_tail != NULL)
        r->ready_tail->next = fifo;
    else
        r->ready_head = fifo;
    r->ready_tail = last;
}

static mc_reactor_msg_t *ready_pop(mc_reactor_t *r)
{
    mc_reactor_msg_t *m = r->ready_head;
    if (m != NULL) {
        r->ready_head = m->next;
        if (r->ready_head == NULL)
            r->ready_tail = NULL;
        m->next = NULL;
    }
    return m;
}

static void mailbox_cb(evutil_socket_t fd, short what, void *arg)
{
    mc_reactor_t *r = arg;
    mc_reactor_t *saved = mc_reactor_enter(r);
    uint64_t v;
    (void)what;

    r->in_mailbox++;
    /* Clear the eventfd first, then take the stack (see the wake-up argument
     * above). EAGAIN: woken by event_active or a spurious wake-up. */
    while (read(fd, &v, sizeof(v)) < 0 && errno == EINTR)
        ;
    ready_append_stack(r, atomic_exchange(&r->head, NULL));

    for (int n = 0; n < MAILBOX_BATCH && !atomic_load(&r->stopping); n++) {
        mc_reactor_msg_t *m = ready_pop(r);
        if (m == NULL)
            break;
        m->fn(r, m, MC_OK);
    }
    if (atomic_load(&r->stopping)) {
        /* Threaded: end the loop; the thread then runs the stop steps. (An
         * attached reactor is only stopped by detach, outside this callback.) */
        if (r->group != NULL)
            event_base_loopbreak(r->base);
    } else if (r->ready_head != NULL) {
        /* batch used up: come back after the events that are ready now */
        event_active(r->mbox_ev, EV_READ, 1);
    }
    r->in_mailbox--;
    mc_reactor_leave(saved);
}

mc_status_t mc_reactor_post(mc_reactor_t *r, mc_reactor_msg_t *msg)
{
    assert(r != NULL && msg != NULL && msg->fn != NULL);
    /* Fast refusal; the close in stop_steps() is what makes it exact. */
    if (atomic_load_explicit(&r->stopping, memory_order_relaxed))
        return MC_ERR_CANCELED;
    return mailbox_push(r, msg) == 0 ? MC_OK : MC_ERR_CANCELED;
}

typedef struct call_msg {
    mc_reactor_msg_t msg;
    mc_reactor_call_fn_t fn;
    void *arg;
} call_msg_t;

static void call_msg_run(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    call_msg_t *c = MC_CONTAINER_OF(msg, call_msg_t, msg);
    mc_reactor_call_fn_t fn = c->fn;
    void *arg = c->arg;
    mc_free(c); /* before fn, which may do anything, including wait for us */
    fn(r, arg, st);
}

mc_status_t mc_reactor_call(mc_reactor_t *r, mc_reactor_call_fn_t fn, void *arg)
{
    call_msg_t *c = mc_malloc(sizeof(*c));
    if (c == NULL)
        return MC_ERR_NOMEM;
    c->msg.fn = call_msg_run;
    c->fn = fn;
    c->arg = arg;
    mc_status_t st = mc_reactor_post(r, &c->msg);
    if (st != MC_OK)
        mc_free(c);
    return st;
}

/* ---- stop ------------------------------------------------------------- */

/* Stop steps 2 and 3, on the reactor's thread (current == r). Idempotent. */
static void stop_steps(mc_reactor_t *r)
{
    if (r->shut)
        return;
    mc_reactor_t *saved = mc_reactor_enter(r);
    atomic_store(&r->stopping, 1);

    /* Newest first: later objects may depend on earlier ones. Unlink before
     * the call so the hook may free its owner or register more hooks. */
    while (!mc_list_empty(&r->hooks)) {
        mc_list_t *n = r->hooks.prev;
        mc_list_del(n);
        mc_reactor_hook_t *h = MC_LIST_ENTRY(n, mc_reactor_hook_t, node);
        h->fn(r, h);
    }
    r->hooks_run = 1;

    ready_append_stack(r, atomic_exchange(&r->head, MAILBOX_CLOSED));
    unsigned canceled = 0;
    mc_reactor_msg_t *m;
    while ((m = ready_pop(r)) != NULL) {
        m->fn(r, m, MC_ERR_CANCELED);
        canceled++;
    }
    r->shut = 1;
    MC_DEBUG(REACTOR, "%s: stopped, %u pending message(s) canceled", r->name, canceled);
    mc_reactor_leave(saved);
}

int mc_reactor_stopping(const mc_reactor_t *r)
{
    return atomic_load_explicit(&r->stopping, memory_order_relaxed);
}

void mc_reactor_on_stop(mc_reactor_t *r, mc_reactor_hook_t *hook)
{
    assert(hook->fn != NULL);
    if (r->hooks_run) {
        /* from a canceled message: the hooks are over, nothing would run it */
        mc_list_init(&hook->node);
        return;
    }
    mc_list_push_tail(&r->hooks, &hook->node);
}

void mc_reactor_on_stop_cancel(mc_reactor_t *r, mc_reactor_hook_t *hook)
{
    (void)r;
    if (hook->node.next != NULL) /* zeroed: never registered */
        mc_list_del(&hook->node);
}

/* ---- reactor objects -------------------------------------------------- */

static void reactor_free(mc_reactor_t *r)
{
    if (r == NULL)
        return;
    if (r->mbox_ev != NULL) {
        event_del(r->mbox_ev);
        mc_free(r->mbox_ev);
    }
    if (r->owns_base)
        event_base_free(r->base);
    if (r->efd >= 0)
        close(r->efd);
    mc_free(r);
}

/* Allocate a reactor with its eventfd and mailbox event on base (or on a new
 * base of its own when base is NULL). */
static mc_status_t reactor_new(struct event_base *base, const char *name, mc_reactor_t **out)
{
    mc_reactor_t *r = MC_NEW(mc_reactor_t);
    if (r == NULL)
        return MC_ERR_NOMEM;
    atomic_init(&r->head, NULL);
    atomic_init(&r->stopping, 0);
    r->efd = -1;
    r->node = -1;
    mc_list_init(&r->hooks);
    snprintf(r->name, sizeof(r->name), "%s", name);

    mc_status_t st = MC_ERR_INTERNAL_ERROR;
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->efd < 0) {
        MC_ERROR(REACTOR, "%s: eventfd failed while creating the mailbox: %s", name,
                 strerror(errno));
        goto err_free;
    }
    if (base == NULL) {
        struct event_config *cfg = event_config_new();
        if (cfg == NULL) {
            st = MC_ERR_NOMEM;
            goto err_free;
        }
        /* one thread per base: cross-thread traffic goes through the mailbox */
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
        base = event_base_new_with_config(cfg);
        event_config_free(cfg);
        if (base == NULL) {
            MC_ERROR(REACTOR, "%s: event_base_new_with_config failed", name);
            goto err_free;
        }
        r->owns_base = 1;
    }
    r->base = base;
    /* mc_malloc + event_assign rather than event_new: fault injection reaches it */
    r->mbox_ev = mc_malloc(event_get_struct_event_size());
    if (r->mbox_ev == NULL) {
        st = MC_ERR_NOMEM;
        goto err_free;
    }
    if (event_assign(r->mbox_ev, r->base, r->efd, EV_READ | EV_PERSIST, mailbox_cb, r) != 0 ||
        event_add(r->mbox_ev, NULL) != 0) {
        MC_ERROR(REACTOR, "%s: cannot register the mailbox event", name);
        mc_free(r->mbox_ev);
        r->mbox_ev = NULL;
        goto err_free;
    }
    *out = r;
    return MC_OK;

err_free:
    reactor_free(r);
    return st;
}

struct event_base *mc_reactor_base(mc_reactor_t *r)
{
    return r->base;
}

unsigned mc_reactor_index(const mc_reactor_t *r)
{
    return r->index;
}

int mc_reactor_numa_node(const mc_reactor_t *r)
{
    return r->node;
}

const char *mc_reactor_name(const mc_reactor_t *r)
{
    return r->name;
}

int mc_reactor_is_attached(const mc_reactor_t *r)
{
    return r->group == NULL;
}

/* ---- attach mode ------------------------------------------------------ */

mc_status_t mc_reactor_attach(struct event_base *base, const char *name, mc_reactor_t **out)
{
    if (base == NULL || out == NULL)
        return MC_ERR_INVALID_PARAMS;
    mc_reactor_t *r;
    mc_status_t st = reactor_new(base, name != NULL ? name : "attached", &r);
    if (st != MC_OK)
        return st;
    MC_DEBUG(REACTOR, "%s: attached to event_base %p", r->name, (void *)base);
    *out = r;
    return MC_OK;
}

void mc_reactor_detach(mc_reactor_t *r)
{
    if (r == NULL)
        return;
    assert(r->group == NULL);
    assert(r->in_mailbox == 0 && "mc_reactor_detach from inside one of its messages");
    atomic_store(&r->stopping, 1);
    stop_steps(r);
    MC_DEBUG(REACTOR, "%s: detached", r->name);
    reactor_free(r);
}

/* ---- threaded reactors ------------------------------------------------ */

static void started_cb(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    mc_reactor_group_t *g = r->group;
    (void)msg;
    (void)st; /* canceled when create gave up: still counts as done */
    pthread_mutex_lock(&g->lock);
    g->started++;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

static void *reactor_thread(void *arg)
{
    mc_reactor_t *r = arg;
    tls_current = r;
    mc_log_set_thread_name(r->name);
    if (r->group->pin && r->node >= 0)
        reactor_numa_bind(r->node, r->name);

    /* The first message tells create that the loop is running. */
    r->started_msg.fn = started_cb;
    if (mailbox_push(r, &r->started_msg) != 0)
        started_cb(r, &r->started_msg, MC_ERR_CANCELED); /* not reached: closed only below */

    if (event_base_loop(r->base, EVLOOP_NO_EXIT_ON_EMPTY) < 0 || !atomic_load(&r->stopping))
        MC_ERROR(REACTOR, "%s: event loop ended unexpectedly; stopping this reactor", r->name);
    atomic_store(&r->stopping, 1);
    stop_steps(r);
    tls_current = NULL;
    return NULL;
}

void mc_reactor_group_opts_init(mc_reactor_group_opts_t *o)
{
    o->count = 0;
    o->pin = 1;
    o->name = "mc";
}

/* Ask every started reactor to stop, then join them. */
static void group_stop_threads(mc_reactor_group_t *g)
{
    for (unsigned i = 0; i < g->count; i++) {
        mc_reactor_t *r = g->r[i];
        if (r != NULL && r->thread_started) {
            atomic_store(&r->stopping, 1);
            mailbox_wake(r);
        }
    }
    for (unsigned i = 0; i < g->count; i++) {
        mc_reactor_t *r = g->r[i];
        if (r != NULL && r->thread_started) {
            pthread_join(r->thread, NULL);
            r->thread_started = 0;
            /* the thread closed its mailbox and canceled what was in it */
            assert(r->shut && atomic_load(&r->head) == MAILBOX_CLOSED);
        }
    }
}

static void group_free(mc_reactor_group_t *g)
{
    for (unsigned i = 0; i < g->count; i++)
        reactor_free(g->r[i]);
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
    mc_free(g->r);
    mc_free(g);
}

mc_status_t mc_reactor_group_create(const mc_reactor_group_opts_t *o, mc_reactor_group_t **out)
{
    if (o == NULL || out == NULL)
        return MC_ERR_INVALID_PARAMS;
    const char *prefix = o->name != NULL ? o->name : "mc";
    if (strlen(prefix) > 32) {
        MC_ERROR(REACTOR, "reactor name prefix '%s' is longer than 32 bytes", prefix);
        return MC_ERR_INVALID_PARAMS;
    }

    /* nodes[] lists the usable NUMA nodes; none when libnuma is unavailable */
    unsigned nnodes = reactor_numa_nodes(NULL, 0);
    int *nodes = NULL;
    if (nnodes > 0) {
        nodes = mc_calloc(nnodes, sizeof(int));
        if (nodes == NULL)
            return MC_ERR_NOMEM;
        nnodes = reactor_numa_nodes(nodes, nnodes);
    }
    unsigned count = o->count != 0 ? o->count : (nnodes > 0 ? nnodes : 1);

    mc_status_t st = MC_ERR_NOMEM;
    mc_reactor_group_t *g = MC_NEW(mc_reactor_group_t);
    if (g == NULL)
        goto err_nodes;
    g->r = mc_calloc(count, sizeof(*g->r));
    if (g->r == NULL) {
        mc_free(g);
        goto err_nodes;
    }
    g->count = count;
    g->pin = o->pin;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);

    for (unsigned i = 0; i < count; i++) {
        char name[48];
        snprintf(name, sizeof(name), "%s-r%u", prefix, i);
        st = reactor_new(NULL, name, &g->r[i]);
        if (st != MC_OK)
            goto err_group;
        g->r[i]->group = g;
        g->r[i]->index = i;
        g->r[i]->node = nnodes > 0 ? nodes[i % nnodes] : -1;
    }

    /* Reactor threads start with asynchronous signals blocked, so that
     * SIGINT/SIGTERM/SIGPIPE/SIGCHLD reach the host's threads (sigwait,
     * signalfd or handlers there), never a reactor in the middle of its
     * work. Faults stay unblocked: blocking them would kill the process
     * past any handler. */
    sigset_t blocked, saved_mask;
    sigfillset(&blocked);
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t k = 0; k < MC_ARRAY_SIZE(faults); k++)
        sigdelset(&blocked, faults[k]);
    pthread_sigmask(SIG_SETMASK, &blocked, &saved_mask);
    unsigned nthreads = 0;
    for (unsigned i = 0; i < count; i++) {
        mc_reactor_t *r = g->r[i];
        int rc = pthread_create(&r->thread, NULL, reactor_thread, r);
        if (rc != 0) {
            pthread_sigmask(SIG_SETMASK, &saved_mask, NULL);
            MC_ERROR(REACTOR, "%s: pthread_create failed: %s", r->name, strerror(rc));
            st = MC_ERR_INTERNAL_ERROR;
            goto err_threads;
        }
        r->thread_started = 1;
        nthreads++;
    }
    pthread_sigmask(SIG_SETMASK, &saved_mask, NULL);
    pthread_mutex_lock(&g->lock);
    while (g->started < nthreads)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);

    MC_INFO(REACTOR, "%u reactor(s) '%s' running (%u NUMA node(s)%s)", count, prefix,
            nnodes > 0 ? nnodes : 1, g->pin && nnodes > 0 ? ", pinned" : "");
    mc_free(nodes);
    *out = g;
    return MC_OK;

err_threads:
    group_stop_threads(g);
err_group:
    group_free(g);
err_nodes:
    mc_free(nodes);
    return st;
}

void mc_reactor_group_stop(mc_reactor_group_t *g)
{
    if (g == NULL || g->stopped)
        return;
    assert(tls_current == NULL || tls_current->group != g);
    /* Refuse posts on every reactor before any stops, so that a stop hook
     * posting to a sibling is refused rather than racing its stop. */
    for (unsigned i = 0; i < g->count; i++)
        atomic_store(&g->r[i]->stopping, 1);
    group_stop_threads(g);
    g->stopped = 1;
    MC_DEBUG(REACTOR, "%u reactor(s) stopped", g->count);
}

void mc_reactor_group_destroy(mc_reactor_group_t *g)
{
    if (g == NULL)
        return;
    mc_reactor_group_stop(g);
    group_free(g);
}

unsigned mc_reactor_group_count(const mc_reactor_group_t *g)
{
    return g->count;
}

mc_reactor_t *mc_reactor_group_get(mc_reactor_group_t *g, unsigned i)
{
    return i < g->count ? g->r[i] : NULL;
}
