/*
 * chaos - run a mooncake-c cluster under load for a while, break it in
 * every way we know, and check that what was acknowledged survived.
 *
 *   chaos [--duration SECONDS] [--seed N] [--threads N] [--single-share PCT]
 *         [--faults LIST] [--no-netns] [--dir DIR] [--keep]
 *
 * Two phases share the duration. "ha" (100 - PCT % of it): Redis primary +
 * replica + three Sentinels, two mooncake-master with ha.sync = strict over
 * redis-sentinel://, four storage nodes - two in this network namespace, one
 * in a namespace of its own ("part", cut off with nftables drop rules), one
 * in another namespace reached through fault_proxy ("slow") - and this
 * process as the client, writing every object with two replicas. "single"
 * (PCT %): one mooncake-master without HA and three nodes.
 *
 * Faults, in turn, with a few quiet seconds between them:
 *   ha:     node kill -9 (restarted under a new name), node SIGSTOP 3 s,
 *           HA leader kill -9 (restarted), Redis primary kill -9 (the
 *           Sentinels promote the replica; the old one comes back as its
 *           replica), the "part" node partitioned 5 s or 15 s then healed,
 *           the "slow" node's link slowed (100 ms each way, 1 MB/s), black-
 *           holed 3 s, or reset.
 *   single: master kill -9 (restarted: it loses every object, as documented),
 *           node kill -9, node SIGSTOP.
 *
 * Load: --threads threads of sync calls on one client: puts of new keys
 * (1-16 KiB values whose 16-byte header holds the key's number, the length
 * and an XXH3 checksum; the rest follows from the number), gets of
 * acknowledged keys (checked byte for byte), and, past 6000 live keys,
 * removal of the oldest after a last check. After each put the replicas'
 * segments are queried, so a key whose every replica was on a node killed
 * since can be told from a real loss. Every acknowledged key is checked
 * once more at the end of its phase, after the faults healed.
 *
 * Report: ops; puts acknowledged; calls that failed cleanly (by status);
 * wrong bytes (a read that returned other bytes than acknowledged);
 * acknowledged-then-lost where a live replica or the HA journal held the
 * object; losses the design allows (every replica on a killed node; a
 * single master's restart); calls over their timeout and over twice it,
 * where a call's timeout is the sum of its steps' timeouts (put: PutStart +
 * transfer + PutEnd = 2 x rpc_timeout + transfer_timeout; get: rpc_timeout +
 * transfer_timeout; remove: rpc_timeout). Exit status 0 when wrong bytes,
 * acknowledged-then-lost and calls over twice their timeout are all 0.
 *
 * Namespaces need root (ip netns, nftables); without them (or --no-netns)
 * the "part" and "slow" nodes run in this namespace and their faults are
 * skipped, which the report says.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mooncake/store.h"
#include "store/ha_redis.h"
#include "test/integration/sentinel.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define RPC_TIMEOUT_US 2000000ull
#define TRANSFER_TIMEOUT_US 2000000ull
#define CLIENT_TTL "10s"
#define LIVE_CAP 6000
#define MAX_KEYS (4u << 20)
#define MAX_VAL (16u << 10)
#define MIN_VAL 1024
#define HDR 16
#define MAGIC 0x4d434348u /* "MCCH" */
#define NNODES 4
#define NMASTERS 2
#define MAX_INCS 256
#define CLUSTER "chaos"

enum { OP_PUT, OP_GET, OP_REMOVE, NOPS };
static const char *const op_names[] = {"put", "get", "remove"};

typedef enum kstate {
    K_FREE = 0,
    K_PUTTING,
    K_ACKED,
    K_FAILED,  /* the put failed: the key's fate is unknown, never checked */
    K_REMOVED, /* checked, then removed */
    K_UNKNOWN, /* a remove that failed: not checked any more */
} kstate_t;

typedef struct key {
    _Atomic int state;
    uint32_t len;
    int8_t phase;
    uint8_t nrep;
    int16_t inc[2];    /* incarnations of the replicas' nodes (-1: unknown) */
    uint64_t acked_us; /* since the start */
    int16_t qst;       /* the replica query: 0 found some, 1 found none, else its status */
    int checked;       /* verified at least once */
} key_t_;

typedef struct inc {
    char name[80]; /* segment name */
    int dead;      /* its memory is gone (kill -9), or the master may have dropped it */
} inc_t;

typedef struct node {
    const char *label;
    const char *netns; /* NULL: this namespace */
    char ip[32];       /* the address it advertises */
    unsigned port;     /* current port; fixed for the slow node (the proxy's route) */
    int fixed_port;
    test_proc_t p;
    int inc;
    int stopped;
} node_t;

/* ----------------------------------------------------------------- state */

static struct {
    /* options */
    unsigned duration_s, threads, single_pct;
    uint64_t seed;
    int use_netns, keep;
    char dir[256];
    char cmdline[1024];
    /* environment */
    int netns_ok;
    unsigned b; /* second octet of the 10.b.0.0/16 of this run */
    char host[32];
    char ns_part[32], ns_slow[32], dummy[32]; /* dummy: the address added to lo */
    uint64_t t0;
    /* cluster */
    test_sentinels_t ts;
    tc_master_t m[NMASTERS];
    int nmasters;
    int ha;
    node_t node[NNODES];
    int nnodes;
    test_proc_t proxy;
    unsigned proxy_ctl, proxy_port;
    char master_url[600];
    mc_store_t *s;
    /* keys */
    key_t_ *k;
    _Atomic uint32_t next_id;
    pthread_mutex_t mu;
    uint32_t *live; /* acknowledged ids in age order (a ring) */
    size_t live_head, live_n, live_cap;
    inc_t incs[MAX_INCS];
    int nincs;
    /* load */
    _Atomic int stop_load, phase, pause_load, stop_wd;
    pthread_t *thr;
    /* counters */
    _Atomic uint64_t ops[NOPS], ok[NOPS], over_t[NOPS], over_2t[NOPS], worst_us[NOPS];
    _Atomic uint64_t failed_clean, acked, wrong_bytes, lost_bad, lost_dead, lost_single;
    _Atomic uint64_t lost_unknown_replicas, verified, query_failed;
    pthread_mutex_t st_mu;
    struct {
        mc_status_t st;
        uint64_t n;
    } fails[32];
    int nfails;
    /* single-master restarts: keys acked before this time are expected to be lost */
    _Atomic uint64_t single_restart_us;
    char fault[128]; /* what is being done now (for the log of slow calls) */
    uint64_t ha_ran_ms, single_ran_ms;
    int setup_failed;
    pthread_mutex_t fault_mu;
    unsigned faults_done[16];
    unsigned faults_on; /* bit per fault (--faults); all by default */
    int slow_logged;
} G;

enum {
    F_NODE_KILL,
    F_NODE_STOP,
    F_LEADER_KILL,
    F_REDIS_KILL,
    F_PARTITION,
    F_SLOW_LINK,
    F_BLACKHOLE,
    F_RESET,
    F_MASTER_KILL,
    F_NFAULTS
};
/* --faults names */
static const char *const fault_keys[] = {"node-kill",  "node-stop", "leader-kill",
                                         "redis-kill", "partition", "slow-link",
                                         "blackhole",  "reset",     "master-kill"};
static const char *const fault_names[] = {
    "node kill -9",          "node SIGSTOP 3 s",         "HA leader kill -9",
    "Redis primary kill -9", "node partitioned, healed", "slow link (proxy)",
    "black hole (proxy)",    "connection reset (proxy)", "single master kill -9",
};

static uint64_t now_rel_ms(void)
{
    return (mc_now_us() - G.t0) / 1000;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    uint64_t t = now_rel_ms();
    printf("[%4llu.%01llus] %s\n", (unsigned long long)(t / 1000),
           (unsigned long long)(t % 1000 / 100), line);
    fflush(stdout);
}

