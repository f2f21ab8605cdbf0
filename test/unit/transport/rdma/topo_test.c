/*
 * Topology matrix (transport/rdma/topo.c): discovery from device facts
 * (NUMA affinity, inactive ports, device filter), the user format and its
 * errors (each names what is wrong), formatting round trips, and path
 * selection: preferred first and striped, retries walking preferred then
 * secondary NICs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/rdma/pci.h"
#include "transport/rdma/topo.h"

static void dev(rv_dev_info_t *d, const char *name, int numa, int active)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%s", name);
    d->numa_node = numa;
    d->port_active = active;
}

static void discovery_prefers_nics_of_the_same_numa_node(void **state)
{
    (void)state;
    rv_dev_info_t d[5];
    dev(&d[0], "mlx5_0", 0, 1);
    dev(&d[1], "mlx5_1", 0, 1);
    dev(&d[2], "mlx5_2", 1, 1);
    dev(&d[3], "mlx5_3", 1, 0);            /* port down: left out */
    dev(&d[4], "mlx5_4", -1, 1);           /* unknown node: counts as node 0 */
    rd_gpu_facts_t gpu[1] = {{.numa = 1}}; /* no PCI facts: by NUMA node */
    rd_topo_t t;
    char err[200];
    assert_int_equal(rd_topo_discover(&t, d, 5, 2, gpu, 1, NULL, NULL, err, sizeof(err)), MC_OK);
    assert_int_equal(t.nnics, 4);
    char buf[1024];
    rd_topo_format(&t, buf, sizeof(buf));
    assert_string_equal(buf, "{\"cpu:0\": [[\"mlx5_0\",\"mlx5_1\",\"mlx5_4\"], [\"mlx5_2\"]], "
                             "\"cpu:1\": [[\"mlx5_2\"], [\"mlx5_0\",\"mlx5_1\",\"mlx5_4\"]], "
                             "\"cuda:0\": [[\"mlx5_2\"], [\"mlx5_0\",\"mlx5_1\",\"mlx5_4\"]], "
                             "\"*\": [[\"mlx5_0\",\"mlx5_1\",\"mlx5_2\",\"mlx5_4\"], []]}");
}

static void discovery_honours_the_device_filter_and_reports_none(void **state)
{
    (void)state;
    rv_dev_info_t d[2];
    dev(&d[0], "mlx5_0", 0, 1);
    dev(&d[1], "mlx5_1", 0, 1);
    rd_topo_t t;
    char err[200];
    assert_int_equal(rd_topo_discover(&t, d, 2, 1, NULL, 0, NULL, "mlx5_1", err, sizeof(err)),
                     MC_OK);
    assert_int_equal(t.nnics, 1);
    assert_string_equal(t.nics[0], "mlx5_1");
    assert_int_equal(rd_topo_discover(&t, d, 2, 1, NULL, 0, NULL, "mlx5_7", err, sizeof(err)),
                     MC_ERR_DEVICE_NOT_FOUND);
    assert_non_null(strstr(err, "device filter"));
    assert_int_equal(rd_topo_discover(&t, d, 0, 1, NULL, 0, NULL, NULL, err, sizeof(err)),
                     MC_ERR_DEVICE_NOT_FOUND);
    assert_string_equal(err, "no RDMA devices");
}

static void a_user_matrix_parses_and_formats_back(void **state)
{
    (void)state;
    const char *m = " {\"cpu:0\": [[\"mlx5_0\", \"mlx5_1\"], [\"mlx5_2\",\"mlx5_3\"]],\n"
                    "  \"cuda:0\": [[\"mlx5_2\"], []] } ";
    rd_topo_t t;
    char err[200] = "";
    assert_int_equal(rd_topo_parse(&t, m, err, sizeof(err)), MC_OK);
    assert_int_equal(t.nnics, 4);
    assert_int_equal(rd_topo_nic_index(&t, "mlx5_3"), 3); /* first-seen order */
    char buf[512];
    rd_topo_format(&t, buf, sizeof(buf));
    rd_topo_t back;
    assert_int_equal(rd_topo_parse(&back, buf, err, sizeof(err)), MC_OK);
    char buf2[512];
    rd_topo_format(&back, buf2, sizeof(buf2));
    assert_string_equal(buf, buf2);
    const rd_topo_entry_t *e = rd_topo_find(&t, "cuda:0");
    assert_int_equal(e->npref, 1);
    assert_int_equal(e->nsec, 0);
    e = rd_topo_find(&t, "cpu:7"); /* unknown location: the wildcard */
    assert_string_equal(e->loc, "*");
    assert_int_equal(e->npref, 4);
}

