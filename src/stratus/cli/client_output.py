"""What the client verbs print besides their listings (``output.py`` renders those): a
record as JSON, a change as one line, the assignment history and leader terms as tables, a
drain's progress, a log's lines, and what a verb shows while it waits (replication, purge).

    print_json(record)  # a pipeline's secret conf values redacted
    print_table(console(), terms_table(client.leader_terms()))
    print_log(client.logs("wordcount", follow=True))
"""

from __future__ import annotations

import codecs
from collections.abc import Generator

import click
from pydantic import BaseModel
from rich.table import Table

from stratus.api.echo import printable
from stratus.api.records import AssignmentHistory, CordonStatus, LeaderTerms, PipelineRecord
from stratus.api.redaction import redact_record, redact_text
from stratus.cli.output import DIGEST_PREFIX, console, when
from stratus.cli.pipeline_views import format_size
from stratus.client import NimbusClient
from stratus.client.nimbus_client import pending


def wait_replicated(client: NimbusClient, record: PipelineRecord, *, quiet: bool) -> PipelineRecord:
    """Poll the pipeline while PENDING, showing how many nimbuses hold its code."""
    if quiet:
        return client.wait_replicated(record.name)
    with console().status(replication_line(record)) as status:
        return client.wait_replicated(
            record.name, on_progress=lambda seen: status.update(replication_line(seen))
        )


def replication_line(record: PipelineRecord) -> str:
    return (
        f"pipeline {record.name} is PENDING: its code is on {record.replication} of the "
        f"{record.replication_required} nimbuses required"
    )


def print_log(chunks: Generator[bytes, None, None]) -> None:
    """A log's lines as they arrive, until its end (or Ctrl-C, which ends a follow)."""
    lines = LogLines()
    try:
        for chunk in chunks:
            for line in lines.feed(chunk):
                click.echo(line)
    except KeyboardInterrupt:  # -f ends here: not an error
        pass
    finally:
        chunks.close()
    if rest := lines.flush():
        click.echo(rest)


class LogLines:
    """A log's bytes as lines to print: decoded (a character split across chunks waits for
    the rest), secrets redacted, terminal escapes shown escaped, as errors are."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""

    def feed(self, chunk: bytes) -> list[str]:
        text = self._partial + self._decoder.decode(chunk)
        *done, self._partial = text.split("\n")
        return [_shown(line) for line in done]

    def flush(self) -> str:
        rest, self._partial = self._partial + self._decoder.decode(b"", final=True), ""
        return _shown(rest) if rest else ""


def _shown(line: str) -> str:
    return printable(redact_text(line))


def wait_purged(client: NimbusClient, name: str, timeout: float, *, quiet: bool) -> None:
    """Poll the removal and the purge, showing what is pending."""
    if quiet:
        client.wait_purged(name, timeout=timeout)
        return
    with console().status(f"killing pipeline {name}") as status:
        client.wait_purged(
            name, timeout=timeout, on_progress=lambda seen: status.update(pending(seen))
        )


def print_json(model: BaseModel) -> None:
    """The record as JSON; a pipeline's secret conf values redacted even if the nimbus that
    answered did not redact them."""
    if isinstance(model, PipelineRecord):
        model = redact_record(model)
    click.echo(model.model_dump_json(indent=2))


def print_change(record: PipelineRecord, as_json: bool) -> None:
    if as_json:
        print_json(record)
    else:
        console().print(f"pipeline {record.name} is {record.status.value} (epoch {record.epoch})")


def print_cordon(status: CordonStatus, as_json: bool) -> None:
    if as_json:
        print_json(status)
    else:
        console().print(drain_line(status))


def drain_line(status: CordonStatus) -> str:
    """One line: the supervisor's state, and what is left of its drain."""
    state = "draining" if status.draining else "cordoned" if status.cordoned else "schedulable"
    if status.draining and status.done:
        state = "drained"
    parts = [f"supervisor {status.supervisor} is {state}"]
    if status.remaining:
        parts.append(f"still there: {', '.join(status.remaining)}")
    if status.moving:
        parts.append(f"on the way: {', '.join(status.moving)}")
    if status.no_room:
        parts.append(f"no room for: {', '.join(status.no_room)}")
    return "; ".join(parts)


