/*
 * The GPU paths against a FAKE CUDA driver (test/fake/fake_libcuda.c,
 * loaded through MC_CUDA_LIBRARY): its "device memory" is mapped PROT_NONE
 * where the CPU sees it (a stray memcpy on a device pointer crashes this
 * test), reached only through cuMemcpy, exported as dma-buf fds backed by
 * memfds; calls that need a context fail without one.
 *
 * Covered: loading and the PCI bus ids; registration checks (GPU N's
 * memory, inside one allocation); local copies through cuMemcpy with the
 * GPU's context made current on whatever thread copies; RDMA registration
 * on emulated NICs by dma-buf and through nvidia-peermem, transfers into
 * and out of GPU memory both ways; no way to register (no dma-buf, no
 * peermem) refused; a library that writes past the values it returns
 * (another ABI) refused, not trusted.
 *
 * No GPU was used: what this proves is the calls, their order, contexts
 * and bounds, not the hardware.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mooncake/transfer.h"
#include "test/rdma_env.h"
#include "transport/cuda.h"
#include "transport/rdma/verbs.h"
#include "transport/te.h"
#include "util/log.h"

#define WAIT_US 10000000u

static char lib_path[PATH_MAX];

/* Every dlopen of this process passes here (the executable's definition
 * wins): the "is the driver loaded" questions (RTLD_NOLOAD) are counted. */
static int noload_calls;

void *dlopen(const char *file, int mode)
{
    static void *(*real)(const char *, int);
    if (real == NULL)
        real = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
    if (mode & RTLD_NOLOAD)
        noload_calls++;
    return real(file, mode);
}
static void *lib;

typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*retain_fn)(void **, int);
typedef int (*set_fn)(void *);
typedef void *(*view_fn)(unsigned long long, size_t);
typedef unsigned long (*count_fn)(const char *);

