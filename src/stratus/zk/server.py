"""A real ZooKeeper server on this machine (loopback by default): standalone or a quorum member.

It runs the ZooKeeper jars that the pyspark wheel already ships (``pyspark/jars``, see
``zk/java.py``) with the machine's Java 17+. ``start()`` returns only once the server *serves
requests* (its ``srvr`` answer has a ``Mode:`` line), ``stop()`` keeps the data directory so
that the next ``start()`` resumes the same znodes and sessions, and no JVM outlives the Python
process that started it (finalizers at exit, and on Linux a parent-death signal when started
from the main thread)::

    with ZooKeeperServer(Path("/tmp/zk"), tick_time_ms=100) as server:
        client = KazooClient(hosts=server.connect_string)

It fsyncs every write before acknowledging it (``force_sync``) unless told not to, as tests
and ``stratus local`` do on their throw-away directories; ``auth`` makes it demand that
clients authenticate (``zk/auth.py``).

A quorum member listens on the ``host`` of its quorum entry; a ``command_prefix`` runs the JVM
through a launcher such as ``ip netns exec HOST`` (the tests' hosts of network namespaces), so
that a quorum can span hosts. A quorum of them is ``zk/ensemble.py``. Every failure is a
:class:`~stratus.zk.errors.ZooKeeperServerError` whose message is one line (never a Java stack
trace) that names the problem and what to do about it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import re
import secrets
import ssl
import subprocess
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from stratus.files import write_private
from stratus.process import Lifeline, ProcessGroup
from stratus.zk import ports
from stratus.zk.auth import SUPERUSER, ServerAuth, ZkCredentials, read_credentials
from stratus.zk.errors import (
    ZooKeeperDataDirError,
    ZooKeeperOptionError,
    ZooKeeperPortInUseError,
    ZooKeeperServerError,
    ZooKeeperStartError,
)
from stratus.zk.fourletter import four_letter_word
from stratus.zk.java import find_java, zookeeper_classpath
from stratus.zk.lockdown import lock_down
from stratus.zk.ports import LOOPBACK, pick_free_port
from stratus.zk.tls import ServerTls

log = logging.getLogger(__name__)

STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
MAX_SESSION_TIMEOUT_MS = 120_000
MAX_TICK_TIME_MS = 60_000  # ZooKeeper's own default is 2 s; sessions last 2 to 20 ticks
# Quorum limits are given in ticks; these keep them sensible in wall-clock time whatever the tick.
INIT_LIMIT_MS = 10_000  # a follower may take this long to connect and sync to a new leader
SYNC_LIMIT_MS = 2_000  # a follower this far behind is dropped; bounds quorum-loss detection
# Light JVM: one small heap, the serial collector and the C1 compiler only (fast start, 2 cores).
JVM_FLAGS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dzookeeper.jmx.log4j.disable=true",
)
JAAS_FILE = "jaas.conf"  # the server's SASL users, written when it has users of its own
SUPERUSER_FILE = "super.secret"  # the superuser the server made, when none was configured
POLL_INTERVAL_SECS = 0.02
FOUR_LETTER_TIMEOUT_SECS = 2.0
# While it starts, ZooKeeper may accept a four-letter word and never answer it: probe briefly.
PROBE_TIMEOUT_SECS = 0.3
LOG_SUMMARY_LINES = 3

_LOG_RECORD = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ][\d:,.]+\s+(?P<rest>(?:TRACE|DEBUG|INFO|WARN|ERROR|FATAL)\b.*)"
)


@dataclass(frozen=True)
class QuorumPeer:
    """One member of a quorum: its ``myid``, the address it listens on and its three ports."""

    server_id: int
    client_port: int
    peer_port: int
    election_port: int
    host: str = LOOPBACK


@dataclass(frozen=True)
class Quorum:
    """What makes a server a quorum member: its own id and every member (itself included)."""

    my_id: int
    peers: tuple[QuorumPeer, ...]

    def me(self) -> QuorumPeer:
        """This server's own entry."""
        return next(peer for peer in self.peers if peer.server_id == self.my_id)


