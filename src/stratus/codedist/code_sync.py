"""Keeps a nimbus's pipeline code in line with the pipelines ZooKeeper lists.

Every nimbus, leader or standby, runs one ``CodeSync``. A round first drops the code of
pipelines that no longer need it (KILLED, FAILED, removed, or submitted again with other
code; the packages of a pipeline's kept versions stay, under their kept keys, until it is
KILLED or they are no longer kept: ``kept_code.py``), then fetches the code of every
pipeline that needs it and that this nimbus does not hold. Rounds run as soon as a
ZooKeeper watch reports a new pipeline or new holders (unless ``nimbus.code.watch`` is
false), after a failed fetch with a growing pause, and every ``nimbus.code.sync.freq.secs``
whatever happens, which repairs anything a watch missed.

It also answers the leadership question of Storm's Nimbus HA design: a nimbus may lead only
when it holds the code of every active (ACTIVE or INACTIVE) pipeline; a PENDING one, whose
code may be on the leader alone, does not count. A pipeline whose code is on no live nimbus for
``nimbus.code.lost.fail.secs`` is excused, or no nimbus would ever lead again (Storm's
STORM-3664); the leader then marks it FAILED::

    sync = CodeSync(distributor, view.pipelines, ops.read, freq_secs=120, lost_fail_secs=300)
    sync.start()
    view.subscribe(sync.request)         # the watch path
    sync.missing()                       # [] once this nimbus may lead
    sync.stop()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from kazoo.exceptions import KazooException

from stratus.api.clock import Clock
from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.codedist.distributor import CodeDistributor, CodeMeta
from stratus.codedist.errors import CodeUnavailableError
from stratus.codedist.kept_code import kept_key, kept_pipeline
from stratus.codedist.staged import staged_key, staged_pipeline
from stratus.errors import StratusError

log = logging.getLogger(__name__)

FIRST_RETRY_SECS = 0.5


def code_needed(
    records: Mapping[str, PipelineRecord], *, to_lead: bool = False
) -> dict[str, CodeMeta]:
    """The code that nimbuses fetch (pipelines not KILLED or FAILED), or need to lead.

    The code of an update in progress is fetched too, under its staged key (``staged.py``),
    and the code of every kept version of a pipeline not KILLED under its kept key
    (``kept_code.py``); neither is ever needed to lead: the pipeline runs its current code.
    """
    needed = {
        name: CodeMeta(record.digest, record.size_bytes, record.blake3)
        for name, record in records.items()
        if (record.status.needed_to_lead if to_lead else record.status.needs_code)
    }
    if not to_lead:
        for name, record in records.items():
            update = record.update
            if update is not None and record.status.needs_code:
                needed[staged_key(name)] = CodeMeta(update.digest, update.size_bytes, update.blake3)
            needed.update(_kept_code(record))
    return needed


def _kept_code(record: PipelineRecord) -> dict[str, CodeMeta]:
    """The code of ``record``'s kept versions, by kept key; none once it is KILLED."""
    if record.status is PipelineStatus.KILLED:
        return {}
    return {
        kept_key(record.name, kept.version): CodeMeta(kept.digest, kept.size_bytes, kept.blake3)
        for kept in record.versions
    }


def _round_order(item: tuple[str, CodeMeta], here: set[str]) -> tuple[bool, str]:
    """The order of a round: first the kept keys whose bytes are ``here`` (digests held
    under some key), then the others by key. Registering a pipeline's new code under its
    name deletes the bytes it replaces unless a registered key still uses them, so a kept
    version's key must hold those bytes first (an update applied before any round
    registered version 1's kept key); code fetched from elsewhere is fetched under the
    pipeline's name first, as before."""
    key, meta = item
    return not (kept_pipeline(key) is not None and meta.digest in here), key


