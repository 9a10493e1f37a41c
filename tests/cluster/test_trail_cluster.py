"""The trail of a real cluster, judged by the oracle: two ``stratus nimbus`` processes on a
real ZooKeeper, a supervisor running a worker, the leader killed with SIGKILL.

No Spark: the worker is a stand-in process that records its start, batches and stop
through the worker's own trail code (``WorkerTrail`` fed by a ``QueryTracker``), from
the ``history_file`` its supervisor put in its spec. The leaders' lines come from the real
daemons. Last, a write with fencing turned off (the real fenced transaction, its epoch
check pointed at a node that happens to have the old epoch's version) is injected, and the
oracle must flag it. Then a supervisor whose heartbeats stop while it still answers: the
leader fences it through its endpoint and moves its pipeline before its lease would have
lapsed, and the oracle finds no two workers at once.
"""

from __future__ import annotations

import logging
import math
import signal
import socket
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from stratus.chaos.oracle import check_leader_writes, check_single_worker, check_submissions
from stratus.chaos.trail_events import Clocks, Event, load_events
from stratus.chaos.unavailability import leader_unavailability, pipeline_unavailability
from stratus.client import NimbusClient
from stratus.coordination.leadership import Leadership
from stratus.nimbus.leadership.leader_trail import LeaderTrail
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.settings import SupervisorSettings
from stratus.trail import PROCESS_KILLED, SUBMIT_ACKNOWLEDGED, Actor, TrailRecorder
from stratus.zk.server import ZooKeeperServer
from tests.cluster.test_supervisor import Cluster
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.slow

RECORDING_WORKER = '''
"""A stand-in worker: heartbeats as the real one, and a batch every 0.1 s recorded through
the worker's own history code."""
import os, signal, sys, threading, time
from pathlib import Path

from stratus.api.records import WorkerHeartbeat, WorkerState
from stratus.worker.query_progress import QueryTracker
from stratus.worker.run_trail import WorkerTrail
from stratus.worker.spec import WorkerSpec, write_heartbeat

spec = WorkerSpec.read(Path(sys.argv[1]))
history = WorkerTrail.open(spec)
tracker = QueryTracker(on_batch=history.batch_committed)
stop = threading.Event()
started = time.time()


def beat(state):
    write_heartbeat(spec.heartbeat_path, WorkerHeartbeat(
        pipeline=spec.pipeline, supervisor=spec.supervisor, epoch=spec.epoch,
        generation=spec.generation, digest=spec.digest, state=state, time=time.time(),
        started=started, pid=os.getpid()))


def watch_stdin():
    while os.read(0, 4096):
        pass
    stop.set()  # EOF: the supervisor is gone


threading.Thread(target=watch_stdin, daemon=True).start()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
history.started()
batch = 0
while not stop.is_set():
    beat(WorkerState.RUNNING)
    tracker.progressed("q-1", name="counts", batch_id=batch, num_input_rows=10,
                       input_rows_per_second=100.0, processed_rows_per_second=100.0)
    batch += 1
    stop.wait(0.1)
history.stopped(WorkerState.STOPPED)
beat(WorkerState.STOPPED)
'''

REPLICATED = [
    "-c", "pipeline.min.replication.count=2",
    "-c", "pipeline.max.replication.wait.time.sec=-1",
    "-c", "nimbus.monitor.freq.secs=0.5",
]  # fmt: skip


def named(events: list[Event], name: str) -> list[Event]:
    return [e for e in events if e.name == name]


