/*
 * conf.c - see conf.h.
 *
 * The INI reader is our own (~200 lines) rather than libinih: inih's handler
 * is not given the line number (Debian builds it without INI_HANDLER_LINENO),
 * and every error here must name its line; inih also allocates with plain
 * malloc (no mc_malloc fault injection), truncates or rejects lines over 200
 * bytes, treats indented lines as Python-style continuations, and is tuned
 * through process-wide mutable globals. Reading the whole file into one
 * mc_malloc buffer and splitting it in place avoids all of that.
 *
 * Every source is applied in two phases: parse and validate everything into a
 * batch of pending values (all allocations happen here), then commit the
 * batch, which cannot fail. So a source with an error changes nothing.
 */
#include "util/conf.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "util/log.h"
#include "util/mem.h"

/* A config file is small; a bigger one is a mistake like `-c /dev/zero`. */
#define CONF_MAX_FILE (16u << 20)
/* Longest environment variable name built from a section and key. */
#define CONF_ENV_NAME_MAX 256
/* Non-string values longer than this cannot be valid for any type. */
#define CONF_SCALAR_MAX 128

typedef enum conf_src_kind {
    SRC_DEFAULT,
    SRC_FILE,
    SRC_ENV,
    SRC_SET,
    SRC_ARGS, /* the command line itself, for argument errors */
} conf_src_kind_t;

/* Where a value came from. path is interned in mc_conf.paths. */
typedef struct conf_origin {
    conf_src_kind_t kind;
    unsigned line;
    const char *path;
} conf_origin_t;

typedef struct conf_slot {
    conf_origin_t origin;
    char *str; /* MC_CONF_STRING: the string the field points at, owned */
} conf_slot_t;

typedef struct conf_section {
    struct conf_section *next;
    char *name;
    const mc_conf_key_t *keys;
    size_t nkeys;
    char *opts;
    conf_slot_t slots[]; /* one per key */
} conf_section_t;

typedef struct conf_path {
    struct conf_path *next;
    char path[];
} conf_path_t;

struct mc_conf {
    conf_section_t *sections; /* in registration order: dump and help follow it */
    conf_section_t **tail;
    conf_path_t *paths; /* file paths named by origins */
    bool partial;       /* sections not registered are skipped (mc_conf_set_partial) */
};

typedef union conf_val {
    bool b;
    int64_t i;
    uint64_t u; /* UINT, SIZE, DURATION */
    double d;
    char *s; /* borrowed after parse_value; owned once in a batch */
    int e;
} conf_val_t;

typedef struct conf_pending {
    conf_section_t *sec;
    size_t idx;
    conf_val_t val;
    conf_origin_t origin;
} conf_pending_t;

typedef struct conf_batch {
    conf_pending_t *v;
    size_t n, cap;
} conf_batch_t;

/* Source of the text being parsed, for error prefixes. */
typedef struct conf_src {
    conf_src_kind_t kind;
    const char *path; /* SRC_FILE */
    unsigned line;    /* SRC_FILE */
    const char *var;  /* SRC_ENV: "MC_RPC_PORT" */
    size_t varlen;
} conf_src_t;

static const char *const type_names[] = {
    [MC_CONF_BOOL] = "bool",     [MC_CONF_INT] = "int",   [MC_CONF_UINT] = "uint",
    [MC_CONF_DOUBLE] = "double", [MC_CONF_SIZE] = "size", [MC_CONF_DURATION] = "duration",
    [MC_CONF_STRING] = "string", [MC_CONF_ENUM] = "enum",
};

const char *mc_conf_type_name(mc_conf_type_t type)
{
    return (unsigned)type < MC_ARRAY_SIZE(type_names) ? type_names[type] : "?";
}

/* ---- errors ---------------------------------------------------------------------------- */

static mc_status_t fail(char *err, size_t errlen, const conf_src_t *src, mc_status_t st,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static mc_status_t fail(char *err, size_t errlen, const conf_src_t *src, mc_status_t st,
                        const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return st;
    int n = 0;
    switch (src->kind) {
    case SRC_FILE:
        n = src->line ? snprintf(err, errlen, "%s:%u: ", src->path, src->line)
                      : snprintf(err, errlen, "%s: ", src->path);
        break;
    case SRC_ENV:
        n = snprintf(err, errlen, "environment %.*s: ", (int)src->varlen, src->var);
        break;
    case SRC_SET:
        n = snprintf(err, errlen, "--set: ");
        break;
    case SRC_ARGS:
        n = snprintf(err, errlen, "command line: ");
        break;
    case SRC_DEFAULT:
        break;
    }
    if (n < 0 || (size_t)n >= errlen)
        return st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- scalar parsers: each returns NULL or the reason the text is bad ------------------- */

static const char *parse_bool_text(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < MC_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return NULL;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return NULL;
        }
    }
    return "expected a bool (true/false, yes/no, on/off, 1/0)";
}

static const char *parse_int_text(const char *s, int64_t *out)
{
    const char *p = s + (*s == '+' || *s == '-');
    if (!isdigit((unsigned char)*p))
        return "expected an integer";
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0')
        return "expected an integer";
    if (errno == ERANGE)
        return "too large for a 64-bit integer";
    *out = v;
    return NULL;
}

static const char *parse_uint_text(const char *s, uint64_t *out)
{
    /* strtoull would accept "-1" as UINT64_MAX */
    const char *p = s + (*s == '+');
    if (!isdigit((unsigned char)*p))
        return "expected a non-negative integer";
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0')
        return "expected a non-negative integer";
    if (errno == ERANGE)
        return "too large for a 64-bit integer";
    *out = v;
    return NULL;
}

static const char *parse_double_text(const char *s, double *out)
{
    const char *p = s + (*s == '+' || *s == '-');
    if (!isdigit((unsigned char)*p) && *p != '.')
        return "expected a number";
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0' || end == s)
        return "expected a number";
    if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1.0))
        return "too large for a double";
    *out = v;
    return NULL;
}

typedef struct conf_unit {
    const char *name;
    uint64_t mult;
} conf_unit_t;

static const conf_unit_t size_units[] = {
    {"b", 1},
    {"k", 1ull << 10},
    {"kib", 1ull << 10},
    {"kb", 1000ull},
    {"m", 1ull << 20},
    {"mib", 1ull << 20},
    {"mb", 1000000ull},
    {"g", 1ull << 30},
    {"gib", 1ull << 30},
    {"gb", 1000000000ull},
    {"t", 1ull << 40},
    {"tib", 1ull << 40},
    {"tb", 1000000000000ull},
};

