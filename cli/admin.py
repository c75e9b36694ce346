"""Administration commands: accounts, keys, callback, instances, dlq, log, secrets.

``register(cli)`` attaches them to the ``svcgw`` group. Every command takes
``--json`` and then prints exactly one JSON document on stdout (the shapes of
the operator's contract); without it, a readable table. User errors (an
unknown account, key or appid, a bad date or URL, an unreachable Redis) end
with a message on stderr and a non-zero exit, never a traceback.

The commands need ``SVCGW_REDIS_URL``; they use the same settings, key names
and ``Store`` as the service itself.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, date, datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import click
import orjson
from cryptography.fernet import Fernet
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from svcgw import keys
from svcgw.addresses import AddressError, check_for_service
from svcgw.calllog import parse_since, read_log
from svcgw.connections import async_client, sync_client
from svcgw.settings import Settings, SettingsError
from svcgw.store import CallbackConfig, Scope, Store
from svcgw.store import NotFound as StoreNotFound
from svcgw.vault import KEY_FILE, TokenVault, VaultError

__all__ = ["register", "safe_redis_url"]

T = TypeVar("T")

_INSTANCE_STATUS_FIELDS = ("status", "reason", "since", "last_probe", "next_probe")
_INSTANCE_HIDDEN_FIELDS = ("account", "created_at")


def safe_redis_url(url: str) -> str:
    """The Redis URL without its password (and without a query, which may carry one)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    # In ``user:password@`` the user is no secret; a lone ``secret@`` may be the password.
    if parts.username and parts.password is not None:
        netloc = f"{parts.username}@{netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class Admin:
    """What one command works with: settings, and Redis clients opened on demand."""

    def __init__(self, settings: Settings) -> None:
        if not settings.redis_configured:
            raise click.ClickException(
                "SVCGW_REDIS_URL (or SVCGW_REDIS_SENTINELS) is required for administration commands: "
                "the Redis of the running service"
            )
        self.settings = settings
        self._redis: Redis | None = None

    @property
    def safe_url(self) -> str:
        if self.settings.redis_sentinels:
            hosts = ",".join(f"{host}:{port}" for host, port in self.settings.redis_sentinels)
            return f"sentinels {hosts} (primary {self.settings.redis_sentinel_master})"
        return safe_redis_url(self.settings.redis_url or "")

    @property
    def redis(self) -> Redis:
        """Synchronous client returning bytes (raw bodies stay raw)."""
        if self._redis is None:
            self._redis = sync_client(self.settings, connect_timeout=5)
        return self._redis

    def store(self, action: Callable[[Store], Awaitable[T]], *, sealing: bool = False) -> T:
        """Run ``action(store)``; ``sealing`` when it may encrypt or decrypt a token."""
        vault = self._vault(sealing)

        async def run() -> T:
            client = async_client(self.settings, decode=True, connect_timeout=5)
            try:
                return await action(Store(client, vault))
            finally:
                await client.aclose()

        return asyncio.run(run())

    def _vault(self, sealing: bool) -> TokenVault:
        settings = self.settings
        if sealing or settings.encryption_keys or (settings.state_dir / KEY_FILE).exists():
            return TokenVault.from_settings(settings)
        # Nothing will be sealed or opened: leave no key file behind as a side effect.
        return TokenVault([Fernet.generate_key().decode("ascii")])

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()


def admin_command(func: Callable[..., None]) -> Callable[..., None]:
    """Give the command an ``Admin`` and turn user errors into a message and exit status 1."""

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> None:
        from .main import load_settings

        admin = Admin(load_settings())
        try:
            func(admin, **kwargs)
        except (RedisConnectionError, RedisTimeoutError):
            raise click.ClickException(f"cannot reach Redis at {admin.safe_url}") from None
        except RedisError as exc:
            raise click.ClickException(f"Redis at {admin.safe_url} answered: {exc}") from None
        except AddressError as exc:
            raise click.ClickException(f"{exc.message} (code {exc.code})") from None
        except (StoreNotFound, LookupError, VaultError, SettingsError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        finally:
            admin.close()

    return wrapper


def json_option(func: Callable[..., None]) -> Callable[..., None]:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document (for scripts) instead of a table."
    )(func)


