"""Valid pipeline packages for tests and benchmarks, as zip bytes or as a directory.

valid_package("etl")                          # a small app package, the same bytes each call
valid_package("big", payload_bytes=10 << 20)  # plus 10 MiB that do not compress
valid_package("etl", kind="sdp", conf={"spark.sql.shuffle.partitions": 4})
valid_package_dir(tmp_path, "etl")            # the same files in tmp_path/etl
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from stratus.codedist.package_build import package_bytes

APP_MODULE = "pipeline_main.py"
APP_SOURCE = '''"""The example pipeline: counts to ten."""


def run(spark, context):
    spark.range(10).count()
'''
SDP_PROJECT = "spark-pipeline.yml"
SDP_SOURCE = """from pyspark import pipelines as dp
from pyspark.sql import SparkSession


@dp.materialized_view
def numbers():
    return SparkSession.active().range(10)
"""
PAYLOAD_NAME = "data.bin"


def package_files(
    name: str = "example",
    *,
    kind: str = "app",
    extra: Mapping[str, bytes | str] | None = None,
    conf: dict[str, Any] | None = None,
    payload_bytes: int = 0,
) -> dict[str, bytes | str]:
    """The files of ``valid_package``, by name in the package."""
    manifest: dict[str, Any] = {"name": name, "kind": kind}
    files: dict[str, bytes | str]
    if kind == "app":
        manifest["entrypoint"] = "pipeline_main:run"
        files = {APP_MODULE: APP_SOURCE}
    else:
        sdp = {"name": name, "libraries": [{"glob": {"include": "transformations/**"}}]}
        files = {SDP_PROJECT: yaml.safe_dump(sdp), "transformations/numbers.py": SDP_SOURCE}
    if conf:
        manifest["conf"] = conf
    files["stratus.yaml"] = yaml.safe_dump(manifest, sort_keys=False)
    if payload_bytes:
        files[PAYLOAD_NAME] = random.Random(f"{name}/{payload_bytes}").randbytes(payload_bytes)
    files.update(extra or {})
    return files


def valid_package(
    name: str = "example",
    *,
    kind: str = "app",
    extra: Mapping[str, bytes | str] | None = None,
    conf: dict[str, Any] | None = None,
    payload_bytes: int = 0,
) -> bytes:
    """A package that passes ``check_package``: a manifest and the code it names.

    ``payload_bytes`` adds ``data.bin`` of seeded random bytes, which do not compress, so
    the package is about that large; ``extra`` adds or replaces files.
    """
    files = package_files(name, kind=kind, extra=extra, conf=conf, payload_bytes=payload_bytes)
    return package_bytes(files)


def valid_package_dir(
    root: Path,
    name: str = "example",
    *,
    kind: str = "app",
    extra: Mapping[str, bytes | str] | None = None,
    conf: dict[str, Any] | None = None,
) -> Path:
    """The files of ``valid_package`` written to the directory ``root/name``."""
    directory = root / name
    for relative, content in package_files(name, kind=kind, extra=extra, conf=conf).items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
    return directory
