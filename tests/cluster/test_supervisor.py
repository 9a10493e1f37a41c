"""The supervisor daemon against a real ZooKeeper, with real worker processes.

Most scenarios run a ``Supervisor`` in the test's process with a stand-in worker (a small
script that honours the worker's contract: spec in, heartbeat file out, stop on SIGTERM or on
EOF of its stdin) so that crashes, hangs and partitions take milliseconds, not Spark starts.
Code comes from a shared code store (``nimbus.code.distributor: shared``) unless a real
nimbus serves it. The few Spark scenarios run ``stratus supervisor`` processes with the real
``stratus.worker.main``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from stratus.api.records import (
    Assignment,
    SupervisorHeartbeat,
    SupervisorSummary,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.client import NimbusClient
from stratus.codedist.distributor import CodeMeta
from stratus.codedist.package_build import package_bytes
from stratus.codedist.shared_fs import SharedStorageDistributor
from stratus.codedist.transfer.check import hash_file
from stratus.config import StratusConfig, load_config
from stratus.local.processes import SupervisorProcess
from stratus.process import ProcessGroup
from stratus.state.errors import StateStoreUnavailableError
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.supervisor.adoption import LocalDirLock
from stratus.supervisor.code_cache import CodeCache
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.errors import DuplicateSupervisorError
from stratus.supervisor.settings import SupervisorSettings
from stratus.supervisor.worker_process import WorkerPaths
from stratus.worker.spec import read_heartbeat
from stratus.zk.server import ZooKeeperServer
from tests.harness.class_archive import archive_of
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.pacemaker_process import PacemakerProcess
from tests.harness.package_factory import package_files, valid_package
from tests.harness.spark_packages import passthrough_conf, passthrough_package, read_ids, write_ids
from tests.harness.tcp_proxy import TcpProxy
from tests.harness.zkfixtures import kazoo_client, process_gone, process_parents, wait_until

# Most tests here run a stand-in worker; the two that start a real worker are marked ``spark``.
pytestmark = pytest.mark.slow

ROOT = "/stratus"
SESSION_SECS = 2.0
FAST = {
    "zookeeper.session.timeout.secs": SESSION_SECS,
    "worker.heartbeat.frequency.secs": 0.2,
    "supervisor.fence.timeout.secs": 1.5,
    "supervisor.worker.stop.secs": 1.0,
    "nimbus.supervisor.timeout.secs": 4.0,
    "supervisor.worker.timeout.secs": 3.0,
    "supervisor.worker.restart.backoff.secs": 0.1,
    "supervisor.worker.max.restarts": 2,
    "supervisor.http.port": 0,
}

FAKE_WORKER = '''
"""A stand-in for the Spark worker: the supervisor's side of the contract, in milliseconds.

