/*
 * master_server_scan.c - the master service's regex scans
 * (GetReplicaListByRegex, RemoveByRegex, HTTP /keys) run on a worker thread
 * of their own, so that a costly pattern never holds up a reactor: every
 * other RPC and HTTP request is answered while a scan runs.
 *
 * A handler compiles the pattern on its reactor (bounded: util/regex.h caps
 * its length and the memory compiling may take; a refusal is answered at
 * once) and queues a job. The worker matches in steps of SCAN_STEP_KEYS keys
 * (mc_master_scan_step: no shard lock held while the regex runs), checks the
 * job's deadline (queued time + server.regex_timeout) between steps, then
 * runs the job's act() (the lease grants, removals or listing, and the reply
 * body) and posts the job back to the reactor that took the request, whose
 * done() replies. A scan over its deadline or one of its regex limits is
 * answered INVALID_PARAMS (HTTP 400) with the reason, and a remove then
 * removed nothing. At most server.regex_queue jobs wait; more are refused
 * (MC_ERR_LIMIT, HTTP 503) instead of queueing work nobody will wait for.
 *
 * Stop: the worker abandons its job and the queued ones (MC_ERR_CANCELED,
 * still answered through done(), so every RPC request and HTTP request is
 * released on its reactor), and master_scan_stop() waits until every done()
 * has run, before the HTTP server and the reactors go away.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "store/master_server_int.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

/* Keys matched between two deadline checks: at most one regex budget each
 * (~3 ms at the default match limit), and a few microseconds for a cheap
 * pattern, so a check every 256 keys is both cheap and prompt. */
#define SCAN_STEP_KEYS 256

struct master_scan {
    master_srv_t *srv;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work queued, stop, or a done() ran */
    mc_list_t queue;        /* scan_job_t, mu */
    unsigned queued;        /* mu */
    unsigned outstanding;   /* jobs submitted whose done() has not run, mu */
    int stop;               /* mu */
    _Atomic uint64_t total; /* jobs finished, by outcome (metrics) */
    _Atomic uint64_t refused;
    _Atomic uint64_t over_budget;
};

static void job_on_reactor(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    scan_job_t *j = MC_CONTAINER_OF(msg, scan_job_t, msg);
    master_scan_t *w = j->s->scan;
    (void)r;
    if (st == MC_ERR_CANCELED && j->st == MC_OK)
        j->st = MC_ERR_CANCELED; /* the reactor is stopping: answer nothing useful */
    j->done(j);
    pthread_mutex_lock(&w->mu);
    w->outstanding--;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Send j back to its reactor for done(). */
static void job_finish(master_scan_t *w, scan_job_t *j)
{
    j->msg.fn = job_on_reactor;
    if (mc_reactor_post(j->r, &j->msg) != MC_OK) {
        /* the reactor is gone: nobody to answer (only after a stop that
         * did not wait for us, which master_scan_stop prevents) */
        MC_ERROR(MASTER, "regex scan finished after its reactor stopped");
        pthread_mutex_lock(&w->mu);
        w->outstanding--;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        scan_job_free(j);
    }
}

static int stopping(master_scan_t *w)
{
    pthread_mutex_lock(&w->mu);
    int s = w->stop;
    pthread_mutex_unlock(&w->mu);
    return s;
}

static void run_job(master_scan_t *w, scan_job_t *j)
{
    mc_master_t *m = j->s->m;
    mc_status_t st;
    size_t steps = 0;
    while ((st = mc_master_scan_step(m, j->sc, SCAN_STEP_KEYS, j->why, sizeof(j->why))) ==
           MC_INPROGRESS) {
        steps++;
        if ((steps & 15) == 0 && stopping(w)) {
            st = MC_ERR_CANCELED;
            break;
        }
        if (mc_now_us() > j->deadline_us) {
            snprintf(j->why, sizeof(j->why),
                     "regex scan went over its time budget (server.regex_timeout = %llu ms) "
                     "after %zu matching keys; nothing was done",
                     (unsigned long long)(j->s->opts.regex_timeout_us / 1000),
                     mc_master_scan_matched(j->sc));
            st = MC_ERR_INVALID_PARAMS;
            break;
        }
    }
    if (st == MC_OK)
        st = j->act(j);
    else if (st == MC_ERR_INVALID_PARAMS)
        atomic_fetch_add(&w->over_budget, 1);
    j->st = st;
    atomic_fetch_add(&w->total, 1);
}

static void *scan_main(void *arg)
{
    master_scan_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && w->queue.next == &w->queue)
            pthread_cond_wait(&w->cv, &w->mu);
        mc_list_t *n = mc_list_pop_head(&w->queue);
        if (n == NULL)
            break; /* stopping and nothing left */
        w->queued--;
        int stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        scan_job_t *j = MC_CONTAINER_OF(n, scan_job_t, node);
        if (stop)
            j->st = MC_ERR_CANCELED;
        else
            run_job(w, j);
        job_finish(w, j);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

mc_status_t master_scan_start(master_srv_t *s)
{
    master_scan_t *w = MC_NEW(master_scan_t);
    if (w == NULL)
        return MC_ERR_NOMEM;
    w->srv = s;
    mc_list_init(&w->queue);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, scan_main, w) != 0) {
        MC_ERROR(MASTER, "cannot start the regex scan thread");
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        mc_free(w);
        return MC_ERR_INTERNAL_ERROR;
    }
    pthread_setname_np(w->thread, "master-scan");
    w->started = 1;
    s->scan = w;
    return MC_OK;
}