/* Ascending: the formatter walks it from the end for the largest exact unit. */
static const conf_unit_t duration_units[] = {
    {"us", 1}, {"ms", 1000ull}, {"s", 1000000ull}, {"m", 60000000ull}, {"h", 3600000000ull},
};

typedef enum scaled_err {
    SCALED_OK,
    SCALED_SYNTAX,
    SCALED_UNIT,       /* unknown unit */
    SCALED_NEEDS_UNIT, /* bare number other than 0 where a unit is required */
    SCALED_OVERFLOW,
    SCALED_NOT_WHOLE, /* fraction of the base unit */
} scaled_err_t;

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* "<digits>[.<digits>][blanks]<unit>" times the unit's multiplier, computed
 * exactly in integers, so "1.5GiB" is exact and "0.3KiB" is rejected rather
 * than rounded. No unit means the base unit, unless unit_required. */
static scaled_err_t parse_scaled(const char *s, const conf_unit_t *units, size_t nunits,
                                 bool unit_required, uint64_t *out)
{
    const char *p = s;
    uint64_t ipart = 0;
    bool digits = false;
    while (isdigit((unsigned char)*p)) {
        unsigned d = (unsigned)(*p++ - '0');
        if (__builtin_mul_overflow(ipart, 10, &ipart) || __builtin_add_overflow(ipart, d, &ipart))
            return SCALED_OVERFLOW;
        digits = true;
    }
    const char *fs = p, *fe = p;
    if (*p == '.') {
        fs = fe = ++p;
        while (isdigit((unsigned char)*p))
            fe = ++p;
        digits = digits || fe > fs;
    }
    if (!digits)
        return SCALED_SYNTAX;
    while (fe > fs && fe[-1] == '0')
        fe--; /* 1.50 == 1.5 */
    while (*p == ' ' || *p == '\t')
        p++;

    uint64_t mult = 1;
    if (*p == '\0') {
        if (unit_required && (ipart != 0 || fe > fs))
            return SCALED_NEEDS_UNIT;
    } else {
        size_t i = 0;
        while (i < nunits && strcasecmp(p, units[i].name) != 0)
            i++;
        if (i == nunits)
            return SCALED_UNIT;
        mult = units[i].mult;
    }

    uint64_t v;
    if (__builtin_mul_overflow(ipart, mult, &v))
        return SCALED_OVERFLOW;
    if (fe > fs) {
        /* frac / 10^k units are whole iff d = 10^k / g divides frac, where
         * g = gcd(10^k, mult); the amount is then (frac / d) * (mult / g),
         * less than mult. More than 19 significant decimals are never whole:
         * no multiplier is divisible by 5^20. */
        size_t k = (size_t)(fe - fs);
        if (k > 19)
            return SCALED_NOT_WHOLE;
        uint64_t frac = 0, scale = 1;
        for (const char *q = fs; q < fe; q++) {
            frac = frac * 10 + (uint64_t)(*q - '0');
            scale *= 10;
        }
        uint64_t g = gcd_u64(scale, mult);
        uint64_t d = scale / g;
        if (frac % d != 0)
            return SCALED_NOT_WHOLE;
        if (__builtin_add_overflow(v, (frac / d) * (mult / g), &v))
            return SCALED_OVERFLOW;
    }
    *out = v;
    return SCALED_OK;
}

#define SIZE_EXPECTED "expected a size such as 4096, 64KiB, 1.5GiB or 10MB"
#define DURATION_EXPECTED "expected a duration such as 500us, 250ms, 1.5s, 2m or 1h"

static const char *parse_size_text(const char *s, uint64_t *out)
{
    switch (parse_scaled(s, size_units, MC_ARRAY_SIZE(size_units), false, out)) {
    case SCALED_OK:
        return NULL;
    case SCALED_SYNTAX:
    case SCALED_NEEDS_UNIT:
        return SIZE_EXPECTED;
    case SCALED_UNIT:
        return "unknown size unit (use B, K, KiB, KB, M, MiB, MB, G, GiB, GB, T, TiB, TB)";
    case SCALED_OVERFLOW:
        return "too large for 64 bits";
    case SCALED_NOT_WHOLE:
        return "not a whole number of bytes";
    }
    return SIZE_EXPECTED;
}

static const char *parse_duration_text(const char *s, uint64_t *out)
{
    switch (parse_scaled(s, duration_units, MC_ARRAY_SIZE(duration_units), true, out)) {
    case SCALED_OK:
        return NULL;
    case SCALED_SYNTAX:
        return DURATION_EXPECTED;
    case SCALED_UNIT:
        return "unknown duration unit (use us, ms, s, m, h)";
    case SCALED_NEEDS_UNIT:
        return "needs a unit (us, ms, s, m, h)";
    case SCALED_OVERFLOW:
        return "too large for 64 bits";
    case SCALED_NOT_WHOLE:
        return "not a whole number of microseconds";
    }
    return DURATION_EXPECTED;
}

mc_status_t mc_conf_parse_bool(const char *s, bool *out)
{
    bool v;
    if (s == NULL || parse_bool_text(s, &v) != NULL)
        return MC_ERR_INVALID_PARAMS;
    *out = v;
    return MC_OK;
}

int mc_conf_parse_digits(const char *p, const char *end, unsigned long max, unsigned long *out)
{
    if (p == end || end - p > 10)
        return 0;
    unsigned long v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (unsigned long)(*p - '0');
    }
    if (v > max)
        return 0;
    *out = v;
    return 1;
}

mc_status_t mc_conf_parse_size(const char *s, uint64_t *bytes)
{
    uint64_t v;
    if (s == NULL || parse_size_text(s, &v) != NULL)
        return MC_ERR_INVALID_PARAMS;
    *bytes = v;
    return MC_OK;
}

mc_status_t mc_conf_parse_duration(const char *s, uint64_t *us)
{
    uint64_t v;
    if (s == NULL || parse_duration_text(s, &v) != NULL)
        return MC_ERR_INVALID_PARAMS;
    *us = v;
    return MC_OK;
}

/* ---- formatters ------------------------------------------------------------------------ */

