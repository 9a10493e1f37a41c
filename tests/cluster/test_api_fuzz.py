"""A property-based fuzz of the nimbus API, generated from the OpenAPI document it serves.

schemathesis reads ``/api/v1/openapi.json`` from a real nimbus process (a one-nimbus cluster on
the shared real ZooKeeper, so it leads and its leader-only calls really write) and sends every
operation examples, boundary cases (coverage phase) and random valid and invalid requests
(fuzzing phase), multipart package uploads included. Every response must pass schemathesis's
checks: no 5xx, a documented status, content type and headers, a body that conforms to the
document, schema-invalid input refused with a 4xx, schema-valid input accepted, and a 405 with
the right ``Allow`` for undeclared methods.

To fuzz the writes and not only their 404s, half of the valid cases are steered onto pipelines
submitted beforehand (``kept-*`` for activate, deactivate, rebalance and reads; ``doomed-*``
for kill), onto confs that pipeline_conf.py accepts (``spark.*`` keys), and for submits onto
valid packages (random bytes are no zip with a manifest); see ``map_case``.

The run is deterministic (fixed seed, derandomized, no example database) and short; a longer
one is an environment variable away::

    .venv/bin/pytest tests/cluster/test_api_fuzz.py                    # 25 examples per operation
    STRATUS_FUZZ_EXAMPLES=1000 STRATUS_FUZZ_SEED=7 .venv/bin/pytest tests/cluster/test_api_fuzz.py
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from schemathesis import Case
from schemathesis.checks import positive_data_acceptance
from schemathesis.core.failures import AcceptedNegativeData, Failure
from schemathesis.core.mutations import OperatorKind

from stratus.local.processes import NimbusProcess
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.package_factory import valid_package

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("STRATUS_FUZZ_EXAMPLES", "25"))  # fuzzing phase, per operation
SEED = int(os.environ.get("STRATUS_FUZZ_SEED", "20260522"))
REQUEST_TIMEOUT_SECS = 10.0
STEERED = 8  # pipelines of each kind submitted before the fuzz
SUBMIT = "POST /api/v1/pipelines"
UPDATE = "POST /api/v1/pipelines/{name}/update"
UPLOADS = frozenset({SUBMIT, UPDATE})  # the operations whose body is a package
KILL, ACTIVATE, DEACTIVATE, REBALANCE = (
    f"POST /api/v1/pipelines/{{name}}/{verb}"
    for verb in ("kill", "activate", "deactivate", "rebalance")
)
# A pipeline conf is a JSON object in a form field (submit) or a free-form object (rebalance);
# the document cannot say which keys and values pipeline_conf.py accepts, so a schema-valid
# conf may rightly be refused, and so may a package (any bytes are schema-valid; only a zip
# with a manifest is a package). For these two, the test replaces schemathesis's check
# positive_data_acceptance with its own: a refusal of schema-valid input must be about the
# conf or the package.
CONF_OPERATIONS = frozenset({SUBMIT, UPDATE, REBALANCE})
SPARK_SCALARS = (str, int, float, bool)

statuses: defaultdict[str, Counter[int]] = defaultdict(Counter)  # operation -> status -> count
failed: set[str] = set()  # operations whose fuzz stopped at a failure
made_valid: set[int] = set()  # ids of upload cases given a valid package and conf by map_case


@pytest.fixture(autouse=True)
def _schemathesis_node_id(request: pytest.FixtureRequest) -> None:
    """schemathesis 4.32's lazy schemas use ``item._nodeid``, which pytest 9.2 no longer has."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


@pytest.fixture(scope="module")
def fuzzed_nimbus(zk_server, tmp_path_factory) -> Iterator[NimbusProcess]:
    """One nimbus, the leader, alone on a fresh ZooKeeper root, with the steered-to pipelines."""
    log_dir = tmp_path_factory.mktemp("api-fuzz")
    with nimbus_cluster(zk_server.connect_string, log_dir, "api-fuzz", size=1) as cluster:
        cluster.wait_for_agreed_leader()
        nimbus = cluster.nimbuses[0]
        for name in [steered("kept", i) for i in range(STEERED)] + [
            steered("doomed", i) for i in range(STEERED)
        ]:
            response = httpx.post(
                f"{nimbus.url}/api/v1/pipelines",
                data={"name": name},
                files={"package": ("package.zip", valid_package(name))},
                timeout=REQUEST_TIMEOUT_SECS,
            )
            assert response.status_code == 201, response.text
        yield nimbus
        assert nimbus.is_running(), nimbus.log_tail()


