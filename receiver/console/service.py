"""What the console does, for one signed-in account; the pages and the JSON API both call this.

Every method takes the account and checks ownership first: an ``appid``, a
dead letter or a delivery of another account raises ``svcgw.errors.NotFound``
(``what`` names the thing) exactly like one that does not exist, after the
same kind of look-up. Nothing returned here contains a Bearer token: a
callback configuration says only whether one is set.

Errors::

    ConsoleError
    └── DeniedByOperator  allowing an operation the operator denied; nothing changed
    svcgw.errors.Invalid                     (also a ValueError) a value the console cannot use
    svcgw.errors.NotFound                    unknown, or another account's
    svcgw.delivery.retrynow.NotRetrying      retry now of a delivery that is not retrying
    svcgw.callbacks.addresses.AddressError   a callback address breaks the address rules
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis

from svcgw.callbacks.addresses import check_for_service
from svcgw.callbacks.testpost import CallbackTestResult, send_test
from svcgw.delivery import breaker, byid, deadletters, failingorigins, listing, retrynow
from svcgw.errors import Invalid, NotFound, SvcgwError
from svcgw.intake.calllog import LogEntry, read_log
from svcgw.registry.store import CallbackConfig, OperatorDenied, Scope, normalise_operation
from svcgw.shards.clients import ShardRedis
from svcgw.shards.routing import first_found, shard_client
from svcgw.threads import in_thread
from svcgw.vault import VaultError
from svcgw.views import instances as instance_views

if TYPE_CHECKING:
    from receiver.services import Services

__all__ = [
    "ConsoleError",
    "ConsoleService",
    "DeniedByOperator",
    "SaveResult",
]

MAX_OPERATION_LENGTH = 128


class ConsoleError(SvcgwError):
    """Base class of this module's errors."""


class DeniedByOperator(ConsoleError):
    """The account asked to allow an operation the operator denied it; nothing was changed."""


@dataclass(frozen=True)
class SaveResult:
    callback: dict[str, object]
    test: CallbackTestResult | None

    def as_dict(self) -> dict[str, object]:
        return {"callback": self.callback, "test": self.test.as_dict() if self.test else None}


def _callback_dict(scope: Scope, config: CallbackConfig) -> dict[str, object]:
    return {"scope": "instance" if scope.appid else "account", "appid": scope.appid, **config.as_dict()}


