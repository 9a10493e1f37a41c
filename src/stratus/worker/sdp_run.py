"""Runs an sdp pipeline: ``spark-pipelines run`` on a spec derived from the project's.

What is derived, in ``<work_dir>/sdp-project/`` (the project's directory mirrored there with
symbolic links, so its library globs and relative paths work unchanged):

- ``storage`` (where SDP keeps streaming checkpoints) is ``<checkpoint_location>/sdp-storage``,
  so a pipeline moved to another node resumes;
- ``configuration``: a key the project sets and the pipeline's conf sets too takes the
  conf's value;
- every ``spark.*`` key of the conf (but ``spark.master``), over stratus's defaults, goes to
  ``<work_dir>/sdp-conf/spark-defaults.conf``, with ``SPARK_CONF_DIR`` pointing there (the
  files of an existing ``SPARK_CONF_DIR`` are copied first, its defaults under ours). Both
  JVMs of a run read it, so static settings such as ``spark.sql.warehouse.dir`` apply:
  they cannot go in ``configuration`` (SDP sets those per flow), and ``--conf`` loses all
  but ten settings on the way to the inner JVM (pyspark 4.3 keeps only the last group of
  ``PYSPARK_REMOTE_INIT_CONF_*``);
- the master is ``--remote <spark master>``, with ``SPARK_API_MODE=connect`` in the
  environment so that a non-local master starts a local Spark Connect server on it. That
  server binds a free port on loopback (``CONNECT_SERVER``; pyspark's fixed 15002 would let
  only one run of a host start), which ``sdp_cli`` connects to.

On a cluster master, the archive of the pipeline's requirements (``spec.deps_archive``)
reaches the executors as an app's does (``spark_app``): it is added to ``spark.archives``
(after the operator's value of it, read from the inherited ``SPARK_CONF_DIR``), unpacked into
``stratus-deps`` and first on the executors' ``PYTHONPATH``; and ``PYSPARK_PYTHON``, which a
local master's Python workers take from this Python, is left as the worker's environment has
it (the executors' own Python, else ``python3`` on their hosts), since this interpreter's
path exists only on the supervisor's host.

Defaults, each overridden by the pipeline's conf (``sdp_settings``): tables go to
``spark.sql.warehouse.dir = <checkpoint_location>/warehouse``, and their catalog is Hive's
(``spark.sql.catalogImplementation = hive``) with an embedded Derby metastore in
``<checkpoint_location>/sdp-metastore`` when the checkpoint location is on the local file
system, else in ``<work_dir>/sdp-metastore``: without a persistent catalog, the second run
finds the tables' directories and refuses to create them again. A checkpoint location on
shared storage (hdfs://, ...) needs a shared metastore for a moved pipeline to find its
tables: the operator's ``spark.hadoop.hive.metastore.uris`` in the inherited
``SPARK_CONF_DIR`` (a pipeline's conf may not name the operator's hosts).

No trigger: one run, FINISHED. With ``trigger_interval_secs``: a run starts every interval
(the next one at once if a run took longer), RUNNING with ``runs`` completed. A run that
fails is FAILED with the tail of its output. A stop request takes the run's process group
down (see ``run_guard``), STOPPED. Before every run but the first, the claims on the
checkpoint location are checked: a newer worker's ends the worker FENCED::

    outcome = run_sdp(spec, stop, reporter)
"""

from __future__ import annotations

import collections
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

import yaml

from stratus.api.locations import is_local_master
from stratus.files import private_dirs, write_atomically
from stratus.process import Lifeline, ProcessGroup
from stratus.worker import run_guard
from stratus.worker.checkpoint_owner import OwnerFence
from stratus.worker.errors import SdpProjectError
from stratus.worker.heartbeat_file import HeartbeatReporter
from stratus.worker.outcome import Outcome
from stratus.worker.session_conf import (
    DEPS_DIR,
    SPARK_DEFAULTS,
    conf_value,
    spark_conf,
    with_deps_first,
)
from stratus.worker.spec import WorkerSpec
from stratus.worker.stop_request import StopRequest

log = logging.getLogger(__name__)