/* GPU memory from the fake driver, as an application would get it. */
static uint8_t *dev_alloc(int gpu, size_t n)
{
    retain_fn retain = (retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
    set_fn set = (set_fn)dlsym(lib, "cuCtxSetCurrent");
    alloc_fn alloc = (alloc_fn)dlsym(lib, "cuMemAlloc_v2");
    void *ctx = NULL;
    assert_int_equal(retain(&ctx, gpu), 0);
    assert_int_equal(set(ctx), 0);
    unsigned long long p = 0;
    assert_int_equal(alloc(&p, n), 0);
    assert_int_equal(set(NULL), 0); /* the library must set its own */
    return (uint8_t *)(uintptr_t)p;
}

/* The bytes of GPU memory, through the fake's host view. */
static uint8_t *view(const void *d, size_t n)
{
    view_fn v = (view_fn)dlsym(lib, "mcFakeCudaHostView");
    uint8_t *h = v((unsigned long long)(uintptr_t)d, n);
    assert_non_null(h);
    return h;
}

static unsigned long count(const char *what)
{
    return ((count_fn)dlsym(lib, "mcFakeCudaCount"))(what);
}

static void the_fake_driver_is_loaded_with_its_gpus(void **state)
{
    (void)state;
    const char *why = NULL;
    assert_int_equal(te_cuda_gpus(&why), 2);
    assert_string_equal(why, "");
    assert_string_equal(te_cuda_library(), lib_path);
    char bus[32];
    assert_int_equal(te_cuda_pci_bus_id(1, bus, sizeof(bus)), MC_OK);
    assert_string_equal(bus, "0000:20:00.0"); /* lower case (the driver says 20, upper) */
    assert_int_equal(te_cuda_pci_bus_id(2, bus, sizeof(bus)), MC_ERR_DEVICE_NOT_FOUND);
    assert_true(te_cuda_dmabuf_supported(0));
}

static void registration_checks_the_gpu_and_the_allocation(void **state)
{
    (void)state;
    uint8_t *d0 = dev_alloc(0, 1 << 20), *d1 = dev_alloc(1, 1 << 20);
    int gpu = -9;
    assert_int_equal(te_cuda_ptr_gpu(d1 + 100, &gpu), MC_OK);
    assert_int_equal(gpu, 1);
    static uint8_t host[4096];
    assert_int_equal(te_cuda_ptr_gpu(host, &gpu), MC_OK);
    assert_int_equal(gpu, -1);
    assert_int_equal(te_cuda_check("cuda:0", d0, 1 << 20), MC_OK);
    assert_int_equal(te_cuda_check("cuda:1", d0, 4096), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(te_cuda_check("cuda:0", host, 4096), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(te_cuda_check("cuda:0", d0 + 4096, 1 << 20), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(te_cuda_check("cuda:2", d0, 4096), MC_ERR_DEVICE_NOT_FOUND);
    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.reactors = 1;
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    assert_int_equal(mc_te_register(te, d0, 1 << 20, "cuda:1", 1), MC_ERR_INVALID_ARGUMENT);
    assert_int_equal(mc_te_register(te, d0, 1 << 20, "cuda:0", 1), MC_OK);
    assert_int_equal(mc_te_register(te, d1, 1 << 20, "cuda:1", 0), MC_OK);
    mc_te_destroy(te);
}

typedef struct copy_arg {
    void *dst;
    const void *src;
    size_t n;
    mc_status_t st;
} copy_arg_t;

static void *copy_thread(void *arg)
{
    copy_arg_t *a = arg;
    a->st = te_cuda_memcpy(a->dst, a->src, a->n);
    return NULL;
}

static void local_copies_go_through_cumemcpy_with_a_context_current(void **state)
{
    (void)state;
    const size_t n = 256 << 10;
    uint8_t *d = dev_alloc(0, n);
    uint8_t *host = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        host[i] = (uint8_t)(i * 7 + 1);
    unsigned long copies = count("memcpy");
    /* a fresh thread has no context: the module makes GPU 0's current */
    copy_arg_t a = {d, host, n, MC_ERR_INTERNAL_ERROR};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, copy_thread, &a), 0);
    pthread_join(th, NULL);
    assert_int_equal(a.st, MC_OK);
    assert_memory_equal(view(d, n), host, n);
    assert_int_equal(count("no_ctx"), 0);
    /* a host thread with another GPU's context current keeps it */
    retain_fn retain = (retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
    set_fn set = (set_fn)dlsym(lib, "cuCtxSetCurrent");
    typedef int (*get_fn)(void **);
    get_fn get = (get_fn)dlsym(lib, "cuCtxGetCurrent");
    void *ctx1 = NULL, *cur = NULL;
    assert_int_equal(retain(&ctx1, 1), 0);
    assert_int_equal(set(ctx1), 0);
    assert_int_equal(te_cuda_memcpy(back, d, n), MC_OK);
    assert_memory_equal(back, host, n);
    assert_int_equal(get(&cur), 0);
    assert_ptr_equal(cur, ctx1);
    assert_int_equal(set(NULL), 0);
    /* the local transport of an engine: host -> GPU -> host */
    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.reactors = 1;
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&o, &te), MC_OK);
    assert_int_equal(mc_te_register(te, d, n, "cuda:0", 1), MC_OK);
    assert_int_equal(mc_te_register(te, host, n, "cpu:0", 1), MC_OK);
    assert_int_equal(mc_te_register(te, back, n, "cpu:0", 1), MC_OK);
    memset(view(d, n), 0, n);
    mc_te_batch_t *b;
    assert_int_equal(mc_te_batch_alloc(te, 2, &b), MC_OK);
    mc_te_request_t r[2] = {{.opcode = MC_TE_WRITE,
                             .local = host,
                             .segment = MC_TE_LOCAL_SEGMENT,
                             .remote = (uint64_t)(uintptr_t)d,
                             .length = n}};
    assert_int_equal(mc_te_submit(b, r, 1), MC_OK);
    assert_int_equal(mc_te_batch_wait(b, WAIT_US), MC_OK);
    assert_memory_equal(view(d, n), host, n);
    r[1] = (mc_te_request_t){.opcode = MC_TE_READ,
                             .local = back,
                             .segment = MC_TE_LOCAL_SEGMENT,
                             .remote = (uint64_t)(uintptr_t)d,
                             .length = n};
    assert_int_equal(mc_te_submit(b, &r[1], 1), MC_OK);
    assert_int_equal(mc_te_batch_wait(b, WAIT_US), MC_OK);
    assert_memory_equal(back, host, n);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    assert_true(count("memcpy") >= copies + 3);
    assert_int_equal(count("no_ctx"), 0);
    mc_te_destroy(te);
    free(host);
    free(back);
}

/* ------------------------------------------------------------- RDMA */

typedef struct eng {
    mc_te_t *te;
    uint8_t *mem; /* device memory (gpu) or host memory */
    size_t len;
} eng_t;

static mc_status_t eng_make(eng_t *e, const char *loc, size_t len)
{
    mc_te_opts_t o;
    mc_te_opts_init(&o);
    o.listen_host = "127.0.0.1";
    o.reactors = 1;
    o.timeout_us = 3000000;
    o.rdma_emulated = 1;
    assert_int_equal(mc_te_create(&o, &e->te), MC_OK);
    assert_int_equal(mc_te_install_transport(e->te, "rdma"), MC_OK);
    e->len = len;
    if (strncmp(loc, "cuda:", 5) == 0) {
        e->mem = dev_alloc(loc[5] - '0', len);
    } else {
        e->mem = malloc(len);
        assert_non_null(e->mem);
    }
    return mc_te_register(e->te, e->mem, len, loc, 1);
}

static void eng_free(eng_t *e)
{
    mc_te_destroy(e->te);
    int gpu = -1;
    te_cuda_ptr_gpu(e->mem, &gpu);
    if (gpu < 0)
        free(e->mem);
}

static mc_status_t xfer(eng_t *from, eng_t *to, int op, size_t len)
{
    mc_te_segment_t seg;
    mc_status_t st = mc_te_open_segment(from->te, mc_te_local_name(to->te), &seg);
    if (st != MC_OK)
        return st;
    mc_te_batch_t *b;
    assert_int_equal(mc_te_batch_alloc(from->te, 1, &b), MC_OK);
    mc_te_request_t r = {.opcode = op,
                         .local = from->mem,
                         .segment = seg,
                         .remote = (uint64_t)(uintptr_t)to->mem,
                         .length = len};
    assert_int_equal(mc_te_submit(b, &r, 1), MC_OK);
    st = mc_te_batch_wait(b, WAIT_US);
    assert_int_equal(mc_te_batch_free(b), MC_OK);
    return st;
}

/* A host engine writes into and reads out of a GPU engine's memory, and
 * the GPU engine writes from its GPU memory: every direction over RDMA. */
static void rdma_moves_gpu_memory_both_ways(void)
{
    const size_t n = 1 << 20;
    eng_t g, h;
    assert_int_equal(eng_make(&g, "cuda:0", n), MC_OK);
    assert_int_equal(eng_make(&h, "cpu:0", n), MC_OK);
    for (size_t i = 0; i < n; i++)
        h.mem[i] = (uint8_t)(i * 13 + 5);
    assert_int_equal(xfer(&h, &g, MC_TE_WRITE, n), MC_OK);
    assert_memory_equal(view(g.mem, n), h.mem, n);
    memset(h.mem, 0, n);
    assert_int_equal(xfer(&h, &g, MC_TE_READ, n), MC_OK);
    assert_memory_equal(h.mem, view(g.mem, n), n);
    for (size_t i = 0; i < n; i++)
        view(g.mem, n)[i] = (uint8_t)(i ^ 0x3c);
    assert_int_equal(xfer(&g, &h, MC_TE_WRITE, n), MC_OK); /* the source is GPU memory */
    assert_memory_equal(h.mem, view(g.mem, n), n);
    eng_free(&g);
    eng_free(&h);
}

static void gpu_memory_registers_as_dma_buf_on_the_nics(void **state)
{
    (void)state;
    unsigned long exports = count("export");
    rdma_moves_gpu_memory_both_ways();
    assert_true(count("export") > exports); /* registered from a dma-buf fd */
}

static void gpu_memory_registers_through_peermem_when_asked(void **state)
{
    (void)state;
    setenv("MC_GPU_REG", "peermem", 1);
    unsigned long exports = count("export");
    rdma_moves_gpu_memory_both_ways();
    assert_int_equal(count("export"), exports); /* ibv_reg_mr on the device pointer */
    /* without the module the NIC cannot pin GPU pages: refused, said why */
    rv_emu_opts_t o, np;
    rv_emu_opts_get(&o);
    np = o;
    np.no_peermem = 1;
    rv_emu_configure(&np);
    eng_t g;
    assert_int_equal(eng_make(&g, "cuda:0", 1 << 16), MC_ERR_MEMORY);
    eng_free(&g);
    rv_emu_configure(&o);
    unsetenv("MC_GPU_REG");
}

/* ------------------------------------------------ in a child process */

/* The child modes: the driver is loaded once per process, with the
 * environment of its start. */
static int child(const char *mode)
{
    mc_log_set_spec("error", NULL, 0);
    if (strcmp(mode, "oversize") == 0) {
        /* every value written as 16 bytes: another ABI, refused at load */
        const char *why = NULL;
        int n = te_cuda_gpus(&why);
        return n == 0 && strstr(why, "another ABI") != NULL ? 0 : 1;
    }
    if (strcmp(mode, "oversize_attr") == 0) {
        /* only pointer attributes oversized: registration refused */
        if (te_cuda_gpus(NULL) != 2)
            return 2;
        uint8_t *d = dev_alloc(0, 4096);
        return te_cuda_check("cuda:0", d, 4096) == MC_ERR_NOT_SUPPORTED ? 0 : 3;
    }
    if (strcmp(mode, "not_loaded") == 0) {
        /* a process that never loaded the driver: asking where memory is
         * does not load it (nothing there can be GPU memory), and does not
         * search the file system for it on every call (the store asks on
         * every get and put) */
        static uint8_t host[64];
        noload_calls = 0;
        for (int i = 0; i < 1000; i++)
            if (te_gpu_of(host) != -1)
                return 7;
        if (noload_calls > 1)
            return 9;
        if (dlopen(lib_path, RTLD_NOW | RTLD_NOLOAD) != NULL)
            return 8;
        /* the host loads the driver later: from then on its memory is GPU
         * memory */
        lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL)
            return 10;
        int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
        if (cu_init == NULL || cu_init(0) != 0)
            return 12;
        uint8_t *d = dev_alloc(1, 4096);
        return te_gpu_of(d) == 1 && te_gpu_of(host) == -1 ? 0 : 11;
    }
    if (strcmp(mode, "no_way") == 0) {
        /* no dma-buf export and no peermem: GPU memory is refused on the
         * NICs (the install said so), host memory still works */
        rv_emu_opts_t o;
        rv_emu_opts_get(&o);
        o.no_peermem = 1;
        rv_emu_configure(&o);
        if (te_cuda_dmabuf_supported(0))
            return 4;
        eng_t g, h;
        if (eng_make(&g, "cuda:0", 1 << 16) != MC_ERR_MEMORY)
            return 5;
        if (eng_make(&h, "cpu:0", 1 << 16) != MC_OK)
            return 6;
        eng_free(&g);
        eng_free(&h);
        return 0;
    }
    return 99;
}

