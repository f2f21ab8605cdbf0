/*
 * rdma_env.h - make a test independent of the rdma transport's environment
 * variables (transport/README.md): they win over mc_te_opts_t, so a shell
 * with MC_RDMA_EMULATED=2 (or MC_RETRY_CNT, MC_NIC_PRIORITY_MATRIX, ...)
 * exported would give a test NICs it assumes absent, or other counts,
 * matrices and budgets than it sets. Tests call test_rdma_env_clear() first
 * in main(), before any engine or helper process starts (helpers inherit
 * the cleaned environment), and set what they need themselves.
 * Header-only so each test stays one .c file.
 */
#ifndef MC_TEST_RDMA_ENV_H
#define MC_TEST_RDMA_ENV_H

#include <stdlib.h>
#include <string.h>

extern char **environ;

static inline void test_rdma_env_clear(void)
{
    static const char *const names[] = {
        "MC_NIC_PRIORITY_MATRIX", "MC_NUM_QP_PER_EP", "MC_MAX_WR",        "MC_MAX_CQE_PER_CTX",
        "MC_MAX_EP_PER_CTX",      "MC_RETRY_CNT",     "MC_MTU",           "MC_IB_PORT",
        "MC_GID_INDEX",           "MC_PKEY_INDEX",    "MC_IB_SL",         "MC_STORE_STAGING",
        "NCCL_IB_GID_INDEX",      "MC_IB_TC",         "MC_IB_TIMEOUT",    "MC_IB_RETRY_CNT",
        "MC_SYSFS_ROOT",          "MC_GPU_REG",       "MC_SLICE_TIMEOUT",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        unsetenv(names[i]);
    /* MC_RDMA_EMULATED, MC_RDMA_DEVICES, MC_RDMA_BUSY_POLL_US, MC_RDMA_EMU_*:
     * every MC_RDMA_ variable (unsetenv changes environ: restart the scan) */
    for (int again = 1; again;) {
        again = 0;
        for (char **e = environ; e != NULL && *e != NULL; e++) {
            const char *eq = strchr(*e, '=');
            char name[256];
            size_t n = eq != NULL ? (size_t)(eq - *e) : 0;
            if (strncmp(*e, "MC_RDMA_", 8) == 0 && n > 0 && n < sizeof(name)) {
                memcpy(name, *e, n);
                name[n] = '\0';
                unsetenv(name);
                again = 1;
                break;
            }
        }
    }
}

#endif /* MC_TEST_RDMA_ENV_H */
