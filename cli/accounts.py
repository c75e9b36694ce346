"""``svcgw accounts``: developer accounts, their quota, validity and denied operations."""

from __future__ import annotations

from datetime import date

import click

from .context import Admin, admin_command
from .output import emit, json_option, record, table, when

__all__ = ["accounts"]


def _valid_date(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise click.BadParameter(f"must be a date like 2027-12-31, got {value!r}") from None


@click.group()
def accounts() -> None:
    """Developer accounts: quota, validity and denied operations."""


@accounts.command("create")
@click.option("--name", required=True, help="Display name of the account.")
@click.option("--devices", type=click.IntRange(min=0), default=None, help="Device quota (default: none).")
@click.option("--valid-until", callback=_valid_date, metavar="YYYY-MM-DD", help="Last day of validity.")
@json_option
@admin_command
async def accounts_create(
    admin: Admin, name: str, devices: int | None, valid_until: str | None, as_json: bool
) -> None:
    """Create an account."""
    account = await admin.store().create_account(name, devices, valid_until)
    emit(as_json, account.as_dict(), lambda: record(_account_row(account.as_dict()), "account created"))


@accounts.command("list")
@json_option
@admin_command
async def accounts_list(admin: Admin, as_json: bool) -> None:
    """List every account."""
    store = admin.store()
    rows = []
    for account in await store.list_accounts():
        data = account.as_dict()
        data["instances"] = len(await store.instances_of(account.id))
        denials = await store.denials(account.id)
        # ``denied`` is the operator's list, which ``accounts deny/allow`` change;
        # ``denied_by_account`` is the account's own (console), refused as well.
        data["denied"] = sorted(denials.operator)
        data["denied_by_account"] = sorted(denials.own)
        rows.append(data)
    emit(
        as_json,
        rows,
        lambda: table(
            ("id", "name", "devices", "valid until", "instances", "denied", "denied by account", "created"),
            (
                (
                    r["id"],
                    r["name"],
                    r["devices"],
                    r["valid_until"],
                    r["instances"],
                    ", ".join(_strings(r["denied"])),
                    ", ".join(_strings(r["denied_by_account"])),
                    when(r["created_at"]),
                )
                for r in rows
            ),
        ),
    )


def _denied_command(name: str, deny: bool) -> click.Command:
    verb = "Deny" if deny else "Allow"

    @click.option("--account", required=True, help="Account id.")
    @click.argument("operations", nargs=-1, required=True)
    @json_option
    @admin_command
    async def command(admin: Admin, account: str, operations: tuple[str, ...], as_json: bool) -> None:
        store = admin.store()
        changed = await (store.deny(account, operations) if deny else store.allow(account, operations))
        denied = sorted(changed)
        emit(
            as_json,
            {"account": account, "denied": denied},
            lambda: table((f"denied operations of {account}",), [(op,) for op in denied] or [("-",)]),
        )

    command.__doc__ = (
        f"{verb} controlled operations (module/action, e.g. message/sendText) for an account; "
        "a denied one answers HTTP 403. This is the operator's list: the account cannot allow "
        "what it holds from the console, which manages a list of the account's own."
    )
    return click.command(name)(command)


accounts.add_command(_denied_command("deny", deny=True))
accounts.add_command(_denied_command("allow", deny=False))


def _account_row(data: dict[str, object]) -> dict[str, object]:
    return {**data, "created_at": when(data.get("created_at"))}


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []
