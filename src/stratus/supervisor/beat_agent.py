"""``python -m stratus.supervisor.beat_agent LOCAL_DIR``: the fast beats of one supervisor.

Guarantees: while a supervisor with the pacemaker store holds the worker of a pipeline with a
standby worker (a hot worker), this process sends a beat (``stratus.state.beats``) every
``supervisor.beat.interval.ms``; a beat counts once a majority of ``pacemaker.servers``
stored it, within half the beat lease. A counted beat renews the **beat lease** from the
moment the beat *started* (``HeartbeatLease``: a beat acknowledged more than the lease after
its start renews nothing), and the agent writes the lease's end to ``LOCAL_DIR/lease.beat``
(``write_lease``) each time it moves. A hot worker stops once that end has passed
(``stratus.worker.lease_file.watch_beat_lease``): so a hot worker runs only while a majority
of the pacemakers, which the leader reads, holds a beat of its supervisor younger than the
lease, whatever the supervisor's own threads are doing.

The agent is a process of its own, not a thread of the supervisor: a supervisor's pauses
(its rounds, its restart for an upgrade) must not drop beats. It runs in a session of its
own and outlives its supervisor: its supervisor records it in ``LOCAL_DIR/beat.json`` (its
pid, start time and the machine's boot) as it starts it, so that a supervisor started again
proves and adopts it, as it adopts a worker's monitor (``beat_keeper``). It stops beating,
and exits, once its supervisor's own lease (``LOCAL_DIR/lease``) has ended: a supervisor
gone for longer than its lease has no hot worker left to vouch for.

It reads what it needs from ``LOCAL_DIR/beat-agent.json``, which its supervisor writes
(mode 0600: it holds the pacemaker credentials; no secret is ever on a command line) and
which the agent deletes once read. It needs the standard library, msgpack and the pacemaker
client with its beat board; it never talks to ZooKeeper and reads no configuration::

    write_config(local_dir, AgentConfig(...))     # the supervisor, then starts the agent
    AgentRecord.read(local_dir)                   # who runs: proven with .alive()
    read_lease(local_dir / "lease.beat")          # the beat lease's end (time.monotonic())
    read_tally(local_dir / "beat-ack.json")       # how long its beats took to count
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from stratus.files import write_atomically
from stratus.logs import LogFormat, LogSettings, configure_daemon_logging
from stratus.pacemaker.auth import AuthMethod
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.errors import PacemakerError
from stratus.pacemaker.kerberos import KerberosClientSettings
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.process import boot_id, same_process, start_time
from stratus.security.tls import TlsSettings
from stratus.state.beats import BeatAck, BeatBoard
from stratus.state.errors import StateStoreUnavailableError
from stratus.supervisor.beat_ack_stats import ACK_STATS_FILE, BeatAckTally
from stratus.supervisor.heartbeat_lease import HeartbeatLease
from stratus.worker.lease_file import BEAT_LEASE_FILE, LEASE_FILE, read_lease, write_lease

AGENT_MODULE = "stratus.supervisor.beat_agent"
log = logging.getLogger(AGENT_MODULE)  # its name also when run as __main__
CONFIG_FILE = "beat-agent.json"  # what the supervisor tells it; deleted once read
RECORD_FILE = "beat.json"  # who the running agent is, for adoption
LOG_FILE = "beat-agent.log"
USAGE_EXIT = 2


@dataclass(frozen=True)
class AgentConfig:
    """What a supervisor tells its beat agent (``beat-agent.json``)."""

    supervisor: str  # supervisor.id: the beats' pulse is /beats/<it>
    interval_secs: float  # supervisor.beat.interval.ms
    lease_secs: float  # supervisor.beat.lease.secs
    pacemaker: PacemakerClientSettings  # the supervisor's own client settings
    log: LogSettings = field(default_factory=LogSettings)

    def encode(self) -> bytes:
        """JSON, the secret in hex."""
        client = asdict(self.pacemaker)
        client["secret"] = None if self.pacemaker.secret is None else self.pacemaker.secret.hex()
        data = {
            "supervisor": self.supervisor,
            "interval_secs": self.interval_secs,
            "lease_secs": self.lease_secs,
            "pacemaker": client,
            "log": {"level": self.log.level, "format": self.log.format.value},
        }
        return json.dumps(data).encode()

    @classmethod
    def decode(cls, raw: bytes) -> AgentConfig:
        """The config in ``raw``; ValueError (or KeyError, TypeError) if it is not one."""
        data = json.loads(raw)
        client: dict[str, Any] = dict(data["pacemaker"])
        secret = client.pop("secret")
        tls = client.pop("tls")
        pacemaker = PacemakerClientSettings(
            **{
                **client,
                "servers": tuple((str(host), int(port)) for host, port in client["servers"]),
                "auth_method": AuthMethod(client["auth_method"]),
                "kerberos": KerberosClientSettings(**client["kerberos"]),
            },
            secret=None if secret is None else bytes.fromhex(secret),
            tls=None if tls is None else TlsSettings(**tls),
        )
        return cls(
            supervisor=str(data["supervisor"]),
            interval_secs=float(data["interval_secs"]),
            lease_secs=float(data["lease_secs"]),
            pacemaker=pacemaker,
            log=LogSettings(int(data["log"]["level"]), LogFormat(data["log"]["format"])),
        )

    def fingerprint(self) -> dict[str, Any]:
        """What an adopted agent must share with the supervisor's settings: who it beats
        for, to which pacemakers, how often, for how long (never the secret)."""
        return {
            "supervisor": self.supervisor,
            "interval_secs": self.interval_secs,
            "lease_secs": self.lease_secs,
            "servers": [list(server) for server in self.pacemaker.servers],
        }


def write_config(local_dir: Path, config: AgentConfig) -> None:
    """Write ``beat-agent.json`` for the next agent to start (0600: credentials)."""
    write_atomically(local_dir / CONFIG_FILE, config.encode())


def read_config(local_dir: Path) -> AgentConfig:
    """Read ``beat-agent.json`` and delete it: its credentials stay on disk no longer than
    the agent's start. OSError or ValueError if it cannot be used."""
    path = local_dir / CONFIG_FILE
    try:
        raw = path.read_bytes()
    finally:
        path.unlink(missing_ok=True)
    try:
        return AgentConfig.decode(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path} is not a beat agent's config: {exc!r}") from None


