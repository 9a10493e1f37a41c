"""A randomized stress test of the election library, judged by an oracle (see ``stress_oracle``).

Five contender processes (``stress_contender.py``) run a ``Coordinator`` each, with a short
session timeout, in two groups: ``solo`` elects one leader and ``duo`` two. While they lead they
keep making fenced writes. Meanwhile the test, driven by a seeded ``random.Random`` (the seed is
printed; ``STRATUS_STRESS_SEED`` replays one), SIGKILLs contenders (and starts replacements),
freezes them with SIGSTOP for shorter and longer than the session timeout, expires their
sessions (see ``FaultDriver.expire`` for why only once the lease of a frozen owner lapsed), and
stops, crashes, freezes and restarts ZooKeeper itself (a server of the test's own). A deposed
contender keeps trying its old term, through the library and through a forged term that skips
the local guard, so that ZooKeeper's epoch check is exercised, not only ``is_leader``.
The run lasts ``STRATUS_STRESS_SECS`` seconds (default 20; ``make stress`` sets 300).

Then the faults stop with a last blow (every current leader is SIGKILLed), and within a few
session timeouts every group must have exactly N leaders again, each a live contender whose
fenced write was accepted after the faults stopped, and for two more session timeouts nobody
else may believe it leads. At the
end the oracle reads ZooKeeper's record of every term and every accepted write, and every
contender's log, and checks: no write accepted from a stale epoch, nobody believing it leads
once its successor was elected, never more than N believed leaders per group, and commit
answers that agree with what ZooKeeper holds.

``test_oracle_catches_a_broken_library`` shows, deterministically, that the oracle is not
vacuous: with ``is_leader`` that keeps believing after the session expired (as tooz does) or
with commits that skip fencing, the same checks fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from stratus.coordination import Coordinator, FencedTransaction, Leadership
from stratus.coordination.records import SlotRecord
from stratus.zk.lease import LEASE_FRACTION
from stratus.zk.paths import GroupPaths
from stratus.zk.server import ZooKeeperServer
from tests.harness.stress_contender import classify
from tests.harness.stress_oracle import (
    Attempt,
    ContenderLog,
    Evidence,
    Term,
    Write,
    check_all,
    check_beliefs,
    check_fencing,
    check_leader_bound,
    check_logs_against_zookeeper,
    check_terms,
    closest_handover,
    read_contender_log,
)
from tests.harness.zkfixtures import expire_session as expire_zk_session
from tests.harness.zkfixtures import kazoo_client, wait_until

SESSION = 1.5  # seconds: the contenders' session timeout
GROUPS = {"solo": 1, "duo": 2}  # group -> leaders
CONTENDERS = 5
ROOT = "/stress"  # the coordinators' root
DATA = "/stress-data"  # where the fenced writes go: <DATA>/<group>/<slot>/w-..., .../owner
STRESS_SECS = float(os.environ.get("STRATUS_STRESS_SECS", "20"))
FAULT_GAP_SECS = (0.3, 1.8)  # between two faults, drawn uniformly
LEADER_TARGET_CHANCE = 0.7  # a contender fault hits a current leader this often
FAULT_WEIGHTS = {
    "kill": 3.0,  # SIGKILL a contender, start a replacement
    "pause_long": 3.0,  # SIGSTOP for 1.2-2.5 session timeouts: the zombie case
    "pause_lapse": 1.0,  # SIGSTOP past the lease (2/3) but short of the session timeout
    "pause_short": 1.0,  # SIGSTOP well within the lease
    "expire": 3.0,  # freeze a contender, expire its session once its lease lapsed, thaw it
    "zk_restart": 1.0,  # stop ZooKeeper, start it again at once
    "zk_outage": 1.0,  # stop ZooKeeper for 1-2.5 session timeouts
    "zk_crash": 0.7,  # SIGKILL ZooKeeper, start it again
    "zk_pause": 0.7,  # SIGSTOP ZooKeeper for 0.5-2 session timeouts
}
CONVERGE_SECS = 10 * SESSION + 15  # liveness bound once the faults stop (+ process start-up)
CONTENDER_SCRIPT = Path(__file__).parents[1] / "harness" / "stress_contender.py"


# ---------------------------------------------------------------------------------------------
# ZooKeeper reads shared by the stress test and the deterministic scenarios


def prepare_data_nodes(client: Any) -> None:
    for group, leaders in GROUPS.items():
        for slot in range(leaders):
            client.ensure_path(f"{DATA}/{group}/{slot}/owner")


def read_terms(client: Any) -> list[Term]:
    """Every term node still in ZooKeeper, with the zxid of the transaction that won it."""
    terms = []
    for group in GROUPS:
        base = GroupPaths(ROOT, group).terms
        try:
            names = client.get_children(base)
        except NoNodeError:  # nobody ever ran for this group
            continue
        for name in names:
            try:
                raw, stat = client.get(f"{base}/{name}")
            except NoNodeError:  # trimmed meanwhile
                continue
            record = SlotRecord.decode(raw)
            terms.append(Term(group, record.slot, record.epoch, record.member_id, stat.czxid))
    return terms


def read_writes(client: Any, batch: int = 2000) -> list[Write]:
    """Every accepted fenced write, with the zxid at which it was accepted."""
    writes = []
    for group, leaders in GROUPS.items():
        for slot in range(leaders):
            base = f"{DATA}/{group}/{slot}"
            names = [name for name in client.get_children(base) if name.startswith("w-")]
            for start in range(0, len(names), batch):
                chunk = names[start : start + batch]
                pending = [client.get_async(f"{base}/{name}") for name in chunk]
                for name, result in zip(chunk, pending, strict=True):
                    raw, stat = result.get(timeout=60)
                    doc = json.loads(raw)
                    writes.append(
                        Write(
                            doc["g"],
                            doc["slot"],
                            doc["epoch"],
                            doc["m"],
                            doc["id"],
                            stat.czxid,
                            f"{base}/{name}",
                        )
                    )
    return writes


def read_holders(client: Any) -> dict[tuple[str, int], tuple[str, int]]:
    """(group, slot) -> (member, epoch) of every slot held right now."""
    holders = {}
    for group in GROUPS:
        paths = GroupPaths(ROOT, group)
        try:
            names = client.get_children(paths.slots)
        except NoNodeError:
            continue
        for name in names:
            try:
                raw, _ = client.get(paths.slot(int(name)))
            except NoNodeError:
                continue
            record = SlotRecord.decode(raw)
            holders[(group, record.slot)] = (record.member_id, record.epoch)
    return holders


def check_owner_nodes(client: Any, writes: list[Write]) -> list[str]:
    """Each slot's owner node was set by the last accepted write (the two ops are atomic)."""
    violations = []
    for group, leaders in GROUPS.items():
        for slot in range(leaders):
            mine = [w for w in writes if (w.group, w.slot) == (group, slot)]
            raw, stat = client.get(f"{DATA}/{group}/{slot}/owner")
            if not mine:
                continue
            last = max(mine, key=lambda w: w.czxid)
            if stat.mzxid != last.czxid or f'"id":"{last.write_id}"' not in raw.decode():
                violations.append(
                    f"group {group!r} slot {slot}: owner node (mzxid {stat.mzxid:#x}) is not "
                    f"the last accepted write {last.write_id} (zxid {last.czxid:#x})"
                )
    return violations


