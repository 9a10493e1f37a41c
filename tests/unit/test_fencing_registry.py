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
from stratus.ha.fencing.registry import method_forms, methods_table
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
    """What is wrong with ``key``'s description and its row in docs/configuration.md: they
    must list the forms of exactly the methods the key takes, in the registry's order."""
    forms = method_forms(LISTING_KEYS[key]())
    wrong = []
    if f"methods tried in order: {forms} (see" not in description(key):
        wrong.append(f"config.py's description of {key} does not list: {forms}")
    if description(key) not in documented_row(key):
        wrong.append(f"docs/configuration.md's row of {key} is not config.py's description")
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
    # the configuration's descriptions do not name it yet: the check says what to add
    assert undescribed("ha.fencing.methods") == [
        "config.py's description of ha.fencing.methods does not list: graceful, epoch, "
        "shell(command), process, process(pid file), sshfence, sshfence(user:port), knock(port)"
    ]
    assert len(undescribed("nimbus.supervisor.fencing.methods")) == 1


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
    assert len(undescribed("ha.fencing.methods")) == 1
