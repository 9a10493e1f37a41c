"""The nimbus's Prometheus metrics, in a registry of its own (several nimbuses per process work).

Scraped at ``GET /metrics``: what every daemon shows (``stratus.web.metrics``: build info,
process), whether this nimbus leads and in which epoch, its HA state, the epoch it acts under
and the HA transitions it made, how often the leadership changed, which leader duties raised,
requests by route and status with their latency, whether the ZooKeeper connection is up, how
this nimbus's code sync is doing, the scheduling rounds that could not see the heartbeats, the
recorded purges of checkpoints not done yet, and the hot pipelines' failover: the failure
detector's phi of each supervisor it judges, the promotions of standby workers and the refused
ones, the standby workers by state and the hot pipelines they cover.
Counters are declared without ``_total``, which the client library appends. What only the
leader knows is 0 (or empty) on a standby, as the leader's is 0 until its first round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from stratus.api.purges import PurgeState
from stratus.ha.protocol import HAState
from stratus.web.metrics import (
    CONTENT_TYPE_LATEST,
    CallbackCounter,
    daemon_registry,
    exposition,
    state_gauge,
)

__all__ = ["CONTENT_TYPE_LATEST", "NimbusMetrics"]

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
_S = TypeVar("_S")

FAILOVER_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 60)


class NimbusMetrics:
    """Every metric of one nimbus; gauges read live state through the callables given."""

    def __init__(
        self,
        *,
        is_leader: Callable[[], bool],
        epoch: Callable[[], int | None],
        zookeeper_connected: Callable[[], bool],
        code_sync_rounds: Callable[[], int],
        code_missing: Callable[[], int],
        ha_state: Callable[[], HAState] = lambda: HAState.INITIALIZING,
        ha_epoch: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.registry = daemon_registry("nimbus")
        Gauge(
            "stratus_nimbus_is_leader", "1 while this nimbus leads", registry=self.registry
        ).set_function(lambda: float(is_leader()))
        Gauge(
            "stratus_nimbus_epoch",
            "epoch of the current leader as this nimbus knows it (-1: none yet)",
            registry=self.registry,
        ).set_function(lambda: float(_or_minus_one(epoch())))
        Gauge(
            "stratus_nimbus_zookeeper_connected",
            "1 while the ZooKeeper session is connected",
            registry=self.registry,
        ).set_function(lambda: float(zookeeper_connected()))
        CallbackCounter(
            "stratus_nimbus_code_sync_rounds",
            "rounds of this nimbus's code sync since it started",
            code_sync_rounds,
            self.registry,
        )
        Gauge(
            "stratus_nimbus_code_missing",
            "pipelines whose code this nimbus lacks (it may lead only at 0)",
            registry=self.registry,
        ).set_function(lambda: float(code_missing()))
        state_gauge(
            "stratus_nimbus_ha_state",
            "1 for the HA state this nimbus is in (initializing, standby, active, stopping)",
            HAState,
            ha_state,
            self.registry,
        )
        Gauge(
            "stratus_nimbus_ha_epoch",
            "the fencing epoch this nimbus acts under as leader (-1: it does not lead)",
            registry=self.registry,
        ).set_function(lambda: float(_or_minus_one(ha_epoch())))
        self.ha_transitions = Counter(
            "stratus_nimbus_ha_transitions",
            "HA transitions made on a failover controller's request, by the state entered",
            ["to"],
            registry=self.registry,
        )
        for state in (HAState.ACTIVE, HAState.STANDBY):
            self.ha_transitions.labels(state.value)
        self.leadership_gained = Counter(
            "stratus_nimbus_leadership_gained",
            "terms this nimbus won",
            registry=self.registry,
        )
        self.leadership_lost = Counter(
            "stratus_nimbus_leadership_lost",
            "terms of this nimbus that ended",
            registry=self.registry,
        )
        self.failover = Histogram(
            "stratus_nimbus_failover_seconds",
            "failovers to this nimbus: the leaderless gap from the previous leader's last sign "
            "of life to leading (the failover_secs of GET /api/v1/leader/terms)",
            buckets=FAILOVER_BUCKETS,
            registry=self.registry,
        )
        self.epoch_refusals = Counter(
            "stratus_nimbus_epoch_refusals",
            "fenced writes of this nimbus that ZooKeeper refused because the epoch had moved: "
            "it wrote as a leader that had been deposed",
            registry=self.registry,
        )
        self.leader_changes = Counter(
            "stratus_nimbus_leader_changes",
            "changes of the cluster's leader seen by this nimbus",
            registry=self.registry,
        )
        self.duty_failures = Counter(
            "stratus_nimbus_duty_failures",
            "rounds of a leader duty that raised (the duty is retried at the next round)",
            ["duty"],
            registry=self.registry,
        )
        self.heartbeats_unknown = Counter(
            "stratus_nimbus_heartbeats_unknown_rounds",
            "scheduling rounds whose heartbeats were unknown, so nothing was judged dead from "
            "them: `unavailable` (the state store could not be read; every pacemaker down), "
            "`warming` (a heartbeat missing from pacemakers that are all warming up), "
            "`unreachable` (a pacemaker did not answer: a registered supervisor's silence "
            "may be rounds only that pacemaker took)",
            ["reason"],
            registry=self.registry,
        )
        for reason in ("unavailable", "warming", "unreachable"):
            self.heartbeats_unknown.labels(reason)
        self.supervisor_fences = Counter(
            "stratus_nimbus_supervisor_fences",
            "fences of silent supervisors this nimbus made as leader, by outcome: `fenced` "
            "(with `method` graceful, shell, process or sshfence) or `failed` (every way "
            "failed, `method` -: the supervisor's lease was waited out)",
            ["result", "method"],
            registry=self.registry,
        )
        self.promotions = Counter(
            "stratus_nimbus_promotions",
            "standby workers of hot pipelines this nimbus promoted as leader, by the verdict "
            "on the active worker's supervisor: `fenced` (it answered a pipeline fence), "
            "`floor` (silent on the fast beats for its floor), `dead` (the scheduling round "
            "judged it dead), `stopped` (a drain whose old worker stopped)",
            ["how"],
            registry=self.registry,
        )
        self.promotion_refusals = Counter(
            "stratus_nimbus_promotion_refusals",
            "hot pipelines under a verdict whose standby worker this nimbus could not promote "
            "as leader, by reason (each once per verdict on its supervisor): they moved the "
            "warm or cold way",
            ["reason"],
            registry=self.registry,
        )
        self.requests = Counter(
            "stratus_nimbus_requests",
            "HTTP requests answered",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "stratus_nimbus_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def declare_duties(self, names: Iterable[str]) -> None:
        """Show every duty's failure count, at 0 until it fails."""
        for name in names:
            self.duty_failures.labels(name)

    def declare_purges(self, count: Callable[[PurgeState], int]) -> None:
        """``stratus_nimbus_purges{state}``: the recorded purges by state, as this nimbus's
        last round as leader saw them (0 on a standby)."""
        gauge = Gauge(
            "stratus_nimbus_purges",
            "purges of killed pipelines' checkpoints recorded and not done, by state "
            "(pending, failed), as the leader's last round saw them",
            ["state"],
            registry=self.registry,
        )
        for state in PurgeState:
            gauge.labels(state.value).set_function(_counted(count, state))

    def declare_failover(
        self,
        *,
        hows: Iterable[str],
        reasons: Iterable[str],
        phi: Callable[[], Mapping[str, float]],
    ) -> None:
        """Show the promotions of every verdict and the refusals of every reason, at 0 until
        one happens, and ``stratus_nimbus_supervisor_phi{supervisor}``: ``phi()`` at each
        scrape, the failover lane's (empty while it judges no one)."""
        for how in hows:
            self.promotions.labels(how)
        for reason in reasons:
            self.promotion_refusals.labels(reason)
        self.registry.register(
            _LabelledGauge(
                "stratus_nimbus_supervisor_phi",
                "the failure detector's phi of each supervisor holding a hot pipeline's active "
                "worker, at the failover lane's last read of the fast beats (suspected at "
                "nimbus.detector.threshold and past its floor); the leader's only",
                "supervisor",
                phi,
            )
        )

    def declare_standby(
        self,
        *,
        states: Iterable[str],
        count: Callable[[str], int],
        hot: Callable[[], int],
        coverage: Callable[[], float],
    ) -> None:
        """``stratus_nimbus_standby_workers{state}`` (``count(state)``), the hot pipelines and
        the fraction of them covered, as the leader's last scheduling round read them."""
        gauge = Gauge(
            "stratus_nimbus_standby_workers",
            "standby workers placed for hot pipelines, by the state their supervisors report "
            "(fetching, starting, ready, refused, failed; unreported: not reported yet; "
            "unplaced: no supervisor fits), as the leader's last round saw them",
            ["state"],
            registry=self.registry,
        )
        for state in states:
            gauge.labels(state).set_function(_counted(count, state))
        Gauge(
            "stratus_nimbus_hot_pipelines",
            "ACTIVE pipelines with pipeline.standby: hot, as the leader's last round saw them",
            registry=self.registry,
        ).set_function(lambda: float(hot()))
        Gauge(
            "stratus_nimbus_standby_coverage",
            "the fraction of hot pipelines whose standby worker is READY for the code they run "
            "now, so that a failover of their host promotes it (1 with no hot pipeline, and on "
            "a nimbus that does not lead), as the leader's last round saw them",
            registry=self.registry,
        ).set_function(lambda: float(coverage()))

    def duty_failed(self, name: str) -> None:
        self.duty_failures.labels(name).inc()

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def exposition(self) -> bytes:
        return exposition(self.registry)


def _counted(count: Callable[[_S], int], state: _S) -> Callable[[], float]:
    return lambda: float(count(state))


class _LabelledGauge(Collector):
    """A gauge of one label whose values come and go, read at each scrape (``read()``:
    label value -> value)."""

    def __init__(
        self, name: str, documentation: str, label: str, read: Callable[[], Mapping[str, float]]
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._label = label
        self._read = read

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(self._name, self._documentation, labels=[self._label])
        for value, number in sorted(self._read().items()):
            gauge.add_metric([value], float(number))
        yield gauge

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self._name, self._documentation, labels=[self._label])


def _or_minus_one(value: int | None) -> int:
    return -1 if value is None else value
