"""A pipeline's runs as every nimbus reads them: ZooKeeper's ``runs/<name>/``, newest first.

The supervisor that runs a run writes its record (``supervisor.run_records``). A run its
supervisor left open and can no longer close (the supervisor is not registered: it died,
or stopped and never came back) is shown with the end the pipeline's assignment history
implies (``inferred_end``): the first change after its start that took the pipeline off
that supervisor, with that change's time, MOVED (to another) or STOPPED, flagged
``inferred``. A run still open on a live supervisor shows what its worker's newest
heartbeat says (its Spark application, UI, batches and rows)::

    reader = RunReader(client, paths, history=history.read, live=view.supervisors)
    reader.runs("etl", limit=20)        # [RunRecord(run=8, ...), RunRecord(run=7, ...)]
    reader.run("etl", 7)                # UnknownRunError naming the runs kept
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Collection

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from pydantic import ValidationError

from stratus.api.errors import NoLogError, UnknownPipelineError, UnknownRunError
from stratus.api.records import AssignmentChange, RunOutcome, RunRecord, WorkerHeartbeat
from stratus.zk.paths import RUN_NODE_PREFIX, ClusterPaths, sequence_of


def inferred_end(run: RunRecord, changes: list[AssignmentChange]) -> RunRecord:
    """``run`` (open, its supervisor gone) ended by the first of ``changes`` after its start
    that took the pipeline off its supervisor: MOVED if to another, else STOPPED; ``run``
    unchanged if there is none (nothing tells its end)."""
    after = sorted((c for c in changes if c.at >= run.started), key=lambda c: c.at)
    for change in after:
        if change.supervisor == run.supervisor:
            continue
        moved = change.supervisor is not None
        return run.model_copy(
            update={
                "ended": change.at,
                "outcome": RunOutcome.MOVED if moved else RunOutcome.STOPPED,
                "inferred": True,
                "spark_ui": None,
            }
        )
    return run


def with_beat(run: RunRecord, beat: WorkerHeartbeat | None) -> RunRecord:
    """An open ``run`` with what its worker's newest heartbeat says, if it is this run's."""
    if beat is None or beat.supervisor != run.supervisor or beat.pid != run.pid:
        return run
    return run.model_copy(
        update={
            "app_id": beat.app_id,
            "spark_ui": beat.spark_ui,
            "batches": beat.batches_total if beat.queries else None,
            "rows": beat.rows_total if beat.queries else None,
        }
    )


class RunReader:
    """Reads one pipeline's runs; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        *,
        history: Callable[[str], list[AssignmentChange]],
        live: Callable[[], Collection[str]],
        beats: Callable[[str], list[WorkerHeartbeat]] = lambda _name: [],
    ) -> None:
        self._client = client
        self._paths = paths
        self._history = history
        self._live = live  # the ids of the registered supervisors
        self._beats = beats  # the pipeline's workers' newest heartbeats

    def numbers(self, name: str) -> list[int]:
        """The numbers of ``name``'s runs kept, newest first."""
        try:
            nodes = self._client.get_children(self._paths.pipeline_runs(name))
        except NoNodeError:
            return []
        runs = (sequence_of(node) for node in nodes if node.startswith(RUN_NODE_PREFIX))
        return sorted(runs, reverse=True)

    def runs(self, name: str, limit: int | None = None) -> list[RunRecord]:
        """``name``'s runs, newest first (at most ``limit``); empty if it has none."""
        numbers = self.numbers(name)[:limit]
        parent = self._paths.pipeline_runs(name)
        pending = [
            (n, self._client.get_async(posixpath.join(parent, f"{RUN_NODE_PREFIX}{n:010d}")))
            for n in numbers
        ]
        records = []
        for number, result in pending:
            try:
                raw, _ = result.get()
                record = RunRecord.model_validate_json(raw)
            except (NoNodeError, ValidationError):
                continue  # trimmed meanwhile, or torn
            records.append(record.model_copy(update={"run": number}))
        return self._completed(name, records)

    def run(self, name: str, number: int) -> RunRecord:
        """Run ``number`` of ``name``; UnknownRunError naming the runs kept."""
        found = [r for r in self.runs(name) if r.run == number]
        if found:
            return found[0]
        numbers = self.numbers(name)
        if not numbers:
            raise UnknownPipelineError(f"pipeline {name!r} has no runs on record")
        raise UnknownRunError(
            f"pipeline {name!r} has no run {number}: runs {numbers[-1]} to {numbers[0]} are "
            "kept (pipeline.runs.keep)"
        )

    def _completed(self, name: str, records: list[RunRecord]) -> list[RunRecord]:
        """Open runs with their worker's heartbeat, or their inferred end."""
        if all(r.ended is not None for r in records):
            return records
        live = set(self._live())
        beats = {beat.supervisor: beat for beat in self._beats(name)}
        history: list[AssignmentChange] | None = None
        done = []
        for record in records:
            if record.ended is not None:
                done.append(record)
            elif record.supervisor in live:
                done.append(with_beat(record, beats.get(record.supervisor)))
            else:
                history = self._history(name) if history is None else history
                done.append(inferred_end(record, history))
        return done


def pick_run(name: str, runs: list[RunRecord], *, previous: bool) -> RunRecord | None:
    """The run whose log is read when none is named: the newest of ``runs`` (newest first),
    or with ``previous`` the one before it; None when there are none (an older release's
    supervisor ran it). NoLogError when ``previous`` names no run."""
    if not runs:
        return None
    if not previous:
        return runs[0]
    if len(runs) < 2:
        raise NoLogError(
            f"pipeline {name!r} has one run on record (run {runs[0].run}): no run before it"
        )
    return runs[1]
