/* run_on.c - run a function on a reactor's thread and wait (see rpc.h). */
#include <pthread.h>

#include "rpc/rpc.h"
#include "util/list.h"

typedef struct run_ctx {
    mc_reactor_msg_t msg; /* embedded: posting never allocates */
    void (*fn)(void *arg);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} run_ctx_t;

static void run_msg(mc_reactor_t *r, mc_reactor_msg_t *msg, mc_status_t st)
{
    run_ctx_t *rc = MC_CONTAINER_OF(msg, run_ctx_t, msg);
    (void)r;
    /* Also on MC_ERR_CANCELED: the reactor has stopped, its loop no longer
     * runs, so running fn from this (stopping) thread is safe and is what
     * lets owners clean up after their reactor. */
    (void)st;
    rc->fn(rc->arg);
    pthread_mutex_lock(&rc->mu);
    rc->done = 1;
    pthread_cond_signal(&rc->cv);
    pthread_mutex_unlock(&rc->mu);
}

void mc_rpc_run_on(mc_reactor_t *r, void (*fn)(void *arg), void *arg)
{
    if (mc_reactor_is_current(r) || mc_reactor_is_attached(r)) {
        fn(arg);
        return;
    }
    run_ctx_t rc = {.fn = fn, .arg = arg};
    rc.msg.fn = run_msg;
    pthread_mutex_init(&rc.mu, NULL);
    pthread_cond_init(&rc.cv, NULL);
    if (mc_reactor_post(r, &rc.msg) != MC_OK) {
        /* refused: the reactor has stopped and its loop no longer runs, so
         * nothing races with us */
        fn(arg);
    } else {
        pthread_mutex_lock(&rc.mu);
        while (!rc.done)
            pthread_cond_wait(&rc.cv, &rc.mu);
        pthread_mutex_unlock(&rc.mu);
    }
    pthread_cond_destroy(&rc.cv);
    pthread_mutex_destroy(&rc.mu);
}
