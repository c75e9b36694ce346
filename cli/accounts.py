"""``svcgw accounts``: developer accounts, their quota, validity, denied operations and console sign-in.

An account signs in to the console with a login (an e-mail address or a
name) and a password. The operator sets the password (``--password -`` reads
it from stdin, ``--password-prompt`` asks for it without echo: never on the
command line, where ``ps`` and shell history would keep it) or sends an
invitation, a one-time link with which the developer chooses it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import date

import click
from rich.console import RenderableType

from receiver.console.account import invitation_path
from svcgw.errors import Rejected
from svcgw.intake.calllog import parse_since
from svcgw.registry import passwords
from svcgw.registry.credentials import Credentials
from svcgw.registry.invitations import Invitations

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


STDIN = "-"


def password_options(func: Callable[..., None]) -> Callable[..., None]:
    func = click.option("--password-prompt", is_flag=True, help="Ask for the console password without echo (twice).")(
        func
    )
    return click.option(
        "--password",
        "password_source",
        metavar="-",
        help="'-': read the console password from the first line of stdin (never the password itself).",
    )(func)


def _password(source: str | None, prompt: bool, login: str | None) -> str | None:
    """The password to set, read from stdin or a hidden prompt and checked; None when none is asked for."""
    if source is not None and source != STDIN:
        raise click.UsageError(
            "--password takes only '-' (read from stdin): a password on the command line "
            "shows in ps and stays in shell history; or use --password-prompt"
        )
    if source is not None and prompt:
        raise click.UsageError("--password - and --password-prompt exclude each other")
    if prompt:
        password = str(click.prompt("Password", hide_input=True, confirmation_prompt=True, err=True))
    elif source == STDIN:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        return None
    try:
        passwords.check_new(password, login=login)
    except passwords.PasswordRejected as exc:
        raise click.UsageError(str(exc)) from None
    return password


@accounts.command("create")
@click.option("--name", required=True, help="Display name of the account.")
@click.option("--devices", type=click.IntRange(min=0), default=None, help="Device quota (default: none).")
@click.option("--valid-until", callback=_valid_date, metavar="YYYY-MM-DD", help="Last day of validity.")
@click.option("--login", help="Console login: an e-mail address or a name (unique, case-insensitive).")
@password_options
@json_option
@admin_command
async def accounts_create(
    admin: Admin,
    name: str,
    devices: int | None,
    valid_until: str | None,
    login: str | None,
    password_source: str | None,
    password_prompt: bool,
    as_json: bool,
) -> None:
    """Create an account; with --login, it can sign in to the console (set a password, or invite)."""
    password = _password(password_source, password_prompt, login)
    if password is not None and login is None:
        raise click.UsageError("a password needs a --login to sign in with")
    account = await admin.store().create_account(name, devices, valid_until, login=login)
    if password is not None:
        await Credentials(admin.text, admin.keys).set_password(account.id, passwords.hash_password(password))
    data = {**account.as_dict(), "password": password is not None}
    emit(as_json, data, lambda: record(_account_row(data), "account created"))


@accounts.command("update")
@click.option("--account", required=True, help="Account id.")
@click.option(
    "--devices",
    type=click.IntRange(min=0),
    default=None,
    help="New device quota: how many instances it may have (a lower one removes none, it refuses new ones).",
)
@click.option("--valid-until", callback=_valid_date, metavar="YYYY-MM-DD", help="New last day of validity.")
@json_option
@admin_command
async def accounts_update(
    admin: Admin, account: str, devices: int | None, valid_until: str | None, as_json: bool
) -> None:
    """Change an account's device quota or validity; the next device/create counts against it."""
    if devices is None and valid_until is None:
        raise click.UsageError("give --devices N or --valid-until YYYY-MM-DD (or both)")
    found = await admin.store().update_account(account, devices=devices, valid_until=valid_until)
    data = found.as_dict()
    emit(as_json, data, lambda: record(_account_row(data), "account updated"))


@accounts.command("set-password")
@click.option("--account", required=True, help="Account id.")
@password_options
@json_option
@admin_command
async def accounts_set_password(
    admin: Admin, account: str, password_source: str | None, password_prompt: bool, as_json: bool
) -> None:
    """Set an account's console password (--password - or --password-prompt); its sessions end."""
    found = await admin.store().get_account(account)
    if found.login is None:
        raise Rejected(f"account {account} has no login to sign in with")
    password = _password(password_source, password_prompt, found.login)
    if password is None:
        raise click.UsageError("give --password - (stdin) or --password-prompt")
    await Credentials(admin.text, admin.keys).set_password(account, passwords.hash_password(password))
    data = {"account": account, "login": found.login, "password": True, "sessions_ended": True}
    emit(as_json, data, lambda: record(data, "password set; every console session of the account ended"))


@accounts.command("set-login")
@click.option("--account", required=True, help="Account id.")
@click.argument("login")
@json_option
@admin_command
async def accounts_set_login(admin: Admin, account: str, login: str, as_json: bool) -> None:
    """Give an account its console login (an e-mail address or a name), or a new one."""
    found = await admin.store().set_login(account, login)
    data = {**found.as_dict(), "password": await Credentials(admin.text, admin.keys).has_password(account)}
    emit(as_json, data, lambda: record(_account_row(data), "login set"))


@accounts.command("invite")
@click.option("--account", required=True, help="Account id (it must have a login).")
@click.option("--expires", default="72h", show_default=True, help="How long the link works: 30m, 72h, 7d.")
@json_option
@admin_command
async def accounts_invite(admin: Admin, account: str, expires: str, as_json: bool) -> None:
    """Print a one-time link with which the developer chooses a password and signs in."""
    try:
        seconds = parse_since(expires)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--expires") from None
    found = await admin.store().get_account(account)
    if found.login is None:
        raise Rejected(f"account {account} has no login: an invitation lets a developer choose the password of a login")
    invitation = await Invitations(admin.text, admin.keys).issue(account, seconds)
    url = admin.settings.public_url.rstrip("/") + invitation_path(invitation.token)
    data = {"account": account, "login": found.login, "url": url, "expires_at": invitation.expires_at}

    def render() -> RenderableType:
        shown = record({**data, "expires_at": when(invitation.expires_at)}, "invitation")
        shown.caption = "The link works once. Send it to the developer only."
        return shown

    emit(as_json, data, render)


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
            ("id", "name", "login", "devices", "valid until", "instances", "denied", "denied by account", "created"),
            (
                (
                    r["id"],
                    r["name"],
                    r["login"],
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
