"""A hot pipeline's standby worker as operators see it: the join of the leader's placement with
its supervisor's report (pure), and what ``stratus status``, ``stratus list -o wide`` and
``stratus cluster`` print of a READY, a REFUSED and an unplaced standby worker.

The nimbuses are the scripted fakes of ``test_client_unit`` behind httpx.MockTransport; the
same views on real nimbus processes are ``tests/cluster/test_standby_view.py``.
"""

from __future__ import annotations

import io
from typing import Any

import httpx
from click.testing import CliRunner
from rich.console import Console

from stratus.api.overview import WorkersOverview
from stratus.api.records import (
    Assignment,
    ClusterSummary,
    LeaderInfo,
    PipelineList,
    PipelineStatus,
    PipelineWorkers,
    SupervisorHeartbeat,
    SupervisorSummary,
    WarmMemory,
)
from stratus.api.redaction import redact_workers
from stratus.api.standby_workers import (
    StandbyWorkerBeat,
    StandbyWorkerPlacement,
    StandbyWorkerRefusal,
    StandbyWorkerState,
    StandbyWorkerView,
)
from stratus.cli.cluster_view import print_cluster
from stratus.cli.main import main
from stratus.cli.output import when
from stratus.nimbus.scheduling.placement import standby_worker_view
from tests.unit.test_client_unit import A, Answer, Cluster, Nimbus, ok, record

SEEDS = ["-c", f"nimbus.seeds={A}", "-c", "client.retry.deadline.secs=0.05"]
SINCE = 1_700_000_100.0
SECRET = "hunter2-not-for-eyes"
HOT = {"pipeline.standby": "hot", "pipeline.env.DB_PASSWORD": SECRET}

READY = StandbyWorkerView(
    supervisor="s2",
    host="h2",
    generation=0,
    placed=SINCE - 30,
    state=StandbyWorkerState.READY,
    since=SINCE,
    pid=4711,
    rss_mb=702,
)
REFUSED = StandbyWorkerView(
    supervisor="s3",
    host="h3",
    generation=0,
    placed=SINCE - 30,
    state=StandbyWorkerState.REFUSED,
    since=SINCE,
    error=f"another standby worker (768 MiB) would pass the spare budget; DB_PASSWORD={SECRET}",
)
UNPLACED = StandbyWorkerView(
    supervisor=None,
    unplaced_because="no supervisor fits: runs its active worker (1), no free slot (2)",
    generation=0,
    placed=SINCE,
    refusals=[
        StandbyWorkerRefusal(supervisor="s3", reason=f"refused: token={SECRET} here", at=SINCE)
    ],
)


def run(cluster: Cluster, *args: str) -> Any:
    result = CliRunner().invoke(main, [*args, *SEEDS], obj=httpx.MockTransport(cluster))
    assert result.exit_code == 0, result.output
    return result.stdout


def workers(name: str, standby: StandbyWorkerView | None) -> PipelineWorkers:
    assignment = Assignment(
        pipeline=name,
        supervisor="s1",
        epoch=3,
        digest="ab" * 32,
        size_bytes=2048,
        generation=0,
        assigned=SINCE,
    )
    return PipelineWorkers(pipeline=name, assignment=assignment, workers=[], standby_worker=standby)


def status_lines(standby: StandbyWorkerView | None, conf: dict[str, Any]) -> list[str]:
    cluster = Cluster()
    answers: list[Answer] = [ok(record("orders", conf=conf)), ok(workers("orders", standby))]
    cluster.nimbuses[A] = Nimbus(answers=answers)
    output: str = run(cluster, "status", "orders")
    return output.splitlines()


# ---------------------------------------------------------------------- stratus status


def test_status_shows_a_ready_standby_worker_where_since_when_and_its_memory():
    lines = status_lines(READY, HOT)

    assert f"standby worker: s2 (h2) READY since {when(SINCE)}, 702.0 MiB" in lines


def test_status_shows_a_refused_standby_worker_with_its_reason_redacted():
    lines = status_lines(REFUSED, HOT)

    (line,) = [line for line in lines if line.startswith("standby worker:")]
    assert line == (
        f"standby worker: s3 (h3) REFUSED since {when(SINCE)}: another standby worker "
        "(768 MiB) would pass the spare budget; DB_PASSWORD=***"
    )


def test_status_shows_why_a_standby_worker_is_unplaced_and_its_newest_refusal():
    lines = status_lines(UNPLACED, HOT)

    assert (
        "standby worker: none (no supervisor fits: runs its active worker (1), no free slot (2))"
    ) in lines
    assert f"standby worker refused by s3 at {when(SINCE)}: refused: token=*** here" in lines


def test_status_of_a_placed_standby_worker_not_reported_yet_says_so():
    placed = StandbyWorkerView(supervisor="s2", generation=0, placed=SINCE)

    lines = status_lines(placed, HOT)

    assert f"standby worker: s2 placed {when(SINCE)}, not reported by s2 yet" in lines


def test_status_of_a_pipeline_that_wants_no_standby_worker_prints_no_such_line():
    lines = status_lines(None, {})

    assert not any(line.startswith("standby worker") for line in lines)


# ---------------------------------------------------------------------- list, cluster


