"""The supervisor's lease, handed to its workers: its end written to the lease file.

The workers stop themselves once the lease's end written there has passed
(``stratus.worker.lease_file``), so a supervisor that stops running cannot leave them
running past its lease. The control loop hands the lease at every tick, before any worker
starts; only a change is written, and a write that fails is logged once until one succeeds
(the workers then see no newer lease and stop: safe, and loud)::

    handover = LeaseHandover(settings.spec.lease_path)
    handover.hand(lease.ends_at())      # each tick
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
        self._failed = False

    def hand(self, ends: float | None) -> None:
        """Hand the lease ending at ``ends`` (None: not held, or lapsed)."""
        if self.path is None:
            return
        if ends is None and self._handed is None:
            return  # never held: a previous supervisor's lease stands until the first renewal
        until = ends or 0.0
        if until == self._handed:
            return
        try:
            write_lease(self.path, until)
        except OSError as exc:  # the workers see no newer lease and stop: safe, and loud
            if not self._failed:
                log.error("event=lease_file_not_written path=%s error=%r", self.path, exc)
            self._failed = True
            return
        self._handed = until
        self._failed = False
