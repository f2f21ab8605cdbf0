/*
 * trace_sim.c - trace parsing and the LRU baselines (trace_sim.h).
 *
 * The parser reads exactly what the format needs: one object per line,
 * numbers, arrays of numbers; values of other keys (strings, nested
 * arrays and objects, true/false/null) are skipped. Errors name the line
 * and the field.
 */
#include "perf/trace_sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ id map */

/* Open addressing, trace hash id -> dense index + 1 (0 = empty slot). */
typedef struct idmap {
    uint64_t *key;
    uint32_t *val;
    size_t mask, n;
} idmap_t;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static int idmap_grow(idmap_t *m)
{
    size_t ncap = m->mask ? (m->mask + 1) * 2 : 1024;
    uint64_t *nk = calloc(ncap, sizeof(*nk));
    uint32_t *nv = calloc(ncap, sizeof(*nv));
    if (nk == NULL || nv == NULL) {
        free(nk);
        free(nv);
        return -1;
    }
    for (size_t i = 0; m->mask && i <= m->mask; i++) {
        if (m->val[i] == 0)
            continue;
        size_t j = mix(m->key[i]) & (ncap - 1);
        while (nv[j] != 0)
            j = (j + 1) & (ncap - 1);
        nk[j] = m->key[i];
        nv[j] = m->val[i];
    }
    free(m->key);
    free(m->val);
    m->key = nk;
    m->val = nv;
    m->mask = ncap - 1;
    return 0;
}

/* The dense index of id, assigning the next one (*next) when new; -1 on
 * out of memory. */
static int64_t idmap_get(idmap_t *m, uint64_t id, uint32_t *next)
{
    if ((m->n + 1) * 2 > m->mask + 1 && idmap_grow(m) != 0)
        return -1;
    size_t j = mix(id) & m->mask;
    while (m->val[j] != 0) {
        if (m->key[j] == id)
            return m->val[j] - 1;
        j = (j + 1) & m->mask;
    }
    m->key[j] = id;
    m->val[j] = ++*next;
    m->n++;
    return m->val[j] - 1;
}

static void idmap_free(idmap_t *m)
{
    free(m->key);
    free(m->val);
}

/* ------------------------------------------------------------ parser */

typedef struct parser {
    const char *start, *p, *end; /* the current line */
    const char *name;
    size_t line;
    char *err;
    size_t errlen;
} parser_t;

static int perr(parser_t *ps, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(ps->err, ps->errlen, "%s:%zu: %s", ps->name, ps->line, what);
    return -1;
}

static void skip_ws(parser_t *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r' || *ps->p == '\n'))
        ps->p++;
}

static int expect(parser_t *ps, char c)
{
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != c)
        return perr(ps, "expected '%c' at column %zu", c, (size_t)(ps->p - ps->start) + 1);
    ps->p++;
    return 0;
}

/* A string's contents (escapes kept as they are: keys are plain). */
static int parse_string(parser_t *ps, const char **s, size_t *len)
{
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != '"')
        return perr(ps, "expected a string");
    const char *q = ++ps->p;
    while (ps->p < ps->end && *ps->p != '"') {
        if (*ps->p == '\\' && ps->p + 1 < ps->end)
            ps->p++;
        ps->p++;
    }
    if (ps->p >= ps->end)
        return perr(ps, "unterminated string");
    *s = q;
    *len = (size_t)(ps->p - q);
    ps->p++;
    return 0;
}

/* A JSON number; *is_int: no fraction or exponent. */
static int parse_number(parser_t *ps, const char *field, double *v, int *is_int)
{
    skip_ws(ps);
    const char *q = ps->p;
    int ok_int = 1;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    size_t digits = 0;
    while (ps->p < ps->end && ((*ps->p >= '0' && *ps->p <= '9') || *ps->p == '.' || *ps->p == 'e' ||
                               *ps->p == 'E' || *ps->p == '+' || *ps->p == '-')) {
        if (*ps->p >= '0' && *ps->p <= '9')
            digits++;
        else
            ok_int = 0;
        ps->p++;
    }
    if (digits == 0)
        return perr(ps, "%s: expected a number", field);
    char tmp[64];
    size_t n = (size_t)(ps->p - q);
    if (n >= sizeof(tmp))
        return perr(ps, "%s: number too long", field);
    memcpy(tmp, q, n);
    tmp[n] = '\0';
    char *e;
    errno = 0;
    *v = strtod(tmp, &e);
    if (*e != '\0' || errno != 0)
        return perr(ps, "%s: malformed number '%s'", field, tmp);
    *is_int = ok_int;
    return 0;
}

