"""A standby worker's warm-up on a real SparkSession: its first batch before ``begin``
returns, the others in the background, a stop that ends them early, and nothing of it seen
by the pipeline's session (its SQL conf, its query listeners)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.spark

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, tempfile, time
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.listener import StreamingQueryListener
    from stratus.worker.warm_up import WarmUp

    os.chdir(sys.argv[1])
    spark = SparkSession.builder.master("local[1]").appName("warm-up-test").getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", "7")
    seen = []

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event): seen.append(["started", str(event.id)])
        def onQueryProgress(self, event): seen.append(["progress", str(event.progress.id)])
        def onQueryIdle(self, event): pass
        def onQueryTerminated(self, event): seen.append(["terminated", str(event.id)])

    spark.streams.addListener(Listener())
    result = {}

    whole = WarmUp.begin(spark, batches=3)
    result["whole_after_begin"] = whole.batches_done
    result["scratch_during_whole"] = sorted(os.listdir("."))
    result["whole_finished"] = whole.finished.wait(timeout=300)
    result["whole_done"] = whole.batches_done
    result["scratch_left_after_whole"] = sorted(os.listdir("."))  # removed once it ended
    whole.stop()

    cut = WarmUp.begin(spark, batches=1000)
    result["cut_after_begin"] = cut.batches_done
    cut.stop(wait=False)
    result["cut_finished"] = cut.finished.wait(timeout=60)
    result["cut_done"] = cut.batches_done
    deadline = time.monotonic() + 60
    while os.listdir(".") and time.monotonic() < deadline:
        time.sleep(0.05)
    result["scratch_left_after_cut"] = sorted(os.listdir("."))

    result["own_partitions"] = spark.conf.get("spark.sql.shuffle.partitions")
    result["own_queries"] = len(spark.streams.active)
    # a query of the pipeline's session: its listener hears it, after any stray event before
    empty = tempfile.mkdtemp()
    control = (
        spark.readStream.schema("x LONG").json(empty)
        .writeStream.format("noop").trigger(availableNow=True).start()
    )
    control.awaitTermination()
    deadline = time.monotonic() + 60
    while ["terminated", str(control.id)] not in seen and time.monotonic() < deadline:
        time.sleep(0.05)
    result["control_query"] = str(control.id)
    result["own_listener_events"] = seen
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def warm_up_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    directory = tmp_path_factory.mktemp("warm-up")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(directory)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, object] = json.loads(line.removeprefix("RESULT "))
            return result
    pytest.fail(f"the warm-up run failed (exit {done.returncode}): {done.stderr[-3000:]}")


def test_the_first_batch_runs_before_begin_returns_and_the_others_after(
    warm_up_run: dict[str, object],
) -> None:
    assert warm_up_run["whole_after_begin"] == 1
    assert warm_up_run["whole_finished"] is True
    assert warm_up_run["whole_done"] == 3


def test_a_stop_ends_the_batches_early_at_once_and_removes_the_scratch_directory(
    warm_up_run: dict[str, object],
) -> None:
    assert warm_up_run["cut_after_begin"] == 1
    assert warm_up_run["cut_finished"] is True
    assert isinstance(warm_up_run["cut_done"], int) and warm_up_run["cut_done"] < 1000
    during = warm_up_run["scratch_during_whole"]
    assert isinstance(during, list) and len(during) == 1 and during[0].startswith("warm-up-")
    assert warm_up_run["scratch_left_after_whole"] == []
    assert warm_up_run["scratch_left_after_cut"] == []


def test_the_pipelines_session_sees_nothing_of_the_warm_up(
    warm_up_run: dict[str, object],
) -> None:
    assert warm_up_run["own_partitions"] == "7"
    assert warm_up_run["own_queries"] == 0
    events = warm_up_run["own_listener_events"]
    assert isinstance(events, list) and ["terminated", warm_up_run["control_query"]] in events
    assert {query for _, query in events} == {warm_up_run["control_query"]}
