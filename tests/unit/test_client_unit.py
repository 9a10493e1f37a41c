"""``stratus.client`` and the CLI client verbs against fake nimbuses behind httpx.MockTransport.

The fake nimbuses answer from scripts, and time is a fake clock that only the client's backoff
advances, so every retry scenario runs at once and deterministically. The end-to-end tests
against real nimbus processes are elsewhere.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import pytest
from click.testing import CliRunner

from stratus import __version__
from stratus.api import errors as nimbus_errors
from stratus.api.errors import ApiError
from stratus.api.records import (
    ClusterSummary,
    LeaderInfo,
    NimbusSummary,
    PipelineList,
    PipelineRecord,
    PipelineStatus,
)
from stratus.cli.main import main
from stratus.client import (
    BACKOFF_MAX_SECS,
    InvalidConfError,
    InvalidNameError,
    InvalidPackageError,
    InvalidTransitionError,
    NimbusClient,
    NimbusUnreachableError,
    NotLeaderError,
    PackageTooLargeError,
    PipelineExistsError,
    UnavailableError,
    UnknownPipelineError,
)
from stratus.errors import ConfigError, StratusError
from stratus.security.authorizer import pipeline_summary
from tests.harness.package_factory import valid_package, valid_package_dir

A, B, C = "10.0.0.1:6627", "10.0.0.2:6627", "10.0.0.3:6627"
PACKAGE = valid_package("wordcount")
LEADER_PATH = "/api/v1/leader"

# What a fake nimbus does with a call: answer, or fail as the network would.
Answer = httpx.Response | type[httpx.TransportError]


def record(name: str = "wordcount", **changes: Any) -> PipelineRecord:
    fields: dict[str, Any] = {
        "name": name,
        "status": PipelineStatus.ACTIVE,
        "digest": "ab" * 32,
        "size_bytes": 2048,
        "submitted": 1_700_000_000.0,
        "updated": 1_700_000_000.0,
        "epoch": 3,
    }
    return PipelineRecord(**{**fields, **changes})


def ok(model: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=model.model_dump(mode="json"))


def error(cls: type[ApiError], message: str = "refused", leader: str | None = None) -> Answer:
    body = {"error": cls.code, "message": message, "leader": leader}
    return httpx.Response(cls.status, json=body)


@dataclass
class Nimbus:
    """One fake nimbus: scripted answers to GET /leader and to every other call.

    Each script is consumed one answer per request; its last answer repeats forever.
    """

    leaders: list[str | None] = field(default_factory=lambda: [None])
    answers: list[Answer] = field(default_factory=list)

    def leader(self) -> httpx.Response:
        address = _next(self.leaders)
        return ok(LeaderInfo(address=address, epoch=3 if address else None))

    def answer(self) -> Answer:
        return _next(self.answers)


T = TypeVar("T")


def _next(script: list[T]) -> T:
    return script.pop(0) if len(script) > 1 else script[0]


@dataclass
class Cluster:
    """The fake nimbuses by address; an address without one refuses connections."""

    nimbuses: dict[str, Nimbus] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)
    frozen: set[str] = field(default_factory=set)  # accept, never answer: every request times out

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.netloc.decode() in self.frozen:
            raise httpx.ReadTimeout("timed out", request=request)
        nimbus = self.nimbuses.get(request.url.netloc.decode())
        if nimbus is None:
            raise httpx.ConnectError("connection refused", request=request)
        answer = nimbus.leader() if request.url.path == LEADER_PATH else nimbus.answer()
        if isinstance(answer, httpx.Response):
            return answer
        raise answer("scripted failure", request=request)

    def sent(self, path: str | None = None) -> list[tuple[str, str]]:
        """(address, path) of every request, or of those to ``path``."""
        calls = [(r.url.netloc.decode(), r.url.path) for r in self.requests]
        return [call for call in calls if path is None or call[1] == path]


@dataclass
class FakeTime:
    """A clock that only the client's sleeps move forward."""

    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, secs: float) -> None:
        self.sleeps.append(secs)
        self.now += secs


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


def client_of(
    cluster: Cluster, fake_time: FakeTime, seeds: list[str], deadline: float = 5.0
) -> NimbusClient:
    return NimbusClient(
        seeds,
        retry_deadline=deadline,
        transport=httpx.MockTransport(cluster),
        clock=fake_time.clock,
        sleep=fake_time.sleep,
    )


