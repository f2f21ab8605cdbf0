/*
 * cluster.h - the integration tests' one harness: mooncake-master, storage
 * nodes (mooncake-store-server) and redis-server on 127.0.0.1 with free
 * ports, the waits they need, and a teardown that stops whatever a test
 * left running, even when an assertion failed half-way.
 *
 *   static tc_cluster_t c;                     // static: outlives the test
 *   const char *ms[] = {"master.lease_ttl=1s", NULL};
 *   assert_int_equal(tc_cluster_start(&c, 2, ms, NULL), 0);
 *   ... c.master.rpc_port, c.node[i].name ...
 *   tc_cluster_stop(&c, SIGTERM);
 *
 * Every program gets the harness defaults first and then the caller's
 * "section.key=value" list (NULL-terminated, may be NULL), so a caller's
 * setting wins (mc_conf: later sources win). Ports are chosen at a first
 * start and kept by restarts (a restarted master has the same address).
 * Starts retry with new ports when a port was taken meanwhile.
 *
 * Teardown: every pid the harness starts is recorded; tc_stop (and the
 * *_stop functions) forget it, and an atexit hook SIGKILLs and reaps what is
 * left and removes redis' temporary directories. Children also die with the
 * test process (proc.h: PR_SET_PDEATHSIG).
 *
 * Functions return 0 or -1 and print the reason on stderr: they work from
 * cmocka tests and from plain programs alike. Header-only (each test stays
 * one .c file); slow under a sanitizer: TC_SLOW stretches timeouts.
 */
#ifndef MC_TEST_CLUSTER_H
#define MC_TEST_CLUSTER_H

#include <dirent.h>
#include <stdarg.h>
#include <sys/stat.h>

#include "proc.h"
#include "reactor/reactor.h"
#include "rpc/rpc.h"
#include "util/buf.h"
#include "util/time.h"

/* TC_SLOW: how much slower this build runs. The Makefile compiles the tests
 * with -DTC_SLOW=$(TEST_SLOW), the factor test/run.sh stretches its time
 * limits by (5 under ThreadSanitizer, 2 under AddressSanitizer, else 1); a
 * compile outside the Makefile guesses the same from the sanitizer. */
#ifndef TC_SLOW
#if defined(__SANITIZE_THREAD__)
#define TC_SLOW 5
#elif defined(__SANITIZE_ADDRESS__)
#define TC_SLOW 2
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TC_SLOW 5
#elif __has_feature(address_sanitizer)
#define TC_SLOW 2
#endif
#endif
#endif
#ifndef TC_SLOW
#define TC_SLOW 1
#endif

#define TC_START_TIMEOUT_MS (15000 * TC_SLOW)
#define TC_MAX_ARGS 64
#define TC_MAX_NODES 8

/* ------------------------------------------------------------- registry */

typedef struct tc_registry {
    pid_t pids[64];
    char dirs[8][64]; /* temporary directories to remove */
    int hooked;
} tc_registry_t;

static tc_registry_t tc_reg;

