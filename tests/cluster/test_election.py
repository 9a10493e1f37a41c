"""The seed-004 election scenarios against a real ZooKeeper, real processes where it matters."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from stratus import client, coordination
from stratus.api.errors import UnavailableError, error_from_body
from stratus.coordination import (
    CoordinationError,
    CoordinationEvent,
    Coordinator,
    ElectionTimeoutError,
    ErrorKind,
    LeaderChange,
    Leadership,
    LeadershipLostError,
    RevokeReason,
)
from stratus.coordination import candidacy as candidacy_module
from stratus.coordination.candidacy import (
    Candidacies,
    Candidacy,
    CandidacyEvent,
    CandidateState,
    transition,
)
from stratus.coordination.records import SlotRecord
from stratus.zk.paths import GroupPaths
from stratus.zk.session import SessionChange, SessionState, ZkSession
from tests.harness.contender import Contender
from tests.harness.zkfixtures import expire_session as expire_zk_session
from tests.harness.zkfixtures import wait_until

SESSION = 2.0  # seconds; the shared server allows down to 0.2 s


@pytest.fixture
def contenders() -> Iterator[list[Contender]]:
    spawned: list[Contender] = []
    yield spawned
    for contender in spawned:
        contender.stop()


@pytest.fixture
def coordinators() -> Iterator[list[Coordinator]]:
    started: list[Coordinator] = []
    yield started
    for coordinator in started:
        coordinator.close()


def start(hosts: str, coordinators: list[Coordinator], session: float = SESSION) -> Coordinator:
    coordinator = Coordinator.standalone(hosts, session_timeout=session).start()
    coordinators.append(coordinator)
    return coordinator


def expire_session(coordinator: Coordinator, hosts: str) -> None:
    """Expire ``coordinator``'s session (``tests.harness.zkfixtures.expire_session``)."""
    expire_zk_session(
        lambda: coordinator.session.session_id, coordinator.session.client.client_id, hosts, SESSION
    )


def leader_of(contenders: list[Contender], timeout: float) -> Contender:
    def elected() -> Contender | None:
        return next((c for c in contenders if c.poll_line("elected")), None)

    wait_until(elected, timeout, "a contender elected")
    leader = elected()
    assert leader is not None
    return leader


@pytest.mark.slow
def test_kill_9_of_the_leading_process_elects_another(
    zk_hosts: str, contenders: list[Contender]
) -> None:
    contenders += [
        Contender.spawn(zk_hosts, "g", f"p{i}", session_timeout=SESSION) for i in range(3)
    ]
    leader = leader_of(contenders, timeout=30)
    leader.signal(signal.SIGKILL)
    others = [c for c in contenders if c is not leader]
    successor = leader_of(others, timeout=SESSION * 5)
    _, slot, epoch = successor.poll_line("elected").split()  # type: ignore[union-attr]
    assert (slot, epoch) == ("0", "2")


def test_session_expiry_of_the_leader_revokes_requeues_and_never_overlaps(
    zk_hosts: str, coordinators: list[Coordinator]
) -> None:
    a, b = start(zk_hosts, coordinators), start(zk_hosts, coordinators)
    revoked: list[RevokeReason] = []
    a_terms: list[Leadership] = []
    overlaps: list[bool] = []
    a.nominate_async("g", "a", a_terms.append, on_revoked=lambda _t, r: revoked.append(r))
    wait_until(lambda: a.is_leader("g"), 10, "a leads")
    b.nominate_async("g", "b", lambda _t: overlaps.append(a.is_leader("g")))
    wait_until(lambda: b.get_candidates("g") == ["a", "b"], 10, "b queued behind a")

    expire_session(a, zk_hosts)

    wait_until(lambda: RevokeReason.SESSION_LOST in revoked, 10, "a's term ends")
    assert not a.is_leader("g")
    wait_until(lambda: overlaps, 10, "b elected")
    assert overlaps == [False], "b was elected while a still believed it led"
    wait_until(lambda: b.get_candidates("g") == ["b", "a"], 10, "a re-queued by itself")
    assert a.get_leader("g") == "b"
    with pytest.raises(LeadershipLostError):
        a_terms[0].transaction().create("/stale", b"a").commit()


