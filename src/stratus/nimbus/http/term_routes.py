"""``GET /api/v1/leader/terms``: the history of leader terms (``leader_terms.py``).

Any nimbus answers, reading the history from ZooKeeper (at most the newest 100 terms, one
pipelined read); it needs the role ``read``, as every read of the API does.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI

from stratus.api.records import LeaderTerms

TERMS_PATH = "/api/v1/leader/terms"


def add_term_routes(app: FastAPI, read_terms: Callable[[], LeaderTerms]) -> None:
    @app.get(TERMS_PATH, tags=["any nimbus"])
    def leader_terms() -> LeaderTerms:
        """The newest terms of leadership, newest first: each one's epoch, nimbus, start
        and end (null while it lasts), and ``failover_secs``, the leaderless gap before
        it: from the previous leader's last sign of life to this term's grant (for a
        leader that died, its ZooKeeper session timeout is counted in); null for the first
        term on record and under a failover controller. A term closed by its successor
        ends at that last sign of life."""
        return read_terms()
