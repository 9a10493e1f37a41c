"""What a fencing method is: the registry entry every method provides, the fence it creates,
and the records they share (the target, one entry of a methods list, what methods need).

A method is a ``FenceMethod``: its name, how it is written and what it does (the docs table
and the configuration's descriptions are made of these), its check of an argument, whether
it can fence a supervisor, and how it creates the ``Fence`` that acts::

    method = REGISTRY["shell"]
    method.check_argument("/bin/fence", "shell(/bin/fence)", "ha.fencing.methods")
    method.create("/bin/fence", context).fence(FenceTarget.parse("n1.example:6627"))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from stratus.ha.errors import FencingConfigError
from stratus.ha.protocol import RequestSource, ServiceStatus


@dataclass(frozen=True)
class FenceTarget:
    """The service to fence: its advertised ``host:port`` (the breadcrumb's data)."""

    host: str
    port: int
    name: str | None = None  # what the service is called, when it has a name (a supervisor)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, data: bytes | str) -> FenceTarget:
        """``host:port`` (or ``[v6]:port``); ``ValueError`` saying what is wrong."""
        text = data.decode() if isinstance(data, bytes) else data
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{text!r} is not a host:port address")
        return cls(host.strip("[]"), int(port))

    def environment(self) -> dict[str, str]:
        """What a shell fence is told about its target."""
        named = {"STRATUS_FENCE_TARGET_ID": self.name} if self.name is not None else {}
        return {
            "STRATUS_FENCE_TARGET_HOST": self.host,
            "STRATUS_FENCE_TARGET_PORT": str(self.port),
            "STRATUS_FENCE_TARGET_ADDRESS": self.address,
            **named,
        }


@dataclass(frozen=True)
class MethodSpec:
    """One entry of ``ha.fencing.methods``: a method's name and its argument, if any."""

    name: str
    argument: str | None = None

    def __str__(self) -> str:
        return self.name if self.argument is None else f"{self.name}({self.argument})"


class StandbyAsker(Protocol):
    """The one protocol call ``graceful`` makes (``HAServiceClient`` has it)."""

    def transition_to_standby(self, source: RequestSource = ...) -> ServiceStatus: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class FencingContext:
    """What the methods need: a timeout, and a client of a service for ``graceful``."""

    timeout: float
    graceful_timeout: float
    connect: Callable[[str, float], StandbyAsker]  # (address, timeout) -> client


class Fence(Protocol):
    """One configured fence, ready; ``fence`` returns True when the target is surely not
    active."""

    def fence(self, target: FenceTarget) -> bool: ...


@dataclass(frozen=True)
class Usage:
    """One way to write a method in a list, and what it does written so."""

    form: str  # as the configuration's descriptions name it: "process(pid file)"
    what: str  # one cell of the docs' table of methods (markdown)


class FenceMethod(Protocol):
    """A fencing method: one entry of the registry (``registry.REGISTRY``)."""

    @property
    def name(self) -> str:
        """What a methods list calls it: ``shell``."""
        ...

    @property
    def usages(self) -> tuple[Usage, ...]:
        """Its forms (without and with an argument) and what each does."""
        ...

    @property
    def not_for_supervisors(self) -> str | None:
        """None if the leader may fence a silent supervisor with it
        (``nimbus.supervisor.fencing.methods``); otherwise why not, as the error says it."""
        ...

    def check_argument(self, argument: str | None, entry: str, key: str) -> None:
        """``FencingConfigError`` naming ``key`` and the ``entry`` if ``argument`` (None:
        no parentheses, or empty ones) does not suit the method."""
        ...

    def create(self, argument: str | None, context: FencingContext) -> Fence:
        """The fence an entry with this (checked) argument configures."""
        ...


def refuse_argument(name: str, argument: str | None, entry: str, key: str) -> None:
    """The argument check of a method that takes none."""
    if argument:
        raise FencingConfigError(f"{key}: {name} takes no argument, got {entry!r}")
