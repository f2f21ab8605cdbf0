/*
 * mooncake-cli - operator's command line for Mooncake Store.
 *
 *   mooncake-cli [--master HOST:PORT|redis://HOST:PORT/DB?cluster=ID] [--http HOST:PORT]
 *                [--timeout S] [-v|-q] COMMAND ...
 *
 *   put [--replicas N] [--soft-pin] KEY FILE|-   store FILE (or stdin) under KEY
 *   get KEY [FILE|-]                             write the value to FILE (default stdout)
 *   rm [--force] KEY | rm [--force] --regex RE   remove one key / every key matching RE
 *   ls [--regex RE] [--limit N] [--rpc]          keys with size, replicas, lease
 *   stat KEY                                     size, replicas, their segments, lease
 *   segments                                     mounted segments: capacity, used
 *   meta [PREFIX]                                the master's transfer-metadata entries
 *
 * A pure client: put and get open a store client (mooncake/store.h) that
 * contributes no memory and has no staging buffer; the value's own memory is
 * registered instead (zero copy). Everything else is one raw master RPC
 * (store/master_client.h) or one GET on the master's HTTP port (ls,
 * segments), so no transfer engine is started for them.
 *
 * Exit status: 0 success, 1 the operation failed (one line on stderr:
 * "mooncake-cli: get KEY: OBJECT_NOT_FOUND (object not found)"), 2 usage.
 * --master defaults to $MOONCAKE_MASTER, then 127.0.0.1:50051; --http to
 * $MOONCAKE_HTTP, then 127.0.0.1:9003.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mooncake/store.h"
#include "mooncake/version.h"
#include "reactor/reactor.h"
#include "rpc/fields.h"
#include "rpc/methods.h"
#include "rpc/rpc.h"
#include "store/ha_redis.h"
#include "store/master_client.h"
#include "store/proto.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/time.h"

#define PROG "mooncake-cli"
#define EXIT_FAIL 1
#define EXIT_USAGE 2
/* Largest HTTP answer we read (/keys at its limit of 100000 keys of ~100 B). */
#define HTTP_MAX_BODY (64u << 20)

typedef struct cli {
    char mhost[256];
    uint16_t mport;
    char hhost[256];
    uint16_t hport;
    int http_given; /* --http or $MOONCAKE_HTTP: no fallback to RPC */
    uint64_t timeout_us;
    mc_reactor_group_t *g;
    mc_rpc_client_t *rpc;
    const char *redis_master; /* --master redis://...: the store client follows the leader */
    const char *secret_file;  /* --secret-file: authenticate (the cluster's secret) */
    mc_auth_key_t key;
} cli_t;

static const char usage_text[] =
    "usage: " PROG " [--master HOST:PORT] [--http HOST:PORT] [--timeout SECONDS] [-v|-q] "
    "COMMAND ...\n"
    "commands:\n"
    "  put [--replicas N] [--soft-pin] KEY FILE|-   store FILE (- = stdin) under KEY\n"
    "  get KEY [FILE|-]                             write KEY's value to FILE (default stdout)\n"
    "  rm [--force] KEY                             remove KEY\n"
    "  rm [--force] --regex RE                      remove every key matching RE (PCRE2 syntax)\n"
    "  ls [--regex RE] [--limit N] [--rpc]          list keys (HTTP /keys; --rpc: master RPC)\n"
    "  stat KEY                                     size, replicas, segments, lease of KEY\n"
    "  segments                                     mounted segments: capacity and use\n"
    "  meta [PREFIX]                                decode the transfer-metadata entries\n"
    "                                               (default prefix \"mc/\")\n"
    "options:\n"
    "  --master HOST:PORT   mooncake-master RPC ($MOONCAKE_MASTER, default 127.0.0.1:50051);\n"
    "                       redis://HOST:PORT/DB?cluster=ID or\n"
    "                       redis-sentinel://H1:P1,H2:P2/NAME/DB?cluster=ID: the leader of\n"
    "                       HA masters\n"
    "  --http HOST:PORT     mooncake-master HTTP ($MOONCAKE_HTTP, default 127.0.0.1:9003)\n"
    "  --timeout SECONDS    per call (default 5)\n"
    "  --secret-file FILE   the cluster's secret ([security] secret_file;\n"
    "                       $MOONCAKE_SECRET_FILE): authenticate to the master and nodes\n"
    "  -v, --verbose        library log at info;  -q, --quiet  no library log at all\n"
    "  -h, --help           this text;  -V, --version  print the version\n"
    "exit status: 0 ok, 1 the operation failed, 2 usage error\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(" PROG " --help for usage)\n");
    return EXIT_USAGE;
}

/* "mooncake-cli: get KEY: OBJECT_NOT_FOUND (object not found)" */
static int fail_st(const char *op, const char *what, mc_status_t st)
{
    fprintf(stderr, PROG ": %s%s%s: %s (%s)\n", op, what ? " " : "", what ? what : "",
            mc_status_str(st), mc_status_msg(st));
    return EXIT_FAIL;
}

static int parse_hostport(const char *s, char *host, size_t hlen, uint16_t *port)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s || (size_t)(colon - s) >= hlen)
        return -1;
    char *end;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || p == 0 || p > 65535 || end == colon + 1)
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    *port = (uint16_t)p;
    return 0;
}

static const char *human(uint64_t v, char *buf, size_t len)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double d = (double)v;
    unsigned u = 0;
    while (d >= 1024 && u < 4) {
        d /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", v);
    else
        snprintf(buf, len, "%.1f %s", d, unit[u]);
    return buf;
}

/* Print bytes as text, escaping what a terminal should not see. */
static void put_escaped(FILE *f, const void *p, size_t len)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\\')
            fputs("\\\\", f);
        else if (s[i] < 0x20 || s[i] >= 0x7f)
            fprintf(f, "\\x%02x", s[i]);
        else
            fputc(s[i], f);
    }
}

/* ------------------------------------------------------------ raw RPC */

