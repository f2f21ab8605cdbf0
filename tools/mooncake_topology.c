/*
 * mooncake-topology - print the RDMA topology matrix this machine would use:
 * the devices found (port state, PCI bus id, NUMA node) and, for each memory
 * location, the preferred and secondary NICs (the JSON a peer sees in the
 * segment descriptor).
 *
 *   mooncake-topology [--emulated N] [--device LIST] [--nic_priority_matrix JSON]
 *
 * --emulated N uses N emulated NICs (tests and demos only; also
 * MC_RDMA_EMULATED=N). --device keeps only the named devices (comma list).
 * --nic_priority_matrix checks and prints a user matrix instead of the
 * discovered one. Exit status 0; 1 when no device is usable or the matrix is
 * malformed (the reason on stderr); 2 on bad usage.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mooncake/version.h"
#include "reactor/reactor.h"
#include "transport/cuda.h"
#include "transport/rdma/gid.h"
#include "transport/rdma/pci.h"
#include "transport/rdma/qp_attr.h"
#include "transport/rdma/topo.h"
#include "transport/rdma/verbs.h"
#include "util/log.h"

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"emulated", required_argument, NULL, 'e'},
        {"device", required_argument, NULL, 'd'},
        {"nic_priority_matrix", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *filter = NULL, *matrix = NULL;
    long emulated = -1;
    const char *env = getenv("MC_RDMA_EMULATED");
    if (env != NULL && *env != '\0')
        emulated = atol(env);
    int opt;
    while ((opt = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
        char *end = NULL;
        switch (opt) {
        case 'e':
            emulated = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || emulated < 1 || emulated > RV_MAX_DEVICES) {
                fprintf(stderr, "mooncake-topology: --emulated wants 1..%d, not '%s'\n",
                        RV_MAX_DEVICES, optarg);
                return 2;
            }
            break;
        case 'd':
            filter = optarg;
            break;
        case 'm':
            matrix = optarg;
            break;
        case 'V':
            printf("mooncake-topology %s\n", mc_version());
            return 0;
        default:
            fprintf(opt == 'h' ? stdout : stderr,
                    "usage: mooncake-topology [--emulated N] [--device LIST] "
                    "[--nic_priority_matrix JSON]\n"
                    "Print the RDMA devices and the NIC priority matrix the transfer engine "
                    "would use.\n"
                    "  --emulated N                 N emulated NICs (tests and demos)\n"
                    "  --device LIST                only these devices (comma list)\n"
                    "  --nic_priority_matrix JSON   this matrix instead of the discovered one\n"
                    "  -h, --help                   this text\n"
                    "  -V, --version                print the version\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    mc_log_set_spec("error", NULL, 0);
    const mc_rdma_verbs_ops_t *v = &rv_real_ops;
    if (emulated > 0) {
        rv_emu_opts_t o;
        rv_emu_opts_get(&o);
        o.ndevices = (unsigned)emulated;
        rv_emu_configure(&o);
        v = &rv_emu_ops;
    }
    rv_dev_info_t devs[RV_MAX_DEVICES];
    rv_port_opts_t po; /* MC_IB_PORT, MC_GID_INDEX, MC_SYSFS_ROOT */
    rv_port_opts_init(&po);
    const char *root = po.sysfs_root;
    int n = v->get_devices(&po, devs, RV_MAX_DEVICES);
    printf("provider: %s%s\n", v->name,
           v == &rv_emu_ops ? " (EMULATED: for tests and demos only)" : "");
    printf("devices: %d\n", n);
    for (int i = 0; i < n; i++) {
        const rv_dev_info_t *d = &devs[i];
        char gs[RD_GID_STR_MAX], why[256];
        printf("  %-12s port %u %-6s %-10s pci %-14s numa %d mtu %u lid %u\n", d->name, d->port,
               d->port_active ? "ACTIVE" : "DOWN", rd_link_layer_str(d->link_layer),
               d->pci[0] ? d->pci : "-", d->numa_node, d->active_mtu, d->lid);
        if (d->gid_index >= 0)
            printf("  %-12s gid index %d of %u: %s (%s)%s%s\n", "", d->gid_index, d->gid_tbl_len,
                   rd_gid_is_null(d->gid) ? "address given at open" /* emulated */
                                          : rd_gid_str(d->gid, gs, sizeof(gs)),
                   rd_gid_type_str(d->gid_type), d->gid_why[0] ? ": " : "", d->gid_why);
        else
            printf("  %-12s gid: none (%s)\n", "", d->gid_why);
        if (rd_dev_validate(d, why, sizeof(why)) != MC_OK)
            printf("  %-12s NOT USABLE: %s\n", "", why);
    }
    unsigned nodes = mc_numa_node_count();
    printf("numa nodes: %u\n", nodes);
    rd_topo_t t;
    char err[256] = "";
    const char *why = "";
    int ngpus = te_cuda_gpus(&why);
    rd_gpu_facts_t gpus[32];
    if (ngpus > 32)
        ngpus = 32;
    if (ngpus > 0) {
        char mod[256];
        int peermem = 0;
        static const char *const mods[] = {"nvidia_peermem", "nv_peer_mem"};
        for (size_t k = 0; k < 2 && !peermem; k++) {
            snprintf(mod, sizeof(mod), "%s/module/%s", root, mods[k]);
            peermem = access(mod, F_OK) == 0;
        }
        printf("gpus: %d (%s); nvidia-peermem %s\n", ngpus, te_cuda_library(),
               peermem ? "loaded" : "not loaded");
    } else {
        printf("gpus: 0 (%s)\n", why);
    }
    for (int i = 0; i < ngpus; i++) {
        gpus[i].numa = -1;
        if (te_cuda_pci_bus_id(i, gpus[i].pci, sizeof(gpus[i].pci)) != MC_OK)
            gpus[i].pci[0] = '\0';
        rd_pci_chain_t gc;
        int found = gpus[i].pci[0] && rd_pci_chain(root, gpus[i].pci, &gc) == 0;
        printf("  cuda:%-3d pci %-14s numa %d dma-buf %s\n", i, gpus[i].pci[0] ? gpus[i].pci : "-",
               found ? gc.numa : -1, te_cuda_dmabuf_supported(i) ? "yes" : "no");
        for (int k = 0; k < n && found; k++) {
            rd_pci_chain_t nc;
            unsigned hops;
            if (devs[k].pci[0] && rd_pci_chain(root, devs[k].pci, &nc) == 0)
                printf("    %-12s %s, %u bridge(s)\n", devs[k].name,
                       rd_pci_dist_str(rd_pci_distance(&gc, &nc, &hops)), hops);
        }
    }
    mc_status_t st = matrix ? rd_topo_parse(&t, matrix, err, sizeof(err))
                            : rd_topo_discover(&t, devs, n, nodes, gpus, (unsigned)ngpus, root,
                                               filter, err, sizeof(err));
    if (st == MC_OK && matrix != NULL)
        st = rd_topo_check_devices(&t, devs, n, err, sizeof(err));
    if (st != MC_OK) {
        fprintf(stderr, "mooncake-topology: %s\n", err);
        return 1;
    }
    char buf[8192];
    rd_topo_format(&t, buf, sizeof(buf));
    printf("matrix: %s\n", buf);
    return 0;
}
