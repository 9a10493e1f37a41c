"""Kerberos (GSSAPI) to a real ``stratus pacemaker`` process, against a real MIT KDC.

The pacemaker accepts with its keytab (``pacemaker/127.0.0.1@STRATUS.TEST``, the principal a
client that connects to 127.0.0.1 asks a ticket for); each client takes its initial ticket
from its own client keytab (``KRB5_CLIENT_KTNAME``) into its own ticket cache. The principals
file lets in a nimbus and two supervisors; ``stranger`` has a valid ticket but no line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from stratus.api.records import SupervisorHeartbeat
from stratus.cli.main import main
from stratus.config import load_config
from stratus.pacemaker.auth import AuthMethod
from stratus.pacemaker.client import PacemakerPool
from stratus.pacemaker.connection import PacemakerConnection
from stratus.pacemaker.errors import (
    KerberosHandshakeError,
    PacemakerAuthFileError,
    PacemakerRequestError,
    PacemakerUnavailableError,
    SubtreeMismatchError,
)
from stratus.pacemaker.kerberos import KerberosClientSettings, parse_kerberos_principals
from stratus.pacemaker.protocol import Op
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.security.tls import TlsSettings
from stratus.settings import pacemaker_client_settings, pacemaker_server_settings
from stratus.state.factory import StateStoreSettings, create_state_store
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.store import ClusterStateStore
from stratus.zk.paths import ClusterPaths
from tests.harness.kdc import Kdc
from tests.harness.pacemaker_process import PacemakerProcess
from tests.harness.tls_certs import TestCa

gssapi = pytest.importorskip("gssapi", reason="no gssapi package: install stratus-ha[kerberos]")

T = TypeVar("T")
SERVICE = "pacemaker/127.0.0.1"
USERS = ("nimbus/n1", "supervisor/host1", "supervisor/host2", "stranger/host9")


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Realm:
    kdc: Kdc
    server: PacemakerProcess
    keytabs: dict[str, Path]  # client keytab of each user
    directory: Path


@pytest.fixture(scope="module")
def realm(kdc: Kdc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Realm]:
    directory = tmp_path_factory.mktemp("kerberized-pacemaker")
    service = kdc.add_principal(SERVICE)
    kdc.add_principal("pacemaker/impostor")  # a real principal whose key the server lacks
    server_keytab = kdc.keytab(directory / "pacemaker.keytab", service)
    keytabs = {
        user: kdc.keytab(directory / f"{user.replace('/', '-')}.keytab", kdc.add_principal(user))
        for user in USERS
    }
    principals = directory / "pacemaker.principals"
    principals.write_text(
        "# principal                       role\n"
        f"{kdc.principal('nimbus/n1')}        nimbus\n"
        f"{kdc.principal('supervisor/host1')} supervisor\n"
        f"{kdc.principal('supervisor/host2')} supervisor\n"
    )
    principals.chmod(0o600)
    with pytest.MonkeyPatch.context() as patch:  # the server process's Kerberos environment
        for name, value in kdc.client_env(directory / "server.cc").items():
            patch.setenv(name, value)
        patch.delenv("KRB5_CLIENT_KTNAME", raising=False)
        server = PacemakerProcess(
            directory,
            [
                "pacemaker.auth.method=kerberos",
                f"pacemaker.auth.file={principals}",
                f"pacemaker.kerberos.keytab={server_keytab}",
                f"pacemaker.kerberos.service.principal=pacemaker/_HOST@{kdc.realm}",
            ],
        ).start()
    try:
        yield Realm(kdc, server, keytabs, directory)
    finally:
        server.stop()


def as_user(monkeypatch: pytest.MonkeyPatch, realm: Realm, ccache: Path, user: str | None) -> None:
    """This process becomes ``user``'s Kerberos client (no keytab: no ticket at all)."""
    monkeypatch.delenv("KRB5_CLIENT_KTNAME", raising=False)
    keytab = realm.keytabs[user] if user else None
    for name, value in realm.kdc.client_env(ccache, keytab).items():
        monkeypatch.setenv(name, value)


