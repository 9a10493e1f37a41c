"""Pure logic of the pacemaker: the frame decoder (fuzzed), the store's tree, TTL and bounds,
the digest proof and the credentials file."""

from __future__ import annotations

import struct

import msgpack
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from stratus.cli.main import main
from stratus.config import load_config
from stratus.pacemaker.auth import (
    PacemakerRole,
    Principal,
    check_proof,
    digest_proof,
    may_read,
    may_write,
    parse_secrets,
)
from stratus.pacemaker.client import parse_servers
from stratus.pacemaker.errors import (
    FrameError,
    PacemakerAuthFileError,
    PacemakerError,
    PathError,
    StoreFullError,
)
from stratus.pacemaker.protocol import FrameDecoder, encode_frame
from stratus.pacemaker.server import pulses_page
from stratus.pacemaker.store import PulseStore, StoreLimits
from stratus.settings import pacemaker_client_settings

MAX_FRAME = 4096


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------------- frames


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_the_frame_decoder_never_crashes_nor_buffers_beyond_a_frame(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(max_frame_bytes=MAX_FRAME)
    for chunk in chunks:
        try:
            messages = decoder.feed(chunk)
        except FrameError:
            return  # the server closes such a connection
        assert all(isinstance(m, dict) for m in messages)
        assert decoder.buffered <= MAX_FRAME + 4


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.text(max_size=8),
            st.one_of(
                st.integers(-(2**63), 2**64 - 1),
                st.binary(max_size=50),
                st.text(max_size=20),
                st.none(),
            ),
            max_size=5,
        ),
        max_size=10,
    ),
    st.integers(min_value=1, max_value=50),
)
def test_frames_split_anywhere_decode_to_the_messages_sent(messages, cut) -> None:
    wire = b"".join(encode_frame(m, max_frame_bytes=MAX_FRAME) for m in messages)
    decoder = FrameDecoder(max_frame_bytes=MAX_FRAME)
    decoded = []
    for start in range(0, len(wire), cut):
        decoded += decoder.feed(wire[start : start + cut])
    assert decoded == messages


def test_an_oversized_length_is_refused_before_its_body_arrives() -> None:
    decoder = FrameDecoder(max_frame_bytes=MAX_FRAME)
    with pytest.raises(FrameError, match="above the maximum"):
        decoder.feed(struct.pack(">I", MAX_FRAME + 1))
    assert decoder.buffered == 0


def test_a_body_that_is_not_a_map_is_refused() -> None:
    body = msgpack.packb([1, 2])
    with pytest.raises(FrameError, match="not a map"):
        FrameDecoder(max_frame_bytes=MAX_FRAME).feed(struct.pack(">I", len(body)) + body)


def test_a_huge_declared_container_inside_a_small_frame_is_refused() -> None:
    body = b"\xdd\xff\xff\xff\xff"  # array32 of 4 billion items, five bytes long
    with pytest.raises(FrameError):
        FrameDecoder(max_frame_bytes=MAX_FRAME).feed(struct.pack(">I", len(body)) + body)


# ------------------------------------------------------------------------- store


def store(max_entries: int = 100, max_bytes: int = 10_000, ttl: float = 10.0):
    clock = FakeClock()
    return PulseStore(StoreLimits(max_entries, max_bytes, ttl), clock=clock), clock


def test_ttl_eviction_takes_the_stale_pulses_and_their_empty_parents() -> None:
    pulses, clock = store(ttl=10)
    pulses.create_path("/kept")
    pulses.send_pulse("/a/b/old", b"1", 0.0)
    clock.now = 6
    pulses.send_pulse("/a/c/new", b"2", 0.0)
    clock.now = 11
    assert pulses.evict_expired() == 1
    assert not pulses.exists("/a/b")
    assert pulses.exists("/a/c/new") and pulses.exists("/kept")
    clock.now = 17
    assert pulses.evict_expired() == 1
    assert not pulses.exists("/a")
    assert pulses.entries == 1 and pulses.bytes == len("kept")


def test_a_rewritten_pulse_lives_a_ttl_from_its_last_write() -> None:
    pulses, clock = store(ttl=10)
    pulses.send_pulse("/w", b"1", 0.0)
    clock.now = 8
    pulses.send_pulse("/w", b"2", 0.0)
    clock.now = 12
    assert pulses.evict_expired() == 0
    assert pulses.get_pulse("/w") is not None


def test_bytes_and_entries_are_bounded_and_given_back() -> None:
    pulses, _ = store(max_entries=3, max_bytes=100)
    pulses.send_pulse("/a", b"x" * 90, 0.0)
    with pytest.raises(StoreFullError, match=r"pacemaker\.max\.bytes"):
        pulses.send_pulse("/b", b"x" * 20, 0.0)
    pulses.send_pulse("/b", b"", 0.0)
    pulses.send_pulse("/c", b"", 0.0)
    with pytest.raises(StoreFullError, match=r"pacemaker\.max\.entries"):
        pulses.send_pulse("/d", b"", 0.0)
    assert pulses.delete_path("/a") == 1
    pulses.send_pulse("/d", b"x" * 50, 0.0)
    assert pulses.entries == 3


def test_bad_paths_are_refused() -> None:
    pulses, _ = store()
    for bad in ("relative", "/a//b", "/a/", "", "/x\0y", "/" + "a/" * 40 + "a", "/a/..", "/./a"):
        with pytest.raises(PathError):
            pulses.send_pulse(bad, b"", 0.0)


