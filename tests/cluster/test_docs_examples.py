"""The docs' examples run as written.

- Every Python example in docs/coordination.md runs against a real ZooKeeper.
- Every shell command in docs/*.md, README.md and src/stratus/examples/README.md (see
  ``tests.harness.doc_commands`` for how they are read): a ``stratus`` command parses against
  the real click command tree (its verb, options and arguments); a ``make`` target exists in the
  Makefile; a script or module given to Python exists, and a benchmark takes the options shown;
  a path under ``src/stratus/examples/`` exists. The commands that are quick and need nothing
  running (``stratus validate``, ``--help``, ``--version``) run, and exit as the doc shows; the
  others are listed with the reason they are not run.
- Every ``stratus.*`` module and ``src/stratus/...`` path the docs name exists;
  docs/architecture.md lists the layers of the import-linter contract and every znode that
  ``stratus.zk.paths`` builds.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import click
import pytest

from stratus.cli.main import main
from stratus.config import valid_keys
from stratus.zk.paths import ClusterPaths, GroupPaths
from tests.harness.doc_commands import DOCS, ROOT, DocCommand, shell_commands

DOC = ROOT / "docs" / "coordination.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
COMMANDS = shell_commands()
STRATUS = [c for c in COMMANDS if c.program == "stratus"]
MAKE = [c for c in COMMANDS if c.program == "make"]
PYTHON = [c for c in COMMANDS if Path(c.program).name in {"python", "python3"}]
PYTHON_QUICK_MODULES = frozenset({"stratus.codedist.manifest"})
PYTEST = [c for c in COMMANDS if Path(c.program).name == "pytest"]

# Verbs whose documented commands are parsed but not run, and why.
NOT_RUN = {
    "zookeeper": "a daemon: runs until stopped",
    "nimbus": "a daemon: runs until stopped, and needs ZooKeeper",
    "supervisor": "a daemon: runs until stopped, and needs ZooKeeper",
    "pacemaker": "a daemon: runs until stopped (tests/cluster/test_pacemaker.py starts it)",
    "local": "a whole cluster on Spark: minutes (tests/cluster/test_wheel.py runs the demo)",
    "elect": "runs a command while it leads a group: needs ZooKeeper",
    "zkfc": "a daemon: runs until stopped, needs ZooKeeper (tests/cluster/test_zkfc.py starts it)",
    "haadmin": "needs running HA services (tests/cluster/test_haadmin.py runs it)",
    "token": "prints a new secret (tests/unit/test_owners_unit.py runs it)",
    "zookeeper-java": "ZooKeeper's classes against the operator's ensemble: "
    "tests/cluster/test_deploy_zookeeper.py runs the docs' command",
    **{
        verb: "a client verb: needs a running nimbus"
        for verb in (
            "submit",
            "update",
            "list",
            "status",
            "history",
            "runs",
            "logs",
            "kill",
            "activate",
            "deactivate",
            "rebalance",
            "rollback",
            "restart",
            "cluster",
            "leader",
            "terms",
        )
    },
}
QUICK_VERBS = frozenset({"validate", "completion"})
# Programs other than stratus, make and python that the docs may show, and why they are not
# checked. A doc that shows another program fails until it is checked here or given a reason.
SHELL_ONLY = {
    "echo": "a shell builtin",
    "export": "a shell builtin",
    ".": "a shell builtin (sources the virtual environment)",
    # docs/deploy.md: installing a host, as root, on the operator's machines
    "useradd": "creates a system user: not run",
    "install": "copies files to /etc, /opt and /var/lib: not run",
    "systemctl": "starts system services: not run",
    "apt-get": "installs Debian packages: not run",
    "visudo": "checks a sudoers file of /etc: not run",
    "chmod": "changes the mode of /etc/stratus: not run",
}


def _build_broken_zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("../evil.py", "x = 1\n")


# Files that documented commands name as examples, built before those commands run.
FIXTURES = {"broken.zip": _build_broken_zip}


def ids(commands: list[DocCommand]) -> list[str]:
    return [command.where for command in commands]


# ---------------------------------------------------------------------- Python examples


def test_the_doc_has_examples() -> None:
    assert len(EXAMPLES) >= 6


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_example_runs(code: str, zk_hosts: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={
            "ZK": zk_hosts,
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_every_configuration_key_is_documented() -> None:
    documented = (DOC.parent / "configuration.md").read_text()
    missing = [key for key in valid_keys() if f"`{key}`" not in documented]
    assert missing == []


# ---------------------------------------------------------------------- shell commands


def test_the_docs_show_shell_commands_of_every_kind_checked() -> None:
    assert len(STRATUS) >= 10
    assert len(MAKE) >= 3
    assert len(PYTHON) >= 10


def _given(value: object) -> bool:
    return isinstance(value, str | tuple | list | bool | int | float)


def parse_stratus(args: list[str]) -> None:
    """Parse ``stratus ARGS`` as click would before calling anything: the verb exists, every
    option exists and has its value, and the arguments fit. Values are not converted (a path
    in an illustration need not exist); click's ``UsageError`` says what is wrong."""
    parent = click.Context(main, info_name="stratus")
    opts, rest, _ = main.make_parser(parent).parse_args(list(args))
    if not rest:
        if not any(_given(value) for value in opts.values()):
            raise click.UsageError("no verb", parent)
        return
    verb, *rest = rest
    command = main.get_command(parent, verb)
    if command is None:
        raise click.UsageError(f"no such verb {verb!r}", parent)
    ctx = click.Context(command, info_name=verb, parent=parent, **command.context_settings)
    opts, extra, _ = command.make_parser(ctx).parse_args(rest)
    if extra and not command.allow_extra_args:
        raise click.UsageError(f"unexpected arguments {extra}", ctx)
    if "--help" in rest:
        return
    missing = [p.name for p in command.params if p.required and not _given(opts.get(p.name))]
    if missing:
        raise click.UsageError(f"missing {missing}", ctx)


