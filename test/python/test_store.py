"""mooncake.store against a real mooncake-master and storage node (tcp):
every method, upstream's return conventions, ReplicateConfig, upsert and
soft pins, two clients with replica_num=2, setup/close/setup, and the bad
input cases (TypeError naming the argument; lists of different lengths are
INVALID_PARAMS per key, as upstream's; errors on a store that is not set
up)."""
import ctypes
import os

import numpy as np
import pytest

from mooncake import store as ms
from mooncake.store import (BufferHandle, MooncakeDistributedStore, ReplicateConfig,
                            SoftPinAction)

from conftest import make_cluster

MIB = 1 << 20


@pytest.fixture(scope="module", params=["tcp", "rdma"])
def cluster(request, tmp_path_factory):
    """The module runs twice: over tcp, and over the rdma transport on its
    EMULATED provider (MC_RDMA_EMULATED=2: two emulated NICs per process,
    no RDMA hardware)."""
    proto = request.param
    if proto == "rdma":
        os.environ["MC_RDMA_EMULATED"] = "2"  # this process and the nodes it starts
    c = make_cluster(tmp_path_factory, nodes=2, protocol=proto, env=dict(os.environ))
    c.protocol = proto
    yield c
    c.stop()
    os.environ.pop("MC_RDMA_EMULATED", None)


def new_store(cluster, hostname="127.0.0.1", meta="P2PHANDSHAKE", segment=0, buf=16 * MIB):
    s = MooncakeDistributedStore()
    rc = s.setup(hostname, meta, segment, buf, cluster.protocol, "", cluster.master)
    assert rc == 0
    return s


@pytest.fixture(scope="module")
def store(cluster):
    s = new_store(cluster)
    yield s
    s.close()


@pytest.fixture(autouse=True)
def clean(store):
    yield
    store.remove_all(force=True)


def test_setup_picks_a_port_in_upstreams_range_and_reports_it(store):
    host, port = store.get_hostname().rsplit(":", 1)
    assert host == "127.0.0.1"
    assert 12300 <= int(port) < 14300


def test_put_get_and_their_upstream_conventions(store):
    assert store.put("k", b"hello") == 0
    assert store.get("k") == b"hello"
    # a put of an existing key returns 0 and keeps the object
    assert store.put("k", b"other") == 0
    assert store.get("k") == b"hello"
    assert store.get("absent") == b""
    assert store.get_size("k") == 5
    assert store.get_size("absent") == ms.OBJECT_NOT_FOUND
    assert store.is_exist("k") == 1 and store.is_exist("absent") == 0
    assert store.batch_is_exist(["k", "absent"]) == [1, 0]


def test_get_returns_exact_new_bytes_whatever_the_sizes_before(cluster):
    """get() makes its bytes object at the size of the recent gets before
    the call (one read, as get_into): every order of sizes still returns a
    new object of exactly the value's bytes: larger than before (read again),
    smaller (shrunk), absent, a run of smaller ones (the guess follows them
    down), and above the largest size it guesses (32 MiB)."""
    s = new_store(cluster, buf=8 * MIB)
    try:
        vals = {}
        for name, n in [("m", MIB), ("m1", MIB + 1), ("k4", 4096), ("one", 1), ("m3", 3 * MIB),
                        ("big", 33 * MIB)]:
            vals[name] = os.urandom(n)
            assert s.put(name, vals[name]) == 0
        order = ["m", "m", "m1", "m", "k4", "absent", "m3", "one"] + ["k4"] * 40 + \
            ["m", "one", "big", "k4", "m3", "m1", "absent", "m"]
        seen = set()
        for name in order:
            got = s.get(name)
            assert type(got) is bytes
            assert got == vals.get(name, b""), name
            if got:
                assert id(got) not in seen  # a new object every time (all are kept alive)
                seen.add(id(got))
                vals.setdefault("_kept", []).append(got)
        # a value the store frees while the object is ours stays intact
        got = s.get("m")
        assert s.remove("m", force=True) == 0
        assert got == vals["m"] and s.get("m") == b""
    finally:
        s.close()


def test_values_of_every_buffer_kind(store):
    arr = np.arange(1000, dtype=np.float32)
    for i, v in enumerate([b"b", bytearray(b"ba"), memoryview(b"mv"), arr, b"x" * (3 * MIB)]):
        assert store.put(f"v{i}", v) == 0
        assert store.get(f"v{i}") == bytes(memoryview(v).cast("B"))
    # keys may be bytes too
    assert store.put(b"bk", b"1") == 0 and store.get("bk") == b"1"


