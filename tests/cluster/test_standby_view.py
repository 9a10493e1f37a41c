"""What operators see of a hot pipeline's standby worker, on two real nimbus processes (the
leader and a standby nimbus) and real ZooKeeper: the leader places the standby worker in its
round, and every nimbus answers it from its watched view of ``standby-workers/`` joined with
the heartbeat store.

The supervisors are stand-ins: registrations written by the test (``s-a`` on host ``h1``,
``s-b`` on ``h2``) and, for ``s-b``, the heartbeat a supervisor running the standby worker
sends (its ``standby_workers``), so no Spark starts. A long supervisor timeout keeps the
leader from judging the silent stand-ins dead while the test runs.

What is proved, on every nimbus and through the CLI: a hot pipeline with no other supervisor
than its active worker's has none, and says why; placed on ``s-b``, it shows ``s-b``'s host,
then READY, since when and its memory, as ``s-b`` reports it; ``s-b``'s refusal moves it
away, kept as a refusal whose reason is redacted; ``stratus list -o wide`` and ``stratus
cluster`` show it, and ``GET /api/v1/supervisors`` the registration's beat lease. Then, in
a real browser, the web UI shows the same on a standby nimbus's pages.

The tests share one cluster, in this order: the browser's starts where the first ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from stratus.api.overview import SupervisorList
from stratus.api.records import PipelineWorkers, SupervisorHeartbeat, SupervisorSummary, WarmMemory
from stratus.api.standby_workers import (
    BeatLease,
    StandbyWorkerBeat,
    StandbyWorkerPlacement,
    StandbyWorkerState,
)
from stratus.cli.main import main
from stratus.cli.output import when
from stratus.client import NimbusClient
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.zk.paths import ClusterPaths
from stratus.zk.server import ZooKeeperServer
from tests.harness.browser import VIEWPORT, chromium, require_chromium
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.xdist_group("standby-view")

WAIT_SECS = 30.0
SECRET = "hunter2-not-for-eyes"
HOT_CONF = {"pipeline.standby": "hot", "pipeline.env.DB_PASSWORD": SECRET}
LEASE = BeatLease(lease_secs=0.8, stop_secs=0.1, poll_secs=0.02)


@dataclass
class Stand:
    nimbuses: NimbusCluster
    client: NimbusClient
    zk: KazooClient
    paths: ClusterPaths
    board: HeartbeatBoard


@pytest.fixture(scope="module")
def stand(zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stand]:
    logs = tmp_path_factory.mktemp("standby-view")
    extra = [
        "-c", "nimbus.supervisor.timeout.secs=600",
        "-c", "nimbus.monitor.freq.secs=0.5",
        "-c", "nimbus.standby.place.wait.secs=0",  # no worker here commits a batch
    ]  # fmt: skip
    with nimbus_cluster(
        zk_server.connect_string, logs, "standby-view", size=2, extra=extra
    ) as nimbuses:
        nimbuses.wait_for_agreed_leader()
        client = NimbusClient(nimbuses.seeds, retry_deadline=WAIT_SECS)
        with kazoo_client(zk_server.connect_string) as zk:
            paths = ClusterPaths(nimbuses.root)
            board = HeartbeatBoard(ZooKeeperStateStore(zk, paths.heartbeats))
            try:
                yield Stand(nimbuses, client, zk, paths, board)
            finally:
                client.close()


def register(stand: Stand, sid: str, host: str, **fields: Any) -> None:
    summary = SupervisorSummary(id=sid, host=host, slots=2, beat_lease=LEASE, **fields)
    stand.zk.create(stand.paths.supervisor(sid), summary.encode(), ephemeral=True)


def every_nimbus(stand: Stand, name: str) -> list[PipelineWorkers]:
    return [
        PipelineWorkers.model_validate_json(
            httpx.get(f"{nimbus.url}/api/v1/pipelines/{name}/workers").content
        )
        for nimbus in stand.nimbuses.nimbuses
    ]


def await_every_nimbus(stand: Stand, name: str, shows: Any, what: str) -> list[PipelineWorkers]:
    seen: list[PipelineWorkers] = []

    def agreed() -> bool:
        seen[:] = every_nimbus(stand, name)
        return all(shows(w.standby_worker) for w in seen)

    wait_until(agreed, WAIT_SECS, f"every nimbus to show {name}'s standby worker {what}")
    return seen


def cli(stand: Stand, *args: str) -> str:
    # the standby nimbus first: it answers reads as the leader would
    leader = stand.nimbuses.wait_for_agreed_leader()
    seeds = sorted(stand.nimbuses.seeds, key=lambda address: address == leader)
    result = CliRunner().invoke(main, [*args, "-c", f"nimbus.seeds={','.join(seeds)}"])
    assert result.exit_code == 0, result.output
    return result.stdout


def rows(output: str, title: str) -> list[list[str]]:
    lines = output.splitlines()
    start = lines.index(f"# {title}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("# ")), len(lines))
    return [line.split("\t") for line in lines[start:end] if "\t" in line]


def test_a_standby_worker_as_every_nimbus_and_the_cli_show_it(stand):
    register(stand, "s-a", "h1")
    stand.client.submit("orders", valid_package("orders"), HOT_CONF)
    stand.client.submit("plain", valid_package("plain"), {})

    # only the supervisor of its active worker: none, and why
    unplaced = await_every_nimbus(
        stand, "orders", lambda s: s is not None and s.unplaced_because, "unplaced"
    )
    for workers in unplaced:
        assert workers.assignment is not None and workers.assignment.supervisor == "s-a"
        assert workers.standby_worker is not None and workers.standby_worker.supervisor is None
        assert "runs its active worker (1)" in (workers.standby_worker.unplaced_because or "")
    assert all(w.standby_worker is None for w in every_nimbus(stand, "plain"))  # wants none
    status = cli(stand, "status", "orders").splitlines()
    assert "standby worker: none (no supervisor fits: runs its active worker (1))" in status
    assert not any(line.startswith("standby worker") for line in cli(stand, "status", "plain"))

    # placed on another host's supervisor, not reported yet, then READY as s-b reports it
    warm = WarmMemory(
        machine_mb=8192, budget_mb=1536, used_mb=702, standby_workers=1, standby_mb=702
    )
    register(stand, "s-b", "h2", warm=warm)
    placed = await_every_nimbus(
        stand, "orders", lambda s: s is not None and s.supervisor == "s-b", "on s-b"
    )
    assert all(w.standby_worker is not None and w.standby_worker.host == "h2" for w in placed)
    assert all(w.standby_worker is not None and w.standby_worker.state is None for w in placed)
    placement = StandbyWorkerPlacement.model_validate_json(
        stand.zk.get(stand.paths.standby_worker("orders"))[0]
    )
    since = time.time()
    stand.board.put_supervisor(
        heartbeat("s-b", standby_beat(placement, StandbyWorkerState.READY, since))
    )
    ready = await_every_nimbus(
        stand, "orders", lambda s: s is not None and s.state is StandbyWorkerState.READY, "READY"
    )
    for workers in ready:
        shown = workers.standby_worker
        assert shown is not None
        assert (shown.rss_mb, shown.pid, shown.since) == (702, 4711, since)
        assert shown.generation == placement.generation
    status = cli(stand, "status", "orders").splitlines()
    assert f"standby worker: s-b (h2) READY since {when(since)}, 702.0 MiB" in status

    listed = rows(cli(stand, "list", "-o", "wide"), "pipelines")
    column = listed[0].index("standby worker")
    assert {row[0]: row[column] for row in listed[1:]} == {"orders": "s-b READY", "plain": "-"}
    supervisors = rows(cli(stand, "cluster"), "supervisors")
    column = supervisors[0].index("standby workers")
    assert {row[0]: row[column] for row in supervisors[1:]} == {"s-a": "-", "s-b": "1 (702.0 MiB)"}
    for nimbus in stand.nimbuses.nimbuses:
        answer = httpx.get(f"{nimbus.url}/api/v1/supervisors").content
        found = {s.id: s for s in SupervisorList.model_validate_json(answer).supervisors}
        assert found["s-b"].beat_lease == LEASE
        assert found["s-b"].warm is not None and found["s-b"].warm.standby_workers == 1

    # s-b refuses it: the leader moves it away, to none, and keeps the refusal, redacted
    error = f"cannot start: DB_PASSWORD={SECRET}"
    stand.board.put_supervisor(
        heartbeat("s-b", standby_beat(placement, StandbyWorkerState.REFUSED, time.time(), error))
    )
    refused = await_every_nimbus(
        stand, "orders", lambda s: s is not None and s.refusals, "refused by s-b"
    )
    for workers in refused:
        shown = workers.standby_worker
        assert shown is not None and shown.supervisor is None
        assert shown.refusals[0].supervisor == "s-b"
        assert shown.refusals[0].reason.startswith("refused: cannot start")
        assert SECRET not in workers.model_dump_json()
    printed = cli(stand, "status", "orders")
    assert SECRET not in printed
    assert "standby worker refused by s-b at " in printed
    assert "refused it in the last 10 min (1)" in printed


@pytest.mark.browser
def test_the_web_ui_shows_the_standby_worker_and_each_supervisors_standby_workers(stand):
    # where the first test left it: unplaced, refused by s-b, which still registers one
    await_every_nimbus(stand, "orders", lambda s: s is not None and s.refusals, "refused")
    leader = stand.nimbuses.wait_for_agreed_leader()
    standby = next(n for n in stand.nimbuses.nimbuses if n.address != leader)
    with chromium(require_chromium()) as browser:
        context = browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(WAIT_SECS * 1000)
        page = context.new_page()
        page.goto(f"{standby.url}/#/pipelines/orders")
        shown = page.wait_for_selector("p#standby-worker")
        assert shown.inner_text().startswith("none: no supervisor fits: runs its active worker")
        page.wait_for_selector("#standby-refusals td:text-is('s-b')")
        assert SECRET not in page.content()
        page.goto(f"{standby.url}/#/")
        row = page.wait_for_selector("#supervisors tr:has(td:text-is('s-b'))")
        assert row.query_selector("td.standby").inner_text() == "1 (702 MiB)"
        context.close()


def heartbeat(sid: str, *beats: StandbyWorkerBeat) -> SupervisorHeartbeat:
    return SupervisorHeartbeat(id=sid, time=time.time(), slots=2, standby_workers=list(beats))


def standby_beat(
    placement: StandbyWorkerPlacement,
    state: StandbyWorkerState,
    since: float,
    error: str | None = None,
) -> StandbyWorkerBeat:
    return StandbyWorkerBeat(
        pipeline=placement.pipeline,
        generation=placement.generation,
        digest=placement.digest,
        state=state,
        since=since,
        pid=4711,
        rss_mb=702,
        error=error,
    )
