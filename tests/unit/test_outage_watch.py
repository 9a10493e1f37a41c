"""The supervisor's outage watch with a scripted probe: it reports a proof with the moment its
probe began, only while the session is down, and proves nothing when the probe fails."""

from __future__ import annotations

from stratus.supervisor.outage_watch import OutageWatch
from stratus.zk.quorum_probe import MemberState, QuorumProbe
from stratus.zk.session import ZkSettings

DOWN = QuorumProbe({"zk1:2181": MemberState.REFUSED})
CUT_OFF = QuorumProbe({"zk1:2181": MemberState.UNKNOWN})


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def watch_with(
    probe: object,
    proofs: list[float],
    clock: Clock,
    *,
    hosts: str = "127.0.0.1:1",
    config: bytes | None = None,
    verdicts: list[str | None] | None = None,
) -> OutageWatch:
    """A watch whose probe answers ``probe`` (or raises it); with ``config``, the ensemble's
    membership it checks ``hosts`` against."""

    def run_probe() -> QuorumProbe:
        clock.now += 1.5  # the probe takes time: the proof counts from its start
        if isinstance(probe, Exception):
            raise probe
        assert isinstance(probe, QuorumProbe)
        return probe

    return OutageWatch(
        "s1",
        ZkSettings(hosts),
        connected=lambda: False,
        on_proven=proofs.append,
        interval_secs=1.0,
        read_config=None if config is None else lambda: config,
        probe=run_probe,
        on_membership=verdicts.append if verdicts is not None else lambda _verdict: None,
        clock=clock,
    )


def test_a_proof_is_reported_with_the_moment_its_probe_began() -> None:
    proofs: list[float] = []
    clock = Clock()
    assert watch_with(DOWN, proofs, clock).probe_once()
    assert proofs == [50.0]


def test_a_supervisor_cut_off_alone_proves_nothing() -> None:
    proofs: list[float] = []
    assert not watch_with(CUT_OFF, proofs, Clock()).probe_once()
    assert proofs == []


def test_a_probe_that_fails_proves_nothing(caplog) -> None:
    proofs: list[float] = []
    assert not watch_with(RuntimeError("boom"), proofs, Clock()).probe_once()
    assert proofs == []
    assert "event=zookeeper_outage_probe_failed" in caplog.text


def test_a_list_that_does_not_name_every_voting_member_proves_nothing(caplog) -> None:
    proofs: list[float] = []
    config = (
        b"server.1=10.0.0.1:2888:3888\nserver.2=10.0.0.2:2888:3888\nserver.3=10.0.0.3:2888:3888\n"
    )
    watch = watch_with(DOWN, proofs, Clock(), hosts="10.0.0.1:2181,10.0.0.2:2181", config=config)
    assert watch.check_membership() is not None
    assert not watch.probe_once() and proofs == []
    assert "event=zookeeper_outage_ride_unavailable" in caplog.text


def test_a_watch_that_never_saw_the_membership_proves_nothing() -> None:
    proofs: list[float] = []
    watch = watch_with(DOWN, proofs, Clock(), hosts="127.0.0.1:2181", config=b"")
    assert not watch.probe_once()  # started during the outage: nothing checked yet
    assert watch.check_membership() is None
    assert watch.probe_once() and len(proofs) == 1


def test_a_list_that_does_not_match_is_warned_of_once_and_told_at_each_change(caplog) -> None:
    config = b"server.1=10.0.0.1:2888:3888\nserver.2=10.0.0.2:2888:3888\n"
    verdicts: list[str | None] = []
    clock = Clock()
    watch = watch_with(DOWN, [], clock, hosts="10.0.0.1:2181", config=config, verdicts=verdicts)
    for _ in range(3):  # a check at start, then one every MEMBERSHIP_CHECK_SECS
        watch.check_membership()
        clock.now += 61
    warned = [r for r in caplog.records if "zookeeper_outage_ride_unavailable" in r.message]
    assert len(warned) == 1 and "zookeeper.servers" in warned[0].getMessage()
    assert verdicts == ["1 servers listed for 2 voting members, each once"]
    assert watch.unavailable == verdicts[0]
