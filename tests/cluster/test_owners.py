"""Owners, readers and admins of pipelines, hashed and expiring tokens, SIGHUP and the audit
trail, on a real ``stratus nimbus`` process and the real CLI.

The token file holds only sha256 hashes (what ``stratus token new`` writes), each line
naming its principal: alice and bob may submit, carol may submit, dave may read, and an
admin. Bob's pipeline names carol among its owners and dave among its readers. Alice is
refused on it (403, naming who may) for every change and its log; carol and the admin are
allowed; every one of those calls, refusals included, is a JSON line of the audit file.
SIGHUP makes the running nimbus take a new token and forget a revoked one, and keeps the
old tokens when the new file is malformed; an expired token is refused as expired.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from stratus.local.processes import NimbusProcess
from stratus.security.client_auth import ClientAuth
from stratus.security.roles import Role
from stratus.security.tokens import hash_token, new_token, token_line
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import wait_until

WAIT_SECS = 30.0


@dataclass(frozen=True)
class People:
    """A token of each person, and the token file's lines (hashes only) for them."""

    tokens: dict[str, str]
    roles: dict[str, Role]

    @classmethod
    def make(cls) -> People:
        roles = {
            "alice": Role.SUBMIT,
            "bob": Role.SUBMIT,
            "carol": Role.SUBMIT,
            "dave": Role.READ,
            "ops": Role.ADMIN,
            "erin": Role.SUBMIT,  # not in the first file: added by a SIGHUP
            "old": Role.SUBMIT,  # expired
        }
        return cls({name: new_token() for name in roles}, roles)

    def lines(self, *names: str, expired: tuple[str, ...] = ()) -> str:
        chosen = [
            token_line(self.roles[name], name, hash_token(self.tokens[name])) for name in names
        ]
        chosen += [
            token_line(self.roles[name], name, hash_token(self.tokens[name]))
            + " expires=2020-01-01T00:00:00Z"
            for name in expired
        ]
        return "\n".join(chosen) + "\n"

    def headers(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}


@dataclass
class Owned:
    nimbus: NimbusProcess
    people: People
    tokens_file: Path
    audit_file: Path
    http: httpx.Client

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.request(
            method, f"{self.nimbus.url}{path}", headers=self.people.headers(who), **kwargs
        )

    def submit(self, who: str, name: str, conf: dict[str, Any]) -> httpx.Response:
        return self.call(
            who,
            "POST",
            "/api/v1/pipelines",
            files={"package": ("p.zip", valid_package(name))},
            data={"name": name, "conf": json.dumps(conf), "request_id": f"submit-{name}"},
        )

    def audit(self) -> list[dict[str, Any]]:
        text = self.audit_file.read_text() if self.audit_file.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def rewrite_tokens(self, text: str) -> None:
        self.tokens_file.write_text(text)
        self.nimbus.signal(signal.SIGHUP)


@pytest.fixture
def owned(zk_server: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Owned]:
    people = People.make()
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(people.lines("alice", "bob", "carol", "dave", "ops", expired=("old",)))
    tokens_file.chmod(0o600)
    audit_file = tmp_path / "audit.log"
    extra = [
        "-c", f"nimbus.auth.tokens.file={tokens_file}",
        "-c", f"audit.log.file={audit_file}",
    ]  # fmt: skip
    admin = ClientAuth(token=people.tokens["ops"])
    with nimbus_cluster(
        zk_server.connect_string, tmp_path, request.node.name, 1, extra, auth=admin
    ) as cluster:
        cluster.wait_for_agreed_leader()
        with httpx.Client(timeout=30.0) as http:
            yield Owned(cluster.nimbuses[0], people, tokens_file, audit_file, http)