static void parse_error(const char *text, const char *needle)
{
    rd_topo_t t;
    char err[256] = "";
    assert_int_equal(rd_topo_parse(&t, text, err, sizeof(err)), MC_ERR_CONFIG);
    if (strstr(err, needle) == NULL)
        fail_msg("error for %s is '%s', expected it to mention '%s'", text, err, needle);
}

static void malformed_matrices_are_refused_with_the_reason(void **state)
{
    (void)state;
    parse_error("", "expected '{'");
    parse_error("[]", "expected '{'");
    parse_error("{}", "no location");
    parse_error("{\"gpu:0\": [[\"a\"],[]]}", "bad location 'gpu:0'");
    parse_error("{\"cpu:0\": [[\"a\"]]}", "each location takes two lists");
    parse_error("{\"cpu:0\": [[\"a\"],[\"b\"],[\"c\"]]}", "exactly two lists");
    parse_error("{\"cpu:0\": [[\"a\",\"a\"],[]]}", "listed twice");
    parse_error("{\"cpu:0\": [[\"a\"],[\"a\"]]}", "both preferred and secondary");
    parse_error("{\"cpu:0\": [[],[]]}", "lists no NIC");
    parse_error("{\"cpu:0\": [[\"a\"],[]], \"cpu:0\": [[\"b\"],[]]}", "appears twice");
    parse_error("{\"cpu:0\": [[\"a],[]]}", "unterminated");
    parse_error("{\"cpu:0\": [[\"a\"],[]]} x", "trailing characters");
    parse_error("{\"cpu:0\" [[\"a\"],[]]}", "expected ':'");
    parse_error("{\"cpu:0\": [[\"\"],[]]}", "empty or too long");
}

static void matrix_devices_must_exist(void **state)
{
    (void)state;
    rv_dev_info_t d[1];
    dev(&d[0], "emu_0", 0, 1);
    rd_topo_t t;
    char err[200];
    assert_int_equal(rd_topo_parse(&t, "{\"cpu:0\": [[\"emu_0\"],[\"emu_9\"]]}", err, sizeof(err)),
                     MC_OK);
    assert_int_equal(rd_topo_check_devices(&t, d, 1, err, sizeof(err)), MC_ERR_CONFIG);
    assert_non_null(strstr(err, "'emu_9'"));
}

static void first_attempts_stripe_over_the_preferred_nics_only(void **state)
{
    (void)state;
    rd_topo_t t;
    char err[200];
    assert_int_equal(
        rd_topo_parse(&t, "{\"cpu:0\": [[\"a\",\"b\",\"c\"],[\"d\"]]}", err, sizeof(err)), MC_OK);
    const rd_topo_entry_t *e = rd_topo_find(&t, "cpu:0");
    int seen[4] = {0};
    for (unsigned rr = 0; rr < 30; rr++)
        seen[rd_topo_select(e, rr, 0)]++;
    assert_int_equal(seen[0], 10);
    assert_int_equal(seen[1], 10);
    assert_int_equal(seen[2], 10);
    assert_int_equal(seen[3], 0); /* secondary: never on a first attempt */
}

