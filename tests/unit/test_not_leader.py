"""The refusal of a leader-only call by a nimbus that leads no term (``service.not_leader``)."""

from stratus.nimbus.service import not_leader

ME = "10.0.0.1:6627"
OTHER = "10.0.0.2:6627"


def test_a_standby_names_the_leader_to_follow():
    refusal = not_leader(ME, OTHER)
    assert refusal.leader == OTHER
    assert str(refusal) == f"nimbus {ME} is not the leader; the leader is {OTHER}"


def test_with_nobody_elected_no_leader_is_named():
    refusal = not_leader(ME, None)
    assert refusal.leader is None
    assert "no leader is elected right now" in str(refusal)


def test_an_elected_nimbus_whose_term_has_not_begun_says_so_and_names_no_one_to_follow():
    refusal = not_leader(ME, ME)
    assert refusal.leader is None  # following it to itself would loop
    assert "is elected but leads no term right now" in str(refusal)
    assert "no leader is elected" not in str(refusal)
