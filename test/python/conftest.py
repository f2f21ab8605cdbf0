"""Fixtures of the Python tests: real mooncake-master and
mooncake-store-server processes on 127.0.0.1 (ports chosen by the kernel and
read back from their output), stopped at the end of the module that used
them. The package comes from PYTHONPATH (test/run.sh: $BUILD/python); the
programs from $TEST_BUILD_DIR (default build/)."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

BUILD = os.environ.get("TEST_BUILD_DIR", "build")
# The rdma transport reads these; a developer's shell must not leak them in.
for _k in [k for k in os.environ if k.startswith("MC_RDMA_")] + ["MC_STORE_STAGING", "MC_SECRET_FILE",
                                                                  "MC_LOG_LEVEL"]:
    os.environ.pop(_k, None)


def _wait_line(path, regex, proc, timeout=15.0):
    pat = re.compile(regex)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    m = pat.search(line)
                    if m:
                        return m
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    with open(path, errors="replace") as f:
        tail = f.read()[-3000:]
    raise RuntimeError(f"{regex!r} not seen in {path} (exit {proc.poll()}):\n{tail}")


class Proc:
    def __init__(self, argv, tmp, name, env=None):
        self.out = os.path.join(tmp, name + ".out")
        self.log = os.path.join(tmp, name + ".log")
        with open(self.out, "wb") as o, open(self.log, "wb") as e:
            self.p = subprocess.Popen(argv, stdout=o, stderr=e, env=env,
                                      start_new_session=True)

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)


class Cluster:
    """One master and the storage nodes started on it."""

    def __init__(self, tmp, env=None, master_args=()):
        self.tmp = tmp
        self.env = env
        self.nodes = []
        self.master_args = list(master_args)
        self.master_proc = None
        self.start_master()

    def start_master(self, rpc_port=0):
        argv = [os.path.join(BUILD, "mooncake-master"),
                "--set", "server.bind_address=127.0.0.1",
                "--set", f"server.rpc_port={rpc_port}",
                "--set", "server.http_port=0", "--set", "server.reactors=1",
                "--set", "log.level=info"] + self.master_args
        self.master_proc = Proc(argv, self.tmp, "master", self.env)
        m = _wait_line(self.master_proc.log, r"ready: rpc ([^ ,]+):(\d+)", self.master_proc.p)
        self.master = f"{m.group(1)}:{m.group(2)}"
        self.rpc_port = int(m.group(2))
        m = _wait_line(self.master_proc.log, r"metrics at http://([^/]+)/metrics",
                       self.master_proc.p)
        self.http = m.group(1)

    def add_node(self, size="64MiB", protocol="tcp", extra=()):
        n = len(self.nodes)
        argv = [os.path.join(BUILD, "mooncake-store-server"),
                "--set", f"store.master={self.master}",
                "--set", f"store.global_segment_size={size}",
                "--set", f"store.protocol={protocol}",
                "--set", "store.reactors=1",
                "--set", "store.http_port=0"] + list(extra)
        p = Proc(argv, self.tmp, f"node{n}", self.env)
        m = _wait_line(p.out, r"^ready (\S+)", p.p)
        p.name = m.group(1)
        self.nodes.append(p)
        return p

    def stop(self):
        for p in self.nodes:
            p.stop()
        if self.master_proc is not None:
            self.master_proc.stop()


def make_cluster(tmp_path_factory, nodes=1, protocol="tcp", env=None, master_args=()):
    tmp = str(tmp_path_factory.mktemp("cluster"))
    c = Cluster(tmp, env, master_args)
    try:
        for _ in range(nodes):
            c.add_node(protocol=protocol)
    except Exception:
        c.stop()
        raise
    return c


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = make_cluster(tmp_path_factory)
    yield c
    c.stop()
