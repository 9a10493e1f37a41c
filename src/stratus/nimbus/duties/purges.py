"""The leader's duty of seeing every recorded purge through, until whoever can write did it.

A kill with ``purge`` and the end of a retention record ``purges/<pipeline>`` (in the
transaction that removes the record or the kept marker: ``PipelineOps``). Each round this
duty reads the orders and the supervisors' outcomes from ZooKeeper and takes each order's
next step (``purge_plan.next_step``): the leader deletes the directory itself (it can write
the root), hands the order to a supervisor (written fenced, as every leader write), records
a failure, or removes the order, with its outcomes, once a deletion is acknowledged. Only
then may the name be submitted again. The pipeline's run records (``runs/<name>``) are deleted just
before the order is removed, and each supervisor deletes its logs of the pipeline's runs
when it sees the order (``supervisor.purges``). The duty keeps nothing in memory that a new leader
would need: an order handed by the old leader is followed by the new one::

    duty = CarryOutPurges(orders, checkpoint_root="/ck", live=view.supervisors, rules=...)
    duty.run(term)

Both the leader and a supervisor delete only under their own ``pipeline.checkpoint.root``:
an order that names another root (the configuration changed) fails there, saying so, since
nothing read from ZooKeeper decides what a daemon deletes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from pydantic import ValidationError

from stratus.api.clock import Clock
from stratus.api.purges import PurgeOrder, PurgeOutcome, PurgeState
from stratus.checkpoints import local_pipeline_directory, remove_checkpoints
from stratus.coordination.errors import TransactionFailedError
from stratus.coordination.leadership import Leadership
from stratus.errors import StratusError
from stratus.nimbus.records.purge_plan import (
    PurgeBy,
    PurgeRules,
    StepKind,
    next_step,
    record_failure,
)
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

ANSWER_SECS = 300.0  # how long a supervisor may take to answer before another is chosen
RETRY_SECS = 60.0  # how long a FAILED purge waits before everyone may try again


class PurgeOrders:
    """The orders and outcomes in ZooKeeper, and the leader's fenced writes of them."""

    def __init__(self, client: KazooClient, paths: ClusterPaths) -> None:
        self._client = client
        self._paths = paths

    def orders(self) -> dict[str, tuple[PurgeOrder, int]]:
        """Every valid order with its znode's version."""
        found = {}
        for name in self._children(self._paths.purges):
            try:
                raw, stat = self._client.get(self._paths.purge(name))
            except NoNodeError:
                continue
            try:
                found[name] = (PurgeOrder.model_validate_json(raw), stat.version)
            except ValidationError:
                log.warning("event=bad_purge_order pipeline=%s", name)
        return found

    def outcomes(self) -> dict[str, list[PurgeOutcome]]:
        """Every supervisor's answer, by pipeline."""
        found: dict[str, list[PurgeOutcome]] = {}
        for node in self._children(self._paths.purge_outcomes):
            try:
                raw, _ = self._client.get(self._paths.purge_outcome(node))
                outcome = PurgeOutcome.model_validate_json(raw)
            except NoNodeError:
                continue
            except ValidationError:
                log.warning("event=bad_purge_outcome node=%s", node)
                continue
            if outcome.node_name() == node:
                found.setdefault(outcome.pipeline, []).append(outcome)
        return found

    def write(self, term: Leadership, order: PurgeOrder, version: int) -> bool:
        """Write ``order`` over the version read; False if it changed meanwhile."""
        data = order.model_copy(update={"epoch": term.epoch}).encode()
        try:
            term.transaction().set_data(self._paths.purge(order.pipeline), data, version).commit()
        except TransactionFailedError:
            return False
        return True

    def complete(
        self, term: Leadership, order: PurgeOrder, version: int, outcomes: list[PurgeOutcome]
    ) -> bool:
        """Remove the order and its outcomes in one fenced transaction."""
        transaction = term.transaction().delete(self._paths.purge(order.pipeline), version)
        for outcome in outcomes:
            transaction.delete(self._paths.purge_outcome(outcome.node_name()))
        try:
            transaction.commit()
        except TransactionFailedError:
            return False
        return True

    def delete_runs(self, name: str) -> None:
        """Delete ``name``'s run records (``runs/<name>``), before its order goes: the name
        cannot be submitted again, and so run again, while the order stands."""
        try:
            self._client.delete(self._paths.pipeline_runs(name), recursive=True)
        except NoNodeError:
            return

    def drop_outcomes(self, term: Leadership, outcomes: list[PurgeOutcome]) -> None:
        """Answers to orders that are gone (late ones): deleted, fenced."""
        for outcome in outcomes:
            path = self._paths.purge_outcome(outcome.node_name())
            try:
                term.transaction().delete(path).commit()
            except TransactionFailedError:
                continue

    def _children(self, parent: str) -> list[str]:
        try:
            return sorted(self._client.get_children(parent))
        except NoNodeError:
            return []


