"""Accounts, API keys, instances and callback configuration in Redis.

The gateway, the console and the CLI all manage these through ``Store``; the
key names live in ``svcgw.keys``. API keys and receiver tokens are kept only
as SHA-256 digests for look-up (a high-entropy secret needs no slow hash),
Bearer tokens and signing secrets are sealed by the ``TokenVault``, and
nothing here returns a token in clear. The signing secret is opened for its
owner (:meth:`Store.get_callback`: the spec shows it in the console); one
stored in clear before secrets were sealed is still read
(``svcgw.callbacks.open_secret``) and sealed by :meth:`Store.reseal_tokens`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError

from . import keys
from .callbacks import Destination, choose_destination, new_signing_secret, open_secret, seal_secret
from .credentials import LoginTaken, normalise_login
from .origins import same_origin
from .scripts import text
from .vault import TokenVault, VaultError

__all__ = [
    "Account",
    "ApiKey",
    "CallbackConfig",
    "Denials",
    "Instance",
    "NotFound",
    "OperatorDenied",
    "Scope",
    "Store",
    "digest",
]


class NotFound(LookupError):
    """The account, key or instance does not exist."""


class OperatorDenied(ValueError):
    """The account asked to allow operations that the operator denied it; nothing was changed."""

    def __init__(self, operations: Iterable[str]) -> None:
        self.operations = sorted(operations)
        super().__init__(
            f"{', '.join(self.operations)}: denied by the operator; only the operator can allow "
            f"{'it' if len(self.operations) == 1 else 'them'} again"
        )


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(8)


@dataclass(frozen=True)
class Account:
    id: str
    name: str
    devices: int | None
    valid_until: str | None
    created_at: float
    login: str | None = None  # the console login, as the operator wrote it

    def expired(self, today: date | None = None) -> bool:
        if not self.valid_until:
            return False
        return (today or date.today()) > date.fromisoformat(self.valid_until)

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "devices": self.devices,
            "valid_until": self.valid_until,
            "created_at": self.created_at,
            "login": self.login,
        }


@dataclass(frozen=True)
class Denials:
    """An account's denied operations: the operator's list and the account's own.

    The gateway refuses an operation in either (:meth:`Store.refused`); the
    console changes only ``own`` and shows ``operator`` read-only.
    """

    operator: frozenset[str]
    own: frozenset[str]

    @property
    def all(self) -> list[str]:
        return sorted(self.operator | self.own)

    def as_dict(self) -> dict[str, list[str]]:
        return {"denied": self.all, "own": sorted(self.own), "by_operator": sorted(self.operator)}


@dataclass(frozen=True)
class ApiKey:
    id: str
    account: str
    created_at: float
    revoked_at: float | None
    prefix: str
    label: str = ""
    last_used: float | None = None  # Unix seconds of the last gateway call, written by gateway_admit.lua

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "account": self.account,
            "label": self.label,
            "prefix": self.prefix,
            "created_at": self.created_at,
            "last_used": self.last_used,
            "revoked": self.revoked_at is not None,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True)
class Instance:
    appid: str
    account: str
    created_at: float
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Scope:
    """Where a callback configuration lives: an account default or one instance."""

    account: str | None = None
    appid: str | None = None

    def __post_init__(self) -> None:
        if (self.account is None) == (self.appid is None):
            raise ValueError("a scope is either an account or an instance")

    @property
    def key(self) -> str:
        if self.appid is not None:
            return keys.callback_instance(self.appid)
        assert self.account is not None
        return keys.callback_account(self.account)


@dataclass(frozen=True)
class CallbackConfig:
    """A callback configuration as its owner sees it; ``secret`` is in clear.

    ``secret`` is None when none is set, or when the stored one cannot be
    opened with the configured keys (rotating it sets a fresh one).
    """

    url: str | None
    secret: str | None = field(repr=False)
    bearer: bool

    def as_dict(self) -> dict[str, object]:
        # The signing secret is the owner's to see (spec: visible in the console);
        # the Bearer token never leaves the vault.
        return {"url": self.url, "secret": self.secret, "bearer": self.bearer}


def _f(value: str | None) -> float | None:
    return float(value) if value not in (None, "") else None


class Store:
    def __init__(self, redis: Redis, vault: TokenVault) -> None:
        # ``redis`` must be created with decode_responses=True. redis-py types
        # every answer as ``bytes | str`` whatever that flag says; with it set,
        # answers are ``str``, so the client is handled untyped here.
        self.redis: Any = redis
        self.vault = vault

    # --- accounts -----------------------------------------------------------
    async def create_account(
        self, name: str, devices: int | None = None, valid_until: str | None = None, *, login: str | None = None
    ) -> Account:
        """A new account; with ``login``, the name it signs in to the console with.

        A login is unique without regard to case (``svcgw.credentials``): the
        check and the claim are one ``WATCH`` transaction with the account's
        creation, so two accounts never get one login and a refused one
        (``LoginTaken``) leaves nothing behind.
        """
        if not name.strip():
            raise ValueError("an account needs a name")
        if devices is not None and devices < 0:
            raise ValueError("the device quota cannot be negative")
        if valid_until:
            date.fromisoformat(valid_until)  # raises ValueError with the bad value
        normalised = normalise_login(login) if login is not None else None
        account_id = _new_id("acc_")
        now = time.time()
        mapping = {"name": name, "created_at": repr(now)}
        if devices is not None:
            mapping["devices"] = str(devices)
        if valid_until:
            mapping["valid_until"] = valid_until
        if login is not None:
            mapping["login"] = login.strip()
        async with self.redis.pipeline(transaction=True) as pipe:
            if normalised is not None:
                await pipe.watch(keys.login(normalised))
                if await pipe.exists(keys.login(normalised)):
                    raise LoginTaken(login or "")
                pipe.multi()
                pipe.set(keys.login(normalised), account_id)
            pipe.hset(keys.account(account_id), mapping=mapping)
            pipe.sadd(keys.ACCOUNTS, account_id)
            try:
                await pipe.execute()
            except WatchError:
                raise LoginTaken(login or "") from None
        return Account(account_id, name, devices, valid_until or None, now, mapping.get("login"))

    async def set_login(self, account_id: str, login: str) -> Account:
        """Give an account (a new) console login; its old login, if any, stops naming it.

        Unique without regard to case, as at creation: one ``WATCH``
        transaction checks and claims the new login and frees the old one,
        so a refused login (``LoginTaken``) changes nothing. The password and
        the sessions are left as they are.
        """
        normalised = normalise_login(login)
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(keys.login(normalised), keys.account(account_id))
            data = await pipe.hgetall(keys.account(account_id))
            if not data:
                raise NotFound(f"no account {account_id!r}")
            holder = await pipe.get(keys.login(normalised))
            if holder is not None and holder != account_id:
                raise LoginTaken(login)
            old = data.get("login")
            pipe.multi()
            if old and normalise_login(old) != normalised:
                pipe.delete(keys.login(normalise_login(old)))
            pipe.set(keys.login(normalised), account_id)
            pipe.hset(keys.account(account_id), "login", login.strip())
            try:
                await pipe.execute()
            except WatchError:
                raise LoginTaken(login) from None
        return await self.get_account(account_id)

    async def get_account(self, account_id: str) -> Account:
        data = await self.redis.hgetall(keys.account(account_id))
        if not data:
            raise NotFound(f"no account {account_id!r}")
        devices = data.get("devices")
        return Account(
            id=account_id,
            name=data.get("name", ""),
            devices=int(devices) if devices not in (None, "") else None,
            valid_until=data.get("valid_until") or None,
            created_at=float(data.get("created_at", "0")),
            login=data.get("login") or None,
        )

    async def list_accounts(self) -> list[Account]:
        ids = sorted(await self.redis.smembers(keys.ACCOUNTS))
        return [await self.get_account(account_id) for account_id in ids]

    async def deny(self, account_id: str, operations: Iterable[str]) -> set[str]:
        await self.get_account(account_id)
        ops = [normalise_operation(op) for op in operations]
        if ops:
            await self.redis.sadd(keys.account_denied(account_id), *ops)
        return await self.denied(account_id)

    async def allow(self, account_id: str, operations: Iterable[str]) -> set[str]:
        await self.get_account(account_id)
        ops = [normalise_operation(op) for op in operations]
        if ops:
            await self.redis.srem(keys.account_denied(account_id), *ops)
        return await self.denied(account_id)

    async def denied(self, account_id: str) -> set[str]:
        """The operator's list (``svcgw accounts deny``), which ``deny`` and ``allow`` change."""
        return set(await self.redis.smembers(keys.account_denied(account_id)))

    # The account's own list, managed in the console. The operator's list is
    # separate so that nothing the account does can lift an operator's denial.
    async def denials(self, account_id: str) -> Denials:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.smembers(keys.account_denied(account_id))
            pipe.smembers(keys.account_own_denied(account_id))
            operator, own = await pipe.execute()
        return Denials(frozenset(operator), frozenset(own))

    async def deny_own(self, account_id: str, operations: Iterable[str]) -> Denials:
        ops = [normalise_operation(op) for op in operations]
        if ops:
            await self.redis.sadd(keys.account_own_denied(account_id), *ops)
        return await self.denials(account_id)

    async def allow_own(self, account_id: str, operations: Iterable[str]) -> Denials:
        """Take operations off the account's own list; ``OperatorDenied`` (nothing changed) for the operator's.

        Names match case-insensitively, as at the gateway: allowing
        ``message/sendtext`` lifts an own denial of ``message/sendText``.
        """
        wanted = {normalise_operation(op).lower() for op in operations}
        current = await self.denials(account_id)
        by_operator = {op for op in current.operator if op.lower() in wanted}
        if by_operator:
            raise OperatorDenied(by_operator)
        lifted = [op for op in current.own if op.lower() in wanted]
        if lifted:
            await self.redis.srem(keys.account_own_denied(account_id), *lifted)
        return await self.denials(account_id)

    async def refused(self, account_id: str) -> set[str]:
        """Every operation the gateway refuses the account (both lists), in one read."""
        return set(await self.redis.sunion([keys.account_denied(account_id), keys.account_own_denied(account_id)]))

    # --- API keys -----------------------------------------------------------
    async def create_key(self, account_id: str, label: str = "") -> tuple[ApiKey, str]:
        """A new key for the account, with a label to tell it apart; the clear key is returned only here."""
        label = check_label(label)
        await self.get_account(account_id)
        key_id = _new_id("key_")
        clear = "sk_" + secrets.token_urlsafe(32)
        now = time.time()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                keys.api_key(key_id),
                mapping={
                    "account": account_id,
                    "hash": digest(clear),
                    "prefix": clear[:7],
                    "label": label,
                    "created_at": repr(now),
                },
            )
            pipe.set(keys.api_key_lookup(digest(clear)), key_id)
            pipe.sadd(keys.account_keys(account_id), key_id)
            await pipe.execute()
        return ApiKey(key_id, account_id, now, None, clear[:7], label), clear

    async def get_key(self, key_id: str) -> ApiKey:
        data = await self.redis.hgetall(keys.api_key(key_id))
        if not data:
            raise NotFound(f"no key {key_id!r}")
        return ApiKey(
            id=key_id,
            account=data["account"],
            created_at=float(data.get("created_at", "0")),
            revoked_at=_f(data.get("revoked_at")),
            prefix=data.get("prefix", ""),
            label=data.get("label", ""),
            last_used=_f(data.get("last_used")),
        )

    async def list_keys(self, account_id: str) -> list[ApiKey]:
        await self.get_account(account_id)
        ids = sorted(await self.redis.smembers(keys.account_keys(account_id)))
        return [await self.get_key(key_id) for key_id in ids]

    async def revoke_key(self, key_id: str) -> ApiKey:
        data = await self.redis.hgetall(keys.api_key(key_id))
        if not data:
            raise NotFound(f"no key {key_id!r}")
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(keys.api_key(key_id), "revoked_at", repr(time.time()))
            # Dropping the look-up entry makes the very next call fail.
            pipe.delete(keys.api_key_lookup(data["hash"]))
            await pipe.execute()
        return await self.get_key(key_id)

    async def authenticate(self, presented: str) -> str | None:
        """The account id of a valid, unrevoked key, else None."""
        if not presented or len(presented) > 512:
            return None
        presented_hash = digest(presented)
        key_id = await self.redis.get(keys.api_key_lookup(presented_hash))
        if key_id is None:
            return None
        account, stored_hash, revoked = await self.redis.hmget(
            keys.api_key(key_id), ["account", "hash", "revoked_at"]
        )
        if not account or not stored_hash or revoked:
            return None
        if not hmac.compare_digest(stored_hash, presented_hash):
            return None
        return str(account)

    # --- instances ----------------------------------------------------------
    async def register_instance(self, appid: str, account_id: str) -> str:
        """Register ``appid`` under the account; returns the receiver token (clear)."""
        token = secrets.token_urlsafe(24)
        now = time.time()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                keys.instance(appid),
                mapping={
                    "account": account_id,
                    "created_at": repr(now),
                    "receiver_token": self.vault.seal(token),
                },
            )
            pipe.set(keys.receiver_lookup(digest(token)), appid)
            pipe.sadd(keys.account_instances(account_id), appid)
            # Adds it to every instance and, when it is new, to the instance counts of /metrics.
            pipe.eval(
                text("liveness_registered"), 3, keys.INSTANCES, keys.METRICS_INSTANCES, keys.instance(appid), appid
            )
            await pipe.execute()
        return token

    async def get_instance(self, appid: str) -> Instance:
        data = await self.redis.hgetall(keys.instance(appid))
        if not data or "account" not in data:
            raise NotFound(f"no instance {appid!r}")
        public = {k: v for k, v in data.items() if k != "receiver_token"}
        return Instance(appid, data["account"], float(data.get("created_at", "0")), public)

    async def owner(self, appid: str) -> str | None:
        owner = await self.redis.hget(keys.instance(appid), "account")
        return str(owner) if owner else None

    async def instances_of(self, account_id: str) -> list[str]:
        return sorted(await self.redis.smembers(keys.account_instances(account_id)))

    async def all_instances(self) -> list[str]:
        return sorted(await self.redis.smembers(keys.INSTANCES))

    async def receiver_token(self, appid: str) -> str:
        sealed = await self.redis.hget(keys.instance(appid), "receiver_token")
        if not sealed:
            raise NotFound(f"no instance {appid!r}")
        return self.vault.open(sealed)

    # --- callback configuration --------------------------------------------
    async def get_callback(self, scope: Scope) -> CallbackConfig:
        await self._check_scope(scope)
        data = await self.redis.hgetall(scope.key)
        try:
            secret = open_secret(self.vault, data.get("secret") or "") or None
        except VaultError:
            secret = None
        return CallbackConfig(url=data.get("url") or None, secret=secret, bearer=bool(data.get("token")))

    async def set_callback(
        self,
        scope: Scope,
        url: str,
        *,
        bearer_token: str | None = None,
        no_bearer: bool = False,
        keep_token: bool = False,
    ) -> CallbackConfig:
        """Set the address and say what becomes of the Bearer token.

        * ``bearer_token`` (not blank): it replaces the stored token;
        * ``no_bearer``: the stored token is deleted;
        * neither: the stored token is kept while the address keeps its
          origin (scheme, host, port: ``svcgw.origins``), and deleted when
          the origin changes, so a token never goes to a host it was not
          set for; ``keep_token`` keeps it anyway (the console's explicit
          choice).

        The old address is read and the new one written in one ``WATCH``
        transaction, so a concurrent change cannot slip in between the
        comparison and the write. The URL must already have passed
        ``svcgw.addresses.check_callback_url``. A signing secret is generated
        the first time an address is set.
        """
        await self._check_scope(scope)
        if not url:
            return await self.clear_callback(scope)
        mapping = {"url": url, "updated_at": repr(time.time())}
        if bearer_token:
            mapping["token"] = self.vault.seal(bearer_token)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(scope.key)
                    old_url = await pipe.hget(scope.key, "url")
                    drop = no_bearer or (not bearer_token and not keep_token and not same_origin(old_url, url))
                    pipe.multi()
                    pipe.hset(scope.key, mapping=mapping)
                    pipe.hsetnx(scope.key, "secret", self.vault.seal(new_signing_secret()))
                    if drop:
                        pipe.hdel(scope.key, "token")
                    await pipe.execute()
                    break
                except WatchError:
                    continue
        return await self.get_callback(scope)

    async def rotate_secret(self, scope: Scope) -> CallbackConfig:
        """A new signing secret; the old one is not kept, so pending retries use the new one."""
        await self._check_scope(scope)
        await self.redis.hset(scope.key, mapping={"secret": self.vault.seal(new_signing_secret())})
        return await self.get_callback(scope)

    async def clear_callback(self, scope: Scope) -> CallbackConfig:
        """Remove the address and its token; the secret stays paired with the scope."""
        await self._check_scope(scope)
        await self.redis.hdel(scope.key, "url", "token")
        return await self.get_callback(scope)

    async def destination(self, appid: str) -> Destination | None:
        account = await self.owner(appid)
        if account is None:
            raise NotFound(f"no instance {appid!r}")
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.callback_instance(appid))
            pipe.hgetall(keys.callback_account(account))
            own, default = await pipe.execute()
        return choose_destination(own, default)

    async def reseal_tokens(self) -> int:
        """Re-encrypt every stored Bearer and receiver token under the first key."""
        count = 0
        for account_id in await self.redis.smembers(keys.ACCOUNTS):
            count += await self._reseal(keys.callback_account(account_id), "token")
        for appid in await self.redis.smembers(keys.INSTANCES):
            count += await self._reseal(keys.callback_instance(appid), "token")
            count += await self._reseal(keys.instance(appid), "receiver_token")
        return count

    async def reseal_secrets(self) -> int:
        """Seal every stored signing secret under the first key: those in clear from before, and sealed ones."""
        count = 0
        for account_id in await self.redis.smembers(keys.ACCOUNTS):
            count += await self._reseal(keys.callback_account(account_id), "secret", clear_ok=True)
        for appid in await self.redis.smembers(keys.INSTANCES):
            count += await self._reseal(keys.callback_instance(appid), "secret", clear_ok=True)
        return count

    async def _reseal(self, key: str, name: str, *, clear_ok: bool = False) -> int:
        stored = await self.redis.hget(key, name)
        if not stored:
            return 0
        resealed = seal_secret(self.vault, stored) if clear_ok else self.vault.reseal(stored)
        await self.redis.hset(key, name, resealed)
        return 1

    async def _check_scope(self, scope: Scope) -> None:
        if scope.appid is not None:
            await self.get_instance(scope.appid)
        elif scope.account is not None:
            await self.get_account(scope.account)


MAX_LABEL_LENGTH = 100


def check_label(label: str) -> str:
    """An API key's label, trimmed; ``ValueError`` for one too long or with control characters."""
    label = label.strip()
    if len(label) > MAX_LABEL_LENGTH:
        raise ValueError(f"a key label has at most {MAX_LABEL_LENGTH} characters")
    if not label.isprintable():
        raise ValueError("a key label cannot contain control characters")
    return label


def normalise_operation(operation: str) -> str:
    """``/svc/api/message/sendText`` and ``message/sendText`` name the same operation."""
    op = operation.strip().strip("/")
    for prefix in ("svc/api/", "api/", "svc/"):
        if op.startswith(prefix):
            op = op[len(prefix) :]
            break
    if op.count("/") != 1 or not all(op.split("/")):
        raise ValueError(f"an operation looks like 'module/action', got {operation!r}")
    return op