static int rpc_open(cli_t *c)
{
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "cli";
    if (mc_reactor_group_create(&go, &c->g) != MC_OK) {
        fprintf(stderr, PROG ": cannot start an event loop\n");
        return -1;
    }
    mc_rpc_client_opts_t co;
    mc_rpc_client_opts_init(&co);
    co.host = c->mhost;
    co.port = c->mport;
    co.call_timeout_us = c->timeout_us;
    co.connect_timeout_us = c->timeout_us < 3000000 ? c->timeout_us : 3000000;
    co.auth_key = c->secret_file != NULL ? &c->key : NULL;
    mc_status_t st = mc_rpc_client_create(mc_reactor_group_get(c->g, 0), &co, &c->rpc);
    if (st != MC_OK) {
        fprintf(stderr, PROG ": master %s:%u: %s (%s)\n", c->mhost, c->mport, mc_status_str(st),
                mc_status_msg(st));
        return -1;
    }
    return 0;
}

static void rpc_close(cli_t *c)
{
    mc_rpc_client_destroy(c->rpc);
    c->rpc = NULL;
    if (c->g != NULL)
        mc_reactor_group_destroy(c->g);
    c->g = NULL;
}

/* One call; body written by the mc_mcli_* encoder the caller ran on w. On
 * failure prints the status and the master's MC_F_ERROR sentence if any. */
static mc_status_t rpc_call(cli_t *c, uint16_t method, const mc_buf_t *body, mc_buf_t *resp,
                            const char *op, const char *what)
{
    mc_buf_reset(resp);
    mc_status_t st =
        mc_rpc_call_sync(c->rpc, method, mc_buf_head(body), mc_buf_used(body), c->timeout_us, resp);
    if (st != MC_OK) {
        const void *why = NULL;
        size_t wlen = 0;
        fail_st(op, what, st);
        if (mc_buf_used(resp) > 0 &&
            mc_mcli_dec_bytes(mc_buf_head(resp), mc_buf_used(resp), MC_F_ERROR, &why, &wlen) ==
                MC_OK &&
            wlen > 0) {
            fprintf(stderr, PROG ": master says: ");
            put_escaped(stderr, why, wlen);
            fputc('\n', stderr);
        }
        if (st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT)
            fprintf(stderr, PROG ": is mooncake-master running at %s:%u?\n", c->mhost, c->mport);
    }
    return st;
}

/* ------------------------------------------------------------ store client */

static mc_status_t store_open(cli_t *c, mc_store_t **out)
{
    char master[300];
    snprintf(master, sizeof(master), "%s:%u", c->mhost, c->mport);
    mc_store_config_t sc;
    mc_store_config_init(&sc);
    sc.master = c->redis_master != NULL ? c->redis_master : master;
    sc.global_segment_size = 0; /* contributes nothing */
    sc.local_buffer_size = 0;   /* the value's memory is registered instead */
    sc.reactors = 1;
    sc.rpc_timeout_us = c->timeout_us;
    sc.secret_file = c->secret_file;
    return mc_store_open(&sc, out);
}

/* A value in page-aligned anonymous memory: len bytes of data in a map_len
 * mapping (page-aligned so that registering it covers whole pages). */
typedef struct value {
    uint8_t *p;
    size_t len, map_len;
} value_t;

static void value_free(value_t *v)
{
    if (v->p != NULL)
        munmap(v->p, v->map_len);
    v->p = NULL;
}

static int value_alloc(value_t *v, size_t len)
{
    v->map_len = len ? len : 1;
    v->len = 0;
    void *p = mmap(NULL, v->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    v->p = p == MAP_FAILED ? NULL : p;
    return v->p != NULL ? 0 : -1;
}

/* Read all of fd (a regular file is sized up front; pipes grow by doubling). */
static int read_all(int fd, value_t *v)
{
    struct stat sb;
    size_t cap = 1u << 20;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0)
        cap = (size_t)sb.st_size + 1; /* +1: see EOF without growing */
    if (value_alloc(v, cap) != 0)
        return -1;
    for (;;) {
        if (v->len == v->map_len) {
            value_t bigger;
            if (value_alloc(&bigger, v->map_len * 2) != 0) {
                value_free(v);
                return -1;
            }
            memcpy(bigger.p, v->p, v->len);
            bigger.len = v->len;
            value_free(v);
            *v = bigger;
        }
        ssize_t n = read(fd, v->p + v->len, v->map_len - v->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            value_free(v);
            errno = e;
            return -1;
        }
        if (n == 0)
            return 0;
        v->len += (size_t)n;
    }
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ------------------------------------------------------------ put / get */

static int cmd_put(cli_t *c, int argc, char **argv)
{
    mc_replicate_config_t rc;
    mc_replicate_config_init(&rc);
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
        if (strcmp(argv[i], "--replicas") == 0 && i + 1 < argc) {
            char *end;
            unsigned long n = strtoul(argv[++i], &end, 10);
            if (*end != '\0' || n == 0 || n > 8)
                return usage_error("put: --replicas wants 1..8, got '%s'", argv[i]);
            rc.replica_num = (uint32_t)n;
        } else if (strcmp(argv[i], "--soft-pin") == 0) {
            rc.with_soft_pin = 1;
        } else if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else {
            return usage_error("put: unknown option '%s'", argv[i]);
        }
    }
    if (argc - i != 2)
        return usage_error("put wants KEY FILE|- %s", "(and options before KEY)");
    const char *key = argv[i], *file = argv[i + 1];

    int fd = strcmp(file, "-") == 0 ? 0 : open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, PROG ": put %s: cannot open %s: %s\n", key, file, strerror(errno));
        return EXIT_FAIL;
    }
    value_t v = {0};
    int r = read_all(fd, &v);
    int e = errno;
    if (fd != 0)
        close(fd);
    if (r != 0) {
        fprintf(stderr, PROG ": put %s: cannot read %s: %s\n", key, file, strerror(e));
        return EXIT_FAIL;
    }
    if (v.len == 0) {
        value_free(&v);
        fprintf(stderr, PROG ": put %s: %s is empty (values are at least 1 byte)\n", key, file);
        return EXIT_FAIL;
    }

    mc_store_t *s = NULL;
    mc_status_t st = store_open(c, &s);
    if (st != MC_OK) {
        value_free(&v);
        return fail_st("put", key, st);
    }
    st = mc_store_register_buffer(s, v.p, v.map_len);
    if (st == MC_OK) {
        st = mc_store_put(s, key, strlen(key), v.p, v.len, &rc);
        mc_store_unregister_buffer(s, v.p);
    }
    mc_store_close(s);
    size_t len = v.len;
    value_free(&v);
    if (st != MC_OK)
        return fail_st("put", key, st);
    char h[32];
    printf("put %s: %zu bytes (%s), %u replica(s) requested\n", key, len, human(len, h, sizeof(h)),
           rc.replica_num);
    return 0;
}

