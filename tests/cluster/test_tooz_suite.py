"""tooz's own test suite against the stratus:// backend, side by side with tooz's kazoo driver.

``tooz/tests/test_coordination.py`` of the installed tooz release (and ``test_partitioner.py``,
which runs the same way) is run twice at once, as tooz's own CI runs it (``TOOZ_TEST_URL``
names the driver), in a pytest process of its own each: against ``stratus://`` and against
``zookeeper://`` (tooz's kazoo driver), both on the test session's embedded ZooKeeper. Each
run's JUnit report says what every tooz test did, and the comparison fails on any tooz test
that fails or errors against stratus (run once more, alone, first: see ``RERUN_AT_MOST``;
a test the rerun rescues is named in a warning, so the warnings summary of a green run shows
it), and on any that stratus skips while the kazoo driver runs it; the table of both runs is
in the message.
A run of one tooz test against a ZooKeeper that is not there shows that the comparison does
fail when a tooz test does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import tooz.tests

from stratus.zk.server import ZooKeeperServer

# One xdist worker runs every test of the module (``--dist loadgroup``), so the pair of runs
# that ``suite_runs`` starts is set up once, not on both workers at the same time.
pytestmark = pytest.mark.xdist_group("tooz-suite")

# tooz's coordinator API tests, and its partitioner's (a consistent hash ring over a group)
SUITE = [
    Path(tooz.tests.__file__).parent / name
    for name in ("test_coordination.py", "test_partitioner.py")
]
RUN_TIMEOUT_SECS = 600  # a whole run; each tooz test also has its own pytest-timeout
TEST_TIMEOUT_SECS = 120
# A few of tooz's tests assert on timing (a thread must have taken a lock within 0.2 s), which
# a loaded machine can miss with any driver: those that fail are run once more, alone, and
# the second outcome counts (the table shows both, and a warning names each test the rerun
# rescued). More failures than this are not retried.
RERUN_AT_MOST = 3


class RescuedByRerun(UserWarning):
    """A tooz test failed in the side-by-side run and passed when run again alone."""


@dataclass(frozen=True)
class SuiteRun:
    """What each tooz test did in one run: ``passed``, ``failed``, ``error`` or ``skipped``."""

    url: str
    outcomes: dict[str, str]
    details: dict[str, str]
    output: str
    node_ids: dict[str, str]  # pytest's id of each test, to run it again
    first_outcomes: dict[str, str] = field(default_factory=dict)  # of the tests run again

    @property
    def driver(self) -> str:
        """The backend run against: ``stratus://`` or ``zookeeper://``."""
        return self.url.partition("://")[0] + "://"

    def named(self, outcome: str) -> set[str]:
        return {name for name, got in self.outcomes.items() if got == outcome}

    def outcome(self, name: str) -> str:
        """The outcome of ``name``, with its first one when it was run again."""
        got = self.outcomes.get(name, "-")
        first = self.first_outcomes.get(name)
        return f"{first}, then {got}" if first else got

    def rerun_failures(self) -> SuiteRun:
        """This run with each failed or errored test run once more, alone (when few); a
        ``RescuedByRerun`` warning for each that no longer fails."""
        failed = sorted(self.named("failed") | self.named("error"))
        if not failed or len(failed) > RERUN_AT_MOST:
            return self
        report = Path(tempfile.mkdtemp(prefix="tooz-rerun-")) / "report.xml"
        targets = [self.node_ids[name] for name in failed]
        again = finish_suite(self.url, start_suite(self.url, report, targets=targets), report)
        for name in failed:
            second = again.outcomes.get(name, "not run")
            if second in ("passed", "skipped"):
                warnings.warn(
                    RescuedByRerun(
                        f"tooz test {name} against {self.driver}: {self.outcomes[name]} in the "
                        f"side-by-side run ({self.details.get(name, '')}), then {second} run "
                        f"again alone, which counts"
                    ),
                    stacklevel=2,
                )
        return replace(
            self,
            outcomes={**self.outcomes, **again.outcomes},
            details={**self.details, **again.details},
            first_outcomes={name: self.outcomes[name] for name in failed},
        )


