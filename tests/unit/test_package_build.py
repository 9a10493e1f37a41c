"""build_package zips a directory deterministically, leaves caches out and follows no links."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from stratus.client_settings import package_limits
from stratus.codedist.errors import InvalidPackageError
from stratus.codedist.package_build import EPOCH, build_package, package_bytes
from stratus.codedist.package_check import check_package
from stratus.config import StratusConfig
from tests.harness.package_factory import valid_package, valid_package_dir

LIMITS = package_limits(StratusConfig())


def build(source: Path, tmp_path: Path, name: str = "out.zip") -> Path:
    return build_package(source, tmp_path / name)


def names(archive: Path) -> list[str]:
    with zipfile.ZipFile(archive) as zf:
        return zf.namelist()


def test_the_same_files_give_the_same_bytes(tmp_path: Path) -> None:
    first = valid_package_dir(tmp_path / "a", "wordcount", extra={"lib/util.py": "X = 1\n"})
    second = tmp_path / "b" / "wordcount"
    shutil.copytree(first, second)
    for path in second.rglob("*"):  # other times: still the same zip
        os.utime(path, (1_700_000_000, 1_700_000_000))
    one = build(first, tmp_path, "one.zip").read_bytes()
    assert build(first, tmp_path, "again.zip").read_bytes() == one
    assert build(second, tmp_path, "two.zip").read_bytes() == one


def test_a_built_directory_equals_the_same_files_built_in_memory(tmp_path: Path) -> None:
    directory = valid_package_dir(tmp_path, "wordcount")
    assert build(directory, tmp_path).read_bytes() == valid_package("wordcount")


def test_entries_are_sorted_with_fixed_times_and_modes(tmp_path: Path) -> None:
    directory = valid_package_dir(tmp_path, "wordcount", extra={"lib/util.py": "X = 1\n"})
    (directory / "run.sh").write_text("#!/bin/sh\n")
    (directory / "run.sh").chmod(0o700)
    (directory / "pipeline_main.py").chmod(0o600)
    with zipfile.ZipFile(build(directory, tmp_path)) as zf:
        infos = {info.filename: info for info in zf.infolist()}
        assert list(infos) == sorted(infos)
    assert list(infos) == ["lib/", "lib/util.py", "pipeline_main.py", "run.sh", "stratus.yaml"]
    assert {info.date_time for info in infos.values()} == {EPOCH}
    modes = {name: stat.filemode(info.external_attr >> 16) for name, info in infos.items()}
    assert modes == {
        "lib/": "drwxr-xr-x",
        "lib/util.py": "-rw-r--r--",
        "pipeline_main.py": "-rw-r--r--",
        "run.sh": "-rwxr-xr-x",
        "stratus.yaml": "-rw-r--r--",
    }
    files = [info for info in infos.values() if not info.is_dir()]
    assert {info.compress_type for info in files} == {zipfile.ZIP_DEFLATED}


def test_caches_and_version_control_are_left_out(tmp_path: Path) -> None:
    directory = valid_package_dir(tmp_path, "wordcount")
    for name in ("__pycache__/pipeline_main.cpython-311.pyc", "lib/old.pyc", ".git/HEAD"):
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(b"x")
    (directory / ".DS_Store").write_bytes(b"x")
    (directory / "lib" / ".DS_Store").write_bytes(b"x")
    assert names(build(directory, tmp_path)) == ["lib/", "pipeline_main.py", "stratus.yaml"]


def _symlink_to_file(path: Path) -> None:
    path.symlink_to("/etc/hostname")


def _symlink_to_directory(path: Path) -> None:
    path.symlink_to("/etc", target_is_directory=True)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))  # the socket file stays after close


@pytest.mark.parametrize(
    ("make", "what"),
    [
        (_symlink_to_file, "a symbolic link"),
        (_symlink_to_directory, "a symbolic link"),
        (_fifo, "a FIFO"),
        (_socket, "a socket"),
    ],
    ids=["symlink-to-file", "symlink-to-directory", "fifo", "socket"],
)
def test_a_special_file_in_the_directory_is_rejected_unfollowed(
    tmp_path: Path, make: Callable[[Path], None], what: str
) -> None:
    directory = valid_package_dir(tmp_path, "p")  # short: a socket path has a length limit
    (directory / "lib").mkdir()
    make(directory / "lib" / "special")
    dest = tmp_path / "out.zip"
    with pytest.raises(InvalidPackageError) as caught:
        build_package(directory, dest)
    assert caught.value.entry == "lib/special"
    assert f"{directory / 'lib' / 'special'} is {what}" in str(caught.value)
    assert not dest.exists()


def test_a_zip_file_is_returned_unchanged(tmp_path: Path) -> None:
    archive = tmp_path / "wordcount.zip"
    archive.write_bytes(valid_package("wordcount"))
    assert build_package(archive, tmp_path / "out.zip") == archive
    assert not (tmp_path / "out.zip").exists()


def test_a_missing_source_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidPackageError, match="no such directory or file"):
        build_package(tmp_path / "missing", tmp_path / "out.zip")


def test_check_package_accepts_what_is_built(tmp_path: Path) -> None:
    for kind in ("app", "sdp"):
        directory = valid_package_dir(tmp_path / kind, "etl", kind=kind, extra={"lib/": b""})
        checked = check_package(build(directory, tmp_path, f"{kind}.zip"), LIMITS)
        assert (checked.manifest.name, checked.manifest.kind) == ("etl", kind)


def test_package_bytes_ignores_the_order_it_is_given() -> None:
    files: dict[str, bytes | str] = {"stratus.yaml": "x", "a/b.py": b"y", "a/": b""}
    assert package_bytes(files) == package_bytes(dict(reversed(files.items())))
    assert package_bytes(files) != package_bytes({**files, "a/b.py": b"z"})
