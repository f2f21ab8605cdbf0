"""The co-located ("dummy") client from Python, as SGLang's standalone
storage mode drives it: host memory from MooncakeHostMemAllocator first,
then setup_dummy(mem_pool_size, local_buffer_size, server_address) against
a mooncake-store-server with service.enabled (upstream's mooncake_client),
register_buffer, batch_put_from / batch_get_into, the warm-up put/get;
alloc_from_mem_pool; and the bad input cases."""
import ctypes
import os
import socket

import numpy as np
import pytest

from mooncake import store as ms
from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator

from conftest import make_cluster

MIB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    c = make_cluster(tmp_path_factory, nodes=0)
    port = free_port()
    try:
        c.add_node(size="128MiB", extra=["--set", "service.enabled=true",
                                         "--set", f"service.port={port}"])
    except Exception:
        c.stop()
        raise
    c.service = f"127.0.0.1:{port}"
    yield c
    c.stop()


def view(ptr, n):
    return np.frombuffer((ctypes.c_ubyte * n).from_address(ptr), dtype=np.uint8)


def test_sglang_standalone_storage_order(service):
    alloc = MooncakeHostMemAllocator()
    size = 4 * MIB
    ptr = alloc.alloc(2 * size)
    mem = view(ptr, 2 * size)
    mem[:size] = np.frombuffer(os.urandom(size), dtype=np.uint8)
    s = MooncakeDistributedStore()
    # staging of 1 MiB: values of 2 MiB only travel in the shared memory
    assert s.setup_dummy(2 * size, MIB, service.service) == 0
    assert s.register_buffer(ptr, 2 * size) == 0
    half = size // 2
    assert s.batch_put_from(["a", "b"], [ptr, ptr + half], [half, half]) == [0, 0]
    assert s.batch_get_into(["a", "b", "absent"], [ptr + size, ptr + size + half, ptr],
                            [half, half, 10]) == [half, half, ms.OBJECT_NOT_FOUND]
    assert bytes(mem[size:]) == bytes(mem[:size])
    # SGLang's warm-up
    assert s.put("warmup", bytes(4096)) == 0
    assert s.is_exist("warmup") == 1
    assert s.get("warmup") == bytes(4096)
    assert s.get_size("a") == half
    # the pool: shared memory filled in place
    p = s.alloc_from_mem_pool(3 * MIB)
    assert p != 0 and p % 64 == 0
    view(p, 3 * MIB)[:] = 7
    assert s.put_from("pool", p, 3 * MIB) == 0
    assert s.get("pool") == bytes([7]) * (3 * MIB)
    # larger than staging from and into Python memory: through pool memory
    big = os.urandom(2 * MIB)
    assert s.put("big", big) == 0 and s.get("big") == big
    assert s.remove("big", force=True) == 0
    assert s.alloc_from_mem_pool(64 * MIB) == 0  # larger than the pool
    assert s.remove_all(force=True) == 4
    assert s.unregister_buffer(ptr) == 0
    s.close()
    assert alloc.free(ptr) == 0
    assert alloc.free(ptr) == ms.INVALID_ARGUMENT


def _huge_kb(ptr):
    """kB of this process's mapping at ptr in 2 MiB pages (transparent or
    hugetlb), and its size in kB; None when the kernel cannot make them
    (before Linux 6.1, shmem_enabled deny or force)."""
    rel = os.uname().release.split(".")
    with open("/sys/kernel/mm/transparent_hugepage/shmem_enabled") as f:
        thp = f.read()
    if (int(rel[0]), int(rel[1])) < (6, 1) or "[deny]" in thp or "[force]" in thp:
        return None
    huge, size, inside = 0, None, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                inside = int(head.split("-")[0], 16) == ptr
            elif inside and head == "Size:":
                size = int(line.split()[1])
            elif inside and head in ("ShmemPmdMapped:", "Shared_Hugetlb:"):
                huge += int(line.split()[1])
    return huge, size


