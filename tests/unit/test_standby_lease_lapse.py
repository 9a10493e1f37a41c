"""A standby worker outlives a short lapse of its supervisor's lease, and is promoted only once
the lease holds again.

When a host dies with the ZooKeeper member a supervisor's session was on, that session is
cut until it reconnects to another member: seconds in which the supervisor's heartbeats renew
no lease and its lease lapses. Its workers stop, as they must; its standby worker used to stop
too (the supervisor's fence and the worker's own watch of the lease file), so a leader
promoting it right then found it starting again, not READY, and moved the pipeline cold. The
control loop and the worker's watch run here with a hand-driven clock and fake processes; the
real hosts are ``bench/host_failover.py``'s."""

from __future__ import annotations

import os
import time
from pathlib import Path

from stratus.api.standby_workers import STANDBY_CONF_KEY
from stratus.supervisor.assignment_reader import AssignmentsRead
from stratus.supervisor.control_loop import ControlLoop
from stratus.supervisor.heartbeat_lease import HeartbeatLease, LeaseState
from stratus.supervisor.loop_messages import HeartbeatWritten
from stratus.supervisor.settings import LoopSettings
from stratus.supervisor.standby_worker import Stage
from stratus.supervisor.worker_process import WorkerPaths
from stratus.worker.lease_file import LEASE_FILE, write_lease
from stratus.worker.standby import ORPHAN_SECS, orphan_watch
from tests.harness.supervisor_fakes import (
    RESTART_SETTINGS,
    TIMEOUTS,
    FakeClock,
    FakeLauncher,
    assignment,
)
from tests.unit.test_standby_worker_lifecycle import PLACEMENT, ready_file, started

FENCE_SECS = 2.0


def test_a_lapse_of_the_lease_keeps_a_ready_standby_worker_whose_promotion_waits_for_it(
    tmp_path: Path,
) -> None:
    clock = FakeClock(100.0)
    lease = HeartbeatLease(timeout_secs=FENCE_SECS)
    loop = ControlLoop(
        "s2",
        2,
        launcher=FakeLauncher(tmp_path),
        paths_of=lambda name: WorkerPaths.of(tmp_path, name),
        lease=lease,
        settings=LoopSettings(heartbeat_secs=1.0, restart=RESTART_SETTINGS, timeouts=TIMEOUTS),
        request_read=lambda: None,
        offer=lambda _round: None,
        clock=clock,
        wall=clock,
    )
    standby, standby_launcher = started(tmp_path, clock)  # etl's, placed on s2
    ready_file(tmp_path, pid=standby_launcher.standby[0].pid)
    standby.step(may_start=True)
    assert standby.stage is Stage.READY
    loop.standby.workers["etl"] = standby
    loop._apply(HeartbeatWritten(100.0))
    loop._apply(AssignmentsRead(100.1, {}, {"etl": PLACEMENT}, era=1))
    loop.tick()

    clock.advance(FENCE_SECS + 0.5)  # no heartbeat renewed it: its ZooKeeper session is cut
    loop.tick()
    assert lease.state is LeaseState.UNLEASED  # fenced
    assert loop.standby.workers["etl"] is standby
    assert standby.stage is Stage.READY  # kept: it runs nothing of the pipeline's
    assert standby_launcher.standby[0].signals == []

    promoted = assignment("etl", "s2", generation=3, conf={STANDBY_CONF_KEY: "hot"}, zxid=50)
    loop._apply(AssignmentsRead(clock(), {"etl": promoted}, era=1))  # the session is back
    loop.tick()
    assert standby_launcher.promoted == []  # no lease: the promotion waits, as a start does

    clock.advance(0.3)
    loop._apply(HeartbeatWritten(clock()))  # the lease regained
    loop._apply(AssignmentsRead(clock() - 0.1, {"etl": promoted}, era=1))
    assert standby_launcher.promoted == []  # a read begun before the regain decides nothing
    loop._apply(AssignmentsRead(clock() + 0.1, {"etl": promoted}, era=1))
    assert standby_launcher.promoted == [promoted]
    assert "etl" in loop.workers and "etl" not in loop.standby.workers


def test_a_standby_worker_leaves_only_once_its_supervisors_lease_is_over_for_the_orphan_grace(
    tmp_path: Path,
) -> None:
    clock = FakeClock(100.0)
    path = tmp_path / LEASE_FILE
    watch = orphan_watch(path, on_orphaned=lambda _reason: None, clock=clock)
    write_lease(path, until=0.0)  # what a supervisor writes once its lease lapsed
    assert watch.lapsed() is None  # a lapse: its ZooKeeper session cut for a while

    written = time.time() - ORPHAN_SECS + 1.0  # written 59 s ago, not renewed since
    os.utime(path, (written, written))
    assert watch.lapsed() is None
    written -= 1.0  # a minute ago: its supervisor is gone, and nobody adopted it
    os.utime(path, (written, written))
    reason = watch.lapsed()
    assert reason is not None and "was not written for 60" in reason

    write_lease(path, until=clock() - ORPHAN_SECS)  # ended long ago, but written just now
    assert watch.lapsed() is None  # (a supervisor's last lease on its way out): it waits
    path.unlink()
    assert watch.lapsed() is not None  # a lease it cannot see: at once
