"""A supervisor runs the standby workers the leader places on it: on a real ZooKeeper, with a
stand-in leader that writes the placement and assignment znodes by hand, and the real standby
worker process on Spark.

Placed: READY in the supervisor's heartbeat, nothing claimed. Assigned here (the placement
deleted in the same transaction, as a promotion writes them): the same process becomes the
pipeline's worker and commits batches. The placement deleted: it stops, nothing claimed. A
supervisor started again adopts a READY standby worker. A spare budget too small: REFUSED,
the reason in the heartbeat. Each Spark test starts one Spark: a JVM start costs seconds on a
2-core machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stratus.api.records import Assignment, FencingToken, WorkerHeartbeat, WorkerState
from stratus.api.standby_workers import (
    StandbyWorkerBeat,
    StandbyWorkerPlacement,
    StandbyWorkerState,
)
from stratus.codedist.distributor import CodeMeta
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.run_logs import read_run_number
from stratus.supervisor.settings import SupervisorSettings
from stratus.supervisor.worker_process import WorkerPaths
from stratus.worker.checkpoint_origin import ORIGIN_FILE
from stratus.worker.checkpoint_owner import OWNERS_DIR, owner_file_name
from stratus.worker.promotion import PROMOTE_FILE
from tests.cluster.test_supervisor import SPARK, SPARK_SECS, Cluster, descendants
from tests.harness.spark_packages import passthrough_conf, passthrough_package, read_ids, write_ids
from tests.harness.zkfixtures import kazoo_client, process_gone, wait_until

SPARE_MB = 4096  # room for a standby worker at its estimate before it is measured


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with kazoo_client(zk_hosts) as zk:
        yield Cluster(zk, zk_hosts, tmp_path)


class StandInLeader:
    """Writes what the leader would: placements, and a promotion's two znodes at once."""

    def __init__(self, cluster: Cluster, meta: CodeMeta, conf: dict[str, Any]) -> None:
        self.cluster = cluster
        self.meta = meta
        self.conf = conf

    def place(self, name: str, supervisor: str, *, epoch: int = 1) -> StandbyWorkerPlacement:
        placement = StandbyWorkerPlacement(
            pipeline=name,
            supervisor=supervisor,
            epoch=epoch,
            generation=0,
            digest=self.meta.digest,
            size_bytes=self.meta.size_bytes,
            conf=self.conf,
            placed=time.time(),
        )
        path = self._placement_path(name)
        if self.cluster.zk.exists(path):
            self.cluster.zk.set(path, placement.encode())
        else:
            self.cluster.zk.create(path, placement.encode(), makepath=True)
        return placement

    def unplace(self, name: str) -> None:
        self.cluster.zk.delete(self._placement_path(name))

    def promote(self, name: str, supervisor: str, *, epoch: int = 1) -> Assignment:
        """The assignment to ``supervisor`` and the placement's deletion in one transaction."""
        assignment = Assignment(
            pipeline=name,
            supervisor=supervisor,
            epoch=epoch,
            generation=0,
            digest=self.meta.digest,
            size_bytes=self.meta.size_bytes,
            conf=self.conf,
            assigned=time.time(),
        )
        transaction = self.cluster.zk.transaction()
        transaction.create(f"{self.cluster.root}/assignments/{name}", assignment.encode())
        transaction.delete(self._placement_path(name))
        results = transaction.commit()
        assert not any(isinstance(result, Exception) for result in results), results
        return assignment

    def _placement_path(self, name: str) -> str:
        return f"{self.cluster.root}/standby-workers/{name}"


def standby_beat(
    cluster: Cluster, name: str, supervisor: str = "s2", *, since: float = 0.0
) -> StandbyWorkerBeat | None:
    """``name``'s standby worker in ``supervisor``'s heartbeat, one written after ``since``."""
    beat = cluster.supervisor_beat(supervisor)
    if beat is None or beat.time <= since:
        return None
    return next((b for b in beat.standby_workers if b.pipeline == name), None)


