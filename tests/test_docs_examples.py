"""Every Python example in docs/coordination.md runs as written against a real ZooKeeper."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stratus.config import valid_keys

DOC = Path(__file__).resolve().parent.parent / "docs" / "coordination.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


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