def test_put_parts_and_batches(store):
    assert store.put_parts("p", b"ab", bytearray(b"cd"), memoryview(b"ef")) == 0
    assert store.get("p") == b"abcdef"
    assert store.put_batch(["a", "b"], [b"1", b"22"]) == 0
    assert store.get_batch(["a", "b", "absent"]) == [b"1", b"22", b""]
    assert store.put_batch([], []) == 0 and store.get_batch([]) == []
    assert store.batch_remove(["a", "absent"]) == [ms.OBJECT_HAS_LEASE, ms.OBJECT_NOT_FOUND]
    assert store.batch_remove(["a", "absent"], force=True) == [0, ms.OBJECT_NOT_FOUND]


def test_get_buffer_exposes_the_bytes_without_a_copy(store):
    data = os.urandom(200000)
    store.put("big", data)
    h = store.get_buffer("big")
    assert isinstance(h, BufferHandle)
    assert len(h) == h.size() == len(data)
    assert bytes(h) == data
    view = np.frombuffer(h, dtype=np.uint8)  # a view over the handle's memory
    assert view.ctypes.data == h.ptr()
    assert store.get_buffer("absent") is None
    hs = store.batch_get_buffer(["big", "absent"])
    assert bytes(hs[0]) == data and hs[1] is None


def test_removes(store):
    for i in range(5):
        store.put(f"r/{i}", b"x")
    store.put("other", b"y")
    assert store.remove("r/0") == 0
    assert store.remove("r/0") == ms.OBJECT_NOT_FOUND
    assert store.remove_by_regex("^r/") == 4
    assert store.remove_by_regex("[") == ms.INVALID_PARAMS
    store.get("other")  # a lease: only a forced remove takes it
    assert store.remove("other") == ms.OBJECT_HAS_LEASE
    assert store.remove_all() == 0
    assert store.remove_all(force=True) == 1
    assert store.remove("other", force=True) == ms.OBJECT_NOT_FOUND


def registered(store, n, fill=None):
    a = np.zeros(n, dtype=np.uint8) if fill is None else fill
    assert store.register_buffer(a.ctypes.data, a.nbytes) == 0
    return a


def test_zero_copy_calls_on_registered_memory(store):
    src = registered(store, 0, np.frombuffer(os.urandom(1 << 16), dtype=np.uint8).copy())
    dst = registered(store, 1 << 16)
    p, q = src.ctypes.data, dst.ctypes.data
    assert store.put_from("z", p, 1000) == 0
    assert store.get_into("z", q, 1 << 16) == 1000
    assert bytes(dst[:1000]) == bytes(src[:1000])
    # a buffer too small is a negative status, nothing written
    assert store.get_into("z", q, 999) == ms.BUFFER_OVERFLOW
    assert store.get_into("absent", q, 10) == ms.OBJECT_NOT_FOUND
    assert store.batch_put_from(["z1", "z2"], [p, p + 100], [10, 20]) == [0, 0]
    dst[:] = 0
    assert store.batch_get_into(["z1", "z2", "absent"], [q, q + 100, q + 200],
                                [10, 20, 10]) == [10, 20, ms.OBJECT_NOT_FOUND]
    assert bytes(dst[:10]) == bytes(src[:10]) and bytes(dst[100:120]) == bytes(src[100:120])
    assert store.upsert_from("z", p + 5, 7) == 0
    assert store.get("z") == bytes(src[5:12])
    assert store.batch_upsert_from(["z1"], [p + 50], [3]) == [0]
    assert store.get("z1") == bytes(src[50:53])
    assert store.unregister_buffer(p) == 0 and store.unregister_buffer(q) == 0


