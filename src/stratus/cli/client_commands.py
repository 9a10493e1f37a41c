"""The client verbs of ``stratus``: submit, update, list, status, logs, kill, activate, deactivate,
rebalance, cluster and leader; cordon, uncordon and drain of a supervisor.

    stratus submit examples/wordcount --conf spark.sql.shuffle.partitions=4
    stratus update wordcount examples/wordcount
    stratus list -c nimbus.seeds=10.0.0.1:6627,10.0.0.2:6627
    stratus kill wordcount --wait 0
    stratus cluster -o yaml
    stratus status wordcount -o wide --watch
    stratus drain s1 --drain-timeout 600

Each verb talks to the nimbuses of ``nimbus.seeds`` through ``NimbusClient``, which finds the
leader and retries across a failover until ``client.retry.deadline.secs``. Output is readable
tables, or with ``--json`` the JSON record(s) of the API (``client_output.py``); ``list``,
``status`` and ``cluster`` take ``-o wide|json|yaml`` (``output.py``, and their columns in
``pipeline_views.py`` and ``cluster_view.py``), ``list`` and ``status`` ``--watch``
(``watch.py``). The options the verbs share and their client are ``client_options.py``. A
NAME or SUPERVISOR argument completes from the cluster (``completion.py``). A failure is one
line on stderr and exit code 1 (every error the client raises is a ``StratusError``, which
``StratusGroup`` reports). ``-c`` sets stratus configuration, so a pipeline's conf is
``--conf KEY=VALUE``, each value parsed as a YAML scalar as configuration overrides are.

A caller that invokes the command group with ``obj=`` an ``httpx`` transport (tests do) gets
clients that use it instead of the network.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from stratus import __version__
from stratus.api.echo import printable
from stratus.api.records import (
    CordonStatus,
    NimbusSummary,
    PipelineStatus,
)
from stratus.api.redaction import redact_conf
from stratus.cli.client_options import conf_option, json_option, nimbus_client, request_id_option
from stratus.cli.client_output import (
    drain_line,
    history_table,
    print_change,
    print_cordon,
    print_json,
    print_killed,
    print_log,
    print_submitted,
    print_updated,
    terms_table,
    wait_purged,
    wait_replicated,
)
from stratus.cli.cluster_view import leader_line, show_cluster
from stratus.cli.completion import complete_pipelines, complete_supervisors
from stratus.cli.options import timeout_option, with_config
from stratus.cli.output import (
    DIGEST_PREFIX,
    OutputFormat,
    console,
    output_option,
    print_table,
    render,
    when,
)
from stratus.cli.pipeline_views import (
    placements,
    show_pipelines,
    show_status,
    standby_cells,
)
from stratus.cli.rollout_wait import follow_rollout, rollout_wait_options
from stratus.cli.run_output import parse_since, run_columns, runs_since
from stratus.cli.watch import show_or_watch, watch_option
from stratus.client import NimbusClient
from stratus.config import StratusConfig

F = TypeVar("F", bound=Callable[..., Any])

STATUS_RUNS = 20  # runs read for the status of a pipeline that runs nowhere


# ---------------------------------------------------------------------- commands


@click.command()
@click.argument("package", type=click.Path(exists=True, path_type=Path))
@click.option("--name", default=None, help="Pipeline name [default: the manifest's].")
@conf_option(required=False)
@click.option(
    "--request-id",
    default=None,
    help="Id that makes a re-run of this command return the pipeline it created [default: new].",
)
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait while the pipeline is PENDING (its code short of the minimum replication).",
)
@json_option
@timeout_option
@with_config
def submit(
    *,
    package: Path,
    name: str | None,
    pipeline_conf: dict[str, Any],
    request_id: str | None,
    wait: bool,
    as_json: bool,
    conf: StratusConfig,
) -> None:
    """Check and upload PACKAGE (a directory or a .zip with a stratus.yaml) and start it."""
    with nimbus_client(conf) as client:
        record = client.submit(name, package, pipeline_conf, request_id=request_id)
        if wait and record.status is PipelineStatus.PENDING:
            record = wait_replicated(client, record, quiet=as_json)
    print_submitted(record, as_json)


@click.command()
@click.argument("name", shell_complete=complete_pipelines)
@click.argument("package", type=click.Path(exists=True, path_type=Path))
@conf_option(required=False)
@request_id_option
@rollout_wait_options
@json_option
@timeout_option
@with_config
def update(
    *,
    name: str,
    package: Path,
    pipeline_conf: dict[str, Any],
    request_id: str | None,
    wait: bool,
    wait_timeout: float,
    as_json: bool,
    conf: StratusConfig,
) -> None:
    """Give pipeline NAME new code, PACKAGE, keeping its checkpoints; it restarts with it.

    With --wait (the default) the command returns once the new version runs: its code at
    the minimum replication, its entry point imported by the supervisor, its worker
    RUNNING; an update refused or rolled back exits 1 with the reason."""
    with nimbus_client(conf) as client:
        record = client.update(name, package, pipeline_conf, request_id=request_id)
        if wait and record.update is not None:
            record = client.wait_updated(record)
        record = follow_rollout(client, record, wait, wait_timeout, quiet=as_json)
    print_updated(record, as_json)


@click.command("list")
@output_option
@watch_option
@timeout_option
@with_config
def list_pipelines(output: OutputFormat, watch: float | None, conf: StratusConfig) -> None:
    """List every pipeline."""
    with nimbus_client(conf) as client:

        def show(out: Console) -> None:
            where, standby = _placements(client, output)
            show_pipelines(out, output, client.list_pipelines(), where=where, standby=standby)

        show_or_watch(show, watch=watch, output=output, command="stratus list")


@click.command()
@click.argument("name", shell_complete=complete_pipelines)
@output_option
@watch_option
@timeout_option
@with_config
def status(name: str, output: OutputFormat, watch: float | None, conf: StratusConfig) -> None:
    """Show pipeline NAME, its workers and their last crash; once it runs nowhere, its
    last run (and, FAILED, its restarts and crashes)."""
    with nimbus_client(conf) as client:

        def show(out: Console) -> None:
            record, workers = client.status(name), client.workers(name)
            ended = workers.assignment is None and not workers.workers
            runs = client.runs(name, limit=STATUS_RUNS).runs if ended else []
            show_status(out, output, record, workers, runs)

        show_or_watch(show, watch=watch, output=output, command=f"stratus status {name}")


def _placements(
    client: NimbusClient, output: OutputFormat
) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """Where each pipeline runs and its standby worker, for ``-o wide``'s supervisor and
    standby columns (one more call)."""
    if output is not OutputFormat.WIDE:
        return None, None
    overview = client.workers_overview()
    return placements(overview), standby_cells(overview)


@click.command()
@click.argument("name", shell_complete=complete_pipelines)
@json_option
@timeout_option
@with_config
def history(name: str, as_json: bool, conf: StratusConfig) -> None:
    """Show where pipeline NAME ran: its newest assignment changes, newest first."""
    with nimbus_client(conf) as client:
        changes = client.history(name)
    if as_json:
        print_json(changes)
        return
    print_table(console(), history_table(changes))


@click.command()
@click.argument("name", shell_complete=complete_pipelines)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many.")
@output_option
@timeout_option
@with_config
def runs(name: str, limit: int | None, output: OutputFormat, conf: StratusConfig) -> None:
    """Show the runs of pipeline NAME, newest first: one worker process's life each."""
    with nimbus_client(conf) as client:
        found = client.runs(name, limit=limit)
    columns = run_columns(time.time())
    render(console(), output, found.runs, columns, title=f"runs of {found.pipeline}")