static int cmd_get(cli_t *c, int argc, char **argv)
{
    if (argc < 2 || argc > 3)
        return usage_error("get wants KEY [FILE|-]%s", "");
    const char *key = argv[1];
    const char *file = argc == 3 ? argv[2] : "-";
    size_t klen = strlen(key);

    mc_store_t *s = NULL;
    mc_status_t st = store_open(c, &s);
    if (st != MC_OK)
        return fail_st("get", key, st);
    value_t v = {0};
    int64_t got = mc_store_get_size(s, key, klen);
    /* The object may be replaced by a larger one between the size and the
     * read: then the get reports the size it needs and we try again. */
    for (int attempt = 0; got >= 0 && attempt < 3; attempt++) {
        value_free(&v);
        if (value_alloc(&v, (size_t)got) != 0) {
            got = MC_ERR_NOMEM;
            break;
        }
        st = mc_store_register_buffer(s, v.p, v.map_len);
        if (st != MC_OK) {
            got = st;
            break;
        }
        uint64_t need = 0;
        got = mc_store_get(s, key, klen, v.p, (size_t)got > 0 ? (size_t)got : 1, &need);
        mc_store_unregister_buffer(s, v.p);
        if (got != MC_ERR_BUFFER_OVERFLOW)
            break;
        got = (int64_t)need;
        if (attempt == 2)
            got = MC_ERR_BUFFER_OVERFLOW;
    }
    mc_store_close(s);
    if (got < 0) {
        value_free(&v);
        return fail_st("get", key, (mc_status_t)got);
    }

    int rc = 0;
    int fd =
        strcmp(file, "-") == 0 ? 1 : open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write_all(fd, v.p, (size_t)got) != 0) {
        fprintf(stderr, PROG ": get %s: cannot write %s: %s\n", key, file, strerror(errno));
        rc = EXIT_FAIL;
    }
    if (fd > 1 && close(fd) != 0 && rc == 0) {
        fprintf(stderr, PROG ": get %s: cannot write %s: %s\n", key, file, strerror(errno));
        rc = EXIT_FAIL;
    }
    value_free(&v);
    return rc;
}

/* ------------------------------------------------------------ rm / stat */

static int cmd_rm(cli_t *c, int argc, char **argv)
{
    int force = 0;
    const char *regex = NULL, *key = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--force") == 0 || strcmp(argv[i], "-f") == 0)
            force = 1;
        else if (strcmp(argv[i], "--regex") == 0 && i + 1 < argc && regex == NULL)
            regex = argv[++i];
        else if (strcmp(argv[i], "--") == 0 && i + 2 == argc && key == NULL)
            key = argv[++i];
        else if (argv[i][0] != '-' && key == NULL)
            key = argv[i];
        else
            return usage_error("rm: unexpected '%s'", argv[i]);
    }
    if ((key == NULL) == (regex == NULL))
        return usage_error("rm wants KEY or --regex RE%s", "");
    if (rpc_open(c) != 0)
        return EXIT_FAIL;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_status_t st;
    int rc = 0;
    if (key != NULL) {
        mc_mcli_remove(&w, key, strlen(key), force);
        st = rpc_call(c, MC_RPC_REMOVE, &body, &resp, "rm", key);
        if (st == MC_OK)
            printf("removed %s\n", key);
        else if (st == MC_ERR_OBJECT_HAS_LEASE)
            fprintf(stderr,
                    PROG ": a reader's lease (e.g. of a recent get or stat) protects "
                         "%s for up to master.lease_ttl: retry later, or rm --force\n",
                    key);
    } else {
        mc_mcli_regex(&w, regex, force);
        st = rpc_call(c, MC_RPC_REMOVE_BY_REGEX, &body, &resp, "rm --regex", regex);
        int64_t n = 0;
        if (st == MC_OK) {
            st = mc_mcli_dec_int(mc_buf_head(&resp), mc_buf_used(&resp), MC_F_COUNT, &n);
            if (st != MC_OK)
                fail_st("rm --regex", regex, st);
        }
        if (st == MC_OK)
            printf("removed %lld key(s) matching %s\n", (long long)n, regex);
    }
    if (st != MC_OK)
        rc = EXIT_FAIL;
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    rpc_close(c);
    return rc;
}

static const char *replica_state(mc_master_replica_status_t s)
{
    switch (s) {
    case MC_MASTER_REPLICA_PROCESSING:
        return "PROCESSING";
    case MC_MASTER_REPLICA_COMPLETE:
        return "COMPLETE";
    default:
        return "?";
    }
}

static int cmd_stat(cli_t *c, int argc, char **argv)
{
    if (argc != 2)
        return usage_error("stat wants KEY%s", "");
    const char *key = argv[1];
    if (rpc_open(c) != 0)
        return EXIT_FAIL;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_key(&w, key, strlen(key));
    static mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    uint64_t lease_us = 0;
    int rc = EXIT_FAIL;
    mc_status_t st = rpc_call(c, MC_RPC_GET_REPLICA_LIST, &body, &resp, "stat", key);
    if (st == MC_OK) {
        st = mc_mcli_dec_replicas(mc_buf_head(&resp), mc_buf_used(&resp), d, MC_MASTER_MAX_REPLICAS,
                                  &n, &lease_us);
        if (st != MC_OK)
            fail_st("stat", key, st);
    }
    if (st == MC_OK) {
        char h[32];
        uint64_t size = n > 0 ? d[0].size : 0;
        printf("key       %s\n", key);
        printf("size      %" PRIu64 " (%s)\n", size, human(size, h, sizeof(h)));
        printf("replicas  %u\n", n);
        printf("lease     %.3f s (granted by this stat: the object is not removed or "
               "evicted before it ends)\n",
               (double)lease_us / 1e6);
        printf("  %-3s %-32s %-24s %-18s %s\n", "#", "SEGMENT", "ENDPOINT", "ADDRESS", "STATE");
        for (uint32_t i = 0; i < n; i++)
            if (d[i].kind == MC_MASTER_REPLICA_DISK) /* a file of the persistent tier */
                printf("  %-3u %-32s %-24s %-18s %s\n", i, "DISK (tier file)", "-", "-",
                       replica_state(d[i].status));
            else
                printf("  %-3u %-32s %-24s 0x%016" PRIx64 " %s\n", i, d[i].segment_name,
                       d[i].te_endpoint, d[i].address, replica_state(d[i].status));
        rc = 0;
    }
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    rpc_close(c);
    return rc;
}

