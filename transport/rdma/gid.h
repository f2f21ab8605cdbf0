/*
 * gid.h - which GID of a port the RDMA transport uses, and the sysfs facts
 * that choice reads.
 *
 * A RoCE port lists several GIDs (on mlx5: per IP address of the netdev,
 * one RoCE v1 and one RoCE v2 entry, plus the link-local fe80:: pair). Only a
 * RoCE v2 GID with a routable address crosses an IP router; a RoCE v1 or
 * link-local one works inside one L2 segment at best. The choice, by the
 * rules upstream Mooncake (findBestGidIndex), NCCL (ncclIbGetGidIndex) and
 * UCX (uct_ib_device_select_gid) share, best first:
 *
 *   RoCE v2 + IPv4-mapped address   (with a netdev, then without)
 *   RoCE v2 + routable IPv6         (with a netdev, then without)
 *   RoCE v1 + IPv4-mapped, RoCE v1 + routable IPv6 (same order)
 *   link-local fe80:: entries, v2 before v1 (only when nothing routable exists)
 *
 * ties going to the lowest index; null GIDs and slots without a type (holes
 * in the table) are never chosen. An InfiniBand port uses index 0 (its port
 * GID; routing there is by LID). A configured index (MC_GID_INDEX, else
 * NCCL_IB_GID_INDEX, as upstream) overrides the choice but must name a
 * non-empty slot.
 *
 * The table comes from sysfs under a root directory ("/sys" normally; tests
 * point it at a fake tree):
 *   <root>/class/infiniband/<dev>/ports/<port>/gids/<i>             GID text
 *   <root>/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<i>  "IB/RoCE v1", "RoCE v2"
 *   <root>/class/infiniband/<dev>/ports/<port>/gid_attrs/ndevs/<i>  netdev name
 *   <root>/class/infiniband/<dev>/ports/<port>/link_layer           "InfiniBand", "Ethernet"
 * Pure apart from reading those files; any thread.
 */
#ifndef MC_TRANSPORT_RDMA_GID_H
#define MC_TRANSPORT_RDMA_GID_H

#include <stddef.h>
#include <stdint.h>

#include "transport/rdma/verbs.h"

#define RD_GID_TBL_MAX 256 /* the kernel's per-port maximum */
#define RD_GID_STR_MAX 48  /* "ffff:ffff:...:ffff" and NUL */

typedef struct rd_gid_entry {
    uint8_t gid[16];
    uint8_t type;           /* RV_GID_TYPE_*; RV_GID_TYPE_NONE: an empty slot */
    char ndev[RV_NAME_MAX]; /* its net device, "" none */
} rd_gid_entry_t;

/* The GID table of dev's port from sysfs under root: slots 0.. while
 * gids/<i> exists (at most max). Returns the number of slots, 0 when the
 * port has no gids directory. A slot whose type cannot be read (the kernel
 * refuses it for empty slots) gets RV_GID_TYPE_NONE. On an InfiniBand
 * port every non-null slot is RV_GID_TYPE_IB. */
int rd_gid_read_sysfs(const char *root, const char *dev, unsigned port, int link_layer,
                      rd_gid_entry_t *tab, int max);

/* Link layer of dev's port from sysfs: RV_LL_IB, RV_LL_ETH, or RV_LL_UNKNOWN. */
int rd_gid_link_layer_sysfs(const char *root, const char *dev, unsigned port);

/* The index to use on a port with this table and link layer. configured
 * >= 0 is used as is when the slot is non-empty. Returns the index, or -1
 * with why saying what is missing ("no GID", "GID index 5 is empty (the
 * table has 4 slots)"); a configured link-local index while a routable GID
 * exists is used but noted in why (the caller logs it). */
int rd_gid_select(const rd_gid_entry_t *tab, int n, int link_layer, int configured, char *why,
                  size_t whylen);

/* Classification, for selection and validation. */
int rd_gid_is_null(const uint8_t gid[16]);
int rd_gid_is_link_local(const uint8_t gid[16]); /* fe80::/10 */
int rd_gid_is_v4mapped(const uint8_t gid[16]);   /* ::ffff:a.b.c.d */

/* Text form ("::ffff:10.0.0.1", "fe80::202:c9ff:fe00:1") into buf. */
const char *rd_gid_str(const uint8_t gid[16], char *buf, size_t len);
const char *rd_gid_type_str(int type);
const char *rd_link_layer_str(int ll);

#endif /* MC_TRANSPORT_RDMA_GID_H */
