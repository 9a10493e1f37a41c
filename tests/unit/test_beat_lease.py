"""The beat lease: its keys and their checks, the settings and spec fields they become, the
beat agent's arithmetic (a beat renews from its start, a late or uncounted one renews
nothing), its config file, and what the control loop's keeper makes of ``lease.beat``.

The agent runs here against a stand-in of the beat board and a hand-driven clock; the real
pacemakers are in ``tests/cluster/test_beat_agent.py``."""

from __future__ import annotations

import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from stratus.api.standby_workers import STANDBY_CONF_KEY, BeatLease, StandbyWorkerPlacement
from stratus.config import config_from_mapping
from stratus.errors import ConfigError
from stratus.pacemaker.auth import AuthMethod
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.security.tls import TlsSettings
from stratus.state.beats import BeatAck
from stratus.supervisor.assignment_reader import AssignmentsRead
from stratus.supervisor.beat_agent import (
    CONFIG_FILE,
    AgentConfig,
    BeatAgent,
    read_config,
    write_config,
)
from stratus.supervisor.beat_keeper import BeatChange, BeatKeeper
from stratus.supervisor.loop_messages import HeartbeatWritten
from stratus.supervisor.settings import BeatSettings, SupervisorSettings
from stratus.supervisor.worker_process import WorkerPaths, build_spec
from stratus.worker.lease_file import BEAT_LEASE_FILE, read_lease, since_path, write_lease
from tests.harness.supervisor_fakes import (
    FakeClock,
    FakeLauncher,
    assignment,
    code,
)
from tests.unit.test_adoption_unit import control_loop, feed
from tests.unit.test_standby_worker_lifecycle import ready_file, started

PACEMAKER = {"cluster.state.store": "pacemaker", "supervisor.id": "s1"}
LEASE = 0.8


def settings_of(tmp_path: Path, **conf: Any) -> SupervisorSettings:
    values = {**PACEMAKER, "supervisor.local.dir": str(tmp_path), **conf}
    return SupervisorSettings.from_config(config_from_mapping(values))


# ---------------------------------------------------------------------- keys and settings


def test_the_beat_keys_default_to_a_tenth_of_a_second_and_a_lease_of_eight() -> None:
    conf = config_from_mapping({})
    assert conf.supervisor_beat_interval_ms == 100
    assert conf.supervisor_beat_lease_secs == 0.8
    assert conf.supervisor_beat_stop_secs == 0.1


def test_three_beats_must_fit_in_the_beat_lease() -> None:
    with pytest.raises(
        ConfigError,
        match=r"3 x supervisor.beat.interval.ms \(0.9 s\) must be less than "
        r"supervisor.beat.lease.secs \(0.8\)",
    ):
        config_from_mapping({"supervisor.beat.interval.ms": 300})
    assert config_from_mapping({"supervisor.beat.interval.ms": 260})
    assert config_from_mapping(
        {"supervisor.beat.interval.ms": 300, "supervisor.beat.lease.secs": 1}
    )


def test_a_hot_worker_must_be_killed_before_the_leader_moves_its_pipeline() -> None:
    tight = {
        "nimbus.supervisor.timeout.secs": 4,
        "supervisor.fence.timeout.secs": 1.5,
        "supervisor.worker.stop.secs": 1,
    }
    assert config_from_mapping({**tight, "supervisor.beat.lease.secs": 3.5})
    with pytest.raises(
        ConfigError,
        match=r"supervisor.beat.lease.secs \+ supervisor.beat.stop.secs \(4\) must be less "
        r"than nimbus.supervisor.timeout.secs \(4\)",
    ):
        config_from_mapping(
            {**tight, "supervisor.beat.lease.secs": 3.5, "supervisor.beat.stop.secs": 0.5}
        )


def test_beats_are_set_up_with_the_pacemaker_store_only(tmp_path: Path) -> None:
    pacemaker = settings_of(tmp_path, **{"supervisor.beat.interval.ms": 50})
    expected = BeatSettings(
        interval_secs=0.05, lease_secs=0.8, stop_secs=0.1, lease_path=tmp_path / BEAT_LEASE_FILE
    )
    assert pacemaker.beat == expected
    assert pacemaker.spec.beat == expected
    assert expected.advertised() == BeatLease(lease_secs=0.8, stop_secs=0.1, poll_secs=0.02)
    zookeeper = settings_of(tmp_path, **{"cluster.state.store": "zookeeper"})
    assert zookeeper.beat is None
    assert zookeeper.spec.beat is None


