"""ZooKeeper's four-letter words (``srvr``, ``stat``, ``mntr``...): one command, one answer.

Servers answer the words of their ``4lw.commands.whitelist``; ``srvr`` is on it by default.
A secure client port answers them too, inside TLS: give the connection's ``ssl.SSLContext``::

    answer = four_letter_word("127.0.0.1", 2181, "srvr", timeout=2.0)
    # "Zookeeper version: 3.9.5...\\nZxid: 0x1f\\nMode: standalone..."
    answer = four_letter_word("zk1", 2281, "srvr", 2.0, ZkTls(True, "ca.pem").ssl_context())
"""

from __future__ import annotations

import socket
import ssl


def four_letter_word(
    host: str, port: int, word: str, timeout: float, tls: ssl.SSLContext | None = None
) -> str:
    """Send ``word`` to ``host:port`` (over TLS with ``tls``) and return the whole answer;
    ``OSError`` (``ssl.SSLError`` included) if it fails."""
    with socket.create_connection((host, port), timeout=timeout) as raw:
        if tls is None:
            raw.sendall(word.encode("ascii"))
            raw.shutdown(socket.SHUT_WR)
            return _read_all(raw)
        with tls.wrap_socket(raw, server_hostname=host) as sock:
            # No half-close inside TLS: the server answers the four bytes and closes.
            sock.sendall(word.encode("ascii"))
            return _read_all(sock)


def _read_all(sock: socket.socket) -> str:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ssl.SSLEOFError:  # closed without TLS's close_notify: the answer is complete
        pass
    return b"".join(chunks).decode("utf-8", errors="replace")