char *mc_conf_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const struct {
        unsigned shift;
        const char *name;
    } units[] = {{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
    for (size_t i = 0; bytes != 0 && i < MC_ARRAY_SIZE(units); i++) {
        if ((bytes & ((1ull << units[i].shift) - 1)) == 0) {
            snprintf(buf, len, "%" PRIu64 "%s", bytes >> units[i].shift, units[i].name);
            return buf;
        }
    }
    snprintf(buf, len, "%" PRIu64, bytes);
    return buf;
}

char *mc_conf_format_duration(uint64_t us, char *buf, size_t len)
{
    for (size_t i = MC_ARRAY_SIZE(duration_units); us != 0 && i-- > 0;) {
        if (us % duration_units[i].mult == 0) {
            snprintf(buf, len, "%" PRIu64 "%s", us / duration_units[i].mult,
                     duration_units[i].name);
            return buf;
        }
    }
    snprintf(buf, len, "%" PRIu64, us);
    return buf;
}

/* Shortest %g text that reads back as exactly v. */
static void format_double(double v, char *buf, size_t len)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static bool is_ranged(const mc_conf_key_t *k)
{
    switch (k->type) {
    case MC_CONF_INT:
    case MC_CONF_UINT:
    case MC_CONF_DOUBLE:
    case MC_CONF_SIZE:
    case MC_CONF_DURATION:
        return !(k->min == 0 && k->max == 0);
    default:
        return false;
    }
}

static void format_bound(const mc_conf_key_t *k, double x, char *buf, size_t len)
{
    bool is_unsigned =
        k->type == MC_CONF_UINT || k->type == MC_CONF_SIZE || k->type == MC_CONF_DURATION;
    if (isinf(x))
        snprintf(buf, len, "%s", x < 0 ? "-inf" : "inf");
    else if (k->type == MC_CONF_DOUBLE || x != floor(x))
        format_double(x, buf, len);
    else if (is_unsigned && x >= 0 && x < 0x1p64 && k->type == MC_CONF_SIZE)
        mc_conf_format_size((uint64_t)x, buf, len);
    else if (is_unsigned && x >= 0 && x < 0x1p64 && k->type == MC_CONF_DURATION)
        mc_conf_format_duration((uint64_t)x, buf, len);
    else if (is_unsigned && x >= 0 && x < 0x1p64)
        snprintf(buf, len, "%" PRIu64, (uint64_t)x);
    else if (fabs(x) < 0x1p63)
        snprintf(buf, len, "%" PRId64, (int64_t)x);
    else
        snprintf(buf, len, "%.0f", x); /* integral, beyond 64 bits: exact anyway */
}

/* ---- values ---------------------------------------------------------------------------- */

static void list_choices(const mc_conf_key_t *k, char *buf, size_t len, const char *sep)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const char *const *c = k->choices; c != NULL && *c != NULL && used < len; c++) {
        int n = snprintf(buf + used, len - used, "%s%s", c == k->choices ? "" : sep, *c);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* Parse `text` as a value of key k into *out without allocating (a string
 * value is borrowed from text). On error write the reason, naming the type or
 * the range, to why and return MC_ERR_CONFIG. */
static mc_status_t parse_value(const mc_conf_key_t *k, const char *text, conf_val_t *out, char *why,
                               size_t whylen)
{
    if (k->type == MC_CONF_STRING) {
        if (strpbrk(text, "\r\n") != NULL) {
            snprintf(why, whylen, "bad value: a string cannot contain a line break");
            return MC_ERR_CONFIG;
        }
        out->s = (char *)text;
        return MC_OK;
    }

    /* Other types ignore surrounding blanks (env and --set are not trimmed). */
    char tmp[CONF_SCALAR_MAX];
    while (*text == ' ' || *text == '\t')
        text++;
    size_t n = strlen(text);
    while (n > 0 && (text[n - 1] == ' ' || text[n - 1] == '\t'))
        n--;
    if (n >= sizeof(tmp)) {
        snprintf(why, whylen, "bad value \"%.32s...\": too long for a %s", text,
                 mc_conf_type_name(k->type));
        return MC_ERR_CONFIG;
    }
    memcpy(tmp, text, n);
    tmp[n] = '\0';

    const char *bad = NULL;
    switch (k->type) {
    case MC_CONF_BOOL:
        bad = parse_bool_text(tmp, &out->b);
        break;
    case MC_CONF_INT:
        bad = parse_int_text(tmp, &out->i);
        break;
    case MC_CONF_UINT:
        bad = parse_uint_text(tmp, &out->u);
        break;
    case MC_CONF_DOUBLE:
        bad = parse_double_text(tmp, &out->d);
        break;
    case MC_CONF_SIZE:
        bad = parse_size_text(tmp, &out->u);
        break;
    case MC_CONF_DURATION:
        bad = parse_duration_text(tmp, &out->u);
        break;
    case MC_CONF_ENUM: {
        for (int i = 0; k->choices != NULL && k->choices[i] != NULL; i++) {
            if (strcasecmp(tmp, k->choices[i]) == 0) {
                out->e = i;
                return MC_OK;
            }
        }
        char list[256];
        list_choices(k, list, sizeof(list), ", ");
        snprintf(why, whylen, "bad value \"%s\": expected one of %s", tmp, list);
        return MC_ERR_CONFIG;
    }
    case MC_CONF_STRING:
        break;
    }
    if (bad != NULL) {
        snprintf(why, whylen, "bad value \"%s\": %s", tmp, bad);
        return MC_ERR_CONFIG;
    }
    if (!is_ranged(k))
        return MC_OK;
    double x = k->type == MC_CONF_INT      ? (double)out->i
               : k->type == MC_CONF_DOUBLE ? out->d
                                           : (double)out->u;
    if (x < k->min || x > k->max) {
        char lo[MC_CONF_FMT_LEN], hi[MC_CONF_FMT_LEN];
        format_bound(k, k->min, lo, sizeof(lo));
        format_bound(k, k->max, hi, sizeof(hi));
        snprintf(why, whylen, "value %s out of range [%s, %s]", tmp, lo, hi);
        return MC_ERR_CONFIG;
    }
    return MC_OK;
}

static void *field_of(const conf_section_t *sec, size_t i)
{
    return sec->opts + sec->keys[i].offset;
}

/* Write v into the struct field; a string moves into the slot (v->s cleared). */
static void store_value(conf_section_t *sec, size_t i, conf_val_t *v, const conf_origin_t *o)
{
    void *f = field_of(sec, i);
    switch (sec->keys[i].type) {
    case MC_CONF_BOOL:
        *(bool *)f = v->b;
        break;
    case MC_CONF_INT:
        *(int64_t *)f = v->i;
        break;
    case MC_CONF_UINT:
    case MC_CONF_SIZE:
    case MC_CONF_DURATION:
        *(uint64_t *)f = v->u;
        break;
    case MC_CONF_DOUBLE:
        *(double *)f = v->d;
        break;
    case MC_CONF_ENUM:
        *(int *)f = v->e;
        break;
    case MC_CONF_STRING:
        mc_free(sec->slots[i].str);
        sec->slots[i].str = v->s;
        v->s = NULL;
        *(char **)f = sec->slots[i].str;
        break;
    }
    sec->slots[i].origin = *o;
}

static void load_value(const conf_section_t *sec, size_t i, conf_val_t *v)
{
    const void *f = field_of(sec, i);
    switch (sec->keys[i].type) {
    case MC_CONF_BOOL:
        v->b = *(const bool *)f;
        break;
    case MC_CONF_INT:
        v->i = *(const int64_t *)f;
        break;
    case MC_CONF_UINT:
    case MC_CONF_SIZE:
    case MC_CONF_DURATION:
        v->u = *(const uint64_t *)f;
        break;
    case MC_CONF_DOUBLE:
        v->d = *(const double *)f;
        break;
    case MC_CONF_ENUM:
        v->e = *(const int *)f;
        break;
    case MC_CONF_STRING:
        v->s = sec->slots[i].str; /* ours, not whatever the struct holds now */
        break;
    }
}

/* ---- batches: parse everything, then commit -------------------------------------------- */

static void batch_fini(conf_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (b->v[i].sec->keys[b->v[i].idx].type == MC_CONF_STRING)
            mc_free(b->v[i].val.s);
    }
    mc_free(b->v);
    b->v = NULL;
    b->n = b->cap = 0;
}

