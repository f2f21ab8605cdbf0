"""The launchers with upstream's names: mooncake_master maps upstream's
gflags (--flag=value and --flag value, bare and --no booleans) onto
mooncake-master --set section.key=value and refuses unknown flags;
mooncake_http_metadata_server does the same for the standalone metadata
server."""
import os
import re
import subprocess
import sys

import pytest

from mooncake import cli

BUILD = os.environ.get("TEST_BUILD_DIR", "build")
ENV = dict(os.environ, MOONCAKE_BIN_DIR=os.path.abspath(BUILD))


def sets(argv, flags=cli.MASTER_FLAGS):
    out = cli.map_flags(argv, flags, "mooncake_master")
    return [out[i + 1] for i in range(0, len(out), 2) if out[i] == "--set"]


def test_both_gflags_spellings_map_to_set():
    assert sets(["--rpc_port=50052", "--metrics_port", "9100"]) == \
        ["server.rpc_port=50052", "server.http_port=9100"]
    assert sets(["-port", "7000"]) == ["server.rpc_port=7000"]
    assert sets(["--default_kv_lease_ttl=5000", "--default_kv_soft_pin_ttl", "10m"]) == \
        ["master.lease_ttl=5000ms", "master.soft_pin_ttl=10m"]
    assert sets(["--client_ttl=20", "--eviction_ratio=0.1",
                 "--eviction_high_watermark_ratio", "0.9"]) == \
        ["master.client_ttl=20s", "master.eviction_ratio=0.1",
         "master.eviction_high_watermark_ratio=0.9"]
    assert sets(["--root_fs_dir=/mnt/ssd", "--cluster_id", "prod", "--rpc_address=10.0.0.1"]) == \
        ["server.root_fs_dir=/mnt/ssd", "server.cluster_id=prod", "server.bind_address=10.0.0.1"]
    assert sets(["--enable_http_metadata_server", "--http_metadata_server_port=8090"]) == \
        ["metadata.http=true", "metadata.http_port=8090"]
    # upstream's default port of its HTTP metadata server
    assert sets(["--enable_http_metadata_server=true"]) == \
        ["metadata.http=true", "metadata.http_port=8080"]
    assert sets(["--http_metadata_server_port=8090", "--enable_http_metadata_server=0"]) == \
        ["metadata.http=false"]
    assert sets(["--noallow_evict_soft_pinned_objects"]) == \
        ["master.allow_evict_soft_pinned_objects=false"]
    # mooncake-c's own options pass through
    assert cli.map_flags(["--set", "log.level=warn", "-c", "f.conf", "--dump-config"],
                         cli.MASTER_FLAGS, "m") == \
        ["--set", "log.level=warn", "-c", "f.conf", "--dump-config"]


@pytest.mark.parametrize("argv,msg", [
    (["--no_such_flag=1"], "unknown flag --no_such_flag"),
    (["--rpc_port"], "--rpc_port needs a value"),
    (["--rpc_port=abc"], "expected an integer"),
    (["--enable_http_metadata_server=maybe"], "expected true or false"),
    (["--enable_ha=true"], "ha.backend=redis"),
    (["stray"], "unexpected argument"),
])
def test_bad_flags_are_refused_clearly(argv, msg):
    with pytest.raises(cli.FlagError, match=re.escape(msg)):
        cli.map_flags(argv, cli.MASTER_FLAGS, "mooncake_master")


def launcher(*argv, fn="master_main"):
    code = f"import sys; from mooncake import cli; sys.exit(cli.{fn}())"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env=ENV, timeout=60)


def test_mooncake_master_runs_mooncake_master_with_the_mapped_keys():
    r = launcher("--rpc_port", "50077", "--default_kv_lease_ttl=2500", "--eviction_ratio=0.2",
                 "--client_ttl", "30", "--dump-config")
    assert r.returncode == 0, r.stderr
    cfg = r.stdout
    assert re.search(r"^rpc_port = 50077$", cfg, re.M)
    assert re.search(r"^lease_ttl = 2500ms$", cfg, re.M)
    assert re.search(r"^eviction_ratio = 0.2$", cfg, re.M)
    assert re.search(r"^client_ttl = 30s$", cfg, re.M)


def test_mooncake_master_refuses_unknown_flags_and_lists_the_known_ones():
    r = launcher("--bogus=1")
    assert r.returncode == 2
    assert "unknown flag --bogus" in r.stderr and "--rpc_port" in r.stderr
    r = launcher("--help")
    assert r.returncode == 0 and "--default_kv_lease_ttl" in r.stdout
    assert "server.rpc_port" in r.stdout  # the program's own keys follow


def test_mooncake_master_serves_on_the_mapped_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = "import sys; from mooncake import cli; sys.exit(cli.master_main())"
    p = subprocess.Popen([sys.executable, "-c", code, f"--rpc_port={port}", "--metrics_port",
                          "0", "--rpc_address=127.0.0.1"], env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        for _ in range(200):
            line = p.stderr.readline()
            if "ready: rpc" in line:
                break
        assert f"127.0.0.1:{port}" in line
    finally:
        p.terminate()
        assert p.wait(10) == 0  # exec'd: the program's own clean exit


def test_http_metadata_server_launcher_serves_upstreams_protocol():
    import socket
    import time
    import urllib.request
    r = launcher("--port", "18080", "--host", "127.0.0.1", "--dump-config",
                 fn="http_metadata_main")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^port = 18080$", r.stdout, re.M)
    assert re.search(r"^bind_address = 127.0.0.1$", r.stdout, re.M)
    r = launcher("--prot=1", fn="http_metadata_main")
    assert r.returncode == 2 and "unknown flag --prot" in r.stderr
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    code = "import sys; from mooncake import cli; sys.exit(cli.http_metadata_main())"
    p = subprocess.Popen([sys.executable, "-c", code, "--port", str(port), "--host",
                          "127.0.0.1"], env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/metadata?key=k1"
        for _ in range(100):
            try:
                req = urllib.request.Request(url, data=b"v1", method="PUT")
                urllib.request.urlopen(req, timeout=2).read()
                break
            except OSError:
                time.sleep(0.05)
        assert urllib.request.urlopen(url, timeout=2).read() == b"v1"
    finally:
        p.terminate()
        assert p.wait(10) == 0
