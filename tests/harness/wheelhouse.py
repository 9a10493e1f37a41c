"""Pure-Python wheels made on the fly, for tests that install requirements without a network.

A wheel is a zip with the package, a ``METADATA``, a ``WHEEL`` and a ``RECORD``: written
here directly, so no build backend (and no download of one) is needed::

    make_wheel(tmp_path / "wheelhouse", "stratus-probe", "1.0", {"stratus_probe": "VALUE = 7"})
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def make_wheel(directory: Path, name: str, version: str, modules: dict[str, str]) -> Path:
    """A wheel of project ``name`` holding one top-level module per ``modules`` entry."""
    directory.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {f"{module}.py": source + "\n" for module, source in modules.items()}
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: stratus-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    records = [
        f"{path},sha256={_digest(text)},{len(text.encode())}" for path, text in files.items()
    ]
    files[f"{info}/RECORD"] = "\n".join([*records, f"{info}/RECORD,,"]) + "\n"
    wheel = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def _digest(text: str) -> str:
    raw = hashlib.sha256(text.encode()).digest()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
