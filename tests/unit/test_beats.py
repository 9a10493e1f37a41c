"""A beat's pulse: its path, its encoding, and what a reader refuses to take for one."""

from __future__ import annotations

import msgpack
import pytest

from stratus.state.beats import (
    MAX_BEAT_BYTES,
    MAX_BOOT_ID_CHARS,
    Beat,
    BeatAck,
    BeatRead,
    beat_owner,
    beat_path,
    decode_beat,
    encode_beat,
)
from stratus.state.errors import BadBeatError

BOOT = "5f0c2b6e-8a51-4a4e-9a63-2f1d6c0e7b11"


def test_a_beat_is_a_msgpack_array_of_version_boot_id_seq_and_lease() -> None:
    data = encode_beat(BOOT, 42, 0.8)
    assert msgpack.unpackb(data) == [1, BOOT, 42, 0.8]
    assert decode_beat("s1", data) == Beat(boot_id=BOOT, seq=42, lease_secs=0.8)


def test_the_largest_beat_fits_the_bound_a_reader_checks() -> None:
    largest = encode_beat("b" * MAX_BOOT_ID_CHARS, (1 << 63) - 1, 1e300)
    assert len(largest) <= MAX_BEAT_BYTES
    assert decode_beat("s1", largest).seq == (1 << 63) - 1


def test_an_integer_lease_reads_as_seconds() -> None:
    assert decode_beat("s1", msgpack.packb([1, BOOT, 0, 2])).lease_secs == 2.0


@pytest.mark.parametrize(
    ("boot_id", "seq", "lease_secs", "field"),
    [
        ("", 1, 0.8, "boot_id"),
        ("b" * (MAX_BOOT_ID_CHARS + 1), 1, 0.8, "boot_id"),
        (BOOT, -1, 0.8, "seq"),
        (BOOT, True, 0.8, "seq"),
        (BOOT, 1 << 63, 0.8, "seq"),
        (BOOT, 1.5, 0.8, "seq"),
        (BOOT, 1, 0, "lease_secs"),
        (BOOT, 1, float("nan"), "lease_secs"),
        (BOOT, 1, float("inf"), "lease_secs"),
    ],
)
def test_a_beat_that_cannot_be_sent_names_its_field(
    boot_id: str, seq: int, lease_secs: float, field: str
) -> None:
    with pytest.raises(ValueError, match=f"a beat's {field}"):
        encode_beat(boot_id, seq, lease_secs)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xc1", "not msgpack"),
        (b"\x94\x01", "not msgpack"),  # an array cut short
        (msgpack.packb([1, BOOT, 1, 0.8]) + b"\x00", "not msgpack"),  # trailing bytes
        (msgpack.packb({"seq": 1}), "format version 1"),
        (msgpack.packb([2, BOOT, 1, 0.8]), "format version 1"),
        (msgpack.packb([1, BOOT, 1]), "format version 1"),
        (msgpack.packb([1, BOOT, 1, 0.8, "more"]), "format version 1"),
        (msgpack.packb([1, b"bytes", 1, 0.8], use_bin_type=True), "boot_id"),
        (msgpack.packb([1, "", 1, 0.8]), "boot_id"),
        (msgpack.packb([1, BOOT, -5, 0.8]), "seq"),
        (msgpack.packb([1, BOOT, True, 0.8]), "seq"),
        (msgpack.packb([1, BOOT, "7", 0.8]), "seq"),
        (msgpack.packb([1, BOOT, 1, -0.8]), "lease_secs"),
        (msgpack.packb([1, BOOT, 1, None]), "lease_secs"),
        (msgpack.packb([1, BOOT, 1, "x" * 200]), f"above any beat's {MAX_BEAT_BYTES}"),
        (b"\x00" * 10_000, f"above any beat's {MAX_BEAT_BYTES}"),
    ],
)
def test_a_pulse_that_is_not_a_beat_is_refused_with_its_reason(data: bytes, reason: str) -> None:
    with pytest.raises(BadBeatError, match=reason) as refused:
        decode_beat("s9", data)
    assert refused.value.supervisor == "s9"


def test_a_beat_lives_at_beats_slash_the_supervisor_id() -> None:
    assert beat_path("s1") == "/beats/s1"
    assert beat_owner("/beats/s1") == "s1"
    assert beat_owner("/beats/s1/below") is None
    assert beat_owner("/beats") is None
    assert beat_owner("/supervisors/s1") is None


@pytest.mark.parametrize("supervisor_id", ["", "a/b", ".", "..", "nul\0"])
def test_an_id_that_is_not_one_path_segment_names_no_beat(supervisor_id: str) -> None:
    with pytest.raises(ValueError, match="cannot name a beat"):
        beat_path(supervisor_id)


def test_a_beat_counts_once_a_majority_stored_it() -> None:
    assert BeatAck("s1", 1, acknowledged=2, servers=3, need=2).counted
    assert not BeatAck("s1", 1, acknowledged=1, servers=3, need=2).counted


def test_a_beat_read_from_less_than_a_majority_judges_nothing() -> None:
    assert BeatRead({}, answered=2, servers=3).from_majority
    assert not BeatRead({}, answered=1, servers=3).from_majority
    assert not BeatRead({}, answered=0, servers=0).from_majority
