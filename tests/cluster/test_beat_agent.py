"""The beat agent and the beat lease on three real ``stratus pacemaker`` processes.

The agent is the real process (``python -m stratus.supervisor.beat_agent``), started by the
supervisor's own keeper or by a real supervisor; the hot worker is a small stand-in process
that watches the beat lease with the worker's own code (``watch_beat_lease``), so Spark
stays out but for one test of the real worker. Pacemakers are stopped with SIGSTOP (a host
that answers nothing). What is proved: the beat lease keeps ahead of now while a majority
of the pacemakers answers; with a majority stopped it ends, and the hot worker is SIGKILLed
after it ended, never before; a supervisor stopped with SIGTERM and started again adopts
its agent, and the beat lease of its hot worker never lapses meanwhile; the agent stops
once no hot worker is left. No timing is asserted: conditions are awaited.
"""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stratus.api.records import WorkerState
from stratus.api.standby_workers import STANDBY_CONF_KEY, BeatLease
from stratus.pacemaker.auth import AuthMethod
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.process import ProcessGroup
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.pacemaker_store import PacemakerStateStore
from stratus.supervisor.beat_ack_stats import ACK_STATS_FILE, read_tally
from stratus.supervisor.beat_agent import AgentConfig, AgentRecord
from stratus.supervisor.beat_keeper import BeatKeeper
from stratus.supervisor.settings import BeatSettings
from stratus.supervisor.worker_process import WorkerPaths
from stratus.worker.lease_file import BEAT_LEASE_FILE, LEASE_FILE, read_lease, write_lease
from stratus.worker.spec import WorkerSpec
from tests.cluster.test_adoption import SupervisorRun, adopted_after
from tests.cluster.test_supervisor import Cluster
from tests.harness.pacemaker_process import PacemakerProcess, digest_pacemakers
from tests.harness.spark_packages import blocking_package, unpack, worker_spec
from tests.harness.worker_processes import START_SECS, Worker, WorkerProcesses
from tests.harness.zkfixtures import kazoo_client, process_gone, wait_until

pytestmark = pytest.mark.slow

SECRETS = {"nimbus": "n" * 32, "s1": "a" * 32}
ROLES = {"nimbus": "nimbus", "s1": "supervisor"}
INTERVAL_SECS = 0.2
LEASE_SECS = 2.0  # longer than the default: a loaded test machine must not end it by a stall
STOP_SECS = 0.1
WITHIN_SECS = 60.0  # the bound of every wait: far above the lease, for a loaded machine

# A hot worker as far as the beat lease goes: the worker's own watch, a kill of its group.
STAND_IN = """
import json, os, signal, sys, time
from pathlib import Path
from typing import Any
from stratus.worker.lease_file import read_lease, watch_beat_lease

lease, out = Path(sys.argv[1]), Path(sys.argv[2])

def stopping(reason):
    seen = time.monotonic()
    (out / "lapsed.json").write_text(json.dumps({"seen": seen, "lease": read_lease(lease)}))

def kill():
    (out / "killed").write_text(repr(time.monotonic()))
    os.killpg(os.getpgrp(), signal.SIGKILL)

watch_beat_lease(lease, poll_secs=0.02, stop_secs=float(sys.argv[3]), stop=stopping, kill=kill)
(out / "ready").write_text(str(os.getpid()))
while True:
    time.sleep(1)
"""

