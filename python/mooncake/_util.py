"""Helpers shared by mooncake.store and mooncake.engine: host names, free
ports in upstream's range, metadata strings, human-readable sizes."""

import logging
import os
import random
import re
import socket

log = logging.getLogger("mooncake")

# upstream picks the transfer engine's port at random in this range when
# local_hostname has none
PORT_MIN, PORT_MAX = 12300, 14300
PORT_TRIES = 64

SUPPORTED_METADATA = ('"P2PHANDSHAKE", "redis://HOST:PORT[/DB]", "http://HOST:PORT/metadata", '
                      '"master" (the master\'s embedded service) or "master://HOST:PORT"')


def split_host_port(s):
    """'host', 'host:port', '[v6]', '[v6]:port', or a bare IPv6 address ->
    (host, port or None). ValueError when the port is not 1..65535."""
    s = s.strip()
    if s.startswith("["):
        end = s.find("]")
        if end < 0:
            raise ValueError(f"unterminated '[' in {s!r}")
        host, rest = s[1:end], s[end + 1:]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise ValueError(f"unexpected {rest!r} after the address in {s!r}")
        port = rest[1:]
    elif s.count(":") == 1:
        host, port = s.split(":")
    else:
        return s, None  # a name, IPv4, or an IPv6 address without port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad port {port!r} in {s!r}")
    return host, int(port)


def secret_file(v):
    """The cluster's secret file: v when given (None: $MC_SECRET_FILE, else
    "" = none). The library reads and checks it (a bad file fails setup)."""
    if v is None:
        v = os.environ.get("MC_SECRET_FILE", "")
    return v


def join_host_port(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def port_is_free(port):
    """Whether nobody listens on TCP port on any address (probed by binding
    it without SO_REUSEPORT, so a listener that set it is seen too)."""
    for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            with socket.socket(fam, socket.SOCK_STREAM) as sk:
                if fam == socket.AF_INET6:
                    sk.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sk.bind((addr, port))
        except OSError as e:
            if fam == socket.AF_INET6 and e.errno in (97, 99):  # no IPv6 here
                continue
            return False
    return True


def candidate_ports(port):
    """The port to listen on: the given one, else random free ones in
    upstream's range (the caller tries them in turn)."""
    if port is not None:
        yield port
        return
    ports = list(range(PORT_MIN, PORT_MAX))
    random.shuffle(ports)
    tried = 0
    for p in ports:
        if tried >= PORT_TRIES:
            return
        if port_is_free(p):
            tried += 1
            yield p


def store_metadata(s):
    """Upstream's metadata_server string -> the library's, or None (logged,
    naming the supported forms) when it is not one mooncake-c serves."""
    if not isinstance(s, str):
        raise TypeError(f"metadata_server must be str, not {type(s).__name__}")
    if s in ("P2PHANDSHAKE", "p2p"):
        return "p2p"
    if s == "master" or re.match(r"^(master|redis|http)://", s):
        return s
    log.error("metadata_server %r is not supported: use %s", s, SUPPORTED_METADATA)
    return None


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_size(v, what):
    """An int (bytes) or a string such as "16MB", "16 MB", "1GiB", "512k",
    "1.5 GB" (every unit binary: MB = MiB, as upstream's configs mean) ->
    bytes. ValueError naming `what` otherwise (e.g. "50%")."""
    if isinstance(v, bool):
        raise ValueError(f"{what}: {v!r} is not a size")
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"{what}: {v} is negative")
        return v
    if isinstance(v, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", v)
        if m and m.group(2).lower() in _UNITS:
            return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
        raise ValueError(f"{what}: {v!r} is not a size (like 16777216, \"16MB\", \"1 GiB\")")
    raise ValueError(f"{what}: {v!r} is not a size")
