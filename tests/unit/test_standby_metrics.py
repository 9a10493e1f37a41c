"""The hot standby workers' metrics, from injected state: the leader's census of a round's read,
the promotions and refusals it counts, the failover lane's phi, the supervisor's standby
workers and beat lease, and docs/metrics.md naming every metric the two daemons expose.

Pure logic: records, placements and heartbeats are built here (the helpers of
``test_promotion_plan``); the live proof is tests/cluster/test_hot_standby.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from stratus.api.records import MIB, PipelineStatus, WarmMemory
from stratus.api.standby_workers import StandbyWorkerState
from stratus.coordination.leadership import Leadership
from stratus.ha.protocol import HAState
from stratus.nimbus.duties.standby_round import RoundRead, StandbyRound
from stratus.nimbus.duty_wiring import declare_failover_metrics
from stratus.nimbus.failover.promotion_plan import How, PromotionRefusal, Refusal
from stratus.nimbus.metrics import NimbusMetrics
from stratus.nimbus.scheduling.standby_census import CENSUS_STATES, StandbyCensus, standby_census
from stratus.nimbus.settings import StandbySettings
from stratus.supervisor.metrics import SupervisorMetrics
from stratus.supervisor.warm_memory import Machine
from stratus.worker.lease_file import write_lease
from tests.harness.supervisor_fakes import FakeClock
from tests.unit.test_promotion_plan import (
    OTHER_DIGEST,
    assignment,
    heartbeat,
    placement,
    record,
    standby_beat,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(registry: CollectorRegistry) -> Samples:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def nimbus_metrics() -> NimbusMetrics:
    return NimbusMetrics(
        is_leader=lambda: True,
        epoch=lambda: 3,
        zookeeper_connected=lambda: True,
        code_sync_rounds=lambda: 1,
        code_missing=lambda: 0,
        ha_state=lambda: HAState.ACTIVE,
    )


# ---------------------------------------------------------------------- the leader's census


def test_the_census_counts_placements_by_state_and_the_hot_pipelines_covered() -> None:
    orders, billing, report, lonely = (record(n) for n in ("orders", "billing", "report", "lonely"))
    stale = record("stale", rebalances=3)  # rebalanced: its standby worker is ready for older code
    web = record("web", standby=None)  # wants none
    paused = record("paused", status=PipelineStatus.INACTIVE)  # hot, but not running
    ready, starting = placement(orders, "s2"), placement(billing, "s3")
    unreported, nowhere = placement(report, "s4"), placement(lonely, None)
    older = placement(stale, "s2", generation=stale.generation - 1)
    census = standby_census(
        {r.name: r for r in (orders, billing, report, lonely, stale, web, paused)},
        {
            "orders": (ready, 1),
            "billing": (starting, 1),
            "report": (unreported, 1),
            "lonely": (nowhere, 1),
            "stale": (older, 1),
            "broken": (None, 1),  # a placement that does not decode: in no state
        },
        {
            "s2": heartbeat("s2", standby_beat(ready), standby_beat(older)),
            "s3": heartbeat("s3", standby_beat(starting, StandbyWorkerState.STARTING)),
            "s4": heartbeat("s4"),  # reports nothing of "report" yet
        },
    )
    assert census.states == {
        "fetching": 0,
        "starting": 1,
        "ready": 2,
        "refused": 0,
        "failed": 0,
        "unreported": 1,
        "unplaced": 1,
    }
    assert set(census.states) == set(CENSUS_STATES)
    assert (census.hot, census.covered) == (5, 1)  # only "orders" would be promoted now
    assert census.coverage == 0.2


def test_a_standby_worker_ready_for_other_code_does_not_cover_its_pipeline() -> None:
    orders = record("orders")
    placed = placement(orders, "s2", digest=OTHER_DIGEST)  # placed before an update
    census = standby_census(
        {"orders": orders}, {"orders": (placed, 1)}, {"s2": heartbeat("s2", standby_beat(placed))}
    )
    assert census.states["ready"] == 1
    assert (census.hot, census.covered) == (1, 0)


def test_with_no_hot_pipeline_the_coverage_is_whole() -> None:
    census = standby_census({"web": record("web", standby=None)}, {}, {})
    assert (census.hot, census.covered, census.coverage) == (0, 0, 1.0)


# ---------------------------------------------------------------------- the nimbus's metrics


def test_promotions_and_refusals_show_every_verdict_and_reason_and_the_phi_of_each_supervisor() -> (
    None
):
    metrics = nimbus_metrics()
    phi = {"s1": 0.4, "s2": 9.5}
    metrics.declare_failover(
        hows=[how.value for how in How], reasons=[r.value for r in Refusal], phi=lambda: phi
    )
    metrics.promotions.labels("floor").inc()
    metrics.promotion_refusals.labels("not_ready").inc()
    seen = samples(metrics.registry)
    for how in How:
        expected = 1.0 if how is How.FLOOR else 0.0
        assert seen[("stratus_nimbus_promotions_total", (("how", how.value),))] == expected
    for reason in Refusal:
        expected = 1.0 if reason is Refusal.NOT_READY else 0.0
        key = ("stratus_nimbus_promotion_refusals_total", (("reason", reason.value),))
        assert seen[key] == expected
    assert seen[("stratus_nimbus_supervisor_phi", (("supervisor", "s1"),))] == 0.4
    assert seen[("stratus_nimbus_supervisor_phi", (("supervisor", "s2"),))] == 9.5
    phi.clear()  # the lane stopped: a nimbus that does not lead judges no one
    assert not any(name == "stratus_nimbus_supervisor_phi" for name, _ in samples(metrics.registry))


def wired(census: StandbyCensus | None, *, leading: bool) -> Samples:
    """The metrics as ``build_duties`` declares them, over a round's census."""
    metrics = nimbus_metrics()
    scheduling = SimpleNamespace(standby_census=census)
    declare_failover_metrics(metrics, None, cast(Any, scheduling), lambda: leading)
    return samples(metrics.registry)


