"""A throwaway CA and the certificates signed by it, made with the ``openssl`` command.

Servers get a certificate for 127.0.0.1 (an IP subject alternative name, which clients
check); clients get one whose subject CN is the name the token file maps to a role::

    ca = TestCa(tmp_path)
    server = ca.issue("nimbus", ip="127.0.0.1")      # Issued(cert=..., key=...)
    client = ca.issue("ci")
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


class TestCa:
    __test__ = False  # not a test class

    def __init__(self, directory: Path, name: str = "stratus-test-ca") -> None:
        self.directory = directory
        self.cert = directory / f"{name}.pem"
        self.key = directory / f"{name}-key.pem"
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", str(self.key), "-out", str(self.cert),
        )  # fmt: skip

    def issue(self, common_name: str, *, ip: str | None = None) -> Issued:
        """A certificate for ``common_name`` (and ``ip`` as a SAN), signed by this CA."""
        key = self.directory / f"{common_name}-key.pem"
        request = self.directory / f"{common_name}.csr"
        cert = self.directory / f"{common_name}.pem"
        _openssl(
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-subj", f"/CN={common_name}", "-keyout", str(key), "-out", str(request),
        )  # fmt: skip
        extensions = self.directory / f"{common_name}.ext"
        usage = "serverAuth,clientAuth"
        lines = [f"extendedKeyUsage={usage}"]
        if ip is not None:
            lines.append(f"subjectAltName=IP:{ip}")
        extensions.write_text("\n".join(lines) + "\n")
        _openssl(
            "x509", "-req", "-in", str(request), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-days", "2", "-extfile", str(extensions), "-out", str(cert),
        )  # fmt: skip
        key.chmod(0o600)
        return Issued(cert=cert, key=key)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)
