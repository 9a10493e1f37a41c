"""Per-pipeline Python environments: a package's ``requirements:`` installed once per set.

Guarantees: the worker of a pipeline whose manifest lists requirements runs with the
interpreter of ``<local>/envs/<key>/``, where ``key`` hashes the normalized requirement set,
the supervisor's interpreter (its path and version) and the operator's installer settings
(``supervisor.deps.*``): two pipelines with the same set share one environment, built once.
An environment is a ``python -m venv --without-pip`` made from the supervisor's own
interpreter, with a ``.pth`` file that adds the supervisor's site directories *after* its
own: stratus, pyspark and pip come from the supervisor's install (nothing reinstalled, no
copy of pyspark per pipeline), and a requirement installed into the environment shadows the
supervisor's version of the same package. It is installed with that environment's
interpreter running the supervisor's pip (``--index-url``, ``--find-links``, ``--no-index``
from the settings), built in ``<local>/envs/.build-<key>-*`` and renamed into place whole
(atomic publish), under an exclusive lock on ``<local>/envs/<key>.lock`` (one install at a
time per environment, even across processes), and killed (its whole process group) past
``supervisor.deps.install.timeout.secs``. A failure is final for the assignment: the
installer's output is kept in ``<local>/envs/<key>.log`` and its tail, bounded and with URL
credentials redacted, becomes the pipeline's error. Builds run on a thread of their own, so
the control loop never waits on an install; pip gets the worker's allow-list of the
supervisor's environment (plus ``PIP_*``, proxies, certificate bundles), never its secrets;
``get`` is called from that one loop only. With ``supervisor.deps`` settings that say so
(``pack``: the cluster may run pipelines on a Spark cluster master), each environment also
gets the archive of its requirements that the executors receive (``env_archive``), built
with it, or once for an environment an earlier life built without one::

    envs = RequirementEnvs(Path("/var/lib/stratus/envs"), DepsSettings(find_links=("/wh",)))
    envs.get("etl", ["tabulate>=0.9"])   # EnvPending, then EnvReady(...) or EnvFailed(...)
    envs.forget_failures()                # a new assignment may try a failed set again
    envs.close()

A pipeline without requirements never comes here: it runs as before, with the supervisor's
interpreter and no delay.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import site
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from stratus.api.echo import echo
from stratus.api.redaction import redact_text
from stratus.process import ProcessGroup
from stratus.supervisor.env_archive import archive_of, pack_environment
from stratus.supervisor.errors import EnvironmentBuildError
from stratus.supervisor.settings import DepsSettings
from stratus.supervisor.worker_env import ALLOWED_NAMES, ALLOWED_PREFIXES

log = logging.getLogger(__name__)

BUILDERS = 1  # environments built at once: an install is heavy, and the machine is shared
BUILD_PREFIX = ".build-"
BASE_PTH = "_stratus_supervisor_site.pth"
ENV_RECORD = "stratus-env.json"
TAIL_LINES = 15
TAIL_MAX_CHARS = 3000
INSTALLER_NAMES = frozenset(
    {"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"}
)
PROXY_NAMES = frozenset({"http_proxy", "https_proxy", "no_proxy", "all_proxy"})
SPARK_SCRIPTS = ("spark-", "find-spark-home", "find_spark_home", "load-spark-env", "pyspark")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")
_ARCHIVES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz")
# A requirement by name (PEP 508 without a URL): a project name, extras, version
# specifiers; what follows a ';' is an environment marker, which fetches nothing.
_BY_NAME = re.compile(
    r"\s*[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\s*"
    r"(?:\[\s*(?:[A-Za-z0-9._-]+\s*,?\s*)*\])?\s*"
    r"\(?\s*(?:(?:===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)*\)?\s*"
)


@dataclass(frozen=True)
class EnvReady:
    """The environment of a requirement set, built and published."""

    key: str
    directory: Path
    archive: Path | None = None  # its requirements packed for executors (settings.pack)

    @property
    def python(self) -> Path:
        """The interpreter a worker runs with."""
        return self.directory / "bin" / "python"


@dataclass(frozen=True)
class EnvPending:
    """The environment is being built."""


@dataclass(frozen=True)
class EnvFailed:
    """The requirements could not be installed: ``error`` says why (final)."""

    error: str


EnvState = EnvReady | EnvPending | EnvFailed


def normalized_requirements(requirements: Sequence[str]) -> tuple[str, ...]:
    """The set of ``requirements``: project names canonical (PEP 503: lower case, runs of
    ``-_.`` as one ``-``), no spaces before a marker (``;``) unless a URL (``@``) is given,
    duplicates dropped, sorted."""
    normal = set()
    for requirement in requirements:
        head, semicolon, marker = requirement.partition(";")
        head = " ".join(head.split()) if "@" in head else "".join(head.split())
        text = head + (f"; {' '.join(marker.split())}" if semicolon else "")
        match = _NAME.match(text)
        if match:
            name = re.sub(r"[-_.]+", "-", match.group(0)).lower()
            text = name + text[match.end() :]
        normal.add(text)
    return tuple(sorted(normal))


def offline_refusal(requirements: Sequence[str]) -> str | None:
    """Why ``requirements`` cannot be installed offline, or None: with
    ``supervisor.deps.offline`` every requirement is a project name (with extras, version
    specifiers and markers) that pip finds in the operator's wheelhouses. A direct URL
    (``pkg @ https://...``, ``git+https://...``, a bare URL), a local path or a pip option
    would make pip fetch from, or install, what the package chose instead."""
    for index, requirement in enumerate(requirements):
        head = requirement.partition(";")[0]
        # pip takes a name that ends like an archive for a file in its working directory
        if _BY_NAME.fullmatch(head) is None or head.strip().lower().endswith(_ARCHIVES):
            return (
                f"requirement {index} ({echo(requirement)}) is not a project name with "
                "version specifiers: supervisor.deps.offline installs only by name from the "
                "operator's wheelhouses (supervisor.deps.find.links), never from a URL, a "
                "VCS, a local path or an index a package names; put the wheel in a "
                "wheelhouse and require it by name"
            )
    return None


def base_site_dirs() -> tuple[str, ...]:
    """The supervisor's site directories, which every environment sees after its own."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return tuple(d for d in dirs if os.path.isdir(d))


def environment_key(
    requirements: Sequence[str], settings: DepsSettings, site_dirs: Sequence[str]
) -> str:
    """The cache key of ``requirements``' environment: what decides its contents."""
    what = {
        "requirements": normalized_requirements(requirements),
        "python": sys.executable,
        "version": list(sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "site": list(site_dirs),
        "index_url": settings.index_url,
        "find_links": list(settings.find_links),
        "offline": settings.offline,
    }
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()
    return f"py{sys.version_info[0]}{sys.version_info[1]}-{digest[:24]}"


def installer_environment(parent: Mapping[str, str]) -> dict[str, str]:
    """The environment of an install: a worker's allow-list of the supervisor's (an sdist's
    build runs code of the pipeline's choosing, so no ``STRATUS_TOKEN`` nor cloud key), plus
    what pip itself reads: ``PIP_*``, proxies and certificate bundles."""
    return {
        name: value
        for name, value in parent.items()
        if name in ALLOWED_NAMES
        or name in INSTALLER_NAMES
        or name.lower() in PROXY_NAMES
        or name.startswith((*ALLOWED_PREFIXES, "PIP_"))
    }


class RequirementEnvs:
    """The environments of one supervisor, by key; see the module docstring."""

    def __init__(self, directory: Path, settings: DepsSettings) -> None:
        self.directory = directory
        self._settings = settings
        self._site_dirs = base_site_dirs()
        directory.mkdir(parents=True, exist_ok=True)
        self._remove_leftovers()
        self._pool = ThreadPoolExecutor(max_workers=BUILDERS, thread_name_prefix="env-build")
        self._ready: dict[str, EnvReady] = {}
        self._building: dict[str, Future[EnvReady]] = {}
        self._failed: dict[str, EnvFailed] = {}

    def key(self, requirements: Sequence[str]) -> str:
        return environment_key(requirements, self._settings, self._site_dirs)

    def get(self, pipeline: str, requirements: Sequence[str]) -> EnvState:
        """The environment of ``requirements`` if built; else start (or keep waiting on) it."""
        key = self.key(requirements)
        if key in self._ready:
            return self._ready[key]
        if key in self._failed:
            return self._failed[key]
        future = self._building.get(key)
        refusal = offline_refusal(requirements) if self._settings.offline else None
        if future is None and refusal is not None:  # before pip runs, and built never
            failed = self._failed[key] = EnvFailed(redact_text(refusal))
            log.warning(
                "event=env_build_refused pipeline=%s env=%s error=%s", pipeline, key, failed.error
            )
            return failed
        if future is None:
            published = self.directory / key
            if (published / ENV_RECORD).is_file() and not self._unpacked(published):
                # built by an earlier life
                return self._ready.setdefault(key, _ready(key, published))
            self._building[key] = self._pool.submit(
                self._build, pipeline, key, normalized_requirements(requirements)
            )
            return EnvPending()
        if not future.done():
            return EnvPending()
        del self._building[key]
        try:
            ready = future.result()
        except Exception as exc:  # any failure of an install is the pipeline's error
            error = str(exc) if isinstance(exc, EnvironmentBuildError) else repr(exc)
            failed = EnvFailed(redact_text(error))
            self._failed[key] = failed
            log.warning(
                "event=env_build_failed pipeline=%s env=%s error=%s", pipeline, key, failed.error
            )
            return failed
        self._ready[key] = ready
        return ready

    def forget_failures(self) -> None:
        """Let the next ``get`` of a failed set try again (a new assignment asks for it)."""
        self._failed.clear()

    def close(self) -> None:
        """Stop building; an install under way finishes on its own thread."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ the builder's side

    def _build(self, pipeline: str, key: str, requirements: tuple[str, ...]) -> EnvReady:
        target = self.directory / key
        started = time.monotonic()
        deadline = started + self._settings.install_timeout_secs
        with _locked(self.directory / f"{key}.lock"):
            if (target / ENV_RECORD).is_file():  # built meanwhile, or by an earlier life
                if self._unpacked(target):
                    pack_environment(target, exclude=frozenset({BASE_PTH}))
                return _ready(key, target)
            log.info(
                "event=env_build_started pipeline=%s env=%s requirements=%s",
                pipeline,
                key,
                _quoted(" ".join(requirements)),
            )
            temp = self.directory / f"{BUILD_PREFIX}{key}-{uuid.uuid4().hex[:8]}"
            try:
                self._install(key, temp, requirements, deadline=deadline)
                _remove(target)  # a directory with no record is an unfinished leftover
                temp.rename(target)
            finally:
                _remove(temp)
        log.info(
            "event=env_ready pipeline=%s env=%s secs=%.1f dir=%s",
            pipeline,
            key,
            time.monotonic() - started,
            target,
        )
        return _ready(key, target)

    def _unpacked(self, env_dir: Path) -> bool:
        """Whether ``env_dir`` still needs the archive the settings ask for."""
        return self._settings.pack and archive_of(env_dir) is None

    def _install(
        self, key: str, temp: Path, requirements: tuple[str, ...], deadline: float
    ) -> None:
        """Make the environment in ``temp``: venv, the ``.pth`` of the base, pip install."""
        output = self.directory / f"{key}.log"
        with output.open("wb") as out:
            self._run(
                requirements,
                [sys.executable, "-m", "venv", "--without-pip", str(temp)],
                out,
                output,
                deadline,
            )
            python = temp / "bin" / "python"
            purelib = subprocess.run(
                [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                capture_output=True,
                text=True,
                check=True,
                timeout=max(1.0, deadline - time.monotonic()),
            ).stdout.strip()
            lines = [f"import site; site.addsitedir({d!r})" for d in self._site_dirs]
            Path(purelib, BASE_PTH).write_text("\n".join(lines) + "\n", encoding="utf-8")
            _link_spark_scripts(temp / "bin")
            self._run(
                requirements,
                [str(python), "-m", "pip", *self._pip_args(), "--", *requirements],
                out,
                output,
                deadline,
            )
        if self._settings.pack:
            pack_environment(temp, exclude=frozenset({BASE_PTH}))
        record = {
            "requirements": list(requirements),
            "python": sys.executable,
            "built": time.time(),
        }
        (temp / ENV_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    def _pip_args(self) -> list[str]:
        args = ["install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"]
        if self._settings.index_url:
            args += ["--index-url", self._settings.index_url]
        for link in self._settings.find_links:
            args += ["--find-links", link]
        if self._settings.offline:
            args.append("--no-index")
        return args

    def _run(
        self,
        requirements: tuple[str, ...],
        argv: list[str],
        out: BinaryIO,
        output: Path,
        deadline: float,
    ) -> None:
        """Run one step of an install, its output appended to ``output``; killed at
        ``deadline`` (its whole process group: pip's build backends too)."""
        group = ProcessGroup.start(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=installer_environment(os.environ),
        )
        try:
            code = group.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            group.kill()
            raise EnvironmentBuildError(
                f"installing the requirements {' '.join(requirements)} took longer than "
                f"supervisor.deps.install.timeout.secs={self._settings.install_timeout_secs:g} "
                f"and was stopped; raise it, or point supervisor.deps.find.links at a local "
                f"wheelhouse (full output: {output})"
            ) from None
        if code != 0:
            raise EnvironmentBuildError(
                f"cannot install the requirements {' '.join(requirements)}: "
                f"{Path(argv[0]).name} {' '.join(argv[1:3])} exited with code {code}: "
                f"{_tail(output)} (full output: {output}); fix the package's requirements or "
                "the supervisor's supervisor.deps.* settings, then submit it again"
            )

    def _remove_leftovers(self) -> None:
        """Builds that a crash interrupted."""
        for leftover in self.directory.glob(f"{BUILD_PREFIX}*"):
            _remove(leftover)


def _ready(key: str, directory: Path) -> EnvReady:
    return EnvReady(key, directory, archive=archive_of(directory))


def _link_spark_scripts(bin_dir: Path) -> None:
    """Link the Spark launchers beside the supervisor's interpreter (``spark-pipelines``,
    ``spark-submit``, ``find-spark-home``, ...) into the environment's ``bin``: the worker
    looks for them beside its own interpreter, and they run Python as ``PYSPARK_PYTHON``."""
    base_bin = Path(sys.executable).parent
    for script in base_bin.iterdir():
        name = script.name
        if name.startswith(SPARK_SCRIPTS) and not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(script)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` of ``path`` while the block runs."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tail(path: Path) -> str:
    """The last lines of an installer's output, bounded, credentials redacted."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "no output"
    lines = [line for line in text.splitlines() if line.strip()][-TAIL_LINES:]
    return redact_text("\n".join(lines))[-TAIL_MAX_CHARS:] or "no output"


def _quoted(text: str) -> str:
    return repr(text) if any(char.isspace() for char in text) else text


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
