"""How the client verbs print: rich tables on a terminal, tab-separated lines when piped,
never wrapped at 80 columns, and every time in UTC as ISO 8601.

A table on a terminal is rich's, as wide as the terminal. When stdout is not a terminal it
is plain text that ``cut -f`` and ``awk -F'\\t'`` read: the title as a ``# `` line, the
header, then one tab-separated line per row, each cell's text without styles (a tab or a
line break in a cell becomes a space, another control character its escape)::

    # pipelines
    pipeline	status	digest	size	submitted	epoch
    etl	ACTIVE	3f2a9c01b7de	1.8 KiB	2026-11-25T00:34:01Z	4

A listing verb chooses its format as ``kubectl get`` does: ``-o wide`` (the table with more
columns), ``-o json`` or ``-o yaml`` (the API's records, as the API gives them), the table
without ``-o``; ``--json`` is ``-o json``. One decorator and one call give a verb all four::

    @output_option
    def runs(name: str, output: OutputFormat, conf: StratusConfig) -> None:
        found = ...  # the records, from the client
        render(console(), output, found, RUN_COLUMNS, title=f"runs of {name}")

where ``RUN_COLUMNS`` is a list of ``Column("run", lambda run: run.id)``, those of ``-o wide``
alone marked ``wide=True``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

import click
import yaml
from pydantic import BaseModel
from rich.console import Console, JustifyMethod, OverflowMethod, RenderableType
from rich.table import Table
from rich.text import Text

from stratus.api.echo import printable

DIGEST_PREFIX = 12  # hex digits of a package digest shown in tables
F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")


class OutputFormat(StrEnum):
    """What ``-o`` asks for; ``table`` is the default, when ``-o`` is not given."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"

    @property
    def is_document(self) -> bool:
        """JSON or YAML: the records themselves rather than a table of them."""
        return self in (OutputFormat.JSON, OutputFormat.YAML)


def output_option(func: F) -> F:
    """Give a verb ``-o wide|json|yaml`` and ``--json`` (the same as ``-o json``), and pass
    it ``output: OutputFormat``."""

    @click.option(
        "-o",
        "--output",
        "output_name",
        type=click.Choice([f.value for f in OutputFormat if f is not OutputFormat.TABLE]),
        default=None,
        help="wide: a table with more columns; json, yaml: the API's records [default: table].",
    )
    @click.option("--json", "as_json", is_flag=True, help="The same as -o json.")
    @functools.wraps(func)
    def wrapper(*args: Any, output_name: str | None, as_json: bool, **kw: Any) -> Any:
        return func(*args, output=chosen_format(output_name, as_json), **kw)

    return wrapper  # type: ignore[return-value]


def chosen_format(output_name: str | None, as_json: bool) -> OutputFormat:
    """``-o`` and ``--json`` as one format; both at once only if they agree."""
    if as_json and output_name not in (None, OutputFormat.JSON):
        raise click.UsageError(f"--json and -o {output_name} ask for two formats; give one")
    return OutputFormat.JSON if as_json else OutputFormat(output_name or OutputFormat.TABLE)


@dataclass(frozen=True)
class Column(Generic[R]):
    """One column of a table of records: its header and its cell for a record; a ``wide``
    column is shown under ``-o wide`` only."""

    header: str
    cell: Callable[[R], RenderableType]
    wide: bool = False
    justify: JustifyMethod = "left"
    overflow: OverflowMethod = "ellipsis"


def records_table(
    title: str, columns: Sequence[Column[R]], records: Sequence[R], *, wide: bool
) -> Table:
    """A table of ``records``, one row each, with the ``columns`` the format shows (the
    wide ones after the others, so that a script's ``awk '{print $2}'`` reads the same
    column in both)."""
    shown = [column for column in columns if not column.wide]
    shown += [column for column in columns if wide and column.wide]
    table = Table(title=title)
    for column in shown:
        table.add_column(column.header, justify=column.justify, overflow=column.overflow)
    for record in records:
        table.add_row(*(column.cell(record) for column in shown))
    return table


def render(
    out: Console,
    output: OutputFormat,
    records: Sequence[R],
    columns: Sequence[Column[R]],
    *,
    title: str,
    empty: str | None = None,
) -> None:
    """``records`` as ``output`` asks: a table (``empty`` instead of one without rows, if
    given), or the records themselves as JSON or YAML."""
    if output.is_document:
        print_document(out, output, [as_document(record) for record in records])
    elif not records and empty is not None:
        out.print(empty)
    else:
        print_table(out, records_table(title, columns, records, wide=output is OutputFormat.WIDE))


def as_document(value: Any) -> Any:
    """A record (a pydantic model) as the JSON value the API sends; other values as they are."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def print_document(out: Console, output: OutputFormat, document: Any) -> None:
    """A JSON value as indented JSON or as block-style YAML, its keys in the API's order;
    any character that is not plain printable ASCII escaped in both."""
    if output is OutputFormat.YAML:
        text = yaml.safe_dump(document, sort_keys=False, allow_unicode=False)
    else:
        text = json.dumps(document, indent=2) + "\n"
    out.file.write(text)


def console() -> Console:
    """stdout as the verbs print to it: no markup (names, conf values and messages are
    printed as they are) and no wrapping of long lines (a terminal wraps them itself)."""
    return Console(markup=False, highlight=False, soft_wrap=True)


def print_table(out: Console, table: Table) -> None:
    """``table`` as rich draws it on a terminal, or as tab-separated lines otherwise."""
    if out.is_terminal:
        out.print(table, soft_wrap=False)
        return
    for line in table_lines(table):
        out.file.write(line + "\n")  # as is: rich would expand the tabs into spaces


def table_lines(table: Table) -> list[str]:
    """The plain form of ``table``: ``# title``, the header (if shown), one line per row."""
    lines = [f"# {_plain(table.title)}"] if table.title else []
    if table.show_header:
        lines.append("\t".join(_plain(column.header) for column in table.columns))
    cells = [list(column.cells) for column in table.columns]
    for row in range(table.row_count):
        lines.append("\t".join(_plain(column[row]) for column in cells))
    return lines


def when(timestamp: float) -> str:
    """A wall-clock time as ISO 8601 in UTC (``2026-11-25T00:34:01Z``), the zone the status
    page shows."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _plain(cell: RenderableType | None) -> str:
    """A cell's text on one line, its control characters shown escaped."""
    text = cell.plain if isinstance(cell, Text) else "" if cell is None else str(cell)
    return printable(text.replace("\t", " ").replace("\r", " ").replace("\n", " "))
