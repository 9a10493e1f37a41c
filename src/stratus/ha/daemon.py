"""``stratus zkfc``'s daemon: a ZooKeeper session, an elector, a health monitor, a controller.

It wires the parts of the failover controller for one managed service and owns their life::

    zkfc = Zkfc(settings, ZkSession(zk_settings(conf)), client_auth(conf))
    zkfc.start()                # checks the service; joins its election once it is healthy
    zkfc.failure                # set when it must exit (the health monitor or elector failed)
    zkfc.stop()                 # quits the election (fencing needed: the service may be active)

The elector's member id and breadcrumb are the service's advertised address (its status's
``address``, else the target), so whoever wins next knows whom to fence.

Beside those: a session watch that has the controller stand the service down when the
session is lost (``session_watch``, ``self_fence``), the preferred-node rules
(``preference``), and, with ``--supervise``, the service's process as a child
(``supervision``: the health monitor hears of the child's exit at once, and a supervised
nimbus's controller kills its active child when it stops answering); and its own endpoint
(``zkfc_endpoint``: cede-active, graceful-failover), registered under
``groups/<group>/zkfcs/<service>`` (``zkfc_registry``) so that an operator and the other
zkfcs find it.

``auth`` is the identity it presents to the other nodes (their services when it fences
them, their zkfcs when it asks them to cede); ``service_auth`` the one it presents to its
own service (a supervised nimbus's controller: the token made for its child), by default
``auth``.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack

from stratus.coordination.active_standby import ActiveStandbyCallbacks, ActiveStandbyElector
from stratus.coordination.coordinator import Coordinator
from stratus.ha.errors import ZkfcFatalError
from stratus.ha.failover_controller import FailoverController
from stratus.ha.fencing import Fencer, FencingContext, MethodSpec, StandbyAsker
from stratus.ha.graceful_failover import GracefulFailover
from stratus.ha.health_monitor import HealthMonitor, HealthState
from stratus.ha.metrics import ZkfcMetrics
from stratus.ha.preference import Preference
from stratus.ha.protocol import HAServiceClient, HAState
from stratus.ha.self_fence import self_fencer
from stratus.ha.session_watch import SessionWatch
from stratus.ha.settings import ZkfcSettings
from stratus.ha.supervision import Supervision
from stratus.ha.zkfc_endpoint import EndpointSecurity, ZkfcEndpoint
from stratus.ha.zkfc_protocol import CedeResult, FailoverResult, ZkfcClient
from stratus.ha.zkfc_registry import ZkfcRegistry
from stratus.security.client_auth import ClientAuth
from stratus.zk.paths import GroupPaths
from stratus.zk.session import ZkSession

log = logging.getLogger(__name__)


class Zkfc:
    """One failover controller beside one service; see the module docstring."""

    def __init__(
        self,
        settings: ZkfcSettings,
        session: ZkSession,
        auth: ClientAuth,
        security: EndpointSecurity | None = None,
        *,
        service_auth: ClientAuth | None = None,
    ) -> None:
        self.settings = settings
        self._security = security or EndpointSecurity()
        self.session = session
        self._auth = auth
        self._service_auth = service_auth or auth
        self.coordinator = Coordinator(session)
        self.service = self._own_service()
        context = FencingContext(
            timeout=settings.fencing_timeout,
            graceful_timeout=settings.graceful_timeout,
            connect=self._standby_asker,
        )
        self.metrics = ZkfcMetrics(
            health=lambda: self.controller.health,
            active=self._made_active,
            zookeeper_connected=lambda: session.connected,
            fencing_methods=settings.fencing_methods,
        )
        self.fencer = Fencer(settings.fencing_methods, context, self.metrics.fence_attempt("other"))
        self.self_fencer = self_fencer(
            settings.fencing_methods, context, self.metrics.fence_attempt("self")
        )
        self.graceful_fencer = Fencer(
            [MethodSpec("graceful")], context, self.metrics.fence_attempt("self")
        )
        self.supervision = (
            Supervision(settings.supervise, on_exit=self._service_exited)
            if settings.supervise
            else None
        )
        self.elector: ActiveStandbyElector | None = None
        self.preference = Preference(
            session,
            GroupPaths(session.root, settings.group),
            settings.target.address,
            settings.preference,
            on_preferred_back=self._preferred_back,
        )
        self.controller = FailoverController(
            self.service,
            self.fencer.fence,
            settings.controller,
            make_elector=self._make_elector,
            stand_down=self._stand_down,
            held_epoch=self._held_epoch,
            join_policy=self.preference,
            kill_unresponsive=(
                self.supervision.fence
                if self.supervision is not None and settings.kill_unresponsive
                else None
            ),
        )
        self.registry = ZkfcRegistry(session, GroupPaths(session.root, settings.group))
        self.graceful = GracefulFailover(
            self.controller,
            self._other_zkfcs,
            self._ask_to_cede,
            active=lambda: self.coordinator.get_leader(settings.group),
            timeout=settings.failover_timeout,
        )
        self.endpoint: ZkfcEndpoint | None = None
        # the exit code of a supervised service that failed before it ever answered (its
        # configuration, a busy port): restarting it would fail the same way
        self.start_failure: int | None = None
        self.session_watch = SessionWatch(session, self.controller.session_expired)
        self.monitor = HealthMonitor(
            self._own_service,
            self.controller,
            settings.health,
        )

    @property
    def failure(self) -> ZkfcFatalError | None:
        return self.controller.failure

    def start(self) -> None:
        """Start every part; the supervised service last, once ZooKeeper answered and the
        endpoint listens (a zkfc that cannot start leaves no child behind)."""
        self.session_watch.start()
        self.session.start()
        self.coordinator.start()
        self.preference.start()
        self.controller.start()
        self.monitor.start()
        self.endpoint = ZkfcEndpoint(
            (self.settings.target.host, self.settings.port),
            self,
            self._security,
            metrics=self.metrics,
            ready=self.readiness,
        )
        self.endpoint.start()
        self.registry.register(self.settings.target.address, self.endpoint.address)
        if self.supervision is not None:
            self.supervision.start()
        log.info(
            "event=zkfc_started target=%s group=%s fencing=%s endpoint=%s",
            self.settings.target.address,
            self.settings.group,
            ", ".join(str(spec) for spec in self.settings.fencing_methods),
            self.endpoint.address,
        )

    def stop(self) -> None:
        """Leave the election, then stop the supervised service: every part is closed even
        when one before it fails (logged; ``ExitStack`` calls every close, then raises the
        last failure)."""
        parts = [
            *([self.endpoint.stop] if self.endpoint is not None else []),
            self.registry.close,
            self.monitor.stop,
            self.session_watch.stop,
            self.preference.stop,
            self.controller.stop,
            self.coordinator.close,
            self.session.close,
            self.service.close,
        ]
        if self.supervision is not None and self.supervision.started:
            parts.append(self.supervision.stop)
        try:
            with ExitStack() as closing:
                for close in reversed(parts):  # the stack closes newest first: in parts' order
                    closing.callback(close)
        except Exception:
            log.exception("event=close_failed target=%s", self.settings.target.address)

    def readiness(self) -> dict[str, bool]:
        """Ready: connected to ZooKeeper and its service healthy (so it can take part in
        the election); whether the service is active does not matter."""
        return {
            "zookeeper": self.session.connected,
            "service_healthy": self.controller.health is HealthState.SERVICE_HEALTHY,
        }

    def _made_active(self) -> bool:
        return self.controller.given is HAState.ACTIVE

    def _client(self, address: str, timeout: float) -> HAServiceClient:
        return HAServiceClient(address, self._auth, timeout=timeout)

    def _own_service(self) -> HAServiceClient:
        target = self.settings.target.address
        return HAServiceClient(target, self._service_auth, timeout=self.settings.rpc_timeout)

    def _service_exited(self, code: int | None) -> None:
        log.warning("event=service_exited service=%s code=%s", self.settings.target.address, code)
        if self.monitor.last_status is None and (code is None or code > 0):
            self.start_failure = 1 if code is None else code  # it never answered: it cannot start
        self.monitor.service_gone()

    def _standby_asker(self, address: str, timeout: float) -> StandbyAsker:
        """A graceful fence's client: its own service (self-fencing) as ``service_auth``."""
        own = address == self.settings.target.address
        return HAServiceClient(address, self._service_auth if own else self._auth, timeout=timeout)

    def _make_elector(self, callbacks: ActiveStandbyCallbacks, member: str) -> ActiveStandbyElector:
        self.elector = ActiveStandbyElector(
            self.coordinator,
            self.settings.group,
            callbacks,
            member_id=member,
            rejoin_delay=self.settings.controller.rejoin_delay,
        )
        return self.elector

    # ----------------------------------------------------------------- the endpoint's calls

    def cede_active(self, millis: int) -> CedeResult:
        was_active = self.controller.cede_active(millis / 1000, self.settings.failover_timeout)
        return CedeResult(service=self.settings.target.address, was_active=was_active)

    def graceful_failover(self) -> FailoverResult:
        return self.graceful.run()

    def _other_zkfcs(self) -> dict[str, str]:
        found = self.registry.all()
        found.pop(self.settings.target.address, None)
        return found

    def _ask_to_cede(self, endpoint: str, millis: int) -> None:
        with ZkfcClient(endpoint, self._auth, timeout=self.settings.failover_timeout) as zkfc:
            zkfc.cede_active(millis)

    def _preferred_back(self) -> None:
        self.controller.cede()

    def _held_epoch(self) -> int | None:
        term = self.coordinator.leadership(self.settings.group)
        return term.epoch if term is not None else None

    def _stand_down(self) -> bool:
        """Self-fencing: our own service, by graceful transition then the stopping methods.

        A supervised service is killed by its pid (its whole process group) instead.
        """
        if self.supervision is None:
            return self.self_fencer.fence(self.settings.target)
        return self.graceful_fencer.fence(self.settings.target) or self.supervision.fence()