static inline void tc_rmdir_flat(const char *dir)
{
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *de;
        char path[384];
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static inline void tc_at_exit(void)
{
    for (size_t i = 0; i < sizeof(tc_reg.pids) / sizeof(tc_reg.pids[0]); i++)
        if (tc_reg.pids[i] > 0) {
            kill(tc_reg.pids[i], SIGKILL);
            waitpid(tc_reg.pids[i], NULL, 0);
            tc_reg.pids[i] = 0;
        }
    for (size_t i = 0; i < sizeof(tc_reg.dirs) / sizeof(tc_reg.dirs[0]); i++)
        if (tc_reg.dirs[i][0] != '\0') {
            tc_rmdir_flat(tc_reg.dirs[i]);
            tc_reg.dirs[i][0] = '\0';
        }
}

static inline void tc_hook(void)
{
    if (!tc_reg.hooked) {
        tc_reg.hooked = 1;
        atexit(tc_at_exit);
    }
}

static inline void tc_track(pid_t pid)
{
    tc_hook();
    for (size_t i = 0; i < sizeof(tc_reg.pids) / sizeof(tc_reg.pids[0]); i++)
        if (tc_reg.pids[i] <= 0) {
            tc_reg.pids[i] = pid;
            return;
        }
}

static inline void tc_untrack(pid_t pid)
{
    for (size_t i = 0; i < sizeof(tc_reg.pids) / sizeof(tc_reg.pids[0]); i++)
        if (tc_reg.pids[i] == pid)
            tc_reg.pids[i] = 0;
}

/* Start argv (proc.h) and record it for the exit hook. */
static inline int tc_spawn(test_proc_t *p, char *const argv[])
{
    if (test_proc_start(p, argv) != 0) {
        fprintf(stderr, "cluster.h: cannot start %s: %s\n", argv[0], strerror(errno));
        return -1;
    }
    tc_track(p->pid);
    return 0;
}

/* Stop a process the harness started: sig, reap; SIGKILL after timeout_ms
 * (and then -1). The wait status, or -1; a process not running is fine. */
static inline int tc_stop_ms(test_proc_t *p, int sig, int timeout_ms)
{
    if (p->pid <= 0)
        return -1;
    pid_t pid = p->pid;
    int st = test_proc_stop(p, sig, timeout_ms);
    tc_untrack(pid);
    return st;
}

/* tc_stop_ms with 5 s (stretched under ThreadSanitizer). */
static inline int tc_stop(test_proc_t *p, int sig)
{
    return tc_stop_ms(p, sig, 5000 * TC_SLOW);
}

/* 1 while p runs; a process that exited is reaped and forgotten (its
 * status in *status when not NULL). */
static inline int tc_alive(test_proc_t *p, int *status)
{
    int s;
    if (p->pid <= 0)
        return 0;
    if (waitpid(p->pid, &s, WNOHANG) != p->pid)
        return 1;
    tc_untrack(p->pid);
    if (p->out_fd >= 0)
        close(p->out_fd);
    p->pid = 0;
    if (status != NULL)
        *status = s;
    return 0;
}

/* ---------------------------------------------------------------- waits */

/* Poll cond(arg) every 10 ms until it is nonzero (1) or timeout_ms ran
 * out (0). */
static inline int tc_wait(int (*cond)(void *), void *arg, int timeout_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    do {
        if (cond(arg))
            return 1;
        usleep(10000);
    } while (mc_now_ms() < deadline);
    return cond(arg) != 0;
}

/* Wait until 127.0.0.1:port accepts connections while p runs: 0, or -1
 * when p exited or timeout_ms ran out. */
static inline int tc_wait_listening(test_proc_t *p, unsigned port, int timeout_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    while (mc_now_ms() < deadline) {
        if (!tc_alive(p, NULL))
            return -1;
        if (test_port_open(port))
            return 0;
        usleep(10000);
    }
    return -1;
}

/* GET http://127.0.0.1:port/path (HTTP/1.0) within timeout_ms: the status
 * code and the body in *body (malloc'd, NUL-terminated: free it), or -1
 * (no connection, no answer, not HTTP; *body untouched). */
static inline int tc_http_get(unsigned port, const char *path, char **body, int timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[512];
    int rl = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    size_t cap = 65536, len = 0;
    char *buf = write(fd, req, (size_t)rl) == rl ? malloc(cap) : NULL;
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    while (buf != NULL) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        uint64_t now = mc_now_ms();
        if (now >= deadline || poll(&pfd, 1, (int)(deadline - now)) != 1)
            break;
        if (len + 1 == cap) {
            char *more = realloc(buf, cap * 2);
            if (more == NULL)
                break;
            buf = more;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    if (buf == NULL)
        return -1;
    buf[len] = '\0';
    int code = -1;
    char *sep = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1 || sep == NULL) {
        free(buf);
        return -1;
    }
    memmove(buf, sep + 4, len - (size_t)(sep + 4 - buf) + 1);
    *body = buf;
    return code;
}

/* An RPC client of 127.0.0.1:port on a reactor of its own, for a test that
 * calls a master by hand (what the store client never sends: a PutStart
 * with no PutEnd, a call to a standby). */
typedef struct tc_rpc {
    mc_reactor_group_t *g;
    mc_rpc_client_t *c;
} tc_rpc_t;

static inline int tc_rpc_open(tc_rpc_t *r, unsigned port)
{
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    r->c = NULL;
    if (mc_reactor_group_create(&go, &r->g) != MC_OK) {
        fprintf(stderr, "tc_rpc_open: no reactor\n");
        return -1;
    }
    mc_rpc_client_opts_t o;
    mc_rpc_client_opts_init(&o);
    o.host = "127.0.0.1";
    o.port = (uint16_t)port;
    if (mc_rpc_client_create(mc_reactor_group_get(r->g, 0), &o, &r->c) != MC_OK) {
        fprintf(stderr, "tc_rpc_open: no RPC client of port %u\n", port);
        mc_reactor_group_destroy(r->g);
        return -1;
    }
    return 0;
}

/* Call method with a prepared body within timeout_us: the status; the
 * answer's body is appended to resp (may be NULL). */
static inline mc_status_t tc_rpc_call(tc_rpc_t *r, uint16_t method, const mc_buf_t *body,
                                      uint64_t timeout_us, mc_buf_t *resp)
{
    return mc_rpc_call_sync(r->c, method, mc_buf_head(body), mc_buf_used(body), timeout_us, resp);
}

static inline void tc_rpc_close(tc_rpc_t *r)
{
    mc_rpc_client_destroy(r->c);
    mc_reactor_group_destroy(r->g);
}

/* Deterministic bytes for (seed, offset), the values tests write and check. */
static inline void tc_fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        p[i] = (uint8_t)(x >> ((i & 7) * 8));
    }
}

