"""The nimbus's per-pipeline series and the stream metrics, as pure logic: the rings stay
bounded however many points and pipelines come, a batch is counted once, the worker's
figures come out of Spark's progress as Spark words them, and a failover's leaderless gap
starts at the previous leader's last sign of life."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from stratus.api.errors import UnavailableError
from stratus.api.records import (
    Assignment,
    LeaderTerm,
    PipelineRecord,
    PipelineStatus,
    PipelineWorkers,
    QueryProgress,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.nimbus.leadership.leader_terms import last_sign_of_life
from stratus.nimbus.scheduling.batch_metrics import BatchMetrics
from stratus.nimbus.scheduling.pipeline_metrics import ObservedRound
from stratus.nimbus.scheduling.pipeline_series import PipelineSeriesStore, point_of
from stratus.nimbus.scheduling.series_sampler import SeriesSampler, current_workers
from stratus.worker.query_progress import QueryTracker, batch_duration_secs, watermark_lag_secs


class Ticks:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def beat(name: str, *, batch: int = 1, secs: float = 1.5, at: float = 100.0) -> WorkerHeartbeat:
    query = QueryProgress(
        id="q",
        name="counts",
        batch_id=batch,
        input_rows_per_second=20.0,
        processed_rows_per_second=15.0,
        batch_duration_secs=secs,
        trigger_interval_secs=2.0,
        watermark_lag_secs=12.5,
    )
    return WorkerHeartbeat(
        pipeline=name,
        supervisor="s1",
        epoch=1,
        generation=1,
        state=WorkerState.RUNNING,
        time=at,
        queries=[query],
    )


def record(name: str) -> PipelineRecord:
    return PipelineRecord(
        name=name,
        status=PipelineStatus.ACTIVE,
        digest="d" * 64,
        size_bytes=1,
        submitted=1.0,
        updated=1.0,
        epoch=1,
    )


def test_a_ring_keeps_a_fixed_number_of_points_one_per_step() -> None:
    clock = Ticks()
    store = PipelineSeriesStore(step_secs=10.0, points=5, clock=clock)
    for second in range(0, 200):  # a round a second, for 200 s
        clock.now = float(second)
        store.observe({"etl": beat("etl", at=1000.0 + second)}, ["etl"])
    points = store.of("etl").points
    assert len(points) == 5  # 20 steps seen, the newest 5 kept
    assert [p.at for p in points] == [1150.0, 1160.0, 1170.0, 1180.0, 1190.0]


def test_a_heartbeat_seen_already_adds_no_point() -> None:
    clock = Ticks()
    store = PipelineSeriesStore(step_secs=10.0, points=5, clock=clock)
    for second in range(0, 60, 10):  # a worker that stopped writing: its last beat, again
        clock.now = float(second)
        store.observe({"etl": beat("etl", at=1000.0)}, ["etl"])
    assert [p.at for p in store.of("etl").points] == [1000.0]


def test_memory_stays_bounded_as_pipelines_grow_and_go() -> None:
    clock = Ticks()
    store = PipelineSeriesStore(step_secs=1.0, points=3, max_pipelines=10, clock=clock)
    names = [f"p{i:02d}" for i in range(50)]
    for step in range(20):
        clock.now = float(step)
        store.observe({n: beat(n, at=100.0 + step) for n in names}, names)
    assert store.tracked() == 10  # the cap
    assert sum(len(store.of(n).points) for n in names) == 10 * 3
    assert store.of("p49").points == []  # past the cap: no series

    store.observe({}, names[5:])  # five pipelines gone: their series dropped at once
    assert store.tracked() == 5
    assert store.of("p00").points == []


def test_a_point_is_the_sum_of_rates_and_the_worst_batch_and_watermark() -> None:
    slow = beat("etl", secs=29.0)
    two = slow.model_copy(
        update={
            "queries": [
                *slow.queries,
                beat("etl", secs=0.5).queries[0].model_copy(update={"id": "r"}),
            ]
        }
    )
    point = point_of(two)
    assert point is not None
    assert (point.input_rows_per_second, point.processed_rows_per_second) == (40.0, 30.0)
    assert (point.batch_duration_secs, point.trigger_interval_secs) == (29.0, 2.0)
    assert point_of(two.model_copy(update={"state": WorkerState.STARTING})) is None


def test_a_heartbeat_from_an_older_worker_without_the_new_fields_still_reads() -> None:
    old = '{"name": "counts", "id": "q", "batch_id": 3, "rows_total": 9}'
    query = QueryProgress.model_validate_json(old)
    assert query.batch_duration_secs is None and query.watermark_lag_secs is None
    assert "batch_duration_secs" not in query.model_dump_json()  # written back as it was
    point = point_of(beat("etl").model_copy(update={"queries": [query]}))
    assert point is not None and point.batch_duration_secs is None


def test_the_batch_histogram_counts_each_batch_once_and_forgets_removed_pipelines() -> None:
    metrics = BatchMetrics(leading_epoch=lambda: 3)
    registry = CollectorRegistry()
    registry.register(metrics)
    pipelines = {"etl": record("etl")}
    for batch, secs in [(1, 0.4), (1, 0.4), (2, 3.0), (3, 29.0)]:
        metrics.observe(
            ObservedRound(3, pipelines, {"etl": beat("etl", batch=batch, secs=secs)}, {})
        )
    found = {
        (s.name, s.labels.get("le")): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
        if s.labels.get("pipeline") == "etl"
    }
    assert found[("stratus_pipeline_batch_duration_seconds_count", None)] == 3.0
    assert found[("stratus_pipeline_batch_duration_seconds_sum", None)] == 32.4
    assert found[("stratus_pipeline_batch_duration_seconds_bucket", "0.5")] == 1.0
    assert found[("stratus_pipeline_batch_duration_seconds_bucket", "30.0")] == 3.0
    assert found[("stratus_pipeline_trigger_interval_seconds", None)] == 2.0
    assert found[("stratus_pipeline_watermark_lag_seconds", None)] == 12.5

    metrics.observe(ObservedRound(3, {}, {}, {}))
    assert b"etl" not in generate_latest(registry)


def test_a_standby_shows_no_batch_series() -> None:
    metrics = BatchMetrics(leading_epoch=lambda: None)
    registry = CollectorRegistry()
    registry.register(metrics)
    metrics.observe(ObservedRound(3, {"etl": record("etl")}, {"etl": beat("etl")}, {}))
    assert b"stratus_pipeline_batch_duration_seconds" not in generate_latest(registry)


def test_the_worker_reads_duration_and_watermark_as_spark_reports_them() -> None:
    assert batch_duration_secs({"triggerExecution": 2500, "addBatch": 2000}) == 2.5
    assert batch_duration_secs({}) is None
    start = "2026-11-29T12:00:30.000Z"
    assert watermark_lag_secs(start, {"watermark": "2026-11-29T12:00:10.000Z"}) == 20.0
    assert watermark_lag_secs(start, {"watermark": "1970-01-01T00:00:00.000Z"}) is None
    assert watermark_lag_secs(start, {}) is None

    tracker = QueryTracker(trigger_interval_secs=2.0)
    tracker.progressed(
        "q", name="counts", batch_id=0, num_input_rows=5, input_rows_per_second=1.0,
        processed_rows_per_second=1.0, batch_duration_secs=29.0, watermark_lag_secs=10.0,
    )  # fmt: skip
    [progress] = tracker.snapshot()
    assert (progress.batch_duration_secs, progress.trigger_interval_secs) == (29.0, 2.0)
    assert progress.watermark_lag_secs == 10.0


def test_the_first_batch_of_each_query_is_logged_with_its_phases(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="stratus.worker.query_progress")
    tracker = QueryTracker()
    for batch_id in (57, 58):  # a restarted query's first batch, then the next
        tracker.progressed(
            "q", name="counts", batch_id=batch_id, num_input_rows=0, input_rows_per_second=0.0,
            processed_rows_per_second=0.0,
            phases={"triggerExecution": 4646, "addBatch": 3100, "queryPlanning": 900},
        )  # fmt: skip
    assert [r.getMessage() for r in caplog.records] == [
        "event=first_batch query=counts batch_id=57 rows=0 "
        "phases_ms=addBatch:3100,queryPlanning:900,triggerExecution:4646"
    ]


def term(*, ended_at: float | None, timeout: float | None = 9.0) -> LeaderTerm:
    return LeaderTerm(
        epoch=4, nimbus="n1:6627", started_at=1.0, ended_at=ended_at, session_timeout_secs=timeout
    )


def test_a_killed_leaders_gap_starts_one_session_timeout_before_its_slot_was_freed() -> None:
    assert last_sign_of_life(100.0, term(ended_at=None), registered=False) == 91.0


def test_a_leader_that_stepped_down_or_still_lives_was_alive_until_its_slot_was_freed() -> None:
    assert last_sign_of_life(100.0, term(ended_at=50.0), registered=False) == 100.0
    assert last_sign_of_life(100.0, term(ended_at=None), registered=True) == 100.0


def test_a_term_recorded_without_its_timeout_counts_from_the_slots_release() -> None:
    assert last_sign_of_life(100.0, term(ended_at=None, timeout=None), registered=False) == 100.0


def test_a_standby_charts_the_worker_of_the_assignment_only() -> None:
    assignment = Assignment(
        pipeline="etl", supervisor="s1", epoch=1, generation=2, digest="d", size_bytes=1, assigned=1
    )
    current = beat("etl", at=2.0).model_copy(update={"generation": 2})
    moved = beat("etl", at=3.0).model_copy(update={"supervisor": "s0", "generation": 2})
    placed = {
        "etl": PipelineWorkers(pipeline="etl", assignment=assignment, workers=[moved, current]),
        "idle": PipelineWorkers(pipeline="idle", assignment=None, workers=[beat("idle")]),
    }
    assert current_workers(placed) == {"etl": current}
    before = PipelineWorkers(pipeline="etl", assignment=assignment, workers=[beat("etl")])
    assert current_workers({"etl": before}) == {}  # s1's run of generation 1, before a rebalance


def test_a_standbys_failed_read_leaves_a_hole_and_the_sampler_goes_on() -> None:
    store = PipelineSeriesStore(step_secs=0.5)
    reads = iter([UnavailableError("the heartbeat store is out of reach"), RuntimeError("bug")])

    def read() -> dict[str, PipelineWorkers]:
        raise next(reads)

    sampler = SeriesSampler(store, read, dict, leading=lambda: False)
    sampler.sample()  # UnavailableError: logged, nothing charted
    sampler._sample_safely()  # anything else: logged too, the thread would go on
    assert store.tracked() == 0
