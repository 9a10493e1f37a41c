"""Options that every ``stratus`` command shares, and the error handling they need."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from stratus.config import load_config
from stratus.errors import StratusError

F = TypeVar("F", bound=Callable[..., Any])


class StratusGroup(click.Group):
    """A click group that turns every ``StratusError`` into one clear line and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except StratusError as exc:
            raise click.ClickException(str(exc)) from None


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
            raise click.ClickException(str(exc)) from None
        return func(*args, conf=conf, **kw)

    return wrapper  # type: ignore[return-value]