def request_ids(cluster: Cluster) -> list[str]:
    """The request_id form field of every submit sent."""
    ids = []
    for request in cluster.requests:
        if request.url.path == "/api/v1/pipelines" and request.method == "POST":
            found = re.search(rb'name="request_id"\r\n\r\n([^\r]*)\r\n', request.content)
            assert found is not None
            ids.append(found.group(1).decode())
    return ids


# ---------------------------------------------------------------------- leader discovery


def test_discovery_skips_a_dead_seed_and_a_seed_that_knows_no_leader(cluster, fake_time):
    cluster.nimbuses[B] = Nimbus(leaders=[None])  # A is dead; B knows no leader
    cluster.nimbuses[C] = Nimbus(leaders=[C], answers=[ok(record())])

    with client_of(cluster, fake_time, [A, B, C]) as client:
        assert client.activate("wordcount") == record()

    assert cluster.sent(LEADER_PATH) == [(A, LEADER_PATH), (B, LEADER_PATH), (C, LEADER_PATH)]
    assert cluster.sent()[-1] == (C, "/api/v1/pipelines/wordcount/activate")
    assert fake_time.sleeps == []  # one pass over the seeds found it: no backoff


def test_the_leader_found_is_asked_directly_next_time(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(leaders=[B])
    cluster.nimbuses[B] = Nimbus(leaders=[B], answers=[ok(record())])

    with client_of(cluster, fake_time, [A, B]) as client:
        client.activate("wordcount")
        client.deactivate("wordcount")

    assert len(cluster.sent(LEADER_PATH)) == 1
    assert client.known_leader == B


def test_while_no_seed_knows_a_leader_discovery_backs_off_and_asks_again(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(leaders=[None, None, None, B])
    cluster.nimbuses[B] = Nimbus(leaders=[None], answers=[ok(record())])

    with client_of(cluster, fake_time, [A, B]) as client:
        assert client.activate("wordcount") == record()

    assert len(fake_time.sleeps) == 3  # one backoff per pass in which no seed knew a leader
    assert all(0 <= secs <= BACKOFF_MAX_SECS for secs in fake_time.sleeps)
    assert cluster.sent()[-1] == (B, "/api/v1/pipelines/wordcount/activate")


def test_leader_is_null_when_the_nimbuses_that_answer_know_none(cluster, fake_time):
    cluster.nimbuses[B] = Nimbus(leaders=[None])

    with client_of(cluster, fake_time, [A, B]) as client:
        assert client.leader() == LeaderInfo(address=None, epoch=None)

    assert fake_time.sleeps == []  # `leader` reports the election, it does not wait for it


def test_leader_names_the_first_leader_any_seed_knows(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(leaders=[None])
    cluster.nimbuses[B] = Nimbus(leaders=[C])

    with client_of(cluster, fake_time, [A, B]) as client:
        assert client.leader() == LeaderInfo(address=C, epoch=3)
        assert client.known_leader == C


# ---------------------------------------------------------------------- not_leader


def test_not_leader_is_followed_at_once_to_the_leader_it_names(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(leaders=[A], answers=[error(NotLeaderError, leader=B)])
    cluster.nimbuses[B] = Nimbus(answers=[ok(record(status=PipelineStatus.INACTIVE))])

    with client_of(cluster, fake_time, [A]) as client:
        result = client.deactivate("wordcount")

    assert result.status is PipelineStatus.INACTIVE
    assert client.known_leader == B
    assert fake_time.sleeps == []


def test_not_leader_without_a_leader_backs_off_and_discovers_again(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(leaders=[A, B], answers=[error(NotLeaderError, leader=None)])
    cluster.nimbuses[B] = Nimbus(answers=[ok(record())])

    with client_of(cluster, fake_time, [A]) as client:
        client.activate("wordcount")

    assert len(cluster.sent(LEADER_PATH)) == 2
    assert len(fake_time.sleeps) == 1
    assert cluster.sent()[-1][0] == B


def test_nimbuses_that_name_each_other_make_the_client_back_off_not_spin(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(leaders=[B], answers=[error(NotLeaderError, leader=B)])
    cluster.nimbuses[B] = Nimbus(leaders=[A], answers=[error(NotLeaderError, leader=A)])

    with (
        client_of(cluster, fake_time, [A], deadline=1.0) as client,
        pytest.raises(NotLeaderError, match=r"gave up .* after 1 s .*seeds: 10\.0\.0\.1:6627"),
    ):
        client.activate("wordcount")

    assert fake_time.now == pytest.approx(1.0)
    assert len(cluster.requests) < 10 * len(fake_time.sleeps)  # a bounded number per backoff


def test_a_frozen_leader_is_waited_on_once_not_again_while_the_others_still_name_it(
    cluster, fake_time
):
    """SIGSTOP of the leader: the standby names it until its failover controller acts."""
    cluster.frozen.add(A)
    # B names A, then nobody (A's controller gave up its lock), then itself
    cluster.nimbuses[B] = Nimbus(leaders=[A, A, None, B], answers=[ok(record())])

    with client_of(cluster, fake_time, [A, B]) as client:
        assert client.activate("wordcount") == record()

    assert [address for address, _ in cluster.sent()].count(A) == 1
    assert cluster.sent()[-1] == (B, "/api/v1/pipelines/wordcount/activate")
    assert len(fake_time.sleeps) == 3  # backed off while B named A, then nobody


def test_a_nimbus_that_timed_out_is_trusted_again_after_a_request_timeout(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(leaders=[A], answers=[ok(record())])
    cluster.frozen.add(A)
    with client_of(cluster, fake_time, [A], deadline=60.0) as client:
        with pytest.raises(NimbusUnreachableError):
            client.activate("wordcount")  # only A, always timing out
        cluster.frozen.clear()
        fake_time.now += 30.0  # past its suspicion (the default request timeout is shorter)
        assert client.activate("wordcount") == record()


# ---------------------------------------------------------------------- submit


def test_submit_sends_the_same_request_id_on_every_retry_across_a_failover(
    cluster, fake_time, tmp_path
):
    package = tmp_path / "wordcount.zip"
    package.write_bytes(valid_package("wordcount"))
    # A leads, fails twice (unavailable, then a lost response), then dies; B takes over.
    cluster.nimbuses[A] = Nimbus(
        leaders=[A], answers=[error(UnavailableError), httpx.ReadTimeout, httpx.ConnectError]
    )
    cluster.nimbuses[C] = Nimbus(leaders=[A, A, A, B])  # asked again after each failure
    cluster.nimbuses[B] = Nimbus(answers=[ok(record(request_id="x"), status=200)])

    with client_of(cluster, fake_time, [C]) as client:
        result = client.submit("wordcount", package, {"spark.sql.shuffle.partitions": 4})

    ids = request_ids(cluster)
    submits = cluster.sent("/api/v1/pipelines")
    # After the timeout A is a suspect: C still names it, but the client waits for C to name
    # another leader rather than send A the submit a third time.
    assert [address for address, _ in submits] == [A, A, B]
    assert len(ids) == 3
    assert len(set(ids)) == 1
    assert re.fullmatch(r"[0-9a-f]{32}", ids[0])
    assert result == record(request_id="x")


def test_submit_sends_the_package_and_conf_as_the_form_fields(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(leaders=[A], answers=[ok(record(), status=201)])

    with client_of(cluster, fake_time, [A]) as client:
        client.submit("wordcount", PACKAGE, {"spark.x": True}, request_id="req-1")

    body = cluster.requests[-1].content
    assert b'name="name"\r\n\r\nwordcount\r\n' in body
    assert b'name="conf"\r\n\r\n{"spark.x": true}\r\n' in body
    assert b'name="request_id"\r\n\r\nreq-1\r\n' in body
    assert b'name="package"; filename="package.zip"' in body
    assert PACKAGE in body


def test_a_package_directory_is_zipped_and_checked_before_any_request(cluster, fake_time, tmp_path):
    cluster.nimbuses[A] = Nimbus(leaders=[A], answers=[ok(record(), status=201)])
    source = valid_package_dir(tmp_path, "wordcount")

    with client_of(cluster, fake_time, [A]) as client:
        client.submit(None, source)
        (source / "stratus.yaml").write_text("name: wordcount\nkind: jar\n")
        with pytest.raises(InvalidPackageError, match="kind"):
            client.submit(None, source)

    assert len(cluster.sent("/api/v1/pipelines")) == 1
    body = cluster.requests[-1].content
    assert b'name="name"\r\n\r\n\r\n' in body  # the nimbus takes the manifest's name
    assert b"stratus.yaml" in body


def test_each_submit_call_has_its_own_request_id(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(leaders=[A], answers=[ok(record(), status=201)])

    with client_of(cluster, fake_time, [A]) as client:
        client.submit("one", PACKAGE)
        client.submit("two", PACKAGE)

    first, second = request_ids(cluster)
    assert first != second


@pytest.mark.parametrize(
    "cls",
    [
        UnknownPipelineError,
        PipelineExistsError,
        InvalidTransitionError,
        PackageTooLargeError,
        InvalidConfError,
        nimbus_errors.InvalidRequestError,
    ],
)
def test_non_retryable_errors_are_raised_at_once_as_their_class(cluster, fake_time, cls):
    cluster.nimbuses[A] = Nimbus(leaders=[A], answers=[error(cls, "the nimbus says no")])

    with client_of(cluster, fake_time, [A]) as client, pytest.raises(cls, match="says no"):
        client.submit("wordcount", PACKAGE)

    assert len(cluster.sent("/api/v1/pipelines")) == 1
    assert fake_time.sleeps == []


def test_bad_names_and_conf_are_refused_before_any_request(cluster, fake_time):
    with client_of(cluster, fake_time, [A]) as client:
        with pytest.raises(InvalidNameError, match="invalid pipeline name"):
            client.submit("../etc", PACKAGE)
        with pytest.raises(InvalidConfError, match="JSON"):
            client.submit("wordcount", PACKAGE, {"spark.x": object()})
        with pytest.raises(InvalidPackageError, match="not a zip"):
            client.submit("wordcount", b"code")
        with pytest.raises(InvalidConfError, match="at least one"):
            client.rebalance("wordcount", {})
        with pytest.raises(nimbus_errors.InvalidRequestError, match="wait_secs"):
            client.kill("wordcount", wait_secs=-1)
    assert cluster.requests == []


# ---------------------------------------------------------------------- kill


def test_a_retried_kill_that_finds_no_pipeline_counts_as_done(cluster, fake_time):
    # The first kill was applied but its response lost; the record was removed at once.
    cluster.nimbuses[A] = Nimbus(
        leaders=[A], answers=[httpx.ReadTimeout, error(UnknownPipelineError)]
    )

    with client_of(cluster, fake_time, [A]) as client:
        assert client.kill("wordcount", wait_secs=0) is None

    assert json.loads(cluster.requests[-1].content) == {"wait_secs": 0.0}


def test_a_kill_of_an_unknown_pipeline_is_an_error_when_no_attempt_reached_the_leader(
    cluster, fake_time
):
    cluster.nimbuses[A] = Nimbus(leaders=[B])
    cluster.nimbuses[B] = Nimbus(answers=[error(UnknownPipelineError, "unknown pipeline 'x'")])
    # B is not serving yet on the first attempt: that attempt never reached it.
    serving = cluster.nimbuses.pop(B)

    def start_b(secs: float) -> None:
        cluster.nimbuses[B] = serving
        fake_time.sleep(secs)

    client = NimbusClient(
        [A], transport=httpx.MockTransport(cluster), clock=fake_time.clock, sleep=start_b
    )
    with client, pytest.raises(UnknownPipelineError, match="unknown pipeline 'x'"):
        client.kill("x")


# ---------------------------------------------------------------------- reads and deadlines


def test_reads_go_to_the_first_nimbus_that_answers(cluster, fake_time):
    cluster.nimbuses[B] = Nimbus(answers=[error(UnavailableError)])
    cluster.nimbuses[C] = Nimbus(answers=[ok(PipelineList(pipelines=[record()]))])

    with client_of(cluster, fake_time, [A, B, C]) as client:
        assert client.list_pipelines() == [record()]

    assert [address for address, _ in cluster.sent()] == [A, B, C]
    assert fake_time.sleeps == []


def test_a_read_error_that_is_an_answer_is_raised_without_asking_other_nimbuses(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(answers=[error(UnknownPipelineError, "unknown pipeline 'x'")])
    cluster.nimbuses[B] = Nimbus(answers=[ok(record(name="x"))])

    with client_of(cluster, fake_time, [A, B]) as client, pytest.raises(UnknownPipelineError):
        client.status("x")

    assert [address for address, _ in cluster.sent()] == [A]


def test_retries_stop_at_the_deadline_with_an_error_naming_the_seeds(cluster, fake_time):
    with (
        client_of(cluster, fake_time, [A, B], deadline=3.0) as client,
        pytest.raises(NimbusUnreachableError) as raised,
    ):
        client.cluster()

    message = str(raised.value)
    assert "within 3 s" in message
    assert f"seeds: {A}, {B}" in message
    assert "ConnectError" in message
    assert fake_time.now == pytest.approx(3.0)  # kept trying until the deadline, not beyond
    assert len(fake_time.sleeps) > 10
    assert max(fake_time.sleeps) <= BACKOFF_MAX_SECS


def test_a_leader_that_stays_unavailable_fails_as_unavailable_at_the_deadline(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(leaders=[A], answers=[error(UnavailableError, "zk is down")])

    with (
        client_of(cluster, fake_time, [A], deadline=2.0) as client,
        pytest.raises(UnavailableError, match=r"after 2 s .*: zk is down"),
    ):
        client.rebalance("wordcount", {"spark.executor.cores": 2})

    assert fake_time.now == pytest.approx(2.0)


def test_a_deadline_of_zero_makes_one_attempt(cluster, fake_time):
    with (
        client_of(cluster, fake_time, [A], deadline=0.0) as client,
        pytest.raises(NimbusUnreachableError),
    ):
        client.leader()

    assert cluster.sent() == [(A, LEADER_PATH)]
    assert fake_time.sleeps == []


def test_a_response_that_is_not_the_api_is_a_clear_error(cluster, fake_time):
    cluster.nimbuses[A] = Nimbus(answers=[httpx.Response(404, text="<html>nginx</html>")])

    with client_of(cluster, fake_time, [A]) as client, pytest.raises(ApiError, match="HTTP 404"):
        client.cluster()


def test_a_seed_that_is_not_host_port_is_a_config_error():
    with pytest.raises(ConfigError, match="'no-port' is not host:port"):
        NimbusClient([A, "no-port"])


def test_not_leader_error_is_importable_from_the_client_and_a_runtime_error():
    assert NotLeaderError is nimbus_errors.NotLeaderError
    assert issubclass(NotLeaderError, RuntimeError)
    assert issubclass(NimbusUnreachableError, StratusError)


# ---------------------------------------------------------------------- the CLI


def run_cli(cluster: Cluster, *args: str) -> Any:
    seeds = ["-c", f"nimbus.seeds={A},{B}", "-c", "client.retry.deadline.secs=0.05"]
    return CliRunner().invoke(main, [*args, *seeds], obj=httpx.MockTransport(cluster))


def test_cli_reports_an_api_error_as_one_line_and_the_exit_code_of_its_class(cluster):
    cluster.nimbuses[A] = Nimbus(answers=[error(UnknownPipelineError, "unknown pipeline 'x'")])

    result = run_cli(cluster, "status", "x")

    assert result.exit_code == 3  # not found
    assert result.stdout == ""
    assert result.stderr.splitlines() == ["Error: unknown pipeline 'x'"]


def test_cli_reports_unreachable_nimbuses_naming_the_seeds(cluster):
    result = run_cli(cluster, "list")

    assert result.exit_code == 6  # unavailable
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: no nimbus answered")
    assert f"seeds: {A}, {B}" in line


def test_cli_submit_parses_conf_values_as_yaml_scalars(cluster, tmp_path):
    package = tmp_path / "job.zip"
    package.write_bytes(PACKAGE)
    cluster.nimbuses[A] = Nimbus(leaders=[A], answers=[ok(record(), status=201)])

    result = run_cli(
        cluster,
        *("submit", str(package), "--name", "wordcount"),
        *("--conf", "spark.sql.shuffle.partitions=4"),
        *("--conf", "spark.x.enabled=true", "--conf", "pipeline.checkpoint.root=s3://b/c"),
    )

    assert result.exit_code == 0, result.output
    found = re.search(rb'name="conf"\r\n\r\n([^\r]*)\r\n', cluster.requests[-1].content)
    assert found is not None
    assert json.loads(found.group(1)) == {
        "spark.sql.shuffle.partitions": 4,
        "spark.x.enabled": True,
        "pipeline.checkpoint.root": "s3://b/c",
    }
    assert "submitted pipeline wordcount: ACTIVE" in result.stdout


def test_cli_list_json_prints_the_records(cluster):
    records = [record("a"), record("b", status=PipelineStatus.KILLED)]
    cluster.nimbuses[A] = Nimbus(answers=[ok(PipelineList(pipelines=records))])

    result = run_cli(cluster, "list", "--json")

    assert result.exit_code == 0, result.output
    assert [PipelineRecord.model_validate(r) for r in json.loads(result.stdout)] == records


def test_cli_cluster_marks_the_leader(cluster):
    summary = ClusterSummary(
        nimbuses=[
            NimbusSummary(host="10.0.0.1", port=6627, uptime_secs=90, is_leader=False, version="1"),
            NimbusSummary(
                host="10.0.0.2", port=6627, uptime_secs=3700, is_leader=True, version="1"
            ),
        ],
        supervisors=[],
        pipelines=[pipeline_summary(record(owner="alice", conf={"pipeline.owners": "bob"}))],
        leader=LeaderInfo(address=B, epoch=7),
    )
    cluster.nimbuses[A] = Nimbus(answers=[ok(summary)])

    result = run_cli(cluster, "cluster")

    assert result.exit_code == 0, result.output
    assert f"leader: {B} (epoch 7)" in result.stdout
    leader_row = next(line for line in result.stdout.splitlines() if B in line and "1h" in line)
    assert "leader" in leader_row
    standby_row = next(line for line in result.stdout.splitlines() if "1m 30s" in line)
    assert "standby" in standby_row
    pipeline_row = next(line for line in result.stdout.splitlines() if "wordcount" in line)
    assert "abababababab" in pipeline_row  # the digest prefix of the pipeline
    assert "alice, bob" in pipeline_row  # its owners, listed in the summary without its conf


def test_cli_cluster_reads_an_older_nimbus_summary_of_whole_records(cluster):
    """Mid-upgrade, a nimbus older than the slim summary answers whole pipeline records."""
    whole = record(owner="alice", conf={"pipeline.owners": "bob", "spark.a": 1}, version=4)
    answer = {
        "nimbuses": [],
        "supervisors": [],
        "pipelines": [whole.model_dump(mode="json")],
        "leader": {"address": B, "epoch": 7},
        "cordons": [],
    }
    cluster.nimbuses[A] = Nimbus(answers=[httpx.Response(200, json=answer) for _ in range(2)])

    shown = run_cli(cluster, "cluster")
    with NimbusClient([A], transport=httpx.MockTransport(cluster)) as client:
        (listed,) = client.cluster().pipelines

    assert shown.exit_code == 0, shown.output
    row = next(line for line in shown.stdout.splitlines() if "wordcount" in line)
    assert "alice" in row and "bob" not in row  # no owners listed: the submitter alone
    assert (listed.name, listed.version, listed.owner, listed.owners) == (
        "wordcount",
        4,
        "alice",
        None,
    )


def test_cli_version_shows_each_nimbus_release_the_leader_first(cluster):
    """Mid-upgrade, ``stratus version --cluster`` tells which nimbus runs which release."""
    old, new = "0.1.0", "0.2.0"
    summary = ClusterSummary(
        nimbuses=[
            NimbusSummary(host="10.0.0.1", port=6627, uptime_secs=9, is_leader=False, version=old),
            NimbusSummary(host="10.0.0.2", port=6627, uptime_secs=9, is_leader=True, version=new),
        ],
        supervisors=[],
        pipelines=[],
        leader=LeaderInfo(address=B, epoch=7),
    )
    cluster.nimbuses[A] = Nimbus(answers=[ok(summary), ok(summary)])

    shown = run_cli(cluster, "version", "--cluster")
    as_json = run_cli(cluster, "version", "--cluster", "--json")
    alone = run_cli(cluster, "version")

    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines() == [
        f"client {__version__}",
        "nimbus 10.0.0.2:6627 0.2.0 (leader)",
        "nimbus 10.0.0.1:6627 0.1.0 (standby)",
    ]
    assert json.loads(as_json.stdout) == {
        "client": __version__,
        "10.0.0.2:6627": "0.2.0",
        "10.0.0.1:6627": "0.1.0",
    }
    assert alone.stdout.splitlines() == [f"client {__version__}"]
    assert len(cluster.requests) == 2  # without --cluster, no nimbus is asked


def test_cli_rejects_conf_that_is_not_key_value(cluster, tmp_path):
    result = run_cli(cluster, "rebalance", "wordcount", "--conf", "novalue")

    assert result.exit_code == 2
    assert "KEY=VALUE" in result.stderr
    assert cluster.requests == []