def test_list_wide_shows_each_pipelines_standby_worker_and_a_dash_for_none_wanted():
    names = ["ready", "refused", "unplaced", "plain"]
    overview = WorkersOverview(
        pipelines=[
            workers("ready", READY),
            workers("refused", REFUSED),
            workers("unplaced", UNPLACED),
            workers("plain", None),
        ]
    )
    records = PipelineList(pipelines=[record(name) for name in names])
    cluster = Cluster()
    cluster.nimbuses[A] = Nimbus(answers=[ok(overview), ok(records)])

    lines = [line.split("\t") for line in run(cluster, "list", "-o", "wide").splitlines()]

    header = lines[1]
    assert header[-1] == "standby worker"  # after every column it had: none moves
    cells = {line[0]: line[header.index("standby worker")] for line in lines[2:]}
    assert cells == {"ready": "s2 READY", "refused": "s3 REFUSED", "unplaced": "none", "plain": "-"}


def test_the_cluster_shows_each_supervisors_standby_workers_where_it_has_any():
    def summary(sid: str, standby: int, mb: int) -> SupervisorSummary:
        warm = WarmMemory(machine_mb=8192, budget_mb=1536, standby_workers=standby, standby_mb=mb)
        return SupervisorSummary(id=sid, host=f"h-{sid}", slots=2, warm=warm)

    cluster = ClusterSummary(
        nimbuses=[],
        supervisors=[summary("s1", 0, 0), summary("s2", 2, 1404), SupervisorSummary(id="s3")],
        pipelines=[],
        leader=LeaderInfo(address=None, epoch=None),
    )
    out = io.StringIO()

    print_cluster(Console(file=out, width=200), cluster)

    lines = [line.split("\t") for line in out.getvalue().splitlines()]
    header = next(line for line in lines if line[0] == "supervisor")
    column = header.index("standby workers")
    cells = {line[0]: line[column] for line in lines if line[0] in ("s1", "s2", "s3")}
    assert cells == {"s1": "-", "s2": "2 (1.4 GiB)", "s3": "-"}


# ---------------------------------------------------------------------- the join


def placement(**changes: Any) -> StandbyWorkerPlacement:
    fields: dict[str, Any] = {
        "pipeline": "orders",
        "supervisor": "s2",
        "epoch": 3,
        "generation": 4,
        "digest": "ab" * 32,
        "size_bytes": 2048,
        "placed": SINCE - 30,
        "conf": {"pipeline.env.DB_PASSWORD": SECRET},
    }
    return StandbyWorkerPlacement.model_validate({**fields, **changes})


def beat(generation: int, state: StandbyWorkerState) -> StandbyWorkerBeat:
    return StandbyWorkerBeat(
        pipeline="orders",
        generation=generation,
        digest="ab" * 32,
        state=state,
        since=SINCE,
        pid=4711,
        rss_mb=702,
    )


def test_the_join_takes_the_beat_of_the_placements_generation_and_its_supervisors_host():
    heartbeat = SupervisorHeartbeat(
        id="s2",
        time=SINCE,
        slots=2,
        standby_workers=[beat(3, StandbyWorkerState.READY), beat(4, StandbyWorkerState.STARTING)],
    )
    hosts = {"s2": SupervisorSummary(id="s2", host="h2")}

    shown = standby_worker_view(record("orders", conf=HOT), placement(), {"s2": heartbeat}, hosts)

    assert shown is not None
    assert (shown.supervisor, shown.host, shown.generation) == ("s2", "h2", 4)
    assert (shown.state, shown.since, shown.rss_mb) == (StandbyWorkerState.STARTING, SINCE, 702)
    assert SECRET not in shown.model_dump_json()  # the placement's conf is not shown


def test_the_join_shows_no_state_until_the_supervisor_reports_the_placements_generation():
    old = SupervisorHeartbeat(
        id="s2", time=SINCE, slots=2, standby_workers=[beat(3, StandbyWorkerState.READY)]
    )

    shown = standby_worker_view(record("orders", conf=HOT), placement(), {"s2": old}, {})

    assert shown is not None and shown.supervisor == "s2"
    assert (shown.state, shown.host) == (None, None)


def test_the_join_is_none_for_a_pipeline_that_wants_none_and_why_for_one_not_placed_yet():
    assert standby_worker_view(record("plain"), None, {}, {}) is None
    assert standby_worker_view(None, None, {}, {}) is None

    active = standby_worker_view(record("orders", conf=HOT), None, {}, {})
    inactive = standby_worker_view(
        record("orders", conf=HOT, status=PipelineStatus.INACTIVE), None, {}, {}
    )

    assert active is not None and active.supervisor is None
    assert active.unplaced_because == "not placed yet: the leader places it in its next round"
    assert (
        inactive is not None and inactive.unplaced_because == "none while the pipeline is INACTIVE"
    )


def test_a_nimbus_redacts_the_standby_workers_error_and_refusals_against_the_conf():
    leaky = StandbyWorkerView(
        supervisor="s3",
        state=StandbyWorkerState.FAILED,
        error=f"Traceback: {SECRET} refused",
        refusals=[StandbyWorkerRefusal(supervisor="s2", reason=f"failed: {SECRET}", at=SINCE)],
    )

    shown = redact_workers(workers("orders", leaky), HOT).standby_worker

    assert shown is not None
    assert shown.error == "Traceback: *** refused"
    assert shown.refusals[0].reason == "failed: ***"
