"""The pacemaker daemon: an asyncio server of the pulse store.

One event loop owns the store: every request is answered in the order it came, each answer
echoing the request's ``id``. Connections are bounded (``max_connections``: one more is
closed at once) and so is their idle time; a frame above ``max_frame_bytes``, a truncated
one or one that is not msgpack closes its connection after an error answer, and only that
one. A connection whose first bytes are ``GET `` is an HTTP request for ``/metrics`` or a
probe: ``/healthz`` (alive) and ``/readyz`` (ready once out of its warm-up, below).

For one TTL after it starts, every answer says ``warming``: the store may be missing pulses
written before the start, so a reader must treat a missing pulse as unknown, not as dead::

    server = PacemakerServer(settings, secrets=load_secrets(path))
    port = await server.start()
    await server.serve_until(stop_event)
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets as _random
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from stratus.pacemaker.auth import (
    ANONYMOUS,
    NONCE_BYTES,
    AuthMethod,
    Principal,
    Secret,
    check_proof,
    may_read,
    may_write,
    own_subtree,
)
from stratus.pacemaker.errors import (
    FrameError,
    KerberosHandshakeError,
    PacemakerConfigError,
    PathError,
    StoreFullError,
)
from stratus.pacemaker.kerberos import KerberosAcceptor, KerberosService
from stratus.pacemaker.metrics import CONTENT_TYPE_LATEST, PacemakerMetrics
from stratus.pacemaker.protocol import (
    HEADER_BYTES,
    HTTP_PREFIX,
    MAX_FRAME_LIMIT,
    ErrorCode,
    FrameDecoder,
    Op,
    encode_frame,
)
from stratus.pacemaker.settings import PacemakerServerSettings
from stratus.pacemaker.store import Pulse, PulseStore, split_path
from stratus.web.probes import HEALTHZ_PATH, JSON, READYZ_PATH, alive, readiness

log = logging.getLogger(__name__)

READS = frozenset({Op.EXISTS, Op.GET_PULSE, Op.GET_ALL_PULSES_FOR_PATH, Op.GET_ALL_NODES_FOR_PATH})
DRAIN_ABOVE_BYTES = 256 << 10
READ_CHUNK_BYTES = 256 << 10
MAX_HTTP_HEAD_BYTES = 8 << 10
MAX_EVICTION_PERIOD_SECS = 1.0
PULSE_OVERHEAD_BYTES = 20  # msgpack of one page entry beyond its path and data: headers, time
PAGE_HEADROOM_BYTES = 64  # an answer's own fields (id, ok, warming, the map's header)


@dataclass
class _Connection:
    nonce: bytes
    principal: Principal | None
    kerberos: KerberosAcceptor | None = None  # the handshake in progress (kerberos)


class _RefusalError(Exception):
    """An answer that is an error; ``close`` ends the connection after it."""

    def __init__(self, code: ErrorCode, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.close = close


class PacemakerServer:
    """The store, its TTL task, its connections and its metrics."""

    def __init__(
        self,
        settings: PacemakerServerSettings,
        *,
        secrets: dict[str, Secret] | None = None,
        kerberos: KerberosService | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_server_settings(settings, secrets, kerberos)
        self.settings = settings
        self._secrets = secrets or {}
        self._kerberos = kerberos
        self._clock = clock
        self.store = PulseStore(settings.limits, clock=clock)
        self._started = clock()
        self._connections = 0
        self._server: asyncio.Server | None = None
        self.metrics = PacemakerMetrics(
            entries=lambda: self.store.entries,
            stored_bytes=lambda: self.store.bytes,
            evicted=lambda: self.store.evicted,
            connections=lambda: self._connections,
            warming=self.warming,
        )

    def warming(self) -> bool:
        """True for one TTL after start: pulses written before it may be missing."""
        return self._clock() - self._started < self.settings.limits.ttl_secs

    async def start(self) -> int:
        """Listen; the port bound (the configured one, or a free one for port 0)."""
        context = self.settings.tls.server_context() if self.settings.tls else None
        self._server = await asyncio.start_server(
            self._serve_connection,
            self.settings.host,
            self.settings.port,
            ssl=context,
            ssl_handshake_timeout=self.settings.idle_timeout_secs if context else None,
            limit=MAX_HTTP_HEAD_BYTES * 2,
        )
        self._started = self._clock()
        return int(self._server.sockets[0].getsockname()[1])

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Serve and evict expired pulses until ``stop`` is set; then close every socket."""
        assert self._server is not None, "start() first"
        period = min(MAX_EVICTION_PERIOD_SECS, self.settings.limits.ttl_secs / 4)
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), period)
                if stop.is_set():
                    return
                self.store.evict_expired()
        finally:
            self._server.close()

    # --- connections --------------------------------------------------------------------
    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self._connections >= self.settings.max_connections:
            self.metrics.refused_connections.inc()
            log.warning("event=connection_refused reason=max_connections")
            writer.close()
            return
        self._connections += 1
        try:
            await self._converse(reader, writer)
        except (
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            ssl.SSLError,
        ):
            pass  # idle, truncated or gone: the connection just ends
        except asyncio.CancelledError:
            pass  # the loop is shutting down: end quietly (asyncio's stream callback logs it)
        finally:
            self._connections -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read chunks, answer every whole frame in them with one write; stop on a bad frame."""
        idle = self.settings.idle_timeout_secs
        principal = ANONYMOUS if self.settings.auth_method is AuthMethod.NONE else None
        conn = _Connection(_random.token_bytes(NONCE_BYTES), principal)
        auth_deadline = self._clock() + self.settings.auth_timeout_secs
        first = await asyncio.wait_for(reader.readexactly(HEADER_BYTES), idle)
        if first == HTTP_PREFIX:
            await self._serve_http(reader, writer)
            return
        decoder = FrameDecoder(max_frame_bytes=self.settings.max_frame_bytes)
        loop = asyncio.get_running_loop()
        frame_started: float | None = None

        def wait(decoder: FrameDecoder) -> float:
            """How long the next read may take: ``idle`` between frames, and what is left of
            ``idle`` since a frame's first byte while one is unfinished (a trickle of bytes,
            each just within the idle time, must not hold the connection forever)."""
            nonlocal frame_started
            if not decoder.buffered:
                frame_started = None
                return idle
            if frame_started is None:
                frame_started = loop.time()
            return max(0.0, frame_started + idle - loop.time())

        chunk = first
        while True:
            closing = False
            try:
                messages = decoder.feed(chunk)
            except FrameError as exc:
                self.metrics.bad_frames.inc()
                log.warning("event=bad_frame reason=%s", exc)
                writer.write(self._encode(_error(0, ErrorCode.MALFORMED, str(exc))))
                break
            if messages:
                frame_started = None  # a frame completed: the next one's time starts now
                answers = []
                for message in messages:
                    answer, closing = self._answer(message, conn)
                    answers.append(answer)
                    if closing:
                        break
                writer.write(b"".join(answers))
                if writer.transport.get_write_buffer_size() > DRAIN_ABOVE_BYTES:
                    await writer.drain()  # a client that does not read is not answered faster
            if closing:
                break
            timeout = wait(decoder)
            if conn.principal is None:  # not authenticated yet: the handshake's deadline too
                timeout = min(timeout, auth_deadline - self._clock())
            chunk = await asyncio.wait_for(reader.read(READ_CHUNK_BYTES), max(0.0, timeout))
            if not chunk:
                return  # closed by the client (a frame cut short is dropped with it)
        await writer.drain()

    def _answer(self, message: dict[str, Any], conn: _Connection) -> tuple[bytes, bool]:
        """The encoded answer to one request, and whether the connection must close after it."""
        request_id = message.get("id")
        if not isinstance(request_id, int) or isinstance(request_id, bool):
            request_id = 0
        op_name = message.get("op")
        closing = False
        try:
            try:
                op = Op(str(op_name))
            except ValueError:
                raise _RefusalError(ErrorCode.MALFORMED, f"unknown op {op_name!r:.40}") from None
            if request_id == 0 and message.get("id") != 0:
                raise _RefusalError(ErrorCode.MALFORMED, "a request needs an integer id")
            fields = self._perform(op, message, conn)
            self.metrics.count(op.value, "ok")
            answer = {"id": request_id, "ok": True, "warming": self.warming(), **fields}
        except _RefusalError as refusal:
            self.metrics.count(str(op_name)[:32], refusal.code.value)
            closing = refusal.close
            answer = _error(request_id, refusal.code, str(refusal))
        try:
            return encode_frame(answer, max_frame_bytes=self.settings.max_frame_bytes), closing
        except FrameError as exc:
            return self._encode(_error(request_id, ErrorCode.TOO_LARGE, str(exc))), closing

    def _perform(self, op: Op, message: dict[str, Any], conn: _Connection) -> dict[str, Any]:
        if op is Op.HELLO:
            return {
                "auth": self.settings.auth_method.value,
                "nonce": conn.nonce,
                "ttl": self.settings.limits.ttl_secs,
            }
        if op is Op.AUTHENTICATE:
            return self._authenticate(message, conn)
        if conn.principal is None:
            raise _RefusalError(
                ErrorCode.NOT_AUTHENTICATED,
                f"authenticate first (pacemaker.auth.method is {self.settings.auth_method})",
            )
        if op is Op.STATUS:
            return {"entries": self.store.entries, "bytes": self.store.bytes}
        if op is Op.SEND_PULSES:
            return self._send_pulses(message.get("pulses"), conn.principal)
        path = message.get("path")
        if not isinstance(path, str):
            raise _RefusalError(ErrorCode.MALFORMED, f"{op} needs a path (a string)")
        try:
            allowed = (
                may_read(conn.principal, path) if op in READS else may_write(conn.principal, path)
            )
            if not allowed:
                raise _RefusalError(
                    ErrorCode.FORBIDDEN,
                    f"{conn.principal.name} ({conn.principal.role}) may not {op} {path}",
                )
            return self._store_op(op, path, message)
        except PathError as exc:
            raise _RefusalError(ErrorCode.BAD_PATH, str(exc)) from None
        except StoreFullError as exc:
            raise _RefusalError(ErrorCode.FULL, str(exc)) from None

    def _send_pulses(self, pulses: Any, principal: Principal) -> dict[str, Any]:
        """Every pulse of a batch, after every path was checked: all are allowed or none."""
        if not isinstance(pulses, list) or not all(
            isinstance(p, list)
            and len(p) == 3
            and isinstance(p[0], str)
            and isinstance(p[1], bytes)
            and isinstance(p[2], int | float)
            for p in pulses
        ):
            raise _RefusalError(
                ErrorCode.MALFORMED, "send_pulses needs pulses: a list of [path, data, time]"
            )
        stored = 0
        try:
            for path, _, _ in pulses:
                split_path(path)  # a bad path refuses the batch before anything is stored
                if not may_write(principal, path):
                    raise _RefusalError(
                        ErrorCode.FORBIDDEN,
                        f"{principal.name} ({principal.role}) may not send_pulses to {path}",
                    )
            for path, data, when in pulses:
                self.store.send_pulse(path, data, float(when))
                stored += 1
        except PathError as exc:
            raise _RefusalError(ErrorCode.BAD_PATH, str(exc)) from None
        except StoreFullError as exc:
            raise _RefusalError(
                ErrorCode.FULL, f"{exc} ({stored} of {len(pulses)} pulses were stored)"
            ) from None
        return {"stored": stored}

    def _store_op(self, op: Op, path: str, message: dict[str, Any]) -> dict[str, Any]:
        store = self.store
        if op is Op.SEND_PULSE:
            data, when = message.get("data"), message.get("time")
            if not isinstance(data, bytes) or not isinstance(when, int | float):
                raise _RefusalError(ErrorCode.MALFORMED, "send_pulse needs data (bytes) and time")
            store.send_pulse(path, data, float(when))
            return {}
        if op is Op.CREATE_PATH:
            store.create_path(path)
            return {}
        if op is Op.EXISTS:
            return {"exists": store.exists(path)}
        if op is Op.GET_PULSE:
            pulse = store.get_pulse(path)
            return {"pulse": None if pulse is None else [pulse.data, pulse.time]}
        if op is Op.GET_ALL_PULSES_FOR_PATH:
            after = message.get("after")
            if after is None:  # the whole subtree in one answer (too_large above a frame)
                pulses = store.get_all_pulses_for_path(path)
                return {"pulses": {key: [p.data, p.time] for key, p in pulses.items()}}
            if not isinstance(after, str):
                raise _RefusalError(ErrorCode.MALFORMED, "after must be a path (a string)")
            return pulses_page(
                store.iter_pulses_after(path, after),
                self.settings.max_frame_bytes - PAGE_HEADROOM_BYTES,
            )
        if op is Op.GET_ALL_NODES_FOR_PATH:
            return {"nodes": store.get_all_nodes_for_path(path)}
        if op is Op.DELETE_PATH:
            return {"deleted": store.delete_path(path)}
        assert op is Op.DELETE_PULSE_ID
        return {"deleted": int(store.delete_pulse_id(path))}

    def _authenticate(self, message: dict[str, Any], conn: _Connection) -> dict[str, Any]:
        method = self.settings.auth_method
        if method is AuthMethod.NONE:
            return {"principal": ANONYMOUS.name, "role": ANONYMOUS.role.value}
        if method is AuthMethod.KERBEROS:
            return self._kerberos_step(message, conn)
        name, proof = message.get("principal"), message.get("proof")
        if not isinstance(name, str) or not isinstance(proof, bytes):
            raise _RefusalError(ErrorCode.MALFORMED, "authenticate needs principal and proof")
        principal = check_proof(self._secrets, name, conn.nonce, proof)
        if principal is None:
            log.warning("event=auth_failed principal=%.64s", name)
            raise _RefusalError(
                ErrorCode.AUTH_FAILED, f"digest authentication of {name!r:.64} failed", close=True
            )
        conn.principal = principal
        return {"principal": principal.name, "role": principal.role.value}

    def _kerberos_step(self, message: dict[str, Any], conn: _Connection) -> dict[str, Any]:
        """One GSSAPI token in, one out; a refusal closes the connection."""
        assert self._kerberos is not None
        if conn.principal is not None:
            raise _RefusalError(ErrorCode.MALFORMED, "this connection is authenticated already")
        if conn.kerberos is None:
            conn.kerberos = self._kerberos.acceptor(conn.nonce)
        try:
            token, principal = conn.kerberos.step(message.get("token"))
        except KerberosHandshakeError as exc:
            log.warning("event=auth_failed method=kerberos reason=%s", exc)
            raise _RefusalError(ErrorCode.AUTH_FAILED, str(exc), close=True) from None
        if principal is None:
            return {"token": token, "complete": False}
        conn.principal, conn.kerberos = principal, None
        log.info("event=authenticated method=kerberos principal=%s", principal.name)
        return {
            "token": token,
            "complete": True,
            "principal": principal.name,
            "role": principal.role.value,
            "subtree": own_subtree(principal.subtree or principal.name),
        }

    # --- HTTP ---------------------------------------------------------------------------
    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(
            reader.readuntil(b"\r\n\r\n"), self.settings.idle_timeout_secs
        )
        target = head.split(b" ", 1)[0].split(b"?", 1)[0].decode("latin-1")
        if target == "/metrics":
            body, status, kind = self.metrics.exposition(), "200 OK", CONTENT_TYPE_LATEST
        elif target in (HEALTHZ_PATH, READYZ_PATH):
            code, body = (
                alive("pacemaker")
                if target == HEALTHZ_PATH
                else readiness("pacemaker", lambda: {"warmed_up": not self.warming()})
            )
            status, kind = ("200 OK" if code == 200 else "503 Service Unavailable"), JSON
        else:
            body = b"not found: try /metrics, /healthz or /readyz\n"
            status, kind = "404 Not Found", "text/plain"
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()

    def _encode(self, message: dict[str, Any]) -> bytes:
        return encode_frame(message, max_frame_bytes=MAX_FRAME_LIMIT)


def pulses_page(ordered: Iterable[tuple[str, Pulse]], budget_bytes: int) -> dict[str, Any]:
    """A page of ``ordered`` (path, pulse) pairs: as many as fit in ``budget_bytes`` of
    msgpack (at least one), and ``next``: the last path given, to ask ``after`` it, or None
    when none is left. A page is not a snapshot: a pulse written between two pages is read at
    its newest value if its path is still ahead, else at the next read."""
    page: dict[str, list[Any]] = {}
    used = 0
    last: str | None = None
    for key, pulse in ordered:
        key_bytes = len(key.encode())
        size = key_bytes + len(pulse.data) + PULSE_OVERHEAD_BYTES
        if page and used + size + key_bytes + PULSE_OVERHEAD_BYTES > budget_bytes:  # and next
            return {"pulses": page, "next": last}
        page[key] = [pulse.data, pulse.time]
        used += size
        last = key
    return {"pulses": page, "next": None}


def _error(request_id: int, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "error": code.value, "message": message[:500]}


def check_server_settings(
    settings: PacemakerServerSettings,
    secrets: dict[str, Secret] | None,
    kerberos: KerberosService | None = None,
) -> None:
    """PacemakerConfigError for settings that cannot work (checked once, at start)."""
    method = settings.auth_method
    if method is AuthMethod.KERBEROS and kerberos is None:
        raise PacemakerConfigError(
            "pacemaker.auth.method kerberos needs pacemaker.kerberos.keytab (the service "
            "principal's keys) and pacemaker.auth.file (the principals allowed in)"
        )
    if settings.auth_timeout_secs <= 0:
        raise PacemakerConfigError("pacemaker.auth.timeout.secs must be above 0")
    if method is AuthMethod.DIGEST and not secrets:
        raise PacemakerConfigError("pacemaker.auth.method digest needs pacemaker.auth.file")
    if method is AuthMethod.NONE and not settings.auth_insecure and not _loopback(settings.host):
        raise PacemakerConfigError(
            f"pacemaker.host {settings.host} is not loopback and pacemaker.auth.method is none: "
            "anyone who reaches it could forge or erase heartbeats. Use digest, or set "
            "pacemaker.auth.insecure=true to accept that"
        )
    if not 0 < settings.max_frame_bytes <= MAX_FRAME_LIMIT:
        raise PacemakerConfigError(
            f"pacemaker.max.frame.bytes must be between 1 and {MAX_FRAME_LIMIT}"
        )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
