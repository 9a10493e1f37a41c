"""What ``stratus list`` and ``stratus status`` show of pipelines, in every ``-o`` format.

A pipeline's row and its workers' rows are ``Column`` lists (``output.py``): the table, and
under ``-o wide`` more columns after those (where it runs, its version, its standby worker,
its workers' epoch, generation and pid); ``stratus status`` adds a line for the standby
worker of a pipeline that wants one; ``-o json`` and ``-o yaml`` are the API's records,
secrets redacted even if the nimbus that answered did not redact them. A row shows what the
cluster summary lists of a pipeline (``PipelineSummary``), so ``stratus cluster`` shows
its pipelines with the same rows, from the summary alone::

    overview = client.workers_overview()
    show_pipelines(out, OutputFormat.WIDE, client.list_pipelines(),
                   where=placements(overview), standby=standby_cells(overview))
    show_pipeline_rows(out, OutputFormat.TABLE, client.cluster().pipelines)
    show_status(out, OutputFormat.YAML, client.status("etl"), client.workers("etl"))
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from stratus.api.echo import printable
from stratus.api.overview import WorkersOverview
from stratus.api.records import (
    MIB,
    PipelineRecord,
    PipelineStatus,
    PipelineSummary,
    PipelineWorkers,
    RunRecord,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.api.redaction import redact_conf, redact_record, redact_workers
from stratus.api.standby_workers import StandbyWorkerView
from stratus.cli.output import (
    DIGEST_PREFIX,
    Column,
    OutputFormat,
    as_document,
    print_document,
    print_table,
    records_table,
    render,
    when,
)
from stratus.cli.run_output import failed_runs_lines, last_run_lines
from stratus.security.authorizer import PipelineAccess, pipeline_summary

_STATUS_STYLE = {
    PipelineStatus.PENDING: "cyan",
    PipelineStatus.ACTIVE: "green",
    PipelineStatus.INACTIVE: "yellow",
    PipelineStatus.KILLED: "red",
    PipelineStatus.FAILED: "bold red",
    PipelineStatus.FINISHED: "blue",
}


def show_pipelines(
    out: Console,
    output: OutputFormat,
    records: Sequence[PipelineRecord],
    *,
    where: Mapping[str, str] | None = None,
    standby: Mapping[str, str] | None = None,
) -> None:
    """Pipeline records as ``output`` asks: the records themselves as a document, else one
    row each, as ``show_pipeline_rows`` shows the cluster summary's pipelines."""
    shown = [redact_record(record) for record in records]
    if output.is_document:
        print_document(out, output, [as_document(record) for record in shown])
        return
    rows = [pipeline_summary(record) for record in shown]
    show_pipeline_rows(out, output, rows, where=where, standby=standby)


def show_pipeline_rows(
    out: Console,
    output: OutputFormat,
    pipelines: Sequence[PipelineSummary],
    *,
    where: Mapping[str, str] | None = None,
    standby: Mapping[str, str] | None = None,
) -> None:
    """Pipelines' rows as ``output`` asks; ``where`` (pipeline to supervisor) and ``standby``
    (pipeline to its standby worker's cell) fill ``-o wide``."""
    columns = pipeline_columns(where or {}, standby or {})
    render(out, output, pipelines, columns, title="pipelines", empty="no pipelines")


def placements(overview: WorkersOverview) -> dict[str, str]:
    """Where each assigned pipeline runs: its supervisor's id."""
    return {
        placed.pipeline: placed.assignment.supervisor
        for placed in overview.pipelines
        if placed.assignment is not None
    }


def standby_cells(overview: WorkersOverview) -> dict[str, str]:
    """Each pipeline's standby worker in a cell: ``s2 READY``, ``s2 placed`` (not reported
    yet), ``none`` (wanted, nowhere now); a pipeline that wants none is not listed."""
    cells = {}
    for placed in overview.pipelines:
        standby = placed.standby_worker
        if standby is None:
            continue
        if standby.supervisor is None:
            cells[placed.pipeline] = "none"
        else:
            state = standby.state.value if standby.state is not None else "placed"
            cells[placed.pipeline] = f"{standby.supervisor} {state}"
    return cells


