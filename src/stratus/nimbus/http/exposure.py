"""Whether a nimbus may listen where it is told: no open API on a network without a flag.

A nimbus whose ``nimbus.bind.host`` is not a loopback address (or a name that resolves
only to loopback addresses) lets anyone who reaches it run code on every supervisor unless
``nimbus.auth.tokens.file`` is set. Such a start is refused with one line that names the
setting, unless ``nimbus.auth.insecure`` (``stratus nimbus --insecure``) says the operator
wants it; then a warning naming the address is logged at start and again every
``nimbus.auth.insecure.warn.secs`` while the nimbus runs (a flag that is loud, not a line
that scrolls away), and the nimbus's registration says ``insecure`` so that every nimbus's
summary and status page show it::

    check_exposure("0.0.0.0", authenticated=False, insecure=False)   # InsecureBindError
    if check_exposure(bind, authenticated=False, insecure=True):     # warned: exposed
        reminder = InsecureReminder(bind, every_secs=300.0)
        reminder.start()
        reminder.stop()
"""

from __future__ import annotations

import logging
import threading

from stratus.errors import ConfigError
from stratus.security.loopback import is_loopback

log = logging.getLogger(__name__)


class InsecureBindError(ConfigError):
    """A nimbus would serve an unauthenticated API on a non-loopback address."""


def check_exposure(bind_host: str, *, authenticated: bool, insecure: bool) -> bool:
    """Refuse (InsecureBindError) or warn about an unauthenticated non-loopback bind; True
    when it warned: the nimbus serves an open API on a network, on purpose."""
    if authenticated or is_loopback(bind_host):
        return False
    if not insecure:
        raise InsecureBindError(
            f"nimbus refuses to listen on {bind_host} without authentication: set "
            "nimbus.auth.tokens.file (see docs/security.md), or nimbus.auth.insecure=true "
            "(stratus nimbus --insecure) to run an open API on purpose"
        )
    warn_insecure(bind_host)
    return True


def warn_insecure(bind_host: str) -> None:
    """The warning of a nimbus serving an open API on ``bind_host``."""
    log.warning(
        "event=insecure_nimbus bind=%s: INSECURE, no authentication "
        "(nimbus.auth.insecure): anyone who reaches this address can submit code that "
        "runs on every supervisor, and kill any pipeline",
        bind_host,
    )


class InsecureReminder:
    """A daemon thread that repeats ``warn_insecure`` every ``every_secs`` until stopped."""

    def __init__(self, bind_host: str, *, every_secs: float) -> None:
        self._bind_host = bind_host
        self._every_secs = every_secs
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="insecure-reminder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(self._every_secs):
            warn_insecure(self._bind_host)