def test_only_owners_named_owners_and_admins_change_a_pipeline_and_readers_read_its_log(
    owned: Owned,
) -> None:
    # the file holds hashes: no token is in it, and the tokens work
    assert not any(token in owned.tokens_file.read_text() for token in owned.people.tokens.values())
    conf = {"pipeline.owners": "carol", "pipeline.readers": "dave"}
    created = owned.submit("bob", "bobs", conf)
    assert created.status_code == 201, created.text
    assert created.json()["owner"] == "bob"
    assert owned.submit("alice", "alices", {}).json()["owner"] == "alice"

    base = "/api/v1/pipelines/bobs"
    update = {"files": {"package": ("p.zip", valid_package("bobs"))}}
    refused = {
        "kill": owned.call("alice", "POST", f"{base}/kill", json={"wait_secs": 0}),
        "update": owned.call("alice", "POST", f"{base}/update", **update),
        "rebalance": owned.call(
            "alice", "POST", f"{base}/rebalance", json={"conf": {"spark.x": 2}}
        ),
        "deactivate": owned.call("alice", "POST", f"{base}/deactivate"),
        "activate": owned.call("alice", "POST", f"{base}/activate"),
        "logs": owned.call("alice", "GET", f"{base}/logs"),
    }
    for verb, answer in refused.items():
        assert answer.status_code == 403, (verb, answer.text)
        assert answer.json()["error"] == "forbidden"
        message = answer.json()["message"]
        doing = "read the log of" if verb == "logs" else verb
        assert f"alice may not {doing} pipeline 'bobs'" in message
        assert "only its owners (bob, carol)" in message
    assert "and its readers" in refused["logs"].json()["message"]

    # a reader reads the log (none yet: no supervisor runs it) but changes nothing
    read = owned.call("dave", "GET", f"{base}/logs")
    assert read.status_code == 404 and read.json()["error"] == "no_log", read.text
    assert owned.call("dave", "POST", f"{base}/deactivate").status_code == 403

    # an owner that bob named may change it; so may an admin
    rebalanced = owned.call(
        "carol", "POST", f"{base}/rebalance", json={"conf": {"spark.x": 1}, "request_id": "rb-1"}
    )
    assert rebalanced.status_code == 200, rebalanced.text
    assert owned.call("carol", "POST", f"{base}/deactivate").json()["status"] == "INACTIVE"
    assert owned.call("carol", "POST", f"{base}/activate").json()["status"] == "ACTIVE"
    updated = owned.call("carol", "POST", f"{base}/update", **update)
    assert updated.status_code in (200, 202), updated.text
    assert owned.call("alice", "POST", "/api/v1/pipelines/alices/kill").status_code == 200
    killed = owned.call("ops", "POST", f"{base}/kill", json={"wait_secs": 60})
    assert killed.status_code == 200 and killed.json()["status"] == "KILLED"

    assert_the_cli_shows_owners(owned)
    assert_every_call_is_audited(owned, list(refused))


def test_a_name_whose_checkpoints_were_kept_goes_back_to_its_owners_or_an_admin(
    owned: Owned,
) -> None:
    assert owned.submit("bob", "kept", {}).status_code == 201
    killed = owned.call("bob", "POST", "/api/v1/pipelines/kept/kill", json={"wait_secs": 0})
    assert killed.status_code == 200, killed.text  # no --purge: its checkpoints are kept
    wait_until(
        lambda: owned.call("bob", "GET", "/api/v1/pipelines/kept").status_code == 404,
        WAIT_SECS,
        "the killed record removed",
    )
    taken = owned.submit("alice", "kept", {})
    assert taken.status_code == 403, taken.text
    assert (
        "alice may not submit pipeline 'kept': the checkpoints kept from its last life are "
        "bob's" in taken.json()["message"]
    )
    again = owned.submit("bob", "kept", {})
    assert again.status_code == 201 and again.json()["owner"] == "bob"


def test_sighup_adds_and_revokes_tokens_keeps_them_on_a_bad_file_and_expiry_refuses(
    owned: Owned,
) -> None:
    whoami = "/api/v1/whoami"
    expired = owned.call("old", "GET", whoami)
    assert expired.status_code == 401
    assert "(principal old) expired at 2020-01-01T00:00:00Z" in expired.json()["message"]
    assert owned.call("alice", "GET", whoami).json()["principal"] == "alice"
    assert owned.call("erin", "GET", whoami).status_code == 401

    # erin added, alice revoked: the running nimbus takes the new file on SIGHUP
    owned.rewrite_tokens(owned.people.lines("bob", "carol", "dave", "ops", "erin"))
    wait_until(
        lambda: owned.call("erin", "GET", whoami).status_code == 200, WAIT_SECS, "erin's token"
    )
    assert owned.call("erin", "GET", whoami).json() == {
        "role": "submit",
        "principal": "erin",
        "auth_required": True,
    }
    assert owned.call("alice", "GET", whoami).status_code == 401

    # a malformed file: the old tokens stay, and the log names the line
    owned.rewrite_tokens(owned.people.lines("ops") + "submit token short\n")
    wait_until(
        lambda: "event=token_file_reload_failed" in owned.nimbus.log_tail(200),
        WAIT_SECS,
        "the reload's failure in the log",
    )
    assert f"{owned.tokens_file} line 2" in owned.nimbus.log_tail(200)
    assert owned.call("erin", "GET", whoami).status_code == 200
    wait_until(  # the expired token, erin before she was added, alice after
        lambda: len([line for line in owned.audit() if line["status"] == 401]) >= 3,
        WAIT_SECS,
        "the audit lines of the 401s",
    )
    refused = [line for line in owned.audit() if line["status"] == 401]
    assert {line["principal"] for line in refused} == {"-"}


