"""README.md's "By hand, in five minutes" runs as written, as a person would run it.

Its shell blocks are read from README.md, not copied here: the daemons' lines ("terminal N")
start as processes of their own, each in its own session as in a terminal; the client lines
run in order, in the README's own shell set-up (``quickstart.yaml``, ``STRATUS_CONF``), and
``stratus status`` is run again until the pipeline has FINISHED, as a person would. Then the
finished batch's log is read, the leader is stopped with a Ctrl-C, and the failover lines run
against the other nimbus. ``make install`` is the one line not run: this test runs in the
environment it makes.

The README's ports are fixed (ZooKeeper 2181, nimbuses 6627 and 6637, their package servers
6628 and 6638, the supervisor's endpoint 6629): this test needs them free, and its
directories (``HOME``, ``TMPDIR``) are its own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.doc_commands import ROOT, SHELL_BLOCK
from tests.harness.zkfixtures import wait_until

pytestmark = pytest.mark.spark

README = ROOT / "README.md"
TERMINAL = re.compile(r"#\s*terminal \d+")
CLIENT_SECS = 120.0


def by_hand_blocks() -> list[list[str]]:
    """The shell blocks of README's "By hand" section, each as its command lines."""
    text = README.read_text()
    start = text.index("## By hand")
    end = text.index("\n## ", start + 1)
    return [block.splitlines() for block in SHELL_BLOCK.findall(text[start:end])]


class Terminals:
    """The README's shell, replayed: set-up lines once, daemons in terminals, client lines in
    the environment the set-up left."""

    def __init__(self, workdir: Path, setup: list[str]) -> None:
        self.workdir = workdir
        self.env = self._shell_environment(setup)
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}

    def _shell_environment(self, setup: list[str]) -> dict[str, str]:
        """Run the set-up lines once, as in the first terminal; the environment they leave."""
        start = {
            **os.environ,
            "HOME": str(self.workdir),
            "TMPDIR": str(self.workdir),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }
        script = "\n".join([*setup, "env -0"])  # a line may end in a comment
        printed = subprocess.run(
            ["bash", "-c", script], cwd=self.workdir, env=start, capture_output=True, check=True
        ).stdout
        pairs = (item.split("=", 1) for item in printed.decode().split("\0") if "=" in item)
        return dict(pairs)

    def open_terminal(self, line: str) -> None:
        """Start ``line`` (a daemon) in a session of its own; its output goes to a file."""
        name = line.split("#", maxsplit=1)[0].strip()
        with (self.workdir / f"terminal-{len(self.daemons) + 1}.log").open("wb") as log:
            self.daemons[name] = subprocess.Popen(
                ["bash", "-c", f"exec {name}"],
                cwd=self.workdir,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def run(self, line: str) -> subprocess.CompletedProcess[str]:
        """Run a client line in the README's shell; its exit code and output."""
        return subprocess.run(
            ["bash", "-c", line],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=CLIENT_SECS,
        )

    def ctrl_c(self, name: str) -> int:
        """Ctrl-C in a daemon's terminal (SIGINT to its foreground group); its exit code."""
        process = self.daemons[name]
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=60)
        del self.daemons[name]  # one that does not stop is killed by close()
        return code

    def close(self) -> None:
        for process in self.daemons.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def expect(result: subprocess.CompletedProcess[str], line: str) -> str:
    assert result.returncode == 0, (
        f"{line!r} exited {result.returncode}:\n{result.stdout}{result.stderr}"
    )
    return result.stdout


@pytest.mark.timeout(900)
def test_readme_by_hand_runs_as_written_with_the_finished_batchs_log(tmp_path):
    first, second, failover = by_hand_blocks()
    setup = [line for line in first if not TERMINAL.search(line) and "make install" not in line]
    daemons = [line for line in first if TERMINAL.search(line)]
    assert len(daemons) == 4, first  # ZooKeeper, two nimbuses, a supervisor
    (tmp_path / "src").symlink_to(ROOT / "src")  # the README's paths are the checkout's
    terminals = Terminals(tmp_path, setup)
    try:
        for line in daemons:
            terminals.open_terminal(line)
        cluster, submit, status, logs, runs = second

        def cluster_ready() -> bool:
            answer = terminals.run(cluster)
            return answer.returncode == 0 and "6627" in answer.stdout and "6637" in answer.stdout

        wait_until(cluster_ready, 180, "stratus cluster to show both nimbuses")
        expect(terminals.run(submit), submit)

        def finished() -> bool:
            return "FINISHED" in expect(terminals.run(status), status)

        wait_until(finished, 300, "the batch to finish, as `stratus status` shows it")
        log = expect(terminals.run(logs), logs)
        assert "event=worker_started" in log, log
        assert "FINISHED" in expect(terminals.run(runs), runs)

        first_nimbus, second_nimbus = (name for name in terminals.daemons if "nimbus" in name)
        leading = expect(terminals.run("stratus leader"), "stratus leader")
        leader, other = (
            (second_nimbus, "127.0.0.1:6627")
            if "6637" in leading
            else (first_nimbus, "127.0.0.1:6637")
        )
        assert terminals.ctrl_c(leader) == 0  # it hands over at once
        submit_again, new_leader = failover
        expect(terminals.run(submit_again), submit_again)
        answer = expect(terminals.run(new_leader), new_leader)
        assert f"leader: {other} (epoch 2)" in answer, answer
        for name in reversed(list(terminals.daemons)):  # as started, backwards: ZooKeeper last
            assert terminals.ctrl_c(name) == 0, name
    finally:
        terminals.close()
