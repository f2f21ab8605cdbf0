/*
 * The emulated verbs provider (transport/rdma/verbs_emu.c) and the real
 * provider's discovery: QP state rules, MR access checks (lkey, rkey, range,
 * access flags), error completions moving a QP to ERR and flushing what
 * follows, completion channels (armed once, an fd libevent can watch),
 * injected faults (error completions, a device going down), RDMA
 * READ/WRITE between two processes, and the strictness hardware has: the
 * GID table and its choice, RTR refusing a sgid_index other than the
 * advertised GID (the old hard-coded 0), another link layer, a missing GRH
 * on RoCE, a zero LID on IB and read depths beyond the device; inactive
 * ports and empty GID tables reported; IB ports routed by LID; wrong PSNs
 * never acknowledged; black-hole mode failing a lost packet only after
 * timeout x retries.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport/rdma/gid.h"
#include "transport/rdma/qp_attr.h"
#include "transport/rdma/verbs.h"
#include "util/log.h"
#include "util/time.h"

static const mc_rdma_verbs_ops_t *V = &rv_emu_ops;
static const rv_port_opts_t OO = {.port = 1, .gid_index = -1, .sysfs_root = "/sys"};

typedef struct side {
    rv_ctx_t *ctx;
    rv_pd_t *pd;
    rv_cq_t *cq;
    rv_qp_t *qp;
    rv_dev_info_t info;
    uint32_t psn;
} side_t;

static void side_open(side_t *s, const char *dev)
{
    static uint32_t psn = 0x123456;
    memset(s, 0, sizeof(*s));
    assert_int_equal(V->open(dev, &OO, &s->ctx), MC_OK);
    assert_int_equal(V->query(s->ctx, &s->info), MC_OK);
    assert_int_equal(V->alloc_pd(s->ctx, &s->pd), MC_OK);
    assert_int_equal(V->create_cq(s->ctx, 64, &s->cq), MC_OK);
    rv_qp_caps_t caps = {.max_send_wr = 16};
    assert_int_equal(V->create_qp(s->pd, s->cq, &caps, &s->qp), MC_OK);
    s->psn = psn;
    psn = (psn * 7 + 13) & 0xffffff; /* each side its own first PSN */
}

static void side_close(side_t *s)
{
    V->destroy_qp(s->qp);
    V->destroy_cq(s->cq);
    V->dealloc_pd(s->pd);
    V->close(s->ctx);
}

/* What a handshake would tell about a side. */
static rd_peer_facts_t facts_of(const rv_dev_info_t *info, uint32_t qpn, uint32_t psn)
{
    rd_peer_facts_t p = {.qpn = qpn,
                         .lid = info->lid,
                         .link_layer = info->link_layer,
                         .gid_type = info->gid_type,
                         .mtu = info->active_mtu,
                         .has_psn = 1,
                         .psn = psn,
                         .rd_atom = info->max_qp_rd_atom};
    memcpy(p.gid, info->gid, 16);
    return p;
}

/* The attributes of one transition of s's QP toward peer p, as the
 * transport builds them. */
static rv_qp_attr_t attrs(const side_t *s, const rd_peer_facts_t *p, rv_qp_state_t to)
{
    rd_port_facts_t l;
    rd_port_facts_from_info(&s->info, s->info.active_mtu, &l);
    rd_qp_settings_t qs;
    rd_qp_settings_init(&qs);
    qs.psn = s->psn;
    rv_qp_attr_t a;
    char why[200];
    assert_int_equal(rd_qp_build(to, &l, p, &qs, 7, &a, why, sizeof(why)), MC_OK);
    return a;
}

static void bring_up_to(side_t *s, const rd_peer_facts_t *p)
{
    rv_qp_attr_t a = attrs(s, p, RV_QPS_INIT);
    assert_int_equal(V->modify_qp(s->qp, RV_QPS_INIT, &a), MC_OK);
    a = attrs(s, p, RV_QPS_RTR);
    assert_int_equal(V->modify_qp(s->qp, RV_QPS_RTR, &a), MC_OK);
    a = attrs(s, p, RV_QPS_RTS);
    assert_int_equal(V->modify_qp(s->qp, RV_QPS_RTS, &a), MC_OK);
}

static void bring_up(side_t *s, const side_t *peer)
{
    rd_peer_facts_t p = facts_of(&peer->info, V->qp_num(peer->qp), peer->psn);
    bring_up_to(s, &p);
}

static void connect_pair(side_t *a, side_t *b)
{
    bring_up(a, b);
    bring_up(b, a);
}

/* Wait up to 3 s for one completion. */
static rv_wc_t wait_wc(side_t *s)
{
    rv_wc_t wc;
    uint64_t end = mc_now_ms() + 3000;
    while (mc_now_ms() < end) {
        if (V->poll_cq(s->cq, 1, &wc) == 1)
            return wc;
        usleep(200);
    }
    fail_msg("no completion within 3 s");
    return wc;
}

