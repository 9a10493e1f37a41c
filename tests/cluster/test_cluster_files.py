"""One cluster's files are its own, and what a standby nimbus waits for: two real clusters
(two ZooKeeper roots of the real ZooKeeper) on one machine.

On default directories, their supervisors keep their directories, and their pipelines
their checkpoints, in directories of their own cluster. With one checkpoint root configured
for both, a pipeline of the second cluster that finds the first's checkpoints of a pipeline
of the same name is refused before anything runs: its worker ends FAILED with an error that
names the location and the fix, and is not restarted. A standby nimbus says whose
ZooKeeper session it waits for while a killed leader's has not expired.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from stratus.api.records import ClusterIdentity, WorkerHeartbeat, WorkerState
from stratus.cli.supervisor_command import READY_LINE
from stratus.client import NimbusClient
from stratus.cluster_names import cluster_dir_name
from stratus.local.processes import DaemonProcess
from stratus.supervisor.adoption import OWNER_FILE
from stratus.worker.checkpoint_origin import ORIGIN_FILE
from stratus.worker.checkpoint_owner import OWNERS_DIR
from tests.harness.nimbus_cluster import SESSION_SECS, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.pipeline_cluster import PipelineCluster, pipeline_cluster
from tests.harness.spark_packages import bad_entrypoint_package
from tests.harness.supervisor_fakes import newest_run_log
from tests.harness.zkfixtures import chroot_for, wait_until

pytestmark = pytest.mark.timeout(300)
READY_SECS = 60.0


class DefaultSupervisor(DaemonProcess):
    """``stratus supervisor`` with no directory configured: its system temporary directory
    is ``tmp`` (``TMPDIR``), where its defaults are made."""

    def __init__(self, options: Sequence[str], tmp: Path, log_dir: Path, name: str) -> None:
        super().__init__(
            log_dir / f"{name}.log",
            tmp,
            ["-c", "supervisor.http.port=0", *options],
            ["env", f"TMPDIR={tmp}"],
        )
        self.name = name

    def start(self) -> None:
        self._launch("supervisor", "--id", "s1", "--slots", "1")

    def ready_local_dir(self) -> Path:
        """Its local directory, as its ready line says."""
        self._wait_for_line("supervisor s1 running", self.name, READY_SECS)
        prefix = READY_LINE.format(id="s1", slots=1, local="")
        line = next(line for line in self.log_tail(200).splitlines() if prefix in line)
        return Path(line.split(prefix, 1)[1].strip())


@pytest.fixture
def supervisors() -> Iterator[list[DefaultSupervisor]]:
    started: list[DefaultSupervisor] = []
    yield started
    for supervisor in started:
        supervisor.signal(signal.SIGKILL)
        supervisor.kill()


def test_two_clusters_on_one_machine_on_default_directories_share_none(
    zk_hosts: str, tmp_path: Path, supervisors: list[DefaultSupervisor], request
) -> None:
    base = chroot_for(request.node.name)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    found: dict[str, Path] = {}
    for name in ("a", "b"):
        options = ["-c", f"zookeeper.servers={zk_hosts}", "-c", f"zookeeper.root={base}/{name}"]
        supervisor = DefaultSupervisor(options, tmp, tmp_path, f"supervisor-{name}")
        supervisors.append(supervisor)
        supervisor.start()
        found[name] = supervisor.ready_local_dir()

    root_a = ClusterIdentity.of(zk_hosts, f"{base}/a").root
    assert found["a"] == tmp / f"stratus-supervisor-s1.{cluster_dir_name(root_a)}"
    assert found["a"] != found["b"]
    for name, directory in found.items():
        owner = json.loads((directory / OWNER_FILE).read_text())
        assert owner["cluster"]["root"].endswith(f"{base}/{name}")
    assert not (tmp / "stratus-checkpoints").exists()


def test_a_pipeline_finding_another_clusters_checkpoint_is_refused_before_it_runs(
    zk_hosts: str, tmp_path: Path, request
) -> None:
    """Both clusters' checkpoint root is tmp_path/checkpoints
    (tests/harness/pipeline_cluster.py)."""
    location = tmp_path / "checkpoints" / "etl"
    with pipeline_cluster(
        zk_hosts, tmp_path, f"{request.node.name}-a", supervisors=("s1",)
    ) as first:
        first.client.submit("etl", bad_entrypoint_package("etl"), {})
        origin = location / OWNERS_DIR / ORIGIN_FILE
        wait_until(origin.exists, 60, "the first cluster's worker to record its origin")
        first.client.kill("etl", wait_secs=0)  # its checkpoints are kept
    claims = sorted((location / OWNERS_DIR).iterdir())
    (tmp_path / "second").mkdir()

    with pipeline_cluster(
        zk_hosts, tmp_path / "second", f"{request.node.name}-b", supervisors=("s1",),
        extra=["-c", f"pipeline.checkpoint.root={tmp_path / 'checkpoints'}"],
    ) as second:  # fmt: skip
        second.client.submit("etl", bad_entrypoint_package("etl"), {})
        beat = _wait_failed(second, "etl")

        assert beat.error is not None
        assert beat.error.startswith(f"the checkpoint location {location} is refused")
        assert "stratus kill --purge etl" in beat.error
        assert beat.restarts == 0
        worker_log = newest_run_log(Path(second.supervisors["s1"].local_dir), "etl")
        assert "event=checkpoint_refused" in worker_log.read_text()
        assert "Traceback" not in worker_log.read_text()  # its entrypoint was never loaded
        assert sorted((location / OWNERS_DIR).iterdir()) == claims  # it claimed nothing


def _wait_failed(cluster: PipelineCluster, name: str) -> WorkerHeartbeat:
    found: list[WorkerHeartbeat] = []

    def failed() -> bool:
        beat = cluster.beat_in_zookeeper(name, "s1")
        if beat is not None and beat.state is WorkerState.FAILED:
            found.append(beat)
            return True
        return False

    wait_until(failed, 60, f"{name}'s worker to be reported FAILED")
    return found[0]


def test_a_standby_nimbus_says_whose_session_it_waits_for_and_takes_over_after_a_kill_9(
    zk_hosts: str, tmp_path: Path, request
) -> None:
    """Two real nimbuses; the leader is killed with SIGKILL, so its session lives on until
    ZooKeeper expires it. The standby's log said whom it waits for and for how long at
    most; then it leads. A submit replicated to it was never a warning of missing code."""
    replicated = ["-c", "pipeline.min.replication.count=2"]
    with nimbus_cluster(zk_hosts, tmp_path, request.node.name, size=2, extra=replicated) as cluster:
        with NimbusClient(cluster.seeds, retry_deadline=30) as client:
            client.wait_replicated(client.submit("etl", valid_package("etl")).name)
        old = cluster.wait_for_agreed_leader()
        standby = next(n for n in cluster.nimbuses if n.address != old)
        waiting = f"event=standby_waiting group=nimbus member={standby.address} leader={old} "

        def whole_log() -> str:  # the line comes once: later lines may push it out of a tail
            return standby.log_path.read_text(errors="replace")

        wait_until(lambda: waiting in whole_log(), 20, "the standby's line")
        line = next(line for line in whole_log().splitlines() if waiting in line)
        assert f"up_to_secs={SESSION_SECS:g}" in line
        assert "its ZooKeeper session to expire" in line

        cluster.by_address(old).kill()

        assert cluster.wait_for_agreed_leader(not_=old, skip=[cluster.by_address(old)]) == (
            standby.address
        )
        assert "event=code_fetch_failed" not in standby.log_tail(400)
