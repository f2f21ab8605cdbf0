/* Configuration: table defaults, INI file, environment and --set layers, value
 * syntax of every type, exact error messages, --dump-config round trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/conf.h"
#include "util/log.h"
#include "util/mem.h"

typedef struct rpc_opts {
    bool enabled;
    int64_t offset;
    uint64_t port;
    double ratio;
    uint64_t cache;   /* bytes */
    uint64_t timeout; /* us */
    char *host;
    int mode;
} rpc_opts_t;

static const char *const modes[] = {"tcp", "rdma", "auto", NULL};

static const mc_conf_key_t rpc_keys[] = {
    MC_CONF_ROW(rpc_opts_t, enabled, "enabled", MC_CONF_BOOL, "true", 0, 0, "Serve RPCs."),
    MC_CONF_ROW(rpc_opts_t, offset, "offset", MC_CONF_INT, "-5", -100, 100, "Signed offset."),
    MC_CONF_ROW(rpc_opts_t, port, "port", MC_CONF_UINT, "50051", 1, 65535, "TCP port."),
    MC_CONF_ROW(rpc_opts_t, ratio, "ratio", MC_CONF_DOUBLE, "0.75", 0, 1, "Fill ratio."),
    MC_CONF_ROW(rpc_opts_t, cache, "cache-size", MC_CONF_SIZE, "64MiB", 4096, 1099511627776.0,
                "Cache size."),
    MC_CONF_ROW(rpc_opts_t, timeout, "timeout", MC_CONF_DURATION, "500ms", 0, 0, "RPC timeout."),
    MC_CONF_ROW(rpc_opts_t, host, "host", MC_CONF_STRING, "0.0.0.0", 0, 0, "Bind address."),
    MC_CONF_ENUM_ROW(rpc_opts_t, mode, "mode", modes, "tcp", "Transport."),
};

/* Same types, unbounded, all defaults zero/empty: for value syntax. */
typedef struct wide_opts {
    bool b;
    int64_t i;
    uint64_t u;
    double d;
    uint64_t size;
    uint64_t dur;
    char *s;
    int e;
} wide_opts_t;

static const char *const levels[] = {"low", "high", NULL};

static const mc_conf_key_t wide_keys[] = {
    MC_CONF_ROW(wide_opts_t, b, "b", MC_CONF_BOOL, "false", 0, 0, "A bool."),
    MC_CONF_ROW(wide_opts_t, i, "i", MC_CONF_INT, "0", 0, 0, "An int."),
    MC_CONF_ROW(wide_opts_t, u, "u", MC_CONF_UINT, "0", 0, 0, "A uint."),
    MC_CONF_ROW(wide_opts_t, d, "d", MC_CONF_DOUBLE, "0", 0, 0, "A double."),
    MC_CONF_ROW(wide_opts_t, size, "size", MC_CONF_SIZE, "0", 0, 0, "A size."),
    MC_CONF_ROW(wide_opts_t, dur, "dur", MC_CONF_DURATION, "0", 0, 0, "A duration."),
    MC_CONF_ROW(wide_opts_t, s, "s", MC_CONF_STRING, NULL, 0, 0, "A string."),
    MC_CONF_ENUM_ROW(wide_opts_t, e, "e", levels, "low", "An enum."),
};

#define MAX_FILES 4

typedef struct fx {
    mc_conf_t *conf;
    rpc_opts_t rpc;
    wide_opts_t wide;
    char paths[MAX_FILES][64];
    int npaths;
    char err[512];
    char expect[1024];
} fx_t;

static int setup(void **state)
{
    fx_t *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    fx->conf = mc_conf_create();
    assert_non_null(fx->conf);
    assert_int_equal(
        mc_conf_add_section(fx->conf, "rpc", rpc_keys, MC_ARRAY_SIZE(rpc_keys), &fx->rpc), MC_OK);
    assert_int_equal(
        mc_conf_add_section(fx->conf, "wide", wide_keys, MC_ARRAY_SIZE(wide_keys), &fx->wide),
        MC_OK);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    mc_conf_destroy(fx->conf);
    for (int i = 0; i < fx->npaths; i++)
        unlink(fx->paths[i]);
    mc_log_set_fd(2);
    free(fx);
    return 0;
}