static void set_fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_fault(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&G.fault_mu);
    vsnprintf(G.fault, sizeof(G.fault), fmt, ap);
    pthread_mutex_unlock(&G.fault_mu);
    va_end(ap);
}

static __thread uint64_t tl_rnd;

static uint64_t rnd(void)
{
    tl_rnd ^= tl_rnd << 13;
    tl_rnd ^= tl_rnd >> 7;
    tl_rnd ^= tl_rnd << 17;
    return tl_rnd;
}

/* ------------------------------------------------------------ shell */

/* Run a shell command; 0 when it exited 0. Quiet unless it fails. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    char full[1100];
    snprintf(full, sizeof(full), "%s >/dev/null 2>&1", cmd);
    int rc = system(full);
    return rc == 0 ? 0 : -1;
}

static void netns_teardown(void)
{
    if (G.ns_part[0] != '\0')
        sh("ip netns del %s", G.ns_part);
    if (G.ns_slow[0] != '\0')
        sh("ip netns del %s", G.ns_slow);
    if (G.dummy[0] != '\0')
        sh("ip addr del %s dev lo", G.dummy);
}

/* One namespace with a veth pair: root side 10.b.N.1, inside 10.b.N.2. */
static int netns_one(const char *ns, unsigned n)
{
    unsigned pid = (unsigned)getpid();
    char vr[16], vn[16];
    snprintf(vr, sizeof(vr), "mc%u%c0", pid % 1000000, ns == G.ns_part ? 'p' : 's');
    snprintf(vn, sizeof(vn), "mc%u%c1", pid % 1000000, ns == G.ns_part ? 'p' : 's');
    if (sh("ip netns add %s", ns) != 0 ||
        sh("ip link add %s type veth peer name %s", vr, vn) != 0 ||
        sh("ip link set %s netns %s", vn, ns) != 0 ||
        sh("ip addr add 10.%u.%u.1/24 dev %s", G.b, n, vr) != 0 ||
        sh("ip link set %s up", vr) != 0 ||
        sh("ip -n %s addr add 10.%u.%u.2/24 dev %s", ns, G.b, n, vn) != 0 ||
        sh("ip -n %s link set %s up", ns, vn) != 0 || sh("ip -n %s link set lo up", ns) != 0 ||
        sh("ip -n %s route add default via 10.%u.%u.1", ns, G.b, n) != 0)
        return -1;
    return 0;
}

static void on_exit_cleanup(void)
{
    netns_teardown();
}

static void on_signal(int sig)
{
    (void)sig;
    exit(3); /* atexit: the harness kills the processes, the namespaces go */
}

static int netns_setup(void)
{
    unsigned pid = (unsigned)getpid();
    atexit(on_exit_cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    /* the address of this namespace the others reach it at, on lo (no
     * module needed): 10.b.0.1, with a b no other run (a make check beside
     * a long run) has taken: adding an address that exists fails, and only
     * the run that added it deletes it at the end (b in 150-199: runs of
     * before took 200-249 and deleted the address of a run beside them) */
    char addr[32];
    for (unsigned i = 0; i < 50 && G.dummy[0] == '\0'; i++) {
        G.b = 150 + (pid + i) % 50;
        snprintf(addr, sizeof(addr), "10.%u.0.1/32", G.b);
        if (sh("ip addr add %s dev lo", addr) == 0)
            snprintf(G.dummy, sizeof(G.dummy), "%s", addr);
    }
    snprintf(G.ns_part, sizeof(G.ns_part), "mcchaos%up", pid);
    snprintf(G.ns_slow, sizeof(G.ns_slow), "mcchaos%us", pid);
    if (G.dummy[0] == '\0' || netns_one(G.ns_part, 2) != 0 || netns_one(G.ns_slow, 3) != 0) {
        netns_teardown();
        G.ns_part[0] = G.ns_slow[0] = G.dummy[0] = '\0';
        return -1;
    }
    /* nftables must work inside (the partition) */
    if (sh("ip netns exec %s nft list tables", G.ns_part) != 0) {
        netns_teardown();
        G.ns_part[0] = G.ns_slow[0] = G.dummy[0] = '\0';
        return -1;
    }
    snprintf(G.host, sizeof(G.host), "10.%u.0.1", G.b);
    return 0;
}

/* Drop every packet in and out of ns's veth (a partition), or heal it. */
static int partition(const char *ns, int on)
{
    if (on)
        return sh(
            "ip netns exec %s nft 'add table inet chaos; "
            "add chain inet chaos in { type filter hook input priority 0; policy accept; }; "
            "add chain inet chaos out { type filter hook output priority 0; policy accept; }; "
            "add rule inet chaos in iifname != \"lo\" drop; "
            "add rule inet chaos out oifname != \"lo\" drop'",
            ns);
    return sh("ip netns exec %s nft delete table inet chaos", ns);
}

/* ------------------------------------------------------------ processes */

/* Start argv in namespace ns (NULL: ours), stdout on a pipe, tracked by the
 * harness (killed at exit). */
static int spawn_in(test_proc_t *p, const char *ns, char *const argv[])
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (ns != NULL) {
            char path[128];
            snprintf(path, sizeof(path), "/run/netns/%s", ns);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
                fprintf(stderr, "chaos: cannot enter namespace %s: %s\n", ns, strerror(errno));
                _exit(127);
            }
        }
        dup2(fds[1], 1);
        execv(argv[0], argv);
        fprintf(stderr, "chaos: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    p->pid = pid;
    p->out_fd = fds[0];
    tc_track(pid);
    return 0;
}

static int inc_new(const char *name)
{
    pthread_mutex_lock(&G.mu);
    int i = G.nincs < MAX_INCS ? G.nincs++ : MAX_INCS - 1;
    snprintf(G.incs[i].name, sizeof(G.incs[i].name), "%s", name);
    G.incs[i].dead = 0;
    pthread_mutex_unlock(&G.mu);
    return i;
}

/* The incarnation a segment name belongs to now (the newest of that name). */
static int inc_of(const char *name)
{
    int r = -1;
    pthread_mutex_lock(&G.mu);
    for (int i = G.nincs - 1; i >= 0 && r < 0; i--)
        if (strcmp(G.incs[i].name, name) == 0)
            r = i;
    pthread_mutex_unlock(&G.mu);
    return r;
}

static void inc_kill(int i)
{
    pthread_mutex_lock(&G.mu);
    if (i >= 0)
        G.incs[i].dead = 1;
    pthread_mutex_unlock(&G.mu);
}

static int node_start(node_t *n)
{
    char bin[256];
    for (int attempt = 0; attempt < 3; attempt++) {
        if (!n->fixed_port || n->port == 0)
            n->port = test_free_port();
        tc_args_t a;
        tc_args_init(&a, test_prog("mooncake-store-server", bin, sizeof(bin)));
        tc_args_add(&a, "--set");
        tc_args_add(&a, "store.master=%s", G.master_url);
        tc_args_add(&a, "--set");
        tc_args_add(&a, "store.metadata=master");
        tc_args_add(&a, "--set");
        tc_args_add(&a, "store.http_port=0");
        tc_args_add(&a, "--set");
        tc_args_add(&a, "store.port=%u", n->port);
        tc_args_add(&a, "--set");
        tc_args_add(&a, "store.advertise_host=%s", n->ip);
        tc_args_add(&a, "--set");
        tc_args_add(&a, "store.local_hostname=%s:%u", n->ip, n->port);
        tc_args_add(&a, "--set");
        tc_args_add(&a, "store.global_segment_size=128MiB");
        tc_args_add(&a, "--set");
        tc_args_add(&a, "store.reactors=1");
        tc_args_add(&a, "--set");
        tc_args_add(&a, "store.rpc_timeout=2s");
        tc_args_add(&a, "--set");
        tc_args_add(&a, "log.level=warn");
        tc_args_add(&a, "--set");
        tc_args_add(&a, "log.file=%s/node-%s-%u.log", G.dir, n->label, n->port);
        if (spawn_in(&n->p, n->netns, a.argv) != 0)
            return -1;
        char line[256];
        if (test_proc_readline(&n->p, line, sizeof(line), 20000) == 0 &&
            strncmp(line, "ready ", 6) == 0) {
            char name[80];
            snprintf(name, sizeof(name), "%s:%u", n->ip, n->port);
            n->inc = inc_new(name);
            n->stopped = 0;
            return 0;
        }
        say("node %s did not get ready (port %u); retrying", n->label, n->port);
        tc_stop_ms(&n->p, SIGKILL, 1000);
        sleep(1);
    }
    return -1;
}

