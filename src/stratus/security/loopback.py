"""Whether an address reaches this machine only: what decides if an open server is exposed.

is_loopback("127.0.0.1")   # True
is_loopback("0.0.0.0")     # False
"""

from __future__ import annotations

import ipaddress
import socket


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (unresolvable: no)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos
    )