def test_multi_buffer_calls_gather_and_scatter(store):
    src = registered(store, 0, np.frombuffer(os.urandom(1 << 16), dtype=np.uint8).copy())
    dst = registered(store, 1 << 16)
    p, q = src.ctypes.data, dst.ctypes.data
    # per-layer pages: key i's value is pieces from several places
    keys = ["L0", "L1"]
    ptrs = [[p, p + 4096, p + 8192], [p + 20000]]
    sizes = [[100, 200, 300], [50]]
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes) == [0, 0]
    assert store.get("L0") == bytes(src[:100]) + bytes(src[4096:4296]) + bytes(src[8192:8492])
    out = [[q, q + 1000, q + 2000], [q + 5000, q + 6000]]
    assert store.batch_get_into_multi_buffers(keys, out, [[100, 200, 300], [20, 30]]) == [600, 50]
    assert bytes(dst[1000:1200]) == bytes(src[4096:4296])
    assert bytes(dst[5000:5020]) + bytes(dst[6000:6030]) == bytes(src[20000:20050])
    assert store.batch_get_into_multi_buffers(keys, out, [[1, 1, 1], [1, 1]],
                                              prefer_alloc_in_same_node=True) == \
        [ms.BUFFER_OVERFLOW, ms.BUFFER_OVERFLOW]
    assert store.batch_upsert_from_multi_buffers(["L1"], [[p]], [[9]]) == [0]
    assert store.get("L1") == bytes(src[:9])
    store.unregister_buffer(p)
    store.unregister_buffer(q)


def test_pointer_calls_refuse_unregistered_memory(store):
    junk = 0x1000  # never dereferenced: refused before the library is asked
    assert store.put_from("u", junk, 10) == ms.INVALID_PARAMS
    assert store.get_into("u", junk, 10) == ms.INVALID_PARAMS
    assert store.batch_put_from(["u"], [junk], [10]) == [ms.INVALID_PARAMS]
    assert store.batch_get_into(["u"], [junk], [10]) == [ms.INVALID_PARAMS]
    assert store.batch_put_from_multi_buffers(["u"], [[junk]], [[10]]) == [ms.INVALID_PARAMS]
    assert store.batch_get_into_multi_buffers(["u"], [[junk]], [[10]]) == [ms.INVALID_PARAMS]
    a = registered(store, 100)
    # a range running past the registered buffer is refused too
    assert store.put_from("u", a.ctypes.data + 50, 100) == ms.INVALID_PARAMS
    store.unregister_buffer(a.ctypes.data)
    assert store.put_from("u", a.ctypes.data, 10) == ms.INVALID_PARAMS
    assert store.unregister_buffer(a.ctypes.data) == ms.ADDRESS_NOT_REGISTERED


def test_upsert_replaces_and_put_keeps(store):
    store.put("u", b"one")
    assert store.upsert("u", b"two-two") == 0
    assert store.get("u") == b"two-two"
    assert store.upsert("fresh", b"new") == 0 and store.get("fresh") == b"new"
    assert store.upsert_parts("u", b"a", b"b") == 0 and store.get("u") == b"ab"
    assert store.upsert_batch(["u", "v"], [b"3", b"4"]) == 0
    assert store.get_batch(["u", "v"]) == [b"3", b"4"]


def test_replicate_config_matches_upstream():
    c = ReplicateConfig()
    assert c.replica_num == 1
    assert c.soft_pin_action is SoftPinAction.PRESERVE
    assert c.soft_pin_ttl_ms is None and not c.with_hard_pin and not c.with_soft_pin
    assert c.preferred_segment == "" and c.preferred_segments == []
    assert not c.prefer_alloc_in_same_node
    c.with_soft_pin = True
    assert c.soft_pin_action is SoftPinAction.ENABLE
    c.soft_pin_ttl_ms = 2**64 - 1
    c.soft_pin_ttl_ms = None
    for bad in (-1, 2**64, 1.5, "10", True):
        with pytest.raises(TypeError, match="soft_pin_ttl_ms"):
            c.soft_pin_ttl_ms = bad
    with pytest.raises(ValueError, match="PRESERVE, ENABLE or DISABLE"):
        c.soft_pin_action = 5
    with pytest.raises(TypeError, match="soft_pin_action"):
        c.soft_pin_action = "ENABLE"
    with pytest.raises(TypeError, match=r"preferred_segments\[1\]"):
        c.preferred_segments = ["a", 2]
    with pytest.raises(TypeError, match="replica_num"):
        c.replica_num = "2"
    c.preferred_segments = ["n1", "n2"]
    got = c.preferred_segments
    got.append("x")  # a copy, as upstream's
    assert c.preferred_segments == ["n1", "n2"]
    s = str(c)
    assert "soft_pin_action=ENABLE" in s and "preferred_segments=['n1', 'n2']" in s
    assert ReplicateConfig(replica_num=3).replica_num == 3
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        ReplicateConfig(nope=1)


