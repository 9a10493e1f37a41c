"""How a client (CLI, Python client, supervisor, nimbus fetching code) presents itself.

A bearer token, and TLS settings when the nimbuses speak https (``client.tls.ca`` set)::

    auth = ClientAuth(token="9a8f...", tls=TlsSettings(ca="ca.pem"))
    auth.scheme                     # "https"
    auth.headers()                  # {"Authorization": "Bearer 9a8f..."}
    auth.ssl_context()              # verifies servers against ca.pem
    auth.verify()                   # what an httpx client verifies with (the system's store
                                    # when no CA is set, loaded once per process)
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass, field

import httpx

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

    def verify(self) -> ssl.SSLContext:
        """What an HTTP client verifies servers with: ``client.tls.ca``, else the system's
        trust store, loaded once per process (httpx loads it again for every client it builds:
        a tenth of a second and more, which a failover would pay at every reconnection)."""
        context = self.ssl_context()
        return context if context is not None else system_trust()


@functools.cache
def system_trust() -> ssl.SSLContext:
    """The system's trust store as a client context, loaded once."""
    return httpx.create_ssl_context()


NO_AUTH = ClientAuth()