def wait_standby(
    cluster: Cluster,
    name: str,
    state: StandbyWorkerState,
    *,
    where: Callable[[StandbyWorkerBeat], bool] = lambda _beat: True,
    timeout: float = SPARK_SECS,
    since: float = 0.0,
) -> StandbyWorkerBeat:
    found: list[StandbyWorkerBeat] = []

    def seen() -> bool:
        beat = standby_beat(cluster, name, since=since)
        if beat is not None and beat.state is state and where(beat):
            found[:] = [beat]
            return True
        return False

    wait_until(seen, timeout, f"{name}'s standby worker to be {state.value}")
    return found[0]


def supervisor_on_spark(cluster: Cluster, tmp_path: Path, **extra: Any) -> Supervisor:
    """Supervisor s2 with the real workers, no warm worker, a spare budget of ``SPARE_MB``."""
    values = {
        **SPARK,
        "pipeline.checkpoint.root": tmp_path / "checkpoints",
        "supervisor.worker.warm": False,
        "supervisor.worker.warm.memory.mb": SPARE_MB,
        "supervisor.slots": 2,
        **extra,
    }
    supervisor = Supervisor(SupervisorSettings.from_config(cluster.conf("s2", **values)))
    supervisor.start()
    return supervisor


def claims(tmp_path: Path, name: str) -> list[str]:
    owners = tmp_path / "checkpoints" / name / OWNERS_DIR
    if not owners.exists():
        return []
    return sorted(p.name for p in owners.iterdir() if p.name != ORIGIN_FILE)


