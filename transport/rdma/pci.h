/*
 * pci.h - PCIe distance between devices (a GPU and a NIC), from sysfs.
 *
 * A device's place in the PCIe tree is the chain of directories of its
 * resolved sysfs path under <root>/devices:
 *
 *   <root>/bus/pci/devices/0000:3d:00.0 ->
 *     ../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/0000:3c:04.0/0000:3d:00.0
 *     host bridge   root port     switch up     switch down   the device
 *
 * Two devices are, closest first (NCCL's PIX/PXB, PHB, NODE, SYS):
 *   RD_PCI_SWITCH  behind the same root port (a PCIe switch or bridge):
 *                  GPUDirect traffic stays below the CPU; fewer bridges
 *                  between them (hops) is closer still
 *   RD_PCI_ROOT    under the same host bridge, different root ports
 *   RD_PCI_NUMA    different host bridges of the same NUMA node
 *   RD_PCI_FAR     another socket, or unknown
 * Reads files only; any thread.
 */
#ifndef MC_TRANSPORT_RDMA_PCI_H
#define MC_TRANSPORT_RDMA_PCI_H

#include <stddef.h>

#define RD_PCI_DEPTH 16
#define RD_PCI_NAME 24

enum rd_pci_dist { RD_PCI_SWITCH = 0, RD_PCI_ROOT = 1, RD_PCI_NUMA = 2, RD_PCI_FAR = 3 };

typedef struct rd_pci_chain {
    unsigned n; /* components, the device last; 0 = unknown */
    char c[RD_PCI_DEPTH][RD_PCI_NAME];
    int numa; /* the device's numa_node, -1 unknown */
} rd_pci_chain_t;

/* The chain of PCI device bdf ("0000:3d:00.0", any case) under root.
 * 0; -1 when the device is not there (out->n = 0, numa -1). */
int rd_pci_chain(const char *root, const char *bdf, rd_pci_chain_t *out);

/* The class of a and b (enum rd_pci_dist); *hops = bridges between them
 * (through their closest common bridge; 0 for RD_PCI_NUMA / RD_PCI_FAR). */
int rd_pci_distance(const rd_pci_chain_t *a, const rd_pci_chain_t *b, unsigned *hops);

const char *rd_pci_dist_str(int d);

#endif /* MC_TRANSPORT_RDMA_PCI_H */