static void post(side_t *s, int op, void *local, uint32_t lkey, uint64_t remote, uint32_t rkey,
                 uint32_t len, uint64_t id, mc_status_t expect)
{
    rv_send_wr_t wr = {.wr_id = id,
                       .local_addr = (uint64_t)(uintptr_t)local,
                       .remote_addr = remote,
                       .length = len,
                       .lkey = lkey,
                       .rkey = rkey,
                       .opcode = (uint8_t)op,
                       .signaled = 1};
    rv_send_wr_t *bad = NULL;
    assert_int_equal(V->post_send(s->qp, &wr, &bad), expect);
}

static void qp_transitions_follow_reset_init_rtr_rts(void **state)
{
    (void)state;
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    rd_peer_facts_t p = facts_of(&b.info, V->qp_num(b.qp), b.psn);
    rv_qp_attr_t init = attrs(&a, &p, RV_QPS_INIT), rtr = attrs(&a, &p, RV_QPS_RTR),
                 rts = attrs(&a, &p, RV_QPS_RTS);
    assert_int_equal(V->qp_state(a.qp), RV_QPS_RESET);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &rtr), MC_ERR_STATE);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTS, &rts), MC_ERR_STATE);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_INIT, &init), MC_OK);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTS, &rts), MC_ERR_STATE); /* skips RTR */
    char buf[8];
    post(&a, RV_WR_RDMA_WRITE, buf, 1, 0, 1, 8, 1, MC_ERR_STATE); /* INIT cannot send */
    rv_qp_attr_t bad = rtr;
    bad.dest_qp_num = 0;
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &bad), MC_ERR_INVALID_ARGUMENT);
    bad = rtr;
    bad.path_mtu = 3000;
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &bad), MC_ERR_INVALID_ARGUMENT);
    bad = rtr;
    bad.mask &= ~RV_QP_AV; /* an attribute left out */
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &bad), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(V->qp_state(a.qp), RV_QPS_INIT);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &rtr), MC_OK);
    post(&a, RV_WR_RDMA_WRITE, buf, 1, 0, 1, 8, 1, MC_ERR_STATE); /* RTR cannot send */
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTS, &rts), MC_OK);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_ERR, NULL), MC_OK);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTS, &rts), MC_ERR_STATE);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RESET, NULL), MC_OK);
    assert_int_equal(V->qp_state(a.qp), RV_QPS_RESET);
    side_close(&a);
    side_close(&b);
}

static void write_and_read_move_bytes_between_two_contexts(void **state)
{
    (void)state;
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    connect_pair(&a, &b);
    static uint8_t src[8192], dst[8192], back[8192];
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (uint8_t)(i * 7 + 3);
    rv_mr_t ms, md, mb;
    assert_int_equal(V->reg_mr(a.pd, src, sizeof(src), RV_ACCESS_LOCAL_WRITE, &ms), MC_OK);
    assert_int_equal(V->reg_mr(a.pd, back, sizeof(back), RV_ACCESS_LOCAL_WRITE, &mb), MC_OK);
    assert_int_equal(V->reg_mr(b.pd, dst, sizeof(dst), 7, &md), MC_OK);
    post(&a, RV_WR_RDMA_WRITE, src, ms.lkey, (uint64_t)(uintptr_t)dst, md.rkey, 8192, 11, MC_OK);
    rv_wc_t wc = wait_wc(&a);
    assert_int_equal(wc.status, RV_WC_SUCCESS);
    assert_int_equal(wc.wr_id, 11);
    assert_memory_equal(src, dst, sizeof(src));
    post(&a, RV_WR_RDMA_READ, back, mb.lkey, (uint64_t)(uintptr_t)dst + 100, md.rkey, 4000, 12,
         MC_OK);
    wc = wait_wc(&a);
    assert_int_equal(wc.status, RV_WC_SUCCESS);
    assert_memory_equal(back, src + 100, 4000);
    V->dereg_mr(&ms);
    V->dereg_mr(&mb);
    V->dereg_mr(&md);
    side_close(&a);
    side_close(&b);
}

/* One failing WR per fresh pair: each error moves the QP to ERR. */
static void expect_failure(int op, int access, int64_t off, uint32_t len, int bad_rkey,
                           int bad_lkey, uint32_t want)
{
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    connect_pair(&a, &b);
    static uint8_t l[4096], r[4096];
    rv_mr_t ml, mr;
    assert_int_equal(V->reg_mr(a.pd, l, sizeof(l), RV_ACCESS_LOCAL_WRITE, &ml), MC_OK);
    assert_int_equal(V->reg_mr(b.pd, r, sizeof(r), access, &mr), MC_OK);
    post(&a, op, l, ml.lkey + (uint32_t)bad_lkey, (uint64_t)(uintptr_t)r + (uint64_t)off,
         mr.rkey + (uint32_t)bad_rkey, len, 5, MC_OK);
    rv_wc_t wc = wait_wc(&a);
    assert_string_equal(rv_wc_status_str(wc.status), rv_wc_status_str(want));
    assert_int_equal(V->qp_state(a.qp), RV_QPS_ERR);
    /* what follows an error is flushed */
    post(&a, RV_WR_RDMA_READ, l, ml.lkey, (uint64_t)(uintptr_t)r, mr.rkey, 16, 6, MC_OK);
    wc = wait_wc(&a);
    assert_string_equal(rv_wc_status_str(wc.status), "WR_FLUSH_ERR");
    assert_int_equal(wc.wr_id, 6);
    V->dereg_mr(&ml);
    V->dereg_mr(&mr);
    side_close(&a);
    side_close(&b);
}

