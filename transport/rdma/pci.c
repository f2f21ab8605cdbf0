/*
 * pci.c - PCIe chains and distances from sysfs (pci.h).
 */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/rdma/pci.h"

int rd_pci_chain(const char *root, const char *bdf, rd_pci_chain_t *out)
{
    char name[RD_PCI_NAME], path[PATH_MAX], real[PATH_MAX], rroot[PATH_MAX];
    memset(out, 0, sizeof(*out));
    out->numa = -1;
    size_t k = 0;
    for (; bdf[k] != '\0' && k + 1 < sizeof(name); k++)
        name[k] = (char)tolower((unsigned char)bdf[k]);
    name[k] = '\0';
    if (k == 0 || strchr(name, '/') != NULL)
        return -1;
    snprintf(path, sizeof(path), "%s/bus/pci/devices/%s", root, name);
    if (realpath(path, real) == NULL || realpath(root, rroot) == NULL)
        return -1;
    /* components after <root>/devices/ */
    size_t rl = strlen(rroot);
    const char *p = real;
    if (strncmp(real, rroot, rl) == 0 && strncmp(real + rl, "/devices/", 9) == 0)
        p = real + rl + 9;
    else if ((p = strstr(real, "/devices/")) != NULL)
        p += 9;
    else
        return -1;
    while (*p != '\0' && out->n < RD_PCI_DEPTH) {
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l > 0 && l < RD_PCI_NAME) {
            memcpy(out->c[out->n], p, l);
            out->c[out->n][l] = '\0';
            out->n++;
        }
        if (e == NULL)
            break;
        p = e + 1;
    }
    snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", root, name);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%d", &out->numa) != 1)
            out->numa = -1;
        fclose(f);
    }
    return out->n > 0 ? 0 : -1;
}

int rd_pci_distance(const rd_pci_chain_t *a, const rd_pci_chain_t *b, unsigned *hops)
{
    *hops = 0;
    if (a->n == 0 || b->n == 0)
        return a->numa >= 0 && a->numa == b->numa ? RD_PCI_NUMA : RD_PCI_FAR;
    /* common ancestors (each chain without its device) */
    unsigned la = a->n - 1, lb = b->n - 1, common = 0;
    while (common < la && common < lb && strcmp(a->c[common], b->c[common]) == 0)
        common++;
    if (common == 0)
        return a->numa >= 0 && a->numa == b->numa ? RD_PCI_NUMA : RD_PCI_FAR;
    *hops = (la - common) + (lb - common);
    /* [0] is the host bridge, [1] its root port */
    return common >= 2 ? RD_PCI_SWITCH : RD_PCI_ROOT;
}

const char *rd_pci_dist_str(int d)
{
    switch (d) {
    case RD_PCI_SWITCH:
        return "same PCIe switch";
    case RD_PCI_ROOT:
        return "same root complex";
    case RD_PCI_NUMA:
        return "same NUMA node";
    default:
        return "remote";
    }
}
