"""Which refused promotions are news: each told once while its supervisor stays under a verdict.

The failover lane plans ten times a second and the scheduling round every round, and both plan
the same refusal again as long as nothing changes (``promotion_plan.PromotionRefusal``). A
refusal is news, to log and to count (``stratus_nimbus_promotion_refusals_total``), when its
pipeline was not refused yet, or was refused off another supervisor, on another verdict or for
another reason; it is forgotten once its supervisor is no longer under a verdict (heard again,
or its pipelines moved), so that the next failure of that supervisor tells it again::

    told = RefusalMemory()
    told.keep(under={"s1"})                  # the supervisors under a verdict now
    for refusal in told.news(plan.refusals):
        log_and_count(refusal)
    told.keep(under=set())                   # s1 heard again: what was told of it is forgotten

One owner thread (the lane's, or the round's); not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Set

from stratus.nimbus.failover.promotion_plan import How, PromotionRefusal, Refusal


class RefusalMemory:
    """The refusals already told, by pipeline; see the module docstring."""

    def __init__(self) -> None:
        self._told: dict[str, tuple[str, How, Refusal]] = {}

    def keep(self, *, under: Set[str]) -> None:
        """Forget what was told of the pipelines of supervisors not ``under`` a verdict now."""
        self._told = {pipeline: told for pipeline, told in self._told.items() if told[0] in under}

    def news(self, refusals: Iterable[PromotionRefusal]) -> list[PromotionRefusal]:
        """Of ``refusals``, those not told yet (noted as told now)."""
        news = []
        for refusal in refusals:
            told = (refusal.from_supervisor, refusal.how, refusal.reason)
            if self._told.get(refusal.pipeline) != told:
                self._told[refusal.pipeline] = told
                news.append(refusal)
        return news

    def clear(self) -> None:
        """Forget everything (a new term)."""
        self._told.clear()
