"""Checks that a pipeline package is safe to unpack, within the limits, and runnable.

The client checks a package before it uploads it, and every nimbus checks it again before
storing it. The package is a zip file; it is read, never extracted, and no entry is ever
inflated past the size its central directory declares, so a zip bomb costs a few reads::

    limits = package_limits(conf)                            # stratus.client_settings
    checked = check_package(Path("wordcount.zip"), limits)    # else InvalidPackageError
    checked.manifest.name, checked.files, checked.unpacked_bytes

Refused, in the order checked (``InvalidPackageError.entry`` names the entry at fault):

- an archive over ``nimbus.max.upload.bytes``, one that is not a zip, more entries than
  ``package.max.entries`` (counted before zipfile reads the central directory, which is
  bounded too, and again after);
- names that could land outside the unpack directory (empty, absolute, ``..``, backslash,
  NUL), entries that are not regular files or directories (symlinks, devices, FIFOs,
  sockets), encrypted entries, compression other than deflate or none, and two entries that
  name the same file once ``./``, ``//`` and a trailing ``/`` are normalised;
- a declared unpacked size over ``package.max.unpacked.bytes``, or an unpacked/packed ratio
  over ``package.max.ratio`` (for the archive and each entry, when over 1 MiB unpacked);
- entries whose data overlap, whose local header disagrees with the central directory,
  whose data holds more or fewer bytes than declared, or that fail their CRC check;
- no ``stratus.yaml`` at the root, an invalid one, or a manifest naming an entrypoint
  module or SDP project file that the package lacks;
- a Python file (``*.py``) that does not byte-compile (``source_compile``): the error names
  the file, the line and the parser's message.
"""

from __future__ import annotations

import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from stratus.api.echo import echo
from stratus.codedist.errors import InvalidPackageError
from stratus.codedist.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest, parse_manifest
from stratus.codedist.source_compile import (
    compile_error,
    compiled_within_budget,
    is_python_source,
)

CHUNK = 64 * 1024
RATIO_FLOOR_BYTES = 1024 * 1024  # smaller unpacked sizes cannot make a bomb: no ratio check
DIRECTORY_BYTES_PER_ENTRY = 1024  # central directory bytes accepted per allowed entry
MAX_ZIP_COMMENT = 0xFFFF

_END_RECORD = struct.Struct("<4s4H2LH")  # end of central directory
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_END_RECORD = struct.Struct("<4sQ2H2L4Q")
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_END_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_ZIP64_END_SIGNATURE = b"PK\x06\x06"
_LOCAL_SIGNATURE = b"PK\x03\x04"

_FLAG_ENCRYPTED = 0x01 | 0x40  # traditional and strong encryption
_FLAG_UTF8_NAME = 0x800
_DRIVE = re.compile(r"[A-Za-z]:")
_SPECIAL_FILES: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)
_METHOD_NAMES = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma", 9: "deflate64"}
_REBUILD = "let stratus zip the pipeline's directory (stratus submit DIRECTORY)"


@dataclass(frozen=True)
class PackageLimits:
    """How large a package may be, packed and unpacked (see the module docstring)."""

    max_bytes: int
    max_unpacked_bytes: int
    max_ratio: float
    max_entries: int


@dataclass(frozen=True)
class CheckedPackage:
    """A package that passed every check: its manifest and its sizes."""

    manifest: Manifest
    entries: int  # files and directories
    files: int
    unpacked_bytes: int  # the sum of the files' sizes
    packed_bytes: int  # the size of the zip


def check_package(path: Path, limits: PackageLimits) -> CheckedPackage:
    """Check the zip at ``path``; InvalidPackageError naming the first problem found."""
    packed = _archive_size(path, limits)
    with path.open("rb") as fp:
        _check_directory_size(fp, packed, limits)
        infos = _read_directory(fp)
        _check_entry_count(len(infos), limits)
        by_name = _check_entries(infos)
        unpacked = _check_sizes(infos, packed, limits)
        _check_contents(fp, infos, packed)
        manifest = _read_manifest(fp, by_name)
        _check_sources(fp, by_name)
    _check_runnable(manifest, by_name)
    return CheckedPackage(
        manifest=manifest,
        entries=len(infos),
        files=sum(not info.is_dir() for info in infos),
        unpacked_bytes=unpacked,
        packed_bytes=packed,
    )


# ---------------------------------------------------------------------- the archive


def _archive_size(path: Path, limits: PackageLimits) -> int:
    size = path.stat().st_size
    if size > limits.max_bytes:
        raise InvalidPackageError(
            f"the package is {size} bytes, over nimbus.max.upload.bytes ({limits.max_bytes}); "
            "leave data out of the package or raise the limit on the nimbuses"
        )
    return size