class ConsoleService:
    def __init__(self, services: Services) -> None:
        self.settings = services.settings
        self.store = services.store
        self.raw: Redis = services.redis  # bytes: log bodies
        self.keys = services.keys  # shard 0's names
        self.shards, self.texts = services.shards, services.text_shards  # by shard index: bytes, and text
        self.text: Redis = services.text_redis
        self.vault = services.vault
        self._callbacks = services.callbacks

    # --- ownership -------------------------------------------------------------
    async def check_owner(self, account: str, appid: str) -> ShardRedis:
        """The (bytes) client and names of the instance's shard, read with its owner in one command."""
        found = await self.text.hmget(self.keys.instance(appid), ["account", "shard"]) if 0 < len(appid) <= 200 else [0]
        if found[0] != account:
            raise NotFound(f"no instance {appid[:200]!r}", what="instance")
        return shard_client(self.shards, found[1])

    async def _scope(self, account: str, appid: str | None) -> Scope:
        if appid is None:
            return Scope(account=account)
        await self.check_owner(account, appid)
        return Scope(appid=appid)

    # --- instances -------------------------------------------------------------
    async def instances(self, account: str) -> list[dict[str, Any]]:
        appids = await self.store.instances_of(account)
        views = await instance_views.load_many(
            self.store, self.raw, self.keys, self.settings, appids, last_event=True, shards=self.shards
        )
        return [view.for_owner() for view in views]

    async def instance(self, account: str, appid: str) -> dict[str, Any]:
        await self.check_owner(account, appid)
        view = await instance_views.load(
            self.store, self.raw, self.keys, self.settings, appid, last_event=True, shards=self.shards
        )
        return view.for_owner()

    # --- callback settings ---------------------------------------------------------
    async def callback(self, account: str, appid: str | None) -> dict[str, object]:
        scope = await self._scope(account, appid)
        return _callback_dict(scope, await self.store.get_callback(scope))

    async def save_callback(
        self,
        account: str,
        appid: str | None,
        url: str,
        *,
        bearer_token: str = "",
        bearer: bool | None = None,
        keep_token: bool = False,
    ) -> SaveResult:
        """Save the address and, for a non-empty one, send one ``SvcCallbackTest`` POST to it.

        A blank ``bearer_token`` keeps the stored token while the address
        keeps its origin (scheme, host, port); on a new origin the token is
        deleted unless ``keep_token`` says to keep it, the developer's
        explicit choice. ``bearer`` False deletes it; a blank ``url`` clears
        the address and its token. The
        address is checked against the address rules first (``AddressError``,
        nothing saved); once saved it stays saved whatever the test answers.
        """
        scope = await self._scope(account, appid)
        url = url.strip()
        if not url:
            config = await self.store.clear_callback(scope)
            return SaveResult(_callback_dict(scope, config), None)
        checked = await in_thread(check_for_service, url, self.settings, abandon_on_cancel=False)
        token = bearer_token if bearer is not False else ""
        config = await self.store.set_callback(
            scope, checked.url, bearer_token=token or None, no_bearer=bearer is False, keep_token=keep_token
        )
        test = await self._test(scope, checked.url, config)
        return SaveResult(_callback_dict(scope, config), test)

    async def _test(self, scope: Scope, url: str, config: CallbackConfig) -> CallbackTestResult:
        token: str | None = None
        if config.bearer:
            sealed = await self.text.hget(scope.key(self.keys), "token")
            try:
                token = self.vault.open(sealed) if sealed else None
            except VaultError:  # the test's result, not an error answer: the address is saved all the same
                return CallbackTestResult(
                    ok=False, event_id="", error="the Bearer token cannot be decrypted with the configured keys"
                )
        if not config.secret:
            # Saving an address always leaves a secret; None means it cannot be opened.
            return CallbackTestResult(
                ok=False, event_id="", error="the signing secret cannot be decrypted with the configured keys"
            )
        return await send_test(self._callbacks(), url, secret=config.secret, token=token, appid=scope.appid)

    async def rotate_secret(self, account: str, appid: str | None) -> dict[str, object]:
        scope = await self._scope(account, appid)
        return _callback_dict(scope, await self.store.rotate_secret(scope))

    # --- callback log ------------------------------------------------------------------
    async def log(
        self, account: str, appid: str, *, limit: int = 20, before: str | None = None
    ) -> tuple[list[LogEntry], str | None]:
        """One page of the last 24 h of posts, newest first, and the ``before`` of the next page."""
        raw, keys = await self.check_owner(account, appid)
        if before is not None and not _stream_id(before):
            raise Invalid("before must be a callback log entry id such as 1700000000000-0")
        window = min(self.settings.log_retention, 86400)
        entries = await read_log(raw, keys, self.settings, appid, since_seconds=window, limit=limit + 1, before=before)
        more = len(entries) > limit
        entries = entries[:limit]
        return entries, (entries[-1].id if more and entries else None)

    # --- dead letters --------------------------------------------------------------------
    async def dead_letters(
        self,
        account: str,
        appid: str | None,
        *,
        limit: int = 20,
        offset: int = 0,
        detailed: bool = False,
        destination: str | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """A page of the account's dead letters (of ``appid``'s, of ``destination``'s: a ``dst_…`` id or
        ``primary``, when given), and how many there are."""
        if destination is not None:
            listing.parse_destination(destination)  # Invalid, as the pages and the API answer it
        shards = self.shards if appid is None else (await self.check_owner(account, appid),)
        letters = await deadletters.list_dead(
            shards, self.settings, appid=appid, account=account, destination=destination, limit=limit, offset=offset
        )
        total = await deadletters.count_dead(
            shards, self.settings, appid=appid, account=account, destination=destination
        )
        rows: list[dict[str, Any]] = []
        for letter in letters:
            if detailed:
                try:
                    rows.append(await self.dead_letter(account, letter.id))
                except NotFound:
                    continue  # replayed or expired since it was listed
            else:
                rows.append(letter.as_dict())
        return rows, total

    async def dead_letter(self, account: str, delivery_id: str) -> dict[str, Any]:
        if not delivery_id or len(delivery_id) > 200:
            raise NotFound("no such dead letter", what="dead letter")
        detail = await deadletters.show(self.shards, self.settings, delivery_id, account=account)
        return detail.as_dict()

    async def replay(
        self,
        account: str,
        *,
        ids: Sequence[str] | None = None,
        appid: str | None = None,
        since_seconds: int | None = None,
    ) -> list[dict[str, object]]:
        """Replay the dead letters named, or every one of ``appid``; other accounts' ids come back not_found.

        With ``since_seconds``, only those that died in that last stretch of
        time; then neither ids nor appid is needed (every instance of the account).
        """
        if since_seconds is not None:
            if ids:
                raise Invalid("replay since a time works on an instance or on every instance, not on ids")
            shards = self.shards if appid is None else (await self.check_owner(account, appid),)
            results = await deadletters.replay(
                shards, self.settings, appid=appid, account=account, since=time.time() - since_seconds
            )
            return [result.as_dict() for result in results]
        if bool(ids) == (appid is not None):
            raise Invalid("name dead letters by id, or give an appid for all of its dead letters (exactly one)")
        shards = self.shards if appid is None else (await self.check_owner(account, appid),)
        if ids is not None and (len(ids) > 1000 or any(not isinstance(i, str) or len(i) > 200 for i in ids)):
            raise Invalid("ids must be at most 1000 dead letter ids")
        results = await deadletters.replay(
            shards, self.settings, ids=list(ids) if ids else None, appid=appid, account=account
        )
        return [result.as_dict() for result in results]

    # --- deliveries ------------------------------------------------------------------------
    async def deliveries(
        self,
        account: str,
        appid: str,
        *,
        state: str | None = None,
        event_type: str | None = None,
        event_id: str | None = None,
        destination: str | None = None,
        limit: int = 20,
        before: str | None = None,
    ) -> listing.Page:
        """One page of the instance's deliveries, newest first (``svcgw.delivery.listing``)."""
        raw, keys = await self.check_owner(account, appid)
        if len(event_type or "") > 200 or len(event_id or "") > 200:
            raise Invalid("event_type and event_id are at most 200 characters")
        return await listing.list_deliveries(
            raw,
            keys,
            self.settings,
            appid,
            account=account,
            state=state,
            event_type=event_type,
            event_id=event_id,
            destination=destination,
            limit=limit,
            before=before,
        )

    async def delivery(self, account: str, delivery_id: str) -> listing.Delivery:
        show, settings = byid.show, self.settings
        return await first_found(
            self.shards, lambda shard: show(*shard, settings, delivery_id, account=account), NotFound
        )

    async def retry_now(self, account: str, delivery_id: str) -> listing.Delivery:
        """Bring a retrying delivery's next attempt forward to now (``svcgw.delivery.retrynow``)."""
        retry = retrynow.retry_now  # NotRetrying, as the pages and the API answer it
        await first_found(
            self.shards, lambda shard: retry(*shard, self.settings, delivery_id, account=account), NotFound
        )
        return await self.delivery(account, delivery_id)

    # --- failing destinations, and destinations being probed ----------------------------------
    async def failing(self, account: str, appid: str | None = None) -> list[dict[str, Any]]:
        """The account's failing destinations (``svcgw.delivery.failingorigins``), with the instances
        that use each.

        With ``appid``, only the destination of that instance's address. The account's own records only:
        another account's failures at the same hosts are none of its business.
        """
        users = await self._destinations(account, appid)
        found = await failingorigins.failing_anywhere(self.texts, self.settings, users, account=account)
        return [
            {**record.as_dict(), "appids": users.get(name, [])}
            for name, record in sorted(found.items(), key=lambda item: item[1].first_failure)
        ]

    async def probing(self, account: str, appid: str | None = None) -> list[dict[str, Any]]:
        """The account's destinations being probed (``svcgw.delivery.breaker``: their attempts time out, so
        they get fewer at a time), with the instances whose callback address is each and the further
        destinations (``dst_…``) whose address is. With ``appid``, as :meth:`failing`, and the further
        destinations its events go to. The account's own records only: another account's attempts to the
        same hosts are none of its business."""
        users = await self._destinations(account, appid)
        further = await self._further_destinations(account, appid)
        found = await breaker.tripped_anywhere(self.texts, self.settings, {*users, *further}, account=account)
        return [
            {**record.as_dict(), "appids": users.get(name, []), "destinations": further.get(name, [])}
            for name, record in sorted(found.items(), key=lambda item: item[1].since)
        ]

    async def _further_destinations(self, account: str, appid: str | None) -> dict[str, list[str]]:
        """The origins of the further destinations of the account and its instances (or those ``appid``'s events
        go to: its account's and its own), each with the ids of the destinations there."""
        appids = [appid] if appid is not None else await self.store.instances_of(account)
        by_origin: dict[str, list[str]] = {}
        for config in await self.store.destinations_of(account, appids):
            origin = failingorigins.origin_of(config.url)
            if origin:
                by_origin.setdefault(origin, []).append(config.id)
        return by_origin

    async def _destinations(self, account: str, appid: str | None) -> dict[str, list[str]]:
        """The destinations of the account's instances (or of ``appid`` alone), each with the instances using it."""
        appids = [appid] if appid is not None else await self.store.instances_of(account)
        async with self.text.pipeline(transaction=False) as pipe:
            pipe.hget(self.keys.callback_account(account), "url")
            for one in appids:
                pipe.hget(self.keys.callback_instance(one), "url")
            default, *own = await pipe.execute()
        users: dict[str, list[str]] = {}
        for one, url in zip(appids, own, strict=True):
            destination = failingorigins.origin_of(url or default)
            if destination:
                users.setdefault(destination, []).append(one)
        if appid is None and default:
            users.setdefault(failingorigins.origin_of(default), [])
        return users

    # --- controlled operations ----------------------------------------------------------
    # The console manages the account's own list; the operator's list
    # (``svcgw accounts deny``) is shown but never changed from here.
    async def denied(self, account: str) -> dict[str, list[str]]:
        """``denied`` (every operation the gateway refuses), ``own`` and ``by_operator``."""
        return (await self.store.denials(account)).as_dict()

    async def deny(self, account: str, operations: Sequence[str]) -> dict[str, list[str]]:
        return (await self.store.deny_own(account, _operations(operations))).as_dict()

    async def allow(self, account: str, operations: Sequence[str]) -> dict[str, list[str]]:
        try:
            return (await self.store.allow_own(account, _operations(operations))).as_dict()
        except OperatorDenied as exc:
            raise DeniedByOperator(str(exc)) from None  # the console's own, which its pages and API answer


def _operations(operations: Sequence[str]) -> list[str]:
    cleaned: list[str] = []
    for operation in operations:
        if not isinstance(operation, str):
            raise Invalid("operations are strings such as message/sendText")
        try:
            name = normalise_operation(operation)
        except ValueError:
            name = ""
        parts = name.split("/")
        if (
            not name
            or len(name) > MAX_OPERATION_LENGTH
            or len(parts) != 2
            or not all(part and all(ch.isalnum() or ch in "_-" for ch in part) for part in parts)
        ):
            raise Invalid(f"{operation[:MAX_OPERATION_LENGTH]!r} is not an operation such as message/sendText")
        cleaned.append(name)
    if not cleaned:
        raise Invalid("name at least one operation, such as message/sendText")
    return cleaned


def _stream_id(value: str) -> bool:
    first, _, second = value.partition("-")
    return first.isdigit() and (second == "" or second.isdigit()) and len(value) < 48


def when(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timestamp))
