"""Who may read and write what in a pacemaker, and the digest challenge-response.

The credentials file has one principal a line, ``<principal> <role> <secret>`` (``#``
starts a comment), and must be private to its owner (``chmod 600``)::

    # principal    role        secret (at least 16 characters: `openssl rand -hex 32`)
    nimbus         nimbus      3f9c...
    supervisor-1   supervisor  a71e...

A ``nimbus`` reads and deletes everything and writes everywhere (the leader removes the
heartbeats of pipelines that are gone). A ``supervisor`` reads and writes only its own
subtrees, ``/supervisors/<principal>`` (its heartbeat and its workers') and
``/beats/<principal>`` (its fast beats), so a compromised node can neither forge nor erase
another node's heartbeats or beats, nor read them.

Digest authentication never sends the secret: the server's ``hello`` answer carries a fresh
random nonce, and the client proves it knows the secret with
``HMAC-SHA256(secret, "stratus-pacemaker-digest-v1" | nonce | principal)``, which the server
compares in constant time. A nonce serves one connection; a proof cannot be replayed on
another. With ``none``, every caller is an anonymous nimbus (loopback and tests only).
With ``kerberos`` the file lists principals without secrets (``kerberos.py``), and a
supervisor's subtree is named by its principal's host (``Principal.subtree``).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from stratus.pacemaker.errors import PacemakerAuthFileError
from stratus.pacemaker.store import split_path
from stratus.security.errors import TokenFileError
from stratus.security.tokens import MIN_TOKEN_CHARS, read_private_file

SUPERVISORS_ROOT = ("supervisors",)
BEATS_ROOT = ("beats",)
SUPERVISOR_ROOTS = (SUPERVISORS_ROOT, BEATS_ROOT)  # a supervisor owns <root>/<its name> of each
DIGEST_CONTEXT = b"stratus-pacemaker-digest-v1"
NONCE_BYTES = 32


class AuthMethod(enum.StrEnum):
    """``pacemaker.auth.method``."""

    NONE = "none"
    DIGEST = "digest"
    KERBEROS = "kerberos"


class PacemakerRole(enum.StrEnum):
    """What a principal may do."""

    NIMBUS = "nimbus"
    SUPERVISOR = "supervisor"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller; a supervisor writes ``/supervisors/<subtree>`` and
    ``/beats/<subtree>``."""

    name: str
    role: PacemakerRole
    subtree: str | None = None  # None: the name (digest); Kerberos: the principal's host


ANONYMOUS = Principal("anonymous", PacemakerRole.NIMBUS)  # auth method none


@dataclass(frozen=True)
class Secret:
    """One line of the credentials file."""

    principal: Principal
    secret: bytes


def digest_proof(secret: bytes, nonce: bytes, principal: str) -> bytes:
    """The client's answer to a server's nonce."""
    message = DIGEST_CONTEXT + b"\0" + nonce + b"\0" + principal.encode("utf-8")
    return hmac.new(secret, message, hashlib.sha256).digest()


def check_proof(
    secrets: Mapping[str, Secret], principal: str, nonce: bytes, proof: bytes
) -> Principal | None:
    """The principal if ``proof`` answers ``nonce`` with its secret, else None."""
    known = secrets.get(principal)
    # An unknown principal is checked against a dummy secret: same work, same answer time.
    expected = digest_proof(known.secret if known else b"\0" * 32, nonce, principal)
    if hmac.compare_digest(expected, proof) and known is not None:
        return known.principal
    return None


def may_read(principal: Principal, path: str) -> bool:
    """Nimbuses read everything; a supervisor reads its own subtrees."""
    return principal.role is PacemakerRole.NIMBUS or _in_own_subtree(principal, path)


def may_write(principal: Principal, path: str) -> bool:
    """Nimbuses write everywhere; a supervisor writes its own subtrees only."""
    return principal.role is PacemakerRole.NIMBUS or _in_own_subtree(principal, path)


def own_subtree(principal_name: str) -> str:
    """Where a supervisor's heartbeats go: ``/supervisors/<principal>``."""
    return "/" + "/".join((*SUPERVISORS_ROOT, principal_name))


def _in_own_subtree(principal: Principal, path: str) -> bool:
    """Whether ``path`` is at or below ``/supervisors/<name>`` or ``/beats/<name>``, the
    name being the supervisor's (``Principal.subtree`` with Kerberos)."""
    parts = split_path(path)
    name = principal.subtree or principal.name
    return any(parts[: len(root) + 1] == (*root, name) for root in SUPERVISOR_ROOTS)


def load_secrets(path: Path) -> dict[str, Secret]:
    """The credentials file at ``path``, by principal; PacemakerAuthFileError if unusable."""
    try:
        text = read_private_file(path, "the pacemaker credentials file")
    except TokenFileError as exc:
        raise PacemakerAuthFileError(str(exc)) from None
    return parse_secrets(text, str(path))


def file_lines(text: str, source: str) -> Iterator[tuple[str, list[str]]]:
    """Each line of a credentials or principals file that is neither blank nor a comment:
    where it is (``<source> line <n>``, for errors) and its whitespace-separated fields."""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            yield f"{source} line {number}", line.split()


def parse_secrets(text: str, source: str) -> dict[str, Secret]:
    """The lines of a credentials file's text; errors name the line, never a secret."""
    secrets: dict[str, Secret] = {}
    for where, fields in file_lines(text, source):
        if len(fields) != 3:
            raise PacemakerAuthFileError(
                f"{where}: expected 3 fields `<principal> nimbus|supervisor <secret>`, "
                f"found {len(fields)}"
            )
        name, role_word, secret = fields
        try:
            role = PacemakerRole(role_word)
        except ValueError:
            raise PacemakerAuthFileError(
                f"{where}: the role must be `nimbus` or `supervisor`"
            ) from None
        if "/" in name:
            raise PacemakerAuthFileError(f"{where}: a principal may not contain /")
        if len(secret) < MIN_TOKEN_CHARS:
            raise PacemakerAuthFileError(
                f"{where}: the secret is shorter than {MIN_TOKEN_CHARS} characters; make one "
                "with `openssl rand -hex 32`"
            )
        if name in secrets:
            raise PacemakerAuthFileError(f"{where}: the principal {name!r} is listed twice")
        secrets[name] = Secret(Principal(name, role), secret.encode("utf-8"))
    if not secrets:
        raise PacemakerAuthFileError(f"{source} lists no principal")
    return secrets
