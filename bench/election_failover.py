"""Election failover: stratus's ``Coordinator`` against kazoo's ``Election`` recipe.

Measures, per round, the time from killing the leader *process* to the next leader's first
successful write (for stratus a fenced ``leadership.transaction().set_data(...).commit()``,
for kazoo a plain ``set_data``, kazoo having no fencing), in two scenarios:

* crash: ``kill -9`` of the leader; its nodes go only when ZooKeeper expires its session;
* clean hand-over: SIGTERM of the leader, whose handler calls ``coordinator.close()``
  (stratus) or ``client.stop()`` (kazoo), which delete its nodes at once.

Both systems run in the same run against one ZooKeeper started here (loopback, tick 100 ms),
with 3 contender processes each (``bench/_contender.py``); a replacement contender is started
after each round, so there are always at least 2 candidates when a leader dies. Rounds are
interleaved (and which system goes first alternates) so that machine noise hits both alike.
The start is ``time.monotonic()`` just before the signal is sent, the end the new leader's own
``time.monotonic()`` when its write returned (the clock is system-wide on Linux).

    .venv/bin/python bench/election_failover.py [--rounds 20] [--session-timeout 2.0]
    .venv/bin/python bench/election_failover.py --quick      # 1 round, a smoke run

The exit code is 0 even when a target is missed (benchmarks never fail the build); it is 1
only when the benchmark itself could not run (no leader elected, a contender crashed...).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kazoo.client import KazooClient
from rich import box
from rich.console import Console
from rich.table import Table

from _report import (
    Interrupted,
    handle_interrupts,
    ms,
    percentile,
    print_header,
    print_verdicts,
    raise_interrupted,
    report_console,
    write_json,
)
from stratus.coordination.records import SlotRecord
from stratus.zk.paths import GroupPaths
from stratus.zk.server import ZooKeeperServer

SYSTEMS = ("stratus", "kazoo")
SCENARIOS = ("crash", "clean")
SCENARIO_TITLES = {"crash": "crash (kill -9)", "clean": "clean hand-over (SIGTERM)"}
CONTENDERS_PER_SYSTEM = 3
TICK_TIME_MS = 100
CRASH_TARGET_SLACK = 0.300  # crash failover p99 <= session timeout + this
CLEAN_TARGET = 0.200  # clean hand-over p99 < this
STRATUS_GROUP = "bench-failover"
KAZOO_ELECTION = "/bench/kazoo-election"
DATA_PATHS = {"stratus": "/bench/stratus-data", "kazoo": "/bench/kazoo-data"}
READY_TIMEOUT = 60.0
EXIT_TIMEOUT = 15.0
SETTLE_SECS = 0.2  # quiet time before each measurement
WATCH_GRACE_SECS = 2.0  # how long after the new leader's write the deletion watch may lag
STRATUS_ROOT = "/stratus"  # the Coordinator's default root
CONTENDER_SCRIPT = Path(__file__).with_name("_contender.py")


class BenchError(Exception):
    """The benchmark could not run (not a missed target)."""


# ---------------------------------------------------------------------------------------------
# Contender processes


@dataclass(frozen=True)
class Event:
    system: str
    kind: str  # ready | elected | wrote | error | exit
    member: str
    time: float | None = None
    text: str = ""


@dataclass(eq=False)
class Contender:
    system: str
    member: str
    process: subprocess.Popen[str]
    log_path: Path
    expected_exit: bool = False

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


@dataclass
class Sample:
    system: str
    scenario: str
    round: int
    old_leader: str
    new_leader: str
    failover: float  # signal sent -> new leader's first write completed, seconds
    react: float | None  # old leader's node deleted (as the bench saw it) -> that write, s
    write: float  # new leader's election callback started -> write completed, seconds


@dataclass
class Fleet:
    """Every contender process of both systems, and their stdout events by system."""

    hosts: str
    session_timeout: float
    log_dir: Path
    contenders: dict[str, Contender] = field(default_factory=dict)
    events: dict[str, queue.SimpleQueue[Event]] = field(
        default_factory=lambda: {system: queue.SimpleQueue() for system in SYSTEMS}
    )
    elected_at: dict[str, float] = field(default_factory=dict)
    leaders: dict[str, str] = field(default_factory=dict)
    _counter: int = 0

    def spawn(self, system: str) -> Contender:
        self._counter += 1
        member = f"{system}-{self._counter}"
        election = STRATUS_GROUP if system == "stratus" else KAZOO_ELECTION
        log_path = self.log_dir / f"{member}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(CONTENDER_SCRIPT),
                    system,
                    self.hosts,
                    election,
                    DATA_PATHS[system],
                    member,
                    repr(self.session_timeout),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                bufsize=1,
                start_new_session=True,  # Ctrl-C reaches the bench only; the bench kills them
            )
        contender = Contender(system, member, process, log_path)
        self.contenders[member] = contender
        threading.Thread(
            target=self._read, args=(contender,), name=f"read-{member}", daemon=True
        ).start()
        return contender

    def _read(self, contender: Contender) -> None:
        stream: IO[str] | None = contender.process.stdout
        if stream is None:
            return
        events = self.events[contender.system]
        for line in stream:
            kind, member, text = [*line.rstrip("\n").split(" ", 2), "", ""][:3]
            value: float | None = None
            if kind in ("elected", "wrote"):
                with contextlib.suppress(ValueError):
                    value = float(text)
            events.put(Event(contender.system, kind, member, value, text))
        events.put(Event(contender.system, "exit", contender.member))

    def await_event(self, system: str, accept: Callable[[Event], bool], what: str) -> Event:
        """The next event of ``system`` that ``accept`` takes; errors and crashes raise."""
        timeout = READY_TIMEOUT + 5 * self.session_timeout
        deadline = time.monotonic() + timeout
        events = self.events[system]
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"{system}: {what} did not happen within {timeout:g}s")
            try:
                event = events.get(timeout=remaining)
            except queue.Empty:
                continue
            self._note(event)
            if accept(event):
                return event
            self._check(event)

    def drain(self, system: str) -> None:
        """Consume the events already received (none may count for the next measurement)."""
        events = self.events[system]
        while True:
            try:
                event = events.get_nowait()
            except queue.Empty:
                return
            self._note(event)
            self._check(event)

    def _note(self, event: Event) -> None:
        if event.kind == "elected" and event.time is not None:
            self.elected_at[event.member] = event.time
        elif event.kind == "wrote":
            self.leaders[event.system] = event.member  # the latest writer leads

    def _check(self, event: Event) -> None:
        if event.kind == "error":
            raise BenchError(f"{event.member}'s first write failed: {event.text}")
        contender = self.contenders.get(event.member)
        if event.kind == "exit" and contender is not None and not contender.expected_exit:
            code = contender.process.wait()
            raise BenchError(
                f"contender {event.member} exited unexpectedly (code {code}); "
                f"its log ends with:\n{contender.log_tail()}"
            )

    def start_contender(self, system: str) -> Contender:
        contender = self.spawn(system)
        self.await_event(
            system,
            lambda e: e.kind == "ready" and e.member == contender.member,
            f"contender {contender.member} queuing",
        )
        return contender

    def stop_contender(self, contender: Contender, timeout: float = EXIT_TIMEOUT) -> int:
        """Wait for the process to end (killing it after ``timeout``); its exit code."""
        contender.expected_exit = True
        try:
            code = contender.process.wait(timeout)
        except subprocess.TimeoutExpired:
            contender.process.kill()
            code = contender.process.wait()
        self.contenders.pop(contender.member, None)
        return code

    def kill_all(self) -> None:
        for contender in list(self.contenders.values()):
            contender.expected_exit = True
            with contextlib.suppress(OSError):
                contender.process.kill()
        for contender in list(self.contenders.values()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                contender.process.wait(5)
        self.contenders.clear()


# ---------------------------------------------------------------------------------------------
# Rounds


def first_leader(fleet: Fleet, system: str) -> None:
    fleet.drain(system)
    if system not in fleet.leaders:
        fleet.await_event(system, lambda e: e.kind == "wrote", "the first election")


def leader_node(reader: Any, system: str, member: str) -> str:
    """The znode whose deletion frees the leadership: the stratus slot, kazoo's first lock node."""
    if system == "stratus":
        path = GroupPaths(STRATUS_ROOT, STRATUS_GROUP).slot(0)
        holder = SlotRecord.decode(reader.get(path)[0]).member_id
    else:
        names = sorted(reader.get_children(KAZOO_ELECTION), key=lambda name: name[-10:])
        path = f"{KAZOO_ELECTION}/{names[0]}"
        holder = reader.get(path)[0].decode()
    if holder != member:
        raise BenchError(f"{path} is held by {holder}, but {member} reported the last write")
    return path