/* Queue a parsed value; a string is copied so the batch owns it. */
static mc_status_t batch_push(conf_batch_t *b, conf_section_t *sec, size_t idx,
                              const conf_val_t *val, const conf_origin_t *origin)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8;
        conf_pending_t *v = mc_realloc(b->v, cap * sizeof(*v));
        if (v == NULL)
            return MC_ERR_NOMEM;
        b->v = v;
        b->cap = cap;
    }
    conf_pending_t *p = &b->v[b->n];
    p->sec = sec;
    p->idx = idx;
    p->val = *val;
    p->origin = *origin;
    if (sec->keys[idx].type == MC_CONF_STRING) {
        p->val.s = mc_strdup(val->s);
        if (p->val.s == NULL)
            return MC_ERR_NOMEM;
    }
    b->n++;
    return MC_OK;
}

static void batch_commit(conf_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        store_value(b->v[i].sec, b->v[i].idx, &b->v[i].val, &b->v[i].origin);
    batch_fini(b);
}

/* ---- lookup ---------------------------------------------------------------------------- */

static bool name_eq(const char *name, const char *s, size_t n)
{
    return strlen(name) == n && memcmp(name, s, n) == 0;
}

static conf_section_t *find_section(const mc_conf_t *conf, const char *name, size_t n)
{
    for (conf_section_t *s = conf->sections; s != NULL; s = s->next) {
        if (name_eq(s->name, name, n))
            return s;
    }
    return NULL;
}

static bool find_key(const conf_section_t *sec, const char *name, size_t n, size_t *idx)
{
    for (size_t i = 0; i < sec->nkeys; i++) {
        if (name_eq(sec->keys[i].name, name, n)) {
            *idx = i;
            return true;
        }
    }
    return false;
}

/* MC_<SECTION>_<KEY>: upper case, '-' and '.' as '_'. Returns false when it
 * does not fit in len. */
static bool env_name(const char *section, const char *key, char *buf, size_t len)
{
    int n = snprintf(buf, len, "MC_%s_%s", section, key);
    if (n < 0 || (size_t)n >= len)
        return false;
    for (char *p = buf; *p != '\0'; p++) {
        if (*p == '-' || *p == '.')
            *p = '_';
        else
            *p = (char)toupper((unsigned char)*p);
    }
    return true;
}

/* Parse text for sec.key from src and queue it; errors name source and key. */
static mc_status_t stage(conf_batch_t *b, conf_section_t *sec, size_t idx, const char *text,
                         const conf_src_t *src, const conf_origin_t *origin, char *err,
                         size_t errlen)
{
    char why[512];
    conf_val_t v;
    mc_status_t st = parse_value(&sec->keys[idx], text, &v, why, sizeof(why));
    if (st != MC_OK)
        return fail(err, errlen, src, st, "%s.%s: %s", sec->name, sec->keys[idx].name, why);
    st = batch_push(b, sec, idx, &v, origin);
    if (st != MC_OK)
        return fail(err, errlen, src, st, "%s.%s: out of memory", sec->name, sec->keys[idx].name);
    return MC_OK;
}

/* ---- object ---------------------------------------------------------------------------- */

mc_conf_t *mc_conf_create(void)
{
    mc_conf_t *conf = MC_NEW(mc_conf_t);
    if (conf != NULL)
        conf->tail = &conf->sections;
    return conf;
}

void mc_conf_set_partial(mc_conf_t *conf, int on)
{
    conf->partial = on != 0;
}

static void section_free(conf_section_t *sec)
{
    for (size_t i = 0; i < sec->nkeys; i++)
        mc_free(sec->slots[i].str);
    mc_free(sec->name);
    mc_free(sec);
}

void mc_conf_destroy(mc_conf_t *conf)
{
    if (conf == NULL)
        return;
    while (conf->sections != NULL) {
        conf_section_t *s = conf->sections;
        conf->sections = s->next;
        section_free(s);
    }
    while (conf->paths != NULL) {
        conf_path_t *p = conf->paths;
        conf->paths = p->next;
        mc_free(p);
    }
    mc_free(conf);
}

static size_t type_size(mc_conf_type_t type)
{
    switch (type) {
    case MC_CONF_BOOL:
        return sizeof(bool);
    case MC_CONF_INT:
        return sizeof(int64_t);
    case MC_CONF_UINT:
    case MC_CONF_SIZE:
    case MC_CONF_DURATION:
        return sizeof(uint64_t);
    case MC_CONF_DOUBLE:
        return sizeof(double);
    case MC_CONF_STRING:
        return sizeof(char *);
    case MC_CONF_ENUM:
        return sizeof(int);
    }
    return 0;
}

static bool valid_name(const char *s, bool dots)
{
    if (s == NULL || *s == '\0')
        return false;
    for (; *s != '\0'; s++) {
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && !(dots && *s == '.'))
            return false;
    }
    return true;
}