spark.test.mode in the pipeline's conf: run (default), fail, crash, finish or hang; env also
writes its environment to <work_dir>/env.json, then runs; detach also starts a process in a
session of its own (that outlives the worker's process group), then runs; await runs until
<work_dir>/end appears, then finishes (the file says finish) or crashes (anything else).
"""
import json, os, signal, sys, threading, time
from pathlib import Path

from stratus.api.records import WorkerHeartbeat, WorkerState
from stratus.worker.lease_file import LeaseWatch
from stratus.worker.spec import WorkerSpec, write_heartbeat

spec = WorkerSpec.read(Path(sys.argv[1]))
mode = str(spec.conf.get("spark.test.mode", "run"))
stop = threading.Event()
started = time.time()
if spec.lease_path is not None:  # as the real worker: it stops once the lease has ended
    LeaseWatch(spec.lease_path, on_lapsed=lambda reason: stop.set()).start()


def beat(state, error=None):
    write_heartbeat(spec.heartbeat_path, WorkerHeartbeat(
        pipeline=spec.pipeline, supervisor=spec.supervisor, epoch=spec.epoch,
        generation=spec.generation, digest=spec.digest, state=state, time=time.time(),
        started=started, pid=os.getpid(), error=error))


def watch_stdin():
    while os.read(0, 4096):
        pass
    os._exit(3)  # EOF: the supervisor is gone


threading.Thread(target=watch_stdin, daemon=True).start()
print(f"fake worker {spec.pipeline} mode={mode} pid={os.getpid()}", flush=True)
if mode == "crash":  # as Python reports an exception of the pipeline: a traceback
    import traceback
    try:
        raise ValueError("the fake pipeline crashed")
    except ValueError:
        traceback.print_exc()
    sys.exit(1)
if mode == "fail":
    beat(WorkerState.FAILED, "entrypoint 'nope:run': no module named 'nope'")
    sys.exit(1)
if mode == "finish":
    beat(WorkerState.FINISHED)
    sys.exit(0)
if mode == "env":
    Path(spec.work_dir, "env.json").write_text(json.dumps(dict(os.environ)))
if mode == "detach":  # leaves a process behind, out of its process group
    import subprocess
    subprocess.Popen(["sleep", "600"], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if mode == "hang":
    Path(spec.work_dir, "pid").write_text(str(os.getpid()))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)
signal.signal(signal.SIGTERM, lambda *_: stop.set())
end = Path(spec.work_dir, "end")
while not stop.is_set():
    beat(WorkerState.RUNNING)
    stop.wait(spec.heartbeat_interval_secs)
    if mode == "await" and end.exists():
        if end.read_text() == "finish":
            beat(WorkerState.FINISHED)
            sys.exit(0)
        print("ValueError: the fake pipeline crashed at last", file=sys.stderr, flush=True)
        sys.exit(1)
beat(WorkerState.STOPPED)
'''


# ---------------------------------------------------------------------- helpers


class CodeStore:
    """A shared code store (file://) that the supervisors under test fetch from."""

    def __init__(self, directory: Path) -> None:
        self.url = f"file://{directory}"
        self._dist = SharedStorageDistributor(self.url, live_nimbuses=lambda: 1)
        self._dist.prepare()
        self._dir = directory

    def upload(self, name: str, data: bytes | None = None) -> CodeMeta:
        """Store ``data`` (default: a small valid package) as ``name``'s code."""
        path = self._dir.parent / f"{name}.zip"
        path.write_bytes(valid_package(name) if data is None else data)
        return self._dist.upload(path, name)


class Cluster:
    """ZooKeeper (chrooted to the test), a code store, and what a test reads and writes."""

    def __init__(self, zk: KazooClient, hosts: str, tmp_path: Path, root: str = ROOT) -> None:
        self.zk = zk
        self.hosts = hosts
        self.root = root
        self.tmp_path = tmp_path
        self.code = CodeStore(tmp_path / "shared")
        self.board = HeartbeatBoard(ZooKeeperStateStore(zk, f"{root}/heartbeats"))
        zk.ensure_path(f"{root}/assignments")
        self.worker_command = [sys.executable, str(tmp_path / "fake_worker.py")]
        (tmp_path / "fake_worker.py").write_text(FAKE_WORKER)

    def conf(self, supervisor: str = "s1", **extra: Any) -> StratusConfig:
        return load_config(overrides=self.overrides(supervisor, **extra), environ={})

    def overrides(self, supervisor: str = "s1", **extra: Any) -> list[str]:
        """The configuration of ``conf`` as ``key=value`` overrides."""
        values = {
            **FAST,
            "zookeeper.servers": self.hosts,
            "zookeeper.root": self.root,
            "nimbus.code.distributor": "shared",
            "nimbus.code.shared.url": self.code.url,
            "supervisor.id": supervisor,
            "supervisor.local.dir": str(self.tmp_path / supervisor),
            **extra,
        }
        return [f"{k}={v}" for k, v in values.items()]

    def options(self, **extra: Any) -> list[str]:
        """Command-line options of a ``stratus supervisor`` process (id and slots aside)."""
        values = {
            **FAST,
            "zookeeper.servers": self.hosts,
            "zookeeper.root": self.root,
            "nimbus.code.distributor": "shared",
            "nimbus.code.shared.url": self.code.url,
            **extra,
        }
        return [part for k, v in values.items() for part in ("-c", f"{k}={v}")]

    def assign(
        self,
        meta: CodeMeta,
        name: str = "etl",
        supervisor: str = "s1",
        *,
        epoch: int = 1,
        generation: int = 0,
        mode: str = "run",
        conf: dict[str, Any] | None = None,
    ) -> Assignment:
        """Write the assignment as the leader would (create or replace); ``mode`` is the
        stand-in worker's, ``conf`` replaces it."""
        assignment = Assignment(
            pipeline=name,
            supervisor=supervisor,
            epoch=epoch,
            generation=generation,
            digest=meta.digest,
            size_bytes=meta.size_bytes,
            conf={"spark.test.mode": mode} if conf is None else conf,
            assigned=time.time(),
        )
        path = f"{self.root}/assignments/{name}"
        if self.zk.exists(path):
            self.zk.set(path, assignment.encode())
        else:
            self.zk.create(path, assignment.encode(), makepath=True)
        return assignment

    def unassign(self, name: str = "etl") -> None:
        self.zk.delete(f"{self.root}/assignments/{name}")

    def worker_beat(self, name: str = "etl", supervisor: str = "s1") -> WorkerHeartbeat | None:
        """The worker's heartbeat; None also while this test's client reconnects."""
        try:
            return self.board.workers().get(name, {}).get(supervisor)
        except StateStoreUnavailableError:
            return None

    def supervisor_beat(self, supervisor: str = "s1") -> SupervisorHeartbeat | None:
        return self.board.supervisors().get(supervisor)

    def registration(self, supervisor: str = "s1") -> SupervisorSummary | None:
        path = f"{self.root}/supervisors/{supervisor}"
        if not self.zk.exists(path):
            return None
        return SupervisorSummary.model_validate_json(self.zk.get(path)[0])

    def wait_for_worker(
        self,
        state: WorkerState,
        name: str = "etl",
        *,
        where: Callable[[WorkerHeartbeat], bool] = lambda _beat: True,
        timeout: float = 20.0,
    ) -> WorkerHeartbeat:
        found: list[WorkerHeartbeat] = []

        def seen() -> bool:
            beat = self.worker_beat(name)
            if beat is not None and beat.state is state and where(beat):
                found[:] = [beat]
                return True
            return False

        wait_until(seen, timeout, f"{name}'s worker to be {state.value}")
        return found[0]


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with kazoo_client(zk_hosts) as zk:
        yield Cluster(zk, zk_hosts, tmp_path)


@contextlib.contextmanager
def running(conf: StratusConfig, cluster: Cluster) -> Iterator[Supervisor]:
    supervisor = Supervisor(
        SupervisorSettings.from_config(conf), worker_command=cluster.worker_command
    )
    supervisor.start()
    try:
        yield supervisor
    finally:
        supervisor.stop(workers=True)


# ---------------------------------------------------------------------- registration


def test_a_supervisor_registers_its_slots_and_unregisters_when_it_stops(cluster) -> None:
    with running(cluster.conf("s1"), cluster):
        summary = cluster.registration("s1")
        assert summary is not None
        assert (summary.id, summary.slots, summary.used) == ("s1", 4, 0)
        wait_until(cluster.supervisor_beat, 10, "the supervisor's first heartbeat")
    assert cluster.registration() is None
    beat = cluster.supervisor_beat()
    assert beat is not None and beat.stopping and beat.running == []


def test_a_second_supervisor_under_a_live_ones_id_fails_to_start(cluster) -> None:
    with running(cluster.conf(), cluster):
        wait_until(cluster.supervisor_beat, 10, "the first supervisor's heartbeat")
        elsewhere = {"supervisor.local.dir": str(cluster.tmp_path / "twin")}  # another host's
        twin = Supervisor(
            SupervisorSettings.from_config(cluster.conf(**elsewhere)),
            worker_command=cluster.worker_command,
        )
        with pytest.raises(DuplicateSupervisorError, match="registered by another live"):
            twin.start()
        assert cluster.registration() is not None  # the first one keeps its registration


def test_a_close_that_fails_at_stop_is_logged_and_what_is_older_still_closes(
    cluster, monkeypatch, caplog
) -> None:
    def fail(_self: CodeCache) -> None:
        raise RuntimeError("the code cache would not close")

    monkeypatch.setattr(CodeCache, "close", fail)  # opened after the registration
    supervisor = Supervisor(
        SupervisorSettings.from_config(cluster.conf()), worker_command=cluster.worker_command
    )
    supervisor.start()
    with caplog.at_level(logging.ERROR, logger="stratus.supervisor.daemon"):
        supervisor.stop(workers=True)
    failed = [r for r in caplog.records if r.getMessage().startswith("event=close_failed")]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "the code cache would not close" in str(failed[0].exc_info[1])
    assert cluster.registration() is None  # the registration, opened before it, closed all the same
    assert not supervisor.session.connected  # and the session
    LocalDirLock.take(supervisor.local_dir).release()  # and the oldest: the local directory's lock


def test_a_supervisor_killed_moments_ago_starts_again_under_its_id(cluster, tmp_path) -> None:
    process = SupervisorProcess(cluster.options(), id="s1", slots=2, log_dir=tmp_path)
    try:
        process.start()
        process.wait_ready()
        process.kill()  # its session, and its registration, live on for a while
        process.start()
        process.wait_ready(timeout=30)
        summary = cluster.registration()
        assert summary is not None and summary.slots == 2
    finally:
        process.stop()


SUPERVISOR_WITH_STAND_IN = """
import sys, threading
from stratus.config import load_config
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.settings import SupervisorSettings

conf = load_config(overrides=sys.argv[2:], environ={})
settings = SupervisorSettings.from_config(conf)
Supervisor(settings, worker_command=[sys.executable, sys.argv[1]]).start()
threading.Event().wait()
"""


def test_the_worker_of_a_frozen_supervisor_stops_itself_once_the_lease_ends(
    cluster, tmp_path
) -> None:
    """A supervisor that does not run cannot fence; its worker watches the lease it was
    handed and stops itself on the fence's timeline, while the supervisor is still frozen."""
    script = tmp_path / "supervisor_with_stand_in.py"
    script.write_text(SUPERVISOR_WITH_STAND_IN)
    argv = [sys.executable, str(script), cluster.worker_command[1], *cluster.overrides()]
    with (tmp_path / "supervisor.log").open("ab") as log:
        supervisor = ProcessGroup.start(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        cluster.assign(cluster.code.upload("etl"))
        beat = cluster.wait_for_worker(WorkerState.RUNNING)
        assert beat.pid is not None
        supervisor.signal(signal.SIGSTOP)  # its worker runs in a process group of its own
        wait_until(lambda: process_gone(beat.pid), 20, "the worker to stop itself")
        assert "\nState:\tT" in Path(f"/proc/{supervisor.pid}/status").read_text()
        last = read_heartbeat(WorkerPaths.of(tmp_path / "s1", "etl").heartbeat)
        assert last is not None and last.state is WorkerState.STOPPED
    finally:
        supervisor.signal(signal.SIGCONT)
        supervisor.kill()


# ---------------------------------------------------------------------- assignments


def test_an_assigned_pipeline_runs_and_stops_when_its_assignment_is_deleted(cluster) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(), cluster):
        cluster.assign(meta)
        beat = cluster.wait_for_worker(WorkerState.RUNNING)
        assert (beat.epoch, beat.generation, beat.digest) == (1, 0, meta.digest)
        assert beat.pid is not None and not process_gone(beat.pid)
        wait_until(
            lambda: (cluster.registration() or SupervisorSummary(id="-")).used == 1, 10, "used 1"
        )
        wait_until(
            lambda: (
                (cluster.supervisor_beat() or SupervisorHeartbeat(id="-", time=0, slots=0)).running
                == ["etl"]
            ),
            10,
            "the supervisor to report etl running",
        )
        cluster.unassign()
        wait_until(lambda: process_gone(beat.pid), 10, "the worker to stop")
        wait_until(lambda: cluster.worker_beat() is None, 10, "its heartbeat to go")
        wait_until(
            lambda: (cluster.registration() or SupervisorSummary(id="-")).used == 0, 10, "used 0"
        )


def test_a_worker_gets_the_allowed_environment_and_its_pipelines_not_the_supervisors_secrets(
    cluster, monkeypatch
) -> None:
    monkeypatch.setenv("STRATUS_TOKEN", "supervisor-token")
    monkeypatch.setenv("ZK_DIGEST_PASSWORD", "zookeeper-credential")
    monkeypatch.setenv("OPERATOR_EXTRA", "passed on")
    monkeypatch.setenv("LANG", "C.UTF-8")
    meta = cluster.code.upload("etl")
    conf = {"spark.test.mode": "env", "pipeline.env.REGION": "eu-west-1"}
    with running(cluster.conf(**{"supervisor.worker.env": "OPERATOR_EXTRA"}), cluster):
        cluster.assign(meta, conf=conf)
        cluster.wait_for_worker(WorkerState.RUNNING)
        worker_dir = cluster.tmp_path / "s1" / "workers" / "etl"
        env = json.loads((worker_dir / "work" / "env.json").read_text())
        spec_mode = stat.S_IMODE((worker_dir / "spec.json").stat().st_mode)
        dir_mode = stat.S_IMODE(worker_dir.stat().st_mode)

    assert "STRATUS_TOKEN" not in env and "ZK_DIGEST_PASSWORD" not in env
    assert "supervisor-token" not in json.dumps(env)
    assert env["REGION"] == "eu-west-1"  # pipeline.env.REGION
    assert env["OPERATOR_EXTRA"] == "passed on"  # supervisor.worker.env
    assert (env["PATH"], env["LANG"]) == (os.environ["PATH"], "C.UTF-8")
    assert env.get("PYTHONPATH") == os.environ.get("PYTHONPATH")
    assert env["PYTHONUNBUFFERED"] == "1"
    assert (spec_mode, dir_mode) == (0o600, 0o700)


def test_a_rebalance_restarts_the_worker_and_a_new_leaders_epoch_does_not(cluster) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(), cluster):
        cluster.assign(meta)
        first = cluster.wait_for_worker(WorkerState.RUNNING)
        cluster.assign(meta, epoch=2)  # a new leader re-stamps it
        cluster.wait_for_worker(WorkerState.RUNNING, where=lambda b: b.epoch == 2)
        restamped = cluster.worker_beat()
        assert restamped is not None and restamped.pid == first.pid
        cluster.assign(meta, epoch=2, generation=1)  # a rebalance
        second = cluster.wait_for_worker(WorkerState.RUNNING, where=lambda b: b.generation == 1)
        assert second.pid != first.pid
        assert first.pid is not None and process_gone(first.pid)


def test_an_assignment_from_an_older_epoch_is_ignored(cluster) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(), cluster):
        cluster.assign(meta, epoch=5)
        running_beat = cluster.wait_for_worker(WorkerState.RUNNING)
        cluster.assign(meta, epoch=4, generation=7)  # as a deposed leader would write it
        wait_until(lambda: cluster.worker_beat() is None, 10, "the stale order to count as none")
        assert running_beat.pid is not None and process_gone(running_beat.pid)