def watch_deletion(reader: Any, path: str) -> Callable[[], float | None]:
    """Watch ``path``; the returned function gives when its deletion was notified, if it was."""
    deleted: list[float] = []
    notified = threading.Event()

    def watch(event: Any) -> None:
        if event.type == "DELETED":
            deleted.append(time.monotonic())
        notified.set()

    if reader.exists(path, watch=watch) is None:
        raise BenchError(f"{path} vanished before the leader was killed")

    def deleted_at() -> float | None:
        notified.wait(WATCH_GRACE_SECS)
        return deleted[0] if deleted else None

    return deleted_at


def run_round(fleet: Fleet, reader: Any, system: str, scenario: str, number: int) -> Sample:
    """Kill the leader of ``system``, time the next leader's first write, restore 3 contenders."""
    old = fleet.contenders[fleet.leaders[system]]
    time.sleep(SETTLE_SECS)
    fleet.drain(system)  # nothing from before the signal may count
    deleted_at = watch_deletion(reader, leader_node(reader, system, old.member))
    old.expected_exit = True
    signum = signal.SIGKILL if scenario == "crash" else signal.SIGTERM
    started = time.monotonic()
    old.process.send_signal(signum)
    wrote = fleet.await_event(
        system,
        lambda e: e.kind == "wrote" and e.member != old.member,
        f"a new leader's first write after {scenario} of {old.member}",
    )
    assert wrote.time is not None
    failover = wrote.time - started
    write = wrote.time - fleet.elected_at.get(wrote.member, wrote.time)
    vanished = deleted_at()
    react = None if vanished is None else wrote.time - vanished
    code = fleet.stop_contender(old)
    if scenario == "clean" and code != 0:
        raise BenchError(
            f"{old.member} did not exit cleanly on SIGTERM (code {code}); "
            f"its log ends with:\n{old.log_tail()}"
        )
    data, _ = reader.get(DATA_PATHS[system])
    if not data.decode().startswith(wrote.member + " "):
        raise BenchError(f"{DATA_PATHS[system]} holds {data!r}, not {wrote.member}'s write")
    fleet.leaders[system] = wrote.member
    fleet.start_contender(system)
    return Sample(system, scenario, number, old.member, wrote.member, failover, react, write)