def check_epoch_nodes(client: Any, terms: list[Term]) -> list[str]:
    """Each slot's epoch znode version is the epoch of its last term."""
    violations = []
    for group, leaders in GROUPS.items():
        for slot in range(leaders):
            _, stat = client.get(GroupPaths(ROOT, group).epoch(slot))
            last = max((t.epoch for t in terms if (t.group, t.slot) == (group, slot)), default=0)
            if stat.version != last:
                violations.append(
                    f"group {group!r} slot {slot}: epoch znode at version {stat.version}, "
                    f"but the last term won had epoch {last}"
                )
    return violations


def expire_session(hosts: str, session_id: int, password: bytes) -> bool:
    """Expire a session the way ZooKeeper's own tests do: take it over, then close it."""
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=SESSION)
    try:
        intruder.start(timeout=3)
    except KazooTimeoutError:
        return False
    finally:
        intruder.stop()
        intruder.close()
    return True


# ---------------------------------------------------------------------------------------------
# The contender processes


@dataclass
class Proc:
    member: str
    process: subprocess.Popen[bytes]
    log_path: Path
    stderr_path: Path
    paused: bool = False
    killed: bool = False

    def alive(self) -> bool:
        return self.process.poll() is None

    def session(self) -> tuple[int, bytes] | None:
        """The last session this contender logged."""
        last = None
        with contextlib.suppress(OSError), self.log_path.open(encoding="utf-8") as log:
            for line in log:
                if line.startswith('{"ev":"session"'):
                    last = line
        if last is None:
            return None
        try:
            doc = json.loads(last)
        except ValueError:
            return None
        return int(doc["id"]), bytes.fromhex(doc["pw"])