def test_the_leader_shows_its_last_rounds_census() -> None:
    census = StandbyCensus(states={**dict.fromkeys(CENSUS_STATES, 0), "ready": 3}, hot=4, covered=3)
    seen = wired(census, leading=True)
    assert seen[("stratus_nimbus_standby_workers", (("state", "ready"),))] == 3.0
    assert seen[("stratus_nimbus_standby_workers", (("state", "unplaced"),))] == 0.0
    assert seen[("stratus_nimbus_hot_pipelines", ())] == 4.0
    assert seen[("stratus_nimbus_standby_coverage", ())] == 0.75
    assert ("stratus_nimbus_promotions_total", (("how", "dead"),)) in seen  # declared at 0


def test_a_nimbus_that_does_not_lead_shows_no_census_but_a_whole_coverage() -> None:
    census = StandbyCensus(states={**dict.fromkeys(CENSUS_STATES, 0), "ready": 3}, hot=4, covered=3)
    for seen in (wired(census, leading=False), wired(None, leading=True)):
        for state in CENSUS_STATES:
            assert seen[("stratus_nimbus_standby_workers", (("state", state),))] == 0.0
        assert seen[("stratus_nimbus_hot_pipelines", ())] == 0.0
        assert seen[("stratus_nimbus_standby_coverage", ())] == 1.0  # min() over nimbuses works


class Promoter:
    def promote(self, *_args: Any, **_kwargs: Any) -> bool:
        raise AssertionError("nothing is promotable here")


def test_the_round_counts_a_refused_promotion_once_per_verdict() -> None:
    refused: list[PromotionRefusal] = []
    standby = StandbyRound(
        StandbySettings(), promoter=cast(Any, Promoter()), on_refused=refused.append
    )
    orders = record("orders")
    placed = placement(orders, "s2")
    term = cast(Leadership, SimpleNamespace(epoch=9))

    def round_(dead: set[str]) -> None:
        read = RoundRead(
            pipelines={"orders": orders},
            current={"orders": (assignment(orders, "s1"), 1)},
            assignments={"orders": assignment(orders, "s1")},
            placements={"orders": (placed, 1)},
            supervisors={"s2": heartbeat("s2", standby_beat(placed, StandbyWorkerState.FAILED))},
            registered=cast(Any, {"s1": None, "s2": None}),
        )
        assert standby.promote(
            term,
            read,
            dead=dead,
            stopped={},
            cordoned=set(),
            silent_for=lambda _s: 9.0,
            floor_secs=4,
        )

    for dead in ({"s1"}, {"s1"}, {"s1"}, set(), {"s1"}):  # s1 dead, back, dead again
        round_(dead)
    assert [(r.pipeline, r.how, r.reason) for r in refused] == [
        ("orders", How.DEAD, Refusal.NOT_READY),
        ("orders", How.DEAD, Refusal.NOT_READY),
    ]