static void run_child(const char *mode, const char *env, const char *val)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv(env, val, 1);
        execl("/proc/self/exe", "cuda_fake_test", "--child", mode, (char *)NULL);
        _exit(98);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void a_library_writing_past_its_values_is_refused(void **state)
{
    (void)state;
    run_child("oversize", "FAKE_CUDA_OVERSIZE", "all");
    run_child("oversize_attr", "FAKE_CUDA_OVERSIZE", "attr");
}

static void without_dma_buf_or_peermem_gpu_memory_is_refused_on_the_nics(void **state)
{
    (void)state;
    run_child("no_way", "FAKE_CUDA_NO_DMABUF", "1");
}

static void asking_where_memory_is_never_loads_the_driver(void **state)
{
    (void)state;
    run_child("not_loaded", "FAKE_CUDA_GPUS", "2");
}

int main(int argc, char **argv)
{
    test_rdma_env_clear();
    const char *dir = getenv("TEST_BUILD_DIR") ? getenv("TEST_BUILD_DIR") : "build";
    char rel[PATH_MAX];
    snprintf(rel, sizeof(rel), "%s/test/lib/libfakecuda.so", dir);
    if (realpath(rel, lib_path) == NULL) {
        fprintf(stderr, "cuda_fake_test: %s not found (make tests builds it)\n", rel);
        return 1;
    }
    setenv("MC_CUDA_LIBRARY", lib_path, 1);
    unsetenv("MC_GPU_REG");
    if (argc == 3 && strcmp(argv[1], "--child") == 0 && strcmp(argv[2], "not_loaded") == 0)
        return child(argv[2]);
    lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "cuda_fake_test: %s\n", dlerror());
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "--child") == 0)
        return child(argv[2]);
    unsetenv("FAKE_CUDA_OVERSIZE");
    unsetenv("FAKE_CUDA_NO_DMABUF");
    mc_log_set_spec(getenv("TEST_LOG") ? getenv("TEST_LOG") : "error", NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_fake_driver_is_loaded_with_its_gpus),
        cmocka_unit_test(registration_checks_the_gpu_and_the_allocation),
        cmocka_unit_test(local_copies_go_through_cumemcpy_with_a_context_current),
        cmocka_unit_test(gpu_memory_registers_as_dma_buf_on_the_nics),
        cmocka_unit_test(gpu_memory_registers_through_peermem_when_asked),
        cmocka_unit_test(a_library_writing_past_its_values_is_refused),
        cmocka_unit_test(without_dma_buf_or_peermem_gpu_memory_is_refused_on_the_nics),
        cmocka_unit_test(asking_where_memory_is_never_loads_the_driver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