/* A non-negative integer below `max`. */
static int parse_uint(parser_t *ps, const char *field, uint64_t max, uint64_t *out)
{
    double v;
    int is_int;
    if (parse_number(ps, field, &v, &is_int) != 0)
        return -1;
    if (!is_int || v < 0 || v > (double)max)
        return perr(ps, "%s: expected an integer in [0, %llu], got %g", field,
                    (unsigned long long)max, v);
    *out = (uint64_t)v;
    return 0;
}

/* Skip any value (nesting bounded). */
static int skip_value(parser_t *ps, int depth)
{
    skip_ws(ps);
    if (depth > 32)
        return perr(ps, "values nested too deeply");
    if (ps->p >= ps->end)
        return perr(ps, "expected a value");
    char c = *ps->p;
    if (c == '"') {
        const char *s;
        size_t l;
        return parse_string(ps, &s, &l);
    }
    if (c == '[' || c == '{') {
        char close = c == '[' ? ']' : '}';
        ps->p++;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                const char *s;
                size_t l;
                if (parse_string(ps, &s, &l) != 0 || expect(ps, ':') != 0)
                    return -1;
            }
            if (skip_value(ps, depth + 1) != 0)
                return -1;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            return expect(ps, close);
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (unsigned i = 0; i < 3; i++) {
        size_t l = strlen(words[i]);
        if ((size_t)(ps->end - ps->p) >= l && memcmp(ps->p, words[i], l) == 0) {
            ps->p += l;
            return 0;
        }
    }
    double v;
    int is_int;
    return parse_number(ps, "value", &v, &is_int);
}

/* Growable arrays of the trace under construction. */
typedef struct build {
    trace_t *t;
    size_t req_cap, blk_cap, id_cap;
    idmap_t map;
} build_t;

static int push_block(build_t *b, parser_t *ps, uint64_t id)
{
    trace_t *t = b->t;
    if (t->nblocks == b->blk_cap) {
        size_t ncap = b->blk_cap ? b->blk_cap * 2 : 4096;
        uint32_t *nb = realloc(t->blocks, ncap * sizeof(*nb));
        if (nb == NULL)
            return perr(ps, "out of memory");
        t->blocks = nb;
        b->blk_cap = ncap;
    }
    int64_t d = idmap_get(&b->map, id, &t->nuniq);
    if (d < 0)
        return perr(ps, "out of memory");
    if ((uint32_t)d == t->nuniq - 1 && (size_t)d == b->id_cap) {
        size_t ncap = b->id_cap ? b->id_cap * 2 : 4096;
        uint64_t *ni = realloc(t->ids, ncap * sizeof(*ni));
        if (ni == NULL)
            return perr(ps, "out of memory");
        t->ids = ni;
        b->id_cap = ncap;
    }
    if ((uint32_t)d == t->nuniq - 1)
        t->ids[d] = id;
    t->blocks[t->nblocks++] = (uint32_t)d;
    return 0;
}

static int parse_line(build_t *b, parser_t *ps, uint64_t *last_ts)
{
    trace_t *t = b->t;
    if (t->nreq == TRACE_MAX_REQUESTS)
        return perr(ps, "more than %u requests", TRACE_MAX_REQUESTS);
    if (t->nreq == b->req_cap) {
        size_t ncap = b->req_cap ? b->req_cap * 2 : 1024;
        trace_req_t *nr = realloc(t->req, ncap * sizeof(*nr));
        if (nr == NULL)
            return perr(ps, "out of memory");
        t->req = nr;
        b->req_cap = ncap;
    }
    trace_req_t r = {.first = t->nblocks};
    int have_ts = 0, have_in = 0, have_out = 0, have_ids = 0;
    if (expect(ps, '{') != 0)
        return -1;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}')
        return perr(ps, "empty object");
    for (;;) {
        const char *k;
        size_t kl;
        if (parse_string(ps, &k, &kl) != 0 || expect(ps, ':') != 0)
            return -1;
#define KEY_IS(s) (kl == sizeof(s) - 1 && memcmp(k, s, kl) == 0)
        if (KEY_IS("timestamp")) {
            double v;
            int is_int;
            if (parse_number(ps, "timestamp", &v, &is_int) != 0)
                return -1;
            if (!(v >= 0 && v < 1e15))
                return perr(ps, "timestamp: expected milliseconds >= 0, got %g", v);
            r.ts_us = (uint64_t)(v * 1000.0 + 0.5);
            have_ts = 1;
        } else if (KEY_IS("input_length") || KEY_IS("output_length")) {
            uint64_t v;
            int in = KEY_IS("input_length");
            if (parse_uint(ps, in ? "input_length" : "output_length", UINT32_MAX, &v) != 0)
                return -1;
            if (in) {
                r.input_len = (uint32_t)v;
                have_in = 1;
            } else {
                r.output_len = (uint32_t)v;
                have_out = 1;
            }
        } else if (KEY_IS("hash_ids")) {
            if (have_ids)
                return perr(ps, "hash_ids given twice");
            have_ids = 1;
            if (expect(ps, '[') != 0)
                return -1;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ']')
                return perr(ps, "hash_ids is empty");
            for (;;) {
                uint64_t id;
                if (parse_uint(ps, "hash_ids", UINT64_MAX >> 11, &id) != 0)
                    return -1;
                if (t->nblocks - r.first == TRACE_MAX_BLOCKS)
                    return perr(ps, "hash_ids: more than %u blocks", TRACE_MAX_BLOCKS);
                if (push_block(b, ps, id) != 0)
                    return -1;
                skip_ws(ps);
                if (ps->p < ps->end && *ps->p == ',') {
                    ps->p++;
                    continue;
                }
                if (expect(ps, ']') != 0)
                    return -1;
                break;
            }
        } else if (skip_value(ps, 0) != 0) {
            return -1;
        }