class ZooKeeperServer:
    """One ZooKeeper JVM: standalone, or a quorum member when ``quorum`` is given.

    ``port=0`` picks a free loopback port once, at construction, and keeps it across restarts.
    A quorum member listens on its entry's ``host``; ``command_prefix`` (e.g. ``["ip", "netns",
    "exec", "h1"]``) is put before the ``java`` command, whose own process it must become (an
    ``exec``), so that stopping the process stops the JVM. Ports are checked free only on
    loopback without a prefix: a prefix may run the JVM where this process cannot look.
    Files in ``data_dir``: ``zoo.cfg``, ``log4j2.properties``, ``myid`` (quorum members), the
    ZooKeeper data (``version-2/``), and ``zookeeper.log`` (WARN and above, plus the JVM's own
    stdout/stderr) unless ``log_to`` names another file.

    Sessions may last from two ticks to ``max_session_timeout_ms`` (default 120 s): ZooKeeper
    grants a client that asks for more this cap instead, which is how a client with a
    hard-coded session timeout (Spark's master asks for 60 s) gets a shorter one.

    ``host`` is the address clients connect to (``0.0.0.0``: every interface; the server's
    own probes then use loopback). ``force_sync`` false skips the fsync of every write: only
    for data that may be lost, since a machine crash then loses acknowledged writes. With
    ``tls`` the server also listens for TLS clients on ``tls.port`` at ``host``, and its
    plain port then listens on loopback only (for this machine's probes and tools); a JVM
    run through a ``command_prefix`` (another host's network, whose loopback this process
    cannot reach) is probed on its secure port instead, over TLS (``ServerTls.probe_context``).
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        *,
        tick_time_ms: int = 200,
        java: str | None = None,
        log_to: Path | None = None,
        quorum: Quorum | None = None,
        max_session_timeout_ms: int | None = None,
        host: str = LOOPBACK,
        force_sync: bool = True,
        auth: ServerAuth | None = None,
        tls: ServerTls | None = None,
        command_prefix: Sequence[str] = (),
    ) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be in 0..65535, not {port}")
        if not 0 < tick_time_ms <= MAX_TICK_TIME_MS:
            raise ZooKeeperOptionError(
                f"the tick time must be 1 to {MAX_TICK_TIME_MS} ms, not {tick_time_ms}"
            )
        if max_session_timeout_ms is not None and max_session_timeout_ms < 2 * tick_time_ms:
            raise ValueError(
                f"max_session_timeout_ms must be at least the minimum session timeout, two "
                f"ticks ({2 * tick_time_ms} ms), not {max_session_timeout_ms}"
            )
        if quorum is not None and port not in (0, quorum.me().client_port):
            raise ValueError("a quorum member's port is its peer entry's client_port")
        self.data_dir = Path(data_dir).absolute()
        check_cfg_value("data directory", str(self.data_dir))
        check_cfg_value("host", quorum.me().host if quorum else host, HOST_VALUE)
        self.port = quorum.me().client_port if quorum else (port or pick_free_port())
        ports.reserve_port(self.port)
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = (
            max(MAX_SESSION_TIMEOUT_MS, 2 * tick_time_ms)
            if max_session_timeout_ms is None
            else max_session_timeout_ms
        )
        self.log_path = Path(log_to).absolute() if log_to else self.data_dir / "zookeeper.log"
        self.quorum = quorum
        self.host = quorum.me().host if quorum else host
        self.command_prefix = tuple(command_prefix)
        self.force_sync = force_sync
        self.auth = auth or ServerAuth()
        if tls is not None and tls.port == 0:
            tls = dataclasses.replace(tls, port=pick_free_port())
        if tls is not None:
            ports.reserve_port(tls.port)
        self.tls = tls
        self._java = java
        self._group: ProcessGroup | None = None
        self._log_offset = 0
        self._finalizer: weakref.finalize[..., ZooKeeperServer] | None = None

    def __repr__(self) -> str:
        return f"ZooKeeperServer({self.connect_string}, data_dir={self.data_dir}, pid={self.pid})"

    @property
    def client_host(self) -> str:
        """The address that reaches the plain client port from this machine."""
        return LOOPBACK if self.tls is not None else self.secure_host

    @property
    def secure_host(self) -> str:
        """The address that reaches the secure client port (``host``, loopback for any)."""
        return LOOPBACK if self.host in ("0.0.0.0", "::", "") else self.host

    @property
    def connect_string(self) -> str:
        """The kazoo ``hosts`` string of this one server."""
        return f"{self.client_host}:{self.port}"

    @property
    def secure_connect_string(self) -> str | None:
        """The kazoo ``hosts`` string of its TLS port (``use_ssl``), if it has one."""
        return f"{self.secure_host}:{self.tls.port}" if self.tls else None

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs, else None."""
        return self._group.pid if self.is_running() and self._group else None

    def is_running(self) -> bool:
        """Whether the JVM process is alive (not whether it serves: see :meth:`mode`)."""
        return self._group is not None and self._group.is_running()

    def start(self, timeout: float = 30.0) -> None:
        """Launch the JVM and return once it serves requests; no-op if it already runs.

        A quorum member serves only once it has joined a quorum, so restart a member while
        enough of the others run. On any failure the JVM is killed before the error is raised.
        """
        if self.is_running():
            return
        self.launch()
        self.wait_serving(timeout)
        if self.quorum is None:
            self.lock_down()

    def lock_down(self) -> None:
        """As the superuser, lock ``/``, ``/zookeeper`` and stratus's root with its quota
        (``zk/lockdown.py``), when the server checks SASL users of its own; a quorum's
        owner calls it once every member serves."""
        if not (self.auth.required and self.auth.users):
            return
        try:
            lock_down(self.connect_string, self.auth, self.superuser())
        except (KazooException, KazooTimeoutError) as exc:
            self.kill()
            raise ZooKeeperStartError(
                f"ZooKeeper on {self.connect_string} serves, but its superuser could not lock "
                f"its tree ({type(exc).__name__}: {exc}); check zookeeper.server.super.file "
                f"and the log {self.log_path}"
            ) from None
        except BaseException:
            self.kill()
            raise

    def superuser(self) -> ZkCredentials:
        """The superuser: the configured one, else one made for this data directory
        (``super.secret``, mode 600, kept across restarts)."""
        if self.auth.superuser is not None:
            return self.auth.superuser
        return stored_superuser(self.data_dir)

    def launch(self) -> None:
        """Check Java, jars, data directory and ports, then start the JVM without waiting."""
        if self.is_running():
            return
        self._release()  # a JVM that exited by itself
        java = find_java(self._java)
        classpath = zookeeper_classpath()
        config = self._write_config_files()
        jaas = self._write_jaas_file()
        if not self.command_prefix:  # a prefixed JVM runs where this process cannot look
            self._check_ports_free()
        command = [
            *self.command_prefix,
            java,
            *JVM_FLAGS,
            *self.auth.jvm_flags(jaas),
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp",
            os.pathsep.join(str(jar) for jar in classpath),
            QUORUM_MAIN if self.quorum else STANDALONE_MAIN,
            str(config),
        ]
        self._spawn(command)

    def wait_serving(self, timeout: float = 30.0) -> None:
        """Wait until the launched JVM serves requests; kill it and raise if it cannot."""
        deadline = time.monotonic() + timeout
        try:
            while not self._serves():
                if time.monotonic() >= deadline:
                    raise ZooKeeperStartError(
                        f"ZooKeeper on {self.connect_string} did not serve requests within "
                        f"{timeout:g} s ({self._log_summary()}); full log: {self.log_path}"
                    )
                time.sleep(POLL_INTERVAL_SECS)
        except BaseException:
            self.kill()
            raise
        log.info("zookeeper serving port=%d pid=%s", self.port, self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the JVM: SIGTERM, then SIGKILL after ``timeout``. Idempotent; keeps the data."""
        group = self._group
        if group is None:
            return
        code = group.stop(timeout)
        self._release()
        log.info("zookeeper stopped port=%d exit_code=%s", self.port, code)

    def kill(self) -> None:
        """Crash the JVM with SIGKILL (no clean shutdown); idempotent; keeps the data."""
        group = self._group
        if group is None:
            return
        group.kill()
        self._release()
        log.info("zookeeper killed port=%d", self.port)

    def signal_stop(self) -> None:
        """Send SIGTERM if the JVM runs, without waiting (the first half of :meth:`stop`)."""
        if self._group is not None and self._group.is_running():
            self._group.terminate()

    def four_letter(self, word: str, timeout: float = FOUR_LETTER_TIMEOUT_SECS) -> str:
        """Send a four-letter-word command (``srvr``, ``stat``, ``mntr``, ``cons``...)."""
        if len(word) != 4:
            raise ValueError(f"four-letter words have four letters, not {word!r}")
        host, port, tls = self._probe_address()
        try:
            return four_letter_word(host, port, word, timeout, tls)
        except OSError as exc:
            raise ZooKeeperServerError(
                f"four-letter word {word!r} to {host}:{port} failed: {exc}; is the server running?"
            ) from None

    def mode(self, timeout: float = FOUR_LETTER_TIMEOUT_SECS) -> str | None:
        """``standalone``, ``leader`` or ``follower`` while serving, else None."""
        try:
            host, port, tls = self._probe_address()
            answer = four_letter_word(host, port, "srvr", timeout, tls)
        except OSError:
            return None
        match = re.search(r"^Mode: (\S+)", answer, re.MULTILINE)
        return match[1] if match else None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ------------------------------------------------------------------------

    def _probe_address(self) -> tuple[str, int, ssl.SSLContext | None]:
        """Where this process asks the server its four-letter words: the plain port, or,
        when that listens on a loopback this process cannot reach, the secure one over TLS."""
        if self.tls is not None and self.command_prefix:
            return self.secure_host, self.tls.port, self.tls.probe_context()
        return self.client_host, self.port, None

    def _own_ports(self) -> list[tuple[int, str]]:
        ports = [(self.port, "client port")]
        if self.tls:
            ports.append((self.tls.port, "secure client port"))
        if self.quorum:
            me = self.quorum.me()
            ports += [(me.peer_port, "quorum port"), (me.election_port, "election port")]
        return ports

    def _check_ports_free(self) -> None:
        for port, role in self._own_ports():
            if not ports.port_is_free(port, reuse=True):
                raise ZooKeeperPortInUseError(
                    f"ZooKeeper {role} {LOOPBACK}:{port} is already in use: stop what listens "
                    f"there, or choose another port (0 picks a free one)"
                )

    def _write_config_files(self) -> Path:
        """Create the data directory and write zoo.cfg, log4j2.properties and myid into it."""
        config = self.data_dir / "zoo.cfg"
        check_data_dir(self.data_dir, ZOOKEEPER_MARKERS)
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            config.touch(mode=0o600)  # it may hold the superuser's digest
            config.chmod(0o600)
            config.write_text(self._zoo_cfg(), encoding="utf-8")
            (self.data_dir / "log4j2.properties").write_text(self._log4j2(), encoding="utf-8")
            if self.quorum:
                (self.data_dir / "myid").write_text(f"{self.quorum.my_id}\n", encoding="ascii")
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ZooKeeperDataDirError(
                f"cannot use ZooKeeper data directory {self.data_dir}: {reason} "
                f"({exc.filename}); choose a directory you can create and write"
            ) from None
        return config

    def _write_jaas_file(self) -> Path | None:
        """The JAAS file (mode 600) that lists the server's SASL users and its superuser."""
        if not self.auth.users:
            return None
        path = self.data_dir / JAAS_FILE
        try:
            write_private(path, self.auth.jaas_text(self.superuser()))
        except OSError as exc:
            raise ZooKeeperDataDirError(
                f"cannot write the JAAS file {path}: {exc.strerror or exc}"
            ) from None
        return path

    def _zoo_cfg(self) -> str:
        min_session = 2 * self.tick_time_ms
        lines = [
            f"tickTime={self.tick_time_ms}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={LOOPBACK if self.tls else self.host}",
            f"minSessionTimeout={min_session}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "admin.enableServer=false",
            f"4lw.commands.whitelist={self._four_letter_words()}",
            # Many local clients (tests, a local cluster) share one address.
            "maxClientCnxns=0",
            f"forceSync={'yes' if self.force_sync else 'no'}",
            *self.auth.zoo_cfg_lines(),
            *self._tls_lines(),
        ]
        if self.quorum:
            lines += [
                f"initLimit={math.ceil(INIT_LIMIT_MS / self.tick_time_ms)}",
                f"syncLimit={math.ceil(SYNC_LIMIT_MS / self.tick_time_ms)}",
                "standaloneEnabled=false",
                "reconfigEnabled=false",
            ]
            lines += [
                f"server.{peer.server_id}={peer.host}:{peer.peer_port}:{peer.election_port}"
                for peer in self.quorum.peers
            ]
        return "\n".join(lines) + "\n"

    def _tls_lines(self) -> list[str]:
        if self.tls is None:
            return []
        return self.tls.zoo_cfg_lines(self.host, member=self.quorum is not None)

    def _four_letter_words(self) -> str:
        """Every four-letter word on loopback; only ``srvr`` (what stratus itself asks) on a
        server others can reach or that requires authentication: the words bypass it."""
        if self.host == LOOPBACK and not self.auth.required:
            return "*"
        return "srvr"

    def _log4j2(self) -> str:
        return "\n".join(
            [
                "status = error",
                "appender.file.type = File",
                "appender.file.name = FILE",
                f"appender.file.fileName = {self.log_path}",
                "appender.file.append = true",
                "appender.file.layout.type = PatternLayout",
                "appender.file.layout.pattern = %d{ISO8601} %-5p %c{1}: %m%n",
                "rootLogger.level = warn",
                "rootLogger.appenderRef.file.ref = FILE",
                "",
            ]
        )

    def _spawn(self, command: list[str]) -> None:
        """Start the JVM in its own process group, its output appended to the log file."""
        try:
            with self.log_path.open("ab") as log_file:
                self._log_offset = log_file.seek(0, os.SEEK_END)
                group = ProcessGroup.start(
                    command,
                    lifeline=Lifeline.DEATH_SIGNAL,  # the kernel kills it if we die
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    cwd=self.data_dir,
                )
        except OSError as exc:
            raise ZooKeeperStartError(
                f"cannot launch {command[0]} (log {self.log_path}): {exc.strerror or exc}"
            ) from None
        self._group = group
        self._finalizer = weakref.finalize(self, _kill_quietly, group)
        log.info(
            "zookeeper launched port=%d pid=%d data_dir=%s", self.port, group.pid, self.data_dir
        )

    def _release(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._group = None

    def _serves(self) -> bool:
        """True once ``srvr`` answers with a Mode line; raises if the JVM has exited."""
        if self._group is None:
            raise ZooKeeperStartError(f"ZooKeeper on {self.connect_string} was not launched")
        code = self._group.poll()
        if code is not None:
            raise self._exit_error(code)
        return self.mode(PROBE_TIMEOUT_SECS) is not None

    def _exit_error(self, code: int) -> ZooKeeperServerError:
        summary = self._log_summary()
        if "Address already in use" in self._log_text():
            ports = ", ".join(f"{port} ({role})" for port, role in self._own_ports())
            return ZooKeeperPortInUseError(
                f"ZooKeeper could not listen on {self.host} ports {ports}: address already in "
                f"use; stop what listens there, or choose another port ({summary})"
            )
        return ZooKeeperStartError(
            f"ZooKeeper exited with code {code} before serving requests: {summary}; "
            f"full log: {self.log_path}"
        )

    def _log_text(self) -> str:
        """What the JVM wrote to the log since its last launch."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _log_summary(self) -> str:
        """The last few log records and exception headlines, on one line, no stack frames."""
        return summarize_log(self._log_text())


def stored_superuser(directory: Path) -> ZkCredentials:
    """The superuser kept in ``directory`` (``super.secret``, mode 600), made at first use."""
    path = directory / SUPERUSER_FILE
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        write_private(path, f"{SUPERUSER}:{secrets.token_hex(24)}\n")
        log.warning("event=zookeeper_superuser_created file=%s", path)
    return read_credentials(path)


def summarize_log(text: str, lines: int = LOG_SUMMARY_LINES) -> str:
    """The last ``lines`` meaningful lines of a JVM log, joined into one line."""
    kept: list[str] = []
    for line in text.splitlines():
        record = _LOG_RECORD.match(line)
        if record:
            kept.append(record["rest"].strip())
        elif line and not line[0].isspace():  # JVM output and exception headlines, not frames
            kept.append(line.strip())
    kept = [line[:300] for line in kept if line]
    return " | ".join(kept[-lines:]) if kept else "the log is empty"


def _kill_quietly(group: ProcessGroup) -> None:
    """Finalizer: a server object collected, or the interpreter exiting, with its JVM alive."""
    with contextlib.suppress(OSError):
        if group.is_running():
            group.kill()


# What a data directory holds once a ZooKeeper used it (stratus writes zoo.cfg first).
ZOOKEEPER_MARKERS = ("zoo.cfg", "version-2", SUPERUSER_FILE)
# A host as ZooKeeper reads it: a name, an IPv4 or an IPv6 address (a zone id too).
HOST_VALUE = re.compile(r"[A-Za-z0-9._:%\-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_cfg_value(what: str, value: str, rule: re.Pattern[str] | None = None) -> None:
    """Refuse a value that would not stay one value of ``zoo.cfg``: a line break or another
    control character would add a line of the caller's choosing (``enforce.auth.enabled``)."""
    control = _CONTROL.search(value)
    if control is not None:
        raise ZooKeeperOptionError(
            f"the ZooKeeper {what} {value!r} holds a control character "
            f"(U+{ord(control.group()):04X}); zoo.cfg cannot hold it"
        )
    if rule is not None and not rule.fullmatch(value):
        raise ZooKeeperOptionError(
            f"the ZooKeeper {what} {value!r} is not a host name or an IP address"
        )


def check_data_dir(directory: Path, markers: tuple[str, ...]) -> None:
    """Refuse a data directory that holds files but none whose name starts with one of
    ``markers``: it belongs to
    something else (``--data-dir /etc``), and ZooKeeper would write its files among them."""
    try:
        entries = sorted(entry.name for entry in directory.iterdir())
    except FileNotFoundError:
        return
    except NotADirectoryError:
        return  # the creation says so, with its own error
    except OSError as exc:
        raise ZooKeeperDataDirError(
            f"cannot use ZooKeeper data directory {directory}: {exc.strerror or exc}"
        ) from None
    if entries and not any(entry.startswith(markers) for entry in entries):
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise ZooKeeperDataDirError(
            f"cannot use ZooKeeper data directory {directory}: it holds other files "
            f"({shown}) and no ZooKeeper data; choose an empty or new directory, or the data "
            "directory of an earlier ZooKeeper"
        )
