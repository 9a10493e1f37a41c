"""How a nimbus reaches a supervisor's endpoint: as its own configuration says, never as the
supervisor's registration says.

A registration (``<root>/supervisors/<id>``) is shared state: whoever holds stratus's
ZooKeeper identity can rewrite it, and a pipeline's code can read that identity from its
supervisor's files. So nothing in it decides how credentials are sent. A nimbus speaks
https to every endpoint when its own configuration says the cluster speaks TLS
(``client.tls.ca``, ``client.tls.cert`` or ``nimbus.tls.cert``: ``ClientAuth.tls``), plain
http otherwise; a registration whose ``endpoint_tls`` says the other is refused before any
connection (``UntrustedEndpointError``, logged as ``event=supervisor_endpoint_refused``),
so that no token goes out in clear to a listener the registration names. A loopback
endpoint of a supervisor registered on another host is the endpoint of whatever listens
on this host's loopback, never that supervisor's: the leader does not fence through it::

    url = endpoint_url(supervisor, "/api/v1/logs/etl", client_auth(conf))
    loopback_elsewhere(supervisor)   # True: "127.0.0.1:6629" registered by host 10.0.0.12
"""

from __future__ import annotations

import logging

from stratus.api.errors import UntrustedEndpointError
from stratus.api.records import SupervisorSummary
from stratus.ha.fencing import FenceTarget, is_local_address
from stratus.security.client_auth import ClientAuth
from stratus.security.loopback import is_loopback

log = logging.getLogger(__name__)

TLS_KEYS = "client.tls.ca, client.tls.cert or nimbus.tls.cert"


def endpoint_url(supervisor: SupervisorSummary, path: str, auth: ClientAuth) -> str:
    """The URL of ``path`` on the supervisor's endpoint, its scheme this nimbus's own;
    ``UntrustedEndpointError`` (logged) when the registration says otherwise."""
    assert supervisor.endpoint is not None
    tls = auth.tls is not None
    if supervisor.endpoint_tls == tls:
        return f"{auth.scheme}://{supervisor.endpoint}{path}"
    log.error(
        "event=supervisor_endpoint_refused supervisor=%s endpoint=%s registered=%s "
        "configured=%s action=nothing_sent",
        supervisor.id,
        supervisor.endpoint,
        "https" if supervisor.endpoint_tls else "http",
        auth.scheme,
    )
    if tls:
        raise UntrustedEndpointError(
            f"supervisor {supervisor.id}'s registration says its endpoint {supervisor.endpoint} "
            f"serves plain http, but this nimbus's configuration says the cluster speaks TLS "
            f"({TLS_KEYS} is set): nothing was sent to it. Give the supervisor "
            "nimbus.tls.cert and nimbus.tls.key so that its endpoint serves https, or find "
            "who rewrote its registration in ZooKeeper"
        )
    raise UntrustedEndpointError(
        f"supervisor {supervisor.id}'s registration says its endpoint {supervisor.endpoint} "
        f"serves https, but this nimbus's configuration has no TLS (none of {TLS_KEYS} is "
        "set): nothing was sent to it. Set client.tls.ca on the nimbuses to the CA of the "
        "supervisors' certificates"
    )


def loopback_elsewhere(supervisor: SupervisorSummary) -> bool:
    """Whether the supervisor's endpoint is a loopback address while the supervisor is
    registered on another host than this one (its ``host`` is no address of this machine)."""
    if supervisor.endpoint is None:
        return False
    try:
        host = FenceTarget.parse(supervisor.endpoint).host
    except ValueError:
        return False
    return is_loopback(host) and not is_local_address(supervisor.host)
