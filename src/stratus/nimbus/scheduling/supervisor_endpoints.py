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
on this host's loopback, never that supervisor's: it is refused the same way, and the
leader aims no fencing method at it::

    url = endpoint_url(supervisor, "/api/v1/logs/etl", client_auth(conf))
    loopback_elsewhere(supervisor)   # True: "127.0.0.1:6629" registered by host 10.0.0.12
"""

from __future__ import annotations

import logging

from stratus.api.errors import UntrustedEndpointError
from stratus.api.records import SupervisorSummary
from stratus.ha.fencing import FenceTarget
from stratus.security.client_auth import ClientAuth
from stratus.security.loopback import is_local_address, is_loopback

log = logging.getLogger(__name__)

TLS_KEYS = "client.tls.ca, client.tls.cert or nimbus.tls.cert"


def endpoint_url(supervisor: SupervisorSummary, path: str, auth: ClientAuth) -> str:
    """The URL of ``path`` on the supervisor's endpoint, its scheme this nimbus's own;
    ``UntrustedEndpointError`` (logged) when the registration says otherwise about TLS, or
    names a loopback endpoint from another host."""
    assert supervisor.endpoint is not None
    said = f"supervisor {supervisor.id}'s registration says its endpoint {supervisor.endpoint}"
    if auth.tls is not None and not supervisor.endpoint_tls:
        raise _refused(
            supervisor,
            "registered_http_configured_https",
            f"{said} serves plain http, but this nimbus's configuration says the cluster "
            f"speaks TLS ({TLS_KEYS} is set): nothing was sent to it. Give the supervisor "
            "nimbus.tls.cert and nimbus.tls.key so that its endpoint serves https, or find "
            "who rewrote its registration in ZooKeeper",
        )
    if auth.tls is None and supervisor.endpoint_tls:
        raise _refused(
            supervisor,
            "registered_https_configured_http",
            f"{said} serves https, but this nimbus's configuration has no TLS (none of "
            f"{TLS_KEYS} is set): nothing was sent to it. Set client.tls.ca on the nimbuses "
            "to the CA of the supervisors' certificates",
        )
    if loopback_elsewhere(supervisor):
        raise _refused(
            supervisor,
            "loopback_of_another_host",
            f"{said} is a loopback address, but it registered from host "
            f"{supervisor.host or '(none said)'}: from this nimbus that address reaches this "
            "host, not that supervisor, so nothing was sent to it. Give that supervisor "
            "nimbus.auth.tokens.file so that it serves its endpoint on supervisor.host",
        )
    return f"{auth.scheme}://{supervisor.endpoint}{path}"


def _refused(supervisor: SupervisorSummary, reason: str, message: str) -> UntrustedEndpointError:
    log.error(
        "event=supervisor_endpoint_refused supervisor=%s endpoint=%s host=%s reason=%s "
        "action=nothing_sent",
        supervisor.id,
        supervisor.endpoint,
        supervisor.host or "-",
        reason,
    )
    return UntrustedEndpointError(message)


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
