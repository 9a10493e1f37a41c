"""Errors of the pacemaker: bad frames, a full store, refused callers, unreachable servers."""

from __future__ import annotations

from stratus.errors import ConfigError, StratusError


class PacemakerError(StratusError):
    """Base of the pacemaker's errors."""


class FrameError(PacemakerError):
    """A frame is oversized, truncated or not a request: the connection that sent it is closed."""


class PathError(PacemakerError):
    """A path is not absolute, has an empty component, or is too long or too deep."""


class StoreFullError(PacemakerError):
    """The store holds ``pacemaker.max.entries`` entries or ``pacemaker.max.bytes`` bytes."""


class KerberosHandshakeError(PacemakerError):
    """A Kerberos handshake failed: no ticket, a refused token, an unknown principal, or a
    server that did not prove it holds the expected service principal's key."""


class SubtreeMismatchError(PacemakerError, ConfigError):
    """A pacemaker grants this supervisor's principal another subtree than the one its
    heartbeat store writes (``/supervisors/<supervisor.id>``): every write would be refused."""


class PacemakerRequestError(PacemakerError):
    """A server answered a request with an error (its code is ``code``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class PacemakerUnavailableError(PacemakerError):
    """No pacemaker server could be reached (or none answered in time)."""


class PacemakerConfigError(ConfigError):
    """The server's settings cannot work together (checked once, at start)."""


class KerberosUnavailableError(ConfigError):
    """pacemaker.auth.method is kerberos but the gssapi package is not installed."""


class PacemakerAuthFileError(ConfigError):
    """The pacemaker credentials file is unreadable, open to others, or has a bad line."""
