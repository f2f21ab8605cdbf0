"""Behaviour under threads and faults: the GIL is released while a call
waits, one store shared by threads, close while calls run, 100,000 mixed
calls with memory and refcounts flat, and a master that hangs or dies makes
calls fail within the RPC timeout (5 s) instead of blocking."""
import gc
import os
import signal
import sys
import threading
import time
import tracemalloc

import numpy as np
import pytest

from mooncake import store as ms
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

from conftest import make_cluster

MIB = 1 << 20
RPC_TIMEOUT = 5.0  # the library's default master call timeout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = make_cluster(tmp_path_factory, nodes=1)
    yield c
    c.stop()


def new_store(cluster):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", cluster.master) == 0
    return s


def test_one_store_shared_by_threads(cluster):
    s = new_store(cluster)
    errors = []

    def worker(t):
        try:
            for i in range(100):
                k = f"t{t}/{i}"
                v = f"{t}:{i}".encode() * (i + 1)
                assert s.put(k, v) == 0
                assert s.get(k) == v
                assert s.batch_is_exist([k, k + "x"]) == [1, 0]
        except AssertionError as e:
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors
    assert s.remove_all(force=True) == 800
    s.close()


def test_close_while_calls_run_never_crashes_and_setup_works_after(cluster):
    s = new_store(cluster)
    stop = threading.Event()
    seen = {"ok": 0, "closed": 0}

    def worker(t):
        i = 0
        while not stop.is_set():
            r = s.put(f"c{t}/{i}", b"x" * 1000)
            if r == 0:
                seen["ok"] += 1
            elif r == ms.INVALID_PARAMS:
                seen["closed"] += 1  # after close: not set up
            s.get(f"c{t}/{i}")
            i += 1

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    time.sleep(0.3)
    assert s.close() == 0
    time.sleep(0.2)
    stop.set()
    for t in ts:
        t.join(30)
    assert seen["ok"] > 0 and seen["closed"] > 0
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", cluster.master) == 0
    assert s.remove_all(force=True) == seen["ok"]
    s.close()


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_100000_mixed_calls_keep_memory_and_refcounts_flat(cluster):
    s = new_store(cluster)
    key, val = "leak/k", b"v" * 4096
    cfg = ReplicateConfig()
    arr = np.zeros(8192, dtype=np.uint8)
    assert s.register_buffer(arr.ctypes.data, arr.nbytes) == 0
    p = arr.ctypes.data
    keys = [f"leak/b{i}" for i in range(8)]
    vals = [val] * 8
    objs = [key, val, cfg, keys, vals, keys[0]]

    def one_round(i):
        m = i % 10
        if m == 0:
            s.put(key, val, cfg)
        elif m == 1:
            s.get(key)
        elif m == 2:
            s.is_exist(key)
        elif m == 3:
            s.get_buffer(key)
        elif m == 4:
            s.put_batch(keys, vals)
        elif m == 5:
            s.get_batch(keys)
        elif m == 6:
            s.put_from(key, p, 4096)
            s.get_into(key, p + 4096, 4096)
        elif m == 7:
            s.batch_get_into(keys[:2], [p, p + 4096], [4096, 4096])
        elif m == 8:
            try:
                s.put(key, "not bytes")  # a TypeError path
            except TypeError:
                pass
        else:
            s.get("leak/absent")

    def run(total, nthreads=8):
        # the calls wait on the network most of the time: several threads
        # keep the run short (and exercise the GIL release too)
        ts = [threading.Thread(target=lambda t=t: [one_round(i) for i in
                                                   range(t, total, nthreads)])
              for t in range(nthreads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(300)

    run(4000)  # warm up: caches, allocator pools, thread stacks
    gc.collect()
    refs0 = [sys.getrefcount(o) for o in objs]
    rss0 = rss_kib()
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    run(100000)
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(st.size_diff for st in snap1.compare_to(snap0, "filename"))
    assert [sys.getrefcount(o) for o in objs] == refs0
    assert grown < 256 * 1024, f"Python heap grew by {grown} bytes"
    assert rss_kib() - rss0 < 32 * 1024, f"RSS grew by {rss_kib() - rss0} KiB"
    s.unregister_buffer(p)
    s.remove_all(force=True)
    s.close()


def test_blocking_calls_release_the_gil_and_a_hung_master_times_out(cluster):
    s = new_store(cluster)
    assert s.put("gil", b"x") == 0
    result = {}

    def blocked():
        t0 = time.monotonic()
        result["rc"] = s.is_exist("gil")
        result["took"] = time.monotonic() - t0

    pid = cluster.master_proc.p.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        # every thread of it stopped (a busy one stops at its next return to
        # user space) before the call starts
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(
                open(f"/proc/{pid}/task/{t}/stat").read().split(")")[-1].split()[0] != "T"
                for t in os.listdir(f"/proc/{pid}/task")):
            time.sleep(0.01)
        t = threading.Thread(target=blocked)
        t.start()
        time.sleep(0.2)  # the call is waiting for the master now
        counted, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < 0.5:
            counted += 1  # Python code runs while the call waits
        assert t.is_alive(), result
        t.join(RPC_TIMEOUT + 5)
        assert not t.is_alive()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert counted > 10000
    assert result["rc"] < 0
    assert result["took"] < RPC_TIMEOUT + 3
    # the master is back: calls work again
    deadline = time.monotonic() + 10
    while s.is_exist("gil") != 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert s.is_exist("gil") == 1
    s.remove_all(force=True)
    s.close()


def test_master_down_calls_fail_within_the_timeout(tmp_path_factory):
    c = make_cluster(tmp_path_factory, nodes=1)
    try:
        s = new_store(c)
        assert s.put("d", b"x") == 0
        c.master_proc.stop(signal.SIGKILL)
        for call in (lambda: s.put("d2", b"y"), lambda: s.is_exist("d"),
                     lambda: s.get_batch(["d"])):
            t0 = time.monotonic()
            r = call()
            assert time.monotonic() - t0 < RPC_TIMEOUT + 3
            assert r != 0 and r != [b"x"] and r != 1
        assert s.get("d") == b""
        s.close()
    finally:
        c.stop()


def test_setup_fails_when_no_master_answers():
    # as upstream: setup returns an error instead of a store whose every
    # call fails (a port nobody listens on; a master that never answers)
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
        s = MooncakeDistributedStore()
        t0 = time.monotonic()
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", f"127.0.0.1:{port}")
        assert rc < 0 and not s._is_setup()
        sk.listen(1)  # accepts, never answers
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", f"127.0.0.1:{port}")
        assert rc < 0 and not s._is_setup()
        assert time.monotonic() - t0 < 2 * RPC_TIMEOUT + 3
        assert s.put("k", b"v") == ms.INVALID_PARAMS
