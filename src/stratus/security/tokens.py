"""The token and role file: who may call a nimbus, by bearer token or by certificate name.

One entry a line, ``<role> <kind> <value>``; ``#`` starts a comment line::

    # role   kind   value
    admin    token  9a8f0c...            # a bearer token, at least 16 characters
    submit   token  4be1d7...
    read     cn     grafana.example.org  # a verified client certificate's subject CN

The file must not be readable or writable by group or others (``chmod 600``), as ssh asks
of a private key. Only the tokens' sha256 digests are kept in memory, and a presented token
is compared with every digest in constant time (``hmac.compare_digest``). An error names
the file and the line, never a token::

    creds = load_credentials(Path("/etc/stratus/tokens"))
    creds.role_of_token(presented)      # Role.SUBMIT, or None when unknown
    creds.role_of_name("grafana.example.org")
"""

from __future__ import annotations

import hashlib
import hmac
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stratus.security.errors import TokenFileError
from stratus.security.roles import ROLE_NAMES, Role

MIN_TOKEN_CHARS = 16
TOKEN_KIND = "token"
NAME_KIND = "cn"


@dataclass(frozen=True)
class Credentials:
    """The callers a server knows: token digests and certificate names, each with a role."""

    token_digests: tuple[tuple[bytes, Role], ...] = ()
    names: Mapping[str, Role] = field(default_factory=dict)

    def role_of_token(self, token: str) -> Role | None:
        """The role of a presented bearer token, or None; every digest is compared."""
        digest = _digest(token)
        found: Role | None = None
        for known, role in self.token_digests:
            if hmac.compare_digest(known, digest):
                found = role
        return found

    def role_of_name(self, common_name: str) -> Role | None:
        """The role of a verified client certificate's subject CN, or None."""
        return self.names.get(common_name)


def load_credentials(path: Path) -> Credentials:
    """Read the token file at ``path``; TokenFileError if it is unsafe or malformed."""
    return parse_credentials(read_private_file(path, "the token file"), str(path))


def parse_credentials(text: str, source: str) -> Credentials:
    """The entries of a token file's text; ``source`` names it in errors."""
    digests: dict[bytes, Role] = {}
    names: dict[str, Role] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        where = f"{source} line {number}"
        if len(fields) != 3:
            raise TokenFileError(
                f"{where}: expected 3 fields `<role> token|cn <value>`, found {len(fields)}"
            )
        role = _role(fields[0], where)
        kind, value = fields[1], fields[2]
        if kind == TOKEN_KIND:
            _add_token(digests, value, role, where)
        elif kind == NAME_KIND:
            if value in names:
                raise TokenFileError(f"{where}: the name {value!r} is listed twice")
            names[value] = role
        else:
            raise TokenFileError(f"{where}: the second field must be `token` or `cn`")
    if not digests and not names:
        raise TokenFileError(f"{source} lists no token and no certificate name")
    return Credentials(tuple(digests.items()), names)


def read_private_file(path: Path, what: str) -> str:
    """The text of a secret file that only its owner may read or write."""
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise TokenFileError(
                f"{what} {path} is open to group or others (mode {stat.S_IMODE(mode):04o}); "
                f"run `chmod 600 {path}`"
            )
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TokenFileError(f"cannot read {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise TokenFileError(f"{what} {path} is not UTF-8 text") from None


def read_token(path: Path) -> str:
    """The one token held by a client's token file (its first non-empty line)."""
    for line in read_private_file(path, "the client token file").splitlines():
        if line.strip():
            return line.strip()
    raise TokenFileError(f"the client token file {path} is empty")


def _role(word: str, where: str) -> Role:
    try:
        return Role(word)
    except ValueError:
        raise TokenFileError(f"{where}: the first field is not a role ({ROLE_NAMES})") from None


def _add_token(digests: dict[bytes, Role], token: str, role: Role, where: str) -> None:
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenFileError(
            f"{where}: the token is shorter than {MIN_TOKEN_CHARS} characters; "
            "make one with `openssl rand -hex 32`"
        )
    digest = _digest(token)
    if digest in digests:
        raise TokenFileError(f"{where}: the same token is listed on an earlier line")
    digests[digest] = role


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()