class Cluster:
    """The contender processes of one run; every one of them is reaped by ``kill_all``."""

    def __init__(self, hosts: str, log_dir: Path) -> None:
        self.hosts = hosts
        self.log_dir = log_dir
        self.procs: list[Proc] = []
        self.crashes: list[str] = []

    def spawn(self) -> Proc:
        member = f"c{len(self.procs) + 1}"
        log_path = self.log_dir / f"{member}.jsonl"
        stderr_path = self.log_dir / f"{member}.stderr"
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(CONTENDER_SCRIPT),
                    self.hosts,
                    ROOT,
                    DATA,
                    member,
                    str(log_path),
                    str(SESSION),
                    *(f"{group}:{leaders}" for group, leaders in GROUPS.items()),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        proc = Proc(member, process, log_path, stderr_path)
        self.procs.append(proc)
        return proc

    def running(self) -> list[Proc]:
        return [p for p in self.procs if p.alive()]

    def by_member(self, member: str) -> Proc | None:
        return next((p for p in self.procs if p.member == member), None)

    def signal(self, proc: Proc, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.process.send_signal(signum)

    def kill(self, proc: Proc) -> None:
        proc.killed = True
        self.signal(proc, signal.SIGKILL)
        proc.process.wait(timeout=10)
        proc.paused = False

    def pause(self, proc: Proc) -> None:
        proc.paused = True
        self.signal(proc, signal.SIGSTOP)

    def resume(self, proc: Proc) -> None:
        proc.paused = False
        self.signal(proc, signal.SIGCONT)

    def _crashed(self, proc: Proc) -> str:
        tail = proc.stderr_path.read_text(errors="replace")[-2000:]
        return f"{proc.member} exited by itself with {proc.process.returncode}: {tail}"

    def replace_crashed(self) -> None:
        """A contender that died by itself is a finding; keep the cluster at full size."""
        for proc in self.procs:
            if not proc.killed and not proc.alive():
                proc.killed = True
                self.crashes.append(self._crashed(proc))
                self.spawn()

    def terminate_all(self, timeout: float) -> None:
        """SIGTERM: each contender resigns, closes its session, logs its exit and exits 0."""
        for proc in self.running():
            self.resume(proc)
            self.signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.crashes.append(f"{proc.member} still ran {timeout:g}s after SIGTERM")
                self.kill(proc)
            if not proc.killed and proc.process.returncode != 0:
                proc.killed = True
                self.crashes.append(self._crashed(proc))

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.alive():
                self.signal(proc, signal.SIGCONT)
                self.kill(proc)


@pytest.fixture
def cluster(zk_restartable: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    log_dir = tmp_path / "contenders"
    log_dir.mkdir()
    cluster = Cluster(zk_restartable.connect_string, log_dir)
    try:
        yield cluster
    finally:
        cluster.kill_all()
        if zk_restartable.pid is not None:  # a frozen JVM would ignore the fixture's SIGTERM
            os.kill(zk_restartable.pid, signal.SIGCONT)


# ---------------------------------------------------------------------------------------------
# The monitor: ZooKeeper's record, polled while the faults run


class Monitor:
    """Polls ZooKeeper from a thread of its own: records every term before the library trims
    old ones, and knows the current leaders (the faults aim at them)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.terms: dict[tuple[str, int, int], Term] = {}
        self.holders: dict[tuple[str, int], tuple[str, int]] = {}
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stress-monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.poll()
            except KazooException:
                continue  # ZooKeeper is down or restarting: that is the workload
            except Exception as exc:
                self.violations.append(f"the monitor failed: {exc!r}")
                return

    def poll_until_read(self, timeout: float) -> None:
        """One whole poll, asked again while ZooKeeper is not back (or this client's session
        is: a restart slower than the session timeout the server grants expires it, and
        kazoo then opens a new one)."""

        def polled() -> bool:
            try:
                self.poll()
            except KazooException:
                return False
            return True

        wait_until(polled, timeout, "the monitor to read every term")

    def poll(self) -> None:
        for term in read_terms(self.client):
            self.terms.setdefault((term.group, term.slot, term.epoch), term)
        holders = read_holders(self.client)
        for group, leaders in GROUPS.items():
            held = [slot for (g, slot) in holders if g == group]
            if len(held) > leaders or any(not 0 <= slot < leaders for slot in held):
                self.violations.append(f"group {group!r}: slots {sorted(held)} held at once")
        self.holders = holders


# ---------------------------------------------------------------------------------------------
# The faults


@dataclass
class FaultDriver:
    rng: random.Random
    cluster: Cluster
    server: ZooKeeperServer
    monitor: Monitor
    done: Counter[str] = field(default_factory=Counter)
    history: list[str] = field(default_factory=list)
    timers: list[tuple[float, str, Callable[[], None]]] = field(default_factory=list)
    zk_down: bool = False

    def note(self, what: str) -> None:
        self.history.append(f"{time.monotonic():.3f} {what}")

    def later(self, delay: float, what: str, action: Callable[[], None]) -> None:
        self.timers.append((time.monotonic() + delay, what, action))

    def run_due(self, everything: bool = False) -> None:
        now = time.monotonic()
        due = [t for t in self.timers if everything or t[0] <= now]
        self.timers = [t for t in self.timers if t not in due]
        for _, what, action in sorted(due, key=lambda t: t[0]):
            self.note(what)
            action()

    def next_timer(self) -> float:
        return min((t[0] for t in self.timers), default=float("inf"))

    def target(self, *, paused_ok: bool) -> Proc | None:
        candidates = [p for p in self.cluster.running() if paused_ok or not p.paused]
        leaders = [
            proc
            for member, _ in self.monitor.holders.values()
            if (proc := self.cluster.by_member(member)) in candidates and proc is not None
        ]
        if leaders and self.rng.random() < LEADER_TARGET_CHANCE:
            return self.rng.choice(leaders)
        return self.rng.choice(candidates) if candidates else None

    def inject(self) -> None:
        kinds = list(FAULT_WEIGHTS)
        kind = self.rng.choices(kinds, weights=[FAULT_WEIGHTS[k] for k in kinds])[0]
        if kind.startswith("zk_") and self.zk_down:
            kind = "kill"
        getattr(self, kind)()
        self.done[kind] += 1

    def kill(self) -> None:
        proc = self.target(paused_ok=True)
        if proc is not None:
            self.note(f"kill {proc.member}")
            self.cluster.kill(proc)
            self.note(f"spawn {self.cluster.spawn().member}")

    def _pause(self, low: float, high: float) -> None:
        proc = self.target(paused_ok=False)
        if proc is None:
            return
        secs = self.rng.uniform(low, high) * SESSION
        self.note(f"pause {proc.member} for {secs:.2f}s")
        self.cluster.pause(proc)
        self.later(secs, f"resume {proc.member}", lambda: self.cluster.resume(proc))

    def pause_long(self) -> None:
        self._pause(1.2, 2.5)

    def pause_lapse(self) -> None:
        self._pause(0.75, 0.95)

    def pause_short(self) -> None:
        self._pause(0.05, 0.4)

    def expire(self) -> None:
        """Freeze a contender, expire its session once its lease has lapsed, thaw it later.

        An intruder's close ends a session at once, not by timeout; the lease behind
        ``is_leader`` assumes the latter (no real deployment closes another process's session).
        So the session is closed only when its frozen owner's lease is over: to the owner this
        is exactly a real expiry, and it wakes up to find its session gone.
        """
        proc = self.target(paused_ok=False)
        session = proc.session() if proc else None
        if proc is None or session is None or self.zk_down:
            return
        lapsed = LEASE_FRACTION * SESSION + 0.1
        self.note(f"pause {proc.member} to expire its session {session[0]:#x}")
        self.cluster.pause(proc)

        def close_session() -> None:
            if proc.alive() and proc.paused and not self.zk_down:
                closed = expire_session(self.server.connect_string, *session)
                self.note(f"expired {proc.member} session {session[0]:#x}: {closed}")

        self.later(lapsed, f"expire {proc.member}", close_session)
        thaw = lapsed + self.rng.uniform(0.05, 0.6) * SESSION
        self.later(thaw, f"resume {proc.member}", lambda: self.cluster.resume(proc))

    def _zk_back(self) -> None:
        self.server.start()
        self.zk_down = False

    def zk_restart(self) -> None:
        self.note("zookeeper stop")
        self.zk_down = True
        self.server.stop()
        self.later(self.rng.uniform(0, 0.3) * SESSION, "zookeeper start", self._zk_back)

    def zk_outage(self) -> None:
        self.note("zookeeper stop (outage)")
        self.zk_down = True
        self.server.stop()
        self.later(self.rng.uniform(1.0, 2.5) * SESSION, "zookeeper start", self._zk_back)

    def zk_crash(self) -> None:
        self.note("zookeeper kill -9")
        self.zk_down = True
        self.server.kill()
        self.later(self.rng.uniform(0, 1.0) * SESSION, "zookeeper start", self._zk_back)

    def zk_pause(self) -> None:
        pid = self.server.pid
        if pid is None:
            return
        self.note("zookeeper SIGSTOP")
        self.zk_down = True
        os.kill(pid, signal.SIGSTOP)

        def resume() -> None:
            os.kill(pid, signal.SIGCONT)
            self.zk_down = False

        self.later(self.rng.uniform(0.5, 2.0) * SESSION, "zookeeper SIGCONT", resume)

    def run(self, secs: float) -> None:
        deadline = time.monotonic() + secs
        next_fault = time.monotonic() + self.rng.uniform(*FAULT_GAP_SECS)
        while True:
            self.run_due()
            self.cluster.replace_crashed()
            now = time.monotonic()
            if now >= deadline:
                break
            if now >= next_fault:
                self.inject()
                next_fault = time.monotonic() + self.rng.uniform(*FAULT_GAP_SECS)
            # Pacing of the workload (not synchronization): wait for the next fault or timer.
            time.sleep(max(0.0, min(next_fault, self.next_timer(), deadline) - time.monotonic()))
        # Let pending thaws, expiries and restarts happen on time: an expiry brought forward
        # would close a session whose frozen owner's lease is still running.
        while self.timers:
            time.sleep(max(0.0, self.next_timer() - time.monotonic()))
            self.run_due()

    def kill_every_leader(self) -> None:
        """The last blow, so that liveness is never satisfied by leaders that just stayed put."""
        for member, _ in set(self.monitor.holders.values()):
            proc = self.cluster.by_member(member)
            if proc is not None and proc.alive():
                self.note(f"kill leader {member}")
                self.cluster.kill(proc)
                self.note(f"spawn {self.cluster.spawn().member}")
        self.done["kill_every_leader"] += 1


# ---------------------------------------------------------------------------------------------
# The stress test


def await_liveness(client: Any, cluster: Cluster, quiet_zxid: int) -> dict[Any, tuple[str, int]]:
    """Every group gets N leaders, live contenders whose fenced write landed after the faults."""
    state: dict[str, Any] = {}

    def live() -> bool:
        try:
            holders = read_holders(client)
            owners = {key: client.get(f"{DATA}/{key[0]}/{key[1]}/owner") for key in holders}
        except KazooException:
            return False
        state["holders"] = holders
        alive = {p.member for p in cluster.running()}
        for group, leaders in GROUPS.items():
            mine = {key: h for key, h in holders.items() if key[0] == group}
            if len(mine) != min(leaders, len(alive)):
                return False
            for key, (member, epoch) in mine.items():
                raw, stat = owners[key]
                if member not in alive or stat.mzxid <= quiet_zxid:
                    return False
                if f'"m":"{member}"' not in raw.decode() or f'"epoch":{epoch},' not in raw.decode():
                    return False
        return True

    try:
        wait_until(live, CONVERGE_SECS, "N live leaders per group, each with a fresh write")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen holders: {state.get('holders')}") from None
    holders: dict[Any, tuple[str, int]] = state["holders"]
    return holders


def stays_true(condition: Callable[[], object], secs: float, what: str) -> None:
    """Poll ``condition`` for ``secs`` seconds (an observation window); fail if it turns false."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        assert condition(), f"no longer true: {what}"
        time.sleep(0.05)


def summarize(logs: list[ContenderLog], terms: list[Term], writes: list[Write]) -> str:
    outcomes = Counter(a.result or "none" for log in logs for a in log.attempts.values())
    by_mode: dict[str, Counter[str]] = {}
    for log in logs:
        for a in log.attempts.values():
            by_mode.setdefault(a.mode, Counter())[a.result or "none"] += 1
    per_group = Counter(t.group for t in terms)
    closest = closest_handover(
        [b for log in logs for b in log.beliefs], [e for log in logs for e in log.evidence]
    )
    return (
        f"closest handover: {closest if closest is None else round(closest, 3)}s; "
        f"terms won: {dict(per_group)}; accepted writes: {len(writes)}; "
        f"commit outcomes: {dict(outcomes)}; by mode: "
        f"{ {mode: dict(c) for mode, c in by_mode.items()} }; contenders: {len(logs)}"
    )


@pytest.mark.stress
@pytest.mark.solo
@pytest.mark.timeout(STRESS_SECS * 1.5 + 300)
def test_random_faults_never_break_fencing_or_the_leader_bound(
    zk_restartable: ZooKeeperServer, cluster: Cluster
) -> None:
    seed = int(os.environ.get("STRATUS_STRESS_SEED") or random.SystemRandom().randrange(2**32))
    print(f"\nstress: seed={seed} secs={STRESS_SECS:g} (replay: STRATUS_STRESS_SEED={seed})")
    rng = random.Random(seed)
    with kazoo_client(zk_restartable.connect_string, session_timeout=60.0) as client:
        prepare_data_nodes(client)
        for _ in range(CONTENDERS):
            cluster.spawn()
        wait_until(lambda: len(read_holders(client)) == sum(GROUPS.values()), 60, "first leaders")
        started = time.monotonic()
        with Monitor(client) as monitor:
            driver = FaultDriver(rng, cluster, zk_restartable, monitor)
            try:
                driver.run(STRESS_SECS)
                wait_until(lambda: zk_restartable.mode() is not None, 30, "ZooKeeper serving")
                monitor.poll_until_read(30)
                driver.kill_every_leader()
            finally:
                driver.run_due(everything=True)  # after a failure: thaw, restart ZooKeeper
                (cluster.log_dir / "faults.log").write_text("\n".join(driver.history) + "\n")
            quiet_path = client.create(f"{DATA}/quiet-", sequence=True)
            quiet_zxid = client.exists(quiet_path).czxid
            quiet_at = time.monotonic()
            holders = await_liveness(client, cluster, quiet_zxid)
            converged_at = time.monotonic()
            # while nothing fails the leaders stay put, and nobody else believes it leads
            stays_true(lambda: read_holders(client) == holders, 2 * SESSION, "same leaders")
            monitor.poll()
        ended_at = time.monotonic()
        cluster.terminate_all(timeout=15)
        for term in read_terms(client):
            monitor.terms.setdefault((term.group, term.slot, term.epoch), term)
        terms = list(monitor.terms.values())
        writes = read_writes(client)
        extra = check_owner_nodes(client, writes) + check_epoch_nodes(client, terms)
    logs = [read_contender_log(p.log_path) for p in cluster.procs]
    # after convergence only the elected believe they lead
    believers = {
        (b.group, b.slot, b.member, b.epoch)
        for log in logs
        for b in log.beliefs
        if converged_at <= b.t0 <= ended_at
    }
    expected = {(g, s, m, e) for (g, s), (m, e) in holders.items()}
    if not believers <= expected:
        extra.append(f"after convergence {sorted(believers - expected)} believed they led")

    violations = (
        check_all(terms, writes, logs, GROUPS) + monitor.violations + cluster.crashes + extra
    )
    print(f"stress: faults {dict(driver.done)}")
    print(f"stress: {summarize(logs, terms, writes)}")
    print(
        f"stress: faults ran {quiet_at - started:.1f}s, converged {converged_at - quiet_at:.1f}s "
        f"after; contender logs in {cluster.log_dir}"
    )
    assert not violations, (
        f"seed {seed}: {len(violations)} violation(s):\n"
        + "\n".join(violations)
        + "\nlast faults:\n"
        + "\n".join(driver.history[-30:])
    )


# ---------------------------------------------------------------------------------------------
# The oracle is not vacuous: a deterministic deposed-leader scenario with broken libraries


def unfenced_commit(self: FencedTransaction) -> list[Any]:
    """A broken ``commit``: no local is_leader guard and no epoch check, just the writes."""
    leadership = self._leadership
    tx = leadership._client.transaction()
    for name, args, kwargs in self._ops:
        getattr(tx, name)(*args, **kwargs)
    return list(tx.commit())


BROKEN_LIBRARIES: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], set[str]]] = {
    # The real library: the deposed leader no longer believes, and its write is refused.
    "correct": (lambda mp: None, set()),
    # is_leader that, like tooz, keeps believing after the session expired: the epoch check
    # in ZooKeeper still refuses the write, but the belief overlaps the successor's term.
    "believes_after_expiry": (
        lambda mp: mp.setattr(Leadership, "is_leader", property(lambda self: True)),
        {"check_beliefs", "check_leader_bound"},
    ),
    # commit without fencing: the deposed leader's write lands after its successor's term began.
    "unfenced_commit": (
        lambda mp: mp.setattr(FencedTransaction, "commit", unfenced_commit),
        {"check_fencing"},
    ),
}


