"""Where a nimbus listens: its sockets, and the errors that say which port to change."""

from __future__ import annotations

import errno
import socket

from stratus.errors import StratusError
from stratus.web.listening import tcp_listener


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
    try:
        return tcp_listener(host, port)
    except OSError as exc:
        raise NimbusStartError(
            f"nimbus cannot listen on {host}:{port}: {exc.strerror}; "
            "choose another nimbus.port or stop what uses it"
        ) from None