def test_soft_pin_ttl_without_enable_is_invalid_params(store):
    c = ReplicateConfig()
    c.soft_pin_ttl_ms = 1000
    assert store.put("sp", b"x", c) == ms.INVALID_PARAMS
    c.soft_pin_action = SoftPinAction.DISABLE
    assert store.put("sp", b"x", config=c) == ms.INVALID_PARAMS
    c.soft_pin_action = SoftPinAction.ENABLE
    assert store.put("sp", b"x", config=c) == 0
    c.with_hard_pin = True
    assert store.upsert("sp", b"y", config=c) == 0 and store.get("sp") == b"y"


def pinned_count(cluster):
    import urllib.request
    with urllib.request.urlopen(f"http://{cluster.http}/metrics") as r:
        metrics = r.read().decode()
    line = [ln for ln in metrics.splitlines() if ln.startswith("master_soft_pin_key_count")]
    return float(line[0].split()[-1])


def test_soft_pin_action_and_ttl_reach_the_master_per_put(store, cluster):
    base = pinned_count(cluster)
    c = ReplicateConfig()
    c.soft_pin_action = SoftPinAction.ENABLE
    c.soft_pin_ttl_ms = 600000
    assert store.put("pinned", b"x", c) == 0
    assert store.put("plain", b"x") == 0
    assert pinned_count(cluster) == base + 1
    # PRESERVE keeps the pin through an upsert, DISABLE drops it
    assert store.upsert("pinned", b"y") == 0
    assert pinned_count(cluster) == base + 1
    d = ReplicateConfig()
    d.soft_pin_action = SoftPinAction.DISABLE
    assert store.upsert("pinned", b"z", d) == 0
    assert pinned_count(cluster) == base
    # ENABLE with a TTL of 0 pins nothing (upstream)
    c.soft_pin_ttl_ms = 0
    assert store.put("zero", b"x", c) == 0
    assert pinned_count(cluster) == base


def test_two_clients_with_two_replicas(cluster):
    a = new_store(cluster, segment=32 * MIB)
    b = new_store(cluster, segment=32 * MIB)
    try:
        c = ReplicateConfig()
        c.replica_num = 2
        assert a.put("two", b"r" * 1000, c) == 0
        reps = a.get_replica_desc("two")
        assert len(reps) == 2
        segs = {r.get_memory_descriptor().buffer_descriptor.transport_endpoint for r in reps}
        assert len(segs) == 2
        d = reps[0].get_memory_descriptor().buffer_descriptor
        assert d.size == 1000 and d.buffer_address != 0 and d.transport_endpoint_ in segs
        assert reps[0].status == ms.ReplicaStatus.COMPLETE and reps[0].is_memory_replica()
        assert f"transport_endpoint={d.transport_endpoint}" in repr(d)
        assert b.get("two") == b"r" * 1000
        # a preferred segment is honoured
        c = ReplicateConfig()
        c.preferred_segment = b.get_hostname()
        assert a.put("pref", b"p", c) == 0
        rep = a.get_replica_desc("pref")[0].get_memory_descriptor().buffer_descriptor
        assert rep.transport_endpoint == b.get_hostname()
        desc = a.batch_get_replica_desc(["two", "absent"])
        assert list(desc) == ["two"]
    finally:
        a.remove_all(force=True)
        a.close()
        b.close()


def test_setup_close_setup_and_calls_on_a_closed_store(cluster):
    s = MooncakeDistributedStore()
    # never set up: errors, never a crash
    assert s.put("k", b"v") == ms.INVALID_PARAMS
    assert s.get("k") == b"" and s.get_buffer("k") is None
    assert s.batch_is_exist(["a", "b"]) == [ms.INVALID_PARAMS] * 2
    assert s.get_batch(["a"]) == [b""]
    assert s.get_hostname() == ""
    assert s.close() == 0
    for _ in range(2):
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, cluster.protocol, "",
                       cluster.master) == 0
        assert s.put("cc", b"1") in (0,) and s.get("cc") == b"1"
        s.remove("cc", force=True)
        assert s.close() == 0
        assert s.put("k", b"v") == ms.INVALID_PARAMS and s.get("cc") == b""
    # setup on a set-up store replaces the client
    assert s.setup("127.0.0.1", "master", 0, 16 * MIB, cluster.protocol, "", cluster.master) == 0
    first = s.get_hostname()
    assert s.setup("localhost", "master", 0, 16 * MIB, cluster.protocol, "", cluster.master) == 0
    assert s.get_hostname() != first
    s.close()


