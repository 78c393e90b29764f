"""The live bus's transport on the embedded default (SQLite alone: one machine, no server to ring): a Unix datagram
socket per listening process, in one directory of this machine, and each message sent to every one of them. The
message format and the outbox are agents/runs/livebus.py's; listening is the doorbell's (agents/runs/doorbell.py).
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)

SEND_TIMEOUT_S = 0.5  # a local listener that does not read for this long misses a message rather than stall us


def local_dir() -> Path:
    """Where this deployment's listening processes keep their sockets: AGENT_LIVE_DIR, else a directory of the
    temporary directory named after the database (so a test database and the development one never mix)."""
    if settings.AGENT_LIVE_DIR:
        path = Path(settings.AGENT_LIVE_DIR)
    else:
        digest = hashlib.sha256(str(connection.settings_dict["NAME"]).encode()).hexdigest()[:12]
        path = Path(tempfile.gettempdir()) / f"reactsite-live-{digest}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def sending_socket() -> socket.socket:
    """A socket to send datagrams from, that waits at most SEND_TIMEOUT_S on a send."""
    out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    out.settimeout(SEND_TIMEOUT_S)
    return out


def sender() -> Callable[[list[str]], None]:
    """The outbox's send: each batch to every listening process of the deployment's directory."""
    directory = local_dir()
    out = sending_socket()
    return lambda batch: deliver(out, directory, batch)


def deliver(out: socket.socket, directory: Path, batch: list[str]) -> None:
    """Each message to every listening process's socket in the directory."""
    targets = [entry.path for entry in os.scandir(directory) if entry.name.endswith(".sock")]
    for payload in batch:
        data = payload.encode()
        for target in list(targets):
            try:
                if not _sent(out, data, target):
                    log.warning("a live event was not delivered to %s (its queue stayed full)", target)
            except (ConnectionRefusedError, FileNotFoundError):  # its process is gone
                targets.remove(target)
                with suppress(OSError):
                    os.unlink(target)
            except OSError as exc:  # a full queue after the timeout: that listener misses this one
                log.warning("a live event was not delivered to %s (%s)", target, type(exc).__name__)


def _sent(out: socket.socket, data: bytes, target: str) -> bool:
    """One datagram to one listener, waiting (up to SEND_TIMEOUT_S) while its queue is full: Linux queues only
    net.unix.max_dgram_qlen (often 10) datagrams per socket, and under gevent a send to a full queue returns 0
    instead of waiting (its wait is for our own buffer, which is free)."""
    deadline = time.monotonic() + SEND_TIMEOUT_S
    while not out.sendto(data, target):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def local_socket() -> socket.socket:
    """A socket this process listens on, bound in the deployment's directory (removed by its owner on exit, or by
    the first sender that finds it dead)."""
    directory = local_dir()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = directory / f"{os.getpid()}-{os.urandom(4).hex()}.sock"
    sock.bind(str(path))
    os.chmod(path, 0o600)
    atexit.register(_remove, path)  # a process that exits takes its socket along (one killed leaves it to senders)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return sock


def _remove(path: Path) -> None:
    with suppress(OSError):
        os.unlink(path)