static void remote_access_is_checked_against_rkey_range_and_flags(void **state)
{
    (void)state;
    const int rw = 7, ro = RV_ACCESS_LOCAL_WRITE | RV_ACCESS_REMOTE_READ;
    expect_failure(RV_WR_RDMA_WRITE, ro, 0, 64, 0, 0, RV_WC_REM_ACCESS_ERR); /* no REMOTE_WRITE */
    expect_failure(RV_WR_RDMA_READ, RV_ACCESS_LOCAL_WRITE | RV_ACCESS_REMOTE_WRITE, 0, 64, 0, 0,
                   RV_WC_REM_ACCESS_ERR); /* no REMOTE_READ */
    expect_failure(RV_WR_RDMA_WRITE, rw, 4000, 200, 0, 0, RV_WC_REM_ACCESS_ERR); /* past end */
    expect_failure(RV_WR_RDMA_READ, rw, -8, 64, 0, 0, RV_WC_REM_ACCESS_ERR);     /* before */
    expect_failure(RV_WR_RDMA_WRITE, rw, 0, 64, 1, 0, RV_WC_REM_ACCESS_ERR);     /* bad rkey */
    expect_failure(RV_WR_RDMA_WRITE, rw, 0, 64, 0, 1, RV_WC_LOC_PROT_ERR);       /* bad lkey */
}

static void a_peer_qp_not_connected_to_us_never_acknowledges(void **state)
{
    (void)state;
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    bring_up(&a, &b); /* b stays in RESET */
    static uint8_t l[64], r[64];
    rv_mr_t ml, mr;
    assert_int_equal(V->reg_mr(a.pd, l, sizeof(l), RV_ACCESS_LOCAL_WRITE, &ml), MC_OK);
    assert_int_equal(V->reg_mr(b.pd, r, sizeof(r), 7, &mr), MC_OK);
    post(&a, RV_WR_RDMA_WRITE, l, ml.lkey, (uint64_t)(uintptr_t)r, mr.rkey, 64, 1, MC_OK);
    assert_string_equal(rv_wc_status_str(wait_wc(&a).status), "RETRY_EXC_ERR");
    V->dereg_mr(&ml);
    V->dereg_mr(&mr);
    side_close(&a);
    side_close(&b);
}