def test_setup_with_a_config_dict(cluster):
    s = MooncakeDistributedStore()
    cfg = {"local_hostname": "localhost", "metadata_server": "master",
           "global_segment_size": "16MB", "local_buffer_size": "16 MB", "protocol": cluster.protocol,
           "rdma_devices": "", "master_server_addr": cluster.master}
    assert s.setup(cfg) == 0
    assert s.get_hostname().startswith("localhost:")
    assert s.put("d", b"1") == 0 and s.get("d") == b"1"
    s.remove("d", force=True)
    s.close()
    for size in ("50%", "lots", "-1MB", -5):
        assert s.setup(dict(cfg, global_segment_size=size)) != 0
    assert s.setup({"metadata_server": "master"}) != 0


def test_setup_refuses_metadata_servers_it_cannot_serve(cluster, caplog):
    s = MooncakeDistributedStore()
    for bad in ("etcd://127.0.0.1:2379", "127.0.0.1:2379", ""):
        with caplog.at_level("ERROR", logger="mooncake"):
            caplog.clear()
            assert s.setup("127.0.0.1", bad, 0, MIB, "tcp", "", cluster.master) != 0
        assert "P2PHANDSHAKE" in caplog.text and "redis://" in caplog.text
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, MIB, "nvlink", "", cluster.master) != 0
    assert s.setup("127.0.0.1:70000", "P2PHANDSHAKE", 0, MIB, "tcp", "", cluster.master) != 0
    assert not s._is_setup()


def test_setup_extra_upstream_arguments(cluster, caplog):
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError, match="'engine'"):
        s.setup("127.0.0.1", "master", 0, MIB, "tcp", "", cluster.master, engine=object())
    assert s.setup("127.0.0.1", "master", 0, MIB, "tcp", "", cluster.master,
                   tenant_id="t1") == ms.NOT_SUPPORTED
    MooncakeDistributedStore._warned.clear()  # one warning per process: the first
    with caplog.at_level("WARNING", logger="mooncake"):
        for _ in range(2):
            assert s.setup("127.0.0.1", "master", 0, MIB, "tcp", "", cluster.master,
                           enable_ssd_offload=True) == 0
    assert caplog.text.count("ignored") == 1
    s.close()
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", "master", 0, MIB, "tcp", "", cluster.master, bogus=1)


def test_setup_with_a_shared_transfer_engine(cluster, caplog):
    """SGLang's HiCache with rdma and P2PHANDSHAKE hands its disaggregation
    TransferEngine (get_engine()) to setup as the 8th argument, with that
    engine's "host:port" as local_hostname. mooncake-c's store runs its own
    engine on the same host at another port (the engine holds that one),
    warned once; the store works."""
    from mooncake.engine import TransferEngine
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", cluster.protocol, "") == 0
    s = MooncakeDistributedStore()
    try:
        session = f"127.0.0.1:{te.get_rpc_port()}"
        MooncakeDistributedStore._warned.clear()
        with caplog.at_level("WARNING", logger="mooncake"):
            assert s.setup(session, "P2PHANDSHAKE", 0, 4 * MIB, cluster.protocol, "",
                           cluster.master, te.get_engine()) == 0
        assert "runs its own transfer engine" in caplog.text
        host, port = s.get_hostname().rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) != te.get_rpc_port()
        assert s.put("shared-engine", b"v" * 100) == 0
        assert s.get("shared-engine") == b"v" * 100
        s.close()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MIB, cluster.protocol, "",
                       cluster.master, engine=te) == 0
        assert s.get("shared-engine") == b"v" * 100
        s.remove("shared-engine")
    finally:
        s.close()
        te._close()


