"""False suspicions: a hot pipeline on the chaos cluster, every host under stress, and pauses
shorter than the failure detector's floor; one run at a time and every row once, whatever the
detector does, and how often it promoted a standby worker off a supervisor that had not failed.

The cluster is the chaos suite's (``tests/harness/chaos_cluster.py``) ready for a hot pipeline
(``hot``): three hosts of their own network namespace, each a ZooKeeper member, a nimbus
(supervised, the default), a supervisor of two slots and a pacemaker; no warm worker. The
streaming example runs with ``pipeline.standby: hot`` and a 0.5 s trigger, fed 50 events a
second. Once the pipeline runs, its standby worker is READY on another host and every pacemaker
is past its warm-up (before that the leader judges no silence on the beats, and this test
would prove nothing), every host is stressed at once for as long as the pauses last: one CPU
burner per core of the machine on each host (``stress-ng --cpu`` where it is installed, else a
spinning Python) and ``dd oflag=direct`` writing to its supervisor's data directory
(``Injector.stressing``). Under that load, ``STRATUS_CHAOS_PAUSES`` (20) pauses drawn from a
seed (``plan_faults`` with pauses alone, ``ClusterShape.hot``): SIGSTOP, then SIGCONT, of the
beat agent of the hot worker's supervisor (the process whose beats the detector judges), of
the hot worker (its process group, Spark included) or of a supervisor, for 0.3 to 0.9 of the
detector's floor (1.02 s with the defaults); after each, the suite waits for a batch committed.

Neither a load nor a pause shorter than the floor is a failure of the supervisor, so the run
expects no promotion. What fails it: two workers of the pipeline at once
(``check_single_worker``, ``check_single_run``), a deposed leader's write
(``check_leader_writes``), an event fed not counted exactly once on the output
(``check_exactly_once``), or the pipeline not committing within ``RECOVERY_SECS`` of a pause.
A promotion is counted, not failed: every pause is shorter than the floor, so a promotion
``check_promotions_explained`` cannot explain is a **false suspicion** acted on, which costs
the pipeline a move for nothing; a pause of the beat agent as long as the beat lease (0.8 s,
with the beat's phase) stops the hot worker anyway (its lease lapsed), and the lane may then
promote its standby worker (if its own count of the silence, from the beat's arrival, reached
the lease too) where the worker would otherwise start again in place. What the run saw is
printed and written to ``hot-chaos-report.json`` in the test's directory, even when its checks
fail:
the promotions and the false suspicions among them, the pipeline fences the leader asked (one
per suspicion, once the supervisor's silence reached its beat lease) and how many were
answered, the hot worker's stops on a lapse of its beat lease, the hot worker's starts,
and the pipeline's gaps between batches::

    STRATUS_CHAOS_HOT=1 pytest -m chaos tests/cluster/test_hot_standby_chaos.py -s  # chaos-hot

It takes 7 to 16 minutes of both cores, more than ``make test`` can spend: it is skipped unless
``STRATUS_CHAOS_HOT`` is set (``make chaos-hot`` sets it). ``STRATUS_CHAOS_SEED`` replays a
plan (the seed is printed first), as in the chaos suite.

The second test is the proof that the check counting those false suspicions, and failing the
chaos suite's hot run on them (``check_promotions_explained``), can fail: on a build whose
leader suspects the hot worker's supervisor at every poll (``tests/harness/
promote_without_verdict``), a run without a single fault promotes the standby worker, and
the check flags every promotion. It is skipped with the first, and ``-k promotes_without``
runs it alone.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from stratus.api.records import PipelineStatus
from stratus.api.standby_workers import STANDBY_CONF_KEY
from stratus.chaos.faults import Action, Fault, plan_faults
from stratus.chaos.oracle import (
    check_exactly_once,
    check_leader_writes,
    check_single_run,
    check_single_worker,
    streaming_counted,
    streaming_expected,
)
from stratus.chaos.promotions import check_promotions_explained
from stratus.chaos.trail_events import Clocks, Event, Violation, load_events
from stratus.chaos.unavailability import pipeline_unavailability
from stratus.client import NimbusClient
from stratus.errors import StratusError
from stratus.local.examples_io import Feeder, read_rows, window_count_total
from stratus.trail import WORKER_PROMOTED, WORKER_STARTED, Actor, TrailRecorder
from tests.harness.chaos_cluster import HOSTS, WARM_UP_SECS, ChaosCluster
from tests.harness.chaos_injector import (
    STREAMING,
    Injector,
    Workload,
    submit_streaming,
    wait_standby_ready,
)
from tests.harness.netns_hosts import NetnsHosts, unavailable
from tests.harness.pipeline_cluster import SPARK_START_SECS
from tests.harness.zkfixtures import holds_within, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.chaos]

HOT_CHAOS = "STRATUS_CHAOS_HOT"  # set: the scenario runs (make chaos-hot)
PAUSES = int(os.environ.get("STRATUS_CHAOS_PAUSES", "20"))
DEFAULT_SEED = 2011  # its 20 pauses: 9 of the beat agent (0.33 to 0.79 s), 4 of the worker, 7 of
# a supervisor
TRIGGER_SECS = 0.5
STEADY_BATCHES = 3  # committed once the cluster is ready, and again once the stress began
READY_SECS = 300.0 + SPARK_START_SECS  # two Spark drivers starting on a loaded 2-core machine
RECOVERY_SECS = 300.0 + SPARK_START_SECS  # a hot worker stopped by a lapse starts again cold
STRESS_BACKSTOP_SECS = 30.0 * PAUSES  # the stress ends with the pauses; its burners quit by
# themselves after this (and 30 s more), should the driver die
DRAIN_SECS = 300.0
PIPELINE_BOUND_SECS = 90.0  # reported, as the chaos suite's (a cold restart on a loaded machine)
# The log lines counted in the report: the leader's pipeline fences (one per suspicion of a
# supervisor, answered or not), and the hot worker's stops on its beat lease's lapse (its own
# lease watch's line; the supervisor's loop may see the lease held again before it looks).
FENCE_ANSWERED = "event=supervisor_pipelines_fenced "
FENCE_UNANSWERED = "event=pipeline_fence_attempt "
LEASE_LAPSED = 'event=worker_fenced reason="the beat lease ended'


def chaos_seed() -> int:
    return int(os.environ.get("STRATUS_CHAOS_SEED", DEFAULT_SEED))


@pytest.fixture
def hosts() -> Iterator[NetnsHosts]:
    if not os.environ.get(HOT_CHAOS):
        # three hosts, two Spark drivers and a stressed machine for minutes: more than the
        # whole suite's budget allows; `make chaos-hot` runs it
        pytest.skip(f"set {HOT_CHAOS}=1 (make chaos-hot) to run it")
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with NetnsHosts(HOSTS) as made:
        yield made


@pytest.mark.timeout(0)  # its length is the plan's; every wait inside is bounded
def test_false_suspicions_under_stress_and_short_pauses(hosts: NetnsHosts, tmp_path: Path) -> None:
    seed = chaos_seed()
    began = time.monotonic()
    print(f"\nhot chaos: seed {seed}, {PAUSES} pauses; replay with STRATUS_CHAOS_SEED={seed}")
    with ChaosCluster(hosts, tmp_path, hot=True) as cluster:
        plan = plan_faults(seed, PAUSES, cluster.shape, {Action.PAUSE: 1})
        driver = TrailRecorder.open(cluster.history_file("driver"), Actor("client", "chaos"))
        client = cluster.nodes.client()
        workload = submit_hot(cluster, client, driver)
        feeder = Feeder(cluster.shared / "input")
        feeder.start()
        try:
            active = wait_ready(cluster, client)
            print(f"steady: the hot worker on {active}, its standby worker READY elsewhere")
            injector = Injector(cluster, client, driver, workload)
            with injector.stressing(HOSTS, STRESS_BACKSTOP_SECS) as burners:
                print(f"stress: {burners[0].count} {burners[0].kind} burners on each host")
                settle(cluster)
                for number, fault in enumerate(plan, 1):
                    pause(cluster, client, injector, number, fault)
            paused_until = time.time()  # what the logs say after it is the drain's and close's
        finally:
            fed = feeder.stop()
        output = cluster.shared / "output"
        drained = holds_within(lambda: window_count_total(output) >= fed, DRAIN_SECS)
        client.close()
        driver.close()
        rows = read_rows(output)
        events = load_events(cluster.history_files())
        logs = log_counts(tmp_path, paused_until)
    violations, report = judge(events, fed, rows, plan)
    report = {"seed": seed, "minutes": (time.monotonic() - began) / 60, **report, **logs}
    (tmp_path / "hot-chaos-report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    print(
        f"hot chaos: {len(report['promotions'])} promotions, "
        f"{report['false_suspicions']} of them false suspicions"
    )
    assert violations == [], "\n".join(map(str, violations))
    assert drained, f"only {window_count_total(output)} of {fed} events counted"


def submit_hot(cluster: ChaosCluster, client: NimbusClient, driver: TrailRecorder) -> Workload:
    """Submit the streaming example, hot, on the shared directory."""
    conf = {"pipeline.trigger.interval.secs": TRIGGER_SECS, STANDBY_CONF_KEY: "hot"}
    return submit_streaming(cluster, client, driver, request_id="chaos-hot", conf=conf)


def wait_ready(cluster: ChaosCluster, client: NimbusClient) -> str:
    """Wait until the hot worker runs, its standby worker is READY on another supervisor,
    every pacemaker is past its warm-up and ``STEADY_BATCHES`` batches were committed after;
    the hot worker's supervisor."""
    active = wait_standby_ready(client, READY_SECS)
    cluster.wait_pacemakers_warmed_up(WARM_UP_SECS)
    cluster.wait_for_batches(
        more_than=cluster.committed_batches() + STEADY_BATCHES, timeout=READY_SECS
    )
    return active


