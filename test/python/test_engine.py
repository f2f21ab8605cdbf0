"""mooncake.engine.TransferEngine: two engines in this process (P2PHANDSHAKE,
and the master's embedded metadata service), every call the prefill/decode
connectors make, sync, async and batch transfers, managed buffers, and bad
input."""
import os
import time

import numpy as np
import pytest

from mooncake.engine import Read, TransferEngine, TransferOpcode, Write
from mooncake.store import ErrorCode

from conftest import make_cluster


def engine(meta="P2PHANDSHAKE", proto="tcp", host="127.0.0.1"):
    e = TransferEngine()
    assert e.initialize(host, meta, proto, "") == 0
    return e


@pytest.fixture(scope="module")
def pair():
    a, b = engine(), engine()
    yield a, b
    a._close()
    b._close()


def buf(n, random=False):
    return np.frombuffer(os.urandom(n), dtype=np.uint8).copy() if random else np.zeros(n, np.uint8)


def test_initialize_picks_a_port_and_peers_target_host_port(pair):
    a, b = pair
    for e in (a, b):
        assert 12300 <= e.get_rpc_port() < 14300
    assert a.get_rpc_port() != b.get_rpc_port()
    assert b.get_local_hostname() == f"127.0.0.1:{b.get_rpc_port()}"


def test_sync_reads_and_writes(pair):
    a, b = pair
    src, dst = buf(1 << 20, True), buf(1 << 20)
    assert a.register_memory(src.ctypes.data, src.nbytes) == 0
    assert b.register_memory(dst.ctypes.data, dst.nbytes, "cpu:0") == 0
    tgt = f"127.0.0.1:{b.get_rpc_port()}"
    assert a.transfer_sync_write(tgt, src.ctypes.data, dst.ctypes.data, 1 << 20) == 0
    assert np.array_equal(src, dst)
    back = buf(4096)
    assert a.register_memory(back.ctypes.data, back.nbytes) == 0
    assert a.transfer_sync_read(tgt, back.ctypes.data, dst.ctypes.data + 100, 4096) == 0
    assert bytes(back) == bytes(src[100:4196])
    assert a.transfer_sync(tgt, back.ctypes.data, dst.ctypes.data, 10, TransferOpcode.Read) == 0
    assert a.transfer_sync(tgt, back.ctypes.data, dst.ctypes.data, 10, Write, None) == 0
    assert a.get_first_buffer_address(tgt) == dst.ctypes.data
    for p in (src, back):
        assert a.unregister_memory(p.ctypes.data) == 0
    assert b.unregister_memory(dst.ctypes.data) == 0


def test_batch_sync_async_and_submitted_transfers(pair):
    a, b = pair
    src, dst = buf(64 * 4096, True), buf(64 * 4096)
    assert a.batch_register_memory([src.ctypes.data], [src.nbytes]) == 0
    assert b.batch_register_memory([dst.ctypes.data], [dst.nbytes]) == 0
    tgt = f"127.0.0.1:{b.get_rpc_port()}"
    offs = [i * 4096 for i in range(64)]
    assert a.batch_transfer_sync_write(tgt, [src.ctypes.data + o for o in offs],
                                       [dst.ctypes.data + o for o in offs], [4096] * 64) == 0
    assert np.array_equal(src, dst)
    dst[:] = 0
    bid = a.batch_transfer_async_write(tgt, [src.ctypes.data], [dst.ctypes.data], [8192])
    bid2 = a.batch_transfer_async(tgt, [src.ctypes.data + 8192], [dst.ctypes.data + 8192],
                                  [100], Write)
    assert bid > 0 and bid2 > 0
    assert a.get_batch_transfer_status([bid, bid2]) == 0
    assert bytes(dst[:8292]) == bytes(src[:8292])
    # an id already consumed (or never given) is refused, not dereferenced
    assert a.get_batch_transfer_status([bid]) == -1
    assert a.transfer_check_status(12345) == -1
    bid = a.transfer_submit_write(tgt, src.ctypes.data, dst.ctypes.data + 9000, 10)
    deadline = time.time() + 10
    while (r := a.transfer_check_status(bid)) == 0 and time.time() < deadline:
        time.sleep(0.001)
    assert r == 1
    back = buf(100)
    a.register_memory(back.ctypes.data, 100)
    assert a.batch_transfer_sync_read(tgt, [back.ctypes.data], [dst.ctypes.data + 9000],
                                      [10]) == 0
    assert bytes(back[:10]) == bytes(src[:10])
    bid = a.batch_transfer_async_read(tgt, [back.ctypes.data], [dst.ctypes.data], [50])
    assert a.get_batch_transfer_status([bid]) == 0
    assert a.batch_unregister_memory([src.ctypes.data, back.ctypes.data]) == 0
    assert b.batch_unregister_memory([dst.ctypes.data]) == 0


