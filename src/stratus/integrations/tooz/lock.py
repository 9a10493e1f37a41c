"""tooz's distributed lock on the backend's ZooKeeper session: kazoo's lock recipe.

Exclusive across threads, processes and hosts (a second ``acquire`` of the same name, even
through the same coordinator, waits or returns False). Shared locks are not offered, as in
tooz's ZooKeeper driver. The lock ends with the session: ``is_still_owner`` says whether
ZooKeeper still holds it for us.
"""

from __future__ import annotations

import contextlib

import tooz
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.lock import Lock as KazooLock
from tooz import locking, utils


class StratusLock(locking.Lock):
    """One named lock of one coordinator; see the module docstring."""

    def __init__(self, name: bytes, client: KazooClient, path: str, identifier: str) -> None:
        super().__init__(name)
        self._client = client
        self._lock = KazooLock(client, path, identifier)

    def acquire(
        self,
        blocking: bool | float = True,
        shared: bool = False,
        timeout: float | None = None,
    ) -> bool:
        if shared:
            raise tooz.NotImplemented("the stratus backend offers exclusive locks only")
        blocking, timeout = utils.convert_blocking(blocking, timeout)
        try:
            return bool(self._lock.acquire(blocking=blocking, timeout=timeout))
        except KazooException as exc:
            raise tooz.ToozError(f"could not acquire lock {self.name!r}: {exc!r}") from exc

    def release(self) -> bool:
        if not self.acquired:
            return False
        try:
            return bool(self._lock.release())
        except KazooException as exc:
            raise tooz.ToozError(f"could not release lock {self.name!r}: {exc!r}") from exc

    def is_still_owner(self) -> bool:
        """True while ZooKeeper still holds this lock's node for us."""
        if not self.acquired or self._lock.node is None:
            return False
        with contextlib.suppress(NoNodeError, ConnectionLoss, KazooTimeoutError):
            data, _ = self._client.get(f"{self._lock.path}/{self._lock.node}")
            return bool(data == self._lock.data)
        return False

    @property
    def acquired(self) -> bool:
        return bool(self._lock.is_acquired)
