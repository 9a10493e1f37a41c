"""The warm workers' memory and their defaults, as pure logic: the budget's derivation, the
machine as /proc and the cgroup file system describe it (files written here, laid out as the
kernel lays them out), ``plan_warm``'s decisions, and what the configuration turns on.

The scenarios on a real ZooKeeper with real processes are ``test_warm_defaults``'s.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from stratus.api.records import MIB, WarmHeld, WarmMemory
from stratus.cli.supervisor_command import with_overrides
from stratus.config import load_config
from stratus.errors import ConfigError
from stratus.supervisor.registration import WARM_USE_STEP_MB, _shows_the_same
from stratus.supervisor.settings import WarmSettings, warm_settings
from stratus.supervisor.warm_memory import (
    BUDGET_ENV_VAR,
    Machine,
    WarmInputs,
    groups_rss,
    plan_warm,
    read_machine,
    warm_budget,
)

GIB = 1024 * MIB
ROOMY = Machine(total=16 * GIB, available=12 * GIB)


def inputs(**values: object) -> WarmInputs:
    base: dict[str, object] = {
        "wanted": 2,
        "costs": (),
        "starting": 0,
        "budget": 4 * GIB,
        "estimate": 768 * MIB,
        "machine": ROOMY,
    }
    return WarmInputs(**{**base, **values})  # type: ignore[arg-type]


# ---------------------------------------------------------------------- the decision


def test_a_free_slot_with_room_in_the_budget_and_the_machine_gets_a_warm_worker() -> None:
    plan = plan_warm(inputs())
    assert plan.start and plan.keep == 0 and plan.held is None


def test_warm_workers_start_one_at_a_time() -> None:
    plan = plan_warm(inputs(costs=(768 * MIB,), starting=1))
    assert not plan.start and plan.keep == 1 and plan.held is None


def test_another_warm_worker_past_the_budget_is_held_back_and_says_why() -> None:
    plan = plan_warm(inputs(costs=(700 * MIB,), budget=1024 * MIB))
    assert not plan.start and plan.keep == 1
    assert plan.held is WarmHeld.BUDGET
    assert plan.why is not None and "700 of 1024 MiB" in plan.why


def test_a_tiny_budget_starts_none() -> None:
    plan = plan_warm(inputs(budget=1 * MIB))
    assert not plan.start and plan.keep == 0 and plan.held is WarmHeld.BUDGET


def test_warm_workers_grown_past_the_budget_go_the_newest_first() -> None:
    plan = plan_warm(inputs(costs=(800 * MIB, 800 * MIB), budget=1500 * MIB))
    assert plan.keep == 1 and plan.held is WarmHeld.BUDGET and not plan.start


def test_none_starts_when_it_would_leave_the_machine_short() -> None:
    machine = Machine(total=8 * GIB, available=1200 * MIB)  # keeps 819 MiB available
    plan = plan_warm(inputs(machine=machine))
    assert not plan.start and plan.held is WarmHeld.MEMORY_SHORT
    assert plan.why is not None and "1200 MiB available" in plan.why


def test_a_short_machine_releases_a_warm_worker_per_decision() -> None:
    machine = Machine(total=8 * GIB, available=500 * MIB)
    plan = plan_warm(inputs(costs=(700 * MIB, 700 * MIB), machine=machine))
    assert plan.keep == 1 and plan.held is WarmHeld.MEMORY_SHORT and not plan.start


def test_a_machine_of_unknown_memory_is_held_to_the_budget_alone() -> None:
    assert plan_warm(inputs(machine=None)).start


def test_warm_workers_past_the_free_slots_go_without_blame_on_memory() -> None:
    plan = plan_warm(inputs(wanted=1, costs=(700 * MIB, 700 * MIB)))
    assert plan.keep == 1 and plan.held is None and not plan.start


def test_no_warm_worker_starts_while_a_pipelines_worker_starts() -> None:
    assert not plan_warm(inputs(starting=1)).start  # the pool counts a pipeline's start in


# ---------------------------------------------------------------------- the budget


def test_the_default_budget_is_a_quarter_of_the_machine() -> None:
    budget = warm_budget(None, ROOMY, {})
    assert budget.bytes == 4 * GIB and "25% of the machine's 16384 MiB" in budget.source


def test_the_setting_wins_over_the_environment_which_wins_over_the_derivation() -> None:
    assert warm_budget(100, ROOMY, {BUDGET_ENV_VAR: "50"}).mb == 100
    assert warm_budget(None, ROOMY, {BUDGET_ENV_VAR: "50"}).mb == 50
    assert warm_budget(None, None, {}).bytes == 0  # unknown memory: none by default
    with pytest.raises(ValueError, match=f"{BUDGET_ENV_VAR} must be a whole number"):
        warm_budget(None, ROOMY, {BUDGET_ENV_VAR: "lots"})


# ---------------------------------------------------------------------- the machine


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


MEMINFO = "MemTotal:       16777216 kB\nMemFree:  100 kB\nMemAvailable:   12582912 kB\n"


def test_the_machine_is_its_meminfo_without_a_cgroup_limit(tmp_path: Path) -> None:
    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    write(proc / "meminfo", MEMINFO)
    write(proc / "self" / "cgroup", "0::/user.slice\n")
    write(cgroups / "user.slice" / "memory.max", "max\n")
    machine = read_machine(proc, cgroups)
    assert machine == Machine(total=16 * GIB, available=12 * GIB, cgroup_limit=None)


def test_a_cgroup_v2_limit_of_a_parent_bounds_the_machine_and_its_room(tmp_path: Path) -> None:
    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    write(proc / "meminfo", MEMINFO)
    write(proc / "self" / "cgroup", "0::/stratus.slice/supervisor.service\n")
    write(cgroups / "stratus.slice" / "memory.max", f"{4 * GIB}\n")
    write(cgroups / "stratus.slice" / "memory.current", f"{3 * GIB}\n")
    write(cgroups / "stratus.slice" / "memory.stat", f"anon 1\ninactive_file {1 * GIB}\n")
    write(cgroups / "stratus.slice" / "supervisor.service" / "memory.max", "max\n")
    machine = read_machine(proc, cgroups)
    assert machine == Machine(total=4 * GIB, available=2 * GIB, cgroup_limit=4 * GIB)
    assert "its cgroup's limit" in warm_budget(None, machine, {}).source


def test_a_cgroup_v1_memory_limit_counts_and_its_no_limit_does_not(tmp_path: Path) -> None:
    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    write(proc / "meminfo", MEMINFO)
    write(proc / "self" / "cgroup", "5:memory:/docker/abc\n4:cpu:/docker/abc\n0::/\n")
    box = cgroups / "memory" / "docker" / "abc"
    write(box / "memory.limit_in_bytes", f"{2 * GIB}\n")
    write(box / "memory.usage_in_bytes", f"{1 * GIB}\n")
    write(box / "memory.stat", "total_inactive_file 0\n")
    write(cgroups / "memory" / "memory.limit_in_bytes", "9223372036854771712\n")
    assert read_machine(proc, cgroups) == Machine(2 * GIB, 1 * GIB, 2 * GIB)


def test_no_meminfo_is_an_unknown_machine(tmp_path: Path) -> None:
    assert read_machine(tmp_path / "proc", tmp_path / "cgroup") is None


def test_a_process_groups_resident_memory_is_summed_from_proc() -> None:
    found = groups_rss({os.getpgrp()})
    assert found[os.getpgrp()] > 10 * MIB  # this Python at least


# ---------------------------------------------------------------------- the registration


def test_the_registration_is_rewritten_for_events_not_for_drift() -> None:
    shown = WarmMemory(machine_mb=16384, budget_mb=4096, used_mb=700, up=1, ready=1)
    drift = shown.model_copy(update={"used_mb": 700 + WARM_USE_STEP_MB - 1})
    assert _shows_the_same(shown, drift)
    assert not _shows_the_same(shown, drift.model_copy(update={"used_mb": 800}))
    assert not _shows_the_same(shown, shown.model_copy(update={"up": 2}))
    assert not _shows_the_same(shown, shown.model_copy(update={"held": WarmHeld.BUDGET}))
    assert not _shows_the_same(None, shown)


# ---------------------------------------------------------------------- the configuration


def settings_of(*overrides: str) -> WarmSettings:
    return warm_settings(load_config(overrides=overrides, environ={}))


def test_warm_workers_are_on_by_default() -> None:
    warm = settings_of()
    assert warm.enabled and warm.memory_mb is None and warm.off is None


def test_the_default_turns_them_off_for_workers_of_other_users_and_says_why() -> None:
    warm = settings_of(
        "supervisor.worker.run.as=shared", "supervisor.worker.users=[etl]", "supervisor.slots=1"
    )
    assert not warm.enabled and warm.off is WarmHeld.RUN_AS
    assert warm.off_why is not None and "'shared'" in warm.off_why


def test_the_supervisor_commands_options_keep_a_default_a_default() -> None:
    """``stratus supervisor --slots``/``--id`` revalidate the configuration: the warm
    workers' default must not turn into an explicit ``true`` (refused with other users)."""
    conf = load_config(
        None, ["supervisor.worker.run.as=shared", "supervisor.worker.users=[etl]"], environ={}
    )
    again = with_overrides(conf, slots=1, supervisor_id="s1")
    assert warm_settings(again).off is WarmHeld.RUN_AS
    assert again.supervisor_slots == 1 and again.supervisor_id == "s1"


def test_asking_for_them_with_workers_of_other_users_is_refused_at_load() -> None:
    with pytest.raises(ConfigError, match=re.escape("supervisor.worker.warm works only with")):
        settings_of(
            "supervisor.worker.run.as=shared",
            "supervisor.worker.users=[etl]",
            "supervisor.worker.warm=true",
        )


def test_the_default_keeps_them_off_a_cluster_master_and_asking_keeps_them_there() -> None:
    on_cluster = "pipeline.spark.master=spark://spark-master:7077"
    assert settings_of(on_cluster).off is WarmHeld.MASTER
    assert settings_of(on_cluster, "supervisor.worker.warm=true").enabled


def test_false_or_a_budget_of_zero_turns_them_off() -> None:
    assert settings_of("supervisor.worker.warm=false").off is WarmHeld.OFF
    assert settings_of("supervisor.worker.warm.memory.mb=0").off is WarmHeld.OFF
    assert settings_of("supervisor.worker.warm.memory.mb=2048").memory_mb == 2048
    with pytest.raises(ConfigError, match=re.escape("supervisor.worker.warm.memory.mb")):
        settings_of("supervisor.worker.warm.memory.mb=-1")