def test_the_next_in_line_says_once_which_leaders_session_it_waits_for(
    zk_hosts: str, coordinators: list[Coordinator], caplog: pytest.LogCaptureFixture
) -> None:
    """The standby next in line logs whom it waits for, and for how long at most if that
    leader stopped without resigning: once per leader session, not for candidates behind
    it, and again for a new leader."""
    caplog.set_level("INFO", logger="stratus.coordination")
    a, b, c = (start(zk_hosts, coordinators) for _ in range(3))
    a.nominate_async("g", "a", lambda _t: None)
    wait_until(lambda: a.is_leader("g"), 10, "a leads")
    b.nominate_async("g", "b", lambda _t: None)
    c.nominate_async("g", "c", lambda _t: None)
    wait_until(lambda: b.get_candidates("g") == ["a", "b", "c"], 10, "b and c queued behind a")

    def waiting() -> list[str]:
        lines = [record.getMessage() for record in caplog.records]
        return [line for line in lines if "event=standby_waiting" in line]

    wait_until(waiting, 10, "b's line")
    session = a.session.session_id
    assert session is not None
    assert waiting() == [
        f"event=standby_waiting group=g member=b leader=a leader_session=0x{session:x} "
        f"epoch=1 up_to_secs={SESSION:g} reason='waiting for leader a to resign, or for its "
        f"ZooKeeper session to expire if it stopped without resigning (up to {SESSION:g} s "
        "after its last contact)'"
    ]

    expire_session(a, zk_hosts)  # a stopped without resigning: its session ends

    wait_until(lambda: b.is_leader("g"), 10, "b elected")
    wait_until(lambda: len(waiting()) == 2, 10, "c's line, now next in line behind b")
    assert "member=c leader=b" in waiting()[1] and "epoch=2" in waiting()[1]


@pytest.mark.slow
def test_zombie_leader_is_fenced_after_sigcont(zk_hosts: str, contenders: list[Contender]) -> None:
    zombie = Contender.spawn(zk_hosts, "g", "zombie", session_timeout=SESSION)
    zombie.expect("elected", timeout=30)
    rival = Contender.spawn(zk_hosts, "g", "rival", session_timeout=SESSION)
    contenders += [zombie, rival]

    zombie.signal(signal.SIGSTOP)
    rival.expect("elected", timeout=SESSION * 5)
    rival.send("write /by-rival x")
    assert rival.expect("write-", timeout=10) == "write-ok /by-rival"
    zombie.signal(signal.SIGCONT)
    zombie.send("write /by-zombie x")

    assert zombie.expect("write-", timeout=10) == "write-refused LeadershipLostError"
    observer = KazooClient(hosts=zk_hosts)
    observer.start(timeout=10)
    try:
        assert observer.exists("/by-rival") is not None
        assert observer.exists("/by-zombie") is None
    finally:
        observer.stop()
        observer.close()
    zombie.expect("revoked session_lost", timeout=SESSION * 5)


def test_unnominate_returns_once_the_revoked_callback_ran(
    zk_hosts: str, coordinators: list[Coordinator]
) -> None:
    """A caller that steps down sees its own ``on_revoked`` done, however slow it is."""
    a = start(zk_hosts, coordinators)
    revoked: list[str] = []

    def slow_revoked(_term: Leadership, reason: RevokeReason) -> None:
        time.sleep(0.5)  # a callback that takes its time
        revoked.append(reason.value)

    a.nominate("g", "a", timeout=10, on_revoked=slow_revoked)
    a.unnominate("g")
    assert revoked == ["resigned"]


