"""Pipeline packages that run on real Spark, and the worker specs to run them, for tests.

The worker, supervisor and end-to-end tests share them::

    passthrough_package("pt")            # JSON rows {"id": n} -> parquet, exactly once
    passthrough_package("pt", version=2) # the same, each row tagged {"id": n, "version": 2}
    passthrough_conf(input_dir, output_dir)   # the conf keys it reads (input_dir created)
    write_ids(input_dir, range(50))      # one input file, written atomically
    read_ids(output_dir)                 # the ids the file sink committed, duplicates kept
    batch_package("report")              # the batch example: FINISHED when its function returns
    blocking_package()                   # its function never returns, even when stopped
    bad_entrypoint_package("bad")        # 'jobs.main:run': the module is there, the function is not
    failing_batch_package("failing")     # a streaming batch raises the pipeline's exception
    unimportable_package("pt")           # the pass-through, raising as its module is imported
    flaky_batch_package("pt", version=3) # the pass-through; its batches fail if a file exists
    example_package("sdp")               # an example of stratus zipped as `stratus submit` zips it
    unpack(package_bytes, directory)     # the package's files in a directory
    worker_spec(tmp_path, "pt", code_dir, checkpoint_location=..., conf=...)
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from stratus.api.records import FencingToken
from stratus.codedist.package_build import build_package, package_bytes
from stratus.local.demo import EXAMPLES
from stratus.local.examples_io import read_rows, write_events
from stratus.worker.spec import HEARTBEAT_FILE, WorkerSpec

INPUT_KEY = "spark.stratus.test.input"
OUTPUT_KEY = "spark.stratus.test.output"
BAD_ENTRYPOINT = "jobs.main:run"
PASSTHROUGH_QUERY = "passthrough"
PASSTHROUGH_SOURCE = f'''"""Pass-through: JSON rows with an id, from a directory into parquet."""

from pyspark.sql.types import LongType, StructField, StructType

SCHEMA = StructType([StructField("id", LongType())])


def run(spark, context):
    rows = spark.readStream.schema(SCHEMA).json(context.conf["{INPUT_KEY}"])
    (
        rows.writeStream.format("parquet")
        .option("checkpointLocation", context.checkpoint("{PASSTHROUGH_QUERY}"))
        .queryName("{PASSTHROUGH_QUERY}")
        .trigger(processingTime="500 milliseconds")
        .start(context.conf["{OUTPUT_KEY}"])
    )
'''


def passthrough_package(name: str = "passthrough", *, version: int | None = None) -> bytes:
    """A streaming app: every row of ``INPUT_KEY``'s JSON files lands in ``OUTPUT_KEY``;
    with ``version``, each row carries it in a ``version`` column (new code that shows)."""
    source = PASSTHROUGH_SOURCE
    if version is not None:
        source = source.replace(
            "    (\n        rows.writeStream",
            f"    from pyspark.sql import functions as sf\n\n"
            f"    rows = rows.withColumn('version', sf.lit({version}))\n"
            "    (\n        rows.writeStream",
        )
        assert "withColumn" in source
    return _app_package(name, "passthrough:run", {"passthrough.py": source})


def passthrough_conf(input_dir: Path, output_dir: Path) -> dict[str, Any]:
    """The conf keys it reads; ``input_dir`` is created, since a file stream source fails its
    query at start (PATH_NOT_FOUND) when the directory is not there yet."""
    input_dir.mkdir(parents=True, exist_ok=True)
    return {
        INPUT_KEY: str(input_dir),
        OUTPUT_KEY: str(output_dir),
        "spark.sql.shuffle.partitions": 2,
    }


def write_ids(input_dir: Path, ids: Iterable[int]) -> Path:
    """One JSON-lines input file of the pass-through pipeline, written atomically."""
    return write_events(input_dir, ({"id": i} for i in ids))


def read_versions(output_dir: Path) -> dict[int, int | None]:
    """Each id of the pass-through pipeline's output and the version that wrote it (None:
    untagged code); an id written twice would show in ``read_ids``."""
    if not output_dir.exists():
        return {}
    return {row["id"]: row.get("version") for row in read_rows(output_dir)}


def read_ids(output_dir: Path) -> list[int]:
    """The ids in the committed output of the pass-through pipeline, duplicates kept."""
    if not output_dir.exists():
        return []
    return sorted(row["id"] for row in read_rows(output_dir))


def blocking_package(name: str = "blocking") -> bytes:
    """A batch app whose function never returns, and ignores every stop request."""
    module = "import threading\n\n\ndef run(spark, context):\n    threading.Event().wait()\n"
    return _app_package(name, "blocking:run", {"blocking.py": module})


FAILING_BATCH_SOURCE = '''"""A streaming app whose batches raise the pipeline's own exception."""


class RowCountMismatch(Exception):
    pass


def check(batch, batch_id):
    raise RowCountMismatch(f"batch {batch_id}: expected 10 rows, got {batch.count()}")