def test_only_a_hot_pipelines_worker_watches_the_beat_lease(tmp_path: Path) -> None:
    paths = WorkerPaths.of(tmp_path, "etl")
    hot = assignment(conf={STANDBY_CONF_KEY: "hot"})
    spec = build_spec(settings_of(tmp_path).spec, "s1", hot, code(tmp_path), paths)
    assert (spec.beat_lease_path, spec.beat_poll_secs, spec.beat_stop_secs) == (
        tmp_path / BEAT_LEASE_FILE,
        0.02,
        0.1,
    )
    cold = build_spec(settings_of(tmp_path).spec, "s1", assignment(), code(tmp_path), paths)
    assert cold.beat_lease_path is None
    zookeeper = settings_of(tmp_path, **{"cluster.state.store": "zookeeper"}).spec
    assert build_spec(zookeeper, "s1", hot, code(tmp_path), paths).beat_lease_path is None


# ---------------------------------------------------------------------- the agent's config


def test_the_agents_config_is_private_read_once_and_keeps_every_client_setting(
    tmp_path: Path,
) -> None:
    config = AgentConfig(
        supervisor="s1",
        interval_secs=0.1,
        lease_secs=LEASE,
        pacemaker=PacemakerClientSettings(
            servers=(("p1", 6699), ("p2", 6700)),
            auth_method=AuthMethod.DIGEST,
            principal="s1",
            secret=b"\x00secret\xff",
            tls=TlsSettings(ca="/etc/ca.pem"),
            subtree="/supervisors/s1",
        ),
    )
    write_config(tmp_path, config)
    assert stat.S_IMODE((tmp_path / CONFIG_FILE).stat().st_mode) == 0o600
    assert read_config(tmp_path) == config
    assert not (tmp_path / CONFIG_FILE).exists()  # its credentials are gone from the disk
    assert "secret" not in str(config.fingerprint())


def test_a_config_that_is_not_one_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / CONFIG_FILE).write_text('{"supervisor": "s1"}')
    with pytest.raises(ValueError, match=r"beat-agent\.json is not a beat agent.s config"):
        read_config(tmp_path)


# ---------------------------------------------------------------------- the agent's lease


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Board:
    """Stands in for ``BeatBoard``: each beat takes ``takes`` seconds of the clock and is
    stored by ``acknowledged`` of 3 pacemakers."""

    clock: Clock
    acknowledged: int = 3
    takes: float = 0.01
    sent: list[tuple[str, int]] = field(default_factory=list)

    def beat(self, supervisor_id: str, boot_id: str, seq: int, lease_secs: float) -> BeatAck:
        self.sent.append((supervisor_id, seq))
        self.clock.now += self.takes
        return BeatAck(supervisor_id, seq, self.acknowledged, 3, 2)


def agent_of(tmp_path: Path, clock: Clock, board: Board) -> BeatAgent:
    config = AgentConfig("s1", 0.1, LEASE, PacemakerClientSettings(servers=(("p", 1),)))
    return BeatAgent(
        config,
        board,
        lease_path=tmp_path / BEAT_LEASE_FILE,
        supervisor_lease_path=tmp_path / "lease",
        clock=clock,
    )


def test_a_counted_beat_renews_the_beat_lease_from_its_start(tmp_path: Path) -> None:
    clock = Clock()
    agent = agent_of(tmp_path, clock, Board(clock, takes=0.3))
    agent.beat_once()
    assert read_lease(tmp_path / BEAT_LEASE_FILE) == pytest.approx(100.0 + LEASE)


def test_a_beat_acknowledged_later_than_the_lease_renews_nothing(tmp_path: Path) -> None:
    clock = Clock()
    board = Board(clock)
    agent = agent_of(tmp_path, clock, board)
    agent.beat_once()
    held_until = read_lease(tmp_path / BEAT_LEASE_FILE)
    board.takes = LEASE  # stored by a majority, but only once the lease from its start is over
    agent.beat_once()
    assert read_lease(tmp_path / BEAT_LEASE_FILE) == held_until
    assert agent.lease.ends_at() is None  # lapsed: the worker stops, the loop retires it


def test_an_agent_stalled_past_its_lease_lapses_it_and_records_the_gain_after(
    tmp_path: Path,
) -> None:
    """A beat that begins after the lease ran out renews nothing: the lease lapsed (its
    ``beat_lease_lapsed``), and the next beat gains it again, recorded in ``lease.beat.since``
    first, so that a hot worker that did not look across the gap stops all the same."""
    clock = Clock()
    agent = agent_of(tmp_path, clock, Board(clock))
    since = since_path(tmp_path / BEAT_LEASE_FILE)
    agent.beat_once()
    assert read_lease(since) == 100.0  # gained by the first beat
    clock.now += 0.1
    agent.beat_once()
    assert read_lease(since) == 100.0  # renewed, not gained again
    held_until = read_lease(tmp_path / BEAT_LEASE_FILE)
    clock.now += LEASE + 0.5  # the agent is not scheduled past the lease's end
    agent.beat_once()
    assert agent.lease.ends_at() is None and agent.lease.fences == 1
    assert read_lease(tmp_path / BEAT_LEASE_FILE) == held_until  # its end, now past
    gained_at = clock.now
    agent.beat_once()
    assert read_lease(since) == pytest.approx(gained_at)
    assert read_lease(tmp_path / BEAT_LEASE_FILE) == pytest.approx(gained_at + LEASE)


