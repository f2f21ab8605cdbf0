"""Console entry points with upstream's names:

  mooncake_master                 upstream's gflags (--rpc_port=50051 or
                                  --rpc_port 50051, ...) mapped onto
                                  mooncake-master --set section.key=value
  mooncake_http_metadata_server   upstream's --host/--port onto the standalone
                                  mooncake-http-metadata-server program
  mooncake_client                 upstream's standalone client ("real client")
                                  flags onto mooncake-store-server in the
                                  service role, as tools/mooncake_client does

Each maps its flags and execs the C program (so signals and the exit status
are the program's own). Unknown flags are refused with the list of known
ones. The program is looked up in $MOONCAKE_BIN_DIR, next to the package
(mooncake/bin, where pip installs it), in the build tree the package was
built into (build/python/mooncake -> build/), then on PATH.
"""

import os
import re
import shutil
import sys

PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def find_program(name):
    """Path of the C program `name`, or None."""
    dirs = [os.environ.get("MOONCAKE_BIN_DIR", ""), os.path.join(PKG_DIR, "bin"),
            os.path.dirname(os.path.dirname(PKG_DIR))]
    for d in dirs:
        p = os.path.join(d, name)
        if d and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return shutil.which(name)


class FlagError(Exception):
    pass


def _ms(v):
    return v + "ms" if v.isdigit() else v  # upstream: milliseconds (or a duration)


def _sec(v):
    return v + "s" if v.isdigit() else v


def _bool(v):
    t = v.lower()
    if t in ("1", "true", "yes", "y", "t", "on"):
        return "true"
    if t in ("0", "false", "no", "n", "f", "off"):
        return "false"
    raise FlagError(f"expected true or false, not {v!r}")


# upstream flag -> (kind, handler). A handler returns [(key, value)] for
# --set; "bool" flags may be given bare (--flag) or negated (--noflag).
def _to(key, conv=str):
    return lambda v: [(key, conv(v))]


def _minloglevel(v):
    levels = {"0": "info", "1": "warn", "2": "error", "3": "error"}
    if v not in levels:
        raise FlagError("expected 0..3")
    return [("log.level", levels[v])]


def _verbose(v):
    if not v.isdigit():
        raise FlagError("expected a number")
    return [("log.level", "debug")] if int(v) > 0 else []


def _threads(v):
    if not v.isdigit():
        raise FlagError("expected a number")
    return [("server.reactors", v)] if int(v) > 0 else []


def _enable_ha(v):
    if _bool(v) == "true":
        raise FlagError("etcd-based HA is not in mooncake-c: run several masters with "
                        "--set ha.backend=redis://HOST:PORT/DB (README.md, High availability)")
    return []


def _ignored(why):
    def h(v):
        print(f"mooncake_master: note: {why}; ignored", file=sys.stderr)
        return []
    return h


MASTER_FLAGS = {
    "port": ("int", _to("server.rpc_port")),
    "rpc_port": ("int", _to("server.rpc_port")),
    "rpc_address": ("str", _to("server.bind_address")),
    "rpc_thread_num": ("int", _threads),
    "max_threads": ("int", _threads),
    "metrics_port": ("int", _to("server.http_port")),
    "default_kv_lease_ttl": ("str", _to("master.lease_ttl", _ms)),
    "default_kv_soft_pin_ttl": ("str", _to("master.soft_pin_ttl", _ms)),
    "allow_evict_soft_pinned_objects": ("bool",
                                        _to("master.allow_evict_soft_pinned_objects", _bool)),
    "eviction_ratio": ("str", _to("master.eviction_ratio")),
    "eviction_high_watermark_ratio": ("str", _to("master.eviction_high_watermark_ratio")),
    "client_ttl": ("str", _to("master.client_ttl", _sec)),
    "put_start_discard_timeout_sec": ("str", _to("master.put_start_discard_timeout", _sec)),
    "put_start_release_timeout_sec": ("str", _to("master.put_start_release_timeout", _sec)),
    "root_fs_dir": ("str", _to("server.root_fs_dir")),
    "cluster_id": ("str", _to("server.cluster_id")),
    "global_file_segment_size": ("str", _to("server.tier_quota")),
    "enable_offload": ("bool", _to("master.enable_offload", _bool)),
    "offload_on_evict": ("bool", _to("master.offload_on_evict", _bool)),
    "offload_force_evict": ("bool", _to("master.offload_force_evict", _bool)),
    "offloading_queue_limit": ("int", _to("master.offloading_queue_limit")),
    "offload_cap_ratio": ("str", _to("master.offload_cap_ratio")),
    "promotion_on_hit": ("bool", _to("master.promotion_on_hit", _bool)),
    "promotion_admission_threshold": ("int", _to("master.promotion_admission_threshold")),
    "enable_http_metadata_server": ("bool", _to("metadata.http", _bool)),
    "http_metadata_server_port": ("int", _to("metadata.http_port")),
    "http_metadata_server_host": ("str", _to("server.bind_address")),
    "enable_ha": ("bool", _enable_ha),
    "etcd_endpoints": ("str", lambda v: []),  # only meaningful with enable_ha
    "enable_gc": ("bool", _ignored("--enable_gc: objects are evicted by watermark")),
    "enable_metric_reporting": ("bool", _ignored("--enable_metric_reporting: metrics are "
                                                 "always served on the HTTP port")),
    "memory_allocator": ("str", _ignored("--memory_allocator: the offset allocator is the "
                                         "only one")),
    "minloglevel": ("int", _minloglevel),
    "v": ("int", _verbose),
    "logtostderr": ("bool", lambda v: []),
    "alsologtostderr": ("bool", lambda v: []),
}

