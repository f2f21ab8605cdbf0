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


# ------------------------------------------------------------ mooncake_client

def set_values(out):
    return [out[i + 1] for i in range(len(out) - 1) if out[i] == "--set"]


def client_sets(argv, env=None):
    return set_values(cli.client_args(argv, env))


def test_mooncake_client_maps_upstreams_flags_onto_the_service_role():
    env = {}
    out = cli.client_args(["--host=10.0.0.7:17812", "--port", "50099",
                           "--global_segment_size=4 GB", "--local_buffer_size", "64MB",
                           "--master_server_address=m1:50051",
                           "--metadata_server=P2PHANDSHAKE", "--protocol=rdma",
                           "--device_names=mlx5_0,mlx5_1", "--threads", "8",
                           "--", "--set", "store.shm_group=mooncake"], env)
    # the service role first (as tools/mooncake_client), then the flags in
    # order (a later --set wins), then what follows -- as it is
    assert out[:6] == cli.CLIENT_DEFAULTS
    assert set_values(out)[3:] == [
        "store.local_hostname=10.0.0.7:17812", "store.advertise_host=10.0.0.7",
        "store.port=17812", "service.port=50099", "store.global_segment_size=4GiB",
        "service.staging=64MiB", "store.master=m1:50051", "store.metadata=p2p",
        "store.protocol=rdma", "service.threads=8", "store.shm_group=mooncake"]
    assert env == {"MC_RDMA_DEVICES": "mlx5_0,mlx5_1"}
    assert client_sets(["--host=0.0.0.0", "--host", "node3"])[3:] == \
        ["store.advertise_host=node3"]
    assert client_sets(["--metadata_server", "http://h:8080/metadata"])[3:] == \
        ["store.metadata=http://h:8080/metadata"]
    assert client_sets(["--local_buffer_size=0", "--global_segment_size=1073741824"])[3:] == \
        ["store.global_segment_size=1073741824"]
    assert client_sets(["--global_segment_size=16MiB", "--global_segment_size", "512 kb"])[3:] \
        == ["store.global_segment_size=16MiB", "store.global_segment_size=512KiB"]
    # a configuration file comes first, so the flags override it
    assert cli.client_args(["--port=1", "--config=/etc/mc.conf"])[:2] == ["-c", "/etc/mc.conf"]


@pytest.mark.parametrize("argv,msg", [
    (["--bogus=1"], "unknown flag --bogus"),
    (["--hostname=h"], "unknown flag --hostname"),
    (["--global_segment_size=lots"], "--global_segment_size: 'lots' is not a size"),
    (["--global_segment_size=50%"], "is not a size"),
    (["--local_buffer_size=1.5GB"], "is not a size"),
    (["--port"], "--port needs a value"),
    (["--port=http"], "expected an integer"),
    (["--threads=four"], "expected an integer"),
    (["--enable_offload"], "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"),
    (["node1"], "unexpected argument"),
])
def test_mooncake_client_refuses_bad_flags_clearly(argv, msg, monkeypatch):
    monkeypatch.delenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", raising=False)
    with pytest.raises(cli.FlagError, match=re.escape(msg)):
        cli.client_args(argv)


def client(*argv):
    return launcher(*argv, fn="client_main")


def test_mooncake_client_is_what_tools_mooncake_client_runs():
    """Same flags, same configuration of mooncake-store-server, whichever
    launcher (the shell one of the source tree, the installed command)."""
    flags = ["--host=127.0.0.1:17999", "--port", "50111", "--global_segment_size=64 MB",
             "--local_buffer_size=16MB", "--master_server_address=127.0.0.1:50999",
             "--metadata_server=P2PHANDSHAKE", "--protocol=tcp", "--threads=3"]
    r = client(*flags, "--", "--dump-config")
    assert r.returncode == 0, r.stderr
    sh = subprocess.run(["tools/mooncake_client", *flags, "--", "--dump-config"],
                        capture_output=True, text=True, timeout=60,
                        env=dict(ENV, MOONCAKE_STORE_SERVER=os.path.join(
                            os.path.abspath(BUILD), "mooncake-store-server")))
    assert sh.returncode == 0, sh.stderr
    assert r.stdout == sh.stdout
    cfg = r.stdout
    for line in (r"^enabled = true$", r"^port = 50111$", r"^global_segment_size = 64MiB$",
                 r"^master = 127.0.0.1:50999$", r"^metadata = p2p$", r"^threads = 3$"):
        assert re.search(line, cfg, re.M), line
    r = client("--bogus=1")
    assert r.returncode == 2
    assert "mooncake_client: unknown flag --bogus" in r.stderr and "--master_server_address" \
        in r.stderr
    r = client("--help")
    assert r.returncode == 0 and "--global_segment_size" in r.stdout
    assert "service.enabled" in r.stdout  # the program's own keys follow


def test_mooncake_client_serves_colocated_clients(tmp_path_factory):
    """The launcher starts the service a co-located client (setup_dummy) puts
    and gets through, on the port it was given."""
    import socket
    from conftest import _wait_line, make_cluster
    from mooncake.store import MooncakeDistributedStore
    c = make_cluster(tmp_path_factory, nodes=0)
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    out = os.path.join(c.tmp, "client.out")
    code = "import sys; from mooncake import cli; sys.exit(cli.client_main())"
    with open(out, "wb") as o:
        p = subprocess.Popen([sys.executable, "-c", code, "--host=127.0.0.1", "--port", str(port),
                              "--global_segment_size=32 MB", "--local_buffer_size=4MB",
                              f"--master_server_address={c.master}",
                              "--metadata_server=P2PHANDSHAKE", "--threads=2", "--",
                              "--set", "store.reactors=1", "--set", "store.http_port=0"],
                             env=ENV, stdout=o, stderr=subprocess.DEVNULL)
    s = MooncakeDistributedStore()
    try:
        _wait_line(out, rf"^service 127.0.0.1:{port}$", p, timeout=60)
        assert s.setup_dummy(8 << 20, 4 << 20, f"127.0.0.1:{port}") == 0
        v = os.urandom(300000)
        assert s.put("launched", v) == 0
        assert s.get("launched") == v
        assert s.close() == 0
    finally:
        p.terminate()
        assert p.wait(20) == 0  # exec'd: the program's own clean exit
        c.stop()