@pytest.mark.spark
def test_a_placed_standby_worker_is_ready_and_promoted_in_place_after_an_adoption(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Placed: READY with its pid and memory in s2's heartbeat and its registration, nothing
    claimed. s2 stops leaving it running and starts again: adopted READY, the same pid.
    Assigned to s2: that pid runs the pipeline, claims the checkpoint and commits the rows.
    s2 stops and starts again once more: the promoted worker is adopted as any worker is, and
    runs on."""
    meta = cluster.code.upload("pt", passthrough_package("pt"))
    conf = passthrough_conf(tmp_path / "in", tmp_path / "out")
    leader = StandInLeader(cluster, meta, conf)
    supervisor = supervisor_on_spark(cluster, tmp_path)
    try:
        leader.place("pt", "s2")
        ready = wait_standby(cluster, "pt", StandbyWorkerState.READY)
        assert ready.pid is not None and ready.error is None
        assert (ready.generation, ready.digest) == (0, meta.digest)
        assert claims(tmp_path, "pt") == [] and cluster.worker_beat("pt", "s2") is None
        wait_standby(cluster, "pt", StandbyWorkerState.READY, where=lambda b: b.rss_mb is not None)

        def counted() -> bool:
            summary = cluster.registration("s2")
            return (
                summary is not None
                and summary.warm is not None
                and (summary.warm.standby_workers == 1 and summary.warm.standby_mb > 0)
            )

        wait_until(counted, 30, "the registration to count the standby worker")

        supervisor.stop()  # the workers run on: a supervisor started again adopts them
        assert not process_gone(ready.pid)
        restarted = time.time()
        supervisor = supervisor_on_spark(cluster, tmp_path)
        # the new supervisor's heartbeat, not the one the stopped supervisor left
        adopted = wait_standby(cluster, "pt", StandbyWorkerState.READY, timeout=30, since=restarted)
        assert adopted.pid == ready.pid

        write_ids(tmp_path / "in", range(10))
        leader.promote("pt", "s2")
        running: list[WorkerHeartbeat] = []

        def runs_on_s2() -> bool:
            beat = cluster.worker_beat("pt", "s2")
            running[:] = [beat] if beat is not None and beat.state is WorkerState.RUNNING else []
            return bool(running)

        wait_until(runs_on_s2, 60, "the promoted worker to be RUNNING on s2")
        assert running[0].pid == ready.pid  # promoted in place: no new process, no new Spark
        wait_until(lambda: read_ids(tmp_path / "out") == list(range(10)), 60, "the rows")
        token = FencingToken(
            era=cluster.zk.exists(f"{cluster.root}/assignments").ctime,
            zxid=cluster.zk.exists(f"{cluster.root}/assignments/pt").mzxid,
        )
        assert claims(tmp_path, "pt") == [owner_file_name(token)]  # the promotion's token
        assert standby_beat(cluster, "pt") is None  # no longer a standby worker
        local = tmp_path / "s2" / "workers" / "pt"
        assert (local / "work" / PROMOTE_FILE).is_file()
        run = read_run_number(local)  # the promoted process is a run of its own, its log kept
        assert run is not None
        run_log = WorkerPaths(local, run).log.read_text()
        assert "event=standby_worker_promoted" in run_log and "function_called" in run_log

        supervisor = restarted_adopting(cluster, tmp_path, supervisor, ready.pid)
        write_ids(tmp_path / "in", range(10, 20))
        wait_until(lambda: read_ids(tmp_path / "out") == list(range(20)), 60, "the new rows")
    finally:
        supervisor.stop(workers=True)


def restarted_adopting(
    cluster: Cluster, tmp_path: Path, supervisor: Supervisor, pid: int
) -> Supervisor:
    """``supervisor`` stopped with its workers left running and started again (s2 on Spark),
    once its heartbeat shows the pipeline's worker ``pid`` RUNNING: adopted, the same pid."""
    supervisor.stop()  # the promoted worker runs on, as any worker does
    assert not process_gone(pid)
    restarted = time.time()
    supervisor = supervisor_on_spark(cluster, tmp_path)

    def adopted_running() -> bool:
        beat = cluster.worker_beat("pt", "s2")
        return (
            beat is not None
            and beat.time >= restarted
            and beat.state is WorkerState.RUNNING
            and beat.pid == pid
        )

    wait_until(adopted_running, 30, "the promoted worker adopted RUNNING, the same pid")
    return supervisor


@pytest.mark.spark
def test_a_standby_worker_whose_placement_is_deleted_stops_with_nothing_claimed(
    cluster: Cluster, tmp_path: Path
) -> None:
    meta = cluster.code.upload("pt", passthrough_package("pt"))
    leader = StandInLeader(cluster, meta, passthrough_conf(tmp_path / "in", tmp_path / "out"))
    supervisor = supervisor_on_spark(cluster, tmp_path)
    try:
        leader.place("pt", "s2")
        ready = wait_standby(cluster, "pt", StandbyWorkerState.READY)
        assert ready.pid is not None
        processes = {ready.pid, *descendants(ready.pid)}  # with its Spark JVM
        leader.unplace("pt")
        wait_until(lambda: all(process_gone(pid) for pid in processes), 30, "its processes to go")
        wait_until(lambda: standby_beat(cluster, "pt") is None, 10, "its beat to go")
        assert not (tmp_path / "checkpoints" / "pt").exists()  # no claim, no origin
        assert cluster.worker_beat("pt", "s2") is None
        exit_file = tmp_path / "s2" / "workers" / "pt" / "exit.json"
        assert exit_file.is_file() and '"code": 0' in exit_file.read_text()
    finally:
        supervisor.stop(workers=True)


def test_a_standby_worker_past_the_spare_budget_is_refused_with_the_reason(
    cluster: Cluster, tmp_path: Path
) -> None:
    """No process starts: the reason is in the heartbeat, worded like the warm workers'."""
    meta = cluster.code.upload("pt", passthrough_package("pt"))
    leader = StandInLeader(cluster, meta, {})
    supervisor = supervisor_on_spark(cluster, tmp_path, **{"supervisor.worker.warm.memory.mb": 1})
    try:
        leader.place("pt", "s2")
        refused = wait_standby(cluster, "pt", StandbyWorkerState.REFUSED, timeout=30)
        assert refused.pid is None
        assert refused.error is not None
        assert refused.error.startswith("another standby worker (1024 MiB) would pass the spare")
        assert "0 of 1 MiB used by 0 standby workers" in refused.error
        assert "supervisor.worker.warm.memory.mb" in refused.error
        assert not (tmp_path / "s2" / "workers" / "pt" / "process.json").exists()
    finally:
        supervisor.stop(workers=True)
