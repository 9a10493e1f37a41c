"""The manifest of a pipeline package: ``stratus.yaml`` at the package's root.

It names the pipeline, says how to run it, and carries its default conf. A package is
either an ``app`` (stratus calls one Python function with a Spark session) or an ``sdp``
(a Spark Declarative Pipelines project, run by Spark)::

    manifest = parse_manifest("name: wordcount\\nkind: app\\nentrypoint: wordcount.main:run\\n")
    manifest.entrypoint                      # 'wordcount.main:run'
    parse_manifest("name: etl\\nkind: sdp\\n").project      # 'spark-pipeline.yml'
    parse_manifest("name: etl\\nkind: jar\\n")               # InvalidPackageError naming `kind`

Every error names the field at fault, and quotes what it got only in part (``echo``). The
manifest is bounded in size and may not use YAML anchors or aliases (``untrusted_yaml``).
``manifest.schema.json`` beside this module is ``manifest_json_schema()`` written out, for
editors (``python -m stratus.codedist.manifest`` prints it).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from stratus.api.echo import MAX_ECHO_CHARS, clip, echo
from stratus.api.errors import InvalidConfError
from stratus.api.names import PIPELINE_NAME_RULE, PipelineName
from stratus.api.pipeline_conf import validate_pipeline_conf
from stratus.api.standby_workers import STANDBY_CONF_KEY, StandbyMode, wants_standby_worker
from stratus.api.untrusted_yaml import UntrustedYamlError, load_untrusted_yaml
from stratus.codedist.errors import InvalidPackageError

MANIFEST_NAME = "stratus.yaml"
MAX_MANIFEST_BYTES = 1024 * 1024
MAX_REQUIREMENTS = 200
MAX_PROBLEMS = 5  # validation problems named in one error; the rest are counted
DEFAULT_SDP_PROJECT = "spark-pipeline.yml"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
TRIGGER_CONF_KEY = "pipeline.trigger.interval.secs"

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
ENTRYPOINT = re.compile(rf"{_IDENTIFIER}(?:\.{_IDENTIFIER})*:{_IDENTIFIER}")  # module:function
_REQUIREMENT = r"^\s*[^\s-][^\r\n]*$"  # not empty, one line, not a pip option


class Trigger(BaseModel):
    """When the pipeline runs again; no trigger runs it once."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    interval_secs: float = Field(
        gt=0,
        allow_inf_nan=False,
        description="seconds between runs: an sdp pipeline is updated again every interval; "
        "an app's function receives it and decides",
    )


