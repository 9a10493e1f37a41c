"""The registry of fencing methods: one entry per method, by name, in the order the docs
list them. Everything that names the methods is made from it: the parse of a methods list
and its errors, the docs' table (``python -m stratus.ha.fencing`` prints it), and
the forms that the configuration's descriptions name (a test holds them in step)::

    specs = parse_methods("graceful, shell(/usr/local/bin/fence-nimbus)")
    fence = create_method(specs[1], context)

A new method is a module beside this one whose ``METHOD`` is a ``FenceMethod``, and its
entry below; ``not_for_supervisors`` decides whether the leader may aim it at a supervisor.
"""

from __future__ import annotations

import re

from stratus.ha.errors import FencingConfigError
from stratus.ha.fencing import epoch, graceful, process, shell, sshfence
from stratus.ha.fencing.protocol import Fence, FenceMethod, FencingContext, MethodSpec

METHODS_KEY = "ha.fencing.methods"
REGISTRY: dict[str, FenceMethod] = {
    method.name: method
    for method in (graceful.METHOD, epoch.METHOD, shell.METHOD, process.METHOD, sshfence.METHOD)
}
_ENTRY = re.compile(r"^([a-z][a-z_-]*)(?:\((.*)\))?$", re.DOTALL)


def method_names() -> tuple[str, ...]:
    """Every registered method's name, in the registry's order."""
    return tuple(REGISTRY)


def supervisor_method_names() -> tuple[str, ...]:
    """The methods the leader may aim at a silent supervisor."""
    return tuple(name for name, method in REGISTRY.items() if method.not_for_supervisors is None)


def method_forms(names: tuple[str, ...]) -> str:
    """The ways to write the ``names``, as the configuration's descriptions list them:
    ``shell(command), process, process(pid file)``."""
    return ", ".join(usage.form for name in names for usage in REGISTRY[name].usages)


def methods_table() -> str:
    """The docs' table of methods (markdown), one row per way to write each."""
    rows = [
        f"| `{usage.form}` | {usage.what} |"
        for method in REGISTRY.values()
        for usage in method.usages
    ]
    return "\n".join(["| method | what it does |", "|---|---|", *rows])


def with_methods_table(page: str) -> str:
    """``page`` with its table of methods (from its header row to the first blank line)
    replaced by the registry's; a page without that header is an error naming it."""
    header = methods_table().splitlines()[0]
    if header not in page:
        raise ValueError(f"the page has no table of fencing methods: no line {header!r}")
    before, _, rest = page.partition(header)
    _, blank, after = rest.partition("\n\n")
    return f"{before}{methods_table()}{blank}{after}"


def split_entries(text: str) -> list[str]:
    """Split at commas and new lines outside parentheses; empty entries dropped."""
    entries: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char in ",\n" and depth == 0:
            entries.append("".join(current).strip())
            current = []
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current.append(char)
    entries.append("".join(current).strip())
    return [entry for entry in entries if entry]


def parse_methods(
    text: str,
    key: str = METHODS_KEY,
    names: tuple[str, ...] | None = None,
) -> list[MethodSpec]:
    """``ha.fencing.methods`` (or the list ``key`` names, of the methods ``names``; default:
    every registered one) as method specs; ``FencingConfigError`` naming a bad entry."""
    allowed = method_names() if names is None else names
    specs = []
    for entry in split_entries(text):
        match = _ENTRY.match(entry)
        if match is None:
            raise FencingConfigError(
                f"{key}: {entry!r} is not a method: write name or name(argument), "
                f"name one of {', '.join(allowed)}"
            )
        name, argument = match.group(1), match.group(2)
        if name not in allowed:
            raise FencingConfigError(
                f"{key}: unknown fencing method {name!r} in {entry!r}: use {', '.join(allowed)}"
            )
        argument = argument.strip() if argument is not None else None
        REGISTRY[name].check_argument(argument, entry, key)
        specs.append(MethodSpec(name, argument or None))
    if not specs:
        raise FencingConfigError(
            f"{key} is empty: give at least one method, e.g. 'graceful, epoch'"
        )
    return specs


def create_method(spec: MethodSpec, context: FencingContext) -> Fence:
    """The fence a (parsed) spec names, ready to fence."""
    return REGISTRY[spec.name].create(spec.argument, context)
