"""One round of the leader's duties, each duty behind its own error boundary.

A duty that raises is logged (with the duty and the epoch), counted through ``on_failure``
(the nimbus counts ``stratus_nimbus_duty_failures_total{duty}``), and tried again at the next
round; the duties after it still run. A leader whose duty round died on one unexpected
error would lead and do nothing; a round cannot die that way.

A term that is no longer held ends the round instead: the term is checked before each duty,
and a duty refused because its nimbus no longer leads (``LeadershipLostError``,
``NotLeaderError``) stops the round without counting as a failure. A deposed leader runs no
further duty, not even one whose writes the epoch check would not fence::

    duties = DutyRound([RemoveKilled(...), SchedulingDuty(...)], on_failure=count)
    failed = duties.run(term)          # the names of the duties that raised, [] mostly
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kazoo.exceptions import KazooException

from stratus.api.errors import NotLeaderError
from stratus.coordination.errors import LeadershipLostError
from stratus.coordination.leadership import Leadership
from stratus.errors import StratusError

log = logging.getLogger(__name__)


class LeaderDuty(Protocol):
    """One job of the leader; ``run`` does one round of it for the term given."""

    @property
    def name(self) -> str: ...

    def run(self, term: Leadership) -> Any: ...


class DutyRound:
    """The leader's duties in order; see the module docstring."""

    def __init__(self, duties: Sequence[LeaderDuty], *, on_failure: Callable[[str], None]) -> None:
        self.duties = list(duties)
        self._on_failure = on_failure

    @property
    def names(self) -> list[str]:
        return [duty.name for duty in self.duties]

    def run(self, term: Leadership) -> list[str]:
        """Run every duty once for ``term``, while it is held; the names of those that raised."""
        failed = []
        for duty in self.duties:
            if not term.is_leader:
                _log_stopped(duty.name, term, "term_not_held")
                break
            try:
                duty.run(term)
            except (LeadershipLostError, NotLeaderError) as exc:
                _log_stopped(duty.name, term, repr(exc))
                break
            except (StratusError, KazooException, OSError) as exc:
                log.warning(
                    "event=leader_duty_failed duty=%s epoch=%d error=%r", duty.name, term.epoch, exc
                )
                failed.append(duty.name)
            except Exception:
                log.exception("event=leader_duty_failed duty=%s epoch=%d", duty.name, term.epoch)
                failed.append(duty.name)
        for name in failed:
            self._on_failure(name)
        return failed


def _log_stopped(duty: str, term: Leadership, why: str) -> None:
    """The round ends at ``duty``: this nimbus no longer holds ``term``."""
    log.info("event=leader_round_stopped duty=%s epoch=%d reason=%s", duty, term.epoch, why)
