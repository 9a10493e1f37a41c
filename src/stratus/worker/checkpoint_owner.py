"""Who owns a pipeline's checkpoint location: the worker whose fencing token is the highest.

Guarantees: a worker claims the location before it runs, and checks the claims again after
every micro-batch its queries commit; a claim that finds a higher token than the worker's
own refuses to run, and a check that finds one stops the run at once (FENCED). Every claimer
writes its file before it lists, so of two workers of one pipeline the lower one sees the
higher one at its claim or, at the latest, after the batch it was running when the higher
one claimed: a stale worker commits at most that one batch more (and Spark's own
checkpoint log refuses a second commit of one batch id). Every operation is one that any
fsspec storage does (write a small file, list a directory, delete a file): no lock, no
rename, no conditional write, so a checkpoint root on HDFS, S3 or a local disk is fenced
alike.

Each claim is a file ``<checkpoint_location>/_stratus_owners/<era>-<zxid>``, both numbers
zero-padded (names sort as tokens do), holding who wrote it. A claim with the token of an
earlier file of the same name is a restart of the same assignment's worker, which owns it
again. The owner prunes the claims below its own at its claim, keeping the newest few for
the operator; it never deletes a higher one::

    owners = CheckpointOwners(spec.checkpoint_location, spec.token)
    owners.claim(note={"supervisor": "s1"})   # None: ours; else the token that fences us
    owners.higher()                           # one listing: None, or the higher token

    fence = OwnerFence(owners, stop, spec.checkpoint_location)
    fence.claim()                             # None, or the FENCED outcome: do not start
    tracker = QueryTracker(on_batch=fence.batch_committed)  # stops the run once fenced
    fence.check()                             # None, or the FENCED outcome (sdp: each run)
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

from stratus.api.records import FencingToken, QueryProgress
from stratus.files import make_private_file, private_dirs
from stratus.worker.outcome import Outcome
from stratus.worker.stop_request import StopRequest

log = logging.getLogger(__name__)

OWNERS_DIR = "_stratus_owners"
KEEP_LOWER = 3  # claims below the owner's kept at its claim, for the operator to read
_ERA_DIGITS = 15  # milliseconds since 1970 take 13
_ZXID_DIGITS = 20  # a zxid is a 64-bit number
_NAME = re.compile(rf"^(\d{{{_ERA_DIGITS}}})-(\d{{{_ZXID_DIGITS}}})$")


def owner_file_name(token: FencingToken) -> str:
    """The name of ``token``'s claim: names sort as their tokens do."""
    return f"{token.era:0{_ERA_DIGITS}d}-{token.zxid:0{_ZXID_DIGITS}d}"


def token_of(name: str) -> FencingToken | None:
    """The token a claim's file name holds; None for any other file."""
    match = _NAME.match(name.rsplit("/", 1)[-1])
    if match is None:
        return None
    return FencingToken(era=int(match.group(1)), zxid=int(match.group(2)))


class CheckpointOwners:
    """One worker's claim on its pipeline's checkpoint location; see the module docstring.

    The file system object is made once (fsspec caches it too): a check costs one listing.
    """

    def __init__(self, location: str, token: FencingToken, *, keep_lower: int = KEEP_LOWER):
        self.token = token
        self._fs, root = fsspec.core.url_to_fs(location)
        self._location = root.rstrip("/")
        self._dir = f"{self._location}/{OWNERS_DIR}"
        self._local = isinstance(self._fs, LocalFileSystem)
        self._keep_lower = keep_lower

    def claim(self, note: Mapping[str, object] | None = None) -> FencingToken | None:
        """Write this worker's claim, then list the claims: the higher token that fences this
        worker, or None if it owns the location (then the older claims are pruned)."""
        self._make_location()
        record = {"token": str(self.token), **(note or {})}
        self._fs.pipe_file(self._path(self.token), json.dumps(record).encode())
        if self._local:
            make_private_file(Path(self._path(self.token)))
        tokens = self._tokens()
        higher = _highest_above(tokens, self.token)
        if higher is None:
            self._prune(tokens)
        return higher

    def _make_location(self) -> None:
        """The checkpoint location and its claims' directory; on a local disk 0700, with
        every level stratus makes (``private_dirs``), since Spark writes the pipeline's
        state there with the umask's modes: this worker's own directory, made by it."""
        if self._local:
            private_dirs(Path(self._location))
            private_dirs(Path(self._dir))
        else:  # a remote store (HDFS, S3, ...) has the operator's permissions, no umask
            self._fs.makedirs(self._dir, exist_ok=True)

    def higher(self) -> FencingToken | None:
        """The highest claim above this worker's, if any: one listing."""
        return _highest_above(self._tokens(), self.token)

    def _tokens(self) -> list[FencingToken]:
        self._fs.invalidate_cache(self._dir)  # a cached listing would hide a newer claim
        names = self._fs.ls(self._dir, detail=False)
        return [token for name in names if (token := token_of(str(name))) is not None]

    def _prune(self, tokens: list[FencingToken]) -> None:
        """Delete the claims below this worker's but the newest ``keep_lower``."""
        lower = sorted((t for t in tokens if t.key() < self.token.key()), key=FencingToken.key)
        stale = lower[: max(len(lower) - self._keep_lower, 0)]
        for token in stale:
            try:
                self._fs.rm_file(self._path(token))
            except FileNotFoundError:
                pass  # pruned by another owner meanwhile
            except OSError as exc:
                log.warning("event=owner_prune_failed token=%s error=%r", token, exc)
                return

    def _path(self, token: FencingToken) -> str:
        return f"{self._dir}/{owner_file_name(token)}"


