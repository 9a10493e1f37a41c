"""A throwaway CA and the certificates signed by it, for the tests: stratus's own
``CertificateAuthority`` (``stratus.security.certificates``) in a test's directory.

Servers get a certificate for 127.0.0.1 (an IP subject alternative name, which clients
check); clients get one whose subject CN is the name the token file maps to a role::

    ca = TestCa(tmp_path)
    server = ca.issue("nimbus", ip="127.0.0.1")      # Issued(cert=..., key=...)
    client = ca.issue("ci")
"""

from __future__ import annotations

from pathlib import Path

from stratus.security.certificates import CertificateAuthority, Issued

__all__ = ["Issued", "TestCa"]


class TestCa:
    """A CA valid for two days in ``directory``."""

    __test__ = False  # not a test class

    def __init__(self, directory: Path, name: str = "stratus-test-ca") -> None:
        self._ca = CertificateAuthority.create(directory, name, days=2)
        self.directory = directory
        self.cert = self._ca.cert
        self.key = self._ca.key

    def issue(self, common_name: str, *, ip: str | None = None) -> Issued:
        """A certificate for ``common_name`` (and ``ip`` as a SAN), signed by this CA."""
        return self._ca.issue(common_name, ip=ip)
