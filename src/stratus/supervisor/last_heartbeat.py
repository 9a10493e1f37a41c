"""The supervisor's last heartbeat at a stop, and the lease it renews for the workers left.

At a stop, once the control loop has ended, the supervisor publishes one last round: the
workers' last heartbeats (STOPPED, when they were stopped) and its own with
``stopping=True``, listing the workers that run on. It gets ``FINAL_HEARTBEAT_SECS`` at
most, on a thread of its own (a write may hang on an unreachable store). When the workers
run on, a successful write renews the lease as any write would, and its new end is handed
to the workers' lease file: a supervisor started again has the whole lease to adopt them::

    started = clock()
    if publish_last(publisher.publish, loop.heartbeat_round(stopping=True), supervisor="s1"):
        hand_last_lease(lease, started, lease_path, clock=clock)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from stratus.api.clock import Clock
from stratus.supervisor.heartbeat_lease import HeartbeatLease, LeaseState
from stratus.supervisor.heartbeat_publisher import HeartbeatRound
from stratus.worker.lease_file import write_lease

# the supervisor daemon's events: under its logger, as operators filter them
log = logging.getLogger("stratus.supervisor.daemon")

FINAL_HEARTBEAT_SECS = 5.0  # how long the last heartbeat may take at a stop


def publish_last(
    publish: Callable[[HeartbeatRound], bool], final: HeartbeatRound, *, supervisor: str
) -> bool:
    """Publish ``final``, waiting ``FINAL_HEARTBEAT_SECS`` at most; whether it was written."""
    done = threading.Event()

    def write() -> None:
        if publish(final):
            done.set()

    thread = threading.Thread(target=write, name="last-heartbeat", daemon=True)
    thread.start()
    thread.join(timeout=FINAL_HEARTBEAT_SECS)
    log.info(
        "event=last_heartbeat supervisor=%s stopping=true written=%s",
        supervisor,
        "yes" if done.is_set() else "no",
    )
    return done.is_set()


def hand_last_lease(
    lease: HeartbeatLease, started: float, path: Path | None, *, clock: Clock
) -> None:
    """The last heartbeat, written after the control loop ended, renews the lease as any
    write would (the leader saw it no earlier than ``started``): the workers left running
    get the whole lease from it, so the next start has that long to take them over."""
    if lease.state is not LeaseState.HELD:
        return  # lapsed or fenced: nothing to extend
    lease.renewed(write_started=started, now=clock())
    until = lease.ends_at()
    if until is None or path is None:
        return
    try:
        write_lease(path, until)
    except OSError as exc:  # the workers stop at the lease they saw: safe
        log.warning("event=lease_file_not_written path=%s error=%r", path, exc)
