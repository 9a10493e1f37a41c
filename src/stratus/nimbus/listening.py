"""Where a nimbus listens: its sockets, and the errors that say which port to change."""

from __future__ import annotations

import errno
import socket

from stratus.errors import StratusError


class NimbusStartError(StratusError):
    """The nimbus could not start: its port is taken, its directory unusable, and so on."""


def package_port_error(host: str, port: int, exc: OSError) -> NimbusStartError:
    """Why the package server could not listen on ``host:port``, and what to change."""
    if exc.errno == errno.EADDRINUSE:
        return NimbusStartError(
            f"nimbus.code.port {port} is in use on {host}: another nimbus of this host or "
            "another program listens there; stop it, or set nimbus.code.port to a free port "
            "(0 picks one at each start, -1 serves packages through the API alone)"
        )
    return NimbusStartError(
        f"cannot serve packages on {host}:{port} (nimbus.code.port): "
        f"{exc.strerror or exc}; set nimbus.code.port to a port this user may listen on"
    )


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (the API's, bound before ZooKeeper is reached,
    so a taken port is one clear error at once)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so, and
    # without it every keep-alive response waits 40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise NimbusStartError(
            f"nimbus cannot listen on {host}:{port}: {exc.strerror}; "
            "choose another nimbus.port or stop what uses it"
        ) from None
    sock.listen(1024)
    return sock