def _not_a_zip(why: str) -> InvalidPackageError:
    return InvalidPackageError(
        f"the package is not a zip archive, or a corrupt one: {why}; "
        "a package is a .zip file or a directory"
    )


def _check_directory_size(fp: BinaryIO, packed: int, limits: PackageLimits) -> None:
    """Refuse a central directory too large for the entries allowed, before zipfile reads it."""
    entries, directory_bytes = _end_record(fp, packed)
    _check_entry_count(entries, limits)
    if directory_bytes > limits.max_entries * DIRECTORY_BYTES_PER_ENTRY:
        raise InvalidPackageError(
            f"the package's central directory is {directory_bytes} bytes, more than "
            f"{DIRECTORY_BYTES_PER_ENTRY} bytes for each of the package.max.entries "
            f"({limits.max_entries}) entries allowed; {_REBUILD}"
        )


def _end_record(fp: BinaryIO, packed: int) -> tuple[int, int]:
    """(entries, central directory bytes) as the end record (zip64's if any) declares them."""
    tail_start = max(packed - _END_RECORD.size - MAX_ZIP_COMMENT, 0)
    fp.seek(tail_start)
    tail = fp.read()
    at = _end_record_offset(tail)
    if at < 0:
        raise _not_a_zip("it has no end of central directory record")
    fields = _END_RECORD.unpack_from(tail, at)
    zip64 = _zip64_end_record(fp, tail_start + at)
    return zip64 if zip64 is not None else (fields[4], fields[5])


def _end_record_offset(tail: bytes) -> int:
    """Where the end record starts in ``tail``, found as zipfile finds it; -1 if nowhere."""
    last = len(tail) - _END_RECORD.size
    if last >= 0 and tail[last : last + 4] == _END_SIGNATURE and tail[-2:] == b"\0\0":
        return last  # no archive comment
    at = tail.rfind(_END_SIGNATURE)
    return at if 0 <= at <= last else -1


def _zip64_end_record(fp: BinaryIO, end_record_at: int) -> tuple[int, int] | None:
    record_at = end_record_at - _ZIP64_LOCATOR.size - _ZIP64_END_RECORD.size
    if record_at < 0:
        return None
    fp.seek(record_at)
    record = fp.read(_ZIP64_END_RECORD.size)
    locator = fp.read(_ZIP64_LOCATOR.size)
    if not (
        locator.startswith(_ZIP64_LOCATOR_SIGNATURE) and record.startswith(_ZIP64_END_SIGNATURE)
    ):
        return None
    fields = _ZIP64_END_RECORD.unpack(record)
    return fields[7], fields[8]


def _read_directory(fp: BinaryIO) -> list[zipfile.ZipInfo]:
    try:
        with zipfile.ZipFile(fp) as archive:  # leaves ``fp`` open
            return archive.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, NotImplementedError) as exc:
        raise _not_a_zip(str(exc)) from None


def _check_entry_count(entries: int, limits: PackageLimits) -> None:
    if entries > limits.max_entries:
        raise InvalidPackageError(
            f"the package holds {entries} entries, over package.max.entries "
            f"({limits.max_entries}); leave generated files out or raise the limit"
        )


# ---------------------------------------------------------------------- entries


def _check_entries(infos: Sequence[zipfile.ZipInfo]) -> dict[str, zipfile.ZipInfo]:
    """Check each entry's name and kind; the entries by normalised name."""
    by_name: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        _check_name(info.orig_filename)
        _check_file_type(info)
        _check_not_encrypted(info)
        _check_method(info)
        _check_unique(info, by_name)
    return by_name


def normal_name(name: str) -> str:
    """``name`` without ``.`` components, empty components and a trailing ``/``."""
    return "/".join(part for part in name.split("/") if part not in ("", "."))


def _check_name(name: str) -> None:
    problem = _name_problem(name)
    if problem is not None:
        raise InvalidPackageError(f"entry {echo(name)} {problem}; {_REBUILD}", entry=name)


def _name_problem(name: str) -> str | None:
    outside = "which could write outside the directory the package is unpacked in"
    if not name:
        return "has an empty name"
    if "\x00" in name:
        return "has a NUL character in its name, which tools read differently"
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        return f"is an absolute path, {outside}"
    if "\\" in name:
        return "has a backslash in its name; zip names separate directories with '/'"
    if ".." in name.split("/"):
        return f"has a '..' component, {outside}"
    if not normal_name(name):
        return "names no file"
    return None


def _check_file_type(info: zipfile.ZipInfo) -> None:
    mode = info.external_attr >> 16
    for is_special, what in _SPECIAL_FILES:
        if is_special(mode):
            name = info.orig_filename
            raise InvalidPackageError(
                f"entry {echo(name)} is {what}; a package holds only regular files and "
                "directories: put the file itself in the package",
                entry=name,
            )