/* ------------------------------------------------------- argument lists */

typedef struct tc_args {
    char *argv[TC_MAX_ARGS + 1];
    int n;
    char buf[TC_MAX_ARGS][256];
} tc_args_t;

static inline void tc_args_init(tc_args_t *a, const char *prog)
{
    a->n = 0;
    snprintf(a->buf[0], sizeof(a->buf[0]), "%s", prog);
    a->argv[a->n++] = a->buf[0];
    a->argv[a->n] = NULL;
}

/* One argument, formatted. */
static inline void tc_args_add(tc_args_t *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void tc_args_add(tc_args_t *a, const char *fmt, ...)
{
    if (a->n >= TC_MAX_ARGS) {
        fprintf(stderr, "cluster.h: more than %d arguments\n", TC_MAX_ARGS);
        abort();
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->buf[a->n], sizeof(a->buf[0]), fmt, ap);
    va_end(ap);
    a->argv[a->n] = a->buf[a->n];
    a->argv[++a->n] = NULL;
}

/* "--set" "section.key=value" for each entry of a NULL-terminated list. */
static inline void tc_args_sets(tc_args_t *a, const char *const *sets)
{
    for (size_t i = 0; sets != NULL && sets[i] != NULL; i++) {
        tc_args_add(a, "--set");
        tc_args_add(a, "%s", sets[i]);
    }
}

/* Two free ports that differ. */
static inline void tc_two_ports(unsigned *a, unsigned *b)
{
    *a = test_free_port();
    do
        *b = test_free_port();
    while (*b == *a);
}

/* --------------------------------------------------------------- master */

typedef struct tc_master {
    test_proc_t proc;
    unsigned rpc_port, http_port; /* 0 until the first start */
} tc_master_t;

/* "127.0.0.1:RPC_PORT" */
static inline const char *tc_master_addr(const tc_master_t *m, char *buf, size_t len)
{
    snprintf(buf, len, "127.0.0.1:%u", m->rpc_port);
    return buf;
}

static inline int tc_master_start_once(tc_master_t *m, const char *const *sets)
{
    char bin[256];
    tc_args_t a;
    tc_args_init(&a, test_prog("mooncake-master", bin, sizeof(bin)));
    const char *log = getenv("TEST_MASTER_LOG");
    const char *const defaults[] = {"server.bind_address=127.0.0.1", "server.reactors=1",
                                    "server.tick_interval=20ms",
                                    log != NULL ? log : "log.level=error", NULL};
    tc_args_sets(&a, defaults);
    tc_args_add(&a, "--set");
    tc_args_add(&a, "server.rpc_port=%u", m->rpc_port);
    tc_args_add(&a, "--set");
    tc_args_add(&a, "server.http_port=%u", m->http_port);
    tc_args_sets(&a, sets);
    if (tc_spawn(&m->proc, a.argv) != 0)
        return -1;
    int http = 1;
    for (size_t i = 0; sets != NULL && sets[i] != NULL; i++)
        if (strcmp(sets[i], "server.http_enabled=false") == 0)
            http = 0;
    if (tc_wait_listening(&m->proc, m->rpc_port, TC_START_TIMEOUT_MS) != 0)
        return -1;
    return http ? tc_wait_listening(&m->proc, m->http_port, TC_START_TIMEOUT_MS) : 0;
}

/* Start mooncake-master with the harness defaults (bind 127.0.0.1, one
 * reactor, 20 ms tick, log.level=error or $TEST_MASTER_LOG) and then sets.
 * 0 once its RPC port and (unless sets say server.http_enabled=false) its
 * HTTP port accept connections. */
static inline int tc_master_start(tc_master_t *m, const char *const *sets)
{
    int fresh = m->rpc_port == 0;
    for (int attempt = 0; attempt < 5; attempt++) {
        if (fresh)
            tc_two_ports(&m->rpc_port, &m->http_port);
        if (tc_master_start_once(m, sets) == 0)
            return 0;
        tc_stop(&m->proc, SIGKILL);
        if (!fresh)
            usleep(100000); /* the same ports: the old master may still hold them */
    }
    fprintf(stderr, "cluster.h: mooncake-master did not start on port %u\n", m->rpc_port);
    return -1;
}

static inline int tc_master_stop(tc_master_t *m, int sig)
{
    return tc_stop(&m->proc, sig);
}

/* ----------------------------------------------------------------- node */

typedef struct tc_node {
    test_proc_t proc;
    unsigned port;
    char name[256]; /* its segment name, from its "ready NAME" line */
} tc_node_t;

static inline int tc_node_start_once(tc_node_t *n, const char *master, const char *const *sets)
{
    char bin[256], line[256];
    tc_args_t a;
    tc_args_init(&a, test_prog("mooncake-store-server", bin, sizeof(bin)));
    n->port = test_free_port();
    tc_args_add(&a, "--set");
    tc_args_add(&a, "store.master=%s", master);
    tc_args_add(&a, "--set");
    tc_args_add(&a, "store.port=%u", n->port);
    tc_args_add(&a, "--set");
    tc_args_add(&a, "store.local_hostname=127.0.0.1:%u", n->port);
    tc_args_add(&a, "--set");
    tc_args_add(&a, "store.rpc_timeout=%ds", 2 * TC_SLOW);
    const char *const defaults[] = {"store.global_segment_size=64MiB", "store.reactors=1",
                                    "store.http_port=0", "log.level=error", NULL};
    tc_args_sets(&a, defaults);
    tc_args_sets(&a, sets);
    if (tc_spawn(&n->proc, a.argv) != 0)
        return -1;
    if (test_proc_readline(&n->proc, line, sizeof(line), TC_START_TIMEOUT_MS) != 0 ||
        strncmp(line, "ready ", 6) != 0) {
        tc_stop(&n->proc, SIGKILL);
        return -1;
    }
    snprintf(n->name, sizeof(n->name), "%s", line + 6);
    return 0;
}

/* Start a storage node against master ("HOST:PORT" or a redis:// HA URL)
 * with the harness defaults (free port, 64 MiB segment, one reactor, RPC
 * timeout 2 s, log.level=error) and then sets. 0 once it printed
 * "ready NAME" (its segment is mounted). */
static inline int tc_node_start(tc_node_t *n, const char *master, const char *const *sets)
{
    for (int attempt = 0; attempt < 3; attempt++)
        if (tc_node_start_once(n, master, sets) == 0)
            return 0;
    fprintf(stderr, "cluster.h: mooncake-store-server did not get ready (master %s)\n", master);
    return -1;
}

static inline int tc_node_stop(tc_node_t *n, int sig)
{
    return tc_stop(&n->proc, sig);
}

/* ---------------------------------------------------------------- redis */

typedef struct tc_redis {
    test_proc_t proc;
    unsigned port; /* 0 until the first start */
    char dir[256]; /* its --dir and log; made (and removed at exit) when empty */
    /* optional, read at every start (sentinel.h's primary and replica): */
    const char *host;    /* also listen on this address of the machine, which
                            other network namespaces reach (protected mode off) */
    unsigned replica_of; /* a replica of the redis-server on host:replica_of */
} tc_redis_t;

/* $TEST_REDIS_SERVER, else /usr/bin/redis-server (`make deps` installs it). */
static inline const char *tc_redis_bin(void)
{
    const char *b = getenv("TEST_REDIS_SERVER");
    return b != NULL ? b : "/usr/bin/redis-server";
}

/* A temporary directory into dir[len], removed at exit. 0 or -1. */
static inline int tc_tmpdir(char *dir, size_t len, const char *name)
{
    snprintf(dir, len, "/tmp/mc-test-%s-XXXXXX", name);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "cluster.h: mkdtemp: %s\n", strerror(errno));
        dir[0] = '\0';
        return -1;
    }
    tc_hook();
    for (size_t i = 0; i < sizeof(tc_reg.dirs) / sizeof(tc_reg.dirs[0]); i++)
        if (tc_reg.dirs[i][0] == '\0') {
            snprintf(tc_reg.dirs[i], sizeof(tc_reg.dirs[i]), "%.63s", dir);
            break;
        }
    return 0;
}