def test_a_beat_a_majority_did_not_store_renews_nothing_and_the_lease_runs_out(
    tmp_path: Path,
) -> None:
    clock = Clock()
    board = Board(clock)
    agent = agent_of(tmp_path, clock, board)
    agent.beat_once()
    held_until = read_lease(tmp_path / BEAT_LEASE_FILE)
    board.acknowledged = 1
    for _ in range(10):
        clock.now += 0.1
        agent.beat_once()
    assert read_lease(tmp_path / BEAT_LEASE_FILE) == held_until  # its end, now past
    assert agent.lease.ends_at() is None
    board.acknowledged = 2
    agent.beat_once()  # a majority again: held again, from this beat's start
    until = read_lease(tmp_path / BEAT_LEASE_FILE)
    assert until is not None and until == pytest.approx(clock.now - board.takes + LEASE)


def test_the_agent_stops_beating_once_its_supervisors_lease_has_ended(tmp_path: Path) -> None:
    clock = Clock()
    board = Board(clock, takes=0.1)  # a beat an interval: the loop never waits
    agent = agent_of(tmp_path, clock, board)
    write_lease(tmp_path / "lease", clock.now + 0.5)
    assert agent.run() == "the supervisor's lease has ended"
    assert 4 <= len(board.sent) <= 6  # it beat while that lease held, then no more


# ---------------------------------------------------------------------- the keeper's view


def keeper_of(tmp_path: Path, clock: Callable[[], float]) -> BeatKeeper:
    settings = BeatSettings(0.1, LEASE, 0.1, tmp_path / BEAT_LEASE_FILE)
    config = AgentConfig("s1", 0.1, LEASE, PacemakerClientSettings(servers=(("p", 1),)))
    return BeatKeeper(settings, tmp_path, config, clock=clock)


def test_a_hot_worker_starts_only_on_a_read_begun_after_the_beat_lease_was_regained(
    tmp_path: Path,
) -> None:
    clock = Clock()
    keeper = keeper_of(tmp_path, clock)
    path = tmp_path / BEAT_LEASE_FILE
    assert keeper.observe(100.0) is None  # no lease yet
    assert not keeper.may_start(100.0)
    write_lease(path, 101.0)
    assert keeper.observe(100.2) is BeatChange.REGAINED
    assert not keeper.may_start(100.1)  # that read began before: it may be stale
    assert keeper.may_start(100.2)
    assert keeper.observe(100.5) is None
    assert keeper.observe(101.0) is BeatChange.LAPSED
    assert not keeper.may_start(100.9)
    write_lease(path, 103.0)
    assert keeper.observe(102.0) is BeatChange.REGAINED
    assert not keeper.may_start(101.5)
    assert keeper.may_start(102.5)


def test_a_beat_lease_left_by_no_running_agent_is_not_trusted(tmp_path: Path) -> None:
    write_lease(tmp_path / BEAT_LEASE_FILE, 1e12)  # another boot's clock, say
    keeper = keeper_of(tmp_path, Clock())
    assert not keeper.held(100.0)
    assert keeper.agent_pid is None


# ---------------------------------------------------------------------- the control loop


class KeeperWithoutAgent(BeatKeeper):
    """The real keeper's view of ``lease.beat``; what it is asked to keep is recorded, and
    no agent process is started (the cluster tests start real ones)."""

    wanted: list[bool | None]

    def keep(self, wanted: bool | None) -> None:
        self.wanted.append(wanted)


def keeper_without_agent(tmp_path: Path, clock: FakeClock, supervisor: str) -> KeeperWithoutAgent:
    keeper = KeeperWithoutAgent(
        BeatSettings(0.1, LEASE, 0.1, tmp_path / BEAT_LEASE_FILE),
        tmp_path,
        AgentConfig(supervisor, 0.1, LEASE, PacemakerClientSettings(servers=(("p", 1),))),
        clock=clock,
    )
    keeper.wanted = []
    return keeper


