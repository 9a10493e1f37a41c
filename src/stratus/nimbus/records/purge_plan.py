"""The leader's next step for one recorded purge: a pure decision over a snapshot.

A purge (``api.purges.PurgeOrder``) is done by whoever can write the checkpoint root. With
``pipeline.checkpoint.purge.by`` `nimbus` that is the leader itself; with `supervisor` a
live supervisor; with `auto` the leader first (when the directory is on a file system it
reaches and is there), then the supervisors. A supervisor is chosen deterministically among
the live ones that have not failed this round (rendezvous hashing of the pipeline's name
and the supervisor's id: the same choice on every nimbus, spread over the supervisors); it
is replaced when it answers with an error, unregisters (dies) or stays silent for
``answer_secs``. When everyone who could try failed, the order is FAILED with every reason,
and a new round starts ``retry_secs`` later; with no live supervisor it waits, saying so::

    step = next_step(order, outcomes, live=["s1", "s2"], now=now, rules=rules)
    step.kind          # DONE, TRY_HERE, WRITE (step.order) or WAIT
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from stratus.api.purges import (
    MAX_ATTEMPTS_KEPT,
    FailedAttempt,
    PurgeOrder,
    PurgeOutcome,
    PurgeState,
    supervisor_party,
)


class PurgeBy(StrEnum):
    """``pipeline.checkpoint.purge.by``."""

    AUTO = "auto"
    SUPERVISOR = "supervisor"
    NIMBUS = "nimbus"


@dataclass(frozen=True)
class PurgeRules:
    by: PurgeBy
    here: str  # this leader as a party of an attempt: "nimbus <host:port>"
    here_reaches: bool  # (auto) the directory is on a file system the leader reaches, there
    answer_secs: float  # how long a supervisor may take to answer before another is chosen
    retry_secs: float  # how long a FAILED order waits before everyone may try again


class StepKind(StrEnum):
    DONE = "done"  # a deletion was acknowledged: remove the order
    TRY_HERE = "try_here"  # the leader deletes the directory itself now
    WRITE = "write"  # write ``order`` (handed over, failed, or waiting with a reason)
    WAIT = "wait"  # nothing to do this round


@dataclass(frozen=True)
class Step:
    kind: StepKind
    order: PurgeOrder | None = None  # WRITE: the order to write
    by: str | None = None  # DONE: who did it


WAIT = Step(StepKind.WAIT)


def next_step(
    order: PurgeOrder,
    outcomes: Sequence[PurgeOutcome],
    *,
    live: Sequence[str],
    now: float,
    rules: PurgeRules,
) -> Step:
    """What the leader does next about ``order``, given the supervisors' ``outcomes`` for it,
    the ``live`` (registered) supervisors and the wall clock ``now``."""
    done = next((outcome for outcome in outcomes if outcome.done), None)
    if done is not None:
        return Step(StepKind.DONE, by=supervisor_party(done.supervisor))
    failed = list(order.failed)
    if order.supervisor is not None:
        failure = _current_failure(order, outcomes, live, now, rules.answer_secs)
        if failure is None:
            return WAIT  # the supervisor it is handed to is at it
        failed.append(failure)
    elif order.state is PurgeState.FAILED:
        if order.retry_at is not None and now < order.retry_at:
            return WAIT
        failed = []  # a new round: everyone may try again
    tried = {attempt.by for attempt in failed}
    here_tries = rules.by is PurgeBy.NIMBUS or (rules.by is PurgeBy.AUTO and rules.here_reaches)
    if here_tries and rules.here not in tried:
        if failed != order.failed:  # keep what was learnt before trying
            return _write(order, failed=failed, supervisor=None, reason=order.reason)
        return Step(StepKind.TRY_HERE)
    if rules.by is PurgeBy.NIMBUS:
        return _failed(order, failed, now, rules.retry_secs)
    candidates = [sid for sid in live if supervisor_party(sid) not in tried]
    if candidates:
        chosen = max(candidates, key=lambda sid: _weight(order.pipeline, sid))
        return _write(
            order,
            failed=failed,
            supervisor=chosen,
            attempt=order.attempt + 1,
            handed=now,
            reason=f"handed to supervisor {chosen}",
        )
    if live:
        return _failed(order, failed, now, rules.retry_secs)
    waiting = "no live supervisor to delete them; waiting for one"
    if failed:
        waiting += f" (tried: {_reasons(failed)})"
    return _write(order, failed=failed, supervisor=None, reason=waiting)


def record_failure(order: PurgeOrder, by: str, error: str) -> PurgeOrder:
    """``order`` with a failed attempt of ``by`` added (the leader's own try)."""
    failed = [*order.failed, FailedAttempt(by=by, attempt=order.attempt, error=error)]
    return order.model_copy(update={"failed": failed[-MAX_ATTEMPTS_KEPT:], "reason": error})


def _current_failure(
    order: PurgeOrder,
    outcomes: Sequence[PurgeOutcome],
    live: Sequence[str],
    now: float,
    answer_secs: float,
) -> FailedAttempt | None:
    """Why the supervisor the order is handed to will not do it; None while it may."""
    sid = order.supervisor
    assert sid is not None
    answer = next((o for o in outcomes if o.attempt == order.attempt and not o.done), None)
    if answer is not None:
        error = answer.error or "failed, without a reason"
    elif sid not in live:
        error = "unregistered (stopped or dead) before it answered"
    elif order.handed is not None and now - order.handed >= answer_secs:
        error = f"no answer in {answer_secs:g}s"
    else:
        return None
    return FailedAttempt(by=supervisor_party(sid), attempt=order.attempt, error=error)


def _failed(order: PurgeOrder, failed: list[FailedAttempt], now: float, retry: float) -> Step:
    reason = f"nobody could delete them: {_reasons(failed)}; tried again in {retry:g}s"
    return _write(
        order,
        failed=failed,
        supervisor=None,
        state=PurgeState.FAILED,
        reason=reason,
        retry_at=now + retry,
    )


def _write(order: PurgeOrder, *, failed: list[FailedAttempt], **changes: object) -> Step:
    """WRITE the changed order, or WAIT if nothing changes."""
    changes = {"state": PurgeState.PENDING, "retry_at": None, **changes}
    changed = order.model_copy(update={"failed": failed[-MAX_ATTEMPTS_KEPT:], **changes})
    return WAIT if changed == order else Step(StepKind.WRITE, order=changed)


def _reasons(failed: Sequence[FailedAttempt]) -> str:
    return "; ".join(f"{attempt.by}: {attempt.error}" for attempt in failed)


def _weight(pipeline: str, supervisor: str) -> int:
    """Rendezvous hashing: the supervisor of highest weight for the pipeline is chosen."""
    return zlib.crc32(f"{pipeline}\0{supervisor}".encode())
