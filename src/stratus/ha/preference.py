"""A preferred node and failback: the zkfcs of a group agree, through ZooKeeper, on who leads.

The preferred node's zkfc (``ha.zkfc.preferred``) holds the ephemeral ``groups/<g>/preferred``
znode (its service's address) while it campaigns, that is while its service is healthy. The
others read it:

- a non-preferred zkfc about to join waits ``ha.zkfc.nonpreferred.join.delay.secs`` first if
  the preferred node campaigns, so that the preferred one wins a start-up race;
- when the znode appears (the preferred node came back healthy) every non-preferred zkfc cedes:
  its service goes standby, it quits the election deleting its breadcrumb (nobody needs to
  fence it), and rejoins after that delay, behind the preferred node. A failback has no fence::

    preference = Preference(session, GroupPaths(root, "nimbus"), "n1:6627", settings,
                            on_preferred_back=controller.cede)
    preference.start()          # watches the znode (non-preferred) or keeps it (preferred)
    preference.join_delay()     # seconds to wait before joining now (0: join)
    preference.joined(); preference.quit()   # the controller's election, as it changes

Callbacks run on kazoo's thread: ``on_preferred_back`` must only post work elsewhere.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from stratus.zk.paths import GroupPaths
from stratus.zk.session import SessionChange, ZkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreferenceSettings:
    """``ha.zkfc.preferred`` and ``ha.zkfc.nonpreferred.join.delay.secs``."""

    preferred: bool = False
    nonpreferred_join_delay: float = 5.0


class Preference:
    """The preferred node's znode, kept or watched; see the module docstring."""

    def __init__(
        self,
        session: ZkSession,
        paths: GroupPaths,
        member: str,
        settings: PreferenceSettings,
        *,
        on_preferred_back: Callable[[], None],
    ) -> None:
        self._session = session
        self._path = paths.preferred
        self._member = member
        self.settings = settings
        self._on_preferred_back = on_preferred_back
        self._lock = threading.Lock()
        self._campaigning = False  # preferred: the znode should exist
        self._present: bool | None = None  # non-preferred: the znode's last known presence

    def start(self) -> None:
        if self.settings.preferred:
            self._session.add_listener(self._session_changed)
        else:
            self._session.client.DataWatch(self._path, self._watched)

    def stop(self) -> None:
        self._session.remove_listener(self._session_changed)

    # ----------------------------------------------------------------- the controller's hooks

    def join_delay(self) -> float:
        """How long to wait before joining now: the delay if a preferred node campaigns."""
        if self.settings.preferred:
            return 0.0
        try:
            present = self._session.client.exists(self._path) is not None
        except KazooException:
            present = bool(self._present)
        return self.settings.nonpreferred_join_delay if present else 0.0

    def joined(self) -> None:
        if self.settings.preferred:
            with self._lock:
                self._campaigning = True
            self._announce()

    def quit(self) -> None:
        if not self.settings.preferred:
            return
        with self._lock:
            self._campaigning = False
        try:
            data, stat = self._session.client.get(self._path)
            if data == self._member.encode():
                self._session.client.delete(self._path, version=stat.version)
        except NoNodeError:
            pass
        except KazooException as exc:  # ephemeral: it goes with the session anyway
            log.warning("event=preferred_withdraw_failed member=%s error=%s", self._member, exc)

    # ----------------------------------------------------------------- preferred side

    def _announce(self) -> None:
        try:
            self._session.client.create(
                self._path, self._member.encode(), ephemeral=True, makepath=True
            )
            log.info("event=preferred_announced member=%s", self._member)
        except NodeExistsError:
            pass  # ours already (or an operator named two preferred nodes: the first wins)
        except KazooException as exc:
            log.warning("event=preferred_announce_failed member=%s error=%s", self._member, exc)

    def _session_changed(self, change: SessionChange) -> None:
        """A new session lost the ephemeral znode: announce again, off kazoo's thread."""
        with self._lock:
            campaigning = self._campaigning
        if change.renewed and campaigning:
            threading.Thread(target=self._announce, name="preferred", daemon=True).start()

    # ----------------------------------------------------------------- non-preferred side

    def _watched(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        present = stat is not None
        with self._lock:
            appeared = self._present is False and present
            self._present = present
        if appeared:
            log.info(
                "event=preferred_back member=%s preferred=%s action=cede",
                self._member,
                (data or b"").decode(errors="replace"),
            )
            self._on_preferred_back()
