"""``stratus supervisor``: run one supervisor until a signal.

SIGTERM or SIGINT: it leaves, its workers run on for a supervisor started again to adopt
(``supervisor.worker.adopt``; false: they stop with it). SIGUSR1: it stops its workers,
then leaves (the whole cluster goes away: ``stratus local``, the tests' harnesses).

``--slots`` and ``--id`` override ``supervisor.slots`` and ``supervisor.id``. Once it runs,
the supervisor says so on stderr (``supervisor <id> running slots=<n> local=<dir>``), which
``SupervisorProcess.wait_ready`` waits for.
"""

from __future__ import annotations

import click

from stratus.cli.daemon_run import run_daemon
from stratus.cli.options import log_level_option, with_config
from stratus.config import StratusConfig, config_from_mapping
from stratus.logs import configure_daemon_logging
from stratus.rlimits import raise_open_files_limit
from stratus.settings import audit_log, log_settings
from stratus.supervisor.daemon import STOP_WITH_WORKERS, Supervisor
from stratus.supervisor.settings import SupervisorSettings

READY_LINE = "supervisor {id} running slots={slots} local={local}"
HEALTH_CHECK_SECS = 1.0


def with_overrides(
    conf: StratusConfig, *, slots: int | None, supervisor_id: str | None
) -> StratusConfig:
    """``conf`` with the command's options over it, validated like any configuration."""
    values = conf.model_dump(by_alias=True, exclude_unset=True)  # a default stays one
    if slots is not None:
        values["supervisor.slots"] = slots
    if supervisor_id is not None:
        values["supervisor.id"] = supervisor_id
    return config_from_mapping(values)


@click.command()
@click.option(
    "--slots",
    type=int,
    default=None,
    help="How many pipelines this supervisor runs at once (supervisor.slots).",
)
@click.option(
    "--id",
    "supervisor_id",
    default=None,
    metavar="NAME",
    help="Name of this supervisor, unique in the cluster (supervisor.id; default: the host name).",
)
@log_level_option
@with_config
def supervisor(conf: StratusConfig, slots: int | None, supervisor_id: str | None) -> None:
    """Run a supervisor: the workers of the pipelines the leader assigns to it."""
    conf = with_overrides(conf, slots=slots, supervisor_id=supervisor_id)
    configure_daemon_logging(log_settings(conf))
    audit_log(conf)
    raise_open_files_limit()
    run_daemon(
        Supervisor(SupervisorSettings.from_config(conf)),
        ready=lambda d: READY_LINE.format(id=d.id, slots=d.slots, local=d.local_dir),
        check=_control_loop_alive,
        period_secs=HEALTH_CHECK_SECS,
        reload=lambda d: d.settings.http.policy.reload(),
        stop_signals={STOP_WITH_WORKERS: Supervisor.stop_workers_too},
    )


def _control_loop_alive(daemon: Supervisor) -> None:
    if not daemon.healthy():
        raise click.ClickException(
            f"supervisor {daemon.id}: its control loop died (see the log); stopping"
        )
