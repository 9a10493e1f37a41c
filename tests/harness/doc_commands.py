"""The shell commands the docs show, read as a shell would
(for ``tests/cluster/test_docs_examples.py``).

A shell block is a fenced block tagged ``sh``, ``console``, ``bash`` or ``shell``. When any of
its lines starts with ``$ `` (a prompt), only those lines are commands and the others are their
output; otherwise every line is a command. A line ending in ``\\`` continues on the next, ``#``
starts a comment, and ``;``, ``&``, ``&&``, ``||`` and ``|`` separate commands. A ``$ echo $?``
followed by a number gives the exit code of the command before it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = (
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "README.md",
    ROOT / "src" / "stratus" / "examples" / "README.md",
)
SHELL_BLOCK = re.compile(r"^```(?:sh|console|bash|shell)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SEPARATORS = frozenset({";", "&", "&&", "||", "|"})
REDIRECTIONS = frozenset({">", ">>", "<", ">&", "&>", "2>"})
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class DocCommand:
    """One simple command of a doc: where it is, its words, and the exit code the doc shows."""

    doc: str
    line: int
    argv: tuple[str, ...]
    exit_code: int = 0

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def program(self) -> str:
        return self.argv[0]


def shell_commands() -> list[DocCommand]:
    """Every simple command of every shell block of the docs, in document order."""
    commands: list[DocCommand] = []
    for doc in DOCS:
        text = doc.read_text()
        name = str(doc.relative_to(ROOT))
        for block in SHELL_BLOCK.finditer(text):
            first_line = text.count("\n", 0, block.start(1)) + 1
            commands.extend(_block_commands(name, first_line, block.group(1).splitlines()))
    return commands


def _block_commands(doc: str, first_line: int, lines: list[str]) -> list[DocCommand]:
    prompted = any(line.startswith("$ ") for line in lines)
    commands: list[DocCommand] = []
    for index, text in _logical_lines(lines, prompted):
        for argv in _simple_commands(text):
            if argv == ("echo", "$?"):
                status = lines[index + 1].strip() if index + 1 < len(lines) else ""
                if commands and status.isdigit():
                    commands[-1] = replace(commands[-1], exit_code=int(status))
                continue
            commands.append(DocCommand(doc, first_line + index, argv))
    return commands


def _logical_lines(lines: list[str], prompted: bool) -> Iterator[tuple[int, str]]:
    """(index of its first line, text) of every command line, continuations joined."""
    index = 0
    while index < len(lines):
        start, line = index, lines[index]
        index += 1
        if prompted and not line.startswith("$ "):
            continue  # output
        text = line[2:] if prompted else line
        while text.rstrip().endswith("\\") and index < len(lines):
            text = text.rstrip()[:-1] + " " + lines[index].strip()
            index += 1
        yield start, text


def _simple_commands(text: str) -> Iterator[tuple[str, ...]]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words: list[str] = []
    for token in [*lexer, ";"]:
        if token not in SEPARATORS:
            words.append(token)
            continue
        argv = _without_redirections(words)
        while argv and ENV_ASSIGNMENT.match(argv[0]):
            argv = argv[1:]
        if argv:
            yield tuple(argv)
        words = []


def _without_redirections(words: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in REDIRECTIONS:
            skip = True
        else:
            kept.append(word)
    return kept