/* ------------------------------------------------------------ HTTP + JSON */

/* GET path from the master's HTTP port; the body (NUL-terminated) into *out.
 * Returns the HTTP status, or -1 with *err set (connect/read failure). */
static int http_get(const cli_t *c, const char *path, mc_buf_t *out, const char **err)
{
    char port[8];
    snprintf(port, sizeof(port), "%u", c->hport);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    *err = NULL;
    int gai = getaddrinfo(c->hhost, port, &hints, &ai);
    if (gai != 0) {
        *err = gai_strerror(gai);
        return -1;
    }
    int fd = -1, code = -1;
    for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            close(fd);
            fd = -1;
            continue;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (poll(&pfd, 1, (int)(c->timeout_us / 1000)) != 1 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            errno = soerr ? soerr : ETIMEDOUT;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        *err = strerror(errno);
        return -1;
    }
    char req[2048];
    int rl = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, c->hhost);
    if (rl <= 0 || (size_t)rl >= sizeof(req)) {
        *err = "request too long";
        goto out;
    }
    for (int sent = 0; sent < rl;) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        ssize_t n = poll(&pfd, 1, (int)(c->timeout_us / 1000)) == 1
                        ? send(fd, req + sent, (size_t)(rl - sent), MSG_NOSIGNAL)
                        : -1;
        if (n < 0 && errno == EAGAIN)
            continue;
        if (n <= 0) {
            *err = n < 0 ? strerror(errno) : "timeout";
            goto out;
        }
        sent += (int)n;
    }
    mc_buf_t raw = MC_BUF_INIT;
    uint64_t deadline = mc_now_us() + c->timeout_us;
    for (;;) {
        if (mc_buf_used(&raw) > HTTP_MAX_BODY) {
            *err = "answer too large";
            break;
        }
        if (mc_buf_reserve(&raw, 65536) != MC_OK) {
            *err = "out of memory";
            break;
        }
        uint64_t now = mc_now_us();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (now >= deadline || poll(&pfd, 1, (int)((deadline - now) / 1000) + 1) != 1) {
            *err = "timeout";
            break;
        }
        ssize_t n = recv(fd, mc_buf_tail(&raw), mc_buf_room(&raw), 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0) {
            *err = strerror(errno);
            break;
        }
        if (n == 0)
            break;
        mc_buf_produce(&raw, (size_t)n);
    }
    if (*err == NULL) {
        const char *h = (const char *)mc_buf_head(&raw);
        size_t hl = mc_buf_used(&raw);
        const char *sep = memmem(h, hl, "\r\n\r\n", 4);
        if (sep == NULL || sscanf(h, "HTTP/%*d.%*d %d", &code) != 1) {
            *err = "malformed HTTP answer";
            code = -1;
        } else {
            size_t off = (size_t)(sep + 4 - h);
            if (mc_buf_append(out, h + off, hl - off) != MC_OK ||
                mc_buf_append(out, "", 1) != MC_OK) {
                *err = "out of memory";
                code = -1;
            }
        }
    }
    mc_buf_fini(&raw);
out:
    close(fd);
    return *err != NULL ? -1 : code;
}

/* A flat JSON object as the master's HTTP port writes them: string, number
 * and boolean members only. Strings are unescaped into val (bytes; \u00XX
 * gives back the byte the master escaped). */
#define JF_MAX 16
#define JV_MAX 8192
typedef struct jfield {
    char name[32];
    char val[JV_MAX];
    size_t vlen;
} jfield_t;

typedef struct jobj {
    jfield_t f[JF_MAX];
    int n;
} jobj_t;

static const char *jget(const jobj_t *o, const char *name, size_t *len)
{
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->f[i].name, name) == 0) {
            if (len != NULL)
                *len = o->f[i].vlen;
            return o->f[i].val;
        }
    if (len != NULL)
        *len = 1;
    return "-";
}

static uint64_t jget_u64(const jobj_t *o, const char *name)
{
    return strtoull(jget(o, name, NULL), NULL, 10);
}

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    return p;
}

/* Parse one string at p (at the quote) into dst; returns past it or NULL. */
static const char *jstring(const char *p, char *dst, size_t room, size_t *len)
{
    size_t n = 0;
    if (*p++ != '"')
        return NULL;
    while (*p != '"') {
        unsigned ch;
        if (*p == '\0')
            return NULL;
        if (*p == '\\') {
            p++;
            switch (*p) {
            case 'n':
                ch = '\n';
                break;
            case 't':
                ch = '\t';
                break;
            case 'r':
                ch = '\r';
                break;
            case 'b':
                ch = '\b';
                break;
            case 'f':
                ch = '\f';
                break;
            case 'u':
                if (sscanf(p + 1, "%4x", &ch) != 1)
                    return NULL;
                p += 4;
                break;
            case '\0':
                return NULL;
            default:
                ch = (unsigned char)*p;
                break;
            }
            p++;
        } else {
            ch = (unsigned char)*p++;
        }
        if (n + 1 < room)
            dst[n++] = (char)ch; /* the master escapes single bytes only */
    }
    dst[n] = '\0';
    *len = n;
    return p + 1;
}

/* Call fn for every object of a top-level array. -1 on malformed input. */
static int json_each(const char *p, int (*fn)(void *arg, const jobj_t *o), void *arg)
{
    static jobj_t o;
    p = skip_ws(p);
    if (*p++ != '[')
        return -1;
    p = skip_ws(p);
    if (*p == ']')
        return 0;
    for (;;) {
        p = skip_ws(p);
        if (*p++ != '{')
            return -1;
        o.n = 0;
        p = skip_ws(p);
        while (*p != '}') {
            jfield_t *f = &o.f[o.n < JF_MAX ? o.n : JF_MAX - 1];
            size_t nl;
            p = jstring(p, f->name, sizeof(f->name), &nl);
            if (p == NULL)
                return -1;
            p = skip_ws(p);
            if (*p++ != ':')
                return -1;
            p = skip_ws(p);
            if (*p == '"') {
                p = jstring(p, f->val, sizeof(f->val), &f->vlen);
                if (p == NULL)
                    return -1;
            } else {
                size_t n = strcspn(p, ",} \n\r\t");
                if (n == 0 || n >= sizeof(f->val))
                    return -1;
                memcpy(f->val, p, n);
                f->val[n] = '\0';
                f->vlen = n;
                p += n;
            }
            if (o.n < JF_MAX)
                o.n++;
            p = skip_ws(p);
            if (*p == ',')
                p = skip_ws(p + 1);
            else if (*p != '}')
                return -1;
        }
        p = skip_ws(p + 1);
        if (fn(arg, &o) != 0)
            return 0;
        if (*p == ',') {
            p++;
            continue;
        }
        return *p == ']' ? 0 : -1;
    }
}

