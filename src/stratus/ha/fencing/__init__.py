"""Fencing: make sure the old active of an election is not active any more, before we are.

Methods are tried in the order of ``ha.fencing.methods`` until one succeeds; when all fail,
fencing failed and nobody may become active (the elector drops the lock and tries again)::

    fencer = Fencer(parse_methods("graceful, shell(/usr/local/bin/fence-nimbus)"), context)
    fencer.fence(FenceTarget.parse("n1.example:6627"))     # True: n1 is fenced

A list is ``name`` or ``name(argument)`` entries, separated by commas or new lines (a comma
inside the parentheses belongs to the argument). Each method is a module of this package
(``graceful``, ``epoch``, ``shell``, ``process``, ``sshfence``) whose ``METHOD`` is a
``FenceMethod`` (``protocol``), listed in the ``registry``, which says what each does.
Every method but ``epoch`` is bounded by ``ha.fencing.timeout.secs`` (``graceful`` by
``ha.fencing.graceful.timeout.secs``).
"""

from __future__ import annotations

from stratus.ha.fencing.fencer import FenceAttempt, Fencer
from stratus.ha.fencing.graceful import GracefulFence
from stratus.ha.fencing.host import (
    holds_any,
    listening_inodes,
    listening_pids,
    port_open,
    process_state,
    run_bounded,
    stopped_locally,
)
from stratus.ha.fencing.process import ProcessFence
from stratus.ha.fencing.protocol import (
    Fence,
    FenceMethod,
    FenceTarget,
    FencingContext,
    MethodSpec,
    StandbyAsker,
    Usage,
)
from stratus.ha.fencing.registry import (
    REGISTRY,
    create_method,
    method_names,
    parse_methods,
    split_entries,
    supervisor_method_names,
)
from stratus.ha.fencing.shell import ShellFence
from stratus.ha.fencing.sshfence import SshFence, remote_kill_script

__all__ = [
    "REGISTRY",
    "Fence",
    "FenceAttempt",
    "FenceMethod",
    "FenceTarget",
    "Fencer",
    "FencingContext",
    "GracefulFence",
    "MethodSpec",
    "ProcessFence",
    "ShellFence",
    "SshFence",
    "StandbyAsker",
    "Usage",
    "create_method",
    "holds_any",
    "listening_inodes",
    "listening_pids",
    "method_names",
    "parse_methods",
    "port_open",
    "process_state",
    "remote_kill_script",
    "run_bounded",
    "split_entries",
    "stopped_locally",
    "supervisor_method_names",
]
