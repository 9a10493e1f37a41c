"""``stratus elect``: run a command only while this process leads a group, self-fenced.

    stratus elect GROUP [--leaders N] [--id ID] [--log-level LEVEL] -- COMMAND ...
    stratus elect --show GROUP

The command runs under ``stratus.coordination.elected_command.ElectedCommand``. The elect
process logs as the daemons do (``log.level``, ``log.format``, ``--log-level``).
"""

from __future__ import annotations

import os
import signal
import socket
import sys

import click

from stratus.cli.options import log_level_option, with_config
from stratus.config import StratusConfig
from stratus.coordination.coordinator import Coordinator
from stratus.coordination.elected_command import ElectedCommand
from stratus.logs import configure_daemon_logging
from stratus.settings import log_settings, zk_settings
from stratus.zk.session import ZkSession


def _say(message: str) -> None:
    click.echo(f"elect: {message}", err=True)


def _show(coordinator: Coordinator, group: str) -> None:
    leaders = coordinator.get_leaders(group)
    if not leaders:
        click.echo(f"group {group}: no leader")
    for leader in leaders:
        click.echo(
            f"group {group}: slot {leader.slot} leader {leader.member_id} epoch {leader.epoch}"
        )
    candidates = coordinator.get_candidates(group)
    click.echo(f"candidates: {', '.join(candidates) if candidates else '(none)'}")


@click.command(context_settings={"ignore_unknown_options": False})
@click.argument("group")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--leaders",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="How many members lead the group at once.",
)
@click.option("--id", "member_id", default=None, help="Member id [default: host-pid].")
@click.option("--show", is_flag=True, help="Print the group's leaders and epochs, then exit.")
@log_level_option
@with_config
def elect(
    conf: StratusConfig,
    *,
    group: str,
    command: tuple[str, ...],
    leaders: int,
    member_id: str | None,
    show: bool,
) -> None:
    """Run COMMAND only while this process holds leadership of GROUP."""
    configure_daemon_logging(log_settings(conf))
    coordinator = Coordinator(ZkSession(zk_settings(conf)), owns_session=True)
    if show:
        with coordinator:
            _show(coordinator, group)
        return
    if not command:
        raise click.UsageError("give the command to run after --, or use --show")
    member = member_id or f"{socket.gethostname()}-{os.getpid()}"
    with coordinator:
        runner = ElectedCommand(
            coordinator,
            group,
            member,
            list(command),
            leaders=leaders,
            grace=conf.elect_stop_grace(),
            say=_say,
        )
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda s, _f: runner.signalled(s))
        code = runner.run()
    sys.exit(code)
