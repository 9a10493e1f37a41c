"""Fetching a package over HTTP from the nimbuses that hold it, checked against its digest.

Guarantees: the file returned hashes to the digest asked for; a holder that is down, does
not have the package, stalls, cuts the body short or sends other bytes is skipped for the
next one; an interrupted download resumes where it stopped (``Range``), within one call or
the next, from the part file ``<dir>/.download-<digest>.part``; a large package is fetched
in byte ranges from several holders at once. ``DigestMismatchError`` or
``CodeUnavailableError`` name the pipeline, the digest and what each holder did::

    settings = FetchSettings(parts=4, part_min_bytes=8 << 20, timeout=10.0)
    part = fetch_package("etl", meta, ["host-a:6627", "host-b:6627"], store.directory, settings)
    store.adopt(part, meta.digest)      # renamed to <digest>.pkg

A body is spliced from the socket into the part file (``splice.py``; read and written where
splice is refused) and hashed from the file's own pages, so the digest checked is that of
the bytes the file holds. The part file is not fsync'ed: a copy that a crash damaged fails
its next ``verify`` and is fetched again, and the registration it backed died with the
process anyway.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import mmap
import os
import select
import socket
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from stratus.codedist.distributor import CodeMeta
from stratus.codedist.errors import CodeUnavailableError, DigestMismatchError
from stratus.codedist.package_store import (
    DOWNLOAD_PREFIX,
    DOWNLOAD_SUFFIX,
    hash_file,
)
from stratus.codedist.transfer.splice import (
    SocketReadError,
    SocketSplicer,
    SpliceUnsupportedError,
)

log = logging.getLogger(__name__)

CODE_PATH = "/api/v1/code/"
MAX_RETRIES_PER_HOLDER = 3  # attempts of one holder again after one that made progress
READ_BYTES = 1 << 20  # without splice, a body is read from the socket into a buffer this large
HASH_WINDOW = 4 << 20  # a download is hashed from the page cache (mmap) this much at a time
SPLICE = hasattr(os, "splice")  # tests turn it off to check the other way


@dataclass(frozen=True)
class FetchSettings:
    """How a package is fetched: ``nimbus.code.download.*`` and the request timeout."""

    parts: int = 4  # byte ranges fetched at once when several nimbuses hold a package
    part_min_bytes: int = 8 << 20  # smaller packages come in one request
    timeout: float = 10.0  # connect, and each read, of one request
    keep_partial: bool = True  # leave an interrupted download for the next call to resume


def part_path(directory: Path, digest: str) -> Path:
    """The file that a download of ``digest`` into ``directory`` is written to."""
    return directory / f"{DOWNLOAD_PREFIX}{digest}{DOWNLOAD_SUFFIX}"


def fetch_package(
    pipeline: str,
    meta: CodeMeta,
    holders: Sequence[str],
    directory: Path,
    settings: FetchSettings,
    *,
    client: CodeClient | None = None,
) -> Path:
    """Download ``meta``'s package from ``holders`` into ``directory``; the verified file.

    The caller renames the file returned (``<dir>/.download-<digest>.part``). ``client``
    (see ``http_client``) is best kept and reused: it keeps its connections to the holders.
    """
    part = part_path(directory, meta.digest)
    with contextlib.ExitStack() as stack:
        if client is None:
            client = http_client(settings)
            stack.callback(client.close)
        fetch = _Fetch(client, pipeline, meta, part, settings)
        try:
            done = fetch.run(list(holders))
        except BaseException:
            if not settings.keep_partial:
                part.unlink(missing_ok=True)
            raise
    if done:
        return part
    if not settings.keep_partial:
        part.unlink(missing_ok=True)
    raise fetch.error(holders)


def http_client(settings: FetchSettings) -> CodeClient:
    """A client for ``fetch_package``: up to one kept connection per part and holder."""
    return CodeClient(settings.timeout, max_idle=max(settings.parts, 1))


class _TransferError(Exception):
    """A request failed on the network: connect, send, or read (``reason`` says which)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CodeClient:
    """HTTP/1.1 GETs of ``/api/v1/code/<digest>``, on connections kept alive per holder.

    A body goes from the socket into the part file with ``splice(2)`` (``Body.move_into``),
    and the file's pages are hashed: a 100 MB package costs a standby 103-115 ms of CPU,
    of which sha256 is 55-60, against 112-128 ms read into a buffer and written from it,
    and about 160 ms through httpx (whose h11 copies every 64 KiB piece twice more).
    ``timeout`` bounds the connect and each read. Never through a proxy: nimbus to nimbus.
    """

    def __init__(self, timeout: float, *, max_idle: int) -> None:
        self.timeout = timeout
        self.max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: dict[str, list[http.client.HTTPConnection]] = {}

    @contextlib.contextmanager
    def get(self, holder: str, digest: str, byte_range: str | None = None) -> Iterator[Body]:
        """The answer of ``holder`` to a GET of ``digest`` (``Range: byte_range`` if given).

        _TransferError if the request fails on the network; the connection is kept for
        the next request only if the body was read to its end.
        """
        connection = self._connection(holder)
        headers = {"Accept-Encoding": "identity"}
        if byte_range is not None:
            headers["Range"] = byte_range
        try:
            _connect(connection)
            try:
                connection.request("GET", f"{CODE_PATH}{digest}", headers=headers)
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise _TransferError(_describe(exc)) from None
            body = Body(response, connection.sock)
            try:
                yield body
            finally:
                body.close()
        except BaseException:
            connection.close()
            raise
        self._release(holder, connection, response)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    def _connection(self, holder: str) -> http.client.HTTPConnection:
        """An idle connection to ``holder`` that the holder has not closed, or a new one."""
        while True:
            with self._lock:
                idle = self._idle.get(holder)
                connection = idle.pop() if idle else None
            if connection is None:
                return http.client.HTTPConnection(holder, timeout=self.timeout)
            if _alive(connection):
                return connection
            connection.close()

    def _release(
        self,
        holder: str,
        connection: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
    ) -> None:
        if not response.isclosed() or response.will_close:
            connection.close()  # a body left unread, or the holder said it would close
            return
        with self._lock:
            idle = self._idle.setdefault(holder, [])
            if len(idle) < self.max_idle:
                idle.append(connection)
                return
        connection.close()


