"""GPU memory through the Python API, on the FAKE CUDA driver of the tests
(build/test/lib/libfakecuda.so through MC_CUDA_LIBRARY; no GPU is used):
register_buffer / register_memory of a device pointer register it as GPU
memory, zero-copy puts and gets from and into "device" memory move the
bytes with cuMemcpy (the fake's device pages are not accessible to the CPU:
a stray CPU access would crash this test), and a store put/get round-trips
over tcp and over the emulated rdma NICs.

The fake driver is loaded by ctypes here only to allocate device memory and
look at it (a test helper, not the binding's path)."""
import ctypes
import os

import pytest

BUILD = os.environ.get("TEST_BUILD_DIR", "build")
FAKE = os.path.abspath(os.path.join(BUILD, "test", "lib", "libfakecuda.so"))
if not os.path.exists(FAKE):
    pytest.skip("the fake CUDA driver is not built", allow_module_level=True)
os.environ["MC_CUDA_LIBRARY"] = FAKE  # before the library's first CUDA call

from mooncake.engine import TransferEngine  # noqa: E402
from mooncake.store import MooncakeDistributedStore  # noqa: E402

from conftest import make_cluster  # noqa: E402

cu = ctypes.CDLL(FAKE)  # the same instance the library dlopens
cu.mcFakeCudaHostView.restype = ctypes.c_void_p
cu.mcFakeCudaHostView.argtypes = [ctypes.c_ulonglong, ctypes.c_size_t]
cu.mcFakeCudaCount.restype = ctypes.c_ulong
cu.mcFakeCudaCount.argtypes = [ctypes.c_char_p]

MIB = 1 << 20


def device_alloc(n):
    assert cu.cuInit(0) == 0
    ctx = ctypes.c_void_p()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    p = ctypes.c_ulonglong()
    assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    return p.value


def dev_write(p, data):
    ctypes.memmove(cu.mcFakeCudaHostView(p, len(data)), data, len(data))


def dev_read(p, n):
    return ctypes.string_at(cu.mcFakeCudaHostView(p, n), n)


def memcpys():
    return cu.mcFakeCudaCount(b"memcpy")


@pytest.fixture(scope="module", params=["tcp", "rdma"])
def setup(request, tmp_path_factory):
    proto = request.param
    if proto == "rdma":
        os.environ["MC_RDMA_EMULATED"] = "2"
    c = make_cluster(tmp_path_factory, nodes=1, protocol=proto, env=dict(os.environ))
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "master", 0, 4 * MIB, proto, "", c.master) == 0
    yield proto, c, s
    s.remove_all(force=True)
    s.close()
    c.stop()
    os.environ.pop("MC_RDMA_EMULATED", None)


def test_device_buffers_register_and_round_trip(setup):
    proto, _, s = setup
    n = 1 * MIB + 7
    src, dst = device_alloc(n), device_alloc(n)
    data = os.urandom(n)
    dev_write(src, data)
    assert s.register_buffer(src, n) == 0
    assert s.register_buffer(dst, n) == 0
    before = memcpys()
    assert s.put_from(f"gpu-{proto}", src, n) == 0
    assert s.get_into(f"gpu-{proto}", dst, n) == n
    assert dev_read(dst, n) == data
    assert memcpys() > before  # the bytes crossed with cuMemcpy, not the CPU
    # a plain get of an object written from the GPU, and batches
    assert s.get(f"gpu-{proto}") == data
    assert s.batch_put_from([f"g1-{proto}", f"g2-{proto}"], [src, src + 4096],
                            [4096, 8192]) == [0, 0]
    assert s.batch_get_into([f"g1-{proto}"], [dst], [4096]) == [4096]
    assert dev_read(dst, 4096) == data[:4096]
    assert s.batch_put_from_multi_buffers([f"gm-{proto}"], [[src, src + 100000]],
                                          [[100, 200]]) == [0]
    assert s.batch_get_into_multi_buffers([f"gm-{proto}"], [[dst + 5000, dst + 9000]],
                                          [[150, 150]]) == [300]
    got = dev_read(dst + 5000, 150) + dev_read(dst + 9000, 150)
    assert got == data[:100] + data[100000:100200]
    assert s.unregister_buffer(src) == 0 and s.unregister_buffer(dst) == 0


def test_engine_registers_device_memory_as_gpu_memory(setup):
    proto, _, _ = setup
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "") == 0
    p = device_alloc(65536)
    assert e.register_memory(p, 65536) == 0  # location "*": the driver says cuda:0
    # its byte copies do not touch device memory with the CPU: refused
    assert e.write_bytes_to_buffer(p, b"x", 1) != 0
    with pytest.raises(ValueError, match="not host memory"):
        e.read_bytes_from_buffer(p, 1)
    assert e.unregister_memory(p) == 0
    e._close()
