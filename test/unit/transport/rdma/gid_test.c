/*
 * GID selection (transport/rdma/gid.c) on fake sysfs trees: the usual mlx5
 * table picks its RoCE v2 IPv4 entry, VLAN entries and holes, IPv6-only and
 * link-local-only ports, entries without a netdev, an InfiniBand port
 * (index 0), a configured index (used, refused when empty, noted when
 * link-local), an empty table, and the link layer read from sysfs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/rdma/gid.h"

static char root[256];

static void mkdirs(const char *path)
{
    char p[512];
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

static void put_file(const char *path, const char *text)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    mkdirs(dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* One slot: gid text as the kernel prints it, type ("" = unreadable, as for
 * an empty slot), netdev ("" = none). */
typedef struct slot {
    const char *gid, *type, *ndev;
} slot_t;

#define LL0 "fe80:0000:0000:0000:0202:c9ff:fe00:0001"
#define V4A "0000:0000:0000:0000:0000:ffff:0a00:0001" /* ::ffff:10.0.0.1 */
#define V4B "0000:0000:0000:0000:0000:ffff:0a01:0001" /* ::ffff:10.1.0.1 */
#define V6G "2001:0db8:0000:0000:0000:0000:0000:0001"
#define NUL "0000:0000:0000:0000:0000:0000:0000:0000"

static void port(const char *dev, const char *ll, const slot_t *s, int n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/1/link_layer", root, dev);
    put_file(path, ll);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/1/gids/%d", root, dev, i);
        char line[64];
        snprintf(line, sizeof(line), "%s\n", s[i].gid);
        put_file(path, line);
        if (s[i].type[0]) {
            snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/1/gid_attrs/types/%d", root,
                     dev, i);
            snprintf(line, sizeof(line), "%s\n", s[i].type);
            put_file(path, line);
        }
        if (s[i].ndev[0]) {
            snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/1/gid_attrs/ndevs/%d", root,
                     dev, i);
            snprintf(line, sizeof(line), "%s\n", s[i].ndev);
            put_file(path, line);
        }
    }
}

/* The index chosen on dev (configured -1) and why. */
static int choose(const char *dev, int configured, char *why, size_t len)
{
    static rd_gid_entry_t tab[RD_GID_TBL_MAX];
    int ll = rd_gid_link_layer_sysfs(root, dev, 1);
    int n = rd_gid_read_sysfs(root, dev, 1, ll, tab, RD_GID_TBL_MAX);
    return rd_gid_select(tab, n, ll, configured, why, len);
}

static void the_usual_mlx5_table_gives_roce_v2_ipv4(void **state)
{
    (void)state;
    const slot_t t[] = {{LL0, "IB/RoCE v1", "eth0"},
                        {LL0, "RoCE v2", "eth0"},
                        {V4A, "IB/RoCE v1", "eth0"},
                        {V4A, "RoCE v2", "eth0"}};
    port("mlx5_0", "Ethernet", t, 4);
    char why[200];
    assert_int_equal(choose("mlx5_0", -1, why, sizeof(why)), 3);
    assert_string_equal(why, "");
    static rd_gid_entry_t tab[8];
    int n = rd_gid_read_sysfs(root, "mlx5_0", 1, RV_LL_ETH, tab, 8);
    assert_int_equal(n, 4);
    assert_int_equal(tab[0].type, RV_GID_TYPE_ROCE_V1);
    assert_int_equal(tab[3].type, RV_GID_TYPE_ROCE_V2);
    assert_string_equal(tab[3].ndev, "eth0");
    char s[RD_GID_STR_MAX];
    assert_string_equal(rd_gid_str(tab[3].gid, s, sizeof(s)), "::ffff:10.0.0.1");
    assert_true(rd_gid_is_v4mapped(tab[3].gid));
    assert_true(rd_gid_is_link_local(tab[0].gid));
}

static void vlan_entries_and_holes_are_handled(void **state)
{
    (void)state;
    /* the untagged netdev and a VLAN both have IPv4: the lowest index */
    const slot_t both[] = {{LL0, "IB/RoCE v1", "eth0"},     {LL0, "RoCE v2", "eth0"},
                           {V4A, "IB/RoCE v1", "eth0"},     {V4A, "RoCE v2", "eth0"},
                           {V4B, "IB/RoCE v1", "eth0.100"}, {V4B, "RoCE v2", "eth0.100"}};
    port("mlx5_1", "Ethernet", both, 6);
    assert_int_equal(choose("mlx5_1", -1, NULL, 0), 3);
    /* only the VLAN has an address, and deleted entries leave holes (null
     * GIDs whose type the kernel refuses to read) */
    const slot_t vlan[] = {
        {LL0, "IB/RoCE v1", "eth0"},     {LL0, "RoCE v2", "eth0"},    {NUL, "", ""}, {NUL, "", ""},
        {V4B, "IB/RoCE v1", "eth0.100"}, {V4B, "RoCE v2", "eth0.100"}};
    port("mlx5_2", "Ethernet", vlan, 6);
    assert_int_equal(choose("mlx5_2", -1, NULL, 0), 5);
}

