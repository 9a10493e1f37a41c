"""The leader lock of a nimbus under a failover controller: held only while it is granted.

In ``nimbus.ha.mode: zkfc`` the nimbus never campaigns; its zkfc does, in the nimbus group's
election, and hands it the term it won (``transition-to-active``). This lock is the
``LeaderLock`` the leadership controller sees in that mode: ``join`` and ``leave`` only say
whether the nimbus is willing to lead (nothing is written to ZooKeeper), and a term counts
as held only while it is the one granted and not taken back::

    lock = GrantedLock()
    lock.join()                      # the controller: this nimbus may lead
    lock.grant(term)                 # the HA service: its zkfc won ``term.epoch``
    lock.holds(term)                 # True until revoke() or leave()
    lock.revoke()                    # transition-to-standby: the term stops holding at once
"""

from __future__ import annotations

import threading

from stratus.coordination.leadership import Leadership


class GrantedLock:
    """A ``LeaderLock`` whose term is granted from outside; see the module docstring."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._joined = False
        self._granted: Leadership | None = None

    # ------------------------------------------------------------------ the controller's side

    def join(self) -> None:
        with self._mutex:
            self._joined = True

    def leave(self) -> None:
        """The nimbus will not lead (stopping, or code missing): a granted term ends now."""
        with self._mutex:
            self._joined = False
            self._granted = None

    def in_queue(self) -> bool:
        with self._mutex:
            return self._joined

    # ------------------------------------------------------------------ the HA service's side

    def grant(self, term: Leadership) -> None:
        """``term`` is this nimbus's to act under, replacing any earlier one."""
        with self._mutex:
            self._granted = term

    def revoke(self) -> Leadership | None:
        """Take the granted term back (it stops holding at once); the term, if there was one."""
        with self._mutex:
            term, self._granted = self._granted, None
            return term

    def holds(self, term: Leadership) -> bool:
        """Whether ``term`` is the one granted and not taken back (a term's ``holds`` hook)."""
        return self._granted is term

    @property
    def granted(self) -> Leadership | None:
        return self._granted
