"""Options that every ``stratus`` command shares, and the error handling they need.

``--config FILE`` and ``-c KEY=VALUE`` are accepted before the verb and after it, and
``--timeout SECONDS`` (``client.retry.deadline.secs``) too for the client verbs: the
command's ``--config`` wins over the group's, and its ``-c`` come after the group's, so
``stratus -c nimbus.seeds=a:1 list -c nimbus.seeds=b:1`` asks ``b:1``.

A failure ends the command with the exit code of its class (``exit_codes.py``): ``Error:
message`` on stderr, or with ``--json`` (or ``-o json``) on the command line one JSON object
on stdout.

This module is loaded by ``stratus --version``, ``--help`` and every completion: it imports
click alone at its top, and the configuration and the exit codes only where they are used.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from stratus.errors import StratusError

if TYPE_CHECKING:
    from stratus.config import StratusConfig

F = TypeVar("F", bound=Callable[..., Any])

JSON_MODE = "stratus.json"  # ctx.meta key: the command line asks for JSON output
GROUP_CONFIG = "stratus.config"  # ctx.meta key: the group's --config
GROUP_OVERRIDES = "stratus.overrides"  # ctx.meta key: the group's -c, in order
TIMEOUT = "stratus.timeout"  # ctx.meta key: --timeout, before or after the verb
TIMEOUT_KEY = "client.retry.deadline.secs"
LOG_LEVEL = "stratus.log.level"  # ctx.meta key: a daemon's --log-level
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class StratusGroup(click.Group):
    """A click group that reports every failure by its class: exit code, text or JSON."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Known before the sub-command parses its own options, so that its usage errors are
        # reported as JSON too; a command's arguments after ``--`` are not ours.
        own = args[: args.index("--")] if "--" in args else args
        ctx.meta[JSON_MODE] = asks_for_json(own)
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:  # an option before the verb
            if not ctx.meta[JSON_MODE]:
                raise
            from stratus.cli.exit_codes import CommandFailed  # noqa: PLC0415 (fast start)

            raise CommandFailed(exc, as_json=True) from None

    def invoke(self, ctx: click.Context) -> Any:
        from stratus.cli.exit_codes import CommandFailed  # noqa: PLC0415 (fast start)

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


def asks_for_json(args: list[str]) -> bool:
    """Whether a command line asks for JSON: ``--json``, ``-o json``, ``-ojson``,
    ``--output json`` or ``--output=json``."""
    spelled = ("--json", "-ojson", "--output=json")
    pairs = itertools.pairwise([*args, ""])
    return any(arg in spelled or (arg in ("-o", "--output") and to == "json") for arg, to in pairs)


def json_mode() -> bool:
    """Whether the running command was asked for ``--json``."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(JSON_MODE, False))


def _remember(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """A callback that keeps an option's value in ``ctx.meta`` (shared by the group and the
    command it runs) when it is given."""

    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value not in (None, ()):
            ctx.meta[key] = value

    return callback


def group_config_options(func: F) -> F:
    """``--config``, ``-c`` and ``--timeout`` before the verb, kept for ``with_config``."""
    func = click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        expose_value=False,
        callback=_remember(TIMEOUT),
        metavar="SECONDS",
        help=f"How long a client verb retries toward a nimbus ({TIMEOUT_KEY}).",
    )(func)
    func = click.option(
        "-c",
        "overrides",
        multiple=True,
        expose_value=False,
        callback=_remember(GROUP_OVERRIDES),
        metavar="KEY=VALUE",
        help="Override one configuration key for the command; may be repeated.",
    )(func)
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        envvar="STRATUS_CONF",
        expose_value=False,
        callback=_remember(GROUP_CONFIG),
        help="YAML configuration file for the command (also STRATUS_CONF).",
    )(func)


def timeout_option(func: F) -> F:
    """``--timeout SECONDS`` after a client verb: ``client.retry.deadline.secs``."""
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        expose_value=False,
        callback=_remember(TIMEOUT),
        metavar="SECONDS",
        help=f"How long to retry toward a nimbus before giving up ({TIMEOUT_KEY}).",
    )(func)


def log_level_option(func: F) -> F:
    """``--log-level LEVEL`` of a daemon: ``log.level``."""
    return click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        expose_value=False,
        callback=_remember(LOG_LEVEL),
        help="Lowest level of the lines logged (log.level) [default: info].",
    )(func)


def command_config(
    config_path: str | None, overrides: tuple[str, ...], meta: dict[str, Any] | None = None
) -> StratusConfig:
    """The configuration of the running command: its ``--config`` or the group's, the
    group's ``-c``, its own, then ``--timeout`` and ``--log-level`` (the group's from
    ``meta``, by default the running command's context)."""
    if meta is None:
        meta = ctx.meta if (ctx := click.get_current_context(silent=True)) is not None else {}
    path = config_path or meta.get(GROUP_CONFIG)
    every = [*meta.get(GROUP_OVERRIDES, ()), *overrides]
    if meta.get(TIMEOUT) is not None:
        every.append(f"{TIMEOUT_KEY}={meta[TIMEOUT]}")
    if meta.get(LOG_LEVEL) is not None:
        every.append(f"log.level={meta[LOG_LEVEL].lower()}")
    from stratus.config import load_config  # noqa: PLC0415 (fast start)

    return load_config(path, every, environ={})


def with_config(func: F) -> F:
    """Add ``--config`` and ``-c key=value`` to a command and pass it ``conf: StratusConfig``,
    merged with those given before the verb."""

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
        from stratus.cli.exit_codes import CommandFailed  # noqa: PLC0415 (fast start)

        try:
            conf = command_config(config_path, overrides)
        except StratusError as exc:
            raise CommandFailed(exc, as_json=json_mode()) from None
        return func(*args, conf=conf, **kw)

    return wrapper  # type: ignore[return-value]
