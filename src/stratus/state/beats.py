"""Fast beats on the pacemakers: one tiny pulse per supervisor, counted once a majority stored it.

A beat is the pacemaker pulse ``/beats/<supervisor id>``, whose value is a msgpack array::

    [1, boot_id, seq, lease_secs]

``1`` is the format's version; ``boot_id`` names the writer's incarnation (``seq`` counts
within it, so a writer started again from 0 is not taken for an old one); ``seq`` grows by
one a beat; ``lease_secs`` is the beat lease the beat renews. A beat **counts** once a majority
of ``pacemaker.servers`` stored it, within half its lease: a read answered by a majority
then holds it (two majorities share a server), whichever minority of pacemakers is down::

    board = BeatBoard(BlockingPacemakerPool(settings, call_timeout_secs=5.0))
    ack = board.beat("s1", boot_id, seq=42, lease_secs=0.8)   # BeatAck
    ack.counted              # a majority stored it
    read = board.read()                                        # BeatRead
    read.beats["s1"]         # Beat(boot_id=..., seq=42, lease_secs=0.8)
    read.from_majority       # judge nothing from less

A pulse under ``/beats`` that is not a beat (another version's format, a torn or oversized
value) is skipped with a warning (once, until that supervisor's beat reads again), never
raised: one bad writer hides no other. The pacemaker lets a supervisor write its own
``/beats/<id>`` only (``stratus.pacemaker.auth``). A call that cannot be made (the client
closed, no answer within its call timeout) raises ``StateStoreUnavailableError``; a refusal
(``forbidden``: an older pacemaker, or another supervisor's path) the pacemaker's own
``PacemakerRequestError``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgpack

from stratus.pacemaker.auth import BEATS_ROOT
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.errors import PathError
from stratus.pacemaker.quorum import is_majority
from stratus.pacemaker.store import join_path, split_path
from stratus.state.errors import BadBeatError
from stratus.state.pacemaker_store import pacemaker_call

log = logging.getLogger(__name__)

BEATS_PATH = join_path(BEATS_ROOT)  # /beats
FORMAT_VERSION = 1
MAX_BOOT_ID_CHARS = 64
MAX_BEAT_BYTES = 128  # a beat with the longest boot id is 86 bytes; more is no beat
MAX_SEQ = (1 << 63) - 1
READ_DEADLINE_SECS = 0.5  # a reader polling faster passes its own deadline


@dataclass(frozen=True)
class Beat:
    """One supervisor's newest beat, as read."""

    boot_id: str
    seq: int
    lease_secs: float


@dataclass(frozen=True)
class BeatAck:
    """How one beat ended: how many pacemakers stored it by its deadline, of how many
    configured, and how many it needed (a majority)."""

    supervisor_id: str
    seq: int
    acknowledged: int
    servers: int
    need: int

    @property
    def counted(self) -> bool:
        """Whether enough pacemakers stored the beat for it to renew a beat lease."""
        return self.acknowledged >= self.need


@dataclass(frozen=True)
class BeatRead:
    """Every supervisor's newest beat among the pacemakers that answered, by supervisor id;
    ``answered`` of the ``servers`` configured answered, ``warming`` when every one that did
    is warming up (a beat missing from it is unknown)."""

    beats: dict[str, Beat]
    answered: int
    servers: int
    warming: bool = False

    @property
    def from_majority(self) -> bool:
        """Whether a majority of the pacemakers answered: every beat counted before the read
        began is in it. A read from fewer tells nothing of a missing or old beat."""
        return is_majority(self.answered, self.servers)


def beat_path(supervisor_id: str) -> str:
    """The pulse of supervisor ``supervisor_id``'s beats: ``/beats/<id>``; ``ValueError``
    for an id that is not one path segment."""
    path = f"{BEATS_PATH}/{supervisor_id}"
    try:
        depth = len(split_path(path))
    except PathError as exc:
        raise ValueError(f"supervisor id {supervisor_id!r:.80} cannot name a beat: {exc}") from None
    if depth != len(BEATS_ROOT) + 1:
        raise ValueError(
            f"supervisor id {supervisor_id!r:.80} cannot name a beat: one path segment, without '/'"
        )
    return path


def beat_owner(path: str) -> str | None:
    """The supervisor whose beat the pulse at ``path`` is; None for a pulse deeper or
    elsewhere (which the reader ignores)."""
    parts = path.strip("/").split("/")
    root = list(BEATS_ROOT)
    if len(parts) == len(root) + 1 and parts[: len(root)] == root and parts[-1]:
        return parts[-1]
    return None