SPARK_CLASS = "spark-class"
SDP_LAUNCHER_CLASS = "org.apache.spark.deploy.SparkPipelines"  # what pyspark's spark-pipelines runs
SDP_CLI = Path(__file__).with_name("sdp_cli.py")  # not imported here: it imports pyspark's CLI
CONNECT_SERVER = {  # the run's own Spark Connect server: any free port, on loopback only
    "spark.connect.grpc.binding.port": "0",
    "spark.connect.grpc.binding.address": "127.0.0.1",
}
PROJECT_MIRROR = "sdp-project"  # in work_dir: links to the project's files, the derived spec
CONF_DIR = "sdp-conf"  # in work_dir: the runs' SPARK_CONF_DIR
DEFAULTS_FILE = "spark-defaults.conf"
DERIVED_SPEC = "spark-pipeline.yml"
STORAGE_DIR = "sdp-storage"
WAREHOUSE_DIR = "warehouse"
METASTORE_DIR = "sdp-metastore"
METASTORE_KEYS = ("spark.hadoop.javax.jdo.option.ConnectionURL", "spark.hadoop.hive.metastore.uris")
TAIL_LINES = 25  # of a failed run's output, in its FAILED heartbeat
_MASTER_LINE = re.compile(r"^\s*spark\.master[\s=:]")  # the master is --remote's alone
_PROPERTY_LINE = re.compile(r"^\s*(?P<key>[^#!\s=:][^\s=:]*)\s*[\s=:]\s*(?P<value>.*)$")
ARCHIVES = "spark.archives"
_JAVA_FRAME = re.compile(r"^\s+at |^\s*\.\.\. \d+ more")


def run_sdp(
    spec: WorkerSpec,
    stop: StopRequest,
    reporter: HeartbeatReporter,
    *,
    fence: OwnerFence | None = None,
) -> Outcome:
    """Run the sdp project of ``spec`` once, or every trigger interval until stopped;
    ``fence`` checks the checkpoint's claims before every run but the first (claimed just
    before it), and ends the worker FENCED once a newer worker claimed it."""
    try:
        spec_file = prepare_project(spec)
        command = sdp_command(spec, spec_file)
        environment = sdp_environment(write_conf_dir(spec), spec.spark_master)
    except SdpProjectError as exc:
        return Outcome.failed(str(exc))
    slot = _RunSlot()
    stop.on_request(slot.take_down)
    runs = 0
    while True:
        if stop.requested():
            return stop.outcome()
        fenced = fence.check() if fence is not None and runs > 0 else None
        if fenced is not None:
            return fenced
        started = time.monotonic()
        run = _GuardedRun(command, cwd=spec.work_dir, env=environment)
        outcome = _run_once(run, runs + 1, slot=slot, stop=stop, reporter=reporter)
        if outcome is not None:
            return outcome
        runs += 1
        reporter.runs_completed(runs)
        if spec.trigger_interval_secs is None:
            return Outcome.finished()
        if stop.wait(max(0.0, started + spec.trigger_interval_secs - time.monotonic())):
            return stop.outcome()


def prepare_project(spec: WorkerSpec) -> Path:
    """Mirror the project's directory into the work dir and write the derived spec there."""
    assert spec.project is not None  # the manifest defaults it for kind sdp
    project_file = spec.code_dir / spec.project
    project = load_project(project_file)
    mirror = spec.work_dir / PROJECT_MIRROR
    shutil.rmtree(mirror, ignore_errors=True)
    mirror.mkdir(parents=True)
    for entry in project_file.parent.iterdir():
        if entry.name != project_file.name:
            (mirror / entry.name).symlink_to(entry.resolve())
    derived = mirror / DERIVED_SPEC
    text = yaml.safe_dump(derived_spec(project, spec), sort_keys=False)
    write_atomically(derived, text.encode())  # 0600: its configuration may hold secrets
    return derived


def load_project(path: Path) -> dict[str, Any]:
    """The project file's mapping; SdpProjectError naming the file if it has none."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SdpProjectError(
            f"sdp project file {path.name!r} is not in the package; set `project` in "
            "stratus.yaml to the path of spark-pipeline.yml"
        ) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SdpProjectError(f"sdp project file {path.name!r} cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise SdpProjectError(
            f"sdp project file {path.name!r} must be a mapping with name, libraries, ..."
        )
    return data


def derived_spec(project: Mapping[str, Any], spec: WorkerSpec) -> dict[str, Any]:
    """The project's spec with stratus's storage and the pipeline's conf values."""
    derived = dict(project)
    derived.setdefault("name", spec.pipeline)
    derived["storage"] = location_uri(_child(spec.checkpoint_location, STORAGE_DIR))
    configuration = project.get("configuration") or {}
    if not isinstance(configuration, dict):
        raise SdpProjectError("sdp project file: `configuration` must be a mapping")
    derived["configuration"] = {
        str(key): conf_value(spec.conf.get(key, value)) for key, value in configuration.items()
    }
    return derived


