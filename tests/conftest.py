"""Fixtures that give every test a real ZooKeeper (no mocks), started as few times as possible.

- ``zk_server`` (session): one standalone server shared by the whole run, tick 100 ms, so the
  minimum session timeout is 200 ms. Never stop or restart it from a test.
- ``zk_hosts`` (function): a connect string to ``zk_server`` chrooted to a fresh znode unique to
  the test (``127.0.0.1:PORT/t/<test name>-<uuid>``), so tests cannot see each other's znodes.
- ``zk_restartable`` (function): a server of the test's own, to stop, kill and restart.
- ``zk_ensemble`` (function; JVMs shared per module): a 3-server quorum with every member
  serving when the test begins. Tests may stop, kill and start members: the fixture restarts
  the missing ones before the next test, which costs far less than three fresh JVMs per test.
  Data persists across the module's tests, so use paths unique to each test.
- ``kdc`` (session): a real MIT Kerberos KDC on loopback (``tests/harness/kdc.py``), realm
  ``STRATUS.TEST``; the test skips, saying why, when the KDC's packages are missing and
  cannot be installed.
- ``warm_defaults`` (function): warm workers as a supervisor keeps them by default. Without
  it, every supervisor of the run, in this process or a child, keeps none: warm workers are
  Spark JVMs, and the run's many supervisors would start them by the dozen
  (``STRATUS_WARM_MEMORY_MB=0``, the derived budget's override, is set here at import).

Every Spark driver of the run reads the run's ``SPARK_SUBMIT_OPTS``
(``tests/harness/spark_defaults.py``, set here at import unless the shell names it or a
``SPARK_CONF_DIR``): JIT and collector flags, and a class archive that the first Spark test of
each pytest process makes unless it is there (``_spark_class_archive``), start it for about
half the CPU.

No ZooKeeper JVM outlives the run: fixtures stop what they start, every server has a
finalizer that kills its JVM at interpreter exit, on Linux the kernel kills JVMs whose parent
died, and ``pytest_sessionfinish`` kills any ZooKeeper child process still left.

A run started with SIGINT ignored (in the background of a shell without job control) hears it
again: the tests that stop a command with Ctrl-C's signal would otherwise wait in vain.
"""

from __future__ import annotations

import importlib.util
import os
import signal
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from stratus.supervisor.warm_memory import BUDGET_ENV_VAR
from stratus.zk.ensemble import ZooKeeperEnsemble
from stratus.zk.server import ZooKeeperServer
from tests.harness.class_archive import archive_of, ensure
from tests.harness.kdc import Kdc, KdcUnavailableError, running_kdc
from tests.harness.spark_defaults import (
    SPARK_CONF_DIR,
    SPARK_SUBMIT_OPTS,
    driver_options,
    run_dir,
)
from tests.harness.zkfixtures import (
    chroot_for,
    kazoo_client,
    kill_left_workers,
    kill_stray_zookeepers,
)

SHARED_TICK_MS = 100
os.environ[BUDGET_ENV_VAR] = "0"  # no warm workers by default; see ``warm_defaults``
if SPARK_CONF_DIR not in os.environ and SPARK_SUBMIT_OPTS not in os.environ:
    # the run's Spark drivers start for less CPU; xdist's workers inherit the controller's
    os.environ[SPARK_SUBMIT_OPTS] = driver_options(run_dir("stratus-class-archive-"))
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # a run started in the background of a shell without job control ignores Ctrl-C, and so
    # would every process a test starts (an ignored signal stays ignored across exec): the
    # tests that stop a command with SIGINT, as a user's Ctrl-C does, need it heard
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _spark_class_archive(request: pytest.FixtureRequest) -> None:
    """Before a Spark test, the run's class archive is in place (made here by the first)."""
    if request.node.get_closest_marker("spark"):
        ensure(archive_of(os.environ))


