"""Workers outlive their supervisor, and a supervisor started again adopts them.

Supervisors run as processes of their own (as ``stratus supervisor`` does: SIGTERM leaves,
SIGUSR1 stops the workers too), with the stand-in worker of ``test_supervisor``, against a
real ZooKeeper; kills are real signals.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stratus.api.records import RunOutcome, WorkerHeartbeat, WorkerState
from stratus.process import NOT_REAPED_EXIT, ProcessGroup, start_time
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.errors import AdoptionRefusedError, LocalDirLockedError
from stratus.supervisor.run_logs import kept_runs, read_run_number
from stratus.supervisor.settings import SupervisorSettings
from stratus.supervisor.worker_monitor import EXIT_FILE, PROCESS_FILE
from stratus.supervisor.worker_process import START_MARK, WorkerPaths
from stratus.worker.lease_file import read_lease
from stratus.worker.spec import read_heartbeat
from tests.cluster.test_run_records import runs as run_records
from tests.cluster.test_run_records import wait_for_runs
from tests.cluster.test_supervisor import FAST, Cluster
from tests.harness.zkfixtures import kazoo_client, process_gone, wait_until

pytestmark = pytest.mark.slow

# A lease as long as the default, so that a worker outlives a supervisor's restart.
ADOPTING = {
    **FAST,
    "supervisor.fence.timeout.secs": 6.0,
    "nimbus.supervisor.timeout.secs": 10.0,
}


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with kazoo_client(zk_hosts) as zk:
        yield Cluster(zk, zk_hosts, tmp_path)


SUPERVISOR_SCRIPT = """
import sys
from stratus.cli.daemon_run import run_daemon
from stratus.config import load_config
from stratus.logs import configure_daemon_logging
from stratus.settings import log_settings
from stratus.supervisor.daemon import STOP_WITH_WORKERS, Supervisor
from stratus.supervisor.settings import SupervisorSettings

