"""After a reconnection to ZooKeeper, whether the scheduling round's silences restart.

With ``blind_after_reconnect`` (supervisors that ride out outages of ZooKeeper) a supervisor
may have kept its workers on a proof that no quorum served; only a change of ZooKeeper's
leader epoch across the reconnection makes such a proof possible, so only then do the
silences restart. One concept kept apart from the round, because it owns its own memory
(the count of connections and the epoch last learned)::

    watch = QuorumWatch(enabled=True, connections=lambda: session.connections,
                        zookeeper_epoch=session.zookeeper_epoch, restart_silences=restart)
    watch.check(term)     # once per round, before the heartbeats are read
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.exceptions import KazooException

from stratus.coordination.leadership import Leadership
from stratus.errors import StratusError

log = logging.getLogger(__name__)


class QuorumWatch:
    """Restarts the silences (``restart_silences``) after a reconnection across which
    ZooKeeper's leader epoch changed; see ``check``."""

    def __init__(
        self,
        *,
        enabled: bool,
        connections: Callable[[], int],
        zookeeper_epoch: Callable[[], int | None],
        restart_silences: Callable[[], None],
    ) -> None:
        self._enabled = enabled  # blind_after_reconnect
        self._connections = connections  # the session's count of connections (ZkSession)
        # ZooKeeper's leader epoch now, None from a standalone server (ZkSession)
        self._zookeeper_epoch = zookeeper_epoch
        self._restart_silences = restart_silences
        self._watched_since = connections()  # the count when the epoch was last learned
        self._quorum_epoch: int | None = None  # ZooKeeper's epoch then (None: standalone)
        self._epoch_learned = False  # once, since the watch began

    def check(self, term: Leadership) -> None:
        """With ``blind_after_reconnect`` (supervisors that ride out outages): once the
        connection to ZooKeeper came back since the last round (whether its term was
        suspended and resumed for it or not: a term granted by a zkfc is not), every silence
        restarts if ZooKeeper's leader epoch changed meanwhile, since a supervisor may have
        kept its workers on a proof that no quorum served.

        A proof needs a moment when no quorum served; a ZooKeeper leader that loses its
        quorum never serves again in its epoch, so service resumes only under a new one.
        The same epoch on both sides of the disconnection (a reconnection to another member
        of the same quorum) means the quorum served throughout, every supervisor that could
        reach it wrote on, and none could prove an outage: the silences run on, and a
        connection that flaps moves on time. A standalone server keeps its epoch across
        restarts, so with one every reconnection restarts the silences; so does an epoch
        that cannot be learned (nothing judged from a blind stretch), asked again next
        round."""
        if not self._enabled:
            return
        count = self._connections()
        if count == self._watched_since and self._epoch_learned:
            return
        try:
            epoch = self._zookeeper_epoch()
        except (StratusError, KazooException) as exc:
            self._restart_silences()
            log.warning(
                "event=heartbeats_watched_again epoch=%d zookeeper_epoch=unknown "
                "action=every_silence_restarts error=%s",
                term.epoch,
                exc,
            )
            return
        previous, learned = self._quorum_epoch, self._epoch_learned
        self._watched_since, self._quorum_epoch, self._epoch_learned = count, epoch, True
        if learned and epoch is not None and epoch == previous:
            log.info(
                "event=heartbeats_watched_again epoch=%d zookeeper_epoch=%d "
                "action=silences_run_on reason=same_zookeeper_leader",
                term.epoch,
                epoch,
            )
            return
        self._restart_silences()
        log.info(
            "event=heartbeats_watched_again epoch=%d zookeeper_epoch=%s previous=%s "
            "action=every_silence_restarts",
            term.epoch,
            "standalone" if epoch is None else epoch,
            ("standalone" if previous is None else previous) if learned else "unknown",
        )