@pytest.mark.parametrize(
    "args",
    [
        ["kill"],
        ["kill", "a", "b"],
        ["kill", "etl", "--wat", "3"],
        ["kill", "etl", "--wait"],
        ["no-such-verb"],
        ["validate"],
        [],
    ],
)
def test_the_parse_check_refuses_a_wrong_command(args: list[str]) -> None:
    with pytest.raises(click.UsageError):
        parse_stratus(args)


@pytest.mark.parametrize("command", STRATUS, ids=ids(STRATUS))
def test_a_stratus_command_parses(command: DocCommand) -> None:
    try:
        parse_stratus(list(command.argv[1:]))
    except click.UsageError as exc:
        pytest.fail(f"{command.where}: {' '.join(command.argv)}: {exc.format_message()}")


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # the sources under test come first
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )


GROUP_OPTIONS = frozenset({"-c", "--config", "--timeout"})  # each takes a value


def _verb(argv: tuple[str, ...]) -> str:
    """The verb of ``stratus ...``, after the options given before it."""
    rest = list(argv[1:])
    while len(rest) > 1 and rest[0] in GROUP_OPTIONS:
        rest = rest[2:]
    return rest[0] if rest else ""


def _is_quick(argv: tuple[str, ...]) -> bool:
    if "--help" in argv or "--version" in argv:
        return True
    return _verb(argv) in QUICK_VERBS


@pytest.fixture
def doc_cwd(tmp_path: Path) -> Path:
    """A working directory holding the repository's examples and the doc's sample files."""
    (tmp_path / "src").symlink_to(ROOT / "src")
    for name, build in FIXTURES.items():
        build(tmp_path / name)
    return tmp_path


@pytest.mark.parametrize("command", STRATUS, ids=ids(STRATUS))
def test_a_stratus_command_runs_when_it_is_quick(command: DocCommand, doc_cwd: Path) -> None:
    if not _is_quick(command.argv):
        verb = _verb(command.argv)
        assert verb in NOT_RUN, f"{command.where}: say why `stratus {verb}` is not run, or run it"
        pytest.skip(NOT_RUN[verb])
    done = _run([sys.executable, "-m", "stratus", *command.argv[1:]], doc_cwd)
    assert done.returncode == command.exit_code, (
        f"{command.where}: {' '.join(command.argv)} exited {done.returncode}, the doc shows "
        f"{command.exit_code}: {done.stderr}"
    )
    assert "Traceback" not in done.stderr


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {
        target
        for line in re.findall(r"^([A-Za-z0-9_. -]+):(?!=)", text, flags=re.MULTILINE)
        for target in line.split()
    }


INLINE_MAKE = [
    (str(doc.relative_to(ROOT)), target)
    for doc in DOCS
    for target in re.findall(r"`make ([a-z][\w-]*)", doc.read_text())
]


@pytest.mark.parametrize("command", MAKE, ids=ids(MAKE))
def test_a_make_command_names_real_targets(command: DocCommand) -> None:
    targets = [word for word in command.argv[1:] if "=" not in word and not word.startswith("-")]
    assert targets, f"{command.where}: `make` alone; name the target"
    assert set(targets) <= _make_targets(), f"{command.where}: no such target in the Makefile"


def test_every_make_target_named_in_a_sentence_exists() -> None:
    assert INLINE_MAKE, "the docs name no make target at all"
    missing = [(doc, target) for doc, target in INLINE_MAKE if target not in _make_targets()]
    assert missing == []


def test_every_verb_named_in_a_sentence_exists() -> None:
    named = {
        (str(doc.relative_to(ROOT)), verb)
        for doc in DOCS
        for verb in re.findall(r"`stratus ([a-z][a-z-]*)", doc.read_text())
    }
    assert len(named) >= 10
    verbs = set(main.list_commands(click.Context(main)))
    assert sorted((doc, verb) for doc, verb in named if verb not in verbs) == []


