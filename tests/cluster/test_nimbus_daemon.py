"""The nimbus daemon's own rules: the may-lead hook, a term that resumes after an outage,
start-up errors, and the CLI verbs against a real cluster."""

from __future__ import annotations

import errno
import io
import json
import logging
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from kazoo.client import KazooClient
from kazoo.protocol.states import Callback

from stratus.api.errors import NotLeaderError
from stratus.api.records import PipelineStatus, SupervisorHeartbeat, SupervisorSummary
from stratus.codedist.code_sync import CodeSync
from stratus.config import config_from_mapping
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import LeaderChange
from stratus.nimbus.daemon import Nimbus
from stratus.nimbus.duties.lost_code import FailLostCode
from stratus.nimbus.duties.scheduling import SchedulingDuty
from stratus.nimbus.http.listening import NimbusStartError
from stratus.nimbus.leadership.leadership_controller import ControllerState, LeadershipController
from stratus.nimbus.leadership.readiness import CodeReadiness
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.nimbus.scheduling.scheduler import Plan
from stratus.nimbus.scheduling.standby_workers import StandbyWorkerTable
from stratus.nimbus.settings import NimbusSettings
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.zk.paths import ClusterPaths
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import SESSION_SECS, nimbus_cluster
from tests.harness.package_factory import valid_package, valid_package_dir
from tests.harness.tcp_proxy import TcpProxy
from tests.harness.zkfixtures import kazoo_client, wait_until


class Gate:
    """A may-lead hook that the test opens and closes."""

    def __init__(self, open_: bool) -> None:
        self.open = threading.Event()
        self.calls = 0
        if open_:
            self.open.set()

    def __call__(self) -> bool:
        self.calls += 1
        return self.open.is_set()


def in_process_nimbus(zk_hosts: str, tmp_path: Path, gate: Gate, **extra: object) -> Nimbus:
    conf = config_from_mapping(
        {
            "zookeeper.servers": [zk_hosts],
            "zookeeper.session.timeout.secs": SESSION_SECS,
            "nimbus.port": 0,
            "nimbus.code.port": 0,  # several nimbuses on this machine
            "nimbus.local.dir": str(tmp_path / f"nimbus-{id(gate)}"),
            "nimbus.lead.check.secs": 0.05,
            **extra,
        }
    )
    return Nimbus(NimbusSettings.from_config(conf), may_lead=gate)


@pytest.fixture
def nimbuses() -> Iterator[list[Nimbus]]:
    started: list[Nimbus] = []
    yield started
    for nimbus in started:
        nimbus.stop()


def test_a_nimbus_that_may_not_lead_never_queues_until_its_hook_says_so(
    zk_hosts, tmp_path, nimbuses
):
    gate = Gate(open_=False)
    nimbus = in_process_nimbus(zk_hosts, tmp_path, gate)
    nimbus.start()
    nimbuses.append(nimbus)
    wait_until(lambda: gate.calls > 5, 5, "the nimbus to consult its hook again and again")
    assert not nimbus.coordinator.is_candidate("nimbus")
    assert nimbus.view.leader().address is None
    with pytest.raises(NotLeaderError, match="no leader is elected"):
        nimbus.service.leader_term()
    gate.open.set()
    wait_until(nimbus.elector.is_leader, 10, "the nimbus to lead once its hook allows it")
    wait_until(nimbus.controller.accepted_term, 10, "the controller to accept the term")
    assert nimbus.service.leader_term().epoch >= 1


def test_an_elected_nimbus_answers_not_leader_until_its_code_check_accepts_the_term(
    zk_hosts, tmp_path, nimbuses, monkeypatch
):
    checking, answer = threading.Event(), threading.Event()

    def no_code_yet(_self: CodeReadiness) -> str | None:
        checking.set()
        answer.wait(10)
        return "missing_code(etl)"

    monkeypatch.setattr(CodeReadiness, "to_lead", no_code_yet)
    nimbus = in_process_nimbus(zk_hosts, tmp_path, Gate(open_=True))
    nimbus.start()
    nimbuses.append(nimbus)
    wait_until(checking.is_set, 10, "the elected nimbus to check its code")
    assert nimbus.elector.is_leader()
    with pytest.raises(NotLeaderError):
        nimbus.service.leader_term()
    assert "stratus_nimbus_is_leader 0.0" in nimbus.metrics.exposition().decode()
    answer.set()
    wait_until(lambda: not nimbus.elector.is_leader(), 10, "the lock given back")
    with pytest.raises(NotLeaderError):
        nimbus.service.leader_term()


