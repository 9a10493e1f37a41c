"""Cordon and drain on a real cluster: ``stratus nimbus`` processes on a real ZooKeeper,
supervisors with stand-in workers (``test_trail_cluster``'s recording worker: its start,
batches and stop go to the history file, each line naming its process), a leader killed
with SIGKILL, and a supervisor stopped with SIGTERM.

What is proved: a cordoned supervisor gets no new pipeline and keeps its own across a
change of leader; a drain moves every pipeline away, records ``drained`` in the history,
and stops each old worker before its new one starts (the old pid's stop is in the history
before the new pid's start); a supervisor that stopped keeps its pipelines until it is
judged dead, and a restarted one gets them back without a move.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from stratus.api.errors import UnknownSupervisorError
from stratus.api.records import Assignment, WorkerState
from stratus.chaos.oracle import check_single_run
from stratus.chaos.trail_events import Clocks, load_events
from stratus.cli.exit_codes import ExitCode
from stratus.cli.main import main
from stratus.client import NimbusClient
from stratus.nimbus.records.assignment_history import AssignmentHistoryLog
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.settings import SupervisorSettings
from stratus.zk.paths import ClusterPaths
from stratus.zk.server import ZooKeeperServer
from tests.cluster.test_supervisor import Cluster
from tests.cluster.test_trail_cluster import RECORDING_WORKER, named
from tests.cluster.test_warm_workers import WARM_STAND_IN, wait_for_warm
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.slow

WAIT_SECS = 60.0
OPTIONS = ["-c", "nimbus.monitor.freq.secs=0.5"]


class Drains:
    """Nimbus processes, in-process supervisors running the recording worker, a client."""

    def __init__(
        self, nimbuses: NimbusCluster, zk: KazooClient, hosts: str, tmp_path: Path
    ) -> None:
        self.nimbuses = nimbuses
        self.zk = zk
        self.paths = ClusterPaths(nimbuses.root)
        self.history = tmp_path / "history.jsonl"
        self.cluster = Cluster(zk, hosts, tmp_path, root=nimbuses.root)
        self.script = tmp_path / "recording_worker.py"
        self.script.write_text(RECORDING_WORKER)
        self.client = NimbusClient(nimbuses.seeds, retry_deadline=30.0)
        self.supervisors: dict[str, Supervisor] = {}

    def conf_overrides(self, sid: str, slots: int) -> dict[str, object]:
        return {
            "nimbus.code.distributor": "local",
            "history.file": str(self.history),
            "supervisor.slots": slots,
        }

    def supervisor(
        self, sid: str, *, slots: int, warm: bool | None = False, **extra: object
    ) -> Supervisor:
        """A supervisor of ``slots``; with ``warm`` a warm pool of stand-in warm workers
        (None: the defaults decide, see ``test_warm_defaults``)."""
        asked = {} if warm is None else {"supervisor.worker.warm": warm}
        conf = self.cluster.conf(
            sid,
            **self.conf_overrides(sid, slots),
            **asked,
            **({"supervisor.worker.warm.memory.mb": 4096} if warm else {}),
            **extra,
        )
        warm_script = self.script.with_name("warm_stand_in.py")
        warm_script.write_text(WARM_STAND_IN)
        started = Supervisor(
            SupervisorSettings.from_config(conf),
            worker_command=[sys.executable, str(self.script)],
            warm_command=[sys.executable, str(warm_script)],
        )
        started.start()
        self.supervisors[sid] = started
        return started

    def submit(self, name: str) -> None:
        self.client.submit(name, valid_package(name), request_id=f"submit-{name}")

    def where(self, name: str) -> str | None:
        found = self.zk.exists(self.paths.assignment(name))
        if found is None:
            return None
        return Assignment.model_validate_json(
            self.zk.get(self.paths.assignment(name))[0]
        ).supervisor

    def wait_placed(self, name: str) -> str:
        wait_until(lambda: self.where(name) is not None, WAIT_SECS, f"{name} to be placed")
        where = self.where(name)
        assert where is not None
        return where

    def wait_running(self, name: str, sid: str) -> int:
        """The pid of ``name``'s worker on ``sid`` once it heartbeats RUNNING."""

        def running() -> bool:
            beat = self.cluster.worker_beat(name, sid)
            return beat is not None and beat.state is WorkerState.RUNNING and beat.pid is not None

        wait_until(running, WAIT_SECS, f"{name} to run on {sid}")
        beat = self.cluster.worker_beat(name, sid)
        assert beat is not None and beat.pid is not None
        return beat.pid

    def reasons(self, name: str) -> list[tuple[str, str | None, str | None]]:
        changes = reversed(AssignmentHistoryLog(self.zk, self.paths).read(name))
        return [(c.reason.value, c.supervisor, c.previous) for c in changes]

    def close(self) -> None:
        for supervisor in self.supervisors.values():
            supervisor.stop(workers=True)  # the whole cluster goes away
        self.client.close()