class Manifest(BaseModel):
    """A stratus pipeline package's manifest: stratus.yaml at the package's root."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        title="stratus.yaml",
        json_schema_extra={
            "allOf": [
                {
                    "if": {"properties": {"kind": {"const": "app"}}},
                    "then": {
                        "required": ["entrypoint"],
                        "properties": {
                            "entrypoint": {"type": "string"},
                            "project": {"type": "null"},
                        },
                    },
                },
                {
                    "if": {"properties": {"kind": {"const": "sdp"}}},
                    "then": {
                        "properties": {
                            "entrypoint": {"type": "null"},
                            "standby": {"not": {"const": "hot"}},
                        }
                    },
                },
            ]
        },
    )

    name: PipelineName = Field(
        description=f"the pipeline's name (a submit may override it): {PIPELINE_NAME_RULE}",
    )
    kind: Literal["app", "sdp"] = Field(
        description="`app`: stratus calls a Python function; `sdp`: a Spark Declarative "
        "Pipelines project"
    )
    entrypoint: str | None = Field(
        default=None,
        validate_default=True,
        description="kind app only (required): the function to call, `package.module:function`; "
        "it is called as function(spark, context)",
        json_schema_extra={"pattern": f"^{ENTRYPOINT.pattern}$"},
    )
    project: str | None = Field(
        default=None,
        validate_default=True,
        description="kind sdp only: the path in the package of the Spark Declarative "
        f"Pipelines project file (default {DEFAULT_SDP_PROJECT})",
    )
    conf: dict[str, Any] = Field(
        default_factory=dict,
        description="the pipeline's conf: Spark settings (`spark.*`) and stratus's "
        "`pipeline.*` keys; a submit's conf overrides them key by key",
        json_schema_extra={"propertyNames": {"pattern": r"^(spark|pipeline)\."}},
    )
    trigger: Trigger | None = Field(default=None, description="absent: run once")
    requirements: list[str] = Field(
        default_factory=list,
        max_length=MAX_REQUIREMENTS,
        description="pip requirement strings installed for the pipeline, one per item "
        "(no pip options)",
        json_schema_extra={"items": {"type": "string", "pattern": _REQUIREMENT}},
    )
    standby: StandbyMode | None = Field(
        default=None,
        description="kind app only: `hot` keeps a standby worker of the pipeline ready on "
        f"another supervisor, promoted in about two seconds when its host dies (conf "
        f"{STANDBY_CONF_KEY}); absent: none, or as the conf says",
    )

    def pipeline_conf(self) -> dict[str, Any]:
        """``conf`` with the trigger as ``pipeline.trigger.interval.secs`` and the standby as
        ``pipeline.standby``, where the manifest sets them."""
        conf = dict(self.conf)
        if self.trigger is not None:
            conf[TRIGGER_CONF_KEY] = self.trigger.interval_secs
        if self.standby is not None:
            conf[STANDBY_CONF_KEY] = self.standby
        return conf

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint_fits_kind(cls, entrypoint: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if kind == "app" and entrypoint is None:
            raise ValueError("required for kind app: the function to run, e.g. wordcount.main:run")
        if kind == "sdp" and entrypoint is not None:
            raise ValueError("only for kind app; an sdp pipeline runs its `project` file")
        if entrypoint is not None and not ENTRYPOINT.fullmatch(entrypoint):
            raise ValueError(
                f"must be package.module:function, e.g. wordcount.main:run (got {echo(entrypoint)})"
            )
        return entrypoint

    @field_validator("project")
    @classmethod
    def _project_fits_kind(cls, project: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if kind == "app" and project is not None:
            raise ValueError("only for kind sdp; an app pipeline runs its `entrypoint`")
        if kind == "sdp" and project is None:
            return DEFAULT_SDP_PROJECT
        return None if project is None else _package_path(project)

    @field_validator("conf")
    @classmethod
    def _valid_conf(cls, conf: dict[str, Any]) -> dict[str, Any]:
        try:
            return validate_pipeline_conf(conf)
        except InvalidConfError as exc:  # its message names the key
            raise ValueError(str(exc)) from None

    @field_validator("requirements")
    @classmethod
    def _valid_requirements(cls, requirements: list[str]) -> list[str]:
        for index, requirement in enumerate(requirements):
            if not re.fullmatch(_REQUIREMENT, requirement):
                raise ValueError(
                    f"item {index} must be one pip requirement on one line, such as "
                    f"'requests>=2.31', not empty nor a pip option (got {echo(requirement)})"
                )
        return requirements

    @model_validator(mode="after")
    def _one_trigger(self) -> Manifest:
        if self.trigger is not None and TRIGGER_CONF_KEY in self.conf:
            raise ValueError(
                f"trigger: both trigger.interval_secs and conf {TRIGGER_CONF_KEY} are set; "
                "keep trigger.interval_secs only"
            )
        return self

    @model_validator(mode="after")
    def _one_standby(self) -> Manifest:
        if self.standby is not None and STANDBY_CONF_KEY in self.conf:
            raise ValueError(
                f"standby: both standby and conf {STANDBY_CONF_KEY} are set; keep standby only"
            )
        problem = standby_problem(self.kind, self.pipeline_conf())
        if problem is not None:
            raise ValueError(problem)
        return self


def standby_problem(kind: str, conf: Mapping[str, Any]) -> str | None:
    """Why a pipeline of ``kind`` with ``conf`` cannot have the standby worker its conf asks
    for, or None. An sdp pipeline's runs are short-lived processes of pyspark's pipelines CLI,
    with no session to hold ready."""
    if kind == "sdp" and wants_standby_worker(conf):
        return (
            "standby: hot is for kind app only; an sdp pipeline cannot keep a standby worker "
            f"(remove standby, or {STANDBY_CONF_KEY})"
        )
    return None


def parse_manifest(text: str, where: str = MANIFEST_NAME) -> Manifest:
    """The manifest in ``text``; InvalidPackageError naming ``where`` and the field at fault."""
    data = _load_yaml(text, where)
    if not isinstance(data, dict):
        found = "nothing" if data is None else f"a {type(data).__name__}"
        raise InvalidPackageError(
            f"{where}: must be a mapping of fields ({', '.join(Manifest.model_fields)}), "
            f"not {found}",
            entry=MANIFEST_NAME,
        )
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_input=True, include_url=False)
        problems = "; ".join(_describe(error) for error in errors[:MAX_PROBLEMS])
        if len(errors) > MAX_PROBLEMS:
            problems += f"; and {len(errors) - MAX_PROBLEMS} more"
        raise InvalidPackageError(f"{where}: {clip(problems)}", entry=MANIFEST_NAME) from None


def manifest_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``stratus.yaml``."""
    return {"$schema": SCHEMA_DIALECT, **Manifest.model_json_schema()}


def manifest_schema_text() -> str:
    """``manifest_json_schema()`` as ``manifest.schema.json`` holds it."""
    return json.dumps(manifest_json_schema(), indent=2) + "\n"


def _package_path(path: str) -> str:
    """``path`` normalised (``./a//b`` is ``a/b``); ValueError if it leaves the package."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\\" in path or "\x00" in path or ".." in parts:
        raise ValueError(
            "must be a relative path inside the package, with '/' and without '..' "
            f"(got {echo(path)})"
        )
    normal = str(PurePosixPath(path))
    if normal == ".":
        raise ValueError(f"must name a file in the package (got {echo(path)})")
    return normal


def _load_yaml(text: str, where: str) -> Any:
    try:
        return load_untrusted_yaml(text, max_bytes=MAX_MANIFEST_BYTES)
    except UntrustedYamlError as exc:
        raise InvalidPackageError(f"{where}: {exc}", entry=MANIFEST_NAME) from None


def _describe(error: ErrorDetails) -> str:
    """One pydantic error as ``field: what is wrong (got value)``."""
    field = clip(".".join(str(part) for part in error["loc"] if part != "[key]"), MAX_ECHO_CHARS)
    kind = error["type"]
    if kind == "value_error":
        message = str(error.get("ctx", {}).get("error", error["msg"]))
        return f"{field}: {clip(message)}" if field else clip(message)
    if kind == "missing":
        return f"{field}: required field is missing"
    if kind == "extra_forbidden":
        return f"{field}: {_unknown_field(error['loc'])}"
    message = error["msg"].replace("Input should be", "must be", 1)
    message = message[0].lower() + message[1:]
    return f"{field}: {message} (got {echo(error['input'])})"


def _unknown_field(loc: tuple[int | str, ...]) -> str:
    model: type[BaseModel] = Trigger if loc[0] == "trigger" else Manifest
    fields = list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), fields, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown field; the fields are {', '.join(fields)}{hint}"


if __name__ == "__main__":
    print(manifest_schema_text(), end="")