def attempt(term: Leadership, member: str, write_id: str) -> Attempt:
    """What a stress contender does once: ask is_leader, then try a fenced write; the record."""
    t0 = time.monotonic()
    believed = term.is_leader
    t1 = time.monotonic()
    value = json.dumps(
        {"m": member, "g": term.group, "slot": term.slot, "epoch": term.epoch, "id": write_id},
        separators=(",", ":"),
    ).encode()
    base = f"{DATA}/{term.group}/{term.slot}"
    result, path = "ok", None
    try:
        tx = term.transaction().create(f"{base}/w-", value, sequence=True)
        path = tx.set_data(f"{base}/owner", value).commit()[0]
    except Exception as exc:
        result = classify(exc)
    return Attempt(
        member, write_id, term.group, term.slot, term.epoch, believed, t0, t1, result,
        time.monotonic(), path,
    )  # fmt: skip


@pytest.mark.parametrize("library", list(BROKEN_LIBRARIES))
def test_oracle_catches_a_broken_library(
    library: str, zk_hosts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """a leads, b waits; a's session expires, b is elected and writes; then a tries again."""
    break_library, expected = BROKEN_LIBRARIES[library]
    logs = {"a": ContenderLog("a"), "b": ContenderLog("b")}
    b_terms: list[Leadership] = []
    coordinators = []
    try:
        a = Coordinator.standalone(zk_hosts, root=ROOT, session_timeout=SESSION).start()
        coordinators.append(a)
        b = Coordinator.standalone(zk_hosts, root=ROOT, session_timeout=SESSION).start()
        coordinators.append(b)
        prepare_data_nodes(a.session.client)
        a_term = a.nominate("solo", "a", timeout=10)
        logs["a"].elections.append(Evidence("solo", 0, a_term.epoch, "a", time.monotonic(), ""))
        b.nominate_async("solo", "b", b_terms.append)
        wait_until(lambda: b.get_candidates("solo") == ["a", "b"], 10, "b queued behind a")
        done = attempt(a_term, "a", "a-1")
        assert done.result == "ok"
        logs["a"].attempts[done.write_id] = done

        break_library(monkeypatch)
        old_session = a.session.session_id
        expire_zk_session(
            lambda: a.session.session_id, a.session.client.client_id, zk_hosts, SESSION
        )
        wait_until(lambda: b_terms, 10, "b elected")
        logs["b"].elections.append(Evidence("solo", 0, b_terms[0].epoch, "b", time.monotonic(), ""))
        for n in (1, 2):
            done = attempt(b_terms[0], "b", f"b-{n}")
            assert done.result == "ok"
            logs["b"].attempts[done.write_id] = done
        wait_until(
            lambda: a.session.client.connected and a.session.session_id not in (None, old_session),
            10,
            "a reconnected with a new session",
        )
        done = attempt(a_term, "a", "a-2")  # the deposed leader tries its old term
        logs["a"].attempts[done.write_id] = done

        terms, writes = read_terms(a.session.client), read_writes(a.session.client)
    finally:
        monkeypatch.undo()
        for coordinator in coordinators:
            coordinator.close()

    beliefs = [x for log in logs.values() for x in log.beliefs]
    evidence = [x for log in logs.values() for x in log.evidence]
    found = {
        name
        for name, violations in (
            ("check_terms", check_terms(terms, GROUPS)),
            ("check_fencing", check_fencing(terms, writes)),
            ("check_beliefs", check_beliefs(beliefs, evidence)),
            ("check_leader_bound", check_leader_bound(beliefs, GROUPS)),
            ("check_logs_against_zookeeper", check_logs_against_zookeeper(logs.values(), writes)),
        )
        if violations
    }
    assert found == expected
    stale = logs["a"].attempts["a-2"].result
    assert stale == {"correct": "local", "believes_after_expiry": "fence"}.get(library, "ok")


def test_oracle_flags_reused_epochs_and_commit_answers_that_zookeeper_contradicts() -> None:
    """The two checks the scenario above cannot trip, on hand-made records."""
    twice = [Term("solo", 0, 1, "a", czxid=10), Term("solo", 0, 1, "b", czxid=20)]
    assert check_terms(twice, GROUPS)
    assert check_terms([Term("solo", 1, 1, "a", czxid=10)], GROUPS)  # solo has slot 0 only
    assert not check_terms([Term("solo", 0, 1, "a", 10), Term("solo", 0, 2, "b", 20)], GROUPS)

    refused = Attempt("a", "a-1", "solo", 0, 1, True, 0.0, 0.1, "fence", 0.2, None)
    written = Write("solo", 0, 1, "a", "a-1", czxid=15)
    assert check_logs_against_zookeeper([ContenderLog("a", {"a-1": refused})], [written])
    acknowledged = dataclasses.replace(refused, result="ok")
    assert check_logs_against_zookeeper([ContenderLog("a", {"a-1": acknowledged})], [])
    assert not check_logs_against_zookeeper([ContenderLog("a", {"a-1": acknowledged})], [written])
