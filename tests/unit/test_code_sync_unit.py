"""The decisions of ``CodeSync``, and the nimbus's may-lead answers built on them
(``CodeReadiness``), driven with a fake distributor and a fake clock.

Pure logic only: which code a nimbus fetches and drops, and when lost code stops blocking
leadership. That replication really works is proven with real processes in
``test_code_replication.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from kazoo.exceptions import ConnectionLoss

from stratus.api.records import KeptVersion, PendingUpdate, PipelineRecord, PipelineStatus
from stratus.codedist.code_sync import CodeSync, code_needed
from stratus.codedist.distributor import CodeMeta
from stratus.codedist.errors import CodeUnavailableError
from stratus.nimbus.leadership.readiness import CodeReadiness
from stratus.nimbus.submission import held_within

LOST_FAIL_SECS = 30.0


class FakeDistributor:
    """Holds what ``held`` says; ``elsewhere`` is how many other nimbuses hold each digest."""

    def __init__(self) -> None:
        self.held_code: dict[str, CodeMeta] = {}
        self.elsewhere: dict[str, int] = {}
        self.cleaned: list[str] = []

    def prepare(self) -> None: ...

    def upload(self, package: Path, pipeline: str) -> CodeMeta:
        raise NotImplementedError

    def download(self, dest: Path, pipeline: str, meta: CodeMeta) -> list[Path]:
        raise NotImplementedError

    def replication_count(self, pipeline: str, meta: CodeMeta) -> int:
        here = 1 if self.held_code.get(pipeline) == meta else 0
        return here + self.elsewhere.get(meta.digest, 0)

    def holds(self, pipeline: str, meta: CodeMeta) -> bool:
        return self.held_code.get(pipeline) == meta

    def replicate(self, pipeline: str, meta: CodeMeta) -> None:
        if not self.elsewhere.get(meta.digest):
            raise CodeUnavailableError(f"no holder of {pipeline}")
        self.held_code[pipeline] = meta

    def held(self) -> dict[str, CodeMeta]:
        return dict(self.held_code)

    def cleanup(self, pipeline: str, digest: str | None = None) -> None:
        held = self.held_code.get(pipeline)
        if held is None or (digest is not None and held.digest != digest):
            return
        self.cleaned.append(pipeline)
        self.held_code.pop(pipeline, None)

    def purge(self, digest: str) -> None: ...

    def on_change(self, callback: Callable[[], None]) -> None: ...

    def close(self) -> None: ...


def record(
    name: str, status: PipelineStatus = PipelineStatus.ACTIVE, digest: str = ""
) -> PipelineRecord:
    return PipelineRecord(
        name=name,
        status=status,
        digest=digest or f"digest-{name}",
        size_bytes=10,
        submitted=0.0,
        updated=0.0,
        epoch=1,
    )


def meta_of(name: str) -> CodeMeta:
    return CodeMeta(f"digest-{name}", 10)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_sync(
    records: dict[str, PipelineRecord],
    in_zookeeper: dict[str, PipelineRecord] | None = None,
) -> tuple[CodeSync, FakeDistributor, Clock]:
    """A sync whose view shows ``records``; ZooKeeper itself holds ``in_zookeeper``."""
    distributor, clock = FakeDistributor(), Clock()
    authoritative = records if in_zookeeper is None else in_zookeeper
    sync = CodeSync(
        distributor,
        lambda: records,
        authoritative.get,
        freq_secs=60,
        lost_fail_secs=LOST_FAIL_SECS,
        clock=clock,
    )
    return sync, distributor, clock


def test_only_pipelines_that_are_not_killed_or_failed_need_code():
    records = {
        "a": record("a"),
        "p": record("p", PipelineStatus.PENDING),
        "i": record("i", PipelineStatus.INACTIVE),
        "k": record("k", PipelineStatus.KILLED),
        "f": record("f", PipelineStatus.FAILED),
    }
    assert sorted(code_needed(records)) == ["a", "i", "p"]
    assert sorted(code_needed(records, to_lead=True)) == ["a", "i"]


def test_a_pending_pipeline_is_fetched_but_does_not_stop_a_nimbus_leading():
    """Its code may be on the dead leader alone; the new leader must still take over."""
    sync, distributor, _ = make_sync({"p": record("p", PipelineStatus.PENDING)})
    assert sync.missing() == []
    distributor.elsewhere = {"digest-p": 1}
    sync.sync_once()
    assert distributor.held() == {"p": meta_of("p")}


def test_a_round_fetches_missing_code_and_drops_code_no_pipeline_needs():
    records = {"new": record("new"), "gone": record("gone", PipelineStatus.KILLED)}
    sync, distributor, _ = make_sync(records)
    distributor.held_code = {"gone": meta_of("gone"), "stale": CodeMeta("old", 1)}
    distributor.elsewhere = {"digest-new": 1}

    assert sync.sync_once() is True
    assert distributor.held() == {"new": meta_of("new")}
    assert sorted(distributor.cleaned) == ["gone", "stale"]
    assert sync.missing() == []


def test_code_of_a_record_the_view_does_not_show_yet_is_kept():
    """A submit registers its code right after creating the record; the view may lag."""
    sync, distributor, _ = make_sync({}, in_zookeeper={"fresh": record("fresh")})
    distributor.held_code = {"fresh": meta_of("fresh")}
    sync.sync_once()
    assert distributor.cleaned == []
    assert distributor.held() == {"fresh": meta_of("fresh")}


def test_a_view_one_event_behind_a_kill_does_not_count_the_deleted_code_missing():
    """The view still says ACTIVE; ZooKeeper says KILLED, and the sync deleted the code."""
    killed = record("gone", PipelineStatus.KILLED)
    sync, _, _ = make_sync({"gone": record("gone")}, in_zookeeper={"gone": killed})
    assert sync.missing() == []


def test_code_submitted_again_under_the_same_name_replaces_the_old():
    records = {"etl": record("etl", digest="v2")}
    sync, distributor, _ = make_sync(records)
    distributor.held_code = {"etl": CodeMeta("v1", 10)}
    distributor.elsewhere = {"v2": 1}

    sync.sync_once()
    assert distributor.cleaned == ["etl"]
    assert distributor.held() == {"etl": CodeMeta("v2", 10)}


def test_a_round_that_cannot_fetch_reports_it_and_the_pipeline_stays_missing():
    sync, distributor, _ = make_sync({"x": record("x")})
    distributor.elsewhere = {}
    assert sync.sync_once() is False
    assert sync.missing() == ["x"]


def test_code_held_by_another_live_nimbus_is_never_excused():
    sync, distributor, clock = make_sync({"x": record("x")})
    distributor.elsewhere = {"digest-x": 1}  # on another nimbus, just not fetched yet
    sync.missing()
    clock.now += LOST_FAIL_SECS * 10
    assert sync.missing() == ["x"]
    assert sync.lost() == {}


def test_code_on_no_live_nimbus_is_excused_only_after_the_limit():
    sync, _, clock = make_sync({"x": record("x"), "y": record("y")})
    sync.missing()  # first seen lost now
    clock.now += LOST_FAIL_SECS - 1
    assert sync.missing() == ["x", "y"]
    assert sync.lost() == {}

    clock.now += 1
    assert sync.missing() == []
    assert sync.lost() == {"x": LOST_FAIL_SECS, "y": LOST_FAIL_SECS}


def test_lost_code_that_reappears_restarts_the_clock():
    sync, distributor, clock = make_sync({"x": record("x")})
    sync.missing()
    clock.now += LOST_FAIL_SECS - 1
    distributor.elsewhere = {"digest-x": 1}  # a nimbus holding it came back
    sync.missing()
    distributor.elsewhere = {}  # and went again
    sync.missing()
    clock.now += LOST_FAIL_SECS - 1
    assert sync.lost() == {}
    assert sync.missing() == ["x"]


def test_an_authoritative_read_overrides_the_view():
    sync, distributor, _ = make_sync({})
    distributor.elsewhere = {"digest-late": 1}
    assert sync.missing() == []
    assert sync.missing({"late": record("late")}) == ["late"]


def readiness_of(
    sync: CodeSync,
    read: Callable[[], dict[str, PipelineRecord]],
    *,
    may_lead: bool = True,
    settled: threading.Lock | None = None,
    settle_timeout_secs: float = 10.0,
) -> CodeReadiness:
    return CodeReadiness(
        sync,
        may_lead=lambda: may_lead,
        read_pipelines=read,
        submits_settled=lambda timeout: held_within(settled or threading.Lock(), timeout),
        settle_timeout_secs=settle_timeout_secs,
    )


def test_may_lead_names_the_missing_code_and_the_hook():
    records = {"etl": record("etl")}
    sync, distributor, _ = make_sync(records)
    distributor.elsewhere[meta_of("etl").digest] = 1
    assert readiness_of(sync, lambda: records).to_queue() == "missing_code(etl)"
    distributor.held_code["etl"] = meta_of("etl")
    assert readiness_of(sync, lambda: records).to_queue() is None
    assert readiness_of(sync, lambda: records, may_lead=False).to_queue() == "may_lead_hook"


def test_once_elected_a_nimbus_reads_zookeeper_itself_and_an_unsure_read_is_a_no():
    """The view lags: it shows no pipeline yet, ZooKeeper already has one this nimbus lacks."""
    in_zookeeper = {"etl": record("etl")}
    sync, distributor, _ = make_sync({}, in_zookeeper)
    distributor.elsewhere[meta_of("etl").digest] = 1
    assert readiness_of(sync, lambda: {}).to_queue() is None
    assert readiness_of(sync, lambda: in_zookeeper).to_lead() == "missing_code(etl)"

    def unreachable() -> dict[str, PipelineRecord]:
        raise ConnectionLoss()

    assert readiness_of(sync, unreachable).to_lead() == "cannot_read_pipelines(ConnectionLoss())"


def test_a_leader_checks_its_code_only_while_no_submit_is_between_record_and_upload():
    records = {"etl": record("etl")}
    sync, distributor, _ = make_sync(records)
    distributor.held_code["etl"] = meta_of("etl")
    settled = threading.Lock()
    checked_while_settled: list[bool] = []
    holds = distributor.holds

    def noting_holds(pipeline: str, meta: CodeMeta) -> bool:
        checked_while_settled.append(settled.locked())
        return holds(pipeline, meta)

    distributor.holds = noting_holds  # type: ignore[method-assign]
    assert readiness_of(sync, lambda: records, settled=settled).to_keep_leading() is None
    assert checked_while_settled == [True]
    assert not settled.locked()


def test_a_submit_whose_upload_hangs_skips_the_leaders_code_check_instead_of_blocking_it():
    records = {"etl": record("etl")}
    sync, distributor, _ = make_sync(records)
    distributor.elsewhere[meta_of("etl").digest] = 1  # missing here: a check would say so
    settled = threading.Lock()
    settled.acquire()  # a submit between its record and an upload that never ends
    readiness = readiness_of(sync, lambda: records, settled=settled, settle_timeout_secs=0.05)
    answers: list[str | None] = []
    checking = threading.Thread(
        target=lambda: answers.append(readiness.to_keep_leading()), daemon=True
    )
    checking.start()
    checking.join(timeout=5)
    assert not checking.is_alive(), "the leader's code check waited for the submit unbounded"
    assert answers == [None]  # skipped for this round: no step down for code on its way
    settled.release()
    assert readiness.to_keep_leading() == "missing_code(etl)"


class StoreDistributor(FakeDistributor):
    """Packages stored once per digest, as the local store keeps them: a registration of bytes
    already here needs no fetch; dropping a key, or registering other code under it, deletes
    its bytes unless another key has them."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: set[str] = set()
        self.fetched: list[str] = []
        self.deleted: list[str] = []

    def replicate(self, pipeline: str, meta: CodeMeta) -> None:
        if meta.digest not in self.stored:
            super().replicate(pipeline, meta)  # CodeUnavailableError with no other holder
            self.fetched.append(meta.digest)
            self.stored.add(meta.digest)
        replaced = self.held_code.get(pipeline)
        self.held_code[pipeline] = meta
        if replaced is not None and replaced.digest not in {
            m.digest for m in self.held_code.values()
        }:
            self.stored.discard(replaced.digest)  # as the local store drops replaced code
            self.deleted.append(replaced.digest)

    def cleanup(self, pipeline: str, digest: str | None = None) -> None:
        meta = self.held_code.get(pipeline)
        super().cleanup(pipeline, digest)
        if meta is not None and meta not in self.held_code.values():
            self.stored.discard(meta.digest)
            self.deleted.append(meta.digest)


