"""A fast start: ``stratus --version``, ``--help`` and a Tab import click and the verbs'
table, not the client, the daemons or their libraries; the pieces behind the verbs' kubectl
habits that are pure logic (the format options, the table of columns, the watch loop).

The imports are read from ``python -X importtime`` of a real ``python -m stratus`` process:
an assertion on what is imported, never on how long it takes (``bench/cli_start.py`` times it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

import click
import pytest
from rich.console import Console

import stratus
from stratus.cli.completion_command import SHELLS
from stratus.cli.main import COMMANDS, main
from stratus.cli.options import asks_for_json
from stratus.cli.output import Column, OutputFormat, chosen_format, records_table, table_lines
from stratus.cli.watch import watch_output

# what neither --version, --help nor any completion may import
HEAVY = (
    "fastapi", "starlette", "uvicorn", "pyarrow", "numpy", "pandas", "pyspark", "kazoo",
    "stratus.nimbus", "stratus.supervisor", "stratus.pacemaker", "stratus.ha",
    "stratus.local", "stratus.worker", "stratus.zk.session", "stratus.settings",
)  # fmt: skip
# nor, for --version, --help and a verb's name, the client's libraries
CLIENT = (
    "pydantic", "httpx", "rich", "yaml", "stratus.client", "stratus.config",
    "importlib.metadata",  # the version is read without it
)  # fmt: skip


def imported(args: list[str], env: dict[str, str] | None = None) -> set[str]:
    """The modules a ``python -m stratus ARGS`` process imports."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "stratus", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert lines, "python -X importtime printed no import"
    return {line.rsplit("|", 1)[1].strip() for line in lines}


def of(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(f"{p}.") for p in packages))


def completion_env(words: str) -> dict[str, str]:
    return {
        "_STRATUS_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split(" ")) - 1),
    }


@pytest.mark.parametrize("args", [["--version"], ["--help"]], ids=" ".join)
def test_version_and_help_import_click_alone(args):
    modules = imported(args)

    assert "click" in modules
    assert of(modules, HEAVY + CLIENT) == []
    assert of(modules, ("stratus.cli",)) == sorted(
        ["stratus.cli", "stratus.cli.lazy_group", "stratus.cli.main", "stratus.cli.options"]
    )


def test_the_version_is_the_installed_distributions():
    done = subprocess.run(
        [sys.executable, "-m", "stratus", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert stratus.installed_version() == version("stratus-ha") != "0.0.0"
    assert done.stdout == f"stratus, version {version('stratus-ha')}\n"


def test_completing_a_verbs_name_imports_no_verb():
    modules = imported([], completion_env("stratus sta"))

    assert of(modules, HEAVY + CLIENT) == []
    assert "stratus.cli.client_commands" not in modules


def test_completing_a_pipeline_name_imports_the_client_but_no_daemon_library():
    modules = imported([], completion_env("stratus -c nimbus.seeds=127.0.0.1:9 status "))

    assert "stratus.client.nimbus_client" in modules  # it did ask
    assert of(modules, HEAVY) == []


def test_help_lists_every_verb_with_the_help_line_of_the_command_itself():
    for name, lazy in COMMANDS.items():
        command = lazy.load()

        assert command.name == name
        assert command.get_short_help_str(200) == click.Command(
            name, help=lazy.help
        ).get_short_help_str(200), name
    assert main.list_commands(click.Context(main)) == sorted(COMMANDS)


@pytest.mark.parametrize("shell", SHELLS)
def test_stratus_completion_prints_the_shells_script(shell):
    done = subprocess.run(
        [sys.executable, "-m", "stratus", "completion", shell],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert "_STRATUS_COMPLETE" in done.stdout
    assert f"{shell}_complete" in done.stdout  # what the script asks stratus at a Tab


# ---------------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("args", "json"),
    [
        (["list", "--json"], True),
        (["list", "-o", "json"], True),
        (["list", "-ojson"], True),
        (["list", "--output=json"], True),
        (["list", "-o", "yaml"], False),
        (["list", "-o"], False),
        ([], False),
    ],
)
def test_json_errors_are_asked_for_by_any_spelling_of_json_output(args, json):
    assert asks_for_json(args) is json


def test_json_and_an_output_agree_or_are_a_usage_error():
    assert chosen_format(None, as_json=False) is OutputFormat.TABLE
    assert chosen_format("wide", as_json=False) is OutputFormat.WIDE
    assert chosen_format(None, as_json=True) is chosen_format("json", as_json=True)
    with pytest.raises(click.UsageError, match="--json and -o yaml ask for two formats"):
        chosen_format("yaml", as_json=True)


def test_wide_columns_come_after_the_tables_own_whatever_their_order():
    columns: list[Column[int]] = [
        Column("n", str),
        Column("square", lambda n: str(n * n), wide=True),
        Column("double", lambda n: str(2 * n)),
    ]

    assert table_lines(records_table("t", columns, [3], wide=False)) == ["# t", "n\tdouble", "3\t6"]
    assert table_lines(records_table("t", columns, [3], wide=True)) == [
        "# t",
        "n\tdouble\tsquare",
        "3\t6\t9",
    ]


# ---------------------------------------------------------------------- --watch


def test_a_watch_shows_each_change_once_and_keeps_only_the_last_output(tmp_path):
    states = iter(["a", "a", "b", "b", "b", "a"])
    path = tmp_path / "out.txt"

    def sleep(_secs: float) -> None:
        if next(remaining, None) is None:
            raise KeyboardInterrupt

    remaining = iter(range(5))
    with path.open("w") as file, pytest.raises(KeyboardInterrupt):
        out = Console(file=file, force_terminal=False)
        watch_output(
            lambda c: c.print(next(states)),
            out,
            interval=0.0,
            output=OutputFormat.TABLE,
            command="t",
            sleep=sleep,
        )

    assert path.read_text() == "a\nb\na\n"


def test_a_piped_yaml_watch_separates_its_documents(tmp_path):
    path = tmp_path / "out.yaml"
    states = iter(["x: 1\n", "x: 2\n"])

    def sleep(_secs: float) -> None:
        if next(remaining, None) is None:
            raise KeyboardInterrupt

    remaining = iter(range(1))
    with path.open("w") as file, pytest.raises(KeyboardInterrupt):
        watch_output(
            lambda c: c.out(next(states), end=""),
            Console(file=file, force_terminal=False),
            interval=0.0,
            output=OutputFormat.YAML,
            command="t",
            sleep=sleep,
        )

    assert path.read_text() == "---\nx: 1\n---\nx: 2\n"