def kerberos_settings(realm: Realm, service: str | None = None) -> PacemakerClientSettings:
    return PacemakerClientSettings(
        servers=(realm.server.address,),
        auth_method=AuthMethod.KERBEROS,
        kerberos=KerberosClientSettings(service),
        timeout_secs=10.0,
    )


async def connected(realm: Realm, service: str | None = None) -> PacemakerConnection:
    connection = PacemakerConnection(*realm.server.address, kerberos_settings(realm, service))
    try:
        await connection.open()
    except BaseException:
        await connection.close()
        raise
    return connection


class RawClient:
    """A socket that speaks frames by hand: what a client that skips the handshake sends."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=30)
        self.ids = 0

    def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        self.ids += 1
        body = msgpack.packb({"id": self.ids, "op": op, **fields}, use_bin_type=True)
        self.sock.sendall(struct.pack(">I", len(body)) + body)
        answer = self.read()
        assert answer is not None, "the server closed the connection without an answer"
        return answer

    def read(self) -> dict[str, Any] | None:
        header = self._exactly(4)
        if header is None:
            return None
        body = self._exactly(struct.unpack(">I", header)[0])
        assert body is not None
        answer: dict[str, Any] = msgpack.unpackb(body, raw=False)
        return answer

    def _exactly(self, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


# ------------------------------------------------------------------------------ scenarios


def test_a_supervisor_with_a_ticket_reads_and_writes_its_own_subtree(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "host1.cc", "supervisor/host1")

    async def scenario() -> None:
        async with PacemakerPool(kerberos_settings(realm)) as pool:
            assert await pool.send_pulses([("/supervisors/host1/w1", b"beat", 1.0)]) == 1
            read = await pool.get_all_pulses_for_path("/supervisors/host1")
            assert read.value["/supervisors/host1/w1"].data == b"beat"
        connection = await connected(realm)
        try:
            status = await connection.request(Op.STATUS)
            assert status["ok"]
        finally:
            await connection.close()

    run(scenario())
    as_user(monkeypatch, realm, tmp_path / "nimbus.cc", "nimbus/n1")

    async def nimbus_reads_everything() -> None:
        async with PacemakerPool(kerberos_settings(realm)) as pool:
            read = await pool.get_all_pulses_for_path("/supervisors")
            assert read.value["/supervisors/host1/w1"].data == b"beat"

    run(nimbus_reads_everything())


def test_the_server_names_the_authenticated_principal_and_its_role(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "host2.cc", "supervisor/host2")
    answers: list[dict[str, Any]] = []

    async def scenario() -> None:
        connection = PacemakerConnection(*realm.server.address, kerberos_settings(realm))
        request = connection.request

        async def recording(op: Op, **fields: Any) -> dict[str, Any]:
            answer = await request(op, **fields)
            answers.append(answer)
            return answer

        connection.request = recording  # type: ignore[method-assign]
        try:
            await connection.open()
        finally:
            await connection.close()

    run(scenario())
    last = answers[-1]
    assert last["complete"] is True
    assert (last["principal"], last["role"]) == (
        realm.kdc.principal("supervisor/host2"),
        "supervisor",
    )
    assert isinstance(last["token"], bytes)  # the mutual authentication token
    assert last["subtree"] == "/supervisors/host2"


def test_pacemaker_auth_principal_chooses_the_client_principal_of_a_keytab(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client keytab holding two principals: the configured one authenticates."""
    kdc = realm.kdc
    both = kdc.keytab(
        tmp_path / "both.keytab",
        kdc.principal("supervisor/host1"),
        kdc.principal("supervisor/host2"),
    )
    monkeypatch.delenv("KRB5_CLIENT_KTNAME", raising=False)
    for name, value in kdc.client_env(tmp_path / "both.cc", both).items():
        monkeypatch.setenv(name, value)
    subtrees: list[str] = []

    async def authenticate_as(principal: str | None) -> None:
        settings = dataclasses.replace(
            kerberos_settings(realm), kerberos=KerberosClientSettings(None, principal)
        )
        connection = PacemakerConnection(*realm.server.address, settings)
        request = connection.request

        async def recording(op: Op, **fields: Any) -> dict[str, Any]:
            answer = await request(op, **fields)
            subtrees.append(answer.get("subtree", ""))
            return answer

        connection.request = recording  # type: ignore[method-assign]
        try:
            await connection.open()
        finally:
            await connection.close()

    run(authenticate_as(kdc.principal("supervisor/host2")))
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'default.cc'}")  # one cache per name
    run(authenticate_as(None))  # the keytab's first principal
    assert [s for s in subtrees if s] == ["/supervisors/host2", "/supervisors/host1"]


