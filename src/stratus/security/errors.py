"""Errors of the security settings: a token file or a TLS file that cannot be used."""

from __future__ import annotations

from stratus.errors import ConfigError


class TokenFileError(ConfigError):
    """The token file is unreadable, readable by others, or has a bad line (never echoed)."""


class TlsConfigError(ConfigError):
    """A certificate, key or CA bundle cannot be loaded, or the TLS settings are incomplete."""


class CertificateError(ConfigError):
    """A certificate could not be made: no ``openssl`` command, or it failed (its message)."""