conf = load_config(overrides=sys.argv[2:], environ={})
configure_daemon_logging(log_settings(conf))
run_daemon(
    Supervisor(SupervisorSettings.from_config(conf), worker_command=[sys.executable, sys.argv[1]]),
    ready=lambda d: f"supervisor {d.id} running",
    stop_signals={STOP_WITH_WORKERS: Supervisor.stop_workers_too},
)
"""


class SupervisorRun:
    """A supervisor process with the stand-in worker; started again at will."""

    def __init__(self, cluster: Cluster, sid: str = "s1", **extra: Any) -> None:
        self.cluster = cluster
        self.script = cluster.tmp_path / "supervisor_script.py"
        self.script.write_text(SUPERVISOR_SCRIPT)
        self.argv = [
            sys.executable,
            str(self.script),
            cluster.worker_command[1],
            *cluster.overrides(sid, **{**ADOPTING, **extra}),
        ]
        self.group: ProcessGroup | None = None
        self.log = cluster.tmp_path / f"supervisor-{sid}.log"

    def start(self) -> None:
        started = time.time()
        with self.log.open("ab") as out:
            self.group = ProcessGroup.start(self.argv, stdout=out, stderr=subprocess.STDOUT)
        wait_until(
            lambda: (beat := self.cluster.supervisor_beat()) is not None and beat.time > started,
            20,
            f"the supervisor's first heartbeat ({self.log})",
        )

    def signal(self, signum: int) -> None:
        assert self.group is not None
        self.group.signal(signum)

    def wait(self) -> None:
        assert self.group is not None
        self.group.wait(30)

    def close(self) -> None:
        if self.group is not None and self.group.is_running():
            self.group.signal(signal.SIGUSR1)  # the test is over: its workers go too
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.group.wait(20)
            self.group.kill()


@contextlib.contextmanager
def supervisor_run(cluster: Cluster, **extra: Any) -> Iterator[SupervisorRun]:
    run = SupervisorRun(cluster, **extra)
    try:
        yield run
    finally:
        run.close()


def paths(cluster: Cluster, sid: str = "s1") -> WorkerPaths:
    """The files of etl's worker, its log the newest run's."""
    worker = WorkerPaths.of(cluster.tmp_path / sid, "etl")
    return worker.for_run(read_run_number(worker.directory))


def running_beat(cluster: Cluster) -> WorkerHeartbeat:
    beat = cluster.wait_for_worker(WorkerState.RUNNING)
    assert beat.pid is not None
    return beat


def left_running(run: SupervisorRun, cluster: Cluster, **assign: Any) -> WorkerHeartbeat:
    """Start ``run``, assign etl to it, stop it with a SIGTERM: the worker it leaves running."""
    run.start()
    cluster.assign(cluster.code.upload("etl"), **assign)
    before = running_beat(cluster)
    run.signal(signal.SIGTERM)
    run.wait()
    return before


def runs(cluster: Cluster) -> int:
    """How many times the stand-in worker of etl started, by its logs."""
    directory = paths(cluster).directory
    logs = directory.glob("runs/*/worker.log")
    return sum(path.read_text(errors="replace").count("fake worker etl") for path in logs)


def adopted_after(cluster: Cluster, pid: int, since: float) -> WorkerHeartbeat:
    """The heartbeat the new supervisor publishes for the worker it adopted."""
    return cluster.wait_for_worker(
        WorkerState.RUNNING, where=lambda beat: beat.time > since and beat.pid == pid
    )


# ---------------------------------------------------------------------- adoption


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_supervisor_stopped_or_killed_and_started_again_adopts_its_running_worker(
    cluster, how
) -> None:
    meta = cluster.code.upload("etl")
    # A killed supervisor's session, and its registration, outlive the lease: the new one
    # must not wait them out (it proved the old one dead: it holds the directory's lock).
    with supervisor_run(cluster, **{"zookeeper.session.timeout.secs": 10.0}) as run:
        run.start()
        assignment = cluster.assign(meta)
        before = running_beat(cluster)
        assert before.pid is not None
        started = start_time(before.pid)
        path = f"{cluster.root}/assignments/etl"
        written = cluster.zk.get(path)[1].mzxid

        lease_file = cluster.tmp_path / "s1" / "lease"
        handed = read_lease(lease_file)
        run.signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        run.wait()
        gone_at = time.time()
        if how == "sigterm":  # its last heartbeat, written after the SIGTERM, renewed it
            assert (read_lease(lease_file) or 0.0) > (handed or 0.0)
        assert not process_gone(before.pid)  # the worker runs on without its supervisor
        if how == "sigkill":
            wait_until(lambda: time.time() - gone_at >= 2.0, 5, "two seconds")
        run.start()
        after = adopted_after(cluster, before.pid, time.time())

        assert start_time(before.pid) == started  # the same process, not a new one
        assert after.restarts == 0 and after.epoch == assignment.epoch
        assert runs(cluster) == 1  # never started again
        assert kept_runs(paths(cluster).directory) == [0]  # the same run: its number kept
        (record,) = wait_for_runs(cluster, 1, ended=0)  # its run goes on, still open
        assert (record.run, record.pid) == (0, before.pid)
        assert paths(cluster).log.read_text().count(START_MARK) == 1
        beat_file = read_heartbeat(paths(cluster).heartbeat)
        assert beat_file is not None and beat_file.time > gone_at  # its heartbeat goes on
        assert cluster.zk.get(path)[1].mzxid == written  # the assignment was never rewritten


def test_a_worker_whose_supervisor_does_not_come_back_stops_at_the_leases_end(cluster) -> None:
    with supervisor_run(cluster) as run:
        run.start()
        cluster.assign(cluster.code.upload("etl"))
        before = running_beat(cluster)
        assert before.pid is not None
        run.signal(signal.SIGKILL)
        run.wait()
        wait_until(lambda: process_gone(before.pid or 0), 20, "the worker to stop itself")
        last = read_heartbeat(paths(cluster).heartbeat)
        assert last is not None and last.state is WorkerState.STOPPED
        exit_file = paths(cluster).directory / EXIT_FILE
        wait_until(exit_file.exists, 10, "its monitor to record the end")
        assert json.loads(exit_file.read_text())["code"] == 0


@pytest.mark.parametrize("end", ["finish", "crash"])
def test_a_worker_that_ended_while_its_supervisor_was_away_is_reported_as_it_ended(
    cluster, end
) -> None:
    with supervisor_run(cluster) as run:
        before = left_running(run, cluster, mode="await")
        (paths(cluster).work / "end").write_text(end)
        wait_until(lambda: process_gone(before.pid or 0), 10, "the worker to end")
        wait_until((paths(cluster).directory / EXIT_FILE).exists, 10, "its recorded end")
        # The work directory outlives a run: a restart that found the file would end as well
        # (a crash restarted until the policy gives up), and its runs would pass the two counted.
        (paths(cluster).work / "end").unlink()
        run.start()
        if end == "finish":
            beat = cluster.wait_for_worker(WorkerState.FINISHED)
            assert beat.restarts == 0
            assert runs(cluster) == 1  # a finished batch is never started twice
            (record,) = wait_for_runs(cluster, 1, ended=1)  # closed from its exit.json
            assert (record.outcome, record.exit_code) == (RunOutcome.FINISHED, 0)
        else:
            beat = cluster.wait_for_worker(
                WorkerState.RUNNING, where=lambda b: b.pid != before.pid and b.restarts == 1
            )
            assert beat.last_crash is not None and beat.last_crash.exit_code == 1
            assert beat.last_crash.error is not None
            assert "crashed at last" in beat.last_crash.error
            assert runs(cluster) == 2  # one restart, which runs on
            crashed, restarted = wait_for_runs(cluster, 2, ended=1)
            assert (crashed.outcome, crashed.exit_code) == (RunOutcome.FAILED, 1)
            assert restarted.pid == beat.pid


def test_a_worker_left_running_for_an_assignment_gone_meanwhile_is_stopped(cluster) -> None:
    with supervisor_run(cluster) as run:
        before = left_running(run, cluster)
        cluster.unassign()
        run.start()
        wait_until(lambda: process_gone(before.pid or 0), 10, "the unassigned worker to stop")
        last = read_heartbeat(paths(cluster).heartbeat)
        assert last is not None and last.state is WorkerState.STOPPED  # a SIGTERM, not a kill
        (record,) = wait_for_runs(cluster, 1, ended=1)
        assert record.outcome is RunOutcome.STOPPED  # no assignment change says it moved


def test_a_worker_whose_monitor_is_killed_is_a_crash_not_a_clean_exit(cluster) -> None:
    with supervisor_run(cluster) as run:
        run.start()
        cluster.assign(cluster.code.upload("etl"))
        before = running_beat(cluster)
        record = json.loads((paths(cluster).directory / PROCESS_FILE).read_text())
        os.kill(record["monitor"]["pid"], signal.SIGKILL)  # its worker sees EOF and goes
        again = cluster.wait_for_worker(
            WorkerState.RUNNING, where=lambda b: b.pid != before.pid and b.restarts == 1
        )
        assert again.last_crash is not None and again.last_crash.exit_code == NOT_REAPED_EXIT


# ---------------------------------------------------------------------- refusals


@pytest.mark.parametrize("other", ["supervisor id", "cluster"])
def test_a_local_dir_of_another_supervisor_or_cluster_is_refused_and_left_untouched(
    cluster, other
) -> None:
    with supervisor_run(cluster) as run:
        before = left_running(run, cluster)
        worker = paths(cluster).directory
        files = {name: (worker / name).read_bytes() for name in (PROCESS_FILE, "spec.json")}
        local = {"supervisor.local.dir": str(cluster.tmp_path / "s1")}
        if other == "supervisor id":
            conf = cluster.conf("s2", **ADOPTING, **local)
            named: tuple[str, ...] = ("supervisor 's1'", "supervisor 's2'")
        else:
            conf = cluster.conf("s1", **ADOPTING, **local, **{"zookeeper.root": "/elsewhere"})
            named = ("/stratus", "/elsewhere", "supervisor 's1'")
        intruder = Supervisor(
            SupervisorSettings.from_config(conf), worker_command=cluster.worker_command
        )
        with pytest.raises(AdoptionRefusedError) as refused:
            intruder.start()
        assert all(name in str(refused.value) for name in named)
        assert not process_gone(before.pid or 0)  # nothing touched
        assert {name: (worker / name).read_bytes() for name in files} == files
        assert not (worker / EXIT_FILE).exists()


def test_a_pid_that_now_belongs_to_another_process_is_never_adopted_nor_signalled(
    cluster,
) -> None:
    with supervisor_run(cluster) as run:
        before = left_running(run, cluster)
        record_file = paths(cluster).directory / PROCESS_FILE
        record = json.loads(record_file.read_text())
        os.kill(record["monitor"]["pid"], signal.SIGKILL)  # no record of the worker's end
        wait_until(lambda: process_gone(before.pid or 0), 10, "the worker to see its monitor go")
        (paths(cluster).directory / EXIT_FILE).unlink(missing_ok=True)
        stranger = ProcessGroup.start(["sleep", "600"])
        try:
            # the stranger holds the pids the record names, with their old start times
            record["monitor"]["pid"] = record["worker"]["pid"] = stranger.pid
            record_file.write_text(json.dumps(record))
            run.start()
            after = cluster.wait_for_worker(
                WorkerState.RUNNING, where=lambda b: b.pid != before.pid
            )
            assert after.pid != stranger.pid
            assert stranger.is_running()  # never signalled
        finally:
            stranger.kill()


def test_a_second_supervisor_on_the_same_local_dir_is_refused(cluster) -> None:
    with supervisor_run(cluster) as run:
        run.start()
        assert run.group is not None
        twin = Supervisor(
            SupervisorSettings.from_config(cluster.conf(**ADOPTING)),
            worker_command=cluster.worker_command,
        )
        with pytest.raises(LocalDirLockedError, match=f"supervisor process {run.group.pid} "):
            twin.start()
        assert run.group.is_running()


# ---------------------------------------------------------------------- adoption off


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_without_adoption_the_workers_stop_with_their_supervisor(cluster, how) -> None:
    with supervisor_run(cluster, **{"supervisor.worker.adopt": False}) as run:
        run.start()
        cluster.assign(cluster.code.upload("etl"))
        before = running_beat(cluster)
        run.signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        run.wait()
        wait_until(lambda: process_gone(before.pid or 0), 10, "the worker to stop with it")
        run.start()
        after = cluster.wait_for_worker(WorkerState.RUNNING, where=lambda b: b.pid != before.pid)
        assert runs(cluster) == 2 and after.pid != before.pid
        stopped, _ = wait_for_runs(cluster, 2, ended=1)  # closed by the stop or the start
        assert (stopped.outcome, stopped.pid) == (RunOutcome.STOPPED, before.pid)
        wait_until(lambda: run_records(cluster)[1].pid == after.pid, 10, "run 1's pid")