def start_suite(
    url: str, report: Path, *selection: str, targets: list[str] | None = None
) -> subprocess.Popen[str]:
    """tooz's suite (or ``targets``, pytest ids) against ``url`` in a pytest process of its
    own, writing a JUnit report."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        *(targets or [str(path) for path in SUITE]),
        *selection,
        "-q",
        "-p",
        "no:cacheprovider",
        "-c",
        os.devnull,  # none of this repository's pytest settings
        "--rootdir",
        str(SUITE[0].parent),  # so that the report names each test's module
        f"--timeout={TEST_TIMEOUT_SECS}",
        f"--junitxml={report}",
    ]
    return subprocess.Popen(
        command,
        cwd=report.parent,
        env={**os.environ, "TOOZ_TEST_URL": url},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish_suite(url: str, process: subprocess.Popen[str], report: Path) -> SuiteRun:
    """Wait for the run and read its report."""
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT_SECS)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"tooz's suite against {url} did not end in {RUN_TIMEOUT_SECS}s:\n{output}")
    if not report.exists():
        pytest.fail(f"tooz's suite against {url} wrote no report:\n{output}")
    outcomes: dict[str, str] = {}
    details: dict[str, str] = {}
    node_ids: dict[str, str] = {}
    files = {path.stem: path for path in SUITE}
    for case in ET.parse(report).getroot().iter("testcase"):
        module, _, cls = case.get("classname", "").rpartition(".")
        name = f"{cls}.{case.get('name')}"
        node_ids[name] = f"{files[module.rpartition('.')[2]]}::{cls}::{case.get('name')}"
        outcome = "passed"
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                text = (found.get("message") or found.text or "").strip()
                details[name] = text.splitlines()[0] if text else ""
                break
        outcomes[name] = outcome
    return SuiteRun(url, outcomes, details, output, node_ids)


def problems(stratus: SuiteRun, kazoo: SuiteRun) -> list[str]:
    """Every way the stratus run falls short of the kazoo driver's (empty: none)."""
    found = [
        f"{name} {stratus.outcomes[name]} against stratus: {stratus.details.get(name, '')}"
        for name in sorted(stratus.named("failed") | stratus.named("error"))
    ]
    found += [
        f"{name} skipped against stratus ({stratus.details.get(name, '')}) but "
        f"{kazoo.outcomes.get(name, 'absent')} against the kazoo driver"
        for name in sorted(stratus.named("skipped") - kazoo.named("skipped"))
    ]
    found += [
        f"{name} not run against stratus"
        for name in sorted(set(kazoo.outcomes) - set(stratus.outcomes))
    ]
    if not stratus.outcomes:
        found.append(f"no tooz test ran against stratus:\n{stratus.output}")
    return found


def side_by_side(stratus: SuiteRun, kazoo: SuiteRun) -> str:
    """One line per tooz test: its outcome against each driver."""
    names = sorted(set(stratus.outcomes) | set(kazoo.outcomes))
    lines = [f"{'tooz test':<70} {'stratus://':<10} zookeeper://"]
    lines += [f"{name:<70} {stratus.outcome(name):<10} {kazoo.outcome(name)}" for name in names]
    return "\n".join(lines)


def stratus_url(zk_server: ZooKeeperServer) -> str:
    """A ``stratus://`` URL to the shared ZooKeeper, in a chroot of its own."""
    return f"stratus://{zk_server.connect_string}/t/tooz-suite-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def suite_runs(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[SuiteRun, SuiteRun]:
    """Both runs, at once, on the shared ZooKeeper (the stratus one in a chroot of its own)."""
    urls = {
        "stratus": stratus_url(zk_server),
        "kazoo": f"zookeeper://{zk_server.connect_string}",
    }
    started = {}
    for driver, url in urls.items():
        report = tmp_path_factory.mktemp(f"tooz-{driver}") / "report.xml"
        started[driver] = (url, start_suite(url, report), report)
    runs = {driver: finish_suite(*started[driver]).rerun_failures() for driver in urls}
    return runs["stratus"], runs["kazoo"]


@pytest.mark.slow
def test_toozs_suite_passes_against_the_stratus_backend_as_against_kazoo(
    suite_runs: tuple[SuiteRun, SuiteRun],
) -> None:
    stratus, kazoo = suite_runs
    assert problems(stratus, kazoo) == [], side_by_side(stratus, kazoo)
    assert kazoo.named("passed") <= stratus.named("passed"), side_by_side(stratus, kazoo)


