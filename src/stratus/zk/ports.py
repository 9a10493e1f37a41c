"""Free loopback ports for local ZooKeeper servers and daemons, never handed out twice.

``pick_free_port()`` draws below the kernel's ephemeral range and remembers what it gave, so
that two servers of one process never get the same port and a stopped server's port stays
free for its restart::

    port = pick_free_port()
    if not port_is_free(port, reuse=True): ...   # a listener took it meanwhile
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

from stratus.zk.errors import ZooKeeperPortInUseError

LOOPBACK = "127.0.0.1"

_reserved_ports: set[int] = set()
_ports_lock = threading.Lock()


def pick_free_port() -> int:
    """A loopback port that nothing listens on and no other server of this process reserved.

    Ports are drawn below the kernel's ephemeral range, so that a client's outgoing connection
    can never take the port of a stopped server (which would make its restart fail) nor
    connect to itself while it retries a stopped server.
    """
    low, high = _pickable_range()
    rng = random.SystemRandom()
    with _ports_lock:
        for _ in range(200):
            port = rng.randrange(low, high) if high > low else _kernel_free_port()
            if port not in _reserved_ports and port_is_free(port, reuse=False):
                _reserved_ports.add(port)
                return port
    raise ZooKeeperPortInUseError(f"found no free loopback port in {low}..{high - 1}")


def reserve_port(port: int) -> None:
    """Never hand ``port`` out: a server of this process uses it."""
    with _ports_lock:
        _reserved_ports.add(port)


def _pickable_range() -> tuple[int, int]:
    """Ports ``[low, high)`` to pick from: 15000 up to the start of the ephemeral range."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="ascii")
        ephemeral_low = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 0, 0
    low = 15_000
    return (low, ephemeral_low) if ephemeral_low - low >= 1_000 else (0, 0)


def _kernel_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int, *, reuse: bool) -> bool:
    """Whether a server could listen on ``127.0.0.1:port`` now.

    With ``reuse`` (as the JVM binds), connections of a previous run in TIME_WAIT do not count
    as a use of the port; a listener on it always does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True
