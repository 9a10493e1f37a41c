"""Adoption's pure parts and the control loop's use of them, with fakes: which cluster is
which, which assignment a worker left running may go on as, and what the first reconcile
does with the workers a previous supervisor left (adopt, stop, or leave them on a stop)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from stratus.api.records import ClusterIdentity, FencingToken
from stratus.process import boot_id, start_time
from stratus.supervisor.adoption import (
    Pid,
    ProcessRecord,
    check_owner,
    survey,
)
from stratus.supervisor.assignment_reader import AssignmentsRead
from stratus.supervisor.beat_keeper import BeatKeeper
from stratus.supervisor.control_loop import ControlLoop
from stratus.supervisor.errors import AdoptionRefusedError
from stratus.supervisor.heartbeat_lease import HeartbeatLease
from stratus.supervisor.heartbeat_publisher import HeartbeatRound
from stratus.supervisor.loop_messages import LEAVE, Adopted, HeartbeatWritten
from stratus.supervisor.managed_worker import Phase
from stratus.supervisor.settings import LoopSettings
from stratus.supervisor.worker_monitor import PROCESS_FILE
from stratus.supervisor.worker_process import WorkerPaths
from tests.harness.supervisor_fakes import (
    DIGEST,
    RESTART_SETTINGS,
    TIMEOUTS,
    FakeClock,
    FakeLauncher,
    FakeProcess,
    assignment,
)

CLUSTER = ClusterIdentity.of("zk1:2181,zk2:2181/chroot", "/stratus")


def test_a_cluster_is_its_root_and_any_server_in_common() -> None:
    assert ClusterIdentity(root="/chroot/stratus", servers=("zk1:2181", "zk2:2181")) == CLUSTER
    grown = ClusterIdentity.of("zk2:2181,zk3:2181/chroot", "stratus")
    assert CLUSTER.same(grown)  # a server added, one removed: the same ensemble
    assert not CLUSTER.same(ClusterIdentity.of("zk1:2181,zk2:2181", "/stratus"))
    assert not CLUSTER.same(ClusterIdentity.of("zk9:2181/chroot", "/stratus"))


def record(**changes: object) -> ProcessRecord:
    me = Pid(pid=os.getpid(), start=start_time(os.getpid()))
    values: dict[str, object] = {
        "supervisor": "s1",
        "cluster": CLUSTER,
        "pipeline": "etl",
        "epoch": 1,
        "generation": 0,
        "token": FencingToken(era=1, zxid=1),
        "digest": DIGEST,
        "monitor": me,
        "worker": me,
        "boot_id": boot_id(),
        **changes,
    }
    return ProcessRecord.model_validate(values)


def test_a_worker_goes_on_as_the_same_run_under_a_newer_stamp_only() -> None:
    left = record()
    assert left.runs(assignment())
    assert left.runs(assignment(epoch=2, zxid=5))  # a new leader's stamp on the same run
    assert not left.runs(assignment(generation=1))  # a rebalance: a new run
    assert not left.runs(assignment(digest="b" * 64))  # new code
    assert not left.runs(assignment("other"))
    assert not record(epoch=3).runs(assignment(epoch=2))  # an older assignment than its own


def test_a_process_is_proven_by_its_pid_its_start_time_and_the_boot() -> None:
    assert record().worker_alive() and record().monitor_alive()
    me = os.getpid()
    reused = Pid(pid=me, start=(start_time(me) or 0) - 1)  # the pid, another start
    assert not record(worker=reused).worker_alive()
    assert not record(boot_id="another-boot").monitor_alive()


def test_a_record_that_cannot_be_read_refuses_the_start_and_touches_nothing(tmp_path) -> None:
    worker = tmp_path / "workers" / "etl"
    worker.mkdir(parents=True)
    (worker / PROCESS_FILE).write_text('{"supervisor": "s1", "renamed_field": 1}')
    with pytest.raises(AdoptionRefusedError, match=r"cannot read .*process\.json"):
        survey(tmp_path / "workers", "s1", CLUSTER)
    with pytest.raises(AdoptionRefusedError, match=r"remove .*process\.json"):
        check_owner(tmp_path, "s1", CLUSTER)
    assert not (tmp_path / "owner.json").exists()
    assert (worker / PROCESS_FILE).read_text().startswith('{"supervisor": "s1"')


def control_loop(
    tmp_path: Path,
    clock: FakeClock,
    launcher: FakeLauncher,
    *,
    supervisor: str = "s1",
    beats: BeatKeeper | None = None,
    request_read: Callable[[], None] = lambda: None,
    offer: Callable[[HeartbeatRound], None] = lambda _round: None,
    lease_file: Path | None = None,
    **adopted: Adopted,
) -> ControlLoop:
    """A control loop of two slots on the fakes; ``beats`` is its keeper of the beat lease
    (none: no hot workers here), ``offer`` hears each heartbeat round, ``lease_file`` is
    where it hands its workers the lease, ``adopted`` the workers a previous supervisor
    left."""
    return ControlLoop(
        supervisor,
        2,
        launcher=launcher,
        paths_of=lambda name: WorkerPaths.of(tmp_path, name),
        lease=HeartbeatLease(timeout_secs=6.0),
        settings=LoopSettings(heartbeat_secs=1.0, restart=RESTART_SETTINGS, timeouts=TIMEOUTS),
        request_read=request_read,
        offer=offer,
        lease_file=lease_file,
        adopted=adopted,
        beats=beats,
        clock=clock,
        wall=clock,
    )


def feed(loop: ControlLoop, *messages: object) -> None:
    for message in messages:
        loop._apply(message)  # type: ignore[arg-type]
    loop.tick()


def test_the_first_reconcile_adopts_what_its_assignments_name_and_stops_the_rest(
    tmp_path,
) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    kept, stale, stray = FakeProcess(11), FakeProcess(12), FakeProcess(13)
    loop = control_loop(
        tmp_path,
        clock,
        launcher,
        etl=Adopted(record(), kept),
        old=Adopted(record(pipeline="old", generation=0), stale),
        stray=Adopted(record(pipeline="stray"), stray),
    )
    assigned = {"etl": assignment(), "old": assignment("old", generation=1)}
    feed(loop, AssignmentsRead(99.0, assigned))  # before the lease: adoption needs none
    assert loop.workers["etl"].phase is Phase.RUNNING
    assert launcher.processes == []  # adopted, not started
    assert kept.signals == []
    assert stale.signals == ["TERM"] and stray.signals == ["TERM"]  # their run is over
    clock.advance(TIMEOUTS.stop_secs)
    feed(loop)
    assert stale.signals == ["TERM", "KILL"] and stray.signals == ["TERM", "KILL"]
    feed(loop, HeartbeatWritten(clock.now), AssignmentsRead(clock.now + 0.1, assigned))
    assert [process.pid for process in launcher.processes] == [100]  # old's new run only
    assert kept.signals == []


def test_a_worker_that_ended_meanwhile_is_judged_as_any_exit(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    ended = FakeProcess(11)
    ended.exit_code = 1
    loop = control_loop(tmp_path, clock, launcher, etl=Adopted(record(), ended))
    feed(loop, AssignmentsRead(99.0, {"etl": assignment()}))
    feed(loop)
    worker = loop.workers["etl"]
    assert worker.phase is Phase.BACKOFF and worker.last_crash is not None
    assert worker.last_crash.exit_code == 1


def test_leaving_releases_every_worker_and_signals_none(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    loop = control_loop(tmp_path, clock, launcher)
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, {"etl": assignment()}))
    (process,) = launcher.processes
    loop.post(LEAVE)
    loop.run()
    assert process.signals == ["RELEASE"]
