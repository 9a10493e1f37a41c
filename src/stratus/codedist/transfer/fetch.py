"""Fetching a package over HTTP from the nimbuses that hold it, checked against its record.

Guarantees: the file returned holds the package's bytes, checked against the record
(``check.copy_check``: its BLAKE3 when recorded, else its sha256); a holder that is down,
does not have the package, stalls, cuts the body short or sends other bytes is skipped for
the next one; one that takes no connection within ``connect_timeout`` (a dead host answers
no SYN) is skipped after that, not after the longer read ``timeout``, and stays a suspect
for one ``timeout``: asked last, and given no part (``CodeClient``); an interrupted download
resumes where it stopped (``Range``), within one call or the next, from the part file
``<dir>/.download-<digest>.part`` (``stream.py``); a large package is fetched in byte
ranges from several holders at once (``parts.py``).
``DigestMismatchError`` or ``CodeUnavailableError`` name the pipeline, the digest and what
each holder did::

    settings = FetchSettings(parts=4, part_min_bytes=8 << 20, timeout=10.0, connect_timeout=2.0)
    part = fetch_package("etl", meta, ["host-a:6627", "host-b:6627"], store.directory, settings)
    store.adopt(part, meta.digest)      # renamed to <digest>.pkg

The part file is not fsync'ed: a copy that a crash damaged fails its next check and is
fetched again, and the registration it backed died with the process anyway.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from stratus.codedist.distributor import CodeMeta
from stratus.codedist.errors import CodeUnavailableError, DigestMismatchError
from stratus.codedist.package_store import DOWNLOAD_PREFIX, DOWNLOAD_SUFFIX
from stratus.codedist.transfer.check import CopyCheck, copy_check
from stratus.codedist.transfer.client import CodeClient
from stratus.codedist.transfer.parts import fetch_in_parts
from stratus.codedist.transfer.plan import WRONG, HolderError, sent_wrong_bytes
from stratus.codedist.transfer.stream import fetch_whole
from stratus.security.client_auth import NO_AUTH, ClientAuth

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FetchSettings:
    """How a package is fetched: ``nimbus.code.download.*`` and the request timeout."""

    parts: int = 4  # byte ranges fetched at once when several nimbuses hold a package
    part_min_bytes: int = 8 << 20  # smaller packages come in one request
    timeout: float = 10.0  # each read of one request (client.request.timeout.secs)
    connect_timeout: float = 2.0  # its TCP connect (nimbus.code.download.connect.timeout.secs)
    keep_partial: bool = True  # leave an interrupted download for the next call to resume
    auth: ClientAuth = NO_AUTH  # the token and TLS presented to holders (client.auth.*, .tls.*)

    def without_partial(self) -> FetchSettings:
        """The same, leaving nothing behind when a fetch fails (a consumer's download)."""
        return replace(self, keep_partial=False)


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
    return CodeClient(
        settings.timeout,
        connect_timeout=settings.connect_timeout,
        max_idle=max(settings.parts, 1),
        auth=settings.auth,
    )


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
        self.check: CopyCheck = copy_check(meta)
        self.part = part
        self.settings = settings
        self.failures: dict[str, str] = {}  # holder (or "parts from ...") -> what went wrong

    def run(self, holders: list[str]) -> bool:
        """True once ``part`` holds the package: resumed, in parts from the holders not
        suspected, or from one holder, the suspects last."""
        if self._complete_already():
            return True
        ordered = self.client.suspects_last(holders)
        trusted = [holder for holder in ordered if not self.client.suspected(holder)]
        if self._parts_wanted(trusted) and self._in_parts(trusted):
            return True
        for holder in ordered:
            if holder in self.failures and not sent_wrong_bytes(self.failures[holder]):
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
        if any(sent_wrong_bytes(reason) for reason in self.failures.values()):
            return DigestMismatchError(message)
        return CodeUnavailableError(message)

    def _complete_already(self) -> bool:
        """Whether an earlier call fetched the whole package but did not rename it (a crash)."""
        try:
            if self.part.stat().st_size != self.meta.size_bytes:
                return False
        except FileNotFoundError:
            return False
        if self.check.file_matches(self.part):
            self._log_fetched("resumed", "-")
            return True
        self.part.unlink(missing_ok=True)  # the holes of a download in parts, or damaged bytes
        return False

    def _whole_from(self, holder: str) -> bool:
        """The package from ``holder``, resuming what ``part`` holds; False if it failed."""
        try:
            fetch_whole(self.client, self.meta.digest, self.check, holder, self.part)
        except HolderError as exc:
            self.failures[holder] = exc.reason
            self._log_failure("whole", holder, exc.reason)
            return False
        self._log_fetched("whole", holder)
        return True

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
        """Byte ranges from several holders at once; True if together they check."""
        outcome = fetch_in_parts(
            self.client,
            self.meta.digest,
            self.check,
            holders,
            self.part,
            parts=self.settings.parts,
        )
        self.failures.update(outcome.failed)
        how, served = f"{outcome.ranges}-parts", ",".join(outcome.served)
        if outcome.verified:
            self._log_fetched(how, served)
            return True
        if outcome.found is not None:
            self.failures[f"parts from {served}"] = (
                f"{WRONG}together they hash to {self.check.describe(outcome.found)}; "
                "each holder is tried alone"
            )
        self._log_failure(how, served or "-", str(outcome.failed or "mismatch"))
        return False

    def _log_fetched(self, how: str, nodes: str) -> None:
        log.info(
            "event=code_fetched pipeline=%s digest=%s size_bytes=%d how=%s nodes=%s check=%s",
            self.pipeline,
            self.meta.digest,
            self.meta.size_bytes,
            how,
            nodes,
            self.check.algorithm,
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
