"""The screenshots of docs/ui.md: ``make ui-screenshots``
(or ``python -m tests.harness.ui_screenshots``).

Starts a ZooKeeper, the web UI tests' cluster (three nimbuses, a supervisor, pipelines that
need no Spark: ``tests/harness/ui_cluster.py``) and Debian's Chromium, and saves each page as a PNG
into ``docs/ui/``. Before the shots, the first leader stops and starts again, so that the
leader terms show a failover (its time, the old term closed). Not a test: it asserts
nothing and CI does not run it.
"""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path

from stratus.zk.server import ZooKeeperServer
from tests.harness.browser import VIEWPORT, chromium, chromium_path
from tests.harness.ui_cluster import ui_cluster

OUT = Path(__file__).resolve().parents[2] / "docs" / "ui"


def main() -> int:
    executable = chromium_path()
    if executable is None:
        print("ui-screenshots: no Chromium on PATH (Debian: apt-get install chromium)")
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stratus-ui-") as tmp:
        server = ZooKeeperServer(Path(tmp) / "zk", tick_time_ms=100)
        server.start()
        try:
            with (
                ui_cluster(server.connect_string, Path(tmp), "ui-screenshots") as cluster,
                chromium(executable) as browser,
            ):
                nimbuses = cluster.nimbuses
                first = nimbuses.by_address(nimbuses.wait_for_agreed_leader())
                first.signal(signal.SIGTERM)  # a failover for the leader terms to show
                first.wait()
                leader = nimbuses.by_address(
                    nimbuses.wait_for_agreed_leader(not_=first.address, skip=[first])
                )
                first.start()
                first.wait_ready()
                nimbuses.wait_for_agreed_leader()
                standby = next(n for n in cluster.nimbuses.nimbuses if n is not leader)
                page = browser.new_page(viewport=VIEWPORT)
                shots = [
                    ("cluster.png", f"{leader.url}/", f"#terms td:text-is('{first.address}')"),
                    ("pipeline.png", f"{leader.url}/#/pipelines/etl", "#history td.reason"),
                    ("standby.png", f"{standby.url}/", "#leader-link"),
                ]
                for name, url, ready in shots:
                    page.goto(url)
                    page.wait_for_selector("#supervisors td, #record td")
                    page.wait_for_selector(ready)
                    page.screenshot(path=str(OUT / name), full_page=True)
                    print(f"ui-screenshots: {OUT / name}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