def sdp_settings(spec: WorkerSpec) -> dict[str, str]:
    """The Spark settings of every run: defaults, then the pipeline's conf."""
    settings = {
        **SPARK_DEFAULTS,
        **CONNECT_SERVER,
        "spark.app.name": f"stratus-{spec.pipeline}",
        "spark.sql.warehouse.dir": _child(spec.checkpoint_location, WAREHOUSE_DIR),
    }
    if "spark.sql.catalogImplementation" not in spec.conf:
        settings["spark.sql.catalogImplementation"] = "hive"
        if not any(key in spec.conf for key in METASTORE_KEYS):
            settings[METASTORE_KEYS[0]] = (
                f"jdbc:derby:;databaseName={metastore_dir(spec)};create=true"
            )
    settings.update(spark_conf(spec.conf))
    settings.pop("spark.master", None)  # given as --remote: spark-submit refuses both
    if spec.deps_archive is None:
        return settings
    ours = f"{spec.deps_archive}#{DEPS_DIR}"  # a pipeline's conf may not set spark.archives
    settings[ARCHIVES] = ",".join(filter(None, [inherited_default(ARCHIVES), ours]))
    return with_deps_first(settings)


def inherited_default(key: str) -> str | None:
    """``key``'s value in the operator's ``$SPARK_CONF_DIR/spark-defaults.conf`` (its last
    line, as Spark reads it; simple ``key value`` / ``key=value`` lines), else None."""
    inherited = os.environ.get("SPARK_CONF_DIR")
    defaults = Path(inherited) / DEFAULTS_FILE if inherited else None
    if defaults is None or not defaults.is_file():
        return None
    found = None
    for line in defaults.read_text().splitlines():
        match = _PROPERTY_LINE.match(line)
        if match and match.group("key") == key:
            found = match.group("value").strip()
    return found


def write_conf_dir(spec: WorkerSpec) -> Path:
    """``<work_dir>/sdp-conf`` with ``sdp_settings`` in its spark-defaults.conf."""
    conf_dir = spec.work_dir / CONF_DIR
    shutil.rmtree(conf_dir, ignore_errors=True)
    inherited = os.environ.get("SPARK_CONF_DIR")
    if inherited and Path(inherited).is_dir():
        shutil.copytree(inherited, conf_dir, symlinks=False)
    conf_dir.mkdir(parents=True, exist_ok=True)
    defaults = conf_dir / DEFAULTS_FILE
    earlier = defaults.read_text().splitlines() if defaults.is_file() else []
    kept = "".join(f"{line}\n" for line in earlier if not _MASTER_LINE.match(line))
    ours = "".join(_properties_line(key, value) for key, value in sdp_settings(spec).items())
    write_atomically(defaults, (kept + ours).encode())  # later lines win; 0600: secrets
    return conf_dir