def _check_not_encrypted(info: zipfile.ZipInfo) -> None:
    if info.flag_bits & _FLAG_ENCRYPTED:
        name = info.orig_filename
        raise InvalidPackageError(
            f"entry {echo(name)} is encrypted; zip the package without a password", entry=name
        )


def _check_method(info: zipfile.ZipInfo) -> None:
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        name = info.orig_filename
        method = _METHOD_NAMES.get(info.compress_type, f"method {info.compress_type}")
        raise InvalidPackageError(
            f"entry {echo(name)} is compressed with {method}; a package's entries are deflated "
            f"or stored: {_REBUILD}",
            entry=name,
        )


def _check_unique(info: zipfile.ZipInfo, by_name: dict[str, zipfile.ZipInfo]) -> None:
    name = info.orig_filename
    normal = normal_name(name)
    other = by_name.get(normal)
    if other is not None:
        same = (
            "appears twice"
            if other.orig_filename == name
            else f"and entry {echo(other.orig_filename)} name the same file"
        )
        raise InvalidPackageError(
            f"entry {echo(name)} {same}; tools unpack one or the other: keep one", entry=name
        )
    by_name[normal] = info


# ---------------------------------------------------------------------- sizes


def _check_sizes(infos: Sequence[zipfile.ZipInfo], packed: int, limits: PackageLimits) -> int:
    """The declared unpacked size, checked against the limits; each entry's ratio too."""
    for info in infos:
        if _ratio_too_high(info.file_size, info.compress_size, limits):
            name = info.orig_filename
            raise InvalidPackageError(
                f"entry {echo(name)} unpacks to {info.file_size} bytes from {info.compress_size} "
                f"packed, {_ratio(info.file_size, info.compress_size)}, over "
                f"package.max.ratio ({limits.max_ratio:g}): it looks like a zip bomb",
                entry=name,
            )
    unpacked = sum(info.file_size for info in infos)
    if unpacked > limits.max_unpacked_bytes:
        raise InvalidPackageError(
            f"the package unpacks to {unpacked} bytes, over package.max.unpacked.bytes "
            f"({limits.max_unpacked_bytes}); leave data out of the package or raise the limit"
        )
    if _ratio_too_high(unpacked, packed, limits):
        raise InvalidPackageError(
            f"the package unpacks to {unpacked} bytes from {packed} packed, "
            f"{_ratio(unpacked, packed)}, over package.max.ratio ({limits.max_ratio:g}): "
            "it looks like a zip bomb"
        )
    return unpacked


def _ratio_too_high(unpacked: int, packed: int, limits: PackageLimits) -> bool:
    return unpacked > RATIO_FLOOR_BYTES and unpacked > limits.max_ratio * packed


def _ratio(unpacked: int, packed: int) -> str:
    return f"a ratio of {unpacked / packed:.0f}" if packed else "an infinite ratio"


# ---------------------------------------------------------------------- contents


def _check_contents(fp: BinaryIO, infos: Sequence[zipfile.ZipInfo], packed: int) -> None:
    """Inflate every entry, in archive order, without keeping what it yields."""
    data_end, previous = 0, None
    for info in sorted(infos, key=lambda info: info.header_offset):
        if previous is not None and info.header_offset < data_end:
            raise _corrupt(info, f"its data overlaps entry {echo(previous.orig_filename)}")
        data_end = _check_content(fp, info, packed)
        previous = info


def _check_content(fp: BinaryIO, info: zipfile.ZipInfo, packed: int) -> int:
    """Count and CRC the entry's bytes, stopping past the declared size; its data's end."""
    start = _data_start(fp, info)
    if start + info.compress_size > packed:
        raise _corrupt(info, "its data runs past the end of the archive")
    size, crc = 0, 0
    for piece in _content(fp, info, start):
        size += len(piece)
        if size > info.file_size:
            raise _size_lie(info, f"holds more than the {info.file_size} bytes it declares")
        crc = zlib.crc32(piece, crc)
    if size < info.file_size:
        raise _size_lie(info, f"holds {size} bytes, not the {info.file_size} it declares")
    if crc != info.CRC:
        raise _corrupt(info, "its data fails its CRC check")
    return start + info.compress_size