def test_fenced_transaction_is_refused_once_the_epoch_moved(
    zk_hosts: str, coordinators: list[Coordinator]
) -> None:
    """The epoch check itself, without the local is_leader guard: the ZooKeeper side refuses."""
    a, b = start(zk_hosts, coordinators), start(zk_hosts, coordinators)
    old = a.nominate("g", "a", timeout=10)
    a.session.client.ensure_path("/data")
    b.nominate_async("g", "b", lambda _t: None)
    a.unnominate("g")
    wait_until(lambda: b.is_leader("g"), 10, "b leads")
    forged = Leadership(
        group=old.group,
        member_id=old.member_id,
        slot=old.slot,
        epoch=old.epoch,
        epoch_path=old.epoch_path,
        slot_path=old.slot_path,
        _client=a.session.client,
        _holds=lambda _t: True,
        _lease_end=lambda: float("inf"),
    )
    with pytest.raises(LeadershipLostError, match="epoch has moved"):
        forged.transaction().create("/data/x", b"").set_data("/data", b"stale").commit()
    assert a.session.client.exists("/data/x") is None
    assert a.session.client.get("/data")[0] == b""


def test_n_leaders_exactly_n_while_candidates_die_and_join(
    zk_hosts: str, coordinators: list[Coordinator]
) -> None:
    n = 2
    members = {f"m{i}": start(zk_hosts, coordinators) for i in range(5)}
    for name, coordinator in members.items():
        coordinator.nominate_async("g", name, lambda _t: None, leaders=n)

    too_many: list[int] = []
    stop = threading.Event()

    def watch_count() -> None:
        while not stop.is_set():
            count = sum(c.is_leader("g") for c in list(members.values()))
            if count > n:
                too_many.append(count)
            time.sleep(0.005)

    watcher = threading.Thread(target=watch_count, daemon=True)
    watcher.start()
    observer = start(zk_hosts, coordinators)

    def settled(expected: int) -> None:
        wait_until(
            lambda: (
                sum(c.is_leader("g") for c in members.values()) == expected
                and len(observer.get_leaders("g")) == expected
            ),
            15,
            f"{expected} leaders",
        )

    settled(n)
    for round_ in range(4):
        leader = next(name for name, c in members.items() if c.is_leader("g"))
        dying = members.pop(leader)
        if round_ % 2:
            expire_session(dying, zk_hosts)
            dying.unnominate("g")
        dying.close()
        joiner = start(zk_hosts, coordinators)
        members[f"j{round_}"] = joiner
        joiner.nominate_async("g", f"j{round_}", lambda _t: None, leaders=n)
        settled(n)
    for name in [name for name, c in members.items() if not c.is_leader("g")]:
        members.pop(name).close()
    settled(n)
    members.pop(next(iter(members))).close()
    settled(1)
    stop.set()
    watcher.join()
    assert too_many == []
    assert sorted(leader.slot for leader in observer.get_leaders("g")) in ([0], [1])


def test_group_refuses_a_different_leader_count(
    zk_hosts: str, coordinators: list[Coordinator]
) -> None:
    a, b = start(zk_hosts, coordinators), start(zk_hosts, coordinators)
    a.nominate_async("g", "a", lambda _t: None, leaders=2)
    with pytest.raises(CoordinationError, match="leaders=2"):
        b.nominate_async("g", "b", lambda _t: None, leaders=1)


def test_non_participant_sees_every_change_in_order(
    zk_hosts: str, coordinators: list[Coordinator]
) -> None:
    observer = start(zk_hosts, coordinators)
    changes: list[LeaderChange] = []
    observer.subscribe_leader_changes("g", changes.append)
    assert observer.get_leader("g") is None

    elected_order: list[str] = []
    members = {f"m{i}": start(zk_hosts, coordinators) for i in range(5)}

    def resign_at_once(term: Leadership) -> None:
        elected_order.append(term.member_id)
        members[term.member_id].unnominate("g")  # the next one takes over at once

    for name, coordinator in members.items():
        coordinator.nominate_async("g", name, resign_at_once)
    wait_until(lambda: len(elected_order) == 5, 20, "five terms")
    wait_until(
        lambda: (
            [c.member_id for c in changes if c.member_id] == elected_order
            and changes[-1].member_id is None
        ),
        10,
        "the observer saw every term",
    )
    assert [c.epoch for c in changes if c.member_id] == [1, 2, 3, 4, 5]
    assert changes[-1] == LeaderChange("g", 0, None, 5)