# The worker a supervisor runs for the hot pipeline: heartbeats as the real one, and both
# leases watched as the real one watches them; a lapse of the beat lease is marked.
HOT_WORKER = """
import os, signal, sys, threading, time
from pathlib import Path
from typing import Any
from stratus.api.records import WorkerHeartbeat, WorkerState
from stratus.worker.lease_file import LeaseWatch, watch_beat_lease
from stratus.worker.spec import WorkerSpec, write_heartbeat

spec = WorkerSpec.read(Path(sys.argv[1]))
stop = threading.Event()
started = time.time()

def beat_lapsed(reason):
    Path(spec.work_dir, "beat_lapsed").write_text(reason)
    stop.set()

if spec.lease_path is not None:
    LeaseWatch(spec.lease_path, on_lapsed=lambda reason: stop.set()).start()
if spec.beat_lease_path is not None:
    watch_beat_lease(spec.beat_lease_path, poll_secs=spec.beat_poll_secs,
                     stop_secs=spec.beat_stop_secs, stop=beat_lapsed,
                     kill=lambda: os.killpg(os.getpgrp(), signal.SIGKILL))

def beat(state):
    write_heartbeat(spec.heartbeat_path, WorkerHeartbeat(
        pipeline=spec.pipeline, supervisor=spec.supervisor, epoch=spec.epoch,
        generation=spec.generation, digest=spec.digest, state=state, time=time.time(),
        started=started, pid=os.getpid()))

def watch_stdin():
    while os.read(0, 4096):
        pass
    os._exit(3)

threading.Thread(target=watch_stdin, daemon=True).start()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
while not stop.is_set():
    beat(WorkerState.RUNNING)
    stop.wait(spec.heartbeat_interval_secs)
beat(WorkerState.STOPPED)
"""


@pytest.fixture(scope="module")
def pacemakers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[PacemakerProcess]]:
    with digest_pacemakers(
        tmp_path_factory.mktemp("beat-agent-pacemakers"), SECRETS, ROLES
    ) as servers:
        yield servers


@pytest.fixture(autouse=True)
def all_answer(pacemakers: list[PacemakerProcess]) -> Iterator[None]:
    """Every test ends with every pacemaker running again."""
    yield
    for server in pacemakers:
        server.resume()


def freeze(server: PacemakerProcess) -> None:
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)


def client_settings(pacemakers: list[PacemakerProcess], principal: str) -> PacemakerClientSettings:
    return PacemakerClientSettings(
        servers=tuple(p.address for p in pacemakers),
        auth_method=AuthMethod.DIGEST,
        principal=principal,
        secret=SECRETS[principal].encode(),
        timeout_secs=1.0,
        subtree="/supervisors/s1" if principal == "s1" else None,
    )


@pytest.fixture
def keeper(pacemakers: list[PacemakerProcess], tmp_path: Path) -> Iterator[BeatKeeper]:
    """A beat agent of supervisor s1, started by the supervisor's own keeper, under a
    supervisor lease that holds for the whole test."""
    write_lease(tmp_path / LEASE_FILE, time.monotonic() + 3600)
    settings = BeatSettings(INTERVAL_SECS, LEASE_SECS, STOP_SECS, tmp_path / BEAT_LEASE_FILE)
    config = AgentConfig("s1", INTERVAL_SECS, LEASE_SECS, client_settings(pacemakers, "s1"))
    keeper = BeatKeeper(settings, tmp_path, config)
    keeper.keep(True)
    try:
        wait_until(lambda: keeper.held(time.monotonic()), WITHIN_SECS, "the beat lease")
        yield keeper
    finally:
        keeper.stop()


def renewals(path: Path, count: int) -> list[tuple[float, float]]:
    """``count`` renewals of the beat lease in ``path``: (the moment seen, the lease's end)."""
    seen: list[tuple[float, float]] = []

    def renewed() -> bool:
        until, now = read_lease(path), time.monotonic()
        assert until is not None
        if not seen or until > seen[-1][1]:
            seen.append((now, until))
        return len(seen) > count

    wait_until(renewed, WITHIN_SECS, f"{count} renewals of the beat lease")
    return seen


def test_the_beat_lease_keeps_ahead_while_a_majority_of_pacemakers_answers(
    keeper: BeatKeeper, pacemakers: list[PacemakerProcess], tmp_path: Path
) -> None:
    path = tmp_path / BEAT_LEASE_FILE
    record = AgentRecord.read(tmp_path)
    assert record is not None and record.alive() and record.pid == keeper.agent_pid
    assert not (tmp_path / "beat-agent.json").exists()  # its credentials, read and gone
    assert stat.S_IMODE((tmp_path / "beat-agent.log").stat().st_mode) == 0o600
    freeze(pacemakers[0])  # one of three answers nothing: two still store every beat
    for seen_at, until in renewals(path, 10):
        assert until > seen_at  # renewed while still held: never a lapse
    assert keeper.held(time.monotonic())

    def tallied() -> bool:  # the agent's tally of the acknowledgements, for the metrics
        tally = read_tally(tmp_path / ACK_STATS_FILE)
        return tally is not None and tally.count >= 10 and tally.sum_secs > 0

    wait_until(tallied, WITHIN_SECS, "the agent's tally of ten counted beats")
    assert stat.S_IMODE((tmp_path / ACK_STATS_FILE).stat().st_mode) == 0o600