def _properties_line(key: str, value: str) -> str:
    """``key=value`` in Java properties syntax (spark-defaults.conf is read as one)."""

    def escape(text: str) -> str:
        for raw, escaped in (("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
            text = text.replace(raw, escaped)
        return text

    escaped_key = escape(key).replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ")
    escaped_value = escape(value)
    if escaped_value.startswith(" "):
        escaped_value = "\\" + escaped_value
    return f"{escaped_key}={escaped_value}\n"


def metastore_dir(spec: WorkerSpec) -> Path:
    """Where the embedded Derby metastore lives: beside the checkpoints when they are local."""
    local = local_path(spec.checkpoint_location)
    base = local if local is not None else spec.work_dir
    private_dirs(base)  # the pipeline's checkpoint location: its owner's alone
    return base / METASTORE_DIR


def sdp_command(spec: WorkerSpec, spec_file: Path) -> list[str]:
    """``spark-pipelines --remote MASTER run --spec FILE``, under the guard: what the
    ``spark-pipelines`` script runs, with ``sdp_cli`` as the command line (the run's
    Connect server on a port of its own)."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / SPARK_CLASS).is_file():
        raise SdpProjectError(
            f"{SPARK_CLASS} not found beside {sys.executable}: install pyspark with its "
            "connect extra (pyspark[connect]) in the worker's environment"
        )
    confs = [
        arg for key, value in sdp_settings(spec).items() for arg in ("--conf", f"{key}={value}")
    ]
    pipelines = [str(bin_dir / SPARK_CLASS), SDP_LAUNCHER_CLASS, str(SDP_CLI)]
    command = [*pipelines, "--remote", spec.spark_master, *confs, "run", "--spec", str(spec_file)]
    return [sys.executable, run_guard.__file__, "--", *command]


def sdp_environment(conf_dir: Path, spark_master: str) -> dict[str, str]:
    """The worker's environment, with this Python for the driver (and for the Python workers
    of a local master), its bin first on PATH, and ``conf_dir`` as SPARK_CONF_DIR. A cluster
    master's executors keep the ``PYSPARK_PYTHON`` the worker's environment names, if any:
    this interpreter's path is the supervisor host's."""
    python = sys.executable
    path = os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", "")])
    environment = {
        **os.environ,
        "PYSPARK_DRIVER_PYTHON": python,
        "PATH": path,
        "SPARK_API_MODE": "connect",
        "SPARK_CONF_DIR": str(conf_dir),
        "PYTHONUNBUFFERED": "1",
    }
    if is_local_master(spark_master):
        environment["PYSPARK_PYTHON"] = python
    return environment


def location_uri(location: str) -> str:
    """A URI for ``location``: a plain local path becomes file://, a URL stays as it is."""
    return location if urlparse(location).scheme else Path(location).absolute().as_uri()


def local_path(location: str) -> Path | None:
    """The local directory of a plain path or a file:// URL; None for other storage."""
    parsed = urlparse(location)
    if not parsed.scheme:
        return Path(location).absolute()
    if parsed.scheme == "file":
        return Path(parsed.path)
    return None


def _child(location: str, name: str) -> str:
    return f"{location.rstrip('/')}/{name}"


def _run_once(
    run: _GuardedRun, number: int, *, slot: _RunSlot, stop: StopRequest, reporter: HeartbeatReporter
) -> Outcome | None:
    """One ``spark-pipelines run``: None if it completed, else the run's outcome."""
    log.info("event=sdp_run_started run=%d", number)
    slot.hold(run)
    if stop.requested():  # it came while the run started: the slot had nothing to take down
        run.take_down()
    reporter.running()
    code = run.wait()
    if stop.requested():
        return stop.outcome()
    if code != 0:
        return Outcome.failed(
            f"spark-pipelines run {number} exited with code {code}; its output ends with:\n"
            + run.tail()
        )
    log.info("event=sdp_run_completed run=%d", number)
    return None


class _RunSlot:
    """The run in progress, for the stop request's thread to take down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._run: _GuardedRun | None = None

    def hold(self, run: _GuardedRun) -> None:
        with self._lock:
            self._run = run

    def take_down(self) -> None:
        with self._lock:
            run = self._run
        if run is not None:
            run.take_down()


class _GuardedRun:
    """A ``run_guard`` process: its output copied to stderr, the last lines kept."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str]) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._group = ProcessGroup.start(
            command,
            lifeline=Lifeline.PIPE,  # EOF: the guard takes the run's group down
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
        )
        assert self._group.process.stdout is not None
        self._reader = threading.Thread(
            target=self._copy, args=(self._group.process.stdout,), name="sdp-output", daemon=True
        )
        self._reader.start()

    def take_down(self) -> None:
        """Close the guard's stdin: it terminates the run's whole process group."""
        self._group.close_lifeline()

    def wait(self) -> int:
        code = self._group.wait()
        self._reader.join()
        self.take_down()
        return code

    def tail(self) -> str:
        return "\n".join(self._lines)

    def _copy(self, output: IO[bytes]) -> None:
        for raw in output:
            sys.stderr.buffer.write(raw)
            sys.stderr.flush()
            line = raw.decode("utf-8", errors="replace").rstrip()
            if line and not _JAVA_FRAME.match(line):
                self._lines.append(line)
