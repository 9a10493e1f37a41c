"""A TCP proxy that a test can cut and heal, to put a process on the wrong side of a partition.

The process under test connects to the proxy instead of the server. ``cut()`` drops every open
connection and makes new ones hang unanswered (as a partition does: no reset, only silence);
``heal()`` lets connections through again; ``drop_after_first_answer(n)`` closes each of the
next ``n`` connections once the server's first answer reached the client (a server that
drops a client in the middle of a handshake)::

    with TcpProxy("127.0.0.1", zk_port) as proxy:
        start_supervisor(zookeeper=f"127.0.0.1:{proxy.port}")
        proxy.cut()
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from types import TracebackType

CHUNK = 64 * 1024


class TcpProxy:
    """Forwards every connection on ``port`` to ``target``; ``cut()`` and ``heal()``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._held: list[socket.socket] = []  # accepted while cut: never answered
        self._cut = False
        self._to_drop = 0
        self.dropped = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def cut(self) -> None:
        """Drop every connection; new ones are accepted and then left in silence."""
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            _close(*pair)

    def drop_after_first_answer(self, connections: int) -> None:
        """Close each of the next ``connections`` after the server's first answer."""
        with self._lock:
            self._to_drop = connections

    def heal(self) -> None:
        with self._lock:
            self._cut = False
            held, self._held = self._held, []
        _close(*held)

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self.heal()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._cut:
                    self._held.append(client)
                    continue
            try:
                server = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, server))
                drop = self._to_drop > 0
                self._to_drop -= drop
            threading.Thread(target=self._pump, args=(client, server, drop), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket, drop: bool = False) -> None:
        peers = {client: server, server: client}
        with selectors.DefaultSelector() as selector:
            for sock in peers:
                selector.register(sock, selectors.EVENT_READ)
            while True:
                try:
                    for key, _ in selector.select(timeout=0.5):
                        source = key.fileobj
                        assert isinstance(source, socket.socket)
                        data = source.recv(CHUNK)
                        if not data:
                            raise ConnectionError("closed")
                        peers[source].sendall(data)
                        if drop and source is server:
                            with self._lock:
                                self.dropped += 1
                            raise ConnectionError("dropped after the first answer")
                except (OSError, ValueError, ConnectionError):
                    _close(client, server)
                    return


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
