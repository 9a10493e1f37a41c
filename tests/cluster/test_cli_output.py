"""The client verbs' kubectl habits on a cluster of real processes: three ``stratus nimbus``
and a ``stratus supervisor`` (``tests/harness/ui_cluster.py``: pipelines ``etl`` and ``spare``,
INACTIVE, and a worker heartbeat of ``etl`` left by a supervisor that has gone; no Spark).

What is proved: ``-o wide`` adds columns after the table's own; ``-o json`` and ``-o yaml``
print the API's records unchanged (and ``--json`` is ``-o json``); ``--watch`` shows the
output again when it changes, only then, and ends with exit code 0 on SIGINT; a Tab
completes pipeline and supervisor names from the cluster, and offers nothing, silently, when
no nimbus answers.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from stratus.api.records import ClusterSummary, PipelineRecord, PipelineWorkers
from stratus.cli.exit_codes import ExitCode
from stratus.cli.main import main
from stratus.zk.server import ZooKeeperServer
from tests.harness.ui_cluster import UiCluster, ui_cluster
from tests.harness.zkfixtures import wait_until

WAIT_SECS = 30.0
LIST_HEADER = ["pipeline", "status", "owners", "digest", "size", "submitted", "epoch"]
LIST_WIDE = ["supervisor", "version", "rebalances", "replication", "updated", "standby worker"]


@pytest.fixture(scope="module")
def cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiCluster]:
    logs = tmp_path_factory.mktemp("cli-output")
    with ui_cluster(zk_server.connect_string, logs, "cli-output") as running:
        yield running


def seeds_of(cluster: UiCluster) -> str:
    return f"nimbus.seeds={','.join(cluster.nimbuses.seeds)}"


def cli(cluster: UiCluster, *args: str) -> Any:
    result = CliRunner().invoke(main, [*args, "-c", seeds_of(cluster)])
    assert result.exit_code == 0, result.output
    return result


def rows(output: str, title: str) -> list[list[str]]:
    """The header and rows of the piped table titled ``title``."""
    lines = output.splitlines()
    start = lines.index(f"# {title}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("# ")), len(lines))
    return [line.split("\t") for line in lines[start:end] if "\t" in line]


# ---------------------------------------------------------------------- -o wide


def test_list_wide_adds_where_each_pipeline_runs_after_the_tables_own_columns(cluster):
    plain = rows(cli(cluster, "list").stdout, "pipelines")
    wide = rows(cli(cluster, "list", "-o", "wide").stdout, "pipelines")

    assert plain[0] == LIST_HEADER
    assert wide[0] == LIST_HEADER + LIST_WIDE
    assert [row[: len(LIST_HEADER)] for row in wide[1:]] == plain[1:]  # the same, then more
    spare = next(row for row in wide[1:] if row[0] == "spare")
    assert spare[len(LIST_HEADER)] == "-"  # INACTIVE: assigned nowhere
    assert spare[wide[0].index("version")] == str(cluster.client.status("spare").version)


def test_status_wide_shows_each_workers_epoch_generation_and_pid(cluster):
    plain = cli(cluster, "status", "etl").stdout
    wide = cli(cluster, "status", "etl", "-o", "wide").stdout

    title = "workers of etl: not assigned"
    assert "pid" not in rows(plain, title)[0]
    header, beat = rows(wide, title)
    assert header[-6:] == ["epoch", "generation", "pid", "digest", "started", "heartbeat"]
    assert beat[header.index("pid")] == "4242"  # the heartbeat s-gone left
    assert beat[header.index("supervisor")] == "s-gone"


def test_cluster_wide_shows_the_supervisors_endpoint_and_the_leaders_epoch(cluster):
    output = cli(cluster, "cluster", "-o", "wide").stdout

    nimbuses = rows(output, "nimbuses")
    leader = next(row for row in nimbuses[1:] if row[1] == "leader")
    assert leader[nimbuses[0].index("epoch")] == str(cluster.client.leader().epoch)
    supervisors = rows(output, "supervisors")
    assert supervisors[0][-4:] == ["endpoint", "started", "cordoned", "by"]
    (s1,) = [row for row in supervisors[1:] if row[0] == "s1"]
    (registered,) = cluster.client.cluster().supervisors
    assert registered.endpoint and s1[supervisors[0].index("endpoint")] == registered.endpoint


# ---------------------------------------------------------------------- -o json, -o yaml


def test_list_json_and_yaml_are_the_apis_records_and_json_is_the_old_flag(cluster):
    as_json = json.loads(cli(cluster, "list", "-o", "json").stdout)
    as_yaml = yaml.safe_load(cli(cluster, "list", "-o", "yaml").stdout)
    old_flag = json.loads(cli(cluster, "list", "--json").stdout)

    api = [record.model_dump(mode="json") for record in cluster.client.list_pipelines()]
    assert as_json == as_yaml == old_flag == api
    assert [PipelineRecord.model_validate(doc).name for doc in as_yaml] == ["etl", "spare"]


def test_status_json_and_yaml_are_the_record_with_its_workers(cluster):
    as_json = json.loads(cli(cluster, "status", "etl", "-o", "json").stdout)
    as_yaml = yaml.safe_load(cli(cluster, "status", "etl", "-o", "yaml").stdout)

    workers = as_yaml.pop("workers")
    assert as_yaml.pop("last_run") is None  # it runs: its workers say how
    assert as_yaml == cluster.client.status("etl").model_dump(mode="json")
    assert PipelineWorkers.model_validate(workers).workers[0].pid == 4242
    assert as_json == {**as_yaml, "workers": workers, "last_run": None}
    assert "hunter2" not in json.dumps(as_json)  # the secret stays redacted


def test_cluster_yaml_is_the_apis_cluster_summary(cluster):
    as_yaml = yaml.safe_load(cli(cluster, "cluster", "-o", "yaml").stdout)

    summary = ClusterSummary.model_validate(as_yaml)
    assert sorted(f"{n.host}:{n.port}" for n in summary.nimbuses) == sorted(cluster.nimbuses.seeds)
    assert [s.id for s in summary.supervisors] == ["s1"]
    assert list(as_yaml) == list(ClusterSummary.model_fields)  # the API's keys, its order


def test_two_formats_at_once_are_a_usage_error(cluster):
    result = CliRunner().invoke(main, ["list", "--json", "-o", "yaml", "-c", seeds_of(cluster)])

    assert result.exit_code == ExitCode.USAGE
    assert (
        json.loads(result.stdout)["message"] == "--json and -o yaml ask for two formats; give one"
    )


# ---------------------------------------------------------------------- --watch


class Output:
    """A process's stdout, read by a thread as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.text = ""
        assert process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stdout: Any) -> None:
        for line in stdout:
            self.lines.put(line)

    def finish(self) -> str:
        """Everything, once the process has ended."""
        self._reader.join(timeout=WAIT_SECS)
        return self.read()

    def read(self) -> str:
        while not self.lines.empty():
            self.text += self.lines.get()
        return self.text