static int master_start(int i)
{
    tc_master_t *m = &G.m[i];
    char backend[400], log[300], adv[64];
    if (m->rpc_port == 0)
        tc_two_ports(&m->rpc_port, &m->http_port);
    snprintf(log, sizeof(log), "log.file=%s/master-%d.log", G.dir, i);
    if (G.ha) {
        snprintf(backend, sizeof(backend), "ha.backend=redis-sentinel://%s/%s/0", G.ts.list,
                 TEST_SENTINEL_NAME);
        snprintf(adv, sizeof(adv), "ha.advertise_address=%s:%u", G.host, m->rpc_port);
        const char *const sets[] = {"server.bind_address=0.0.0.0",
                                    adv,
                                    backend,
                                    "ha.cluster_id=" CLUSTER,
                                    "ha.lease_ttl=2s",
                                    "ha.sync=strict",
                                    "master.client_ttl=" CLIENT_TTL,
                                    log,
                                    "log.level=info",
                                    NULL};
        return tc_master_start(m, sets);
    }
    const char *const sets[] = {"master.client_ttl=" CLIENT_TTL, log, "log.level=info", NULL};
    return tc_master_start(m, sets);
}

/* The HA leader's index, or -1. */
static int ha_leader(void)
{
    mc_ha_url_t u;
    const char *why;
    if (mc_ha_url_parse(G.master_url, &u, &why) != MC_OK)
        return -1;
    char addr[MC_HA_ADDR_MAX];
    if (mc_ha_resolve_leader(&u, 500000, addr, sizeof(addr), NULL) != MC_OK)
        return -1;
    for (int i = 0; i < G.nmasters; i++) {
        char want[64];
        snprintf(want, sizeof(want), "%s:%u", G.host, G.m[i].rpc_port);
        if (strcmp(addr, want) == 0)
            return i;
    }
    return -1;
}

static int wait_leader(int not, int ms)
{
    uint64_t end = mc_now_ms() + (uint64_t)ms;
    do {
        int l = ha_leader();
        if (l >= 0 && l != not )
            return l;
        usleep(50000);
    } while (mc_now_ms() < end);
    return -1;
}

/* One command to the proxy's control port; 0 when it answered ok. */
static int proxy_cmd(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int proxy_cmd(const char *fmt, ...)
{
    char cmd[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof(cmd) - 1, fmt, ap);
    va_end(ap);
    cmd[n++] = '\n';
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)G.proxy_ctl)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char reply[256] = "";
    int rc = -1;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        write(fd, cmd, (size_t)n) == n) {
        ssize_t r = read(fd, reply, sizeof(reply) - 1);
        if (r > 0) {
            reply[r] = '\0';
            rc = strncmp(reply, "ok", 2) == 0 ? 0 : -1;
        }
    }
    if (fd >= 0)
        close(fd);
    if (rc != 0)
        say("proxy: '%.*s' answered '%s'", n - 1, cmd, reply);
    return rc;
}

/* ------------------------------------------------------------ values */

static void make_value(uint32_t id, uint32_t len, uint8_t *v)
{
    uint64_t x = (uint64_t)id * 0x9e3779b97f4a7c15ull + G.seed;
    for (uint32_t i = HDR; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v[i] = (uint8_t)x;
    }
    uint32_t h[4] = {MAGIC, id, len, (uint32_t)mc_hash64(v + HDR, len - HDR)};
    memcpy(v, h, HDR);
}

/* 1 when buf (got bytes) is exactly key id's value. */
static int value_ok(uint32_t id, uint32_t len, const uint8_t *buf, int64_t got, uint8_t *scratch)
{
    if (got != (int64_t)len)
        return 0;
    uint32_t h[4];
    memcpy(h, buf, HDR);
    if (h[0] != MAGIC || h[1] != id || h[2] != len ||
        h[3] != (uint32_t)mc_hash64(buf + HDR, len - HDR))
        return 0;
    make_value(id, len, scratch);
    return memcmp(buf, scratch, len) == 0;
}

static void key_name(uint32_t id, char *buf, size_t n, size_t *kl)
{
    *kl = (size_t)snprintf(buf, n, "chaos-%08u", id);
}

/* ------------------------------------------------------------ accounting */

static const uint64_t budget[NOPS] = {2 * RPC_TIMEOUT_US + TRANSFER_TIMEOUT_US,
                                      RPC_TIMEOUT_US + TRANSFER_TIMEOUT_US, RPC_TIMEOUT_US};

/* The call each load thread is in (the watchdog reports one that runs past
 * twice its timeout while it still runs: a call that never returns counts). */
typedef struct inflight {
    _Atomic uint64_t start_us; /* 0: none */
    _Atomic int op;
    _Atomic uint32_t id;
    _Atomic int reported; /* counted over 2x by the watchdog */
} inflight_t;

static inflight_t *INF;
static __thread inflight_t *tl_inf;

static void call_begin(int op, uint32_t id)
{
    if (tl_inf == NULL)
        return;
    atomic_store(&tl_inf->op, op);
    atomic_store(&tl_inf->id, id);
    atomic_store(&tl_inf->reported, 0);
    atomic_store(&tl_inf->start_us, mc_now_us());
}

/* 1 when the watchdog already counted this call. */
static int call_end(void)
{
    if (tl_inf == NULL)
        return 0;
    atomic_store(&tl_inf->start_us, 0);
    return atomic_load(&tl_inf->reported);
}

static void note_call(int op, uint64_t dt_us, mc_status_t st, uint32_t id)
{
    if (call_end())
        return; /* counted (over twice its timeout) while it ran */
    atomic_fetch_add(&G.ops[op], 1);
    if (st == MC_OK)
        atomic_fetch_add(&G.ok[op], 1);
    uint64_t w = atomic_load(&G.worst_us[op]);
    while (dt_us > w && !atomic_compare_exchange_weak(&G.worst_us[op], &w, dt_us))
        ;
    if (dt_us > budget[op]) {
        atomic_fetch_add(&G.over_t[op], 1);
        if (dt_us > 2 * budget[op])
            atomic_fetch_add(&G.over_2t[op], 1);
        pthread_mutex_lock(&G.fault_mu);
        if (G.slow_logged < 30) {
            G.slow_logged++;
            say("slow %s of key %u: %llu ms (%s; timeout %llu ms) during: %s", op_names[op], id,
                (unsigned long long)(dt_us / 1000), mc_status_str(st),
                (unsigned long long)(budget[op] / 1000), G.fault[0] ? G.fault : "no fault");
        }
        pthread_mutex_unlock(&G.fault_mu);
    }
}

static void note_fail(mc_status_t st)
{
    atomic_fetch_add(&G.failed_clean, 1);
    pthread_mutex_lock(&G.st_mu);
    int i = 0;
    while (i < G.nfails && G.fails[i].st != st)
        i++;
    if (i == G.nfails && G.nfails < 32)
        G.fails[G.nfails++].st = st;
    if (i < 32)
        G.fails[i].n++;
    pthread_mutex_unlock(&G.st_mu);
}