def encode_beat(boot_id: str, seq: int, lease_secs: float) -> bytes:
    """The pulse value of one beat; ``ValueError`` naming the field a beat cannot carry."""
    if not isinstance(boot_id, str) or not 0 < len(boot_id) <= MAX_BOOT_ID_CHARS:
        raise ValueError(
            f"a beat's boot_id must be 1 to {MAX_BOOT_ID_CHARS} characters, not {boot_id!r:.80}"
        )
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
        raise ValueError(f"a beat's seq must be an integer from 0 to 2**63-1, not {seq!r}")
    if not _positive(lease_secs):
        raise ValueError(f"a beat's lease_secs must be a positive number, not {lease_secs!r}")
    packed: bytes = msgpack.packb(
        [FORMAT_VERSION, boot_id, seq, float(lease_secs)], use_bin_type=True
    )
    return packed


def decode_beat(supervisor_id: str, data: bytes) -> Beat:
    """The beat in supervisor ``supervisor_id``'s pulse; ``BadBeatError`` if ``data`` is
    not one (another format or version, a torn or oversized value)."""
    if len(data) > MAX_BEAT_BYTES:
        raise BadBeatError(supervisor_id, f"{len(data)} bytes, above any beat's {MAX_BEAT_BYTES}")
    try:
        value = msgpack.unpackb(data, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise BadBeatError(supervisor_id, f"not msgpack ({type(exc).__name__})") from None
    if not (isinstance(value, list) and len(value) == 4 and value[0] == FORMAT_VERSION):
        raise BadBeatError(supervisor_id, f"not a beat of format version {FORMAT_VERSION}")
    _, boot_id, seq, lease_secs = value
    if not isinstance(boot_id, str) or not 0 < len(boot_id) <= MAX_BOOT_ID_CHARS:
        raise BadBeatError(supervisor_id, "its boot_id is not a short string")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
        raise BadBeatError(supervisor_id, "its seq is not a non-negative integer")
    if not _positive(lease_secs):
        raise BadBeatError(supervisor_id, "its lease_secs is not a positive number")
    return Beat(boot_id, seq, float(lease_secs))


class BeatBoard:
    """Supervisors' beats on the pacemakers: sent to a majority, read with how many answered."""

    def __init__(
        self, pool: BlockingPacemakerPool, *, wall: Callable[[], float] = time.time
    ) -> None:
        self._pool = pool
        self._wall = wall
        self._stamped = -math.inf  # the last beat's pulse time: never stamped older
        self._unreadable: dict[str, str] = {}  # supervisor -> the reason last logged

    def beat(self, supervisor_id: str, boot_id: str, seq: int, lease_secs: float) -> BeatAck:
        """Send one beat to every live pacemaker; back as soon as a majority of
        ``pacemaker.servers`` stored it, or after half of ``lease_secs`` (a beat
        acknowledged later could not keep its lease anyway) with how many had."""
        path = beat_path(supervisor_id)
        data = encode_beat(boot_id, seq, lease_secs)
        # A reader takes each path's pulse with the newest time among the servers: a wall
        # clock stepping back must not make this beat lose to an older one that a server
        # it did not reach still holds.
        self._stamped = max(self._wall(), math.nextafter(self._stamped, math.inf))
        with pacemaker_call(path):
            ack = self._pool.send_pulses_quorum(
                [(path, data, self._stamped)], deadline_secs=lease_secs / 2
            )
        return BeatAck(supervisor_id, seq, ack.acknowledged, ack.servers, ack.need)

    def read(self, *, deadline_secs: float = READ_DEADLINE_SECS) -> BeatRead:
        """Every supervisor's newest beat, from one paged read of ``/beats``: back once a
        majority of the pacemakers answered, or after ``deadline_secs`` with however many
        had (``BeatRead.from_majority``). An unreadable beat is skipped, with a warning."""
        with pacemaker_call(BEATS_PATH):
            read = self._pool.get_all_pulses_quorum(BEATS_PATH, deadline_secs=deadline_secs)
        beats: dict[str, Beat] = {}
        unreadable: dict[str, str] = {}
        for path, pulse in read.value.items():
            owner = beat_owner(path)
            if owner is None:
                continue  # below a supervisor's own beat: its subtree, but no beat
            try:
                beats[owner] = decode_beat(owner, pulse.data)
            except BadBeatError as exc:
                unreadable[owner] = exc.reason
        self._warn_unreadable(unreadable)
        return BeatRead(beats, read.answered, read.servers, read.warming)

    def _warn_unreadable(self, unreadable: dict[str, str]) -> None:
        """Log each unreadable beat once, until that supervisor's beat reads again (a
        reader polling ten times a second would otherwise repeat it ten times a second)."""
        for owner, reason in unreadable.items():
            if self._unreadable.get(owner) != reason:
                log.warning("event=bad_beat supervisor=%s error=%s", owner, reason)
        self._unreadable = unreadable


def _positive(number: object) -> bool:
    """A finite number above 0 (not a bool)."""
    return (
        isinstance(number, int | float)
        and not isinstance(number, bool)
        and math.isfinite(number)
        and number > 0
    )
