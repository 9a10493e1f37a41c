"""``--wait/--no-wait`` and ``--wait-timeout`` of the commands that give a pipeline a new
generation (``update``, ``rollback``, ``restart``): the command returns once the new
generation runs, or exits non-zero with why it did not (``NimbusClient.wait_running``)::

    @rollout_wait_options
    def rollback(..., wait: bool, wait_timeout: float, ...):
        record = follow_rollout(client, client.rollback(name), wait, wait_timeout, quiet)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from stratus.api.records import PipelineRecord
from stratus.cli.output import console
from stratus.client.nimbus_client import NimbusClient

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_WAIT_TIMEOUT_SECS = 600.0


def rollout_wait_options(func: F) -> F:
    """The options ``wait`` and ``wait_timeout``."""
    func = click.option(
        "--wait-timeout",
        type=click.FloatRange(min=0),
        default=DEFAULT_WAIT_TIMEOUT_SECS,
        show_default=True,
        help="How long --wait waits for the new version to run before failing (the change "
        "goes on).",
    )(func)
    return click.option(
        "--wait/--no-wait",
        default=True,
        show_default=True,
        help="Wait until the pipeline's worker runs the change (exit non-zero with the "
        "reason if it is rolled back or fails); --no-wait returns once it is recorded.",
    )(func)


def follow_rollout(
    client: NimbusClient, record: PipelineRecord, wait: bool, timeout: float, *, quiet: bool
) -> PipelineRecord:
    """``record`` once its generation runs (with ``wait``), else ``record`` itself."""
    if not wait or record.update is not None:
        return record
    if quiet:
        return client.wait_running(record, timeout=timeout)
    with console().status(f"waiting for pipeline {record.name} to run") as status:
        return client.wait_running(
            record,
            timeout=timeout,
            on_progress=lambda seen: status.update(seen.waiting or "running"),
        )