static void url_encode(const char *s, char *out, size_t room)
{
    size_t n = 0;
    for (; *s && n + 4 < room; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~')
            out[n++] = (char)ch;
        else
            n += (size_t)snprintf(out + n, room - n, "%%%02X", ch);
    }
    out[n] = '\0';
}

/* ------------------------------------------------------------ ls */

typedef struct ls_ctx {
    int pass; /* 0: measure the key column, 1: print */
    size_t keyw;
    size_t n;
    uint64_t bytes;
} ls_ctx_t;

static size_t escaped_len(const char *p, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)p[i];
        n += ch == '\\' ? 2 : (ch < 0x20 || ch >= 0x7f) ? 4 : 1;
    }
    return n;
}

static void print_key_cell(const char *k, size_t klen, size_t width)
{
    put_escaped(stdout, k, klen);
    for (size_t w = escaped_len(k, klen); w < width; w++)
        putchar(' ');
}

static int ls_row(void *arg, const jobj_t *o)
{
    ls_ctx_t *x = arg;
    size_t klen;
    const char *k = jget(o, "key", &klen);
    if (x->pass == 0) {
        size_t w = escaped_len(k, klen);
        if (w > x->keyw)
            x->keyw = w;
        return 0;
    }
    char h[32];
    uint64_t size = jget_u64(o, "size");
    print_key_cell(k, klen, x->keyw);
    /* memory replicas, "+D" when the object also has its tier file */
    const char *dj = jget(o, "disk", NULL);
    char reps[32];
    snprintf(reps, sizeof(reps), "%s%s", jget(o, "replicas", NULL),
             dj != NULL && strncmp(dj, "true", 4) == 0 ? "+D" : "");
    printf("  %14" PRIu64 "  %10s  %8s  %-8s  %s\n", size, human(size, h, sizeof(h)), reps,
           strcmp(jget(o, "complete", NULL), "true") == 0 ? "yes" : "no",
           jget(o, "lease_ms_left", NULL));
    x->n++;
    x->bytes += size;
    return 0;
}

static void ls_header(size_t keyw)
{
    printf("%-*s  %14s  %10s  %8s  %-8s  %s\n", (int)keyw, "KEY", "SIZE", "", "REPLICAS",
           "COMPLETE", "LEASE_MS");
}

static int ls_http(cli_t *c, const char *regex, unsigned long limit, int *tried)
{
    char path[1400], enc[1100] = "";
    if (regex != NULL)
        url_encode(regex, enc, sizeof(enc));
    snprintf(path, sizeof(path), "/keys?limit=%lu%s%s", limit, regex ? "&regex=" : "", enc);
    mc_buf_t body = MC_BUF_INIT;
    const char *err = NULL;
    int code = http_get(c, path, &body, &err);
    *tried = code >= 0;
    if (code < 0) {
        mc_buf_fini(&body);
        if (!c->http_given)
            return -1; /* let the caller fall back to RPC */
        fprintf(stderr, PROG ": ls: http://%s:%u%s: %s\n", c->hhost, c->hport, path, err);
        return EXIT_FAIL;
    }
    const char *text = (const char *)mc_buf_head(&body);
    if (code != 200) {
        /* evhttp's error page: the reason is its <TITLE> */
        const char *t = text ? strstr(text, "<TITLE>") : NULL;
        int tl = t ? (int)strcspn(t + 7, "<") : 0;
        fprintf(stderr, PROG ": ls: the master's HTTP port answered %.*s\n", t ? tl : 3,
                t ? t + 7 : "an error");
        mc_buf_fini(&body);
        return EXIT_FAIL;
    }
    ls_ctx_t x = {.keyw = 3};
    int rc = json_each(text, ls_row, &x);
    if (rc == 0) {
        x.pass = 1;
        ls_header(x.keyw);
        json_each(text, ls_row, &x);
        char h[32];
        printf("%zu key(s), %s%s\n", x.n, human(x.bytes, h, sizeof(h)),
               x.n >= limit ? " (limit reached: --limit N shows more)" : "");
    } else {
        fprintf(stderr, PROG ": ls: cannot parse the master's /keys answer\n");
    }
    mc_buf_fini(&body);
    return rc == 0 ? 0 : EXIT_FAIL;
}

