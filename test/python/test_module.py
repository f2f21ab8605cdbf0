"""The package itself: import, version, log controls, status names."""
import logging
import os
import subprocess
import sys

import pytest

import mooncake
from mooncake import _mooncake

BUILD = os.environ.get("TEST_BUILD_DIR", "build")


def makefile_version():
    with open("Makefile") as f:
        for line in f:
            if line.startswith("VERSION :="):
                return line.split(":=")[1].strip()
    raise AssertionError("no VERSION in the Makefile")


def test_version_is_the_library_one():
    assert mooncake.__version__ == makefile_version()
    assert _mooncake.__version__ == mooncake.__version__


def test_status_names_are_upstream_ones():
    assert mooncake.status_str(0) == "OK"
    assert mooncake.status_str(-704) == "OBJECT_NOT_FOUND"
    assert mooncake.status_str(-600) == "INVALID_PARAMS"
    assert mooncake.status_str(12345) == "UNKNOWN_STATUS"
    assert "not found" in mooncake.status_msg(-704)
    with pytest.raises(TypeError):
        mooncake.status_str("x")


def test_a_bad_log_level_raises_and_names_the_bad_part():
    mooncake.set_log_level("info")
    with pytest.raises(ValueError, match="nosuch"):
        mooncake.set_log_level("warn,nosuch=debug")
    with pytest.raises(TypeError, match="'spec'"):
        mooncake.set_log_level(3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'level'"):
        mooncake.set_log_level(level="info")


def run_py(code, env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)


# A store setup against a master that is not there logs (the client warns
# that the master is unreachable): the lines that show the log controls.
NOISY = """
import mooncake, sys
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", "127.0.0.1:1")
s.close()
"""


def test_mc_log_level_quiets_the_library():
    loud = run_py(NOISY, {})
    quiet = run_py(NOISY, {"MC_LOG_LEVEL": "error"})
    assert " I [" in loud.stderr
    assert " I [" not in quiet.stderr and " W [" not in quiet.stderr


def test_log_lines_can_go_to_python_logging():
    code = """
import logging, mooncake
records = []
class H(logging.Handler):
    def emit(self, r):
        records.append((r.levelno, r.getMessage()))
logging.getLogger("mooncake").addHandler(H())
logging.getLogger("mooncake").setLevel(logging.DEBUG)
mooncake.log_to_python()
""" + NOISY + """
import time
deadline = time.time() + 5
while time.time() < deadline and not any(l == logging.INFO for l, _ in records):
    time.sleep(0.05)
mooncake.log_to_stderr()
print("levels", sorted({l for l, _ in records}))
print("info_seen", any(l == logging.INFO and " I [" in m for l, m in records))
"""
    r = run_py(code, {})
    assert r.returncode == 0, r.stderr
    assert "info_seen True" in r.stdout, r.stdout + r.stderr
    # nothing of the library reached stderr while it went to logging
    assert " I [transport]" not in r.stderr


def test_bind_to_numa_node_as_upstream():
    """mooncake.store.bind_to_numa_node(node): the calling thread runs on the
    node's CPUs; a node that does not exist is a warning, nothing changes
    (upstream's behaviour); a non-int node is a TypeError. In a child
    process: the affinity of this one stays as it is."""
    code = """
import logging, os, mooncake.store as ms
logging.basicConfig(level=logging.WARNING)
cpus = set()
with open("/sys/devices/system/node/node0/cpulist") as f:
    for part in f.read().strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
before = os.sched_getaffinity(0)
assert ms.bind_to_numa_node(100000) is None
assert os.sched_getaffinity(0) == before
assert ms.bind_to_numa_node(0) is None
assert os.sched_getaffinity(0) == cpus & before or os.sched_getaffinity(0) == cpus, (
    os.sched_getaffinity(0), cpus)
try:
    ms.bind_to_numa_node("0")
except TypeError as e:
    assert "'node'" in str(e)
else:
    raise AssertionError("no TypeError")
print("ok")
"""
    if not os.path.exists("/sys/devices/system/node/node0/cpulist"):
        pytest.skip("no NUMA information on this host")
    r = run_py(code, {})
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout
    assert "no such NUMA node" in r.stderr
