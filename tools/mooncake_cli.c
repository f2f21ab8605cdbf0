/*
 * mooncake-cli - operator's command line for Mooncake Store.
 *
 *   mooncake-cli [--master HOST:PORT|redis://...] [--timeout S] [--json] [-v|-q] COMMAND ...
 *
 *   put [--replicas N] [--soft-pin] KEY FILE|-   store FILE (or stdin) under KEY
 *   get KEY [FILE|-]                             write the value to FILE (default stdout)
 *   rm [--force] KEY | rm [--force] --regex RE   remove one key / every key matching RE
 *   ls [--regex RE] [--limit N]                  keys with size, replicas, lease
 *   stat KEY                                     size, replicas, their segments, lease
 *   segments                                     mounted segments: capacity, used
 *   meta [PREFIX]                                the master's transfer-metadata entries
 *
 * A pure client of one address, the master's RPC port: put and get open a
 * store client (mooncake/store.h) that contributes no memory and has no
 * staging buffer (the value's own memory is registered instead: zero copy);
 * everything else is one raw master RPC (store/master_client.h, store/proto.h)
 * and starts no transfer engine. stat, ls and segments grant no lease and
 * record no access (QUERY_KEY, LIST_KEYS, LIST_SEGMENTS), so an rm right
 * after them is not refused with OBJECT_HAS_LEASE.
 *
 * --json: every command prints one JSON document on stdout (fields in
 * tools/README.md), also when it fails ({"ok": false, "error": NAME, ...});
 * the human lines on stderr stay.
 *
 * Exit status: 0 success, 1 the operation failed (one line on stderr:
 * "mooncake-cli: get KEY: OBJECT_NOT_FOUND (object not found)"), 2 usage.
 * --master defaults to $MOONCAKE_MASTER, then 127.0.0.1:50051. The CLI reads
 * no configuration file: flags and those variables are all it takes.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
#include "tools/cli_out.h"

#define PROG "mooncake-cli"
#define EXIT_FAIL 1
#define EXIT_USAGE 2

typedef struct cli {
    char mhost[256];
    uint16_t mport;
    uint64_t timeout_us;
    mc_reactor_group_t *g;
    mc_rpc_client_t *rpc;
    const char *redis_master; /* --master redis://...: the store client follows the leader */
    const char *cmd;          /* the command, for --json documents */
    int json;
    const char *secret_file; /* --secret-file: authenticate (the cluster's secret) */
    mc_auth_key_t key;
} cli_t;

static cli_t *g_cli; /* for fail_st's JSON document */

static const char usage_text[] =
    "usage: " PROG " [--master HOST:PORT] [--timeout SECONDS] [--json] [-v|-q] COMMAND ...\n"
    "commands:\n"
    "  put [--replicas N] [--soft-pin] KEY FILE|-   store FILE (- = stdin) under KEY\n"
    "  get KEY [FILE|-]                             write KEY's value to FILE (default stdout)\n"
    "  rm [--force] KEY                             remove KEY\n"
    "  rm [--force] --regex RE                      remove every key matching RE (PCRE2 syntax)\n"
    "  ls [--regex RE] [--limit N]                  list keys (1..100000, default 1000)\n"
    "  stat KEY                                     size, replicas, segments, lease of KEY\n"
    "  segments                                     mounted segments: capacity and use\n"
    "  meta [PREFIX]                                decode the transfer-metadata entries\n"
    "                                               (default prefix \"mc/\")\n"
    "stat, ls and segments take no lease: an rm right after them works.\n"
    "options:\n"
    "  --master HOST:PORT   mooncake-master RPC ($MOONCAKE_MASTER, default 127.0.0.1:50051);\n"
    "                       redis://HOST:PORT/DB?cluster=ID or\n"
    "                       redis-sentinel://H1:P1,H2:P2/NAME/DB?cluster=ID: the leader of\n"
    "                       HA masters\n"
    "  --timeout SECONDS    per call (default 5)\n"
    "  --json               one JSON document on stdout per command (tools/README.md)\n"
    "  --secret-file FILE   the cluster's secret ([security] secret_file;\n"
    "                       $MOONCAKE_SECRET_FILE): authenticate to the master and nodes\n"
    "  -v, --verbose        library log at info;  -q, --quiet  no library log at all\n"
    "  -h, --help           this text;  -V, --version  print the version\n"
    "No configuration file: these flags, $MOONCAKE_MASTER and $MOONCAKE_SECRET_FILE are all\n"
    "it reads.\n"
    "exit status: 0 ok, 1 the operation failed, 2 usage error\n";

