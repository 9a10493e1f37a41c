"""How a client (CLI, Python client, supervisor, nimbus fetching code) presents itself.

A bearer token, and TLS settings when the nimbuses speak https (``client.tls.ca`` set)::

    auth = ClientAuth(token="9a8f...", tls=TlsSettings(ca="ca.pem"))
    auth.scheme                     # "https"
    auth.headers()                  # {"Authorization": "Bearer 9a8f..."}
    auth.ssl_context()              # verifies servers against ca.pem
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from stratus.security.tls import TlsSettings


@dataclass(frozen=True)
class ClientAuth:
    """A client's token (None: none sent) and TLS settings (None: plain http)."""

    token: str | None = field(default=None, repr=False)
    tls: TlsSettings | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def ssl_context(self) -> ssl.SSLContext | None:
        return self.tls.client_context() if self.tls is not None else None


NO_AUTH = ClientAuth()
