"""setup_dummy: upstream's co-located client of the store service of this
host (a mooncake-store-server with service.enabled, as the mooncake_client
launcher starts it): every call is forwarded to the service; values in
alloc_from_mem_pool memory travel without a copy, others through the
shared staging buffer. SGLang HiCache's standalone-storage mode uses it."""
import os
import socket

import numpy as np
import pytest

from mooncake import store as ms
from mooncake.store import MooncakeDistributedStore

from conftest import _wait_line, make_cluster

MIB = 1 << 20


def free_port():
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    c = make_cluster(tmp_path_factory, nodes=0)
    try:
        n = c.add_node(extra=["--set", "service.enabled=true", "--set",
                              f"service.port={free_port()}"])
        m = _wait_line(n.out, r"^service (\S+)", n.p)
    except Exception:
        c.stop()
        raise
    c.service = m.group(1)
    yield c
    c.stop()


@pytest.fixture
def dummy(service):
    s = MooncakeDistributedStore()
    assert s.setup_dummy(16 * MIB, "16MB", service.service) == 0
    yield s
    s.remove_all(force=True)
    s.close()


def test_the_calls_sglang_makes_are_forwarded_to_the_service(dummy, service):
    # the data lives in the service's segment: get_hostname names it
    assert dummy.get_hostname() == service.nodes[0].name
    assert dummy.put("d", b"via the service") == 0
    assert dummy.get("d") == b"via the service"
    assert dummy.is_exist("d") == 1 and dummy.batch_is_exist(["d", "x"]) == [1, 0]
    assert dummy.get("absent") == b"" and dummy.get_size("d") == 15
    assert bytes(dummy.get_buffer("d")) == b"via the service"
    assert dummy.get_buffer("absent") is None
    assert dummy.put_batch(["b1", "b2"], [b"1", b"22"]) == 0
    assert dummy.get_batch(["b1", "b2", "absent"]) == [b"1", b"22", b""]
    hs = dummy.batch_get_buffer(["b2", "absent"])
    assert bytes(hs[0]) == b"22" and hs[1] is None
    assert dummy.put_parts("pp", b"a", b"bc") == 0 and dummy.get("pp") == b"abc"
    assert dummy.upsert("pp", b"new") == 0 and dummy.get("pp") == b"new"
    assert dummy.remove_by_regex("^b[12]$", force=True) == 2
    # a normal client of the cluster sees what the dummy put
    other = MooncakeDistributedStore()
    assert other.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", service.master) == 0
    assert other.get("d") == b"via the service"
    other.close()


def test_pool_memory_and_other_memory_with_the_pointer_calls(dummy):
    p = dummy.alloc_from_mem_pool(8192)
    assert p != 0 and p % 64 == 0
    pool = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * 8192).from_address(p))
    pool[:] = np.frombuffer(os.urandom(8192), dtype=np.uint8)
    assert dummy.put_from("pool", p, 4096) == 0
    assert dummy.batch_put_from(["pool1", "pool2"], [p + 4096, p + 6000], [100, 200]) == [0, 0]
    assert dummy.get("pool") == bytes(pool[:4096])
    assert dummy.get_into("pool2", p, 4096) == 200 and bytes(pool[:200]) == bytes(pool[6000:6200])
    # host memory outside the pool: registered, copied through staging
    host = np.zeros(1 << 16, dtype=np.uint8)
    assert dummy.register_buffer(host.ctypes.data, host.nbytes) == 0
    q = host.ctypes.data
    assert dummy.batch_get_into(["pool", "pool1"], [q, q + 5000], [4096, 100]) == [4096, 100]
    assert bytes(host[:4096]) == dummy.get("pool")
    assert dummy.batch_put_from_multi_buffers(["mb"], [[q, q + 5000]], [[10, 20]]) == [0]
    assert dummy.batch_get_into_multi_buffers(["mb"], [[q + 30000, q + 40000]], [[20, 10]]) == [30]
    assert bytes(host[30000:30020]) + bytes(host[40000:40010]) == \
        bytes(host[:10]) + bytes(host[5000:5020])
    assert dummy.unregister_buffer(q) == 0
    # memory neither from the pool nor registered is refused, not touched
    assert dummy.put_from("u", 0x1000, 10) == ms.INVALID_PARAMS
    assert dummy.alloc_from_mem_pool(64 * MIB) == 0  # more than the pool holds


def test_bad_setup_dummy_arguments(service):
    s = MooncakeDistributedStore()
    port = free_port()  # nobody listens there
    assert s.setup_dummy(MIB, MIB, f"127.0.0.1:{port}") < 0
    assert s.setup_dummy(MIB, MIB, "no-port") == ms.INVALID_PARAMS
    assert s.setup_dummy("50%", MIB, service.service) == ms.INVALID_PARAMS
    with pytest.raises(TypeError, match="'server_address'"):
        s.setup_dummy(MIB, MIB, 50052)
    with pytest.raises(TypeError, match="'size'"):
        s.alloc_from_mem_pool("1")
    assert not s._is_setup()
    assert s.alloc_from_mem_pool(4096) == 0  # not set up: no memory, no crash
    # setup after setup_dummy, and back
    assert s.setup_dummy(MIB, MIB, service.service) == 0
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", service.master) == 0
    assert s.put("back", b"1") == 0 and s.remove("back", force=True) == 0
    s.close()
