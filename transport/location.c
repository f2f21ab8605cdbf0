/* location.c - see location.h. */
#include "transport/location.h"

#include <numaif.h>
#include <stdint.h>

#include "transport/te.h"
#include <stdio.h>

void te_location_detect(const void *addr, size_t len, char *out, size_t room)
{
    (void)len;
    int gpu = addr != NULL ? te_gpu_of(addr) : -1; /* the CUDA driver's answer */
    if (gpu >= 0) {
        snprintf(out, room, "cuda:%d", gpu);
        return;
    }
    int node = -1;
    /* MPOL_F_NODE | MPOL_F_ADDR: the node the page at addr is on (a page
     * not yet allocated is allocated as by a read first) */
    if (addr == NULL ||
        get_mempolicy(&node, NULL, 0, (void *)(uintptr_t)addr, MPOL_F_NODE | MPOL_F_ADDR) != 0 ||
        node < 0)
        node = 0;
    snprintf(out, room, "cpu:%d", node);
}

void mc_te_memory_location(const void *addr, size_t len, char *out, size_t room)
{
    te_location_detect(addr, len, out, room);
}
