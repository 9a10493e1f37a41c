"""Which assignments a pipeline fence holds back: a pipeline fenced here starts again only for
an assignment with a newer fencing token.

A leader's pipeline fence (``POST /api/v1/fence/pipelines``, ``PipelineFenceOrder``) stops the
workers of some pipelines of a supervisor so that it may run them elsewhere; the supervisor
keeps its lease, so its next read of the assignments, which may still name it for them,
must not start them again. Each pipeline fenced is held at the newest fencing token the
supervisor knew for it (its worker's assignment, or the newest read's): an assignment of it
read later is left out of the plan, as if absent, while its token is not newer; a newer one
(the leader rewrote the assignment: moved it away and back, rebalanced it) releases the
hold and runs. A read in which the pipeline is not assigned here releases it too: any later
assignment here is a later write, with a newer token. Pure, owned by the control loop::

    holds = PipelineHolds("s1")
    desired = holds.admit(desired)      # every read: the assignments held back left out
    holds.hold("etl", worker_token)     # at the fence; False: nothing known of it here
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from stratus.api.records import Assignment, FencingToken

log = logging.getLogger(__name__)


def newer(token: FencingToken | None, than: FencingToken) -> bool:
    """Whether ``token`` is newer than ``than`` (an unknown token is not)."""
    return token is not None and token.key() > than.key()


def newest(*tokens: FencingToken | None) -> FencingToken | None:
    """The newest of ``tokens``; None when none is known."""
    known = [token for token in tokens if token is not None]
    return max(known, key=FencingToken.key) if known else None


class PipelineHolds:
    """The pipelines fenced here and the token each is held at; see the module docstring."""

    def __init__(self, supervisor: str) -> None:
        self.supervisor = supervisor
        self.held: dict[str, FencingToken] = {}
        self._read: dict[str, FencingToken | None] = {}  # the newest read's tokens, here

    def hold(self, pipeline: str, token: FencingToken | None = None) -> bool:
        """Hold ``pipeline`` at the newest of ``token`` (its worker's) and the newest
        read's; False when neither is known (nothing of it was read here: not held)."""
        at = newest(token, self._read.get(pipeline), self.held.get(pipeline))
        if at is None:
            return False
        self.held[pipeline] = at
        return True

    def admit(self, desired: Mapping[str, Assignment]) -> dict[str, Assignment]:
        """``desired`` (the assignments naming this supervisor, newest read) without those a
        fence holds back; the holds that a newer token, or an absence, released are gone."""
        self._read = {name: assignment.token for name, assignment in desired.items()}
        admitted = dict(desired)
        for name, at in list(self.held.items()):
            assignment = desired.get(name)
            if assignment is not None and not newer(assignment.token, at):
                del admitted[name]
                continue
            del self.held[name]
            log.info(
                "event=pipeline_fence_released pipeline=%s supervisor=%s held_at=%s reason=%s",
                name,
                self.supervisor,
                at,
                "not_assigned_here" if assignment is None else f"newer_token:{assignment.token}",
            )
        return admitted
