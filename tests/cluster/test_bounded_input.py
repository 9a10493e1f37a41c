"""The pure parts of bounded input: echoes, untrusted YAML, strict JSON, repeated logs, the file
limit."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from stratus.api.echo import MAX_ECHO_CHARS, clip, echo
from stratus.api.errors import InvalidConfError, InvalidRequestError
from stratus.api.pipeline_conf import validate_pipeline_conf
from stratus.api.strict_json import loads_strict
from stratus.api.untrusted_yaml import UntrustedYamlError, load_untrusted_yaml
from stratus.codedist.errors import InvalidPackageError
from stratus.codedist.manifest import parse_manifest
from stratus.logs import RepeatLimit

BOMB = "\n".join(
    [
        'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
        *(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)),
    ]
)


@pytest.mark.parametrize(
    "value", ["x" * 1_000_000, ["y" * 1000] * 1000, {"k" * 5000: {"n": ["z" * 9000]}}, 10**4000]
)
def test_an_echo_of_any_value_is_short(value):
    assert len(echo(value)) <= MAX_ECHO_CHARS + 60


def test_a_small_value_is_echoed_whole_and_a_long_message_clipped():
    assert echo([1, "a"]) == "[1, 'a']"
    assert clip("m" * 10_000, 100).startswith("m" * 100)
    assert len(clip("m" * 10_000, 100)) < 160


def test_a_billion_laughs_is_refused_without_expanding():
    with pytest.raises(UntrustedYamlError, match="not allowed"):
        load_untrusted_yaml(BOMB, max_bytes=64 * 1024)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: &x 1\n", "anchors"),
        ("a: 1\nb: *x\n", "aliases"),
        ("a: 1\na: 2\n", "duplicate key"),
        ("a: " + "b" * 2000 + "\n", "over the limit"),
    ],
)
def test_untrusted_yaml_refuses_anchors_aliases_duplicates_and_size(text, problem):
    with pytest.raises(UntrustedYamlError, match=problem):
        load_untrusted_yaml(text, max_bytes=1024)


def test_plain_yaml_loads():
    assert load_untrusted_yaml("a: [1, {b: c}]\n", max_bytes=1024) == {"a": [1, {"b": "c"}]}


def test_a_manifest_bomb_is_an_invalid_package_with_a_small_message():
    with pytest.raises(InvalidPackageError) as caught:
        parse_manifest(f"name: bomb\nkind: app\nentrypoint: m:run\n{BOMB}\n")
    assert len(str(caught.value)) < 500


def test_a_manifest_error_quotes_a_huge_value_only_in_part():
    with pytest.raises(InvalidPackageError) as caught:
        parse_manifest("name: big\nkind: app\nentrypoint: " + "x" * 100_000 + "\n")
    assert "entrypoint" in str(caught.value)
    assert len(str(caught.value)) < 1000


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_refused_in_a_conf(number):
    with pytest.raises(InvalidConfError, match="finite"):
        validate_pipeline_conf({"spark.x": number})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(message: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("stratus.test", level, __file__, 1, message, (), None)


def test_repeated_errors_pass_up_to_the_limit_then_are_counted():
    clock = Clock()
    limit = RepeatLimit(3, 60.0, clock=clock)
    passed = [limit.filter(record("event=accept_failed")) for _ in range(10)]
    assert passed == [True] * 3 + [False] * 7
    assert limit.filter(record("event=other"))  # another kind has its own count
    assert limit.filter(record("event=info", logging.INFO))  # below warnings: never limited
    clock.now = 61.0
    next_one = record("event=accept_failed")
    assert limit.filter(next_one)
    assert "suppressed_before=7" in next_one.getMessage()


def test_a_daemon_raises_its_open_files_limit_to_the_hard_limit():
    script = (
        "import resource\n"
        "from stratus.rlimits import raise_open_files_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))\n"
        "raise_open_files_limit()\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "True"


@pytest.mark.parametrize("number", [".nan", ".inf", "-.inf"])
def test_non_finite_numbers_are_refused_in_a_manifest_conf(number):
    with pytest.raises(InvalidPackageError, match="finite"):
        parse_manifest(f"name: n\nkind: app\nentrypoint: m:run\nconf: {{spark.x: {number}}}\n")


STRICT_JSON_REFUSALS = {
    "duplicate keys": ('{"a": 1, "a": 2}', "the key 'a' twice"),
    "duplicate nested keys": ('{"a": {"b": 1, "b": 1}}', "the key 'b' twice"),
    "nesting past the bound": ("[" * 40 + "]" * 40, "nests deeper than 32"),
    "nesting past the interpreter's stack": ("[" * 100_000 + "]" * 100_000, "nests deeper"),
    "a lone surrogate": ('["\\ud800"]', "not valid Unicode"),
    "bytes that are not UTF-8": (b'["\xff"]', "not UTF-8"),
    "not JSON": ("{'a': 1}", "not valid JSON"),
}


@pytest.mark.parametrize(
    ("text", "problem"), STRICT_JSON_REFUSALS.values(), ids=STRICT_JSON_REFUSALS
)
def test_strict_json_refuses_every_document_with_two_meanings_or_no_text(text, problem):
    with pytest.raises(InvalidRequestError, match=problem) as caught:
        loads_strict(text)
    assert len(str(caught.value)) < 200


def test_strict_json_reads_plain_documents():
    assert loads_strict('{"conf": {"spark.a": [1, "é", {"b": null}]}}') == {
        "conf": {"spark.a": [1, "é", {"b": None}]}
    }
