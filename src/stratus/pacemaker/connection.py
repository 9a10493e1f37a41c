"""One pipelined connection to a pacemaker server: requests matched to answers by id, every
wait bounded by ``timeout_secs``, the handshake (digest or Kerberos) and the checks of what the
server granted (``stratus.pacemaker.client`` pools them over every server)::

    connection = PacemakerConnection("127.0.0.1", 6699, settings)
    await connection.open()
    await connection.request(Op.SEND_PULSE, path="/supervisors/s1", data=b"...")
    await connection.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from stratus.pacemaker.auth import AuthMethod, PacemakerRole, digest_proof
from stratus.pacemaker.errors import (
    FrameError,
    PacemakerError,
    PacemakerRequestError,
    PacemakerUnavailableError,
    SubtreeMismatchError,
)
from stratus.pacemaker.kerberos import kerberos_handshake
from stratus.pacemaker.protocol import FrameDecoder, Op, encode_frame
from stratus.pacemaker.settings import PacemakerClientSettings

log = logging.getLogger(__name__)

DRAIN_ABOVE_BYTES = 256 << 10
READ_CHUNK_BYTES = 256 << 10
T = TypeVar("T")


class PacemakerConnection:
    """One authenticated connection to one server."""

    def __init__(self, host: str, port: int, settings: PacemakerClientSettings) -> None:
        self.host, self.port, self.settings = host, port, settings
        self.warming = False
        self.granted_subtree: str | None = None  # Kerberos: where a supervisor may write
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._outbox: list[bytes] = []

    @property
    def closed(self) -> bool:
        """Whether the connection is gone (closed, failed, or never opened)."""
        return self._writer is None or self._error is not None

    async def open(self) -> None:
        """Connect and authenticate; PacemakerUnavailableError or PacemakerRequestError."""
        timeout = self.settings.timeout_secs
        context = self.settings.tls.client_context() if self.settings.tls else None
        try:
            reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=context), timeout
            )
        except (OSError, TimeoutError) as exc:
            raise PacemakerUnavailableError(
                f"cannot reach the pacemaker at {self.host}:{self.port}: {exc or 'timed out'}"
            ) from None
        self._reader_task = asyncio.create_task(self._read_answers(reader))
        hello = await self.request(Op.HELLO)
        self._check_ttl(hello.get("ttl"))
        if self.settings.auth_method is AuthMethod.DIGEST:
            if not self.settings.principal or self.settings.secret is None:
                raise PacemakerError("digest needs pacemaker.auth.principal and its secret")
            proof = digest_proof(self.settings.secret, hello["nonce"], self.settings.principal)
            await self.request(Op.AUTHENTICATE, principal=self.settings.principal, proof=proof)
        elif self.settings.auth_method is AuthMethod.KERBEROS:
            answer = await kerberos_handshake(
                self.request, self.host, hello, self.settings.kerberos
            )
            self.granted_subtree = _granted(answer)
            self._check_subtree(answer)

    def _check_subtree(self, answer: dict[str, Any]) -> None:
        """Refuse a server that lets this supervisor write elsewhere than its store writes."""
        wanted, granted = self.settings.subtree, self.granted_subtree
        if wanted is None or granted is None or granted == wanted:
            return
        principal = answer.get("principal")
        raise SubtreeMismatchError(
            f"the pacemaker at {self.host}:{self.port} lets {principal!r} write only "
            f"{granted}, but this supervisor's heartbeats go to {wanted}: set supervisor.id to "
            f"{granted.rsplit('/', 1)[-1]!r} (the host part of its principal), or give it the "
            f"principal of host {wanted.rsplit('/', 1)[-1]!r}"
        )

    def _check_ttl(self, ttl: object) -> None:
        """Report, loudly, a server whose pulses die before the leader would judge them."""
        least = self.settings.min_pulse_ttl_secs
        if least is not None and isinstance(ttl, int | float) and ttl <= least:
            log.error(
                "event=pacemaker_ttl_too_short server=%s:%d pulse_ttl_secs=%g "
                "leader_timeout_secs=%g action=raise pacemaker.pulse.ttl.secs on that pacemaker "
                "above the leader's timeouts, or an evicted pulse will look like a dead writer",
                self.host,
                self.port,
                ttl,
                least,
            )

    async def close(self) -> None:
        """Close the socket and fail every pending request."""
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(BaseException):
                await self._reader_task
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        self._fail_pending(PacemakerUnavailableError(f"{self.host}:{self.port} closed"))

    async def request(self, op: Op, **fields: Any) -> dict[str, Any]:
        """Send one request; its answer's fields, or PacemakerRequestError/Unavailable."""
        future = self.submit(op, **fields)
        if self._writer is not None and (
            self._writer.transport.get_write_buffer_size() > DRAIN_ABOVE_BYTES
        ):
            await self._bounded(self._writer.drain(), op)
        answer = await self._bounded(future, op)
        if not answer.get("ok"):
            raise PacemakerRequestError(str(answer.get("error")), str(answer.get("message")))
        return answer

    async def read_all_pulses(self, path: str) -> dict[str, Any]:
        """``get_all_pulses_for_path`` page by page, each answer within the maximum frame,
        as one answer: ``pulses`` of the whole subtree, and ``warming`` of the last page."""
        pulses: dict[str, Any] = {}
        after = ""
        while True:
            answer = await self.request(Op.GET_ALL_PULSES_FOR_PATH, path=path, after=after)
            pulses.update(answer["pulses"])
            following = answer.get("next")
            if following is None:
                return {"ok": True, "warming": answer.get("warming", False), "pulses": pulses}
            if not isinstance(following, str) or following.split("/") <= after.split("/"):
                raise PacemakerRequestError(
                    "malformed",
                    f"the pacemaker at {self.host}:{self.port} paged {path} backwards "
                    f"(next {following!r} after {after!r}); is it a stratus pacemaker?",
                )
            after = following

    def submit(self, op: Op, **fields: Any) -> asyncio.Future[dict[str, Any]]:
        """Send one request without waiting: the future of its raw answer (pipelining).

        The caller bounds the wait; an answer that is not ``ok`` is returned, not raised.
        """
        if self._writer is None or self._error is not None:
            raise PacemakerUnavailableError(f"the connection to {self.host}:{self.port} is down")
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._outbox.append(
            encode_frame(
                {"id": request_id, "op": op.value, **fields},
                max_frame_bytes=self.settings.max_frame_bytes,
            )
        )
        if len(self._outbox) == 1:  # the requests of one loop iteration leave in one write
            asyncio.get_running_loop().call_soon(self._flush)
        return future

    def _flush(self) -> None:
        if self._writer is not None and self._outbox and self._error is None:
            self._writer.write(b"".join(self._outbox))
        self._outbox.clear()

    async def _bounded(self, waited: Awaitable[T], op: Op) -> T:
        try:
            return await asyncio.wait_for(waited, self.settings.timeout_secs)
        except (TimeoutError, ConnectionError) as exc:
            self._error = exc
            raise PacemakerUnavailableError(
                f"the pacemaker at {self.host}:{self.port} did not answer {op} within "
                f"{self.settings.timeout_secs} s"
            ) from None

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        decoder = FrameDecoder(max_frame_bytes=self.settings.max_frame_bytes)
        try:
            while True:
                chunk = await reader.read(READ_CHUNK_BYTES)
                if not chunk:
                    raise ConnectionError("closed by the server")
                for answer in decoder.feed(chunk):
                    self.warming = bool(answer.get("warming", self.warming))
                    future = self._pending.pop(answer.get("id", 0), None)
                    if future is not None and not future.done():
                        future.set_result(answer)
                    elif answer.get("id") == 0 and not answer.get("ok"):  # the server closes
                        raise PacemakerRequestError(
                            str(answer.get("error")), str(answer.get("message"))
                        )
        except (ConnectionError, OSError, FrameError, PacemakerRequestError) as exc:
            self._error = exc
        self._fail_pending(
            PacemakerUnavailableError(
                f"the pacemaker at {self.host}:{self.port} closed: {self._error}"
            )
        )

    def _fail_pending(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)


def _granted(answer: dict[str, Any]) -> str | None:
    """The subtree a Kerberos handshake's last answer grants a supervisor (None: a nimbus,
    which writes everywhere)."""
    subtree = answer.get("subtree")
    if answer.get("role") != PacemakerRole.SUPERVISOR.value or not isinstance(subtree, str):
        return None
    return subtree