# ---------------------------------------------------------------------- the supervisor's


def supervisor_metrics(tmp_path: Path, clock: FakeClock, **kwargs: Any) -> SupervisorMetrics:
    return SupervisorMetrics(
        "s2",
        workers=list,
        fences=lambda: 0,
        lease_held=lambda: True,
        clock=clock,
        **{"machine": lambda: None, **kwargs},
    )


def test_a_supervisor_shows_its_standby_workers_their_memory_and_its_beat_lease(
    tmp_path: Path,
) -> None:
    orders, billing = record("orders"), record("billing")
    beats = [
        standby_beat(placement(orders)).model_copy(update={"rss_mb": 700}),
        standby_beat(placement(billing), StandbyWorkerState.STARTING),  # not measured yet
    ]
    lease = tmp_path / "lease.beat"
    clock = FakeClock(100.0)
    write_lease(lease, 100.5)
    metrics = supervisor_metrics(tmp_path, clock, standby=lambda: beats, beat_lease=lease)
    seen = samples(metrics.registry)
    on_s2 = (("supervisor", "s2"),)
    for state in StandbyWorkerState:
        count = {StandbyWorkerState.READY: 1.0, StandbyWorkerState.STARTING: 1.0}.get(state, 0.0)
        key = ("stratus_supervisor_standby_workers", (("state", state.value.lower()), *on_s2))
        assert seen[key] == count
    assert seen[("stratus_supervisor_standby_memory_bytes", on_s2)] == 700 * MIB
    assert seen[("stratus_supervisor_beat_lease_remaining_seconds", on_s2)] == 0.5

    clock.advance(2.0)  # no beat renewed it: it has ended
    assert (
        samples(metrics.registry)[("stratus_supervisor_beat_lease_remaining_seconds", on_s2)] == 0
    )
    lease.unlink()  # no agent ever started here
    assert (
        samples(metrics.registry)[("stratus_supervisor_beat_lease_remaining_seconds", on_s2)] == 0
    )


def test_a_supervisor_without_fast_beats_shows_no_beat_lease(tmp_path: Path) -> None:
    seen = samples(supervisor_metrics(tmp_path, FakeClock()).registry)
    assert ("stratus_supervisor_standby_memory_bytes", (("supervisor", "s2"),)) in seen
    assert not any(name.startswith("stratus_supervisor_beat_lease") for name, _ in seen)


# ---------------------------------------------------------------------- docs/metrics.md


def documented() -> set[str]:
    return set(re.findall(r"`(stratus_[a-z_]+)", DOCS.read_text()))


def exposed(registry: CollectorRegistry) -> set[str]:
    names = set()
    for family in registry.collect():
        if family.name.startswith("stratus_"):
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def test_every_metric_of_the_nimbus_and_the_supervisor_is_in_docs_metrics_md(
    tmp_path: Path,
) -> None:
    metrics = nimbus_metrics()
    declare_failover_metrics(metrics, None, cast(Any, SimpleNamespace(standby_census=None)), bool)
    metrics.declare_purges(lambda _state: 0)
    supervisor = supervisor_metrics(
        tmp_path,
        FakeClock(),
        beat_lease=tmp_path / "lease.beat",
        warm=lambda: WarmMemory(machine_mb=8192, budget_mb=1024, used_mb=0),
        machine=lambda: Machine(total=8 * 1024 * MIB, available=4 * 1024 * MIB),
    )
    names = exposed(metrics.registry) | exposed(supervisor.registry)
    assert "stratus_nimbus_promotions_total" in names  # the registries were read
    assert names - documented() == set()
