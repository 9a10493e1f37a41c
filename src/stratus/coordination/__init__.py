"""The election library: leader elections by group over ZooKeeper, with fencing epochs.

Recipes over a ZooKeeper session (``stratus.zk.session``): ``Coordinator(session)`` in a
process that owns one, ``Coordinator.standalone(hosts)`` to get both at once. Usable on its
own; see ``docs/coordination.md``::

    from stratus.coordination import Coordinator

    with Coordinator.standalone("127.0.0.1:2181", session_timeout=10) as coord:
        leadership = coord.nominate("reports", "worker-1")
        with leadership.transaction() as tx:
            tx.set_data("/reports/owner", b"worker-1")
"""

from stratus.coordination.active_standby import (
    ActiveStandbyCallbacks,
    ActiveStandbyElector,
    ElectorState,
)
from stratus.coordination.coordinator import Coordinator
from stratus.coordination.errors import (
    CommitOutcomeUnknownError,
    CoordinationError,
    ElectionTimeoutError,
    LeadershipLostError,
    NoLeaderError,
    TransactionFailedError,
    ZooKeeperUnavailableError,
)
from stratus.coordination.leader_elector import LeaderElector
from stratus.coordination.leadership import FencedTransaction, Leadership
from stratus.coordination.records import (
    CoordinationEvent,
    ErrorKind,
    FencedWrite,
    Leader,
    LeaderChange,
    RevokeReason,
)

__all__ = [
    "ActiveStandbyCallbacks",
    "ActiveStandbyElector",
    "CommitOutcomeUnknownError",
    "CoordinationError",
    "CoordinationEvent",
    "Coordinator",
    "ElectionTimeoutError",
    "ElectorState",
    "ErrorKind",
    "FencedTransaction",
    "FencedWrite",
    "Leader",
    "LeaderChange",
    "LeaderElector",
    "Leadership",
    "LeadershipLostError",
    "NoLeaderError",
    "RevokeReason",
    "TransactionFailedError",
    "ZooKeeperUnavailableError",
]