@contextmanager
def drains(
    zk_server: ZooKeeperServer,
    tmp_path: Path,
    name: str,
    *,
    nimbuses: int = 1,
    extra: Sequence[str] = (),
) -> Iterator[Drains]:
    with (
        nimbus_cluster(
            zk_server.connect_string, tmp_path, name, size=nimbuses, extra=[*OPTIONS, *extra]
        ) as cluster,
        kazoo_client(zk_server.connect_string) as zk,
    ):
        found = Drains(cluster, zk, zk_server.connect_string, tmp_path)
        try:
            yield found
        finally:
            found.close()


def test_a_cordoned_supervisor_gets_no_new_pipeline_and_keeps_its_own_across_a_leader_change(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with drains(zk_server, tmp_path, request.node.name, nimbuses=2) as cluster:
        cluster.supervisor("s1", slots=4)
        cluster.submit("etl")
        assert cluster.wait_placed("etl") == "s1"
        cluster.supervisor("s2", slots=2)  # s1 has more room: it would get the next one

        leading = cluster.nimbuses.wait_for_agreed_leader()
        standby = next(address for address in cluster.nimbuses.seeds if address != leading)
        with NimbusClient([standby], retry_deadline=30.0) as via_standby:  # follows its 421
            cordoned = via_standby.cordon("s1")
        assert cordoned.cordoned and not cordoned.draining
        assert cluster.client.cordon("s1") == cordoned  # twice: the same
        old = cluster.nimbuses.by_address(leading)
        old.signal(signal.SIGKILL)
        cluster.nimbuses.wait_for_agreed_leader(not_=old.address, skip=[old])

        cluster.submit("web")
        assert cluster.wait_placed("web") == "s2"
        assert cluster.where("etl") == "s1"
        assert [c.supervisor for c in cluster.client.cluster().cordons] == ["s1"]

        cluster.client.uncordon("s1")
        cluster.submit("api")
        assert cluster.wait_placed("api") == "s1"


def test_drain_moves_every_pipeline_away_each_old_worker_stopped_before_its_new_one_starts(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with drains(zk_server, tmp_path, request.node.name) as cluster:
        cluster.supervisor("s1", slots=2)
        for name in ("etl", "web"):
            cluster.submit(name)
            cluster.wait_placed(name)
        old_pids = {name: cluster.wait_running(name, "s1") for name in ("etl", "web")}
        cluster.supervisor("s2", slots=3)

        cluster.client.drain("s1")
        done = cluster.client.wait_drained("s1", timeout=WAIT_SECS)

        assert done.done and done.draining and done.remaining == []
        for name in ("etl", "web"):
            assert cluster.where(name) == "s2"
            new_pid = cluster.wait_running(name, "s2")
            assert cluster.reasons(name)[-2:] == [
                ("drained", None, "s1"),
                ("drained", "s2", "s1"),
            ]
            events = load_events([cluster.history])
            lines = [
                (e.name, e.process[1])
                for e in events
                if e.get("pipeline") == name and e.name in ("worker_started", "worker_stopped")
            ]
            assert lines.index(("worker_stopped", old_pids[name])) < lines.index(
                ("worker_started", new_pid)
            )
        assert check_single_run(load_events([cluster.history]), Clocks()) == []
        cluster.submit("api")  # s1 stays cordoned: nothing new goes there
        assert cluster.wait_placed("api") != "s1"


def test_a_drained_pipeline_starts_in_a_warm_worker_of_its_new_supervisor(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with drains(zk_server, tmp_path, request.node.name) as cluster:
        cluster.supervisor("s1", slots=1)
        cluster.submit("etl")
        cluster.wait_placed("etl")
        old = cluster.wait_running("etl", "s1")
        target = cluster.supervisor("s2", slots=2, warm=True)
        warm = wait_for_warm(target, 2)  # their JVMs are up before the old worker stops

        cluster.client.drain("s1")
        cluster.client.wait_drained("s1", timeout=WAIT_SECS)

        assert cluster.where("etl") == "s2"
        new = cluster.wait_running("etl", "s2")
        assert new in warm and new != old
        assert cluster.reasons("etl")[-1] == ("drained", "s2", "s1")


def test_draining_or_cordoning_an_unknown_supervisor_names_the_known_ones(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with drains(zk_server, tmp_path, request.node.name) as cluster:
        cluster.supervisor("s1", slots=1)
        wait_until(lambda: cluster.zk.exists(cluster.paths.supervisor("s1")), WAIT_SECS, "s1")

        for call in (cluster.client.cordon, cluster.client.drain, cluster.client.uncordon):
            with pytest.raises(UnknownSupervisorError, match=r"'nosuch'.*known are: s1"):
                call("nosuch")
        assert cluster.zk.get_children(cluster.paths.cordons) == []


SUPERVISOR_PROCESS = """
import sys
from stratus.cli.daemon_run import run_daemon
from stratus.config import load_config
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.settings import SupervisorSettings

conf = load_config(overrides=sys.argv[2:], environ={})
settings = SupervisorSettings.from_config(conf)
supervisor = Supervisor(settings, worker_command=[sys.executable, sys.argv[1]])
run_daemon(supervisor, ready=lambda d: f"supervisor {d.id} running")
"""


def test_a_supervisor_stopped_with_sigterm_keeps_its_pipelines_until_it_is_judged_dead(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with drains(zk_server, tmp_path, request.node.name) as cluster:
        script = tmp_path / "supervisor_process.py"
        script.write_text(SUPERVISOR_PROCESS)
        overrides = cluster.cluster.overrides("s1", **cluster.conf_overrides("s1", 2))
        argv = [sys.executable, str(script), str(cluster.script), *overrides]
        with (tmp_path / "s1.log").open("w") as log:
            process = subprocess.Popen(argv, stderr=log, stdout=log)
        try:
            cluster.submit("etl")
            assert cluster.wait_placed("etl") == "s1"
            cluster.wait_running("etl", "s1")
            cluster.supervisor("s2", slots=2)

            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=WAIT_SECS) == 0
            beat = cluster.cluster.board.supervisors().get("s1")
            assert beat is not None and beat.stopping
            cluster.submit("probe")  # a round of the leader after s1's stop
            assert cluster.wait_placed("probe") == "s2"
            assert cluster.where("etl") == "s1"  # kept: not moved by the stop

            wait_until(lambda: cluster.where("etl") == "s2", WAIT_SECS, "etl to move")
            assert cluster.reasons("etl")[-1] == ("supervisor_dead", "s2", "s1")
            assert [e.name for e in named(load_events([cluster.history]), "worker_started")]
        finally:
            if process.poll() is None:
                process.kill()


def test_stratus_drain_exits_non_zero_naming_the_pipeline_that_finds_no_room(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with drains(zk_server, tmp_path, request.node.name) as cluster:
        cluster.supervisor("s1", slots=1)
        cluster.submit("etl")
        cluster.wait_placed("etl")
        seeds = ["-c", f"nimbus.seeds={','.join(cluster.nimbuses.seeds)}"]

        drained = CliRunner().invoke(main, ["drain", "s1", *seeds])

        assert drained.exit_code == ExitCode.CONFLICT, drained.output
        assert "no other supervisor has room for etl" in drained.output
        assert cluster.where("etl") == "s1"  # it keeps running there
        shown = CliRunner().invoke(main, ["cluster", *seeds])
        assert shown.exit_code == 0, shown.output
        assert re.search(r"^s1\t.*\tdraining\tride\t-$", shown.output, re.M), shown.output
        status = CliRunner().invoke(main, ["uncordon", "s1", *seeds])
        assert "supervisor s1 is schedulable; still there: etl" in status.output
