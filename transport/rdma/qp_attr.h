/*
 * qp_attr.h - the attributes of each QP transition, from the facts of the
 * two ports and the settings (pure: no verbs call, no environment).
 *
 * What hardware needs and the emulated provider does not check by itself:
 *  - the link layer decides the address: RoCE (Ethernet) always carries a
 *    GRH, leaves from the local GID slot chosen at open (sgid_index) to the
 *    peer's GID, with the traffic class (DSCP on a lossless fabric) set;
 *    InfiniBand routes by LID (dlid != 0) and adds a GRH only across
 *    subnets. Two link layers, or RoCE v1 against v2, cannot talk: refused.
 *  - read depth: what we serve at once (max_dest_rd_atomic) is capped by
 *    our device's max_qp_rd_atom, what we keep in flight (max_rd_atomic) by
 *    our max_qp_init_rd_atom and the peer's responder depth; NICs refuse
 *    RTR/RTS beyond their limits.
 *  - PSNs: each side starts its send PSN at a random 24-bit value it
 *    announces in the handshake; the peer's rq_psn is that value. A peer
 *    that announced none (an older mooncake-c) uses 0 both ways.
 *  - ack timeout, retries, RNR retries and service level from the settings
 *    (MC_IB_TIMEOUT, MC_IB_RETRY_CNT, MC_IB_SL, MC_IB_TC).
 */
#ifndef MC_TRANSPORT_RDMA_QP_ATTR_H
#define MC_TRANSPORT_RDMA_QP_ATTR_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "transport/rdma/verbs.h"

/* Our side: the opened port (rv_dev_info_t) and the MTU we announce. */
typedef struct rd_port_facts {
    uint8_t port;
    int link_layer;
    uint16_t lid;
    int gid_index; /* the slot chosen at open; -1 none */
    uint8_t gid[16];
    uint8_t gid_type;
    uint32_t mtu;                 /* min(active, configured) */
    uint32_t max_qp_rd_atom;      /* 0 unknown */
    uint32_t max_qp_init_rd_atom; /* 0 unknown */
} rd_port_facts_t;

/* The peer, from its handshake message. */
typedef struct rd_peer_facts {
    uint32_t qpn;
    uint8_t gid[16];
    uint16_t lid;
    int link_layer;   /* 0: not sent (an older peer) */
    uint8_t gid_type; /* 0: not sent */
    uint32_t mtu;
    int has_psn; /* it announced its PSN (else 0 both ways) */
    uint32_t psn;
    uint32_t rd_atom; /* the reads it serves at once, 0: not sent */
} rd_peer_facts_t;

typedef struct rd_qp_settings {
    int traffic_class; /* -1: not set (0 on the wire) */
    uint8_t service_level;
    uint8_t timeout;   /* 1..31 */
    uint8_t retry_cnt; /* 0..7 */
    uint8_t rnr_retry; /* 0..7 */
    uint16_t pkey_index;
    uint32_t rd_atom_cap; /* the most reads in flight we ask for (16) */
    uint32_t psn;         /* our first send PSN (24 bits) */
} rd_qp_settings_t;

#define RD_QP_DEFAULT_TIMEOUT 14 /* 4.096 us * 2^14 = 67 ms per try (upstream's) */
#define RD_QP_DEFAULT_RETRY_CNT 7
#define RD_QP_DEFAULT_RNR_RETRY 7
#define RD_QP_DEFAULT_RD_ATOM 16
#define RD_QP_MIN_RNR_TIMER 12 /* 0.64 ms */
#define RD_QP_HOP_LIMIT 255

/* Defaults above, traffic class unset, SL 0, pkey index 0, psn 0. */
void rd_qp_settings_init(rd_qp_settings_t *s);

/* The attributes (with their mask) of the transition to `to` (INIT, RTR or
 * RTS; the peer is unused for INIT). MC_OK; MC_ERR_INVALID_ARGUMENT with
 * why naming the problem (link layers differ, GID types differ, no local
 * GID, a zero LID on InfiniBand, a zero QP number, no common MTU). */
mc_status_t rd_qp_build(rv_qp_state_t to, const rd_port_facts_t *l, const rd_peer_facts_t *p,
                        const rd_qp_settings_t *s, int access, rv_qp_attr_t *out, char *why,
                        size_t whylen);

/* Our facts from an open context's info and the MTU we announce. */
void rd_port_facts_from_info(const rv_dev_info_t *info, uint32_t mtu, rd_port_facts_t *out);

/* Is this opened port usable (at open, before anything is set up on it)?
 * The port ACTIVE, its link layer known, a GID table with a usable GID
 * (RoCE needs one to address anything; gid_why says why there is none),
 * a LID on InfiniBand (0: no subnet manager configured the port), an MTU.
 * MC_OK, or MC_ERR_DEVICE_NOT_FOUND with why naming the first problem. */
mc_status_t rd_dev_validate(const rv_dev_info_t *info, char *why, size_t whylen);

/* How long an RC QP takes to give up on a silent peer: (retry_cnt + 1)
 * tries of 4.096 us * 2^timeout (0 = never: UINT64_MAX). */
uint64_t rd_qp_give_up_ns(uint8_t timeout, uint8_t retry_cnt);

#endif /* MC_TRANSPORT_RDMA_QP_ATTR_H */