#undef KEY_IS
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (expect(ps, '}') != 0)
            return -1;
        break;
    }
    skip_ws(ps);
    if (ps->p != ps->end)
        return perr(ps, "text after the object");
    if (!have_ts || !have_in || !have_ids)
        return perr(ps, "missing %s",
                    !have_ts   ? "timestamp"
                    : !have_in ? "input_length"
                               : "hash_ids");
    (void)have_out; /* optional: replay does not decode */
    if (r.ts_us < *last_ts)
        return perr(ps, "timestamp goes backwards (%.3f ms after %.3f ms)", r.ts_us / 1000.0,
                    *last_ts / 1000.0);
    r.n = (uint32_t)(t->nblocks - r.first);
    *last_ts = r.ts_us;
    if (r.n > t->max_blocks)
        t->max_blocks = r.n;
    t->input_tokens += r.input_len;
    t->req[t->nreq++] = r;
    return 0;
}

void trace_free(trace_t *t)
{
    if (t == NULL)
        return;
    free(t->req);
    free(t->blocks);
    free(t->ids);
    memset(t, 0, sizeof(*t));
}

int trace_parse(const char *text, size_t len, const char *name, trace_t *t, char *err,
                size_t errlen)
{
    memset(t, 0, sizeof(*t));
    build_t b = {.t = t};
    parser_t ps = {.name = name, .err = err, .errlen = errlen};
    uint64_t last_ts = 0;
    const char *p = text, *end = text + len;
    int rc = 0;
    while (p < end && rc == 0) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        ps.line++;
        ps.start = ps.p = p;
        ps.end = le;
        skip_ws(&ps);
        if (ps.p < ps.end) /* blank lines are allowed */
            rc = parse_line(&b, &ps, &last_ts);
        p = nl ? nl + 1 : end;
    }
    if (rc == 0 && t->nreq == 0) {
        snprintf(err, errlen, "%s: no requests", name);
        rc = -1;
    }
    idmap_free(&b.map);
    if (rc != 0)
        trace_free(t);
    return rc;
}

