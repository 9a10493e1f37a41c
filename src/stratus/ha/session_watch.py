"""When a zkfc must presume its ZooKeeper session gone, and so stand its service down.

Two events end the session as far as the zkfc is concerned:

- ZooKeeper says it expired (``SessionState.EXPIRED``, heard at reconnection);
- the connection stayed suspended for a whole session timeout (the one the server granted).
  The server counts that timeout from our last contact, which was before the suspension, so
  by then it has expired the session and another zkfc may be taking over, even though this
  one, cut off, cannot hear it.

A suspension shorter than that changes nothing (the elector's neutral mode): a ZooKeeper
restart or a short network fault keeps the same session and the same active::

    watch = SessionWatch(session, on_lost=controller.session_expired)
    watch.start()   # a listener on the session; on_lost runs on kazoo's or a timer's thread
    watch.stop()

``on_lost`` must not block (it posts to the controller's event thread).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from stratus.zk.session import SessionChange, SessionState, ZkSession

log = logging.getLogger(__name__)


class SessionWatch:
    """Calls ``on_lost`` once the session expired or stayed suspended a session timeout."""

    def __init__(self, session: ZkSession, on_lost: Callable[[], None]) -> None:
        self._session = session
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def is_armed(self) -> bool:
        """True while a suspension is being timed (a method: mypy would narrow a property)."""
        with self._lock:
            return self._timer is not None

    def start(self) -> None:
        self._session.add_listener(self._changed)

    def stop(self) -> None:
        self._session.remove_listener(self._changed)
        self._cancel()

    def _changed(self, change: SessionChange) -> None:
        if change.state is SessionState.EXPIRED:
            self._cancel()
            self._on_lost()
        elif change.state is SessionState.SUSPENDED:
            self._arm(self._session.granted_session_timeout)
        else:
            self._cancel()

    def _arm(self, delay: float) -> None:
        timer = threading.Timer(delay, self._suspended_too_long)
        timer.daemon = True
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = timer
        timer.start()

    def _cancel(self) -> None:
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _suspended_too_long(self) -> None:
        with self._lock:
            self._timer = None
        if self._session.state is SessionState.SUSPENDED:
            log.warning(
                "event=session_presumed_expired session=%x secs=%.1f",
                self._session.session_id or 0,
                self._session.granted_session_timeout,
            )
            self._on_lost()