/* {"command": ..., "ok": true, ... (the caller adds its fields, then j_end('}')) */
static void j_doc(const cli_t *c)
{
    j_begin('{');
    jk_cstr("command", c->cmd);
    jk_bool("ok", 1);
}

/* ------------------------------------------------------------ messages */

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(" PROG " --help for usage)\n");
    return EXIT_USAGE;
}

/* "mooncake-cli: get KEY: OBJECT_NOT_FOUND (object not found)"; with
 * --json also the failure's document on stdout (once per command). */
static int fail_msg(const char *op, const char *what, mc_status_t st, const char *detail)
{
    fprintf(stderr, PROG ": %s%s%s: %s (%s)%s%s\n", op, what ? " " : "", what ? what : "",
            mc_status_str(st), mc_status_msg(st), detail ? ": " : "", detail ? detail : "");
    if (g_cli != NULL && g_cli->json && j_depth() == 0) {
        j_begin('{');
        jk_cstr("command", g_cli->cmd);
        jk_bool("ok", 0);
        jk_cstr("error", mc_status_str(st));
        j_key("status");
        j_i64(st);
        jk_cstr("message", mc_status_msg(st));
        if (what != NULL)
            jk_cstr("subject", what);
        if (detail != NULL)
            jk_cstr("detail", detail);
        j_end('}');
    }
    return EXIT_FAIL;
}

