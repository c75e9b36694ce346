"""What an instance's shard holds of the registry: the copies its scripts read there.

The registry (shard 0) is where accounts, instances and callback settings
are kept and changed. An instance's own scripts run on its shard, and two of
them read registry data with their keys, in the same round trip:

* the ingest script checks the receiver token's look-up key and the
  instance's ``account`` (:mod:`svcgw.intake.ingest`);
* the delivery queue's claim reads the instance's callback settings and its
  account's default with each job (``svcgw.delivery.queue``);
* delivery to further destinations reads their routing records and their
  hashes (``docs/destinations.md``).

So the instance's shard holds a copy of those: the look-up key and the
instance hash's ``account`` and ``shard`` (written before the registry's
own, so that no token is handed out whose shard cannot take its posts; the
shard's set of instances lists it, and its liveness is counted there), and
the callback hashes, copied after every change on shard 0 -- an instance's
to its shard, an account default to every other shard, as the account's
instances may be on any of them. Further destinations are copied the same
way (:meth:`ShardCopies.hashes`): a scope's routing record and the hashes of
its destinations, an instance's to its shard, an account's to every other
shard; a destination removed from the registry is removed from the copies.
Copies are whole hashes (``DEL`` then ``HSET`` in one transaction): a copy is
as the registry is, never a merge. That costs a round trip per shard on the
calls that change callback settings or destinations, and nothing on any
other call. On one shard there is nothing to copy, and nothing here runs.

The instance's copies are the first write to its shard when it is created,
so they are what finds the shard down: :class:`ShardUnavailable` says that
nothing of the instance is in the registry yet, and it may be placed on
another shard instead (``receiver.gateway.forwarding``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisClusterException, RedisError

from svcgw.digests import digest
from svcgw.errors import Failure
from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import add_to_transaction


class Scope(Protocol):
    """Where a callback configuration lives (``svcgw.registry.callbackconfig.Scope``): what a copy needs of it."""

    @property
    def appid(self) -> str | None: ...

    def key(self, keys: KeySpace) -> str: ...

__all__ = ["ShardCopies", "ShardUnavailable"]


class ShardUnavailable(Failure, RedisError):
    """A new instance's shard did not take its copies (down, failing over, full): the registry has none of it.

    A ``RedisError``, so a caller that does not place the instance again
    answers it as any storage failure.
    """

    def __init__(self, shard: int, cause: BaseException) -> None:
        self.shard = shard
        # The error's kind only: its text may name the shard's address.
        super().__init__(f"shard {shard} did not take a new instance: {type(cause).__name__}")


class ShardCopies:
    """Writes the copies; ``shards`` are text clients (decode_responses=True) by shard index, shard 0's first."""

    def __init__(self, shards: Sequence[Redis], spaces: Sequence[KeySpace]) -> None:
        if len(shards) != len(spaces):
            raise ValueError("a client and a key space per shard")
        self.shards: tuple[Any, ...] = tuple(shards)
        self.spaces = tuple(spaces)  # each shard's names

    @property
    def registry(self) -> Any:
        return self.shards[0]

    async def instance(self, appid: str, account: str, token: str, shard: int) -> None:
        """The look-up key of ``token`` and the instance's owner on ``shard`` (shard 0 is the registry itself).

        Raises :class:`ShardUnavailable` when ``shard`` does not take them.
        """
        if shard == 0:
            return
        keys = self.spaces[shard]
        try:
            async with self.shards[shard].pipeline(transaction=True) as pipe:
                pipe.hset(keys.instance(appid), mapping={"account": account, "shard": str(shard)})
                pipe.set(keys.receiver_lookup(digest(token)), appid)
                # One of the shard's instances: its liveness changes count in the shard's /metrics counts.
                counts = (keys.instances, keys.metrics_instances, keys.instance(appid))
                add_to_transaction(pipe, "liveness_registered", keys=counts, args=(appid,))
                await pipe.execute()
        except (RedisError, RedisClusterException, OSError) as exc:
            raise ShardUnavailable(shard, exc) from exc

    async def callback(self, scope: Scope) -> None:
        """Copy the callback hash of ``scope`` from the registry: an instance's to its shard, an account's to
        every shard."""
        await self.hashes(scope.appid, lambda keys: [scope.key(keys)])

    async def hashes(self, appid: str | None, names: Callable[[KeySpace], Sequence[str]]) -> None:
        """Copy the hashes ``names`` gives for a shard's names from the registry: to the shard of ``appid``,
        or, for None (an account's), to every shard; each in one transaction per shard.

        A hash the registry does not have is deleted from the copies.
        """
        if len(self.shards) == 1:
            return
        registry = self.spaces[0]
        async with self.registry.pipeline(transaction=False) as pipe:
            for name in names(registry):
                pipe.hgetall(name)
            if appid is not None:
                pipe.hget(registry.instance(appid), "shard")
            found = await pipe.execute()
        if appid is not None:
            shard = found.pop()
            targets = [int(shard)] if shard and shard != "0" else []
        else:
            targets = list(range(1, len(self.shards)))
        await asyncio.gather(
            *(
                self._put_all(self.shards[index], list(zip(names(self.spaces[index]), found, strict=True)))
                for index in targets
            )
        )

    @staticmethod
    async def _put_all(client: Any, copies: Sequence[tuple[str, dict[str, str]]]) -> None:
        async with client.pipeline(transaction=True) as pipe:
            for key, data in copies:
                pipe.delete(key)
                if data:
                    pipe.hset(key, mapping=data)
            await pipe.execute()
