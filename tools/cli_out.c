/* cli_out.c - mooncake-cli's output: the JSON writer (--json), sizes and
 * escaped bytes for the human tables, msgpack metadata values as text or
 * JSON (see cli_out.h). */
#include "tools/cli_out.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rpc/fields.h"

/* ------------------------------------------------------------ JSON output */

/* A small writer for one document on stdout: keys and values in order,
 * commas and nesting tracked. Strings are bytes: valid UTF-8 passes, control
 * characters and bytes that are not UTF-8 are escaped (\u00XX). */
static struct {
    int depth;
    int after_key;
    unsigned char comma[64];
} J;

static void j_pre(void)
{
    if (J.after_key) {
        J.after_key = 0;
        return;
    }
    if (J.comma[J.depth])
        putchar(',');
    J.comma[J.depth] = 1;
}

/* Length of the valid UTF-8 sequence at p (of n bytes), 0 if none. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    size_t need = p[0] < 0x80             ? 1
                  : (p[0] & 0xe0) == 0xc0 ? 2
                  : (p[0] & 0xf0) == 0xe0 ? 3
                  : (p[0] & 0xf8) == 0xf0 ? 4
                                          : 0;
    if (need == 0 || need > n || (need == 2 && p[0] < 0xc2))
        return 0;
    for (size_t i = 1; i < need; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return need;
}

static void j_string_raw(const void *v, size_t n)
{
    const unsigned char *p = v;
    putchar('"');
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t u = utf8_len(p + i, n - i);
        if (c == '"' || c == '\\') {
            printf("\\%c", c);
            i++;
        } else if (c == '\n') {
            fputs("\\n", stdout);
            i++;
        } else if (c < 0x20 || c == 0x7f || u == 0) {
            printf("\\u%04x", c);
            i++;
        } else {
            fwrite(p + i, 1, u, stdout);
            i += u;
        }
    }
    putchar('"');
}

void j_begin(char c)
{
    j_pre();
    putchar(c);
    J.comma[++J.depth] = 0;
}

void j_end(char c)
{
    putchar(c);
    J.depth--;
    if (J.depth == 0)
        putchar('\n');
}

void j_key(const char *k)
{
    j_pre();
    j_string_raw(k, strlen(k));
    putchar(':');
    J.after_key = 1;
}

void j_str(const void *p, size_t n)
{
    j_pre();
    j_string_raw(p, n);
}

void j_cstr(const char *s)
{
    if (s == NULL) {
        j_pre();
        fputs("null", stdout);
    } else {
        j_str(s, strlen(s));
    }
}

void j_u64(uint64_t v)
{
    j_pre();
    printf("%" PRIu64, v);
}

void j_i64(int64_t v)
{
    j_pre();
    printf("%" PRId64, v);
}

void j_bool(int v)
{
    j_pre();
    fputs(v ? "true" : "false", stdout);
}

void j_double(double v)
{
    j_pre();
    printf("%.17g", v);
}

void jk_cstr(const char *k, const char *v)
{
    j_key(k);
    j_cstr(v);
}

void jk_u64(const char *k, uint64_t v)
{
    j_key(k);
    j_u64(v);
}

void jk_bool(const char *k, int v)
{
    j_key(k);
    j_bool(v);
}

void j_base64(const void *v, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = v;
    j_pre();
    putchar('"');
    for (size_t i = 0; i < n; i += 3) {
        uint32_t x = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            x |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            x |= p[i + 2];
        putchar(tab[(x >> 18) & 63]);
        putchar(tab[(x >> 12) & 63]);
        putchar(i + 1 < n ? tab[(x >> 6) & 63] : '=');
        putchar(i + 2 < n ? tab[x & 63] : '=');
    }
    putchar('"');
}

const char *human(uint64_t v, char *buf, size_t len)
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
void put_escaped(FILE *f, const void *p, size_t len)
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

size_t escaped_len(const char *p, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)p[i];
        n += ch == '\\' ? 2 : ch < 0x20 || ch >= 0x7f ? 4 : 1;
    }
    return n;
}

void print_cell(const char *k, size_t klen, size_t width)
{
    put_escaped(stdout, k, klen);
    for (size_t w = escaped_len(k, klen); w < width; w++)
        putchar(' ');
}

const char *field_name(uint64_t id)
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

void print_meta_value(const uint8_t *v, size_t len)
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

/* A msgpack value as JSON: maps keyed by field ids get the fields' names
 * ("field_N" for unknown ids), bin becomes {"base64": ...}. */
void j_mp_value(mc_mp_reader_t *r, int depth)
{
    uint32_t len;
    const char *s;
    if (depth > 16) {
        mc_mp_skip(r);
        j_cstr(NULL);
        return;
    }
    switch (mc_mp_peek(r)) {
    case MC_MP_UINT:
        j_u64(mc_mp_read_uint(r));
        return;
    case MC_MP_INT:
        j_i64(mc_mp_read_int(r));
        return;
    case MC_MP_BOOL:
        j_bool(mc_mp_read_bool(r));
        return;
    case MC_MP_FLOAT:
        j_double(mc_mp_read_double(r));
        return;
    case MC_MP_STR:
        s = mc_mp_read_str(r, &len);
        j_str(s, len);
        return;
    case MC_MP_BIN:
        s = mc_mp_read_bin(r, &len);
        j_begin('{');
        j_key("base64");
        j_base64(s, len);
        j_end('}');
        return;
    case MC_MP_ARRAY: {
        uint32_t n = mc_mp_read_array(r);
        j_begin('[');
        for (uint32_t i = 0; i < n && r->err == MC_OK; i++)
            j_mp_value(r, depth + 1);
        j_end(']');
        return;
    }
    case MC_MP_MAP: {
        uint32_t n = mc_mp_read_map(r);
        j_begin('{');
        for (uint32_t i = 0; i < n && r->err == MC_OK; i++) {
            char name[32];
            if (mc_mp_peek(r) == MC_MP_UINT) {
                uint64_t id = mc_mp_read_uint(r);
                const char *nm = field_name(id);
                if (nm == NULL)
                    snprintf(name, sizeof(name), "field_%" PRIu64, id);
                j_key(nm != NULL ? nm : name);
            } else if (mc_mp_peek(r) == MC_MP_STR) {
                s = mc_mp_read_str(r, &len);
                j_pre();
                j_string_raw(s, len);
                putchar(':');
                J.after_key = 1;
            } else {
                mc_mp_skip(r);
                j_key("?");
            }
            j_mp_value(r, depth + 1);
        }
        j_end('}');
        return;
    }
    default:
        mc_mp_skip(r);
        j_cstr(NULL);
        return;
    }
}

int j_depth(void)
{
    return J.depth;
}