/* Whether any key registered so far, or key j < i of the new table, has the
 * environment name of keys[i]; a clash would make one of them unreachable. */
static bool env_clash(const mc_conf_t *conf, const char *section, const mc_conf_key_t *keys,
                      size_t i, char *other, size_t otherlen)
{
    char mine[CONF_ENV_NAME_MAX], theirs[CONF_ENV_NAME_MAX];
    env_name(section, keys[i].name, mine, sizeof(mine));
    for (const conf_section_t *s = conf->sections; s != NULL; s = s->next) {
        for (size_t j = 0; j < s->nkeys; j++) {
            if (env_name(s->name, s->keys[j].name, theirs, sizeof(theirs)) &&
                strcmp(mine, theirs) == 0) {
                snprintf(other, otherlen, "%s.%s", s->name, s->keys[j].name);
                return true;
            }
        }
    }
    for (size_t j = 0; j < i; j++) {
        if (env_name(section, keys[j].name, theirs, sizeof(theirs)) && strcmp(mine, theirs) == 0) {
            snprintf(other, otherlen, "%s.%s", section, keys[j].name);
            return true;
        }
    }
    return false;
}

/* A table error is a bug in the calling module: say exactly which row. */
static bool check_row(const mc_conf_t *conf, const char *section, const mc_conf_key_t *keys,
                      size_t i)
{
    const mc_conf_key_t *k = &keys[i];
    char env[CONF_ENV_NAME_MAX], why[512], other[CONF_ENV_NAME_MAX];
    conf_val_t v;

    if (!valid_name(k->name, true)) {
        MC_ERROR(CONF, "[%s] row %zu: key name \"%s\" must be letters, digits, '_', '-', '.'",
                 section, i, k->name ? k->name : "(null)");
        return false;
    }
    if (!env_name(section, k->name, env, sizeof(env))) {
        MC_ERROR(CONF, "%s.%s: name too long", section, k->name);
        return false;
    }
    if (k->size != type_size(k->type)) {
        MC_ERROR(CONF, "%s.%s: field of %zu bytes cannot hold a %s", section, k->name, k->size,
                 mc_conf_type_name(k->type));
        return false;
    }
    if (k->type == MC_CONF_ENUM && (k->choices == NULL || k->choices[0] == NULL)) {
        MC_ERROR(CONF, "%s.%s: enum without choices", section, k->name);
        return false;
    }
    if (isnan(k->min) || isnan(k->max) || k->min > k->max) {
        MC_ERROR(CONF, "%s.%s: bad range [%g, %g]", section, k->name, k->min, k->max);
        return false;
    }
    if (parse_value(k, k->def ? k->def : "", &v, why, sizeof(why)) != MC_OK) {
        MC_ERROR(CONF, "%s.%s: default: %s", section, k->name, why);
        return false;
    }
    if (env_clash(conf, section, keys, i, other, sizeof(other))) {
        MC_ERROR(CONF, "%s.%s: same name as %s (or same environment name %s)", section, k->name,
                 other, env);
        return false;
    }
    return true;
}

mc_status_t mc_conf_add_section(mc_conf_t *conf, const char *section, const mc_conf_key_t *keys,
                                size_t nkeys, void *opts)
{
    if (conf == NULL || !valid_name(section, false) || (keys == NULL && nkeys > 0) ||
        opts == NULL) {
        MC_ERROR(CONF, "mc_conf_add_section: bad arguments (section \"%s\")",
                 section ? section : "(null)");
        return MC_ERR_INVALID_PARAMS;
    }
    if (find_section(conf, section, strlen(section)) != NULL) {
        MC_ERROR(CONF, "section [%s] registered twice", section);
        return MC_ERR_INVALID_PARAMS;
    }
    for (size_t i = 0; i < nkeys; i++) {
        if (!check_row(conf, section, keys, i))
            return MC_ERR_INVALID_PARAMS;
    }

    conf_section_t *sec = mc_calloc(1, sizeof(*sec) + nkeys * sizeof(sec->slots[0]));
    if (sec == NULL)
        return MC_ERR_NOMEM;
    sec->keys = keys;
    sec->nkeys = nkeys;
    sec->opts = opts;
    sec->name = mc_strdup(section);
    if (sec->name == NULL)
        goto err_free_section;
    /* Copy every string default before touching opts, so that a failure
     * leaves the caller's struct alone. */
    for (size_t i = 0; i < nkeys; i++) {
        if (keys[i].type == MC_CONF_STRING) {
            sec->slots[i].str = mc_strdup(keys[i].def ? keys[i].def : "");
            if (sec->slots[i].str == NULL)
                goto err_free_section;
        }
    }
    const conf_origin_t def = {SRC_DEFAULT, 0, NULL};
    for (size_t i = 0; i < nkeys; i++) {
        char why[8];
        conf_val_t v;
        if (keys[i].type == MC_CONF_STRING) {
            v.s = sec->slots[i].str; /* moves back in through store_value */
            sec->slots[i].str = NULL;
        } else {
            parse_value(&keys[i], keys[i].def, &v, why, sizeof(why)); /* checked above */
        }
        store_value(sec, i, &v, &def);
    }
    *conf->tail = sec;
    conf->tail = &sec->next;
    return MC_OK;

err_free_section:
    section_free(sec);
    return MC_ERR_NOMEM;
}

/* ---- file ------------------------------------------------------------------------------ */

/* Whole file into one NUL-terminated mc_malloc buffer. */
static mc_status_t read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen)
{
    const conf_src_t src = {.kind = SRC_FILE, .path = path};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, &src, MC_ERR_CONFIG, "cannot open: %s", strerror(errno));

    mc_status_t st;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 2) { /* room for at least one byte and the NUL */
            size_t ncap = cap ? cap * 2 : 4096;
            char *nbuf = mc_realloc(buf, ncap);
            if (nbuf == NULL) {
                st = fail(err, errlen, &src, MC_ERR_NOMEM, "out of memory while reading");
                goto err_free;
            }
            buf = nbuf;
            cap = ncap;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            st = fail(err, errlen, &src, MC_ERR_CONFIG, "cannot read: %s", strerror(errno));
            goto err_free;
        }
        len += (size_t)n;
        if (len > CONF_MAX_FILE) {
            st = fail(err, errlen, &src, MC_ERR_CONFIG,
                      "larger than %u MiB; not a configuration file?", CONF_MAX_FILE >> 20);
            goto err_free;
        }
    }
    close(fd);
    buf[len] = '\0';
    *out = buf;
    *outlen = len;
    return MC_OK;

