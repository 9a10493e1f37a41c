"""``kill --purge`` is carried out by whoever can write the checkpoint root: real nimbus and
supervisor processes on a real ZooKeeper, with a checkpoint root the nimbus cannot write.

Each nimbus runs in a mount namespace of its own where the checkpoint root is mounted
read-only (root's rights do not pass a read-only mount), as a nimbus of a real deployment
cannot write the root its workers write. No pipeline runs: the pipelines are killed before
any supervisor is there to run them, and their checkpoints are made as a worker would have.
Scenarios: the supervisor deletes them and ``stratus kill --purge`` says killed only once
they are gone; a submit of the name meanwhile is refused (409, naming the purge); a purge
that no one can do is reported with the reason, never as done; a leader's failover in the
middle of a purge still completes it; a supervisor that fails or dies is replaced by another.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from stratus.api.errors import PurgePendingError
from stratus.api.purges import PurgeCause, PurgeOrder, PurgeState, PurgeStatus
from stratus.api.records import PipelineStatus, RunRecord
from stratus.cli.main import main
from stratus.nimbus.records.purge_plan import PurgeBy, PurgeRules, next_step
from stratus.supervisor.purges import CheckpointPurger
from stratus.zk.paths import ClusterPaths
from tests.harness.package_factory import valid_package
from tests.harness.pipeline_cluster import PipelineCluster, pipeline_cluster
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.slow


def _can_mount_read_only() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, check=False
    )
    return done.returncode == 0


needs_mounts = pytest.mark.skipif(
    not _can_mount_read_only(),
    reason="runs daemons in mount namespaces of their own (unshare --mount): needs root",
)


def read_only(directory: Path) -> list[str]:
    """A launcher that execs a daemon in a mount namespace where ``directory`` is read-only."""
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(directory)]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "checkpoints"  # pipeline_cluster's pipeline.checkpoint.root
    root.mkdir()
    return root


@pytest.fixture
def cluster(
    zk_hosts: str, tmp_path: Path, root: Path, request: pytest.FixtureRequest
) -> Iterator[PipelineCluster]:
    nimbuses = 2 if "failover" in request.node.name else 1
    with pipeline_cluster(
        zk_hosts,
        tmp_path,
        request.node.name,
        nimbuses=nimbuses,
        supervisors=(),
        nimbus_prefix=read_only(root),
    ) as running:
        running.nimbuses.wait_for_agreed_leader()
        yield running


def killed_with_checkpoints(cluster: PipelineCluster, root: Path, name: str) -> Path:
    """Submit ``name`` (no supervisor runs it), give it checkpoints as its worker would
    have, and kill it with a long wait: KILLED, its record kept until killed again."""
    cluster.client.submit(name, valid_package(name), {})
    offsets = root / name / "query" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text("v1\n")
    cluster.client.kill(name, wait_secs=3600)
    return root / name


def seeds(cluster: PipelineCluster) -> list[str]:
    return ["-c", f"nimbus.seeds={','.join(cluster.nimbuses.seeds)}"]


def purge_of(cluster: PipelineCluster, name: str) -> PurgeStatus:
    return cluster.client.purge_status(name)


def logs_of(cluster: PipelineCluster) -> str:
    return "".join(n.log_path.read_text() for n in cluster.nimbuses.nimbuses)


@needs_mounts
def test_a_supervisor_purges_what_the_nimbus_cannot_and_the_cli_says_killed_only_then(
    cluster: PipelineCluster, root: Path
) -> None:
    checkpoints = killed_with_checkpoints(cluster, root, "etl")
    neighbour = killed_with_checkpoints(cluster, root, "report")
    cluster.add_supervisor("s1")

    killed = CliRunner().invoke(main, ["kill", "etl", "--wait", "0", "--purge", *seeds(cluster)])

    assert killed.exit_code == 0, killed.output
    assert "killed pipeline etl" in killed.output and "checkpoints deleted" in killed.output
    assert not checkpoints.exists()  # gone when the command said killed
    assert neighbour.is_dir()  # only the purged pipeline's own directory
    assert purge_of(cluster, "etl").done
    assert "event=purge_attempt_failed pipeline=etl" in logs_of(cluster)  # read-only to it
    assert "Read-only file system" in logs_of(cluster)
    supervisor_log = cluster.supervisors["s1"].log_path.read_text()
    assert "event=purge_done pipeline=etl attempt=1 supervisor=s1" in supervisor_log


@needs_mounts
def test_a_purge_deletes_the_runs_and_every_supervisors_logs_of_them_a_plain_kill_keeps_them(
    cluster: PipelineCluster, root: Path, zk_hosts: str
) -> None:
    killed_with_checkpoints(cluster, root, "etl")
    killed_with_checkpoints(cluster, root, "report")
    cluster.add_supervisor("s1")
    paths = ClusterPaths(cluster.nimbuses.root)
    workers = Path(cluster.supervisors["s1"].local_dir) / "workers"
    with kazoo_client(zk_hosts) as zk:
        for name in ("etl", "report"):  # as the supervisor that ran them recorded them
            record = RunRecord(
                pipeline=name, supervisor="s1", epoch=1, generation=0, digest="d", started=1.0
            )
            zk.create(paths.run_prefix(name), record.encode(), sequence=True, makepath=True)
            (workers / name / "runs" / "0").mkdir(parents=True)
            (workers / name / "runs" / "0" / "worker.log").write_text("its output\n")

        killed = CliRunner().invoke(
            main, ["kill", "etl", "--wait", "0", "--purge", *seeds(cluster)]
        )

        assert killed.exit_code == 0, killed.output
        assert zk.exists(paths.pipeline_runs("etl")) is None  # with its checkpoints
        assert zk.get_children(paths.pipeline_runs("report")) == ["run-0000000000"]
    wait_until(lambda: not (workers / "etl" / "runs").exists(), 10, "s1's logs of etl to go")
    assert (workers / "report" / "runs" / "0" / "worker.log").exists()


@needs_mounts
def test_a_submit_of_the_name_is_refused_while_its_purge_is_pending(
    cluster: PipelineCluster, root: Path
) -> None:
    checkpoints = killed_with_checkpoints(cluster, root, "etl")
    killed_with_checkpoints(cluster, root, "report")

    waited = CliRunner().invoke(
        main,
        ["kill", "etl", "--wait", "0", "--purge", "--wait-timeout", "3", "--json", *seeds(cluster)],
    )
    assert waited.exit_code == 6, waited.output  # gave up waiting: the purge goes on
    assert '"error": "purge_wait_timeout"' in waited.output
    queued = CliRunner().invoke(
        main, ["kill", "report", "--wait", "0", "--purge", "--no-wait", *seeds(cluster)]
    )
    assert queued.exit_code == 0, queued.output
    assert "pending" in queued.output and "killed pipeline" not in queued.output

    def pending_without_supervisor() -> bool:
        seen = purge_of(cluster, "etl")
        return (
            seen.record is None
            and seen.purge is not None
            and "no live supervisor" in (seen.purge.reason or "")
        )

    wait_until(pending_without_supervisor, 30, "the purge to wait for a supervisor")
    with pytest.raises(PurgePendingError, match=r"purge of its checkpoints .*etl.* is pending"):
        cluster.client.submit("etl", valid_package("etl"), {})
    leader = cluster.nimbuses.by_address(cluster.nimbuses.wait_for_agreed_leader())
    raw = httpx.post(
        f"{leader.url}/api/v1/pipelines",
        data={"name": "etl", "conf": "{}", "request_id": "again"},
        files={"package": ("etl.zip", valid_package("etl"), "application/zip")},
    )
    assert raw.status_code == 409 and raw.json()["error"] == "purge_pending"
    assert checkpoints.is_dir()  # nobody resumed from it, nobody could delete it yet

    cluster.add_supervisor("s1")
    wait_until(lambda: purge_of(cluster, "etl").done, 30, "the supervisor to purge")
    assert not checkpoints.exists()


@needs_mounts
def test_a_purge_that_no_one_can_do_is_reported_with_its_reason_never_as_done(
    cluster: PipelineCluster, root: Path
) -> None:
    checkpoints = killed_with_checkpoints(cluster, root, "etl")
    cluster.add_supervisor("s1", command_prefix=read_only(root))

    killed = CliRunner().invoke(
        main, ["kill", "etl", "--wait", "0", "--purge", "--json", *seeds(cluster)]
    )

    assert killed.exit_code == 1, killed.output
    assert '"error": "purge_failed"' in killed.output
    assert "not deleted" in killed.output and "Read-only file system" in killed.output
    assert "supervisor s1" in killed.output and "nimbus" in killed.output  # who tried
    assert checkpoints.is_dir()
    seen = purge_of(cluster, "etl")
    assert seen.purge is not None and seen.purge.state is PurgeState.FAILED  # still recorded
    leader = cluster.nimbuses.by_address(cluster.nimbuses.wait_for_agreed_leader())
    wait_until(  # the gauge shows what the leader's last round saw
        lambda: (
            'stratus_nimbus_purges{state="failed"} 1.0' in httpx.get(f"{leader.url}/metrics").text
        ),
        30,
        "the failed purge in the leader's metrics",
    )
    with pytest.raises(PurgePendingError):
        cluster.client.submit("etl", valid_package("etl"), {})


@needs_mounts
def test_a_purge_survives_the_failover_of_the_leader_that_recorded_it(
    cluster: PipelineCluster, root: Path
) -> None:
    checkpoints = killed_with_checkpoints(cluster, root, "etl")
    cluster.client.kill("etl", wait_secs=0, purge=True)
    wait_until(
        lambda: (seen := purge_of(cluster, "etl")).record is None and seen.purge is not None,
        30,
        "the record removed and the purge recorded",
    )
    first = cluster.nimbuses.wait_for_agreed_leader()
    cluster.nimbuses.by_address(first).signal(signal.SIGKILL)
    cluster.nimbuses.wait_for_agreed_leader(not_=first, skip=[cluster.nimbuses.by_address(first)])
    cluster.add_supervisor("s1")

    done = cluster.client.wait_purged("etl", timeout=60)

    assert done.done and done.record is None
    assert not checkpoints.exists()
    assert cluster.client.list_pipelines() == []
    status = cluster.client.purge_status("etl")
    assert status.purge is None and status.record is not PipelineStatus.KILLED


def first_choice(live: list[str], candidates: list[str], wanted: str) -> str:
    """A pipeline name among ``candidates`` whose purge goes to ``wanted`` first."""
    rules = PurgeRules(
        by=PurgeBy.SUPERVISOR, here="-", here_reaches=False, answer_secs=300, retry_secs=60
    )
    for name in candidates:
        order = PurgeOrder(pipeline=name, root="/", cause=PurgeCause.KILL, requested=0, epoch=1)
        step = next_step(order, [], live=live, now=0, rules=rules)
        if step.order is not None and step.order.supervisor == wanted:
            return name
    raise AssertionError(f"no name of {candidates} goes to {wanted} first")


@needs_mounts
def test_a_purge_a_supervisor_fails_is_handed_to_another_that_can(
    cluster: PipelineCluster, root: Path
) -> None:
    name = first_choice(["s1", "s2"], [f"etl{n}" for n in range(20)], "s1")
    checkpoints = killed_with_checkpoints(cluster, root, name)
    cluster.add_supervisor("s1", command_prefix=read_only(root))  # chosen first, cannot
    cluster.add_supervisor("s2")

    cluster.client.kill(name, wait_secs=0, purge=True)
    done = cluster.client.wait_purged(name, timeout=60)

    assert done.done and not checkpoints.exists()
    s1_log = cluster.supervisors["s1"].log_path.read_text()
    s2_log = cluster.supervisors["s2"].log_path.read_text()
    assert f"event=purge_failed pipeline={name} attempt=1 supervisor=s1" in s1_log
    assert f"event=purge_done pipeline={name} attempt=2 supervisor=s2" in s2_log


@needs_mounts
def test_a_purge_handed_to_a_supervisor_that_dies_is_done_by_another(
    cluster: PipelineCluster, root: Path
) -> None:
    name = first_choice(["s1", "s2"], [f"etl{n}" for n in range(20)], "s1")
    checkpoints = killed_with_checkpoints(cluster, root, name)
    cluster.add_supervisor("s1")
    cluster.add_supervisor("s2")
    cluster.supervisors["s1"].signal(signal.SIGSTOP)  # frozen: its session expires
    try:
        cluster.client.kill(name, wait_secs=0, purge=True)
        done = cluster.client.wait_purged(name, timeout=60)
    finally:
        cluster.supervisors["s1"].signal(signal.SIGCONT)

    assert done.done and not checkpoints.exists()
    s2_log = cluster.supervisors["s2"].log_path.read_text()
    assert f"event=purge_done pipeline={name}" in s2_log and "supervisor=s2" in s2_log


def test_a_purger_deletes_nothing_for_an_order_handed_elsewhere_since_its_snapshot(
    zk_hosts: str, tmp_path: Path
) -> None:
    root = tmp_path / "checkpoints"
    (root / "etl").mkdir(parents=True)
    paths = ClusterPaths("/stratus")
    seen = PurgeOrder(
        pipeline="etl", root=str(root), cause=PurgeCause.KILL, requested=1.0, epoch=1,
        attempt=1, supervisor="s1",
    )  # fmt: skip
    with kazoo_client(zk_hosts) as client:
        client.create(paths.purge("etl"), seen.encode(), makepath=True)
        purger = CheckpointPurger(client, paths, "s1", checkpoint_root=str(root), privileged=None)
        handed_on = seen.model_copy(update={"attempt": 2, "supervisor": "s2"})
        client.set(paths.purge("etl"), handed_on.encode())

        purger._carry_out(seen)  # the order as an older snapshot had it
        assert (root / "etl").is_dir()  # the other supervisor's (and maybe a new pipeline's)

        client.set(paths.purge("etl"), seen.model_copy(update={"attempt": 3}).encode())
        purger._carry_out(seen.model_copy(update={"attempt": 3}))
        assert not (root / "etl").exists()  # still its own: deleted