class CarryOutPurges:
    """Take each recorded purge one step further; see the module docstring."""

    name = "purges"

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        orders: PurgeOrders,
        *,
        checkpoint_root: str,
        by: PurgeBy,
        here: str,
        live: Callable[[], Mapping[str, object]],
        wall: Clock = time.time,
        remove: Callable[[str, str], object] = remove_checkpoints,
        answer_secs: float = ANSWER_SECS,
        retry_secs: float = RETRY_SECS,
    ) -> None:
        self._orders = orders
        self._root = checkpoint_root  # pipeline.checkpoint.root
        self._by = by  # pipeline.checkpoint.purge.by
        self._here = here  # "nimbus <host:port>"
        self._live = live  # the registered supervisors
        self._wall = wall
        self._remove = remove
        self._answer_secs = answer_secs
        self._retry_secs = retry_secs
        self._seen: dict[PurgeState, int] = {}  # the orders of the last round, by state
        self._leading: Callable[[], bool] = lambda: True

    def count(self, state: PurgeState) -> int:
        """How many recorded purges the last round saw in ``state`` (0 unless leading)."""
        return self._seen.get(state, 0) if self._leading() else 0

    def report_while(self, leading: Callable[[], bool]) -> None:
        """``count`` answers only while ``leading`` says this nimbus leads."""
        self._leading = leading

    def run(self, term: Leadership) -> None:
        orders = self._orders.orders()
        seen: dict[PurgeState, int] = {}
        for order, _ in orders.values():
            seen[order.state] = seen.get(order.state, 0) + 1
        self._seen = seen
        answers: dict[str, list[PurgeOutcome]] = {}
        stale: list[PurgeOutcome] = []
        for name, outcomes in self._orders.outcomes().items():
            current = orders.get(name)
            for outcome in outcomes:
                if current is not None and outcome.order == current[0].id:
                    answers.setdefault(name, []).append(outcome)
                else:
                    stale.append(outcome)
        self._orders.drop_outcomes(term, stale)
        if not orders:
            return
        live = sorted(self._live())
        for name, (order, version) in sorted(orders.items()):
            self._step(term, order, version, answers.get(name, []), live)

    def _step(
        self,
        term: Leadership,
        order: PurgeOrder,
        version: int,
        outcomes: list[PurgeOutcome],
        live: list[str],
    ) -> None:
        rules = PurgeRules(
            by=self._by,
            here=self._here,
            here_reaches=self._reaches(order.pipeline),
            answer_secs=self._answer_secs,
            retry_secs=self._retry_secs,
        )
        step = next_step(order, outcomes, live=live, now=self._wall(), rules=rules)
        if step.kind is StepKind.DONE:
            self._complete(term, order, version, outcomes, step.by or "-")
        elif step.kind is StepKind.TRY_HERE:
            error = self._delete_here(order)
            if error is None:
                self._complete(term, order, version, outcomes, self._here)
            elif self._orders.write(term, record_failure(order, self._here, error), version):
                log.warning(
                    "event=purge_attempt_failed pipeline=%s epoch=%d by=%r error=%r",
                    order.pipeline,
                    term.epoch,
                    self._here,
                    error,
                )
        elif step.kind is StepKind.WRITE:
            assert step.order is not None
            if self._orders.write(term, step.order, version):
                _log_written(term, step.order)

    def _reaches(self, name: str) -> bool:
        """(auto) Whether the leader tries itself: ``<root>/<name>`` is on a remote store
        it reaches as everyone does, or on a local file system where it exists (a directory
        missing here may exist on the supervisors' hosts: only they can tell)."""
        if self._by is not PurgeBy.AUTO:
            return False
        try:
            local = local_pipeline_directory(self._root, name)
        except (StratusError, ValueError, ImportError, OSError):
            return False  # a store this nimbus cannot even open: the supervisors' then
        return local is None or local.exists()

    def _delete_here(self, order: PurgeOrder) -> str | None:
        """Delete ``<root>/<pipeline>`` here; None when done, else why not."""
        if order.root.rstrip("/") != self._root.rstrip("/"):
            return (
                f"the purge names the checkpoint root {order.root}, this nimbus's "
                f"pipeline.checkpoint.root is {self._root}: delete {order.root}/"
                f"{order.pipeline} by hand"
            )
        try:
            self._remove(self._root, order.pipeline)
        except (OSError, StratusError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def _complete(
        self,
        term: Leadership,
        order: PurgeOrder,
        version: int,
        outcomes: list[PurgeOutcome],
        by: str,
    ) -> None:
        self._orders.delete_runs(order.pipeline)
        if self._orders.complete(term, order, version, outcomes):
            log.info(
                "event=purge_done pipeline=%s epoch=%d cause=%s by=%r checkpoints=%s/%s",
                order.pipeline,
                term.epoch,
                order.cause.value,
                by,
                order.root.rstrip("/"),
                order.pipeline,
            )


def _log_written(term: Leadership, order: PurgeOrder) -> None:
    failed = order.state is PurgeState.FAILED
    log.log(
        logging.WARNING if failed else logging.INFO,
        "event=purge_%s pipeline=%s epoch=%d attempt=%d supervisor=%s reason=%r",
        "failed" if failed else "pending",
        order.pipeline,
        term.epoch,
        order.attempt,
        order.supervisor or "-",
        order.reason,
    )
