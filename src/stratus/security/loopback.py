"""Whether an address reaches this machine only: what decides if an open server is exposed.

is_loopback("127.0.0.1")   # True
is_loopback("0.0.0.0")     # False
is_local_address("10.0.0.5")  # True on the machine that has that address
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


def is_local_address(host: str) -> bool:
    """True if ``host`` names this machine: a loopback address, or one we can bind to."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, _, _, _, sockaddr in infos:
        if ipaddress.ip_address(str(sockaddr[0]).split("%")[0]).is_loopback:
            return True
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((sockaddr[0], 0))
                return True
            except OSError:
                continue
    return False