def test_managed_buffers_and_byte_copies(pair):
    a, b = pair
    m = b.allocate_managed_buffer(1 << 16)
    assert m != 0
    assert b.write_bytes_to_buffer(m, b"hello world", 11) == 0
    assert b.read_bytes_from_buffer(m, 11) == b"hello world"
    src = a.allocate_managed_buffer(4096)
    tgt = f"127.0.0.1:{b.get_rpc_port()}"
    assert a.transfer_sync_read(tgt, src, m, 11) == 0
    assert a.read_bytes_from_buffer(src, 5) == b"hello"
    # managed memory is freed by free_managed_buffer only
    assert b.unregister_memory(m) != 0
    assert b.free_managed_buffer(m, 1 << 16) == 0
    assert b.free_managed_buffer(m, 1 << 16) != 0
    with pytest.raises(ValueError, match=f"{m:#x}\\+11 is not host memory registered"):
        b.read_bytes_from_buffer(m, 11)  # freed: refused, not read (the range named)
    assert b.write_bytes_to_buffer(0x1000, b"x", 1) != 0
    assert a.free_managed_buffer(src, 4096) == 0


def test_send_probe_and_the_opcode_spellings_of_upstream(pair):
    a, b = pair
    assert a.send_probe(f"127.0.0.1:{b.get_rpc_port()}") == 0
    assert a.send_probe(peer_server_name=f"127.0.0.1:{b.get_rpc_port()}") == 0
    assert a.send_probe("127.0.0.1:1") < 0  # nobody there
    assert TransferEngine().send_probe("127.0.0.1:1") == ErrorCode.INVALID_PARAMS
    with pytest.raises(TypeError, match="'peer_server_name'"):
        a.send_probe(5)
    assert TransferEngine.TransferOpcode.Write == Write == 1
    assert TransferEngine.TransferOpcode.Read is TransferOpcode.Read
    # the spelling of upstream's documentation: READ / WRITE, same values
    import mooncake.engine as me
    assert TransferOpcode.READ is TransferOpcode.Read is me.READ
    assert TransferOpcode.WRITE is TransferOpcode.Write is me.WRITE
    src, dst = buf(32, True), buf(32)
    assert a.register_memory(src.ctypes.data, 32) == 0
    assert b.register_memory(dst.ctypes.data, 32) == 0
    try:
        tgt = f"127.0.0.1:{b.get_rpc_port()}"
        assert a.transfer_sync(tgt, src.ctypes.data, dst.ctypes.data, 32,
                               TransferOpcode.WRITE) == 0
        assert np.array_equal(src, dst)
    finally:
        a.unregister_memory(src.ctypes.data)
        b.unregister_memory(dst.ctypes.data)
    # what upstream hands to the store's setup(engine=...)
    assert a.get_engine() is a


def test_transfer_failures_are_negative(pair):
    a, b = pair
    src = buf(4096)
    a.register_memory(src.ctypes.data, 4096)
    tgt = f"127.0.0.1:{b.get_rpc_port()}"
    # unregistered local memory, a remote range nobody registered, a dead peer
    assert a.transfer_sync_write(tgt, 0x1000, 0x2000, 10) == ErrorCode.ADDRESS_NOT_REGISTERED
    assert a.transfer_sync_write(tgt, src.ctypes.data, 0x2000, 10) < 0
    assert a.transfer_sync_write("127.0.0.1:1", src.ctypes.data, 0x2000, 10) < 0
    assert a.batch_transfer_async_write("127.0.0.1:1", [src.ctypes.data], [1], [1]) == 0
    assert a.transfer_submit_write("127.0.0.1:1", src.ctypes.data, 1, 1) == -1
    a.unregister_memory(src.ctypes.data)


