"""A package's requirements, installed into a per-pipeline environment, with no network.

The requirements come from a wheelhouse the test writes (``tests/harness/wheelhouse.py``), installed
by real pip (``supervisor.deps.offline``: nothing is looked up on an index). The supervisor
scenarios run a real ``Supervisor`` on a real ZooKeeper with the stand-in worker of
``test_supervisor.py`` (started with the environment's interpreter); one scenario runs the
real Spark worker on a batch pipeline.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from stratus.api.records import PipelineStatus, WorkerState
from stratus.api.redaction import redact_text
from stratus.codedist.package_build import package_bytes
from stratus.logs import JsonFormatter
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.env_archive import DEPS_ARCHIVE
from stratus.supervisor.requirements_env import (
    BASE_PTH,
    ENV_RECORD,
    EnvFailed,
    EnvPending,
    EnvReady,
    EnvState,
    RequirementEnvs,
    installer_environment,
    normalized_requirements,
    offline_refusal,
)
from stratus.supervisor.settings import DepsSettings, SupervisorSettings
from tests.cluster.test_supervisor import FAKE_WORKER, SPARK, SPARK_SECS, Cluster
from tests.harness.package_factory import package_files
from tests.harness.pipeline_cluster import pipeline_cluster
from tests.harness.supervisor_fakes import newest_run_log
from tests.harness.wheelhouse import make_wheel
from tests.harness.zkfixtures import kazoo_client, wait_until

PROBE = "stratus-probe"
PROBE_MODULE = "stratus_probe"
BUILD_WAIT_SECS = 120.0  # a pip install on a loaded two-core machine

# The stand-in worker, plus a mode that imports the probe and says where it runs.
PROBE_WORKER = FAKE_WORKER.replace(
    'if mode == "env":',
    f"""if mode == "probe":
    import {PROBE_MODULE}
    Path(spec.work_dir, "probe.json").write_text(json.dumps(
        {{"prefix": sys.prefix, "value": {PROBE_MODULE}.VALUE}}))
    beat(WorkerState.FINISHED)
    sys.exit(0)
