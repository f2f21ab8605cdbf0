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

#include "reactor/reactor.h"
#include "transport/cuda.h"
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
        {NULL, 0, NULL, 0},
    };
    const char *filter = NULL, *matrix = NULL;
    long emulated = -1;
    const char *env = getenv("MC_RDMA_EMULATED");
    if (env != NULL && *env != '\0')
        emulated = atol(env);
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
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
        default:
            fprintf(stderr, "usage: mooncake-topology [--emulated N] [--device LIST] "
                            "[--nic_priority_matrix JSON]\n");
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
    rv_port_opts_t po;
    rv_port_opts_init(&po);
    int n = v->get_devices(&po, devs, RV_MAX_DEVICES);
    printf("provider: %s%s\n", v->name,
           v == &rv_emu_ops ? " (EMULATED: for tests and demos only)" : "");
    printf("devices: %d\n", n);
    for (int i = 0; i < n; i++)
        printf("  %-12s port %u %-6s pci %-14s numa %d mtu %u\n", devs[i].name, devs[i].port,
               devs[i].port_active ? "ACTIVE" : "DOWN", devs[i].pci[0] ? devs[i].pci : "-",
               devs[i].numa_node, devs[i].active_mtu);
    unsigned nodes = mc_numa_node_count();
    printf("numa nodes: %u\n", nodes);
    rd_topo_t t;
    char err[256] = "";
    const char *why = "";
    int ngpus = te_cuda_gpus(&why);
    int gpu_numa[32];
    if (ngpus > 32)
        ngpus = 32;
    for (int i = 0; i < ngpus; i++)
        gpu_numa[i] = te_cuda_numa_node(i);
    if (ngpus > 0)
        printf("gpus: %d\n", ngpus);
    else
        printf("gpus: 0 (%s)\n", why);
    mc_status_t st = matrix ? rd_topo_parse(&t, matrix, err, sizeof(err))
                            : rd_topo_discover(&t, devs, n, nodes, gpu_numa, (unsigned)ngpus,
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
