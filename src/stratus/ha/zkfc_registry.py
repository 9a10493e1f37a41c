"""Where each zkfc's endpoint is found: an ephemeral znode per managed service.

``groups/<group>/zkfcs/<service host:port>`` holds the ``host:port`` of the zkfc that manages
that service, beside the breadcrumb and the lock, which name services: so whoever knows a
service (an operator's ``haadmin -failover FROM TO``, a target zkfc that must ask the others
to cede) finds its zkfc. The node is re-created after a session expiry (``EphemeralNodes``)
and goes when the zkfc stops or its session ends::

    registry = ZkfcRegistry(session, GroupPaths(root, "nimbus"))
    registry.register("n1.example:6627", "n1.example:8019")
    registry.endpoint("n2.example:6627")      # "n2.example:8019", or None
    registry.all()                             # {service: endpoint} of every running zkfc
"""

from __future__ import annotations

from kazoo.exceptions import NoNodeError

from stratus.zk.ephemeral import EphemeralNodes
from stratus.zk.paths import GroupPaths
from stratus.zk.session import ZkSession


class ZkfcRegistry:
    """The zkfcs of one election group, by the service each manages; see the module doc."""

    def __init__(self, session: ZkSession, paths: GroupPaths) -> None:
        self._session = session
        self._paths = paths
        self._nodes: EphemeralNodes | None = None

    def register(self, service: str, endpoint: str) -> None:
        """Keep ``service``'s entry naming ``endpoint`` while this zkfc runs."""
        if self._nodes is None:
            self._nodes = EphemeralNodes(self._session.client, name=f"zkfc-endpoint {service}")
            self._nodes.start()
        self._nodes.add(self._paths.zkfc(service), endpoint.encode())

    def close(self) -> None:
        if self._nodes is not None:
            self._nodes.close()

    def endpoint(self, service: str) -> str | None:
        """The endpoint of the zkfc that manages ``service``, None if none runs."""
        client = self._session.client
        try:
            data: bytes
            data, _ = self._session.call(
                f"read the zkfc of {service}", client.get, self._paths.zkfc(service)
            )
        except NoNodeError:
            return None
        return data.decode()

    def all(self) -> dict[str, str]:
        """Every running zkfc of the group: {service: endpoint}."""
        client = self._session.client
        try:
            names = self._session.call("list the zkfcs", client.get_children, self._paths.zkfcs)
        except NoNodeError:
            return {}
        found: dict[str, str] = {}
        for name in sorted(names):
            endpoint = self.endpoint(name)
            if endpoint is not None:
                found[name] = endpoint
        return found
