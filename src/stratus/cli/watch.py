"""``--watch``: a verb's output again each time it changes, until Ctrl-C.

As ``watch`` does rather than as ``kubectl get -w``: every ``--interval`` seconds (2 by
default) the verb asks the cluster again and renders its whole output, in the format ``-o``
chose, in memory. When that differs from what it last showed, it shows it:

- on a terminal, the screen is cleared and the output drawn again under a header line
  (``every 2s: stratus list    2026-11-25T00:34:01Z``);
- otherwise it is appended: each change one more table under its ``# `` title, one more
  JSON document, or one more YAML document after ``---``, so a script reads one document
  per change and nothing while nothing changes.

Only the last output is kept, whatever the length of the watch. Ctrl-C (SIGINT) ends it with
exit code 0; an error ends it as it ends the verb (``client.retry.deadline.secs`` of retries
first, then the exit code of its class)::

    @watch_option
    def list_pipelines(output: OutputFormat, watch: float | None, ...) -> None:
        show_or_watch(lambda out: show_pipelines(out, output, client.list_pipelines()),
                      watch=watch, output=output, command="stratus list")
"""

from __future__ import annotations

import contextlib
import functools
import io
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from stratus.cli.output import OutputFormat, console, when

F = TypeVar("F", bound=Callable[..., Any])

WATCH_INTERVAL_SECS = 2.0  # --interval's default, as watch's
MIN_INTERVAL_SECS = 0.1


def watch_option(func: F) -> F:
    """Give a verb ``-w/--watch`` and ``--interval SECONDS``, and pass it ``watch``: the
    interval when watching, else None."""

    @click.option(
        "-w", "--watch", "watching", is_flag=True, help="Show the output again whenever it changes."
    )
    @click.option(
        "--interval",
        type=click.FloatRange(min=MIN_INTERVAL_SECS),
        default=None,
        metavar="SECONDS",
        help=f"With --watch: seconds between two looks [default: {WATCH_INTERVAL_SECS:g}].",
    )
    @functools.wraps(func)
    def wrapper(*args: Any, watching: bool, interval: float | None, **kw: Any) -> Any:
        if interval is not None and not watching:
            raise click.UsageError("--interval is the pace of --watch; give --watch too")
        watch = (interval or WATCH_INTERVAL_SECS) if watching else None
        return func(*args, watch=watch, **kw)

    return wrapper  # type: ignore[return-value]


def show_or_watch(
    show: Callable[[Console], None], *, watch: float | None, output: OutputFormat, command: str
) -> None:
    """``show`` once on stdout, or with ``watch`` (seconds) again at each change until
    Ctrl-C."""
    if watch is None:
        show(console())
        return
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends a watch: not an error
        watch_output(show, console(), interval=watch, output=output, command=command)


def watch_output(
    show: Callable[[Console], None],
    out: Console,
    *,
    interval: float,
    output: OutputFormat,
    command: str,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Render ``show`` every ``interval`` seconds and show each output that differs from
    the last one; until interrupted."""
    last: str | None = None
    while True:
        text = rendered(show, like=out)
        if text != last:
            if out.is_terminal:
                redraw(out, text, f"every {interval:g}s: {command}")
            else:
                out.file.write(("---\n" if output is OutputFormat.YAML else "") + text)
                out.file.flush()
            last = text
        sleep(interval)


def rendered(show: Callable[[Console], None], *, like: Console) -> str:
    """What ``show`` prints on ``like``, as text (with its styles when ``like`` is a
    terminal)."""
    buffer = io.StringIO()
    show(
        Console(
            file=buffer,
            markup=False,
            highlight=False,
            soft_wrap=True,
            force_terminal=like.is_terminal,
            color_system=like.color_system if like.is_terminal else None,  # type: ignore[arg-type]
            width=like.width,
        )
    )
    return buffer.getvalue()


def redraw(out: Console, text: str, header: str) -> None:
    """Clear the terminal and draw ``text`` under ``header`` and the time."""
    out.clear()
    out.print(f"{header}    {when(time.time())}\n")
    out.file.write(text)
    out.file.flush()
