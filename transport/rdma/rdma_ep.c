/*
 * rdma_ep.c - endpoints: one per (local NIC, peer segment's NIC), made on
 * demand, pooled per NIC with SIEVE eviction and a cap, connected by a
 * handshake over the peer's RPC port.
 *
 * Handshake (MC_RPC_RDMA_CONNECT, rpc/methods.h): the active side creates
 * its QPs (INIT) and sends {its segment name, RPC address, NIC, the peer's
 * NIC, GID, LID, MTU, QP numbers}; the passive side finds or makes the
 * endpoint keyed "<initiator>@<NIC>", brings as many QPs to RTR/RTS against
 * them and answers with its own. Both use MTU = min of the two sides' MTUs
 * (each sends min(active MTU, configured MTU)), so the two ends agree.
 *
 * Simultaneous open (both sides CONNECTING to each other): the side whose
 * "<name>@<NIC>" sorts lower initiates; the other accepts the incoming
 * CONNECT with the QPs it had made. The winner answers the loser's CONNECT
 * with REJECT_HANDSHAKE ("simultaneous open"); the loser then waits a little
 * and asks again: by then it is CONNECTED through the winner's CONNECT (and
 * stops), or its repeated CONNECT finds the winner CONNECTED to the same QPs
 * and gets an idempotent answer.
 *
 * Failure: an endpoint whose QP fails is closed (QPs to ERR, in-flight WRs
 * flush and are retried on other paths), removed from the pool, and the
 * peer told (MC_RPC_RDMA_DISCONNECT) so it drops its side; the key backs
 * off (10 ms doubling to 1 s) before it is made again, so a dead peer does
 * not cause a reconnect storm. A CONNECT for a key that is CONNECTED with
 * other QP numbers replaces it (the peer lost its side).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "rpc/fields.h"
#include "rpc/methods.h"
#include "transport/rdma/rdma_int.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

static const char *const ep_state_names[] = {"NEW", "CONNECTING", "CONNECTED", "CLOSING"};
static const uint64_t ep_moves[] = {
    [EP_NEW] = MC_FSM_BIT(EP_CONNECTING) | MC_FSM_BIT(EP_CONNECTED) | MC_FSM_BIT(EP_CLOSING),
    [EP_CONNECTING] = MC_FSM_BIT(EP_CONNECTED) | MC_FSM_BIT(EP_CLOSING),
    [EP_CONNECTED] = MC_FSM_BIT(EP_CLOSING),
    [EP_CLOSING] = 0,
};
const mc_fsm_desc_t rd_ep_fsm = MC_FSM_DESC("rdma_ep", MC_LOGC_RDMA, ep_state_names, ep_moves);

static mc_status_t ep_set_state(rd_ep_t *ep, int to)
{
    return MC_FSM_SET(&rd_ep_fsm, ep, state, to);
}

/* Keys are made of the two names' hashes, so the data path can reuse a
 * segment's (rd_peer_t.key) without formatting strings per slice. */
uint64_t rd_ep_key(const char *peer, const char *nic)
{
    return mc_hash_u64(mc_hash64(peer, strlen(peer)) * 31 + mc_hash64(nic, strlen(nic)));
}

static rd_ep_t *ep_find(rd_nic_t *n, uint64_t key, const char *peer, const char *nic)
{
    mc_hnode_t *h;
    MC_HMAP_FOREACH_HASH(&n->eps, h, key)
    {
        rd_ep_t *ep = MC_CONTAINER_OF(h, rd_ep_t, hnode);
        if (strcmp(ep->peer, peer) == 0 && strcmp(ep->peer_nic, nic) == 0)
            return ep;
    }
    return NULL;
}

/* ------------------------------------------------------------ backoff */

static rd_backoff_t *backoff_slot(rd_nic_t *n, uint64_t key)
{
    return &n->backoff[key % RD_BACKOFF_SLOTS];
}

static int backing_off(rd_nic_t *n, uint64_t key)
{
    rd_backoff_t *b = backoff_slot(n, key);
    return b->key == key && mc_now_ns() < b->until_ns;
}

static void backoff_fail(rd_nic_t *n, uint64_t key)
{
    rd_backoff_t *b = backoff_slot(n, key);
    if (b->key != key) {
        b->key = key;
        b->delay_us = RD_BACKOFF_MIN_US;
    } else {
        b->delay_us = b->delay_us * 2 > RD_BACKOFF_MAX_US ? RD_BACKOFF_MAX_US : b->delay_us * 2;
    }
    b->until_ns = mc_now_ns() + (uint64_t)b->delay_us * 1000;
}

static void backoff_ok(rd_nic_t *n, uint64_t key)
{
    rd_backoff_t *b = backoff_slot(n, key);
    if (b->key == key)
        memset(b, 0, sizeof(*b));
}

/* ------------------------------------------------------------ life */

static void ep_timer_fn(mc_timer_t *tm, void *arg);

static int ep_pinned(rd_sieve_node_t *node, void *arg)
{
    rd_ep_t *ep = MC_CONTAINER_OF(node, rd_ep_t, snode);
    (void)arg;
    return ep->outstanding > 0 || ep->npending > 0 || ep->state != EP_CONNECTED;
}

static void pool_remove(rd_ep_t *ep)
{
    if (!ep->in_pool)
        return;
    rd_nic_t *n = ep->nic;
    mc_hmap_remove(&n->eps, &ep->hnode);
    rd_sieve_remove(&n->sieve, &ep->snode);
    ep->in_pool = 0;
    atomic_fetch_sub(&n->neps, 1);
}

static void ep_free(rd_ep_t *ep)
{
    rd_nic_t *n = ep->nic;
    /* destroying the client completes its pending calls (CANCELED), maybe
     * right here: their callbacks must not touch ep again */
    ep->freeing = 1;
    if (ep->dirty) { /* closed before its NIC's next flush: not to be flushed */
        for (rd_ep_t **pp = &n->dirty; *pp != NULL; pp = &(*pp)->dnext)
            if (*pp == ep) {
                *pp = ep->dnext;
                break;
            }
        ep->dirty = 0;
    }
    for (unsigned i = 0; i < ep->nqp; i++)
        n->t->v->destroy_qp(ep->qp[i]);
    mc_timer_fini(&ep->timer);
    mc_rpc_client_destroy(ep->rpc);
    mc_free(ep->peer);
    mc_free(ep);
}

