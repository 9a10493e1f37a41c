"""Errors of pipeline packages and of code distribution."""

from __future__ import annotations

from stratus.errors import StratusError


class InvalidPackageError(StratusError):
    """A package is malformed or unsafe; ``entry`` names the file at fault, if one is."""

    def __init__(self, message: str, entry: str | None = None) -> None:
        super().__init__(message)
        self.entry = entry


class CodeUnavailableError(StratusError):
    """No holder could provide a pipeline's code with the expected digest."""


class DigestMismatchError(CodeUnavailableError):
    """A copy's bytes do not hash to the digest the pipeline record names."""


class CodeStoreError(StratusError):
    """The shared code store (``nimbus.code.shared.url``) could not be opened, read or written."""

    def __init__(self, url: str, action: str, cause: BaseException) -> None:
        super().__init__(
            f"shared code store {url}: could not {action} ({type(cause).__name__}: {cause}); "
            "check nimbus.code.shared.url and that this host can reach the store"
        )
        self.url = url
        self.action = action