static void registration_refuses_remote_write_without_local_write(void **state)
{
    (void)state;
    side_t a;
    side_open(&a, "emu_0");
    static uint8_t buf[64];
    rv_mr_t m;
    assert_int_equal(V->reg_mr(a.pd, buf, sizeof(buf), RV_ACCESS_REMOTE_WRITE, &m),
                     MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(V->reg_mr(a.pd, NULL, 64, 7, &m), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(V->reg_mr(a.pd, buf, 0, 7, &m), MC_ERR_INVALID_ARGUMENT);
    side_close(&a);
}

static int readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1;
}

static void completion_channel_fires_once_per_arming(void **state)
{
    (void)state;
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    connect_pair(&a, &b);
    static uint8_t l[64], r[64];
    rv_mr_t ml, mr;
    assert_int_equal(V->reg_mr(a.pd, l, sizeof(l), RV_ACCESS_LOCAL_WRITE, &ml), MC_OK);
    assert_int_equal(V->reg_mr(b.pd, r, sizeof(r), 7, &mr), MC_OK);
    int fd = V->cq_fd(a.cq);
    /* not armed: a completion does not wake the channel */
    post(&a, RV_WR_RDMA_WRITE, l, ml.lkey, (uint64_t)(uintptr_t)r, mr.rkey, 64, 1, MC_OK);
    wait_wc(&a);
    assert_false(readable(fd, 50));
    /* armed: it does, once */
    assert_int_equal(V->req_notify(a.cq), MC_OK);
    post(&a, RV_WR_RDMA_WRITE, l, ml.lkey, (uint64_t)(uintptr_t)r, mr.rkey, 64, 2, MC_OK);
    assert_true(readable(fd, 3000));
    V->cq_event(a.cq);
    assert_false(readable(fd, 0));
    assert_int_equal(wait_wc(&a).wr_id, 2);
    post(&a, RV_WR_RDMA_WRITE, l, ml.lkey, (uint64_t)(uintptr_t)r, mr.rkey, 64, 3, MC_OK);
    wait_wc(&a);
    assert_false(readable(fd, 50)); /* not re-armed */
    V->dereg_mr(&ml);
    V->dereg_mr(&mr);
    side_close(&a);
    side_close(&b);
}

static void send_queue_depth_is_enforced(void **state)
{
    (void)state;
    side_t a, b;
    rv_emu_opts_t o;
    rv_emu_opts_get(&o);
    rv_emu_opts_t slow = o;
    slow.delay_us = 200000; /* WRs stay outstanding while we post */
    rv_emu_configure(&slow);
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    rv_emu_configure(&o);
    connect_pair(&a, &b);
    static uint8_t l[64], r[64];
    rv_mr_t ml, mr;
    assert_int_equal(V->reg_mr(a.pd, l, sizeof(l), RV_ACCESS_LOCAL_WRITE, &ml), MC_OK);
    assert_int_equal(V->reg_mr(b.pd, r, sizeof(r), 7, &mr), MC_OK);
    rv_send_wr_t wr[17];
    for (int i = 0; i < 17; i++) {
        wr[i] = (rv_send_wr_t){.next = i < 16 ? &wr[i + 1] : NULL,
                               .wr_id = (uint64_t)i,
                               .local_addr = (uint64_t)(uintptr_t)l,
                               .remote_addr = (uint64_t)(uintptr_t)r,
                               .length = 8,
                               .lkey = ml.lkey,
                               .rkey = mr.rkey,
                               .opcode = RV_WR_RDMA_WRITE,
                               .signaled = 1};
    }
    rv_send_wr_t *bad = NULL;
    assert_int_equal(V->post_send(a.qp, wr, &bad), MC_ERR_LIMIT); /* 16 fit, the 17th not */
    assert_ptr_equal(bad, &wr[16]);
    for (int i = 0; i < 16; i++)
        assert_int_equal(wait_wc(&a).wr_id, (uint64_t)i); /* in order */
    V->dereg_mr(&ml);
    V->dereg_mr(&mr);
    side_close(&a);
    side_close(&b);
}

static void injected_faults_complete_with_errors(void **state)
{
    (void)state;
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    connect_pair(&a, &b);
    static uint8_t l[64], r[64];
    rv_mr_t ml, mr;
    assert_int_equal(V->reg_mr(a.pd, l, sizeof(l), RV_ACCESS_LOCAL_WRITE, &ml), MC_OK);
    assert_int_equal(V->reg_mr(b.pd, r, sizeof(r), 7, &mr), MC_OK);
    rv_emu_fail_next("emu_0", 1, RV_WC_REM_OP_ERR);
    post(&a, RV_WR_RDMA_WRITE, l, ml.lkey, (uint64_t)(uintptr_t)r, mr.rkey, 8, 1, MC_OK);
    assert_string_equal(rv_wc_status_str(wait_wc(&a).status), "REM_OP_ERR");
    /* fresh QPs; the device goes down */
    side_close(&a);
    side_close(&b);
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    connect_pair(&a, &b);
    assert_int_equal(V->reg_mr(a.pd, l, sizeof(l), RV_ACCESS_LOCAL_WRITE, &ml), MC_OK);
    assert_int_equal(V->reg_mr(b.pd, r, sizeof(r), 7, &mr), MC_OK);
    rv_emu_set_down("emu_0", 1);
    rv_dev_info_t info;
    V->query(a.ctx, &info);
    assert_false(info.port_active);
    post(&a, RV_WR_RDMA_WRITE, l, ml.lkey, (uint64_t)(uintptr_t)r, mr.rkey, 8, 2, MC_OK);
    assert_string_equal(rv_wc_status_str(wait_wc(&a).status), "RETRY_EXC_ERR");
    rv_emu_set_down("emu_0", 0);
    V->query(a.ctx, &info);
    assert_true(info.port_active);
    /* a QP forced into ERR flushes */
    side_close(&a);
    side_close(&b);
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    connect_pair(&a, &b);
    assert_int_equal(V->reg_mr(a.pd, l, sizeof(l), RV_ACCESS_LOCAL_WRITE, &ml), MC_OK);
    assert_int_equal(V->reg_mr(b.pd, r, sizeof(r), 7, &mr), MC_OK);
    rv_emu_qp_error(a.qp);
    post(&a, RV_WR_RDMA_WRITE, l, ml.lkey, (uint64_t)(uintptr_t)r, mr.rkey, 8, 3, MC_OK);
    assert_string_equal(rv_wc_status_str(wait_wc(&a).status), "WR_FLUSH_ERR");
    side_close(&a);
    side_close(&b);
}

/* The child: a target that registers 1 MiB, tells its GID/QPN/addr/rkey,
 * connects to ours, waits, then checks what we wrote at the front. */
typedef struct wire {
    rd_peer_facts_t f;
    uint32_t rkey;
    uint64_t addr;
} wire_t;

static int child(int rfd, int wfd)
{
    side_t b;
    rv_emu_opts_t o;
    rv_emu_opts_get(&o);
    memset(&b, 0, sizeof(b));
    b.psn = 0xabcde;
    if (V->open("emu_1", &OO, &b.ctx) != MC_OK || V->query(b.ctx, &b.info) != MC_OK ||
        V->alloc_pd(b.ctx, &b.pd) != MC_OK || V->create_cq(b.ctx, 16, &b.cq) != MC_OK)
        return 10;
    rv_qp_caps_t caps = {.max_send_wr = 4};
    if (V->create_qp(b.pd, b.cq, &caps, &b.qp) != MC_OK)
        return 11;
    static uint8_t mem[1 << 20];
    for (size_t i = 0; i < sizeof(mem); i++)
        mem[i] = (uint8_t)(i ^ 0x5a);
    rv_mr_t m;
    if (V->reg_mr(b.pd, mem, sizeof(mem), 7, &m) != MC_OK)
        return 12;
    wire_t me = {.f = facts_of(&b.info, V->qp_num(b.qp), b.psn),
                 .rkey = m.rkey,
                 .addr = (uint64_t)(uintptr_t)mem};
    wire_t peer;
    if (write(wfd, &me, sizeof(me)) != sizeof(me) || read(rfd, &peer, sizeof(peer)) != sizeof(peer))
        return 13;
    rd_port_facts_t l;
    rd_port_facts_from_info(&b.info, 4096, &l);
    rd_qp_settings_t qs;
    rd_qp_settings_init(&qs);
    qs.psn = b.psn;
    rv_qp_attr_t init, rtr;
    if (rd_qp_build(RV_QPS_INIT, &l, &peer.f, &qs, 7, &init, NULL, 0) != MC_OK ||
        rd_qp_build(RV_QPS_RTR, &l, &peer.f, &qs, 7, &rtr, NULL, 0) != MC_OK)
        return 17;
    if (V->modify_qp(b.qp, RV_QPS_INIT, &init) != MC_OK ||
        V->modify_qp(b.qp, RV_QPS_RTR, &rtr) != MC_OK)
        return 14;
    char go = 1;
    if (write(wfd, &go, 1) != 1 || read(rfd, &go, 1) != 1) /* parent done */
        return 15;
    for (size_t i = 0; i < 65536; i++)
        if (mem[i] != (uint8_t)(i * 13))
            return 16;
    return 0;
}

static void read_and_write_work_between_two_processes(void **state)
{
    (void)state;
    int p2c[2], c2p[2];
    assert_int_equal(pipe(p2c), 0);
    assert_int_equal(pipe(c2p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p2c[1]);
        close(c2p[0]);
        _exit(child(p2c[0], c2p[1]));
    }
    close(p2c[0]);
    close(c2p[1]);
    side_t a;
    side_open(&a, "emu_0");
    wire_t peer;
    assert_int_equal(read(c2p[0], &peer, sizeof(peer)), (ssize_t)sizeof(peer));
    wire_t me = {.f = facts_of(&a.info, V->qp_num(a.qp), a.psn)};
    assert_int_equal(write(p2c[1], &me, sizeof(me)), (ssize_t)sizeof(me));
    char go;
    assert_int_equal(read(c2p[0], &go, 1), 1); /* the child's QP is in RTR */
    bring_up_to(&a, &peer.f);
    static uint8_t out[65536], in[65536];
    for (size_t i = 0; i < sizeof(out); i++)
        out[i] = (uint8_t)(i * 13);
    rv_mr_t mo, mi;
    assert_int_equal(V->reg_mr(a.pd, out, sizeof(out), RV_ACCESS_LOCAL_WRITE, &mo), MC_OK);
    assert_int_equal(V->reg_mr(a.pd, in, sizeof(in), RV_ACCESS_LOCAL_WRITE, &mi), MC_OK);
    post(&a, RV_WR_RDMA_READ, in, mi.lkey, peer.addr + 65536, peer.rkey, 65536, 1, MC_OK);
    assert_int_equal(wait_wc(&a).status, RV_WC_SUCCESS);
    for (size_t i = 0; i < sizeof(in); i++)
        assert_int_equal(in[i], (uint8_t)((i + 65536) ^ 0x5a));
    post(&a, RV_WR_RDMA_WRITE, out, mo.lkey, peer.addr, peer.rkey, 65536, 2, MC_OK);
    assert_int_equal(wait_wc(&a).status, RV_WC_SUCCESS);
    assert_int_equal(write(p2c[1], &go, 1), 1);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    V->dereg_mr(&mo);
    V->dereg_mr(&mi);
    side_close(&a);
}

/* ------------------------------------------------------- strictness */

static void the_emulated_port_advertises_its_roce_v2_ipv4_gid(void **state)
{
    (void)state;
    side_t a;
    side_open(&a, "emu_0");
    assert_int_equal(a.info.link_layer, RV_LL_ETH);
    assert_int_equal(a.info.gid_tbl_len, 4);
    assert_int_equal(a.info.gid_index, 3); /* as on mlx5: RoCE v2 + IPv4 */
    assert_int_equal(a.info.gid_type, RV_GID_TYPE_ROCE_V2);
    assert_true(rd_gid_is_v4mapped(a.info.gid));
    assert_int_equal(a.info.lid, 0); /* RoCE ports have no LID */
    assert_int_equal(a.info.max_qp_rd_atom, 16);
    char why[200];
    assert_int_equal(rd_dev_validate(&a.info, why, sizeof(why)), MC_OK);
    side_close(&a);
    /* a configured index is what it advertises */
    rv_port_opts_t oo = OO;
    oo.gid_index = 1;
    rv_ctx_t *c;
    rv_dev_info_t info;
    assert_int_equal(V->open("emu_0", &oo, &c), MC_OK);
    assert_int_equal(V->query(c, &info), MC_OK);
    assert_int_equal(info.gid_index, 1);
    assert_true(rd_gid_is_link_local(info.gid));
    V->close(c);
}

/* The bug the strict emulator exists for: the transport advertised one GID
 * and sent from slot 0 (RoCE v1 link-local), which hardware on a routed
 * fabric never delivers. */
static void rtr_refuses_an_sgid_index_other_than_the_advertised_gid(void **state)
{
    (void)state;
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    rd_peer_facts_t p = facts_of(&b.info, V->qp_num(b.qp), b.psn);
    rv_qp_attr_t init = attrs(&a, &p, RV_QPS_INIT), rtr = attrs(&a, &p, RV_QPS_RTR);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_INIT, &init), MC_OK);
    assert_int_equal(rtr.ah.sgid_index, 3); /* the builder uses the advertised slot */
    rv_qp_attr_t bad = rtr;
    bad.ah.sgid_index = 0; /* the old hard-coded value */
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &bad), MC_ERR_INVALID_ARGUMENT);
    bad.ah.sgid_index = 2; /* the same address as RoCE v1 */
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &bad), MC_ERR_INVALID_ARGUMENT);
    bad.ah.sgid_index = 9; /* past the table */
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &bad), MC_ERR_INVALID_ARGUMENT);
    bad = rtr;
    bad.ah.is_global = 0; /* Ethernet has no LIDs */
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &bad), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(V->qp_state(a.qp), RV_QPS_INIT);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &rtr), MC_OK);
    side_close(&a);
    side_close(&b);
}

