/*
 * The QP attribute builder (transport/rdma/qp_attr.c), table-driven: RoCE
 * and InfiniBand addressing (GRH, sgid_index = the GID chosen at open,
 * dlid, GRH across IB subnets), read depths capped by both devices, PSNs
 * (random announced, 0 for older peers), the settings (traffic class,
 * service level, timeout, retries), masks per transition, and the
 * refusals (link layers or GID types differ, no GID, LID 0, no common MTU).
 * Also the device validation run at open and the give-up time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "transport/rdma/qp_attr.h"

static const uint8_t V4_LOCAL[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
static const uint8_t V4_PEER[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
static const uint8_t IB_LOCAL[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 1};
static const uint8_t IB_PEER[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 2};
static const uint8_t IB_OTHER_SUBNET[16] = {0xfe, 0x80, 0,    0, 0, 0, 0, 7,
                                            0,    2,    0xc9, 3, 0, 0, 0, 3};

static rd_port_facts_t roce(void)
{
    rd_port_facts_t l = {.port = 1,
                         .link_layer = RV_LL_ETH,
                         .gid_index = 3,
                         .gid_type = RV_GID_TYPE_ROCE_V2,
                         .mtu = 4096,
                         .max_qp_rd_atom = 16,
                         .max_qp_init_rd_atom = 16};
    memcpy(l.gid, V4_LOCAL, 16);
    return l;
}

static rd_port_facts_t ib(void)
{
    rd_port_facts_t l = {.port = 1,
                         .link_layer = RV_LL_IB,
                         .lid = 7,
                         .gid_index = 0,
                         .gid_type = RV_GID_TYPE_IB,
                         .mtu = 4096,
                         .max_qp_rd_atom = 16,
                         .max_qp_init_rd_atom = 16};
    memcpy(l.gid, IB_LOCAL, 16);
    return l;
}

static rd_peer_facts_t roce_peer(void)
{
    rd_peer_facts_t p = {.qpn = 0x1234,
                         .link_layer = RV_LL_ETH,
                         .gid_type = RV_GID_TYPE_ROCE_V2,
                         .mtu = 4096,
                         .has_psn = 1,
                         .psn = 0xabcdef,
                         .rd_atom = 16};
    memcpy(p.gid, V4_PEER, 16);
    return p;
}

static rd_peer_facts_t ib_peer(void)
{
    rd_peer_facts_t p = {.qpn = 0x99,
                         .lid = 9,
                         .link_layer = RV_LL_IB,
                         .gid_type = RV_GID_TYPE_IB,
                         .mtu = 2048,
                         .has_psn = 1,
                         .psn = 42,
                         .rd_atom = 16};
    memcpy(p.gid, IB_PEER, 16);
    return p;
}

typedef struct rtr_case {
    const char *name;
    rd_port_facts_t l;
    rd_peer_facts_t p;
    int tc;         /* settings.traffic_class */
    uint8_t set_sl; /* settings.service_level */
    /* expected */
    mc_status_t st;
    const char *why; /* substring, for refusals */
    uint8_t is_global, sgid_index, traffic_class, sl, max_dest_rd_atomic;
    uint16_t dlid;
    uint32_t mtu, rq_psn;
} rtr_case_t;

