"""Further destinations in Redis: several callback addresses per account or instance (``docs/destinations.md``).

The primary address (``svcgw.registry.callbackconfig``) is untouched by
anything here. A further destination belongs to a scope, an account (it
takes the events of all the account's instances) or one instance, and holds
its own address, signing secret, optional Bearer token, event-type filter,
rate limit and enabled flag. Its values are checked by
``svcgw.callbacks.destinationrules`` and its address, beforehand, by the
address rules: the store takes only a :class:`svcgw.callbacks.addresses.CallbackUrl`.

Keys (``svcgw.storage.keys.KeySpace``): the destination's hash
``destination(id)``; the scope's set of ids, ``destinations_account`` or
``destinations_instance``; the scope's routing record, ``routes_account`` or
``routes_instance`` (``svcgw.callbacks.routes``). Every change writes the
destination's hash, the scope's set and the routing record in one ``WATCH``
transaction over the set and every hash of the scope, so the record is always
the record of what the hashes say, whatever changes run at once; then the
copies on the shards that deliver for the scope follow (``svcgw.registry.copies``).

Secrets and tokens are sealed by the ``TokenVault`` as the primary's are.
The signing secret is opened for its owner (:attr:`DestinationConfig.secret`);
the Bearer token never leaves the store in clear except to sign a test POST
(:meth:`DestinationStore.opened`), and the token follows the primary's rule:
kept while the address keeps its origin, dropped when the origin changes
unless a new token is given or keeping it is asked for.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from redis.exceptions import WatchError

from svcgw.callbacks.addresses import CallbackUrl
from svcgw.callbacks.destinationrules import (
    MAX_DESTINATIONS,
    TooManyDestinations,
    check_bearer_token,
    check_event_types,
    check_label,
    check_rate,
    is_destination_id,
)
from svcgw.callbacks.origins import same_origin
from svcgw.callbacks.recipients import new_signing_secret, open_secret, seal_secret
from svcgw.callbacks.routes import build_routes
from svcgw.errors import NotFound
from svcgw.registry.accounts import AccountStore
from svcgw.registry.base import new_id, optional_float
from svcgw.registry.callbackconfig import Scope
from svcgw.registry.instances import InstanceStore
from svcgw.storage.keys import KeySpace
from svcgw.vault import VaultError

__all__ = [
    "KEEP",
    "DestinationChange",
    "DestinationConfig",
    "DestinationStore",
    "Keep",
    "OpenedDestination",
    "index_key",
    "routes_key",
]

# A change of the scope between a WATCH and its EXEC is retried this many times, then the
# WatchError (a RedisError: "storage busy, retry") goes to the caller.
MAX_TRIES = 20

ScopeName = Literal["account", "instance"]


def index_key(scope: Scope, keys: KeySpace) -> str:
    """The set of the scope's destination ids."""
    if scope.appid is not None:
        return keys.destinations_instance(scope.appid)
    assert scope.account is not None
    return keys.destinations_account(scope.account)


def routes_key(scope: Scope, keys: KeySpace) -> str:
    """The scope's routing record (``svcgw.callbacks.routes``)."""
    if scope.appid is not None:
        return keys.routes_instance(scope.appid)
    assert scope.account is not None
    return keys.routes_account(scope.account)


class Keep(enum.Enum):
    """The value of a :class:`DestinationChange` field that leaves the stored value as it is."""

    KEEP = "keep"


KEEP = Keep.KEEP


@dataclass(frozen=True)
class DestinationChange:
    """What an update changes; a field left at :data:`KEEP` keeps its value.

    ``rate`` None removes the limit; ``event_types`` empty takes every type.
    The Bearer token: ``bearer_token`` replaces it; ``no_bearer`` deletes it;
    neither keeps it while the address keeps its origin, and deletes it on a
    new origin unless ``keep_token``.
    """

    url: CallbackUrl | Keep = KEEP
    label: str | Keep = KEEP
    event_types: Sequence[str] | Keep = KEEP
    rate: float | str | Keep | None = KEEP
    enabled: bool | Keep = KEEP
    bearer_token: str | None = field(default=None, repr=False)
    no_bearer: bool = False
    keep_token: bool = False