static void rtr_refuses_a_peer_on_the_other_link_layer(void **state)
{
    (void)state;
    rv_emu_dev_opts_t ibo = {.link_layer = RV_LL_IB};
    rv_emu_set_device("emu_1", &ibo);
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    assert_int_equal(b.info.link_layer, RV_LL_IB);
    assert_int_equal(b.info.gid_index, 0);
    assert_int_not_equal(b.info.lid, 0);
    /* the builder refuses first... */
    rd_port_facts_t l;
    rd_port_facts_from_info(&a.info, 4096, &l);
    rd_peer_facts_t p = facts_of(&b.info, V->qp_num(b.qp), b.psn);
    rd_qp_settings_t qs;
    rd_qp_settings_init(&qs);
    rv_qp_attr_t rtr;
    char why[200];
    assert_int_equal(rd_qp_build(RV_QPS_RTR, &l, &p, &qs, 7, &rtr, why, sizeof(why)),
                     MC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(why, "link layers differ"));
    /* ...and the device too, for attributes made without it */
    p.link_layer = RV_LL_ETH; /* a peer that lied */
    p.gid_type = RV_GID_TYPE_ROCE_V2;
    rtr = attrs(&a, &p, RV_QPS_RTR);
    rv_qp_attr_t init = attrs(&a, &p, RV_QPS_INIT);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_INIT, &init), MC_OK);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &rtr), MC_ERR_INVALID_ARGUMENT);
    /* an IB port without a GRH needs a LID */
    rd_peer_facts_t pa = facts_of(&a.info, V->qp_num(a.qp), a.psn);
    pa.link_layer = RV_LL_IB;
    pa.lid = 5;
    rv_qp_attr_t ib_rtr = attrs(&b, &pa, RV_QPS_RTR), ib_init = attrs(&b, &pa, RV_QPS_INIT);
    assert_int_equal(V->modify_qp(b.qp, RV_QPS_INIT, &ib_init), MC_OK);
    ib_rtr.ah.dlid = 0;
    assert_int_equal(V->modify_qp(b.qp, RV_QPS_RTR, &ib_rtr), MC_ERR_INVALID_ARGUMENT);
    side_close(&a);
    side_close(&b);
    rv_emu_set_device("emu_1", NULL);
}