static void rtr_attributes_follow_the_link_layer(void **state)
{
    (void)state;
    rd_port_facts_t shallow = roce(), ib_far = ib(), no_gid = roce(), v1 = roce();
    shallow.max_qp_rd_atom = 4;
    no_gid.gid_index = -1;
    v1.gid_type = RV_GID_TYPE_ROCE_V1;
    rd_peer_facts_t old = roce_peer(), lid0 = ib_peer(), far = ib_peer(), eth = roce_peer(),
                    mtu = roce_peer(), nullgid = roce_peer(), qp0 = roce_peer();
    old.has_psn = 0;
    old.link_layer = 0;
    old.gid_type = 0;
    old.rd_atom = 0;
    lid0.lid = 0;
    memcpy(far.gid, IB_OTHER_SUBNET, 16);
    mtu.mtu = 100;
    memset(nullgid.gid, 0, 16);
    qp0.qpn = 0;
    (void)ib_far;
    const rtr_case_t cases[] = {
        {"RoCE: GRH from the chosen GID, TC set", roce(), roce_peer(), 96, 3, MC_OK, NULL, 1, 3, 96,
         3, 16, 0, 4096, 0xabcdef},
        {"RoCE: TC unset is 0", roce(), roce_peer(), -1, 0, MC_OK, NULL, 1, 3, 0, 0, 16, 0, 4096,
         0xabcdef},
        {"RoCE: read depth capped by our device", shallow, roce_peer(), -1, 0, MC_OK, NULL, 1, 3, 0,
         0, 4, 0, 4096, 0xabcdef},
        {"RoCE: an older peer (no PSN, no link layer) gets PSN 0", roce(), old, -1, 0, MC_OK, NULL,
         1, 3, 0, 0, 16, 0, 4096, 0},
        {"IB: routed by LID, no GRH in one subnet", ib(), ib_peer(), 32, 5, MC_OK, NULL, 0, 0, 0, 5,
         16, 9, 2048, 42},
        {"IB: GRH across subnets, TC in it", ib(), far, 32, 0, MC_OK, NULL, 1, 0, 32, 0, 16, 9,
         2048, 42},
        {"refused: link layers differ", ib(), eth, -1, 0, MC_ERR_INVALID_ARGUMENT,
         "link layers differ: ours is InfiniBand, the peer's Ethernet"},
        {"refused: GID types differ", v1, roce_peer(), -1, 0, MC_ERR_INVALID_ARGUMENT,
         "GID types differ: ours is RoCE v1, the peer's RoCE v2"},
        {"refused: no local GID on RoCE", no_gid, roce_peer(), -1, 0, MC_ERR_INVALID_ARGUMENT,
         "no usable local GID"},
        {"refused: a null peer GID on RoCE", roce(), nullgid, -1, 0, MC_ERR_INVALID_ARGUMENT,
         "the peer's GID is null"},
        {"refused: LID 0 on IB", ib(), lid0, -1, 0, MC_ERR_INVALID_ARGUMENT, "LID is 0"},
        {"refused: no common MTU", roce(), mtu, -1, 0, MC_ERR_INVALID_ARGUMENT,
         "no common MTU (ours 4096, the peer's 100)"},
        {"refused: QP number 0", roce(), qp0, -1, 0, MC_ERR_INVALID_ARGUMENT, "QP number is 0"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const rtr_case_t *c = &cases[i];
        rd_qp_settings_t s;
        rd_qp_settings_init(&s);
        s.traffic_class = c->tc;
        s.service_level = c->set_sl;
        rv_qp_attr_t a;
        char why[200];
        mc_status_t st = rd_qp_build(RV_QPS_RTR, &c->l, &c->p, &s, 7, &a, why, sizeof(why));
        print_message("case: %s\n", c->name);
        assert_int_equal(st, c->st);
        if (st != MC_OK) {
            assert_non_null(strstr(why, c->why));
            continue;
        }
        assert_int_equal(a.mask, RV_QP_STATE | RV_QP_AV | RV_QP_PATH_MTU | RV_QP_DEST_QPN |
                                     RV_QP_RQ_PSN | RV_QP_MAX_DEST_RD_ATOMIC | RV_QP_MIN_RNR_TIMER);
        assert_int_equal(a.ah.is_global, c->is_global);
        assert_int_equal(a.ah.sgid_index, c->sgid_index);
        assert_int_equal(a.ah.traffic_class, c->traffic_class);
        assert_int_equal(a.ah.sl, c->sl);
        assert_int_equal(a.ah.dlid, c->dlid);
        assert_int_equal(a.max_dest_rd_atomic, c->max_dest_rd_atomic);
        assert_int_equal(a.path_mtu, c->mtu);
        assert_int_equal(a.rq_psn, c->rq_psn);
        assert_int_equal(a.dest_qp_num, c->p.qpn);
        assert_int_equal(a.min_rnr_timer, RD_QP_MIN_RNR_TIMER);
        assert_int_equal(a.ah.port, 1);
        if (a.ah.is_global) {
            assert_memory_equal(a.ah.dgid, c->p.gid, 16);
            assert_int_equal(a.ah.hop_limit, RD_QP_HOP_LIMIT);
        }
    }
}

typedef struct rts_case {
    const char *name;
    uint32_t init_rd, peer_rd;
    int has_psn;
    uint8_t timeout, retry;
    uint8_t max_rd_atomic;
    uint32_t sq_psn;
} rts_case_t;

static void rts_attributes_carry_psn_depth_and_retries(void **state)
{
    (void)state;
    const rts_case_t cases[] = {
        {"defaults", 16, 16, 1, 14, 7, 16, 0x5a5a5a},
        {"our initiator depth caps", 8, 16, 1, 14, 7, 8, 0x5a5a5a},
        {"the peer's responder depth caps", 16, 2, 1, 14, 7, 2, 0x5a5a5a},
        {"unknown depths: the cap (16)", 0, 0, 1, 14, 7, 16, 0x5a5a5a},
        {"MC_IB_TIMEOUT / MC_IB_RETRY_CNT", 16, 16, 1, 20, 3, 16, 0x5a5a5a},
        {"an older peer: PSN 0", 16, 16, 0, 14, 7, 16, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const rts_case_t *c = &cases[i];
        print_message("case: %s\n", c->name);
        rd_port_facts_t l = roce();
        l.max_qp_init_rd_atom = c->init_rd;
        rd_peer_facts_t p = roce_peer();
        p.rd_atom = c->peer_rd;
        p.has_psn = c->has_psn;
        rd_qp_settings_t s;
        rd_qp_settings_init(&s);
        s.timeout = c->timeout;
        s.retry_cnt = c->retry;
        s.psn = 0x15a5a5a; /* over 24 bits: masked */
        rv_qp_attr_t a;
        assert_int_equal(rd_qp_build(RV_QPS_RTS, &l, &p, &s, 7, &a, NULL, 0), MC_OK);
        assert_int_equal(a.mask, RV_QP_STATE | RV_QP_SQ_PSN | RV_QP_TIMEOUT | RV_QP_RETRY_CNT |
                                     RV_QP_RNR_RETRY | RV_QP_MAX_QP_RD_ATOMIC);
        assert_int_equal(a.max_rd_atomic, c->max_rd_atomic);
        assert_int_equal(a.sq_psn, c->sq_psn);
        assert_int_equal(a.timeout, c->timeout);
        assert_int_equal(a.retry_cnt, c->retry);
        assert_int_equal(a.rnr_retry, RD_QP_DEFAULT_RNR_RETRY);
    }
}

static void init_attributes_name_port_pkey_and_access(void **state)
{
    (void)state;
    rd_port_facts_t l = ib();
    l.port = 2;
    rd_qp_settings_t s;
    rd_qp_settings_init(&s);
    s.pkey_index = 3;
    rv_qp_attr_t a;
    assert_int_equal(rd_qp_build(RV_QPS_INIT, &l, NULL, &s, 7, &a, NULL, 0), MC_OK);
    assert_int_equal(a.mask, RV_QP_STATE | RV_QP_PKEY_INDEX | RV_QP_PORT | RV_QP_ACCESS_FLAGS);
    assert_int_equal(a.port, 2);
    assert_int_equal(a.pkey_index, 3);
    assert_int_equal(a.access, 7);
    char why[100];
    assert_int_equal(rd_qp_build(RV_QPS_ERR, &l, NULL, &s, 7, &a, why, sizeof(why)),
                     MC_ERR_INVALID_ARGUMENT);
}

static void device_validation_names_the_first_problem(void **state)
{
    (void)state;
    rv_dev_info_t ok = {.port = 1,
                        .port_active = 1,
                        .port_state = 4,
                        .link_layer = RV_LL_ETH,
                        .gid_index = 3,
                        .gid_tbl_len = 4,
                        .active_mtu = 1024};
    char why[256];
    assert_int_equal(rd_dev_validate(&ok, why, sizeof(why)), MC_OK);
    rv_dev_info_t d = ok;
    d.port_active = 0;
    d.port_state = 1;
    assert_int_equal(rd_dev_validate(&d, why, sizeof(why)), MC_ERR_DEVICE_NOT_FOUND);
    assert_non_null(strstr(why, "port 1 is DOWN, not ACTIVE"));
    d = ok;
    d.link_layer = RV_LL_UNKNOWN;
    rd_dev_validate(&d, why, sizeof(why));
    assert_non_null(strstr(why, "unknown link layer"));
    d = ok;
    d.gid_tbl_len = 0;
    rd_dev_validate(&d, why, sizeof(why));
    assert_non_null(strstr(why, "no GID table"));
    d = ok;
    d.gid_index = -1;
    snprintf(d.gid_why, sizeof(d.gid_why), "no usable GID (4 slots, ...)");
    rd_dev_validate(&d, why, sizeof(why));
    assert_non_null(strstr(why, "no usable GID (4 slots"));
    assert_non_null(strstr(why, "RoCE needs an IP address"));
    d = ok;
    d.link_layer = RV_LL_IB;
    d.lid = 0;
    rd_dev_validate(&d, why, sizeof(why));
    assert_non_null(strstr(why, "LID 0 (no subnet manager"));
    d.lid = 5;
    assert_int_equal(rd_dev_validate(&d, why, sizeof(why)), MC_OK);
}

static void a_silent_peer_is_given_up_after_timeout_times_retries(void **state)
{
    (void)state;
    /* 4.096 us * 2^14 = 67.1 ms per try, 8 tries */
    assert_int_equal(rd_qp_give_up_ns(14, 7), 8ull * (4096ull << 14));
    assert_int_equal(rd_qp_give_up_ns(1, 0), 8192);
    assert_int_equal(rd_qp_give_up_ns(0, 7), UINT64_MAX); /* 0 = wait forever */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rtr_attributes_follow_the_link_layer),
        cmocka_unit_test(rts_attributes_carry_psn_depth_and_retries),
        cmocka_unit_test(init_attributes_name_port_pkey_and_access),
        cmocka_unit_test(device_validation_names_the_first_problem),
        cmocka_unit_test(a_silent_peer_is_given_up_after_timeout_times_retries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
