"""check_package refuses every unsafe or broken package, naming the entry at fault.

Each malicious package is a valid one plus one bad entry (or one tampered header), so each
test fails if the check it is about were removed.
"""

from __future__ import annotations

import io
import random
import stat
import struct
import tracemalloc
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from stratus.client_settings import package_limits
from stratus.codedist import package_check, source_compile
from stratus.codedist.errors import InvalidPackageError
from stratus.codedist.package_check import CheckedPackage, PackageLimits, check_package
from stratus.config import config_from_mapping
from tests.harness.package_factory import package_files, valid_package

LIMITS = PackageLimits(
    max_bytes=256 << 20, max_unpacked_bytes=1 << 30, max_ratio=200.0, max_entries=10_000
)
MIB = 1 << 20

# (signature, offset of the name's length, offset of the name) of zip's two headers
CENTRAL = (b"PK\x01\x02", 28, 46)
LOCAL = (b"PK\x03\x04", 26, 30)
CENTRAL_FLAGS, CENTRAL_FILE_SIZE, CENTRAL_HEADER_OFFSET = 8, 24, 42
LOCAL_FILE_SIZE = 22


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return tmp_path / "package.zip"


def check(archive: Path, data: bytes, limits: PackageLimits = LIMITS) -> CheckedPackage:
    archive.write_bytes(data)
    return check_package(archive, limits)


def rejection(archive: Path, data: bytes, limits: PackageLimits = LIMITS) -> InvalidPackageError:
    with pytest.raises(InvalidPackageError) as caught:
        check(archive, data, limits)
    return caught.value


def package_with(
    *extra: tuple[str | zipfile.ZipInfo, bytes],
    compression: int = zipfile.ZIP_DEFLATED,
    files: Mapping[str, bytes | str] | None = None,
) -> bytes:
    """A zip of ``files`` (a valid package's by default), then the ``extra`` entries."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w", compression) as zf:
        warnings.simplefilter("ignore")  # "Duplicate name": some tests want one
        for name, content in (package_files() if files is None else files).items():
            zf.writestr(name, content)
        for name_or_info, content in extra:
            with zf.open(name_or_info, "w") as out:  # writestr refuses an empty name
                out.write(content)
    return buffer.getvalue()


def header_at(data: bytes, name: str, kind: tuple[bytes, int, int]) -> int:
    signature, length_at, name_at = kind
    at = data.find(signature)
    while at >= 0:
        (length,) = struct.unpack_from("<H", data, at + length_at)
        if data[at + name_at : at + name_at + length] == name.encode():
            return at
        at = data.find(signature, at + 1)
    raise AssertionError(f"no header for {name!r}")


def with_field(
    data: bytes, name: str, kind: tuple[bytes, int, int], offset: int, value: int
) -> bytes:
    """``data`` with the 4-byte field at ``offset`` of ``name``'s header set to ``value``."""
    patched = bytearray(data)
    struct.pack_into("<L", patched, header_at(data, name, kind) + offset, value)
    return bytes(patched)


def with_declared_size(data: bytes, name: str, size: int) -> bytes:
    data = with_field(data, name, CENTRAL, CENTRAL_FILE_SIZE, size)
    return with_field(data, name, LOCAL, LOCAL_FILE_SIZE, size)