def history_table(history: AssignmentHistory) -> Table:
    """One row per assignment change, newest first; ``-`` where it ran nowhere."""
    table = Table(title=f"assignment history of {history.pipeline}")
    for column in ("at", "epoch", "reason", "from", "to", "generation", "digest"):
        table.add_column(column)
    for change in history.changes:
        table.add_row(
            when(change.at),
            str(change.epoch),
            change.reason.value,
            change.previous or "-",
            change.supervisor or "-",
            str(change.generation),
            change.digest[:DIGEST_PREFIX],
        )
    return table


def terms_table(found: LeaderTerms) -> Table:
    """One row per term of leadership, newest first; ``-`` for what is not known (yet)."""
    table = Table(title="leader terms")
    for column in ("epoch", "nimbus", "started", "ended", "ended by", "leaderless s"):
        table.add_column(column, justify="right" if column == "leaderless s" else "left")
    for term in found.terms:
        table.add_row(
            str(term.epoch),
            term.nimbus,
            when(term.started_at),
            "-" if term.ended_at is None else when(term.ended_at),
            term.ended_by or "-",
            "-" if term.failover_secs is None else f"{term.failover_secs:.2f}",
        )
    return table


def print_submitted(record: PipelineRecord, as_json: bool) -> None:
    """What ``stratus submit`` created: its status, package and replication."""
    if as_json:
        print_json(record)
        return
    console().print(
        f"submitted pipeline {record.name}: {record.status.value}, package "
        f"{record.digest[:DIGEST_PREFIX]} ({format_size(record.size_bytes)}), code on "
        f"{record.replication} of {record.replication_required} nimbuses required, "
        f"epoch {record.epoch}"
    )
    if record.reason:
        console().print(f"note: {printable(record.reason)}")


def print_updated(record: PipelineRecord, as_json: bool) -> None:
    """The version a ``stratus update`` runs, or the update still waiting for replication."""
    if as_json:
        print_json(record)
        return
    if record.update is not None:
        console().print(
            f"pipeline {record.name} runs version {record.version}; the update to package "
            f"{record.update.digest[:DIGEST_PREFIX]} waits for its code to reach "
            f"{record.update.replication_required} nimbuses"
        )
        return
    console().print(
        f"updated pipeline {record.name} to version {record.version}: package "
        f"{record.digest[:DIGEST_PREFIX]} ({format_size(record.size_bytes)}), epoch {record.epoch}"
    )
    if record.reason:
        console().print(f"note: {printable(record.reason)}")


def print_killed(
    name: str, record: PipelineRecord | None, as_json: bool, *, purge: bool, waited: bool
) -> None:
    """What ``stratus kill`` did: removed now or later; with a purge, done (``waited``) or
    pending."""
    if as_json:
        click.echo("null" if record is None else redact_record(record).model_dump_json(indent=2))
    elif waited:
        console().print(
            f"killed pipeline {name}; its record is removed and its checkpoints deleted"
        )
    elif purge:
        removal = f" at {when(record.kill_at)}" if record and record.kill_at is not None else ""
        console().print(
            f"kill of pipeline {name} recorded; its record is removed{removal}, then its "
            "checkpoints are purged: both pending (stratus status, GET "
            f"/api/v1/pipelines/{name}/purge)"
        )
    elif record is None:
        console().print(f"killed pipeline {name}; its record is already removed")
    else:
        removal = f" at {when(record.kill_at)}" if record.kill_at is not None else ""
        console().print(f"killed pipeline {name}; its record is removed{removal}")
