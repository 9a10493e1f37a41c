"""A supervisor's round as one pacemaker pulse: every heartbeat of one supervisor, in one value.

A supervisor writes its own heartbeat and its workers' once a period; the pacemaker state
store keeps that whole round as the single pulse ``/supervisors/<id>``, so the leader reads
one pulse per supervisor (200 for 10,000 workers), not one per worker, and its read costs
what the bytes cost, not a Python object per heartbeat. The value is a msgpack array::

    [1, supervisor, workers, index]

``1`` is the format's version; ``supervisor`` the supervisor's own heartbeat (bytes, or nil);
``workers`` its workers' heartbeats joined by ``,`` between ``[`` and ``]`` (a JSON array when
they are JSON records, which the leader decodes in one call per round); ``index`` a msgpack
array of ``[pipeline, start, end]``, where each heartbeat lies in ``workers``, unpacked only
by a reader that wants the heartbeats one by one::

    blob = encode_round(Round(supervisor=beat, workers={"etl": worker_beat}))
    packed = decode_round("s1", blob)     # PackedRound: supervisor, workers (the array)
    packed.unpacked()                     # Round(supervisor=beat, workers={"etl": worker_beat})

The round names no supervisor: its pulse's path does, and the pacemaker lets a supervisor
write only its own path. A reader checks that every worker heartbeat of a round names the
round's supervisor, so a supervisor cannot file a heartbeat under another's name either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgpack

from stratus.state.errors import BadRoundError

SUPERVISORS = "supervisors"
WORKERS = "workers"
FORMAT_VERSION = 1
EMPTY_ARRAY = b"[]"


@dataclass(frozen=True)
class Round:
    """One supervisor's heartbeats: its own (None if it has none) and its workers' by
    pipeline."""

    supervisor: bytes | None = None
    workers: dict[str, bytes] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.workers) + (self.supervisor is not None)


@dataclass(frozen=True)
class PackedRound:
    """A round as read: the workers' heartbeats still one array (see the module docstring)."""

    owner: str
    supervisor: bytes | None
    workers: bytes
    index: bytes

    def unpacked(self) -> Round:
        """The round with its workers' heartbeats one by one; ``BadRoundError`` for an index
        that does not split the array (a name that is not one path segment, an offset out
        of it)."""
        try:
            entries = msgpack.unpackb(self.index, raw=False)
        except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
            raise BadRoundError(self.owner, f"its index is not msgpack ({exc})") from None
        if not isinstance(entries, list):
            raise BadRoundError(self.owner, "its index is not an array")
        workers = {}
        size = len(self.workers)
        for entry in entries:
            if not (
                isinstance(entry, list)
                and len(entry) == 3
                and _segment(entry[0])
                and all(isinstance(n, int) and not isinstance(n, bool) for n in entry[1:])
                and 0 <= entry[1] <= entry[2] <= size
            ):
                raise BadRoundError(self.owner, f"its index holds {entry!r:.80}")
            workers[entry[0]] = self.workers[entry[1] : entry[2]]
        return Round(self.supervisor, workers)


@dataclass(frozen=True)
class RoundsRead:
    """Every supervisor's round at one read, by supervisor id; ``complete`` as in
    ``TreeRead``."""

    rounds: dict[str, PackedRound]
    complete: bool = True
    partial: bool = False


def located(path: str) -> tuple[str, str | None] | None:
    """Where the store path ``path`` is kept: the supervisor whose round holds it, and the
    pipeline of a worker heartbeat (None for the supervisor's own, ``/supervisors/<id>``);
    None for a path that is no heartbeat (``/workers/<pipeline>``, ...)."""
    parts = path.strip("/").split("/")
    if len(parts) == 2 and parts[0] == SUPERVISORS and parts[1]:
        return parts[1], None
    if len(parts) == 3 and parts[0] == WORKERS and parts[1] and parts[2]:
        return parts[2], parts[1]
    return None


def encode_round(round_: Round) -> bytes:
    """The pulse value of ``round_``."""
    chunks = [b"["]
    index = []
    at = 1
    for pipeline, data in round_.workers.items():
        if len(chunks) > 1:
            chunks.append(b",")
            at += 1
        chunks.append(data)
        index.append([pipeline, at, at + len(data)])
        at += len(data)
    chunks.append(b"]")
    packed: bytes = msgpack.packb(
        [FORMAT_VERSION, round_.supervisor, b"".join(chunks), msgpack.packb(index)],
        use_bin_type=True,
    )
    return packed


def decode_round(owner: str, blob: bytes) -> PackedRound:
    """Supervisor ``owner``'s round from its pulse value; ``BadRoundError`` if ``blob`` is
    not one (another format or version, a torn value)."""
    try:
        value = msgpack.unpackb(blob, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise BadRoundError(owner, f"not msgpack ({type(exc).__name__})") from None
    if not (
        isinstance(value, list)
        and len(value) == 4
        and value[0] == FORMAT_VERSION
        and (value[1] is None or isinstance(value[1], bytes))
        and isinstance(value[2], bytes)
        and isinstance(value[3], bytes)
    ):
        raise BadRoundError(owner, f"not a round of format version {FORMAT_VERSION}")
    return PackedRound(owner, value[1], value[2], value[3])


def _segment(name: object) -> bool:
    return isinstance(name, str) and bool(name) and "/" not in name and name not in (".", "..")
