"""``svcgw keys``: an account's API keys; a new key is shown once, when it is created."""

from __future__ import annotations

import click
from rich.console import RenderableType

from .context import Admin, admin_command
from .output import emit, json_option, record, table, when

__all__ = ["keys_group"]


@click.group("keys")
def keys_group() -> None:
    """API keys of an account."""


@keys_group.command("create")
@click.option("--account", required=True, help="Account id.")
@click.option("--label", default="", help="What the key is for, shown in lists (up to 100 characters).")
@json_option
@admin_command
async def keys_create(admin: Admin, account: str, label: str, as_json: bool) -> None:
    """Create an API key; the key is shown once, here only."""
    api_key, clear = await admin.store().create_key(account, label)
    data = {"id": api_key.id, "key": clear, **{k: v for k, v in api_key.as_dict().items() if k != "id"}}

    def render() -> RenderableType:
        shown = record({"id": api_key.id, "account": account, "key": clear}, "key created")
        shown.caption = "The key is shown only this once; store it now."
        return shown

    emit(as_json, data, render)


@keys_group.command("list")
@click.option("--account", required=True, help="Account id.")
@json_option
@admin_command
async def keys_list(admin: Admin, account: str, as_json: bool) -> None:
    """List an account's keys (their prefixes only)."""
    found = await admin.store().list_keys(account)
    rows = [key.as_dict() for key in found]
    emit(
        as_json,
        rows,
        lambda: table(
            ("id", "label", "prefix", "created", "last used", "revoked"),
            (
                (k.id, k.label, k.prefix + "…", when(k.created_at), when(k.last_used), when(k.revoked_at) or "no")
                for k in found
            ),
        ),
    )


@keys_group.command("revoke")
@click.argument("key_id")
@json_option
@admin_command
async def keys_revoke(admin: Admin, key_id: str, as_json: bool) -> None:
    """Revoke a key; the next call with it answers 401."""
    api_key = await admin.store().revoke_key(key_id)
    data = api_key.as_dict()
    emit(
        as_json,
        data,
        lambda: record(
            {**data, "created_at": when(data["created_at"]), "revoked_at": when(data["revoked_at"])}
        ),
    )