def pipeline_columns(
    where: Mapping[str, str], standby: Mapping[str, str] | None = None
) -> list[Column[PipelineSummary]]:
    """A pipeline's row: as ``stratus list`` always showed it, then ``-o wide``'s columns."""
    standby = standby or {}
    return [
        Column("pipeline", lambda r: r.name),
        Column("status", lambda r: status_text(r.status)),
        Column("owners", listed_owners),
        Column("digest", lambda r: r.digest[:DIGEST_PREFIX]),
        Column("size", lambda r: format_size(r.size_bytes)),
        Column("submitted", lambda r: when(r.submitted)),
        Column("epoch", lambda r: str(r.epoch)),
        Column("supervisor", lambda r: where.get(r.name, "-"), wide=True),
        Column("version", lambda r: str(r.version), wide=True),
        Column("rebalances", lambda r: str(r.rebalances), wide=True),
        Column("replication", lambda r: f"{r.replication}/{r.replication_required}", wide=True),
        Column("updated", lambda r: when(r.updated), wide=True),
        Column("standby worker", lambda r: standby.get(r.name, "-"), wide=True),
    ]


def show_status(
    out: Console,
    output: OutputFormat,
    record: PipelineRecord,
    workers: PipelineWorkers,
    runs: Sequence[RunRecord] = (),
) -> None:
    """One pipeline as ``output`` asks: its record, its workers, their Spark UIs and last
    crashes, or, given its newest ``runs`` (it runs nowhere), its last run and, FAILED, its
    restarts and crashes; as a document, the record's fields, its workers under
    ``workers`` and its last run under ``last_run``."""
    record, workers = redact_record(record), redact_workers(workers)
    if output.is_document:
        last = as_document(runs[0]) if runs else None
        document = as_document(record) | {"workers": as_document(workers), "last_run": last}
        print_document(out, output, document)
        return
    print_table(out, record_table(record))
    if runs:
        lines = last_run_lines(runs[0], time.time())
        if record.status is PipelineStatus.FAILED:
            lines += failed_runs_lines(list(runs))
    else:
        print_table(out, workers_table(workers, wide=output is OutputFormat.WIDE))
        lines = standby_lines(workers) + spark_ui_lines(workers) + crash_lines(workers)
    for line in lines:
        out.print(line)  # whole lines: an error is copied, not read wrapped


