"""The suite's own scheduling: under ``--dist loadgroup`` a Spark test carries its group.

``tests/conftest.py`` marks every Spark and solo test with the ``spark`` group so that one
worker runs them one at a time; a group marked too late is ignored without a word, and two
Spark JVMs then race on two cores (as they did, unnoticed, until this test). A module whose
tests share a group of their own and hold a Spark test names the Spark group as its own.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_every_spark_test_runs_in_the_spark_group_and_no_other(
    request: pytest.FixtureRequest,
) -> None:
    # set on an xdist worker only, from its --dist (pytest without -n has no such option)
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not under --dist loadgroup: nothing is grouped")
    assert request.node.nodeid.endswith("@spark"), request.node.nodeid
    # a Spark test with a group of its own too runs in the joined group ("browser_spark"),
    # beside the Spark group: its module joins the Spark group instead
    elsewhere = [
        item.nodeid
        for item in request.session.items
        if (item.get_closest_marker("spark") or item.get_closest_marker("solo"))
        and not item.nodeid.endswith("@spark")
    ]
    assert elsewhere == []
