"""mooncake.store: upstream Mooncake's store API over mooncake-c.

    from mooncake.store import MooncakeDistributedStore, ReplicateConfig

    store = MooncakeDistributedStore()
    store.setup("localhost", "P2PHANDSHAKE", 512 << 20, 128 << 20, "tcp", "",
                "127.0.0.1:50051")
    store.put("k", b"v")
    store.get("k")            # b"v"; b"" when absent
    store.close()

Every data method is implemented in C (mooncake._mooncake.Store) and
releases the GIL while it waits; the object may be shared by threads.
Return conventions are upstream's: 0 or a negative error code (the
constants of this module, e.g. OBJECT_NOT_FOUND == -704), a put of an
existing key returns 0 and keeps the object (upsert replaces it).
"""

import enum
import logging
import os

from . import _mooncake, _util
from ._mooncake import BufferHandle, ReplicateConfig

log = logging.getLogger("mooncake")

# Upstream's ErrorCode numbers (and mooncake-c's own codes), by name.
ErrorCode = enum.IntEnum("ErrorCode", _mooncake._status_table())
globals().update({e.name: int(e) for e in ErrorCode})


class SoftPinAction(enum.IntEnum):
    """What a put does to the object's soft pin (ReplicateConfig.soft_pin_action)."""
    PRESERVE = 0  # new object: none; upsert: keep the replaced object's pin
    ENABLE = 1    # pinned for soft_pin_ttl_ms (None: the master's default)
    DISABLE = 2   # not pinned; an upsert drops the replaced object's pin


_mooncake._set_soft_pin_enum(SoftPinAction)


