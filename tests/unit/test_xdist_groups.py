"""The suite's own scheduling: under ``--dist loadgroup`` a Spark test carries its group.

``tests/conftest.py`` marks every Spark and solo test with the ``spark`` group so that one
worker runs them one at a time; a group marked too late is ignored without a word, and two
Spark JVMs then race on two cores (as they did, unnoticed, until this test).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_a_spark_test_runs_in_the_spark_group(request: pytest.FixtureRequest) -> None:
    # set on an xdist worker only, from its --dist (pytest without -n has no such option)
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not under --dist loadgroup: nothing is grouped")
    assert request.node.nodeid.endswith("@spark"), request.node.nodeid
