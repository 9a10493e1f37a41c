"""The registry of fencing methods is the one place that names them: the docs' table, the
errors of a methods list, the supervisor's list and the configuration's descriptions all
follow it, and a method registered there shows up in each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from stratus.config import StratusConfig
from stratus.ha.errors import FencingConfigError
from stratus.ha.fencing import (
    REGISTRY,
    FenceTarget,
    FencingContext,
    MethodSpec,
    StandbyAsker,
    Usage,
    create_method,
    method_names,
    parse_methods,
    supervisor_method_names,
)
from stratus.ha.fencing.protocol import refuse_argument
from stratus.ha.fencing.registry import methods_table, with_methods_table
from stratus.nimbus.settings import supervisor_fencing_methods

ROOT = Path(__file__).resolve().parents[2]
ZKFC_DOC = ROOT / "docs" / "zkfc.md"
CONFIGURATION_DOC = ROOT / "docs" / "configuration.md"
# each key whose description lists methods, and which methods it lists
LISTING_KEYS = {
    "ha.fencing.methods": method_names,
    "nimbus.supervisor.fencing.methods": supervisor_method_names,
}


def description(key: str) -> str:
    field = next(f for f in StratusConfig.model_fields.values() if f.alias == key)
    assert field.description is not None
    return field.description


def documented_row(key: str) -> str:
    rows = [
        line
        for line in CONFIGURATION_DOC.read_text().splitlines()
        if line.startswith(f"| `{key}` |")
    ]
    assert len(rows) == 1, f"docs/configuration.md has {len(rows)} rows of {key}"
    return rows[0]


def undescribed(key: str) -> list[str]:
    """What is wrong with ``key``'s description and its row in docs/configuration.md: it
    points at zkfc.md's table (so a new method changes no description), every method it
    names as an example is one the key takes, and the row is the description."""
    wrong = []
    text = description(key)
    if "zkfc.md" not in text or "table of methods" not in text:
        wrong.append(f"the description of {key} does not point at zkfc.md's table of methods")
    named = set(re.findall(r"\b([a-z]+)(?:\([^)]*\))?(?=, )", text.partition(":")[2]))
    unknown = sorted(named & set(method_names()) - set(LISTING_KEYS[key]()))
    if unknown:
        wrong.append(f"the description of {key} names methods it does not take: {unknown}")
    if text not in documented_row(key):
        wrong.append(f"docs/configuration.md's row of {key} is not the description")
    return wrong


@dataclass(frozen=True)
class KnockFence:
    port: int

    def fence(self, target: FenceTarget) -> bool:
        return True


class KnockMethod:
    """A method as a new module would add it: pure logic, for the registry's sake only."""

    name = "knock"
    usages = (Usage("knock(port)", "knocks on `port` of the old active's host"),)
    not_for_supervisors: str | None = None

    def check_argument(self, argument: str | None, entry: str, key: str) -> None:
        if not (argument and argument.isdigit()):
            raise FencingConfigError(f"{key}: {entry!r} needs the port to knock on: knock(7000)")

    def create(self, argument: str | None, context: FencingContext) -> KnockFence:
        assert argument is not None
        return KnockFence(int(argument))


class SelfFencingMethod(KnockMethod):
    name = "selfish"
    usages = (Usage("selfish", "trusts the service to stop itself"),)
    not_for_supervisors = "a supervisor stops itself anyway"

    def check_argument(self, argument: str | None, entry: str, key: str) -> None:
        refuse_argument(self.name, argument, entry, key)


def no_service(address: str, timeout: float) -> StandbyAsker:
    raise AssertionError(f"a knock asks no service, not {address}")


CONTEXT = FencingContext(timeout=1.0, graceful_timeout=1.0, connect=no_service)


# ---------------------------------------------------------------------- in step today


def test_the_docs_table_of_methods_is_the_registrys() -> None:
    assert methods_table() in ZKFC_DOC.read_text(), (
        "docs/zkfc.md's table of fencing methods is not the registry's: "
        "replace it with the output of `python -m stratus.ha.fencing`"
    )


@pytest.mark.parametrize("key", sorted(LISTING_KEYS))
def test_the_configuration_lists_the_methods_each_key_takes(key: str) -> None:
    assert undescribed(key) == []


def test_only_the_methods_that_can_fence_a_supervisor_are_in_its_list() -> None:
    assert supervisor_method_names() == ("shell", "process", "sshfence")


# ---------------------------------------------------------------------- a new method


def test_a_new_method_registered_shows_up_in_the_docs_errors_and_descriptions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(REGISTRY, "knock", KnockMethod())

    # the docs' table has its row, so the committed table is out of step
    assert "| `knock(port)` | knocks on `port` of the old active's host |" in methods_table()
    assert methods_table() not in ZKFC_DOC.read_text()
    # an unknown method's error offers it, in both lists
    with pytest.raises(FencingConfigError, match=r"use graceful, .*, sshfence, knock$"):
        parse_methods("stonith")
    with pytest.raises(FencingConfigError, match=r"use shell, process, sshfence, knock$"):
        supervisor_fencing_methods("stonith")
    # its own argument check makes the bad-argument error
    with pytest.raises(FencingConfigError, match=r"ha\.fencing\.methods: 'knock\(x\)' needs"):
        parse_methods("graceful, knock(x)")
    # a good entry is parsed and creates its fence, for the zkfc and for the leader
    assert parse_methods("knock(7000)") == [MethodSpec("knock", "7000")]
    assert supervisor_fencing_methods("knock(7000)") == (MethodSpec("knock", "7000"),)
    assert create_method(MethodSpec("knock", "7000"), CONTEXT) == KnockFence(7000)
    # nothing else to write: `make docs` puts its row in zkfc.md's table, and the
    # configuration's descriptions point at that table
    written = with_methods_table(ZKFC_DOC.read_text())
    assert methods_table() in written and "knock(port)" in written
    assert undescribed("ha.fencing.methods") == []
    assert undescribed("nimbus.supervisor.fencing.methods") == []


def test_a_new_method_that_cannot_fence_a_supervisor_is_refused_in_its_list_with_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(REGISTRY, "selfish", SelfFencingMethod())

    assert "selfish" in method_names()
    assert "selfish" not in supervisor_method_names()
    assert parse_methods("selfish") == [MethodSpec("selfish")]
    with pytest.raises(
        FencingConfigError,
        match=re.escape(
            "nimbus.supervisor.fencing.methods: leave out selfish: a supervisor stops itself anyway"
        ),
    ):
        supervisor_fencing_methods("shell(x), selfish")
    assert undescribed("nimbus.supervisor.fencing.methods") == []
