"""Instances in Redis: registered under an account, with their receiver token sealed."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

from . import keys
from .scripts import text
from .storebase import NotFound, StoreBase, digest

__all__ = ["Instance", "InstanceStore"]


@dataclass(frozen=True)
class Instance:
    appid: str
    account: str
    created_at: float
    fields: dict[str, str] = field(default_factory=dict)


class InstanceStore(StoreBase):
    """Instances and their receiver tokens: a part of :class:`svcgw.store.Store`."""

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