static int fail_st(const char *op, const char *what, mc_status_t st)
{
    return fail_msg(op, what, st, NULL);
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

/* ------------------------------------------------------------ raw RPC */

static int rpc_open(cli_t *c)
{
    mc_reactor_group_opts_t go;
    mc_reactor_group_opts_init(&go);
    go.count = 1;
    go.pin = 0;
    go.name = "cli";
    if (mc_reactor_group_create(&go, &c->g) != MC_OK) {
        fail_msg(c->cmd, NULL, MC_ERR_INTERNAL_ERROR, "cannot start an event loop");
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
        char d[320];
        snprintf(d, sizeof(d), "master %s:%u", c->mhost, c->mport);
        fail_msg(c->cmd, NULL, st, d);
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
        char detail[512] = "";
        if (mc_buf_used(resp) > 0 &&
            mc_mcli_dec_bytes(mc_buf_head(resp), mc_buf_used(resp), MC_F_ERROR, &why, &wlen) ==
                MC_OK &&
            wlen > 0)
            snprintf(detail, sizeof(detail), "master says: %.*s", (int)(wlen < 400 ? wlen : 400),
                     (const char *)why);
        else if (st == MC_ERR_CONN_CLOSED || st == MC_ERR_RPC_TIMEOUT)
            snprintf(detail, sizeof(detail), "is mooncake-master running at %s:%u?", c->mhost,
                     c->mport);
        fail_msg(op, what, st, detail[0] ? detail : NULL);
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
        char d[320];
        snprintf(d, sizeof(d), "cannot open %s: %s", file, strerror(errno));
        return fail_msg("put", key, MC_ERR_IO, d);
    }
    value_t v = {0};
    int r = read_all(fd, &v);
    int e = errno;
    if (fd != 0)
        close(fd);
    if (r != 0) {
        char d[320];
        snprintf(d, sizeof(d), "cannot read %s: %s", file, strerror(e));
        return fail_msg("put", key, MC_ERR_IO, d);
    }
    if (v.len == 0) {
        value_free(&v);
        char d[320];
        snprintf(d, sizeof(d), "%s is empty (values are at least 1 byte)", file);
        return fail_msg("put", key, MC_ERR_INVALID_PARAMS, d);
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
    if (c->json) {
        j_doc(c);
        jk_cstr("key", key);
        jk_u64("size", len);
        jk_u64("replicas_requested", rc.replica_num);
        jk_bool("soft_pin", rc.with_soft_pin);
        j_end('}');
        return 0;
    }
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
    if (c->json && strcmp(file, "-") == 0) {
        /* the document carries the value */
        j_doc(c);
        jk_cstr("key", key);
        jk_u64("size", (uint64_t)got);
        j_key("value_base64");
        j_base64(v.p, (size_t)got);
        j_end('}');
        value_free(&v);
        return 0;
    }
    int fd =
        strcmp(file, "-") == 0 ? 1 : open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int werr = 0;
    if (fd < 0 || write_all(fd, v.p, (size_t)got) != 0)
        werr = errno;
    if (fd > 1 && close(fd) != 0 && werr == 0)
        werr = errno;
    if (werr != 0) {
        char d[320];
        snprintf(d, sizeof(d), "cannot write %s: %s", file, strerror(werr));
        rc = fail_msg("get", key, MC_ERR_IO, d);
    } else if (c->json) {
        j_doc(c);
        jk_cstr("key", key);
        jk_u64("size", (uint64_t)got);
        jk_cstr("file", file);
        j_end('}');
    }
    value_free(&v);
    return rc;
}

/* ------------------------------------------------------------ rm */

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
    int64_t n = 0;
    if (key != NULL) {
        mc_mcli_remove(&w, key, strlen(key), force);
        st = rpc_call(c, MC_RPC_REMOVE, &body, &resp, "rm", key);
        n = st == MC_OK;
        if (st == MC_ERR_OBJECT_HAS_LEASE)
            fprintf(stderr,
                    PROG ": a reader's lease (a get in progress or just done) protects %s for "
                         "up to master.lease_ttl: retry later, or rm --force\n",
                    key);
    } else {
        mc_mcli_regex(&w, regex, force);
        st = rpc_call(c, MC_RPC_REMOVE_BY_REGEX, &body, &resp, "rm --regex", regex);
        if (st == MC_OK) {
            st = mc_mcli_dec_int(mc_buf_head(&resp), mc_buf_used(&resp), MC_F_COUNT, &n);
            if (st != MC_OK)
                fail_st("rm --regex", regex, st);
        }
    }
    if (st == MC_OK) {
        if (c->json) {
            j_doc(c);
            if (key != NULL)
                jk_cstr("key", key);
            else
                jk_cstr("regex", regex);
            jk_bool("force", force);
            j_key("removed");
            j_i64(n);
            j_end('}');
        } else if (key != NULL) {
            printf("removed %s\n", key);
        } else {
            printf("removed %lld key(s) matching %s\n", (long long)n, regex);
        }
    }
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    rpc_close(c);
    return st == MC_OK ? 0 : EXIT_FAIL;
}

/* ------------------------------------------------------------ stat */

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
    static mc_master_replica_desc_t d[MC_MASTER_MAX_REPLICAS + 1];
    uint32_t n = 0;
    uint64_t size = 0, lease = 0, pin = 0, idle = 0;
    int complete = 0, disk = 0;
    int rc = EXIT_FAIL;
    mc_status_t st = rpc_call(c, MC_RPC_QUERY_KEY, &body, &resp, "stat", key);
    if (st != MC_OK)
        goto out;
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, mc_buf_head(&resp), mc_buf_used(&resp));
    uint32_t nf = mc_mp_read_map(&r);
    for (uint32_t f = 0; f < nf && r.err == MC_OK; f++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_SIZE:
            size = mc_mp_read_uint(&r);
            break;
        case MC_F_COMPLETE:
            complete = mc_mp_read_bool(&r);
            break;
        case MC_F_DISK:
            disk = mc_mp_read_bool(&r);
            break;
        case MC_F_REPLICAS:
            mc_proto_read_replicas(&r, d, MC_MASTER_MAX_REPLICAS + 1, &n);
            break;
        case MC_F_LEASE_LEFT_US:
            lease = mc_mp_read_uint(&r);
            break;
        case MC_F_PIN_LEFT_US:
            pin = mc_mp_read_uint(&r);
            break;
        case MC_F_IDLE_US:
            idle = mc_mp_read_uint(&r);
            break;
        default:
            mc_mp_skip(&r);
            break;
        }
    }
    if (r.err != MC_OK) {
        fail_st("stat", key, r.err);
        goto out;
    }
    rc = 0;
    if (c->json) {
        j_doc(c);
        jk_cstr("key", key);
        jk_u64("size", size);
        jk_bool("complete", complete);
        jk_bool("disk", disk);
        jk_u64("lease_ms_left", lease / 1000);
        jk_u64("soft_pin_ms_left", pin / 1000);
        jk_u64("idle_ms", idle / 1000);
        j_key("replicas");
        j_begin('[');
        for (uint32_t i = 0; i < n; i++) {
            int is_disk = d[i].kind == MC_MASTER_REPLICA_DISK;
            j_begin('{');
            jk_cstr("kind", is_disk ? "disk" : "memory");
            jk_cstr("segment", is_disk ? NULL : d[i].segment_name);
            jk_cstr("endpoint", is_disk ? NULL : d[i].te_endpoint);
            jk_u64("address", is_disk ? 0 : d[i].address);
            jk_cstr("state", replica_state(d[i].status));
            j_end('}');
        }
        j_end(']');
        j_end('}');
        goto out;
    }
    char h[32];
    printf("key       %s\n", key);
    printf("size      %" PRIu64 " (%s)\n", size, human(size, h, sizeof(h)));
    printf("state     %s\n", complete ? "complete" : "put in progress");
    printf("replicas  %u\n", n);
    printf("lease     %.3f s left (stat takes none)\n", (double)lease / 1e6);
    if (pin > 0)
        printf("soft pin  %.3f s left\n", (double)pin / 1e6);
    printf("idle      %.3f s since the last access\n", (double)idle / 1e6);
    printf("  %-3s %-32s %-24s %-18s %s\n", "#", "SEGMENT", "ENDPOINT", "ADDRESS", "STATE");
    for (uint32_t i = 0; i < n; i++)
        if (d[i].kind == MC_MASTER_REPLICA_DISK) /* a file of the persistent tier */
            printf("  %-3u %-32s %-24s %-18s %s\n", i, "DISK (tier file)", "-", "-",
                   replica_state(d[i].status));
        else if (d[i].kind == MC_MASTER_REPLICA_LOCAL_DISK) /* on its node's own disk */
            printf("  %-3u %-32s %-24s %-18s %s\n", i, d[i].segment_name, d[i].te_endpoint,
                   "LOCAL_DISK", replica_state(d[i].status));
        else
            printf("  %-3u %-32s %-24s 0x%016" PRIx64 " %s\n", i, d[i].segment_name,
                   d[i].te_endpoint, d[i].address, replica_state(d[i].status));
