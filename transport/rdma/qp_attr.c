/*
 * qp_attr.c - QP transition attributes from port facts, peer facts and
 * settings (qp_attr.h). Pure.
 */
#include <stdio.h>
#include <string.h>

#include "transport/rdma/gid.h"
#include "transport/rdma/qp_attr.h"

void rd_qp_settings_init(rd_qp_settings_t *s)
{
    memset(s, 0, sizeof(*s));
    s->traffic_class = -1;
    s->timeout = RD_QP_DEFAULT_TIMEOUT;
    s->retry_cnt = RD_QP_DEFAULT_RETRY_CNT;
    s->rnr_retry = RD_QP_DEFAULT_RNR_RETRY;
    s->rd_atom_cap = RD_QP_DEFAULT_RD_ATOM;
}

void rd_port_facts_from_info(const rv_dev_info_t *info, uint32_t mtu, rd_port_facts_t *out)
{
    memset(out, 0, sizeof(*out));
    out->port = info->port ? info->port : 1;
    out->link_layer = info->link_layer;
    out->lid = info->lid;
    out->gid_index = info->gid_index;
    memcpy(out->gid, info->gid, 16);
    out->gid_type = info->gid_type;
    out->mtu = mtu;
    out->max_qp_rd_atom = info->max_qp_rd_atom;
    out->max_qp_init_rd_atom = info->max_qp_init_rd_atom;
}

static uint32_t min_known(uint32_t a, uint32_t b)
{
    if (b == 0)
        return a;
    return a < b ? a : b;
}

static uint8_t depth(uint32_t v)
{
    if (v == 0)
        return 1; /* a device that serves no read at all still takes 1 */
    return v > 255 ? 255 : (uint8_t)v;
}

static mc_status_t bad(char *why, size_t len, const char *fmt, const char *a, const char *b)
{
    if (why != NULL && len > 0)
        snprintf(why, len, fmt, a, b);
    return MC_ERR_INVALID_ARGUMENT;
}

static mc_status_t build_rtr(const rd_port_facts_t *l, const rd_peer_facts_t *p,
                             const rd_qp_settings_t *s, rv_qp_attr_t *a, char *why, size_t wl)
{
    if (p->qpn == 0 || p->qpn > 0xffffff)
        return bad(why, wl, "the peer's QP number is 0 or over 24 bits%s%s", "", "");
    if (p->link_layer != RV_LL_UNKNOWN && l->link_layer != RV_LL_UNKNOWN &&
        p->link_layer != l->link_layer)
        return bad(why, wl, "link layers differ: ours is %s, the peer's %s",
                   rd_link_layer_str(l->link_layer), rd_link_layer_str(p->link_layer));
    uint32_t mtu = p->mtu < l->mtu ? p->mtu : l->mtu;
    if (mtu < 256 || mtu > 4096 || (mtu & (mtu - 1)) != 0) {
        if (why != NULL && wl > 0)
            snprintf(why, wl, "no common MTU (ours %u, the peer's %u)", l->mtu, p->mtu);
        return MC_ERR_INVALID_ARGUMENT;
    }
    int ib = l->link_layer == RV_LL_IB;
    a->path_mtu = mtu;
    a->dest_qp_num = p->qpn;
    a->rq_psn = p->has_psn ? p->psn & 0xffffff : 0;
    a->max_dest_rd_atomic = depth(min_known(s->rd_atom_cap, l->max_qp_rd_atom));
    a->min_rnr_timer = RD_QP_MIN_RNR_TIMER;
    a->ah.port = l->port;
    a->ah.sl = s->service_level;
    if (ib) {
        if (p->lid == 0)
            return bad(why, wl,
                       "the peer's LID is 0 on InfiniBand (its port is not "
                       "configured by a subnet manager)%s%s",
                       "", "");
        a->ah.dlid = p->lid;
        /* a GRH only when the peer is in another subnet (prefix = first 8
         * bytes of the GIDs) */
        a->ah.is_global = memcmp(l->gid, p->gid, 8) != 0 && !rd_gid_is_null(p->gid);
    } else {
        if (l->gid_index < 0)
            return bad(why, wl, "no usable local GID: RoCE needs one%s%s", "", "");
        if (rd_gid_is_null(p->gid))
            return bad(why, wl, "the peer's GID is null: RoCE needs one%s%s", "", "");
        if (p->gid_type != RV_GID_TYPE_NONE && l->gid_type != RV_GID_TYPE_NONE &&
            p->gid_type != l->gid_type)
            return bad(why, wl, "GID types differ: ours is %s, the peer's %s",
                       rd_gid_type_str(l->gid_type), rd_gid_type_str(p->gid_type));
        a->ah.is_global = 1;
        a->ah.dlid = 0;
    }
    if (a->ah.is_global) {
        memcpy(a->ah.dgid, p->gid, 16);
        a->ah.sgid_index = (uint8_t)(l->gid_index < 0 ? 0 : l->gid_index);
        a->ah.hop_limit = RD_QP_HOP_LIMIT;
        a->ah.traffic_class = s->traffic_class >= 0 ? (uint8_t)s->traffic_class : 0;
    }
    a->mask |= RV_QP_AV | RV_QP_PATH_MTU | RV_QP_DEST_QPN | RV_QP_RQ_PSN |
               RV_QP_MAX_DEST_RD_ATOMIC | RV_QP_MIN_RNR_TIMER;
    return MC_OK;
}