@pytest.fixture(scope="module")
def api_schema(fuzzed_nimbus: NimbusProcess) -> schemathesis.BaseSchema:
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "request-timeout": REQUEST_TIMEOUT_SECS,
            "generation": {"max-examples": EXAMPLES, "deterministic": True, "database": "none"},
        }
    )
    loaded = schemathesis.openapi.from_url(
        f"{fuzzed_nimbus.url}/api/v1/openapi.json", config=config
    )
    loaded.hook(map_case)
    loaded.hook(filter_failure)
    return loaded


def steered(kind: str, index: int) -> str:
    return f"{kind}-{index}"


def map_case(_: Any, case: Case[Any]) -> Case[Any]:
    """Steer valid cases to existing pipelines, valid confs (half) and valid packages (all).

    Half: those whose generated name (or conf) has an odd length, so the choice is a function
    of the generated case and the run stays deterministic.
    """
    if not (case.meta and case.meta.generation.mode.is_positive):
        return case
    label = case.operation.label
    name = (case.path_parameters or {}).get("name")
    if isinstance(name, str) and len(name) % 2:
        kind = "doomed" if label == KILL else "kept"
        case.path_parameters = {**case.path_parameters, "name": steered(kind, len(name) % STEERED)}
    body = case.body
    if isinstance(body, dict):
        conf = body.get("conf")
        if label == REBALANCE and isinstance(conf, dict) and len(conf) % 2:
            case.body = {**body, "conf": spark_conf(conf)}
        elif label in UPLOADS:
            made_valid.add(id(case))
            steered_body: dict[str, Any] = {
                **body,
                "package": valid_package(extra={"note.txt": repr(body)}),
            }
            if isinstance(conf, str) and len(conf) % 2:
                steered_body["conf"] = json.dumps(spark_conf({conf: conf}))
            case.body = steered_body
    return case


def spark_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """The same keys as Spark settings (``spark.<key>``), with scalar values."""
    return {
        f"spark.{key}"[:256]: value if isinstance(value, SPARK_SCALARS) else json.dumps(value)
        for key, value in conf.items()
    }


def filter_failure(_: Any, failure: Failure, case: Case[Any], __: Any) -> bool:
    """Drop false positives: a submit that map_case made valid, and a multipart field's
    "wrong type" (schemathesis 4.32).

    Every part of a multipart form is text or bytes on the wire. A negative case that only
    changes the type of form fields (``package`` generated as the integer 24056 is sent as the
    bytes ``24056``) is a valid upload once sent; schemathesis reconciles text fields but not
    file parts, and reports the accepted upload as "schema-violating request accepted".
    """
    if not isinstance(failure, AcceptedNegativeData) or case.operation.label not in UPLOADS:
        return True
    if id(case) in made_valid:
        return False  # map_case replaced its package and conf with valid ones: accepting is right
    mutations = getattr(case.meta.phase.data, "mutations", ()) if case.meta else ()
    return not mutations or any(m.operator is not OperatorKind.CHANGE_TYPE for m in mutations)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
def test_no_request_breaks_the_api(case: Case[Any]) -> None:
    label = case.operation.label
    excluded = [positive_data_acceptance] if label in CONF_OPERATIONS else []
    failed.add(label)  # until this case passes
    response = case.call_and_validate(excluded_checks=excluded)
    statuses[label][response.status_code] += 1
    assert response.status_code < 500, f"{label}: {response.text}"
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if excluded and positive and response.status_code == 422:
        error = response.json()
        about = {"invalid_conf", "invalid_package"} if label in UPLOADS else {"invalid_conf"}
        assert error["error"] in about or error["message"].startswith("conf "), error
    failed.discard(label)


def test_the_fuzz_reached_the_writes() -> None:
    """Not only 404s and 422s: packages were stored, and pipelines changed state."""
    if not statuses:
        pytest.skip("nothing to count: test_no_request_breaks_the_api did not run")
    print({label: dict(counts) for label, counts in sorted(statuses.items())})
    assert statuses[SUBMIT][201] > 0 or SUBMIT in failed
    assert statuses[UPDATE][200] + statuses[UPDATE][202] > 0 or UPDATE in failed
    for label in (KILL, ACTIVATE, DEACTIVATE, REBALANCE):
        assert statuses[label][200] > 0 or label in failed, label