def updating(name: str, digest: str, new_digest: str) -> PipelineRecord:
    update = PendingUpdate(digest=new_digest, size_bytes=10, requested=0.0)
    return record(name, digest=digest).model_copy(update={"update": update})


def test_an_updates_code_is_fetched_under_its_staged_key_and_never_needed_to_lead():
    records = {"etl": updating("etl", "digest-old", "digest-new")}
    distributor = StoreDistributor()
    distributor.held_code = {"etl": CodeMeta("digest-old", 10)}
    distributor.stored = {"digest-old"}
    distributor.elsewhere = {"digest-new": 1}
    sync = CodeSync(distributor, lambda: records, records.get, freq_secs=60, lost_fail_secs=0)

    assert code_needed(records) == {
        "etl": CodeMeta("digest-old", 10),
        "etl.update": CodeMeta("digest-new", 10),
    }
    assert "etl.update" not in code_needed(records, to_lead=True)
    assert sync.sync_once()
    assert distributor.held() == {
        "etl": CodeMeta("digest-old", 10),
        "etl.update": CodeMeta("digest-new", 10),
    }
    distributor.elsewhere = {}  # the new code lost everywhere but here, then here too
    distributor.held_code.pop("etl.update")
    assert sync.missing() == []
    assert sync.lost() == {}  # a lost update fails no pipeline: it waits


