"""``svcgw destinations``: further destinations of an account or instance (``docs/destinations.md``).

Beside the primary callback address (``svcgw callback``), an account (for all
its instances) or one instance may send its events to further destinations,
each with its own address, signing secret, optional Bearer token, event
types, rate limit and enabled flag. ``list``, ``add`` take the scope
(``--account ID`` or ``--appid APPID``); the others take a destination's id.

The address is checked against the address rules before anything is saved,
as ``svcgw callback set`` checks it, and a refused value answers with its
code (-40011/-40012/-40013, -40020 event types, -40021 rate, -40920 too
many). Saving sends one ``SvcCallbackTest`` POST to the destination, signed
with its own secret (``--no-test`` leaves it out): when it is added, and when
an update changes its address or token or enables it again. The Bearer token
is stored sealed and never shown, only whether one is set; like the signing
secret of ``svcgw callback``, a destination's own is shown to the operator
(``show``, ``add``, ``update``, ``rotate``), never in ``list``. A token can be
read from standard input (``--bearer-token -``) or typed at a hidden prompt
(``--bearer-token-prompt``), out of ``ps`` and shell history.
"""

from __future__ import annotations

from collections.abc import Callable

import click
from rich.console import Group, RenderableType
from rich.text import Text

from svcgw.callbacks.addresses import check_for_service
from svcgw.callbacks.destinationrules import split_event_types
from svcgw.callbacks.outbound import sender_for
from svcgw.callbacks.testpost import CallbackTestResult
from svcgw.registry.destinations import KEEP, DestinationChange, DestinationConfig, Keep
from svcgw.registry.destinationtest import needs_test, send_destination_test
from svcgw.registry.store import Scope, Store

from .callback import read_bearer_token
from .context import Admin, admin_command
from .output import emit, json_option, record, table, when

__all__ = ["destinations_group"]


def _scope(account: str | None, appid: str | None) -> Scope:
    if (account is None) == (appid is None):
        raise click.UsageError("give exactly one of --account ID or --appid APPID")
    return Scope(account=account, appid=appid)


def scope_options(func: Callable[..., None]) -> Callable[..., None]:
    func = click.option("--appid", help="One instance's own destinations.")(func)
    return click.option("--account", help="The account's destinations, for all its instances.")(func)


def listing_options(func: Callable[..., None]) -> Callable[..., None]:
    # --appid lists what the instance's events go to, which is more than the instance's own.
    func = click.option("--appid", help="Every destination one instance's events go to: its account's and its own.")(
        func
    )
    return click.option("--account", help="The account's destinations, for all its instances.")(func)


def token_options(func: Callable[..., None]) -> Callable[..., None]:
    func = click.option("--bearer-token-prompt", is_flag=True, help="Type the Bearer token at a hidden prompt.")(func)
    return click.option(
        "--bearer-token",
        default=None,
        metavar="T",
        help="Send 'Authorization: Bearer T' (stored encrypted); '-' reads T from standard input.",
    )(func)


def value_options(func: Callable[..., None]) -> Callable[..., None]:
    func = click.option(
        "--rate",
        default=None,
        metavar="N",
        help="At most N deliveries per second (more than 0, at most 1000; fractions allowed).",
    )(func)
    func = click.option(
        "--event-types",
        default=None,
        metavar="T,T",
        help="Only these event types, such as Msg,InstanceOffline (case-sensitive); default: every type.",
    )(func)
    return click.option("--label", default=None, help="A name for people (up to 100 characters).")(func)


def no_test_option(func: Callable[..., None]) -> Callable[..., None]:
    return click.option("--no-test", is_flag=True, help="Do not send the SvcCallbackTest POST.")(func)


async def _test(admin: Admin, store: Store, destination_id: str) -> CallbackTestResult:
    sender = sender_for(admin.settings, limit=1)
    try:
        return await send_destination_test(store, sender, destination_id)
    finally:
        await sender.aclose()