def _connect(connection: http.client.HTTPConnection) -> None:
    """Connect a new connection (a kept one is connected already)."""
    if connection.sock is not None:
        return
    try:
        connection.connect()
    except OSError as exc:
        raise _TransferError(f"ConnectError: {exc}") from None


def _alive(connection: http.client.HTTPConnection) -> bool:
    """Whether a kept connection is still open: an idle one is readable only once closed."""
    if connection.sock is None:
        return False
    poller = select.poll()
    poller.register(connection.sock, select.POLLIN)
    return not poller.poll(0)


class Body:
    """The status, headers and body of one answer of ``CodeClient.get``.

    ``move_into`` puts the body into a file with ``splice(2)`` where it can (see
    ``splice.py``): only the bytes that ``http.client`` read along with the headers pass
    through Python. Elsewhere, or if the socket or file refuses, the body is read into a
    buffer and written from there.
    """

    def __init__(self, response: http.client.HTTPResponse, sock: socket.socket | None) -> None:
        self.status = response.status
        self._response = response
        self._sock = sock if SPLICE and response.length is not None else None
        self._splicer: SocketSplicer | None = None
        self._remaining = response.length  # body bytes not read yet; None: until EOF
        self._buffer: memoryview | None = None
        self._first = True
        self._spliced = 0

    def header(self, name: str) -> str | None:
        return self._response.getheader(name)

    def finished(self) -> bool:
        """Whether the body has no bytes left (one more is read if its length is unknown)."""
        if self._remaining is not None:
            return self._remaining == 0
        return self._read(memoryview(bytearray(1))) == 0

    def move_into(self, fd: int, offset: int, limit: int) -> int:
        """Write up to ``limit`` next bytes of the body to ``fd`` at ``offset``; how many.

        0 at the body's end, or if it was cut short. _TransferError if the socket fails;
        an error writing the file is the OSError it is.
        """
        if limit <= 0 or self._remaining == 0:
            return 0
        if self._first:  # what http.client read along with the headers, at most 8 KiB
            self._first = False
            if self._sock is not None:
                return self._read_write(fd, offset, min(limit, self._buffered()))
        if self._splicer is not None or self._start_splice():
            return self._splice(fd, offset, limit)
        return self._read_write(fd, offset, limit)

    def close(self) -> None:
        if self._splicer is not None:
            self._splicer.close()
            self._splicer = None

    def _buffered(self) -> int:
        """How many body bytes http.client holds (one read of the socket if none)."""
        fp = self._response.fp
        try:
            return max(1, len(fp.peek(1))) if fp is not None else 1
        except OSError as exc:
            raise _TransferError(_describe(exc)) from None

    def _start_splice(self) -> bool:
        if self._sock is None:
            return False
        try:
            self._splicer = SocketSplicer(self._sock, timeout=self._sock.gettimeout())
        except SpliceUnsupportedError:
            self._sock = None
            return False
        return True

    def _splice(self, fd: int, offset: int, limit: int) -> int:
        assert self._splicer is not None and self._remaining is not None
        try:
            n = self._splicer.move(fd, offset, min(limit, self._remaining))
        except SocketReadError as exc:
            raise _TransferError(exc.reason) from None
        except SpliceUnsupportedError as exc:
            self.close()
            self._sock = None
            if self._spliced:  # http.client's count is behind: this connection is done
                raise _TransferError(f"splice refused: {exc}") from None
            return self._read_write(fd, offset, limit)  # refused at once: the other way
        self._spliced += n
        self._remaining -= n
        if self._remaining == 0:
            self._response.close()  # read to its end: the connection may be kept
        return n

    def _read_write(self, fd: int, offset: int, limit: int) -> int:
        size = min(limit, READ_BYTES)
        if self._buffer is None or len(self._buffer) < size:
            self._buffer = memoryview(bytearray(READ_BYTES if self._buffer else size))
        n = self._read(self._buffer[:size])
        _pwrite_all(fd, self._buffer[:n], offset)
        return n

    def _read(self, buffer: memoryview) -> int:
        try:
            n = self._response.readinto(buffer)
        except (OSError, http.client.HTTPException) as exc:
            raise _TransferError(_describe(exc)) from None
        if self._remaining is not None:
            self._remaining -= n
        return n