void master_scan_stop(master_srv_t *s)
{
    master_scan_t *w = s->scan;
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    /* every job went to its reactor: wait until each done() ran there */
    pthread_mutex_lock(&w->mu);
    while (w->outstanding > 0)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

void master_scan_free(master_srv_t *s)
{
    master_scan_t *w = s->scan;
    if (w == NULL)
        return;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    mc_free(w);
    s->scan = NULL;
}

scan_job_t *scan_job_new(master_srv_t *s, mc_master_scan_t *sc, mc_reactor_t *r)
{
    scan_job_t *j = MC_NEW(scan_job_t);
    if (j == NULL)
        return NULL;
    j->s = s;
    j->sc = sc;
    j->r = r;
    return j;
}

void scan_job_free(scan_job_t *j)
{
    if (j == NULL)
        return;
    mc_master_scan_destroy(j->sc);
    mc_buf_fini(&j->out);
    mc_free(j);
}

mc_status_t master_scan_submit(master_srv_t *s, scan_job_t *j, char *why, size_t whylen)
{
    master_scan_t *w = s->scan;
    pthread_mutex_lock(&w->mu);
    if (w->stop) {
        pthread_mutex_unlock(&w->mu);
        snprintf(why, whylen, "the master is stopping");
        return MC_ERR_CANCELED;
    }
    if (w->queued >= s->opts.regex_queue) {
        pthread_mutex_unlock(&w->mu);
        atomic_fetch_add(&w->refused, 1);
        snprintf(why, whylen, "too many regex scans waiting (server.regex_queue = %u); retry later",
                 s->opts.regex_queue);
        return MC_ERR_LIMIT;
    }
    j->deadline_us = mc_now_us() + s->opts.regex_timeout_us;
    mc_list_push_tail(&w->queue, &j->node);
    w->queued++;
    w->outstanding++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return MC_OK;
}

void master_scan_stats(master_srv_t *s, uint64_t *total, uint64_t *over_budget, uint64_t *refused)
{
    master_scan_t *w = s->scan;
    *total = w ? atomic_load(&w->total) : 0;
    *over_budget = w ? atomic_load(&w->over_budget) : 0;
    *refused = w ? atomic_load(&w->refused) : 0;
}
