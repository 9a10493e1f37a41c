"""The token file's principals, hashes and expiries, the policy's reload, the authorizer's
decision, the owner conf keys and ``stratus token``: pure logic and local files."""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from click.testing import CliRunner

from stratus.api.errors import ForbiddenError, InvalidConfError, UnauthenticatedError
from stratus.api.pipeline_conf import validate_pipeline_conf
from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.cli.daemon_run import run_daemon
from stratus.cli.main import main
from stratus.config import config_from_mapping
from stratus.errors import ConfigError
from stratus.nimbus.scheduling.scheduler import assignment_conf
from stratus.security.access import AccessPolicy, Caller
from stratus.security.authorizer import (
    PipelineAccess,
    Verb,
    check_pipeline_access,
    decide,
    pipeline_summary,
)
from stratus.security.errors import TokenFileError
from stratus.security.roles import Role
from stratus.security.tokens import hash_token, load_credentials, parse_credentials
from stratus.settings import audit_log
from stratus.zk.session import ZkSession

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"
EXPIRY = 1_800_000_000.0  # 2027-01-15T08:00:00Z
STOP_AND_RELOAD = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def private_file(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


# ---------------------------------------------------------------------- the token file


def test_a_line_names_its_principal_holds_a_hash_and_may_expire() -> None:
    text = (
        f"submit token {hash_token(ALICE)} principal=alice expires=2027-01-15T08:00:00Z\n"
        f"admin  token {BOB}  principal=bob   # a clear token still works\n"
        "read   cn    grafana.example.org\n"
    )
    creds = parse_credentials(text, "tokens")
    alice = creds.entry_of_token(ALICE)
    assert alice is not None
    assert (alice.role, alice.principal, alice.expires) == (Role.SUBMIT, "alice", EXPIRY)
    bob = creds.entry_of_token(BOB)
    assert bob is not None and (bob.role, bob.principal, bob.expires) == (Role.ADMIN, "bob", None)
    assert creds.entry_of_token(hash_token(ALICE)) is None  # the hash is not a token
    grafana = creds.entry_of_name("grafana.example.org")
    assert grafana is not None and grafana.principal == "grafana.example.org"


def test_a_line_of_the_old_format_keeps_working_under_a_name_from_its_digest() -> None:
    entry = parse_credentials(f"submit token {ALICE}\n", "tokens").entry_of_token(ALICE)
    assert entry is not None
    assert entry.principal == "token-" + hash_token(ALICE).removeprefix("sha256:")[:8]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("submit token sha256:abc principal=a", "64 lowercase hex digits"),
        (f"submit token {ALICE} owner=alice", "expected principal=NAME or expires=ISO-8601"),
        (f"submit token {ALICE} principal=al/ice", "is not a name"),
        (f"submit token {ALICE} expires=soon", "not an ISO 8601 date or time"),
        (f"submit token {ALICE} principal=a principal=b", "principal= is given twice"),
        ("read cn host1 principal=h", "a `cn` line's principal is the CN itself"),
    ],
)
def test_a_bad_option_is_named_with_its_line_and_never_echoes_the_token(
    line: str, expected: str
) -> None:
    with pytest.raises(TokenFileError) as caught:
        parse_credentials(f"admin token {BOB}\n{line}\n", "/etc/stratus/tokens")
    assert "/etc/stratus/tokens line 2" in str(caught.value)
    assert expected in str(caught.value)
    assert ALICE not in str(caught.value)


# ---------------------------------------------------------------------- the policy


def test_an_expired_entry_is_unauthenticated_and_says_it_expired() -> None:
    now = [EXPIRY - 1]
    text = f"submit token {hash_token(ALICE)} principal=alice expires=2027-01-15T08:00:00Z\n"
    policy = AccessPolicy(parse_credentials(text, "tokens"), wall=lambda: now[0])
    assert policy.authorize(f"Bearer {ALICE}", None, Role.SUBMIT) == Caller("alice", Role.SUBMIT)
    now[0] = EXPIRY
    with pytest.raises(UnauthenticatedError, match=r"expired at 2027-01-15T08:00:00Z"):
        policy.authorize(f"Bearer {ALICE}", None, Role.READ)