def settle(cluster: ChaosCluster) -> None:
    """Batches committed under the stress before the first pause: the detector learns the
    loaded hosts' rhythm, as it would on a machine that runs loaded."""
    cluster.wait_for_batches(
        more_than=cluster.committed_batches() + STEADY_BATCHES, timeout=RECOVERY_SECS
    )


def pause(
    cluster: ChaosCluster, client: NimbusClient, injector: Injector, number: int, fault: Fault
) -> None:
    """Apply one pause, then wait for a batch committed after it (failing at once if the
    pipeline ended FAILED: no batch would come)."""
    started = time.monotonic()
    seen = cluster.committed_batches()
    print(f"pause {number}/{PAUSES}: {fault}", flush=True)
    injector.apply(fault)
    undone = time.monotonic()
    cluster.wait_for_batches(
        more_than=seen, timeout=RECOVERY_SECS, check=lambda: not_failed(client)
    )
    print(f"  next batch {time.monotonic() - undone:.1f} s after ({undone - started:.1f} s held)")


def not_failed(client: NimbusClient) -> None:
    """Fail if the streaming pipeline ended FAILED (an answer the cluster cannot give now
    is no verdict)."""
    try:
        record = client.status(STREAMING)
    except (StratusError, httpx.HTTPError):
        return
    assert record.status is not PipelineStatus.FAILED, (
        f"the pipeline ended FAILED ({record.reason}): no batch will come; its workers' "
        "logs are under the run's supervisor-*/workers/"
    )


