/* regex.c - see regex.h. PCRE2's conventions (negative error numbers,
 * NULL + error code from compile) end here. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "util/regex.h"

#include <pcre2.h>
#include <stdio.h>
#include <string.h>

#include "util/mem.h"

struct mc_regex {
    pcre2_general_context *gc; /* counts what compiling allocates */
    pcre2_compile_context *cc;
    pcre2_match_context *mc;
    pcre2_match_data *md;
    pcre2_code *code;
    size_t mem_used, mem_cap; /* bytes held through gc, and its cap */
    int mem_refused;          /* gc refused an allocation for the cap */
};

void mc_regex_limits_init(mc_regex_limits_t *l)
{
    l->max_len = 1024;
    /* ~100 ns per step on this class of machine: a key that costs the whole
     * budget costs ~3 ms, and any sane pattern needs far less (a few steps
     * per byte of key) */
    l->match_limit = 100000;
    l->depth_limit = 10000;
    l->heap_limit_kib = 4096;
    l->compile_mem = 1u << 20;
}

/* Allocations made through the general context: a size header so that the
 * free knows what it returns to the budget. Compiling runs on one thread;
 * the budget is per pattern. */
typedef struct memhdr {
    size_t size;
    size_t pad; /* keeps what follows 16-byte aligned */
} memhdr_t;

static void *gc_malloc(PCRE2_SIZE size, void *data)
{
    mc_regex_t *re = data;
    if (size > re->mem_cap || re->mem_used > re->mem_cap - size) {
        re->mem_refused = 1;
        return NULL;
    }
    memhdr_t *h = mc_malloc(sizeof(*h) + size);
    if (h == NULL)
        return NULL;
    h->size = size;
    re->mem_used += size;
    return h + 1;
}

static void gc_free(void *p, void *data)
{
    mc_regex_t *re = data;
    if (p == NULL)
        return;
    memhdr_t *h = (memhdr_t *)p - 1;
    re->mem_used -= h->size;
    mc_free(h);
}

static void pcre_msg(int rc, char *buf, size_t n)
{
    PCRE2_UCHAR msg[160];
    if (pcre2_get_error_message(rc, msg, sizeof(msg)) < 0)
        snprintf((char *)msg, sizeof(msg), "PCRE2 error %d", rc);
    snprintf(buf, n, "%s", (const char *)msg);
}

static void set_why(char *why, size_t n, const char *fmt, const char *a, unsigned long long b)
{
    if (why != NULL && n > 0)
        snprintf(why, n, fmt, a, b);
}

void mc_regex_free(mc_regex_t *re)
{
    if (re == NULL)
        return;
    pcre2_code_free(re->code);
    pcre2_match_data_free(re->md);
    pcre2_match_context_free(re->mc);
    pcre2_compile_context_free(re->cc);
    pcre2_general_context_free(re->gc);
    mc_free(re);
}

mc_status_t mc_regex_compile(const char *pattern, size_t len, const mc_regex_limits_t *lim,
                             mc_regex_t **out, char *why, size_t whylen)
{
    mc_regex_limits_t dl;
    if (lim == NULL) {
        mc_regex_limits_init(&dl);
        lim = &dl;
    }
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    if (pattern == NULL) {
        if (why != NULL && whylen > 0)
            snprintf(why, whylen, "no regex given");
        return MC_ERR_INVALID_PARAMS;
    }
    if (len > lim->max_len) {
        if (why != NULL && whylen > 0)
            snprintf(why, whylen, "regex of %zu bytes is longer than the limit (%u bytes)", len,
                     lim->max_len);
        return MC_ERR_INVALID_PARAMS;
    }
    mc_regex_t *re = MC_NEW(mc_regex_t);
    if (re == NULL)
        return MC_ERR_NOMEM;
    re->mem_cap = lim->compile_mem;
    /* the general context itself comes from the default allocator: only
     * what the pattern makes PCRE2 allocate is counted */
    re->gc = pcre2_general_context_create(gc_malloc, gc_free, re);
    re->cc = pcre2_compile_context_create(re->gc);
    re->mc = pcre2_match_context_create(NULL);
    if (re->gc == NULL || re->cc == NULL || re->mc == NULL)
        goto err_nomem;
    pcre2_set_max_pattern_length(re->cc, lim->max_len);
    pcre2_set_parens_nest_limit(re->cc, 64);
    pcre2_set_match_limit(re->mc, lim->match_limit);
    pcre2_set_depth_limit(re->mc, lim->depth_limit);
    pcre2_set_heap_limit(re->mc, lim->heap_limit_kib);

    int err = 0;
    PCRE2_SIZE off = 0;
    /* bytes, never UTF (keys are arbitrary bytes: a (*UTF) pattern would make
     * every non-UTF-8 key an error) */
    re->code = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_NEVER_UTF | PCRE2_NEVER_UCP, &err,
                             &off, re->cc);
    if (re->code == NULL) {
        char msg[160];
        if (err == PCRE2_ERROR_HEAP_FAILED || re->mem_refused) {
            if (why != NULL && whylen > 0)
                snprintf(why, whylen, "regex needs more than %zu bytes to compile", re->mem_cap);
        } else {
            pcre_msg(err, msg, sizeof(msg));
            if (why != NULL && whylen > 0)
                snprintf(why, whylen, "regex error at offset %zu: %s", (size_t)off, msg);
        }
        mc_regex_free(re);
        return MC_ERR_INVALID_PARAMS;
    }
    /* one capture pair is enough for a yes/no answer */
    re->md = pcre2_match_data_create(1, NULL);
    if (re->md == NULL)
        goto err_nomem;
    *out = re;
    return MC_OK;

err_nomem:
    mc_regex_free(re);
    return MC_ERR_NOMEM;
}

mc_status_t mc_regex_match(mc_regex_t *re, const char *subject, size_t len, int *matched, char *why,
                           size_t whylen)
{
    int rc = pcre2_match(re->code, (PCRE2_SPTR)subject, len, 0, 0, re->md, re->mc);
    if (rc >= 0) {
        /* 0: a match whose captures did not fit the one pair: still a match */
        *matched = 1;
        return MC_OK;
    }
    if (rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL) {
        *matched = 0;
        return MC_OK;
    }
    const char *which = NULL;
    switch (rc) {
    case PCRE2_ERROR_MATCHLIMIT:
        which = "match limit (backtracking steps)";
        break;
    case PCRE2_ERROR_DEPTHLIMIT:
        which = "depth limit (nested backtracking)";
        break;
    case PCRE2_ERROR_HEAPLIMIT:
        which = "heap limit";
        break;
    case PCRE2_ERROR_NOMEMORY:
        return MC_ERR_NOMEM;
    default:
        break;
    }
    if (which != NULL) {
        set_why(why, whylen, "regex went over its %s on a key of %llu bytes", which,
                (unsigned long long)len);
        return MC_ERR_LIMIT;
    }
    if (why != NULL && whylen > 0) {
        char msg[160];
        pcre_msg(rc, msg, sizeof(msg));
        snprintf(why, whylen, "regex match failed: %s", msg);
    }
    return MC_ERR_INTERNAL_ERROR;
}
