/*
 * sentinel_url.c - see sentinel_url.h.
 */
#include "util/sentinel_url.h"

#include <string.h>

#include "util/conf.h"

int mc_sentinel_url_is(const char *s)
{
    return s != NULL && strncmp(s, MC_SENTINEL_SCHEME, sizeof(MC_SENTINEL_SCHEME) - 1) == 0;
}

static int host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

static int v6_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' ||
           c == '.';
}

/* One "HOST[:PORT]" of the list; *p is left on the ',' or '/' after it. */
static int parse_one(const char **pp, char *host, uint16_t *port, const char **why)
{
    const char *p = *pp, *b, *e;
    if (*p == '[') {
        b = p + 1;
        e = b;
        while (v6_char(*e))
            e++;
        if (*e != ']') {
            *why = "unterminated '[' or a bad character in an IPv6 literal";
            return 0;
        }
        p = e + 1;
    } else {
        b = p;
        e = b;
        while (host_char(*e))
            e++;
        p = e;
    }
    if (e == b) {
        *why = "a sentinel without a host";
        return 0;
    }
    if ((size_t)(e - b) >= MC_SENTINEL_HOST_MAX) {
        *why = "a sentinel host name is too long";
        return 0;
    }
    memcpy(host, b, (size_t)(e - b));
    host[e - b] = '\0';
    *port = MC_SENTINEL_DEFAULT_PORT;
    if (*p == ':') {
        const char *q = ++p;
        while (*q != '\0' && *q != ',' && *q != '/' && *q != '?')
            q++;
        unsigned long v;
        if (!mc_conf_parse_digits(p, q, 65535, &v) || v == 0) {
            *why = "a sentinel port is not a number in 1..65535";
            return 0;
        }
        *port = (uint16_t)v;
        p = q;
    }
    if (*p != ',' && *p != '/') {
        *why = *p == '\0' || *p == '?' ? "no /NAME of the watched primary after the sentinels"
                                       : "unexpected characters after a sentinel address";
        return 0;
    }
    *pp = p;
    return 1;
}

int mc_sentinel_url_parse(const char *s, mc_sentinel_url_t *out, const char **rest,
                          const char **why)
{
    mc_sentinel_url_t tmp; /* *out is written only on success */
    memset(&tmp, 0, sizeof(tmp));
    if (!mc_sentinel_url_is(s)) {
        *why = "expected redis-sentinel://HOST[:PORT][,HOST[:PORT]...]/NAME[/DB]";
        return 0;
    }
    const char *p = s + sizeof(MC_SENTINEL_SCHEME) - 1;
    for (;;) {
        if (tmp.n == MC_SENTINELS_MAX) {
            *why = "more than 8 sentinels";
            return 0;
        }
        if (!parse_one(&p, tmp.s[tmp.n].host, &tmp.s[tmp.n].port, why))
            return 0;
        tmp.n++;
        if (*p == '/')
            break;
        p++; /* ',' */
    }
    const char *b = ++p;
    while (*p != '\0' && *p != '/' && *p != '?')
        p++;
    if (p == b) {
        *why = "no NAME of the watched primary after the sentinels";
        return 0;
    }
    if ((size_t)(p - b) >= sizeof(tmp.name)) {
        *why = "the primary's name is too long";
        return 0;
    }
    for (const char *c = b; c < p; c++)
        if (*c <= ' ' || *c == 0x7f) {
            *why = "the primary's name contains blanks or control characters";
            return 0;
        }
    memcpy(tmp.name, b, (size_t)(p - b));
    tmp.db = -1;
    if (*p == '/') {
        b = ++p;
        while (*p != '\0' && *p != '?')
            p++;
        unsigned long v;
        if (!mc_conf_parse_digits(b, p, 0x7fffffffUL, &v)) {
            *why = "the database is not a decimal number";
            return 0;
        }
        tmp.db = (int)v;
    }
    *out = tmp;
    *rest = p;
    return 1;
}
