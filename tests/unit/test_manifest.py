"""stratus.yaml: valid manifests parse, each invalid field is named, and the schema agrees."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import yaml
from pydantic import ValidationError

from stratus.codedist.errors import InvalidPackageError
from stratus.codedist.manifest import (
    MAX_REQUIREMENTS,
    Manifest,
    manifest_json_schema,
    manifest_schema_text,
    parse_manifest,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "src" / "stratus" / "codedist" / "manifest.schema.json"
DOC = ROOT / "docs" / "packages.md"
DOC_MANIFESTS = [
    block
    for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    if block.startswith("# stratus.yaml")
]
APP = "name: wordcount\nkind: app\nentrypoint: wordcount.main:run\n"


def rejection(text: str) -> str:
    with pytest.raises(InvalidPackageError) as caught:
        parse_manifest(text)
    assert caught.value.entry == "stratus.yaml"
    return str(caught.value)


# ---------------------------------------------------------------------- valid manifests


def test_an_app_manifest_with_every_field_parses() -> None:
    manifest = parse_manifest(
        APP
        + "conf:\n  spark.sql.shuffle.partitions: 8\n  pipeline.min.replication.count: 2\n"
        + "trigger:\n  interval_secs: 30\n"
        + "requirements:\n  - requests>=2.31\n  - numpy==2.1.*\n"
    )
    assert manifest.name == "wordcount"
    assert manifest.kind == "app"
    assert manifest.entrypoint == "wordcount.main:run"
    assert manifest.project is None
    assert manifest.conf == {
        "spark.sql.shuffle.partitions": 8,
        "pipeline.min.replication.count": 2,
    }
    assert manifest.trigger is not None
    assert manifest.trigger.interval_secs == 30.0
    assert manifest.requirements == ["requests>=2.31", "numpy==2.1.*"]


def test_an_sdp_manifest_defaults_its_project_file() -> None:
    manifest = parse_manifest("name: etl\nkind: sdp\n")
    assert (manifest.kind, manifest.entrypoint) == ("sdp", None)
    assert manifest.project == "spark-pipeline.yml"
    assert (manifest.conf, manifest.trigger, manifest.requirements) == ({}, None, [])


def test_an_sdp_project_path_is_normalised() -> None:
    manifest = parse_manifest("name: etl\nkind: sdp\nproject: ./conf//pipeline.yml\n")
    assert manifest.project == "conf/pipeline.yml"


def test_a_hot_standby_joins_the_pipeline_conf() -> None:
    manifest = parse_manifest(APP + "standby: hot\n")
    assert manifest.pipeline_conf() == {"pipeline.standby": "hot"}
    assert parse_manifest(APP).pipeline_conf() == {}


def test_the_trigger_joins_the_pipeline_conf() -> None:
    manifest = parse_manifest(APP + "conf: {spark.a: 1}\ntrigger: {interval_secs: 30}\n")
    assert manifest.pipeline_conf() == {"spark.a": 1, "pipeline.trigger.interval.secs": 30.0}
    assert parse_manifest(APP + "conf: {spark.a: 1}\n").pipeline_conf() == {"spark.a": 1}


def test_a_manifest_is_frozen() -> None:
    manifest = parse_manifest(APP)
    with pytest.raises(ValidationError):
        manifest.name = "other"  # type: ignore[misc]


# ---------------------------------------------------------------------- invalid fields


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name: word count\nkind: app\nentrypoint: a:b\n",
            "name: must be 1-100 letters, digits, '_' and '-', starting with a letter or "
            "digit (got 'word count')",
        ),
        ("name: 12\nkind: app\nentrypoint: a:b\n", "name: must be a valid string (got 12)"),
        ("kind: app\nentrypoint: a:b\n", "name: required field is missing"),
        ("name: wc\nkind: jar\n", "kind: must be 'app' or 'sdp' (got 'jar')"),
        ("name: wc\nentrypoint: a:b\n", "kind: required field is missing"),
        ("name: wc\nkind: app\n", "entrypoint: required for kind app"),
        ("name: wc\nkind: sdp\nentrypoint: a:b\n", "entrypoint: only for kind app"),
        (
            "name: wc\nkind: app\nentrypoint: wordcount.main\n",
            "entrypoint: must be package.module:function, e.g. wordcount.main:run "
            "(got 'wordcount.main')",
        ),
        ("name: wc\nkind: app\nentrypoint: a-b:run\n", "entrypoint: must be package.module"),
        ("name: wc\nkind: app\nentrypoint: a:b\nproject: p.yml\n", "project: only for kind sdp"),
        (
            "name: wc\nkind: sdp\nproject: ../p.yml\n",
            "project: must be a relative path inside the package",
        ),
        ("name: wc\nkind: sdp\nproject: /p.yml\n", "project: must be a relative path"),
        (
            APP + "conf:\n  pipeline.min.replicaton.count: 2\n",
            "conf: unknown pipeline conf key 'pipeline.min.replicaton.count'",
        ),
        (
            APP + "conf:\n  pipeline.min.replication.count: 0\n",
            "conf: pipeline conf pipeline.min.replication.count: expected an integer >= 1",
        ),
        (APP + "conf: [spark.a]\n", "conf: must be a valid dictionary"),
        (
            APP + "trigger:\n  interval_secs: 0\n",
            "trigger.interval_secs: must be greater than 0 (got 0)",
        ),
        (
            APP + "trigger:\n  interval_secs: .inf\n",
            "trigger.interval_secs: must be a finite number",
        ),
        (
            APP + "trigger:\n  every: 5\n",
            "trigger.interval_secs: required field is missing; trigger.every: unknown field",
        ),
        (
            APP + "trigger:\n  interval_secs: 5\nconf:\n  pipeline.trigger.interval.secs: 5\n",
            "trigger: both trigger.interval_secs and conf pipeline.trigger.interval.secs are set",
        ),
        (APP + "standby: warm\n", "standby: must be 'none' or 'hot' (got 'warm')"),
        (
            "name: wc\nkind: sdp\nstandby: hot\n",
            "standby: hot is for kind app only; an sdp pipeline cannot keep a standby worker",
        ),
        (
            "name: wc\nkind: sdp\nconf:\n  pipeline.standby: hot\n",
            "standby: hot is for kind app only",
        ),
        (
            APP + "standby: hot\nconf:\n  pipeline.standby: none\n",
            "standby: both standby and conf pipeline.standby are set; keep standby only",
        ),
        (
            APP + "conf:\n  pipeline.standby: yes\n",
            "conf: pipeline conf pipeline.standby: expected none or hot",
        ),
        (APP + "requirements: ['']\n", "requirements: item 0 must be one pip requirement"),
        (APP + 'requirements: ["a", "b\\nc"]\n', "requirements: item 1 must be one pip"),
        (
            APP + "requirements: ['--index-url=http://x']\n",
            "requirements: item 0 must be one pip requirement on one line, such as "
            "'requests>=2.31', not empty nor a pip option (got '--index-url=http://x')",
        ),
        (
            APP + f"requirements: {json.dumps(['a'] * (MAX_REQUIREMENTS + 1))}\n",
            f"requirements: list should have at most {MAX_REQUIREMENTS} items",
        ),
        (
            APP + "requirement: [requests]\n",
            "requirement: unknown field; the fields are name, kind, entrypoint, project, conf, "
            "trigger, requirements, standby; did you mean 'requirements'?",
        ),
        (APP + "kind: sdp\n", "not valid YAML: line 4, column 1: duplicate key 'kind'"),
        ("name: wc\nkind: [app\n", "not valid YAML: line 3, column 1"),
        ("- name: wc\n", "must be a mapping of fields (name, kind, entrypoint"),
        (
            "",
            "must be a mapping of fields (name, kind, entrypoint, project, conf, trigger, "
            "requirements, standby), not nothing",
        ),
    ],
)
def test_an_invalid_manifest_names_the_field_at_fault(text: str, message: str) -> None:
    assert rejection(text).startswith(f"stratus.yaml: {message}")


def test_errors_name_the_file_given() -> None:
    with pytest.raises(InvalidPackageError, match=r"^examples/wc/stratus\.yaml: kind: "):
        parse_manifest("name: wc\nkind: jar\n", where="examples/wc/stratus.yaml")


def test_every_problem_is_reported_at_once() -> None:
    message = rejection("name: word count\nkind: jar\n")
    assert "name: must be" in message
    assert "kind: must be 'app' or 'sdp'" in message


# ---------------------------------------------------------------------- the JSON Schema


def test_the_shipped_schema_is_the_generated_one() -> None:
    assert SCHEMA_FILE.read_text() == manifest_schema_text(), (
        "manifest.schema.json is out of date: run "
        ".venv/bin/python -m stratus.codedist.manifest > src/stratus/codedist/manifest.schema.json"
    )
    assert json.loads(SCHEMA_FILE.read_text()) == manifest_json_schema()


def test_the_schema_describes_the_manifest() -> None:
    schema = manifest_json_schema()
    assert schema["title"] == "stratus.yaml"
    assert schema["description"] == Manifest.__doc__
    assert set(schema["properties"]) == set(Manifest.model_fields)
    assert schema["required"] == ["name", "kind"]


def test_the_docs_have_an_app_and_an_sdp_manifest() -> None:
    kinds = sorted(yaml.safe_load(block)["kind"] for block in DOC_MANIFESTS)
    assert kinds == ["app", "sdp"]


@pytest.mark.parametrize("text", DOC_MANIFESTS, ids=lambda text: text.splitlines()[0])
def test_the_docs_examples_are_valid_manifests(text: str) -> None:
    parse_manifest(text)
    errors = [error.message for error in _schema().iter_errors(yaml.safe_load(text))]
    assert errors == []


@pytest.mark.parametrize(
    "data",
    [
        {"name": "wc", "kind": "jar"},
        {"name": "word count", "kind": "sdp"},
        {"name": "wc", "kind": "app"},
        {"name": "wc", "kind": "app", "entrypoint": "wc.main"},
        {"name": "wc", "kind": "app", "entrypoint": "a:b", "project": "p.yml"},
        {"name": "wc", "kind": "sdp", "entrypoint": "a:b"},
        {"name": "wc", "kind": "sdp", "conf": {"spark_sql": 1}},
        {"name": "wc", "kind": "sdp", "trigger": {"interval_secs": 0}},
        {"name": "wc", "kind": "sdp", "requirements": ["-e ."]},
        {"name": "wc", "kind": "sdp", "extra": 1},
        {"name": "wc", "kind": "sdp", "standby": "hot"},
        {"name": "wc", "kind": "app", "entrypoint": "a:b", "standby": "warm"},
    ],
)
def test_the_schema_refuses_what_the_model_refuses(data: dict[str, Any]) -> None:
    with pytest.raises(InvalidPackageError):
        parse_manifest(json.dumps(data))
    assert not _schema().is_valid(data)


def _schema() -> Any:
    return jsonschema_rs.validator_for(json.loads(SCHEMA_FILE.read_text()))