/* redis-server's command line for r on r->port. */
static inline void tc_redis_args(const tc_redis_t *r, const char *bin, tc_args_t *a)
{
    const char *host = r->host != NULL ? r->host : "127.0.0.1";
    int other = strcmp(host, "127.0.0.1") != 0;
    tc_args_init(a, bin);
    tc_args_add(a, "--port");
    tc_args_add(a, "%u", r->port);
    tc_args_add(a, "--bind");
    if (other)
        tc_args_add(a, "127.0.0.1 %s", host);
    else
        tc_args_add(a, "127.0.0.1");
    tc_args_add(a, "--protected-mode");
    tc_args_add(a, other ? "no" : "yes");
    tc_args_add(a, "--save");
    tc_args_add(a, "%s", "");
    tc_args_add(a, "--appendonly");
    tc_args_add(a, "no");
    tc_args_add(a, "--dir");
    tc_args_add(a, "%s", r->dir);
    tc_args_add(a, "--dbfilename"); /* a replica's full sync writes one */
    tc_args_add(a, "dump-%u.rdb", r->port);
    tc_args_add(a, "--logfile");
    tc_args_add(a, "%s/redis-%u.log", r->dir, r->port);
    tc_args_add(a, "--daemonize");
    tc_args_add(a, "no");
    /* full syncs start at once (the default waits 5 s for more replicas to
     * share one) */
    tc_args_add(a, "--repl-diskless-sync-delay");
    tc_args_add(a, "0");
    if (r->replica_of != 0) {
        tc_args_add(a, "--replicaof");
        tc_args_add(a, "%s", host);
        tc_args_add(a, "%u", r->replica_of);
    }
}