/* A closing endpoint goes once nothing can point at it any more. */
void rd_ep_maybe_free(rd_ep_t *ep)
{
    if (ep->state != EP_CLOSING || ep->outstanding > 0 || ep->hs_inflight)
        return;
    rd_nic_t *n = ep->nic;
    for (rd_ep_t **pp = &n->closing; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == ep) {
            *pp = ep->next;
            break;
        }
    }
    MC_DEBUG(RDMA, "%s: endpoint to %s@%s drained and freed", n->name, ep->peer, ep->peer_nic);
    ep_free(ep);
}

#define QP_ACCESS (RV_ACCESS_LOCAL_WRITE | RV_ACCESS_REMOTE_READ | RV_ACCESS_REMOTE_WRITE)

static mc_status_t qps_create(rd_ep_t *ep, unsigned nqp)
{
    rd_nic_t *n = ep->nic;
    rd_transport_t *t = n->t;
    rv_qp_caps_t caps = {.max_send_wr = n->qp_wr, .max_inline = 0};
    rd_port_facts_t lf;
    rd_port_facts_from_info(&n->info, n->mtu, &lf);
    rv_qp_attr_t a;
    char why[200];
    mc_status_t bst = rd_qp_build(RV_QPS_INIT, &lf, NULL, &t->qs, QP_ACCESS, &a, why, sizeof(why));
    if (bst != MC_OK) {
        MC_ERROR(RDMA, "%s: QP attributes for INIT: %s", n->name, why);
        return bst;
    }
    for (unsigned i = 0; i < nqp; i++) {
        mc_status_t st = t->v->create_qp(n->pd, n->cq, &caps, &ep->qp[i]);
        if (st == MC_OK)
            st = t->v->modify_qp(ep->qp[i], RV_QPS_INIT, &a);
        if (st != MC_OK) {
            if (ep->qp[i] != NULL)
                t->v->destroy_qp(ep->qp[i]);
            ep->qp[i] = NULL;
            ep->nqp = i;
            MC_ERROR(RDMA, "%s: cannot create a QP for %s@%s: %s", n->name, ep->peer, ep->peer_nic,
                     mc_status_str(st));
            return st;
        }
        ep->nqp = i + 1;
    }
    return MC_OK;
}

/* A new endpoint in the pool (evicting per SIEVE when at the cap). */
static rd_ep_t *ep_new(rd_nic_t *n, uint64_t key, const char *peer, const char *peer_nic,
                       const char *host, uint16_t port)
{
    rd_transport_t *t = n->t;
    rd_ep_t *ep = mc_calloc(1, sizeof(*ep));
    if (ep == NULL || (ep->peer = mc_strdup(peer)) == NULL) {
        mc_free(ep);
        return NULL;
    }
    ep->nic = n;
    ep->key = key;
    snprintf(ep->peer_nic, sizeof(ep->peer_nic), "%s", peer_nic);
    snprintf(ep->host, sizeof(ep->host), "%s", host);
    ep->port = port;
    ep->state = EP_NEW;
    /* a random first PSN: a stale packet of an earlier pairing of the same
     * QP numbers does not fall into the new one's window */
    if (getrandom(&ep->psn, sizeof(ep->psn), 0) != (ssize_t)sizeof(ep->psn))
        ep->psn = (uint32_t)mc_now_ns();
    ep->psn &= 0xffffff;
    if (mc_timer_init(&ep->timer, n->r, ep_timer_fn, ep) != MC_OK) {
        mc_free(ep->peer);
        mc_free(ep);
        return NULL;
    }
    while (n->sieve.n >= t->max_eps) {
        rd_sieve_node_t *victim = rd_sieve_victim(&n->sieve, ep_pinned, NULL);
        if (victim == NULL) {
            MC_DEBUG(RDMA, "%s: %zu endpoints, all busy: over the cap of %u for now", n->name,
                     n->sieve.n, t->max_eps);
            break;
        }
        rd_ep_t *v = MC_CONTAINER_OF(victim, rd_ep_t, snode);
        MC_DEBUG(RDMA, "%s: evicting the endpoint to %s@%s (SIEVE)", n->name, v->peer, v->peer_nic);
        atomic_fetch_add(&n->evictions, 1);
        rd_ep_close(v, MC_OK, 1);
    }
    mc_hmap_insert(&n->eps, &ep->hnode, key);
    rd_sieve_insert(&n->sieve, &ep->snode);
    ep->in_pool = 1;
    atomic_fetch_add(&n->neps, 1);
    atomic_fetch_add(&n->eps_created, 1);
    return ep;
}

/* ------------------------------------------------------------ bodies */

static void write_qpns(mc_mp_writer_t *w, const rd_ep_t *ep)
{
    const mc_rdma_verbs_ops_t *v = ep->nic->t->v;
    mc_mp_write_array(w, ep->nqp);
    for (unsigned i = 0; i < ep->nqp; i++)
        mc_mp_write_uint(w, v->qp_num(ep->qp[i]));
}

/* The body of RDMA_READY and RDMA_DISCONNECT: who we are, our NIC and the
 * peer's, our QPs. */
static void write_ends(mc_mp_writer_t *w, const rd_ep_t *ep)
{
    const rd_nic_t *n = ep->nic;
    mc_mp_write_map(w, 4);
    mc_mp_write_uint(w, MC_F_NAME);
    mc_mp_write_cstr(w, n->t->te->name);
    mc_mp_write_uint(w, MC_F_NIC);
    mc_mp_write_cstr(w, n->name);
    mc_mp_write_uint(w, MC_F_PEER_NIC);
    mc_mp_write_cstr(w, ep->peer_nic);
    mc_mp_write_uint(w, MC_F_QPNS);
    write_qpns(w, ep);
}