def _size(v):
    """upstream's size strings ("4 GB", 64MB, 1GiB, 65536) -> a size
    mooncake-store-server reads; upstream reads KB/MB/GB/TB as powers of 1024."""
    m = re.fullmatch(r"(\d+)(?:B|([KMGT])(?:IB|B)?)?", v.replace(" ", "").upper())
    if m is None:
        raise FlagError(f"{v!r} is not a size (e.g. \"4 GB\", 64MB, 1073741824)")
    return m.group(1) + (m.group(2) + "iB" if m.group(2) else "")


def _client_host(v):
    # HOST:PORT names the segment and puts the transfer engine on PORT;
    # 0.0.0.0 (upstream's default) keeps store.advertise_host
    if v in ("", "0.0.0.0"):
        return []
    if ":" in v:
        host, _, port = v.rpartition(":")
        return [("store.local_hostname", v), ("store.advertise_host", host),
                ("store.port", port)]
    return [("store.advertise_host", v)]


def _local_buffer(v):
    s = _size(v)
    return [] if s == "0" else [("service.staging", s)]


def _metadata(v):
    return [("store.metadata", "p2p" if v in ("P2PHANDSHAKE", "p2p") else v)]


def _offload(v):
    if _bool(v) == "false":
        return []
    path = os.environ.get("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "")
    if not path:
        raise FlagError("set MOONCAKE_OFFLOAD_FILE_STORAGE_PATH to this node's offload directory")
    return [("store.offload_dir", path)]


# (key "-c": the configuration file; "env:NAME": the program's environment)
CLIENT_FLAGS = {
    "host": ("str", _client_host),
    "port": ("int", _to("service.port")),
    "global_segment_size": ("str", lambda v: [("store.global_segment_size", _size(v))]),
    "local_buffer_size": ("str", _local_buffer),
    "master_server_address": ("str", _to("store.master")),
    "metadata_server": ("str", _metadata),
    "protocol": ("str", _to("store.protocol")),
    "device_names": ("str", lambda v: [("env:MC_RDMA_DEVICES", v)] if v else []),
    "threads": ("int", _to("service.threads")),
    "enable_offload": ("bool", _offload),
    "config": ("str", lambda v: [("-c", v)]),
}

# the service role, on upstream's control port, with upstream's segment size
CLIENT_DEFAULTS = ["--set", "service.enabled=true", "--set", "service.port=50052",
                   "--set", "store.global_segment_size=4GiB"]

HTTP_METADATA_FLAGS = {
    "port": ("int", _to("server.port")),
    "host": ("str", _to("server.bind_address")),
}

# mooncake-c's own options, passed through as they are
PASS_WITH_VALUE = {"-c", "--config", "--set"}
PASS_ALONE = {"--dump-config", "--version"}


def map_flags(argv, flags, prog, env=None):
    """Upstream gflags -> the C program's arguments. FlagError when a flag is
    unknown or its value malformed. Values a handler gives for "env:NAME" go
    into `env` (the program's environment)."""
    out = []
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a in PASS_WITH_VALUE:
            if i >= len(argv):
                raise FlagError(f"{a} needs a value")
            out += [a, argv[i]]
            i += 1
            continue
        if a in PASS_ALONE or a.startswith("--set="):
            out.append(a)
            continue
        if not a.startswith("-") or a in ("-", "--"):
            raise FlagError(f"unexpected argument {a!r} (flags are --name=value)")
        body = a.lstrip("-")
        name, eq, value = body.partition("=")
        neg = False
        if name not in flags and name.startswith("no") and name[2:] in flags \
                and flags[name[2:]][0] == "bool" and not eq:
            name, neg = name[2:], True
        if name not in flags:
            known = ", ".join("--" + f for f in sorted(flags))
            raise FlagError(f"unknown flag --{name} (known: {known}; mooncake-c's own keys "
                            f"with --set section.key=value, see {prog} --help)")
        kind, handler = flags[name]
        if not eq:
            if kind == "bool":
                value = "false" if neg else "true"
            elif i < len(argv):
                value = argv[i]
                i += 1
            else:
                raise FlagError(f"--{name} needs a value")
        if kind == "int" and not value.lstrip("-").isdigit():
            raise FlagError(f"--{name}: expected an integer, not {value!r}")
        try:
            for k, v in handler(value):
                if k == "-c":
                    out += ["-c", v]
                elif k.startswith("env:"):
                    if env is not None:
                        env[k[4:]] = v
                else:
                    out += ["--set", f"{k}={v}"]
        except FlagError as e:
            raise FlagError(f"--{name}: {e}") from None
    if flags is MASTER_FLAGS and "metadata.http=true" in out and \
            not any(a.startswith("metadata.http_port=") for a in out):
        # upstream serves it on its own port, 8080 by default
        out += ["--set", "metadata.http_port=8080"]
    if "metadata.http=false" in out:  # upstream ignores the port then
        while any(a.startswith("metadata.http_port=") for a in out):
            i = next(i for i, a in enumerate(out) if a.startswith("metadata.http_port="))
            del out[i - 1:i + 1]
    return out


def _usage(prog, cname, flags):
    lines = [f"usage: {prog} [--flag=value | --flag value]... [--set section.key=value]...",
             f"Upstream Mooncake's {prog} flags, run as {cname}:", ""]
    for f in sorted(flags):
        kind, _ = flags[f]
        lines.append(f"  --{f}" + ("[=true|false]" if kind == "bool" else "=VALUE"))
    if flags is CLIENT_FLAGS:
        lines += ["", "Runs mooncake-store-server --set service.enabled=true (port 50052 and a "
                  "4 GiB segment unless given); anything after -- goes to it as it is."]
    lines += ["", f"Every key of {cname} (below) can be set with --set section.key=value.", ""]
    return "\n".join(lines)


def client_args(argv, env=None):
    """mooncake_client's arguments -> mooncake-store-server's: the service
    role's defaults, then the mapped flags (a configuration file first);
    what follows -- goes to the program as it is."""
    rest = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    mapped = map_flags(argv, CLIENT_FLAGS, "mooncake_client", env)
    conf, sets = [], []
    i = 0
    while i < len(mapped):
        if mapped[i] in ("-c", "--config"):
            conf = ["-c", mapped[i + 1]]
            i += 2
        else:
            sets.append(mapped[i])
            i += 1
    return conf + CLIENT_DEFAULTS + sets + rest


def _run(prog, cname, flags, argv, mapper=None):
    binary = find_program(cname)
    opts = argv[:argv.index("--")] if "--" in argv else argv
    if any(a in ("-h", "--help", "-help", "--helpfull") for a in opts):
        print(_usage(prog, cname, flags))
        sys.stdout.flush()
        if binary is not None:
            os.execv(binary, [binary, "--help"])
        return 0
    env = {}
    try:
        if mapper is not None:
            args = mapper(argv, env)
        else:
            args = map_flags(argv, flags, prog, env)
    except FlagError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    if binary is None:
        print(f"{prog}: the {cname} program was not found (set MOONCAKE_BIN_DIR, or put it "
              "on PATH)", file=sys.stderr)
        return 127
    os.environ.update(env)
    os.execv(binary, [binary] + args)
    return 127  # not reached


def master_main(argv=None):
    """mooncake_master: upstream's flags onto mooncake-master."""
    return _run("mooncake_master", "mooncake-master", MASTER_FLAGS,
                sys.argv[1:] if argv is None else argv)


def http_metadata_main(argv=None):
    """mooncake_http_metadata_server: upstream's --host/--port onto
    mooncake-http-metadata-server."""
    return _run("mooncake_http_metadata_server", "mooncake-http-metadata-server",
                HTTP_METADATA_FLAGS, sys.argv[1:] if argv is None else argv)


def client_main(argv=None):
    """mooncake_client: upstream's standalone client launcher (--host,
    --port, --global_segment_size, --master_server_address, ...) onto
    mooncake-store-server serving co-located clients (service.enabled)."""
    return _run("mooncake_client", "mooncake-store-server", CLIENT_FLAGS,
                sys.argv[1:] if argv is None else argv, client_args)


if __name__ == "__main__":
    sys.exit(master_main())
