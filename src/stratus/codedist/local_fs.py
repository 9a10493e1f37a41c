"""The local file-system code distributor: each nimbus keeps code on its own disk.

Storm's ``LocalFileSystemCodeDistributor``, with the registration it lacks after a session
expiry. Guarantees: a nimbus registers ``<root>/code/<pipeline>/<host:port>`` (ephemeral,
data ``{"digest", "size_bytes", "served_from"}``) only while its store holds a copy that
hashes to that digest; registrations come back by themselves after a session expiry; a
copy found corrupt is deleted and unregistered, so the sync fetches it again; the
replication count is the number of registrations with the pipeline's digest, read from
memory (``CodeLocations``). Copies are fetched (``transfer/fetch.py``) from each holder's
package server (``served_from``, ``transfer/server.py``), or from its API if it names none,
and checked against the pipeline record (its BLAKE3, else its sha256), for a standby as for
a supervisor's ``download``::

    dist = LocalFileSystemDistributor(client, paths, "host-a:6627", store,
                                      FetchSettings(parts=4, timeout=10.0),
                                      served_from="host-a:40123")   # its package server
    dist.prepare()
    meta = dist.upload(received.path, "etl")       # the leader: adopt and register
    dist.replicate("etl", meta)                    # another nimbus: fetch over HTTP, register
    dist.replication_count("etl", meta)            # 2
    dist.close()
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient

from stratus.codedist.code_locations import CodeLocations, holder_data
from stratus.codedist.distributor import CodeMeta
from stratus.codedist.package_store import SUFFIX, PackageStore
from stratus.codedist.transfer.fetch import FetchSettings, fetch_package, http_client
from stratus.files import private_dirs
from stratus.zk.ephemeral import EphemeralNodes
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)


class LocalFileSystemDistributor:
    """Code on each nimbus's disk, copied between nimbuses over HTTP; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        address: str,
        store: PackageStore,
        fetch: FetchSettings,
        *,
        served_from: str | None = None,
    ) -> None:
        self._paths = paths
        self.address = address
        self.served_from = served_from  # this nimbus's package server, named in registrations
        self._store = store
        self._settings = fetch
        self._http = http_client(self._settings)  # kept: connections to the holders are reused
        self._locations = CodeLocations(client, paths)
        self._nodes = EphemeralNodes(client, name=f"code-registrations {address}")
        self._lock = threading.Lock()  # guards the registrations and the digest locks
        # One registration change at a time, its ZooKeeper node included: a drop decided
        # for an old digest never removes the node of a registration made meanwhile.
        self._registering = threading.Lock()
        self._registered: dict[str, CodeMeta] = {}
        self._digest_locks: dict[str, threading.Lock] = {}

    # ------------------------------------------------------------------ lifecycle

    def prepare(self) -> None:
        """Start the registrations' thread and the watches of every pipeline's holders."""
        self._nodes.start()
        self._locations.start()
        log.info(
            "event=code_distributor_ready node=%s store=%s", self.address, self._store.directory
        )

    def close(self) -> None:
        """Unregister everything (ZooKeeper would at the session's end) and stop the watches."""
        self._locations.close()
        self._nodes.close()
        self._http.close()
        with self._lock:
            self._registered.clear()
        log.info("event=code_distributor_closed node=%s", self.address)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (it must not block) whenever some pipeline's holders change."""
        self._locations.on_change(callback)

    # ------------------------------------------------------------------ holding code

    def upload(self, package: Path, pipeline: str) -> CodeMeta:
        """Adopt ``package`` (moved if it is a file of the store, else copied) and register."""
        if package.parent.resolve() != self._store.directory.resolve():
            with package.open("rb") as src:
                package = self._store.receive(src).path
        digest = self._store.digest_of(package)
        with self._digest_lock(digest):
            try:
                stored = self._store.adopt(package, digest)
            except BaseException:
                self._store.discard(package)
                raise
            meta = CodeMeta(stored.digest, stored.size_bytes)
            replaced = self._register(pipeline, meta)
        self._drop_if_unused(replaced, meta)
        log.info(
            "event=code_uploaded pipeline=%s digest=%s size_bytes=%d node=%s",
            pipeline,
            meta.digest,
            meta.size_bytes,
            self.address,
        )
        return meta

    def replicate(self, pipeline: str, meta: CodeMeta) -> None:
        """Register a verified copy: the store's, or one fetched from the other holders."""
        with self._digest_lock(meta.digest):
            if not self._has_copy(meta):
                self._fetch_into_store(pipeline, meta)
            replaced = self._register(pipeline, meta)
        self._drop_if_unused(replaced, meta)

    def holds(self, pipeline: str, meta: CodeMeta) -> bool:
        """Registered with ``meta`` and the copy still hashes right (cached per file state)."""
        with self._lock:
            if self._registered.get(pipeline) != meta:
                return False
        if self._has_copy(meta):
            return True
        with self._digest_lock(meta.digest):
            if self._has_copy(meta):  # fetched again meanwhile
                with self._lock:
                    return self._registered.get(pipeline) == meta
            users = self._pipelines_using(meta.digest)
            log.error(
                "event=code_copy_lost pipeline=%s digest=%s node=%s action=unregister pipelines=%s",
                pipeline,
                meta.digest,
                self.address,
                ",".join(users),
            )
            for name in users:
                self._unregister(name)
        return False

    def held(self) -> dict[str, CodeMeta]:
        with self._lock:
            return dict(self._registered)

    def cleanup(self, pipeline: str, digest: str | None = None) -> None:
        """Unregister ``pipeline``; delete its package unless another held pipeline uses it.

        With ``digest``, only while ``pipeline`` is registered with that digest: a caller
        that decided to drop an old package must not drop a new one registered since (an
        update applied twice in a row registers its staged key again at once).
        """
        with self._lock:
            meta = self._registered.get(pipeline)
        if meta is None or (digest is not None and meta.digest != digest):
            return
        with self._digest_lock(meta.digest):
            if not self._unregister(pipeline, meta.digest):
                return
            if not self._pipelines_using(meta.digest):
                self._delete(meta.digest)
        log.info(
            "event=code_cleaned_up pipeline=%s digest=%s node=%s",
            pipeline,
            meta.digest,
            self.address,
        )

    def purge(self, digest: str) -> None:
        """Delete the local copy of ``digest`` unless a held pipeline uses it."""
        with self._digest_lock(digest):
            users = self._pipelines_using(digest)
            if users:
                log.info(
                    "event=code_purge_skipped digest=%s node=%s held_for=%s",
                    digest,
                    self.address,
                    ",".join(users),
                )
                return
            self._delete(digest)
        log.info("event=code_purged digest=%s node=%s", digest, self.address)

    # ------------------------------------------------------------------ others' questions

    def replication_count(self, pipeline: str, meta: CodeMeta) -> int:
        """The registrations with ``meta.digest`` (this nimbus's counted before its watch fires)."""
        holders = set(self._locations.holders(pipeline, meta.digest))
        with self._lock:
            if self._registered.get(pipeline) == meta:
                holders.add(self.address)
        return len(holders)

    def download(self, dest: Path, pipeline: str, meta: CodeMeta) -> list[Path]:
        """``dest/<digest>.pkg``: copied from this store if it holds it, else fetched."""
        private_dirs(dest)
        target = dest / f"{meta.digest}{SUFFIX}"
        with self._digest_lock(meta.digest):
            if self._has_copy(meta):
                _copy_atomically(self._store.path(meta.digest), target)
            else:
                settings = self._settings.without_partial()  # nothing left in dest if it fails
                holders = self._holders(pipeline, meta)
                part = fetch_package(pipeline, meta, holders, dest, settings, client=self._http)
                os.replace(part, target)
        log.info(
            "event=code_downloaded pipeline=%s digest=%s dest=%s node=%s",
            pipeline,
            meta.digest,
            dest,
            self.address,
        )
        return [target]

    # ------------------------------------------------------------------ parts

    def _has_copy(self, meta: CodeMeta) -> bool:
        if not self._store.verify(meta.digest):
            return False
        try:
            return self._store.path(meta.digest).stat().st_size == meta.size_bytes
        except FileNotFoundError:
            return False  # purged meanwhile

    def _fetch_into_store(self, pipeline: str, meta: CodeMeta) -> None:
        holders = self._holders(pipeline, meta)
        log.info(
            "event=code_fetch_started pipeline=%s digest=%s node=%s from=%s",
            pipeline,
            meta.digest,
            self.address,
            ",".join(holders) or "-",
        )
        part = fetch_package(
            pipeline, meta, holders, self._store.directory, self._settings, client=self._http
        )
        self._store.adopt(part, meta.digest)

    def _holders(self, pipeline: str, meta: CodeMeta) -> list[str]:
        """Where other nimbuses serve the code: the pipeline's holders, then the same bytes'.

        Each is the holder's package server if its registration names one, else its API.
        """
        ordered = self._locations.holders(pipeline, meta.digest)
        ordered += self._locations.holders_of(meta.digest)
        others = [h for h in dict.fromkeys(ordered) if h != self.address]
        return [self._locations.source(holder) for holder in others]

    def _register(self, pipeline: str, meta: CodeMeta) -> CodeMeta | None:
        """Say so in ZooKeeper; the code of ``pipeline`` registered before, if other."""
        path = self._paths.code_holder(pipeline, self.address)
        with self._registering:
            with self._lock:
                before = self._registered.get(pipeline)
                self._registered[pipeline] = meta
            created = self._nodes.add(path, holder_data(meta, self.served_from))
        log.info(
            "event=code_registered pipeline=%s digest=%s node=%s deferred=%s",
            pipeline,
            meta.digest,
            self.address,
            "no" if created else "yes",  # yes: ZooKeeper is unreachable; done once it is back
        )
        return before if before != meta else None

    def _drop_if_unused(self, replaced: CodeMeta | None, meta: CodeMeta) -> None:
        """Delete the code a pipeline submitted again no longer uses, unless another does."""
        if replaced is None or replaced.digest == meta.digest:
            return
        with self._digest_lock(replaced.digest):
            if not self._pipelines_using(replaced.digest):
                self._delete(replaced.digest)
                log.info(
                    "event=code_replaced digest=%s by=%s node=%s",
                    replaced.digest,
                    meta.digest,
                    self.address,
                )

    def _unregister(self, pipeline: str, digest: str | None = None) -> bool:
        """Unregister ``pipeline`` (only if still registered with ``digest``, when given)."""
        with self._registering:
            with self._lock:
                meta = self._registered.get(pipeline)
                if digest is not None and (meta is None or meta.digest != digest):
                    return False
                self._registered.pop(pipeline, None)
            self._nodes.remove(self._paths.code_holder(pipeline, self.address))
        log.info(
            "event=code_unregistered pipeline=%s digest=%s node=%s",
            pipeline,
            meta.digest if meta else "-",
            self.address,
        )
        return True

    def _pipelines_using(self, digest: str) -> list[str]:
        with self._lock:
            return sorted(name for name, meta in self._registered.items() if meta.digest == digest)

    def _delete(self, digest: str) -> None:
        self._store.remove(digest)
        self._store.remove_download(digest)

    def _digest_lock(self, digest: str) -> threading.Lock:
        """One fetch, registration change or deletion of the same bytes at a time."""
        with self._lock:
            return self._digest_locks.setdefault(digest, threading.Lock())


def _copy_atomically(source: Path, target: Path) -> None:
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".download-", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
