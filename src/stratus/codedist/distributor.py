"""The code distributor: Storm's ``ICodeDistributor``, plus what a nimbus's sync needs.

One implementation is chosen by ``nimbus.code.distributor``:

- ``local`` (``LocalFileSystemDistributor``): every nimbus keeps packages on its own disk,
  registers ``<root>/code/<pipeline>/<host:port>`` (ephemeral, data: the digest) for each
  pipeline whose code it holds, and fetches missing code over HTTP from the nimbuses
  registered there. The replication count is the number of those registrations with the
  pipeline's digest.
- ``shared`` (``SharedStorageDistributor``): one fsspec store that every nimbus reads; no
  per-host znodes; the store's own replication is out of stratus's sight, so the count is
  the number of live nimbuses (each can read the package) once the package is stored.

Every copy is checked against the pipeline record: its BLAKE3 if the record has one, else
the sha256 that names the package (``transfer/check.py``)::

    dist.prepare()
    meta = dist.upload(validated_package, "etl")          # the leader, on submit
    dist.replication_count("etl", meta)                     # 1, then more as others fetch it
    dist.replicate("etl", meta)                             # a standby: fetch, verify, register
    dist.download(Path("/tmp/etl"), "etl", meta)           # a supervisor: [Path(...)]
    dist.cleanup("etl")                                     # this nimbus no longer holds it
    dist.close()
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class CodeMeta:
    """What a holder needs to fetch and check one pipeline's code (Storm's code meta file)."""

    digest: str  # sha256 of the package, hex: its name
    size_bytes: int
    # BLAKE3 of the package, hex, recorded at submit: copies are checked against it (None
    # in older records: against the sha256). Not part of the identity: two metas of the
    # same bytes are equal whether or not they carry it.
    blake3: str | None = field(default=None, compare=False)


class CodeDistributor(Protocol):
    """Where pipeline code lives and how a nimbus or supervisor gets a verified copy."""

    def prepare(self) -> None:
        """Start: open the storage and the watches; the ZooKeeper client is connected."""

    def upload(self, package: Path, pipeline: str) -> CodeMeta:
        """The leader, on submit: take over this validated package file and hold it.

        The file is moved (or copied) into the store, then this nimbus is registered as a
        holder of ``pipeline``'s code. Idempotent: a retried submit uploads again.
        """

    def download(self, dest: Path, pipeline: str, meta: CodeMeta) -> list[Path]:
        """Fetch the code into directory ``dest`` for a consumer that is not a holder.

        Returns the files written; each is checked against ``meta`` (``copy_check``: its
        BLAKE3, else its sha256; else ``CodeUnavailableError``, nothing left in ``dest``).
        """

    def replication_count(self, pipeline: str, meta: CodeMeta) -> int:
        """How many nimbuses hold ``pipeline``'s code with ``meta.digest`` now."""

    def holds(self, pipeline: str, meta: CodeMeta) -> bool:
        """Whether this nimbus holds a verified copy and says so (lead, serve, count).

        Cheap enough to call every lead check: a local copy is hashed again only when
        its size, mtime or inode changed; a copy found corrupt is dropped and unregistered.
        """

    def replicate(self, pipeline: str, meta: CodeMeta) -> None:
        """Become a holder: fetch from another holder, verify, store, register.

        ``CodeUnavailableError`` if no holder could provide verified bytes.
        """

    def held(self) -> dict[str, CodeMeta]:
        """The pipelines this nimbus is registered as holding the code of."""

    def cleanup(self, pipeline: str, digest: str | None = None) -> None:
        """This nimbus stops holding ``pipeline``'s code: unregister, delete unless shared.
        With ``digest``, only while the code held under ``pipeline`` is that digest."""

    def purge(self, digest: str) -> None:
        """The leader: delete a package that no pipeline record names any more."""

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (it must not block) whenever some pipeline's holders change."""

    def close(self) -> None:
        """Stop watches and registrations (ZooKeeper removes the ephemeral znodes)."""
