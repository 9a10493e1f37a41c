"""docs/configuration.md's tables of keys are the configuration's sections, row by row.

The page's rows (key, type, default, meaning) are compared with the rows that ``make docs``
writes from the sections (``stratus.config.reference``): a description edited in a section
and not in the page, a key added or removed, a row copied by hand, each fails here.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pydantic import Field

from stratus.config import StratusConfig
from stratus.config.model import sections
from stratus.config.reference import BEGIN, END, Row, documented_rows, rewrite, rows
from stratus.config.section import Section

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def expected_rows() -> list[Row]:
    return [row for section in sections() for row in rows(section)]


def drift(documented: list[Row], expected: list[Row]) -> list[str]:
    """What differs between the page's rows and the sections', one line per key."""
    found = {row.key: row for row in documented}
    wanted = {row.key: row for row in expected}
    problems = [
        f"{key} is documented {n} times"
        for key, n in Counter(row.key for row in documented).items()
        if n > 1
    ]
    problems += [f"{key} is not documented" for key in wanted if key not in found]
    problems += [f"{key} is documented but is no key" for key in found if key not in wanted]
    for key in wanted.keys() & found.keys():
        if found[key] != wanted[key]:
            problems.append(
                f"{key}: the page has\n  {found[key].line()}\nthe sections say\n"
                f"  {wanted[key].line()}"
            )
    return sorted(problems)


def changed_row(page: str, key: str, new_meaning: str) -> str:
    """``page`` with the meaning of ``key``'s row replaced."""
    (row,) = (row for row in documented_rows(page) if row.key == f"`{key}`")
    changed = Row(row.key, row.type, row.default, new_meaning)
    return page.replace(row.line(), changed.line())


def test_every_row_of_the_page_is_the_row_of_its_key() -> None:
    problems = drift(documented_rows(PAGE.read_text()), expected_rows())
    assert problems == [], (
        "docs/configuration.md differs from src/stratus/config (run make docs):\n"
        + "\n".join(problems)
    )


def test_make_docs_leaves_the_page_as_it_is() -> None:
    page = PAGE.read_text()
    assert rewrite(page) == page, "run make docs: the tables of docs/configuration.md are stale"


def test_the_row_check_catches_a_changed_a_missing_and_a_copied_row() -> None:
    page = PAGE.read_text()
    changed = changed_row(page, "zookeeper.root", "where stratus keeps things")
    assert drift(documented_rows(changed), expected_rows()) == [
        "`zookeeper.root`: the page has\n"
        "  | `zookeeper.root` | str | `'/stratus'` | where stratus keeps things |\n"
        "the sections say\n"
        "  | `zookeeper.root` | str | `'/stratus'` | znode under which stratus keeps all of its "
        "state |"
    ]
    (root,) = (row for row in documented_rows(page) if row.key == "`zookeeper.root`")
    missing = page.replace(root.line() + "\n", "")
    assert drift(documented_rows(missing), expected_rows()) == [
        "`zookeeper.root` is not documented"
    ]
    copied = page.replace(root.line(), f"{root.line()}\n{root.line()}")
    assert drift(documented_rows(copied), expected_rows()) == [
        "`zookeeper.root` is documented 2 times"
    ]


def test_make_docs_rewrites_a_stale_page(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(changed_row(PAGE.read_text(), "nimbus.port", "a port"), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "stratus.config.reference", str(stale)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert stale.read_text() == PAGE.read_text()


def test_a_page_without_the_markers_is_refused_and_left_alone(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    page.write_text("# Configuration\n\nno tables here\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "stratus.config.reference", str(page)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert BEGIN in done.stderr and END in done.stderr
    assert page.read_text() == "# Configuration\n\nno tables here\n"


def test_each_section_holds_the_keys_of_one_prefix_and_together_every_key() -> None:
    prefixes = [section.prefix for section in sections()]
    assert len(set(prefixes)) == len(prefixes)
    for section in sections():
        keys = [str(field.alias) for field in section.model_fields.values()]
        assert keys, section.__name__
        assert all(key.startswith(f"{section.prefix}.") for key in keys), section.__name__
    in_sections = [name for section in sections() for name in section.model_fields]
    assert in_sections == list(StratusConfig.model_fields)  # the keys, in the tables' order


def test_a_row_words_the_type_bounds_and_default_as_an_operator_writes_them() -> None:
    by_key = {row.key: row for row in expected_rows()}
    assert by_key["`zookeeper.server.port`"].type == "int 0 to 65535"
    assert by_key["`zookeeper.session.timeout.secs`"].type == "float > 0"
    assert by_key["`zookeeper.auth.scheme`"].type == "one of `none`, `digest`, `sasl`"
    assert by_key["`zookeeper.server.data.dir`"].type == "str or unset"
    assert by_key["`nimbus.seeds`"].default == "`['127.0.0.1:6627']`"
    # a pipe in a cell is escaped, even in a code span; a <name> outside code stays visible
    assert "token\\|cn" in by_key["`nimbus.auth.tokens.file`"].meaning
    assert "\\<root>/\\<pipeline>" in by_key["`pipeline.checkpoint.root`"].meaning


def test_a_constraint_the_tables_cannot_word_is_an_error_naming_its_key() -> None:
    class Odd(Section):
        """A section with a constraint the tables do not know."""

        prefix = "odd"
        odd_name: str = Field(default="ab", max_length=3, alias="odd.name", description="odd")

    with pytest.raises(ValueError, match=r"odd\.name: no words for the constraint"):
        rows(Odd)
