"""mooncake.engine: upstream Mooncake's TransferEngine over mooncake-c.

    from mooncake.engine import TransferEngine

    te = TransferEngine()
    te.initialize("10.0.0.1", "P2PHANDSHAKE", "rdma", "mlx5_0")
    port = te.get_rpc_port()            # peers target "10.0.0.1:<port>"
    te.batch_register_memory([ptr], [size])
    te.batch_transfer_sync_write("10.0.0.2:12345", [ptr], [peer_ptr], [size])

Transfers, registrations and waits are C (mooncake._mooncake.Engine) and
release the GIL. Return values are upstream's: 0 or negative (mooncake-c's
error codes, mooncake.store.ErrorCode), batch ids as ints (0 or -1 on
failure, as upstream per call).
"""

import enum
import logging

from . import _mooncake, _util

log = logging.getLogger("mooncake")

SUPPORT_CUDA = True   # through the CUDA runtime loaded at run time
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_INTRA_NVLINK = False


class TransferOpcode(enum.IntEnum):
    Read = 0
    Write = 1
    READ = 0   # the spelling of upstream's documentation (aliases)
    WRITE = 1


# upstream exports the values into the module too
Read = TransferOpcode.Read
Write = TransferOpcode.Write
READ = TransferOpcode.READ
WRITE = TransferOpcode.WRITE


class TransferNotify:
    """upstream's notify message; transfers here take notify=None only."""

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg


def _engine_metadata(s):
    if not isinstance(s, str):
        raise TypeError(f"metadata_server must be str, not {type(s).__name__}")
    if s in ("P2PHANDSHAKE", "p2p"):
        return "p2p"
    if s.startswith(("master://", "redis://", "http://")):
        return s
    log.error("metadata_server %r is not supported: use \"P2PHANDSHAKE\", "
              "\"redis://HOST:PORT[/DB]\", \"http://HOST:PORT/metadata\" or "
              "\"master://HOST:PORT\" (mooncake-master's embedded service)", s)
    return None


class TransferEngine(_mooncake.Engine):
    """Upstream's TransferEngine (see the module docstring)."""

    TransferOpcode = TransferOpcode  # upstream: TransferEngine.TransferOpcode.Write

    def initialize(self, local_hostname, metadata_server, protocol, device_name, *,
                   secret_file=None):
        """-> 0 or negative. local_hostname without a port gets a free one
        in 12300-14300 (get_rpc_port() says which; the engine's name is then
        "host:port", what peers target with P2PHANDSHAKE). protocol "tcp" or
        "rdma"; device_name: comma list of NICs ("" = all). secret_file
        (keyword; else $MC_SECRET_FILE): the cluster's secret, for engines
        whose peers authenticate their connections."""
        secret_file = _util.secret_file(secret_file)
        for name, v in (("local_hostname", local_hostname), ("protocol", protocol),
                        ("device_name", device_name), ("secret_file", secret_file)):
            if not isinstance(v, str):
                raise TypeError(f"initialize() argument '{name}' must be str, "
                                f"not {type(v).__name__}")
        meta = _engine_metadata(metadata_server)
        if meta is None:
            return -1
        if protocol not in ("tcp", "rdma"):
            log.error("initialize(): protocol %r is not supported (tcp or rdma)", protocol)
            return -1
        try:
            host, port = _util.split_host_port(local_hostname)
        except ValueError as e:
            log.error("initialize(): %s", e)
            return -1
        rc = -1
        for p in _util.candidate_ports(port):
            rc = self._initialize(_util.join_host_port(host, p), meta, protocol, device_name,
                                  p, host, secret_file=secret_file)
            if rc != _SOCKET or port is not None:
                break
        return rc

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name,
                       metadata_type):
        """upstream's form with the metadata type apart: ("host:port", "etcd")
        and the like; "P2PHANDSHAKE" stays as it is."""
        if metadata_server != "P2PHANDSHAKE" and "://" not in metadata_server:
            metadata_server = f"{metadata_type}://{metadata_server}"
        return self.initialize(local_hostname, metadata_server, protocol, device_name)

    def get_engine(self):
        """What upstream hands to MooncakeDistributedStore.setup(engine=...)
        to share this engine: the engine itself (mooncake-c's store accepts
        it and runs an engine of its own, see setup())."""
        return self

    def get_notifies(self):
        """No notifications are sent with transfers here: always []."""
        return []


_SOCKET = dict(_mooncake._status_table())["SOCKET"]

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "Read", "Write", "READ", "WRITE"]