@click.command()
@click.argument("name", shell_complete=complete_pipelines)
@click.option(
    "-f", "--follow", is_flag=True, help="Keep printing new lines of the newest run until it ends."
)
@click.option("--previous", is_flag=True, help="The log of the run before the newest.")
@click.option("--run", "run", type=click.IntRange(min=0), default=None, help="Run N's log.")
@click.option(
    "--tail", type=click.IntRange(min=0), default=None, help="Only the last N lines of the run."
)
@click.option(
    "--since",
    default=None,
    metavar="DURATION",
    help="The logs of every run that ran within DURATION (30s, 10m, 2h, 1d), oldest first.",
)
@timeout_option
@with_config
def logs(
    name: str,
    *,
    follow: bool,
    previous: bool,
    run: int | None,
    tail: int | None,
    since: str | None,
    conf: StratusConfig,
) -> None:
    """Print a run's log of pipeline NAME (the newest by default), read through any nimbus
    from the supervisor that ran it."""
    if sum([previous, run is not None, since is not None]) > 1:
        raise click.UsageError("give at most one of --run, --previous and --since")
    if since is not None and follow:
        raise click.UsageError("--since prints ended runs whole: -f follows the newest run alone")
    cutoff = time.time() - parse_since(since) if since is not None else None
    with nimbus_client(conf) as client:
        if cutoff is None:
            print_log(client.logs(name, previous=previous, follow=follow, run=run, tail=tail))
            return
        for shown in runs_since(client.runs(name).runs, cutoff):
            click.echo(f"==== run {shown.run} on {shown.supervisor}, started {when(shown.started)}")
            print_log(client.logs(name, run=shown.run, tail=tail))