def test_a_leader_killed_with_sigkill_leaves_a_history_the_oracle_passes(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    history = tmp_path / "history.jsonl"
    options = [*REPLICATED, "-c", f"history.file={history}"]
    script = tmp_path / "recording_worker.py"
    script.write_text(RECORDING_WORKER)
    driver = TrailRecorder.open(history, Actor("client", "test"))
    with (
        nimbus_cluster(
            zk_server.connect_string, tmp_path, request.node.name, size=2, extra=options
        ) as nimbuses,
        kazoo_client(zk_server.connect_string) as zk,
        NimbusClient(nimbuses.seeds, retry_deadline=30.0) as client,
    ):
        cluster = Cluster(zk, zk_server.connect_string, tmp_path, root=nimbuses.root)
        conf = cluster.conf(**{"nimbus.code.distributor": "local", "history.file": str(history)})
        supervisor = Supervisor(
            SupervisorSettings.from_config(conf), worker_command=[sys.executable, str(script)]
        )
        supervisor.start()
        try:
            record = client.wait_replicated(
                client.submit("etl", valid_package("etl"), request_id="req-1").name
            )
            driver.record(SUBMIT_ACKNOWLEDGED, pipeline=record.name, request_id="req-1")
            wait_until(lambda: batches(history) >= 5, 30, "the worker to commit batches")

            old = nimbuses.by_address(nimbuses.wait_for_agreed_leader())
            old_pid = old.pid
            old.signal(signal.SIGKILL)
            driver.record(PROCESS_KILLED, of_host=socket.gethostname(), of_pid=old_pid)
            new = nimbuses.wait_for_agreed_leader(not_=old.address, skip=[old])
            client.deactivate("etl")  # a write of the new term; the worker stops
            wait_until(lambda: stopped(history), 30, "the worker to record its stop")
            final = {p.name for p in client.list_pipelines()}
        finally:
            supervisor.stop(workers=True)

        events = load_events([history])
        epochs = assert_terms_recorded(events, old.address, new)
        assert_oracle_passes(events, final, new)
        stale = epochs[old.address]
        inject_unfenced_write(zk, nimbuses.root, old.address, stale, history)
    violations = check_leader_writes(load_events([history]), Clocks())
    deposed = [v for v in violations if "deposed leader's write was accepted" in v.message]
    assert len(deposed) == 1
    newer, injected = deposed[0].lines
    assert (newer.get("id"), newer.get("epoch")) == (new, epochs[new])
    assert (injected.get("epoch"), injected.get("id")) == (stale, old.address)


def test_a_silent_supervisor_the_leader_fences_is_stopped_before_its_pipeline_moves(
    zk_server: ZooKeeperServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="stratus.supervisor")
    history = tmp_path / "history.jsonl"
    timeouts = {
        "nimbus.supervisor.timeout.secs": 10,
        "supervisor.fence.timeout.secs": 6,  # the lease would lapse only after 6 s
        "nimbus.supervisor.fence.after.secs": 2,
        "nimbus.monitor.freq.secs": 0.5,
    }
    options = [
        "-c", f"history.file={history}",
        *(part for key, value in timeouts.items() for part in ("-c", f"{key}={value}")),
    ]  # fmt: skip
    script = tmp_path / "recording_worker.py"
    script.write_text(RECORDING_WORKER)
    with (
        nimbus_cluster(
            zk_server.connect_string, tmp_path, request.node.name, size=1, extra=options
        ) as nimbuses,
        kazoo_client(zk_server.connect_string) as zk,
        NimbusClient(nimbuses.seeds, retry_deadline=30.0) as client,
    ):
        cluster = Cluster(zk, zk_server.connect_string, tmp_path, root=nimbuses.root)

        def supervisor(sid: str) -> Supervisor:
            conf = cluster.conf(
                sid,
                **{"nimbus.code.distributor": "local", "history.file": str(history)},
                **timeouts,
            )
            started = Supervisor(
                SupervisorSettings.from_config(conf), worker_command=[sys.executable, str(script)]
            )
            started.start()
            return started

        s1 = supervisor("s1")
        s2: Supervisor | None = None
        try:
            client.submit("etl", valid_package("etl"))
            wait_until(lambda: batches(history) >= 5, 30, "the worker to commit batches on s1")
            s2 = supervisor("s2")
            s1.publisher.stop(timeout=5.0)  # s1 falls silent, its endpoint still answers
            path = f"{nimbuses.root}/assignments/etl"
            wait_until(lambda: b'"supervisor":"s2"' in zk.get(path)[0], 30, "etl to move to s2")
            wait_until(
                lambda: len(named(load_events([history]), "worker_started")) == 2,
                30,
                "etl's worker to start on s2",
            )
            wait_until(lambda: batches_after_restart(history) >= 3, 30, "batches on s2")
            metrics = nimbuses.http.get(f"http://{nimbuses.seeds[0]}/metrics").text
            fenced_line = (
                'stratus_nimbus_supervisor_fences_total{method="graceful",result="fenced"}'
            )
            assert f"{fenced_line} 1.0" in metrics
        finally:
            if s2 is not None:
                s2.stop(workers=True)
            s1.stop(workers=True)

        fenced = [
            r.getMessage() for r in caplog.records if "event=fenced supervisor=s1" in r.getMessage()
        ]
        assert len(fenced) == 1 and "by=leader" in fenced[0]  # its lease never lapsed
        leader_log = "".join(path.read_text() for path in tmp_path.glob("nimbus-*.log"))
        assert "event=supervisor_fenced supervisor=s1 method=graceful" in leader_log
        events = load_events([history])
        started = named(events, "worker_started")
        assert [e.get("supervisor") for e in started] == ["s1", "s2"]
        assert check_single_worker(events, Clocks()) == []


def batches_after_restart(history: Path) -> int:
    """Batches committed by the second worker of the history."""
    events = load_events([history])
    second = named(events, "worker_started")[1]
    return sum(1 for e in named(events, "batch_committed") if e.process == second.process)


def assert_terms_recorded(events: list[Event], old: str, new: str) -> dict[str, int]:
    """Both terms won, each with its epoch; writes of each; the worker's start and stop.
    The epoch of each nimbus's term."""
    epochs = {str(e.get("id")): int(e.get("epoch")) for e in named(events, "leader_won")}
    assert set(epochs) == {old, new}
    assert epochs[new] > epochs[old]
    writes = named(events, "leader_write")
    assert {(e.get("id"), e.get("epoch")) for e in writes} >= {
        (old, epochs[old]),  # the submit
        (new, epochs[new]),  # the deactivation
    }
    assert any("set_data" in op and "/pipelines/etl" in op for w in writes for op in w.get("ops"))
    assert [e.get("pipeline") for e in named(events, "worker_started")] == ["etl"]
    assert named(events, "worker_stopped")[0].get("state") == "STOPPED"
    return epochs


def assert_oracle_passes(events: list[Event], final: set[str], new: str) -> None:
    clocks = Clocks()
    assert check_leader_writes(events, clocks) == []
    assert check_single_worker(events, clocks) == []
    assert check_submissions(events, final_pipelines=final) == []
    leader = leader_unavailability(events, bound_secs=60.0)
    assert leader.violations == []
    assert any(g.start.name == PROCESS_KILLED and g.end.get("id") == new for g in leader.gaps)
    [etl] = pipeline_unavailability(events, bound_secs=60.0)
    assert len(etl.gaps) >= 4


def inject_unfenced_write(
    zk: KazooClient, root: str, member: str, stale: int, history: Path
) -> None:
    """A write of ``member``'s deposed term at epoch ``stale`` with fencing turned off: the
    real fenced transaction, its epoch checked against a node that has that version, so
    ZooKeeper applies what the real epoch node would have refused; recorded as a nimbus
    records its writes."""
    fake_epoch = f"{root}/fencing-off"
    zk.create(fake_epoch, b"", makepath=True)
    for _ in range(stale):
        zk.set(fake_epoch, b"")
    unfenced = Leadership(
        group="nimbus",
        member_id=member,
        slot=0,
        epoch=stale,
        epoch_path=fake_epoch,
        slot_path=f"{root}/groups/nimbus/slots/0",
        _client=zk,
        _holds=lambda _term: True,
        _lease_end=lambda: math.inf,
        _on_committed=LeaderTrail(TrailRecorder.open(history, Actor("nimbus", member))).wrote,
    )
    with unfenced.transaction() as tx:
        tx.set_data(f"{root}/pipelines/etl", zk.get(f"{root}/pipelines/etl")[0])


def batches(history: Path) -> int:
    return len(named(load_events([history]), "batch_committed")) if history.exists() else 0


def stopped(history: Path) -> bool:
    return bool(named(load_events([history]), "worker_stopped"))