def test_a_nimbus_elected_while_its_hook_says_no_gives_the_lock_back(zk_hosts, tmp_path, nimbuses):
    first_gate, second_gate = Gate(open_=True), Gate(open_=True)
    first = in_process_nimbus(zk_hosts, tmp_path, first_gate)
    second = in_process_nimbus(zk_hosts, tmp_path, second_gate)
    for nimbus in (first, second):
        nimbus.start()
        nimbuses.append(nimbus)
    wait_until(first.elector.is_leader, 10, "the first nimbus to lead")
    wait_until(lambda: second.coordinator.is_candidate("nimbus"), 10, "the second to queue")
    second_gate.open.clear()  # e.g. it lacks a pipeline's code
    declined = threading.Event()

    def note(change: LeaderChange) -> None:
        if change.member_id == second.address:
            declined.set()

    second.coordinator.subscribe_leader_changes("nimbus", note)
    first.stop()
    nimbuses.remove(first)
    wait_until(declined.is_set, 10, "the second nimbus to be elected")
    wait_until(lambda: not second.coordinator.is_candidate("nimbus"), 10, "the lock given back")
    assert not second.elector.is_leader()
    never_acted = "stratus_nimbus_leadership_gained_total 0.0"
    assert never_acted in second.metrics.exposition().decode()
    second_gate.open.set()
    wait_until(second.elector.is_leader, 10, "the second nimbus to lead once it may")


def test_a_duty_that_keeps_raising_is_counted_while_the_leader_goes_on_with_the_others(
    zk_hosts, tmp_path, nimbuses, monkeypatch
):
    rounds = {"scheduling": 0}
    schedule = SchedulingDuty.run

    def broken(_self: FailLostCode, _term: Leadership) -> None:
        raise RuntimeError("a bug in the lost-code duty")

    def counted(self: SchedulingDuty, term: Leadership) -> Plan:
        rounds["scheduling"] += 1
        return schedule(self, term)

    monkeypatch.setattr(FailLostCode, "run", broken)
    monkeypatch.setattr(SchedulingDuty, "run", counted)
    nimbus = in_process_nimbus(
        zk_hosts, tmp_path, Gate(open_=True), **{"nimbus.monitor.freq.secs": 0.05}
    )
    nimbus.start()
    nimbuses.append(nimbus)
    failures = re.compile(r'stratus_nimbus_duty_failures_total\{duty="lost_code"\} (\d+)')

    def failed_rounds() -> int:
        found = failures.search(nimbus.metrics.exposition().decode())
        return int(float(found.group(1))) if found else 0

    wait_until(lambda: failed_rounds() >= 3, 10, "the broken duty to fail round after round")
    wait_until(lambda: rounds["scheduling"] >= 3, 10, "the duty after it to run every round")
    assert nimbus.elector.is_leader()
    assert 'stratus_nimbus_duty_failures_total{duty="scheduling"} 0.0' in (
        nimbus.metrics.exposition().decode()
    )


class HandWrittenSupervisor:
    """A supervisor's side written by the test: its ephemeral registration on the test's own
    session, and a heartbeat every ``BEAT_SECS`` while ``beating`` is set."""

    BEAT_SECS = 0.1

    def __init__(self, client: KazooClient, paths: ClusterPaths, sid: str) -> None:
        self.id = sid
        summary = SupervisorSummary(id=sid, slots=2)
        client.create(paths.supervisor(sid), summary.encode(), ephemeral=True, makepath=True)
        self._board = HeartbeatBoard(ZooKeeperStateStore(client, paths.heartbeats))
        self.beating = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"beats-{sid}", daemon=True)

    def __enter__(self) -> HandWrittenSupervisor:
        self.beating.set()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._closed.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._closed.wait(self.BEAT_SECS):
            if self.beating.is_set():
                beat = SupervisorHeartbeat(id=self.id, time=time.time(), slots=2)
                self._board.put_supervisor(beat)


