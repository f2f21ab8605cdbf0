/*
 * thp.h - what a test needs to check that shared memory is in 2 MiB pages
 * (MC_SHM_THP: an offload node's segment, the hugetlb fallback): whether
 * this kernel can make them, and how much of a mapping is mapped by 2 MiB
 * page table entries. Header-only so each test stays one .c file.
 */
#ifndef MC_TEST_THP_H
#define MC_TEST_THP_H

#include <stdio.h>
#include <string.h>
#include <sys/types.h>

/* /sys/kernel/mm/transparent_hugepage/shmem_enabled into buf ("" when it
 * cannot be read). */
static inline void test_shmem_enabled(char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
    if (f != NULL) {
        if (fgets(buf, (int)cap, f) == NULL)
            buf[0] = '\0';
        fclose(f);
    }
}

/* Can the kernel make 2 MiB pages of shared memory here: Linux 6.1
 * (MADV_COLLAPSE), shmem_enabled neither deny nor force? Says why not on
 * stderr when not. */
static inline int test_thp_possible(void)
{
    int major = 0, minor = 0;
    char thp[128];
    FILE *f = fopen("/proc/sys/kernel/osrelease", "r");
    if (f != NULL) {
        if (fscanf(f, "%d.%d", &major, &minor) != 2)
            major = 0;
        fclose(f);
    }
    test_shmem_enabled(thp, sizeof(thp));
    if ((major > 6 || (major == 6 && minor >= 1)) && strstr(thp, "[deny]") == NULL &&
        strstr(thp, "[force]") == NULL)
        return 1;
    fprintf(stderr, "  (kernel %d.%d, shmem_enabled %s: huge pages not checked)\n", major, minor,
            thp);
    return 0;
}

/* Does this host leave shared memory in 4 KiB pages unless asked
 * (shmem_enabled never or advise, the defaults)? Then a region has 2 MiB
 * pages only where it was made into them. */
static inline int test_shmem_thp_off(void)
{
    char thp[128];
    test_shmem_enabled(thp, sizeof(thp));
    return strstr(thp, "[never]") != NULL || strstr(thp, "[advise]") != NULL;
}

/* The kB value of smaps field `field` ("ShmemPmdMapped:", "Shared_Hugetlb:")
 * of a mapping of process pid (0: this one): the mapping that starts at base,
 * or (base NULL) the first whose line names name; its size in *kb_size when
 * not NULL. -1 when there is none. */
static inline long test_smaps_kb(pid_t pid, const void *base, const char *name, const char *field,
                                 long *kb_size)
{
    char path[64], line[512];
    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/smaps");
    else
        snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int in = 0;
    size_t fl = strlen(field);
    long kb = -1, v;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strstr(line, " kB") == NULL) {
            in = base != NULL ? lo == (unsigned long)base
                              : name != NULL && strstr(line, name) != NULL;
            continue;
        }
        if (in && kb_size != NULL && sscanf(line, "Size: %ld kB", &v) == 1)
            *kb_size = v;
        if (in && strncmp(line, field, fl) == 0 && sscanf(line + fl, "%ld kB", &v) == 1) {
            kb = v;
            break;
        }
    }
    fclose(f);
    return kb;
}

/* kB of a shared memory mapping mapped by 2 MiB page table entries (smaps'
 * ShmemPmdMapped), as test_smaps_kb. */
static inline long test_smaps_pmd_kb(pid_t pid, const void *base, const char *name, long *kb_size)
{
    return test_smaps_kb(pid, base, name, "ShmemPmdMapped:", kb_size);
}

/* kB of a mapping in 2 MiB pages of either kind: transparent (PMD-mapped)
 * or hugetlb. */
static inline long test_smaps_huge_kb(pid_t pid, const void *base, const char *name, long *kb_size)
{
    long pmd = test_smaps_pmd_kb(pid, base, name, kb_size);
    long tlb = test_smaps_kb(pid, base, name, "Shared_Hugetlb:", NULL);
    return pmd < 0 ? -1 : pmd + (tlb > 0 ? tlb : 0);
}

#endif /* MC_TEST_THP_H */