static void live_push(uint32_t id)
{
    pthread_mutex_lock(&G.mu);
    if (G.live_n < G.live_cap) {
        G.live[(G.live_head + G.live_n) % G.live_cap] = id;
        G.live_n++;
    }
    pthread_mutex_unlock(&G.mu);
}

/* The oldest live id (removed from the ring), or UINT32_MAX. */
static uint32_t live_pop_oldest(void)
{
    uint32_t id = UINT32_MAX;
    pthread_mutex_lock(&G.mu);
    if (G.live_n > 0) {
        id = G.live[G.live_head];
        G.live_head = (G.live_head + 1) % G.live_cap;
        G.live_n--;
    }
    pthread_mutex_unlock(&G.mu);
    return id;
}

static uint32_t live_random(void)
{
    uint32_t id = UINT32_MAX;
    pthread_mutex_lock(&G.mu);
    if (G.live_n > 0)
        id = G.live[(G.live_head + rnd() % G.live_n) % G.live_cap];
    pthread_mutex_unlock(&G.mu);
    return id;
}

static size_t live_count(void)
{
    pthread_mutex_lock(&G.mu);
    size_t n = G.live_n;
    pthread_mutex_unlock(&G.mu);
    return n;
}

/* Record where key id's replicas are (after its put was acknowledged). */
static void record_replicas(uint32_t id, const char *key, size_t kl)
{
    mc_store_replica_t r[4];
    uint32_t n = 0;
    key_t_ *k = &G.k[id];
    k->nrep = 0;
    k->inc[0] = k->inc[1] = -1;
    mc_status_t st = MC_ERR_INTERNAL_ERROR;
    for (int attempt = 0; attempt < 3 && st != MC_OK; attempt++) {
        st = mc_store_query(G.s, key, kl, r, 4, &n);
        if (st != MC_OK)
            usleep(100000);
    }
    k->qst = (int16_t)(st == MC_OK ? (n == 0 ? 1 : 0) : st > -32768 ? st : -32768);
    if (st != MC_OK) {
        atomic_fetch_add(&G.query_failed, 1);
        return;
    }
    for (uint32_t i = 0; i < n && i < 4 && k->nrep < 2; i++)
        k->inc[k->nrep++] = (int16_t)inc_of(r[i].segment);
}

/* Every replica of k was on a node whose memory is gone since. */
static int replicas_all_dead(const key_t_ *k)
{
    if (k->nrep == 0)
        return 0;
    int dead = 1;
    pthread_mutex_lock(&G.mu);
    for (int i = 0; i < k->nrep; i++)
        if (k->inc[i] < 0 || !G.incs[k->inc[i]].dead)
            dead = 0;
    pthread_mutex_unlock(&G.mu);
    return dead;
}

/* Say what a wrong value holds: whose header, where it first differs, and
 * where the key's replicas are. */
static void say_wrong(uint32_t id, const uint8_t *buf, int64_t got, uint8_t *scratch)
{
    key_t_ *k = &G.k[id];
    uint32_t h[4];
    memcpy(h, buf, HDR);
    make_value(id, k->len, scratch);
    int64_t first = -1, ndiff = 0;
    for (int64_t i = 0; i < got && i < (int64_t)k->len; i++)
        if (buf[i] != scratch[i]) {
            if (first < 0)
                first = i;
            ndiff++;
        }
    char reps[200] = "";
    pthread_mutex_lock(&G.mu);
    for (int i = 0; i < k->nrep; i++)
        snprintf(reps + strlen(reps), sizeof(reps) - strlen(reps), "%s%s", i ? "," : "",
                 k->inc[i] >= 0 ? G.incs[k->inc[i]].name : "?");
    pthread_mutex_unlock(&G.mu);
    say("WRONG BYTES: key %u (%lld bytes read, %u acknowledged at %.1f s; replicas %s): header "
        "magic %08x key %u len %u; %lld bytes differ from offset %lld",
        id, (long long)got, k->len, (double)k->acked_us / 1e6, reps, h[0], h[1], h[2],
        (long long)ndiff, (long long)first);
}

typedef enum { V_OK, V_WRONG, V_LOST_BAD, V_LOST_DEAD, V_LOST_SINGLE, V_UNREADABLE } verdict_t;

/* Read key id and judge it; retries transient failures (final: longer). */
static verdict_t verify(uint32_t id, uint8_t *buf, uint8_t *scratch, int final)
{
    key_t_ *k = &G.k[id];
    char key[32];
    size_t kl;
    key_name(id, key, sizeof(key), &kl);
    int64_t r = -1;
    int attempts = final ? 6 : 2;
    int expected_lost =
        (k->phase == 1 && k->acked_us < atomic_load(&G.single_restart_us)) || replicas_all_dead(k);
    for (int a = 0; a < attempts; a++) {
        call_begin(OP_GET, id);
        uint64_t t0 = mc_now_us();
        r = mc_store_get(G.s, key, kl, buf, MAX_VAL, NULL);
        note_call(OP_GET, mc_now_us() - t0, r >= 0 ? MC_OK : (mc_status_t)r, id);
        /* NOT_FOUND is the master's word: asked once more (a failover may
         * be ending), other failures (a node away) a few times */
        if (r >= 0 || expected_lost || (r == MC_ERR_OBJECT_NOT_FOUND && a >= 1))
            break;
        usleep(r == MC_ERR_OBJECT_NOT_FOUND ? 200000 : 500000);
    }
    atomic_fetch_add(&G.verified, 1);
    k->checked = 1;
    if (r >= 0) {
        if (value_ok(id, k->len, buf, r, scratch))
            return V_OK;
        atomic_fetch_add(&G.wrong_bytes, 1);
        say_wrong(id, buf, r, scratch);
        return V_WRONG;
    }
    if (k->phase == 1 && k->acked_us < atomic_load(&G.single_restart_us)) {
        atomic_fetch_add(&G.lost_single, 1);
        return V_LOST_SINGLE;
    }
    if (replicas_all_dead(k)) {
        if (atomic_fetch_add(&G.lost_dead, 1) < 3)
            say("key %u lost with every replica on a killed node (as designed): %s", id,
                mc_status_str((mc_status_t)r));
        return V_LOST_DEAD;
    }
    if (r != MC_ERR_OBJECT_NOT_FOUND && !final)
        return V_UNREADABLE; /* a fault may be on: judged again at the end */
    if (k->nrep == 0)
        atomic_fetch_add(&G.lost_unknown_replicas, 1);
    atomic_fetch_add(&G.lost_bad, 1);
    say("ACKNOWLEDGED-THEN-LOST: key %u (acknowledged at %.1f s, phase %s, replicas %d, "
        "replica query %s): %s",
        id, (double)k->acked_us / 1e6, k->phase ? "single" : "ha", k->nrep,
        k->qst == 1 ? "found none" : mc_status_str((mc_status_t)k->qst),
        mc_status_str((mc_status_t)r));
    return V_LOST_BAD;
}

/* ------------------------------------------------------------ load */

static void do_put(uint8_t *buf)
{
    uint32_t id = atomic_fetch_add(&G.next_id, 1);
    if (id >= MAX_KEYS) {
        usleep(10000);
        return;
    }
    key_t_ *k = &G.k[id];
    k->len = MIN_VAL + (uint32_t)(rnd() % (MAX_VAL - MIN_VAL));
    k->phase = (int8_t)atomic_load(&G.phase);
    atomic_store(&k->state, K_PUTTING);
    make_value(id, k->len, buf);
    char key[32];
    size_t kl;
    key_name(id, key, sizeof(key), &kl);
    mc_replicate_config_t cfg;
    mc_replicate_config_init(&cfg);
    cfg.replica_num = 2;
    call_begin(OP_PUT, id);
    uint64_t t0 = mc_now_us();
    mc_status_t st = mc_store_put(G.s, key, kl, buf, k->len, &cfg);
    note_call(OP_PUT, mc_now_us() - t0, st, id);
    if (st != MC_OK) {
        atomic_store(&k->state, K_FAILED);
        note_fail(st);
        usleep(20000); /* the cluster is changing: no busy loop of failures */
        return;
    }
    k->acked_us = mc_now_us() - G.t0;
    atomic_fetch_add(&G.acked, 1);
    record_replicas(id, key, kl);
    atomic_store(&k->state, K_ACKED);
    live_push(id);
}