err_free:
    mc_free(buf);
    close(fd);
    return st;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static char *trim(char *s, char *e)
{
    while (s < e && is_blank(*s))
        s++;
    while (e > s && is_blank(e[-1]))
        e--;
    *e = '\0';
    return s;
}

typedef struct file_ctx {
    mc_conf_t *conf;
    conf_batch_t batch;
    conf_src_t src;
    conf_origin_t origin;
    conf_section_t *sec; /* current [section] */
    bool skipping;       /* in a section a partial conf does not have */
    char *err;
    size_t errlen;
} file_ctx_t;

/* Value text after '=': a double-quoted string with \" and \\ escapes, or
 * everything up to an inline comment (a ';' after a blank). Unquotes in place. */
static mc_status_t file_value(file_ctx_t *c, const char *key, char *v, char **out)
{
    while (is_blank(*v))
        v++;
    if (*v != '"') {
        char *e = v;
        while (*e != '\0' && !(*e == ';' && (e == v || is_blank(e[-1]))))
            e++;
        *out = trim(v, e);
        return MC_OK;
    }
    char *w = v, *r = v + 1;
    for (;;) {
        if (*r == '\0')
            return fail(c->err, c->errlen, &c->src, MC_ERR_CONFIG,
                        "%s.%s: unterminated quoted value", c->sec->name, key);
        if (*r == '\\' && (r[1] == '"' || r[1] == '\\')) {
            *w++ = r[1];
            r += 2;
        } else if (*r == '"') {
            break;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    for (r++; is_blank(*r); r++)
        ;
    if (*r != '\0' && *r != ';' && *r != '#')
        return fail(c->err, c->errlen, &c->src, MC_ERR_CONFIG,
                    "%s.%s: text after the closing quote: \"%.40s\"", c->sec->name, key, r);
    *out = v;
    return MC_OK;
}

/* One line, NUL-terminated in place, without its '\n'. */
static mc_status_t file_line(file_ctx_t *c, char *s, char *e)
{
    s = trim(s, e);
    if (*s == '\0' || *s == ';' || *s == '#')
        return MC_OK;

    if (*s == '[') {
        char *close = strchr(s, ']');
        char *rest = close ? close + 1 : NULL;
        while (rest != NULL && is_blank(*rest))
            rest++;
        if (close == NULL || (*rest != '\0' && *rest != ';' && *rest != '#'))
            return fail(c->err, c->errlen, &c->src, MC_ERR_CONFIG,
                        "malformed section header \"%.60s\" (expected \"[section]\")", s);
        char *name = trim(s + 1, close);
        c->sec = find_section(c->conf, name, strlen(name));
        c->skipping = c->sec == NULL && c->conf->partial;
        if (c->sec == NULL && !c->skipping)
            return fail(c->err, c->errlen, &c->src, MC_ERR_CONFIG, "unknown section [%s]", name);
        return MC_OK;
    }

    char *eq = strchr(s, '=');
    if (eq == NULL || eq == s)
        return fail(c->err, c->errlen, &c->src, MC_ERR_CONFIG,
                    "malformed line \"%.60s\" (expected \"key = value\", \"[section]\" or a "
                    "comment)",
                    s);
    char *key = trim(s, eq);
    if (c->skipping)
        return MC_OK;
    if (c->sec == NULL)
        return fail(c->err, c->errlen, &c->src, MC_ERR_CONFIG, "%s: key before any [section]", key);
    size_t idx;
    if (!find_key(c->sec, key, strlen(key), &idx))
        return fail(c->err, c->errlen, &c->src, MC_ERR_CONFIG, "%s.%s: unknown key", c->sec->name,
                    key);
    for (size_t i = 0; i < c->batch.n; i++) {
        if (c->batch.v[i].sec == c->sec && c->batch.v[i].idx == idx)
            return fail(c->err, c->errlen, &c->src, MC_ERR_CONFIG,
                        "%s.%s: duplicate key (first set on line %u)", c->sec->name, key,
                        c->batch.v[i].origin.line);
    }
    char *value = NULL;
    mc_status_t st = file_value(c, key, eq + 1, &value);
    if (st != MC_OK)
        return st;
    c->origin.line = c->src.line;
    return stage(&c->batch, c->sec, idx, value, &c->src, &c->origin, c->err, c->errlen);
}

mc_status_t mc_conf_load_file(mc_conf_t *conf, const char *path, char *err, size_t errlen)
{
    conf_src_t src = {.kind = SRC_FILE, .path = path};
    size_t plen = strlen(path);
    conf_path_t *interned = mc_malloc(sizeof(*interned) + plen + 1);
    if (interned == NULL)
        return fail(err, errlen, &src, MC_ERR_NOMEM, "out of memory");
    memcpy(interned->path, path, plen + 1);

    char *buf = NULL;
    size_t len = 0;
    mc_status_t st = read_file(path, &buf, &len, err, errlen);
    if (st != MC_OK)
        goto err_free_path;

    file_ctx_t c = {
        .conf = conf,
        .src = src,
        .origin = {SRC_FILE, 0, interned->path},
        .err = err,
        .errlen = errlen,
    };
    char *p = buf, *end = buf + len;
    if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3; /* UTF-8 byte order mark, as some editors write */
    while (p < end) {
        c.src.line++;
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        if (memchr(p, '\0', (size_t)(le - p)) != NULL) {
            st = fail(err, errlen, &c.src, MC_ERR_CONFIG, "NUL byte in line");
            goto err_free_batch;
        }
        *le = '\0';
        st = file_line(&c, p, le);
        if (st != MC_OK)
            goto err_free_batch;
        p = le + 1;
    }
    batch_commit(&c.batch);
    mc_free(buf);
    interned->next = conf->paths;
    conf->paths = interned;
    return MC_OK;

err_free_batch:
    batch_fini(&c.batch);
    mc_free(buf);
err_free_path:
    mc_free(interned);
    return st;
}

/* ---- environment and --set ------------------------------------------------------------- */

/* MC_ variables that library modules read themselves: they are not
 * configuration keys, so a daemon must not call them typos. The rdma
 * transport's knobs (transport/README.md: MC_RDMA_* and upstream's names),
 * the CUDA runtime's path (transport/cuda.c) and the store client's staging
 * switch (store/client.c). An entry ending in '_' is a prefix. */
static const char *const module_env[] = {
    "MC_RDMA_",           "MC_NIC_PRIORITY_MATRIX", "MC_NUM_QP_PER_EP", "MC_MAX_WR",
    "MC_MAX_CQE_PER_CTX", "MC_MAX_EP_PER_CTX",      "MC_RETRY_CNT",     "MC_MTU",
    "MC_IB_PORT",         "MC_GID_INDEX",           "MC_PKEY_INDEX",    "MC_IB_SL",
    "MC_CUDA_LIBRARY",    "MC_STORE_STAGING",
};

static int is_module_env(const char *var, size_t len)
{
    for (size_t i = 0; i < sizeof(module_env) / sizeof(module_env[0]); i++) {
        size_t n = strlen(module_env[i]);
        if (module_env[i][n - 1] == '_' ? len > n && strncmp(var, module_env[i], n) == 0
                                        : len == n && strncmp(var, module_env[i], n) == 0)
            return 1;
    }
    return 0;
}

mc_status_t mc_conf_load_env(mc_conf_t *conf, char **envp, char *err, size_t errlen)
{
    conf_batch_t batch = {0};
    const conf_origin_t origin = {SRC_ENV, 0, NULL};
    for (char **e = envp; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, "MC_", 3) != 0 || eq == NULL)
            continue;
        const conf_src_t src = {.kind = SRC_ENV, .var = *e, .varlen = (size_t)(eq - *e)};
        conf_section_t *found = NULL;
        size_t idx = 0;
        char name[CONF_ENV_NAME_MAX];
        for (conf_section_t *s = conf->sections; s != NULL && found == NULL; s = s->next) {
            for (size_t i = 0; i < s->nkeys; i++) {
                if (env_name(s->name, s->keys[i].name, name, sizeof(name)) &&
                    name_eq(name, *e, src.varlen)) {
                    found = s;
                    idx = i;
                    break;
                }
            }
        }
        if (found == NULL) {
            if (is_module_env(*e, src.varlen) || conf->partial)
                continue;
            MC_WARN(CONF, "environment %.*s matches no configuration key; ignored", (int)src.varlen,
                    *e);
            continue;
        }
        mc_status_t st = stage(&batch, found, idx, eq + 1, &src, &origin, err, errlen);
        if (st != MC_OK) {
            batch_fini(&batch);
            return st;
        }
    }
    batch_commit(&batch);
    return MC_OK;
}

