"""The cluster secret from Python: a master and a storage node started with
[security] secret_file; setup() gets in with the same secret (keyword,
config key "secret_file" or $MC_SECRET_FILE) and is refused without it or
with another one; TransferEngine.initialize takes it too."""
import os

import numpy as np
import pytest

from mooncake import store as ms
from mooncake.engine import TransferEngine
from mooncake.store import MooncakeDistributedStore

from conftest import make_cluster

MIB = 1 << 20


def write_secret(d, name, text, mode=0o600):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(text)
    os.chmod(p, mode)
    return p


@pytest.fixture(scope="module")
def secrets(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("secrets"))
    return {"good": write_secret(d, "good", "the-cluster-secret-0123456789\n"),
            "other": write_secret(d, "other", "another-secret-9876543210abcdef\n"),
            "short": write_secret(d, "short", "short\n"),
            "open": write_secret(d, "open", "the-cluster-secret-0123456789\n", 0o644),
            "missing": os.path.join(d, "absent")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, secrets):
    s = ["--set", f"security.secret_file={secrets['good']}"]
    c = make_cluster(tmp_path_factory, nodes=0, master_args=s)
    try:
        c.add_node(extra=s)
    except Exception:
        c.stop()
        raise
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def no_env_secret():
    os.environ.pop("MC_SECRET_FILE", None)
    yield
    os.environ.pop("MC_SECRET_FILE", None)


def open_store(cluster, s, **kw):
    return s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", cluster.master, **kw)


def round_trip(s, key):
    assert s.put(key, b"secret-ok " + key.encode()) == 0
    assert s.get(key) == b"secret-ok " + key.encode()
    assert s.remove(key, force=True) == 0


def test_the_right_secret_gets_in_every_way_it_can_be_given(cluster, secrets):
    s = MooncakeDistributedStore()
    assert open_store(cluster, s, secret_file=secrets["good"]) == 0
    round_trip(s, "kw")  # the value goes to and comes from the node: its data port too
    assert s.close() == 0
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
           "global_segment_size": 0, "local_buffer_size": "16MB", "protocol": "tcp",
           "master_server_addr": cluster.master, "secret_file": secrets["good"]}
    assert s.setup(cfg) == 0
    round_trip(s, "cfg")
    s.close()
    os.environ["MC_SECRET_FILE"] = secrets["good"]  # for hosts that call setup(7 positional)
    assert open_store(cluster, s) == 0
    round_trip(s, "env")
    s.close()


def test_no_secret_or_another_one_is_refused(cluster, secrets):
    s = MooncakeDistributedStore()
    assert open_store(cluster, s) < 0
    assert open_store(cluster, s, secret_file=secrets["other"]) < 0
    os.environ["MC_SECRET_FILE"] = secrets["other"]
    assert open_store(cluster, s) < 0
    # the keyword wins over the environment
    assert open_store(cluster, s, secret_file=secrets["good"]) == 0
    s.close()
    assert s.put("k", b"v") == ms.INVALID_PARAMS


@pytest.mark.parametrize("which", ["short", "open", "missing"])
def test_a_bad_secret_file_fails_setup(cluster, secrets, which):
    s = MooncakeDistributedStore()
    assert open_store(cluster, s, secret_file=secrets[which]) == ms.INVALID_ARGUMENT
    assert not s._is_setup()


def test_a_wrong_secret_type_raises_type_error(cluster):
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError, match="'secret_file'"):
        open_store(cluster, s, secret_file=3)
    with pytest.raises(TypeError, match="'secret_file'"):
        TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "", secret_file=b"x")


def test_engines_with_the_secret_transfer_and_one_without_is_refused(secrets):
    a, b, c = TransferEngine(), TransferEngine(), TransferEngine()
    for e, sec in ((a, secrets["good"]), (b, secrets["good"]), (c, None)):
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "", secret_file=sec) == 0
    src = np.frombuffer(os.urandom(4096), dtype=np.uint8).copy()
    dst = np.zeros(4096, dtype=np.uint8)
    assert a.register_memory(src.ctypes.data, src.nbytes) == 0
    assert b.register_memory(dst.ctypes.data, dst.nbytes) == 0
    assert c.register_memory(src.ctypes.data, src.nbytes) == 0
    peer = f"127.0.0.1:{b.get_rpc_port()}"
    assert a.transfer_sync_write(peer, src.ctypes.data, dst.ctypes.data, 4096) == 0
    assert bytes(dst) == bytes(src)
    dst[:] = 0
    assert c.transfer_sync_write(peer, src.ctypes.data, dst.ctypes.data, 4096) < 0
    assert not dst.any()
    assert bad_engine(secrets["short"]) == ms.INVALID_ARGUMENT


def bad_engine(path):
    return TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "", secret_file=path)
