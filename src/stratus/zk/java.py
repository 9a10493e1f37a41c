"""Java discovery and the classpath of the ZooKeeper server, from the installed pyspark wheel.

``find_java()`` returns a Java 17+ (``$JAVA_HOME/bin/java``, else the PATH's) and
``zookeeper_classpath()`` the jars that pyspark ships in ``pyspark/jars`` that the server needs;
both raise a one-line :class:`~stratus.zk.errors.ZooKeeperServerError` that says what to install::

    command = [find_java(), "-cp", os.pathsep.join(map(str, zookeeper_classpath())), MAIN]

``java_command(args)`` is that command for ``java``'s own arguments (options, a main class and
its arguments), with the classpath put in: what ``stratus zookeeper-java`` runs, so that an
operator's unit or script runs ZooKeeper's classes without naming where pip put the jars::

    java_command(["-Xmx1g", "org.apache.zookeeper.server.quorum.QuorumPeerMain", "zoo.cfg"])
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from stratus.zk.errors import JavaNotFoundError, ZooKeeperJarsNotFoundError, ZooKeeperJavaArgsError

MIN_JAVA_VERSION = 17
# Jars of the ZooKeeper server and what it loads; netty only matters for netty/TLS settings.
REQUIRED_JARS = (
    "zookeeper",
    "zookeeper-jute",
    "slf4j-api",
    "log4j-slf4j2-impl",
    "log4j-api",
    "log4j-core",
    "audience-annotations",
    "commons-cli",
    "metrics-core",
    "snappy-java",
)
OPTIONAL_JARS = (
    "netty-common",
    "netty-buffer",
    "netty-resolver",
    "netty-transport",
    "netty-transport-native-unix-common",
    "netty-transport-classes-epoll",
    "netty-codec",
    "netty-codec-base",
    "netty-handler",
)

CLASSPATH_OPTIONS = ("-cp", "-classpath", "--class-path")

_JAVA_VERSION = re.compile(r'version "(?P<version>[^"]+)"')


def find_java(java: str | None = None) -> str:
    """Path of a Java >= 17: ``java`` if given, else ``$JAVA_HOME/bin/java``, else the PATH's."""
    path = _locate_java(java)
    version = _java_version(path)
    if _java_major(version) < MIN_JAVA_VERSION:
        raise JavaNotFoundError(
            f"Java at {path} is version {version}, but ZooKeeper needs Java "
            f"{MIN_JAVA_VERSION} or newer: install one, or point JAVA_HOME at it"
        )
    return path


def _locate_java(java: str | None) -> str:
    if java is not None:
        found = shutil.which(java)
        if found is None:
            raise JavaNotFoundError(
                f"Java executable {java!r} not found or not executable: "
                f"give the path of a Java {MIN_JAVA_VERSION}+ `java`"
            )
        return found
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home, "bin", "java")
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise JavaNotFoundError(
            f"no Java found (no JAVA_HOME/bin/java, no `java` on PATH): install Java "
            f"{MIN_JAVA_VERSION} or newer, or set JAVA_HOME"
        )
    return found


@functools.cache
def _java_version(path: str) -> str:
    """The version string that ``java -version`` prints (cached: it costs a JVM start)."""
    try:
        done = subprocess.run(
            [path, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaNotFoundError(
            f"cannot run {path} -version ({exc}): install Java {MIN_JAVA_VERSION} or newer"
        ) from None
    match = _JAVA_VERSION.search(done.stderr + done.stdout)
    if match is None:
        raise JavaNotFoundError(
            f"{path} -version printed no version; is it a Java runtime? "
            f"Install Java {MIN_JAVA_VERSION} or newer, or set JAVA_HOME"
        )
    return match["version"]


def _java_major(version: str) -> int:
    """``"17.0.15"`` → 17, ``"1.8.0_292"`` → 8, ``"21-ea"`` → 21; unparsable → 0."""
    numbers = [int(part) for part in re.findall(r"\d+", version)[:2]]
    if not numbers:
        return 0
    if numbers[0] == 1 and len(numbers) > 1:
        return numbers[1]
    return numbers[0]


def java_command(args: Sequence[str], java: str | None = None) -> list[str]:
    """``java`` (``find_java``) with ``args``, JVM options first (each one word:
    ``-Dkey=value``, ``-Xmx1g``), then a main class and its arguments, and the ZooKeeper jars as
    the classpath before the main class. ``ZooKeeperJavaArgsError`` if no main class is
    given, or a classpath is."""
    main = next((i for i, arg in enumerate(args) if not arg.startswith("-")), None)
    if main is None:
        raise ZooKeeperJavaArgsError(
            f"no main class among {' '.join(args) or 'no arguments'}: give JVM options, then "
            "a class such as org.apache.zookeeper.server.quorum.QuorumPeerMain and its arguments"
        )
    options = args[:main]
    given = [
        option
        for option in options
        if option in CLASSPATH_OPTIONS
        or option.startswith(tuple(f"{o}=" for o in CLASSPATH_OPTIONS))
    ]
    if given:
        raise ZooKeeperJavaArgsError(
            f"{given[0]} among the JVM options: the classpath is the ZooKeeper jars of the "
            "pyspark wheel, which this command gives itself; leave it out"
        )
    classpath = os.pathsep.join(str(jar) for jar in zookeeper_classpath())
    return [find_java(java), *options, "-cp", classpath, *args[main:]]


def zookeeper_classpath() -> list[Path]:
    """The jars, from the installed pyspark wheel, that the ZooKeeper server needs."""
    return list(_classpath())


@functools.cache
def _classpath() -> tuple[Path, ...]:
    jars_dir = _pyspark_jars_dir()
    jars = [_newest_jar(jars_dir, name) for name in REQUIRED_JARS + OPTIONAL_JARS]
    missing = [name for name, jar in zip(REQUIRED_JARS, jars, strict=False) if jar is None]
    if missing:
        raise ZooKeeperJarsNotFoundError(
            f"{jars_dir} lacks the ZooKeeper jars {', '.join(missing)}: "
            f"reinstall pyspark 4.3 (pip install --force-reinstall 'pyspark>=4.3,<4.4')"
        )
    return tuple(jar for jar in jars if jar is not None)


def _pyspark_jars_dir() -> Path:
    spec = importlib.util.find_spec("pyspark")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        jars = Path(location, "jars")
        if jars.is_dir():
            return jars
    raise ZooKeeperJarsNotFoundError(
        "pyspark's jars directory (pyspark/jars) was not found: install pyspark 4.3 "
        "(pip install 'pyspark>=4.3,<4.4'), which ships the ZooKeeper server jars"
    )


def _newest_jar(jars_dir: Path, name: str) -> Path | None:
    """The newest ``<name>-<version>.jar``; ``netty-codec`` never matches ``netty-codec-http``."""
    pattern = re.compile(rf"^{re.escape(name)}-\d[\w.\-]*\.jar$")
    matches = sorted(path for path in jars_dir.iterdir() if pattern.match(path.name))
    return matches[-1] if matches else None