def test_a_supervisor_writing_another_subtree_is_refused(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "host1.cc", "supervisor/host1")

    async def scenario() -> None:
        connection = await connected(realm)
        try:
            for op, fields in (
                (Op.SEND_PULSE, {"path": "/supervisors/host2/w1", "data": b"x", "time": 1.0}),
                (Op.SEND_PULSES, {"pulses": [["/supervisors/host2/w1", b"x", 1.0]]}),
                (Op.DELETE_PATH, {"path": "/supervisors/host2"}),
                (Op.GET_ALL_PULSES_FOR_PATH, {"path": "/supervisors"}),
            ):
                with pytest.raises(PacemakerRequestError) as refused:
                    await connection.request(op, **fields)
                assert refused.value.code == "forbidden", op
        finally:
            await connection.close()

    run(scenario())


def test_a_client_without_a_ticket_is_refused(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "empty.cc", None)
    with pytest.raises(KerberosHandshakeError) as refused:
        run(connected(realm))
    message = str(refused.value)
    assert "could not authenticate the default principal to the pacemaker at 127.0.0.1" in message
    assert "KRB5_CLIENT_KTNAME" in message

    raw = RawClient(realm.server.address)  # a token that is no ticket: refused, closed
    try:
        raw.ask("hello")
        answer = raw.ask("authenticate", token=b"\x60\x10not a kerberos token")
        assert (answer["ok"], answer["error"]) == (False, "auth_failed")
        assert raw.read() is None
    finally:
        raw.close()


def test_a_principal_not_in_the_principals_file_is_refused(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "stranger.cc", "stranger/host9")
    with pytest.raises(KerberosHandshakeError) as refused:
        run(connected(realm))
    assert "not in pacemaker.auth.file" in str(refused.value)
    assert realm.kdc.principal("stranger/host9") in str(refused.value)


def test_a_client_expecting_another_server_principal_refuses_the_server(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "host1.cc", "supervisor/host1")
    impostor = realm.kdc.principal("pacemaker/impostor")
    with pytest.raises(KerberosHandshakeError) as refused:
        run(connected(realm, service=impostor))
    assert impostor in str(refused.value)
    # the expected principal given with _HOST, as a cluster of several servers writes it:

    async def expecting_the_right_one() -> None:
        connection = await connected(realm, service=f"pacemaker/_HOST@{realm.kdc.realm}")
        await connection.close()

    run(expecting_the_right_one())


def test_a_kerberos_client_refuses_a_server_of_another_method(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "host1.cc", "supervisor/host1")
    plain = PacemakerProcess(tmp_path).start()  # auth method none
    try:
        settings = kerberos_settings(realm)
        connection = PacemakerConnection(*plain.address, settings)

        async def scenario() -> None:
            try:
                await connection.open()
            finally:
                await connection.close()

        with pytest.raises(KerberosHandshakeError, match="authenticates with 'none', not kerberos"):
            run(scenario())
    finally:
        plain.stop()