static void read_depth_beyond_the_device_is_refused(void **state)
{
    (void)state;
    rv_emu_dev_opts_t shallow = {.max_rd_atom = 4};
    rv_emu_set_device("emu_0", &shallow);
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    assert_int_equal(a.info.max_qp_rd_atom, 4);
    rd_peer_facts_t p = facts_of(&b.info, V->qp_num(b.qp), b.psn);
    rv_qp_attr_t init = attrs(&a, &p, RV_QPS_INIT), rtr = attrs(&a, &p, RV_QPS_RTR),
                 rts = attrs(&a, &p, RV_QPS_RTS);
    assert_int_equal(rtr.max_dest_rd_atomic, 4); /* capped by the builder */
    assert_int_equal(rts.max_rd_atomic, 4);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_INIT, &init), MC_OK);
    rv_qp_attr_t deep = rtr;
    deep.max_dest_rd_atomic = 16; /* what the transport used to ask for */
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &deep), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTR, &rtr), MC_OK);
    deep = rts;
    deep.max_rd_atomic = 16;
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTS, &deep), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(V->modify_qp(a.qp, RV_QPS_RTS, &rts), MC_OK);
    side_close(&a);
    side_close(&b);
    rv_emu_set_device("emu_0", NULL);
}

static void an_inactive_port_and_an_empty_gid_table_are_reported(void **state)
{
    (void)state;
    char why[256];
    rv_dev_info_t devs[RV_MAX_DEVICES];
    rv_emu_set_down("emu_1", 1);
    int n = V->get_devices(&OO, devs, RV_MAX_DEVICES);
    assert_int_equal(n, 2);
    assert_true(devs[0].port_active);
    assert_false(devs[1].port_active);
    assert_int_equal(rd_dev_validate(&devs[1], why, sizeof(why)), MC_ERR_DEVICE_NOT_FOUND);
    assert_non_null(strstr(why, "port 1 is DOWN"));
    rv_emu_set_down("emu_1", 0);
    rv_emu_dev_opts_t nogid = {.no_gid = 1};
    rv_emu_set_device("emu_1", &nogid);
    n = V->get_devices(&OO, devs, RV_MAX_DEVICES);
    assert_int_equal(devs[1].gid_index, -1);
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    assert_int_equal(b.info.gid_index, -1);
    assert_int_equal(rd_dev_validate(&b.info, why, sizeof(why)), MC_ERR_DEVICE_NOT_FOUND);
    assert_non_null(strstr(why, "no usable GID"));
    /* and a QP there cannot address anything */
    rd_peer_facts_t p = facts_of(&a.info, V->qp_num(a.qp), a.psn);
    rv_qp_attr_t init = attrs(&b, &p, RV_QPS_INIT);
    assert_int_equal(V->modify_qp(b.qp, RV_QPS_INIT, &init), MC_OK);
    rd_port_facts_t l;
    rd_port_facts_from_info(&a.info, 4096, &l); /* attributes as if it had one */
    rd_qp_settings_t qs;
    rd_qp_settings_init(&qs);
    rv_qp_attr_t rtr;
    assert_int_equal(rd_qp_build(RV_QPS_RTR, &l, &p, &qs, 7, &rtr, NULL, 0), MC_OK);
    assert_int_equal(V->modify_qp(b.qp, RV_QPS_RTR, &rtr), MC_ERR_INVALID_ARGUMENT);
    side_close(&a);
    side_close(&b);
    rv_emu_set_device("emu_1", NULL);
}