def test_nominate_times_out_and_withdraws(zk_hosts: str, coordinators: list[Coordinator]) -> None:
    a, b = start(zk_hosts, coordinators), start(zk_hosts, coordinators)
    a.nominate("g", "a", timeout=10)
    with pytest.raises(ElectionTimeoutError, match=r"within 0\.3s"):
        b.nominate("g", "b", timeout=0.3)
    assert a.get_candidates("g") == ["a"]


def test_independent_groups_share_one_session(
    zk_hosts: str, coordinators: list[Coordinator]
) -> None:
    a, b = start(zk_hosts, coordinators), start(zk_hosts, coordinators)
    a.nominate("left", "a", timeout=10)
    b.nominate("right", "b", timeout=10)
    b.nominate_async("left", "b", lambda _t: None)
    a.nominate_async("right", "a", lambda _t: None)
    wait_until(lambda: a.get_candidates("right") == ["b", "a"], 10, "a queued in right")
    assert (a.get_leader("left"), a.get_leader("right")) == ("a", "b")
    assert a.is_leader("left") and not a.is_leader("right")


@pytest.mark.slow
@pytest.mark.solo
def test_zookeeper_restart_within_session_timeout_changes_no_leader(
    zk_restartable, coordinators: list[Coordinator]
) -> None:
    hosts = zk_restartable.connect_string
    session = 15.0  # room for the ZooKeeper JVM to restart on a loaded 2-core machine
    a = start(hosts, coordinators, session)
    b = start(hosts, coordinators, session)
    events: list[ErrorKind] = []
    a.subscribe_errors("g", lambda e: events.append(e.kind))
    term = a.nominate("g", "a", timeout=10)
    b_elected: list[Leadership] = []
    b.nominate_async("g", "b", b_elected.append)
    wait_until(lambda: a.get_candidates("g") == ["a", "b"], 10, "b queued")

    zk_restartable.stop()
    wait_until(lambda: ErrorKind.CONNECTION_SUSPENDED in events, session, "suspension seen")
    assert not a.is_leader("g"), "a still believed it led with ZooKeeper down"
    zk_restartable.start()

    wait_until(lambda: a.is_leader("g"), session, "a leads again, same session")
    assert a.leadership("g") is term and term.epoch == 1
    assert b_elected == []
    assert events[-1] is ErrorKind.CONNECTION_RESTORED
    term.transaction().create("/after-restart", b"a").commit()


@pytest.mark.slow
def test_zookeeper_down_past_session_timeout_nobody_believes_it_leads(
    zk_restartable, coordinators: list[Coordinator]
) -> None:
    hosts = zk_restartable.connect_string
    a, b = start(hosts, coordinators, 1.0), start(hosts, coordinators, 1.0)
    errors: list[CoordinationEvent] = []
    for coordinator in (a, b):
        coordinator.subscribe_errors("g", errors.append)
    a.nominate("g", "a", timeout=10)
    b.nominate_async("g", "b", lambda _t: None)

    zk_restartable.stop()
    wait_until(lambda: len(errors) >= 2, 5, "both told of the outage")
    down_since = time.monotonic()
    while time.monotonic() - down_since < 2.0:  # the outage itself: twice the session timeout
        assert not a.is_leader("g") and not b.is_leader("g")
        time.sleep(0.05)
    zk_restartable.start()

    wait_until(lambda: a.is_leader("g") != b.is_leader("g"), 15, "exactly one leader again")
    assert {e.kind for e in errors} >= {ErrorKind.CONNECTION_SUSPENDED}


def test_lease_follows_the_session_timeout_zookeeper_granted(
    zk_hosts: str, coordinators: list[Coordinator]
) -> None:
    """The server clamps a 200 s request to its 120 s maximum; the lease must use 120 s."""
    coordinator = start(zk_hosts, coordinators, session=200.0)
    assert coordinator.session.granted_session_timeout == pytest.approx(120.0)
    term = coordinator.nominate("g", "a", timeout=10)
    assert term.valid_until() - time.monotonic() <= 120.0 * 2 / 3


