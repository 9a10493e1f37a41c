"""What the benchmarks under ``bench/`` share: statistics, table cells, the machine, Ctrl-C.

Not a benchmark itself. The benchmarks are run as scripts (``python bench/<name>.py``), so
this module is imported as ``_report``::

    from _report import Interrupted, handle_interrupts, machine, ms, percentile

    handle_interrupts(raise_interrupted)  # SIGINT/SIGTERM unwind through ``finally`` blocks
    print(machine())                      # nproc, cpu, kernel, python, java, zookeeper, kazoo
    info, reproduce = print_header(console, "reassign.py", argv, ("kazoo",))  # and the command
    print(ms(percentile([1.9, 2.0, 2.1], 99)))  # "2098"
    write_json(args.json, args, machine=info, samples=samples)  # --json PATH, if given
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from rich.console import Console

from stratus.zk.java import find_java, zookeeper_classpath


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ms(seconds: float) -> str:
    """Seconds as a table cell in milliseconds: whole above 100 ms, one decimal below."""
    return f"{seconds * 1000:.0f}" if seconds >= 0.1 else f"{seconds * 1000:.1f}"


def machine(packages: tuple[str, ...] = ("kazoo",)) -> dict[str, str]:
    """What the numbers were measured on: CPUs, kernel, Python, Java, ZooKeeper, ``packages``."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        java_path = find_java()
        done = subprocess.run(
            [java_path, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
        java = (done.stderr or done.stdout).splitlines()[0].strip()
    except Exception as exc:
        java = f"unavailable ({exc})"
    zookeeper = next(
        (
            jar.stem.removeprefix("zookeeper-")
            for jar in zookeeper_classpath()
            if jar.stem.startswith("zookeeper-3")
        ),
        "?",
    )
    info = {
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "java": java,
        "zookeeper": zookeeper,
    }
    for package in packages:
        try:
            info[package] = version(package)
        except PackageNotFoundError:
            info[package] = "not installed"
    return info


def print_header(
    console: Console, script: str, argv: list[str] | None, packages: tuple[str, ...]
) -> tuple[dict[str, str], str]:
    """Print what a run measures on (:func:`machine` with ``packages``) and the command that
    runs it again (``bench/<script>`` with its arguments); return both, for ``--json``."""
    info = machine(packages)
    arguments = sys.argv[1:] if argv is None else argv
    reproduce = shlex.join([".venv/bin/python", f"bench/{script}", *arguments])
    for key, value in {**info, "reproduce": reproduce}.items():
        console.print(f"[bold]{key:>9}[/]: {value}")
    return info, reproduce


class Interrupted(Exception):  # noqa: N818 (a signal, not an error)
    """SIGINT or SIGTERM: unwinds through the ``finally`` blocks that stop every process."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def raise_interrupted(signum: int, _frame: Any) -> None:
    """A signal handler that raises :class:`Interrupted`."""
    raise Interrupted(signum)


def handle_interrupts(handler: Any) -> None:
    """Install ``handler`` (or ``signal.SIG_IGN``) for SIGINT and SIGTERM.

    Install :func:`raise_interrupted` explicitly: a background job inherits an ignored SIGINT.
    Install ``SIG_IGN`` before a cleanup that must finish.
    """
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, handler)


def report_console(width: int) -> Console:
    """A terminal gets its own width; a file or a pipe (CI logs, docs) gets room for the table."""
    return Console() if sys.stdout.isatty() else Console(width=width)


def print_verdicts(console: Console, verdicts: list[str]) -> None:
    """One line per target, red where it was missed."""
    for line in verdicts:
        console.print(("[bold red]" if line.endswith("MISSED") else "[green]") + line + "[/]")


def write_json(path: Path | None, args: argparse.Namespace, **fields: Any) -> None:
    """Write a run's record to ``--json PATH`` (nothing without one): its arguments and the
    ``fields`` given (the machine, the samples, the verdicts), for reading back later."""
    if path is None:
        return
    doc = {"args": {key: str(value) for key, value in vars(args).items()}, **fields}
    path.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
