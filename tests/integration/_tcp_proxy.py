"""A TCP forwarder on a loopback port that a test can take down and bring back: a database server that goes away
(connections cut, new ones refused, as when PostgreSQL restarts or its host is lost) and comes back on the same port.
"""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    """127.0.0.1:`port` -> 127.0.0.1:`target_port` while up; while down, nothing listens there (connect refused)."""

    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port or _free_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.accepted = 0

    @property
    def up(self) -> bool:
        return self._listener is not None

    def start(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="tcp-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        """Refuse new connections and cut every open one (both sides see the connection end)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            _close(listener)
        with self._lock:
            cut, self._open = list(self._open), set()
        for sock in cut:
            _close(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:  # stopped meanwhile
                    _close(client)
                    _close(upstream)
                    return
                self._open |= {client, upstream}
                self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), name="tcp-proxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open -= {src, dst}
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