/* GET_REPLICA_LIST_BY_REGEX: {ENTRIES: [{KEY, REPLICAS}], TRUNCATED}. */
static int ls_rpc(cli_t *c, const char *regex, unsigned long limit)
{
    if (rpc_open(c) != 0)
        return EXIT_FAIL;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_regex(&w, regex ? regex : ".*", 0);
    int rc = EXIT_FAIL;
    if (rpc_call(c, MC_RPC_GET_REPLICA_LIST_BY_REGEX, &body, &resp, "ls", regex) != MC_OK)
        goto out;
    static mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS];
    for (int pass = 0; pass < 2; pass++) {
        mc_mp_reader_t r;
        size_t keyw = 3, n = 0;
        uint64_t bytes = 0;
        int truncated = 0;
        mc_mp_reader_init(&r, mc_buf_head(&resp), mc_buf_used(&resp));
        uint32_t nf = mc_mp_read_map(&r);
        if (pass == 1)
            ls_header((size_t)rc);
        for (uint32_t f = 0; f < nf && r.err == MC_OK; f++) {
            switch (mc_mp_read_uint(&r)) {
            case MC_F_ENTRIES: {
                uint32_t ne = mc_mp_read_array(&r);
                for (uint32_t e = 0; e < ne && r.err == MC_OK; e++) {
                    const char *k = NULL;
                    uint32_t klen = 0, nrep = 0;
                    uint32_t m = mc_mp_read_map(&r);
                    for (uint32_t i = 0; i < m && r.err == MC_OK; i++) {
                        switch (mc_mp_read_uint(&r)) {
                        case MC_F_KEY:
                            k = mc_mp_read_bin(&r, &klen);
                            break;
                        case MC_F_REPLICAS:
                            mc_proto_read_replicas(&r, d, MC_MASTER_MAX_REPLICAS, &nrep);
                            break;
                        default:
                            mc_mp_skip(&r);
                            break;
                        }
                    }
                    if (r.err != MC_OK || k == NULL || n >= limit)
                        continue;
                    n++;
                    if (pass == 0) {
                        size_t kw = escaped_len(k, klen);
                        keyw = kw > keyw ? kw : keyw;
                        continue;
                    }
                    int complete = nrep > 0;
                    for (uint32_t i = 0; i < nrep; i++)
                        complete &= d[i].status == MC_MASTER_REPLICA_COMPLETE;
                    uint64_t size = nrep > 0 ? d[0].size : 0;
                    char h[32];
                    print_key_cell(k, klen, (size_t)rc);
                    printf("  %14" PRIu64 "  %10s  %8u  %-8s  %s\n", size,
                           human(size, h, sizeof(h)), nrep, complete ? "yes" : "no", "-");
                    bytes += size;
                }
                break;
            }
            case MC_F_TRUNCATED:
                truncated = mc_mp_read_bool(&r);
                break;
            default:
                mc_mp_skip(&r);
                break;
            }
        }
        if (r.err != MC_OK) {
            fail_st("ls", "(decoding the answer)", r.err);
            rc = EXIT_FAIL;
            goto out;
        }
        if (pass == 0) {
            rc = (int)keyw; /* carried to pass 1 */
        } else {
            char h[32];
            printf("%zu key(s), %s%s\n", n, human(bytes, h, sizeof(h)),
                   truncated || n >= limit ? " (list truncated)" : "");
        }
    }
    rc = 0;
out:
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    rpc_close(c);
    return rc;
}

static int cmd_ls(cli_t *c, int argc, char **argv)
{
    const char *regex = NULL;
    unsigned long limit = 1000;
    int use_rpc = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--regex") == 0 && i + 1 < argc) {
            regex = argv[++i];
        } else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
            char *end;
            limit = strtoul(argv[++i], &end, 10);
            if (*end != '\0' || limit == 0 || limit > 100000)
                return usage_error("ls: --limit wants 1..100000, got '%s'", argv[i]);
        } else if (strcmp(argv[i], "--rpc") == 0) {
            use_rpc = 1;
        } else {
            return usage_error("ls: unexpected '%s'", argv[i]);
        }
    }
    if (!use_rpc) {
        int tried = 0;
        int rc = ls_http(c, regex, limit, &tried);
        if (rc >= 0)
            return rc;
        /* no HTTP port where we looked, and none was named: ask over RPC */
    }
    return ls_rpc(c, regex, limit);
}

/* ------------------------------------------------------------ segments */

typedef struct seg_ctx {
    int pass;
    size_t namew, epw;
    size_t n;
    uint64_t cap, used;
} seg_ctx_t;

static int seg_row(void *arg, const jobj_t *o)
{
    seg_ctx_t *x = arg;
    size_t nl, el;
    const char *name = jget(o, "name", &nl), *ep = jget(o, "te_endpoint", &el);
    if (x->pass == 0) {
        x->namew = escaped_len(name, nl) > x->namew ? escaped_len(name, nl) : x->namew;
        x->epw = el > x->epw ? el : x->epw;
        return 0;
    }
    uint64_t cap = jget_u64(o, "capacity"), used = jget_u64(o, "used");
    char hc[32], hu[32];
    print_key_cell(name, nl, x->namew);
    printf("  %-*s  %12s  %12s  %5.1f%%  %8s  %s\n", (int)x->epw, ep, human(cap, hc, sizeof(hc)),
           human(used, hu, sizeof(hu)), cap ? 100.0 * (double)used / (double)cap : 0.0,
           jget(o, "allocations", NULL), jget(o, "state", NULL));
    x->n++;
    x->cap += cap;
    x->used += used;
    return 0;
}

static int cmd_segments(cli_t *c, int argc, char **argv)
{
    (void)argv;
    if (argc != 1)
        return usage_error("segments takes no arguments%s", "");
    mc_buf_t body = MC_BUF_INIT;
    const char *err = NULL;
    int code = http_get(c, "/segments", &body, &err);
    if (code != 200) {
        if (code < 0)
            fprintf(stderr,
                    PROG ": segments: http://%s:%u/segments: %s (is the master's HTTP "
                         "port elsewhere? --http HOST:PORT)\n",
                    c->hhost, c->hport, err);
        else
            fprintf(stderr, PROG ": segments: HTTP %d from the master\n", code);
        mc_buf_fini(&body);
        return EXIT_FAIL;
    }
    const char *text = (const char *)mc_buf_head(&body);
    seg_ctx_t x = {.namew = 7, .epw = 8};
    int rc = json_each(text, seg_row, &x);
    if (rc == 0) {
        x.pass = 1;
        printf("%-*s  %-*s  %12s  %12s  %6s  %8s  %s\n", (int)x.namew, "SEGMENT", (int)x.epw,
               "ENDPOINT", "CAPACITY", "USED", "USE", "ALLOCS", "STATE");
        json_each(text, seg_row, &x);
        char hc[32], hu[32];
        printf("%zu segment(s), %s used of %s (%.1f%%)\n", x.n, human(x.used, hu, sizeof(hu)),
               human(x.cap, hc, sizeof(hc)), x.cap ? 100.0 * (double)x.used / (double)x.cap : 0.0);
    } else {
        fprintf(stderr, PROG ": segments: cannot parse the master's answer\n");
    }
    mc_buf_fini(&body);
    return rc == 0 ? 0 : EXIT_FAIL;
}

/* ------------------------------------------------------------ meta */

static const char *field_name(uint64_t id)
{
    switch (id) {
    case MC_F_NAME:
        return "name";
    case MC_F_HOST:
        return "host";
    case MC_F_PORT:
        return "port";
    case MC_F_PROTOCOLS:
        return "protocols";
    case MC_F_BUFFERS:
        return "buffers";
    case MC_F_ADDR:
        return "addr";
    case MC_F_LENGTH:
        return "length";
    case MC_F_LOCATION:
        return "location";
    case MC_F_RDMA:
        return "rdma";
    case MC_F_RKEYS:
        return "rkeys";
    case MC_F_NICS:
        return "nics";
    case MC_F_MATRIX:
        return "matrix";
    case MC_F_GID:
        return "gid";
    case MC_F_LID:
        return "lid";
    case MC_F_MTU:
        return "mtu";
    case MC_F_SIZE:
        return "size";
    case MC_F_KEY:
        return "key";
    case MC_F_VALUE:
        return "value";
    case MC_F_TEXT:
        return "text";
    default:
        return NULL;
    }
}

