"""A small certificate authority in a directory: a CA and the certificates it signs.

For a cluster on one machine (``stratus local --secure``) and for tests: servers get a
certificate naming their IP address (a subject alternative name, which clients check),
clients one whose subject CN is the name a token file maps to a role. Every private key is
written readable by its owner only (0600). The keys and certificates are made by the
``openssl`` command (EC P-256), which every system with Python's ``ssl`` module has at hand::

    ca = CertificateAuthority.create(directory, "stratus-local-ca")
    server = ca.issue("nimbus", ip="127.0.0.1")      # Issued(cert=..., key=...)
    client = ca.issue("ci")                          # a client certificate, CN=ci

A production cluster takes its certificates from the operator's own CA (docs/security.md).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from stratus.security.errors import CertificateError

PRIVATE_KEY_MODE = 0o600
OPENSSL_TIMEOUT_SECS = 60.0
DEFAULT_DAYS = 30


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key (0600)."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA's certificate and key in ``directory``; ``issue`` signs certificates with it."""

    directory: Path
    cert: Path
    key: Path
    days: int = DEFAULT_DAYS

    @classmethod
    def create(
        cls, directory: Path, name: str = "stratus-ca", days: int = DEFAULT_DAYS
    ) -> CertificateAuthority:
        """A new self-signed CA whose subject CN is ``name``, valid for ``days`` days."""
        directory.mkdir(parents=True, exist_ok=True)
        ca = cls(directory, directory / f"{name}.pem", directory / f"{name}-key.pem", days)
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", str(days), "-subj", f"/CN={name}",
            "-keyout", str(ca.key), "-out", str(ca.cert),
        )  # fmt: skip
        ca.key.chmod(PRIVATE_KEY_MODE)
        return ca

    def issue(self, common_name: str, *, ip: str | None = None) -> Issued:
        """A certificate for ``common_name`` (and ``ip`` as a subject alternative name),
        signed by this CA, good for servers and clients."""
        key = self.directory / f"{common_name}-key.pem"
        request = self.directory / f"{common_name}.csr"
        cert = self.directory / f"{common_name}.pem"
        _openssl(
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-subj", f"/CN={common_name}", "-keyout", str(key), "-out", str(request),
        )  # fmt: skip
        key.chmod(PRIVATE_KEY_MODE)
        extensions = self.directory / f"{common_name}.ext"
        lines = ["extendedKeyUsage=serverAuth,clientAuth"]
        if ip is not None:
            lines.append(f"subjectAltName=IP:{ip}")
        extensions.write_text("\n".join(lines) + "\n")
        _openssl(
            "x509", "-req", "-in", str(request), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-days", str(self.days), "-extfile", str(extensions),
            "-out", str(cert),
        )  # fmt: skip
        request.unlink()
        extensions.unlink()
        return Issued(cert=cert, key=key)


def _openssl(*args: str) -> None:
    command = shutil.which("openssl")
    if command is None:
        raise CertificateError(
            "making certificates needs the openssl command, which is not on PATH: install "
            "openssl (the package of that name), or give stratus certificates of your own"
        )
    try:
        subprocess.run(
            [command, *args], check=True, capture_output=True, timeout=OPENSSL_TIMEOUT_SECS
        )
    except subprocess.CalledProcessError as exc:
        detail = exc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise CertificateError(f"openssl {args[0]} failed: {detail[0]}") from None
    except subprocess.TimeoutExpired:
        raise CertificateError(
            f"openssl {args[0]} did not finish in {OPENSSL_TIMEOUT_SECS:g}s"
        ) from None
