"""The API fuzz of ``test_api_fuzz.py`` on a nimbus that requires tokens: schemathesis reads
the OpenAPI document with a token, sends a submit role's token with every request, and its
checks include ``ignored_auth``: an operation that declares the bearer scheme must refuse a
request without the token (or with a wrong one).

The pipelines are submitted beforehand with that token, so its principal owns them; every
case is sent again with the token of another submitter (``OTHER``), which owns none of them,
and with a ``read`` token: a change of a pipeline, or its log, is refused (403) to the one,
every change to the other; with an admin's, nothing is refused (but the HA protocol, which
the fuzz does not send as admin: it would turn the nimbus standby).

The steering of cases onto pipelines submitted beforehand, and the filter of false
positives, are those of ``test_api_fuzz.py``. Fewer examples per operation by default::

    STRATUS_FUZZ_AUTH_EXAMPLES=200 .venv/bin/pytest tests/cluster/test_api_fuzz_auth.py
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from schemathesis import Case
from schemathesis.checks import positive_data_acceptance

from stratus.security.client_auth import ClientAuth
from stratus.zk.server import ZooKeeperServer
from tests.cluster.test_api_fuzz import (
    ACTIVATE,
    CONF_OPERATIONS,
    DEACTIVATE,
    KILL,
    REBALANCE,
    REQUEST_TIMEOUT_SECS,
    SEED,
    STEERED,
    UPDATE,
    filter_failure,
    map_case,
    steered,
)
from tests.harness.package_factory import valid_package
from tests.harness.secure_cluster import (
    ADMIN,
    OTHER,
    READ,
    SUBMIT,
    SecureCluster,
    bearer,
    secure_cluster,
    token_file,
)

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("STRATUS_FUZZ_AUTH_EXAMPLES", "10"))
LOGS = "GET /api/v1/pipelines/{name}/logs"  # not in the document: listed for completeness
# what only a pipeline's owners (its submitter, pipeline.owners) and admins may do
OWNED_OPERATIONS = frozenset({UPDATE, KILL, ACTIVATE, DEACTIVATE, REBALANCE, LOGS})


@pytest.fixture(autouse=True)
def _schemathesis_node_id(request: pytest.FixtureRequest) -> None:
    """schemathesis 4.32's lazy schemas use ``item._nodeid``, which pytest 9.2 no longer has."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


@pytest.fixture(scope="module")
def guarded_nimbus(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureCluster]:
    """One nimbus with a token file, leading alone, with the steered-to pipelines."""
    directory = tmp_path_factory.mktemp("api-fuzz-auth")
    extra = ["-c", f"nimbus.auth.tokens.file={token_file(directory)}"]
    auth = ClientAuth(token=SUBMIT)
    with secure_cluster(
        zk_server.connect_string,
        directory,
        "api-fuzz-auth",
        extra=extra,
        auth=auth,
        timeout=REQUEST_TIMEOUT_SECS,
        size=1,
    ) as cluster:
        url = cluster.url(cluster.leader())
        names = [steered(kind, i) for kind in ("kept", "doomed") for i in range(STEERED)]
        for name in names:
            response = cluster.http.post(
                f"{url}/api/v1/pipelines",
                data={"name": name},
                files={"package": ("package.zip", valid_package(name))},
            )
            assert response.status_code == 201, response.text
        yield cluster


@pytest.fixture(scope="module")
def guarded_schema(guarded_nimbus: SecureCluster) -> schemathesis.BaseSchema:
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "request-timeout": REQUEST_TIMEOUT_SECS,
            "auth": {"openapi": {"HTTPBearer": {"bearer": SUBMIT}}},  # sent by schemathesis
            "generation": {"max-examples": EXAMPLES, "deterministic": True, "database": "none"},
        }
    )
    url = guarded_nimbus.url(guarded_nimbus.nimbuses[0])
    loaded = schemathesis.openapi.from_url(
        f"{url}/api/v1/openapi.json", config=config, headers=bearer(SUBMIT)
    )
    loaded.hook(map_case)
    loaded.hook(filter_failure)
    return loaded


schema = schemathesis.pytest.from_fixture("guarded_schema")


@schema.parametrize()
def test_no_request_breaks_the_guarded_api(case: Case[Any]) -> None:
    label = case.operation.label
    excluded = [positive_data_acceptance] if label in CONF_OPERATIONS else []
    response = case.call_and_validate(excluded_checks=excluded)
    assert response.status_code < 500, f"{label}: {response.text}"
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    admin_only = case.operation.path.startswith("/ha/") or (  # the HA protocol, and a
        case.operation.path.startswith("/api/v1/supervisors/") and case.method.upper() != "GET"
    )  # change of a supervisor (cordon, uncordon, drain): admin only
    if positive and admin_only:
        assert response.status_code == 403, f"{label} with a submit token: {response.text}"
    else:
        assert not positive or response.status_code not in (401, 403), f"{label}: no token sent"
    unauthenticated = case.call(headers={"Authorization": ""})  # the same request, no token
    assert unauthenticated.status_code == 401, f"{label} without a token: {unauthenticated.text}"
    if positive and label in OWNED_OPERATIONS:  # on a pipeline steered to: ci's, not other's
        stranger = case.call(headers=bearer(OTHER))
        assert stranger.status_code in (403, 404), f"{label} by a non-owner: {stranger.text}"
    if positive and case.method.upper() != "GET":
        reader = case.call(headers=bearer(READ))
        assert reader.status_code == 403, f"{label} with a read token: {reader.text}"
    if positive and not case.operation.path.startswith("/ha/"):  # no admin turns it standby
        admin = case.call(headers=bearer(ADMIN))  # a retry, for the owner's call went first
        assert admin.status_code not in (401, 403), f"{label} by an admin: {admin.text}"
