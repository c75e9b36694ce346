"""API keys in Redis: created, listed, revoked, and checked for the gateway.

A key is kept as its SHA-256 digest (:func:`svcgw.registry.base.digest`), with
its first characters to tell it apart; the clear key is shown once.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass

from svcgw.digests import digest
from svcgw.errors import NotFound
from svcgw.registry.accounts import AccountStore
from svcgw.registry.base import new_id, optional_float

__all__ = ["MAX_LABEL_LENGTH", "ApiKey", "KeyStore", "check_label"]


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


class KeyStore(AccountStore):
    """API keys of accounts: a part of :class:`svcgw.registry.store.Store`."""

    async def create_key(self, account_id: str, label: str = "") -> tuple[ApiKey, str]:
        """A new key for the account, with a label to tell it apart; the clear key is returned only here."""
        label = check_label(label)
        await self.get_account(account_id)
        key_id = new_id("key_")
        clear = "sk_" + secrets.token_urlsafe(32)
        now = time.time()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                self.keys.api_key(key_id),
                mapping={
                    "account": account_id,
                    "hash": digest(clear),
                    "prefix": clear[:7],
                    "label": label,
                    "created_at": repr(now),
                },
            )
            pipe.set(self.keys.api_key_lookup(digest(clear)), key_id)
            pipe.sadd(self.keys.account_keys(account_id), key_id)
            await pipe.execute()
        return ApiKey(key_id, account_id, now, None, clear[:7], label), clear

    async def get_key(self, key_id: str) -> ApiKey:
        data = await self.redis.hgetall(self.keys.api_key(key_id))
        if not data:
            raise NotFound(f"no key {key_id!r}", what="api key")
        return ApiKey(
            id=key_id,
            account=data["account"],
            created_at=float(data.get("created_at", "0")),
            revoked_at=optional_float(data.get("revoked_at")),
            prefix=data.get("prefix", ""),
            label=data.get("label", ""),
            last_used=optional_float(data.get("last_used")),
        )

    async def list_keys(self, account_id: str) -> list[ApiKey]:
        await self.get_account(account_id)
        ids = sorted(await self.redis.smembers(self.keys.account_keys(account_id)))
        return [await self.get_key(key_id) for key_id in ids]

    async def revoke_key(self, key_id: str) -> ApiKey:
        data = await self.redis.hgetall(self.keys.api_key(key_id))
        if not data:
            raise NotFound(f"no key {key_id!r}", what="api key")
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(self.keys.api_key(key_id), "revoked_at", repr(time.time()))
            # Dropping the look-up entry makes the very next call fail.
            pipe.delete(self.keys.api_key_lookup(data["hash"]))
            await pipe.execute()
        return await self.get_key(key_id)

    async def authenticate(self, presented: str) -> str | None:
        """The account id of a valid, unrevoked key, else None."""
        if not presented or len(presented) > 512:
            return None
        presented_hash = digest(presented)
        key_id = await self.redis.get(self.keys.api_key_lookup(presented_hash))
        if key_id is None:
            return None
        account, stored_hash, revoked = await self.redis.hmget(
            self.keys.api_key(key_id), ["account", "hash", "revoked_at"]
        )
        if not account or not stored_hash or revoked:
            return None
        if not hmac.compare_digest(stored_hash, presented_hash):
            return None
        return str(account)


MAX_LABEL_LENGTH = 100


def check_label(label: str) -> str:
    """An API key's label, trimmed; ``ValueError`` for one too long or with control characters."""
    label = label.strip()
    if len(label) > MAX_LABEL_LENGTH:
        raise ValueError(f"a key label has at most {MAX_LABEL_LENGTH} characters")
    if not label.isprintable():
        raise ValueError("a key label cannot contain control characters")
    return label
