"""The base of every section of the configuration: one pydantic model per key prefix.

A section holds the keys of one prefix (``zookeeper.*``, ``nimbus.*``), each a field whose
alias is its dotted key. ``StratusConfig`` (``model.py``) inherits every section, so that a
file stays one flat mapping of dotted keys and every key is an attribute of the
configuration itself (``conf.zookeeper_root``). A section's docstring heads its table in
docs/configuration.md (``reference.py``).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """The keys of one prefix: frozen, unknown keys refused, set by name or dotted key."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    prefix: ClassVar[str]  # every key of the section starts with it and a dot