static void infiniband_ports_move_bytes_by_lid(void **state)
{
    (void)state;
    rv_emu_dev_opts_t ibo = {.link_layer = RV_LL_IB};
    rv_emu_set_device("emu_0", &ibo);
    rv_emu_set_device("emu_1", &ibo);
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    assert_int_not_equal(a.info.lid, b.info.lid);
    connect_pair(&a, &b);
    static uint8_t src[4096], dst[4096];
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (uint8_t)(i * 3 + 1);
    rv_mr_t ms, md;
    assert_int_equal(V->reg_mr(a.pd, src, sizeof(src), RV_ACCESS_LOCAL_WRITE, &ms), MC_OK);
    assert_int_equal(V->reg_mr(b.pd, dst, sizeof(dst), 7, &md), MC_OK);
    post(&a, RV_WR_RDMA_WRITE, src, ms.lkey, (uint64_t)(uintptr_t)dst, md.rkey, 4096, 1, MC_OK);
    assert_int_equal(wait_wc(&a).status, RV_WC_SUCCESS);
    assert_memory_equal(src, dst, sizeof(src));
    V->dereg_mr(&ms);
    V->dereg_mr(&md);
    side_close(&a);
    side_close(&b);
    rv_emu_set_device("emu_0", NULL);
    rv_emu_set_device("emu_1", NULL);
}

/* The peer expects another first PSN (it was told a different one, or an
 * older peer assumed 0): the packets are not accepted, as on hardware. */
static void a_wrong_psn_is_never_acknowledged(void **state)
{
    (void)state;
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    bring_up(&a, &b);
    rd_peer_facts_t pa = facts_of(&a.info, V->qp_num(a.qp), a.psn + 1);
    bring_up_to(&b, &pa);
    static uint8_t l[64], r[64];
    rv_mr_t ml, mr;
    assert_int_equal(V->reg_mr(a.pd, l, sizeof(l), RV_ACCESS_LOCAL_WRITE, &ml), MC_OK);
    assert_int_equal(V->reg_mr(b.pd, r, sizeof(r), 7, &mr), MC_OK);
    post(&a, RV_WR_RDMA_WRITE, l, ml.lkey, (uint64_t)(uintptr_t)r, mr.rkey, 64, 1, MC_OK);
    assert_string_equal(rv_wc_status_str(wait_wc(&a).status), "RETRY_EXC_ERR");
    V->dereg_mr(&ml);
    V->dereg_mr(&mr);
    side_close(&a);
    side_close(&b);
}

