"""The chaos suite: a real cluster on three network-namespace hosts (ZooKeeper members,
nimbuses supervised by their failover controllers as by default, or self-elected;
supervisors, pacemakers) runs the streaming example,
fed continuously, and batch pipelines submitted during the run, through a seeded plan of
faults (``stratus.chaos.faults``); the oracle then judges the history every process recorded.

Zero violations pass: never two workers of one pipeline at once (committing, or even
running), never a deposed leader's write applied, every acknowledged submission present at
the end, every input row counted exactly once, never a standby worker promoted without a
failure of its pipeline's supervisor; and the workers ran walled off, as users of
their supervisors' pools (every file of the output is one of theirs). The unavailability of
the leader and of the streaming pipeline is reported against its bound (and written to
``chaos-report.json`` in the test's directory), with the promotions of its standby worker.

With ``STRATUS_CHAOS_STANDBY=hot`` (``make chaos`` sets it) the streaming pipeline keeps a
standby worker (``pipeline.standby: hot``) on a cluster ready for it (``ChaosCluster``'s
``hot``: a pacemaker on every host; a plan may hit the hot worker's beat agent too): the
faults begin once the standby worker is READY on another host, and each fault is followed,
once the cluster recovered, by a wait until a standby worker is READY off the active one
again, so that every fault finds one to promote (or to place anew when its host was hit).
The workers are walled off either way: the active and the standby worker run as users of
two hosts' pools, and the standby worker's user gets the checkpoint directory only at its
promotion. Unset, or ``none``, the pipeline runs without a standby worker: the short run of
``make test``.

    STRATUS_CHAOS_STANDBY=hot STRATUS_CHAOS_FAULTS=200 STRATUS_CHAOS_SEED=7 \
        pytest -m chaos tests/cluster/test_chaos.py -s -k seeded_run

The seed is printed first; the same seed replays the same faults in the same order. Without
``STRATUS_CHAOS_SEED`` the short run of ``make test`` uses a fixed seed (the same faults
every time) and ``make chaos`` a new one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from stratus.api.standby_workers import STANDBY_CONF_KEY, STANDBY_MODES
from stratus.chaos.faults import Fault, plan_faults
from stratus.chaos.oracle import (
    check_exactly_once,
    check_leader_writes,
    check_single_run,
    check_single_worker,
    check_submissions,
    streaming_counted,
    streaming_expected,
)
from stratus.chaos.promotions import check_promotions_explained
from stratus.chaos.trail_events import Clocks, Violation, load_events
from stratus.chaos.unavailability import (
    Unavailability,
    leader_unavailability,
    pipeline_unavailability,
)
from stratus.client import NimbusClient
from stratus.errors import StratusError
from stratus.local.examples_io import Feeder, read_rows, window_count_total
from stratus.trail import WORKER_PROMOTED, Actor, TrailRecorder
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
from tests.harness.worker_users import (
    WalledHosts,
    keep_files,
    needs_root,
    traversable_dir,
    walled_hosts,
)
from tests.harness.zkfixtures import holds_within, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.chaos, needs_root]

DEFAULT_SEED = 4556  # the short run: a nimbus, a host, the quorum, a zkfc, a supervisor, a client
FAULTS = int(os.environ.get("STRATUS_CHAOS_FAULTS", "6"))  # across both modes
MAX_QUORUM_LOSS_SECS = float(os.environ.get("STRATUS_CHAOS_MAX_QUORUM_LOSS_SECS", "10"))
RECOVERY_SECS = 300.0  # a fault undone → a leader agreed and a new batch of the pipeline
LEADER_BOUND_SECS = 15.0  # a leader killed, frozen or cut: a session timeout and an election
PIPELINE_BOUND_SECS = 90.0  # a worker moved or restarted cold on Spark, on a loaded machine
DRAIN_SECS = 300.0
REQUESTS_SECS = 180.0  # a client's request, retried through a failover or a quorum loss
STANDBY = "STRATUS_CHAOS_STANDBY"  # hot: the streaming pipeline keeps a standby worker
PROOFS = "STRATUS_CHAOS_PROOFS"  # set: the proof that the suite can fail runs too
STANDBY_READY_SECS = RECOVERY_SECS + SPARK_START_SECS  # placed, then a Spark driver started


def chaos_seed() -> int:
    return int(os.environ.get("STRATUS_CHAOS_SEED", DEFAULT_SEED))


def chaos_standby() -> str:
    """The streaming pipeline's ``pipeline.standby`` in the seeded run (``STRATUS_CHAOS_STANDBY``,
    ``none`` unset); ``ValueError`` naming the variable for another value."""
    value = os.environ.get(STANDBY, "none")
    if value not in STANDBY_MODES:
        raise ValueError(
            f"{STANDBY} is one of {', '.join(STANDBY_MODES)} (the streaming pipeline's "
            f"pipeline.standby in the seeded run), not {value!r}"
        )
    return value


@pytest.fixture
def hosts() -> Iterator[NetnsHosts]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with NetnsHosts(HOSTS) as made:
        yield made


@pytest.fixture
def walled(tmp_path: Path) -> Iterator[tuple[Path, WalledHosts]]:
    """The cluster's directory, which other users may pass, and each host's worker users
    (``ChaosCluster``'s ``walls``); the logs and histories are kept in ``tmp_path``."""
    with traversable_dir() as base, walled_hosts(HOSTS, base) as walls:
        try:
            yield base, walls
        finally:
            keep_files(base, tmp_path / "cluster", ("*.log", "history-*.jsonl"))


def assert_written_by_pool_users(output: Path, walls: WalledHosts) -> None:
    """Every file the pipeline wrote is a worker user's: the workers ran walled off."""
    owners = {path.stat().st_uid for path in output.rglob("*") if path.is_file()}
    assert owners, f"nothing written in {output}"
    assert owners <= walls.uids(), f"files of {output} owned by {owners - walls.uids()}"


@pytest.mark.timeout(0)  # its length is the plan's; every wait inside is bounded
@pytest.mark.parametrize("ha_mode", ["supervised", "self"])
def test_a_seeded_run_of_faults_leaves_a_history_without_violations(
    hosts: NetnsHosts, walled: tuple[Path, WalledHosts], tmp_path: Path, ha_mode: str
) -> None:
    base, walls = walled
    seed = chaos_seed() + (ha_mode != "self")  # each mode draws a plan of its own
    count = max(1, FAULTS // 2)
    standby = chaos_standby()
    hot = standby == "hot"
    drawn = "" if seed == chaos_seed() else " (the run's, plus one)"
    print(
        f"\nchaos: seed {seed}{drawn}, {count} faults, nimbuses {ha_mode}, standby worker "
        f"{standby}; replay with STRATUS_CHAOS_SEED={chaos_seed()} "
        f"STRATUS_CHAOS_FAULTS={FAULTS} {STANDBY}={standby}"
    )
    with ChaosCluster(hosts, base, ha_mode=ha_mode, walls=walls, hot=hot) as cluster:
        shape = replace(cluster.shape, max_quorum_loss_secs=MAX_QUORUM_LOSS_SECS)
        plan = plan_faults(seed, count, shape)
        driver = TrailRecorder.open(cluster.history_file("driver"), Actor("client", "chaos"))
        client = cluster.nodes.client()
        workload = start_workload(cluster, client, driver, standby=standby)
        feeder = Feeder(cluster.shared / "input")
        feeder.start()
        try:
            wait_for_batches(cluster, more_than=0)
            if hot:
                wait_hot(cluster, client)
            injector = Injector(cluster, client, driver, workload)
            applied = [
                run_fault(cluster, client, injector, number, fault, count=count, hot=hot)
                for number, fault in enumerate(plan, 1)
            ]
            injector.finish(REQUESTS_SECS)
        finally:
            fed = feeder.stop()
        output = cluster.shared / "output"
        drained = holds_within(lambda: window_count_total(output) >= fed, DRAIN_SECS)
        final = {record.name for record in client.list_pipelines()}
        client.close()
        driver.close()
        rows = read_rows(output)
        history = cluster.history_files()
        assert_written_by_pool_users(output, walls)
    violations, report = judge(history, final, workload, fed, rows)
    report = {"seed": seed, "nimbuses": ha_mode, "standby": standby, "faults": applied, **report}
    (tmp_path / "chaos-report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("unavailability", "promotions")}, indent=2))
    assert violations == [], "\n".join(map(str, violations))
    assert drained, f"only {window_count_total(output)} of {fed} events counted"


def start_workload(
    cluster: ChaosCluster, client: NimbusClient, driver: TrailRecorder, *, standby: str = "none"
) -> Workload:
    """Submit the streaming example on the shared directory, with ``standby`` as its
    ``pipeline.standby`` (``none``: the key left out, as before it existed); the clients'
    workload."""
    conf = {STANDBY_CONF_KEY: standby} if standby != "none" else {}
    return submit_streaming(cluster, client, driver, request_id="chaos-streaming", conf=conf)


def wait_hot(cluster: ChaosCluster, client: NimbusClient) -> None:
    """Wait until the hot worker runs with its standby worker READY on another host, and every
    pacemaker is past its warm-up (the failover lane judges the beats from then on)."""
    active = wait_standby_ready(client, STANDBY_READY_SECS)
    cluster.wait_pacemakers_warmed_up(WARM_UP_SECS)
    print(f"hot: the worker on {active}, its standby worker READY on another host", flush=True)


def run_fault(
    cluster: ChaosCluster,
    client: NimbusClient,
    injector: Injector,
    number: int,
    fault: Fault,
    *,
    count: int,
    hot: bool,
) -> dict[str, Any]:
    """Apply one fault, then wait for the cluster to recover: a leader every nimbus names,
    and a batch of the streaming pipeline committed after the fault was undone; a hot
    pipeline, then, its standby worker READY off the active one again. What was done, and
    how long it took to undo, to recover and (hot) to have a standby worker again."""
    started = time.monotonic()
    print(f"fault {number}/{count}: {fault}", flush=True)
    injector.apply(fault)
    undone = time.monotonic()
    seen = cluster.committed_batches()
    cluster.nodes.wait_for_agreed_leader(timeout=RECOVERY_SECS)
    wait_for_batches(cluster, more_than=seen)
    done = time.monotonic()
    applied: dict[str, Any] = {
        "fault": str(fault),
        "held": undone - started,
        "recovery": done - undone,
    }
    said = f"  undone after {undone - started:.1f} s, recovered {done - undone:.1f} s later"
    if hot:
        wait_standby_ready(client, STANDBY_READY_SECS)
        applied["standby_ready"] = time.monotonic() - done
        said += f", a standby worker READY {applied['standby_ready']:.1f} s after"
    print(said, flush=True)
    return applied


def wait_for_batches(cluster: ChaosCluster, *, more_than: int) -> None:
    cluster.wait_for_batches(more_than=more_than, timeout=RECOVERY_SECS + SPARK_START_SECS)


def judge(
    history: list[Path],
    final: set[str],
    workload: Workload,
    fed: int,
    rows: list[dict[str, Any]],
) -> tuple[list[Violation], dict[str, Any]]:
    """The oracle's violations, and the report of the run."""
    events = load_events(history)
    clocks = Clocks()  # one machine: one monotonic clock for every host
    violations = [
        *check_single_worker(events, clocks),
        *check_single_run(events, clocks),
        *check_leader_writes(events, clocks),
        *check_submissions(events, final, killed=workload.killed),
        *check_exactly_once(streaming_expected(range(fed)), streaming_counted(rows)),
        *check_promotions_explained(events, clocks),
    ]
    leader = leader_unavailability(events, LEADER_BOUND_SECS)
    pipelines = pipeline_unavailability(events, PIPELINE_BOUND_SECS)
    promotions = [event for event in events if event.name == WORKER_PROMOTED]
    report = {
        "violations": [str(v) for v in violations],
        "events": len(events),
        "fed": fed,
        "submitted": workload.submitted,
        "killed": sorted(workload.killed),
        "updates": workload.updates,
        "promotions": [
            {k: e.get(k) for k in ("from_supervisor", "to_supervisor", "how", "silent_secs")}
            for e in promotions
        ],
        "unavailability": {u.subject: _stats(u) for u in [leader, *pipelines]},
    }
    return violations, report


def _stats(unavailability: Unavailability) -> dict[str, Any]:
    return {
        "summary": unavailability.summary(),
        "gaps": len(unavailability.gaps),
        "p50": unavailability.percentile(50),
        "p90": unavailability.percentile(90),
        "p99": unavailability.percentile(99),
        "max": unavailability.percentile(100),
        "bound": unavailability.bound_secs,
        "over_bound": len(unavailability.violations),
    }


# its sitecustomize breaks fencing
FENCING_OFF = Path(__file__).resolve().parents[1] / "harness" / "fencing_off"


@pytest.mark.skipif(
    not os.environ.get(PROOFS), reason=f"set {PROOFS}=1 (make chaos does) to run the proof"
)
def test_the_oracle_flags_a_run_on_a_build_with_fencing_turned_off(
    hosts: NetnsHosts, walled: tuple[Path, WalledHosts], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run by ``make chaos`` (``STRATUS_CHAOS_PROOFS=1``), not by ``make test``: a cluster and
    two Spark drivers for a proof about the oracle, whose checks the unit tests run.

    The proof that the suite can fail: every process of this cluster starts with the
    supervisors' self-fencing turned off (``tests/harness/fencing_off``). The host of the streaming
    pipeline's worker is cut off; the leader moves the pipeline to another host while the
    cut-off worker, no longer fenced, goes on committing batches; the oracle says so."""
    # FENCING_OFF alone: the supervisors' interpreter is another Python (the walls'), which
    # must not import this one's standard library; each finds stratus in its own packages
    monkeypatch.setenv("PYTHONPATH", str(FENCING_OFF))
    base, walls = walled
    with ChaosCluster(hosts, base, walls=walls) as cluster:
        driver = TrailRecorder.open(cluster.history_file("driver"), Actor("client", "chaos"))
        client = cluster.nodes.client()
        start_workload(cluster, client, driver)
        feeder = Feeder(cluster.shared / "input")
        feeder.start()
        try:
            wait_for_batches(cluster, more_than=0)
            home = wait_running_on(client, HOSTS)
            others = [name for name in HOSTS if name != home]
            cluster.hosts.cut(home)
            wait_running_on(cluster.nodes.client(without=[home]), others)
            moved = cluster.committed_batches()
            wait_for_batches(cluster, more_than=moved + 3)
            cluster.hosts.heal(home)
        finally:
            feeder.stop()
        events = load_events(cluster.history_files())
    overlaps = check_single_run(events, Clocks())
    pairs = {(o.lines[0].get("supervisor"), o.lines[1].get("supervisor")) for o in overlaps}
    assert pairs & {(home, other) for other in others}, (
        f"the oracle did not flag the cut-off worker on {home} running on: {overlaps}"
    )


def wait_running_on(client: NimbusClient, among: Sequence[str]) -> str:
    """The supervisor of ``among`` whose worker of the streaming pipeline reports RUNNING
    (waiting for one)."""
    found: list[str] = []

    def running() -> bool:
        try:
            beat = client.workers(STREAMING).on_assigned()
        except StratusError:
            return False
        if beat is None or beat.state.value != "RUNNING" or beat.supervisor not in among:
            return False
        found[:] = [beat.supervisor]
        return True

    wait_until(running, RECOVERY_SECS, f"the streaming pipeline to run on one of {among}")
    return found[0]