def test_setup_ssd_offload_path_takes_the_directory_for_this_node(cluster, tmp_path):
    d = tmp_path / "offload"
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "master", 16 * MIB, MIB, "tcp", "", cluster.master,
                   enable_ssd_offload=True, ssd_offload_path=str(d)) == 0
    assert (d / ".lock").exists()  # the node's offload directory, locked
    other = MooncakeDistributedStore()
    # a second node on the same directory is refused (the lock file)
    assert other.setup("127.0.0.1", "master", 16 * MIB, MIB, "tcp", "", cluster.master,
                       enable_ssd_offload=True, ssd_offload_path=str(d)) < 0
    s.close()
    # offload needs a segment of this node to keep objects of
    assert other.setup({"local_hostname": "127.0.0.1", "metadata_server": "master",
                        "global_segment_size": 0, "master_server_addr": cluster.master,
                        "enable_ssd_offload": True, "ssd_offload_path": str(d)}) < 0


def test_wrong_argument_types_raise_type_error_naming_the_argument(store):
    cases = [
        (lambda: store.put(1, b"v"), "'key'"),
        (lambda: store.put("k", "str value"), "'value'"),
        (lambda: store.put("k", b"v", config=3), "'config'"),
        (lambda: store.put("k", b"v", cfg=None), "unexpected keyword argument 'cfg'"),
        (lambda: store.put("k"), "missing required argument 'value'"),
        (lambda: store.get(None), "'key'"),
        (lambda: store.put_parts("k", b"a", 5), r"'parts\[1\]'"),
        (lambda: store.put_batch("ab", [b"1", b"2"]), "'keys'"),
        (lambda: store.put_batch(["a", 2], [b"1", b"2"]), r"'keys\[1\]'"),
        (lambda: store.put_batch(["a"], [3]), r"'values\[0\]'"),
        (lambda: store.get_into("k", "0x10", 4), "'buffer_ptr'"),
        (lambda: store.get_into("k", 1.5, 4), "'buffer_ptr'"),
        (lambda: store.batch_get_into(["k"], [1], ["4"]), r"'sizes\[0\]'"),
        (lambda: store.batch_put_from_multi_buffers(["k"], [1], [[1]]),
         r"'all_buffer_ptrs\[0\]'"),
        (lambda: store.batch_get_into_multi_buffers(["k", "l"], [[1], [1, "x"]], [[1], [1, 1]]),
         r"'all_buffer_ptrs\[1\]\[1\]'"),
        (lambda: store.batch_put_from_multi_buffers(["k"], [[1]], [[None]]),
         r"'all_sizes\[0\]\[0\]'"),
        (lambda: store.put_parts("k", b"a", b"b", None), r"'parts\[2\]'"),
        (lambda: store.upsert_batch(["a", "b"], [b"1", 2]), r"'values\[1\]'"),
        (lambda: store.batch_is_exist(["a", 3]), r"'keys\[1\]'"),
        (lambda: store.remove_by_regex(3), "'regex_pattern'"),
        (lambda: store.register_buffer("p", 1), "'buffer_ptr'"),
        (lambda: store.is_exist(b"k", b"extra"), "at most 1 argument"),
    ]
    for call, pat in cases:
        with pytest.raises(TypeError, match=pat):
            call()
    with pytest.raises(ValueError, match="'size'"):
        store.get_into("k", 16, -1)


def test_mismatched_list_lengths_are_invalid_params_as_upstream(store, caplog):
    """Upstream answers lists of different lengths with its error value for
    every key (no exception): INVALID_PARAMS, logged naming the lists; no
    key is written, not even the ones whose lists would have matched."""
    bad = ms.INVALID_PARAMS
    src = np.frombuffer(b"mismatch" * 8, dtype=np.uint8).copy()
    p = src.ctypes.data
    assert store.register_buffer(p, src.nbytes) == 0
    try:
        with caplog.at_level("ERROR", logger="mooncake"):
            assert store.put_batch(["mm-a", "mm-b"], [b"1"]) == bad
            assert "'keys' and 'values'" in caplog.text
            assert store.upsert_batch(["mm-a"], [b"1", b"2"]) == bad
            assert store.batch_put_from(["mm-a", "mm-b"], [p], [8, 8]) == [bad, bad]
            assert "'keys' and 'buffer_ptrs'" in caplog.text
            assert store.batch_upsert_from(["mm-a"], [p], [8, 8]) == [bad]
            assert store.batch_get_into(["mm-a"], [p], [8, 8]) == [bad]
            assert "'keys' and 'sizes'" in caplog.text
            # one key's lists of different lengths fail every key (upstream)
            assert store.batch_put_from_multi_buffers(
                ["mm-a", "mm-b"], [[p], [p, p + 8]], [[8], [8]]) == [bad, bad]
            assert "'all_buffer_ptrs[1]' and 'all_sizes[1]'" in caplog.text
            assert store.batch_get_into_multi_buffers(["mm-a"], [[p, p]], [[1]]) == [bad]
            assert store.batch_put_from_multi_buffers(["mm-a"], [[p]], [[1], [2]]) == [bad]
            assert "'keys' and 'all_sizes'" in caplog.text
            assert store.batch_upsert_from_multi_buffers(["mm-a", "mm-b"], [[p]], [[1]]) == [
                bad, bad]
        assert store.batch_is_exist(["mm-a", "mm-b"]) == [0, 0]
        # the types of the items are still checked first (TypeError)
        with pytest.raises(TypeError, match=r"'sizes\[0\]'"):
            store.batch_put_from(["mm-a", "mm-b"], [p], ["8"])
    finally:
        store.unregister_buffer(p)