def record_table(record: PipelineRecord) -> Table:
    """A pipeline's record as ``field value`` rows."""
    table = Table(title=f"pipeline {record.name}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("status", status_text(record.status))
    table.add_row("owners", owners(record))
    readers = PipelineAccess.of(record.owner, record.conf).readers
    if readers:
        table.add_row("readers", ", ".join(sorted(readers)))
    table.add_row("digest", record.digest)
    table.add_row("size", format_size(record.size_bytes))
    table.add_row("conf", json.dumps(redact_conf(record.conf), sort_keys=True))
    table.add_row("submitted", when(record.submitted))
    table.add_row("updated", when(record.updated))
    table.add_row("epoch", str(record.epoch))
    table.add_row("rebalances", str(record.rebalances))
    table.add_row("version", version_text(record))
    if record.update is not None:
        table.add_row(
            "update",
            f"package {record.update.digest[:DIGEST_PREFIX]} waits: its code on "
            f"{record.update.replication} of {record.update.replication_required} required",
        )
    table.add_row("replication", f"{record.replication} of {record.replication_required} required")
    if record.reason:
        table.add_row("reason", printable(record.reason))
    table.add_row("request id", record.request_id or "-")
    if record.kill_at is not None:
        table.add_row("removed at", when(record.kill_at))
    return table


def version_text(record: PipelineRecord) -> str:
    """The version, whether it is on trial, and the versions kept to roll back to."""
    text = str(record.version)
    if record.on_trial:
        text += " (on trial until its first batch)"
    kept = [str(kept.version) for kept in record.versions if kept.version != record.version]
    if kept:
        text += f"; kept to roll back to: {', '.join(kept)}"
    return text


def listed_owners(pipeline: PipelineSummary) -> str:
    """Who owns a listed pipeline; ``-`` none. A nimbus older than the summary's ``owners``
    names only the submitter."""
    if pipeline.owners is None:
        return pipeline.owner or "-"
    return ", ".join(pipeline.owners) or "-"


def owners(record: PipelineRecord) -> str:
    """Who owns the pipeline: its submitter first, then ``pipeline.owners``; ``-`` none."""
    return ", ".join(PipelineAccess.of(record.owner, record.conf).all_owners()) or "-"


WORKER_COLUMNS: list[Column[WorkerHeartbeat]] = [
    Column("supervisor", lambda b: b.supervisor),
    Column("state", lambda b: b.state.value),
    Column("spark app", lambda b: b.app_id or "-"),
    Column("batch", lambda b: str(b.last_batch_id) if b.last_batch_id >= 0 else "-"),
    Column(
        "rows/s",
        lambda b: f"{sum(q.processed_rows_per_second for q in b.queries):.1f}",
        justify="right",
    ),
    Column("rows", lambda b: str(b.rows_total), justify="right"),
    Column("restarts", lambda b: str(b.restarts)),
    Column("error", lambda b: printable(b.error or ""), overflow="fold"),
    Column("epoch", lambda b: str(b.epoch), wide=True),
    Column("generation", lambda b: str(b.generation), wide=True),
    Column("pid", lambda b: "-" if b.pid is None else str(b.pid), wide=True),
    Column("digest", lambda b: b.digest[:DIGEST_PREFIX] or "-", wide=True),
    Column("started", lambda b: when(b.started) if b.started else "-", wide=True),
    Column("heartbeat", lambda b: when(b.time), wide=True),
]


def workers_table(workers: PipelineWorkers, *, wide: bool = False) -> Table:
    """Where a pipeline runs and its workers' last heartbeats, one row each; secrets in an
    error redacted even if the nimbus that answered did not redact them."""
    workers = redact_workers(workers)
    assignment = workers.assignment
    where = (
        f"assigned to {assignment.supervisor} (epoch {assignment.epoch})"
        if assignment
        else "not assigned"
    )
    title = f"workers of {workers.pipeline}: {where}"
    return records_table(title, WORKER_COLUMNS, workers.workers, wide=wide)


def standby_lines(workers: PipelineWorkers) -> list[str]:
    """The standby worker of a pipeline that wants one: where and how it is
    (``standby worker: s2 (h2) READY since …, 702 MiB``), or why there is none
    (``standby worker: none (…)``); then its newest refusal, if any. Nothing for a pipeline
    that wants none."""
    standby = redact_workers(workers).standby_worker
    if standby is None:
        return []
    lines = [f"standby worker: {standby_text(standby)}"]
    if standby.refusals:
        newest = standby.refusals[0]
        lines.append(
            f"standby worker refused by {newest.supervisor} at {when(newest.at)}: "
            f"{printable(newest.reason)}"
        )
    return lines


def standby_text(standby: StandbyWorkerView) -> str:
    """A standby worker in words, as ``standby_lines`` shows it after ``standby worker:``."""
    if standby.supervisor is None:
        return f"none ({printable(standby.unplaced_because or 'not placed')})"
    where = standby.supervisor
    if standby.host is not None:
        where += f" ({standby.host})"
    if standby.state is None:
        placed = f" {when(standby.placed)}" if standby.placed is not None else ""
        return f"{where} placed{placed}, not reported by {standby.supervisor} yet"
    text = f"{where} {standby.state.value}"
    if standby.since is not None:
        text += f" since {when(standby.since)}"
    if standby.rss_mb is not None:
        text += f", {format_size(standby.rss_mb * MIB)}"
    if standby.error:
        text += f": {printable(standby.error)}"
    return text


def spark_ui_lines(workers: PipelineWorkers) -> list[str]:
    """The Spark UI address of each running worker whose UI is on."""
    return [
        f"spark UI on {beat.supervisor}: {printable(beat.spark_ui)}"
        for beat in workers.workers
        if beat.spark_ui and beat.state is WorkerState.RUNNING
    ]


def crash_lines(workers: PipelineWorkers) -> list[str]:
    """One line per worker that crashed since its assignment: when, how, and its error (with
    terminal escapes shown escaped), even once it runs again; and one per update a worker's
    supervisor refused (its entry point did not import)."""
    lines = []
    for beat in redact_workers(workers).workers:
        crash = beat.last_crash
        if crash is not None:
            lines.append(
                f"last crash on {beat.supervisor} at {when(crash.time)} ({crash.exit}): "
                f"{printable(crash.error)}"
            )
        refused = beat.refused
        if refused is not None:
            lines.append(
                f"update refused on {beat.supervisor} (generation {refused.generation}, package "
                f"{refused.digest[:DIGEST_PREFIX]}): {printable(refused.error)}"
            )
    return lines


def status_text(status: PipelineStatus) -> Text:
    return Text(status.value, style=_STATUS_STYLE[status])


def format_size(size_bytes: int) -> str:
    """A byte count as people read it: 512 B, 2.1 KiB, 3.4 MiB, 1.2 GiB."""
    size = float(size_bytes)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