mc_status_t mc_conf_set(mc_conf_t *conf, const char *assignment, char *err, size_t errlen)
{
    const conf_src_t src = {.kind = SRC_SET};
    const char *eq = strchr(assignment, '=');
    const char *dot = eq ? memchr(assignment, '.', (size_t)(eq - assignment)) : NULL;
    if (dot == NULL)
        return fail(err, errlen, &src, MC_ERR_CONFIG, "\"%s\": expected section.key=value",
                    assignment);

    const char *s = assignment, *se = dot, *k = dot + 1, *ke = eq;
    while (s < se && is_blank(*s))
        s++;
    while (se > s && is_blank(se[-1]))
        se--;
    while (k < ke && is_blank(*k))
        k++;
    while (ke > k && is_blank(ke[-1]))
        ke--;
    int slen = (int)(se - s), klen = (int)(ke - k);
    conf_section_t *sec = find_section(conf, s, (size_t)slen);
    if (sec == NULL && conf->partial)
        return MC_OK;
    if (sec == NULL)
        return fail(err, errlen, &src, MC_ERR_CONFIG, "%.*s.%.*s: unknown section [%.*s]", slen, s,
                    klen, k, slen, s);
    size_t idx;
    if (!find_key(sec, k, (size_t)klen, &idx))
        return fail(err, errlen, &src, MC_ERR_CONFIG, "%s.%.*s: unknown key", sec->name, klen, k);

    conf_batch_t batch = {0};
    const conf_origin_t origin = {SRC_SET, 0, NULL};
    mc_status_t st = stage(&batch, sec, idx, eq + 1, &src, &origin, err, errlen);
    if (st != MC_OK) {
        batch_fini(&batch);
        return st;
    }
    batch_commit(&batch);
    return MC_OK;
}

/* ---- dump and help --------------------------------------------------------------------- */

