"""YAML from outside (a package's manifest, its project file), parsed with bounded cost.

PyYAML's safe loader still expands anchors and aliases: a few hundred bytes of nested
aliases (a "billion laughs") build gigabytes of objects. Untrusted YAML here is bounded in
size before parsing and may not use anchors or aliases at all, which plain configuration
never needs; a key given twice in one mapping is refused too (YAML would keep the last)::

    load_untrusted_yaml("a: 1\\n", max_bytes=1024)           # {'a': 1}
    load_untrusted_yaml("a: &x [1]\\nb: *x\\n", max_bytes=1024) # UntrustedYamlError
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent


class UntrustedYamlError(ValueError):
    """The text is too large, not YAML, or uses what untrusted YAML may not (aliases)."""


class _BoundedLoader(yaml.SafeLoader):
    """A safe loader without anchors, aliases or duplicate keys."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent) or getattr(event, "anchor", None) is not None:
            what = "aliases (*name)" if isinstance(event, AliasEvent) else "anchors (&name)"
            mark: yaml.error.Mark | None = getattr(event, "start_mark", None)
            raise yaml.composer.ComposerError(None, None, f"{what} are not allowed here", mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {str(key)[:80]!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_untrusted_yaml(text: str, *, max_bytes: int) -> Any:
    """The document in ``text``; UntrustedYamlError if it is over ``max_bytes`` or not allowed."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise UntrustedYamlError(f"{size} bytes, over the limit of {max_bytes} bytes")
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise UntrustedYamlError(f"not valid YAML: {_problem(exc)}") from None
    except RecursionError:
        raise UntrustedYamlError("not valid YAML: nested too deeply") from None


def _problem(exc: yaml.YAMLError) -> str:
    """``line L, column C: problem`` without PyYAML's quoted snippet."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return " ".join(str(exc).split())[:300]
