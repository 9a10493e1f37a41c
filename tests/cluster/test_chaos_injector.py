"""The chaos injector's pause and stress on real processes: a pause stops its victim and always
continues it, a stress runs its burners and leaves none behind, and the injector records both
in the trail as the oracle reads them. No cluster is needed: the victim is a sleeping child
of the test, which stands where a host's supervisor would."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from stratus.chaos.faults import Action, Fault, Target
from stratus.chaos.promotions import check_promotions_explained
from stratus.chaos.trail_events import Clocks, events_of, load_events
from stratus.client import NimbusClient
from stratus.process import ProcessGroup, live_in_group
from stratus.trail import WORKER_PROMOTED, Actor, TrailRecorder
from tests.harness.chaos_cluster import ChaosCluster, Restartable
from tests.harness.chaos_injector import Injector, Workload, stopped, stressed
from tests.harness.zkfixtures import wait_until

WAIT_SECS = 10.0


def state(pid: int) -> str:
    """The kernel's state letter of process ``pid`` (``T``: stopped by a signal)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def sleeper() -> Iterator[ProcessGroup]:
    """A sleeping Python with a ``sleep`` child, leading a process group."""
    code = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"
    group = ProcessGroup.start([sys.executable, "-c", code])
    wait_until(lambda: len(live_in_group(group.pid)) == 2, WAIT_SECS, "the sleepers to start")
    try:
        yield group
    finally:
        group.kill()


@pytest.mark.parametrize("whole_group", [False, True], ids=["process", "group"])
def test_a_pause_stops_its_victim_and_continues_it_even_when_the_injector_fails(
    sleeper: ProcessGroup, whole_group: bool
) -> None:
    victims = live_in_group(sleeper.pid) if whole_group else [sleeper.pid]
    failed = pytest.raises(RuntimeError, match="the injector failed")
    with failed, stopped(sleeper.pid, group=whole_group) as done:
        assert done
        wait_until(
            lambda: all(state(pid) == "T" for pid in victims), WAIT_SECS, f"{victims} to stop"
        )
        raise RuntimeError("the injector failed")
    assert "T" not in [state(pid) for pid in victims]  # continued: running or asleep
    assert sleeper.poll() is None


def test_a_stress_runs_its_burners_and_leaves_none_behind_even_when_the_injector_fails(
    tmp_path: Path,
) -> None:
    failed = pytest.raises(RuntimeError, match="the injector failed")
    with failed, stressed(tmp_path, hold_secs=1.0, cores=2) as burners:
        cpu, io = burners.groups
        wait_until(
            lambda: len(live_in_group(cpu)) > burners.count,  # their shell and 2 burners
            WAIT_SECS,
            "the CPU burners to start",
        )
        wait_until(burners.io_file.exists, WAIT_SECS, "the writer to write")
        assert live_in_group(io)
        raise RuntimeError("the injector failed")
    assert live_in_group(cpu) == [] and live_in_group(io) == []
    assert not burners.io_file.exists()


class OneHost:
    """What the injector's pause and stress use of a ``ChaosCluster``: host h1, whose
    supervisor is ``supervisor`` (a real process) and whose data directory is ``data``."""

    def __init__(self, supervisor: ProcessGroup, data: Path) -> None:
        self._supervisor = supervisor
        self.hosts = {"h1": SimpleNamespace(command=[])}  # this machine's namespace
        self.nodes = SimpleNamespace(supervisors={"h1": SimpleNamespace(local_dir=data)})

    def process(self, target: Target, host: str) -> Restartable:
        assert (target, host) == (Target.SUPERVISOR, "h1")
        return self._supervisor

    def beat_agent(self, host: str) -> int | None:
        """The beat agent of h1's supervisor: the same real process stands for it."""
        return self._supervisor.pid if host == "h1" else None


class RunningOn:
    """What the injector asks a client: the streaming worker's heartbeat, RUNNING on h1."""

    def workers(self, pipeline: str) -> Any:
        beat = SimpleNamespace(state=SimpleNamespace(value="RUNNING"), pid=1, supervisor="h1")
        return SimpleNamespace(on_assigned=lambda: beat)


def test_the_injector_pauses_the_beat_agent_of_the_streaming_workers_supervisor(
    sleeper: ProcessGroup, tmp_path: Path
) -> None:
    history = tmp_path / "history-driver.jsonl"
    driver = TrailRecorder.open(history, Actor("client", "chaos"))
    cluster = cast(ChaosCluster, OneHost(sleeper, tmp_path))
    client = cast(NimbusClient, RunningOn())
    injector = Injector(cluster, client, driver, Workload("p", b"", ""))
    with contextlib.closing(driver):
        injector.apply(Fault(Action.PAUSE, Target.BEAT_AGENT, hold_secs=0.3))
    report = os.waitid(os.P_PID, sleeper.pid, os.WCONTINUED | os.WNOHANG)
    assert report is not None and report.si_code == os.CLD_CONTINUED
    [paused] = load_events([history])
    assert (paused.name, paused.get("of_pid"), paused.get("target")) == (
        "process_paused",
        sleeper.pid,
        "beat_agent",
    )
    assert paused.get("supervisor") == "h1" and paused.get("secs") >= 0.3


def test_the_injector_records_a_pause_and_a_stress_as_the_oracle_reads_them(
    sleeper: ProcessGroup, tmp_path: Path
) -> None:
    history = tmp_path / "history-driver.jsonl"
    driver = TrailRecorder.open(history, Actor("client", "chaos"))
    cluster = cast(ChaosCluster, OneHost(sleeper, tmp_path))
    injector = Injector(cluster, cast(NimbusClient, None), driver, Workload("p", b"", ""))
    with contextlib.closing(driver):
        injector.apply(Fault(Action.PAUSE, Target.SUPERVISOR, "h1", 0.5))
        # the kernel's report to the parent: it was stopped, then continued
        report = os.waitid(os.P_PID, sleeper.pid, os.WCONTINUED | os.WNOHANG)
        assert report is not None and report.si_code == os.CLD_CONTINUED
        assert state(sleeper.pid) != "T"
        injector.apply(Fault(Action.STRESS, Target.HOST, "h1", 1.0))
    paused, stress = load_events([history])
    assert (paused.name, paused.get("of_pid"), paused.get("target")) == (
        "process_paused",
        sleeper.pid,
        "supervisor",
    )
    assert paused.get("supervisor") == "h1" and paused.get("secs") >= 0.5
    assert (stress.name, stress.get("supervisor")) == ("host_stressed", "h1")
    assert stress.get("burners") >= 1 and stress.get("cpu") in ("stress-ng", "python")
    assert stress.get("secs") >= 1.0

    def promoted(floor: float) -> dict[str, Any]:  # right after the stress, off h1
        at = stress.at
        return {
            "wall": at.wall + 0.1,
            "mono": at.mono + 0.1,
            "host": at.host,
            "pid": 5,
            "event": WORKER_PROMOTED,
            "pipeline": "p",
            "from_supervisor": "h1",
            "to_supervisor": "h2",
            "how": "floor",
            "silent_secs": stress.get("secs") + 0.2,  # silent since before the stress
            "floor_secs": floor,
        }

    def judged(floor: float) -> list[str]:
        trail = [dict(paused.fields), dict(stress.fields), promoted(floor)]
        return [v.check for v in check_promotions_explained(events_of(trail), Clocks())]

    assert judged(floor=0.4) == []  # the pause outlasted this floor
    assert judged(floor=5.0) == ["promotions_explained"]  # the stress explains nothing
