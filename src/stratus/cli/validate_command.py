"""``stratus validate PATH``: check a package as a nimbus would, without submitting it.

    stratus validate examples/wordcount    # ok: pipeline wordcount, kind app (...), 3 files, 2 KiB
    stratus validate wordcount.zip --json  # the manifest, the sizes and the sha256

A directory is zipped first, as ``stratus submit`` zips it, so the sha256 printed is the
digest a submit would give. The limits are the configured ones (``nimbus.max.upload.bytes``
and ``package.max.*``). An invalid package prints ``error: <what is wrong>`` on stderr (with
``--json``, ``{"error": "invalid_package", "message": ...}`` on stdout) and exits 1: for this
command an invalid package is its answer, not a usage error.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import NoReturn

import click

from stratus.api.redaction import redact_conf
from stratus.cli.options import with_config
from stratus.cli.pipeline_views import format_size
from stratus.client_settings import package_limits
from stratus.codedist.errors import InvalidPackageError
from stratus.codedist.package_build import build_package
from stratus.codedist.package_check import CheckedPackage, PackageLimits, check_package
from stratus.codedist.transfer.check import hash_file
from stratus.config import StratusConfig

INVALID = 1  # the exit code of a package found invalid


@click.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--json", "as_json", is_flag=True, help="Print the manifest, the sizes and the sha256 as JSON."
)
@with_config
def validate(*, path: Path, as_json: bool, conf: StratusConfig) -> None:
    """Check the pipeline package PATH (a directory or a .zip) without submitting it."""
    try:
        checked, digest = _check(path, package_limits(conf))
    except InvalidPackageError as exc:
        _refuse("invalid_package", str(exc), as_json=as_json)
    except OSError as exc:
        message = f"cannot read {exc.filename or path}: {exc.strerror}"
        _refuse("unreadable", message, as_json=as_json)
    if as_json:
        click.echo(json.dumps(_summary(checked, digest), indent=2))
    else:
        click.echo(_line(checked))


def _refuse(code: str, message: str, *, as_json: bool) -> NoReturn:
    """Report why the package is not valid, and exit 1."""
    if as_json:
        click.echo(json.dumps({"error": code, "message": message, "exit_code": INVALID}))
    else:
        click.echo(f"error: {message}", err=True)
    raise click.exceptions.Exit(INVALID)


def _check(path: Path, limits: PackageLimits) -> tuple[CheckedPackage, str]:
    """The checked package and the sha256 of the zip a submit would upload."""
    with tempfile.TemporaryDirectory(prefix="stratus-validate-") as tmp:
        archive = build_package(path, Path(tmp) / "package.zip")
        checked = check_package(archive, limits)
        return checked, hash_file(archive)[0]


def _line(checked: CheckedPackage) -> str:
    manifest = checked.manifest
    runs = (
        f"entrypoint {manifest.entrypoint}"
        if manifest.kind == "app"
        else f"project {manifest.project}"
    )
    files = "1 file" if checked.files == 1 else f"{checked.files} files"
    return (
        f"ok: pipeline {manifest.name}, kind {manifest.kind} ({runs}), {files}, "
        f"{format_size(checked.packed_bytes)}"
    )


def _summary(checked: CheckedPackage, digest: str) -> dict[str, object]:
    return {
        "manifest": _shown_manifest(checked),
        "entries": checked.entries,
        "files": checked.files,
        "unpacked_bytes": checked.unpacked_bytes,
        "packed_bytes": checked.packed_bytes,
        "sha256": digest,
    }


def _shown_manifest(checked: CheckedPackage) -> dict[str, object]:
    """The manifest as JSON, its conf's secrets redacted."""
    shown = checked.manifest.model_dump(mode="json")
    shown["conf"] = redact_conf(checked.manifest.conf)
    return shown
