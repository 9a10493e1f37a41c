"""Whether one request may go on: its bearer token or client certificate, against a role.

A presented bearer token decides alone: unknown, it is ``unauthenticated`` (401) even if a
certificate was also verified; past its ``expires``, it is 401 too, saying it expired.
Without a token, a verified client certificate's subject CN is looked up; a CN the file
does not list is ``forbidden`` (403): the caller is known, just not allowed. Neither is
``unauthenticated``. A known caller whose role is below the one the call needs is
``forbidden``. With no credentials configured, every call is allowed, by nobody in
particular (the caller is None).

The policy holds the token file's entries and reads the file again on ``reload`` (the
daemons call it on SIGHUP); a file that no longer parses leaves the entries as they were,
and the error, naming the line, is logged::

    policy = AccessPolicy(load_credentials(path), source=path)
    caller = policy.authorize("Bearer 9a8f...", None, Role.SUBMIT)   # Caller, or raises
    caller.principal, caller.role                                    # "alice", Role.SUBMIT
    policy.reload()                                                  # on SIGHUP

``fixed`` entries are added to the file's, at load and at every reload: a supervised nimbus's
controller is known to its child by the digest of a token made for one start, which no file
lists.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from stratus.api.errors import ForbiddenError, UnauthenticatedError
from stratus.security.errors import TokenFileError
from stratus.security.roles import Role
from stratus.security.tokens import Credentials, Entry, load_credentials

log = logging.getLogger(__name__)

BEARER = "bearer"
CHALLENGE = 'Bearer realm="stratus"'  # the WWW-Authenticate header of a 401


def one_authorization(values: Sequence[str]) -> str | None:
    """The request's one Authorization header (None: none); UnauthenticatedError for more.

    Two headers are refused whatever they hold: a check that read one and a relay that
    forwarded the other would judge one caller and act for another.
    """
    if len(values) > 1:
        raise UnauthenticatedError(
            f"the request carries {len(values)} Authorization headers; send exactly one, "
            "`Bearer <token>`"
        )
    return values[0] if values else None


@dataclass(frozen=True)
class Caller:
    """Who made a request: the principal of its token file entry, and its role."""

    principal: str
    role: Role


class AccessPolicy:
    """Who may call a server; ``credentials`` None lets every call through (no auth).

    ``source`` is the token file that ``reload`` reads again; ``wall`` the clock that
    expiries are compared with.
    """

    def __init__(
        self,
        credentials: Credentials | None = None,
        *,
        source: Path | None = None,
        fixed: Credentials | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._fixed = fixed or Credentials()
        self._credentials = credentials.plus(self._fixed) if credentials is not None else None
        self.source = source
        self._wall = wall

    @property
    def enabled(self) -> bool:
        return self._credentials is not None

    @property
    def credentials(self) -> Credentials | None:
        return self._credentials

    def reload(self) -> bool:
        """Read ``source`` again; whether its entries replaced the old ones. A file that
        cannot be used keeps the old entries, and its error is logged."""
        if self.source is None or self._credentials is None:
            return False
        try:
            credentials = load_credentials(self.source)
        except TokenFileError as exc:
            log.error("event=token_file_reload_failed file=%s kept=old error=%s", self.source, exc)
            return False
        # one reference swapped: a request sees old or new
        self._credentials = credentials.plus(self._fixed)
        log.info(
            "event=token_file_reloaded file=%s tokens=%d names=%d",
            self.source,
            len(credentials.token_digests),
            len(credentials.names),
        )
        return True

    def authorize(
        self, authorization: str | None, peer_name: str | None, needed: Role
    ) -> Caller | None:
        """The caller if its role allows ``needed`` (None when no credentials are
        configured); else UnauthenticatedError/ForbiddenError.

        ``authorization`` is the request's Authorization header; ``peer_name`` the subject CN
        of the client certificate that TLS verified, if any.
        """
        caller = self.identify(authorization, peer_name)
        check_role(caller, needed)
        return caller

    def identify(self, authorization: str | None, peer_name: str | None) -> Caller | None:
        """The caller, whatever the call; None with no credentials configured.
        UnauthenticatedError for no credential, an unknown token or an expired entry;
        ForbiddenError for a certificate whose CN is not listed."""
        credentials = self._credentials
        if credentials is None:
            return None
        if authorization:
            scheme, _, token = authorization.strip().partition(" ")
            if scheme.lower() != BEARER or not token.strip():
                raise UnauthenticatedError("the Authorization header must be `Bearer <token>`")
            entry = credentials.entry_of_token(token.strip())
            if entry is None:
                raise UnauthenticatedError("the bearer token is not one this nimbus knows")
            return self._unexpired(entry, "the bearer token")
        if peer_name is not None:
            entry = credentials.entry_of_name(peer_name)
            if entry is None:
                raise ForbiddenError(
                    f"the certificate CN={peer_name} is not listed in the token file; "
                    "no call is allowed"
                )
            return self._unexpired(entry, f"the certificate CN={peer_name}")
        raise UnauthenticatedError(
            "authentication required: send `Authorization: Bearer <token>` "
            "(client.auth.token, STRATUS_TOKEN) or a client certificate"
        )

    def _unexpired(self, entry: Entry, what: str) -> Caller:
        if entry.expired(self._wall()):
            assert entry.expires is not None
            when = datetime.fromtimestamp(entry.expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            raise UnauthenticatedError(
                f"{what} (principal {entry.principal}) expired at {when}; ask an admin for a "
                "new one"
            )
        return Caller(entry.principal, entry.role)


def check_role(caller: Caller | None, needed: Role) -> None:
    """ForbiddenError unless ``caller``'s role allows ``needed`` (None: an open server)."""
    if caller is not None and not caller.role.allows(needed):
        raise ForbiddenError(
            f"this call needs the role {needed.value}; {caller.principal} has the role "
            f"{caller.role.value}"
        )


OPEN = AccessPolicy()