/* Quote a string when the file reader would otherwise change it. */
static void print_string(FILE *out, const char *s)
{
    size_t n = strlen(s);
    bool quote =
        n > 0 && (is_blank(s[0]) || is_blank(s[n - 1]) || s[0] == '"' || strpbrk(s, ";#") != NULL);
    if (!quote) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

static void print_value(FILE *out, const mc_conf_key_t *k, const conf_val_t *v)
{
    char buf[MC_CONF_FMT_LEN];
    switch (k->type) {
    case MC_CONF_BOOL:
        fputs(v->b ? "true" : "false", out);
        break;
    case MC_CONF_INT:
        fprintf(out, "%" PRId64, v->i);
        break;
    case MC_CONF_UINT:
        fprintf(out, "%" PRIu64, v->u);
        break;
    case MC_CONF_DOUBLE:
        format_double(v->d, buf, sizeof(buf));
        fputs(buf, out);
        break;
    case MC_CONF_SIZE:
        fputs(mc_conf_format_size(v->u, buf, sizeof(buf)), out);
        break;
    case MC_CONF_DURATION:
        fputs(mc_conf_format_duration(v->u, buf, sizeof(buf)), out);
        break;
    case MC_CONF_STRING:
        print_string(out, v->s ? v->s : "");
        break;
    case MC_CONF_ENUM: {
        int n = 0;
        while (k->choices[n] != NULL)
            n++;
        /* a caller may have stored anything in the int; print it loudly */
        fputs(v->e >= 0 && v->e < n ? k->choices[v->e] : "(invalid)", out);
        break;
    }
    }
}

/* Help text on one line: a line break would end the comment in a dump. */
static void print_help_text(FILE *out, const char *help)
{
    for (const char *p = help ? help : ""; *p != '\0'; p++)
        fputc(*p == '\n' || *p == '\r' ? ' ' : *p, out);
}

/* "(uint, default 50051, range [1, 65535])" */
static void print_description(FILE *out, const mc_conf_key_t *k)
{
    char list[256];
    if (k->type == MC_CONF_ENUM) {
        list_choices(k, list, sizeof(list), "|");
        fprintf(out, "(enum: %s, default ", list);
    } else {
        fprintf(out, "(%s, default ", mc_conf_type_name(k->type));
    }
    if (k->type == MC_CONF_STRING) {
        fputc('"', out);
        fputs(k->def ? k->def : "", out);
        fputc('"', out);
    } else {
        char why[8];
        conf_val_t v;
        parse_value(k, k->def, &v, why, sizeof(why)); /* checked by add_section */
        print_value(out, k, &v);
    }
    if (is_ranged(k)) {
        char lo[MC_CONF_FMT_LEN], hi[MC_CONF_FMT_LEN];
        format_bound(k, k->min, lo, sizeof(lo));
        format_bound(k, k->max, hi, sizeof(hi));
        fprintf(out, ", range [%s, %s]", lo, hi);
    }
    fputc(')', out);
}

void mc_conf_dump(const mc_conf_t *conf, FILE *out)
{
    fputs("; effective configuration (--dump-config); load it back with -c FILE\n", out);
    for (const conf_section_t *s = conf->sections; s != NULL; s = s->next) {
        fprintf(out, "\n[%s]\n", s->name);
        for (size_t i = 0; i < s->nkeys; i++) {
            const mc_conf_key_t *k = &s->keys[i];
            const conf_origin_t *o = &s->slots[i].origin;
            conf_val_t v;
            char env[CONF_ENV_NAME_MAX];
            if (i > 0)
                fputc('\n', out);
            fputs("; ", out);
            print_help_text(out, k->help);
            fputc(' ', out);
            print_description(out, k);
            fprintf(out, "\n%s = ", k->name);
            load_value(s, i, &v);
            print_value(out, k, &v);
            fputc('\n', out);
            switch (o->kind) {
            case SRC_FILE:
                fprintf(out, "; from %s:%u\n", o->path, o->line);
                break;
            case SRC_ENV:
                env_name(s->name, k->name, env, sizeof(env));
                fprintf(out, "; from env %s\n", env);
                break;
            case SRC_SET:
                fputs("; from --set\n", out);
                break;
            default:
                break;
            }
        }
    }
}

void mc_conf_help(const mc_conf_t *conf, const char *usage, FILE *out)
{
    if (usage != NULL)
        fprintf(out, "%s\n\n", usage);
    fputs("Options:\n"
          "  -c, --config FILE            load configuration from FILE (INI)\n"
          "      --set SECTION.KEY=VALUE  set one key (repeatable)\n"
          "      --dump-config            print the effective configuration and exit\n"
          "  -h, --help                   print this help and exit\n"
          "  -V, --version                print the version and exit\n"
          "\n"
          "Configuration keys. Later sources win: defaults, the --config file\n"
          "([section] then key = value), environment MC_SECTION_KEY=value,\n"
          "--set section.key=value.\n",
          out);
    for (const conf_section_t *s = conf->sections; s != NULL; s = s->next) {
        fputc('\n', out);
        for (size_t i = 0; i < s->nkeys; i++) {
            fprintf(out, "  %s.%s  ", s->name, s->keys[i].name);
            print_description(out, &s->keys[i]);
            fputs("\n      ", out);
            print_help_text(out, s->keys[i].help);
            fputc('\n', out);
        }
    }
}

/* ---- command line ---------------------------------------------------------------------- */

mc_status_t mc_conf_parse_args(mc_conf_t *conf, int argc, char **argv, char **envp,
                               const char *usage, int *exit_now, char *err, size_t errlen)
{
    const conf_src_t src = {.kind = SRC_ARGS};
    const char *path = NULL, *bad = NULL;
    bool help = false, dump = false;
    mc_status_t st = MC_OK;

    *exit_now = 0;
    /* Pass 1: find the file and the flags, so that the layers can be applied
     * in their fixed order; --help wins over any bad argument. */
    for (int i = 1; i < argc && st == MC_OK; i++) {
        const char *a = argv[i];
        const char *file = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            help = true;
        } else if (strcmp(a, "--dump-config") == 0) {
            dump = true;
        } else if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
            if (i + 1 >= argc)
                st = fail(err, errlen, &src, MC_ERR_CONFIG, "%s needs a FILE argument", a);
            else
                file = argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            file = a + 9;
        } else if (strcmp(a, "--set") == 0) {
            if (i + 1 >= argc)
                st = fail(err, errlen, &src, MC_ERR_CONFIG,
                          "--set needs a section.key=value argument");
            i++;
        } else if (strncmp(a, "--set=", 6) != 0 && bad == NULL) {
            bad = a;
        }
        if (file != NULL && st == MC_OK) {
            if (*file == '\0')
                st = fail(err, errlen, &src, MC_ERR_CONFIG, "empty configuration file name");
            else if (path != NULL)
                st = fail(err, errlen, &src, MC_ERR_CONFIG,
                          "more than one configuration file (%s and %s)", path, file);
            path = file;
        }
    }
    if (help) {
        mc_conf_help(conf, usage, stdout);
        fflush(stdout);
        *exit_now = 1;
        return MC_OK;
    }
    if (st != MC_OK)
        return st;
    if (bad != NULL)
        return fail(err, errlen, &src, MC_ERR_CONFIG, "unknown argument \"%s\" (see --help)", bad);

    if (path != NULL && (st = mc_conf_load_file(conf, path, err, errlen)) != MC_OK)
        return st;
    if ((st = mc_conf_load_env(conf, envp, err, errlen)) != MC_OK)
        return st;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0)
            i++; /* its FILE might look like an option */
        else if (strcmp(a, "--set") == 0)
            st = mc_conf_set(conf, argv[++i], err, errlen);
        else if (strncmp(a, "--set=", 6) == 0)
            st = mc_conf_set(conf, a + 6, err, errlen);
        if (st != MC_OK)
            return st;
    }
    if (dump) {
        mc_conf_dump(conf, stdout);
        fflush(stdout);
        *exit_now = 1;
    }
    return MC_OK;
}

/* ---- the library's environment variables ------------------------------------------------ */

const char *mc_conf_env_str(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? v : NULL;
}

uint64_t mc_conf_env_uint(const char *name, uint64_t def, uint64_t lo, uint64_t hi)
{
    const char *v = mc_conf_env_str(name);
    if (v == NULL)
        return def;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0 || *v == '-' || x < lo || x > hi) {
        MC_WARN(CONF, "%s='%s' is not a number in %" PRIu64 "..%" PRIu64 ": using %" PRIu64, name,
                v, lo, hi, def);
        return def;
    }
    return x;
}
