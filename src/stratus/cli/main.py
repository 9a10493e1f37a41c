"""The ``stratus`` command: every daemon and every client verb.

``--config FILE`` (or ``STRATUS_CONF``) and any number of ``-c key=value`` overrides go before
the verb or after it; errors are one line on stderr (or JSON under ``--json``) and the exit
code of their class (``exit_codes.py``).

Each verb's module is imported only when that verb runs or is completed (``lazy_group.py``):
``stratus --version``, ``stratus --help`` and completing a verb's name import click and this
table, not the client, the daemons or their libraries. A new verb is one row of ``COMMANDS``
(``tests/cluster/test_cli_start.py`` checks its help line against the command's own).
"""

from __future__ import annotations

import click

import stratus
from stratus.cli.lazy_group import LazyCommand, LazyGroup
from stratus.cli.options import StratusGroup, group_config_options

_CLIENT = "stratus.cli.client_commands"

# name: where the command is, and its one-line help (checked against the command's own)
COMMANDS = {
    "activate": LazyCommand(f"{_CLIENT}:activate", "Make pipeline NAME ACTIVE."),
    "cluster": LazyCommand(
        f"{_CLIENT}:cluster", "Show the nimbuses (the leader marked), supervisors and pipelines."
    ),
    "completion": LazyCommand(
        "stratus.cli.completion_command:completion",
        "Print the script that completes stratus commands in SHELL (bash, zsh or fish).",
    ),
    "cordon": LazyCommand(
        f"{_CLIENT}:cordon",
        "Give SUPERVISOR no new pipeline; it keeps those it runs (needs an admin).",
    ),
    "deactivate": LazyCommand(f"{_CLIENT}:deactivate", "Make pipeline NAME INACTIVE."),
    "drain": LazyCommand(
        f"{_CLIENT}:drain",
        "Cordon SUPERVISOR and move its pipelines to supervisors with room (needs an admin).",
    ),
    "elect": LazyCommand(
        "stratus.cli.elect_command:elect",
        "Run COMMAND only while this process holds leadership of GROUP.",
    ),
    "haadmin": LazyCommand(
        "stratus.cli.haadmin_command:haadmin",
        "Read and steer HA services by hand (Hadoop's haadmin verbs).",
    ),
    "history": LazyCommand(
        f"{_CLIENT}:history",
        "Show where pipeline NAME ran: its newest assignment changes, newest first.",
    ),
    "kill": LazyCommand(
        f"{_CLIENT}:kill",
        "Kill pipeline NAME; its record is removed after the wait, its checkpoints kept.",
    ),
    "leader": LazyCommand(f"{_CLIENT}:leader", "Show which nimbus leads, and in which epoch."),
    "list": LazyCommand(f"{_CLIENT}:list_pipelines", "List every pipeline."),
    "local": LazyCommand(
        "stratus.cli.local_command:local",
        "Run a whole stratus cluster on this machine, with the examples on Spark.",
    ),
    "logs": LazyCommand(
        f"{_CLIENT}:logs",
        "Print a run's log of pipeline NAME (the newest by default), read through any nimbus "
        "from the supervisor that ran it.",
    ),
    "nimbus": LazyCommand(
        "stratus.cli.nimbus_command:nimbus",
        "Run a nimbus: the HTTP API, and a place in the leader election.",
    ),
    "pacemaker": LazyCommand(
        "stratus.cli.pacemaker_command:pacemaker",
        "Run a pacemaker, the in-memory heartbeat store, until SIGINT or SIGTERM.",
    ),
    "rebalance": LazyCommand(
        f"{_CLIENT}:rebalance",
        "Merge --conf keys into pipeline NAME's conf; it restarts with them.",
    ),
    "restart": LazyCommand(
        f"{_CLIENT}:restart",
        "Run pipeline NAME again with its current version and checkpoint: a FAILED or "
        "FINISHED pipeline becomes ACTIVE; an ACTIVE one's worker restarts.",
    ),
    "rollback": LazyCommand(
        f"{_CLIENT}:rollback",
        "Run a kept version of pipeline NAME again, with the conf it ran with, from its "
        "checkpoint; a version no longer kept is an error that lists the kept ones.",
    ),
    "runs": LazyCommand(
        f"{_CLIENT}:runs",
        "Show the runs of pipeline NAME, newest first: one worker process's life each.",
    ),
    "status": LazyCommand(
        f"{_CLIENT}:status",
        "Show pipeline NAME, its workers and their last crash; once it runs nowhere, its last "
        "run (and, FAILED, its restarts and crashes).",
    ),
    "submit": LazyCommand(
        f"{_CLIENT}:submit",
        "Check and upload PACKAGE (a directory or a .zip with a stratus.yaml) and start it.",
    ),
    "supervisor": LazyCommand(
        "stratus.cli.supervisor_command:supervisor",
        "Run a supervisor: the workers of the pipelines the leader assigns to it.",
    ),
    "terms": LazyCommand(
        f"{_CLIENT}:terms",
        "Show the newest terms of leadership: epoch, nimbus, start, end, failover time.",
    ),
    "token": LazyCommand(
        "stratus.cli.token_command:token",
        "Make token file lines: a new token, or the hash of one.",
    ),
    "uncordon": LazyCommand(
        f"{_CLIENT}:uncordon",
        "Let SUPERVISOR take new pipelines again; a drain under way stops (needs an admin).",
    ),
    "update": LazyCommand(
        f"{_CLIENT}:update",
        "Give pipeline NAME new code, PACKAGE, keeping its checkpoints; it restarts with it.",
    ),
    "validate": LazyCommand(
        "stratus.cli.validate_command:validate",
        "Check the pipeline package PATH (a directory or a .zip) without submitting it.",
    ),
    "version": LazyCommand(
        f"{_CLIENT}:version", "Show this install's version and, with --cluster, each nimbus's."
    ),
    "zkfc": LazyCommand(
        "stratus.cli.zkfc_command:zkfc",
        "Run the failover controller of one service until SIGINT or SIGTERM.",
    ),
    "zookeeper": LazyCommand(
        "stratus.cli.zookeeper_command:zookeeper",
        "Run a real ZooKeeper server on this machine until SIGINT or SIGTERM.",
    ),
    "zookeeper-java": LazyCommand(
        "stratus.cli.zookeeper_command:zookeeper_java",
        "Run Java with the ZooKeeper jars of the installed pyspark as its classpath.",
    ),
}


class StratusCli(LazyGroup, StratusGroup):
    """The ``stratus`` group: verbs imported when used, failures reported by their class."""


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: as click's option prints it, the version read without
    ``importlib.metadata`` (``stratus.installed_version``)."""
    if not value or ctx.resilient_parsing:
        return
    click.echo(f"stratus, version {stratus.__version__}")
    ctx.exit()


@click.group(cls=StratusCli, lazy_commands=COMMANDS)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
@group_config_options
def main() -> None:
    """stratus: a highly available control plane for PySpark data pipelines."""
