"""``stratus completion bash|zsh|fish``: the script that makes a shell complete ``stratus``
commands, as ``kubectl completion`` prints one::

    eval "$(stratus completion bash)"        # in ~/.bashrc
    eval "$(stratus completion zsh)"         # in ~/.zshrc, after compinit
    stratus completion fish | source         # in ~/.config/fish/config.fish

The script is click's: at each Tab the shell runs ``stratus`` with ``_STRATUS_COMPLETE`` set,
and the verbs, options and names it prints are the candidates (``completion.py`` for the
names of pipelines and supervisors).
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")
PROG_NAME = "stratus"
COMPLETE_VAR = "_STRATUS_COMPLETE"


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the script that completes stratus commands in SHELL (bash, zsh or fish).

    Load it in bash with eval "$(stratus completion bash)", in zsh likewise (after compinit),
    in fish with stratus completion fish | source; put that line in the shell's startup
    file to keep it.
    """
    from stratus.cli.main import main  # noqa: PLC0415 (main imports this module lazily)

    script = get_completion_class(shell)
    assert script is not None  # every name of SHELLS is one of click's
    click.echo(script(main, {}, PROG_NAME, COMPLETE_VAR).source())