@pytest.mark.slow
def test_the_kazoo_driver_beside_it_ran_the_same_suite(
    suite_runs: tuple[SuiteRun, SuiteRun],
) -> None:
    """The baseline is real: the kazoo driver ran every test of the suite and passed most."""
    stratus, kazoo = suite_runs
    assert set(kazoo.outcomes) == set(stratus.outcomes)
    assert len(kazoo.named("passed")) >= 50, side_by_side(stratus, kazoo)
    assert kazoo.named("failed") | kazoo.named("error") == set(), side_by_side(stratus, kazoo)


@pytest.mark.slow
def test_a_failing_tooz_test_fails_the_comparison(
    suite_runs: tuple[SuiteRun, SuiteRun], tmp_path: Path
) -> None:
    """The oracle: tooz's tests against a ZooKeeper that is not there are reported, and
    running them once more (as a failure of the real run is) does not hide them."""
    _, kazoo = suite_runs
    url = "stratus://127.0.0.1:1/nowhere?timeout=1&connection_timeout=0.2"
    report = tmp_path / "report.xml"
    first = finish_suite(url, start_suite(url, report, "-k", "test_create_group"), report)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        broken = first.rerun_failures()
    assert broken.first_outcomes  # run again
    assert broken.named("error") | broken.named("failed")
    assert not [w for w in caught if issubclass(w.category, RescuedByRerun)]
    found = problems(broken, kazoo)
    assert any("test_create_group" in line for line in found)


def test_a_tooz_test_its_rerun_rescues_is_named_in_a_warning(
    zk_server: ZooKeeperServer,
) -> None:
    """A green run shows what the rerun rescued: a tooz test that failed in the side-by-side
    run (as recorded here) and passes alone against the real ZooKeeper counts as passed, and
    a warning names it, the backend and both outcomes."""
    name = "TestAPI.test_create_group"
    first = SuiteRun(
        stratus_url(zk_server),
        {name: "failed"},
        {name: "AssertionError: too slow"},
        "",
        {name: f"{SUITE[0]}::TestAPI::test_create_group"},
    )
    with pytest.warns(RescuedByRerun) as caught:
        rescued = first.rerun_failures()
    assert [str(w.message) for w in caught if issubclass(w.category, RescuedByRerun)] == [
        f"tooz test {name} against stratus://: failed in the side-by-side run "
        "(AssertionError: too slow), then passed run again alone, which counts"
    ]
    assert rescued.outcome(name) == "failed, then passed"
    assert problems(rescued, SuiteRun("zookeeper://", {name: "passed"}, {}, "", {})) == []


def test_a_skip_the_kazoo_driver_does_not_make_fails_the_comparison() -> None:
    """The oracle for skips: a tooz test skipped only against stratus is a problem."""
    outcomes = {"TestAPI.test_a": "passed", "TestAPI.test_b": "skipped"}
    kazoo = SuiteRun("zookeeper://", outcomes, {}, "", {})
    fine = SuiteRun("stratus://", outcomes, {}, "", {})
    skipping = SuiteRun(
        "stratus://",
        {"TestAPI.test_a": "skipped", "TestAPI.test_b": "skipped"},
        {"TestAPI.test_a": "not implemented"},
        "",
        {},
    )
    assert problems(fine, kazoo) == []
    assert problems(skipping, kazoo) == [
        "TestAPI.test_a skipped against stratus (not implemented) but passed against the "
        "kazoo driver"
    ]


@pytest.mark.slow
def test_the_lock_tests_the_kazoo_driver_skips_pass_against_stratus(
    suite_runs: tuple[SuiteRun, SuiteRun],
) -> None:
    """Shared locks and breaking a lock: offered by stratus, not by tooz's kazoo driver."""
    stratus, kazoo = suite_runs
    skipped_locks = {name for name in kazoo.named("skipped") if "lock" in name}
    assert len(skipped_locks) >= 5, side_by_side(stratus, kazoo)
    assert skipped_locks <= stratus.named("passed"), side_by_side(stratus, kazoo)