def _highest_above(tokens: list[FencingToken], own: FencingToken) -> FencingToken | None:
    highest = max(tokens, key=FencingToken.key, default=None)
    return highest if highest is not None and highest.key() > own.key() else None


class OwnerFence:
    """The worker's side of the claim: it claims before the run and checks after each
    committed micro-batch; once a higher token is found, the run is stopped at once, as a
    stop request stops it, and ends FENCED.

    The check runs on the thread that reports the batch (Spark's listener thread): it lists
    and, if fenced, hands the stop to a thread of its own, so that stopping the queries never
    waits on the thread that reports their progress."""

    def __init__(self, owners: CheckpointOwners, stop: StopRequest, location: str) -> None:
        self._owners = owners
        self._stop = stop
        self._location = location
        self._fenced = threading.Event()
        self._outcome: Outcome | None = None

    @property
    def fenced(self) -> bool:
        return self._fenced.is_set()

    def claim(self, note: Mapping[str, object] | None = None) -> Outcome | None:
        """Claim the location before the run: None if this worker owns it, else its FENCED
        outcome (a newer worker claimed it: this one must not start)."""
        higher = self._owners.claim(note)
        if higher is None:
            log.info(
                "event=checkpoint_claimed token=%s location=%s", self._owners.token, self._location
            )
            return None
        log.warning(
            "event=worker_fenced at=claim token=%s owner_token=%s location=%s",
            self._owners.token,
            higher,
            self._location,
        )
        return self._fence(higher, "it did not start")

    def check(self, batch_id: int | None = None) -> Outcome | None:
        """One listing: the FENCED outcome once a higher claim exists, else None. A listing
        that fails is no verdict (the storage's own writes will tell): None."""
        if self.fenced:
            return self._outcome
        try:
            higher = self._owners.higher()
        except OSError as exc:
            log.warning("event=owner_check_failed location=%s error=%r", self._location, exc)
            return None
        if higher is None:
            return None
        log.warning(
            "event=worker_fenced at=batch batch_id=%s token=%s owner_token=%s location=%s",
            batch_id,
            self._owners.token,
            higher,
            self._location,
        )
        return self._fence(higher, "it stopped its run")

    def batch_committed(self, progress: QueryProgress) -> None:
        """After a committed micro-batch (the listener's thread): ``check``, and if fenced,
        the run's stop, requested from a thread of its own."""
        if self.fenced:
            return
        outcome = self.check(progress.batch_id)
        if outcome is None:
            return
        threading.Thread(
            target=self._stop.request,
            args=("fenced: a newer worker claimed the checkpoint location",),
            kwargs={"outcome": outcome},
            name="owner-fence",
            daemon=True,
        ).start()

    def _fence(self, higher: FencingToken, what: str) -> Outcome:
        self._outcome = Outcome.fenced(
            f"fenced: a worker of a newer assignment (token {higher}) claimed the checkpoint "
            f"location {self._location}, this worker's token {self._owners.token} is stale: "
            f"{what} and commits nothing more; its supervisor starts it again only for a "
            "newer assignment"
        )
        self._fenced.set()
        return self._outcome