def test_the_loop_runs_hot_workers_on_the_beat_lease_and_retires_them_when_it_ends(
    tmp_path: Path,
) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    keeper = keeper_without_agent(tmp_path, clock, "s1")
    reads: list[float] = []
    loop = control_loop(
        tmp_path, clock, launcher, beats=keeper, request_read=lambda: reads.append(clock())
    )
    both = {"hot": assignment("hot", conf={STANDBY_CONF_KEY: "hot"}), "cold": assignment("cold")}

    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, both))
    assert [p.pid for p in launcher.processes] == [100]  # the cold one; no beat lease yet
    assert keeper.wanted[-1] is True  # the agent is asked for

    clock.advance(0.5)
    write_lease(tmp_path / BEAT_LEASE_FILE, 101.4)  # the agent's first counted beat
    reads.clear()
    feed(loop)
    assert reads == [100.5]  # a read newer than the beat lease is asked for
    assert len(launcher.processes) == 1  # the read applied began before it was held
    feed(loop, AssignmentsRead(100.6, both))
    hot = launcher.last
    assert len(launcher.processes) == 2

    clock.now = 101.4  # the beat lease ends: no beat counted since
    feed(loop)
    assert hot.signals == ["TERM"]  # retired, as at a fence
    assert launcher.processes[0].signals == []  # the cold worker runs on
    hot.exit_code = -9
    feed(loop, AssignmentsRead(101.5, both))
    feed(loop)
    assert len(launcher.processes) == 2  # not started again: no beat lease
    assert keeper.wanted[-1] is True  # still assigned here: the agent is kept

    feed(loop, AssignmentsRead(101.6, {"cold": both["cold"]}))
    assert keeper.wanted[-1] is False  # no hot worker left: the agent may go


def test_the_heartbeat_says_the_beat_lease_the_hot_workers_run_under(tmp_path: Path) -> None:
    """A leader whose term began after this supervisor's registration left judges its beats
    from its last heartbeat's beat lease."""
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    with_beats = control_loop(
        tmp_path, clock, launcher, beats=keeper_without_agent(tmp_path, clock, "s1")
    )
    assert with_beats.heartbeat_round().supervisor.beat_lease == BeatLease(
        lease_secs=LEASE, stop_secs=0.1, poll_secs=BeatSettings(0.1, LEASE, 0.1, tmp_path).poll_secs
    )
    without = control_loop(tmp_path / "zk", clock, launcher)
    assert without.heartbeat_round().supervisor.beat_lease is None


def test_a_standby_worker_keeps_the_beat_agent_before_its_promotion(tmp_path: Path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    keeper = keeper_without_agent(tmp_path, clock, "s1")
    loop = control_loop(tmp_path, clock, launcher, beats=keeper)
    hot = assignment("hot", conf={STANDBY_CONF_KEY: "hot"})
    placed = StandbyWorkerPlacement(
        pipeline="hot",
        supervisor="s1",
        epoch=hot.epoch,
        generation=hot.generation,
        digest=hot.digest,
        size_bytes=hot.size_bytes,
        conf=hot.conf,
        placed=100.0,
    )

    loop._apply(HeartbeatWritten(100.0))
    loop._apply(AssignmentsRead(100.1, {}, {"hot": placed}, era=1))
    loop.tick()
    assert "hot" in loop.standby.workers
    assert keeper.wanted[-1] is True  # beating before the promotion needs it

    loop._apply(AssignmentsRead(100.2, {}, {}, era=1))  # the placement gone
    loop._apply(AssignmentsRead(100.3, {}, {}, era=1))  # and a second read agrees
    loop.tick()
    assert loop.standby.workers == {}  # never started: gone at once
    loop.tick()
    assert keeper.wanted[-1] is False  # nothing hot left here: the agent may go


def test_a_standby_worker_is_promoted_on_the_first_read_begun_after_the_beat_lease_held(
    tmp_path: Path,
) -> None:
    clock = FakeClock(100.0)
    keeper = keeper_without_agent(tmp_path, clock, "s2")
    loop = control_loop(tmp_path, clock, FakeLauncher(tmp_path), supervisor="s2", beats=keeper)
    standby, standby_launcher = started(tmp_path, clock)  # etl's, on s2
    ready_file(tmp_path, pid=standby_launcher.standby[0].pid)
    standby.step(may_start=True)
    loop.standby.workers["etl"] = standby
    loop._apply(HeartbeatWritten(100.0))
    loop.tick()
    promoted = assignment("etl", "s2", generation=3, conf={STANDBY_CONF_KEY: "hot"}, zxid=50)
    loop._apply(AssignmentsRead(100.0, {"etl": promoted}, era=1))
    assert standby_launcher.promoted == []  # no beat lease held yet: the promotion waits

    clock.advance(0.5)
    write_lease(tmp_path / BEAT_LEASE_FILE, 101.4)  # the agent's first counted beat
    loop.tick()  # regained at 100.5
    loop._apply(AssignmentsRead(100.6, {"etl": promoted}, era=1))
    assert standby_launcher.promoted == [promoted]  # on this read, not the next periodic one
