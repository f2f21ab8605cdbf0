/*
 * client_direct.c - a master connection owned by one thread (client_int.h,
 * store_mconn_t): the store service's workers run a put's PutStart and
 * PutEnd, and a get's GetReplicaList, on their own thread through it
 * (store_put_direct in client_put.c, store_get_direct in client_get.c)
 * instead of handing each call to reactor 0 and waiting for its answer to
 * be handed back: four thread hand-offs per put fewer.
 *
 * It follows the master exactly as r0's client does: it calls the address
 * that client was given (at open, and by every retarget the HA resolver
 * asks for), checked before every call; a call that meets "not this
 * master" (NOT_LEADER, a broken or refused connection, a timeout) kicks
 * the resolver, and with HA is asked again within the rpc timeout when it
 * may be (store_resend_worthy): store_call_sync's loop (store_call_resend)
 * with this connection's call in it.
 */
#include "rpc/bconn.h"
#include "store/client_int.h"
#include "util/mem.h"

struct store_mconn {
    mc_store_t *s;
    mc_rpc_bconn_t c;
    uint64_t gen;       /* s->mc_gen the connection targets (0: none yet) */
    mc_buf_t body, ans; /* a call's body and answer, kept (no malloc per call) */
};

store_mconn_t *store_mconn_new(mc_store_t *s)
{
    store_mconn_t *m = MC_NEW(store_mconn_t);
    if (m == NULL)
        return NULL;
    m->s = s;
    mc_rpc_bconn_init(&m->c, te_auth_key(s->te));
    m->body = (mc_buf_t)MC_BUF_INIT;
    m->ans = (mc_buf_t)MC_BUF_INIT;
    return m;
}

void store_mconn_free(store_mconn_t *m)
{
    if (m == NULL)
        return;
    mc_rpc_bconn_fini(&m->c);
    mc_buf_fini(&m->body);
    mc_buf_fini(&m->ans);
    mc_free(m);
}

mc_store_t *store_mconn_store(const store_mconn_t *m)
{
    return m->s;
}

mc_buf_t *store_mconn_body(store_mconn_t *m)
{
    mc_buf_reset(&m->body);
    return &m->body;
}

mc_buf_t *store_mconn_ans(store_mconn_t *m)
{
    mc_buf_reset(&m->ans);
    return &m->ans;
}

/* Point the connection where mcli calls now. */
static void follow(store_mconn_t *m)
{
    mc_store_t *s = m->s;
    pthread_mutex_lock(&s->res_mu);
    if (s->mc_gen != m->gen) {
        mc_rpc_bconn_target(&m->c, s->mc_host, s->mc_port);
        m->gen = s->mc_gen;
    }
    pthread_mutex_unlock(&s->res_mu);
}

/* One try of store_mconn_call: on m's connection, wherever mcli calls now. */
static mc_status_t send_mconn(void *ctx, uint16_t method, const mc_buf_t *body, uint64_t timeout_us,
                              mc_buf_t *resp)
{
    store_mconn_t *m = ctx;
    follow(m);
    return mc_rpc_bconn_call(&m->c, method, mc_buf_head(body), mc_buf_used(body), timeout_us, resp);
}

mc_status_t store_mconn_call(store_mconn_t *m, uint16_t method, const mc_buf_t *body,
                             mc_buf_t *resp)
{
    return store_call_resend(m->s, method, body, resp, m->s->cfg.rpc_timeout_us, send_mconn, m);
}
