"""The token file: who may call a stratus server, by bearer token or by certificate name.

One entry a line, ``<role> <kind> <value> [principal=NAME] [expires=WHEN]``; ``#`` starts a
comment line::

    # role   kind   value                  options
    admin    token  sha256:5e884898da28...  principal=ops
    submit   token  sha256:9f86d081884c...  principal=alice expires=2027-01-31
    submit   token  4be1d7a09c3f...         principal=ci   # a clear token: works, not advised
    read     cn     grafana.example.org                    # a client certificate's subject CN

A ``token`` line holds the sha256 of a bearer token (``sha256:<64 hex>``, what ``stratus
token new`` prints) or, as before, the token itself (at least 16 characters). Its
``principal`` names the caller (who owns what it submits, who the audit log names); a line
without one keeps working, under the principal ``token-<first 8 hex of the token's
sha256>``. A ``cn`` line's principal is the CN itself. ``expires`` (ISO 8601, a date or a
time; UTC unless it says otherwise) ends the entry: the token is refused after it.

The file must not be readable or writable by group or others (``chmod 600``), as ssh asks
of a private key. Only the tokens' sha256 digests are kept in memory, and a presented token
is compared with every digest in constant time (``hmac.compare_digest``). An error names
the file and the line, never a token::

    creds = load_credentials(Path("/etc/stratus/tokens"))
    creds.entry_of_token(presented)     # Entry(role, principal, expires), or None
    creds.entry_of_name("grafana.example.org")
    token_line(Role.SUBMIT, "alice", hash_token(new_token()))   # a line to append
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from stratus.api.names import PRINCIPAL_RULE, is_principal
from stratus.security.errors import TokenFileError
from stratus.security.roles import ROLE_NAMES, Role

MIN_TOKEN_CHARS = 16
TOKEN_BYTES = 32  # what ``new_token`` draws: 64 hex characters
TOKEN_KIND = "token"
NAME_KIND = "cn"
HASH_PREFIX = "sha256:"
PRINCIPAL_OPTION = "principal"
EXPIRES_OPTION = "expires"
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_LINE_FORMAT = "`<role> token|cn <value> [principal=NAME] [expires=ISO-8601]`"


@dataclass(frozen=True)
class Entry:
    """One line of the token file: the caller's role, its principal, when it expires."""

    role: Role
    principal: str
    expires: float | None = None  # wall-clock seconds; None: never

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires


@dataclass(frozen=True)
class Credentials:
    """The callers a server knows: token digests and certificate names, each an ``Entry``."""

    token_digests: tuple[tuple[bytes, Entry], ...] = ()
    names: Mapping[str, Entry] = field(default_factory=dict)

    def entry_of_token(self, token: str) -> Entry | None:
        """The entry of a presented bearer token, or None; every digest is compared."""
        digest = _digest(token)
        found: Entry | None = None
        for known, entry in self.token_digests:
            if hmac.compare_digest(known, digest):
                found = entry
        return found

    def entry_of_name(self, common_name: str) -> Entry | None:
        """The entry of a verified client certificate's subject CN, or None."""
        return self.names.get(common_name)

    def plus(self, other: Credentials) -> Credentials:
        """These entries and ``other``'s (``other``'s win a name listed in both)."""
        return Credentials(self.token_digests + other.token_digests, {**self.names, **other.names})

    def role_of_token(self, token: str) -> Role | None:
        entry = self.entry_of_token(token)
        return entry.role if entry is not None else None

    def role_of_name(self, common_name: str) -> Role | None:
        entry = self.entry_of_name(common_name)
        return entry.role if entry is not None else None


def load_credentials(path: Path) -> Credentials:
    """Read the token file at ``path``; TokenFileError if it is unsafe or malformed."""
    return parse_credentials(read_private_file(path, "the token file"), str(path))