static void retries_walk_preferred_then_secondary_from_the_failed_nic(void **state)
{
    (void)state;
    rd_topo_t t;
    char err[200];
    assert_int_equal(
        rd_topo_parse(&t, "{\"cpu:0\": [[\"a\",\"b\"],[\"c\",\"d\"]]}", err, sizeof(err)), MC_OK);
    const rd_topo_entry_t *e = rd_topo_find(&t, "cpu:0");
    /* first choice a (rr 0): then b, c, d, a, ... */
    int want0[] = {0, 1, 2, 3, 0, 1};
    for (unsigned k = 0; k < 6; k++)
        assert_int_equal(rd_topo_select(e, 0, k), want0[k]);
    /* first choice b (rr 1): then c, d, a, b */
    int want1[] = {1, 2, 3, 0, 1};
    for (unsigned k = 0; k < 5; k++)
        assert_int_equal(rd_topo_select(e, 1, k), want1[k]);
    /* only secondary NICs: they are used from the first attempt */
    assert_int_equal(rd_topo_parse(&t, "{\"cpu:0\": [[],[\"x\",\"y\"]]}", err, sizeof(err)), MC_OK);
    e = rd_topo_find(&t, "cpu:0");
    assert_int_equal(rd_topo_select(e, 0, 0), 0);
    assert_int_equal(rd_topo_select(e, 1, 0), 1);
    assert_int_equal(rd_topo_select(e, 1, 1), 0);
}

/* ------------------------------------------------ PCIe affinity (fake HGX) */

static void mkdirs(const char *path)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    }
    mkdir(p, 0755);
}

/* A PCI device at chain (components under <root>/devices, the device
 * last), its bus/pci/devices link and numa_node, as the kernel lays them
 * out. */
static void pci_dev(const char *root, const char *chain, int numa)
{
    char dir[1024], link[1024], target[1024], f[1100];
    snprintf(dir, sizeof(dir), "%s/devices/%s", root, chain);
    mkdirs(dir);
    snprintf(f, sizeof(f), "%s/numa_node", dir);
    FILE *fp = fopen(f, "w");
    assert_non_null(fp);
    fprintf(fp, "%d\n", numa);
    fclose(fp);
    const char *bdf = strrchr(chain, '/') + 1;
    snprintf(link, sizeof(link), "%s/bus/pci/devices", root);
    mkdirs(link);
    snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", root, bdf);
    snprintf(target, sizeof(target), "../../../devices/%s", chain);
    assert_int_equal(symlink(target, link), 0);
}

/* An 8-GPU / 8-NIC server with 2 sockets: per socket two host bridges,
 * per host bridge two root ports, each with a PCIe switch holding one GPU
 * and one NIC. Slot s (0..7): socket s/4, bridge s/2, GPU s and mlx5_s
 * under the same switch. */
static void hgx_tree(const char *root, char gpu_bus[8][16], char nic_bus[8][16])
{
    static const char *const bridge[4] = {"10", "30", "90", "b0"};
    for (int s = 0; s < 8; s++) {
        const char *hb = bridge[s / 2];
        int bus = (int)strtol(hb, NULL, 16) + (s % 2) * 8;
        char chain[512];
        /* host bridge / root port / switch up / switch down / device */
        snprintf(gpu_bus[s], 16, "0000:%02x:00.0", bus + 3);
        snprintf(nic_bus[s], 16, "0000:%02x:00.0", bus + 4);
        snprintf(chain, sizeof(chain), "pci0000:%s/0000:%s:%02x.0/0000:%02x:00.0/0000:%02x:00.0/%s",
                 hb, hb, 1 + s % 2, bus + 1, bus + 2, gpu_bus[s]);
        pci_dev(root, chain, s / 4);
        snprintf(chain, sizeof(chain), "pci0000:%s/0000:%s:%02x.0/0000:%02x:00.0/0000:%02x:01.0/%s",
                 hb, hb, 1 + s % 2, bus + 1, bus + 2, nic_bus[s]);
        pci_dev(root, chain, s / 4);
    }
}

