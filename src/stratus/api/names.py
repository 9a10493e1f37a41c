"""Pipeline names: one rule, one check, one pydantic type.

    check_pipeline_name("etl-daily")       # "etl-daily"
    check_pipeline_name("../etc")          # InvalidNameError naming the rule

    class Manifest(BaseModel):
        name: PipelineName                 # the same rule, as a validation error

A name becomes a znode name and a directory name, so it is checked before it is used as
either: on the client before a request, on the nimbus before a ZooKeeper path, and in
every manifest.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from stratus.api.echo import echo
from stratus.api.errors import InvalidNameError

PIPELINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
PIPELINE_NAME_RULE = "1-100 letters, digits, '_' and '-', starting with a letter or digit"


def is_pipeline_name(name: str) -> bool:
    return PIPELINE_NAME.fullmatch(name) is not None  # match() would let a trailing newline in


def check_pipeline_name(name: str) -> str:
    """``name`` if it follows the rule; InvalidNameError (``invalid_name``) naming it if not."""
    if not is_pipeline_name(name):
        raise InvalidNameError(f"invalid pipeline name {echo(name)}: use {PIPELINE_NAME_RULE}")
    return name


def _validated(name: str) -> str:
    if not is_pipeline_name(name):
        raise ValueError(f"must be {PIPELINE_NAME_RULE} (got {echo(name)})")
    return name


PipelineName = Annotated[
    str,
    AfterValidator(_validated),
    Field(
        description=f"a pipeline's name: {PIPELINE_NAME_RULE}",
        json_schema_extra={"pattern": PIPELINE_NAME.pattern},  # checked by _validated
    ),
]


# A principal: a user or service of the token file (``principal=``), an owner or a reader of
# a pipeline (``pipeline.owners``, ``pipeline.readers``), the caller in the audit log.
PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")
PRINCIPAL_RULE = "a letter or digit, then letters, digits, '.', '_', '@', '+' or '-' (at most 128)"


def is_principal(name: str) -> bool:
    return PRINCIPAL.fullmatch(name) is not None
