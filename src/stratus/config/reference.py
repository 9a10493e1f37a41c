"""docs/configuration.md's tables of keys, written from the sections: one table per section,
one row per key (key, type, default, meaning), the meaning being the field's description.

``make docs`` rewrites the tables between the page's two markers; a test of the suite fails
when a row of the page differs from its key's::

    python -m stratus.config.reference docs/configuration.md   # what make docs runs

Edit a key's description in its section (``zookeeper.py``, ...), never in the page.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt, MinLen
from pydantic.fields import FieldInfo

from stratus.config.model import sections
from stratus.config.section import Section

BEGIN = "<!-- Written by `make docs` from src/stratus/config: edit the sections, not this. -->"
END = "<!-- End of the tables of keys. -->"
HEADER = "| key | type | default | meaning |\n|---|---|---|---|"
_CODE_SPAN = re.compile(r"(`[^`]*`)")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")  # what Markdown would read as an HTML tag
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


@dataclass(frozen=True)
class Row:
    """One key's row, its cells as the page shows them (Markdown)."""

    key: str
    type: str
    default: str
    meaning: str

    def line(self) -> str:
        return f"| {self.key} | {self.type} | {self.default} | {self.meaning} |"


def rows(section: type[Section]) -> list[Row]:
    """The rows of ``section``'s keys, in the order of its fields."""
    return [_row(field) for field in section.model_fields.values()]


def tables() -> str:
    """Every section's heading, summary and table: what goes between the markers."""
    parts = []
    for section in sections():
        summary = " ".join(inspect.cleandoc(section.__doc__ or "").split())
        lines = "\n".join(row.line() for row in rows(section))
        parts.append(f"### `{section.prefix}.*`\n\n{summary}\n\n{HEADER}\n{lines}\n")
    return "\n".join(parts)


def rewrite(page: str) -> str:
    """``page`` with the text between its markers replaced by ``tables()``."""
    before, after = _split(page)
    return f"{before}{BEGIN}\n\n{tables()}\n{END}{after}"


def documented_rows(page: str) -> list[Row]:
    """The key rows between ``page``'s markers, as written."""
    inside = page.partition(BEGIN)[2].partition(END)[0]
    found = []
    for line in inside.splitlines():
        cells = [cell.strip() for cell in _UNESCAPED_PIPE.split(line.strip())[1:-1]]
        if len(cells) == 4 and cells[0].startswith("`"):
            found.append(Row(*cells))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stratus.config.reference",
        description="Rewrite the tables of keys of a configuration page from the sections.",
    )
    parser.add_argument("page", type=Path, help="the page, docs/configuration.md")
    page = parser.parse_args(argv).page
    try:
        text = page.read_text(encoding="utf-8")
        page.write_text(rewrite(text), encoding="utf-8")
    except (OSError, ValueError) as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    return 0


def _split(page: str) -> tuple[str, str]:
    """The text before the first marker and after the second, markers excluded."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise ValueError(
            f"the page must hold the marker {BEGIN!r} once, and after it {END!r} once: "
            "the tables of keys are written between them"
        )
    before, _, rest = page.partition(BEGIN)
    return before, rest.partition(END)[2]


def _row(field: FieldInfo) -> Row:
    return Row(
        key=f"`{field.alias}`",
        type=_escape(_type(field)),
        default=_escape(f"`{field.default!r}`"),
        meaning=_escape(field.description or ""),
    )


def _type(field: FieldInfo) -> str:
    """``float > 0``, ``int 0 to 65535``, ``str, not empty, or unset``, ``one of `a`, `b```."""
    annotation = field.annotation
    arguments = get_args(annotation)
    optional = type(None) in arguments
    if optional:
        (annotation,) = (argument for argument in arguments if argument is not type(None))
    bounds, notes = _constraints(field)
    text = ", ".join([f"{_base(annotation)} {bounds}".strip(), *notes])
    if optional:
        text += ", or unset" if notes else " or unset"
    return text


def _base(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(f"`{value}`" for value in get_args(annotation))
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        return f"list of {item.__name__}"
    return str(annotation.__name__)


def _constraints(field: FieldInfo) -> tuple[str, list[str]]:
    """A number's bounds as a reader writes them (``> 0``, ``>= 1 and <= 64``, ``0 to 100``),
    and what else a value must be (``not empty``, ``matching `...```). A constraint this
    module cannot word is an error, so that no row leaves one out."""
    lower: Ge | Gt | None = None
    upper: Le | Lt | None = None
    notes = []
    for item in field.metadata:
        if isinstance(item, Ge | Gt):
            lower = item
        elif isinstance(item, Le | Lt):
            upper = item
        elif isinstance(item, MinLen) and item.min_length == 1:
            notes.append("not empty")
        elif getattr(item, "pattern", None):
            notes.append(f"matching `{item.pattern}`")
        else:
            raise ValueError(
                f"{field.alias}: no words for the constraint {item!r} in the tables of keys; "
                "teach stratus.config.reference to describe it"
            )
    if isinstance(lower, Ge) and isinstance(upper, Le):
        return f"{_number(lower.ge)} to {_number(upper.le)}", notes
    words = []
    if lower is not None:
        words.append(
            f">= {_number(lower.ge)}" if isinstance(lower, Ge) else f"> {_number(lower.gt)}"
        )
    if upper is not None:
        words.append(
            f"<= {_number(upper.le)}" if isinstance(upper, Le) else f"< {_number(upper.lt)}"
        )
    return " and ".join(words), notes


def _number(bound: Any) -> str:
    """``0.5``, ``600``, ``67108864``: a bound as written in the section."""
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _escape(cell: str) -> str:
    """``cell`` safe in a Markdown table: pipes escaped, and outside code spans a ``<`` that
    would start an HTML tag, so that ``<cluster>`` shows rather than vanishing."""
    parts = _CODE_SPAN.split(cell)
    escaped = [
        part if index % 2 else _TAG_START.sub(r"\\<", part) for index, part in enumerate(parts)
    ]
    return "".join(escaped).replace("|", "\\|")


if __name__ == "__main__":
    sys.exit(main())