int trace_load(const char *path, trace_t *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    /* read to the end: a file, or a pipe such as <(gzip -dc FILE.gz) */
    char *text = NULL;
    size_t got = 0, cap = 0;
    for (;;) {
        if (got == cap) {
            size_t ncap = cap ? cap * 2 : 1u << 20;
            char *nt = realloc(text, ncap);
            if (nt == NULL) {
                snprintf(err, errlen, "%s: out of memory", path);
                goto err_free;
            }
            text = nt;
            cap = ncap;
        }
        ssize_t r = read(fd, text + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: read: %s", path, strerror(errno));
            goto err_free;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    int rc = trace_parse(text, got, path, t, err, errlen);
    free(text);
    return rc;

err_free:
    free(text);
    close(fd);
    return -1;
}

uint64_t trace_tokens_saved(const trace_req_t *r, uint32_t hit)
{
    uint64_t tok = (uint64_t)hit * TRACE_BLOCK_TOKENS;
    return tok < r->input_len ? tok : r->input_len;
}

/* ------------------------------------------------------------ LRU */

/* A doubly linked list over arrays indexed by block id: head = most recent.
 * NIL marks the ends; prev == OUT marks a block not in the cache. */
#define NIL UINT32_MAX
#define OUT (UINT32_MAX - 1)

struct lru {
    uint32_t cap, n, nuniq;
    uint32_t head, tail;
    uint32_t *prev, *next;
};

lru_t *lru_create(uint32_t capacity, uint32_t nuniq)
{
    lru_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->cap = capacity;
    c->nuniq = nuniq;
    c->head = c->tail = NIL;
    c->prev = malloc((size_t)(nuniq ? nuniq : 1) * sizeof(uint32_t));
    c->next = malloc((size_t)(nuniq ? nuniq : 1) * sizeof(uint32_t));
    if (c->prev == NULL || c->next == NULL) {
        lru_destroy(c);
        return NULL;
    }
    for (uint32_t i = 0; i < nuniq; i++)
        c->prev[i] = OUT;
    return c;
}

void lru_destroy(lru_t *c)
{
    if (c == NULL)
        return;
    free(c->prev);
    free(c->next);
    free(c);
}

int lru_contains(const lru_t *c, uint32_t id)
{
    return id < c->nuniq && c->prev[id] != OUT;
}

uint32_t lru_size(const lru_t *c)
{
    return c->n;
}

uint32_t lru_order(const lru_t *c, uint32_t *out, uint32_t room)
{
    uint32_t k = 0;
    for (uint32_t i = c->head; i != NIL && k < room; i = c->next[i])
        out[k++] = i;
    return k;
}

static void unlink_id(lru_t *c, uint32_t id)
{
    uint32_t p = c->prev[id], n = c->next[id];
    if (p != NIL)
        c->next[p] = n;
    else
        c->head = n;
    if (n != NIL)
        c->prev[n] = p;
    else
        c->tail = p;
    c->prev[id] = OUT;
    c->n--;
}

static void push_front(lru_t *c, uint32_t id)
{
    c->prev[id] = NIL;
    c->next[id] = c->head;
    if (c->head != NIL)
        c->prev[c->head] = id;
    else
        c->tail = id;
    c->head = id;
    c->n++;
}

uint32_t lru_run(const lru_t *c, const uint32_t *blocks, uint32_t n)
{
    uint32_t hit = 0;
    while (hit < n && lru_contains(c, blocks[hit]))
        hit++;
    return hit;
}

uint32_t lru_request(lru_t *c, const uint32_t *blocks, uint32_t n)
{
    uint32_t hit = lru_run(c, blocks, n);
    for (uint32_t i = 0; i < hit; i++) {
        unlink_id(c, blocks[i]);
        push_front(c, blocks[i]);
    }
    if (c->cap == 0)
        return hit;
    for (uint32_t i = hit; i < n; i++) {
        if (lru_contains(c, blocks[i]))
            continue;
        if (c->n == c->cap)
            unlink_id(c, c->tail);
        push_front(c, blocks[i]);
    }
    return hit;
}

/* ------------------------------------------------------------ baselines */

int trace_baselines(const trace_t *t, unsigned workers, uint32_t capacity, trace_baseline_t *out)
{
    if (workers == 0 || capacity == 0)
        return -1;
    memset(out, 0, sizeof(*out));
    uint64_t gcap = (uint64_t)workers * capacity;
    lru_t **loc = calloc(2 * (size_t)workers, sizeof(*loc)), **aff;
    lru_t *g = lru_create(gcap > UINT32_MAX ? UINT32_MAX : (uint32_t)gcap, t->nuniq);
    lru_t *inf = lru_create(t->nuniq, t->nuniq); /* never full: unbounded */
    int rc = -1;
    if (loc == NULL || g == NULL || inf == NULL)
        goto out;
    for (unsigned w = 0; w < 2 * workers; w++)
        if ((loc[w] = lru_create(capacity, t->nuniq)) == NULL)
            goto out;
    aff = loc + workers;
    for (size_t i = 0; i < t->nreq; i++) {
        const trace_req_t *r = &t->req[i];
        const uint32_t *b = t->blocks + r->first;
        uint32_t hl = lru_request(loc[i % workers], b, r->n);
        unsigned to = (unsigned)(i % workers);
        uint32_t best = AFFINITY_MIN_RUN;
        for (unsigned w = 0; w < workers; w++) {
            uint32_t run = lru_run(aff[w], b, r->n);
            if (run > best) {
                best = run;
                to = w;
            }
        }
        uint32_t ha = lru_request(aff[to], b, r->n);
        uint32_t hg = lru_request(g, b, r->n);
        uint32_t hi = lru_request(inf, b, r->n);
        out->blocks += r->n;
        out->local_hits += hl;
        out->affinity_hits += ha;
        out->global_hits += hg;
        out->inf_hits += hi;
        out->local_tokens += trace_tokens_saved(r, hl);
        out->affinity_tokens += trace_tokens_saved(r, ha);
        out->global_tokens += trace_tokens_saved(r, hg);
        out->inf_tokens += trace_tokens_saved(r, hi);
    }
    rc = 0;
out:
    if (loc != NULL)
        for (unsigned w = 0; w < 2 * workers; w++)
            lru_destroy(loc[w]);
    free(loc);
    lru_destroy(g);
    lru_destroy(inf);
    return rc;
}