def run(spark, context):
    (
        spark.readStream.format("rate").option("rowsPerSecond", 5).load()
        .writeStream.foreachBatch(check)
        .option("checkpointLocation", context.checkpoint("check"))
        .queryName("check")
        .start()
    )
'''


def failing_batch_package(name: str = "failing") -> bytes:
    """A streaming app whose first batch raises ``RowCountMismatch`` in its foreachBatch
    function: PySpark reports it wrapped in a StreamingQueryException."""
    return _app_package(name, "failing:run", {"failing.py": FAILING_BATCH_SOURCE})


FAIL_MARKER_KEY = "spark.stratus.test.fail.marker"


def unimportable_package(name: str = "passthrough") -> bytes:
    """The pass-through, byte-compiling fine, whose module raises when it is imported."""
    source = PASSTHROUGH_SOURCE.replace(
        "\n\ndef run(spark, context):",
        '\n\nraise RuntimeError("REGION is not set")\n\n\ndef run(spark, context):',
    )
    assert "REGION" in source
    return _app_package(name, "passthrough:run", {"passthrough.py": source})


def flaky_batch_package(name: str = "passthrough", *, version: int = 3) -> bytes:
    """The pass-through tagged with ``version``, whose every batch fails (in a task, before
    anything is committed: Spark's ``raise_error``) when the file ``FAIL_MARKER_KEY`` names
    exists as it starts."""
    source = PASSTHROUGH_SOURCE.replace(
        "    (\n        rows.writeStream",
        "    import os\n"
        "    from pyspark.sql import functions as sf\n\n"
        f'    marker = context.conf["{FAIL_MARKER_KEY}"]\n'
        "    refused = sf.raise_error(sf.lit(f'batch refused: {marker} exists'))\n"
        f"    tag = sf.when(sf.lit(os.path.exists(marker)), refused).otherwise(sf.lit({version}))\n"
        "    rows = rows.withColumn('version', tag.cast('long'))\n"
        "    (\n        rows.writeStream",
    )
    assert "raise_error" in source
    return _app_package(name, "passthrough:run", {"passthrough.py": source})


def bad_entrypoint_package(name: str = "bad-entrypoint") -> bytes:
    """An app that passes the package checks and fails at start: its function is missing."""
    module = "def start(spark, context):\n    pass\n"
    return _app_package(name, BAD_ENTRYPOINT, {"jobs/__init__.py": "", "jobs/main.py": module})


def example_package(example: str) -> bytes:
    """``stratus/examples/<example>`` zipped the way ``stratus submit`` zips a directory."""
    with tempfile.TemporaryDirectory() as tmp:
        return build_package(EXAMPLES / example, Path(tmp) / "package.zip").read_bytes()


def batch_package() -> bytes:
    """The batch example: it writes order totals to ``spark.stratus.example.output``."""
    return example_package("batch")


def unpack(package: bytes, directory: Path) -> Path:
    """Extract ``package`` into ``directory`` (created); the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(package)) as archive:
        archive.extractall(directory)
    return directory


def manifest_of(code_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((code_dir / "stratus.yaml").read_text())
    return loaded


FIRST_TOKEN = FencingToken(era=1, zxid=1)  # a worker spec's, unless a test gives another


def worker_spec(  # noqa: PLR0913 keyword-only options
    directory: Path,
    pipeline: str,
    code_dir: Path,
    *,
    checkpoint_location: str,
    conf: dict[str, Any] | None = None,
    spark_master: str = "local[2]",
    heartbeat_interval_secs: float = 0.5,
    trigger_interval_secs: float | None = None,
    stop_grace_secs: float = 20.0,
    token: FencingToken = FIRST_TOKEN,
) -> WorkerSpec:
    """A spec for the package unpacked in ``code_dir``, its manifest's conf under ``conf``."""
    manifest = manifest_of(code_dir)
    directory.mkdir(parents=True, exist_ok=True)
    return WorkerSpec(
        pipeline=pipeline,
        supervisor="test-supervisor",
        epoch=1,
        generation=0,
        token=token,
        digest="0" * 64,
        kind=manifest["kind"],
        entrypoint=manifest.get("entrypoint"),
        project=manifest.get("project", "spark-pipeline.yml")
        if manifest["kind"] == "sdp"
        else None,
        code_dir=code_dir,
        work_dir=directory / "work",
        conf={**manifest.get("conf", {}), **(conf or {})},
        spark_master=spark_master,
        checkpoint_location=checkpoint_location,
        trigger_interval_secs=trigger_interval_secs,
        heartbeat_path=directory / HEARTBEAT_FILE,
        heartbeat_interval_secs=heartbeat_interval_secs,
        stop_grace_secs=stop_grace_secs,
    )


def _app_package(name: str, entrypoint: str, files: dict[str, str]) -> bytes:
    manifest = {"name": name, "kind": "app", "entrypoint": entrypoint}
    return package_bytes({"stratus.yaml": yaml.safe_dump(manifest, sort_keys=False), **files})