PURGE_WAIT_MARGIN_SECS = 300.0  # --wait-timeout's default: the kill's wait and this


@click.command()
@click.argument("name", shell_complete=complete_pipelines)
@click.option(
    "--wait",
    "wait_secs",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds until the pipeline's record is removed [default: pipeline.kill.wait.secs].",
)
@click.option(
    "--purge",
    is_flag=True,
    help="Delete the pipeline's checkpoints too (kept otherwise: a later submit resumes).",
)
@click.option(
    "--no-wait",
    is_flag=True,
    help="With --purge: return at once, the removal and the purge pending, instead of "
    "waiting until the checkpoints are deleted.",
)
@click.option(
    "--wait-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="With --purge: how long to wait for the removal and the purge before failing "
    f"[default: the kill's wait + {PURGE_WAIT_MARGIN_SECS:g}].",
)
@json_option
@timeout_option
@with_config
def kill(
    *,
    name: str,
    wait_secs: float | None,
    purge: bool,
    no_wait: bool,
    wait_timeout: float | None,
    as_json: bool,
    conf: StratusConfig,
) -> None:
    """Kill pipeline NAME; its record is removed after the wait, its checkpoints kept.

    With --purge its checkpoints are deleted too, by whoever can write them (a supervisor,
    or the leader), and the command says killed only once the record is removed and the
    checkpoints are gone; a purge that fails is reported with its reasons (exit 1).
    """
    with nimbus_client(conf) as client:
        record = client.kill(name, wait_secs, purge=purge)
        if purge and not no_wait:
            wait = conf.pipeline_kill_wait_secs if wait_secs is None else wait_secs
            timeout = wait + PURGE_WAIT_MARGIN_SECS if wait_timeout is None else wait_timeout
            wait_purged(client, name, timeout, quiet=as_json)
    print_killed(name, record, as_json, purge=purge, waited=purge and not no_wait)


@click.command()
@click.argument("name", shell_complete=complete_pipelines)
@json_option
@timeout_option
@with_config
def activate(name: str, as_json: bool, conf: StratusConfig) -> None:
    """Make pipeline NAME ACTIVE."""
    with nimbus_client(conf) as client:
        print_change(client.activate(name), as_json)


@click.command()
@click.argument("name", shell_complete=complete_pipelines)
@json_option
@timeout_option
@with_config
def deactivate(name: str, as_json: bool, conf: StratusConfig) -> None:
    """Make pipeline NAME INACTIVE."""
    with nimbus_client(conf) as client:
        print_change(client.deactivate(name), as_json)


@click.command()
@click.argument("name", shell_complete=complete_pipelines)
@conf_option(required=True)
@request_id_option
@json_option
@timeout_option
@with_config
def rebalance(
    name: str,
    pipeline_conf: dict[str, Any],
    request_id: str | None,
    as_json: bool,
    conf: StratusConfig,
) -> None:
    """Merge --conf keys into pipeline NAME's conf; it restarts with them."""
    with nimbus_client(conf) as client:
        record = client.rebalance(name, pipeline_conf, request_id=request_id)
    if as_json:
        print_json(record)
        return
    console().print(
        f"rebalanced pipeline {record.name} (rebalance {record.rebalances}); "
        f"conf: {json.dumps(redact_conf(record.conf), sort_keys=True)}"
    )


@click.command()
@click.argument("name", shell_complete=complete_pipelines)
@click.option(
    "--to-version",
    type=click.IntRange(min=1),
    default=None,
    help="The kept version to run [default: the version that ran before the current].",
)
@request_id_option
@rollout_wait_options
@json_option
@timeout_option
@with_config
def rollback(
    *,
    name: str,
    to_version: int | None,
    request_id: str | None,
    wait: bool,
    wait_timeout: float,
    as_json: bool,
    conf: StratusConfig,
) -> None:
    """Run a kept version of pipeline NAME again, with the conf it ran with, from its
    checkpoint; a version no longer kept is an error that lists the kept ones."""
    with nimbus_client(conf) as client:
        record = client.rollback(name, to_version, request_id=request_id)
        record = follow_rollout(client, record, wait, wait_timeout, quiet=as_json)
    if as_json:
        print_json(record)
        return
    console().print(
        f"pipeline {record.name} runs version {record.version} (package "
        f"{record.digest[:DIGEST_PREFIX]}): {printable(record.reason or '')}"
    )


@click.command()
@click.argument("name", shell_complete=complete_pipelines)
@request_id_option
@rollout_wait_options
@json_option
@timeout_option
@with_config
def restart(
    *,
    name: str,
    request_id: str | None,
    wait: bool,
    wait_timeout: float,
    as_json: bool,
    conf: StratusConfig,
) -> None:
    """Run pipeline NAME again with its current version and checkpoint: a FAILED or
    FINISHED pipeline becomes ACTIVE; an ACTIVE one's worker restarts."""
    with nimbus_client(conf) as client:
        record = client.restart(name, request_id=request_id)
        record = follow_rollout(client, record, wait, wait_timeout, quiet=as_json)
    if as_json:
        print_json(record)
        return
    console().print(
        f"restarted pipeline {record.name}: version {record.version}, generation "
        f"{record.generation}, {record.status.value}"
    )


@click.command()
@output_option
@timeout_option
@with_config
def cluster(output: OutputFormat, conf: StratusConfig) -> None:
    """Show the nimbuses (the leader marked), supervisors and pipelines."""
    with nimbus_client(conf) as client:
        summary = client.cluster()
        where, standby = _placements(client, output)
    show_cluster(console(), output, summary, where=where, standby=standby)


@click.command()
@json_option
@timeout_option
@with_config
def leader(as_json: bool, conf: StratusConfig) -> None:
    """Show which nimbus leads, and in which epoch."""
    with nimbus_client(conf) as client:
        info = client.leader()
    if as_json:
        print_json(info)
        return
    console().print(leader_line(info))


@click.command()
@json_option
@timeout_option
@with_config
def terms(as_json: bool, conf: StratusConfig) -> None:
    """Show the newest terms of leadership: epoch, nimbus, start, end, failover time."""
    with nimbus_client(conf) as client:
        found = client.leader_terms()
    if as_json:
        print_json(found)
        return
    print_table(console(), terms_table(found))


@click.command()
@click.argument("supervisor", shell_complete=complete_supervisors)
@json_option
@timeout_option
@with_config
def cordon(supervisor: str, as_json: bool, conf: StratusConfig) -> None:
    """Give SUPERVISOR no new pipeline; it keeps those it runs (needs an admin)."""
    with nimbus_client(conf) as client:
        print_cordon(client.cordon(supervisor), as_json)


@click.command()
@click.argument("supervisor", shell_complete=complete_supervisors)
@json_option
@timeout_option
@with_config
def uncordon(supervisor: str, as_json: bool, conf: StratusConfig) -> None:
    """Let SUPERVISOR take new pipelines again; a drain under way stops (needs an admin)."""
    with nimbus_client(conf) as client:
        print_cordon(client.uncordon(supervisor), as_json)


@click.command()
@click.argument("supervisor", shell_complete=complete_supervisors)
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Report progress until SUPERVISOR holds no pipeline; --no-wait returns at once.",
)
@click.option(
    "--drain-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Give up waiting after this long (the drain goes on) [default: no limit].",
)
@json_option
@timeout_option
@with_config
def drain(
    supervisor: str, wait: bool, drain_timeout: float | None, as_json: bool, conf: StratusConfig
) -> None:
    """Cordon SUPERVISOR and move its pipelines to supervisors with room (needs an admin).

    Each pipeline's old worker stops before its new one starts, preferably on a supervisor
    with a warm worker ready. Exits non-zero naming the pipelines that find no room."""
    with nimbus_client(conf) as client:
        status = client.drain(supervisor)
        if wait:
            shown: list[tuple[list[str], list[str]]] = []

            def progress(seen: CordonStatus) -> None:
                if as_json or shown[-1:] == [(seen.remaining, seen.moving)]:
                    return
                shown.append((seen.remaining, seen.moving))
                console().print(drain_line(seen))

            status = client.wait_drained(supervisor, timeout=drain_timeout, on_progress=progress)
    print_cordon(status, as_json)


@click.command()
@click.option(
    "--cluster",
    "ask_cluster",
    is_flag=True,
    help="Also ask the nimbuses theirs (the leader's first): a rolling upgrade shows both.",
)
@json_option
@timeout_option
@with_config
def version(ask_cluster: bool, as_json: bool, conf: StratusConfig) -> None:
    """Show this install's version and, with --cluster, each nimbus's."""
    nimbuses: list[NimbusSummary] = []
    if ask_cluster:
        with nimbus_client(conf) as client:
            nimbuses = sorted(client.cluster().nimbuses, key=lambda n: not n.is_leader)
    if as_json:
        shown = {"client": __version__}
        if ask_cluster:
            shown |= {f"{n.host}:{n.port}": n.version for n in nimbuses}
        click.echo(json.dumps(shown, indent=2))
        return
    click.echo(f"client {__version__}")
    for nimbus in nimbuses:
        role = "leader" if nimbus.is_leader else "standby"
        click.echo(f"nimbus {nimbus.host}:{nimbus.port} {nimbus.version} ({role})")
