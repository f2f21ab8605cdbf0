/*
 * topo.c - topology matrix: discovery from device facts, the JSON-like
 * user format, path selection (see topo.h).
 */
#include <stdio.h>
#include <string.h>

#include "transport/rdma/pci.h"
#include "transport/rdma/topo.h"

static void errf(char *err, size_t len, const char *fmt, const char *a, size_t off)
{
    if (err != NULL && len > 0)
        snprintf(err, len, fmt, a, off);
}

static void cpy(char *dst, size_t room, const char *src)
{
    size_t n = strnlen(src, room - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static int in_filter(const char *filter, const char *name)
{
    if (filter == NULL || *filter == '\0')
        return 1;
    size_t n = strlen(name);
    for (const char *p = filter; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && strncmp(p, name, n) == 0)
            return 1;
        if (e == NULL)
            break;
        p = e + 1;
    }
    return 0;
}

static rd_topo_entry_t *add_entry(rd_topo_t *t, const char *loc)
{
    if (t->nents == RD_MAX_LOCS)
        return NULL;
    rd_topo_entry_t *e = &t->ents[t->nents++];
    memset(e, 0, sizeof(*e));
    cpy(e->loc, sizeof(e->loc), loc);
    return e;
}

static void add_wildcard(rd_topo_t *t)
{
    if (rd_topo_find(t, "*") != NULL && strcmp(rd_topo_find(t, "*")->loc, "*") == 0)
        return;
    rd_topo_entry_t *e = add_entry(t, "*");
    if (e == NULL)
        return;
    for (unsigned i = 0; i < t->nnics; i++)
        e->pref[e->npref++] = (uint8_t)i;
}

/* Rank of NIC i for GPU g, lower is closer: the PCIe distance class then
 * the bridges between them when both chains are known, else whether they
 * share a NUMA node (a NIC or GPU of unknown node counting as node 0). */
static unsigned gpu_nic_rank(const rd_pci_chain_t *gc, int gnuma, const rd_pci_chain_t *nc,
                             int nnuma)
{
    if (gc->n > 0 && nc->n > 0) {
        unsigned hops;
        int d = rd_pci_distance(gc, nc, &hops);
        return (unsigned)d * 64u + (hops < 63 ? hops : 63);
    }
    return (unsigned)(gnuma == nnuma ? RD_PCI_NUMA : RD_PCI_FAR) * 64u;
}

mc_status_t rd_topo_discover(rd_topo_t *t, const rv_dev_info_t *devs, int ndevs,
                             unsigned numa_nodes, const rd_gpu_facts_t *gpus, unsigned ngpus,
                             const char *sysfs_root, const char *filter, char *err, size_t errlen)
{
    int numa[RD_MAX_NICS];
    rd_pci_chain_t nic_chain[RD_MAX_NICS]; /* ~6 KiB */
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < ndevs && t->nnics < RD_MAX_NICS; i++) {
        if (!devs[i].port_active || !in_filter(filter, devs[i].name))
            continue;
        cpy(t->nics[t->nnics], RV_NAME_MAX, devs[i].name);
        nic_chain[t->nnics].n = 0;
        if (sysfs_root != NULL && devs[i].pci[0] != '\0')
            rd_pci_chain(sysfs_root, devs[i].pci, &nic_chain[t->nnics]);
        numa[t->nnics++] = devs[i].numa_node < 0 ? 0 : devs[i].numa_node;
    }
    if (t->nnics == 0) {
        errf(err, errlen, "%s",
             ndevs == 0 ? "no RDMA devices"
                        : "no RDMA device with an active port matches the "
                          "device filter",
             0);
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    char loc[RD_LOC_MAX];
    for (unsigned k = 0; k < (numa_nodes ? numa_nodes : 1); k++) {
        snprintf(loc, sizeof(loc), "cpu:%u", k);
        rd_topo_entry_t *e = add_entry(t, loc);
        if (e == NULL)
            break;
        for (unsigned i = 0; i < t->nnics; i++) {
            if (numa[i] == (int)k)
                e->pref[e->npref++] = (uint8_t)i;
            else
                e->sec[e->nsec++] = (uint8_t)i;
        }
    }
    for (unsigned g = 0; g < ngpus; g++) {
        snprintf(loc, sizeof(loc), "cuda:%u", g);
        rd_topo_entry_t *e = add_entry(t, loc);
        if (e == NULL)
            break;
        rd_pci_chain_t gc = {.n = 0, .numa = -1};
        if (sysfs_root != NULL && gpus[g].pci[0] != '\0')
            rd_pci_chain(sysfs_root, gpus[g].pci, &gc);
        int gnuma = gpus[g].numa >= 0 ? gpus[g].numa : gc.numa >= 0 ? gc.numa : 0;
        unsigned rank[RD_MAX_NICS], best = ~0u;
        for (unsigned i = 0; i < t->nnics; i++) {
            rank[i] = gpu_nic_rank(&gc, gnuma, &nic_chain[i], numa[i]);
            if (rank[i] < best)
                best = rank[i];
        }
        /* the closest NICs preferred; the others secondary, closer first
         * (insertion by rank keeps index order among equals) */
        for (unsigned i = 0; i < t->nnics; i++) {
            if (rank[i] == best) {
                e->pref[e->npref++] = (uint8_t)i;
                continue;
            }
            unsigned at = e->nsec;
            while (at > 0 && rank[e->sec[at - 1]] > rank[i]) {
                e->sec[at] = e->sec[at - 1];
                at--;
            }
            e->sec[at] = (uint8_t)i;
            e->nsec++;
        }
    }
    add_wildcard(t);
    return MC_OK;
}

int rd_topo_nic_index(const rd_topo_t *t, const char *name)
{
    for (unsigned i = 0; i < t->nnics; i++)
        if (strcmp(t->nics[i], name) == 0)
            return (int)i;
    return -1;
}

/* ------------------------------------------------------------- parser */

typedef struct pstate {
    const char *s;
    size_t i;
    char *err;
    size_t errlen;
} pstate_t;

static void ws(pstate_t *p)
{
    while (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')
        p->i++;
}

static int expect(pstate_t *p, char c, const char *what)
{
    ws(p);
    if (p->s[p->i] != c) {
        errf(p->err, p->errlen, "nic priority matrix: expected %s at offset %zu", what, p->i);
        return -1;
    }
    p->i++;
    return 0;
}

/* A string without escapes, into out. */
static int pstring(pstate_t *p, char *out, size_t room, const char *what)
{
    if (expect(p, '"', what) != 0)
        return -1;
    size_t start = p->i;
    while (p->s[p->i] != '"' && p->s[p->i] != '\0' && p->s[p->i] != '\\')
        p->i++;
    if (p->s[p->i] != '"') {
        errf(p->err, p->errlen,
             "nic priority matrix: unterminated string (or escape) in %s at offset %zu", what,
             start);
        return -1;
    }
    size_t len = p->i - start;
    if (len == 0 || len >= room) {
        errf(p->err, p->errlen, "nic priority matrix: %s at offset %zu is empty or too long", what,
             start);
        return -1;
    }
    memcpy(out, p->s + start, len);
    out[len] = '\0';
    p->i++;
    return 0;
}

/* ["nic", ...] appended as indices (NICs numbered in first-seen order). */
static int pnic_list(pstate_t *p, rd_topo_t *t, uint8_t *out, uint8_t *n)
{
    if (expect(p, '[', "'[' opening a list of NIC names") != 0)
        return -1;
    ws(p);
    if (p->s[p->i] == ']') {
        p->i++;
        return 0;
    }
    for (;;) {
        char name[RV_NAME_MAX];
        size_t at = p->i;
        if (pstring(p, name, sizeof(name), "a NIC name") != 0)
            return -1;
        int k = rd_topo_nic_index(t, name);
        if (k < 0) {
            if (t->nnics == RD_MAX_NICS) {
                errf(p->err, p->errlen,
                     "nic priority matrix: more than 16 NICs ('%s' at offset "
                     "%zu)",
                     name, at);
                return -1;
            }
            k = (int)t->nnics;
            cpy(t->nics[t->nnics++], RV_NAME_MAX, name);
        }
        for (unsigned j = 0; j < *n; j++) {
            if (out[j] == k) {
                errf(p->err, p->errlen, "nic priority matrix: NIC '%s' listed twice (offset %zu)",
                     name, at);
                return -1;
            }
        }
        out[(*n)++] = (uint8_t)k;
        ws(p);
        if (p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        return expect(p, ']', "',' or ']' in a list of NIC names");
    }
}

mc_status_t rd_topo_parse(rd_topo_t *t, const char *text, char *err, size_t errlen)
{
    pstate_t p = {text ? text : "", 0, err, errlen};
    memset(t, 0, sizeof(*t));
    if (expect(&p, '{', "'{' (the matrix is a JSON object)") != 0)
        return MC_ERR_CONFIG;
    ws(&p);
    if (p.s[p.i] == '}') {
        errf(err, errlen, "nic priority matrix: %s at offset %zu", "no location", p.i);
        return MC_ERR_CONFIG;
    }
    for (;;) {
        char loc[RD_LOC_MAX];
        size_t at = p.i;
        if (pstring(&p, loc, sizeof(loc), "a location (\"cpu:N\", \"cuda:N\" or \"*\")") != 0)
            return MC_ERR_CONFIG;
        if (strncmp(loc, "cpu:", 4) != 0 && strncmp(loc, "cuda:", 5) != 0 &&
            strcmp(loc, "*") != 0) {
            errf(err, errlen,
                 "nic priority matrix: bad location '%s' at offset %zu (expected "
                 "cpu:N, cuda:N or *)",
                 loc, at);
            return MC_ERR_CONFIG;
        }
        for (unsigned j = 0; j < t->nents; j++) {
            if (strcmp(t->ents[j].loc, loc) == 0) {
                errf(err, errlen, "nic priority matrix: location '%s' appears twice (offset %zu)",
                     loc, at);
                return MC_ERR_CONFIG;
            }
        }
        rd_topo_entry_t *e = add_entry(t, loc);
        if (e == NULL) {
            errf(err, errlen, "nic priority matrix: more than 64 locations ('%s' at %zu)", loc, at);
            return MC_ERR_CONFIG;
        }
        if (expect(&p, ':', "':' after a location") != 0 ||
            expect(&p, '[', "'[' opening [[preferred], [secondary]]") != 0 ||
            pnic_list(&p, t, e->pref, &e->npref) != 0 ||
            expect(&p, ',',
                   "',' then the list of secondary NICs (each location takes two "
                   "lists)") != 0 ||
            pnic_list(&p, t, e->sec, &e->nsec) != 0 ||
            expect(&p, ']', "']' closing [[preferred], [secondary]] (exactly two lists)") != 0)
            return MC_ERR_CONFIG;
        for (unsigned a = 0; a < e->npref; a++) {
            for (unsigned b = 0; b < e->nsec; b++) {
                if (e->pref[a] == e->sec[b]) {
                    errf(err, errlen,
                         "nic priority matrix: NIC '%s' is both preferred and "
                         "secondary for location at offset %zu",
                         t->nics[e->pref[a]], at);
                    return MC_ERR_CONFIG;
                }
            }
        }
        if (e->npref + e->nsec == 0) {
            errf(err, errlen, "nic priority matrix: location '%s' at offset %zu lists no NIC", loc,
                 at);
            return MC_ERR_CONFIG;
        }
        ws(&p);
        if (p.s[p.i] == ',') {
            p.i++;
            continue;
        }
        if (expect(&p, '}', "',' or '}' after a location's lists") != 0)
            return MC_ERR_CONFIG;
        break;
    }
    ws(&p);
    if (p.s[p.i] != '\0') {
        errf(err, errlen, "nic priority matrix: %s at offset %zu", "trailing characters", p.i);
        return MC_ERR_CONFIG;
    }
    add_wildcard(t);
    return MC_OK;
}

mc_status_t rd_topo_check_devices(const rd_topo_t *t, const rv_dev_info_t *devs, int ndevs,
                                  char *err, size_t errlen)
{
    for (unsigned i = 0; i < t->nnics; i++) {
        int found = 0;
        for (int k = 0; k < ndevs && !found; k++)
            found = strcmp(devs[k].name, t->nics[i]) == 0;
        if (!found) {
            if (err != NULL && errlen > 0)
                snprintf(err, errlen,
                         "nic priority matrix names device '%s', which does not "
                         "exist here",
                         t->nics[i]);
            return MC_ERR_CONFIG;
        }
    }
    return MC_OK;
}

/* ----------------------------------------------------------- output */

typedef struct out {
    char *buf;
    size_t len, used;
} out_t;

static void put(out_t *o, const char *s)
{
    size_t n = strlen(s);
    if (o->used + n < o->len) {
        memcpy(o->buf + o->used, s, n);
        o->buf[o->used + n] = '\0';
    }
    o->used += n;
}

static void put_list(out_t *o, const rd_topo_t *t, const uint8_t *l, unsigned n)
{
    put(o, "[");
    for (unsigned i = 0; i < n; i++) {
        put(o, i ? ",\"" : "\"");
        put(o, t->nics[l[i]]);
        put(o, "\"");
    }
    put(o, "]");
}

size_t rd_topo_format(const rd_topo_t *t, char *buf, size_t len)
{
    out_t o = {buf, len, 0};
    if (len > 0)
        buf[0] = '\0';
    put(&o, "{");
    for (unsigned i = 0; i < t->nents; i++) {
        const rd_topo_entry_t *e = &t->ents[i];
        put(&o, i ? ", \"" : "\"");
        put(&o, e->loc);
        put(&o, "\": [");
        put_list(&o, t, e->pref, e->npref);
        put(&o, ", ");
        put_list(&o, t, e->sec, e->nsec);
        put(&o, "]");
    }
    put(&o, "}");
    return o.used + 1;
}

const rd_topo_entry_t *rd_topo_find(const rd_topo_t *t, const char *loc)
{
    const rd_topo_entry_t *star = NULL;
    for (unsigned i = 0; i < t->nents; i++) {
        if (strcmp(t->ents[i].loc, loc) == 0)
            return &t->ents[i];
        if (strcmp(t->ents[i].loc, "*") == 0)
            star = &t->ents[i];
    }
    return star;
}

int rd_topo_select(const rd_topo_entry_t *e, unsigned rr, unsigned attempt)
{
    unsigned total = (unsigned)e->npref + e->nsec;
    if (total == 0)
        return -1;
    /* position of the first choice in preferred ++ secondary */
    unsigned first = e->npref > 0 ? rr % e->npref : e->npref + rr % e->nsec;
    unsigned pos = (first + attempt) % total;
    return pos < e->npref ? e->pref[pos] : e->sec[pos - e->npref];
}