static void do_get(uint8_t *buf, uint8_t *scratch)
{
    uint32_t id = live_random();
    if (id == UINT32_MAX || atomic_load(&G.k[id].state) != K_ACKED)
        return;
    key_t_ *k = &G.k[id];
    char key[32];
    size_t kl;
    key_name(id, key, sizeof(key), &kl);
    call_begin(OP_GET, id);
    uint64_t t0 = mc_now_us();
    int64_t r = mc_store_get(G.s, key, kl, buf, MAX_VAL, NULL);
    note_call(OP_GET, mc_now_us() - t0, r >= 0 ? MC_OK : (mc_status_t)r, id);
    if (r >= 0) {
        if (!value_ok(id, k->len, buf, r, scratch) && atomic_load(&k->state) == K_ACKED) {
            atomic_fetch_add(&G.wrong_bytes, 1);
            say_wrong(id, buf, r, scratch);
        }
    } else {
        note_fail((mc_status_t)r); /* judged at its last check */
    }
}

/* Check the oldest key one last time, then remove it. */
static void do_retire(uint8_t *buf, uint8_t *scratch)
{
    uint32_t id = live_pop_oldest();
    if (id == UINT32_MAX)
        return;
    key_t_ *k = &G.k[id];
    verdict_t v = verify(id, buf, scratch, 0);
    if (v == V_UNREADABLE) {
        live_push(id); /* again later */
        return;
    }
    if (v != V_OK) {
        atomic_store(&k->state, K_REMOVED);
        return;
    }
    atomic_store(&k->state, K_UNKNOWN); /* in-flight gets of it may now fail */
    char key[32];
    size_t kl;
    key_name(id, key, sizeof(key), &kl);
    call_begin(OP_REMOVE, id);
    uint64_t t0 = mc_now_us();
    mc_status_t st = mc_store_remove(G.s, key, kl, 1);
    note_call(OP_REMOVE, mc_now_us() - t0, st, id);
    if (st == MC_OK)
        atomic_store(&k->state, K_REMOVED);
    else
        note_fail(st);
}

static void *load_main(void *arg)
{
    tl_rnd = G.seed ^ (uint64_t)(uintptr_t)arg * 0x2545f4914f6cdd1dull;
    tl_inf = &INF[(uintptr_t)arg - 1];
    uint8_t *buf = mc_malloc(MAX_VAL), *scratch = mc_malloc(MAX_VAL);
    while (!atomic_load(&G.stop_load)) {
        if (atomic_load(&G.pause_load)) {
            usleep(10000);
            continue;
        }
        uint64_t r = rnd() % 100;
        if (live_count() > LIVE_CAP)
            do_retire(buf, scratch);
        else if (r < 55)
            do_put(buf);
        else if (r < 95)
            do_get(buf, scratch);
        else
            do_retire(buf, scratch);
    }
    mc_free(buf);
    mc_free(scratch);
    return NULL;
}

/* Calls running past twice their timeout: counted and said once each. The
 * clock is read after the call's start: a call that began after one clock
 * reading for the whole scan made "now - start" wrap around and was
 * reported STUCK for 18446744073709551 ms. */
static void watchdog_scan(void)
{
    for (unsigned i = 0; INF != NULL && i <= G.threads; i++) {
        inflight_t *f = &INF[i];
        uint64_t t = atomic_load(&f->start_us);
        int op = atomic_load(&f->op);
        uint64_t now = mc_now_us();
        if (t == 0 || now < t || now - t <= 2 * budget[op] || atomic_load(&f->reported))
            continue;
        atomic_store(&f->reported, 1);
        atomic_fetch_add(&G.ops[op], 1);
        atomic_fetch_add(&G.over_t[op], 1);
        atomic_fetch_add(&G.over_2t[op], 1);
        pthread_mutex_lock(&G.fault_mu);
        say("STUCK %s of key %u: running for %llu ms (timeout %llu ms) during: %s", op_names[op],
            atomic_load(&f->id), (unsigned long long)((now - t) / 1000),
            (unsigned long long)(budget[op] / 1000), G.fault[0] ? G.fault : "no fault");
        pthread_mutex_unlock(&G.fault_mu);
    }
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&G.stop_wd)) {
        watchdog_scan();
        usleep(200000);
    }
    return NULL;
}

static pthread_t WD;

static void load_start(void)
{
    atomic_store(&G.stop_load, 0);
    G.thr = mc_calloc(G.threads, sizeof(*G.thr));
    for (unsigned i = 0; i < G.threads; i++)
        pthread_create(&G.thr[i], NULL, load_main, (void *)(uintptr_t)(i + 1));
}

static void load_stop(void)
{
    uint64_t t0 = mc_now_ms();
    atomic_store(&G.stop_load, 1);
    for (unsigned i = 0; i < G.threads; i++)
        pthread_join(G.thr[i], NULL); /* the watchdog says which call hangs */
    if (mc_now_ms() - t0 > 10000)
        say("the load threads took %llu ms to stop", (unsigned long long)(mc_now_ms() - t0));
    mc_free(G.thr);
    G.thr = NULL;
}

static _Atomic size_t final_n, final_ok;

static void *verify_main(void *arg)
{
    tl_inf = &INF[(uintptr_t)arg - 1];
    uint8_t *buf = mc_malloc(MAX_VAL), *scratch = mc_malloc(MAX_VAL);
    uint32_t id;
    while ((id = live_pop_oldest()) != UINT32_MAX) {
        if (atomic_load(&G.k[id].state) != K_ACKED)
            continue;
        if (verify(id, buf, scratch, 1) == V_OK)
            atomic_fetch_add(&final_ok, 1);
        atomic_store(&G.k[id].state, K_REMOVED);
        atomic_fetch_add(&final_n, 1);
    }
    mc_free(buf);
    mc_free(scratch);
    return NULL;
}

/* Check every live key of the phase (they leave the ring), on the load
 * threads' slots. */
static void verify_all(void)
{
    uint64_t t0 = mc_now_ms();
    atomic_store(&final_n, 0);
    atomic_store(&final_ok, 0);
    pthread_t *t = mc_calloc(G.threads, sizeof(*t));
    for (unsigned i = 0; i < G.threads; i++)
        pthread_create(&t[i], NULL, verify_main, (void *)(uintptr_t)(i + 1));
    for (unsigned i = 0; i < G.threads; i++)
        pthread_join(t[i], NULL);
    mc_free(t);
    say("final check: %zu acknowledged keys read in %llu ms, %zu with their bytes",
        atomic_load(&final_n), (unsigned long long)(mc_now_ms() - t0), atomic_load(&final_ok));
}

/* ------------------------------------------------------------ the cluster */

static int client_open(void)
{
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.master = G.master_url;
    c.metadata = "master";
    c.local_buffer_size = 32 << 20;
    c.reactors = 2;
    c.rpc_timeout_us = RPC_TIMEOUT_US;
    c.transfer_timeout_us = TRANSFER_TIMEOUT_US;
    c.advertise_host = G.host;
    mc_status_t st = MC_ERR_INTERNAL_ERROR;
    for (int attempt = 0; attempt < 10 && st != MC_OK; attempt++) {
        st = mc_store_open(&c, &G.s);
        if (st != MC_OK)
            sleep(1);
    }
    if (st != MC_OK)
        say("cannot open the store client: %s", mc_status_str(st));
    return st == MC_OK ? 0 : -1;
}

