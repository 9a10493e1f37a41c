"""Completion of the names the cluster knows: pipelines (``stratus status <Tab>``) and
supervisors (``stratus drain <Tab>``).

The names come from the nimbuses of the command line's configuration (its ``--config``,
``-c`` and ``STRATUS_CONF``, before the verb or after it), in one call without retries,
made in a thread that completion waits for at most ``COMPLETION_TIMEOUT_SECS``. When no
nimbus answers by then, or anything fails (no configuration, a refused token), completion
offers no name and prints nothing: the shell is never held up, nor written over::

    @click.argument("name", shell_complete=complete_pipelines)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import click
import httpx
from click.shell_completion import CompletionItem

from stratus.cli.options import GROUP_CONFIG, GROUP_OVERRIDES, command_config
from stratus.client import NimbusClient
from stratus.client_settings import client_auth

COMPLETION_TIMEOUT_SECS = 1.0  # the longest a Tab waits for the cluster's names


def complete_pipelines(
    ctx: click.Context, _param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The names of the pipelines that begin with ``incomplete``."""
    return _complete(ctx, incomplete, pipeline_names)


def complete_supervisors(
    ctx: click.Context, _param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The ids of the supervisors (registered or cordoned) that begin with ``incomplete``."""
    return _complete(ctx, incomplete, supervisor_names)


def pipeline_names(client: NimbusClient) -> list[str]:
    return [record.name for record in client.list_pipelines()]


def supervisor_names(client: NimbusClient) -> list[str]:
    summary = client.cluster()
    return sorted({s.id for s in summary.supervisors} | {c.supervisor for c in summary.cordons})


def _complete(
    ctx: click.Context, incomplete: str, names_of: Callable[[NimbusClient], list[str]]
) -> list[CompletionItem]:
    names = within(COMPLETION_TIMEOUT_SECS, lambda: _ask(ctx, names_of))
    return [CompletionItem(name) for name in names or [] if name.startswith(incomplete)]


def _ask(ctx: click.Context, names_of: Callable[[NimbusClient], list[str]]) -> list[str]:
    """The names, from the nimbuses the command line would ask, in one attempt."""
    conf = command_config(
        ctx.params.get("config_path"),
        tuple(ctx.params.get("overrides") or ()),
        meta={key: ctx.meta[key] for key in (GROUP_CONFIG, GROUP_OVERRIDES) if key in ctx.meta},
    )
    with NimbusClient(
        conf.nimbus_seeds,
        retry_deadline=0.0,
        request_timeout=COMPLETION_TIMEOUT_SECS,
        auth=client_auth(conf),
        transport=ctx.find_object(httpx.BaseTransport),
    ) as client:
        return names_of(client)


def within(timeout: float, ask: Callable[[], list[str]]) -> list[str] | None:
    """``ask()``'s answer if it comes within ``timeout`` seconds; None if it fails or is
    late (its thread is a daemon: the process does not wait for it at exit)."""
    answers: list[list[str]] = []

    def run() -> None:
        with contextlib.suppress(Exception):
            answers.append(ask())

    thread = threading.Thread(target=run, name="stratus-completion", daemon=True)
    thread.start()
    thread.join(timeout)
    return answers[0] if answers else None
