"""uvicorn's HTTP protocol, telling the app the subject CN of a verified client certificate.

uvicorn puts no TLS details in the ASGI scope; this protocol reads the peer certificate
when a connection is made and adds its CN to the state of every request on it
(``scope["state"][PEER_NAME]``), which ``RequireRole`` looks up in the token file.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol

from stratus.security.tls import peer_common_name
from stratus.web.authorization import PEER_NAME


class PeerCertificateProtocol(H11Protocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        name = peer_common_name(transport.get_extra_info("peercert"))
        if name is not None:
            self.app_state = {**self.app_state, PEER_NAME: name}  # this connection's only
