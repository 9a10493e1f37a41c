"""The majority rule of the pacemakers' quorum calls, and who may write and read beats."""

from __future__ import annotations

import math

import pytest

from stratus.pacemaker.auth import PacemakerRole, Principal, may_read, may_write
from stratus.pacemaker.client import PoolRead
from stratus.pacemaker.quorum import QuorumAck, check_deadline, majority, quorum_need


@pytest.mark.parametrize(
    ("servers", "need"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)]
)
def test_a_majority_is_more_than_half_so_two_majorities_share_a_server(
    servers: int, need: int
) -> None:
    assert majority(servers) == need
    assert 2 * majority(servers) > servers  # any two majorities overlap
    assert 2 * (majority(servers) - 1) <= servers  # and one fewer would not


def test_with_fewer_than_three_servers_a_majority_is_every_server() -> None:
    assert [majority(n) for n in (1, 2)] == [1, 2]
    assert majority(3) < 3  # three is the least that survives one server down


def test_a_call_needs_a_majority_unless_told_otherwise() -> None:
    assert quorum_need(None, 3) == 2
    assert quorum_need(3, 3) == 3 and quorum_need(1, 3) == 1


@pytest.mark.parametrize("need", [0, -1, 4, True])
def test_a_need_no_call_could_meet_is_refused(need: int) -> None:
    with pytest.raises(ValueError, match="need must be between 1 and the 3 servers"):
        quorum_need(need, 3)


def test_no_majority_of_no_servers() -> None:
    with pytest.raises(ValueError, match="at least one server"):
        majority(0)


@pytest.mark.parametrize("deadline", [0, -0.1, math.inf, math.nan, True, "1"])
def test_a_deadline_must_be_a_positive_finite_number(deadline: object) -> None:
    with pytest.raises(ValueError, match="deadline_secs must be a positive number"):
        check_deadline(deadline)  # type: ignore[arg-type]
    assert check_deadline(0.4) == 0.4


def test_a_write_is_reached_once_need_servers_acknowledged_it() -> None:
    assert QuorumAck(acknowledged=2, servers=3, need=2).reached
    assert not QuorumAck(acknowledged=1, servers=3, need=2).reached
    assert not QuorumAck(acknowledged=0, servers=3, need=2).reached


@pytest.mark.parametrize(
    ("answered", "servers", "from_majority"),
    [(2, 3, True), (3, 3, True), (1, 3, False), (0, 3, False), (1, 2, False), (1, 1, True)],
)
def test_a_read_is_from_a_majority_only_when_more_than_half_answered(
    answered: int, servers: int, from_majority: bool
) -> None:
    read: PoolRead[dict[str, bytes]] = PoolRead({}, False, answered, servers)
    assert read.from_majority is from_majority


def test_a_read_of_unknown_servers_is_never_from_a_majority() -> None:
    assert not PoolRead(value=None, warming=False, answered=1).from_majority


def test_a_supervisor_writes_its_own_beats_only_and_the_nimbus_reads_them_all() -> None:
    s1 = Principal("s1", PacemakerRole.SUPERVISOR)
    nimbus = Principal("n", PacemakerRole.NIMBUS)
    assert may_write(s1, "/beats/s1") and may_write(s1, "/beats/s1/x")
    assert may_write(s1, "/supervisors/s1")  # as before
    for other in ("/beats/s2", "/beats/s10", "/beats", "/beatss/s1", "/s1", "/beats2/s1"):
        assert not may_write(s1, other), other
    assert not may_read(s1, "/beats") and not may_read(s1, "/beats/s2")
    assert may_read(s1, "/beats/s1")
    assert may_read(nimbus, "/beats") and may_write(nimbus, "/beats/s2")


def test_a_kerberos_supervisor_beats_under_its_principals_host() -> None:
    node7 = Principal(
        "supervisor/node7.example.org@EXAMPLE.ORG",
        PacemakerRole.SUPERVISOR,
        subtree="node7.example.org",
    )
    assert may_write(node7, "/beats/node7.example.org")
    assert not may_write(node7, "/beats/supervisor")
