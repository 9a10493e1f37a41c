"""ZooKeeper's four-letter words (``srvr``, ``stat``, ``mntr``...): one command, one answer.

Servers answer the words of their ``4lw.commands.whitelist``; ``srvr`` is on it by default::

    answer = four_letter_word("127.0.0.1", 2181, "srvr", timeout=2.0)
    # "Zookeeper version: 3.9.5...\\nZxid: 0x1f\\nMode: standalone..."
"""

from __future__ import annotations

import socket


def four_letter_word(host: str, port: int, word: str, timeout: float) -> str:
    """Send ``word`` to ``host:port`` and return the whole answer; ``OSError`` if it fails."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")
