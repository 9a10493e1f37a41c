"""Debian's Chromium driven by playwright's Python API, for the web UI's tests and screenshots.

playwright's own browser download is not used: the Chromium of the system (``chromium``,
which ``.ci/run`` installs) is launched through ``executable_path``. Without it a test skips
saying why, except in CI (``CI`` set), where the browser tests must run and so fail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser")
VIEWPORT = {"width": 1280, "height": 860}


def chromium_path() -> str | None:
    """The system's Chromium, or None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def require_chromium() -> str:
    """The Chromium to launch; skip the test (fail it in CI) when there is none."""
    path = chromium_path()
    missing = None
    if path is None:
        missing = "no Chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)"
    else:
        try:
            import playwright.sync_api  # noqa: F401, PLC0415 (a dev dependency)
        except ImportError:
            missing = "no playwright package (pip install -e '.[dev]')"
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the browser tests must run in CI: {missing}")
        pytest.skip(missing)
    assert path is not None
    return path


@contextlib.contextmanager
def chromium(executable: str) -> Iterator[Any]:
    """A headless Chromium (playwright's ``Browser``), closed at the end."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 (a dev dependency)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable,
            # as root in a container: no user namespaces for Chromium's sandbox
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        try:
            yield browser
        finally:
            browser.close()
