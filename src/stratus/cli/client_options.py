"""The options the client verbs share (``--json``, ``--request-id``, ``--conf KEY=VALUE``)
and the client they talk to the nimbuses through.

    @click.command()
    @conf_option(required=True)
    @json_option
    @with_config
    def rebalance(name: str, pipeline_conf: dict[str, Any], as_json: bool, conf: StratusConfig):
        with nimbus_client(conf) as client:
            ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
import httpx
import yaml
from rich.console import Console

from stratus.cli.options import json_mode
from stratus.cli.retry_display import RetryDisplay
from stratus.client import NimbusClient
from stratus.config import StratusConfig

F = TypeVar("F", bound=Callable[..., Any])

_JSON_VALUES = (str, int, float, bool, list, dict, type(None))


def json_option(func: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print the JSON record(s) instead of tables."
    )(func)


def request_id_option(func: F) -> F:
    """``--request-id``: a retried change is applied once (the nimbus remembers the id)."""
    return click.option(
        "--request-id",
        default=None,
        help="Id that makes a re-run of this command change nothing twice [default: new].",
    )(func)


def _parse_conf(_ctx: click.Context, _param: click.Parameter, items: tuple[str, ...]) -> Any:
    """``--conf KEY=VALUE`` items as a dict; values are YAML scalars (``4`` is an int)."""
    conf: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not of the form KEY=VALUE")
        conf[key.strip()] = _scalar(raw)
    return conf


def _scalar(raw: str) -> Any:
    """``raw`` as YAML reads it, or as the string itself when YAML gives no JSON value."""
    if not raw.strip():
        return raw
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    return value if isinstance(value, _JSON_VALUES) else raw  # dates stay strings


def conf_option(*, required: bool) -> Callable[[F], F]:
    return click.option(
        "--conf",
        "pipeline_conf",
        multiple=True,
        required=required,
        metavar="KEY=VALUE",
        callback=_parse_conf,
        help="Set one pipeline conf key (spark.* or pipeline.*); may be repeated.",
    )


@contextmanager
def nimbus_client(conf: StratusConfig) -> Iterator[NimbusClient]:
    """A client for the configured seeds, over the transport the caller gave, if any, that
    says on stderr why it waits while it retries (``retry_display.py``)."""
    transport = click.get_current_context().find_object(httpx.BaseTransport)
    stderr = Console(stderr=True, markup=False, highlight=False)
    display = RetryDisplay(stderr, interactive=stderr.is_terminal and not json_mode())
    with display, NimbusClient.from_config(conf, transport=transport, on_retry=display) as client:
        yield client
