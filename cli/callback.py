"""``svcgw callback``: the forward address, signing secret and Bearer token of an account or instance.

The Bearer token is stored sealed and never shown: output says only whether
one is set. An address is checked against the address rules before it is
saved, exactly as the gateway and the console check it.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from svcgw.addresses import check_for_service
from svcgw.store import CallbackConfig, Scope

from .context import Admin, admin_command
from .output import emit, json_option, record

__all__ = ["callback"]


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


@callback.command("show")
@scope_options
@json_option
@admin_command
async def callback_show(admin: Admin, account: str | None, appid: str | None, as_json: bool) -> None:
    """Show the configuration (the Bearer token is never shown)."""
    scope = _scope(account, appid)
    config = await admin.store().get_callback(scope)
    _emit(as_json, scope, config, "callback")


@callback.command("set")
@scope_options
@click.option("--url", required=True, help="Public http(s) address that accepts POST.")
@click.option("--bearer-token", default=None, help="Send 'Authorization: Bearer T' (stored encrypted).")
@click.option("--no-bearer", is_flag=True, help="Remove the Bearer token.")
@json_option
@admin_command
async def callback_set(
    admin: Admin,
    account: str | None,
    appid: str | None,
    url: str,
    bearer_token: str | None,
    no_bearer: bool,
    as_json: bool,
) -> None:
    """Set the address; without --bearer-token an existing token is kept."""
    scope = _scope(account, appid)
    if bearer_token is not None and no_bearer:
        raise click.UsageError("--bearer-token and --no-bearer exclude each other")
    checked = check_for_service(url, admin.settings)
    store = admin.store(sealing=bool(bearer_token))
    config = await store.set_callback(scope, checked.url, bearer_token=bearer_token, no_bearer=no_bearer)
    _emit(as_json, scope, config, "callback set")


@callback.command("rotate-secret")
@scope_options
@json_option
@admin_command
async def callback_rotate(admin: Admin, account: str | None, appid: str | None, as_json: bool) -> None:
    """Replace the signing secret; pending retries are signed with the new one."""
    scope = _scope(account, appid)
    config = await admin.store().rotate_secret(scope)
    _emit(as_json, scope, config, "signing secret rotated")


@callback.command("clear")
@scope_options
@json_option
@admin_command
async def callback_clear(admin: Admin, account: str | None, appid: str | None, as_json: bool) -> None:
    """Remove the address and its token; an instance falls back to the account default."""
    scope = _scope(account, appid)
    config = await admin.store().clear_callback(scope)
    _emit(as_json, scope, config, "callback cleared")
