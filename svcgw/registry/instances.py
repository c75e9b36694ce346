"""Instances in Redis: registered under an account, on a shard, with their receiver token sealed.

The registry is account-wide data (shard 0): each instance's hash names its
shard (``shard``; an instance registered before shards has none and is on
shard 0), and the instance counts per shard (``svcgw.storage.keys.KeySpace.shard_instances``)
change in the same transaction, so that placement reads them with the owner
check in one round trip (:meth:`InstanceStore.owner_and_counts`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from redis.asyncio.client import Pipeline

from svcgw.config.shards import Shard
from svcgw.digests import digest
from svcgw.errors import NotFound
from svcgw.registry.base import StoreBase
from svcgw.shards.placement import instance_counts, token_for_shard
from svcgw.storage.scripts import add_to_transaction

__all__ = ["Instance", "InstanceStore"]


@dataclass(frozen=True)
class Instance:
    appid: str
    account: str
    created_at: float
    fields: dict[str, str] = field(default_factory=dict)


class InstanceStore(StoreBase):
    """Instances and their receiver tokens: a part of :class:`svcgw.registry.store.Store`."""

    async def register_instance(self, appid: str, account_id: str, shard: int = 0) -> str:
        """Register ``appid`` under the account on ``shard``; returns the receiver token (clear), which names the shard.

        The caller checked that ``appid`` has no owner (:meth:`owner_and_counts`).
        Two registrations of one appid at once (the capability layer giving one
        appid to two creations) would count it twice: placement is then off by
        one, nothing else. When ``shard`` does not take the instance's copies,
        :class:`svcgw.registry.copies.ShardUnavailable` is raised before the registry
        is written: the instance may then be registered on another shard.
        """
        token = token_for_shard(secrets.token_urlsafe(24), shard)
        now = time.time()
        if self.copies is not None:
            # Its shard first: once the registry names the instance, its posts can be stored.
            await self.copies.instance(appid, account_id, token, shard)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                self.keys.instance(appid),
                mapping={
                    "account": account_id,
                    "created_at": repr(now),
                    "receiver_token": self.vault.seal(token),
                    "shard": str(shard),
                },
            )
            pipe.hincrby(self.keys.shard_instances, str(shard), 1)
            pipe.set(self.keys.receiver_lookup(digest(token)), appid)
            pipe.sadd(self.keys.account_instances(account_id), appid)
            if shard == 0:
                # Adds it to every instance and, when it is new, to the instance counts of /metrics.
                add_to_transaction(
                    pipe,
                    "liveness_registered",
                    keys=(self.keys.instances, self.keys.metrics_instances, self.keys.instance(appid)),
                    args=(appid,),
                )
            else:  # counted by its own shard, where its liveness is (svcgw.registry.copies)
                pipe.sadd(self.keys.instances, appid)
            await pipe.execute()
        return token

    async def get_instance(self, appid: str) -> Instance:
        data = await self.redis.hgetall(self.keys.instance(appid))
        if not data or "account" not in data:
            raise NotFound(f"no instance {appid!r}", what="instance")
        public = {k: v for k, v in data.items() if k != "receiver_token"}
        return Instance(appid, data["account"], float(data.get("created_at", "0")), public)

    async def owner_and_counts(self, appid: str, shards: Sequence[Shard]) -> tuple[str | None, dict[int, int]]:
        """The owner of ``appid`` (None: not registered) and the instances of each shard, in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(self.keys.instance(appid), "account")
            owner, stored, total = await self._read_counts(pipe).execute()
        return (str(owner) if owner else None), instance_counts(stored, int(total), shards)

    def _read_counts(self, pipe: Pipeline) -> Pipeline:
        pipe.hgetall(self.keys.shard_instances)
        pipe.scard(self.keys.instances)
        return pipe

    async def owner(self, appid: str) -> str | None:
        owner = await self.redis.hget(self.keys.instance(appid), "account")
        return str(owner) if owner else None

    async def instances_of(self, account_id: str) -> list[str]:
        return sorted(await self.redis.smembers(self.keys.account_instances(account_id)))

    async def all_instances(self) -> list[str]:
        return sorted(await self.redis.smembers(self.keys.instances))

    async def receiver_token(self, appid: str) -> str:
        sealed = await self.redis.hget(self.keys.instance(appid), "receiver_token")
        if not sealed:
            raise NotFound(f"no instance {appid!r}", what="instance")
        return self.vault.open(sealed)