def judge(
    events: list[Event], fed: int, rows: list[dict[str, Any]], plan: list[Fault]
) -> tuple[list[Violation], dict[str, Any]]:
    """The oracle's violations, and the report of the run, with the false suspicions
    (promotions no failure explains)."""
    clocks = Clocks()  # one machine: one monotonic clock for every host
    violations = [
        *check_single_worker(events, clocks),
        *check_single_run(events, clocks),
        *check_leader_writes(events, clocks),
        *check_exactly_once(streaming_expected(range(fed)), streaming_counted(rows)),
    ]
    false_suspicions = check_promotions_explained(events, clocks)
    promotions = [e for e in events if e.name == WORKER_PROMOTED]
    starts = [e for e in events if e.name == WORKER_STARTED and e.get("pipeline") == STREAMING]
    gaps = {u.subject: u.summary() for u in pipeline_unavailability(events, PIPELINE_BOUND_SECS)}
    report = {
        "pauses": dict(Counter(fault.target.value for fault in plan)),
        "pause_secs": sorted(fault.hold_secs for fault in plan),
        "fed": fed,
        "promotions": [
            {k: e.get(k) for k in ("from_supervisor", "to_supervisor", "how", "silent_secs")}
            for e in promotions
        ],
        "false_suspicions": len(false_suspicions),
        "worker_starts": [str(e.get("supervisor")) for e in starts],
        "pipeline_gaps": gaps,
        "violations": [str(v) for v in violations],
        "false_suspicion_lines": [str(v) for v in false_suspicions],
    }
    return violations, report


