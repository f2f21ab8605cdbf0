/*
 * topo.h - the topology matrix of the RDMA transport: for each memory
 * location ("cpu:N", "cuda:N", "*"), the NICs to use, preferred first.
 *
 *   {"cpu:0": [["mlx5_0","mlx5_1"], ["mlx5_2","mlx5_3"]], "cuda:0": [["mlx5_0"], []]}
 *
 * (upstream's nic_priority_matrix format: a JSON object whose values are
 * two arrays of NIC names, preferred then secondary). NIC indices are given
 * in first-seen order and are the indices of the per-NIC keys published in
 * the segment descriptor. Pure: parsing, formatting and path selection do no
 * I/O; rd_topo_discover builds a matrix from device facts it is handed.
 */
#ifndef MC_TRANSPORT_RDMA_TOPO_H
#define MC_TRANSPORT_RDMA_TOPO_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "transport/rdma/verbs.h"

#define RD_MAX_NICS 16
#define RD_MAX_LOCS 64
#define RD_LOC_MAX 24

typedef struct rd_topo_entry {
    char loc[RD_LOC_MAX];
    uint8_t pref[RD_MAX_NICS], npref;
    uint8_t sec[RD_MAX_NICS], nsec;
} rd_topo_entry_t;

typedef struct rd_topo {
    unsigned nnics;
    char nics[RD_MAX_NICS][RV_NAME_MAX];
    unsigned nents;
    rd_topo_entry_t ents[RD_MAX_LOCS];
} rd_topo_t;

/* A GPU as discovery sees it. */
typedef struct rd_gpu_facts {
    int numa;              /* -1 unknown (then read from sysfs) */
    char pci[RV_NAME_MAX]; /* PCI bus id, "" unknown */
} rd_gpu_facts_t;

/* From discovered devices: only those whose port is active (and, when
 * filter is a non-empty comma list, named in it); for each NUMA node N in
 * 0..numa_nodes-1 an entry "cpu:N" preferring the NICs on node N (a NIC of
 * unknown node counts as node 0) with all others secondary; for each GPU
 * g in 0..ngpus-1 an entry "cuda:g" preferring the NICs closest to it on
 * the PCIe tree under sysfs_root (transport/rdma/pci.h: same switch, then
 * same root complex, then same NUMA node, fewer bridges first), the others
 * secondary, closer first; without PCI facts (sysfs_root NULL, a bus id
 * unknown) the NICs of the GPU's NUMA node; and "*" with every NIC
 * preferred. MC_ERR_DEVICE_NOT_FOUND when no device is usable (err says
 * why). Reads sysfs only under sysfs_root. */
mc_status_t rd_topo_discover(rd_topo_t *t, const rv_dev_info_t *devs, int ndevs,
                             unsigned numa_nodes, const rd_gpu_facts_t *gpus, unsigned ngpus,
                             const char *sysfs_root, const char *filter, char *err, size_t errlen);

/* Parse a user matrix; "*" is added (every NIC preferred) when absent.
 * MC_ERR_CONFIG with err naming what is wrong and where. */
mc_status_t rd_topo_parse(rd_topo_t *t, const char *text, char *err, size_t errlen);

/* Every NIC named by t is in devs[0..ndevs) (MC_ERR_CONFIG otherwise). */
mc_status_t rd_topo_check_devices(const rd_topo_t *t, const rv_dev_info_t *devs, int ndevs,
                                  char *err, size_t errlen);

/* JSON text of the matrix, NUL-terminated; returns the length it needs. */
size_t rd_topo_format(const rd_topo_t *t, char *buf, size_t len);

/* The entry of loc, else "*", else NULL. */
const rd_topo_entry_t *rd_topo_find(const rd_topo_t *t, const char *loc);

int rd_topo_nic_index(const rd_topo_t *t, const char *name);

/* Path selection. Attempt 0 takes preferred NIC rr % npref (secondary ones
 * when none is preferred); attempt k > 0 walks the list preferred ++
 * secondary k steps on from that first choice, wrapping, so successive
 * retries try every NIC, the preferred ones first. -1 when the entry has no
 * NIC. */
int rd_topo_select(const rd_topo_entry_t *e, unsigned rr, unsigned attempt);

#endif /* MC_TRANSPORT_RDMA_TOPO_H */