def test_a_worker_that_keeps_failing_ends_failed_with_its_error(cluster) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(), cluster):
        cluster.assign(meta, mode="fail")
        beat = cluster.wait_for_worker(WorkerState.FAILED)
        assert beat.restarts == 2  # supervisor.worker.max.restarts
        assert beat.error == (
            "the worker exited with code 1: entrypoint 'nope:run': no module named 'nope'"
        )
        cluster.assign(meta, generation=1)  # fixed and rebalanced: it runs again
        again = cluster.wait_for_worker(WorkerState.RUNNING)
        assert again.restarts == 0


def test_a_crash_without_a_heartbeat_reports_the_tail_of_the_workers_log(cluster) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(**{"supervisor.worker.max.restarts": 0}), cluster):
        cluster.assign(meta, mode="crash")
        beat = cluster.wait_for_worker(WorkerState.FAILED)
        assert beat.error is not None
        assert beat.error.startswith("the worker exited with code 1:")
        assert beat.error.endswith("ValueError: the fake pipeline crashed")


def test_a_finished_batch_is_reported_and_not_restarted(cluster) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(), cluster):
        cluster.assign(meta, mode="finish")
        beat = cluster.wait_for_worker(WorkerState.FINISHED)
        assert beat.restarts == 0
        logs = (cluster.tmp_path / "s1" / "workers" / "etl").glob("runs/*/worker.log")
        assert sum(log.read_text().count("mode=finish") for log in logs) == 1


