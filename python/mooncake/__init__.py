"""mooncake: Python binding of mooncake-c (libmooncake), a drop-in for
upstream Mooncake's package.

    from mooncake.store import MooncakeDistributedStore, ReplicateConfig
    from mooncake.engine import TransferEngine

The store client and the transfer engine are C types of the extension module
mooncake._mooncake over libmooncake's public C ABI; every call that can block
releases the GIL.

Logging: the library writes its lines to stderr at level INFO. Quiet it with
MC_LOG_LEVEL=warn in the environment or mooncake.set_log_level("warn"); send
the lines to Python's logging (logger "mooncake") with
mooncake.log_to_python().
"""

import logging as _logging
import os as _os
import threading as _threading

from . import _mooncake
from ._mooncake import set_log_level, status_msg, status_str

__version__ = _mooncake.version()
__all__ = ["__version__", "set_log_level", "log_to_python", "log_to_stderr",
           "status_str", "status_msg"]

# Library level letters (digit sent by the sink) -> logging levels.
_LEVELS = {0: _logging.ERROR, 1: _logging.WARNING, 2: _logging.INFO,
           3: _logging.DEBUG, 4: _logging.DEBUG}
_log_lock = _threading.Lock()
_log_state = {"fds": None, "thread": None}


def _log_reader(rfd, logger):
    pending = b""
    while True:
        try:
            chunk = _os.read(rfd, 65536)
        except OSError:
            return
        if not chunk:
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if not line:
                continue
            level = _LEVELS.get(line[0] - 48, _logging.INFO)
            logger.log(level, "%s", line[1:].decode("utf-8", "replace"))


def log_to_python(logger_name="mooncake"):
    """Send libmooncake's log lines to logging.getLogger(logger_name), with
    the library's levels mapped (E->ERROR, W->WARNING, I->INFO, D/T->DEBUG).
    A daemon thread forwards them; lines are dropped, never stalled, if it
    falls behind. Call again to change the logger; log_to_stderr() undoes."""
    logger = _logging.getLogger(logger_name)
    with _log_lock:
        _stop_reader()
        rfd, wfd = _os.pipe()
        t = _threading.Thread(target=_log_reader, args=(rfd, logger),
                              name="mooncake-log", daemon=True)
        t.start()
        _mooncake._log_pipe(wfd)
        _log_state["fds"] = (rfd, wfd)
        _log_state["thread"] = t


def _stop_reader():
    fds = _log_state["fds"]
    if fds is None:
        return
    _mooncake._log_pipe(-1)          # no sink call runs after this returns
    _os.close(fds[1])                # the reader sees EOF
    _log_state["thread"].join(timeout=5)
    _os.close(fds[0])
    _log_state["fds"] = _log_state["thread"] = None


def log_to_stderr():
    """Back to the default: library log lines on stderr."""
    with _log_lock:
        _stop_reader()
