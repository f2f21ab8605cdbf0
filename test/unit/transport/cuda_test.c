/*
 * The CUDA runtime loaded at run time (transport/cuda.c), where there is no
 * GPU: every CUDA request fails with DEVICE_NOT_FOUND and a message naming
 * what is missing; malformed locations are INVALID_ARGUMENT; nothing is
 * registered. MC_CUDA_LIBRARY points the loader at a library that does not
 * exist (or lacks the runtime's symbols), so the test means the same on a
 * machine that has CUDA.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mooncake/transfer.h"
#include "transport/cuda.h"
#include "util/log.h"

static void without_the_runtime_no_gpu_is_seen_and_the_reason_names_the_library(void **state)
{
    (void)state;
    const char *why = NULL;
    assert_int_equal(te_cuda_gpus(&why), 0);
    assert_non_null(strstr(why, "/nonexistent/libcudart.so"));
    assert_non_null(strstr(why, "not installed"));
    static char a[64], b[64];
    assert_int_equal(te_cuda_memcpy(a, b, sizeof(a)), MC_ERR_DEVICE_NOT_FOUND);
    char bus[32];
    assert_int_equal(te_cuda_pci_bus_id(0, bus, sizeof(bus)), MC_ERR_DEVICE_NOT_FOUND);
}

static void locations_parse_strictly(void **state)
{
    (void)state;
    int g = -1;
    assert_int_equal(te_cuda_parse("cuda:3", &g), MC_OK);
    assert_int_equal(g, 3);
    const char *bad[] = {"cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cpu:0", "cuda:99999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(te_cuda_parse(bad[i], &g), MC_ERR_INVALID_ARGUMENT);
}

static void registering_gpu_memory_fails_cleanly_and_registers_nothing(void **state)
{
    (void)state;
    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.reactors = 1;
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    static uint8_t buf[8192], other[8192];
    assert_int_equal(mc_te_register(te, buf, sizeof(buf), "cuda:0", 1), MC_ERR_DEVICE_NOT_FOUND);
    assert_int_equal(mc_te_register(te, buf, sizeof(buf), "cuda:7", 1), MC_ERR_DEVICE_NOT_FOUND);
    assert_int_equal(mc_te_register(te, buf, sizeof(buf), "cuda:zz", 1), MC_ERR_INVALID_ARGUMENT);
    mc_te_buffer_t v[2] = {{buf, 4096}, {buf + 4096, 4096}};
    assert_int_equal(mc_te_register_batch(te, v, 2, "cuda:0", 1), MC_ERR_DEVICE_NOT_FOUND);
    /* nothing of it was registered: a local copy into it is refused */
    assert_int_equal(mc_te_register(te, other, sizeof(other), "cpu:0", 1), MC_OK);
    mc_te_batch_t *b = NULL;
    assert_int_equal(mc_te_batch_alloc(te, 1, &b), MC_OK);
    mc_te_request_t r = {.opcode = MC_TE_WRITE,
                         .local = other,
                         .segment = MC_TE_LOCAL_SEGMENT,
                         .remote = (uint64_t)(uintptr_t)buf,
                         .length = 16};
    assert_int_equal(mc_te_submit(b, &r, 1), MC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    /* the same memory registers fine as host memory */
    assert_int_equal(mc_te_register(te, buf, sizeof(buf), "cpu:0", 1), MC_OK);
    mc_te_destroy(te);
}

static void a_library_without_the_runtime_symbols_is_refused(void **state)
{
    (void)state;
    /* the loader runs once per process: ask a child */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("MC_CUDA_LIBRARY", "libm.so.6", 1);
        const char *why = NULL;
        int n = te_cuda_gpus(&why);
        _exit(n == 0 && strstr(why, "lacks an expected symbol") != NULL ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    mc_log_set_spec(getenv("TEST_LOG") ? getenv("TEST_LOG") : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_library_without_the_runtime_symbols_is_refused),
        cmocka_unit_test(without_the_runtime_no_gpu_is_seen_and_the_reason_names_the_library),
        cmocka_unit_test(locations_parse_strictly),
        cmocka_unit_test(registering_gpu_memory_fails_cleanly_and_registers_nothing),
    };
    setenv("MC_CUDA_LIBRARY", "/nonexistent/libcudart.so", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
