"""pip install ./python --no-build-isolation works offline with Debian's
Python (into a temporary --prefix), and what it installs imports and runs
outside the source tree: the extension needs no libmooncake.so, the
launchers are console scripts."""
import glob
import os
import subprocess
import sys

ROOT = os.getcwd()


def test_pip_installs_offline_into_a_prefix(tmp_path):
    prefix = tmp_path / "prefix"
    r = subprocess.run(
        ["/usr/bin/python3", "-m", "pip", "install", "--no-build-isolation", "--no-index",
         "--no-deps", "--disable-pip-version-check", "--prefix", str(prefix),
         os.path.join(ROOT, "python")],
        capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    sites = glob.glob(str(prefix / "**" / "mooncake" / "__init__.py"), recursive=True)
    assert len(sites) == 1, sites
    site = os.path.dirname(os.path.dirname(sites[0]))
    ext = glob.glob(os.path.join(site, "mooncake", "_mooncake*.so"))
    assert len(ext) == 1
    ldd = subprocess.run(["ldd", ext[0]], capture_output=True, text=True).stdout
    assert "libmooncake" not in ldd and "not found" not in ldd
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": site}
    r = subprocess.run(
        ["/usr/bin/python3", "-c",
         "import mooncake, mooncake.store, mooncake.engine; "
         "print(mooncake.__file__); print(mooncake.__version__)"],
        capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith(site)
    scripts = glob.glob(str(prefix / "**" / "bin" / "mooncake_master"), recursive=True)
    assert scripts, "console script mooncake_master not installed"
    r = subprocess.run([scripts[0], "--help"], capture_output=True, text=True,
                       cwd=str(tmp_path), env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "--rpc_port" in r.stdout
    # mooncake_client runs the mooncake-store-server installed with the package
    scripts = glob.glob(str(prefix / "**" / "bin" / "mooncake_client"), recursive=True)
    assert scripts, "console script mooncake_client not installed"
    assert glob.glob(os.path.join(site, "mooncake", "bin", "mooncake-store-server"))
    r = subprocess.run([scripts[0], "--port=50123", "--global_segment_size=1 GB",
                        "--master_server_address=10.1.2.3:50051", "--", "--dump-config"],
                       capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "port = 50123" in r.stdout and "global_segment_size = 1GiB" in r.stdout
    assert "master = 10.1.2.3:50051" in r.stdout
    r = subprocess.run([scripts[0], "--no_such_flag=1"], capture_output=True, text=True,
                       cwd=str(tmp_path), env=env, timeout=60)
    assert r.returncode == 2 and "unknown flag --no_such_flag" in r.stderr