@pytest.mark.solo  # a 1 s worker timeout: a start slowed past it by a loaded machine is killed
def test_a_worker_whose_heartbeat_stops_is_killed_and_restarted(cluster) -> None:
    meta = cluster.code.upload("etl")
    conf = cluster.conf(
        **{"supervisor.worker.timeout.secs": 1.0, "supervisor.worker.stop.secs": 0.5}
    )
    with running(conf, cluster):
        cluster.assign(meta, mode="hang")
        pid_file = cluster.tmp_path / "s1" / "workers" / "etl" / "work" / "pid"
        wait_until(pid_file.exists, 60, "the hanging worker to start")  # a loaded machine
        first = int(pid_file.read_text())
        beat = cluster.wait_for_worker(WorkerState.FAILED)
        assert beat.restarts == 2
        assert beat.error is not None and "did not change for" in beat.error
        assert process_gone(first)
        assert process_gone(int(pid_file.read_text()))


def test_code_no_one_holds_yet_is_reported_then_fetched_once_it_appears(cluster) -> None:
    data = valid_package("etl")
    (cluster.tmp_path / "later.zip").write_bytes(data)
    meta = CodeMeta(hash_file(cluster.tmp_path / "later.zip")[0], len(data))
    with running(cluster.conf(), cluster):
        cluster.assign(meta)
        waiting = cluster.wait_for_worker(WorkerState.STARTING, where=lambda b: bool(b.error))
        assert (
            waiting.error is not None and "cannot fetch the code of pipeline etl" in waiting.error
        )
        assert cluster.code.upload("etl") == meta
        cluster.wait_for_worker(WorkerState.RUNNING)


def test_only_slots_workers_run_and_a_freed_slot_is_taken(cluster, caplog) -> None:
    meta = cluster.code.upload("etl")
    with (
        caplog.at_level(logging.INFO, logger="stratus.supervisor"),
        running(cluster.conf(**{"supervisor.slots": 1}), cluster),
    ):
        cluster.assign(meta, "a")
        cluster.wait_for_worker(WorkerState.RUNNING, "a")
        cluster.assign(meta, "b")
        wait_until(
            lambda: any("event=no_free_slot" in r.getMessage() for r in caplog.records),
            10,
            "the supervisor to see b and no free slot",
        )
        assert cluster.worker_beat("b") is None
        cluster.unassign("a")
        cluster.wait_for_worker(WorkerState.RUNNING, "b")


