/*
 * guard.h - the re-entrancy guard of objects that call user callbacks
 * (docs/ARCHITECTURE.md §3; hiredis' REDIS_IN_CALLBACK): while one of the object's
 * callbacks runs, a close or free of the object asked from inside it is
 * deferred until the outermost callback has returned.
 *
 *     mc_guard_enter(&o->guard);
 *     o->cb(o->arg, ...);                  // may close o
 *     if (mc_guard_leave(&o->guard))
 *         o_free(o);                        // it did: free now, o is gone
 *
 *     void o_close(o_t *o)                  // the close entry point
 *     {
 *         ... fail pending work (more callbacks, each guarded) ...
 *         if (mc_guard_close(&o->guard))
 *             o_free(o);                    // else the running callback's
 *     }                                     // mc_guard_leave frees it
 *
 * Owners whose bookkeeping between enter and leave is spread out may use
 * mc_guard_exit (leave without deciding) and test mc_guard_due later.
 * Single-threaded: the object's reactor only. No allocation.
 */
#ifndef MC_REACTOR_GUARD_H
#define MC_REACTOR_GUARD_H

typedef struct mc_guard {
    unsigned depth;    /* callbacks of the object on the stack */
    int close_pending; /* closed while depth > 0: free when it drops to 0 */
} mc_guard_t;

#define MC_GUARD_INIT                                                                              \
    {                                                                                              \
        0, 0                                                                                       \
    }

static inline void mc_guard_enter(mc_guard_t *g)
{
    g->depth++;
}

/* Leave without deciding (see mc_guard_due). */
static inline void mc_guard_exit(mc_guard_t *g)
{
    g->depth--;
}

/* 1 when a close is pending and no callback of the object runs any more:
 * the caller frees the object now. */
static inline int mc_guard_due(const mc_guard_t *g)
{
    return g->close_pending && g->depth == 0;
}

/* Leave a callback; 1 when the caller must free the object now (it was
 * closed from inside, and this was the outermost callback). */
static inline int mc_guard_leave(mc_guard_t *g)
{
    mc_guard_exit(g);
    return mc_guard_due(g);
}

/* Ask for the object's end: 1 when the caller frees it now (no callback of
 * it runs), 0 when it is deferred to the outermost mc_guard_leave. */
static inline int mc_guard_close(mc_guard_t *g)
{
    g->close_pending = 1;
    return g->depth == 0;
}

/* 1 once a close was asked (and deferred): stop starting new work. */
static inline int mc_guard_closing(const mc_guard_t *g)
{
    return g->close_pending;
}

/* 1 while one of the object's callbacks runs. */
static inline int mc_guard_active(const mc_guard_t *g)
{
    return g->depth > 0;
}

#endif /* MC_REACTOR_GUARD_H */