class ReplicaStatus(enum.IntEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class BufferDescriptor:
    """Where a memory replica lives (upstream's Python Descriptor: size,
    buffer_address, transport_endpoint; the C++ spellings with a trailing
    underscore are kept as aliases)."""

    def __init__(self, size, address, endpoint):
        self.size = size
        self.buffer_address = address
        self.transport_endpoint = endpoint

    size_ = property(lambda self: self.size)
    buffer_address_ = property(lambda self: self.buffer_address)
    transport_endpoint_ = property(lambda self: self.transport_endpoint)

    def __repr__(self):
        return (f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
                f"transport_endpoint={self.transport_endpoint}>")


class MemoryDescriptor:
    def __init__(self, buffer_descriptor):
        self.buffer_descriptor = buffer_descriptor


class DiskDescriptor:
    def __init__(self, file_path, object_size):
        self.file_path = file_path
        self.object_size = object_size


class ReplicaDescriptor:
    """One replica of an object (get_replica_desc)."""

    def __init__(self, segment, address, size, complete, disk):
        self.status = ReplicaStatus.COMPLETE if complete else ReplicaStatus.PROCESSING
        self._disk = disk
        self._mem = MemoryDescriptor(BufferDescriptor(size, address, segment))
        self._file = DiskDescriptor("", size)

    def is_memory_replica(self):
        return not self._disk

    def is_disk_replica(self):
        return self._disk

    def get_memory_descriptor(self):
        if self._disk:
            raise RuntimeError("not a memory replica")
        return self._mem

    def get_disk_descriptor(self):
        if not self._disk:
            raise RuntimeError("not a disk replica")
        return self._file


_SETUP_KEYS = ("local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
               "protocol", "rdma_devices", "master_server_addr", "secret_file",
               "enable_ssd_offload", "ssd_offload_path")
_PROBE_KEY = "mooncake-setup-probe"
_DEFAULT_SEGMENT = 16 << 20
_DEFAULT_BUFFER = 16 << 20


def bind_to_numa_node(node):
    """Upstream's bind_to_numa_node(node): run the calling thread on the
    CPUs of NUMA node `node` (from /sys/devices/system/node). As upstream,
    a node that does not exist, or a host without NUMA information, is a
    warning and nothing changes. The memory policy (upstream also prefers
    the node for allocations) is left as it is."""
    if not isinstance(node, int) or isinstance(node, bool):
        raise TypeError(f"bind_to_numa_node() argument 'node' must be int, not "
                        f"{type(node).__name__}")
    path = f"/sys/devices/system/node/node{node}/cpulist"
    try:
        if node < 0:
            raise FileNotFoundError(path)
        with open(path) as f:
            spec = f.read().strip()
    except OSError:
        log.warning("bind_to_numa_node(%d): no such NUMA node (%s); binding skipped", node, path)
        return
    cpus = set()
    for part in filter(None, spec.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    try:
        os.sched_setaffinity(0, cpus)  # 0: the calling thread
    except OSError as e:
        log.warning("bind_to_numa_node(%d): cannot run on CPUs %s: %s", node, spec, e)


def _seq(v, name):
    """A list or tuple argument of get_into_ranges (TypeError naming it)."""
    if not isinstance(v, (list, tuple)):
        raise TypeError(f"get_into_ranges() argument '{name}' must be a list, "
                        f"not {type(v).__name__}")
    return v


class MooncakeDistributedStore(_mooncake.Store):
    """Upstream's MooncakeDistributedStore (see the module docstring)."""

    _warned = set()

    def setup(self, local_hostname, metadata_server=None, global_segment_size=_DEFAULT_SEGMENT,
              local_buffer_size=_DEFAULT_BUFFER, protocol="tcp", rdma_devices="",
              master_server_addr="127.0.0.1:50051", engine=None, *, enable_ssd_offload=False,
              ssd_offload_path="", tenant_id="default", secret_file=None):
        """setup(local_hostname, metadata_server, global_segment_size=16 MiB,
        local_buffer_size=16 MiB, protocol="tcp", rdma_devices="",
        master_server_addr="127.0.0.1:50051") -> 0 or a negative error code.

        Also setup(config: dict) with the same keys; sizes there may be
        strings ("16MB", "1 GiB": binary units). local_hostname without a
        port gets a free one in 12300-14300; get_hostname() says which.
        metadata_server: "P2PHANDSHAKE", "redis://HOST:PORT",
        "http://HOST:PORT/metadata", "master" or "master://HOST:PORT".
        secret_file (keyword, or the config key "secret_file"; else
        $MC_SECRET_FILE): the cluster's secret ([security] secret_file of
        the daemons), for a cluster that authenticates its connections.
        engine (upstream: a TransferEngine to share): accepted, but the
        store runs its own engine on the host of local_hostname at a port of
        its own. A store that is set up is closed first."""
        if isinstance(local_hostname, dict):
            if metadata_server is not None:
                raise TypeError("setup(config): no other argument with a config dict")
            cfg = dict(local_hostname)
            unknown = sorted(set(cfg) - set(_SETUP_KEYS))
            if unknown:
                self._warn_once(f"setup(config): keys {unknown} are not used by mooncake-c "
                                "and are ignored")
            if "local_hostname" not in cfg or "metadata_server" not in cfg:
                log.error("setup(config): 'local_hostname' and 'metadata_server' are required")
                return int(ErrorCode.INVALID_PARAMS)
            local_hostname = cfg["local_hostname"]
            metadata_server = cfg["metadata_server"]
            global_segment_size = cfg.get("global_segment_size", _DEFAULT_SEGMENT)
            local_buffer_size = cfg.get("local_buffer_size", _DEFAULT_BUFFER)
            protocol = cfg.get("protocol", "tcp")
            rdma_devices = cfg.get("rdma_devices", "")
            master_server_addr = cfg.get("master_server_addr", "127.0.0.1:50051")
            if secret_file is None:
                secret_file = cfg.get("secret_file")
            enable_ssd_offload = cfg.get("enable_ssd_offload", enable_ssd_offload)
            ssd_offload_path = cfg.get("ssd_offload_path", ssd_offload_path)
        elif metadata_server is None:
            raise TypeError("setup() missing required argument 'metadata_server' (pos 2)")
        secret_file = _util.secret_file(secret_file)
        for name, v in (("local_hostname", local_hostname), ("protocol", protocol),
                        ("rdma_devices", rdma_devices), ("master_server_addr", master_server_addr),
                        ("ssd_offload_path", ssd_offload_path), ("tenant_id", tenant_id),
                        ("secret_file", secret_file)):
            if not isinstance(v, str):
                raise TypeError(f"setup() argument '{name}' must be str, not {type(v).__name__}")
        if engine is not None and not isinstance(engine, _mooncake.Engine):
            raise TypeError("setup() argument 'engine' must be a mooncake.engine.TransferEngine "
                            f"(or its get_engine()) or None, not {type(engine).__name__}")
        # upstream arguments mooncake-c does not implement
        if tenant_id != "default":
            log.error("setup(): tenants are not supported by mooncake-c (tenant_id=%r): "
                      "every client shares one key space", tenant_id)
            return int(ErrorCode.NOT_SUPPORTED)
        offload_dir = ""
        if enable_ssd_offload:
            # upstream: the path, else $MOONCAKE_OFFLOAD_FILE_STORAGE_PATH
            offload_dir = ssd_offload_path or os.environ.get("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH",
                                                             "")
            if not offload_dir:
                self._warn_once("setup(): enable_ssd_offload without ssd_offload_path or "
                                "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH: offload is off (ignored)")
        elif ssd_offload_path:
            self._warn_once("setup(): ssd_offload_path without enable_ssd_offload is ignored")
        try:
            gseg = _util.parse_size(global_segment_size, "global_segment_size")
            lbuf = _util.parse_size(local_buffer_size, "local_buffer_size")
            host, port = _util.split_host_port(local_hostname)
        except ValueError as e:
            log.error("setup(): %s", e)
            return int(ErrorCode.INVALID_PARAMS)
        meta = _util.store_metadata(metadata_server)
        if meta is None:
            return int(ErrorCode.INVALID_PARAMS)
        if not host:
            log.error("setup(): local_hostname %r has no host", local_hostname)
            return int(ErrorCode.INVALID_PARAMS)
        if engine is not None:
            # Upstream's store then works through that engine (its name and
            # port). mooncake-c's store always runs its own: on the same
            # host, at a port of its own (the engine's is taken by it);
            # get_hostname() names it. What the store does is the same.
            self._warn_once("setup(engine=...): mooncake-c's store runs its own transfer engine "
                            "(same host, its own port: see get_hostname()), not the one given")
            port = None
        rc = ErrorCode.SOCKET
        for p in _util.candidate_ports(port):
            rc = self._setup(_util.join_host_port(host, p), meta, gseg, lbuf, protocol,
                             rdma_devices, master_server_addr, p, host, secret_file=secret_file,
                             offload_dir=offload_dir)
            if rc != ErrorCode.SOCKET or port is not None:
                break  # only a port taken meanwhile is worth another one
        if rc == 0:
            # As upstream, setup fails when the master cannot be reached or
            # refuses us (another secret): one lookup proves both.
            probe = self.is_exist(_PROBE_KEY)
            if probe < 0:
                log.error("setup(): master %s: %s", master_server_addr,
                          _mooncake.status_str(probe))
                self.close()
                rc = probe
        return rc

    @classmethod
    def _warn_once(cls, msg):
        if msg not in cls._warned:
            cls._warned.add(msg)
            log.warning("%s", msg)

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address, *,
                    secret_file=None):
        """setup_dummy(mem_pool_size, local_buffer_size, server_address) -> 0 or
        a negative error code.

        A co-located ("dummy") client of the store service of this host at
        server_address ("HOST:PORT": tools/mooncake_client, or
        mooncake-store-server with service.enabled; 50052 by default). Its
        buffers are memory shared with the service: mem_pool_size bytes for
        alloc_from_mem_pool() and local_buffer_size bytes of staging for
        values elsewhere; memory of MooncakeHostMemAllocator is shared at
        register_buffer(). Sizes may be strings ("16MB": binary units).
        secret_file (keyword; else $MC_SECRET_FILE): the cluster's secret,
        when the service's control port asks for it. A store that is set up
        is closed first."""
        secret_file = _util.secret_file(secret_file)
        for name, v in (("server_address", server_address), ("secret_file", secret_file)):
            if not isinstance(v, str):
                raise TypeError(f"setup_dummy() argument '{name}' must be str, not "
                                f"{type(v).__name__}")
        try:
            pool = _util.parse_size(mem_pool_size, "mem_pool_size")
            lbuf = _util.parse_size(local_buffer_size, "local_buffer_size")
            host, port = _util.split_host_port(server_address)
        except ValueError as e:
            log.error("setup_dummy(): %s", e)
            return int(ErrorCode.INVALID_PARAMS)
        if not host or port is None:
            log.error("setup_dummy(): server_address %r is not HOST:PORT of the store service",
                      server_address)
            return int(ErrorCode.INVALID_PARAMS)
        return self._setup_dummy(pool, lbuf, _util.join_host_port(host, port),
                                 secret_file=secret_file)

    def init_all(self, protocol, device_name, mount_segment_size=16 << 20):
        """Upstream's init_all(protocol, device_name, mount_segment_size=16 MiB)
        -> 0 or negative: setup("localhost:12345", metadata, mount_segment_size,
        1 GiB, protocol, device_name, "127.0.0.1:50051") as upstream's, with
        P2PHANDSHAKE for upstream's etcd at 127.0.0.1:2379 (not served here).
        INVALID_PARAMS on a store that is set up, as upstream."""
        if self._is_setup():
            log.error("init_all(): the store is already set up")
            return int(ErrorCode.INVALID_PARAMS)
        return self.setup("localhost:12345", "P2PHANDSHAKE", mount_segment_size, 1 << 30,
                          protocol, device_name, "127.0.0.1:50051")

    def put_from_with_metadata(self, key, buffer_ptr, metadata_buffer_ptr, size, metadata_size,
                               config=None):
        """Upstream's put_from_with_metadata -> 0 or negative: one object of
        the metadata_size bytes at metadata_buffer_ptr followed by the size
        bytes at buffer_ptr (both registered with register_buffer). As
        upstream: size 0 stores nothing and returns 0; -1 on a store that is
        not set up and for config.prefer_alloc_in_same_node."""
        for name, v in (("buffer_ptr", buffer_ptr), ("metadata_buffer_ptr", metadata_buffer_ptr),
                        ("size", size), ("metadata_size", metadata_size)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"put_from_with_metadata() argument '{name}' must be int, not "
                                f"{type(v).__name__}")
            if v < 0:
                raise ValueError(f"put_from_with_metadata() argument '{name}' must be >= 0")
        if config is not None and getattr(config, "prefer_alloc_in_same_node", False):
            log.error("put_from_with_metadata(): prefer_alloc_in_same_node is not supported")
            return -1
        if not self._is_setup():
            log.error("put_from_with_metadata(): the store is not set up")
            return -1
        if size == 0:
            log.warning("put_from_with_metadata(): empty data for key %r: nothing stored", key)
            return 0
        ptrs, sizes = [buffer_ptr], [size]
        if metadata_size > 0:
            ptrs, sizes = [metadata_buffer_ptr, buffer_ptr], [metadata_size, size]
        return self.batch_put_from_multi_buffers([key], [ptrs], [sizes], config)[0]

    def get_replica_desc(self, key):
        """[ReplicaDescriptor] of key ([] when absent or on error)."""
        r = self._query(key)
        if isinstance(r, int):
            return []
        return [ReplicaDescriptor(*t) for t in r]

    def batch_get_replica_desc(self, keys):
        """{key: [ReplicaDescriptor]} for the keys that exist."""
        out = {}
        for k in keys:
            d = self.get_replica_desc(k)
            if d:
                out[k] = d
        return out

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
                        all_sizes):
        """Upstream's get_into_ranges: for every buffer i, key j of it and
        fragment k of that key, the all_sizes[i][j][k] bytes at
        all_src_offsets[i][j][k] of the value all_keys[i][j] into
        buffer_ptrs[i] + all_dst_offsets[i][j][k] (registered memory).
        -> results[i][j][k]: the bytes read or a negative status. As
        upstream's, shapes that do not match give negative entries, not an
        exception: a buffer whose lists differ in length gets INVALID_PARAMS
        for every fragment of its keys, a key whose three fragment lists
        differ in length INVALID_PARAMS for each of its fragments. One master
        call per key."""
        bad = int(ErrorCode.INVALID_PARAMS)
        outer = {}
        for name, v in (("buffer_ptrs", buffer_ptrs), ("all_keys", all_keys),
                        ("all_dst_offsets", all_dst_offsets),
                        ("all_src_offsets", all_src_offsets), ("all_sizes", all_sizes)):
            outer[name] = _seq(v, name)
        ptrs = outer["buffer_ptrs"]
        results = []
        for i, ptr in enumerate(ptrs):
            if not isinstance(ptr, int) or isinstance(ptr, bool):
                raise TypeError(f"get_into_ranges() argument 'buffer_ptrs' must hold ints, "
                                f"not {type(ptr).__name__}")
            if ptr < 0:
                raise ValueError("get_into_ranges() argument 'buffer_ptrs' must hold integers >= 0")
            lists = [outer[n][i] if i < len(outer[n]) else None
                     for n in ("all_keys", "all_dst_offsets", "all_src_offsets", "all_sizes")]
            keys = _seq(lists[0], "all_keys") if lists[0] is not None else []
            per = [_seq(x, n) if x is not None else None for x, n in
                   zip(lists[1:], ("all_dst_offsets", "all_src_offsets", "all_sizes"))]
            ok = all(x is not None and len(x) == len(keys) for x in per)
            row = []
            for j, key in enumerate(keys):
                frags = [_seq(x[j], n) if x is not None and j < len(x) else None for x, n in
                         zip(per, ("all_dst_offsets", "all_src_offsets", "all_sizes"))]
                count = max((len(f) for f in frags if f is not None), default=1) or 1
                if not ok or any(f is None or len(f) != len(frags[0]) for f in frags):
                    row.append([bad] * count)
                    continue
                dst, src, size = frags
                for d in dst:
                    if not isinstance(d, int) or isinstance(d, bool):
                        raise TypeError("get_into_ranges() argument 'all_dst_offsets' must hold "
                                        f"ints, not {type(d).__name__}")
                    if d < 0:
                        raise ValueError("get_into_ranges() argument 'all_dst_offsets' must hold "
                                         "integers >= 0")
                row.append(self._get_ranges(key, [ptr + d for d in dst], src, size))
            results.append(row)
        return results

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class MooncakeHostMemAllocator:
    """Upstream's allocator of host memory for a co-located client: memory
    it allocates before setup_dummy() is shared with the store service when
    registered (register_buffer), so values there travel without a copy
    (SGLang's standalone storage mode keeps its host KV pages here). For a
    normal client it is ordinary memory."""

    def __init__(self, use_hugepage=None, hugepage_size=None):
        """use_hugepage: True puts every allocation in 2 MiB pages: hugetlb
        pages when the system's pool has them free (/proc/sys/vm/nr_hugepages),
        else normal pages made into transparent huge pages (logged); False
        normal pages; None (default) as $MC_STORE_USE_HUGEPAGE says (upstream's
        switch). hugepage_size: "2MB" (default) or 2097152; upstream's "1GB" is
        accepted with one warning and 2 MiB pages are used."""
        if use_hugepage is not None and not isinstance(use_hugepage, bool):
            raise TypeError("MooncakeHostMemAllocator() argument 'use_hugepage' must be bool or "
                            f"None, not {type(use_hugepage).__name__}")
        if hugepage_size is not None:
            b = _util.parse_size(hugepage_size, "MooncakeHostMemAllocator(hugepage_size)")
            if b == 1 << 30:
                MooncakeDistributedStore._warn_once(
                    "MooncakeHostMemAllocator(hugepage_size=1GB): 1 GiB pages are not supported "
                    "by mooncake-c; 2 MiB pages are used")
            elif b != 2 << 20:
                raise ValueError("MooncakeHostMemAllocator(hugepage_size): "
                                 f"{hugepage_size!r} is not a huge page size (\"2MB\" or \"1GB\")")
        self._hugepage_size = hugepage_size
        # MC_STORE_HUGE_HUGETLB (1, else THP) or _NONE (0); None: the environment's
        self._huge = None if use_hugepage is None else (1 if use_hugepage else 0)

    def alloc(self, size):
        """alloc(size) -> address of size bytes (zeroed, page aligned), or 0
        when they cannot be had (upstream's value; logged). size 0 is 0."""
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"alloc() argument 'size' must be int, not {type(size).__name__}")
        if size < 0:
            raise ValueError(f"alloc() argument 'size' must be >= 0, not {size}")
        if size == 0:
            log.error("MooncakeHostMemAllocator.alloc(0): nothing to allocate")
            return 0
        p = _mooncake.Store._shared_alloc(size, self._huge)
        if p == 0:
            log.error("MooncakeHostMemAllocator.alloc(%d): cannot allocate that much shared "
                      "memory", size)
        return p

    def free(self, ptr):
        """free(ptr) -> 0, or INVALID_ARGUMENT when ptr is not memory of alloc()."""
        return _mooncake.Store._shared_free(ptr)


__all__ = ["MooncakeDistributedStore", "MooncakeHostMemAllocator", "ReplicateConfig", "SoftPinAction", "BufferHandle",
           "bind_to_numa_node",
           "ErrorCode", "ReplicaStatus", "ReplicaDescriptor", "MemoryDescriptor",
           "DiskDescriptor"] + [e.name for e in ErrorCode]