def assert_the_cli_shows_owners(owned: Owned) -> None:
    """``stratus list`` and ``status`` say who owns bob's pipeline and who reads it."""
    listed = _stratus("list", nimbus=owned.nimbus, token=owned.people.tokens["dave"])
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "bobs" in line)
    assert "bob, carol" in row
    status = _stratus("status", "bobs", nimbus=owned.nimbus, token=owned.people.tokens["dave"])
    assert "owners" in status.stdout and "readers" in status.stdout and "dave" in status.stdout


def assert_every_call_is_audited(owned: Owned, refused: list[str]) -> None:
    """Every change and every refusal is one JSON line of the audit file."""
    expected = {("alice", verb, 403) for verb in refused} | {
        ("bob", "submit", 201),
        ("carol", "rebalance", 200),
        ("ops", "kill", 200),
        ("dave", "logs", 404),
    }

    def seen() -> set[tuple[Any, ...]]:
        return {(line["principal"], line["verb"], line["status"]) for line in owned.audit()}

    # a line is written once the answer is sent: the client may see the answer first
    wait_until(lambda: expected <= seen(), WAIT_SECS, "the audit lines of every call")
    lines = owned.audit()
    alice_kill = next(
        line for line in lines if (line["principal"], line["verb"]) == ("alice", "kill")
    )
    assert alice_kill["pipeline"] == "bobs"
    assert alice_kill["role"] == "submit"
    assert alice_kill["error"] == "forbidden"
    assert alice_kill["remote"] == "127.0.0.1"
    assert alice_kill["request_id"]
    assert alice_kill["daemon"] == "nimbus"
    rebalance = next(
        line for line in lines if line["verb"] == "rebalance" and line["status"] == 200
    )
    assert rebalance["request_id"] == "rb-1"
    submitted = next(line for line in lines if line["verb"] == "submit")
    assert (submitted["pipeline"], submitted["request_id"]) == ("bobs", "submit-bobs")
    assert not any(line["verb"] == "read" for line in lines)  # allowed reads are not audited
    assert os.stat(owned.audit_file).st_mode & 0o077 == 0


def _stratus(*args: str, nimbus: NimbusProcess, token: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATUS_TOKEN": token}
    env.pop("STRATUS_CONF", None)
    return subprocess.run(
        [sys.executable, "-m", "stratus", *args, "-c", f"nimbus.seeds={nimbus.address}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_only_an_admin_cordons_or_drains_a_supervisor_and_each_call_is_audited(
    owned: Owned,
) -> None:
    base = "/api/v1/supervisors/s9"
    for who, verb in (("dave", "cordon"), ("alice", "drain"), ("alice", "uncordon")):
        refused = owned.call(who, "POST", f"{base}/{verb}")
        assert refused.status_code == 403, (who, verb, refused.text)
        assert refused.json()["error"] == "forbidden"
    unknown = owned.call("ops", "POST", f"{base}/cordon")
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_supervisor"
    assert "unknown supervisor 's9'" in unknown.json()["message"]
    progress = owned.call("dave", "GET", f"{base}/drain")  # a read: past the role check
    assert progress.json()["error"] == "unknown_supervisor"

    expected = {("dave", "cordon", 403), ("alice", "drain", 403), ("ops", "cordon", 404)}

    def seen() -> set[tuple[Any, ...]]:
        return {(line["principal"], line["verb"], line["status"]) for line in owned.audit()}

    wait_until(lambda: expected <= seen(), WAIT_SECS, "the audit lines of the cordons")
    cordon = next(line for line in owned.audit() if line["principal"] == "ops")
    assert cordon["path"] == f"{base}/cordon" and cordon["role"] == "admin"
