"""``stratus zkfc``'s daemon: a ZooKeeper session, an elector, a health monitor, a controller.

It wires the parts of the failover controller for one managed service and owns their life::

    zkfc = Zkfc(settings, ZkSession(zk_settings(conf)), client_auth(conf))
    zkfc.start()                # checks the service; joins its election once it is healthy
    zkfc.failure                # set when it must exit (the health monitor or elector failed)
    zkfc.stop()                 # quits the election (fencing needed: the service may be active)

The elector's member id and breadcrumb are the service's advertised address (its status's
``address``, else the target), so whoever wins next knows whom to fence.
"""

from __future__ import annotations

import logging

from stratus.coordination.active_standby import ActiveStandbyCallbacks, ActiveStandbyElector
from stratus.coordination.coordinator import Coordinator
from stratus.ha.errors import ZkfcFatalError
from stratus.ha.failover_controller import FailoverController
from stratus.ha.fencing import Fencer, FencingContext, StandbyAsker
from stratus.ha.health_monitor import HealthMonitor
from stratus.ha.protocol import HAServiceClient
from stratus.ha.settings import ZkfcSettings
from stratus.security.client_auth import ClientAuth
from stratus.zk.session import ZkSession

log = logging.getLogger(__name__)


class Zkfc:
    """One failover controller beside one service; see the module docstring."""

    def __init__(self, settings: ZkfcSettings, session: ZkSession, auth: ClientAuth) -> None:
        self.settings = settings
        self.session = session
        self._auth = auth
        self.coordinator = Coordinator(session)
        self.service = self._client(settings.target.address, settings.rpc_timeout)
        self.fencer = Fencer(
            settings.fencing_methods,
            FencingContext(
                timeout=settings.fencing_timeout,
                graceful_timeout=settings.graceful_timeout,
                connect=self._standby_asker,
            ),
        )
        self.elector: ActiveStandbyElector | None = None
        self.controller = FailoverController(
            self.service,
            self.fencer.fence,
            settings.controller,
            make_elector=self._make_elector,
        )
        self.monitor = HealthMonitor(
            lambda: self._client(settings.target.address, settings.rpc_timeout),
            self.controller,
            settings.health,
        )

    @property
    def failure(self) -> ZkfcFatalError | None:
        return self.controller.failure

    def start(self) -> None:
        self.session.start()
        self.coordinator.start()
        self.controller.start()
        self.monitor.start()
        log.info(
            "event=zkfc_started target=%s group=%s fencing=%s",
            self.settings.target.address,
            self.settings.group,
            ", ".join(str(spec) for spec in self.settings.fencing_methods),
        )

    def stop(self) -> None:
        self.monitor.stop()
        self.controller.stop()
        self.coordinator.close()
        self.session.close()
        self.service.close()

    def _client(self, address: str, timeout: float) -> HAServiceClient:
        return HAServiceClient(address, self._auth, timeout=timeout)

    def _standby_asker(self, address: str, timeout: float) -> StandbyAsker:
        return self._client(address, timeout)

    def _make_elector(self, callbacks: ActiveStandbyCallbacks, member: str) -> ActiveStandbyElector:
        self.elector = ActiveStandbyElector(
            self.coordinator,
            self.settings.group,
            callbacks,
            member_id=member,
            rejoin_delay=self.settings.controller.rejoin_delay,
        )
        return self.elector
