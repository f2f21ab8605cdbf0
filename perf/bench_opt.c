/* bench_opt.c - the benchmarks' command lines on mc_conf (see bench_opt.h). */
#include "perf/bench_opt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECTION "bench"

static const char *prog_name = "bench";

/* The rows of the last parse and which of them the command line gave. */
#define MAX_ROWS 128
static const mc_conf_key_t *given_keys;
static size_t given_n;
static unsigned char given[MAX_ROWS];

static const mc_conf_key_t *find_key(const mc_conf_key_t *keys, size_t n, const char *name,
                                     size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(keys[i].name) == len && strncmp(keys[i].name, name, len) == 0)
            return &keys[i];
    return NULL;
}

static const char *placeholder(const mc_conf_key_t *k)
{
    switch (k->type) {
    case MC_CONF_BOOL:
        return "";
    case MC_CONF_SIZE:
        return " SIZE";
    case MC_CONF_DURATION:
        return " TIME";
    case MC_CONF_DOUBLE:
        return " X";
    case MC_CONF_STRING:
        return " VALUE";
    case MC_CONF_ENUM:
        return " CHOICE";
    default:
        return " N";
    }
}

static void help(const char *usage, const mc_conf_key_t *keys, size_t n, FILE *out)
{
    fprintf(out, "%s\n", usage);
    for (size_t i = 0; i < n; i++) {
        const mc_conf_key_t *k = &keys[i];
        char flag[64];
        snprintf(flag, sizeof(flag), "%s%s%s", k->name[1] == '\0' ? "-" : "--", k->name,
                 placeholder(k));
        fprintf(out, "  %-26s %s", flag, k->help);
        if (k->type == MC_CONF_ENUM) {
            fprintf(out, " (");
            for (size_t c = 0; k->choices[c] != NULL; c++)
                fprintf(out, "%s%s", c ? "|" : "", k->choices[c]);
            fprintf(out, ")");
        }
        if (k->def != NULL && k->def[0] != '\0')
            fprintf(out, " [default %s]", k->def);
        if ((k->min != 0 || k->max != 0) && k->type != MC_CONF_SIZE && k->type != MC_CONF_DURATION)
            fprintf(out, " [%g..%g]", k->min, k->max);
        fprintf(out, "\n");
    }
    fprintf(out, "  %-26s the same as --NAME VALUE\n", "--set NAME=VALUE");
    fprintf(out, "  %-26s load a [bench] section (as --dump-config writes)\n", "-c FILE");
    fprintf(out, "  %-26s print the values in effect and exit\n", "--dump-config");
    fprintf(out, "  %-26s this text\n", "-h, --help");
}

/* Apply name=value; errors printed naming --name. */
static int apply(mc_conf_t *conf, const char *name, size_t nlen, const char *val)
{
    char set[4096], err[512];
    snprintf(set, sizeof(set), SECTION ".%.*s=%s", (int)nlen, name, val);
    if (mc_conf_set(conf, set, err, sizeof(err)) == MC_OK)
        return 0;
    /* "--set: bench.reps: value 0 out of range [1, 99]" -> "--reps: ..." */
    const char *msg = err, *pfx = "--set: " SECTION ".";
    if (strncmp(err, pfx, strlen(pfx)) == 0)
        msg = err + strlen(pfx);
    fprintf(stderr, "%s: %s%s\n", prog_name,
            msg == err                        ? "--set: "
            : msg[0] != '\0' && msg[1] == ':' ? "-"
                                              : "--",
            msg);
    return -1;
}

/* Append "\n" val to *acc (a heap string, NULL at first). 0, or -1. */
static int join(char **acc, const char *val)
{
    size_t old = *acc != NULL ? strlen(*acc) : 0, add = strlen(val);
    char *p = realloc(*acc, old + add + 2);
    if (p == NULL) {
        fprintf(stderr, "%s: out of memory\n", prog_name);
        return -1;
    }
    if (old > 0)
        p[old++] = '\n';
    memcpy(p + old, val, add + 1);
    *acc = p;
    return 0;
}

static int is_repeatable(const char *const *rep, const char *name)
{
    for (size_t i = 0; rep != NULL && rep[i] != NULL; i++)
        if (strcmp(rep[i], name) == 0)
            return 1;
    return 0;
}

int bench_opts_parse(const char *usage, const mc_conf_key_t *keys, size_t nkeys, void *opts,
                     int argc, char **argv)
{
    return bench_opts_parse_ex(usage, keys, nkeys, opts, NULL, argc, argv);
}