def test_an_applied_update_moves_its_bytes_to_the_pipelines_name_without_a_fetch():
    records = {"etl": record("etl", digest="digest-new")}  # the leader switched the record
    distributor = StoreDistributor()
    distributor.held_code = {
        "etl": CodeMeta("digest-old", 10),
        "etl.update": CodeMeta("digest-new", 10),
    }
    distributor.stored = {"digest-old", "digest-new"}
    sync = CodeSync(distributor, lambda: records, records.get, freq_secs=60, lost_fail_secs=30)

    assert sync.missing() == []  # before the round: the staged copy counts for the name
    assert sync.sync_once()

    assert distributor.held() == {"etl": CodeMeta("digest-new", 10)}
    assert distributor.fetched == []  # no other nimbus holds it: a fetch would have failed
    assert distributor.deleted == ["digest-old"]  # never the new bytes
    assert distributor.stored == {"digest-new"}


def test_a_view_behind_an_applied_update_keeps_the_staged_bytes_until_held_by_name():
    """Updates in quick succession: the view still shows the old code with no update, while
    ZooKeeper already names the staged bytes as the pipeline's code. Dropping the staged key
    then would delete the only copy of the pipeline's code."""
    stale = {"etl": record("etl", digest="digest-old")}
    applied = {"etl": record("etl", digest="digest-new")}
    distributor = StoreDistributor()
    distributor.held_code = {
        "etl": CodeMeta("digest-old", 10),
        "etl.update": CodeMeta("digest-new", 10),
    }
    distributor.stored = {"digest-old", "digest-new"}
    sync = CodeSync(distributor, lambda: stale, applied.get, freq_secs=60, lost_fail_secs=30)

    sync.sync_once()

    assert "digest-new" in distributor.stored
    assert distributor.held()["etl.update"] == CodeMeta("digest-new", 10)