def test_bad_keys_and_values_are_negative_statuses(store):
    assert store.put("", b"v") == ms.INVALID_KEY
    assert store.put("k" * 5000, b"v") == ms.INVALID_KEY
    assert store.put("k", b"") == ms.INVALID_PARAMS
    assert store.get("") == b""
    assert store.batch_is_exist(["", "k"]) == [ms.INVALID_KEY, 0]
    c = ReplicateConfig()
    c.replica_num = 0
    assert store.put("k", b"v", c) == ms.INVALID_PARAMS
    c.replica_num = 2**40
    with pytest.raises(ValueError, match="replica_num"):
        store.put("k", b"v", c)


def test_error_codes_are_upstream_numbers():
    assert ms.OBJECT_NOT_FOUND == -704
    assert ms.INVALID_PARAMS == -600
    assert ms.OBJECT_ALREADY_EXISTS == -705
    assert ms.ErrorCode(-704).name == "OBJECT_NOT_FOUND"


def test_http_metadata_strings_of_upstream(cluster):
    # the master serves upstream's HTTP metadata protocol on its HTTP port
    s = new_store(cluster, meta=f"http://{cluster.http}/metadata", segment=16 * MIB)
    try:
        assert s.put("hm", b"via http metadata") == 0
        assert s.get("hm") == b"via http metadata"
    finally:
        s.remove_all(force=True)
        s.close()


def test_get_into_ranges_as_upstream_documents_it(store):
    """Upstream's example: two registered buffers, fragments of two keys in
    each (several per key, interleaved), results per buffer, key, fragment;
    then a missing key, a range past the end of the value, an unregistered
    destination and shapes that do not match give negative entries (as
    upstream), wrong types raise."""
    key1, key2 = os.urandom(40), os.urandom(40)
    assert store.put("key1", key1) == 0 and store.put("key2", key2) == 0
    b0 = np.zeros(32, dtype=np.uint8)
    b1 = np.zeros(32, dtype=np.uint8)
    p0, p1 = b0.ctypes.data, b1.ctypes.data
    assert store.register_buffer(p0, 32) == 0 and store.register_buffer(p1, 32) == 0
    try:
        r = store.get_into_ranges(
            [p0, p1],
            [["key1", "key2"], ["key2", "key1"]],
            [[[0, 20], [8]], [[4], [16]]],
            [[[1, 30], [2]], [[0], [10]]],
            [[[4, 3], [5]], [[6], [4]]])
        assert r == [[[4, 3], [5]], [[6], [4]]]
        assert bytes(b0[0:4]) == key1[1:5] and bytes(b0[20:23]) == key1[30:33]
        assert bytes(b0[8:13]) == key2[2:7] and bytes(b1[4:10]) == key2[0:6]
        assert bytes(b1[16:20]) == key1[10:14]
        assert not b0[4:8].any() and not b0[13:20].any()  # nothing else written
        # one missing key does not fail the others of its buffer
        r = store.get_into_ranges([p0], [["absent", "key1"]], [[[0], [0]]], [[[0], [36]]],
                                  [[[4], [4]]])
        assert r == [[[ms.OBJECT_NOT_FOUND], [4]]] and bytes(b0[0:4]) == key1[36:40]
        # past the end of the value, outside the registered buffer
        r = store.get_into_ranges([p0, p0], [["key1"], ["key1"]], [[[0, 0]], [[30]]],
                                  [[[38, 0]], [[0]]], [[[4, 0]], [[4]]])
        assert r == [[[ms.INVALID_PARAMS, 0]], [[ms.INVALID_PARAMS]]]
        # shapes that do not match: negative entries, as upstream's
        I = ms.INVALID_PARAMS
        r = store.get_into_ranges([p0, p1], [["key1"], ["key2"]], [[[0]], [[0]]],
                                  [[[0]], [[0]]], [[[4]]])
        assert r == [[[4]], [[I]]]
        r = store.get_into_ranges([p0], [["key1", "key2"]], [[[0, 4], [8]]], [[[0], [0]]],
                                  [[[4, 4], [4]]])
        assert r == [[[I, I], [4]]]
        assert store.get_into_ranges([], [], [], [], []) == []
        with pytest.raises(TypeError, match="all_keys"):
            store.get_into_ranges([p0], "key1", [[[0]]], [[[0]]], [[[4]]])
        with pytest.raises(TypeError, match="buffer_ptrs"):
            store.get_into_ranges(["p0"], [["key1"]], [[[0]]], [[[0]]], [[[4]]])
        with pytest.raises(ValueError, match="all_src_offsets"):
            store.get_into_ranges([p0], [["key1"]], [[[0]]], [[[-1]]], [[[4]]])
    finally:
        store.unregister_buffer(p0)
        store.unregister_buffer(p1)