def scope_options(func: Callable[..., None]) -> Callable[..., None]:
    func = click.option("--appid", help="An instance's own callback configuration.")(func)
    return click.option("--account", help="The account default (instances without their own).")(func)


def _scope(account: str | None, appid: str | None) -> Scope:
    if (account is None) == (appid is None):
        raise click.UsageError("give exactly one of --account ID or --appid APPID")
    return Scope(account=account, appid=appid)


def _valid_date(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise click.BadParameter(f"must be a date like 2027-12-31, got {value!r}") from None


def _valid_since(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_since(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


# --- output --------------------------------------------------------------------
def _console() -> Console:
    # Piped output keeps whole ids on one line.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def emit(as_json: bool, data: object, render: Callable[[], RenderableType | None]) -> None:
    if as_json:
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode("utf-8"))
        return
    renderable = render()
    if renderable is not None:
        _console().print(renderable)


def _cell(value: object) -> Text:
    if value is None or value == "":
        return Text("-")
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    return Text(str(value))


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], title: str | None = None) -> Table:
    # Cells are Text, never markup: ids, URLs and bodies may contain '[...]'.
    result = Table(*columns, title=title, title_justify="left")
    for row in rows:
        result.add_row(*(_cell(value) for value in row))
    return result


def record(data: dict[str, object], title: str | None = None) -> Table:
    return table(("field", "value"), data.items(), title)


def when(timestamp: object) -> str | None:
    """A Unix time as readable UTC, for tables."""
    if timestamp in (None, ""):
        return None
    try:
        moment = datetime.fromtimestamp(float(str(timestamp)), UTC)
    except (ValueError, OverflowError, OSError):
        return str(timestamp)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


# --- accounts ------------------------------------------------------------------
@click.group()
def accounts() -> None:
    """Developer accounts: quota, validity and denied operations."""


@accounts.command("create")
@click.option("--name", required=True, help="Display name of the account.")
@click.option("--devices", type=click.IntRange(min=0), default=None, help="Device quota (default: none).")
@click.option("--valid-until", callback=_valid_date, metavar="YYYY-MM-DD", help="Last day of validity.")
@json_option
@admin_command
def accounts_create(
    admin: Admin, name: str, devices: int | None, valid_until: str | None, as_json: bool
) -> None:
    """Create an account."""
    account = admin.store(lambda store: store.create_account(name, devices, valid_until))
    emit(as_json, account.as_dict(), lambda: record(_account_row(account.as_dict()), "account created"))


