"""The pulse store: a tree of ZooKeeper-like paths, each node holding at most one pulse.

Paths are split on ``/`` and walked component by component: nothing is a pattern, so
``/a.*`` names exactly the node ``a.*``. Listing or deleting a subtree visits that subtree
only. A pulse lives ``ttl_secs`` after its last write, then it is evicted (with the empty
nodes above it that no ``create_path`` made); eviction is in write order (all pulses share
one TTL), so each call costs only what it evicts. Entries (nodes) and bytes (pulse data and
node names) are bounded; past either bound a write raises ``StoreFullError``::

    store = PulseStore(StoreLimits(max_entries=1000, max_bytes=1 << 20, ttl_secs=30))
    store.send_pulse("/supervisors/s1", b"...", time=1700000000.0)
    store.get_all_pulses_for_path("/supervisors")   # {"/supervisors/s1": Pulse(...)}
    store.evict_expired()                            # pulses not written for 30 s
"""

from __future__ import annotations

import time as _time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from stratus.pacemaker.errors import PathError, StoreFullError

MAX_PATH_CHARS = 1024
MAX_DEPTH = 32


@dataclass(frozen=True)
class StoreLimits:
    """How much the store holds, and how long a pulse lives after its last write."""

    max_entries: int
    max_bytes: int
    ttl_secs: float


@dataclass(frozen=True)
class Pulse:
    """A pulse: its bytes and the writer's wall-clock time (readers merge servers by it)."""

    data: bytes
    time: float


@dataclass(eq=False)
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    pulse: Pulse | None = None
    created: bool = False  # by create_path: kept when it has no pulse and no child


