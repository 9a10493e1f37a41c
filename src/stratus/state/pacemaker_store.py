"""The cluster state store on the pacemakers (``cluster.state.store: pacemaker``).

Heartbeats go to every server of ``pacemaker.servers`` through one ``BlockingPacemakerPool``;
everything else stays in ZooKeeper. A pacemaker authorizes a supervisor on its own subtree,
``/supervisors/<id>``, only, and a supervisor writes all its heartbeats once a period, so the
store keeps each supervisor's **round** (its own heartbeat and its workers') as one pulse:

| store path (the interface's)  | on the pacemakers                                   |
|-------------------------------|-----------------------------------------------------|
| ``/supervisors/<id>``         | an entry of the round pulse ``/supervisors/<id>``   |
| ``/workers/<pipeline>/<id>``  | an entry of the round pulse ``/supervisors/<id>``   |

(the round's format is ``stratus.state.rounds``). A supervisor's period is one
``send_pulses`` of one pulse (``set_round``), and the leader reads every heartbeat with one
paged ``get_all_pulses_for_path /supervisors``: one pulse per supervisor, 200 for 10,000
workers, so the read costs what the bytes cost, not a Python object per worker. Servers
merge by the newest round. A change to one heartbeat outside a round (``set``, ``delete``)
reads the round, changes it and writes it back. A store built for a supervisor (``owner``)
reads its own subtree only, which is all its principal may read; one built for a nimbus
reads everything::

    store = PacemakerStateStore(BlockingPacemakerPool(settings, call_timeout_secs=5.0))
    store.set_round("s1", Round(supervisor=beat, workers={"etl": beat}))   # one message
    read = store.read_tree("/")     # TreeRead; complete=False while every server is warming

A pacemaker that cannot be reached raises ``StateStoreUnavailableError``; a refusal
(``forbidden``, ``full``) raises the pacemaker's own ``PacemakerRequestError``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager

from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.errors import PacemakerUnavailableError
from stratus.pacemaker.store import Pulse
from stratus.state.errors import BadRoundError, StateStoreUnavailableError
from stratus.state.rounds import (
    SUPERVISORS,
    WORKERS,
    PackedRound,
    Round,
    RoundsRead,
    decode_round,
    encode_round,
    located,
)
from stratus.state.store import TreeRead
from stratus.state.zk_store import check_path

log = logging.getLogger(__name__)

STORE_NAME = "pacemaker"


def owned_subtree(owner: str) -> str:
    """The pacemaker subtree of supervisor ``owner``'s heartbeats: ``/supervisors/<owner>``,
    whose own pulse is the supervisor's round."""
    return f"/{SUPERVISORS}/{owner}"


def round_owner(path: str) -> str | None:
    """The supervisor whose round the pacemaker pulse at ``path`` is; None for a pulse
    outside the layout (which the store ignores)."""
    parts = path.strip("/").split("/")
    return parts[1] if len(parts) == 2 and parts[0] == SUPERVISORS and parts[1] else None