def parse_credentials(text: str, source: str) -> Credentials:
    """The entries of a token file's text; ``source`` names it in errors."""
    digests: dict[bytes, Entry] = {}
    names: dict[str, Entry] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        where = f"{source} line {number}"
        if len(fields) < 3:
            raise TokenFileError(f"{where}: expected {_LINE_FORMAT}, found {len(fields)} fields")
        role = _role(fields[0], where)
        kind, value = fields[1], fields[2]
        options = _options(fields[3:], where)
        expires = _expiry(options.get(EXPIRES_OPTION), where)
        if kind == TOKEN_KIND:
            digest = _token_digest(value, where)
            if digest in digests:
                raise TokenFileError(f"{where}: the same token is listed on an earlier line")
            principal = _principal(options.get(PRINCIPAL_OPTION), digest, where)
            digests[digest] = Entry(role, principal, expires)
        elif kind == NAME_KIND:
            if PRINCIPAL_OPTION in options:
                raise TokenFileError(
                    f"{where}: a `cn` line's principal is the CN itself; remove principal="
                )
            if value in names:
                raise TokenFileError(f"{where}: the name {value!r} is listed twice")
            names[value] = Entry(role, value, expires)
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


def digest_of(value: str) -> bytes:
    """The sha256 digest that ``sha256:<hex>`` (``hash_token``'s form) holds; ValueError if
    ``value`` is not of that form."""
    hexdigest = value.removeprefix(HASH_PREFIX)
    if not value.startswith(HASH_PREFIX) or not _HEX_DIGEST.fullmatch(hexdigest):
        raise ValueError("expected sha256: and 64 lowercase hex digits")
    return bytes.fromhex(hexdigest)


def new_token() -> str:
    """A new bearer token: 32 random bytes, as hex."""
    return secrets.token_hex(TOKEN_BYTES)


def hash_token(token: str) -> str:
    """What a token file holds for ``token``: ``sha256:<hex>``."""
    return HASH_PREFIX + _digest(token).hex()


def token_line(role: Role, principal: str, value: str, *, expires: datetime | None = None) -> str:
    """A token file's line for ``value`` (a hash from ``hash_token``, or a token)."""
    check_principal(principal)
    line = f"{role.value} {TOKEN_KIND} {value} {PRINCIPAL_OPTION}={principal}"
    if expires is not None:
        line += f" {EXPIRES_OPTION}={expires.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
    return line


def check_principal(principal: str) -> str:
    """``principal`` if it is a valid principal name; else TokenFileError saying the rule."""
    if not is_principal(principal):
        raise TokenFileError(f"{principal!r} is not a principal: expected {PRINCIPAL_RULE}")
    return principal


def parse_expiry(text: str) -> datetime:
    """An ISO 8601 date or time; UTC unless it names its offset. ValueError if not one."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _role(word: str, where: str) -> Role:
    try:
        return Role(word)
    except ValueError:
        raise TokenFileError(f"{where}: the first field is not a role ({ROLE_NAMES})") from None


def _options(words: list[str], where: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for word in words:
        key, equals, value = word.partition("=")
        if not equals or key not in (PRINCIPAL_OPTION, EXPIRES_OPTION) or not value:
            raise TokenFileError(
                f"{where}: after the value, expected principal=NAME or expires=ISO-8601; "
                f"the line's format is {_LINE_FORMAT}"
            )
        if key in options:
            raise TokenFileError(f"{where}: {key}= is given twice")
        options[key] = value
    return options


def _expiry(text: str | None, where: str) -> float | None:
    if text is None:
        return None
    try:
        return parse_expiry(text).timestamp()
    except ValueError:
        raise TokenFileError(
            f"{where}: expires={text!r} is not an ISO 8601 date or time "
            "(2027-01-31 or 2027-01-31T12:00:00Z)"
        ) from None


def _token_digest(value: str, where: str) -> bytes:
    if value.startswith(HASH_PREFIX):
        try:
            return digest_of(value)
        except ValueError:
            raise TokenFileError(
                f"{where}: a hashed token is sha256: and 64 lowercase hex digits; make the line "
                "with `stratus token new` or `stratus token hash`"
            ) from None
    if len(value) < MIN_TOKEN_CHARS:
        raise TokenFileError(
            f"{where}: the token is shorter than {MIN_TOKEN_CHARS} characters; "
            "make one with `stratus token new`"
        )
    return _digest(value)


def _principal(given: str | None, digest: bytes, where: str) -> str:
    if given is None:
        return f"token-{digest.hex()[:8]}"  # a line of the older format: still one caller
    if not is_principal(given):
        raise TokenFileError(f"{where}: principal={given!r} is not a name: {PRINCIPAL_RULE}")
    return given


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()