/* Time until the first completion of a WR to a QP that is gone. */
static uint64_t lost_packet_ms(int blackhole, uint8_t timeout, uint8_t retry, rv_wc_t *second)
{
    rv_emu_opts_t o, bh;
    rv_emu_opts_get(&o);
    bh = o;
    bh.blackhole = blackhole;
    rv_emu_configure(&bh);
    side_t a, b;
    side_open(&a, "emu_0");
    side_open(&b, "emu_1");
    rv_emu_configure(&o);
    rd_peer_facts_t p = facts_of(&b.info, V->qp_num(b.qp), b.psn);
    rd_port_facts_t l;
    rd_port_facts_from_info(&a.info, 4096, &l);
    rd_qp_settings_t qs;
    rd_qp_settings_init(&qs);
    qs.timeout = timeout;
    qs.retry_cnt = retry;
    qs.psn = a.psn;
    rv_qp_attr_t at[3];
    const rv_qp_state_t to[3] = {RV_QPS_INIT, RV_QPS_RTR, RV_QPS_RTS};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rd_qp_build(to[i], &l, &p, &qs, 7, &at[i], NULL, 0), MC_OK);
        assert_int_equal(V->modify_qp(a.qp, to[i], &at[i]), MC_OK);
    }
    V->destroy_qp(b.qp); /* the peer went away */
    b.qp = NULL;
    static uint8_t buf[64];
    rv_mr_t m;
    assert_int_equal(V->reg_mr(a.pd, buf, sizeof(buf), 7, &m), MC_OK);
    uint64_t t0 = mc_now_ms();
    post(&a, RV_WR_RDMA_WRITE, buf, m.lkey, 0x1000, 1, 64, 1, MC_OK);
    post(&a, RV_WR_RDMA_WRITE, buf, m.lkey, 0x1000, 1, 64, 2, MC_OK);
    rv_wc_t wc = wait_wc(&a);
    uint64_t ms = mc_now_ms() - t0;
    assert_string_equal(rv_wc_status_str(wc.status), "RETRY_EXC_ERR");
    assert_int_equal(wc.wr_id, 1);
    *second = wait_wc(&a);
    V->dereg_mr(&m);
    side_close(&a);
    side_close(&b);
    return ms;
}

static void black_hole_mode_fails_a_lost_packet_after_timeout_times_retries(void **state)
{
    (void)state;
    rv_wc_t second;
    /* timeout 16: 268 ms per try, 2 tries: 537 ms */
    uint64_t give_up_ms = rd_qp_give_up_ns(16, 1) / 1000000;
    uint64_t bh = lost_packet_ms(1, 16, 1, &second);
    assert_true(bh >= give_up_ms);
    assert_string_equal(rv_wc_status_str(second.status), "WR_FLUSH_ERR"); /* what queued behind */
    assert_int_equal(second.wr_id, 2);
    /* without it the loss is reported at once (fast tests) */
    uint64_t fast = lost_packet_ms(0, 16, 1, &second);
    assert_true(fast < give_up_ms);
}

static void real_provider_discovery_reports_no_devices_cleanly(void **state)
{
    (void)state;
    rv_dev_info_t devs[RV_MAX_DEVICES];
    int n = rv_real_ops.get_devices(&OO, devs, RV_MAX_DEVICES);
    assert_true(n >= 0); /* 0 on machines without a NIC: no crash, no error */
    assert_string_equal(rv_real_ops.name, "verbs");
    assert_string_equal(rv_emu_ops.name, "emulated");
}

int main(void)
{
    mc_log_set_spec(getenv("TEST_LOG") ? getenv("TEST_LOG") : "error", NULL, 0);
    rv_emu_opts_t o = {.ndevices = 2, .mtu = 4096};
    rv_emu_configure(&o);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(qp_transitions_follow_reset_init_rtr_rts),
        cmocka_unit_test(write_and_read_move_bytes_between_two_contexts),
        cmocka_unit_test(remote_access_is_checked_against_rkey_range_and_flags),
        cmocka_unit_test(a_peer_qp_not_connected_to_us_never_acknowledges),
        cmocka_unit_test(registration_refuses_remote_write_without_local_write),
        cmocka_unit_test(completion_channel_fires_once_per_arming),
        cmocka_unit_test(send_queue_depth_is_enforced),
        cmocka_unit_test(injected_faults_complete_with_errors),
        cmocka_unit_test(read_and_write_work_between_two_processes),
        cmocka_unit_test(the_emulated_port_advertises_its_roce_v2_ipv4_gid),
        cmocka_unit_test(rtr_refuses_an_sgid_index_other_than_the_advertised_gid),
        cmocka_unit_test(rtr_refuses_a_peer_on_the_other_link_layer),
        cmocka_unit_test(read_depth_beyond_the_device_is_refused),
        cmocka_unit_test(an_inactive_port_and_an_empty_gid_table_are_reported),
        cmocka_unit_test(infiniband_ports_move_bytes_by_lid),
        cmocka_unit_test(a_wrong_psn_is_never_acknowledged),
        cmocka_unit_test(black_hole_mode_fails_a_lost_packet_after_timeout_times_retries),
        cmocka_unit_test(real_provider_discovery_reports_no_devices_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