_WRONG = "wrong bytes: "


class _HolderError(Exception):
    """One request to a holder failed; ``retry``: the same holder is worth another request."""

    def __init__(self, reason: str, *, retry: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry = retry


def _wrong_bytes(what: str) -> _HolderError:
    """The holder's copy is not the package asked for (its digest or size differ)."""
    return _HolderError(_WRONG + what)


class _Fetch:
    """One ``fetch_package`` call: the ways it tries, and what each holder did."""

    def __init__(
        self,
        client: CodeClient,
        pipeline: str,
        meta: CodeMeta,
        part: Path,
        settings: FetchSettings,
    ) -> None:
        self.client = client
        self.pipeline = pipeline
        self.meta = meta
        self.part = part
        self.settings = settings
        self.failures: dict[str, str] = {}  # holder (or "parts from ...") -> what went wrong

    def run(self, holders: list[str]) -> bool:
        """True once ``part`` holds the package: resumed, in parts, or from one holder."""
        if self._complete_already():
            return True
        if self._parts_wanted(holders) and self._in_parts(holders):
            return True
        for holder in holders:
            if holder in self.failures and not self.failures[holder].startswith(_WRONG):
                continue  # unreachable, or without the package, a moment ago
            if self._whole_from(holder):
                return True
        return False

    def error(self, holders: Sequence[str]) -> CodeUnavailableError:
        pipeline, digest = self.pipeline, self.meta.digest
        if not holders:
            return CodeUnavailableError(
                f"no other nimbus holds {pipeline}'s package {digest}: nothing to fetch it "
                "from; submit the pipeline again if no nimbus has it any more"
            )
        tried = "; ".join(f"{holder}: {reason}" for holder, reason in self.failures.items())
        message = (
            f"could not fetch {pipeline}'s package {digest} ({self.meta.size_bytes} bytes) "
            f"from {', '.join(holders)}: {tried}"
        )
        if any(reason.startswith(_WRONG) for reason in self.failures.values()):
            return DigestMismatchError(message)
        return CodeUnavailableError(message)

    def _complete_already(self) -> bool:
        """Whether an earlier call fetched the whole package but did not rename it (a crash)."""
        try:
            if self.part.stat().st_size != self.meta.size_bytes:
                return False
        except FileNotFoundError:
            return False
        if hash_file(self.part)[0] == self.meta.digest:
            self._log_fetched("resumed", "-")
            return True
        self.part.unlink(missing_ok=True)  # the holes of a download in parts, or damaged bytes
        return False

    def _log_fetched(self, how: str, nodes: str) -> None:
        log.info(
            "event=code_fetched pipeline=%s digest=%s size_bytes=%d how=%s nodes=%s",
            self.pipeline,
            self.meta.digest,
            self.meta.size_bytes,
            how,
            nodes,
        )

    def _log_failure(self, how: str, node: str, reason: str) -> None:
        log.warning(
            "event=code_fetch_failed pipeline=%s digest=%s how=%s nodes=%s reason=%r",
            self.pipeline,
            self.meta.digest,
            how,
            node,
            reason,
        )

    # ------------------------------------------------------------------ one stream, resumed

    def _whole_from(self, holder: str) -> bool:
        """The package from ``holder``, resuming what ``part`` holds; False if it failed."""
        try:
            _fetch_whole(self.client, self.meta, holder, self.part)
        except _HolderError as exc:
            self.failures[holder] = exc.reason
            self._log_failure("whole", holder, exc.reason)
            return False
        self._log_fetched("whole", holder)
        return True

    # ------------------------------------------------------------------ ranges in parallel

    def _parts_wanted(self, holders: list[str]) -> bool:
        """Large, several holders, and no interrupted single-stream download to resume."""
        size = self.meta.size_bytes
        if self.settings.parts < 2 or len(holders) < 2 or size < self.settings.part_min_bytes:
            return False
        try:
            length = self.part.stat().st_size
        except FileNotFoundError:
            return True
        return not 0 < length < size

    def _in_parts(self, holders: list[str]) -> bool:
        """Byte ranges from several holders at once into a preallocated file; True if verified."""
        ranges = split_ranges(self.meta.size_bytes, self.settings.parts)
        state = _PartHolders(holders)
        fd = os.open(self.part, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _preallocate(fd, self.meta.size_bytes)
            with ThreadPoolExecutor(len(ranges), thread_name_prefix="code-fetch") as pool:
                jobs = [
                    pool.submit(self._range, fd, _Cursor(*byte_range), state.order_for(i), state)
                    for i, byte_range in enumerate(ranges)
                ]
                done = [job.result() for job in jobs]
        except BaseException:
            self.part.unlink(missing_ok=True)  # its holes would pass for a download to resume
            raise
        finally:
            os.close(fd)
        self.failures.update(state.failed)
        served = ",".join(sorted(state.served))
        if all(done):
            found, _ = hash_file(self.part)
            if found == self.meta.digest:
                self._log_fetched(f"{len(ranges)}-parts", served)
                return True
            self.failures[f"parts from {served}"] = (
                f"{_WRONG}together they hash to {found}; each holder is tried alone"
            )
        self._log_failure(f"{len(ranges)}-parts", served or "-", str(state.failed or "mismatch"))
        self.part.unlink(missing_ok=True)
        return False

    def _range(self, fd: int, cursor: _Cursor, order: list[str], state: _PartHolders) -> bool:
        """Bytes [cursor.offset, cursor.end) from the first holder of ``order`` that sends them."""
        for holder in order:
            retries = 0
            while not cursor.done and state.usable(holder):
                try:
                    _request_range(self.client, holder, self.meta, fd, cursor)
                except _HolderError as exc:
                    if not exc.retry or retries >= MAX_RETRIES_PER_HOLDER:
                        state.fail(holder, exc.reason)
                    retries += 1
            if cursor.done:
                state.note_served(holder)
                return True
        return False


def split_ranges(size: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous [start, end) ranges covering ``size`` bytes (fewer if tiny)."""
    step = max(1, -(-size // parts))
    return [(start, min(start + step, size)) for start in range(0, size, step)]


class _Cursor:
    """How far the download of one byte range [offset, end) got."""

    def __init__(self, offset: int, end: int) -> None:
        self.offset = offset
        self.end = end

    @property
    def done(self) -> bool:
        return self.offset >= self.end


class _PartHolders:
    """The holders of a download in parts; one that fails is given no other part."""

    def __init__(self, holders: list[str]) -> None:
        self.all = holders
        self._lock = threading.Lock()
        self.failed: dict[str, str] = {}
        self.served: dict[str, int] = {}  # holder -> ranges it sent

    def order_for(self, index: int) -> list[str]:
        """Every holder, part ``index``'s own first: the parts spread over the holders."""
        first = index % len(self.all)
        return self.all[first:] + self.all[:first]

    def usable(self, holder: str) -> bool:
        with self._lock:
            return holder not in self.failed

    def fail(self, holder: str, reason: str) -> None:
        with self._lock:
            self.failed.setdefault(holder, reason)

    def note_served(self, holder: str) -> None:
        with self._lock:
            self.served[holder] = self.served.get(holder, 0) + 1


def _preallocate(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:  # a file system without fallocate: a sparse file does as well
        os.ftruncate(fd, size)


def _request_range(
    client: CodeClient, holder: str, meta: CodeMeta, fd: int, cursor: _Cursor
) -> None:
    """One GET of bytes [cursor.offset, cursor.end), written in place as they come."""
    start, last = cursor.offset, cursor.end - 1
    expected = f"bytes {start}-{last}/{meta.size_bytes}"
    try:
        with client.get(holder, meta.digest, f"bytes={start}-{last}") as body:
            if body.status != 206:
                raise _HolderError(_describe_status(body))
            if body.header("content-range") != expected:
                got = body.header("content-range")
                raise _wrong_bytes(f"answered Range with {got!r}, not {expected!r}")
            while n := body.move_into(fd, cursor.offset, cursor.end - cursor.offset):
                cursor.offset += n
    except _TransferError as exc:
        raise _HolderError(exc.reason, retry=cursor.offset > start) from None
    if not cursor.done:
        raise _HolderError(
            f"the body of bytes {start}-{last} ended at byte {cursor.offset}",
            retry=cursor.offset > start,
        )


# ---------------------------------------------------------------------- one stream, resumed


class _Stream:
    """The part file of a single-stream download, hashed as it is written.

    The bytes are hashed from the part file itself (mapped, ``HASH_WINDOW`` at a time,
    while they are still in the CPU's caches), not from a buffer on their way there: the
    digest checked is that of what the file holds.
    """

    def __init__(self, part: Path, size: int) -> None:
        self.fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = size
        self.sha = hashlib.sha256()
        self.have = 0  # bytes in the file
        self.hashed = 0  # of which hashed
        self._resume()

    def _resume(self) -> None:
        """What an earlier attempt left counts (hashed later); a file too long starts again."""
        length = os.fstat(self.fd).st_size
        if length >= self.size:
            os.ftruncate(self.fd, 0)
            return
        self.have = length

    def restart(self) -> None:
        os.ftruncate(self.fd, 0)
        self.sha = hashlib.sha256()
        self.have = self.hashed = 0

    def take(self, body: Body) -> int:
        """The next bytes of ``body`` into the file (no more than the package's size)."""
        n = body.move_into(self.fd, self.have, self.size - self.have)
        self.have += n
        if self.have - self.hashed >= HASH_WINDOW:
            self._hash_written()
        return n

    def digest(self) -> str:
        self._hash_written()
        return self.sha.hexdigest()

    def _hash_written(self) -> None:
        """Hash the bytes written since the last call, from the file's pages."""
        while self.hashed < self.have:
            base = self.hashed - self.hashed % mmap.ALLOCATIONGRANULARITY
            end = min(self.have, base + HASH_WINDOW)
            with (
                mmap.mmap(self.fd, end - base, offset=base, prot=mmap.PROT_READ) as window,
                memoryview(window) as view,
            ):
                self.sha.update(view[self.hashed - base :])
            self.hashed = end

    def close(self) -> None:
        os.close(self.fd)


def _fetch_whole(client: CodeClient, meta: CodeMeta, holder: str, part: Path) -> None:
    """The package from one holder into ``part``, resumed where it stopped; verified."""
    stream = _Stream(part, meta.size_bytes)
    try:
        resumed = stream.have > 0
        retries = 0
        while True:
            try:
                _request_rest(client, holder, meta.digest, stream)
            except _HolderError as exc:
                if not exc.retry or retries >= MAX_RETRIES_PER_HOLDER:
                    raise
                retries += 1
                continue
            found = stream.digest()
            if found == meta.digest:
                return
            stream.restart()
            if not resumed:
                raise _wrong_bytes(f"sent bytes that hash to {found}")
            resumed = False  # the part file was to blame, maybe: once more from the start
    except BaseException:
        if stream.have == 0:
            part.unlink(missing_ok=True)
        raise
    finally:
        stream.close()


def _request_rest(client: CodeClient, holder: str, digest: str, stream: _Stream) -> None:
    """One GET of what ``stream`` lacks; _HolderError unless the body completes it."""
    start = stream.have
    try:
        with client.get(holder, digest, f"bytes={start}-" if start else None) as body:
            _accept_rest(body, stream, start)
            while stream.have < stream.size and stream.take(body):
                pass
            if stream.have == stream.size and not body.finished():
                raise _wrong_bytes(f"more than the {stream.size} bytes expected")
    except _TransferError as exc:
        raise _HolderError(exc.reason, retry=stream.have > start) from None
    if stream.have < stream.size:
        raise _HolderError(
            f"the body ended at byte {stream.have} of {stream.size}", retry=stream.have > start
        )


def _accept_rest(body: Body, stream: _Stream, start: int) -> None:
    """Check the answer to a request from byte ``start``; a 200 starts the file again."""
    size = stream.size
    if body.status == 200:
        if start:
            stream.restart()  # the holder ignored the Range: its body is the whole file
        length = body.header("content-length")
        if length is not None and length != str(size):
            raise _wrong_bytes(f"its copy is {length} bytes, not {size}")
        return
    if body.status == 206 and start:
        expected = f"bytes {start}-{size - 1}/{size}"
        got = body.header("content-range")
        if got != expected:
            stream.restart()
            raise _HolderError(
                f"answered Range with {got!r}, not {expected!r}",
                retry=True,  # once more, from the start
            )
        return
    raise _HolderError(_describe_status(body))


# ---------------------------------------------------------------------- helpers


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _describe_status(body: Body) -> str:
    if body.status == 404:
        return "does not have the package (404)"
    return f"answered HTTP {body.status}"


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