typedef struct hs_body {
    char name[256], host[64], nic[RV_NAME_MAX], peer_nic[RV_NAME_MAX];
    uint16_t port;
    uint8_t gid[16];
    int have_gid;
    uint16_t lid;
    uint32_t mtu;
    int link_layer;   /* 0: not sent (an older peer) */
    uint8_t gid_type; /* 0: not sent */
    int has_psn;
    uint32_t psn;
    uint32_t rd_atom;  /* 0: not sent */
    uint64_t instance; /* 0: not sent */
    int will_ready;    /* a CONNECT whose sender sends RDMA_READY at RTS */
    uint32_t qpns[RD_MAX_QPS];
    unsigned nqpn;
    char error[160];
} hs_body_t;

static void body_str(mc_mp_reader_t *r, char *dst, size_t room)
{
    uint32_t len = 0;
    const char *s = mc_mp_read_str(r, &len);
    if (r->err == MC_OK && len < room) {
        memcpy(dst, s, len);
        dst[len] = '\0';
    } else if (r->err == MC_OK) {
        r->err = MC_ERR_PROTOCOL;
    }
}

/* Parse a CONNECT/DISCONNECT body or reply. Returns NULL when well formed
 * for `need` (a bit set of what must be there), else what is wrong. */
enum { NEED_NAME = 1, NEED_NICS = 2, NEED_ADDR = 4, NEED_QP = 8 };