/* One scalar (or an array of scalars, comma-joined) on the current line.
 * Returns 0 when the value was not a scalar (and nothing was consumed). */
static int print_scalar(mc_mp_reader_t *r, uint64_t field)
{
    char h[32];
    uint32_t len;
    const char *s;
    switch (mc_mp_peek(r)) {
    case MC_MP_UINT: {
        uint64_t v = mc_mp_read_uint(r);
        if (field == MC_F_ADDR)
            printf("0x%" PRIx64, v);
        else if (field == MC_F_LENGTH || field == MC_F_SIZE)
            printf("%" PRIu64 " (%s)", v, human(v, h, sizeof(h)));
        else
            printf("%" PRIu64, v);
        return 1;
    }
    case MC_MP_INT:
        printf("%" PRId64, mc_mp_read_int(r));
        return 1;
    case MC_MP_BOOL:
        printf("%s", mc_mp_read_bool(r) ? "true" : "false");
        return 1;
    case MC_MP_NIL:
        mc_mp_read_nil(r);
        printf("nil");
        return 1;
    case MC_MP_FLOAT:
        printf("%g", mc_mp_read_double(r));
        return 1;
    case MC_MP_STR:
        s = mc_mp_read_str(r, &len);
        put_escaped(stdout, s, len);
        return 1;
    case MC_MP_BIN:
        s = mc_mp_read_bin(r, &len);
        printf("bin:");
        put_escaped(stdout, s, len);
        return 1;
    default:
        return 0;
    }
}

static void print_value(mc_mp_reader_t *r, uint64_t field, int indent);

/* A map with unsigned keys: "name: value" lines; buffers-like arrays of
 * small maps: one line per element. */
static void print_map(mc_mp_reader_t *r, int indent)
{
    uint32_t n = mc_mp_read_map(r);
    for (uint32_t i = 0; i < n && r->err == MC_OK; i++) {
        uint64_t id = mc_mp_read_uint(r);
        const char *nm = field_name(id);
        if (nm != NULL)
            printf("%*s%-10s ", indent, "", nm);
        else
            printf("%*sfield %-4" PRIu64 " ", indent, "", id);
        print_value(r, id, indent);
    }
}

static void print_value(mc_mp_reader_t *r, uint64_t field, int indent)
{
    if (print_scalar(r, field)) {
        putchar('\n');
        return;
    }
    if (mc_mp_peek(r) == MC_MP_MAP) {
        putchar('\n');
        print_map(r, indent + 2);
        return;
    }
    if (mc_mp_peek(r) != MC_MP_ARRAY) {
        mc_mp_skip(r);
        printf("(?)\n");
        return;
    }
    uint32_t n = mc_mp_read_array(r);
    if (field == MC_F_BUFFERS)
        printf("%u\n", n);
    for (uint32_t i = 0; i < n && r->err == MC_OK; i++) {
        if (mc_mp_peek(r) == MC_MP_MAP) {
            /* one line per element: "[i] addr 0x.. length .. location .." */
            if (i == 0 && field != MC_F_BUFFERS)
                putchar('\n');
            printf("%*s[%u]", indent + 2, "", i);
            uint32_t m = mc_mp_read_map(r);
            for (uint32_t k = 0; k < m && r->err == MC_OK; k++) {
                uint64_t id = mc_mp_read_uint(r);
                const char *nm = field_name(id);
                if (nm != NULL)
                    printf(" %s ", nm);
                else
                    printf(" field%" PRIu64 " ", id);
                if (!print_scalar(r, id)) {
                    mc_mp_skip(r);
                    printf("(...)");
                }
            }
            putchar('\n');
        } else {
            if (i > 0)
                printf(", ");
            if (!print_scalar(r, field)) {
                mc_mp_skip(r);
                printf("(...)");
            }
            if (i + 1 == n)
                putchar('\n');
        }
    }
    if (n == 0 && field != MC_F_BUFFERS)
        printf("(none)\n");
}

static void print_meta_value(const uint8_t *v, size_t len)
{
    const char *why = NULL;
    if (len > 0 && mc_mp_validate(v, len, NULL, &why) == MC_OK) {
        mc_mp_reader_t r;
        mc_mp_reader_init(&r, v, len);
        print_map(&r, 2);
        if (r.err == MC_OK)
            return;
    }
    /* not one of ours: show the raw bytes */
    printf("  raw (%zu bytes): ", len);
    put_escaped(stdout, v, len > 512 ? 512 : len);
    printf("%s\n", len > 512 ? "..." : "");
}