def zeros_entry(path: Path, name: str, size: int) -> None:
    """A valid package plus ``name``: ``size`` zero bytes deflated, written as they stream."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file_name, content in package_files().items():
            zf.writestr(file_name, content)
        with zf.open(name, "w") as out:
            block = bytes(MIB)
            for _ in range(size // MIB):
                out.write(block)


# ---------------------------------------------------------------------- valid packages


def test_a_valid_app_package_passes_with_its_manifest_and_sizes(archive: Path) -> None:
    data = valid_package("wordcount", extra={"lib/": b"", "lib/util.py": "X = 1\n"})
    checked = check(archive, data)
    assert checked.manifest.name == "wordcount"
    assert checked.manifest.entrypoint == "pipeline_main:run"
    assert (checked.entries, checked.files) == (4, 3)
    assert checked.unpacked_bytes == sum(
        len(c.encode() if isinstance(c, str) else c)
        for c in package_files("wordcount", extra={"lib/util.py": "X = 1\n"}).values()
    )
    assert checked.packed_bytes == len(data)


def test_a_valid_sdp_package_passes(archive: Path) -> None:
    assert check(archive, valid_package("etl", kind="sdp")).manifest.kind == "sdp"


def test_names_with_a_leading_dot_slash_pass(archive: Path) -> None:
    files = {f"./{name}": content for name, content in package_files().items()}
    assert check(archive, package_with(files=files)).manifest.name == "example"


def test_limits_come_from_the_configuration() -> None:
    conf = config_from_mapping(
        {
            "nimbus.max.upload.bytes": 1000,
            "package.max.unpacked.bytes": 2000,
            "package.max.ratio": 3.5,
            "package.max.entries": 4,
        }
    )
    assert package_limits(conf) == PackageLimits(1000, 2000, 3.5, 4)


# ---------------------------------------------------------------------- the archive


@pytest.mark.parametrize(
    "data",
    [b"", b"name: wordcount\n", bytes(range(256)) * 4, valid_package()[:-30]],
    ids=["empty", "text", "binary", "truncated"],
)
def test_what_is_not_a_zip_is_rejected(archive: Path, data: bytes) -> None:
    error = rejection(archive, data)
    assert error.entry is None
    assert "is not a zip archive" in str(error)


def test_an_archive_over_the_upload_limit_is_rejected(archive: Path) -> None:
    data = valid_package()
    limits = PackageLimits(len(data) - 1, LIMITS.max_unpacked_bytes, 200, 100)
    error = rejection(archive, data, limits)
    assert error.entry is None
    assert f"is {len(data)} bytes, over nimbus.max.upload.bytes ({len(data) - 1})" in str(error)


def test_more_entries_than_allowed_are_refused_before_zipfile_reads_them(
    archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = package_with(*((f"data/{i}.txt", b"x") for i in range(5)))
    monkeypatch.setattr(zipfile, "ZipFile", _must_not_be_called)
    error = rejection(archive, data, PackageLimits(MIB, MIB, 200, 6))
    assert error.entry is None
    assert "holds 7 entries, over package.max.entries (6)" in str(error)


def test_an_end_record_that_understates_the_entries_is_caught_after_reading(
    archive: Path,
) -> None:
    data = bytearray(package_with(*((f"data/{i}.txt", b"x") for i in range(5))))
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<2H", data, end + 8, 1, 1)  # entries on this disk, entries in all
    error = rejection(archive, bytes(data), PackageLimits(MIB, MIB, 200, 6))
    assert "holds 7 entries, over package.max.entries (6)" in str(error)


def test_zip64_entry_counts_are_read_before_zipfile_reads_the_directory(
    archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = package_with(*((str(i), b"") for i in range(70_000)))  # a zip64 end record
    monkeypatch.setattr(zipfile, "ZipFile", _must_not_be_called)
    error = rejection(archive, data, PackageLimits(64 * MIB, MIB, 200, 70_001))  # > 0xFFFF
    assert "holds 70002 entries, over package.max.entries (70001)" in str(error)


def test_an_oversized_central_directory_is_refused_before_zipfile_reads_it(
    archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = zipfile.ZipInfo("notes.txt")
    info.comment = b"c" * 5000  # central directory bytes that hold no entry
    data = package_with((info, b"x"))
    monkeypatch.setattr(zipfile, "ZipFile", _must_not_be_called)
    error = rejection(archive, data, PackageLimits(MIB, MIB, 200, 4))
    assert error.entry is None
    assert "central directory is" in str(error)
    assert "package.max.entries (4)" in str(error)


def _must_not_be_called(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("zipfile read a central directory that should have been refused")


# ---------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("/etc/cron.d/evil", "is an absolute path"),
        ("\\evil.py", "is an absolute path"),
        ("C:evil.py", "is an absolute path"),
        ("../evil.py", "has a '..' component"),
        ("lib/../../evil.py", "has a '..' component"),
        ("lib\\evil.py", "has a backslash in its name"),
        ("", "has an empty name"),
        ("./", "names no file"),
    ],
)
def test_a_name_that_could_escape_is_rejected(archive: Path, name: str, problem: str) -> None:
    error = rejection(archive, package_with((name, b"x")))
    assert error.entry == name
    assert f"entry {name!r} {problem}" in str(error)


def test_a_nul_in_a_name_is_rejected(archive: Path) -> None:
    data = package_with(("evil_name.py", b"x")).replace(b"evil_name.py", b"evil\0name.py")
    error = rejection(archive, data)
    assert error.entry == "evil\0name.py"
    assert "has a NUL character in its name" in str(error)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("pipeline_main.py", "pipeline_main.py"),
        ("pipeline_main.py", "./pipeline_main.py"),
        ("lib/util.py", "lib//util.py"),
        ("lib/", "lib"),
    ],
)
def test_two_entries_for_one_file_are_rejected(archive: Path, first: str, second: str) -> None:
    files = {**package_files(), first: "A = 1\n"}
    error = rejection(archive, package_with((second, b"A = 2\n"), files=files))
    assert error.entry == second
    same = "appears twice" if first == second else f"and entry {first!r} name the same file"
    assert f"entry {second!r} {same}" in str(error)


# ---------------------------------------------------------------------- entry kinds


@pytest.mark.parametrize(
    ("file_type", "what"),
    [
        (stat.S_IFLNK, "a symbolic link"),
        (stat.S_IFCHR, "a character device"),
        (stat.S_IFBLK, "a block device"),
        (stat.S_IFIFO, "a FIFO"),
        (stat.S_IFSOCK, "a socket"),
    ],
)
def test_an_entry_that_is_not_a_file_or_directory_is_rejected(
    archive: Path, file_type: int, what: str
) -> None:
    info = zipfile.ZipInfo("lib/special")
    info.external_attr = (file_type | 0o777) << 16
    error = rejection(archive, package_with((info, b"/etc/passwd")))
    assert error.entry == "lib/special"
    assert f"entry 'lib/special' is {what}" in str(error)


def test_an_encrypted_entry_is_rejected(archive: Path) -> None:
    data = with_field(package_with(("secret.py", b"x")), "secret.py", CENTRAL, CENTRAL_FLAGS, 1)
    error = rejection(archive, data)
    assert error.entry == "secret.py"
    assert "entry 'secret.py' is encrypted" in str(error)


@pytest.mark.parametrize(
    ("method", "name"), [(zipfile.ZIP_BZIP2, "bzip2"), (zipfile.ZIP_LZMA, "lzma")]
)
def test_compression_other_than_deflate_is_rejected(archive: Path, method: int, name: str) -> None:
    info = zipfile.ZipInfo("lib/data.txt")
    info.compress_type = method
    error = rejection(archive, package_with((info, b"x" * 100)))
    assert error.entry == "lib/data.txt"
    assert f"is compressed with {name}" in str(error)


# ---------------------------------------------------------------------- sizes


def test_more_unpacked_bytes_than_allowed_are_rejected(archive: Path) -> None:
    data = valid_package(payload_bytes=4096)
    error = rejection(archive, data, PackageLimits(MIB, 4096, 200, 100))
    assert error.entry is None
    assert "over package.max.unpacked.bytes (4096)" in str(error)


def test_a_zip_bomb_is_rejected_without_being_inflated(
    archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zeros_entry(archive, "bomb.bin", 200 * MIB)
    monkeypatch.setattr(package_check, "_content", _must_not_be_called)
    with pytest.raises(InvalidPackageError) as caught:
        check_package(archive, LIMITS)
    assert caught.value.entry == "bomb.bin"
    assert f"entry 'bomb.bin' unpacks to {200 * MIB} bytes" in str(caught.value)
    assert "over package.max.ratio (200): it looks like a zip bomb" in str(caught.value)


def test_many_small_entries_that_make_a_bomb_together_are_rejected(archive: Path) -> None:
    data = package_with(*((f"part{i}.bin", bytes(MIB - 1)) for i in range(16)))
    error = rejection(archive, data)
    assert error.entry is None
    assert "the package unpacks to" in str(error)
    assert "over package.max.ratio (200)" in str(error)


def test_a_small_file_that_compresses_well_is_not_taken_for_a_bomb(archive: Path) -> None:
    data = package_with(("blank.txt", bytes(MIB - 4096)))  # 1 MiB or less in all
    assert check(archive, data).unpacked_bytes > MIB - 4096


def test_an_entry_with_more_data_than_declared_is_never_inflated_past_it(
    archive: Path,
) -> None:
    zeros_entry(archive, "small.bin", 200 * MIB)
    archive.write_bytes(with_declared_size(archive.read_bytes(), "small.bin", 1000))
    tracemalloc.start()
    try:
        with pytest.raises(InvalidPackageError) as caught:
            check_package(archive, LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.entry == "small.bin"
    assert "holds more than the 1000 bytes it declares" in str(caught.value)
    assert peak < 4 * MIB


def test_an_entry_with_less_data_than_declared_is_rejected(archive: Path) -> None:
    data = with_declared_size(package_with(("lib/a.txt", b"a" * 1000)), "lib/a.txt", 1500)
    error = rejection(archive, data)
    assert error.entry == "lib/a.txt"
    assert "holds 1000 bytes, not the 1500 it declares" in str(error)


def test_a_crc_error_is_reported_as_a_corrupt_entry(archive: Path) -> None:
    data = bytearray(package_with(("lib/a.txt", b"a" * 100), compression=zipfile.ZIP_STORED))
    data[data.index(b"a" * 100)] = ord("b")
    error = rejection(archive, bytes(data))
    assert error.entry == "lib/a.txt"
    assert "entry 'lib/a.txt' is corrupt: its data fails its CRC check" in str(error)


def test_invalid_deflate_data_is_reported_as_a_corrupt_entry(archive: Path) -> None:
    data = bytearray(package_with(("lib/a.txt", b"")))
    start = header_at(bytes(data), "lib/a.txt", LOCAL) + 30 + len("lib/a.txt")
    data[start : start + 2] = b"\xff\xff"  # a reserved block type
    error = rejection(archive, bytes(data))
    assert error.entry == "lib/a.txt"
    assert "its compressed data is invalid" in str(error)


def test_a_local_header_that_names_another_file_is_rejected(archive: Path) -> None:
    data = bytearray(package_with(("lib/a.txt", b"x")))
    at = header_at(bytes(data), "lib/a.txt", LOCAL) + 30
    data[at : at + 9] = b"lib/b.txt"
    error = rejection(archive, bytes(data))
    assert error.entry == "lib/a.txt"
    assert "its local header names it 'lib/b.txt'" in str(error)


def test_entries_that_share_their_data_are_rejected(archive: Path) -> None:
    data = package_with(("lib/a.txt", b"x"), ("lib/b.txt", b"y"))
    first = struct.unpack_from(
        "<L", data, header_at(data, "lib/a.txt", CENTRAL) + CENTRAL_HEADER_OFFSET
    )[0]
    data = with_field(data, "lib/b.txt", CENTRAL, CENTRAL_HEADER_OFFSET, first)
    error = rejection(archive, data)
    assert error.entry == "lib/b.txt"
    assert "its data overlaps entry 'lib/a.txt'" in str(error)


def test_damaged_bytes_only_ever_give_an_invalid_package_error(archive: Path) -> None:
    good = valid_package(extra={"lib/util.py": "X = 1\n" * 50})
    rng = random.Random(7)
    outcomes = set()
    for _ in range(400):
        data = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            check(archive, bytes(data))
            outcomes.add("passed")
        except InvalidPackageError:
            outcomes.add("rejected")
    assert "rejected" in outcomes


# ---------------------------------------------------------------------- the manifest


def test_a_package_without_a_manifest_at_its_root_is_rejected(archive: Path) -> None:
    files = {f"app/{name}": content for name, content in package_files().items()}
    error = rejection(archive, package_with(files=files))
    assert error.entry == "stratus.yaml"
    assert "the package has no stratus.yaml at its root" in str(error)


def test_an_invalid_manifest_is_rejected_naming_the_field(archive: Path) -> None:
    files = {**package_files(), "stratus.yaml": "name: wordcount\nkind: jar\n"}
    error = rejection(archive, package_with(files=files))
    assert error.entry == "stratus.yaml"
    assert str(error).startswith("stratus.yaml: kind: must be 'app' or 'sdp' (got 'jar')")


def test_a_manifest_that_is_not_utf8_is_rejected(archive: Path) -> None:
    manifest = "name: caf\xe9\nkind: app\nentrypoint: pipeline_main:run\n".encode("latin-1")
    error = rejection(archive, package_with(files={**package_files(), "stratus.yaml": manifest}))
    assert error.entry == "stratus.yaml"
    assert "stratus.yaml is not UTF-8 text" in str(error)


def test_a_huge_manifest_is_rejected_unread(archive: Path) -> None:
    rng = random.Random(1)
    padding = "".join(f"# {rng.getrandbits(128):032x}\n" for _ in range(40_000))
    files = {**package_files(), "stratus.yaml": str(package_files()["stratus.yaml"]) + padding}
    error = rejection(archive, package_with(files=files))
    assert error.entry == "stratus.yaml"
    assert "a manifest names the pipeline and its conf, not data" in str(error)


def test_an_app_whose_entrypoint_module_is_missing_is_rejected(archive: Path) -> None:
    files = package_files()
    del files["pipeline_main.py"]
    error = rejection(archive, package_with(files=files))
    assert error.entry == "stratus.yaml"
    assert "needs pipeline_main.py or pipeline_main/__init__.py" in str(error)


def test_an_entrypoint_module_may_be_a_package(archive: Path) -> None:
    manifest = "name: wordcount\nkind: app\nentrypoint: wc.jobs:run\n"
    files = {"stratus.yaml": manifest, "wc/jobs/__init__.py": "def run(spark, context): ...\n"}
    assert check(archive, package_with(files=files)).manifest.entrypoint == "wc.jobs:run"
    del files["wc/jobs/__init__.py"]
    assert "needs wc/jobs.py or wc/jobs/__init__.py" in str(
        rejection(archive, package_with(files=files))
    )


def test_an_sdp_package_without_its_project_file_is_rejected(archive: Path) -> None:
    files = package_files(kind="sdp")
    del files["spark-pipeline.yml"]
    error = rejection(archive, package_with(files=files))
    assert error.entry == "stratus.yaml"
    assert "project file 'spark-pipeline.yml' is not in the package" in str(error)


def test_an_sdp_project_file_may_be_elsewhere(archive: Path) -> None:
    files = package_files(kind="sdp")
    files["conf/pipeline.yml"] = files.pop("spark-pipeline.yml")
    files["stratus.yaml"] = "name: etl\nkind: sdp\nproject: ./conf/pipeline.yml\n"
    assert check(archive, package_with(files=files)).manifest.project == "conf/pipeline.yml"


# ---------------------------------------------------------------------- python sources


def test_a_python_file_with_a_syntax_error_is_refused_naming_file_and_line(archive: Path) -> None:
    broken = b"import os\n\ndef run(spark, context:\n    return 1\n"
    error = rejection(archive, package_with(("helpers/broken.py", broken)))
    assert error.entry == "helpers/broken.py"
    assert "helpers/broken.py, line 3" in str(error)
    assert "def run(spark, context:" in str(error)


def test_a_bad_indentation_in_the_entry_module_is_refused(archive: Path) -> None:
    files = {**package_files(), "wordcount.py": "def run(spark, context):\nreturn 1\n"}
    error = rejection(archive, package_with(files=files))
    assert "wordcount.py, line 2: expected an indented block" in str(error)


def test_a_nul_byte_in_a_python_file_is_refused(archive: Path) -> None:
    error = rejection(archive, package_with(("lib.py", b"x = 1\x00\n")))
    assert error.entry == "lib.py"
    assert "null bytes" in str(error)


def test_source_too_deep_for_the_parser_is_refused_not_crashing(archive: Path) -> None:
    error = rejection(archive, package_with(("deep.py", b"x = " + b"(" * 100_000 + b")" * 100_000)))
    assert error.entry == "deep.py"


def test_a_file_that_is_not_python_is_not_compiled(archive: Path) -> None:
    checked = check(archive, package_with(("data/rows.txt", b"def (: not python")))
    assert checked.files == len(package_files()) + 1


def test_a_python_file_too_large_to_compile_is_left_to_the_preflight(archive: Path) -> None:
    huge = b"x = 1\n" * (source_compile.MAX_SOURCE_BYTES // 6 + 1) + b"def (:\n"
    stored = package_with(("generated.py", huge), compression=zipfile.ZIP_STORED)
    checked = check(archive, stored)
    assert checked.files == len(package_files()) + 1


def test_the_compiled_bytes_of_a_package_are_bounded() -> None:
    each = source_compile.MAX_SOURCE_BYTES
    files = [(f"m{i:02d}.py", each) for i in range(20)]
    chosen = source_compile.compiled_within_budget(files)
    assert len(chosen) == source_compile.MAX_COMPILED_BYTES // each
    assert chosen == sorted(chosen) and chosen[0] == "m00.py"