def test_with_a_majority_of_pacemakers_stopped_the_hot_worker_is_killed_after_the_lease_ends(
    keeper: BeatKeeper, pacemakers: list[PacemakerProcess], tmp_path: Path
) -> None:
    path = tmp_path / BEAT_LEASE_FILE
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    out = tmp_path / "stand-in"
    out.mkdir()
    with (tmp_path / "stand-in.log").open("ab") as log:
        worker = ProcessGroup.start(
            [sys.executable, str(script), str(path), str(out), str(STOP_SECS)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until((out / "ready").exists, WITHIN_SECS, "the stand-in to watch")
        renewals(path, 2)  # it watches a lease being renewed
        freeze(pacemakers[0])
        freeze(pacemakers[1])  # one of three: no beat counts any more
        code = worker.wait(WITHIN_SECS)
    finally:
        worker.kill()

    assert code == -signal.SIGKILL
    lapsed = json.loads((out / "lapsed.json").read_text())
    killed = float((out / "killed").read_text())
    ended = read_lease(path)
    assert ended is not None and lapsed["lease"] == ended  # the end it stopped on, unmoved
    assert ended <= lapsed["seen"] <= killed  # the lease ended, then it stopped, then the kill
    assert not keeper.held(time.monotonic())

    def missed() -> bool:
        tally = read_tally(tmp_path / ACK_STATS_FILE)
        return tally is not None and tally.missed > 0

    wait_until(missed, WITHIN_SECS, "the agent's tally to count the beats that did not count")


@pytest.fixture
def real_worker() -> Iterator[Callable[[WorkerSpec], Worker]]:
    """``python -m stratus.worker.main`` started as a supervisor starts it."""
    processes = WorkerProcesses()
    yield processes.start
    processes.close()


@pytest.mark.spark
def test_a_real_worker_whose_beat_lease_ended_is_killed_with_its_jvm(
    tmp_path: Path, real_worker: Callable[[WorkerSpec], Worker]
) -> None:
    """The worker itself, on Spark: its run ignores stops; the beat lease's end kills it
    ``beat_stop_secs`` later, not after its ordinary grace, and its JVM with it."""
    lease = tmp_path / BEAT_LEASE_FILE
    write_lease(lease, time.monotonic() + 3600)
    code = unpack(blocking_package(), tmp_path / "code")
    spec = worker_spec(
        tmp_path / "blocking",
        "blocking",
        code,
        checkpoint_location=str(tmp_path / "checkpoints"),
        stop_grace_secs=3600.0,  # a stop alone would wait an hour
    ).model_copy(
        update={"beat_lease_path": lease, "beat_poll_secs": 0.02, "beat_stop_secs": STOP_SECS}
    )
    worker = real_worker(spec)
    worker.wait_heartbeat(lambda beat: beat.state is WorkerState.RUNNING, "Spark to run it")
    write_lease(lease, time.monotonic())  # the agent renews it no more: it ends now
    assert worker.wait_exit(START_SECS) == 0, worker.output()
    final = worker.heartbeat()
    assert final is not None and final.state is WorkerState.STOPPED
    assert final.error == "its beat lease ended"
    assert "the beat lease ended" in worker.output()
    wait_until(lambda: not worker.jvms(), START_SECS, "its JVM to be gone")


# ---------------------------------------------------------------------- a real supervisor


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path, pacemakers: list[PacemakerProcess]) -> Iterator[Cluster]:
    """ZooKeeper and the pacemakers; the heartbeats read from the pacemakers as a leader
    reads them; the hot stand-in as the supervisor's worker command."""
    pool = BlockingPacemakerPool(client_settings(pacemakers, "nimbus"), call_timeout_secs=30.0)
    with kazoo_client(zk_hosts) as zk:
        cluster = Cluster(zk, zk_hosts, tmp_path)
        cluster.board = HeartbeatBoard(PacemakerStateStore(pool))
        (tmp_path / "hot_worker.py").write_text(HOT_WORKER)
        cluster.worker_command = [sys.executable, str(tmp_path / "hot_worker.py")]
        try:
            yield cluster
        finally:
            pool.close()


def pacemaker_conf(cluster: Cluster, pacemakers: list[PacemakerProcess]) -> dict[str, Any]:
    secrets = cluster.tmp_path / "supervisor.secrets"
    secrets.write_text(f"s1 supervisor {SECRETS['s1']}\n")
    secrets.chmod(0o600)
    return {
        "cluster.state.store": "pacemaker",
        "pacemaker.servers": ",".join(f"127.0.0.1:{p.port}" for p in pacemakers),
        "pacemaker.auth.method": "digest",
        "pacemaker.auth.file": str(secrets),
        "pacemaker.pulse.ttl.secs": 600,
        "pacemaker.client.timeout.secs": 1,
        "supervisor.beat.interval.ms": int(INTERVAL_SECS * 1000),
        "supervisor.beat.lease.secs": LEASE_SECS,
        "supervisor.beat.stop.secs": STOP_SECS,
    }


class LapseWatch:
    """A thread that reads the beat lease every 20 ms and keeps every moment it found ended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lapses: list[tuple[float, float | None]] = []
        self.looks = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.02):
            until, now = read_lease(self.path), time.monotonic()
            self.looks += 1
            if until is None or until <= now:
                self.lapses.append((now, until))

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def test_a_supervisor_restarted_adopts_its_beat_agent_and_the_beat_lease_never_lapses(
    cluster: Cluster, pacemakers: list[PacemakerProcess]
) -> None:
    local = cluster.tmp_path / "s1"
    run = SupervisorRun(cluster, **pacemaker_conf(cluster, pacemakers))
    try:
        run.start()
        summary = cluster.registration()
        assert summary is not None
        assert summary.beat_lease == BeatLease(
            lease_secs=LEASE_SECS, stop_secs=STOP_SECS, poll_secs=0.02
        )
        cluster.assign(cluster.code.upload("etl"), conf={STANDBY_CONF_KEY: "hot"})
        before = cluster.wait_for_worker(WorkerState.RUNNING, timeout=WITHIN_SECS)
        assert before.pid is not None
        spec = WorkerSpec.read(WorkerPaths.of(local, "etl").spec)
        assert spec.beat_lease_path == local / BEAT_LEASE_FILE
        agent = AgentRecord.read(local)
        assert agent is not None and agent.alive()

        watch = LapseWatch(local / BEAT_LEASE_FILE)
        try:
            run.signal(signal.SIGTERM)  # it leaves its workers, and its agent, running
            run.wait()
            assert agent.alive()
            run.start()
            adopted_after(cluster, before.pid, time.time())
            wait_until(
                lambda: (
                    f"event=beat_agent_adopted supervisor=s1 pid={agent.pid}"
                    in run.log.read_text(errors="replace")
                ),
                WITHIN_SECS,
                "the new supervisor to adopt the agent",
            )
            renewals(local / BEAT_LEASE_FILE, 3)  # the adopted agent beats on
        finally:
            watch.stop()
        assert watch.looks > 0 and watch.lapses == []
        assert AgentRecord.read(local) == agent and agent.alive()  # the same process
        assert not process_gone(before.pid)
        assert not (local / "workers" / "etl" / "work" / "beat_lapsed").exists()

        cluster.unassign("etl")  # no hot worker left here: no beats either
        wait_until(lambda: not agent.alive(), WITHIN_SECS, "the agent to stop")
        assert process_gone(before.pid)
    finally:
        run.close()
