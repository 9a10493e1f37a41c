"""The listening socket of every stratus HTTP server."""

from __future__ import annotations

import socket

BACKLOG = 1024


def tcp_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port); OSError if it cannot bind.

    Made with ``IPPROTO_TCP`` explicitly: asyncio sets TCP_NODELAY only on sockets that say
    so, and without it every keep-alive response waits 40 ms for a delayed ACK (Nagle).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(BACKLOG)
    return sock