def _shown(found: DestinationConfig, *, secret: bool = True) -> dict[str, object]:
    # Never the Bearer token: only whether one is set.
    return found.as_dict(secret=secret)


def _record(found: DestinationConfig, title: str, *, secret: bool = True) -> RenderableType:
    rows = {
        **_shown(found, secret=secret),
        "event_types": ", ".join(found.event_types) or "every type",
        "rate": f"{found.rate:g} per second" if found.rate else "no limit",
        "created_at": when(found.created_at),
        "updated_at": when(found.updated_at),
    }
    return record({k: v for k, v in rows.items() if v is not None or k == "appid"}, title)


def _test_line(test: CallbackTestResult | None) -> RenderableType | None:
    if test is None:
        return None
    if test.ok:
        return Text(f"test POST succeeded: HTTP {test.status} in {test.duration_ms} ms (event {test.event_id})")
    status = f" (HTTP {test.status})" if test.status else ""
    return Text(f"test POST failed: {test.error}{status}; the destination is saved all the same")


def _emit_saved(as_json: bool, found: DestinationConfig, test: CallbackTestResult | None, title: str) -> None:
    emit(
        as_json,
        {"destination": _shown(found), "test": test.as_dict() if test else None},
        lambda: Group(*(part for part in (_record(found, title), _test_line(test)) if part is not None)),
    )


@click.group("destinations")
def destinations_group() -> None:
    """Further destinations of an account or instance: beside the callback address, with their own secret,
    token, event types and rate limit."""


@destinations_group.command("list")
@listing_options
@json_option
@admin_command
async def destinations_list(admin: Admin, account: str | None, appid: str | None, as_json: bool) -> None:
    """List them (no secrets); with --appid, every one the instance's events go to: its account's and its own."""
    scope = _scope(account, appid)
    store = admin.store()
    if scope.appid is not None:
        inherited, own = await store.destinations_for(scope.appid)
        found = [*inherited, *own]
    else:
        found = await store.list_destinations(scope)
    rows = [_shown(d, secret=False) for d in found]
    emit(
        as_json,
        rows,
        lambda: table(
            ("id", "scope", "label", "url", "event types", "rate", "enabled", "bearer"),
            (
                (
                    d.id,
                    d.appid or "account",
                    d.label,
                    d.url,
                    ", ".join(d.event_types) or "every type",
                    f"{d.rate:g}/s" if d.rate else "no limit",
                    d.enabled,
                    d.bearer,
                )
                for d in found
            ),
        ),
    )


@destinations_group.command("add")
@scope_options
@click.option("--url", required=True, help="Public http(s) address that accepts POST.")
@value_options
@token_options
@click.option("--disable", "disabled", is_flag=True, help="Add it disabled: nothing is sent to it until enabled.")
@no_test_option
@json_option
@admin_command
async def destinations_add(
    admin: Admin,
    account: str | None,
    appid: str | None,
    url: str,
    label: str | None,
    event_types: str | None,
    rate: str | None,
    bearer_token: str | None,
    bearer_token_prompt: bool,
    disabled: bool,
    no_test: bool,
    as_json: bool,
) -> None:
    """Add a destination, with a signing secret of its own, and send it a test POST."""
    scope = _scope(account, appid)
    token = read_bearer_token(bearer_token, bearer_token_prompt)
    checked = check_for_service(url, admin.settings)
    store = admin.store(sealing=True)
    saved = await store.add_destination(
        scope,
        checked,
        label=label or "",
        event_types=split_event_types(event_types or ""),
        rate=rate,
        enabled=not disabled,
        bearer_token=token,
    )
    test = None if no_test else await _test(admin, store, saved.id)
    _emit_saved(as_json, saved, test, "destination added")


@destinations_group.command("show")
@click.argument("destination_id")
@json_option
@admin_command
async def destinations_show(admin: Admin, destination_id: str, as_json: bool) -> None:
    """Show one, with its signing secret (never its Bearer token)."""
    found = await admin.store(sealing=True).get_destination(destination_id)
    emit(as_json, _shown(found), lambda: _record(found, "destination"))