def schedule(rounds: int, warmup: int) -> Iterator[tuple[int, str, str]]:
    """(round, scenario, system), round <= 0 being warm-up; the first system alternates."""
    for number in range(1 - warmup, rounds + 1):
        order = SYSTEMS if number % 2 else tuple(reversed(SYSTEMS))
        for scenario in SCENARIOS:
            for system in order:
                yield number, scenario, system


# ---------------------------------------------------------------------------------------------
# Statistics and reporting


@dataclass(frozen=True)
class Stats:
    n: int
    min: float
    p50: float
    p99: float
    max: float
    react_p50: float
    write_p50: float

    @classmethod
    def of(cls, samples: list[Sample]) -> Stats:
        values = [s.failover for s in samples]
        return cls(
            len(values),
            min(values),
            percentile(values, 50),
            percentile(values, 99),
            max(values),
            percentile([s.react for s in samples if s.react is not None] or [math.nan], 50),
            percentile([s.write for s in samples], 50),
        )


def target_of(scenario: str, session_timeout: float) -> tuple[str, Callable[[float], bool]]:
    """The target of a scenario's p99, as text, and its test."""
    if scenario == "crash":
        limit = session_timeout + CRASH_TARGET_SLACK
        return f"p99 <= {limit * 1000:.0f}", lambda p99: p99 <= limit
    return f"p99 < {CLEAN_TARGET * 1000:.0f}", lambda p99: p99 < CLEAN_TARGET