mc_status_t rd_qp_build(rv_qp_state_t to, const rd_port_facts_t *l, const rd_peer_facts_t *p,
                        const rd_qp_settings_t *s, int access, rv_qp_attr_t *out, char *why,
                        size_t whylen)
{
    rv_qp_attr_t a;
    memset(&a, 0, sizeof(a));
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    a.mask = RV_QP_STATE;
    mc_status_t st = MC_OK;
    switch (to) {
    case RV_QPS_INIT:
        a.port = l->port;
        a.pkey_index = s->pkey_index;
        a.access = access;
        a.mask |= RV_QP_PKEY_INDEX | RV_QP_PORT | RV_QP_ACCESS_FLAGS;
        break;
    case RV_QPS_RTR:
        st = build_rtr(l, p, s, &a, why, whylen);
        break;
    case RV_QPS_RTS:
        /* a peer that announced no PSN (older) expects 0 */
        a.sq_psn = p->has_psn ? s->psn & 0xffffff : 0;
        a.timeout = s->timeout;
        a.retry_cnt = s->retry_cnt > 7 ? 7 : s->retry_cnt;
        a.rnr_retry = s->rnr_retry > 7 ? 7 : s->rnr_retry;
        a.max_rd_atomic =
            depth(min_known(min_known(s->rd_atom_cap, l->max_qp_init_rd_atom), p->rd_atom));
        a.mask |= RV_QP_SQ_PSN | RV_QP_TIMEOUT | RV_QP_RETRY_CNT | RV_QP_RNR_RETRY |
                  RV_QP_MAX_QP_RD_ATOMIC;
        break;
    default:
        st = bad(why, whylen, "no attributes for a transition to %s%s", rv_qp_state_str(to), "");
        break;
    }
    if (st == MC_OK)
        *out = a;
    return st;
}

mc_status_t rd_dev_validate(const rv_dev_info_t *d, char *why, size_t len)
{
    static const char *const states[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"};
    const char *sn = d->port_state >= 0 && d->port_state < 6 ? states[d->port_state] : "?";
    if (!d->port_active)
        snprintf(why, len, "port %u is %s, not ACTIVE (cable, switch, or the subnet manager)",
                 d->port, d->port_state ? sn : "not ACTIVE");
    else if (d->link_layer != RV_LL_IB && d->link_layer != RV_LL_ETH)
        snprintf(why, len, "port %u has an unknown link layer", d->port);
    else if (d->gid_tbl_len == 0)
        snprintf(why, len, "port %u has no GID table", d->port);
    else if (d->gid_index < 0)
        snprintf(why, len, "port %u: %s%s", d->port, d->gid_why[0] ? d->gid_why : "no usable GID",
                 d->link_layer == RV_LL_ETH ? " (RoCE needs an IP address on the netdev)" : "");
    else if (d->link_layer == RV_LL_IB && d->lid == 0)
        snprintf(why, len, "port %u is InfiniBand with LID 0 (no subnet manager configured it)",
                 d->port);
    else if (d->active_mtu < 256)
        snprintf(why, len, "port %u reports no active MTU", d->port);
    else
        return MC_OK;
    return MC_ERR_DEVICE_NOT_FOUND;
}

uint64_t rd_qp_give_up_ns(uint8_t timeout, uint8_t retry_cnt)
{
    if (timeout == 0)
        return UINT64_MAX;
    /* 4096 ns * 2^timeout per try */
    return (uint64_t)(retry_cnt + 1u) * (4096ull << timeout);
}
