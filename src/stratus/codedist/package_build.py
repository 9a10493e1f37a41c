"""Zips a pipeline's directory into a package, the same bytes every time.

The same files give the same zip, so the same sha256 digest (with the same Python and
zlib): entries are sorted by name, every timestamp is 1980-01-01 00:00, modes are 0o644
for files and 0o755 for directories and executables, and files are deflated.
``__pycache__/``, ``.git/``, ``*.pyc`` and ``.DS_Store`` are left out. Symlinks are not
followed: a symlink, device, FIFO or socket in the directory is an error naming it::

    archive = build_package(Path("examples/wordcount"), Path("/tmp/wordcount.zip"))
    build_package(Path("wordcount.zip"), Path("/tmp/unused.zip"))    # a file: returned as is
    package_bytes({"stratus.yaml": "name: wc\\n...", "wc/main.py": "def run(spark, context): ..."})
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from stratus.codedist.errors import InvalidPackageError

EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip can hold
FILE_MODE = 0o644
EXECUTABLE_MODE = 0o755
SKIPPED_DIRECTORIES = frozenset({"__pycache__", ".git"})
SKIPPED_FILES = frozenset({".DS_Store"})
SKIPPED_SUFFIXES = (".pyc",)
CHUNK = 1024 * 1024
_MSDOS_DIRECTORY = 0x10
_UNIX = 3  # the ZipInfo.create_system that says external_attr holds a Unix mode


@dataclass(frozen=True)
class _Entry:
    name: str  # the name in the zip; directories end with '/'
    path: Path
    executable: bool


def build_package(source: Path, dest: Path) -> Path:
    """The zip to upload: ``source`` itself if it is a file, else ``source`` zipped to ``dest``."""
    if source.is_file():
        return source  # check_package says whether it is a zip
    if not source.is_dir():
        raise InvalidPackageError(f"{source}: no such directory or file; give a package path")
    entries = sorted(_walk(source, ""), key=lambda entry: entry.name)
    try:
        with zipfile.ZipFile(dest, "w") as archive:
            for entry in entries:
                _write(archive, entry)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return dest


def package_bytes(files: Mapping[str, bytes | str]) -> bytes:
    """A package in memory, built as ``build_package`` builds one; names ending '/' are dirs."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(files):
            info = _info(name, executable=False)
            if info.is_dir():
                archive.mkdir(info)
            else:
                archive.writestr(info, files[name])
    return buffer.getvalue()


def _walk(directory: Path, prefix: str) -> Iterator[_Entry]:
    """The entries under ``directory``, without following links or descending skipped dirs."""
    with os.scandir(directory) as listing:
        children = list(listing)
    for child in children:
        path = Path(child.path)
        mode = child.stat(follow_symlinks=False).st_mode
        name = prefix + _zip_name(path, child.name)
        if stat.S_ISDIR(mode):
            if child.name not in SKIPPED_DIRECTORIES:
                yield _Entry(f"{name}/", path, executable=True)
                yield from _walk(path, f"{name}/")
        elif stat.S_ISREG(mode):
            if child.name not in SKIPPED_FILES and not child.name.endswith(SKIPPED_SUFFIXES):
                yield _Entry(name, path, executable=bool(mode & 0o111))
        else:
            raise InvalidPackageError(
                f"{path} is {_kind(mode)}; a package holds only regular files and directories: "
                "replace it with the file it stands for, or move it out of the directory",
                entry=name,
            )


def _zip_name(path: Path, name: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidPackageError(
            f"{path}: the name is not valid UTF-8; rename the file", entry=name
        ) from None
    return name


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device file"


def _info(name: str, *, executable: bool) -> zipfile.ZipInfo:
    """A ZipInfo that depends on nothing but the name (and the executable bit)."""
    info = zipfile.ZipInfo(name, date_time=EPOCH)
    info.create_system = _UNIX
    if info.is_dir():
        info.external_attr = (stat.S_IFDIR | EXECUTABLE_MODE) << 16 | _MSDOS_DIRECTORY
        info.CRC = info.compress_size = info.file_size = 0  # ZipFile.mkdir sets none of them
    else:
        mode = EXECUTABLE_MODE if executable else FILE_MODE
        info.external_attr = (stat.S_IFREG | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _write(archive: zipfile.ZipFile, entry: _Entry) -> None:
    info = _info(entry.name, executable=entry.executable)
    if info.is_dir():
        archive.mkdir(info)
        return
    with entry.path.open("rb") as src:
        info.file_size = os.fstat(src.fileno()).st_size  # zip64 headers if it needs them
        with archive.open(info, "w") as out:
            shutil.copyfileobj(src, out, CHUNK)