@destinations_group.command("update")
@click.argument("destination_id")
@click.option("--url", default=None, help="A new address.")
@value_options
@click.option("--all-events", is_flag=True, help="Take every event type again (no filter).")
@click.option("--no-rate", is_flag=True, help="Remove the rate limit.")
@token_options
@click.option("--no-bearer", is_flag=True, help="Remove the Bearer token.")
@click.option("--keep-token", is_flag=True, help="Keep the token for a --url on another scheme, host or port.")
@click.option("--enable/--disable", "enabled", default=None, help="Enable or disable it.")
@no_test_option
@json_option
@admin_command
async def destinations_update(
    admin: Admin,
    destination_id: str,
    url: str | None,
    label: str | None,
    event_types: str | None,
    rate: str | None,
    all_events: bool,
    no_rate: bool,
    bearer_token: str | None,
    bearer_token_prompt: bool,
    no_bearer: bool,
    keep_token: bool,
    enabled: bool | None,
    no_test: bool,
    as_json: bool,
) -> None:
    """Change what is given; without a token option the token stays while the address keeps its origin."""
    if event_types is not None and all_events:
        raise click.UsageError("--event-types and --all-events exclude each other")
    if rate is not None and no_rate:
        raise click.UsageError("--rate and --no-rate exclude each other")
    if (bearer_token is not None or bearer_token_prompt) and no_bearer:
        raise click.UsageError("--bearer-token and --no-bearer exclude each other")
    token = read_bearer_token(bearer_token, bearer_token_prompt)
    store = admin.store(sealing=True)
    before = await store.get_destination(destination_id)
    types: list[str] | Keep = KEEP
    if all_events:
        types = []
    elif event_types is not None:
        types = split_event_types(event_types)
    change = DestinationChange(
        url=KEEP if url is None else check_for_service(url, admin.settings),
        label=KEEP if label is None else label,
        event_types=types,
        rate=None if no_rate else KEEP if rate is None else rate,
        enabled=KEEP if enabled is None else enabled,
        bearer_token=token,
        no_bearer=no_bearer,
        keep_token=keep_token,
    )
    after = await store.update_destination(destination_id, change)
    due = not no_test and needs_test(before, after, new_token=bool(token))
    _emit_saved(as_json, after, await _test(admin, store, destination_id) if due else None, "destination updated")


@destinations_group.command("disable")
@click.argument("destination_id")
@json_option
@admin_command
async def destinations_disable(admin: Admin, destination_id: str, as_json: bool) -> None:
    """Disable it: nothing is sent to it until it is enabled again (update --enable)."""
    after = await admin.store(sealing=True).update_destination(destination_id, DestinationChange(enabled=False))
    _emit_saved(as_json, after, None, "destination disabled")


@destinations_group.command("rotate")
@click.argument("destination_id")
@json_option
@admin_command
async def destinations_rotate(admin: Admin, destination_id: str, as_json: bool) -> None:
    """Replace its signing secret; the old one is not kept."""
    rotated = await admin.store(sealing=True).rotate_destination_secret(destination_id)
    _emit_saved(as_json, rotated, None, "signing secret rotated")


@destinations_group.command("test")
@click.argument("destination_id")
@json_option
@admin_command
async def destinations_test(admin: Admin, destination_id: str, as_json: bool) -> None:
    """Send it one SvcCallbackTest POST now."""
    store = admin.store(sealing=True)
    result = await _test(admin, store, destination_id)
    emit(as_json, result.as_dict(), lambda: _test_line(result))


@destinations_group.command("remove")
@click.argument("destination_id")
@json_option
@admin_command
async def destinations_remove(admin: Admin, destination_id: str, as_json: bool) -> None:
    """Remove it, with its signing secret and Bearer token."""
    removed = await admin.store(sealing=True).remove_destination(destination_id)
    emit(as_json, _shown(removed, secret=False), lambda: _record(removed, "destination removed", secret=False))