out:
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    rpc_close(c);
    return rc;
}

/* ------------------------------------------------------------ ls */

typedef struct key_row {
    const char *key; /* into the answer */
    uint32_t klen;
    uint64_t size, lease_us;
    uint32_t nrep;
    int disk, complete;
} key_row_t;

static int cmd_ls(cli_t *c, int argc, char **argv)
{
    const char *regex = NULL;
    unsigned long limit = 1000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--regex") == 0 && i + 1 < argc) {
            regex = argv[++i];
        } else if (strcmp(argv[i], "--rpc") == 0) {
            /* always over RPC now: accepted for old scripts */
        } else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
            char *end;
            limit = strtoul(argv[++i], &end, 10);
            if (*end != '\0' || limit == 0 || limit > 100000)
                return usage_error("ls: --limit wants 1..100000, got '%s'", argv[i]);
        } else {
            return usage_error("ls: unexpected '%s'", argv[i]);
        }
    }
    if (rpc_open(c) != 0)
        return EXIT_FAIL;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mp_write_map(&w, regex != NULL ? 2 : 1);
    mc_mp_write_uint(&w, MC_F_COUNT);
    mc_mp_write_uint(&w, limit);
    if (regex != NULL) {
        mc_mp_write_uint(&w, MC_F_REGEX);
        mc_mp_write_cstr(&w, regex);
    }
    key_row_t *rows = NULL;
    size_t n = 0;
    int truncated = 0, rc = EXIT_FAIL;
    if (rpc_call(c, MC_RPC_LIST_KEYS, &body, &resp, "ls", regex) != MC_OK)
        goto out;
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, mc_buf_head(&resp), mc_buf_used(&resp));
    uint32_t nf = mc_mp_read_map(&r);
    for (uint32_t f = 0; f < nf && r.err == MC_OK; f++) {
        switch (mc_mp_read_uint(&r)) {
        case MC_F_ENTRIES: {
            uint32_t ne = mc_mp_read_array(&r);
            if (r.err != MC_OK || ne > 100000)
                break;
            rows = mc_calloc(ne ? ne : 1, sizeof(*rows));
            if (rows == NULL) {
                r.err = MC_ERR_NOMEM;
                break;
            }
            for (uint32_t e = 0; e < ne && r.err == MC_OK; e++) {
                key_row_t *k = &rows[n];
                uint32_t m = mc_mp_read_map(&r);
                for (uint32_t i = 0; i < m && r.err == MC_OK; i++) {
                    switch (mc_mp_read_uint(&r)) {
                    case MC_F_KEY:
                        k->key = mc_mp_read_bin(&r, &k->klen);
                        break;
                    case MC_F_SIZE:
                        k->size = mc_mp_read_uint(&r);
                        break;
                    case MC_F_NREP:
                        k->nrep = (uint32_t)mc_mp_read_uint(&r);
                        break;
                    case MC_F_DISK:
                        k->disk = mc_mp_read_bool(&r);
                        break;
                    case MC_F_COMPLETE:
                        k->complete = mc_mp_read_bool(&r);
                        break;
                    case MC_F_LEASE_LEFT_US:
                        k->lease_us = mc_mp_read_uint(&r);
                        break;
                    default:
                        mc_mp_skip(&r);
                        break;
                    }
                }
                if (k->key != NULL)
                    n++;
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
        goto out;
    }
    rc = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += rows[i].size;
    if (c->json) {
        j_doc(c);
        jk_cstr("regex", regex);
        jk_u64("limit", limit);
        j_key("keys");
        j_begin('[');
        for (size_t i = 0; i < n; i++) {
            j_begin('{');
            j_key("key");
            j_str(rows[i].key, rows[i].klen);
            jk_u64("size", rows[i].size);
            jk_u64("replicas", rows[i].nrep);
            jk_bool("disk", rows[i].disk);
            jk_bool("complete", rows[i].complete);
            jk_u64("lease_ms_left", rows[i].lease_us / 1000);
            j_end('}');
        }
        j_end(']');
        jk_u64("count", n);
        jk_u64("bytes", bytes);
        jk_bool("truncated", truncated);
        j_end('}');
        goto out;
    }
    size_t keyw = 3;
    for (size_t i = 0; i < n; i++) {
        size_t kw = escaped_len(rows[i].key, rows[i].klen);
        keyw = kw > keyw ? kw : keyw;
    }
    printf("%-*s  %14s  %10s  %8s  %-8s  %s\n", (int)keyw, "KEY", "SIZE", "", "REPLICAS",
           "COMPLETE", "LEASE");
    for (size_t i = 0; i < n; i++) {
        char h[32], lease[32] = "-";
        if (rows[i].lease_us > 0)
            snprintf(lease, sizeof(lease), "%.1fs", (double)rows[i].lease_us / 1e6);
        print_cell(rows[i].key, rows[i].klen, keyw);
        printf("  %14" PRIu64 "  %10s  %8u%s  %-8s  %s\n", rows[i].size,
               human(rows[i].size, h, sizeof(h)), rows[i].nrep, rows[i].disk ? "+D" : "  ",
               rows[i].complete ? "yes" : "no", lease);
    }
    char h[32];
    printf("%zu key(s), %s%s\n", n, human(bytes, h, sizeof(h)),
           truncated ? " (list truncated: --limit)" : "");
out:
    mc_free(rows);
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    rpc_close(c);
    return rc;
}

/* ------------------------------------------------------------ segments */

typedef struct seg_row {
    mc_uuid_t id, client;
    const char *name, *ep, *state;
    uint32_t nlen, elen, slen;
    uint64_t base, cap, used, allocs;
} seg_row_t;

static int cmd_segments(cli_t *c, int argc, char **argv)
{
    (void)argv;
    if (argc != 1)
        return usage_error("segments takes no arguments%s", "");
    if (rpc_open(c) != 0)
        return EXIT_FAIL;
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT;
    mc_mp_writer_t w;
    mc_mp_writer_init(&w, &body);
    mc_mcli_empty(&w);
    seg_row_t *rows = NULL;
    size_t n = 0;
    int rc = EXIT_FAIL;
    if (rpc_call(c, MC_RPC_LIST_SEGMENTS, &body, &resp, "segments", NULL) != MC_OK)
        goto out;
    mc_mp_reader_t r;
    mc_mp_reader_init(&r, mc_buf_head(&resp), mc_buf_used(&resp));
    uint32_t nf = mc_mp_read_map(&r);
    for (uint32_t f = 0; f < nf && r.err == MC_OK; f++) {
        if (mc_mp_read_uint(&r) != MC_F_SEGMENTS) {
            mc_mp_skip(&r);
            continue;
        }
        uint32_t ns = mc_mp_read_array(&r);
        if (r.err != MC_OK || ns > 1000000)
            break;
        rows = mc_calloc(ns ? ns : 1, sizeof(*rows));
        if (rows == NULL) {
            r.err = MC_ERR_NOMEM;
            break;
        }
        for (uint32_t e = 0; e < ns && r.err == MC_OK; e++) {
            seg_row_t *s = &rows[n++];
            uint32_t m = mc_mp_read_map(&r);
            for (uint32_t i = 0; i < m && r.err == MC_OK; i++) {
                switch (mc_mp_read_uint(&r)) {
                case MC_F_SEGMENT_ID:
                    s->id = mc_proto_read_uuid(&r);
                    break;
                case MC_F_CLIENT_ID:
                    s->client = mc_proto_read_uuid(&r);
                    break;
                case MC_F_NAME:
                    s->name = mc_mp_read_str(&r, &s->nlen);
                    break;
                case MC_F_ENDPOINT:
                    s->ep = mc_mp_read_str(&r, &s->elen);
                    break;
                case MC_F_STATE:
                    s->state = mc_mp_read_str(&r, &s->slen);
                    break;
                case MC_F_ADDR:
                    s->base = mc_mp_read_uint(&r);
                    break;
                case MC_F_SIZE:
                    s->cap = mc_mp_read_uint(&r);
                    break;
                case MC_F_USED:
                    s->used = mc_mp_read_uint(&r);
                    break;
                case MC_F_ALLOCS:
                    s->allocs = mc_mp_read_uint(&r);
                    break;
                default:
                    mc_mp_skip(&r);
                    break;
                }
            }
            if (s->name == NULL || s->ep == NULL || s->state == NULL)
                r.err = MC_ERR_PROTOCOL;
        }
    }
    if (r.err != MC_OK) {
        fail_st("segments", "(decoding the answer)", r.err);
        goto out;
    }
    rc = 0;
    uint64_t cap = 0, used = 0;
    for (size_t i = 0; i < n; i++) {
        cap += rows[i].cap;
        used += rows[i].used;
    }
    if (c->json) {
        j_doc(c);
        j_key("segments");
        j_begin('[');
        for (size_t i = 0; i < n; i++) {
            char id[40], cl[40];
            snprintf(id, sizeof(id), "%016" PRIx64 "%016" PRIx64, rows[i].id.hi, rows[i].id.lo);
            snprintf(cl, sizeof(cl), "%016" PRIx64 "%016" PRIx64, rows[i].client.hi,
                     rows[i].client.lo);
            j_begin('{');
            j_key("name");
            j_str(rows[i].name, rows[i].nlen);
            jk_cstr("id", id);
            jk_cstr("client", cl);
            j_key("endpoint");
            j_str(rows[i].ep, rows[i].elen);
            jk_u64("base", rows[i].base);
            jk_u64("capacity", rows[i].cap);
            jk_u64("used", rows[i].used);
            jk_u64("allocations", rows[i].allocs);
            j_key("state");
            j_str(rows[i].state, rows[i].slen);
            j_end('}');
        }
        j_end(']');
        jk_u64("count", n);
        jk_u64("capacity", cap);
        jk_u64("used", used);
        j_end('}');
        goto out;
    }
    size_t namew = 7, epw = 8;
    for (size_t i = 0; i < n; i++) {
        size_t a = escaped_len(rows[i].name, rows[i].nlen),
               b = escaped_len(rows[i].ep, rows[i].elen);
        namew = a > namew ? a : namew;
        epw = b > epw ? b : epw;
    }
    printf("%-*s  %-*s  %12s  %12s  %6s  %8s  %s\n", (int)namew, "SEGMENT", (int)epw, "ENDPOINT",
           "CAPACITY", "USED", "USE", "ALLOCS", "STATE");
    for (size_t i = 0; i < n; i++) {
        char hc[32], hu[32];
        print_cell(rows[i].name, rows[i].nlen, namew);
        printf("  ");
        print_cell(rows[i].ep, rows[i].elen, epw);
        printf("  %12s  %12s  %5.1f%%  %8" PRIu64 "  %.*s\n", human(rows[i].cap, hc, sizeof(hc)),
               human(rows[i].used, hu, sizeof(hu)),
               rows[i].cap ? 100.0 * (double)rows[i].used / (double)rows[i].cap : 0.0,
               rows[i].allocs, (int)rows[i].slen, rows[i].state);
    }
    char hc[32], hu[32];
    printf("%zu segment(s), %s used of %s (%.1f%%)\n", n, human(used, hu, sizeof(hu)),
           human(cap, hc, sizeof(hc)), cap ? 100.0 * (double)used / (double)cap : 0.0);
out:
    mc_free(rows);
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    rpc_close(c);
    return rc;
}

/* ------------------------------------------------------------ meta */

/* One page's entries: called for each {KEY, VALUE}; 0 to go on. */
typedef int (*meta_entry_fn_t)(void *arg, const void *k, uint32_t klen, const void *v,
                               uint32_t vlen);

/* META_LIST is paged: {ENTRIES, MORE}; ask again after the last key. fn
 * sees every entry in order. MC_OK or the failure (reported). */
static mc_status_t meta_walk(cli_t *c, const char *prefix, meta_entry_fn_t fn, void *arg)
{
    mc_buf_t body = MC_BUF_INIT, resp = MC_BUF_INIT, last = MC_BUF_INIT;
    int more = 1, first = 1;
    mc_status_t st = MC_OK;
    while (more && st == MC_OK) {
        mc_buf_reset(&body);
        mc_mp_writer_t w;
        mc_mp_writer_init(&w, &body);
        mc_mcli_meta_list_after(&w, prefix, strlen(prefix), first ? NULL : mc_buf_head(&last),
                                mc_buf_used(&last));
        first = 0;
        st = rpc_call(c, MC_RPC_META_LIST, &body, &resp, "meta", prefix);
        if (st != MC_OK)
            break;
        const char *why = NULL;
        if (mc_mp_validate(mc_buf_head(&resp), mc_buf_used(&resp), NULL, &why) != MC_OK) {
            st = MC_ERR_PROTOCOL;
            fail_msg("meta", "(decoding the answer)", st, why);
            break;
        }
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
                if (r.err != MC_OK || k == NULL) {
                    r.err = MC_ERR_PROTOCOL;
                    break;
                }
                fn(arg, k, klen, v, v != NULL ? vlen : 0);
                mc_buf_reset(&last);
                if (mc_buf_append(&last, k, klen) != MC_OK)
                    r.err = MC_ERR_NOMEM;
                got++;
            }
        }
        if (r.err != MC_OK) {
            st = r.err;
            fail_st("meta", "(decoding the answer)", st);
        }
        if (got == 0)
            more = 0; /* an empty page ends it, whatever MORE says */
    }
    mc_buf_fini(&body);
    mc_buf_fini(&resp);
    mc_buf_fini(&last);
    return st;
}