static void node_init(node_t *n, const char *label, const char *ns, const char *ip, int fixed)
{
    memset(n, 0, sizeof(*n));
    n->label = label;
    n->netns = ns;
    snprintf(n->ip, sizeof(n->ip), "%s", ip);
    n->fixed_port = fixed;
    n->inc = -1;
}

static int ha_up(void)
{
    G.ha = 1;
    char nsip[32];
    if (ts_start_at(&G.ts, G.dir, G.host) != 0)
        return -1;
    snprintf(G.master_url, sizeof(G.master_url), "redis-sentinel://%s/%s/0?cluster=" CLUSTER,
             G.ts.list, TEST_SENTINEL_NAME);
    G.nmasters = NMASTERS;
    for (int i = 0; i < NMASTERS; i++)
        if (master_start(i) != 0)
            return -1;
    if (wait_leader(-1, 20000) < 0) {
        say("no master leader within 20 s");
        return -1;
    }
    G.nnodes = NNODES;
    node_init(&G.node[0], "n0", NULL, "127.0.0.1", 0);
    node_init(&G.node[1], "n1", NULL, "127.0.0.1", 0);
    if (G.netns_ok) {
        snprintf(nsip, sizeof(nsip), "10.%u.2.2", G.b);
        node_init(&G.node[2], "part", G.ns_part, nsip, 0);
        /* reached through the proxy: it advertises 127.0.0.1:P, where the
         * proxy listens, and listens on P in its own namespace */
        node_init(&G.node[3], "slow", G.ns_slow, "127.0.0.1", 1);
        G.node[3].port = test_free_port();
        char bin[256], route[64];
        snprintf(route, sizeof(route), "%u=10.%u.3.2:%u", G.node[3].port, G.b, G.node[3].port);
        char *argv[] = {(char *)test_bin("fault_proxy", bin, sizeof(bin)), "--route", route, NULL};
        if (spawn_in(&G.proxy, NULL, argv) != 0)
            return -1;
        char line[128];
        if (test_proc_readline(&G.proxy, line, sizeof(line), 5000) != 0 ||
            sscanf(line, "ready %u %u", &G.proxy_ctl, &G.proxy_port) != 2) {
            say("fault_proxy did not start");
            return -1;
        }
    } else {
        node_init(&G.node[2], "part", NULL, "127.0.0.1", 0);
        node_init(&G.node[3], "slow", NULL, "127.0.0.1", 0);
    }
    for (int i = 0; i < NNODES; i++)
        if (node_start(&G.node[i]) != 0) {
            say("node %s did not start", G.node[i].label);
            return -1;
        }
    return client_open();
}

static int single_up(void)
{
    G.ha = 0;
    G.nmasters = 1;
    memset(&G.m[0], 0, sizeof(G.m[0]));
    if (master_start(0) != 0)
        return -1;
    snprintf(G.master_url, sizeof(G.master_url), "127.0.0.1:%u", G.m[0].rpc_port);
    G.nnodes = 3;
    node_init(&G.node[0], "s0", NULL, "127.0.0.1", 0);
    node_init(&G.node[1], "s1", NULL, "127.0.0.1", 0);
    node_init(&G.node[2], "s2", NULL, "127.0.0.1", 0);
    for (int i = 0; i < 3; i++)
        if (node_start(&G.node[i]) != 0)
            return -1;
    return client_open();
}

static void cluster_down(void)
{
    mc_store_close(G.s);
    G.s = NULL;
    for (int i = 0; i < G.nnodes; i++) {
        if (G.node[i].stopped)
            kill(G.node[i].p.pid, SIGCONT);
        tc_stop(&G.node[i].p, SIGTERM);
    }
    for (int i = 0; i < G.nmasters; i++)
        tc_master_stop(&G.m[i], SIGTERM);
    memset(G.m, 0, sizeof(G.m));
    tc_stop(&G.proxy, SIGTERM);
    if (G.ha)
        ts_stop(&G.ts);
}

/* The leader's (or the single master's) /metrics/summary line, into out. */
static void master_summary(char *out, size_t n)
{
    int l = G.ha ? ha_leader() : 0;
    snprintf(out, n, "(no master answered)");
    if (l < 0)
        return;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)G.m[l].http_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return;
    }
    static const char req[] = "GET /metrics/summary HTTP/1.0\r\nHost: x\r\n\r\n";
    char resp[2048];
    size_t got = 0;
    ssize_t r;
    if (write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1))
        while (got + 1 < sizeof(resp) && (r = read(fd, resp + got, sizeof(resp) - 1 - got)) > 0)
            got += (size_t)r;
    close(fd);
    resp[got] = '\0';
    const char *body = strstr(resp, "\r\n\r\n");
    if (body != NULL) {
        snprintf(out, n, "%s", body + 4);
        out[strcspn(out, "\n")] = '\0';
    }
}

/* ------------------------------------------------------------ faults */

static void quiet(unsigned s)
{
    set_fault("%s", "");
    sleep(s);
}

static void fault_node_kill(int i)
{
    node_t *n = &G.node[i];
    set_fault("node %s killed", n->label);
    say("fault: kill -9 node %s (%s:%u)", n->label, n->ip, n->port);
    inc_kill(n->inc); /* its memory, and the replicas in it, are gone */
    tc_stop_ms(&n->p, SIGKILL, 2000);
    sleep(3);
    if (node_start(n) != 0)
        say("node %s could not be restarted", n->label);
    else
        say("node %s back as %s:%u", n->label, n->ip, n->port);
}

static void fault_node_stop(int i, unsigned secs)
{
    node_t *n = &G.node[i];
    set_fault("node %s stopped", n->label);
    say("fault: SIGSTOP node %s for %u s", n->label, secs);
    test_proc_freeze(n->p.pid);
    n->stopped = 1;
    sleep(secs);
    kill(n->p.pid, SIGCONT);
    n->stopped = 0;
}

static void fault_leader_kill(void)
{
    int l = ha_leader();
    if (l < 0) {
        say("fault: HA leader kill skipped: no leader right now");
        return;
    }
    set_fault("HA leader m%d killed", l);
    uint64_t t0 = mc_now_ms();
    say("fault: kill -9 the HA leader m%d", l);
    tc_stop_ms(&G.m[l].proc, SIGKILL, 2000);
    int nl = wait_leader(l, 20000);
    say("m%d leads %llu ms later", nl, (unsigned long long)(mc_now_ms() - t0));
    if (master_start(l) != 0)
        say("m%d could not be restarted", l);
}

static void fault_redis_kill(void)
{
    unsigned prim = ts_primary(&G.ts, 0);
    int pi = ts_index(&G.ts, prim);
    if (pi < 0) {
        say("fault: Redis primary kill skipped: the Sentinels name none of ours");
        return;
    }
    unsigned other = G.ts.redis[1 - pi].port;
    set_fault("Redis primary %u killed", prim);
    uint64_t t0 = mc_now_ms();
    say("fault: kill -9 the Redis primary (port %u)", prim);
    ts_kill_redis(&G.ts, pi);
    if (ts_wait_primary(&G.ts, other, 30000) != 0) {
        say("the Sentinels did not promote the replica within 30 s");
    } else {
        say("replica %u promoted %llu ms later", other, (unsigned long long)(mc_now_ms() - t0));
    }
    /* back as the new primary's replica (empty: no persistence) */
    if (ts_start_redis(&G.ts, pi, other) != 0)
        say("redis %u could not be restarted", prim);
    else if (ts_wait_replicas(other, 1, 15000) != 0)
        say("redis %u did not sync with %u in 15 s", prim, other);
}