@functools.cache
def _help_of(script: str) -> str:
    done = _run([sys.executable, script, "--help"], ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("command", PYTHON, ids=ids(PYTHON))
def test_a_python_command_names_a_real_script_and_its_options(command: DocCommand) -> None:
    if command.argv[1] == "-m":
        module = command.argv[2]
        assert importlib.util.find_spec(module) is not None, f"{command.where}: no {module}"
        if module in PYTHON_QUICK_MODULES:
            done = _run([sys.executable, *command.argv[1:]], ROOT)
            assert done.returncode == command.exit_code, done.stderr
        return
    script = command.argv[1]
    assert (ROOT / script).is_file(), f"{command.where}: no {script}"
    options = {word.strip("[]") for word in command.argv[2:] if word.strip("[").startswith("--")}
    shown = set(re.findall(r"--[a-z][a-z0-9-]*", _help_of(script)))
    assert sorted(options - shown) == [], f"{command.where}: options {script} does not take"


def _registered_markers() -> set[str]:
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    return {line.split(":")[0] for line in pytest_options["ini_options"]["markers"]}


@pytest.mark.parametrize("command", PYTEST, ids=ids(PYTEST))
def test_a_pytest_command_names_real_tests_and_markers(command: DocCommand) -> None:
    args = list(command.argv[1:])
    paths = [arg.split("::")[0] for arg in args if arg.startswith("tests/")]
    assert [path for path in paths if not (ROOT / path).exists()] == [], command.where
    expressions = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "-m"]
    named = set(re.findall(r"\w+", " ".join(expressions))) - {"and", "or", "not"}
    assert sorted(named - _registered_markers()) == [], f"{command.where}: unknown markers"


def test_every_other_program_is_known() -> None:
    checked = {"stratus", "make"}
    unknown = [
        c.where
        for c in COMMANDS
        if c.program not in checked
        and c not in PYTHON
        and c not in PYTEST
        and c.program not in SHELL_ONLY
    ]
    assert unknown == []


def test_every_examples_path_exists() -> None:
    named = {
        (command.where, word)
        for command in COMMANDS
        for word in command.argv
        if word.startswith("src/stratus/examples/")
    }
    assert sorted((where, path) for where, path in named if not (ROOT / path).exists()) == []


# ---------------------------------------------------------------------- names of the code


DOTTED = re.compile(r"(?<![\w.])stratus(?:\.[A-Za-z_]\w*)+")
ROOTED = re.compile(r"(?<![\w./])(?:src/)?stratus/[\w/.-]+\.(?:py|json)")
NOT_CODE = frozenset({"stratus.yaml"})


def _layers() -> list[str]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers: list[str] = next(c["layers"] for c in contracts["contracts"] if c["type"] == "layers")
    return layers


# Packages that the layer contract places in parentheses: planned, not there yet.
PLANNED = frozenset(re.findall(r"\((stratus[\w.]*)\)", " ".join(_layers())))


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute (chain) of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.util.find_spec(".".join(parts[:cut])) is not None
        except ImportError:
            found = False
        if found:
            target: object = importlib.import_module(".".join(parts[:cut]))
            for name in parts[cut:]:
                if not hasattr(target, name):
                    return False
                target = getattr(target, name)
            return True
    return False


def test_every_module_and_source_path_named_in_the_docs_exists() -> None:
    dotted, rooted = set(), set()
    for doc in DOCS:
        text = doc.read_text()
        where = str(doc.relative_to(ROOT))
        dotted |= {(where, n) for n in DOTTED.findall(text) if n not in NOT_CODE | PLANNED}
        rooted |= {(where, path) for path in ROOTED.findall(text)}
    assert len(dotted) >= 10
    assert len(rooted) >= 3
    assert sorted((where, name) for where, name in dotted if not _resolves(name)) == []
    missing = [
        (where, path)
        for where, path in rooted
        if not (ROOT / "src" / path.removeprefix("src/")).exists()
    ]
    assert sorted(missing) == []


def test_the_architecture_doc_lists_the_layers_of_the_contract() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    shown = re.search(r"^## Layers\n.*?```text\n(.*?)```", text, flags=re.MULTILINE | re.DOTALL)
    assert shown is not None, "docs/architecture.md has no layer list"
    assert shown.group(1).splitlines() == _layers()


def test_the_architecture_doc_lists_every_znode_that_paths_builds() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE)
    group = GroupPaths("/r", "g")
    built = [parent.removeprefix("/r/") + "/" for parent in ClusterPaths("/r").all_parents()]
    built += [
        "groups/<group>/" + getattr(group, name).removeprefix(group.base + "/")
        for name in ("candidates", "slots", "epochs", "terms", "breadcrumb")
    ]
    assert [path for path in built if not any(row.startswith(path) for row in rows)] == []