@dataclass(frozen=True)
class DestinationConfig:
    """A further destination as its owner sees it: ``secret`` in clear (None when no key opens it), never the token."""

    id: str
    scope: ScopeName
    account: str
    appid: str | None
    label: str
    url: str
    secret: str | None = field(repr=False)
    bearer: bool
    event_types: tuple[str, ...]
    rate: float | None
    enabled: bool
    created_at: float
    updated_at: float

    def as_dict(self, *, secret: bool = True) -> dict[str, object]:
        """Its fields; without the signing secret for a listing (``secret`` False)."""
        data: dict[str, object] = {
            "id": self.id,
            "scope": self.scope,
            "account": self.account,
            "appid": self.appid,
            "label": self.label,
            "url": self.url,
            "bearer": self.bearer,
            "event_types": list(self.event_types),
            "rate": self.rate,
            "enabled": self.enabled,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        if secret:
            data["secret"] = self.secret
        return data


@dataclass(frozen=True)
class OpenedDestination:
    """What a test POST needs: the address, and the secret and token in clear."""

    id: str
    appid: str | None
    url: str
    secret: str = field(repr=False)
    token: str | None = field(repr=False)


@dataclass(frozen=True)
class _Routed:
    """What the routing record needs of a stored destination (``svcgw.callbacks.routes.Routed``)."""

    id: str
    enabled: bool
    event_types: tuple[str, ...]
    created_at: float


def _types(stored: str | None) -> tuple[str, ...]:
    return tuple(name for name in (stored or "").split(",") if name)


def _routed(destination_id: str, data: dict[str, str]) -> _Routed:
    return _Routed(
        destination_id, data.get("enabled") == "1", _types(data.get("event_types")), float(data.get("created_at") or 0)
    )


def _rate_text(rate: float | None) -> str:
    return "" if rate is None else repr(rate)


def _scope_of(data: dict[str, str]) -> Scope:
    appid = data.get("appid") or None
    return Scope(appid=appid) if data.get("scope") == "instance" and appid else Scope(account=data.get("account"))


Change = Callable[[dict[str, str] | None, int], dict[str, str] | None]


class DestinationStore(AccountStore, InstanceStore):
    """Further destinations of accounts and instances: a part of :class:`svcgw.registry.store.Store`."""

    # --- reading -----------------------------------------------------------------------
    async def list_destinations(self, scope: Scope) -> list[DestinationConfig]:
        """The scope's own destinations, oldest first (an instance's, without its account's)."""
        await self._scope_account(scope)
        return await self._listed(scope)

    async def destinations_for(self, appid: str) -> tuple[list[DestinationConfig], list[DestinationConfig]]:
        """Every further destination an instance's events go to: its account's, and its own."""
        account = (await self.get_instance(appid)).account
        return await self._listed(Scope(account=account)), await self._listed(Scope(appid=appid))

    async def destinations_of(self, account: str, appids: Sequence[str]) -> list[DestinationConfig]:
        """The account's own destinations and those of ``appids`` (instances of the account), oldest first.

        Two round trips however many instances: what a page's banners read on every page.
        """
        scopes = [Scope(account=account), *(Scope(appid=appid) for appid in appids)]
        async with self.redis.pipeline(transaction=False) as pipe:
            for scope in scopes:
                pipe.smembers(index_key(scope, self.keys))
            members = await pipe.execute()
        ids = sorted({destination_id for found in members for destination_id in found})
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for destination_id in ids:
                pipe.hgetall(self.keys.destination(destination_id))
            stored = await pipe.execute()
        configs = [self._config(i, data) for i, data in zip(ids, stored, strict=True) if data]
        return sorted(configs, key=lambda config: (config.created_at, config.id))

    async def get_destination(self, destination_id: str, *, account: str | None = None) -> DestinationConfig:
        """One destination; :class:`NotFound` when there is none, or it is not ``account``'s (when given)."""
        data = await self._stored(destination_id, account)
        return self._config(destination_id, data)

    async def opened(self, destination_id: str, *, account: str | None = None) -> OpenedDestination:
        """Its address, secret and token in clear, to sign a test POST; ``VaultError`` when no key opens them."""
        data = await self._stored(destination_id, account)
        secret = open_secret(self.vault, data.get("secret") or "")
        if not secret:
            raise VaultError("the destination has no signing secret")
        sealed = data.get("token")
        token = self.vault.open(sealed) if sealed else None
        return OpenedDestination(destination_id, data.get("appid") or None, data.get("url", ""), secret, token)

    # --- changing -------------------------------------------------------------------------
    async def add_destination(
        self,
        scope: Scope,
        url: CallbackUrl,
        *,
        label: str = "",
        event_types: Sequence[str] = (),
        rate: float | str | None = None,
        enabled: bool = True,
        bearer_token: str | None = None,
    ) -> DestinationConfig:
        """A new destination of ``scope`` with a signing secret of its own.

        Raises ``DestinationRejected`` for a value the rules refuse, and
        :class:`TooManyDestinations` when the scope has ``MAX_DESTINATIONS``.
        """
        account = await self._scope_account(scope)
        checked_label, types, checked_rate = check_label(label), check_event_types(event_types), check_rate(rate)
        check_bearer_token(bearer_token)
        now = repr(time.time())
        mapping = {
            "scope": "instance" if scope.appid is not None else "account",
            "account": account,
            "label": checked_label,
            "url": url.url,
            "secret": self.vault.seal(new_signing_secret()),
            "event_types": ",".join(types),
            "rate": _rate_text(checked_rate),
            "enabled": "1" if enabled else "0",
            "created_at": now,
            "updated_at": now,
        }
        if scope.appid is not None:
            mapping["appid"] = scope.appid
        if bearer_token:
            mapping["token"] = self.vault.seal(bearer_token)
        destination_id = new_id("dst_")

        def create(current: dict[str, str] | None, count: int) -> dict[str, str]:
            if count >= MAX_DESTINATIONS:
                where = "instance" if scope.appid is not None else "account"
                raise TooManyDestinations(
                    f"this {where} has {count} destinations, the most it may have ({MAX_DESTINATIONS}); "
                    "remove one first"
                )
            return mapping

        await self._transact(scope, destination_id, create)
        return self._config(destination_id, mapping)

    async def update_destination(
        self, destination_id: str, change: DestinationChange, *, account: str | None = None
    ) -> DestinationConfig:
        """Apply ``change`` (see :class:`DestinationChange`); values are checked before anything is written."""
        scope = _scope_of(await self._stored(destination_id, account))
        label = KEEP if isinstance(change.label, Keep) else check_label(change.label)
        types = KEEP if isinstance(change.event_types, Keep) else check_event_types(change.event_types)
        rate = KEEP if isinstance(change.rate, Keep) else check_rate(change.rate)
        check_bearer_token(change.bearer_token)
        sealed_token = self.vault.seal(change.bearer_token) if change.bearer_token else None

        def update(current: dict[str, str] | None, count: int) -> dict[str, str]:
            if current is None:
                raise NotFound(f"no destination {destination_id!r}", what="destination")
            new = dict(current)
            if not isinstance(change.url, Keep):
                new["url"] = change.url.url
            if not isinstance(label, Keep):
                new["label"] = label
            if not isinstance(types, Keep):
                new["event_types"] = ",".join(types)
            if not isinstance(rate, Keep):
                new["rate"] = _rate_text(rate)
            if not isinstance(change.enabled, Keep):
                new["enabled"] = "1" if change.enabled else "0"
            if sealed_token is not None:
                new["token"] = sealed_token
            elif change.no_bearer or (not change.keep_token and not same_origin(current.get("url"), new["url"])):
                new.pop("token", None)
            new["updated_at"] = repr(time.time())
            return new

        return self._config(destination_id, await self._transact(scope, destination_id, update) or {})

    async def rotate_destination_secret(self, destination_id: str, *, account: str | None = None) -> DestinationConfig:
        """A new signing secret; the old one is not kept, so deliveries not yet made are signed with the new one."""
        scope = _scope_of(await self._stored(destination_id, account))
        secret = self.vault.seal(new_signing_secret())

        def rotate(current: dict[str, str] | None, count: int) -> dict[str, str]:
            if current is None:
                raise NotFound(f"no destination {destination_id!r}", what="destination")
            return {**current, "secret": secret, "updated_at": repr(time.time())}

        return self._config(destination_id, await self._transact(scope, destination_id, rotate) or {})

    async def remove_destination(self, destination_id: str, *, account: str | None = None) -> DestinationConfig:
        """Remove it with its secret and token; what it was comes back (its secret too, for the last time)."""
        data = await self._stored(destination_id, account)
        removed: dict[str, str] = {}

        def remove(current: dict[str, str] | None, count: int) -> None:
            if current is None:
                raise NotFound(f"no destination {destination_id!r}", what="destination")
            removed.update(current)
            return None

        await self._transact(_scope_of(data), destination_id, remove)
        return self._config(destination_id, removed)

    async def reseal_destinations(self, name: Literal["secret", "token"]) -> int:
        """Seal every destination's ``secret`` or ``token`` under the vault's first key; how many were."""
        count = 0
        scopes = [Scope(account=a) for a in await self.redis.smembers(self.keys.accounts)]
        scopes += [Scope(appid=appid) for appid in await self.redis.smembers(self.keys.instances)]
        for scope in scopes:
            for destination_id in await self.redis.smembers(index_key(scope, self.keys)):
                key = self.keys.destination(destination_id)
                stored = await self.redis.hget(key, name)
                if not stored:
                    continue
                resealed = seal_secret(self.vault, stored) if name == "secret" else self.vault.reseal(stored)
                await self.redis.hset(key, name, resealed)
                await self._copy_destination(scope, destination_id)
                count += 1
        return count

    # --- the parts ----------------------------------------------------------------------------
    async def _scope_account(self, scope: Scope) -> str:
        """The account of the scope; :class:`NotFound` when the account or instance does not exist."""
        if scope.appid is not None:
            return (await self.get_instance(scope.appid)).account
        assert scope.account is not None
        return (await self.get_account(scope.account)).id

    async def _listed(self, scope: Scope) -> list[DestinationConfig]:
        ids = sorted(await self.redis.smembers(index_key(scope, self.keys)))
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for destination_id in ids:
                pipe.hgetall(self.keys.destination(destination_id))
            found = await pipe.execute()
        configs = [self._config(i, data) for i, data in zip(ids, found, strict=True) if data]
        return sorted(configs, key=lambda config: (config.created_at, config.id))

    async def _stored(self, destination_id: str, account: str | None) -> dict[str, str]:
        """The stored hash; one of another account answers exactly as one that does not exist."""
        data: dict[str, str] = {}
        if is_destination_id(destination_id):
            data = await self.redis.hgetall(self.keys.destination(destination_id))
        if not data or (account is not None and data.get("account") != account):
            raise NotFound(f"no destination {destination_id[:40]!r}", what="destination")
        return data

    def _config(self, destination_id: str, data: dict[str, str]) -> DestinationConfig:
        try:
            secret = open_secret(self.vault, data.get("secret") or "") or None
        except VaultError:
            secret = None
        return DestinationConfig(
            id=destination_id,
            scope="instance" if data.get("scope") == "instance" else "account",
            account=data.get("account", ""),
            appid=data.get("appid") or None,
            label=data.get("label", ""),
            url=data.get("url", ""),
            secret=secret,
            bearer=bool(data.get("token")),
            event_types=_types(data.get("event_types")),
            rate=optional_float(data.get("rate")),
            enabled=data.get("enabled") == "1",
            created_at=float(data.get("created_at") or 0),
            updated_at=float(data.get("updated_at") or 0),
        )

    async def _transact(self, scope: Scope, destination_id: str, change: Change) -> dict[str, str] | None:
        """Write what ``change(current hash or None, the scope's count)`` makes of the destination (None: remove
        it), the scope's set and its routing record, in one transaction watching all of the scope's hashes."""
        tries = 0
        while True:
            try:
                new = await self._write(scope, destination_id, change)
                break
            except WatchError:
                tries += 1
                if tries >= MAX_TRIES:
                    raise
        await self._copy_destination(scope, destination_id)
        return new

    async def _write(self, scope: Scope, destination_id: str, change: Change) -> dict[str, str] | None:
        """One try of :meth:`_transact`; ``WatchError`` when a key it watches changed before its ``EXEC``."""
        keys = self.keys
        index, record, own = index_key(scope, keys), routes_key(scope, keys), keys.destination(destination_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(index, own)
            others = sorted(set(await pipe.smembers(index)) - {destination_id})
            if others:
                await pipe.watch(*(keys.destination(other) for other in others))
            # Read on another connection: the WATCH is in place, and one round trip reads them all.
            async with self.redis.pipeline(transaction=False) as reads:
                reads.hgetall(own)
                for other in others:
                    reads.hgetall(keys.destination(other))
                current, *theirs = await reads.execute()
            new = change(current or None, len(others))
            routed = [_routed(other, data) for other, data in zip(others, theirs, strict=True) if data]
            if new is not None:
                routed.append(_routed(destination_id, new))
            pipe.multi()
            pipe.delete(own)
            if new is None:
                pipe.srem(index, destination_id)
            else:
                pipe.hset(own, mapping=new)
                pipe.sadd(index, destination_id)
            pipe.delete(record)
            if routes := build_routes(routed):
                pipe.hset(record, mapping=routes)
            await pipe.execute()
        return new

    async def _copy_destination(self, scope: Scope, destination_id: str) -> None:
        """After a change: the routing record and the destination's hash on the shards that deliver for the scope."""
        if self.copies is not None:

            def names(keys: KeySpace) -> list[str]:
                return [routes_key(scope, keys), keys.destination(destination_id)]

            await self.copies.hashes(scope.appid, names)