# ---------------------------------------------------------------------- stopping and fencing


def test_a_stop_with_its_workers_stops_them_and_says_so_before_unregistering(cluster) -> None:
    meta = cluster.code.upload("etl")
    supervisor = Supervisor(
        SupervisorSettings.from_config(cluster.conf()), worker_command=cluster.worker_command
    )
    supervisor.start()
    try:
        cluster.assign(meta)
        beat = cluster.wait_for_worker(WorkerState.RUNNING)
    finally:
        supervisor.stop(workers=True)
    assert beat.pid is not None and process_gone(beat.pid)
    final = cluster.worker_beat()
    assert final is not None and final.state is WorkerState.STOPPED
    last = cluster.supervisor_beat()
    assert last is not None and last.stopping and last.running == []
    assert cluster.registration() is None


def test_a_fence_needs_admin_its_own_id_and_a_current_epoch_and_answers_once_workers_are_gone(
    cluster,
) -> None:
    tokens = cluster.tmp_path / "tokens"
    tokens.write_text("read token read-secret-0123456789\nadmin token admin-secret-0123456789\n")
    tokens.chmod(0o600)
    meta = cluster.code.upload("etl")
    conf = cluster.conf(
        **{"nimbus.auth.tokens.file": str(tokens), "supervisor.worker.timeout.secs": 20.0}
    )
    with running(conf, cluster) as supervisor:
        assert supervisor.endpoint is not None
        cluster.assign(meta, mode="hang", epoch=3)  # its worker ignores SIGTERM
        pid_file = cluster.tmp_path / "s1" / "workers" / "etl" / "work" / "pid"
        wait_until(pid_file.exists, 20, "the hanging worker to start")
        first = int(pid_file.read_text())
        url = f"http://{supervisor.endpoint.address}/api/v1/fence"
        admin = {"Authorization": "Bearer admin-secret-0123456789"}
        order = {"epoch": 3, "supervisor": "s1"}
        with httpx.Client(timeout=30.0) as http:
            assert http.post(url, json=order).status_code == 401
            reader = {"Authorization": "Bearer read-secret-0123456789"}
            assert http.post(url, json=order, headers=reader).status_code == 403
            stale = http.post(url, json={**order, "epoch": 2}, headers=admin)  # a deposed leader
            assert stale.status_code == 409 and stale.json()["error"] == "stale_epoch"
            other = http.post(url, json={**order, "supervisor": "s2"}, headers=admin)
            assert other.status_code == 409 and other.json()["error"] == "wrong_supervisor"
            assert "refuses a fence meant for supervisor 's2'" in other.json()["message"]
            assert not process_gone(first)
            for invalid_order in ({**order, "epoch": "3"}, {"epoch": 3}):
                invalid = http.post(url, json=invalid_order, headers=admin)
                assert invalid.status_code == 422, invalid_order
                assert invalid.json()["error"] == "invalid_request"

            fenced = http.post(url, json=order, headers=admin)
            assert process_gone(first)  # SIGKILLed after the grace, before the answer
        assert fenced.status_code == 200
        assert fenced.json() == {"supervisor": "s1", "epoch": 3, "stopped": ["etl"]}
        assert supervisor.lease.fences == 1
        # Still assigned here and its heartbeats go on: after a new round and a read, it
        # runs again (the leader, seeing it alive, moves nothing).
        wait_until(
            lambda: pid_file.exists() and int(pid_file.read_text()) != first,
            20,
            "the worker to start again after the fence",
        )