/* A new temp file holding text; returns its path (owned by the fixture). */
static const char *temp_file(fx_t *fx, const char *text)
{
    assert_true(fx->npaths < MAX_FILES);
    char *path = fx->paths[fx->npaths++];
    snprintf(path, sizeof(fx->paths[0]), "/tmp/conf_test.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

/* Whole contents of path; caller frees. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

static mc_status_t load_text(fx_t *fx, const char *text)
{
    return mc_conf_load_file(fx->conf, temp_file(fx, text), fx->err, sizeof(fx->err));
}

static mc_status_t set(fx_t *fx, const char *assignment)
{
    return mc_conf_set(fx->conf, assignment, fx->err, sizeof(fx->err));
}

/* Expect MC_ERR_CONFIG from loading text, with message "<path>:<rest>". */
static void assert_file_error(fx_t *fx, const char *text, const char *rest)
{
    assert_int_equal(load_text(fx, text), MC_ERR_CONFIG);
    snprintf(fx->expect, sizeof(fx->expect), "%s:%s", fx->paths[fx->npaths - 1], rest);
    assert_string_equal(fx->err, fx->expect);
}

static void assert_set_error(fx_t *fx, const char *assignment, const char *msg)
{
    assert_int_equal(set(fx, assignment), MC_ERR_CONFIG);
    assert_string_equal(fx->err, msg);
}

/* Run parse_args with stdout captured into *out (caller frees). */
static mc_status_t run_args(fx_t *fx, int argc, char **argv, char **envp, int *exit_now, char **out)
{
    const char *path = temp_file(fx, "");
    fflush(stdout);
    int saved = dup(1);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    dup2(fileno(f), 1);
    mc_status_t st = mc_conf_parse_args(fx->conf, argc, argv, envp, "usage: prog [options]",
                                        exit_now, fx->err, sizeof(fx->err));
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(f);
    *out = slurp(path);
    return st;
}

/* ---- defaults and types ---------------------------------------------------------------- */

static void defaults_are_applied_when_a_section_is_added(void **state)
{
    fx_t *fx = *state;
    assert_true(fx->rpc.enabled);
    assert_int_equal(fx->rpc.offset, -5);
    assert_int_equal(fx->rpc.port, 50051);
    assert_true(fx->rpc.ratio == 0.75);
    assert_int_equal(fx->rpc.cache, 64u << 20);
    assert_int_equal(fx->rpc.timeout, 500000);
    assert_string_equal(fx->rpc.host, "0.0.0.0");
    assert_int_equal(fx->rpc.mode, 0);
    assert_false(fx->wide.b);
    assert_string_equal(fx->wide.s, ""); /* NULL default is the empty string */
}

static void bools_accept_every_spelling_in_any_case(void **state)
{
    fx_t *fx = *state;
    static const char *const yes[] = {"true", "TRUE", "yes", "Yes", "on", "ON", "1"};
    static const char *const no[] = {"false", "False", "no", "NO", "off", "Off", "0"};
    char a[64];
    for (size_t i = 0; i < MC_ARRAY_SIZE(yes); i++) {
        snprintf(a, sizeof(a), "wide.b=%s", yes[i]);
        assert_int_equal(set(fx, a), MC_OK);
        assert_true(fx->wide.b);
        snprintf(a, sizeof(a), "wide.b=%s", no[i]);
        assert_int_equal(set(fx, a), MC_OK);
        assert_false(fx->wide.b);
    }
}

static void ints_accept_the_whole_int64_range(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(set(fx, "wide.i=9223372036854775807"), MC_OK);
    assert_true(fx->wide.i == INT64_MAX);
    assert_int_equal(set(fx, "wide.i=-9223372036854775808"), MC_OK);
    assert_true(fx->wide.i == INT64_MIN);
    assert_int_equal(set(fx, "wide.i=+7"), MC_OK);
    assert_int_equal(fx->wide.i, 7);
    assert_int_equal(set(fx, "wide.i= 0 "), MC_OK);
    assert_int_equal(fx->wide.i, 0);
}

static void uints_accept_zero_and_uint64_max(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(set(fx, "wide.u=18446744073709551615"), MC_OK);
    assert_true(fx->wide.u == UINT64_MAX);
    assert_int_equal(set(fx, "wide.u=0"), MC_OK);
    assert_int_equal(fx->wide.u, 0);
}

static void doubles_accept_decimals_and_exponents(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(set(fx, "wide.d=1e3"), MC_OK);
    assert_true(fx->wide.d == 1000.0);
    assert_int_equal(set(fx, "wide.d=-0.5"), MC_OK);
    assert_true(fx->wide.d == -0.5);
    assert_int_equal(set(fx, "wide.d=.25"), MC_OK);
    assert_true(fx->wide.d == 0.25);
    assert_set_error(fx, "wide.d=inf", "--set: wide.d: bad value \"inf\": expected a number");
    assert_set_error(fx, "wide.d=1e999",
                     "--set: wide.d: bad value \"1e999\": too large for a "
                     "double");
}

static void sizes_accept_binary_and_si_units_in_any_case(void **state)
{
    fx_t *fx = *state;
    static const struct {
        const char *text;
        uint64_t bytes;
    } cases[] = {
        {"0", 0},
        {"4096", 4096},
        {"1B", 1},
        {"1k", 1024},
        {"1K", 1024},
        {"1KiB", 1024},
        {"1kib", 1024},
        {"1KB", 1000},
        {"1kb", 1000},
        {"64MiB", 64ull << 20},
        {"64 MiB", 64ull << 20},
        {"64\tmb", 64000000},
        {"1.5GiB", 1610612736},
        {"1.50g", 1610612736},
        {"0.5K", 512},
        {"2TiB", 2ull << 40},
        {"3TB", 3000000000000ull},
        {"16777215TiB", 16777215ull << 40},
        {"18446744073709551615", UINT64_MAX},
    };
    char a[64];
    for (size_t i = 0; i < MC_ARRAY_SIZE(cases); i++) {
        snprintf(a, sizeof(a), "wide.size=%s", cases[i].text);
        assert_int_equal(set(fx, a), MC_OK);
        assert_true(fx->wide.size == cases[i].bytes);
    }
}

static void sizes_reject_fractions_of_a_byte(void **state)
{
    fx_t *fx = *state;
    assert_set_error(fx, "wide.size=0.3KiB",
                     "--set: wide.size: bad value \"0.3KiB\": not a whole number of bytes");
    assert_set_error(fx, "wide.size=1.5",
                     "--set: wide.size: bad value \"1.5\": not a whole number of bytes");
}

static void durations_accept_units_and_decimals(void **state)
{
    fx_t *fx = *state;
    static const struct {
        const char *text;
        uint64_t us;
    } cases[] = {
        {"0", 0},
        {"0ms", 0},
        {"250us", 250},
        {"500ms", 500000},
        {"1.5s", 1500000},
        {"10 s", 10000000},
        {"10S", 10000000},
        {"2m", 120000000},
        {"1h", 3600000000ull},
        {"1.5H", 5400000000ull},
        {"0.001ms", 1},
    };
    char a[64];
    for (size_t i = 0; i < MC_ARRAY_SIZE(cases); i++) {
        snprintf(a, sizeof(a), "wide.dur=%s", cases[i].text);
        assert_int_equal(set(fx, a), MC_OK);
        assert_true(fx->wide.dur == cases[i].us);
    }
    assert_set_error(fx, "wide.dur=0.5us",
                     "--set: wide.dur: bad value \"0.5us\": not a whole number of microseconds");
}

static void strings_are_taken_literally_from_set_and_env(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(set(fx, "wide.s= \"a ; b\" "), MC_OK);
    assert_string_equal(fx->wide.s, " \"a ; b\" ");
    assert_set_error(fx, "wide.s=a\nb",
                     "--set: wide.s: bad value: a string cannot contain a line break");
}

static void string_values_are_owned_by_the_conf(void **state)
{
    fx_t *fx = *state;
    char buf[16] = "first";
    char a[32];
    snprintf(a, sizeof(a), "rpc.host=%s", buf);
    assert_int_equal(set(fx, a), MC_OK);
    assert_ptr_not_equal(fx->rpc.host, buf);
    /* replaced values are freed (ASan reports leaks otherwise) */
    assert_int_equal(set(fx, "rpc.host=second"), MC_OK);
    char *env[] = {"MC_RPC_HOST=third", NULL};
    assert_int_equal(mc_conf_load_env(fx->conf, env, fx->err, sizeof(fx->err)), MC_OK);
    assert_int_equal(load_text(fx, "[rpc]\nhost = fourth\n"), MC_OK);
    assert_string_equal(fx->rpc.host, "fourth");
}

static void enums_store_the_index_of_the_choice(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(set(fx, "rpc.mode=rdma"), MC_OK);
    assert_int_equal(fx->rpc.mode, 1);
    assert_int_equal(set(fx, "rpc.mode=AUTO"), MC_OK);
    assert_int_equal(fx->rpc.mode, 2);
}

static void parse_helpers_write_only_on_success(void **state)
{
    (void)state;
    uint64_t v = 7;
    bool b = false;
    assert_int_equal(mc_conf_parse_size("1.5GiB", &v), MC_OK);
    assert_true(v == 1610612736);
    assert_int_equal(mc_conf_parse_size("12abc", &v), MC_ERR_INVALID_PARAMS);
    assert_true(v == 1610612736);
    assert_int_equal(mc_conf_parse_duration("250ms", &v), MC_OK);
    assert_int_equal(v, 250000);
    assert_int_equal(mc_conf_parse_duration("250", &v), MC_ERR_INVALID_PARAMS);
    assert_int_equal(v, 250000);
    assert_int_equal(mc_conf_parse_bool("on", &b), MC_OK);
    assert_true(b);
    assert_int_equal(mc_conf_parse_bool("maybe", &b), MC_ERR_INVALID_PARAMS);
}

static void formatters_pick_the_largest_exact_unit(void **state)
{
    (void)state;
    char b[MC_CONF_FMT_LEN];
    assert_string_equal(mc_conf_format_size(0, b, sizeof(b)), "0");
    assert_string_equal(mc_conf_format_size(1000, b, sizeof(b)), "1000");
    assert_string_equal(mc_conf_format_size(1024, b, sizeof(b)), "1KiB");
    assert_string_equal(mc_conf_format_size(1536, b, sizeof(b)), "1536");
    assert_string_equal(mc_conf_format_size(1536u << 10, b, sizeof(b)), "1536KiB");
    assert_string_equal(mc_conf_format_size(64u << 20, b, sizeof(b)), "64MiB");
    assert_string_equal(mc_conf_format_size(1610612736, b, sizeof(b)), "1536MiB");
    assert_string_equal(mc_conf_format_size(1ull << 40, b, sizeof(b)), "1TiB");
    assert_string_equal(mc_conf_format_size(UINT64_MAX, b, sizeof(b)), "18446744073709551615");
    assert_string_equal(mc_conf_format_duration(0, b, sizeof(b)), "0");
    assert_string_equal(mc_conf_format_duration(1, b, sizeof(b)), "1us");
    assert_string_equal(mc_conf_format_duration(1500, b, sizeof(b)), "1500us");
    assert_string_equal(mc_conf_format_duration(500000, b, sizeof(b)), "500ms");
    assert_string_equal(mc_conf_format_duration(10000000, b, sizeof(b)), "10s");
    assert_string_equal(mc_conf_format_duration(90000000, b, sizeof(b)), "90s");
    assert_string_equal(mc_conf_format_duration(120000000, b, sizeof(b)), "2m");
    assert_string_equal(mc_conf_format_duration(3600000000ull, b, sizeof(b)), "1h");
}

/* ---- file syntax and layers ------------------------------------------------------------ */

static void file_overrides_defaults(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(load_text(fx, "[rpc]\nport = 8080\ncache-size = 1GiB\n"), MC_OK);
    assert_int_equal(fx->rpc.port, 8080);
    assert_int_equal(fx->rpc.cache, 1u << 30);
    assert_int_equal(fx->rpc.offset, -5); /* untouched keys keep their default */
}

static void file_understands_comments_quotes_blanks_and_crlf(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(load_text(fx, "\xEF\xBB\xBF; leading comment\n"
                                   "# hash comment\n"
                                   "\n"
                                   "  [ rpc ]  ; inline after header\n"
                                   "\tport=81 ; inline comment\r\n"
                                   "host = \"a ; b # \\\"c\\\" \\\\\" ; comment\n"
                                   "[wide]\n"
                                   "s = x;y\n"
                                   "[rpc]\n"
                                   "mode = rdma\n"
                                   "offset =\t-7\t\n"),
                     MC_OK);
    assert_int_equal(fx->rpc.port, 81);
    assert_string_equal(fx->rpc.host, "a ; b # \"c\" \\");
    assert_string_equal(fx->wide.s, "x;y"); /* ';' without a blank before it is data */
    assert_int_equal(fx->rpc.mode, 1);
    assert_int_equal(fx->rpc.offset, -7);
}

static void environment_overrides_file(void **state)
{
    fx_t *fx = *state;
    const char *path = temp_file(fx, "[rpc]\nport = 1\nhost = file\n");
    char *env[] = {"PATH=/bin", "MC_RPC_PORT=2", "MC_RPC_CACHE_SIZE=128MiB", NULL};
    char *argv[] = {"prog", "-c", (char *)path, NULL};
    int exit_now = 1;
    char *out;
    assert_int_equal(run_args(fx, 3, argv, env, &exit_now, &out), MC_OK);
    free(out);
    assert_int_equal(exit_now, 0);
    assert_int_equal(fx->rpc.port, 2);
    assert_int_equal(fx->rpc.cache, 128u << 20);
    assert_string_equal(fx->rpc.host, "file");
}

static void set_overrides_environment_whatever_the_argument_order(void **state)
{
    fx_t *fx = *state;
    const char *path = temp_file(fx, "[rpc]\nport = 1\noffset = 1\nhost = file\n");
    char *env[] = {"MC_RPC_PORT=2", "MC_RPC_OFFSET=2", NULL};
    char *argv[] = {"prog", "--set", "rpc.port=3", "--config", (char *)path, "--set=rpc.port=4",
                    NULL};
    int exit_now = 1;
    char *out;
    assert_int_equal(run_args(fx, 6, argv, env, &exit_now, &out), MC_OK);
    free(out);
    assert_int_equal(exit_now, 0);
    assert_int_equal(fx->rpc.port, 4); /* --set in order, the last wins */
    assert_int_equal(fx->rpc.offset, 2);
    assert_string_equal(fx->rpc.host, "file");
}

static void unknown_mc_environment_variables_only_warn(void **state)
{
    fx_t *fx = *state;
    const char *log = temp_file(fx, "");
    FILE *f = fopen(log, "w");
    assert_non_null(f);
    mc_log_set_fd(fileno(f));
    char *env[] = {"MC_RPC_PROT=1", "MC_TEST_BIN=/x", "MCX=1", "MC_WIDE_I=3", NULL};
    assert_int_equal(mc_conf_load_env(fx->conf, env, fx->err, sizeof(fx->err)), MC_OK);
    mc_log_set_fd(2);
    fclose(f);
    assert_int_equal(fx->wide.i, 3);
    char *text = slurp(log);
    assert_non_null(strstr(text, "environment MC_RPC_PROT matches no configuration key"));
    assert_non_null(strstr(text, "MC_TEST_BIN"));
    assert_null(strstr(text, "MCX"));
    free(text);
}

static void variables_read_by_library_modules_do_not_warn(void **state)
{
    fx_t *fx = *state;
    const char *log = temp_file(fx, "");
    FILE *f = fopen(log, "w");
    assert_non_null(f);
    mc_log_set_fd(fileno(f));
    char *env[] = {"MC_RDMA_EMULATED=2",
                   "MC_RDMA_EMU_DELAY_US=5",
                   "MC_MTU=1024",
                   "MC_STORE_STAGING=always",
                   "MC_RDMA_=1",
                   "MC_MTUX=1",
                   NULL};
    assert_int_equal(mc_conf_load_env(fx->conf, env, fx->err, sizeof(fx->err)), MC_OK);
    mc_log_set_fd(2);
    fclose(f);
    char *text = slurp(log);
    assert_null(strstr(text, "MC_RDMA_EMU"));
    assert_null(strstr(text, "MC_MTU "));
    assert_null(strstr(text, "MC_STORE_STAGING"));
    /* a bare prefix and a near miss are still reported */
    assert_non_null(strstr(text, "environment MC_RDMA_ matches no configuration key"));
    assert_non_null(strstr(text, "environment MC_MTUX matches no configuration key"));
    free(text);
}

static void failed_load_changes_nothing(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(load_text(fx, "[rpc]\nport = 9\nhost = new\nmode = bogus\n"), MC_ERR_CONFIG);
    assert_int_equal(fx->rpc.port, 50051);
    assert_string_equal(fx->rpc.host, "0.0.0.0");
    char *env[] = {"MC_RPC_PORT=9", "MC_RPC_TIMEOUT=7", NULL};
    assert_int_equal(mc_conf_load_env(fx->conf, env, fx->err, sizeof(fx->err)), MC_ERR_CONFIG);
    assert_int_equal(fx->rpc.port, 50051);
}

/* ---- errors ---------------------------------------------------------------------------- */

/* A partial conf (a daemon's SIGHUP re-reading [log]) reads its own
 * sections from every source and skips the others, but stays strict inside
 * its own. */
static void a_partial_conf_reads_its_sections_and_skips_the_others(void **state)
{
    fx_t *fx = *state;
    mc_conf_t *c = mc_conf_create();
    assert_non_null(c);
    rpc_opts_t rpc;
    assert_int_equal(mc_conf_add_section(c, "rpc", rpc_keys, MC_ARRAY_SIZE(rpc_keys), &rpc), MC_OK);
    mc_conf_set_partial(c, 1);
    const char *path = temp_file(fx, "[other]\nwhatever = 1\n[rpc]\nport = 7000\n[more]\nx = y\n");
    assert_int_equal(mc_conf_load_file(c, path, fx->err, sizeof(fx->err)), MC_OK);
    assert_int_equal(rpc.port, 7000);
    char *envp[] = {"MC_OTHER_THING=1", "MC_RPC_OFFSET=7", NULL};
    assert_int_equal(mc_conf_load_env(c, envp, fx->err, sizeof(fx->err)), MC_OK);
    assert_int_equal(rpc.offset, 7);
    assert_int_equal(mc_conf_set(c, "other.key=1", fx->err, sizeof(fx->err)), MC_OK);
    assert_int_equal(mc_conf_set(c, "rpc.port=7001", fx->err, sizeof(fx->err)), MC_OK);
    assert_int_equal(rpc.port, 7001);
    /* its own sections stay strict */
    assert_int_equal(mc_conf_set(c, "rpc.nope=1", fx->err, sizeof(fx->err)), MC_ERR_CONFIG);
    assert_string_equal(fx->err, "--set: rpc.nope: unknown key");
    path = temp_file(fx, "[rpc]\nport = 0\n");
    assert_int_equal(mc_conf_load_file(c, path, fx->err, sizeof(fx->err)), MC_ERR_CONFIG);
    assert_int_equal(rpc.port, 7001);
    mc_conf_destroy(c);
    /* and a conf that is not partial still refuses other sections */
    assert_int_equal(set(fx, "other.key=1"), MC_ERR_CONFIG);
}

static void unknown_section_names_file_and_line(void **state)
{
    assert_file_error(*state, "[rpc]\nport = 1\n[nope]\nx = 1\n", "3: unknown section [nope]");
}

static void unknown_key_names_file_line_and_key(void **state)
{
    assert_file_error(*state, "[rpc]\n\nprot = 80\n", "3: rpc.prot: unknown key");
}

static void key_before_any_section_is_an_error(void **state)
{
    assert_file_error(*state, "port = 80\n", "1: port: key before any [section]");
}

static void bad_bool_names_the_expected_type(void **state)
{
    assert_file_error(*state, "[rpc]\nenabled = maybe\n",
                      "2: rpc.enabled: bad value \"maybe\": expected a bool (true/false, "
                      "yes/no, on/off, 1/0)");
}

static void bad_int_names_the_expected_type(void **state)
{
    assert_file_error(*state, "[rpc]\noffset = ten\n",
                      "2: rpc.offset: bad value \"ten\": expected an integer");
}

static void trailing_garbage_is_rejected(void **state)
{
    assert_file_error(*state, "[rpc]\nport = 12abc\n",
                      "2: rpc.port: bad value \"12abc\": expected a non-negative integer");
}

static void negative_uint_is_rejected(void **state)
{
    assert_file_error(*state, "[rpc]\nport = -1\n",
                      "2: rpc.port: bad value \"-1\": expected a non-negative integer");
}

static void integer_overflow_is_rejected(void **state)
{
    fx_t *fx = *state;
    assert_set_error(fx, "wide.i=9223372036854775808",
                     "--set: wide.i: bad value \"9223372036854775808\": too large for a 64-bit "
                     "integer");
    assert_set_error(fx, "wide.u=18446744073709551616",
                     "--set: wide.u: bad value \"18446744073709551616\": too large for a 64-bit "
                     "integer");
}

static void size_overflow_is_rejected(void **state)
{
    fx_t *fx = *state;
    assert_set_error(fx, "wide.size=16777216TiB",
                     "--set: wide.size: bad value \"16777216TiB\": too large for 64 bits");
    assert_set_error(fx, "wide.size=18446744073709551616",
                     "--set: wide.size: bad value \"18446744073709551616\": too large for 64 "
                     "bits");
}

static void value_below_range_names_the_range(void **state)
{
    assert_file_error(*state, "[rpc]\n\n\nport = 0\n",
                      "4: rpc.port: value 0 out of range [1, 65535]");
}

static void value_above_range_names_the_range(void **state)
{
    fx_t *fx = *state;
    assert_file_error(fx, "[rpc]\nport = 70000\n",
                      "2: rpc.port: value 70000 out of range [1, "
                      "65535]");
    assert_set_error(fx, "rpc.offset=101", "--set: rpc.offset: value 101 out of range [-100, 100]");
    assert_set_error(fx, "rpc.ratio=1.5", "--set: rpc.ratio: value 1.5 out of range [0, 1]");
}

static void size_range_is_printed_in_units(void **state)
{
    assert_file_error(*state, "[rpc]\ncache-size = 2KiB\n",
                      "2: rpc.cache-size: value 2KiB out of range [4KiB, 1TiB]");
}

static void bad_size_unit_is_rejected(void **state)
{
    assert_file_error(*state, "[rpc]\ncache-size = 10XB\n",
                      "2: rpc.cache-size: bad value \"10XB\": unknown size unit (use B, K, KiB, "
                      "KB, M, MiB, MB, G, GiB, GB, T, TiB, TB)");
}

static void negative_size_is_rejected(void **state)
{
    assert_set_error(*state, "wide.size=-1MiB",
                     "--set: wide.size: bad value \"-1MiB\": expected a size such as 4096, 64KiB, "
                     "1.5GiB or 10MB");
}

static void duration_without_unit_is_rejected(void **state)
{
    assert_file_error(*state, "[rpc]\ntimeout = 10\n",
                      "2: rpc.timeout: bad value \"10\": needs a unit (us, ms, s, m, h)");
}

static void bad_duration_unit_is_rejected(void **state)
{
    assert_set_error(*state, "rpc.timeout=5ns",
                     "--set: rpc.timeout: bad value \"5ns\": unknown duration unit (use us, ms, "
                     "s, m, h)");
}

static void bad_enum_lists_the_choices(void **state)
{
    assert_file_error(*state, "[rpc]\nmode = udp\n",
                      "2: rpc.mode: bad value \"udp\": expected one of tcp, rdma, auto");
}

static void missing_file_names_path_and_reason(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(
        mc_conf_load_file(fx->conf, "/nonexistent/dir/x.conf", fx->err, sizeof(fx->err)),
        MC_ERR_CONFIG);
    assert_string_equal(fx->err, "/nonexistent/dir/x.conf: cannot open: No such file or directory");
}

static void line_without_equals_is_malformed(void **state)
{
    assert_file_error(*state, "[rpc]\nport 80\n",
                      "2: malformed line \"port 80\" (expected \"key = value\", \"[section]\" or "
                      "a comment)");
}

static void unclosed_section_header_is_malformed(void **state)
{
    assert_file_error(*state, "[rpc\n",
                      "1: malformed section header \"[rpc\" (expected \"[section]\")");
}

static void unterminated_quote_is_an_error(void **state)
{
    assert_file_error(*state, "[rpc]\nhost = \"abc\n", "2: rpc.host: unterminated quoted value");
}

static void duplicate_key_in_one_file_is_an_error(void **state)
{
    assert_file_error(*state, "[rpc]\nport = 1\n[wide]\n[rpc]\nport = 2\n",
                      "5: rpc.port: duplicate key (first set on line 2)");
}

static void set_without_equals_is_an_error(void **state)
{
    assert_set_error(*state, "rpc.port", "--set: \"rpc.port\": expected section.key=value");
}

static void set_without_dot_is_an_error(void **state)
{
    assert_set_error(*state, "port=80", "--set: \"port=80\": expected section.key=value");
}

static void set_of_unknown_section_or_key_is_an_error(void **state)
{
    fx_t *fx = *state;
    assert_set_error(fx, "nope.x=1", "--set: nope.x: unknown section [nope]");
    assert_set_error(fx, "rpc.prot=1", "--set: rpc.prot: unknown key");
}

static void environment_error_names_the_variable(void **state)
{
    fx_t *fx = *state;
    char *env[] = {"MC_RPC_PORT=70000", NULL};
    assert_int_equal(mc_conf_load_env(fx->conf, env, fx->err, sizeof(fx->err)), MC_ERR_CONFIG);
    assert_string_equal(fx->err,
                        "environment MC_RPC_PORT: rpc.port: value 70000 out of range [1, 65535]");
}

static void unknown_argument_is_an_error_naming_it(void **state)
{
    fx_t *fx = *state;
    char *argv[] = {"prog", "--set", "rpc.port=3", "--frobnicate", NULL};
    int exit_now = 1;
    char *out;
    assert_int_equal(run_args(fx, 4, argv, NULL, &exit_now, &out), MC_ERR_CONFIG);
    free(out);
    assert_int_equal(exit_now, 0);
    assert_string_equal(fx->err, "command line: unknown argument \"--frobnicate\" (see --help)");
    assert_int_equal(fx->rpc.port, 50051); /* nothing applied */
}

static void config_option_without_file_is_an_error(void **state)
{
    fx_t *fx = *state;
    char *argv[] = {"prog", "-c", NULL};
    int exit_now;
    char *out;
    assert_int_equal(run_args(fx, 2, argv, NULL, &exit_now, &out), MC_ERR_CONFIG);
    free(out);
    assert_string_equal(fx->err, "command line: -c needs a FILE argument");
}

static void bad_tables_are_rejected_at_registration(void **state)
{
    fx_t *fx = *state;
    typedef struct {
        int small;
        uint64_t u;
    } bad_opts_t;
    static const mc_conf_key_t wrong_size[] = {
        MC_CONF_ROW(bad_opts_t, small, "small", MC_CONF_INT, "0", 0, 0, "int field"),
    };
    static const mc_conf_key_t bad_default[] = {
        MC_CONF_ROW(bad_opts_t, u, "u", MC_CONF_UINT, "0", 1, 10, "default out of range"),
    };
    static const mc_conf_key_t env_clash[] = {
        MC_CONF_ROW(bad_opts_t, u, "a-b", MC_CONF_UINT, "0", 0, 0, "one"),
        MC_CONF_ROW(bad_opts_t, u, "a.b", MC_CONF_UINT, "0", 0, 0, "two"),
    };
    bad_opts_t o = {.small = 42, .u = 42};
    const char *log = temp_file(fx, "");
    FILE *f = fopen(log, "w");
    assert_non_null(f);
    mc_log_set_fd(fileno(f));
    assert_int_equal(mc_conf_add_section(fx->conf, "bad", wrong_size, 1, &o),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_conf_add_section(fx->conf, "bad", bad_default, 1, &o),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_conf_add_section(fx->conf, "bad", env_clash, 2, &o), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_conf_add_section(fx->conf, "rpc", bad_default, 0, &o),
                     MC_ERR_INVALID_PARAMS);
    mc_log_set_fd(2);
    fclose(f);
    assert_int_equal(o.small, 42);
    assert_int_equal(o.u, 42);
    char *text = slurp(log);
    assert_non_null(strstr(text, "bad.small: field of 4 bytes cannot hold a int"));
    assert_non_null(strstr(text, "bad.u: default: value 0 out of range [1, 10]"));
    assert_non_null(strstr(text, "bad.a.b: same name as bad.a-b"));
    assert_non_null(strstr(text, "section [rpc] registered twice"));
    free(text);
}

/* ---- dump and help --------------------------------------------------------------------- */

static void dump_shows_help_values_and_origins(void **state)
{
    fx_t *fx = *state;
    const char *conf_path = temp_file(fx, "[rpc]\n\ncache-size = 1536MiB\n");
    assert_int_equal(mc_conf_load_file(fx->conf, conf_path, fx->err, sizeof(fx->err)), MC_OK);
    char *env[] = {"MC_RPC_PORT=8080", NULL};
    assert_int_equal(mc_conf_load_env(fx->conf, env, fx->err, sizeof(fx->err)), MC_OK);
    assert_int_equal(set(fx, "rpc.timeout=1.5s"), MC_OK);
    const char *dump_path = temp_file(fx, "");
    FILE *f = fopen(dump_path, "w");
    mc_conf_dump(fx->conf, f);
    fclose(f);
    char *text = slurp(dump_path);
    snprintf(fx->expect, sizeof(fx->expect),
             "[rpc]\n"
             "; Serve RPCs. (bool, default true)\n"
             "enabled = true\n"
             "\n"
             "; Signed offset. (int, default -5, range [-100, 100])\n"
             "offset = -5\n"
             "\n"
             "; TCP port. (uint, default 50051, range [1, 65535])\n"
             "port = 8080\n"
             "; from env MC_RPC_PORT\n"
             "\n"
             "; Fill ratio. (double, default 0.75, range [0, 1])\n"
             "ratio = 0.75\n"
             "\n"
             "; Cache size. (size, default 64MiB, range [4KiB, 1TiB])\n"
             "cache-size = 1536MiB\n"
             "; from %s:3\n"
             "\n"
             "; RPC timeout. (duration, default 500ms)\n"
             "timeout = 1500ms\n"
             "; from --set\n"
             "\n"
             "; Bind address. (string, default \"0.0.0.0\")\n"
             "host = 0.0.0.0\n"
             "\n"
             "; Transport. (enum: tcp|rdma|auto, default tcp)\n"
             "mode = tcp\n",
             conf_path);
    assert_non_null(strstr(text, fx->expect));
    free(text);
}

static void dump_round_trips_through_a_file(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(load_text(fx, "[rpc]\nenabled = off\nhost = \"  padded ; # \\\"q\\\" \"\n"
                                   "[wide]\nd = 0.1\ni = -9223372036854775808\n"),
                     MC_OK);
    static const char *const sets[] = {
        "rpc.port=65535",  "rpc.ratio=0.3", "rpc.cache-size=1.5GiB",       "rpc.timeout=90s",
        "rpc.mode=auto",   "wide.b=yes",    "wide.u=18446744073709551615", "wide.size=1000",
        "wide.dur=1500us", "wide.e=high",   "wide.s=back\\slash",
    };
    for (size_t i = 0; i < MC_ARRAY_SIZE(sets); i++)
        assert_int_equal(set(fx, sets[i]), MC_OK);
    const char *dump_path = temp_file(fx, "");
    FILE *f = fopen(dump_path, "w");
    mc_conf_dump(fx->conf, f);
    fclose(f);

    mc_conf_t *again = mc_conf_create();
    rpc_opts_t rpc;
    wide_opts_t wide;
    assert_int_equal(mc_conf_add_section(again, "rpc", rpc_keys, MC_ARRAY_SIZE(rpc_keys), &rpc),
                     MC_OK);
    assert_int_equal(mc_conf_add_section(again, "wide", wide_keys, MC_ARRAY_SIZE(wide_keys), &wide),
                     MC_OK);
    assert_int_equal(mc_conf_load_file(again, dump_path, fx->err, sizeof(fx->err)), MC_OK);
    assert_int_equal(rpc.enabled, fx->rpc.enabled);
    assert_int_equal(rpc.offset, fx->rpc.offset);
    assert_int_equal(rpc.port, fx->rpc.port);
    assert_true(rpc.ratio == fx->rpc.ratio);
    assert_true(rpc.cache == fx->rpc.cache);
    assert_int_equal(rpc.timeout, fx->rpc.timeout);
    assert_string_equal(rpc.host, "  padded ; # \"q\" ");
    assert_string_equal(rpc.host, fx->rpc.host);
    assert_int_equal(rpc.mode, fx->rpc.mode);
    assert_int_equal(wide.b, fx->wide.b);
    assert_true(wide.i == fx->wide.i);
    assert_true(wide.u == fx->wide.u);
    assert_true(wide.d == fx->wide.d);
    assert_true(wide.size == fx->wide.size);
    assert_true(wide.dur == fx->wide.dur);
    assert_string_equal(wide.s, fx->wide.s);
    assert_int_equal(wide.e, fx->wide.e);
    mc_conf_destroy(again);
}

static void dump_config_argument_prints_and_asks_to_exit(void **state)
{
    fx_t *fx = *state;
    char *argv[] = {"prog", "--dump-config", "--set", "rpc.port=9", NULL};
    int exit_now = 0;
    char *out;
    assert_int_equal(run_args(fx, 4, argv, NULL, &exit_now, &out), MC_OK);
    assert_int_equal(exit_now, 1);
    assert_non_null(strstr(out, "\nport = 9\n; from --set\n"));
    free(out);
}

static void help_lists_every_key_and_wins_over_bad_arguments(void **state)
{
    fx_t *fx = *state;
    char *argv[] = {"prog", "--bogus", "-h", NULL};
    int exit_now = 0;
    char *out;
    assert_int_equal(run_args(fx, 3, argv, NULL, &exit_now, &out), MC_OK);
    assert_int_equal(exit_now, 1);
    assert_true(strncmp(out, "usage: prog [options]\n", 22) == 0);
    assert_non_null(strstr(out, "--dump-config"));
    assert_non_null(strstr(out, "  rpc.port  (uint, default 50051, range [1, 65535])\n"
                                "      TCP port.\n"));
    assert_non_null(strstr(out, "  wide.e  (enum: low|high, default low)\n"));
    free(out);
}

/* ---- out of memory --------------------------------------------------------------------- */

/* Fail each allocation of op in turn: it must return MC_ERR_NOMEM and change
 * nothing (ASan checks nothing leaks), until it succeeds with no failure left. */
typedef mc_status_t (*op_fn_t)(fx_t *fx);

static mc_status_t op_load(fx_t *fx)
{
    return mc_conf_load_file(fx->conf, fx->paths[0], fx->err, sizeof(fx->err));
}

static mc_status_t op_env(fx_t *fx)
{
    char *env[] = {"MC_RPC_HOST=env", "MC_WIDE_S=x", "MC_RPC_PORT=1", NULL};
    return mc_conf_load_env(fx->conf, env, fx->err, sizeof(fx->err));
}

static mc_status_t op_set(fx_t *fx)
{
    return set(fx, "rpc.host=cli");
}

static void fail_each_allocation(fx_t *fx, op_fn_t op)
{
    long n;
    for (n = 1; n < 1000; n++) {
        mc_mem_fail_nth(n);
        mc_status_t st = op(fx);
        mc_mem_fail_nth(0);
        if (st == MC_OK)
            break;
        assert_int_equal(st, MC_ERR_NOMEM);
        assert_string_equal(fx->rpc.host, "0.0.0.0");
        assert_int_equal(fx->rpc.port, 50051);
    }
    assert_true(n > 1); /* op allocates at all */
    assert_true(n < 1000);
    assert_string_not_equal(fx->rpc.host, "0.0.0.0");
}

static void out_of_memory_while_loading_a_file_changes_nothing(void **state)
{
    fx_t *fx = *state;
    temp_file(fx, "[rpc]\nhost = file\nport = 1\n[wide]\ns = s\nb = on\ni = 1\nu = 2\nd = 3\n"
                  "size = 4\ndur = 5s\ne = high\n");
    fail_each_allocation(fx, op_load);
}

static void out_of_memory_while_loading_the_environment_changes_nothing(void **state)
{
    fail_each_allocation(*state, op_env);
}

static void out_of_memory_in_set_changes_nothing(void **state)
{
    fail_each_allocation(*state, op_set);
}

static void out_of_memory_while_registering_leaves_opts_alone(void **state)
{
    (void)state;
    long n;
    for (n = 1; n < 100; n++) {
        rpc_opts_t o = {.port = 7};
        mc_mem_fail_nth(n);
        mc_conf_t *conf = mc_conf_create();
        mc_status_t st =
            conf ? mc_conf_add_section(conf, "rpc", rpc_keys, MC_ARRAY_SIZE(rpc_keys), &o)
                 : MC_ERR_NOMEM;
        mc_mem_fail_nth(0);
        mc_conf_destroy(conf);
        if (st == MC_OK)
            break;
        assert_int_equal(st, MC_ERR_NOMEM);
        assert_int_equal(o.port, 7);
        assert_null(o.host);
    }
    assert_true(n > 2);
    assert_true(n < 100);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(defaults_are_applied_when_a_section_is_added),
        T(bools_accept_every_spelling_in_any_case),
        T(ints_accept_the_whole_int64_range),
        T(uints_accept_zero_and_uint64_max),
        T(doubles_accept_decimals_and_exponents),
        T(sizes_accept_binary_and_si_units_in_any_case),
        T(sizes_reject_fractions_of_a_byte),
        T(durations_accept_units_and_decimals),
        T(strings_are_taken_literally_from_set_and_env),
        T(string_values_are_owned_by_the_conf),
        T(enums_store_the_index_of_the_choice),
        T(parse_helpers_write_only_on_success),
        T(formatters_pick_the_largest_exact_unit),
        T(file_overrides_defaults),
        T(file_understands_comments_quotes_blanks_and_crlf),
        T(environment_overrides_file),
        T(set_overrides_environment_whatever_the_argument_order),
        T(unknown_mc_environment_variables_only_warn),
        T(variables_read_by_library_modules_do_not_warn),
        T(failed_load_changes_nothing),
        T(a_partial_conf_reads_its_sections_and_skips_the_others),
        T(unknown_section_names_file_and_line),
        T(unknown_key_names_file_line_and_key),
        T(key_before_any_section_is_an_error),
        T(bad_bool_names_the_expected_type),
        T(bad_int_names_the_expected_type),
        T(trailing_garbage_is_rejected),
        T(negative_uint_is_rejected),
        T(integer_overflow_is_rejected),
        T(size_overflow_is_rejected),
        T(value_below_range_names_the_range),
        T(value_above_range_names_the_range),
        T(size_range_is_printed_in_units),
        T(bad_size_unit_is_rejected),
        T(negative_size_is_rejected),
        T(duration_without_unit_is_rejected),
        T(bad_duration_unit_is_rejected),
        T(bad_enum_lists_the_choices),
        T(missing_file_names_path_and_reason),
        T(line_without_equals_is_malformed),
        T(unclosed_section_header_is_malformed),
        T(unterminated_quote_is_an_error),
        T(duplicate_key_in_one_file_is_an_error),
        T(set_without_equals_is_an_error),
        T(set_without_dot_is_an_error),
        T(set_of_unknown_section_or_key_is_an_error),
        T(environment_error_names_the_variable),
        T(unknown_argument_is_an_error_naming_it),
        T(config_option_without_file_is_an_error),
        T(bad_tables_are_rejected_at_registration),
        T(dump_shows_help_values_and_origins),
        T(dump_round_trips_through_a_file),
        T(dump_config_argument_prints_and_asks_to_exit),
        T(help_lists_every_key_and_wins_over_bad_arguments),
        T(out_of_memory_while_loading_a_file_changes_nothing),
        T(out_of_memory_while_loading_the_environment_changes_nothing),
        T(out_of_memory_in_set_changes_nothing),
        T(out_of_memory_while_registering_leaves_opts_alone),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
