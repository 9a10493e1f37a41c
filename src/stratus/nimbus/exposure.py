"""Whether a nimbus may listen where it is told: no open API on a network without a flag.

A nimbus whose ``nimbus.bind.host`` is not a loopback address (or a name that resolves
only to loopback addresses) lets anyone who reaches it run code on every supervisor unless
``nimbus.auth.tokens.file`` is set. Such a start is refused with one line that names the
setting, unless ``nimbus.auth.insecure`` (``stratus nimbus --insecure``) says the operator
wants it; then a warning is logged at start, naming the address::

    check_exposure("0.0.0.0", authenticated=False, insecure=False)   # InsecureBindError
"""

from __future__ import annotations

import ipaddress
import logging
import socket

from stratus.errors import ConfigError

log = logging.getLogger(__name__)


class InsecureBindError(ConfigError):
    """A nimbus would serve an unauthenticated API on a non-loopback address."""


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


def check_exposure(bind_host: str, *, authenticated: bool, insecure: bool) -> None:
    """Refuse (InsecureBindError) or warn about an unauthenticated non-loopback bind."""
    if authenticated or is_loopback(bind_host):
        return
    if not insecure:
        raise InsecureBindError(
            f"nimbus refuses to listen on {bind_host} without authentication: set "
            "nimbus.auth.tokens.file (see docs/security.md), or nimbus.auth.insecure=true "
            "(stratus nimbus --insecure) to run an open API on purpose"
        )
    log.warning(
        "event=insecure_nimbus bind=%s: INSECURE, no authentication "
        "(nimbus.auth.insecure): anyone who reaches this address can submit code that "
        "runs on every supervisor, and kill any pipeline",
        bind_host,
    )