def report(console: Console, samples: list[Sample], session_timeout: float) -> list[str]:
    """Print the results table and the targets; return the verdict lines."""
    table = Table(
        title=f"Election failover, session timeout {session_timeout:g} s: milliseconds",
        caption=(
            "from the signal to the new leader's first completed write; react = from the old "
            "leader's node deleted to that write (p50); write = the write alone (p50); "
            "ratio = stratus / kazoo; the targets are stratus's, kazoo's result in ()"
        ),
        box=box.SIMPLE_HEAD,
    )
    for header in ("scenario", "system", "n", "min", "p50", "p99", "max", "react", "write"):
        left = header in ("scenario", "system")
        table.add_column(header, justify="left" if left else "right", no_wrap=True)
    table.add_column("p99 target", no_wrap=True)
    verdicts = []
    for scenario in SCENARIOS:
        target, met = target_of(scenario, session_timeout)
        stats = {}
        for system in SYSTEMS:
            chosen = [s for s in samples if s.system == system and s.scenario == scenario]
            if not chosen:
                continue
            stats[system] = st = Stats.of(chosen)
            if system == "stratus":
                result = "met" if met(st.p99) else "[bold red]MISSED[/]"
            else:
                result = "(met)" if met(st.p99) else "(missed)"
            table.add_row(
                scenario,
                system,
                str(st.n),
                *(ms(v) for v in (st.min, st.p50, st.p99, st.max, st.react_p50, st.write_p50)),
                f"{target.removeprefix('p99 ')} {result}",
            )
        if len(stats) == 2:
            s, k = stats["stratus"], stats["kazoo"]
            table.add_row(
                "",
                "ratio",
                "",
                *(
                    f"{a / b:.2f}x"
                    for a, b in zip(
                        (s.min, s.p50, s.p99, s.max, s.react_p50, s.write_p50),
                        (k.min, k.p50, k.p99, k.max, k.react_p50, k.write_p50),
                        strict=True,
                    )
                ),
                "",
                end_section=True,
            )
        if "stratus" in stats:
            p99 = stats["stratus"].p99
            word = "met" if met(p99) else "MISSED"
            verdicts.append(
                f"{SCENARIO_TITLES[scenario]}: target {target} ms, stratus p99 {ms(p99)} ms: {word}"
            )
    console.print(table)
    print_verdicts(console, verdicts)
    return verdicts


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=20, help="measured rounds (default 20)")
    parser.add_argument(
        "--session-timeout", type=float, default=2.0, help="ZooKeeper session timeout, s"
    )
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first")
    parser.add_argument("--quick", action="store_true", help="1 round, no warm-up: a smoke run")
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup = 1, 0
    if args.rounds < 1 or args.warmup < 0:
        parser.error("--rounds must be >= 1 and --warmup >= 0")
    if args.session_timeout * 1000 < 2 * TICK_TIME_MS:
        parser.error(f"--session-timeout must be >= {2 * TICK_TIME_MS / 1000:g} s (2 ticks)")
    return args


def run(args: argparse.Namespace, console: Console) -> list[Sample]:
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="stratus-bench-") as tmp:
        server = ZooKeeperServer(
            Path(tmp, "zk"), port=0, tick_time_ms=TICK_TIME_MS, force_sync=False
        )
        fleet = Fleet("", args.session_timeout, Path(tmp))
        reader = None
        try:
            server.start()
            fleet.hosts = server.connect_string
            reader = KazooClient(hosts=server.connect_string)
            reader.start(timeout=15)
            for path in DATA_PATHS.values():
                reader.ensure_path(path)
            console.print(f"ZooKeeper on {server.connect_string}; starting contenders...")
            for _ in range(CONTENDERS_PER_SYSTEM):
                for system in SYSTEMS:
                    fleet.start_contender(system)
            for system in SYSTEMS:
                first_leader(fleet, system)
            current: int | None = None
            line: list[str] = []
            for number, scenario, system in schedule(args.rounds, args.warmup):
                if number != current and line:
                    console.print(" ".join(line))
                if number != current:
                    current = number
                    label = "warm-up" if number <= 0 else f"{number}/{args.rounds}"
                    line = [f"round {label:>7} (ms):"]
                sample = run_round(fleet, reader, system, scenario, number)
                line.append(f"{system} {scenario} {ms(sample.failover):>5}")
                if number > 0:
                    samples.append(sample)
            console.print(" ".join(line))
        finally:
            handle_interrupts(signal.SIG_IGN)  # let the cleanup finish (a few seconds at most)
            fleet.kill_all()
            if reader is not None:
                with contextlib.suppress(Exception):
                    reader.stop()
                    reader.close()
            server.kill()
    return samples


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)  # explicitly: a background job inherits an ignored SIGINT
    console = report_console(width=100)
    console.rule("Election failover: stratus Coordinator vs kazoo Election")
    info, reproduce = print_header(console, "election_failover.py", argv, ())
    console.print(
        f"[bold]{'run':>9}[/]: {args.rounds} rounds (+{args.warmup} warm-up), "
        f"session timeout {args.session_timeout:g} s, ZooKeeper tick {TICK_TIME_MS} ms, "
        f"{CONTENDERS_PER_SYSTEM} contenders per system"
    )
    try:
        samples = run(args, console)
    except BenchError as exc:
        console.print(f"[bold red]benchmark failed:[/] {exc}")
        return 1
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc}); every process was stopped[/]")
        return 128 + exc.signum
    report(console, samples, args.session_timeout)
    write_json(
        args.json, args, machine=info, reproduce=reproduce, samples=[s.__dict__ for s in samples]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