def test_host_mem_allocator_use_hugepage(service):
    """MooncakeHostMemAllocator(use_hugepage=True), as upstream: allocations
    in 2 MiB pages (hugetlb when the pool has them free, else transparent
    huge pages), shared with the service and travelling in place; False and
    the default (no MC_STORE_USE_HUGEPAGE) in normal pages; bad arguments
    named."""
    a = MooncakeHostMemAllocator(use_hugepage=True, hugepage_size="2MB")
    size = 8 * MIB
    ptr = a.alloc(size)
    assert ptr != 0
    got = _huge_kb(ptr)
    if got is not None:
        assert got == (size // 1024, size // 1024)
    plain = MooncakeHostMemAllocator(use_hugepage=False).alloc(size)
    assert plain != 0
    with open("/sys/kernel/mm/transparent_hugepage/shmem_enabled") as f:
        if got is not None and ("[never]" in f.read()):
            assert _huge_kb(plain)[0] == 0
    assert MooncakeHostMemAllocator().free(plain) == 0
    s = MooncakeDistributedStore()
    assert s.setup_dummy(4 * MIB, MIB, service.service) == 0
    assert s.register_buffer(ptr, size) == 0
    mem = view(ptr, size)
    half = size // 2
    mem[:half] = np.frombuffer(os.urandom(half), dtype=np.uint8)
    assert s.put_from("hp", ptr, half) == 0
    assert s.get_into("hp", ptr + half, half) == half
    assert bytes(mem[half:]) == bytes(mem[:half])
    assert s.remove("hp", force=True) == 0
    assert s.unregister_buffer(ptr) == 0
    s.close()
    assert a.free(ptr) == 0
    # upstream's 1 GiB pages: 2 MiB ones here (one warning); others refused
    assert MooncakeHostMemAllocator(use_hugepage=True, hugepage_size="1GB")._huge == 1
    with pytest.raises(ValueError, match="hugepage_size.*'3MB'"):
        MooncakeHostMemAllocator(use_hugepage=True, hugepage_size="3MB")
    with pytest.raises(TypeError, match="'use_hugepage'"):
        MooncakeHostMemAllocator(use_hugepage="yes")


def test_get_into_ranges_through_the_service(service):
    """get_into_ranges on a co-located client: the service reads each
    fragment into the shared memory; a missing key, a range past the end and
    memory not shared with the service give negative entries, as on a
    normal client; nothing else is written."""
    alloc = MooncakeHostMemAllocator()
    ptr = alloc.alloc(2 * MIB)
    mem = view(ptr, 2 * MIB)
    mem[:] = 0
    s = MooncakeDistributedStore()
    assert s.setup_dummy(4 * MIB, MIB, service.service) == 0
    try:
        assert s.register_buffer(ptr, 2 * MIB) == 0
        v1, v2 = os.urandom(40), os.urandom(3 * MIB // 2)
        assert s.put("r1", v1) == 0 and s.put("r2", v2) == 0
        r = s.get_into_ranges([ptr, ptr + MIB], [["r1", "r2"], ["r2"]],
                              [[[0, 20], [8]], [[0]]], [[[1, 30], [2]], [[MIB // 2]]],
                              [[[4, 3], [5]], [[MIB]]])
        assert r == [[[4, 3], [5]], [[MIB]]]
        assert bytes(mem[0:4]) == v1[1:5] and bytes(mem[20:23]) == v1[30:33]
        assert bytes(mem[8:13]) == v2[2:7] and bytes(mem[MIB:]) == v2[MIB // 2:]
        assert not mem[4:8].any() and not mem[13:20].any() and not mem[23:MIB].any()
        # a missing key, past the end of the value, an empty range
        r = s.get_into_ranges([ptr], [["absent", "r1"]], [[[0], [0, 64]]],
                              [[[0], [38, 0]]], [[[4], [4, 0]]])
        assert r == [[[ms.OBJECT_NOT_FOUND], [ms.INVALID_PARAMS, 0]]]
        # memory the service does not share: refused, nothing read
        plain = np.zeros(16, dtype=np.uint8)
        r = s.get_into_ranges([plain.ctypes.data], [["r1"]], [[[0]]], [[[0]]], [[[4]]])
        assert r == [[[ms.INVALID_PARAMS]]] and not plain.any()
        assert s.remove_all(force=True) == 2
        assert s.unregister_buffer(ptr) == 0
    finally:
        s.close()
        alloc.free(ptr)


def test_setup_dummy_bad_input(service):
    s = MooncakeDistributedStore()
    assert s.setup_dummy(MIB, MIB, "no-port") == ms.INVALID_PARAMS
    assert s.setup_dummy("lots", MIB, service.service) == ms.INVALID_PARAMS
    assert s.setup_dummy(0, 0, service.service) == ms.INVALID_ARGUMENT
    # nobody serves that port: a negative status, not a hang
    assert s.setup_dummy(MIB, MIB, f"127.0.0.1:{free_port()}") < 0
    with pytest.raises(TypeError, match="server_address"):
        s.setup_dummy(MIB, MIB, 50052)
    # calls on a store that is not set up
    assert s.alloc_from_mem_pool(100) == 0
    assert s.put("k", b"v") == ms.INVALID_PARAMS
    # sizes as strings, as upstream's configs write them
    assert s.setup_dummy("4MB", "1 MiB", service.service) == 0
    assert s.put("k", b"v") == 0 and s.get("k") == b"v"
    assert s.remove("k", force=True) == 0
    s.close()
    a = MooncakeHostMemAllocator()
    # upstream's documented value for memory it cannot give: 0, no exception
    assert a.alloc(0) == 0
    assert a.alloc(1 << 62) == 0
    with pytest.raises(ValueError, match="'size'"):
        a.alloc(-1)
    with pytest.raises(TypeError, match="'size'"):
        a.alloc("1MB")
    assert a.free(12345) == ms.INVALID_ARGUMENT


def test_setup_dummy_with_the_cluster_secret(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("secret"))
    secret = os.path.join(d, "secret")
    with open(secret, "w") as f:
        f.write("the-cluster-secret-0123456789\n")
    os.chmod(secret, 0o600)
    sec = ["--set", f"security.secret_file={secret}"]
    c = make_cluster(tmp_path_factory, nodes=0, master_args=sec)
    port = free_port()
    try:
        c.add_node(size="32MiB", extra=sec + ["--set", "service.enabled=true",
                                              "--set", f"service.port={port}"])
        addr = f"127.0.0.1:{port}"
        s = MooncakeDistributedStore()
        os.environ.pop("MC_SECRET_FILE", None)
        assert s.setup_dummy(MIB, MIB, addr) < 0  # the control port wants the secret
        assert s.setup_dummy(MIB, MIB, addr, secret_file=secret) == 0
        assert s.put("k", b"v") == 0 and s.get("k") == b"v"
        assert s.remove("k", force=True) == 0
        s.close()
        os.environ["MC_SECRET_FILE"] = secret
        try:
            assert s.setup_dummy(MIB, MIB, addr) == 0
        finally:
            os.environ.pop("MC_SECRET_FILE", None)
        s.close()
        with pytest.raises(TypeError, match="secret_file"):
            s.setup_dummy(MIB, MIB, addr, secret_file=3)
    finally:
        c.stop()
