"""Errors of the supervisor: each message says what happened, to what, and what to do."""

from __future__ import annotations

from stratus.errors import ConfigError, StratusError


class SupervisorError(StratusError):
    """Base of the supervisor's errors."""


class SupervisorStartError(SupervisorError):
    """The supervisor could not start: its local directory is unusable, and so on."""


class DuplicateSupervisorError(SupervisorStartError):
    """Another live supervisor is registered under this supervisor's id."""


class UnreachableEndpointError(SupervisorStartError, ConfigError):
    """The endpoint would be registered on a loopback address while other hosts take part
    in the cluster: a configuration to fix (the command exits as a usage error)."""


class AssignmentsUnavailableError(SupervisorError):
    """The assignments could not be read from ZooKeeper (unreachable, or no answer in time)."""


class CodeNotReadyError(SupervisorError):
    """A pipeline's code could not be fetched, checked or unpacked; it is tried again later."""


class EnvironmentBuildError(SupervisorError):
    """A pipeline's requirements could not be installed into its environment; final for
    its assignment (no restart loop): the pipeline is FAILED with the installer's message."""


class UnfencedAssignmentError(SupervisorError):
    """An assignment without its fencing token (not read from its znode's stat): no worker
    may run it, since nothing would fence that worker."""


class WorkerUserError(SupervisorError):
    """A worker cannot run as the user it was given: the user is missing, banned, a system
    account, in the supervisor's group, or the worker launcher refused it."""


class WorkerStartError(SupervisorError):
    """A worker's monitor exited, or did not report its worker, before the worker ran."""


class LocalDirLockedError(SupervisorStartError):
    """Another live supervisor process uses this supervisor's local directory."""


class AdoptionRefusedError(SupervisorStartError):
    """The local directory holds workers (or an owner record) of another supervisor id or
    another cluster: the supervisor touches none of it and refuses to start."""