class PacemakerStateStore:
    """``ClusterStateStore`` on the pacemakers, one round pulse per supervisor; see the
    module docstring."""

    def __init__(
        self,
        pool: BlockingPacemakerPool,
        *,
        owner: str | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._pool = pool
        self._scope = owned_subtree(owner) if owner else f"/{SUPERVISORS}"
        self._wall = wall

    def set_round(self, owner: str, round_: Round) -> None:
        """Replace supervisor ``owner``'s round with ``round_``: one ``send_pulses`` of one
        pulse to every live server, stamped with this host's wall clock (servers merge by
        it). A heartbeat of ``owner`` that ``round_`` lacks is gone with the old round."""
        target = owned_subtree(owner)
        with pacemaker_call(target):
            self._pool.send_pulses([(target, encode_round(round_), self._wall())])

    def set(self, path: str, data: bytes) -> None:
        self.set_many({path: data})

    def set_many(self, entries: Mapping[str, bytes]) -> None:
        """Set every path of ``entries``, keeping the other heartbeats of their supervisors:
        each round concerned is read (the newest of the servers), changed, and written back,
        all in one ``send_pulses``."""
        changes: dict[str, Round] = {}
        for path, data in entries.items():
            owner, pipeline = _located(path)
            change = changes.setdefault(owner, Round())
            if pipeline is None:
                change = changes[owner] = Round(data, change.workers)
            else:
                change.workers[pipeline] = data
        now = self._wall()
        pulses = []
        for owner, change in changes.items():
            current = self._round(owner)
            old = current[0] if current else Round()
            merged = Round(
                change.supervisor if change.supervisor is not None else old.supervisor,
                {**old.workers, **change.workers},
            )
            pulses.append((owned_subtree(owner), encode_round(merged), now))
        with pacemaker_call(self._scope):
            self._pool.send_pulses(pulses)

    def get(self, path: str) -> bytes | None:
        owner, pipeline = _located(path)
        current = self._round(owner)
        if current is None:
            return None
        return current[0].supervisor if pipeline is None else current[0].workers.get(pipeline)

    def read_rounds(self) -> RoundsRead:
        """Every supervisor's round (a supervisor's store: its own), from one paged read;
        incomplete when every server that answered is warming up, partial when a configured
        server did not answer. A round that cannot be
        read is skipped with a warning, as a torn heartbeat is."""
        with pacemaker_call(self._scope):
            read = self._pool.get_all_pulses_for_path(self._scope)
        rounds = {}
        for where, pulse in read.value.items():
            owner = round_owner(where)
            if owner is None:
                continue  # not a round: no pulse of this layout
            found = _decoded(owner, pulse)
            if found is not None:
                rounds[owner] = found
        return RoundsRead(rounds, complete=not read.warming, partial=read.partial)

    def read_tree(self, path: str) -> TreeRead:
        """Every value below ``path``, from one read of every round (each split into its
        heartbeats: the leader's read takes the rounds whole, ``read_rounds``)."""
        base = "/" if check_path(path) == "/" else path + "/"
        read = self.read_rounds()
        data: dict[str, bytes] = {}
        for owner, packed in read.rounds.items():
            round_ = _unpacked(packed)
            if round_ is None:
                continue
            entries = {f"{WORKERS}/{name}/{owner}": beat for name, beat in round_.workers.items()}
            if round_.supervisor is not None:
                entries[f"{SUPERVISORS}/{owner}"] = round_.supervisor
            for rel, value in entries.items():
                if base == "/":
                    data[rel] = value
                elif ("/" + rel).startswith(base):
                    data[rel[len(base) - 1 :]] = value
        return TreeRead(data, complete=read.complete, partial=read.partial)

    def children(self, path: str) -> list[str]:
        names = {rel.split("/", 1)[0] for rel in self.read_tree(path).data}
        return sorted(names)

    def children_data(self, path: str) -> dict[str, bytes]:
        return {rel: data for rel, data in self.read_tree(path).data.items() if "/" not in rel}

    def delete(self, path: str) -> None:
        """Remove ``path`` and everything below it from every live server: each round
        concerned is read, written back without those heartbeats (with the time it had, so
        it never passes for newer than its supervisor's next round), or deleted once empty."""
        parts = _parts(path)
        if not parts:
            raise ValueError("cannot delete the state store's root '/'; delete below it")
        if located(path) is not None:
            leaves = [path]
        else:
            leaves = [f"{path}/{rel}" for rel in self.read_tree(path).data]
        gone: dict[str, set[str | None]] = {}
        for leaf in leaves:
            owner, pipeline = _located(leaf)
            gone.setdefault(owner, set()).add(pipeline)
        for owner, pipelines in gone.items():
            self._remove(owner, pipelines)

    def close(self) -> None:
        """Close the pool: its connections and its event loop's thread."""
        self._pool.close()

    def read_round(self, owner: str) -> PackedRound | None:
        """Supervisor ``owner``'s round alone, the newest of the servers, from one read;
        None if no server holds a readable one."""
        pulse = self._round_pulse(owner)
        return _decoded(owner, pulse) if pulse is not None else None

    def _round(self, owner: str) -> tuple[Round, float] | None:
        """Supervisor ``owner``'s round, the newest of the servers, and its time; None if
        no server holds a readable one."""
        pulse = self._round_pulse(owner)
        packed = _decoded(owner, pulse) if pulse is not None else None
        found = _unpacked(packed) if packed is not None else None
        return None if found is None or pulse is None else (found, pulse.time)

    def _round_pulse(self, owner: str) -> Pulse | None:
        target = owned_subtree(owner)
        with pacemaker_call(target):
            pulse: Pulse | None = self._pool.get_pulse(target).value
        return pulse

    def _remove(self, owner: str, pipelines: Collection[str | None]) -> None:
        """Remove from ``owner``'s round the worker heartbeats of ``pipelines`` (None: the
        supervisor's own)."""
        current = self._round(owner)
        if current is None:
            return
        old, when = current
        kept = Round(
            None if None in pipelines else old.supervisor,
            {name: data for name, data in old.workers.items() if name not in pipelines},
        )
        if len(kept) == len(old):
            return
        target = owned_subtree(owner)
        with pacemaker_call(target):
            if len(kept):
                self._pool.send_pulses([(target, encode_round(kept), when)])
            else:
                self._pool.delete_path(target)


@contextmanager
def pacemaker_call(path: str) -> Iterator[None]:
    """A call of the pacemakers about ``path``: one that cannot be made (no server reached,
    no answer in time) raises ``StateStoreUnavailableError``, as every store's calls do."""
    try:
        yield
    except PacemakerUnavailableError as exc:
        raise StateStoreUnavailableError(STORE_NAME, path, str(exc)) from None


def _decoded(owner: str, pulse: Pulse) -> PackedRound | None:
    """The round in ``owner``'s pulse; None (and logged) for a pulse that is not a round."""
    try:
        return decode_round(owner, pulse.data)
    except BadRoundError as exc:
        log.warning("event=bad_heartbeat_round supervisor=%s error=%s", owner, exc.reason)
        return None


def _unpacked(packed: PackedRound) -> Round | None:
    """``packed`` split into its heartbeats; None (and logged) for an index that does not
    split it."""
    try:
        return packed.unpacked()
    except BadRoundError as exc:
        log.warning("event=bad_heartbeat_round supervisor=%s error=%s", packed.owner, exc.reason)
        return None


def _located(path: str) -> tuple[str, str | None]:
    """``located(path)`` for a path the layout has; ``ValueError`` for any other."""
    found = located(check_path(path))
    if found is None:
        raise ValueError(
            f"the pacemaker state store holds /supervisors/<id> and /workers/<pipeline>/<id>, "
            f"not {path!r}"
        )
    return found


def _parts(path: str) -> tuple[str, ...]:
    checked = check_path(path)
    return () if checked == "/" else tuple(checked[1:].split("/"))
