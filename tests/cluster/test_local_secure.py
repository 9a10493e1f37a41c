"""``stratus local --secure``: the local cluster with tokens, TLS and ZooKeeper ACLs.

The command is started as a user starts it; once it prints how a client connects, the test
connects that way: an anonymous request is 401, the printed token over https with the printed
CA works (the CLI too), plain http is not answered, an anonymous ZooKeeper client and one with
made-up digest credentials are closed, and every secret file is its owner's alone. SIGTERM
then stops everything.
"""

from __future__ import annotations

import os
import re
import signal
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from kazoo.exceptions import SessionClosedRequireSaslError

from stratus.security.tls import TlsSettings
from stratus.zk.auth import ZkCredentials
from tests.harness.zk_acl import digest_client
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

START_SECS = 180.0
CLIENT_LINE = re.compile(r"stratus list -c nimbus\.seeds=(\S+) -c client\.tls\.ca=(\S+)")
TOKEN_LINE = re.compile(r"export STRATUS_TOKEN=\$\(cat (\S+)\)")
ZOOKEEPER_LINE = re.compile(r"ZooKeeper serving at (\S+)")


@pytest.mark.timeout(420)
def cli_leader(seeds: list[str], ca: str, env: dict[str, str]) -> str:
    """What ``stratus leader`` prints once it names a leader: the nimbus asked sees the
    election a moment after ``stratus local`` printed how a client connects."""
    command = [
        sys.executable, "-m", "stratus", "leader",
        "-c", f"nimbus.seeds={','.join(seeds)}", "-c", f"client.tls.ca={ca}",
    ]  # fmt: skip
    printed: list[str] = []

    def names_the_leader() -> bool:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=60, env=env, check=False
        )
        assert done.returncode == 0, done.stderr
        printed[:] = [done.stdout]
        return "no nimbus leads" not in done.stdout

    wait_until(names_the_leader, 60.0, "stratus leader to name the leader")
    return printed[0]


def test_stratus_local_secure_refuses_anonymous_calls_and_serves_the_printed_token(tmp_path):
    log = tmp_path / "local.log"
    with log.open("w") as out:
        local = subprocess.Popen(
            [sys.executable, "-m", "stratus", "local", "--secure"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "400"},
        )
    try:
        wait_until(
            lambda: CLIENT_LINE.search(log.read_text()) is not None or local.poll() is not None,
            START_SECS,
            "stratus local --secure to print how a client connects",
        )
        output = log.read_text()
        assert local.poll() is None, output
        client_line, token_line = CLIENT_LINE.search(output), TOKEN_LINE.search(output)
        zookeeper_line = ZOOKEEPER_LINE.search(output)
        assert client_line and token_line and zookeeper_line, output
        seeds, ca = client_line.group(1).split(","), client_line.group(2)
        token_file = Path(token_line.group(1))
        token = token_file.read_text().strip()
        assert token not in output  # the token is in a file, never printed
        url = f"https://{seeds[0]}"
        verify = TlsSettings(ca=ca).client_context()

        anonymous = httpx.get(f"{url}/api/v1/pipelines", verify=verify, timeout=10.0)
        assert (anonymous.status_code, anonymous.json()["error"]) == (401, "unauthenticated")
        bearer = {"Authorization": f"Bearer {token}"}
        with_token = httpx.get(f"{url}/api/v1/leader", verify=verify, headers=bearer, timeout=10)
        assert with_token.status_code == 200, with_token.text
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://{seeds[0]}/api/v1/leader", timeout=10.0)
        assert_supervisor_endpoints_are_secured(url, verify, bearer)

        env = {**os.environ, "STRATUS_TOKEN": token}
        env.pop("STRATUS_CONF", None)
        assert "leader: 127.0.0.1:" in cli_leader(seeds, ca, env)

        made_up = ZkCredentials("intruder", "made-up")  # ZooKeeper's digest takes any pair
        for stranger in (
            kazoo_client(zookeeper_line.group(1)),
            digest_client(zookeeper_line.group(1), made_up),
        ):
            with stranger as client, pytest.raises(SessionClosedRequireSaslError):
                client.get_children("/")

        security = token_file.parent
        for name in (
            "tokens", "admin-token", "daemon-token", "nimbus-token", "zookeeper-credentials"
        ):  # fmt: skip
            assert stat.S_IMODE((security / name).stat().st_mode) == 0o600, name
        assert_nimbuses_may_fence(url, verify, security, len(seeds))
        assert_the_token_file_holds_hashes(security)
        keys = list(security.glob("*-key.pem"))
        assert len(keys) == 2  # the CA's and the nimbuses'
        assert all(stat.S_IMODE(key.stat().st_mode) == 0o600 for key in keys)
    finally:
        if local.poll() is None:
            local.send_signal(signal.SIGTERM)
        try:
            assert local.wait(timeout=120) == 0, log.read_text()[-2000:]
        finally:
            if local.poll() is None:
                local.kill()
    assert "all processes stopped" in log.read_text()


def assert_nimbuses_may_fence(
    url: str, verify: ssl.SSLContext, security: Path, nimbuses: int
) -> None:
    """The nimbuses present a token of their own, ``admin``: the leader may fence a silent
    supervisor through its endpoint."""
    nimbus_token = (security / "nimbus-token").read_text().strip()
    caller = httpx.get(
        f"{url}/api/v1/whoami",
        verify=verify,
        headers={"Authorization": f"Bearer {nimbus_token}"},
        timeout=10.0,
    )
    assert caller.json()["role"] == "admin", caller.text
    own = f"client.auth.token.file={security / 'nimbus-token'}"
    # every nimbus, as the controller and the nimbus it runs as its child, and nothing else
    assert len(processes_with(own)) == 2 * nimbuses


def assert_the_token_file_holds_hashes(security: Path) -> None:
    """The token file holds the tokens' hashes, each line naming its principal."""
    listed = (security / "tokens").read_text()
    for name in ("admin-token", "daemon-token", "nimbus-token"):
        assert (security / name).read_text().strip() not in listed
    assert "sha256:" in listed and "principal=local-admin" in listed


def processes_with(argument: str) -> list[int]:
    """The pids of the processes with ``argument`` on their command line."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                arguments = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argument.encode() in arguments:
                found.append(int(proc.name))
    return found


def assert_supervisor_endpoints_are_secured(
    url: str, verify: ssl.SSLContext, bearer: dict[str, str]
) -> None:
    """Every supervisor's endpoint: https with the same certificate, the same tokens."""
    summary = httpx.get(f"{url}/api/v1/cluster", verify=verify, headers=bearer, timeout=10)
    supervisors = summary.json()["supervisors"]
    assert supervisors and all(s["endpoint_tls"] for s in supervisors), supervisors
    for supervisor in supervisors:
        health = f"https://{supervisor['endpoint']}/health"
        refused = httpx.get(health, verify=verify, timeout=10.0)
        assert (refused.status_code, refused.json()["error"]) == (401, "unauthenticated")
        served = httpx.get(health, verify=verify, headers=bearer, timeout=10.0)
        assert served.json() == {"supervisor": supervisor["id"], "healthy": True}