int bench_opts_parse_ex(const char *usage, const mc_conf_key_t *keys, size_t nkeys, void *opts,
                        const char *const *repeatable, int argc, char **argv)
{
    static char *joined[MAX_ROWS]; /* repeatable rows' values; kept until exit */
    static mc_conf_t *conf;        /* owns the string fields until exit */
    const char *slash = argc > 0 ? strrchr(argv[0], '/') : NULL;
    prog_name = argc > 0 ? (slash ? slash + 1 : argv[0]) : "bench";
    mc_conf_destroy(conf);
    for (size_t i = 0; i < MAX_ROWS; i++) {
        free(joined[i]);
        joined[i] = NULL;
    }
    given_keys = keys;
    given_n = nkeys < MAX_ROWS ? nkeys : MAX_ROWS;
    memset(given, 0, sizeof(given));
    conf = mc_conf_create();
    if (conf == NULL || mc_conf_add_section(conf, SECTION, keys, nkeys, opts) != MC_OK) {
        fprintf(stderr, "%s: cannot set up the option table (a bad row?)\n", prog_name);
        return 2;
    }
    int dump = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            help(usage, keys, nkeys, stdout);
            return 1;
        }
        if (strcmp(a, "--dump-config") == 0) {
            dump = 1;
            continue;
        }
        if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
            char err[512];
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: %s needs a file\n", prog_name, a);
                return 2;
            }
            if (mc_conf_load_file(conf, argv[++i], err, sizeof(err)) != MC_OK) {
                fprintf(stderr, "%s: %s\n", prog_name, err);
                return 2;
            }
            continue;
        }
        const char *name;
        if (strncmp(a, "--", 2) == 0) {
            name = a + 2;
        } else if (a[0] == '-' && a[1] != '\0' && a[2] == '\0') {
            name = a + 1; /* -x: the one-letter row "x" */
        } else {
            fprintf(stderr, "%s: unexpected argument '%s' (--help lists the options)\n", prog_name,
                    a);
            return 2;
        }
        const char *eq = strchr(name, '=');
        size_t nlen = eq != NULL ? (size_t)(eq - name) : strlen(name);
        const char *val = eq != NULL ? eq + 1 : NULL;
        if (nlen == 3 && strncmp(name, "set", 3) == 0) {
            if (val == NULL && (val = i + 1 < argc ? argv[++i] : NULL) == NULL) {
                fprintf(stderr, "%s: --set needs NAME=VALUE\n", prog_name);
                return 2;
            }
            const char *sec = SECTION ".";
            if (strncmp(val, sec, strlen(sec)) == 0)
                val += strlen(sec);
            const char *veq = strchr(val, '=');
            if (veq == NULL || find_key(keys, nkeys, val, (size_t)(veq - val)) == NULL) {
                fprintf(stderr, "%s: --set %s: %s\n", prog_name, val,
                        veq == NULL ? "expected NAME=VALUE" : "unknown option");
                return 2;
            }
            if (apply(conf, val, (size_t)(veq - val), veq + 1) != 0)
                return 2;
            size_t gi = (size_t)(find_key(keys, nkeys, val, (size_t)(veq - val)) - keys);
            if (gi < MAX_ROWS)
                given[gi] = 1;
            continue;
        }
        const mc_conf_key_t *k = find_key(keys, nkeys, name, nlen);
        if (k == NULL) {
            fprintf(stderr, "%s: unknown option --%.*s (--help lists them)\n", prog_name, (int)nlen,
                    name);
            return 2;
        }
        if (val == NULL && k->type == MC_CONF_BOOL &&
            (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0))
            val = "true";
        if (val == NULL && (val = i + 1 < argc ? argv[++i] : NULL) == NULL) {
            fprintf(stderr, "%s: --%s needs a value\n", prog_name, k->name);
            return 2;
        }
        size_t ki = (size_t)(k - keys);
        if (k->type == MC_CONF_STRING && ki < MAX_ROWS && is_repeatable(repeatable, k->name)) {
            /* the values, '\n'-joined, go to the field after the loop (a
             * conf string may not hold a line break) */
            if (apply(conf, k->name, strlen(k->name), val) != 0 || join(&joined[ki], val) != 0)
                return 2;
            given[ki] = 1;
            continue;
        }
        if (apply(conf, k->name, strlen(k->name), val) != 0)
            return 2;
        if (ki < MAX_ROWS)
            given[ki] = 1;
    }
    for (size_t i = 0; i < given_n; i++)
        if (joined[i] != NULL)
            *(char **)((char *)opts + keys[i].offset) = joined[i];
    if (dump) {
        mc_conf_dump(conf, stdout);
        return 1;
    }
    return 0;
}

unsigned bench_list(const char *flag, const char *s, int sizes, uint64_t lo, uint64_t hi,
                    uint64_t *out, unsigned max)
{
    unsigned n = 0;
    const char *p = s;
    char item[64];
    for (;;) {
        const char *c = strchr(p, ',');
        size_t len = c != NULL ? (size_t)(c - p) : strlen(p);
        uint64_t v = 0;
        int ok = len > 0 && len < sizeof(item);
        if (ok) {
            memcpy(item, p, len);
            item[len] = '\0';
            if (sizes) {
                ok = mc_conf_parse_size(item, &v) == MC_OK;
            } else {
                char *end = NULL;
                errno = 0;
                unsigned long long x = strtoull(item, &end, 10);
                ok = item[0] != '-' && *end == '\0' && errno == 0;
                v = x;
            }
        }
        if (!ok || v < lo || v > hi || n == max) {
            fprintf(stderr,
                    "%s: --%s: '%.*s' is not %s in %" PRIu64 "..%" PRIu64
                    " (a comma list of at most %u)\n",
                    prog_name, flag, (int)len, p, sizes ? "a size" : "a number", lo, hi, max);
            return 0;
        }
        out[n++] = v;
        if (c == NULL)
            return n;
        p = c + 1;
    }
}

int bench_opt_given(const char *name)
{
    for (size_t i = 0; i < given_n; i++)
        if (strcmp(given_keys[i].name, name) == 0)
            return given[i];
    return 0;
}