def test_a_term_of_an_expired_session_never_leads_again_even_if_the_worker_lags(
    zk_hosts: str, coordinators: list[Coordinator]
) -> None:
    a = start(zk_hosts, coordinators)
    term = a.nominate("g", "a", timeout=10)
    old_session = a.session.session_id
    hold = threading.Event()

    def block_worker() -> None:
        hold.wait()

    a._worker.post(block_worker)  # the worker cannot process the session loss yet
    try:
        expire_session(a, zk_hosts)
        wait_until(lambda: a.session.session_id not in (None, old_session), 10, "a new session")
        renewed_after = time.monotonic()
        wait_until(
            lambda: a.session.lease_end(a.session.session_id) > renewed_after, 10, "lease renewed"
        )
        assert not term.is_leader, "a term of the expired session believed it still led"
    finally:
        hold.set()
    wait_until(lambda: a.is_leader("g"), 10, "a re-queued and leads with a new term")
    assert a.leadership("g") is not term


def test_the_candidacy_machine_refuses_moves_it_never_makes_and_resigned_is_final() -> None:
    queued, leading = CandidateState.QUEUED, CandidateState.LEADING
    assert transition(queued, CandidacyEvent.ELECTED) is leading
    assert transition(leading, CandidacyEvent.LOST) is queued
    with pytest.raises(CoordinationError, match="cannot be resumed"):
        transition(queued, CandidacyEvent.RESUMED)
    with pytest.raises(CoordinationError, match="cannot be elected"):
        transition(leading, CandidacyEvent.ELECTED)
    for event in CandidacyEvent:
        assert transition(CandidateState.RESIGNED, event) is CandidateState.RESIGNED


class _NoZooKeeperSession:
    """Just what ``Candidacies`` reads of a session when no ZooKeeper call is made."""

    client = None
    session_id = 1
    clock = staticmethod(time.monotonic)

    def lease_end(self, _session_id: int | None) -> float:
        return 0.0


def _candidacies(dispatch: Callable[..., None]) -> Candidacies:
    session = cast(ZkSession, _NoZooKeeperSession())
    return Candidacies(session, post=lambda task: None, dispatch=dispatch)


def _candidacy(group: str, on_revoked: Any = None) -> Candidacy:
    paths = GroupPaths("/stratus", group)
    return Candidacy(group, "m", b"", 1, lambda term: None, on_revoked, paths=paths)


def test_a_resignation_during_an_election_is_never_overwritten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``unnominate`` on a user's thread while the worker moves the candidacy to LEADING."""
    dispatched: list[Any] = []
    candidacies = _candidacies(lambda callback, *args: dispatched.append(callback))
    candidacy = _candidacy("g")
    candidacies.add(candidacy)
    original = candidacy_module.transition
    resigner = threading.Thread(target=candidacies.resign_now, args=(candidacy,))

    def transition_while_resigning(state: CandidateState, event: CandidacyEvent) -> Any:
        if event is CandidacyEvent.ELECTED:  # the worker decided: the user resigns now
            resigner.start()
            resigner.join(0.5)  # finishes at once unless the move holds it off
        return original(state, event)

    monkeypatch.setattr(candidacy_module, "transition", transition_while_resigning)
    candidacies._grant(candidacy, SlotRecord("m", 1, 0, "c-0000000000", b""))
    resigner.join(5)

    assert candidacy.state is CandidateState.RESIGNED, "the election overwrote the resignation"
    assert candidacy.term is not None and not candidacy.term.is_leader
    assert dispatched == [candidacy.on_elected], "on_elected posted once, before the resign"


