"""``svcgw callback``: the forward address, signing secret and Bearer token of an account or instance.

The Bearer token is stored sealed and never shown: output says only whether
one is set. The signing secret is stored sealed too, and shown to the
operator in clear. An address is checked against the address rules before it
is saved, exactly as the gateway and the console check it.

A Bearer token given on the command line (``--bearer-token T``) is visible to
other users of the machine (``ps``) and kept in shell history, so it can also
be read from standard input (``--bearer-token -``) or typed at a hidden
prompt (``--bearer-token-prompt``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from svcgw.callbacks.addresses import check_for_service
from svcgw.registry.store import CallbackConfig, Scope

from .context import Admin, admin_command
from .output import emit, json_option, record

__all__ = ["callback", "read_bearer_token"]


def scope_options(func: Callable[..., None]) -> Callable[..., None]:
    func = click.option("--appid", help="An instance's own callback configuration.")(func)
    return click.option("--account", help="The account default (instances without their own).")(func)


def _scope(account: str | None, appid: str | None) -> Scope:
    if (account is None) == (appid is None):
        raise click.UsageError("give exactly one of --account ID or --appid APPID")
    return Scope(account=account, appid=appid)


def _emit(as_json: bool, scope: Scope, config: CallbackConfig, title: str) -> None:
    # Never the Bearer token: only whether one is set.
    data = {"account": scope.account, "appid": scope.appid, **config.as_dict()}
    emit(as_json, data, lambda: record({k: v for k, v in data.items() if v is not None or k == "url"}, title))


@click.group()
def callback() -> None:
    """Callback (forward) address, signing secret and Bearer token of an account or instance."""


STDIN = "-"


def read_bearer_token(given: str | None, prompt: bool) -> str | None:
    """The token to store: as given, read from stdin for ``-``, or typed at a hidden prompt; None keeps it."""
    if prompt and given is not None:
        raise click.UsageError("--bearer-token and --bearer-token-prompt exclude each other")
    if prompt:
        token = str(click.prompt("Bearer token", hide_input=True, err=True)).strip()
    elif given == STDIN:
        token = sys.stdin.readline().strip()
    else:
        return given
    if not token:
        raise click.UsageError("the Bearer token read is empty")
    return token


@callback.command("show")
@scope_options
@json_option
@admin_command
async def callback_show(admin: Admin, account: str | None, appid: str | None, as_json: bool) -> None:
    """Show the configuration (the Bearer token is never shown)."""
    scope = _scope(account, appid)
    config = await admin.store(sealing=True).get_callback(scope)
    _emit(as_json, scope, config, "callback")


@callback.command("set")
@scope_options
@click.option("--url", required=True, help="Public http(s) address that accepts POST.")
@click.option(
    "--bearer-token",
    default=None,
    metavar="T",
    help="Send 'Authorization: Bearer T' (stored encrypted); '-' reads T from standard input.",
)
@click.option("--bearer-token-prompt", is_flag=True, help="Type the Bearer token at a hidden prompt.")
@click.option("--no-bearer", is_flag=True, help="Remove the Bearer token.")
@json_option
@admin_command
async def callback_set(
    admin: Admin,
    account: str | None,
    appid: str | None,
    url: str,
    bearer_token: str | None,
    bearer_token_prompt: bool,
    no_bearer: bool,
    as_json: bool,
) -> None:
    """Set the address; without --bearer-token the token is kept if the origin (scheme, host, port) stays."""
    scope = _scope(account, appid)
    if (bearer_token is not None or bearer_token_prompt) and no_bearer:
        raise click.UsageError("--bearer-token and --no-bearer exclude each other")
    bearer_token = read_bearer_token(bearer_token, bearer_token_prompt)
    checked = check_for_service(url, admin.settings)
    # Sealing: the token, and the signing secret generated with a first address.
    store = admin.store(sealing=True)
    config = await store.set_callback(scope, checked.url, bearer_token=bearer_token, no_bearer=no_bearer)
    _emit(as_json, scope, config, "callback set")


@callback.command("rotate-secret")
@scope_options
@json_option
@admin_command
async def callback_rotate(admin: Admin, account: str | None, appid: str | None, as_json: bool) -> None:
    """Replace the signing secret; pending retries are signed with the new one."""
    scope = _scope(account, appid)
    config = await admin.store(sealing=True).rotate_secret(scope)
    _emit(as_json, scope, config, "signing secret rotated")


@callback.command("clear")
@scope_options
@json_option
@admin_command
async def callback_clear(admin: Admin, account: str | None, appid: str | None, as_json: bool) -> None:
    """Remove the address and its token; an instance falls back to the account default."""
    scope = _scope(account, appid)
    config = await admin.store(sealing=True).clear_callback(scope)
    _emit(as_json, scope, config, "callback cleared")
