"""The bases of stratus's stored records: how a record is encoded, and how a record the leader
reads and writes back keeps what a newer release wrote into it (docs/upgrades.md).

Kept apart from ``stratus.api.records`` so that the records of one concept (the standby
workers' in ``stratus.api.standby_workers``) live in modules of their own on the same bases.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    ValidatorFunctionWrapHandler,
    model_validator,
)


class StoredRecord(BaseModel):
    """A record as a znode or a pulse holds it: frozen, and what a newer release added is
    ignored on a read."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    def encode(self) -> bytes:
        """The record as stored in a znode (a ``RewrittenRecord`` keeps what a newer writer
        added)."""
        return self.model_dump_json().encode()


def stored_bytes(record: BaseModel) -> bytes:
    """``record`` as written to its store: its JSON, with the fields that a newer release
    wrote into it, and into the records it holds, put back (``RewrittenRecord``). Done here
    rather than by a serializer of the model, which would hide the model's fields from the
    API's schema."""
    data = record.model_dump(mode="json")
    kept = _with_unknown(record, data)
    if kept == data:
        return record.model_dump_json().encode()
    return json.dumps(kept, separators=(",", ":"), ensure_ascii=False).encode()


def _with_unknown(value: Any, data: Any) -> Any:
    """``data`` (``value`` dumped as JSON) with the unknown fields of every
    ``RewrittenRecord`` in ``value`` merged back in."""
    if isinstance(value, BaseModel) and isinstance(data, dict):
        merged = dict(value._unknown) if isinstance(value, RewrittenRecord) else {}
        merged.update(
            {
                key: _with_unknown(getattr(value, key), item)
                if key in type(value).model_fields
                else item
                for key, item in data.items()
            }
        )
        return merged
    if isinstance(value, list | tuple) and isinstance(data, list):
        return [_with_unknown(v, d) for v, d in zip(value, data, strict=False)]
    if isinstance(value, dict) and isinstance(data, dict):
        return {k: _with_unknown(value[k], d) if k in value else d for k, d in data.items()}
    return data


class RewrittenRecord(BaseModel):
    """A record that is read, changed and written back: the fields a newer release wrote,
    which this one does not know, are kept aside on the read and written back with it
    (``encode``); they are never shown in an answer of the API, whose redaction of secrets
    knows only this release's fields."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    _unknown: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_unknown(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        record = handler(data)
        if isinstance(data, dict) and isinstance(record, RewrittenRecord):
            unknown = {key: value for key, value in data.items() if key not in cls.model_fields}
            if unknown:
                record._unknown = unknown
        return record

    def encode(self) -> bytes:
        """The record as stored, with the fields a newer release wrote kept."""
        return stored_bytes(self)

    @property
    def unknown_fields(self) -> dict[str, Any]:
        """What a newer release wrote into this record that this one does not know."""
        return dict(self._unknown)