@pytest.mark.parametrize("lost", [SessionState.SUSPENDED, SessionState.EXPIRED])
def test_a_nomination_while_terms_end_neither_breaks_nor_skips_the_loop(
    lost: SessionState,
) -> None:
    """``nominate`` adds a candidacy from a user's thread while the worker revokes terms."""
    candidacies: Candidacies
    revoked: list[str] = []

    def dispatch(callback: Callable[..., None], *args: Any) -> None:
        callback(*args)

    def on_revoked(term: Leadership, reason: RevokeReason) -> None:
        revoked.append(term.group)
        candidacies.add(_candidacy("late"))  # as nominate would, during the loop

    candidacies = _candidacies(dispatch)
    leaders = [_candidacy(group, on_revoked) for group in ("a", "b")]
    for index, candidacy in enumerate(leaders):
        candidacies.add(candidacy)
        candidacies._grant(candidacy, SlotRecord("m", index + 1, 0, "c-0000000000", b""))
    assert all(c.state is CandidateState.LEADING for c in leaders)

    candidacies.on_session(SessionChange(SessionState.CONNECTED, lost))

    assert revoked == ["a", "b"]
    assert all(c.state is not CandidateState.LEADING for c in leaders)
    assert sorted(candidacies.groups()) == ["a", "b", "late"]


class _ConnectionCutClient:
    """The client's calls a resignation makes; the connection drops at a delete while ``cut``."""

    def __init__(self, session_id: int) -> None:
        self.session_id = session_id
        self.cut = True
        self.deleted: list[str] = []

    def exists(self, _path: str) -> Any:
        return SimpleNamespace(ephemeralOwner=self.session_id)

    def delete(self, path: str) -> None:
        if self.cut:
            raise ConnectionLoss()
        self.deleted.append(path)


class _ConnectionCutSession(_NoZooKeeperSession):
    connected = True

    def __init__(self) -> None:
        self.cut_client = _ConnectionCutClient(self.session_id)
        self.client = cast(Any, self.cut_client)


def test_a_resignation_cut_off_from_zookeeper_still_revokes_the_term_once() -> None:
    """The connection drops while ``unnominate`` deletes the leader's nodes: the member still
    hears that it stopped leading, once (no later session change would tell it, since the
    candidacy has left the table), and the nodes are deleted once reconnected."""
    session = _ConnectionCutSession()
    revoked: list[RevokeReason] = []
    candidacies = Candidacies(
        cast(ZkSession, session),
        post=lambda task: None,
        dispatch=lambda callback, *args: callback(*args),
    )
    candidacy = _candidacy("g", lambda _term, reason: revoked.append(reason))
    candidacy.node = candidacy.paths.candidate_prefix + "0000000000"
    candidacies.add(candidacy)
    candidacies._grant(candidacy, SlotRecord("m", 1, 0, "c-0000000000", b""))
    candidacies.resign_now(candidacy)

    with pytest.raises(ConnectionLoss):
        candidacies.resign(candidacy)
    assert revoked == [RevokeReason.RESIGNED]

    candidacies.on_session(SessionChange(SessionState.CONNECTED, SessionState.SUSPENDED))
    session.cut_client.cut = False
    candidacies.on_session(SessionChange(SessionState.SUSPENDED, SessionState.CONNECTED))
    assert session.cut_client.deleted == [candidacy.paths.slot(0), candidacy.node]
    candidacies.on_session(SessionChange(SessionState.CONNECTED, SessionState.EXPIRED))
    assert revoked == [RevokeReason.RESIGNED], "the term is revoked once, and only once"


def test_terms_read_the_clock_the_session_was_given(zk_hosts: str) -> None:
    """One clock: the lease end and ``is_leader`` both come from the injected one."""
    fake_now = [1000.0]
    coordinator = Coordinator.standalone(
        zk_hosts, session_timeout=SESSION, clock=lambda: fake_now[0]
    ).start()
    try:
        term = coordinator.nominate("g", "a", timeout=10)
        assert term.is_leader
        assert 1000.0 < term.valid_until() <= 1000.0 + SESSION * 2 / 3
    finally:
        coordinator.close()


def test_the_library_and_the_client_raise_one_no_leader_error() -> None:
    assert coordination.NoLeaderError is client.NoLeaderError
    assert issubclass(coordination.NoLeaderError, UnavailableError)
    assert (coordination.NoLeaderError.code, coordination.NoLeaderError.status) == (
        "unavailable",
        503,
    )
    assert type(error_from_body("unavailable", "x")) is UnavailableError  # the wire is unchanged
