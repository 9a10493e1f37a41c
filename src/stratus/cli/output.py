"""How the client verbs print: rich tables on a terminal, tab-separated lines when piped,
never wrapped at 80 columns, and every time in UTC as ISO 8601.

A table on a terminal is rich's, as wide as the terminal. When stdout is not a terminal it
is plain text that ``cut -f`` and ``awk -F'\\t'`` read: the title as a ``# `` line, the
header, then one tab-separated line per row, each cell's text without styles (a tab or a
line break in a cell becomes a space, another control character its escape)::

    # pipelines
    pipeline	status	digest	size	submitted	epoch
    etl	ACTIVE	3f2a9c01b7de	1.8 KiB	2026-11-25T00:34:01Z	4
"""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from stratus.api.echo import printable


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