@accounts.command("list")
@json_option
@admin_command
def accounts_list(admin: Admin, as_json: bool) -> None:
    """List every account."""

    async def action(store: Store) -> list[dict[str, object]]:
        found = []
        for account in await store.list_accounts():
            data = account.as_dict()
            data["instances"] = len(await store.instances_of(account.id))
            data["denied"] = sorted(await store.denied(account.id))
            found.append(data)
        return found

    rows = admin.store(action)
    emit(
        as_json,
        rows,
        lambda: table(
            ("id", "name", "devices", "valid until", "instances", "denied", "created"),
            (
                (
                    r["id"],
                    r["name"],
                    r["devices"],
                    r["valid_until"],
                    r["instances"],
                    ", ".join(_strings(r["denied"])),
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
    def command(admin: Admin, account: str, operations: tuple[str, ...], as_json: bool) -> None:
        async def action(store: Store) -> set[str]:
            if deny:
                return await store.deny(account, operations)
            return await store.allow(account, operations)

        denied = sorted(admin.store(action))
        emit(
            as_json,
            {"account": account, "denied": denied},
            lambda: table((f"denied operations of {account}",), [(op,) for op in denied] or [("-",)]),
        )

    command.__doc__ = (
        f"{verb} controlled operations (module/action, e.g. message/sendText) for an account; "
        "a denied one answers HTTP 403."
    )
    return click.command(name)(command)


accounts.add_command(_denied_command("deny", deny=True))
accounts.add_command(_denied_command("allow", deny=False))


def _account_row(data: dict[str, object]) -> dict[str, object]:
    return {**data, "created_at": when(data.get("created_at"))}


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


# --- API keys ------------------------------------------------------------------
@click.group("keys")
def keys_group() -> None:
    """API keys of an account."""


@keys_group.command("create")
@click.option("--account", required=True, help="Account id.")
@json_option
@admin_command
def keys_create(admin: Admin, account: str, as_json: bool) -> None:
    """Create an API key; the key is shown once, here only."""
    api_key, clear = admin.store(lambda store: store.create_key(account))
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
def keys_list(admin: Admin, account: str, as_json: bool) -> None:
    """List an account's keys (their prefixes only)."""
    found = admin.store(lambda store: store.list_keys(account))
    rows = [key.as_dict() for key in found]
    emit(
        as_json,
        rows,
        lambda: table(
            ("id", "prefix", "created", "revoked"),
            ((k.id, k.prefix + "…", when(k.created_at), when(k.revoked_at) or "no") for k in found),
        ),
    )


@keys_group.command("revoke")
@click.argument("key_id")
@json_option
@admin_command
def keys_revoke(admin: Admin, key_id: str, as_json: bool) -> None:
    """Revoke a key; the next call with it answers 401."""
    api_key = admin.store(lambda store: store.revoke_key(key_id))
    data = api_key.as_dict()
    emit(
        as_json,
        data,
        lambda: record(
            {**data, "created_at": when(data["created_at"]), "revoked_at": when(data["revoked_at"])}
        ),
    )


# --- callback configuration ----------------------------------------------------
@click.group()
def callback() -> None:
    """Callback (forward) address, signing secret and Bearer token of an account or instance."""


def _callback_data(scope: Scope, config: CallbackConfig) -> dict[str, object]:
    # Never the Bearer token: only whether one is set.
    return {"account": scope.account, "appid": scope.appid, **config.as_dict()}


def _emit_callback(as_json: bool, scope: Scope, config: CallbackConfig, title: str) -> None:
    data = _callback_data(scope, config)
    emit(as_json, data, lambda: record({k: v for k, v in data.items() if v is not None or k == "url"}, title))


@callback.command("show")
@scope_options
@json_option
@admin_command
def callback_show(admin: Admin, account: str | None, appid: str | None, as_json: bool) -> None:
    """Show the configuration (the Bearer token is never shown)."""
    scope = _scope(account, appid)
    config = admin.store(lambda store: store.get_callback(scope))
    _emit_callback(as_json, scope, config, "callback")


@callback.command("set")
@scope_options
@click.option("--url", required=True, help="Public http(s) address that accepts POST.")
@click.option("--bearer-token", default=None, help="Send 'Authorization: Bearer T' (stored encrypted).")
@click.option("--no-bearer", is_flag=True, help="Remove the Bearer token.")
@json_option
@admin_command
def callback_set(
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
    config = admin.store(
        lambda store: store.set_callback(scope, checked.url, bearer_token=bearer_token, no_bearer=no_bearer),
        sealing=bool(bearer_token),
    )
    _emit_callback(as_json, scope, config, "callback set")


@callback.command("rotate-secret")
@scope_options
@json_option
@admin_command
def callback_rotate(admin: Admin, account: str | None, appid: str | None, as_json: bool) -> None:
    """Replace the signing secret; pending retries are signed with the new one."""
    scope = _scope(account, appid)
    config = admin.store(lambda store: store.rotate_secret(scope))
    _emit_callback(as_json, scope, config, "signing secret rotated")


@callback.command("clear")
@scope_options
@json_option
@admin_command
def callback_clear(admin: Admin, account: str | None, appid: str | None, as_json: bool) -> None:
    """Remove the address and its token; an instance falls back to the account default."""
    scope = _scope(account, appid)
    config = admin.store(lambda store: store.clear_callback(scope))
    _emit_callback(as_json, scope, config, "callback cleared")


# --- instances -----------------------------------------------------------------
@click.group()
def instances() -> None:
    """Registered instances: owner, status and the forward address in use."""


async def _instance_data(store: Store, appid: str) -> dict[str, object]:
    instance = await store.get_instance(appid)
    destination = await store.destination(appid)
    data: dict[str, object] = {
        "appid": instance.appid,
        "account": instance.account,
        "created_at": instance.created_at,
    }
    for name in _INSTANCE_STATUS_FIELDS:
        data[name] = instance.fields.get(name)
    for name, value in sorted(instance.fields.items()):
        if name in data or name in _INSTANCE_HIDDEN_FIELDS or "token" in name or name.endswith("hash"):
            continue
        data[name] = value
    data["forward_url"] = destination.url if destination else None
    data["forward_source"] = destination.source if destination else "none"
    return data


def _add_dead_counts(admin: Admin, rows: list[dict[str, object]]) -> None:
    from svcgw.deadletters import count_dead

    for row in rows:
        row["dead_letters"] = count_dead(admin.redis, admin.settings, appid=str(row["appid"]))


@instances.command("list")
@click.option("--account", default=None, help="Only this account's instances.")
@json_option
@admin_command
def instances_list(admin: Admin, account: str | None, as_json: bool) -> None:
    """List instances."""

    async def action(store: Store) -> list[dict[str, object]]:
        if account is not None:
            await store.get_account(account)
            appids = await store.instances_of(account)
        else:
            appids = await store.all_instances()
        rows = []
        for appid in appids:
            try:
                rows.append(await _instance_data(store, appid))
            except StoreNotFound:
                continue  # listed in an index but its record is gone
        return rows

    rows = admin.store(action)
    _add_dead_counts(admin, rows)
    emit(
        as_json,
        rows,
        lambda: table(
            ("appid", "account", "status", "since", "forward address", "source", "dead", "created"),
            (
                (
                    r["appid"],
                    r["account"],
                    _status_text(r),
                    r.get("since"),
                    r["forward_url"],
                    r["forward_source"],
                    r["dead_letters"],
                    when(r["created_at"]),
                )
                for r in rows
            ),
        ),
    )


@instances.command("show")
@click.argument("appid")
@json_option
@admin_command
def instances_show(admin: Admin, appid: str, as_json: bool) -> None:
    """Show one instance."""
    data = admin.store(lambda store: _instance_data(store, appid))
    _add_dead_counts(admin, [data])
    emit(as_json, data, lambda: record({**data, "created_at": when(data["created_at"])}, appid))


def _status_text(row: dict[str, object]) -> str | None:
    status = row.get("status")
    if status and row.get("reason"):
        return f"{status} ({row['reason']})"
    return str(status) if status else None


# --- dead letters --------------------------------------------------------------
@click.group()
def dlq() -> None:
    """Dead letters: deliveries whose retries ran out."""


@dlq.command("list")
@click.option("--appid", default=None, help="Only this instance's dead letters.")
@click.option("--account", default=None, help="Only this account's dead letters.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@json_option
@admin_command
def dlq_list(
    admin: Admin, appid: str | None, account: str | None, limit: int, offset: int, as_json: bool
) -> None:
    """List dead letters, newest first."""
    from svcgw.deadletters import list_dead

    letters = list_dead(admin.redis, admin.settings, appid=appid, account=account, limit=limit, offset=offset)
    emit(
        as_json,
        [letter.as_dict() for letter in letters],
        lambda: table(
            ("id", "appid", "event type", "attempts", "last error", "dead since"),
            ((d.id, d.appid, d.event_type, d.attempts, d.last_error, when(d.dead_at)) for d in letters),
        ),
    )


@dlq.command("show")
@click.argument("delivery_id", metavar="ID")
@json_option
@admin_command
def dlq_show(admin: Admin, delivery_id: str, as_json: bool) -> None:
    """Show one dead letter: its attempts and its body."""
    from svcgw.deadletters import show

    detail = show(admin.redis, admin.settings, delivery_id)
    if as_json:
        emit(True, detail.as_dict(), lambda: None)
        return
    console = _console()
    console.print(
        record(
            {
                "id": detail.id,
                "appid": detail.appid,
                "account": detail.account,
                "event_type": detail.event_type,
                "received": when(detail.received_at),
                "dead since": when(detail.dead_at),
                "last error": detail.last_error,
            },
            "dead letter",
        )
    )
    console.print(
        table(
            ("#", "at", "status", "error", "ms", "destination"),
            (
                (
                    a.get("attempt"),
                    when(a.get("at")),
                    a.get("status"),
                    a.get("error"),
                    a.get("duration_ms"),
                    a.get("destination"),
                )
                for a in detail.attempts
            ),
            "attempts",
        )
    )
    click.echo("body:")
    click.echo(detail.body)


@dlq.command("replay")
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--appid", default=None, help="Every dead letter of this instance.")
@click.option("--all", "replay_all", is_flag=True, help="Every dead letter.")
@json_option
@admin_command
def dlq_replay(
    admin: Admin, ids: tuple[str, ...], appid: str | None, replay_all: bool, as_json: bool
) -> None:
    """Give dead letters one fresh attempt each (a failure returns them here, history kept)."""
    from svcgw.deadletters import replay

    if sum((bool(ids), appid is not None, replay_all)) != 1:
        raise click.UsageError("give dead letter IDs, or --appid APPID, or --all (exactly one)")
    results = replay(admin.redis, admin.settings, ids=list(ids) or None, appid=appid, all=replay_all)
    replayed = sum(1 for r in results if r.replayed)

    def render() -> RenderableType:
        shown = table(("id", "appid", "outcome"), ((r.id, r.appid, r.status) for r in results))
        shown.caption = f"{replayed} of {len(results)} queued for one fresh attempt"
        return shown

    emit(as_json, [r.as_dict() for r in results], render)
    missed = [r for r in results if not r.replayed]
    if missed:
        listed = ", ".join(f"{r.id} ({r.status.replace('_', ' ')})" for r in missed[:10])
        more = f" and {len(missed) - 10} more" if len(missed) > 10 else ""
        raise click.ClickException(f"not replayed: {listed}{more}")


# --- callback log --------------------------------------------------------------
@click.command("log")
@click.argument("appid")
@click.option("--since", callback=_valid_since, metavar="DURATION", help="e.g. 45s, 30m, 1h, 2d.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--before", default=None, metavar="ENTRY_ID", help="Older than this entry (paging).")
@json_option
@admin_command
def log_command(
    admin: Admin, appid: str, since: int | None, limit: int, before: str | None, as_json: bool
) -> None:
    """The callback log of an instance, newest first, bodies exactly as received."""
    if not admin.redis.exists(keys.instance(appid)):
        raise click.ClickException(f"no instance {appid!r}")
    entries = read_log(admin.redis, admin.settings, appid, since_seconds=since, limit=limit, before=before)
    if as_json:
        emit(True, [entry.as_dict() for entry in entries], lambda: None)
        return
    if not entries:
        click.echo("no posts" + (" in that time" if since else ""), err=True)
    for entry in entries:
        click.echo(
            f"--- {entry.id}  {when(entry.received_at)}  accepted={entry.accepted} "
            f"duplicates={entry.duplicates}  delivery={entry.delivery_id or '-'}  state={entry.state or '-'}"
        )
        click.echo(entry.body)


# --- secrets -------------------------------------------------------------------
@click.group("secrets")
def secrets_group() -> None:
    """Encryption of stored tokens."""


@secrets_group.command("reencrypt")
@json_option
@admin_command
def secrets_reencrypt(admin: Admin, as_json: bool) -> None:
    """Re-encrypt every stored token with the first key of SVCGW_ENCRYPTION_KEYS."""
    count = admin.store(lambda store: store.reseal_tokens(), sealing=True)
    emit(as_json, {"resealed": count}, lambda: Text(f"re-encrypted {count} tokens"))


def register(cli: click.Group) -> None:
    for command in (
        accounts,
        keys_group,
        callback,
        instances,
        dlq,
        log_command,
        secrets_group,
    ):
        cli.add_command(command)
