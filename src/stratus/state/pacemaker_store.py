"""The cluster state store on the pacemakers (``cluster.state.store: pacemaker``).

Heartbeats go to every server of ``pacemaker.servers`` through one ``BlockingPacemakerPool``;
everything else stays in ZooKeeper. The store keeps the interface's paths and lays them out
on the pacemakers by supervisor, because a pacemaker authorizes a supervisor on its own
subtree, ``/supervisors/<id>``, only:

| store path (the interface's)  | pacemaker path                      |
|-------------------------------|-------------------------------------|
| ``/supervisors/<id>``         | ``/supervisors/<id>`` (its pulse)   |
| ``/workers/<pipeline>/<id>``  | ``/supervisors/<id>/workers/<pipeline>`` |

So a supervisor's whole period (its heartbeat and its workers') is one ``send_pulses`` in
its own subtree, and the leader reads every heartbeat with one ``get_all_pulses_for_path``
(paged: each answer within the maximum frame, whatever the number of workers).
A store built for a supervisor (``owner``) reads its own subtree only, which is all its
principal may read; one built for a nimbus reads everything::

    store = PacemakerStateStore(BlockingPacemakerPool(settings, call_timeout_secs=5.0))
    store.set_many({"/workers/etl/s1": beat, "/supervisors/s1": beat})   # one message
    read = store.read_tree("/")     # TreeRead; complete=False while every server is warming

A pacemaker that cannot be reached raises ``StateStoreUnavailableError``; a refusal
(``forbidden``, ``full``) raises the pacemaker's own ``PacemakerRequestError``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.errors import PacemakerUnavailableError
from stratus.state.errors import StateStoreUnavailableError
from stratus.state.store import TreeRead
from stratus.state.zk_store import check_path

STORE_NAME = "pacemaker"
SUPERVISORS = "supervisors"
WORKERS = "workers"
MAPPED_PATHS_CACHED = 1 << 17  # from_pacemaker's memory: more than the heartbeats of a cluster


def owned_subtree(owner: str) -> str:
    """The pacemaker subtree of supervisor ``owner``'s heartbeats: ``/supervisors/<owner>``."""
    return f"/{SUPERVISORS}/{owner}"


def to_pacemaker(path: str) -> str:
    """The pacemaker path of a store path; ``ValueError`` for a path the layout does not have."""
    parts = _parts(path)
    if len(parts) == 2 and parts[0] == SUPERVISORS:
        return f"/{SUPERVISORS}/{parts[1]}"
    if len(parts) == 3 and parts[0] == WORKERS:
        return f"/{SUPERVISORS}/{parts[2]}/{WORKERS}/{parts[1]}"
    raise ValueError(
        f"the pacemaker state store holds /supervisors/<id> and /workers/<pipeline>/<id>, "
        f"not {path!r}"
    )


@functools.lru_cache(maxsize=MAPPED_PATHS_CACHED)
def from_pacemaker(path: str) -> str | None:
    """The store path of a pacemaker path; None for a node outside the layout. Remembered:
    the leader maps the same paths every round."""
    parts = tuple(path.strip("/").split("/"))
    if len(parts) == 2 and parts[0] == SUPERVISORS:
        return f"/{SUPERVISORS}/{parts[1]}"
    if len(parts) == 4 and parts[0] == SUPERVISORS and parts[2] == WORKERS:
        return f"/{WORKERS}/{parts[3]}/{parts[1]}"
    return None


class PacemakerStateStore:
    """``ClusterStateStore`` on the pacemakers; see the module docstring."""

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

    def set(self, path: str, data: bytes) -> None:
        self.set_many({path: data})

    def set_many(self, entries: Mapping[str, bytes]) -> None:
        """One ``send_pulses`` to every live server, stamped with this host's wall clock
        (servers merge by it; the leader only compares a heartbeat with its last one)."""
        now = self._wall()
        pulses = [(to_pacemaker(path), data, now) for path, data in entries.items()]
        with self._call(self._scope):
            self._pool.send_pulses(pulses)

    def get(self, path: str) -> bytes | None:
        target = to_pacemaker(path)
        with self._call(target):
            pulse = self._pool.get_pulse(target).value
        return pulse.data if pulse is not None else None

    def read_tree(self, path: str) -> TreeRead:
        """Every value below ``path``, from one read of the whole layout; incomplete when
        every server that answered is warming up."""
        base = "/" if check_path(path) == "/" else path + "/"
        with self._call(self._scope):
            read = self._pool.get_all_pulses_for_path(self._scope)
        data = {}
        for where, pulse in read.value.items():
            mapped = from_pacemaker(where)
            if mapped is not None and mapped.startswith(base):
                data[mapped[len(base) :]] = pulse.data
        return TreeRead(data, complete=not read.warming)  # in the pacemaker's path order

    def children(self, path: str) -> list[str]:
        names = {rel.split("/", 1)[0] for rel in self.read_tree(path).data}
        return sorted(names)

    def children_data(self, path: str) -> dict[str, bytes]:
        return {rel: data for rel, data in self.read_tree(path).data.items() if "/" not in rel}

    def grandchildren_data(self, path: str) -> dict[str, dict[str, bytes]]:
        """Two levels below ``path`` from one read (``HeartbeatBoard.workers`` uses it)."""
        found: dict[str, dict[str, bytes]] = {}
        for rel, data in self.read_tree(path).data.items():
            parts = rel.split("/")
            if len(parts) == 2:
                found.setdefault(parts[0], {})[parts[1]] = data
        return found

    def delete(self, path: str) -> None:
        """Remove ``path`` and everything below it from every live server."""
        parts = _parts(path)
        if not parts:
            raise ValueError("cannot delete the state store's root '/'; delete below it")
        if _is_leaf(parts):
            leaves = [path]
        else:
            leaves = [f"{path}/{rel}" for rel in self.read_tree(path).data]
        for leaf in leaves:
            target = to_pacemaker(leaf)
            with self._call(target):
                if leaf.startswith(f"/{WORKERS}/"):
                    self._pool.delete_path(target)
                else:  # a supervisor's own pulse; its workers' are deleted by their paths
                    self._pool.delete_pulse_id(target)

    def close(self) -> None:
        """Close the pool: its connections and its event loop's thread."""
        self._pool.close()

    @contextmanager
    def _call(self, path: str) -> Iterator[None]:
        try:
            yield
        except PacemakerUnavailableError as exc:
            raise StateStoreUnavailableError(STORE_NAME, path, str(exc)) from None


def _is_leaf(parts: tuple[str, ...]) -> bool:
    return (len(parts) == 2 and parts[0] == SUPERVISORS) or (
        len(parts) == 3 and parts[0] == WORKERS
    )


def _parts(path: str) -> tuple[str, ...]:
    checked = check_path(path)
    return () if checked == "/" else tuple(checked[1:].split("/"))