def test_reload_takes_a_new_file_and_keeps_the_old_entries_when_it_is_bad(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = private_file(tmp_path / "tokens", f"submit token {hash_token(ALICE)} principal=alice\n")
    policy = AccessPolicy(load_credentials(path), source=path)
    private_file(path, f"submit token {hash_token(BOB)} principal=bob\n")
    assert policy.reload() is True
    assert policy.identify(f"Bearer {BOB}", None) == Caller("bob", Role.SUBMIT)
    with pytest.raises(UnauthenticatedError):
        policy.identify(f"Bearer {ALICE}", None)

    private_file(path, "# a typo\nsubmitt token {BOB}\n")
    with caplog.at_level(logging.ERROR):
        assert policy.reload() is False
    assert f"{path} line 2" in caplog.text and "event=token_file_reload_failed" in caplog.text
    assert policy.identify(f"Bearer {BOB}", None) == Caller("bob", Role.SUBMIT)
    assert AccessPolicy().reload() is False  # no token file: nothing to read


# ---------------------------------------------------------------------- the authorizer

ACCESS = PipelineAccess(owner="bob", owners=frozenset({"carol"}), readers=frozenset({"dave"}))


@pytest.mark.parametrize(
    ("caller", "verb", "allowed"),
    [
        (None, Verb.KILL, True),  # no token file: as before
        (Caller("ops", Role.ADMIN), Verb.KILL, True),
        (Caller("bob", Role.SUBMIT), Verb.KILL, True),
        (Caller("carol", Role.SUBMIT), Verb.UPDATE, True),
        (Caller("alice", Role.SUBMIT), Verb.KILL, False),
        (Caller("alice", Role.SUBMIT), Verb.LOGS, False),
        (Caller("dave", Role.READ), Verb.LOGS, True),
        (Caller("dave", Role.SUBMIT), Verb.REBALANCE, False),  # a reader changes nothing
        (Caller("bob", Role.READ), Verb.KILL, False),  # an owner whose role is read now
        (Caller("bob", Role.READ), Verb.LOGS, True),
    ],
)
def test_owners_change_readers_read_admins_do_all(
    caller: Caller | None, verb: Verb, allowed: bool
) -> None:
    assert decide(caller, verb, ACCESS).allowed is allowed


def test_an_ownerless_pipeline_is_the_admins_and_the_refusal_says_who_may() -> None:
    with pytest.raises(ForbiddenError, match=r"alice may not kill pipeline 'old': only its "):
        check_pipeline_access(Caller("alice", Role.SUBMIT), Verb.KILL, "old", PipelineAccess())
    with pytest.raises(ForbiddenError, match=r"nobody \(an admin may name owners\)"):
        check_pipeline_access(Caller("alice", Role.SUBMIT), Verb.KILL, "old", PipelineAccess())
    with pytest.raises(ForbiddenError, match=r"owners \(bob, carol\) and its readers"):
        check_pipeline_access(Caller("alice", Role.SUBMIT), Verb.LOGS, "etl", ACCESS)
    check_pipeline_access(Caller("ops", Role.ADMIN), Verb.KILL, "old", PipelineAccess())


def test_access_comes_from_the_owner_and_the_conf_or_from_an_assignment_conf() -> None:
    record = PipelineRecord(
        name="etl",
        status=PipelineStatus.ACTIVE,
        digest="0" * 64,
        size_bytes=1,
        conf={"pipeline.owners": "carol, erin", "pipeline.readers": "dave"},
        submitted=0.0,
        updated=0.0,
        epoch=1,
        owner="bob",
    )
    access = PipelineAccess.of(record.owner, record.conf)
    assert access == PipelineAccess("bob", frozenset({"carol", "erin"}), frozenset({"dave"}))
    assert access.all_owners() == ["bob", "carol", "erin"]
    assert PipelineAccess.of(None, assignment_conf(record)) == access  # what a supervisor sees
    assert assignment_conf(record.model_copy(update={"owner": None})) == record.conf


def test_the_summary_of_a_record_lists_its_owners_and_leaves_its_conf_out() -> None:
    record = PipelineRecord(
        name="etl",
        status=PipelineStatus.FAILED,
        digest="0" * 64,
        size_bytes=1,
        conf={"pipeline.owners": "erin, carol", "spark.secret.key": "***"},
        submitted=1.0,
        updated=2.0,
        epoch=3,
        owner="bob",
        reason="its worker failed",
        version=4,
    )
    summary = pipeline_summary(record)
    shown = summary.model_dump(mode="json")

    assert summary.owners == ["bob", "carol", "erin"]  # as all_owners orders them
    assert "conf" not in shown and "versions" not in shown
    assert {key: value for key, value in shown.items() if key != "owners"} == {
        key: value for key, value in record.model_dump(mode="json").items() if key in shown
    }
    assert pipeline_summary(record.model_copy(update={"owner": None})).owners == ["carol", "erin"]


def test_the_owner_keys_are_checked_and_pipeline_owner_is_the_nimbus_own() -> None:
    assert validate_pipeline_conf({"pipeline.owners": "a, b@example.org"})
    with pytest.raises(InvalidConfError, match=r"pipeline.readers: expected comma-separated"):
        validate_pipeline_conf({"pipeline.readers": "a b"})
    with pytest.raises(InvalidConfError, match=r"pipeline.owners: expected comma-separated"):
        validate_pipeline_conf({"pipeline.owners": ["a"]})
    with pytest.raises(InvalidConfError, match=r"the submitter owns a pipeline"):
        validate_pipeline_conf({"pipeline.owner": "mallory"})


# ---------------------------------------------------------------------- stratus token


def test_token_new_prints_the_token_once_and_a_line_of_its_hash() -> None:
    result = CliRunner().invoke(
        main,
        [
            "token",
            "new",
            "--role",
            "submit",
            "--principal",
            "alice",
            "--expires",
            "2027-01-15T08:00:00Z",
        ],
    )
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    line = result.stderr.strip().splitlines()[-1]
    assert token not in line
    entry = parse_credentials(line, "new").entry_of_token(token)
    assert entry is not None and (entry.role, entry.principal, entry.expires) == (
        Role.SUBMIT,
        "alice",
        EXPIRY,
    )


def test_token_hash_reads_the_token_on_stdin() -> None:
    bare = CliRunner().invoke(main, ["token", "hash"], input=ALICE + "\n")
    assert bare.exit_code == 0 and bare.stdout.strip() == hash_token(ALICE)
    line = CliRunner().invoke(
        main, ["token", "hash", "--role", "read", "--principal", "grafana"], input=ALICE + "\n"
    )
    assert line.stdout.strip() == f"read token {hash_token(ALICE)} principal=grafana"
    short = CliRunner().invoke(main, ["token", "hash"], input="short\n")
    assert short.exit_code == 2 and "at least 16 characters" in short.output
    bad = CliRunner().invoke(
        main, ["token", "new", "--role", "read", "--principal", "a b"], input=""
    )
    assert bad.exit_code == 2 and "is not a principal" in bad.output


# ---------------------------------------------------------------------- SIGHUP


class HangingUp:
    """A daemon that hangs itself up once started, then asks to stop once reloaded."""

    def __init__(self) -> None:
        self.session = cast(ZkSession, SimpleNamespace(failure=None))  # never fails
        self.reloads = 0
        self.stopped = False

    def start(self) -> None:
        os.kill(os.getpid(), signal.SIGHUP)

    def stop(self) -> None:
        self.stopped = True

    def check(self) -> None:
        if self.reloads:
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_daemon_reloads_on_sighup_and_still_stops_on_sigterm() -> None:
    previous = {signum: signal.getsignal(signum) for signum in STOP_AND_RELOAD}
    daemon = HangingUp()
    try:
        run_daemon(
            daemon,
            ready=lambda _d: "ready",
            check=lambda d: d.check(),
            period_secs=0.05,
            reload=lambda d: setattr(d, "reloads", d.reloads + 1),
        )
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert (daemon.reloads, daemon.stopped) == (1, True)


# ---------------------------------------------------------------------- the audit file


def test_the_audit_file_is_private_json_lines_and_an_unusable_one_is_named(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.log"
    audit_log(config_from_mapping({"audit.log.file": str(path)}))
    try:
        logging.getLogger("stratus.web.audit").info(
            "event=audit principal=%s status=%d", "alice", 403
        )
    finally:
        audit_log(config_from_mapping({}))  # back into the process's log
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (line,) = path.read_text().splitlines()
    assert json.loads(line) | {"time": "-"} == {
        "time": "-",
        "level": "INFO",
        "logger": "stratus.web.audit",
        "event": "audit",
        "principal": "alice",
        "status": 403,
    }
    missing = tmp_path / "absent" / "audit.log"
    with pytest.raises(ConfigError, match=rf"cannot open audit.log.file {missing}: No such file"):
        audit_log(config_from_mapping({"audit.log.file": str(missing)}))