/* Start redis-server (no persistence: a restart is empty) on its port
 * (free, chosen at the first start). 0 once it accepts connections. */
static inline int tc_redis_start(tc_redis_t *r)
{
    const char *bin = tc_redis_bin();
    if (access(bin, X_OK) != 0) {
        fprintf(stderr,
                "cluster.h: %s not found or not executable: these tests need a real "
                "redis-server (run `make deps`, or set TEST_REDIS_SERVER)\n",
                bin);
        return -1;
    }
    if (r->dir[0] == '\0' && tc_tmpdir(r->dir, sizeof(r->dir), "redis") != 0)
        return -1;
    int fresh = r->port == 0;
    for (int attempt = 0; attempt < 5; attempt++) {
        if (fresh)
            r->port = test_free_port();
        tc_args_t a;
        tc_redis_args(r, bin, &a);
        if (tc_spawn(&r->proc, a.argv) != 0)
            return -1;
        if (tc_wait_listening(&r->proc, r->port, 5000 * TC_SLOW) == 0)
            return 0;
        tc_stop(&r->proc, SIGKILL);
        if (!fresh)
            usleep(100000);
    }
    fprintf(stderr, "cluster.h: redis-server did not listen on port %u (log: %s/redis-%u.log)\n",
            r->port, r->dir, r->port);
    return -1;
}

static inline int tc_redis_stop(tc_redis_t *r, int sig)
{
    return tc_stop(&r->proc, sig);
}

/* -------------------------------------------------------------- cluster */

typedef struct tc_cluster {
    tc_master_t master;
    tc_node_t node[TC_MAX_NODES];
    unsigned nnodes;
} tc_cluster_t;

/* A master and nnodes storage nodes of it. */
static inline int tc_cluster_start(tc_cluster_t *c, unsigned nnodes, const char *const *master_sets,
                                   const char *const *node_sets)
{
    char addr[64];
    if (nnodes > TC_MAX_NODES || tc_master_start(&c->master, master_sets) != 0)
        return -1;
    tc_master_addr(&c->master, addr, sizeof(addr));
    for (c->nnodes = 0; c->nnodes < nnodes; c->nnodes++)
        if (tc_node_start(&c->node[c->nnodes], addr, node_sets) != 0)
            return -1;
    return 0;
}

/* Stop the nodes that run, then the master (sig, SIGKILL after 5 s). */
static inline void tc_cluster_stop(tc_cluster_t *c, int sig)
{
    for (unsigned i = 0; i < TC_MAX_NODES; i++)
        tc_node_stop(&c->node[i], sig);
    tc_master_stop(&c->master, sig);
}

#endif /* MC_TEST_CLUSTER_H */
