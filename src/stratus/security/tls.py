"""The ``ssl.SSLContext`` of every stratus server and client, built from one settings record.

A server presents ``cert`` (with ``key``); with ``ca`` it also verifies the client
certificates signed by that CA, and with ``require_client_cert`` it refuses a client
without one (mutual TLS). A client verifies servers against ``ca`` (hostname included:
a nimbus's certificate names the address it advertises) and presents ``cert`` if given::

    tls = TlsSettings(cert="nimbus.pem", key="nimbus-key.pem", ca="ca.pem")
    server = tls.server_context()
    client = TlsSettings(ca="ca.pem", cert="ci.pem", key="ci-key.pem").client_context()
    peer_common_name(ssl_socket.getpeercert())   # "ci", or None
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stratus.security.errors import TlsConfigError


@dataclass(frozen=True)
class TlsSettings:
    """Certificate, key and CA bundle files, and whether a server demands client certificates."""

    cert: str | None = None
    key: str | None = None  # None: the key is in the cert file
    ca: str | None = None
    require_client_cert: bool = False

    def server_context(self) -> ssl.SSLContext:
        """A server's context; TlsConfigError naming the file that cannot be used."""
        if not self.cert:
            raise TlsConfigError("TLS on a server needs a certificate (nimbus.tls.cert)")
        if self.require_client_cert and not self.ca:
            raise TlsConfigError(
                "nimbus.tls.client.cert.required needs nimbus.tls.ca, the CA that signs "
                "client certificates"
            )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load_chain(context)
        if self.ca:
            self._load_ca(context)
            context.verify_mode = (
                ssl.CERT_REQUIRED if self.require_client_cert else ssl.CERT_OPTIONAL
            )
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client's context: servers verified against ``ca``; ``cert`` presented if set."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # hostname checked, cert required
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.ca:
            self._load_ca(context)
        else:
            context.load_default_certs()
        if self.cert:
            self._load_chain(context)
        return context

    def _load_chain(self, context: ssl.SSLContext) -> None:
        assert self.cert is not None
        try:
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"cannot load the certificate {self.cert} with key {self.key or self.cert}: "
                f"{_reason(exc)}"
            ) from None

    def _load_ca(self, context: ssl.SSLContext) -> None:
        try:
            context.load_verify_locations(cafile=self.ca)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cannot load the CA bundle {self.ca}: {_reason(exc)}") from None


def peer_common_name(certificate: Mapping[str, Any] | None) -> str | None:
    """The subject CN of a verified peer certificate (``getpeercert()``), or None."""
    if not certificate:
        return None
    for rdn in certificate.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