class CodeSync:
    """One nimbus's code sync thread and its may-lead answer; see the module docstring."""

    def __init__(
        self,
        distributor: CodeDistributor,
        pipelines: Callable[[], Mapping[str, PipelineRecord]],
        read_record: Callable[[str], PipelineRecord | None],
        *,
        freq_secs: float,
        lost_fail_secs: float,
        clock: Clock = time.monotonic,
    ) -> None:
        self._distributor = distributor
        self._pipelines = pipelines
        self._read_record = read_record
        self._freq_secs = freq_secs
        self._lost_fail_secs = lost_fail_secs
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._lost_since: dict[tuple[str, str], float] = {}
        self._seen_held: set[tuple[str, str]] = set()  # on some nimbus at one time
        self._awaited: set[tuple[str, str]] = set()  # its upload awaited: logged once
        self._thread: threading.Thread | None = None
        self.rounds = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="code-sync", daemon=True)
        self._thread.start()

    def request(self) -> None:
        """Run a round now (never blocks: watch callbacks call it)."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # ------------------------------------------------------------------ leadership

    def missing(self, records: Mapping[str, PipelineRecord] | None = None) -> list[str]:
        """The active pipelines whose code this nimbus lacks, but for those excused as lost.

        ``records`` is an authoritative read when the caller has one (on gaining
        leadership); else the watched view, and each pipeline that looks missing is
        checked against ZooKeeper itself: a view one event behind still shows a pipeline
        ACTIVE whose kill the sync has already acted on by deleting its code.
        """
        needed = code_needed(self._pipelines() if records is None else records, to_lead=True)
        excused = self.lost(needed)
        looks_missing = [
            name
            for name, meta in sorted(needed.items())
            if name not in excused
            and not self._holds(name, meta)
            and not self._holds_staged(name, meta)
            and not self._holds_kept(name, meta)
        ]
        if records is not None:
            return looks_missing
        return [name for name in looks_missing if self._needed_to_lead(name, needed[name])]

    def _needed_to_lead(self, name: str, meta: CodeMeta) -> bool:
        """Whether ZooKeeper itself says a nimbus needs this code to lead (yes if unsure)."""
        try:
            record = self._read_record(name)
        except (KazooException, StratusError):
            return True
        return record is not None and record.status.needed_to_lead and record.digest == meta.digest

    def lost(self, needed: Mapping[str, CodeMeta] | None = None) -> dict[str, float]:
        """Pipelines whose code has been on no live nimbus for ``lost_fail_secs``: seconds."""
        if needed is None:
            needed = code_needed(self._pipelines())
        now = self._clock()
        with self._lock:
            return {
                name: now - since
                for (name, digest), since in self._lost_since.items()
                if name in needed
                and staged_pipeline(name) is None  # an update's code lost fails no pipeline
                and kept_pipeline(name) is None  # nor an old version's
                and needed[name].digest == digest
                and now - since >= self._lost_fail_secs
            }

    # ------------------------------------------------------------------ rounds

    def sync_once(self) -> bool:
        """One round; True if every needed pipeline's code is here afterwards."""
        self.rounds += 1
        needed = code_needed(self._pipelines())
        self._drop_unneeded(needed, spare=needed)
        complete = True
        here = {meta.digest for meta in self._distributor.held().values()}
        for name, meta in sorted(needed.items(), key=lambda item: _round_order(item, here)):
            if self._stopping.is_set():
                return False
            complete = self._ensure(name, meta) and complete
        self._drop_unneeded(needed)  # an applied update's staged key, now held by name
        self._forget_lost_except(needed)
        return complete

    def _run(self) -> None:
        retry = FIRST_RETRY_SECS
        while not self._stopping.is_set():
            try:
                complete = self.sync_once()
            except (StratusError, KazooException, OSError) as exc:
                log.warning("event=code_sync_failed error=%r", exc)
                complete = False
            pause = self._freq_secs if complete else min(retry, self._freq_secs)
            retry = FIRST_RETRY_SECS if complete else retry * 2
            self._wake.wait(pause)
            self._wake.clear()

    def _drop_unneeded(
        self, needed: Mapping[str, CodeMeta], spare: Mapping[str, CodeMeta] | None = None
    ) -> None:
        """Drop the code no pipeline needs under its key; but for the digests of ``spare``,
        kept until the round has registered them under the key that needs them (an applied
        update's bytes move from the staged key to the pipeline's name without a fetch)."""
        spared = {meta.digest for meta in (spare or {}).values()}
        for name, meta in self._distributor.held().items():
            if meta.digest in spared and needed.get(name) != meta:
                continue
            if needed.get(name) != meta and not self._still_needed(name, meta):
                log.info("event=code_dropped pipeline=%s digest=%s", name, meta.digest)
                self._distributor.cleanup(name, meta.digest)  # not one registered since

    def _still_needed(self, name: str, meta: CodeMeta) -> bool:
        """Ask ZooKeeper itself before dropping: the view may not show a new record yet.

        A submit creates the record, then registers the code; a drop decided from a view
        that lags by one watch event would delete the only copy.
        """
        if kept_pipeline(name) is not None:
            return self._kept_still_needed(name, meta)
        pipeline = staged_pipeline(name)
        if pipeline is not None:
            staged = self._read_record(pipeline)
            if staged is None or not staged.status.needs_code:
                return False
            if staged.update is not None and staged.update.digest == meta.digest:
                return True  # still waiting
            # applied since the view was read: the bytes are the pipeline's code now; keep
            # them under the staged key until this nimbus holds them under the name
            return staged.digest == meta.digest and not self._distributor.holds(pipeline, meta)
        record = self._read_record(name)
        return record is not None and record.status.needs_code and record.digest == meta.digest

    def _kept_still_needed(self, key: str, meta: CodeMeta) -> bool:
        """Whether ZooKeeper itself says the record still keeps the version of ``key``."""
        kept = kept_pipeline(key)
        assert kept is not None
        record = self._read_record(kept[0])
        return record is not None and _kept_code(record).get(key) == meta

    def _ensure(self, name: str, meta: CodeMeta) -> bool:
        """Hold ``name``'s code, fetching it if need be; False if no holder could give it."""
        if self._holds(name, meta):
            return True
        try:
            self._distributor.replicate(name, meta)
        except CodeUnavailableError as exc:
            self._fetch_failed(name, meta, exc)
            return False
        log.info("event=code_replicated pipeline=%s digest=%s", name, meta.digest)
        return True

    def _fetch_failed(self, name: str, meta: CodeMeta, exc: CodeUnavailableError) -> None:
        """A warning, unless the code is being uploaded: then one line that says so.

        Code that no nimbus holds, and that this nimbus never saw held, is a submit (or an
        update) in progress: the nimbus that recorded it registers the code once it stored
        it. It is awaited (one INFO line) until it has been on no nimbus for
        ``lost_fail_secs``, when it is lost; code held once and gone since, or held by
        nimbuses that could not give it, is missing now (a warning every round)."""
        key = (name, meta.digest)
        with self._lock:
            since = self._lost_since.get(key)
            uploading = key not in self._seen_held and since is not None
        waited = self._clock() - since if since is not None else 0.0
        if uploading and waited < self._lost_fail_secs:
            if key not in self._awaited:
                self._awaited.add(key)
                log.info(
                    "event=code_upload_awaited pipeline=%s digest=%s wait_secs=%g reason=%r",
                    name,
                    meta.digest,
                    self._lost_fail_secs,
                    "no nimbus holds it yet: the nimbus that recorded it is still storing it; "
                    "fetched once it is registered",
                )
            return
        log.warning(
            "event=code_fetch_failed pipeline=%s digest=%s error=%s", name, meta.digest, exc
        )

    def _holds(self, name: str, meta: CodeMeta) -> bool:
        """Whether the code is here; notes when it is on no live nimbus at all."""
        if self._distributor.holds(name, meta):
            self._note_found(name)
            return True
        if self._distributor.replication_count(name, meta) > 0:
            self._note_found(name)
            with self._lock:
                self._seen_held.add((name, meta.digest))
        else:
            with self._lock:
                self._lost_since.setdefault((name, meta.digest), self._clock())
        return False

    def _holds_staged(self, name: str, meta: CodeMeta) -> bool:
        """Whether this nimbus holds ``meta`` as ``name``'s update: between the switch of
        the record and this nimbus's next round, the code is here, under the staged key."""
        if staged_pipeline(name) is not None:
            return False
        if self._distributor.holds(staged_key(name), meta):
            self.request()  # register it under the name soon
            return True
        return False

    def _holds_kept(self, name: str, meta: CodeMeta) -> bool:
        """Whether this nimbus holds ``meta`` as one of ``name``'s kept versions: between a
        rollback (or the restart of a FAILED or FINISHED pipeline) switching the record to
        a kept version and this nimbus's next round, the code is here, under its kept key."""
        for key, held in self._distributor.held().items():
            kept = kept_pipeline(key)
            if kept is None or kept[0] != name or held != meta:
                continue
            if self._distributor.holds(key, meta):
                self.request()  # register it under the name soon
                return True
        return False

    def _note_found(self, name: str) -> None:
        with self._lock:
            for key in [key for key in self._lost_since if key[0] == name]:
                del self._lost_since[key]

    def _forget_lost_except(self, needed: Mapping[str, CodeMeta]) -> None:
        with self._lock:
            for key in list(self._lost_since):
                if key[0] not in needed or needed[key[0]].digest != key[1]:
                    del self._lost_since[key]
            for keys in (self._seen_held, self._awaited):
                keys -= {
                    key for key in keys if key[0] not in needed or needed[key[0]].digest != key[1]
                }
