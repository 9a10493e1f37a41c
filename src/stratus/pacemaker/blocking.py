"""A blocking facade of ``PacemakerPool`` for stratus's threaded daemons.

The nimbus and the supervisor are threaded; the pool is asyncio. The facade runs one event
loop on one daemon thread (a process builds one facade: its cluster state store), owns the
pool inside that loop, and turns every call into a wait bounded by ``call_timeout_secs``: a
call that takes longer is cancelled and raises ``PacemakerUnavailableError``, so a caller's
thread is never held longer than that, whatever the network does. ``close()`` closes the
connections, stops the loop and joins its thread::

    pool = BlockingPacemakerPool(settings, call_timeout_secs=5.0)
    pool.send_pulses([("/supervisors/s1", b"...", time.time())])
    read = pool.get_all_pulses_for_path("/supervisors")   # a PoolRead, warming included
    ack = pool.send_pulses_quorum([("/beats/s1", b"...", time.time())], deadline_secs=0.4)
    pool.close()

A quorum call (``send_pulses_quorum``, ``get_all_pulses_quorum``) returns at its own deadline
with what it got; a deadline is cut to 90 % of ``call_timeout_secs``, so that what it got
comes back before the call's own wait gives up.

Any thread may call it; the calls of several threads are served concurrently by the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from stratus.pacemaker.client import PacemakerPool, PoolRead
from stratus.pacemaker.errors import PacemakerError, PacemakerUnavailableError
from stratus.pacemaker.quorum import QuorumAck, check_deadline
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.pacemaker.store import Pulse

T = TypeVar("T")
CLOSE_TIMEOUT_SECS = 5.0
QUORUM_SHARE_OF_CALL = 0.9  # of call_timeout_secs: the rest is the loop's to hand back


class BlockingPacemakerPool:
    """``PacemakerPool``'s operations as blocking calls; see the module docstring."""

    def __init__(self, settings: PacemakerClientSettings, *, call_timeout_secs: float) -> None:
        if call_timeout_secs <= 0:
            raise ValueError(f"call_timeout_secs must be positive, not {call_timeout_secs!r}")
        self.settings = settings
        self._timeout = call_timeout_secs
        self._loop = asyncio.new_event_loop()
        self._pool = PacemakerPool(settings)
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="pacemaker-client", daemon=True
        )
        self._thread.start()

    # --- writes -------------------------------------------------------------------------
    def send_pulses(self, pulses: list[tuple[str, bytes, float]]) -> int:
        """One ``send_pulses`` message to every live server; how many took it."""
        return self._call("send_pulses", lambda: self._pool.send_pulses(pulses))

    def send_pulse(self, path: str, data: bytes, time_secs: float) -> int:
        return self._call("send_pulse", lambda: self._pool.send_pulse(path, data, time_secs))

    def send_pulses_quorum(
        self,
        pulses: list[tuple[str, bytes, float]],
        *,
        need: int | None = None,
        deadline_secs: float | None = None,
    ) -> QuorumAck:
        """``PacemakerPool.send_pulses_quorum``: one message to every live server, back once
        ``need`` (default: a majority) stored it or at the deadline, with how many had."""
        deadline = self._quorum_deadline(deadline_secs)
        return self._call(
            "send_pulses_quorum",
            lambda: self._pool.send_pulses_quorum(pulses, need=need, deadline_secs=deadline),
        )

    def delete_path(self, path: str) -> None:
        self._call("delete_path", lambda: self._pool.delete_path(path))

    def delete_pulse_id(self, path: str) -> None:
        self._call("delete_pulse_id", lambda: self._pool.delete_pulse_id(path))

    # --- reads --------------------------------------------------------------------------
    def get_pulse(self, path: str) -> PoolRead[Pulse | None]:
        return self._call("get_pulse", lambda: self._pool.get_pulse(path))

    def get_all_pulses_for_path(self, path: str) -> PoolRead[dict[str, Pulse]]:
        return self._call(
            "get_all_pulses_for_path", lambda: self._pool.get_all_pulses_for_path(path)
        )

    def get_all_nodes_for_path(self, path: str) -> PoolRead[list[str]]:
        return self._call("get_all_nodes_for_path", lambda: self._pool.get_all_nodes_for_path(path))

    def get_all_pulses_quorum(
        self, path: str, *, need: int | None = None, deadline_secs: float | None = None
    ) -> PoolRead[dict[str, Pulse]]:
        """``PacemakerPool.get_all_pulses_quorum``: back once ``need`` servers (default: a
        majority) answered or at the deadline; ``answered`` and ``servers`` say how many."""
        deadline = self._quorum_deadline(deadline_secs)
        return self._call(
            "get_all_pulses_quorum",
            lambda: self._pool.get_all_pulses_quorum(path, need=need, deadline_secs=deadline),
        )

    def _quorum_deadline(self, deadline_secs: float | None) -> float:
        """A quorum call's deadline within this facade's call timeout: the pool returns by
        then, before the wait for it is given up (which would lose what it got)."""
        wanted = self.settings.timeout_secs if deadline_secs is None else deadline_secs
        return min(check_deadline(wanted), self._timeout * QUORUM_SHARE_OF_CALL)

    # --- life ---------------------------------------------------------------------------
    def connect(self) -> int:
        """Open the connections to the servers that are up; how many are open. A refusal
        (credentials, ``SubtreeMismatchError``) is raised here; none up is not an error."""
        return self._call("connect", self._pool.connect)

    def is_running(self) -> bool:
        """Whether the event loop's thread still runs (until ``close()``)."""
        return self._thread.is_alive()

    def close(self) -> None:
        """Close every connection, stop the loop, join its thread; later calls fail at once."""
        if self._closed.is_set():
            return
        self._closed.set()
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        try:
            future.result(CLOSE_TIMEOUT_SECS)
        except (concurrent.futures.TimeoutError, OSError, PacemakerError):
            future.cancel()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CLOSE_TIMEOUT_SECS)
        if not self._thread.is_alive():
            self._loop.close()

    async def _shutdown(self) -> None:
        """Close the connections, then end whatever else runs in the loop (a connection
        still opening when its call timed out)."""
        await self._pool.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def _call(self, op: str, make: Callable[[], Awaitable[T]]) -> T:
        if self._closed.is_set():
            raise PacemakerUnavailableError(f"the pacemaker client was closed; {op} not sent")

        async def bounded() -> T:
            return await make()

        future = asyncio.run_coroutine_threadsafe(bounded(), self._loop)
        try:
            return future.result(self._timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise PacemakerUnavailableError(
                f"no pacemaker answered {op} within {self._timeout:g} s "
                f"(servers: {_servers(self.settings)}); it may still land"
            ) from None
        except concurrent.futures.CancelledError:
            raise PacemakerUnavailableError(f"{op} was cancelled: the client is closing") from None


def _servers(settings: PacemakerClientSettings) -> str:
    return ", ".join(f"{host}:{port}" for host, port in settings.servers)