def test_deleting_the_root_empties_the_store() -> None:
    pulses, _ = store()
    pulses.send_pulse("/a/b", b"xy", 0.0)
    pulses.create_path("/c")
    assert pulses.delete_path("/") == 1
    assert (pulses.entries, pulses.bytes) == (0, 0)


def test_pages_follow_path_order_and_every_pulse_is_in_exactly_one() -> None:
    pulses, _ = store(max_entries=1000, max_bytes=100_000)
    paths = ["/s/a", "/s/a/w/x", "/s/a-b", "/s/a/w/y", "/s/b", "/s/a/v"]
    for n, path in enumerate(paths):
        pulses.send_pulse(path, bytes([n]) * 30, float(n))
    in_order = [key for key, _ in pulses.iter_pulses_after("/s", "")]
    assert in_order == ["/s/a", "/s/a/v", "/s/a/w/x", "/s/a/w/y", "/s/a-b", "/s/b"]
    assert [key for key, _ in pulses.iter_pulses_after("/s", "/s/a/w/x")] == in_order[3:]

    read: list[str] = []
    after, pages = "", 0
    while True:  # a budget of about two pulses a page
        page = pulses_page(pulses.iter_pulses_after("/s", after), budget_bytes=160)
        assert 1 <= len(page["pulses"]) <= 2
        read += page["pulses"]
        pages += 1
        if page["next"] is None:
            break
        after = page["next"]
    assert read == in_order and pages == 3


# ------------------------------------------------------------------------- auth


def test_a_proof_holds_only_for_its_secret_nonce_and_principal() -> None:
    secrets = parse_secrets(f"s1 supervisor {'a' * 32}\n", "test")
    proof = digest_proof(b"a" * 32, b"nonce-1", "s1")
    assert check_proof(secrets, "s1", b"nonce-1", proof) == Principal(
        "s1", PacemakerRole.SUPERVISOR
    )
    assert check_proof(secrets, "s1", b"nonce-2", proof) is None  # replayed on another nonce
    assert check_proof(secrets, "s1", b"nonce-1", digest_proof(b"b" * 32, b"nonce-1", "s1")) is None
    assert check_proof(secrets, "s2", b"nonce-1", digest_proof(b"a" * 32, b"nonce-1", "s2")) is None


def test_a_supervisor_is_confined_to_its_subtree() -> None:
    s1 = Principal("s1", PacemakerRole.SUPERVISOR)
    nimbus = Principal("n", PacemakerRole.NIMBUS)
    assert may_write(s1, "/supervisors/s1") and may_write(s1, "/supervisors/s1/w/x")
    assert not may_write(s1, "/supervisors/s10") and not may_write(s1, "/supervisors")
    assert not may_read(s1, "/") and may_read(nimbus, "/") and may_write(nimbus, "/anything")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("s1 supervisor short\n", "shorter than"),
        (f"s1 admin {'a' * 32}\n", "role must be"),
        (f"s1 supervisor {'a' * 32}\ns1 nimbus {'b' * 32}\n", "listed twice"),
        ("# nothing\n", "lists no principal"),
        (f"a/b supervisor {'a' * 32}\n", "may not contain /"),
    ],
)
def test_a_bad_credentials_file_is_refused_without_echoing_a_secret(text, error) -> None:
    with pytest.raises(PacemakerAuthFileError, match=error) as refused:
        parse_secrets(text, "pm.secrets")
    assert "a" * 32 not in str(refused.value)


# ------------------------------------------------------------------------- settings


def test_servers_are_host_or_host_port() -> None:
    assert parse_servers(["a", "b:7000", "[::1]:7001", "::1"], 6699) == (
        ("a", 6699),
        ("b", 7000),
        ("::1", 7001),
        ("::1", 6699),
    )
    with pytest.raises(PacemakerError, match="no valid port"):
        parse_servers(["b:http"], 6699)


def test_a_client_takes_its_principal_line_from_the_credentials_file(tmp_path) -> None:
    secrets = tmp_path / "pm.secrets"
    secrets.write_text(f"nimbus nimbus {'n' * 32}\ns1 supervisor {'a' * 32}\n")
    secrets.chmod(0o600)
    base = ["pacemaker.auth.method=digest", f"pacemaker.auth.file={secrets}"]
    with pytest.raises(PacemakerAuthFileError, match=r"set pacemaker\.auth\.principal"):
        pacemaker_client_settings(load_config(None, base, environ={}))
    conf = load_config(None, [*base, "pacemaker.auth.principal=s1"], environ={})
    client = pacemaker_client_settings(conf)
    assert (client.principal, client.secret) == ("s1", b"a" * 32)
    assert client.servers == (("127.0.0.1", 6699),)
    secrets.chmod(0o644)
    with pytest.raises(PacemakerAuthFileError, match="chmod 600"):
        pacemaker_client_settings(conf)


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        (["pacemaker.host=0.0.0.0"], "is not loopback and pacemaker.auth.method is none"),
        (["pacemaker.auth.method=kerberos"], "kerberos needs pacemaker.kerberos.keytab"),
        (["pacemaker.auth.method=digest"], "digest needs pacemaker.auth.file"),
    ],
)
def test_the_pacemaker_command_refuses_settings_that_cannot_work(overrides, error) -> None:
    args = ["pacemaker"] + [arg for o in overrides for arg in ("-c", o)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2  # usage: a configuration that cannot work
    assert error in result.output