@dataclass(frozen=True)
class AgentRecord:
    """``beat.json``: the running agent, its proof (pid, start time, boot) and settings."""

    pid: int
    start: int | None
    boot_id: str
    settings: dict[str, Any]

    @classmethod
    def of(cls, pid: int, config: AgentConfig) -> AgentRecord:
        """The record of the agent just started as ``pid`` (its start time is its fork's)."""
        return cls(pid, start_time(pid), boot_id(), config.fingerprint())

    def write(self, local_dir: Path) -> None:
        write_atomically(local_dir / RECORD_FILE, json.dumps(asdict(self)).encode())

    @classmethod
    def read(cls, local_dir: Path) -> AgentRecord | None:
        """The record in ``local_dir``; None if there is none, or it cannot be read."""
        try:
            data = json.loads((local_dir / RECORD_FILE).read_bytes())
            start = data["start"]
            return cls(
                int(data["pid"]),
                None if start is None else int(start),
                str(data["boot_id"]),
                dict(data["settings"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def alive(self) -> bool:
        """Whether the agent it records still runs: this boot, the pid's start time."""
        return (
            self.boot_id == boot_id()
            and self.start is not None
            and same_process(self.pid, self.start)
        )


class Beating(Protocol):
    """What the agent beats through (``BeatBoard``)."""

    def beat(self, supervisor_id: str, boot_id: str, seq: int, lease_secs: float) -> BeatAck: ...


class BeatAgent:
    """The loop of one agent: beat, renew, write the lease's end; see the module docstring.
    Owned by one thread (``run``); ``stop`` from any."""

    def __init__(
        self,
        config: AgentConfig,
        board: Beating,
        *,
        lease_path: Path,
        supervisor_lease_path: Path,
        ack_stats_path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        incarnation: str | None = None,
    ) -> None:
        self._config = config
        self._board = board
        self._lease_path = lease_path
        self._supervisor_lease_path = supervisor_lease_path
        self._ack_stats_path = ack_stats_path  # None: the tally is kept, not written
        self.acks = BeatAckTally()
        self._clock = clock
        self.lease = HeartbeatLease(config.lease_secs)
        self.incarnation = incarnation or uuid.uuid4().hex  # the beats' boot_id
        self.seq = 0
        self._handed: float | None = None  # the lease's end last written
        self._handed_since: float | None = None  # when the lease last written was gained
        self._failing: str | None = None  # why beats do not count, as last logged
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> str:
        """Beat until stopped or until the supervisor's lease has ended; why it ended."""
        interval = self._config.interval_secs
        due = self._clock()
        while not self._stopped.is_set():
            gone = self._supervisor_gone()
            if gone is not None:
                return gone
            self.beat_once()
            due += interval
            now = self._clock()
            due = max(due, now)  # a beat that took longer than the interval: the next now
            self._stopped.wait(due - now)
        return "stopped"

    def beat_once(self) -> None:
        """One beat: sent, counted or not, the lease renewed from its start, its end written."""
        started = self._clock()
        counted = self._send()
        now = self._clock()
        if counted:
            self.acks.counted(now - started)
        else:
            self.acks.not_counted()
        if counted and self.lease.renewed(write_started=started, now=now):
            log.info(
                "event=beat_lease_held supervisor=%s seq=%d lease_secs=%g",
                self._config.supervisor,
                self.seq,
                self._config.lease_secs,
            )
        if self.lease.check(now):
            log.warning(
                "event=beat_lease_lapsed supervisor=%s seq=%d lease_secs=%g reason=%r",
                self._config.supervisor,
                self.seq,
                self._config.lease_secs,
                self._failing or "no beat counted within the lease",
            )
        self.seq += 1
        self._hand()
        self._write_acks(now)

    def _send(self) -> bool:
        """Whether this beat counted (a majority of the pacemakers stored it in time)."""
        config = self._config
        try:
            ack = self._board.beat(config.supervisor, self.incarnation, self.seq, config.lease_secs)
        except (StateStoreUnavailableError, PacemakerError, ValueError) as exc:
            self._note_failure(f"{type(exc).__name__}: {exc}")
            return False
        if not ack.counted:
            self._note_failure(
                f"{ack.acknowledged} of {ack.servers} pacemakers stored the beat in time, "
                f"{ack.need} needed"
            )
            return False
        if self._failing is not None:
            log.info("event=beats_counted supervisor=%s seq=%d", config.supervisor, self.seq)
            self._failing = None
        return True

    def _note_failure(self, why: str) -> None:
        if why != self._failing:
            log.warning(
                "event=beat_not_counted supervisor=%s seq=%d error=%r",
                self._config.supervisor,
                self.seq,
                why,
            )
        self._failing = why

    def _hand(self) -> None:
        """Write the lease's end when it moved (a lapsed lease's end stays: it has passed),
        and when it was gained first when that moved too (``write_lease``)."""
        ends, since = self.lease.ends_at(), self.lease.held_since
        if ends is None or ends == self._handed:
            return
        gained = since if since != self._handed_since else None  # a gain: recorded first
        try:
            write_lease(self._lease_path, ends, since=gained)
        except OSError as exc:  # the workers see no newer lease and stop: safe, and loud
            log.error("event=lease_file_not_written path=%s error=%r", self._lease_path, exc)
            return
        self._handed, self._handed_since = ends, since

    def _write_acks(self, now: float) -> None:
        """Write the acknowledgement tally for the supervisor's metrics, once a second."""
        if self._ack_stats_path is None:
            return
        try:
            self.acks.write_if_due(self._ack_stats_path, now)
        except OSError as exc:  # a metric missing: logged, never a beat missed
            log.warning(
                "event=beat_ack_stats_not_written path=%s error=%r", self._ack_stats_path, exc
            )

    def _supervisor_gone(self) -> str | None:
        """Why the supervisor's lease no longer holds (it ended, or its file is gone)."""
        until = read_lease(self._supervisor_lease_path)
        if until is None:
            return f"the supervisor's lease file {self._supervisor_lease_path} is unreadable"
        if until <= self._clock():
            return "the supervisor's lease has ended"
        return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {AGENT_MODULE} LOCAL_DIR", file=sys.stderr)
        return USAGE_EXIT
    local_dir = Path(args[0])
    try:
        config = read_config(local_dir)
    except (OSError, ValueError) as exc:
        print(f"error: cannot start the beat agent: {exc}", file=sys.stderr)
        return USAGE_EXIT
    configure_daemon_logging(config.log, context={"supervisor": config.supervisor})
    pool = BlockingPacemakerPool(config.pacemaker, call_timeout_secs=config.lease_secs)
    agent = BeatAgent(
        config,
        BeatBoard(pool),
        lease_path=local_dir / BEAT_LEASE_FILE,
        supervisor_lease_path=local_dir / LEASE_FILE,
        ack_stats_path=local_dir / ACK_STATS_FILE,
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: agent.stop())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log.info(
        "event=beat_agent_started supervisor=%s pid=%d incarnation=%s interval_secs=%g "
        "lease_secs=%g pacemakers=%d",
        config.supervisor,
        os.getpid(),
        agent.incarnation,
        config.interval_secs,
        config.lease_secs,
        len(config.pacemaker.servers),
    )
    try:
        why = agent.run()
    finally:
        pool.close()
    log.info("event=beat_agent_stopped supervisor=%s reason=%r", config.supervisor, why)
    return 0


if __name__ == "__main__":
    sys.exit(main())
