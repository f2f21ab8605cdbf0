"""The store and the transfer engine over the rdma transport on its EMULATED
verbs provider (MC_RDMA_EMULATED=2: two emulated NICs per process, for
tests; no RDMA hardware is used): storage nodes and clients with protocol
"rdma", values through the staging buffer (unregistered memory) and zero
copy (registered buffers), multi-buffer batches, two replicas, engines."""
import os

import numpy as np
import pytest

from mooncake import store as ms
from mooncake.engine import TransferEngine
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

from conftest import make_cluster

MIB = 1 << 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    os.environ["MC_RDMA_EMULATED"] = "2"  # this process and the nodes it starts
    env = dict(os.environ)
    c = make_cluster(tmp_path_factory, nodes=2, protocol="rdma", env=env)
    yield c
    c.stop()
    os.environ.pop("MC_RDMA_EMULATED", None)


@pytest.fixture(scope="module")
def store(cluster):
    s = MooncakeDistributedStore()
    # a 4 MiB staging buffer: larger unregistered values travel in pieces
    assert s.setup("127.0.0.1", "master", 0, 4 * MIB, "rdma", "", cluster.master) == 0
    yield s
    s.remove_all(force=True)
    s.close()


@pytest.mark.parametrize("size", [1, 4096, 1 * MIB + 3, 9 * MIB])
def test_values_round_trip_over_rdma(store, size):
    v = os.urandom(size)
    assert store.put(f"r{size}", v) == 0
    assert store.get(f"r{size}") == v
    assert bytes(store.get_buffer(f"r{size}")) == v
    assert store.get_batch([f"r{size}"]) == [v]


def test_zero_copy_and_multi_buffers_over_rdma(store):
    src = np.frombuffer(os.urandom(1 << 20), dtype=np.uint8).copy()
    dst = np.zeros(1 << 20, dtype=np.uint8)
    p, q = src.ctypes.data, dst.ctypes.data
    assert store.register_buffer(p, src.nbytes) == 0
    assert store.register_buffer(q, dst.nbytes) == 0
    assert store.put_from("zc", p, 500000) == 0
    assert store.get_into("zc", q, 1 << 20) == 500000
    assert np.array_equal(src[:500000], dst[:500000])
    keys = [f"kv{i}" for i in range(4)]
    ptrs = [[p + i * 8192, p + 500000 + i * 8192] for i in range(4)]
    sizes = [[4096, 4096]] * 4
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes) == [0] * 4
    dst[:] = 0
    outs = [[q + i * 8192, q + 500000 + i * 8192] for i in range(4)]
    assert store.batch_get_into_multi_buffers(keys, outs, sizes) == [8192] * 4
    for i in range(4):
        for off in (i * 8192, 500000 + i * 8192):
            assert bytes(dst[off:off + 4096]) == bytes(src[off:off + 4096])
    assert store.batch_get_into(keys[:2], [q, q + 20000], [8192, 8192]) == [8192, 8192]
    assert store.unregister_buffer(p) == 0 and store.unregister_buffer(q) == 0


def test_two_replicas_on_the_two_rdma_nodes(store, cluster):
    c = ReplicateConfig()
    c.replica_num = 2
    assert store.put("two", b"y" * 70000, c) == 0
    segs = {r.get_memory_descriptor().buffer_descriptor.transport_endpoint_
            for r in store.get_replica_desc("two")}
    assert segs == {n.name for n in cluster.nodes}
    assert store.get("two") == b"y" * 70000


def test_engines_over_rdma(cluster):
    a, b = TransferEngine(), TransferEngine()
    assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
    assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
    src = a.allocate_managed_buffer(1 << 20)
    dst = np.zeros(1 << 20, dtype=np.uint8)
    assert b.register_memory(dst.ctypes.data, dst.nbytes) == 0
    data = os.urandom(1 << 20)
    assert a.write_bytes_to_buffer(src, data, len(data)) == 0
    tgt = f"127.0.0.1:{b.get_rpc_port()}"
    assert a.transfer_sync_write(tgt, src, dst.ctypes.data, 1 << 20) == 0
    assert bytes(dst) == data
    assert a.batch_transfer_sync_read(tgt, [src], [dst.ctypes.data + 10], [100]) == 0
    assert a.read_bytes_from_buffer(src, 100) == data[10:110]
    a._close()
    b._close()