def test_a_server_that_cannot_prove_its_principal_is_refused(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An impostor on a real socket takes the ticket and answers "complete" without the
    mutual authentication token only the holder of the service key can make."""
    as_user(monkeypatch, realm, tmp_path / "host1.cc", "supervisor/host1")
    took_token: list[bytes] = []

    async def impostor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await answer_all(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()  # the client left

    async def answer_all(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while header := await reader.readexactly(4):
            request = msgpack.unpackb(await reader.readexactly(struct.unpack(">I", header)[0]))
            answer: dict[str, Any] = {"id": request["id"], "ok": True, "warming": False}
            if request["op"] == "hello":
                answer |= {"auth": "kerberos", "nonce": b"n" * 32}
            elif request["op"] == "authenticate":
                took_token.append(request["token"])
                answer |= {"token": None, "complete": True, "principal": "x", "role": "nimbus"}
            else:
                answer |= {"entries": 0, "bytes": 0}
            body = msgpack.packb(answer, use_bin_type=True)
            writer.write(struct.pack(">I", len(body)) + body)
            await writer.drain()

    async def scenario() -> None:
        server = await asyncio.start_server(impostor, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        settings = kerberos_settings(realm, service=realm.kdc.principal(SERVICE))
        connection = PacemakerConnection("127.0.0.1", port, settings)
        try:
            with pytest.raises(KerberosHandshakeError) as refused:
                await connection.open()
            assert "did not prove it is" in str(refused.value)
        finally:
            await connection.close()
            server.close()

    run(scenario())
    assert took_token  # the client got as far as the ticket, and stopped there


def test_frames_before_the_handshake_are_refused_and_the_server_keeps_serving_others(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = RawClient(realm.server.address)
    try:
        for op, fields in (
            ("send_pulse", {"path": "/supervisors/host1/forged", "data": b"x", "time": 1.0}),
            ("get_all_pulses_for_path", {"path": "/"}),
            ("delete_path", {"path": "/supervisors"}),
            ("status", {}),
        ):
            answer = raw.ask(op, **fields)
            assert (answer["ok"], answer["error"]) == (False, "not_authenticated"), op
        assert raw.ask("hello")["auth"] == "kerberos"
        oversized = raw.ask("authenticate", token=b"\0" * (65 << 10))
        assert (oversized["ok"], oversized["error"]) == (False, "auth_failed")
        assert "token of 1 to" in oversized["message"]

        as_user(monkeypatch, realm, tmp_path / "nimbus.cc", "nimbus/n1")

        async def others_are_served() -> None:
            async with PacemakerPool(kerberos_settings(realm)) as pool:
                assert not (await pool.exists("/supervisors/host1/forged")).value
                await pool.send_pulse("/supervisors/host1/w9", b"ok", 2.0)
                assert (await pool.get_pulse("/supervisors/host1/w9")).value is not None

        run(others_are_served())
    finally:
        raw.close()


def test_a_token_made_for_one_connection_is_refused_on_another(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The context is bound to the connection's nonce (channel bindings), and a token is
    accepted once: a captured ticket does not authenticate another connection."""
    as_user(monkeypatch, realm, tmp_path / "host1.cc", "supervisor/host1")
    first, second, third = (RawClient(realm.server.address) for _ in range(3))

    def token_for(nonce: bytes) -> bytes:
        name = gssapi.Name(realm.kdc.principal(SERVICE), gssapi.NameType.kerberos_principal)
        context = gssapi.SecurityContext(
            name=name,
            usage="initiate",
            flags=gssapi.RequirementFlag.mutual_authentication,
            channel_bindings=gssapi.raw.ChannelBindings(application_data=nonce),
        )
        token: bytes = context.step()
        return token

    try:
        nonce = first.ask("hello")["nonce"]
        second.ask("hello")
        third.ask("hello")
        elsewhere = second.ask("authenticate", token=token_for(nonce))
        assert (elsewhere["ok"], elsewhere["error"]) == (False, "auth_failed")
        token = token_for(nonce)
        answer = first.ask("authenticate", token=token)  # on its own connection it works
        assert answer["ok"] and answer["complete"]
        assert first.ask("get_all_pulses_for_path", path="/supervisors/host1")["ok"]
        replayed = third.ask("authenticate", token=token)
        assert (replayed["ok"], replayed["error"]) == (False, "auth_failed")
    finally:
        for raw in (first, second, third):
            raw.close()


def test_a_connection_that_does_not_authenticate_in_time_is_closed(realm: Realm, kdc: Kdc) -> None:
    principals = realm.directory / "pacemaker.principals"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KRB5_CONFIG", str(kdc.krb5_conf))
        server = PacemakerProcess(
            realm.directory,
            [
                "pacemaker.auth.method=kerberos",
                f"pacemaker.auth.file={principals}",
                f"pacemaker.kerberos.keytab={realm.directory / 'pacemaker.keytab'}",
                "pacemaker.auth.timeout.secs=0.5",
            ],
        ).start()
    raw = RawClient(server.address)
    try:
        assert raw.ask("hello")["auth"] == "kerberos"
        assert raw.read() is None  # no answer, just the end of the connection
    finally:
        raw.close()
        server.stop()


def test_kerberos_over_tls_two_servers_and_the_pool_writes_to_both(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two TLS pacemakers sharing the service keytab: a supervisor's pool authenticates to
    each, its pulse reaches both, and a plaintext client gets nothing."""
    ca = TestCa(tmp_path)
    issued = ca.issue("pacemaker", ip="127.0.0.1")
    principals = realm.directory / "pacemaker.principals"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KRB5_CONFIG", str(realm.kdc.krb5_conf))
        servers = [
            PacemakerProcess(
                tmp_path,
                [
                    "pacemaker.auth.method=kerberos",
                    f"pacemaker.auth.file={principals}",
                    f"pacemaker.kerberos.keytab={realm.directory / 'pacemaker.keytab'}",
                    f"pacemaker.tls.cert={issued.cert}",
                    f"pacemaker.tls.key={issued.key}",
                ],
            ).start()
            for _ in range(2)
        ]
    as_user(monkeypatch, realm, tmp_path / "host1.cc", "supervisor/host1")
    try:
        settings = PacemakerClientSettings(
            servers=tuple(s.address for s in servers),
            auth_method=AuthMethod.KERBEROS,
            tls=TlsSettings(ca=str(ca.cert)),
            timeout_secs=10.0,
        )

        async def scenario() -> None:
            async with PacemakerPool(settings) as pool:
                assert await pool.send_pulse("/supervisors/host1/w", b"over tls", 1.0) == 2
                read = await pool.get_pulse("/supervisors/host1/w")
                assert read.answered == 2
                assert read.value is not None and read.value.data == b"over tls"
            plaintext = dataclasses.replace(settings, tls=None, timeout_secs=3.0)
            with pytest.raises(PacemakerUnavailableError):
                await PacemakerConnection(*servers[0].address, plaintext).open()

        run(scenario())
    finally:
        for server in servers:
            server.stop()


# ------------------------------------------------------------------ the principals file


def test_the_principals_file_maps_a_supervisor_to_its_host_subtree() -> None:
    principals = parse_kerberos_principals(
        "# principal role\n"
        "nimbus/n1.example.org@EXAMPLE.ORG nimbus\n"
        "supervisor/node7.example.org@EXAMPLE.ORG supervisor\n"
        "node8@EXAMPLE.ORG supervisor\n",
        "pm.principals",
    )
    node7 = principals["supervisor/node7.example.org@EXAMPLE.ORG"]
    assert (node7.role, node7.subtree) == ("supervisor", "node7.example.org")
    assert principals["node8@EXAMPLE.ORG"].subtree == "node8"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("supervisor/h1 supervisor\n", "not a full Kerberos principal"),
        ("supervisor/h1@R supervisor 0123456789abcdef0123\n", "no secret"),
        ("a/b/c@R supervisor\n", "has 3 components"),
        ("supervisor/h1@R admin\n", "the role must be"),
        ("supervisor/h1@R supervisor\nother/h1@R supervisor\n", "would both write"),
        ("x@R nimbus\nx@R nimbus\n", "listed twice"),
        ("# nobody\n", "lists no principal"),
    ],
)
def test_a_bad_principals_file_is_refused_naming_the_line(text: str, error: str) -> None:
    with pytest.raises(PacemakerAuthFileError, match=error):
        parse_kerberos_principals(text, "pm.principals")


# ------------------------------------------------------------------------- configuration


def test_the_kerberos_keys_reach_the_server_and_client_settings(tmp_path: Path) -> None:
    conf = load_config(
        None,
        [
            "pacemaker.auth.method=kerberos",
            "pacemaker.host=10.0.0.7",
            f"pacemaker.kerberos.keytab={tmp_path / 'pm.keytab'}",
            "pacemaker.kerberos.service.principal=pacemaker/_HOST@EXAMPLE.ORG",
            "pacemaker.auth.timeout.secs=3",
        ],
        environ={},
    )
    server = pacemaker_server_settings(conf)
    assert server.kerberos is not None
    assert server.kerberos.keytab == str(tmp_path / "pm.keytab")
    assert server.kerberos.service_principal == "pacemaker/10.0.0.7@EXAMPLE.ORG"
    assert server.auth_timeout_secs == 3.0
    client = pacemaker_client_settings(conf)
    assert client.auth_method is AuthMethod.KERBEROS
    assert client.kerberos.service_principal == "pacemaker/_HOST@EXAMPLE.ORG"  # per server


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        (["pacemaker.kerberos.keytab=/nonexistent.keytab"], "needs pacemaker.kerberos.keytab"),
        (["pacemaker.auth.file=PRINCIPALS"], "needs pacemaker.kerberos.keytab"),
        (
            ["pacemaker.auth.file=PRINCIPALS", "pacemaker.kerberos.keytab=/nonexistent.keytab"],
            "pacemaker.kerberos.keytab /nonexistent.keytab is not a file",
        ),
        (
            ["pacemaker.auth.file=PRINCIPALS", "pacemaker.kerberos.keytab=EMPTY"],
            "cannot accept Kerberos with the keytab",
        ),
        (
            ["pacemaker.auth.file=PRINCIPALS", "pacemaker.kerberos.keytab=OPEN"],
            "is open to group or others",
        ),
    ],
)
def test_a_kerberos_pacemaker_without_its_keytab_or_principals_does_not_start(
    overrides: list[str], error: str, tmp_path: Path
) -> None:
    principals = tmp_path / "pm.principals"
    principals.write_text("nimbus/n1@EXAMPLE.ORG nimbus\n")
    principals.chmod(0o600)
    empty, open_to_all = tmp_path / "empty.keytab", tmp_path / "open.keytab"
    empty.touch(mode=0o600)
    open_to_all.touch(mode=0o644)
    args = ["pacemaker", "-c", "pacemaker.auth.method=kerberos"]
    paths = {"PRINCIPALS": principals, "EMPTY": empty, "OPEN": open_to_all}
    for override in overrides:
        key, value = override.split("=", 1)
        args += ["-c", f"{key}={paths.get(value, value)}"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2  # usage: a configuration that cannot work
    assert error in result.output


# ----------------------------------------------------------- the supervisor's heartbeat store


def supervisor_store(realm: Realm, owner: str) -> ClusterStateStore:
    """The heartbeat store a supervisor ``owner`` builds at start (never started: unused)."""
    settings = StateStoreSettings("pacemaker", 10.0, kerberos_settings(realm))
    return create_state_store(
        settings, KazooClient(hosts="127.0.0.1:1"), ClusterPaths("/stratus"), owner=owner
    )


def test_a_supervisor_whose_id_is_not_its_principals_host_is_refused_at_start(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "host1.cc", "supervisor/host1")
    with pytest.raises(SubtreeMismatchError) as refused:
        supervisor_store(realm, "worker-7")
    message = str(refused.value)
    assert "/supervisors/host1" in message and "/supervisors/worker-7" in message
    assert "set supervisor.id to 'host1'" in message


def test_a_supervisor_named_after_its_principals_host_writes_its_round(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "host2.cc", "supervisor/host2")
    board = HeartbeatBoard(supervisor_store(realm, "host2"))
    try:
        board.put_round(SupervisorHeartbeat(id="host2", time=1.0, slots=2), [])
    finally:
        board.close()
    as_user(monkeypatch, realm, tmp_path / "nimbus.cc", "nimbus/n1")
    nimbus = HeartbeatBoard(
        create_state_store(
            StateStoreSettings("pacemaker", 10.0, kerberos_settings(realm)),
            KazooClient(hosts="127.0.0.1:1"),
            ClusterPaths("/stratus"),
        )
    )
    try:
        assert nimbus.read().supervisors["host2"].slots == 2
    finally:
        nimbus.close()
