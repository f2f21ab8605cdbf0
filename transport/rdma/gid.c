/*
 * gid.c - GID table from sysfs and the choice of the GID index (gid.h).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "transport/rdma/gid.h"

/* First line of a file, without the newline; -1 when it cannot be read
 * (missing, or the kernel refuses the read, as it does for the type of an
 * empty GID slot). */
static int read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    if (!ok)
        return -1;
    buf[strcspn(buf, "\r\n")] = '\0';
    return 0;
}

int rd_gid_link_layer_sysfs(const char *root, const char *dev, unsigned port)
{
    char path[512], v[64];
    snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%u/link_layer", root, dev, port);
    if (read_line(path, v, sizeof(v)) != 0)
        return RV_LL_UNKNOWN;
    if (strcmp(v, "InfiniBand") == 0)
        return RV_LL_IB;
    if (strcmp(v, "Ethernet") == 0)
        return RV_LL_ETH;
    return RV_LL_UNKNOWN;
}

int rd_gid_read_sysfs(const char *root, const char *dev, unsigned port, int link_layer,
                      rd_gid_entry_t *tab, int max)
{
    char base[384], path[512], v[128];
    snprintf(base, sizeof(base), "%s/class/infiniband/%s/ports/%u", root, dev, port);
    int n = 0;
    for (; n < max; n++) {
        rd_gid_entry_t *e = &tab[n];
        memset(e, 0, sizeof(*e));
        snprintf(path, sizeof(path), "%s/gids/%d", base, n);
        if (read_line(path, v, sizeof(v)) != 0)
            break; /* past the table */
        struct in6_addr a;
        if (inet_pton(AF_INET6, v, &a) != 1)
            continue; /* unreadable: an empty slot */
        memcpy(e->gid, a.s6_addr, 16);
        if (rd_gid_is_null(e->gid))
            continue;
        snprintf(path, sizeof(path), "%s/gid_attrs/types/%d", base, n);
        if (read_line(path, v, sizeof(v)) == 0) {
            if (strcmp(v, "RoCE v2") == 0)
                e->type = RV_GID_TYPE_ROCE_V2;
            else if (strcmp(v, "IB/RoCE v1") == 0)
                e->type = link_layer == RV_LL_IB ? RV_GID_TYPE_IB : RV_GID_TYPE_ROCE_V1;
        } else if (link_layer == RV_LL_IB) {
            e->type = RV_GID_TYPE_IB; /* old kernels: no gid_attrs on IB */
        }
        snprintf(path, sizeof(path), "%s/gid_attrs/ndevs/%d", base, n);
        if (read_line(path, v, sizeof(v)) == 0)
            snprintf(e->ndev, sizeof(e->ndev), "%.*s", (int)sizeof(e->ndev) - 1, v);
    }
    return n;
}

int rd_gid_is_null(const uint8_t gid[16])
{
    static const uint8_t zero[16];
    return memcmp(gid, zero, 16) == 0;
}

int rd_gid_is_link_local(const uint8_t gid[16])
{
    return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80;
}

int rd_gid_is_v4mapped(const uint8_t gid[16])
{
    static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(gid, pfx, 12) == 0;
}

/* Rank of a RoCE entry, lower is better; -1 never usable. */
static int roce_rank(const rd_gid_entry_t *e)
{
    if (rd_gid_is_null(e->gid) ||
        (e->type != RV_GID_TYPE_ROCE_V2 && e->type != RV_GID_TYPE_ROCE_V1))
        return -1;
    int v1 = e->type == RV_GID_TYPE_ROCE_V1;
    int no_ndev = e->ndev[0] == '\0';
    if (rd_gid_is_link_local(e->gid))
        return 8 + v1 * 2 + no_ndev;
    int v6 = !rd_gid_is_v4mapped(e->gid);
    return v1 * 4 + v6 * 2 + no_ndev;
}

static void say(char *why, size_t len, const char *fmt, int a, int b)
{
    if (why != NULL && len > 0)
        snprintf(why, len, fmt, a, b);
}

int rd_gid_select(const rd_gid_entry_t *tab, int n, int link_layer, int configured, char *why,
                  size_t whylen)
{
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    int best = -1, best_rank = 1 << 30;
    for (int i = 0; i < n; i++) {
        int r;
        if (link_layer == RV_LL_IB) /* every GID of an IB port works: the first */
            r = tab[i].type != RV_GID_TYPE_NONE && !rd_gid_is_null(tab[i].gid) ? 0 : -1;
        else
            r = roce_rank(&tab[i]);
        if (r >= 0 && r < best_rank) {
            best = i;
            best_rank = r;
        }
    }
    if (configured >= 0) {
        if (configured >= n || rd_gid_is_null(tab[configured].gid)) {
            say(why, whylen, "configured GID index %d is empty (the table has %d slots)",
                configured, n);
            return -1;
        }
        if (link_layer != RV_LL_IB && rd_gid_is_link_local(tab[configured].gid) && best >= 0 &&
            !rd_gid_is_link_local(tab[best].gid))
            say(why, whylen, "configured GID index %d is link-local although index %d is routable",
                configured, best);
        return configured;
    }
    if (best < 0 && why != NULL && whylen > 0)
        snprintf(why, whylen, "no usable GID (%d slots, none with a %s)", n,
                 link_layer == RV_LL_IB ? "non-null GID" : "RoCE type and a non-null address");
    return best;
}

const char *rd_gid_str(const uint8_t gid[16], char *buf, size_t len)
{
    if (inet_ntop(AF_INET6, gid, buf, (socklen_t)len) == NULL && len > 0)
        buf[0] = '\0';
    return buf;
}

const char *rd_gid_type_str(int type)
{
    switch (type) {
    case RV_GID_TYPE_IB:
        return "IB";
    case RV_GID_TYPE_ROCE_V1:
        return "RoCE v1";
    case RV_GID_TYPE_ROCE_V2:
        return "RoCE v2";
    default:
        return "none";
    }
}

const char *rd_link_layer_str(int ll)
{
    switch (ll) {
    case RV_LL_IB:
        return "InfiniBand";
    case RV_LL_ETH:
        return "Ethernet";
    default:
        return "unknown";
    }
}
