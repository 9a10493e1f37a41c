"""A TCP proxy that a test can cut and heal, to put a process on the wrong side of a partition.

The process under test connects to the proxy instead of the server. ``cut()`` drops every open
connection and makes new ones hang unanswered (as a partition does: no reset, only silence);
``heal()`` lets connections through again; ``drop_after_first_answer(n)`` closes each of the
next ``n`` connections once the server's first answer reached the client (a server that
drops a client in the middle of a handshake); ``refuse()`` closes the proxy's port, so that
every connection is refused, and ``words_only()`` opens it again but forwards only
ZooKeeper's four-letter words (``srvr``), leaving a session's handshake in silence until
``heal()``: a server that serves again while a client's reconnection still hangs;
``blackhole()`` keeps the open connections but swallows whatever crosses them, and leaves new
ones in silence (a host that died with its sockets open: no reset, no answer, ever)::

    with TcpProxy("127.0.0.1", zk_port) as proxy:
        start_supervisor(zookeeper=f"127.0.0.1:{proxy.port}")
        proxy.cut()
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

from tests.harness.lifecycle import Started

CHUNK = 64 * 1024


class TcpProxy(Started):
    """Forwards every connection on ``port`` to ``target``; ``cut()`` and ``heal()``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._held: list[socket.socket] = []  # accepted while cut: never answered
        self._cut = False
        self._blackholed = False
        self._to_drop = 0
        self._words_only = False
        self.dropped = 0
        self._closed = threading.Event()
        self._thread = self._acceptor(self._listener)

    def _acceptor(self, listener: socket.socket) -> threading.Thread:
        return threading.Thread(
            target=self._accept, args=(listener,), name="tcp-proxy", daemon=True
        )

    def start(self) -> None:
        """Start accepting connections on ``port``."""
        self._thread.start()

    def cut(self) -> None:
        """Drop every connection; new ones are accepted and then left in silence."""
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            _close(*pair)

    def blackhole(self) -> None:
        """Keep every open connection, but forward nothing more either way; new connections
        are accepted and then left in silence, until ``heal()``."""
        with self._lock:
            self._blackholed = True

    def drop_after_first_answer(self, connections: int) -> None:
        """Close each of the next ``connections`` after the server's first answer."""
        with self._lock:
            self._to_drop = connections

    def refuse(self) -> None:
        """Close the port: every connection is refused, as by a host with no server on it."""
        self.cut()
        self._listener.close()

    def words_only(self) -> None:
        """Open the port again (after ``refuse``): forward connections that open with a
        four-letter word, and leave every other one in silence until ``heal()``."""
        with self._lock:
            self._cut = False
            self._words_only = True
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._acceptor(self._listener).start()

    def heal(self) -> None:
        with self._lock:
            self._cut = False
            self._blackholed = False
            self._words_only = False
            held, self._held = self._held, []
        _close(*held)

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self.heal()
        self._listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                cut, words_only = self._cut, self._words_only
            first = _first_word(client) if words_only and not cut else b""
            with self._lock:
                if self._cut or self._blackholed or (words_only and not first.isalpha()):
                    self._held.append(client)
                    continue
            try:
                server = socket.create_connection(self._target, timeout=5)
                server.sendall(first)
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
                        with self._lock:
                            swallowed = self._blackholed
                        if swallowed:
                            continue
                        peers[source].sendall(data)
                        if drop and source is server:
                            with self._lock:
                                self.dropped += 1
                            raise ConnectionError("dropped after the first answer")
                except (OSError, ValueError, ConnectionError):
                    _close(client, server)
                    return


def _first_word(client: socket.socket) -> bytes:
    """The first four bytes a client sends (fewer if it sends fewer within a second)."""
    client.settimeout(1.0)
    data = b""
    with contextlib.suppress(OSError):
        while len(data) < 4:
            chunk = client.recv(4 - len(data))
            if not chunk:
                break
            data += chunk
    client.settimeout(None)
    return data


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