def split_path(path: str) -> tuple[str, ...]:
    """The components of an absolute path (``/`` is the root: no component)."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise PathError(f"the path {path!r:.80} is not absolute: it must start with /")
    if len(path) > MAX_PATH_CHARS:
        raise PathError(f"a path of {len(path)} characters is above {MAX_PATH_CHARS}")
    if path == "/":
        return ()
    parts = tuple(path[1:].split("/"))
    if "" in parts or "\0" in path:
        raise PathError(f"the path {path!r:.80} has an empty component or a NUL")
    if "." in parts or ".." in parts:  # as ZooKeeper: a path names one node, never a walk
        raise PathError(f"the path {path!r:.80} has a . or .. component")
    if len(parts) > MAX_DEPTH:
        raise PathError(f"a path of {len(parts)} components is deeper than {MAX_DEPTH}")
    return parts


def join_path(parts: tuple[str, ...]) -> str:
    """The path of ``parts``."""
    return "/" + "/".join(parts)


class PulseStore:
    """The tree, its bounds and its TTL; one owner (the server's event loop) calls it."""

    def __init__(
        self, limits: StoreLimits, *, clock: Callable[[], float] = _time.monotonic
    ) -> None:
        self.limits = limits
        self._clock = clock
        self._root = _Node(created=True)
        self._expiry: OrderedDict[tuple[str, ...], float] = OrderedDict()  # write order
        self.entries = 0
        self.bytes = 0
        self.evicted = 0

    # --- writes -------------------------------------------------------------------------
    def create_path(self, path: str) -> None:
        """Make the node at ``path`` and its parents; it stays until deleted."""
        self._make(split_path(path)).created = True

    def send_pulse(self, path: str, data: bytes, time: float) -> None:
        """Set the pulse at ``path``, making nodes on the way; StoreFullError past a bound."""
        parts = split_path(path)
        if not parts:
            raise PathError("the root holds no pulse: name a path below /")
        node = self._find(parts)
        old = node.pulse if node is not None else None
        grow = len(data) - (len(old.data) if old else 0)
        if grow > 0 and self.bytes + grow > self.limits.max_bytes:
            raise StoreFullError(
                f"the store holds {self.bytes} bytes; {grow} more would pass pacemaker.max.bytes "
                f"= {self.limits.max_bytes}: add pacemaker servers or raise the bound"
            )
        node = self._make(parts)
        node.pulse = Pulse(bytes(data), float(time))
        self.bytes += grow
        self._expiry[parts] = self._clock() + self.limits.ttl_secs
        self._expiry.move_to_end(parts)

    def delete_path(self, path: str) -> int:
        """Remove the node at ``path`` and its whole subtree; the pulses removed."""
        parts = split_path(path)
        if not parts:
            removed = sum(1 for _ in self._walk(self._root, ()) if _[1].pulse)
            for key, node in list(self._walk(self._root, ())):
                self._forget(key, node)
            self._root = _Node(created=True)
            return removed
        parent = self._find(parts[:-1])
        if parent is None or parts[-1] not in parent.children:
            return 0
        node = parent.children.pop(parts[-1])
        removed = 0
        for key, child in self._walk(node, parts):
            removed += child.pulse is not None
            self._forget(key, child)
        self._prune(parts[:-1])
        return removed

    def delete_pulse_id(self, path: str) -> bool:
        """Remove the pulse at ``path`` (not its children); whether there was one."""
        parts = split_path(path)
        node = self._find(parts)
        if node is None or node.pulse is None:
            return False
        self._drop_pulse(parts, node)
        self._prune(parts)
        return True

    def evict_expired(self) -> int:
        """Evict every pulse not written for ``ttl_secs``; how many were evicted."""
        now = self._clock()
        count = 0
        while self._expiry:
            parts, expires = next(iter(self._expiry.items()))
            if expires > now:
                break
            node = self._find(parts)
            if node is None or node.pulse is None:  # defensive: deletes forget their keys
                del self._expiry[parts]
                continue
            self._drop_pulse(parts, node)
            self._prune(parts)
            count += 1
        self.evicted += count
        return count

    # --- reads --------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        """Whether a node is at ``path``."""
        return self._find(split_path(path)) is not None

    def get_pulse(self, path: str) -> Pulse | None:
        """The pulse at ``path``, or None."""
        node = self._find(split_path(path))
        return node.pulse if node is not None else None

    def get_all_nodes_for_path(self, path: str) -> list[str]:
        """The names of the children of ``path``, sorted (empty if there is no such node)."""
        node = self._find(split_path(path))
        return sorted(node.children) if node is not None else []

    def get_all_pulses_for_path(self, path: str) -> dict[str, Pulse]:
        """Every pulse in the subtree of ``path`` (itself included), by full path."""
        parts = split_path(path)
        node = self._find(parts)
        if node is None:
            return {}
        return {
            join_path(key): child.pulse
            for key, child in self._walk(node, parts)
            if child.pulse is not None
        }

    def iter_pulses_after(self, path: str, after: str) -> Iterator[tuple[str, Pulse]]:
        """The pulses of the subtree of ``path`` in path order (component by component),
        only those after the path ``after`` (``""``: from the first). Subtrees wholly before
        ``after`` are skipped, not walked, so a page costs what it holds, not the whole tree.
        Lazy: consume it before the store changes."""
        parts = split_path(path)
        node = self._find(parts)
        bound = split_path(after) if after else None
        if node is None:
            return
        # Depth first, children in name order: nodes come in path order, so once one is past
        # the bound every later one is, and the comparisons (on components) stop there.
        stack: list[tuple[str, tuple[str, ...], _Node]] = [(join_path(parts), parts, node)]
        while stack:
            key, key_parts, current = stack.pop()
            if bound is not None and key_parts > bound:
                bound = None
            if current.pulse is not None and bound is None:
                yield key, current.pulse
            prefix = "" if key == "/" else key
            for name in sorted(current.children, reverse=True):
                child_parts = (*key_parts, name) if bound is not None else ()
                if (
                    bound is not None
                    and child_parts < bound
                    and bound[: len(child_parts)] != child_parts
                ):
                    continue  # everything below this child sorts before the bound
                stack.append((f"{prefix}/{name}", child_parts, current.children[name]))

    # --- the tree -----------------------------------------------------------------------
    def _find(self, parts: tuple[str, ...]) -> _Node | None:
        node = self._root
        for part in parts:
            found = node.children.get(part)
            if found is None:
                return None
            node = found
        return node

    def _make(self, parts: tuple[str, ...]) -> _Node:
        missing = []
        node = self._root
        for depth, part in enumerate(parts):
            found = node.children.get(part)
            if found is None:
                missing = list(parts[depth:])
                break
            node = found
        new_bytes = sum(len(part.encode()) for part in missing)
        if self.entries + len(missing) > self.limits.max_entries:
            raise StoreFullError(
                f"the store holds {self.entries} entries; {len(missing)} more would pass "
                f"pacemaker.max.entries = {self.limits.max_entries}: add pacemaker servers or "
                "raise the bound"
            )
        if new_bytes and self.bytes + new_bytes > self.limits.max_bytes:
            raise StoreFullError(
                f"the store holds {self.bytes} bytes; {new_bytes} more would pass "
                f"pacemaker.max.bytes = {self.limits.max_bytes}"
            )
        for part in missing:
            child = _Node()
            node.children[part] = child
            node = child
        self.entries += len(missing)
        self.bytes += new_bytes
        return node

    def _walk(self, node: _Node, parts: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], _Node]]:
        stack = [(parts, node)]
        while stack:
            key, current = stack.pop()
            yield key, current
            stack.extend(((*key, name), child) for name, child in current.children.items())

    def _drop_pulse(self, parts: tuple[str, ...], node: _Node) -> None:
        assert node.pulse is not None
        self.bytes -= len(node.pulse.data)
        node.pulse = None
        self._expiry.pop(parts, None)

    def _forget(self, parts: tuple[str, ...], node: _Node) -> None:
        """Account for a node already cut from the tree."""
        if node.pulse is not None:
            self._drop_pulse(parts, node)
        if parts:
            self.entries -= 1
            self.bytes -= len(parts[-1].encode())

    def _prune(self, parts: tuple[str, ...]) -> None:
        """Remove the empty nodes that end ``parts``, bottom up, that no create_path made."""
        while parts:
            parent = self._find(parts[:-1])
            node = parent.children.get(parts[-1]) if parent is not None else None
            if parent is None or node is None:
                return
            if node.children or node.pulse is not None or node.created:
                return
            del parent.children[parts[-1]]
            self._forget(parts, node)
            parts = parts[:-1]
