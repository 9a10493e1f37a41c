"""tooz's distributed lock on the backend's ZooKeeper session: kazoo's read/write lock recipe.

Exclusive (kazoo's ``WriteLock``) or shared (its ``ReadLock``) across threads, processes and
hosts: an exclusive holder excludes everyone, shared holders exclude exclusive ones. A second
exclusive ``acquire`` through the same lock object waits or returns False; a shared one
counts, and the lock is let go at the last ``release``. ``break_`` deletes every holder's and
waiter's node (tooz's out-of-band break); a holder whose node was broken is no longer the
owner (``is_still_owner``), and its ``release`` returns False. The lock ends with the session.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Iterator

import tooz
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.lock import Lock as KazooLock
from kazoo.recipe.lock import ReadLock, WriteLock
from tooz import locking, utils


class StratusLock(locking.Lock):
    """One named lock of one coordinator; see the module docstring."""

    def __init__(self, name: bytes, client: KazooClient, path: str, identifier: str) -> None:
        super().__init__(name)
        self._client = client
        self._path = path
        self._exclusive = WriteLock(client, path, identifier)
        self._shared = ReadLock(client, path, identifier)
        self._shared_holds = 0  # shared acquisitions through this object not yet released

    def acquire(
        self,
        blocking: bool | float = True,
        shared: bool = False,
        timeout: float | None = None,
    ) -> bool:
        blocking, timeout = utils.convert_blocking(blocking, timeout)
        if shared and self._shared_holds:
            self._shared_holds += 1
            return True
        if self.acquired and (shared or not blocking):
            return False  # held the other way, or exclusively already: never waits on itself
        recipe = self._shared if shared else self._exclusive
        with self._errors("acquire"):
            got = bool(recipe.acquire(blocking=blocking, timeout=timeout))
        if got and shared:
            self._shared_holds = 1
        return got

    def release(self) -> bool:
        """Let go (the last of several shared holds lets go of the lock); False if this object
        did not hold it, or if it was broken meanwhile."""
        if self._shared_holds > 1:
            self._shared_holds -= 1
            return True
        held = self._held()
        if held is None:
            return False
        still_owner = self.is_still_owner()
        with self._errors("release"):
            held.release()
        self._shared_holds = 0
        return still_owner

    def break_(self) -> bool:
        """Delete every holder's and waiter's node; True if there was any."""
        with self._errors("break"):
            try:
                names = self._client.get_children(self._path)
            except NoNodeError:
                return False
            for name in names:
                with contextlib.suppress(NoNodeError):
                    self._client.delete(posixpath.join(self._path, name))
        return bool(names)

    def is_still_owner(self) -> bool:
        """True while ZooKeeper still holds this lock's node for us."""
        held = self._held()
        if held is None or held.node is None:
            return False
        with contextlib.suppress(NoNodeError, ConnectionLoss, KazooTimeoutError):
            data, _ = self._client.get(posixpath.join(self._path, held.node))
            return bool(data == held.data)
        return False

    @property
    def acquired(self) -> bool:
        return self._held() is not None

    def _held(self) -> KazooLock | None:
        if self._exclusive.is_acquired:
            return self._exclusive
        if self._shared.is_acquired:
            return self._shared
        return None

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """kazoo's errors as tooz's."""
        try:
            yield
        except KazooException as exc:
            raise tooz.ToozError(f"could not {what} lock {self.name!r}: {exc!r}") from exc