def renders(text: str) -> list[list[list[str]]]:
    """Each table a watch printed, as its header and rows."""
    tables = text.split("# pipelines\n")[1:]
    return [[line.split("\t") for line in table.splitlines()] for table in tables]


def test_watch_prints_the_list_again_when_it_changes_and_ends_cleanly_on_sigint(cluster):
    before = cluster.client.status("spare").rebalances
    command = [sys.executable, "-m", "stratus", "list", "-o", "wide", "--watch"]
    process = subprocess.Popen(
        [*command, "--interval", "0.2", "-c", seeds_of(cluster)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out = Output(process)
        wait_until(lambda: "spare" in out.read(), WAIT_SECS, "the first list")
        cluster.client.rebalance("spare", {"spark.sql.shuffle.partitions": 3})
        wait_until(lambda: len(renders(out.read())) >= 2, WAIT_SECS, "the list again")
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=WAIT_SECS)
    finally:
        process.kill()
        process.wait()

    assert code == 0, process.stderr.read() if process.stderr else ""
    shown = renders(out.finish())
    rebalances = len(LIST_HEADER) + LIST_WIDE.index("rebalances")
    spare = [next(row for row in table if row[0] == "spare") for table in shown]
    assert [row[rebalances] for row in spare[:2]] == [str(before), str(before + 1)]
    assert all(a != b for a, b in itertools.pairwise(shown))  # only on a change


# ---------------------------------------------------------------------- completion


def complete(words: str, *, timeout: float = WAIT_SECS) -> subprocess.CompletedProcess[str]:
    """What the shell's completion script gets from ``stratus`` for ``words`` (the last
    word the one being completed), by click's protocol."""
    env = {
        **os.environ,
        "_STRATUS_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split(" ")) - 1),
    }
    env.pop("STRATUS_CONF", None)
    return subprocess.run(
        [sys.executable, "-m", "stratus"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_tab_completes_pipeline_names_from_the_cluster(cluster):
    every = complete(f"stratus -c {seeds_of(cluster)} status ")
    some = complete(f"stratus kill -c {seeds_of(cluster)} e")

    assert every.returncode == 0 and every.stderr == ""
    assert every.stdout.splitlines() == ["plain,etl", "plain,spare"]
    assert some.stdout.splitlines() == ["plain,etl"]


def test_a_tab_completes_supervisor_names_from_the_cluster(cluster):
    found = complete(f"stratus drain -c {seeds_of(cluster)} ")

    assert found.returncode == 0 and found.stderr == ""
    assert found.stdout.splitlines() == ["plain,s1"]


def test_with_no_nimbus_answering_a_tab_offers_nothing_and_returns():
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        seeds = f"nimbus.seeds=127.0.0.1:{silent.getsockname()[1]}"

        found = complete(f"stratus -c {seeds} status ", timeout=WAIT_SECS)

    assert found.returncode == 0
    assert found.stdout.split() == []  # no candidate (click's protocol: one empty line)
    assert found.stderr == ""  # nothing written over the shell