static void fault_partition(unsigned secs)
{
    node_t *n = &G.node[2];
    set_fault("node %s partitioned", n->label);
    say("fault: partition node %s for %u s (nftables in %s)", n->label, secs, n->netns);
    if (partition(n->netns, 1) != 0) {
        say("nft failed: partition skipped");
        return;
    }
    sleep(secs);
    partition(n->netns, 0);
    if (secs >= 10) {
        /* longer than client_ttl: the master may have dropped its segment
         * and the replicas in it; the node mounts it again under the same
         * name, a new incarnation */
        char name[80];
        snprintf(name, sizeof(name), "%s:%u", n->ip, n->port);
        inc_kill(n->inc);
        n->inc = inc_new(name);
    }
    say("node %s healed", n->label);
}

static void fault_slow(void)
{
    set_fault("slow link to node slow (100 ms each way, 1 MB/s)");
    say("fault: slow link to node slow: 100 ms each way, 1 MB/s, for 8 s");
    proxy_cmd("delay %u both 100", G.proxy_port);
    proxy_cmd("rate %u both 1000000", G.proxy_port);
    sleep(8);
    proxy_cmd("heal %u", G.proxy_port);
}

static void fault_blackhole(void)
{
    set_fault("black hole to node slow");
    say("fault: black hole to node slow for 3 s");
    proxy_cmd("blackhole %u", G.proxy_port);
    sleep(3);
    proxy_cmd("heal %u", G.proxy_port);
}

static void fault_reset(void)
{
    set_fault("connections to node slow reset");
    say("fault: reset every connection to node slow");
    proxy_cmd("reset %u", G.proxy_port);
    sleep(1);
}

static void fault_master_kill(void)
{
    set_fault("single master killed");
    say("fault: kill -9 the single master (it forgets every object, as documented)");
    tc_stop_ms(&G.m[0].proc, SIGKILL, 2000);
    atomic_store(&G.single_restart_us, mc_now_us() - G.t0);
    sleep(1);
    if (master_start(0) != 0)
        say("the master could not be restarted");
    /* acknowledged before the restart: lost by design */
    atomic_store(&G.single_restart_us, mc_now_us() - G.t0);
}

/* round: how many times f ran before (each fault picks its target by it) */
static void run_fault(int f)
{
    unsigned round = G.faults_done[f]++;
    switch (f) {
    case F_NODE_KILL:
        fault_node_kill((int)(round % 2)); /* n0 / n1 (s0 / s1) */
        break;
    case F_NODE_STOP:
        fault_node_stop((int)(round % (unsigned)G.nnodes), 3);
        break;
    case F_LEADER_KILL:
        fault_leader_kill();
        break;
    case F_REDIS_KILL:
        fault_redis_kill();
        break;
    case F_PARTITION:
        fault_partition(round % 2 ? 15 : 5);
        break;
    case F_SLOW_LINK:
        fault_slow();
        break;
    case F_BLACKHOLE:
        fault_blackhole();
        break;
    case F_RESET:
        fault_reset();
        break;
    case F_MASTER_KILL:
        fault_master_kill();
        break;
    }
    set_fault("%s", "");
}

static void phase_run(int phase, uint64_t until_ms)
{
    static const int ha_cycle[] = {F_NODE_KILL, F_SLOW_LINK,  F_LEADER_KILL, F_NODE_STOP,
                                   F_PARTITION, F_REDIS_KILL, F_BLACKHOLE,   F_RESET};
    static const int single_cycle[] = {F_NODE_STOP, F_MASTER_KILL, F_NODE_KILL};
    const int *cycle = phase == 0 ? ha_cycle : single_cycle;
    size_t n = phase == 0 ? sizeof(ha_cycle) / sizeof(ha_cycle[0])
                          : sizeof(single_cycle) / sizeof(single_cycle[0]);
    atomic_store(&G.phase, phase);
    load_start();
    quiet(5);
    int any = 0;
    for (size_t i = 0; i < n; i++)
        any |= (G.faults_on >> cycle[i]) & 1;
    /* a fault and its quiet time take 5-20 s: start one only with 15 s left */
    for (size_t i = 0; any && now_rel_ms() + 15000 < until_ms; i = (i + 1) % n) {
        int f = cycle[i];
        if (!((G.faults_on >> f) & 1))
            continue;
        if (!G.netns_ok &&
            (f == F_PARTITION || f == F_SLOW_LINK || f == F_BLACKHOLE || f == F_RESET))
            continue;
        run_fault(f);
        quiet(4);
    }
    while (now_rel_ms() + 8000 < until_ms)
        sleep(1);
    char sum[512];
    master_summary(sum, sizeof(sum));
    say("master: %s", sum);
    load_stop();
    say("load stopped; checking every acknowledged key");
    quiet(3); /* let stopped nodes be seen again, leases settle */
    verify_all();
}

/* ------------------------------------------------------------ report */

static void report(void)
{
    uint64_t total = 0;
    for (int i = 0; i < NOPS; i++)
        total += atomic_load(&G.ops[i]);
    printf("\n== chaos report ==\n");
    printf("command: %s\n", G.cmdline);
    printf("duration: %u s (ha phase %llu s, single-master phase %llu s), %u client threads, seed "
           "%llu, namespaces: %s\n",
           G.duration_s, (unsigned long long)(G.ha_ran_ms / 1000),
           (unsigned long long)(G.single_ran_ms / 1000), G.threads, (unsigned long long)G.seed,
           G.netns_ok ? "yes (partition by nftables, slow node behind fault_proxy)"
                      : "NO (partition and proxy faults skipped)");
    printf("faults injected:");
    for (int f = 0; f < F_NFAULTS; f++)
        if (G.faults_done[f])
            printf(" %s x%u;", fault_names[f], G.faults_done[f]);
    printf("\n");
    printf("ops: %llu (put %llu, get %llu, remove %llu)\n", (unsigned long long)total,
           (unsigned long long)atomic_load(&G.ops[OP_PUT]),
           (unsigned long long)atomic_load(&G.ops[OP_GET]),
           (unsigned long long)atomic_load(&G.ops[OP_REMOVE]));
    printf("acknowledged puts: %llu; checks of acknowledged keys: %llu\n",
           (unsigned long long)atomic_load(&G.acked), (unsigned long long)atomic_load(&G.verified));
    printf("failed cleanly: %llu (", (unsigned long long)atomic_load(&G.failed_clean));
    for (int i = 0; i < G.nfails; i++)
        printf("%s%s %llu", i ? ", " : "", mc_status_str(G.fails[i].st),
               (unsigned long long)G.fails[i].n);
    printf(")\n");
    printf("wrong bytes: %llu\n", (unsigned long long)atomic_load(&G.wrong_bytes));
    printf("acknowledged-then-lost (a live replica or the HA journal held the object): %llu%s\n",
           (unsigned long long)atomic_load(&G.lost_bad),
           atomic_load(&G.lost_unknown_replicas) ? " (some with replicas unknown)" : "");
    printf("lost as designed: %llu with every replica on a node killed (or expired) since; "
           "%llu acknowledged before a single master's restart (documented)\n",
           (unsigned long long)atomic_load(&G.lost_dead),
           (unsigned long long)atomic_load(&G.lost_single));
    printf("replica queries failed: %llu\n", (unsigned long long)atomic_load(&G.query_failed));
    uint64_t o1 = 0, o2 = 0;
    for (int i = 0; i < NOPS; i++) {
        o1 += atomic_load(&G.over_t[i]);
        o2 += atomic_load(&G.over_2t[i]);
    }
    printf("calls over their timeout: %llu; over twice their timeout: %llu\n",
           (unsigned long long)o1, (unsigned long long)o2);
    for (int i = 0; i < NOPS; i++)
        printf("  %-6s ops %llu ok %llu over-timeout %llu over-2x %llu slowest %llu ms\n",
               op_names[i], (unsigned long long)atomic_load(&G.ops[i]),
               (unsigned long long)atomic_load(&G.ok[i]),
               (unsigned long long)atomic_load(&G.over_t[i]),
               (unsigned long long)atomic_load(&G.over_2t[i]),
               (unsigned long long)(atomic_load(&G.worst_us[i]) / 1000));
    int pass = atomic_load(&G.wrong_bytes) == 0 && atomic_load(&G.lost_bad) == 0 && o2 == 0;
    printf("targets (0 wrong bytes, 0 acknowledged-then-lost, 0 calls past twice their "
           "timeout): %s\n",
           G.setup_failed ? "NOT RUN (a cluster did not come up)"
           : pass         ? "met"
                          : "MISSED");
    fflush(stdout);
}

