"""Whether one request may go on: its bearer token or client certificate, against a role.

A presented bearer token decides alone: unknown, it is ``unauthenticated`` (401) even if a
certificate was also verified. Without a token, a verified client certificate's subject CN
is looked up; a CN the file does not list is ``forbidden`` (403): the caller is known, just
not allowed. Neither is ``unauthenticated``. A known caller whose role is below the one the
call needs is ``forbidden``. With no credentials configured, every call is allowed::

    policy = AccessPolicy(load_credentials(path))
    policy.authorize("Bearer 9a8f...", None, Role.SUBMIT)   # or raises
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stratus.api.errors import ForbiddenError, UnauthenticatedError
from stratus.security.roles import Role
from stratus.security.tokens import Credentials

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
class AccessPolicy:
    """Who may call a server; ``credentials`` None lets every call through (no auth)."""

    credentials: Credentials | None = None

    @property
    def enabled(self) -> bool:
        return self.credentials is not None

    def authorize(self, authorization: str | None, peer_name: str | None, needed: Role) -> Role:
        """The caller's role if it allows ``needed``; else UnauthenticatedError/ForbiddenError.

        ``authorization`` is the request's Authorization header; ``peer_name`` the subject CN
        of the client certificate that TLS verified, if any.
        """
        if self.credentials is None:
            return Role.ADMIN
        role, who = self._identify(authorization, peer_name)
        if role is None:
            raise ForbiddenError(f"{who} is not listed in the token file; no call is allowed")
        if not role.allows(needed):
            raise ForbiddenError(
                f"this call needs the role {needed.value}; {who} has the role {role.value}"
            )
        return role

    def _identify(
        self, authorization: str | None, peer_name: str | None
    ) -> tuple[Role | None, str]:
        assert self.credentials is not None
        if authorization:
            scheme, _, token = authorization.strip().partition(" ")
            if scheme.lower() != BEARER or not token.strip():
                raise UnauthenticatedError("the Authorization header must be `Bearer <token>`")
            role = self.credentials.role_of_token(token.strip())
            if role is None:
                raise UnauthenticatedError("the bearer token is not one this nimbus knows")
            return role, "the bearer token"
        if peer_name is not None:
            return self.credentials.role_of_name(peer_name), f"the certificate CN={peer_name}"
        raise UnauthenticatedError(
            "authentication required: send `Authorization: Bearer <token>` "
            "(client.auth.token, STRATUS_TOKEN) or a client certificate"
        )


OPEN = AccessPolicy()