def rolled_back(name: str, current: str, kept: dict[int, str]) -> PipelineRecord:
    """``name`` switched to the code ``current``, keeping the versions ``kept`` (number:
    digest), as a rollback or a restart writes it."""
    versions = [
        KeptVersion(version=number, digest=digest, size_bytes=10, applied=0.0)
        for number, digest in kept.items()
    ]
    return record(name, digest=current).model_copy(update={"versions": versions})


def test_a_rollback_to_a_kept_version_leaves_the_code_held_to_lead_and_moves_it_without_a_fetch():
    """The leader switched the record to version 1, whose bytes this nimbus holds under the
    kept key ``etl.v1`` only: until its next round registers them under the name, it holds
    the pipeline's code all the same (a leader that stepped down here would answer the
    rollback's caller, and every next request, as not the leader)."""
    records = {"etl": rolled_back("etl", "digest-v1", {1: "digest-v1", 2: "digest-v2"})}
    distributor = StoreDistributor()
    distributor.held_code = {
        "etl": CodeMeta("digest-v2", 10),
        "etl.v1": CodeMeta("digest-v1", 10),
        "etl.v2": CodeMeta("digest-v2", 10),
    }
    distributor.stored = {"digest-v1", "digest-v2"}
    sync = CodeSync(distributor, lambda: records, records.get, freq_secs=60, lost_fail_secs=30)
    readiness = readiness_of(sync, lambda: records)

    assert readiness.to_keep_leading() is None
    assert readiness.to_lead() is None
    assert sync.sync_once()

    assert distributor.held()["etl"] == CodeMeta("digest-v1", 10)
    assert distributor.fetched == []  # no other nimbus holds it: a fetch would have failed
    assert distributor.deleted == []  # both versions are kept


def test_another_pipelines_kept_copy_of_the_same_code_does_not_count():
    records = {"etl": record("etl", digest="digest-shared")}
    distributor = FakeDistributor()
    distributor.held_code = {"other.v1": CodeMeta("digest-shared", 10)}
    sync = CodeSync(distributor, lambda: records, records.get, freq_secs=60, lost_fail_secs=30)

    assert sync.missing() == ["etl"]


def test_an_update_applied_before_any_round_kept_version_1_keeps_its_bytes():
    """The submit registered version 1 under the name only; the update applied at once. The
    round must register version 1 under its kept key before version 2 under the name, whose
    registration deletes the bytes it replaces once no key uses them."""
    records = {"etl": rolled_back("etl", "digest-v2", {1: "digest-v1", 2: "digest-v2"})}
    distributor = StoreDistributor()
    distributor.held_code = {
        "etl": CodeMeta("digest-v1", 10),
        "etl.update": CodeMeta("digest-v2", 10),
    }
    distributor.stored = {"digest-v1", "digest-v2"}
    sync = CodeSync(distributor, lambda: records, records.get, freq_secs=60, lost_fail_secs=30)

    assert sync.sync_once()

    assert distributor.held() == {
        "etl": CodeMeta("digest-v2", 10),
        "etl.v1": CodeMeta("digest-v1", 10),
        "etl.v2": CodeMeta("digest-v2", 10),
    }
    assert distributor.stored == {"digest-v1", "digest-v2"}
