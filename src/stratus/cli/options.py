"""Options that every ``stratus`` command shares, and the error handling they need.

A failure ends the command with the exit code of its class (``exit_codes.py``): ``Error:
message`` on stderr, or with ``--json`` on the command line one JSON object on stdout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from stratus.cli.exit_codes import CommandFailed
from stratus.config import load_config
from stratus.errors import StratusError

F = TypeVar("F", bound=Callable[..., Any])

JSON_MODE = "stratus.json"  # ctx.meta key: the command line asks for JSON output


class StratusGroup(click.Group):
    """A click group that reports every failure by its class: exit code, text or JSON."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Known before the sub-command parses its own options, so that its usage errors are
        # reported as JSON too; a command's arguments after ``--`` are not ours.
        own = args[: args.index("--")] if "--" in args else args
        ctx.meta[JSON_MODE] = "--json" in own
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CommandFailed:
            raise
        except click.UsageError as exc:
            if not json_mode():
                raise
            raise CommandFailed(exc, as_json=True) from None
        except (StratusError, click.ClickException) as exc:
            raise CommandFailed(exc, as_json=json_mode()) from None


def json_mode() -> bool:
    """Whether the running command was asked for ``--json``."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(JSON_MODE, False))


def with_config(func: F) -> F:
    """Add ``--config`` and ``-c key=value`` to a command and pass it ``conf: StratusConfig``."""

    @click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        envvar="STRATUS_CONF",
        help="YAML configuration file (also STRATUS_CONF).",
    )
    @click.option(
        "-c",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override one configuration key; may be repeated.",
    )
    @functools.wraps(func)
    def wrapper(*args: Any, config_path: str | None, overrides: tuple[str, ...], **kw: Any) -> Any:
        try:
            conf = load_config(config_path, overrides, environ={})
        except StratusError as exc:
            raise CommandFailed(exc, as_json=json_mode()) from None
        return func(*args, conf=conf, **kw)

    return wrapper  # type: ignore[return-value]