def log_counts(workdir: Path, until: float) -> dict[str, int]:
    """How many pipeline fences the leader asked (answered or not) and how many times the hot
    worker stopped on its beat lease's lapse, from the daemons' and workers' logs, up to
    ``until`` (wall clock: the cluster's stop lapses every beat lease)."""
    last = datetime.fromtimestamp(until, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:23]
    seen: dict[str, set[str]] = {
        FENCE_ANSWERED: set(),
        FENCE_UNANSWERED: set(),
        LEASE_LAPSED: set(),
    }
    for log in workdir.rglob("*.log"):  # a run's worker.log is a link to its worker's: a set
        with log.open(errors="replace") as lines:
            for line in lines:
                for needle, found in seen.items():
                    if needle in line and line[:23] <= last:  # ISO times sort as text
                        found.add(line)
    counts = {needle: len(found) for needle, found in seen.items()}
    return {
        "pipeline_fences_answered": counts[FENCE_ANSWERED],
        "pipeline_fences_unanswered": counts[FENCE_UNANSWERED],
        "hot_worker_lapses": counts[LEASE_LAPSED],
    }


# its sitecustomize makes the leader's failover lane promote without a failure
BROKEN_VERDICTS = Path(__file__).resolve().parents[1] / "harness" / "promote_without_verdict"
PROMOTION_SECS = 300.0 + SPARK_START_SECS  # two Spark drivers started, the standby READY


@pytest.mark.timeout(0)  # every wait inside is bounded
def test_the_oracle_flags_promotions_on_a_build_that_promotes_without_a_failure(
    hosts: NetnsHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof that the promotions check can fail: every process of this cluster starts with
    ``tests/harness/promote_without_verdict`` on ``PYTHONPATH``, whose ``sitecustomize`` makes
    the leader's watch of the beats suspect the hot worker's supervisor at every poll, silent
    for a minute, whatever its beats say. The hot pipeline runs, no fault is applied, and the
    failover lane promotes its standby worker as soon as it is READY (``how: floor``), off a
    supervisor that beats on time, with its worker still running; ``check_promotions_explained``
    flags every promotion of the run. No other check asks whether a promotion had a cause:
    they judge what the workers did, and a standby worker promoted for nothing whose old
    worker stopped in time breaks none of them."""
    monkeypatch.setenv("PYTHONPATH", str(BROKEN_VERDICTS))
    with ChaosCluster(hosts, tmp_path, hot=True) as cluster:
        driver = TrailRecorder.open(cluster.history_file("driver"), Actor("client", "chaos"))
        client = cluster.nodes.client()
        submit_hot(cluster, client, driver)
        feeder = Feeder(cluster.shared / "input")
        feeder.start()
        try:
            wait_until(
                lambda: promotions(load_events(cluster.history_files())),
                PROMOTION_SECS,
                "a promotion of the streaming pipeline's standby worker",
            )
        finally:
            feeder.stop()
        client.close()
        driver.close()
        events = load_events(cluster.history_files())
    promoted = promotions(events)
    flagged = check_promotions_explained(events, Clocks())
    print(f"promotions: {[str(e) for e in promoted]}")
    print(f"flagged: {[str(v) for v in flagged]}")
    print(f"double runs: {[str(v) for v in check_single_run(events, Clocks())]}")
    assert {v.lines[0].source for v in flagged} == {e.source for e in promoted}, (
        f"the oracle did not flag every promotion of a run without faults: {flagged}"
    )


def promotions(events: list[Event]) -> list[Event]:
    """The promotions of the streaming pipeline's standby worker the trail records."""
    return [e for e in events if e.name == WORKER_PROMOTED and e.get("pipeline") == STREAMING]
