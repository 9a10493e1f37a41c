"""``stratus token``: make the lines of a token file, which hold hashes, never tokens.

    stratus token new --role submit --principal alice [--expires 2027-01-31]
    stratus token hash --role submit --principal ci < ci-token   # a token you already have

``new`` draws a random token, prints it once on stdout (hand it to its user: it is kept
nowhere) and the line to append to ``nimbus.auth.tokens.file`` on stderr, with the token's
sha256 in place of the token. ``hash`` reads a token on stdin and prints its line (or, without
``--role``, just ``sha256:<hex>``). Then send the nimbuses, supervisors and zkfcs SIGHUP
(``systemctl reload``) to take the new file.
"""

from __future__ import annotations

import sys
from datetime import datetime

import click

from stratus.security.errors import TokenFileError
from stratus.security.roles import Role
from stratus.security.tokens import (
    MIN_TOKEN_CHARS,
    check_principal,
    hash_token,
    new_token,
    parse_expiry,
    token_line,
)

ROLE_CHOICE = click.Choice([role.value for role in Role])


def _expiry(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_expiry(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 date or time (2027-01-31, 2027-01-31T12:00:00Z)"
        ) from None


def _principal(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_principal(value)
    except TokenFileError as exc:
        raise click.BadParameter(str(exc)) from None


_EXPIRES = click.option(
    "--expires",
    callback=_expiry,
    metavar="WHEN",
    help="ISO 8601 date or time after which the token is refused (UTC unless it says).",
)


@click.group()
def token() -> None:
    """Make token file lines: a new token, or the hash of one."""


@token.command()
@click.option("--role", type=ROLE_CHOICE, required=True, help="read, submit or admin.")
@click.option("--principal", required=True, callback=_principal, help="Who the token stands for.")
@_EXPIRES
def new(role: str, principal: str, expires: datetime | None) -> None:
    """Print a new token (once, on stdout) and its token file line (on stderr)."""
    secret = new_token()
    line = token_line(Role(role), principal, hash_token(secret), expires=expires)
    click.echo(secret)
    click.echo(f"append to the token file, then send the daemons SIGHUP:\n{line}", err=True)


@token.command("hash")
@click.option("--role", type=ROLE_CHOICE, default=None, help="Print a whole line with this role.")
@click.option(
    "--principal", callback=_principal, default=None, help="The line's principal (with --role)."
)
@_EXPIRES
def hash_command(role: str | None, principal: str | None, expires: datetime | None) -> None:
    """Read a token on stdin; print sha256:<hex>, or its token file line with --role."""
    secret = sys.stdin.readline().strip()
    if len(secret) < MIN_TOKEN_CHARS:
        raise click.UsageError(
            f"expected a token of at least {MIN_TOKEN_CHARS} characters on stdin"
        )
    if role is None:
        if principal is not None or expires is not None:
            raise click.UsageError("--principal and --expires make a line: give --role too")
        click.echo(hash_token(secret))
        return
    if principal is None:
        raise click.UsageError("a line needs --principal: who the token stands for")
    click.echo(token_line(Role(role), principal, hash_token(secret), expires=expires))