/* ------------------------------------------------------------ main */

static const char usage[] =
    "usage: chaos [--duration SECONDS] [--seed N] [--threads N] [--single-share PCT]\n"
    "             [--faults LIST] [--no-netns] [--dir DIR] [--keep]\n"
    "LIST: node-kill,node-stop,leader-kill,redis-kill,partition,slow-link,blackhole,reset,\n"
    "master-kill (default: all)\n"
    "Runs masters, nodes and a client under faults and checks every acknowledged\n"
    "object (test/fault/README.md).\n";

static int parse_num(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *s == '\0' || *end != '\0' || *s == '-' || v > max)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"duration", required_argument, NULL, 'd'}, {"seed", required_argument, NULL, 's'},
        {"threads", required_argument, NULL, 't'},  {"single-share", required_argument, NULL, 'S'},
        {"no-netns", no_argument, NULL, 'n'},       {"dir", required_argument, NULL, 'D'},
        {"keep", no_argument, NULL, 'k'},           {"faults", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    G.duration_s = 60;
    G.threads = 4;
    G.single_pct = 20;
    G.seed = (uint64_t)time(NULL);
    G.use_netns = 1;
    size_t at = 0;
    for (int i = 0; i < argc && at < sizeof(G.cmdline); i++)
        at +=
            (size_t)snprintf(G.cmdline + at, sizeof(G.cmdline) - at, "%s%s", i ? " " : "", argv[i]);
    int o;
    uint64_t v;
    G.faults_on = (1u << F_NFAULTS) - 1;
    while ((o = getopt_long(argc, argv, "d:s:t:S:nD:kf:h", opts, NULL)) != -1) {
        switch (o) {
        case 'f': {
            G.faults_on = 0;
            char list[512];
            snprintf(list, sizeof(list), "%s", optarg);
            for (char *t = strtok(list, ","); t != NULL; t = strtok(NULL, ",")) {
                int f = -1;
                for (int i = 0; i < F_NFAULTS; i++)
                    if (strcmp(t, fault_keys[i]) == 0)
                        f = i;
                if (f < 0) {
                    fprintf(stderr,
                            "chaos: --faults: unknown fault '%s' (node-kill, node-stop, "
                            "leader-kill, redis-kill, partition, slow-link, blackhole, reset, "
                            "master-kill)\n",
                            t);
                    return 2;
                }
                G.faults_on |= 1u << f;
            }
            break;
        }
        case 'd':
            if (parse_num(optarg, 86400, &v) != 0 || v < 30) {
                fprintf(stderr, "chaos: --duration '%s': seconds, at least 30\n", optarg);
                return 2;
            }
            G.duration_s = (unsigned)v;
            break;
        case 's':
            if (parse_num(optarg, UINT64_MAX, &v) != 0 || v == 0) {
                fprintf(stderr, "chaos: --seed '%s': a positive number\n", optarg);
                return 2;
            }
            G.seed = v;
            break;
        case 't':
            if (parse_num(optarg, 64, &v) != 0 || v == 0) {
                fprintf(stderr, "chaos: --threads '%s': 1..64\n", optarg);
                return 2;
            }
            G.threads = (unsigned)v;
            break;
        case 'S':
            if (parse_num(optarg, 100, &v) != 0) {
                fprintf(stderr, "chaos: --single-share '%s': a percentage 0..100\n", optarg);
                return 2;
            }
            G.single_pct = (unsigned)v;
            break;
        case 'n':
            G.use_netns = 0;
            break;
        case 'D':
            snprintf(G.dir, sizeof(G.dir), "%s", optarg);
            break;
        case 'k':
            G.keep = 1;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind != argc) {
        fputs(usage, stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    mc_log_set_spec(getenv("CHAOS_LOG") ? getenv("CHAOS_LOG") : "error", NULL, 0);
    G.t0 = mc_now_us();
    pthread_mutex_init(&G.mu, NULL);
    pthread_mutex_init(&G.fault_mu, NULL);
    pthread_mutex_init(&G.st_mu, NULL);
    tl_rnd = G.seed;
    if (G.dir[0] == '\0') {
        snprintf(G.dir, sizeof(G.dir), "/tmp/mc-chaos-XXXXXX");
        if (mkdtemp(G.dir) == NULL) {
            perror("chaos: mkdtemp");
            return 1;
        }
    } else if (mkdir(G.dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "chaos: --dir %s: %s\n", G.dir, strerror(errno));
        return 2;
    }
    G.k = mc_calloc(MAX_KEYS, sizeof(*G.k));
    INF = mc_calloc(G.threads + 1, sizeof(*INF)); /* the last: this thread's checks */
    tl_inf = &INF[G.threads];
    pthread_create(&WD, NULL, watchdog_main, NULL);
    G.live_cap = MAX_KEYS;
    G.live = mc_calloc(G.live_cap, sizeof(*G.live));
    if (G.k == NULL || G.live == NULL) {
        fprintf(stderr, "chaos: out of memory\n");
        return 1;
    }
    snprintf(G.host, sizeof(G.host), "127.0.0.1");
    if (G.use_netns) {
        if (geteuid() != 0 || netns_setup() != 0)
            say("network namespaces unavailable (root, ip netns and nft are needed): the "
                "partition and proxy faults are skipped");
        else
            G.netns_ok = 1;
    }
    say("chaos: %u s, seed %llu, logs in %s", G.duration_s, (unsigned long long)G.seed, G.dir);
    uint64_t ha_ms = (uint64_t)G.duration_s * 1000 * (100 - G.single_pct) / 100;
    int rc = 0;
    if (G.duration_s * 1000ull - ha_ms < 30000 && G.single_pct > 0) {
        say("the single-master phase needs at least 30 s: the ha phase takes the whole run");
        ha_ms = G.duration_s * 1000ull;
    }
    if (ha_ms >= 30000) {
        say("phase ha: Sentinel-watched Redis, %d masters (strict), %d nodes", NMASTERS, NNODES);
        uint64_t start = now_rel_ms();
        if (ha_up() != 0) {
            say("the ha cluster did not come up");
            rc = 1;
        } else {
            phase_run(0, ha_ms);
        }
        G.ha_ran_ms = now_rel_ms() - start;
        cluster_down();
    }
    if (rc == 0 && G.duration_s * 1000ull - ha_ms >= 30000) {
        say("phase single: one master without HA, 3 nodes");
        uint64_t start = now_rel_ms();
        if (single_up() != 0) {
            say("the single-master cluster did not come up");
            rc = 1;
        } else {
            phase_run(1, start + (G.duration_s * 1000ull - ha_ms));
        }
        G.single_ran_ms = now_rel_ms() - start;
        cluster_down();
    }
    atomic_store(&G.stop_wd, 1);
    pthread_join(WD, NULL);
    G.setup_failed = rc != 0;
    report();
    if (rc == 0 && (atomic_load(&G.wrong_bytes) != 0 || atomic_load(&G.lost_bad) != 0))
        rc = 1;
    for (int i = 0; i < NOPS; i++)
        if (atomic_load(&G.over_2t[i]) != 0)
            rc = 1;
    if (!G.keep && rc == 0)
        tc_rmdir_flat(G.dir);
    else
        printf("logs kept in %s\n", G.dir);
    return rc;
}
