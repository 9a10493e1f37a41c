"""Sub-commands imported when they are used, so that ``stratus --help``, ``--version`` and a
Tab after ``stratus`` import no verb's module (and none of the libraries behind them).

A ``LazyGroup`` knows each sub-command by a ``LazyCommand``: where it is (``module:attr``)
and its one-line help. Listing the verbs (``--help``, completing a verb's name) reads the
help lines; a verb's module is imported only when the verb is resolved, to run or to
complete its own options and arguments::

    COMMANDS = {"list": LazyCommand("stratus.cli.client_commands:list_pipelines",
                                    "List every pipeline.")}

    @click.group(cls=LazyGroup, lazy_commands=COMMANDS)
    def main() -> None: ...

A help line is a copy of the command's own first docstring line; ``tests/cluster/test_cli_start.py``
checks every one against the command it names.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click
from click.shell_completion import CompletionItem


@dataclass(frozen=True)
class LazyCommand:
    """A sub-command not imported yet: ``target`` is ``module:attribute``."""

    target: str
    help: str

    def load(self) -> click.Command:
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is a {type(command).__name__}, not a click command")
        return command


class LazyGroup(click.Group):
    """A click group whose ``lazy_commands`` are imported when first resolved."""

    def __init__(
        self, *args: Any, lazy_commands: Mapping[str, LazyCommand] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        lazy = self.lazy_commands.get(cmd_name)
        if lazy is not None and cmd_name not in self.commands:
            self.add_command(lazy.load(), cmd_name)
        return super().get_command(ctx, cmd_name)

    def verb_help(self, name: str, limit: int = 45) -> str:
        """A verb's help line as ``--help`` lists it, from its module only if loaded."""
        if name in self.commands:
            return self.commands[name].get_short_help_str(limit)
        return click.Command(name, help=self.lazy_commands[name].help).get_short_help_str(limit)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = [name for name in self.list_commands(ctx) if not self._hidden(name)]
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        with formatter.section("Commands"):
            formatter.write_dl([(name, self.verb_help(name, limit)) for name in names])

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        verbs = [
            CompletionItem(name, help=self.verb_help(name))
            for name in self.list_commands(ctx)
            if name.startswith(incomplete) and not self._hidden(name)
        ]
        return verbs + click.Command.shell_complete(self, ctx, incomplete)  # the options

    def _hidden(self, name: str) -> bool:
        command = self.commands.get(name)
        return command is not None and command.hidden