/* META_LIST is paged: {ENTRIES, MORE}; ask again with the last key. */
static int cmd_meta(cli_t *c, int argc, char **argv)
{
    if (argc > 2)
        return usage_error("meta wants [PREFIX]%s", "");
    const char *prefix = argc == 2 ? argv[1] : "mc/";
    if (rpc_open(c) != 0)
        return EXIT_FAIL;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT, last = MC_BUF_INIT;
    int rc = EXIT_FAIL, more = 1, first = 1;
    size_t count = 0;
    while (more) {
        mc_buf_reset(&body);
        mc_mp_writer_t w;
        mc_mp_writer_init(&w, &body);
        mc_mcli_meta_list_after(&w, prefix, strlen(prefix), first ? NULL : mc_buf_head(&last),
                                mc_buf_used(&last));
        first = 0;
        if (rpc_call(c, MC_RPC_META_LIST, &body, &resp, "meta", prefix) != MC_OK)
            goto out;
        mc_mp_reader_t r;
        mc_mp_reader_init(&r, mc_buf_head(&resp), mc_buf_used(&resp));
        more = 0;
        uint32_t nf = mc_mp_read_map(&r), got = 0;
        for (uint32_t f = 0; f < nf && r.err == MC_OK; f++) {
            uint64_t id = mc_mp_read_uint(&r);
            if (id == MC_F_MORE) {
                more = mc_mp_read_bool(&r);
                continue;
            }
            if (id != MC_F_ENTRIES) {
                mc_mp_skip(&r);
                continue;
            }
            uint32_t ne = mc_mp_read_array(&r);
            for (uint32_t e = 0; e < ne && r.err == MC_OK; e++) {
                const void *k = NULL, *v = NULL;
                uint32_t klen = 0, vlen = 0;
                uint32_t m = mc_mp_read_map(&r);
                for (uint32_t i = 0; i < m && r.err == MC_OK; i++) {
                    switch (mc_mp_read_uint(&r)) {
                    case MC_F_KEY:
                        k = mc_mp_read_bin(&r, &klen);
                        break;
                    case MC_F_VALUE:
                        v = mc_mp_read_bin(&r, &vlen);
                        break;
                    default:
                        mc_mp_skip(&r);
                        break;
                    }
                }
                if (r.err != MC_OK || k == NULL)
                    break;
                put_escaped(stdout, k, klen);
                putchar('\n');
                print_meta_value(v, v != NULL ? vlen : 0);
                mc_buf_reset(&last);
                if (mc_buf_append(&last, k, klen) != MC_OK) {
                    fail_st("meta", "(the cursor)", MC_ERR_NOMEM);
                    goto out;
                }
                count++;
                got++;
            }
        }
        if (r.err != MC_OK) {
            fail_st("meta", "(decoding the answer)", r.err);
            goto out;
        }
        if (got == 0)
            more = 0; /* an empty page ends it, whatever MORE says */
    }
    printf("%zu entr%s under \"%s\"\n", count, count == 1 ? "y" : "ies", prefix);
    rc = 0;
out:
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    mc_buf_fini(&last);
    rpc_close(c);
    return rc;
}

/* ------------------------------------------------------------ main */

static const struct {
    const char *name;
    int (*fn)(cli_t *c, int argc, char **argv);
} commands[] = {
    {"put", cmd_put},   {"get", cmd_get},           {"rm", cmd_rm},     {"ls", cmd_ls},
    {"stat", cmd_stat}, {"segments", cmd_segments}, {"meta", cmd_meta},
};

int main(int argc, char **argv)
{
    cli_t c = {.timeout_us = 5000000};
    const char *master = getenv("MOONCAKE_MASTER"), *http = getenv("MOONCAKE_HTTP");
    c.secret_file = getenv("MOONCAKE_SECRET_FILE");
    if (c.secret_file != NULL && c.secret_file[0] == '\0')
        c.secret_file = NULL;
    int verbose = 0, quiet = 0;
    c.http_given = http != NULL && http[0] != '\0';
    if (master == NULL || master[0] == '\0')
        master = "127.0.0.1:50051";
    if (!c.http_given)
        http = "127.0.0.1:9003";
    static const struct option lo[] = {
        {"master", 1, 0, 'm'},  {"http", 1, 0, 'H'},        {"timeout", 1, 0, 't'},
        {"verbose", 0, 0, 'v'}, {"quiet", 0, 0, 'q'},       {"help", 0, 0, 'h'},
        {"version", 0, 0, 'V'}, {"secret-file", 1, 0, 'S'}, {0, 0, 0, 0}};
    int o;
    /* "+": stop at the command, whose own options follow it */
    while ((o = getopt_long(argc, argv, "+m:t:vqhV", lo, NULL)) != -1) {
        switch (o) {
        case 'm':
            master = optarg;
            break;
        case 'H':
            http = optarg;
            c.http_given = 1;
            break;
        case 't': {
            char *end;
            double s = strtod(optarg, &end);
            if (*end != '\0' || !(s > 0) || s > 3600)
                return usage_error("--timeout wants seconds in (0, 3600], got '%s'", optarg);
            c.timeout_us = (uint64_t)(s * 1e6);
            break;
        }
        case 'S':
            c.secret_file = optarg;
            break;
        case 'v':
            verbose = 1;
            break;
        case 'q':
            quiet = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case 'V':
            printf(PROG " %s\n", mc_version());
            return 0;
        default:
            fputs(usage_text, stderr);
            return EXIT_USAGE;
        }
    }
    if (c.secret_file != NULL) {
        char why[300];
        if (mc_auth_key_load(c.secret_file, &c.key, why, sizeof(why)) != MC_OK) {
            fprintf(stderr, PROG ": --secret-file: %s\n", why);
            return EXIT_USAGE;
        }
    }
    char leader[MC_HA_ADDR_MAX];
    if (mc_ha_url_is_redis(master)) {
        /* HA masters: ask Redis which one leads (put/get go through the
         * store client, which follows the leader by itself) */
        mc_ha_url_t u;
        const char *why = NULL;
        if (mc_ha_url_parse(master, &u, &why) != MC_OK)
            return usage_error("--master: %s", why);
        if (u.cluster[0] == '\0')
            snprintf(u.cluster, sizeof(u.cluster), "mooncake");
        mc_status_t rs = mc_ha_resolve_leader(&u, 2000000, leader, sizeof(leader), NULL);
        if (rs != MC_OK) {
            fprintf(stderr, PROG ": no leader of cluster '%s' in %s: %s\n", u.cluster, master,
                    mc_status_str(rs));
            return 1;
        }
        c.redis_master = master;
        master = leader;
    }
    if (parse_hostport(master, c.mhost, sizeof(c.mhost), &c.mport) != 0)
        return usage_error("--master wants HOST:PORT or redis://HOST:PORT/DB?cluster=ID, got '%s'",
                           master);
    if (parse_hostport(http, c.hhost, sizeof(c.hhost), &c.hport) != 0)
        return usage_error("--http wants HOST:PORT, got '%s'", http);
    if (optind >= argc) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    signal(SIGPIPE, SIG_IGN);
    mc_log_set_all(verbose ? MC_LOG_INFO : MC_LOG_ERR);
    int devnull = -1;
    if (quiet && (devnull = open("/dev/null", O_WRONLY | O_CLOEXEC)) >= 0)
        mc_log_set_fd(devnull);

    const char *cmd = argv[optind];
    int rc = -1;
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(cmd, commands[i].name) == 0)
            rc = commands[i].fn(&c, argc - optind, argv + optind);
    if (rc < 0)
        rc = usage_error("unknown command '%s'", cmd);
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, PROG ": writing the output: %s\n", strerror(errno));
        rc = EXIT_FAIL;
    }
    if (devnull >= 0) {
        mc_log_set_fd(2);
        close(devnull);
    }
    return rc;
}
