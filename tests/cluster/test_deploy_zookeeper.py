"""The ZooKeeper files of ``deploy/`` work as shipped: a member started with ``deploy/zoo.cfg``
(as one member on loopback), ``deploy/zookeeper-jaas.conf`` (its passwords filled in) and the
JVM flags of ``deploy/stratus-zookeeper.service`` admits stratus's SASL user alone, and the
lock that docs/deploy.md gives, run as written as the superuser, leaves stratus's identity
unable to leave its root or raise its quota."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError, SessionClosedRequireSaslError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from stratus.zk.auth import ZkCredentials
from stratus.zk.fourletter import four_letter_word
from stratus.zk.java import find_java, zookeeper_classpath
from stratus.zk.ports import LOOPBACK, pick_free_port
from tests.harness.zk_acl import acl_of, digest_client, sasl_client
from tests.harness.zkfixtures import wait_until
from tests.unit.test_deploy_files import DEPLOY, _service

DOCS = DEPLOY.parent / "docs" / "deploy.md"
STRATUS = ZkCredentials("stratus", "stratus-password-0123")
SUPER = ZkCredentials("super", "super-password-4567")
MEMBER_ONLY = ("server.", "standaloneEnabled", "dataDir", "clientPort", "initLimit", "syncLimit")
START_SECS = 30.0


def _java(flags: list[str], main_class: str, *args: str) -> list[str]:
    classpath = os.pathsep.join(str(jar) for jar in zookeeper_classpath())
    return [find_java(None), *flags, "-cp", classpath, main_class, *args]


def _text_block(text: str, named: str) -> str:
    """The first ``text`` code block after the mention of ``named``."""
    match = re.search(re.escape(named) + r".*?```text\n(.*?)```", text, flags=re.DOTALL)
    assert match, f"docs/deploy.md shows no text block after {named}"
    return match[1]


@pytest.fixture
def shipped_member(tmp_path: Path) -> Iterator[str]:
    """A ZooKeeper member as deploy/ ships it; yields its connect string."""
    port = pick_free_port()
    lines = [
        line
        for line in (DEPLOY / "zoo.cfg").read_text().splitlines()
        if not line.startswith(MEMBER_ONLY) and not line.startswith("clientPortAddress")
    ]
    lines += [f"dataDir={tmp_path / 'data'}", f"clientPort={port}", f"clientPortAddress={LOOPBACK}"]
    config = tmp_path / "zoo.cfg"
    config.write_text("\n".join(lines) + "\n")
    jaas = (DEPLOY / "zookeeper-jaas.conf").read_text()
    jaas = re.sub(r'user_stratus="[^"]*"', f'user_stratus="{STRATUS.password}"', jaas)
    jaas = re.sub(r'user_super="[^"]*"', f'user_super="{SUPER.password}"', jaas)
    (tmp_path / "zookeeper-jaas.conf").write_text(jaas)
    exec_start = _service(DEPLOY / "stratus-zookeeper.service")["ExecStart"]
    unit = shlex.split(exec_start.replace("\\\n", " "))
    flags = [
        flag.replace("/etc/stratus/zookeeper-jaas.conf", str(tmp_path / "zookeeper-jaas.conf"))
        for flag in unit
        if flag.startswith("-D")
    ]
    assert any(flag.startswith("-Djava.security.auth.login.config=") for flag in flags)
    command = _java(flags, "org.apache.zookeeper.server.ZooKeeperServerMain", str(config))
    with (tmp_path / "zookeeper.out").open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:

        def serving() -> bool:
            assert server.poll() is None, (tmp_path / "zookeeper.out").read_text()[-2000:]
            try:
                return "Mode:" in four_letter_word(LOOPBACK, port, "srvr", 1.0, None)
            except OSError:
                return False

        wait_until(serving, START_SECS, "the shipped ZooKeeper to serve")
        yield f"{LOOPBACK}:{port}"
    finally:
        server.kill()
        server.wait()


# A refused SASL handshake kills kazoo's connection thread (kazoo 2.11).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_shipped_zookeeper_admits_sasl_alone_and_the_documented_lock_holds(
    shipped_member: str, tmp_path: Path
) -> None:
    hosts = shipped_member
    with (
        digest_client(hosts, ZkCredentials("intruder", "made-up")) as intruder,
        pytest.raises(SessionClosedRequireSaslError),
    ):
        intruder.get_children("/")

    docs = DOCS.read_text()
    client_jaas = _text_block(docs, "`/root/zk-super-jaas.conf`").replace(
        "the superuser password", SUPER.password
    )
    (tmp_path / "zk-super-jaas.conf").write_text(client_jaas)
    line = next(line for line in docs.splitlines() if line.startswith("stratus zookeeper-java"))
    argv = [
        word.replace("/root/zk-super-jaas.conf", str(tmp_path / "zk-super-jaas.conf"))
        for word in shlex.split(line.split(" < ", 1)[0])
    ]
    argv[argv.index("-server") + 1] = hosts
    commands = _text_block(docs, "`/root/zk-lock.txt`")
    locked = subprocess.run(  # the docs' command, through the real verb
        [sys.executable, "-m", "stratus", *argv[1:]],
        input=commands,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert locked.returncode == 0, locked.stdout[-2000:]

    with sasl_client(hosts, STRATUS) as stratus:
        stratus.create("/stratus/pipelines", b"")  # its own root: everything
        assert acl_of(stratus, "/") == {(Permissions.READ, "sasl", "stratus")}
        for path in ("/junk", "/zookeeper/junk"):
            with pytest.raises(NoAuthError):
                stratus.create(path, b"x")
        with pytest.raises(NoAuthError):
            stratus.set_acls("/", OPEN_ACL_UNSAFE)
        limits = "/zookeeper/quota/stratus/zookeeper_limits"
        assert b"byteHardLimit=67108864" in stratus.get(limits)[0]
        assert b"countHardLimit=100000" in stratus.get(limits)[0]
        with pytest.raises(NoAuthError):
            stratus.set(limits, b"count=-1,bytes=-1")
