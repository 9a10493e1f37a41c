"""A shell fence for tests: succeeds once the target dummy service reports standby by itself.

``python tests/harness/fence_when_standby.py SECS``: polls ``GET /control`` of the service named by
``STRATUS_FENCE_TARGET_ADDRESS`` for up to SECS seconds; exit 0 once its real state is
standby or it refuses connections (it is dead), 1 otherwise. It stands for a fence that
cannot reach the old active (a partition): only a service that stands down on its own, or
dies, lets the new active in.
"""

from __future__ import annotations

import os
import sys
import time

import httpx


def main() -> int:
    deadline = time.monotonic() + float(sys.argv[1])
    url = f"http://{os.environ['STRATUS_FENCE_TARGET_ADDRESS']}/control"
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).json()["state"] == "standby":
                return 0
        except httpx.ConnectError:
            return 0
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return 1


if __name__ == "__main__":
    sys.exit(main())