static void routable_ipv6_beats_link_local_and_a_netdev_beats_none(void **state)
{
    (void)state;
    const slot_t v6[] = {{LL0, "IB/RoCE v1", "eth0"},
                         {LL0, "RoCE v2", "eth0"},
                         {V6G, "IB/RoCE v1", "eth0"},
                         {V6G, "RoCE v2", "eth0"}};
    port("mlx5_3", "Ethernet", v6, 4);
    assert_int_equal(choose("mlx5_3", -1, NULL, 0), 3);
    /* the same IPv4 GID twice, the first without a netdev */
    const slot_t nd[] = {{V4A, "RoCE v2", ""}, {V4A, "RoCE v2", "eth1"}};
    port("mlx5_4", "Ethernet", nd, 2);
    assert_int_equal(choose("mlx5_4", -1, NULL, 0), 1);
    /* RoCE v1 with an address beats a link-local v2 (routable wins), but a
     * routable v2 beats both */
    const slot_t v1[] = {{LL0, "RoCE v2", "eth2"}, {V4A, "IB/RoCE v1", "eth2"}};
    port("mlx5_5", "Ethernet", v1, 2);
    assert_int_equal(choose("mlx5_5", -1, NULL, 0), 1);
    /* link-local only: the v2 one */
    const slot_t ll[] = {{LL0, "IB/RoCE v1", "eth3"}, {LL0, "RoCE v2", "eth3"}};
    port("mlx5_6", "Ethernet", ll, 2);
    assert_int_equal(choose("mlx5_6", -1, NULL, 0), 1);
}

static void an_infiniband_port_uses_index_0(void **state)
{
    (void)state;
    const slot_t ib[] = {{LL0, "IB/RoCE v1", ""}, {LL0, "IB/RoCE v1", ""}};
    port("mlx5_7", "InfiniBand", ib, 2);
    assert_int_equal(rd_gid_link_layer_sysfs(root, "mlx5_7", 1), RV_LL_IB);
    assert_int_equal(choose("mlx5_7", -1, NULL, 0), 0);
    static rd_gid_entry_t tab[4];
    rd_gid_read_sysfs(root, "mlx5_7", 1, RV_LL_IB, tab, 4);
    assert_int_equal(tab[0].type, RV_GID_TYPE_IB);
    /* older kernels without gid_attrs on IB: still IB */
    const slot_t old[] = {{LL0, "", ""}};
    port("mlx4_0", "InfiniBand", old, 1);
    assert_int_equal(choose("mlx4_0", -1, NULL, 0), 0);
    assert_int_equal(rd_gid_link_layer_sysfs(root, "nosuch", 1), RV_LL_UNKNOWN);
}

static void a_configured_index_is_used_checked_and_noted(void **state)
{
    (void)state;
    const slot_t t[] = {{LL0, "IB/RoCE v1", "eth0"},
                        {LL0, "RoCE v2", "eth0"},
                        {V4A, "IB/RoCE v1", "eth0"},
                        {V4A, "RoCE v2", "eth0"},
                        {NUL, "", ""}};
    port("mlx5_8", "Ethernet", t, 5);
    char why[200];
    assert_int_equal(choose("mlx5_8", 2, why, sizeof(why)), 2);
    assert_string_equal(why, "");
    assert_int_equal(choose("mlx5_8", 4, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "configured GID index 4 is empty"));
    assert_int_equal(choose("mlx5_8", 9, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "5 slots"));
    assert_int_equal(choose("mlx5_8", 0, why, sizeof(why)), 0); /* used, but noted */
    assert_non_null(strstr(why, "link-local although index 3 is routable"));
}

static void an_empty_table_has_no_usable_gid(void **state)
{
    (void)state;
    const slot_t t[] = {{NUL, "", ""}, {NUL, "", ""}};
    port("mlx5_9", "Ethernet", t, 2);
    char why[200];
    assert_int_equal(choose("mlx5_9", -1, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "no usable GID (2 slots"));
    assert_int_equal(rd_gid_read_sysfs(root, "nosuch", 1, RV_LL_ETH, NULL, 0), 0);
    static rd_gid_entry_t tab[4];
    assert_int_equal(rd_gid_read_sysfs(root, "nosuch", 1, RV_LL_ETH, tab, 4), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/mc-gid-XXXXXX");
    assert_non_null(mkdtemp(root));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_usual_mlx5_table_gives_roce_v2_ipv4),
        cmocka_unit_test(vlan_entries_and_holes_are_handled),
        cmocka_unit_test(routable_ipv6_beats_link_local_and_a_netdev_beats_none),
        cmocka_unit_test(an_infiniband_port_uses_index_0),
        cmocka_unit_test(a_configured_index_is_used_checked_and_noted),
        cmocka_unit_test(an_empty_table_has_no_usable_gid),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