class RecordedRounds:
    """The scheduling rounds a nimbus runs, each with when it ended and its plan; ``hold()``
    holds the rounds back (a held round returns at once without running) from the moment
    none is in flight, until ``release()``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ran: list[tuple[float, Plan]] = []
        self._held = threading.Event()
        self._running = threading.Lock()
        schedule = SchedulingDuty.run

        def run(duty: SchedulingDuty, term: Leadership) -> Plan:
            with self._running:
                if self._held.is_set():
                    return Plan(assign={}, unassign=[], moved={})
                plan = schedule(duty, term)
                self.ran.append((time.monotonic(), plan))
                return plan

        monkeypatch.setattr(SchedulingDuty, "run", run)

    def hold(self) -> None:
        with self._running:  # the round in flight, if any, ends first
            self._held.set()

    def release(self) -> None:
        self._held.clear()


@pytest.mark.solo  # the resumed term must see a heartbeat within the supervisor timeout
def test_a_term_resumed_after_an_outage_longer_than_the_supervisor_timeout_moves_nothing(
    zk_hosts, tmp_path, nimbuses, monkeypatch
):
    supervisor_timeout = 2.0
    outage = supervisor_timeout + 1.5  # within the session: the same term resumes
    rounds = RecordedRounds(monkeypatch)
    paths = ClusterPaths("/stratus")
    host, _, chroot = zk_hosts.partition("/")
    zk_host, zk_port = host.rsplit(":", 1)
    with (
        TcpProxy(zk_host, int(zk_port)) as proxy,
        kazoo_client(zk_hosts) as client,  # the supervisor's side: never cut
    ):
        nimbus = in_process_nimbus(
            zk_hosts,
            tmp_path,
            Gate(open_=True),
            **{
                "zookeeper.servers": [f"127.0.0.1:{proxy.port}/{chroot}"],
                "zookeeper.session.timeout.secs": 10.0,
                "nimbus.supervisor.timeout.secs": supervisor_timeout,
                "supervisor.fence.timeout.secs": 1.0,  # with the worker stop, below the timeout
                "supervisor.worker.stop.secs": 0.5,
                "nimbus.monitor.freq.secs": 0.1,
                "supervisor.zookeeper.outage": "ride",  # supervisors may keep their workers
            },
        )
        nimbus.start()
        nimbuses.append(nimbus)
        wait_until(nimbus.controller.accepted_term, 10, "the nimbus to lead")
        term, session_id = nimbus.controller.accepted_term(), nimbus.session.session_id
        assert term is not None
        with HandWrittenSupervisor(client, paths, "s1") as supervisor:
            package = io.BytesIO(valid_package("etl"))
            nimbus.service.submit("etl", "{}", uuid.uuid4().hex, package)
            table = AssignmentTable(client, paths)
            wait_until(lambda: table.read("etl") is not None, 10, "etl to be assigned")
            assigned = table.read("etl")
            assert assigned is not None and assigned.supervisor == "s1"

            supervisor.beating.clear()  # the supervisor falls silent as the outage begins
            # No round across the cut: one whose heartbeat read failed there would restart
            # the silences itself (a blind stretch is not silence) and hide a term that did not.
            rounds.hold()
            proxy.cut()
            wait_until(
                lambda: nimbus.controller.state is ControllerState.QUEUED,
                10,
                "the nimbus to suspend its term",
            )
            time.sleep(outage)  # the outage itself: longer than the supervisor timeout
            proxy.heal()
            wait_until(nimbus.controller.accepted_term, 10, "the term to resume")
            resumed = nimbus.controller.accepted_term()
            assert resumed is not None and resumed.epoch == term.epoch
            assert nimbus.session.session_id == session_id  # resumed, not a new session
            gained = "stratus_nimbus_leadership_gained_total 2.0"
            assert gained in nimbus.metrics.exposition().decode()
            before = len(rounds.ran)
            rounds.release()
            wait_until(lambda: len(rounds.ran) > before, 10, "a round of the resumed term")
            supervisor.beating.set()  # only now: that round saw the heartbeat of before the cut
            first_after = rounds.ran[before][0]
            wait_until(
                lambda: rounds.ran[-1][0] - first_after > supervisor_timeout + 0.5,
                10,
                "rounds for more than a supervisor timeout after the resume",
            )
            changes = [plan for _, plan in rounds.ran[before:] if not plan.empty]
            assert changes == [], "the resumed term took the outage for the supervisor's silence"
            assert table.read("etl") == assigned


def test_the_leader_places_a_hot_pipelines_standby_worker_beside_its_rounds(
    zk_hosts, tmp_path, nimbuses
):
    paths = ClusterPaths("/stratus")
    nimbus = in_process_nimbus(
        zk_hosts,
        tmp_path,
        Gate(open_=True),
        **{"nimbus.monitor.freq.secs": 0.1, "nimbus.standby.place.wait.secs": 0},
    )
    nimbus.start()
    nimbuses.append(nimbus)
    wait_until(nimbus.controller.accepted_term, 10, "the nimbus to lead")
    with (
        kazoo_client(zk_hosts) as client,
        HandWrittenSupervisor(client, paths, "s1"),
        HandWrittenSupervisor(client, paths, "s2"),
    ):
        conf = '{"pipeline.standby": "hot"}'
        nimbus.service.submit("etl", conf, uuid.uuid4().hex, io.BytesIO(valid_package("etl")))
        assignments, standby = AssignmentTable(client, paths), StandbyWorkerTable(client, paths)
        wait_until(lambda: standby.read("etl") is not None, 10, "a standby worker's placement")
        assigned, placed = assignments.read("etl"), standby.read("etl")
        assert assigned is not None and placed is not None
        assert {assigned.supervisor, placed.supervisor} == {"s1", "s2"}


def refuse(_self: object, *_args: object, **_kwargs: object) -> None:
    raise OSError(errno.EADDRINUSE, "Address already in use")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(
    ("target", "name"),
    [(uvicorn.Server, "serve"), (LeadershipController, "start")],
    ids=["at_the_http_step", "at_the_last_step_after_registering"],
)
def test_a_start_that_fails_leaves_no_thread_session_registration_or_socket_behind(
    zk_hosts, tmp_path, monkeypatch, target, name
):
    before = set(threading.enumerate())
    monkeypatch.setattr(target, name, refuse)
    nimbus = in_process_nimbus(zk_hosts, tmp_path, Gate(open_=True))
    with pytest.raises((NimbusStartError, OSError)):
        nimbus.start()
    wait_until(lambda: not set(threading.enumerate()) - before, 10, "the nimbus's threads to end")
    assert not nimbus.session.connected
    with kazoo_client(zk_hosts) as client:
        assert client.get_children("/stratus/nimbuses") == []
    with socket.create_server((nimbus.settings.api.host, nimbus.port)):
        pass  # the port is free again
    nimbus.stop()  # nothing left to stop: a no-op


def test_a_close_that_fails_at_stop_is_logged_and_what_is_older_still_closes(
    zk_hosts, tmp_path, monkeypatch, caplog
):
    def fail(_self: CodeSync) -> None:
        raise RuntimeError("the code sync would not stop")

    monkeypatch.setattr(CodeSync, "stop", fail)  # opened after the session, before the API
    nimbus = in_process_nimbus(zk_hosts, tmp_path, Gate(open_=True))
    nimbus.start()
    with caplog.at_level(logging.ERROR, logger="stratus.nimbus.daemon"):
        nimbus.stop()
    failed = [r for r in caplog.records if r.getMessage().startswith("event=close_failed")]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "the code sync would not stop" in str(failed[0].exc_info[1])
    assert not nimbus.session.connected  # the session, opened before it, closed all the same
    with kazoo_client(zk_hosts) as client:
        assert client.get_children("/stratus/nimbuses") == []
    with socket.create_server((nimbus.settings.api.host, nimbus.port)):
        pass  # the listening socket, the oldest but the history, closed too


def stratus(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stratus", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_an_unreachable_zookeeper_at_start_up_is_one_clear_line(tmp_path):
    port = pick_free_port()
    result = stratus(
        "nimbus",
        "-c", f"zookeeper.servers=127.0.0.1:{port}",
        "-c", "zookeeper.connection.timeout.secs=1",
        "-c", "nimbus.port=0",
        "-c", "nimbus.code.port=0",
        "-c", f"nimbus.local.dir={tmp_path}",
    )  # fmt: skip
    assert result.returncode == 6  # unavailable
    assert f"Error: no ZooKeeper server answered at 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_busy_port_at_start_up_is_one_clear_line(zk_server: ZooKeeperServer, tmp_path):
    result = stratus(
        "nimbus",
        "-c", f"zookeeper.servers={zk_server.connect_string}",
        "-c", f"nimbus.port={zk_server.port}",
        "-c", f"nimbus.local.dir={tmp_path}",
    )  # fmt: skip
    assert result.returncode == 1
    assert f"nimbus cannot listen on 127.0.0.1:{zk_server.port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_busy_package_port_at_start_up_is_one_clear_line(zk_server: ZooKeeperServer, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = stratus(
            "nimbus",
            "-c", f"zookeeper.servers={zk_server.connect_string}",
            "-c", "nimbus.port=0",
            "-c", f"nimbus.code.port={port}",
            "-c", f"nimbus.local.dir={tmp_path}",
        )  # fmt: skip
    assert result.returncode == 1
    assert f"nimbus.code.port {port} is in use on 127.0.0.1" in result.stderr
    assert "set nimbus.code.port to a free port" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_the_cli_pointed_at_a_standby_works(zk_server: ZooKeeperServer, tmp_path, request):
    with nimbus_cluster(zk_server.connect_string, tmp_path, request.node.name) as cluster:
        leader = cluster.wait_for_agreed_leader()
        standby = next(a for a in cluster.seeds if a != leader)
        package = valid_package_dir(tmp_path / "source", "from-cli")
        seeds = ["-c", f"nimbus.seeds={standby}"]
        submitted = stratus("submit", str(package), "--conf", "spark.x=1", *seeds)
        assert submitted.returncode == 0, submitted.stderr
        deactivated = stratus("deactivate", "from-cli", "--json", *seeds)
        assert json.loads(deactivated.stdout)["status"] == "INACTIVE"
        listed = stratus("list", *seeds)
        assert "from-cli" in listed.stdout and "INACTIVE" in listed.stdout
        shown = stratus("cluster", *seeds)
        assert leader in shown.stdout and standby in shown.stdout
        found = json.loads(stratus("leader", "--json", *seeds).stdout)
        assert found["address"] == leader
        unknown = stratus("kill", "no-such-pipeline", *seeds)
        assert unknown.returncode == 3  # not found
        assert unknown.stderr.strip().count("\n") == 0
        assert "no-such-pipeline" in unknown.stderr


def test_a_write_is_answered_once_the_nimbus_reads_it_even_with_its_watches_delayed(
    zk_hosts, tmp_path, nimbuses
):
    """A read after a write on the same nimbus shows the write, though the watches that feed
    the nimbus's view run half a second late (a busy event thread, a loaded machine)."""
    nimbus = in_process_nimbus(zk_hosts, tmp_path, Gate(open_=True))
    nimbus.start()
    nimbuses.append(nimbus)
    wait_until(nimbus.controller.accepted_term, 10, "the nimbus to lead")
    client = nimbus.session.client

    def delay_watches() -> None:
        client.handler.dispatch_callback(Callback("watch", time.sleep, (0.5,)))

    delay_watches()
    nimbus.service.submit("etl", "{}", uuid.uuid4().hex, io.BytesIO(valid_package("etl")))
    assert [record.name for record in nimbus.service.pipelines()] == ["etl"]
    delay_watches()
    nimbus.service.deactivate("etl")
    assert nimbus.service.pipeline("etl").status is PipelineStatus.INACTIVE
    delay_watches()
    nimbus.service.kill("etl", 60)
    assert nimbus.service.pipeline("etl").status is PipelineStatus.KILLED