@pytest.fixture
def own_zk(zk_restartable: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    with kazoo_client(zk_restartable.connect_string) as zk:
        yield Cluster(zk, zk_restartable.connect_string, tmp_path)


def test_a_supervisor_that_fences_on_outages_stops_its_workers_when_zookeeper_goes_then_resumes(
    own_zk, zk_restartable, caplog
) -> None:
    cluster = own_zk
    meta = cluster.code.upload("etl")
    with (
        caplog.at_level(logging.INFO, logger="stratus.supervisor"),
        running(cluster.conf(**{"supervisor.zookeeper.outage": "fence"}), cluster),
    ):
        cluster.assign(meta)
        before = cluster.wait_for_worker(WorkerState.RUNNING)
        assert before.pid is not None
        cut_at = time.monotonic()
        zk_restartable.stop()
        wait_until(lambda: process_gone(before.pid), 10, "the fenced worker to stop")
        stopped_after = time.monotonic() - cut_at
        fenced = [r.getMessage() for r in caplog.records if "event=fenced" in r.getMessage()]
        assert fenced == [fenced[0]]
        assert "supervisor=s1 pipelines=etl" in fenced[0]
        zk_restartable.start()
        after = cluster.wait_for_worker(
            WorkerState.RUNNING, where=lambda b: b.pid != before.pid, timeout=30
        )
        assert after.pid is not None and not process_gone(after.pid)
    # The leader would move it after nimbus.supervisor.timeout.secs (4 s) of silence.
    assert stopped_after < FAST["nimbus.supervisor.timeout.secs"]


def test_with_pacemakers_a_supervisor_cut_off_from_zookeeper_fences_though_it_reaches_them(
    own_zk, zk_restartable, tmp_path
) -> None:
    """Its heartbeats still reach the pacemaker, which the leader may not reach; its lease
    renews only while ZooKeeper is connected, so it fences on time all the same."""
    cluster = own_zk
    pacemaker = PacemakerProcess(tmp_path, ["pacemaker.pulse.ttl.secs=120"]).start()
    host, port = zk_restartable.connect_string.rsplit(":", 1)
    try:
        with TcpProxy(host, int(port)) as proxy:
            conf = cluster.conf(
                **{
                    "zookeeper.servers": f"127.0.0.1:{proxy.port}",
                    "cluster.state.store": "pacemaker",
                    "pacemaker.servers": f"127.0.0.1:{pacemaker.port}",
                    "pacemaker.pulse.ttl.secs": 120,
                    "pacemaker.client.timeout.secs": 1,
                }
            )
            with running(conf, cluster):
                cluster.assign(cluster.code.upload("etl"))
                beat_file = WorkerPaths.of(tmp_path / "s1", "etl").heartbeat
                wait_until(lambda: running_locally(beat_file), 20, "the worker to run")
                beat = read_heartbeat(beat_file)
                assert beat is not None and beat.pid is not None
                pid = beat.pid
                proxy.cut()
                wait_until(lambda: process_gone(pid), 20, "the cut-off worker to stop")
    finally:
        pacemaker.stop()


def running_locally(beat_file: Path) -> bool:
    beat = read_heartbeat(beat_file)
    return beat is not None and beat.state is WorkerState.RUNNING


def test_a_supervisor_cut_off_from_zookeeper_alone_fences_on_time_with_the_defaults(
    own_zk, zk_restartable, caplog
) -> None:
    """A cut proxy leaves every ask in silence: the probe proves nothing, the lease ends."""
    cluster = own_zk
    host, port = zk_restartable.connect_string.rsplit(":", 1)
    with (
        TcpProxy(host, int(port)) as proxy,
        caplog.at_level(logging.INFO, logger="stratus.supervisor"),
        running(cluster.conf(**{"zookeeper.servers": f"127.0.0.1:{proxy.port}"}), cluster),
    ):
        registered = cluster.registration()
        assert registered is not None and registered.zookeeper_outage == "ride"
        cluster.assign(cluster.code.upload("etl"))
        before = cluster.wait_for_worker(WorkerState.RUNNING)
        assert before.pid is not None
        proxy.cut()
        wait_until(lambda: process_gone(before.pid), 20, "the cut-off worker to stop")
    messages = [r.getMessage() for r in caplog.records]
    assert any("event=zookeeper_outage_probe" in m and "proven=false" in m for m in messages)
    assert not any("proven=true" in m for m in messages)


def test_a_supervisor_that_proved_an_outage_keeps_its_worker_while_its_reconnection_hangs(
    own_zk, zk_restartable, caplog
) -> None:
    """The server serves again and the probe sees it, but the session's reconnection hangs
    for twice the fence timeout: the proof's lease lasts until the leader could judge
    (nimbus.supervisor.timeout.secs after its own reconnection) minus the stop, so the
    worker never stops, and runs on once the session is back."""
    cluster = own_zk
    host, port = zk_restartable.connect_string.rsplit(":", 1)
    fence = FAST["supervisor.fence.timeout.secs"]
    with TcpProxy(host, int(port)) as proxy:
        conf = cluster.conf(
            **{
                "zookeeper.servers": f"127.0.0.1:{proxy.port}",
                "nimbus.supervisor.timeout.secs": 4 * fence + FAST["supervisor.worker.stop.secs"],
            }
        )
        with caplog.at_level(logging.INFO, logger="stratus.supervisor"), running(conf, cluster):
            cluster.assign(cluster.code.upload("etl"))
            before = cluster.wait_for_worker(WorkerState.RUNNING)
            assert before.pid is not None
            proxy.refuse()  # the server's port refuses, on this host: the outage is proven

            def logged(text: str) -> bool:
                return any(text in r.getMessage() for r in caplog.records)

            wait_until(lambda: logged("proven=true"), 15, "the supervisor to prove the outage")
            proxy.words_only()  # the member serves again; the session's handshake hangs
            wait_until(lambda: logged("proven=false"), 15, "the probe to see the member serve")
            hang_until = time.monotonic() + 2 * fence
            wait_until(
                lambda: process_gone(before.pid) or time.monotonic() > hang_until,
                4 * fence,
                "the reconnection to hang",
            )
            assert not process_gone(before.pid)
            proxy.heal()
            healed_at = time.time()
            after = cluster.wait_for_worker(
                WorkerState.RUNNING, where=lambda beat: beat.time > healed_at + fence, timeout=30
            )
            assert after.pid == before.pid and after.restarts == 0  # the same run, never stopped
    assert not [r for r in caplog.records if "event=fenced" in r.getMessage()]


def test_a_server_list_that_does_not_match_the_ensemble_warns_once_and_fences(
    own_zk, zk_restartable, caplog
) -> None:
    """Two names for one standalone server: a majority of that list proves nothing. The
    supervisor says so once, at start, shows it in its registration, and fences."""
    cluster = own_zk
    port = zk_restartable.connect_string.rsplit(":", 1)[1]
    servers = f"127.0.0.1:{port},127.0.0.2:{port}"  # 127.0.0.2: loopback, no server there
    with (
        caplog.at_level(logging.INFO, logger="stratus.supervisor"),
        running(cluster.conf(**{"zookeeper.servers": servers}), cluster),
    ):
        registered = cluster.registration()
        assert registered is not None and registered.zookeeper_outage == "fence"
        assert registered.ride_unavailable == "2 servers listed, 1 serves"
        cluster.assign(cluster.code.upload("etl"))
        before = cluster.wait_for_worker(WorkerState.RUNNING)
        assert before.pid is not None
        zk_restartable.stop()  # both names refuse, on this host: it would prove the outage
        wait_until(lambda: process_gone(before.pid), 20, "the worker to be fenced")
    messages = [r.getMessage() for r in caplog.records]
    warned = [m for m in messages if "event=zookeeper_outage_ride_unavailable" in m]
    assert len(warned) == 1 and "zookeeper.servers" in warned[0]
    assert not any("proven=true" in m for m in messages)


OUTAGE_SECS = 20.0  # longer than every lease and timeout: the outage of the experiment


def test_with_the_defaults_a_standalone_server_that_stops_stops_no_worker_and_moves_nothing(
    zk_restartable, tmp_path, request, caplog
) -> None:
    """The server, on this host, refuses every connection: a refusal no firewall gave."""
    ride_out_under_a_nimbus(
        zk_restartable.connect_string,
        tmp_path,
        request.node.name,
        caplog,
        take_down=zk_restartable.stop,
        bring_back=zk_restartable.start,
    )


def test_with_the_defaults_a_quorum_loss_stops_no_worker_and_moves_no_pipeline(
    zk_ensemble, tmp_path, request, caplog
) -> None:
    """Two of three members stop: the third answers that it serves nothing, the two refuse
    on this host. The leader, back under a new ZooKeeper epoch, restarts its silences."""

    def take_down() -> None:
        for member in zk_ensemble.servers[:2]:
            member.stop()

    ride_out_under_a_nimbus(
        zk_ensemble.connect_string,
        tmp_path,
        request.node.name,
        caplog,
        take_down=take_down,
        bring_back=zk_ensemble.start,
    )


# Riding out: a longer leader timeout than FAST's, so that the lease a proof gives (this
# timeout less the stop and a margin) outlasts a reconnection on a loaded machine.
RIDE_TIMEOUT: dict[str, Any] = {"nimbus.supervisor.timeout.secs": 8.0}
RIDE = {**FAST, **RIDE_TIMEOUT}


def ride_out_under_a_nimbus(
    hosts: str,
    tmp_path: Path,
    name: str,
    caplog: pytest.LogCaptureFixture,
    *,
    take_down: Callable[[], None],
    bring_back: Callable[[], None],
) -> None:
    """A nimbus and a supervisor with the defaults, a pipeline running; ZooKeeper down for
    ``OUTAGE_SECS``: the supervisor proves the outage, its worker never stops, and the
    leader moves nothing, a whole supervisor timeout after ZooKeeper is back."""
    nimbus_keys = ("nimbus.", "supervisor.fence.", "supervisor.worker.stop.")
    extra = [
        part
        for key, value in RIDE.items()
        if key.startswith(nimbus_keys)
        for part in ("-c", f"{key}={value}")
    ]
    with (
        nimbus_cluster(hosts, tmp_path, name, size=1, extra=extra) as nimbuses,
        kazoo_client(hosts) as zk,
    ):
        cluster = Cluster(zk, hosts, tmp_path, root=nimbuses.root)
        conf = cluster.conf(**{"nimbus.code.distributor": "local", **RIDE_TIMEOUT})
        with (
            NimbusClient(nimbuses.seeds, retry_deadline=30.0) as client,
            caplog.at_level(logging.INFO, logger="stratus.supervisor"),
            running(conf, cluster),
        ):
            registered = cluster.registration()
            assert registered is not None and registered.zookeeper_outage == "ride"
            assert registered.ride_unavailable is None
            client.wait_replicated(client.submit("etl", valid_package("etl")).name)
            before = cluster.wait_for_worker(WorkerState.RUNNING, timeout=30)
            assigned = zk.get(f"{nimbuses.root}/assignments/etl")[0]
            pid = before.pid
            assert pid is not None
            take_down()
            wait_until(
                lambda: any("proven=true" in r.getMessage() for r in caplog.records),
                15,
                "the supervisor to prove the outage",
            )
            down_until = time.monotonic() + OUTAGE_SECS
            wait_until(
                lambda: process_gone(pid) or time.monotonic() > down_until,
                OUTAGE_SECS + 5,
                "the outage to last",
            )
            assert not process_gone(pid)
            bring_back()
            back_at = time.time()
            timeout = RIDE["nimbus.supervisor.timeout.secs"]
            after = cluster.wait_for_worker(  # beating on, a whole supervisor timeout after
                WorkerState.RUNNING, where=lambda beat: beat.time > back_at + timeout, timeout=120
            )
            assert after.pid == pid and after.restarts == 0  # the same run, never stopped
            assert zk.get(f"{nimbuses.root}/assignments/etl")[0] == assigned  # never moved
    assert not [r for r in caplog.records if "event=fenced" in r.getMessage()]


# ---------------------------------------------------------------------- with a real nimbus


def test_a_pipeline_submitted_to_a_nimbus_runs_with_its_code_and_outlives_every_nimbus(
    zk_server, tmp_path, request
) -> None:
    """The leader assigns it, the supervisor fetches the code over HTTP from the nimbus, and
    the pipeline runs on while no nimbus runs at all."""
    with (
        nimbus_cluster(zk_server.connect_string, tmp_path, request.node.name, size=1) as nimbuses,
        kazoo_client(zk_server.connect_string) as zk,
    ):
        cluster = Cluster(zk, zk_server.connect_string, tmp_path, root=nimbuses.root)
        nimbus = nimbuses.nimbuses[0]
        conf = cluster.conf(**{"nimbus.code.distributor": "local"})
        with (
            NimbusClient(nimbuses.seeds, retry_deadline=30.0) as client,
            running(conf, cluster),
        ):
            record = client.wait_replicated(client.submit("etl", valid_package("etl")).name)
            beat = cluster.wait_for_worker(WorkerState.RUNNING, timeout=30)
            assert (beat.supervisor, beat.digest) == ("s1", record.digest)
            holders = zk.get_children(f"{nimbuses.root}/code/etl")
            assert holders == [nimbus.address]  # the supervisor is a consumer, never a holder

            nimbus.kill()  # no nimbus at all: the pipeline runs on
            killed_at = time.time()
            cluster.wait_for_worker(
                WorkerState.RUNNING, where=lambda b: b.time > killed_at + 2 and b.pid == beat.pid
            )
            nimbus.start()
            nimbus.wait_ready()
            client.deactivate("etl")
            wait_until(lambda: cluster.worker_beat() is None, 30, "the worker to be stopped")
            assert beat.pid is not None and process_gone(beat.pid)


# ---------------------------------------------------------------------- on real Spark

SPARK_SECS = 120.0  # a Spark start on a loaded 2-core machine, with room
SPARK = {
    "supervisor.worker.stop.secs": 5.0,  # time for the queries and Spark to stop
    "supervisor.fence.timeout.secs": 2.0,
    "nimbus.supervisor.timeout.secs": 10.0,
    "supervisor.worker.timeout.secs": 50.0,
    "nimbus.task.timeout.secs": 60.0,
    "worker.heartbeat.frequency.secs": 0.5,
    "pipeline.spark.master": "local[1]",
}


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``."""
    children: dict[int, list[int]] = {}
    for child, parent in process_parents().items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if not process_gone(child):
                found.add(child)
                todo.append(child)
    return found


def all_gone(pids: set[int]) -> Callable[[], bool]:
    return lambda: all(process_gone(pid) for pid in pids)


@pytest.mark.spark
def test_a_spark_pipeline_stops_when_unassigned_and_never_outlives_a_killed_supervisor(
    cluster, tmp_path
) -> None:
    meta = cluster.code.upload("pt", passthrough_package("pt"))
    pipeline_conf = passthrough_conf(tmp_path / "in", tmp_path / "out")
    options = cluster.options(**SPARK, **{"pipeline.checkpoint.root": tmp_path / "checkpoints"})
    supervisor = SupervisorProcess(options, id="s1", slots=1, log_dir=tmp_path)
    try:
        supervisor.start()
        supervisor.wait_ready()
        cluster.assign(meta, "pt", conf=pipeline_conf)
        first = cluster.wait_for_worker(
            WorkerState.RUNNING, "pt", where=lambda b: bool(b.app_id), timeout=SPARK_SECS
        )
        write_ids(tmp_path / "in", range(10))
        wait_until(lambda: read_ids(tmp_path / "out") == list(range(10)), 60, "the rows")
        workers = descendants(supervisor.pid or 0)  # the worker and its Spark JVM
        assert first.pid in workers and len(workers) >= 2

        cluster.unassign("pt")
        wait_until(all_gone(workers), 30, "the worker and its JVM to stop")
        wait_until(lambda: cluster.worker_beat("pt") is None, 10, "its heartbeat to go")

        cluster.assign(meta, "pt", conf=pipeline_conf)
        cluster.wait_for_worker(
            WorkerState.RUNNING, "pt", where=lambda b: bool(b.app_id), timeout=SPARK_SECS
        )
        workers = descendants(supervisor.pid or 0)
        supervisor.kill()  # SIGKILL: no stop order reaches the worker; its lease ends
        wait_until(all_gone(workers), 60, "the orphaned worker and its JVM to exit")
    finally:
        supervisor.stop()


def maps_file(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` mapped."""
    with contextlib.suppress(OSError):
        return str(path) in Path(f"/proc/{pid}/maps").read_text()
    return False


@pytest.mark.spark
def test_a_workers_driver_gets_the_supervisors_spark_submit_opts(cluster, tmp_path) -> None:
    """``SPARK_SUBMIT_OPTS`` reaches a worker's driver JVM through the allow-list: the test
    run's names a class archive (``tests/harness/class_archive.py``), which the JVM maps."""
    archive = archive_of(os.environ)
    if archive is None:
        pytest.skip("the shell named SPARK_CONF_DIR or SPARK_SUBMIT_OPTS: no run's archive")
    assert archive.exists()  # made before the run's first Spark test
    meta = cluster.code.upload("pt", passthrough_package("pt"))
    options = cluster.options(**SPARK, **{"pipeline.checkpoint.root": tmp_path / "checkpoints"})
    supervisor = SupervisorProcess(options, id="s1", slots=1, log_dir=tmp_path)
    try:
        supervisor.start()
        supervisor.wait_ready()
        cluster.assign(meta, "pt", conf=passthrough_conf(tmp_path / "in", tmp_path / "out"))
        cluster.wait_for_worker(
            WorkerState.RUNNING, "pt", where=lambda b: bool(b.app_id), timeout=SPARK_SECS
        )
        workers = descendants(supervisor.pid or 0)
        assert any(maps_file(pid, archive) for pid in workers), workers
    finally:
        supervisor.stop()


@pytest.mark.spark
def test_a_worker_whose_entrypoint_cannot_load_ends_failed_with_its_error(cluster) -> None:
    files = package_files("bad")
    files["pipeline_main.py"] = (
        "import not_a_module_anywhere\n\n\ndef run(spark, context):\n    pass\n"
    )
    meta = cluster.code.upload("bad", package_bytes(files))
    conf = cluster.conf(**SPARK, **{"supervisor.worker.max.restarts": 1})
    supervisor = Supervisor(
        SupervisorSettings.from_config(conf)
    )  # the real worker: it loads the entrypoint before Spark
    supervisor.start()
    try:
        cluster.assign(meta, "bad", conf={})
        beat = cluster.wait_for_worker(WorkerState.FAILED, "bad", timeout=60)
        assert beat.restarts == 1
        assert beat.error is not None and "not_a_module_anywhere" in beat.error
    finally:
        supervisor.stop()