static const char *hs_parse(const uint8_t *p, size_t len, int need, hs_body_t *b)
{
    mc_mp_reader_t r;
    memset(b, 0, sizeof(*b));
    mc_mp_reader_init(&r, p, len);
    int have_mtu = 0;
    uint32_t nf = len ? mc_mp_read_map(&r) : 0;
    for (uint32_t i = 0; i < nf && r.err == MC_OK; i++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_NAME:
            body_str(&r, b->name, sizeof(b->name));
            break;
        case MC_F_HOST:
            body_str(&r, b->host, sizeof(b->host));
            break;
        case MC_F_PORT:
            b->port = (uint16_t)mc_mp_read_uint(&r);
            break;
        case MC_F_NIC:
            body_str(&r, b->nic, sizeof(b->nic));
            break;
        case MC_F_PEER_NIC:
            body_str(&r, b->peer_nic, sizeof(b->peer_nic));
            break;
        case MC_F_ERROR:
            body_str(&r, b->error, sizeof(b->error));
            break;
        case MC_F_GID: {
            uint32_t gl = 0;
            const void *g = mc_mp_read_bin(&r, &gl);
            if (r.err == MC_OK && gl != 16)
                return "GID is not 16 bytes";
            if (r.err == MC_OK)
                memcpy(b->gid, g, 16);
            b->have_gid = 1;
            break;
        }
        case MC_F_LID:
            b->lid = (uint16_t)mc_mp_read_uint(&r);
            break;
        case MC_F_MTU:
            b->mtu = (uint32_t)mc_mp_read_uint(&r);
            have_mtu = 1;
            break;
        case MC_F_LINK_LAYER: {
            uint64_t ll = mc_mp_read_uint(&r);
            if (r.err == MC_OK && ll != RV_LL_IB && ll != RV_LL_ETH)
                return "LINK_LAYER is neither 1 (InfiniBand) nor 2 (Ethernet)";
            b->link_layer = (int)ll;
            break;
        }
        case MC_F_GID_TYPE: {
            uint64_t gt = mc_mp_read_uint(&r);
            if (r.err == MC_OK && (gt == RV_GID_TYPE_NONE || gt > RV_GID_TYPE_ROCE_V2))
                return "GID_TYPE is not 1 (IB), 2 (RoCE v1) or 3 (RoCE v2)";
            b->gid_type = (uint8_t)gt;
            break;
        }
        case MC_F_PSN: {
            uint64_t psn = mc_mp_read_uint(&r);
            if (r.err == MC_OK && psn > 0xffffff)
                return "PSN is over 24 bits";
            b->psn = (uint32_t)psn;
            b->has_psn = 1;
            break;
        }
        case MC_F_INSTANCE:
            b->instance = mc_mp_read_uint(&r);
            break;
        case MC_F_READY:
            b->will_ready = mc_mp_read_bool(&r);
            break;
        case MC_F_RD_ATOM: {
            uint64_t rd = mc_mp_read_uint(&r);
            if (r.err == MC_OK && (rd == 0 || rd > 255))
                return "RD_ATOM is not 1..255";
            b->rd_atom = (uint32_t)rd;
            break;
        }
        case MC_F_QPNS: {
            uint32_t nq = mc_mp_read_array(&r);
            if (r.err == MC_OK && (nq == 0 || nq > RD_MAX_QPS))
                return "QPNS must list 1..16 QP numbers";
            for (uint32_t k = 0; k < nq && r.err == MC_OK; k++) {
                uint64_t q = mc_mp_read_uint(&r);
                if (r.err == MC_OK && (q == 0 || q > 0xffffff))
                    return "a QP number is 0 or over 24 bits";
                b->qpns[k] = (uint32_t)q;
            }
            b->nqpn = nq;
            break;
        }
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    if (r.err != MC_OK || !mc_mp_at_end(&r))
        return "malformed msgpack body";
    if ((need & NEED_NAME) && b->name[0] == '\0')
        return "NAME (the initiator's segment) missing";
    if ((need & NEED_NICS) && (b->nic[0] == '\0' || b->peer_nic[0] == '\0'))
        return "NIC or PEER_NIC missing";
    if ((need & NEED_ADDR) && (b->host[0] == '\0' || b->port == 0))
        return "HOST or PORT missing";
    if ((need & NEED_QP) && b->nqpn == 0)
        return "QPNS missing";
    if ((need & NEED_QP) && !b->have_gid)
        return "GID missing";
    if ((need & NEED_QP) &&
        (!have_mtu || b->mtu < 256 || b->mtu > 4096 || (b->mtu & (b->mtu - 1)) != 0))
        return "MTU missing or not one of 256, 512, 1024, 2048, 4096";
    return NULL;
}

/* The peer's facts from its CONNECT or its answer. */
static void peer_facts(const hs_body_t *b, rd_peer_facts_t *pf)
{
    memset(pf, 0, sizeof(*pf));
    memcpy(pf->gid, b->gid, 16);
    pf->lid = b->lid;
    pf->link_layer = b->link_layer;
    pf->gid_type = b->gid_type;
    pf->mtu = b->mtu;
    pf->has_psn = b->has_psn;
    pf->psn = b->psn;
    pf->rd_atom = b->rd_atom;
}

/* INIT -> RTR -> RTS against the peer's QPs, one transition at a time
 * (rc_pingpong), with the attributes transport/rdma/qp_attr.c builds from
 * both ports' facts. */
static mc_status_t qps_connect(rd_ep_t *ep, const hs_body_t *b)
{
    rd_nic_t *n = ep->nic;
    rd_transport_t *t = n->t;
    const mc_rdma_verbs_ops_t *v = t->v;
    rd_port_facts_t lf;
    rd_peer_facts_t pf;
    rd_port_facts_from_info(&n->info, n->mtu, &lf);
    peer_facts(b, &pf);
    rd_qp_settings_t qs = t->qs;
    qs.psn = ep->psn;
    char why[200];
    for (unsigned i = 0; i < ep->nqp; i++) {
        rv_qp_attr_t rtr, rts;
        pf.qpn = b->qpns[i];
        mc_status_t st = rd_qp_build(RV_QPS_RTR, &lf, &pf, &qs, QP_ACCESS, &rtr, why, sizeof(why));
        if (st == MC_OK)
            st = rd_qp_build(RV_QPS_RTS, &lf, &pf, &qs, QP_ACCESS, &rts, why, sizeof(why));
        if (st != MC_OK) {
            MC_ERROR(RDMA, "%s: cannot connect to %s@%s: %s", n->name, ep->peer, ep->peer_nic, why);
            return st;
        }
        st = v->modify_qp(ep->qp[i], RV_QPS_RTR, &rtr);
        if (st == MC_OK)
            st = v->modify_qp(ep->qp[i], RV_QPS_RTS, &rts);
        if (st != MC_OK) {
            MC_ERROR(RDMA, "%s: QP %u to %s@%s: cannot reach RTS: %s", n->name,
                     v->qp_num(ep->qp[i]), ep->peer, ep->peer_nic, mc_status_str(st));
            return st;
        }
        ep->rqpn[i] = pf.qpn;
        if (i == 0)
            ep->mtu = rtr.path_mtu;
    }
    atomic_store(&n->last_mtu, ep->mtu);
    return MC_OK;
}

/* ------------------------------------------------------------ active */

static mc_status_t ep_client(rd_ep_t *ep)
{
    if (ep->rpc != NULL)
        return MC_OK;
    mc_rpc_client_opts_t o;
    mc_rpc_client_opts_init(&o);
    o.host = ep->host;
    o.port = ep->port;
    uint64_t to = ep->nic->t->te->o.timeout_us;
    o.call_timeout_us = to;
    o.connect_timeout_us = to < 3000000 ? to : 3000000;
    o.auth_key = te_auth_key(ep->nic->t->te);
    return mc_rpc_client_create(ep->nic->r, &o, &ep->rpc);
}

/* Our side of a handshake message: GID, LID, MTU, link layer, GID type,
 * first PSN and read depth (6 map entries after the caller's). */
static void write_facts(mc_mp_writer_t *w, rd_nic_t *n, uint32_t psn)
{
    pthread_mutex_lock(&n->info_mu); /* a port event may be rewriting it */
    rd_write_port(w, n);
    mc_mp_write_uint(w, MC_F_PSN);
    mc_mp_write_uint(w, psn);
    mc_mp_write_uint(w, MC_F_RD_ATOM);
    /* what our QPs will serve: the cap, bounded by the device */
    uint32_t rd = n->t->qs.rd_atom_cap;
    if (n->info.max_qp_rd_atom && n->info.max_qp_rd_atom < rd)
        rd = n->info.max_qp_rd_atom;
    mc_mp_write_uint(w, rd ? rd : 1);
    mc_mp_write_uint(w, MC_F_INSTANCE);
    mc_mp_write_uint(w, n->t->instance);
    pthread_mutex_unlock(&n->info_mu);
}
#define FACTS_ENTRIES 8

static void hs_reply(void *arg, const mc_rpc_resp_t *resp);

static mc_status_t hs_send(rd_ep_t *ep)
{
    rd_nic_t *n = ep->nic;
    mc_te_t *te = n->t->te;
    mc_status_t st = ep_client(ep);
    if (st != MC_OK)
        return st;
    mc_mp_writer_t *w = mc_rpc_call_begin(ep->rpc);
    mc_mp_write_map(w, 7 + FACTS_ENTRIES);
    mc_mp_write_uint(w, MC_F_READY); /* we send RDMA_READY once at RTS */
    mc_mp_write_bool(w, 1);
    mc_mp_write_uint(w, MC_F_NAME);
    mc_mp_write_cstr(w, te->name);
    mc_mp_write_uint(w, MC_F_HOST);
    mc_mp_write_cstr(w, te->advertise_host);
    mc_mp_write_uint(w, MC_F_PORT);
    mc_mp_write_uint(w, te->port);
    mc_mp_write_uint(w, MC_F_NIC);
    mc_mp_write_cstr(w, n->name);
    mc_mp_write_uint(w, MC_F_PEER_NIC);
    mc_mp_write_cstr(w, ep->peer_nic);
    write_facts(w, n, ep->psn);
    mc_mp_write_uint(w, MC_F_QPNS);
    write_qpns(w, ep);
    st = mc_rpc_call_end(ep->rpc, MC_RPC_RDMA_CONNECT, 0, hs_reply, ep);
    if (st == MC_INPROGRESS) {
        ep->hs_inflight = 1;
        atomic_fetch_add(&n->handshakes, 1);
        return MC_OK;
    }
    return st;
}

static void ep_timer_fn(mc_timer_t *tm, void *arg)
{
    rd_ep_t *ep = arg;
    (void)tm;
    if (ep->state == EP_CONNECTED && !ep->peer_ready) {
        /* no RDMA_READY (lost, or the peer closed meanwhile): post anyway;
         * the QPs retransmit if the peer is not at RTR */
        MC_DEBUG(RDMA, "%s: no RDMA_READY from %s@%s in %u ms: posting", ep->nic->name, ep->peer,
                 ep->peer_nic, RD_READY_WAIT_MS);
        ep->peer_ready = 1;
        rd_ep_flush(ep);
        rd_flush_dirty(ep->nic);
        return;
    }
    if (ep->state != EP_CONNECTING)
        return;
    mc_status_t st = hs_send(ep);
    if (st != MC_OK) {
        rd_nic_t *n = ep->nic;
        rd_ep_close(ep, st, 0); /* may free ep */
        rd_flush_dirty(n);      /* its slices retried on other endpoints */
    }
}

static void hs_reply_body(rd_ep_t *ep, const mc_rpc_resp_t *resp);

static void ready_reply(void *arg, const mc_rpc_resp_t *resp)
{
    rd_ep_t *ep = arg;
    if (ep->freeing || resp->status == MC_OK)
        return;
    /* not delivered: the peer posts after its fallback delay */
    MC_DEBUG(RDMA, "%s: RDMA_READY to %s@%s: %s", ep->nic->name, ep->peer, ep->peer_nic,
             mc_status_str(resp->status));
}

/* Our QPs are at RTS: the passive side may post now (fire and forget: an
 * endpoint freed before it is sent cancels it, and the peer then waits
 * out its fallback). */
static void ready_send(rd_ep_t *ep)
{
    if (ep_client(ep) != MC_OK)
        return;
    write_ends(mc_rpc_call_begin(ep->rpc), ep);
    mc_rpc_call_end(ep->rpc, MC_RPC_RDMA_READY, 0, ready_reply, ep);
}

/* An endpoint closed here retries its pending slices, maybe on other
 * endpoints of this NIC (rd_mark_dirty): they go out now, not at the NIC's
 * next completion or submit, which may never come. */
static void hs_reply(void *arg, const mc_rpc_resp_t *resp)
{
    rd_ep_t *ep = arg;
    rd_nic_t *n = ep->nic;
    if (ep->freeing)
        return;
    hs_reply_body(ep, resp); /* may free ep */
    if (!n->dead)
        rd_flush_dirty(n);
}

static void hs_reply_body(rd_ep_t *ep, const mc_rpc_resp_t *resp)
{
    rd_nic_t *n = ep->nic;
    ep->hs_inflight = 0;
    if (ep->state != EP_CONNECTING) {
        /* connected meanwhile by the peer's CONNECT, or closed */
        rd_ep_maybe_free(ep);
        return;
    }
    hs_body_t b;
    memset(&b, 0, sizeof(b)); /* a failed call has no body: b.error stays "" */
    const char *bad = resp->body ? hs_parse(resp->body, resp->body_len, 0, &b) : NULL;
    if (resp->status == MC_ERR_REJECT_HANDSHAKE && bad == NULL &&
        strstr(b.error, "simultaneous open") != NULL && ep->hs_tries++ < 50) {
        /* the peer initiates this pair: its CONNECT is on the way */
        mc_timer_start(&ep->timer, 2000u << (ep->hs_tries < 5 ? ep->hs_tries : 5), 0);
        return;
    }
    if (resp->status != MC_OK) {
        MC_WARN(RDMA, "%s: handshake with %s@%s failed: %s%s%s", n->name, ep->peer, ep->peer_nic,
                mc_status_str(resp->status), bad == NULL && b.error[0] ? ": " : "",
                bad == NULL ? b.error : "");
        rd_ep_close(
            ep, resp->status == MC_ERR_REJECT_HANDSHAKE ? MC_ERR_REJECT_HANDSHAKE : MC_ERR_ENDPOINT,
            0);
        return;
    }
    if (bad == NULL)
        bad = hs_parse(resp->body, resp->body_len, NEED_QP, &b);
    if (bad == NULL && b.nqpn != ep->nqp)
        bad = "it answered with another number of QPs";
    if (bad == NULL && strcmp(b.nic, ep->peer_nic) != 0)
        bad = "it answered for another NIC";
    if (bad != NULL) {
        MC_WARN(RDMA, "%s: bad handshake answer from %s@%s: %s", n->name, ep->peer, ep->peer_nic,
                bad);
        rd_ep_close(ep, MC_ERR_REJECT_HANDSHAKE, 1);
        return;
    }
    if (b.instance != 0)
        ep->peer_instance = b.instance;
    ep->peer_ready = 1; /* the passive side answered from RTS */
    if (qps_connect(ep, &b) != MC_OK || ep_set_state(ep, EP_CONNECTED) != MC_OK) {
        rd_ep_close(ep, MC_ERR_ENDPOINT, 1);
        return;
    }
    backoff_ok(n, ep->key);
    MC_DEBUG(RDMA, "%s: connected to %s@%s (%u QPs, MTU %u)", n->name, ep->peer, ep->peer_nic,
             ep->nqp, ep->mtu);
    ready_send(ep);
    rd_ep_flush(ep);
}

rd_ep_t *rd_ep_get(rd_nic_t *n, te_seg_t *seg, unsigned rnic, mc_status_t *why)
{
    rd_peer_t *p = RD_PEER(seg);
    if (p == NULL || rnic >= p->nnics) {
        /* re-described since the path was chosen: without rdma (it restarted
         * with tcp only) or with fewer NICs; the retry looks the path up again */
        *why = MC_ERR_ENDPOINT;
        return NULL;
    }
    const char *rname = p->nic[rnic].name;
    /* computed once per descriptor and NIC (racing reactors store the same
     * value) */
    uint64_t key = atomic_load_explicit(&p->key[rnic], memory_order_relaxed);
    if (key == 0) {
        key = rd_ep_key(seg->name, rname);
        atomic_store_explicit(&p->key[rnic], key, memory_order_relaxed);
    }
    /* fast path: the endpoint this descriptor's NIC resolved to last time */
    mc_hnode_t *h;
    MC_HMAP_FOREACH_HASH(&n->eps, h, key)
    {
        rd_ep_t *ep = MC_CONTAINER_OF(h, rd_ep_t, hnode);
        if (ep->via == p && ep->via_nic == rnic) {
            rd_sieve_touch(&ep->snode);
            return ep;
        }
    }
    rd_ep_t *ep = ep_find(n, key, seg->name, rname);
    if (ep != NULL && ep->peer_instance != 0 && p->instance != 0 &&
        ep->peer_instance != p->instance) {
        /* the peer restarted (its descriptor says so): its QPs are gone, and
         * on hardware this endpoint would only fail after timeout x retries */
        MC_INFO(RDMA,
                "%s: %s restarted (instance %016llx -> %016llx): dropping the endpoint to "
                "%s",
                n->name, seg->name, (unsigned long long)ep->peer_instance,
                (unsigned long long)p->instance, rname);
        rd_ep_close(ep, MC_ERR_ENDPOINT, 0);
        backoff_ok(n, key);
        ep = NULL;
    }
    if (ep != NULL) {
        ep->via = p;
        ep->via_nic = rnic;
        rd_sieve_touch(&ep->snode);
        return ep;
    }
    if (backing_off(n, key)) {
        *why = MC_ERR_ENDPOINT;
        return NULL;
    }
    char host[64];
    pthread_mutex_lock(&n->t->te->seg_lock);
    memcpy(host, seg->host, sizeof(host));
    uint16_t port = seg->port;
    pthread_mutex_unlock(&n->t->te->seg_lock);
    ep = ep_new(n, key, seg->name, rname, host, port);
    if (ep == NULL) {
        *why = MC_ERR_NOMEM;
        return NULL;
    }
    ep->active = 1;
    ep->via = p;
    ep->via_nic = rnic;
    ep->peer_instance = p->instance;
    mc_status_t st = qps_create(ep, n->t->qps_per_ep);
    if (st == MC_OK)
        st = ep_set_state(ep, EP_CONNECTING);
    if (st == MC_OK)
        st = hs_send(ep);
    if (st != MC_OK) {
        rd_ep_close(ep, st, 0);
        *why = st;
        return NULL;
    }
    return ep;
}

/* ------------------------------------------------------------ closing */

static void disc_reply(void *arg, const mc_rpc_resp_t *resp)
{
    rd_ep_t *ep = arg;
    (void)resp;
    if (ep->freeing)
        return;
    ep->hs_inflight = 0;
    rd_ep_maybe_free(ep);
}

static void tell_peer(rd_ep_t *ep)
{
    if (ep->nqp == 0 || ep_client(ep) != MC_OK)
        return;
    write_ends(mc_rpc_call_begin(ep->rpc), ep);
    if (mc_rpc_call_end(ep->rpc, MC_RPC_RDMA_DISCONNECT, 0, disc_reply, ep) == MC_INPROGRESS)
        ep->hs_inflight = 1; /* kept until sent and answered (or failed) */
}

void rd_ep_close(rd_ep_t *ep, mc_status_t cause, int tell)
{
    rd_nic_t *n = ep->nic;
    int was_connected = ep->state == EP_CONNECTED;
    if (ep->state == EP_CLOSING || ep_set_state(ep, EP_CLOSING) != MC_OK)
        return; /* closed already (every other state may close) */
    pool_remove(ep);
    mc_timer_stop(&ep->timer);
    ep->cause = cause;
    if (cause != MC_OK) {
        backoff_fail(n, ep->key);
        /* in-flight WRs flush (and are retried as they complete) */
        for (unsigned i = 0; i < ep->nqp; i++)
            n->t->v->modify_qp(ep->qp[i], RV_QPS_ERR, NULL);
        MC_DEBUG(RDMA, "%s: endpoint to %s@%s failed (%s)", n->name, ep->peer, ep->peer_nic,
                 mc_status_str(cause));
    }
    if (tell && (was_connected || ep->active))
        tell_peer(ep);
    /* slices that never reached a QP go elsewhere */
    te_slice_t *s = ep->pend_head;
    ep->pend_head = ep->pend_tail = NULL;
    ep->npending = 0;
    while (s != NULL) {
        te_slice_t *next = RS(s)->next;
        rd_slice_retry(n, s, cause != MC_OK ? cause : MC_ERR_ENDPOINT);
        s = next;
    }
    ep->next = n->closing;
    n->closing = ep;
    rd_ep_maybe_free(ep);
}

void rd_nic_close_all(rd_nic_t *n)
{
    size_t i;
    mc_hnode_t *h;
    /* graceful: no retries (the engine stops); slices fail CANCELED */
    rd_deferred_cancel(n);
    for (;;) {
        rd_ep_t *ep = NULL;
        MC_HMAP_FOREACH(&n->eps, i, h)
        {
            ep = MC_CONTAINER_OF(h, rd_ep_t, hnode);
            break;
        }
        if (ep == NULL)
            break;
        rd_ep_close(ep, MC_ERR_CANCELED, 0);
    }
    /* every QP is in ERR: what was in flight flushes; those slices end
     * CANCELED (the engine is stopping), then the endpoints can go */
    rd_drain(n, 2000000);
    while (n->closing != NULL) {
        rd_ep_t *ep = n->closing;
        n->closing = ep->next;
        ep_free(ep);
    }
}

/* ------------------------------------------------------------ passive */

typedef struct hs_job {
    mc_rpc_req_t *req;
    mc_reactor_t *req_r;
    rd_nic_t *nic;
    int method;
    hs_body_t b;
    /* the answer */
    mc_status_t st;
    char error[160];
    uint32_t qpns[RD_MAX_QPS];
    unsigned nqp;
    uint32_t psn; /* the endpoint's first PSN, for the answer */
} hs_job_t;

static void job_reply(mc_reactor_t *r, void *arg, mc_status_t st)
{
    hs_job_t *j = arg;
    (void)r;
    (void)st;
    mc_mp_writer_t *w = mc_rpc_reply_begin(j->req);
    if (j->st != MC_OK) {
        mc_mp_write_map(w, 1);
        mc_mp_write_uint(w, MC_F_ERROR);
        mc_mp_write_cstr(w, j->error);
    } else if (j->method == MC_RPC_RDMA_CONNECT) {
        rd_nic_t *n = j->nic;
        mc_mp_write_map(w, 2 + FACTS_ENTRIES);
        mc_mp_write_uint(w, MC_F_NIC);
        mc_mp_write_cstr(w, n->name);
        write_facts(w, n, j->psn);
        mc_mp_write_uint(w, MC_F_QPNS);
        mc_mp_write_array(w, j->nqp);
        for (unsigned i = 0; i < j->nqp; i++)
            mc_mp_write_uint(w, j->qpns[i]);
    } else {
        mc_mp_write_map(w, 0);
    }
    mc_rpc_reply_end(j->req, j->st);
    mc_free(j);
}

static void job_done(hs_job_t *j)
{
    if (mc_reactor_call(j->req_r, job_reply, j) != MC_OK)
        mc_free(j); /* that reactor stops: the connection goes with it */
}

static void refuse(hs_job_t *j, mc_status_t st, const char *why)
{
    j->st = st;
    snprintf(j->error, sizeof(j->error), "%s", why);
}

static void accept_on(rd_ep_t *ep, hs_job_t *j)
{
    rd_nic_t *n = ep->nic;
    if (j->b.instance != 0)
        ep->peer_instance = j->b.instance;
    /* the active side reaches RTR only when our answer arrives: what we post
     * before then is dropped by its NIC (and costs an ack timeout); a peer
     * that sends RDMA_READY tells us when */
    ep->peer_ready = !j->b.will_ready;
    if (!ep->peer_ready)
        mc_timer_start(&ep->timer, (uint64_t)RD_READY_WAIT_MS * 1000, 0);
    if (qps_connect(ep, &j->b) != MC_OK || ep_set_state(ep, EP_CONNECTED) != MC_OK) {
        refuse(j, MC_ERR_REJECT_HANDSHAKE,
               "cannot bring the QPs to RTS (link layer, GID type or limits differ: see its log)");
        rd_ep_close(ep, MC_ERR_ENDPOINT, 0);
        return;
    }
    backoff_ok(n, ep->key);
    for (unsigned i = 0; i < ep->nqp; i++)
        j->qpns[i] = n->t->v->qp_num(ep->qp[i]);
    j->nqp = ep->nqp;
    j->psn = ep->psn;
    j->st = MC_OK;
    MC_DEBUG(RDMA, "%s: accepted %s@%s (%u QPs, MTU %u)", n->name, ep->peer, ep->peer_nic, ep->nqp,
             ep->mtu);
    rd_ep_flush(ep); /* slices queued while we were connecting ourselves */
}

static void connect_body(hs_job_t *j, mc_status_t rst);

/* A CONNECT from a new instance of peer: it restarted, and every endpoint
 * of this NIC to its old instance (whatever its NIC) is dead. */
static void drop_restarted(rd_nic_t *n, const char *peer, uint64_t instance)
{
    rd_ep_t *old[16];
    unsigned k = 0;
    size_t i;
    mc_hnode_t *h;
    MC_HMAP_FOREACH(&n->eps, i, h)
    {
        rd_ep_t *ep = MC_CONTAINER_OF(h, rd_ep_t, hnode);
        if (k < 16 && ep->peer_instance != 0 && ep->peer_instance != instance &&
            strcmp(ep->peer, peer) == 0)
            old[k++] = ep;
    }
    for (unsigned m = 0; m < k; m++) {
        MC_INFO(RDMA, "%s: %s restarted: dropping its old endpoint to %s", n->name, peer,
                old[m]->peer_nic);
        uint64_t key = old[m]->key;
        rd_ep_close(old[m], MC_ERR_ENDPOINT, 0);
        backoff_ok(n, key); /* it went on purpose: reconnect at once */
    }
}

/* As hs_reply: what endpoints closed here retried goes out now. */
static void connect_on_nic(mc_reactor_t *r, void *arg, mc_status_t rst)
{
    hs_job_t *j = arg;
    rd_nic_t *n = j->nic;
    (void)r;
    connect_body(j, rst); /* j is gone after */
    if (rst == MC_OK && !n->dead)
        rd_flush_dirty(n);
}

static void connect_body(hs_job_t *j, mc_status_t rst)
{
    rd_nic_t *n = j->nic;
    if (rst != MC_OK || n->dead) {
        refuse(j, MC_ERR_REJECT_HANDSHAKE, "the engine is stopping");
        job_done(j);
        return;
    }
    mc_te_t *te = n->t->te;
    if (j->b.instance != 0)
        drop_restarted(n, j->b.name, j->b.instance);
    uint64_t key = rd_ep_key(j->b.name, j->b.nic);
    rd_ep_t *ep = ep_find(n, key, j->b.name, j->b.nic);
    if (ep != NULL && ep->state == EP_CONNECTED) {
        int same =
            ep->nqp == j->b.nqpn && memcmp(ep->rqpn, j->b.qpns, ep->nqp * sizeof(uint32_t)) == 0;
        if (same) { /* a repeated CONNECT (simultaneous open): same answer */
            for (unsigned i = 0; i < ep->nqp; i++)
                j->qpns[i] = n->t->v->qp_num(ep->qp[i]);
            j->nqp = ep->nqp;
            j->psn = ep->psn;
            j->st = MC_OK;
            job_done(j);
            return;
        }
        /* the peer lost its side: ours goes, the new pair replaces it */
        rd_ep_close(ep, MC_ERR_ENDPOINT, 0);
        backoff_ok(n, key);
        ep = NULL;
    }
    if (ep != NULL && (ep->state == EP_CONNECTING || ep->state == EP_NEW)) {
        char mine[400], theirs[400];
        snprintf(mine, sizeof(mine), "%s@%s", te->name, n->name);
        snprintf(theirs, sizeof(theirs), "%s@%s", j->b.name, j->b.nic);
        if (strcmp(mine, theirs) < 0) {
            refuse(j, MC_ERR_REJECT_HANDSHAKE, "simultaneous open: the other side initiates");
            job_done(j);
            return;
        }
        if (ep->nqp != j->b.nqpn) { /* differently configured peers: take its count */
            rd_ep_close(ep, MC_ERR_ENDPOINT, 0);
            backoff_ok(n, key);
            ep = NULL;
        } else {
            accept_on(ep, j);
            job_done(j);
            return;
        }
    }
    ep = ep_new(n, key, j->b.name, j->b.nic, j->b.host, j->b.port);
    if (ep == NULL) {
        refuse(j, MC_ERR_REJECT_HANDSHAKE, "out of memory");
        job_done(j);
        return;
    }
    if (qps_create(ep, j->b.nqpn) != MC_OK) {
        refuse(j, MC_ERR_REJECT_HANDSHAKE, "cannot create QPs");
        rd_ep_close(ep, MC_OK, 0);
        job_done(j);
        return;
    }
    accept_on(ep, j);
    job_done(j);
}

static void disconnect_on_nic(mc_reactor_t *r, void *arg, mc_status_t rst)
{
    hs_job_t *j = arg;
    rd_nic_t *n = j->nic;
    (void)r;
    if (rst == MC_OK && !n->dead) {
        uint64_t key = rd_ep_key(j->b.name, j->b.nic);
        rd_ep_t *ep = ep_find(n, key, j->b.name, j->b.nic);
        /* only the pairing it names: a newer one stays */
        if (ep != NULL && ep->state == EP_CONNECTED && ep->rqpn[0] == j->b.qpns[0]) {
            MC_DEBUG(RDMA, "%s: %s@%s dropped its endpoint: dropping ours", n->name, j->b.name,
                     j->b.nic);
            rd_ep_close(ep, MC_ERR_ENDPOINT, 0);
            backoff_ok(n, key); /* it went on purpose: reconnect at once when needed */
            rd_flush_dirty(n);  /* its slices, retried on other endpoints */
        }
    }
    j->st = MC_OK;
    job_done(j);
}

static void ready_on_nic(mc_reactor_t *r, void *arg, mc_status_t rst)
{
    hs_job_t *j = arg;
    rd_nic_t *n = j->nic;
    (void)r;
    if (rst == MC_OK && !n->dead) {
        uint64_t key = rd_ep_key(j->b.name, j->b.nic);
        rd_ep_t *ep = ep_find(n, key, j->b.name, j->b.nic);
        /* only the pairing it names */
        if (ep != NULL && ep->state == EP_CONNECTED && ep->rqpn[0] == j->b.qpns[0] &&
            !ep->peer_ready) {
            ep->peer_ready = 1;
            mc_timer_stop(&ep->timer);
            rd_ep_flush(ep);
            rd_flush_dirty(n);
        }
    }
    j->st = MC_OK;
    job_done(j);
}

static void h_hs(void *ctx, mc_rpc_req_t *req, int method)
{
    mc_te_t *te = ctx;
    rd_transport_t *t = RD_OF(te);
    hs_job_t *j = mc_calloc(1, sizeof(*j));
    if (j == NULL) {
        mc_rpc_reply(req, MC_ERR_NOMEM, NULL, 0);
        return;
    }
    j->req = req;
    j->req_r = mc_rpc_req_reactor(req);
    j->method = method;
    size_t blen;
    const uint8_t *body = mc_rpc_req_body(req, &blen);
    /* DISCONNECT names the pairing by its QPNS only (no GID/MTU) */
    int need = method == MC_RPC_RDMA_CONNECT ? NEED_NAME | NEED_NICS | NEED_ADDR | NEED_QP
                                             : NEED_NAME | NEED_NICS;
    const char *bad = hs_parse(body, blen, need, &j->b);
    if (bad == NULL && method != MC_RPC_RDMA_CONNECT && j->b.nqpn == 0)
        bad = "QPNS missing";
    if (bad != NULL) {
        MC_WARN(RDMA, "%s: refused a handshake message: %s", mc_rpc_req_peer(req), bad);
        refuse(j, MC_ERR_INVALID_PARAMS, bad);
        job_reply(NULL, j, MC_OK);
        return;
    }
    if (t == NULL || atomic_load(&te->stopping)) {
        refuse(j, MC_ERR_REJECT_HANDSHAKE, "the rdma transport is not installed here");
        job_reply(NULL, j, MC_OK);
        return;
    }
    for (unsigned i = 0; i < t->nnics && j->nic == NULL; i++)
        if (strcmp(t->nics[i].name, j->b.peer_nic) == 0)
            j->nic = &t->nics[i];
    if (j->nic == NULL) {
        char why[160];
        snprintf(why, sizeof(why), "no NIC '%.60s' in segment '%.60s'", j->b.peer_nic, te->name);
        refuse(j, MC_ERR_REJECT_HANDSHAKE, why);
        job_reply(NULL, j, MC_OK);
        return;
    }
    mc_reactor_call_fn_t fn = method == MC_RPC_RDMA_CONNECT      ? connect_on_nic
                              : method == MC_RPC_RDMA_DISCONNECT ? disconnect_on_nic
                                                                 : ready_on_nic;
    if (mc_reactor_call(j->nic->r, fn, j) != MC_OK) {
        refuse(j, MC_ERR_REJECT_HANDSHAKE, "the engine is stopping");
        job_reply(NULL, j, MC_OK);
    }
}

static void h_connect(void *ctx, mc_rpc_req_t *req)
{
    h_hs(ctx, req, MC_RPC_RDMA_CONNECT);
}

static void h_disconnect(void *ctx, mc_rpc_req_t *req)
{
    h_hs(ctx, req, MC_RPC_RDMA_DISCONNECT);
}

static void h_ready(void *ctx, mc_rpc_req_t *req)
{
    h_hs(ctx, req, MC_RPC_RDMA_READY);
}

void rd_ep_register_server(mc_te_t *te)
{
    mc_rpc_server_register(te->srv, MC_RPC_RDMA_CONNECT, h_connect, te);
    mc_rpc_server_register(te->srv, MC_RPC_RDMA_DISCONNECT, h_disconnect, te);
    mc_rpc_server_register(te->srv, MC_RPC_RDMA_READY, h_ready, te);
}
