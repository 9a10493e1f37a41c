"""The supervisor's lease, handed to its workers: its end written to the lease file.

The workers stop themselves once the lease's end written there has passed
(``stratus.worker.lease_file``), so a supervisor that stops running cannot leave them
running past its lease. The control loop hands the lease at every tick, before any worker
starts; only a change is written, and a write that fails is logged once until one succeeds
(the workers then see no newer lease and stop: safe, and loud)::

    handover = LeaseHandover(settings.spec.lease_path)
    handover.hand(lease.ends_at(), since=lease.held_since)      # each tick

With each gain of the lease, when it was gained is written first (``<lease>.since``): a worker
that did not look across a lapse tells a lease gained again from one renewed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from stratus.worker.lease_file import write_lease

# the control loop's events: under its logger, as operators filter them
log = logging.getLogger("stratus.supervisor.control_loop")


class LeaseHandover:
    """Writes the lease's end to ``path`` when it changed (nothing without a path)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._handed: float | None = None  # the lease's end last written
        self._handed_since: float | None = None  # when the lease last written was gained
        self._failed = False

    def hand(self, ends: float | None, *, since: float | None = None) -> None:
        """Hand the lease ending at ``ends`` (None: not held, or lapsed), gained at
        ``since``."""
        if self.path is None:
            return
        if ends is None and self._handed is None:
            return  # never held: a previous supervisor's lease stands until the first renewal
        until = ends or 0.0
        if until == self._handed:
            return
        gained = since if since != self._handed_since else None
        try:
            write_lease(self.path, until, since=gained)
        except OSError as exc:  # the workers see no newer lease and stop: safe, and loud
            if not self._failed:
                log.error("event=lease_file_not_written path=%s error=%r", self.path, exc)
            self._failed = True
            return
        self._handed = until
        self._handed_since = since if since is not None else self._handed_since
        self._failed = False