static void each_gpu_prefers_the_nic_behind_its_own_pcie_switch(void **state)
{
    (void)state;
    char root[64] = "/tmp/mc-pci-XXXXXX";
    assert_non_null(mkdtemp(root));
    char gpu_bus[8][16], nic_bus[8][16];
    hgx_tree(root, gpu_bus, nic_bus);
    /* the NICs listed in another order than the slots (as verbs may) */
    static const int order[8] = {4, 0, 5, 1, 6, 2, 7, 3};
    rv_dev_info_t d[8];
    for (int i = 0; i < 8; i++) {
        char name[16];
        snprintf(name, sizeof(name), "mlx5_%d", order[i]);
        dev(&d[i], name, order[i] / 4, 1);
        snprintf(d[i].pci, sizeof(d[i].pci), "%s", nic_bus[order[i]]);
    }
    rd_gpu_facts_t gpus[8];
    for (int g = 0; g < 8; g++) {
        gpus[g].numa = -1; /* read from sysfs */
        /* the driver reports upper case */
        for (size_t k = 0; k < sizeof(gpus[g].pci); k++) {
            char c = k < 16 ? gpu_bus[g][k] : '\0';
            gpus[g].pci[k] = (char)(c >= 'a' && c <= 'f' ? c - 'a' + 'A' : c);
            if (c == '\0')
                break;
        }
    }
    rd_topo_t t;
    char err[200];
    assert_int_equal(rd_topo_discover(&t, d, 8, 2, gpus, 8, root, NULL, err, sizeof(err)), MC_OK);
    for (int g = 0; g < 8; g++) {
        char loc[16], want[16];
        snprintf(loc, sizeof(loc), "cuda:%d", g);
        const rd_topo_entry_t *e = rd_topo_find(&t, loc);
        assert_string_equal(e->loc, loc);
        snprintf(want, sizeof(want), "mlx5_%d", g);
        assert_int_equal(e->npref, 1);
        assert_string_equal(t.nics[e->pref[0]], want);
        assert_int_equal(e->nsec, 7);
        /* then the NIC under the same host bridge, then the socket's
         * other two, then the other socket's four */
        snprintf(want, sizeof(want), "mlx5_%d", g ^ 1);
        assert_string_equal(t.nics[e->sec[0]], want);
        for (int k = 1; k < 3; k++)
            assert_int_equal(t.nics[e->sec[k]][5] - '0', (g / 4) * 4 + ((g / 2) % 2 ? 0 : 2) +
                                                             (t.nics[e->sec[k]][5] - '0') % 2);
        for (int k = 3; k < 7; k++)
            assert_int_equal((t.nics[e->sec[k]][5] - '0') / 4, 1 - g / 4);
    }
    /* the classes themselves */
    rd_pci_chain_t a, b, c, x;
    assert_int_equal(rd_pci_chain(root, gpu_bus[0], &a), 0);
    assert_int_equal(rd_pci_chain(root, nic_bus[0], &b), 0);
    assert_int_equal(rd_pci_chain(root, nic_bus[1], &c), 0);
    assert_int_equal(rd_pci_chain(root, nic_bus[2], &x), 0);
    assert_int_equal(a.n, 5);
    assert_int_equal(a.numa, 0);
    unsigned hops;
    assert_int_equal(rd_pci_distance(&a, &b, &hops), RD_PCI_SWITCH);
    assert_int_equal(hops, 2); /* its switch port, the NIC's */
    assert_int_equal(rd_pci_distance(&a, &c, &hops), RD_PCI_ROOT);
    assert_int_equal(rd_pci_distance(&a, &x, &hops), RD_PCI_NUMA);
    rd_pci_chain_t far;
    assert_int_equal(rd_pci_chain(root, nic_bus[7], &far), 0);
    assert_int_equal(rd_pci_distance(&a, &far, &hops), RD_PCI_FAR);
    assert_int_equal(rd_pci_chain(root, "0000:ff:00.0", &x), -1); /* not there */
    assert_int_equal(rd_pci_chain(root, "../../etc", &x), -1);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(discovery_prefers_nics_of_the_same_numa_node),
        cmocka_unit_test(discovery_honours_the_device_filter_and_reports_none),
        cmocka_unit_test(a_user_matrix_parses_and_formats_back),
        cmocka_unit_test(malformed_matrices_are_refused_with_the_reason),
        cmocka_unit_test(matrix_devices_must_exist),
        cmocka_unit_test(first_attempts_stripe_over_the_preferred_nics_only),
        cmocka_unit_test(retries_walk_preferred_then_secondary_from_the_failed_nic),
        cmocka_unit_test(each_gpu_prefers_the_nic_behind_its_own_pcie_switch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
