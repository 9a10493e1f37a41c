"""Who may act on a pipeline: its owners, its readers and the admins, one pure decision.

The principal that submitted a pipeline owns it (``PipelineRecord.owner``); its conf may
name more owners (``pipeline.owners``) and readers (``pipeline.readers``), comma-separated
principals. A change of a pipeline (update, kill, activate, deactivate, rebalance) needs an
owner; reading its worker's log needs an owner or a reader; ``admin`` may do all. A
pipeline without an owner (submitted to a cluster without a token file, or before owners
were recorded) is left to the admins until one names owners in its conf. The role check
(``read`` < ``submit`` < ``admin``) comes first and apart (``access.py``): a reader listed
by a pipeline still needs ``submit`` to change it. On a server without a token file there
is no caller and everything is allowed, as before::

    access = PipelineAccess.of(record.owner, record.conf)
    decide(Caller("alice", Role.SUBMIT), Verb.KILL, access)    # Decision(allowed=..., why=...)
    check_pipeline_access(caller, Verb.LOGS, "etl", access)    # or ForbiddenError
    pipeline_summary(record).owners                            # ["alice", "bob"]: its owners
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stratus.api.errors import ForbiddenError
from stratus.api.pipeline_conf import OWNER_KEY, OWNERS_KEY, READERS_KEY, principal_list
from stratus.api.records import PipelineRecord, PipelineSummary
from stratus.security.access import Caller
from stratus.security.roles import Role


class Verb(enum.Enum):
    """What a caller does to one pipeline, and whether it changes it."""

    UPDATE = "update"
    KILL = "kill"
    ACTIVATE = "activate"
    DEACTIVATE = "deactivate"
    REBALANCE = "rebalance"
    ROLLBACK = "roll back"
    RESTART = "restart"
    LOGS = "logs"

    @property
    def changes(self) -> bool:
        return self is not Verb.LOGS

    @property
    def phrase(self) -> str:
        """What the verb does, in a sentence: "kill", "read the log of"."""
        return "read the log of" if self is Verb.LOGS else self.value


@dataclass(frozen=True)
class PipelineAccess:
    """Who owns one pipeline and who may read it."""

    owner: str | None = None  # the submitter
    owners: frozenset[str] = frozenset()  # pipeline.owners
    readers: frozenset[str] = frozenset()  # pipeline.readers

    @classmethod
    def of(cls, owner: str | None, conf: Mapping[str, Any]) -> PipelineAccess:
        """From a record's owner and conf (or an assignment's conf, which names the owner)."""
        if owner is None and isinstance(conf.get(OWNER_KEY), str):
            owner = conf[OWNER_KEY]
        return cls(
            owner=owner,
            owners=frozenset(principal_list(conf.get(OWNERS_KEY))),
            readers=frozenset(principal_list(conf.get(READERS_KEY))),
        )

    def all_owners(self) -> list[str]:
        """The submitter first, then the conf's owners, each once."""
        first = [self.owner] if self.owner else []
        return first + sorted(self.owners - set(first))


def pipeline_summary(record: PipelineRecord) -> PipelineSummary:
    """``record`` as the cluster summary lists it, its owners as ``all_owners`` orders them."""
    return PipelineSummary.of(record, PipelineAccess.of(record.owner, record.conf).all_owners())


@dataclass(frozen=True)
class Decision:
    allowed: bool
    why: str


def decide(caller: Caller | None, verb: Verb, access: PipelineAccess) -> Decision:
    """Whether ``caller`` (None: a server without a token file) may ``verb`` the pipeline."""
    if caller is None:
        return Decision(True, "no token file: every caller may")
    if caller.role is Role.ADMIN:
        return Decision(True, f"{caller.principal} is an admin")
    needed = Role.SUBMIT if verb.changes else Role.READ
    if not caller.role.allows(needed):
        return Decision(False, f"this call needs the role {needed.value}")
    if caller.principal == access.owner or caller.principal in access.owners:
        return Decision(True, f"{caller.principal} owns it")
    if not verb.changes and caller.principal in access.readers:
        return Decision(True, f"{caller.principal} is one of its readers")
    owners = ", ".join(access.all_owners()) or "nobody (an admin may name owners)"
    readers = "" if verb.changes else " and its readers (pipeline.readers)"
    return Decision(False, f"only its owners ({owners}){readers} and admins may {verb.value} it")


def check_pipeline_access(
    caller: Caller | None, verb: Verb, pipeline: str, access: PipelineAccess
) -> None:
    """ForbiddenError naming the caller, the pipeline and who may, unless ``decide`` allows."""
    decision = decide(caller, verb, access)
    if not decision.allowed:
        assert caller is not None
        raise ForbiddenError(
            f"{caller.principal} may not {verb.phrase} pipeline {pipeline!r}: {decision.why}"
        )
