"""What ``stratus cluster`` shows, in every ``-o`` format: the leader, the nimbuses, the
supervisors (registered or cordoned) and the pipelines.

Without ``-o`` it is the leader's line and three tables (a supervisor's warm workers and
their memory in its ``warm`` cell, its standby workers and theirs in its ``standby`` cell;
its "zk outage" says whether it rides out an outage of ZooKeeper, and why not when it was
told to); ``-o wide`` adds the leader's epoch and whether a nimbus serves without TLS and
tokens, each supervisor's machine memory, why its warm workers are held back, its endpoint,
start and cordon (when, by whom), and the pipelines' wide columns (``pipeline_views.py``:
where each runs, its standby worker), each pipeline's row from the summary alone (no conf:
its owners are listed in it); ``-o json`` and ``-o yaml`` are the API's
``ClusterSummary``::

    show_cluster(out, OutputFormat.WIDE, client.cluster(), where=placements(overview))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rich.console import Console
from rich.text import Text

from stratus.api.records import (
    MIB,
    ClusterSummary,
    LeaderInfo,
    NimbusSummary,
    SupervisorCordon,
    SupervisorSummary,
    WarmHeld,
    WarmMemory,
)
from stratus.cli.output import (
    Column,
    OutputFormat,
    as_document,
    print_document,
    print_table,
    records_table,
    when,
)
from stratus.cli.pipeline_views import format_size, show_pipeline_rows


def show_cluster(
    out: Console,
    output: OutputFormat,
    summary: ClusterSummary,
    *,
    where: Mapping[str, str] | None = None,
    standby: Mapping[str, str] | None = None,
) -> None:
    """The cluster as ``output`` asks; ``where`` (pipeline to supervisor) and ``standby``
    (pipeline to its standby worker's cell) fill ``-o wide``."""
    if output.is_document:
        print_document(out, output, as_document(summary))
        return
    wide = output is OutputFormat.WIDE
    out.print(leader_line(summary.leader))
    nimbuses = nimbus_columns(summary.leader)
    print_table(out, records_table("nimbuses", nimbuses, summary.nimbuses, wide=wide))
    rows = supervisor_rows(summary)
    if rows:
        print_table(out, records_table("supervisors", SUPERVISOR_COLUMNS, rows, wide=wide))
    else:
        out.print("no supervisors")
    show_pipeline_rows(out, output, summary.pipelines, where=where, standby=standby)


def print_cluster(out: Console, summary: ClusterSummary) -> None:
    """The cluster as tables, as ``stratus cluster`` shows it without ``-o``."""
    show_cluster(out, OutputFormat.TABLE, summary)


def leader_line(info: LeaderInfo) -> str:
    if info.address is None:
        return "no nimbus leads right now"
    return f"leader: {info.address} (epoch {info.epoch})"


def nimbus_columns(leader: LeaderInfo) -> list[Column[NimbusSummary]]:
    def epoch(nimbus: NimbusSummary) -> str:
        return str(leader.epoch) if nimbus.is_leader and leader.epoch is not None else "-"

    return [
        Column("nimbus", lambda n: f"{n.host}:{n.port}"),
        Column("role", role_text),
        Column("uptime", lambda n: uptime(n.uptime_secs)),
        Column("version", lambda n: n.version),
        Column("epoch", epoch, wide=True),
        Column("insecure", lambda n: "yes" if n.insecure else "no", wide=True),
    ]


def role_text(nimbus: NimbusSummary) -> Text:
    return Text("leader", style="bold green") if nimbus.is_leader else Text("standby")


@dataclass(frozen=True)
class SupervisorRow:
    """A supervisor as the cluster knows it: registered, cordoned, or both."""

    id: str
    registered: SupervisorSummary | None
    cordon: SupervisorCordon | None


def supervisor_rows(summary: ClusterSummary) -> list[SupervisorRow]:
    """Every registered supervisor, then every cordoned one that is not registered."""
    cordons = {cordon.supervisor: cordon for cordon in summary.cordons}
    registered = {supervisor.id: supervisor for supervisor in summary.supervisors}
    rows = [SupervisorRow(s.id, s, cordons.get(s.id)) for s in summary.supervisors]
    unregistered = sorted(set(cordons) - set(registered))
    rows += [SupervisorRow(sid, None, cordons[sid]) for sid in unregistered]
    return rows


def _registered(row: SupervisorRow, field: str) -> str:
    return "-" if row.registered is None else str(getattr(row.registered, field))


def scheduling_text(cordon: SupervisorCordon | None) -> Text:
    if cordon is None:
        return Text("schedulable")
    if cordon.drain:
        return Text("draining", style="bold yellow")
    return Text("cordoned", style="yellow")


_OFF = frozenset({WarmHeld.OFF, WarmHeld.RUN_AS, WarmHeld.MASTER})


def _warm(row: SupervisorRow) -> WarmMemory | None:
    return None if row.registered is None else row.registered.warm


def warm_text(warm: WarmMemory | None) -> Text:
    """The warm workers in a cell: ``2 up, 1.4 GiB of 6.0 GiB``, what holds them back
    (``held: budget``), or ``off (run_as)``."""
    if warm is None:
        return Text("-")
    if warm.held in _OFF or (warm.budget_mb == 0 and warm.up == 0):
        return Text(f"off ({warm.held.value if warm.held else 'budget'})", style="dim")
    text = Text(
        f"{warm.up} up, {format_size(warm.used_mb * MIB)} of {format_size(warm.budget_mb * MIB)}"
    )
    if warm.held is not None:
        text.append(f", held: {warm.held.value}", style="yellow")
    return text


def standby_text(warm: WarmMemory | None) -> str:
    """The standby workers a supervisor runs and their memory (``1 (702.0 MiB)``); ``-``
    none."""
    if warm is None or warm.standby_workers == 0:
        return "-"
    return f"{warm.standby_workers} ({format_size(warm.standby_mb * MIB)})"


def _machine_text(row: SupervisorRow) -> str:
    warm = _warm(row)
    if warm is None or warm.machine_mb is None:
        return "-"
    return format_size(warm.machine_mb * MIB)


def _held_why(row: SupervisorRow) -> str:
    warm = _warm(row)
    return "-" if warm is None or warm.why is None else warm.why


def outage_text(registered: SupervisorSummary | None) -> Text:
    """What the supervisor does through an outage of ZooKeeper; why it fences when it was
    told to ride (its list of servers does not match the ensemble), in yellow."""
    if registered is None or registered.zookeeper_outage is None:
        return Text("-")
    if registered.ride_unavailable is not None:
        return Text(f"fence ({registered.ride_unavailable})", style="yellow")
    return Text(registered.zookeeper_outage)


SUPERVISOR_COLUMNS: list[Column[SupervisorRow]] = [
    Column("supervisor", lambda r: r.id),
    Column("host", lambda r: "(not registered)" if r.registered is None else r.registered.host),
    Column("slots", lambda r: _registered(r, "slots")),
    Column("used", lambda r: _registered(r, "used")),
    Column("warm", lambda r: warm_text(_warm(r))),
    Column("scheduling", lambda r: scheduling_text(r.cordon)),
    Column("zk outage", lambda r: outage_text(r.registered)),
    Column("standby workers", lambda r: standby_text(_warm(r))),
    Column("memory", _machine_text, wide=True),
    Column("warm held because", _held_why, wide=True),
    Column("endpoint", lambda r: (r.registered and r.registered.endpoint) or "-", wide=True),
    Column(
        "started",
        lambda r: when(r.registered.started) if r.registered and r.registered.started else "-",
        wide=True,
    ),
    Column("cordoned", lambda r: "-" if r.cordon is None else when(r.cordon.at), wide=True),
    Column("by", lambda r: (r.cordon and r.cordon.by) or "-", wide=True),
]


def uptime(secs: int) -> str:
    days, rest = divmod(secs, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"