@pytest.fixture
def warm_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Supervisors started by the test, here or in child processes, keep warm workers as
    they do by default (the budget derived from the machine's memory)."""
    monkeypatch.delenv(BUDGET_ENV_VAR)


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """The ZooKeeper server that the whole test session shares."""
    server = ZooKeeperServer(
        tmp_path_factory.mktemp("zk-shared"), tick_time_ms=SHARED_TICK_MS, force_sync=False
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def _zk_admin(zk_server: ZooKeeperServer) -> Iterator[Any]:
    """One kazoo client for the fixtures' own bookkeeping (creating chroots)."""
    with kazoo_client(zk_server.connect_string) as client:
        yield client


@pytest.fixture
def zk_hosts(request: pytest.FixtureRequest, zk_server: ZooKeeperServer, _zk_admin: Any) -> str:
    """A connect string to the shared server, chrooted to a znode unique to this test."""
    if not zk_server.is_running():
        pytest.fail(f"the shared ZooKeeper server died; see {zk_server.log_path}")
    chroot = chroot_for(request.node.name)
    _zk_admin.ensure_path(chroot)
    return zk_server.connect_string + chroot


@pytest.fixture
def zk_restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper server of this test's own, free to stop, kill and restart."""
    server = ZooKeeperServer(
        tmp_path_factory.mktemp("zk-own"), tick_time_ms=SHARED_TICK_MS, force_sync=False
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def _zk_ensemble_of_module(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ZooKeeperEnsemble]:
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zk-ensemble"), size=3, force_sync=False)
    ensemble.start()
    try:
        yield ensemble
    finally:
        ensemble.stop()


@pytest.fixture
def zk_ensemble(_zk_ensemble_of_module: ZooKeeperEnsemble) -> ZooKeeperEnsemble:
    """A 3-server quorum, every member serving (members a previous test stopped are back)."""
    _zk_ensemble_of_module.start()
    return _zk_ensemble_of_module


@pytest.fixture(scope="session")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kdc]:
    """A Kerberos KDC that the whole test session shares; stopped at the end."""
    if importlib.util.find_spec("kerberos") is None:
        pytest.skip(
            "no kerberos package: make installs stratus-ha[kerberos] where krb5-config is "
            "found (Debian: libkrb5-dev and a C compiler, which .ci/run installs)"
        )
    try:
        yield from running_kdc(tmp_path_factory.mktemp("kdc"))
    except KdcUnavailableError as exc:
        pytest.skip(str(exc))


@pytest.fixture(autouse=True)
def _no_worker_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, kill the workers its supervisors left running (``kill_left_workers``):
    none may outlive its test into the next."""
    yield
    kill_left_workers(f"{request.node.nodeid} ")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test`` runs two workers, ``--dist loadgroup``) every Spark
    test, and every ``solo`` one (randomized stress with short sessions), runs on the same
    worker, one at a time: two Spark JVMs at once on a 2-core machine would slow both past
    the tests' waits, while the other worker runs the rest.

    First of the hooks: xdist's worker turns the group into the test's id in its own hook,
    and a group marked after that is silently ignored (``test_xdist_groups.py`` checks it)."""
    for item in items:
        if item.get_closest_marker("spark") or item.get_closest_marker("solo"):
            item.add_marker(pytest.mark.xdist_group("spark"))


_BUSY_SECS: defaultdict[str, float] = defaultdict(float)  # xdist worker -> secs in tests
_TESTS_RUN: Counter[str] = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """On the controller of a parallel run: add each phase's time to its worker's total."""
    node = getattr(report, "node", None)
    gateway = getattr(node, "gateway", None)
    if gateway is None:
        return
    _BUSY_SECS[gateway.id] += report.duration
    if report.when == "call":
        _TESTS_RUN[gateway.id] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each worker's busy time: the Spark group runs on one of them, and the run lasts as
    long as the busier one, so this shows where the suite's time goes."""
    for worker, secs in sorted(_BUSY_SECS.items()):
        terminalreporter.write_line(f"worker {worker}: {secs:.0f} s in {_TESTS_RUN[worker]} tests")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Last line of defence: kill ZooKeeper JVMs this run started and did not stop."""
    strays = kill_stray_zookeepers()
    if strays:
        print(f"\nconftest: killed ZooKeeper JVMs left running: {strays}")
