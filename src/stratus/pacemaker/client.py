"""The pacemaker's client: a pool over every server of ``pacemaker.servers``, each reached
through one ``PacemakerConnection`` (``stratus.pacemaker.connection``). The pool writes
to every live server and reads from every live server, merging by the newest pulse time, so
the cluster keeps working while one server lives. A server that failed is tried again on the
next call, at most once per ``RECONNECT_SECS``::

    async with PacemakerPool(settings) as pool:
        await pool.send_pulse("/supervisors/s1", b"...")
        read = await pool.get_all_pulses_for_path("/supervisors")
        read.value    # {path: Pulse}
        read.warming  # True if every server that answered was warming up

Those calls wait for every live server (each up to ``timeout_secs``). A **quorum call**
returns as soon as ``need`` servers answered (by default a majority of the configured ones,
``stratus.pacemaker.quorum``), or at its deadline with what it got; a server that did not
answer in time finishes in the background, and the next quorum calls skip it until it has::

    ack = await pool.send_pulses_quorum([("/beats/s1", data, time.time())], deadline_secs=0.4)
    ack.reached, ack.acknowledged, ack.servers   # True, 2, 3 with one server silent
    read = await pool.get_all_pulses_quorum("/beats", deadline_secs=0.1)
    read.from_majority                           # judge nothing from less
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar

from stratus.pacemaker.connection import PacemakerConnection
from stratus.pacemaker.errors import (
    PacemakerError,
    PacemakerRequestError,
    PacemakerUnavailableError,
)
from stratus.pacemaker.protocol import Op
from stratus.pacemaker.quorum import QuorumAck, check_deadline, is_majority, quorum_need
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.pacemaker.store import Pulse

log = logging.getLogger(__name__)

RECONNECT_SECS = 1.0
T = TypeVar("T")
Address = tuple[str, int]
Answers = list[tuple["PacemakerConnection", dict[str, Any]]]


@dataclass(frozen=True)
class PoolRead(Generic[T]):
    """A merged read: the value, whether every server that answered was warming up, and how
    many of the configured servers answered."""

    value: T
    warming: bool
    answered: int
    servers: int = 0  # configured (0: unknown)

    @property
    def partial(self) -> bool:
        """Some configured server did not answer: a value may be older than the newest
        written (a writer that reached only that server)."""
        return self.answered < self.servers

    @property
    def from_majority(self) -> bool:
        """A majority of the configured servers answered: every pulse a majority stored
        before the read began is in it."""
        return is_majority(self.answered, self.servers)


class PacemakerPool:
    """Connections to every server of ``settings.servers``; writes to all, reads merged."""

    def __init__(
        self, settings: PacemakerClientSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._connections: dict[Address, PacemakerConnection] = {}
        self._next_try: dict[Address, float] = {}
        self._opening: dict[Address, asyncio.Task[None]] = {}
        # a quorum call's requests still unanswered when it returned, by server and op
        self._stragglers: dict[tuple[Address, Op], set[asyncio.Task[dict[str, Any]]]] = {}
        self._refused: dict[Address, str] = {}  # the last refusal logged, by server

    async def __aenter__(self) -> PacemakerPool:
        await self._live()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def connect(self) -> int:
        """Open the connections to every server that is up now; how many are open. A server
        that refuses this client (credentials, subtree) raises its error here."""
        return len(await self._live())

    async def close(self) -> None:
        """Close every connection, and stop the attempts and the stragglers under way."""
        tasks = [*self._opening.values(), *(t for ts in self._stragglers.values() for t in ts)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()

    # --- writes -------------------------------------------------------------------------
    async def send_pulse(self, path: str, data: bytes, time_secs: float | None = None) -> int:
        """Write a pulse to every live server; how many took it (at least one, or an error)."""
        when = time.time() if time_secs is None else time_secs
        answers = await self._on_all(Op.SEND_PULSE, path=path, data=data, time=when)
        return len(answers)

    async def send_pulses(self, pulses: list[tuple[str, bytes, float]]) -> int:
        """Write a batch of (path, data, time) in one message to every live server."""
        answers = await self._on_all(Op.SEND_PULSES, pulses=[list(p) for p in pulses])
        return len(answers)

    async def create_path(self, path: str) -> None:
        """Create ``path`` on every live server."""
        await self._on_all(Op.CREATE_PATH, path=path)

    async def delete_path(self, path: str) -> None:
        """Delete the subtree of ``path`` on every live server."""
        await self._on_all(Op.DELETE_PATH, path=path)

    async def delete_pulse_id(self, path: str) -> None:
        """Delete the pulse at ``path`` on every live server."""
        await self._on_all(Op.DELETE_PULSE_ID, path=path)

    # --- reads --------------------------------------------------------------------------
    async def exists(self, path: str) -> PoolRead[bool]:
        """Whether any live server has ``path``."""
        answers = await self._on_all(Op.EXISTS, path=path)
        return _merged(answers, any(a["exists"] for _, a in answers), len(self.settings.servers))

    async def get_pulse(self, path: str) -> PoolRead[Pulse | None]:
        """The newest pulse at ``path`` among the live servers."""
        answers = await self._on_all(Op.GET_PULSE, path=path)
        newest: Pulse | None = None
        for _, answer in answers:
            if answer["pulse"] is not None:
                pulse = Pulse(*answer["pulse"])
                if newest is None or pulse.time > newest.time:
                    newest = pulse
        return _merged(answers, newest, len(self.settings.servers))

    async def get_all_pulses_for_path(self, path: str) -> PoolRead[dict[str, Pulse]]:
        """Every pulse under ``path``, the newest of each across the live servers."""
        answers = await self._on_each(
            Op.GET_ALL_PULSES_FOR_PATH, lambda connection: connection.read_all_pulses(path)
        )
        return _merged(answers, _newest_pulses(answers), len(self.settings.servers))

    async def get_all_nodes_for_path(self, path: str) -> PoolRead[list[str]]:
        """The children of ``path`` on any live server."""
        answers = await self._on_all(Op.GET_ALL_NODES_FOR_PATH, path=path)
        nodes = sorted({n for _, a in answers for n in a["nodes"]})
        return _merged(answers, nodes, len(self.settings.servers))

    # --- quorum calls -------------------------------------------------------------------
    async def send_pulses_quorum(
        self,
        pulses: list[tuple[str, bytes, float]],
        *,
        need: int | None = None,
        deadline_secs: float | None = None,
    ) -> QuorumAck:
        """Write a batch of (path, data, time) in one message to every live server; return
        as soon as ``need`` servers (default: a majority of ``pacemaker.servers``) stored it,
        or after ``deadline_secs`` (default ``timeout_secs``) with how many had. Nothing is
        raised for a quorum missed; a refusal (``forbidden``, ``full``) is raised when it
        leaves the write short of ``need``, and logged otherwise."""
        servers = len(self.settings.servers)
        wanted = quorum_need(need, servers)
        batch = [list(pulse) for pulse in pulses]
        answers = await self._on_quorum(
            Op.SEND_PULSES,
            lambda connection: connection.request(Op.SEND_PULSES, pulses=batch),
            wanted,
            self._deadline(deadline_secs),
        )
        return QuorumAck(len(answers), servers, wanted)

    async def get_all_pulses_quorum(
        self, path: str, *, need: int | None = None, deadline_secs: float | None = None
    ) -> PoolRead[dict[str, Pulse]]:
        """Every pulse under ``path``, the newest of each among the servers that answered: as
        soon as ``need`` did (default: a majority), or after ``deadline_secs`` (default
        ``timeout_secs``) with those that had, however few (``answered`` says how many, none
        included: the caller judges, ``PoolRead.from_majority``)."""
        servers = len(self.settings.servers)
        answers = await self._on_quorum(
            Op.GET_ALL_PULSES_FOR_PATH,
            lambda connection: connection.read_all_pulses(path),
            quorum_need(need, servers),
            self._deadline(deadline_secs),
        )
        return _merged(answers, _newest_pulses(answers), servers)

    def _deadline(self, deadline_secs: float | None) -> float:
        """When a quorum call given ``deadline_secs`` from now ends, on the loop's clock."""
        secs = self.settings.timeout_secs if deadline_secs is None else deadline_secs
        return asyncio.get_running_loop().time() + check_deadline(secs)

    async def _on_quorum(
        self,
        op: Op,
        call: Callable[[PacemakerConnection], Coroutine[Any, Any, dict[str, Any]]],
        need: int,
        until: float,
    ) -> Answers:
        """``call`` on every live connection at once; the answers of those that gave one by
        the time ``need`` had, or by ``until`` (the loop's clock).

        A request still unanswered then is left to finish (each is bounded by
        ``timeout_secs``, which marks a silent server down) as a straggler; while a server
        has a straggler of ``op``, later quorum calls of ``op`` skip it rather than queue
        behind it, so a silent server holds at most one request of each caller."""
        loop = asyncio.get_running_loop()
        asked: dict[asyncio.Task[dict[str, Any]], PacemakerConnection] = {}
        for connection in await self._live_for(need, until):
            if self._stragglers.get((_address(connection), op)):
                continue
            asked[asyncio.create_task(call(connection))] = connection
        answers: Answers = []
        refusal: PacemakerRequestError | None = None
        pending = set(asked)
        try:
            while pending and len(answers) < need and loop.time() < until:
                done, pending = await asyncio.wait(
                    pending, timeout=until - loop.time(), return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    answer = self._answered(_address(asked[task]), task)
                    if isinstance(answer, PacemakerRequestError):
                        refusal = answer
                    elif answer is not None:
                        answers.append((asked[task], answer))
        finally:
            for task in pending:
                self._straggle(_address(asked[task]), op, task)
        if refusal is not None and len(answers) < need:
            raise refusal  # the reason the quorum was missed is the caller's to see
        return answers

    def _answered(
        self, address: Address, task: asyncio.Task[dict[str, Any]]
    ) -> dict[str, Any] | PacemakerRequestError | None:
        """A finished request's answer, or its refusal (logged once until the server
        answers again), or None when the server failed (it is reconnected at once)."""
        error = None if task.cancelled() else task.exception()
        if task.cancelled() or (error is not None and not isinstance(error, Exception)):
            return None
        if isinstance(error, PacemakerRequestError):
            if self._refused.get(address) != error.code:
                self._refused[address] = error.code
                log.warning(
                    "event=pacemaker_refused server=%s:%d error=%s",
                    *address,
                    str(error)[:200],
                )
            return error
        if error is not None:
            self._next_try[address] = 0.0
            return None
        self._refused.pop(address, None)
        return task.result()

    def _straggle(self, address: Address, op: Op, task: asyncio.Task[dict[str, Any]]) -> None:
        """Keep ``task`` (an answer no call waits for any more) until it ends."""
        key = (address, op)
        self._stragglers.setdefault(key, set()).add(task)

        def ended(finished: asyncio.Task[dict[str, Any]]) -> None:
            waiting = self._stragglers.get(key, set())
            waiting.discard(finished)
            if not waiting:
                self._stragglers.pop(key, None)
            self._answered(address, finished)

        task.add_done_callback(ended)

    # --- the servers --------------------------------------------------------------------
    async def _live(self) -> list[PacemakerConnection]:
        """The open connections. Each due server (down, and not tried for RECONNECT_SECS) is
        reconnected in the background; a call waits for those attempts only while no server
        is connected (a new pool, or every server down), so a server that hangs holds up no
        call that another server answers."""
        attempts = self._reconnect_due()
        if attempts and not self._open():
            await asyncio.wait(attempts)
            _raise_refusals(attempts)
        return self._open()

    async def _live_for(self, need: int, until: float) -> list[PacemakerConnection]:
        """The open connections, once ``need`` are open, no attempt is left under way, or at
        ``until`` (the loop's clock): a server that hangs while connecting holds up a quorum
        call only while the others are too few."""
        attempts = set(self._reconnect_due())
        loop = asyncio.get_running_loop()
        while attempts and len(self._open()) < need and loop.time() < until:
            done, attempts = await asyncio.wait(
                attempts, timeout=until - loop.time(), return_when=asyncio.FIRST_COMPLETED
            )
            _raise_refusals(done)
        return self._open()

    def _reconnect_due(self) -> list[asyncio.Task[None]]:
        """Start a connection attempt to each due server; every attempt under way."""
        now = self._clock()
        for address in self.settings.servers:
            connection = self._connections.get(address)
            if connection is not None and not connection.closed:
                continue
            if self._next_try.get(address, 0.0) > now or address in self._opening:
                continue
            task = asyncio.create_task(self._connect(address))
            self._opening[address] = task
            task.add_done_callback(functools.partial(self._opened, address))
        return list(self._opening.values())

    def _open(self) -> list[PacemakerConnection]:
        return [c for c in self._connections.values() if not c.closed]

    def _opened(self, address: Address, task: asyncio.Task[None]) -> None:
        """A connection attempt ended; its error is the awaiting call's, or dropped here."""
        self._opening.pop(address, None)
        if not task.cancelled():
            task.exception()  # retrieved: a background attempt has nobody else to raise to

    async def _connect(self, address: Address) -> None:
        old = self._connections.pop(address, None)
        if old is not None:
            await old.close()
        connection = PacemakerConnection(*address, self.settings)
        try:
            await connection.open()
        except PacemakerUnavailableError:
            await connection.close()
            self._next_try[address] = self._clock() + RECONNECT_SECS
            return
        except BaseException:
            await connection.close()
            self._next_try[address] = self._clock() + RECONNECT_SECS
            raise  # refused credentials (retrying at once will not help), or cancelled
        self._connections[address] = connection

    async def _on_all(
        self, op: Op, **fields: Any
    ) -> list[tuple[PacemakerConnection, dict[str, Any]]]:
        return await self._on_each(op, lambda connection: connection.request(op, **fields))

    async def _on_each(
        self, op: Op, call: Callable[[PacemakerConnection], Awaitable[dict[str, Any]]]
    ) -> list[tuple[PacemakerConnection, dict[str, Any]]]:
        """``call`` on every live connection at once; the answers of those that gave one."""
        live = await self._live()
        results = await asyncio.gather(*(call(c) for c in live), return_exceptions=True)
        answers: list[tuple[PacemakerConnection, dict[str, Any]]] = []
        refusal: PacemakerRequestError | None = None
        for connection, result in zip(live, results, strict=True):
            if isinstance(result, PacemakerRequestError):
                refusal = result
            elif isinstance(result, BaseException):
                self._next_try[(connection.host, connection.port)] = 0.0
            else:
                answers.append((connection, result))
        if refusal is not None:
            raise refusal  # a refusal (forbidden, full, bad path) is the caller's to see
        if not answers:
            servers = ", ".join(f"{h}:{p}" for h, p in self.settings.servers)
            raise PacemakerUnavailableError(f"no pacemaker answered {op}; tried {servers}")
        return answers


def _address(connection: PacemakerConnection) -> Address:
    return (connection.host, connection.port)


def _raise_refusals(attempts: Iterable[asyncio.Task[None]]) -> None:
    """Raise the error of a finished connection attempt that was refused (credentials, a
    subtree): retrying at once would not help, and the caller must see why."""
    for task in attempts:
        if task.done() and not task.cancelled():
            task.result()


def _newest_pulses(answers: Answers) -> dict[str, Pulse]:
    """The pulses of ``get_all_pulses_for_path`` answers, the newest of each path."""
    merged: dict[str, Pulse] = {}
    for _, answer in answers:
        for key, (data, when) in answer["pulses"].items():
            known = merged.get(key)
            if known is None or when > known.time:
                merged[key] = Pulse(data, when)
    return merged


def _merged(answers: Answers, value: T, servers: int) -> PoolRead[T]:
    warming = all(answer.get("warming", False) for _, answer in answers)
    return PoolRead(value, warming, len(answers), servers)


def parse_servers(servers: list[str], default_port: int) -> tuple[tuple[str, int], ...]:
    """``host`` or ``host:port`` entries (``[v6]:port`` too) as (host, port) pairs."""
    parsed = []
    for entry in servers:
        host, sep, port = entry.rpartition(":")
        if not sep or "]" in port or (":" in host.strip("[]") and not host.startswith("[")):
            parsed.append((entry.strip("[]"), default_port))  # a host, or a bare IPv6 address
            continue
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise PacemakerError(
                f"pacemaker.servers entry {entry!r} has no valid port: write host or host:port"
            )
        parsed.append((host.strip("[]"), int(port)))
    return tuple(parsed)