def test_mismatched_lists_fail_the_call_as_upstream(pair, caplog):
    """Upstream returns its failure value for lists of different lengths
    (-1; 0, no batch id, for the async forms), logged; no exception and
    nothing registered or moved."""
    a, b = pair
    src = buf(64, True)
    dst = buf(64)
    assert b.register_memory(dst.ctypes.data, dst.nbytes) == 0
    tgt = f"127.0.0.1:{b.get_rpc_port()}"
    try:
        with caplog.at_level("ERROR", logger="mooncake"):
            assert a.batch_register_memory([src.ctypes.data], []) == -1
            assert "'buffer_addresses' and 'capacities'" in caplog.text
            # not registered by the failed call: a transfer from it is refused
            assert a.write_bytes_to_buffer(src.ctypes.data, b"x", 1) != 0
            assert a.batch_register_memory([src.ctypes.data], [src.nbytes]) == 0
            p, q = src.ctypes.data, dst.ctypes.data
            assert a.batch_transfer_sync_write(tgt, [p, p], [q, q], [1]) == -1
            assert "'buffers' and 'lengths'" in caplog.text
            assert a.batch_transfer_sync_read(tgt, [p], [q, q], [1]) == -1
            assert "'buffers' and 'peer_buffer_addresses'" in caplog.text
            assert a.batch_transfer_sync(tgt, [p], [q], [1, 2], Write) == -1
            assert a.batch_transfer_async_write(tgt, [p, p], [q], [8, 8]) == 0
            assert a.batch_transfer_async(tgt, [p], [q], [], Read) == 0
        assert not dst.any()
        # the items' types are still checked first (TypeError)
        with pytest.raises(TypeError, match=r"'lengths\[0\]'"):
            a.batch_transfer_sync_write(tgt, [p, p], [q, q], ["1"])
    finally:
        a.unregister_memory(src.ctypes.data)
        b.unregister_memory(dst.ctypes.data)


def test_bad_arguments(pair):
    a, _ = pair
    with pytest.raises(TypeError, match="'buffer'"):
        a.transfer_sync_write("t", "x", 1, 1)
    with pytest.raises(TypeError, match="'target_hostname'"):
        a.transfer_sync_write(1, 1, 1, 1)
    with pytest.raises(ValueError, match="'opcode'"):
        a.transfer_sync("t", 1, 1, 1, 7)
    with pytest.raises(TypeError, match="argument 'notify'"):
        a.transfer_sync("t", 1, 1, 1, Read, notify="x")
    with pytest.raises(TypeError, match="unexpected keyword argument 'lenght'"):
        a.transfer_sync_write("t", 1, 1, lenght=1)
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "etcd://127.0.0.1:2379", "tcp", "") != 0
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "nvlink", "") != 0
    # never initialized: errors, not crashes
    assert e.get_rpc_port() == -1
    assert e.transfer_sync_write("t", 1, 1, 1) == ErrorCode.INVALID_PARAMS
    assert e.register_memory(1, 1) == ErrorCode.INVALID_PARAMS


def test_engines_publish_through_the_masters_metadata_service(tmp_path_factory):
    c = make_cluster(tmp_path_factory, nodes=0)
    try:
        meta = f"master://{c.master}"
        a, b = engine(meta), engine(meta)
        dst = buf(4096)
        assert b.register_memory(dst.ctypes.data, 4096) == 0
        src = a.allocate_managed_buffer(4096)
        a.write_bytes_to_buffer(src, b"via the master", 14)
        assert a.transfer_sync_write(b.get_local_hostname(), src, dst.ctypes.data, 14) == 0
        assert bytes(dst[:14]) == b"via the master"
        a._close()
        b._close()
    finally:
        c.stop()


def test_initialize_ext_composes_the_metadata_string():
    e = TransferEngine()
    assert e.initialize_ext("127.0.0.1", "P2PHANDSHAKE", "tcp", "", "") == 0
    e._close()
    assert e.initialize_ext("127.0.0.1", "127.0.0.1:2379", "tcp", "", "etcd") != 0


def test_engines_publish_through_an_http_metadata_server(tmp_path):
    import socket
    import subprocess
    import sys
    BUILD = os.environ.get("TEST_BUILD_DIR", "build")
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    env = dict(os.environ, MOONCAKE_BIN_DIR=os.path.abspath(BUILD))
    code = "import sys; from mooncake import cli; sys.exit(cli.http_metadata_main())"
    p = subprocess.Popen([sys.executable, "-c", code, "--port", str(port), "--host", "127.0.0.1"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import urllib.error
        import urllib.request
        meta = f"http://127.0.0.1:{port}/metadata"
        deadline = time.time() + 10
        while time.time() < deadline:  # the server is starting
            try:
                urllib.request.urlopen(meta + "?key=none", timeout=2)
            except urllib.error.HTTPError:
                break  # it answers (404: no such key)
            except OSError:
                time.sleep(0.05)
        a, b = engine(meta), engine(meta)
        m = b.allocate_managed_buffer(4096)
        src = a.allocate_managed_buffer(4096)
        a.write_bytes_to_buffer(src, b"hello", 5)
        assert a.transfer_sync_write(b.get_local_hostname(), src, m, 5) == 0
        assert b.read_bytes_from_buffer(m, 5) == b"hello"
        a._close()
        b._close()
    finally:
        p.terminate()
        p.wait(10)