typedef struct meta_out {
    int json;
    size_t count;
} meta_out_t;

static int meta_print(void *arg, const void *k, uint32_t klen, const void *v, uint32_t vlen)
{
    meta_out_t *o = arg;
    o->count++;
    if (!o->json) {
        put_escaped(stdout, k, klen);
        putchar('\n');
        print_meta_value(v, vlen);
        return 0;
    }
    const char *why = NULL;
    j_begin('{');
    j_key("key");
    j_str(k, klen);
    jk_u64("size", vlen);
    j_key("value");
    if (vlen > 0 && mc_mp_validate(v, vlen, NULL, &why) == MC_OK) {
        mc_mp_reader_t vr;
        mc_mp_reader_init(&vr, v, vlen);
        j_mp_value(&vr, 0);
    } else {
        /* not one of ours: the raw bytes */
        j_begin('{');
        j_key("base64");
        j_base64(v, vlen);
        j_end('}');
    }
    j_end('}');
    return 0;
}

static int meta_count(void *arg, const void *k, uint32_t klen, const void *v, uint32_t vlen)
{
    (void)k, (void)klen, (void)v, (void)vlen;
    ((meta_out_t *)arg)->count++;
    return 0;
}

static int cmd_meta(cli_t *c, int argc, char **argv)
{
    if (argc > 2)
        return usage_error("meta wants [PREFIX]%s", "");
    const char *prefix = argc == 2 ? argv[1] : "mc/";
    if (rpc_open(c) != 0)
        return EXIT_FAIL;
    meta_out_t o = {.json = c->json};
    /* --json: walk once to check the answers (a failure is then one
     * document of its own), once to print */
    mc_status_t st = c->json ? meta_walk(c, prefix, meta_count, &o) : MC_OK;
    if (st == MC_OK) {
        o.count = 0;
        if (c->json) {
            j_doc(c);
            jk_cstr("prefix", prefix);
            j_key("entries");
            j_begin('[');
        }
        st = meta_walk(c, prefix, meta_print, &o);
        if (c->json) {
            j_end(']');
            jk_u64("count", o.count);
            j_end('}');
        } else if (st == MC_OK) {
            printf("%zu entr%s under \"%s\"\n", o.count, o.count == 1 ? "y" : "ies", prefix);
        }
    }
    rpc_close(c);
    return st == MC_OK ? 0 : EXIT_FAIL;
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
    const char *master = getenv("MOONCAKE_MASTER");
    c.secret_file = getenv("MOONCAKE_SECRET_FILE");
    if (c.secret_file != NULL && c.secret_file[0] == '\0')
        c.secret_file = NULL;
    int verbose = 0, quiet = 0;
    if (master == NULL || master[0] == '\0')
        master = "127.0.0.1:50051";
    static const struct option lo[] = {{"master", 1, 0, 'm'},  {"timeout", 1, 0, 't'},
                                       {"json", 0, 0, 'j'},    {"verbose", 0, 0, 'v'},
                                       {"quiet", 0, 0, 'q'},   {"help", 0, 0, 'h'},
                                       {"version", 0, 0, 'V'}, {"secret-file", 1, 0, 'S'},
                                       {"http", 1, 0, 'H'},    {0, 0, 0, 0}};
    int o;
    /* "+": stop at the command, whose own options follow it */
    while ((o = getopt_long(argc, argv, "+m:t:vqhV", lo, NULL)) != -1) {
        switch (o) {
        case 'm':
            master = optarg;
            break;
        case 't': {
            char *end;
            double s = strtod(optarg, &end);
            if (*end != '\0' || !(s > 0) || s > 3600)
                return usage_error("--timeout wants seconds in (0, 3600], got '%s'", optarg);
            c.timeout_us = (uint64_t)(s * 1e6);
            break;
        }
        case 'j':
            c.json = 1;
            break;
        case 'S':
            c.secret_file = optarg;
            break;
        case 'H':
            break; /* the HTTP port is not used any more: accepted for old scripts */
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
    if (optind >= argc) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    c.cmd = argv[optind];
    g_cli = &c;
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
            char d[300];
            snprintf(d, sizeof(d), "no leader of cluster '%s' in %s", u.cluster, master);
            return fail_msg(c.cmd, NULL, rs, d);
        }
        c.redis_master = master;
        master = leader;
    }
    if (parse_hostport(master, c.mhost, sizeof(c.mhost), &c.mport) != 0)
        return usage_error("--master wants HOST:PORT or redis://HOST:PORT/DB?cluster=ID, got '%s'",
                           master);
    signal(SIGPIPE, SIG_IGN);
    mc_log_set_all(verbose ? MC_LOG_INFO : MC_LOG_ERR);
    int devnull = -1;
    if (quiet && (devnull = open("/dev/null", O_WRONLY | O_CLOEXEC)) >= 0)
        mc_log_set_fd(devnull);

    int rc = -1;
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(c.cmd, commands[i].name) == 0)
            rc = commands[i].fn(&c, argc - optind, argv + optind);
    if (rc < 0)
        rc = usage_error("unknown command '%s'", c.cmd);
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