def _data_start(fp: BinaryIO, info: zipfile.ZipInfo) -> int:
    """Where the entry's data starts, after a local header that must match the directory."""
    if info.header_offset < 0:  # zipfile subtracts what it took for a prefix
        raise _corrupt(info, "its local header is outside the archive")
    fp.seek(info.header_offset)
    header = fp.read(_LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size or not header.startswith(_LOCAL_SIGNATURE):
        raise _corrupt(info, "its local header is missing")
    name_length: int
    extra_length: int
    *_, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    encoding = "utf-8" if info.flag_bits & _FLAG_UTF8_NAME else "cp437"
    local_name = fp.read(name_length).decode(encoding, errors="replace")
    if local_name != info.orig_filename:
        raise _corrupt(info, f"its local header names it {echo(local_name)}")
    return info.header_offset + _LOCAL_HEADER.size + name_length + extra_length


def _content(fp: BinaryIO, info: zipfile.ZipInfo, start: int) -> Iterator[bytes]:
    """The entry's unpacked bytes, at most ``CHUNK`` at a time."""
    raw = _raw(fp, start, info.compress_size)
    if info.compress_type == zipfile.ZIP_STORED or info.compress_size == 0:
        yield from raw  # some tools write an empty deflated entry as no data at all
        return
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    try:
        for chunk in raw:
            pending = chunk
            while not inflater.eof and (piece := inflater.decompress(pending, CHUNK)):
                yield piece
                pending = inflater.unconsumed_tail
            if inflater.eof:
                return
    except zlib.error as exc:
        raise _corrupt(info, f"its compressed data is invalid ({exc})") from None
    raise _corrupt(info, "its compressed data ends before its end-of-data marker")


def _raw(fp: BinaryIO, start: int, length: int) -> Iterator[bytes]:
    fp.seek(start)
    left = length
    while left > 0 and (chunk := fp.read(min(CHUNK, left))):
        left -= len(chunk)
        yield chunk


def _corrupt(info: zipfile.ZipInfo, why: str) -> InvalidPackageError:
    name = info.orig_filename
    return InvalidPackageError(f"entry {echo(name)} is corrupt: {why}; zip it again", entry=name)


def _size_lie(info: zipfile.ZipInfo, what: str) -> InvalidPackageError:
    name = info.orig_filename
    return InvalidPackageError(
        f"entry {echo(name)} {what}: the zip's sizes are wrong (tampered with or corrupt); "
        f"{_REBUILD}",
        entry=name,
    )


# ---------------------------------------------------------------------- the manifest


def _read_manifest(fp: BinaryIO, by_name: Mapping[str, zipfile.ZipInfo]) -> Manifest:
    info = by_name.get(MANIFEST_NAME)
    if info is None or info.is_dir():
        raise InvalidPackageError(
            f"the package has no {MANIFEST_NAME} at its root; add one that names the "
            "pipeline and how to run it (see docs/packages.md)",
            entry=MANIFEST_NAME,
        )
    if info.file_size > MAX_MANIFEST_BYTES:
        raise InvalidPackageError(
            f"{MANIFEST_NAME} is {info.file_size} bytes, over {MAX_MANIFEST_BYTES}; "
            "a manifest names the pipeline and its conf, not data",
            entry=MANIFEST_NAME,
        )
    data = b"".join(_content(fp, info, _data_start(fp, info)))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidPackageError(
            f"{MANIFEST_NAME} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
            "save it as UTF-8",
            entry=MANIFEST_NAME,
        ) from None
    return parse_manifest(text)


def _check_sources(fp: BinaryIO, by_name: Mapping[str, zipfile.ZipInfo]) -> None:
    """Every Python file of the package byte-compiles (in memory, never run; within the
    bounds of ``source_compile``)."""
    python = [
        (name, info.file_size)
        for name, info in by_name.items()
        if not info.is_dir() and is_python_source(name)
    ]
    for name in compiled_within_budget(python):
        info = by_name[name]
        source = b"".join(_content(fp, info, _data_start(fp, info)))
        problem = compile_error(info.orig_filename, source)
        if problem is not None:
            raise InvalidPackageError(
                f"{problem}; fix the file and try again", entry=info.orig_filename
            )


def _check_runnable(manifest: Manifest, by_name: Mapping[str, zipfile.ZipInfo]) -> None:
    """The module of an app's entrypoint, or an sdp's project file, is in the package."""
    files = {name for name, info in by_name.items() if not info.is_dir()}
    if manifest.entrypoint is not None:
        module = manifest.entrypoint.partition(":")[0].replace(".", "/")
        candidates = (f"{module}.py", f"{module}/__init__.py")
        if not files.intersection(candidates):
            raise InvalidPackageError(
                f"{MANIFEST_NAME}: entrypoint {echo(manifest.entrypoint)} needs {candidates[0]} "
                f"or {candidates[1]} in the package, and it has neither; add the module or "
                "fix the entrypoint",
                entry=MANIFEST_NAME,
            )
    if manifest.project is not None and manifest.project not in files:
        raise InvalidPackageError(
            f"{MANIFEST_NAME}: project file {echo(manifest.project)} is not in the package; add "
            "it or set project to its path",
            entry=MANIFEST_NAME,
        )