if mode == "env":""",
)


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    directory = tmp_path / "wheelhouse"
    make_wheel(directory, PROBE, "1.0", {PROBE_MODULE: "VALUE = 7"})
    return directory


def offline(wheelhouse: Path, **extra: Any) -> DepsSettings:
    return DepsSettings(find_links=(str(wheelhouse),), offline=True, **extra)


def settled(envs: RequirementEnvs, requirements: list[str]) -> EnvState:
    """What ``get`` answers once the build (if any) is over."""
    found: list[EnvState] = []

    def done() -> bool:
        found[:] = [envs.get("etl", requirements)]
        return not isinstance(found[0], EnvPending)

    wait_until(done, BUILD_WAIT_SECS, "the environment to be built or to fail")
    return found[0]


# ---------------------------------------------------------------------- the environments


def test_requirements_are_installed_from_a_wheelhouse_beside_the_supervisors_packages(
    tmp_path: Path, wheelhouse: Path
) -> None:
    envs = RequirementEnvs(tmp_path / "envs", offline(wheelhouse))
    try:
        ready = settled(envs, [f"{PROBE}==1.0"])
    finally:
        envs.close()
    assert isinstance(ready, EnvReady)
    assert ready.directory.parent == tmp_path / "envs"
    probe = (
        "import importlib.util, stratus_probe, stratus.worker.main, sys;"
        "print(stratus_probe.VALUE, importlib.util.find_spec('pyspark') is not None, sys.prefix)"
    )
    out = subprocess.run(
        [str(ready.python), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["7", "True", str(ready.directory)]
    spark_pipelines = ready.directory / "bin" / "spark-pipelines"  # found beside python
    assert spark_pipelines.resolve() == (Path(sys.executable).parent / "spark-pipelines").resolve()
    # pyspark was seen, not installed again into the environment
    assert not list(ready.directory.glob("lib/python*/site-packages/pyspark"))
    assert not list(tmp_path.joinpath("envs").glob(".build-*"))  # published by a rename


def test_a_cluster_supervisors_environment_packs_only_its_requirements_for_the_executors(
    tmp_path: Path, wheelhouse: Path
) -> None:
    envs = RequirementEnvs(tmp_path / "envs", offline(wheelhouse, pack=True))
    try:
        ready = settled(envs, [f"{PROBE}==1.0"])
    finally:
        envs.close()
    assert isinstance(ready, EnvReady)
    assert ready.archive == ready.directory / DEPS_ARCHIVE
    with tarfile.open(ready.archive) as tar:
        names = {name.split("/")[0] for name in tar.getnames()}
        tar.extractall(tmp_path / "executor" / "stratus-deps", filter="data")
    assert f"{PROBE_MODULE}.py" in names
    assert BASE_PTH not in names  # the supervisor's paths mean nothing on an executor
    assert not {"pyspark", "stratus"} & names  # the executors' Python has its own
    # unpacked, on the PYTHONPATH of a Python without the requirement, as an executor's is
    out = subprocess.run(
        [sys.executable, "-c", f"import {PROBE_MODULE}; print({PROBE_MODULE}.VALUE)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path / "executor",
        env={"PYTHONPATH": "stratus-deps", "PATH": "/usr/bin:/bin"},
    ).stdout.split()
    assert out == ["7"]


def test_an_environment_built_unpacked_is_packed_once_when_a_cluster_needs_it(
    tmp_path: Path, wheelhouse: Path
) -> None:
    first = RequirementEnvs(tmp_path / "envs", offline(wheelhouse))
    try:
        ready = settled(first, [f"{PROBE}==1.0"])
    finally:
        first.close()
    assert isinstance(ready, EnvReady) and ready.archive is None
    built = (ready.directory / ENV_RECORD).stat().st_mtime_ns
    second = RequirementEnvs(tmp_path / "envs", offline(wheelhouse, pack=True))
    try:
        packed = settled(second, [f"{PROBE}==1.0"])
    finally:
        second.close()
    assert isinstance(packed, EnvReady)
    assert packed.directory == ready.directory
    assert packed.archive == ready.directory / DEPS_ARCHIVE
    assert (ready.directory / ENV_RECORD).stat().st_mtime_ns == built  # packed, not rebuilt


def test_the_same_requirement_set_reuses_its_environment_even_after_a_restart(
    tmp_path: Path, wheelhouse: Path
) -> None:
    first = RequirementEnvs(tmp_path / "envs", offline(wheelhouse))
    try:
        ready = settled(first, [f"{PROBE}==1.0"])
    finally:
        first.close()
    assert isinstance(ready, EnvReady)
    built = (ready.directory / ENV_RECORD).stat().st_mtime_ns
    second = RequirementEnvs(tmp_path / "envs", offline(wheelhouse))  # a new supervisor life
    try:
        again = second.get("other", ["  Stratus_Probe ==1.0 ", f"{PROBE}==1.0"])
    finally:
        second.close()
    assert again == ready  # at once, not pending: nothing was built
    assert (ready.directory / ENV_RECORD).stat().st_mtime_ns == built


def test_another_requirement_set_or_another_wheelhouse_is_another_environment(
    tmp_path: Path, wheelhouse: Path
) -> None:
    envs = RequirementEnvs(tmp_path / "envs", offline(wheelhouse))
    elsewhere = RequirementEnvs(tmp_path / "envs", offline(tmp_path))
    try:
        assert envs.key([PROBE]) != envs.key([f"{PROBE}==1.0"])
        assert envs.key([PROBE]) != elsewhere.key([PROBE])
    finally:
        envs.close()
        elsewhere.close()


def test_an_unresolvable_requirement_fails_with_the_installers_message(
    tmp_path: Path, wheelhouse: Path
) -> None:
    envs = RequirementEnvs(tmp_path / "envs", offline(wheelhouse))
    try:
        failed = settled(envs, ["no-such-project-anywhere==9"])
        assert envs.get("etl", ["no-such-project-anywhere==9"]) == failed  # not built again
    finally:
        envs.close()
    assert isinstance(failed, EnvFailed)
    assert "cannot install the requirements no-such-project-anywhere==9" in failed.error
    assert "No matching distribution found for no-such-project-anywhere==9" in failed.error
    assert not [p for p in tmp_path.joinpath("envs").iterdir() if p.is_dir()]  # none published


BY_NAME = ["requests>=2.31", "Foo_bar[x, y] >=1.0, <2 ; python_version > '3.8'", "a==1.0.*"]
NOT_BY_NAME = [
    "pkg @ https://host/x.whl",
    "pkg@file:///tmp/x.whl",
    "git+https://host/x/y.git",
    "https://host/x.whl",
    "--index-url https://host/simple",
    "-i https://host/simple",
    "--extra-index-url https://host/simple",
    "-f https://host/wheels",
    "--find-links /tmp/wheels",
    "--trusted-host host",
    "./vendored",
    "../outside",
    "/tmp/x.whl",
    "x-1.0-py3-none-any.whl",
]


@pytest.mark.parametrize("requirement", BY_NAME)
def test_offline_a_requirement_by_name_is_installed(requirement: str) -> None:
    assert offline_refusal([requirement]) is None


@pytest.mark.parametrize("requirement", NOT_BY_NAME)
def test_offline_a_url_a_path_or_a_pip_option_is_refused_naming_the_line(requirement: str) -> None:
    refusal = offline_refusal(["tabulate", requirement])
    assert refusal is not None
    assert f"requirement 1 ('{requirement}')" in refusal
    assert "supervisor.deps.offline" in refusal


def test_offline_a_direct_url_fails_before_pip_runs_even_to_a_wheel_it_could_install(
    tmp_path: Path, wheelhouse: Path
) -> None:
    (wheel,) = wheelhouse.glob("*.whl")
    direct = f"{PROBE} @ {wheel.as_uri()}"
    envs = RequirementEnvs(tmp_path / "envs", offline(wheelhouse))
    try:
        failed = envs.get("etl", [direct])  # at once: nothing to wait for
    finally:
        envs.close()
    assert isinstance(failed, EnvFailed)
    assert f"requirement 0 ('{PROBE} @ file://" in failed.error  # the line, clipped if long
    assert "supervisor.deps.offline" in failed.error
    assert not list(tmp_path.joinpath("envs").iterdir())  # no log of pip, no environment


def test_an_install_past_its_timeout_is_stopped_and_fails(tmp_path: Path, wheelhouse: Path) -> None:
    envs = RequirementEnvs(tmp_path / "envs", offline(wheelhouse, install_timeout_secs=0.001))
    try:
        failed = settled(envs, [PROBE])
    finally:
        envs.close()
    assert isinstance(failed, EnvFailed)
    assert "supervisor.deps.install.timeout.secs=0.001" in failed.error


def test_requirement_sets_are_normalized_before_they_are_hashed() -> None:
    assert normalized_requirements(
        ["Foo_Bar >= 1.0", "baz", "foo-bar>=1.0", "qux ; python_version >= '3'"]
    ) == ("baz", "foo-bar>=1.0", "qux; python_version >= '3'")


def test_pip_gets_what_it_reads_and_none_of_the_supervisors_secrets() -> None:
    parent = {
        "PATH": "/bin",
        "PIP_INDEX_URL": "https://mirror.example/simple",
        "HTTPS_PROXY": "http://proxy:3128",
        "STRATUS_TOKEN": "t0ken",
        "AWS_SECRET_ACCESS_KEY": "k",
    }
    assert installer_environment(parent) == {
        "PATH": "/bin",
        "PIP_INDEX_URL": "https://mirror.example/simple",
        "HTTPS_PROXY": "http://proxy:3128",
    }


def test_credentials_in_an_installers_urls_are_redacted() -> None:
    text = "Looking in indexes: https://alice:s3cret@pypi.example/simple and http://tok@h/x"
    assert redact_text(text) == (
        "Looking in indexes: https://alice:***@pypi.example/simple and http://***@h/x"
    )


# ---------------------------------------------------------------------- on a supervisor


def probe_package(name: str, requirements: list[str]) -> bytes:
    files = package_files(name)
    manifest = yaml.safe_load(files["stratus.yaml"])
    files["stratus.yaml"] = yaml.safe_dump({**manifest, "requirements": requirements})
    return package_bytes(files)


def deps_conf(cluster: Cluster, wheelhouse: Path, **extra: Any) -> Any:
    return cluster.conf(
        **{
            "supervisor.deps.find.links": str(wheelhouse),
            "supervisor.deps.offline": True,
            **extra,
        }
    )


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    """ZooKeeper chrooted to the test and a shared code store (``test_supervisor.py``'s)."""
    with kazoo_client(zk_hosts) as zk:
        yield Cluster(zk, zk_hosts, tmp_path)


@pytest.fixture
def probe_worker(tmp_path: Path) -> list[str]:
    script = tmp_path / "probe_worker.py"
    script.write_text(PROBE_WORKER)
    return [sys.executable, str(script)]


@contextlib.contextmanager
def started(conf: Any, command: list[str] | None) -> Iterator[Supervisor]:
    supervisor = Supervisor(SupervisorSettings.from_config(conf), worker_command=command)
    supervisor.start()
    try:
        yield supervisor
    finally:
        supervisor.stop(workers=True)


def test_pipelines_with_the_same_requirements_run_in_one_environment_built_once(
    cluster: Cluster, wheelhouse: Path, probe_worker: list[str]
) -> None:
    requirements = [f"{PROBE}==1.0"]
    first = cluster.code.upload("etl", probe_package("etl", requirements))
    second = cluster.code.upload("report", probe_package("report", requirements))
    local = cluster.tmp_path / "s1"
    with started(deps_conf(cluster, wheelhouse), probe_worker):
        cluster.assign(first, "etl", mode="probe")
        cluster.wait_for_worker(WorkerState.FINISHED, "etl", timeout=BUILD_WAIT_SECS)
        record = next((local / "envs").glob(f"*/{ENV_RECORD}"))
        built = record.stat().st_mtime_ns
        cluster.assign(second, "report", mode="probe")
        beat = cluster.wait_for_worker(WorkerState.FINISHED, "report")
        assert beat.restarts == 0
        cluster.assign(second, "env", mode="env")
        cluster.wait_for_worker(WorkerState.RUNNING, "env")
        assert record.stat().st_mtime_ns == built  # reused, not rebuilt
    env_dirs = [p for p in (local / "envs").iterdir() if p.is_dir()]
    assert len(env_dirs) == 1
    for name in ("etl", "report"):
        seen = json.loads((local / "workers" / name / "work" / "probe.json").read_text())
        assert seen == {"prefix": str(env_dirs[0]), "value": 7}
    environ = json.loads((local / "workers" / "env" / "work" / "env.json").read_text())
    assert environ["PYSPARK_PYTHON"] == str(env_dirs[0] / "bin" / "python")  # Spark's workers


def test_a_pipeline_without_requirements_runs_with_the_supervisors_interpreter(
    cluster: Cluster, probe_worker: list[str]
) -> None:
    meta = cluster.code.upload("etl")
    local = cluster.tmp_path / "s1"
    with started(cluster.conf(), probe_worker):
        cluster.assign(meta, "etl", mode="env")
        cluster.wait_for_worker(WorkerState.RUNNING, "etl")
    assert not list((local / "envs").iterdir())  # no environment made, none waited for


def test_an_unresolvable_requirement_ends_failed_with_the_installers_message_and_no_restart(
    cluster: Cluster, wheelhouse: Path, probe_worker: list[str]
) -> None:
    meta = cluster.code.upload("etl", probe_package("etl", ["no-such-project-anywhere>=1"]))
    local = cluster.tmp_path / "s1"
    with started(deps_conf(cluster, wheelhouse), probe_worker):
        cluster.assign(meta, "etl", mode="probe")
        beat = cluster.wait_for_worker(WorkerState.FAILED, "etl", timeout=BUILD_WAIT_SECS)
        assert beat.restarts == 0
        assert beat.error is not None
        assert "No matching distribution found for no-such-project-anywhere>=1" in beat.error
    assert not newest_run_log(local, "etl").exists()  # no worker ever started


def test_offline_a_package_that_requires_a_direct_url_ends_failed_naming_it(
    cluster: Cluster, wheelhouse: Path, probe_worker: list[str]
) -> None:
    (wheel,) = wheelhouse.glob("*.whl")
    direct = f"{PROBE} @ {wheel.as_uri()}"
    meta = cluster.code.upload("etl", probe_package("etl", [direct]))
    local = cluster.tmp_path / "s1"
    with started(deps_conf(cluster, wheelhouse), probe_worker):
        cluster.assign(meta, "etl", mode="probe")
        beat = cluster.wait_for_worker(WorkerState.FAILED, "etl", timeout=BUILD_WAIT_SECS)
        assert beat.error is not None
        assert f"requirement 0 ('{PROBE} @ file://" in beat.error
        assert "supervisor.deps.offline" in beat.error
    assert not [p for p in (local / "envs").iterdir() if p.is_dir()]  # pip never ran
    assert not newest_run_log(local, "etl").exists()


def test_on_a_cluster_master_the_worker_ships_the_packed_environment_and_keeps_pyspark_python(
    cluster: Cluster,
    wheelhouse: Path,
    probe_worker: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/executors/bin/python3")  # the executors' own
    master = "spark://spark-master.example:7077"
    meta = cluster.code.upload("etl", probe_package("etl", [f"{PROBE}==1.0"]))
    local = cluster.tmp_path / "s1"
    conf = deps_conf(cluster, wheelhouse, **{"pipeline.spark.masters": master})
    with started(conf, probe_worker):
        cluster.assign(meta, "etl", conf={"spark.test.mode": "env", "spark.master": master})
        cluster.wait_for_worker(WorkerState.RUNNING, timeout=BUILD_WAIT_SECS)
    env_dir = next(path for path in (local / "envs").iterdir() if path.is_dir())
    spec = json.loads((local / "workers" / "etl" / "spec.json").read_text())
    assert spec["deps_archive"] == str(env_dir / DEPS_ARCHIVE)
    assert (env_dir / DEPS_ARCHIVE).is_file()
    environ = json.loads((local / "workers" / "etl" / "work" / "env.json").read_text())
    assert environ["PYSPARK_PYTHON"] == "/opt/executors/bin/python3"  # not the environment's


def test_an_update_builds_its_new_environment_before_it_stops_the_old_worker(
    cluster: Cluster,
    wheelhouse: Path,
    probe_worker: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    old = cluster.code.upload("etl")
    new = cluster.code.upload("etl", probe_package("etl", [f"{PROBE}==1.0"]))
    with (
        caplog.at_level(logging.INFO, logger="stratus.supervisor"),
        started(deps_conf(cluster, wheelhouse), probe_worker),
    ):
        cluster.assign(old, "etl")
        first = cluster.wait_for_worker(WorkerState.RUNNING)
        cluster.assign(new, "etl", generation=1)
        cluster.wait_for_worker(
            WorkerState.RUNNING, where=lambda b: b.digest == new.digest, timeout=BUILD_WAIT_SECS
        )
    events = [json.loads(JsonFormatter().format(record)) for record in caplog.records]
    built = next(i for i, event in enumerate(events) if event.get("event") == "env_ready")
    stopped = next(
        i
        for i, event in enumerate(events)
        if event.get("event") == "worker_stopping" and event.get("pid") == first.pid
    )
    assert built < stopped  # the old code ran while the new code's environment was built


# ---------------------------------------------------------------------- the real worker

BATCH_WITH_PROBE = f"""import {PROBE_MODULE}


def run(spark, context):
    spark.range({PROBE_MODULE}.VALUE).count()
"""


@pytest.mark.spark
def test_a_batch_pipeline_imports_its_requirement_on_the_real_worker(
    cluster: Cluster, wheelhouse: Path
) -> None:
    files = package_files("batch")
    manifest = yaml.safe_load(files["stratus.yaml"])
    files["stratus.yaml"] = yaml.safe_dump({**manifest, "requirements": [f"{PROBE}>=1"]})
    files["pipeline_main.py"] = BATCH_WITH_PROBE
    meta = cluster.code.upload("batch", package_bytes(files))
    conf = deps_conf(cluster, wheelhouse, **SPARK)
    with started(conf, None):  # the real worker: stratus.worker.main
        cluster.assign(meta, "batch", conf={"spark.ui.enabled": False})
        beat = cluster.wait_for_worker(
            WorkerState.FINISHED, "batch", timeout=BUILD_WAIT_SECS + SPARK_SECS
        )
        assert beat.restarts == 0


# ---------------------------------------------------------------------- through a nimbus


def test_a_submitted_pipeline_whose_requirements_cannot_be_installed_is_failed_with_pips_message(
    zk_hosts: str, tmp_path: Path, wheelhouse: Path, request: pytest.FixtureRequest
) -> None:
    deps = ["-c", f"supervisor.deps.find.links={wheelhouse}", "-c", "supervisor.deps.offline=true"]
    package = probe_package("needs", ["no-such-project-anywhere>=1"])
    with pipeline_cluster(
        zk_hosts, tmp_path, request.node.name, supervisors=("s1",), extra=deps
    ) as cluster:
        cluster.client.submit("needs", package, {})

        record = cluster.wait_status("needs", PipelineStatus.FAILED, timeout=BUILD_WAIT_SECS)

        reason = record.reason or ""
        assert "No matching distribution found for no-such-project-anywhere>=1" in reason
        local = Path(cluster.supervisors["s1"].local_dir)
        assert not newest_run_log(local, "needs").exists()  # never started