def test_get_into_ranges_from_our_own_segment_and_a_closed_store(cluster):
    s = new_store(cluster, segment=16 * MIB)
    try:
        cfg = ReplicateConfig()
        cfg.preferred_segment = s.get_hostname()
        v = os.urandom(100000)
        assert s.put("own", v, cfg) == 0
        desc = s.get_replica_desc("own")[0].get_memory_descriptor().buffer_descriptor
        assert desc.transport_endpoint == s.get_hostname()  # read with a local copy
        b = np.zeros(64, dtype=np.uint8)
        assert s.register_buffer(b.ctypes.data, 64) == 0
        r = s.get_into_ranges([b.ctypes.data], [["own"]], [[[0, 32]]], [[[99968, 5]]],
                              [[[32, 10]]])
        assert r == [[[32, 10]]]
        assert bytes(b[:32]) == v[99968:] and bytes(b[32:42]) == v[5:15]
        s.unregister_buffer(b.ctypes.data)
    finally:
        s.close()
    assert s.get_into_ranges([1 << 20], [["own"]], [[[0]]], [[[0]]], [[[4]]]) == \
        [[[ms.INVALID_PARAMS]]]


def test_put_from_with_metadata_and_init_all_as_upstream(store, cluster):
    """put_from_with_metadata: one object, the metadata bytes then the data
    bytes, from registered memory; size 0 stores nothing and returns 0, a
    store that is not set up -1, as upstream. init_all on a store that is set
    up: INVALID_PARAMS, as upstream."""
    data = np.frombuffer(b"payload-" * 4, dtype=np.uint8).copy()
    meta = np.frombuffer(b"META", dtype=np.uint8).copy()
    for a in (data, meta):
        assert store.register_buffer(a.ctypes.data, a.nbytes) == 0
    try:
        assert store.put_from_with_metadata("pfwm", data.ctypes.data, meta.ctypes.data,
                                            data.nbytes, meta.nbytes) == 0
        assert store.get("pfwm") == b"META" + b"payload-" * 4
        assert store.put_from_with_metadata("pfwm-0", data.ctypes.data, meta.ctypes.data, 0,
                                            4) == 0
        assert store.is_exist("pfwm-0") == 0
        cfg = ReplicateConfig()
        cfg.prefer_alloc_in_same_node = True
        assert store.put_from_with_metadata("pfwm-1", data.ctypes.data, meta.ctypes.data, 8, 4,
                                            cfg) == -1
        # not registered memory: refused, nothing read
        assert store.put_from_with_metadata("pfwm-2", 4096, meta.ctypes.data, 8, 4) == \
            ms.INVALID_PARAMS
        with pytest.raises(TypeError, match="'metadata_size'"):
            store.put_from_with_metadata("pfwm-3", data.ctypes.data, meta.ctypes.data, 8, "4")
    finally:
        for a in (data, meta):
            store.unregister_buffer(a.ctypes.data)
    assert MooncakeDistributedStore().put_from_with_metadata("k", 1, 1, 1, 1) == -1
    assert store.init_all(cluster.protocol, "") == ms.INVALID_PARAMS
